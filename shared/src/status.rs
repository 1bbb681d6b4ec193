//! The status enums of runs and approvals, with their stored spellings.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// Where a tool run stands. Stored as the snake_case name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum RunStatus {
    Queued,
    Running,
    Completed,
    Failed,
    FailedTimeout,
    Stalled,
    WaitingApproval,
    Cancelled,
}

impl RunStatus {
    /// Every status, in the order the dashboard and docs list them.
    pub const ALL: [RunStatus; 8] = [
        RunStatus::Queued,
        RunStatus::Running,
        RunStatus::Completed,
        RunStatus::Failed,
        RunStatus::FailedTimeout,
        RunStatus::Stalled,
        RunStatus::WaitingApproval,
        RunStatus::Cancelled,
    ];

    /// The stored spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            RunStatus::Queued => "queued",
            RunStatus::Running => "running",
            RunStatus::Completed => "completed",
            RunStatus::Failed => "failed",
            RunStatus::FailedTimeout => "failed_timeout",
            RunStatus::Stalled => "stalled",
            RunStatus::WaitingApproval => "waiting_approval",
            RunStatus::Cancelled => "cancelled",
        }
    }

    /// A run in one of these states still has (or should have) a shim supervising it.
    pub const LIVE: [RunStatus; 3] = [
        RunStatus::Running,
        RunStatus::Stalled,
        RunStatus::WaitingApproval,
    ];

    /// The states of a run that has not ended: queued or live.
    pub const OPEN: [RunStatus; 4] = [
        RunStatus::Queued,
        RunStatus::Running,
        RunStatus::Stalled,
        RunStatus::WaitingApproval,
    ];

    /// A run in one of these states has ended and will not change again by itself.
    pub const FINAL: [RunStatus; 4] = [
        RunStatus::Completed,
        RunStatus::Failed,
        RunStatus::FailedTimeout,
        RunStatus::Cancelled,
    ];

    /// What the recent-failures alert counts (a `stalled` run once its shim ended it).
    pub const ALERTED: [RunStatus; 3] = [
        RunStatus::Failed,
        RunStatus::FailedTimeout,
        RunStatus::Stalled,
    ];

    /// Whether a shim still supervises (or should supervise) a run in this state.
    pub fn is_live(self) -> bool {
        Self::LIVE.contains(&self)
    }

    /// Whether a run in this state has ended.
    pub fn is_final(self) -> bool {
        Self::FINAL.contains(&self)
    }
}

/// Statuses as an SQL list of their stored spellings, `'a', 'b'`, in the order given: the
/// status literals of every query come from the enum through this. (The order matters for
/// a partial index: SQLite uses one only when the query names its statuses as the index
/// does.)
pub fn sql_list(statuses: &[RunStatus]) -> String {
    statuses
        .iter()
        .map(|s| format!("'{}'", s.as_str()))
        .collect::<Vec<_>>()
        .join(", ")
}

impl fmt::Display for RunStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A stored status string that is not one of ours.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown status `{0}`")]
pub struct UnknownStatus(pub String);

impl FromStr for RunStatus {
    type Err = UnknownStatus;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        RunStatus::ALL
            .into_iter()
            .find(|st| st.as_str() == s)
            .ok_or_else(|| UnknownStatus(s.to_owned()))
    }
}

/// Where an approval stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum ApprovalStatus {
    Pending,
    Approved,
    Rejected,
    Expired,
}

impl ApprovalStatus {
    /// Every status.
    pub const ALL: [ApprovalStatus; 4] = [
        ApprovalStatus::Pending,
        ApprovalStatus::Approved,
        ApprovalStatus::Rejected,
        ApprovalStatus::Expired,
    ];

    /// The stored spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            ApprovalStatus::Pending => "pending",
            ApprovalStatus::Approved => "approved",
            ApprovalStatus::Rejected => "rejected",
            ApprovalStatus::Expired => "expired",
        }
    }
}

impl fmt::Display for ApprovalStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for ApprovalStatus {
    type Err = UnknownStatus;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        ApprovalStatus::ALL
            .into_iter()
            .find(|st| st.as_str() == s)
            .ok_or_else(|| UnknownStatus(s.to_owned()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_status_round_trips() {
        for st in RunStatus::ALL {
            assert_eq!(st.as_str().parse::<RunStatus>(), Ok(st));
            let json = serde_json::to_string(&st).unwrap();
            assert_eq!(json, format!("\"{}\"", st.as_str()));
        }
        assert!("done".parse::<RunStatus>().is_err());
    }

    #[test]
    fn approval_status_round_trips() {
        for st in ApprovalStatus::ALL {
            assert_eq!(st.as_str().parse::<ApprovalStatus>(), Ok(st));
        }
    }

    /// The quoted words of the first `( … )` list after `anchor` in `sql`.
    fn listed_after(sql: &str, anchor: &str) -> std::collections::BTreeSet<String> {
        let at = sql
            .find(anchor)
            .unwrap_or_else(|| panic!("no `{anchor}` in the SQL"));
        let rest = &sql[at + anchor.len()..];
        let open = rest.find('(').expect("a list");
        let close = open + rest[open..].find(')').expect("its end");
        rest[open + 1..close]
            .split(',')
            .map(|w| w.trim().trim_matches('\'').to_owned())
            .filter(|w| !w.is_empty())
            .collect()
    }

    fn names(set: &[RunStatus]) -> std::collections::BTreeSet<String> {
        set.iter().map(|s| s.as_str().to_owned()).collect()
    }

    /// The status lists written out in SQL (the PostgreSQL functions, the SQLite schema's
    /// partial indexes) are the ones `RunStatus` names: one meaning of "final", "live" and
    /// "alerted" on every store. (The other queries build theirs from these constants.)
    #[test]
    fn the_sql_status_lists_are_run_status_s_own() {
        let v1 = concat!(
            include_str!("store/pg/functions/core.sql"),
            include_str!("store/pg/functions/worker.sql"),
            include_str!("store/pg/functions/operator.sql"),
        );
        assert_eq!(listed_after(v1, "SELECT s IN"), names(&RunStatus::FINAL));
        assert_eq!(
            listed_after(v1, "IF s IS NULL OR s NOT IN"),
            names(&RunStatus::ALL)
        );
        assert_eq!(
            listed_after(v1, "WHEN 'supervised' THEN r.status IN"),
            names(&RunStatus::LIVE)
        );
        assert_eq!(
            listed_after(v1, "OR r.status NOT IN"),
            names(&RunStatus::LIVE)
        );
        let sqlite = include_str!("store/sqlite/schema.rs");
        assert_eq!(
            listed_after(
                sqlite,
                "CREATE INDEX tool_runs_failed ON tool_runs(status, COALESCE(completed_at, started_at))\n        WHERE status IN"
            ),
            names(&RunStatus::ALERTED)
        );
    }

    #[test]
    fn live_and_final_are_disjoint() {
        for st in RunStatus::ALL {
            assert!(!(st.is_live() && st.is_final()), "{st}");
        }
    }
}
