//! The answer protocol, once for every store: what becomes of a recognised prompt, as one
//! function over the facts a store read ([`Facts`] in, [`Plan`] out — as `conversation`
//! is for the screen). No database here: the embedded store (`store/asking.rs`) and the
//! PostgreSQL store (`store/postgres/runner.rs`) each read the facts, call [`plan`], and
//! carry the plan out in their own transaction. The PostgreSQL functions check again only
//! what an untrusted runner login could forge (whose run, which command, the screen digest
//! of a takeover); the contract suite runs the same cases on every store.
//!
//! In order:
//!
//! 1. a decision offered to this run (`rules::offered`: its own, or one the parked run it
//!    resumes holds for it) that fits this prompt, screen and tool is used — the first the
//!    store can still take, in the order they were asked; a rejection ends the run;
//! 2. else a config policy, in config order, then a remembered decision: the first whose
//!    value answers the prompt (or rejects it) decides, recorded as an approval decided by
//!    `policy:NAME`; one that does not fit is a warning;
//! 3. else a pending approval of the same question, asked by another run that no longer
//!    holds it (`rules::may_take_over`), is taken over — as it is on the same screen and
//!    tool, or superseded by a new question that says what changed;
//! 4. else a new question, saying what changed if a decision was made on another screen
//!    (or tool) of it.

use crate::approvals::{self, Approval, ValueDecision};
use crate::fingerprint;
use crate::prompt::Prompt;
use crate::rules::{self, HostFacts};
use crate::runs::ToolRun;
use crate::status::ApprovalStatus;

/// What a store read before answering a prompt.
pub struct Facts<'a> {
    /// The prompt, as recognised on the screen.
    pub prompt: &'a Prompt,
    /// What the command runs now (`fingerprint::tool`), when it could be looked at.
    pub tool_digest: Option<&'a str>,
    /// The live decisions of this command for this prompt offered to this run, in the
    /// order they were asked (a chain's earlier prompts first).
    pub offered: Vec<Approval>,
    /// The policies that may answer it, in order: (name, value) — the config's that matched,
    /// then a remembered decision.
    pub policies: Vec<(String, String)>,
    /// A pending approval of the same question asked by another run, with that run's row
    /// (`None`: it is gone).
    pub pending: Option<(Approval, Option<ToolRun>)>,
    /// What only the asking machine knows (whether a pid still runs).
    pub host: &'a dyn HostFacts,
}

/// What to do, in order: take the first of `answers` the store still can; else record
/// `policy`; else `ask`.
#[derive(Debug)]
pub struct Plan {
    /// Step 1: decisions that answer the prompt, in the order to try them.
    pub answers: Vec<Approval>,
    /// Step 2: the policy that decides it, if one does.
    pub policy: Option<ByPolicy>,
    /// Policies passed over (their value answers nothing here): said once step 2 is reached.
    pub warnings: Vec<String>,
    /// Steps 3 and 4.
    pub ask: Ask,
}

/// A policy's decision: `approval` (the new row, pending as built) is recorded decided.
#[derive(Debug)]
pub struct ByPolicy {
    pub name: String,
    pub decision: ValueDecision,
    pub approval: Approval,
}

/// How the run comes to wait for a decision.
#[derive(Debug)]
pub enum Ask {
    /// The same screen and tool as `old`, whose run no longer holds it: the run waits for
    /// `old` unchanged. Should it be gone by the time the store looks, `fresh` is asked.
    TakeOver { old: Approval, fresh: Approval },
    /// Another screen or tool than `old`'s: `old` ends superseded by `fresh`, which says
    /// what changed (an approval never changes under the operator, DESIGN §14).
    Supersede { old: Approval, fresh: Approval },
    /// A new question.
    New { fresh: Approval },
}

/// The answer protocol: `fresh` is the approval this prompt becomes if one is asked.
pub fn plan(facts: Facts<'_>, fresh: Approval) -> Plan {
    let screen = fingerprint::seen(facts.prompt);
    // 1. Decisions that fit; the first on another screen or tool is what changed.
    let mut answers = Vec::new();
    let mut changed_since: Option<(Approval, &str)> = None;
    for a in facts.offered.into_iter().filter(rules::live) {
        if !rules::tool_fits(&a, facts.tool_digest) {
            changed_since.get_or_insert((a, TOOL_CHANGED));
        } else if !rules::screen_fits(&a, &screen) {
            changed_since.get_or_insert((a, SCREEN_CHANGED));
        } else if rules::decision_fits(&a, facts.prompt) {
            answers.push(a);
        }
    }
    // 2. The first policy whose value fits — none where the approval needs reviewers: a
    // policy is nobody, and `[[reviewers]]` asks for people (`crate::reviews`).
    let mut warnings = Vec::new();
    let mut policy = None;
    let reviewed = !crate::reviews::Requirement::of(&fresh).is_plain();
    for (name, value) in facts.policies {
        if reviewed {
            warnings.push(format!(
                "policy {} not applied: this command's approvals need reviewers or a wait timer ([[reviewers]])",
                crate::sanitize::sanitize_line(&name)
            ));
            break;
        }
        match policy_decision(&fresh, facts.prompt, &name, &value) {
            Ok(decision) => {
                policy = Some(ByPolicy {
                    name,
                    decision,
                    approval: fresh.clone(),
                });
                break;
            }
            Err(warning) => warnings.push(warning),
        }
    }
    // 3. A takeover, only from a run nobody supervises any more; 4. else a new question.
    let old = facts
        .pending
        .filter(|(_, owner)| rules::may_take_over(owner.as_ref(), facts.host))
        .map(|(old, _)| old);
    let ask = match old {
        Some(old) if takeover_keeps(&old, &fresh) => {
            let fresh = with_changes(fresh, changed_since.as_ref());
            Ask::TakeOver { old, fresh }
        }
        Some(old) => {
            let what = if old.tool_digest == fresh.tool_digest {
                SCREEN_CHANGED
            } else {
                TOOL_CHANGED
            };
            let mut fresh = with_changes(fresh, Some(&(old.clone(), what)));
            fresh.supersedes = Some(old.approval_id.clone());
            Ask::Supersede { old, fresh }
        }
        None => Ask::New {
            fresh: with_changes(fresh, changed_since.as_ref()),
        },
    };
    Plan {
        answers,
        policy,
        warnings,
        ask,
    }
}

const SCREEN_CHANGED: &str = "screen";
const TOOL_CHANGED: &str = "tool (its executable or script)";

fn with_changes(mut fresh: Approval, since: Option<&(Approval, &str)>) -> Approval {
    if let Some((old, what)) = since {
        fresh.context = Some(changed_context(old, &fresh, what));
    }
    fresh
}

/// The context of a new approval for a screen that changed since `old` was decided on the
/// same prompt: what changed first (`+` lines now shown, `-` lines gone), then the screen.
pub fn changed_context(old: &Approval, fresh: &Approval, what: &str) -> String {
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

/// Whether a retry may wait for pending approval `old` as it is: it asks on the same screen
/// (`fresh`'s digest) with the same tool. Otherwise the old approval is superseded by a new
/// one: what an operator reads under an approval id never changes.
/// An approval from before screens were digested is compared by its stored text, and one
/// from before tools were is taken as asked by the same tool (as a decision of it would be).
pub fn takeover_keeps(old: &Approval, fresh: &Approval) -> bool {
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
        // Asked under a weaker requirement (the rules were raised since): asked again.
        && crate::reviews::Requirement::of(old).covers(&crate::reviews::Requirement::of(fresh))
}

/// What policy `name` with `value` decides for `fresh` (asked at `prompt`): a rejection, or
/// an answer the prompt takes; else the warning to give (and a decision is asked for).
pub fn policy_decision(
    fresh: &Approval,
    prompt: &Prompt,
    name: &str,
    value: &str,
) -> Result<ValueDecision, String> {
    match approvals::value_decision(fresh, value) {
        Ok(r) if r.status == ApprovalStatus::Rejected => Ok(r),
        Ok(r) if r.chosen_value.as_deref().is_some_and(|v| prompt.takes(v)) => Ok(r),
        _ => Err(format!(
            "policy {name}: `{value}` is not an answer to {:?} (valid: {}); asking for a decision instead",
            prompt.prompt_line,
            fresh.valid_values().join(", ")
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::approvals::PromptKind;
    use crate::rules::Liveness;
    use crate::status::RunStatus;
    use crate::testing;

    struct Host;
    impl HostFacts for Host {
        fn host(&self) -> &str {
            "h"
        }
        fn process(&self, _pid: i32, _start_time: Option<u64>) -> Liveness {
            Liveness::Same
        }
    }

    fn prompt() -> Prompt {
        let a = testing::approval("AP-0", PromptKind::Letter);
        Prompt {
            kind: PromptKind::Letter,
            secret: false,
            rule: "builtin:rm".into(),
            question: a.question.clone(),
            prompt_line: a.question.clone(),
            context: "ctx".into(),
            options: a.options_json.clone(),
            default: a.default_value.clone(),
            allows_text: false,
            alternative: None,
            select: None,
        }
    }

    /// The approval the prompt becomes, with the screen's digest.
    fn fresh(p: &Prompt) -> Approval {
        let mut a = testing::approval("AP-NEW", PromptKind::Letter);
        a.screen_digest = Some(fingerprint::seen(p));
        a.tool_digest = Some("tool-1".into());
        a
    }

    fn decided(id: &str, status: ApprovalStatus, value: &str, screen: Option<String>) -> Approval {
        let mut a = testing::approval(id, PromptKind::Letter);
        a.status = status;
        a.chosen_value = Some(value.into());
        a.decided_by = Some("alice".into());
        a.screen_digest = screen;
        a
    }

    fn facts<'a>(p: &'a Prompt) -> Facts<'a> {
        Facts {
            prompt: p,
            tool_digest: Some("tool-1"),
            offered: Vec::new(),
            policies: Vec::new(),
            pending: None,
            host: &Host,
        }
    }

    fn parked_run() -> ToolRun {
        let mut r = testing::run("TR-OLD", "rm", RunStatus::WaitingApproval);
        r.exit_code = Some(i32::from(crate::exit::shim::APPROVAL_PENDING));
        r
    }

    #[test]
    fn a_decision_on_this_screen_answers_and_one_on_another_says_what_changed() {
        let p = prompt();
        let here = fingerprint::seen(&p);
        let mut f = facts(&p);
        f.offered = vec![
            decided(
                "AP-1",
                ApprovalStatus::Approved,
                "y",
                Some("elsewhere".into()),
            ),
            decided("AP-2", ApprovalStatus::Approved, "y", Some(here.clone())),
        ];
        let plan = plan(f, fresh(&p));
        let ids: Vec<_> = plan
            .answers
            .iter()
            .map(|a| a.approval_id.as_str())
            .collect();
        assert_eq!(ids, ["AP-2"]);
        // Had AP-2 been taken meanwhile, the new question names AP-1's screen change.
        let Ask::New { fresh } = plan.ask else {
            panic!("expected a new question, got {:?}", plan.ask)
        };
        let ctx = fresh.context.unwrap();
        assert!(ctx.starts_with("The screen changed since AP-1"), "{ctx}");
    }

    #[test]
    fn a_rejection_answers_on_any_screen_but_a_spent_or_ill_fitting_decision_never() {
        let p = prompt();
        let mut spent = decided("AP-1", ApprovalStatus::Approved, "y", None);
        spent.consumed_at = Some("2026-01-01T00:00:00Z".into());
        let no_keys = decided("AP-2", ApprovalStatus::Approved, "maybe", None);
        let other_tool = {
            let mut a = decided("AP-3", ApprovalStatus::Approved, "y", None);
            a.tool_digest = Some("tool-0".into());
            a
        };
        let no = decided(
            "AP-4",
            ApprovalStatus::Rejected,
            "n",
            Some("elsewhere".into()),
        );
        let mut f = facts(&p);
        f.offered = vec![spent, no_keys, other_tool, no];
        let plan = plan(f, fresh(&p));
        let ids: Vec<_> = plan
            .answers
            .iter()
            .map(|a| a.approval_id.as_str())
            .collect();
        assert_eq!(ids, ["AP-4"]);
        let Ask::New { fresh } = plan.ask else {
            panic!("expected a new question")
        };
        assert!(
            fresh
                .context
                .unwrap()
                .starts_with("The tool (its executable or script) changed since AP-3")
        );
    }

    #[test]
    fn the_first_policy_that_fits_decides_and_those_before_it_are_warnings() {
        let p = prompt();
        let mut f = facts(&p);
        f.policies = vec![
            ("odd".into(), "maybe".into()),
            ("yes".into(), "y".into()),
            ("no".into(), "n".into()),
        ];
        let plan = plan(f, fresh(&p));
        let by = plan.policy.expect("a policy decides");
        assert_eq!(by.name, "yes");
        assert_eq!(by.decision.status, ApprovalStatus::Approved);
        assert_eq!(by.decision.chosen_value.as_deref(), Some("y"));
        assert_eq!(by.approval.approval_id, "AP-NEW");
        assert_eq!(plan.warnings.len(), 1);
        assert!(plan.warnings[0].starts_with("policy odd: `maybe`"));
    }

    #[test]
    fn a_parked_runs_question_is_taken_over_on_its_screen_and_superseded_on_another() {
        let p = prompt();
        let new = fresh(&p);
        let mut same = testing::approval("AP-OLD", PromptKind::Letter);
        same.tool_run_id = "TR-OLD".into();
        same.screen_digest = new.screen_digest.clone();
        same.tool_digest = new.tool_digest.clone();
        let mut f = facts(&p);
        f.pending = Some((same.clone(), Some(parked_run())));
        match plan(f, new.clone()).ask {
            Ask::TakeOver { old, .. } => assert_eq!(old.approval_id, "AP-OLD"),
            other => panic!("expected a takeover, got {other:?}"),
        }

        let mut elsewhere = same.clone();
        elsewhere.screen_digest = Some("elsewhere".into());
        let mut f = facts(&p);
        f.pending = Some((elsewhere, Some(parked_run())));
        match plan(f, new.clone()).ask {
            Ask::Supersede { old, fresh } => {
                assert_eq!(old.approval_id, "AP-OLD");
                assert_eq!(fresh.supersedes.as_deref(), Some("AP-OLD"));
                assert!(
                    fresh
                        .context
                        .unwrap()
                        .contains("The screen changed since AP-OLD")
                );
            }
            other => panic!("expected a supersede, got {other:?}"),
        }

        // Its run deleted: nobody holds it.
        let mut f = facts(&p);
        f.pending = Some((same, None));
        assert!(matches!(plan(f, new).ask, Ask::TakeOver { .. }));
    }

    #[test]
    fn a_twin_still_waiting_in_wait_mode_keeps_its_question() {
        let p = prompt();
        let new = fresh(&p);
        let mut same = testing::approval("AP-OLD", PromptKind::Letter);
        same.tool_run_id = "TR-OLD".into();
        same.screen_digest = new.screen_digest.clone();
        let waiting = testing::run("TR-OLD", "rm", RunStatus::WaitingApproval);
        let mut f = facts(&p);
        f.pending = Some((same, Some(waiting)));
        match plan(f, new).ask {
            Ask::New { fresh } => {
                assert_eq!(fresh.approval_id, "AP-NEW");
                assert_eq!(fresh.supersedes, None);
            }
            other => panic!("expected a new question, got {other:?}"),
        }
    }
}
