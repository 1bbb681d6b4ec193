//! The PostgreSQL store: many hosts and users on one server, with the server's roles as the
//! trust boundary (`HEADLESS_RUN_DB=postgres://…`).
//!
//! Nobody writes a table directly. A shim's login (role `headless_runner`) starts its run
//! through `hr.run_start`, which hands back a capability for that one run, and every later
//! write of the run shows it; approvals it asks are pending, of its own run, whatever it
//! sends. An operator's login (`headless_operator`) decides and cancels through functions
//! that record `session_user`, never a name the client sends. The audit chain is appended
//! only inside those functions and refuses updates and deletes. The schema, roles and
//! functions are created by `monitor db init` ([`init`]).
//!
//! The rules that need no trust (does a decision fit this screen, this tool?) stay in Rust,
//! shared with the SQLite store; the ones that do (whose run, which decisions it may use,
//! who decided) are checked again by the server.

use super::asking::{approval_for, changed_context};
use super::{
    Asker, Cooperative, Counts, Done, Effects, OperatorStore, PromptRequest, PromptResolution,
    Recorded, RememberScope, Replace, RunWrite, RunnerStore, StoreError, StoreHealth, StoreResult,
};
use crate::approvals::{self, Approval, ApprovalFilter, DecideOutcome, Decider, ValueDecision};
use crate::audit::{self, AuditRow, ChainReport};
use crate::config::OnExpire;
use crate::control::{CancelOutcome, ReconcileReport};
use crate::event::{CooperativeRequest, EventBody, LogEvent};
use crate::gc::GcReport;
use crate::paths::StatePaths;
use crate::policy::RememberedPolicy;
use crate::resume::ParkedRun;
use crate::rules::{self, HostFacts};
use crate::runs::{RunFilter, StatusChange, ToolRun};
use crate::status::{ApprovalStatus, RunStatus};
use crate::{fingerprint, time};
use postgres::types::ToSql;
use postgres::{Client, NoTls};
use std::collections::BTreeMap;
use std::io::Write;
use std::str::FromStr;
use std::sync::Mutex;
use std::time::Duration;

/// The schema version this build writes and understands.
pub const SCHEMA_VERSION: i64 = 1;

/// The schema, as an append-only list: entry N brings a database from version N to N+1.
const MIGRATIONS: &[&str] = &[include_str!("pg/v1.sql")];

/// The three roles, and what `monitor db grant` calls them.
pub const ROLES: [(&str, &str); 3] = [
    ("runner", "headless_runner"),
    ("operator", "headless_operator"),
    ("viewer", "headless_viewer"),
];

/// Whether a store URL names the PostgreSQL store.
pub fn is_url(s: &str) -> bool {
    s.starts_with("postgres://") || s.starts_with("postgresql://")
}

/// A URL as it may be shown: any password in it replaced by `***`.
pub fn without_password(url: &str) -> String {
    let mut out = url.to_owned();
    if let Some(scheme_end) = out.find("://") {
        let rest = scheme_end + 3;
        let authority_end = out[rest..].find(['/', '?']).map_or(out.len(), |i| rest + i);
        if let Some(at) = out[rest..authority_end].rfind('@').map(|i| rest + i)
            && let Some(colon) = out[rest..at].find(':').map(|i| rest + i)
        {
            out.replace_range(colon + 1..at, "***");
        }
    }
    if let Some(q) = out.find('?') {
        let (base, query) = out.split_at(q + 1);
        let query: Vec<String> = query
            .split('&')
            .map(|kv| match kv.split_once('=') {
                Some((k, _)) if k.eq_ignore_ascii_case("password") => format!("{k}=***"),
                _ => kv.to_owned(),
            })
            .collect();
        out = format!("{base}{}", query.join("&"));
    }
    out
}

/// Connection settings from a URL, with the libpq variables it leaves out (`PGUSER`,
/// `PGPASSWORD`, `PGHOST`, `PGPORT`, `PGDATABASE`, `PGCONNECT_TIMEOUT`).
pub fn config(url: &str) -> StoreResult<postgres::Config> {
    let mut c = postgres::Config::from_str(url)
        .map_err(|e| StoreError::Server(format!("not a usable PostgreSQL URL: {e}")))?;
    let var = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
    if c.get_user().is_none() {
        c.user(&var("PGUSER").unwrap_or_else(crate::proc::current_user));
    }
    if c.get_password().is_none()
        && let Some(p) = var("PGPASSWORD")
    {
        c.password(p);
    }
    if c.get_hosts().is_empty() {
        c.host(&var("PGHOST").unwrap_or_else(|| "/var/run/postgresql".into()));
    }
    if c.get_ports().is_empty()
        && let Some(p) = var("PGPORT").and_then(|p| p.parse().ok())
    {
        c.port(p);
    }
    if c.get_dbname().is_none()
        && let Some(d) = var("PGDATABASE")
    {
        c.dbname(&d);
    }
    if c.get_connect_timeout().is_none() {
        let secs = var("PGCONNECT_TIMEOUT")
            .and_then(|s| s.parse().ok())
            .unwrap_or(5);
        c.connect_timeout(Duration::from_secs(secs));
    }
    c.application_name("headless-run");
    Ok(c)
}

fn server_error(e: postgres::Error) -> StoreError {
    use postgres::error::SqlState;
    match e.as_db_error() {
        Some(db) if *db.code() == SqlState::INSUFFICIENT_PRIVILEGE => {
            StoreError::Denied(db.message().to_owned())
        }
        Some(db) => StoreError::Server(db.message().to_owned()),
        None => StoreError::Server(e.to_string()),
    }
}

fn from_json<T: serde::de::DeserializeOwned>(text: &str) -> StoreResult<T> {
    serde_json::from_str(text).map_err(|e| StoreError::Server(format!("unreadable row: {e}")))
}

fn to_json<T: serde::Serialize>(v: &T) -> String {
    serde_json::to_string(v).unwrap_or_else(|_| "null".into())
}

/// The capabilities of the runs this process started: a wait-mode watcher's second
/// session of the same run shows the same one. Never written anywhere.
static CAPABILITIES: Mutex<BTreeMap<String, String>> = Mutex::new(BTreeMap::new());

fn capability(run_id: &str) -> String {
    CAPABILITIES
        .lock()
        .map(|m| m.get(run_id).cloned().unwrap_or_default())
        .unwrap_or_default()
}

/// How long a connection refused for want of slots (`max_connections`) is tried again.
const SLOTS_PATIENCE: Duration = Duration::from_secs(20);

/// Connects; a server out of connection slots is tried again, with growing, jittered
/// pauses, for up to [`SLOTS_PATIENCE`]: shims hold a connection only while they write,
/// so a slot frees within milliseconds.
fn connect(config: &postgres::Config) -> Result<Client, postgres::Error> {
    use postgres::error::SqlState;
    let deadline = std::time::Instant::now() + SLOTS_PATIENCE;
    let mut pause = Duration::from_millis(5);
    loop {
        match config.connect(NoTls) {
            Err(e)
                if e.code() == Some(&SqlState::TOO_MANY_CONNECTIONS)
                    && std::time::Instant::now() < deadline =>
            {
                let nanos = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map(|d| d.subsec_nanos())
                    .unwrap_or(0);
                let jitter = u64::from(nanos ^ std::process::id()) % (pause.as_millis() as u64 + 1);
                std::thread::sleep(pause + Duration::from_millis(jitter));
                pause = (pause * 2).min(Duration::from_millis(250));
            }
            other => return other,
        }
    }
}

/// How long a runner's connection may sit idle before the server closes it: a shim holds
/// a connection only while it writes, not for its whole run (see ARCHITECTURE.md).
const RUNNER_IDLE: &str = "-c idle_session_timeout=2000";

/// One session on the server: connected on first use and again after an error.
pub struct PgStore {
    /// The settings, or why there are none (every call reports it).
    config: Result<postgres::Config, String>,
    client: Option<Client>,
}

impl PgStore {
    /// A session on the server of `url` (every call reports it when `url` is no usable
    /// URL).
    pub fn new(url: &str) -> Self {
        PgStore {
            config: config(url).map_err(|e| e.to_string()),
            client: None,
        }
    }

    fn client(&mut self) -> StoreResult<&mut Client> {
        if self.client.as_ref().is_some_and(|c| c.is_closed()) {
            self.client = None;
        }
        if self.client.is_none() {
            let config = self
                .config
                .as_ref()
                .map_err(|e| StoreError::Server(e.clone()))?;
            self.client = Some(connect(config).map_err(server_error)?);
        }
        Ok(self.client.as_mut().expect("connected above"))
    }

    /// Runs `f` in one transaction. A connection the server closed while it sat idle
    /// (a runner's `idle_session_timeout`, a server restart) fails at `BEGIN`, before
    /// anything ran: it is opened again once. Any other failed connection is dropped for the next call.
    fn tx<T>(
        &mut self,
        mut f: impl FnMut(&mut postgres::Transaction<'_>) -> Result<T, postgres::Error>,
    ) -> StoreResult<T> {
        let mut reopened = false;
        loop {
            let attempt: Result<StoreResult<T>, postgres::Error> =
                match self.client()?.transaction() {
                    Ok(mut tx) => Ok(f(&mut tx)
                        .and_then(|v| tx.commit().map(|()| v))
                        .map_err(server_error)),
                    Err(e) => Err(e),
                };
            match attempt {
                Ok(out) => {
                    if out.is_err() && self.client.as_ref().is_some_and(|c| c.is_closed()) {
                        self.client = None;
                    }
                    return out;
                }
                // Nothing ran: the server's goodbye (idle_session_timeout, a restart) or a
                // closed socket. Once more on a new connection.
                Err(e) => {
                    self.client = None;
                    if !reopened {
                        reopened = true;
                        continue;
                    }
                    return Err(server_error(e));
                }
            }
        }
    }

    /// Rows of one text column (JSON documents), parsed.
    fn docs<T: serde::de::DeserializeOwned>(
        &mut self,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> StoreResult<Vec<T>> {
        let rows = self.tx(|tx| tx.query(sql, params))?;
        rows.iter()
            .map(|r| from_json(r.get::<_, &str>(0)))
            .collect()
    }

    fn doc<T: serde::de::DeserializeOwned>(
        &mut self,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> StoreResult<Option<T>> {
        let row = self.tx(|tx| tx.query_opt(sql, params))?;
        match row.and_then(|r| r.get::<_, Option<String>>(0)) {
            Some(text) => from_json(&text).map(Some),
            None => Ok(None),
        }
    }
}

// ------------------------------------------------------------------------------------------
// The doorbell: LISTEN on the server, a byte down a pipe per notification.

/// A doorbell for the server of `url`: a thread holds one connection that `LISTEN`s on
/// `headless_run` and rings on every notification, and once after each (re)connect (what
/// happened while it was not listening). A lost connection is retried every second; the
/// waiter's own poll covers the gap. `None` when no pipe or thread can be made.
pub fn listen(url: &str) -> Option<super::doorbell::Doorbell> {
    use std::os::fd::{FromRawFd, OwnedFd};
    let config = config(url).ok()?;
    let mut fds = [0; 2];
    // SAFETY: fds has room for the two descriptors pipe2 writes.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_NONBLOCK | libc::O_CLOEXEC) } != 0 {
        return None;
    }
    // SAFETY: both are fresh descriptors nobody else owns.
    let (read_end, write_end) =
        unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    std::thread::Builder::new()
        .name("pg-listen".into())
        .spawn(move || listen_loop(&config, &write_end))
        .ok()?;
    Some(super::doorbell::Doorbell::from_pipe(read_end))
}

fn listen_loop(config: &postgres::Config, bell: &std::os::fd::OwnedFd) {
    use postgres::fallible_iterator::FallibleIterator;
    loop {
        if let Ok(mut client) = config.connect(NoTls)
            && client.batch_execute("LISTEN headless_run").is_ok()
        {
            if !ring(bell) {
                return;
            }
            let mut notes = client.notifications();
            let mut iter = notes.blocking_iter();
            while let Ok(Some(_)) = iter.next() {
                if !ring(bell) {
                    return;
                }
            }
        }
        if !ring(bell) {
            return;
        }
        std::thread::sleep(Duration::from_secs(1));
    }
}

/// One byte down the pipe; false once nobody reads it any more.
fn ring(bell: &std::os::fd::OwnedFd) -> bool {
    use std::os::fd::AsRawFd;
    // SAFETY: one readable byte from a valid buffer to a descriptor we own.
    let n = unsafe { libc::write(bell.as_raw_fd(), b"!".as_ptr().cast(), 1) };
    n == 1 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EAGAIN)
}

// ------------------------------------------------------------------------------------------
// `monitor db init` and `monitor db grant`.

/// What `db init` did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InitReport {
    pub from_version: i64,
    pub to_version: i64,
}

/// Creates or migrates the schema, the three roles and their grants; safe to run twice and
/// from two hosts at once (one transaction under an advisory lock). Needs a login that may
/// create roles and owns (or will own) the schema.
pub fn init(url: &str) -> StoreResult<InitReport> {
    let mut client = config(url)?.connect(NoTls).map_err(server_error)?;
    let mut tx = client.transaction().map_err(server_error)?;
    let report = (|| -> Result<InitReport, postgres::Error> {
        tx.execute(
            "SELECT pg_advisory_xact_lock(hashtext('headless-run schema'))",
            &[],
        )?;
        tx.batch_execute(
            "CREATE SCHEMA IF NOT EXISTS hr;
             CREATE TABLE IF NOT EXISTS hr.schema_version (version bigint NOT NULL);",
        )?;
        let from: i64 = tx
            .query_opt("SELECT version FROM hr.schema_version", &[])?
            .map(|r| r.get(0))
            .unwrap_or(0);
        for (i, sql) in MIGRATIONS.iter().enumerate().skip(from.max(0) as usize) {
            tx.batch_execute(sql)?;
            let v = i as i64 + 1;
            tx.execute("DELETE FROM hr.schema_version", &[])?;
            tx.execute("INSERT INTO hr.schema_version VALUES ($1)", &[&v])?;
        }
        tx.batch_execute(GRANTS)?;
        Ok(InitReport {
            from_version: from,
            to_version: from.max(MIGRATIONS.len() as i64),
        })
    })()
    .map_err(server_error)?;
    if report.from_version > SCHEMA_VERSION {
        return Err(StoreError::Server(format!(
            "schema version {} is newer than this build understands ({SCHEMA_VERSION}); upgrade headless-run",
            report.from_version
        )));
    }
    tx.commit().map_err(server_error)?;
    Ok(report)
}

/// Roles and grants, applied on every `db init` (each statement may run again).
const GRANTS: &str = r#"
DO $$
DECLARE
    r text;
BEGIN
    FOREACH r IN ARRAY ARRAY['headless_runner', 'headless_operator', 'headless_viewer'] LOOP
        IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = r) THEN
            BEGIN
                EXECUTE format('CREATE ROLE %I NOLOGIN', r);
            EXCEPTION WHEN duplicate_object OR unique_violation THEN
                NULL; -- another host created it first
            END;
        END IF;
    END LOOP;
END $$;
REVOKE ALL ON SCHEMA hr FROM PUBLIC;
REVOKE ALL ON ALL TABLES IN SCHEMA hr FROM PUBLIC, headless_runner, headless_operator, headless_viewer;
REVOKE ALL ON ALL FUNCTIONS IN SCHEMA hr FROM PUBLIC, headless_runner, headless_operator, headless_viewer;
GRANT USAGE ON SCHEMA hr TO headless_runner, headless_operator, headless_viewer;
GRANT SELECT ON hr.tool_runs, hr.approvals, hr.events, hr.schema_version
    TO headless_operator, headless_viewer;
GRANT EXECUTE ON FUNCTION hr.change_mark() TO headless_runner, headless_operator, headless_viewer;
GRANT EXECUTE ON FUNCTION hr.expire_due() TO headless_runner, headless_operator;
GRANT EXECUTE ON FUNCTION
    hr.run_start(jsonb, text),
    hr.run_deliver(jsonb, text),
    hr.run_touch(text, text, text, text, text),
    hr.run_pid(text, text, bigint),
    hr.run_status(text, text, text, text, integer, boolean, text, text, text),
    hr.run_exit(text, text, integer, text),
    hr.run_environment(text, text, jsonb),
    hr.runner_approvals(text, text, text),
    hr.runner_approval(text, text, text),
    hr.approval_ask(text, text, jsonb),
    hr.approval_by_policy(text, text, jsonb, text, text, text),
    hr.approval_consume(text, text, text),
    hr.approval_take_over(text, text, text, jsonb),
    hr.approval_release(text, text, text, text),
    hr.approval_abandon(text, text, text)
    TO headless_runner;
GRANT EXECUTE ON FUNCTION hr.decide(text, text, text, text, text), hr.cancel(text, text)
    TO headless_operator;
"#;

/// Makes `user` (an existing login) a member of one of the three roles. A login that
/// runs tools may not also decide: runner and operator are refused on one login.
pub fn grant(url: &str, user: &str, role: &str) -> StoreResult<String> {
    let Some((_, pg_role)) = ROLES.iter().find(|(name, _)| *name == role) else {
        return Err(StoreError::Server(format!(
            "no role `{role}` (runner, operator or viewer)"
        )));
    };
    let mut client = config(url)?.connect(NoTls).map_err(server_error)?;
    let member_of = |client: &mut Client, r: &str| -> StoreResult<bool> {
        client
            .query_one("SELECT pg_has_role($1, $2, 'MEMBER')", &[&user, &r])
            .map(|row| row.get(0))
            .map_err(server_error)
    };
    let exists: bool = client
        .query_one(
            "SELECT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = $1)",
            &[&user],
        )
        .map_err(server_error)?
        .get(0);
    if !exists {
        return Err(StoreError::Server(format!(
            "no login `{user}` on the server: create it first (CREATE ROLE \"{user}\" LOGIN PASSWORD …, or one for peer or certificate authentication)"
        )));
    }
    let clash = match *pg_role {
        "headless_runner" => Some("headless_operator"),
        "headless_operator" => Some("headless_runner"),
        _ => None,
    };
    if let Some(other) = clash
        && member_of(&mut client, other)?
    {
        return Err(StoreError::Denied(format!(
            "`{user}` is already a member of {other}: a login that runs tools must not also decide for them; use two logins"
        )));
    }
    // Quoted as an identifier by the server, never pasted from the client.
    let quoted: String = client
        .query_one("SELECT quote_ident($1)", &[&user])
        .map_err(server_error)?
        .get(0);
    client
        .batch_execute(&format!("GRANT {pg_role} TO {quoted}"))
        .map_err(server_error)?;
    Ok(pg_role.to_string())
}

// ------------------------------------------------------------------------------------------
// The runner.

/// A shim's session: the functions of `headless_runner`, for its one run.
pub struct PgRunner {
    pg: PgStore,
    /// The host's state dir, whose spool holds final rows earlier shims could not write.
    paths: StatePaths,
    /// The spool was delivered on this session's first connection.
    delivered: bool,
}

impl PgRunner {
    pub fn new(url: &str, paths: &StatePaths) -> Self {
        let mut pg = PgStore::new(url);
        if let Ok(c) = &mut pg.config {
            c.options(RUNNER_IDLE);
        }
        PgRunner {
            pg,
            paths: paths.clone(),
            delivered: false,
        }
    }

    /// Delivers the spooled final rows of earlier runs of this host (their shims could not
    /// reach the server before they exited); each file goes once its row has landed, or
    /// when the server says it is not this login's to deliver.
    fn deliver_spool(&mut self) -> StoreResult<usize> {
        let mut n = 0;
        for (path, run) in crate::spool::spooled(&self.paths) {
            let fp = fingerprint::request(
                &run.tool_name,
                &run.argv_json,
                run.cwd.as_deref().unwrap_or(""),
            );
            match self.pg.tx(|tx| {
                tx.query_one(
                    "SELECT hr.run_deliver($1::text::jsonb, $2)",
                    &[&to_json(&run), &fp],
                )
            }) {
                Ok(row) => {
                    n += usize::from(row.get::<_, bool>(0));
                    let _ = std::fs::remove_file(&path);
                }
                Err(StoreError::Denied(_)) => {
                    let _ = std::fs::remove_file(&path);
                }
                Err(e) => return Err(e),
            }
        }
        Ok(n)
    }
}

/// The server's guard for a status change by the shim.
fn guard_name(replace: Replace) -> &'static str {
    match replace {
        Replace::Live => "not_final",
        Replace::AnyButCancelled => "not_cancelled",
    }
}

fn write_one(
    tx: &mut postgres::Transaction<'_>,
    run_id: &str,
    cap: &mut String,
    w: &RunWrite,
    abandoned: &mut Vec<Approval>,
) -> Result<(), postgres::Error> {
    let cap_now = cap.clone();
    let c = cap_now.as_str();
    match w {
        RunWrite::Start(run) => {
            let fp = fingerprint::request(
                &run.tool_name,
                &run.argv_json,
                run.cwd.as_deref().unwrap_or(""),
            );
            let row = tx.query_one(
                "SELECT hr.run_start($1::text::jsonb, $2)",
                &[&to_json(run), &fp],
            )?;
            *cap = row.get(0);
            if let Ok(mut m) = CAPABILITIES.lock() {
                m.insert(run_id.to_owned(), cap.clone());
            }
        }
        RunWrite::Pid(pid) => {
            tx.execute(
                "SELECT hr.run_pid($1, $2, $3)",
                &[&run_id, &c, &i64::from(*pid)],
            )?;
        }
        RunWrite::Touch(t) => {
            tx.execute(
                "SELECT hr.run_touch($1, $2, $3, $4, $5)",
                &[
                    &run_id,
                    &c,
                    &t.last_output_at,
                    &t.last_heartbeat_at,
                    &t.supervisor_heartbeat_at,
                ],
            )?;
        }
        RunWrite::Status(change, replace) => {
            status(tx, run_id, c, change, guard_name(*replace))?;
        }
        RunWrite::Cancelled { exit_code, at } => {
            // The canceller's status stays; a signal nobody recorded is said so.
            let moved = status(
                tx,
                run_id,
                c,
                &StatusChange {
                    exit_code: Some(*exit_code),
                    at: Some(at.clone()),
                    ..StatusChange::to(
                        RunStatus::Cancelled,
                        Some("cancelled by a signal to headless-run".into()),
                    )
                },
                "not_cancelled",
            )?;
            if moved.is_none() {
                tx.execute(
                    "SELECT hr.run_exit($1, $2, $3, $4)",
                    &[&run_id, &c, exit_code, at],
                )?;
            }
        }
        RunWrite::Consume(approval_id) => {
            tx.execute(
                "SELECT hr.approval_consume($1, $2, $3)",
                &[&run_id, &c, approval_id],
            )?;
        }
        RunWrite::Release(one) => {
            let why = match one {
                None => "the run stopped at a later prompt",
                Some(_) => "the prompt went away before the answer was typed",
            };
            tx.execute(
                "SELECT hr.approval_release($1, $2, $3, $4)",
                &[&run_id, &c, one, &why],
            )?;
        }
        RunWrite::Abandon(why) => {
            for row in tx.query(
                "SELECT x::text FROM hr.approval_abandon($1, $2, $3) x",
                &[&run_id, &c, why],
            )? {
                if let Ok(a) = serde_json::from_str(row.get::<_, &str>(0)) {
                    abandoned.push(a);
                }
            }
        }
        RunWrite::Environment(env) => {
            tx.execute(
                "SELECT hr.run_environment($1, $2, $3::text::jsonb)",
                &[&run_id, &c, &to_json(env)],
            )?;
        }
    }
    Ok(())
}

/// A status change of the shim's own run; the previous status when it moved.
fn status(
    tx: &mut postgres::Transaction<'_>,
    run_id: &str,
    cap: &str,
    change: &StatusChange,
    guard: &str,
) -> Result<Option<String>, postgres::Error> {
    let row = tx.query_one(
        "SELECT hr.run_status($1, $2, $3, $4, $5, $6, $7, $8, $9)",
        &[
            &run_id,
            &cap,
            &change.status.as_str(),
            &change.reason,
            &change.exit_code,
            &change.finished,
            &change.error,
            &change.at,
            &guard,
        ],
    )?;
    Ok(row.get(0))
}

impl RunnerStore for PgRunner {
    fn connect(&mut self) -> StoreResult<()> {
        self.pg.client()?;
        if !std::mem::replace(&mut self.delivered, true) {
            self.deliver_spool()?;
        }
        Ok(())
    }

    fn record(
        &mut self,
        run_id: &str,
        writes: &[RunWrite],
        _actor: &str,
        _row_may_exist: bool,
    ) -> StoreResult<Done<Recorded>> {
        let mut cap = capability(run_id);
        let mut abandoned = Vec::new();
        let inserted = writes.iter().any(|w| matches!(w, RunWrite::Start(_)));
        self.pg.tx(|tx| {
            abandoned.clear();
            for w in writes {
                write_one(tx, run_id, &mut cap, w, &mut abandoned)?;
            }
            Ok(())
        })?;
        let events = abandoned.iter().map(Approval::status_event).collect();
        Ok(Done::with_events(Recorded { inserted }, events))
    }

    fn keep_for_later(&mut self, _run: &ToolRun) -> bool {
        false
    }

    fn kept_row_landed(&mut self, _run_id: &str) {}

    fn replaced(&mut self) -> bool {
        false
    }

    fn resolve_prompt(
        &mut self,
        who: &Asker,
        req: &PromptRequest,
        _host: &dyn HostFacts,
    ) -> StoreResult<Done<PromptResolution>> {
        let run = who.tool_run_id.as_str();
        let cap = capability(run);
        let mut fx = Effects::default();
        for a in self.expire()? {
            fx.events.push(a.status_event());
        }
        let seen: Vec<Approval> = self.pg.docs(
            "SELECT x::text FROM hr.runner_approvals($1, $2, $3) x",
            &[&run, &cap, &req.prompt_fingerprint],
        )?;
        // 1. A decision for an earlier run of this command, on this screen and tool. The
        //    server uses it up only if its run is parked (or this one).
        let screen = fingerprint::seen(&req.prompt);
        let mut changed_since: Option<(Approval, &str)> = None;
        let mut decided: Vec<&Approval> = seen
            .iter()
            .filter(|a| {
                a.status != ApprovalStatus::Pending
                    && a.consumed_at.is_none()
                    && a.decision_channel.as_deref() != Some("system:run-ended")
            })
            .collect();
        decided
            .sort_by(|a, b| (&b.decided_at, &b.approval_id).cmp(&(&a.decided_at, &a.approval_id)));
        if let Some(a) = decided.first() {
            if !rules::tool_fits(a, who.tool_digest.as_deref()) {
                changed_since = Some(((*a).clone(), "tool (its executable or script)"));
            } else if !rules::screen_fits(a, &screen) {
                changed_since = Some(((*a).clone(), "screen"));
            } else if rules::decision_fits(a, &req.prompt)
                && let Some(used) = self.pg.doc::<Approval>(
                    "SELECT hr.approval_consume($1, $2, $3)::text",
                    &[&run, &cap, &a.approval_id],
                )?
            {
                let value = used.chosen_value.clone().unwrap_or_default();
                let approval = Box::new(used);
                return Ok(Done {
                    value: if approval.answers() {
                        PromptResolution::Answer { approval, value }
                    } else {
                        PromptResolution::Rejected { approval }
                    },
                    effects: fx,
                });
            }
        }
        // 2. The runner's config policies, in order (remembered decisions are not kept
        //    on this store yet).
        let mut fresh = approval_for(who, req);
        for (name, value) in &req.policies {
            let decided = match approvals::value_decision(&fresh, value) {
                Ok(r) if r.status == ApprovalStatus::Rejected => Some(r),
                Ok(r)
                    if r.chosen_value
                        .as_deref()
                        .is_some_and(|v| req.prompt.takes(v)) =>
                {
                    Some(r)
                }
                _ => None,
            };
            let Some(ValueDecision {
                status,
                chosen_value,
            }) = decided
            else {
                fx.warnings.push(format!(
                    "policy {name}: `{value}` is not an answer to {:?} (valid: {}); asking for a decision instead",
                    req.prompt.prompt_line,
                    fresh.valid_values().join(", ")
                ));
                continue;
            };
            let recorded: Approval = self
                .pg
                .doc(
                    "SELECT hr.approval_by_policy($1, $2, $3::text::jsonb, $4, $5, $6)::text",
                    &[
                        &run,
                        &cap,
                        &to_json(&fresh),
                        name,
                        &status.as_str(),
                        &chosen_value,
                    ],
                )?
                .ok_or_else(|| {
                    StoreError::Server("the policy's approval was not recorded".into())
                })?;
            fx.events.push(recorded.needed_event());
            fx.events.push(recorded.status_event());
            let approval = Box::new(recorded);
            return Ok(Done {
                value: match (status, chosen_value) {
                    (ApprovalStatus::Approved, Some(value)) => {
                        PromptResolution::Answer { approval, value }
                    }
                    _ => PromptResolution::Rejected { approval },
                },
                effects: fx,
            });
        }
        // 3. A retry takes over the pending approval of a parked run of this command.
        let mut taken = None;
        if let Some(old) = seen
            .iter()
            .find(|a| a.status == ApprovalStatus::Pending && a.tool_run_id != who.tool_run_id)
        {
            taken = self.pg.doc::<Approval>(
                "SELECT hr.approval_take_over($1, $2, $3, $4::text::jsonb)::text",
                &[&run, &cap, &old.approval_id, &to_json(&fresh)],
            )?;
        }
        let taken_over = taken.is_some();
        let approval = match taken {
            Some(a) => a,
            // 4. A new question.
            None => {
                if let Some((old, what)) = &changed_since {
                    fresh.context = Some(changed_context(old, &fresh, what));
                }
                let a: Approval = self
                    .pg
                    .doc(
                        "SELECT hr.approval_ask($1, $2, $3::text::jsonb)::text",
                        &[&run, &cap, &to_json(&fresh)],
                    )?
                    .ok_or_else(|| StoreError::Server("the approval was not recorded".into()))?;
                fx.events.push(a.needed_event());
                a
            }
        };
        let change = StatusChange::to(
            RunStatus::WaitingApproval,
            Some(format!("waiting for approval {}", approval.approval_id)),
        );
        let prev = self
            .pg
            .tx(|tx| status(tx, run, &cap, &change, "not_final"))?;
        if let Some(prev) = prev.and_then(|p| p.parse::<RunStatus>().ok()) {
            fx.events.push(LogEvent::about_run(
                EventBody::status_change(Some(prev), &change),
                &who.tool,
                &who.tool_run_id,
                Some(&who.execution_id),
            ));
            fx.status = Some(RunStatus::WaitingApproval);
        }
        Ok(Done {
            value: PromptResolution::Pending {
                approval: Box::new(approval),
                taken_over,
            },
            effects: fx,
        })
    }

    fn cooperative(
        &mut self,
        _who: &Asker,
        _req: &CooperativeRequest,
        _ttl: Option<Duration>,
        _on_expire: OnExpire,
    ) -> StoreResult<Done<Cooperative>> {
        Err(StoreError::Unsupported(
            "a cooperative tool's approval request",
        ))
    }

    fn check_auto_approval(
        &mut self,
        _who: &Asker,
        _approval_id: &str,
        _value: &str,
        _resumed_from: Option<&str>,
    ) -> StoreResult<Done<Result<Approval, String>>> {
        Ok(Done::quiet(Err(
            "AUTO_APPROVAL is not honoured on the PostgreSQL store yet".into(),
        )))
    }

    fn approval(&mut self, approval_id: &str) -> StoreResult<Option<Approval>> {
        let run = CAPABILITIES
            .lock()
            .ok()
            .and_then(|m| m.iter().next_back().map(|(k, v)| (k.clone(), v.clone())));
        let Some((run, cap)) = run else {
            return Ok(None);
        };
        self.pg.doc(
            "SELECT hr.runner_approval($1, $2, $3)::text",
            &[&run, &cap, &approval_id],
        )
    }

    fn expire_due(&mut self) -> StoreResult<Done<Vec<Approval>>> {
        let expired = self.expire()?;
        let events = expired.iter().map(Approval::status_event).collect();
        Ok(Done::with_events(expired, events))
    }

    fn change_mark(&mut self) -> StoreResult<u64> {
        self.pg.change_mark()
    }
}

impl PgRunner {
    fn expire(&mut self) -> StoreResult<Vec<Approval>> {
        self.pg.docs("SELECT x::text FROM hr.expire_due() x", &[])
    }
}

impl PgStore {
    fn change_mark(&mut self) -> StoreResult<u64> {
        let v: i64 = self
            .tx(|tx| tx.query_one("SELECT hr.change_mark()", &[]))?
            .get(0);
        Ok(v as u64)
    }
}

// ------------------------------------------------------------------------------------------
// The operator (and the viewer, who may only read).

/// `monitor`'s session: reads the tables, decides and cancels through the functions.
pub struct PgOperator {
    pg: PgStore,
}

impl PgOperator {
    pub fn new(url: &str) -> Self {
        PgOperator {
            pg: PgStore::new(url),
        }
    }
}

const RUN_DOC: &str =
    "(to_jsonb(r) - 'runner_login' - 'request_fingerprint' - 'capability_hash')::text";

/// A `WHERE` clause with numbered parameters, built from optional conditions.
#[derive(Default)]
struct Where {
    parts: Vec<String>,
    args: Vec<Box<dyn ToSql + Sync>>,
}

impl Where {
    fn push(&mut self, cond: impl FnOnce(usize) -> String, arg: Box<dyn ToSql + Sync>) {
        self.args.push(arg);
        self.parts.push(cond(self.args.len()));
    }
    fn any_of(&mut self, col: &str, values: Vec<String>) {
        if !values.is_empty() {
            self.push(|n| format!("{col} = ANY(${n})"), Box::new(values));
        }
    }
    fn equals(&mut self, col: &str, v: Option<&String>) {
        if let Some(v) = v {
            self.push(|n| format!("{col} = ${n}"), Box::new(v.clone()));
        }
    }
    fn at_least(&mut self, col: &str, v: Option<&String>) {
        if let Some(v) = v {
            self.push(|n| format!("{col} >= ${n}"), Box::new(v.clone()));
        }
    }
    fn clause(&self) -> String {
        if self.parts.is_empty() {
            String::new()
        } else {
            format!(" WHERE {}", self.parts.join(" AND "))
        }
    }
    fn params(&self) -> Vec<&(dyn ToSql + Sync)> {
        self.args
            .iter()
            .map(|a| a.as_ref() as &(dyn ToSql + Sync))
            .collect()
    }
}

fn limit(n: Option<usize>) -> String {
    n.map(|n| format!(" LIMIT {n}")).unwrap_or_default()
}

fn decide_outcome(doc: serde_json::Value) -> StoreResult<(String, Option<Approval>)> {
    let outcome = doc
        .get("outcome")
        .and_then(|v| v.as_str())
        .unwrap_or("missing")
        .to_owned();
    let approval = match doc.get("approval") {
        Some(a) if !a.is_null() => Some(
            serde_json::from_value(a.clone())
                .map_err(|e| StoreError::Server(format!("unreadable row: {e}")))?,
        ),
        _ => None,
    };
    Ok((outcome, approval))
}

impl OperatorStore for PgOperator {
    fn connect(&mut self) -> StoreResult<()> {
        self.pg.client().map(|_| ())
    }

    fn change_mark(&mut self) -> StoreResult<u64> {
        self.pg.change_mark()
    }

    fn ids_starting_with(&mut self, prefix: &str, limit: usize) -> StoreResult<Vec<String>> {
        let (table, column) = if prefix.starts_with(crate::id::APPROVAL_PREFIX) {
            ("hr.approvals", "approval_id")
        } else {
            ("hr.tool_runs", "tool_run_id")
        };
        let end = format!("{prefix}\u{ffff}");
        let n = limit as i64;
        let rows = self.pg.tx(|tx| {
            tx.query(
                &format!(
                    "SELECT {column} FROM {table} WHERE {column} >= $1 AND {column} < $2
                     ORDER BY {column} LIMIT $3"
                ),
                &[&prefix, &end, &n],
            )
        })?;
        Ok(rows.iter().map(|r| r.get(0)).collect())
    }

    fn run(&mut self, tool_run_id: &str) -> StoreResult<Option<ToolRun>> {
        self.pg.doc(
            &format!("SELECT {RUN_DOC} FROM hr.tool_runs r WHERE tool_run_id = $1"),
            &[&tool_run_id],
        )
    }

    fn runs(&mut self, filter: &RunFilter) -> StoreResult<Vec<ToolRun>> {
        let mut w = Where::default();
        w.any_of(
            "status",
            filter
                .statuses
                .iter()
                .map(|s| s.as_str().to_owned())
                .collect(),
        );
        w.equals("tool_name", filter.tool.as_ref());
        w.equals("execution_id", filter.execution_id.as_ref());
        w.at_least("started_at", filter.since.as_ref());
        let sql = format!(
            "SELECT {RUN_DOC} FROM hr.tool_runs r{} ORDER BY tool_run_id DESC{}",
            w.clause(),
            limit(filter.limit)
        );
        self.pg.docs(&sql, &w.params())
    }

    fn supervised_runs(&mut self, limit_to: Option<usize>) -> StoreResult<Vec<ToolRun>> {
        let live: Vec<String> = RunStatus::LIVE
            .iter()
            .map(|s| s.as_str().to_owned())
            .collect();
        self.pg.docs(
            &format!(
                "SELECT {RUN_DOC} FROM hr.tool_runs r WHERE status = ANY($1) AND exit_code IS NULL
                 ORDER BY tool_run_id DESC{}",
                limit(limit_to)
            ),
            &[&live],
        )
    }

    fn export_runs_json(
        &mut self,
        filter: &RunFilter,
        out: &mut dyn Write,
    ) -> Result<usize, crate::export::ExportError> {
        let runs = self.runs(filter)?;
        out.write_all(b"[")?;
        for (i, run) in runs.iter().enumerate() {
            if i > 0 {
                out.write_all(b",\n")?;
            }
            out.write_all(crate::export::escape_risky(&to_json(run)).as_bytes())?;
        }
        out.write_all(b"]\n")?;
        out.flush()?;
        Ok(runs.len())
    }

    fn approval(&mut self, approval_id: &str) -> StoreResult<Option<Approval>> {
        self.pg.doc(
            "SELECT to_jsonb(a)::text FROM hr.approvals a WHERE approval_id = $1",
            &[&approval_id],
        )
    }

    fn approvals(&mut self, filter: &ApprovalFilter) -> StoreResult<Vec<Approval>> {
        let mut w = Where::default();
        w.any_of(
            "status",
            filter
                .statuses
                .iter()
                .map(|s| s.as_str().to_owned())
                .collect(),
        );
        w.equals("tool_name", filter.tool.as_ref());
        w.equals("tool_run_id", filter.tool_run_id.as_ref());
        w.equals("execution_id", filter.execution_id.as_ref());
        w.at_least("created_at", filter.since.as_ref());
        let sql = format!(
            "SELECT to_jsonb(a)::text FROM hr.approvals a{} ORDER BY approval_id DESC{}",
            w.clause(),
            limit(filter.limit)
        );
        self.pg.docs(&sql, &w.params())
    }

    fn decide(
        &mut self,
        approval_id: &str,
        value: &str,
        who: &Decider<'_>,
    ) -> StoreResult<Done<DecideOutcome>> {
        let Some(current) = OperatorStore::approval(self, approval_id)? else {
            return Ok(Done::quiet(DecideOutcome::NotFound));
        };
        let resolution = match approvals::value_decision(&current, value) {
            Ok(r) => r,
            Err(e) if current.status == ApprovalStatus::Pending => {
                return Ok(Done::quiet(DecideOutcome::Invalid(e)));
            }
            Err(_) => return Ok(Done::quiet(DecideOutcome::Conflict(Box::new(current)))),
        };
        let status = resolution.status.as_str();
        let doc: String = self
            .pg
            .tx(|tx| {
                tx.query_one(
                    "SELECT hr.decide($1, $2, $3, $4, $5)::text",
                    &[
                        &approval_id,
                        &status,
                        &resolution.chosen_value,
                        &who.comment,
                        &who.channel,
                    ],
                )
            })?
            .get(0);
        let (outcome, after) = decide_outcome(from_json(&doc)?)?;
        let Some(after) = after else {
            return Ok(Done::quiet(DecideOutcome::NotFound));
        };
        Ok(match outcome.as_str() {
            "decided" => {
                let events = vec![after.status_event()];
                Done::with_events(DecideOutcome::Decided(Box::new(after)), events)
            }
            "expired" => {
                let events = vec![after.status_event()];
                Done::with_events(DecideOutcome::Conflict(Box::new(after)), events)
            }
            _ => {
                let same = after.status == resolution.status
                    && (resolution.status == ApprovalStatus::Rejected
                        || after.chosen_value == resolution.chosen_value);
                Done::quiet(if same {
                    DecideOutcome::AlreadySame(Box::new(after))
                } else {
                    DecideOutcome::Conflict(Box::new(after))
                })
            }
        })
    }

    fn cancel(
        &mut self,
        tool_run_id: &str,
        reason: Option<&str>,
        _who: &Decider<'_>,
    ) -> StoreResult<Done<CancelOutcome>> {
        let doc: String = self
            .pg
            .tx(|tx| tx.query_one("SELECT hr.cancel($1, $2)::text", &[&tool_run_id, &reason]))?
            .get(0);
        let doc: serde_json::Value = from_json(&doc)?;
        let run: Option<ToolRun> = match doc.get("run") {
            Some(r) if !r.is_null() => Some(
                serde_json::from_value(r.clone())
                    .map_err(|e| StoreError::Server(format!("unreadable row: {e}")))?,
            ),
            _ => None,
        };
        let Some(run) = run else {
            return Ok(Done::quiet(CancelOutcome::NotFound));
        };
        Ok(match doc.get("outcome").and_then(|o| o.as_str()) {
            Some("cancelled") => {
                let previous = doc
                    .get("previous")
                    .and_then(|p| p.as_str())
                    .and_then(|p| p.parse().ok());
                let change = StatusChange::to(RunStatus::Cancelled, run.reason.clone());
                let events = vec![run.status_event(previous, &change)];
                Done::with_events(CancelOutcome::Marked { run: Box::new(run) }, events)
            }
            _ => Done::quiet(CancelOutcome::AlreadyFinal { run: Box::new(run) }),
        })
    }

    fn reconcile(
        &mut self,
        _actor: &str,
        _host: &dyn HostFacts,
    ) -> StoreResult<Done<ReconcileReport>> {
        // Vanished supervisors are not reconciled on this store yet; expiry is.
        let expired: Vec<Approval> = self.pg.docs("SELECT x::text FROM hr.expire_due() x", &[])?;
        let events = expired.iter().map(Approval::status_event).collect();
        Ok(Done::with_events(
            ReconcileReport {
                expired,
                ..ReconcileReport::default()
            },
            events,
        ))
    }

    fn expire_due(&mut self) -> StoreResult<Done<Vec<Approval>>> {
        let expired: Vec<Approval> = self.pg.docs("SELECT x::text FROM hr.expire_due() x", &[])?;
        let events = expired.iter().map(Approval::status_event).collect();
        Ok(Done::with_events(expired, events))
    }

    fn decided_parked(&mut self) -> StoreResult<Vec<ParkedRun>> {
        Err(StoreError::Unsupported(
            "monitor worker (resuming parked runs)",
        ))
    }
    fn resumes_of(&mut self, waiting_run: &str) -> StoreResult<Vec<ToolRun>> {
        self.pg.docs(
            &format!(
                "SELECT {RUN_DOC} FROM hr.tool_runs r WHERE resumed_from = $1 ORDER BY tool_run_id"
            ),
            &[&waiting_run],
        )
    }
    fn claim(&mut self, _approval_id: &str, _worker: &str) -> StoreResult<bool> {
        Err(StoreError::Unsupported("claiming a decision for a resume"))
    }
    fn take_over_claim(&mut self, _a: &str, _from: &str, _to: &str) -> StoreResult<bool> {
        Err(StoreError::Unsupported("claiming a decision for a resume"))
    }
    fn set_resumed_run(&mut self, _approval_id: &str, _run: &str) -> StoreResult<()> {
        Err(StoreError::Unsupported("claiming a decision for a resume"))
    }
    fn close_run(
        &mut self,
        _tool_run_id: &str,
        _change: &StatusChange,
        _actor: &str,
        _from: &[RunStatus],
    ) -> StoreResult<Done<Option<RunStatus>>> {
        Err(StoreError::Unsupported("closing a parked run"))
    }
    fn consume(&mut self, _approval_id: &str, _by_run: &str, _actor: &str) -> StoreResult<bool> {
        Err(StoreError::Unsupported("closing a parked run"))
    }

    fn gc_preview(&mut self, _cutoff: &str) -> StoreResult<GcReport> {
        Err(StoreError::Unsupported("monitor gc"))
    }
    fn gc(&mut self, _cutoff: &str, _actor: &str) -> StoreResult<GcReport> {
        Err(StoreError::Unsupported("monitor gc"))
    }

    fn remember(
        &mut self,
        _tool: &str,
        _prompt_fingerprint: &str,
        _scope: &RememberScope,
        _value: &str,
        _approval_id: &str,
        _by: &str,
    ) -> StoreResult<RememberedPolicy> {
        Err(StoreError::Unsupported("a remembered decision"))
    }
    fn remembered(&mut self) -> StoreResult<Vec<RememberedPolicy>> {
        Ok(Vec::new())
    }
    fn forget(&mut self, _policy_id: &str, _by: &str) -> StoreResult<Option<RememberedPolicy>> {
        Ok(None)
    }

    fn audit_of_run(&mut self, tool_run_id: &str) -> StoreResult<Vec<AuditRow>> {
        self.audit_rows("tool_run_id = $1", &[&tool_run_id])
    }
    fn audit_of_approval(&mut self, approval_id: &str) -> StoreResult<Vec<AuditRow>> {
        self.audit_rows("approval_id = $1", &[&approval_id])
    }

    fn verify_audit(&mut self) -> StoreResult<ChainReport> {
        let rows = self.audit_rows("true", &[])?;
        let mut report = ChainReport {
            rows: 0,
            problems: Vec::new(),
            head: None,
        };
        let mut prev = audit::GENESIS.to_owned();
        for r in &rows {
            report.rows += 1;
            if r.prev_hash != prev {
                report
                    .problems
                    .push((r.id, "does not follow the row before it".into()));
            }
            let h = audit::chain_hash(
                &r.prev_hash,
                &r.at,
                &r.event,
                r.tool_run_id.as_deref(),
                r.approval_id.as_deref(),
                &r.actor,
                &r.data,
            );
            if h != r.hash {
                report
                    .problems
                    .push((r.id, "its hash does not match its fields".into()));
            }
            prev = r.hash.clone();
        }
        report.head = rows.last().map(|r| (r.id, r.hash.clone()));
        Ok(report)
    }

    fn audit_hash(&mut self, id: i64) -> StoreResult<Option<String>> {
        let row = self
            .pg
            .tx(|tx| tx.query_opt("SELECT hash FROM hr.events WHERE id = $1", &[&id]))?;
        Ok(row.map(|r| r.get(0)))
    }

    fn unrecorded_decisions(&mut self) -> StoreResult<Vec<(String, String)>> {
        let rows = self.pg.tx(|tx| {
            tx.query(
                "SELECT a.approval_id, a.status FROM hr.approvals a
                 WHERE a.status <> 'pending' AND NOT EXISTS (SELECT 1 FROM hr.events e
                   WHERE e.approval_id = a.approval_id AND e.event = 'approval_status_change'
                     AND e.data::jsonb->>'status' = a.status)
                 ORDER BY a.approval_id",
                &[],
            )
        })?;
        Ok(rows.iter().map(|r| (r.get(0), r.get(1))).collect())
    }

    fn counts(&mut self, failed_since: &str, soon: Duration) -> StoreResult<Counts> {
        let mut counts = self.live_counts(soon)?;
        let failed = ["failed", "failed_timeout"];
        let rows = self.pg.tx(|tx| {
            let totals = tx.query(
                "SELECT status, count(*) FROM hr.tool_runs GROUP BY status",
                &[],
            )?;
            let recent = tx.query_one(
                "SELECT count(*) FILTER (WHERE status = ANY($2)),
                        count(*) FILTER (WHERE status = 'stalled' AND completed_at IS NOT NULL)
                 FROM hr.tool_runs WHERE coalesce(completed_at, started_at) >= $1",
                &[&failed_since, &&failed[..]],
            )?;
            Ok((totals, recent))
        })?;
        counts.totals = rows
            .0
            .iter()
            .filter_map(|r| r.get::<_, &str>(0).parse().ok().map(|s| (s, r.get(1))))
            .collect();
        counts.failed_recent = rows.1.get(0);
        counts.stalled_recent = rows.1.get(1);
        Ok(counts)
    }

    fn live_counts(&mut self, soon: Duration) -> StoreResult<Counts> {
        let cutoff = time::to_rfc3339(std::time::SystemTime::now() + soon);
        let open: Vec<String> = RunStatus::OPEN
            .iter()
            .map(|s| s.as_str().to_owned())
            .collect();
        let (live, pending) = self.pg.tx(|tx| {
            let live = tx.query(
                "SELECT status, count(*) FROM hr.tool_runs
                 WHERE completed_at IS NULL AND status = ANY($1) GROUP BY status",
                &[&open],
            )?;
            let pending = tx.query_one(
                "SELECT count(*), count(*) FILTER (WHERE expires_at IS NOT NULL AND expires_at <= $1)
                 FROM hr.approvals WHERE status = 'pending'",
                &[&cutoff],
            )?;
            Ok((live, pending))
        })?;
        Ok(Counts {
            live: live
                .iter()
                .filter_map(|r| r.get::<_, &str>(0).parse().ok().map(|s| (s, r.get(1))))
                .collect(),
            pending: (pending.get(0), pending.get(1)),
            ..Counts::default()
        })
    }

    fn health(&mut self) -> StoreResult<StoreHealth> {
        let v: i64 = self
            .pg
            .tx(|tx| tx.query_one("SELECT version FROM hr.schema_version", &[]))?
            .get(0);
        Ok(StoreHealth {
            schema_version: v,
            supported_version: SCHEMA_VERSION,
            journal: "postgresql".into(),
        })
    }
}

impl PgOperator {
    fn audit_rows(
        &mut self,
        cond: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> StoreResult<Vec<AuditRow>> {
        let rows = self.pg.tx(|tx| {
            tx.query(
                &format!(
                    "SELECT id, at, event, tool_run_id, approval_id, actor, data, prev_hash, hash
                     FROM hr.events WHERE {cond} ORDER BY id"
                ),
                params,
            )
        })?;
        Ok(rows
            .iter()
            .map(|r| AuditRow {
                id: r.get(0),
                at: r.get(1),
                event: r.get(2),
                tool_run_id: r.get(3),
                approval_id: r.get(4),
                actor: r.get(5),
                data: r.get(6),
                prev_hash: r.get(7),
                hash: r.get(8),
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_never_shown() {
        assert_eq!(
            without_password("postgres://ci:s3cr%40t@db:5432/hr"),
            "postgres://ci:***@db:5432/hr"
        );
        assert_eq!(
            without_password("postgresql://ci@db/hr?sslmode=verify-full&password=x"),
            "postgresql://ci@db/hr?sslmode=verify-full&password=***"
        );
        assert_eq!(without_password("postgres://db/hr"), "postgres://db/hr");
        assert_eq!(
            without_password("postgres://a:b@h/d?x=1"),
            "postgres://a:***@h/d?x=1"
        );
    }

    #[test]
    fn only_postgres_urls_name_the_server_store() {
        assert!(is_url("postgres://h/d"));
        assert!(is_url("postgresql://h/d"));
        assert!(!is_url("/var/lib/hr/state.db"));
        assert!(!is_url("postgres.db"));
    }

    #[test]
    fn a_bad_url_is_reported_on_use_not_at_start() {
        let mut s = PgRunner::new("postgres://h:notaport/d", &StatePaths::at("/nonexistent"));
        let e = RunnerStore::connect(&mut s).unwrap_err().to_string();
        assert!(e.contains("not a usable PostgreSQL URL"), "{e}");
    }

    #[test]
    fn the_migrations_are_numbered_as_the_schema_version() {
        assert_eq!(MIGRATIONS.len() as i64, SCHEMA_VERSION);
    }
}
