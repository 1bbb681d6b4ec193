//! What is stored: the tool_runs row, the combined log events and the audit chain match
//! DESIGN section 7, and `monitor runs` / `monitor show` read them back.

use headless_run_e2e::*;
use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

fn is_rfc3339_millis(v: &serde_json::Value) -> bool {
    let Some(s) = v.as_str() else { return false };
    s.len() == 24 && s.ends_with('Z') && s.as_bytes()[10] == b'T' && s.as_bytes()[19] == b'.'
}

#[test]
fn a_completed_run_has_every_column() {
    let env = TestEnv::new();
    let out = env
        .shim()
        .args(["--execution-id", "EX-rows"])
        .arg(tool())
        .args(["print", "hello", "world"])
        .run();
    out.expect_code(0);
    let run = env.only_run();
    let id = s(&run, "tool_run_id");
    assert!(id.starts_with("TR-") && id.len() == 29, "{id}");
    assert_eq!(s(&run, "tool_name"), "tool.py");
    assert_eq!(s(&run, "execution_id"), "EX-rows");
    assert_eq!(s(&run, "status"), "completed");
    assert!(run["reason"].is_null());
    assert_eq!(n(&run, "exit_code"), 0);
    for col in [
        "started_at",
        "completed_at",
        "updated_at",
        "supervisor_heartbeat_at",
    ] {
        assert!(is_rfc3339_millis(&run[col]), "{col} = {:?}", run[col]);
    }
    assert!(n(&run, "pid") > 1);
    assert!(n(&run, "shim_pid") > 1);
    assert_ne!(n(&run, "pid"), n(&run, "shim_pid"));
    assert!(!s(&run, "host").is_empty());
    assert_eq!(s(&run, "cwd"), env.work().to_str().unwrap());
    let argv = strings(&run, "argv_json");
    assert_eq!(argv[1..], ["print", "hello", "world"]);
    assert_eq!(env.run_log(id), b"hello world\n");
}

#[test]
fn files_are_private() {
    let env = TestEnv::new();
    env.shim().args(["echo", "x"]).run().expect_code(0);
    let mode = |p: std::path::PathBuf| std::fs::metadata(&p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(env.state()), 0o700);
    assert_eq!(mode(env.state().join("logs")), 0o700);
    assert_eq!(mode(env.state().join("logs/runs")), 0o700);
    assert_eq!(mode(env.state().join("state.db")), 0o600);
    assert_eq!(mode(env.state().join("logs/combined.log")), 0o600);
    let id = s(&env.only_run(), "tool_run_id").to_owned();
    assert_eq!(mode(env.state().join(format!("logs/runs/{id}.log"))), 0o600);
    for f in std::fs::read_dir(env.state()).unwrap().flatten() {
        let m = f.metadata().unwrap().permissions().mode() & 0o777;
        assert!(m & 0o077 == 0, "{} is {m:o}", f.path().display());
    }
}

#[test]
fn events_and_audit_chain() {
    let env = TestEnv::new();
    env.shim()
        .args(["--execution-id", "EX-ev"])
        .arg(tool())
        .args(["exit", "3"])
        .run()
        .expect_code(3);
    let run = env.only_run();
    let id = s(&run, "tool_run_id");
    let events = env.log_events();
    for e in &events {
        assert_eq!(e["tool_run_id"], id);
        assert_eq!(e["tool"], "tool.py");
        assert_eq!(e["execution_id"], "EX-ev");
        assert!(is_rfc3339_millis(&e["timestamp"]), "{e}");
    }
    let kinds: Vec<&str> = events
        .iter()
        .map(|e| e["event"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds,
        ["tool_status_change", "tool_output", "tool_status_change"]
    );
    assert_eq!(events[1]["text"], "exiting with 3");
    assert_eq!(events[1]["stream"], "pty");
    assert_eq!(events[2]["status"], "failed");
    assert_eq!(events[2]["previous_status"], "running");
    assert_eq!(events[2]["exit_code"], 3);
    assert_eq!(events[2]["reason"], "exited with code 3");
    // The audit trail has the same changes, chained (from the first row).
    let audit = env.run_audit(id);
    assert_eq!(audit.len(), 2);
    assert_eq!(s(&audit[0], "event"), "tool_status_change");
    assert_eq!(s(&audit[0], "prev_hash"), "0".repeat(64));
    assert_eq!(s(&audit[1], "prev_hash"), s(&audit[0], "hash"));
    assert!(s(&audit[1], "data").contains("\"failed\""));
}

#[test]
fn monitor_runs_lists_statuses() {
    let env = TestEnv::new();
    env.shim().arg("true").run().expect_code(0);
    env.shim().arg("false").run().expect_code(1);
    env.shim()
        .args(["--timeout", "300ms", "sleep", "5"])
        .run()
        .expect_code(124);
    let out = env.monitor().args(["runs", "--json"]).run();
    out.expect_code(0);
    let runs: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).unwrap();
    let mut got: Vec<(String, String)> = runs
        .iter()
        .map(|r| {
            (
                r["tool_name"].as_str().unwrap().into(),
                r["status"].as_str().unwrap().into(),
            )
        })
        .collect();
    got.sort();
    assert_eq!(
        got,
        [
            ("false".into(), "failed".into()),
            ("sleep".into(), "failed_timeout".into()),
            ("true".into(), "completed".into())
        ]
    );
    // Filters and the human table.
    let out = env
        .monitor()
        .args(["runs", "--status", "failed_timeout", "--json"])
        .run();
    let runs: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(runs.len(), 1);
    let out = env.monitor().arg("runs").run();
    out.expect_code(0);
    assert!(out.out().starts_with("RUN"), "{}", out.out());
    assert_eq!(out.out().lines().count(), 4);
    // show: found, JSON, not found, bad id.
    let id = runs[0]["tool_run_id"].as_str().unwrap();
    let out = env.monitor().args(["show", id, "--json"]).run();
    out.expect_code(0);
    let shown: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(shown["status"], "failed_timeout");
    assert!(shown["events"].as_array().unwrap().len() >= 2);
    env.monitor()
        .args(["show", "TR-00000000000000000000000000"])
        .run()
        .expect_code(4);
    env.monitor()
        .args(["show", "nonsense"])
        .run()
        .expect_code(2);
    env.monitor()
        .args(["runs", "--status", "bogus"])
        .run()
        .expect_code(2);
}

#[test]
fn a_schema_v1_database_still_works_after_an_upgrade() {
    let env = TestEnv::new();
    std::fs::create_dir_all(env.state()).unwrap();
    std::fs::copy(fixture("db/v1.db"), env.state().join("state.db")).unwrap();
    let out = env.monitor().args(["runs", "--json"]).run();
    out.expect_code(0);
    let runs: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        runs.len(),
        4,
        "the runs recorded by schema v1 are all readable"
    );
    assert!(runs.iter().any(|r| r["status"] == "failed_timeout"));
    // A new run lands beside them, and the audit chain across old and new rows holds.
    env.shim().arg("true").run().expect_code(0);
    assert_eq!(env.runs().len(), 5);
    // Raw: the chain across the v1 file's rows and new ones, whole, and the file's schema
    // version.
    let audit = env.raw_rows("events");
    for pair in audit.windows(2) {
        assert_eq!(s(&pair[1], "prev_hash"), s(&pair[0], "hash"));
    }
    let version: i64 = env
        .raw_db()
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .unwrap();
    assert!(version >= 1);
}

#[test]
fn output_and_supervisor_heartbeat_times_are_kept_current_but_throttled() {
    // Twenty lines a quarter of a second apart (5 s): last_output_at follows the output,
    // written about once a second rather than once a line; the shim's own
    // supervisor_heartbeat_at moves on every few seconds.
    let env = TestEnv::new();
    let running = env
        .shim()
        .args([
            "sh",
            "-c",
            "for i in $(seq 1 20); do echo line $i; sleep 0.25; done",
        ])
        .spawn();
    let mut outputs = std::collections::BTreeSet::new();
    let mut beats = std::collections::BTreeSet::new();
    let mut started = None;
    wait_for_state(Duration::from_secs(30), || {
        if let Some(run) = env.runs().first() {
            if run["status"] != "running" {
                return true;
            }
            started = Some(s(run, "started_at").to_owned());
            if let Some(t) = run["last_output_at"].as_str() {
                outputs.insert(t.to_owned());
            }
            if let Some(t) = run["supervisor_heartbeat_at"].as_str() {
                beats.insert(t.to_owned());
            }
        }
        false
    });
    running.wait().expect_code(0);
    assert!(
        outputs.len() >= 2,
        "last_output_at never moved while output flowed: {outputs:?}"
    );
    assert!(
        outputs.len() <= 8,
        "last_output_at was written per line, not about once a second: {} values",
        outputs.len()
    );
    assert!(
        beats.len() >= 2,
        "supervisor_heartbeat_at never moved during 5 s: {beats:?}"
    );
    let run = env.only_run();
    let (start, last, end) = (
        s(&run, "started_at"),
        s(&run, "last_output_at"),
        s(&run, "completed_at"),
    );
    assert_eq!(Some(start), started.as_deref());
    assert!(start <= last && last <= end, "{start} {last} {end}");
    assert!(is_rfc3339_millis(&run["last_output_at"]));
}

#[test]
fn a_flood_of_lines_is_rate_limited_in_the_combined_log_but_every_line_is_counted() {
    // 20 000 lines at once: the combined log gets a burst of events and then a bounded
    // rate, the lines it leaves out are counted in `skipped_lines`; stdout and the run log
    // keep every line.
    let env = TestEnv::new();
    let out = env.shim().arg(tool()).args(["lines", "20000"]).run();
    out.expect_code(0);
    assert_eq!(out.out().lines().count(), 20_000);
    let id = s(&env.only_run(), "tool_run_id").to_owned();
    assert_eq!(env.run_log(&id), out.stdout, "the run log has every byte");
    let outputs = env.events_about("tool_output", &id);
    let skipped: u64 = outputs
        .iter()
        .map(|e| e["skipped_lines"].as_u64().unwrap_or(0))
        .sum();
    let with_text = outputs
        .iter()
        .filter(|e| !e["text"].as_str().unwrap_or_default().is_empty())
        .count() as u64;
    assert!(skipped > 0, "20 000 lines at once were not rate-limited");
    assert!(with_text >= 1000, "the burst is logged: {with_text}");
    assert_eq!(
        with_text + skipped,
        20_000,
        "every line is logged or counted"
    );
    assert_eq!(outputs[0]["text"], "line 0");
}
