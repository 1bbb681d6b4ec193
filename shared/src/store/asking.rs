//! What every store makes of a prompt before its own transaction: the approval row a prompt
//! or a cooperative request becomes, and why an `AUTO_APPROVAL` is not a decision for a run.
//! The answer protocol itself is `crate::answering`; each store carries it out
//! (`sqlite/asking.rs`, `postgres/runner.rs`).

use super::{Asker, PromptRequest};
use crate::approvals::{Approval, PromptKind};
use crate::config::OnExpire;
use crate::event::CooperativeRequest;
use crate::prompt::Prompt;
use crate::sanitize::{sanitize_line, sanitize_text};
use crate::status::ApprovalStatus;
use crate::{fingerprint, id, time};
use std::time::{Duration, SystemTime};

/// The approval row a prompt becomes. Its text is cleaned here once more, whatever made
/// the prompt (screen, rule or cooperative line): no escape, control, bidi or invisible
/// character is stored. Option values are the prompt's own (a decision is matched
/// against them to find the keys); every source already cleans them.
pub fn approval_for(who: &Asker, req: &PromptRequest) -> Approval {
    let p = &req.prompt;
    let now = SystemTime::now();
    let mut a = Approval {
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
        expires_at: req
            .ttl
            .map(|ttl| time::to_rfc3339(now.checked_add(ttl).unwrap_or(now + time::MAX_DURATION))),
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
        reviews_required: 1,
        reviewer_group: None,
        wait_seconds: 0,
        reviews: Vec::new(),
        usable_at: None,
    };
    who.review.apply(&mut a);
    a
}

/// The approval a cooperative tool's `approval_needed` line becomes (its text cleaned), and
/// the fingerprint of its question.
pub fn cooperative_approval(
    who: &Asker,
    req: &CooperativeRequest,
    ttl: Option<Duration>,
    on_expire: OnExpire,
) -> (Approval, String) {
    let question = sanitize_text(&req.question);
    let prompt_fp = fingerprint::prompt(&who.tool, &question);
    // The tool's own wait (`expires_in_seconds`), bounded by the operator's TTL. When it
    // is what ends the approval, the end is a rejection: a tool that chose its default
    // and a short wait must not answer itself by expiry (`on_expire = "default"`).
    let asked = req
        .expires_in_seconds
        .map(|s| Duration::from_secs(s.min(time::MAX_DURATION.as_secs())));
    let (ttl, on_expire) = match (ttl, asked) {
        (Some(t), Some(a)) if a < t => (Some(a), OnExpire::Reject),
        (None, Some(a)) => (Some(a), OnExpire::Reject),
        (t, _) => (t, on_expire),
    };
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
pub fn auto_approval_verdict(
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

#[cfg(test)]
mod tests {
    use super::*;

    fn who() -> Asker {
        Asker {
            tool_run_id: "TR-1".into(),
            tool: "deploy".into(),
            execution_id: "EX-1".into(),
            request_fingerprint: "rf".into(),
            argv: vec!["deploy".into()],
            cwd: "/w".into(),
            tool_digest: None,
            actor: "ci".into(),
            review: Default::default(),
        }
    }

    fn asking(secs: Option<u64>) -> CooperativeRequest {
        CooperativeRequest {
            approval_id: None,
            tool_run_id: None,
            question: "Deploy?".into(),
            options: Vec::new(),
            default: Some("approve".into()),
            allows_text: false,
            context: None,
            expires_in_seconds: secs,
        }
    }

    /// A tool's own wait bounds the TTL; when it is what ends the approval, the end is a
    /// rejection, never the tool's default; an absurd wait is no panic.
    #[test]
    fn a_tools_wait_shortens_the_ttl_and_never_answers_by_expiry() {
        let ttl = Some(Duration::from_secs(600));
        let (a, _) = cooperative_approval(&who(), &asking(Some(5)), ttl, OnExpire::Default);
        assert_eq!(a.expire_action, "reject");
        let at = |s: &str| time::parse_rfc3339(s).unwrap();
        let left = at(a.expires_at.as_deref().unwrap())
            .duration_since(at(&a.created_at))
            .unwrap();
        assert_eq!(left.as_secs(), 5);
        // Longer than the TTL: the TTL, with the operator's on_expire.
        let (a, _) = cooperative_approval(&who(), &asking(Some(9_999)), ttl, OnExpire::Default);
        assert_eq!(a.expire_action, "default");
        // No TTL at all, and the longest wait: bounded, no overflow.
        let (a, _) = cooperative_approval(&who(), &asking(Some(u64::MAX)), None, OnExpire::Default);
        assert_eq!(a.expire_action, "reject");
        assert!(a.expires_at.is_some());
    }
}
