//! The state-store thread: every database write of a run, and the `tool_status_change`
//! events of `combined.log`, happen here, never on the path that copies output. If the
//! database cannot be used the shim warns once and the tool runs on unrecorded; writes that
//! fail are kept and retried with the next batch, so a database locked for a while loses
//! nothing.

use crate::approval::{self, Asker, Cooperative, Effects, PromptRequest, PromptResolution};
use hr_shared::approvals::{self, Approval};
use hr_shared::config::OnExpire;
use hr_shared::db::{self, OpenMode, StoreError};
use hr_shared::event::CooperativeRequest;
use hr_shared::event::{EventBody, LogEvent};
use hr_shared::logfile::CombinedLog;
use hr_shared::paths::StatePaths;
use hr_shared::runs::{self, Guard, SUPERVISOR_HEARTBEAT, StatusChange, ToolRun, Touch};
use hr_shared::status::RunStatus;
use hr_shared::{proc, spool, time};
use rusqlite::Connection;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::time::{Duration, Instant};

/// Names a run in events.
#[derive(Debug, Clone)]
pub struct RunIdentity {
    pub tool_run_id: String,
    pub tool: String,
    pub execution_id: String,
    /// The command's fingerprint (tool, argv, cwd), to find decisions for it.
    pub request_fingerprint: String,
}

/// Which statuses a status message may replace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Replace {
    /// Only a run that has not ended.
    Live,
    /// Anything but a cancellation (the shim's final word on how the run ended).
    AnyButCancelled,
}

/// A reply to a request that needs the database.
pub type Reply<T> = Sender<Result<T, String>>;

/// A request to the store thread.
pub enum StoreMsg {
    Start(Box<ToolRun>),
    /// The tool's pid, once spawned (when the row was written before).
    Pid(i32),
    Touch(Touch),
    Status(StatusChange, Replace),
    /// The run was cancelled (by `monitor cancel`): record how the tool really ended, keep
    /// the canceller's status and reason.
    Cancelled {
        exit_code: i32,
    },
    /// Resolve a prompt: answer, reject or a pending approval.
    Prompt(Box<PromptRequest>, Reply<PromptResolution>),
    /// Record a cooperative tool's request.
    Cooperative {
        request: Box<CooperativeRequest>,
        ttl: Option<Duration>,
        on_expire: OnExpire,
        reply: Reply<Cooperative>,
    },
    /// Check a caller's `AUTO_APPROVAL` against the approval it claims to come from.
    AutoApproval {
        approval_id: Option<String>,
        value: String,
        reply: Reply<Approval>,
    },
    /// A decision seen in wait mode has been typed: it is used up.
    Consume(String),
    /// The run ended without a decision on its pending approvals: close them.
    Abandon(String),
    /// Give back answers this run used: all of them (`None`: it stops at a prompt, exit 90,
    /// and its re-run needs them again), or one that could not be typed after all.
    ReleaseConsumed(Option<String>),
    Shutdown,
}

/// The sending side, cloneable for other threads.
#[derive(Clone)]
pub struct StoreSender(Sender<StoreMsg>);

impl StoreSender {
    /// Queues a message; a stopped store drops it.
    pub fn send(&self, msg: StoreMsg) {
        let _ = self.0.send(msg);
    }
}

/// The store thread of one run.
pub struct StoreHandle {
    tx: StoreSender,
    /// Whether everything was written (false: it must be spooled).
    done: Receiver<bool>,
}

/// The longest a request to the store may take: two busy timeouts and some.
pub const ASK_TIMEOUT: Duration = Duration::from_secs(db::BUSY_TIMEOUT.as_secs() * 2 + 2);

/// Prints one warning per process for each kind of trouble.
pub fn warn_once(flag: &AtomicBool, msg: impl FnOnce() -> String) {
    if !flag.swap(true, Ordering::Relaxed) {
        eprintln!("headless-run: warning: {}", msg());
    }
}

impl StoreHandle {
    /// Starts the thread; `paths` is `None` when no state dir could be resolved.
    pub fn start(paths: Option<StatePaths>, ident: RunIdentity) -> StoreHandle {
        let (tx, rx) = mpsc::channel();
        let (done_tx, done) = mpsc::channel();
        // Never joined (see `finish`): a thread that could not start leaves `done` without a
        // sender, which `finish` reads as "not landed".
        let _ = std::thread::Builder::new()
            .name("store".into())
            .spawn(move || {
                let mut store = StoreThread::new(paths, ident);
                let landed = store.run(rx);
                // Report as soon as the last write is committed: closing the connection may
                // checkpoint the WAL (fsyncs), which the shim's exit need not wait for. A
                // checkpoint cut short by the exit is safe; the next opener finishes it.
                let _ = done_tx.send(landed);
                drop(store);
            });
        StoreHandle {
            tx: StoreSender(tx),
            done,
        }
    }

    /// A sender for other threads.
    pub fn sender(&self) -> StoreSender {
        self.tx.clone()
    }

    /// Queues a message.
    pub fn send(&self, msg: StoreMsg) {
        self.tx.send(msg);
    }

    /// Sends a request that needs an answer and waits for it (bounded: a database locked for
    /// longer than its busy timeout is an error, not a hang).
    pub fn ask<T>(&self, make: impl FnOnce(Reply<T>) -> StoreMsg) -> Result<T, String> {
        self.request(make)
            .recv_timeout(ASK_TIMEOUT)
            .unwrap_or_else(|_| Err("the state store did not answer".to_owned()))
    }

    /// Sends a request that needs an answer; the answer arrives on the returned channel.
    pub fn request<T>(
        &self,
        make: impl FnOnce(Reply<T>) -> StoreMsg,
    ) -> Receiver<Result<T, String>> {
        let (tx, rx) = mpsc::channel();
        self.send(make(tx));
        rx
    }

    /// Flushes what is queued and stops, waiting at most `wait` for the thread. False when
    /// the run's last writes did not land because the database stayed locked (or the store
    /// did not finish in time): the caller spools them.
    pub fn finish(self, wait: Duration) -> bool {
        self.send(StoreMsg::Shutdown);
        // Not joined: the thread may still be closing the database (a checkpoint), which the
        // shim's exit does not wait for.
        self.done.recv_timeout(wait).unwrap_or(false)
    }
}

/// A write waiting for the database.
enum Op {
    Start(Box<ToolRun>),
    Pid(i32),
    Touch(Touch),
    Status(StatusChange, Replace),
    Cancelled { exit_code: i32, at: String },
    Consume(String),
    Release(Option<String>),
    Abandon(String),
}

struct StoreThread {
    paths: Option<StatePaths>,
    ident: RunIdentity,
    conn: Option<Connection>,
    opened: bool,
    log: Option<CombinedLog>,
    actor: String,
    inserted: bool,
    /// Writes that failed, retried before new ones.
    backlog: Vec<Op>,
    /// The last write failed because the database was locked (worth spooling for later).
    locked: bool,
    /// The run's row as first written: inserted again if the database is replaced.
    start_row: Option<ToolRun>,
    /// The row could not be inserted (the database is locked) and was spooled meanwhile, so
    /// that a shim killed before the lock goes still leaves its run behind.
    spooled_start: bool,
    /// The database file the connection has open (device, inode).
    db_file: Option<(u64, u64)>,
    /// An approval was asked for (so there may be one to abandon when the run ends).
    asked: bool,
    status: RunStatus,
    warned_db: AtomicBool,
    warned_log: AtomicBool,
}

impl StoreThread {
    fn new(paths: Option<StatePaths>, ident: RunIdentity) -> Self {
        StoreThread {
            paths,
            ident,
            conn: None,
            opened: false,
            log: None,
            actor: proc::current_user(),
            inserted: false,
            backlog: Vec::new(),
            locked: false,
            start_row: None,
            spooled_start: false,
            db_file: None,
            asked: false,
            status: RunStatus::Running,
            warned_db: AtomicBool::new(false),
            warned_log: AtomicBool::new(false),
        }
    }

    fn open(&mut self) {
        if self.opened {
            return;
        }
        self.opened = true;
        let Some(paths) = &self.paths else {
            warn_once(&self.warned_db, || {
                "no state dir (set HEADLESS_RUN_HOME); the run is not recorded".into()
            });
            return;
        };
        if let Err(e) = paths.ensure_dirs() {
            warn_once(&self.warned_log, || {
                format!(
                    "cannot create {}: {e}; logs are not written",
                    paths.root.display()
                )
            });
        }
        match db::open(&paths.db, OpenMode::Create) {
            Ok(mut conn) => {
                self.db_file = file_id(&paths.db);
                // Runs an earlier shim could not write before it exited.
                let _ = spool::replay(&mut conn, paths, &self.actor);
                self.conn = Some(conn);
            }
            Err(e) => {
                self.locked = matches!(e, StoreError::Locked);
                self.db_warning(&e);
            }
        }
        match paths.open_creating(|| CombinedLog::open(&paths.combined_log())) {
            Ok(log) => self.log = Some(log),
            Err(e) => warn_once(&self.warned_log, || {
                format!(
                    "cannot write {}: {e}; events are not logged",
                    paths.combined_log().display()
                )
            }),
        }
    }

    fn db_warning(&self, e: &StoreError) {
        let db = self
            .paths
            .as_ref()
            .map(|p| p.db.display().to_string())
            .unwrap_or_default();
        warn_once(&self.warned_db, || {
            format!("state store {db} unavailable ({e}); the tool runs on, unrecorded")
        });
    }

    /// Serves requests until told to stop; returns whether everything landed (false only
    /// when writes are left over because the database was locked).
    fn run(&mut self, rx: Receiver<StoreMsg>) -> bool {
        self.open();
        let mut next_beat = Instant::now() + SUPERVISOR_HEARTBEAT;
        loop {
            let wait = next_beat.saturating_duration_since(Instant::now());
            let mut batch = Vec::new();
            match rx.recv_timeout(wait) {
                Ok(msg) => batch.push(msg),
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => {
                    self.flush(Vec::new());
                    return self.landed();
                }
            }
            batch.extend(rx.try_iter());
            let mut ops = Vec::new();
            if Instant::now() >= next_beat {
                next_beat = Instant::now() + SUPERVISOR_HEARTBEAT;
                ops.push(Op::Touch(Touch {
                    supervisor_heartbeat_at: Some(time::now_rfc3339()),
                    ..Touch::default()
                }));
            }
            for msg in batch {
                match msg {
                    StoreMsg::Start(run) => ops.push(Op::Start(run)),
                    StoreMsg::Pid(pid) => ops.push(Op::Pid(pid)),
                    StoreMsg::Touch(t) => ops.push(Op::Touch(t)),
                    StoreMsg::Status(change, replace) => ops.push(Op::Status(change, replace)),
                    StoreMsg::Cancelled { exit_code } => ops.push(Op::Cancelled {
                        exit_code,
                        at: time::now_rfc3339(),
                    }),
                    StoreMsg::Consume(id) => ops.push(Op::Consume(id)),
                    // A run that never asked has nothing to abandon: no query for it.
                    StoreMsg::Abandon(why) if self.asked => ops.push(Op::Abandon(why)),
                    StoreMsg::Abandon(_) => {}
                    StoreMsg::ReleaseConsumed(one) => ops.push(Op::Release(one)),
                    StoreMsg::Prompt(req, reply) => {
                        self.asked = true;
                        self.flush(std::mem::take(&mut ops));
                        let asker = self.asker();
                        let out = self.with_conn(|conn| approval::resolve(conn, &asker, &req));
                        let _ = reply.send(out);
                    }
                    StoreMsg::Cooperative {
                        request,
                        ttl,
                        on_expire,
                        reply,
                    } => {
                        self.asked = true;
                        self.flush(std::mem::take(&mut ops));
                        let asker = self.asker();
                        let out = self.with_conn(|conn| {
                            approval::cooperative(conn, &asker, &request, ttl, on_expire)
                        });
                        let _ = reply.send(out);
                    }
                    StoreMsg::AutoApproval {
                        approval_id,
                        value,
                        reply,
                    } => {
                        self.flush(std::mem::take(&mut ops));
                        let asker = self.asker();
                        let out = match self.conn.as_mut() {
                            None => Err("the state store is unavailable".to_owned()),
                            Some(conn) => approval::validate_auto_approval(
                                conn,
                                &asker,
                                approval_id.as_deref(),
                                &value,
                            ),
                        };
                        let out = out.map(|(a, fx)| {
                            self.apply(fx);
                            a
                        });
                        let _ = reply.send(out);
                    }
                    StoreMsg::Shutdown => {
                        self.flush(ops);
                        return self.landed();
                    }
                }
            }
            self.flush(ops);
        }
    }

    fn landed(&self) -> bool {
        self.backlog.is_empty() || !self.locked
    }

    /// The database file was deleted or replaced under the running shim: open the new one
    /// and write the run's row into it again, so the rest of the run is not lost with the
    /// old file.
    fn reopen_if_replaced(&mut self, ops: &mut Vec<Op>) {
        let Some(paths) = &self.paths else { return };
        if self.conn.is_none() || file_id(&paths.db) == self.db_file {
            return;
        }
        warn_once(&self.warned_db, || {
            format!(
                "the state database {} was deleted or replaced while the tool ran; recording into a new one",
                paths.db.display()
            )
        });
        self.conn = None;
        match db::open(&paths.db, OpenMode::Create) {
            Ok(conn) => {
                self.conn = Some(conn);
                self.db_file = file_id(&paths.db);
                self.inserted = false;
                if let Some(row) = &self.start_row {
                    ops.insert(0, Op::Start(Box::new(row.clone())));
                }
            }
            Err(e) => self.db_warning(&e),
        }
    }

    fn asker(&self) -> Asker {
        Asker {
            tool_run_id: self.ident.tool_run_id.clone(),
            tool: self.ident.tool.clone(),
            execution_id: self.ident.execution_id.clone(),
            request_fingerprint: self.ident.request_fingerprint.clone(),
            actor: self.actor.clone(),
        }
    }

    /// Runs a transaction that reports its effects; logs them and answers with its result.
    fn with_conn<T>(
        &mut self,
        f: impl FnOnce(&mut Connection) -> db::Result<(T, Effects)>,
    ) -> Result<T, String> {
        let Some(conn) = self.conn.as_mut() else {
            return Err(match &self.paths {
                Some(p) => format!("the state store {} is unavailable", p.db.display()),
                None => "no state dir".to_owned(),
            });
        };
        match f(conn) {
            Ok((out, fx)) => {
                self.apply(fx);
                Ok(out)
            }
            Err(e) => Err(e.to_string()),
        }
    }

    /// Logs a transaction's events and notes this run's new status.
    fn apply(&mut self, fx: Effects) {
        for w in &fx.warnings {
            eprintln!("headless-run: warning: {w}");
        }
        if let Some(st) = fx.status {
            self.status = st;
        }
        if let Some(log) = self.log.as_mut() {
            for e in &fx.events {
                if let Err(err) = log.append(e) {
                    warn_once(&self.warned_log, || {
                        format!("cannot write {}: {err}", log.path().display())
                    });
                    break;
                }
            }
        }
    }

    /// Writes the backlog and `ops` in one transaction; logs status events either way.
    fn flush(&mut self, ops: Vec<Op>) {
        for op in &ops {
            self.log_op(op);
        }
        let mut all = std::mem::take(&mut self.backlog);
        all.extend(ops);
        if all.is_empty() {
            return;
        }
        for op in &all {
            if let Op::Start(run) = op
                && self.start_row.is_none()
            {
                self.start_row = Some((**run).clone());
            }
        }
        self.reopen_if_replaced(&mut all);
        let Some(conn) = self.conn.as_mut() else {
            self.backlog = all;
            self.spool_start_if_locked();
            return;
        };
        let mut abandoned = Vec::new();
        let actor = self.actor.clone();
        let mut inserted = self.inserted;
        // Only a row that was spooled can already be there (replayed by another process).
        let maybe_replayed = self.spooled_start;
        let id = self.ident.tool_run_id.clone();
        let result = db::write(conn, |tx| {
            for op in &all {
                match op {
                    Op::Start(run) => {
                        // A spooled row may be there already: replayed by another process
                        // before this write.
                        if !inserted && (!maybe_replayed || runs::get(tx, &id)?.is_none()) {
                            runs::insert(tx, run, &actor)?;
                        }
                        inserted = true;
                    }
                    Op::Touch(t) => runs::touch(tx, &id, t)?,
                    Op::Pid(pid) => runs::set_pid(tx, &id, i64::from(*pid))?,
                    Op::Status(change, replace) => {
                        let guard = match replace {
                            Replace::Live => Guard::NotFinal,
                            Replace::AnyButCancelled => Guard::From(&NOT_CANCELLED),
                        };
                        runs::change_status(tx, &id, change, &actor, guard)?;
                    }
                    Op::Cancelled { exit_code, at } => {
                        let current = runs::get(tx, &id)?.map(|r| r.status);
                        if current == Some(RunStatus::Cancelled) {
                            runs::record_exit(tx, &id, *exit_code, at)?;
                        } else {
                            // Cancelled by a signal nobody recorded: say so.
                            let change = StatusChange {
                                exit_code: Some(*exit_code),
                                at: Some(at.clone()),
                                ..StatusChange::to(
                                    RunStatus::Cancelled,
                                    Some("cancelled by a signal to headless-run".into()),
                                )
                            };
                            runs::change_status(tx, &id, &change, &actor, Guard::NotFinal)?;
                        }
                    }
                    Op::Consume(approval_id) => {
                        approvals::consume(tx, approval_id, &id, &actor)?;
                    }
                    Op::Release(one) => {
                        let why = match one {
                            None => "the run stopped at a later prompt",
                            Some(_) => "the prompt went away before the answer was typed",
                        };
                        approvals::release_consumed(tx, &id, one.as_deref(), why, &actor)?;
                    }
                    Op::Abandon(why) => {
                        abandoned = approvals::abandon_pending(tx, &id, why)?;
                    }
                }
            }
            Ok(())
        });
        match result {
            Ok(()) => {
                self.inserted = inserted;
                self.locked = false;
                if std::mem::take(&mut self.spooled_start)
                    && let Some(paths) = &self.paths
                {
                    spool::discard(paths, &id);
                }
                let events: Vec<LogEvent> = abandoned.iter().map(Approval::status_event).collect();
                self.apply(Effects {
                    events,
                    ..Effects::default()
                });
            }
            Err(e) => {
                self.locked = matches!(e, StoreError::Locked);
                self.db_warning(&e);
                self.spool_start_if_locked();
                // Keep what matters for a later attempt: the row itself and status changes.
                self.backlog = all
                    .into_iter()
                    .filter(|op| !matches!(op, Op::Touch(_)))
                    .collect();
            }
        }
    }

    /// While the database is locked and the run's row has not landed, the row is kept in
    /// the spool: a shim killed before the lock goes then still leaves its run behind (the
    /// next writer inserts it, and reconcile finds its shim gone).
    fn spool_start_if_locked(&mut self) {
        if self.locked
            && !self.inserted
            && !self.spooled_start
            && let (Some(paths), Some(row)) = (&self.paths, &self.start_row)
        {
            self.spooled_start = spool::write(paths, row).is_ok();
        }
    }

    fn log_op(&mut self, op: &Op) {
        let body = match op {
            Op::Start(run) => EventBody::ToolStatusChange {
                status: run.status,
                previous_status: None,
                reason: run.reason.clone(),
                exit_code: None,
            },
            Op::Status(change, _) => EventBody::ToolStatusChange {
                status: change.status,
                previous_status: Some(self.status),
                reason: change.reason.clone(),
                exit_code: change.exit_code,
            },
            Op::Cancelled { exit_code, .. } => EventBody::ToolStatusChange {
                status: RunStatus::Cancelled,
                previous_status: Some(self.status),
                reason: None,
                exit_code: Some(*exit_code),
            },
            _ => return,
        };
        if let EventBody::ToolStatusChange { status, .. } = &body {
            self.status = *status;
        }
        let Some(log) = self.log.as_mut() else {
            return;
        };
        let event = LogEvent {
            body,
            timestamp: time::now_rfc3339(),
            tool: self.ident.tool.clone(),
            tool_run_id: self.ident.tool_run_id.clone(),
            execution_id: Some(self.ident.execution_id.clone()),
        };
        if let Err(e) = log.append(&event) {
            warn_once(&self.warned_log, || {
                format!("cannot write {}: {e}", log.path().display())
            });
        }
    }
}

const NOT_CANCELLED: [RunStatus; 7] = [
    RunStatus::Queued,
    RunStatus::Running,
    RunStatus::Completed,
    RunStatus::Failed,
    RunStatus::FailedTimeout,
    RunStatus::Stalled,
    RunStatus::WaitingApproval,
];

/// The (device, inode) of a file, to notice it being replaced.
fn file_id(path: &Path) -> Option<(u64, u64)> {
    std::fs::metadata(path).ok().map(|m| (m.dev(), m.ino()))
}
