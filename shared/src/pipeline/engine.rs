//! The engine: a pure function from the steps' states and one outcome to the next states.
//! It keeps nothing itself — the store holds the steps, so a runner that dies is replaced by
//! any other that reads them — and it runs no code from the file: conditions are a field, an
//! operator and a value.
//!
//! A step is one visit of a node (`node`, `iteration`): a loop's second pass is iteration 1.
//! Tasks, gates and human steps are run (or asked) by the runner, which reports an
//! [`Outcome`]; branches, `parallel` and `merge` are settled here as soon as they are ready.

use super::file::{
    Condition, DEFAULT_MAX_ITERATIONS, Definition, Kind, Operator, Strategy, WaitFor,
};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;
use std::sync::Arc;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum StepStatus {
    Pending,
    Ready,
    Running,
    Completed,
    Failed,
    Skipped,
    WaitingApproval,
    /// Stopped before it ended: another way into a `wait_for: first` merge won.
    Cancelled,
}

impl StepStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            StepStatus::Pending => "pending",
            StepStatus::Ready => "ready",
            StepStatus::Running => "running",
            StepStatus::Completed => "completed",
            StepStatus::Failed => "failed",
            StepStatus::Skipped => "skipped",
            StepStatus::WaitingApproval => "waiting_approval",
            StepStatus::Cancelled => "cancelled",
        }
    }

    /// Settled: nothing more happens to this step.
    pub fn is_final(self) -> bool {
        matches!(
            self,
            StepStatus::Completed
                | StepStatus::Failed
                | StepStatus::Skipped
                | StepStatus::Cancelled
        )
    }
}

/// One visit of a node: its fields ([`StepData`]) behind a shared pointer, so that a
/// copy of an execution's steps costs a count per step, and a change copies only the step
/// it changes (`DerefMut`), however long the execution is (issue 31).
#[derive(Clone)]
pub struct Step(Arc<StepData>);

impl std::ops::Deref for Step {
    type Target = StepData;

    fn deref(&self) -> &StepData {
        &self.0
    }
}

impl std::ops::DerefMut for Step {
    fn deref_mut(&mut self) -> &mut StepData {
        Arc::make_mut(&mut self.0)
    }
}

impl From<StepData> for Step {
    fn from(data: StepData) -> Step {
        Step(Arc::new(data))
    }
}

impl PartialEq for Step {
    fn eq(&self, other: &Step) -> bool {
        Arc::ptr_eq(&self.0, &other.0) || self.0 == other.0
    }
}

impl std::fmt::Debug for Step {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl Serialize for Step {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.0.serialize(s)
    }
}

impl<'de> Deserialize<'de> for Step {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Step, D::Error> {
        StepData::deserialize(d).map(Step::from)
    }
}

#[cfg(feature = "openapi")]
impl utoipa::PartialSchema for Step {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        <StepData as utoipa::PartialSchema>::schema()
    }
}

#[cfg(feature = "openapi")]
impl utoipa::ToSchema for Step {
    fn name() -> std::borrow::Cow<'static, str> {
        <StepData as utoipa::ToSchema>::name()
    }

    fn schemas(
        schemas: &mut Vec<(
            String,
            utoipa::openapi::RefOr<utoipa::openapi::schema::Schema>,
        )>,
    ) {
        <StepData as utoipa::ToSchema>::schemas(schemas)
    }
}

/// One visit of a node.
// (The fields of a [`Step`], which shares them.)
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema), schema(as = Step))]
pub struct StepData {
    pub node: String,
    pub iteration: u32,
    pub status: StepStatus,
    /// Runs of a gate so far after the first (its retries used).
    #[serde(default)]
    pub attempt: u32,
    #[serde(default)]
    pub exit_code: Option<i32>,
    /// The JSON result the step's tool sent (`{"event":"result","data":…}`).
    #[serde(default)]
    pub result: Option<Value>,
    /// What the step's command gets in its environment: mapped fields of earlier steps and
    /// the last approver's comment.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// A human step's approver's comment, or why a step failed or was skipped.
    #[serde(default)]
    pub comment: Option<String>,
    #[serde(default)]
    pub reason: Option<String>,
    /// Where and how it runs: the runner's bookkeeping, kept so that whoever resumes finds
    /// the step's headless-run (host, pid and start time), its run, or its approval.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run: Option<StepRun>,
    /// On a way into the `wait_for: any` merge it names that went on without it: when
    /// this way reaches that merge, the merge does not go on again (what follows it from
    /// this step inherits this).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub late_for: Option<String>,
}

/// A running (or asked) step's whereabouts.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct StepRun {
    pub host: String,
    pub started_at: String,
    /// The step's headless-run, once spawned.
    #[serde(default)]
    pub pid: Option<i32>,
    #[serde(default)]
    pub pid_start: Option<u64>,
    /// Its run (`TR-…`): a task's or gate's, or the one a human step asks in.
    #[serde(default)]
    pub tool_run_id: Option<String>,
    /// A human step's approval.
    #[serde(default)]
    pub approval_id: Option<String>,
    /// A labelled step's: the `monitor worker --labels` that claimed it (`HOST PID START`),
    /// and when it last said it was alive.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worker: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub beat_at: Option<String>,
    /// A labelled step's: the identity of the worker that claimed it (on PostgreSQL the
    /// server lets only that login move it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub login: Option<String>,
    /// A labelled step's outcome as its worker reports it (its command's end, with the
    /// result read on the worker's host; or why it was not started): the execution's own
    /// runner applies it — a label worker never moves the rest of the pipeline.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub report: Option<Outcome>,
}

impl Step {
    /// A visit of `node` that has not run.
    pub fn new(node: &str, iteration: u32, status: StepStatus) -> Step {
        Step::from(StepData {
            node: node.to_owned(),
            iteration,
            status,
            attempt: 0,
            exit_code: None,
            result: None,
            env: BTreeMap::new(),
            comment: None,
            reason: None,
            run: None,
            late_for: None,
        })
    }
}

/// What the runner saw of a step it ran or asked.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema), schema(as = StepOutcome))]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum Outcome {
    /// A task's or gate's command ended with `code` (and sent `result`).
    Exited { code: i32, result: Option<Value> },
    /// A human step was approved (with the option chosen, kept as its `result.choice`).
    Approved {
        comment: Option<String>,
        choice: Option<String>,
    },
    /// A human step was rejected, or expired.
    Rejected { reason: String },
    /// A task or gate was not started: what guards it is not in order (see
    /// [`super::unguarded`]). It fails, with no retry.
    Refused { reason: String },
}

/// How the whole execution stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ExecutionStatus {
    Running,
    WaitingApproval,
    Completed,
    Failed(String),
}

/// The comment an approver gave, as the steps after a human step get it.
pub const ENV_COMMENT: &str = "HEADLESS_RUN_APPROVAL_COMMENT";

/// The steps of a new execution: the start node, ready (settled if it needs no runner).
pub fn start(def: &Definition, vars: &BTreeMap<String, String>) -> Result<Vec<Step>, String> {
    let mut steps = vec![Step::new(&def.start, 0, StepStatus::Ready)];
    settle(def, vars, &mut steps)?;
    Ok(steps)
}

/// The latest visit of `node`.
pub fn latest<'a>(steps: &'a [Step], node: &str) -> Option<&'a Step> {
    steps
        .iter()
        .filter(|s| s.node == node)
        .max_by_key(|s| s.iteration)
}

/// Applies `outcome` of step (`node`, `iteration`), then settles what follows. `Err`: the
/// step is not one waiting for an outcome (already settled by another runner).
pub fn advance(
    def: &Definition,
    vars: &BTreeMap<String, String>,
    steps: &[Step],
    node: &str,
    iteration: u32,
    outcome: Outcome,
) -> Result<Vec<Step>, String> {
    let mut steps = steps.to_vec();
    let i = steps
        .iter()
        .position(|s| s.node == node && s.iteration == iteration)
        .ok_or_else(|| format!("no step {node}#{iteration}"))?;
    if steps[i].status.is_final() {
        return Err(format!(
            "step {node}#{iteration} is already {}",
            steps[i].status.as_str()
        ));
    }
    let kind = &def
        .node(node)
        .ok_or_else(|| format!("no node `{node}`"))?
        .kind;
    let s = &mut steps[i];
    match (kind, outcome) {
        (Kind::Task { .. }, Outcome::Exited { code, result }) => {
            s.exit_code = Some(code);
            s.result = result;
            if code == 0 {
                s.status = StepStatus::Completed;
            } else {
                s.status = StepStatus::Failed;
                s.reason = Some(format!("exited with code {code}"));
            }
        }
        (Kind::Gate { retries, .. }, Outcome::Exited { code, result }) => {
            s.exit_code = Some(code);
            s.result = result;
            if code == 0 {
                s.status = StepStatus::Completed;
            } else if s.attempt < *retries {
                s.attempt += 1;
                s.status = StepStatus::Ready;
                s.reason = Some(format!(
                    "exited with code {code}; retry {} of {retries}",
                    s.attempt
                ));
            } else {
                s.status = StepStatus::Failed;
                s.reason = Some(format!(
                    "exited with code {code} after {} retries",
                    s.attempt
                ));
            }
        }
        (Kind::Human { .. }, Outcome::Approved { comment, choice }) => {
            s.status = StepStatus::Completed;
            s.comment = comment;
            s.result = choice.map(|c| serde_json::json!({ "choice": c }));
        }
        (Kind::Task { .. } | Kind::Gate { .. }, Outcome::Refused { reason }) => {
            s.status = StepStatus::Failed;
            s.reason = Some(reason);
        }
        (Kind::Human { .. }, Outcome::Rejected { reason }) => {
            s.status = StepStatus::Failed;
            s.reason = Some(reason);
        }
        (kind, outcome) => {
            return Err(format!(
                "a {} step cannot end with {outcome:?}",
                kind.name()
            ));
        }
    }
    // A step that may fail leads on as a completed one would.
    if leads_on(def, &steps[i]) {
        let done = steps[i].clone();
        follow(def, vars, &mut steps, &done, None)?;
    }
    settle(def, vars, &mut steps)?;
    Ok(steps)
}

/// Whether the flow goes on from a step: it completed, or failed but may
/// (`continue_on_failure`).
fn leads_on(def: &Definition, s: &Step) -> bool {
    s.status == StepStatus::Completed
        || (s.status == StepStatus::Failed
            && def.node(&s.node).is_some_and(|n| n.continue_on_failure))
}

/// Whether a failed step fails the execution: it does unless its node says
/// `continue_on_failure`.
fn fails(def: &Definition, s: &Step) -> bool {
    s.status == StepStatus::Failed && !def.node(&s.node).is_some_and(|n| n.continue_on_failure)
}

/// How the execution stands: failed if a step failed (one that may fail aside) — at once
/// by default, or with `fail_fast: false` once nothing else runs or waits —, else waiting
/// if a human step waits, else running while anything is left, else completed.
pub fn status(def: &Definition, steps: &[Step]) -> ExecutionStatus {
    let busy = steps
        .iter()
        .any(|s| matches!(s.status, StepStatus::Ready | StepStatus::Running));
    let waiting = steps
        .iter()
        .any(|s| s.status == StepStatus::WaitingApproval);
    if let Some(f) = steps.iter().find(|s| fails(def, s))
        && (def.fail_fast || !(busy || waiting))
    {
        return ExecutionStatus::Failed(format!(
            "step `{}` failed: {}",
            f.node,
            f.reason.as_deref().unwrap_or("failed")
        ));
    }
    if busy {
        ExecutionStatus::Running
    } else if waiting {
        ExecutionStatus::WaitingApproval
    } else {
        ExecutionStatus::Completed
    }
}

/// Settles the ready steps the engine decides itself (branches, `parallel`, `merge`), until
/// only steps for a runner (or none) are ready.
fn settle(
    def: &Definition,
    vars: &BTreeMap<String, String>,
    steps: &mut Vec<Step>,
) -> Result<(), String> {
    // Each pass settles at least one step or stops; the bound keeps a bad graph finite.
    for _ in 0..100_000 {
        let Some(i) = steps.iter().position(|s| {
            s.status == StepStatus::Ready
                && def.node(&s.node).is_some_and(|n| {
                    matches!(
                        n.kind,
                        Kind::Branch { .. } | Kind::Parallel { .. } | Kind::Merge { .. }
                    )
                })
        }) else {
            return Ok(());
        };
        let node = def.node(&steps[i].node).expect("checked above").clone();
        match &node.kind {
            Kind::Branch {
                condition,
                on_true,
                on_false,
                max_iterations,
                on_max_iterations_reached,
            } => {
                let holds = evaluate(condition, steps, vars);
                let target = if holds { on_true } else { on_false };
                // Sending the flow back to a node already visited is one more iteration.
                let loops = latest(steps, target).is_some();
                let taken = steps
                    .iter()
                    .filter(|s| {
                        s.node == node.id
                            && s.status == StepStatus::Completed
                            && s.result
                                .as_ref()
                                .is_some_and(|r| r["looped"] == Value::Bool(true))
                    })
                    .count() as u32;
                let s = &mut steps[i];
                let limit = max_iterations.unwrap_or(DEFAULT_MAX_ITERATIONS);
                if loops && taken >= limit {
                    let Some(out) = on_max_iterations_reached else {
                        s.status = StepStatus::Failed;
                        s.reason = Some(format!(
                            "the loop back to `{target}` reached max_iterations ({limit})"
                        ));
                        continue;
                    };
                    // The `max_iterations_reached` outcome: the flow leaves by the way the
                    // file gives for it; a way never taken is skipped.
                    s.status = StepStatus::Completed;
                    s.reason = Some(format!(
                        "the loop back to `{target}` reached max_iterations ({limit}): on to `{out}`"
                    ));
                    s.result = Some(serde_json::json!({
                        "condition": holds,
                        "next": out,
                        "looped": false,
                        "outcome": MAX_ITERATIONS_REACHED,
                    }));
                    let done = s.clone();
                    follow(def, vars, steps, &done, Some(out.clone()))?;
                    for other in [on_true, on_false] {
                        if other != out && latest(steps, other).is_none() {
                            let why = Some(format!("branch `{}` went to `{out}`", node.id));
                            arrive(def, steps, other, false, BTreeMap::new(), why)?;
                        }
                    }
                    continue;
                }
                s.status = StepStatus::Completed;
                s.result = Some(serde_json::json!({
                    "condition": holds,
                    "next": target,
                    "looped": loops,
                    "outcome": if holds { "true" } else { "false" },
                }));
                let done = s.clone();
                follow(def, vars, steps, &done, Some(target.clone()))?;
                // Leaving (not looping back), the way not taken is skipped if it was never
                // taken before: a merge after it then counts it as ended. On a loop back
                // the other way is only deferred (the loop's exit, taken later).
                let other = if holds { on_false } else { on_true };
                if !loops {
                    // The way out of a spent loop is not taken either.
                    for other in std::iter::once(other).chain(on_max_iterations_reached) {
                        if other != target && latest(steps, other).is_none() {
                            let why = Some(format!("branch `{}` went to `{target}`", node.id));
                            arrive(def, steps, other, false, BTreeMap::new(), why)?;
                        }
                    }
                }
            }
            Kind::Parallel { .. } => {
                steps[i].status = StepStatus::Completed;
                let done = steps[i].clone();
                follow(def, vars, steps, &done, None)?;
            }
            Kind::Merge { strategy, .. } => {
                let result = merged(def, steps, &node.id, *strategy);
                steps[i].status = StepStatus::Completed;
                steps[i].result = Some(result);
                let done = steps[i].clone();
                follow(def, vars, steps, &done, None)?;
            }
            _ => unreachable!("only engine kinds are settled here"),
        }
    }
    Err("the pipeline does not settle (a loop without end)".into())
}

/// After `done` completed: makes its successors ready (a branch's: only `only`), mapping
/// fields into their environment; a conditional edge that does not hold skips its target.
fn follow(
    def: &Definition,
    vars: &BTreeMap<String, String>,
    steps: &mut Vec<Step>,
    done: &Step,
    only: Option<String>,
) -> Result<(), String> {
    // The comment of the latest approval on the way here travels on.
    let comment = if matches!(
        def.node(&done.node).map(|n| &n.kind),
        Some(Kind::Human { .. })
    ) {
        done.comment.clone()
    } else {
        done.env.get(ENV_COMMENT).cloned()
    };
    let mut targets: Vec<(String, bool, BTreeMap<String, String>)> = Vec::new();
    match only {
        Some(t) => targets.push((t, true, BTreeMap::new())),
        None => {
            for e in def.out_edges(&done.node) {
                let holds = e
                    .condition
                    .as_ref()
                    .is_none_or(|c| evaluate(c, steps, vars));
                let mut env = BTreeMap::new();
                // A map the definition could not have passed `pipeline check` with (a
                // row written by hand) sets nothing.
                for (var, field) in e.map.iter().filter(|(var, _)| def.may_map(var)) {
                    if let Some(v) = lookup(field, steps, vars) {
                        env.insert(var.clone(), plain(&v));
                    }
                }
                targets.push((e.to.clone(), holds, env));
            }
            // A parallel's branches that no edge names.
            if let Some(Kind::Parallel { branches }) = def.node(&done.node).map(|n| &n.kind) {
                for b in branches {
                    if !targets.iter().any(|(t, ..)| t == b) {
                        targets.push((b.clone(), true, BTreeMap::new()));
                    }
                }
            }
        }
    }
    for (target, holds, mut env) in targets {
        if let Some(c) = &comment {
            env.entry(ENV_COMMENT.to_owned())
                .or_insert_with(|| c.clone());
        }
        let reason =
            (!holds).then(|| format!("the condition on {} → {target} does not hold", done.node));
        let before = steps.len();
        arrive(def, steps, &target, holds, env, reason)?;
        // A way late for a merge stays late for it.
        if let Some(m) = &done.late_for
            && target != *m
        {
            for s in steps[before..].iter_mut().filter(|s| s.node == target) {
                s.late_for.get_or_insert_with(|| m.clone());
            }
        }
    }
    Ok(())
}

/// The flow reaches `target`: a new visit of it, ready (or skipped when the way here did
/// not hold). A merge is made once, when every way into it has ended, and is skipped only
/// when all of them were.
fn arrive(
    def: &Definition,
    steps: &mut Vec<Step>,
    target: &str,
    ready: bool,
    env: BTreeMap<String, String>,
    reason: Option<String>,
) -> Result<(), String> {
    let mut ready = ready;
    let mut winner = None;
    if let Some(Kind::Merge { wait_for, .. }) = def.node(target).map(|n| &n.kind) {
        let preds = def.predecessors(target);
        if latest(steps, target).is_some_and(|m| !m.status.is_final()) {
            return Ok(());
        }
        let completed = |p: &String| latest(steps, p).is_some_and(|s| leads_on(def, s));
        match wait_for {
            WaitFor::All => {
                let ended = |p: &String| {
                    latest(steps, p).is_some_and(|s| {
                        leads_on(def, s)
                            || matches!(s.status, StepStatus::Skipped | StepStatus::Cancelled)
                    })
                };
                if !preds.iter().all(ended) {
                    return Ok(());
                }
                ready = preds.iter().any(completed);
            }
            WaitFor::Any | WaitFor::First => {
                // Once a round: a way in counts when its latest visit came after the
                // merge's latest one (steps are only appended). Only a completed way wins
                // (one that failed but may go on counts as ended).
                let current = |p: &String| {
                    this_round(steps, p, target).filter(|s| s.late_for.as_deref() != Some(target))
                };
                if let Some(w) = preds
                    .iter()
                    .find(|p| current(p).is_some_and(|s| s.status == StepStatus::Completed))
                {
                    ready = true;
                    winner = Some((w.clone(), *wait_for == WaitFor::First));
                } else if preds
                    .iter()
                    .all(|p| current(p).is_some_and(|s| s.status.is_final()))
                {
                    ready = false;
                } else {
                    return Ok(());
                }
            }
        }
    } else if latest(steps, target).is_some_and(|s| !s.status.is_final()) {
        // Already on its way by another edge.
        return Ok(());
    }
    let mut step = Step::new(
        target,
        next_iteration(steps, target),
        if ready {
            StepStatus::Ready
        } else {
            StepStatus::Skipped
        },
    );
    step.env = env;
    step.reason = if ready { None } else { reason };
    let skipped = (!ready).then(|| step.clone());
    steps.push(step);
    if let Some((w, cancel)) = winner {
        losers(def, steps, target, &w, cancel)?;
    }
    if let Some(s) = skipped {
        // What only this way led to is skipped too (a merge counts it as ended).
        for next in def.successors(&s.node) {
            let why = Some(format!("`{}` was skipped", s.node));
            arrive(def, steps, &next, false, BTreeMap::new(), why)?;
        }
    }
    Ok(())
}

/// The outcome of a branch whose loop is spent and that leaves by its
/// `on_max_iterations_reached` (its step's `result.outcome`).
pub const MAX_ITERATIONS_REACHED: &str = "max_iterations_reached";

/// The latest visit of way `p` into `merge` when it came after the merge's latest visit
/// (this round's), or any visit when the merge has none yet.
fn this_round<'a>(steps: &'a [Step], p: &str, merge: &str) -> Option<&'a Step> {
    let after = steps.iter().rposition(|s| s.node == merge);
    let i = steps.iter().rposition(|s| s.node == p)?;
    after.is_none_or(|m| i > m).then(|| &steps[i])
}

/// A `wait_for: any | first` merge went on by way of `winner`: what had not ended on the
/// other ways into it — found walking back from each losing way to where it ended (a step
/// that ended this round: the fork, or a step already done), so nothing outside the race
/// is touched — is cancelled (`first`: the runner stops their commands and withdraws
/// their questions, and what only a cancelled step led to, besides the merge, is skipped)
/// or marked late for the merge (`any`: they go on, but their way does not make the merge
/// go on again).
fn losers(
    def: &Definition,
    steps: &mut Vec<Step>,
    merge: &str,
    winner: &str,
    cancel: bool,
) -> Result<(), String> {
    let why = format!("`{winner}` reached merge `{merge}` first");
    let mut seen = std::collections::BTreeSet::new();
    let mut todo: Vec<String> = def
        .predecessors(merge)
        .into_iter()
        .filter(|p| p != winner)
        .collect();
    // This round began after the merge's visit before the one just made.
    let made = steps.iter().rposition(|s| s.node == merge);
    let before = made.and_then(|m| steps[..m].iter().rposition(|s| s.node == merge));
    let mut cancelled = Vec::new();
    while let Some(n) = todo.pop() {
        if n == merge || !seen.insert(n.clone()) {
            continue;
        }
        let visit = steps
            .iter()
            .rposition(|s| s.node == n)
            .filter(|i| before.is_none_or(|b| *i > b));
        match visit {
            Some(i) if steps[i].status.is_final() => {}
            Some(i) if cancel => {
                steps[i].status = StepStatus::Cancelled;
                steps[i].reason = Some(why.clone());
                cancelled.push(n.clone());
                todo.extend(def.predecessors(&n));
            }
            Some(i) => {
                steps[i].late_for = Some(merge.to_owned());
                todo.extend(def.predecessors(&n));
            }
            // Not reached yet this round: what runs before it on this way may be.
            None => todo.extend(def.predecessors(&n)),
        }
    }
    for n in cancelled {
        for next in def.successors(&n).into_iter().filter(|x| x != merge) {
            let reason = Some(format!("`{n}` was cancelled"));
            arrive(def, steps, &next, false, BTreeMap::new(), reason)?;
        }
    }
    Ok(())
}

/// A merge's result from the ways into it that completed (their latest visits), in the
/// file's order: each under its node id (`by_branch`), their objects' keys together, the
/// earlier way winning a key two set (`union`, a result that is not an object kept under
/// its node id), or the first's (`first`: under `wait_for: any | first`, the winner, the
/// only way completed when the merge goes on).
fn merged(def: &Definition, steps: &[Step], merge: &str, strategy: Strategy) -> Value {
    // This round's ways: those visited since the merge's visit before this one.
    let this = steps.iter().rposition(|s| s.node == merge);
    let before = this.and_then(|i| steps[..i].iter().rposition(|s| s.node == merge));
    let done: Vec<&Step> = def
        .predecessors(merge)
        .iter()
        .filter_map(|p| {
            let i = steps.iter().rposition(|s| s.node == *p)?;
            before.is_none_or(|b| i > b).then(|| &steps[i])
        })
        .filter(|s| leads_on(def, s) && s.late_for.as_deref() != Some(merge))
        .collect();
    let mut out = serde_json::Map::new();
    match strategy {
        Strategy::ByBranch => {
            for s in done {
                out.insert(s.node.clone(), s.result.clone().unwrap_or(Value::Null));
            }
        }
        Strategy::Union => {
            for s in done {
                match &s.result {
                    Some(Value::Object(m)) => {
                        for (k, v) in m {
                            out.entry(k.clone()).or_insert_with(|| v.clone());
                        }
                    }
                    Some(other) => {
                        out.entry(s.node.clone()).or_insert_with(|| other.clone());
                    }
                    None => {}
                }
            }
        }
        Strategy::First => {
            // A way that completed before one that failed but went on.
            return done
                .iter()
                .find(|s| s.status == StepStatus::Completed)
                .or(done.first())
                .and_then(|s| s.result.clone())
                .unwrap_or(Value::Null);
        }
    }
    Value::Object(out)
}

/// The iteration a new visit of `node` gets: one past its latest, or 0.
fn next_iteration(steps: &[Step], node: &str) -> u32 {
    latest(steps, node).map_or(0, |s| s.iteration + 1)
}

/// A value as an environment variable holds it: strings bare, the rest as JSON (a NUL,
/// which no environment can hold, dropped).
fn plain(v: &Value) -> String {
    let s = match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    s.replace('\0', "")
}

/// The value of a field (`steps.ID.exit_code|status|iteration|comment|result.PATH`,
/// `vars.NAME`) now; `None` when it is not there.
pub fn lookup(field: &str, steps: &[Step], vars: &BTreeMap<String, String>) -> Option<Value> {
    let parts: Vec<&str> = field.split('.').collect();
    match parts.as_slice() {
        ["vars", name] => vars.get(*name).map(|v| Value::String(v.clone())),
        ["steps", rest @ ..] => {
            // The longest prefix that names a visited node (ids may hold dots).
            let (step, tail) = (1..=rest.len())
                .rev()
                .find_map(|k| latest(steps, &rest[..k].join(".")).map(|s| (s, &rest[k..])))?;
            match tail {
                ["exit_code"] => step.exit_code.map(Value::from),
                ["status"] => Some(Value::String(step.status.as_str().into())),
                ["iteration"] => Some(Value::from(step.iteration)),
                ["comment"] => step.comment.clone().map(Value::String),
                ["result", path @ ..] => {
                    let mut v = step.result.as_ref()?;
                    for p in path {
                        v = match v {
                            Value::Object(m) => m.get(*p)?,
                            Value::Array(a) => a.get(p.parse::<usize>().ok()?)?,
                            _ => return None,
                        };
                    }
                    Some(v.clone())
                }
                _ => None,
            }
        }
        _ => None,
    }
}

/// Whether a condition holds now. Numbers compare as numbers, and a number and a string of
/// digits are equal (a step's result and a var); a field that is not there is not equal to
/// anything, greater or less than nothing, in no list (so `not_in` holds) and starts or
/// ends with nothing.
pub fn evaluate(c: &Condition, steps: &[Step], vars: &BTreeMap<String, String>) -> bool {
    let got = lookup(&c.field, steps, vars);
    let num = |v: &Value| match v {
        Value::Number(n) => n.as_f64(),
        Value::String(s) => s.trim().parse::<f64>().ok(),
        Value::Bool(_) | Value::Null | Value::Array(_) | Value::Object(_) => None,
    };
    let equal = |a: &Value, b: &Value| {
        a == b
            || match (num(a), num(b)) {
                (Some(x), Some(y)) => x == y,
                _ => plain(a) == plain(b),
            }
    };
    let compare = |holds: fn(f64, f64) -> bool| matches!((got.as_ref().and_then(num), num(&c.value)), (Some(a), Some(b)) if holds(a, b));
    // In a list: equal to one of its items (a value that is not a list holds nothing).
    let listed = || {
        got.as_ref().is_some_and(|v| {
            c.value
                .as_array()
                .is_some_and(|items| items.iter().any(|x| equal(v, x)))
        })
    };
    // Text: a string, or a number as written; nothing else starts or ends with anything.
    let text = || match &got {
        Some(v @ (Value::String(_) | Value::Number(_))) => Some(plain(v)),
        _ => None,
    };
    match c.operator {
        Operator::Exists => got.as_ref().is_some_and(|v| !v.is_null()),
        Operator::NotExists => got.as_ref().is_none_or(Value::is_null),
        Operator::Equals => got.as_ref().is_some_and(|v| equal(v, &c.value)),
        Operator::NotEquals => got.as_ref().is_none_or(|v| !equal(v, &c.value)),
        Operator::GreaterThan => compare(|a, b| a > b),
        Operator::LessThan => compare(|a, b| a < b),
        Operator::GreaterThanOrEqual => compare(|a, b| a >= b),
        Operator::LessThanOrEqual => compare(|a, b| a <= b),
        Operator::Contains => match (&got, &c.value) {
            (Some(Value::String(s)), v) => s.contains(&plain(v)),
            (Some(Value::Array(a)), v) => a.iter().any(|x| equal(x, v)),
            _ => false,
        },
        Operator::In => listed(),
        Operator::NotIn => got.is_none() || !listed(),
        Operator::StartsWith => text().is_some_and(|s| s.starts_with(&plain(&c.value))),
        Operator::EndsWith => text().is_some_and(|s| s.ends_with(&plain(&c.value))),
    }
}
