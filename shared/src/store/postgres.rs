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
    AdminStore, Asker, Cooperative, Counts, Done, Effects, OperatorStore, PromptRequest,
    PromptResolution, Recorded, RememberScope, Replace, RunWrite, RunnerStore, StoreError,
    StoreHealth, StoreResult, WorkerStore,
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
pub const SCHEMA_VERSION: i64 = 5;

/// The schema, as an append-only list: entry N brings a database from version N to N+1.
const MIGRATIONS: &[&str] = &[
    include_str!("pg/v1.sql"),
    include_str!("pg/v2.sql"),
    include_str!("pg/v3.sql"),
    include_str!("pg/v4.sql"),
    include_str!("pg/v5.sql"),
];

/// The three roles, and what `monitor db grant` calls them.
pub const ROLES: [(&str, &str); 3] = [
    ("runner", "headless_runner"),
    ("operator", "headless_operator"),
    ("viewer", "headless_viewer"),
];

pub use super::url::{is_url, without_password};

/// Where and how to connect: the settings, and TLS when the URL asks for it.
#[derive(Clone)]
pub struct Target {
    pub config: postgres::Config,
    /// `sslmode=require`, `verify-ca` or `verify-full`: rustls, verifying the server's chain
    /// and name against `sslrootcert` (else the system's roots). `None`: no TLS
    /// (`disable`, or `prefer`/`allow`, the default, which this client does not try).
    tls: Option<std::sync::Arc<rustls::ClientConfig>>,
}

/// The URL without its TLS parameters (`sslmode`, `sslrootcert`), and their values.
fn split_tls(url: &str) -> (String, Option<String>, Option<String>) {
    let Some((base, query)) = url.split_once('?') else {
        return (url.to_owned(), None, None);
    };
    let (mut mode, mut root) = (None, None);
    let kept: Vec<&str> = query
        .split('&')
        .filter(|kv| match kv.split_once('=') {
            Some(("sslmode", v)) => {
                mode = Some(v.to_owned());
                false
            }
            Some(("sslrootcert", v)) => {
                root = Some(percent_decode(v));
                false
            }
            _ => true,
        })
        .collect();
    let url = if kept.is_empty() {
        base.to_owned()
    } else {
        format!("{base}?{}", kept.join("&"))
    };
    (url, mode, root)
}

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match (bytes[i], bytes.get(i + 1..i + 3)) {
            (b'%', Some(hex))
                if let Ok(b) = u8::from_str_radix(&String::from_utf8_lossy(hex), 16) =>
            {
                out.push(b);
                i += 3;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The rustls client for `mode`, verifying against the CA file `root` (PEM) or the
/// system's roots; `None` for the modes that do not ask for TLS.
fn tls_for(
    mode: &str,
    root: Option<&str>,
) -> StoreResult<Option<std::sync::Arc<rustls::ClientConfig>>> {
    match mode {
        "disable" | "allow" | "prefer" => return Ok(None),
        "require" | "verify-ca" | "verify-full" => {}
        other => {
            return Err(StoreError::Server(format!(
                "sslmode={other} is not one of disable, prefer, require, verify-ca, verify-full"
            )));
        }
    }
    let mut roots = rustls::RootCertStore::empty();
    match root {
        Some(file) => {
            use rustls::pki_types::CertificateDer;
            use rustls::pki_types::pem::PemObject;
            let certs = CertificateDer::pem_file_iter(file)
                .map_err(|e| StoreError::Server(format!("sslrootcert {file}: {e}")))?;
            for cert in certs {
                let cert =
                    cert.map_err(|e| StoreError::Server(format!("sslrootcert {file}: {e}")))?;
                roots
                    .add(cert)
                    .map_err(|e| StoreError::Server(format!("sslrootcert {file}: {e}")))?;
            }
        }
        None => {
            for cert in rustls_native_certs::load_native_certs().certs {
                let _ = roots.add(cert);
            }
        }
    }
    if roots.is_empty() {
        return Err(StoreError::Server(
            "TLS asked for, but no CA certificate to verify the server with (sslrootcert, or the system's roots)".into(),
        ));
    }
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| StoreError::Server(format!("TLS: {e}")))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(Some(std::sync::Arc::new(config)))
}

/// Connection settings from a URL, with the libpq variables it leaves out (`PGUSER`,
/// `PGPASSWORD`, `PGHOST`, `PGPORT`, `PGDATABASE`, `PGCONNECT_TIMEOUT`, `PGSSLMODE`,
/// `PGSSLROOTCERT`) and `~/.pgpass`.
pub fn target(url: &str) -> StoreResult<Target> {
    let var = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
    let (url, mode, root) = split_tls(url);
    let mode = mode
        .or_else(|| var("PGSSLMODE"))
        .unwrap_or_else(|| "prefer".into());
    let root = root.or_else(|| var("PGSSLROOTCERT"));
    let tls = tls_for(&mode, root.as_deref())?;
    let mut config = config(&url)?;
    if tls.is_some() {
        config.ssl_mode(postgres::config::SslMode::Require);
    } else {
        config.ssl_mode(postgres::config::SslMode::Disable);
    }
    Ok(Target { config, tls })
}

/// The URL for a process this one starts to reach the store as this one does — a resume's
/// shim, started by `monitor worker` in a recorded run's environment: `url` with what this
/// process's environment adds to it (`PGUSER`, `PGPASSWORD` or the password file, `PGHOST`,
/// `PGPORT`, `PGDATABASE`, `PGCONNECT_TIMEOUT`, `PGSSLMODE`, `PGSSLROOTCERT`) written into
/// it. The child's own `PG*` variables are then the tool's alone: a run's recorded
/// environment can neither lose the executor its login (a `PGPASSWORD` is never recorded)
/// nor point the child's store elsewhere.
pub fn pinned_url(url: &str) -> StoreResult<String> {
    let var = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
    let (bare, mode, root) = split_tls(url);
    let given = postgres::Config::from_str(&bare)
        .map_err(|e| StoreError::Server(format!("not a usable PostgreSQL URL: {e}")))?;
    let full = config(&bare)?;
    let tls = [
        (
            "sslmode",
            mode.is_none().then(|| var("PGSSLMODE")).flatten(),
        ),
        (
            "sslrootcert",
            root.is_none().then(|| var("PGSSLROOTCERT")).flatten(),
        ),
    ];
    Ok(pin(url, &given, &full, &tls))
}

/// `url` with the settings `full` has and `given` (what `url` says) lacks, and `extra`,
/// appended as query parameters.
fn pin(
    url: &str,
    given: &postgres::Config,
    full: &postgres::Config,
    extra: &[(&str, Option<String>)],
) -> String {
    use postgres::config::Host;
    use std::os::unix::ffi::OsStrExt;
    let mut params: Vec<(&str, Vec<u8>)> = Vec::new();
    if given.get_user().is_none()
        && let Some(u) = full.get_user()
    {
        params.push(("user", u.as_bytes().to_vec()));
    }
    // A query parameter's value must be UTF-8; a password that is not stays where it was.
    if given.get_password().is_none()
        && let Some(p) = full
            .get_password()
            .filter(|p| std::str::from_utf8(p).is_ok())
    {
        params.push(("password", p.to_vec()));
    }
    if given.get_hosts().is_empty() {
        for h in full.get_hosts() {
            params.push((
                "host",
                match h {
                    Host::Tcp(h) => h.as_bytes().to_vec(),
                    Host::Unix(p) => p.as_os_str().as_bytes().to_vec(),
                },
            ));
        }
    }
    if given.get_ports().is_empty() {
        for p in full.get_ports() {
            params.push(("port", p.to_string().into_bytes()));
        }
    }
    if given.get_dbname().is_none()
        && let Some(d) = full.get_dbname()
    {
        params.push(("dbname", d.as_bytes().to_vec()));
    }
    if given.get_connect_timeout().is_none()
        && let Some(t) = full.get_connect_timeout()
    {
        params.push(("connect_timeout", t.as_secs().to_string().into_bytes()));
    }
    for (k, v) in extra {
        if let Some(v) = v {
            params.push((k, v.as_bytes().to_vec()));
        }
    }
    let mut out = url.to_owned();
    for (k, v) in params {
        if !out.contains('?') {
            out.push('?');
        } else if !out.ends_with(['?', '&']) {
            out.push('&');
        }
        out.push_str(k);
        out.push('=');
        out.push_str(&percent_encode(&v));
    }
    out
}

/// Every byte but the unreserved ones (`A-Z a-z 0-9 - . _ ~`) as `%XX`.
fn percent_encode(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len());
    for &b in bytes {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The settings of a URL without TLS parameters (see [`target`]).
fn config(url: &str) -> StoreResult<postgres::Config> {
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
    if c.get_password().is_none()
        && let Some(p) = pgpass_password(&c)
    {
        c.password(p);
    }
    if c.get_connect_timeout().is_none() {
        let secs = var("PGCONNECT_TIMEOUT")
            .and_then(|s| s.parse().ok())
            .unwrap_or(5);
        c.connect_timeout(Duration::from_secs(secs));
    }
    // A cut link must fail a write in seconds, not hang it for the kernel's 15 minutes.
    if c.get_tcp_user_timeout().is_none() {
        c.tcp_user_timeout(Duration::from_secs(5));
    }
    c.keepalives_idle(Duration::from_secs(5));
    c.application_name("headless-run");
    Ok(c)
}

/// The password `~/.pgpass` (or `PGPASSFILE`) holds for these settings, as libpq reads it:
/// `host:port:database:user:password` lines, `*` matching anything, `\:` and `\\` escaped;
/// the first match wins; a file others may read is ignored.
fn pgpass_password(c: &postgres::Config) -> Option<String> {
    use std::os::unix::fs::PermissionsExt;
    let path = std::env::var_os("PGPASSFILE")
        .map(std::path::PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| std::path::Path::new(&h).join(".pgpass")))?;
    let meta = std::fs::metadata(&path).ok()?;
    if !meta.is_file() || meta.permissions().mode() & 0o077 != 0 {
        return None;
    }
    let text = std::fs::read_to_string(&path).ok()?;
    let host = match c.get_hosts().first()? {
        postgres::config::Host::Tcp(h) => h.clone(),
        postgres::config::Host::Unix(_) => "localhost".into(),
    };
    let port = c.get_ports().first().copied().unwrap_or(5432).to_string();
    let user = c.get_user()?.to_owned();
    let db = c.get_dbname().unwrap_or(&user).to_owned();
    pgpass_lookup(&text, [&host, &port, &db, &user])
}

/// The password of the first `.pgpass` line matching host, port, database and user.
fn pgpass_lookup(text: &str, want: [&str; 4]) -> Option<String> {
    for line in text.lines() {
        if line.starts_with('#') || line.trim().is_empty() {
            continue;
        }
        let mut fields = Vec::new();
        let mut field = String::new();
        let mut chars = line.chars();
        while let Some(ch) = chars.next() {
            match ch {
                '\\' => field.extend(chars.next()),
                ':' if fields.len() < 4 => fields.push(std::mem::take(&mut field)),
                ch => field.push(ch),
            }
        }
        fields.push(field);
        if fields.len() == 5
            && fields[..4]
                .iter()
                .zip(want)
                .all(|(f, w)| f == "*" || f == w)
        {
            return fields.pop();
        }
    }
    None
}

/// Whether a failed transaction (rolled back) may simply be tried again: a deadlock, a
/// serialization failure, two writers racing for the audit chain's head, or a session the
/// server ended for idling (it can only have idled before the transaction's statements).
fn retryable(e: &postgres::Error) -> bool {
    use postgres::error::SqlState;
    match e.as_db_error() {
        Some(db) => {
            *db.code() == SqlState::T_R_DEADLOCK_DETECTED
                || *db.code() == SqlState::T_R_SERIALIZATION_FAILURE
                || *db.code() == SqlState::IDLE_SESSION_TIMEOUT
                || (*db.code() == SqlState::UNIQUE_VIOLATION
                    && db.constraint() == Some("events_one_successor"))
        }
        None => false,
    }
}

fn server_error(e: postgres::Error) -> StoreError {
    use postgres::error::SqlState;
    match e.as_db_error() {
        Some(db) if *db.code() == SqlState::INSUFFICIENT_PRIVILEGE => {
            StoreError::Denied(db.message().to_owned())
        }
        Some(db) => StoreError::Database {
            code: db.code().code().to_owned(),
            message: db.message().to_owned(),
        },
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
fn connect(target: &Target) -> Result<Client, postgres::Error> {
    use postgres::error::SqlState;
    let deadline = std::time::Instant::now() + SLOTS_PATIENCE;
    let mut pause = Duration::from_millis(5);
    loop {
        let attempt = match &target.tls {
            Some(tls) => target
                .config
                .connect(tokio_postgres_rustls::MakeRustlsConnect::new(
                    (**tls).clone(),
                )),
            None => target.config.connect(NoTls),
        };
        match attempt {
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
const RUNNER_IDLE: &str = "-c idle_session_timeout=300";

/// One session on the server: connected on first use and again after an error.
pub struct PgStore {
    /// The settings, or why there are none (every call reports it).
    config: Result<Target, String>,
    client: Option<Client>,
}

impl PgStore {
    /// A session on the server of `url` (every call reports it when `url` is no usable
    /// URL).
    pub fn new(url: &str) -> Self {
        PgStore {
            config: target(url).map_err(|e| e.to_string()),
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
        let mut reopens = 0;
        let mut retries = 0;
        loop {
            let attempt: Result<Result<T, postgres::Error>, postgres::Error> =
                match self.client()?.transaction() {
                    Ok(mut tx) => Ok(f(&mut tx).and_then(|v| tx.commit().map(|()| v))),
                    Err(e) => Err(e),
                };
            match attempt {
                Ok(Err(e)) if retries < 3 && retryable(&e) => {
                    // Rolled back: a deadlock, a race for the audit chain's head, or the
                    // server ending the session for idling just as this transaction began
                    // (nothing of it was committed). Again, on a new connection if need be.
                    retries += 1;
                    if self.client.as_ref().is_none_or(|c| c.is_closed()) {
                        self.client = None;
                    }
                    std::thread::sleep(Duration::from_millis(5 * retries));
                }
                Ok(out) => {
                    if out.is_err() && self.client.as_ref().is_some_and(|c| c.is_closed()) {
                        self.client = None;
                    }
                    return out.map_err(server_error);
                }
                // Nothing ran: the server's goodbye (idle_session_timeout, a restart) or a
                // closed socket. Again on a new connection, a few times: on a loaded machine a
                // new session can idle past the runner's 300 ms before its first BEGIN.
                Err(e) => {
                    self.client = None;
                    if reopens < 3 {
                        reopens += 1;
                        continue;
                    }
                    return Err(server_error(e));
                }
            }
        }
    }

    /// The login this session authenticated as (`session_user`): who every row it writes
    /// is recorded as, whatever the client says.
    pub fn login(&mut self) -> StoreResult<String> {
        let row = self.tx(|tx| tx.query_one("SELECT session_user::text", &[]))?;
        Ok(row.get(0))
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
    let config = target(url).ok()?;
    super::doorbell::fed_by("pg-listen", move |bell| listen_loop(&config, bell))
}

fn listen_loop(config: &Target, bell: &std::os::fd::OwnedFd) {
    use postgres::fallible_iterator::FallibleIterator;
    loop {
        if let Ok(mut client) = connect(config)
            && client.batch_execute("LISTEN headless_run").is_ok()
        {
            if !super::doorbell::ring(bell) {
                return;
            }
            let mut notes = client.notifications();
            let mut iter = notes.blocking_iter();
            while let Ok(Some(_)) = iter.next() {
                if !super::doorbell::ring(bell) {
                    return;
                }
            }
        }
        if !super::doorbell::ring(bell) {
            return;
        }
        std::thread::sleep(Duration::from_secs(1));
    }
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
    let mut client = connect(&target(url)?).map_err(server_error)?;
    let mut tx = client.transaction().map_err(server_error)?;
    let mut foreign_owner = None;
    let report = (|| -> Result<InitReport, postgres::Error> {
        tx.execute(
            "SELECT pg_advisory_xact_lock(hashtext('headless-run schema'))",
            &[],
        )?;
        // A schema `hr` someone else made first could be dropped or rewritten by them.
        let owner: Option<String> = tx
            .query_opt(
                "SELECT pg_get_userbyid(nspowner)::text FROM pg_namespace WHERE nspname = 'hr'",
                &[],
            )?
            .map(|r| r.get(0));
        foreign_owner = owner.filter(|o| {
            tx.query_one("SELECT current_user::text", &[])
                .map(|r| r.get::<_, String>(0) != *o)
                .unwrap_or(true)
        });
        if foreign_owner.is_some() {
            return Ok(InitReport {
                from_version: 0,
                to_version: 0,
            });
        }
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
    if let Some(owner) = foreign_owner {
        return Err(StoreError::Denied(format!(
            "schema hr belongs to {owner}, not to this login: run db init as its owner (a login that can change it could drop or rewrite the store's functions)"
        )));
    }
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
GRANT SELECT ON hr.tool_runs, hr.approvals, hr.events, hr.policies, hr.schema_version
    TO headless_operator, headless_viewer;
GRANT EXECUTE ON FUNCTION hr.change_mark() TO headless_runner, headless_operator, headless_viewer;
GRANT EXECUTE ON FUNCTION hr.is_final(text), hr.run_doc(hr.tool_runs)
    TO headless_operator, headless_viewer;
GRANT EXECUTE ON FUNCTION hr.expire_due() TO headless_runner, headless_operator;
GRANT EXECUTE ON FUNCTION
    hr.run_start(jsonb, text, boolean, text),
    hr.run_deliver(jsonb, text, boolean),
    hr.run_touch(text, text, text, text, text),
    hr.run_pid(text, text, bigint),
    hr.run_status(text, text, text, text, integer, boolean, text, text, text),
    hr.run_exit(text, text, integer, text),
    hr.run_environment(text, text, jsonb),
    hr.runner_approvals(text, text, text),
    hr.runner_approval(text, text, text),
    hr.runner_remembered(text, text, text),
    hr.approval_ask(text, text, jsonb, text),
    hr.approval_by_policy(text, text, jsonb, text, text, text),
    hr.approval_consume(text, text, text, text, boolean),
    hr.approval_take_over(text, text, text, jsonb, text, boolean),
    hr.approval_supersede(text, text, text, jsonb, text, text, boolean),
    hr.approval_release(text, text, text, text),
    hr.approval_abandon(text, text, text)
    TO headless_runner;
-- v5: a run withdraws a question nothing waits for any more.
GRANT EXECUTE ON FUNCTION hr.approval_withdraw(text, text, text, text) TO headless_runner;
-- Resuming: operators, and a host's worker for its own login's runs (checked inside).
GRANT EXECUTE ON FUNCTION
    hr.fail_vanished(text, text, text),
    hr.claim(text, text),
    hr.take_over_claim(text, text, text),
    hr.set_resumed_run(text, text),
    hr.close_run(text, text, text, integer, boolean, text, text, text[]),
    hr.consume(text, text)
    TO headless_operator, headless_runner;
GRANT EXECUTE ON FUNCTION hr.worker_runs(text, text), hr.worker_approvals(text, text)
    TO headless_runner;
GRANT EXECUTE ON FUNCTION
    hr.decide(text, text, text, text, text, text, text),
    hr.decide(text, text, text, text, text),
    hr.cancel(text, text),
    hr.gc(text),
    hr.remember(text, text, text, jsonb, text, text, text),
    hr.forget(text)
    TO headless_operator;
-- Pipelines (v2): read by each login as it may; started and moved by their runner login,
-- cancelled by operators (both checked inside).
GRANT EXECUTE ON FUNCTION
    hr.pipeline_docs(text, boolean, integer),
    hr.execution_runs(text),
    hr.step_approvals(text, text)
    TO headless_runner, headless_operator, headless_viewer;
GRANT EXECUTE ON FUNCTION hr.pipeline_swap(jsonb) TO headless_runner, headless_operator;
GRANT EXECUTE ON FUNCTION hr.pipeline_decided(text, jsonb) TO headless_operator;
GRANT EXECUTE ON FUNCTION hr.pipeline_insert(jsonb), hr.pipeline_withdraw(text, text)
    TO headless_runner;
-- v3: logins that two OS users of a host share (each sees its own; operators all).
GRANT EXECUTE ON FUNCTION hr.shared_logins()
    TO headless_runner, headless_operator, headless_viewer;
"#;

/// A runner login that runs of two or more OS users of one host say they ran under: each
/// of them can have a worker with that login run the other's commands as itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SharedLogin {
    pub login: String,
    pub host: String,
    pub uids: Vec<i64>,
}

impl SharedLogin {
    /// The warning to give, naming the users where this host knows them.
    pub fn warning(&self) -> String {
        let users: Vec<String> = self
            .uids
            .iter()
            .map(|u| match u32::try_from(*u) {
                Ok(uid) => crate::proc::describe_uid(uid),
                Err(_) => format!("uid {u}"),
            })
            .collect();
        format!(
            "runner login {} is used by {} on host {}: give each OS user of each host a runner login of its own (monitor db grant LOGIN runner), or a worker of one runs the other's commands as itself",
            crate::sanitize::sanitize_line(&self.login),
            users.join(" and "),
            crate::sanitize::sanitize_line(if self.host.is_empty() {
                "?"
            } else {
                &self.host
            })
        )
    }
}

/// The runner logins two OS users of one host share, as far as the login of `url` may see
/// (its own runs; an operator, a viewer or the schema's owner: every login's). From the
/// uids the runs the store keeps said they ran as.
pub fn shared_logins(url: &str) -> StoreResult<Vec<SharedLogin>> {
    let mut client = connect(&target(url)?).map_err(server_error)?;
    let rows = client
        .query("SELECT login, host, uids FROM hr.shared_logins()", &[])
        .map_err(server_error)?;
    Ok(rows
        .iter()
        .map(|r| SharedLogin {
            login: r.get(0),
            host: r.get(1),
            uids: r.get(2),
        })
        .collect())
}

/// Which of the three roles (`runner`, `operator`, `viewer`) the login of `url` has.
pub fn roles_of(url: &str) -> StoreResult<Vec<&'static str>> {
    let mut client = connect(&target(url)?).map_err(server_error)?;
    let mut out = Vec::new();
    for (name, role) in ROLES {
        let member: bool = client
            .query_one(
                "SELECT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = $1)
                    AND pg_has_role(session_user, $1, 'MEMBER')",
                &[&role],
            )
            .map_err(server_error)?
            .get(0);
        if member {
            out.push(name);
        }
    }
    Ok(out)
}

/// Makes `user` (an existing login) a member of one of the three roles. A login that
/// runs tools may not also decide: runner and operator are refused on one login.
pub fn grant(url: &str, user: &str, role: &str) -> StoreResult<String> {
    let Some((_, pg_role)) = ROLES.iter().find(|(name, _)| *name == role) else {
        return Err(StoreError::Server(format!(
            "no role `{role}` (runner, operator or viewer)"
        )));
    };
    let mut client = connect(&target(url)?).map_err(server_error)?;
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
    /// The run this session started (its capability is in [`CAPABILITIES`]).
    run: Option<String>,
}

impl PgRunner {
    pub fn new(url: &str, paths: &StatePaths) -> Self {
        let mut pg = PgStore::new(url);
        if let Ok(t) = &mut pg.config {
            t.config.options(RUNNER_IDLE);
        }
        PgRunner {
            pg,
            paths: paths.clone(),
            delivered: false,
            run: None,
        }
    }

    /// Delivers the spooled final rows of earlier runs of this host (their shims could not
    /// reach the server before they exited); each file goes once its row has landed, or
    /// when the server says it is not this login's to deliver.
    fn deliver_spool(&mut self) -> StoreResult<usize> {
        let host = crate::rules::LocalHost::new();
        let mut n = 0;
        for (path, run) in crate::spool::spooled(&self.paths) {
            let fp = request_fingerprint(&run);
            // The spool is this host's: whether the run's shim still runs is known here.
            let gone = rules::shim_gone(&run, &host).is_some();
            match self.pg.tx(|tx| {
                tx.query_one(
                    "SELECT hr.run_deliver($1::text::jsonb, $2, $3)",
                    &[&to_json(&run), &fp, &gone],
                )
            }) {
                Ok(row) => match row.get::<_, Option<bool>>(0) {
                    // Its shim still writes the run: left for a later delivery.
                    None => {}
                    Some(landed) => {
                        n += usize::from(landed);
                        let _ = std::fs::remove_file(&path);
                    }
                },
                Err(StoreError::Denied(_)) => {
                    let _ = std::fs::remove_file(&path);
                }
                Err(e) => return Err(e),
            }
        }
        Ok(n)
    }

    /// The run this session speaks for, and its capability: the one it started, else (a
    /// wait-mode watcher's second session) the one run this process started.
    fn own(&self) -> Option<(String, String)> {
        let caps = CAPABILITIES.lock().ok()?;
        match &self.run {
            Some(run) => Some((run.clone(), caps.get(run)?.clone())),
            None if caps.len() == 1 => caps.iter().next().map(|(k, v)| (k.clone(), v.clone())),
            None => None,
        }
    }

    fn expire(&mut self) -> StoreResult<Vec<Approval>> {
        self.pg.docs("SELECT x::text FROM hr.expire_due() x", &[])
    }

    /// Moves the run to `waiting_approval` for `approval` (its log event in `fx`).
    fn wait_for(
        &mut self,
        who: &Asker,
        cap: &str,
        approval: &Approval,
        fx: &mut Effects,
    ) -> StoreResult<()> {
        let change = StatusChange::to(
            RunStatus::WaitingApproval,
            Some(format!("waiting for approval {}", approval.approval_id)),
        );
        let run = who.tool_run_id.as_str();
        let moved = self
            .pg
            .tx(|tx| status(tx, run, cap, &change, "not_final"))?;
        if let Some(m) = moved {
            fx.events.push(m.event());
            fx.status = Some(RunStatus::WaitingApproval);
        }
        Ok(())
    }
}

/// A new run capability: 256 random bits from the kernel, as hex.
fn new_capability() -> String {
    let mut bytes = [0u8; 32];
    let read = std::fs::File::open("/dev/urandom")
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut bytes));
    if read.is_err() {
        // SAFETY: getrandom writes at most the buffer's length into it.
        let n = unsafe { libc::getrandom(bytes.as_mut_ptr().cast(), bytes.len(), 0) };
        assert_eq!(
            n,
            bytes.len() as isize,
            "no randomness for a run capability"
        );
    }
    crate::audit::hex(&bytes)
}

/// The request fingerprint of a run's command, as the shim computes it for its asker.
fn request_fingerprint(run: &ToolRun) -> String {
    fingerprint::request(
        &run.tool_name,
        &run.argv_json,
        run.cwd.as_deref().unwrap_or(""),
    )
}

/// A status change the server made (`hr.moved`), for the log.
#[derive(Debug, serde::Deserialize)]
struct Moved {
    tool_run_id: String,
    tool_name: Option<String>,
    execution_id: Option<String>,
    from: RunStatus,
    to: RunStatus,
    reason: Option<String>,
}

impl Moved {
    fn event(&self) -> LogEvent {
        LogEvent::about_run(
            EventBody::status_change(
                Some(self.from),
                &StatusChange::to(self.to, self.reason.clone()),
            ),
            self.tool_name.as_deref().unwrap_or(""),
            &self.tool_run_id,
            self.execution_id.as_deref(),
        )
    }
}

/// An approval as a runner function returns it, with what else it did.
#[derive(Debug, serde::Deserialize)]
struct Touched {
    #[serde(flatten)]
    approval: Approval,
    /// The run it closed or cancelled on the way.
    #[serde(rename = "_closed", default)]
    closed: Option<Moved>,
    /// The run that asked it (runner reads), for the takeover rules.
    #[serde(rename = "_owner", default)]
    owner: Option<ToolRun>,
    /// Whether it is offered to the reading run (`hr.offered`: its own unused decision, or
    /// one the run it resumes holds for it).
    #[serde(rename = "_offered", default)]
    offered: bool,
}

/// The server's guard for a status change by the shim.
fn guard_name(replace: Replace) -> &'static str {
    match replace {
        Replace::Live => "not_final",
        Replace::AnyButCancelled => "not_cancelled",
    }
}

/// What a batch learnt besides writing: approvals it abandoned, a cancellation it found.
#[derive(Default)]
struct Learnt {
    abandoned: Vec<Approval>,
    cancelled: bool,
}

fn write_one(
    tx: &mut postgres::Transaction<'_>,
    run_id: &str,
    cap: &mut Option<String>,
    w: &RunWrite,
    may_exist: bool,
    learnt: &mut Learnt,
) -> Result<(), postgres::Error> {
    let c = cap.clone().unwrap_or_default();
    let c = c.as_str();
    match w {
        RunWrite::Start(run) => {
            // Made by `record` before the first try (the server keeps only its hash).
            let mine = cap.clone().unwrap_or_else(new_capability);
            let row = tx.query_one(
                "SELECT hr.run_start($1::text::jsonb, $2, $3, $4)",
                &[&to_json(run), &request_fingerprint(run), &may_exist, &mine],
            )?;
            *cap = row.get(0);
        }
        RunWrite::Pid(pid) => {
            tx.execute(
                "SELECT hr.run_pid($1, $2, $3)",
                &[&run_id, &c, &i64::from(*pid)],
            )?;
        }
        RunWrite::Touch(t) => {
            let status: Option<String> = tx
                .query_one(
                    "SELECT hr.run_touch($1, $2, $3, $4, $5)",
                    &[
                        &run_id,
                        &c,
                        &t.last_output_at,
                        &t.last_heartbeat_at,
                        &t.supervisor_heartbeat_at,
                    ],
                )?
                .get(0);
            learnt.cancelled |= status.as_deref() == Some(RunStatus::Cancelled.as_str());
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
                "not_final",
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
                "SELECT hr.approval_consume($1, $2, $3, NULL, false)",
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
                    learnt.abandoned.push(a);
                }
            }
        }
        RunWrite::Withdraw { approval_id, why } => {
            for row in tx.query(
                "SELECT x::text FROM hr.approval_withdraw($1, $2, $3, $4) x",
                &[&run_id, &c, approval_id, why],
            )? {
                if let Ok(a) = serde_json::from_str(row.get::<_, &str>(0)) {
                    learnt.abandoned.push(a);
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

/// A status change of the shim's own run: what it did, when it did something.
fn status(
    tx: &mut postgres::Transaction<'_>,
    run_id: &str,
    cap: &str,
    change: &StatusChange,
    guard: &str,
) -> Result<Option<Moved>, postgres::Error> {
    let row = tx.query_one(
        "SELECT hr.run_status($1, $2, $3, $4, $5, $6, $7, $8, $9)::text",
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
    Ok(row
        .get::<_, Option<&str>>(0)
        .and_then(|t| serde_json::from_str(t).ok()))
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
        row_may_exist: bool,
    ) -> StoreResult<Done<Recorded>> {
        let inserted = writes.iter().any(|w| matches!(w, RunWrite::Start(_)));
        // The run's capability is made once, before its first write is tried, and kept:
        // a retry (here or in a later batch) whose first commit was not acknowledged shows
        // the same one.
        let before = CAPABILITIES.lock().ok().and_then(|mut m| {
            if inserted && !m.contains_key(run_id) {
                m.insert(run_id.to_owned(), new_capability());
            }
            m.get(run_id).cloned()
        });
        let mut cap = before.clone();
        let mut learnt = Learnt::default();
        self.pg.tx(|tx| {
            learnt = Learnt::default();
            cap = before.clone();
            for w in writes {
                write_one(tx, run_id, &mut cap, w, row_may_exist, &mut learnt)?;
            }
            Ok(())
        })?;
        if inserted {
            self.run = Some(run_id.to_owned());
            if let Ok(mut m) = CAPABILITIES.lock() {
                match cap {
                    Some(cap) => m.insert(run_id.to_owned(), cap),
                    // Another session holds that run: this one has no capability for it.
                    None => m.remove(run_id),
                };
            }
        }
        let events = learnt
            .abandoned
            .iter()
            .map(Approval::status_event)
            .collect();
        Ok(Done::with_events(
            Recorded {
                inserted,
                cancelled: learnt.cancelled,
            },
            events,
        ))
    }

    /// Rows are kept for later by the shim's own spool, which the host's next runner
    /// session delivers ([`PgRunner::connect`]); nothing to keep here.
    fn keep_for_later(&mut self, _run: &ToolRun) -> bool {
        false
    }

    fn kept_row_landed(&mut self, run_id: &str) {
        crate::spool::discard(&self.paths, run_id);
    }

    fn replaced(&mut self) -> bool {
        false
    }

    fn resolve_prompt(
        &mut self,
        who: &Asker,
        req: &PromptRequest,
        host: &dyn HostFacts,
    ) -> StoreResult<Done<PromptResolution>> {
        let run = who.tool_run_id.as_str();
        let cap = capability(run);
        let mut fx = Effects::default();
        for a in self.expire()? {
            fx.events.push(a.status_event());
        }
        let seen: Vec<Touched> = self.pg.docs(
            "SELECT x::text FROM hr.runner_approvals($1, $2, $3) x",
            &[&run, &cap, &req.prompt_fingerprint],
        )?;
        // Whether the run that asked `t` no longer holds it (the server checks the rest).
        let owner_gone = |t: &Touched| {
            t.approval.tool_run_id != run
                && t.owner
                    .as_ref()
                    .is_none_or(|o| rules::may_take_over(Some(o), host))
        };
        // 1. A decision offered to this run (`crate::chain`, `hr.offered`: its own, or one
        //    the parked run it resumes holds for it), in the order they were asked; a yes
        //    only for the screen and tool it was given on. The server checks it again.
        let screen = fingerprint::seen(&req.prompt);
        let mut changed_since: Option<(Approval, &str)> = None;
        let mut offered: Vec<&Touched> = seen
            .iter()
            .filter(|t| t.offered && rules::live(&t.approval))
            .collect();
        offered.sort_by(|x, y| x.approval.approval_id.cmp(&y.approval.approval_id));
        for t in offered {
            let a = &t.approval;
            if !rules::tool_fits(a, who.tool_digest.as_deref()) {
                changed_since.get_or_insert((a.clone(), "tool (its executable or script)"));
            } else if !rules::screen_fits(a, &screen) {
                changed_since.get_or_insert((a.clone(), "screen"));
            } else if rules::decision_fits(a, &req.prompt)
                && let Some(used) = self.pg.doc::<Touched>(
                    "SELECT hr.approval_consume($1, $2, $3, NULL, false)::text",
                    &[&run, &cap, &a.approval_id],
                )?
            {
                fx.events.extend(used.closed.as_ref().map(Moved::event));
                let value = used.approval.chosen_value.clone().unwrap_or_default();
                let approval = Box::new(used.approval);
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
        // 2. A policy: the runner's config's, in order, then a remembered decision.
        let mut fresh = approval_for(who, req);
        let mut candidates = req.policies.clone();
        if let Some(p) = self.pg.doc::<RememberedPolicy>(
            "SELECT hr.runner_remembered($1, $2, $3)::text",
            &[&run, &cap, &req.prompt_fingerprint],
        )? {
            candidates.push((p.name, p.value));
        }
        for (name, value) in &candidates {
            let ValueDecision {
                status,
                chosen_value,
            } = match super::asking::policy_decision(&fresh, req, name, value) {
                Ok(d) => d,
                Err(warning) => {
                    fx.warnings.push(warning);
                    continue;
                }
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
        // 3. A retry takes over the pending approval of a run that no longer holds it;
        // 4. else a new question (saying what changed, if a decision was made on another
        //    screen of it). Each with the run's move to `waiting_approval`, in one
        //    transaction: no approval is left without a run waiting for it.
        let old = seen
            .iter()
            .find(|t| t.approval.status == ApprovalStatus::Pending && t.approval.tool_run_id != run)
            .filter(|t| owner_gone(t))
            .map(|t| t.approval.clone());
        // A takeover on the same screen keeps the approval as the operator reads it; on
        // another, the old one is superseded by this new question, which says what changed
        // (as it does when a decision was made on another screen of it).
        let keeps = old
            .as_ref()
            .is_some_and(|o| super::asking::takeover_keeps(o, &fresh));
        let changed_from = match (&old, keeps) {
            (Some(o), false) => Some((
                o.clone(),
                if o.tool_digest == fresh.tool_digest {
                    "screen"
                } else {
                    "tool (its executable or script)"
                },
            )),
            _ => changed_since,
        };
        let screen_json = to_json(&fresh);
        if let Some((old, what)) = &changed_from {
            fresh.context = Some(changed_context(old, &fresh, what));
        }
        let fresh_json = to_json(&fresh);
        let fresh_id = fresh.approval_id.clone();
        let mut superseded: Option<Approval> = None;
        let (touched, taken_over, moved) = self
            .pg
            .tx(|tx| {
                let mut taken = None;
                let mut replaced = None;
                if let Some(o) = &old {
                    let (sql, args): (&str, Vec<&(dyn ToSql + Sync)>) = if keeps {
                        (
                            "SELECT hr.approval_take_over($1, $2, $3, $4::text::jsonb, $5, $6)::text",
                            vec![&run, &cap, &o.approval_id, &screen_json, &o.tool_run_id, &true],
                        )
                    } else {
                        (
                            "SELECT hr.approval_supersede($1, $2, $3, $4::text::jsonb, $5, $6, $7)::text",
                            vec![
                                &run,
                                &cap,
                                &o.approval_id,
                                &fresh_json,
                                &fresh_id,
                                &o.tool_run_id,
                                &true,
                            ],
                        )
                    };
                    let row = tx.query_one(sql, &args)?;
                    let doc = row.get::<_, Option<&str>>(0);
                    if !keeps {
                        replaced = doc
                            .and_then(|t| serde_json::from_str::<serde_json::Value>(t).ok())
                            .and_then(|v| serde_json::from_value::<Approval>(v["_superseded"].clone()).ok());
                    }
                    taken = doc.and_then(|t| serde_json::from_str::<Touched>(t).ok());
                }
                let taken_over = taken.is_some() && keeps;
                let touched = match taken {
                    Some(t) => t,
                    None => {
                        let row = tx.query_one(
                            "SELECT hr.approval_ask($1, $2, $3::text::jsonb, $4)::text",
                            &[&run, &cap, &fresh_json, &fresh_id],
                        )?;
                        match row
                            .get::<_, Option<&str>>(0)
                            .and_then(|t| serde_json::from_str::<Touched>(t).ok())
                        {
                            Some(t) => t,
                            None => return Ok(None),
                        }
                    }
                };
                let change = StatusChange::to(
                    RunStatus::WaitingApproval,
                    Some(format!(
                        "waiting for approval {}",
                        touched.approval.approval_id
                    )),
                );
                let moved = status(tx, run, &cap, &change, "not_final")?;
                superseded = replaced;
                Ok(Some((touched, taken_over, moved)))
            })?
            .ok_or_else(|| StoreError::Server("the approval was not recorded".into()))?;
        if !taken_over {
            fx.events.push(touched.approval.needed_event());
        }
        if let Some(old) = &superseded {
            fx.events.push(old.status_event());
        }
        if let Some(closed) = &touched.closed {
            fx.events.push(closed.event());
        }
        if let Some(m) = moved {
            fx.events.push(m.event());
            fx.status = Some(RunStatus::WaitingApproval);
        }
        Ok(Done {
            value: PromptResolution::Pending {
                approval: Box::new(touched.approval),
                taken_over,
            },
            effects: fx,
        })
    }

    fn cooperative(
        &mut self,
        who: &Asker,
        req: &CooperativeRequest,
        ttl: Option<Duration>,
        on_expire: OnExpire,
    ) -> StoreResult<Done<Cooperative>> {
        let run = who.tool_run_id.as_str();
        let cap = capability(run);
        let mut fx = Effects::default();
        let (fresh, prompt_fp) = super::asking::cooperative_approval(who, req, ttl, on_expire);
        let seen: Vec<Touched> = self.pg.docs(
            "SELECT x::text FROM hr.runner_approvals($1, $2, $3) x",
            &[&run, &cap, &prompt_fp],
        )?;
        if seen
            .iter()
            .any(|t| t.approval.consumed_by.as_deref() == Some(run))
        {
            return Ok(Done::quiet(Cooperative::AlreadyDecided));
        }
        // The tool may name its approval (an id of the usual shape, not taken): the server
        // falls back to a fresh id when it is taken.
        let mut wanted = fresh.clone();
        if let Some(w) = req
            .approval_id
            .as_deref()
            .map(str::to_ascii_uppercase)
            .filter(|w| crate::id::has_shape(w, crate::id::APPROVAL_PREFIX))
        {
            wanted.approval_id = w;
        }
        let a: Approval = self
            .pg
            .doc(
                "SELECT hr.approval_ask($1, $2, $3::text::jsonb, $4)::text",
                &[&run, &cap, &to_json(&wanted), &fresh.approval_id],
            )?
            .ok_or_else(|| StoreError::Server("the approval was not recorded".into()))?;
        fx.events.push(a.needed_event());
        self.wait_for(who, &cap, &a, &mut fx)?;
        Ok(Done {
            value: Cooperative::Pending(Box::new(a)),
            effects: fx,
        })
    }

    fn check_auto_approval(
        &mut self,
        who: &Asker,
        approval_id: &str,
        value: &str,
        resumed_from: Option<&str>,
    ) -> StoreResult<Done<Result<Approval, String>>> {
        let run = who.tool_run_id.as_str();
        let cap = capability(run);
        let a: Option<Approval> = self.pg.doc(
            "SELECT hr.runner_approval($1, $2, $3)::text",
            &[&run, &cap, &approval_id],
        )?;
        let verdict =
            super::asking::auto_approval_verdict(a.as_ref(), who, approval_id, value, resumed_from);
        if let Err(why) = verdict {
            return Ok(Done::quiet(Err(why)));
        }
        let Some(used) = self.pg.doc::<Touched>(
            "SELECT hr.approval_consume($1, $2, $3, NULL, true)::text",
            &[&run, &cap, &approval_id],
        )?
        else {
            return Ok(Done::quiet(Err(format!(
                "approval {approval_id} was already used"
            ))));
        };
        let mut fx = Effects::default();
        fx.events.extend(used.closed.as_ref().map(Moved::event));
        Ok(Done {
            value: Ok(a.unwrap_or(used.approval)),
            effects: fx,
        })
    }

    fn approval(&mut self, approval_id: &str) -> StoreResult<Option<Approval>> {
        let Some((run, cap)) = self.own() else {
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

/// `monitor`'s session: reads the tables, writes through the operator's functions. With a
/// runner login (the host's `monitor worker`), it sees and resumes that login's runs only,
/// through the worker's functions.
pub struct PgOperator {
    pg: PgStore,
    /// Whether the login reads the tables (operator, viewer); learnt on first use.
    reads_tables: Option<bool>,
}

impl PgOperator {
    pub fn new(url: &str) -> Self {
        PgOperator {
            pg: PgStore::new(url),
            reads_tables: None,
        }
    }

    /// Whether this login reads the tables, or is a runner's (a worker's) with functions only.
    fn reads_tables(&mut self) -> StoreResult<bool> {
        if let Some(r) = self.reads_tables {
            return Ok(r);
        }
        let r: bool = self
            .pg
            .tx(|tx| tx.query_one("SELECT has_table_privilege('hr.tool_runs', 'SELECT')", &[]))?
            .get(0);
        self.reads_tables = Some(r);
        Ok(r)
    }

    /// A worker's read of its login's runs (`hr.worker_runs`).
    fn worker_runs(&mut self, kind: &str, arg: Option<&str>) -> StoreResult<Vec<ToolRun>> {
        self.pg.docs(
            "SELECT x::text FROM hr.worker_runs($1, $2) x",
            &[&kind, &arg],
        )
    }

    fn expire(&mut self) -> StoreResult<Done<Vec<Approval>>> {
        let expired: Vec<Approval> = self.pg.docs("SELECT x::text FROM hr.expire_due() x", &[])?;
        let events = expired.iter().map(Approval::status_event).collect();
        Ok(Done::with_events(expired, events))
    }

    /// Audit rows matching `cond`, oldest first (at most `limit`).
    fn audit_rows(
        &mut self,
        cond: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> StoreResult<Vec<AuditRow>> {
        self.audit_rows_limited(cond, params, None)
    }

    fn audit_rows_limited(
        &mut self,
        cond: &str,
        params: &[&(dyn ToSql + Sync)],
        at_most: Option<usize>,
    ) -> StoreResult<Vec<AuditRow>> {
        let rows = self.pg.tx(|tx| {
            tx.query(
                &format!(
                    "SELECT id, at, event, tool_run_id, approval_id, actor, data, prev_hash, hash
                     FROM hr.events WHERE {cond} ORDER BY id{}",
                    limit(at_most)
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

    /// One boolean from an operator function.
    fn yes(&mut self, sql: &str, params: &[&(dyn ToSql + Sync)]) -> StoreResult<bool> {
        Ok(self.pg.tx(|tx| tx.query_one(sql, params))?.get(0))
    }
}

const RUN_DOC: &str = "hr.run_doc(r)::text";

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

fn from_value<T: serde::de::DeserializeOwned>(v: &serde_json::Value) -> StoreResult<T> {
    serde_json::from_value(v.clone())
        .map_err(|e| StoreError::Server(format!("unreadable row: {e}")))
}

impl OperatorStore for PgOperator {
    fn local(&mut self) -> Option<&mut dyn AdminStore> {
        Some(self)
    }

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
        if !self.reads_tables()? {
            return Ok(self.worker_runs("one", Some(tool_run_id))?.pop());
        }
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
        if !self.reads_tables()? {
            let mut runs = self.worker_runs("supervised", None)?;
            runs.truncate(limit_to.unwrap_or(usize::MAX));
            return Ok(runs);
        }
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
        if !self.reads_tables()? {
            return self.pg.doc(
                "SELECT x::text FROM hr.worker_approvals(NULL, $1) x",
                &[&approval_id],
            );
        }
        self.pg.doc(
            "SELECT to_jsonb(a)::text FROM hr.approvals a WHERE approval_id = $1",
            &[&approval_id],
        )
    }

    fn approvals(&mut self, filter: &ApprovalFilter) -> StoreResult<Vec<Approval>> {
        if !self.reads_tables()? {
            // A worker asks for one run's approvals.
            let run = filter.tool_run_id.as_deref();
            let all: Vec<Approval> = self.pg.docs(
                "SELECT x::text FROM hr.worker_approvals($1, NULL) x",
                &[&run],
            )?;
            return Ok(all
                .into_iter()
                .filter(|a| filter.statuses.is_empty() || filter.statuses.contains(&a.status))
                .take(filter.limit.unwrap_or(usize::MAX))
                .collect());
        }
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
        // Superseded, or not the version shown: said before the value is looked at (the
        // server refuses it again in the decision's transaction).
        if let Some(refused) = approvals::version_refusal(&current, who) {
            return Ok(Done::quiet(refused));
        }
        // A decision a server makes for a token: the token, too, must be among a pipeline
        // step's deciders (the login is checked whatever the channel says).
        let also = who.channel.strip_prefix("http:").map(|_| who.by);
        // Overdue: the server expires it whatever the value (and says so).
        let overdue = current.is_overdue(&time::now_rfc3339());
        let resolution = match approvals::value_decision(&current, value) {
            Ok(r) => r,
            Err(_) if overdue => ValueDecision {
                status: ApprovalStatus::Rejected,
                chosen_value: None,
            },
            Err(e) if current.status == ApprovalStatus::Pending => {
                return Ok(Done::quiet(DecideOutcome::Invalid(e)));
            }
            Err(_) => return Ok(Done::quiet(DecideOutcome::Conflict(Box::new(current)))),
        };
        let status = resolution.status.as_str();
        let mut closed = None;
        let doc: String = self.pg.tx(|tx| {
            let doc: String = tx
                .query_one(
                    "SELECT hr.decide($1, $2, $3, $4, $5, $6, $7)::text",
                    &[
                        &approval_id,
                        &status,
                        &resolution.chosen_value,
                        &who.comment,
                        &who.channel,
                        &who.version,
                        &also,
                    ],
                )?
                .get(0);
            // A pipeline's human step moves with its decision, in this transaction; under a
            // savepoint, so that whatever goes wrong there leaves the decision standing (the
            // runner then moves the step).
            closed = None;
            if let Ok(v) = serde_json::from_str::<serde_json::Value>(&doc)
                && v["outcome"] == "decided"
                && let Ok(a) = serde_json::from_value::<Approval>(v["approval"].clone())
            {
                let mut sp = tx.savepoint("pipeline_step")?;
                if let Ok(moved) = pipeline_decided(&mut sp, &a) {
                    sp.commit()?;
                    closed = moved;
                }
            }
            Ok(doc)
        })?;
        let doc: serde_json::Value = from_json(&doc)?;
        let Some(after) = doc.get("approval").filter(|a| !a.is_null()) else {
            return Ok(Done::quiet(DecideOutcome::NotFound));
        };
        let after: Approval = from_value(after)?;
        Ok(match doc.get("outcome").and_then(|o| o.as_str()) {
            Some("changed") => Done::quiet(DecideOutcome::Changed(Box::new(after))),
            Some("conflict") if after.superseded_by.is_some() => {
                Done::quiet(DecideOutcome::Conflict(Box::new(after)))
            }
            Some("decided") | Some("expired") => {
                let events = std::iter::once(after.status_event())
                    .chain(closed)
                    .collect();
                let decided = doc.get("outcome").and_then(|o| o.as_str()) == Some("decided");
                Done::with_events(
                    if decided {
                        DecideOutcome::Decided(Box::new(after))
                    } else {
                        DecideOutcome::Conflict(Box::new(after))
                    },
                    events,
                )
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
            Some(r) if !r.is_null() => Some(from_value(r)?),
            _ => None,
        };
        let Some(run) = run else {
            return Ok(Done::quiet(CancelOutcome::NotFound));
        };
        if doc.get("outcome").and_then(|o| o.as_str()) != Some("cancelled") {
            return Ok(Done::quiet(CancelOutcome::AlreadyFinal {
                run: Box::new(run),
            }));
        }
        let previous = doc
            .get("previous")
            .and_then(|p| p.as_str())
            .and_then(|p| p.parse().ok());
        let change = StatusChange::to(RunStatus::Cancelled, run.reason.clone());
        let mut events = vec![run.status_event(previous, &change)];
        let changed: Vec<Approval> = match doc.get("approvals") {
            Some(list) => from_value(list)?,
            None => Vec::new(),
        };
        events.extend(changed.iter().map(Approval::status_event));
        Ok(Done::with_events(
            CancelOutcome::Marked { run: Box::new(run) },
            events,
        ))
    }

    fn audit_of_run(&mut self, tool_run_id: &str) -> StoreResult<Vec<AuditRow>> {
        self.audit_rows("tool_run_id = $1", &[&tool_run_id])
    }

    fn audit_of_approval(&mut self, approval_id: &str) -> StoreResult<Vec<AuditRow>> {
        self.audit_rows("approval_id = $1", &[&approval_id])
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
}

impl WorkerStore for PgOperator {
    fn reconcile(
        &mut self,
        _actor: &str,
        host: &dyn HostFacts,
    ) -> StoreResult<Done<ReconcileReport>> {
        let live = self.supervised_runs(None)?;
        let mut report = ReconcileReport::default();
        let mut events = Vec::new();
        for run in live {
            let Some(why) = rules::vanished(&run, host) else {
                continue;
            };
            let seen = run.status.as_str();
            let doc: Option<String> = self
                .pg
                .tx(|tx| {
                    tx.query_one(
                        "SELECT hr.fail_vanished($1, $2, $3)::text",
                        &[&run.tool_run_id, &seen, &why],
                    )
                })?
                .get(0);
            let Some(doc) = doc else {
                continue;
            };
            let doc: serde_json::Value = from_json(&doc)?;
            let change = StatusChange {
                error: Some(why.clone()),
                ..StatusChange::to(RunStatus::Failed, Some(why.clone()))
            };
            let previous = doc
                .get("previous")
                .and_then(|p| p.as_str())
                .and_then(|p| p.parse().ok());
            events.push(run.status_event(previous, &change));
            let abandoned: Vec<Approval> = match doc.get("approvals") {
                Some(list) => from_value(list)?,
                None => Vec::new(),
            };
            events.extend(abandoned.iter().map(Approval::status_event));
            report.vanished.push((run.tool_run_id.clone(), why));
        }
        let expired = self.expire()?;
        report.expired = expired.value;
        events.extend(expired.effects.events);
        Ok(Done::with_events(report, events))
    }

    fn expire_due(&mut self) -> StoreResult<Done<Vec<Approval>>> {
        self.expire()
    }

    fn decided_parked(&mut self) -> StoreResult<Vec<ParkedRun>> {
        let parked: Vec<ToolRun> = if !self.reads_tables()? {
            self.worker_runs("parked", None)?
        } else {
            self.pg.docs(
                &format!(
                    "SELECT {RUN_DOC} FROM hr.tool_runs r
                 WHERE r.status = 'waiting_approval' AND r.exit_code = $1
                   AND EXISTS (SELECT 1 FROM hr.approvals a WHERE a.tool_run_id = r.tool_run_id
                     AND a.status <> 'pending' AND a.consumed_at IS NULL)
                 ORDER BY r.tool_run_id"
                ),
                &[&i32::from(crate::exit::shim::APPROVAL_PENDING)],
            )?
        };
        let mut out = Vec::with_capacity(parked.len());
        for run in parked {
            let all = self.approvals(&ApprovalFilter {
                tool_run_id: Some(run.tool_run_id.clone()),
                ..Default::default()
            })?;
            out.push(ParkedRun::of(run, all));
        }
        Ok(out)
    }

    fn resumes_of(&mut self, waiting_run: &str) -> StoreResult<Vec<ToolRun>> {
        if !self.reads_tables()? {
            return self.worker_runs("resumes", Some(waiting_run));
        }
        self.pg.docs(
            &format!(
                "SELECT {RUN_DOC} FROM hr.tool_runs r WHERE resumed_from = $1 ORDER BY tool_run_id"
            ),
            &[&waiting_run],
        )
    }

    fn identity(&mut self) -> StoreResult<String> {
        self.pg.login()
    }

    fn claim(&mut self, approval_id: &str, worker: &str) -> StoreResult<bool> {
        self.yes("SELECT hr.claim($1, $2)", &[&approval_id, &worker])
    }

    fn take_over_claim(&mut self, approval_id: &str, from: &str, to: &str) -> StoreResult<bool> {
        self.yes(
            "SELECT hr.take_over_claim($1, $2, $3)",
            &[&approval_id, &from, &to],
        )
    }

    fn set_resumed_run(&mut self, approval_id: &str, run: &str) -> StoreResult<()> {
        self.pg
            .tx(|tx| tx.execute("SELECT hr.set_resumed_run($1, $2)", &[&approval_id, &run]))?;
        Ok(())
    }

    fn close_run(
        &mut self,
        tool_run_id: &str,
        change: &StatusChange,
        _actor: &str,
        from: &[RunStatus],
    ) -> StoreResult<Done<Option<RunStatus>>> {
        let previous = self
            .pg
            .tx(|tx| close_run_in(tx, tool_run_id, change, from))?;
        let events = match (previous, self.run(tool_run_id)?) {
            (Some(prev), Some(run)) => vec![run.status_event(Some(prev), change)],
            _ => Vec::new(),
        };
        Ok(Done::with_events(previous, events))
    }

    fn consume(&mut self, approval_id: &str, by_run: &str, _actor: &str) -> StoreResult<bool> {
        self.yes("SELECT hr.consume($1, $2)", &[&approval_id, &by_run])
    }
}

impl AdminStore for PgOperator {
    fn gc_preview(&mut self, cutoff: &str) -> StoreResult<GcReport> {
        let rows = self.pg.tx(|tx| {
            let runs = tx.query(
                "SELECT tool_run_id FROM hr.tool_runs r
                 WHERE hr.is_final(status) AND coalesce(completed_at, updated_at) < $1
                   AND NOT EXISTS (SELECT 1 FROM hr.approvals k
                                   WHERE k.tool_run_id = r.tool_run_id AND k.kept_for IS NOT NULL)
                 ORDER BY tool_run_id",
                &[&cutoff],
            )?;
            let ids: Vec<String> = runs.iter().map(|r| r.get(0)).collect();
            let n = tx.query_one(
                "SELECT count(*) FROM hr.approvals WHERE status <> 'pending' AND tool_run_id = ANY($1)",
                &[&ids],
            )?;
            Ok((ids, n.get::<_, i64>(0)))
        })?;
        Ok(GcReport {
            runs: rows.0,
            approvals: rows.1 as usize,
        })
    }

    fn gc(&mut self, cutoff: &str, _actor: &str) -> StoreResult<GcReport> {
        let doc: String = self
            .pg
            .tx(|tx| tx.query_one("SELECT hr.gc($1)::text", &[&cutoff]))?
            .get(0);
        let doc: serde_json::Value = from_json(&doc)?;
        Ok(GcReport {
            runs: doc
                .get("runs")
                .map(from_value)
                .transpose()?
                .unwrap_or_default(),
            approvals: doc.get("approvals").and_then(|n| n.as_u64()).unwrap_or(0) as usize,
        })
    }

    fn remember(
        &mut self,
        tool: &str,
        prompt_fingerprint: &str,
        scope: &RememberScope,
        value: &str,
        approval_id: &str,
        _by: &str,
    ) -> StoreResult<RememberedPolicy> {
        let id = crate::id::new_id("PO-");
        let argv = scope.argv.as_ref().map(to_json);
        self.pg
            .doc(
                "SELECT hr.remember($1, $2, $3, $4::text::jsonb, $5, $6, $7)::text",
                &[
                    &id,
                    &tool,
                    &prompt_fingerprint,
                    &argv,
                    &scope.cwd,
                    &value,
                    &approval_id,
                ],
            )?
            .ok_or_else(|| StoreError::Server("the decision was not remembered".into()))
    }

    fn remembered(&mut self) -> StoreResult<Vec<RememberedPolicy>> {
        self.pg.docs(
            "SELECT to_jsonb(p)::text FROM hr.policies p
             WHERE enabled AND source = 'remembered' ORDER BY created_at DESC, policy_id DESC",
            &[],
        )
    }

    fn forget(&mut self, policy_id: &str, _by: &str) -> StoreResult<Option<RememberedPolicy>> {
        self.pg.doc("SELECT hr.forget($1)::text", &[&policy_id])
    }

    fn audit_after(&mut self, after: i64, limit: usize) -> StoreResult<Vec<AuditRow>> {
        self.audit_rows_limited("id > $1", &[&after], Some(limit))
    }

    fn audit_head_id(&mut self) -> StoreResult<i64> {
        Ok(self
            .pg
            .tx(|tx| tx.query_one("SELECT coalesce(max(id), 0) FROM hr.events", &[]))?
            .get(0))
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

// ------------------------------------------------------------------------------------------
// Pipelines (`monitor pipeline`): a runner login's session starts and moves its executions;
// an operator's reads them and cancels. What each may do is checked by `hr.pipeline_*`.

/// After an operator's decision, in its transaction: the pipeline human step it answers
/// moves (`hr.pipeline_decided` checks it), the run the step asked in ends and the approval
/// is used up. The run's end event, when it moved.
fn pipeline_decided(
    tx: &mut postgres::Transaction<'_>,
    a: &Approval,
) -> Result<Option<LogEvent>, postgres::Error> {
    let row = tx.query_opt(
        "SELECT hr.run_doc(r)::text FROM hr.tool_runs r WHERE tool_run_id = $1",
        &[&a.tool_run_id],
    )?;
    let Some(run) = row
        .and_then(|r| r.get::<_, Option<String>>(0))
        .and_then(|t| serde_json::from_str::<ToolRun>(&t).ok())
    else {
        return Ok(None);
    };
    let Some((exid, node, iteration)) = crate::pipeline::step_of(&run) else {
        return Ok(None);
    };
    let Some(ex) = tx
        .query_opt(
            "SELECT x::text FROM hr.pipeline_docs($1, false, 1) x",
            &[&exid],
        )?
        .and_then(|r| r.get::<_, Option<String>>(0))
        .and_then(|t| serde_json::from_str::<super::pipelines::Execution>(&t).ok())
    else {
        return Ok(None);
    };
    let Ok(Some(moved)) = crate::pipeline::decided(&ex, a, &node, iteration) else {
        return Ok(None);
    };
    let moved_it: bool = tx
        .query_one(
            "SELECT hr.pipeline_decided($1, $2::text::jsonb)",
            &[&a.approval_id, &to_json(&moved)],
        )?
        .get(0);
    if !moved_it {
        return Ok(None);
    }
    let change = crate::pipeline::closing(a);
    let previous = close_question(tx, &run.tool_run_id, Some(&a.approval_id), &change)?;
    Ok(previous.map(|p| run.status_event(Some(p), &change)))
}

/// `hr.close_run`: the run's status before, when the guard `from` let the change through.
fn close_run_in(
    tx: &mut postgres::Transaction<'_>,
    tool_run_id: &str,
    change: &StatusChange,
    from: &[RunStatus],
) -> Result<Option<RunStatus>, postgres::Error> {
    let from: Vec<&str> = from.iter().map(|s| s.as_str()).collect();
    let previous: Option<String> = tx
        .query_one(
            "SELECT hr.close_run($1, $2, $3, $4, $5, $6, $7, $8)",
            &[
                &tool_run_id,
                &change.status.as_str(),
                &change.reason,
                &change.exit_code,
                &change.finished,
                &change.error,
                &change.at,
                &from,
            ],
        )?
        .get(0);
    Ok(previous.and_then(|p| p.parse().ok()))
}

/// Ends the parked run a pipeline's human step asked in, using up its approval first.
fn close_question(
    tx: &mut postgres::Transaction<'_>,
    tool_run_id: &str,
    approval_id: Option<&str>,
    change: &StatusChange,
) -> Result<Option<RunStatus>, postgres::Error> {
    if let Some(a) = approval_id {
        tx.query_one("SELECT hr.consume($1, $2)", &[&a, &tool_run_id])?;
    }
    close_run_in(tx, tool_run_id, change, &[RunStatus::WaitingApproval])
}

impl super::pipelines::PipelineStore for PgRunner {
    fn identity(&mut self) -> StoreResult<String> {
        self.pg.login()
    }

    fn pipeline_insert(&mut self, ex: &super::pipelines::Execution) -> StoreResult<bool> {
        let doc = to_json(ex);
        Ok(self
            .pg
            .tx(|tx| tx.query_one("SELECT hr.pipeline_insert($1::text::jsonb)", &[&doc]))?
            .get(0))
    }

    fn pipeline(&mut self, execution_id: &str) -> StoreResult<Option<super::pipelines::Execution>> {
        self.pg.doc(
            "SELECT x::text FROM hr.pipeline_docs($1, false, 1) x",
            &[&execution_id],
        )
    }

    fn pipelines(&mut self, limit: usize) -> StoreResult<Vec<super::pipelines::Execution>> {
        let limit = i32::try_from(limit).unwrap_or(i32::MAX);
        self.pg.docs(
            "SELECT x::text FROM hr.pipeline_docs(NULL, false, $1) x",
            &[&limit],
        )
    }

    fn open_pipelines(&mut self, limit: usize) -> StoreResult<Vec<super::pipelines::Execution>> {
        let limit = i32::try_from(limit).unwrap_or(i32::MAX);
        self.pg.docs(
            "SELECT x::text FROM hr.pipeline_docs(NULL, true, $1) x",
            &[&limit],
        )
    }

    fn pipeline_swap(&mut self, ex: &super::pipelines::Execution) -> StoreResult<bool> {
        let doc = to_json(ex);
        Ok(self
            .pg
            .tx(|tx| tx.query_one("SELECT hr.pipeline_swap($1::text::jsonb)", &[&doc]))?
            .get(0))
    }

    fn execution_runs(&mut self, execution_id: &str) -> StoreResult<Vec<ToolRun>> {
        self.pg.docs(
            "SELECT x::text FROM hr.execution_runs($1) x",
            &[&execution_id],
        )
    }

    fn approvals_of_run(&mut self, tool_run_id: &str) -> StoreResult<Vec<Approval>> {
        self.pg.docs(
            "SELECT x::text FROM hr.step_approvals($1, NULL) x",
            &[&tool_run_id],
        )
    }

    /// Read by any session of the login (the runner's own read needs the capability of the
    /// one run its process started; a resumer has none).
    fn step_approval(&mut self, approval_id: &str) -> StoreResult<Option<Approval>> {
        self.pg.doc(
            "SELECT x::text FROM hr.step_approvals(NULL, $1) x",
            &[&approval_id],
        )
    }

    fn withdraw_step_question(
        &mut self,
        tool_run_id: &str,
        why: &str,
        _actor: &str,
    ) -> StoreResult<()> {
        self.pg.tx(|tx| {
            tx.query(
                "SELECT x::text FROM hr.pipeline_withdraw($1, $2) x",
                &[&tool_run_id, &why],
            )
        })?;
        Ok(())
    }

    /// Through the worker's functions (this login's parked runs), so that a resumer, which
    /// has no capability for the run another process asked in, closes it too.
    fn close_step_run(
        &mut self,
        tool_run_id: &str,
        approval_id: Option<&str>,
        change: StatusChange,
        _actor: &str,
    ) -> StoreResult<()> {
        self.pg
            .tx(|tx| close_question(tx, tool_run_id, approval_id, &change))?;
        Ok(())
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
    fn pgpass_lines_match_as_libpq_reads_them() {
        let text = "# comment\n\
            db.internal:5432:other:ci:wrong\n\
            db.internal:*:headless:ci:pa\\:ss\\\\word\n\
            *:*:*:*:fallback\n";
        assert_eq!(
            pgpass_lookup(text, ["db.internal", "5432", "headless", "ci"]).as_deref(),
            Some("pa:ss\\word")
        );
        assert_eq!(
            pgpass_lookup(text, ["elsewhere", "5432", "x", "y"]).as_deref(),
            Some("fallback")
        );
        assert_eq!(pgpass_lookup("a:1:b:c\n", ["a", "1", "b", "c"]), None);
    }

    #[test]
    fn tls_parameters_are_taken_out_of_the_url() {
        assert_eq!(
            split_tls(
                "postgres://h/d?sslmode=verify-full&application_name=x&sslrootcert=%2Fetc%2Fca.pem"
            ),
            (
                "postgres://h/d?application_name=x".to_owned(),
                Some("verify-full".to_owned()),
                Some("/etc/ca.pem".to_owned())
            )
        );
        assert_eq!(
            split_tls("postgres://h/d?sslmode=disable"),
            (
                "postgres://h/d".to_owned(),
                Some("disable".to_owned()),
                None
            )
        );
        assert_eq!(split_tls("postgres://h/d").0, "postgres://h/d");
        assert!(tls_for("prefer", None).unwrap().is_none());
        assert!(tls_for("sometimes", None).is_err());
        assert!(tls_for("verify-full", Some("/nonexistent/ca.pem")).is_err());
    }

    #[test]
    fn a_childs_url_carries_what_the_environment_added_and_nothing_the_url_says() {
        let parse = |u: &str| postgres::Config::from_str(&split_tls(u).0).unwrap();
        // What the environment gave this process (PGUSER, PGPASSWORD, PGHOST as a socket
        // directory, PGPORT, PGDATABASE, the connect timeout).
        let mut full = parse("postgres:///?connect_timeout=5");
        full.user("ci runner")
            .password("p@ss&w=rd/é")
            .host_path("/var/run/postgresql")
            .port(5433)
            .dbname("hr");
        let given = parse("postgres://");
        let url = pin(
            "postgres://",
            &given,
            &full,
            &[
                ("sslmode", Some("verify-full".into())),
                ("sslrootcert", None),
            ],
        );
        assert_eq!(
            url,
            "postgres://?user=ci%20runner&password=p%40ss%26w%3Drd%2F%C3%A9\
             &host=%2Fvar%2Frun%2Fpostgresql&port=5433&dbname=hr&connect_timeout=5&sslmode=verify-full"
        );
        // Read back, it is the same login on the same server, whatever a child's PG* say.
        let back = parse(&url);
        assert_eq!(back.get_user(), Some("ci runner"));
        assert_eq!(back.get_password(), Some("p@ss&w=rd/é".as_bytes()));
        assert_eq!(
            back.get_hosts(),
            [postgres::config::Host::Unix("/var/run/postgresql".into())]
        );
        assert_eq!(back.get_ports(), [5433]);
        assert_eq!(back.get_dbname(), Some("hr"));
        assert_eq!(split_tls(&url).1.as_deref(), Some("verify-full"));
        // What the URL says stays as it is; only its gaps are filled.
        let said = "postgres://ci@db.internal/headless?sslmode=require";
        let mut full = parse(said);
        full.password("pw")
            .connect_timeout(std::time::Duration::from_secs(5));
        assert_eq!(
            pin(said, &parse(said), &full, &[]),
            "postgres://ci@db.internal/headless?sslmode=require&password=pw&connect_timeout=5"
        );
        assert_eq!(
            without_password(&pin(said, &parse(said), &full, &[])),
            "postgres://ci@db.internal/headless?sslmode=require&password=***&connect_timeout=5"
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
