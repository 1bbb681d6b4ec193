//! DESIGN §14 on every store: who runs a recorded command comes from what the store
//! authenticated (the owner it recorded), never from the row; and an approval never changes
//! under the operator (a changed screen is a new approval, and a decision names the version
//! it was made on).

use super::*;
use hr_shared::approvals::SUPERSEDED;
use hr_shared::status::ApprovalStatus;

/// [`yes_no`] asked around another screen: the same prompt (same fingerprint), another
/// context.
fn yes_no_on(tool: &str, screen: &str) -> PromptRequest {
    let mut req = yes_no(tool);
    req.prompt.context = format!("{screen}\n{RM_LINE}");
    req
}

/// A retry whose screen differs from the pending approval's does not take it over: the old
/// approval ends superseded (pointing to the new one) with its text as the operator read
/// it, the new one says what changed, and deciding the old one is refused, naming the new.
pub fn a_changed_screen_supersedes_the_approval<S: StoreUnderTest>(s: &S) {
    let cmd = Cmd::new("rm", &["-i", "plan.txt"]);
    let mut op = s.operator();
    let mut a = Shim::start(s, &cmd);
    let old = a.ask_pending(&yes_no_on("rm", "Plan: 1 to add, 0 to destroy."));
    a.park();
    let mut b = Shim::start(s, &cmd);
    let host = FakeHost::alive(&[b.run.shim_pid.unwrap()]);
    let done = b.ask_on(&yes_no_on("rm", "Plan: 0 to add, 42 to destroy."), &host);
    let PromptResolution::Pending {
        approval: new,
        taken_over,
    } = done.value
    else {
        panic!("{:?}", done.value)
    };
    assert!(!taken_over, "a changed screen is a new question");
    assert_ne!(new.approval_id, old.approval_id);
    assert_eq!(new.tool_run_id, b.id());
    let context = new.context.clone().unwrap_or_default();
    assert!(
        context.contains("changed") && context.contains("42 to destroy"),
        "{context}"
    );
    assert_ne!(new.version(), old.version());

    let ended = approval_now(op.as_mut(), &old.approval_id);
    assert_eq!(ended.status, ApprovalStatus::Expired);
    assert_eq!(ended.decided_by.as_deref(), Some(SUPERSEDED));
    assert_eq!(ended.decision_channel.as_deref(), Some(SUPERSEDED));
    assert_eq!(
        ended.superseded_by.as_deref(),
        Some(new.approval_id.as_str())
    );
    // What the operator read under the old id is still what it says.
    assert_eq!(
        (&ended.question, &ended.context, ended.version()),
        (&old.question, &old.context, old.version())
    );
    assert_eq!(
        ended.tool_run_id,
        a.id(),
        "it stays with the run that asked it"
    );
    let closed = run_now(op.as_mut(), a.id());
    assert_eq!(closed.status, RunStatus::Cancelled);
    let reason = closed.reason.unwrap_or_default();
    assert!(
        reason.contains(&new.approval_id) && reason.contains(b.id()),
        "{reason}"
    );

    // Deciding the old id (a script that did not read the new one) is refused, naming it.
    let out = op
        .decide(&old.approval_id, "y", &decider("alice"))
        .expect("decide")
        .value;
    let why = hr_shared::approvals::refusal(&out).expect("refused");
    assert!(
        matches!(&out, DecideOutcome::Conflict(a) if a.superseded_by.as_deref() == Some(new.approval_id.as_str())),
        "{out:?}"
    );
    assert!(why.contains(&new.approval_id), "{why}");
    assert_eq!(
        approval_now(op.as_mut(), &new.approval_id).status,
        ApprovalStatus::Pending,
        "the new one waits for its own decision"
    );
}

/// A retry on the same screen waits for the very approval the operator is looking at:
/// nothing they read changes, only the run it belongs to.
pub fn the_same_screen_keeps_the_approval_as_it_was<S: StoreUnderTest>(s: &S) {
    let cmd = Cmd::new("rm", &["-i", "same.txt"]);
    let req = yes_no_on("rm", "Plan: 1 to add.");
    let mut op = s.operator();
    let mut a = Shim::start(s, &cmd);
    let old = a.ask_pending(&req);
    a.park();
    let mut b = Shim::start(s, &cmd);
    let host = FakeHost::alive(&[b.run.shim_pid.unwrap()]);
    let PromptResolution::Pending {
        approval,
        taken_over,
    } = b.ask_on(&req, &host).value
    else {
        panic!("pending")
    };
    assert!(taken_over);
    assert_eq!(approval.approval_id, old.approval_id);
    let now = approval_now(op.as_mut(), &old.approval_id);
    assert_eq!(
        (
            &now.question,
            &now.context,
            now.version(),
            &now.options_json,
            now.superseded_by.as_deref()
        ),
        (
            &old.question,
            &old.context,
            old.version(),
            &old.options_json,
            None
        )
    );
    assert_eq!(now.tool_run_id, b.id());
}

/// A decision names the version it was made on: another version decides nothing; the one
/// shown (or none, by id) decides.
pub fn a_decision_on_another_version_decides_nothing<S: StoreUnderTest>(s: &S) {
    let cmd = Cmd::new("rm", &["-i", "version.txt"]);
    let mut op = s.operator();
    let mut a = Shim::start(s, &cmd);
    let ap = a.ask_pending(&yes_no("rm"));
    let shown = ap
        .version()
        .expect("every new approval has a version")
        .to_owned();
    let stale = Decider {
        version: Some("not-what-it-is"),
        ..decider("alice")
    };
    let out = op
        .decide(&ap.approval_id, "y", &stale)
        .expect("decide")
        .value;
    assert!(matches!(out, DecideOutcome::Changed(_)), "{out:?}");
    assert!(hr_shared::approvals::refusal(&out).is_some_and(|w| w.contains(&ap.approval_id)));
    assert_eq!(
        approval_now(op.as_mut(), &ap.approval_id).status,
        ApprovalStatus::Pending,
        "nothing was decided"
    );
    let seen = Decider {
        version: Some(&shown),
        ..decider("alice")
    };
    let out = op
        .decide(&ap.approval_id, "y", &seen)
        .expect("decide")
        .value;
    assert!(matches!(out, DecideOutcome::Decided(_)), "{out:?}");
}

/// A run is owned by the identity that started it, as the store recorded it: a worker of
/// another identity never claims it, whatever the row says.
pub fn a_run_started_by_another_identity_is_never_claimed<S: StoreUnderTest>(s: &S) {
    let cmd = Cmd::new("rm", &["-i", "stranger.txt"]);
    let mut op = s.operator();
    // The stranger's row claims to be the runner's (its uid, its owner): words only.
    let mut row = cmd.row(RunStatus::Running);
    row.owner = Some(s.runner_identity());
    row.metadata = Some(serde_json::json!({ "uid": hr_shared::proc::effective_uid() }));
    let mut x = Shim::new(s, &cmd, row);
    x.store = s.stranger();
    let id = x.id().to_owned();
    x.store
        .record(&id, &[RunWrite::Start(Box::new(x.run.clone()))], "x", false)
        .expect("record");
    let ap = x.ask_pending(&yes_no("rm"));
    x.park();
    decide(op.as_mut(), &ap.approval_id, "y", "alice");
    let stored = run_now(op.as_mut(), &id);
    assert_ne!(
        stored.owner.as_deref(),
        Some(s.runner_identity().as_str()),
        "the store recorded who wrote it, not what the row said"
    );
    match s.worker().claim(&ap.approval_id, "worker:h:1:1") {
        Err(hr_shared::store::StoreError::Denied(_)) => {}
        other => panic!("a stranger's run was claimable: {other:?}"),
    }
    assert_eq!(approval_now(op.as_mut(), &ap.approval_id).claimed_by, None);
}
