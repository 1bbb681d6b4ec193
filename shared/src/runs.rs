//! The `tool_runs` table: one row per supervised run, and the queries on it.

use crate::status::RunStatus;
use serde::{Deserialize, Serialize};

/// How often a shim records `supervisor_heartbeat_at` while it supervises a run.
pub const SUPERVISOR_HEARTBEAT: std::time::Duration = std::time::Duration::from_secs(3);

/// A row of `tool_runs`. Serialized with the column names, as `--json` prints it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema), schema(as = Run))]
pub struct ToolRun {
    pub tool_run_id: String,
    pub tool_name: String,
    pub execution_id: Option<String>,
    pub status: RunStatus,
    pub reason: Option<String>,
    pub exit_code: Option<i32>,
    pub started_at: String,
    pub completed_at: Option<String>,
    pub last_output_at: Option<String>,
    pub last_heartbeat_at: Option<String>,
    pub supervisor_heartbeat_at: Option<String>,
    pub last_error_msg: Option<String>,
    pub pid: Option<i64>,
    pub shim_pid: Option<i64>,
    pub shim_start_time: Option<i64>,
    pub host: Option<String>,
    /// The command line as a JSON array (program first).
    pub argv_json: Vec<String>,
    pub cwd: Option<String>,
    pub resumed_from: Option<String>,
    pub metadata: Option<serde_json::Value>,
    pub updated_at: String,
    /// Who started the run, as the store authenticated the session that wrote its first
    /// row (DESIGN §14): the embedded store's owner (an OS user), a PostgreSQL login, or
    /// `runner:TOKEN` on a server's runner API. Set by the store, never taken from the row a
    /// client sends; the only identity that may run its command again. `None` for runs from
    /// before it was recorded.
    #[serde(default)]
    pub owner: Option<String>,
}

impl ToolRun {
    /// The uid the run's shim ran as (`metadata.uid`); `None` for runs from before it was
    /// recorded.
    pub fn uid(&self) -> Option<u64> {
        self.metadata.as_ref()?.get("uid")?.as_u64()
    }

    /// The pipeline step a run asks a human step's question for (`metadata.pipeline`): the
    /// pipeline's runner reads its decision; the resume worker leaves it alone.
    pub fn pipeline_step(&self) -> Option<&str> {
        self.metadata.as_ref()?.get("pipeline")?.as_str()
    }

    /// The runner token that recorded the run through a server's runner API
    /// (`metadata.runner`, set by the server).
    pub fn runner(&self) -> Option<&str> {
        self.metadata.as_ref()?.get("runner")?.as_str()
    }

    /// This first row as a store keeps it when a session it authenticated as `identity`
    /// writes it (DESIGN §14): `owner` is that identity whatever the row said — or
    /// `runner:TOKEN` for a row a server's runner API marked as its token's — and on the
    /// embedded store (`uid`: its owner's) `metadata.uid` is the writer's own.
    pub fn stamped(&self, identity: &str, uid: Option<u32>) -> ToolRun {
        let mut row = self.clone();
        row.owner = Some(match self.runner() {
            Some(token) => format!("runner:{token}"),
            None => identity.to_owned(),
        });
        if let Some(uid) = uid
            && self.runner().is_none()
        {
            let meta = row.metadata.get_or_insert_with(|| serde_json::json!({}));
            if let Some(m) = meta.as_object_mut() {
                m.insert("uid".into(), uid.into());
            }
        }
        row
    }

    /// The worker pool the run was started in (`metadata.pool`, from `HEADLESS_RUN_POOL`).
    pub fn pool(&self) -> Option<&str> {
        self.metadata.as_ref()?.get("pool")?.as_str()
    }

    /// The `tool_status_change` event of this run changing from `previous`.
    pub fn status_event(
        &self,
        previous: Option<RunStatus>,
        change: &StatusChange,
    ) -> crate::event::LogEvent {
        crate::event::LogEvent::about_run(
            crate::event::EventBody::status_change(previous, change),
            &self.tool_name,
            &self.tool_run_id,
            self.execution_id.as_deref(),
        )
    }
}

/// A status change to apply.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StatusChange {
    pub status: RunStatus,
    pub reason: Option<String>,
    pub exit_code: Option<i32>,
    /// Set `completed_at` (the run has ended).
    pub finished: bool,
    pub error: Option<String>,
    /// When it happened, if not now (a write delayed by a lock keeps the true time).
    pub at: Option<String>,
}

impl StatusChange {
    /// A plain change to `status` with a reason.
    pub fn to(status: RunStatus, reason: Option<String>) -> Self {
        StatusChange {
            status,
            reason,
            exit_code: None,
            finished: status.is_final(),
            error: None,
            at: None,
        }
    }
}

/// Which current statuses a change may replace.
#[derive(Debug, Clone, Copy)]
pub enum Guard<'a> {
    /// Whatever it is.
    Any,
    /// Only a run that has not ended.
    NotFinal,
    /// Only from one of these.
    From(&'a [RunStatus]),
    /// From anything but this one.
    Not(RunStatus),
}

/// Liveness timestamps to record; `None` leaves a column as it is.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Touch {
    pub last_output_at: Option<String>,
    pub last_heartbeat_at: Option<String>,
    pub supervisor_heartbeat_at: Option<String>,
    /// What the tool's last `{"event":"error"}` said (`last_error_msg`).
    #[serde(default)]
    pub last_error_msg: Option<String>,
}

impl Touch {
    /// Nothing to write.
    pub fn is_empty(&self) -> bool {
        self.last_output_at.is_none()
            && self.last_heartbeat_at.is_none()
            && self.supervisor_heartbeat_at.is_none()
            && self.last_error_msg.is_none()
    }
}

/// When a run's own work ended, for the time it took: when it parked on an approval (the
/// wait for a decision is not its time), else when it completed; `None` while it runs.
pub fn worked_until(run: &ToolRun) -> Option<&str> {
    run.metadata
        .as_ref()
        .and_then(|m| m.get("parked_at"))
        .and_then(|v| v.as_str())
        .or(run.completed_at.as_deref())
}

/// The status word to show: `resumed` for a run that parked on an approval and whose
/// decision a later run took up (stored `completed`, exit 90), else the status.
pub fn shown_status(run: &ToolRun) -> &'static str {
    match crate::rules::phase(run) {
        crate::rules::RunPhase::Resumed => "resumed",
        _ => run.status.as_str(),
    }
}

/// Which runs to list.
#[derive(Debug, Clone, Default)]
pub struct RunFilter {
    /// Any of these statuses (empty: all).
    pub statuses: Vec<RunStatus>,
    pub tool: Option<String>,
    pub execution_id: Option<String>,
    /// Started at or after this RFC 3339 time.
    pub since: Option<String>,
    /// At most this many, newest first (`None`: all).
    pub limit: Option<usize>,
}
