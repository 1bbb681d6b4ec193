//! From a recognised prompt to an answer or an approval, each in one SQLite write
//! transaction:
//!
//! 1. a decision offered to this run (`crate::chain`: its own, or one the parked run it
//!    resumes holds for it) for this prompt and screen is used and answers it — or,
//!    rejected, ends the run (exit 91);
//! 2. a config policy or a remembered decision answers it, recorded as an approval decided
//!    by `policy:NAME`;
//! 3. a pending approval for the same prompt of the same command (a retry asking again) is
//!    taken over by this run, when [`rules::may_take_over`] allows;
//! 4. otherwise a new pending approval is created and the run waits.
//!
//! Also here: cooperative `approval_needed` requests, and the check that makes a caller's
//! bare `AUTO_APPROVAL` worthless.

use super::{Asker, Cooperative, Effects, PromptRequest, PromptResolution};
use crate::approvals::{self, Approval, PromptKind, ValueDecision};
use crate::config::OnExpire;
use crate::db;
use crate::event::{CooperativeRequest, EventBody, LogEvent};
use crate::policy;
use crate::prompt::Prompt;
use crate::rules::{self, HostFacts};
use crate::runs::{self, Guard, StatusChange};
use crate::sanitize::{sanitize_line, sanitize_text};
use crate::status::{ApprovalStatus, RunStatus};
use crate::{chain, fingerprint, id, time};
use rusqlite::{Connection, Transaction};
use std::time::{Duration, SystemTime};

/// The approval row a prompt becomes. Its text is cleaned here once more, whatever made
/// the prompt (screen, rule or cooperative line): no escape, control, bidi or invisible
/// character is stored. Option values are the prompt's own (a decision is matched
/// against them to find the keys); every source already cleans them.
pub fn approval_for(who: &Asker, req: &PromptRequest) -> Approval {
    let p = &req.prompt;
    let now = SystemTime::now();
    Approval {
        approval_id: id::new_approval_id(),
        tool_run_id: who.tool_run_id.clone(),
        tool_name: who.tool.clone(),
        execution_id: Some(who.execution_id.clone()),
        question: sanitize_text(&p.question),
        context: Some(sanitize_text(&p.context)),
        // As stored: the keys to type stay with the prompt, never in the approval.
        options_json: p
            .options
            .iter()
            .map(|o| crate::event::ApprovalOption {
                value: o.value.clone(),
                label: sanitize_line(&o.label),
                keys: None,
            })
            .collect(),
        default_value: p.default.clone(),
        allows_text: p.allows_text,
        status: ApprovalStatus::Pending,
        chosen_value: None,
        created_at: time::to_rfc3339(now),
        decided_at: None,
        expires_at: req.ttl.map(|ttl| time::to_rfc3339(now + ttl)),
        decided_by: None,
        decision_channel: None,
        comment: None,
        request_fingerprint: Some(who.request_fingerprint.clone()),
        prompt_fingerprint: Some(req.prompt_fingerprint.clone()),
        consumed_at: None,
        consumed_by: None,
        prompt_kind: Some(p.kind),
        prompt_line: Some(sanitize_line(&p.prompt_line)),
        rule_name: Some(p.rule.clone()),
        expire_action: match req.on_expire {
            OnExpire::Reject => "reject".into(),
            OnExpire::Default => "default".into(),
        },
        claimed_by: None,
        claimed_at: None,
        resumed_run_id: None,
        screen_digest: Some(fingerprint::seen(p)),
        tool_digest: who.tool_digest.clone(),
        superseded_by: None,
        supersedes: None,
        kept_for: None,
        consumed_reason: None,
    }
}

/// The context of a new approval for a screen that changed since `old` was decided on the
/// same prompt: what changed first (`+` lines now shown, `-` lines gone), then the screen.
pub(super) fn changed_context(old: &Approval, fresh: &Approval, what: &str) -> String {
    let now = fresh.context.as_deref().unwrap_or("");
    let old_seen = fingerprint::seen_text(old.context.as_deref().unwrap_or(""), &old.question);
    let new_seen = fingerprint::seen_text(now, &fresh.question);
    let before: Vec<&str> = old_seen.lines().collect();
    let after: Vec<&str> = new_seen.lines().collect();
    let mut out = format!(
        "The {what} changed since {} was decided ({} `{}` by {}):\n",
        old.approval_id,
        old.status,
        old.chosen_value.as_deref().unwrap_or(""),
        old.decided_by.as_deref().unwrap_or("?")
    );
    for line in after
        .iter()
        .filter(|l| !l.trim().is_empty() && !before.contains(l))
    {
        out.push_str(&format!("+ {line}\n"));
    }
    for line in before
        .iter()
        .filter(|l| !l.trim().is_empty() && !after.contains(l))
    {
        out.push_str(&format!("- {line}\n"));
    }
    out.push('\n');
    out.push_str(now);
    out
}

/// Resolves a prompt (steps 1–4 above) in one write transaction.
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
        for a in approvals::expire_due(tx)? {
            fx.events.push(a.status_event());
        }
        // 1. A decision offered to this run (`crate::chain`): its own, or one the run it
        //    resumes holds for it — never one of a separate run of the command. And a yes
        //    only for the screen (and tool) it was given on: the same prompt around another
        //    screen (`Plan: 3 to add` where `2 to add` was approved) is a new question.
        let screen = fingerprint::seen(&req.prompt);
        let resumes = chain::resumes(tx, &who.tool_run_id)?;
        let offered = chain::offered(
            tx,
            &who.tool_run_id,
            resumes.as_deref(),
            &who.request_fingerprint,
            &req.prompt_fingerprint,
        )?;
        let mut changed_since: Option<(Approval, &str)> = None;
        let mut answer = None;
        for a in offered {
            if !rules::tool_fits(&a, who.tool_digest.as_deref()) {
                changed_since.get_or_insert((a, "tool (its executable or script)"));
            } else if !rules::screen_fits(&a, &screen) {
                changed_since.get_or_insert((a, "screen"));
            } else if rules::decision_fits(&a, &req.prompt) {
                answer = Some(a);
                break;
            }
        }
        if let Some(a) = answer
            && chain::take(tx, &a, &who.tool_run_id, &who.actor)?
        {
            // The value as decided (the row keeps free text only while the chain is live).
            let value = a.chosen_value.clone().unwrap_or_default();
            // The first answer from the chain it resumes: that run's part is done.
            if let Some(h) = &resumes
                && rules::holder(&a) == Some(h.as_str())
            {
                close_resumed(tx, who, h, &mut fx)?;
            }
            let a = approvals::get(tx, &a.approval_id)?.unwrap_or(a);
            return Ok(if a.answers() {
                (
                    PromptResolution::Answer {
                        approval: Box::new(a),
                        value,
                    },
                    fx,
                )
            } else {
                (
                    PromptResolution::Rejected {
                        approval: Box::new(a),
                    },
                    fx,
                )
            });
        }
        // 2. A policy: the config's, in order, then a remembered decision.
        let mut fresh = approval_for(who, req);
        let mut candidates = req.policies.clone();
        if let Some(p) =
            policy::find_remembered(tx, &who.tool, &req.prompt_fingerprint, &who.argv, &who.cwd)?
        {
            candidates.push((p.name, p.value));
        }
        for (name, value) in candidates {
            let ValueDecision {
                status,
                chosen_value,
            } = match policy_decision(&fresh, req, &name, &value) {
                Ok(d) => d,
                Err(warning) => {
                    fx.warnings.push(warning);
                    continue;
                }
            };
            let channel = format!("policy:{name}");
            let now = time::now_rfc3339();
            fresh.status = status;
            fresh.chosen_value = chosen_value.clone();
            fresh.decided_at = Some(now.clone());
            fresh.decided_by = Some(channel.clone());
            fresh.decision_channel = Some(channel.clone());
            fresh.consumed_at = Some(now);
            fresh.consumed_by = Some(who.tool_run_id.clone());
            approvals::insert(tx, &fresh, &channel)?;
            fx.events.push(fresh.needed_event());
            fx.events.push(fresh.status_event());
            let approval = Box::new(fresh);
            return Ok((
                match (status, chosen_value) {
                    (ApprovalStatus::Approved, Some(value)) => {
                        PromptResolution::Answer { approval, value }
                    }
                    _ => PromptResolution::Rejected { approval },
                },
                fx,
            ));
        }
        // 3. A retry asking the same question takes the pending approval over — only from
        //    a run nobody supervises any more (parked by exit 90, or its shim gone): a
        //    twin still waiting for it in wait mode keeps it, and this run asks anew.
        let pending =
            approvals::find_pending(tx, &who.request_fingerprint, &req.prompt_fingerprint)?
                .filter(|old| old.tool_run_id != who.tool_run_id);
        let pending = match pending {
            Some(old) => {
                let owner = runs::get(tx, &old.tool_run_id)?;
                rules::may_take_over(owner.as_ref(), host).then_some(old)
            }
            None => None,
        };
        let (approval, taken_over) = match pending {
            // The same screen (and tool): the retry waits for the very approval the
            // operator is looking at, unchanged.
            Some(old) if takeover_keeps(&old, &fresh) => {
                approvals::move_to_run(tx, &old.approval_id, &who.tool_run_id)?;
                let change = StatusChange::to(
                    RunStatus::Cancelled,
                    Some(format!(
                        "superseded by a retry, {}, which now waits for {}",
                        who.tool_run_id, old.approval_id
                    )),
                );
                close_other_run(tx, &old, &change, &who.actor, &mut fx)?;
                let moved = approvals::get(tx, &old.approval_id)?.unwrap_or(old);
                (moved, true)
            }
            // Another screen: an approval never changes under the operator (DESIGN §14).
            // The old one ends superseded, pointing to a new one that says what changed.
            Some(old) => {
                let what = if old.tool_digest == fresh.tool_digest {
                    "screen"
                } else {
                    "tool (its executable or script)"
                };
                fresh.context = Some(changed_context(&old, &fresh, what));
                fresh.supersedes = Some(old.approval_id.clone());
                approvals::insert(tx, &fresh, &who.actor)?;
                fx.events.push(fresh.needed_event());
                if let Some(ended) = approvals::supersede(tx, &old, &fresh.approval_id, &who.actor)?
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
            // 4. A new question (saying what changed, if a decision was made on another
            //    screen of it).
            None => {
                if let Some((old, what)) = &changed_since {
                    fresh.context = Some(changed_context(old, &fresh, what));
                }
                approvals::insert(tx, &fresh, &who.actor)?;
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

/// Whether a retry may wait for pending approval `old` as it is: it asks on the same screen
/// (`fresh`'s digest) with the same tool. Otherwise the old approval is superseded by a new
/// one: what an operator reads under an approval id never changes.
/// An approval from before screens were digested is compared by its stored text, and one
/// from before tools were is taken as asked by the same tool (as a decision of it would be).
pub(super) fn takeover_keeps(old: &Approval, fresh: &Approval) -> bool {
    let old_screen = old.screen_digest.clone().unwrap_or_else(|| {
        fingerprint::screen(&fingerprint::seen_text(
            old.context.as_deref().unwrap_or(""),
            &old.question,
        ))
    });
    Some(old_screen) == fresh.screen_digest
        && old
            .tool_digest
            .as_ref()
            .is_none_or(|t| Some(t) == fresh.tool_digest.as_ref())
}

/// What policy `name` with `value` decides for `fresh` (asked by `req`): a rejection, or
/// an answer the prompt takes; else the warning to give (and a decision is asked for).
pub(super) fn policy_decision(
    fresh: &Approval,
    req: &PromptRequest,
    name: &str,
    value: &str,
) -> Result<ValueDecision, String> {
    match approvals::value_decision(fresh, value) {
        Ok(r) if r.status == ApprovalStatus::Rejected => Ok(r),
        Ok(r)
            if r.chosen_value
                .as_deref()
                .is_some_and(|v| req.prompt.takes(v)) =>
        {
            Ok(r)
        }
        _ => Err(format!(
            "policy {name}: `{value}` is not an answer to {:?} (valid: {}); asking for a decision instead",
            req.prompt.prompt_line,
            fresh.valid_values().join(", ")
        )),
    }
}

/// This run → `waiting_approval`.
fn wait_for(tx: &Transaction<'_>, who: &Asker, a: &Approval, fx: &mut Effects) -> db::Result<()> {
    let change = StatusChange::to(
        RunStatus::WaitingApproval,
        Some(format!("waiting for approval {}", a.approval_id)),
    );
    if let Some(prev) =
        runs::change_status(tx, &who.tool_run_id, &change, &who.actor, Guard::NotFinal)?
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
    if let Some(prev) = runs::change_status_with(
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
        let decided =
            approvals::find_used_by(tx, &who.request_fingerprint, &prompt_fp, &who.tool_run_id)?;
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
            && approvals::get(tx, &wanted)?.is_none()
        {
            a.approval_id = wanted;
        }
        approvals::insert(tx, &a, &who.actor)?;
        fx.events.push(a.needed_event());
        wait_for(tx, who, &a, &mut fx)?;
        Ok((Cooperative::Pending(Box::new(a)), fx))
    })
}

/// The approval a cooperative tool's `approval_needed` line becomes (its text cleaned), and
/// the fingerprint of its question.
pub(super) fn cooperative_approval(
    who: &Asker,
    req: &CooperativeRequest,
    ttl: Option<Duration>,
    on_expire: OnExpire,
) -> (Approval, String) {
    let question = sanitize_text(&req.question);
    let prompt_fp = fingerprint::prompt(&who.tool, &question);
    let mut a = approval_for(
        who,
        &PromptRequest {
            prompt: Prompt {
                kind: PromptKind::Cooperative,
                secret: false,
                rule: "cooperative".into(),
                question: question.clone(),
                prompt_line: sanitize_line(&question),
                context: req
                    .context
                    .as_deref()
                    .map(sanitize_text)
                    .unwrap_or_default(),
                options: req.options.clone(),
                default: req.default.clone(),
                allows_text: req.allows_text,
                alternative: None,
                select: None,
            },
            prompt_fingerprint: prompt_fp.clone(),
            policies: Vec::new(),
            ttl,
            on_expire,
        },
    );
    if req.context.is_none() {
        a.context = None;
    }
    (a, prompt_fp)
}

/// Why approval `a` (as read; `None`: not found) is no `AUTO_APPROVAL` of `value` for this
/// run, if it is not; the caller then consumes it in the same transaction.
pub(super) fn auto_approval_verdict(
    a: Option<&Approval>,
    who: &Asker,
    approval_id: &str,
    value: &str,
    resumed_from: Option<&str>,
) -> Result<(), String> {
    let Some(a) = a else {
        return Err(format!("no approval {approval_id}"));
    };
    if !a.answers() || a.chosen_value.as_deref() != Some(value) {
        return Err(format!(
            "approval {approval_id} is not decided with this value"
        ));
    }
    if a.request_fingerprint.as_deref() != Some(&who.request_fingerprint) {
        return Err(format!(
            "approval {approval_id} was asked by another command"
        ));
    }
    if a.prompt_kind != Some(PromptKind::Cooperative) {
        return Err(format!(
            "approval {approval_id} answers a prompt, which is typed at the prompt, not handed to the tool"
        ));
    }
    if a.claimed_by.is_none() || resumed_from != Some(a.tool_run_id.as_str()) {
        return Err(format!(
            "approval {approval_id} was not claimed by `monitor worker` for resuming this run"
        ));
    }
    Ok(())
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
        let found = approvals::get(tx, approval_id)?;
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
