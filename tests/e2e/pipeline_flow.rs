//! How a pipeline flows, end to end through `monitor pipeline run` and real steps: a
//! `wait_for: first` merge that goes on with the fast branch and stops the slow one, a loop
//! that escalates to a human step once its iterations are spent, `fail_fast: false` and
//! `continue_on_failure`, `max_parallel`, a cancel while a step runs, and `pipeline check`
//! naming every error of a file in one run.

use crate::pipelines::status;
use headless_run_e2e::*;
use serde_json::Value;
use std::time::Duration;

fn write(env: &TestEnv, name: &str, text: &str) -> std::path::PathBuf {
    let f = env.work().join(name);
    std::fs::write(&f, text).unwrap();
    f
}

fn lines(env: &TestEnv, file: &str) -> Vec<String> {
    std::fs::read_to_string(env.work().join(file))
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

/// The latest visit of `node` in a status.
fn step<'a>(st: &'a Value, node: &str) -> &'a Value {
    st["steps"]
        .as_array()
        .unwrap()
        .iter()
        .rev()
        .find(|s| s["node"] == node)
        .unwrap_or_else(|| panic!("no step {node}: {st}"))
}

fn run(env: &TestEnv, file: &std::path::Path, ex: &str) -> Running {
    env.monitor()
        .args(["pipeline", "run", "--execution-id", ex])
        .arg(file)
        .timeout(Duration::from_secs(120))
        .spawn()
}

/// The run a step ran in, as `monitor runs --json` has it: the one its headless-run
/// (the step's pid) recorded.
fn run_of(env: &TestEnv, ex: &str, st: &Value) -> Value {
    let pid = st["run"]["pid"].as_i64().expect("the step's headless-run");
    let out = env
        .monitor()
        .args(["runs", "--json", "--limit", "0", "--execution", ex])
        .run();
    let runs: Value = serde_json::from_str(&out.out()).unwrap();
    runs.as_array()
        .unwrap()
        .iter()
        .find(|r| r["shim_pid"] == pid)
        .cloned()
        .unwrap_or_else(|| panic!("no run of pid {pid}: {runs}"))
}

/// The slow branch would sleep ten minutes: the pipeline ends only because it is stopped.
const RACE: &str = r#"
name: race
nodes:
  - { id: fan, kind: parallel, branches: [fast, slow] }
  - id: fast
    kind: task
    command: 'while [ ! -e started ]; do sleep 0.05; done; echo fast >> ran; echo "{\"event\":\"result\",\"data\":{\"mirror\":\"fast\"}}" >&$HEADLESS_RUN_EVENT_FD'
  - id: slow
    kind: task
    label: The slow mirror
    command: 'touch started; sleep 600; echo slow >> ran'
  - { id: join, kind: merge, wait_for: first, strategy: first }
  - { id: end, kind: task, command: 'echo "end $PIPELINE_MIRROR" >> ran' }
edges:
  - { from: fast, to: join }
  - { from: slow, to: join }
  - { id: use-winner, from: join, to: end, map: { PIPELINE_MIRROR: steps.join.result.mirror } }
"#;

#[test]
fn a_first_merge_goes_on_with_the_fast_branch_and_stops_the_slow_one() {
    let env = TestEnv::new();
    let f = write(&env, "race.yaml", RACE);
    let out = run(&env, &f, "EX-race").wait();
    out.expect_code(0);
    assert_eq!(lines(&env, "ran"), ["fast", "end fast"]);
    let st = status(&env, "EX-race");
    assert_eq!(st["status"], "completed", "{st}");
    let slow = step(&st, "slow");
    assert_eq!(slow["status"], "cancelled", "{slow}");
    assert!(
        slow["reason"]
            .as_str()
            .unwrap()
            .contains("`fast` reached merge `join` first"),
        "{slow}"
    );
    // Its run was stopped, not left running, and nothing of it is left alive.
    let r = run_of(&env, "EX-race", slow);
    assert_eq!(r["status"], "cancelled", "{r}");
    assert!(r["completed_at"].is_string(), "{r}");
    assert_eq!(step(&st, "join")["result"]["mirror"], "fast");
    let human = env.monitor().args(["pipeline", "status", "EX-race"]).run();
    assert!(human.out().contains("cancelled"), "{}", human.out());
    // The label the file gave the step is shown beside its id.
    assert!(
        human.out().contains("slow (The slow mirror)"),
        "{}",
        human.out()
    );
}

const ESCALATE: &str = r#"
name: escalate
nodes:
  - id: fix
    kind: task
    command: 'echo fix >> ran; echo "{\"event\":\"result\",\"data\":{\"green\":false}}" >&$HEADLESS_RUN_EVENT_FD'
  - id: again
    kind: branch
    condition: { field: steps.fix.result.green, operator: not_equals, value: true }
    on_true: fix
    on_false: merge_it
    max_iterations: 2
    on_max_iterations_reached: human
  - { id: merge_it, kind: task, command: 'echo merged >> ran' }
  - { id: human, kind: human, title: Stuck, question: 'Three attempts failed: take over?' }
  - { id: handoff, kind: task, command: 'echo "handoff $HEADLESS_RUN_APPROVAL_COMMENT" >> ran' }
edges:
  - { from: fix, to: again }
  - { from: human, to: handoff }
"#;

#[test]
fn a_loop_escalates_to_a_human_step_once_its_iterations_are_spent() {
    let env = TestEnv::new();
    let f = write(&env, "escalate.yaml", ESCALATE);
    let runner = run(&env, &f, "EX-esc");
    let mut ap = Value::Null;
    assert!(
        wait_for_state(Duration::from_secs(60), || {
            let out = env.monitor().args(["approvals", "--json"]).run();
            let all: Value = serde_json::from_str(&out.out()).unwrap_or(Value::Null);
            ap = all.get(0).cloned().unwrap_or(Value::Null);
            !ap.is_null()
        }),
        "no question: {}",
        runner.stderr_now()
    );
    assert_eq!(lines(&env, "ran"), ["fix", "fix", "fix"]);
    let st = status(&env, "EX-esc");
    assert_eq!(st["status"], "waiting_approval");
    let branch = step(&st, "again");
    assert_eq!(
        branch["result"]["outcome"], "max_iterations_reached",
        "{branch}"
    );
    assert_eq!(step(&st, "merge_it")["status"], "skipped");
    env.monitor()
        .args(["decide", ap["approval_id"].as_str().unwrap(), "approve"])
        .args(["--comment", "mine now"])
        .run()
        .expect_code(0);
    runner.wait().expect_code(0);
    assert_eq!(
        lines(&env, "ran"),
        ["fix", "fix", "fix", "handoff mine now"]
    );
}

const FAILING: &str = r#"
name: partial
fail_fast: false
nodes:
  - { id: fan, kind: parallel, branches: [lint, bad, good] }
  - { id: lint, kind: task, command: 'echo lint >> ran; exit 1', continue_on_failure: true }
  - { id: after_lint, kind: task, command: 'echo after_lint >> ran' }
  - { id: bad, kind: task, command: 'echo bad >> ran; exit 3' }
  - { id: after_bad, kind: task, command: 'echo after_bad >> ran' }
  - { id: good, kind: task, command: 'while ! grep -q bad ran 2>/dev/null; do sleep 0.05; done; sleep 0.5; echo good >> ran' }
  - { id: after_good, kind: task, command: 'echo after_good >> ran' }
edges:
  - { from: lint, to: after_lint }
  - { from: bad, to: after_bad }
  - { from: good, to: after_good }
"#;

#[test]
fn without_fail_fast_the_other_ways_finish_and_a_step_that_may_fail_leads_on() {
    let env = TestEnv::new();
    let f = write(&env, "partial.yaml", FAILING);
    let out = run(&env, &f, "EX-part").wait();
    out.expect_code(1);
    let mut ran = lines(&env, "ran");
    ran.sort();
    assert_eq!(
        ran,
        ["after_good", "after_lint", "bad", "good", "lint"],
        "the failed way stops; the others run to their end"
    );
    let st = status(&env, "EX-part");
    assert_eq!(st["status"], "failed");
    assert!(
        st["reason"].as_str().unwrap().contains("step `bad` failed"),
        "{st}"
    );
    assert_eq!(step(&st, "lint")["status"], "failed");
    assert_eq!(step(&st, "after_good")["status"], "completed");
}

/// Five tasks that each note how many of them run at that moment.
fn fan_of_five(bound: &str) -> String {
    let mut text = format!(
        "name: five\n{bound}nodes:\n  - {{ id: fan, kind: parallel, branches: [t1, t2, t3, t4, t5] }}\n"
    );
    for i in 1..=5 {
        text.push_str(&format!(
            "  - {{ id: t{i}, kind: task, command: 'mkdir -p live; touch live/t{i}; ls live | wc -l >> peaks; sleep 1; rm live/t{i}' }}\n"
        ));
    }
    text
}

#[test]
fn max_parallel_bounds_the_steps_running_at_once() {
    let env = TestEnv::new();
    let f = write(&env, "five.yaml", &fan_of_five("max_parallel: 2\n"));
    run(&env, &f, "EX-five").wait().expect_code(0);
    let peaks: Vec<u32> = lines(&env, "peaks")
        .iter()
        .map(|l| l.trim().parse().unwrap())
        .collect();
    assert_eq!(peaks.len(), 5, "{peaks:?}");
    assert!(peaks.iter().all(|p| *p <= 2), "{peaks:?}");
    // Without the bound, they run together (the measure can see more than two).
    let env = TestEnv::new();
    let f = write(&env, "five.yaml", &fan_of_five(""));
    run(&env, &f, "EX-all").wait().expect_code(0);
    let peaks: Vec<u32> = lines(&env, "peaks")
        .iter()
        .map(|l| l.trim().parse().unwrap())
        .collect();
    assert!(peaks.iter().any(|p| *p > 2), "{peaks:?}");
}

#[test]
fn a_cancel_while_a_step_runs_stops_it_and_settles_every_step() {
    let env = TestEnv::new();
    let f = write(
        &env,
        "long.yaml",
        "name: long\nnodes:\n  - { id: first, kind: task, command: 'echo first >> ran' }\n  - { id: long, kind: task, command: 'echo $$ > long.pid; sleep 600' }\n  - { id: after, kind: task, command: 'echo after >> ran' }\nedges:\n  - { from: first, to: long }\n  - { from: long, to: after }\n",
    );
    let runner = run(&env, &f, "EX-long");
    assert!(
        wait_for_state(Duration::from_secs(60), || env
            .work()
            .join("long.pid")
            .exists()),
        "{}",
        runner.stderr_now()
    );
    env.monitor()
        .args([
            "pipeline",
            "cancel",
            "EX-long",
            "--reason",
            "no longer needed",
        ])
        .run()
        .expect_code(0);
    let out = runner.wait();
    out.expect_code(1);
    let st = status(&env, "EX-long");
    assert_eq!(st["status"], "cancelled");
    for s in st["steps"].as_array().unwrap() {
        assert!(
            ["completed", "failed", "skipped", "cancelled"]
                .contains(&s["status"].as_str().unwrap()),
            "{s}"
        );
    }
    let long = step(&st, "long");
    assert_eq!(long["status"], "cancelled", "{long}");
    assert!(
        long["reason"]
            .as_str()
            .unwrap()
            .contains("no longer needed"),
        "{long}"
    );
    // Its run ended with it, and the tool is gone.
    let r = run_of(&env, "EX-long", long);
    assert_eq!(r["status"], "cancelled", "{r}");
    let pid: i32 = std::fs::read_to_string(env.work().join("long.pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(
        wait_for_state(Duration::from_secs(10), || {
            // SAFETY: signal 0 only asks whether the process exists.
            unsafe { libc::kill(pid, 0) != 0 }
        }),
        "the step's tool {pid} outlived the cancel"
    );
    assert_eq!(lines(&env, "ran"), ["first"]);
}

#[test]
fn check_names_every_error_of_a_file_in_one_run() {
    let env = TestEnv::new();
    let f = write(
        &env,
        "five-errors.yaml",
        "name: broken
nodes:
  - { id: build, kind: task, command: make, timeout: soon }
  - { id: ok, kind: human, title: Ship, question: Ship?, default: maybe }
  - { id: fan, kind: parallel, branches: [ghost] }
  - { id: join, kind: merge }
edges:
  - { from: build, to: ok }
  - { from: ok, to: fan }
  - { from: fan, to: join }
  - { from: join, to: nowhere }
  - { from: build, to: join, condition: { field: steps.build.result.tier, operator: in, value: gold } }
",
    );
    let out = env.monitor().args(["pipeline", "check"]).arg(&f).run();
    out.expect_code(2);
    let err = out.stderr.clone();
    let places: Vec<&str> = err
        .lines()
        .filter(|l| l.contains("five-errors.yaml:"))
        .collect();
    assert_eq!(places.len(), 5, "{err}");
    for (line, what) in [
        (3, "invalid duration `soon`"),
        (4, "the default `maybe` is not an option"),
        (5, "no node `ghost`"),
        (11, "no node `nowhere`"),
        (12, "takes a list"),
    ] {
        assert!(
            places
                .iter()
                .any(|l| l.contains(&format!("five-errors.yaml:{line}:")) && l.contains(what)),
            "line {line}: {what}: {err}"
        );
    }
    assert!(err.contains("5 errors"), "{err}");
    // `run` refuses it the same way, before anything runs.
    let out = env.monitor().args(["pipeline", "run"]).arg(&f).run();
    out.expect_code(2);
    assert!(out.stderr.contains("5 errors"), "{}", out.stderr);
    assert!(!env.work().join("ran").exists());
}

/// A step's headless-run is started at a gate (`HEADLESS_RUN_GATE_FD`, a pipe) and starts
/// its tool only once the runner says `g`: a gate that closes without it (a runner killed
/// before the step's pid was kept) starts and records nothing and exits 125; a go starts
/// the tool, which never sees the variable; a variable that names no pipe is no gate.
#[test]
fn a_steps_headless_run_starts_only_through_its_gate() {
    let env = TestEnv::new();
    let shim = bin("headless-run");
    let gate = env.work().join("gate");
    let made = env.command("mkfifo").arg(&gate).run();
    made.expect_code(0);
    // The writer opens the gate and closes it without a word.
    let script = format!(
        "(exec 4>gate; sleep 0.2) & HEADLESS_RUN_GATE_FD=3 {shim} -- touch ran 3<gate; echo \"exit $?\"",
        shim = shim.display()
    );
    let closed = env.command("sh").args(["-c", &script]).run();
    assert_eq!(closed.out().trim(), "exit 125", "{}", closed.stderr);
    assert!(!env.work().join("ran").exists(), "the tool never started");
    assert!(env.runs().is_empty(), "nothing recorded: {:?}", env.runs());

    // Said go: the tool runs, without the variable.
    let script = format!(
        "(printf 'g\\n' > gate) & HEADLESS_RUN_GATE_FD=3 {shim} -- sh -c 'env > env.txt; ls -l /proc/$$/fd > fds.txt' 3<gate; echo \"exit $?\"",
        shim = shim.display()
    );
    let open = env.command("sh").args(["-c", &script]).run();
    assert_eq!(open.out().trim(), "exit 0", "{}", open.stderr);
    let seen = std::fs::read_to_string(env.work().join("env.txt")).unwrap();
    assert!(seen.contains("PATH="), "{seen}");
    assert!(!seen.contains("HEADLESS_RUN_GATE_FD"), "{seen}");
    let fds = std::fs::read_to_string(env.work().join("fds.txt")).unwrap();
    assert!(fds.contains("/dev/"), "{fds}");
    assert!(
        !fds.contains("/gate"),
        "the gate is closed before the tool: {fds}"
    );
    assert_eq!(env.runs().len(), 1);

    // Naming no pipe (a file, a descriptor not open, not a number): no gate.
    let script = format!(
        "HEADLESS_RUN_GATE_FD=3 {shim} -- true 3<gate.txt && HEADLESS_RUN_GATE_FD=9 {shim} -- true && HEADLESS_RUN_GATE_FD=x {shim} -- true; echo \"exit $?\"",
        shim = shim.display()
    );
    std::fs::write(env.work().join("gate.txt"), "no").unwrap();
    let none = env.command("sh").args(["-c", &script]).run();
    assert_eq!(none.out().trim(), "exit 0", "{}", none.stderr);
    assert_eq!(env.runs().len(), 4);
}

/// `--cwd DIR` (how a runner gives a step its directory): the tool runs there, and a
/// directory that cannot be entered is refused (exit 125) before anything runs or is recorded.
#[test]
fn cwd_runs_the_tool_in_its_directory_and_refuses_one_that_is_not_there() {
    let env = TestEnv::new();
    let sub = env.work().join("sub dir");
    std::fs::create_dir(&sub).unwrap();
    let here = env.shim().args(["--cwd", "sub dir", "--", "pwd"]).run();
    here.expect_code(0);
    assert_eq!(
        std::path::PathBuf::from(here.out().trim())
            .canonicalize()
            .unwrap(),
        sub.canonicalize().unwrap()
    );
    let run = env.only_run();
    assert_eq!(s(&run, "status"), "completed");
    let gone = env
        .shim()
        .args(["-C", "nowhere", "--", "touch", "ran"])
        .run();
    gone.expect_code(125);
    assert!(
        gone.stderr.contains("cannot change to nowhere"),
        "{}",
        gone.stderr
    );
    assert!(!env.work().join("ran").exists());
    assert_eq!(env.runs().len(), 1, "nothing more recorded");
}

/// Issue 31: a long execution's steps are rows of their own, each written when it changes,
/// not the execution's steps again with every write: after 40 rounds of a loop, the first
/// step's row is as it was written when that step ended, long before the end, and the
/// execution's own row holds no steps. Every row reads back as `pipeline status` shows it.
#[test]
fn a_long_loops_steps_are_rows_each_written_when_it_changes() {
    let env = TestEnv::new();
    let f = write(
        &env,
        "loop.yaml",
        "nodes:\n  - { id: work, kind: task, command: [\"true\"] }\n  - id: again\n    kind: branch\n    condition: { field: steps.work.exit_code, operator: equals, value: 0 }\n    on_true: work\n    on_false: done\n    max_iterations: 39\n    on_max_iterations_reached: done\n  - { id: done, kind: task, command: [\"true\"] }\nedges:\n  - { from: work, to: again }\n",
    );
    run(&env, &f, "EX-long").wait().expect_code(0);
    let st = status(&env, "EX-long");
    assert_eq!(st["status"], "completed", "{st}");
    let steps = st["steps"].as_array().unwrap();
    // 40 visits of `work` and of `again`, then `done`.
    assert_eq!(steps.len(), 81, "{st}");
    let db = env.raw_db();
    let (version, kept): (i64, String) = db
        .query_row(
            "SELECT version, steps_json FROM pipelines WHERE execution_id = 'EX-long'",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    assert_eq!(kept, "[]", "the execution's row holds no steps");
    let rows: Vec<(i64, i64, String)> = db
        .prepare(
            "SELECT idx, version, body FROM pipeline_steps WHERE execution_id = 'EX-long'
             ORDER BY idx",
        )
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(rows.len(), steps.len());
    for ((idx, _, body), shown) in rows.iter().zip(steps) {
        let body: Value = serde_json::from_str(body).unwrap();
        assert_eq!(&body, shown, "step {idx}");
    }
    // Three writes a run of `work` (started, its pid, its end) and more: the execution
    // moved well past a hundred versions; the first step's row stopped at its end.
    assert!(version > 100, "{version}");
    assert!(
        rows[0].1 < 10,
        "the first step was written again: {:?}",
        rows[0]
    );
    assert!(
        rows.iter().all(|(_, v, _)| *v <= version),
        "no row is newer than its execution"
    );
}
