//! The operator side: what `monitor` reads and decides, and the worker's resumes.

use super::*;
use hr_shared::approvals::ApprovalFilter;
use hr_shared::control::CancelOutcome;
use hr_shared::event::CooperativeRequest;
use hr_shared::gc::GcReport;
use hr_shared::rules::VANISHED;
use hr_shared::runs::RunFilter;
use hr_shared::status::ApprovalStatus;
use hr_shared::store::{Cooperative, RememberScope};
use std::sync::Barrier;

/// Five runs, oldest first: ids and start times in creation order, two tools, two
/// executions, several statuses; one with metadata and text a terminal could act on.
fn seed_five<S: StoreUnderTest>(s: &S) -> Vec<ToolRun> {
    let ids = ordered_run_ids(5);
    let spec = [
        ("make", "EX-A", RunStatus::Completed),
        ("make", "EX-B", RunStatus::Failed),
        ("apt", "EX-A", RunStatus::Running),
        ("make", "EX-A", RunStatus::Running),
        ("apt", "EX-B", RunStatus::WaitingApproval),
    ];
    let mut rows = Vec::new();
    for (i, (id, (tool, ex, status))) in ids.iter().zip(spec).enumerate() {
        let cmd = Cmd::new(tool, &["--n", &i.to_string()]);
        let mut row = cmd.row(status);
        row.tool_run_id = id.clone();
        row.execution_id = Some(ex.to_owned());
        row.started_at = format!("200{}-01-01T00:00:00.000Z", i + 1);
        row.updated_at = row.started_at.clone();
        if status.is_final() {
            row.exit_code = Some(i as i32);
            row.completed_at = Some(format!("200{}-01-01T00:05:00.000Z", i + 1));
            row.reason = Some(format!("exited with code {i}"));
        }
        if i == 1 {
            row.metadata = Some(serde_json::json!({"ci": {"job": 7, "tags": ["a", "b"]}}));
            row.last_error_msg = Some(
                "quote \" backslash \\ newline \n bidi \u{202e} del \u{7f} c1 \u{9b} emoji 🦀"
                    .into(),
            );
            row.supervisor_heartbeat_at = Some(row.started_at.clone());
        }
        Shim::start_row(s, &cmd, row.clone());
        rows.push(row);
    }
    rows
}

/// `run` returns a row as it was recorded; `runs` filters by status, tool, execution,
/// start time and count, newest first.
pub fn run_and_runs_with_filters<S: StoreUnderTest>(s: &S) {
    let rows = seed_five(s);
    let mut op = s.operator();
    for row in &rows {
        assert_eq!(
            run_now(op.as_mut(), &row.tool_run_id),
            s.stored_row(row.clone()),
            "round trip"
        );
    }
    assert_eq!(op.run("TR-NOPE").unwrap(), None);
    let id = |i: usize| rows[i].tool_run_id.as_str();
    let list = |op: &mut dyn OperatorStore, f: RunFilter| -> Vec<String> {
        run_ids(&op.runs(&f).unwrap())
            .into_iter()
            .map(str::to_owned)
            .collect()
    };
    assert_eq!(
        list(op.as_mut(), RunFilter::default()),
        [id(4), id(3), id(2), id(1), id(0)],
        "newest first"
    );
    assert_eq!(
        list(
            op.as_mut(),
            RunFilter {
                statuses: vec![RunStatus::Running, RunStatus::WaitingApproval],
                ..Default::default()
            }
        ),
        [id(4), id(3), id(2)]
    );
    assert_eq!(
        list(
            op.as_mut(),
            RunFilter {
                tool: Some("apt".into()),
                ..Default::default()
            }
        ),
        [id(4), id(2)]
    );
    assert_eq!(
        list(
            op.as_mut(),
            RunFilter {
                execution_id: Some("EX-A".into()),
                ..Default::default()
            }
        ),
        [id(3), id(2), id(0)]
    );
    assert_eq!(
        list(
            op.as_mut(),
            RunFilter {
                since: Some(rows[2].started_at.clone()),
                ..Default::default()
            }
        ),
        [id(4), id(3), id(2)],
        "since is inclusive"
    );
    assert_eq!(
        list(
            op.as_mut(),
            RunFilter {
                limit: Some(2),
                ..Default::default()
            }
        ),
        [id(4), id(3)]
    );
    assert_eq!(
        list(
            op.as_mut(),
            RunFilter {
                statuses: vec![RunStatus::Running],
                tool: Some("make".into()),
                since: Some(rows[1].started_at.clone()),
                ..Default::default()
            }
        ),
        [id(3)]
    );
    assert!(
        list(
            op.as_mut(),
            RunFilter {
                tool: Some("nothing".into()),
                ..Default::default()
            }
        )
        .is_empty()
    );
}

/// `supervised_runs`: live runs without an exit code (not parked, not stall-ended, not
/// queued or ended), newest first, at most `limit`.
pub fn supervised_runs_are_live_and_unended<S: StoreUnderTest>(s: &S) {
    let ids = ordered_run_ids(8);
    let cmd = Cmd::new("make", &["all"]);
    let mut want = Vec::new();
    let specs: [(RunStatus, Option<i32>, bool); 8] = [
        (RunStatus::Running, None, true),
        (RunStatus::WaitingApproval, None, true),
        (RunStatus::Stalled, None, true),
        (RunStatus::WaitingApproval, Some(90), false),
        (RunStatus::Stalled, Some(92), false),
        (RunStatus::Completed, Some(0), false),
        (RunStatus::Queued, None, false),
        (RunStatus::Running, None, true),
    ];
    for (id, (status, exit_code, supervised)) in ids.iter().zip(specs) {
        let mut row = cmd.row(status);
        row.tool_run_id = id.clone();
        row.exit_code = exit_code;
        if exit_code.is_some() && exit_code != Some(90) {
            row.completed_at = Some(time::now_rfc3339());
        }
        if id == &ids[7] {
            row.host = Some("elsewhere".into());
        }
        Shim::start_row(s, &cmd, row);
        if supervised {
            want.push(id.as_str());
        }
    }
    want.reverse();
    let mut op = s.operator();
    assert_eq!(run_ids(&op.supervised_runs(None).unwrap()), want);
    assert_eq!(run_ids(&op.supervised_runs(Some(2)).unwrap()), want[..2]);
}

/// `export_runs_json` writes a JSON array equal to `runs` for the same filter, and says
/// how many.
pub fn export_runs_json_equals_runs<S: StoreUnderTest>(s: &S) {
    seed_five(s);
    let mut op = s.operator();
    for filter in [
        RunFilter::default(),
        RunFilter {
            tool: Some("apt".into()),
            ..Default::default()
        },
        RunFilter {
            statuses: vec![RunStatus::Failed],
            ..Default::default()
        },
        RunFilter {
            limit: Some(3),
            since: Some("2002-01-01T00:00:00.000Z".into()),
            ..Default::default()
        },
        RunFilter {
            tool: Some("nothing".into()),
            ..Default::default()
        },
    ] {
        let mut out = Vec::new();
        let n = op.export_runs_json(&filter, &mut out).expect("export");
        let text = String::from_utf8(out).expect("UTF-8");
        let parsed: serde_json::Value =
            serde_json::from_str(&text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"));
        assert!(parsed.is_array(), "{text}");
        let exported: Vec<ToolRun> = serde_json::from_value(parsed).expect("runs");
        let listed = op.runs(&filter).unwrap();
        assert_eq!(exported, listed, "{filter:?}");
        assert_eq!(n, listed.len());
    }
}

/// Three approvals of three runs, oldest first: pending (make, EX-A), approved (apt,
/// EX-B), rejected (make, EX-B).
fn seed_three_approvals<S: StoreUnderTest>(s: &S) -> (Vec<Shim>, Vec<Approval>) {
    seed_approvals(
        s,
        &[
            ("make", "EX-A", None),
            ("apt", "EX-B", Some("y")),
            ("make", "EX-B", Some("reject")),
        ],
    )
}

/// Approvals of runs of `tool` in execution `ex`, oldest first, each decided with `value`
/// when there is one.
fn seed_approvals<S: StoreUnderTest>(
    s: &S,
    seeds: &[(&str, &str, Option<&str>)],
) -> (Vec<Shim>, Vec<Approval>) {
    let mut op = s.operator();
    let mut shims = Vec::new();
    let mut aps = Vec::new();
    for (i, &(tool, ex, value)) in seeds.iter().enumerate() {
        let cmd = Cmd::new(tool, &["--n", &i.to_string()]);
        let mut row = cmd.row(RunStatus::Running);
        row.execution_id = Some(ex.to_owned());
        let mut shim = Shim::start_row(s, &cmd, row);
        let ap = shim.ask_pending(&yes_no(tool));
        if let Some(v) = value {
            decide(op.as_mut(), &ap.approval_id, v, "alice");
        }
        shims.push(shim);
        aps.push(ap);
        // Ids made in one millisecond need not sort by creation.
        std::thread::sleep(Duration::from_millis(3));
    }
    (shims, aps)
}

/// The pending queue is listed oldest first (who has waited longest), and a limit keeps
/// the oldest; every other listing is newest first.
pub fn pending_approvals_are_listed_oldest_first<S: StoreUnderTest>(s: &S) {
    let (_shims, aps) = seed_approvals(
        s,
        &[
            ("make", "EX-A", None),
            ("apt", "EX-A", None),
            ("rm", "EX-A", Some("y")),
            ("git", "EX-A", None),
        ],
    );
    let mut op = s.operator();
    let id = |i: usize| aps[i].approval_id.clone();
    let list = |op: &mut dyn OperatorStore, f: ApprovalFilter| -> Vec<String> {
        approval_ids(&op.approvals(&f).unwrap())
            .into_iter()
            .map(str::to_owned)
            .collect()
    };
    let pending = ApprovalFilter {
        statuses: vec![ApprovalStatus::Pending],
        ..Default::default()
    };
    assert_eq!(list(op.as_mut(), pending.clone()), [id(0), id(1), id(3)]);
    assert_eq!(
        list(
            op.as_mut(),
            ApprovalFilter {
                limit: Some(2),
                ..pending
            }
        ),
        [id(0), id(1)]
    );
    assert_eq!(
        list(op.as_mut(), ApprovalFilter::default()),
        [id(3), id(2), id(1), id(0)]
    );
}

/// `approval` and `approvals`: by id; filtered by status, tool, run, execution, time and
/// count, newest first.
pub fn approval_and_approvals_with_filters<S: StoreUnderTest>(s: &S) {
    let (mut shims, aps) = seed_three_approvals(s);
    let mut op = s.operator();
    assert_eq!(op.approval("AP-NOPE").unwrap(), None);
    let a0 = approval_now(op.as_mut(), &aps[0].approval_id);
    assert_eq!(
        shims[0].store.approval(&aps[0].approval_id).unwrap(),
        Some(a0),
        "the runner reads what the operator reads"
    );
    let id = |i: usize| aps[i].approval_id.as_str();
    let list = |op: &mut dyn OperatorStore, f: ApprovalFilter| -> Vec<String> {
        approval_ids(&op.approvals(&f).unwrap())
            .into_iter()
            .map(str::to_owned)
            .collect()
    };
    assert_eq!(
        list(op.as_mut(), ApprovalFilter::default()),
        [id(2), id(1), id(0)]
    );
    assert_eq!(
        list(
            op.as_mut(),
            ApprovalFilter {
                statuses: vec![ApprovalStatus::Pending],
                ..Default::default()
            }
        ),
        [id(0)]
    );
    assert_eq!(
        list(
            op.as_mut(),
            ApprovalFilter {
                statuses: vec![ApprovalStatus::Approved, ApprovalStatus::Rejected],
                ..Default::default()
            }
        ),
        [id(2), id(1)]
    );
    assert_eq!(
        list(
            op.as_mut(),
            ApprovalFilter {
                tool: Some("make".into()),
                ..Default::default()
            }
        ),
        [id(2), id(0)]
    );
    assert_eq!(
        list(
            op.as_mut(),
            ApprovalFilter {
                tool_run_id: Some(shims[1].id().to_owned()),
                ..Default::default()
            }
        ),
        [id(1)]
    );
    assert_eq!(
        list(
            op.as_mut(),
            ApprovalFilter {
                execution_id: Some("EX-B".into()),
                ..Default::default()
            }
        ),
        [id(2), id(1)]
    );
    assert_eq!(
        list(
            op.as_mut(),
            ApprovalFilter {
                since: Some(aps[1].created_at.clone()),
                ..Default::default()
            }
        ),
        [id(2), id(1)],
        "since is inclusive"
    );
    assert_eq!(
        list(
            op.as_mut(),
            ApprovalFilter {
                limit: Some(1),
                ..Default::default()
            }
        ),
        [id(2)]
    );
    assert_eq!(
        list(
            op.as_mut(),
            ApprovalFilter {
                tool: Some("make".into()),
                statuses: vec![ApprovalStatus::Rejected],
                ..Default::default()
            }
        ),
        [id(2)]
    );
}

/// `decide`: first writer wins; a second decider gets `Conflict` naming the first; the same
/// decision again is `AlreadySame`; an invalid value lists the valid ones; an overdue
/// approval expires instead.
pub fn decide_first_writer_wins<S: StoreUnderTest>(s: &S) {
    let cmd = Cmd::new("rm", &["-i", "a.txt"]);
    let mut a = Shim::start(s, &cmd);
    let ap = a.ask_pending(&yes_no("rm"));
    let mut op = s.operator();

    let done = op
        .decide(&ap.approval_id, "maybe", &decider("alice"))
        .unwrap();
    let DecideOutcome::Invalid(e) = &done.value else {
        panic!("{:?}", done.value)
    };
    assert_eq!(e.value, "maybe");
    assert_eq!(e.valid, ["approve", "deny", "reject", "y", "n"]);
    assert!(done.effects.events.is_empty());
    assert_eq!(
        approval_now(op.as_mut(), &ap.approval_id).status,
        ApprovalStatus::Pending
    );
    assert_eq!(
        op.decide("AP-NOPE", "y", &decider("alice")).unwrap().value,
        DecideOutcome::NotFound
    );

    let done = op
        .decide(
            &ap.approval_id,
            "y",
            &Decider {
                by: "alice",
                channel: "tui",
                comment: Some("looks fine"),
                version: None,
                groups: &[],
            },
        )
        .unwrap();
    let DecideOutcome::Decided(d) = &done.value else {
        panic!("{:?}", done.value)
    };
    assert_eq!(d.status, ApprovalStatus::Approved);
    assert_eq!(d.chosen_value.as_deref(), Some("y"));
    assert_eq!(d.decided_by.as_deref(), who(s, "alice").as_deref());
    assert_eq!(d.decision_channel.as_deref(), Some("tui"));
    assert_eq!(d.comment.as_deref(), Some("looks fine"));
    assert!(d.decided_at.is_some());
    assert_eq!(
        approval_changes(&done.effects.events),
        [(
            ap.approval_id.clone(),
            ApprovalStatus::Approved,
            who(s, "alice")
        )]
    );
    assert_eq!(**d, approval_now(op.as_mut(), &ap.approval_id));

    let mut bob = s.operator();
    let done = bob
        .decide(&ap.approval_id, "reject", &decider("bob"))
        .unwrap();
    let DecideOutcome::Conflict(c) = &done.value else {
        panic!("{:?}", done.value)
    };
    assert_eq!(c.decided_by.as_deref(), who(s, "alice").as_deref());
    assert_eq!(c.status, ApprovalStatus::Approved);
    assert!(done.effects.events.is_empty());
    for same in ["y", "approve", "Y"] {
        let done = bob.decide(&ap.approval_id, same, &decider("bob")).unwrap();
        assert!(
            matches!(&done.value, DecideOutcome::AlreadySame(a) if a.decided_by.as_deref() == who(s, "alice").as_deref()),
            "{same}: {:?}",
            done.value
        );
        assert!(done.effects.events.is_empty());
    }
    let done = bob
        .decide(&ap.approval_id, "maybe", &decider("bob"))
        .unwrap();
    assert!(
        matches!(&done.value, DecideOutcome::Conflict(a) if a.decided_by.as_deref() == who(s, "alice").as_deref()),
        "a decided approval reports who decided it: {:?}",
        done.value
    );
    let stored = approval_now(op.as_mut(), &ap.approval_id);
    assert_eq!(stored.decided_by.as_deref(), who(s, "alice").as_deref());
    assert_eq!(stored.chosen_value.as_deref(), Some("y"));

    // Overdue: deciding finds it expired.
    let mut b = Shim::start(s, &Cmd::new("rm", &["-i", "late.txt"]));
    let late = b.ask_pending(&yes_no_expiring("rm", SHORT_TTL, OnExpire::Reject));
    wait_out_short_ttl();
    let done = op
        .decide(&late.approval_id, "y", &decider("alice"))
        .unwrap();
    let DecideOutcome::Conflict(c) = &done.value else {
        panic!("{:?}", done.value)
    };
    assert_eq!(c.status, ApprovalStatus::Expired);
    assert_eq!(c.decided_by.as_deref(), Some("system:expiry"));
    assert_eq!(
        approval_changes(&done.effects.events),
        [(
            late.approval_id.clone(),
            ApprovalStatus::Expired,
            Some("system:expiry".to_owned())
        )]
    );
}

/// Two deciders on two sessions, on two threads, at once: exactly one decides.
pub fn two_deciders_race_on_two_sessions<S: StoreUnderTest>(s: &S) {
    let mut aps = Vec::new();
    for i in 0..6 {
        let mut shim = Shim::start(s, &Cmd::new("rm", &["-i", &format!("race{i}")]));
        aps.push(shim.ask_pending(&yes_no("rm")).approval_id);
    }
    for ap in &aps {
        let barrier = Barrier::new(2);
        let outcomes: Vec<(&str, DecideOutcome)> = std::thread::scope(|scope| {
            let racers: Vec<_> = [("alice", "y"), ("bob", "reject")]
                .into_iter()
                .map(|(by, value)| {
                    let barrier = &barrier;
                    scope.spawn(move || {
                        let mut op = s.operator();
                        op.connect().unwrap();
                        barrier.wait();
                        let out = op.decide(ap, value, &decider(by)).expect("decide").value;
                        (by, out)
                    })
                })
                .collect();
            racers.into_iter().map(|r| r.join().unwrap()).collect()
        });
        let winners: Vec<&str> = outcomes
            .iter()
            .filter(|(_, o)| matches!(o, DecideOutcome::Decided(_)))
            .map(|(by, _)| *by)
            .collect();
        assert_eq!(winners.len(), 1, "{outcomes:?}");
        for (by, o) in &outcomes {
            if *by != winners[0] {
                let DecideOutcome::Conflict(c) = o else {
                    panic!("the loser: {o:?}")
                };
                assert_eq!(c.decided_by.as_deref(), who(s, winners[0]).as_deref());
            }
        }
        let mut op = s.operator();
        assert_eq!(
            approval_now(op.as_mut(), ap).decided_by.as_deref(),
            who(s, winners[0]).as_deref()
        );
    }
}

/// `cancel`: a live run is marked cancelled with the canceller's reason and its pending
/// approvals rejected; an ended run is `AlreadyFinal`; an unknown one `NotFound`.
pub fn cancel_marks_rejects_and_refuses<S: StoreUnderTest>(s: &S) {
    let cmd = Cmd::new("rm", &["-i", "a.txt"]);
    let mut op = s.operator();
    let mut a = Shim::start(s, &cmd);
    let ap = a.ask_pending(&yes_no("rm"));
    let done = op
        .cancel(a.id(), Some("  not today "), &decider("alice"))
        .unwrap();
    let CancelOutcome::Marked { run } = &done.value else {
        panic!("{:?}", done.value)
    };
    assert_eq!(run.tool_run_id, a.id());
    assert_eq!(run.status, RunStatus::Cancelled);
    assert_eq!(
        run.reason.as_deref(),
        Some(format!(
            "cancelled by {}: not today",
            s.recorded_as("alice")
        ))
        .as_deref()
    );
    assert!(run.completed_at.is_some());
    assert_eq!(
        names(&done.effects.events),
        ["tool_status_change", "approval_status_change"]
    );
    assert_eq!(
        status_changes(&done.effects.events, a.id()),
        [(RunStatus::Cancelled, Some(RunStatus::WaitingApproval))]
    );
    assert_eq!(
        approval_changes(&done.effects.events),
        [(
            ap.approval_id.clone(),
            ApprovalStatus::Rejected,
            who(s, "alice")
        )]
    );
    let stored = approval_now(op.as_mut(), &ap.approval_id);
    assert_eq!(stored.status, ApprovalStatus::Rejected);
    assert_eq!(stored.decided_by.as_deref(), who(s, "alice").as_deref());
    assert_eq!(stored.comment.as_deref(), Some("the run was cancelled"));
    assert_eq!(**run, run_now(op.as_mut(), a.id()));

    let again = op.cancel(a.id(), None, &decider("bob")).unwrap();
    let CancelOutcome::AlreadyFinal { run } = &again.value else {
        panic!("{:?}", again.value)
    };
    assert_eq!(
        run.reason.as_deref(),
        Some(format!(
            "cancelled by {}: not today",
            s.recorded_as("alice")
        ))
        .as_deref()
    );
    assert!(again.effects.events.is_empty());

    let mut b = Shim::start(s, &cmd);
    b.end(RunStatus::Completed, 0);
    let done = op.cancel(b.id(), None, &decider("alice")).unwrap();
    assert!(
        matches!(&done.value, CancelOutcome::AlreadyFinal { run } if run.status == RunStatus::Completed),
        "{:?}",
        done.value
    );
    assert_eq!(run_now(op.as_mut(), b.id()).status, RunStatus::Completed);

    assert_eq!(
        op.cancel("TR-NOPE", None, &decider("alice")).unwrap().value,
        CancelOutcome::NotFound
    );

    // A parked run (no shim) is cancelled too, and no reason is just the canceller.
    let mut c = Shim::start(s, &Cmd::new("rm", &["-i", "parked.txt"]));
    c.ask_pending(&yes_no("rm"));
    c.park();
    let done = op.cancel(c.id(), None, &decider("carol")).unwrap();
    let CancelOutcome::Marked { run } = &done.value else {
        panic!("{:?}", done.value)
    };
    assert_eq!(
        run.reason.as_deref(),
        Some(format!("cancelled by {}", s.recorded_as("carol"))).as_deref()
    );
    assert!(op.decided_parked().unwrap().is_empty());
}

/// `reconcile`: live runs whose shim is gone (by the host's facts, or for another host by
/// a stale heartbeat) fail as `supervisor vanished` and lose their pending approvals;
/// parked, stall-ended and still supervised runs are left; overdue approvals expire.
pub fn reconcile_with_host_facts<S: StoreUnderTest>(s: &S) {
    let mut op = s.operator();
    let mk = |name: &str| Cmd::new("job", &[name]);

    let mut gone = Shim::start(s, &mk("gone"));
    let gone_ap = gone.ask_pending(&yes_no("job"));
    let reused = Shim::start(s, &mk("reused"));
    let alive = Shim::start(s, &mk("alive"));
    let mut stall_ended = Shim::start(s, &mk("stalled"));
    stall_ended.write(vec![RunWrite::Status(
        StatusChange {
            exit_code: Some(92),
            at: Some(time::now_rfc3339()),
            finished: true,
            ..StatusChange::to(RunStatus::Stalled, Some("no output for 10m".into()))
        },
        Replace::AnyButCancelled,
    )]);
    let remote = |name: &str, beat: String| {
        let cmd = mk(name);
        let mut row = cmd.row(RunStatus::Running);
        row.host = Some("elsewhere".into());
        row.supervisor_heartbeat_at = Some(beat);
        Shim::start_row(s, &cmd, row)
    };
    let remote_stale = remote("remote-stale", "2000-01-01T00:00:00.000Z".into());
    let remote_fresh = remote("remote-fresh", time::now_rfc3339());
    // Last, so that no other ask expires it first.
    let mut parked = Shim::start(s, &mk("parked"));
    let overdue = parked.ask_pending(&yes_no_expiring("job", SHORT_TTL, OnExpire::Reject));
    parked.park();
    wait_out_short_ttl();

    let host = FakeHost {
        alive: vec![alive.run.shim_pid.unwrap()],
        reused: vec![reused.run.shim_pid.unwrap()],
    };
    let done = op.reconcile("reconcile", &host).unwrap();
    let report = &done.value;
    let mut vanished: Vec<(&str, &str)> = report
        .vanished
        .iter()
        .map(|(id, why)| (id.as_str(), why.as_str()))
        .collect();
    vanished.sort();
    let mut want = [gone.id(), reused.id(), remote_stale.id()];
    want.sort();
    assert_eq!(vanished.iter().map(|(id, _)| *id).collect::<Vec<_>>(), want);
    let why = |id: &str| {
        vanished
            .iter()
            .find(|(i, _)| *i == id)
            .map(|(_, w)| w.to_string())
            .unwrap()
    };
    assert!(why(gone.id()).starts_with(VANISHED), "{}", why(gone.id()));
    assert!(why(gone.id()).contains("not running"));
    assert!(why(reused.id()).contains("another process"));
    assert!(why(remote_stale.id()).contains("heartbeat"));
    for shim in [&gone, &reused, &remote_stale] {
        let run = run_now(op.as_mut(), shim.id());
        assert_eq!(run.status, RunStatus::Failed);
        assert_eq!(run.reason.as_deref(), Some(why(shim.id()).as_str()));
        assert_eq!(run.last_error_msg.as_deref(), Some(why(shim.id()).as_str()));
        assert!(run.completed_at.is_some());
    }
    assert_eq!(run_now(op.as_mut(), alive.id()).status, RunStatus::Running);
    assert_eq!(
        run_now(op.as_mut(), parked.id()).status,
        RunStatus::WaitingApproval
    );
    assert_eq!(
        run_now(op.as_mut(), stall_ended.id()).status,
        RunStatus::Stalled
    );
    assert_eq!(
        run_now(op.as_mut(), remote_fresh.id()).status,
        RunStatus::Running
    );

    let abandoned = approval_now(op.as_mut(), &gone_ap.approval_id);
    assert_eq!(abandoned.status, ApprovalStatus::Expired);
    assert_eq!(abandoned.decided_by.as_deref(), Some("system:run-ended"));
    assert_eq!(
        approval_ids(&report.expired),
        [overdue.approval_id.as_str()]
    );
    let expired = approval_now(op.as_mut(), &overdue.approval_id);
    assert_eq!(expired.status, ApprovalStatus::Expired);
    assert_eq!(expired.decided_by.as_deref(), Some("system:expiry"));

    // Three runs failed, one approval abandoned, one expired.
    let mut kinds = names(&done.effects.events);
    kinds.sort();
    assert_eq!(
        kinds,
        [
            "approval_status_change",
            "approval_status_change",
            "tool_status_change",
            "tool_status_change",
            "tool_status_change"
        ]
    );
    for shim in [&gone, &reused, &remote_stale] {
        assert_eq!(
            status_changes(&done.effects.events, shim.id()).len(),
            1,
            "{}",
            shim.id()
        );
    }

    let again = op.reconcile("reconcile", &host).unwrap();
    assert!(again.value.vanished.is_empty());
    assert!(again.value.expired.is_empty());
    assert!(again.effects.events.is_empty());
}

/// The operator's `expire_due` is the runner's: overdue approvals only, once.
pub fn operator_expire_due<S: StoreUnderTest>(s: &S) {
    let mut a = Shim::start(s, &Cmd::new("rm", &["-i", "x"]));
    let due = a.ask_pending(&yes_no_expiring("rm", SHORT_TTL, OnExpire::Default));
    let mut b = Shim::start(s, &Cmd::new("rm", &["-i", "y"]));
    let later = b.ask_pending(&yes_no("rm"));
    let mut op = s.operator();
    assert!(op.expire_due().unwrap().value.is_empty(), "not due yet");
    wait_out_short_ttl();
    let done = op.expire_due().unwrap();
    assert_eq!(approval_ids(&done.value), [due.approval_id.as_str()]);
    assert_eq!(
        done.value[0].chosen_value.as_deref(),
        if s.honours_expiry_defaults() {
            Some("n")
        } else {
            None
        }
    );
    assert_eq!(
        approval_changes(&done.effects.events),
        [(
            due.approval_id.clone(),
            ApprovalStatus::Expired,
            Some("system:expiry".to_owned())
        )]
    );
    assert!(op.expire_due().unwrap().value.is_empty());
    assert_eq!(
        approval_now(op.as_mut(), &later.approval_id).status,
        ApprovalStatus::Pending
    );
}

fn question(q: &str) -> CooperativeRequest {
    CooperativeRequest {
        approval_id: None,
        tool_run_id: None,
        question: q.into(),
        options: vec![
            ApprovalOption {
                value: "yes".into(),
                label: "Yes".into(),
                keys: None,
            },
            ApprovalOption {
                value: "no".into(),
                label: "No".into(),
                keys: None,
            },
        ],
        default: None,
        allows_text: false,
        context: None,
        expires_in_seconds: None,
    }
}

fn ask_cooperative(shim: &mut Shim, q: &str) -> Approval {
    match shim
        .store
        .cooperative(&shim.who, &question(q), None, OnExpire::Reject)
        .unwrap()
        .value
    {
        Cooperative::Pending(a) => *a,
        other => panic!("{other:?}"),
    }
}

/// `decided_parked`: parked runs (exit 90) with decided, unconsumed approvals, with how
/// many are still pending; not runs waiting in wait mode, nor undecided or used ones.
pub fn decided_parked_lists_parked_runs_with_decisions<S: StoreUnderTest>(s: &S) {
    let mut op = s.operator();
    let mut a = Shim::start(s, &Cmd::new("rm", &["-i", "a"]));
    let ap_a = a.ask_pending(&yes_no("rm"));
    a.park();
    decide(op.as_mut(), &ap_a.approval_id, "y", "alice");

    let mut b = Shim::start(s, &Cmd::new("rm", &["-i", "b"]));
    let ap_b = b.ask_pending(&yes_no("rm"));
    decide(op.as_mut(), &ap_b.approval_id, "y", "alice");

    let mut c = Shim::start(s, &Cmd::new("rm", &["-i", "c"]));
    c.ask_pending(&yes_no("rm"));
    c.park();

    let mut d = Shim::start(s, &Cmd::new("deployer", &["two-questions"]));
    let first = ask_cooperative(&mut d, "Migrate the database?");
    let second = ask_cooperative(&mut d, "Restart the service?");
    d.park();
    decide(op.as_mut(), &first.approval_id, "yes", "alice");

    let mut found = op.decided_parked().unwrap();
    found.sort_by(|x, y| x.run.tool_run_id.cmp(&y.run.tool_run_id));
    let mut want = vec![
        (a.id(), vec![ap_a.approval_id.as_str()], 0),
        (d.id(), vec![first.approval_id.as_str()], 1),
    ];
    want.sort();
    let got: Vec<(&str, Vec<&str>, usize)> = found
        .iter()
        .map(|p| {
            (
                p.run.tool_run_id.as_str(),
                approval_ids(&p.decided),
                p.pending,
            )
        })
        .collect();
    assert_eq!(got, want);
    for p in &found {
        assert_eq!(p.run.status, RunStatus::WaitingApproval);
        assert_eq!(p.run.exit_code, Some(90));
        assert!(
            p.decided
                .iter()
                .all(|ap| ap.status != ApprovalStatus::Pending)
        );
    }
    assert_eq!(
        approval_now(op.as_mut(), &second.approval_id).status,
        ApprovalStatus::Pending
    );

    assert!(
        op.consume(&ap_a.approval_id, "TR-RESUMED", "worker")
            .unwrap()
    );
    let left: Vec<String> = op
        .decided_parked()
        .unwrap()
        .into_iter()
        .map(|p| p.run.tool_run_id)
        .collect();
    assert_eq!(left, [d.id()]);
}

/// A decided, parked approval: (parked shim, approval id).
fn decided_parked_approval<S: StoreUnderTest>(s: &S, name: &str) -> (Shim, String) {
    let mut a = Shim::start(s, &Cmd::new("rm", &["-i", name]));
    let ap = a.ask_pending(&yes_no("rm"));
    a.park();
    let mut op = s.operator();
    decide(op.as_mut(), &ap.approval_id, "y", "alice");
    (a, ap.approval_id)
}

/// `claim`: never a pending approval; of two workers on two sessions at once, exactly one
/// wins; never after use.
pub fn claim_two_workers_one_wins<S: StoreUnderTest>(s: &S) {
    let mut a = Shim::start(s, &Cmd::new("rm", &["-i", "claim"]));
    let ap = a.ask_pending(&yes_no("rm")).approval_id;
    a.park();
    let mut op = s.operator();
    assert!(
        !worker_claim(s, &ap, "worker:h:1:1"),
        "pending: nothing to resume"
    );
    decide(op.as_mut(), &ap, "y", "alice");
    if !s.resumable() {
        assert!(!worker_claim(s, &ap, "worker:h:1:1"));
        return;
    }
    let barrier = Barrier::new(2);
    let results: Vec<(&str, bool)> = std::thread::scope(|scope| {
        let workers: Vec<_> = ["worker:h:1:1", "worker:h:2:2"]
            .into_iter()
            .map(|w| {
                let (barrier, ap) = (&barrier, &ap);
                scope.spawn(move || {
                    let mut op = s.worker();
                    op.connect().unwrap();
                    barrier.wait();
                    (w, op.claim(ap, w).expect("claim"))
                })
            })
            .collect();
        workers.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let winners: Vec<&str> = results
        .iter()
        .filter(|(_, won)| *won)
        .map(|(w, _)| *w)
        .collect();
    assert_eq!(winners.len(), 1, "{results:?}");
    let stored = approval_now(op.as_mut(), &ap);
    assert_eq!(stored.claimed_by.as_deref(), Some(winners[0]));
    assert!(stored.claimed_at.is_some());
    assert!(!worker_claim(s, &ap, "worker:h:3:3"), "claimed already");

    let (_b, used) = decided_parked_approval(s, "claim-used");
    assert!(op.consume(&used, "TR-R", "worker").unwrap());
    assert!(!worker_claim(s, &used, "worker:h:1:1"), "used already");
}

/// `take_over_claim` only from the worker that holds it, not after use; `set_resumed_run`
/// links the resuming run.
pub fn take_over_claim_and_set_resumed_run<S: StoreUnderTest>(s: &S) {
    let (_a, ap) = decided_parked_approval(s, "takeover");
    if !worker_claim(s, &ap, "worker:h:1:1") {
        assert!(!s.resumable());
        return;
    }
    let mut op = s.worker();
    assert!(
        !op.take_over_claim(&ap, "worker:h:2:2", "worker:h:3:3")
            .unwrap(),
        "not held by that worker"
    );
    assert_eq!(
        approval_now(op.as_mut(), &ap).claimed_by.as_deref(),
        Some("worker:h:1:1")
    );
    assert!(
        op.take_over_claim(&ap, "worker:h:1:1", "worker:h:3:3")
            .unwrap()
    );
    assert_eq!(
        approval_now(op.as_mut(), &ap).claimed_by.as_deref(),
        Some("worker:h:3:3")
    );
    assert!(
        !op.take_over_claim(&ap, "worker:h:1:1", "worker:h:4:4")
            .unwrap(),
        "taken over once"
    );
    op.set_resumed_run(&ap, "TR-RESUME").unwrap();
    assert_eq!(
        approval_now(op.as_mut(), &ap).resumed_run_id.as_deref(),
        Some("TR-RESUME")
    );
    assert!(s.operator().consume(&ap, "TR-RESUME", "worker").unwrap());
    assert!(
        !op.take_over_claim(&ap, "worker:h:3:3", "worker:h:5:5")
            .unwrap(),
        "used already"
    );
}

/// `resumes_of`: the runs started as resumes of a run, oldest first.
pub fn resumes_of_oldest_first<S: StoreUnderTest>(s: &S) {
    let cmd = Cmd::new("rm", &["-i", "resume"]);
    let mut a = Shim::start(s, &cmd);
    a.ask_pending(&yes_no("rm"));
    a.park();
    let ids = ordered_run_ids(3);
    let mut rows = Vec::new();
    for (i, id) in ids.iter().enumerate() {
        let mut row = cmd.row(RunStatus::Running);
        row.tool_run_id = id.clone();
        if i != 1 {
            row.resumed_from = Some(a.id().to_owned());
        }
        Shim::start_row(s, &cmd, row.clone());
        rows.push(row);
    }
    let mut op = s.operator();
    assert_eq!(
        op.resumes_of(a.id()).unwrap(),
        [s.stored_row(rows[0].clone()), s.stored_row(rows[2].clone())]
    );
    assert!(op.resumes_of("TR-NOPE").unwrap().is_empty());
}

/// `close_run` changes a run only from the given statuses, once.
pub fn close_run_only_from_the_given_statuses<S: StoreUnderTest>(s: &S) {
    let cmd = Cmd::new("rm", &["-i", "close"]);
    let mut a = Shim::start(s, &cmd);
    a.ask_pending(&yes_no("rm"));
    a.park();
    let running = Shim::start(s, &cmd);
    let mut op = s.operator();
    let change = StatusChange {
        error: Some("approval rejected".into()),
        ..StatusChange::to(RunStatus::Failed, Some("approval rejected by alice".into()))
    };
    let from = [RunStatus::WaitingApproval];
    let done = op.close_run(a.id(), &change, "worker", &from).unwrap();
    assert_eq!(done.value, Some(RunStatus::WaitingApproval));
    assert_eq!(
        status_changes(&done.effects.events, a.id()),
        [(RunStatus::Failed, Some(RunStatus::WaitingApproval))]
    );
    let now = run_now(op.as_mut(), a.id());
    assert_eq!(now.status, RunStatus::Failed);
    assert_eq!(now.reason.as_deref(), Some("approval rejected by alice"));
    assert!(now.completed_at.is_some());
    assert_eq!(now.exit_code, Some(90), "the exit code stays");

    let again = op.close_run(a.id(), &change, "worker", &from).unwrap();
    assert_eq!(again.value, None);
    assert!(again.effects.events.is_empty());
    let other = op
        .close_run(running.id(), &change, "worker", &from)
        .unwrap();
    assert_eq!(other.value, None);
    assert_eq!(
        run_now(op.as_mut(), running.id()).status,
        RunStatus::Running
    );
    assert_eq!(
        op.close_run("TR-NOPE", &change, "worker", &from)
            .unwrap()
            .value,
        None
    );
}

/// The operator's `consume`: never a pending approval; a decided one once.
pub fn consume_is_single_use<S: StoreUnderTest>(s: &S) {
    let mut a = Shim::start(s, &Cmd::new("rm", &["-i", "consume"]));
    let ap = a.ask_pending(&yes_no("rm")).approval_id;
    let mut op = s.operator();
    assert!(!op.consume(&ap, "TR-X", "worker").unwrap(), "pending");
    assert_eq!(approval_now(op.as_mut(), &ap).consumed_at, None);
    decide(op.as_mut(), &ap, "n", "alice");
    assert!(op.consume(&ap, "TR-X", "worker").unwrap());
    let mut other = s.operator();
    assert!(!other.consume(&ap, "TR-Y", "worker").unwrap(), "once");
    let stored = approval_now(op.as_mut(), &ap);
    assert_eq!(stored.consumed_by.as_deref(), Some("TR-X"));
    assert!(stored.consumed_at.is_some());
    assert!(!op.consume("AP-NOPE", "TR-X", "worker").unwrap());
}

/// `gc_preview` says what `gc` removes: finished runs that ended before the cutoff and
/// their decided approvals; pending approvals, live runs and newer runs stay.
pub fn gc_preview_and_gc<S: StoreUnderTest>(s: &S) {
    let long_ago = "2000-01-01T00:00:00.000Z";
    let cutoff = "2001-01-01T00:00:00.000Z";
    let mut op = s.operator();
    let mut old = Shim::start(s, &Cmd::new("rm", &["-i", "old"]));
    let decided = old.ask_pending(&yes_no("rm")).approval_id;
    decide(op.as_mut(), &decided, "y", "alice");
    let pending = ask_cooperative(&mut old, "Also this?").approval_id;
    old.write(vec![RunWrite::Status(
        StatusChange {
            exit_code: Some(0),
            at: Some(long_ago.into()),
            ..StatusChange::to(RunStatus::Completed, Some("exited with code 0".into()))
        },
        Replace::AnyButCancelled,
    )]);
    let mut old_live_row = Cmd::new("sleep", &["inf"]).row(RunStatus::Running);
    old_live_row.started_at = long_ago.into();
    old_live_row.updated_at = long_ago.into();
    let old_live = Shim::start_row(s, &Cmd::new("sleep", &["inf"]), old_live_row);
    let mut recent = Shim::start(s, &Cmd::new("make", &[]));
    recent.end(RunStatus::Failed, 1);

    let preview = op.gc_preview(cutoff).unwrap();
    assert_eq!(
        preview,
        GcReport {
            runs: vec![old.id().to_owned()],
            approvals: 1
        }
    );
    assert!(
        op.run(old.id()).unwrap().is_some(),
        "a preview removes nothing"
    );
    let done = op.gc(cutoff, "tester").unwrap();
    assert_eq!(done, preview);
    assert_eq!(op.run(old.id()).unwrap(), None);
    assert_eq!(op.approval(&decided).unwrap(), None);
    assert_eq!(
        approval_now(op.as_mut(), &pending).status,
        ApprovalStatus::Pending,
        "someone may still answer it"
    );
    assert!(op.run(old_live.id()).unwrap().is_some());
    assert!(op.run(recent.id()).unwrap().is_some());
    assert_eq!(op.gc(cutoff, "tester").unwrap(), GcReport::default());
    assert_eq!(op.gc_preview(cutoff).unwrap(), GcReport::default());
}

/// `remember` stores a decision for a prompt: by default for that command line in that
/// directory only; widened on purpose (any arguments, any directory) it answers the same
/// prompt of other commands of the tool, decided by `policy:NAME`. The newest remembered
/// decision in a scope wins.
pub fn remembered_decision_answers_a_later_prompt<S: StoreUnderTest>(s: &S) {
    let req = yes_no("rm");
    let mut op = s.operator();
    let first = Cmd::new("rm", &["-i", "first.txt"]);
    let mut a = Shim::start(s, &first);
    let ap = a.ask_pending(&req);
    a.park();
    decide(op.as_mut(), &ap.approval_id, "y", "alice");
    let this_command = RememberScope {
        argv: Some(first.argv.clone()),
        cwd: Some(first.cwd.clone()),
    };
    let policy = op
        .remember(
            "rm",
            &req.prompt_fingerprint,
            &this_command,
            "y",
            &ap.approval_id,
            "alice",
        )
        .unwrap();
    assert_eq!(policy.value, "y");
    assert_eq!(policy.tool_name.as_deref(), Some("rm"));
    assert_eq!(policy.argv_json.as_ref(), Some(&first.argv));
    assert_eq!(policy.cwd.as_ref(), Some(&first.cwd));
    assert_eq!(
        policy.prompt_fingerprint.as_deref(),
        Some(req.prompt_fingerprint.as_str())
    );
    assert_eq!(
        policy.source_approval_id.as_deref(),
        Some(ap.approval_id.as_str())
    );
    assert_eq!(policy.created_by, s.recorded_as("alice"));

    // Another file, or the same command elsewhere: not what was decided, asked again.
    let mut other_args = Shim::start(s, &Cmd::new("rm", &["-i", "second.txt"]));
    other_args.ask_pending(&req);
    let mut elsewhere = Cmd::new("rm", &["-i", "first.txt"]);
    elsewhere.cwd = "/elsewhere".into();
    let mut other_dir = Shim::start(s, &elsewhere);
    other_dir.ask_pending(&req);
    // The same command in the same place: answered (its own decision is used up by the
    // re-run first, then the remembered one answers the next).
    let mut again = Shim::start(s, &first);
    assert!(matches!(
        again.ask(&req).value,
        PromptResolution::Answer { .. }
    ));
    let mut b = Shim::start(s, &first);
    let done = b.ask(&req);
    let PromptResolution::Answer { approval, value } = done.value else {
        panic!("{:?}", done.value)
    };
    assert_eq!(value, "y");
    let channel = format!("policy:{}", policy.name);
    assert_eq!(approval.decision_channel.as_deref(), Some(channel.as_str()));
    assert_eq!(
        approval_now(op.as_mut(), &approval.approval_id)
            .decided_by
            .as_deref(),
        Some(channel.as_str())
    );
    // Widened on purpose to any arguments in this directory.
    let any_args = RememberScope {
        argv: None,
        cwd: Some(first.cwd.clone()),
    };
    op.remember(
        "rm",
        &req.prompt_fingerprint,
        &any_args,
        "y",
        &ap.approval_id,
        "alice",
    )
    .unwrap();
    let mut c = Shim::start(s, &Cmd::new("rm", &["-i", "third.txt"]));
    assert!(matches!(c.ask(&req).value, PromptResolution::Answer { .. }));
    // Another tool's prompt is not answered by it.
    let mut other = Shim::start(s, &Cmd::new("rmdir", &["-i", "x"]));
    other.ask_pending(&yes_no("rmdir"));
    // A newer remembered decision in the same scope replaces it.
    let newer = op
        .remember(
            "rm",
            &req.prompt_fingerprint,
            &any_args,
            "reject",
            &ap.approval_id,
            "bob",
        )
        .unwrap();
    let mut d = Shim::start(s, &Cmd::new("rm", &["-i", "fourth.txt"]));
    let PromptResolution::Rejected { approval } = d.ask(&req).value else {
        panic!("the newer decision rejects")
    };
    assert_eq!(
        approval.decision_channel.as_deref(),
        Some(format!("policy:{}", newer.name).as_str())
    );
    // Listed while in force (the replaced one is not), newest first; withdrawn, gone.
    let listed: Vec<String> = op
        .remembered()
        .unwrap()
        .into_iter()
        .map(|p| p.policy_id)
        .collect();
    assert_eq!(listed, [newer.policy_id.clone(), policy.policy_id.clone()]);
    let forgotten = op.forget(&newer.policy_id, "carol").unwrap();
    assert_eq!(forgotten.map(|p| p.value), Some("reject".to_owned()));
    assert_eq!(op.forget(&newer.policy_id, "carol").unwrap(), None);
    assert_eq!(op.forget("PO-NOPE", "carol").unwrap(), None);
    let mut e = Shim::start(s, &Cmd::new("rm", &["-i", "fifth.txt"]));
    e.ask_pending(&req);
}

/// `audit_of_run`: a run's audit rows, in order, name what happened to it and who did it.
pub fn audit_of_run_tells_the_story<S: StoreUnderTest>(s: &S) {
    let cmd = Cmd::new("rm", &["-i", "story"]);
    let mut op = s.operator();
    let mut a = Shim::start(s, &cmd);
    let ap = a.ask_pending(&yes_no("rm"));
    a.park();
    decide(op.as_mut(), &ap.approval_id, "y", "alice");
    let mut b = Shim::start(s, &cmd);
    assert!(matches!(
        b.ask(&yes_no("rm")).value,
        PromptResolution::Answer { .. }
    ));

    let rows = op.audit_of_run(a.id()).unwrap();
    assert!(
        rows.iter()
            .all(|r| r.tool_run_id.as_deref() == Some(a.id()))
    );
    assert!(rows.windows(2).all(|w| w[0].id < w[1].id), "in order");
    let story: Vec<(&str, Option<&str>)> = rows
        .iter()
        .map(|r| (r.event.as_str(), r.approval_id.as_deref()))
        .collect();
    let want = [
        ("tool_status_change", None),
        ("approval_needed", Some(ap.approval_id.as_str())),
        ("tool_status_change", None),
        ("approval_status_change", Some(ap.approval_id.as_str())),
        ("tool_status_change", None),
    ];
    let mut at = 0;
    for step in &story {
        if at < want.len() && *step == want[at] {
            at += 1;
        }
    }
    assert_eq!(at, want.len(), "{story:?} does not hold {want:?} in order");
    let decision = rows
        .iter()
        .find(|r| r.event == "approval_status_change")
        .unwrap();
    assert_eq!(decision.actor, s.recorded_as("alice"));
    let data: serde_json::Value = serde_json::from_str(&decision.data).unwrap();
    assert_eq!(data["status"], "approved");
    assert_eq!(data["chosen_value"], "y");
    assert!(rows.iter().all(|r| !r.hash.is_empty() && !r.at.is_empty()));

    let b_rows = op.audit_of_run(b.id()).unwrap();
    assert!(
        b_rows.iter().any(|r| r.event == "approval_consumed"
            && r.approval_id.as_deref() == Some(ap.approval_id.as_str())),
        "{b_rows:?}"
    );
    assert!(op.audit_of_run("TR-NOPE").unwrap().is_empty());
}

fn sorted(mut v: Vec<(RunStatus, i64)>) -> Vec<(RunStatus, i64)> {
    v.sort_by_key(|(s, _)| s.as_str());
    v
}

/// `counts`: every run by status, live runs by status, recent failures, pending
/// approvals and how many expire soon; `live_counts` only the live part.
pub fn counts_and_live_counts<S: StoreUnderTest>(s: &S) {
    let hour = Duration::from_secs(3600);
    let _running = Shim::start(s, &Cmd::new("a", &[]));
    let mut soon = Shim::start(s, &Cmd::new("b", &[]));
    soon.ask_pending(&yes_no_expiring(
        "b",
        Duration::from_secs(600),
        OnExpire::Reject,
    ));
    let mut later = Shim::start(s, &Cmd::new("c", &[]));
    later.ask_pending(&yes_no_expiring("c", 24 * hour, OnExpire::Reject));
    let mut failed = Shim::start(s, &Cmd::new("d", &[]));
    failed.end(RunStatus::Failed, 1);
    let mut failed_long_ago = Shim::start(s, &Cmd::new("e", &[]));
    failed_long_ago.write(vec![RunWrite::Status(
        StatusChange {
            exit_code: Some(1),
            at: Some("2000-01-01T00:00:00.000Z".into()),
            ..StatusChange::to(RunStatus::Failed, None)
        },
        Replace::AnyButCancelled,
    )]);
    let mut done = Shim::start(s, &Cmd::new("f", &[]));
    done.end(RunStatus::Completed, 0);
    // Ended by its shim as stalled (exit 92): a recent stall, no longer live.
    let mut stall_ended = Shim::start(s, &Cmd::new("g", &[]));
    stall_ended.write(vec![RunWrite::Status(
        StatusChange {
            exit_code: Some(92),
            at: Some(time::now_rfc3339()),
            finished: true,
            ..StatusChange::to(RunStatus::Stalled, Some("no output for 10m".into()))
        },
        Replace::AnyButCancelled,
    )]);

    let mut op = s.operator();
    let since = stamp(-3600);
    let counts = op.counts(&since, hour).unwrap();
    assert_eq!(
        sorted(counts.totals.clone()),
        sorted(vec![
            (RunStatus::Running, 1),
            (RunStatus::WaitingApproval, 2),
            (RunStatus::Failed, 2),
            (RunStatus::Completed, 1),
            (RunStatus::Stalled, 1),
        ])
    );
    let live = sorted(vec![
        (RunStatus::Running, 1),
        (RunStatus::WaitingApproval, 2),
    ]);
    assert_eq!(sorted(counts.live.clone()), live);
    assert_eq!(counts.failed_recent, 1, "the recent failure");
    assert_eq!(
        counts.stalled_recent, 1,
        "the stall, apart from the failures"
    );
    assert_eq!(counts.pending, (2, 1));

    let lc = op.live_counts(hour).unwrap();
    assert_eq!(sorted(lc.live), live);
    assert_eq!(lc.pending, (2, 1));
    assert!(lc.totals.is_empty());
    assert_eq!(lc.failed_recent, 0);
}

/// `health`: the schema is the one this build supports.
pub fn health_reports_a_supported_schema<S: StoreUnderTest>(s: &S) {
    Shim::start(s, &Cmd::new("true", &[]));
    let mut op = s.operator();
    let h = op.health().unwrap();
    assert!(h.supported_version > 0);
    assert_eq!(h.schema_version, h.supported_version, "{h:?}");
    assert!(!h.journal.is_empty());
}

/// `ids_starting_with`: the runs' or approvals' ids under a prefix, in id order and bounded;
/// an exact id alone.
pub fn ids_by_prefix<S: StoreUnderTest>(s: &S) {
    let mut op = s.operator();
    let a = Shim::start(s, &Cmd::new("true", &[]));
    let b = Shim::start(s, &Cmd::new("true", &["x"]));
    let mut both = vec![a.id().to_owned(), b.id().to_owned()];
    both.sort();
    assert_eq!(op.ids_starting_with("TR-", 10).unwrap(), both);
    assert_eq!(op.ids_starting_with("TR-", 1).unwrap().len(), 1);
    assert_eq!(op.ids_starting_with(a.id(), 10).unwrap(), [a.id()]);
    assert!(op.ids_starting_with("TR-ZZZ", 10).unwrap().is_empty());
    let mut c = Shim::start(s, &Cmd::new("rm", &["-i", "p"]));
    let ap = c.ask_pending(&yes_no("rm"));
    assert_eq!(
        op.ids_starting_with("AP-", 10).unwrap(),
        [ap.approval_id.as_str()]
    );
    assert_eq!(
        op.ids_starting_with(&ap.approval_id[..12], 10).unwrap(),
        [ap.approval_id.as_str()]
    );
}

/// `audit_after`: the chain as a feed, oldest first, resumable from any row's id, bounded;
/// `audit_head_id` is the newest row's.
pub fn audit_after_is_a_resumable_feed<S: StoreUnderTest>(s: &S) {
    let mut op = s.operator();
    let mut a = Shim::start(s, &Cmd::new("rm", &["-i", "feed"]));
    let ap = a.ask_pending(&yes_no("rm"));
    let head = op.audit_head_id().unwrap();
    assert!(head > 0);
    let all = op.audit_after(0, 1000).unwrap();
    assert_eq!(all.last().map(|r| r.id), Some(head));
    assert!(all.windows(2).all(|w| w[0].id < w[1].id), "oldest first");
    assert_eq!(op.audit_after(0, 1).unwrap().len(), 1, "bounded");
    assert!(
        op.audit_after(head, 1000).unwrap().is_empty(),
        "nothing after the head"
    );
    decide(op.as_mut(), &ap.approval_id, "y", "alice");
    let news = op.audit_after(head, 1000).unwrap();
    assert!(
        news.iter().any(|r| r.event == "approval_status_change"
            && r.approval_id.as_deref() == Some(ap.approval_id.as_str())),
        "{news:?}"
    );
    assert!(news.iter().all(|r| r.id > head));
    assert_eq!(op.audit_head_id().unwrap(), news.last().unwrap().id);
}
