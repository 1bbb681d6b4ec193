//! Required reviewers and wait timers (`hr_shared::reviews`) on every store: an approval
//! asked by a command that needs N people counts each authenticated person once, never the
//! run's own identity, only members of its group, and a wait timer holds the decision
//! (pending, still rejectable) until its time, when the store uses it.

use super::*;
use hr_shared::reviews::Requirement;
use hr_shared::status::ApprovalStatus;

/// A shim of `cmd` whose approvals need `req`.
fn shim_needing<S: StoreUnderTest>(s: &S, cmd: &Cmd, req: Requirement) -> Shim {
    let mut shim = Shim::start(s, cmd);
    shim.who.review = req;
    shim
}

fn decide_as(r: &mut Reviewer, id: &str, value: &str) -> DecideOutcome {
    r.op.decide(
        id,
        value,
        &Decider {
            by: &r.by,
            channel: "cli",
            comment: None,
            version: None,
            groups: &r.groups,
        },
    )
    .expect("decide")
    .value
}

fn reviewed(out: DecideOutcome) -> Approval {
    match out {
        DecideOutcome::Reviewed(a) => *a,
        other => panic!("expected Reviewed, got {other:?}"),
    }
}

/// Two people are needed: the first is counted (the approval stays pending, and nothing
/// answers the prompt), the same person again is not counted twice, the second decides it,
/// recorded as both. No policy decides it meanwhile.
pub fn two_distinct_people_approve<S: StoreUnderTest>(s: &S) {
    let cmd = Cmd::new("terraform", &["apply"]);
    let mut shim = shim_needing(
        s,
        &cmd,
        Requirement {
            required: 2,
            ..Default::default()
        },
    );
    let mut req = yes_no("terraform");
    req.policies = vec![("auto".into(), "y".into())];
    let asked = shim.ask_pending(&req);
    assert_eq!(asked.reviews_required, 2);
    let mut alice = s.reviewer("alice", &[]);
    let mut bob = s.reviewer("bob", &[]);

    let first = reviewed(decide_as(&mut alice, &asked.approval_id, "y"));
    assert_eq!(first.status, ApprovalStatus::Pending);
    assert_eq!(first.reviews.len(), 1);
    assert_eq!(first.reviews[0].by, alice.recorded);
    assert_eq!(first.reviews[0].value, "y");
    let again = reviewed(decide_as(&mut alice, &asked.approval_id, "y"));
    assert_eq!(again.reviews.len(), 1, "one person counts once");
    // Another answer than the first reviewer's is refused.
    assert!(matches!(
        decide_as(&mut bob, &asked.approval_id, "n"),
        DecideOutcome::Refused(w) if w.contains("same answer")
    ));
    // Still pending: a re-run is not answered by one approval of two.
    let mut op = s.operator();
    assert_eq!(
        approval_now(op.as_mut(), &asked.approval_id).status,
        ApprovalStatus::Pending
    );

    let done = match decide_as(&mut bob, &asked.approval_id, "y") {
        DecideOutcome::Decided(a) => *a,
        other => panic!("expected Decided, got {other:?}"),
    };
    assert_eq!(done.status, ApprovalStatus::Approved);
    assert_eq!(done.chosen_value.as_deref(), Some("y"));
    assert_eq!(
        done.decided_by.as_deref(),
        Some(format!("{}, {}", alice.recorded, bob.recorded).as_str())
    );
    assert_eq!(done.reviews.len(), 2);
    assert_eq!(
        hr_shared::reviews::summary(&done).as_deref(),
        Some(format!("2 of 2 approvals ({}, {})", alice.recorded, bob.recorded).as_str())
    );
    // A later approval is "already decided", as for any approval.
    let mut carol = s.reviewer("carol", &[]);
    assert!(matches!(
        decide_as(&mut carol, &asked.approval_id, "y"),
        DecideOutcome::AlreadySame(_)
    ));
}

/// The identity that started the run never reviews its approval, on any store (where it
/// may decide at all), and a rejection by one reviewer ends it at once.
pub fn never_the_runs_own_identity_and_one_rejection_ends_it<S: StoreUnderTest>(s: &S) {
    let cmd = Cmd::new("terraform", &["destroy"]);
    let mut shim = shim_needing(
        s,
        &cmd,
        Requirement {
            required: 2,
            ..Default::default()
        },
    );
    let asked = shim.ask_pending(&yes_no("terraform"));
    let owner = s.runner_identity();
    let mut worker = s.worker();
    let by_owner = worker.decide(
        &asked.approval_id,
        "y",
        &Decider {
            by: &owner,
            channel: "cli",
            comment: None,
            version: None,
            groups: &[],
        },
    );
    match by_owner {
        Ok(Done {
            value: DecideOutcome::Refused(why),
            ..
        }) => assert!(why.contains("started its run"), "{why}"),
        // A store where the runner's identity may not decide anything (PostgreSQL).
        Err(_) => {}
        Ok(other) => panic!("the run's own identity reviewed it: {:?}", other.value),
    }
    let mut op = s.operator();
    assert!(
        approval_now(op.as_mut(), &asked.approval_id)
            .reviews
            .is_empty()
    );

    let mut alice = s.reviewer("alice", &[]);
    reviewed(decide_as(&mut alice, &asked.approval_id, "y"));
    let mut bob = s.reviewer("bob", &[]);
    let out = decide_as(&mut bob, &asked.approval_id, "reject");
    let DecideOutcome::Decided(a) = out else {
        panic!("{out:?}")
    };
    assert_eq!(a.status, ApprovalStatus::Rejected);
    assert_eq!(a.decided_by.as_deref(), Some(bob.recorded.as_str()));
}

/// A group admits only its members.
pub fn a_group_admits_only_its_members<S: StoreUnderTest>(s: &S) {
    let cmd = Cmd::new("deploy.sh", &["prod"]);
    let ops = s.group("ops");
    let mut shim = shim_needing(
        s,
        &cmd,
        Requirement {
            required: 1,
            group: Some(ops.clone()),
            wait_seconds: 0,
        },
    );
    let asked = shim.ask_pending(&yes_no("deploy.sh"));
    assert_eq!(asked.reviewer_group.as_deref(), Some(ops.as_str()));
    let mut outsider = s.reviewer("dave", &[]);
    assert!(matches!(
        decide_as(&mut outsider, &asked.approval_id, "y"),
        DecideOutcome::Refused(w) if w.contains("not a member")
    ));
    let mut member = s.reviewer("erin", &["ops"]);
    let out = decide_as(&mut member, &asked.approval_id, "y");
    assert!(
        matches!(&out, DecideOutcome::Decided(a) if a.status == ApprovalStatus::Approved),
        "{out:?}"
    );
}

/// A wait timer holds an approved decision: the approval stays pending (a re-run is not
/// answered; anyone allowed may still reject), then the store uses it when its time comes.
pub fn a_wait_timer_holds_the_decision<S: StoreUnderTest>(s: &S) {
    let cmd = Cmd::new("terraform", &["apply", "-auto-approve"]);
    let wait = Requirement {
        required: 1,
        group: None,
        wait_seconds: 1,
    };
    let mut shim = shim_needing(s, &cmd, wait.clone());
    let asked = shim.ask_pending(&yes_no("terraform"));
    let mut alice = s.reviewer("alice", &[]);
    let held = reviewed(decide_as(&mut alice, &asked.approval_id, "y"));
    assert_eq!(held.status, ApprovalStatus::Pending);
    let until = held.usable_at.clone().expect("held until");
    assert!(until > held.created_at, "{until}");
    let mut op = s.operator();
    assert!(
        op.expire_due().expect("expire_due").value.is_empty(),
        "used before its time"
    );
    // A second held approval is rejected while held.
    let mut other = shim_needing(s, &Cmd::new("terraform", &["destroy"]), wait);
    let second = other.ask_pending(&yes_no("terraform"));
    reviewed(decide_as(&mut alice, &second.approval_id, "y"));
    let mut bob = s.reviewer("bob", &[]);
    assert!(matches!(
        decide_as(&mut bob, &second.approval_id, "reject"),
        DecideOutcome::Decided(a) if a.status == ApprovalStatus::Rejected
    ));

    std::thread::sleep(Duration::from_millis(1200));
    let used = op.expire_due().expect("expire_due").value;
    let a = used
        .iter()
        .find(|a| a.approval_id == asked.approval_id)
        .unwrap_or_else(|| panic!("not released: {used:?}"));
    assert_eq!(a.status, ApprovalStatus::Approved);
    assert_eq!(a.chosen_value.as_deref(), Some("y"));
    assert_eq!(a.decided_by.as_deref(), Some(alice.recorded.as_str()));
    assert_eq!(a.usable_at, None);
    assert!(
        a.comment
            .as_deref()
            .is_some_and(|c| c.contains("held 1s by its wait timer")),
        "{:?}",
        a.comment
    );
    assert!(
        !used.iter().any(|a| a.approval_id == second.approval_id),
        "the rejected one is not used"
    );
}

/// Cancelling a run closes its approvals whatever they need — even when the canceller is
/// the run's own identity, who may not review them — and a held decision is not used.
pub fn cancel_closes_what_needs_reviewers_and_what_is_held<S: StoreUnderTest>(s: &S) {
    let ops = s.group("ops");
    let mut needing = shim_needing(
        s,
        &Cmd::new("terraform", &["apply"]),
        Requirement {
            required: 2,
            group: Some(ops),
            wait_seconds: 0,
        },
    );
    let asked = needing.ask_pending(&yes_no("terraform"));
    let mut held = shim_needing(
        s,
        &Cmd::new("terraform", &["destroy"]),
        Requirement {
            required: 1,
            group: None,
            wait_seconds: 1,
        },
    );
    let holding = held.ask_pending(&yes_no("terraform"));
    let mut alice = s.reviewer("alice", &["ops"]);
    reviewed(decide_as(&mut alice, &asked.approval_id, "y"));
    reviewed(decide_as(&mut alice, &holding.approval_id, "y"));

    let mut op = s.operator();
    let owner = s.runner_identity();
    for (run, id) in [
        (needing.id().to_owned(), &asked.approval_id),
        (held.id().to_owned(), &holding.approval_id),
    ] {
        op.cancel(
            &run,
            Some("stop"),
            &Decider {
                by: &owner,
                channel: "cli",
                comment: None,
                version: None,
                groups: &[],
            },
        )
        .expect("cancel");
        let a = approval_now(op.as_mut(), id);
        assert_eq!(a.status, ApprovalStatus::Rejected, "{a:?}");
        assert_eq!(a.usable_at, None);
    }
    std::thread::sleep(Duration::from_millis(1200));
    op.expire_due().expect("expire_due");
    let a = approval_now(op.as_mut(), &holding.approval_id);
    assert_eq!(
        a.status,
        ApprovalStatus::Rejected,
        "a held decision was used: {a:?}"
    );
}

/// An approval that needs reviewers or waits is never answered by nobody: no policy
/// decides it (nor a wait-only one), and its expiry gives no default answer.
pub fn nobody_answers_what_needs_people<S: StoreUnderTest>(s: &S) {
    let mut waiting = shim_needing(
        s,
        &Cmd::new("rm", &["-i", "a.txt"]),
        Requirement {
            required: 1,
            group: None,
            wait_seconds: 60,
        },
    );
    let mut req = yes_no("rm");
    req.policies = vec![("trusted".into(), "y".into())];
    let a = waiting.ask_pending(&req);
    assert_eq!(a.status, ApprovalStatus::Pending);

    let mut reviewed_req = shim_needing(
        s,
        &Cmd::new("rm", &["-i", "b.txt"]),
        Requirement {
            required: 2,
            ..Default::default()
        },
    );
    let expiring = reviewed_req.ask_pending(&yes_no_expiring("rm", SHORT_TTL, OnExpire::Default));
    wait_out_short_ttl();
    let mut op = s.operator();
    op.expire_due().expect("expire_due");
    let e = approval_now(op.as_mut(), &expiring.approval_id);
    assert_eq!(e.status, ApprovalStatus::Expired);
    assert_eq!(e.chosen_value, None, "answered with its default by nobody");
}
