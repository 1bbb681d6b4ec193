//! `monitor db init` and `monitor db grant`: the schema, its roles and their grants.

use super::*;

/// What `db init` did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InitReport {
    pub from_version: i64,
    pub to_version: i64,
}

/// Creates or migrates the schema, the three roles and their grants; safe to run twice and
/// from two hosts at once (one transaction under an advisory lock). Needs a login that may
/// create roles and owns (or will own) the schema.
pub fn init(url: &str) -> StoreResult<InitReport> {
    let mut client = connect(&target(url)?).map_err(server_error)?;
    let mut tx = client.transaction().map_err(server_error)?;
    let mut foreign_owner = None;
    let report = (|| -> Result<InitReport, postgres::Error> {
        tx.execute(
            "SELECT pg_advisory_xact_lock(hashtext('headless-run schema'))",
            &[],
        )?;
        // A schema `hr` someone else made first could be dropped or rewritten by them.
        let owner: Option<String> = tx
            .query_opt(
                "SELECT pg_get_userbyid(nspowner)::text FROM pg_namespace WHERE nspname = 'hr'",
                &[],
            )?
            .map(|r| r.get(0));
        foreign_owner = owner.filter(|o| {
            tx.query_one("SELECT current_user::text", &[])
                .map(|r| r.get::<_, String>(0) != *o)
                .unwrap_or(true)
        });
        if foreign_owner.is_some() {
            return Ok(InitReport {
                from_version: 0,
                to_version: 0,
            });
        }
        tx.batch_execute(
            "CREATE SCHEMA IF NOT EXISTS hr;
             CREATE TABLE IF NOT EXISTS hr.schema_version (version bigint NOT NULL);",
        )?;
        let from: i64 = tx
            .query_opt("SELECT version FROM hr.schema_version", &[])?
            .map(|r| r.get(0))
            .unwrap_or(0);
        for (i, sql) in MIGRATIONS.iter().enumerate().skip(from.max(0) as usize) {
            tx.batch_execute(sql)?;
            let v = i as i64 + 1;
            tx.execute("DELETE FROM hr.schema_version", &[])?;
            tx.execute("INSERT INTO hr.schema_version VALUES ($1)", &[&v])?;
        }
        // A newer schema keeps its own functions (the error below rolls back anyway).
        // Bodies are checked as they are called, not as each is created (as pg_dump
        // restores them): a function may call one defined in a later file.
        if from <= SCHEMA_VERSION {
            tx.batch_execute("SET LOCAL check_function_bodies = off")?;
            for sql in FUNCTIONS {
                tx.batch_execute(sql)?;
            }
            tx.batch_execute("SET LOCAL check_function_bodies = on")?;
        }
        tx.batch_execute(GRANTS)?;
        Ok(InitReport {
            from_version: from,
            to_version: from.max(MIGRATIONS.len() as i64),
        })
    })()
    .map_err(server_error)?;
    if let Some(owner) = foreign_owner {
        return Err(StoreError::Denied(format!(
            "schema hr belongs to {owner}, not to this login: run db init as its owner (a login that can change it could drop or rewrite the store's functions)"
        )));
    }
    if report.from_version > SCHEMA_VERSION {
        return Err(StoreError::Server(format!(
            "schema version {} is newer than this build understands ({SCHEMA_VERSION}); upgrade headless-run",
            report.from_version
        )));
    }
    tx.commit().map_err(server_error)?;
    Ok(report)
}

/// Roles and grants, applied on every `db init` (each statement may run again).
pub(super) const GRANTS: &str = r#"
DO $$
DECLARE
    r text;
BEGIN
    FOREACH r IN ARRAY ARRAY['headless_runner', 'headless_operator', 'headless_viewer'] LOOP
        IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = r) THEN
            BEGIN
                EXECUTE format('CREATE ROLE %I NOLOGIN', r);
            EXCEPTION WHEN duplicate_object OR unique_violation THEN
                NULL; -- another host created it first
            END;
        END IF;
    END LOOP;
END $$;
REVOKE ALL ON SCHEMA hr FROM PUBLIC;
REVOKE ALL ON ALL TABLES IN SCHEMA hr FROM PUBLIC, headless_runner, headless_operator, headless_viewer;
REVOKE ALL ON ALL FUNCTIONS IN SCHEMA hr FROM PUBLIC, headless_runner, headless_operator, headless_viewer;
GRANT USAGE ON SCHEMA hr TO headless_runner, headless_operator, headless_viewer;
GRANT SELECT ON hr.tool_runs, hr.approvals, hr.events, hr.policies, hr.schema_version
    TO headless_operator, headless_viewer;
GRANT EXECUTE ON FUNCTION hr.change_mark() TO headless_runner, headless_operator, headless_viewer;
GRANT EXECUTE ON FUNCTION hr.is_final(text), hr.run_doc(hr.tool_runs)
    TO headless_operator, headless_viewer;
GRANT EXECUTE ON FUNCTION hr.expire_due() TO headless_runner, headless_operator;
GRANT EXECUTE ON FUNCTION
    hr.run_start(jsonb, text, boolean, text),
    hr.run_deliver(jsonb, text, boolean),
    hr.run_touch(text, text, text, text, text),
    hr.run_touch(text, text, text, text, text, text),
    hr.run_pid(text, text, bigint),
    hr.run_status(text, text, text, text, integer, boolean, text, text, text),
    hr.run_exit(text, text, integer, text),
    hr.run_environment(text, text, jsonb),
    hr.runner_approvals(text, text, text),
    hr.runner_approval(text, text, text),
    hr.runner_remembered(text, text, text),
    hr.approval_ask(text, text, jsonb, text),
    hr.approval_by_policy(text, text, jsonb, text, text, text),
    hr.approval_consume(text, text, text, text, boolean),
    hr.approval_take_over(text, text, text, jsonb, text, boolean),
    hr.approval_supersede(text, text, text, jsonb, text, text, boolean),
    hr.approval_release(text, text, text, text),
    hr.approval_abandon(text, text, text)
    TO headless_runner;
-- v5: a run withdraws a question nothing waits for any more.
GRANT EXECUTE ON FUNCTION hr.approval_withdraw(text, text, text, text) TO headless_runner;
-- Resuming: operators, and a host's worker for its own login's runs (checked inside).
GRANT EXECUTE ON FUNCTION
    hr.fail_vanished(text, text, text),
    hr.claim(text, text),
    hr.take_over_claim(text, text, text),
    hr.set_resumed_run(text, text),
    hr.close_run(text, text, text, integer, boolean, text, text, text[]),
    hr.consume(text, text)
    TO headless_operator, headless_runner;
GRANT EXECUTE ON FUNCTION hr.worker_runs(text, text), hr.worker_approvals(text, text)
    TO headless_runner;
GRANT EXECUTE ON FUNCTION
    hr.decide(text, text, text, text, text, text, text),
    hr.decide(text, text, text, text, text),
    hr.cancel(text, text),
    hr.gc(text),
    hr.remember(text, text, text, jsonb, text, text, text),
    hr.forget(text)
    TO headless_operator;
-- Pipelines (v2): read by each login as it may; started and moved by their runner login,
-- cancelled by operators (both checked inside).
GRANT EXECUTE ON FUNCTION
    hr.pipeline_docs(text, boolean, integer),
    hr.execution_runs(text),
    hr.step_approvals(text, text)
    TO headless_runner, headless_operator, headless_viewer;
GRANT EXECUTE ON FUNCTION hr.pipeline_swap(jsonb) TO headless_runner, headless_operator;
GRANT EXECUTE ON FUNCTION hr.pipeline_decided(text, jsonb) TO headless_operator;
GRANT EXECUTE ON FUNCTION hr.pipeline_insert(jsonb), hr.pipeline_withdraw(text, text)
    TO headless_runner;
-- v3: logins that two OS users of a host share (each sees its own; operators all).
GRANT EXECUTE ON FUNCTION hr.shared_logins()
    TO headless_runner, headless_operator, headless_viewer;
"#;

/// A runner login that runs of two or more OS users of one host say they ran under: each
/// of them can have a worker with that login run the other's commands as itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SharedLogin {
    pub login: String,
    pub host: String,
    pub uids: Vec<i64>,
}

impl SharedLogin {
    /// The warning to give, naming the users where this host knows them.
    pub fn warning(&self) -> String {
        let users: Vec<String> = self
            .uids
            .iter()
            .map(|u| match u32::try_from(*u) {
                Ok(uid) => crate::proc::describe_uid(uid),
                Err(_) => format!("uid {u}"),
            })
            .collect();
        format!(
            "runner login {} is used by {} on host {}: give each OS user of each host a runner login of its own (monitor db grant LOGIN runner), or a worker of one runs the other's commands as itself",
            crate::sanitize::sanitize_line(&self.login),
            users.join(" and "),
            crate::sanitize::sanitize_line(if self.host.is_empty() {
                "?"
            } else {
                &self.host
            })
        )
    }
}

/// The runner logins two OS users of one host share, as far as the login of `url` may see
/// (its own runs; an operator, a viewer or the schema's owner: every login's). From the
/// uids the runs the store keeps said they ran as.
/// (In a transaction, as every read of a login that may come through a pooler.)
pub fn shared_logins(url: &str) -> StoreResult<Vec<SharedLogin>> {
    let rows: Vec<(String, String, Vec<i64>)> = PgStore::new(url).tx(|tx| {
        Ok(tx
            .query("SELECT login, host, uids FROM hr.shared_logins()", &[])?
            .iter()
            .map(|r| (r.get(0), r.get(1), r.get(2)))
            .collect())
    })?;
    Ok(rows
        .into_iter()
        .map(|(login, host, uids)| SharedLogin { login, host, uids })
        .collect())
}

/// Which of the three roles (`runner`, `operator`, `viewer`) the login of `url` has.
/// (In a transaction: a worker asks it through the pooler its login writes through, where
/// a statement outside one may be prepared on one server connection and run on another.)
pub fn roles_of(url: &str) -> StoreResult<Vec<&'static str>> {
    PgStore::new(url).tx(|tx| {
        let mut out = Vec::new();
        for (name, role) in ROLES {
            let member: bool = tx
                .query_one(
                    "SELECT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = $1)
                        AND pg_has_role(session_user, $1, 'MEMBER')",
                    &[&role],
                )?
                .get(0);
            if member {
                out.push(name);
            }
        }
        Ok(out)
    })
}

/// Makes `user` (an existing login) a member of one of the three roles. A login that
/// runs tools may not also decide: runner and operator are refused on one login.
pub fn grant(url: &str, user: &str, role: &str) -> StoreResult<String> {
    let Some((_, pg_role)) = ROLES.iter().find(|(name, _)| *name == role) else {
        return Err(StoreError::Server(format!(
            "no role `{role}` (runner, operator or viewer)"
        )));
    };
    let mut client = connect(&target(url)?).map_err(server_error)?;
    // One transaction under the schema's advisory lock (`init` takes it too): two grants of
    // one login at once (runner from one host, operator from another) cannot both pass the
    // check below, and through a pooler in transaction mode every statement runs on one
    // server connection.
    let mut tx = client.transaction().map_err(server_error)?;
    tx.execute(
        "SELECT pg_advisory_xact_lock(hashtext('headless-run schema'))",
        &[],
    )
    .map_err(server_error)?;
    let member_of = |tx: &mut postgres::Transaction<'_>, r: &str| -> StoreResult<bool> {
        tx.query_one("SELECT pg_has_role($1, $2, 'MEMBER')", &[&user, &r])
            .map(|row| row.get(0))
            .map_err(server_error)
    };
    let exists: bool = tx
        .query_one(
            "SELECT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = $1)",
            &[&user],
        )
        .map_err(server_error)?
        .get(0);
    if !exists {
        return Err(StoreError::Server(format!(
            "no login `{user}` on the server: create it first (CREATE ROLE \"{user}\" LOGIN PASSWORD …, or one for peer or certificate authentication)"
        )));
    }
    let clash = match *pg_role {
        "headless_runner" => Some("headless_operator"),
        "headless_operator" => Some("headless_runner"),
        _ => None,
    };
    if let Some(other) = clash
        && member_of(&mut tx, other)?
    {
        return Err(StoreError::Denied(format!(
            "`{user}` is already a member of {other}: a login that runs tools must not also decide for them; use two logins"
        )));
    }
    // Quoted as an identifier by the server, never pasted from the client.
    let quoted: String = tx
        .query_one("SELECT quote_ident($1)", &[&user])
        .map_err(server_error)?
        .get(0);
    tx.batch_execute(&format!("GRANT {pg_role} TO {quoted}"))
        .map_err(server_error)?;
    tx.commit().map_err(server_error)?;
    Ok(pg_role.to_string())
}
