//! Supervised (headless) mode: the tool in a pty, its output copied to stdout byte for
//! byte, signals forwarded, hard and stall timeouts enforced, and the prompt detector run
//! whenever output goes idle. Everything slow (database, logs, screen model) happens on
//! other threads; this loop only copies bytes and keeps time.

use crate::blocked::{self, Reading};
use crate::group;
use crate::pty::{self, Pty};
use crate::recorder::{Recorder, RecorderSetup};
use crate::run::{self, Failure, RunContext, RunStart};
use crate::screen::ScreenText;
use crate::signals::SignalPipe;
use crate::spawn::{self, SpawnSpec};
use crate::store::{StoreHandle, StoreMsg};
use hr_shared::config::OnStall;
use hr_shared::exit::{RunOutcome, shim};
use hr_shared::mode::StdinMode;
use hr_shared::runs::Touch;
use hr_shared::status::RunStatus;
use hr_shared::time;
use std::io;
use std::os::fd::RawFd;
use std::os::unix::fs::FileTypeExt;
use std::time::{Duration, Instant};

/// How often liveness timestamps of output are written at most.
const TOUCH_EVERY: Duration = Duration::from_secs(1);
/// Detector ticks while output is idle.
const TICK: Duration = Duration::from_millis(50);
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
    let env = ctx.tool_env(true);
    let spec = SpawnSpec {
        program: &ctx.tool_path,
        argv0: &ctx.argv0,
        args: &ctx.args,
        env: &env,
        tty: pty.slave_path(),
        pass_stdin,
    };
    let pid = pty.spawn(&spec).map_err(|e| run::spawn_failure(ctx, e))?;
    start.send(Some(pid));
    let recorder = Recorder::start(RecorderSetup {
        paths: ctx.paths.clone(),
        tool_run_id: ctx.tool_run_id.clone(),
        tool: ctx.tool_name.clone(),
        execution_id: ctx.execution_id.clone(),
        rows,
        cols,
        store: store.sender(),
    });
    let now = Instant::now();
    let mut sup = Supervisor {
        ctx,
        store,
        pty,
        pid,
        signals,
        recorder,
        size_fd: own_size.map(|(_, _, fd)| fd),
        stdout_open: true,
        started: now,
        last_output: now,
        last_touch: None,
        touch_pending: false,
        exited: None,
        master_eof: false,
        ending: None,
        stalled: false,
        detector: Detector::default(),
    };
    let outcome = sup.run_loop();
    let Supervisor { recorder, .. } = sup;
    recorder.finish(Duration::from_secs(5));
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

/// Ending the tool: TERM now, KILL at `kill_at`.
struct Ending {
    outcome: RunOutcome,
    kill_at: Instant,
    killed: bool,
}

/// State the prompt detector keeps between ticks.
#[derive(Default)]
struct Detector {
    /// CPU ticks of the foreground group at the previous sample, and what it said.
    prev: Option<(u64, Reading)>,
    last_eof: Option<Instant>,
}

struct Supervisor<'a> {
    ctx: &'a RunContext,
    store: &'a StoreHandle,
    pty: Pty,
    pid: i32,
    signals: SignalPipe,
    recorder: Recorder,
    size_fd: Option<RawFd>,
    stdout_open: bool,
    started: Instant,
    last_output: Instant,
    last_touch: Option<Instant>,
    touch_pending: bool,
    /// The raw wait status and when it came.
    exited: Option<(i32, Instant)>,
    master_eof: bool,
    ending: Option<Ending>,
    stalled: bool,
    detector: Detector,
}

impl Supervisor<'_> {
    fn run_loop(&mut self) -> RunOutcome {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            self.reap();
            let now = Instant::now();
            if let Some(outcome) = self.finished(now) {
                return outcome;
            }
            self.enforce_limits(now);
            if self.exited.is_none() && self.ending.is_none() {
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
        let drained = self.master_eof || now >= at + DRAIN_MAX || now >= quiet_since + DRAIN_QUIET;
        if !drained {
            return None;
        }
        if let Some(ending) = &mut self.ending {
            if !ending.killed {
                if !group::session_members(self.pid).is_empty() && now < ending.kill_at {
                    return None;
                }
                group::signal_session(self.pid, libc::SIGKILL);
                ending.killed = true;
            }
            return Some(ending.outcome.clone());
        }
        Some(if libc::WIFEXITED(status) {
            RunOutcome::Exited(libc::WEXITSTATUS(status))
        } else if libc::WIFSIGNALED(status) {
            RunOutcome::Signaled(libc::WTERMSIG(status))
        } else {
            RunOutcome::Exited(shim::SHIM_FAILED.into())
        })
    }

    fn reap(&mut self) {
        if self.exited.is_none()
            && let Some(status) = spawn::try_wait(self.pid)
        {
            self.exited = Some((status, Instant::now()));
        }
    }

    fn last_activity(&self) -> Instant {
        match self.recorder.last_heartbeat() {
            Some(hb) => hb.max(self.last_output),
            None => self.last_output,
        }
    }

    fn enforce_limits(&mut self, now: Instant) {
        if let Some(ending) = &mut self.ending {
            if !ending.killed && now >= ending.kill_at {
                group::signal_session(self.pid, libc::SIGKILL);
                ending.killed = true;
            }
            return;
        }
        if self.exited.is_some() {
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
                    self.store.send(run::live_status(
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

    /// TERM to the tool's whole session now, KILL after the grace period.
    fn end_tool(&mut self, outcome: RunOutcome) {
        group::signal_session(self.pid, libc::SIGTERM);
        // A stopped process cannot act on TERM until it is continued.
        group::signal_session(self.pid, libc::SIGCONT);
        self.ending = Some(Ending {
            outcome,
            kill_at: Instant::now() + self.ctx.settings.kill_grace,
            killed: false,
        });
    }

    fn flush_touch(&mut self, now: Instant) {
        if self.touch_pending && self.last_touch.is_none_or(|t| now >= t + TOUCH_EVERY) {
            self.touch_pending = false;
            self.last_touch = Some(now);
            self.store.send(StoreMsg::Touch(Touch {
                last_output_at: Some(time::now_rfc3339()),
                ..Touch::default()
            }));
        }
    }

    fn next_wake(&self, now: Instant) -> Duration {
        let mut deadlines: Vec<Instant> = Vec::with_capacity(6);
        let s = &self.ctx.settings;
        if let Some((_, at)) = self.exited {
            deadlines.push((self.last_output.max(at) + DRAIN_QUIET).min(at + DRAIN_MAX));
            if self.ending.is_some() {
                deadlines.push(now + TICK);
            }
        } else {
            if let Some(t) = s.timeout {
                deadlines.push(self.started + t);
            }
            if let Some(stall) = s.stall_timeout
                && !self.stalled
            {
                deadlines.push(self.last_activity() + stall);
            }
            // Sample a little before the idle window closes so that two samples agree by then.
            let idle_at = self.last_output + s.prompt_idle / 2;
            let idle_for = now.saturating_duration_since(self.last_output);
            let tick = if idle_for > Duration::from_secs(5) {
                TICK * 5
            } else {
                TICK
            };
            deadlines.push(idle_at.max(now + tick));
        }
        if let Some(e) = &self.ending
            && !e.killed
        {
            deadlines.push(e.kill_at);
        }
        if self.touch_pending {
            deadlines.push(self.last_touch.map_or(now, |t| t + TOUCH_EVERY));
        }
        let next = deadlines
            .into_iter()
            .min()
            .unwrap_or(now + Duration::from_secs(1));
        next.saturating_duration_since(now)
            .min(Duration::from_secs(1))
    }

    fn wait(&mut self, timeout: Duration, buf: &mut [u8]) {
        let mut fds = [
            libc::pollfd {
                fd: self.signals.fd(),
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: self.pty.fd(),
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        let nfds = if self.master_eof { 1 } else { 2 };
        let ms = timeout.as_millis().div_ceil(1).min(i32::MAX as u128) as i32;
        // SAFETY: fds holds nfds valid pollfd entries.
        let n = unsafe { libc::poll(fds.as_mut_ptr(), nfds, ms) };
        if n <= 0 {
            return;
        }
        if fds[0].revents != 0 {
            for sig in self.signals.drain() {
                self.on_signal(sig);
            }
        }
        if nfds == 2 && fds[1].revents != 0 {
            self.read_output(buf);
        }
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
            sig => {
                // Forward to the tool's group and to whatever group is in the foreground.
                group::signal_group(self.pid, sig);
                if let Some(fg) = self.pty.foreground_pgrp().filter(|&fg| fg != self.pid) {
                    group::signal_group(fg, sig);
                }
            }
        }
    }

    fn read_output(&mut self, buf: &mut [u8]) {
        // SAFETY: buf is writable for its length.
        let n = unsafe { libc::read(self.pty.fd(), buf.as_mut_ptr().cast(), buf.len()) };
        if n > 0 {
            let data = &buf[..n as usize];
            if self.stdout_open && write_stdout(data).is_err() {
                // Nobody reads our stdout any more; keep draining the tool so it never blocks.
                self.stdout_open = false;
            }
            self.recorder.push(data);
            self.on_output();
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

    fn on_output(&mut self) {
        self.last_output = Instant::now();
        self.touch_pending = true;
        self.detector.prev = None;
        if self.stalled {
            self.stalled = false;
            self.store.send(run::live_status(RunStatus::Running, None));
        }
    }

    /// One detector tick: is the tool blocked reading its terminal, and what shows?
    fn detect(&mut self, now: Instant) {
        let idle_for = now.saturating_duration_since(self.last_output);
        let idle_window = self.ctx.settings.prompt_idle;
        if idle_for < idle_window / 2 || !self.recorder.caught_up() {
            return;
        }
        let Some(pgrp) = self.pty.foreground_pgrp() else {
            return;
        };
        let sample = blocked::sample(self.pid, pgrp, self.pty.slave_rdev());
        let reading = sample.reading();
        let steady = self.detector.prev == Some((sample.cpu_ticks, reading));
        self.detector.prev = Some((sample.cpu_ticks, reading));
        if idle_for < idle_window || !steady || reading != Reading::Yes {
            return;
        }
        let Some(termios) = self.pty.termios() else {
            return;
        };
        let canonical = termios.c_lflag & libc::ICANON != 0;
        let shown = match self.recorder.shared.screen.lock() {
            Ok(guard) => guard.as_ref().map(ScreenText::read).unwrap_or_default(),
            Err(_) => return,
        };
        if !shown.shows_question() && canonical {
            // A read with nothing asked: answer EOF, as /dev/null would without the shim.
            if self
                .detector
                .last_eof
                .is_none_or(|t| now >= t + idle_window)
            {
                self.detector.last_eof = Some(now);
                let eof = termios.c_cc[libc::VEOF];
                let _ = self.pty.write_all(&[if eof == 0 { 4 } else { eof }]);
                self.detector.prev = None;
            }
        }
    }
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
