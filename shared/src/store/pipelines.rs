//! Where pipelines (`monitor pipeline`) keep their executions: one row each, holding the
//! checked definition and the variables as JSON, and the steps (on the embedded store, a
//! row each; on PostgreSQL, in the execution's row), moved only by a compare-and-swap on
//! `version` (the engine that reads them is `monitor`'s). A runner that dies leaves
//! the row as it last wrote it; whoever resumes reads it and swaps the runner's name in.
//!
//! The embedded store keeps them in its `pipelines` table, the PostgreSQL store in
//! `hr.pipelines` (written through functions that keep the definition fixed, let only the
//! runner login that started an execution move it, and refuse a human step completed
//! without an operator's approval); the runner API keeps none ([`for_store`] says so).

use super::sqlite::SqliteStore;
use super::{RunnerStore, StoreResult};
use crate::db::StoreError;
use crate::paths::StatePaths;

use crate::pipeline::engine::Step;
pub use crate::pipeline::execution::{Execution, ExecutionState};

/// A store that keeps pipelines, and is a runner's store as well (a human step is a run
/// with an approval, asked as a cooperative tool asks).
pub trait PipelineStore: RunnerStore {
    /// Who this session is, as the store authenticated it (see
    /// `OperatorStore::identity`): the owner of the executions it starts, and the only
    /// identity that drives them or runs their steps (besides label workers its starter
    /// named, for its labelled steps).
    fn identity(&mut self) -> StoreResult<String>;

    /// Records a new execution; false when its id is taken.
    fn pipeline_insert(&mut self, ex: &Execution) -> StoreResult<bool>;
    fn pipeline(&mut self, execution_id: &str) -> StoreResult<Option<Execution>>;
    /// The newest first, at most `limit`.
    fn pipelines(&mut self, limit: usize) -> StoreResult<Vec<Execution>>;
    /// Those that have not ended, oldest first, at most `limit`.
    fn open_pipelines(&mut self, limit: usize) -> StoreResult<Vec<Execution>>;
    /// Writes `ex` if the stored row is still at `ex.version` (it becomes `ex.version + 1`);
    /// false when another writer moved it first.
    fn pipeline_swap(&mut self, ex: &Execution) -> StoreResult<bool>;
    /// As [`PipelineStore::pipeline_swap`], where `before` are the steps as read at
    /// `ex.version`: a store that keeps steps as rows writes only those that differ, so a
    /// step's write costs the same however long the execution is.
    fn pipeline_swap_from(&mut self, before: &[Step], ex: &Execution) -> StoreResult<bool> {
        let _ = before;
        self.pipeline_swap(ex)
    }
    /// The version of the stored row, when this store can say it cheaply (`None`: it
    /// cannot, or there is no row): a reader whose copy is at that version has nothing to read.
    fn pipeline_version(&mut self, execution_id: &str) -> StoreResult<Option<i64>> {
        let _ = execution_id;
        Ok(None)
    }
    /// Brings `ex`, as read before, up to the stored row (false: there is none). A store
    /// that keeps steps as rows reads only the steps written since `ex.version`, and
    /// neither the definition nor the vars (fixed once stored); this one reads it whole.
    fn pipeline_refresh(&mut self, ex: &mut Execution) -> StoreResult<bool> {
        match self.pipeline(&ex.execution_id)? {
            Some(now) => {
                *ex = now;
                Ok(true)
            }
            None => Ok(false),
        }
    }
    /// The runs of an execution (its steps' headless-runs), oldest first.
    fn execution_runs(&mut self, execution_id: &str) -> StoreResult<Vec<crate::runs::ToolRun>>;
    /// The approvals a run asked, oldest first.
    fn approvals_of_run(
        &mut self,
        tool_run_id: &str,
    ) -> StoreResult<Vec<crate::approvals::Approval>>;
    /// A human step's approval, read by whichever runner drives the execution now.
    fn step_approval(
        &mut self,
        approval_id: &str,
    ) -> StoreResult<Option<crate::approvals::Approval>> {
        self.approval(approval_id)
    }
    /// Withdraws the question a human step of an ended execution still asks: its run fails
    /// and its pending approval expires (`system:run-ended`).
    fn withdraw_step_question(
        &mut self,
        tool_run_id: &str,
        why: &str,
        actor: &str,
    ) -> StoreResult<()> {
        let change = crate::runs::StatusChange {
            exit_code: Some(1),
            finished: true,
            ..crate::runs::StatusChange::to(crate::status::RunStatus::Failed, Some(why.to_owned()))
        };
        self.record(
            tool_run_id,
            &[
                super::RunWrite::Abandon(why.to_owned()),
                super::RunWrite::Status(change, super::Replace::Live),
            ],
            actor,
            false,
        )
        .map(|_| ())
    }

    /// Ends the parked run a human step asked in (`change`), using up its decided
    /// approval first when there is one; whoever drives the execution now, not only the
    /// process that asked.
    fn close_step_run(
        &mut self,
        tool_run_id: &str,
        approval_id: Option<&str>,
        change: crate::runs::StatusChange,
        actor: &str,
    ) -> StoreResult<()> {
        let mut writes = Vec::new();
        if let Some(a) = approval_id {
            writes.push(super::RunWrite::Consume(a.to_owned()));
        }
        // Only a run still waiting: one the decision ended already stays as it ended.
        writes.push(super::RunWrite::Status(change, super::Replace::Live));
        self.record(tool_run_id, &writes, actor, false).map(|_| ())
    }
}

/// The pipeline store for `paths`: the embedded one, or the PostgreSQL server's.
pub fn for_store(paths: &StatePaths) -> StoreResult<Box<dyn PipelineStore>> {
    if !super::capabilities::of(paths).pipelines {
        return Err(StoreError::Unsupported(
            "pipelines through a server (run them on the server's store: the embedded one or PostgreSQL)",
        ));
    }
    #[cfg(feature = "postgres")]
    if let Some(url) = &paths.store_url {
        return Ok(Box::new(super::postgres::PgRunner::new(url, paths)));
    }
    Ok(Box::new(SqliteStore::create(paths.clone())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_server_says_pipelines_are_not_kept_through_it() {
        let mut paths = StatePaths::at("/nonexistent-hr/state");
        paths.server = Some("https://hr.example:8443".into());
        assert!(matches!(for_store(&paths), Err(StoreError::Unsupported(_))));
    }
}
