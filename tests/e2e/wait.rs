//! `monitor wait`: returns when another process decides the approval or the run ends,
//! times out with exit 1, and knows a parked run.

use crate::rows::*;
use headless_run_e2e::*;
use std::time::{Duration, Instant};

#[test]
fn wait_returns_when_another_process_decides() {
    let env = TestEnv::new();
    let run = Run::parked(&env, &["deploy"]);
    run.insert(&env);
    let ap = Approval::pending(&run, "Deploy?");
    ap.insert(&env);
    let waiter = env
        .monitor()
        .args(["wait", &ap.id, "--timeout", "30s"])
        .spawn();
    // Still waiting a while later.
    std::thread::sleep(Duration::from_millis(400));
    assert!(waiter.child.id() > 0);
    assert!(
        waiter.stdout_now().is_empty(),
        "returned before the decision"
    );
    let decided_at = Instant::now();
    env.monitor()
        .args(["decide", &ap.id, "no", "--comment", "not today"])
        .run()
        .expect_code(0);
    let out = waiter.wait();
    out.expect_code(0);
    assert!(
        decided_at.elapsed() < Duration::from_secs(5),
        "took {:?}",
        decided_at.elapsed()
    );
    let text = out.out();
    assert!(
        text.contains(&format!("{} approved: no by {}", ap.id, user_name())),
        "{text}"
    );
    assert!(text.contains("(not today)"), "{text}");
}

#[test]
fn wait_times_out_with_exit_1() {
    let env = TestEnv::new();
    let run = Run::parked(&env, &["deploy"]);
    run.insert(&env);
    let ap = Approval::pending(&run, "Deploy?");
    ap.insert(&env);
    let t0 = Instant::now();
    let out = env
        .monitor()
        .args(["wait", &ap.id, "--timeout", "300ms"])
        .run();
    out.expect_code(1);
    assert!(t0.elapsed() < Duration::from_secs(5));
    assert!(out.stderr.contains("timed out"), "{}", out.stderr);
    assert!(out.stderr.contains("still pending"), "{}", out.stderr);
    env.monitor()
        .args(["wait", "AP-00000000000000000000000000"])
        .run()
        .expect_code(4);
}

#[test]
fn wait_for_a_run_returns_when_it_ends_or_parks() {
    let env = TestEnv::new();
    env.shim().arg("true").run().expect_code(0);
    let shim = env.shim().arg(tool()).args(["sleep", "1"]).spawn();
    assert!(wait_for_state(Duration::from_secs(20), || env.runs().len() == 2));
    let id = s(&env.runs()[1], "tool_run_id").to_owned();
    let out = env.monitor().args(["wait", &id, "--timeout", "30s"]).run();
    out.expect_code(0);
    assert!(
        out.out().contains(&format!("{id} completed (exit 0)")),
        "{}",
        out.out()
    );
    shim.wait().expect_code(0);
    // A parked run: waiting is over, and the approval to decide is named.
    let run = Run::parked(&env, &["deploy"]);
    run.insert(&env);
    let ap = Approval::pending(&run, "Deploy?");
    ap.insert(&env);
    let out = env
        .monitor()
        .args(["wait", &run.id, "--timeout", "5s"])
        .run();
    out.expect_code(0);
    assert!(out.out().contains("waiting_approval"), "{}", out.out());
    assert!(out.out().contains(&ap.id), "{}", out.out());
}
