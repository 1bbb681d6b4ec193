//! The data feed: the dashboard's only store session, on its own thread. It polls the
//! store's change mark and the log files' stamps every 50 ms, reloads a bounded snapshot
//! when something changed, sends it only when it shows something new, and carries out
//! decisions and cancellations, so no query — however slow or locked — ever runs on the
//! thread that reads keys and draws.

use super::app::{Msg, Request, RunQuery};
use super::tail::{self, FileStamp, TailCache};
use hr_shared::approvals::{self, Approval, ApprovalFilter, Decider};
use hr_shared::audit::AuditRow;
use hr_shared::control;
use hr_shared::paths::StatePaths;
use hr_shared::proc;
use hr_shared::rules::{self, HostFacts, LocalHost};
use hr_shared::runs::{RunFilter, ToolRun};
use hr_shared::status::{ApprovalStatus, RunStatus};
use hr_shared::store::{self, OperatorStore, StoreResult, capabilities};
use hr_shared::time;
use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender};
use std::time::{Duration, Instant, SystemTime};

/// How often the database and logs are looked at for changes.
pub const POLL: Duration = Duration::from_millis(50);

/// The look on the PostgreSQL store, where the server's notification (a [`Request::Ring`]
/// from the doorbell thread) says when to look sooner: each look is a query on the
/// server, not a read of a local file.
pub const SERVER_POLL: Duration = Duration::from_secs(1);
/// How often a missing or broken database is tried again.
const RETRY: Duration = Duration::from_secs(1);
/// How often live runs' shims are checked for having vanished (no database change tells).
pub const LIVENESS: Duration = Duration::from_secs(2);
/// The newest runs loaded (counts cover the whole database).
pub const RUN_LIMIT: usize = 300;
/// Pending approvals loaded.
const APPROVAL_LIMIT: usize = 200;
/// Live runs checked for a vanished shim.
const LIVE_LIMIT: usize = 1000;
/// A pending approval expiring within this is an alert.
pub const EXPIRY_SOON: Duration = Duration::from_secs(3600);
/// Failures within this window are an alert.
pub const FAILED_WINDOW: Duration = Duration::from_secs(24 * 3600);
/// Lines of the combined log kept.
const LOG_LINES: usize = 200;
/// Lines of a run's rendered output kept.
const OUTPUT_LINES: usize = 200;

/// How often the whole-database aggregates are read again when no run changed status
/// (they scan an index of every run: tens of milliseconds at 100 000 runs).
const AGGREGATES_EVERY: Duration = Duration::from_secs(5);

/// A live run whose shim is gone: shown, and counted, as failed.
#[derive(Debug, Clone, PartialEq)]
pub struct Vanished {
    /// What it is stored as.
    pub status: RunStatus,
    pub why: String,
}

/// Counts over the whole database, read less often than the rest (see [`AGGREGATES_EVERY`]).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Aggregates {
    /// Runs per stored status (`count_by_status`).
    pub totals: Vec<(RunStatus, i64)>,
    /// Failures within [`FAILED_WINDOW`] (vanished runs not included).
    pub failed_recent: i64,
    /// Runs the stall timeout ended in the same window.
    pub stalled_recent: i64,
}

/// Everything the dashboard shows.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Snapshot {
    /// Runs per live status (queued, running, stalled, waiting for approval).
    pub live: Vec<(RunStatus, i64)>,
    pub aggregates: Aggregates,
    /// Live runs whose shim is gone, by run id.
    pub vanished: BTreeMap<String, Vanished>,
    /// Pending approvals, and how many expire within [`EXPIRY_SOON`].
    pub pending: i64,
    pub expiring: i64,
    /// The newest runs matching the filter, newest first.
    pub runs: Vec<ToolRun>,
    /// Pending approvals, newest first.
    pub approvals: Vec<Approval>,
    /// What asked each pending approval, by run id: the command, where, on which host.
    pub askers: BTreeMap<String, Asker>,
    /// The tail of `logs/combined.log`, oldest first.
    pub log: Vec<tail::LogLine>,
    /// The open run, if one is open.
    pub detail: Option<RunDetail>,
    /// The newest pipeline executions (`monitor pipeline`), newest first.
    pub pipelines: Vec<PipelineRow>,
}

/// A pipeline execution as the dashboard shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PipelineRow {
    pub execution_id: String,
    pub name: String,
    pub status: hr_shared::pipeline::ExecutionState,
    /// Its nodes in the file's order, each with how many times it ran and its latest
    /// visit's status (`completed`, `waiting_approval`, …); nodes not reached are left out.
    pub steps: Vec<(String, usize, String)>,
    /// The pending approval of its waiting human step, to decide by key.
    pub waiting: Option<String>,
}

/// How many pipeline executions the dashboard reads.
const PIPELINE_LIMIT: usize = 20;

/// The newest pipeline executions, from the embedded store or PostgreSQL (a server's operator
/// API keeps none); none before an embedded database exists (the dashboard creates nothing).
fn load_pipelines(
    paths: &StatePaths,
    pipes: &mut Option<Box<dyn hr_shared::store::pipelines::PipelineStore>>,
) -> Vec<PipelineRow> {
    use crate::pipeline::engine::Step;
    use crate::pipeline::file::Definition;
    // A server's operator API keeps none; the embedded store has none before its database
    // exists (and looking would create it). PostgreSQL keeps them for every login to read.
    let can = capabilities::of(paths);
    if !can.pipelines || (can.database_file && !paths.db.exists()) {
        return Vec::new();
    }
    if pipes.is_none() {
        *pipes = hr_shared::store::pipelines::for_store(paths).ok();
    }
    let Some(p) = pipes.as_mut() else {
        return Vec::new();
    };
    let list = match p.pipelines(PIPELINE_LIMIT) {
        Ok(l) => l,
        Err(_) => {
            *pipes = None;
            return Vec::new();
        }
    };
    list.into_iter()
        .map(|e| {
            let def: Option<Definition> = serde_json::from_value(e.definition.clone()).ok();
            let visits = &e.steps;
            let order: Vec<String> = match &def {
                Some(d) => d.nodes.iter().map(|n| n.id.clone()).collect(),
                None => visits.iter().map(|s| s.node.clone()).collect(),
            };
            let mut steps = Vec::new();
            for node in order {
                let mine: Vec<&Step> = visits.iter().filter(|s| s.node == node).collect();
                if let Some(last) = mine.iter().max_by_key(|s| s.iteration) {
                    steps.push((node, mine.len(), last.status.as_str().to_owned()));
                }
            }
            let waiting = visits
                .iter()
                .filter(|s| s.status == crate::pipeline::engine::StepStatus::WaitingApproval)
                .find_map(|s| s.run.as_ref()?.approval_id.clone());
            PipelineRow {
                execution_id: e.execution_id,
                name: e.name,
                status: e.status,
                steps,
                waiting,
            }
        })
        .collect()
}

/// The run that asked an approval, as the operator must see it to decide: its command
/// line, working directory, host and execution.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Asker {
    pub argv: Vec<String>,
    pub cwd: Option<String>,
    pub host: Option<String>,
    pub execution_id: Option<String>,
}

impl Snapshot {
    /// What says whether a run was added or changed status (timestamps left out, so
    /// heartbeats do not count): when it changes, the aggregates are read again at once.
    fn status_mark(&self) -> StatusMark {
        StatusMark {
            runs: self
                .runs
                .iter()
                .map(|r| (r.tool_run_id.clone(), r.status))
                .collect(),
            live: self.live.clone(),
        }
    }
}

impl Snapshot {
    /// Whether the dashboard would show the same for both: equal but for the runs'
    /// heartbeat times, which the runs table does not show (an open run's detail, which
    /// does, is compared whole). Live shims beat every few seconds each; without this every
    /// beat would be drawn again.
    pub fn shows_same(&self, other: &Snapshot) -> bool {
        let Snapshot {
            live,
            aggregates,
            vanished,
            pending,
            expiring,
            runs,
            approvals,
            askers,
            log,
            detail,
            pipelines,
        } = self;
        *live == other.live
            && *aggregates == other.aggregates
            && *vanished == other.vanished
            && *pending == other.pending
            && *expiring == other.expiring
            && runs.len() == other.runs.len()
            && runs.iter().zip(&other.runs).all(|(a, b)| same_row(a, b))
            && *approvals == other.approvals
            && *askers == other.askers
            && *log == other.log
            && *detail == other.detail
            && *pipelines == other.pipelines
    }
}

/// Two runs as the runs table shows them: every field but the heartbeat times.
fn same_row(a: &ToolRun, b: &ToolRun) -> bool {
    // Spelled out, so that a new field must be placed on one side or the other.
    let ToolRun {
        tool_run_id,
        tool_name,
        execution_id,
        status,
        reason,
        exit_code,
        started_at,
        completed_at,
        last_output_at,
        last_heartbeat_at: _,
        supervisor_heartbeat_at: _,
        last_error_msg,
        pid,
        shim_pid,
        shim_start_time,
        host,
        argv_json,
        cwd,
        resumed_from,
        metadata,
        updated_at,
        owner,
    } = a;
    *tool_run_id == b.tool_run_id
        && *tool_name == b.tool_name
        && *execution_id == b.execution_id
        && *status == b.status
        && *reason == b.reason
        && *exit_code == b.exit_code
        && *started_at == b.started_at
        && *completed_at == b.completed_at
        && *last_output_at == b.last_output_at
        && *last_error_msg == b.last_error_msg
        && *pid == b.pid
        && *shim_pid == b.shim_pid
        && *shim_start_time == b.shim_start_time
        && *host == b.host
        && *argv_json == b.argv_json
        && *cwd == b.cwd
        && *resumed_from == b.resumed_from
        && *metadata == b.metadata
        && *updated_at == b.updated_at
        && *owner == b.owner
}

/// The runs' ids and statuses, and the live counts: see [`Snapshot::status_mark`].
#[derive(Debug, Clone, Default, PartialEq)]
struct StatusMark {
    runs: Vec<(String, RunStatus)>,
    live: Vec<(RunStatus, i64)>,
}

/// One run with what its detail view shows.
#[derive(Debug, Clone, PartialEq)]
pub struct RunDetail {
    pub run: ToolRun,
    /// Its approvals, newest first.
    pub approvals: Vec<Approval>,
    /// Its audit trail, oldest first (the last few).
    pub events: Vec<AuditRow>,
    /// Its output tail as a terminal would show it, one string per line.
    pub output: Vec<String>,
    /// Parked on an approval: who runs it again, and why not this user's worker if not
    /// (`rules::resume_note`).
    pub resume: Option<String>,
}

/// Reads the whole-database counts.
pub fn load_aggregates(store: &mut dyn OperatorStore, now: SystemTime) -> StoreResult<Aggregates> {
    let since = time::to_rfc3339(now.checked_sub(FAILED_WINDOW).unwrap_or(now));
    let counts = store.counts(&since, EXPIRY_SOON)?;
    Ok(Aggregates {
        totals: counts.totals,
        failed_recent: counts.failed_recent,
        stalled_recent: counts.stalled_recent,
    })
}

/// Reads what changes with every write, bounded whatever the size of the database: the
/// newest runs, live counts, pending approvals, the log's tail and the open run (the log
/// files through `tails`, so read only when they changed). The aggregates are left empty,
/// and `vanished` (it needs `/proc`, not SQL) to the caller.
pub fn load_view(
    store: &mut dyn OperatorStore,
    paths: &StatePaths,
    query: &RunQuery,
    open_run: Option<&str>,
    tails: &mut TailCache,
    pipes: &mut Option<Box<dyn hr_shared::store::pipelines::PipelineStore>>,
) -> StoreResult<Snapshot> {
    let counts = store.live_counts(EXPIRY_SOON)?;
    let live = counts.live;
    let (pending, expiring) = counts.pending;
    let runs = store.runs(&RunFilter {
        statuses: query.statuses.clone(),
        tool: query.tool.clone(),
        limit: Some(RUN_LIMIT),
        ..RunFilter::default()
    })?;
    // The store lists the pending queue oldest first (a limit keeps those waiting longest);
    // the dashboard shows the newest on top, where a new question appears.
    let mut approvals = store.approvals(&ApprovalFilter {
        statuses: vec![ApprovalStatus::Pending],
        limit: Some(APPROVAL_LIMIT),
        ..ApprovalFilter::default()
    })?;
    approvals.reverse();
    let mut askers = BTreeMap::new();
    for a in &approvals {
        if askers.contains_key(&a.tool_run_id) {
            continue;
        }
        if let Some(run) = store.run(&a.tool_run_id)? {
            askers.insert(
                a.tool_run_id.clone(),
                Asker {
                    argv: run.argv_json,
                    cwd: run.cwd,
                    host: run.host,
                    execution_id: run.execution_id,
                },
            );
        }
    }
    let detail = match open_run {
        Some(id) => load_detail(store, paths, id, tails)?,
        None => None,
    };
    Ok(Snapshot {
        live,
        aggregates: Aggregates::default(),
        vanished: BTreeMap::new(),
        pending,
        expiring,
        runs,
        approvals,
        askers,
        // The combined log is a file of the store's host: none from a server.
        log: if capabilities::of(paths).host_files {
            tails.combined_log(&paths.combined_log(), LOG_LINES)
        } else {
            Vec::new()
        },
        detail,
        pipelines: load_pipelines(paths, pipes),
    })
}

/// Reads a whole snapshot (the view and the aggregates) at once, as the tests want it.
#[cfg(test)]
pub fn load(
    store: &mut dyn OperatorStore,
    paths: &StatePaths,
    query: &RunQuery,
    open_run: Option<&str>,
    now: SystemTime,
) -> StoreResult<Snapshot> {
    let mut snap = load_view(
        store,
        paths,
        query,
        open_run,
        &mut TailCache::default(),
        &mut None,
    )?;
    snap.aggregates = load_aggregates(store, now)?;
    Ok(snap)
}

fn load_detail(
    store: &mut dyn OperatorStore,
    paths: &StatePaths,
    id: &str,
    tails: &mut TailCache,
) -> StoreResult<Option<RunDetail>> {
    let Some(run) = store.run(id)? else {
        return Ok(None);
    };
    let approvals = store.approvals(&ApprovalFilter {
        tool_run_id: Some(id.to_owned()),
        limit: Some(20),
        ..ApprovalFilter::default()
    })?;
    let mut events = store.audit_of_run(id)?;
    let keep = events.len().saturating_sub(12);
    events.drain(..keep);
    // A server serves its host's log, cleaned; locally the log file is rendered here.
    let output = match store.output_tail(id, OUTPUT_LINES)? {
        Some(text) => text.lines().map(str::to_owned).collect(),
        None => tails.run_output(&paths.run_log(id), OUTPUT_LINES),
    };
    let resume = crate::worker::resume_note(store, &run);
    Ok(Some(RunDetail {
        output,
        run,
        approvals,
        events,
        resume,
    }))
}

/// The live runs (running, stalled, waiting for approval) whose shim is gone, with why.
/// Runs parked on an approval or ended as stalled by their shim (an exit code recorded) have
/// no shim on purpose, and are not even read.
pub fn vanished(
    store: &mut dyn OperatorStore,
    host: &dyn HostFacts,
) -> StoreResult<BTreeMap<String, Vanished>> {
    let live = store.supervised_runs(Some(LIVE_LIMIT))?;
    Ok(live
        .iter()
        .filter_map(|r| {
            rules::vanished(r, host).map(|why| {
                (
                    r.tool_run_id.clone(),
                    Vanished {
                        status: r.status,
                        why,
                    },
                )
            })
        })
        .collect())
}

/// Whether two sets of vanished runs name the same runs in the same stored statuses. The
/// reasons are left out: a remote run's says how old its last heartbeat is, which changes
/// every second and is no reason to read everything again (they were compared, and a stale
/// remote run made the dashboard reload every liveness check, forever).
fn same_vanished(a: &BTreeMap<String, Vanished>, b: &BTreeMap<String, Vanished>) -> bool {
    a.len() == b.len()
        && a.iter()
            .zip(b)
            .all(|((ia, va), (ib, vb))| ia == ib && va.status == vb.status)
}

/// What the feed watches to notice a change without querying.
#[derive(Debug, Clone, PartialEq, Default)]
struct Marks {
    data_version: u64,
    db_file: (u64, u64),
    log: Option<FileStamp>,
    run_log: Option<FileStamp>,
}

fn file_id(path: &std::path::Path) -> (u64, u64) {
    std::fs::metadata(path)
        .map(|m| (m.dev(), m.ino()))
        .unwrap_or((0, 0))
}

/// The feed's state on its thread.
struct Feed {
    paths: StatePaths,
    user: String,
    /// Why this process may not decide (inside a supervised tool), if so.
    read_only: Option<String>,
    store: Option<Box<dyn OperatorStore>>,
    host: LocalHost,
    query: RunQuery,
    open_run: Option<String>,
    marks: Marks,
    vanished: BTreeMap<String, Vanished>,
    aggregates: Option<(Instant, Aggregates)>,
    status_mark: StatusMark,
    tails: TailCache,
    /// The pipelines' store session (the embedded store's), opened when there is one.
    pipes: Option<Box<dyn hr_shared::store::pipelines::PipelineStore>>,
    /// The snapshot sent last (none since the database was last lost).
    sent: Option<Snapshot>,
    last_open_attempt: Option<Instant>,
    last_liveness: Instant,
    last_problem: Option<String>,
    tx: Sender<Msg>,
}

/// On the PostgreSQL store: a thread that turns the server's notifications (a decision, a
/// new approval, an expiry) into [`Request::Ring`] for the feed, which then looks at once
/// rather than at its next poll. It ends when the feed is gone.
pub fn spawn_bell(paths: &StatePaths, req: Sender<Request>) {
    // The embedded database's file changes are seen at each short poll.
    if capabilities::of(paths).database_file {
        return;
    }
    let Some(bell) = hr_shared::store::doorbell::for_store(paths) else {
        return;
    };
    let _ = std::thread::Builder::new()
        .name("dashboard-bell".into())
        .spawn(move || {
            loop {
                if bell.wait(Duration::from_secs(3600)) && req.send(Request::Ring).is_err() {
                    return;
                }
            }
        });
}

/// Starts the feed thread. It ends when the request channel closes or the dashboard is
/// gone; `stop` (set by a signal handler) makes it ask the dashboard to quit.
pub fn spawn(
    paths: StatePaths,
    read_only: Option<String>,
    tx: Sender<Msg>,
    rx: Receiver<Request>,
    stop: Arc<AtomicBool>,
) -> std::io::Result<std::thread::JoinHandle<()>> {
    std::thread::Builder::new()
        .name("dashboard-feed".into())
        .spawn(move || {
            let mut feed = Feed {
                paths,
                user: proc::current_user(),
                read_only,
                store: None,
                host: LocalHost::new(),
                query: RunQuery::default(),
                open_run: None,
                marks: Marks::default(),
                vanished: BTreeMap::new(),
                aggregates: None,
                status_mark: StatusMark::default(),
                tails: TailCache::default(),
                pipes: None,
                sent: None,
                last_open_attempt: None,
                last_liveness: Instant::now(),
                last_problem: None,
                tx,
            };
            feed.run(&rx, &stop);
        })
}

impl Feed {
    fn run(&mut self, rx: &Receiver<Request>, stop: &AtomicBool) {
        let mut force = true;
        let poll = if capabilities::of(&self.paths).database_file {
            POLL
        } else {
            SERVER_POLL
        };
        loop {
            match rx.recv_timeout(poll) {
                Ok(req) => {
                    force |= self.handle(req);
                    // Take every request already queued before reading once for all.
                    while let Ok(req) = rx.try_recv() {
                        force |= self.handle(req);
                    }
                }
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => return,
            }
            if stop.load(Ordering::Relaxed) && self.tx.send(Msg::Quit).is_err() {
                return;
            }
            if !self.poll(force) {
                return;
            }
            force = false;
        }
    }

    /// Looks for changes and sends a snapshot when there are any (or `force`); false when
    /// the dashboard is gone.
    fn poll(&mut self, force: bool) -> bool {
        if self.store.is_none() {
            let due = self
                .last_open_attempt
                .is_none_or(|t| t.elapsed() >= RETRY || force);
            if !due {
                return true;
            }
            self.last_open_attempt = Some(Instant::now());
            let mut store = store::operator(&self.paths);
            match store.connect() {
                Ok(()) => {
                    self.store = Some(store);
                    self.marks = Marks::default();
                }
                Err(e) => return self.problem(e.to_string()),
            }
        }
        let Some(store) = self.store.as_mut() else {
            return true;
        };
        let marks = match store.change_mark() {
            Ok(v) => Marks {
                data_version: v,
                // A server's database is no file to be removed or replaced under us.
                db_file: if capabilities::of(&self.paths).database_file {
                    file_id(&self.paths.db)
                } else {
                    (1, 1)
                },
                log: tail::stamp(&self.paths.combined_log()),
                run_log: self
                    .open_run
                    .as_deref()
                    .and_then(|id| tail::stamp(&self.paths.run_log(id))),
            },
            Err(e) => return self.lost(e.to_string()),
        };
        if marks.db_file == (0, 0) {
            // The database file was removed under us: reopen (and report) from scratch.
            return self
                .lost(hr_shared::db::StoreError::Missing(self.paths.db.clone()).to_string());
        }
        let mut changed = force || marks != self.marks;
        if marks.db_file != self.marks.db_file && self.marks.db_file != (0, 0) {
            // Replaced by another file: the open connection still reads the old one.
            self.store = None;
            self.marks = Marks::default();
            return self.poll(true);
        }
        if changed || self.last_liveness.elapsed() >= LIVENESS {
            self.last_liveness = Instant::now();
            match vanished(store.as_mut(), &self.host) {
                // The same runs as before keep the reasons they were first shown with.
                Ok(v) if !same_vanished(&v, &self.vanished) => {
                    changed = true;
                    self.vanished = v;
                }
                Ok(_) => {}
                Err(e) => return self.lost(e.to_string()),
            }
        }
        if !changed {
            return true;
        }
        self.marks = marks;
        let mut snap = match load_view(
            store.as_mut(),
            &self.paths,
            &self.query,
            self.open_run.as_deref(),
            &mut self.tails,
            &mut self.pipes,
        ) {
            Ok(snap) => snap,
            Err(e) => return self.lost(e.to_string()),
        };
        // The aggregates scan every run: read them when a run was added or changed status
        // (or the filter changed), else at most every few seconds.
        let mark = snap.status_mark();
        let stale = self
            .aggregates
            .as_ref()
            .is_none_or(|(at, _)| at.elapsed() >= AGGREGATES_EVERY);
        if force || stale || mark != self.status_mark {
            match load_aggregates(store.as_mut(), SystemTime::now()) {
                Ok(a) => self.aggregates = Some((Instant::now(), a)),
                Err(e) => return self.lost(e.to_string()),
            }
        }
        self.status_mark = mark;
        snap.aggregates = self
            .aggregates
            .as_ref()
            .map(|(_, a)| a.clone())
            .unwrap_or_default();
        snap.vanished = self.vanished.clone();
        // Nothing the dashboard shows moved (a heartbeat, most often): no news to draw. A
        // request's answer or the end of a problem is always sent.
        let news = force
            || self.last_problem.is_some()
            || self.sent.as_ref().is_none_or(|s| !s.shows_same(&snap));
        if !news {
            return true;
        }
        self.last_problem = None;
        self.sent = Some(snap.clone());
        self.tx.send(Msg::Snapshot(Box::new(snap))).is_ok()
    }

    /// The connection failed: drop it and report; the next poll reopens.
    fn lost(&mut self, why: String) -> bool {
        self.store = None;
        self.aggregates = None;
        self.sent = None;
        self.marks = Marks::default();
        self.last_open_attempt = Some(Instant::now());
        self.problem(why)
    }

    fn problem(&mut self, why: String) -> bool {
        if self.last_problem.as_deref() == Some(why.as_str()) {
            return true;
        }
        self.last_problem = Some(why.clone());
        self.tx.send(Msg::StoreDown(why)).is_ok()
    }

    /// Carries out a request; true when the snapshot should be read again.
    fn handle(&mut self, req: Request) -> bool {
        match req {
            Request::Filter(q) => {
                self.query = q;
                true
            }
            Request::Open(id) => {
                self.open_run = id;
                true
            }
            Request::Decide {
                approval_id,
                value,
                comment,
                version,
            } => {
                let result =
                    self.decide(&approval_id, &value, comment.as_deref(), version.as_deref());
                let _ = self.tx.send(Msg::Decided {
                    approval_id,
                    value,
                    result,
                });
                true
            }
            Request::Cancel { run_id } => {
                let result = self.cancel(&run_id);
                let _ = self.tx.send(Msg::Cancelled { run_id, result });
                true
            }
            // The change mark decides whether anything is new.
            Request::Ring => false,
        }
    }

    fn writable(&mut self) -> Result<&mut dyn OperatorStore, String> {
        if let Some(why) = &self.read_only {
            return Err(format!("refused: {why}"));
        }
        if self.store.is_none() {
            let mut store = store::operator(&self.paths);
            if store.connect().is_ok() {
                self.store = Some(store);
            }
        }
        match self.store.as_mut() {
            Some(store) => Ok(store.as_mut()),
            None => Err("the database is not available".to_owned()),
        }
    }

    fn decide(
        &mut self,
        approval_id: &str,
        value: &str,
        comment: Option<&str>,
        version: Option<&str>,
    ) -> Result<approvals::DecideOutcome, String> {
        let user = self.user.clone();
        let paths = self.paths.clone();
        let store = self.writable()?;
        let groups = hr_shared::proc::current_groups();
        let who = Decider {
            by: &user,
            channel: "tui",
            comment,
            version,
            groups: &groups,
        };
        control::decide(store, &paths, approval_id, value, &who).map_err(|e| e.to_string())
    }

    fn cancel(&mut self, run_id: &str) -> Result<control::CancelOutcome, String> {
        let user = self.user.clone();
        let host = self.host.clone();
        let paths = self.paths.clone();
        let store = self.writable()?;
        let who = Decider {
            by: &user,
            channel: "tui",
            comment: None,
            version: None,
            groups: &[],
        };
        // A server signals the run's headless-run on its own host: nothing is signalled here.
        control::cancel(
            store,
            &paths,
            run_id,
            Some("from the dashboard"),
            &who,
            &host,
        )
        .map_err(|e| e.to_string())
    }
}
