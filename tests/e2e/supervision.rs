//! Signals, hard timeouts, stalls and heartbeats.

use headless_run_e2e::*;
use std::time::Duration;

#[test]
fn sigterm_to_the_shim_reaches_the_tools_whole_group() {
    let env = TestEnv::new();
    let markers = env.path().join("markers");
    let running = env
        .shim()
        .arg(tool())
        .arg("trap-term")
        .arg(&markers)
        .spawn();
    // Wait until both parent and child have installed their handlers.
    let db_ready = wait_until(Duration::from_secs(20), || {
        std::fs::read_to_string(env.state().join("logs/combined.log"))
            .unwrap_or_default()
            .contains("ready ")
    });
    assert!(db_ready, "the tool never became ready");
    running.signal(libc::SIGTERM);
    let out = running.wait();
    out.expect_code(42);
    let parent = std::fs::read_to_string(markers.join("parent")).unwrap_or_default();
    let child = std::fs::read_to_string(markers.join("child")).unwrap_or_default();
    assert!(
        parent.contains("got 15"),
        "parent did not get TERM: {parent:?}"
    );
    assert!(
        child.contains("got 15"),
        "child did not get TERM: {child:?}"
    );
}

#[test]
fn hard_timeout_ends_the_group_and_exits_124() {
    let env = TestEnv::new();
    let pidfile = env.path().join("orphan.pid");
    let out = env
        .shim()
        .args(["--timeout", "1s", "--", "sh", "-c"])
        // sh starts in a millisecond even on a loaded machine: the pidfile is there long
        // before the timeout.
        .arg(format!(
            "sleep 1000 & echo $! > {}; wait",
            pidfile.display()
        ))
        .run();
    out.expect_code(124);
    assert!(out.stderr.contains("hard timeout"), "{}", out.stderr);
    let orphan: i32 = std::fs::read_to_string(&pidfile)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(
        wait_until(Duration::from_secs(5), || !alive(orphan)),
        "background child {orphan} survived"
    );
    let run = env.only_run();
    assert_eq!(s(&run, "status"), "failed_timeout");
    assert_eq!(n(&run, "exit_code"), 124);
    assert!(run["completed_at"].is_string());
}

#[test]
fn a_child_ignoring_term_is_killed_after_the_grace_period() {
    let env = TestEnv::new();
    let pidfile = env.path().join("orphan.pid");
    let out = env
        .shim()
        .env("HEADLESS_RUN_KILL_GRACE", "500ms")
        .args(["--timeout", "1s", "--", "sh", "-c"])
        // The child ignores TERM (an ignored signal stays ignored across exec).
        .arg(format!(
            "(trap '' TERM; exec sleep 1000) & echo $! > {}; wait",
            pidfile.display()
        ))
        .run();
    out.expect_code(124);
    let orphan: i32 = std::fs::read_to_string(&pidfile)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(
        wait_until(Duration::from_secs(5), || !alive(orphan)),
        "TERM-ignoring child {orphan} survived"
    );
}

#[test]
fn a_tool_ignoring_term_is_killed_on_timeout() {
    let env = TestEnv::new();
    let out = env
        .shim()
        .env("HEADLESS_RUN_KILL_GRACE", "300ms")
        .args(["--timeout", "700ms"])
        .arg(tool())
        .arg("ignore-term")
        .run();
    out.expect_code(124);
    assert_eq!(s(&env.only_run(), "status"), "failed_timeout");
}

#[test]
fn stall_kills_with_92() {
    let env = TestEnv::new();
    let out = env
        .shim()
        .args(["--stall-timeout", "1s"])
        .arg(tool())
        .args(["sleep", "30"])
        .run();
    out.expect_code(92);
    assert!(
        out.stderr.contains("no output and no heartbeat"),
        "{}",
        out.stderr
    );
    let run = env.only_run();
    assert_eq!(s(&run, "status"), "stalled");
    assert_eq!(n(&run, "exit_code"), 92);
    assert!(run["completed_at"].is_string());
}

#[test]
fn stall_mark_mode_recovers_to_running() {
    let env = TestEnv::new();
    let mut running = env
        .shim()
        .args(["--stall-timeout", "700ms", "--on-stall", "mark"])
        .arg(tool())
        .args(["silent-then", "3", "back"])
        .spawn();
    // While silent, the run is marked stalled but keeps running.
    let marked = wait_for_state(Duration::from_secs(10), || {
        env.runs().first().is_some_and(|r| r["status"] == "stalled")
    });
    assert!(marked, "never marked stalled: {:?}", env.runs());
    assert!(
        running.child.try_wait().unwrap().is_none(),
        "mark mode must not end the tool"
    );
    let out = running.wait();
    out.expect_code(0);
    assert!(out.out().ends_with("back\n"));
    let run = env.only_run();
    assert_eq!(s(&run, "status"), "completed");
    // The audit trail shows running → stalled → running → completed.
    let statuses = env.status_events();
    assert_eq!(statuses, ["running", "stalled", "running", "completed"]);
}

#[test]
fn heartbeats_keep_a_silent_tool_alive() {
    let env = TestEnv::new();
    // 12 heartbeats 400 ms apart: 4.8 s in all, far past the 2 s stall timeout (which
    // leaves room for a slow interpreter start on a loaded machine).
    let out = env
        .shim()
        .args(["--stall-timeout", "2s"])
        .arg(tool())
        .args(["heartbeat", "0.4", "12"])
        .run();
    out.expect_code(0);
    let run = env.only_run();
    assert_eq!(s(&run, "status"), "completed");
    assert!(run["last_heartbeat_at"].is_string(), "{run:?}");
    let beats = env
        .log_events()
        .into_iter()
        .filter(|e| e["event"] == "heartbeat")
        .count();
    assert!(beats >= 2, "expected heartbeat events in the log");
}

/// Issue 15 item 19: the hard timeout ends every descendant, also those that left the
/// tool's session — a `setsid` child, and a double-forked daemon (re-parented to the shim,
/// its child subreaper, instead of init) — and says how many it ended.
#[test]
fn the_hard_timeout_ends_daemons_outside_the_tools_session() {
    let env = TestEnv::new();
    let script = r#"
import os, subprocess, sys, time
setsid = subprocess.Popen(["setsid", "sleep", "300"])
open("setsid.pid", "w").write(str(setsid.pid))
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        open("daemon.pid", "w").write(str(os.getpid()))
        time.sleep(300)
    os._exit(0)
time.sleep(300)
"#;
    let out = env
        .shim()
        .args(["--timeout", "2s", "python3", "-c", script])
        .run();
    out.expect_code(124);
    assert!(
        out.stderr.contains("outside it"),
        "it says what it ended: {}",
        out.context()
    );
    for file in ["setsid.pid", "daemon.pid"] {
        let pid: i32 = std::fs::read_to_string(env.work().join(file))
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        assert!(
            wait_until(Duration::from_secs(10), || !alive(pid)),
            "{file}: pid {pid} outlived the timeout"
        );
    }
    assert_eq!(s(&env.only_run(), "status"), "failed_timeout");
}

/// Issue 16 item 4: a prompt's exit 90 ends the daemons the tool started outside its
/// session too (coding agents' background servers outlived the shim).
#[test]
fn exit_90_ends_daemons_outside_the_tools_session() {
    let env = TestEnv::new();
    let script = r#"
import os, subprocess, sys
d = subprocess.Popen(["setsid", "sleep", "300"])
open("daemon.pid", "w").write(str(d.pid))
sys.stdout.write("Deploy now? [y/N] ")
sys.stdout.flush()
sys.stdin.readline()
"#;
    let out = env.shim().args(["python3", "-c", script]).run();
    out.expect_code(90);
    let pid: i32 = std::fs::read_to_string(env.work().join("daemon.pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(
        wait_until(Duration::from_secs(10), || !alive(pid)),
        "the daemon (pid {pid}) outlived the exit 90: {}",
        out.context()
    );
    // A tool that exits by itself keeps the daemons it meant to start.
    let daemon = r#"
import os, time
if os.fork() == 0:
    os.setsid()
    open("kept.pid.tmp", "w").write(str(os.getpid()))
    os.rename("kept.pid.tmp", "kept.pid")
    time.sleep(300)
    os._exit(0)
while not os.path.exists("kept.pid"):
    time.sleep(0.01)
"#;
    let keep = env.shim().args(["python3", "-c", daemon]).run();
    keep.expect_code(0);
    let kept: i32 = std::fs::read_to_string(env.work().join("kept.pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(
        alive(kept),
        "a daemon of a tool that finished is its own business"
    );
    unsafe { libc::kill(kept, libc::SIGKILL) };
}

/// Issue 27: a shim that is itself told to end (TERM: a CI job cancelled) passes the
/// signal to the tool, and once the tool has gone, ends what it left running outside its
/// session too — a coding agent's background server — KILL for one that ignores TERM.
#[test]
fn a_signalled_shim_ends_the_daemons_its_tool_left() {
    let env = TestEnv::new();
    let script = r#"
import os, subprocess, time
d = subprocess.Popen(["setsid", "sleep", "300"])
deaf = subprocess.Popen(["setsid", "sh", "-c", "trap '' TERM; exec sleep 300"])
open("pids.tmp", "w").write(f"{d.pid} {deaf.pid}")
os.rename("pids.tmp", "pids")
print("serving", flush=True)
time.sleep(300)
"#;
    let running = env
        .shim()
        .env("HEADLESS_RUN_KILL_GRACE", "1s")
        .args(["python3", "-c", script])
        .spawn();
    let pids_file = env.work().join("pids");
    assert!(
        wait_until(Duration::from_secs(10), || pids_file.exists()),
        "the tool started its daemons"
    );
    let pids: Vec<i32> = std::fs::read_to_string(&pids_file)
        .unwrap()
        .split_whitespace()
        .map(|p| p.parse().unwrap())
        .collect();
    running.signal(libc::SIGTERM);
    let out = running.wait();
    assert_ne!(out.code, Some(0), "{}", out.context());
    assert!(
        out.stderr.contains("the shim was signalled"),
        "it says what it ends: {}",
        out.context()
    );
    for pid in pids {
        assert!(
            wait_until(Duration::from_secs(10), || !alive(pid)),
            "pid {pid} outlived the signalled shim: {}",
            out.context()
        );
    }
}

/// The shim is its tool's child subreaper: orphans that exit while the tool runs are
/// reaped, not left as zombies to pile up.
#[test]
fn orphans_that_exit_are_reaped_while_the_tool_runs() {
    let env = TestEnv::new();
    let script = r#"
import os, sys, time
if os.fork() == 0:
    pid = os.fork()
    if pid == 0:
        time.sleep(0.3)
        os._exit(0)
    print("orphan", pid, flush=True)
    os._exit(0)
time.sleep(60)
"#;
    let running = env.shim().args(["python3", "-c", script]).spawn();
    let mut orphan = 0;
    assert!(wait_until(Duration::from_secs(10), || {
        let out = String::from_utf8_lossy(&running.stdout_now()).into_owned();
        orphan = out
            .split_whitespace()
            .skip_while(|w| *w != "orphan")
            .nth(1)
            .and_then(|p| p.parse().ok())
            .unwrap_or(0);
        orphan > 0
    }));
    let state = |pid: i32| {
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|st| st.rsplit(')').next().map(|r| r.trim_start().chars().next()))
            .flatten()
    };
    // It exits, comes to the shim as an orphan, and is reaped: gone, not a zombie.
    assert!(
        wait_until(Duration::from_secs(10), || state(orphan).is_none()),
        "pid {orphan} is {:?}",
        state(orphan)
    );
    running.signal(libc::SIGTERM);
    let _ = running.wait();
}
