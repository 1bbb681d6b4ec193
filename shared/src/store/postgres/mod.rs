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

use super::asking::approval_for;
use super::{
    AdminStore, Asker, Cooperative, Counts, Done, Effects, OperatorStore, PromptRequest,
    PromptResolution, Recorded, RememberScope, Replace, RunWrite, RunnerStore, StoreError,
    StoreHealth, StoreResult, WorkerStore,
};
use crate::answering::{self, Ask};
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
pub const SCHEMA_VERSION: i64 = 8;

/// The schema's tables, as an append-only list: entry N brings a database from version N to
/// N+1 (its tables, indexes and columns, and the function signatures it replaced or
/// removed). The functions are not here: see [`FUNCTIONS`].
const MIGRATIONS: &[&str] = &[
    include_str!("../pg/v1.sql"),
    include_str!("../pg/v2.sql"),
    include_str!("../pg/v3.sql"),
    include_str!("../pg/v4.sql"),
    include_str!("../pg/v5.sql"),
    include_str!("../pg/v6.sql"),
    include_str!("../pg/v7.sql"),
    include_str!("../pg/v8.sql"),
];

/// Every function of the schema, each with its one live definition, by what calls it:
/// helpers and the audit chain, a decision's chain, the runner, the worker, the operator,
/// pipelines; then the triggers that call them. Applied after the migrations on every
/// `db init` (`CREATE OR REPLACE`), so a database of any version ends with these. A
/// function whose signature changes is dropped by the migration of the version that
/// changes it; one whose body changes needs a new version too (a migration with no
/// statement), so that clients of the older build refuse the newer schema.
const FUNCTIONS: &[&str] = &[
    include_str!("../pg/functions/core.sql"),
    include_str!("../pg/functions/chain.sql"),
    include_str!("../pg/functions/runner.sql"),
    include_str!("../pg/functions/worker.sql"),
    include_str!("../pg/functions/operator.sql"),
    include_str!("../pg/functions/pipelines.sql"),
    include_str!("../pg/functions/triggers.sql"),
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
        .ok()
        .and_then(|m| m.get(run_id).cloned())
        .or_else(|| derived_capability(run_id))
        .unwrap_or_default()
}

/// The key this process derives its runs' capabilities from, when it has one (`monitor
/// serve` with `--runner-db`: a key of its state dir, the same for every server of that
/// state dir): a run's capability is then the same in every server process, so the runner
/// API behind a balancer may send a run's writes to any of them. Never sent to a client,
/// never given to a tool.
static CAPABILITY_KEY: std::sync::OnceLock<[u8; 32]> = std::sync::OnceLock::new();

/// Derives this process's run capabilities from `key` (see [`CAPABILITY_KEY`]); the first
/// key set stays.
pub fn derive_capabilities_from(key: [u8; 32]) {
    let _ = CAPABILITY_KEY.set(key);
}

/// The capability key of the state dir `root` (`capability.key`, 32 random bytes, 0600, the
/// caller's own and no link), made on first use: published whole by a link, so a server
/// starting beside another reads the one the first made, never half of it.
pub fn capability_key(root: &std::path::Path) -> std::io::Result<[u8; 32]> {
    use std::io::{Read, Write};
    use std::os::unix::fs::OpenOptionsExt;
    let path = root.join("capability.key");
    let read = |path: &std::path::Path| -> std::io::Result<[u8; 32]> {
        let mut f = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(path)?;
        let meta = f.metadata()?;
        if let Some(why) = crate::paths::not_own(path, &meta, false) {
            return Err(std::io::Error::other(why));
        }
        let mut key = [0u8; 32];
        f.read_exact(&mut key)?;
        Ok(key)
    };
    match read(&path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        other => return other,
    }
    let key = runner::random_key();
    let tmp = root.join(format!("capability.key.{}", std::process::id()));
    let _ = std::fs::remove_file(&tmp);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(&tmp)?;
    f.write_all(&key)?;
    f.sync_all()?;
    drop(f);
    let linked = std::fs::hard_link(&tmp, &path);
    let _ = std::fs::remove_file(&tmp);
    match linked {
        Ok(()) => Ok(key),
        // Another server made it first: that one.
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => read(&path),
        Err(e) => Err(e),
    }
}

/// Run `run_id`'s capability from this process's key: HMAC-SHA-256 of the id, as hex.
fn derived_capability(run_id: &str) -> Option<String> {
    let key = CAPABILITY_KEY.get()?;
    Some(crate::audit::hex(&hmac_sha256(key, run_id.as_bytes())))
}

/// HMAC-SHA-256 (RFC 2104) of `msg` under a 32-byte `key`.
fn hmac_sha256(key: &[u8; 32], msg: &[u8]) -> [u8; 32] {
    use sha2::{Digest, Sha256};
    let mut inner_pad = [0x36u8; 64];
    let mut outer_pad = [0x5cu8; 64];
    for (i, k) in key.iter().enumerate() {
        inner_pad[i] ^= k;
        outer_pad[i] ^= k;
    }
    let inner = Sha256::new()
        .chain_update(inner_pad)
        .chain_update(msg)
        .finalize();
    Sha256::new()
        .chain_update(outer_pad)
        .chain_update(inner)
        .finalize()
        .into()
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

/// What a transaction may hand out: values read from its rows, never a `postgres::Row`.
/// A row keeps the statement it came from until it is dropped, and the statement's close
/// goes out then: after the commit, outside the transaction. Through a transaction pooler
/// (PgBouncer) that close reaches whichever server connection the pooler picks next, and
/// the named statement (`s12`) stays prepared on the one that ran it, where another
/// client's `s12` then fails ("prepared statement already exists"). A `Row` is not
/// `Serialize`, so returning one from [`PgStore::tx`] does not compile.
pub(super) trait Detached {}
impl<T: serde::Serialize> Detached for T {}

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
    ///
    /// What `f` returns is [`Detached`]: values read from rows, never a `Row`.
    fn tx<T: Detached>(
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

    /// One statement on its own, committed by itself, in one round trip: an unnamed
    /// statement whose parameters' types are given (`query_typed`), so nothing is prepared,
    /// closed or left on a pooled server connection, and no `BEGIN` or `COMMIT` (a
    /// heartbeat in a transaction was four round trips, each through the pooler). Only for
    /// a statement that may run twice: a connection found closed is opened again and the
    /// statement sent once more. `read` takes what is needed from its one row.
    fn once<T: Detached>(
        &mut self,
        sql: &str,
        params: &[(&(dyn ToSql + Sync), postgres::types::Type)],
        read: impl Fn(&postgres::Row) -> T,
    ) -> StoreResult<T> {
        let mut again = 0;
        loop {
            match self.client()?.query_typed(sql, params) {
                Ok(rows) => {
                    return rows.first().map(&read).ok_or_else(|| {
                        StoreError::Server(format!("no row from the server for {sql}"))
                    });
                }
                Err(e) => {
                    let closed = self.client.as_ref().is_none_or(|c| c.is_closed());
                    if closed {
                        self.client = None;
                    }
                    if again < 3 && (closed || retryable(&e)) {
                        again += 1;
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
        self.tx(|tx| Ok(tx.query_one("SELECT session_user::text", &[])?.get(0)))
    }

    /// Rows of one text column (JSON documents), parsed.
    fn docs<T: serde::de::DeserializeOwned>(
        &mut self,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> StoreResult<Vec<T>> {
        let texts: Vec<String> = self.tx(|tx| {
            Ok(tx
                .query(sql, params)?
                .iter()
                .map(|r| r.get::<_, String>(0))
                .collect())
        })?;
        texts.iter().map(|t| from_json(t)).collect()
    }

    fn doc<T: serde::de::DeserializeOwned>(
        &mut self,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> StoreResult<Option<T>> {
        let text = self.tx(|tx| {
            Ok(tx
                .query_opt(sql, params)?
                .and_then(|r| r.get::<_, Option<String>>(0)))
        })?;
        match text {
            Some(text) => from_json(&text).map(Some),
            None => Ok(None),
        }
    }
}

impl PgStore {
    fn change_mark(&mut self) -> StoreResult<u64> {
        let v: i64 = self.tx(|tx| Ok(tx.query_one("SELECT hr.change_mark()", &[])?.get(0)))?;
        Ok(v as u64)
    }
}

mod admin;
mod listen;
mod operator;
mod pipelines;
mod runner;

pub use admin::*;
pub use listen::*;
pub use operator::*;
use pipelines::*;
pub use runner::*;

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 4231 test case 2 (a key shorter than the block is padded with zeros, as here).
    #[test]
    fn hmac_sha256_is_rfc_4231s() {
        let mut key = [0u8; 32];
        key[..4].copy_from_slice(b"Jefe");
        assert_eq!(
            crate::audit::hex(&hmac_sha256(&key, b"what do ya want for nothing?")),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }

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
