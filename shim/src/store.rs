//! The state-store thread: every database write of a run, and the `tool_status_change`
//! events of `combined.log`, happen here, never on the path that copies output. If the
//! database cannot be used the shim warns once and the tool runs on unrecorded; writes that
//! fail are kept and retried with the next batch, so a database locked for a while loses
//! nothing.

use hr_shared::approvals::Approval;
use hr_shared::config::OnExpire;
use hr_shared::db::{self, StoreError};
use hr_shared::event::CooperativeRequest;
use hr_shared::event::{EventBody, LogEvent};
use hr_shared::logfile::CombinedLog;
use hr_shared::paths::StatePaths;
use hr_shared::rules::LocalHost;
use hr_shared::runs::{SUPERVISOR_HEARTBEAT, StatusChange, ToolRun, Touch};
use hr_shared::status::RunStatus;
use hr_shared::store::{
    self, Asker, Cooperative, Done, Effects, PromptRequest, PromptResolution, RunWrite, RunnerStore,
};
use hr_shared::{proc, time};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub use hr_shared::store::Replace;

/// A reply to a request that needs the database.
pub type Reply<T> = Sender<Result<T, String>>;

/// A request to the store thread.
pub enum StoreMsg {
    /// A change to the run, written with the next batch.
    Write(RunWrite),
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
        /// The run this one resumes (`HEADLESS_RUN_RESUMED_FROM`), as the worker says.
        resumed_from: Option<String>,
        reply: Reply<Approval>,
    },
    Shutdown,
}

/// The sending side, cloneable for other threads.
#[derive(Clone)]
pub struct StoreSender {
    tx: Sender<StoreMsg>,
    journal: Arc<Journal>,
}

impl StoreSender {
    /// Queues a message; a stopped store drops it. A request that needs the database's
    /// answer marks the run as one whose end is never handed to a finisher.
    pub fn send(&self, msg: StoreMsg) {
        if !matches!(msg, StoreMsg::Write(_) | StoreMsg::Shutdown) {
            self.journal.lock().asked = true;
        }
        let _ = self.tx.send(msg);
    }

    /// Queues a change to the run; a copy stays in the journal while the store is not
    /// open.
    pub fn write(&self, w: RunWrite) {
        {
            let mut j = self.journal.lock();
            if !j.opened {
                j.entries.push(w.clone());
            }
        }
        let _ = self.tx.send(StoreMsg::Write(w));
    }
}

/// The run's writes while its store thread has not started (on the embedded store it starts
/// after [`DEFER`], or when something needs an answer): what a finisher is handed when the
/// tool ends before then (`StoreHandle::hand_off`).
#[derive(Default)]
pub struct Journal {
    state: Mutex<JournalState>,
}

#[derive(Default)]
struct JournalState {
    /// The writes sent, in order (while the store is not open).
    entries: Vec<RunWrite>,
    /// The run asked the store something (a prompt, a cooperative request, a decision to
    /// check): its end has effects only its own store thread knows of.
    asked: bool,
    /// The store thread has started: it writes the run's end itself, as it knows how the
    /// store is (locked, unusable, another's).
    opened: bool,
}

impl Journal {
    fn lock(&self) -> std::sync::MutexGuard<'_, JournalState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The store thread of one run.
pub struct StoreHandle {
    tx: StoreSender,
    /// Whether everything was written (false: it must be spooled).
    done: Receiver<bool>,
    /// The state dir and the run, for a finisher.
    paths: Option<StatePaths>,
    ident: Asker,
    /// The store thread until it starts, and when it is to.
    idle: Mutex<Option<Idle>>,
    due: Instant,
}

/// The longest a request to the store may take: two busy timeouts and some.
pub const ASK_TIMEOUT: Duration = Duration::from_secs(db::BUSY_TIMEOUT.as_secs() * 2 + 2);

/// Whether the cancel signal has a handler in this process (the supervision installed
/// it): raised before then, its default action would kill the shim.
fn cancel_handled() -> bool {
    // SAFETY: sigaction with a null new action only reads the current one into `old`.
    unsafe {
        let mut old: libc::sigaction = std::mem::zeroed();
        libc::sigaction(hr_shared::mode::CANCEL_SIGNAL, std::ptr::null(), &mut old) == 0
            && old.sa_sigaction != libc::SIG_DFL
            && old.sa_sigaction != libc::SIG_IGN
    }
}

/// Prints one warning per process for each kind of trouble.
pub fn warn_once(flag: &AtomicBool, msg: impl FnOnce() -> String) {
    if !flag.swap(true, Ordering::Relaxed) {
        warn(&msg());
    }
}

/// One warning on stderr. Never fails: a finisher's stderr may be a pipe its reader has
/// closed by then (`eprintln!` would panic, and the run would be lost with it).
pub fn warn(msg: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr().lock(), "headless-run: warning: {msg}");
}

/// The store thread before it is started: what it is started with.
struct Idle {
    paths: Option<StatePaths>,
    ident: Asker,
    refused: Option<String>,
    rx: Receiver<StoreMsg>,
    done_tx: Sender<bool>,
}

impl StoreHandle {
    /// The run's store; `paths` is `None` when there is no state store to use: none could
    /// be resolved, or `refused` says why the one resolved is not used. `ident` names the
    /// run; its `actor` and `tool_digest` are filled in on the thread (looking them up is
    /// kept off the shim's start).
    ///
    /// The store thread starts at once for a remote store. For the embedded store it starts
    /// once the run has lasted `HEADLESS_RUN_STORE_DEFER` ([`start_if_due`](Self::start_if_due)),
    /// or as soon as something needs an answer or the run ends; until then the run's writes
    /// wait in the journal, and a run that ends first is handed to a finisher
    /// ([`hand_off`](Self::hand_off)) without the store ever being opened here.
    pub fn start(paths: Option<StatePaths>, ident: Asker, refused: Option<String>) -> StoreHandle {
        let (tx, rx) = mpsc::channel();
        let (done_tx, done) = mpsc::channel();
        let embedded = paths.as_ref().is_some_and(|p| p.is_embedded());
        let handle = StoreHandle {
            tx: StoreSender {
                tx,
                journal: Arc::new(Journal::default()),
            },
            done,
            paths: paths.clone(),
            ident: ident.clone(),
            due: Instant::now()
                + if embedded {
                    store_defer()
                } else {
                    Duration::ZERO
                },
            idle: Mutex::new(Some(Idle {
                paths,
                ident,
                refused,
                rx,
                done_tx,
            })),
        };
        if !embedded {
            handle.start_thread();
        }
        handle
    }

    /// When the store thread is to start, while it has not.
    pub fn due(&self) -> Option<Instant> {
        self.idle
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .is_some()
            .then_some(self.due)
    }

    /// Starts the store thread if the run has lasted long enough.
    pub fn start_if_due(&self, now: Instant) {
        if now >= self.due {
            self.start_thread();
        }
    }

    /// Starts the store thread, if it is not running yet (and the run was not handed off).
    pub fn start_thread(&self) {
        let Some(idle) = self.idle.lock().unwrap_or_else(|p| p.into_inner()).take() else {
            return;
        };
        {
            let mut j = self.tx.journal.lock();
            j.opened = true;
            j.entries = Vec::new();
        }
        // Never joined (see `finish`): a thread that could not start leaves `done` without a
        // sender, which `finish` reads as "not landed".
        let _ = std::thread::Builder::new()
            .name("store".into())
            .spawn(move || {
                let Idle {
                    paths,
                    ident,
                    refused,
                    rx,
                    done_tx,
                } = idle;
                let mut store = StoreThread::new(paths, ident, refused);
                let landed = store.run(rx);
                // Report as soon as the last write is committed: closing the connection may
                // checkpoint the WAL (fsyncs), which the shim's exit need not wait for. A
                // checkpoint cut short by the exit is safe; the next opener finishes it.
                let _ = done_tx.send(landed);
                drop(store);
            });
    }

    /// A sender for other threads.
    pub fn sender(&self) -> StoreSender {
        self.tx.clone()
    }

    /// Queues a message.
    pub fn send(&self, msg: StoreMsg) {
        self.tx.send(msg);
    }

    /// Queues a change to the run.
    pub fn write(&self, w: RunWrite) {
        self.tx.write(w);
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
        self.start_thread();
        let (tx, rx) = mpsc::channel();
        self.send(make(tx));
        rx
    }

    /// Flushes what is queued and stops, waiting at most `wait` for the thread. False when
    /// the run's last writes did not land because the database stayed locked (or the store
    /// did not finish in time): the caller spools them.
    pub fn finish(self, wait: Duration) -> bool {
        self.start_thread();
        self.send(StoreMsg::Shutdown);
        // Not joined: the thread may still be closing the database (a checkpoint), which the
        // shim's exit does not wait for.
        self.done.recv_timeout(wait).unwrap_or(false)
    }

    /// Hands the writes that have not landed to a finisher (`crate::finish`), so that the
    /// shim can exit without waiting for the database; `fallback` is the run's final row,
    /// spooled by the finisher if they cannot be written. True: handed off (the store
    /// thread writes nothing more). False: nothing to hand off, or it cannot be: the caller
    /// waits for the store thread ([`finish`](Self::finish)). Only for the embedded store,
    /// only while the store thread has not started (a tool that ended within `DEFER`),
    /// and only for a run that never asked the store anything (a prompt, a decision).
    pub fn hand_off(&self, fallback: &ToolRun) -> bool {
        let Some(paths) = self.paths.as_ref().filter(|p| p.is_embedded()) else {
            return false;
        };
        // As a container's first process, the shim's exit ends every other process of it:
        // a finisher would not outlive it.
        if self.tx.journal.lock().asked || std::process::id() == 1 {
            return false;
        }
        let Ok(lock) = hr_shared::finishing::hold(paths) else {
            return false;
        };
        // Only a store thread never started: it is started by this (main) thread alone.
        let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        let mut j = self.tx.journal.lock();
        if idle.is_none() || j.asked || j.entries.is_empty() {
            return false;
        }
        let handoff = crate::finish::Handoff {
            root: paths.root.clone(),
            db: paths.db.clone(),
            ident: self.ident.clone(),
            // A run that never asked has no approval to abandon.
            writes: j
                .entries
                .iter()
                .filter(|w| !matches!(w, RunWrite::Abandon(_)))
                .cloned()
                .collect(),
            fallback: fallback.clone(),
        };
        if !crate::finish::fork_or_start(&handoff, lock) {
            return false;
        }
        // Never started now: the writes are the finisher's. Nothing is freed: the memory
        // may be shared copy-on-write with a finisher forked from this process, and the
        // shim exits next.
        std::mem::forget(handoff);
        std::mem::forget(std::mem::take(&mut j.entries));
        std::mem::forget(idle.take());
        true
    }
}

/// How long a run lasts before its store thread starts and opens the embedded store (see
/// `StoreHandle::start`), unless `HEADLESS_RUN_STORE_DEFER` says otherwise.
const DEFER: Duration = Duration::from_millis(20);

/// The longest `HEADLESS_RUN_STORE_DEFER` may ask for: a shim killed before its store is
/// open leaves no row.
const DEFER_MAX: Duration = Duration::from_secs(10);

/// `HEADLESS_RUN_STORE_DEFER` (a duration, at most [`DEFER_MAX`]), else [`DEFER`].
fn store_defer() -> Duration {
    let Some(value) = std::env::var_os("HEADLESS_RUN_STORE_DEFER").filter(|v| !v.is_empty()) else {
        return DEFER;
    };
    match hr_shared::time::parse_duration(&value.to_string_lossy()) {
        Ok(d) => d.min(DEFER_MAX),
        Err(e) => {
            eprintln!(
                "headless-run: warning: HEADLESS_RUN_STORE_DEFER ignored ({e}); the store is opened after {}",
                hr_shared::time::short_duration(DEFER)
            );
            DEFER
        }
    }
}

/// How long the first write may wait before the run's row is spooled meanwhile.
const SPOOL_AFTER: Duration = Duration::from_millis(200);

/// Spools the run's first row if the first write has not finished within [`SPOOL_AFTER`];
/// disarmed the moment it finishes, so a write that does not wait costs no file.
struct SpoolGuard {
    state: std::sync::Arc<(std::sync::Mutex<GuardState>, std::sync::Condvar)>,
    thread: Option<std::thread::JoinHandle<()>>,
}

#[derive(Default)]
struct GuardState {
    done: bool,
    spooled: bool,
}

impl SpoolGuard {
    fn arm(paths: StatePaths, row: ToolRun) -> SpoolGuard {
        let state = std::sync::Arc::new((
            std::sync::Mutex::new(GuardState::default()),
            std::sync::Condvar::new(),
        ));
        let shared = state.clone();
        let thread = std::thread::Builder::new()
            .name("spool-guard".into())
            .spawn(move || {
                let (lock, cv) = &*shared;
                let Ok(guard) = lock.lock() else {
                    return;
                };
                let Ok((mut st, _)) = cv.wait_timeout_while(guard, SPOOL_AFTER, |s| !s.done) else {
                    return;
                };
                if !st.done {
                    st.spooled = hr_shared::spool::write(&paths, &row).is_ok();
                }
            })
            .ok();
        SpoolGuard { state, thread }
    }

    /// The write finished: stop the guard; whether it spooled the row meanwhile.
    fn disarm(mut self) -> bool {
        let (lock, cv) = &*self.state;
        if let Ok(mut st) = lock.lock() {
            st.done = true;
        }
        cv.notify_all();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        lock.lock().map(|st| st.spooled).unwrap_or(false)
    }
}

pub struct StoreThread {
    paths: Option<StatePaths>,
    ident: Asker,
    /// The store; `None` when no state dir could be resolved, or it is not used.
    store: Option<Box<dyn RunnerStore>>,
    /// Why there is no store though a state dir was resolved (another user's).
    refused: Option<String>,
    opened: bool,
    host: LocalHost,
    log: Option<CombinedLog>,
    actor: String,
    inserted: bool,
    /// Writes that failed, retried before new ones.
    backlog: Vec<RunWrite>,
    /// The last write failed because the database was locked (worth spooling for later).
    locked: bool,
    /// The run's row as first written: inserted again if the database is replaced.
    start_row: Option<ToolRun>,
    /// The row could not be inserted (the database is locked) and was spooled meanwhile, so
    /// that a shim killed before the lock goes still leaves its run behind.
    spooled_start: bool,
    /// The store said the run was cancelled, and the cancel signal was raised.
    cancel_raised: bool,
    /// An approval was asked for (so there may be one to abandon when the run ends).
    asked: bool,
    tool_digest: std::sync::OnceLock<Option<String>>,
    status: RunStatus,
    warned_db: AtomicBool,
    warned_log: AtomicBool,
}

/// A store thread for a finisher.
pub fn reopen(paths: StatePaths, ident: Asker) -> StoreThread {
    StoreThread::new(Some(paths), ident, None)
}

impl StoreThread {
    fn new(paths: Option<StatePaths>, ident: Asker, refused: Option<String>) -> Self {
        let actor = proc::current_user();
        let request_fingerprint = if ident.request_fingerprint.is_empty() {
            hr_shared::fingerprint::request(&ident.tool, &ident.argv, &ident.cwd)
        } else {
            ident.request_fingerprint.clone()
        };
        let ident = Asker {
            actor: actor.clone(),
            request_fingerprint,
            ..ident
        };
        StoreThread {
            store: paths.as_ref().map(store::runner),
            refused,
            paths,
            ident,
            opened: false,
            host: LocalHost::new(),
            log: None,
            actor,
            inserted: false,
            backlog: Vec::new(),
            locked: false,
            start_row: None,
            spooled_start: false,
            cancel_raised: false,
            asked: false,
            tool_digest: std::sync::OnceLock::new(),
            status: RunStatus::Running,
            warned_db: AtomicBool::new(false),
            warned_log: AtomicBool::new(false),
        }
    }

    /// The finisher's: opens the store, writes `writes` (logging their status events) and
    /// says whether everything landed.
    pub fn finish(&mut self, writes: Vec<RunWrite>) -> bool {
        self.open();
        self.flush(writes);
        self.landed()
    }

    fn open(&mut self) {
        if self.opened {
            return;
        }
        self.opened = true;
        let Some(paths) = &self.paths else {
            let refused = self.refused.clone();
            warn_once(&self.warned_db, || match refused {
                Some(why) => format!("{why}: the tool runs on, unrecorded"),
                None => "no state dir (set HEADLESS_RUN_HOME); the run is not recorded".into(),
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
        // Connects now to warn early; rows an earlier shim spooled are written as it does.
        if let Some(Err(e)) = self.store.as_mut().map(|s| s.connect()) {
            self.locked = matches!(e, StoreError::Locked);
            self.db_warning(&e);
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
        let Some(paths) = &self.paths else {
            return;
        };
        let db = paths.store_label();
        let later = if paths.store_url.is_some() {
            "its records are kept in this process and written if the server answers before the tool ends"
        } else {
            "its run is kept for the store to take later"
        };
        warn_once(&self.warned_db, || {
            format!("state store {db} unavailable ({e}); the tool runs on, and {later}")
        });
    }

    /// Serves requests until told to stop; returns whether everything landed (false when
    /// writes are left over: the database was locked, full or could not be opened).
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
                ops.push(RunWrite::Touch(Touch {
                    supervisor_heartbeat_at: Some(time::now_rfc3339()),
                    ..Touch::default()
                }));
            }
            for msg in batch {
                match msg {
                    // A run that never asked has nothing to abandon: no query for it.
                    // A run that never asked has nothing to abandon: no query for it.
                    StoreMsg::Write(RunWrite::Abandon(_)) if !self.asked => {}
                    StoreMsg::Write(w) => ops.push(w),
                    StoreMsg::Prompt(req, reply) => {
                        self.asked = true;
                        self.flush(std::mem::take(&mut ops));
                        let asker = self.asker();
                        let host = self.host.clone();
                        let out = self.ask(|s| s.resolve_prompt(&asker, &req, &host));
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
                        let out = self.ask(|s| s.cooperative(&asker, &request, ttl, on_expire));
                        let _ = reply.send(out);
                    }
                    StoreMsg::AutoApproval {
                        approval_id,
                        value,
                        resumed_from,
                        reply,
                    } => {
                        self.flush(std::mem::take(&mut ops));
                        let asker = self.asker();
                        let out = match approval_id.as_deref().filter(|a| !a.is_empty()) {
                            None => Err("HEADLESS_RUN_APPROVAL_ID is not set".to_owned()),
                            Some(id) => self
                                .ask(|s| {
                                    s.check_auto_approval(
                                        &asker,
                                        id,
                                        &value,
                                        resumed_from.as_deref(),
                                    )
                                })
                                .and_then(|r| r),
                        };
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

    /// Whether everything reached the store. What did not (a lock, a full disk, a store
    /// that could not be opened) goes to the spool as the shim exits.
    fn landed(&self) -> bool {
        self.backlog.is_empty()
    }

    /// The database file was deleted or replaced under the running shim: the run's row is
    /// written into the new one again, so the rest of the run is not lost with the old file.
    fn reinsert_if_replaced(&mut self, writes: &mut Vec<RunWrite>) {
        let Some(store) = self.store.as_mut() else {
            return;
        };
        if !store.replaced() {
            return;
        }
        if let Some(paths) = &self.paths {
            warn_once(&self.warned_db, || {
                format!(
                    "the state database {} was deleted or replaced while the tool ran; recording into a new one",
                    paths.db.display()
                )
            });
        }
        self.inserted = false;
        if let Some(row) = &self.start_row {
            writes.insert(0, RunWrite::Start(Box::new(row.clone())));
        }
    }

    /// What the command runs, looked at once, when it first asks (off the output path).
    fn tool_digest(&self) -> &Option<String> {
        // The resolved executable is in the run's first row (metadata `tool_path`).
        self.tool_digest.get_or_init(|| {
            let row = self.start_row.as_ref()?;
            let path = row.metadata.as_ref()?.get("tool_path")?.as_str()?;
            hr_shared::fingerprint::tool(
                std::path::Path::new(path),
                &self.ident.argv,
                std::path::Path::new(&self.ident.cwd),
            )
        })
    }

    fn asker(&self) -> Asker {
        Asker {
            tool_digest: self.tool_digest().clone(),
            ..self.ident.clone()
        }
    }

    /// Runs a store operation that reports its effects; logs them and answers with its
    /// result.
    fn ask<T>(
        &mut self,
        f: impl FnOnce(&mut dyn RunnerStore) -> Result<Done<T>, StoreError>,
    ) -> Result<T, String> {
        let Some(store) = self.store.as_mut() else {
            return Err(self
                .refused
                .clone()
                .unwrap_or_else(|| "no state dir".to_owned()));
        };
        match f(store.as_mut()) {
            Ok(done) => {
                self.apply(done.effects);
                Ok(done.value)
            }
            Err(e) => Err(match &self.paths {
                Some(p) => format!("the state store {} is unavailable: {e}", p.store_label()),
                None => e.to_string(),
            }),
        }
    }

    /// Logs a transaction's events and notes this run's new status.
    fn apply(&mut self, fx: Effects) {
        for w in &fx.warnings {
            warn(w);
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
    fn flush(&mut self, ops: Vec<RunWrite>) {
        for op in &ops {
            self.log_op(op);
        }
        let mut all = std::mem::take(&mut self.backlog);
        all.extend(ops);
        if all.is_empty() {
            return;
        }
        for op in &all {
            if let RunWrite::Start(run) = op
                && self.start_row.is_none()
            {
                self.start_row = Some((**run).clone());
            }
        }
        self.reinsert_if_replaced(&mut all);
        let Some(store) = self.store.as_mut() else {
            self.backlog = all;
            return;
        };
        // The first write may wait on a lock for up to the busy timeout: past a moment, the
        // row goes to the spool meanwhile, so that a shim killed while it waits (kill -9)
        // still leaves its run behind.
        let guard = match (&self.paths, &self.start_row) {
            (Some(paths), Some(row)) if !self.inserted && !self.spooled_start => {
                Some(SpoolGuard::arm(paths.clone(), row.clone()))
            }
            _ => None,
        };
        // Only a row that was spooled can already be there (replayed by another process).
        let maybe_replayed = (self.spooled_start || guard.is_some()) && !self.inserted;
        let writes: Vec<RunWrite> = if self.inserted {
            // Written once already: a Start left in the backlog must not insert it twice.
            all.iter()
                .filter(|w| !matches!(w, RunWrite::Start(_)))
                .cloned()
                .collect()
        } else {
            all.clone()
        };
        let id = self.ident.tool_run_id.clone();
        let recorded = store.record(&id, &writes, &self.actor, maybe_replayed);
        if let Some(guard) = guard {
            self.spooled_start |= guard.disarm();
        }
        match recorded {
            Ok(done) => {
                self.inserted |= done.value.inserted;
                self.locked = false;
                // Cancelled from another host (which cannot signal this process): end the
                // tool as the cancel signal would, once.
                if done.value.cancelled
                    && cancel_handled()
                    && !std::mem::replace(&mut self.cancel_raised, true)
                {
                    // SAFETY: a signal to this very process, whose handler is installed.
                    unsafe { libc::kill(libc::getpid(), hr_shared::mode::CANCEL_SIGNAL) };
                }
                if std::mem::take(&mut self.spooled_start) {
                    store.kept_row_landed(&id);
                }
                self.apply(Effects {
                    events: done.effects.events,
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
                    .filter(|op| !matches!(op, RunWrite::Touch(_)))
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
            && let (Some(store), Some(row)) = (self.store.as_mut(), &self.start_row)
        {
            self.spooled_start = store.keep_for_later(row);
        }
    }

    fn log_op(&mut self, op: &RunWrite) {
        let (previous, change) = match op {
            RunWrite::Start(run) => (None, StatusChange::to(run.status, run.reason.clone())),
            RunWrite::Status(change, _) => (Some(self.status), change.clone()),
            // The canceller logged the change, with its reason, when it cancelled: the
            // tool's exit code recorded now is no second status event.
            RunWrite::Cancelled { .. } => {
                self.status = RunStatus::Cancelled;
                return;
            }
            _ => return,
        };
        // No self-transitions in the log (a run parking on the approval it already waits
        // for): as the audit chain, only a new status or an end is an event.
        if previous == Some(change.status) && !change.finished {
            return;
        }
        self.status = change.status;
        let Some(log) = self.log.as_mut() else {
            return;
        };
        let event = LogEvent::about_run(
            EventBody::status_change(previous, &change),
            &self.ident.tool,
            &self.ident.tool_run_id,
            Some(&self.ident.execution_id),
        );
        if let Err(e) = log.append(&event) {
            warn_once(&self.warned_log, || {
                format!("cannot write {}: {e}", log.path().display())
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn asker() -> Asker {
        Asker {
            tool_run_id: "TR-1".into(),
            tool: "t".into(),
            execution_id: "EX-1".into(),
            request_fingerprint: String::new(),
            argv: vec!["t".into()],
            cwd: "/".into(),
            tool_digest: None,
            actor: String::new(),
            review: Default::default(),
        }
    }

    fn sender() -> (StoreSender, Receiver<StoreMsg>) {
        let (tx, rx) = mpsc::channel();
        let journal = Arc::new(Journal::default());
        (StoreSender { tx, journal }, rx)
    }

    /// On the embedded store, the store thread waits to start: the run's writes stay in the journal
    /// (what a finisher would be handed) until the thread starts, which it does when due or
    /// when asked; from then on the thread has them.
    #[test]
    fn writes_are_journaled_until_the_store_thread_starts() {
        let tmp = tempfile::tempdir().unwrap();
        let paths = StatePaths::at(tmp.path());
        let store = StoreHandle::start(Some(paths), asker(), None);
        let due = store.due().expect("not started yet");
        store.start_if_due(due - Duration::from_millis(1));
        assert!(store.due().is_some(), "not before it is due");
        store.write(RunWrite::Pid(7));
        store.write(RunWrite::Abandon("x".into()));
        assert_eq!(store.tx.journal.lock().entries.len(), 2);
        store.start_if_due(due);
        assert!(store.due().is_none(), "started");
        assert!(store.tx.journal.lock().entries.is_empty());
        store.write(RunWrite::Pid(8));
        assert!(
            store.tx.journal.lock().entries.is_empty(),
            "the thread has them"
        );
        assert!(
            !store.hand_off(&sample_row()),
            "a started thread keeps the run"
        );
    }

    /// With no embedded store to open there is nothing to wait for: the thread starts at
    /// once, and nothing is handed off.
    #[test]
    fn without_an_embedded_store_the_thread_starts_at_once() {
        let store = StoreHandle::start(None, asker(), None);
        assert!(store.due().is_none());
        store.write(RunWrite::Pid(1));
        assert!(store.tx.journal.lock().entries.is_empty());
        assert!(!store.hand_off(&sample_row()));
        assert!(
            !store.finish(Duration::from_secs(5)),
            "no store: not landed"
        );
    }

    fn sample_row() -> ToolRun {
        hr_shared::testing::run("TR-1", "t", RunStatus::Running)
    }

    /// A request that needs the database's answer marks the run: its end stays with its
    /// own store thread.
    #[test]
    fn a_run_that_asks_is_marked() {
        let (s, _rx) = sender();
        s.write(RunWrite::Pid(1));
        assert!(!s.journal.lock().asked);
        s.send(StoreMsg::Shutdown);
        assert!(!s.journal.lock().asked, "the end is no question");
        let (reply, _) = mpsc::channel();
        s.send(StoreMsg::AutoApproval {
            approval_id: None,
            value: "y".into(),
            resumed_from: None,
            reply,
        });
        assert!(s.journal.lock().asked);
    }
}
