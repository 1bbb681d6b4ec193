//! The audit chain on the embedded store (`events`): appending a row linked to the one
//! before it, reading rows back, and verifying the chain (`crate::audit` has the hash
//! recipe and the row types).

use crate::audit::*;
use crate::db::Result;
use crate::time;
use rusqlite::{Connection, OptionalExtension, Transaction, params};

/// Appends an entry inside the caller's write transaction; returns its id.
pub(crate) fn append(tx: &Transaction<'_>, entry: &AuditEntry<'_>) -> Result<i64> {
    let prev: String = tx
        .query_row(
            "SELECT hash FROM events ORDER BY id DESC LIMIT 1",
            [],
            |r| r.get(0),
        )
        .optional()?
        .unwrap_or_else(|| GENESIS.to_owned());
    let at = time::now_rfc3339();
    let data = entry.data.to_string();
    let hash = chain_hash(
        &prev,
        &at,
        entry.event,
        entry.tool_run_id,
        entry.approval_id,
        entry.actor,
        &data,
    );
    tx.execute(
        "INSERT INTO events (at, event, tool_run_id, approval_id, actor, data, prev_hash, hash)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
        params![
            at,
            entry.event,
            entry.tool_run_id,
            entry.approval_id,
            entry.actor,
            data,
            prev,
            hash
        ],
    )?;
    Ok(tx.last_insert_rowid())
}

/// Walks the whole chain: each row's `prev_hash` must be the previous row's `hash`, each
/// `hash` must match the row's content, ids must not skip, and the last id must be the
/// highest ever handed out (a deleted tail shows there).
pub(crate) fn verify(conn: &Connection) -> Result<ChainReport> {
    let mut stmt = conn.prepare(
        "SELECT id, at, event, tool_run_id, approval_id, actor, data, prev_hash, hash
         FROM events ORDER BY id",
    )?;
    let mut rows = stmt.query([])?;
    let mut report = ChainReport {
        rows: 0,
        problems: Vec::new(),
        heads: Vec::new(),
    };
    let mut prev_hash = GENESIS.to_owned();
    let mut prev_id = 0i64;
    while let Some(r) = rows.next()? {
        let row = AuditRow {
            id: r.get(0)?,
            at: r.get(1)?,
            event: r.get(2)?,
            tool_run_id: r.get(3)?,
            approval_id: r.get(4)?,
            actor: r.get(5)?,
            data: r.get(6)?,
            prev_hash: r.get(7)?,
            hash: r.get(8)?,
        };
        report.rows += 1;
        if row.id != prev_id + 1 {
            report.problems.push((
                row.id,
                format!("rows {}..{} are missing", prev_id + 1, row.id - 1),
            ));
        }
        if row.prev_hash != prev_hash {
            report
                .problems
                .push((row.id, "prev_hash does not match the row before it".into()));
        }
        let expected = chain_hash(
            &row.prev_hash,
            &row.at,
            &row.event,
            row.tool_run_id.as_deref(),
            row.approval_id.as_deref(),
            &row.actor,
            &row.data,
        );
        if expected != row.hash {
            report
                .problems
                .push((row.id, "content does not match its hash (edited)".into()));
        }
        prev_hash = row.hash;
        prev_id = row.id;
    }
    if prev_id > 0 {
        report.heads = vec![(prev_id, prev_hash.clone())];
    }
    let highest: Option<i64> = conn
        .query_row(
            "SELECT seq FROM sqlite_sequence WHERE name = 'events'",
            [],
            |r| r.get(0),
        )
        .optional()?;
    if let Some(highest) = highest
        && highest > prev_id
    {
        report.problems.push((
            highest,
            format!("rows {}..{highest} at the end are missing", prev_id + 1),
        ));
    }
    Ok(report)
}

/// The hash of audit row `id`, if there is such a row.
pub(crate) fn hash_at(conn: &Connection, id: i64) -> Result<Option<String>> {
    Ok(conn
        .query_row("SELECT hash FROM events WHERE id = ?1", [id], |r| r.get(0))
        .optional()?)
}

/// Decided approvals whose decision has no matching `approval_status_change` row in the
/// audit chain: written straight into the table, past `monitor` and the shim. Returns the
/// approval ids with what the table says.
pub(crate) fn unrecorded_decisions(conn: &Connection) -> Result<Vec<(String, String)>> {
    let mut stmt = conn.prepare(
        "SELECT a.approval_id, a.status, COALESCE(a.chosen_value, '')
         FROM approvals a
         WHERE a.status != 'pending' AND NOT EXISTS (
             SELECT 1 FROM events e
             WHERE e.approval_id = a.approval_id AND e.event = 'approval_status_change'
               AND json_extract(e.data, '$.status') = a.status
               AND COALESCE(json_extract(e.data, '$.chosen_value'), '')
                   = COALESCE(a.chosen_value, ''))
         ORDER BY a.approval_id",
    )?;
    let rows = stmt
        .query_map([], |r| {
            let (id, status, value): (String, String, String) = (r.get(0)?, r.get(1)?, r.get(2)?);
            Ok((id, format!("{status} {value}").trim_end().to_owned()))
        })?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    // A free-text answer is audited as its digest, and leaves the row once used: those
    // match by digest (or, used up, by the digest alone).
    let mut unrecorded = Vec::new();
    for (id, what) in rows {
        let Some(a) = crate::store::sqlite::approvals::get(conn, &id)? else {
            continue;
        };
        let recorded = for_approval(conn, &id)?.into_iter().any(|e| {
            let data: serde_json::Value = serde_json::from_str(&e.data).unwrap_or_default();
            let logged = data["chosen_value"].as_str();
            e.event == "approval_status_change"
                && data["status"].as_str() == Some(a.status.as_str())
                && logged.is_some_and(|v| v.starts_with("sha256:"))
                && match a.logged_value() {
                    Some(now) => logged == Some(now.as_str()),
                    None => a.consumed_at.is_some(),
                }
        });
        if !recorded {
            unrecorded.push((id, what));
        }
    }
    Ok(unrecorded)
}

/// The audit rows filed under one run, oldest first (an approval's rows are filed under the
/// run that caused them: its consumption under the run that consumed it).
pub(crate) fn for_run(conn: &Connection, tool_run_id: &str) -> Result<Vec<AuditRow>> {
    rows_where(conn, "tool_run_id", tool_run_id)
}

/// The audit rows of one approval (whichever run they name, if any), oldest first.
pub(crate) fn for_approval(conn: &Connection, approval_id: &str) -> Result<Vec<AuditRow>> {
    rows_where(conn, "approval_id", approval_id)
}

/// The rows whose `column` (a fixed name, never input) is `value`, oldest first.
/// The audit rows after row `after`, oldest first, at most `limit`: a feed of what
/// happened, resumable by id.
pub(crate) fn after(conn: &Connection, after: i64, limit: usize) -> Result<Vec<AuditRow>> {
    let mut stmt = conn.prepare(
        "SELECT id, at, event, tool_run_id, approval_id, actor, data, prev_hash, hash
         FROM events WHERE id > ?1 ORDER BY id LIMIT ?2",
    )?;
    let rows = stmt
        .query_map(rusqlite::params![after, limit as i64], row)?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(rows)
}

/// The id of the newest audit row (0 when there is none).
pub(crate) fn head_id(conn: &Connection) -> Result<i64> {
    Ok(conn.query_row("SELECT COALESCE(MAX(id), 0) FROM events", [], |r| r.get(0))?)
}

fn row(r: &rusqlite::Row<'_>) -> rusqlite::Result<AuditRow> {
    Ok(AuditRow {
        id: r.get(0)?,
        at: r.get(1)?,
        event: r.get(2)?,
        tool_run_id: r.get(3)?,
        approval_id: r.get(4)?,
        actor: r.get(5)?,
        data: r.get(6)?,
        prev_hash: r.get(7)?,
        hash: r.get(8)?,
    })
}

fn rows_where(conn: &Connection, column: &'static str, value: &str) -> Result<Vec<AuditRow>> {
    let mut stmt = conn.prepare(&format!(
        "SELECT id, at, event, tool_run_id, approval_id, actor, data, prev_hash, hash
         FROM events WHERE {column} = ?1 ORDER BY id"
    ))?;
    let rows = stmt
        .query_map([value], row)?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::db::{self, OpenMode};

    fn entry(event: &str) -> AuditEntry<'_> {
        AuditEntry {
            event,
            tool_run_id: Some("TR-1"),
            approval_id: None,
            actor: "tester",
            data: serde_json::json!({"status": event}),
        }
    }

    fn chain(n: usize) -> (tempfile::TempDir, Connection) {
        let tmp = tempfile::tempdir().unwrap();
        let mut conn = db::open(&tmp.path().join("s.db"), OpenMode::Create).unwrap();
        for i in 0..n {
            let name = format!("e{i}");
            db::write(&mut conn, |tx| append(tx, &entry(&name))).unwrap();
        }
        (tmp, conn)
    }

    #[test]
    fn intact_chain_verifies() {
        let (_tmp, conn) = chain(5);
        let report = verify(&conn).unwrap();
        assert_eq!(report.rows, 5);
        assert!(report.intact(), "{report:?}");
        assert_eq!(for_run(&conn, "TR-1").unwrap().len(), 5);
    }

    #[test]
    fn edited_row_is_detected() {
        let (_tmp, conn) = chain(5);
        conn.execute("UPDATE events SET actor = 'mallory' WHERE id = 3", [])
            .unwrap();
        let report = verify(&conn).unwrap();
        assert_eq!(report.problems.len(), 1, "{report:?}");
        assert_eq!(report.problems[0].0, 3);
    }

    #[test]
    fn deleted_rows_are_detected() {
        let (_tmp, conn) = chain(5);
        conn.execute("DELETE FROM events WHERE id = 2", []).unwrap();
        let report = verify(&conn).unwrap();
        assert!(report.problems.iter().any(|(id, _)| *id == 3), "{report:?}");
        conn.execute("DELETE FROM events WHERE id = 5", []).unwrap();
        let report = verify(&conn).unwrap();
        assert!(
            report
                .problems
                .iter()
                .any(|(_, why)| why.contains("at the end")),
            "{report:?}"
        );
    }

    #[test]
    fn rehashing_an_edit_still_breaks_the_next_link() {
        let (_tmp, conn) = chain(3);
        let row: (String, String, String) = conn
            .query_row(
                "SELECT prev_hash, at, data FROM events WHERE id = 2",
                [],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
            )
            .unwrap();
        let forged = chain_hash(&row.0, &row.1, "e1", Some("TR-1"), None, "mallory", &row.2);
        conn.execute(
            "UPDATE events SET actor='mallory', hash=?1 WHERE id=2",
            [forged],
        )
        .unwrap();
        let report = verify(&conn).unwrap();
        assert!(report.problems.iter().any(|(id, _)| *id == 3), "{report:?}");
    }

    #[test]
    fn a_decision_written_past_the_audit_chain_is_found() {
        let tmp = tempfile::tempdir().unwrap();
        let mut conn = db::open(&tmp.path().join("s.db"), OpenMode::Create).unwrap();
        let a = crate::testing::approval("AP-1", crate::approvals::PromptKind::Choice);
        let b = crate::testing::approval("AP-2", crate::approvals::PromptKind::Choice);
        db::write(&mut conn, |tx| {
            crate::store::sqlite::approvals::insert(tx, &a, "shim")?;
            crate::store::sqlite::approvals::insert(tx, &b, "shim")
        })
        .unwrap();
        let who = crate::approvals::Decider {
            by: "alice",
            channel: "cli",
            comment: None,
            version: None,
            groups: &[],
        };
        db::write(&mut conn, |tx| {
            crate::store::sqlite::approvals::decide(tx, "AP-1", "y", &who)
        })
        .unwrap();
        assert!(unrecorded_decisions(&conn).unwrap().is_empty());
        conn.execute(
            "UPDATE approvals SET status = 'approved', chosen_value = 'y' WHERE approval_id = 'AP-2'",
            [],
        )
        .unwrap();
        conn.execute(
            "UPDATE approvals SET chosen_value = 'n' WHERE approval_id = 'AP-1'",
            [],
        )
        .unwrap();
        let found = unrecorded_decisions(&conn).unwrap();
        assert_eq!(
            found,
            [
                ("AP-1".to_string(), "approved n".to_string()),
                ("AP-2".to_string(), "approved y".to_string())
            ]
        );
    }
}
