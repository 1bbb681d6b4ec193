//! Realistic rows written straight into the database, for tests of the monitor that must
//! not depend on the shim producing them (a run parked on an approval, a decided approval,
//! a run whose shim is gone). The schema is the real one: the shim creates it first.
//!
//! `Run::parked` and `Approval::pending` are the builders: a test changes the fields it
//! cares about and inserts. Seeding writes the database file (no command inserts a run or
//! an approval as given); reading back goes through the monitor (`run_row`, `approval_row`,
//! `resumes_of`).

use headless_run_e2e::*;
use rusqlite::params;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

const CROCKFORD: &[u8; 32] = b"0123456789ABCDEFGHJKMNPQRSTVWXYZ";

/// A fresh id of the real shape (`TR-` + 26 Crockford characters), sortable by creation.
pub fn new_id(prefix: &str) -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let millis = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0);
    let low = (u128::from(std::process::id()) << 40)
        | u128::from(COUNTER.fetch_add(1, Ordering::SeqCst))
        | (u128::from(
            SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map(|d| d.subsec_nanos())
                .unwrap_or(0),
        ) << 20);
    let value: u128 = (u128::from(millis & ((1 << 48) - 1)) << 80) | (low & ((1 << 80) - 1));
    let body: String = (0..26)
        .map(|i| CROCKFORD[((value >> (5 * (25 - i))) & 0x1f) as usize] as char)
        .collect();
    format!("{prefix}{body}")
}

/// A time as the store writes it: RFC 3339 UTC with milliseconds.
pub fn rfc3339(t: SystemTime) -> String {
    let d = t.duration_since(UNIX_EPOCH).unwrap_or_default();
    let secs = d.as_secs() as i64;
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3600,
        (rem % 3600) / 60,
        rem % 60,
        d.subsec_millis()
    )
}

/// Now, as stored.
pub fn now() -> String {
    rfc3339(SystemTime::now())
}

/// `d` ago, as stored.
pub fn ago(d: Duration) -> String {
    rfc3339(SystemTime::now() - d)
}

/// `d` from now, as stored.
pub fn from_now(d: Duration) -> String {
    rfc3339(SystemTime::now() + d)
}

/// Creates the state dir and database with the real schema by running the real shim once.
pub fn ensure_db(env: &TestEnv) {
    if !env.state().join("state.db").exists() {
        env.shim().arg("true").run().expect_code(0);
    }
}

/// The host name, as the shim records it.
pub fn hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: buf is writable for its length.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    assert_eq!(rc, 0);
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).into_owned()
}

/// The OS user of this process, by real uid (what `decided_by` must say).
pub fn user_name() -> String {
    // SAFETY: getuid cannot fail.
    let uid = unsafe { libc::getuid() };
    std::fs::read_to_string("/etc/passwd")
        .unwrap_or_default()
        .lines()
        .find_map(|l| {
            let f: Vec<&str> = l.split(':').collect();
            (f.len() > 2 && f[2] == uid.to_string()).then(|| f[0].to_owned())
        })
        .unwrap_or_else(|| format!("uid:{uid}"))
}

/// The start time (clock ticks after boot) of a process, from `/proc/PID/stat`.
pub fn start_time(pid: i32) -> i64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("stat");
    let rest = &stat[stat.rfind(')').expect(")") + 1..];
    rest.split_whitespace()
        .nth(19)
        .expect("field")
        .parse()
        .expect("number")
}

/// A run row.
#[derive(Debug, Clone)]
pub struct Run {
    pub id: String,
    pub tool: String,
    pub execution_id: String,
    pub status: String,
    pub reason: Option<String>,
    pub exit_code: Option<i64>,
    pub started_at: String,
    pub completed_at: Option<String>,
    pub supervisor_heartbeat_at: Option<String>,
    pub shim_pid: Option<i64>,
    pub shim_start_time: Option<i64>,
    pub host: String,
    pub argv: Vec<String>,
    pub cwd: String,
}

impl Run {
    /// A run parked on an approval by a shim that exited 90 on purpose.
    pub fn parked(env: &TestEnv, argv: &[&str]) -> Run {
        let tool = std::path::Path::new(argv[0])
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        Run {
            id: new_id("TR-"),
            tool,
            execution_id: new_id("EX-"),
            status: "waiting_approval".into(),
            reason: Some("waiting for approval".into()),
            exit_code: Some(90),
            started_at: ago(Duration::from_secs(5)),
            completed_at: None,
            supervisor_heartbeat_at: Some(ago(Duration::from_secs(5))),
            // A pid that cannot be running.
            shim_pid: Some(i64::from(i32::MAX - 11)),
            shim_start_time: Some(1),
            host: hostname(),
            argv: argv.iter().map(|s| s.to_string()).collect(),
            cwd: env.work().to_string_lossy().into_owned(),
        }
    }

    /// Writes the row into the database file (seeding: no command inserts a run as given).
    pub fn insert(&self, env: &TestEnv) {
        ensure_db(env);
        self.insert_into(&env.raw_db());
    }

    /// Writes the row through `conn` (a transaction, for many rows at once).
    pub fn insert_into(&self, conn: &rusqlite::Connection) {
        conn.execute(
            "INSERT INTO tool_runs (tool_run_id, tool_name, execution_id, status, reason,
                exit_code, started_at, completed_at, supervisor_heartbeat_at, pid, shim_pid,
                shim_start_time, host, argv_json, cwd, updated_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, NULL, ?10, ?11, ?12, ?13, ?14, ?15)",
            params![
                self.id,
                self.tool,
                self.execution_id,
                self.status,
                self.reason,
                self.exit_code,
                self.started_at,
                self.completed_at,
                self.supervisor_heartbeat_at,
                self.shim_pid,
                self.shim_start_time,
                self.host,
                serde_json::to_string(&self.argv).unwrap(),
                self.cwd,
                self.completed_at.clone().unwrap_or_else(now),
            ],
        )
        .expect("insert run");
    }
}

/// An approval row.
#[derive(Debug, Clone)]
pub struct Approval {
    pub id: String,
    pub run: String,
    pub tool: String,
    pub question: String,
    pub context: Option<String>,
    /// (value, label)
    pub options: Vec<(String, String)>,
    pub default_value: Option<String>,
    pub status: String,
    pub chosen_value: Option<String>,
    pub decided_by: Option<String>,
    pub expires_at: Option<String>,
    pub expire_action: String,
    pub prompt_fingerprint: Option<String>,
    pub claimed_by: Option<String>,
    pub claimed_at: Option<String>,
}

impl Approval {
    /// A pending yes/no question of `run`.
    pub fn pending(run: &Run, question: &str) -> Approval {
        Approval {
            id: new_id("AP-"),
            run: run.id.clone(),
            tool: run.tool.clone(),
            question: question.into(),
            context: Some(format!("some output\n{question}")),
            options: vec![("yes".into(), "Yes".into()), ("no".into(), "No".into())],
            default_value: Some("no".into()),
            status: "pending".into(),
            chosen_value: None,
            decided_by: None,
            expires_at: Some(from_now(Duration::from_secs(3600))),
            expire_action: "reject".into(),
            prompt_fingerprint: Some(format!("fp-{question}")),
            claimed_by: None,
            claimed_at: None,
        }
    }

    /// Writes the row into the database file (seeding: no command inserts an approval as
    /// given).
    pub fn insert(&self, env: &TestEnv) {
        ensure_db(env);
        let options: Vec<serde_json::Value> = self
            .options
            .iter()
            .map(|(v, l)| serde_json::json!({"value": v, "label": l}))
            .collect();
        let decided = self.status != "pending";
        env.raw_db()
            .execute(
                "INSERT INTO approvals (approval_id, tool_run_id, tool_name, question, context,
                    options_json, default_value, allows_text, status, chosen_value, created_at,
                    decided_at, expires_at, decided_by, decision_channel, request_fingerprint,
                    prompt_fingerprint, prompt_kind, prompt_line, expire_action, claimed_by,
                    claimed_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, 0, ?8, ?9, ?10, ?11, ?12, ?13, ?14,
                    'req-fp', ?15, 'choice', ?4, ?16, ?17, ?18)",
                params![
                    self.id,
                    self.run,
                    self.tool,
                    self.question,
                    self.context,
                    serde_json::Value::from(options).to_string(),
                    self.default_value,
                    self.status,
                    self.chosen_value,
                    ago(Duration::from_secs(4)),
                    decided.then(now),
                    self.expires_at,
                    self.decided_by,
                    decided.then_some("cli"),
                    self.prompt_fingerprint,
                    self.expire_action,
                    self.claimed_by,
                    self.claimed_at,
                ],
            )
            .expect("insert approval");
    }
}

/// The run `id`, as `monitor show` has it (its columns).
pub fn run_row(env: &TestEnv, id: &str) -> serde_json::Map<String, serde_json::Value> {
    env.run_by_id(id)
}

/// The approval `id`, as `monitor show` has it (its columns).
pub fn approval_row(env: &TestEnv, id: &str) -> serde_json::Map<String, serde_json::Value> {
    env.approval_by_id(id)
}

/// The runs started as resumes of `id`, oldest first.
pub fn resumes_of(env: &TestEnv, id: &str) -> Vec<serde_json::Map<String, serde_json::Value>> {
    env.runs()
        .into_iter()
        .filter(|r| r["resumed_from"] == id)
        .collect()
}
