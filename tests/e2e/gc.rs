//! `monitor gc --older-than`: deletes finished runs, their decided approvals and their run
//! logs; keeps recent and live runs and pending approvals; never touches the audit chain.

use crate::rows::*;
use headless_run_e2e::*;
use std::time::Duration;

#[test]
fn gc_deletes_old_finished_runs_and_keeps_the_rest() {
    let env = TestEnv::new();
    env.shim().args(["echo", "recent"]).run().expect_code(0);
    let recent = s(&env.only_run(), "tool_run_id").to_owned();
    let long_ago = ago(Duration::from_secs(10 * 86_400));
    let mut old = Run::parked(&env, &["make", "all"]);
    old.status = "completed".into();
    old.exit_code = Some(0);
    old.started_at = long_ago.clone();
    old.completed_at = Some(long_ago.clone());
    old.insert(&env);
    let log = env.state().join(format!("logs/runs/{}.log", old.id));
    std::fs::write(&log, "old output\n").unwrap();
    let mut decided = Approval::pending(&old, "Build?");
    decided.status = "approved".into();
    decided.chosen_value = Some("yes".into());
    decided.insert(&env);
    let pending = Approval::pending(&old, "Still open?");
    pending.insert(&env);
    // Old but still parked on an approval: kept.
    let mut parked = Run::parked(&env, &["deploy"]);
    parked.started_at = long_ago.clone();
    parked.insert(&env);
    // Raw: the audit table as a whole, in the file (gc deletes runs, and rows of deleted runs
    // or of no run, like gc's own, are shown by no command).
    let audit_before = env.raw_rows("events").len();
    let out = env
        .monitor()
        .args(["gc", "--older-than", "7d", "--dry-run"])
        .run();
    out.expect_code(0);
    assert!(
        out.out()
            .contains("would delete 1 runs, 1 approvals and 1 run logs"),
        "{}",
        out.out()
    );
    assert_eq!(env.runs().len(), 3, "a dry run deletes nothing");
    let out = env.monitor().args(["gc", "--older-than", "7d"]).run();
    out.expect_code(0);
    assert!(
        out.out()
            .contains("deleted 1 runs, 1 approvals and 1 run logs"),
        "{}",
        out.out()
    );
    let ids: Vec<String> = env
        .runs()
        .iter()
        .map(|r| s(r, "tool_run_id").to_owned())
        .collect();
    assert!(ids.contains(&recent) && ids.contains(&parked.id), "{ids:?}");
    assert!(!ids.contains(&old.id));
    assert!(!log.exists());
    assert_eq!(
        env.run_log(&recent),
        b"recent\n",
        "a recent run keeps its log"
    );
    let aps: Vec<String> = env
        .approvals()
        .iter()
        .map(|a| s(a, "approval_id").to_owned())
        .collect();
    assert_eq!(aps, vec![pending.id]);
    // The audit chain is whole, with one more row saying what gc did.
    let audit = env.raw_rows("events");
    assert_eq!(audit.len(), audit_before + 1);
    assert_eq!(s(audit.last().unwrap(), "event"), "gc");
    for pair in audit.windows(2) {
        assert_eq!(s(&pair[1], "prev_hash"), s(&pair[0], "hash"));
    }
    env.monitor()
        .args(["gc", "--older-than", "soon"])
        .run()
        .expect_code(2);
}

/// Issue 13 item 5: run ids are read from the store, which a tool of the same user can
/// write: an id that is not a run id (`../../../victim`) names no file, so gc deletes
/// nothing outside the runs directory.
#[test]
fn gc_never_deletes_a_file_a_forged_run_id_points_at() {
    let env = TestEnv::new();
    env.shim().args(["echo", "recent"]).run().expect_code(0);
    let long_ago = ago(Duration::from_secs(10 * 86_400));
    let mut forged = Run::parked(&env, &["make"]);
    forged.id = "../../../victim".into();
    forged.status = "completed".into();
    forged.exit_code = Some(0);
    forged.started_at = long_ago.clone();
    forged.completed_at = Some(long_ago);
    forged.insert(&env);
    // Where `logs/runs/{id}.log` leads for that id.
    let victim = env.path().join("victim.log");
    std::fs::write(&victim, "keep me\n").unwrap();
    let out = env.monitor().args(["gc", "--older-than", "7d"]).run();
    out.expect_code(0);
    assert_eq!(
        std::fs::read_to_string(&victim).unwrap(),
        "keep me\n",
        "{}",
        out.context()
    );
    assert!(
        env.runs().iter().all(|r| s(r, "tool_run_id") != forged.id),
        "the row itself is collected"
    );
}
