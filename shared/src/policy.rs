//! Automatic decisions: policies from config (tool, prompt regex, argv match, structured
//! conditions → value) and decisions remembered with `monitor decide --remember` (the
//! `policies` table, keyed by tool and prompt fingerprint). Conditions are compared, never
//! evaluated as code. Each automatic decision is still an approval row, decided by
//! `policy:NAME`.

use crate::config::{CondField, CondOp, Condition, PolicyConfig};
use crate::db::Result;
use crate::{id, time};
use rusqlite::{Connection, OptionalExtension, Transaction, params};
use serde::Serialize;

/// What a policy looks at.
#[derive(Debug, Clone)]
pub struct PromptFacts<'a> {
    pub tool: &'a str,
    pub prompt_line: &'a str,
    pub question: &'a str,
    /// The command line (program first).
    pub argv: &'a [String],
    pub cwd: &'a str,
}

/// The config's policies whose conditions hold for a prompt, in config order: (name,
/// value), as a prompt request carries them to the store.
pub fn matching(config: &crate::config::Config, facts: &PromptFacts<'_>) -> Vec<(String, String)> {
    config
        .policies()
        .filter(|p| config_matches(p, facts))
        .map(|p| (p.name.clone(), p.value.clone()))
        .collect()
}

/// Whether every condition of a config policy holds.
pub fn config_matches(p: &PolicyConfig, facts: &PromptFacts<'_>) -> bool {
    if p.tool.as_deref().is_some_and(|t| t != facts.tool) {
        return false;
    }
    if p.prompt
        .as_ref()
        .is_some_and(|re| !re.regex.is_match(facts.prompt_line))
    {
        return false;
    }
    if p.argv
        .as_ref()
        .is_some_and(|re| !re.regex.is_match(&facts.argv.join(" ")))
    {
        return false;
    }
    p.when.iter().all(|c| condition_holds(c, facts))
}

fn condition_holds(c: &Condition, facts: &PromptFacts<'_>) -> bool {
    let test = |text: &str| compare(c, text);
    match c.field {
        CondField::Tool => test(facts.tool),
        CondField::Prompt => test(facts.prompt_line),
        CondField::Question => test(facts.question),
        CondField::Argv => test(&facts.argv.join(" ")),
        CondField::Arg => {
            // "Any argument matches", except `not_equals`: "no argument equals".
            if c.op == CondOp::NotEquals {
                facts.argv.iter().skip(1).all(|a| a != &c.value)
            } else {
                facts.argv.iter().skip(1).any(|a| test(a))
            }
        }
        CondField::Cwd => test(facts.cwd),
    }
}

fn compare(c: &Condition, text: &str) -> bool {
    match c.op {
        CondOp::Equals => text == c.value,
        CondOp::NotEquals => text != c.value,
        CondOp::Contains => text.contains(&c.value),
        CondOp::StartsWith => text.starts_with(&c.value),
        CondOp::EndsWith => text.ends_with(&c.value),
        CondOp::Matches => c.regex.as_ref().is_some_and(|re| re.regex.is_match(text)),
        CondOp::Glob => glob_match(&c.value, text),
    }
}

/// Shell-style glob over the whole text: `*` any run, `?` one character, anything else
/// literally.
pub fn glob_match(pattern: &str, text: &str) -> bool {
    let p: Vec<char> = pattern.chars().collect();
    let t: Vec<char> = text.chars().collect();
    let (mut pi, mut ti) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while ti < t.len() {
        if pi < p.len() && (p[pi] == '?' || p[pi] == t[ti]) {
            pi += 1;
            ti += 1;
        } else if pi < p.len() && p[pi] == '*' {
            star = Some((pi, ti));
            pi += 1;
        } else if let Some((sp, st)) = star {
            pi = sp + 1;
            ti = st + 1;
            star = Some((sp, st + 1));
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|&c| c == '*')
}

/// A decision remembered with `monitor decide --remember`.
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
pub struct RememberedPolicy {
    pub policy_id: String,
    pub name: String,
    pub tool_name: Option<String>,
    pub prompt_fingerprint: Option<String>,
    pub value: String,
    pub source: String,
    pub source_approval_id: Option<String>,
    pub created_at: String,
    pub created_by: String,
    /// Only this command line (`None`: any arguments; decisions remembered before schema
    /// v6 have no scope).
    pub argv_json: Option<Vec<String>>,
    /// Only in this directory (`None`: any directory).
    pub cwd: Option<String>,
}

/// What `remember` stores.
pub(crate) struct Remembered<'a> {
    pub tool: &'a str,
    pub prompt_fingerprint: &'a str,
    pub scope: &'a crate::store::RememberScope,
    pub value: &'a str,
    pub approval_id: &'a str,
    pub by: &'a str,
}

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
    crate::audit::append(
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
    crate::audit::append(
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
    use crate::config::ConfigFile;
    use std::path::Path;

    fn policies(text: &str) -> Vec<PolicyConfig> {
        ConfigFile::parse(Path::new("/x.toml"), text)
            .unwrap()
            .policies
    }

    fn facts<'a>(tool: &'a str, prompt: &'a str, argv: &'a [String]) -> PromptFacts<'a> {
        PromptFacts {
            tool,
            prompt_line: prompt,
            question: prompt,
            argv,
            cwd: "/work",
        }
    }

    #[test]
    fn globs() {
        assert!(glob_match("*.tmp'?", "rm: remove regular file 'a.tmp'?"));
        assert!(!glob_match("*.tmp'?", "rm: remove regular file 'a.txt'?"));
        assert!(glob_match("a?c", "abc"));
        assert!(glob_match("*", ""));
        assert!(!glob_match("a", ""));
        assert!(glob_match("**x*", "yyxyy"));
    }

    #[test]
    fn config_policies_match_on_every_condition() {
        let p = policies(
            r#"
[[policies]]
name = "tmp-files"
tool = "rm"
value = "y"
when = [{ field = "prompt", op = "glob", value = "*.tmp'?" }]

[[policies]]
name = "deploy-staging"
prompt = 'Deploy\?'
argv = '--env staging'
value = "yes"
when = [{ field = "cwd", op = "starts_with", value = "/work" }, { field = "arg", op = "not_equals", value = "--force" }]
"#,
        );
        let argv: Vec<String> = ["rm", "-i", "a.tmp"].map(String::from).to_vec();
        assert!(config_matches(
            &p[0],
            &facts("rm", "rm: remove regular file 'a.tmp'?", &argv)
        ));
        assert!(!config_matches(
            &p[0],
            &facts("rm", "rm: remove regular file 'a.txt'?", &argv)
        ));
        assert!(!config_matches(
            &p[0],
            &facts("cp", "rm: remove regular file 'a.tmp'?", &argv)
        ));
        let deploy: Vec<String> = ["deploy", "--env staging"].map(String::from).to_vec();
        assert!(config_matches(&p[1], &facts("deploy", "Deploy?", &deploy)));
        let forced: Vec<String> = ["deploy", "--env staging", "--force"]
            .map(String::from)
            .to_vec();
        assert!(!config_matches(&p[1], &facts("deploy", "Deploy?", &forced)));
    }

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
