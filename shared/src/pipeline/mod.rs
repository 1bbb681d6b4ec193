//! Pipelines (`monitor pipeline`): a declarative graph of supervised steps with human
//! gates. `file` reads and checks a pipeline file; `engine` is the pure state machine that
//! says, from the steps' states and one outcome, what happens next. They live here, beside
//! the stores, so that a decision on a human step moves the step in the decision's own
//! transaction ([`decided`]).

pub mod engine;
pub mod file;

use crate::approvals::Approval;
use crate::runs::{StatusChange, ToolRun};
use crate::status::{ApprovalStatus, RunStatus};
use crate::store::pipelines::Execution;
use engine::{ExecutionStatus, Outcome, Step, StepStatus};
use std::collections::BTreeMap;

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
pub fn settle_status(ex: &mut Execution, steps: &[Step]) {
    if ex.is_final() {
        return;
    }
    let (status, reason) = match engine::status(steps) {
        ExecutionStatus::Failed(r) => ("failed", Some(r)),
        s => (s.as_str(), None),
    };
    ex.status = status.to_owned();
    ex.reason = reason;
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
    let steps: Vec<Step> = serde_json::from_value(ex.steps.clone()).map_err(|e| e.to_string())?;
    let waits = steps.iter().any(|s| {
        s.node == node
            && s.iteration == iteration
            && s.status == StepStatus::WaitingApproval
            && s.run
                .as_ref()
                .and_then(|r| r.tool_run_id.as_deref())
                .is_some_and(|r| r == a.tool_run_id)
    });
    if !waits {
        return Ok(None);
    }
    let mut steps = engine::advance(&def, &vars, &steps, node, iteration, outcome_of(a))?;
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
    out.steps = serde_json::to_value(&steps).map_err(|e| e.to_string())?;
    settle_status(&mut out, &steps);
    Ok(Some(out))
}
