//! `monitor cancel`: a live run's tool and its whole process group end, the run is
//! cancelled with who and why; a parked run is only marked; finished and unknown runs are
//! refused.

use crate::rows::*;
use headless_run_e2e::*;
use std::time::Duration;

#[test]
fn cancel_ends_a_live_tool_and_its_group() {
    let env = TestEnv::new();
    let pidfile = env.path().join("orphan.pid");
    let shim = env
        .shim()
        .arg(tool())
        .arg("spawn-orphan")
        .arg(&pidfile)
        .spawn();
    assert!(
        wait_for_state(Duration::from_secs(20), || pidfile.exists()
            && env.runs().first().is_some_and(|r| r["pid"].is_i64())),
        "the tool never started: {}",
        shim.stderr_now()
    );
    let orphan: i32 = std::fs::read_to_string(&pidfile)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let run = env.only_run();
    let id = s(&run, "tool_run_id").to_owned();
    let tool_pid = n(&run, "pid") as i32;
    let out = env
        .monitor()
        .args(["cancel", &id, "--reason", "taking too long"])
        .run();
    out.expect_code(0);
    assert!(
        out.out()
            .contains(&format!("cancelled by {}: taking too long", user_name())),
        "{}",
        out.out()
    );
    let shim_out = shim.wait();
    assert!(
        wait_until(Duration::from_secs(10), || !alive(tool_pid)
            && !alive(orphan)),
        "tool {tool_pid} or its child {orphan} survived the cancel"
    );
    let row = env.only_run();
    assert_eq!(s(&row, "status"), "cancelled");
    assert_eq!(
        s(&row, "reason"),
        format!("cancelled by {}: taking too long", user_name())
    );
    assert!(row["completed_at"].is_string());
    // The shim ends the tool and exits 143 (DESIGN: cancel → SIGUSR1 → group ended).
    assert_eq!(shim_out.code, Some(143), "{}", shim_out.context());
    // One status event for one change: the canceller's, with its reason (the shim's end
    // of the cancelled run is no second `cancelled`).
    let cancelled: Vec<_> = env
        .log_events()
        .into_iter()
        .filter(|e| e["event"] == "tool_status_change" && e["status"] == "cancelled")
        .collect();
    assert_eq!(cancelled.len(), 1, "{cancelled:#?}");
    assert_eq!(
        cancelled[0]["reason"],
        format!("cancelled by {}: taking too long", user_name())
    );
}

#[test]
fn a_parked_run_is_marked_and_its_approval_rejected() {
    let env = TestEnv::new();
    let run = Run::parked(&env, &["terraform", "apply"]);
    run.insert(&env);
    let ap = Approval::pending(&run, "Do you want to perform these actions?");
    ap.insert(&env);
    let out = env.monitor().args(["cancel", &run.id]).run();
    out.expect_code(0);
    assert!(out.out().contains("no live headless-run"), "{}", out.out());
    let row = run_row(&env, &run.id);
    assert_eq!(s(&row, "status"), "cancelled");
    assert_eq!(s(&row, "reason"), format!("cancelled by {}", user_name()));
    assert_eq!(s(&approval_row(&env, &ap.id), "status"), "rejected");
}

#[test]
fn finished_and_unknown_runs_are_refused() {
    let env = TestEnv::new();
    env.shim().arg("true").run().expect_code(0);
    let id = s(&env.only_run(), "tool_run_id").to_owned();
    let out = env.monitor().args(["cancel", &id]).run();
    out.expect_code(3);
    assert!(
        out.stderr.contains("already ended: completed"),
        "{}",
        out.stderr
    );
    assert_eq!(s(&env.only_run(), "status"), "completed");
    env.monitor()
        .args(["cancel", "TR-00000000000000000000000000"])
        .run()
        .expect_code(4);
    env.monitor()
        .args(["cancel", "AP-00000000000000000000000000"])
        .run()
        .expect_code(2);
}

/// Issue 13 item 5: a run row whose shim pid names another program (a forged row, or a
/// pid reused by a process whose start time happens to match) is only marked: `monitor
/// cancel` signals nothing but a headless-run of the run's own user.
#[test]
fn cancel_signals_only_a_headless_run_of_the_runs_user() {
    let env = TestEnv::new();
    let mut victim = std::process::Command::new("sleep")
        .arg("60")
        .spawn()
        .expect("sleep");
    let pid = victim.id() as i32;
    let mut run = Run::parked(&env, &["tool"]);
    run.status = "running".into();
    run.reason = None;
    run.exit_code = None;
    run.shim_pid = Some(i64::from(pid));
    run.shim_start_time = Some(start_time(pid));
    run.supervisor_heartbeat_at = Some(ago(Duration::from_secs(1)));
    run.insert(&env);
    let out = env.monitor().args(["cancel", &run.id, "--json"]).run();
    out.expect_code(0);
    let v: serde_json::Value = serde_json::from_str(&out.out()).unwrap();
    assert_eq!(v["outcome"], "marked", "{}", out.context());
    std::thread::sleep(Duration::from_millis(200));
    assert!(
        victim.try_wait().unwrap().is_none(),
        "sleep was signalled: {}",
        out.context()
    );
    assert_eq!(s(&env.run_by_id(&run.id), "status"), "cancelled");
    let _ = victim.kill();
    let _ = victim.wait();
}

/// A cancel nobody recorded (a signal straight to headless-run): the store moves the run
/// and its one status event says so.
#[test]
fn a_signal_nobody_recorded_is_one_cancelled_event_that_says_so() {
    let env = TestEnv::new();
    let shim = env.shim().arg(tool()).args(["sleep", "30"]).spawn();
    assert!(
        wait_for_state(Duration::from_secs(20), || env
            .runs()
            .first()
            .is_some_and(|r| r["pid"].is_i64())),
        "the tool never started: {}",
        shim.stderr_now()
    );
    shim.signal(libc::SIGUSR1);
    let out = shim.wait();
    assert_eq!(out.code, Some(143), "{}", out.context());
    let row = env.only_run();
    assert_eq!(s(&row, "status"), "cancelled");
    let cancelled: Vec<_> = env
        .log_events()
        .into_iter()
        .filter(|e| e["event"] == "tool_status_change" && e["status"] == "cancelled")
        .collect();
    assert_eq!(cancelled.len(), 1, "{cancelled:#?}");
    assert_eq!(
        cancelled[0]["reason"],
        "cancelled by a signal to headless-run"
    );
}
