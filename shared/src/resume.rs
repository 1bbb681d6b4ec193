//! What the resume worker reads and writes beyond single rows: runs parked on an approval
//! (exit mode, exit 90) that has been decided, the runs a resume started, and claims left
//! behind by a worker that is gone.
//!
//! A claim names its worker as `worker:HOST:PID:START` (start time in clock ticks), so a
//! later worker on the same host can tell a live claimer from a dead one.

use crate::approvals::Approval;
use crate::proc;
use crate::runs::ToolRun;

/// A run parked by a shim that exited on purpose (exit mode), with the unconsumed,
/// decided approvals that belong to it.
#[derive(Debug, Clone, PartialEq)]
pub struct ParkedRun {
    pub run: ToolRun,
    /// Decided, unconsumed approvals of this run, oldest first.
    pub decided: Vec<Approval>,
    /// How many of its approvals are still pending.
    pub pending: usize,
}

impl ParkedRun {
    /// Parked run `run` with its approvals (`all`, in any order): the decided, unconsumed
    /// ones oldest first, and how many are pending. Every store assembles it so.
    pub fn of(run: ToolRun, all: Vec<Approval>) -> ParkedRun {
        let pending = all
            .iter()
            .filter(|a| a.status == crate::status::ApprovalStatus::Pending)
            .count();
        let mut decided: Vec<Approval> = all
            .into_iter()
            .filter(|a| {
                a.status != crate::status::ApprovalStatus::Pending && a.consumed_at.is_none()
            })
            .collect();
        decided.sort_by(|a, b| a.approval_id.cmp(&b.approval_id));
        ParkedRun {
            run,
            decided,
            pending,
        }
    }
}

/// The claim name of this process: `worker:HOST:PID:START`.
pub fn worker_name() -> String {
    let pid = std::process::id() as i32;
    let start = proc::read_stat(pid).map(|s| s.start_time).unwrap_or(0);
    format!("worker:{}:{pid}:{start}", proc::hostname())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn claimers_are_judged_by_pid_and_start_time() {
        use crate::rules::{LocalHost, claimer_gone};
        let local = LocalHost::new();
        let host = proc::hostname();
        let me = worker_name();
        assert!(!claimer_gone(&me, &local), "{me}");
        let pid = std::process::id();
        let start = proc::read_stat(pid as i32).unwrap().start_time;
        assert!(claimer_gone(
            &format!("worker:{host}:{pid}:{}", start + 1),
            &local
        ));
        assert!(claimer_gone(
            &format!("worker:{host}:{}:5", i32::MAX - 3),
            &local
        ));
        assert!(!claimer_gone("worker:other-host:1:1", &local));
        assert!(!claimer_gone("someone", &local));
        assert!(!claimer_gone("worker:a:b", &local));
    }
}
