//! The embedded store: one SQLite session type that owns opening (WAL set-up and
//! migration in [`crate::db`]), reopening after an error or when the file is replaced,
//! replaying the spool on every fresh open, and every SQL statement behind the two traits
//! (the per-table query modules are its internals).

pub(crate) mod alerts;
pub(crate) mod approvals;
mod asking;
pub(crate) mod audit;
pub(crate) mod chain;
pub(crate) mod export;
pub(crate) mod gc;
pub(crate) mod pipelines;
pub(crate) mod policy;
pub(crate) mod resume;
pub(crate) mod runs;
pub mod schema;
pub(crate) mod spool;

use super::{
    AdminStore, Asker, Cooperative, Counts, Done, OperatorStore, PromptRequest, PromptResolution,
    Recorded, RememberScope, Replace, RunWrite, RunnerStore, StoreError, StoreHealth, StoreResult,
    WorkerStore,
};
use crate::approvals::{Approval, ApprovalFilter, Channel, DecideOutcome, Decider};
use crate::audit::{AuditRow, ChainReport};
use crate::config::OnExpire;
use crate::control::{CancelOutcome, ReconcileReport};
use crate::db::{self, OpenMode};
use crate::event::{CooperativeRequest, LogEvent};
use crate::gc::GcReport;
use crate::paths::StatePaths;
use crate::policy::RememberedPolicy;
use crate::resume::ParkedRun;
use crate::rules::{self, HostFacts};
use crate::runs::{Guard, RunFilter, StatusChange, ToolRun};
use crate::status::RunStatus;
use rusqlite::Connection;
use std::io::Write;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::Duration;

/// A session on the SQLite store of one state dir. The connection is opened on first use
/// and again after an error (other than a lock, which the next attempt may get past).
pub struct SqliteStore {
    paths: StatePaths,
    mode: OpenMode,
    /// Who replays spooled rows (audit actor).
    actor: String,
    /// Who this session is, as the store knows it: the OS user of the effective uid, which
    /// must own the store to write it. Recorded as the `owner` of the runs it starts.
    identity: String,
    conn: Option<Connection>,
    /// The database file the connection has open (device, inode).
    db_file: Option<(u64, u64)>,
    /// The file was replaced under an open connection since the last `replaced()`.
    was_replaced: bool,
    /// Why the store is not this user's to write (another user's, or reached through a
    /// link): it is then opened read-only, and every write is refused saying so.
    foreign: Option<String>,
    /// Waits for the state dir's finishers (`crate::finishing`) before the first look and
    /// before reconciling: a reader's session (the monitor's), which must see every ended
    /// run as it ended. A shim's sessions never wait for other shims.
    settle: bool,
}

impl SqliteStore {
    /// A session that creates the database (and its dir) when missing: the shim's.
    pub fn create(paths: StatePaths) -> Self {
        Self::new(paths, OpenMode::Create)
    }

    /// A session on a database that must exist: the monitor's.
    pub fn existing(paths: StatePaths) -> Self {
        Self::new(paths, OpenMode::Existing)
    }

    /// A read-only session on a database as it is, whatever its version: `doctor`'s.
    pub fn inspect(paths: StatePaths) -> Self {
        Self::new(paths, OpenMode::Inspect)
    }

    fn new(paths: StatePaths, mode: OpenMode) -> Self {
        let actor = crate::proc::current_user();
        // The same user, looked up once (the usual case: no setuid in between).
        let euid = crate::proc::effective_uid();
        let identity = if euid == crate::proc::real_uid() {
            actor.clone()
        } else {
            crate::proc::user_name(euid)
        };
        SqliteStore {
            paths,
            mode,
            actor,
            identity,
            conn: None,
            db_file: None,
            was_replaced: false,
            foreign: None,
            settle: mode != OpenMode::Create,
        }
    }

    /// A session on an existing database that does not wait for finishers: a shim's own
    /// second session (its wait-mode watcher).
    pub fn without_settling(mut self) -> Self {
        self.settle = false;
        self
    }

    /// A session that writes for an identity its caller authenticated (a server for a
    /// runner token): the runs it starts are that identity's, and it may claim only theirs.
    pub fn on_behalf_of(mut self, identity: &str) -> Self {
        self.identity = identity.to_owned();
        self
    }

    /// The state paths this session works on.
    pub fn paths(&self) -> &StatePaths {
        &self.paths
    }

    /// Writes rows as they are, in one transaction (with audit rows by `actor`): for test
    /// fixtures and imports, never for a run's own course, which goes through the traits.
    pub fn import_rows(
        &mut self,
        runs: &[ToolRun],
        approvals: &[Approval],
        actor: &str,
    ) -> StoreResult<()> {
        self.write(|tx| {
            for r in runs {
                runs::insert(tx, r, actor)?;
            }
            for a in approvals {
                approvals::insert(tx, a, actor)?;
            }
            Ok(())
        })
    }

    /// Drops the connection, so the next operation opens the file afresh.
    pub fn disconnect(&mut self) {
        self.conn = None;
    }

    /// The connection: opened (and the spool replayed) on first use; a file replaced
    /// since is noticed and opened anew.
    fn conn(&mut self) -> StoreResult<&mut Connection> {
        if self.conn.is_some() && file_id(&self.paths.db) != self.db_file {
            self.conn = None;
            self.was_replaced = true;
        }
        if self.conn.is_none() {
            if self.settle {
                crate::finishing::settle(&self.paths, crate::finishing::SETTLE_MAX);
            }
            // Only the owner writes an embedded store (DESIGN §14): another user's — or one
            // reached through a link — is never created or written, only read.
            self.foreign = match self.mode {
                OpenMode::Inspect => None,
                _ => self.paths.foreign_store(),
            };
            let mut conn = match (&self.foreign, self.mode) {
                (Some(why), OpenMode::Create) => return Err(StoreError::Foreign(why.clone())),
                (Some(_), _) => match std::fs::symlink_metadata(&self.paths.db) {
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                        return Err(StoreError::Missing(self.paths.db.clone()));
                    }
                    // Not "missing": there may well be one this user may not see.
                    Err(source) => {
                        return Err(StoreError::Access {
                            path: self.paths.db.clone(),
                            source,
                        });
                    }
                    Ok(_) => db::open_read_only(&self.paths.db)?,
                },
                (None, mode) => db::open(&self.paths.db, mode)?,
            };
            self.db_file = file_id(&self.paths.db);
            // Rows an earlier shim could not write before it exited. A read-only database
            // leaves them for a writer.
            if self.mode != OpenMode::Inspect && self.foreign.is_none() {
                let _ = spool::replay(&mut conn, &self.paths, &self.actor, &self.identity);
            }
            self.conn = Some(conn);
        }
        self.conn
            .as_mut()
            .ok_or_else(|| StoreError::Missing(self.paths.db.clone()))
    }

    /// Runs `f` on the connection; an error other than a lock drops it, so the next call
    /// opens the database again.
    pub(super) fn with<T>(
        &mut self,
        f: impl FnOnce(&mut Connection) -> StoreResult<T>,
    ) -> StoreResult<T> {
        let out = f(self.conn()?);
        if let Err(e) = &out
            && !matches!(e, StoreError::Locked)
        {
            self.conn = None;
        }
        match (out, &self.foreign) {
            // A write the read-only connection refused: say whose store it is.
            (Err(StoreError::ReadOnly(_)), Some(why)) => Err(StoreError::Foreign(why.clone())),
            (out, _) => out,
        }
    }

    /// Runs `f` in one write transaction.
    pub(super) fn write<T>(
        &mut self,
        f: impl FnOnce(&rusqlite::Transaction<'_>) -> StoreResult<T>,
    ) -> StoreResult<T> {
        self.with(|c| db::write(c, f))
    }
}

/// Refuses (inside the claim's transaction) the approval of a run another identity than
/// `identity` started: its command is never run again by this session.
fn refuse_unowned(
    tx: &rusqlite::Transaction<'_>,
    approval_id: &str,
    identity: &str,
) -> StoreResult<()> {
    let Some(run) = approvals::get(tx, approval_id)?
        .map(|a| a.tool_run_id)
        .map(|id| runs::get(tx, &id))
        .transpose()?
        .flatten()
    else {
        return Ok(());
    };
    match rules::not_owned(&run, identity, crate::proc::effective_uid()) {
        Some(why) => Err(StoreError::Denied(format!(
            "{}: not resumed: {why}",
            run.tool_run_id
        ))),
        None => Ok(()),
    }
}

/// The (device, inode) of a file, to notice it being replaced.
fn file_id(path: &Path) -> Option<(u64, u64)> {
    std::fs::metadata(path).ok().map(|m| (m.dev(), m.ino()))
}

impl RunnerStore for SqliteStore {
    fn connect(&mut self) -> StoreResult<()> {
        self.conn().map(|_| ())
    }

    fn record(
        &mut self,
        run_id: &str,
        writes: &[RunWrite],
        actor: &str,
        row_may_exist: bool,
    ) -> StoreResult<Done<Recorded>> {
        let mut abandoned = Vec::new();
        let mut recorded = Recorded::default();
        let mut closed = Vec::new();
        let mut moved = Vec::new();
        let identity = self.identity.clone();
        self.write(|tx| {
            abandoned.clear();
            closed.clear();
            moved.clear();
            for w in writes {
                match w {
                    RunWrite::Start(run) => {
                        // A spooled row may be there already: replayed by another process
                        // before this write.
                        if !row_may_exist || runs::get(tx, run_id)?.is_none() {
                            let uid = crate::proc::effective_uid();
                            let mut row = run.stamped(&identity, Some(uid));
                            // The resume of a parked run, if it is one (`store::sqlite::chain`); an
                            // approval of its command past its time is expired first, for
                            // the resume to meet the expiry.
                            if rules::binds_at_start(&row) {
                                let fp = chain::request_of(&row);
                                let expired = approvals::expire_due_of(tx, Some(&fp))?;
                                closed.extend(expired.iter().map(Approval::status_event));
                                chain::bind_at_start(tx, &mut row)?;
                            }
                            runs::insert(tx, &row, actor)?;
                        }
                        recorded.inserted = true;
                    }
                    RunWrite::Touch(t) => runs::touch(tx, run_id, t)?,
                    RunWrite::Pid(pid) => runs::set_pid(tx, run_id, i64::from(*pid))?,
                    RunWrite::Status(change, replace) => {
                        let guard = match replace {
                            Replace::Live => Guard::NotFinal,
                            Replace::AnyButCancelled => Guard::Not(RunStatus::Cancelled),
                        };
                        runs::change_status_with(tx, run_id, change, actor, guard, &mut closed)?;
                    }
                    RunWrite::Cancelled { exit_code, at } => {
                        let current = runs::get(tx, run_id)?.map(|r| r.status);
                        if current == Some(RunStatus::Cancelled) {
                            runs::record_exit(tx, run_id, *exit_code, at)?;
                        } else {
                            // A cancel nobody recorded (a signal to headless-run): its
                            // status event is this write's, as the canceller's would be.
                            let change = cancelled_by_signal(*exit_code, at);
                            let previous = runs::change_status_with(
                                tx,
                                run_id,
                                &change,
                                actor,
                                Guard::NotFinal,
                                &mut closed,
                            )?;
                            if let (Some(previous), Some(run)) = (previous, runs::get(tx, run_id)?)
                            {
                                moved.push(run.status_event(Some(previous), &change));
                            }
                        }
                    }
                    RunWrite::Consume(approval_id) => {
                        // Only a decision offered to this run (its own, in wait mode).
                        let resumes = chain::resumes(tx, run_id)?;
                        if let Some(a) = approvals::get(tx, approval_id)?
                            && rules::offered(&a, run_id, resumes.as_deref())
                        {
                            chain::take(tx, &a, run_id, actor)?;
                        }
                    }
                    RunWrite::Release(None) => {
                        closed.extend(chain::parked(tx, run_id, actor)?);
                    }
                    RunWrite::Release(Some(approval_id)) => {
                        chain::give_back(
                            tx,
                            run_id,
                            approval_id,
                            "the prompt went away before the answer was typed",
                            actor,
                        )?;
                    }
                    RunWrite::Abandon(why) => {
                        abandoned.extend(approvals::abandon_pending(tx, run_id, why)?);
                    }
                    RunWrite::Withdraw { approval_id, why } => {
                        abandoned.extend(approvals::withdraw_pending(
                            tx,
                            run_id,
                            approval_id,
                            why,
                        )?);
                    }
                    RunWrite::Environment(env) => runs::set_environment(tx, run_id, env)?,
                }
            }
            Ok(())
        })?;
        let mut events: Vec<LogEvent> = abandoned.iter().map(Approval::status_event).collect();
        events.extend(closed);
        events.extend(moved);
        Ok(Done::with_events(recorded, events))
    }

    fn keep_for_later(&mut self, run: &ToolRun) -> bool {
        crate::spool::write(&self.paths, run).is_ok()
    }

    fn kept_row_landed(&mut self, run_id: &str) {
        crate::spool::discard(&self.paths, run_id);
    }

    fn replaced(&mut self) -> bool {
        if self.conn.is_some() && file_id(&self.paths.db) != self.db_file {
            self.conn = None;
            self.was_replaced = true;
        }
        std::mem::take(&mut self.was_replaced)
    }

    fn resolve_prompt(
        &mut self,
        who: &Asker,
        req: &PromptRequest,
        host: &dyn HostFacts,
    ) -> StoreResult<Done<PromptResolution>> {
        let (value, effects) = self.with(|c| asking::answer_or_ask(c, who, req, host))?;
        Ok(Done { value, effects })
    }

    fn cooperative(
        &mut self,
        who: &Asker,
        req: &CooperativeRequest,
        ttl: Option<Duration>,
        on_expire: OnExpire,
    ) -> StoreResult<Done<Cooperative>> {
        let (value, effects) = self.with(|c| asking::cooperative(c, who, req, ttl, on_expire))?;
        Ok(Done { value, effects })
    }

    fn check_auto_approval(
        &mut self,
        who: &Asker,
        approval_id: &str,
        value: &str,
        resumed_from: Option<&str>,
    ) -> StoreResult<Done<Result<Approval, String>>> {
        let (value, effects) = self
            .with(|c| asking::validate_auto_approval(c, who, approval_id, value, resumed_from))?;
        Ok(Done { value, effects })
    }

    fn approval(&mut self, approval_id: &str) -> StoreResult<Option<Approval>> {
        self.with(|c| approvals::get(c, approval_id))
    }

    fn expire_due(&mut self) -> StoreResult<Done<Vec<Approval>>> {
        expire(self)
    }

    fn change_mark(&mut self) -> StoreResult<u64> {
        self.with(|c| db::data_version(c).map(|v| v as u64))
    }
}

/// The change recorded for a run cancelled by a signal nobody recorded.
fn cancelled_by_signal(exit_code: i32, at: &str) -> StatusChange {
    StatusChange {
        exit_code: Some(exit_code),
        at: Some(at.to_owned()),
        ..StatusChange::to(
            RunStatus::Cancelled,
            Some("cancelled by a signal to headless-run".into()),
        )
    }
}

fn expire(store: &mut SqliteStore) -> StoreResult<Done<Vec<Approval>>> {
    let expired = store.write(approvals::expire_due)?;
    let events = expired.iter().map(Approval::status_event).collect();
    Ok(Done::with_events(expired, events))
}

impl OperatorStore for SqliteStore {
    fn local(&mut self) -> Option<&mut dyn AdminStore> {
        Some(self)
    }

    fn connect(&mut self) -> StoreResult<()> {
        self.conn().map(|_| ())
    }

    fn change_mark(&mut self) -> StoreResult<u64> {
        RunnerStore::change_mark(self)
    }

    fn ids_starting_with(&mut self, prefix: &str, limit: usize) -> StoreResult<Vec<String>> {
        let (table, column) = if prefix.starts_with(crate::id::APPROVAL_PREFIX) {
            ("approvals", "approval_id")
        } else {
            ("tool_runs", "tool_run_id")
        };
        self.with(|c| {
            // A range on the primary key (not LIKE, whose escapes and case rules differ):
            // every id with the prefix sorts between it and the prefix with U+FFFF after.
            let mut stmt = c.prepare(&format!(
                "SELECT {column} FROM {table} WHERE {column} >= ?1 AND {column} < ?2
                 ORDER BY {column} LIMIT ?3"
            ))?;
            let end = format!("{prefix}\u{ffff}");
            let ids = stmt
                .query_map(rusqlite::params![prefix, end, limit as i64], |r| r.get(0))?
                .collect::<rusqlite::Result<Vec<String>>>()?;
            Ok(if ids.iter().any(|i| i == prefix) {
                vec![prefix.to_owned()]
            } else {
                ids
            })
        })
    }

    fn run(&mut self, tool_run_id: &str) -> StoreResult<Option<ToolRun>> {
        self.with(|c| runs::get(c, tool_run_id))
    }

    fn runs(&mut self, filter: &RunFilter) -> StoreResult<Vec<ToolRun>> {
        self.with(|c| runs::list(c, filter))
    }

    fn supervised_runs(&mut self, limit: Option<usize>) -> StoreResult<Vec<ToolRun>> {
        self.with(|c| runs::supervised(c, limit))
    }

    fn export_runs_json(
        &mut self,
        filter: &RunFilter,
        out: &mut dyn Write,
    ) -> Result<usize, crate::export::ExportError> {
        let conn = self.conn().map_err(crate::export::ExportError::Store)?;
        export::write_runs_json(conn, filter, out)
    }

    fn approval(&mut self, approval_id: &str) -> StoreResult<Option<Approval>> {
        RunnerStore::approval(self, approval_id)
    }

    fn approvals(&mut self, filter: &ApprovalFilter) -> StoreResult<Vec<Approval>> {
        self.with(|c| approvals::list(c, filter))
    }

    fn decide(
        &mut self,
        approval_id: &str,
        value: &str,
        who: &Decider<'_>,
    ) -> StoreResult<Done<DecideOutcome>> {
        let mut moved = Vec::new();
        let out = self.write(|tx| {
            // A pipeline's human step may name who decides it: checked against the name the
            // decision is recorded under, in the decision's own transaction.
            if let Some(why) = pipelines::deciders_refusal_in(tx, approval_id, who.by)? {
                return Ok(DecideOutcome::Refused(why));
            }
            let out = approvals::decide(tx, approval_id, value, who)?;
            // A pipeline's human step moves with its decision.
            if let DecideOutcome::Decided(a) = &out {
                moved = pipelines::decided_in(tx, a, who.by)?;
            }
            Ok(out)
        })?;
        let events = match &out {
            DecideOutcome::Decided(a) => std::iter::once(a.status_event()).chain(moved).collect(),
            // Deciding found it overdue and expired it: that is news too.
            DecideOutcome::Conflict(a) if a.channel() == Some(Channel::Expiry) => {
                vec![a.status_event()]
            }
            _ => Vec::new(),
        };
        Ok(Done::with_events(out, events))
    }

    fn cancel(
        &mut self,
        tool_run_id: &str,
        reason: Option<&str>,
        who: &Decider<'_>,
    ) -> StoreResult<Done<CancelOutcome>> {
        let why = rules::cancel_reason(who.by, reason);
        let change = StatusChange::to(RunStatus::Cancelled, Some(why));
        let out = self.write(|tx| {
            let Some(run) = runs::get(tx, tool_run_id)? else {
                return Ok(None);
            };
            if run.status.is_final() {
                return Ok(Some((run, None, Vec::new(), Vec::new())));
            }
            let mut closed = Vec::new();
            let previous = runs::change_status_with(
                tx,
                tool_run_id,
                &change,
                who.by,
                Guard::NotFinal,
                &mut closed,
            )?;
            let pending = approvals::pending_of(tx, tool_run_id)?;
            let mut rejected = Vec::new();
            for a in pending {
                // Rejected (or, overdue, expired: news as well).
                match approvals::close_for_cancel(tx, &a.approval_id, who.by, who.channel)? {
                    Some(closed) => rejected.push(closed),
                    None => continue,
                }
                // The outcome stays with the cancelled run: a later run of the same
                // command is asked again rather than answered by this cancellation.
                approvals::spend(tx, &a.approval_id, "the run was cancelled", who.by)?;
            }
            let after = runs::get(tx, tool_run_id)?.unwrap_or(run);
            Ok(Some((after, previous, rejected, closed)))
        })?;
        Ok(match out {
            None => Done::quiet(CancelOutcome::NotFound),
            Some((run, None, _, _)) => {
                Done::quiet(CancelOutcome::AlreadyFinal { run: Box::new(run) })
            }
            Some((run, Some(previous), rejected, closed)) => {
                let mut events = vec![run.status_event(Some(previous), &change)];
                events.extend(rejected.iter().map(Approval::status_event));
                events.extend(closed);
                Done::with_events(CancelOutcome::Marked { run: Box::new(run) }, events)
            }
        })
    }

    fn audit_of_run(&mut self, tool_run_id: &str) -> StoreResult<Vec<AuditRow>> {
        self.with(|c| audit::for_run(c, tool_run_id))
    }

    fn audit_of_approval(&mut self, approval_id: &str) -> StoreResult<Vec<AuditRow>> {
        self.with(|c| audit::for_approval(c, approval_id))
    }

    fn counts(&mut self, failed_since: &str, soon: Duration) -> StoreResult<Counts> {
        let mut counts = self.live_counts(soon)?;
        self.with(|c| {
            counts.totals = runs::count_by_status(c)?;
            counts.failed_recent = alerts::failed_since(c, failed_since)?;
            counts.stalled_recent = alerts::stalled_since(c, failed_since)?;
            Ok(())
        })?;
        Ok(counts)
    }

    fn live_counts(&mut self, soon: Duration) -> StoreResult<Counts> {
        self.with(|c| {
            Ok(Counts {
                live: alerts::live_counts(c)?,
                pending: approvals::pending_counts(c, soon)?,
                ..Counts::default()
            })
        })
    }
}

impl WorkerStore for SqliteStore {
    fn reconcile(
        &mut self,
        actor: &str,
        host: &dyn HostFacts,
    ) -> StoreResult<Done<ReconcileReport>> {
        // A shim gone while its finisher writes its end is no vanished shim.
        if self.settle {
            crate::finishing::settle(&self.paths, crate::finishing::SETTLE_MAX);
        }
        let live = self.with(|c| runs::supervised(c, None))?;
        let mut report = ReconcileReport::default();
        let mut events = Vec::new();
        for run in live {
            let Some(why) = rules::vanished(&run, host) else {
                continue;
            };
            let change = StatusChange {
                error: Some(why.clone()),
                ..StatusChange::to(RunStatus::Failed, Some(why.clone()))
            };
            let (previous, abandoned, closed) =
                self.write(|tx| fail_vanished(tx, &run, &change, &why, actor))?;
            if let Some(previous) = previous {
                events.push(run.status_event(Some(previous), &change));
                events.extend(abandoned.iter().map(Approval::status_event));
                events.extend(closed);
                report.vanished.push((run.tool_run_id.clone(), why));
            }
        }
        let expired = expire(self)?;
        report.expired = expired.value;
        events.extend(expired.effects.events);
        Ok(Done::with_events(report, events))
    }

    fn expire_due(&mut self) -> StoreResult<Done<Vec<Approval>>> {
        expire(self)
    }

    fn decided_parked(&mut self) -> StoreResult<Vec<ParkedRun>> {
        self.with(|c| resume::decided_parked(c))
    }

    fn resumes_of(&mut self, waiting_run: &str) -> StoreResult<Vec<ToolRun>> {
        self.with(|c| resume::resumes_of(c, waiting_run))
    }

    fn identity(&mut self) -> StoreResult<String> {
        self.conn()?;
        match &self.foreign {
            Some(why) => Err(StoreError::Foreign(why.clone())),
            None => Ok(self.identity.clone()),
        }
    }

    fn claim(&mut self, approval_id: &str, worker: &str) -> StoreResult<bool> {
        let identity = self.identity.clone();
        self.write(|tx| {
            refuse_unowned(tx, approval_id, &identity)?;
            approvals::claim(tx, approval_id, worker)
        })
    }

    fn take_over_claim(&mut self, approval_id: &str, from: &str, to: &str) -> StoreResult<bool> {
        let identity = self.identity.clone();
        self.write(|tx| {
            refuse_unowned(tx, approval_id, &identity)?;
            resume::take_over_claim(tx, approval_id, from, to)
        })
    }

    fn set_resumed_run(&mut self, approval_id: &str, run: &str) -> StoreResult<()> {
        self.write(|tx| approvals::set_resumed_run(tx, approval_id, run))
    }

    fn close_run(
        &mut self,
        tool_run_id: &str,
        change: &StatusChange,
        actor: &str,
        from: &[RunStatus],
    ) -> StoreResult<Done<Option<RunStatus>>> {
        let (run, previous, closed) = self.write(|tx| {
            let mut closed = Vec::new();
            let previous = runs::change_status_with(
                tx,
                tool_run_id,
                change,
                actor,
                Guard::From(from),
                &mut closed,
            )?;
            Ok((runs::get(tx, tool_run_id)?, previous, closed))
        })?;
        let mut events = match (run, previous) {
            (Some(run), Some(prev)) => vec![run.status_event(Some(prev), change)],
            _ => Vec::new(),
        };
        events.extend(closed);
        Ok(Done::with_events(previous, events))
    }

    fn consume(&mut self, approval_id: &str, by_run: &str, actor: &str) -> StoreResult<bool> {
        self.write(|tx| approvals::consume(tx, approval_id, by_run, actor))
    }
}

impl AdminStore for SqliteStore {
    fn gc_preview(&mut self, cutoff: &str) -> StoreResult<GcReport> {
        self.with(|c| {
            let runs = gc::finished_before(c, cutoff)?;
            let approvals = gc::approvals_of(c, &runs)?;
            Ok(GcReport { runs, approvals })
        })
    }

    fn gc(&mut self, cutoff: &str, actor: &str) -> StoreResult<GcReport> {
        self.write(|tx| gc::collect(tx, cutoff, actor))
    }

    fn remember(
        &mut self,
        tool: &str,
        prompt_fingerprint: &str,
        scope: &RememberScope,
        value: &str,
        approval_id: &str,
        by: &str,
    ) -> StoreResult<RememberedPolicy> {
        self.write(|tx| {
            policy::remember(
                tx,
                &crate::policy::Remembered {
                    tool,
                    prompt_fingerprint,
                    scope,
                    value,
                    approval_id,
                    by,
                },
            )
        })
    }

    fn remembered(&mut self) -> StoreResult<Vec<RememberedPolicy>> {
        self.with(|c| policy::remembered(c))
    }

    fn forget(&mut self, policy_id: &str, by: &str) -> StoreResult<Option<RememberedPolicy>> {
        self.write(|tx| policy::forget(tx, policy_id, by))
    }

    fn audit_after(&mut self, after: i64, limit: usize) -> StoreResult<Vec<AuditRow>> {
        self.with(|c| audit::after(c, after, limit))
    }

    fn audit_head_id(&mut self) -> StoreResult<i64> {
        self.with(|c| audit::head_id(c))
    }

    fn verify_audit(&mut self) -> StoreResult<ChainReport> {
        self.with(|c| audit::verify(c))
    }

    fn audit_hash(&mut self, id: i64) -> StoreResult<Option<String>> {
        self.with(|c| audit::hash_at(c, id))
    }

    fn unrecorded_decisions(&mut self) -> StoreResult<Vec<(String, String)>> {
        self.with(|c| audit::unrecorded_decisions(c))
    }

    fn health(&mut self) -> StoreResult<StoreHealth> {
        self.with(|c| {
            Ok(StoreHealth {
                schema_version: db::schema_version(c)?,
                supported_version: db::SCHEMA_VERSION,
                journal: db::journal_mode(c)?,
            })
        })
    }
}

/// Fails `seen` (a live run as listed at the start of the pass, whose shim has since been
/// found gone) unless, read again under the write lock, it has moved on. A shim in exit
/// mode parks its run (exit code 90) and then exits: between the list and this write it
/// may have done both, and its run is then parked, not vanished.
fn fail_vanished(
    tx: &rusqlite::Transaction<'_>,
    seen: &ToolRun,
    change: &StatusChange,
    why: &str,
    actor: &str,
) -> StoreResult<(Option<RunStatus>, Vec<Approval>, Vec<LogEvent>)> {
    match runs::get(tx, &seen.tool_run_id)? {
        Some(now) if now.status == seen.status && !rules::ended_on_purpose(&now) => {}
        _ => return Ok((None, Vec::new(), Vec::new())),
    }
    let guard = [seen.status];
    let mut closed = Vec::new();
    let previous = runs::change_status_with(
        tx,
        &seen.tool_run_id,
        change,
        actor,
        Guard::From(&guard),
        &mut closed,
    )?;
    // Nobody is left to type a decision into this run.
    let abandoned = match previous {
        Some(_) => approvals::abandon_pending(
            tx,
            &seen.tool_run_id,
            &format!("the run ended before a decision ({why})"),
        )?,
        None => Vec::new(),
    };
    Ok((previous, abandoned, closed))
}

/// Opens the first store of `paths` for tests: a fresh database.
#[cfg(test)]
pub(crate) fn test_store() -> (tempfile::TempDir, SqliteStore) {
    let tmp = tempfile::tempdir().unwrap();
    let paths = StatePaths::at(tmp.path().join("state"));
    (tmp, SqliteStore::create(paths))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rules::{LocalHost, is_parked, shim_gone};
    use crate::status::ApprovalStatus;
    use crate::testing::run as sample;
    use crate::{proc, time};

    fn setup() -> (tempfile::TempDir, SqliteStore) {
        test_store()
    }

    fn insert_runs(store: &mut SqliteStore, runs: &[&ToolRun]) {
        store
            .write(|tx| {
                for r in runs {
                    runs::insert(tx, r, "t")?;
                }
                Ok(())
            })
            .unwrap();
    }

    fn get(store: &mut SqliteStore, id: &str) -> ToolRun {
        OperatorStore::run(store, id).unwrap().unwrap()
    }

    fn me() -> Decider<'static> {
        Decider {
            by: "tester",
            channel: "cli",
            comment: None,
            version: None,
            groups: &[],
        }
    }

    #[test]
    fn reconcile_fails_dead_and_reused_shims_but_not_parked_or_live_ones() {
        let (_tmp, mut conn) = setup();
        let host = proc::hostname();
        let me_pid = std::process::id() as i64;
        let me_start = proc::read_stat(me_pid as i32).unwrap().start_time as i64;
        let mut alive = sample("TR-ALIVE", "x", RunStatus::Running);
        alive.host = Some(host.clone());
        alive.shim_pid = Some(me_pid);
        alive.shim_start_time = Some(me_start);
        let mut dead = sample("TR-DEAD", "x", RunStatus::Running);
        dead.host = Some(host.clone());
        dead.shim_pid = Some(i32::MAX as i64 - 7);
        let mut reused = sample("TR-REUSED", "x", RunStatus::Stalled);
        reused.host = Some(host.clone());
        reused.shim_pid = Some(me_pid);
        reused.shim_start_time = Some(me_start + 1);
        let mut parked = sample("TR-PARKED", "x", RunStatus::WaitingApproval);
        parked.host = Some(host.clone());
        parked.shim_pid = Some(i32::MAX as i64 - 7);
        parked.exit_code = Some(90);
        // Killed as stalled by its own shim (exit 92): that is how it ended, not a vanishing.
        let mut stall_killed = sample("TR-STALLED", "x", RunStatus::Stalled);
        stall_killed.host = Some(host.clone());
        stall_killed.shim_pid = Some(i32::MAX as i64 - 7);
        stall_killed.exit_code = Some(92);
        let mut remote_stale = sample("TR-REMOTE", "x", RunStatus::Running);
        remote_stale.host = Some("elsewhere".into());
        remote_stale.supervisor_heartbeat_at = Some("2000-01-01T00:00:00.000Z".into());
        let mut remote_fresh = sample("TR-FRESH", "x", RunStatus::Running);
        remote_fresh.host = Some("elsewhere".into());
        remote_fresh.supervisor_heartbeat_at = Some(time::now_rfc3339());
        insert_runs(
            &mut conn,
            &[
                &alive,
                &dead,
                &reused,
                &parked,
                &stall_killed,
                &remote_stale,
                &remote_fresh,
            ],
        );
        let done = conn.reconcile("reconcile", &LocalHost::new()).unwrap();
        let report = done.value;
        let mut ids: Vec<&str> = report.vanished.iter().map(|(id, _)| id.as_str()).collect();
        ids.sort();
        assert_eq!(ids, ["TR-DEAD", "TR-REMOTE", "TR-REUSED"]);
        let reused = get(&mut conn, "TR-REUSED");
        assert_eq!(reused.status, RunStatus::Failed);
        assert!(
            reused.reason.unwrap().contains("another process"),
            "a reused pid is told apart"
        );
        for id in ["TR-ALIVE", "TR-PARKED", "TR-STALLED", "TR-FRESH"] {
            assert!(!get(&mut conn, id).status.is_final(), "{id}");
        }
        assert_eq!(done.effects.events.len(), 3);
        // A second pass changes nothing.
        assert!(
            conn.reconcile("reconcile", &LocalHost::new())
                .unwrap()
                .value
                .vanished
                .is_empty()
        );
    }

    /// Found by scripts/stress at 256 shims: a run listed as `waiting_approval` whose shim
    /// then parked it (exit code 90) and exited was failed as `supervisor vanished`, so its
    /// decision was never resumed.
    #[test]
    fn reconcile_race_with_a_shim_parking_its_run() {
        let (_tmp, mut conn) = setup();
        let mut run = sample("TR-PARKING", "x", RunStatus::WaitingApproval);
        run.host = Some(proc::hostname());
        run.shim_pid = Some(i32::MAX as i64 - 7);
        insert_runs(&mut conn, &[&run]);
        // The pass lists the run before the shim's last write…
        let seen = get(&mut conn, "TR-PARKING");
        assert!(!is_parked(&seen));
        let why = shim_gone(&seen, &LocalHost::new()).expect("the shim is gone");
        // …which parks it, and then the shim exits.
        let park = StatusChange {
            exit_code: Some(90),
            ..StatusChange::to(RunStatus::WaitingApproval, Some("waiting".into()))
        };
        conn.write(|tx| runs::change_status(tx, "TR-PARKING", &park, "shim", Guard::NotFinal))
            .unwrap();
        let change = StatusChange::to(RunStatus::Failed, Some(why.clone()));
        let (previous, _, _) = conn
            .write(|tx| fail_vanished(tx, &seen, &change, &why, "w"))
            .unwrap();
        assert_eq!(previous, None);
        let now = get(&mut conn, "TR-PARKING");
        assert!(is_parked(&now), "{now:?}");
        // A run that really lost its shim still fails.
        let mut lost = sample("TR-LOST", "x", RunStatus::WaitingApproval);
        lost.shim_pid = run.shim_pid;
        insert_runs(&mut conn, &[&lost]);
        let seen = get(&mut conn, "TR-LOST");
        let (previous, _, _) = conn
            .write(|tx| fail_vanished(tx, &seen, &change, &why, "w"))
            .unwrap();
        assert_eq!(previous, Some(RunStatus::WaitingApproval));
    }

    #[test]
    fn cancel_marks_rejects_and_refuses_finished_runs() {
        let (_tmp, mut conn) = setup();
        let mut parked = sample("TR-P", "rm", RunStatus::WaitingApproval);
        parked.exit_code = Some(90);
        let done = sample("TR-D", "rm", RunStatus::Completed);
        let mut ap = crate::testing::approval("AP-1", crate::approvals::PromptKind::Choice);
        ap.tool_run_id = "TR-P".into();
        conn.write(|tx| {
            runs::insert(tx, &parked, "t")?;
            runs::insert(tx, &done, "t")?;
            approvals::insert(tx, &ap, "t")
        })
        .unwrap();
        let out = conn.cancel("TR-P", Some("not today"), &me()).unwrap().value;
        let CancelOutcome::Marked { run } = out else {
            panic!("{out:?}")
        };
        assert_eq!(run.status, RunStatus::Cancelled);
        assert_eq!(
            run.reason.as_deref(),
            Some("cancelled by tester: not today")
        );
        let ap = OperatorStore::approval(&mut conn, "AP-1").unwrap().unwrap();
        assert_eq!(ap.status, ApprovalStatus::Rejected);
        assert!(matches!(
            conn.cancel("TR-D", None, &me()).unwrap().value,
            CancelOutcome::AlreadyFinal { .. }
        ));
        assert_eq!(
            conn.cancel("TR-NOPE", None, &me()).unwrap().value,
            CancelOutcome::NotFound
        );
    }

    #[test]
    fn a_decision_reports_its_event_once() {
        let (_tmp, mut conn) = setup();
        let ap = crate::testing::approval("AP-1", crate::approvals::PromptKind::Choice);
        conn.write(|tx| approvals::insert(tx, &ap, "t")).unwrap();
        let first = conn.decide("AP-1", "y", &me()).unwrap();
        let again = conn.decide("AP-1", "y", &me()).unwrap();
        assert_eq!(first.effects.events.len(), 1);
        assert_eq!(
            first.effects.events[0].body.name(),
            "approval_status_change"
        );
        assert!(matches!(again.value, DecideOutcome::AlreadySame(_)));
        assert!(again.effects.events.is_empty());
    }
}
