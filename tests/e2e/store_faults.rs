//! The state store never changes what the tool does: with the database corrupt,
//! unwritable, read-only or locked, output and exit code are intact and the shim warns
//! once; what could not be written is written once the lock goes.

use headless_run_e2e::*;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::time::{Duration, Instant};

#[test]
fn corrupt_database_leaves_output_and_exit_code_intact() {
    let env = TestEnv::new();
    std::fs::create_dir_all(env.state()).unwrap();
    std::fs::write(env.state().join("state.db"), vec![b'Z'; 16384]).unwrap();
    let out = env.shim().arg(tool()).args(["exit", "7"]).run();
    out.expect_code(7);
    assert_eq!(out.out(), "exiting with 7\n");
    assert_eq!(out.stderr.matches("warning").count(), 1, "{}", out.stderr);
    assert!(
        out.stderr.contains("not a usable SQLite database"),
        "{}",
        out.stderr
    );
    // The monitor reports it clearly and exits 1.
    let m = env.monitor().arg("runs").run();
    m.expect_code(1);
    assert!(
        m.stderr.contains("not a usable SQLite database"),
        "{}",
        m.stderr
    );
}

#[test]
fn database_path_that_cannot_be_created_leaves_the_tool_alone() {
    let env = TestEnv::new();
    let blocker = env.path().join("file-not-dir");
    std::fs::write(&blocker, "x").unwrap();
    let out = env
        .shim()
        .env("HEADLESS_RUN_DB", blocker.join("state.db"))
        .args(["sh", "-c", "echo ok; exit 5"])
        .run();
    out.expect_code(5);
    assert_eq!(out.out(), "ok\n");
    assert_eq!(out.stderr.matches("warning").count(), 1, "{}", out.stderr);
}

#[test]
fn read_only_database_leaves_output_and_exit_code_intact() {
    if !running_as_root("read_only_database_leaves_output_and_exit_code_intact") {
        return;
    }
    let env = TestEnv::new();
    // A first run creates the database; then it is made read-only for an unprivileged user
    // (another user's store: the shim does not use it, `monitor` reads it and writes
    // nothing to it, DESIGN §14).
    env.shim().arg("true").run().expect_code(0);
    // Everything into the main file (as a last close would have done), then a copy.
    env.raw_db()
        .execute_batch("PRAGMA wal_checkpoint(TRUNCATE)")
        .unwrap();
    let shared = env.path().join("shared-state");
    std::fs::create_dir_all(shared.join("logs/runs")).unwrap();
    std::fs::copy(env.state().join("state.db"), shared.join("state.db")).unwrap();
    for (p, mode) in [
        (shared.clone(), 0o755),
        (shared.join("logs"), 0o755),
        (shared.join("logs/runs"), 0o755),
        (shared.join("state.db"), 0o644),
    ] {
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
    }
    std::fs::set_permissions(env.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let mut cmd = env.shim();
    cmd.env("HEADLESS_RUN_HOME", &shared)
        .current_dir("/")
        .args(["sh", "-c", "echo still here; exit 9"]);
    cmd.cmd.uid(65534).gid(65534);
    let out = cmd.run();
    out.expect_code(9);
    assert_eq!(out.out(), "still here\n");
    assert!(out.stderr.contains("warning"), "{}", out.stderr);
    assert!(
        out.stderr
            .lines()
            .filter(|l| l.contains("state store"))
            .count()
            <= 1,
        "{}",
        out.stderr
    );
    // The monitor reads it, and a write says clearly why it cannot, with exit 1.
    let as_nobody = |args: &[&str]| {
        let mut cmd = env.monitor();
        cmd.env("HEADLESS_RUN_HOME", &shared)
            .current_dir("/")
            .args(args);
        cmd.cmd.uid(65534).gid(65534);
        cmd.run()
    };
    let listed = as_nobody(&["runs", "--json"]);
    listed.expect_code(0);
    assert!(
        listed.out().contains("\"completed\""),
        "{}",
        listed.context()
    );
    let out = as_nobody(&["gc", "--older-than", "0s"]);
    out.expect_code(1);
    assert!(
        out.stderr.starts_with("monitor: ")
            && out.stderr.contains("not your state store")
            && out.stderr.contains("owned by root"),
        "{}",
        out.stderr
    );
    assert!(!out.stderr.contains("panicked"), "{}", out.stderr);
}

#[test]
fn a_locked_database_delays_nothing_and_loses_nothing() {
    let env = TestEnv::new();
    env.shim().arg("true").run().expect_code(0);
    // Raw: the file locked by another process.
    let conn = env.raw_db();
    conn.execute_batch("BEGIN EXCLUSIVE").unwrap();
    let locked_at = Instant::now();
    let running = env
        .shim()
        .args(["sh", "-c", "echo through; exit 4"])
        .spawn();
    // Output arrives while the lock is held (it is held until after this wait).
    let seen = wait_until(Duration::from_secs(20), || {
        running.stdout_now() == b"through\n"
    });
    assert!(
        seen,
        "output waited for the database: {:?}",
        running.stdout_now()
    );
    std::thread::sleep(Duration::from_secs(4));
    let held = locked_at.elapsed().as_secs_f64();
    conn.execute_batch("COMMIT").unwrap();
    drop(conn);
    let out = running.wait();
    out.expect_code(4);
    assert_eq!(out.out(), "through\n");
    // The row is written once the lock goes, with the time the run really ended. Raw: by the
    // shim itself; the monitor would replay a spooled row when it opens the database.
    let runs = env.raw_rows("tool_runs");
    assert_eq!(runs.len(), 2, "{runs:?}");
    let run = &runs[1];
    assert_eq!(s(run, "status"), "failed");
    assert_eq!(n(run, "exit_code"), 4);
    let started = hr_time(s(run, "started_at"));
    let completed = hr_time(s(run, "completed_at"));
    assert!(
        completed - started < held - 3.0,
        "completed_at is when the write landed ({held:.1}s after the lock), not when the run ended: {run:?}"
    );
}

fn hr_time(stamp: &str) -> f64 {
    // seconds within the day are enough here: the runs are seconds apart
    let t = &stamp[11..23];
    let h: f64 = t[0..2].parse().unwrap();
    let m: f64 = t[3..5].parse().unwrap();
    let sec: f64 = t[6..].parse().unwrap();
    h * 3600.0 + m * 60.0 + sec
}

/// The processes whose command line is `headless-run-finish` holding `lock` (their
/// descriptor 3 is the state dir's finishing lock).
fn finishers_of(lock: &std::path::Path) -> Vec<i32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|c| c.starts_with(b"headless-run-finish\0"))
                && std::fs::read_link(format!("/proc/{pid}/fd/3")).is_ok_and(|p| p == lock)
        })
        .collect()
}

/// A state dir with one run and its database locked by the test, and a shim of `script`
/// (sh -c) that ends before its store thread is due: returned once the shim has exited
/// (its stderr stays open in its finisher, which waits for the lock: only the exit is
/// waited for here).
fn quick_run_behind_a_lock(env: &TestEnv, script: &str) -> (rusqlite::Connection, Running) {
    quick_run_behind_a_lock_with(env, script, &[])
}

/// [`quick_run_behind_a_lock`] with variables of its own for the shim.
fn quick_run_behind_a_lock_with(
    env: &TestEnv,
    script: &str,
    vars: &[(&str, &str)],
) -> (rusqlite::Connection, Running) {
    env.shim().arg("true").run().expect_code(0);
    let conn = env.raw_db();
    conn.execute_batch("BEGIN EXCLUSIVE").unwrap();
    let mut shim = env.shim();
    shim.env("HEADLESS_RUN_STORE_DEFER", "10s");
    for (k, v) in vars {
        shim.env(k, v);
    }
    let mut running = shim.args(["sh", "-c", script]).spawn();
    let exited = wait_until(Duration::from_secs(60), || {
        running.child.try_wait().unwrap().is_some()
    });
    assert!(exited, "the shim waited for the locked database");
    (conn, running)
}

/// Issue 31: a run that ends before its shim has opened the embedded store (here: within
/// `HEADLESS_RUN_STORE_DEFER`) is handed to a finisher, and the shim exits with the tool's
/// code without waiting for the database: locked here, so the shim's exit comes while the
/// finisher waits. Once the lock goes, the finisher writes the run's row, end and status
/// events itself (the spool is left empty: nobody has to replay it), and `monitor` waits
/// for it before it reads.
#[test]
fn a_run_that_ends_before_the_store_is_open_is_finished_after_the_shim_exits() {
    let env = TestEnv::new();
    let (conn, running) = quick_run_behind_a_lock(&env, "echo through; exit 3");
    let lock = env.state().join("finishing.lock");
    let finishers = finishers_of(&lock);
    assert_eq!(finishers.len(), 1, "one finisher holds the lock");
    // Forked from the shim (its command line overwritten in place, the shim's length), not
    // started as a program of its own: see the next test for that.
    let cmdline = std::fs::read(format!("/proc/{}/cmdline", finishers[0])).unwrap();
    assert!(cmdline.len() > "headless-run-finish ".len(), "{cmdline:?}");
    let comm = std::fs::read_to_string(format!("/proc/{}/comm", finishers[0])).unwrap();
    assert_eq!(
        comm, "hr-finish\n",
        "what pidof and pkill -x match is not the tool's name"
    );
    let rows: i64 = conn
        .query_row("SELECT COUNT(*) FROM tool_runs", [], |r| r.get(0))
        .unwrap();
    assert_eq!(
        rows, 1,
        "nothing of the new run is written while the lock is held"
    );
    conn.execute_batch("COMMIT").unwrap();
    drop(conn);
    let out = running.wait();
    out.expect_code(3);
    assert_eq!(out.out(), "through\n");
    assert!(!out.stderr.contains("warning"), "{}", out.stderr);
    // The monitor waits for the finisher: the run as it ended, at once.
    let runs = env.runs();
    assert_eq!(runs.len(), 2, "{runs:#?}");
    assert_eq!(s(&runs[1], "status"), "failed");
    assert_eq!(n(&runs[1], "exit_code"), 3);
    assert!(finishers_of(&lock).is_empty());
    // Written by the finisher into the database itself, with its status events.
    let id = s(&runs[1], "tool_run_id").to_owned();
    let raw = env.raw_rows("tool_runs");
    assert_eq!(s(&raw[1], "status"), "failed", "{raw:?}");
    assert!(
        std::fs::read_dir(env.state().join("spool"))
            .map(|d| d.count())
            .unwrap_or(0)
            == 0,
        "the spool is left empty"
    );
    assert_eq!(env.logged_statuses(&id), ["running", "failed"]);
    assert_eq!(
        env.run_audit(&id).len(),
        2,
        "its row and its end, once each"
    );
}

/// A shim whose command line is too short to be renamed in place (a link named `q` run as
/// `q`) cannot fork a finisher that `ps` and an outer run would tell from a shim: it starts
/// the finisher as a program of its own (`headless-run-finish`, the hand-off on a pipe),
/// which writes the run once the database is free.
#[test]
fn a_shim_with_a_short_command_line_starts_its_finisher_as_a_program() {
    let env = TestEnv::new();
    let shims = env.path().join("shims");
    let real = env.path().join("real");
    std::fs::create_dir_all(&shims).unwrap();
    std::fs::create_dir_all(&real).unwrap();
    std::os::unix::fs::symlink(bin("headless-run"), shims.join("q")).unwrap();
    let tool = real.join("q");
    std::fs::write(&tool, "#!/bin/sh\necho short\nexit 6\n").unwrap();
    std::fs::set_permissions(&tool, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let path = format!("{}:{}:/usr/bin:/bin", shims.display(), real.display());
    env.shim().arg("true").run().expect_code(0);
    let conn = env.raw_db();
    conn.execute_batch("BEGIN EXCLUSIVE").unwrap();
    // sh runs the link by its bare name: argv is `q`.
    let mut running = env
        .command("/bin/sh")
        .env("HEADLESS", "1")
        .env("HEADLESS_RUN_STORE_DEFER", "10s")
        .env("PATH", &path)
        .args(["-c", "q"])
        .spawn();
    let exited = wait_until(Duration::from_secs(60), || {
        running.child.try_wait().unwrap().is_some()
    });
    assert!(exited, "the shim waited for the locked database");
    let lock = env.state().join("finishing.lock");
    let finishers = finishers_of(&lock);
    assert_eq!(finishers.len(), 1, "one finisher holds the lock");
    let cmdline = std::fs::read(format!("/proc/{}/cmdline", finishers[0])).unwrap();
    assert_eq!(cmdline, b"headless-run-finish\0", "started, not forked");
    conn.execute_batch("COMMIT").unwrap();
    drop(conn);
    let out = running.wait();
    out.expect_code(6);
    assert_eq!(out.out(), "short\n");
    let runs = env.runs();
    assert_eq!(runs.len(), 2, "{runs:#?}");
    assert_eq!(s(&runs[1], "tool_name"), "q");
    assert_eq!(s(&runs[1], "status"), "failed");
    assert_eq!(n(&runs[1], "exit_code"), 6);
    assert!(finishers_of(&lock).is_empty());
}

/// A shim holding a server token is not dumpable (its memory is closed to the tool), and a
/// forked child would stay so, its `/proc/PID/exe` unreadable to an outer run looking for
/// finishers: such a shim starts its finisher as a program, which an exec makes dumpable.
#[test]
fn a_shim_that_is_not_dumpable_starts_its_finisher_as_a_program() {
    let env = TestEnv::new();
    let (conn, running) =
        quick_run_behind_a_lock_with(&env, "exit 0", &[("HEADLESS_RUN_TOKEN", "not-used-here")]);
    let lock = env.state().join("finishing.lock");
    let finishers = finishers_of(&lock);
    assert_eq!(finishers.len(), 1, "one finisher holds the lock");
    let cmdline = std::fs::read(format!("/proc/{}/cmdline", finishers[0])).unwrap();
    assert_eq!(cmdline, b"headless-run-finish\0", "started, not forked");
    assert!(
        std::fs::read_link(format!("/proc/{}/exe", finishers[0])).is_ok(),
        "its executable is readable"
    );
    conn.execute_batch("COMMIT").unwrap();
    drop(conn);
    running.wait().expect_code(0);
    let runs = env.runs();
    assert_eq!(runs.len(), 2, "{runs:#?}");
    assert_eq!(s(&runs[1], "status"), "completed");
}

/// A finisher killed before it could write (kill -9 while the database is locked) loses no
/// run: as a shim's store thread does, it spools the run's row while it waits for the lock,
/// the next opener writes it, and reconciliation ends it as vanished, as for a shim killed
/// the same way.
#[test]
fn a_killed_finisher_leaves_its_run_to_reconciliation() {
    let env = TestEnv::new();
    let (conn, running) = quick_run_behind_a_lock(&env, "exit 0");
    let lock = env.state().join("finishing.lock");
    let finishers = finishers_of(&lock);
    assert_eq!(finishers.len(), 1);
    assert!(
        wait_until(Duration::from_secs(30), || {
            // The row itself, not the temporary file it is written to before its rename
            // (a finisher killed between the two leaves only that, which nobody reads).
            std::fs::read_dir(env.state().join("spool")).is_ok_and(|d| {
                d.flatten()
                    .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
                    .count()
                    == 1
            })
        }),
        "the finisher spools the run's row while it waits for the database"
    );
    // SAFETY: kill(2) of a process of this test's.
    unsafe { libc::kill(finishers[0], libc::SIGKILL) };
    assert!(wait_until(Duration::from_secs(30), || finishers_of(&lock).is_empty()));
    conn.execute_batch("COMMIT").unwrap();
    drop(conn);
    running.wait().expect_code(0);
    env.monitor().arg("reconcile").run().expect_code(0);
    let runs = env.runs();
    assert_eq!(runs.len(), 2, "the run is not lost: {runs:#?}");
    assert_eq!(s(&runs[1], "status"), "failed");
    assert!(s(&runs[1], "reason").contains("vanished"), "{:?}", runs[1]);
}

/// A bad `HEADLESS_RUN_STORE_DEFER` is named, and the run is recorded as usual.
#[test]
fn a_bad_store_defer_is_named_and_ignored() {
    let env = TestEnv::new();
    let out = env
        .shim()
        .env("HEADLESS_RUN_STORE_DEFER", "soon")
        .args(["sh", "-c", "exit 5"])
        .run();
    out.expect_code(5);
    assert!(
        out.stderr.contains("HEADLESS_RUN_STORE_DEFER ignored"),
        "{}",
        out.stderr
    );
    assert_eq!(n(&env.only_run(), "exit_code"), 5);
}

/// A shim started with stdin, stdout and stderr closed still hands a quick run to its
/// finisher correctly: the pipe and the lock it opens then take the numbers 0–2, which the
/// finisher's own stdin, stdout and lock must not overwrite.
#[test]
fn a_quick_run_of_a_shim_with_its_standard_descriptors_closed_is_recorded() {
    let env = TestEnv::new();
    env.shim().arg("true").run().expect_code(0);
    let script = format!(
        "exec {} -- sh -c 'exit 4' <&- >&- 2>&-",
        bin("headless-run").display()
    );
    env.command("sh")
        .env("HEADLESS", "1")
        .env("HEADLESS_RUN_STORE_DEFER", "10s")
        .args(["-c", &script])
        .run()
        .expect_code(4);
    let runs = env.runs();
    assert_eq!(runs.len(), 2, "{runs:#?}");
    assert_eq!(s(&runs[1], "status"), "failed");
    assert_eq!(n(&runs[1], "exit_code"), 4);
    assert_eq!(
        env.logged_statuses(s(&runs[1], "tool_run_id")),
        ["running", "failed"]
    );
}

/// A nested run's finisher is that run's record, not something its outer run's tool left
/// running: when the outer run ends its tool (here its hard timeout) and everything the tool
/// started, the inner run's finisher, re-parented to the outer shim and waiting on a locked
/// database of its own, is left to finish.
#[test]
fn an_outer_run_ending_its_tool_leaves_a_nested_runs_finisher_alone() {
    let env = TestEnv::new();
    let inner_home = env.path().join("inner-state");
    env.shim()
        .env("HEADLESS_RUN_HOME", &inner_home)
        .arg("true")
        .run()
        .expect_code(0);
    let conn = rusqlite::Connection::open(inner_home.join("state.db")).unwrap();
    conn.busy_timeout(Duration::from_secs(20)).unwrap();
    conn.execute_batch("BEGIN EXCLUSIVE").unwrap();
    let script = format!(
        "HEADLESS_RUN_HOME={} HEADLESS_RUN_STORE_DEFER=10s {} -- true; exec sleep 60",
        inner_home.display(),
        bin("headless-run").display()
    );
    env.shim()
        .args(["--timeout", "2s", "--", "sh", "-c", &script])
        .run()
        .expect_code(124);
    let lock = inner_home.join("finishing.lock");
    assert_eq!(
        finishers_of(&lock).len(),
        1,
        "the inner run's finisher lives on"
    );
    conn.execute_batch("COMMIT").unwrap();
    drop(conn);
    let paths = hr_shared::paths::StatePaths::at(&inner_home);
    assert!(hr_shared::finishing::settle(
        &paths,
        Duration::from_secs(30)
    ));
    let runs: Vec<(String, i64)> = rusqlite::Connection::open(inner_home.join("state.db"))
        .unwrap()
        .prepare("SELECT status, exit_code FROM tool_runs ORDER BY rowid")
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(
        runs,
        [("completed".to_owned(), 0), ("completed".to_owned(), 0)],
        "the nested run is recorded by its finisher"
    );
}
