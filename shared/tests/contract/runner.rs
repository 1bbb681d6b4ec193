//! The runner side: what one shim does with its run, its prompts and its decisions.

use super::*;
use hr_shared::approvals::ApprovalFilter;
use hr_shared::control::CancelOutcome;
use hr_shared::event::CooperativeRequest;
use hr_shared::runs::Touch;
use hr_shared::status::ApprovalStatus;
use hr_shared::store::Cooperative;
use std::sync::Barrier;

/// `connect` works on a fresh store, for both sides, and a store that is not there is
/// reported by `connect` and by every later call.
pub fn connect_then_work<S: StoreUnderTest>(s: &S) {
    let mut runner = s.runner();
    runner.connect().expect("runner connect");
    let mut op = s.operator();
    op.connect().expect("operator connect");
    let cmd = Cmd::new("make", &["all"]);
    let shim = Shim::start(s, &cmd);
    assert_eq!(run_now(op.as_mut(), shim.id()).status, RunStatus::Running);

    let mut absent = s.absent_operator();
    assert!(absent.connect().is_err(), "connect to an absent store");
    assert!(absent.runs(&Default::default()).is_err());
    assert!(absent.connect().is_err(), "still absent");
}

/// A shim writes its run in batches: start, pid and liveness together; later touches
/// leave the other stamps alone; status changes; the end.
pub fn record_start_touch_pid_status_end_in_batches<S: StoreUnderTest>(s: &S) {
    let cmd = Cmd::new("make", &["build"]);
    let mut row = cmd.row(RunStatus::Running);
    row.pid = None;
    let mut shim = Shim::new(s, &cmd, row.clone());
    let mut op = s.operator();
    let (t1, t2, t_end) = (stamp(1), stamp(2), stamp(3));

    let done = shim.write(vec![
        RunWrite::Start(Box::new(row.clone())),
        RunWrite::Pid(4242),
        RunWrite::Touch(Touch {
            last_output_at: Some(t1.clone()),
            last_heartbeat_at: Some(t1.clone()),
            supervisor_heartbeat_at: Some(t1.clone()),
            last_error_msg: Some("disk quota exceeded".into()),
        }),
    ]);
    assert_eq!(
        done.value,
        Recorded {
            inserted: true,
            cancelled: false
        }
    );
    let now = run_now(op.as_mut(), shim.id());
    assert_eq!(now.status, RunStatus::Running);
    assert_eq!(now.pid, Some(4242));
    assert_eq!(now.last_output_at.as_deref(), Some(t1.as_str()));
    assert_eq!(now.last_heartbeat_at.as_deref(), Some(t1.as_str()));
    assert_eq!(now.supervisor_heartbeat_at.as_deref(), Some(t1.as_str()));
    // A tool's `error` event: its message, kept by later touches that say none.
    assert_eq!(now.last_error_msg.as_deref(), Some("disk quota exceeded"));
    assert_eq!(now.argv_json, cmd.argv);
    assert_eq!(now.completed_at, None);

    let done = shim.write(vec![
        RunWrite::Touch(Touch {
            last_output_at: Some(t2.clone()),
            ..Touch::default()
        }),
        RunWrite::Status(
            StatusChange::to(RunStatus::Stalled, Some("no output for 5m".into())),
            Replace::Live,
        ),
    ]);
    assert_eq!(
        done.value,
        Recorded {
            inserted: false,
            cancelled: false
        }
    );
    assert!(done.effects.events.is_empty());
    let now = run_now(op.as_mut(), shim.id());
    assert_eq!(now.last_output_at.as_deref(), Some(t2.as_str()));
    assert_eq!(
        now.last_heartbeat_at.as_deref(),
        Some(t1.as_str()),
        "a touch without it leaves it"
    );
    assert_eq!(now.supervisor_heartbeat_at.as_deref(), Some(t1.as_str()));
    assert_eq!(now.status, RunStatus::Stalled);
    assert_eq!(now.reason.as_deref(), Some("no output for 5m"));
    assert_eq!(
        run_ids(&op.supervised_runs(None).unwrap()),
        [shim.id()],
        "a stalled run is still supervised"
    );

    shim.write(vec![
        RunWrite::Status(StatusChange::to(RunStatus::Running, None), Replace::Live),
        RunWrite::Status(
            StatusChange {
                exit_code: Some(0),
                at: Some(t_end.clone()),
                ..StatusChange::to(RunStatus::Completed, Some("exited with code 0".into()))
            },
            Replace::AnyButCancelled,
        ),
    ]);
    let now = run_now(op.as_mut(), shim.id());
    assert_eq!(now.status, RunStatus::Completed);
    assert_eq!(now.exit_code, Some(0));
    assert_eq!(now.completed_at.as_deref(), Some(t_end.as_str()));
    assert_eq!(now.reason.as_deref(), Some("exited with code 0"));
    assert_eq!(now.pid, Some(4242));
    assert!(op.supervised_runs(None).unwrap().is_empty());

    // Every status the run went through is in its audit.
    let statuses: Vec<String> = op
        .audit_of_run(shim.id())
        .unwrap()
        .iter()
        .filter(|r| r.event == "tool_status_change")
        .map(|r| {
            let data: serde_json::Value = serde_json::from_str(&r.data).unwrap();
            data["status"].as_str().unwrap_or_default().to_owned()
        })
        .collect();
    assert_eq!(statuses, ["running", "stalled", "running", "completed"]);
}

/// `row_may_exist`: a Start for a row already there (replayed from the spool by another
/// process) neither fails nor overwrites it.
pub fn start_with_row_may_exist_does_not_insert_twice<S: StoreUnderTest>(s: &S) {
    let cmd = Cmd::new("make", &["test"]);
    let mut shim = Shim::start(s, &cmd);
    shim.end(RunStatus::Failed, 2);
    let id = shim.id().to_owned();
    let mut again = s.runner();
    let done = again
        .record(
            &id,
            &[RunWrite::Start(Box::new(shim.run.clone()))],
            "shim-user",
            true,
        )
        .expect("a Start for a row that may exist");
    assert!(done.value.inserted, "the row is in the store");
    let mut op = s.operator();
    let now = run_now(op.as_mut(), &id);
    assert_eq!(
        now.status,
        RunStatus::Failed,
        "not overwritten by the Start"
    );
    assert_eq!(now.exit_code, Some(2));
    assert_eq!(op.runs(&Default::default()).unwrap().len(), 1);
    // And a row that is not there yet is inserted.
    let other = cmd.row(RunStatus::Running);
    let done = again
        .record(
            &other.tool_run_id,
            &[RunWrite::Start(Box::new(other.clone()))],
            "shim-user",
            true,
        )
        .unwrap();
    assert!(done.value.inserted);
    assert_eq!(
        run_now(op.as_mut(), &other.tool_run_id).status,
        RunStatus::Running
    );
}

/// `Replace::Live` only changes a run that has not ended; `AnyButCancelled` (the shim's
/// final word) changes an ended run too, but never a cancelled one.
pub fn replace_live_and_any_but_cancelled<S: StoreUnderTest>(s: &S) {
    let cmd = Cmd::new("make", &["deploy"]);
    let mut op = s.operator();
    let mut a = Shim::start(s, &cmd);
    a.write(vec![RunWrite::Status(
        StatusChange::to(RunStatus::Completed, Some("done".into())),
        Replace::Live,
    )]);
    assert_eq!(run_now(op.as_mut(), a.id()).status, RunStatus::Completed);
    a.write(vec![RunWrite::Status(
        StatusChange::to(RunStatus::Running, Some("late".into())),
        Replace::Live,
    )]);
    let now = run_now(op.as_mut(), a.id());
    assert_eq!(now.status, RunStatus::Completed, "Live does not reopen");
    assert_eq!(now.reason.as_deref(), Some("done"));
    a.write(vec![RunWrite::Status(
        StatusChange {
            exit_code: Some(1),
            ..StatusChange::to(RunStatus::Failed, Some("exited with code 1".into()))
        },
        Replace::AnyButCancelled,
    )]);
    let now = run_now(op.as_mut(), a.id());
    assert_eq!(
        now.status,
        RunStatus::Failed,
        "the final word replaces an end"
    );
    assert_eq!(now.exit_code, Some(1));

    let mut b = Shim::start(s, &cmd);
    let CancelOutcome::Marked { .. } = op
        .cancel(b.id(), Some("stop"), &decider("alice"))
        .unwrap()
        .value
    else {
        panic!("not marked")
    };
    for (change, replace) in [
        (
            StatusChange {
                exit_code: Some(0),
                ..StatusChange::to(RunStatus::Completed, Some("exited with code 0".into()))
            },
            Replace::AnyButCancelled,
        ),
        (StatusChange::to(RunStatus::Running, None), Replace::Live),
    ] {
        b.write(vec![RunWrite::Status(change, replace)]);
        let now = run_now(op.as_mut(), b.id());
        assert_eq!(now.status, RunStatus::Cancelled, "{replace:?}");
        assert_eq!(
            now.reason.as_deref(),
            Some(format!("cancelled by {}: stop", s.recorded_as("alice"))).as_deref()
        );
    }

    // A waiting run is parked by AnyButCancelled with its exit code, and stays live.
    let mut c = Shim::start(s, &cmd);
    c.ask_pending(&yes_no("make"));
    c.park();
    let now = run_now(op.as_mut(), c.id());
    assert_eq!(now.status, RunStatus::WaitingApproval);
    assert_eq!(now.exit_code, Some(90));
    assert_eq!(now.completed_at, None);
}

/// `RunWrite::Cancelled`: a cancelled run keeps the canceller's status and reason and gets
/// the tool's exit code; a run nobody cancelled becomes cancelled (by a signal); an ended
/// run is left alone.
pub fn cancelled_write_records_the_exit_code<S: StoreUnderTest>(s: &S) {
    let cmd = Cmd::new("sleep", &["100"]);
    let mut op = s.operator();
    let mut a = Shim::start(s, &cmd);
    op.cancel(a.id(), Some("enough"), &decider("alice"))
        .unwrap();
    a.write(vec![RunWrite::Cancelled {
        exit_code: 130,
        at: stamp(1),
    }]);
    let now = run_now(op.as_mut(), a.id());
    assert_eq!(now.status, RunStatus::Cancelled);
    assert_eq!(
        now.reason.as_deref(),
        Some(format!("cancelled by {}: enough", s.recorded_as("alice"))).as_deref()
    );
    assert_eq!(now.exit_code, Some(130));
    assert!(now.completed_at.is_some());

    let mut b = Shim::start(s, &cmd);
    let at = stamp(2);
    b.write(vec![RunWrite::Cancelled {
        exit_code: 143,
        at: at.clone(),
    }]);
    let now = run_now(op.as_mut(), b.id());
    assert_eq!(now.status, RunStatus::Cancelled);
    assert_eq!(now.exit_code, Some(143));
    assert_eq!(now.completed_at.as_deref(), Some(at.as_str()));
    assert!(
        now.reason.as_deref().is_some_and(|r| r.contains("signal")),
        "{:?}",
        now.reason
    );

    let mut c = Shim::start(s, &cmd);
    c.end(RunStatus::Completed, 0);
    c.write(vec![RunWrite::Cancelled {
        exit_code: 143,
        at: stamp(3),
    }]);
    let now = run_now(op.as_mut(), c.id());
    assert_eq!(now.status, RunStatus::Completed);
    assert_eq!(now.exit_code, Some(0));
}

/// Wait mode: the shim that typed a decision consumes it; a re-run then gets no answer.
/// Given back (`Release(Some)`: the prompt went away before it was typed), it answers the
/// run that took it when its prompt comes back — still no other run. A run that parks at a
/// later prompt (`Release(None)`) keeps what it used for its resume, which is answered.
pub fn consume_and_release_answers<S: StoreUnderTest>(s: &S) {
    let cmd = Cmd::new("rm", &["-i", "a.txt"]);
    let req = yes_no("rm");
    let mut op = s.operator();
    let mut a = Shim::start(s, &cmd);
    let ap = a.ask_pending(&req);
    decide(op.as_mut(), &ap.approval_id, "y", "alice");
    let seen = a.store.approval(&ap.approval_id).unwrap().unwrap();
    assert_eq!(seen.status, ApprovalStatus::Approved);
    assert_eq!(seen.chosen_value.as_deref(), Some("y"));
    a.write(vec![
        RunWrite::Consume(ap.approval_id.clone()),
        RunWrite::Status(StatusChange::to(RunStatus::Running, None), Replace::Live),
    ]);
    let used = approval_now(op.as_mut(), &ap.approval_id);
    assert_eq!(used.consumed_by.as_deref(), Some(a.id()));
    assert!(used.consumed_at.is_some());
    assert_eq!(used.kept_for.as_deref(), Some(a.id()));

    let mut b = Shim::start(s, &cmd);
    let b_ap = b.ask_pending(&req);
    assert_ne!(
        b_ap.approval_id, ap.approval_id,
        "a used decision answers no one"
    );

    a.write(vec![RunWrite::Release(Some(ap.approval_id.clone()))]);
    let back = approval_now(op.as_mut(), &ap.approval_id);
    assert_eq!(back.consumed_at, None);
    assert_eq!(back.consumed_by, None);
    assert_eq!(back.kept_for, None);

    // Given back to A, not to anyone: another run of the command is asked anew…
    let mut c = Shim::start(s, &cmd);
    match c.ask(&req).value {
        // (It takes B's pending approval over: B's shim is gone.)
        PromptResolution::Pending { approval, .. } => {
            assert_ne!(approval.approval_id, ap.approval_id)
        }
        other => panic!("expected to be asked, got {other:?}"),
    }
    // …and A, asked the prompt again, is answered.
    let PromptResolution::Answer { approval, value } = a.ask(&req).value else {
        panic!("a given-back decision answers its run's prompt")
    };
    assert_eq!(value, "y");
    assert_eq!(approval.approval_id, ap.approval_id);
    assert_eq!(
        approval_now(op.as_mut(), &ap.approval_id)
            .consumed_by
            .as_deref(),
        Some(a.id())
    );
    // A stops at a later prompt (exit 90): what it used is kept for its resume.
    let later = a.ask_pending(&PromptRequest {
        prompt_fingerprint: fingerprint::prompt("rm", "rm: remove regular file 'b.txt'?"),
        ..yes_no("rm")
    });
    a.park();
    let kept = approval_now(op.as_mut(), &ap.approval_id);
    assert_eq!(kept.kept_for.as_deref(), Some(a.id()));
    decide(op.as_mut(), &later.approval_id, "y", "alice");
    let mut d = Shim::start(s, &cmd);
    let PromptResolution::Answer { value, .. } = d.ask(&req).value else {
        panic!("A's resume is answered")
    };
    assert_eq!(value, "y");

    let events: Vec<String> = op
        .audit_of_run(a.id())
        .unwrap()
        .into_iter()
        .map(|r| r.event)
        .collect();
    assert!(
        events.contains(&"approval_consumed".to_owned()),
        "{events:?}"
    );
    assert!(
        events.contains(&"approval_released".to_owned()),
        "{events:?}"
    );
}

/// `Abandon`: a run that ends without a decision closes its pending approvals (expired,
/// by `system:run-ended`) and returns their events; they answer no re-run.
pub fn abandon_expires_pending_approvals<S: StoreUnderTest>(s: &S) {
    let cmd = Cmd::new("rm", &["-i", "b.txt"]);
    let req = yes_no("rm");
    let mut op = s.operator();
    let mut a = Shim::start(s, &cmd);
    let ap = a.ask_pending(&req);
    let done = a.end(RunStatus::Failed, 1);
    assert_eq!(names(&done.effects.events), ["approval_status_change"]);
    assert_eq!(
        approval_changes(&done.effects.events),
        [(
            ap.approval_id.clone(),
            ApprovalStatus::Expired,
            Some("system:run-ended".to_owned())
        )]
    );
    let now = approval_now(op.as_mut(), &ap.approval_id);
    assert_eq!(now.status, ApprovalStatus::Expired);
    assert_eq!(now.decided_by.as_deref(), Some("system:run-ended"));
    assert_eq!(now.decision_channel.as_deref(), Some("system:run-ended"));
    assert_eq!(
        now.comment.as_deref(),
        Some("the run ended before a decision (exited with code 1)")
    );
    assert!(now.decided_at.is_some());
    assert_eq!(run_now(op.as_mut(), a.id()).status, RunStatus::Failed);

    // Nothing left to abandon: no events.
    let again = a.write(vec![RunWrite::Abandon("again".into())]);
    assert!(again.effects.events.is_empty());

    // Nobody decides it any more, and a re-run asks anew.
    let late = op
        .decide(&ap.approval_id, "y", &decider("bob"))
        .unwrap()
        .value;
    let DecideOutcome::Conflict(c) = late else {
        panic!("{late:?}")
    };
    assert_eq!(c.decided_by.as_deref(), Some("system:run-ended"));
    let mut b = Shim::start(s, &cmd);
    let b_ap = b.ask_pending(&req);
    assert_ne!(b_ap.approval_id, ap.approval_id);
}

/// `Withdraw`: a question nothing waits for any more (it left the tool's screen, or the
/// agent's hook that asked it is gone) is closed — that one only, and only by its own run
/// while it is pending: `expired` by `system:withdrawn`, with its event; nobody decides it
/// afterwards, and it answers nothing. A decision made first stands.
pub fn withdraw_closes_one_pending_question<S: StoreUnderTest>(s: &S) {
    let cmd = Cmd::new("rm", &["-i", "a.txt", "b.txt"]);
    let first = yes_no("rm");
    let mut second = yes_no("rm");
    let b_line = "rm: remove regular file 'b.txt'?";
    second.prompt.prompt_line = b_line.into();
    second.prompt.question = b_line.into();
    second.prompt_fingerprint = fingerprint::prompt("rm", b_line);
    let mut op = s.operator();
    let mut a = Shim::start(s, &cmd);
    let gone = a.ask_pending(&first);
    let stays = a.ask_pending(&second);

    // Another run cannot withdraw it.
    let mut other = Shim::start(s, &Cmd::new("make", &["all"]));
    let foreign = other.write(vec![RunWrite::Withdraw {
        approval_id: gone.approval_id.clone(),
        why: "not mine".into(),
    }]);
    assert!(foreign.effects.events.is_empty());
    assert_eq!(
        approval_now(op.as_mut(), &gone.approval_id).status,
        ApprovalStatus::Pending
    );

    let why = "the prompt left the screen: it now asks \"Next?\"";
    let done = a.write(vec![RunWrite::Withdraw {
        approval_id: gone.approval_id.clone(),
        why: why.into(),
    }]);
    assert_eq!(
        approval_changes(&done.effects.events),
        [(
            gone.approval_id.clone(),
            ApprovalStatus::Expired,
            Some("system:withdrawn".to_owned())
        )]
    );
    let now = approval_now(op.as_mut(), &gone.approval_id);
    assert_eq!(now.status, ApprovalStatus::Expired);
    assert_eq!(now.decided_by.as_deref(), Some("system:withdrawn"));
    assert_eq!(now.comment.as_deref(), Some(why));
    assert!(now.chosen_value.is_none() && !now.answers());
    // The other question and the run are untouched (the shim says when it runs again).
    assert_eq!(
        approval_now(op.as_mut(), &stays.approval_id).status,
        ApprovalStatus::Pending
    );
    assert_eq!(
        run_now(op.as_mut(), a.id()).status,
        RunStatus::WaitingApproval
    );

    // Nobody decides it any more; withdrawing again changes nothing.
    let late = op
        .decide(&gone.approval_id, "y", &decider("bob"))
        .unwrap()
        .value;
    let DecideOutcome::Conflict(c) = late else {
        panic!("{late:?}")
    };
    assert_eq!(c.decided_by.as_deref(), Some("system:withdrawn"));
    let again = a.write(vec![RunWrite::Withdraw {
        approval_id: gone.approval_id.clone(),
        why: "again".into(),
    }]);
    assert!(again.effects.events.is_empty());

    // A decision made before the withdrawal stands.
    decide(op.as_mut(), &stays.approval_id, "y", "alice");
    let late = a.write(vec![RunWrite::Withdraw {
        approval_id: stays.approval_id.clone(),
        why: "too late".into(),
    }]);
    assert!(late.effects.events.is_empty());
    let kept = approval_now(op.as_mut(), &stays.approval_id);
    assert_eq!(
        (kept.status, kept.chosen_value.as_deref()),
        (ApprovalStatus::Approved, Some("y"))
    );

    // The withdrawn question answers nothing: the same prompt shown again is asked anew.
    let back = a.ask_pending(&first);
    assert_ne!(back.approval_id, gone.approval_id);
}

/// A row kept for later (the store could not be written) reaches the store through a
/// session opened afterwards.
pub fn keep_for_later_lands_in_a_later_session<S: StoreUnderTest>(s: &S) {
    let cmd = Cmd::new("make", &["lint"]);
    let mut runner = s.runner();
    runner.connect().unwrap();
    let row = cmd.row(RunStatus::Running);
    if !s.keeps_rows_for_later() {
        // It says it keeps nothing; the row lands by the shim's own write.
        assert!(!runner.keep_for_later(&row), "says it keeps nothing");
        let id = row.tool_run_id.clone();
        runner
            .record(&id, &[RunWrite::Start(Box::new(row))], "shim", true)
            .unwrap();
        assert!(s.operator().run(&id).unwrap().is_some());
        return;
    }
    assert!(runner.keep_for_later(&row), "the row is kept");
    let mut later = s.operator();
    let landed = later.run(&row.tool_run_id).unwrap();
    assert_eq!(
        landed.map(|r| (r.tool_run_id, r.status)),
        Some((row.tool_run_id.clone(), RunStatus::Running))
    );
}

/// Once the kept row has landed by the shim's own write, the kept copy is dropped: a later
/// session does not write it over the run's newer state.
pub fn kept_row_landed_discards_the_kept_row<S: StoreUnderTest>(s: &S) {
    let cmd = Cmd::new("make", &["docs"]);
    let mut runner = s.runner();
    runner.connect().unwrap();
    let row = cmd.row(RunStatus::Running);
    let mut kept = row.clone();
    kept.status = RunStatus::Failed;
    kept.reason = Some("the kept final state".into());
    kept.exit_code = Some(9);
    kept.completed_at = Some(time::now_rfc3339());
    if !s.keeps_rows_for_later() {
        // Covered by `keep_for_later_lands_in_a_later_session`: nothing kept, nothing to
        // discard; the shim's own write stands.
        assert!(!runner.keep_for_later(&kept));
        let id = row.tool_run_id.clone();
        runner
            .record(&id, &[RunWrite::Start(Box::new(row))], "shim", true)
            .unwrap();
        runner.kept_row_landed(&id);
        assert_eq!(
            run_now(s.operator().as_mut(), &id).status,
            RunStatus::Running
        );
        return;
    }
    assert!(runner.keep_for_later(&kept));
    let id = row.tool_run_id.clone();
    let done = runner
        .record(&id, &[RunWrite::Start(Box::new(row.clone()))], "shim", true)
        .unwrap();
    assert!(done.value.inserted);
    runner.kept_row_landed(&id);
    let mut later = s.operator();
    let now = run_now(later.as_mut(), &id);
    assert_eq!(
        (now.status, now.exit_code),
        (RunStatus::Running, None),
        "the kept copy was not written over the run"
    );
    // The other side of the same check: a row kept and not landed does take effect.
    let row2 = cmd.row(RunStatus::Running);
    runner
        .record(
            &row2.tool_run_id,
            &[RunWrite::Start(Box::new(row2.clone()))],
            "shim",
            false,
        )
        .unwrap();
    let mut kept2 = row2.clone();
    kept2.status = RunStatus::Failed;
    kept2.exit_code = Some(9);
    kept2.completed_at = Some(time::now_rfc3339());
    assert!(runner.keep_for_later(&kept2));
    let mut later = s.operator();
    let now = run_now(later.as_mut(), &row2.tool_run_id);
    assert_eq!((now.status, now.exit_code), (RunStatus::Failed, Some(9)));
}

/// A store replaced under a running shim is reported once; the run's row can then be
/// written into the new store.
pub fn replaced_is_reported_once<S: StoreUnderTest>(s: &S) {
    let cmd = Cmd::new("make", &["long"]);
    let mut shim = Shim::start(s, &cmd);
    assert!(!shim.store.replaced(), "nothing replaced yet");
    if !s.replace_with_empty() {
        assert!(!shim.store.replaced());
        return;
    }
    assert!(shim.store.replaced(), "the replacement is reported");
    assert!(!shim.store.replaced(), "once");
    let mut op = s.operator();
    assert!(
        op.run(shim.id()).unwrap().is_none(),
        "the new store is empty"
    );
    let done = shim.write(vec![
        RunWrite::Start(Box::new(shim.run.clone())),
        RunWrite::Touch(Touch {
            last_output_at: Some(time::now_rfc3339()),
            ..Touch::default()
        }),
    ]);
    assert!(done.value.inserted);
    assert_eq!(run_now(op.as_mut(), shim.id()).status, RunStatus::Running);
    assert!(!shim.store.replaced());
}

/// A prompt with no decision, policy or takeover: a new pending approval; the run waits.
pub fn resolve_prompt_creates_a_pending_approval<S: StoreUnderTest>(s: &S) {
    let cmd = Cmd::new("rm", &["-i", "a.txt"]);
    let req = yes_no("rm");
    let mut op = s.operator();
    let mut a = Shim::start(s, &cmd);
    let before = time::now_rfc3339();
    let done = a.ask(&req);
    let PromptResolution::Pending {
        approval,
        taken_over,
    } = done.value
    else {
        panic!("{:?}", done.value)
    };
    assert!(!taken_over);
    assert_eq!(
        names(&done.effects.events),
        ["approval_needed", "tool_status_change"]
    );
    assert_eq!(
        status_changes(&done.effects.events, a.id()),
        [(RunStatus::WaitingApproval, Some(RunStatus::Running))]
    );
    match &done.effects.events[0].body {
        EventBody::ApprovalNeeded {
            approval_id,
            options,
            default,
            ..
        } => {
            assert_eq!(approval_id, &approval.approval_id);
            assert!(options.iter().all(|o| o.keys.is_none()), "no keys in logs");
            assert_eq!(default.as_deref(), Some("n"));
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(done.effects.status, Some(RunStatus::WaitingApproval));
    assert!(done.effects.warnings.is_empty());

    let stored = approval_now(op.as_mut(), &approval.approval_id);
    assert_eq!(
        a.store.approval(&approval.approval_id).unwrap().as_ref(),
        Some(&stored),
        "both sides read the same row"
    );
    for ap in [&*approval, &stored] {
        assert!(id::has_shape(&ap.approval_id, id::APPROVAL_PREFIX));
        assert_eq!(ap.status, ApprovalStatus::Pending);
        assert_eq!(ap.tool_run_id, a.id());
        assert_eq!(ap.tool_name, "rm");
        assert_eq!(ap.execution_id, a.run.execution_id);
        assert_eq!(ap.question, RM_LINE);
        assert_eq!(option_values(ap), ["y", "n"]);
        assert_eq!(ap.default_value.as_deref(), Some("n"));
        assert_eq!(ap.prompt_kind, Some(PromptKind::Choice));
        assert_eq!(ap.prompt_line.as_deref(), Some(RM_LINE));
        assert_eq!(ap.rule_name.as_deref(), Some("builtin:rm"));
        assert_eq!(
            ap.request_fingerprint.as_deref(),
            Some(s.stored_fingerprint(&cmd.fingerprint()).as_str())
        );
        assert_eq!(
            ap.prompt_fingerprint.as_deref(),
            Some(req.prompt_fingerprint.as_str())
        );
        assert_eq!(ap.expire_action, "reject");
        assert!(
            ap.expires_at
                .as_deref()
                .is_some_and(|e| e > stamp(3000).as_str())
        );
        assert!(ap.created_at >= before);
        assert_eq!(ap.chosen_value, None);
        assert_eq!(ap.decided_by, None);
        assert_eq!(ap.consumed_at, None);
    }
    assert!(
        stored.options_json.iter().all(|o| o.keys.is_none()),
        "keys are never stored"
    );
    let run = run_now(op.as_mut(), a.id());
    assert_eq!(run.status, RunStatus::WaitingApproval);
    assert!(
        run.reason
            .as_deref()
            .is_some_and(|r| r.contains(&approval.approval_id)),
        "{:?}",
        run.reason
    );
    let pending = op
        .approvals(&ApprovalFilter {
            statuses: vec![ApprovalStatus::Pending],
            ..Default::default()
        })
        .unwrap();
    assert_eq!(approval_ids(&pending), [approval.approval_id.as_str()]);
}

/// Exit mode: a decision for a parked run answers the next run of the same command, once:
/// the parked run is closed, and a third run asks anew.
pub fn a_decision_answers_one_rerun_once<S: StoreUnderTest>(s: &S) {
    let cmd = Cmd::new("rm", &["-i", "a.txt"]);
    let req = yes_no("rm");
    let mut op = s.operator();
    let mut a = Shim::start(s, &cmd);
    let ap = a.ask_pending(&req);
    a.park();
    decide(op.as_mut(), &ap.approval_id, "y", "alice");

    let mut b = Shim::start(s, &cmd);
    let done = b.ask(&req);
    let PromptResolution::Answer { approval, value } = done.value else {
        panic!("{:?}", done.value)
    };
    assert_eq!(value, "y");
    assert_eq!(approval.approval_id, ap.approval_id);
    assert_eq!(approval.consumed_by.as_deref(), Some(b.id()));
    assert_eq!(
        status_changes(&done.effects.events, a.id()),
        [(RunStatus::Completed, Some(RunStatus::WaitingApproval))],
        "the parked run's close is logged"
    );
    assert_eq!(done.effects.status, None, "the asking run goes on");
    let stored = approval_now(op.as_mut(), &ap.approval_id);
    assert_eq!(stored.consumed_by.as_deref(), Some(b.id()));
    assert!(stored.consumed_at.is_some());
    assert_eq!(stored.resumed_run_id.as_deref(), Some(b.id()));
    let parked = run_now(op.as_mut(), a.id());
    assert_eq!(parked.status, RunStatus::Completed);
    assert!(
        parked.reason.as_deref().is_some_and(|r| r.contains(b.id())),
        "{:?}",
        parked.reason
    );
    assert_eq!(run_now(op.as_mut(), b.id()).status, RunStatus::Running);

    let mut c = Shim::start(s, &cmd);
    let c_ap = c.ask_pending(&req);
    assert_ne!(c_ap.approval_id, ap.approval_id, "single use");
    assert_eq!(
        run_now(op.as_mut(), c.id()).status,
        RunStatus::WaitingApproval
    );
}

/// A rejection ends the re-run (`Rejected`) and fails the parked run; it is used up too.
pub fn a_rejection_ends_the_rerun<S: StoreUnderTest>(s: &S) {
    let cmd = Cmd::new("rm", &["-i", "c.txt"]);
    let req = yes_no("rm");
    let mut op = s.operator();
    let mut a = Shim::start(s, &cmd);
    let ap = a.ask_pending(&req);
    a.park();
    decide(op.as_mut(), &ap.approval_id, "reject", "alice");
    let mut b = Shim::start(s, &cmd);
    let done = b.ask(&req);
    let PromptResolution::Rejected { approval } = done.value else {
        panic!("{:?}", done.value)
    };
    assert_eq!(approval.approval_id, ap.approval_id);
    assert_eq!(approval.status, ApprovalStatus::Rejected);
    assert_eq!(approval.decided_by.as_deref(), who(s, "alice").as_deref());
    assert_eq!(run_now(op.as_mut(), a.id()).status, RunStatus::Failed);
    assert_eq!(
        status_changes(&done.effects.events, a.id()),
        [(RunStatus::Failed, Some(RunStatus::WaitingApproval))]
    );
    let mut c = Shim::start(s, &cmd);
    assert_ne!(c.ask_pending(&req).approval_id, ap.approval_id);
}

/// A config policy answers (or rejects) a prompt as an approval decided by `policy:NAME`,
/// used up at once; a policy whose value does not answer is skipped with a warning.
pub fn a_policy_answers_with_its_channel<S: StoreUnderTest>(s: &S) {
    let cmd = Cmd::new("rm", &["-i", "d.txt"]);
    let mut op = s.operator();
    let mut a = Shim::start(s, &cmd);
    let req = PromptRequest {
        policies: vec![
            ("typo".into(), "maybe".into()),
            ("yes-to-rm".into(), "y".into()),
        ],
        ..yes_no("rm")
    };
    let done = a.ask(&req);
    if !s.takes_runner_policies() {
        // Only a person (or an operator's remembered decision) answers here.
        let PromptResolution::Pending { approval, .. } = done.value else {
            panic!("a runner's policy answered: {:?}", done.value)
        };
        assert_eq!(approval.decided_by, None);
        return;
    }
    let PromptResolution::Answer { approval, value } = done.value else {
        panic!("{:?}", done.value)
    };
    assert_eq!(value, "y");
    assert_eq!(approval.status, ApprovalStatus::Approved);
    assert_eq!(approval.decided_by.as_deref(), Some("policy:yes-to-rm"));
    assert_eq!(
        approval.decision_channel.as_deref(),
        Some("policy:yes-to-rm")
    );
    assert_eq!(approval.consumed_by.as_deref(), Some(a.id()));
    assert_eq!(
        names(&done.effects.events),
        ["approval_needed", "approval_status_change"]
    );
    assert_eq!(
        done.effects.warnings.len(),
        1,
        "{:?}",
        done.effects.warnings
    );
    assert!(done.effects.warnings[0].contains("typo"));
    assert_eq!(done.effects.status, None);
    let stored = approval_now(op.as_mut(), &approval.approval_id);
    assert_eq!(stored.status, ApprovalStatus::Approved);
    assert_eq!(stored.chosen_value.as_deref(), Some("y"));
    assert_eq!(stored.decision_channel.as_deref(), Some("policy:yes-to-rm"));
    assert_eq!(stored.consumed_by.as_deref(), Some(a.id()));
    assert_eq!(run_now(op.as_mut(), a.id()).status, RunStatus::Running);

    // Used up: the same command without the policy asks.
    let mut b = Shim::start(s, &cmd);
    b.ask_pending(&yes_no("rm"));

    let other = Cmd::new("rm", &["-i", "e.txt"]);
    let mut c = Shim::start(s, &other);
    let done = c.ask(&PromptRequest {
        policies: vec![("no-rm".into(), "reject".into())],
        ..yes_no("rm")
    });
    let PromptResolution::Rejected { approval } = done.value else {
        panic!("{:?}", done.value)
    };
    assert_eq!(approval.status, ApprovalStatus::Rejected);
    assert_eq!(approval.decision_channel.as_deref(), Some("policy:no-rm"));
    assert_eq!(
        approval_now(op.as_mut(), &approval.approval_id).status,
        ApprovalStatus::Rejected
    );
}

/// A retry of a parked run's command takes its pending approval over (even when the old
/// shim's pid is alive: parking, not the pid, says nobody supervises it); the parked run is
/// closed as superseded.
pub fn takeover_of_a_parked_runs_approval<S: StoreUnderTest>(s: &S) {
    let cmd = Cmd::new("rm", &["-i", "f.txt"]);
    let req = yes_no("rm");
    let mut op = s.operator();
    let mut a = Shim::start(s, &cmd);
    let ap = a.ask_pending(&req);
    a.park();
    let mut b = Shim::start(s, &cmd);
    let host = FakeHost::alive(&[a.run.shim_pid.unwrap(), b.run.shim_pid.unwrap()]);
    let done = b.ask_on(&req, &host);
    let PromptResolution::Pending {
        approval,
        taken_over,
    } = done.value
    else {
        panic!("{:?}", done.value)
    };
    assert!(taken_over);
    assert_eq!(approval.approval_id, ap.approval_id);
    assert_eq!(approval.tool_run_id, b.id());
    assert_eq!(done.effects.status, Some(RunStatus::WaitingApproval));
    assert_eq!(
        status_changes(&done.effects.events, a.id()),
        [(RunStatus::Cancelled, Some(RunStatus::WaitingApproval))]
    );
    assert_eq!(
        status_changes(&done.effects.events, b.id()),
        [(RunStatus::WaitingApproval, Some(RunStatus::Running))]
    );
    let stored = approval_now(op.as_mut(), &ap.approval_id);
    assert_eq!(stored.tool_run_id, b.id());
    assert_eq!(stored.status, ApprovalStatus::Pending);
    let old = run_now(op.as_mut(), a.id());
    assert_eq!(old.status, RunStatus::Cancelled);
    assert!(
        old.reason
            .as_deref()
            .is_some_and(|r| r.contains("superseded") && r.contains(b.id())),
        "{:?}",
        old.reason
    );
    assert_eq!(
        run_now(op.as_mut(), b.id()).status,
        RunStatus::WaitingApproval
    );
    assert_eq!(op.approvals(&Default::default()).unwrap().len(), 1);
}

/// A twin still supervised (wait mode, its shim alive) keeps its pending approval; the
/// retry asks anew.
pub fn no_takeover_from_a_supervised_twin<S: StoreUnderTest>(s: &S) {
    let cmd = Cmd::new("rm", &["-i", "g.txt"]);
    let req = yes_no("rm");
    let mut op = s.operator();
    let mut a = Shim::start(s, &cmd);
    let ap = a.ask_pending(&req);
    let mut b = Shim::start(s, &cmd);
    let host = FakeHost::alive(&[a.run.shim_pid.unwrap(), b.run.shim_pid.unwrap()]);
    let done = b.ask_on(&req, &host);
    let PromptResolution::Pending {
        approval,
        taken_over,
    } = done.value
    else {
        panic!("{:?}", done.value)
    };
    assert!(!taken_over);
    assert_ne!(approval.approval_id, ap.approval_id);
    assert_eq!(approval.tool_run_id, b.id());
    let kept = approval_now(op.as_mut(), &ap.approval_id);
    assert_eq!(kept.tool_run_id, a.id());
    assert_eq!(kept.status, ApprovalStatus::Pending);
    assert_eq!(
        run_now(op.as_mut(), a.id()).status,
        RunStatus::WaitingApproval
    );
    assert!(status_changes(&done.effects.events, a.id()).is_empty());
}

/// A waiting run whose shim is gone (not parked, not reconciled yet) has its approval
/// taken over by a retry.
pub fn takeover_from_a_run_whose_shim_is_gone<S: StoreUnderTest>(s: &S) {
    let cmd = Cmd::new("rm", &["-i", "h.txt"]);
    let req = yes_no("rm");
    let mut a = Shim::start(s, &cmd);
    let ap = a.ask_pending(&req);
    let mut b = Shim::start(s, &cmd);
    let done = b.ask(&req); // a host where only B's shim runs
    let PromptResolution::Pending {
        approval,
        taken_over,
    } = done.value
    else {
        panic!("{:?}", done.value)
    };
    assert!(taken_over);
    assert_eq!(approval.approval_id, ap.approval_id);
    let mut op = s.operator();
    assert_eq!(
        approval_now(op.as_mut(), &ap.approval_id).tool_run_id,
        b.id()
    );
}

fn deploy_request(approval_id: Option<&str>) -> CooperativeRequest {
    CooperativeRequest {
        approval_id: approval_id.map(str::to_owned),
        tool_run_id: None,
        question: "Deploy build 42 to production?".into(),
        options: vec![
            ApprovalOption {
                value: "yes".into(),
                label: "Deploy".into(),
                keys: None,
            },
            ApprovalOption {
                value: "no".into(),
                label: "Do not".into(),
                keys: None,
            },
        ],
        default: Some("no".into()),
        allows_text: false,
        context: Some("build 42 passed".into()),
        expires_in_seconds: None,
    }
}

/// A cooperative request: a pending approval and the run waits; re-run with the decision
/// (checked and used up by `check_auto_approval`), the same request is `AlreadyDecided`.
pub fn cooperative_pending_then_already_decided<S: StoreUnderTest>(s: &S) {
    let cmd = Cmd::new("deployer", &["--prod"]);
    let mut op = s.operator();
    let mut a = Shim::start(s, &cmd);
    let done = a
        .store
        .cooperative(
            &a.who,
            &deploy_request(None),
            Some(Duration::from_secs(600)),
            OnExpire::Reject,
        )
        .unwrap();
    let Cooperative::Pending(ap) = done.value else {
        panic!("{:?}", done.value)
    };
    assert_eq!(
        names(&done.effects.events),
        ["approval_needed", "tool_status_change"]
    );
    assert_eq!(done.effects.status, Some(RunStatus::WaitingApproval));
    assert_eq!(ap.prompt_kind, Some(PromptKind::Cooperative));
    assert_eq!(ap.status, ApprovalStatus::Pending);
    assert_eq!(ap.question, "Deploy build 42 to production?");
    assert_eq!(option_values(&ap), ["yes", "no"]);
    assert_eq!(ap.context.as_deref(), Some("build 42 passed"));
    assert_eq!(ap.tool_run_id, a.id());
    assert!(ap.expires_at.is_some());
    assert_eq!(
        approval_now(op.as_mut(), &ap.approval_id).status,
        ApprovalStatus::Pending
    );
    assert_eq!(
        run_now(op.as_mut(), a.id()).status,
        RunStatus::WaitingApproval
    );
    a.park();
    decide(op.as_mut(), &ap.approval_id, "yes", "alice");

    if !worker_claim(s, &ap.approval_id, "worker:h:1:1") {
        // Nobody here runs it again: its runner's own retry asks anew.
        return;
    }
    let mut b = Shim::resume_of(s, &cmd, a.id());
    let checked = b
        .store
        .check_auto_approval(&b.who, &ap.approval_id, "yes", Some(a.id()))
        .unwrap();
    assert_eq!(
        checked.value.as_ref().map(|a| a.approval_id.as_str()),
        Ok(ap.approval_id.as_str())
    );
    assert_eq!(
        status_changes(&checked.effects.events, a.id()),
        [(RunStatus::Completed, Some(RunStatus::WaitingApproval))]
    );
    let before = op.approvals(&Default::default()).unwrap().len();
    let done = b
        .store
        .cooperative(&b.who, &deploy_request(None), None, OnExpire::Reject)
        .unwrap();
    assert!(
        matches!(done.value, Cooperative::AlreadyDecided),
        "{:?}",
        done.value
    );
    assert!(done.effects.events.is_empty());
    assert_eq!(done.effects.status, None);
    assert_eq!(op.approvals(&Default::default()).unwrap().len(), before);
    assert_eq!(run_now(op.as_mut(), b.id()).status, RunStatus::Running);
    assert_eq!(run_now(op.as_mut(), a.id()).status, RunStatus::Completed);
}

/// A cooperative tool may name its approval (a safe `AP-` id); a name already taken is
/// replaced by a fresh id.
pub fn cooperative_keeps_a_safe_approval_id_once<S: StoreUnderTest>(s: &S) {
    let cmd = Cmd::new("deployer", &["--staging"]);
    let mut a = Shim::start(s, &cmd);
    let wanted = id::new_approval_id();
    let Cooperative::Pending(first) = a
        .store
        .cooperative(
            &a.who,
            &deploy_request(Some(&wanted)),
            None,
            OnExpire::Reject,
        )
        .unwrap()
        .value
    else {
        panic!("pending")
    };
    assert_eq!(first.approval_id, wanted);
    let mut b = Shim::start(s, &Cmd::new("deployer", &["--qa"]));
    let Cooperative::Pending(second) = b
        .store
        .cooperative(
            &b.who,
            &deploy_request(Some(&wanted)),
            None,
            OnExpire::Reject,
        )
        .unwrap()
        .value
    else {
        panic!("pending")
    };
    assert_ne!(second.approval_id, wanted);
    assert!(id::has_shape(&second.approval_id, id::APPROVAL_PREFIX));
    let mut op = s.operator();
    assert_eq!(approval_now(op.as_mut(), &wanted).tool_run_id, a.id());
    assert_eq!(
        approval_now(op.as_mut(), &second.approval_id).tool_run_id,
        b.id()
    );
}

/// `check_auto_approval`: `AUTO_APPROVAL` is a single-use token for one question — only a
/// cooperative request's decision, with exactly this value, of this command, claimed by a
/// worker for resuming the run that asked, and not used yet, makes it worth anything.
pub fn check_auto_approval_cases<S: StoreUnderTest>(s: &S) {
    let cmd = Cmd::new("deployer", &["--prod"]);
    let mut op = s.operator();
    let mut a = Shim::start(s, &cmd);
    let Cooperative::Pending(ap) = a
        .store
        .cooperative(&a.who, &deploy_request(None), None, OnExpire::Reject)
        .unwrap()
        .value
    else {
        panic!("pending")
    };
    a.park();
    let mut b = Shim::start(s, &cmd);
    let asker = a.id().to_owned();
    let check_from = |shim: &mut Shim, id: &str, value: &str, from: Option<&str>| {
        shim.store
            .check_auto_approval(&shim.who, id, value, from)
            .expect("check_auto_approval")
            .value
    };
    let check =
        |shim: &mut Shim, id: &str, value: &str| check_from(shim, id, value, Some(asker.as_str()));
    // Not decided yet.
    let err = check(&mut b, &ap.approval_id, "yes").unwrap_err();
    assert!(err.contains(&ap.approval_id), "{err}");
    decide(op.as_mut(), &ap.approval_id, "yes", "alice");
    // No such approval.
    let err = check(&mut b, "AP-NOPE", "yes").unwrap_err();
    assert!(err.contains("AP-NOPE"), "{err}");
    // Another value than decided.
    assert!(check(&mut b, &ap.approval_id, "no").is_err());
    // Another command.
    let mut x = Shim::start(s, &Cmd::new("deployer", &["--other"]));
    let err = check(&mut x, &ap.approval_id, "yes").unwrap_err();
    assert!(err.contains("another command"), "{err}");
    assert_eq!(
        approval_now(op.as_mut(), &ap.approval_id).consumed_at,
        None,
        "refusals use nothing up"
    );
    // Decided, but no worker claimed it to resume A: a caller's own variable.
    let err = check(&mut b, &ap.approval_id, "yes").unwrap_err();
    assert!(err.contains("claimed"), "{err}");
    if !worker_claim(s, &ap.approval_id, "worker:h:1:1") {
        // No worker resumes it, so nothing ever makes the variable a real decision.
        return;
    }
    // Claimed, but this run does not say it resumes A.
    let err = check_from(&mut b, &ap.approval_id, "yes", None).unwrap_err();
    assert!(err.contains("claimed"), "{err}");
    let err = check_from(&mut b, &ap.approval_id, "yes", Some("TR-OTHER")).unwrap_err();
    assert!(err.contains("claimed"), "{err}");
    // Claimed, and this run says it resumes A, but it is not the run the worker started
    // for it (B started before the decision): refused.
    let err = check(&mut b, &ap.approval_id, "yes").unwrap_err();
    assert!(err.contains("used"), "{err}");
    // The real thing: used up by the worker's resume of A.
    let mut r = Shim::resume_of(s, &cmd, &asker);
    let ok = check(&mut r, &ap.approval_id, "yes").expect("a real decision");
    assert_eq!(ok.approval_id, ap.approval_id);
    assert_eq!(ok.chosen_value.as_deref(), Some("yes"));
    assert_eq!(
        approval_now(op.as_mut(), &ap.approval_id)
            .consumed_by
            .as_deref(),
        Some(r.id())
    );
    // Already used.
    let mut c = Shim::start(s, &cmd);
    let err = check(&mut c, &ap.approval_id, "yes").unwrap_err();
    assert!(err.contains("used"), "{err}");

    // A prompt's decision is never handed to the tool: it is typed at its prompt, once.
    let rm = Cmd::new("rm", &["-i", "z.txt"]);
    let mut p = Shim::start(s, &rm);
    let pap = p.ask_pending(&yes_no("rm"));
    p.park();
    decide(op.as_mut(), &pap.approval_id, "y", "alice");
    assert!(worker_claim(s, &pap.approval_id, "worker:h:1:1"));
    let mut q = Shim::resume_of(s, &rm, p.id());
    let err = check_from(&mut q, &pap.approval_id, "y", Some(p.id())).unwrap_err();
    assert!(err.contains("prompt"), "{err}");
    assert_eq!(
        approval_now(op.as_mut(), &pap.approval_id).consumed_at,
        None
    );
    let PromptResolution::Answer { value, .. } = q.ask(&yes_no("rm")).value else {
        panic!("the prompt is answered")
    };
    assert_eq!(value, "y");
}

/// Overdue approvals expire (`system:expiry`): rejected, or answered with the default
/// where asked with `on_expire = default`; a re-run finds the expiry.
pub fn runner_expire_due<S: StoreUnderTest>(s: &S) {
    let (c1, c2, c3) = (
        Cmd::new("rm", &["-i", "1"]),
        Cmd::new("rm", &["-i", "2"]),
        Cmd::new("rm", &["-i", "3"]),
    );
    let mut op = s.operator();
    // First, so that its ask expires nothing of the others.
    let mut a3 = Shim::start(s, &c3);
    let ap3 = a3.ask_pending(&yes_no("rm"));
    let mut a1 = Shim::start(s, &c1);
    let ap1 = a1.ask_pending(&yes_no_expiring("rm", SHORT_TTL, OnExpire::Reject));
    a1.park();
    let mut a2 = Shim::start(s, &c2);
    let ap2 = a2.ask_pending(&yes_no_expiring("rm", SHORT_TTL, OnExpire::Default));
    let defaults = s.honours_expiry_defaults();
    assert_eq!(
        ap2.expire_action,
        if defaults { "default" } else { "reject" }
    );
    a2.park();
    wait_out_short_ttl();
    let mut runner = s.runner();
    let done = runner.expire_due().unwrap();
    let mut expired = approval_ids(&done.value);
    expired.sort();
    let mut want = vec![ap1.approval_id.as_str(), ap2.approval_id.as_str()];
    want.sort();
    assert_eq!(expired, want);
    assert_eq!(
        names(&done.effects.events),
        ["approval_status_change", "approval_status_change"]
    );
    let e1 = approval_now(op.as_mut(), &ap1.approval_id);
    assert_eq!(e1.status, ApprovalStatus::Expired);
    assert_eq!(e1.decided_by.as_deref(), Some("system:expiry"));
    assert_eq!(e1.decision_channel.as_deref(), Some("system:expiry"));
    assert_eq!(e1.chosen_value, None);
    let e2 = approval_now(op.as_mut(), &ap2.approval_id);
    assert_eq!(e2.status, ApprovalStatus::Expired);
    assert_eq!(e2.decided_by.as_deref(), Some("system:expiry"));
    assert_eq!(
        e2.chosen_value.as_deref(),
        if defaults { Some("n") } else { None },
        "the default, where the store takes a runner's word for it"
    );
    assert_eq!(
        approval_now(op.as_mut(), &ap3.approval_id).status,
        ApprovalStatus::Pending
    );
    let again = runner.expire_due().unwrap();
    assert!(again.value.is_empty());
    assert!(again.effects.events.is_empty());

    if defaults {
        let mut r2 = Shim::start(s, &c2);
        let PromptResolution::Answer { value, approval } = r2.ask(&yes_no("rm")).value else {
            panic!("expired with the default answers")
        };
        assert_eq!(
            (value.as_str(), approval.approval_id.as_str()),
            ("n", ap2.approval_id.as_str())
        );
    }
    let mut r1 = Shim::start(s, &c1);
    let PromptResolution::Rejected { approval } = r1.ask(&yes_no("rm")).value else {
        panic!("expired without a default ends the re-run")
    };
    assert_eq!(approval.approval_id, ap1.approval_id);
}

/// The change mark stays while nothing changes, and moves after another session writes.
pub fn change_mark_moves_after_another_sessions_write<S: StoreUnderTest>(s: &S) {
    let mut watcher = s.runner();
    let mut op = s.operator();
    let w1 = watcher.change_mark().unwrap();
    let o1 = op.change_mark().unwrap();
    assert_eq!(watcher.change_mark().unwrap(), w1, "no write, no change");
    assert_eq!(op.change_mark().unwrap(), o1);
    let cmd = Cmd::new("make", &["watch"]);
    let mut shim = Shim::start(s, &cmd);
    let w2 = watcher.change_mark().unwrap();
    let o2 = op.change_mark().unwrap();
    assert_ne!(w2, w1, "a run recorded by another session");
    assert_ne!(o2, o1);
    // Liveness too: a heartbeat, then output (each moves what the dashboard shows).
    let mut before = w2;
    for touch in [
        hr_shared::runs::Touch {
            supervisor_heartbeat_at: Some("2026-11-27T23:00:00.000Z".into()),
            ..Default::default()
        },
        hr_shared::runs::Touch {
            last_output_at: Some("2026-11-27T23:00:01.000Z".into()),
            ..Default::default()
        },
    ] {
        shim.write(vec![RunWrite::Touch(touch)]);
        let now = watcher.change_mark().unwrap();
        assert_ne!(now, before, "a heartbeat or output mark by another session");
        before = now;
    }
    let w2 = before;
    let ap = shim.ask_pending(&yes_no("make"));
    let w3 = watcher.change_mark().unwrap();
    assert_ne!(w3, w2, "an approval asked by another session");
    let mut decider_session = s.operator();
    decide(decider_session.as_mut(), &ap.approval_id, "y", "alice");
    assert_ne!(watcher.change_mark().unwrap(), w3, "a decision");
    assert_ne!(op.change_mark().unwrap(), o2);
}

/// Two re-runs of a parked command ask at once, on two sessions: the decision answers
/// exactly one of them; the other asks anew.
pub fn two_reruns_race_for_one_decision<S: StoreUnderTest>(s: &S) {
    let mut op = s.operator();
    for round in 0..4 {
        let cmd = Cmd::new("rm", &["-i", &format!("race{round}")]);
        let mut a = Shim::start(s, &cmd);
        let ap = a.ask_pending(&yes_no("rm"));
        a.park();
        decide(op.as_mut(), &ap.approval_id, "y", "alice");
        let mut reruns = [Shim::start(s, &cmd), Shim::start(s, &cmd)];
        for r in &mut reruns {
            r.store.connect().unwrap();
        }
        let barrier = Barrier::new(2);
        let outcomes: Vec<(String, PromptResolution)> = std::thread::scope(|scope| {
            let handles: Vec<_> = reruns
                .iter_mut()
                .map(|r| {
                    let barrier = &barrier;
                    scope.spawn(move || {
                        barrier.wait();
                        (r.id().to_owned(), r.ask(&yes_no("rm")).value)
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let answered: Vec<&str> = outcomes
            .iter()
            .filter(|(_, o)| matches!(o, PromptResolution::Answer { approval, .. } if approval.approval_id == ap.approval_id))
            .map(|(id, _)| id.as_str())
            .collect();
        assert_eq!(answered.len(), 1, "{outcomes:?}");
        assert!(
            outcomes.iter().any(|(_, o)| matches!(
                o,
                PromptResolution::Pending { approval, .. } if approval.approval_id != ap.approval_id
            )),
            "{outcomes:?}"
        );
        assert_eq!(
            approval_now(op.as_mut(), &ap.approval_id)
                .consumed_by
                .as_deref(),
            Some(answered[0])
        );
    }
}

/// Two retries of a parked command ask at once: exactly one takes its pending approval
/// over.
pub fn two_retries_race_for_one_takeover<S: StoreUnderTest>(s: &S) {
    let mut op = s.operator();
    for round in 0..4 {
        let cmd = Cmd::new("rm", &["-i", &format!("takeover{round}")]);
        let mut a = Shim::start(s, &cmd);
        let ap = a.ask_pending(&yes_no("rm"));
        a.park();
        let mut retries = [Shim::start(s, &cmd), Shim::start(s, &cmd)];
        let host = FakeHost::alive(&[
            retries[0].run.shim_pid.unwrap(),
            retries[1].run.shim_pid.unwrap(),
        ]);
        for r in &mut retries {
            r.store.connect().unwrap();
        }
        let barrier = Barrier::new(2);
        let outcomes: Vec<(String, PromptResolution)> = std::thread::scope(|scope| {
            let handles: Vec<_> = retries
                .iter_mut()
                .map(|r| {
                    let (barrier, host) = (&barrier, &host);
                    scope.spawn(move || {
                        barrier.wait();
                        (r.id().to_owned(), r.ask_on(&yes_no("rm"), host).value)
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let took: Vec<&str> = outcomes
            .iter()
            .filter(|(_, o)| {
                matches!(
                    o,
                    PromptResolution::Pending {
                        taken_over: true,
                        ..
                    }
                )
            })
            .map(|(id, _)| id.as_str())
            .collect();
        assert_eq!(took.len(), 1, "{outcomes:?}");
        assert_eq!(
            approval_now(op.as_mut(), &ap.approval_id).tool_run_id,
            took[0]
        );
    }
}

/// A question no rule knows, answered with free text: `decide` takes any acceptable text
/// (and `approve` is the default), and the re-run is answered with it.
pub fn free_text_decision_answers_a_text_prompt<S: StoreUnderTest>(s: &S) {
    let line = "Name of the release:";
    let req = |tool: &str| PromptRequest {
        prompt: Prompt {
            kind: PromptKind::Text,
            secret: false,
            rule: "generic:text-default".into(),
            question: line.into(),
            prompt_line: line.into(),
            context: line.into(),
            options: Vec::new(),
            default: Some("v1".into()),
            allows_text: true,
            alternative: None,
            select: None,
        },
        prompt_fingerprint: fingerprint::prompt(tool, line),
        policies: Vec::new(),
        ttl: None,
        on_expire: OnExpire::Reject,
    };
    let cmd = Cmd::new("release", &[]);
    let mut op = s.operator();
    let mut a = Shim::start(s, &cmd);
    let ap = a.ask_pending(&req("release"));
    assert!(ap.allows_text);
    assert_eq!(ap.expires_at, None, "no TTL, no expiry");
    assert_eq!(
        op.decide(&ap.approval_id, "two\nlines", &decider("alice"))
            .unwrap()
            .value,
        DecideOutcome::Invalid(hr_shared::approvals::InvalidValue {
            value: "two\nlines".into(),
            valid: vec!["approve".into(), "reject".into(), "any text".into()],
            note: String::new(),
        })
    );
    let d = decide(op.as_mut(), &ap.approval_id, "v2 (spring)", "alice");
    assert_eq!(d.chosen_value.as_deref(), Some("v2 (spring)"));
    a.park();
    let mut b = Shim::start(s, &cmd);
    let PromptResolution::Answer { value, .. } = b.ask(&req("release")).value else {
        panic!("the text answers")
    };
    assert_eq!(value, "v2 (spring)");
    // Free text is the tool's business: kept while its chain is live (a resume of B would
    // type it again), gone from the row once the chain ends, and audited only as its
    // digest.
    let used = approval_now(op.as_mut(), &ap.approval_id);
    assert_eq!(
        used.chosen_value.as_deref(),
        Some("v2 (spring)"),
        "{used:?}"
    );
    assert_eq!(used.kept_for.as_deref(), Some(b.id()));
    b.end(RunStatus::Completed, 0);
    let used = approval_now(op.as_mut(), &ap.approval_id);
    assert_eq!(used.chosen_value, None, "{used:?}");
    assert_eq!(used.kept_for, None);
    assert!(
        used.consumed_reason
            .as_deref()
            .is_some_and(|r| r.contains("completed")),
        "{used:?}"
    );
    let audited = op.audit_of_approval(&ap.approval_id).unwrap();
    assert!(
        audited.iter().all(|e| !e.data.contains("spring")),
        "{audited:?}"
    );
    assert!(
        audited.iter().any(|e| e.data.contains("sha256:")),
        "{audited:?}"
    );
    // A question that asks for a secret takes no free text at all.
    let token_line = "GitHub token:";
    let mut t = Shim::start(s, &Cmd::new("gh", &["auth", "login"]));
    let tap = t.ask_pending(&PromptRequest {
        prompt: Prompt {
            question: token_line.into(),
            prompt_line: token_line.into(),
            context: token_line.into(),
            default: None,
            ..req("gh").prompt
        },
        prompt_fingerprint: fingerprint::prompt("gh", token_line),
        ..req("gh")
    });
    assert!(matches!(
        op.decide(&tap.approval_id, "ghp_not_a_real_token", &decider("alice"))
            .unwrap()
            .value,
        DecideOutcome::Invalid(_)
    ));

    let mut c = Shim::start(s, &Cmd::new("release", &["--again"]));
    let ap = c.ask_pending(&req("release"));
    let d = decide(op.as_mut(), &ap.approval_id, "approve", "alice");
    assert_eq!(
        d.chosen_value.as_deref(),
        Some("v1"),
        "approve is the default"
    );
    assert_eq!(c.store.approval("AP-NOPE").unwrap(), None);
}
