//! Deciding: `monitor decide` (first writer wins, repeats are no-ops, bad values, unknown
//! ids, no self-approval, --remember), and reading approvals back with `monitor approvals`
//! and `monitor show AP-…`.

use crate::rows::*;
use headless_run_e2e::*;

fn pending(env: &TestEnv, question: &str) -> (Run, Approval) {
    let run = Run::parked(env, &["deploy.sh", "--env", "prod"]);
    run.insert(env);
    let ap = Approval::pending(&run, question);
    ap.insert(env);
    (run, ap)
}

#[test]
fn a_decision_is_recorded_once_and_a_repeat_is_a_no_op() {
    let env = TestEnv::new();
    let (_run, ap) = pending(&env, "Deploy?");
    let out = env
        .monitor()
        .args(["decide", &ap.id, "yes", "--comment", "looks fine"])
        .run();
    out.expect_code(0);
    assert_eq!(out.out().lines().count(), 1, "{}", out.out());
    assert!(out.out().contains("approved"), "{}", out.out());
    let row = approval_row(&env, &ap.id);
    assert_eq!(s(&row, "status"), "approved");
    assert_eq!(s(&row, "chosen_value"), "yes");
    assert_eq!(s(&row, "decided_by"), user_name());
    assert_eq!(s(&row, "decision_channel"), "cli");
    assert_eq!(s(&row, "comment"), "looks fine");
    // The same decision again (by keyword this time) changes nothing and says so.
    let again = env.monitor().args(["decide", &ap.id, "yes"]).run();
    again.expect_code(0);
    assert!(
        again.out().contains("already approved: yes by"),
        "{}",
        again.out()
    );
    assert_eq!(
        s(&approval_row(&env, &ap.id), "decided_at"),
        s(&row, "decided_at")
    );
    // A different decision is a conflict naming who decided and when.
    let other = env.monitor().args(["decide", &ap.id, "reject"]).run();
    other.expect_code(3);
    assert!(
        other
            .stderr
            .contains(&format!("already decided by {}", user_name())),
        "{}",
        other.stderr
    );
    assert!(other.stderr.contains("(approved, yes)"), "{}", other.stderr);
    // One status change in the log and in the audit chain.
    let changes: Vec<serde_json::Value> = env
        .log_events()
        .into_iter()
        .filter(|e| e["event"] == "approval_status_change")
        .collect();
    assert_eq!(changes.len(), 1, "{changes:#?}");
    assert_eq!(changes[0]["approval_id"], ap.id.as_str());
    assert_eq!(changes[0]["chosen_value"], "yes");
    let audit = env.audit();
    assert_eq!(
        audit
            .iter()
            .filter(|e| e["event"] == "approval_status_change")
            .count(),
        1
    );
}

#[test]
fn two_concurrent_deciders_exactly_one_wins() {
    let env = TestEnv::new();
    for round in 0..4 {
        let (_run, ap) = pending(&env, &format!("Deploy {round}?"));
        let a = env.monitor().args(["decide", &ap.id, "yes"]).spawn();
        let b = env.monitor().args(["decide", &ap.id, "no"]).spawn();
        let (a, b) = (a.wait(), b.wait());
        let mut codes = [a.code(), b.code()];
        codes.sort();
        assert_eq!(
            codes,
            [0, 3],
            "round {round}: {}\n{}",
            a.context(),
            b.context()
        );
        let winner = if a.code() == 0 { "yes" } else { "no" };
        let loser = if a.code() == 0 { &b } else { &a };
        assert!(
            loser.stderr.contains("already decided by"),
            "{}",
            loser.stderr
        );
        let row = approval_row(&env, &ap.id);
        assert_eq!(s(&row, "status"), "approved");
        assert_eq!(s(&row, "chosen_value"), winner);
    }
}

#[test]
fn bad_values_unknown_ids_and_wrong_ids() {
    let env = TestEnv::new();
    let (_run, ap) = pending(&env, "Deploy?");
    let out = env.monitor().args(["decide", &ap.id, "maybe"]).run();
    out.expect_code(2);
    assert!(
        out.stderr
            .contains("valid values: approve, deny, reject, yes, no"),
        "{}",
        out.stderr
    );
    assert_eq!(s(&approval_row(&env, &ap.id), "status"), "pending");
    let out = env
        .monitor()
        .args(["decide", "AP-00000000000000000000000000", "yes"])
        .run();
    out.expect_code(4);
    assert!(out.stderr.contains("no approval AP-"), "{}", out.stderr);
    env.monitor()
        .args(["decide", "TR-00000000000000000000000000", "yes"])
        .run()
        .expect_code(2);
    env.monitor().args(["decide", &ap.id]).run().expect_code(2);
}

#[test]
fn deciding_is_refused_inside_a_supervised_tool() {
    let env = TestEnv::new();
    let (_run, ap) = pending(&env, "Deploy?");
    // The variable the shim gives every tool.
    let out = env
        .monitor()
        .env("HEADLESS_RUN_TOOL_RUN_ID", "TR-01J00000000000000000000000")
        .args(["decide", &ap.id, "yes"])
        .run();
    out.expect_code(1);
    assert!(out.stderr.contains("refusing to decide"), "{}", out.stderr);
    assert!(
        out.stderr.contains("HEADLESS_RUN_TOOL_RUN_ID"),
        "{}",
        out.stderr
    );
    // Run by a tool under headless-run.
    let out = env
        .shim()
        .arg(bin("monitor"))
        .args(["decide", &ap.id, "yes"])
        .run();
    out.expect_code(1);
    assert!(
        out.out().contains("refusing to decide"),
        "{}",
        out.context()
    );
    // Even with the variable removed, the headless-run ancestor gives it away.
    let out = env
        .shim()
        .args(["env", "-u", "HEADLESS_RUN_TOOL_RUN_ID"])
        .arg(bin("monitor"))
        .args(["decide", &ap.id, "yes"])
        .run();
    out.expect_code(1);
    assert!(
        out.out().contains("headless-run is an ancestor process"),
        "{}",
        out.context()
    );
    let row = approval_row(&env, &ap.id);
    assert_eq!(s(&row, "status"), "pending", "nothing was decided");
}

#[test]
fn remember_stores_a_policy_for_the_prompt() {
    let env = TestEnv::new();
    let (_run, ap) = pending(&env, "Deploy?");
    let out = env
        .monitor()
        .args(["decide", &ap.id, "yes", "--remember"])
        .run();
    out.expect_code(0);
    assert!(out.out().contains("remembered"), "{}", out.out());
    // Raw: no command lists the policies (a gap in the contract), so the file is read.
    let policies = env.raw_rows("policies");
    assert_eq!(policies.len(), 1, "{policies:#?}");
    assert_eq!(s(&policies[0], "tool_name"), "deploy.sh");
    assert_eq!(s(&policies[0], "prompt_fingerprint"), "fp-Deploy?");
    assert_eq!(s(&policies[0], "value"), "yes");
    assert_eq!(s(&policies[0], "created_by"), user_name());
    assert_eq!(s(&policies[0], "source_approval_id"), ap.id);
    // Rejections are not remembered (a policy answers prompts; it never ends a tool).
    let (_run, other) = pending(&env, "Drop the database?");
    env.monitor()
        .args(["decide", &other.id, "reject", "--remember"])
        .run()
        .expect_code(2);
    assert_eq!(s(&approval_row(&env, &other.id), "status"), "pending");
    // An approval without a prompt fingerprint has nothing to remember.
    let run = Run::parked(&env, &["coop"]);
    run.insert(&env);
    let mut coop = Approval::pending(&run, "Coop?");
    coop.prompt_fingerprint = None;
    coop.insert(&env);
    env.monitor()
        .args(["decide", &coop.id, "yes", "--remember"])
        .run()
        .expect_code(2);
    assert_eq!(s(&approval_row(&env, &coop.id), "status"), "pending");
    // Nor has a cooperative request, fingerprint or not: policies answer prompts only.
    let coop = Approval::pending(&run, "Coop again?");
    coop.insert(&env);
    // Seeding: no command makes an approval cooperative.
    env.raw_db()
        .execute(
            "UPDATE approvals SET prompt_kind = 'cooperative' WHERE approval_id = ?1",
            [&coop.id],
        )
        .unwrap();
    let out = env
        .monitor()
        .args(["decide", &coop.id, "yes", "--remember"])
        .run();
    out.expect_code(2);
    assert!(out.stderr.contains("cooperative"), "{}", out.stderr);
    assert_eq!(s(&approval_row(&env, &coop.id), "status"), "pending");
    assert!(
        env.raw_rows("policies")
            .iter()
            .all(|p| p["source_approval_id"] != coop.id.as_str())
    );
}

/// `--remember` keeps an option for this prompt of this command in this directory: never
/// free text, and never wider than asked when the run that gives the scope is gone.
#[test]
fn remember_refuses_free_text_and_an_unknown_scope() {
    let env = TestEnv::new();
    let (_run, ap) = pending(&env, "Release name?");
    // Seeding: a text prompt (no command makes a seeded row take free text).
    env.raw_db()
        .execute(
            "UPDATE approvals SET allows_text = 1 WHERE approval_id = ?1",
            [&ap.id],
        )
        .unwrap();
    let out = env
        .monitor()
        .args(["decide", &ap.id, "v2-final", "--remember"])
        .run();
    out.expect_code(2);
    assert!(out.stderr.contains("free text"), "{}", out.stderr);
    assert_eq!(s(&approval_row(&env, &ap.id), "status"), "pending");
    // The asking run is gone: its scope is unknown, so only a deliberate widening goes.
    let run = Run::parked(&env, &["deploy.sh", "--env", "prod"]);
    let orphan = Approval::pending(&run, "Deploy?");
    orphan.insert(&env);
    let out = env
        .monitor()
        .args(["decide", &orphan.id, "yes", "--remember"])
        .run();
    out.expect_code(2);
    assert!(
        out.stderr.contains("--any-args --any-dir"),
        "{}",
        out.stderr
    );
    assert_eq!(s(&approval_row(&env, &orphan.id), "status"), "pending");
    assert!(env.raw_rows("policies").is_empty());
    env.monitor()
        .args([
            "decide",
            &orphan.id,
            "yes",
            "--remember",
            "--any-args",
            "--any-dir",
        ])
        .run()
        .expect_code(0);
    let policies = env.raw_rows("policies");
    assert_eq!(policies.len(), 1, "{policies:#?}");
    assert!(policies[0]["argv_json"].is_null() && policies[0]["cwd"].is_null());
}

#[test]
fn approvals_are_listed_and_shown_sanitized() {
    let env = TestEnv::new();
    let (run, ap) = pending(&env, "\x1b[1;31mDeploy\x1b[0m to prod?\x1b]0;pwned\x07");
    let (_, other) = pending(&env, "Second?");
    let out = env.monitor().arg("approvals").run();
    out.expect_code(0);
    let text = out.out();
    assert!(text.starts_with("APPROVAL"), "{text}");
    assert!(!text.contains('\x1b') && !text.contains('\x07'), "{text:?}");
    assert!(text.contains("Deploy to prod?"), "{text}");
    assert!(text.contains("yes/[no]"), "{text}");
    assert_eq!(text.lines().count(), 3, "{text}");
    // JSON: fields are the columns.
    let out = env.monitor().args(["approvals", "--json"]).run();
    let list: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(list.len(), 2);
    // Raw: the schema itself, which the JSON must match.
    let columns: Vec<String> = rows_of(
        &env.raw_db(),
        "SELECT name FROM pragma_table_info('approvals')",
    )
    .iter()
    .map(|r| s(r, "name").to_owned())
    .collect();
    let mut keys: Vec<String> = list[0].as_object().unwrap().keys().cloned().collect();
    // The columns, plus what is being approved: the command that asked, where, on which host.
    let mut cols = columns.clone();
    cols.extend(["command", "cwd", "host"].map(String::from));
    keys.sort();
    cols.sort();
    assert_eq!(keys, cols);
    assert_eq!(list[0]["options_json"][0]["value"], "yes");
    // Decided ones leave the default list, and show up with --status.
    env.monitor()
        .args(["decide", &other.id, "no"])
        .run()
        .expect_code(0);
    let out = env.monitor().args(["approvals", "--json"]).run();
    let list: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(list.len(), 1);
    assert_eq!(list[0]["approval_id"], ap.id.as_str());
    for (status, n) in [("approved", 1), ("all", 2), ("rejected", 0)] {
        let out = env
            .monitor()
            .args(["approvals", "--status", status, "--json"])
            .run();
        let list: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(list.len(), n, "{status}");
    }
    let out = env
        .monitor()
        .args(["approvals", "--status", "all", "--run", &run.id, "--json"])
        .run();
    let list: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(list.len(), 1);
    // --execution and --since: one approval of EX-1 asked three hours ago (seeded in the
    // file: no command changes when an approval was asked).
    env.raw_db()
        .execute(
            "UPDATE approvals SET execution_id = 'EX-1', created_at = ?2 WHERE approval_id = ?1",
            rusqlite::params![ap.id, ago(std::time::Duration::from_secs(3 * 3600))],
        )
        .unwrap();
    for (filter, expected) in [
        (vec!["--execution", "EX-1"], vec![ap.id.as_str()]),
        (vec!["--execution", "EX-2"], vec![]),
        (vec!["--since", "1h"], vec![other.id.as_str()]),
        (
            vec!["--since", "4h"],
            vec![other.id.as_str(), ap.id.as_str()],
        ),
    ] {
        let out = env
            .monitor()
            .args(["approvals", "--status", "all", "--json"])
            .args(&filter)
            .run();
        out.expect_code(0);
        let list: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).unwrap();
        let got: Vec<&str> = list
            .iter()
            .map(|a| a["approval_id"].as_str().unwrap())
            .collect();
        assert_eq!(got, expected, "{filter:?}");
    }
    env.monitor()
        .args(["approvals", "--since", "yesterday-ish"])
        .run()
        .expect_code(2);
    env.monitor()
        .args(["approvals", "--status", "bogus"])
        .run()
        .expect_code(2);
    // show AP: fields, options, context, all sanitized; and JSON.
    let out = env.monitor().args(["show", &ap.id]).run();
    out.expect_code(0);
    let text = out.out();
    assert!(!text.contains('\x1b') && !text.contains('\x07'), "{text:?}");
    assert!(text.contains("Deploy to prod?"), "{text}");
    assert!(text.contains("(default)"), "{text}");
    assert!(text.contains("context:"), "{text}");
    assert!(
        text.contains(&format!("monitor decide {}", ap.id)),
        "{text}"
    );
    let out = env.monitor().args(["show", &ap.id, "--json"]).run();
    let shown: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(shown["approval_id"], ap.id.as_str());
    assert_eq!(shown["status"], "pending");
    env.monitor()
        .args(["show", "AP-00000000000000000000000000"])
        .run()
        .expect_code(4);
    // show TR lists the run's approvals.
    let out = env.monitor().args(["show", &run.id]).run();
    assert!(out.out().contains(&ap.id), "{}", out.out());
    let out = env.monitor().args(["show", &run.id, "--json"]).run();
    let shown: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(shown["approvals"][0]["approval_id"], ap.id.as_str());
}

/// Issue 15 item 9: remembered decisions (and config policies) are visible and reversible.
#[test]
fn policies_are_listed_and_a_remembered_one_can_be_removed() {
    let env = TestEnv::new();
    env.write_config(
        "[[policies]]\nname = \"tmp-files\"\ntool = \"rm\"\nvalue = \"y\"\nwhen = [{ field = \"prompt\", op = \"glob\", value = \"*.tmp'? \" }]\n",
    );
    std::fs::write(env.work().join("keep.txt"), "x").unwrap();
    let rm = |env: &TestEnv| {
        let mut c = env.shim();
        c.args(["rm", "-i", "keep.txt"]);
        c
    };
    rm(&env).run().expect_code(90);
    let ap = env.pending_approval();
    env.monitor()
        .args(["decide", s(&ap, "approval_id"), "n", "--remember"])
        .run()
        .expect_code(0);
    let listed = env.monitor_json(&["policies"]).expect("a database");
    let listed = listed.as_array().expect("an array").clone();
    assert_eq!(listed.len(), 2, "{listed:#?}");
    let config = listed
        .iter()
        .find(|p| p["name"] == "tmp-files")
        .expect("the config's");
    assert!(
        config["source"].as_str().unwrap_or("").starts_with("user:"),
        "{config:#?}"
    );
    let po = listed
        .iter()
        .find(|p| p["source"] == "remembered")
        .expect("the remembered one");
    let id = po["policy_id"].as_str().unwrap_or_default().to_owned();
    assert!(id.starts_with("PO-"), "{po:#?}");
    assert!(
        po["scope"]
            .as_str()
            .unwrap_or("")
            .contains("`rm -i keep.txt`"),
        "{po:#?}"
    );
    // Used up by the re-run, then the remembered no answers the next one.
    rm(&env).run().expect_code(0);
    rm(&env).run().expect_code(0);
    assert!(env.work().join("keep.txt").exists());
    // Not from inside a supervised tool; an unknown id is not found.
    let inside = env
        .monitor()
        .env("HEADLESS_RUN_TOOL_RUN_ID", "TR-01M843P2RDXRN7QN3V3KQE7DE4")
        .args(["policies", "remove", &id])
        .run();
    inside.expect_code(1);
    env.monitor()
        .args(["policies", "remove", "PO-NOPE"])
        .run()
        .expect_code(4);
    let out = env.monitor().args(["policies", "remove", &id]).run();
    out.expect_code(0);
    assert!(out.out().contains("asked again"), "{}", out.context());
    // Removed: the prompt is asked again.
    rm(&env).run().expect_code(90);
    let listed = env.monitor_json(&["policies"]).expect("a database");
    assert_eq!(listed.as_array().map(Vec::len), Some(1), "{listed:#?}");
}
