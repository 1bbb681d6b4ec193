//! Counts behind the dashboard's alerts line that the table modules do not offer: failures
//! in a recent window (an all-time failure count would keep the alert on forever).

use crate::db::Result;
use rusqlite::Connection;

/// Runs that failed (`failed` or `failed_timeout`) and ended — or, lacking an end time,
/// started — at or after `since` (RFC 3339). Reads the status index, then only the failed
/// rows, so it stays cheap on a large database where most runs succeed.
pub fn failed_since(conn: &Connection, since: &str) -> Result<i64> {
    Ok(conn.query_row(
        "SELECT COUNT(*) FROM tool_runs
         WHERE status IN ('failed', 'failed_timeout')
           AND COALESCE(completed_at, started_at) >= ?1",
        [since],
        |r| r.get(0),
    )?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::db::{self, OpenMode};
    use crate::runs::{self, tests::sample};
    use crate::status::RunStatus;

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
                runs::insert(tx, r, "t")?;
            }
            Ok(())
        })
        .unwrap();
        assert_eq!(failed_since(&conn, "2025-01-01T00:00:00.000Z").unwrap(), 1);
        assert_eq!(failed_since(&conn, "2000-01-01T00:00:00.000Z").unwrap(), 2);
    }
}
