//! `monitor logs`: the combined log pretty and raw, one run's output (raw bytes when
//! piped, sanitized on a terminal), and `-f` following new lines through rotation and a
//! file that does not exist yet.

use headless_run_e2e::*;
use std::process::Command;
use std::time::Duration;

#[test]
fn the_combined_log_pretty_and_raw() {
    let env = TestEnv::new();
    env.shim()
        .arg(tool())
        .args(["print", "hello\x1b]0;title\x07 world"])
        .run()
        .expect_code(0);
    let out = env.monitor().arg("logs").run();
    out.expect_code(0);
    let text = out.out();
    assert!(text.contains("output"), "{text}");
    assert!(text.contains("hello world"), "{text}");
    assert!(text.contains("running → completed (exit 0)"), "{text}");
    assert!(!text.contains('\x1b') && !text.contains('\x07'), "{text:?}");
    let out = env.monitor().args(["logs", "--json"]).run();
    out.expect_code(0);
    let lines: Vec<serde_json::Value> = out
        .out()
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect();
    assert_eq!(lines.len(), env.log_events().len());
    let out = env.monitor().args(["logs", "-n", "1", "--json"]).run();
    assert_eq!(out.out().lines().count(), 1);
    assert!(
        out.out().contains("\"status\":\"completed\""),
        "{}",
        out.out()
    );
}

#[test]
fn a_runs_output_raw_when_piped_and_clean_on_a_terminal() {
    let env = TestEnv::new();
    env.shim()
        .args([
            "sh",
            "-c",
            "printf 'plain\\n\\033[31mred\\033[0m\\n\\033]0;pwned\\007end\\n'",
        ])
        .run()
        .expect_code(0);
    let id = s(&env.only_run(), "tool_run_id").to_owned();
    let out = env.monitor().args(["logs", "--run", &id]).run();
    out.expect_code(0);
    assert_eq!(out.stdout, env.run_log(&id), "byte for byte when piped");
    assert!(out.stdout.contains(&0x1b));
    let mut cmd = Command::new(bin("monitor"));
    cmd.args(["logs", "--run", &id])
        .env("HEADLESS_RUN_HOME", env.state())
        .env_remove("HEADLESS_RUN_DB");
    let (code, shown) = run_in_pty(cmd, None, Duration::from_secs(20));
    assert_eq!(code, Some(0));
    let shown = String::from_utf8_lossy(&shown).replace('\r', "");
    assert_eq!(shown, "plain\nred\nend\n");
    // Its events, with --json.
    let out = env.monitor().args(["logs", "--run", &id, "--json"]).run();
    assert!(out.out().lines().count() >= 2);
    assert!(out.out().lines().all(|l| l.contains(&id)));
    env.monitor()
        .args(["logs", "--run", "TR-00000000000000000000000000"])
        .run()
        .expect_code(4);
}

#[test]
fn follow_waits_for_the_file_and_survives_rotation() {
    let env = TestEnv::new();
    // Nothing exists yet: not the state dir, not the log.
    let follower = env.monitor().args(["logs", "-f"]).spawn();
    std::thread::sleep(Duration::from_millis(300));
    env.shim()
        .arg(tool())
        .args(["print", "first-marker"])
        .run()
        .expect_code(0);
    assert!(
        wait_until(Duration::from_secs(10), || String::from_utf8_lossy(
            &follower.stdout_now()
        )
        .contains("first-marker")),
        "not followed: {:?} {}",
        String::from_utf8_lossy(&follower.stdout_now()),
        follower.stderr_now()
    );
    // A writer rotates the log (as CombinedLog::open does past 64 MB) and starts a new one.
    let log = env.state().join("logs/combined.log");
    std::fs::rename(&log, env.state().join("logs/combined.log.1")).unwrap();
    env.shim()
        .arg(tool())
        .args(["print", "second-marker"])
        .run()
        .expect_code(0);
    assert!(
        wait_until(Duration::from_secs(10), || String::from_utf8_lossy(
            &follower.stdout_now()
        )
        .contains("second-marker")),
        "lost after rotation: {:?}",
        String::from_utf8_lossy(&follower.stdout_now())
    );
    // A writer that opened the log before the rotation still appends to the old file.
    let mut late = std::fs::OpenOptions::new()
        .append(true)
        .open(env.state().join("logs/combined.log.1"))
        .unwrap();
    use std::io::Write;
    writeln!(
        late,
        r#"{{"event":"tool_output","timestamp":"2026-11-22T08:00:00.000Z","tool":"late","tool_run_id":"TR-LATE","stream":"pty","text":"late-marker"}}"#
    )
    .unwrap();
    assert!(
        wait_until(Duration::from_secs(10), || String::from_utf8_lossy(
            &follower.stdout_now()
        )
        .contains("late-marker")),
        "a line appended to the rotated-out file was lost: {:?}",
        String::from_utf8_lossy(&follower.stdout_now())
    );
    let text = String::from_utf8_lossy(&follower.stdout_now()).into_owned();
    assert_eq!(text.matches("first-marker").count(), 1, "{text}");
    assert_eq!(text.matches("second-marker").count(), 1, "{text}");
    assert_eq!(text.matches("late-marker").count(), 1, "{text}");
}

#[test]
fn following_a_runs_output_ends_with_the_run() {
    let env = TestEnv::new();
    let shim = env
        .shim()
        .arg(tool())
        .args(["silent-then", "1.5", "finished-now"])
        .spawn();
    assert!(wait_for_state(Duration::from_secs(20), || !env
        .runs()
        .is_empty()));
    let id = s(&env.runs()[0], "tool_run_id").to_owned();
    let out = env
        .monitor()
        .args(["logs", "-f", "--run", &id])
        .timeout(Duration::from_secs(20))
        .run();
    out.expect_code(0);
    assert_eq!(out.out(), "started\nfinished-now\n");
    shim.wait().expect_code(0);
}

/// A single run that floods its output cannot outrun the rotation: the shim keeps the
/// combined log within its limit while it writes (not only when it opens it), and
/// `monitor logs -n` still reads the end of it.
#[test]
fn a_flooding_run_keeps_the_combined_log_within_its_limit() {
    let env = TestEnv::new();
    env.shim()
        .env("HEADLESS_RUN_LOG_MAX", "64K")
        .env("HEADLESS_RUN_LOG_KEEP", "2")
        .args([
            "--",
            "sh",
            "-c",
            "i=0; while [ $i -lt 3000 ]; do printf 'flood %06d %03000d\\n' $i 0; i=$((i+1)); done",
        ])
        .timeout(Duration::from_secs(120))
        .run()
        .expect_code(0);
    let logs = env.state().join("logs");
    let mut total = 0;
    for name in ["combined.log", "combined.log.1", "combined.log.2"] {
        let len = std::fs::metadata(logs.join(name))
            .unwrap_or_else(|e| panic!("{name}: {e}"))
            .len();
        total += len;
        // The limit, one look's worth (a sixteenth of it, at least 4 KiB) and a line.
        assert!(len <= 64 * 1024 + 4096 + 16 * 1024, "{name}: {len} bytes");
    }
    assert!(
        !logs.join("combined.log.3").exists(),
        "two generations kept"
    );
    assert!(total > 100 * 1024, "the flood was logged: {total} bytes");
    let tail = env.monitor().args(["logs", "--json", "-n", "2"]).run();
    tail.expect_code(0);
    let last: Vec<serde_json::Value> = tail
        .out()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(last.len(), 2);
    // The end of the flood: its last lines (or the count of those the event rate skipped).
    let run = env.only_run();
    assert!(
        last.iter()
            .all(|e| e["tool_run_id"] == run["tool_run_id"] && e["event"] == "tool_output"),
        "{last:?}"
    );
    assert!(
        last[0]["text"].as_str().unwrap().starts_with("flood 00"),
        "{last:?}"
    );
}

/// Issue 15 item 16: the combined log stays bounded — rotated by whichever writer finds it
/// past HEADLESS_RUN_LOG_MAX, HEADLESS_RUN_LOG_KEEP generations kept — and `monitor logs`
/// reads every generation kept, oldest first.
#[test]
fn the_combined_log_rotates_into_the_generations_asked_for() {
    let env = TestEnv::new();
    for i in 0..12 {
        env.shim()
            .env("HEADLESS_RUN_LOG_MAX", "4K")
            .env("HEADLESS_RUN_LOG_KEEP", "3")
            .args(["sh", "-c", &format!("for j in 1 2 3 4 5 6 7 8; do echo run{i:02} line $j padding padding padding padding padding; done")])
            .run()
            .expect_code(0);
    }
    let logs = env.state().join("logs");
    for n in 1..=3 {
        let g = logs.join(format!("combined.log.{n}"));
        assert!(g.exists(), "{} missing", g.display());
        assert!(std::fs::metadata(&g).unwrap().len() < 8 * 1024);
    }
    assert!(
        !logs.join("combined.log.4").exists(),
        "only 3 generations kept"
    );
    // Everything kept, oldest first: the runs' numbers never go back.
    let out = env.monitor().args(["logs", "--json"]).run();
    out.expect_code(0);
    let runs: Vec<u32> = out
        .out()
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter_map(|v| {
            let t = v["text"].as_str()?.to_owned();
            t.strip_prefix("run")?.get(..2)?.parse().ok()
        })
        .collect();
    assert!(!runs.is_empty());
    assert!(runs.windows(2).all(|w| w[0] <= w[1]), "{runs:?}");
    assert_eq!(*runs.last().unwrap(), 11);
    assert!(runs[0] > 0, "the oldest generations are gone: {runs:?}");
    // The last lines, from the end.
    let tail = env.monitor().args(["logs", "--json", "-n", "3"]).run();
    assert_eq!(tail.out().lines().count(), 3);
}
