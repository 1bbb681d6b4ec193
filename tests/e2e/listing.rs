//! `monitor runs` filters (`--status` repeated, `--tool`, `--execution`, `--since`,
//! `--limit`) and its JSON: stable snake_case fields equal to the columns.

use crate::rows::*;
use headless_run_e2e::*;
use std::time::Duration;

fn ids(out: &Outcome) -> Vec<String> {
    let runs: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}", out.context()));
    runs.iter()
        .map(|r| r["tool_run_id"].as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn runs_filters_combine() {
    let env = TestEnv::new();
    env.shim()
        .args(["--execution-id", "EX-a", "true"])
        .run()
        .expect_code(0);
    env.shim()
        .args(["--execution-id", "EX-a", "false"])
        .run()
        .expect_code(1);
    env.shim()
        .args(["--execution-id", "EX-b", "true"])
        .run()
        .expect_code(0);
    let mut old = Run::parked(&env, &["make"]);
    old.status = "completed".into();
    old.started_at = ago(Duration::from_secs(3 * 3600));
    old.completed_at = Some(old.started_at.clone());
    // An id from before the others (ids sort by creation time).
    old.id = format!("TR-00{}", &new_id("TR-")[5..]);
    old.insert(&env);
    let runs = |args: &[&str]| {
        let out = env.monitor().arg("runs").args(args).arg("--json").run();
        out.expect_code(0);
        ids(&out)
    };
    assert_eq!(runs(&[]).len(), 4);
    assert_eq!(runs(&["--tool", "true"]).len(), 2);
    assert_eq!(runs(&["--execution", "EX-a"]).len(), 2);
    assert_eq!(runs(&["--execution", "EX-a", "--tool", "true"]).len(), 1);
    assert_eq!(runs(&["--status", "failed"]).len(), 1);
    assert_eq!(
        runs(&["--status", "failed", "--status", "completed"]).len(),
        4
    );
    assert_eq!(
        runs(&["--since", "1h"]).len(),
        3,
        "the 3 h old run is left out"
    );
    assert_eq!(runs(&["--since", "2000-01-01T00:00:00Z"]).len(), 4);
    assert!(runs(&["--since", "2999-01-01T00:00:00Z"]).is_empty());
    let newest_two = runs(&["--limit", "2"]);
    assert_eq!(newest_two.len(), 2);
    let all = runs(&["--limit", "0"]);
    assert_eq!(all[..2], newest_two[..], "newest first");
    assert_eq!(all.last(), Some(&old.id));
    env.monitor()
        .args(["runs", "--since", "last tuesday"])
        .run()
        .expect_code(2);
}

#[test]
fn runs_json_fields_are_the_columns() {
    let env = TestEnv::new();
    env.shim().arg("true").run().expect_code(0);
    let out = env.monitor().args(["runs", "--json"]).run();
    let runs: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).unwrap();
    let mut keys: Vec<String> = runs[0].as_object().unwrap().keys().cloned().collect();
    // Raw: the schema itself, which the JSON must match.
    let mut cols: Vec<String> = rows_of(
        &env.raw_db(),
        "SELECT name FROM pragma_table_info('tool_runs')",
    )
    .iter()
    .map(|r| s(r, "name").to_owned())
    .collect();
    keys.sort();
    cols.sort();
    assert_eq!(keys, cols);
    assert!(runs[0]["argv_json"].is_array());
}

#[test]
fn a_reader_that_stops_early_ends_the_listing_quietly() {
    // `monitor runs --limit 0 | head -1`: stdout becomes a closed pipe long before the
    // listing ends; that is no error and never a panic.
    let env = TestEnv::new();
    ensure_db(&env);
    // Seeding, in one transaction on the file.
    let mut conn = env.raw_db();
    let tx = conn.transaction().unwrap();
    for i in 0..3000 {
        let mut run = Run::parked(&env, &["deploy", "--target", &format!("host-{i}")]);
        run.status = "completed".into();
        run.reason = None;
        run.exit_code = Some(0);
        run.completed_at = Some(now());
        run.supervisor_heartbeat_at = None;
        run.shim_pid = None;
        run.shim_start_time = None;
        run.insert_into(&tx);
    }
    tx.commit().unwrap();
    drop(conn);
    for args in [
        vec!["runs", "--limit", "0"],
        vec!["runs", "--limit", "0", "--json"],
    ] {
        let mut monitor = env.monitor();
        monitor.args(&args);
        let mut child = monitor
            .cmd
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut stdout = child.stdout.take().unwrap();
        let mut first = [0u8; 64];
        std::io::Read::read_exact(&mut stdout, &mut first).unwrap();
        drop(stdout);
        let status = child.wait().unwrap();
        let mut stderr = String::new();
        std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
        assert_eq!(status.code(), Some(0), "{args:?}: {status:?} {stderr}");
    }
}
