//! The embedded store's side of the answer protocol (`crate::answering`, which says it in
//! full): the facts read and the plan carried out in one SQLite write transaction — a
//! decision offered to this run used (or its rejection ending the run), a policy's answer
//! recorded, a pending question taken over or superseded, or a new one asked.
//!
//! Also here: cooperative `approval_needed` requests, and the check that makes a caller's
//! bare `AUTO_APPROVAL` worthless.

use super::chain;
use crate::answering::{self, Ask};
use crate::approvals::Approval;
use crate::config::OnExpire;
use crate::db;
use crate::event::{CooperativeRequest, EventBody, LogEvent};
use crate::rules::{self, HostFacts};
use crate::runs::{Guard, StatusChange};
use crate::status::RunStatus;
use crate::store::asking::{approval_for, auto_approval_verdict, cooperative_approval};
use crate::store::{Asker, Cooperative, Effects, PromptRequest, PromptResolution};
use crate::{id, time};
use rusqlite::{Connection, Transaction};
use std::time::Duration;

/// Resolves a prompt (steps 1–4 above, `answering::plan`) in one write transaction.
pub fn answer_or_ask(
    conn: &mut Connection,
    who: &Asker,
    req: &PromptRequest,
    host: &dyn HostFacts,
) -> db::Result<(PromptResolution, Effects)> {
    db::write(conn, |tx| {
        let mut fx = Effects::default();
        // Overdue approvals are expired first, so a re-run after the TTL finds the expiry
        // (rejected, or the default answer) rather than a pending approval nobody decides.
        for a in super::approvals::expire_due(tx)? {
            fx.events.push(a.status_event());
        }
        // The facts: the decisions offered to this run (`store::sqlite::chain`: its own, or those
        // the run it resumes holds for it), the policies, and a pending approval of the
        // same question asked by another run, with that run.
        let resumes = chain::resumes(tx, &who.tool_run_id)?;
        let offered = chain::offered(
            tx,
            &who.tool_run_id,
            resumes.as_deref(),
            &who.request_fingerprint,
            &req.prompt_fingerprint,
        )?;
        let mut policies = req.policies.clone();
        if let Some(p) = super::policy::find_remembered(
            tx,
            &who.tool,
            &req.prompt_fingerprint,
            &who.argv,
            &who.cwd,
        )? {
            policies.push((p.name, p.value));
        }
        let pending = match super::approvals::find_pending(
            tx,
            &who.request_fingerprint,
            &req.prompt_fingerprint,
        )?
        .filter(|old| old.tool_run_id != who.tool_run_id)
        {
            Some(old) => {
                let owner = super::runs::get(tx, &old.tool_run_id)?;
                Some((old, owner))
            }
            None => None,
        };
        let plan = answering::plan(
            answering::Facts {
                prompt: &req.prompt,
                tool_digest: who.tool_digest.as_deref(),
                offered,
                policies,
                pending,
                host,
            },
            approval_for(who, req),
        );
        // 1. A decision offered to this run.
        for a in plan.answers {
            if !chain::take(tx, &a, &who.tool_run_id, &who.actor)? {
                continue;
            }
            // The value as decided (the row keeps free text only while the chain is live).
            let value = a.chosen_value.clone().unwrap_or_default();
            // The first answer from the chain it resumes: that run's part is done.
            if let Some(h) = &resumes
                && rules::holder(&a) == Some(h.as_str())
            {
                close_resumed(tx, who, h, &mut fx)?;
            }
            let a = super::approvals::get(tx, &a.approval_id)?.unwrap_or(a);
            return Ok((PromptResolution::decided(a, value), fx));
        }
        // 2. A policy.
        fx.warnings.extend(plan.warnings);
        if let Some(by) = plan.policy {
            let mut fresh = by.approval;
            let channel = format!("policy:{}", by.name);
            let now = time::now_rfc3339();
            fresh.status = by.decision.status;
            fresh.chosen_value = by.decision.chosen_value;
            fresh.decided_at = Some(now.clone());
            fresh.decided_by = Some(channel.clone());
            fresh.decision_channel = Some(channel.clone());
            fresh.consumed_at = Some(now);
            fresh.consumed_by = Some(who.tool_run_id.clone());
            super::approvals::insert(tx, &fresh, &channel)?;
            fx.events.push(fresh.needed_event());
            fx.events.push(fresh.status_event());
            let value = fresh.chosen_value.clone().unwrap_or_default();
            return Ok((PromptResolution::decided(fresh, value), fx));
        }
        // 3. A takeover; 4. a new question.
        let (approval, taken_over) = match plan.ask {
            Ask::TakeOver { old, .. } => {
                super::approvals::move_to_run(tx, &old.approval_id, &who.tool_run_id)?;
                let change = StatusChange::to(
                    RunStatus::Cancelled,
                    Some(format!(
                        "superseded by a retry, {}, which now waits for {}",
                        who.tool_run_id, old.approval_id
                    )),
                );
                close_other_run(tx, &old, &change, &who.actor, &mut fx)?;
                let moved = super::approvals::get(tx, &old.approval_id)?.unwrap_or(old);
                (moved, true)
            }
            Ask::Supersede { old, fresh } => {
                super::approvals::insert(tx, &fresh, &who.actor)?;
                fx.events.push(fresh.needed_event());
                if let Some(ended) =
                    super::approvals::supersede(tx, &old, &fresh.approval_id, &who.actor)?
                {
                    fx.events.push(ended.status_event());
                }
                let change = StatusChange::to(
                    RunStatus::Cancelled,
                    Some(format!(
                        "superseded by a retry, {}, whose screen changed: it waits for {} instead of {}",
                        who.tool_run_id, fresh.approval_id, old.approval_id
                    )),
                );
                close_other_run(tx, &old, &change, &who.actor, &mut fx)?;
                (fresh, false)
            }
            Ask::New { fresh } => {
                super::approvals::insert(tx, &fresh, &who.actor)?;
                fx.events.push(fresh.needed_event());
                (fresh, false)
            }
        };
        wait_for(tx, who, &approval, &mut fx)?;
        Ok((
            PromptResolution::Pending {
                approval: Box::new(approval),
                taken_over,
            },
            fx,
        ))
    })
}

/// This run → `waiting_approval`.
fn wait_for(tx: &Transaction<'_>, who: &Asker, a: &Approval, fx: &mut Effects) -> db::Result<()> {
    let change = StatusChange::to(
        RunStatus::WaitingApproval,
        Some(format!("waiting for approval {}", a.approval_id)),
    );
    if let Some(prev) =
        super::runs::change_status(tx, &who.tool_run_id, &change, &who.actor, Guard::NotFinal)?
    {
        fx.events.push(LogEvent::about_run(
            EventBody::status_change(Some(prev), &change),
            &who.tool,
            &who.tool_run_id,
            Some(&who.execution_id),
        ));
        fx.status = Some(RunStatus::WaitingApproval);
    }
    Ok(())
}

/// The run the asking run resumes (`h`, parked) is done once the resume takes up its
/// chain: closed by the decision it was resumed on.
fn close_resumed(tx: &Transaction<'_>, who: &Asker, h: &str, fx: &mut Effects) -> db::Result<()> {
    match chain::resumed_on(tx, h, &who.tool_run_id)? {
        Some(o) => close_waiting_run(tx, who, &o, fx),
        None => Ok(()),
    }
}

/// The run that asked `a` (and exited 90) is done once a re-run takes up its decision.
fn close_waiting_run(
    tx: &Transaction<'_>,
    who: &Asker,
    a: &Approval,
    fx: &mut Effects,
) -> db::Result<()> {
    if a.tool_run_id == who.tool_run_id {
        return Ok(());
    }
    let by = a.decided_by.as_deref().unwrap_or("someone");
    let change = if a.answers() {
        StatusChange::to(
            RunStatus::Completed,
            Some(format!(
                "approval {} {} by {by}; resumed as {}",
                a.approval_id, a.status, who.tool_run_id
            )),
        )
    } else {
        StatusChange::to(
            RunStatus::Failed,
            Some(format!("approval {} {} by {by}", a.approval_id, a.status)),
        )
    };
    close_other_run(tx, a, &change, &who.actor, fx)
}

/// Moves the run that asked `a` (another run than the asking one) out of
/// `waiting_approval`, if it is still there, and logs it.
fn close_other_run(
    tx: &Transaction<'_>,
    a: &Approval,
    change: &StatusChange,
    actor: &str,
    fx: &mut Effects,
) -> db::Result<()> {
    if let Some(prev) = super::runs::change_status_with(
        tx,
        &a.tool_run_id,
        change,
        actor,
        Guard::From(&[RunStatus::WaitingApproval]),
        &mut fx.events,
    )? {
        fx.events.push(LogEvent::about_run(
            EventBody::status_change(Some(prev), change),
            &a.tool_name,
            &a.tool_run_id,
            a.execution_id.as_deref(),
        ));
    }
    Ok(())
}

/// Records a cooperative tool's `approval_needed` line.
pub fn cooperative(
    conn: &mut Connection,
    who: &Asker,
    req: &CooperativeRequest,
    ttl: Option<Duration>,
    on_expire: OnExpire,
) -> db::Result<(Cooperative, Effects)> {
    let (mut a, prompt_fp) = cooperative_approval(who, req, ttl, on_expire);
    db::write(conn, |tx| {
        let mut fx = Effects::default();
        let decided = super::approvals::find_used_by(
            tx,
            &who.request_fingerprint,
            &prompt_fp,
            &who.tool_run_id,
        )?;
        if decided.is_some() {
            return Ok((Cooperative::AlreadyDecided, fx));
        }
        // The tool may name its approval, with an id of the usual shape (any case); a name
        // of another shape, or one already taken, is replaced.
        if let Some(wanted) = req
            .approval_id
            .as_deref()
            .map(str::to_ascii_uppercase)
            .filter(|w| id::has_shape(w, id::APPROVAL_PREFIX))
            && super::approvals::get(tx, &wanted)?.is_none()
        {
            a.approval_id = wanted;
        }
        super::approvals::insert(tx, &a, &who.actor)?;
        fx.events.push(a.needed_event());
        wait_for(tx, who, &a, &mut fx)?;
        Ok((Cooperative::Pending(Box::new(a)), fx))
    })
}

/// Whether a caller's `AUTO_APPROVAL` is a real decision for this run: a single-use token
/// for one question. The approval `HEADLESS_RUN_APPROVAL_ID` names must be a cooperative
/// tool's request (a prompt's decision is typed at its prompt, never handed to the tool),
/// decided with exactly this value, asked by this command, claimed by `monitor worker` for
/// resuming the run that asked (`resumed_from`), and not used yet; it is consumed here, in
/// the same transaction.
pub fn validate_auto_approval(
    conn: &mut Connection,
    who: &Asker,
    approval_id: &str,
    value: &str,
    resumed_from: Option<&str>,
) -> db::Result<(Result<Approval, String>, Effects)> {
    db::write(conn, |tx| {
        let mut fx = Effects::default();
        let found = super::approvals::get(tx, approval_id)?;
        if let Err(why) =
            auto_approval_verdict(found.as_ref(), who, approval_id, value, resumed_from)
        {
            return Ok((Err(why), fx));
        }
        let Some(a) = found else {
            return Ok((Err(format!("no approval {approval_id}")), fx));
        };
        // Only for the run it is offered to: the resume `monitor worker` started for it.
        let resumes = chain::resumes(tx, &who.tool_run_id)?;
        if !rules::offered(&a, &who.tool_run_id, resumes.as_deref())
            || !chain::take(tx, &a, &who.tool_run_id, &who.actor)?
        {
            return Ok((Err(format!("approval {approval_id} was already used")), fx));
        }
        close_waiting_run(tx, who, &a, &mut fx)?;
        Ok((Ok(a), fx))
    })
}
