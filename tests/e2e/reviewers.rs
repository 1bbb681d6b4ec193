//! Required reviewers and wait timers end to end, over HTTP: a runner host whose config
//! says `rm` needs two people of group `ops` and a wait timer; its shim waits (wait mode)
//! on a `monitor serve` while operators decide with their tokens through `monitor
//! --server decide`; the keys are typed only after the second person's approval and the
//! timer. Every view says where it stands. (The stores' rules themselves, on SQLite and
//! PostgreSQL, are the store contract's `reviews` cases.)

use crate::serve::{Served, token};
use headless_run_e2e::*;
use serde_json::Value;
use std::time::Duration;

fn token_in(env: &TestEnv, name: &str, groups: &[&str]) -> String {
    let mut cmd = env.monitor();
    cmd.args(["token", "create", name, "--role", "operator"]);
    for g in groups {
        cmd.args(["--group", g]);
    }
    let out = cmd.run();
    out.expect_code(0);
    out.out().trim().to_owned()
}

fn pending(served: &Served, tok: &str) -> Vec<Value> {
    let (st, v) = served.json("GET", "/api/v1/approvals?status=pending", tok, None);
    assert_eq!(st, 200, "{v}");
    v["approvals"].as_array().cloned().unwrap_or_default()
}

/// `monitor --server URL decide ID VALUE` with `tok`, from an operator's own machine.
fn decide(op_host: &TestEnv, url: &str, tok: &str, id: &str, value: &str) -> Outcome {
    op_host
        .monitor()
        .env("HEADLESS_RUN_TOKEN", tok)
        .args(["--server", url, "decide", id, value])
        .run()
}

#[test]
fn two_people_of_a_group_and_a_wait_timer_before_the_keys_are_typed() {
    let server = TestEnv::new();
    let runner = token(&server, "ci-7", "runner");
    let alice = token_in(&server, "alice", &["ops"]);
    let bob = token_in(&server, "bob", &["ops"]);
    let mallory = token_in(&server, "mallory", &[]);
    let listing = server.monitor().args(["token", "list"]).run();
    assert!(
        listing
            .out()
            .lines()
            .any(|l| l.starts_with("alice") && l.trim_end().ends_with("ops")),
        "{}",
        listing.out()
    );
    let served = Served::start(&server);
    let url = served.url();

    let host = TestEnv::new();
    host.write_config(
        r#"
[[reviewers]]
name = "deletions"
tool = "rm"
required = 2
group = "ops"
wait = "2s"
"#,
    );
    std::fs::write(host.work().join("victim"), "x").unwrap();
    let mut shim = host.shim();
    shim.env("HEADLESS_RUN_SERVER", &url)
        .env("HEADLESS_RUN_TOKEN", &runner);
    let tool = shim
        .args(["--", "rm", "-i", "victim"])
        .timeout(Duration::from_secs(90))
        .spawn_wait_mode();
    let mut list = Vec::new();
    assert!(
        wait_for_state(Duration::from_secs(20), || {
            list = pending(&served, &alice);
            list.len() == 1
        }),
        "no approval; tool: {}",
        tool.stderr_now()
    );
    let id = list[0]["approval_id"].as_str().unwrap().to_owned();
    assert_eq!(list[0]["reviews_required"], 2);
    assert_eq!(list[0]["reviewer_group"], "ops");
    assert_eq!(list[0]["wait_seconds"], 2);
    assert_eq!(
        list[0]["review_status"],
        "0 of 2 approvals; 2 more needed from group ops, not the run's own user; then held 2s"
    );

    let ops = TestEnv::new();
    // Not in the group: refused, nothing counted.
    let out = decide(&ops, &url, &mallory, &id, "y");
    assert_ne!(out.code(), 0);
    assert!(
        out.stderr.contains("not a member of `ops`"),
        "{}",
        out.stderr
    );
    // The first of two: counted, still pending, and the tool still waits.
    let out = decide(&ops, &url, &alice, &id, "y");
    out.expect_code(0);
    assert!(
        out.out()
            .contains("your approval is counted; 1 of 2 approvals (alice); 1 more needed"),
        "{}",
        out.out()
    );
    // The same person again counts once (HTTP: 202, still pending).
    let (st, v) = served.json(
        "POST",
        &format!("/api/v1/approvals/{id}/decide"),
        &alice,
        Some(r#"{"value":"y"}"#),
    );
    assert_eq!(st, 202, "{v}");
    assert_eq!(v["status"], "pending");
    assert_eq!(v["reviews"].as_array().map(Vec::len), Some(1));
    std::thread::sleep(Duration::from_millis(500));
    assert!(
        host.work().join("victim").exists(),
        "typed after one approval of two"
    );
    // The dashboard's views: the table column and `show`.
    let table = ops
        .monitor()
        .env("HEADLESS_RUN_TOKEN", &alice)
        .args(["--server", &url, "approvals"])
        .run();
    assert!(table.out().contains("REVIEWS"), "{}", table.out());
    assert!(table.out().contains("1/2 ops"), "{}", table.out());

    // The second person: all approvals are there, and the wait timer holds the decision.
    let out = decide(&ops, &url, &bob, &id, "y");
    out.expect_code(0);
    assert!(
        out.out().contains("held by its 2s wait timer"),
        "{}",
        out.out()
    );
    let show = ops
        .monitor()
        .env("HEADLESS_RUN_TOKEN", &bob)
        .args(["--server", &url, "show", &id])
        .run();
    assert!(
        show.out()
            .contains("approved by alice, bob; held by its 2s wait timer until"),
        "{}",
        show.out()
    );
    assert!(host.work().join("victim").exists(), "typed while held");

    // Then the keys are typed: the tool finishes.
    tool.wait().expect_code(0);
    assert!(!host.work().join("victim").exists(), "rm did not run");
    let (st, v) = served.json("GET", &format!("/api/v1/approvals/{id}"), &alice, None);
    assert_eq!(st, 200, "{v}");
    let a = if v.get("approval").is_some() {
        &v["approval"]
    } else {
        &v
    };
    assert_eq!(a["status"], "approved", "{a}");
    assert_eq!(a["decided_by"], "alice, bob");
    assert_eq!(a["comment"], "held 2s by its wait timer");
    served.stop().expect_code(0);
}

#[test]
fn a_bad_reviewers_rule_is_named_with_its_key() {
    let env = TestEnv::new();
    env.write_config("[[reviewers]]\nname = \"x\"\ntool = \"rm\"\nrequired = 0\n");
    let out = env.monitor().args(["config"]).run();
    assert_ne!(out.code(), 0, "{}", out.out());
    assert!(
        out.stderr.contains("reviewers[0].required") && out.stderr.contains("between 1 and 20"),
        "{}",
        out.stderr
    );
    env.write_config(
        "[[reviewers]]\nname = \"x\"\nrequired = 2\nwhen = [{ field = \"prompt\", op = \"contains\", value = \"y\" }]\n",
    );
    let out = env.monitor().args(["config"]).run();
    assert!(
        out.stderr.contains("reviewers[0].when") && out.stderr.contains("before anything is asked"),
        "{}",
        out.stderr
    );
}

#[test]
fn a_pipelines_human_step_needs_two_people_before_it_moves() {
    let env = TestEnv::new();
    let alice = token_in(&env, "alice", &[]);
    let bob = token_in(&env, "bob", &[]);
    let file = env.work().join("ship.yaml");
    std::fs::write(
        &file,
        "name: ship\nnodes:\n  - { id: ok, kind: human, title: Ship, question: 'Ship it?', reviewers: 2 }\n  - { id: done, kind: task, command: 'true' }\nedges:\n  - { from: ok, to: done }\n",
    )
    .unwrap();
    // Checked as every key is.
    let bad = env.work().join("bad.yaml");
    std::fs::write(
        &bad,
        "name: bad\nnodes:\n  - { id: ok, kind: human, title: T, question: Q, reviewers: 0, wait: 1y }\n",
    )
    .unwrap();
    let out = env.monitor().args(["pipeline", "check"]).arg(&bad).run();
    assert_ne!(out.code(), 0);
    assert!(out.stderr.contains("reviewers: 0 people"), "{}", out.stderr);
    env.monitor()
        .args(["pipeline", "run", "--detach", "--execution-id", "EX-two"])
        .arg(&file)
        .run()
        .expect_code(90);
    let served = Served::start(&env);
    let list = pending(&served, &alice);
    assert_eq!(list.len(), 1, "{list:?}");
    let id = list[0]["approval_id"].as_str().unwrap().to_owned();
    assert_eq!(list[0]["reviews_required"], 2);
    let step = |env: &TestEnv| {
        let out = env
            .monitor()
            .args(["pipeline", "status", "EX-two", "--json"])
            .run();
        out.expect_code(0);
        let v: Value = serde_json::from_str(&out.out()).unwrap();
        v["steps"]
            .as_array()
            .and_then(|s| s.iter().find(|s| s["node"] == "ok").cloned())
            .unwrap_or(Value::Null)
    };
    let (st, v) = served.json(
        "POST",
        &format!("/api/v1/approvals/{id}/decide"),
        &alice,
        Some(r#"{"value":"approve"}"#),
    );
    assert_eq!(st, 202, "{v}");
    assert_eq!(step(&env)["status"], "waiting_approval");
    let (st, v) = served.json(
        "POST",
        &format!("/api/v1/approvals/{id}/decide"),
        &bob,
        Some(r#"{"value":"approve"}"#),
    );
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["decided_by"], "alice, bob");
    // The step moved with the second approval, in its transaction.
    assert_eq!(step(&env)["status"], "completed", "{}", step(&env));
    served.stop().expect_code(0);
}

/// On the embedded store, a wait timer alone: `monitor decide` approves, the decision is
/// held (a re-run is not answered, `monitor approvals` says so), then the re-run is.
#[test]
fn a_wait_timer_holds_a_decision_from_a_rerun_on_the_embedded_store() {
    let env = TestEnv::new();
    env.write_config("[[reviewers]]\nname = \"cool-off\"\ntool = \"rm\"\nwait = \"2s\"\n");
    std::fs::write(env.work().join("victim"), "x").unwrap();
    let rerun = || env.shim().args(["--", "rm", "-i", "victim"]).run();
    rerun().expect_code(90);
    let id = env.pending_approval()["approval_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let out = env.decide(&id, "yes");
    out.expect_code(0);
    assert!(
        out.out().contains("held by its 2s wait timer"),
        "{}",
        out.out()
    );
    let table = env.monitor().args(["approvals"]).run();
    assert!(table.out().contains("held"), "{}", table.out());
    rerun().expect_code(90);
    assert!(env.work().join("victim").exists(), "answered while held");
    std::thread::sleep(Duration::from_millis(2200));
    rerun().expect_code(0);
    assert!(!env.work().join("victim").exists());
    let a = env
        .approvals()
        .into_iter()
        .find(|a| a["approval_id"] == id.as_str())
        .unwrap();
    assert_eq!(a["status"], "approved");
    assert_eq!(a["comment"], "held 2s by its wait timer");
}

/// A human step's wait timer: its approval is held, then the running pipeline goes on.
#[test]
fn a_human_steps_wait_timer_holds_it_then_the_pipeline_goes_on() {
    let env = TestEnv::new();
    let file = env.work().join("cool.yaml");
    std::fs::write(
        &file,
        "name: cool\nnodes:\n  - { id: ok, kind: human, title: Ship, question: 'Ship it?', wait: 2s }\n  - { id: done, kind: task, command: 'true' }\nedges:\n  - { from: ok, to: done }\n",
    )
    .unwrap();
    let runner = env
        .monitor()
        .args(["pipeline", "run", "--execution-id", "EX-cool"])
        .arg(&file)
        .timeout(Duration::from_secs(60))
        .spawn();
    let a = env.pending_approval();
    let out = env.decide(a["approval_id"].as_str().unwrap(), "approve");
    out.expect_code(0);
    assert!(
        out.out().contains("held by its 2s wait timer"),
        "{}",
        out.out()
    );
    let done = runner.wait();
    done.expect_code(0);
    let a = env
        .approvals()
        .into_iter()
        .find(|x| x["approval_id"] == a["approval_id"])
        .unwrap();
    assert_eq!(a["status"], "approved");
    assert_eq!(a["comment"], "held 2s by its wait timer");
}

/// The runner API applies the server's own `[[reviewers]]` to its runners' approvals: a
/// runner host with no rule of its own cannot make them need fewer people.
#[test]
fn the_servers_rules_bind_a_runner_without_any() {
    let server = TestEnv::new();
    let runner = token(&server, "ci-8", "runner");
    let alice = token_in(&server, "alice", &[]);
    let rules = server.path().join("server.toml");
    std::fs::write(
        &rules,
        "[[reviewers]]\nname = \"deletions\"\ntool = \"rm\"\nrequired = 2\n",
    )
    .unwrap();
    std::fs::set_permissions(&rules, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    let rules_s = rules.to_string_lossy().to_string();
    let served = Served::start_with(&server, &[("HEADLESS_RUN_CONFIG", &rules_s)]);
    let host = TestEnv::new();
    std::fs::write(host.work().join("victim"), "x").unwrap();
    host.shim()
        .env("HEADLESS_RUN_SERVER", served.url())
        .env("HEADLESS_RUN_TOKEN", &runner)
        .args(["--", "rm", "-i", "victim"])
        .run()
        .expect_code(90);
    let list = pending(&served, &alice);
    assert_eq!(list.len(), 1, "{list:?}");
    assert_eq!(list[0]["reviews_required"], 2, "{}", list[0]);
    let id = list[0]["approval_id"].as_str().unwrap();
    let (st, v) = served.json(
        "POST",
        &format!("/api/v1/approvals/{id}/decide"),
        &alice,
        Some(r#"{"value":"y"}"#),
    );
    assert_eq!(st, 202, "one approval of two: {v}");
    served.stop().expect_code(0);
}
