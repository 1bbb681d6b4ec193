//! Who runs what (DESIGN §14), on the embedded store, with real OS users: a state dir is its
//! owner's alone (another user's, or one with links planted in it, is never written and its
//! runs never run), so nothing recorded by one user is ever run as another; and an
//! approval never changes under the operator (a retry on another screen asks anew, and a
//! decision on the old one is refused, naming the new).

use headless_run_e2e::*;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::time::Duration;

fn chmod(p: &Path, mode: u32) {
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
}

fn chown(p: &Path, (uid, gid): (u32, u32)) {
    std::os::unix::fs::chown(p, Some(uid), Some(gid)).unwrap();
}

/// A directory `user` owns (mode 0700), in the test's dir.
fn own_dir(env: &TestEnv, name: &str, user: (u32, u32)) -> std::path::PathBuf {
    let d = env.path().join(name);
    std::fs::create_dir_all(&d).unwrap();
    chown(&d, user);
    chmod(&d, 0o700);
    d
}

/// The tool every case runs: it asks, and once answered writes the uid it ran as into
/// `proof` in its directory.
const ASKS_THEN_PROVES: &str = "printf 'Deploy? [y/N] '; read a; id -u > proof";

#[test]
fn a_state_dir_another_user_owns_is_never_written_and_its_runs_never_run_as_you() {
    if !running_as_root("a_state_dir_another_user_owns_is_never_written") {
        return;
    }
    let env = TestEnv::new();
    let alice = os_user("hr-test-alice");
    chmod(env.path(), 0o755);
    let work = own_dir(&env, "alice-work", alice);

    // 1. A state dir shared by root and alice (root's, open to all): alice's shim writes
    //    nothing there — the tool runs unrecorded, a prompt it cannot record ends 125.
    let shared = env.path().join("shared");
    std::fs::create_dir(&shared).unwrap();
    chmod(&shared, 0o777);
    let out = env
        .shim()
        .env("HEADLESS_RUN_HOME", &shared)
        .current_dir(&work)
        .args(["sh", "-c", &format!("echo still runs; {ASKS_THEN_PROVES}")])
        .as_user(alice)
        .run();
    out.expect_code(125);
    assert!(out.out().starts_with("still runs\n"), "{}", out.context());
    assert!(
        out.stderr.contains("not your state store") && out.stderr.contains("owned by root"),
        "{}",
        out.stderr
    );
    let left: Vec<_> = std::fs::read_dir(&shared).unwrap().flatten().collect();
    assert!(left.is_empty(), "written into root's dir: {left:?}");

    // 2. Links planted in a dir alice owns (open to all): root's shim opens nothing through
    //    them and creates nothing where they point; its tool still runs.
    let planted = env.path().join("planted");
    std::fs::create_dir(&planted).unwrap();
    chown(&planted, alice);
    chmod(&planted, 0o777);
    let elsewhere = env.path().join("elsewhere");
    std::fs::create_dir(&elsewhere).unwrap();
    std::os::unix::fs::symlink(elsewhere.join("state.db"), planted.join("state.db")).unwrap();
    std::os::unix::fs::symlink(&elsewhere, planted.join("logs")).unwrap();
    let out = env
        .shim()
        .env("HEADLESS_RUN_HOME", &planted)
        .args(["sh", "-c", "echo root ran; exit 3"])
        .run();
    out.expect_code(3);
    assert_eq!(out.out(), "root ran\n");
    assert!(out.stderr.contains("hr-test-alice"), "{}", out.stderr);
    assert!(
        std::fs::read_dir(&elsewhere).unwrap().next().is_none(),
        "created through a planted link"
    );
    // …and a database alice planted there is not root's to write either.
    std::fs::remove_file(planted.join("state.db")).unwrap();

    // 3. Alice's own store, a parked run in it, decided by alice. Root's worker pointed at
    //    it runs nothing (it is not root's store), says whose it is; root may read it.
    let mine = own_dir(&env, "alice-home", alice).join("state");
    let out = env
        .shim()
        .env("HEADLESS_RUN_HOME", &mine)
        .current_dir(&work)
        .args(["sh", "-c", ASKS_THEN_PROVES])
        .as_user(alice)
        .run();
    out.expect_code(90);
    assert_eq!(std::fs::metadata(&mine).unwrap().uid(), alice.0);
    let as_alice = |args: &[&str]| {
        let mut c = env.monitor();
        c.env("HEADLESS_RUN_HOME", &mine)
            .current_dir(&work)
            .args(args)
            .as_user(alice);
        c.run()
    };
    let pending = as_alice(&["approvals", "--json"]);
    pending.expect_code(0);
    let list: serde_json::Value = serde_json::from_str(&pending.out()).unwrap();
    let ap = list[0]["approval_id"].as_str().unwrap().to_owned();
    as_alice(&["decide", &ap, "y"]).expect_code(0);
    let root = |args: &[&str]| {
        let mut c = env.monitor();
        c.env("HEADLESS_RUN_HOME", &mine).args(args);
        c.run()
    };
    let out = root(&["worker", "--once"]);
    out.expect_code(1);
    assert!(
        out.stderr.contains("not your state store") && out.stderr.contains("hr-test-alice"),
        "{}",
        out.context()
    );
    assert!(
        !work.join("proof").exists(),
        "root's worker ran alice's command"
    );
    let listed = root(&["runs", "--json"]);
    listed.expect_code(0);
    assert!(
        listed.out().contains("waiting_approval"),
        "{}",
        listed.context()
    );
    // Root's decisions are not written into alice's store either.
    let out = root(&["cancel", list[0]["tool_run_id"].as_str().unwrap()]);
    out.expect_code(1);
    assert!(
        out.stderr.contains("not your state store"),
        "{}",
        out.stderr
    );

    // 4. Alice's own worker resumes her run, as her.
    let out = as_alice(&["worker", "--once"]);
    out.expect_code(0);
    assert!(
        wait_until(Duration::from_secs(30), || work.join("proof").exists()),
        "{}",
        out.context()
    );
    let proof = std::fs::read_to_string(work.join("proof")).unwrap();
    assert_eq!(proof.trim(), alice.0.to_string(), "ran as alice");
    assert_eq!(
        std::fs::metadata(work.join("proof")).unwrap().uid(),
        alice.0
    );
}

/// A row claiming another user (written past the shim, into one's own store) is never run
/// as anyone: the worker says whose it claims to be, and `monitor show` why it waits.
#[test]
fn a_run_claiming_another_uid_stays_parked_with_the_reason_shown() {
    let env = TestEnv::new();
    let out = env.shim().args(["sh", "-c", ASKS_THEN_PROVES]).run();
    out.expect_code(90);
    let ap = env.pending_approval();
    let run = s(&ap, "tool_run_id").to_owned();
    env.decide(s(&ap, "approval_id"), "y").expect_code(0);
    // Forged in place: the run says it ran as uid 4242 and was started by someone else.
    env.raw_db()
        .execute(
            "UPDATE tool_runs SET metadata = json_set(metadata, '$.uid', 4242) WHERE tool_run_id = ?1",
            [&run],
        )
        .unwrap();
    let out = env.monitor().args(["worker", "--once"]).run();
    out.expect_code(0);
    assert!(
        out.out().contains("not resumed here") && out.out().contains("uid 4242"),
        "{}",
        out.context()
    );
    assert!(!env.work().join("proof").exists());
    assert_eq!(s(&env.run_by_id(&run), "status"), "waiting_approval");
    let shown = env.monitor().args(["show", &run]).run();
    shown.expect_code(0);
    assert!(
        shown
            .out()
            .lines()
            .any(|l| l.starts_with("resumed") && l.contains("uid 4242")),
        "{}",
        shown.out()
    );
}

/// A retry that shows another screen never changes the approval the operator read: it asks
/// anew, the old one ends superseded, and approving the old id (a script that did not read
/// the new one) is refused, naming the new one. A decision names the version it saw.
#[test]
fn a_retry_on_another_screen_asks_anew_and_the_old_approval_cannot_be_approved() {
    let env = TestEnv::new();
    let plan = env.work().join("plan.txt");
    let tool = "cat plan.txt; printf 'Apply? [y/N] '; read a; echo \"applied $a\" > applied";
    std::fs::write(&plan, "Plan: 1 to add, 0 to destroy.\n").unwrap();
    env.shim().args(["sh", "-c", tool]).run().expect_code(90);
    let first = env.pending_approval();
    let first_id = s(&first, "approval_id").to_owned();
    // Retried (a CI re-run) after the plan changed under it.
    std::fs::write(&plan, "Plan: 0 to add, 42 to destroy.\n").unwrap();
    env.shim().args(["sh", "-c", tool]).run().expect_code(90);
    let second = env.pending_approval();
    let second_id = s(&second, "approval_id").to_owned();
    assert_ne!(second_id, first_id, "a changed screen is a new approval");
    assert!(
        s(&second, "context").contains("42 to destroy")
            && s(&second, "context").contains("changed"),
        "{second:?}"
    );
    let old = env.approval_by_id(&first_id);
    assert_eq!(s(&old, "status"), "expired");
    assert_eq!(s(&old, "decided_by"), "system:superseded");
    assert_eq!(s(&old, "superseded_by"), second_id);
    assert_eq!(
        s(&old, "context"),
        s(&first, "context"),
        "what was read stays"
    );
    // Approving the old id: refused (3), naming the new one; nothing is typed.
    let out = env.decide(&first_id, "yes");
    out.expect_code(3);
    assert!(out.stderr.contains(&second_id), "{}", out.stderr);
    // The same over HTTP: 409, naming the approval to read.
    {
        use crate::serve::{Served, token};
        let alice = token(&env, "alice", "operator");
        let served = Served::start(&env);
        let (st, v) = served.json(
            "POST",
            &format!("/api/v1/approvals/{first_id}/approve"),
            &alice,
            None,
        );
        assert_eq!(st, 409, "{v}");
        assert_eq!(v["outcome"], "superseded", "{v}");
        assert_eq!(v["superseded_by"], second_id.as_str(), "{v}");
        let (st, v) = served.json(
            "POST",
            &format!("/api/v1/approvals/{second_id}/approve"),
            &alice,
            Some(r#"{"version": "not-the-one-shown"}"#),
        );
        assert_eq!(st, 409, "{v}");
        assert_eq!(v["outcome"], "changed", "{v}");
        // "Approve the execution" (a gate's way) was meant for what was shown before.
        let ex = s(&second, "execution_id").to_owned();
        let (st, v) = served.json(
            "POST",
            &format!("/api/v1/executions/{ex}/approve"),
            &alice,
            None,
        );
        assert_eq!(st, 409, "{v}");
        assert_eq!(v["approval_id"], second_id.as_str(), "{v}");
        assert!(v["error"].as_str().unwrap().contains(&first_id), "{v}");
    }
    // A decision on another version than the one shown: refused too.
    let out = env
        .monitor()
        .args(["decide", &second_id, "y", "--seen", "0123456789abcdef"])
        .run();
    out.expect_code(3);
    assert!(out.stderr.contains("not the version"), "{}", out.stderr);
    assert_eq!(s(&env.approval_by_id(&second_id), "status"), "pending");
    // On the version shown, it goes through, and the resume applies what was approved.
    let version = s(&second, "screen_digest").to_owned();
    env.monitor()
        .args(["decide", &second_id, "y", "--seen", &version])
        .run()
        .expect_code(0);
    env.monitor()
        .args(["worker", "--once"])
        .run()
        .expect_code(0);
    assert!(
        wait_until(Duration::from_secs(30), || env
            .work()
            .join("applied")
            .exists()),
        "the resume did not run"
    );
    assert_eq!(
        std::fs::read_to_string(env.work().join("applied")).unwrap(),
        "applied y\n"
    );
}
