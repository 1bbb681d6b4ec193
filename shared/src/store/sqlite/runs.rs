//! The `tool_runs` table on the embedded store: each statement behind the store traits for
//! runs (`crate::runs` has the row type and its pure rules).

use crate::audit::AuditEntry;
use crate::db::{self, Result};
use crate::runs::*;
use crate::status::RunStatus;
use crate::time;
use rusqlite::{Connection, OptionalExtension, Row, Transaction, params};

/// The filter as a `WHERE` clause.
pub(crate) fn conditions(f: &RunFilter) -> db::Conditions {
    db::Conditions::default()
        .any_of("status", f.statuses.iter().map(|s| s.as_str()))
        .equals("tool_name", f.tool.as_ref())
        .equals("execution_id", f.execution_id.as_ref())
        .at_least("started_at", f.since.as_ref())
}

const COLUMNS: &str = "tool_run_id, tool_name, execution_id, status, reason, exit_code, started_at, \
     completed_at, last_output_at, last_heartbeat_at, supervisor_heartbeat_at, last_error_msg, pid, \
     shim_pid, shim_start_time, host, argv_json, cwd, resumed_from, metadata, updated_at, owner";

fn from_row(r: &Row<'_>) -> rusqlite::Result<ToolRun> {
    let status: String = r.get(3)?;
    let argv: String = r.get(16)?;
    let metadata: Option<String> = r.get(19)?;
    Ok(ToolRun {
        tool_run_id: r.get(0)?,
        tool_name: r.get(1)?,
        execution_id: r.get(2)?,
        // A status written by a newer build is shown as failed rather than breaking reads.
        status: status.parse().unwrap_or(RunStatus::Failed),
        reason: r.get(4)?,
        exit_code: r.get(5)?,
        started_at: r.get(6)?,
        completed_at: r.get(7)?,
        last_output_at: r.get(8)?,
        last_heartbeat_at: r.get(9)?,
        supervisor_heartbeat_at: r.get(10)?,
        last_error_msg: r.get(11)?,
        pid: r.get(12)?,
        shim_pid: r.get(13)?,
        shim_start_time: r.get(14)?,
        host: r.get(15)?,
        argv_json: serde_json::from_str(&argv).unwrap_or_default(),
        cwd: r.get(17)?,
        resumed_from: r.get(18)?,
        metadata: metadata.and_then(|m| serde_json::from_str(&m).ok()),
        updated_at: r.get(20)?,
        owner: r.get(21)?,
    })
}

/// Inserts a new run and its first audit row.
pub(crate) fn insert(tx: &Transaction<'_>, run: &ToolRun, actor: &str) -> Result<()> {
    tx.execute(
        &format!("INSERT INTO tool_runs ({COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20, ?21, ?22)"),
        params![
            run.tool_run_id,
            run.tool_name,
            run.execution_id,
            run.status.as_str(),
            run.reason,
            run.exit_code,
            run.started_at,
            run.completed_at,
            run.last_output_at,
            run.last_heartbeat_at,
            run.supervisor_heartbeat_at,
            run.last_error_msg,
            run.pid,
            run.shim_pid,
            run.shim_start_time,
            run.host,
            serde_json::to_string(&run.argv_json).unwrap_or_else(|_| "[]".into()),
            run.cwd,
            run.resumed_from,
            run.metadata.as_ref().map(|m| m.to_string()),
            run.updated_at,
            run.owner,
        ],
    )?;
    super::audit::append(
        tx,
        &AuditEntry {
            event: "tool_status_change",
            tool_run_id: Some(&run.tool_run_id),
            approval_id: None,
            actor,
            data: serde_json::json!({
                "status": run.status,
                "tool": run.tool_name,
                "argv": run.argv_json,
                "cwd": run.cwd,
                "resumed_from": run.resumed_from,
            }),
        },
    )?;
    Ok(())
}

/// Changes a run's status (with an audit row) if the guard allows; returns the previous
/// status, or `None` when the run does not exist or the guard refused. A run that ends
/// here ends its chain of decisions ([`crate::store::sqlite::chain::ended`]); the status events of other
/// runs that closes are dropped (see [`change_status_with`]).
pub(crate) fn change_status(
    tx: &Transaction<'_>,
    tool_run_id: &str,
    change: &StatusChange,
    actor: &str,
    guard: Guard<'_>,
) -> Result<Option<RunStatus>> {
    change_status_with(tx, tool_run_id, change, actor, guard, &mut Vec::new())
}

/// [`change_status`], with the status events of the other runs the end of this one closed
/// (the run it resumed, when it never used that run's decision) added to `events`.
pub(crate) fn change_status_with(
    tx: &Transaction<'_>,
    tool_run_id: &str,
    change: &StatusChange,
    actor: &str,
    guard: Guard<'_>,
    events: &mut Vec<crate::event::LogEvent>,
) -> Result<Option<RunStatus>> {
    let current: Option<String> = tx
        .query_row(
            "SELECT status FROM tool_runs WHERE tool_run_id = ?1",
            [tool_run_id],
            |r| r.get(0),
        )
        .optional()?;
    let Some(current) = current.and_then(|s| s.parse::<RunStatus>().ok()) else {
        return Ok(None);
    };
    let allowed = match guard {
        Guard::Any => true,
        Guard::NotFinal => !current.is_final(),
        Guard::From(set) => set.contains(&current),
        Guard::Not(status) => current != status,
    };
    if !allowed {
        return Ok(None);
    }
    let now = change.at.clone().unwrap_or_else(time::now_rfc3339);
    tx.execute(
        "UPDATE tool_runs SET status = ?2, reason = ?3,
            exit_code = COALESCE(?4, exit_code),
            completed_at = CASE WHEN ?5 THEN ?6 ELSE completed_at END,
            last_error_msg = COALESCE(?7, last_error_msg),
            updated_at = ?6
         WHERE tool_run_id = ?1",
        params![
            tool_run_id,
            change.status.as_str(),
            change.reason,
            change.exit_code,
            change.finished,
            now,
            change.error,
        ],
    )?;
    if current != change.status || change.finished {
        super::audit::append(
            tx,
            &AuditEntry {
                event: "tool_status_change",
                tool_run_id: Some(tool_run_id),
                approval_id: None,
                actor,
                data: serde_json::json!({
                    "status": change.status,
                    "previous_status": current,
                    "reason": change.reason,
                    "exit_code": change.exit_code,
                }),
            },
        )?;
    }
    if !current.is_final() && change.status.is_final() {
        crate::store::sqlite::chain::ended(tx, tool_run_id, actor, events)?;
    }
    Ok(Some(current))
}

/// Records how a run that someone else already finished (a cancellation) really ended:
/// its exit code and end time, leaving status and reason as they were written.
pub(crate) fn record_exit(
    tx: &Transaction<'_>,
    tool_run_id: &str,
    exit_code: i32,
    at: &str,
) -> Result<()> {
    tx.execute(
        "UPDATE tool_runs SET exit_code = ?2, completed_at = COALESCE(completed_at, ?3),
            updated_at = ?3
         WHERE tool_run_id = ?1",
        params![tool_run_id, exit_code, at],
    )?;
    Ok(())
}

/// Records liveness timestamps (no audit row: these are not status changes).
pub(crate) fn touch(conn: &Connection, tool_run_id: &str, t: &Touch) -> Result<()> {
    conn.execute(
        "UPDATE tool_runs SET
            last_output_at = COALESCE(?2, last_output_at),
            last_heartbeat_at = COALESCE(?3, last_heartbeat_at),
            supervisor_heartbeat_at = COALESCE(?4, supervisor_heartbeat_at),
            last_error_msg = COALESCE(?5, last_error_msg)
         WHERE tool_run_id = ?1",
        params![
            tool_run_id,
            t.last_output_at,
            t.last_heartbeat_at,
            t.supervisor_heartbeat_at,
            t.last_error_msg
        ],
    )?;
    Ok(())
}

/// Records the tool's pid once it has been spawned.
pub(crate) fn set_pid(conn: &Connection, tool_run_id: &str, pid: i64) -> Result<()> {
    conn.execute(
        "UPDATE tool_runs SET pid = ?2 WHERE tool_run_id = ?1",
        params![tool_run_id, pid],
    )?;
    Ok(())
}

/// Keeps a parked run's environment in its metadata (`env`), for its resume.
pub(crate) fn set_environment(
    conn: &Connection,
    tool_run_id: &str,
    env: &crate::mode::SavedEnvironment,
) -> Result<()> {
    let env = serde_json::to_string(env).unwrap_or_else(|_| "{}".into());
    // Kept as the run parks (exit 90): with it, also when it parked, so that the time it
    // took excludes the wait for a decision.
    conn.execute(
        "UPDATE tool_runs
         SET metadata = json_set(COALESCE(metadata, '{}'), '$.env', json(?2), '$.parked_at', ?3)
         WHERE tool_run_id = ?1",
        params![tool_run_id, env, crate::time::now_rfc3339()],
    )?;
    Ok(())
}

/// One run by id.
pub(crate) fn get(conn: &Connection, tool_run_id: &str) -> Result<Option<ToolRun>> {
    Ok(conn
        .query_row(
            &format!("SELECT {COLUMNS} FROM tool_runs WHERE tool_run_id = ?1"),
            [tool_run_id],
            from_row,
        )
        .optional()?)
}

/// Runs matching the filter, newest first.
pub(crate) fn list(conn: &Connection, filter: &RunFilter) -> Result<Vec<ToolRun>> {
    let (clause, args) = conditions(filter).into_parts();
    let mut sql = format!("SELECT {COLUMNS} FROM tool_runs{clause} ORDER BY tool_run_id DESC");
    if let Some(limit) = filter.limit {
        sql.push_str(&format!(" LIMIT {limit}"));
    }
    let mut stmt = conn.prepare(&sql)?;
    let rows = stmt
        .query_map(rusqlite::params_from_iter(args.iter()), from_row)?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(rows)
}

/// The runs a shim should still be supervising: in a live status (running, stalled,
/// waiting for approval) with no exit code recorded — not the ones parked on an approval
/// (exit 90) or ended as stalled (exit 92) on purpose. Newest first, at most `limit`. Reads
/// a partial index, so its cost follows these runs, not the history.
pub(crate) fn supervised(conn: &Connection, limit: Option<usize>) -> Result<Vec<ToolRun>> {
    let mut sql = format!(
        "SELECT {COLUMNS} FROM tool_runs
         WHERE status IN ({}) AND exit_code IS NULL
         ORDER BY tool_run_id DESC",
        crate::status::sql_list(&RunStatus::LIVE)
    );
    if let Some(limit) = limit {
        sql.push_str(&format!(" LIMIT {limit}"));
    }
    let mut stmt = conn.prepare(&sql)?;
    let rows = stmt
        .query_map([], from_row)?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(rows)
}

/// How many runs are in each status.
pub(crate) fn count_by_status(conn: &Connection) -> Result<Vec<(RunStatus, i64)>> {
    let mut stmt = conn.prepare("SELECT status, COUNT(*) FROM tool_runs GROUP BY status")?;
    let rows = stmt
        .query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?)))?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(rows
        .into_iter()
        .filter_map(|(s, n)| s.parse().ok().map(|st| (st, n)))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::db::{self, OpenMode};
    use crate::testing::run as sample;

    #[test]
    fn insert_get_change_list() {
        let tmp = tempfile::tempdir().unwrap();
        let mut conn = db::open(&tmp.path().join("s.db"), OpenMode::Create).unwrap();
        db::write(&mut conn, |tx| {
            insert(tx, &sample("TR-A", "rm", RunStatus::Running), "me")?;
            insert(tx, &sample("TR-B", "apt", RunStatus::Running), "me")
        })
        .unwrap();
        let got = get(&conn, "TR-A").unwrap().unwrap();
        assert_eq!(got, sample_like(&got));
        let prev = db::write(&mut conn, |tx| {
            change_status(
                tx,
                "TR-A",
                &StatusChange {
                    status: RunStatus::Completed,
                    reason: None,
                    exit_code: Some(0),
                    finished: true,
                    error: None,
                    at: None,
                },
                "me",
                Guard::NotFinal,
            )
        })
        .unwrap();
        assert_eq!(prev, Some(RunStatus::Running));
        // A finished run is not changed again under NotFinal.
        let again = db::write(&mut conn, |tx| {
            change_status(
                tx,
                "TR-A",
                &StatusChange::to(RunStatus::Failed, None),
                "me",
                Guard::NotFinal,
            )
        })
        .unwrap();
        assert_eq!(again, None);
        let a = get(&conn, "TR-A").unwrap().unwrap();
        assert_eq!(a.status, RunStatus::Completed);
        assert_eq!(a.exit_code, Some(0));
        assert!(a.completed_at.is_some());

        let running = list(
            &conn,
            &RunFilter {
                statuses: vec![RunStatus::Running],
                ..Default::default()
            },
        )
        .unwrap();
        assert_eq!(running.len(), 1);
        assert_eq!(running[0].tool_run_id, "TR-B");
        let by_tool = list(
            &conn,
            &RunFilter {
                tool: Some("rm".into()),
                ..Default::default()
            },
        )
        .unwrap();
        assert_eq!(by_tool.len(), 1);
        let newest = list(
            &conn,
            &RunFilter {
                limit: Some(1),
                ..Default::default()
            },
        )
        .unwrap();
        assert_eq!(newest[0].tool_run_id, "TR-B");
        let counts = count_by_status(&conn).unwrap();
        assert!(counts.contains(&(RunStatus::Completed, 1)));

        touch(
            &conn,
            "TR-B",
            &Touch {
                last_output_at: Some("x".into()),
                ..Default::default()
            },
        )
        .unwrap();
        assert_eq!(
            get(&conn, "TR-B")
                .unwrap()
                .unwrap()
                .last_output_at
                .as_deref(),
            Some("x")
        );
        // Every change left an audit row, and the chain holds.
        assert_eq!(
            crate::store::sqlite::audit::for_run(&conn, "TR-A")
                .unwrap()
                .len(),
            2
        );
        assert!(crate::store::sqlite::audit::verify(&conn).unwrap().intact());
    }

    /// Found when the dashboard showed runs ended as stalled by their own shim (exit 92) as
    /// "supervisor vanished": only runs with no exit code still have a shim to check.
    #[test]
    fn supervised_runs_leave_out_parked_and_stall_ended_ones() {
        let tmp = tempfile::tempdir().unwrap();
        let mut conn = db::open(&tmp.path().join("s.db"), OpenMode::Create).unwrap();
        let mut parked = sample("TR-A-PARKED", "x", RunStatus::WaitingApproval);
        parked.exit_code = Some(90);
        let mut stalled = sample("TR-B-STALLED", "x", RunStatus::Stalled);
        stalled.exit_code = Some(92);
        let waiting = sample("TR-C-WAITING", "x", RunStatus::WaitingApproval);
        let marked = sample("TR-D-MARKED", "x", RunStatus::Stalled);
        let running = sample("TR-E-RUNNING", "x", RunStatus::Running);
        let mut done = sample("TR-F-DONE", "x", RunStatus::Completed);
        done.exit_code = Some(0);
        db::write(&mut conn, |tx| {
            for r in [&parked, &stalled, &waiting, &marked, &running, &done] {
                insert(tx, r, "t")?;
            }
            Ok(())
        })
        .unwrap();
        let ids: Vec<String> = supervised(&conn, None)
            .unwrap()
            .into_iter()
            .map(|r| r.tool_run_id)
            .collect();
        assert_eq!(ids, ["TR-E-RUNNING", "TR-D-MARKED", "TR-C-WAITING"]);
        assert_eq!(supervised(&conn, Some(1)).unwrap().len(), 1);
    }

    fn sample_like(got: &ToolRun) -> ToolRun {
        let mut s = sample("TR-A", "rm", RunStatus::Running);
        s.started_at = got.started_at.clone();
        s.updated_at = got.updated_at.clone();
        s
    }

    #[test]
    fn json_fields_are_the_columns() {
        let run = sample("TR-A", "rm", RunStatus::Running);
        let v = serde_json::to_value(&run).unwrap();
        let keys: Vec<&str> = v.as_object().unwrap().keys().map(|k| k.as_str()).collect();
        let cols: Vec<&str> = COLUMNS.split(',').map(|c| c.trim()).collect();
        let mut a = keys.clone();
        a.sort();
        let mut b = cols.clone();
        b.sort();
        assert_eq!(a, b);
    }
}
