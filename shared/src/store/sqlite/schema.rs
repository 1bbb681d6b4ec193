//! Opening the shared SQLite database: WAL mode, `synchronous=NORMAL`, a 10 s busy timeout,
//! `BEGIN IMMEDIATE` for every write, and the schema migrated forward by `user_version`.

use crate::paths;
use rusqlite::{Connection, OpenFlags, Transaction, TransactionBehavior};
use std::path::Path;
use std::time::Duration;

/// How long a writer waits for the lock before giving up.
pub const BUSY_TIMEOUT: Duration = Duration::from_secs(10);

/// The schema, as an append-only list: entry N brings a database from version N to N+1.
/// Never edit an entry that has shipped; add a new one.
const MIGRATIONS: &[&str] = &[
    // v1: runs, approvals, the audit chain and stored policies.
    r#"
    CREATE TABLE tool_runs (
        tool_run_id             TEXT PRIMARY KEY,
        tool_name               TEXT NOT NULL,
        execution_id            TEXT,
        status                  TEXT NOT NULL,
        reason                  TEXT,
        exit_code               INTEGER,
        started_at              TEXT NOT NULL,
        completed_at            TEXT,
        last_output_at          TEXT,
        last_heartbeat_at       TEXT,
        supervisor_heartbeat_at TEXT,
        last_error_msg          TEXT,
        pid                     INTEGER,
        shim_pid                INTEGER,
        shim_start_time         INTEGER,
        host                    TEXT,
        argv_json               TEXT NOT NULL DEFAULT '[]',
        cwd                     TEXT,
        resumed_from            TEXT,
        metadata                TEXT,
        updated_at              TEXT NOT NULL
    );
    CREATE INDEX tool_runs_status ON tool_runs(status);
    CREATE INDEX tool_runs_tool ON tool_runs(tool_name, tool_run_id);
    CREATE INDEX tool_runs_execution ON tool_runs(execution_id);

    CREATE TABLE approvals (
        approval_id         TEXT PRIMARY KEY,
        tool_run_id         TEXT NOT NULL,
        tool_name           TEXT NOT NULL,
        execution_id        TEXT,
        question            TEXT NOT NULL,
        context             TEXT,
        options_json        TEXT NOT NULL DEFAULT '[]',
        default_value       TEXT,
        allows_text         INTEGER NOT NULL DEFAULT 0,
        status              TEXT NOT NULL,
        chosen_value        TEXT,
        created_at          TEXT NOT NULL,
        decided_at          TEXT,
        expires_at          TEXT,
        decided_by          TEXT,
        decision_channel    TEXT,
        comment             TEXT,
        request_fingerprint TEXT,
        prompt_fingerprint  TEXT,
        consumed_at         TEXT,
        prompt_kind         TEXT,
        claimed_by          TEXT,
        claimed_at          TEXT,
        resumed_run_id      TEXT
    );
    CREATE INDEX approvals_status ON approvals(status);
    CREATE INDEX approvals_run ON approvals(tool_run_id);
    CREATE INDEX approvals_request ON approvals(request_fingerprint);

    CREATE TABLE events (
        id          INTEGER PRIMARY KEY AUTOINCREMENT,
        at          TEXT NOT NULL,
        event       TEXT NOT NULL,
        tool_run_id TEXT,
        approval_id TEXT,
        actor       TEXT NOT NULL,
        data        TEXT NOT NULL,
        prev_hash   TEXT NOT NULL,
        hash        TEXT NOT NULL
    );
    CREATE INDEX events_run ON events(tool_run_id);

    CREATE TABLE policies (
        policy_id          TEXT PRIMARY KEY,
        name               TEXT NOT NULL,
        tool_name          TEXT,
        prompt_fingerprint TEXT,
        prompt_regex       TEXT,
        conditions_json    TEXT NOT NULL DEFAULT '[]',
        value              TEXT NOT NULL,
        source             TEXT NOT NULL,
        source_approval_id TEXT,
        created_at         TEXT NOT NULL,
        created_by         TEXT NOT NULL,
        enabled            INTEGER NOT NULL DEFAULT 1
    );
    "#,
    // v2: what an approval needs to be answered and expired without the config that made
    // it (the rule, the prompt line, the expiry action), who consumed it, and lookups by
    // fingerprint for resumes and remembered decisions.
    r#"
    ALTER TABLE approvals ADD COLUMN prompt_line TEXT;
    ALTER TABLE approvals ADD COLUMN rule_name TEXT;
    ALTER TABLE approvals ADD COLUMN expire_action TEXT NOT NULL DEFAULT 'reject';
    ALTER TABLE approvals ADD COLUMN consumed_by TEXT;
    CREATE INDEX approvals_resume ON approvals(request_fingerprint, prompt_fingerprint);
    CREATE INDEX approvals_expiry ON approvals(status, expires_at);
    CREATE INDEX policies_lookup ON policies(tool_name, prompt_fingerprint);
    CREATE INDEX tool_runs_started ON tool_runs(started_at);
    "#,
    // v3: the runs a shim should still be supervising (no exit code recorded yet), so that
    // reconciliation and the dashboard find them without reading every parked or
    // stall-ended run.
    r#"
    CREATE INDEX tool_runs_supervised ON tool_runs(status) WHERE exit_code IS NULL;
    "#,
    // v4: the runs that have not ended, so the dashboard's live counts (read on every change
    // of the database) cost what the live runs cost, not every stall-ended run in history;
    // and the failed runs by end (or start) time, so the recent failures are a range, not
    // every failure in history looked up in the table. Partial, so that only a query that
    // names these statuses can use it (a full index on status and time took the plan of the
    // supervised runs' query away from its own partial index).
    r#"
    CREATE INDEX tool_runs_open ON tool_runs(status) WHERE completed_at IS NULL;
    CREATE INDEX tool_runs_failed ON tool_runs(status, COALESCE(completed_at, started_at))
        WHERE status IN ('failed', 'failed_timeout', 'stalled');
    "#,
    // v5: repairs what upgrades left behind (found by the old-state fixtures). The v4
    // entry was edited after it shipped, so a database migrated by the first v4 build has
    // no `tool_runs_failed` (and one from the build between has the since-dropped
    // `tool_runs_status_end`); and the first builds ended stall-killed runs (exit 92)
    // without `completed_at`, which reads as a live stall for ever.
    r#"
    DROP INDEX IF EXISTS tool_runs_status_end;
    CREATE INDEX IF NOT EXISTS tool_runs_failed ON tool_runs(status, COALESCE(completed_at, started_at))
        WHERE status IN ('failed', 'failed_timeout', 'stalled');
    UPDATE tool_runs SET completed_at = updated_at
        WHERE status = 'stalled' AND exit_code IS NOT NULL AND completed_at IS NULL;
    "#,
    // v6: a remembered decision's scope — the command line and directory it was made in
    // (NULL: any; decisions remembered before keep the reach they were made with); and the
    // digest of the screen an approval was asked on, and of the tool that asked (its
    // executable and script), which a decision is bound to.
    r#"
    ALTER TABLE policies ADD COLUMN argv_json TEXT;
    ALTER TABLE policies ADD COLUMN cwd TEXT;
    ALTER TABLE approvals ADD COLUMN screen_digest TEXT;
    ALTER TABLE approvals ADD COLUMN tool_digest TEXT;
    "#,
    // v7: pipelines (`monitor pipeline`): one row per execution, its checked definition,
    // variables and steps as JSON, moved only by a compare-and-swap on `version`, so that
    // of two runners (or resumers) exactly one moves it.
    r#"
    CREATE TABLE pipelines (
        execution_id TEXT PRIMARY KEY,
        name         TEXT NOT NULL,
        file         TEXT,
        dir          TEXT NOT NULL,
        definition   TEXT NOT NULL,
        vars         TEXT NOT NULL,
        steps        TEXT NOT NULL,
        status       TEXT NOT NULL,
        reason       TEXT,
        runner       TEXT,
        heartbeat_at TEXT,
        created_at   TEXT NOT NULL,
        updated_at   TEXT NOT NULL,
        version      INTEGER NOT NULL
    );
    CREATE INDEX pipelines_created ON pipelines(created_at);
    "#,
    // v8: who started each run and execution, as the store authenticated the session that
    // wrote it (DESIGN §14: set by the store, never taken from a client's row; only that
    // identity runs its command again), an execution's pinned definition digest and its
    // starter's uid; and the approval that replaced one whose screen changed.
    r#"
    ALTER TABLE tool_runs ADD COLUMN owner TEXT;
    ALTER TABLE approvals ADD COLUMN superseded_by TEXT;
    ALTER TABLE approvals ADD COLUMN supersedes TEXT;
    ALTER TABLE pipelines ADD COLUMN owner TEXT;
    ALTER TABLE pipelines ADD COLUMN uid INTEGER;
    ALTER TABLE pipelines ADD COLUMN definition_digest TEXT;
    ALTER TABLE pipelines ADD COLUMN workers TEXT;
    "#,
    // v9: a decision stays with its run (issue 26, `store::sqlite::chain`): the run of its chain
    // whose resume may use it again (`kept_for`, while the chain is live), and why it is
    // spent once it is (`consumed_reason`). Decisions used before stay spent (no reason).
    // The unused decisions of a command (what a starting run looks at to learn whether it
    // is a parked run's resume), and runs by the run they resume, for the chain's look at
    // a run's running resume.
    r#"
    ALTER TABLE approvals ADD COLUMN kept_for TEXT;
    ALTER TABLE approvals ADD COLUMN consumed_reason TEXT;
    CREATE INDEX approvals_kept ON approvals(kept_for) WHERE kept_for IS NOT NULL;
    CREATE INDEX approvals_fresh ON approvals(request_fingerprint)
        WHERE consumed_at IS NULL AND status != 'pending';
    CREATE INDEX tool_runs_resumed ON tool_runs(resumed_from) WHERE resumed_from IS NOT NULL;
    "#,
    // v10: repairs what the first builds of v6, v7, v8 and v9 did not make (those entries
    // were changed after they shipped): the columns `approvals.screen_digest` and
    // `tool_digest` (v6), `pipelines.dir` (v7), `pipelines.workers` and
    // `approvals.supersedes` (v8) — added in Rust before this entry ([`REPAIRS`]), since
    // SQLite cannot add a column only where it is missing — and the index of a command's
    // unused decisions (v9).
    r#"
    CREATE INDEX IF NOT EXISTS approvals_fresh ON approvals(request_fingerprint)
        WHERE consumed_at IS NULL AND status != 'pending';
    "#,
    // v11: required reviewers and wait timers (`crate::reviews`): how many distinct people
    // must approve, of which group, how long an approved decision is held, the approvals
    // given so far (JSON), and when a held decision will be used.
    r#"
    ALTER TABLE approvals ADD COLUMN reviews_required INTEGER NOT NULL DEFAULT 1;
    ALTER TABLE approvals ADD COLUMN reviewer_group TEXT;
    ALTER TABLE approvals ADD COLUMN wait_seconds INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE approvals ADD COLUMN reviews TEXT NOT NULL DEFAULT '[]';
    ALTER TABLE approvals ADD COLUMN usable_at TEXT;
    CREATE INDEX approvals_held ON approvals(usable_at) WHERE usable_at IS NOT NULL;
    "#,
    // v12: an execution's steps as rows (issue 31), one per step, each with the version of
    // the execution that last wrote it: a step's write touches its own row, and a runner
    // reads only the rows written since it last looked, however long the execution is.
    // Rows whose `steps` column is a JSON array move there (`steps_in_rows`); one that is
    // not keeps it, and still reads as the failed execution it was; an element that is no
    // object moves as `null`, which reads so too. The column is renamed `steps_json`: a
    // build from before this version, still running while the database is migrated, fails
    // on it ("no such column") instead of reading an execution with no steps as completed.
    r#"
    ALTER TABLE pipelines ADD COLUMN steps_in_rows INTEGER NOT NULL DEFAULT 0;
    CREATE TABLE pipeline_steps (
        execution_id TEXT NOT NULL,
        idx          INTEGER NOT NULL,
        version      INTEGER NOT NULL,
        body         TEXT NOT NULL,
        PRIMARY KEY (execution_id, idx)
    ) WITHOUT ROWID;
    CREATE INDEX pipeline_steps_version ON pipeline_steps(execution_id, version);
    INSERT INTO pipeline_steps (execution_id, idx, version, body)
        SELECT p.execution_id, CAST(j.key AS INTEGER), p.version,
               CASE WHEN j.type = 'object' THEN j.value ELSE 'null' END
        FROM pipelines p,
             json_each(CASE WHEN json_valid(p.steps)
                            THEN (CASE WHEN json_type(p.steps) = 'array' THEN p.steps ELSE '[]' END)
                            ELSE '[]' END) j;
    UPDATE pipelines SET steps = '[]', steps_in_rows = 1
        WHERE CASE WHEN json_valid(steps) THEN json_type(steps) = 'array' ELSE 0 END;
    ALTER TABLE pipelines RENAME COLUMN steps TO steps_json;
    "#,
];

/// Columns a database may lack although its version says it has them (the first builds of
/// v6, v7 and v8 shipped shorter tables than the final ones): table, column, declaration as
/// the final migration made it (a `NOT NULL` one with a default for the rows it finds).
/// Added by the v10 migration where missing.
const REPAIRS: &[(&str, &str, &str)] = &[
    ("approvals", "screen_digest", "TEXT"),
    ("approvals", "tool_digest", "TEXT"),
    ("pipelines", "dir", "TEXT NOT NULL DEFAULT ''"),
    ("pipelines", "workers", "TEXT"),
    ("approvals", "supersedes", "TEXT"),
];

/// The schema version whose migration applies [`REPAIRS`] first (v10, entry 9).
const REPAIRED_AT: usize = 9;

/// Adds each column of [`REPAIRS`] its table lacks.
fn repair_columns(conn: &Connection) -> Result<()> {
    for (table, column, declaration) in REPAIRS {
        let has: bool = conn.query_row(
            &format!("SELECT EXISTS (SELECT 1 FROM pragma_table_info('{table}') WHERE name = ?1)"),
            [column],
            |r| r.get(0),
        )?;
        if !has {
            conn.execute_batch(&format!(
                "ALTER TABLE {table} ADD COLUMN {column} {declaration}"
            ))?;
        }
    }
    Ok(())
}

/// The schema version this build writes.
pub const SCHEMA_VERSION: i64 = MIGRATIONS.len() as i64;

pub use crate::store::error::StoreError;

/// The embedded database's errors, as the seam says them: a lock held too long and a
/// read-only file are their own kinds.
impl From<rusqlite::Error> for StoreError {
    fn from(e: rusqlite::Error) -> Self {
        use rusqlite::ErrorCode;
        match e.sqlite_error_code() {
            Some(ErrorCode::DatabaseBusy) | Some(ErrorCode::DatabaseLocked) => StoreError::Locked,
            Some(ErrorCode::ReadOnly) => StoreError::ReadOnly(e.to_string()),
            _ => StoreError::Sqlite(e),
        }
    }
}

/// Shorthand for store results.
pub type Result<T, E = StoreError> = std::result::Result<T, E>;

/// How to open the database.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpenMode {
    /// Create the database (and its dir) if missing; migrate forward.
    Create,
    /// The database must exist; migrate forward if it is older.
    Existing,
    /// The database must exist; read it only, as it is (no migration, no journal change):
    /// for `monitor doctor`, which reports what it finds.
    Inspect,
}

/// Opens (and if needed creates and migrates) the database at `path`.
pub(crate) fn open(path: &Path, mode: OpenMode) -> Result<Connection> {
    if mode == OpenMode::Inspect {
        return open_inspect(path);
    }
    let mut flags = OpenFlags::SQLITE_OPEN_READ_WRITE
        | OpenFlags::SQLITE_OPEN_NO_MUTEX
        | OpenFlags::SQLITE_OPEN_URI;
    match mode {
        OpenMode::Create => {
            if let Some(dir) = path
                .parent()
                .filter(|d| !d.as_os_str().is_empty() && !d.exists())
            {
                paths::create_private_dir(dir).map_err(|source| StoreError::Dir {
                    path: path.to_path_buf(),
                    source,
                })?;
            }
            paths::touch_private(path).map_err(|source| StoreError::Dir {
                path: path.to_path_buf(),
                source,
            })?;
            flags |= OpenFlags::SQLITE_OPEN_CREATE;
        }
        OpenMode::Existing | OpenMode::Inspect => match std::fs::metadata(path) {
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(StoreError::Missing(path.to_path_buf()));
            }
            // Not "missing": there may well be one we are not allowed to see.
            Err(source) => {
                return Err(StoreError::Access {
                    path: path.to_path_buf(),
                    source,
                });
            }
        },
    }
    let conn = Connection::open_with_flags(path, flags).map_err(|e| corrupt_or(path, e))?;
    match configure(&conn, path).and_then(|()| migrate(&conn, path)) {
        Ok(()) => Ok(conn),
        // A WAL database in a directory this process may not write (another user's state
        // dir shared read-only): SQLite cannot set up its shared index read-write, but a
        // read-only connection can still read it. Writes through it fail as read-only.
        Err(StoreError::ReadOnly(why)) if mode == OpenMode::Existing => {
            drop(conn);
            open_read_only(path).map_err(|e| match e {
                StoreError::Sqlite(_) => StoreError::ReadOnly(why),
                other => other,
            })
        }
        Err(e) => Err(e),
    }
}

/// Opens an existing database read-only, whatever its schema version.
fn open_inspect(path: &Path) -> Result<Connection> {
    if let Err(e) = std::fs::metadata(path) {
        return Err(if e.kind() == std::io::ErrorKind::NotFound {
            StoreError::Missing(path.to_path_buf())
        } else {
            StoreError::Access {
                path: path.to_path_buf(),
                source: e,
            }
        });
    }
    let flags = OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let conn = Connection::open_with_flags(path, flags).map_err(|e| corrupt_or(path, e))?;
    conn.busy_timeout(BUSY_TIMEOUT)
        .map_err(|e| corrupt_or(path, e))?;
    Ok(conn)
}

/// Whether the database's `-wal` file is missing or empty.
fn wal_is_empty(path: &Path) -> bool {
    let mut wal = path.as_os_str().to_owned();
    wal.push("-wal");
    std::fs::metadata(&wal).map_or(true, |m| m.len() == 0)
}

/// A path as the path part of an SQLite `file:` URI (`%`, `?` and `#` escaped).
fn uri_path(path: &Path) -> String {
    let mut out = String::new();
    for b in path.as_os_str().as_encoded_bytes() {
        match b {
            b'%' | b'?' | b'#' => out.push_str(&format!("%{b:02X}")),
            _ if b.is_ascii() && !b.is_ascii_control() => out.push(*b as char),
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

/// Opens an existing database read-only (no journal change, no migration: an older schema
/// is an error).
pub(crate) fn open_read_only(path: &Path) -> Result<Connection> {
    let flags = OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let conn = Connection::open_with_flags(path, flags).map_err(|e| corrupt_or(path, e))?;
    conn.busy_timeout(BUSY_TIMEOUT)
        .map_err(|e| corrupt_or(path, e))?;
    let conn = match schema_version(&conn) {
        Ok(_) => conn,
        // No WAL index can be made (no -shm, and the directory is not writable). With no
        // WAL content either, the main file is the whole database: read it as immutable.
        Err(_) if wal_is_empty(path) => {
            let uri = format!("file:{}?immutable=1", uri_path(path));
            let conn = Connection::open_with_flags(uri, flags | OpenFlags::SQLITE_OPEN_URI)
                .map_err(|e| corrupt_or(path, e))?;
            conn.busy_timeout(BUSY_TIMEOUT)
                .map_err(|e| corrupt_or(path, e))?;
            conn
        }
        Err(e) => return Err(e),
    };
    let found = schema_version(&conn)?;
    if found != SCHEMA_VERSION {
        return Err(StoreError::ReadOnly(format!(
            "schema version {found} needs migrating to {SCHEMA_VERSION}, which needs write access"
        )));
    }
    Ok(conn)
}

fn corrupt_or(path: &Path, e: rusqlite::Error) -> StoreError {
    use rusqlite::ErrorCode;
    match e.sqlite_error_code() {
        Some(ErrorCode::NotADatabase) | Some(ErrorCode::DatabaseCorrupt) => StoreError::Corrupt {
            path: path.to_path_buf(),
            source: e,
        },
        _ => StoreError::from(e),
    }
}

fn configure(conn: &Connection, path: &Path) -> Result<()> {
    conn.busy_timeout(BUSY_TIMEOUT)
        .map_err(|e| corrupt_or(path, e))?;
    // Changing the journal mode needs a write; on a read-only database keep what it has.
    // While a new database is being created, the switch to WAL can meet another opener's
    // lock, and SQLite answers that at once, without its busy handler: so try again, for as
    // long as the busy timeout would have waited.
    let deadline = std::time::Instant::now() + BUSY_TIMEOUT;
    let mut pause = std::time::Duration::from_millis(2);
    loop {
        let switched = (|| -> Result<()> {
            let current: String = conn
                .query_row("PRAGMA journal_mode", [], |r| r.get(0))
                .map_err(|e| corrupt_or(path, e))?;
            if !current.eq_ignore_ascii_case("wal")
                && !conn.is_readonly(rusqlite::MAIN_DB).unwrap_or(true)
            {
                conn.query_row("PRAGMA journal_mode = WAL", [], |r| r.get::<_, String>(0))
                    .map_err(|e| corrupt_or(path, e))?;
            }
            Ok(())
        })();
        match switched {
            Err(StoreError::Locked) if std::time::Instant::now() < deadline => {
                std::thread::sleep(pause);
                pause = (pause * 2).min(std::time::Duration::from_millis(50));
            }
            other => break other?,
        }
    }
    // Short-lived connections are the norm (one per shim), and a shim is often the only
    // one. What a shim's run costs in the database is mostly fsyncs: a checkpoint syncs the
    // WAL and the database, and the next write after it restarts the WAL, syncing its new
    // header (and, on a connection's first sync, the directory). When every last close
    // checkpointed, every shim paid all of that; its exit also waited for the close. So
    // closing does not checkpoint (`NO_CKPT_ON_CLOSE`): the WAL grows across runs until
    // `wal_autocheckpoint` (100 pages, about 8 runs) checkpoints it in one commit, and is
    // then truncated (`journal_size_limit = 0`) so that the next opener has no stale frames
    // to read while it rebuilds the WAL index; the file itself is kept (`PersistWal`).
    // Measured on a 2-core VM: `headless-run -- true` 4.4–4.9 ms median against 5.3–6.3 ms
    // with a checkpoint on every last close, in the same runs.
    conn.execute_batch(
        "PRAGMA synchronous = NORMAL; PRAGMA temp_store = MEMORY; \
         PRAGMA wal_autocheckpoint = 100; PRAGMA journal_size_limit = 0;",
    )
    .map_err(|e| corrupt_or(path, e))?;
    let _ = conn.set_db_config(
        rusqlite::config::DbConfig::SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE,
        true,
    );
    let mut persist: libc::c_int = 1;
    let _ = conn.file_control(
        Some(rusqlite::MAIN_DB),
        rusqlite::FileControl::PersistWal(&mut persist),
    );
    Ok(())
}

/// The schema version of an open database.
pub(crate) fn schema_version(conn: &Connection) -> Result<i64> {
    Ok(conn.query_row("PRAGMA user_version", [], |r| r.get(0))?)
}

fn migrate(conn: &Connection, path: &Path) -> Result<()> {
    let found = schema_version(conn).map_err(|e| match e {
        StoreError::Sqlite(e) => corrupt_or(path, e),
        other => other,
    })?;
    if found == SCHEMA_VERSION {
        return Ok(());
    }
    if found > SCHEMA_VERSION {
        return Err(StoreError::TooNew {
            path: path.to_path_buf(),
            found,
            supported: SCHEMA_VERSION,
        });
    }
    // Another process may be migrating at the same moment: take the write lock, then look
    // again.
    conn.execute_batch("BEGIN IMMEDIATE")?;
    let result = (|| -> Result<()> {
        let mut version = schema_version(conn)?;
        while version < SCHEMA_VERSION {
            if version as usize == REPAIRED_AT {
                repair_columns(conn)?;
            }
            conn.execute_batch(MIGRATIONS[version as usize])?;
            version += 1;
            conn.pragma_update(None, "user_version", version)?;
        }
        Ok(())
    })();
    match result {
        Ok(()) => conn.execute_batch("COMMIT")?,
        Err(e) => {
            let _ = conn.execute_batch("ROLLBACK");
            return Err(e);
        }
    }
    Ok(())
}

/// Runs `f` in a `BEGIN IMMEDIATE` transaction and commits it.
pub(crate) fn write<T>(
    conn: &mut Connection,
    f: impl FnOnce(&Transaction<'_>) -> Result<T>,
) -> Result<T> {
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let out = f(&tx)?;
    tx.commit()?;
    Ok(out)
}

/// A `WHERE` clause built from optional filters, with its parameters in order.
pub struct Conditions {
    sql: String,
    args: Vec<Box<dyn rusqlite::ToSql + Send>>,
}

impl Default for Conditions {
    fn default() -> Self {
        Conditions {
            sql: " WHERE 1=1".into(),
            args: Vec::new(),
        }
    }
}

impl Conditions {
    /// `column IN (…)`, unless `values` is empty.
    pub fn any_of<T: rusqlite::ToSql + Send + 'static>(
        mut self,
        column: &str,
        values: impl IntoIterator<Item = T>,
    ) -> Self {
        let values: Vec<T> = values.into_iter().collect();
        if !values.is_empty() {
            let marks = vec!["?"; values.len()].join(",");
            self.sql.push_str(&format!(" AND {column} IN ({marks})"));
            for v in values {
                self.args.push(Box::new(v));
            }
        }
        self
    }

    /// `column = value`, when there is a value.
    pub fn equals(self, column: &str, value: Option<&String>) -> Self {
        self.compare(column, "=", value)
    }

    /// `column >= value`, when there is a value.
    pub fn at_least(self, column: &str, value: Option<&String>) -> Self {
        self.compare(column, ">=", value)
    }

    fn compare(mut self, column: &str, op: &str, value: Option<&String>) -> Self {
        if let Some(v) = value {
            self.sql.push_str(&format!(" AND {column} {op} ?"));
            self.args.push(Box::new(v.clone()));
        }
        self
    }

    /// The clause (starting with ` WHERE`) and its parameters.
    pub fn into_parts(self) -> (String, Vec<Box<dyn rusqlite::ToSql + Send>>) {
        (self.sql, self.args)
    }
}

/// A cheap counter that changes whenever another connection commits (`PRAGMA
/// data_version`): poll it to notice changes without re-running queries.
pub(crate) fn data_version(conn: &Connection) -> Result<i64> {
    // Polled several times a second: keep the statement prepared.
    Ok(conn
        .prepare_cached("PRAGMA data_version")?
        .query_row([], |r| r.get(0))?)
}

/// Journal mode as SQLite reports it (`wal` expected).
pub(crate) fn journal_mode(conn: &Connection) -> Result<String> {
    Ok(conn.query_row("PRAGMA journal_mode", [], |r| r.get(0))?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    /// v12 moves steps into rows: an array's objects move; an element that is no object
    /// (null, a string) moves as `null`, which reads as a step that cannot be read (the
    /// migration never fails on it); a column that is no array stays where it was.
    #[test]
    fn v12_moves_the_steps_that_can_move_and_fails_on_none() {
        let conn = Connection::open_in_memory().unwrap();
        for m in &MIGRATIONS[..11] {
            conn.execute_batch(m).unwrap();
        }
        for (id, steps) in [
            (
                "EX-ok",
                r#"[{"node":"a","iteration":0,"status":"completed"},{"node":"b","iteration":0,"status":"ready"}]"#,
            ),
            (
                "EX-odd",
                r#"[null, "{\"node\":\"x\"}", {"node":"c","iteration":0,"status":"ready"}]"#,
            ),
            ("EX-object", "{}"),
            ("EX-broken", "[{"),
            ("EX-empty", "[]"),
        ] {
            conn.execute(
                "INSERT INTO pipelines (execution_id, name, dir, definition, vars, steps, status,
                     created_at, updated_at, version)
                 VALUES (?1, 'p', '/w', '{}', '{}', ?2, 'running', 't', 't', 7)",
                [id, steps],
            )
            .unwrap();
        }
        conn.execute_batch(MIGRATIONS[11]).unwrap();
        let rows = |id: &str| -> Vec<(i64, i64, String)> {
            conn.prepare("SELECT idx, version, body FROM pipeline_steps WHERE execution_id = ?1 ORDER BY idx")
                .unwrap()
                .query_map([id], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
                .unwrap()
                .map(Result::unwrap)
                .collect()
        };
        let ok = rows("EX-ok");
        assert_eq!(ok.len(), 2);
        assert_eq!((ok[1].0, ok[1].1), (1, 7), "at the execution's version");
        assert!(ok[1].2.contains(r#""node":"b""#), "{ok:?}");
        let odd = rows("EX-odd");
        assert_eq!(
            odd.iter().map(|r| r.2.as_str()).collect::<Vec<_>>()[..2],
            ["null", "null"]
        );
        assert!(odd[2].2.contains(r#""node":"c""#));
        for id in ["EX-object", "EX-broken", "EX-empty"] {
            assert!(rows(id).is_empty(), "{id}");
        }
        let kept: Vec<(String, String, bool)> = conn
            .prepare("SELECT execution_id, steps_json, steps_in_rows FROM pipelines ORDER BY execution_id")
            .unwrap()
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
            .unwrap()
            .map(Result::unwrap)
            .collect();
        assert_eq!(
            kept,
            [
                ("EX-broken".to_string(), "[{".to_string(), false),
                ("EX-empty".into(), "[]".into(), true),
                ("EX-object".into(), "{}".into(), false),
                ("EX-odd".into(), "[]".into(), true),
                ("EX-ok".into(), "[]".into(), true),
            ]
        );
        // A build from before v12 fails on the renamed column instead of misreading it.
        assert!(conn.prepare("SELECT steps FROM pipelines").is_err());
    }

    #[test]
    fn creates_private_wal_database_at_latest_version() {
        let tmp = tempfile::tempdir().unwrap();
        let db = tmp.path().join("sub/state.db");
        let conn = open(&db, OpenMode::Create).unwrap();
        assert_eq!(schema_version(&conn).unwrap(), SCHEMA_VERSION);
        assert_eq!(journal_mode(&conn).unwrap(), "wal");
        assert_eq!(std::fs::metadata(&db).unwrap().mode() & 0o777, 0o600);
        assert_eq!(
            std::fs::metadata(db.parent().unwrap()).unwrap().mode() & 0o777,
            0o700
        );
        drop(conn);
        // Re-opening is a no-op migration.
        let conn = open(&db, OpenMode::Existing).unwrap();
        assert_eq!(schema_version(&conn).unwrap(), SCHEMA_VERSION);
    }

    #[test]
    fn missing_database_is_reported() {
        let tmp = tempfile::tempdir().unwrap();
        let err = open(&tmp.path().join("nope.db"), OpenMode::Existing).unwrap_err();
        assert!(matches!(err, StoreError::Missing(_)), "{err}");
    }

    #[test]
    fn garbage_is_reported_as_corrupt() {
        let tmp = tempfile::tempdir().unwrap();
        let db = tmp.path().join("state.db");
        std::fs::write(&db, vec![0x5a; 8192]).unwrap();
        let err = open(&db, OpenMode::Create).unwrap_err();
        assert!(matches!(err, StoreError::Corrupt { .. }), "{err}");
        assert!(
            err.to_string().contains("not a usable SQLite database"),
            "{err}"
        );
    }

    #[test]
    fn newer_schema_is_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let db = tmp.path().join("state.db");
        drop(open(&db, OpenMode::Create).unwrap());
        let raw = Connection::open(&db).unwrap();
        raw.pragma_update(None, "user_version", SCHEMA_VERSION + 5)
            .unwrap();
        drop(raw);
        let err = open(&db, OpenMode::Existing).unwrap_err();
        assert!(matches!(err, StoreError::TooNew { .. }), "{err}");
    }
}
