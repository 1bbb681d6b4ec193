//! Pipelines (`monitor pipeline`): a declarative graph of supervised steps with human
//! gates. `file` reads and checks a pipeline file; `engine` is the pure state machine that
//! says, from the steps' states and one outcome, what happens next. They live here, beside
//! the stores, so that a decision on a human step moves the step in the decision's own
//! transaction ([`decided`]).

pub mod engine;
pub mod execution;
pub mod file;
pub mod source;

#[cfg(test)]
mod file_tests;

use crate::approvals::Approval;
use crate::runs::{StatusChange, ToolRun};
use crate::status::{ApprovalStatus, RunStatus};
use engine::{ExecutionStatus, Outcome, Step, StepStatus};
pub use execution::{Execution, ExecutionState};
use std::collections::BTreeMap;

/// The descriptor a pipeline runner holds a step's headless-run at until the step's pid is
/// in the store: headless-run reads `g` and a newline from it before anything else, and
/// exits 125 (`exit::shim::SHIM_FAILED`) without starting (or recording) anything when it
/// reads anything else or the end (the runner died first). Never passed on to the tool.
pub const ENV_GATE_FD: &str = "HEADLESS_RUN_GATE_FD";

/// The human step a run asked in: (execution, node, iteration) from its
/// `metadata.pipeline` (`EX/NODE#ITERATION`); `None` for any other run.
pub fn step_of(run: &ToolRun) -> Option<(String, String, u32)> {
    if run.tool_name != "pipeline" {
        return None;
    }
    let (ex, rest) = run.pipeline_step()?.split_once('/')?;
    let (node, iteration) = rest.rsplit_once('#')?;
    Some((ex.to_owned(), node.to_owned(), iteration.parse().ok()?))
}

/// Why `who` may not decide the question of human step `node` of execution `ex`: the step
/// names its deciders and `who` is not one of them. An execution whose definition cannot
/// be read refuses too (its deciders cannot be known). The one rule every store applies
/// to a decision on a pipeline's human step, with the identity it records the decision as.
pub fn deciders_refusal(ex: &Execution, node: &str, who: &str) -> Option<String> {
    let def: file::Definition = match serde_json::from_value(ex.definition.clone()) {
        Ok(d) => d,
        Err(e) => {
            return Some(format!(
                "cannot read the pipeline {} to know who may decide it: {e}",
                ex.execution_id
            ));
        }
    };
    let file::Kind::Human { deciders, .. } = &def.node(node)?.kind else {
        return None;
    };
    (!deciders.is_empty() && !deciders.iter().any(|d| d == who)).then(|| {
        format!(
            "only {} may decide this pipeline step ({}), not {}",
            crate::sanitize::sanitize_line(&deciders.join(", ")),
            crate::sanitize::sanitize_line(node),
            crate::sanitize::sanitize_line(who)
        )
    })
}

/// What a decided human step's approval means for the step.
pub fn outcome_of(a: &Approval) -> Outcome {
    if approves(a) {
        Outcome::Approved {
            comment: a.comment.clone(),
            choice: a.chosen_value.clone(),
        }
    } else {
        Outcome::Rejected {
            reason: decision_note(a),
        }
    }
}

/// Whether a decided approval lets the step go on (approved, with any option but `reject`).
pub fn approves(a: &Approval) -> bool {
    a.status == ApprovalStatus::Approved && a.chosen_value.as_deref() != Some("reject")
}

/// What a decision says, as the step's reason and its run's: `approved by alice: ok`,
/// `rejected by bob: not now`, `expired`.
pub fn decision_note(a: &Approval) -> String {
    let by = a.decided_by.as_deref().unwrap_or("nobody");
    let what = match a.status {
        ApprovalStatus::Expired => "expired".to_owned(),
        _ if approves(a) => format!("approved by {by}"),
        _ => format!("rejected by {by}"),
    };
    match a.comment.as_deref().filter(|c| !c.is_empty()) {
        Some(c) => format!("{what}: {c}"),
        None => what,
    }
}

/// How the run a human step asked in ends with its decision.
pub fn closing(a: &Approval) -> StatusChange {
    let ok = approves(a);
    StatusChange {
        exit_code: Some(if ok { 0 } else { 1 }),
        finished: true,
        ..StatusChange::to(
            if ok {
                RunStatus::Completed
            } else {
                RunStatus::Failed
            },
            Some(decision_note(a)),
        )
    }
}

/// The execution's status and reason from its steps (an ended one keeps its end).
pub fn settle_status(ex: &mut Execution, def: &file::Definition, steps: &[Step]) {
    if ex.is_final() {
        return;
    }
    let now = engine::status(def, steps);
    ex.status = ExecutionState::from(&now);
    ex.reason = match now {
        ExecutionStatus::Failed(r) => Some(r),
        _ => None,
    };
}

/// Execution `ex` moved by decision `a` on its human step `node#iteration`: the row to write
/// in the decision's own transaction (same version: the caller swaps it), or `None` when
/// there is nothing to move (it has ended, or that step does not wait for this approval's
/// run). An error: the stored row cannot be read (the runner then moves it, or says why).
pub fn decided(
    ex: &Execution,
    a: &Approval,
    node: &str,
    iteration: u32,
) -> Result<Option<Execution>, String> {
    if ex.is_final() || a.status == ApprovalStatus::Pending {
        return Ok(None);
    }
    let def: file::Definition =
        serde_json::from_value(ex.definition.clone()).map_err(|e| e.to_string())?;
    let vars: BTreeMap<String, String> =
        serde_json::from_value(ex.vars.clone()).map_err(|e| e.to_string())?;
    let steps = &ex.steps;
    let waits = steps.iter().any(|s| {
        s.node == node
            && s.iteration == iteration
            && s.status == StepStatus::WaitingApproval
            && s.run.as_ref().is_some_and(|r| {
                r.tool_run_id.as_deref() == Some(a.tool_run_id.as_str())
                    && r.approval_id
                        .as_deref()
                        .is_none_or(|id| id == a.approval_id)
            })
    });
    if !waits {
        return Ok(None);
    }
    let mut steps = engine::advance(&def, &vars, steps, node, iteration, outcome_of(a))?;
    // The step keeps the approval it was decided by (the runner that asked may not have
    // written it yet).
    if let Some(s) = steps
        .iter_mut()
        .find(|s| s.node == node && s.iteration == iteration)
        && let Some(r) = &mut s.run
    {
        r.approval_id.get_or_insert_with(|| a.approval_id.clone());
    }
    let mut out = ex.clone();
    settle_status(&mut out, &def, &steps);
    out.steps = steps;
    Ok(Some(out))
}

/// The human steps every way from the start to `node` passes through: `node` runs only after
/// each of them was approved (a human step on one arm of a branch guards only that arm).
pub fn guards(def: &file::Definition, node: &str) -> Vec<String> {
    def.nodes
        .iter()
        .filter(|h| matches!(h.kind, file::Kind::Human { .. }) && h.id != node)
        .filter(|h| !reaches_without(def, node, &h.id))
        .map(|h| h.id.clone())
        .collect()
}

/// Whether the flow reaches `to` from the start without passing `avoid`.
fn reaches_without(def: &file::Definition, to: &str, avoid: &str) -> bool {
    if def.start == avoid {
        return false;
    }
    let mut seen = std::collections::BTreeSet::from([def.start.clone()]);
    let mut todo = vec![def.start.clone()];
    while let Some(n) = todo.pop() {
        if n == to {
            return true;
        }
        for next in def.successors(&n) {
            if next != avoid && seen.insert(next.clone()) {
                todo.push(next);
            }
        }
    }
    false
}

/// Whether the store proves that visit `h` of a human step of execution `ex` was approved
/// by a person: the approval the step names (`approval`, as the store has it) is its own
/// question, asked in the step's own run, approved (with any option but `reject`) by a
/// person — not a policy, not the system —, and that run is the newest question of that
/// step among the starter's runs of the execution (`runs`, as the store lists them): an
/// older approval does not answer a newer visit. The step's row alone proves nothing (on
/// PostgreSQL a supervised tool holding the runner login may have written it); the
/// PostgreSQL store refuses such a row as it is written besides (`hr.check_human_steps`),
/// and the contract suite holds every store to this rule.
pub fn human_step_proved(
    ex: &Execution,
    h: &Step,
    approval: Option<&Approval>,
    runs: &[ToolRun],
) -> bool {
    let Some((Some(run_id), Some(ap))) = h.run.as_ref().map(|r| (&r.tool_run_id, &r.approval_id))
    else {
        return false;
    };
    let Some(a) = approval.filter(|a| a.approval_id == *ap) else {
        return false;
    };
    if a.tool_run_id != *run_id || !approves(a) || !a.by_a_person() {
        return false;
    }
    // A human step asks in its starter's own runs only.
    let asked: Vec<(u32, &str)> = runs
        .iter()
        .filter(|r| r.owner.is_none() || r.owner == ex.owner)
        .filter_map(|r| {
            let (e, node, it) = step_of(r)?;
            (e == ex.execution_id && node == h.node).then_some((it, r.tool_run_id.as_str()))
        })
        .collect();
    let own = asked
        .iter()
        .any(|(it, r)| *it == h.iteration && *r == run_id.as_str());
    let newest = asked.iter().map(|(it, _)| *it).max() == Some(h.iteration);
    own && newest
}

/// Why step `step` may not start: a human step that guards it ([`guards`]) whose visit
/// before it (the newest one listed ahead of `step`: steps are only appended) is not
/// completed, or whose approval `approved` does not confirm. The steps' states are the
/// store's row, which on PostgreSQL the runner's login (a supervised tool's) may have
/// written: whoever starts a step checks its guards' approvals in the store first. `Err`:
/// `approved` could not tell (the store could not be read) — not a refusal.
pub fn unguarded<E>(
    def: &file::Definition,
    steps: &[Step],
    step: &Step,
    mut approved: impl FnMut(&Step) -> Result<bool, E>,
) -> Result<Option<String>, E> {
    let before = steps
        .iter()
        .position(|t| t.node == step.node && t.iteration == step.iteration)
        .map_or(steps, |i| &steps[..i]);
    for h in guards(def, &step.node) {
        let visit = before
            .iter()
            .filter(|t| t.node == h)
            .max_by_key(|t| t.iteration);
        let ok = match visit {
            Some(v) if v.status == StepStatus::Completed => approved(v)?,
            _ => false,
        };
        if !ok {
            return Ok(Some(format!(
                "not started: human step `{h}`, which every way to it passes, has no approval in the store"
            )));
        }
    }
    Ok(None)
}

/// Whether `node` can be visited more than once (it is on a loop).
pub fn on_a_loop(def: &file::Definition, node: &str) -> bool {
    let mut seen = std::collections::BTreeSet::new();
    let mut todo = def.successors(node);
    while let Some(n) = todo.pop() {
        if n == node {
            return true;
        }
        if seen.insert(n.clone()) {
            todo.extend(def.successors(&n));
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    /// An execution waiting at human step `ok` (asked in run TR-OK), then `ship`.
    fn waiting() -> Execution {
        let def = file::Definition::parse(
            Path::new("/p/gate.yaml"),
            "nodes:\n  - { id: ok, kind: human, title: Ship, question: 'Ship it?' }\n  - { id: ship, kind: task, command: 'true' }\nedges:\n  - { from: ok, to: ship }\n",
        )
        .unwrap();
        let mut steps = engine::start(&def, &BTreeMap::new()).unwrap();
        steps[0].status = StepStatus::WaitingApproval;
        steps[0].run = Some(engine::StepRun {
            tool_run_id: Some("TR-OK".into()),
            ..Default::default()
        });
        Execution {
            execution_id: "EX-1".into(),
            name: "gate".into(),
            file: None,
            dir: "/".into(),
            definition: serde_json::to_value(&def).unwrap(),
            vars: serde_json::json!({}),
            steps,
            status: ExecutionState::WaitingApproval,
            reason: None,
            runner: None,
            heartbeat_at: None,
            created_at: crate::time::now_rfc3339(),
            updated_at: crate::time::now_rfc3339(),
            version: 3,
            owner: None,
            definition_digest: None,
            uid: None,
            workers: Vec::new(),
        }
    }

    fn decision(status: ApprovalStatus, value: &str, comment: &str) -> Approval {
        Approval {
            tool_run_id: "TR-OK".into(),
            status,
            chosen_value: Some(value.into()),
            decided_by: Some("alice".into()),
            decision_channel: Some("cli".into()),
            comment: Some(comment.into()),
            ..crate::testing::approval("AP-1", crate::approvals::PromptKind::Choice)
        }
    }

    fn steps(ex: &Execution) -> Vec<Step> {
        ex.steps.clone()
    }

    #[test]
    fn an_approval_completes_its_step_and_readies_the_next_with_the_comment() {
        let ex = waiting();
        let a = decision(ApprovalStatus::Approved, "approve", "go");
        let moved = decided(&ex, &a, "ok", 0).unwrap().expect("moved");
        assert_eq!(moved.version, 3, "the caller swaps it");
        assert_eq!(moved.status, ExecutionState::Running);
        let s = steps(&moved);
        assert_eq!(s[0].status, StepStatus::Completed);
        assert_eq!(
            s[0].run.as_ref().unwrap().approval_id.as_deref(),
            Some("AP-1")
        );
        assert_eq!(s[1].node, "ship");
        assert_eq!(s[1].status, StepStatus::Ready);
        assert_eq!(
            s[1].env.get(engine::ENV_COMMENT).map(String::as_str),
            Some("go")
        );
        let change = closing(&a);
        assert_eq!(change.status, RunStatus::Completed);
        assert_eq!(change.reason.as_deref(), Some("approved by alice: go"));
    }

    #[test]
    fn a_rejection_or_the_reject_option_fails_the_execution() {
        for a in [
            decision(ApprovalStatus::Rejected, "reject", "not now"),
            decision(ApprovalStatus::Approved, "reject", "not now"),
        ] {
            let moved = decided(&waiting(), &a, "ok", 0).unwrap().expect("moved");
            assert_eq!(moved.status, ExecutionState::Failed);
            assert!(
                moved
                    .reason
                    .as_deref()
                    .unwrap()
                    .contains("rejected by alice: not now"),
                "{:?}",
                moved.reason
            );
            assert_eq!(steps(&moved)[0].status, StepStatus::Failed);
            assert_eq!(closing(&a).status, RunStatus::Failed);
        }
    }

    #[test]
    fn nothing_moves_for_another_run_a_pending_approval_or_an_ended_execution() {
        let ex = waiting();
        let mut other = decision(ApprovalStatus::Approved, "approve", "");
        other.tool_run_id = "TR-ELSE".into();
        assert!(decided(&ex, &other, "ok", 0).unwrap().is_none());
        let pending = decision(ApprovalStatus::Pending, "approve", "");
        assert!(decided(&ex, &pending, "ok", 0).unwrap().is_none());
        let a = decision(ApprovalStatus::Approved, "approve", "");
        assert!(
            decided(&ex, &a, "ok", 1).unwrap().is_none(),
            "another visit"
        );
        let mut ended = waiting();
        ended.status = ExecutionState::Cancelled;
        assert!(decided(&ended, &a, "ok", 0).unwrap().is_none());
        let mut broken = waiting();
        broken.definition = serde_json::json!("garbage");
        assert!(decided(&broken, &a, "ok", 0).is_err());
    }

    #[test]
    fn a_human_step_guards_what_only_it_leads_to_and_a_guarded_step_needs_its_approval() {
        let def = file::Definition::parse(
            Path::new("/p/g.yaml"),
            "nodes:\n  - { id: build, kind: task, command: 'true' }\n  - { id: ok, kind: human, title: T, question: Q }\n  - { id: ship, kind: task, command: 'true' }\n  - { id: pick, kind: branch, condition: { field: vars.x, operator: exists }, on_true: careful, on_false: join }\n  - { id: careful, kind: human, title: T, question: Q }\n  - { id: join, kind: merge }\n  - { id: after, kind: task, command: 'true' }\nedges:\n  - { from: build, to: ok }\n  - { from: ok, to: ship }\n  - { from: ship, to: pick }\n  - { from: careful, to: join }\n  - { from: join, to: after }\n",
        )
        .unwrap();
        assert_eq!(guards(&def, "build"), Vec::<String>::new());
        assert_eq!(guards(&def, "ship"), ["ok"]);
        // `careful` is on one arm only: what follows the merge is guarded by `ok` alone.
        assert_eq!(guards(&def, "after"), ["ok"]);
        assert_eq!(guards(&def, "join"), ["ok"]);
        let step = |node: &str, status: StepStatus| Step::new(node, 0, status);
        let yes = |_: &Step| Ok::<bool, ()>(true);
        let no = |_: &Step| Ok::<bool, ()>(false);
        let ship = step("ship", StepStatus::Ready);
        let approved_ok = [
            step("build", StepStatus::Completed),
            step("ok", StepStatus::Completed),
            ship.clone(),
        ];
        assert_eq!(unguarded(&def, &approved_ok, &ship, yes), Ok(None));
        // Completed in the row but not confirmed by the store; skipped; never reached.
        assert!(unguarded(&def, &approved_ok, &ship, no).unwrap().is_some());
        let skipped = [
            step("build", StepStatus::Completed),
            step("ok", StepStatus::Skipped),
            ship.clone(),
        ];
        assert!(unguarded(&def, &skipped, &ship, yes).unwrap().is_some());
        let after = step("after", StepStatus::Ready);
        let unreached = [step("build", StepStatus::Completed), after.clone()];
        assert!(unguarded(&def, &unreached, &after, yes).unwrap().is_some());
        // A newer visit of the human step, listed after the step, does not count against it.
        let mut later = step("ok", StepStatus::WaitingApproval);
        later.iteration = 1;
        let with_later = [
            step("build", StepStatus::Completed),
            step("ok", StepStatus::Completed),
            ship.clone(),
            later,
        ];
        assert_eq!(unguarded(&def, &with_later, &ship, yes), Ok(None));
        // The store could not tell: not a refusal.
        assert_eq!(
            unguarded(&def, &approved_ok, &ship, |_| Err::<bool, _>("down")),
            Err("down")
        );
        assert!(!on_a_loop(&def, "ship"));
    }

    #[test]
    fn a_human_steps_run_names_its_step() {
        let mut run = crate::testing::run("TR-OK", "pipeline", RunStatus::WaitingApproval);
        run.metadata = Some(serde_json::json!({ "pipeline": "EX-1/sub.ok#12" }));
        assert_eq!(step_of(&run), Some(("EX-1".into(), "sub.ok".into(), 12)));
        run.tool_name = "rm".into();
        assert_eq!(step_of(&run), None, "only the pipeline's own runs");
    }

    /// The step's run `TR-OK` of execution EX-1 (visit `iteration`), owned by `owner`.
    fn step_run(id: &str, iteration: u32, owner: Option<&str>) -> ToolRun {
        let mut run = crate::testing::run(id, "pipeline", RunStatus::WaitingApproval);
        run.metadata = Some(serde_json::json!({ "pipeline": format!("EX-1/ok#{iteration}") }));
        run.owner = owner.map(str::to_owned);
        run
    }

    #[test]
    fn a_human_step_is_proved_only_by_a_persons_approval_of_its_newest_question() {
        let mut ex = waiting();
        ex.owner = Some("alice".into());
        let mut visit = steps(&ex)[0].clone();
        visit.run.as_mut().unwrap().approval_id = Some("AP-1".into());
        let yes = decision(ApprovalStatus::Approved, "approve", "");
        let runs = [step_run("TR-OK", 0, Some("alice"))];
        assert!(human_step_proved(&ex, &visit, Some(&yes), &runs));

        // Not by a person: a policy, or the system.
        for by in ["policy:auto", "system:expiry"] {
            let a = Approval {
                decided_by: Some(by.into()),
                decision_channel: Some(by.into()),
                ..yes.clone()
            };
            assert!(!human_step_proved(&ex, &visit, Some(&a), &runs), "{by}");
        }
        // Not approved: rejected, or the `reject` option.
        let no = decision(ApprovalStatus::Rejected, "reject", "");
        assert!(!human_step_proved(&ex, &visit, Some(&no), &runs));
        let reject = decision(ApprovalStatus::Approved, "reject", "");
        assert!(!human_step_proved(&ex, &visit, Some(&reject), &runs));
        // Not its own: another approval than the step names, asked in another run.
        let other = Approval {
            approval_id: "AP-2".into(),
            ..yes.clone()
        };
        assert!(!human_step_proved(&ex, &visit, Some(&other), &runs));
        let elsewhere = Approval {
            tool_run_id: "TR-X".into(),
            ..yes.clone()
        };
        assert!(!human_step_proved(&ex, &visit, Some(&elsewhere), &runs));
        assert!(
            !human_step_proved(&ex, &visit, None, &runs),
            "not in the store"
        );
        // Its run is another identity's, not the starter's.
        let foreign = [step_run("TR-OK", 0, Some("mallory"))];
        assert!(!human_step_proved(&ex, &visit, Some(&yes), &foreign));
        // A newer visit of the step was asked: the old approval does not answer it.
        let later = [
            step_run("TR-OK", 0, Some("alice")),
            step_run("TR-NEXT", 1, Some("alice")),
        ];
        assert!(!human_step_proved(&ex, &visit, Some(&yes), &later));
        // A newer visit asked by another identity does not count.
        let planted = [
            step_run("TR-OK", 0, Some("alice")),
            step_run("TR-NEXT", 1, Some("mallory")),
        ];
        assert!(human_step_proved(&ex, &visit, Some(&yes), &planted));
    }
}
