//! The state-store thread: every database write of a run, and the `tool_status_change`
//! events of `combined.log`, happen here, never on the path that copies output. If the
//! database cannot be used the shim warns once and the tool runs on unrecorded; writes that
//! fail are kept and retried with the next batch, so a database locked for a while loses
//! nothing.

use hr_shared::db::{self, OpenMode, StoreError};
use hr_shared::event::{EventBody, LogEvent};
use hr_shared::logfile::CombinedLog;
use hr_shared::paths::StatePaths;
use hr_shared::runs::{self, Guard, SUPERVISOR_HEARTBEAT, StatusChange, ToolRun, Touch};
use hr_shared::status::RunStatus;
use hr_shared::{proc, time};
use rusqlite::Connection;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};


/// Names a run in events.
#[derive(Debug, Clone)]
pub struct RunIdentity {
    pub tool_run_id: String,
    pub tool: String,
    pub execution_id: String,
}

/// Which statuses a status message may replace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Replace {
    /// Only a run that has not ended.
    Live,
    /// Anything but a cancellation (the shim's final word on how the run ended).
    AnyButCancelled,
}

type Call = Box<dyn FnOnce(Option<&mut Connection>) + Send>;

/// A request to the store thread.
pub enum StoreMsg {
    Start(Box<ToolRun>),
    Touch(Touch),
    Status(StatusChange, Replace),
    Call(Call),
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
    thread: Option<JoinHandle<()>>,
    done: Receiver<()>,
}

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
        let thread = std::thread::Builder::new()
            .name("store".into())
            .spawn(move || {
                StoreThread::new(paths, ident).run(rx);
                let _ = done_tx.send(());
            })
            .ok();
        StoreHandle {
            tx: StoreSender(tx),
            thread,
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

    /// Runs `f` on the store thread (after everything queued before it) and waits for its
    /// answer. `Err` when the store is unavailable or did not answer in time.
    pub fn call<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Connection) -> db::Result<T> + Send + 'static,
    ) -> Result<T, String> {
        let (tx, rx) = mpsc::channel();
        self.send(StoreMsg::Call(Box::new(move |conn| {
            let out = match conn {
                Some(conn) => f(conn).map_err(|e| e.to_string()),
                None => Err("the state store is unavailable".to_owned()),
            };
            let _ = tx.send(out);
        })));
        rx.recv_timeout(db::BUSY_TIMEOUT * 2 + Duration::from_secs(2))
            .unwrap_or_else(|_| Err("the state store did not answer".to_owned()))
    }

    /// Flushes what is queued and stops, waiting at most `wait` for the thread.
    pub fn finish(mut self, wait: Duration) {
        self.send(StoreMsg::Shutdown);
        if self.done.recv_timeout(wait).is_ok()
            && let Some(t) = self.thread.take()
        {
            let _ = t.join();
        }
    }
}

/// A write waiting for the database.
enum Op {
    Start(Box<ToolRun>),
    Touch(Touch),
    Status(StatusChange, Replace),
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
            Ok(conn) => self.conn = Some(conn),
            Err(e) => self.db_warning(&e),
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

    fn run(mut self, rx: Receiver<StoreMsg>) {
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
                    return;
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
                    StoreMsg::Touch(t) => ops.push(Op::Touch(t)),
                    StoreMsg::Status(change, replace) => ops.push(Op::Status(change, replace)),
                    StoreMsg::Call(call) => {
                        self.flush(std::mem::take(&mut ops));
                        call(self.conn.as_mut());
                    }
                    StoreMsg::Shutdown => {
                        self.flush(ops);
                        return;
                    }
                }
            }
            self.flush(ops);
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
        let Some(conn) = self.conn.as_mut() else {
            return;
        };
        let actor = self.actor.clone();
        let mut inserted = self.inserted;
        let id = self.ident.tool_run_id.clone();
        let result = db::write(conn, |tx| {
            for op in &all {
                match op {
                    Op::Start(run) => {
                        if !inserted {
                            runs::insert(tx, run, &actor)?;
                            inserted = true;
                        }
                    }
                    Op::Touch(t) => runs::touch(tx, &id, t)?,
                    Op::Status(change, replace) => {
                        let guard = match replace {
                            Replace::Live => Guard::NotFinal,
                            Replace::AnyButCancelled => Guard::From(&NOT_CANCELLED),
                        };
                        runs::change_status(tx, &id, change, &actor, guard)?;
                    }
                }
            }
            Ok(())
        });
        match result {
            Ok(()) => self.inserted = inserted,
            Err(e) => {
                self.db_warning(&e);
                // Keep what matters for a later attempt: the row itself and status changes.
                self.backlog = all
                    .into_iter()
                    .filter(|op| matches!(op, Op::Start(_) | Op::Status(..)))
                    .collect();
            }
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
