//! Pipelines (`monitor pipeline`): a runner login's session starts and moves its
//! executions; an operator's reads them and cancels.

use super::*;

/// After an operator's decision, in its transaction: the pipeline human step it answers
/// moves (`hr.pipeline_decided` checks it), the run the step asked in ends and the approval
/// is used up. The run's end event, when it moved.
pub(super) fn pipeline_decided(
    tx: &mut postgres::Transaction<'_>,
    a: &Approval,
) -> Result<Option<LogEvent>, postgres::Error> {
    let row = tx.query_opt(
        "SELECT hr.run_doc(r)::text FROM hr.tool_runs r WHERE tool_run_id = $1",
        &[&a.tool_run_id],
    )?;
    let Some(run) = row
        .and_then(|r| r.get::<_, Option<String>>(0))
        .and_then(|t| serde_json::from_str::<ToolRun>(&t).ok())
    else {
        return Ok(None);
    };
    let Some((exid, node, iteration)) = crate::pipeline::step_of(&run) else {
        return Ok(None);
    };
    let Some(ex) = tx
        .query_opt(
            "SELECT x::text FROM hr.pipeline_docs($1, false, 1) x",
            &[&exid],
        )?
        .and_then(|r| r.get::<_, Option<String>>(0))
        .and_then(|t| serde_json::from_str::<crate::pipeline::Execution>(&t).ok())
    else {
        return Ok(None);
    };
    let Ok(Some(moved)) = crate::pipeline::decided(&ex, a, &node, iteration) else {
        return Ok(None);
    };
    let moved_it: bool = tx
        .query_one(
            "SELECT hr.pipeline_decided($1, $2::text::jsonb)",
            &[&a.approval_id, &to_json(&moved)],
        )?
        .get(0);
    if !moved_it {
        return Ok(None);
    }
    let change = crate::pipeline::closing(a);
    let previous = close_question(tx, &run.tool_run_id, Some(&a.approval_id), &change)?;
    Ok(previous.map(|p| run.status_event(Some(p), &change)))
}

/// `hr.close_run`: the run's status before, when the guard `from` let the change through.
pub(super) fn close_run_in(
    tx: &mut postgres::Transaction<'_>,
    tool_run_id: &str,
    change: &StatusChange,
    from: &[RunStatus],
) -> Result<Option<RunStatus>, postgres::Error> {
    let from: Vec<&str> = from.iter().map(|s| s.as_str()).collect();
    let previous: Option<String> = tx
        .query_one(
            "SELECT hr.close_run($1, $2, $3, $4, $5, $6, $7, $8)",
            &[
                &tool_run_id,
                &change.status.as_str(),
                &change.reason,
                &change.exit_code,
                &change.finished,
                &change.error,
                &change.at,
                &from,
            ],
        )?
        .get(0);
    Ok(previous.and_then(|p| p.parse().ok()))
}

/// Ends the parked run a pipeline's human step asked in, using up its approval first.
pub(super) fn close_question(
    tx: &mut postgres::Transaction<'_>,
    tool_run_id: &str,
    approval_id: Option<&str>,
    change: &StatusChange,
) -> Result<Option<RunStatus>, postgres::Error> {
    if let Some(a) = approval_id {
        tx.query_one("SELECT hr.consume($1, $2)", &[&a, &tool_run_id])?;
    }
    close_run_in(tx, tool_run_id, change, &[RunStatus::WaitingApproval])
}

impl crate::store::pipelines::PipelineStore for PgRunner {
    fn identity(&mut self) -> StoreResult<String> {
        self.pg.login()
    }

    fn pipeline_insert(&mut self, ex: &crate::pipeline::Execution) -> StoreResult<bool> {
        let doc = to_json(ex);
        self.pg.tx(|tx| {
            Ok(tx
                .query_one("SELECT hr.pipeline_insert($1::text::jsonb)", &[&doc])?
                .get(0))
        })
    }

    fn pipeline(&mut self, execution_id: &str) -> StoreResult<Option<crate::pipeline::Execution>> {
        self.pg.doc(
            "SELECT x::text FROM hr.pipeline_docs($1, false, 1) x",
            &[&execution_id],
        )
    }

    fn pipelines(&mut self, limit: usize) -> StoreResult<Vec<crate::pipeline::Execution>> {
        let limit = i32::try_from(limit).unwrap_or(i32::MAX);
        self.pg.docs(
            "SELECT x::text FROM hr.pipeline_docs(NULL, false, $1) x",
            &[&limit],
        )
    }

    fn open_pipelines(&mut self, limit: usize) -> StoreResult<Vec<crate::pipeline::Execution>> {
        let limit = i32::try_from(limit).unwrap_or(i32::MAX);
        let all: Vec<crate::pipeline::Execution> = self.pg.docs(
            "SELECT x::text FROM hr.pipeline_docs(NULL, true, $1) x",
            &[&limit],
        )?;
        // One whose row cannot be read reads as failed: not open.
        Ok(all.into_iter().filter(|e| !e.is_final()).collect())
    }

    fn pipeline_swap(&mut self, ex: &crate::pipeline::Execution) -> StoreResult<bool> {
        let doc = to_json(ex);
        self.pg.tx(|tx| {
            Ok(tx
                .query_one("SELECT hr.pipeline_swap($1::text::jsonb)", &[&doc])?
                .get(0))
        })
    }

    fn execution_runs(&mut self, execution_id: &str) -> StoreResult<Vec<ToolRun>> {
        self.pg.docs(
            "SELECT x::text FROM hr.execution_runs($1) x",
            &[&execution_id],
        )
    }

    fn approvals_of_run(&mut self, tool_run_id: &str) -> StoreResult<Vec<Approval>> {
        self.pg.docs(
            "SELECT x::text FROM hr.step_approvals($1, NULL) x",
            &[&tool_run_id],
        )
    }

    /// Read by any session of the login (the runner's own read needs the capability of the
    /// one run its process started; a resumer has none).
    fn step_approval(&mut self, approval_id: &str) -> StoreResult<Option<Approval>> {
        self.pg.doc(
            "SELECT x::text FROM hr.step_approvals(NULL, $1) x",
            &[&approval_id],
        )
    }

    fn withdraw_step_question(
        &mut self,
        tool_run_id: &str,
        why: &str,
        _actor: &str,
    ) -> StoreResult<()> {
        self.pg.tx(|tx| {
            tx.query(
                "SELECT x::text FROM hr.pipeline_withdraw($1, $2) x",
                &[&tool_run_id, &why],
            )
            .map(drop)
        })
    }

    /// Through the worker's functions (this login's parked runs), so that a resumer, which
    /// has no capability for the run another process asked in, closes it too.
    fn close_step_run(
        &mut self,
        tool_run_id: &str,
        approval_id: Option<&str>,
        change: StatusChange,
        _actor: &str,
    ) -> StoreResult<()> {
        self.pg
            .tx(|tx| close_question(tx, tool_run_id, approval_id, &change))?;
        Ok(())
    }
}
