//! Garbage collection on the embedded store: finished runs older than a cutoff, with their
//! approvals, except what a live chain of decisions still needs.

use crate::audit::AuditEntry;
use crate::db::Result;
use crate::gc::GcReport;
use rusqlite::{Connection, Transaction, params_from_iter};

/// Finished runs that ended before `cutoff` (RFC 3339), oldest first — but not one whose
/// decisions a live chain still keeps (`store::sqlite::chain`: a later run's resume types them).
pub(crate) fn finished_before(conn: &Connection, cutoff: &str) -> Result<Vec<String>> {
    // The statuses a run never leaves: only these are collected.
    let mut stmt = conn.prepare(&format!(
        "SELECT tool_run_id FROM tool_runs r
         WHERE status IN ({}) AND COALESCE(completed_at, updated_at) < ?1
           AND NOT EXISTS (SELECT 1 FROM approvals k
                           WHERE k.tool_run_id = r.tool_run_id AND k.kept_for IS NOT NULL)
         ORDER BY tool_run_id",
        crate::status::sql_list(&crate::status::RunStatus::FINAL)
    ))?;
    let ids = stmt
        .query_map([cutoff], |r| r.get(0))?
        .collect::<rusqlite::Result<Vec<String>>>()?;
    Ok(ids)
}

/// How many decided approvals belong to these runs.
pub(crate) fn approvals_of(conn: &Connection, runs: &[String]) -> Result<usize> {
    let mut n = 0;
    for chunk in runs.chunks(500) {
        let marks = vec!["?"; chunk.len()].join(",");
        n += conn.query_row(
            &format!(
                "SELECT COUNT(*) FROM approvals WHERE status != 'pending' AND tool_run_id IN ({marks})"
            ),
            params_from_iter(chunk.iter()),
            |r| r.get::<_, i64>(0),
        )? as usize;
    }
    Ok(n)
}

/// Deletes the finished runs that ended before `cutoff` and their decided approvals
/// (pending ones stay: someone may still answer them), with one `gc` audit row.
pub(crate) fn collect(tx: &Transaction<'_>, cutoff: &str, actor: &str) -> Result<GcReport> {
    let runs = finished_before(tx, cutoff)?;
    let mut approvals = 0;
    for chunk in runs.chunks(500) {
        let marks = vec!["?"; chunk.len()].join(",");
        approvals += tx.execute(
            &format!(
                "DELETE FROM approvals WHERE status != 'pending' AND tool_run_id IN ({marks})"
            ),
            params_from_iter(chunk.iter()),
        )?;
        tx.execute(
            &format!("DELETE FROM tool_runs WHERE tool_run_id IN ({marks})"),
            params_from_iter(chunk.iter()),
        )?;
    }
    if !runs.is_empty() {
        super::audit::append(
            tx,
            &AuditEntry {
                event: "gc",
                tool_run_id: None,
                approval_id: None,
                actor,
                data: serde_json::json!({
                    "ended_before": cutoff,
                    "runs": runs.len(),
                    "approvals": approvals,
                }),
            },
        )?;
    }
    Ok(GcReport { runs, approvals })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::approvals::{self, PromptKind};
    use crate::db::{self, OpenMode};
    use crate::status::RunStatus;

    #[test]
    fn collects_old_finished_runs_and_keeps_the_rest() {
        let tmp = tempfile::tempdir().unwrap();
        let mut conn = db::open(&tmp.path().join("s.db"), OpenMode::Create).unwrap();
        let old = "2000-01-01T00:00:00.000Z";
        let mut done = crate::testing::run("TR-OLD", "rm", RunStatus::Completed);
        done.completed_at = Some(old.into());
        let mut live = crate::testing::run("TR-LIVE", "rm", RunStatus::Running);
        live.updated_at = old.into();
        let fresh = crate::testing::run("TR-NEW", "rm", RunStatus::Failed);
        let mut decided = crate::testing::approval("AP-D", PromptKind::Choice);
        decided.tool_run_id = "TR-OLD".into();
        let mut pending = crate::testing::approval("AP-P", PromptKind::Choice);
        pending.tool_run_id = "TR-OLD".into();
        db::write(&mut conn, |tx| {
            for r in [&done, &live, &fresh] {
                crate::store::sqlite::runs::insert(tx, r, "t")?;
            }
            crate::store::sqlite::approvals::insert(tx, &decided, "t")?;
            crate::store::sqlite::approvals::insert(tx, &pending, "t")?;
            crate::store::sqlite::approvals::decide(
                tx,
                "AP-D",
                "y",
                &approvals::Decider {
                    by: "a",
                    channel: "cli",
                    comment: None,
                    version: None,
                    groups: &[],
                },
            )
        })
        .unwrap();
        let cutoff = "2020-01-01T00:00:00.000Z";
        assert_eq!(finished_before(&conn, cutoff).unwrap(), ["TR-OLD"]);
        assert_eq!(approvals_of(&conn, &["TR-OLD".into()]).unwrap(), 1);
        let report = db::write(&mut conn, |tx| collect(tx, cutoff, "tester")).unwrap();
        assert_eq!(report.runs, ["TR-OLD"]);
        assert_eq!(report.approvals, 1);
        assert!(
            crate::store::sqlite::runs::get(&conn, "TR-OLD")
                .unwrap()
                .is_none()
        );
        assert!(
            crate::store::sqlite::runs::get(&conn, "TR-LIVE")
                .unwrap()
                .is_some()
        );
        assert!(
            crate::store::sqlite::approvals::get(&conn, "AP-P")
                .unwrap()
                .is_some()
        );
        assert!(
            crate::store::sqlite::approvals::get(&conn, "AP-D")
                .unwrap()
                .is_none()
        );
        // The audit chain is untouched and still verifies, with the gc recorded.
        let report = crate::store::sqlite::audit::verify(&conn).unwrap();
        assert!(report.intact(), "{report:?}");
        // A second collection finds nothing and writes nothing.
        let again = db::write(&mut conn, |tx| collect(tx, cutoff, "tester")).unwrap();
        assert_eq!(again, GcReport::default());
    }
}
