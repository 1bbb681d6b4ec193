//! `--json` reports of the commands that act (issue 15 item 12): `decide`, `wait` and
//! `cancel` print one object with a `schema` version, the outcome and the row it concerns.

use crate::rows::*;
use headless_run_e2e::*;
use serde_json::Value;

fn report(out: &Outcome) -> Value {
    out.expect_code(0);
    let v: Value = serde_json::from_str(&out.out())
        .unwrap_or_else(|e| panic!("not one JSON object ({e}): {}", out.context()));
    assert_eq!(v["schema"], 1, "{v}");
    v
}

#[test]
fn decide_wait_and_cancel_report_in_json() {
    let env = TestEnv::new();
    let run = Run::parked(&env, &["deploy.sh", "--prod"]);
    run.insert(&env);
    let ap = Approval::pending(&run, "Deploy?");
    ap.insert(&env);
    let v = report(
        &env.monitor()
            .args(["decide", &ap.id, "yes", "--json"])
            .run(),
    );
    assert_eq!(v["outcome"], "decided");
    assert_eq!(v["approval"]["approval_id"], ap.id.as_str());
    assert_eq!(v["approval"]["status"], "approved");
    assert_eq!(v["approval"]["chosen_value"], "yes");
    // The same decision again changes nothing, and says so.
    let v = report(
        &env.monitor()
            .args(["decide", &ap.id, "yes", "--json"])
            .run(),
    );
    assert_eq!(v["outcome"], "unchanged");
    // wait: the approval is decided already.
    let v = report(&env.monitor().args(["wait", &ap.id, "--json"]).run());
    assert_eq!(v["id"], ap.id.as_str());
    assert!(v["outcome"].as_str().unwrap().contains("approved"), "{v}");
    assert_eq!(v["approval"]["decided_by"], user_name().as_str());
    // wait on a run that ended.
    env.shim().arg("true").run().expect_code(0);
    let done = env
        .runs()
        .into_iter()
        .find(|r| s(r, "tool_name") == "true")
        .unwrap();
    let id = s(&done, "tool_run_id").to_owned();
    let v = report(&env.monitor().args(["wait", &id, "--json"]).run());
    assert_eq!(v["run"]["status"], "completed");
    assert_eq!(v["run"]["exit_code"], 0);
    // cancel: a parked run has nothing live to signal.
    let parked = Run::parked(&env, &["other.sh"]);
    parked.insert(&env);
    let v = report(
        &env.monitor()
            .args(["cancel", &parked.id, "--reason", "not today", "--json"])
            .run(),
    );
    assert_eq!(v["outcome"], "marked");
    assert_eq!(v["run"]["status"], "cancelled");
    assert!(v["shim_pid"].is_null());
    // Errors stay errors: exit codes and stderr, nothing on stdout.
    let out = env.monitor().args(["decide", &ap.id, "no", "--json"]).run();
    out.expect_code(3);
    assert!(out.out().is_empty(), "{}", out.context());
}

#[test]
fn doctor_gc_and_install_list_report_in_json() {
    let env = TestEnv::new();
    env.shim().args(["echo", "logged"]).run().expect_code(0);
    let dir = env.path().join("shims");
    env.monitor()
        .args(["install", "rm", "--dir"])
        .arg(&dir)
        .run()
        .expect_code(0);
    // doctor: every check with its level; a problem still exits 1, with the object.
    let out = env
        .monitor()
        .args(["doctor", "--json", "--dir"])
        .arg(&dir)
        .env("PATH", format!("{}:/usr/bin:/bin", dir.display()))
        .run();
    let v = report(&out);
    assert_eq!(v["problems"], 0, "{v}");
    let checks = v["checks"].as_array().unwrap();
    assert!(
        checks
            .iter()
            .any(|c| c["level"] == "ok"
                && c["text"].as_str().unwrap().contains("audit chain intact"))
    );
    let out = env
        .monitor()
        .args(["doctor", "--json", "--dir"])
        .arg(&dir)
        .env("PATH", "/usr/bin:/bin")
        .run();
    out.expect_code(1);
    let v: Value = serde_json::from_str(&out.out()).unwrap();
    assert!(v["problems"].as_u64().unwrap() >= 1);
    assert!(
        v["checks"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["level"] == "fail")
    );
    // install --list: each link and what it resolves to.
    let v = report(
        &env.monitor()
            .args(["install", "--list", "--json", "--dir"])
            .arg(&dir)
            .run(),
    );
    assert_eq!(v["links"][0]["name"], "rm");
    assert_eq!(v["links"][0]["kind"], "shim");
    assert!(v["links"][0]["real"].as_str().unwrap().ends_with("/rm"));
    // gc: what would go, then what went.
    let v = report(
        &env.monitor()
            .args(["gc", "--older-than", "1s", "--dry-run", "--json"])
            .run(),
    );
    assert_eq!(v["dry_run"], true);
    assert!(
        v["runs"].as_array().unwrap().is_empty(),
        "nothing that old yet"
    );
    std::thread::sleep(std::time::Duration::from_millis(1100));
    let v = report(
        &env.monitor()
            .args(["gc", "--older-than", "1s", "--json"])
            .run(),
    );
    assert_eq!(v["dry_run"], false);
    assert_eq!(v["runs"].as_array().unwrap().len(), 1, "{v}");
    assert_eq!(v["run_logs"], 1);
}

#[test]
fn worker_once_reports_in_json() {
    let env = TestEnv::new();
    // Nothing to do: an empty list.
    let v = report(&env.monitor().args(["worker", "--once", "--json"]).run());
    assert_eq!(v["actions"], serde_json::json!([]));
    // A decided prompt: the resume is reported, and stdout holds only the object.
    let file = env.work().join("gone.txt");
    std::fs::write(&file, "x").unwrap();
    env.shim()
        .args(["rm", "-i", "gone.txt"])
        .run()
        .expect_code(90);
    let ap = env.pending_approval();
    env.decide(s(&ap, "approval_id"), "y").expect_code(0);
    let v = report(&env.monitor().args(["worker", "--once", "--json"]).run());
    let actions = v["actions"].as_array().unwrap();
    assert!(
        actions
            .iter()
            .any(|a| a["text"].as_str().unwrap().contains("resumed as TR-")),
        "{v}"
    );
    assert!(actions.iter().all(|a| a["at"].is_string()));
    assert!(!file.exists());
    // --json needs --once.
    env.monitor()
        .args(["worker", "--json"])
        .run()
        .expect_code(2);
}
