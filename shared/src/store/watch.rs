//! Watching one approval for its decision (wait mode), on a store session of its own: the
//! store's change mark whenever the store's doorbell rings ([`Doorbell`]: a write to the
//! database), and every [`WATCH_EVERY`] without one (a change elsewhere is the only thing
//! that can decide it), and expiry on time. A decision found wakes the supervisor through
//! [`Watcher::wake_fd`], so it is typed without waiting for the supervisor's next tick.

use super::RunnerStore;
use super::doorbell::Doorbell;
use crate::approvals::Approval;
use crate::control;
use crate::status::ApprovalStatus;
use crate::time;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver};
use std::time::{Duration, Instant, SystemTime};

/// How often a watcher looks.
pub const WATCH_EVERY: Duration = Duration::from_millis(50);

/// What a watcher reports.
#[derive(Debug)]
pub enum Watched {
    /// The approval is no longer pending (decided or expired).
    Decided(Box<Approval>),
}

/// A watcher thread; dropping it stops the thread.
pub struct Watcher {
    pub rx: Receiver<Watched>,
    stop: Arc<AtomicBool>,
    /// An eventfd the thread signals after sending; `None` where one cannot be made.
    wake: Option<Arc<OwnedFd>>,
}

impl Watcher {
    /// Watches `approval` on `store` (a session of its own), appending expiry events to
    /// the combined log at `log_path`; looks again at once when `bell` rings.
    pub fn start(
        mut store: Box<dyn RunnerStore>,
        log_path: PathBuf,
        approval: &Approval,
        bell: Option<Doorbell>,
    ) -> Watcher {
        let (tx, rx) = mpsc::channel();
        // SAFETY: eventfd takes a count and flags; a valid result is a descriptor we own.
        let raw = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        // SAFETY: raw is a fresh descriptor nobody else owns.
        let wake = (raw >= 0).then(|| Arc::new(unsafe { OwnedFd::from_raw_fd(raw) }));
        let ring = wake.clone();
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let id = approval.approval_id.clone();
        let instant_of = |stamp: Option<&str>| {
            let t = time::parse_rfc3339(stamp?)?;
            Some(Instant::now() + t.duration_since(SystemTime::now()).unwrap_or_default())
        };
        // When to ask the store to expire it, or to use a decision its wait timer held.
        let mut due = instant_of(approval.expires_at.as_deref());
        let _ = std::thread::Builder::new()
            .name("approval-watch".into())
            .spawn(move || {
                let mut seen = None;
                while !flag.load(Ordering::Relaxed) {
                    let overdue = due.is_some_and(|e| Instant::now() >= e);
                    let mark = store.change_mark().ok();
                    if overdue || mark.is_none() || mark != seen {
                        seen = mark;
                        if overdue && let Ok(done) = store.expire_due() {
                            control::log_events(&log_path, &done.effects.events);
                        }
                        // Gone (gc'd) or unreadable: the session reopens on the next look.
                        let now = store.approval(&id);
                        // Held by its wait timer: looked at again when the time comes.
                        if let Ok(Some(a)) = &now
                            && a.usable_at.is_some()
                        {
                            due = instant_of(a.usable_at.as_deref());
                        }
                        if let Ok(Some(a)) = now
                            && a.status != ApprovalStatus::Pending
                        {
                            let _ = tx.send(Watched::Decided(Box::new(a)));
                            if let Some(fd) = &ring {
                                let one = 1u64.to_ne_bytes();
                                // SAFETY: an eventfd takes an 8-byte count.
                                let _ = unsafe {
                                    libc::write(fd.as_raw_fd(), one.as_ptr().cast(), one.len())
                                };
                            }
                            return;
                        }
                    }
                    match &bell {
                        Some(bell) => {
                            bell.wait(WATCH_EVERY);
                        }
                        None => std::thread::sleep(WATCH_EVERY),
                    }
                }
            });
        Watcher { rx, stop, wake }
    }

    /// A descriptor that becomes readable once a decision was sent (poll it beside the
    /// tool's terminal; [`Watcher::drain_wake`] after). `-1` (skipped by poll) without one.
    pub fn wake_fd(&self) -> RawFd {
        self.wake.as_ref().map_or(-1, |fd| fd.as_raw_fd())
    }

    /// Empties the wake descriptor.
    pub fn drain_wake(&self) {
        if let Some(fd) = &self.wake {
            let mut count = [0u8; 8];
            // SAFETY: an eventfd reads into an 8-byte buffer; non-blocking.
            let _ = unsafe { libc::read(fd.as_raw_fd(), count.as_mut_ptr().cast(), count.len()) };
        }
    }
}

impl Drop for Watcher {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// Who decided, for messages: `alice via cli`, `policy:tmp-files`.
pub fn decided_by(a: &Approval) -> String {
    match (a.decided_by.as_deref(), a.decision_channel.as_deref()) {
        (Some(by), Some(ch)) if by != ch => format!("{by} via {ch}"),
        (Some(by), _) => by.to_owned(),
        _ => "nobody".into(),
    }
}
