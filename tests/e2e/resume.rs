//! The resume worker (`monitor worker`): approved → the stored command is re-run through
//! headless-run and linked by `resumed_from`; rejected or expired → the waiting run fails;
//! claims are exclusive between workers; failed starts are retried, then the run fails;
//! abandoned claims are taken over; database trouble does not stop the daemon; SIGTERM
//! stops it cleanly. The first tests use parked runs written straight into the database
//! (their re-runs never meet a prompt, so the waiting run fails: the decision answered
//! nothing), the last ones the shim's own prompt flow (`rm -i`, a cooperative tool).

use crate::rows::*;
use headless_run_e2e::*;
use std::time::Duration;

fn tool_str() -> String {
    tool().to_string_lossy().into_owned()
}

/// A parked run of `argv` with an approval decided `value` by `monitor decide`.
fn parked_and_decided(env: &TestEnv, argv: &[&str], value: &str) -> (Run, Approval) {
    let run = Run::parked(env, argv);
    run.insert(env);
    let ap = Approval::pending(&run, "Proceed?");
    ap.insert(env);
    env.monitor()
        .args(["decide", &ap.id, value])
        .run()
        .expect_code(0);
    (run, ap)
}

#[test]
fn an_approved_run_is_re_run_and_linked() {
    let env = TestEnv::new();
    let t = tool_str();
    let (run, ap) = parked_and_decided(
        &env,
        &[
            &t,
            "env",
            "HEADLESS_RUN_TOOL_RUN_ID",
            "HEADLESS_RUN_EXECUTION_ID",
        ],
        "approve",
    );
    let out = env.monitor().args(["worker", "--once"]).run();
    out.expect_code(0);
    assert!(
        out.out().contains(&format!("resuming {}", run.id)),
        "{}",
        out.context()
    );
    let resumes = resumes_of(&env, &run.id);
    assert_eq!(resumes.len(), 1, "{resumes:#?}");
    let resumed = &resumes[0];
    let rid = s(resumed, "tool_run_id");
    assert_eq!(s(resumed, "status"), "completed");
    assert_eq!(
        s(resumed, "execution_id"),
        run.execution_id,
        "same execution"
    );
    assert_eq!(s(resumed, "cwd"), run.cwd);
    let argv = strings(resumed, "argv_json");
    assert_eq!(argv, run.argv, "the stored command, as typed");
    let output = String::from_utf8_lossy(&env.run_log(rid)).into_owned();
    assert!(
        output.contains(&format!("HEADLESS_RUN_TOOL_RUN_ID={rid}")),
        "{output}"
    );
    assert!(
        output.contains(&format!("HEADLESS_RUN_EXECUTION_ID={}", run.execution_id)),
        "{output}"
    );
    // The waiting run is closed, naming its resume (by the shim, or by the worker when the
    // re-run never reached the prompt, as here: then the decision answered nothing, which
    // is no success).
    let waiting = run_row(&env, &run.id);
    assert_eq!(s(&waiting, "status"), "failed", "{waiting:#?}");
    assert!(s(&waiting, "reason").contains(rid), "{waiting:#?}");
    assert!(
        s(&waiting, "reason").contains("the decision answered nothing"),
        "{waiting:#?}"
    );
    let ap_row = approval_row(&env, &ap.id);
    assert!(
        s(&ap_row, "claimed_by").starts_with("worker:"),
        "{ap_row:#?}"
    );
    assert_eq!(s(&ap_row, "resumed_run_id"), rid);
    // The change is in the combined log too.
    assert!(
        env.log_events()
            .iter()
            .any(|e| e["event"] == "tool_status_change"
                && e["tool_run_id"] == run.id.as_str()
                && e["status"] == "failed"),
        "no status event for the waiting run"
    );
    // A second pass has nothing left to do.
    let out = env.monitor().args(["worker", "--once"]).run();
    out.expect_code(0);
    assert_eq!(resumes_of(&env, &run.id).len(), 1);
    assert!(out.out().contains("nothing to resume"), "{}", out.out());
}

#[test]
fn a_resume_that_fails_fails_the_waiting_run() {
    let env = TestEnv::new();
    let t = tool_str();
    let (run, _ap) = parked_and_decided(&env, &[&t, "exit", "3"], "yes");
    env.monitor()
        .args(["worker", "--once"])
        .run()
        .expect_code(0);
    let resumes = resumes_of(&env, &run.id);
    assert_eq!(resumes.len(), 1);
    assert_eq!(s(&resumes[0], "status"), "failed");
    let waiting = run_row(&env, &run.id);
    assert_eq!(s(&waiting, "status"), "failed");
    assert_eq!(n(&waiting, "exit_code"), 3);
    assert!(s(&waiting, "reason").contains("exited 3"), "{waiting:#?}");
}

#[test]
fn a_rejected_run_fails_with_who_and_why() {
    let env = TestEnv::new();
    let run = Run::parked(&env, &["rm", "-i", "precious.txt"]);
    run.insert(&env);
    let ap = Approval::pending(&run, "rm: remove regular file 'precious.txt'?");
    ap.insert(&env);
    env.monitor()
        .args(["decide", &ap.id, "reject", "--comment", "keep it"])
        .run()
        .expect_code(0);
    let out = env.monitor().args(["worker", "--once"]).run();
    out.expect_code(0);
    let row = run_row(&env, &run.id);
    assert_eq!(s(&row, "status"), "failed");
    assert_eq!(
        s(&row, "reason"),
        format!("approval {} rejected by {}: keep it", ap.id, user_name())
    );
    assert_eq!(n(&row, "exit_code"), 91);
    assert!(row["completed_at"].is_string());
    assert!(resumes_of(&env, &run.id).is_empty(), "nothing was re-run");
}

#[test]
fn expiry_fails_the_run_or_resumes_with_the_default() {
    let env = TestEnv::new();
    let t = tool_str();
    // Expired with nothing to answer: the run fails.
    let lapsed = Run::parked(&env, &[&t, "print", "never"]);
    lapsed.insert(&env);
    let mut ap1 = Approval::pending(&lapsed, "Continue?");
    ap1.expires_at = Some(ago(Duration::from_secs(1)));
    ap1.insert(&env);
    // Expired where config said on_expire = "default": resumed with the default.
    let defaulted = Run::parked(&env, &[&t, "print", "went ahead"]);
    defaulted.insert(&env);
    let mut ap2 = Approval::pending(&defaulted, "Continue?");
    ap2.expires_at = Some(ago(Duration::from_secs(1)));
    ap2.expire_action = "default".into();
    ap2.insert(&env);
    let out = env.monitor().args(["worker", "--once"]).run();
    out.expect_code(0);
    let a1 = approval_row(&env, &ap1.id);
    assert_eq!(s(&a1, "status"), "expired");
    assert_eq!(s(&a1, "decided_by"), "system:expiry");
    let r1 = run_row(&env, &lapsed.id);
    assert_eq!(s(&r1, "status"), "failed");
    assert!(
        s(&r1, "reason").contains("expired without a decision"),
        "{r1:#?}"
    );
    assert!(resumes_of(&env, &lapsed.id).is_empty());
    assert_eq!(s(&approval_row(&env, &ap2.id), "chosen_value"), "no");
    let resumed = resumes_of(&env, &defaulted.id);
    assert_eq!(resumed.len(), 1, "{}", out.context());
    assert!(
        String::from_utf8_lossy(&env.run_log(s(&resumed[0], "tool_run_id"))).contains("went ahead")
    );
}

#[test]
fn two_workers_resume_each_run_exactly_once() {
    let env = TestEnv::new();
    let t = tool_str();
    let parked: Vec<Run> = (0..4)
        .map(|_| parked_and_decided(&env, &[&t, "sleep", "0.3"], "yes").0)
        .collect();
    let a = env.monitor().args(["worker", "--once"]).spawn();
    let b = env.monitor().args(["worker", "--once"]).spawn();
    let (a, b) = (a.wait(), b.wait());
    a.expect_code(0);
    b.expect_code(0);
    for run in &parked {
        let resumes = resumes_of(&env, &run.id);
        assert_eq!(
            resumes.len(),
            1,
            "{} resumed {} times\nA: {}\nB: {}",
            run.id,
            resumes.len(),
            a.out(),
            b.out()
        );
        assert_eq!(s(&run_row(&env, &run.id), "status"), "failed");
    }
    let started = a.out().matches("resuming").count() + b.out().matches("resuming").count();
    assert_eq!(started, 4, "A: {}\nB: {}", a.out(), b.out());
}

#[test]
fn a_resume_that_cannot_start_is_retried_then_the_run_fails() {
    let env = TestEnv::new();
    let t = tool_str();
    // Its working directory is gone: headless-run cannot even be started there.
    let mut run = Run::parked(&env, &[&t, "print", "x"]);
    run.cwd = env
        .path()
        .join("deleted-dir")
        .to_string_lossy()
        .into_owned();
    run.insert(&env);
    let ap = Approval::pending(&run, "Proceed?");
    ap.insert(&env);
    env.monitor()
        .args(["decide", &ap.id, "yes"])
        .run()
        .expect_code(0);
    let out = env.monitor().args(["worker", "--once"]).run();
    out.expect_code(0);
    let row = run_row(&env, &run.id);
    assert_eq!(s(&row, "status"), "failed", "{}", out.context());
    let reason = s(&row, "reason");
    assert!(reason.contains("failed to start 4 times"), "{reason}");
    assert!(reason.contains("working directory"), "{reason}");
    assert_eq!(
        out.out().matches("cannot start the resume").count(),
        4,
        "{}",
        out.out()
    );
    // The tool itself is gone: headless-run exits 127 at once, four times.
    let (run, _) = parked_and_decided(&env, &["/nonexistent/tool", "--yes"], "yes");
    env.monitor()
        .args(["worker", "--once"])
        .run()
        .expect_code(0);
    let row = run_row(&env, &run.id);
    assert_eq!(s(&row, "status"), "failed");
    assert!(s(&row, "reason").contains("exited 127"), "{row:#?}");
    let attempts = resumes_of(&env, &run.id);
    assert_eq!(
        attempts.len(),
        4,
        "one try and three retries: {attempts:#?}"
    );
    assert!(attempts.iter().all(|r| n(r, "exit_code") == 127));
}

#[test]
fn a_claim_left_by_a_dead_worker_is_taken_over() {
    let env = TestEnv::new();
    let t = tool_str();
    let run = Run::parked(&env, &[&t, "print", "taken over"]);
    run.insert(&env);
    let mut ap = Approval::pending(&run, "Proceed?");
    ap.status = "approved".into();
    ap.chosen_value = Some("yes".into());
    ap.decided_by = Some(user_name());
    ap.claimed_by = Some(format!("worker:{}:{}:1", hostname(), i32::MAX - 5));
    ap.claimed_at = Some(ago(Duration::from_secs(60)));
    ap.insert(&env);
    // A claim of a live worker (this test process) is respected.
    let live = Run::parked(&env, &[&t, "print", "not mine"]);
    live.insert(&env);
    let mut ap2 = Approval::pending(&live, "Proceed?");
    ap2.status = "approved".into();
    ap2.chosen_value = Some("yes".into());
    let me = std::process::id() as i32;
    ap2.claimed_by = Some(format!("worker:{}:{me}:{}", hostname(), start_time(me)));
    ap2.claimed_at = Some(ago(Duration::from_secs(60)));
    ap2.insert(&env);
    let out = env.monitor().args(["worker", "--once"]).run();
    out.expect_code(0);
    assert!(out.out().contains("took over"), "{}", out.out());
    assert_eq!(resumes_of(&env, &run.id).len(), 1);
    assert_eq!(s(&run_row(&env, &run.id), "status"), "failed");
    assert!(resumes_of(&env, &live.id).is_empty());
    assert_eq!(s(&run_row(&env, &live.id), "status"), "waiting_approval");
}

#[test]
fn waiting_runs_of_a_live_shim_are_left_to_it() {
    let env = TestEnv::new();
    let t = tool_str();
    // Waiting in wait mode: its shim (here: this test process) answers by itself.
    let mut run = Run::parked(&env, &[&t, "print", "x"]);
    run.exit_code = None;
    let me = std::process::id() as i32;
    run.shim_pid = Some(i64::from(me));
    run.shim_start_time = Some(start_time(me));
    run.insert(&env);
    let ap = Approval::pending(&run, "Proceed?");
    ap.insert(&env);
    env.monitor()
        .args(["decide", &ap.id, "yes"])
        .run()
        .expect_code(0);
    env.monitor()
        .args(["worker", "--once"])
        .run()
        .expect_code(0);
    assert_eq!(s(&run_row(&env, &run.id), "status"), "waiting_approval");
    assert!(approval_row(&env, &ap.id)["claimed_by"].is_null());
    assert!(resumes_of(&env, &run.id).is_empty());
}

#[test]
fn the_daemon_survives_a_missing_database_and_stops_on_sigterm() {
    let env = TestEnv::new();
    let worker = env
        .monitor()
        .args(["worker", "--interval", "100ms"])
        .spawn();
    assert!(
        wait_until(Duration::from_secs(10), || worker
            .stderr_now()
            .contains("no database")),
        "{}",
        worker.stderr_now()
    );
    // The database appears; a decided run is resumed on a later pass.
    let t = tool_str();
    let (run, _) = parked_and_decided(&env, &[&t, "print", "late"], "yes");
    assert!(
        wait_for_state(Duration::from_secs(20), || !resumes_of(&env, &run.id)
            .is_empty()
            && s(&run_row(&env, &run.id), "status") == "failed"),
        "not resumed; stderr: {}",
        worker.stderr_now()
    );
    // A broken database is reported and the next pass goes on.
    let db = env.state().join("state.db");
    let saved = env.path().join("saved.db");
    std::fs::rename(&db, &saved).unwrap();
    std::fs::write(&db, vec![0x5a; 8192]).unwrap();
    assert!(
        wait_until(Duration::from_secs(10), || worker
            .stderr_now()
            .contains("not a usable SQLite database")),
        "{}",
        worker.stderr_now()
    );
    std::fs::rename(&saved, &db).unwrap();
    let (again, _) = parked_and_decided(&env, &[&t, "print", "later"], "yes");
    assert!(
        wait_for_state(Duration::from_secs(20), || !resumes_of(&env, &again.id)
            .is_empty()),
        "not resumed after the database came back; stderr: {}",
        worker.stderr_now()
    );
    // Ctrl-C (SIGINT) stops it as cleanly as SIGTERM (the next test).
    worker.signal(libc::SIGINT);
    let out = worker.wait();
    out.expect_code(0);
    assert!(out.stderr.contains("stopped"), "{}", out.stderr);
}

#[test]
fn sigterm_lets_the_resumes_in_flight_finish() {
    let env = TestEnv::new();
    let t = tool_str();
    let (run, _) = parked_and_decided(&env, &[&t, "silent-then", "1.5", "finished"], "yes");
    let worker = env
        .monitor()
        .args(["worker", "--interval", "100ms"])
        .spawn();
    assert!(
        wait_for_state(Duration::from_secs(20), || resumes_of(&env, &run.id)
            .first()
            .is_some_and(|r| r["status"] == "running")),
        "not resumed: {}",
        worker.stderr_now()
    );
    worker.signal(libc::SIGTERM);
    let out = worker.wait();
    out.expect_code(0);
    assert!(
        out.stderr.contains("waiting for the resumes"),
        "{}",
        out.stderr
    );
    // It waited: the re-run finished and the waiting run was closed before it exited.
    let resumed = &resumes_of(&env, &run.id)[0];
    assert_eq!(s(resumed, "status"), "completed");
    assert_eq!(s(&run_row(&env, &run.id), "status"), "failed");
}

// ---- Through the shim's own prompt flow -------------------------------------------------

/// `rm -i FILE` under HEADLESS=1: the shim turns the prompt into an approval and exits 90.
fn rm_prompt(env: &TestEnv, file: &std::path::Path) -> (String, String) {
    // A hard timeout so that a shim without prompt detection fails fast (124), not hangs.
    let out = env
        .shim()
        .args(["--timeout", "20s", "rm", "-i"])
        .arg(file)
        .run();
    out.expect_code(90);
    let run = env
        .runs()
        .into_iter()
        .find(|r| r["tool_name"] == "rm")
        .expect("an rm run");
    assert_eq!(s(&run, "status"), "waiting_approval");
    let aps = env.approvals();
    assert_eq!(aps.len(), 1, "{aps:#?}");
    assert_eq!(s(&aps[0], "status"), "pending");
    (
        s(&run, "tool_run_id").to_owned(),
        s(&aps[0], "approval_id").to_owned(),
    )
}

#[test]
fn approve_then_worker_resumes_rm_and_the_file_is_removed() {
    let env = TestEnv::new();
    let file = env.work().join("doomed.txt");
    std::fs::write(&file, "bye").unwrap();
    let (run, ap) = rm_prompt(&env, &file);
    assert!(file.exists(), "nothing is removed before the decision");
    env.monitor()
        .args(["decide", &ap, "yes"])
        .run()
        .expect_code(0);
    let out = env.monitor().args(["worker", "--once"]).run();
    out.expect_code(0);
    assert!(!file.exists(), "rm did not remove it; {}", out.context());
    let resumes = resumes_of(&env, &run);
    assert_eq!(resumes.len(), 1);
    assert_eq!(s(&resumes[0], "status"), "completed");
    let waiting = run_row(&env, &run);
    assert_eq!(s(&waiting, "status"), "completed");
    let ap_row = approval_row(&env, &ap);
    assert!(ap_row["consumed_at"].is_string(), "{ap_row:#?}");
    assert_eq!(s(&ap_row, "consumed_by"), s(&resumes[0], "tool_run_id"));
    // Issue 15 item 8: the parked run reads as resumed, and the time it took ends where it
    // parked, not when the worker took it up.
    assert!(waiting["metadata"]["parked_at"].is_string(), "{waiting:#?}");
    let table = env.monitor().arg("runs").run();
    table.expect_code(0);
    let line = table
        .out()
        .lines()
        .find(|l| l.starts_with(&run))
        .map(str::to_owned)
        .unwrap_or_default();
    assert!(line.contains(" resumed "), "{}", table.out());
    assert!(!line.contains(" completed "), "{line}");
}

#[test]
fn reject_then_worker_fails_rm_and_the_file_stays() {
    let env = TestEnv::new();
    let file = env.work().join("kept.txt");
    std::fs::write(&file, "stay").unwrap();
    let (run, ap) = rm_prompt(&env, &file);
    env.monitor()
        .args(["decide", &ap, "reject"])
        .run()
        .expect_code(0);
    env.monitor()
        .args(["worker", "--once"])
        .run()
        .expect_code(0);
    assert!(file.exists());
    let row = run_row(&env, &run);
    assert_eq!(s(&row, "status"), "failed");
    assert!(s(&row, "reason").contains("rejected by"), "{row:#?}");
}

#[test]
fn a_cooperative_tool_gets_the_decision_in_auto_approval() {
    let env = TestEnv::new();
    let marker = env.work().join("deployed.txt");
    let out = env
        .shim()
        .args(["--timeout", "20s"])
        .arg(fixture("deploy.py"))
        .arg("staging")
        .arg(&marker)
        .run();
    out.expect_code(90);
    let aps = env.approvals();
    assert_eq!(aps.len(), 1, "{aps:#?}");
    assert_eq!(s(&aps[0], "question"), "Deploy staging?");
    let run = s(&env.only_run(), "tool_run_id").to_owned();
    assert_eq!(s(&env.only_run(), "status"), "waiting_approval");
    let ap = s(&aps[0], "approval_id").to_owned();
    env.monitor()
        .args(["decide", &ap, "yes"])
        .run()
        .expect_code(0);
    env.monitor()
        .args(["worker", "--once"])
        .run()
        .expect_code(0);
    let written = std::fs::read_to_string(&marker).unwrap_or_default();
    assert_eq!(written, format!("deployed staging by {ap}\n"));
    assert_eq!(s(&run_row(&env, &run), "status"), "completed");
    assert_eq!(resumes_of(&env, &run).len(), 1);
}

#[test]
fn kill_9_of_the_worker_mid_resume_loses_nothing_and_resumes_nothing_twice() {
    let env = TestEnv::new();
    let script = "read -p 'Go ahead? [y/N] ' x; echo \"got $x\"; sleep 2; echo \"$x\" > done.txt";
    let ask = |env: &TestEnv| {
        let mut c = env.shim();
        c.args(["bash", "-c", script]);
        c
    };
    ask(&env).run().expect_code(90);
    let ap = env.pending_approval();
    let first = s(&env.only_run(), "tool_run_id").to_owned();
    env.decide(s(&ap, "approval_id"), "y").expect_code(0);
    let worker = env
        .monitor()
        .args(["worker", "--interval", "200ms"])
        .spawn();
    // Killed while the resumed tool is still at work.
    assert!(
        wait_for_state(Duration::from_secs(20), || resumes_of(&env, &first)
            .iter()
            .any(|r| r["status"] == "running")),
        "no resume started: {:#?}",
        env.runs()
    );
    worker.signal(libc::SIGKILL);
    let out = worker.wait();
    assert_eq!(out.signal, Some(libc::SIGKILL));
    // The resumed run finishes by itself: its headless-run does not depend on the worker.
    let done = env.work().join("done.txt");
    assert!(
        wait_until(Duration::from_secs(20), || std::fs::read_to_string(&done)
            .is_ok_and(|t| t == "y\n")),
        "the resumed tool did not finish its work"
    );
    assert!(wait_until(Duration::from_secs(10), || {
        resumes_of(&env, &first)
            .iter()
            .all(|r| r["status"] == "completed")
    }));
    // A new worker finds nothing left to do: the approval was used once.
    let again = env.monitor().args(["worker", "--once"]).run();
    again.expect_code(0);
    assert!(!again.out().contains("resuming"), "{}", again.out());
    let resumes = resumes_of(&env, &first);
    assert_eq!(resumes.len(), 1, "{resumes:#?}");
    assert_eq!(s(&run_row(&env, &first), "status"), "completed");
    let ap = approval_row(&env, s(&ap, "approval_id"));
    assert_eq!(s(&ap, "consumed_by"), s(&resumes[0], "tool_run_id"));
}

/// A deploy script that asks first, then does its work (writes `marker` with its version).
fn deploy_script(env: &TestEnv, version: &str) -> std::path::PathBuf {
    deploy_script_in(&env.work(), version)
}

/// The same in `dir` (its `marker` goes to the directory it is run in).
fn deploy_script_in(dir: &std::path::Path, version: &str) -> std::path::PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let script = dir.join("deploy.sh");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\nread -p 'Deploy to prod? [y/N] ' answer\n[ \"$answer\" = y ] && echo {version} > marker && echo deployed {version}\n"
        ),
    )
    .unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    script
}

/// Issue 12 item 8: a decision covers what the command ran when it asked. The script is
/// edited between the decision and the resume: the worker does not start it at all (it
/// could act before it reaches the prompt), and the waiting run fails saying why.
#[test]
fn the_worker_refuses_to_resume_a_changed_script() {
    let env = TestEnv::new();
    deploy_script(&env, "v1");
    env.shim().arg("./deploy.sh").run().expect_code(90);
    let ap = env.pending_approval();
    env.decide(s(&ap, "approval_id"), "y").expect_code(0);
    // Edited after the decision (another length, so its identity surely changes).
    deploy_script(&env, "v2-with-something-else");
    env.monitor()
        .args(["worker", "--once"])
        .run()
        .expect_code(0);
    let runs = env.runs();
    assert_eq!(runs.len(), 1, "a changed script was started: {runs:#?}");
    assert_eq!(s(&runs[0], "status"), "failed", "{runs:#?}");
    assert!(
        s(&runs[0], "reason").contains("changed since it asked"),
        "{runs:#?}"
    );
    assert!(!env.work().join("marker").exists(), "the script ran");
}

/// The same for a hand re-run through an interpreter (`sh deploy.sh`): the edited script
/// is asked about anew, and the approval says what changed.
#[test]
fn a_rerun_of_an_edited_script_is_asked_again() {
    let env = TestEnv::new();
    deploy_script(&env, "v1");
    let run = |env: &TestEnv| env.shim().args(["sh", "deploy.sh"]).run();
    run(&env).expect_code(90);
    let first = env.pending_approval();
    env.decide(s(&first, "approval_id"), "y").expect_code(0);
    deploy_script(&env, "v2-edited-after-the-decision");
    run(&env).expect_code(90);
    assert!(
        !env.work().join("marker").exists(),
        "the edited script acted"
    );
    let second = env.pending_approval();
    assert_ne!(s(&second, "approval_id"), s(&first, "approval_id"));
    assert!(
        s(&second, "context").contains("The tool (its executable or script) changed since"),
        "{second:#?}"
    );
    // Unchanged since the second decision: it runs.
    env.decide(s(&second, "approval_id"), "y").expect_code(0);
    let out = run(&env);
    out.expect_code(0);
    assert!(
        out.out().contains("deployed v2-edited"),
        "{}",
        out.context()
    );
}

/// Issue 12 item 12: the worker re-runs a parked command in the environment it asked in
/// (not the worker's own), with its secret-looking variables never stored and left out.
#[test]
fn the_worker_resumes_in_the_runs_own_environment_without_its_secrets() {
    let env = TestEnv::new();
    let script =
        "read -p 'Proceed? [y/N] ' a; echo \"answer=$a FOO=$FOO TOKEN=${MY_TOKEN:-unset}\"";
    env.shim()
        .env("FOO", "bar-from-the-run")
        .env("MY_TOKEN", "s3cret-value")
        .args(["sh", "-c", script])
        .run()
        .expect_code(90);
    let ap = env.pending_approval();
    let parked = env.only_run();
    let saved = &parked["metadata"]["env"];
    assert_eq!(saved["vars"]["FOO"], "bar-from-the-run", "{parked:#?}");
    assert!(saved["vars"].get("MY_TOKEN").is_none(), "{parked:#?}");
    assert!(
        saved["withheld"]
            .as_array()
            .is_some_and(|w| w.iter().any(|n| n == "MY_TOKEN")),
        "{parked:#?}"
    );
    env.decide(s(&ap, "approval_id"), "y").expect_code(0);
    // The worker's environment has its own token, not the run's FOO.
    let out = env
        .monitor()
        .env_remove("FOO")
        .env("MY_TOKEN", "the-workers-own")
        .args(["worker", "--once"])
        .run();
    out.expect_code(0);
    assert!(
        out.out().contains("with MY_TOKEN from the worker's"),
        "{}",
        out.context()
    );
    let id = s(&parked, "tool_run_id").to_owned();
    let resumes = resumes_of(&env, &id);
    assert_eq!(resumes.len(), 1, "{resumes:#?}");
    let output = String::from_utf8_lossy(&env.run_log(s(&resumes[0], "tool_run_id"))).into_owned();
    assert!(
        output.contains("answer=y FOO=bar-from-the-run TOKEN=the-workers-own"),
        "{output}"
    );
    // The secret reached no file of the state dir.
    for entry in walk_files(&env.state()) {
        let bytes = std::fs::read(&entry).unwrap_or_default();
        assert!(
            !String::from_utf8_lossy(&bytes).contains("s3cret-value"),
            "{} holds the secret",
            entry.display()
        );
    }
}

/// Issue 25 item 7: secrets are never stored, so a resume lacks what was withheld when its
/// run asked — unless the worker (the executor's own session, the same user) has it in its
/// own environment. What it gave is said by the worker and recorded on the resumed run for
/// `monitor show`; a resume that would lack one is refused, naming it (issue 27).
#[test]
fn a_resume_names_the_withheld_variables_it_lacks_and_takes_them_from_the_worker() {
    let env = TestEnv::new();
    let script = "read -p 'Proceed? [y/N] ' a; echo \"answer=$a TOKEN=${DEPLOY_TOKEN:-unset}\"; \
                  [ -n \"$DEPLOY_TOKEN\" ]";
    let park_and_decide = |env: &TestEnv| -> String {
        env.shim()
            .env("DEPLOY_TOKEN", "s3cret-of-the-run")
            .args(["sh", "-c", script])
            .run()
            .expect_code(90);
        let ap = env.pending_approval();
        env.decide(s(&ap, "approval_id"), "y").expect_code(0);
        s(&ap, "tool_run_id").to_owned()
    };
    // The worker's environment does not have it: the resume is refused, naming it (issue
    // 27: never started keyless).
    let first = park_and_decide(&env);
    let out = env
        .monitor()
        .env_remove("DEPLOY_TOKEN")
        .args(["worker", "--once"])
        .run();
    out.expect_code(0);
    assert!(
        out.out().contains(
            "it needs DEPLOY_TOKEN (withheld when it asked), which this worker's environment lacks"
        ),
        "{}",
        out.context()
    );
    assert!(resumes_of(&env, &first).is_empty(), "{}", out.context());
    let refused = env.run_by_id(&first);
    assert_eq!(s(&refused, "status"), "failed", "{refused:#?}");
    assert!(
        s(&refused, "reason").contains("start `monitor worker` with DEPLOY_TOKEN set"),
        "{refused:#?}"
    );
    // The worker has its own: the resume gets that one (never the run's, never stored).
    let second = park_and_decide(&env);
    let out = env
        .monitor()
        .env("DEPLOY_TOKEN", "the-workers-own")
        .args(["worker", "--once"])
        .run();
    out.expect_code(0);
    assert!(
        out.out().contains("with DEPLOY_TOKEN from the worker's"),
        "{}",
        out.context()
    );
    let resumes = resumes_of(&env, &second);
    assert_eq!(resumes.len(), 1, "{}", out.context());
    let rid = s(&resumes[0], "tool_run_id").to_owned();
    assert_eq!(s(&resumes[0], "status"), "completed", "{resumes:#?}");
    let output = String::from_utf8_lossy(&env.run_log(&rid)).into_owned();
    assert!(
        output.contains("answer=y TOKEN=the-workers-own"),
        "{output}"
    );
    assert_eq!(
        env.run_by_id(&rid)["metadata"]["resume_env"],
        serde_json::json!({"from_worker": ["DEPLOY_TOKEN"], "missing": []})
    );
    // The run's own value was never stored (the tool printed the worker's: its output is
    // in the run log, as any output is).
    for entry in walk_files(&env.state()) {
        let text = String::from_utf8_lossy(&std::fs::read(&entry).unwrap_or_default()).into_owned();
        assert!(
            !text.contains("s3cret-of-the-run"),
            "{} holds the run's secret",
            entry.display()
        );
    }
}

/// Issue 25 item 7: a relative command (`./deploy.sh`) is looked at and run in the run's
/// own directory, not the worker's: a worker started in another directory resumes it (it
/// used to find no such file there and refuse every such run as changed), and the script
/// works where it asked. Edited after the decision, it is still refused.
#[test]
fn a_relative_command_is_resumed_in_its_own_directory_by_a_worker_started_elsewhere() {
    let env = TestEnv::new();
    let (a, b) = (env.work().join("a"), env.work().join("b"));
    std::fs::create_dir_all(&a).unwrap();
    std::fs::create_dir_all(&b).unwrap();
    deploy_script_in(&a, "v1");
    let park_and_decide = |env: &TestEnv| -> String {
        env.shim()
            .current_dir(&a)
            .arg("./deploy.sh")
            .run()
            .expect_code(90);
        let ap = env.pending_approval();
        env.decide(s(&ap, "approval_id"), "y").expect_code(0);
        s(&ap, "tool_run_id").to_owned()
    };
    let worker_in_b = |env: &TestEnv| {
        let out = env
            .monitor()
            .current_dir(&b)
            .args(["worker", "--once"])
            .run();
        out.expect_code(0);
        out
    };
    let first = park_and_decide(&env);
    let out = worker_in_b(&env);
    let resumes = resumes_of(&env, &first);
    assert_eq!(resumes.len(), 1, "{}", out.context());
    assert_eq!(s(&resumes[0], "status"), "completed", "{}", out.context());
    assert_eq!(s(&resumes[0], "cwd"), a.to_string_lossy());
    assert_eq!(
        std::fs::read_to_string(a.join("marker")).unwrap_or_default(),
        "v1\n",
        "{}",
        out.context()
    );
    assert!(!b.join("marker").exists());
    // Parked again, decided, then edited: the worker in B still sees the change in A.
    std::fs::remove_file(a.join("marker")).unwrap();
    let second = park_and_decide(&env);
    deploy_script_in(&a, "v2-with-something-else");
    let out = worker_in_b(&env);
    assert!(resumes_of(&env, &second).is_empty(), "{}", out.context());
    let row = run_row(&env, &second);
    assert_eq!(s(&row, "status"), "failed", "{row:#?}");
    assert!(
        s(&row, "reason").contains("changed since it asked"),
        "{row:#?}"
    );
    assert!(!a.join("marker").exists(), "the changed script ran");
}

/// Issue 25 item 7: a resume reads the user's config file the worker reads
/// (`HEADLESS_RUN_CONFIG`, which a run's recorded environment never holds) — not one found
/// through the run's recorded `HOME`. Here that file's timeout ends the resumed tool.
#[test]
fn a_resume_reads_the_config_file_of_the_worker() {
    let env = TestEnv::new();
    let config = env.path().join("worker.toml");
    std::fs::write(&config, "[defaults]\ntimeout = \"2s\"\n").unwrap();
    env.shim()
        .args(["sh", "-c", "read -p 'Proceed? [y/N] ' a; sleep 30"])
        .run()
        .expect_code(90);
    let ap = env.pending_approval();
    env.decide(s(&ap, "approval_id"), "y").expect_code(0);
    let out = env
        .monitor()
        .env("HEADLESS_RUN_CONFIG", &config)
        .args(["worker", "--once"])
        .run();
    out.expect_code(0);
    let resumes = resumes_of(&env, s(&ap, "tool_run_id"));
    assert_eq!(resumes.len(), 1, "{}", out.context());
    assert_eq!(n(&resumes[0], "exit_code"), 124, "{resumes:#?}");
}

/// Every file below `dir`.
fn walk_files(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() {
                out.extend(walk_files(&p));
            } else {
                out.push(p);
            }
        }
    }
    out
}

/// Issue 13 item 4: a decision rings the database's doorbell (inotify on its WAL), so a
/// worker whose next pass is ten minutes away resumes the run now. Without the doorbell
/// this waits out the interval.
#[test]
fn a_decision_starts_the_workers_next_pass_at_once() {
    let env = TestEnv::new();
    // The state dir exists before the worker starts, as on any machine that ran a tool.
    env.shim().arg("true").run().expect_code(0);
    let worker = env.monitor().args(["worker", "--interval", "10m"]).spawn();
    assert!(
        wait_until(Duration::from_secs(10), || worker
            .stderr_now()
            .contains("started as")),
        "{}",
        worker.stderr_now()
    );
    let t = tool_str();
    let (run, _) = parked_and_decided(&env, &[&t, "print", "rung"], "yes");
    assert!(
        wait_for_state(Duration::from_secs(60), || !resumes_of(&env, &run.id)
            .is_empty()),
        "not resumed before the 10 minute interval; stderr: {}",
        worker.stderr_now()
    );
    worker.signal(libc::SIGTERM);
    worker.wait().expect_code(0);
}

/// Issue 13 item 5: a worker resumes only runs of its own host, and only as the run's own
/// user: another host's run is left to that host's workers, another user's is refused with
/// the reason — never run as the worker's user.
#[test]
fn a_worker_leaves_other_hosts_and_users_runs_alone() {
    let env = TestEnv::new();
    let t = tool_str();
    let mut elsewhere = Run::parked(&env, &[&t, "print", "elsewhere"]);
    elsewhere.host = "build-07".into();
    elsewhere.insert(&env);
    let a = Approval::pending(&elsewhere, "Proceed?");
    a.insert(&env);
    let someone = Run::parked(&env, &[&t, "print", "someone"]);
    someone.insert(&env);
    env.raw_db()
        .execute(
            "UPDATE tool_runs SET metadata = '{\"uid\": 4242}' WHERE tool_run_id = ?1",
            [&someone.id],
        )
        .unwrap();
    let b = Approval::pending(&someone, "Proceed?");
    b.insert(&env);
    for ap in [&a, &b] {
        env.monitor()
            .args(["decide", &ap.id, "yes"])
            .run()
            .expect_code(0);
    }
    let out = env.monitor().args(["worker", "--once"]).run();
    out.expect_code(0);
    assert!(
        out.out().contains(&format!(
            "{}: not resumed here: it ran on build-07, not on this host",
            elsewhere.id
        )),
        "{}",
        out.context()
    );
    assert!(
        out.out().contains(&format!(
            "{}: not resumed here: it was run by uid 4242",
            someone.id
        )),
        "{}",
        out.context()
    );
    for (run, ap) in [(&elsewhere, &a), (&someone, &b)] {
        assert!(resumes_of(&env, &run.id).is_empty(), "{}", out.context());
        assert_eq!(s(&run_row(&env, &run.id), "status"), "waiting_approval");
        assert!(approval_row(&env, &ap.id)["claimed_by"].is_null());
    }
    // A worker of the run's pool resumes it on this host; a run of no pool stays refused.
    let mut pooled = Run::parked(&env, &[&t, "print", "pooled"]);
    pooled.host = "build-08".into();
    pooled.insert(&env);
    env.raw_db()
        .execute(
            "UPDATE tool_runs SET metadata = '{\"pool\": \"ci-fleet\"}' WHERE tool_run_id = ?1",
            [&pooled.id],
        )
        .unwrap();
    let c = Approval::pending(&pooled, "Proceed?");
    c.insert(&env);
    env.monitor()
        .args(["decide", &c.id, "yes"])
        .run()
        .expect_code(0);
    env.monitor()
        .args(["worker", "--once", "--pool", "bad pool!"])
        .run()
        .expect_code(2);
    let out = env
        .monitor()
        .args(["worker", "--once", "--pool", "ci-fleet"])
        .run();
    out.expect_code(0);
    let resumed = resumes_of(&env, &pooled.id);
    assert_eq!(resumed.len(), 1, "{}", out.context());
    assert_eq!(
        resumed[0]["metadata"]["pool"], "ci-fleet",
        "the resume stays in the pool"
    );
    assert!(resumes_of(&env, &elsewhere.id).is_empty());
    // monitor restart refuses another user's finished run the same way.
    let done = Run::parked(&env, &[&t, "print", "done"]);
    done.insert(&env);
    env.raw_db()
        .execute(
            "UPDATE tool_runs SET status = 'completed', exit_code = 0,
                 metadata = '{\"uid\": 4242}' WHERE tool_run_id = ?1",
            [&done.id],
        )
        .unwrap();
    let out = env.monitor().args(["restart", &done.id]).run();
    assert_ne!(out.code(), 0, "{}", out.context());
    assert!(
        out.stderr.contains("it was run by uid 4242"),
        "{}",
        out.context()
    );
}

/// Issue 27 item 3: a resume keeps the limits and mode its run was given on its command
/// line (or in its environment), whatever the worker's own config says: exit mode at the
/// next prompt although the worker's file says `wait`, and the run's `--timeout`.
#[test]
fn a_resume_keeps_the_limits_and_mode_its_run_was_given() {
    let env = TestEnv::new();
    let config = env.path().join("worker.toml");
    std::fs::write(
        &config,
        "[defaults]\non_prompt = \"wait\"\ntimeout = \"none\"\n",
    )
    .unwrap();
    let script = "read -p 'First? [y/N] ' a; read -p 'Second? [y/N] ' b; sleep 30";
    env.shim()
        .args([
            "--timeout",
            "3s",
            "--on-prompt",
            "exit",
            "--",
            "sh",
            "-c",
            script,
        ])
        .run()
        .expect_code(90);
    let first = env.pending_approval();
    let parked = env.run_by_id(s(&first, "tool_run_id"));
    assert_eq!(
        parked["metadata"]["env"]["flags"],
        serde_json::json!(["--timeout", "3000ms", "--on-prompt", "exit"]),
        "{parked:#?}"
    );
    env.decide(s(&first, "approval_id"), "y").expect_code(0);
    let worker = |env: &TestEnv| {
        let out = env
            .monitor()
            .env("HEADLESS_RUN_CONFIG", &config)
            .args(["worker", "--once"])
            .timeout(Duration::from_secs(60))
            .run();
        out.expect_code(0);
        out
    };
    // Exit mode kept: the second question parks the resume (the worker's `wait` would
    // keep it waiting, and `--once` with it).
    let out = worker(&env);
    let resumes = resumes_of(&env, s(&first, "tool_run_id"));
    assert_eq!(resumes.len(), 1, "{}", out.context());
    assert_eq!(n(&resumes[0], "exit_code"), 90, "{resumes:#?}");
    let second = env.pending_approval();
    assert!(
        s(&second, "prompt_line").starts_with("Second?"),
        "{second:#?}"
    );
    env.decide(s(&second, "approval_id"), "y").expect_code(0);
    // The run's own timeout (the worker's file says none) ends the sleep.
    let out = worker(&env);
    let again = resumes_of(&env, s(&resumes[0], "tool_run_id"));
    assert_eq!(again.len(), 1, "{}", out.context());
    assert_eq!(n(&again[0], "exit_code"), 124, "{again:#?}");
}
