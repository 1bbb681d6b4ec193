//! Pipelines on the embedded store (`pipelines`): the `PipelineStore` session, and the move
//! of a human step inside a decision's own transaction.

use super::SqliteStore;
use crate::pipeline::execution::StoredExecution;
use crate::store::StoreResult;
use crate::store::pipelines::{Execution, PipelineStore};
use rusqlite::{OptionalExtension, params};

const COLUMNS: &str = "execution_id, name, file, dir, definition, vars, steps, status, \
    reason, runner, heartbeat_at, created_at, updated_at, version, owner, uid, \
    definition_digest, workers";

/// The steps as the row keeps them.
fn steps_json(steps: &[crate::pipeline::engine::Step]) -> String {
    serde_json::to_string(steps).unwrap_or_else(|_| "[]".into())
}

fn from_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<Execution> {
    let json = |i: usize| -> rusqlite::Result<serde_json::Value> {
        let text: String = r.get(i)?;
        serde_json::from_str(&text).map_err(|e| {
            rusqlite::Error::FromSqlConversionFailure(i, rusqlite::types::Type::Text, Box::new(e))
        })
    };
    // Steps and status are read as the engine's types by `Execution::from`: a row whose
    // steps or status cannot be read is a failed execution saying why, not a failed list.
    Ok(StoredExecution {
        execution_id: r.get(0)?,
        name: r.get(1)?,
        file: r.get(2)?,
        dir: r.get(3)?,
        definition: json(4)?,
        vars: json(5)?,
        steps: serde_json::from_str(&r.get::<_, String>(6)?).unwrap_or_default(),
        status: r.get(7)?,
        reason: r.get(8)?,
        runner: r.get(9)?,
        heartbeat_at: r.get(10)?,
        created_at: r.get(11)?,
        updated_at: r.get(12)?,
        version: r.get(13)?,
        owner: r.get(14)?,
        uid: r.get(15)?,
        definition_digest: r.get(16)?,
        workers: r
            .get::<_, Option<String>>(17)?
            .and_then(|w| serde_json::from_str(&w).ok())
            .unwrap_or_default(),
    }
    .into())
}

impl PipelineStore for SqliteStore {
    fn identity(&mut self) -> StoreResult<String> {
        super::WorkerStore::identity(self)
    }

    fn pipeline_insert(&mut self, ex: &Execution) -> StoreResult<bool> {
        // Its owner is this store's, whoever the row says (only the owner writes it).
        let owner = super::WorkerStore::identity(self)?;
        let uid = crate::proc::effective_uid();
        self.write(|tx| {
            let n = tx.execute(
                &format!(
                    "INSERT OR IGNORE INTO pipelines ({COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18)"
                ),
                params![
                    ex.execution_id,
                    ex.name,
                    ex.file,
                    ex.dir,
                    ex.definition.to_string(),
                    ex.vars.to_string(),
                    steps_json(&ex.steps),
                    ex.status.as_str(),
                    ex.reason,
                    ex.runner,
                    ex.heartbeat_at,
                    ex.created_at,
                    ex.updated_at,
                    ex.version,
                    owner,
                    uid,
                    ex.definition_digest,
                    serde_json::to_string(&ex.workers).unwrap_or_else(|_| "[]".into()),
                ],
            )?;
            Ok(n == 1)
        })
    }

    fn pipeline(&mut self, execution_id: &str) -> StoreResult<Option<Execution>> {
        self.with(|c| {
            Ok(c.query_row(
                &format!("SELECT {COLUMNS} FROM pipelines WHERE execution_id = ?1"),
                [execution_id],
                from_row,
            )
            .optional()?)
        })
    }

    fn pipelines(&mut self, limit: usize) -> StoreResult<Vec<Execution>> {
        self.with(|c| {
            let mut stmt = c.prepare(&format!(
                "SELECT {COLUMNS} FROM pipelines ORDER BY created_at DESC, execution_id DESC LIMIT ?1"
            ))?;
            let rows = stmt.query_map([limit as i64], from_row)?;
            Ok(rows.collect::<rusqlite::Result<Vec<_>>>()?)
        })
    }

    fn open_pipelines(&mut self, limit: usize) -> StoreResult<Vec<Execution>> {
        self.with(|c| {
            let mut stmt = c.prepare(&format!(
                "SELECT {COLUMNS} FROM pipelines
                 WHERE status NOT IN ('completed', 'failed', 'cancelled')
                 ORDER BY created_at, execution_id LIMIT ?1"
            ))?;
            let rows = stmt.query_map([limit as i64], from_row)?;
            // One whose row cannot be read reads as failed: not open.
            let all = rows.collect::<rusqlite::Result<Vec<Execution>>>()?;
            Ok(all.into_iter().filter(|e| !e.is_final()).collect())
        })
    }

    fn execution_runs(&mut self, execution_id: &str) -> StoreResult<Vec<crate::runs::ToolRun>> {
        let mut runs = super::OperatorStore::runs(
            self,
            &crate::runs::RunFilter {
                execution_id: Some(execution_id.to_owned()),
                ..Default::default()
            },
        )?;
        runs.reverse();
        Ok(runs)
    }

    fn approvals_of_run(
        &mut self,
        tool_run_id: &str,
    ) -> StoreResult<Vec<crate::approvals::Approval>> {
        let mut all = super::OperatorStore::approvals(
            self,
            &crate::approvals::ApprovalFilter {
                tool_run_id: Some(tool_run_id.to_owned()),
                ..Default::default()
            },
        )?;
        all.reverse();
        Ok(all)
    }

    fn pipeline_swap(&mut self, ex: &Execution) -> StoreResult<bool> {
        self.write(|tx| {
            let n = tx.execute(
                "UPDATE pipelines SET steps = ?3, status = ?4, reason = ?5, runner = ?6,
                     heartbeat_at = ?7, updated_at = ?8, version = version + 1
                 WHERE execution_id = ?1 AND version = ?2",
                params![
                    ex.execution_id,
                    ex.version,
                    steps_json(&ex.steps),
                    ex.status.as_str(),
                    ex.reason,
                    ex.runner,
                    ex.heartbeat_at,
                    crate::time::now_rfc3339(),
                ],
            )?;
            Ok(n == 1)
        })
    }
}

/// In a decision's own transaction (embedded store): why `who` may not decide approval
/// `approval_id`, when it is a pipeline human step's question that names its deciders
/// ([`crate::pipeline::deciders_refusal`]); an execution that cannot be found refuses too.
pub(crate) fn deciders_refusal_in(
    tx: &rusqlite::Transaction<'_>,
    approval_id: &str,
    who: &str,
) -> StoreResult<Option<String>> {
    let Some(a) = crate::store::sqlite::approvals::get(tx, approval_id)? else {
        return Ok(None);
    };
    let Some(run) = crate::store::sqlite::runs::get(tx, &a.tool_run_id)? else {
        return Ok(None);
    };
    let Some((exid, node, _)) = crate::pipeline::step_of(&run) else {
        return Ok(None);
    };
    let ex = tx
        .query_row(
            &format!("SELECT {COLUMNS} FROM pipelines WHERE execution_id = ?1"),
            [&exid],
            from_row,
        )
        .optional()?;
    Ok(match ex {
        Some(ex) => crate::pipeline::deciders_refusal(&ex, &node, who),
        None => Some(format!(
            "cannot read the pipeline of {approval_id} (no execution {exid}) to know who may decide it"
        )),
    })
}

/// In a decision's own transaction (embedded store): the human step that decision `a`
/// answers moves (the next steps become ready, or the execution fails), the run it asked in
/// ends and the approval is used up. Its events (the run's end); none when `a` is no
/// pipeline step's, or the step does not wait for it — the runner then moves nothing, or
/// (a row it cannot read) says why.
pub(crate) fn decided_in(
    tx: &rusqlite::Transaction<'_>,
    a: &crate::approvals::Approval,
    actor: &str,
) -> StoreResult<Vec<crate::event::LogEvent>> {
    let Some(run) = crate::store::sqlite::runs::get(tx, &a.tool_run_id)? else {
        return Ok(Vec::new());
    };
    let Some((exid, node, iteration)) = crate::pipeline::step_of(&run) else {
        return Ok(Vec::new());
    };
    // A row that cannot be read moves nothing here: the decision stands, and the runner
    // says what is wrong with the row.
    let Ok(Some(ex)) = tx
        .query_row(
            &format!("SELECT {COLUMNS} FROM pipelines WHERE execution_id = ?1"),
            [&exid],
            from_row,
        )
        .optional()
    else {
        return Ok(Vec::new());
    };
    let Ok(Some(moved)) = crate::pipeline::decided(&ex, a, &node, iteration) else {
        return Ok(Vec::new());
    };
    let n = tx.execute(
        "UPDATE pipelines SET steps = ?3, status = ?4, reason = ?5, updated_at = ?6,
             version = version + 1
         WHERE execution_id = ?1 AND version = ?2",
        params![
            moved.execution_id,
            moved.version,
            steps_json(&moved.steps),
            moved.status.as_str(),
            moved.reason,
            crate::time::now_rfc3339(),
        ],
    )?;
    if n != 1 {
        return Ok(Vec::new());
    }
    crate::store::sqlite::approvals::consume(tx, &a.approval_id, &run.tool_run_id, actor)?;
    let change = crate::pipeline::closing(a);
    let previous = crate::store::sqlite::runs::change_status(
        tx,
        &run.tool_run_id,
        &change,
        actor,
        crate::runs::Guard::From(&[crate::status::RunStatus::WaitingApproval]),
    )?;
    Ok(previous
        .map(|p| vec![run.status_event(Some(p), &change)])
        .unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::paths::StatePaths;
    use crate::store::pipelines::{ExecutionState, for_store};

    fn execution(id: &str) -> Execution {
        let now = crate::time::now_rfc3339();
        Execution {
            execution_id: id.into(),
            name: "deploy".into(),
            file: Some("deploy.yaml".into()),
            dir: "/work".into(),
            definition: serde_json::json!({"nodes": []}),
            vars: serde_json::json!({}),
            steps: Vec::new(),
            status: ExecutionState::Running,
            reason: None,
            runner: Some("h 1 1".into()),
            heartbeat_at: Some(now.clone()),
            created_at: now.clone(),
            updated_at: now,
            version: 1,
            owner: None,
            definition_digest: None,
            uid: None,
            workers: Vec::new(),
        }
    }

    #[test]
    fn a_swap_wins_once_per_version() {
        let dir = tempfile::tempdir().unwrap();
        let paths = StatePaths::at(dir.path().join("state"));
        let mut a = for_store(&paths).unwrap();
        let mut b = for_store(&paths).unwrap();
        let ex = execution("EX-1");
        assert!(a.pipeline_insert(&ex).unwrap());
        assert!(!b.pipeline_insert(&ex).unwrap(), "the id is taken");
        let seen = b.pipeline("EX-1").unwrap().unwrap();
        // Recorded as the store's owner's, as which uid, whatever the row said.
        let me = crate::proc::effective_uid();
        let owned = Execution {
            owner: Some(crate::proc::user_name(me)),
            uid: Some(me),
            ..ex.clone()
        };
        assert_eq!(seen, owned);
        // Two writers read version 1: one wins, the other must read again.
        let mut mine = seen.clone();
        mine.runner = Some("a".into());
        let mut theirs = seen.clone();
        theirs.runner = Some("b".into());
        assert!(a.pipeline_swap(&mine).unwrap());
        assert!(!b.pipeline_swap(&theirs).unwrap());
        let now = a.pipeline("EX-1").unwrap().unwrap();
        assert_eq!((now.runner.as_deref(), now.version), (Some("a"), 2));
        assert!(a.pipeline_insert(&execution("EX-2")).unwrap());
        let mut ended = a.pipeline("EX-2").unwrap().unwrap();
        ended.status = ExecutionState::Completed;
        assert!(a.pipeline_swap(&ended).unwrap());
        let open: Vec<String> = a
            .open_pipelines(10)
            .unwrap()
            .into_iter()
            .map(|e| e.execution_id)
            .collect();
        assert_eq!(open, ["EX-1"]);
        let ids: Vec<String> = a
            .pipelines(10)
            .unwrap()
            .into_iter()
            .map(|e| e.execution_id)
            .collect();
        assert_eq!(ids.len(), 2);
        assert!(a.pipeline("EX-3").unwrap().is_none());
    }

    #[test]
    fn a_row_that_cannot_be_read_fails_alone() {
        let dir = tempfile::tempdir().unwrap();
        let paths = StatePaths::at(dir.path().join("state"));
        let mut st = for_store(&paths).unwrap();
        assert!(st.pipeline_insert(&execution("EX-1")).unwrap());
        assert!(st.pipeline_insert(&execution("EX-2")).unwrap());
        rusqlite::Connection::open(&paths.db)
            .unwrap()
            .execute(
                "UPDATE pipelines SET steps = '[{\"node\": 7}' WHERE execution_id = 'EX-2'",
                [],
            )
            .unwrap();
        let all = st.pipelines(10).unwrap();
        assert_eq!(all.len(), 2, "the others are still listed");
        let bad = st.pipeline("EX-2").unwrap().unwrap();
        assert_eq!(bad.status, ExecutionState::Failed);
        assert!(
            bad.reason.as_deref().unwrap().contains("cannot be read"),
            "{:?}",
            bad.reason
        );
        let open: Vec<String> = st
            .open_pipelines(10)
            .unwrap()
            .into_iter()
            .map(|e| e.execution_id)
            .collect();
        assert_eq!(open, ["EX-1"]);
    }
}
