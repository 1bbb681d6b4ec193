//! The output recorder thread: takes copies of what the tool wrote (after it has already
//! gone to stdout) and appends them to the run log, splits lines for `tool_output` events,
//! recognises heartbeat and `approval_needed` lines (on the terminal only with the run's
//! token; every one on the event descriptor), masks the token in all it keeps, and keeps the
//! terminal screen model the prompt detector reads. The copy loop does not wait for it
//! byte by byte: while it is more than half of [`MAX_PENDING`] behind, the supervisor stops
//! reading the tool's terminal (back-pressure: the tool waits in `write`, as it would on a
//! slow terminal), so the run log keeps every byte. Only past [`MAX_PENDING`] — which
//! back-pressure keeps from happening — would chunks be dropped from the logs (and said so,
//! with the count in the run's row), never from stdout.

use crate::redact::StreamRedactor;
use crate::store::{StoreSender, warn_once};
use hr_shared::event::{self, Channel, EventBody, EventToken, LogEvent, ToolSignal};
use hr_shared::logfile::CombinedLog;
use hr_shared::paths::{self, StatePaths};
use hr_shared::runs::Touch;
use hr_shared::sanitize;
use hr_shared::store::RunWrite;
use hr_shared::time;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::num::NonZeroU16;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender, TryRecvError};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How far the recorder may fall behind before chunks are dropped from the logs.
pub const MAX_PENDING: usize = 2 * 1024 * 1024;
/// The raw run log stops growing here.
pub const MAX_RUN_LOG: u64 = 256 * 1024 * 1024;
/// Output not yet fed to the screen model beyond this is cut to its tail: a flood of
/// scrolling text decides the screen only through its last screenfuls.
const SCREEN_BACKLOG: usize = 256 * 1024;
/// `tool_output` events: a burst of this many lines, then this many per second.
const EVENT_BURST: f64 = 1000.0;
const EVENT_RATE: f64 = 200.0;
/// Event-descriptor bytes handed over but not yet read beyond this, and the supervisor
/// stops reading the descriptor (the tool's writes wait) until the recorder catches up.
pub const MAX_EVENTS_PENDING: usize = 256 * 1024;
/// How long a tail that may start the token is held back from the run log and the screen
/// when no more output follows.
const HOLD_FOR: Duration = Duration::from_millis(20);

/// A copy handed to the recorder.
enum Chunk {
    /// From the tool's terminal (already on stdout).
    Output(Vec<u8>),
    /// From the run's event descriptor: events, never output.
    Events(Vec<u8>),
}

/// What the supervisor reads from the recorder.
pub struct RecorderShared {
    /// The terminal screen as the tool drew it (built by the recorder thread on its first
    /// idle moment, so the shim's start-up does not pay for it).
    pub screen: Mutex<Option<vt100::Parser>>,
    /// Bytes fed to the screen so far.
    pub screened: AtomicU64,
    /// Milliseconds after `epoch` of the last heartbeat line (0: none yet).
    pub last_heartbeat_ms: AtomicU64,
    /// Event-descriptor bytes fully read so far (their events sent).
    pub events_read: AtomicU64,
    pub epoch: Instant,
    /// The tool's last line with something on it, and whether it sent an `error` event:
    /// published when the recorder ends, for a failed run's `last_error_msg`.
    pub last_words: Mutex<LastWords>,
}

/// What a run's end may say of why it failed.
#[derive(Debug, Default)]
pub struct LastWords {
    /// The last non-blank line of output (the token masked; raw bytes, cleaned by whoever
    /// stores it), at most [`LAST_LINE_BYTES`].
    pub line: Vec<u8>,
    /// The tool said it itself (`{"event":"error"}`).
    pub error_event: bool,
}

/// The most of a last line kept (an error event's text is at most 1 KB too).
const LAST_LINE_BYTES: usize = 1024;

impl LastWords {
    /// The last line as `last_error_msg` holds it (control characters out, at most 1 KB),
    /// unless the tool sent an error event or printed nothing.
    pub fn error_message(&self) -> Option<String> {
        if self.error_event {
            return None;
        }
        let text = sanitize::sanitize_line(&String::from_utf8_lossy(&self.line));
        let text = text.trim();
        (!text.is_empty()).then(|| text.to_owned())
    }
}

/// Something the supervisor must act on.
pub enum RecorderEvent {
    /// A cooperative tool sent an `approval_needed` line.
    Approval(event::CooperativeRequest),
    /// An agent's permission hook asks (on the event descriptor).
    Permission(event::PermissionRequest),
}

/// The supervisor's side of the recorder.
pub struct Recorder {
    tx: Option<Sender<Chunk>>,
    /// The worker, until the first output starts its thread.
    idle: Option<(Worker, Receiver<Chunk>, Sender<()>)>,
    /// The pty size as `rows << 16 | cols`, for the screen model.
    size: Arc<AtomicU32>,
    pending: Arc<AtomicUsize>,
    dropped: Arc<AtomicU64>,
    accepted: u64,
    events_pending: Arc<AtomicUsize>,
    events_accepted: u64,
    pub shared: Arc<RecorderShared>,
    pub events: Receiver<RecorderEvent>,
    thread: Option<JoinHandle<()>>,
    done: Receiver<()>,
}

/// What the recorder needs to know about the run.
pub struct RecorderSetup {
    pub paths: Option<StatePaths>,
    pub tool_run_id: String,
    pub tool: String,
    pub execution_id: String,
    pub rows: u16,
    pub cols: u16,
    pub store: StoreSender,
    /// The run's event token (none: nothing on the terminal is an event).
    pub token: Option<EventToken>,
}

impl Recorder {
    /// Starts the recorder thread.
    pub fn start(setup: RecorderSetup) -> Recorder {
        let (tx, rx) = mpsc::channel::<Chunk>();
        let (ev_tx, events) = mpsc::channel();
        let (done_tx, done) = mpsc::channel();
        let shared = Arc::new(RecorderShared {
            screen: Mutex::new(None),
            screened: AtomicU64::new(0),
            last_heartbeat_ms: AtomicU64::new(0),
            events_read: AtomicU64::new(0),
            epoch: Instant::now(),
            last_words: Mutex::new(LastWords::default()),
        });
        let pending = Arc::new(AtomicUsize::new(0));
        let events_pending = Arc::new(AtomicUsize::new(0));
        let dropped = Arc::new(AtomicU64::new(0));
        let size = Arc::new(AtomicU32::new(
            u32::from(setup.rows) << 16 | u32::from(setup.cols),
        ));
        let worker = Worker::new(
            setup,
            shared.clone(),
            Backlogs {
                pending: pending.clone(),
                dropped: dropped.clone(),
                events_pending: events_pending.clone(),
            },
            ev_tx,
            size.clone(),
        );
        Recorder {
            tx: Some(tx),
            idle: Some((worker, rx, done_tx)),
            size,
            pending,
            dropped,
            accepted: 0,
            events_pending,
            events_accepted: 0,
            shared,
            events,
            thread: None,
            done,
        }
    }

    /// Starts the thread on the first output: a tool that prints nothing costs no thread.
    fn ensure_thread(&mut self) {
        if let Some((worker, rx, done_tx)) = self.idle.take() {
            self.thread = std::thread::Builder::new()
                .name("recorder".into())
                .spawn(move || {
                    worker.run(rx);
                    let _ = done_tx.send(());
                })
                .ok();
        }
    }

    /// Hands over a copy of output that has already been written to stdout.
    pub fn push(&mut self, bytes: &[u8]) {
        self.ensure_thread();
        let Some(tx) = &self.tx else { return };
        if self.pending.load(Ordering::Relaxed) + bytes.len() > MAX_PENDING {
            self.dropped
                .fetch_add(bytes.len() as u64, Ordering::Relaxed);
            return;
        }
        self.pending.fetch_add(bytes.len(), Ordering::Relaxed);
        self.accepted += bytes.len() as u64;
        let _ = tx.send(Chunk::Output(bytes.to_vec()));
    }

    /// Hands over what was read from the event descriptor. Never dropped: the supervisor
    /// stops reading while [`Recorder::events_backlog`] is over [`MAX_EVENTS_PENDING`].
    pub fn push_events(&mut self, bytes: &[u8]) {
        self.ensure_thread();
        let Some(tx) = &self.tx else { return };
        self.events_pending
            .fetch_add(bytes.len(), Ordering::Relaxed);
        self.events_accepted += bytes.len() as u64;
        let _ = tx.send(Chunk::Events(bytes.to_vec()));
    }

    /// Output bytes handed over and not yet taken in by the recorder thread; zero when the
    /// thread is not running (it never started, or it died): nothing would ever drain.
    pub fn output_backlog(&self) -> usize {
        if self.thread.as_ref().is_none_or(|t| t.is_finished()) {
            return 0;
        }
        self.pending.load(Ordering::Relaxed)
    }

    /// Event-descriptor bytes handed over and not yet read.
    pub fn events_backlog(&self) -> usize {
        self.events_pending.load(Ordering::Relaxed)
    }

    /// Whether the screen model has seen everything handed over so far.
    pub fn caught_up(&self) -> bool {
        self.shared.screened.load(Ordering::Acquire) >= self.accepted
    }

    /// Whether every event line handed over has been read (its event sent).
    pub fn events_caught_up(&self) -> bool {
        self.shared.events_read.load(Ordering::Acquire) >= self.events_accepted
    }

    /// Resizes the screen model with the pty.
    pub fn resize(&self, rows: u16, cols: u16) {
        if let Ok(mut screen) = self.shared.screen.lock()
            && let Some(screen) = screen.as_mut()
        {
            screen.set_size(nz(rows), nz(cols));
        }
        self.size
            .store(u32::from(rows) << 16 | u32::from(cols), Ordering::Relaxed);
    }

    /// When the last heartbeat line was seen.
    pub fn last_heartbeat(&self) -> Option<Instant> {
        match self.shared.last_heartbeat_ms.load(Ordering::Relaxed) {
            0 => None,
            ms => Some(self.shared.epoch + Duration::from_millis(ms)),
        }
    }

    /// Processes what is queued, flushes the logs and stops (waiting at most `wait`).
    pub fn finish(mut self, wait: Duration) {
        self.tx.take();
        if self.thread.is_some()
            && self.done.recv_timeout(wait).is_ok()
            && let Some(t) = self.thread.take()
        {
            let _ = t.join();
        }
    }
}

/// Appends `part` to `line` up to one byte past the longest event line, noting in
/// `overflow` when some did not fit.
fn extend_bounded(line: &mut Vec<u8>, overflow: &mut bool, part: &[u8]) {
    let room = (event::MAX_EVENT_LINE + 1).saturating_sub(line.len());
    if part.len() > room {
        *overflow = true;
    }
    line.extend_from_slice(&part[..part.len().min(room)]);
}

/// How much of `len` more bytes fits in a run log of `written` bytes under `limit`: the
/// bytes to write and whether they reach the limit (the rest is cut). `None` once full.
fn run_log_room(written: u64, len: usize, limit: u64) -> Option<(usize, bool)> {
    if written >= limit {
        return None;
    }
    let room = limit - written;
    Some(if len as u64 <= room {
        (len, false)
    } else {
        (room as usize, true)
    })
}

fn nz(n: u16) -> NonZeroU16 {
    NonZeroU16::new(n.max(2)).unwrap_or(NonZeroU16::MIN)
}

fn new_screen(rows: u16, cols: u16) -> vt100::Parser {
    vt100::Parser::new(nz(rows), nz(cols), 0)
}

/// The counters the supervisor and the worker share about what is in flight.
struct Backlogs {
    pending: Arc<AtomicUsize>,
    dropped: Arc<AtomicU64>,
    events_pending: Arc<AtomicUsize>,
}

struct Worker {
    setup: RecorderSetup,
    shared: Arc<RecorderShared>,
    backlogs: Backlogs,
    events: Sender<RecorderEvent>,
    size: Arc<AtomicU32>,
    logs_opened: bool,
    run_log: Option<BufWriter<File>>,
    run_log_bytes: u64,
    combined: Option<CombinedLog>,
    line: Vec<u8>,
    line_overflow: bool,
    /// The event descriptor's unfinished line.
    event_line: Vec<u8>,
    event_line_overflow: bool,
    /// Masks the token in what the run log and the screen get.
    redactor: StreamRedactor,
    screen_backlog: Vec<u8>,
    screen_reset: bool,
    tokens: f64,
    last_refill: Instant,
    skipped_lines: u64,
    last_heartbeat_touch: Option<Instant>,
    /// When an `error` event was last written, and one held back since.
    last_error_write: Option<Instant>,
    unwritten_error: Option<String>,
    warned: AtomicBool,
    /// The last non-blank line so far ([`LastWords`], published at the end).
    last_line: Vec<u8>,
    error_event: bool,
}

impl Worker {
    fn new(
        setup: RecorderSetup,
        shared: Arc<RecorderShared>,
        backlogs: Backlogs,
        events: Sender<RecorderEvent>,
        size: Arc<AtomicU32>,
    ) -> Worker {
        let redactor = StreamRedactor::new(setup.token.clone());
        Worker {
            setup,
            shared,
            backlogs,
            events,
            size,
            logs_opened: false,
            run_log: None,
            run_log_bytes: 0,
            combined: None,
            line: Vec::new(),
            line_overflow: false,
            event_line: Vec::new(),
            event_line_overflow: false,
            redactor,
            screen_backlog: Vec::new(),
            screen_reset: false,
            tokens: EVENT_BURST,
            last_refill: Instant::now(),
            skipped_lines: 0,
            last_heartbeat_touch: None,
            last_error_write: None,
            unwritten_error: None,
            warned: AtomicBool::new(false),
            last_line: Vec::new(),
            error_event: false,
        }
    }

    /// Opens the logs when the first output arrives: a run that prints nothing costs no
    /// files.
    fn open_logs(&mut self) {
        self.logs_opened = true;
        let Some(paths) = self.setup.paths.clone() else {
            return;
        };
        let run_log = paths.run_log(&self.setup.tool_run_id);
        match paths.open_creating(|| paths::open_private_append(&run_log)) {
            Ok(f) => self.run_log = Some(BufWriter::with_capacity(64 * 1024, f)),
            Err(e) => self.warn(format!(
                "cannot write {}: {e}; output is not logged",
                run_log.display()
            )),
        }
        self.combined = paths
            .open_creating(|| CombinedLog::open(&paths.combined_log()))
            .ok();
    }

    fn warn(&self, msg: String) {
        warn_once(&self.warned, || msg);
    }

    fn run(mut self, rx: Receiver<Chunk>) {
        loop {
            let chunk = match rx.try_recv() {
                Ok(chunk) => chunk,
                Err(TryRecvError::Empty) => {
                    self.idle();
                    if self.redactor.holding() {
                        // A tail that may start the token waits a moment for the rest;
                        // a prompt left there must still reach the screen.
                        match rx.recv_timeout(HOLD_FOR) {
                            Ok(chunk) => chunk,
                            Err(RecvTimeoutError::Timeout) => {
                                self.release_held();
                                continue;
                            }
                            Err(RecvTimeoutError::Disconnected) => break,
                        }
                    } else {
                        match rx.recv() {
                            Ok(chunk) => chunk,
                            Err(_) => break,
                        }
                    }
                }
                Err(TryRecvError::Disconnected) => break,
            };
            match chunk {
                Chunk::Output(bytes) => {
                    self.backlogs
                        .pending
                        .fetch_sub(bytes.len(), Ordering::Relaxed);
                    self.take(&bytes);
                }
                Chunk::Events(bytes) => {
                    self.take_events(&bytes);
                    self.backlogs
                        .events_pending
                        .fetch_sub(bytes.len(), Ordering::Relaxed);
                    self.shared
                        .events_read
                        .fetch_add(bytes.len() as u64, Ordering::Release);
                }
            }
        }
        self.release_held();
        if !self.line.is_empty() {
            let line = std::mem::take(&mut self.line);
            self.finish_line(&line);
        }
        if !self.event_line.is_empty() && !self.event_line_overflow {
            let line = std::mem::take(&mut self.event_line);
            self.finish_event_line(&line);
        }
        // Lines skipped by the rate limit since the last event are still counted.
        let skipped_lines = std::mem::take(&mut self.skipped_lines);
        if skipped_lines > 0 {
            self.log_event(EventBody::ToolOutput {
                stream: "pty".into(),
                text: String::new(),
                truncated: false,
                skipped_lines,
            });
        }
        self.flush_error();
        if let Ok(mut words) = self.shared.last_words.lock() {
            let mut line = match &self.setup.token {
                Some(token) => token.redact_bytes(&self.last_line).into_owned(),
                None => std::mem::take(&mut self.last_line),
            };
            line.truncate(LAST_LINE_BYTES);
            words.line = line;
            words.error_event = self.error_event;
        }
        self.idle();
    }

    fn take(&mut self, chunk: &[u8]) {
        if !self.logs_opened {
            self.open_logs();
        }
        let dropped = self.backlogs.dropped.swap(0, Ordering::Relaxed);
        if dropped > 0 {
            self.release_held();
            let note = format!(
                "\n[headless-run: {dropped} bytes of output not logged: the logger fell behind]\n"
            );
            self.write_run_log(note.as_bytes());
            self.screen_reset = true;
            self.screen_backlog.clear();
        }
        // The run log and the screen get the output with the token masked (same length);
        // lines are read from the output as written, for the token to be checked.
        let kept = self.redactor.feed(chunk);
        self.keep(&kept);
        let mut rest = chunk;
        while let Some(nl) = rest.iter().position(|&b| b == b'\n') {
            self.extend_line(&rest[..nl]);
            let line = std::mem::take(&mut self.line);
            self.finish_line(&line);
            self.line = line;
            self.line.clear();
            self.line_overflow = false;
            rest = &rest[nl + 1..];
        }
        self.extend_line(rest);
    }

    /// Output for the run log and the screen model.
    fn keep(&mut self, bytes: &[u8]) {
        self.write_run_log(bytes);
        self.screen_backlog.extend_from_slice(bytes);
        if self.screen_backlog.len() > SCREEN_BACKLOG {
            let cut = self.screen_backlog.len() - SCREEN_BACKLOG / 2;
            self.screen_backlog.drain(..cut);
            self.screen_reset = true;
            self.shared
                .screened
                .fetch_add(cut as u64, Ordering::Release);
        }
    }

    /// No token followed the held tail: it is output like any other.
    fn release_held(&mut self) {
        let held = self.redactor.release();
        if !held.is_empty() {
            self.keep(&held);
        }
    }

    /// Bytes from the event descriptor: whole lines are events, the rest is ignored.
    fn take_events(&mut self, chunk: &[u8]) {
        if !self.logs_opened {
            self.open_logs();
        }
        let mut rest = chunk;
        while let Some(nl) = rest.iter().position(|&b| b == b'\n') {
            extend_bounded(
                &mut self.event_line,
                &mut self.event_line_overflow,
                &rest[..nl],
            );
            let line = std::mem::take(&mut self.event_line);
            if !self.event_line_overflow {
                self.finish_event_line(&line);
            }
            self.event_line = line;
            self.event_line.clear();
            self.event_line_overflow = false;
            rest = &rest[nl + 1..];
        }
        extend_bounded(&mut self.event_line, &mut self.event_line_overflow, rest);
    }

    fn finish_event_line(&mut self, line: &[u8]) {
        if let Some(signal) =
            event::parse_tool_line(line, Channel::EventFd, self.setup.token.as_ref())
        {
            self.signal(signal);
        }
    }

    fn signal(&mut self, signal: ToolSignal) {
        match signal {
            ToolSignal::Heartbeat { message } => self.heartbeat(message),
            ToolSignal::Error { message } => self.error(message),
            ToolSignal::PermissionRequest(req) => {
                let _ = self.events.send(RecorderEvent::Permission(req));
            }
            ToolSignal::ApprovalNeeded(req) => {
                let _ = self.events.send(RecorderEvent::Approval(req));
            }
            ToolSignal::Result(data) => write_result(&data),
        }
    }

    fn extend_line(&mut self, part: &[u8]) {
        extend_bounded(&mut self.line, &mut self.line_overflow, part);
    }

    fn write_run_log(&mut self, bytes: &[u8]) {
        let Some(log) = self.run_log.as_mut() else {
            return;
        };
        let Some((take, reached)) = run_log_room(self.run_log_bytes, bytes.len(), MAX_RUN_LOG)
        else {
            return;
        };
        let part = &bytes[..take];
        let result = log.write_all(part).and_then(|()| {
            if reached {
                log.write_all(
                    b"\n[headless-run: run log size limit reached; further output is not logged]\n",
                )
            } else {
                Ok(())
            }
        });
        self.run_log_bytes += part.len() as u64;
        if reached {
            self.run_log_bytes = MAX_RUN_LOG;
        }
        if let Err(e) = result {
            self.run_log = None;
            self.warn(format!(
                "cannot write the run log: {e}; output is not logged"
            ));
        }
    }

    fn finish_line(&mut self, raw: &[u8]) {
        let line = raw.strip_suffix(b"\r").unwrap_or(raw);
        if !self.line_overflow
            && let Some(signal) =
                event::parse_tool_line(line, Channel::Terminal, self.setup.token.as_ref())
        {
            return self.signal(signal);
        }
        self.output_event(line);
    }

    /// A tool's `error` event: at most one write a second (a flood keeps the last message,
    /// written with the next one or when the recorder ends).
    fn error(&mut self, message: String) {
        self.error_event = true;
        let now = Instant::now();
        if self
            .last_error_write
            .is_some_and(|t| now.duration_since(t) < Duration::from_secs(1))
        {
            self.unwritten_error = Some(message);
            return;
        }
        self.last_error_write = Some(now);
        self.unwritten_error = None;
        self.setup.store.write(RunWrite::Touch(Touch {
            last_error_msg: Some(message),
            ..Touch::default()
        }));
    }

    /// The last `error` message a flood held back, written now.
    fn flush_error(&mut self) {
        if let Some(message) = self.unwritten_error.take() {
            self.setup.store.write(RunWrite::Touch(Touch {
                last_error_msg: Some(message),
                ..Touch::default()
            }));
        }
    }

    fn heartbeat(&mut self, message: Option<String>) {
        let now = Instant::now();
        let ms = now.duration_since(self.shared.epoch).as_millis().max(1) as u64;
        self.shared.last_heartbeat_ms.store(ms, Ordering::Relaxed);
        if self
            .last_heartbeat_touch
            .is_some_and(|t| now.duration_since(t) < Duration::from_secs(1))
        {
            return;
        }
        self.last_heartbeat_touch = Some(now);
        let stamp = time::now_rfc3339();
        self.setup.store.write(RunWrite::Touch(Touch {
            last_heartbeat_at: Some(stamp),
            ..Touch::default()
        }));
        self.log_event(EventBody::Heartbeat {
            source: "tool".into(),
            message,
        });
    }

    fn output_event(&mut self, line: &[u8]) {
        // Every line counts for the last one, whatever the event rate lets through: kept
        // raw (twice what is stored, so a token across the cut is still whole when the
        // end masks it), masked and cut once, when the recorder ends.
        if line.iter().any(|b| !b.is_ascii_whitespace()) {
            self.last_line.clear();
            self.last_line
                .extend_from_slice(&line[..line.len().min(2 * LAST_LINE_BYTES)]);
        }
        let now = Instant::now();
        self.tokens = (self.tokens
            + now.duration_since(self.last_refill).as_secs_f64() * EVENT_RATE)
            .min(EVENT_BURST);
        self.last_refill = now;
        if self.tokens < 1.0 {
            self.skipped_lines += 1;
            return;
        }
        self.tokens -= 1.0;
        let line = match &self.setup.token {
            Some(token) => token.redact_bytes(line),
            None => std::borrow::Cow::Borrowed(line),
        };
        let cut = &line[..line.len().min(event::MAX_OUTPUT_TEXT * 2)];
        let mut text = sanitize::sanitize_bytes(cut);
        let truncated = event::truncate_utf8(&mut text, event::MAX_OUTPUT_TEXT)
            || cut.len() < line.len()
            || self.line_overflow;
        let skipped_lines = std::mem::take(&mut self.skipped_lines);
        self.log_event(EventBody::ToolOutput {
            stream: "pty".into(),
            text,
            truncated,
            skipped_lines,
        });
    }

    fn log_event(&mut self, body: EventBody) {
        let Some(log) = self.combined.as_mut() else {
            return;
        };
        let event = LogEvent::about_run(
            body,
            &self.setup.tool,
            &self.setup.tool_run_id,
            Some(&self.setup.execution_id),
        );
        if log.append(&event).is_err() {
            self.combined = None;
        }
    }

    /// Nothing queued: bring the screen up to date and flush the run log.
    fn idle(&mut self) {
        if let Some(log) = self.run_log.as_mut()
            && let Err(e) = log.flush()
        {
            self.run_log = None;
            self.warn(format!(
                "cannot write the run log: {e}; output is not logged"
            ));
        }
        if self.screen_backlog.is_empty() && !self.screen_reset {
            return;
        }
        let backlog = std::mem::take(&mut self.screen_backlog);
        if let Ok(mut guard) = self.shared.screen.lock() {
            let size = self.size.load(Ordering::Relaxed);
            let (rows, cols) = ((size >> 16) as u16, size as u16);
            if self.screen_reset || guard.is_none() {
                *guard = Some(new_screen(rows, cols));
                self.screen_reset = false;
            }
            if let Some(screen) = guard.as_mut() {
                crate::screen::feed(screen, &backlog);
            }
        }
        self.shared
            .screened
            .fetch_add(backlog.len() as u64, Ordering::Release);
        self.screen_backlog = backlog;
        self.screen_backlog.clear();
    }
}

/// Keeps a pipeline step's result where its runner reads it (`HEADLESS_RUN_RESULT_FILE`,
/// 0600); nothing when the shim is not a step.
fn write_result(data: &serde_json::Value) {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let Some(path) = std::env::var_os(hr_shared::event::ENV_RESULT_FILE) else {
        return;
    };
    let written = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&path)
        .and_then(|mut f| f.write_all(data.to_string().as_bytes()));
    if let Err(e) = written {
        eprintln!(
            "headless-run: warning: cannot keep the step's result in {}: {e}",
            std::path::Path::new(&path).display()
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_run_log_stops_at_its_limit() {
        assert_eq!(run_log_room(0, 10, 100), Some((10, false)));
        assert_eq!(run_log_room(90, 10, 100), Some((10, false)));
        assert_eq!(run_log_room(95, 10, 100), Some((5, true)));
        assert_eq!(run_log_room(100, 10, 100), None);
        assert_eq!(run_log_room(150, 1, 100), None);
        assert_eq!(
            run_log_room(MAX_RUN_LOG - 1, 1 << 20, MAX_RUN_LOG),
            Some((1, true))
        );
    }
}
