//! Regressions: bugs the contract suite found in the SQLite store as it was written, each
//! pinned by the case that showed it (they failed before the fix, in the same change).

use super::*;
use hr_shared::control::CancelOutcome;
use hr_shared::status::ApprovalStatus;

/// `resolve_prompt` returns the approval it wrote. Expected: the row as stored, which is
/// what `approval(id)` (and any other store, reading back what it wrote) gives. Was: the
/// returned `options_json` still carries each option's `keys` (`"y\r"`), which the store
/// never keeps ("never the keys typed", `Approval::options_json`), on the new-approval and
/// the policy paths.
pub fn returned_approval_is_the_stored_one<S: StoreUnderTest>(s: &S) {
    let mut op = s.operator();
    let mut a = Shim::start(s, &Cmd::new("rm", &["-i", "keys"]));
    let ap = a.ask_pending(&yes_no("rm"));
    assert_eq!(
        ap,
        approval_now(op.as_mut(), &ap.approval_id),
        "new approval"
    );

    if !s.takes_runner_policies() {
        return;
    }
    let mut b = Shim::start(s, &Cmd::new("rm", &["-i", "keys-policy"]));
    let PromptResolution::Answer { approval, .. } = b
        .ask(&PromptRequest {
            policies: vec![("yes".into(), "y".into())],
            ..yes_no("rm")
        })
        .value
    else {
        panic!("the policy answers")
    };
    assert_eq!(
        *approval,
        approval_now(op.as_mut(), &approval.approval_id),
        "policy approval"
    );
}

/// A run waiting in wait mode (its shim alive, watching) is decided; before its shim has
/// typed the answer and written `Consume`, a re-run of the same command asks the same
/// prompt. Expected: the decision stays with the run that is still supervised (as step 3,
/// the takeover, already does via `rules::may_take_over`): the re-run asks anew, and the
/// waiting run is not closed. Was: step 1 of `resolve_prompt` consumes the decision for
/// the re-run and closes the waiting run as `completed … resumed as <re-run>` while its
/// shim still runs the tool; that shim then types the same decision too (its `Consume` is
/// a silent no-op: `record` reports no per-write outcome), so one decision answers two
/// runs, and the first run's later `Status(running, Live)` is refused (it is "completed").
pub fn a_supervised_twins_decision_is_not_taken<S: StoreUnderTest>(s: &S) {
    let cmd = Cmd::new("rm", &["-i", "twin"]);
    let req = yes_no("rm");
    let mut op = s.operator();
    let mut a = Shim::start(s, &cmd);
    let ap = a.ask_pending(&req);
    decide(op.as_mut(), &ap.approval_id, "y", "alice");
    let mut b = Shim::start(s, &cmd);
    let host = FakeHost::alive(&[a.run.shim_pid.unwrap(), b.run.shim_pid.unwrap()]);
    let done = b.ask_on(&req, &host);
    assert!(
        !matches!(&done.value, PromptResolution::Answer { approval, .. } if approval.approval_id == ap.approval_id),
        "the re-run took the decision of a run still waiting for it: {:?}",
        done.value
    );
    assert_eq!(
        run_now(op.as_mut(), a.id()).status,
        RunStatus::WaitingApproval,
        "the supervised run was closed under its shim"
    );
    a.write(vec![RunWrite::Consume(ap.approval_id.clone())]);
    assert_eq!(
        approval_now(op.as_mut(), &ap.approval_id)
            .consumed_by
            .as_deref(),
        Some(a.id())
    );
}

/// Cancelling a run whose pending approval is overdue. Expected: the approval's change is
/// among the returned events, as for every other approval the transaction changes (a
/// cancel's rejections, `decide`'s own expiry, `expire_due`). Was: `cancel` decides
/// each pending approval with `reject`; `decide` expires an overdue one instead and
/// answers `Conflict`, which `cancel` skips: the approval is expired (with its audit row)
/// but no `approval_status_change` event reaches the combined log.
pub fn cancel_reports_the_expiry_it_causes<S: StoreUnderTest>(s: &S) {
    let mut op = s.operator();
    let mut a = Shim::start(s, &Cmd::new("rm", &["-i", "cancel-late"]));
    let ap = a.ask_pending(&yes_no_expiring("rm", SHORT_TTL, OnExpire::Reject));
    wait_out_short_ttl();
    let done = op.cancel(a.id(), None, &decider("alice")).unwrap();
    assert!(matches!(done.value, CancelOutcome::Marked { .. }));
    let stored = approval_now(op.as_mut(), &ap.approval_id);
    assert_ne!(stored.status, ApprovalStatus::Pending);
    assert_eq!(
        approval_changes(&done.effects.events),
        [(
            ap.approval_id.clone(),
            stored.status,
            stored.decided_by.clone()
        )],
        "events: {:?}",
        names(&done.effects.events)
    );
}

/// Cancelling a run rejects its pending approvals (`decided_by` the canceller, comment
/// "the run was cancelled"). Then the same command is run again by hand. Expected: the
/// retry is asked anew, as after an approval closed by `system:run-ended` (which
/// `resolve_prompt` never takes as an answer): the cancellation was about that run, nobody
/// decided the question. Was: the retry finds the cancellation's rejection as a decided,
/// unconsumed decision for its command and prompt, consumes it, and ends at once
/// (`Rejected`, exit 91, "approval … rejected by alice") without asking.
pub fn a_cancelled_runs_rejection_does_not_answer_a_retry<S: StoreUnderTest>(s: &S) {
    let cmd = Cmd::new("rm", &["-i", "cancelled.txt"]);
    let mut op = s.operator();
    let mut a = Shim::start(s, &cmd);
    let ap = a.ask_pending(&yes_no("rm"));
    op.cancel(a.id(), Some("stuck"), &decider("alice")).unwrap();
    let mut b = Shim::start(s, &cmd);
    let done = b.ask(&yes_no("rm"));
    assert!(
        matches!(&done.value, PromptResolution::Pending { approval, .. } if approval.approval_id != ap.approval_id),
        "the retry was not asked: {:?}",
        done.value
    );
}
