//! Acting on runs from outside the shim, one way for every caller (the command line, the
//! dashboard, the worker): what a cancellation or a reconciliation pass did, telling a
//! cancelled run's shim to end its tool, and appending a store operation's events to the
//! combined log.

use crate::approvals::Approval;
use crate::event::LogEvent;
use crate::logfile::CombinedLog;
use crate::mode::CANCEL_SIGNAL;
use crate::rules::{self, HostFacts};
use crate::runs::ToolRun;
use std::path::Path;

/// Decides approval `approval_id` with `value` as `who`, and logs what the decision caused
/// in the combined log of `paths`: how every front-end (the CLI, the dashboard, the
/// server) decides; each then says the outcome its own way.
pub fn decide(
    store: &mut dyn crate::store::OperatorStore,
    paths: &crate::paths::StatePaths,
    approval_id: &str,
    value: &str,
    who: &crate::approvals::Decider<'_>,
) -> crate::store::StoreResult<crate::approvals::DecideOutcome> {
    let done = store.decide(approval_id, value, who)?;
    log_events(&paths.combined_log(), &done.effects.events);
    Ok(done.value)
}

/// Cancels run `tool_run_id` as `who` (`reason` recorded), logs what that caused, and —
/// where `paths` is the store itself, not a server's API (the server signals on its own
/// host) — tells the run's headless-run on this host (`host`) to end the tool.
pub fn cancel(
    store: &mut dyn crate::store::OperatorStore,
    paths: &crate::paths::StatePaths,
    tool_run_id: &str,
    reason: Option<&str>,
    who: &crate::approvals::Decider<'_>,
    host: &dyn HostFacts,
) -> crate::store::StoreResult<CancelOutcome> {
    let done = store.cancel(tool_run_id, reason, who)?;
    log_events(&paths.combined_log(), &done.effects.events);
    Ok(if crate::store::capabilities::of(paths).host_files {
        done.value.signal_shim(host)
    } else {
        done.value
    })
}

/// Appends events to the combined log; a log that cannot be written loses the events, never
/// the database change they describe.
pub fn log_events(log: &Path, events: &[LogEvent]) {
    if events.is_empty() {
        return;
    }
    if let Ok(mut l) = CombinedLog::open(log) {
        for e in events {
            let _ = l.append(e);
        }
    }
}

/// How a cancellation went.
#[derive(Debug, Clone, PartialEq)]
pub enum CancelOutcome {
    /// Marked cancelled, and its shim told to end the tool.
    Signalled {
        run: Box<ToolRun>,
        shim_pid: i32,
    },
    /// Marked cancelled; no live shim to tell (parked on an approval, or gone).
    Marked {
        run: Box<ToolRun>,
    },
    /// It had already ended.
    AlreadyFinal {
        run: Box<ToolRun>,
    },
    NotFound,
}

impl CancelOutcome {
    /// A run just marked cancelled: tells its shim (`SIGUSR1`) to end the tool's process
    /// group, when a shim supervises it on this host (the run has no exit code yet: its
    /// shim did not exit on purpose, and the shim's pid is still that shim — a
    /// `headless-run` of the run's own user).
    pub fn signal_shim(self, host: &dyn HostFacts) -> CancelOutcome {
        let CancelOutcome::Marked { run } = self else {
            return self;
        };
        let uid = run.uid();
        // Only a shim of this host: another host's pid names some process here. That
        // shim learns of the cancellation from the store (its next write, within seconds).
        let here = run.host.as_deref().is_none_or(|h| h == host.host());
        if here
            && run.exit_code.is_none()
            && rules::shim_gone(&run, host).is_none()
            && let Some(pid) = run.shim_pid.map(|p| p as i32)
            && crate::proc::is_shim(pid, uid)
        {
            // SAFETY: kill(2) of the shim just checked by pid and start time.
            if unsafe { libc::kill(pid, CANCEL_SIGNAL) } == 0 {
                return CancelOutcome::Signalled { run, shim_pid: pid };
            }
        }
        CancelOutcome::Marked { run }
    }
}

/// What one reconciliation pass did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ReconcileReport {
    /// Runs marked failed because their shim is gone, with the reason.
    pub vanished: Vec<(String, String)>,
    /// Approvals expired in this pass.
    pub expired: Vec<Approval>,
}
