//! Interactive mode (stdin is a terminal and not headless): the tool gets the terminal
//! as it would without the shim, no pty and no prompt detection; the run is still recorded
//! and the hard timeout still applies.

use crate::run::{self, Failure, RunContext, RunStart};
use crate::signals::SignalPipe;
use hr_shared::exit::{RunOutcome, shim};
use hr_shared::mode::CANCEL_SIGNAL;
use std::time::{Duration, Instant};

/// Runs the tool with inherited stdio until it ends.
pub fn run(ctx: &RunContext, start: &mut RunStart<'_>) -> Result<RunOutcome, Failure> {
    // SIGINT and SIGQUIT from the keyboard reach the tool directly (same foreground group);
    // the shim only must not die of them. TERM and HUP are forwarded.
    let signals = SignalPipe::install(&[
        libc::SIGCHLD,
        libc::SIGINT,
        libc::SIGQUIT,
        libc::SIGTERM,
        libc::SIGHUP,
        CANCEL_SIGNAL,
    ])
    .map_err(|e| {
        Failure::new(
            shim::SHIM_FAILED,
            format!("cannot install signal handlers: {e}"),
        )
    })?;
    let mut child = ctx
        .command()
        .spawn()
        .map_err(|e| run::spawn_failure(ctx, e))?;
    let pid = child.id() as i32;
    start.send(Some(pid));
    let started = Instant::now();
    let mut ending: Option<Instant> = None;
    let mut cancelled = false;
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            if cancelled {
                return Ok(RunOutcome::Cancelled {
                    reason: "cancelled".into(),
                    code: shim::CANCELLED,
                });
            }
            if ending.is_some() {
                return Ok(RunOutcome::TimedOut);
            }
            return Ok(RunOutcome::from_exit_status(status));
        }
        let now = Instant::now();
        match (ending, ctx.settings.timeout) {
            (None, Some(t)) if now >= started + t => {
                // SAFETY: plain kill(2) of our child.
                unsafe { libc::kill(pid, libc::SIGTERM) };
                ending = Some(now + ctx.settings.kill_grace);
            }
            (Some(kill_at), _) if now >= kill_at => {
                // SAFETY: plain kill(2) of our child.
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
            _ => {}
        }
        let mut pfd = libc::pollfd {
            fd: signals.fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        let wait = Duration::from_millis(200);
        // SAFETY: one valid pollfd.
        unsafe { libc::poll(&mut pfd, 1, wait.as_millis() as i32) };
        for sig in signals.drain() {
            if sig == libc::SIGTERM || sig == libc::SIGHUP {
                // SAFETY: plain kill(2) of our child.
                unsafe { libc::kill(pid, sig) };
            }
            if sig == CANCEL_SIGNAL && ending.is_none() {
                cancelled = true;
                // SAFETY: plain kill(2) of our child.
                unsafe { libc::kill(pid, libc::SIGTERM) };
                ending = Some(Instant::now() + ctx.settings.kill_grace);
            }
        }
    }
}
