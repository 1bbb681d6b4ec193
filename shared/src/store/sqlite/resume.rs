//! Resuming on the embedded store: parked runs with decided approvals, the runs that
//! resumed one, and taking a claim over from a worker that is gone (`crate::resume` has
//! the types and rules).

use crate::db::Result;
use crate::resume::*;
use crate::runs::ToolRun;
use crate::time;
use rusqlite::{Connection, Transaction, params};

/// Every parked run (`waiting_approval` with exit code 90) that has at least one decided,
/// unconsumed approval.
pub(crate) fn decided_parked(conn: &Connection) -> Result<Vec<ParkedRun>> {
    let run_ids: Vec<String> = {
        // Parked: what `rules::phase` calls `RunPhase::Parked`.
        let mut stmt = conn.prepare(&format!(
            "SELECT DISTINCT r.tool_run_id FROM tool_runs r
             JOIN approvals a ON a.tool_run_id = r.tool_run_id
             WHERE r.status = '{}' AND r.exit_code = {}
               AND a.status != 'pending' AND a.consumed_at IS NULL
             ORDER BY r.tool_run_id",
            crate::status::RunStatus::WaitingApproval.as_str(),
            crate::exit::shim::APPROVAL_PENDING
        ))?;
        stmt.query_map([], |r| r.get(0))?
            .collect::<rusqlite::Result<Vec<_>>>()?
    };
    let mut out = Vec::with_capacity(run_ids.len());
    for id in run_ids {
        let Some(run) = crate::store::sqlite::runs::get(conn, &id)? else {
            continue;
        };
        let all = crate::store::sqlite::approvals::list(
            conn,
            &crate::approvals::ApprovalFilter {
                tool_run_id: Some(id.clone()),
                ..Default::default()
            },
        )?;
        out.push(ParkedRun::of(run, all));
    }
    Ok(out)
}

/// The runs started as resumes of `waiting_run` (`resumed_from`), oldest first.
pub(crate) fn resumes_of(conn: &Connection, waiting_run: &str) -> Result<Vec<ToolRun>> {
    let ids: Vec<String> = {
        let mut stmt = conn.prepare(
            "SELECT tool_run_id FROM tool_runs WHERE resumed_from = ?1 ORDER BY tool_run_id",
        )?;
        stmt.query_map([waiting_run], |r| r.get(0))?
            .collect::<rusqlite::Result<Vec<_>>>()?
    };
    let mut out = Vec::with_capacity(ids.len());
    for id in ids {
        if let Some(run) = crate::store::sqlite::runs::get(conn, &id)? {
            out.push(run);
        }
    }
    Ok(out)
}

/// Hands a claim over from a worker that is gone to `new_worker`; false when the claim
/// changed meanwhile (another worker took it over first) or the approval was consumed.
pub(crate) fn take_over_claim(
    tx: &Transaction<'_>,
    approval_id: &str,
    old_worker: &str,
    new_worker: &str,
) -> Result<bool> {
    let changed = tx.execute(
        "UPDATE approvals SET claimed_by = ?3, claimed_at = ?4
         WHERE approval_id = ?1 AND claimed_by = ?2 AND consumed_at IS NULL",
        params![approval_id, old_worker, new_worker, time::now_rfc3339()],
    )?;
    Ok(changed > 0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::approvals::{Decider, PromptKind};
    use crate::db::{self, OpenMode};
    use crate::status::RunStatus;

    fn who() -> Decider<'static> {
        Decider {
            by: "alice",
            channel: "cli",
            comment: None,
            version: None,
            groups: &[],
        }
    }

    #[test]
    fn finds_parked_runs_with_decided_approvals_only() {
        let tmp = tempfile::tempdir().unwrap();
        let mut conn = db::open(&tmp.path().join("s.db"), OpenMode::Create).unwrap();
        let mut parked = crate::testing::run("TR-P", "rm", RunStatus::WaitingApproval);
        parked.exit_code = Some(90);
        // Waiting in wait mode (its shim answers itself): not the worker's.
        let waiting_live = crate::testing::run("TR-W", "rm", RunStatus::WaitingApproval);
        let mut still_pending = crate::testing::run("TR-Q", "rm", RunStatus::WaitingApproval);
        still_pending.exit_code = Some(90);
        let mut a1 = crate::testing::approval("AP-1", PromptKind::Choice);
        a1.tool_run_id = "TR-P".into();
        let mut a2 = crate::testing::approval("AP-2", PromptKind::Choice);
        a2.tool_run_id = "TR-W".into();
        let mut a3 = crate::testing::approval("AP-3", PromptKind::Choice);
        a3.tool_run_id = "TR-Q".into();
        db::write(&mut conn, |tx| {
            for r in [&parked, &waiting_live, &still_pending] {
                crate::store::sqlite::runs::insert(tx, r, "t")?;
            }
            for a in [&a1, &a2, &a3] {
                crate::store::sqlite::approvals::insert(tx, a, "t")?;
            }
            crate::store::sqlite::approvals::decide(tx, "AP-1", "y", &who())?;
            crate::store::sqlite::approvals::decide(tx, "AP-2", "y", &who())?;
            Ok(())
        })
        .unwrap();
        let found = decided_parked(&conn).unwrap();
        assert_eq!(found.len(), 1, "{found:#?}");
        assert_eq!(found[0].run.tool_run_id, "TR-P");
        assert_eq!(found[0].decided[0].approval_id, "AP-1");
        assert_eq!(found[0].pending, 0);
        // Once consumed, it is no longer the worker's business.
        db::write(&mut conn, |tx| {
            crate::store::sqlite::approvals::consume(tx, "AP-1", "TR-R", "shim")
        })
        .unwrap();
        assert!(decided_parked(&conn).unwrap().is_empty());
    }

    #[test]
    fn resumes_and_claim_takeover() {
        let tmp = tempfile::tempdir().unwrap();
        let mut conn = db::open(&tmp.path().join("s.db"), OpenMode::Create).unwrap();
        let mut r = crate::testing::run("TR-R", "rm", RunStatus::Completed);
        r.resumed_from = Some("TR-P".into());
        let a = crate::testing::approval("AP-1", PromptKind::Choice);
        db::write(&mut conn, |tx| {
            crate::store::sqlite::runs::insert(tx, &r, "t")?;
            crate::store::sqlite::approvals::insert(tx, &a, "t")?;
            crate::store::sqlite::approvals::decide(tx, "AP-1", "y", &who())?;
            crate::store::sqlite::approvals::claim(tx, "AP-1", "worker:h:1:1")
        })
        .unwrap();
        assert_eq!(resumes_of(&conn, "TR-P").unwrap()[0].tool_run_id, "TR-R");
        assert!(resumes_of(&conn, "TR-X").unwrap().is_empty());
        assert!(
            !db::write(&mut conn, |tx| take_over_claim(
                tx,
                "AP-1",
                "worker:h:2:2",
                "me"
            ))
            .unwrap()
        );
        assert!(
            db::write(&mut conn, |tx| take_over_claim(
                tx,
                "AP-1",
                "worker:h:1:1",
                "me"
            ))
            .unwrap()
        );
        assert_eq!(
            crate::store::sqlite::approvals::get(&conn, "AP-1")
                .unwrap()
                .unwrap()
                .claimed_by
                .as_deref(),
            Some("me")
        );
    }
}
