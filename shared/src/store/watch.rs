//! Watching one approval for its decision (wait mode), on a store session of its own: the
//! store's change mark every [`WATCH_EVERY`] (a change elsewhere is the only thing that can
//! decide it), and expiry on time.

use super::RunnerStore;
use crate::approvals::Approval;
use crate::control;
use crate::status::ApprovalStatus;
use crate::time;
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
}

impl Watcher {
    /// Watches `approval` on `store` (a session of its own), appending expiry events to
    /// the combined log at `log_path`.
    pub fn start(
        mut store: Box<dyn RunnerStore>,
        log_path: PathBuf,
        approval: &Approval,
    ) -> Watcher {
        let (tx, rx) = mpsc::channel();
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let id = approval.approval_id.clone();
        let expires = approval
            .expires_at
            .as_deref()
            .and_then(time::parse_rfc3339)
            .and_then(|t| t.duration_since(SystemTime::now()).ok())
            .map(|left| Instant::now() + left);
        let _ = std::thread::Builder::new()
            .name("approval-watch".into())
            .spawn(move || {
                let mut seen = None;
                while !flag.load(Ordering::Relaxed) {
                    let overdue = expires.is_some_and(|e| Instant::now() >= e);
                    let mark = store.change_mark().ok();
                    if overdue || mark.is_none() || mark != seen {
                        seen = mark;
                        if overdue && let Ok(done) = store.expire_due() {
                            control::log_events(&log_path, &done.effects.events);
                        }
                        // Gone (gc'd) or unreadable: the session reopens on the next look.
                        if let Ok(Some(a)) = store.approval(&id)
                            && a.status != ApprovalStatus::Pending
                        {
                            let _ = tx.send(Watched::Decided(Box::new(a)));
                            return;
                        }
                    }
                    std::thread::sleep(WATCH_EVERY);
                }
            });
        Watcher { rx, stop }
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
