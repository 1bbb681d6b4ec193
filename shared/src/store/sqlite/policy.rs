//! Remembered decisions on the embedded store (`policies`): a decision kept with its scope,
//! found again for a later prompt, forgotten (`crate::policy` has the matching rules).

use crate::db::Result;
use crate::policy::*;
use crate::{id, time};
use rusqlite::{Connection, OptionalExtension, Transaction, params};

/// Stores a remembered decision: prompts of `tool` with this fingerprint, within its scope,
/// get `value`.
pub(crate) fn remember(tx: &Transaction<'_>, r: &Remembered<'_>) -> Result<RememberedPolicy> {
    let Remembered {
        tool,
        prompt_fingerprint,
        scope,
        value,
        approval_id,
        by,
    } = *r;
    let argv_json = scope
        .argv
        .as_ref()
        .map(|a| serde_json::to_string(a).unwrap_or_else(|_| "[]".into()));
    let policy = RememberedPolicy {
        policy_id: id::new_id("PO-"),
        name: format!("remembered:{approval_id}"),
        tool_name: Some(tool.to_owned()),
        prompt_fingerprint: Some(prompt_fingerprint.to_owned()),
        value: value.to_owned(),
        source: "remembered".into(),
        source_approval_id: Some(approval_id.to_owned()),
        created_at: time::now_rfc3339(),
        created_by: by.to_owned(),
        argv_json: scope.argv.clone(),
        cwd: scope.cwd.clone(),
    };
    // The newest remembered decision for a prompt, in the same scope, replaces older ones.
    tx.execute(
        "UPDATE policies SET enabled = 0
         WHERE source = 'remembered' AND tool_name = ?1 AND prompt_fingerprint = ?2
           AND argv_json IS ?3 AND cwd IS ?4",
        params![tool, prompt_fingerprint, argv_json, scope.cwd],
    )?;
    tx.execute(
        "INSERT INTO policies (policy_id, name, tool_name, prompt_fingerprint, value, source,
            source_approval_id, created_at, created_by, enabled, argv_json, cwd)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, 1, ?10, ?11)",
        params![
            policy.policy_id,
            policy.name,
            policy.tool_name,
            policy.prompt_fingerprint,
            policy.value,
            policy.source,
            policy.source_approval_id,
            policy.created_at,
            policy.created_by,
            argv_json,
            policy.cwd,
        ],
    )?;
    super::audit::append(
        tx,
        &crate::audit::AuditEntry {
            event: "policy_remembered",
            tool_run_id: None,
            approval_id: Some(approval_id),
            actor: by,
            data: serde_json::json!({
                "policy_id": policy.policy_id,
                "tool": tool,
                "prompt_fingerprint": prompt_fingerprint,
                "value": value,
                "argv": scope.argv,
                "cwd": scope.cwd,
            }),
        },
    )?;
    Ok(policy)
}

/// Every remembered decision still in force (enabled), newest first.
pub(crate) fn remembered(conn: &Connection) -> Result<Vec<RememberedPolicy>> {
    let mut stmt = conn.prepare(&format!(
        "SELECT {REMEMBERED_COLUMNS} FROM policies
         WHERE enabled = 1 AND source = 'remembered' ORDER BY created_at DESC, policy_id DESC"
    ))?;
    let rows = stmt
        .query_map([], remembered_from_row)?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(rows)
}

/// Withdraws remembered decision `policy_id` (it stays in the table, disabled, and the audit
/// chain says who withdrew it). `None` when there is no such remembered decision in force.
pub(crate) fn forget(
    tx: &Transaction<'_>,
    policy_id: &str,
    by: &str,
) -> Result<Option<RememberedPolicy>> {
    let found = tx
        .query_row(
            &format!(
                "SELECT {REMEMBERED_COLUMNS} FROM policies
                 WHERE policy_id = ?1 AND enabled = 1 AND source = 'remembered'"
            ),
            [policy_id],
            remembered_from_row,
        )
        .optional()?;
    let Some(p) = found else {
        return Ok(None);
    };
    tx.execute(
        "UPDATE policies SET enabled = 0 WHERE policy_id = ?1",
        [policy_id],
    )?;
    super::audit::append(
        tx,
        &crate::audit::AuditEntry {
            event: "policy_removed",
            tool_run_id: None,
            approval_id: p.source_approval_id.as_deref(),
            actor: by,
            data: serde_json::json!({ "policy_id": policy_id }),
        },
    )?;
    Ok(Some(p))
}

const REMEMBERED_COLUMNS: &str = "policy_id, name, tool_name, prompt_fingerprint, value, source, \
    source_approval_id, created_at, created_by, argv_json, cwd";

fn remembered_from_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<RememberedPolicy> {
    Ok(RememberedPolicy {
        policy_id: r.get(0)?,
        name: r.get(1)?,
        tool_name: r.get(2)?,
        prompt_fingerprint: r.get(3)?,
        value: r.get(4)?,
        source: r.get(5)?,
        source_approval_id: r.get(6)?,
        created_at: r.get(7)?,
        created_by: r.get(8)?,
        argv_json: r
            .get::<_, Option<String>>(9)?
            .and_then(|a| serde_json::from_str(&a).ok()),
        cwd: r.get(10)?,
    })
}

/// The newest enabled remembered decision for this prompt of this tool whose scope takes
/// in this command line and directory, if any.
pub(crate) fn find_remembered(
    conn: &Connection,
    tool: &str,
    prompt_fingerprint: &str,
    argv: &[String],
    cwd: &str,
) -> Result<Option<RememberedPolicy>> {
    let argv_json = serde_json::to_string(argv).unwrap_or_else(|_| "[]".into());
    Ok(conn
        .query_row(
            &format!(
                "SELECT {REMEMBERED_COLUMNS} FROM policies
                 WHERE enabled = 1 AND tool_name = ?1 AND prompt_fingerprint = ?2
                   AND (argv_json IS NULL OR argv_json = ?3) AND (cwd IS NULL OR cwd = ?4)
                 ORDER BY created_at DESC LIMIT 1"
            ),
            params![tool, prompt_fingerprint, argv_json, cwd],
            remembered_from_row,
        )
        .optional()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remembered_decisions_replace_older_ones_within_their_scope() {
        use crate::store::RememberScope;
        let tmp = tempfile::tempdir().unwrap();
        let mut conn =
            crate::db::open(&tmp.path().join("s.db"), crate::db::OpenMode::Create).unwrap();
        let argv: Vec<String> = vec!["rm".into(), "-i".into(), "a".into()];
        let find = |conn: &Connection, tool: &str, argv: &[String], cwd: &str| {
            find_remembered(conn, tool, "fp", argv, cwd).unwrap()
        };
        assert!(find(&conn, "rm", &argv, "/w").is_none());
        let here = RememberScope {
            argv: Some(argv.clone()),
            cwd: Some("/w".into()),
        };
        let remembered = |value: &'static str, id: &'static str, by: &'static str| Remembered {
            tool: "rm",
            prompt_fingerprint: "fp",
            scope: &here,
            value,
            approval_id: id,
            by,
        };
        crate::db::write(&mut conn, |tx| {
            remember(tx, &remembered("y", "AP-1", "alice"))
        })
        .unwrap();
        crate::db::write(&mut conn, |tx| {
            remember(tx, &remembered("n", "AP-2", "bob"))
        })
        .unwrap();
        let p = find(&conn, "rm", &argv, "/w").unwrap();
        assert_eq!(p.value, "n");
        assert_eq!(p.name, "remembered:AP-2");
        assert!(find(&conn, "cp", &argv, "/w").is_none());
        // Out of its scope: other arguments, another directory.
        assert!(find(&conn, "rm", &argv[..2], "/w").is_none());
        assert!(find(&conn, "rm", &argv, "/elsewhere").is_none());
        // Widened on purpose: any directory.
        let anywhere = RememberScope {
            argv: Some(argv.clone()),
            cwd: None,
        };
        crate::db::write(&mut conn, |tx| {
            remember(
                tx,
                &Remembered {
                    scope: &anywhere,
                    ..remembered("y", "AP-3", "carol")
                },
            )
        })
        .unwrap();
        assert_eq!(find(&conn, "rm", &argv, "/elsewhere").unwrap().value, "y");
    }
}
