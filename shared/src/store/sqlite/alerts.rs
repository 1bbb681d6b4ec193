//! Counts behind the dashboard's alerts line that the table modules do not offer, cheap
//! enough to read on every change of a large database: runs in the live statuses (an index
//! range, not a scan of every run), and failures in a recent window (an all-time failure
//! count would keep the alert on forever).

use crate::db::Result;
use crate::status::{RunStatus, sql_list};
use rusqlite::Connection;
use std::sync::LazyLock;

static LIVE_COUNTS: LazyLock<String> = LazyLock::new(|| {
    format!(
        "SELECT status, COUNT(*) FROM tool_runs
         WHERE status IN ({}) AND completed_at IS NULL
         GROUP BY status",
        sql_list(&RunStatus::OPEN)
    )
});

/// How many runs are queued, running, stalled or waiting for approval and have not ended
/// (a run its shim killed as stalled keeps the status `stalled` but has ended: it counts
/// among the failures instead). Reads the index of runs that have not ended
/// (`tool_runs_open`), so its cost follows the live runs, not the history.
pub(crate) fn live_counts(conn: &Connection) -> Result<Vec<(RunStatus, i64)>> {
    let mut stmt = conn.prepare_cached(&LIVE_COUNTS)?;
    let rows = stmt
        .query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?)))?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(rows
        .into_iter()
        .filter_map(|(s, n)| s.parse().ok().map(|st| (st, n)))
        .collect())
}

/// Runs that failed (`failed`, `failed_timeout`) and ended — or, lacking an end time,
/// started — at or after `since` (RFC 3339). Runs ended by their shim as `stalled` are
/// counted apart ([`stalled_since`]): a silent tool is what the operator must see. Reads the
/// recent range of each failed status in the index of failed runs by end time
/// (`tool_runs_failed`, usable because the query names its statuses), so its cost follows
/// the recent failures, not all of them.
pub(crate) fn failed_since(conn: &Connection, since: &str) -> Result<i64> {
    Ok(conn
        .prepare_cached(&FAILED_SINCE)?
        .query_row([since], |r| r.get(0))?)
}

// Both name the statuses of the partial index `tool_runs_failed` as it is written, so that
// SQLite can use it (it does not see that a shorter list implies the index's), and narrow
// them after.
static FAILED_SINCE: LazyLock<String> = LazyLock::new(|| {
    format!(
        "SELECT COUNT(*) FROM tool_runs
         WHERE status IN ({}) AND COALESCE(completed_at, started_at) >= ?1
           AND status <> '{}'",
        sql_list(&RunStatus::ALERTED),
        RunStatus::Stalled.as_str()
    )
});

/// Runs their shim ended as stalled (status `stalled`, ended) at or after `since`.
pub(crate) fn stalled_since(conn: &Connection, since: &str) -> Result<i64> {
    Ok(conn
        .prepare_cached(&STALLED_SINCE)?
        .query_row([since], |r| r.get(0))?)
}

static STALLED_SINCE: LazyLock<String> = LazyLock::new(|| {
    format!(
        "SELECT COUNT(*) FROM tool_runs
         WHERE status IN ({}) AND COALESCE(completed_at, started_at) >= ?1
           AND status = '{}' AND completed_at IS NOT NULL",
        sql_list(&RunStatus::ALERTED),
        RunStatus::Stalled.as_str()
    )
});

#[cfg(test)]
mod tests {
    use super::*;
    use crate::db::{self, OpenMode};

    use crate::status::RunStatus;
    use crate::testing::run as sample;

    #[test]
    fn counts_recent_failures_only() {
        let tmp = tempfile::tempdir().unwrap();
        let mut conn = db::open(&tmp.path().join("s.db"), OpenMode::Create).unwrap();
        let mut old = sample("TR-OLD", "x", RunStatus::Failed);
        old.started_at = "2020-01-01T00:00:00.000Z".into();
        old.completed_at = Some("2020-01-01T00:01:00.000Z".into());
        let mut new = sample("TR-NEW", "x", RunStatus::FailedTimeout);
        new.started_at = "2030-01-01T00:00:00.000Z".into();
        let ok = sample("TR-OK", "x", RunStatus::Completed);
        db::write(&mut conn, |tx| {
            for r in [&old, &new, &ok] {
                crate::store::sqlite::runs::insert(tx, r, "t")?;
            }
            Ok(())
        })
        .unwrap();
        assert_eq!(failed_since(&conn, "2025-01-01T00:00:00.000Z").unwrap(), 1);
        assert_eq!(failed_since(&conn, "2000-01-01T00:00:00.000Z").unwrap(), 2);
        let live = sample("TR-LIVE", "x", RunStatus::Stalled);
        // Killed as stalled by its shim (exit 92): ended, so not a live stall; counted as
        // a recent stall, apart from the failures.
        let mut killed = sample("TR-KILLED", "x", RunStatus::Stalled);
        killed.exit_code = Some(92);
        killed.completed_at = Some("2030-01-01T00:00:05.000Z".into());
        db::write(&mut conn, |tx| {
            crate::store::sqlite::runs::insert(tx, &live, "t")?;
            crate::store::sqlite::runs::insert(tx, &killed, "t")
        })
        .unwrap();
        assert_eq!(live_counts(&conn).unwrap(), [(RunStatus::Stalled, 1)]);
        assert_eq!(failed_since(&conn, "2025-01-01T00:00:00.000Z").unwrap(), 1);
        assert_eq!(stalled_since(&conn, "2025-01-01T00:00:00.000Z").unwrap(), 1);
        assert_eq!(stalled_since(&conn, "2031-01-01T00:00:00.000Z").unwrap(), 0);
    }

    /// Regression: the live counts read every stall-ended run (their status index range)
    /// on each change of a large database, and the recent failures every failure: 9 and
    /// 27 ms at 100 000 runs, the first on every change the dashboard saw.
    #[test]
    fn the_alert_counts_read_only_what_they_count() {
        let tmp = tempfile::tempdir().unwrap();
        let conn = db::open(&tmp.path().join("s.db"), OpenMode::Create).unwrap();
        let plan = |sql: &str| -> String {
            let sql = sql.replace("?1", "'2026-01-01T00:00:00.000Z'");
            conn.prepare(&format!("EXPLAIN QUERY PLAN {sql}"))
                .unwrap()
                .query_map([], |r| r.get::<_, String>(3))
                .unwrap()
                .collect::<rusqlite::Result<Vec<_>>>()
                .unwrap()
                .join("; ")
        };
        let live = plan(&LIVE_COUNTS);
        assert!(live.contains("USING INDEX tool_runs_open"), "{live}");
        for sql in [&*FAILED_SINCE, &*STALLED_SINCE] {
            let p = plan(sql);
            assert!(
                p.contains("INDEX tool_runs_failed (status=? AND <expr>>?)"),
                "{p}"
            );
        }
        // Their indexes take no other query's plan: the supervised runs (reconciliation,
        // the dashboard's liveness check) keep theirs.
        let supervised = plan(
            "SELECT tool_run_id FROM tool_runs
             WHERE status IN ('running', 'stalled', 'waiting_approval') AND exit_code IS NULL
             ORDER BY tool_run_id DESC",
        );
        assert!(
            supervised.contains("USING INDEX tool_runs_supervised"),
            "{supervised}"
        );
    }
}
