//! The store seam. The shim and `monitor` reach state only through two traits, named for
//! who uses them: [`RunnerStore`] (everything one shim needs for its run) and
//! [`OperatorStore`] (everything `monitor` needs). Each method is one transaction and returns
//! its outcome with the events it produced, for the caller to append to the combined log.
//! The rules (answering, takeover, expiry, cancel, claim, reconcile) are plain functions in
//! [`crate::rules`], fed the facts only the caller's host knows ([`HostFacts`]).
//!
//! Implementations: [`sqlite::SqliteStore`] (embedded, the default), [`postgres`]
//! (`HEADLESS_RUN_DB=postgres://…`: many hosts and users), and for a shim [`http`]
//! (`HEADLESS_RUN_SERVER=https://…`: a `monitor serve` server's runner API), for `monitor`
//! [`remote`] (`monitor --server URL`: its operator API).

mod asking;
pub mod capabilities;
pub mod doorbell;
pub mod error;
#[cfg(feature = "http")]
pub mod http;
pub mod pipelines;
#[cfg(feature = "postgres")]
pub mod postgres;
#[cfg(feature = "postgres")]
pub mod relay;
#[cfg(feature = "http")]
pub mod remote;
pub mod sqlite;
/// Where the store is (a URL, a server): `crate::url`, here for the stores' callers.
pub use crate::url;
pub mod watch;

use crate::approvals::{Approval, ApprovalFilter, DecideOutcome, Decider};
use crate::audit::{AuditRow, ChainReport};
use crate::config::OnExpire;
use crate::control::{CancelOutcome, ReconcileReport};
use crate::event::{CooperativeRequest, LogEvent};
use crate::gc::GcReport;
use crate::paths::StatePaths;
use crate::policy::RememberedPolicy;
use crate::prompt::Prompt;
use crate::resume::ParkedRun;
use crate::rules::HostFacts;
use crate::runs::{RunFilter, StatusChange, ToolRun, Touch};
use crate::status::RunStatus;
pub use error::StoreError;
use std::io::Write;
use std::time::Duration;

/// Store results.
pub type StoreResult<T> = Result<T, StoreError>;

impl StoreError {
    /// The `monitor` exit code for this error: the one place that maps them.
    pub fn exit_code(&self) -> u8 {
        crate::exit::monitor::ERROR
    }
}

/// What a transaction did besides its outcome: events for the combined log, the asking
/// run's new status, and warnings to say once on stderr.
#[derive(Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct Effects {
    pub events: Vec<LogEvent>,
    /// The asking run's new status, if it changed.
    pub status: Option<RunStatus>,
    /// Said once on stderr (a policy whose value does not answer the prompt).
    pub warnings: Vec<String>,
}

/// An outcome with its effects.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub struct Done<T> {
    pub value: T,
    pub effects: Effects,
}

impl<T> Done<T> {
    /// An outcome that logged nothing.
    pub fn quiet(value: T) -> Self {
        Done {
            value,
            effects: Effects::default(),
        }
    }

    /// An outcome with these events.
    pub fn with_events(value: T, events: Vec<LogEvent>) -> Self {
        Done {
            value,
            effects: Effects {
                events,
                ..Effects::default()
            },
        }
    }
}

/// The run asking, as its shim knows it.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct Asker {
    pub tool_run_id: String,
    pub tool: String,
    pub execution_id: String,
    /// The command's fingerprint (tool, argv, cwd), to find decisions for it.
    pub request_fingerprint: String,
    /// The command line (program first) and working directory: what a remembered
    /// decision's scope is compared with.
    pub argv: Vec<String>,
    pub cwd: String,
    /// What the command runs (`fingerprint::tool`), when it could be looked at.
    pub tool_digest: Option<String>,
    /// The OS user of the shim.
    pub actor: String,
    /// What its approvals need before a decision is used (`[[reviewers]]`).
    #[serde(default)]
    pub review: crate::reviews::Requirement,
}

pub use crate::policy::RememberScope;

/// A prompt to resolve.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct PromptRequest {
    pub prompt: Prompt,
    pub prompt_fingerprint: String,
    /// The config policies that matched, in config order: (name, value). The first whose
    /// value answers the prompt (or rejects it) decides; a remembered decision comes after.
    pub policies: Vec<(String, String)>,
    pub ttl: Option<Duration>,
    pub on_expire: OnExpire,
}

/// What the store said about a prompt.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub enum PromptResolution {
    /// Type this value: a decision (or a policy) answers the prompt.
    Answer {
        approval: Box<Approval>,
        value: String,
    },
    /// A decision said no.
    Rejected { approval: Box<Approval> },
    /// An approval waits for a decision.
    Pending {
        approval: Box<Approval>,
        /// It was already pending for an earlier run of the same command.
        taken_over: bool,
    },
}

impl PromptResolution {
    /// What decided approval `approval` says at the prompt: type `value` (as decided), or
    /// the rejection.
    pub fn decided(approval: Approval, value: String) -> Self {
        let approval = Box::new(approval);
        if approval.answers() {
            PromptResolution::Answer { approval, value }
        } else {
            PromptResolution::Rejected { approval }
        }
    }
}

/// What became of a cooperative request.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub enum Cooperative {
    /// A new pending approval.
    Pending(Box<Approval>),
    /// This command's request was already decided (the re-run has `AUTO_APPROVAL`).
    AlreadyDecided,
}

/// Which statuses a status change of the shim may replace.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Replace {
    /// Only a run that has not ended.
    Live,
    /// Anything but a cancellation (the shim's final word on how the run ended).
    AnyButCancelled,
}

/// One change a shim makes to its own run; a batch of them is written in one transaction.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub enum RunWrite {
    /// The run's first row.
    Start(Box<ToolRun>),
    /// The tool's pid, once spawned.
    Pid(i32),
    Touch(Touch),
    Status(StatusChange, Replace),
    /// The run was cancelled (by `monitor cancel`): record how the tool really ended, keep
    /// the canceller's status and reason.
    Cancelled {
        exit_code: i32,
        at: String,
    },
    /// A decision seen in wait mode has been typed: used by this run (kept for its resume
    /// while its chain is live, `store::sqlite::chain`). Only a decision offered to this run counts.
    Consume(String),
    /// `None`: the run stops at a prompt (exit 90): what it used stays kept for its resume;
    /// what the run it resumes held for it and it did not use is spent (and that run, still
    /// waiting, fails naming it). `Some(id)`: the prompt went away before `id` could be
    /// typed: it is given back to this run, for the prompt's return.
    Release(Option<String>),
    /// The run ended without a decision on its pending approvals: close them.
    Abandon(String),
    /// The question of this run's pending approval `approval_id` left the tool's screen
    /// (the tool stopped asking it: its own timeout, another answer) or the agent's hook
    /// that asked it is gone: close it as `Abandon` does (`system:withdrawn`), so nobody
    /// decides what nothing waits for. A decision made first stands.
    Withdraw {
        approval_id: String,
        why: String,
    },
    /// The run is parked on an approval: keep its environment (secrets withheld) for the
    /// resume, in its metadata (`env`).
    Environment(crate::mode::SavedEnvironment),
}

/// How a shim's batch went.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Recorded {
    /// The run's row is in the store.
    pub inserted: bool,
    /// The run has been cancelled by someone else (`monitor cancel` on another host, which
    /// cannot signal this shim): end the tool as for the cancel signal.
    pub cancelled: bool,
}

/// Everything one shim needs for its run.
pub trait RunnerStore: Send {
    /// Connects now (to warn early); later calls connect on demand as well.
    fn connect(&mut self) -> StoreResult<()>;

    /// Writes a batch of this run's changes in one transaction. `row_may_exist`: the row
    /// was left for another process to write (spooled), so look before inserting it.
    fn record(
        &mut self,
        run_id: &str,
        writes: &[RunWrite],
        actor: &str,
        row_may_exist: bool,
    ) -> StoreResult<Done<Recorded>>;

    /// Keeps the run's row where another process will write it, for when the store cannot
    /// be written now (locked) and the shim may be killed before it can.
    fn keep_for_later(&mut self, run: &ToolRun) -> bool;

    /// The row kept by [`RunnerStore::keep_for_later`] reached the store after all.
    fn kept_row_landed(&mut self, run_id: &str);

    /// The store was replaced under the running shim (a new, empty one): true once, after
    /// which the run's row must be written again.
    fn replaced(&mut self) -> bool;

    /// Resolves a prompt: an answer already decided, a policy, a takeover, or a new
    /// pending approval.
    fn resolve_prompt(
        &mut self,
        who: &Asker,
        req: &PromptRequest,
        host: &dyn HostFacts,
    ) -> StoreResult<Done<PromptResolution>>;

    /// Records a cooperative tool's `approval_needed` request.
    fn cooperative(
        &mut self,
        who: &Asker,
        req: &CooperativeRequest,
        ttl: Option<Duration>,
        on_expire: OnExpire,
    ) -> StoreResult<Done<Cooperative>>;

    /// Whether a caller's `AUTO_APPROVAL` is a real decision for this run (the inner `Err`
    /// says why not): the unconsumed cooperative approval `approval_id`, decided `value`,
    /// claimed by a worker for resuming run `resumed_from`; consumed by this call.
    fn check_auto_approval(
        &mut self,
        who: &Asker,
        approval_id: &str,
        value: &str,
        resumed_from: Option<&str>,
    ) -> StoreResult<Done<Result<Approval, String>>>;

    /// One approval as it is now.
    fn approval(&mut self, approval_id: &str) -> StoreResult<Option<Approval>>;

    /// Expires overdue approvals.
    fn expire_due(&mut self) -> StoreResult<Done<Vec<Approval>>>;

    /// A cheap mark that changes whenever anything in the store may have changed.
    fn change_mark(&mut self) -> StoreResult<u64>;
}

/// What `monitor doctor` asks of a store.
#[derive(Debug, Clone, PartialEq)]
pub struct StoreHealth {
    pub schema_version: i64,
    pub supported_version: i64,
    /// The journal mode (`wal` expected for SQLite).
    pub journal: String,
}

/// Counts for the dashboard's alerts line.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Counts {
    /// Every run by status.
    pub totals: Vec<(RunStatus, i64)>,
    /// Runs that have not ended, by status.
    pub live: Vec<(RunStatus, i64)>,
    /// Failed runs since the given time.
    pub failed_recent: i64,
    /// Runs ended by the stall timeout since the same time.
    pub stalled_recent: i64,
    /// Pending approvals, and of those how many expire soon.
    pub pending: (i64, i64),
}

/// Everything `monitor` needs.
pub trait OperatorStore {
    /// Connects now (so that a missing or broken store is reported first); later calls
    /// connect on demand as well, and again after an error.
    fn connect(&mut self) -> StoreResult<()>;

    /// A cheap mark that changes whenever anything in the store may have changed.
    fn change_mark(&mut self) -> StoreResult<u64>;

    /// This store as the store itself, for what only it does ([`WorkerStore`],
    /// [`AdminStore`]): the embedded store and the database server's are; a `monitor
    /// serve` server's operator API is not (`None`).
    fn local(&mut self) -> Option<&mut dyn AdminStore> {
        None
    }

    /// The ids of runs (`TR-…`) or approvals (`AP-…`) that start with `prefix` (upper
    /// case), at most `limit`, in id order; an exact id alone when it exists.
    fn ids_starting_with(&mut self, prefix: &str, limit: usize) -> StoreResult<Vec<String>>;

    fn run(&mut self, tool_run_id: &str) -> StoreResult<Option<ToolRun>>;
    fn runs(&mut self, filter: &RunFilter) -> StoreResult<Vec<ToolRun>>;
    /// The runs a shim should still be supervising (no exit code recorded yet).
    fn supervised_runs(&mut self, limit: Option<usize>) -> StoreResult<Vec<ToolRun>>;
    /// Writes the runs as a JSON array (`--json`), streaming; returns how many.
    fn export_runs_json(
        &mut self,
        filter: &RunFilter,
        out: &mut dyn Write,
    ) -> Result<usize, crate::export::ExportError>;
    /// The last `lines` lines of a run's output, cleaned, when the store serves them (a
    /// `monitor serve` server); `None`: the run's log file is on this host
    /// (`StatePaths::run_log`).
    fn output_tail(&mut self, _tool_run_id: &str, _lines: usize) -> StoreResult<Option<String>> {
        Ok(None)
    }

    fn approval(&mut self, approval_id: &str) -> StoreResult<Option<Approval>>;
    fn approvals(&mut self, filter: &ApprovalFilter) -> StoreResult<Vec<Approval>>;

    /// Decides an approval: first writer wins.
    fn decide(
        &mut self,
        approval_id: &str,
        value: &str,
        who: &Decider<'_>,
    ) -> StoreResult<Done<DecideOutcome>>;

    /// Cancels a live run: marked `cancelled`, its pending approvals rejected. Signalling the
    /// shim is the caller's part (it needs the host).
    fn cancel(
        &mut self,
        tool_run_id: &str,
        reason: Option<&str>,
        who: &Decider<'_>,
    ) -> StoreResult<Done<CancelOutcome>>;

    /// The audit rows of one run.
    fn audit_of_run(&mut self, tool_run_id: &str) -> StoreResult<Vec<AuditRow>>;
    /// The audit rows of one approval (whichever run, or none, they are filed under).
    fn audit_of_approval(&mut self, approval_id: &str) -> StoreResult<Vec<AuditRow>>;
    /// Counts for the alerts line; failures since `failed_since`, approvals expiring within
    /// `soon`.
    fn counts(&mut self, failed_since: &str, soon: Duration) -> StoreResult<Counts>;
    /// Only the live counts and pending approvals (cheap, on every change).
    fn live_counts(&mut self, soon: Duration) -> StoreResult<Counts>;
}

/// What resumes runs, on the store itself (never through a server's API: a shim's
/// worker acts as its own login): claims, closes, expiry, reconciling.
pub trait WorkerStore: OperatorStore {
    /// One pass: live runs whose shim is gone (by `host`) fail, overdue approvals expire.
    fn reconcile(
        &mut self,
        actor: &str,
        host: &dyn HostFacts,
    ) -> StoreResult<Done<ReconcileReport>>;

    /// Expires overdue approvals.
    fn expire_due(&mut self) -> StoreResult<Done<Vec<Approval>>>;

    /// Parked runs with decided, unconsumed approvals.
    fn decided_parked(&mut self) -> StoreResult<Vec<ParkedRun>>;
    /// Runs that resumed `waiting_run`, oldest first.
    fn resumes_of(&mut self, waiting_run: &str) -> StoreResult<Vec<ToolRun>>;
    /// Who this session is, as the store authenticated it (DESIGN §14): the embedded
    /// store's owner (an OS user, who alone may write it), the PostgreSQL `session_user`.
    /// The only identity whose recorded commands this session may run again: [`claim`]
    /// refuses any other's run. Fails where this session may not run recorded commands at
    /// all (another user's embedded store; a server's operator API).
    ///
    /// [`claim`]: WorkerStore::claim
    fn identity(&mut self) -> StoreResult<String>;

    /// Claims an approval for resuming: exactly one worker wins. Refused
    /// ([`StoreError::Denied`]) when another identity than this session's started its run
    /// ([`crate::rules::not_owned`]).
    fn claim(&mut self, approval_id: &str, worker: &str) -> StoreResult<bool>;
    /// Takes over the claim of a worker that is gone (refused as [`WorkerStore::claim`]
    /// is).
    fn take_over_claim(&mut self, approval_id: &str, from: &str, to: &str) -> StoreResult<bool>;
    /// Links an approval to the run that resumed with it.
    fn set_resumed_run(&mut self, approval_id: &str, run: &str) -> StoreResult<()>;
    /// Closes a waiting run (the worker's verdict), if it is still in one of `from`.
    fn close_run(
        &mut self,
        tool_run_id: &str,
        change: &StatusChange,
        actor: &str,
        from: &[RunStatus],
    ) -> StoreResult<Done<Option<RunStatus>>>;
    /// Marks an approval consumed by a run (the worker closing after its re-run).
    fn consume(&mut self, approval_id: &str, by_run: &str, actor: &str) -> StoreResult<bool>;
}

/// What administers the store itself: gc, remembered decisions, the audit chain's
/// checks, the schema's health.
pub trait AdminStore: WorkerStore {
    /// What `gc` would remove: the runs and how many approvals.
    fn gc_preview(&mut self, cutoff: &str) -> StoreResult<GcReport>;
    /// Removes finished runs older than `cutoff` with their decided approvals.
    fn gc(&mut self, cutoff: &str, actor: &str) -> StoreResult<GcReport>;

    /// Stores a remembered decision: later prompts of `tool` with this fingerprint, within
    /// `scope`, are answered `value`.
    fn remember(
        &mut self,
        tool: &str,
        prompt_fingerprint: &str,
        scope: &RememberScope,
        value: &str,
        approval_id: &str,
        by: &str,
    ) -> StoreResult<RememberedPolicy>;

    /// The remembered decisions in force, newest first.
    fn remembered(&mut self) -> StoreResult<Vec<RememberedPolicy>>;
    /// Withdraws a remembered decision (audited); `None` when none is in force by that id.
    fn forget(&mut self, policy_id: &str, by: &str) -> StoreResult<Option<RememberedPolicy>>;

    /// The audit rows after row `after` (an id from an earlier row; 0 for the first), oldest
    /// first, at most `limit`: what happened, as a feed a reader can resume.
    fn audit_after(&mut self, after: i64, limit: usize) -> StoreResult<Vec<AuditRow>>;
    /// The id of the newest audit row (0 for an empty chain).
    fn audit_head_id(&mut self) -> StoreResult<i64>;
    /// Checks the audit chain.
    fn verify_audit(&mut self) -> StoreResult<ChainReport>;
    /// The hash of audit row `id` (a head seen before), if the chain has such a row.
    fn audit_hash(&mut self, id: i64) -> StoreResult<Option<String>>;
    /// Decisions without an audit row: (approval id, status).
    fn unrecorded_decisions(&mut self) -> StoreResult<Vec<(String, String)>>;

    /// Schema and journal, for `doctor`.
    fn health(&mut self) -> StoreResult<StoreHealth>;
}

/// The store URL in `HEADLESS_RUN_DB`, when it holds one (a path there is the SQLite
/// database's).
pub fn url_from_env() -> Option<String> {
    std::env::var("HEADLESS_RUN_DB")
        .ok()
        .filter(|v| url::is_url(v))
}

/// The store a shim records its run in: the one `HEADLESS_RUN_DB` names, else the embedded
/// SQLite database of `paths`, created when missing. (A build without a remote store never
/// has one in `paths`: [`StatePaths::resolve`] refuses it.)
pub fn runner(paths: &StatePaths) -> Box<dyn RunnerStore> {
    remote_runner(paths).unwrap_or_else(|| Box::new(sqlite::SqliteStore::create(paths.clone())))
}

/// A second session on the store a shim records in (a wait-mode watcher's), on a database
/// that must exist by then.
pub fn runner_watch(paths: &StatePaths) -> Box<dyn RunnerStore> {
    remote_runner(paths).unwrap_or_else(|| {
        Box::new(sqlite::SqliteStore::existing(paths.clone()).without_settling())
    })
}

/// The runner side of the remote store `paths` names, if it names one.
fn remote_runner(paths: &StatePaths) -> Option<Box<dyn RunnerStore>> {
    #[cfg(feature = "http")]
    if let Some(server) = &paths.server {
        return Some(Box::new(http::HttpRunner::new(server, paths)));
    }
    #[cfg(feature = "postgres")]
    if let Some(url) = &paths.store_url {
        return Some(Box::new(postgres::PgRunner::new(url, paths)));
    }
    let _ = paths;
    None
}

/// A read-only look at the store as it is (no migration), for `monitor doctor`.
pub fn inspector(paths: &StatePaths) -> Box<dyn OperatorStore> {
    remote_operator(paths).unwrap_or_else(|| Box::new(sqlite::SqliteStore::inspect(paths.clone())))
}

/// The store `monitor` works on: a `monitor serve` server's operator API when `paths.server`
/// names one (`monitor --server`, `HEADLESS_RUN_SERVER`), else the one `HEADLESS_RUN_DB`
/// names, else the SQLite database of `paths`, which must exist.
pub fn operator(paths: &StatePaths) -> Box<dyn OperatorStore> {
    remote_operator(paths).unwrap_or_else(|| Box::new(sqlite::SqliteStore::existing(paths.clone())))
}

/// The store itself, for what only it does (resuming runs, gc, the audit chain's checks,
/// remembered decisions): the database server `HEADLESS_RUN_DB` names, else the SQLite
/// database of `paths`, which must exist. A `monitor serve` server's operator API is
/// refused, naming `what`: those are done on the server's host.
pub fn local(paths: &StatePaths, what: &'static str) -> StoreResult<Box<dyn AdminStore>> {
    local_with(paths, what, sqlite::SqliteStore::existing)
}

/// [`local`], read as it is (no migration), for `monitor doctor`.
pub fn local_inspector(paths: &StatePaths, what: &'static str) -> StoreResult<Box<dyn AdminStore>> {
    local_with(paths, what, sqlite::SqliteStore::inspect)
}

fn local_with(
    paths: &StatePaths,
    what: &'static str,
    embedded: fn(StatePaths) -> sqlite::SqliteStore,
) -> StoreResult<Box<dyn AdminStore>> {
    if !capabilities::of(paths).admin {
        return Err(StoreError::NotRemote(what));
    }
    #[cfg(feature = "postgres")]
    if let Some(url) = &paths.store_url {
        return Ok(Box::new(postgres::PgOperator::new(url)));
    }
    Ok(Box::new(embedded(paths.clone())))
}

/// The operator side of the remote store `paths` names, if it names one.
fn remote_operator(paths: &StatePaths) -> Option<Box<dyn OperatorStore>> {
    #[cfg(feature = "http")]
    if let Some(server) = &paths.server {
        return Some(Box::new(remote::HttpOperator::new(server)));
    }
    #[cfg(feature = "postgres")]
    if let Some(url) = &paths.store_url {
        return Some(Box::new(postgres::PgOperator::new(url)));
    }
    let _ = paths;
    None
}
