//! Issue 26 items 3 and 4 on every store: a decision stays with its run. It answers only the
//! run it was asked in, or that run's resume — the run a worker started to resume it
//! (`resumed_from`), or the first run of the same command started after the decision — and
//! only that; once the resume passes the prompt and stops elsewhere or ends, the decision is
//! spent (with a reason). A chain of prompts converges: what a resume used stays for its own
//! resume while the chain is live (free text included), so N prompts take N approvals.

use super::*;
use hr_shared::approvals::PromptKind;
use hr_shared::status::ApprovalStatus;

/// A yes/no question `line` (`[y/N]`), on a screen of its own.
fn yes_no_line(tool: &str, line: &str) -> PromptRequest {
    let mut req = yes_no(tool);
    req.prompt.question = line.into();
    req.prompt.prompt_line = line.into();
    req.prompt.context = format!("$ {tool}\n{line}");
    req.prompt_fingerprint = fingerprint::prompt(tool, line);
    req
}

/// A free-text question `line` (no default): any acceptable text answers it.
fn text_line(tool: &str, line: &str) -> PromptRequest {
    PromptRequest {
        prompt: Prompt {
            kind: PromptKind::Text,
            secret: false,
            rule: "generic:text".into(),
            question: line.into(),
            prompt_line: line.into(),
            context: line.into(),
            options: Vec::new(),
            default: None,
            allows_text: true,
            alternative: None,
            select: None,
        },
        prompt_fingerprint: fingerprint::prompt(tool, line),
        policies: Vec::new(),
        ttl: None,
        on_expire: OnExpire::Reject,
    }
}

/// The value `done` answers with, for approval `id`.
fn answered(done: Done<PromptResolution>, id: &str) -> String {
    match done.value {
        PromptResolution::Answer { approval, value } => {
            assert_eq!(approval.approval_id, id, "answered by another decision");
            value
        }
        other => panic!("expected an answer from {id}, got {other:?}"),
    }
}

/// The new pending approval `done` must be (not one taken over, nor an answer).
fn asked_anew(done: Done<PromptResolution>, not: &str) -> Approval {
    match done.value {
        PromptResolution::Pending {
            approval,
            taken_over: false,
        } if approval.approval_id != not => *approval,
        other => panic!("expected a new question (not {not}), got {other:?}"),
    }
}

/// (a) A resume answers the first prompt from its decision and stops at a second one. A
/// separate run of the same command started while the second is still undecided is no
/// resume of anything: it is asked the first prompt anew. Once the second is decided, the
/// first run started after that decision is the chain's resume and gets both answers.
pub fn a_decision_goes_to_its_resume_not_to_a_separate_run<S: StoreUnderTest>(s: &S) {
    let cmd = Cmd::new("deploy", &["--prod"]);
    let (p1, p2) = (
        yes_no_line("deploy", "First? [y/N]"),
        yes_no_line("deploy", "Second? [y/N]"),
    );
    let mut op = s.operator();
    let mut a = Shim::start(s, &cmd);
    let ap1 = a.ask_pending(&p1);
    a.park();
    decide(op.as_mut(), &ap1.approval_id, "y", "alice");

    let mut b = Shim::start(s, &cmd);
    assert_eq!(answered(b.ask(&p1), &ap1.approval_id), "y");
    let ap2 = b.ask_pending(&p2);
    b.park();
    let kept = approval_now(op.as_mut(), &ap1.approval_id);
    assert_eq!(
        kept.kept_for.as_deref(),
        Some(b.id()),
        "kept for B's resume"
    );
    assert_eq!(kept.consumed_by.as_deref(), Some(b.id()));

    let mut w = Shim::start(s, &cmd);
    let fresh = asked_anew(w.ask(&p1), &ap1.approval_id);
    assert_eq!(fresh.tool_run_id, w.id());
    assert_eq!(
        approval_now(op.as_mut(), &ap2.approval_id).status,
        ApprovalStatus::Pending,
        "the chain is left as it was"
    );

    decide(op.as_mut(), &ap2.approval_id, "y", "alice");
    let mut c = Shim::start(s, &cmd);
    assert_eq!(answered(c.ask(&p1), &ap1.approval_id), "y");
    assert_eq!(answered(c.ask(&p2), &ap2.approval_id), "y");
    assert_eq!(
        run_now(op.as_mut(), c.id()).resumed_from.as_deref(),
        Some(b.id())
    );
    let parked = run_now(op.as_mut(), b.id());
    assert_eq!(parked.status, RunStatus::Completed, "{parked:?}");
    assert!(
        parked.reason.as_deref().is_some_and(|r| r.contains(c.id())),
        "{parked:?}"
    );
    c.end(RunStatus::Completed, 0);
    // Nor does the separate run get the chain's answers once it has ended.
    asked_anew(w.ask(&p2), &ap2.approval_id);
}

/// (b) A chain of three free-text prompts, each resume started after the decision that
/// stopped the run before it: every resume is given all the earlier answers (the text
/// kept while the chain is live), so three prompts take three approvals; once the run
/// that got through ends, the text is gone from the rows.
pub fn a_chain_resume_gets_every_earlier_answer<S: StoreUnderTest>(s: &S) {
    let cmd = Cmd::new("init", &["--interactive"]);
    let lines = ["Project name:", "Owner:", "Region:"];
    let reqs: Vec<PromptRequest> = lines.iter().map(|l| text_line("init", l)).collect();
    let values = ["alpha one", "bravo", "charlie/3"];
    let mut op = s.operator();
    let mut ids: Vec<String> = Vec::new();
    let mut run = Shim::start(s, &cmd);
    for k in 0..=reqs.len() {
        // This run answers the prompts decided so far, each with its own decision…
        for (j, id) in ids.iter().enumerate() {
            assert_eq!(
                answered(run.ask(&reqs[j]), id),
                values[j],
                "resume {k}, prompt {j}"
            );
        }
        if k == reqs.len() {
            break;
        }
        // …and asks the next one, parks, is decided, and is resumed.
        let asked = run.ask_pending(&reqs[k]);
        run.park();
        decide(op.as_mut(), &asked.approval_id, values[k], "alice");
        ids.push(asked.approval_id);
        run = Shim::start(s, &cmd);
    }
    let all = op
        .approvals(&hr_shared::approvals::ApprovalFilter::default())
        .unwrap();
    assert_eq!(all.len(), 3, "one approval per prompt: {all:#?}");
    run.end(RunStatus::Completed, 0);
    for id in &ids {
        let a = approval_now(op.as_mut(), id);
        assert_eq!(a.status, ApprovalStatus::Approved);
        assert_eq!(a.chosen_value, None, "the text outlived its chain: {a:?}");
        assert_eq!(a.kept_for, None);
        let why = a.consumed_reason.clone().unwrap_or_default();
        assert!(
            why.contains("the chain ended") && why.contains(run.id()) && why.contains("completed"),
            "{a:?}"
        );
    }
}

/// A resume that meets another prompt first (it is asked that one and parks) has not used
/// the decision it was offered: the decision is spent, and the run that asked it closed as
/// failed, naming its resume. The next run of the command is asked the prompt anew.
pub fn a_resume_that_stops_elsewhere_spends_the_decision<S: StoreUnderTest>(s: &S) {
    let cmd = Cmd::new("deploy", &["--stage"]);
    let p1 = yes_no_line("deploy", "Proceed? [y/N]");
    let mut op = s.operator();
    let mut a = Shim::start(s, &cmd);
    let ap = a.ask_pending(&p1);
    a.park();
    decide(op.as_mut(), &ap.approval_id, "y", "alice");

    let mut b = Shim::start(s, &cmd);
    b.ask_pending(&text_line("deploy", "Reason for the change:"));
    b.park();
    let spent = approval_now(op.as_mut(), &ap.approval_id);
    assert!(spent.consumed_at.is_some(), "not spent: {spent:?}");
    assert_eq!(spent.kept_for, None);
    assert!(
        spent
            .consumed_reason
            .as_deref()
            .is_some_and(|r| r.contains(b.id()) && r.contains("stopped at another prompt")),
        "{spent:?}"
    );
    let asked = run_now(op.as_mut(), a.id());
    assert_eq!(asked.status, RunStatus::Failed, "{asked:?}");
    assert!(
        asked.reason.as_deref().is_some_and(|r| r.contains(b.id())),
        "{asked:?}"
    );

    let mut c = Shim::start(s, &cmd);
    asked_anew(c.ask(&p1), &ap.approval_id);
}

/// A resume that ends without meeting the prompt (exit 0: the decision answered nothing)
/// spends the decision: the next run is asked anew.
pub fn a_resume_that_ends_without_the_prompt_spends_the_decision<S: StoreUnderTest>(s: &S) {
    let cmd = Cmd::new("deploy", &["--quick"]);
    let p1 = yes_no_line("deploy", "Proceed? [y/N]");
    let mut op = s.operator();
    let mut a = Shim::start(s, &cmd);
    let ap = a.ask_pending(&p1);
    a.park();
    decide(op.as_mut(), &ap.approval_id, "y", "alice");
    let mut b = Shim::start(s, &cmd);
    b.end(RunStatus::Completed, 0);
    let asked = run_now(op.as_mut(), a.id());
    assert_eq!(asked.status, RunStatus::Failed, "{asked:?}");
    assert!(
        asked
            .reason
            .as_deref()
            .is_some_and(|r| r.contains("the decision answered nothing")),
        "{asked:?}"
    );
    let spent = approval_now(op.as_mut(), &ap.approval_id);
    assert!(
        spent
            .consumed_reason
            .as_deref()
            .is_some_and(|r| r.contains(b.id())),
        "{spent:?}"
    );
    let mut c = Shim::start(s, &cmd);
    asked_anew(c.ask(&p1), &ap.approval_id);
}

/// A resume that fails to start (the tool not found, exit 127) has used nothing: the
/// decision stays for the next attempt, which is answered.
pub fn a_resume_that_fails_to_start_leaves_the_decision<S: StoreUnderTest>(s: &S) {
    let cmd = Cmd::new("deploy", &["--missing"]);
    let p1 = yes_no_line("deploy", "Proceed? [y/N]");
    let mut op = s.operator();
    let mut a = Shim::start(s, &cmd);
    let ap = a.ask_pending(&p1);
    a.park();
    decide(op.as_mut(), &ap.approval_id, "y", "alice");
    let mut b = Shim::start(s, &cmd);
    b.end(RunStatus::Failed, 127);
    assert_eq!(
        run_now(op.as_mut(), a.id()).status,
        RunStatus::WaitingApproval
    );
    let mut c = Shim::start(s, &cmd);
    assert_eq!(answered(c.ask(&p1), &ap.approval_id), "y");
}

/// A run that was already running when the decision was made is not its resume (it did not
/// come after it): it is asked anew; the first run started after the decision is answered.
pub fn a_run_started_before_the_decision_is_not_its_resume<S: StoreUnderTest>(s: &S) {
    let cmd = Cmd::new("deploy", &["--early"]);
    let p1 = yes_no_line("deploy", "Proceed? [y/N]");
    let mut op = s.operator();
    let mut a = Shim::start(s, &cmd);
    let ap = a.ask_pending(&p1);
    a.park();
    let mut early = Shim::start(s, &cmd);
    decide(op.as_mut(), &ap.approval_id, "y", "alice");
    asked_anew(early.ask(&p1), &ap.approval_id);
    let mut late = Shim::start(s, &cmd);
    assert_eq!(answered(late.ask(&p1), &ap.approval_id), "y");
}

/// A decision a worker claimed goes only to the run the worker started for it
/// (`resumed_from`), not to a re-run by hand that comes first.
pub fn a_claimed_decision_goes_only_to_the_workers_resume<S: StoreUnderTest>(s: &S) {
    let cmd = Cmd::new("deploy", &["--claimed"]);
    let p1 = yes_no_line("deploy", "Proceed? [y/N]");
    let mut op = s.operator();
    let mut a = Shim::start(s, &cmd);
    let ap = a.ask_pending(&p1);
    a.park();
    decide(op.as_mut(), &ap.approval_id, "y", "alice");
    if !worker_claim(s, &ap.approval_id, "worker:h:1:1") {
        return;
    }
    let mut by_hand = Shim::start(s, &cmd);
    asked_anew(by_hand.ask(&p1), &ap.approval_id);
    let mut resume = Shim::resume_of(s, &cmd, a.id());
    assert_eq!(answered(resume.ask(&p1), &ap.approval_id), "y");
}

/// Cancelling a parked run ends its chain: what it kept for its resume is spent, and a
/// later run is asked anew.
pub fn cancelling_a_parked_chain_spends_its_decisions<S: StoreUnderTest>(s: &S) {
    let cmd = Cmd::new("deploy", &["--cancel"]);
    let (p1, p2) = (
        yes_no_line("deploy", "First? [y/N]"),
        yes_no_line("deploy", "Second? [y/N]"),
    );
    let mut op = s.operator();
    let mut a = Shim::start(s, &cmd);
    let ap1 = a.ask_pending(&p1);
    a.park();
    decide(op.as_mut(), &ap1.approval_id, "y", "alice");
    let mut b = Shim::start(s, &cmd);
    answered(b.ask(&p1), &ap1.approval_id);
    b.ask_pending(&p2);
    b.park();
    op.cancel(b.id(), Some("not today"), &decider("alice"))
        .expect("cancel");
    let spent = approval_now(op.as_mut(), &ap1.approval_id);
    assert!(
        spent
            .consumed_reason
            .as_deref()
            .is_some_and(|r| r.contains(b.id()) && r.contains("cancelled")),
        "{spent:?}"
    );
    let mut c = Shim::start(s, &cmd);
    asked_anew(c.ask(&p1), &ap1.approval_id);
}

/// The prompt went away before the answer was typed (`Release(Some)`): the decision stays
/// with the run that took it, which is answered when the prompt comes back; no one else is.
pub fn a_released_answer_stays_with_its_run<S: StoreUnderTest>(s: &S) {
    let cmd = Cmd::new("deploy", &["--flaky"]);
    let (p1, p2) = (
        yes_no_line("deploy", "First? [y/N]"),
        yes_no_line("deploy", "Second? [y/N]"),
    );
    let mut op = s.operator();
    let mut a = Shim::start(s, &cmd);
    let ap1 = a.ask_pending(&p1);
    a.park();
    decide(op.as_mut(), &ap1.approval_id, "y", "alice");
    let mut b = Shim::start(s, &cmd);
    answered(b.ask(&p1), &ap1.approval_id);
    b.write(vec![RunWrite::Release(Some(ap1.approval_id.clone()))]);
    assert_eq!(answered(b.ask(&p1), &ap1.approval_id), "y");
    let ap2 = b.ask_pending(&p2);
    b.park();
    decide(op.as_mut(), &ap2.approval_id, "y", "alice");
    // The chain's resume takes the kept answer, lets it go, and gets it again.
    let mut c = Shim::start(s, &cmd);
    answered(c.ask(&p1), &ap1.approval_id);
    c.write(vec![RunWrite::Release(Some(ap1.approval_id.clone()))]);
    assert_eq!(answered(c.ask(&p1), &ap1.approval_id), "y");
    assert_eq!(answered(c.ask(&p2), &ap2.approval_id), "y");
    let mut other = Shim::start(s, &cmd);
    asked_anew(other.ask(&p1), &ap1.approval_id);
}

/// `gc` leaves a finished run whose decisions a live chain still keeps (the parked run's
/// resume types them again); once the chain ends, the run goes with them.
pub fn gc_keeps_what_a_live_chain_needs<S: StoreUnderTest>(s: &S) {
    let cmd = Cmd::new("deploy", &["--gc"]);
    let (p1, p2) = (
        yes_no_line("deploy", "First? [y/N]"),
        yes_no_line("deploy", "Second? [y/N]"),
    );
    let mut op = s.operator();
    let mut a = Shim::start(s, &cmd);
    let ap1 = a.ask_pending(&p1);
    a.park();
    decide(op.as_mut(), &ap1.approval_id, "y", "alice");
    let mut b = Shim::start(s, &cmd);
    answered(b.ask(&p1), &ap1.approval_id);
    let ap2 = b.ask_pending(&p2);
    b.park();
    assert_eq!(run_now(op.as_mut(), a.id()).status, RunStatus::Completed);
    let later = stamp(3600);
    assert!(
        !op.gc_preview(&later)
            .unwrap()
            .runs
            .contains(&a.id().to_owned()),
        "A's decision is kept for B's resume"
    );
    op.gc(&later, "tester").unwrap();
    assert!(op.run(a.id()).unwrap().is_some());
    decide(op.as_mut(), &ap2.approval_id, "y", "alice");
    let mut c = Shim::start(s, &cmd);
    assert_eq!(answered(c.ask(&p1), &ap1.approval_id), "y");
    answered(c.ask(&p2), &ap2.approval_id);
    c.end(RunStatus::Completed, 0);
    let done = op.gc(&later, "tester").unwrap();
    assert!(done.runs.contains(&a.id().to_owned()), "{done:?}");
}
