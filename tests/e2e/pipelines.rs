//! `monitor pipeline`: a pipeline of real steps (each through headless-run) with a gate
//! that fails twice, a loop that exits by its condition, a parallel pair and its merge, a
//! human step approved (its comment reaching the next step) or rejected; the runner killed
//! (-9) at each stage and resumed, every step run exactly once; two resumers; the file's
//! rules — `map` only into declared inputs, subgraphs only beneath the file's directory, a
//! FIFO refused at once, no error quoting a file that is not a pipeline; a step whose tool
//! prompts; the examples.

use headless_run_e2e::*;
use serde_json::Value;
use std::time::Duration;

/// The flow of the issue: task → gate (fails twice) → loop of three → parallel pair → merge
/// → human → task. Every step appends its name to `ran`; `hold` (when present) makes the
/// build wait until it is removed; the last step prints the approver's comment.
const FLOW: &str = r#"
name: flow
inputs: [LEFT]
nodes:
  - id: build
    kind: task
    command: 'echo build >> ran; while [ -e hold ]; do sleep 0.05; done'
  - id: test
    kind: gate
    command: 'echo test >> ran; n=$(cat g 2>/dev/null || echo 0); n=$((n+1)); echo $n > g; [ $n -ge 3 ]'
    retries: 2
  - id: work
    kind: task
    command: 'echo work >> ran; n=$(cat w 2>/dev/null || echo 0); n=$((n+1)); echo $n > w; echo "{\"event\":\"result\",\"data\":{\"left\":$((3-n))}}" >&$HEADLESS_RUN_EVENT_FD'
  - id: more
    kind: branch
    condition: { field: steps.work.result.left, operator: greater_than, value: 0 }
    on_true: work
    on_false: fan
    max_iterations: 5
  - { id: fan, kind: parallel }
  - { id: a, kind: task, command: 'echo a >> ran' }
  - { id: b, kind: task, command: 'echo b >> ran' }
  - { id: join, kind: merge }
  - { id: ok, kind: human, title: Ship, question: 'Ship the flow?', options: [approve, reject] }
  - id: ship
    kind: task
    command: 'echo ship >> ran; echo "comment=$HEADLESS_RUN_APPROVAL_COMMENT left=$LEFT" > shipped'
edges:
  - { from: build, to: test }
  - { from: test, to: work }
  - { from: work, to: more }
  - { from: fan, to: a }
  - { from: fan, to: b }
  - { from: a, to: join }
  - { from: b, to: join }
  - { from: join, to: ok }
  - { from: ok, to: ship, map: { LEFT: steps.work.result.left } }
"#;

fn flow(env: &TestEnv) -> std::path::PathBuf {
    let f = env.work().join("flow.yaml");
    std::fs::write(&f, FLOW).unwrap();
    f
}

/// The steps that ran, in order.
fn ran(env: &TestEnv) -> Vec<String> {
    std::fs::read_to_string(env.work().join("ran"))
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

/// Every step of the flow once (the gate three times, the loop's body three times; a and b
/// in either order).
fn ran_once_each(env: &TestEnv, through_ship: bool) {
    let mut got = ran(env);
    if let (Some(i), Some(j)) = (
        got.iter().position(|s| s == "a"),
        got.iter().position(|s| s == "b"),
    ) && j < i
    {
        got.swap(i, j);
    }
    let mut want = vec![
        "build", "test", "test", "test", "work", "work", "work", "a", "b",
    ];
    if through_ship {
        want.push("ship");
    }
    assert_eq!(got, want);
}

/// The execution as `pipeline status --json` shows it.
pub(crate) fn status(env: &TestEnv, ex: &str) -> Value {
    let out = env
        .monitor()
        .args(["pipeline", "status", ex, "--json"])
        .run();
    out.expect_code(0);
    serde_json::from_str(&out.out()).unwrap()
}

/// The pending approval of execution `ex`, once there is one.
fn pending_of(env: &TestEnv, ex: &str, runner: &Running) -> Value {
    let mut found = Value::Null;
    assert!(
        wait_for_state(Duration::from_secs(60), || {
            let out = env.monitor().args(["approvals", "--json"]).run();
            let all: Value = serde_json::from_str(&out.out()).unwrap_or(Value::Null);
            found = all
                .as_array()
                .into_iter()
                .flatten()
                .find(|a| a["execution_id"] == ex)
                .cloned()
                .unwrap_or(Value::Null);
            !found.is_null()
        }),
        "no approval for {ex}: {}",
        runner.stderr_now()
    );
    found
}

fn run_flow(env: &TestEnv, ex: &str) -> Running {
    let f = flow(env);
    env.monitor()
        .args(["pipeline", "run"])
        .arg(&f)
        .args(["--execution-id", ex])
        .timeout(Duration::from_secs(120))
        .spawn()
}

#[test]
fn a_flow_with_retries_a_loop_a_fan_out_and_a_human_step_approved_with_a_comment() {
    let env = TestEnv::new();
    let runner = run_flow(&env, "EX-flow");
    let ap = pending_of(&env, "EX-flow", &runner);
    assert_eq!(ap["question"], "Ship the flow?");
    assert!(
        ap["context"]
            .as_str()
            .unwrap()
            .contains("Pipeline flow (EX-flow), step ok: Ship"),
        "{ap}"
    );
    // Nothing after the human step runs before the decision.
    ran_once_each(&env, false);
    env.monitor()
        .args(["decide", ap["approval_id"].as_str().unwrap(), "approve"])
        .args(["--comment", "ship it"])
        .run()
        .expect_code(0);
    let out = runner.wait();
    out.expect_code(0);
    assert!(out.out().contains("EX-flow completed"), "{}", out.out());
    ran_once_each(&env, true);
    assert_eq!(
        std::fs::read_to_string(env.work().join("shipped")).unwrap(),
        "comment=ship it left=0\n"
    );
    let st = status(&env, "EX-flow");
    assert_eq!(st["status"], "completed");
    let steps = st["steps"].as_array().unwrap();
    assert!(steps.iter().all(|s| s["status"] == "completed"), "{st}");
    let test = steps.iter().find(|s| s["node"] == "test").unwrap();
    assert_eq!(test["attempt"], 2);
    assert_eq!(
        steps.iter().filter(|s| s["node"] == "work").count(),
        3,
        "three iterations of the loop"
    );
    // Each step was a supervised run of this execution.
    let runs = env
        .monitor()
        .args(["runs", "--json", "--execution", "EX-flow", "--limit", "100"])
        .run();
    let runs: Value = serde_json::from_str(&runs.out()).unwrap();
    // build, test ×3, work ×3, a, b, the human step's question, ship.
    assert_eq!(runs.as_array().unwrap().len(), 11, "{runs}");
    let list = env.monitor().args(["pipeline", "list"]).run();
    assert!(list.out().contains("EX-flow"), "{}", list.out());
}

#[test]
fn a_rejection_over_the_execution_endpoint_fails_the_execution_and_nothing_after_it_runs() {
    use crate::serve::{Served, token};
    let env = TestEnv::new();
    let alice = token(&env, "alice", "operator");
    let runner = run_flow(&env, "EX-no");
    pending_of(&env, "EX-no", &runner);
    // The approval-gate shape: the execution's one pending approval, by its id.
    let served = Served::start(&env);
    let (st, v) = served.json(
        "POST",
        "/api/v1/executions/EX-no/reject",
        &alice,
        Some(r#"{"comment":"not today"}"#),
    );
    assert_eq!(st, 200, "{v}");
    let out = runner.wait();
    out.expect_code(1);
    assert!(out.out().contains("EX-no failed"), "{}", out.out());
    assert!(
        out.out().contains("rejected by alice: not today"),
        "{}",
        out.out()
    );
    ran_once_each(&env, false);
    let st = status(&env, "EX-no");
    assert_eq!(st["status"], "failed");
    assert!(
        st["reason"].as_str().unwrap().contains("step `ok` failed"),
        "{st}"
    );
    // The API shows the same: the pipeline's steps, its runs and its approval.
    let (code, v) = served.json("GET", "/api/v1/executions/EX-no", &alice, None);
    assert_eq!(code, 200, "{v}");
    assert_eq!(v["pipeline"]["status"], "failed");
    assert_eq!(v["pipeline"]["steps"], st["steps"]);
    assert_eq!(v["approvals"][0]["status"], "rejected");
    assert_eq!(v["approvals"][0]["decided_by"], "alice");
    assert_eq!(v["runs"].as_array().map(Vec::len), Some(10), "{v}");
    assert_eq!(
        served
            .json("GET", "/api/v1/executions/EX-none", &alice, None)
            .0,
        404
    );
}

/// Kills the runner (-9) once `ready` holds, then resumes; the flow completes with every
/// step run once.
fn killed_then_resumed(stage: &str, hold: bool, ready: impl Fn(&TestEnv) -> bool) {
    let env = TestEnv::new();
    let ex = format!("EX-{stage}");
    if hold {
        std::fs::write(env.work().join("hold"), "").unwrap();
    }
    let runner = run_flow(&env, &ex);
    assert!(
        wait_for_state(Duration::from_secs(60), || ready(&env)),
        "{stage}: never got there: {}",
        runner.stderr_now()
    );
    runner.signal(libc::SIGKILL);
    // Let go of the step first: its headless-run outlives the runner and holds its output.
    let _ = std::fs::remove_file(env.work().join("hold"));
    runner.wait();
    let resumed = env
        .monitor()
        .args(["pipeline", "resume", &ex])
        .timeout(Duration::from_secs(120))
        .spawn();
    let ap = pending_of(&env, &ex, &resumed);
    env.monitor()
        .args(["decide", ap["approval_id"].as_str().unwrap(), "approve"])
        .run()
        .expect_code(0);
    let out = resumed.wait();
    out.expect_code(0);
    if hold {
        // The build's headless-run outlived the runner: taken over, not started again.
        assert!(
            out.stderr.contains("build: adopted") || out.stderr.contains("build: waiting for"),
            "{}",
            out.stderr
        );
    }
    ran_once_each(&env, true);
    assert_eq!(status(&env, &ex)["status"], "completed");
}

#[test]
fn killed_mid_step_the_resume_adopts_the_running_step() {
    killed_then_resumed("mid-step", true, |env| ran(env) == ["build"]);
}

#[test]
fn killed_between_steps_the_resume_runs_no_step_twice() {
    killed_then_resumed("between", false, |env| ran(env).len() >= 5);
}

#[test]
fn killed_while_waiting_for_the_decision_the_resume_takes_the_same_question() {
    let env = TestEnv::new();
    let runner = run_flow(&env, "EX-wait");
    let ap = pending_of(&env, "EX-wait", &runner);
    runner.signal(libc::SIGKILL);
    runner.wait();
    // Decided while nobody drives it (mid-decision).
    env.monitor()
        .args(["decide", ap["approval_id"].as_str().unwrap(), "approve"])
        .args(["--comment", "later"])
        .run()
        .expect_code(0);
    // Two resumers at once: exactly one drives it, the other is told so.
    let r1 = env
        .monitor()
        .args(["pipeline", "resume", "EX-wait"])
        .timeout(Duration::from_secs(120))
        .spawn();
    let r2 = env
        .monitor()
        .args(["pipeline", "resume", "EX-wait"])
        .timeout(Duration::from_secs(120))
        .spawn();
    let (o1, o2) = (r1.wait(), r2.wait());
    let mut codes = [o1.code(), o2.code()];
    codes.sort();
    assert_eq!(codes, [0, 3], "{}\n{}", o1.context(), o2.context());
    ran_once_each(&env, true);
    assert_eq!(
        std::fs::read_to_string(env.work().join("shipped")).unwrap(),
        "comment=later left=0\n"
    );
    // The same approval was used: no second question was asked.
    let all = env
        .monitor()
        .args([
            "approvals",
            "--status",
            "all",
            "--execution",
            "EX-wait",
            "--json",
        ])
        .run();
    let all: Value = serde_json::from_str(&all.out()).unwrap();
    assert_eq!(
        all.as_array()
            .unwrap()
            .iter()
            .filter(|a| a["execution_id"] == "EX-wait")
            .count(),
        1
    );
    // Resuming what has ended is a conflict; an unknown execution is not found.
    let again = env.monitor().args(["pipeline", "resume", "EX-wait"]).run();
    again.expect_code(3);
    assert!(
        again.stderr.contains("EX-wait has ended (completed"),
        "{}",
        again.context()
    );
    let unknown = env.monitor().args(["pipeline", "resume", "EX-nope"]).run();
    unknown.expect_code(4);
    assert!(
        unknown.stderr.contains("no pipeline execution EX-nope"),
        "{}",
        unknown.context()
    );
}

#[test]
fn detach_exits_90_at_the_human_step_and_cancel_ends_the_execution() {
    let env = TestEnv::new();
    let f = flow(&env);
    let out = env
        .monitor()
        .args(["pipeline", "run", "--detach", "--execution-id", "EX-d"])
        .arg(&f)
        .timeout(Duration::from_secs(120))
        .run();
    out.expect_code(90);
    assert!(out.out().contains("pipeline resume EX-d"), "{}", out.out());
    assert_eq!(status(&env, "EX-d")["status"], "waiting_approval");
    let cancel = env
        .monitor()
        .args(["pipeline", "cancel", "EX-d", "--reason", "changed my mind"])
        .run();
    cancel.expect_code(0);
    let st = status(&env, "EX-d");
    assert_eq!(st["status"], "cancelled");
    assert!(st["reason"].as_str().unwrap().contains("changed my mind"));
    // Every step settles with it: none is shown waiting (or running) any more.
    for s in st["steps"].as_array().unwrap() {
        assert!(
            ["completed", "cancelled", "skipped"].contains(&s["status"].as_str().unwrap()),
            "{s}"
        );
    }
    let human = st["steps"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["node"] == "ok")
        .unwrap();
    assert_eq!(human["status"], "cancelled", "{human}");
    assert!(
        human["reason"]
            .as_str()
            .unwrap()
            .contains("changed my mind"),
        "{human}"
    );
    // Its question is closed with it.
    let pending = env.monitor().args(["approvals", "--json"]).run();
    assert_eq!(pending.out().trim(), "[]", "{}", pending.out());
    env.monitor()
        .args(["pipeline", "resume", "EX-d"])
        .run()
        .expect_code(3);
    env.monitor()
        .args(["pipeline", "cancel", "EX-d"])
        .run()
        .expect_code(3);
    env.monitor()
        .args(["pipeline", "status", "EX-nope"])
        .run()
        .expect_code(4);
    // The same id twice is refused.
    env.monitor()
        .args(["pipeline", "run", "--execution-id", "EX-d"])
        .arg(&f)
        .run()
        .expect_code(3);
}

#[test]
fn a_step_whose_tool_prompts_asks_as_the_steps_approval() {
    let env = TestEnv::new();
    std::fs::write(env.work().join("victim"), "x").unwrap();
    let f = env.work().join("p.yaml");
    std::fs::write(
        &f,
        "nodes:\n  - { id: remove, kind: task, command: [rm, -i, victim] }\n  - { id: after, kind: task, command: 'echo after >> ran' }\nedges:\n  - { from: remove, to: after }\n",
    )
    .unwrap();
    let runner = env
        .monitor()
        .args(["pipeline", "run", "--execution-id", "EX-rm"])
        .arg(&f)
        .timeout(Duration::from_secs(120))
        .spawn();
    let ap = pending_of(&env, "EX-rm", &runner);
    assert!(ap["question"].as_str().unwrap().contains("victim"), "{ap}");
    assert_eq!(ap["tool_name"], "rm");
    env.monitor()
        .args(["decide", ap["approval_id"].as_str().unwrap(), "yes"])
        .run()
        .expect_code(0);
    runner.wait().expect_code(0);
    assert!(!env.work().join("victim").exists());
    assert_eq!(ran(&env), ["after"]);
}

#[test]
fn every_rule_of_the_file_is_checked_before_anything_runs() {
    let env = TestEnv::new();
    let cases: &[(&str, &str)] = &[
        ("nodes:\n  - { id: a, kind: teleport }\n", "p.yaml:2"),
        (
            "nodes:\n  - { id: a, kind: task, command: 'echo a >> ran' }\nedges:\n  - { from: a, to: nowhere }\n",
            "no node `nowhere`",
        ),
        (
            "nodes:\n  - { id: a, kind: task, command: 'echo a >> ran' }\n  - { id: b, kind: task, command: 'true' }\nedges:\n  - { from: a, to: b }\n  - { from: b, to: a }\n",
            "a cycle without a branch",
        ),
        (
            "nodes:\n  - { id: a, kind: task, command: 'echo a >> ran' }\n  - { id: lost, kind: task, command: 'true' }\n",
            "cannot be reached",
        ),
        (
            "nodes:\n  - { id: a, kind: task, command: 'echo a >> ran' }\n  - { id: b, kind: task, command: 'true' }\nedges:\n  - { from: a, to: b, condition: { field: 'steps.a.result.$(x)', operator: exists } }\n",
            "field",
        ),
    ];
    for (text, want) in cases {
        let f = env.work().join("p.yaml");
        std::fs::write(&f, text).unwrap();
        for sub in ["check", "run"] {
            let out = env.monitor().args(["pipeline", sub]).arg(&f).run();
            out.expect_code(2);
            assert!(out.stderr.contains(want), "{sub} {text}: {}", out.stderr);
            assert!(out.stderr.contains("p.yaml"), "{}", out.stderr);
        }
    }
    assert!(ran(&env).is_empty(), "a step ran: {:?}", ran(&env));
    env.monitor()
        .args(["pipeline", "check", "/nonexistent/p.yaml"])
        .run()
        .expect_code(2);
    let list = env.monitor().args(["pipeline", "list", "--json"]).run();
    list.expect_code(0);
    assert_eq!(list.out().trim(), "[]");
}

/// Two tasks: `a` sends `{"id": "v1.2"}`, `b` writes what it was given; `head` goes first,
/// `map` is the edge's.
fn mapping(head: &str, map: &str) -> String {
    format!(
        r#"{head}nodes:
  - id: a
    kind: task
    command: 'echo a >> ran; echo "{{\"event\":\"result\",\"data\":{{\"id\":\"v1.2\"}}}}" >&$HEADLESS_RUN_EVENT_FD'
  - {{ id: b, kind: task, command: 'echo "build=$BUILD tag=$PIPELINE_TAG" > got' }}
edges:
  - {{ from: a, to: b, map: {map} }}
"#
    )
}

#[test]
fn a_map_into_an_undeclared_name_is_refused_and_a_declared_one_reaches_its_step() {
    let env = TestEnv::new();
    let f = env.work().join("p.yaml");
    for (text, want) in [
        (
            mapping("", "{ BUILD: steps.a.result.id }"),
            "edge a → b: map: `BUILD` is not declared: list it under `inputs:`",
        ),
        (
            mapping(
                "inputs: [LD_PRELOAD]\n",
                "{ LD_PRELOAD: steps.a.result.id }",
            ),
            "inputs: `LD_PRELOAD` would let a step's result change what runs",
        ),
        (
            mapping("", "{ NODE_OPTIONS: steps.a.result.id }"),
            "`NODE_OPTIONS` would let a step's result change what runs",
        ),
    ] {
        std::fs::write(&f, &text).unwrap();
        for sub in ["check", "run"] {
            let out = env.monitor().args(["pipeline", sub]).arg(&f).run();
            out.expect_code(2);
            assert!(out.stderr.contains(want), "{sub}: {}", out.stderr);
            assert!(out.stderr.contains("p.yaml:"), "{}", out.stderr);
        }
    }
    assert!(ran(&env).is_empty(), "a step ran: {:?}", ran(&env));
    // Declared (and a PIPELINE_ name, which needs no declaration): the step gets both.
    std::fs::write(
        &f,
        mapping(
            "inputs: [BUILD]\n",
            "{ BUILD: steps.a.result.id, PIPELINE_TAG: steps.a.result.id }",
        ),
    )
    .unwrap();
    env.monitor()
        .args(["pipeline", "check"])
        .arg(&f)
        .run()
        .expect_code(0);
    env.monitor()
        .args(["pipeline", "run"])
        .arg(&f)
        .timeout(Duration::from_secs(120))
        .run()
        .expect_code(0);
    assert_eq!(
        std::fs::read_to_string(env.work().join("got")).unwrap(),
        "build=v1.2 tag=v1.2\n"
    );
}

/// `dir/main.yaml`, whose subgraph `s` is `file`.
fn including(dir: &std::path::Path, file: &str) -> std::path::PathBuf {
    let main = dir.join("main.yaml");
    std::fs::write(
        &main,
        format!(
            "nodes:\n  - {{ id: a, kind: task, command: 'echo a >> ran' }}\n  - {{ id: s, kind: subgraph, file: {file:?} }}\nedges:\n  - {{ from: a, to: s }}\n"
        ),
    )
    .unwrap();
    main
}

#[test]
fn a_subgraph_out_of_its_pipelines_directory_is_refused() {
    let env = TestEnv::new();
    let dir = env.work().join("p");
    std::fs::create_dir_all(&dir).unwrap();
    let outside = env.work().join("outside.yaml");
    std::fs::write(
        &outside,
        "nodes:\n  - { id: x, kind: task, command: 'echo outside >> ran' }\n",
    )
    .unwrap();
    std::os::unix::fs::symlink(&outside, dir.join("link.yaml")).unwrap();
    std::fs::copy(&outside, dir.join("inside.yaml")).unwrap();
    let absolute = outside.display().to_string();
    for (sub, want) in [
        ("../outside.yaml", "`..` leads out of its directory"),
        (absolute.as_str(), "an absolute path"),
        ("link.yaml", "outside"),
    ] {
        let main = including(&dir, sub);
        for cmd in ["check", "run"] {
            let out = env.monitor().args(["pipeline", cmd]).arg(&main).run();
            out.expect_code(2);
            assert!(out.stderr.contains(want), "{sub}: {}", out.stderr);
            assert!(
                out.stderr.contains("main.yaml:3:") && out.stderr.contains("subgraph `s`"),
                "{sub}: {}",
                out.stderr
            );
        }
    }
    assert!(ran(&env).is_empty(), "a step ran: {:?}", ran(&env));
    // The same file beneath the pipeline's directory is fine.
    env.monitor()
        .args(["pipeline", "check"])
        .arg(including(&dir, "inside.yaml"))
        .run()
        .expect_code(0);
}

#[test]
fn a_fifo_as_a_subgraph_or_as_the_file_is_refused_without_waiting_for_a_writer() {
    let env = TestEnv::new();
    let fifo = env.work().join("fifo.yaml");
    let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: a NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    // No writer ever comes: a read would wait forever. The timeout only guards the test.
    for file in [including(&env.work(), "fifo.yaml"), fifo.clone()] {
        let out = env
            .monitor()
            .args(["pipeline", "check"])
            .arg(&file)
            .timeout(Duration::from_secs(60))
            .run();
        out.expect_code(2);
        assert!(
            out.stderr.contains("a FIFO, not a regular file"),
            "{}",
            out.stderr
        );
    }
}

#[test]
fn a_subgraph_that_is_not_yaml_is_refused_without_its_content_in_the_error() {
    let env = TestEnv::new();
    let secret = "root:$6$e2eS3cretSaltQ$Xq1hashhashhash:19000:0:99999:7:::";
    for text in [
        format!("{secret}\nbin:*:19000:0:99999:7:::\n"),
        format!(
            "-----BEGIN OPENSSH PRIVATE KEY-----\n{secret}\n-----END OPENSSH PRIVATE KEY-----\n"
        ),
        format!("token: [\"{secret}\"\n"),
    ] {
        std::fs::write(env.work().join("shadow"), &text).unwrap();
        let main = including(&env.work(), "shadow");
        let out = env.monitor().args(["pipeline", "check"]).arg(&main).run();
        out.expect_code(2);
        assert!(!out.stderr.contains("e2eS3cretSalt"), "{}", out.stderr);
        assert!(!out.out().contains("e2eS3cretSalt"), "{}", out.out());
        assert!(out.stderr.contains("/shadow:"), "{}", out.stderr);
        assert!(
            out.stderr.contains("not a pipeline file") && out.stderr.contains("not shown"),
            "{}",
            out.stderr
        );
    }
}

#[test]
fn the_examples_run() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples");
    for (file, comment, want) in [
        (
            "deploy.yaml",
            "go",
            "deploying app-1.2.3.tar.gz (approved: go)",
        ),
        (
            "agent-loop.yaml",
            "lgtm",
            "merged after 2 attempts; review said lgtm",
        ),
        // A loop's spent iterations escalate to a person.
        (
            "escalate.yaml",
            "over to me",
            "handed over after 3 attempts; over to me",
        ),
        // The first mirror to answer wins; the other is cancelled.
        ("fastest-mirror.yaml", "ok", "installed from near; ok"),
        // Checks two at a time, a lint that may fail, merged results, routed by operators.
        (
            "release.yaml",
            "ship",
            "published v2.4.0 at 84% coverage; ship",
        ),
    ] {
        let env = TestEnv::new();
        env.monitor()
            .args(["pipeline", "check"])
            .arg(root.join(file))
            .run()
            .expect_code(0);
        let runner = env
            .monitor()
            .args(["pipeline", "run", "--execution-id", "EX-example"])
            .arg(root.join(file))
            .timeout(Duration::from_secs(120))
            .spawn();
        let ap = pending_of(&env, "EX-example", &runner);
        env.monitor()
            .args(["decide", ap["approval_id"].as_str().unwrap(), "approve"])
            .args(["--comment", comment])
            .run()
            .expect_code(0);
        runner.wait().expect_code(0);
        let runs = env
            .monitor()
            .args([
                "runs",
                "--json",
                "--execution",
                "EX-example",
                "--limit",
                "100",
            ])
            .run();
        let runs: Value = serde_json::from_str(&runs.out()).unwrap();
        let last = &runs[0];
        let out = env
            .monitor()
            .args(["show", last["tool_run_id"].as_str().unwrap()])
            .run();
        assert!(out.out().contains(want), "{file}: {}", out.out());
    }
}

#[test]
fn the_worker_resumes_a_pipeline_after_its_decision_and_one_whose_runner_vanished() {
    let env = TestEnv::new();
    let f = flow(&env);
    env.monitor()
        .args(["pipeline", "run", "--detach", "--execution-id", "EX-w"])
        .arg(&f)
        .timeout(Duration::from_secs(120))
        .run()
        .expect_code(90);
    // Nothing to do for the worker until the decision comes.
    let idle = env.monitor().args(["worker", "--once"]).run();
    idle.expect_code(0);
    assert!(!idle.out().contains("EX-w"), "{}", idle.out());
    let out = env.monitor().args(["approvals", "--json"]).run();
    let pending: Value = serde_json::from_str(&out.out()).unwrap();
    env.monitor()
        .args([
            "decide",
            pending[0]["approval_id"].as_str().unwrap(),
            "approve",
        ])
        .args(["--comment", "by the worker"])
        .run()
        .expect_code(0);
    let worker = env.monitor().args(["worker", "--once"]).run();
    worker.expect_code(0);
    assert!(
        worker
            .out()
            .contains("EX-w: pipeline flow resumed (a decision came)"),
        "{}",
        worker.context()
    );
    // The resume runs the rest of the pipeline on its own (the worker does not wait).
    assert!(wait_for_state(Duration::from_secs(60), || {
        status(&env, "EX-w")["status"] == "completed"
    }));
    ran_once_each(&env, true);

    // A runner killed mid-step: the worker finds its runner gone and carries on.
    let env = TestEnv::new();
    std::fs::write(env.work().join("hold"), "").unwrap();
    let p = env.work().join("two.yaml");
    std::fs::write(
        &p,
        "nodes:\n  - { id: one, kind: task, command: 'echo one >> ran; while [ -e hold ]; do sleep 0.05; done' }\n  - { id: two, kind: task, command: 'echo two >> ran' }\nedges:\n  - { from: one, to: two }\n",
    )
    .unwrap();
    let runner = env
        .monitor()
        .args(["pipeline", "run", "--execution-id", "EX-v"])
        .arg(&p)
        .timeout(Duration::from_secs(120))
        .spawn();
    assert!(wait_for_state(Duration::from_secs(30), || ran(&env) == ["one"]));
    runner.signal(libc::SIGKILL);
    std::fs::remove_file(env.work().join("hold")).unwrap();
    runner.wait();
    let worker = env.monitor().args(["worker", "--once"]).run();
    assert!(
        worker
            .out()
            .contains("EX-v: pipeline two resumed (its runner is gone)"),
        "{}",
        worker.context()
    );
    assert!(wait_for_state(Duration::from_secs(60), || {
        status(&env, "EX-v")["status"] == "completed"
    }));
    assert_eq!(ran(&env), ["one", "two"]);
}

/// The runner killed (-9) at each point where a write meets the world — after marking a
/// step running, after keeping its headless-run's pid, after its exit, after marking a human
/// step, after asking its question, after closing its run on the decision — and resumed:
/// every step ran once, one question was asked, and the flow completed.
#[test]
fn killed_at_every_point_of_a_step_the_resume_runs_each_step_once() {
    for point in [
        "after-mark",
        "after-pid",
        "after-exit",
        "after-ask-mark",
        "after-ask",
        "after-close",
    ] {
        let env = TestEnv::new();
        let ex = format!("EX-{point}");
        let f = flow(&env);
        // A decision moves its step itself; the runner closes the question's run when the
        // approval expires instead (after-close: killed right after that).
        let expiring = point == "after-close";
        if expiring {
            let text = std::fs::read_to_string(&f).unwrap().replace(
                "options: [approve, reject] }",
                "options: [approve, reject], expires: 2s }",
            );
            std::fs::write(&f, text).unwrap();
        }
        let runner = env
            .monitor()
            .args(["pipeline", "run", "--execution-id", &ex])
            .arg(&f)
            .env("HEADLESS_RUN_TEST_CRASH", point)
            .timeout(Duration::from_secs(120))
            .spawn();
        let died = runner.wait();
        assert_eq!(
            died.signal,
            Some(libc::SIGKILL),
            "{point}: {}",
            died.context()
        );
        let resumed = env
            .monitor()
            .args(["pipeline", "resume", &ex])
            .timeout(Duration::from_secs(120))
            .spawn();
        if !expiring {
            let ap = pending_of(&env, &ex, &resumed);
            env.monitor()
                .args(["decide", ap["approval_id"].as_str().unwrap(), "approve"])
                .run()
                .expect_code(0);
        }
        let out = resumed.wait();
        out.expect_code(if expiring { 1 } else { 0 });
        ran_once_each(&env, !expiring);
        let all = env
            .monitor()
            .args(["approvals", "--status", "all", "--execution", &ex, "--json"])
            .run();
        let all: Value = serde_json::from_str(&all.out()).unwrap();
        assert_eq!(all.as_array().map(Vec::len), Some(1), "{point}: {all}");
        let st = status(&env, &ex);
        if expiring {
            assert_eq!(all[0]["status"], "expired", "{point}: {all}");
            assert_eq!(st["status"], "failed", "{point}: {st}");
            assert!(st["reason"].as_str().unwrap().contains("expired"), "{st}");
        } else {
            assert_eq!(st["status"], "completed", "{point}");
        }
    }
}

/// The dashboard's pipelines pane: the execution with its steps, and its waiting human step
/// approved by key.
#[test]
fn the_dashboard_shows_a_pipeline_and_approves_its_human_step_by_key() {
    use crate::dashboard::{Tmux, monitor_argv};
    let env = TestEnv::new();
    let f = flow(&env);
    env.monitor()
        .args(["pipeline", "run", "--detach", "--execution-id", "EX-dash"])
        .arg(&f)
        .timeout(Duration::from_secs(120))
        .run()
        .expect_code(90);
    let exit_file = env.path().join("dashboard.exit");
    let tmux = Tmux::start(&env, 150, 45, &monitor_argv(&env, &exit_file));
    tmux.wait_for(&env, "the pipelines pane", Duration::from_secs(20), |s| {
        s.contains("Pipelines (1)")
            && s.contains("EX-dash")
            && s.contains("waiting_approval")
            && s.contains("work×3✓")
            && s.contains("ok?")
    });
    // Runs → Approvals → Pipelines, then `a` on the selected pipeline.
    tmux.keys(&["Tab", "Tab"]);
    tmux.wait_for(&env, "the pane's keys", Duration::from_secs(10), |s| {
        s.contains("the waiting human step")
    });
    tmux.keys(&["a"]);
    assert!(wait_for_state(Duration::from_secs(20), || {
        let out = env
            .monitor()
            .args(["approvals", "--status", "approved", "--json"])
            .run();
        out.out().contains("\"decision_channel\": \"tui\"")
            || out.out().contains("\"decision_channel\":\"tui\"")
    }));
    env.monitor()
        .args(["pipeline", "resume", "EX-dash"])
        .timeout(Duration::from_secs(120))
        .run()
        .expect_code(0);
    tmux.wait_for(
        &env,
        "the pipeline completed",
        Duration::from_secs(20),
        |s| s.contains("completed") && s.contains("ship✓"),
    );
    ran_once_each(&env, true);
}

#[test]
fn a_human_step_that_names_its_deciders_is_decided_only_by_them() {
    use crate::serve::{Served, token};
    let env = TestEnv::new();
    let (alice, bob) = (
        token(&env, "alice", "operator"),
        token(&env, "bob", "operator"),
    );
    let f = env.work().join("gate.yaml");
    std::fs::write(
        &f,
        "nodes:\n  - { id: ok, kind: human, title: Ship, question: 'Ship it?', deciders: [alice] }\n  - { id: ship, kind: task, command: 'echo ship >> ran' }\nedges:\n  - { from: ok, to: ship }\n",
    )
    .unwrap();
    env.monitor()
        .args(["pipeline", "run", "--detach", "--execution-id", "EX-who"])
        .arg(&f)
        .run()
        .expect_code(90);
    let out = env.monitor().args(["approvals", "--json"]).run();
    let pending: Value = serde_json::from_str(&out.out()).unwrap();
    let ap = pending[0]["approval_id"].as_str().unwrap().to_owned();
    // This OS user is not alice.
    let refused = env.monitor().args(["decide", &ap, "approve"]).run();
    refused.expect_code(1);
    assert!(
        refused.stderr.contains("only alice may decide"),
        "{}",
        refused.stderr
    );
    let served = Served::start(&env);
    let (st, v) = served.json("POST", "/api/v1/executions/EX-who/approve", &bob, None);
    assert_eq!(st, 403, "{v}");
    assert!(v["error"].as_str().unwrap().contains("only alice"), "{v}");
    let (st, v) = served.json(
        "POST",
        &format!("/api/v1/approvals/{ap}/approve"),
        &alice,
        None,
    );
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["decided_by"], "alice");
    env.monitor()
        .args(["pipeline", "resume", "EX-who"])
        .timeout(Duration::from_secs(60))
        .run()
        .expect_code(0);
    assert_eq!(ran(&env), ["ship"]);
}

/// A pipeline whose resume fails (its stored definition damaged) is not tried again on every
/// pass: the worker waits longer after each failure.
#[test]
fn the_worker_backs_off_a_pipeline_it_cannot_resume() {
    let env = TestEnv::new();
    let f = env.work().join("one.yaml");
    std::fs::write(&f, "nodes:\n  - { id: a, kind: task, command: 'true' }\n").unwrap();
    env.monitor()
        .args(["pipeline", "run", "--execution-id", "EX-bad"])
        .arg(&f)
        .run()
        .expect_code(0);
    // Open again, with a runner that is gone and a definition nothing can read.
    env.raw_db()
        .execute(
            "UPDATE pipelines SET status = 'running', runner = 'elsewhere 1 1', \
             heartbeat_at = '2000-01-01T00:00:00.000Z', definition = '{\"broken\": true}' \
             WHERE execution_id = 'EX-bad'",
            [],
        )
        .unwrap();
    let worker = env
        .monitor()
        .args(["worker", "--interval", "100ms"])
        .timeout(Duration::from_secs(60))
        .spawn();
    std::thread::sleep(Duration::from_secs(3));
    worker.signal(libc::SIGTERM);
    let out = worker.wait();
    let said = out.out();
    assert_eq!(
        said.matches("EX-bad: pipeline").count(),
        2,
        "one resume and its failure in 3 s, not one a pass: {said}"
    );
    assert!(
        said.contains("EX-bad: pipeline one resumed (its runner is gone)"),
        "{said}"
    );
    assert!(
        said.contains("EX-bad: pipeline failed, or could not be resumed"),
        "{said}"
    );
}

/// A step that names a host label waits for a worker of that label: a worker of another
/// label leaves it; of two workers of its label one claims it; that worker killed (-9) while
/// the step runs, the runner takes the step over (waits for its headless-run, runs nothing
/// twice), and the step's result reaches the next step.
#[test]
fn a_labelled_step_runs_on_one_worker_of_its_label_and_a_killed_worker_is_taken_over() {
    let env = TestEnv::new();
    let f = env.work().join("labels.yaml");
    std::fs::write(
        &f,
        r#"name: labels
nodes:
  - { id: a, kind: task, command: 'echo a >> ran' }
  - id: b
    kind: task
    host: builder
    command: 'echo b >> ran; while [ -e hold ]; do sleep 0.05; done; echo "{\"event\":\"result\",\"data\":{\"on\":\"builder\"}}" >&$HEADLESS_RUN_EVENT_FD'
  - { id: c, kind: task, command: 'echo "c $PIPELINE_FROM" >> ran' }
edges:
  - { from: a, to: b }
  - { from: b, to: c, map: { PIPELINE_FROM: steps.b.result.on } }
"#,
    )
    .unwrap();
    std::fs::write(env.work().join("hold"), "").unwrap();
    let runner = env
        .monitor()
        .args(["pipeline", "run", "--execution-id", "EX-lab"])
        .arg(&f)
        .timeout(Duration::from_secs(120))
        .spawn();
    // (Null until the runner has recorded the execution.)
    let step = |name: &str| -> Value {
        let out = env
            .monitor()
            .args(["pipeline", "status", "EX-lab", "--json"])
            .run();
        serde_json::from_str::<Value>(&out.out()).unwrap_or(Value::Null)["steps"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|s| s["node"] == name)
            .cloned()
            .unwrap_or(Value::Null)
    };
    assert!(
        wait_for_state(Duration::from_secs(30), || step("b")["status"] == "ready"),
        "{}",
        runner.stderr_now()
    );
    // A label that is no label is refused before anything runs.
    let bad = env
        .monitor()
        .args(["worker", "--once", "--labels", "build er"])
        .run();
    bad.expect_code(2);
    assert!(bad.stderr.contains("a label is"), "{}", bad.stderr);
    // A worker of another label runs nothing.
    let other = env
        .monitor()
        .args(["worker", "--once", "--labels", "deployer,tester"])
        .run();
    other.expect_code(0);
    assert_eq!(ran(&env), ["a"]);
    assert_eq!(step("b")["status"], "ready");
    let worker = || {
        env.monitor()
            .args(["worker", "--labels", "builder", "--interval", "100ms"])
            .timeout(Duration::from_secs(120))
            .spawn()
    };
    let (w1, w2) = (worker(), worker());
    assert!(
        wait_for_state(Duration::from_secs(30), || step("b")["run"]["pid"].is_i64()),
        "{}{}",
        w1.stderr_now(),
        w2.stderr_now()
    );
    let who = step("b")["run"]["worker"].as_str().unwrap().to_owned();
    let pid: i32 = who.split(' ').nth(1).unwrap().parse().unwrap();
    let (claimed, idle) = if pid == w1.pid() { (w1, w2) } else { (w2, w1) };
    assert_eq!(
        claimed.pid(),
        pid,
        "the step names the worker that runs it: {who}"
    );
    claimed.signal(libc::SIGKILL);
    assert!(
        wait_until(Duration::from_secs(20), || runner
            .stderr_now()
            .contains("its worker")),
        "the runner takes the step over: {}",
        runner.stderr_now()
    );
    std::fs::remove_file(env.work().join("hold")).unwrap();
    let out = runner.wait();
    out.expect_code(0);
    assert_eq!(ran(&env), ["a", "b", "c builder"], "{}", out.stderr);
    idle.signal(libc::SIGTERM);
    idle.wait().expect_code(0);
    let _ = claimed.wait();
}

/// A decision moves its human step in its own transaction: with no runner alive (detached),
/// the step is completed and the next one ready the moment `monitor decide` returns, the
/// question's run has ended and the approval is used up; a resume then runs the rest. A
/// rejection fails the execution the same way.
#[test]
fn a_decision_moves_its_human_step_in_the_same_transaction_with_no_runner_alive() {
    let env = TestEnv::new();
    let f = env.work().join("gate.yaml");
    std::fs::write(
        &f,
        "nodes:\n  - { id: ok, kind: human, title: Ship, question: 'Ship it?' }\n  - { id: ship, kind: task, command: 'echo \"ship $HEADLESS_RUN_APPROVAL_COMMENT\" >> ran' }\nedges:\n  - { from: ok, to: ship }\n",
    )
    .unwrap();
    for ex in ["EX-yes", "EX-no"] {
        env.monitor()
            .args(["pipeline", "run", "--detach", "--execution-id", ex])
            .arg(&f)
            .run()
            .expect_code(90);
    }
    let approval_of = |ex: &str| {
        let out = env.monitor().args(["approvals", "--json"]).run();
        let all: Value = serde_json::from_str(&out.out()).unwrap();
        all.as_array()
            .unwrap()
            .iter()
            .find(|a| a["execution_id"] == ex)
            .unwrap()["approval_id"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    let (yes, no) = (approval_of("EX-yes"), approval_of("EX-no"));
    env.monitor()
        .args(["decide", &yes, "approve", "--comment", "now"])
        .run()
        .expect_code(0);
    let st = status(&env, "EX-yes");
    assert_eq!(st["status"], "running", "{st}");
    let steps = st["steps"].as_array().unwrap();
    assert_eq!(steps[0]["status"], "completed", "{st}");
    assert_eq!(steps[0]["comment"], "now", "{st}");
    assert_eq!(steps[1]["status"], "ready", "{st}");
    let shown = env.monitor().args(["show", &yes, "--json"]).run();
    shown.expect_code(0);
    let shown: Value = serde_json::from_str(&shown.out()).unwrap();
    assert!(!shown["consumed_at"].is_null(), "used up: {shown}");
    let runs = env
        .monitor()
        .args(["runs", "--json", "--execution", "EX-yes"])
        .run();
    let runs: Value = serde_json::from_str(&runs.out()).unwrap();
    assert_eq!(runs[0]["status"], "completed", "{runs}");
    assert_eq!(
        runs[0]["reason"],
        format!("approved by {}: now", crate::dashboard::current_user()),
        "{runs}"
    );
    assert!(!env.work().join("ran").exists());
    env.monitor()
        .args(["pipeline", "resume", "EX-yes"])
        .timeout(Duration::from_secs(60))
        .run()
        .expect_code(0);
    assert_eq!(ran(&env), ["ship now"]);

    env.monitor()
        .args(["decide", &no, "reject", "--comment", "not today"])
        .run()
        .expect_code(0);
    let st = status(&env, "EX-no");
    assert_eq!(st["status"], "failed", "{st}");
    assert!(st["reason"].as_str().unwrap().contains("not today"), "{st}");
    assert_eq!(ran(&env), ["ship now"]);
}

/// A pipeline that fails while its human step waits withdraws the question: no approval is
/// left pending for an execution that no longer waits.
#[test]
fn a_pipeline_that_fails_while_its_human_step_waits_withdraws_the_question() {
    let env = TestEnv::new();
    let f = env.work().join("fail.yaml");
    std::fs::write(
        &f,
        "nodes:\n  - { id: fan, kind: parallel }\n  - { id: ok, kind: human, title: Ship, question: 'Ship it?' }\n  - { id: bad, kind: task, command: 'while [ ! -e asked ]; do sleep 0.05; done; exit 3' }\n  - { id: ship, kind: task, command: 'echo ship >> ran' }\nedges:\n  - { from: fan, to: ok }\n  - { from: fan, to: bad }\n  - { from: ok, to: ship }\n",
    )
    .unwrap();
    let runner = env
        .monitor()
        .args(["pipeline", "run", "--execution-id", "EX-fail"])
        .arg(&f)
        .timeout(Duration::from_secs(60))
        .spawn();
    // The question is asked before the other way fails.
    let ap = pending_of(&env, "EX-fail", &runner);
    std::fs::write(env.work().join("asked"), "").unwrap();
    let out = runner.wait();
    out.expect_code(1);
    let shown = env
        .monitor()
        .args(["show", ap["approval_id"].as_str().unwrap(), "--json"])
        .run();
    shown.expect_code(0);
    let shown: Value = serde_json::from_str(&shown.out()).unwrap();
    assert_eq!(shown["status"], "expired", "{shown}");
    assert_eq!(shown["decided_by"], "system:run-ended", "{shown}");
    let pending = env.monitor().args(["approvals", "--json"]).run();
    assert_eq!(pending.out().trim(), "[]", "{}", out.stderr);
    assert!(!env.work().join("ran").exists());
}

/// DESIGN §14: what runs is what was checked and pinned when the execution started. A
/// definition rewritten in the row afterwards (past monitor: a task's command changed) runs
/// no step — the step fails, not started, saying why.
#[test]
fn a_tampered_definition_runs_no_step() {
    let env = TestEnv::new();
    let f = env.work().join("pinned.yaml");
    std::fs::write(
        &f,
        "nodes:\n  - { id: ok, kind: human, title: Ship, question: 'Ship it?' }\n  - { id: ship, kind: task, command: 'echo ship >> ran' }\nedges:\n  - { from: ok, to: ship }\n",
    )
    .unwrap();
    env.monitor()
        .args(["pipeline", "run", "--detach", "--execution-id", "EX-pin"])
        .arg(&f)
        .run()
        .expect_code(90);
    let changed = env
        .raw_db()
        .execute(
            "UPDATE pipelines SET definition = replace(definition, 'echo ship', 'echo tampered') WHERE execution_id = 'EX-pin'",
            [],
        )
        .unwrap();
    assert_eq!(changed, 1);
    let ap = env.pending_approval();
    env.decide(s(&ap, "approval_id"), "approve").expect_code(0);
    let out = env
        .monitor()
        .args(["pipeline", "resume", "EX-pin"])
        .timeout(Duration::from_secs(60))
        .run();
    out.expect_code(1);
    assert!(
        ran(&env).is_empty(),
        "a step of the tampered definition ran"
    );
    let st = status(&env, "EX-pin");
    assert_eq!(st["status"], "failed", "{st}");
    assert!(
        st.to_string().contains("not the one it started with"),
        "{st}"
    );
}

/// A human step that says no `expires` expires by the configured `approval_ttl`, as any
/// approval does; one that says it keeps its own.
#[test]
fn a_human_step_expires_by_the_configured_ttl_unless_it_says_otherwise() {
    let env = TestEnv::new();
    env.write_config("[defaults]\napproval_ttl = \"2h\"\n");
    let file = env.work().join("gate.yaml");
    std::fs::write(
        &file,
        "name: gate\nnodes:\n  - { id: a, kind: human, title: A, question: 'First?' }\n  - { id: b, kind: human, title: B, question: 'Second?', expires: 5m }\nedges:\n  - { from: a, to: b }\n",
    )
    .unwrap();
    env.monitor()
        .args(["pipeline", "run", "--detach", "--execution-id", "EX-ttl"])
        .arg(&file)
        .run()
        .expect_code(90);
    let a = env.pending_approval();
    let left = |a: &serde_json::Map<String, Value>| {
        let at = |k: &str| {
            hr_shared::time::parse_rfc3339(a[k].as_str().unwrap_or_else(|| panic!("no {k}: {a:?}")))
                .unwrap()
        };
        at("expires_at").duration_since(at("created_at")).unwrap()
    };
    let ttl = left(&a);
    assert!(
        ttl >= Duration::from_secs(7190) && ttl <= Duration::from_secs(7210),
        "{ttl:?}"
    );
    env.decide(a["approval_id"].as_str().unwrap(), "approve")
        .expect_code(0);
    env.monitor()
        .args(["pipeline", "resume", "EX-ttl", "--detach"])
        .run()
        .expect_code(90);
    let b = env.pending_approval();
    assert_eq!(b["question"], "Second?");
    let ttl = left(&b);
    assert!(
        ttl >= Duration::from_secs(290) && ttl <= Duration::from_secs(310),
        "{ttl:?}"
    );
}
