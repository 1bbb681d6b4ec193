//! Reconciliation (`monitor reconcile`, also every worker pass): a shim killed with -9 is
//! reconciled to failed, a pid reused by another process is told apart by its start time,
//! overdue approvals expire, and parked or live runs are left alone.

use crate::rows::*;
use headless_run_e2e::*;
use std::process::{Command, Stdio};
use std::time::Duration;

#[test]
fn a_kill_9_shim_is_reconciled_to_failed_and_its_tool_dies() {
    let env = TestEnv::new();
    let shim = env.shim().arg(tool()).args(["sleep", "60"]).spawn();
    let started = wait_for_state(Duration::from_secs(20), || {
        env.runs()
            .first()
            .is_some_and(|r| r["pid"].is_i64() && r["status"] == "running")
    });
    assert!(started, "the run never started: {}", shim.stderr_now());
    let run = env.only_run();
    let tool_pid = n(&run, "pid") as i32;
    shim.signal(libc::SIGKILL);
    let out = shim.wait();
    assert_eq!(out.signal, Some(libc::SIGKILL));
    assert!(
        wait_until(Duration::from_secs(10), || !alive(tool_pid)),
        "the tool outlived its shim"
    );
    assert_eq!(
        s(&env.only_run(), "status"),
        "running",
        "nobody has noticed yet"
    );
    let out = env.monitor().arg("reconcile").run();
    out.expect_code(0);
    let id = s(&run, "tool_run_id");
    assert!(out.out().contains(&format!("{id} failed")), "{}", out.out());
    let after = env.only_run();
    assert_eq!(s(&after, "status"), "failed");
    assert!(
        s(&after, "reason").starts_with("supervisor vanished"),
        "{after:#?}"
    );
    assert!(after["completed_at"].is_string());
    // Once is enough.
    let out = env.monitor().arg("reconcile").run();
    assert!(out.out().contains("nothing to reconcile"), "{}", out.out());
}

#[test]
fn a_reused_pid_is_still_detected() {
    let env = TestEnv::new();
    // Some other live process now holds the pid the shim had.
    let mut other = Command::new("sleep")
        .arg("30")
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    let pid = other.id() as i32;
    let real_start = start_time(pid);
    let mut reused = Run::parked(&env, &["make"]);
    reused.status = "running".into();
    reused.exit_code = None;
    reused.shim_pid = Some(i64::from(pid));
    reused.shim_start_time = Some(real_start - 100);
    reused.insert(&env);
    // The same pid with the right start time is a live shim.
    let mut live = reused.clone();
    live.id = new_id("TR-");
    live.shim_start_time = Some(real_start);
    live.insert(&env);
    // Parked by a shim that exited 90 on purpose: nothing is expected to be alive.
    let parked = Run::parked(&env, &["rm", "-i", "x"]);
    parked.insert(&env);
    let out = env.monitor().arg("reconcile").run();
    out.expect_code(0);
    let row = run_row(&env, &reused.id);
    assert_eq!(s(&row, "status"), "failed", "{}", out.out());
    assert!(s(&row, "reason").contains("another process"), "{row:#?}");
    assert_eq!(s(&run_row(&env, &live.id), "status"), "running");
    assert_eq!(s(&run_row(&env, &parked.id), "status"), "waiting_approval");
    let _ = other.kill();
    let _ = other.wait();
}

#[test]
fn overdue_approvals_expire() {
    let env = TestEnv::new();
    let run = Run::parked(&env, &["apt-get", "install", "x"]);
    run.insert(&env);
    let mut ap = Approval::pending(&run, "Do you want to continue? [Y/n]");
    ap.expires_at = Some(ago(Duration::from_secs(2)));
    ap.insert(&env);
    let fresh = Approval::pending(&run, "Later?");
    fresh.insert(&env);
    let out = env.monitor().arg("reconcile").run();
    out.expect_code(0);
    assert!(
        out.out().contains(&format!("{} expired", ap.id)),
        "{}",
        out.out()
    );
    let row = approval_row(&env, &ap.id);
    assert_eq!(s(&row, "status"), "expired");
    assert_eq!(s(&row, "decided_by"), "system:expiry");
    assert_eq!(s(&approval_row(&env, &fresh.id), "status"), "pending");
    // Too late to decide now.
    let out = env.monitor().args(["decide", &ap.id, "yes"]).run();
    out.expect_code(3);
    assert!(out.stderr.contains("system:expiry"), "{}", out.stderr);
}

#[test]
fn a_run_its_shim_ended_as_stalled_is_not_a_vanished_supervisor() {
    let env = TestEnv::new();
    env.shim()
        .args(["--stall-timeout", "500ms"])
        .arg(tool())
        .args(["sleep", "30"])
        .run()
        .expect_code(92);
    let before = env.only_run();
    assert_eq!(s(&before, "status"), "stalled");
    let out = env.monitor().arg("reconcile").run();
    out.expect_code(0);
    assert!(out.out().contains("nothing to reconcile"), "{}", out.out());
    let after = env.only_run();
    assert_eq!(s(&after, "status"), "stalled");
    assert_eq!(s(&after, "reason"), s(&before, "reason"));
    // And waiting for it returns at once.
    let id = s(&after, "tool_run_id");
    let out = env.monitor().args(["wait", id, "--timeout", "5s"]).run();
    out.expect_code(0);
    assert!(out.out().contains("stalled (exit 92)"), "{}", out.out());
}
