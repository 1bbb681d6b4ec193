//! An execution of a pipeline as the stores keep it: one row, holding the checked
//! definition, the variables and the steps, moved only by a compare-and-swap on `version`.

use super::engine::{ExecutionStatus, Step};
use serde::{Deserialize, Serialize};

/// How an execution stands, as its row says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum ExecutionState {
    Running,
    WaitingApproval,
    Completed,
    Failed,
    Cancelled,
}

impl ExecutionState {
    pub const ALL: [ExecutionState; 5] = [
        ExecutionState::Running,
        ExecutionState::WaitingApproval,
        ExecutionState::Completed,
        ExecutionState::Failed,
        ExecutionState::Cancelled,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            ExecutionState::Running => "running",
            ExecutionState::WaitingApproval => "waiting_approval",
            ExecutionState::Completed => "completed",
            ExecutionState::Failed => "failed",
            ExecutionState::Cancelled => "cancelled",
        }
    }

    /// Ended: nothing will move it again.
    pub fn is_final(self) -> bool {
        matches!(
            self,
            ExecutionState::Completed | ExecutionState::Failed | ExecutionState::Cancelled
        )
    }
}

impl std::fmt::Display for ExecutionState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for ExecutionState {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        ExecutionState::ALL
            .into_iter()
            .find(|st| st.as_str() == s)
            .ok_or_else(|| format!("not an execution status: {s:?}"))
    }
}

impl From<&ExecutionStatus> for ExecutionState {
    fn from(s: &ExecutionStatus) -> Self {
        match s {
            ExecutionStatus::Running => ExecutionState::Running,
            ExecutionStatus::WaitingApproval => ExecutionState::WaitingApproval,
            ExecutionStatus::Completed => ExecutionState::Completed,
            ExecutionStatus::Failed(_) => ExecutionState::Failed,
        }
    }
}

/// One execution of a pipeline.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(from = "StoredExecution")]
pub struct Execution {
    pub execution_id: String,
    pub name: String,
    /// The file it was loaded from, as given.
    pub file: Option<String>,
    /// The directory it was started in (absolute): steps run there unless they name
    /// another, and relative `cwd`s are taken from it, whoever resumes it from wherever.
    pub dir: String,
    /// The checked definition (subgraphs inlined).
    pub definition: serde_json::Value,
    pub vars: serde_json::Value,
    pub steps: Vec<Step>,
    pub status: ExecutionState,
    pub reason: Option<String>,
    /// Who drives it now: `HOST PID START` (none: nobody; resume takes it).
    pub runner: Option<String>,
    pub heartbeat_at: Option<String>,
    pub created_at: String,
    pub updated_at: String,
    /// Moves by one with every write.
    pub version: i64,
    /// Who started it, as the store authenticated the session that wrote it (DESIGN §14):
    /// the embedded store's owner (an OS user), the PostgreSQL login. Set by the store,
    /// never taken from the row; only this identity drives it and runs its steps.
    /// `None` for executions from before it was recorded on the embedded store.
    #[serde(default)]
    pub owner: Option<String>,
    /// The uid its starter ran as (the embedded store records its writer's own; on
    /// PostgreSQL it is the starter's word, checked by executors on top of the login).
    #[serde(default)]
    pub uid: Option<u32>,
    /// The digest of the definition as it was checked when it started
    /// (`Definition::digest`): whoever runs a step checks the stored definition against it,
    /// and checks it again as `pipeline check` does.
    #[serde(default)]
    pub definition_digest: Option<String>,
    /// Other identities whose label workers (`monitor worker --labels`) its starter lets
    /// run its labelled steps (`monitor pipeline run --workers`); a worker also needs its
    /// own host's config to trust the starter. Fixed at the start.
    #[serde(default)]
    pub workers: Vec<String>,
}

/// An execution's row as a store reads it, before its steps and status are read as the
/// engine's types. A row whose steps or status cannot be read (written by another build,
/// or by a runner login's hand on PostgreSQL) becomes an execution that has failed, saying
/// why, with no steps: listings go on showing every other one, and nothing moves it.
#[derive(Deserialize)]
pub struct StoredExecution {
    pub execution_id: String,
    pub name: String,
    pub file: Option<String>,
    pub dir: String,
    pub definition: serde_json::Value,
    pub vars: serde_json::Value,
    pub steps: serde_json::Value,
    pub status: String,
    pub reason: Option<String>,
    pub runner: Option<String>,
    pub heartbeat_at: Option<String>,
    pub created_at: String,
    pub updated_at: String,
    pub version: i64,
    #[serde(default)]
    pub owner: Option<String>,
    #[serde(default)]
    pub uid: Option<u32>,
    #[serde(default)]
    pub definition_digest: Option<String>,
    #[serde(default)]
    pub workers: Vec<String>,
}

impl From<StoredExecution> for Execution {
    fn from(r: StoredExecution) -> Self {
        let steps =
            serde_json::from_value::<Vec<Step>>(r.steps).map_err(|e| format!("its steps: {e}"));
        let status = r
            .status
            .parse::<ExecutionState>()
            .map_err(|e| format!("its status: {e}"));
        let (steps, status, reason) = match (steps, status) {
            (Ok(steps), Ok(status)) => (steps, status, r.reason),
            (steps, status) => {
                let why: Vec<String> = [steps.err(), status.err()].into_iter().flatten().collect();
                (
                    Vec::new(),
                    ExecutionState::Failed,
                    Some(format!(
                        "its stored row cannot be read ({}): nothing moves it",
                        crate::sanitize::sanitize_line(&why.join("; "))
                    )),
                )
            }
        };
        Execution {
            execution_id: r.execution_id,
            name: r.name,
            file: r.file,
            dir: r.dir,
            definition: r.definition,
            vars: r.vars,
            steps,
            status,
            reason,
            runner: r.runner,
            heartbeat_at: r.heartbeat_at,
            created_at: r.created_at,
            updated_at: r.updated_at,
            version: r.version,
            owner: r.owner,
            uid: r.uid,
            definition_digest: r.definition_digest,
            workers: r.workers,
        }
    }
}

impl Execution {
    /// Whether it has ended (nothing will move it again).
    pub fn is_final(&self) -> bool {
        self.status.is_final()
    }

    /// Cancelled with `why`: every step that had not ended ends with it — one that ran or
    /// waited for a decision is cancelled (its run stays named), one that had not started
    /// is skipped — so that nothing shows it running, or waiting, for ever. The same rule
    /// as `hr.settle_steps` on PostgreSQL.
    pub fn cancel(&mut self, why: &str) {
        self.status = ExecutionState::Cancelled;
        self.reason = Some(why.to_owned());
        for s in &mut self.steps {
            match s.status {
                super::engine::StepStatus::Running | super::engine::StepStatus::WaitingApproval => {
                    s.status = super::engine::StepStatus::Cancelled;
                    s.reason = Some(why.to_owned());
                }
                super::engine::StepStatus::Pending | super::engine::StepStatus::Ready => {
                    s.status = super::engine::StepStatus::Skipped;
                    s.reason = Some(why.to_owned());
                }
                _ => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stored(steps: serde_json::Value, status: &str) -> serde_json::Value {
        serde_json::json!({
            "execution_id": "EX-1", "name": "deploy", "file": null, "dir": "/w",
            "definition": {}, "vars": {}, "steps": steps, "status": status,
            "reason": null, "runner": null, "heartbeat_at": null,
            "created_at": "2026-11-27T00:00:00.000Z", "updated_at": "2026-11-27T00:00:00.000Z",
            "version": 3
        })
    }

    #[test]
    fn a_cancel_settles_every_step_that_had_not_ended() {
        let steps = serde_json::json!([
            {"node": "build", "iteration": 0, "status": "completed"},
            {"node": "deploy", "iteration": 0, "status": "running",
             "run": {"host": "h", "started_at": "2026-11-27T00:00:00.000Z", "tool_run_id": "TR-1"}},
            {"node": "ok", "iteration": 0, "status": "waiting_approval"},
            {"node": "after", "iteration": 0, "status": "pending"},
        ]);
        let mut ex: Execution = serde_json::from_value(stored(steps, "running")).unwrap();
        ex.cancel("cancelled by alice");
        let got: Vec<(&str, &str)> = ex
            .steps
            .iter()
            .map(|s| (s.node.as_str(), s.status.as_str()))
            .collect();
        assert_eq!(
            got,
            [
                ("build", "completed"),
                ("deploy", "cancelled"),
                ("ok", "cancelled"),
                ("after", "skipped")
            ]
        );
        assert!(ex.is_final());
        assert_eq!(ex.steps[1].reason.as_deref(), Some("cancelled by alice"));
        assert!(ex.steps[1].run.is_some(), "its run stays named");
        assert_eq!(ex.steps[0].reason, None);
    }

    #[test]
    fn a_row_reads_back_as_it_was_written() {
        let step = serde_json::json!({"node": "build", "iteration": 0, "status": "completed"});
        let ex: Execution =
            serde_json::from_value(stored(serde_json::json!([step]), "running")).unwrap();
        assert_eq!((ex.status, ex.steps.len()), (ExecutionState::Running, 1));
        let again: Execution = serde_json::from_value(serde_json::to_value(&ex).unwrap()).unwrap();
        assert_eq!(again, ex);
    }

    #[test]
    fn an_unreadable_row_is_a_failed_execution_that_says_why() {
        for (steps, status, why) in [
            (serde_json::json!([{"node": 1}]), "running", "its steps"),
            (serde_json::json!({}), "running", "its steps"),
            (serde_json::json!([]), "paused\u{1b}[31m", "its status"),
        ] {
            let ex: Execution = serde_json::from_value(stored(steps, status)).unwrap();
            assert_eq!(ex.status, ExecutionState::Failed);
            assert!(ex.steps.is_empty() && ex.is_final());
            let reason = ex.reason.unwrap();
            assert!(reason.contains(why), "{reason}");
            assert!(!reason.contains('\u{1b}'), "{reason}");
            assert_eq!(ex.version, 3, "the row is as stored otherwise");
        }
    }

    #[test]
    fn a_state_reads_back_as_it_is_written_and_nothing_else_reads() {
        for st in ExecutionState::ALL {
            assert_eq!(st.as_str().parse::<ExecutionState>(), Ok(st));
            assert_eq!(serde_json::to_value(st).unwrap(), st.as_str());
        }
        assert!("done".parse::<ExecutionState>().is_err());
    }

    /// The SQL that lists open executions names the states that are not final (or those that
    /// are), and the table's check names every state.
    #[test]
    fn the_sql_open_lists_are_the_states_not_final() {
        let open: Vec<&str> = ExecutionState::ALL
            .into_iter()
            .filter(|s| !s.is_final())
            .map(ExecutionState::as_str)
            .collect();
        let list = format!("IN ('{}')", open.join("', '"));
        assert!(
            include_str!("../store/pg/functions/pipelines.sql")
                .contains(&format!("p.status {list}")),
            "{list}"
        );
        assert!(
            include_str!("../store/pg/v2.sql").contains(&format!("WHERE status {list}")),
            "{list}"
        );
        let ended: Vec<&str> = ExecutionState::ALL
            .into_iter()
            .filter(|s| s.is_final())
            .map(ExecutionState::as_str)
            .collect();
        assert!(
            include_str!("../store/sqlite/pipelines.rs")
                .contains(&format!("status NOT IN ('{}')", ended.join("', '")))
        );
        let all: Vec<&str> = ExecutionState::ALL.map(ExecutionState::as_str).to_vec();
        assert!(
            include_str!("../store/pg/v2.sql")
                .contains(&format!("CHECK (status IN ('{}'))", all.join("', '")))
        );
    }
}
