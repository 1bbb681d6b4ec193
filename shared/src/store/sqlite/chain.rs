//! A decision stays with its run (issue 26), on the embedded store; the PostgreSQL store
//! does the same in `store/pg/functions/chain.sql`, and the runner API goes through either.
//!
//! * **Who a decision is offered to** (`rules::offered`): the run that asked it, while
//!   unused; otherwise only the **resume** of the run that holds it (`rules::holder`: the
//!   run that asked it until someone uses it, then the run of its chain that used it last).
//! * **Which run is a parked run's resume** is settled once, when a run starts
//!   ([`bind_at_start`]): the run `monitor worker` started for it (`resumed_from`), or else
//!   the first run of the same command (same tool, command line, directory, host, user) to
//!   start after its decision — a CI retry — while no worker has claimed it. The binding is
//!   recorded: the new run's `resumed_from` names the parked run, and the parked run's
//!   decisions name the new run in `resumed_run_id`. Every later run of the command is a
//!   separate run: it is asked anew.
//! * **Kept while the chain is live**: a resume that uses a decision keeps it for its own
//!   resume (`kept_for`), answer and free text included, so when it parks at a later prompt
//!   the next resume gets every earlier answer again — a chain of N prompts takes N
//!   approvals.
//! * **Spent, with a reason** (`consumed_reason`): what a resume was offered and did not use
//!   when it parks at another prompt or ends ([`parked`], [`ended`]) — the run it resumed
//!   then fails, naming it; and everything a run holds when its chain ends (it completes,
//!   fails or is cancelled, and no resume of it is running). A spent decision answers
//!   nothing, and its free text is gone from the row. A resume that failed to start (exit
//!   125–127, nothing used) gives its binding back instead: the next attempt is the resume.

use crate::approvals::Approval;
use crate::db::Result;
use crate::event::LogEvent;
use crate::rules::{self, ResumeEnd};
use crate::runs::{Guard, StatusChange, ToolRun};
use crate::status::RunStatus;
use rusqlite::{Connection, OptionalExtension, Transaction, params};

/// The request fingerprint of a run's command as its shim computed it for its asker (the
/// runner API keeps each token's apart: `store::http::runner_fingerprint`).
pub(crate) fn request_of(run: &ToolRun) -> String {
    let plain = crate::fingerprint::request(
        &run.tool_name,
        &run.argv_json,
        run.cwd.as_deref().unwrap_or(""),
    );
    match run.runner() {
        Some(token) => crate::fingerprint::runner(token, &plain),
        None => plain,
    }
}

/// Binds `row` (a new run's first row as the store stamped it, before it is inserted) as
/// the resume of a parked run of the same command whose decision is made, if there is one
/// it may resume (`rules::may_bind`) and nobody resumes yet: sets the row's `resumed_from`
/// and names it in that run's decisions. Returns the run it resumes.
pub(crate) fn bind_at_start(tx: &Transaction<'_>, row: &mut ToolRun) -> Result<Option<String>> {
    if !rules::binds_at_start(row) {
        return Ok(None);
    }
    for o in super::approvals::fresh_decisions_of_command(tx, &request_of(row))? {
        let Some(h) = super::runs::get(tx, &o.tool_run_id)? else {
            continue;
        };
        if !rules::may_bind(row, &h, &o) || is_resumed(tx, &h.tool_run_id)? {
            continue;
        }
        tx.execute(
            &format!(
                "UPDATE approvals SET resumed_run_id = ?2
                 WHERE tool_run_id = ?1 AND status != 'pending' AND consumed_at IS NULL
                   AND {}",
                super::approvals::NOT_CLOSED
            ),
            params![h.tool_run_id, row.tool_run_id],
        )?;
        row.resumed_from = Some(h.tool_run_id.clone());
        return Ok(Some(h.tool_run_id));
    }
    Ok(None)
}

/// Whether parked run `h` has a resume already: one of its unused decisions names it.
fn is_resumed(conn: &Connection, h: &str) -> Result<bool> {
    Ok(conn.query_row(
        "SELECT EXISTS (SELECT 1 FROM approvals WHERE tool_run_id = ?1 AND status != 'pending'
             AND consumed_at IS NULL AND resumed_run_id IS NOT NULL)",
        [h],
        |r| r.get(0),
    )?)
}

/// The run `run` was bound to resume ([`bind_at_start`]): its `resumed_from`, once that
/// run's decisions name it.
pub(crate) fn bound_to(conn: &Connection, run: &ToolRun) -> Result<Option<String>> {
    let Some(h) = run.resumed_from.as_deref() else {
        return Ok(None);
    };
    let bound: bool = conn.query_row(
        "SELECT EXISTS (SELECT 1 FROM approvals WHERE tool_run_id = ?1 AND resumed_run_id = ?2)",
        params![h, run.tool_run_id],
        |r| r.get(0),
    )?;
    Ok(bound.then(|| h.to_owned()))
}

/// The run `run_id` resumes, if it is bound to one (its row read first).
pub(crate) fn resumes(conn: &Connection, run_id: &str) -> Result<Option<String>> {
    match super::runs::get(conn, run_id)? {
        Some(run) => bound_to(conn, &run),
        None => Ok(None),
    }
}

/// The live decisions of this command for this prompt offered to run `run` (which resumes
/// `resumes`, if anything), in the order they were asked: a chain's earlier prompts first.
pub(crate) fn offered(
    conn: &Connection,
    run: &str,
    resumes: Option<&str>,
    request_fingerprint: &str,
    prompt_fingerprint: &str,
) -> Result<Vec<Approval>> {
    Ok(
        super::approvals::live_answers(conn, request_fingerprint, prompt_fingerprint)?
            .into_iter()
            .filter(|a| rules::offered(a, run, resumes))
            .collect(),
    )
}

/// Run `by` uses decision `a`, which is offered to it: its first use consumes it, a kept
/// one moves on; either way it is kept for `by`'s resume now. False when it was taken
/// meanwhile.
pub(crate) fn take(tx: &Transaction<'_>, a: &Approval, by: &str, actor: &str) -> Result<bool> {
    let took = match a.consumed_at {
        None => super::approvals::consume(tx, &a.approval_id, by, actor)?,
        Some(_) => super::approvals::take_kept(tx, &a.approval_id, by, actor)?,
    };
    if took && a.tool_run_id != by {
        tx.execute(
            "UPDATE approvals SET resumed_run_id = COALESCE(resumed_run_id, ?2)
             WHERE approval_id = ?1",
            params![a.approval_id, by],
        )?;
    }
    Ok(took)
}

/// The decision of run `h` its resume `by` was bound on (its own, the newest).
pub(crate) fn resumed_on(conn: &Connection, h: &str, by: &str) -> Result<Option<Approval>> {
    let id: Option<String> = conn
        .query_row(
            "SELECT approval_id FROM approvals
             WHERE tool_run_id = ?1 AND resumed_run_id = ?2 AND status != 'pending'
             ORDER BY decided_at DESC, approval_id DESC LIMIT 1",
            params![h, by],
            |r| r.get(0),
        )
        .optional()?;
    match id {
        Some(id) => super::approvals::get(conn, &id),
        None => Ok(None),
    }
}

/// Spends every live decision held for run `run`'s resume (`super::approvals::held_for`).
pub(crate) fn spend_held(tx: &Transaction<'_>, run: &str, why: &str, actor: &str) -> Result<usize> {
    let mut n = 0;
    for a in super::approvals::held_for(tx, run)? {
        n += usize::from(super::approvals::spend(tx, &a.approval_id, why, actor)?);
    }
    Ok(n)
}

/// Run `run_id` parked at a prompt (exit 90): what it used stays kept for its resume; what
/// the run it resumes held for it and it did not use is spent, and that run, if still
/// waiting (it used nothing), fails naming it. The events of what it closed.
pub(crate) fn parked(tx: &Transaction<'_>, run_id: &str, actor: &str) -> Result<Vec<LogEvent>> {
    let mut events = Vec::new();
    let Some(h) = resumes(tx, run_id)? else {
        return Ok(events);
    };
    spend_held(
        tx,
        &h,
        &format!("{run_id}, which resumed {h}, stopped at another prompt without using it"),
        actor,
    )?;
    close_unused(tx, &h, run_id, ResumeEnd::Parked, actor, &mut events)?;
    Ok(events)
}

/// Run `run_id` has just ended (a final status, by whoever): its chain ends with it, unless
/// a resume of it is running (what it holds is that resume's then). What the run it
/// resumed held for it and it did not use is spent, and that run, if still waiting, fails
/// naming it — except after a failure to start (exit 125–127 with nothing used): then the
/// binding is given back, for the next attempt. Events of the runs it closed go to
/// `events`.
pub(crate) fn ended(
    tx: &Transaction<'_>,
    run_id: &str,
    actor: &str,
    events: &mut Vec<LogEvent>,
) -> Result<()> {
    let Some(run) = super::runs::get(tx, run_id)? else {
        return Ok(());
    };
    let h = bound_to(tx, &run)?;
    if !has_running_resume(tx, run_id)? {
        let code = run
            .exit_code
            .map(|c| format!(", exit {c}"))
            .unwrap_or_default();
        spend_held(
            tx,
            run_id,
            &format!("the chain ended: {run_id} {}{code}", run.status),
            actor,
        )?;
    }
    let Some(h) = h else {
        return Ok(());
    };
    let waiting = super::runs::get(tx, &h)?.is_some_and(|r| r.status == RunStatus::WaitingApproval);
    if waiting
        && run
            .exit_code
            .is_some_and(|c| rules::FAILED_START.contains(&c))
    {
        tx.execute(
            "UPDATE approvals SET resumed_run_id = NULL WHERE tool_run_id = ?1 AND resumed_run_id = ?2",
            params![h, run_id],
        )?;
        return Ok(());
    }
    spend_held(
        tx,
        &h,
        &format!(
            "{run_id}, which resumed {h}, ended ({}) without using it",
            run.status
        ),
        actor,
    )?;
    if waiting {
        let end = match run.exit_code {
            Some(code) => ResumeEnd::Exited(code),
            None => ResumeEnd::Ended(run.status),
        };
        close_unused(tx, &h, run_id, end, actor, events)?;
    }
    Ok(())
}

/// Whether a run bound as the resume of `h` has not ended.
fn has_running_resume(conn: &Connection, h: &str) -> Result<bool> {
    Ok(conn.query_row(
        &format!(
            "SELECT EXISTS (SELECT 1 FROM tool_runs x WHERE x.resumed_from = ?1
                 AND x.status NOT IN ({})
                 AND EXISTS (SELECT 1 FROM approvals o WHERE o.tool_run_id = ?1
                             AND o.resumed_run_id = x.tool_run_id))",
            crate::status::sql_list(&RunStatus::FINAL)
        ),
        [h],
        |r| r.get(0),
    )?)
}

/// Fails run `h`, still waiting, whose resume `by` ended (`end`) without using its
/// decision: the reason names the resume, as `monitor worker` says it.
fn close_unused(
    tx: &Transaction<'_>,
    h: &str,
    by: &str,
    end: ResumeEnd,
    actor: &str,
    events: &mut Vec<LogEvent>,
) -> Result<()> {
    let Some(o) = resumed_on(tx, h, by)? else {
        return Ok(());
    };
    let change = StatusChange {
        exit_code: match end {
            ResumeEnd::Parked => Some(i32::from(crate::exit::shim::APPROVAL_PENDING)),
            ResumeEnd::Exited(code) => Some(code),
            ResumeEnd::Ended(_) => None,
        },
        ..StatusChange::to(
            RunStatus::Failed,
            Some(rules::unused_resume_reason(
                &o.approval_id,
                o.status,
                by,
                end,
            )),
        )
    };
    let prev = super::runs::change_status_with(
        tx,
        h,
        &change,
        actor,
        Guard::From(&[RunStatus::WaitingApproval]),
        events,
    )?;
    if let (Some(prev), Some(run)) = (prev, super::runs::get(tx, h)?) {
        events.push(run.status_event(Some(prev), &change));
    }
    Ok(())
}

/// Gives decision `approval_id` back to run `by`, which took it but could not type it (the
/// prompt went away first): offered to `by` again when the prompt comes back.
pub(crate) fn give_back(
    tx: &Transaction<'_>,
    by: &str,
    approval_id: &str,
    why: &str,
    actor: &str,
) -> Result<bool> {
    let resumed = resumes(tx, by)?;
    super::approvals::give_back(tx, approval_id, by, resumed.as_deref(), why, actor)
}
