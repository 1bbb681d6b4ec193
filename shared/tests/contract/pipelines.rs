//! Pipelines on every store that keeps them: a human step is passed only with a person's
//! approval of its own question. The rule is `pipeline::human_step_proved` (what whoever
//! starts the steps behind it checks, from the store's facts); a store that lets an
//! untrusted login write the row (PostgreSQL) refuses a forged completion besides. Run on
//! the stores that keep pipelines (`pipeline_contract_tests!`); the runner API keeps none.

use super::*;
use hr_shared::config::OnExpire;
use hr_shared::event::CooperativeRequest;
use hr_shared::pipeline::engine::{self, Step, StepRun, StepStatus};
use hr_shared::pipeline::file::Definition;
use hr_shared::pipeline::human_step_proved;
use hr_shared::store::Cooperative;
use hr_shared::store::pipelines::{Execution, PipelineStore};
use std::collections::BTreeMap;
use std::path::Path;

const GATE: &str = "\
name: gate
nodes:
  - { id: ok, kind: human, title: Ship, question: Ship it? }
  - { id: ship, kind: task, command: [make, ship] }
edges:
  - { from: ok, to: ship }
";

/// Execution `id` of [`GATE`] as `monitor pipeline run` inserts it, with its human step
/// asked as the runner asks it: the step marked waiting with its run, the run written, the
/// question asked in it (a cooperative request), the approval named in the step.
fn asked(ps: &mut dyn PipelineStore, id: &str) -> (Execution, Approval) {
    let def = Definition::parse(Path::new("gate.yaml"), GATE).expect("the pipeline");
    let mut steps = engine::start(&def, &BTreeMap::new()).expect("its steps");
    let now = time::now_rfc3339();
    let ex = Execution {
        execution_id: id.into(),
        name: def.name.clone(),
        file: Some("gate.yaml".into()),
        dir: "/work/project".into(),
        definition: serde_json::to_value(&def).unwrap(),
        vars: serde_json::json!({}),
        steps: steps.clone(),
        status: (&engine::status(&def, &steps)).into(),
        reason: None,
        runner: Some("h 1 1".into()),
        heartbeat_at: Some(now.clone()),
        created_at: now.clone(),
        updated_at: now.clone(),
        version: 1,
        owner: None,
        uid: Some(hr_shared::proc::effective_uid()),
        definition_digest: Some(def.digest()),
        workers: Vec::new(),
    };
    assert!(ps.pipeline_insert(&ex).expect("insert"), "the id is free");

    let run_id = id::new_run_id();
    let argv = vec!["pipeline".to_owned(), "gate".to_owned(), "ok".to_owned()];
    let ok = steps.iter_mut().find(|s| s.node == "ok").expect("ok");
    ok.status = StepStatus::WaitingApproval;
    ok.run = Some(StepRun {
        host: "h".into(),
        started_at: now.clone(),
        tool_run_id: Some(run_id.clone()),
        ..StepRun::default()
    });
    let ex = swapped(ps, ex, &steps);

    let mut row = hr_shared::testing::run(&run_id, "pipeline", RunStatus::WaitingApproval);
    row.execution_id = Some(id.into());
    row.exit_code = Some(i32::from(hr_shared::exit::shim::APPROVAL_PENDING));
    row.pid = None;
    row.shim_pid = None;
    row.shim_start_time = None;
    row.argv_json = argv.clone();
    row.cwd = Some(ex.dir.clone());
    row.metadata = Some(serde_json::json!({ "pipeline": format!("{id}/ok#0") }));
    ps.record(&run_id, &[RunWrite::Start(Box::new(row))], "runner", false)
        .expect("the step's run");
    let who = Asker {
        tool_run_id: run_id.clone(),
        tool: "pipeline".into(),
        execution_id: id.into(),
        request_fingerprint: fingerprint::request("pipeline", &argv, &ex.dir),
        argv,
        cwd: ex.dir.clone(),
        tool_digest: None,
        actor: "runner".into(),
        review: Default::default(),
    };
    let req = CooperativeRequest {
        approval_id: None,
        tool_run_id: Some(run_id.clone()),
        question: "Ship it?".into(),
        options: ["approve", "reject"]
            .map(|v| ApprovalOption {
                value: v.into(),
                label: v.into(),
                keys: None,
            })
            .to_vec(),
        default: None,
        allows_text: false,
        context: Some(format!("Pipeline gate ({id}), step ok: Ship")),
        expires_in_seconds: None,
    };
    let Cooperative::Pending(a) = ps
        .cooperative(&who, &req, None, OnExpire::Reject)
        .expect("ask")
        .value
    else {
        panic!("the step's question was not asked")
    };
    if let Some(r) = &mut steps.iter_mut().find(|s| s.node == "ok").unwrap().run {
        r.approval_id = Some(a.approval_id.clone());
    }
    (swapped(ps, ex, &steps), *a)
}

/// `ex` with `steps`, written over the stored row at its version.
fn swapped(ps: &mut dyn PipelineStore, mut ex: Execution, steps: &[Step]) -> Execution {
    ex.steps = steps.to_vec();
    assert!(ps.pipeline_swap(&ex).expect("swap"), "nobody else moves it");
    ex.version += 1;
    ex
}

/// Whether the store's facts prove the execution's human step `ok` approved by a person.
fn proved(ps: &mut dyn PipelineStore, id: &str) -> bool {
    let ex = ps.pipeline(id).expect("read").expect("the execution");
    let ok = ex.steps.iter().find(|s| s.node == "ok").expect("ok");
    let approval = match ok.run.as_ref().and_then(|r| r.approval_id.as_deref()) {
        Some(ap) => ps.step_approval(ap).expect("read the approval"),
        None => None,
    };
    let runs = ps.execution_runs(id).expect("its runs");
    human_step_proved(&ex, ok, approval.as_ref(), &runs)
}

pub fn a_human_step_passes_only_with_a_persons_approval<S: StoreUnderTest>(s: &S) {
    let mut ps = s.pipelines().expect("a store that keeps pipelines");
    let (ex, a) = asked(ps.as_mut(), "EX-proof");
    assert!(!proved(ps.as_mut(), "EX-proof"), "asked, not decided");

    // The runner's session marks the step completed itself: the store refuses the row, or
    // it proves nothing.
    let mut steps = ex.steps.clone();
    steps.iter_mut().find(|s| s.node == "ok").unwrap().status = StepStatus::Completed;
    let forged = Execution {
        steps,
        ..ex.clone()
    };
    match ps.pipeline_swap(&forged) {
        Ok(true) => assert!(
            !proved(ps.as_mut(), "EX-proof"),
            "a completion the runner wrote passed the human step"
        ),
        Ok(false) => panic!("nobody else moved it"),
        Err(e) => assert!(
            e.to_string().contains("without an operator's approval"),
            "{e}"
        ),
    }

    // A person approves its question: passed.
    let mut op = s.operator();
    decide(op.as_mut(), &a.approval_id, "approve", "alice");
    assert!(proved(ps.as_mut(), "EX-proof"), "approved by a person");

    // A rejection passes nothing.
    let (_, b) = asked(ps.as_mut(), "EX-no");
    decide(op.as_mut(), &b.approval_id, "reject", "alice");
    assert!(!proved(ps.as_mut(), "EX-no"), "rejected");
}
