//! The end-to-end harness: real binaries, a fresh state dir per test, commands that can
//! never hang a test run, a pty runner. State is read through the contract, `monitor …
//! --json` (DESIGN.md §8: fields are the table columns), so the suite does not depend on
//! how the store keeps it; direct SQL on the database file (`raw_db`, `raw_rows`,
//! `rows_of`) is left to tests that damage or inspect the file itself.

use rusqlite::Connection;
use serde_json::{Map, Value};
use std::ffi::OsStr;
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// The directory holding the built binaries (`target/debug`).
pub fn target_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("current exe");
    // target/debug/deps/e2e-HASH → target/debug
    exe.parent()
        .and_then(Path::parent)
        .expect("target dir")
        .to_path_buf()
}

/// The static release binaries `scripts/build-release` makes (`scripts/test` builds them
/// before the tests): what the package and the container image ship. Tells how to build
/// them when missing.
pub fn release_dir() -> PathBuf {
    let triple = format!("{}-unknown-linux-gnu", std::env::consts::ARCH);
    let dir = target_dir()
        .parent()
        .expect("target dir")
        .join(triple)
        .join("release");
    for b in ["headless-run", "monitor"] {
        assert!(
            dir.join(b).exists(),
            "{} is missing: run scripts/build-release (scripts/test does) before the tests",
            dir.join(b).display()
        );
    }
    dir
}

/// A built binary; tells how to build it when missing.
pub fn bin(name: &str) -> PathBuf {
    let p = target_dir().join(name);
    assert!(
        p.exists(),
        "{} is missing: run `cargo build --workspace` before the tests",
        p.display()
    );
    p
}

/// A fixture tool in `tests/fixtures`.
pub fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures")
        .join(name)
}

/// The multi-purpose fixture tool (`tests/fixtures/tool.py`).
pub fn tool() -> PathBuf {
    fixture("tool.py")
}

/// Whether the tests run as root: some need it to act as another user (`nobody`) or to
/// mount a tmpfs. Those tests say they were skipped and pass otherwise (CI runs as root).
pub fn running_as_root(test: &str) -> bool {
    // SAFETY: geteuid cannot fail.
    let root = unsafe { libc::geteuid() } == 0;
    if !root {
        eprintln!("{test}: skipped: needs root to act as another user");
    }
    root
}

/// A real OS user of this machine for the tests that need several (DESIGN §14: who runs
/// what), made with `useradd` the first time (a system user with no home and no shell):
/// its (uid, gid). Needs root.
pub fn os_user(name: &str) -> (u32, u32) {
    static MADE: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _one_at_a_time = MADE.lock().unwrap_or_else(|e| e.into_inner());
    let id = |flag: &str| -> Option<u32> {
        let out = Command::new("id").args([flag, name]).output().ok()?;
        if !out.status.success() {
            return None;
        }
        String::from_utf8_lossy(&out.stdout).trim().parse().ok()
    };
    if id("-u").is_none() {
        need("useradd", "passwd");
        let out = Command::new("useradd")
            .args(["--system", "--no-create-home", "--user-group"])
            .args(["--shell", "/usr/sbin/nologin", name])
            .output()
            .expect("useradd");
        // Another test process may have made it first (exit 9: it exists).
        assert!(
            out.status.success() || out.status.code() == Some(9),
            "useradd {name}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    (
        id("-u").expect("the user's uid"),
        id("-g").expect("the user's gid"),
    )
}

/// The path of a real tool a test drives, found on `PATH`. A missing tool fails the test,
/// never skips it: `.ci/run` installs each from the Debian `package` named here.
pub fn need(command: &str, package: &str) -> PathBuf {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|dir| dir.join(command))
        .find(|p| {
            std::fs::metadata(p).is_ok_and(|m| {
                use std::os::unix::fs::PermissionsExt;
                m.is_file() && m.permissions().mode() & 0o111 != 0
            })
        })
        .unwrap_or_else(|| {
            panic!("`{command}` is not installed: apt-get install {package} (as .ci/run does)")
        })
}

/// Polls `cond` every 20 ms until it holds or `limit` passes.
pub fn wait_until(limit: Duration, cond: impl FnMut() -> bool) -> bool {
    wait_until_every(limit, Duration::from_millis(20), cond)
}

/// Polls `cond` every `every` until it holds or `limit` passes.
pub fn wait_until_every(limit: Duration, every: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    loop {
        if cond() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(every);
    }
}

/// [`wait_until`] for conditions that read state through the monitor (`env.runs()`,
/// `env.approvals()`, …): every read starts a `monitor` process, so they are polled every
/// 50 ms, which leaves the processes under test the CPU.
pub fn wait_for_state(limit: Duration, cond: impl FnMut() -> bool) -> bool {
    wait_until_every(limit, Duration::from_millis(50), cond)
}

/// A test's private world: a temp dir with a state dir and an empty config dir.
pub struct TestEnv {
    pub tmp: tempfile::TempDir,
}

impl Default for TestEnv {
    fn default() -> Self {
        Self::new()
    }
}

impl TestEnv {
    pub fn new() -> Self {
        let tmp = tempfile::Builder::new()
            .prefix("hr-e2e-")
            .tempdir()
            .expect("tempdir");
        std::fs::create_dir_all(tmp.path().join("config")).unwrap();
        std::fs::create_dir_all(tmp.path().join("work")).unwrap();
        TestEnv { tmp }
    }

    pub fn path(&self) -> &Path {
        self.tmp.path()
    }

    /// The state dir (`HEADLESS_RUN_HOME`).
    pub fn state(&self) -> PathBuf {
        self.path().join("state")
    }

    /// A scratch working directory.
    pub fn work(&self) -> PathBuf {
        self.path().join("work")
    }

    /// A command with this env's state dir, `CI` and `HEADLESS*` from the outside removed.
    pub fn command(&self, program: impl AsRef<OsStr>) -> Cmd {
        let mut cmd = Command::new(program);
        for (k, _) in std::env::vars_os() {
            let k = k.to_string_lossy().into_owned();
            if k == "CI"
                || k.starts_with("HEADLESS")
                || k == "AUTO_APPROVAL"
                || k.starts_with("GITHUB_")
            {
                cmd.env_remove(&k);
            }
        }
        cmd.env("HEADLESS_RUN_HOME", self.state())
            .env("XDG_CONFIG_HOME", self.path().join("config"))
            .env("XDG_DATA_HOME", self.path().join("data"))
            .current_dir(self.work());
        Cmd {
            cmd,
            stdin: Input::Null,
            timeout: Duration::from_secs(60),
        }
    }

    /// `headless-run` in headless mode (`HEADLESS=1`).
    pub fn shim(&self) -> Cmd {
        let mut c = self.command(bin("headless-run"));
        c.env("HEADLESS", "1");
        c
    }

    /// `monitor`.
    pub fn monitor(&self) -> Cmd {
        self.command(bin("monitor"))
    }

    /// The database file, opened directly: only for tests that damage or inspect the file
    /// itself (corruption, locks, permissions, audit tampering, schema and pragmas, the
    /// spool) or seed rows no command writes. Everything else reads state through
    /// `monitor … --json` (the contract), so the suite can run against another store.
    pub fn raw_db(&self) -> Connection {
        self.settle();
        let c = Connection::open(self.state().join("state.db")).expect("open state.db");
        c.busy_timeout(Duration::from_secs(20)).unwrap();
        c
    }

    /// Every row of a table in the database file, as JSON objects keyed by column, in rowid
    /// order (values as stored: `argv_json` a string, `allows_text` 0/1); none while the
    /// file or the table does not exist yet. Inspects the file itself, bypassing the
    /// monitor (which replays the spool and migrates when it opens the database): only for
    /// tests of the spool, of locks, of the audit table as a whole, or of what no command
    /// shows.
    pub fn raw_rows(&self, table: &str) -> Vec<Map<String, Value>> {
        if !self.state().join("state.db").exists() {
            return Vec::new();
        }
        let conn = self.raw_db();
        let exists = conn
            .query_row(
                "SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name = ?1",
                [table],
                |r| r.get::<_, i64>(0),
            )
            .is_ok_and(|n| n == 1);
        if !exists {
            return Vec::new();
        }
        rows_of(&conn, &format!("SELECT * FROM {table} ORDER BY rowid"))
    }

    /// `monitor ARGS --json`, parsed; `None` while there is no database yet (tests poll
    /// while a shim creates it). Fails the test on any other error.
    pub fn monitor_json(&self, args: &[&str]) -> Option<Value> {
        let out = self.monitor().args(args).arg("--json").run();
        if out.code == Some(1) && out.stderr.contains("no database at") {
            return None;
        }
        out.expect_code(0);
        Some(serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
            panic!(
                "monitor {args:?} --json printed no JSON ({e}); {}",
                out.context()
            )
        }))
    }

    /// A `monitor … --json` listing (printed newest first), oldest first.
    fn monitor_list(&self, args: &[&str]) -> Vec<Map<String, Value>> {
        let Some(value) = self.monitor_json(args) else {
            return Vec::new();
        };
        let Value::Array(items) = value else {
            panic!("monitor {args:?} --json is not an array: {value}");
        };
        let mut list: Vec<Map<String, Value>> = items.into_iter().map(object).collect();
        list.reverse();
        list
    }

    /// The runs, oldest first (`monitor runs --limit 0 --json`: the `tool_runs` columns,
    /// `argv_json` as an array and `metadata` as an object); none before the database exists.
    pub fn runs(&self) -> Vec<Map<String, Value>> {
        self.monitor_list(&["runs", "--limit", "0"])
    }

    /// The only run; fails the test if there is not exactly one.
    pub fn only_run(&self) -> Map<String, Value> {
        let mut runs = self.runs();
        assert_eq!(runs.len(), 1, "expected one run, found {runs:#?}");
        runs.remove(0)
    }

    /// One run's columns (`monitor show TR-… --json` without its approvals, output tail
    /// and audit rows); fails the test if there is no such run.
    pub fn run_by_id(&self, id: &str) -> Map<String, Value> {
        let mut run = self.shown(id);
        for extra in ["approvals", "output_tail", "events"] {
            run.remove(extra);
        }
        run
    }

    /// One approval's columns (`monitor show AP-… --json` without its audit rows); fails
    /// the test if there is no such approval.
    pub fn approval_by_id(&self, id: &str) -> Map<String, Value> {
        let mut approval = self.shown(id);
        approval.remove("events");
        approval
    }

    /// `monitor show ID --json`.
    fn shown(&self, id: &str) -> Map<String, Value> {
        let value = self
            .monitor_json(&["show", id])
            .unwrap_or_else(|| panic!("no database, so no {id}"));
        object(value)
    }

    /// Waits until no finisher of this state dir is writing (a shim that exited before its
    /// store was open hands its run to one): what `monitor` does before it reads. Files
    /// read directly (the database, the combined log) are read after it.
    pub fn settle(&self) {
        let paths = hr_shared::paths::StatePaths::at(self.state());
        assert!(
            hr_shared::finishing::settle(&paths, Duration::from_secs(30)),
            "a finisher of {} is still writing after 30 s",
            self.state().display()
        );
    }

    /// The events of `logs/combined.log`.
    pub fn log_events(&self) -> Vec<Value> {
        self.settle();
        let text =
            std::fs::read_to_string(self.state().join("logs/combined.log")).unwrap_or_default();
        text.lines()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("bad log line {l:?}: {e}")))
            .collect()
    }

    /// The statuses the runs went through, in order: the `tool_status_change` events of
    /// the combined log.
    pub fn status_events(&self) -> Vec<String> {
        self.log_events()
            .into_iter()
            .filter(|e| e["event"] == "tool_status_change")
            .map(|e| e["status"].as_str().unwrap_or_default().to_owned())
            .collect()
    }

    /// The approvals, oldest first (`monitor approvals --status all --limit 0 --json`: the
    /// `approvals` columns, `options_json` as an array, `allows_text` a boolean); none before
    /// the database exists.
    pub fn approvals(&self) -> Vec<Map<String, Value>> {
        self.monitor_list(&["approvals", "--status", "all", "--limit", "0"])
    }

    /// Waits (bounded) for a pending approval to appear and returns the newest.
    pub fn pending_approval(&self) -> Map<String, Value> {
        let mut found = None;
        let seen = wait_for_state(Duration::from_secs(20), || {
            found = self
                .approvals()
                .into_iter()
                .rev()
                .find(|a| a["status"] == "pending");
            found.is_some()
        });
        assert!(
            seen,
            "no pending approval appeared: {:#?}",
            self.approvals()
        );
        found.unwrap_or_default()
    }

    /// `monitor decide ID VALUE` (as the real OS user, channel cli).
    pub fn decide(&self, approval_id: &str, value: &str) -> Outcome {
        self.monitor().args(["decide", approval_id, value]).run()
    }

    /// Writes the user config file (`$XDG_CONFIG_HOME/headless-run/config.toml`).
    pub fn write_config(&self, toml: &str) {
        let dir = self.path().join("config/headless-run");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("config.toml"), toml).unwrap();
    }

    /// The `event` names of the combined log, in order.
    pub fn log_event_names(&self) -> Vec<String> {
        self.log_events()
            .iter()
            .filter_map(|e| e["event"].as_str().map(str::to_owned))
            .collect()
    }

    /// The combined log's events named `event` that concern `id` (a run's or an approval's
    /// id), in order.
    pub fn events_about(&self, event: &str, id: &str) -> Vec<Value> {
        self.log_events()
            .into_iter()
            .filter(|e| e["event"] == event && (e["tool_run_id"] == id || e["approval_id"] == id))
            .collect()
    }

    /// The statuses a run went through according to the combined log's
    /// `tool_status_change` events.
    pub fn logged_statuses(&self, run_id: &str) -> Vec<String> {
        self.events_about("tool_status_change", run_id)
            .iter()
            .filter_map(|e| e["status"].as_str().map(str::to_owned))
            .collect()
    }

    /// The audit rows (`events`) of one approval, oldest first: `monitor show AP-… --json`.
    pub fn audit_of(&self, approval_id: &str) -> Vec<Map<String, Value>> {
        self.shown_events(approval_id)
    }

    /// The audit rows (`events`) of one run, oldest first: `monitor show TR-… --json`.
    pub fn run_audit(&self, run_id: &str) -> Vec<Map<String, Value>> {
        self.shown_events(run_id)
    }

    /// Every audit row the monitor shows: those of every run and of every approval, by id.
    /// (Rows of neither, such as `gc`'s, and those of deleted runs are in the file only.)
    pub fn audit(&self) -> Vec<Map<String, Value>> {
        let mut rows: Vec<Map<String, Value>> = Vec::new();
        let ids = self
            .runs()
            .iter()
            .map(|r| s(r, "tool_run_id").to_owned())
            .chain(
                self.approvals()
                    .iter()
                    .map(|a| s(a, "approval_id").to_owned()),
            )
            .collect::<Vec<_>>();
        for id in ids {
            for row in self.shown_events(&id) {
                if !rows.iter().any(|r| r["id"] == row["id"]) {
                    rows.push(row);
                }
            }
        }
        rows.sort_by_key(|r| n(r, "id"));
        rows
    }

    /// The `events` of `monitor show ID --json`.
    fn shown_events(&self, id: &str) -> Vec<Map<String, Value>> {
        match self.shown(id).remove("events") {
            Some(Value::Array(events)) => events.into_iter().map(object).collect(),
            other => panic!("monitor show {id} --json has no events array: {other:?}"),
        }
    }

    /// The raw output log of a run.
    pub fn run_log(&self, id: &str) -> Vec<u8> {
        std::fs::read(self.state().join("logs/runs").join(format!("{id}.log"))).unwrap_or_default()
    }
}

/// A JSON value that must be an object.
fn object(value: Value) -> Map<String, Value> {
    match value {
        Value::Object(m) => m,
        other => panic!("not a JSON object: {other}"),
    }
}

/// Every row of a query on the database file as JSON objects (values as stored). Inspects
/// the file itself: see [`TestEnv::raw_db`].
pub fn rows_of(conn: &Connection, sql: &str) -> Vec<Map<String, Value>> {
    let mut stmt = conn.prepare(sql).expect("prepare");
    let names: Vec<String> = stmt.column_names().map(|s| s.to_string()).collect();
    stmt.query_map([], |r| {
        let mut m = Map::new();
        for (i, name) in names.iter().enumerate() {
            let v = match r.get_ref(i)? {
                rusqlite::types::ValueRef::Null => Value::Null,
                rusqlite::types::ValueRef::Integer(n) => Value::from(n),
                rusqlite::types::ValueRef::Real(f) => Value::from(f),
                rusqlite::types::ValueRef::Text(t) => {
                    Value::from(String::from_utf8_lossy(t).into_owned())
                }
                rusqlite::types::ValueRef::Blob(b) => Value::from(format!("<{} bytes>", b.len())),
            };
            m.insert(name.clone(), v);
        }
        Ok(m)
    })
    .expect("query")
    .collect::<Result<Vec<_>, _>>()
    .expect("rows")
}

/// A string field of a row.
pub fn s<'a>(row: &'a Map<String, Value>, key: &str) -> &'a str {
    row.get(key)
        .and_then(Value::as_str)
        .unwrap_or_else(|| panic!("{key} is not a string in {row:#?}"))
}

/// An array field of a row (`argv_json`, `options_json`).
pub fn arr<'a>(row: &'a Map<String, Value>, key: &str) -> &'a [Value] {
    row.get(key)
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_else(|| panic!("{key} is not an array in {row:#?}"))
}

/// An array-of-strings field of a row (`argv_json`).
pub fn strings(row: &Map<String, Value>, key: &str) -> Vec<String> {
    arr(row, key)
        .iter()
        .map(|v| {
            v.as_str()
                .unwrap_or_else(|| panic!("{key} holds a non-string in {row:#?}"))
                .to_owned()
        })
        .collect()
}

/// An integer field of a row.
pub fn n(row: &Map<String, Value>, key: &str) -> i64 {
    row.get(key)
        .and_then(Value::as_i64)
        .unwrap_or_else(|| panic!("{key} is not an integer in {row:#?}"))
}

enum Input {
    Null,
    Bytes(Vec<u8>),
    File(PathBuf),
    Inherit,
}

/// A command that is always waited for with a limit.
pub struct Cmd {
    pub cmd: Command,
    stdin: Input,
    timeout: Duration,
}

impl Cmd {
    /// `program` with the test process's environment and directory (for helpers such as
    /// `psql`; tools under test go through [`TestEnv::command`]).
    pub fn plain(program: impl AsRef<OsStr>) -> Cmd {
        Cmd {
            cmd: Command::new(program),
            stdin: Input::Null,
            timeout: Duration::from_secs(60),
        }
    }

    pub fn arg(&mut self, a: impl AsRef<OsStr>) -> &mut Self {
        self.cmd.arg(a);
        self
    }
    pub fn args<I: IntoIterator<Item = S>, S: AsRef<OsStr>>(&mut self, a: I) -> &mut Self {
        self.cmd.args(a);
        self
    }
    pub fn env(&mut self, k: impl AsRef<OsStr>, v: impl AsRef<OsStr>) -> &mut Self {
        self.cmd.env(k, v);
        self
    }
    pub fn env_remove(&mut self, k: impl AsRef<OsStr>) -> &mut Self {
        self.cmd.env_remove(k);
        self
    }
    pub fn current_dir(&mut self, d: impl AsRef<Path>) -> &mut Self {
        self.cmd.current_dir(d);
        self
    }
    /// Feed these bytes on stdin (through a pipe that closes after them).
    pub fn stdin_bytes(&mut self, b: impl Into<Vec<u8>>) -> &mut Self {
        self.stdin = Input::Bytes(b.into());
        self
    }
    /// Stdin from a file.
    pub fn stdin_file(&mut self, p: impl Into<PathBuf>) -> &mut Self {
        self.stdin = Input::File(p.into());
        self
    }
    /// Stdin inherited (for pty runs).
    pub fn stdin_inherit(&mut self) -> &mut Self {
        self.stdin = Input::Inherit;
        self
    }
    pub fn timeout(&mut self, d: Duration) -> &mut Self {
        self.timeout = d;
        self
    }
    /// Run as this OS user ([`os_user`]), with no supplementary groups.
    pub fn as_user(&mut self, (uid, gid): (u32, u32)) -> &mut Self {
        use std::os::unix::process::CommandExt;
        self.cmd.uid(uid).gid(gid);
        self
    }

    /// Starts it with piped stdout/stderr.
    pub fn spawn(&mut self) -> Running {
        let (stdin, feed) = match std::mem::replace(&mut self.stdin, Input::Null) {
            Input::Null => (Stdio::null(), None),
            Input::Bytes(b) => (Stdio::piped(), Some(b)),
            Input::File(p) => (
                Stdio::from(std::fs::File::open(p).expect("stdin file")),
                None,
            ),
            Input::Inherit => (Stdio::inherit(), None),
        };
        let mut child = self
            .cmd
            .stdin(stdin)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {:?}: {e}", self.cmd));
        if let Some(bytes) = feed {
            let mut w = child.stdin.take().unwrap();
            std::thread::spawn(move || {
                let _ = w.write_all(&bytes);
            });
        }
        let out = reader(child.stdout.take().unwrap());
        let err = reader(child.stderr.take().unwrap());
        Running {
            child,
            out: Some(out),
            err: Some(err),
            timeout: self.timeout,
            what: format!("{:?}", self.cmd),
        }
    }

    /// Runs to completion (panics, after killing it, if it outlives the timeout).
    pub fn run(&mut self) -> Outcome {
        self.spawn().wait()
    }
}

type Collected = Arc<Mutex<Vec<u8>>>;

fn reader(mut r: impl Read + Send + 'static) -> (JoinHandle<()>, Collected) {
    let buf: Collected = Arc::default();
    let sink = buf.clone();
    let handle = std::thread::spawn(move || {
        let mut chunk = [0u8; 65536];
        loop {
            match r.read(&mut chunk) {
                Ok(0) | Err(_) => break,
                Ok(n) => sink.lock().unwrap().extend_from_slice(&chunk[..n]),
            }
        }
    });
    (handle, buf)
}

fn collect(r: Option<(JoinHandle<()>, Collected)>) -> Vec<u8> {
    match r {
        Some((h, buf)) => {
            let _ = h.join();
            std::mem::take(&mut *buf.lock().unwrap())
        }
        None => Vec::new(),
    }
}

/// A started command.
pub struct Running {
    pub child: Child,
    out: Option<(JoinHandle<()>, Collected)>,
    err: Option<(JoinHandle<()>, Collected)>,
    timeout: Duration,
    what: String,
}

impl Running {
    /// What it has written to stdout so far.
    pub fn stdout_now(&self) -> Vec<u8> {
        self.out
            .as_ref()
            .map(|(_, b)| b.lock().unwrap().clone())
            .unwrap_or_default()
    }

    /// What it has written to stderr so far.
    pub fn stderr_now(&self) -> String {
        self.err
            .as_ref()
            .map(|(_, b)| String::from_utf8_lossy(&b.lock().unwrap()).into_owned())
            .unwrap_or_default()
    }

    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    /// Sends a signal to the process.
    pub fn signal(&self, sig: i32) {
        // SAFETY: kill(2) of our own child.
        unsafe { libc::kill(self.pid(), sig) };
    }

    /// Waits for it (killing it and failing the test after the timeout).
    pub fn wait(mut self) -> Outcome {
        let deadline = Instant::now() + self.timeout;
        let status = loop {
            if let Some(st) = self.child.try_wait().expect("try_wait") {
                break st;
            }
            if Instant::now() >= deadline {
                let _ = self.child.kill();
                let _ = self.child.wait();
                let err = collect(self.err.take());
                panic!(
                    "{} did not finish within {:?}; stderr: {}",
                    self.what,
                    self.timeout,
                    String::from_utf8_lossy(&err)
                );
            }
            std::thread::sleep(Duration::from_millis(5));
        };
        let stdout = collect(self.out.take());
        let stderr = collect(self.err.take());
        Outcome {
            code: status.code(),
            signal: status.signal(),
            stdout,
            stderr: String::from_utf8_lossy(&stderr).into_owned(),
            what: self.what.clone(),
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// How a command ended and what it printed.
#[derive(Debug)]
pub struct Outcome {
    pub code: Option<i32>,
    pub signal: Option<i32>,
    pub stdout: Vec<u8>,
    pub stderr: String,
    what: String,
}

impl Outcome {
    /// The exit code; fails the test (showing the output) if it died of a signal.
    pub fn code(&self) -> i32 {
        self.code.unwrap_or_else(|| {
            panic!(
                "{} died of signal {:?}; {}",
                self.what,
                self.signal,
                self.context()
            )
        })
    }

    /// Stdout as text.
    pub fn out(&self) -> String {
        String::from_utf8_lossy(&self.stdout).into_owned()
    }

    /// Asserts the exit code, showing the output when it differs.
    #[track_caller]
    pub fn expect_code(&self, expected: i32) -> &Self {
        assert_eq!(
            self.code,
            Some(expected),
            "{} exited {:?} (signal {:?}); {}",
            self.what,
            self.code,
            self.signal,
            self.context()
        );
        self
    }

    pub fn context(&self) -> String {
        format!(
            "stdout: {:?}\nstderr: {}",
            String::from_utf8_lossy(&self.stdout),
            self.stderr
        )
    }
}

/// A new pty of `cols` × `rows`: (master, slave).
pub fn open_pty(cols: u16, rows: u16) -> (OwnedFd, OwnedFd) {
    let (mut master, mut slave) = (0, 0);
    let ws = libc::winsize {
        ws_row: rows,
        ws_col: cols,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // SAFETY: openpty fills both descriptors; the winsize is valid.
    let rc = unsafe {
        libc::openpty(
            &mut master,
            &mut slave,
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            &ws,
        )
    };
    assert_eq!(rc, 0, "openpty failed");
    // openpty cannot open them close-on-exec: set it at once, or every child another test
    // spawns meanwhile inherits this terminal (callers hand the slave over as stdio, which
    // a dup2 makes inheritable again).
    for fd in [master, slave] {
        // SAFETY: F_SETFD on a descriptor openpty just returned.
        unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) };
    }
    // SAFETY: openpty returned these descriptors and nothing else owns them.
    unsafe { (OwnedFd::from_raw_fd(master), OwnedFd::from_raw_fd(slave)) }
}

/// Runs `cmd` with a fresh pty as its stdin, stdout, stderr and controlling terminal (as a
/// person in a terminal would), optionally typing `input` after `delay`. Returns the exit
/// status and everything the terminal showed.
pub fn run_in_pty(
    mut cmd: Command,
    input: Option<(Duration, &[u8])>,
    timeout: Duration,
) -> (Option<i32>, Vec<u8>) {
    let (master, slave) = open_pty(100, 30);
    let sfd = slave.as_raw_fd();
    cmd.stdin(Stdio::from(slave.try_clone().unwrap()))
        .stdout(Stdio::from(slave.try_clone().unwrap()))
        .stderr(Stdio::from(slave));
    // SAFETY: setsid and ioctl are async-signal-safe.
    unsafe {
        cmd.pre_exec(|| {
            libc::setsid();
            libc::ioctl(0, libc::TIOCSCTTY as _, 0);
            Ok(())
        });
    }
    let _ = sfd;
    let mut child = cmd.spawn().expect("spawn in pty");
    drop(cmd);
    let mut file = std::fs::File::from(master);
    let mut writer = file.try_clone().unwrap();
    let out = std::thread::spawn(move || {
        let mut buf = Vec::new();
        let mut chunk = [0u8; 4096];
        loop {
            match file.read(&mut chunk) {
                Ok(0) | Err(_) => break,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        }
        buf
    });
    if let Some((delay, bytes)) = input {
        std::thread::sleep(delay);
        let _ = writer.write_all(bytes);
    }
    let deadline = Instant::now() + timeout;
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("command in pty did not finish within {timeout:?}");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    drop(writer);
    (status.code(), out.join().unwrap_or_default())
}

/// Whether a process exists (and is not a zombie).
pub fn alive(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => {
            stat.rsplit(')')
                .next()
                .and_then(|r| r.split_whitespace().next())
                != Some("Z")
        }
        Err(_) => false,
    }
}

/// Pinned versions of the real prompt libraries the tests drive (issue 12).
const INQUIRER: &str = "@inquirer/prompts@8.8.0";
const PY_LIBS: &[&str] = &[
    "questionary==2.1.1",
    "InquirerPy==0.3.4",
    "prompt_toolkit==3.0.53",
    "rich==14.2.0",
    "click==8.3.1",
];

/// A directory installed once under `target/e2e-deps/NAME` by `install` (given a scratch
/// directory to fill), shared by every test and test process: filled beside it and
/// renamed into place, so a half-done install is never used. A failed install fails the
/// test, never skips it.
fn installed_once(name: &str, install: impl FnOnce(&Path)) -> PathBuf {
    let deps = target_dir().join("e2e-deps");
    let done = deps.join(name);
    if done.join(".complete").exists() {
        return done;
    }
    std::fs::create_dir_all(&deps).expect("create target/e2e-deps");
    let scratch = deps.join(format!("{name}.tmp-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&scratch);
    std::fs::create_dir_all(&scratch).expect("scratch dir");
    install(&scratch);
    std::fs::write(scratch.join(".complete"), "").expect("mark install complete");
    if std::fs::rename(&scratch, &done).is_err() {
        // Another test process finished first (or a stale partial copy is in the way).
        if !done.join(".complete").exists() {
            let _ = std::fs::remove_dir_all(&done);
            std::fs::rename(&scratch, &done).expect("move the install into place");
        } else {
            let _ = std::fs::remove_dir_all(&scratch);
        }
    }
    done
}

/// Like [`installed_once`], but filled where it stays: for a venv, whose scripts name
/// their interpreter by its path. Only one test process installs it (the caller's lock);
/// a half-done copy is removed and done again.
fn installed_in_place(name: &str, install: impl FnOnce(&Path)) -> PathBuf {
    let done = target_dir().join("e2e-deps").join(name);
    if done.join(".complete").exists() {
        return done;
    }
    let _ = std::fs::remove_dir_all(&done);
    std::fs::create_dir_all(&done).expect("create the install dir");
    install(&done);
    std::fs::write(done.join(".complete"), "").expect("mark install complete");
    done
}

/// `npm install --prefix dir PACKAGES`, with a download cache of its own removed after it
/// (the coding agents' packages alone would leave hundreds of megabytes in `~/.npm`).
fn npm_install(dir: &Path, packages: &[&str]) {
    let cache = dir.join(".npm-cache");
    run_install(
        Command::new("npm")
            .args(["install", "--no-audit", "--no-fund", "--loglevel=error"])
            .arg("--prefix")
            .arg(dir)
            .arg("--cache")
            .arg(&cache)
            .args(packages),
        &format!("npm install {}", packages.join(" ")),
    );
    let _ = std::fs::remove_dir_all(&cache);
}

/// A venv in `dir` with `packages` from PyPI.
fn venv_install(dir: &Path, packages: &[&str]) {
    run_install(
        Command::new("python3").args(["-m", "venv"]).arg(dir),
        "python3 -m venv",
    );
    run_install(
        Command::new(dir.join("bin/python"))
            .args(["-m", "pip", "install", "-q", "--disable-pip-version-check"])
            .arg("--no-cache-dir")
            .args(packages),
        &format!("pip install {}", packages.join(" ")),
    );
}

fn run_install(cmd: &mut Command, what: &str) {
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("{what}: {e}"));
    assert!(
        out.status.success(),
        "{what} failed ({}): {}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `tests/fixtures/libs/inquirer.mjs` beside an installed `@inquirer/prompts` (npm
/// registry), ready for `node`. ES modules resolve packages from the script's own
/// directory, so the fixture is copied there.
pub fn inquirer_fixture() -> PathBuf {
    need("npm", "npm");
    static LOCK: Mutex<()> = Mutex::new(());
    let _one = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let dir = installed_once("node", |dir| npm_install(dir, &[INQUIRER]));
    let script = dir.join("inquirer.mjs");
    // Copied only when it changed: a decision binds to the script it was asked by.
    let text = std::fs::read(fixture("libs/inquirer.mjs")).expect("read the inquirer fixture");
    if std::fs::read(&script).ok().as_ref() != Some(&text) {
        let part = dir.join(format!("inquirer.mjs.{}", std::process::id()));
        std::fs::write(&part, &text).expect("copy the inquirer fixture");
        std::fs::rename(&part, &script).expect("copy the inquirer fixture");
    }
    script
}

/// The python of a venv holding questionary, InquirerPy, prompt_toolkit, rich and click
/// (PyPI).
pub fn prompt_libs_python() -> PathBuf {
    static LOCK: Mutex<()> = Mutex::new(());
    let _one = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let dir = installed_once("py-2", |dir| venv_install(dir, PY_LIBS));
    dir.join("bin/python")
}

/// The prompt-library conformance matrix (issue 26; `tests/e2e/matrix.rs`, fixtures in
/// `tests/fixtures/matrix`): pinned versions of every library its fixtures use.
pub mod matrix_deps {
    /// npm package sets, one install directory each, by fixture script
    /// (`tests/fixtures/matrix/js/…`).
    pub const NODE: &[(&str, &[&str])] = &[
        ("inquirer-prompts.mjs", &["@inquirer/prompts@8.8.0"]),
        ("inquirer-legacy.mjs", &["inquirer@9.3.8"]),
        ("enquirer.cjs", &["enquirer@2.4.1"]),
        ("prompts.cjs", &["prompts@2.4.2"]),
        ("clack.mjs", &["@clack/prompts@1.9.0"]),
        (
            "ink-select.mjs",
            &["ink@6.8.0", "ink-select-input@6.2.0", "react@19.2.0"],
        ),
    ];
    /// PyPI, one venv for every Python fixture (`tests/fixtures/matrix/py/…`).
    pub const PYTHON: &[&str] = &[
        "questionary==2.1.1",
        "InquirerPy==0.3.4",
        "prompt_toolkit==3.0.53",
        "click==8.3.1",
        "rich==14.3.4",
        "typer==0.29.2",
        "cleo==2.1.0",
        "beaupy==4.0.1",
    ];
    /// Debian's Go sources (GOPATH mode, offline): the package each library comes from.
    pub const GO: &[(&str, &str, &str)] = &[
        (
            "survey",
            "github.com/AlecAivazis/survey",
            "golang-github-alecaivazis-survey-dev",
        ),
        (
            "promptui",
            "github.com/manifoldco/promptui",
            "golang-github-manifoldco-promptui-dev",
        ),
    ];
    /// Debian's gem for the Ruby fixture: (require name, package).
    pub const RUBY: (&str, &str) = ("tty-prompt", "ruby-tty-prompt");
}

/// A matrix fixture script copied into an install directory of its npm packages
/// (`installed_once`, named after the pinned set, so a new pin is a new directory), ready
/// for `node`: ES modules and `require` both resolve packages from the script's directory.
pub fn matrix_node_fixture(script: &str) -> PathBuf {
    need("npm", "npm");
    let packages = matrix_deps::NODE
        .iter()
        .find(|(s, _)| *s == script)
        .map(|(_, p)| *p)
        .unwrap_or_else(|| panic!("no npm packages pinned for {script}"));
    static LOCK: Mutex<()> = Mutex::new(());
    let _one = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let name = format!("matrix-js-{}", packages.join("+").replace(['/', '@'], "_"));
    let dir = installed_once(&name, |dir| npm_install(dir, packages));
    copy_if_changed(&fixture(&format!("matrix/js/{script}")), &dir.join(script));
    dir.join(script)
}

/// Copies `from` to `to` only when the text differs (a decision binds to the script it was
/// asked by: an unchanged copy keeps its identity between runs).
fn copy_if_changed(from: &Path, to: &Path) {
    let text = std::fs::read(from).unwrap_or_else(|e| panic!("read {}: {e}", from.display()));
    if std::fs::read(to).ok().as_ref() != Some(&text) {
        let part = to.with_extension(format!("part-{}", std::process::id()));
        std::fs::write(&part, &text).unwrap_or_else(|e| panic!("copy {}: {e}", from.display()));
        std::fs::rename(&part, to).unwrap_or_else(|e| panic!("copy {}: {e}", from.display()));
    }
}

/// The python of a venv holding every Python library of the matrix (PyPI, pinned).
pub fn matrix_python() -> PathBuf {
    static LOCK: Mutex<()> = Mutex::new(());
    let _one = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let dir = installed_once("py-matrix-2", |dir| venv_install(dir, matrix_deps::PYTHON));
    dir.join("bin/python")
}

/// `dialoguer-fixture` or `inquire-fixture`: the standalone cargo project
/// `tests/fixtures/matrix/rust` (its own workspace and `Cargo.lock`), built once per test
/// run with `--release --locked` into `target/e2e-deps/matrix-rust` (cargo's own lock
/// keeps two test processes from building it at once).
pub fn matrix_rust_fixture(bin: &str) -> PathBuf {
    static BUILT: Mutex<bool> = Mutex::new(false);
    let mut built = BUILT.lock().unwrap_or_else(|e| e.into_inner());
    let target = target_dir().join("e2e-deps").join("matrix-rust");
    if !*built {
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        run_install(
            Command::new(cargo)
                .args([
                    "build",
                    "--release",
                    "--locked",
                    "--quiet",
                    "--manifest-path",
                ])
                .arg(fixture("matrix/rust/Cargo.toml"))
                .arg("--target-dir")
                .arg(&target)
                // The outer build's settings are not this project's.
                .env_remove("CARGO_TARGET_DIR")
                .env_remove("CARGO_BUILD_TARGET")
                .env_remove("RUSTFLAGS")
                .env_remove("CARGO_ENCODED_RUSTFLAGS"),
            "cargo build --release --locked --manifest-path tests/fixtures/matrix/rust/Cargo.toml",
        );
        *built = true;
    }
    let path = target.join("release").join(bin);
    assert!(path.exists(), "{} was not built", path.display());
    path
}

/// A Go fixture (`tests/fixtures/matrix/go/NAME/*.go`) built once per test run with
/// Debian's `golang-go` from Debian's packaged library sources, offline: GOPATH mode, the
/// files copied into a scratch GOPATH tree with a go.mod, so that Go's minimal module
/// compatibility resolves `…/survey/v2` to Debian's unversioned directory.
pub fn matrix_go_fixture(name: &str) -> PathBuf {
    let go = need("go", "golang-go");
    let (_, source, package) = matrix_deps::GO
        .iter()
        .find(|(n, _, _)| *n == name)
        .unwrap_or_else(|| panic!("no Go library named {name}"));
    let gocode = Path::new("/usr/share/gocode");
    assert!(
        gocode.join("src").join(source).is_dir(),
        "{source} is not installed under {}: apt-get install {package} (as .ci/run does)",
        gocode.display()
    );
    static BUILT: Mutex<Vec<String>> = Mutex::new(Vec::new());
    let mut built = BUILT.lock().unwrap_or_else(|e| e.into_inner());
    let dir = target_dir().join("e2e-deps").join("matrix-go");
    let out = dir.join(name);
    if !built.iter().any(|b| b == name) {
        let scratch = dir.join(format!("gopath-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&scratch);
        let pkg = scratch.join("src/matrix").join(name);
        std::fs::create_dir_all(&pkg).expect("scratch GOPATH");
        let from = fixture(&format!("matrix/go/{name}"));
        let entries = std::fs::read_dir(&from)
            .unwrap_or_else(|e| panic!("the Go fixture {}: {e}", from.display()));
        for entry in entries.flatten() {
            let file = entry.path();
            if file.extension().is_some_and(|e| e == "go") {
                std::fs::copy(&file, pkg.join(entry.file_name())).expect("copy a Go file");
            }
        }
        std::fs::write(pkg.join("go.mod"), format!("module matrix/{name}\n")).unwrap();
        let part = dir.join(format!("{name}.part-{}", std::process::id()));
        let mut gopath = scratch.clone().into_os_string();
        gopath.push(":");
        gopath.push(gocode);
        run_install(
            Command::new(go)
                .args(["build", "-o"])
                .arg(&part)
                .arg(".")
                .current_dir(&pkg)
                .env("GOPATH", gopath)
                .env("GO111MODULE", "off")
                .env("GOFLAGS", "")
                .env("GOPROXY", "off")
                .env("GOTOOLCHAIN", "local")
                .env("GOCACHE", dir.join("cache")),
            &format!("go build tests/fixtures/matrix/go/{name}"),
        );
        std::fs::rename(&part, &out).expect("move the Go fixture into place");
        let _ = std::fs::remove_dir_all(&scratch);
        built.push(name.to_owned());
    }
    out
}

/// `ruby`, with Debian's tty-prompt gem loadable.
pub fn matrix_ruby() -> PathBuf {
    let ruby = need("ruby", "ruby");
    let (gem, package) = matrix_deps::RUBY;
    let loads = Command::new(&ruby)
        .args(["-e", &format!("require '{gem}'")])
        .stdin(Stdio::null())
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(
        loads,
        "ruby cannot load {gem}: apt-get install {package} (as .ci/run does)"
    );
    ruby
}

/// The pending approval other than `id` that shows up within 20 s (the next prompt of a
/// tool kept running in wait mode).
pub fn wait_for_pending_other_than(env: &TestEnv, id: &str) -> Map<String, Value> {
    let mut found = None;
    let seen = wait_for_state(Duration::from_secs(20), || {
        found = env
            .approvals()
            .into_iter()
            .find(|a| a["status"] == "pending" && s(a, "approval_id") != id);
        found.is_some()
    });
    assert!(seen, "no second approval: {:#?}", env.approvals());
    found.unwrap()
}

pub trait WaitMode {
    fn spawn_wait_mode(&mut self) -> Running;
}

impl WaitMode for Cmd {
    /// Runs with `HEADLESS_RUN_ON_PROMPT=wait`: kept at each prompt until it is decided.
    fn spawn_wait_mode(&mut self) -> Running {
        self.env("HEADLESS_RUN_ON_PROMPT", "wait").spawn()
    }
}

/// Pinned versions of the coding agents the tests drive (issue 16), from npm and PyPI.
const NPM_AGENTS: &[&str] = &[
    "@openai/codex@0.169.0",
    "@anthropic-ai/claude-code@2.1.330",
    "@google/gemini-cli@0.61.0",
    "@qwen-code/qwen-code@0.24.4",
    "opencode-ai@1.18.33",
    "@github/copilot@1.0.102",
];
const AIDER: &str = "aider-chat==0.86.2";

/// The `node_modules/.bin` holding `codex`, `claude`, `gemini`, `qwen`, `opencode` and
/// `copilot` (npm registry).
pub fn npm_agents_bin() -> PathBuf {
    need("npm", "npm");
    static LOCK: Mutex<()> = Mutex::new(());
    let _one = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let dir = installed_once("agents-2", |dir| {
        npm_install(dir, NPM_AGENTS);
    });
    dir.join("node_modules/.bin")
}

/// The `bin` of a venv holding aider (PyPI).
pub fn aider_bin() -> PathBuf {
    static LOCK: Mutex<()> = Mutex::new(());
    let _one = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let dir = installed_in_place("aider-1", |dir| venv_install(dir, &[AIDER]));
    dir.join("bin")
}

/// IPython (PyPI), pinned: a REPL that asks `Do you really want to exit ([y]/n)?` at EOF.
const IPYTHON: &str = "ipython==9.18.1";

/// The `bin` of a venv holding IPython (PyPI).
pub fn ipython_bin() -> PathBuf {
    static LOCK: Mutex<()> = Mutex::new(());
    let _one = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let dir = installed_in_place("ipython-1", |dir| venv_install(dir, &[IPYTHON]));
    dir.join("bin")
}

/// The browser driver of the web page's test (npm), pinned.
const PLAYWRIGHT: &str = "playwright-core@1.65.1";

/// A directory holding `node_modules/playwright-core` (npm registry; it drives the
/// system's Chromium, it brings no browser).
pub fn playwright_dir() -> PathBuf {
    need("npm", "npm");
    installed_once("playwright-1", |dir| npm_install(dir, &[PLAYWRIGHT]))
}

/// The Chromium binary (Debian's `chromium`; its `/usr/bin` wrapper script is skipped).
pub fn chromium_bin() -> PathBuf {
    let real = PathBuf::from("/usr/lib/chromium/chromium");
    if real.exists() {
        return real;
    }
    need("chromium", "chromium")
}

/// A minimal Debian root (debootstrap's minbase, with systemd, and curl and sudo as a CI
/// runner's image has them), made once and kept: what the package's and the CI examples'
/// tests copy and install the .deb into. Needs root and Debian's mirror.
pub fn debian_root() -> PathBuf {
    static LOCK: Mutex<()> = Mutex::new(());
    let _one = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    need("debootstrap", "debootstrap");
    installed_in_place("debian-root-2", |dir| {
        run_install(
            Command::new("debootstrap")
                .args([
                    "--variant=minbase",
                    "--include=systemd,curl,ca-certificates,sudo",
                    "bookworm",
                ])
                .arg(dir)
                .arg("http://deb.debian.org/debian"),
            "debootstrap --variant=minbase --include=systemd,curl,ca-certificates,sudo bookworm",
        )
    })
}

/// Runs `argv` inside `root` (a copy of [`debian_root`]) with exactly `vars` for its
/// environment, `/proc` and `/dev` mounted for it in a mount namespace of its own: nothing
/// is ever mounted in the host's namespace, so removing `root` cannot reach the host's
/// `/dev`.
pub fn chrooted(env: &TestEnv, root: &Path, vars: &[(String, String)], argv: &[&str]) -> Outcome {
    let mut cmd = env.command("unshare");
    cmd.args(["--mount", "--propagation", "private", "--pid", "--fork"])
        .args([
            "sh",
            "-c",
            "root=$1; shift; mount -t proc proc \"$root/proc\" && \
             mount --rbind /dev \"$root/dev\" && exec chroot \"$root\" /usr/bin/env -i \"$@\"",
            "sh",
        ])
        .arg(root);
    for (k, v) in vars {
        cmd.arg(format!("{k}={v}"));
    }
    cmd.args(argv).timeout(Duration::from_secs(300)).run()
}

/// The SMTP server the e-mail test mails (PyPI), pinned.
const AIOSMTPD: &str = "aiosmtpd==1.4.6";

/// The `python` of a venv holding aiosmtpd.
pub fn aiosmtpd_python() -> PathBuf {
    static LOCK: Mutex<()> = Mutex::new(());
    let _one = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let dir = installed_in_place("aiosmtpd-1", |dir| venv_install(dir, &[AIOSMTPD]));
    dir.join("bin/python")
}

/// The API fuzzer the server's tests run (PyPI), pinned.
const SCHEMATHESIS: &str = "schemathesis==4.32.5";

/// The `bin` of a venv holding schemathesis (`st`).
pub fn schemathesis_bin() -> PathBuf {
    static LOCK: Mutex<()> = Mutex::new(());
    let _one = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let dir = installed_in_place("schemathesis-1", |dir| venv_install(dir, &[SCHEMATHESIS]));
    dir.join("bin")
}

/// Processes whose environment holds `HOME=home`: what is left of a tool given that home,
/// daemons that left its session included.
pub fn processes_with_home(home: &Path) -> Vec<i32> {
    let needle = format!("HOME={}\0", home.display()).into_bytes();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/environ"))
                .is_ok_and(|env| env.windows(needle.len()).any(|w| w == needle.as_slice()))
        })
        .collect()
}
