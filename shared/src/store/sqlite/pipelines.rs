//! Pipelines on the embedded store (`pipelines`, `pipeline_steps`): the `PipelineStore`
//! session, and the move of a human step inside a decision's own transaction.
//!
//! An execution's steps are rows of their own (schema v12), each with the version of the
//! execution that last wrote it: a write touches the steps it changed, and a runner that
//! has the execution reads only the steps written since ([`PipelineStore::pipeline_refresh`]),
//! so a step costs the same in a short execution and a long one.

use super::SqliteStore;
use crate::pipeline::engine::Step;
use crate::pipeline::execution::StoredExecution;
use crate::store::StoreResult;
use crate::store::pipelines::{Execution, PipelineStore};
use rusqlite::{Connection, OptionalExtension, params};

const COLUMNS: &str = "execution_id, name, file, dir, definition, vars, steps_json, status, \
    reason, runner, heartbeat_at, created_at, updated_at, version, owner, uid, \
    definition_digest, workers, steps_in_rows";

/// A row of `pipelines`, its steps not yet read when they are rows of their own.
struct Row {
    stored: StoredExecution,
    in_rows: bool,
}

fn from_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<Row> {
    let json = |i: usize| -> rusqlite::Result<serde_json::Value> {
        let text: String = r.get(i)?;
        serde_json::from_str(&text).map_err(|e| {
            rusqlite::Error::FromSqlConversionFailure(i, rusqlite::types::Type::Text, Box::new(e))
        })
    };
    Ok(Row {
        stored: StoredExecution {
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
        },
        in_rows: r.get(18)?,
    })
}

/// The steps kept as rows of `execution_id`, in order, as one JSON array (null when one of
/// them cannot be read: the execution then reads as failed, saying why).
fn step_rows(c: &Connection, execution_id: &str) -> rusqlite::Result<serde_json::Value> {
    let mut stmt =
        c.prepare_cached("SELECT body FROM pipeline_steps WHERE execution_id = ?1 ORDER BY idx")?;
    let bodies = stmt.query_map([execution_id], |r| r.get::<_, String>(0))?;
    let mut steps = Vec::new();
    for body in bodies {
        match serde_json::from_str(&body?) {
            Ok(step) => steps.push(step),
            Err(_) => return Ok(serde_json::Value::Null),
        }
    }
    Ok(serde_json::Value::Array(steps))
}

/// The execution a row holds, its steps read (steps or status that cannot be read make it
/// a failed execution saying why, not a failed list: `Execution::from`).
fn execution_of(c: &Connection, mut row: Row) -> rusqlite::Result<Execution> {
    if row.in_rows {
        row.stored.steps = step_rows(c, &row.stored.execution_id)?;
    }
    Ok(row.stored.into())
}

fn read_one(c: &Connection, execution_id: &str) -> rusqlite::Result<Option<Execution>> {
    c.prepare_cached(&format!(
        "SELECT {COLUMNS} FROM pipelines WHERE execution_id = ?1"
    ))?
    .query_row([execution_id], from_row)
    .optional()?
    .map(|row| execution_of(c, row))
    .transpose()
}

fn read_many(c: &Connection, sql: &str, limit: usize) -> StoreResult<Vec<Execution>> {
    let mut stmt = c.prepare(sql)?;
    let rows = stmt
        .query_map([limit as i64], from_row)?
        .collect::<rusqlite::Result<Vec<Row>>>()?;
    Ok(rows
        .into_iter()
        .map(|row| execution_of(c, row))
        .collect::<rusqlite::Result<Vec<_>>>()?)
}

/// Writes the steps of `execution_id` at `version`: those that differ from `before` (all of
/// them without it), and removes any past the end.
fn write_steps(
    tx: &rusqlite::Transaction<'_>,
    execution_id: &str,
    version: i64,
    before: Option<&[Step]>,
    steps: &[Step],
) -> StoreResult<()> {
    let mut put = tx.prepare_cached(
        "INSERT OR REPLACE INTO pipeline_steps (execution_id, idx, version, body)
         VALUES (?1, ?2, ?3, ?4)",
    )?;
    for (i, step) in steps.iter().enumerate() {
        if before.and_then(|b| b.get(i)) == Some(step) {
            continue;
        }
        // A step's JSON cannot fail to write (its maps are keyed by strings); were it to,
        // `null` reads back as an execution that failed, saying why.
        let body = serde_json::to_string(step).unwrap_or_else(|_| "null".into());
        put.execute(params![execution_id, i as i64, version, body])?;
    }
    if before.is_none_or(|b| b.len() > steps.len()) {
        tx.prepare_cached("DELETE FROM pipeline_steps WHERE execution_id = ?1 AND idx >= ?2")?
            .execute(params![execution_id, steps.len() as i64])?;
    }
    Ok(())
}

/// Moves the row of `ex` on from `ex.version` (false: another writer moved it first),
/// writing the steps that differ from `before`.
fn swap_in(
    tx: &rusqlite::Transaction<'_>,
    before: Option<&[Step]>,
    ex: &Execution,
    runner: bool,
) -> StoreResult<bool> {
    // Without `runner`, the runner's own fields stay as they are.
    let n = tx
        .prepare_cached(
            "UPDATE pipelines SET steps_json = '[]', steps_in_rows = 1, status = ?3, reason = ?4,
                 updated_at = ?5,
                 runner = CASE WHEN ?8 THEN ?6 ELSE runner END,
                 heartbeat_at = CASE WHEN ?8 THEN ?7 ELSE heartbeat_at END,
                 version = version + 1
             WHERE execution_id = ?1 AND version = ?2",
        )?
        .execute(params![
            ex.execution_id,
            ex.version,
            ex.status.as_str(),
            ex.reason,
            crate::time::now_rfc3339(),
            ex.runner,
            ex.heartbeat_at,
            runner,
        ])?;
    if n != 1 {
        return Ok(false);
    }
    write_steps(tx, &ex.execution_id, ex.version + 1, before, &ex.steps)?;
    Ok(true)
}

/// Replaces `ex` with its row read whole (false: there is none).
fn read_whole(c: &Connection, ex: &mut Execution) -> StoreResult<bool> {
    Ok(match read_one(c, &ex.execution_id)? {
        Some(whole) => {
            *ex = whole;
            true
        }
        None => false,
    })
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
                    "INSERT OR IGNORE INTO pipelines ({COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, '[]', ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, 1)"
                ),
                params![
                    ex.execution_id,
                    ex.name,
                    ex.file,
                    ex.dir,
                    ex.definition.to_string(),
                    ex.vars.to_string(),
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
            if n == 1 {
                write_steps(tx, &ex.execution_id, ex.version, None, &ex.steps)?;
            }
            Ok(n == 1)
        })
    }

    fn pipeline(&mut self, execution_id: &str) -> StoreResult<Option<Execution>> {
        self.with(|c| {
            // One snapshot: the row and its steps as one writer left them.
            let tx = c.transaction()?;
            Ok(read_one(&tx, execution_id)?)
        })
    }

    fn pipeline_version(&mut self, execution_id: &str) -> StoreResult<Option<i64>> {
        self.with(|c| {
            Ok(
                c.prepare_cached("SELECT version FROM pipelines WHERE execution_id = ?1")?
                    .query_row([execution_id], |r| r.get(0))
                    .optional()?,
            )
        })
    }

    fn pipeline_refresh(&mut self, ex: &mut Execution) -> StoreResult<bool> {
        self.with(|c| {
            let tx = c.transaction()?;
            type Scalars = (
                String,
                Option<String>,
                Option<String>,
                Option<String>,
                String,
                i64,
                bool,
                bool,
                Option<i64>,
            );
            let row: Option<Scalars> = tx
                .prepare_cached(
                    "SELECT status, reason, runner, heartbeat_at, updated_at, version,
                         steps_in_rows,
                         (SELECT max(idx) + 1 = count(*) FROM pipeline_steps
                          WHERE execution_id = ?1) IS NOT 0,
                         (SELECT max(idx) FROM pipeline_steps WHERE execution_id = ?1)
                     FROM pipelines WHERE execution_id = ?1",
                )?
                .query_row([&ex.execution_id], |r| {
                    Ok((
                        r.get(0)?,
                        r.get(1)?,
                        r.get(2)?,
                        r.get(3)?,
                        r.get(4)?,
                        r.get(5)?,
                        r.get(6)?,
                        r.get(7)?,
                        r.get(8)?,
                    ))
                })
                .optional()?;
            let Some((
                status,
                reason,
                runner,
                heartbeat_at,
                updated_at,
                version,
                in_rows,
                no_gaps,
                last,
            )) = row
            else {
                return Ok(false);
            };
            if version == ex.version {
                return Ok(true);
            }
            // Only a row moved on from the one read is brought up to date from its rows (not
            // one made anew with a lower version, nor rows with a gap).
            let in_rows = in_rows && no_gaps && version > ex.version;
            let status = status.parse().ok();
            let changed: Option<Vec<(usize, Step)>> = if in_rows {
                let mut stmt = tx.prepare_cached(
                    "SELECT idx, body FROM pipeline_steps
                     WHERE execution_id = ?1 AND version > ?2 ORDER BY idx",
                )?;
                let rows = stmt.query_map(params![ex.execution_id, ex.version], |r| {
                    Ok((r.get::<_, i64>(0)?, r.get::<_, String>(1)?))
                })?;
                let mut changed = Vec::new();
                for row in rows {
                    let (idx, body) = row?;
                    match (usize::try_from(idx), serde_json::from_str::<Step>(&body)) {
                        (Ok(i), Ok(step)) => changed.push((i, step)),
                        // One that cannot be read: the whole row is read, and says why.
                        _ => return read_whole(&tx, ex),
                    }
                }
                Some(changed)
            } else {
                None
            };
            let len = last.map_or(0, |l| l as usize + 1);
            match (status, changed) {
                // Only what moved, onto what was read before: the steps written since, the
                // count, and the row's own fields (the definition, vars, owner and workers
                // never change once stored).
                (Some(status), Some(changed))
                    if changed.iter().all(|(i, _)| *i < len)
                        && (ex.steps.len()..len).all(|i| changed.iter().any(|(j, _)| *j == i)) =>
                {
                    ex.steps.truncate(len);
                    for (i, step) in changed {
                        if i < ex.steps.len() {
                            ex.steps[i] = step;
                        } else {
                            ex.steps.push(step);
                        }
                    }
                    ex.status = status;
                    ex.reason = reason;
                    ex.runner = runner;
                    ex.heartbeat_at = heartbeat_at;
                    ex.updated_at = updated_at;
                    ex.version = version;
                    Ok(true)
                }
                // Anything else (a row that cannot be read, steps kept the old way): read
                // it whole, as `pipeline` does.
                _ => read_whole(&tx, ex),
            }
        })
    }

    fn pipelines(&mut self, limit: usize) -> StoreResult<Vec<Execution>> {
        self.with(|c| {
            let tx = c.transaction()?;
            read_many(
                &tx,
                &format!(
                    "SELECT {COLUMNS} FROM pipelines ORDER BY created_at DESC, execution_id DESC LIMIT ?1"
                ),
                limit,
            )
        })
    }

    fn open_pipelines(&mut self, limit: usize) -> StoreResult<Vec<Execution>> {
        self.with(|c| {
            let tx = c.transaction()?;
            let all = read_many(
                &tx,
                &format!(
                    "SELECT {COLUMNS} FROM pipelines
                     WHERE status NOT IN ('completed', 'failed', 'cancelled')
                     ORDER BY created_at, execution_id LIMIT ?1"
                ),
                limit,
            )?;
            // One whose row cannot be read reads as failed: not open.
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
        self.write(|tx| swap_in(tx, None, ex, true))
    }

    fn pipeline_swap_from(&mut self, before: &[Step], ex: &Execution) -> StoreResult<bool> {
        self.write(|tx| swap_in(tx, Some(before), ex, true))
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
    let ex = read_one(tx, &exid)?;
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
    let Ok(Some(ex)) = read_one(tx, &exid) else {
        return Ok(Vec::new());
    };
    let Ok(Some(moved)) = crate::pipeline::decided(&ex, a, &node, iteration) else {
        return Ok(Vec::new());
    };
    // Only the human step and what it made ready are written: the runner's own fields stay.
    if !swap_in(tx, Some(&ex.steps), &moved, false)? {
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
        let mut three = execution("EX-3");
        three.steps = steps(3);
        assert!(st.pipeline_insert(&three).unwrap());
        let mut known = st.pipeline("EX-3").unwrap().unwrap();
        let c = rusqlite::Connection::open(&paths.db).unwrap();
        // Steps kept the old way (a row no migration could move) and a step row.
        c.execute(
            "UPDATE pipelines SET steps_json = '[{\"node\": 7}', steps_in_rows = 0
             WHERE execution_id = 'EX-2'",
            [],
        )
        .unwrap();
        c.execute(
            "UPDATE pipeline_steps SET body = '{\"node\": 7}', version = version + 1
             WHERE execution_id = 'EX-3' AND idx = 1",
            [],
        )
        .unwrap();
        c.execute(
            "UPDATE pipelines SET version = version + 1 WHERE execution_id = 'EX-3'",
            [],
        )
        .unwrap();
        let all = st.pipelines(10).unwrap();
        assert_eq!(all.len(), 3, "the others are still listed");
        for id in ["EX-2", "EX-3"] {
            let bad = st.pipeline(id).unwrap().unwrap();
            assert_eq!(bad.status, ExecutionState::Failed, "{id}");
            assert!(
                bad.reason.as_deref().unwrap().contains("cannot be read"),
                "{id}: {:?}",
                bad.reason
            );
        }
        // One read before and brought up to date reads the same.
        assert!(st.pipeline_refresh(&mut known).unwrap());
        assert_eq!(known, st.pipeline("EX-3").unwrap().unwrap());
        let open: Vec<String> = st
            .open_pipelines(10)
            .unwrap()
            .into_iter()
            .map(|e| e.execution_id)
            .collect();
        assert_eq!(open, ["EX-1"]);
    }

    fn steps(n: usize) -> Vec<crate::pipeline::engine::Step> {
        (0..n)
            .map(|i| {
                serde_json::from_value(serde_json::json!({
                    "node": format!("s{i}"), "iteration": 0, "status": "completed",
                    "exit_code": 0, "env": {"BUILD": format!("b{i}")}
                }))
                .unwrap()
            })
            .collect()
    }

    /// Issue 31: a step of a long execution writes its own row, not the execution's steps
    /// again, and a runner that read it before reads only what was written since.
    #[test]
    fn a_long_executions_step_writes_and_reads_its_own_rows() {
        let dir = tempfile::tempdir().unwrap();
        let paths = StatePaths::at(dir.path().join("state"));
        let mut st = for_store(&paths).unwrap();
        let mut other = for_store(&paths).unwrap();
        let mut ex = execution("EX-long");
        ex.steps = steps(5000);
        assert!(st.pipeline_insert(&ex).unwrap());
        let read = st.pipeline("EX-long").unwrap().unwrap();
        assert_eq!(read.steps, ex.steps);
        let mut known = other.pipeline("EX-long").unwrap().unwrap();

        // One step changes and one is added.
        let mut moved = read.clone();
        moved.steps[4321].status = crate::pipeline::engine::StepStatus::Failed;
        moved.steps[4321].reason = Some("exit 1".into());
        moved.steps.push(steps(5001).pop().unwrap());
        assert!(st.pipeline_swap_from(&read.steps, &moved).unwrap());
        let c = rusqlite::Connection::open(&paths.db).unwrap();
        let written: Vec<i64> = c
            .prepare(
                "SELECT idx FROM pipeline_steps WHERE execution_id = 'EX-long' AND version = 2
                 ORDER BY idx",
            )
            .unwrap()
            .query_map([], |r| r.get(0))
            .unwrap()
            .map(Result::unwrap)
            .collect();
        assert_eq!(written, [4321, 5000], "only the steps that changed");
        let kept: String = c
            .query_row(
                "SELECT steps_json FROM pipelines WHERE execution_id = 'EX-long'",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(kept, "[]", "the row holds no steps");

        // Another process's copy, brought up to date, is the row as stored.
        assert!(other.pipeline_refresh(&mut known).unwrap());
        let now = st.pipeline("EX-long").unwrap().unwrap();
        assert_eq!(known, now);
        assert_eq!((now.version, now.steps.len()), (2, 5001));
        assert_eq!(now.steps[4321].reason.as_deref(), Some("exit 1"));
        // Unchanged: nothing to read; a stale writer loses, as before.
        assert!(other.pipeline_refresh(&mut known).unwrap());
        assert_eq!(known, now);
        assert!(!st.pipeline_swap_from(&read.steps, &moved).unwrap());

        // Fewer steps than before (a store written whole): the rest are gone.
        let mut short = now.clone();
        short.steps.truncate(10);
        assert!(st.pipeline_swap(&short).unwrap());
        assert!(other.pipeline_refresh(&mut known).unwrap());
        assert_eq!(known.steps.len(), 10);
        assert_eq!(known, st.pipeline("EX-long").unwrap().unwrap());
        // Gone: refresh says so.
        c.execute("DELETE FROM pipelines WHERE execution_id = 'EX-long'", [])
            .unwrap();
        assert!(!other.pipeline_refresh(&mut known).unwrap());
    }
}
