//! Supervised (headless) mode: the tool in a pty, its output copied to stdout byte for
//! byte, signals forwarded, hard and stall timeouts enforced, the run's event descriptor
//! read, and the prompt conversation fed whenever output goes idle, its actions carried out
//! (pty writes, store messages, the approval watcher). Everything slow (database, logs,
//! screen model, event lines) happens on other threads; this loop only copies bytes and
//! keeps time.

use crate::blocked::{self, Reading};
use crate::conversation::{Action, Blocked, Conversation, Modes, Observe, Setup};
use crate::event_fd::EventPipe;
use crate::pty::{self, Pty};
use crate::queries::{self, Query};
use crate::recorder::{MAX_EVENTS_PENDING, MAX_PENDING, Recorder, RecorderEvent, RecorderSetup};
use crate::run::{self, Failure, RunContext, RunStart};
use crate::screen::ScreenText;
use crate::signals::SignalPipe;
use crate::spawn::{self, SpawnSpec};
use crate::store::{StoreHandle, StoreMsg};
use crate::{group, notify, permission};
use hr_shared::approvals::Approval;
use hr_shared::config::OnStall;
use hr_shared::event::{ENV_EVENT_FD, ENV_EVENT_PIPE, ENV_EVENT_TOKEN, EventToken, truncate_utf8};
use hr_shared::exit::{RunOutcome, shim};
use hr_shared::mode::{CANCEL_SIGNAL, StdinMode};
use hr_shared::proc::{self, ProcStat};
use hr_shared::runs::Touch;
use hr_shared::sanitize::sanitize_line;
use hr_shared::status::RunStatus;
use hr_shared::store::watch::{self, Watched, Watcher};
use hr_shared::store::{Cooperative, PromptResolution, RunWrite};
use hr_shared::time;
use std::ffi::OsStr;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::fs::FileTypeExt;
use std::sync::mpsc::{Receiver, TryRecvError};
use std::time::{Duration, Instant};

/// How often liveness timestamps of output are written at most.
const TOUCH_EVERY: Duration = Duration::from_secs(1);
/// Detector ticks while output is idle.
const TICK: Duration = Duration::from_millis(50);
/// The most output between two looks that may still be only an animation (a frame of a
/// spinner or a banner); more is a change without reading the screen.
const ANIMATION_BYTES: usize = 4096;
/// The most terminal queries kept for an answer at once.
const MAX_UNANSWERED: usize = 64;
/// How long a reply waits for the tool to turn its terminal's echo off: a reply that
/// arrives while the line discipline echoes is printed on the screen (`^[[5;1R`) as well as
/// read. Tools send the query, then switch to raw mode to read the reply.
const QUERY_ECHO_HOLD: Duration = Duration::from_millis(300);
/// How long output waits for the screen model to take it in before it is weighed as a
/// change without it.
const WEIGH_WAIT: Duration = Duration::from_millis(30);
/// After the tool exits, output still in the pty is read until it has been quiet this long…
const DRAIN_QUIET: Duration = Duration::from_millis(100);
/// …but no longer than this (a daemon may hold the pty open for ever).
const DRAIN_MAX: Duration = Duration::from_secs(2);

/// Runs the tool under supervision until it ends.
pub fn run(
    ctx: &RunContext,
    store: &StoreHandle,
    start: &mut RunStart<'_>,
) -> Result<RunOutcome, Failure> {
    let own_size = pty::own_terminal_size();
    let (rows, cols) = own_size
        .map(|(r, c, _)| (r, c))
        .unwrap_or(pty::DEFAULT_SIZE);
    let pty = Pty::open(rows, cols).map_err(|e| Failure::new(shim::SHIM_FAILED, e.to_string()))?;
    let signals = SignalPipe::install(&[
        libc::SIGCHLD,
        libc::SIGINT,
        libc::SIGTERM,
        libc::SIGHUP,
        libc::SIGQUIT,
        libc::SIGWINCH,
        CANCEL_SIGNAL,
    ])
    .map_err(|e| {
        Failure::new(
            shim::SHIM_FAILED,
            format!("cannot install signal handlers: {e}"),
        )
    })?;
    let pass_stdin = match ctx.stdin_mode {
        StdinMode::Pass => true,
        StdinMode::Pty => false,
        StdinMode::Auto => stdin_carries_data(),
    };
    // Each run its own token and descriptor: they replace an outer run's in the tool's
    // environment, and where one cannot be had the outer one is removed, not passed on.
    let token = EventToken::generate();
    let events = match EventPipe::open() {
        Ok(p) => Some(p),
        Err(e) => {
            eprintln!("headless-run: warning: no event descriptor for the tool: {e}");
            None
        }
    };
    let fd_number = events.as_ref().map(|p| p.target.to_string());
    let pipe_id = events.as_ref().and_then(|p| {
        use std::os::unix::fs::MetadataExt;
        let f = std::fs::File::from(p.write.try_clone().ok()?);
        f.metadata().ok().map(|m| m.ino().to_string())
    });
    // A pager run directly (`less FILE`) writes its text to a pipe, as it does without a
    // terminal: paged through a screen at a time instead, a line wider than the screen
    // that crossed a page's end was drawn in two parts around the pager's prompt.
    let pager_pipe = if runs_a_pager(ctx) {
        match StdoutPipe::open(events.as_ref().map(|p| p.target)) {
            Ok(p) => Some(p),
            Err(e) => {
                eprintln!("headless-run: warning: the pager writes to the terminal: {e}");
                None
            }
        }
    } else {
        None
    };
    let mut env = ctx.tool_env(true);
    let mut remove = ctx.env_remove.clone();
    match &token {
        Some(t) => env.push((ENV_EVENT_TOKEN, OsStr::new(t.as_str()))),
        None => remove.push(ENV_EVENT_TOKEN),
    }
    match &fd_number {
        Some(n) => env.push((ENV_EVENT_FD, OsStr::new(n))),
        None => remove.push(ENV_EVENT_FD),
    }
    match &pipe_id {
        Some(id) => env.push((ENV_EVENT_PIPE, OsStr::new(id))),
        None => remove.push(ENV_EVENT_PIPE),
    }
    let spec = SpawnSpec {
        program: &ctx.tool_path,
        argv0: &ctx.argv0,
        args: &ctx.args,
        env: &env,
        remove: &remove,
        tty: pty.slave_path(),
        pass_stdin,
        event_fd: events.as_ref().map(|p| (p.write.as_raw_fd(), p.target)),
        stdout: pager_pipe.as_ref().map(|p| p.write.as_raw_fd()),
    };
    group::become_subreaper();
    let pid = pty.spawn(&spec).map_err(|e| run::spawn_failure(ctx, e))?;
    // The tool has its copy; the shim keeps only the read end, so the pipe ends when the
    // tool and whatever it passed the descriptor to have closed it.
    let events = events.map(|p| p.read);
    let stdout_pipe = pager_pipe.map(|p| p.read);
    start.send(Some(pid));
    let recorder = Recorder::start(RecorderSetup {
        paths: ctx.paths.clone(),
        tool_run_id: ctx.tool_run_id.clone(),
        tool: ctx.tool_name.clone(),
        execution_id: ctx.execution_id.clone(),
        rows,
        cols,
        store: store.sender(),
        token,
    });
    let now = Instant::now();
    let mut sup = Supervisor {
        ctx,
        store,
        pty,
        pid,
        signals,
        recorder,
        events,
        stdout_pipe,
        size_fd: own_size.map(|(_, _, fd)| fd),
        stdout_open: true,
        line_open: false,
        started: now,
        last_output: now,
        unseen_output: None,
        unseen_bytes: 0,
        last_change: now,
        screen_mark: None,
        orphans_reaped: None,
        last_touch: None,
        touch_pending: false,
        exited: None,
        master_eof: false,
        ending: None,
        hung_up: None,
        unasked: None,
        stalled: false,
        conv: Conversation::new(Setup {
            tool: &ctx.tool_name,
            label: &ctx.tool_label,
            settings: &ctx.settings,
            config: &ctx.config,
            argv: ctx.argv(),
            cwd: ctx.cwd.to_string_lossy().into_owned(),
        }),
        asking: None,
        watcher: None,
        coop_asks: Vec::new(),
        coops: Vec::new(),
        coop_pending: None,
        perms: Vec::new(),
        paused_since: None,
        outside: Outside::default(),
        // A real terminal on stdout answers the tool's queries itself.
        // SAFETY: isatty(3) on our own stdout.
        queries: (unsafe { libc::isatty(libc::STDOUT_FILENO) } == 0)
            .then(queries::Scanner::default),
        unanswered: Vec::new(),
        queried_at: None,
        held: Vec::new(),
    };
    let outcome = sup.run_loop();
    let Supervisor { recorder, .. } = sup;
    let shared = recorder.shared.clone();
    recorder.finish(Duration::from_secs(5));
    // A tool that failed without saying why in an `error` event: its last line says it.
    let failed = match outcome {
        RunOutcome::Exited(code) => code != 0,
        RunOutcome::Signaled(_) | RunOutcome::TimedOut | RunOutcome::Stalled => true,
        _ => false,
    };
    if failed
        && let Some(message) = shared
            .last_words
            .lock()
            .ok()
            .and_then(|w| w.error_message())
    {
        store.write(RunWrite::Touch(Touch {
            last_error_msg: Some(message),
            ..Default::default()
        }));
    }
    Ok(outcome)
}

/// Whether the shim's stdin has something for the tool: a non-empty file, a pipe with data
/// or still open, a device other than /dev/null. Nothing (the usual CI case) → the pty.
fn stdin_carries_data() -> bool {
    let fd = libc::STDIN_FILENO;
    if pty::is_tty(fd) {
        return false;
    }
    // SAFETY: st is a valid stat buffer for fstat to fill.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    if unsafe { libc::fstat(fd, &mut st) } != 0 {
        return false;
    }
    match st.st_mode & libc::S_IFMT {
        libc::S_IFREG => {
            // SAFETY: lseek with SEEK_CUR only reports the offset.
            let pos = unsafe { libc::lseek(fd, 0, libc::SEEK_CUR) };
            st.st_size > pos.max(0)
        }
        libc::S_IFCHR => {
            let devnull = std::fs::metadata("/dev/null")
                .ok()
                .filter(|m| m.file_type().is_char_device())
                .map(|m| std::os::unix::fs::MetadataExt::rdev(&m));
            devnull != Some(st.st_rdev)
        }
        libc::S_IFIFO | libc::S_IFSOCK => {
            let mut pfd = libc::pollfd {
                fd,
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: one valid pollfd, zero timeout.
            let n = unsafe { libc::poll(&mut pfd, 1, 0) };
            if n <= 0 {
                return true; // open, nothing yet: the producer may still write
            }
            if pfd.revents & libc::POLLIN != 0 {
                let mut avail: libc::c_int = 0;
                // SAFETY: FIONREAD writes one int.
                if unsafe { libc::ioctl(fd, libc::FIONREAD, &mut avail) } == 0 && avail > 0 {
                    return true;
                }
            }
            // POLLHUP with nothing buffered: the writer is gone, a pipe at EOF.
            pfd.revents & libc::POLLHUP == 0
        }
        _ => true,
    }
}

/// Whether the tool run is itself a pager (`less FILE`, Debian's `pager`), by the name it
/// was called by or its file's name.
fn runs_a_pager(ctx: &RunContext) -> bool {
    let named = |n: Option<&OsStr>| {
        n.and_then(OsStr::to_str)
            .is_some_and(|n| blocked::PAGERS.contains(&n))
    };
    named(std::path::Path::new(&ctx.argv0).file_name()) || named(ctx.tool_path.file_name())
}

/// The pipe a pager run directly gets as its stdout: its write end close-on-exec and moved
/// above the numbers the spawn's other actions write (0–2 and the event descriptor's), its
/// read end non-blocking.
struct StdoutPipe {
    read: OwnedFd,
    write: OwnedFd,
}

impl StdoutPipe {
    fn open(event_target: Option<RawFd>) -> io::Result<StdoutPipe> {
        use std::os::fd::FromRawFd;
        let mut fds = [0; 2];
        // SAFETY: fds has room for the two descriptors pipe2 writes.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC | libc::O_NONBLOCK) } != 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: pipe2 just returned these two descriptors, owned by nobody else.
        let (read, write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        // The tool's end blocks, as a pipe to a pager's stdout does.
        // SAFETY: F_SETFL on a descriptor we own.
        if unsafe { libc::fcntl(write.as_raw_fd(), libc::F_SETFL, 0) } < 0 {
            return Err(io::Error::last_os_error());
        }
        let above = event_target.map_or(3, |t| t.max(2) + 1);
        // SAFETY: F_DUPFD_CLOEXEC returns a new descriptor we then own.
        let moved = unsafe { libc::fcntl(write.as_raw_fd(), libc::F_DUPFD_CLOEXEC, above) };
        if moved < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `moved` is ours alone.
        let write = unsafe { OwnedFd::from_raw_fd(moved) };
        Ok(StdoutPipe { read, write })
    }
}

/// Ending the tool: TERM now, KILL at `kill_at`.
struct Ending {
    outcome: RunOutcome,
    kill_at: Instant,
    killed: bool,
    /// Processes the tool started outside its session (daemons), ended with it.
    strays: Vec<(i32, u64)>,
}

/// The shim was signalled to end: the tool is told, and whatever it started — in its
/// session or outside it (Codex CLI's app-server) — is ended once the tool has gone,
/// TERM then KILL at `kill_at`, as when the shim ends the tool itself.
struct HungUp {
    kill_at: Instant,
    termed: bool,
    killed: bool,
}

/// What waited for keys with nothing asked, ended by the shim (TERM, then KILL at
/// `kill_at`): the tool goes on, as it would once its editor failed, and its run says why.
struct EndedUnasked {
    /// What was ended and why, for the run's reason.
    what: String,
    readers: Vec<(i32, u64)>,
    kill_at: Instant,
    killed: bool,
    /// The tool's own process was among them: its exit is the end of the run.
    the_tool: bool,
}

/// How often to look for the store's answer while one is expected.
const ASK_TICK: Duration = Duration::from_millis(5);

struct Supervisor<'a> {
    ctx: &'a RunContext,
    store: &'a StoreHandle,
    pty: Pty,
    pid: i32,
    signals: SignalPipe,
    recorder: Recorder,
    /// The event descriptor's read end, until every writer has closed it.
    events: Option<OwnedFd>,
    /// The read end of the pipe a pager run directly writes to, until it is at its end.
    stdout_pipe: Option<OwnedFd>,
    size_fd: Option<RawFd>,
    stdout_open: bool,
    /// The tool's output so far does not end with a newline (a prompt waits on its line).
    line_open: bool,
    started: Instant,
    last_output: Instant,
    /// Output read and not yet weighed (since when): does it change what the screen shows?
    unseen_output: Option<Instant>,
    /// How many bytes of it: past [`ANIMATION_BYTES`] it is a change without looking.
    unseen_bytes: usize,
    /// When output last changed what the screen shows, animation removed (spinner glyphs,
    /// clock times): the prompt detector's idle clock, so that a spinner or an animated
    /// banner beside a question does not keep it from ever being asked.
    last_change: Instant,
    /// The digest of the screen as last weighed, animation removed.
    screen_mark: Option<u64>,
    /// When exited orphans were last reaped.
    orphans_reaped: Option<Instant>,
    last_touch: Option<Instant>,
    touch_pending: bool,
    /// The raw wait status and when it came.
    exited: Option<(i32, Instant)>,
    master_eof: bool,
    ending: Option<Ending>,
    /// The shim itself was told to end (TERM or HUP: a CI job cancelled, a closed
    /// terminal): the signal went to the tool, and what it started goes with it.
    hung_up: Option<HungUp>,
    /// What waited for keys with nothing asked and was ended, last.
    unasked: Option<EndedUnasked>,
    stalled: bool,
    conv: Conversation<'a>,
    /// The store's reply to the prompt the conversation asks about.
    asking: Option<Receiver<Result<PromptResolution, String>>>,
    /// Wait mode: the watcher of the approval the tool is kept at its prompt for.
    watcher: Option<Watcher>,
    coop_asks: Vec<Receiver<Result<Cooperative, String>>>,
    /// Watchers of cooperative approvals still pending.
    coops: Vec<Watcher>,
    /// The last cooperative approval still pending: a tool exiting 90 waits on it.
    coop_pending: Option<String>,
    /// Permission requests of the agent's own hooks still open (`permission`).
    perms: Vec<permission::Open>,
    /// Since when timeouts are paused (an approval is pending).
    paused_since: Option<Instant>,
    /// Readers of the tool's terminal outside its session (pinentry).
    outside: Outside,
    /// Finds the tool's questions to its terminal, when the shim answers them (no real
    /// terminal sees the output).
    queries: Option<queries::Scanner>,
    /// Questions found and not answered yet: answered once the screen model has caught up.
    unanswered: Vec<Query>,
    /// When the oldest of them was found.
    queried_at: Option<Instant>,
    /// Replies made and not sent yet: the tool's terminal still echoes.
    held: Vec<u8>,
}

/// How often all of `/proc` is walked for readers of the terminal outside the tool's
/// session, at most.
const OUTSIDE_RESCAN: Duration = Duration::from_secs(1);

/// Processes outside the tool's session that read its terminal for it — gpg-agent's
/// pinentry draws its passphrase dialog on the terminal gpg names while gpg itself waits on
/// the agent's socket. Once seen reading, they are ended with the tool: left behind, they
/// would spin on the closed terminal.
#[derive(Default)]
struct Outside {
    openers: Vec<ProcStat>,
    scanned: Option<Instant>,
    /// Those seen reading the terminal.
    readers: Vec<ProcStat>,
}

impl Outside {
    /// Samples the processes outside session `sid` with the terminal open (walking `/proc`
    /// for them at most every [`OUTSIDE_RESCAN`]) and remembers those that read it.
    fn sample(&mut self, tty_rdev: u64, sid: i32) -> blocked::GroupSample {
        let now = Instant::now();
        if self.scanned.is_none_or(|t| now >= t + OUTSIDE_RESCAN) {
            self.scanned = Some(now);
            self.openers = blocked::outside_openers(tty_rdev, sid);
        } else {
            self.openers
                .retain(|p| proc::same_process(p.pid, Some(p.start_time)));
        }
        let sample = blocked::sample_outside(&self.openers, tty_rdev);
        for r in &sample.readers {
            if !self.readers.iter().any(|p| p.pid == r.pid) {
                self.readers.push(r.clone());
            }
        }
        sample
    }

    /// Sends `sig` to every reader seen that is still the same process.
    fn signal(&self, sig: i32) {
        for p in &self.readers {
            if proc::same_process(p.pid, Some(p.start_time)) {
                // SAFETY: kill(2) of a pid just checked against its start time.
                unsafe { libc::kill(p.pid, sig) };
            }
        }
    }
}

impl Supervisor<'_> {
    fn run_loop(&mut self) -> RunOutcome {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            self.reap();
            self.poll_cooperative();
            let now = Instant::now();
            self.store.start_if_due(now);
            if let Some(outcome) = self.finished(now) {
                return outcome;
            }
            self.weigh_output(now);
            self.poll_resolving(now);
            self.poll_waiting();
            self.answer_queries(now);
            self.track_pause(now);
            self.enforce_limits(now);
            // While its hook asks, the agent's screen shows the same question: not read.
            if self.exited.is_none() && self.ending.is_none() && self.perms.is_empty() {
                self.detect(now);
            }
            self.flush_touch(now);
            let timeout = self.next_wake(Instant::now());
            self.wait(timeout, &mut buf);
        }
    }

    /// The outcome once the tool has exited and its output is drained (and, when it was
    /// being ended, its whole session is gone or has been killed).
    fn finished(&mut self, now: Instant) -> Option<RunOutcome> {
        let (status, at) = self.exited?;
        let quiet_since = self.last_output.max(at);
        let drained = (self.stdout_pipe.is_none()
            && (self.master_eof || now >= quiet_since + DRAIN_QUIET))
            || now >= at + DRAIN_MAX;
        if !drained {
            return None;
        }
        // Lines still being read may hold an `approval_needed` the exit code depends on:
        // what the tool wrote to its event descriptor before it exited is read now, and
        // requests the recorder sent before it caught up are taken before they are counted.
        self.drain_events();
        let caught_up = self.recorder.caught_up() && self.recorder.events_caught_up();
        self.poll_cooperative();
        let settled = caught_up && self.coop_asks.is_empty();
        if !settled && now < at + DRAIN_MAX {
            return None;
        }
        if self.ending.is_none()
            && let Some(h) = &mut self.hung_up
            && !h.killed
        {
            let me = std::process::id() as i32;
            let strays = group::strays(me, self.pid, &notify::watchdogs());
            let left = strays.len() + group::session_members(self.pid).len();
            if !h.termed && left > 0 {
                h.termed = true;
                eprintln!(
                    "headless-run: {}: the shim was signalled; ending what the tool left running ({left} process{})",
                    self.ctx.tool_label,
                    if left == 1 { "" } else { "es" }
                );
                group::signal_session(self.pid, libc::SIGTERM);
                group::signal_session(self.pid, libc::SIGCONT);
                group::signal_strays(&strays, libc::SIGTERM);
                group::signal_strays(&strays, libc::SIGCONT);
            }
            if left > 0 && now < h.kill_at {
                return None;
            }
            group::signal_session(self.pid, libc::SIGKILL);
            group::signal_strays(&strays, libc::SIGKILL);
            h.killed = true;
        }
        if let Some(ending) = &mut self.ending {
            if !ending.killed {
                if !group::session_members(self.pid).is_empty() && now < ending.kill_at {
                    return None;
                }
                group::signal_session(self.pid, libc::SIGKILL);
                group::signal_strays(&ending.strays, libc::SIGKILL);
                self.outside.signal(libc::SIGKILL);
                ending.killed = true;
            }
            return Some(ending.outcome.clone());
        }
        Some(
            match (
                RunOutcome::from_wait_status(status),
                self.coop_pending.clone(),
            ) {
                // A cooperative tool that asked and then exited 90 waits for its approval.
                (RunOutcome::Exited(code), Some(approval_id))
                    if code == i32::from(shim::APPROVAL_PENDING) =>
                {
                    RunOutcome::ApprovalPending { approval_id }
                }
                (outcome, _) => match &self.unasked {
                    Some(ended) => not_a_prompt(ended, &self.ctx.tool_label, &outcome),
                    None => outcome,
                },
            },
        )
    }

    fn reap(&mut self) {
        if self.exited.is_none()
            && let Some(status) = spawn::try_wait(self.pid)
        {
            self.exited = Some((status, Instant::now()));
        }
        // As child subreaper the shim inherits the tool's orphans: those that have exited
        // are reaped (about once a second), so that none piles up as a zombie.
        let now = Instant::now();
        if self
            .orphans_reaped
            .is_none_or(|t| now >= t + Duration::from_secs(1))
        {
            self.orphans_reaped = Some(now);
            group::reap_orphans(self.pid, &notify::watchdogs());
        }
    }

    fn last_activity(&self) -> Instant {
        match self.recorder.last_heartbeat() {
            Some(hb) => hb.max(self.last_output),
            None => self.last_output,
        }
    }

    /// An approval is pending: neither timeout counts.
    fn paused(&self) -> bool {
        self.conv.waiting() || !self.coops.is_empty() || !self.perms.is_empty()
    }

    fn track_pause(&mut self, now: Instant) {
        match (self.paused(), self.paused_since) {
            (true, None) => self.paused_since = Some(now),
            (false, Some(since)) => {
                let waited = now.saturating_duration_since(since);
                self.started += waited;
                self.last_output = self.last_output.max(now);
                self.paused_since = None;
            }
            _ => {}
        }
    }

    fn enforce_limits(&mut self, now: Instant) {
        if let Some(u) = &mut self.unasked
            && !u.killed
            && now >= u.kill_at
        {
            u.killed = true;
            group::signal_strays(&u.readers, libc::SIGKILL);
        }
        if let Some(ending) = &mut self.ending {
            if !ending.killed && now >= ending.kill_at {
                group::signal_session(self.pid, libc::SIGKILL);
                group::signal_strays(&ending.strays, libc::SIGKILL);
                self.outside.signal(libc::SIGKILL);
                ending.killed = true;
            }
            return;
        }
        if self.exited.is_some() || self.paused_since.is_some() {
            return;
        }
        let s = &self.ctx.settings;
        if s.timeout.is_some_and(|t| now >= self.started + t) {
            self.end_tool(RunOutcome::TimedOut);
            return;
        }
        if let Some(stall) = s.stall_timeout
            && now >= self.last_activity() + stall
        {
            match s.on_stall {
                OnStall::Kill => self.end_tool(RunOutcome::Stalled),
                OnStall::Mark if !self.stalled => {
                    self.stalled = true;
                    self.store.write(run::live_status(
                        RunStatus::Stalled,
                        Some(format!(
                            "no output and no heartbeat for {}",
                            time::short_duration(stall)
                        )),
                    ));
                }
                OnStall::Mark => {}
            }
        }
    }

    /// TERM to the tool's whole session now, KILL after the grace period. The first reason
    /// to end the tool is the one reported.
    fn end_tool(&mut self, outcome: RunOutcome) {
        if self.ending.is_some() {
            return;
        }
        self.conv.stop();
        self.asking = None;
        self.watcher = None;
        // Ending the tool (a prompt's exit 90, a rejection, a refused secret, a stall, the
        // hard timeout, a cancel) ends everything it started, daemons that left its session
        // included: none of it may go on unsupervised. (A tool that exits by itself keeps
        // the daemons it meant to start.)
        let strays = group::strays(std::process::id() as i32, self.pid, &notify::watchdogs());
        let in_session = group::signal_session(self.pid, libc::SIGTERM);
        // A stopped process cannot act on TERM until it is continued.
        group::signal_session(self.pid, libc::SIGCONT);
        group::signal_strays(&strays, libc::SIGTERM);
        group::signal_strays(&strays, libc::SIGCONT);
        self.outside.signal(libc::SIGTERM);
        if !strays.is_empty() {
            eprintln!(
                "headless-run: {}: ending {} process{} of its session and {} it started outside it (pids {})",
                self.ctx.tool_label,
                in_session,
                if in_session == 1 { "" } else { "es" },
                strays.len(),
                strays
                    .iter()
                    .map(|(p, _)| p.to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        }
        self.ending = Some(Ending {
            outcome,
            kill_at: Instant::now() + self.ctx.settings.kill_grace,
            killed: false,
            strays,
        });
    }

    fn flush_touch(&mut self, now: Instant) {
        if self.touch_pending && self.last_touch.is_none_or(|t| now >= t + TOUCH_EVERY) {
            self.touch_pending = false;
            self.last_touch = Some(now);
            self.store.write(RunWrite::Touch(Touch {
                last_output_at: Some(time::now_rfc3339()),
                ..Touch::default()
            }));
        }
    }

    fn next_wake(&self, now: Instant) -> Duration {
        let mut deadlines: Vec<Instant> = Vec::with_capacity(8);
        deadlines.extend(self.store.due());
        let s = &self.ctx.settings;
        if let Some((_, at)) = self.exited {
            deadlines.push((self.last_output.max(at) + DRAIN_QUIET).min(at + DRAIN_MAX));
            if self.ending.is_some()
                || !self.recorder.caught_up()
                || !self.recorder.events_caught_up()
            {
                deadlines.push(now + TICK);
            }
        } else {
            if self.paused_since.is_none() {
                if let Some(t) = s.timeout {
                    deadlines.push(self.started + t);
                }
                if let Some(stall) = s.stall_timeout
                    && !self.stalled
                {
                    deadlines.push(self.last_activity() + stall);
                }
            }
            // Sample a little before the idle window closes so that two samples agree by then.
            let idle_at = self.last_change + s.prompt_idle / 2;
            let idle_for = now.saturating_duration_since(self.last_change);
            let tick = if idle_for > Duration::from_secs(5) {
                TICK * 5
            } else {
                TICK
            };
            deadlines.push(idle_at.max(now + tick));
        }
        if self.conv.asking() || !self.coop_asks.is_empty() {
            deadlines.push(now + ASK_TICK);
        }
        if self.unseen_output.is_some() {
            // Output to weigh once the screen model has it.
            deadlines.push(now + Duration::from_millis(2));
        }
        if let Some(at) = self.conv.steering_at(self.last_change) {
            deadlines.push(at.max(now + Duration::from_millis(5)));
        }
        if self.conv.waiting() || !self.coops.is_empty() || !self.perms.is_empty() {
            deadlines.push(now + watch::WATCH_EVERY);
        }
        if let Some(e) = &self.ending
            && !e.killed
        {
            deadlines.push(e.kill_at);
        }
        if let Some(u) = &self.unasked
            && !u.killed
        {
            deadlines.push(u.kill_at);
        }
        if self.touch_pending {
            deadlines.push(self.last_touch.map_or(now, |t| t + TOUCH_EVERY));
        }
        if !self.unanswered.is_empty() || !self.held.is_empty() {
            // The screen model is catching up to a query, or the tool is turning echo off:
            // answer it soon.
            deadlines.push(now + Duration::from_millis(2));
        }
        if self.output_paused() {
            // The recorder is catching up: read again soon.
            deadlines.push(now + Duration::from_millis(2));
        }
        if self.events.is_some() && !self.reading_events() {
            // The recorder is behind on events: look again soon.
            deadlines.push(now + TICK);
        }
        let next = deadlines
            .into_iter()
            .min()
            .unwrap_or(now + Duration::from_secs(1));
        next.saturating_duration_since(now)
            .min(Duration::from_secs(1))
    }

    fn wait(&mut self, timeout: Duration, buf: &mut [u8]) {
        let events_fd = self
            .events
            .as_ref()
            .filter(|_| self.reading_events())
            .map_or(-1, |fd| fd.as_raw_fd());
        // A negative descriptor is skipped by poll(2).
        let mut fds = [
            libc::pollfd {
                fd: self.signals.fd(),
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: if self.master_eof || self.output_paused() {
                    -1
                } else {
                    self.pty.fd()
                },
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: events_fd,
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: self.watcher.as_ref().map_or(-1, Watcher::wake_fd),
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: match &self.stdout_pipe {
                    Some(p) if !self.output_paused() => p.as_raw_fd(),
                    _ => -1,
                },
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        let ms = timeout.as_millis().min(i32::MAX as u128) as i32;
        // SAFETY: fds holds fds.len() valid pollfd entries.
        let n = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, ms) };
        if n <= 0 {
            return;
        }
        if fds[0].revents != 0 {
            for sig in self.signals.drain() {
                self.on_signal(sig);
            }
        }
        if fds[1].revents != 0 {
            self.read_output(buf);
        }
        if fds[4].revents != 0 {
            self.read_stdout_pipe(buf);
        }
        if fds[2].revents != 0 {
            self.read_events(buf);
        }
        if fds[3].revents != 0
            && let Some(w) = &self.watcher
        {
            // A decision came: the loop's next turn takes it (`poll_waiting`).
            w.drain_wake();
        }
    }

    /// Whether the event descriptor is read now: not while the recorder is behind on it
    /// (the tool's writes wait instead, as on any full pipe).
    fn reading_events(&self) -> bool {
        self.recorder.events_backlog() < MAX_EVENTS_PENDING
    }

    /// Back-pressure: while the recorder is far behind (a tool flooding output on a machine
    /// that starves the recorder thread), the terminal is not read, so the tool waits in
    /// `write` and no byte is dropped from the run log. Only while the tool runs: after
    /// it exited, what is left is drained.
    fn output_paused(&self) -> bool {
        self.exited.is_none() && self.recorder.output_backlog() >= MAX_PENDING / 2
    }

    /// One read of the event descriptor into the recorder; whether it gave anything.
    /// End of file (every writer closed it) or an error stops reading it.
    fn read_events(&mut self, buf: &mut [u8]) -> bool {
        let Some(fd) = &self.events else {
            return false;
        };
        // SAFETY: buf is writable for its length.
        let n = unsafe { libc::read(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
        if n > 0 {
            self.recorder.push_events(&buf[..n as usize]);
            return true;
        }
        let err = io::Error::last_os_error();
        if n < 0
            && matches!(
                err.kind(),
                io::ErrorKind::Interrupted | io::ErrorKind::WouldBlock
            )
        {
            return false;
        }
        self.events = None;
        false
    }

    /// Reads what is waiting on the event descriptor (the tool has exited: what it wrote
    /// is there now), within the recorder's backlog.
    fn drain_events(&mut self) {
        let mut buf = [0u8; 16 * 1024];
        while self.events.is_some() && self.reading_events() && self.read_events(&mut buf) {}
    }

    fn on_signal(&mut self, sig: i32) {
        match sig {
            libc::SIGCHLD => self.reap(),
            libc::SIGWINCH => {
                if let Some((rows, cols)) = self.size_fd.and_then(pty::size_of) {
                    self.pty.resize(rows, cols);
                    self.recorder.resize(rows, cols);
                }
            }
            CANCEL_SIGNAL => self.end_tool(RunOutcome::Cancelled {
                reason: "cancelled".into(),
                code: shim::CANCELLED,
            }),
            sig => {
                // Forward to the tool's group and to whatever group is in the foreground.
                group::signal_group(self.pid, sig);
                if let Some(fg) = self.pty.foreground_pgrp().filter(|&fg| fg != self.pid) {
                    group::signal_group(fg, sig);
                }
                if matches!(sig, libc::SIGTERM | libc::SIGHUP) && self.hung_up.is_none() {
                    self.hung_up = Some(HungUp {
                        kill_at: Instant::now() + self.ctx.settings.kill_grace,
                        termed: false,
                        killed: false,
                    });
                }
            }
        }
    }

    fn read_output(&mut self, buf: &mut [u8]) {
        // SAFETY: buf is writable for its length.
        let n = unsafe { libc::read(self.pty.fd(), buf.as_mut_ptr().cast(), buf.len()) };
        if n > 0 {
            self.took_output(&buf[..n as usize], true);
            return;
        }
        let err = io::Error::last_os_error();
        if n < 0
            && matches!(
                err.kind(),
                io::ErrorKind::Interrupted | io::ErrorKind::WouldBlock
            )
        {
            return;
        }
        // EIO: every slave descriptor is closed.
        self.master_eof = true;
    }

    /// One read of the pipe a pager run directly writes to; its end (every writer gone) or
    /// an error stops reading it.
    fn read_stdout_pipe(&mut self, buf: &mut [u8]) {
        let Some(fd) = &self.stdout_pipe else {
            return;
        };
        // SAFETY: buf is writable for its length.
        let n = unsafe { libc::read(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
        if n > 0 {
            self.took_output(&buf[..n as usize], false);
            return;
        }
        let err = io::Error::last_os_error();
        if n < 0
            && matches!(
                err.kind(),
                io::ErrorKind::Interrupted | io::ErrorKind::WouldBlock
            )
        {
            return;
        }
        self.stdout_pipe = None;
    }

    /// Output of the tool: to stdout, the screen model and the run log. Only what it drew
    /// on its terminal (`drawn`) may hold questions to the terminal: a pipe's text is
    /// written, never drawn.
    fn took_output(&mut self, data: &[u8], drawn: bool) {
        if self.stdout_open && write_stdout(data).is_err() {
            // Nobody reads our stdout any more; keep draining the tool so it never blocks.
            self.stdout_open = false;
        }
        self.line_open = data.last() != Some(&b'\n');
        if let Some(scanner) = self.queries.as_mut().filter(|_| drawn) {
            // Bounded: a tool that floods queries and never reads its replies must not
            // make the shim block writing them.
            let room = MAX_UNANSWERED.saturating_sub(self.unanswered.len());
            self.unanswered
                .extend(scanner.scan(data).into_iter().take(room));
            if !self.unanswered.is_empty() && self.queried_at.is_none() {
                self.queried_at = Some(Instant::now());
            }
        }
        self.recorder.push(data);
        self.unseen_bytes = self.unseen_bytes.saturating_add(data.len());
        self.on_output();
    }

    fn on_output(&mut self) {
        let now = Instant::now();
        self.last_output = now;
        self.touch_pending = true;
        self.unseen_output.get_or_insert(now);
        if self.stalled {
            self.stalled = false;
            self.store.write(run::live_status(RunStatus::Running, None));
        }
    }

    /// Weighs the output read since the last look, once the screen model has taken it in (or
    /// a moment has passed): output that leaves the screen the same but for animation is no
    /// change for the conversation; anything else is.
    fn weigh_output(&mut self, now: Instant) {
        let Some(since) = self.unseen_output else {
            return;
        };
        let caught_up = self.recorder.caught_up();
        if !caught_up && now < since + WEIGH_WAIT {
            return;
        }
        self.unseen_output = None;
        // Only a trickle can be an animation; a flood is a change without reading the
        // screen, which keeps the copy loop lean.
        let small = std::mem::take(&mut self.unseen_bytes) <= ANIMATION_BYTES;
        let mark = if caught_up && small {
            self.screen_digest()
        } else {
            None
        };
        if mark.is_some() && mark == self.screen_mark {
            return;
        }
        self.screen_mark = mark;
        self.last_change = self.last_output;
        self.conv.output();
    }

    /// Whether the tool is animating now: output keeps coming (within the last few ticks)
    /// without changing what the screen shows.
    fn animating(&self, now: Instant) -> bool {
        self.last_output > self.last_change
            && now.saturating_duration_since(self.last_output) < TICK * 3
    }

    /// The screen's text with animation removed, as a digest; `None` when unreadable.
    fn screen_digest(&self) -> Option<u64> {
        let guard = self.recorder.shared.screen.lock().ok()?;
        Some(ScreenText::read_text(guard.as_ref()?).still_digest())
    }

    /// Answers the tool's questions to its terminal from the screen model, once it has taken
    /// in the output up to them (a tool waiting for the reply writes nothing after them).
    fn answer_queries(&mut self, now: Instant) {
        if !self.unanswered.is_empty() && self.recorder.caught_up() {
            // Made now, from the screen as the query found it; sent once echo is off.
            let replies = self.replies();
            self.held.extend(replies);
        }
        if self.held.is_empty() {
            return;
        }
        let echoing = self
            .pty
            .termios()
            .is_some_and(|t| t.c_lflag & libc::ECHO != 0 && t.c_lflag & libc::ICANON != 0);
        if echoing && self.queried_at.is_some_and(|t| now < t + QUERY_ECHO_HOLD) {
            return;
        }
        self.queried_at = None;
        // As a terminal's would: a reply that cannot be written changes nothing.
        let _ = self.pty.write_all(&self.held);
        self.held.clear();
    }

    /// The replies to the queries found so far, from the screen model as it is.
    fn replies(&mut self) -> Vec<u8> {
        let state = self
            .recorder
            .shared
            .screen
            .lock()
            .ok()
            .and_then(|g| {
                g.as_ref().map(|p| {
                    let s = p.screen();
                    queries::TermState {
                        cursor: s.cursor_position(),
                        app_cursor: s.application_cursor(),
                        hide_cursor: s.hide_cursor(),
                        alternate_screen: s.alternate_screen(),
                        bracketed_paste: s.bracketed_paste(),
                        app_keypad: s.application_keypad(),
                    }
                })
            })
            .unwrap_or_default();
        self.unanswered
            .drain(..)
            .flat_map(|q| queries::reply(q, &state))
            .collect()
    }

    /// One detector tick: the conversation looks at the terminal as far as it needs to.
    fn detect(&mut self, now: Instant) {
        if self.unseen_output.is_some() {
            return;
        }
        let idle_for = now.saturating_duration_since(self.last_change);
        let animating = self.animating(now);
        let quiet =
            now.saturating_duration_since(self.last_output) >= self.ctx.settings.prompt_idle;
        let mut look = Look {
            pty: &self.pty,
            pid: self.pid,
            recorder: &self.recorder,
            outside: &mut self.outside,
            animating,
            quiet,
        };
        let actions = self.conv.tick(now, idle_for, &mut look);
        self.carry_out(actions);
    }

    fn poll_resolving(&mut self, now: Instant) {
        // A reply is acted on only once the output before it has been weighed.
        if self.unseen_output.is_some() {
            return;
        }
        let Some(rx) = &self.asking else {
            return;
        };
        let actions = self.conv.reply(now, rx.try_recv());
        if !self.conv.asking() {
            self.asking = None;
        }
        self.carry_out(actions);
    }

    /// Wait mode: a decision may have arrived for the prompt the tool is kept at.
    fn poll_waiting(&mut self) {
        if self.unseen_output.is_some() {
            return;
        }
        let Some(w) = &self.watcher else {
            return;
        };
        let got = w.rx.try_recv();
        let animating = self.animating(Instant::now());
        let mut look = Look {
            pty: &self.pty,
            pid: self.pid,
            recorder: &self.recorder,
            outside: &mut self.outside,
            animating,
            quiet: false,
        };
        let actions = self.conv.watched(Instant::now(), got, &mut look);
        if !self.conv.waiting() {
            self.watcher = None;
        }
        self.carry_out(actions);
    }

    /// Does what the conversation decided.
    fn carry_out(&mut self, actions: Vec<Action>) {
        for action in actions {
            match action {
                // As a person's keyboard would: a write that fails changes nothing.
                Action::Write(bytes) => {
                    let _ = self.pty.write_all(&bytes);
                }
                Action::Type(typing) => {
                    let written = self.pty.write_all(&typing.keys);
                    let next = self.conv.typed(typing, written);
                    self.carry_out(next);
                }
                Action::Ask(request) => {
                    self.asking =
                        Some(self.store.request(|reply| StoreMsg::Prompt(request, reply)));
                }
                Action::Release(approval_id) => {
                    self.store.write(RunWrite::Release(Some(approval_id)))
                }
                Action::Withdraw { approval_id, why } => {
                    self.store.write(RunWrite::Withdraw { approval_id, why });
                    self.running_again();
                }
                Action::Consume {
                    approval_id,
                    answering,
                } => {
                    self.store.write(RunWrite::Consume(approval_id));
                    if answering {
                        self.store.write(run::live_status(RunStatus::Running, None));
                    }
                }
                Action::Watch(approval) => match self.watcher_for(&approval) {
                    Some(watcher) => self.watcher = Some(watcher),
                    None => {
                        let next = self.conv.unwatched();
                        self.carry_out(next);
                    }
                },
                Action::Announce {
                    approval,
                    waiting,
                    taken_over,
                } => self.announce(&approval, waiting, taken_over),
                Action::End(outcome) => self.end_tool(outcome),
                Action::EndUnasked { waited, kind } => self.end_unasked(waited, kind),
                Action::Say(line) => eprintln!("{line}"),
            }
        }
    }

    /// Ends what reads the terminal with nothing asked (TERM now, KILL after the grace
    /// period), as it would end without a terminal: an editor fails, a monitor stops. Only
    /// the readers: the tool that started them goes on (`git commit` reports that its
    /// editor failed), as it would.
    fn end_unasked(&mut self, waited: Duration, kind: &str) {
        let Some(pgrp) = self.pty.foreground_pgrp() else {
            return;
        };
        let readers = blocked::sample(self.pid, pgrp, self.pty.slave_rdev()).readers;
        if readers.is_empty() {
            return;
        }
        let names = readers
            .iter()
            .map(|p| sanitize_line(&p.comm))
            .collect::<Vec<_>>()
            .join(", ");
        let what = format!(
            "nothing asked: {names} waited {} for keys ({kind}) and was ended, as it would end without a terminal",
            time::short_duration(waited)
        );
        eprintln!(
            "headless-run: {}: {what} (TERM; not_prompt_timeout = \"none\" lets it wait)",
            self.ctx.tool_label,
        );
        let pids: Vec<(i32, u64)> = readers.iter().map(|p| (p.pid, p.start_time)).collect();
        group::signal_strays(&pids, libc::SIGTERM);
        // A stopped process cannot act on TERM until it is continued.
        group::signal_strays(&pids, libc::SIGCONT);
        self.unasked = Some(EndedUnasked {
            what,
            the_tool: pids.iter().any(|&(pid, _)| pid == self.pid),
            readers: pids,
            kill_at: Instant::now() + self.ctx.settings.kill_grace,
            killed: false,
        });
    }

    fn watcher_for(&self, a: &Approval) -> Option<Watcher> {
        let paths = self.ctx.paths.as_ref()?;
        Some(Watcher::start(
            hr_shared::store::runner_watch(paths),
            paths.combined_log(),
            a,
            hr_shared::store::doorbell::for_store(paths),
        ))
    }

    /// One plain line on stderr: what is asked and the exact command that decides it; and
    /// the notify hook.
    /// `monitor`, with what it needs to reach this run's state from another shell.
    fn monitor_command(&self) -> String {
        self.ctx
            .paths
            .as_ref()
            .map(|p| p.monitor_command(&hr_shared::paths::real_env))
            .unwrap_or_else(|| "monitor".into())
    }

    fn announce(&self, a: &Approval, waiting: bool, taken_over: bool) {
        let asked = a.prompt_line.as_deref().unwrap_or(&a.question);
        let mut asked = sanitize_line(asked);
        truncate_utf8(&mut asked, 200);
        let mut values: Vec<String> = vec!["reject".into()];
        // `deny` answers no and lets the tool go on; name the answer it gives.
        match a.deny_value() {
            Some("deny") | None => {}
            Some(no) => values.push(format!("deny = `{}`", sanitize_line(no))),
        }
        values.extend(a.options_json.iter().map(|o| o.value.clone()));
        if a.allows_text {
            values.push("any text".into());
        }
        let first = if a.approve_value().is_some() {
            "approve"
        } else {
            "VALUE"
        };
        // `approve` takes the tool's own default (DESIGN §15): say which answer that is.
        let means = match (a.prompt_kind, a.approve_value()) {
            (Some(k), Some(v)) if k.approve_is_default() => {
                format!("; approve = `{}`, the tool's default", sanitize_line(v))
            }
            _ => String::new(),
        };
        // After a prompt without a newline on the same terminal, the line starts afresh.
        if self.line_open && stdout_is_stderr() {
            eprintln!();
        }
        let monitor = self.monitor_command();
        eprintln!(
            "headless-run: {} asks {asked:?}: approval {} is {}; decide with: {monitor} decide {} {first}  (or: {}){means}{}",
            self.ctx.tool_label,
            a.approval_id,
            if taken_over {
                "still pending"
            } else {
                "pending"
            },
            a.approval_id,
            values.join(", "),
            match (waiting, self.ctx.conversation_waits) {
                (true, true) => {
                    "; waiting for the decision (a coding agent's conversation cannot be re-run; --on-prompt exit ends it instead)"
                }
                (true, false) => "; waiting for the decision",
                _ => "",
            }
        );
        if !taken_over
            && let Some(cfg) = self.ctx.config.notify()
            && let Some(warning) = notify::run(
                cfg,
                a,
                &notify::AskedBy {
                    argv: self.ctx.argv(),
                    cwd: self.ctx.cwd.to_string_lossy().into_owned(),
                    host: hr_shared::proc::hostname(),
                    monitor,
                },
            )
        {
            eprintln!("headless-run: warning: {warning}");
        }
    }

    /// Cooperative tools: `approval_needed` lines become approvals at once; a decision on
    /// one puts the run back to `running` (the tool learns it by its own means).
    fn poll_cooperative(&mut self) {
        while let Ok(event) = self.recorder.events.try_recv() {
            let req = match event {
                RecorderEvent::Approval(req) => req,
                RecorderEvent::Permission(p) => {
                    self.ask_permission(p);
                    continue;
                }
            };
            let settings = &self.ctx.settings;
            let (ttl, on_expire) = (settings.approval_ttl, settings.on_expire);
            let rx = self.store.request(|reply| StoreMsg::Cooperative {
                request: Box::new(req),
                ttl,
                on_expire,
                reply,
            });
            self.coop_asks.push(rx);
        }
        let mut answers = Vec::new();
        self.coop_asks.retain(|rx| match rx.try_recv() {
            Ok(answer) => {
                answers.push(answer);
                false
            }
            Err(TryRecvError::Empty) => true,
            Err(TryRecvError::Disconnected) => false,
        });
        for answer in answers {
            match answer {
                Ok(Cooperative::Pending(a)) => {
                    self.announce(&a, false, false);
                    self.coop_pending = Some(a.approval_id.clone());
                    if let Some(watcher) = self.watcher_for(&a) {
                        self.coops.push(watcher);
                    }
                }
                Ok(Cooperative::AlreadyDecided) => {}
                Err(why) => eprintln!(
                    "headless-run: warning: {}'s approval request was not recorded: {why}",
                    self.ctx.tool_label
                ),
            }
        }
        let mut decided = Vec::new();
        self.coops.retain(|w| match w.rx.try_recv() {
            Ok(Watched::Decided(a)) => {
                decided.push(*a);
                false
            }
            Err(TryRecvError::Empty) => true,
            Err(TryRecvError::Disconnected) => false,
        });
        for a in decided {
            if self.coop_pending.as_deref() == Some(&a.approval_id) {
                self.coop_pending = None;
            }
            eprintln!(
                "headless-run: {}: approval {} was {} ({}) by {}",
                self.ctx.tool_label,
                a.approval_id,
                a.status,
                a.chosen_value.as_deref().unwrap_or("-"),
                watch::decided_by(&a)
            );
            self.running_again();
        }
        self.poll_permissions();
    }

    /// An agent's hook asks: as a prompt is asked (policies, remembered decisions, else an
    /// approval), in wait mode whatever the run's mode — a conversation cannot be re-run.
    fn ask_permission(&mut self, p: hr_shared::event::PermissionRequest) {
        let argv = self.ctx.argv();
        let cwd = self.ctx.cwd.to_string_lossy().into_owned();
        let req = permission::prompt_request(
            &p,
            &permission::Facts {
                tool: &self.ctx.tool_name,
                argv: &argv,
                cwd: &cwd,
                settings: &self.ctx.settings,
                config: &self.ctx.config,
            },
        );
        let rx = self
            .store
            .request(|reply| StoreMsg::Prompt(Box::new(req), reply));
        self.perms.push(permission::Open {
            reply: p.reply,
            state: permission::State::Resolving(rx),
        });
    }

    /// Resolutions and decisions of open permission requests, answered on their pipes.
    fn poll_permissions(&mut self) {
        enum Step {
            Keep,
            Wait(Box<Approval>, bool),
            Done(Box<Approval>),
            Unrecorded(String),
            Gone(String),
        }
        let mut i = 0;
        while i < self.perms.len() {
            let step = match &self.perms[i].state {
                permission::State::Resolving(rx) => match rx.try_recv() {
                    Ok(Ok(PromptResolution::Answer { approval, .. }))
                    | Ok(Ok(PromptResolution::Rejected { approval })) => Step::Done(approval),
                    Ok(Ok(PromptResolution::Pending {
                        approval,
                        taken_over,
                    })) => Step::Wait(approval, taken_over),
                    Ok(Err(why)) => Step::Unrecorded(why),
                    Err(TryRecvError::Empty) => Step::Keep,
                    Err(TryRecvError::Disconnected) => Step::Unrecorded("the store stopped".into()),
                },
                permission::State::Waiting {
                    watcher,
                    approval_id,
                    looked,
                } => match watcher.rx.try_recv() {
                    Ok(Watched::Decided(a)) => Step::Done(a),
                    Err(TryRecvError::Empty)
                        if looked.elapsed() >= permission::LOOK_EVERY
                            && !permission::hook_waits(&self.perms[i].reply) =>
                    {
                        Step::Gone(approval_id.clone())
                    }
                    Err(TryRecvError::Empty) => Step::Keep,
                    Err(TryRecvError::Disconnected) => {
                        Step::Unrecorded("its watcher stopped".into())
                    }
                },
            };
            if let permission::State::Waiting { looked, .. } = &mut self.perms[i].state
                && looked.elapsed() >= permission::LOOK_EVERY
            {
                *looked = Instant::now();
            }
            match step {
                Step::Keep => i += 1,
                Step::Wait(a, taken_over) => {
                    self.announce(&a, true, taken_over);
                    match self.watcher_for(&a) {
                        Some(watcher) => {
                            self.perms[i].state = permission::State::Waiting {
                                watcher,
                                approval_id: a.approval_id.clone(),
                                looked: Instant::now(),
                            };
                            i += 1;
                        }
                        None => {
                            let open = self.perms.remove(i);
                            self.unanswered_permission(&open.reply, "no store to watch");
                        }
                    }
                }
                Step::Unrecorded(why) => {
                    let open = self.perms.remove(i);
                    self.unanswered_permission(&open.reply, &why);
                }
                Step::Done(a) => {
                    let open = self.perms.remove(i);
                    self.answer_permission(&open.reply, &a);
                }
                Step::Gone(approval_id) => {
                    self.perms.remove(i);
                    let why = "the agent's hook that asked is gone: it stopped waiting for the answer (the agent's own timeout, or the hook was ended)";
                    eprintln!(
                        "headless-run: {}: approval {approval_id} withdrawn, nobody need decide it ({why})",
                        self.ctx.tool_label
                    );
                    self.store.write(RunWrite::Withdraw {
                        approval_id,
                        why: why.to_owned(),
                    });
                    self.running_again();
                }
            }
        }
    }

    /// A request that could not be asked: its hook is told so and leaves the decision to
    /// the agent (which then shows its own dialog, read from the screen as ever).
    fn unanswered_permission(&mut self, reply: &std::path::Path, why: &str) {
        eprintln!(
            "headless-run: warning: {}'s permission request was not recorded: {why}",
            self.ctx.tool_label
        );
        let _ = permission::send(
            reply,
            &hr_shared::event::PermissionReply {
                approval_id: String::new(),
                status: "unrecorded".into(),
                value: None,
                decided_by: String::new(),
            },
        );
    }

    /// A decided request: its hook is told; a rejection ends the agent as at any prompt.
    fn answer_permission(&mut self, reply: &std::path::Path, a: &Approval) {
        let sent = permission::send(reply, &permission::reply_for(a));
        eprintln!(
            "headless-run: {}: {} was {} ({}) by {}{}",
            self.ctx.tool_label,
            a.approval_id,
            a.status,
            a.chosen_value.as_deref().unwrap_or("-"),
            watch::decided_by(a),
            if sent.is_ok() {
                ""
            } else {
                "; its hook was no longer waiting"
            }
        );
        if !a.answers() {
            let why = format!("{} by {}", a.status, watch::decided_by(a));
            eprintln!(
                "headless-run: {}: approval {} was {why}; ending the tool (exit 91)",
                self.ctx.tool_label, a.approval_id
            );
            self.end_tool(RunOutcome::Rejected {
                approval_id: a.approval_id.clone(),
                why,
            });
        } else {
            self.running_again();
        }
    }

    /// A question was settled: once nothing else waits for a person (no hook's, no
    /// cooperative tool's, no prompt's approval), the run is running again.
    fn running_again(&mut self) {
        if self.perms.is_empty()
            && self.coops.is_empty()
            && !self.conv.waiting()
            && self.exited.is_none()
        {
            self.store.write(run::live_status(RunStatus::Running, None));
        }
    }
}

/// The tool's terminal as the conversation sees it: the foreground group in `/proc` (and,
/// when it waits on something else while the terminal is set up for keys, whoever outside
/// the session reads the terminal), the pty's modes, the recorder's screen.
struct Look<'s> {
    pty: &'s Pty,
    pid: i32,
    recorder: &'s Recorder,
    outside: &'s mut Outside,
    /// Output came since the screen last changed: it only animates.
    animating: bool,
    /// No output at all for the idle window.
    quiet: bool,
}

impl Observe for Look<'_> {
    fn caught_up(&self) -> bool {
        self.recorder.caught_up()
    }

    fn animating(&self) -> bool {
        self.animating
    }

    fn quiet(&self) -> bool {
        self.quiet
    }

    fn blocked(&mut self) -> Option<Blocked> {
        let pgrp = self.pty.foreground_pgrp()?;
        let rdev = self.pty.slave_rdev();
        let mut sample = blocked::sample(self.pid, pgrp, rdev);
        let mut reading = sample.reading();
        // The pty starts in line mode with echo: modes changed while the tool's group sleeps
        // on something else mean another program has taken the terminal to read keys.
        if reading == Reading::No
            && sample.all_asleep()
            && self.modes().is_some_and(|m| !m.canonical || !m.echo)
        {
            let outside = self.outside.sample(rdev, self.pid);
            if outside.reading() == Reading::Yes {
                reading = Reading::Yes;
                sample.cpu_ticks += outside.cpu_ticks;
                sample.readers = outside.readers;
            }
        }
        Some(Blocked {
            cpu_ticks: sample.cpu_ticks,
            reading,
            pager: sample.pager(),
        })
    }

    fn modes(&mut self) -> Option<Modes> {
        self.pty.termios().as_ref().map(Modes::of)
    }

    fn reader(&mut self) -> Option<u64> {
        let pgrp = self.pty.foreground_pgrp()?;
        blocked::sample(self.pid, pgrp, self.pty.slave_rdev()).reader_id()
    }

    fn screen(&mut self) -> Option<ScreenText> {
        let guard = self.recorder.shared.screen.lock().ok()?;
        Some(guard.as_ref().map(ScreenText::read).unwrap_or_default())
    }
}

/// How the run ended after the shim ended what waited for keys with nothing asked: the
/// tool's own exit, with the reason saying what was ended. A tool that was itself what
/// waited and exits 0 when told to end (`top`, `htop`) did not succeed: it reports 143,
/// as a terminated tool does.
fn not_a_prompt(ended: &EndedUnasked, tool: &str, outcome: &RunOutcome) -> RunOutcome {
    let (code, how) = match *outcome {
        RunOutcome::Exited(0) if ended.the_tool => (
            128 + libc::SIGTERM,
            format!("{tool} exited 0 when ended: 143, as terminated"),
        ),
        RunOutcome::Exited(code) => (code, format!("{tool} exited with code {code}")),
        RunOutcome::Signaled(sig) => (
            128 + sig,
            format!(
                "{tool} died of signal {sig} ({})",
                hr_shared::exit::signal_name(sig)
            ),
        ),
        ref other => return other.clone(),
    };
    RunOutcome::NotAPrompt {
        what: format!("{}; {how}", ended.what),
        code,
    }
}

/// Whether stdout and stderr are the same file (one terminal, or one log).
fn stdout_is_stderr() -> bool {
    let id = |fd| {
        // SAFETY: fstat fills a zeroed stat for a descriptor we own.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        (unsafe { libc::fstat(fd, &mut st) } == 0).then_some((st.st_dev, st.st_ino))
    };
    let out = id(libc::STDOUT_FILENO);
    out.is_some() && out == id(libc::STDERR_FILENO)
}

/// Writes all of `data` to stdout; EAGAIN (a non-blocking stdout) waits for room.
fn write_stdout(mut data: &[u8]) -> io::Result<()> {
    while !data.is_empty() {
        // SAFETY: data is readable for its length.
        let n = unsafe { libc::write(libc::STDOUT_FILENO, data.as_ptr().cast(), data.len()) };
        if n >= 0 {
            data = &data[n as usize..];
            continue;
        }
        let e = io::Error::last_os_error();
        match e.kind() {
            io::ErrorKind::Interrupted => {}
            io::ErrorKind::WouldBlock => {
                let mut pfd = libc::pollfd {
                    fd: libc::STDOUT_FILENO,
                    events: libc::POLLOUT,
                    revents: 0,
                };
                // SAFETY: one valid pollfd.
                unsafe { libc::poll(&mut pfd, 1, 1000) };
            }
            _ => return Err(e),
        }
    }
    Ok(())
}
