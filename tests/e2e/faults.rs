//! Faults, each asserting that nothing is lost: the database locked by another process for
//! 30 s, deleted while a tool runs, truncated; the log disk full; `kill -9` of the shim and
//! of the tool at awkward moments; SIGTERM storms; a tool that leaves a daemon holding its
//! terminal.

use headless_run_e2e::*;
use std::process::Command;
use std::time::{Duration, Instant};

#[test]
fn a_database_locked_for_30_seconds_loses_nothing() {
    let env = TestEnv::new();
    env.shim().arg("true").run().expect_code(0);
    let (locked_tx, locked_rx) = std::sync::mpsc::channel();
    let db = env.state().join("state.db");
    let holder = std::thread::spawn(move || {
        // Raw: the file locked by another process.
        let conn = rusqlite::Connection::open(db).unwrap();
        conn.execute_batch("BEGIN EXCLUSIVE").unwrap();
        locked_tx.send(()).unwrap();
        std::thread::sleep(Duration::from_secs(30));
        conn.execute_batch("COMMIT").unwrap();
    });
    locked_rx.recv().unwrap();
    let started = Instant::now();
    let out = env
        .shim()
        .args(["sh", "-c", "echo through the lock; exit 6"])
        .timeout(Duration::from_secs(60))
        .run();
    out.expect_code(6);
    assert_eq!(out.out(), "through the lock\n");
    assert!(
        started.elapsed() < Duration::from_secs(25),
        "the shim waits for the lock only so long: {:?}",
        started.elapsed()
    );
    holder.join().unwrap();
    // The next process to get the database writes what the shim had to leave behind.
    let listed = env.monitor().args(["runs", "--json"]).run();
    listed.expect_code(0);
    let runs = env.runs();
    assert_eq!(runs.len(), 2, "{runs:#?}");
    let run = &runs[1];
    assert_eq!(s(run, "status"), "failed");
    assert_eq!(n(run, "exit_code"), 6);
    assert!(run["completed_at"].is_string());
    assert!(
        std::fs::read_dir(env.state().join("spool"))
            .map(|d| d.count())
            .unwrap_or(0)
            == 0,
        "the spool is emptied"
    );
}

#[test]
fn the_database_deleted_while_a_tool_runs_gets_the_run_again() {
    let env = TestEnv::new();
    let running = env
        .shim()
        .args(["sh", "-c", "echo first; sleep 2; echo second; exit 4"])
        .spawn();
    assert!(wait_for_state(Duration::from_secs(10), || env.runs().len() == 1));
    for f in ["state.db", "state.db-wal", "state.db-shm"] {
        let _ = std::fs::remove_file(env.state().join(f));
    }
    let out = running.wait();
    out.expect_code(4);
    assert_eq!(out.out(), "first\nsecond\n");
    let run = env.only_run();
    assert_eq!(s(&run, "status"), "failed");
    assert_eq!(n(&run, "exit_code"), 4);
    assert!(out.stderr.contains("deleted or replaced"), "{}", out.stderr);
}

#[test]
fn a_truncated_database_leaves_the_tool_alone_and_the_monitor_says_so() {
    let env = TestEnv::new();
    for _ in 0..3 {
        env.shim().arg("true").run().expect_code(0);
    }
    let db = env.state().join("state.db");
    // Everything into the main file, then cut it in half: pages the schema points at are gone.
    env.raw_db()
        .execute_batch("PRAGMA wal_checkpoint(TRUNCATE)")
        .unwrap();
    let len = std::fs::metadata(&db).unwrap().len();
    assert!(len >= 8192, "{len}");
    std::fs::OpenOptions::new()
        .write(true)
        .open(&db)
        .unwrap()
        .set_len(len / 2)
        .unwrap();
    let out = env.shim().args(["sh", "-c", "echo fine; exit 3"]).run();
    out.expect_code(3);
    assert_eq!(out.out(), "fine\n");
    assert!(out.stderr.matches("warning").count() <= 1, "{}", out.stderr);
    let m = env.monitor().args(["runs"]).run();
    m.expect_code(1);
    assert!(m.stderr.starts_with("monitor: "), "{}", m.stderr);
    assert_eq!(m.stderr.lines().count(), 1, "one clear line: {}", m.stderr);
}

/// A tiny tmpfs mounted over the state's log dir, unmounted on drop.
struct FullDisk(std::path::PathBuf);

impl FullDisk {
    fn mount(dir: &std::path::Path, size: &str) -> Option<FullDisk> {
        std::fs::create_dir_all(dir).ok()?;
        let ok = Command::new("mount")
            .args([
                "-t",
                "tmpfs",
                "-o",
                &format!("size={size},mode=0700"),
                "tmpfs",
            ])
            .arg(dir)
            .status()
            .is_ok_and(|s| s.success());
        ok.then(|| FullDisk(dir.to_path_buf()))
    }
}

impl Drop for FullDisk {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

#[test]
fn a_full_log_disk_loses_no_output_and_no_row() {
    let env = TestEnv::new();
    std::fs::create_dir_all(env.state()).unwrap();
    let mount = FullDisk::mount(&env.state().join("logs"), "64k");
    let out = match &mount {
        Some(_) => env.shim().arg(tool()).args(["lines", "50000"]).run(),
        None if !running_as_root("a_full_log_disk_loses_no_output_and_no_row") => return,
        None => {
            // No tmpfs here: a log dir the tool's user cannot write instead (owned by root,
            // the run by nobody, the state dir and database by nobody).
            use std::os::unix::fs::PermissionsExt;
            use std::os::unix::process::CommandExt;
            let nobody = 65534;
            std::fs::set_permissions(env.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
            std::os::unix::fs::chown(env.state(), Some(nobody), Some(nobody)).unwrap();
            std::fs::create_dir_all(env.state().join("logs/runs")).unwrap();
            for d in ["logs", "logs/runs"] {
                std::fs::set_permissions(
                    env.state().join(d),
                    std::fs::Permissions::from_mode(0o755),
                )
                .unwrap();
            }
            let mut cmd = env.shim();
            cmd.current_dir("/").arg(tool()).args(["lines", "50000"]);
            cmd.cmd.uid(nobody).gid(nobody);
            cmd.run()
        }
    };
    out.expect_code(0);
    assert_eq!(
        out.out().lines().count(),
        50_000,
        "every line reached stdout"
    );
    let run = env.only_run();
    assert_eq!(s(&run, "status"), "completed");
    assert_eq!(n(&run, "exit_code"), 0);
    let warnings = out.stderr.matches("warning").count();
    assert!(
        (1..=2).contains(&warnings),
        "warned once per log that could not be written, not per line: {}",
        out.stderr
    );
}

/// Issue 15 item 22: the state dir's disk is full (database, spool and logs on it): the
/// tool runs and exits with its own code, and its run is recorded with its true outcome
/// once space returns — through the fallback spool in memory, not left `running`.
#[test]
fn a_full_state_disk_records_the_run_once_space_returns() {
    if !running_as_root("a_full_state_disk_records_the_run_once_space_returns") {
        return;
    }
    let env = TestEnv::new();
    let runtime = env.path().join("runtime");
    std::fs::create_dir_all(&runtime).unwrap();
    std::fs::set_permissions(
        &runtime,
        std::os::unix::fs::PermissionsExt::from_mode(0o700),
    )
    .unwrap();
    let _mount = FullDisk::mount(&env.state(), "4m").expect("mount a tmpfs (as root)");
    env.shim()
        .arg("true")
        .env("XDG_RUNTIME_DIR", &runtime)
        .run()
        .expect_code(0);
    // Fill the disk to the last byte.
    let filler = env.state().join("filler");
    {
        use std::io::Write;
        let mut f = std::fs::File::create(&filler).unwrap();
        let block = vec![0u8; 64 * 1024];
        while f.write_all(&block).is_ok() {}
        let byte = [0u8; 1];
        while f.write_all(&byte).is_ok() {}
    }
    let out = env
        .shim()
        .args(["sh", "-c", "echo on a full disk; exit 7"])
        .env("XDG_RUNTIME_DIR", &runtime)
        .run();
    out.expect_code(7);
    assert!(out.out().contains("on a full disk"), "{}", out.context());
    // Space returns; the next process to open the store records what was kept.
    std::fs::remove_file(&filler).unwrap();
    let listed = env
        .monitor()
        .args(["runs", "--json"])
        .env("XDG_RUNTIME_DIR", &runtime)
        .run();
    listed.expect_code(0);
    let runs = env.runs();
    assert_eq!(runs.len(), 2, "{runs:#?}");
    let run = runs
        .iter()
        .find(|r| s(r, "tool_name") == "sh")
        .expect("the sh run");
    assert_eq!(s(run, "status"), "failed", "{run:#?}");
    assert_eq!(n(run, "exit_code"), 7);
    let left: Vec<_> = std::fs::read_dir(&runtime)
        .unwrap()
        .flatten()
        .flat_map(|d| std::fs::read_dir(d.path()).into_iter().flatten().flatten())
        .flat_map(|d| std::fs::read_dir(d.path()).into_iter().flatten().flatten())
        .collect();
    assert!(left.is_empty(), "the fallback spool is emptied: {left:?}");
}

#[test]
fn kill_9_of_a_waiting_shim_leaves_nothing_pending() {
    let env = TestEnv::new();
    let running = env
        .shim()
        .args(["--on-prompt", "wait"])
        .arg(tool())
        .args(["ask", "Proceed? [y/N] "])
        .spawn();
    let ap = env.pending_approval();
    let tool_pid = n(&env.only_run(), "pid") as i32;
    running.signal(libc::SIGKILL);
    let out = running.wait();
    assert_eq!(out.signal, Some(libc::SIGKILL));
    assert!(
        wait_until(Duration::from_secs(5), || !alive(tool_pid)),
        "the tool dies with its terminal"
    );
    env.monitor().arg("reconcile").run().expect_code(0);
    let run = env.only_run();
    assert_eq!(s(&run, "status"), "failed");
    assert!(
        s(&run, "reason").contains("supervisor vanished"),
        "{run:#?}"
    );
    let ap = env
        .approvals()
        .into_iter()
        .find(|a| a["approval_id"] == ap["approval_id"])
        .unwrap();
    assert_eq!(s(&ap, "status"), "expired", "nobody is left to answer it");
    assert_eq!(s(&ap, "decided_by"), "system:run-ended");
}

#[test]
fn kill_9_of_a_shim_whose_row_waits_behind_a_lock_still_leaves_its_run() {
    // The database is locked before the shim can insert its row; the shim keeps the row in
    // the spool meanwhile, so killing it then loses nothing: the next writer inserts the
    // row and reconcile finds its shim gone.
    let env = TestEnv::new();
    env.shim().arg("true").run().expect_code(0);
    let (locked_tx, locked_rx) = std::sync::mpsc::channel();
    let (release_tx, release_rx) = std::sync::mpsc::channel::<()>();
    let db = env.state().join("state.db");
    let holder = std::thread::spawn(move || {
        // Raw: the file locked by another process.
        let conn = rusqlite::Connection::open(db).unwrap();
        conn.execute_batch("BEGIN EXCLUSIVE").unwrap();
        locked_tx.send(()).unwrap();
        let _ = release_rx.recv_timeout(Duration::from_secs(60));
        conn.execute_batch("COMMIT").unwrap();
    });
    locked_rx.recv().unwrap();
    let running = env
        .shim()
        .args(["sh", "-c", "echo started; exec sleep 300"])
        .timeout(Duration::from_secs(90))
        .spawn();
    let spool = env.state().join("spool");
    let spooled = || {
        std::fs::read_dir(&spool)
            .map(|d| {
                d.flatten()
                    .filter(|e| e.path().extension().is_some_and(|x| x == "json"))
                    .count()
            })
            .unwrap_or(0)
    };
    // Spooled as soon as the first write has to wait — not after the busy timeout (10 s):
    // a shim killed while it waits still leaves its run (issue 15 item 14).
    assert!(
        wait_until(Duration::from_secs(4), || spooled() == 1),
        "the row was not spooled while the first write waited on the lock: {}",
        running.stderr_now()
    );
    assert!(String::from_utf8_lossy(&running.stdout_now()).contains("started"));
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&spool), 0o700, "the spool dir is private");
        for f in std::fs::read_dir(&spool).unwrap().flatten() {
            assert_eq!(mode(&f.path()), 0o600, "{} is private", f.path().display());
        }
    }
    running.signal(libc::SIGKILL);
    let out = running.wait();
    assert_eq!(out.signal, Some(libc::SIGKILL));
    release_tx.send(()).unwrap();
    holder.join().unwrap();
    env.monitor().arg("reconcile").run().expect_code(0);
    let runs = env.runs();
    assert_eq!(runs.len(), 2, "{runs:#?}");
    assert_eq!(s(&runs[1], "status"), "failed");
    assert!(
        s(&runs[1], "reason").contains("supervisor vanished"),
        "{runs:#?}"
    );
    assert_eq!(spooled(), 0, "the spool is emptied");
    let tool_pid = n(&runs[1], "pid") as i32;
    assert!(tool_pid > 1, "the spooled row carries the tool's pid");
    assert!(
        wait_until(Duration::from_secs(5), || !alive(tool_pid)),
        "the tool died with its terminal"
    );
}

#[test]
fn a_row_spooled_behind_a_lock_lands_once_the_lock_goes_and_leaves_the_spool() {
    // The lock outlasts the busy timeout, so the row goes to the spool; the lock goes while
    // the tool still runs, so the shim's next write inserts the row itself and discards
    // the spooled copy: one row, nothing left behind.
    let env = TestEnv::new();
    env.shim().arg("true").run().expect_code(0);
    let (locked_tx, locked_rx) = std::sync::mpsc::channel();
    let (release_tx, release_rx) = std::sync::mpsc::channel::<()>();
    let db = env.state().join("state.db");
    let holder = std::thread::spawn(move || {
        // Raw: the file locked by another process.
        let conn = rusqlite::Connection::open(db).unwrap();
        conn.execute_batch("BEGIN EXCLUSIVE").unwrap();
        locked_tx.send(()).unwrap();
        let _ = release_rx.recv_timeout(Duration::from_secs(60));
        conn.execute_batch("COMMIT").unwrap();
    });
    locked_rx.recv().unwrap();
    let go = env.path().join("go");
    let running = env
        .shim()
        .args([
            "sh",
            "-c",
            &format!(
                "echo started; while [ ! -e {} ]; do sleep 0.1; done; echo done",
                go.display()
            ),
        ])
        .timeout(Duration::from_secs(90))
        .spawn();
    let spool = env.state().join("spool");
    let spooled = || {
        std::fs::read_dir(&spool)
            .map(|d| {
                d.flatten()
                    .filter(|e| e.path().extension().is_some_and(|x| x == "json"))
                    .count()
            })
            .unwrap_or(0)
    };
    // Spooled as soon as the first write has to wait — not after the busy timeout (10 s):
    // a shim killed while it waits still leaves its run (issue 15 item 14).
    assert!(
        wait_until(Duration::from_secs(4), || spooled() == 1),
        "the row was not spooled while the first write waited on the lock: {}",
        running.stderr_now()
    );
    release_tx.send(()).unwrap();
    holder.join().unwrap();
    // Raw until the spool is known to be empty: the monitor replays the spool when it opens
    // the database, which would do the shim's work for it.
    assert!(
        wait_until(Duration::from_secs(20), || spooled() == 0
            && env.raw_rows("tool_runs").len() == 2),
        "the row did not land, or its spooled copy stayed: {} spooled, {:#?}",
        spooled(),
        env.raw_rows("tool_runs")
    );
    std::fs::write(&go, "").unwrap();
    let out = running.wait();
    out.expect_code(0);
    assert_eq!(out.out(), "started\ndone\n");
    let runs = env.raw_rows("tool_runs");
    assert_eq!(runs.len(), 2, "{runs:#?}");
    assert_eq!(s(&runs[1], "status"), "completed");
    assert_eq!(spooled(), 0);
    // Inserted once: one audit row for its start.
    let id = s(&runs[1], "tool_run_id");
    let starts = env
        .run_audit(id)
        .into_iter()
        .filter(|e| {
            e["tool_run_id"] == id
                && serde_json::from_str::<serde_json::Value>(s(e, "data")).unwrap()["status"]
                    == "running"
        })
        .count();
    assert_eq!(starts, 1);
}

#[test]
fn kill_9_of_the_tool_while_it_waits_for_a_decision() {
    let env = TestEnv::new();
    let running = env
        .shim()
        .args(["--on-prompt", "wait"])
        .arg(tool())
        .args(["ask", "Proceed? [y/N] "])
        .spawn();
    let ap = env.pending_approval();
    let tool_pid = n(&env.only_run(), "pid") as i32;
    // SAFETY: kill(2) of the fixture tool.
    unsafe { libc::kill(tool_pid, libc::SIGKILL) };
    let out = running.wait();
    out.expect_code(137);
    let run = env.only_run();
    assert_eq!(s(&run, "status"), "failed");
    assert_eq!(n(&run, "exit_code"), 137);
    let ap = env
        .approvals()
        .into_iter()
        .find(|a| a["approval_id"] == ap["approval_id"])
        .unwrap();
    assert_eq!(s(&ap, "status"), "expired");
    assert!(s(&ap, "comment").contains("the run ended"), "{ap:#?}");
    // A decision arriving now is refused as too late, not typed anywhere.
    env.decide(s(&ap, "approval_id"), "y").expect_code(3);
}

#[test]
fn a_sigterm_storm_is_forwarded_and_survived() {
    let env = TestEnv::new();
    let running = env
        .shim()
        .arg(tool())
        .args(["shrug-signals", "2", "5"])
        .spawn();
    assert!(wait_until(Duration::from_secs(20), || {
        String::from_utf8_lossy(&running.stdout_now()).contains("shrugging")
    }));
    for i in 0..200 {
        running.signal(if i % 3 == 0 {
            libc::SIGINT
        } else {
            libc::SIGTERM
        });
    }
    let out = running.wait();
    out.expect_code(5);
    let text = out.out();
    let got: usize = text
        .lines()
        .find_map(|l| {
            l.strip_prefix("got ")?
                .strip_suffix(" signals")?
                .parse()
                .ok()
        })
        .unwrap_or(0);
    assert!(got >= 1, "signals reached the tool: {text}");
    let run = env.only_run();
    assert_eq!(s(&run, "status"), "failed");
    assert_eq!(n(&run, "exit_code"), 5);
}

#[test]
fn a_daemon_holding_the_terminal_does_not_hold_the_shim() {
    let env = TestEnv::new();
    let pidfile = env.path().join("daemon.pid");
    let started = Instant::now();
    let out = env.shim().arg(tool()).arg("daemon").arg(&pidfile).run();
    out.expect_code(0);
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    assert!(out.out().contains("daemon"), "{}", out.out());
    assert_eq!(s(&env.only_run(), "status"), "completed");
    if let Some(pid) = std::fs::read_to_string(&pidfile)
        .ok()
        .and_then(|p| p.trim().parse::<i32>().ok())
    {
        // SAFETY: kill(2) of the fixture's daemon.
        unsafe { libc::kill(pid, libc::SIGKILL) };
    }
}
