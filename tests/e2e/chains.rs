//! Issue 26 items 3 and 4, end to end: a decision stays with the run it was asked in and
//! that run's resume (a worker's, or the first re-run of the same command after the
//! decision) — a separate run of the command is asked, never typed into — and an exit-mode
//! chain of prompts converges: each resume gets every earlier answer again (free text
//! included), so N distinct prompts take N approvals; per-run random text on the screen
//! (ids, timestamps) does not make a prompt new.

use headless_run_e2e::*;
use std::time::Duration;

/// The three free-text questions of the chain fixture, and the answers given to them.
const QUESTIONS: [&str; 3] = ["Project name: ", "Owner: ", "Region: "];
const ANSWERS: [&str; 3] = ["alpha-1", "bravo two", "charlie/3"];

fn chain(env: &TestEnv) -> Cmd {
    let mut c = env.shim();
    c.arg(tool()).arg("ask-each").args(QUESTIONS);
    c
}

/// The pending approvals, oldest first.
fn pending(env: &TestEnv) -> Vec<serde_json::Map<String, serde_json::Value>> {
    env.approvals()
        .into_iter()
        .filter(|a| a["status"] == "pending")
        .collect()
}

/// The one pending approval, which must ask `question` (trimmed).
fn the_pending_one(env: &TestEnv, question: &str) -> String {
    let p = pending(env);
    assert_eq!(p.len(), 1, "one pending approval: {p:#?}");
    assert_eq!(s(&p[0], "prompt_line"), question.trim(), "{p:#?}");
    s(&p[0], "approval_id").to_owned()
}

/// (b) A chain of three free-text prompts, resumed by running the same command again after
/// each decision: exactly three approvals, and the tool receives all three answers. Each
/// resume answers the earlier prompts from the decisions made for them (kept while the
/// chain is live) and parks at the next one; once the chain completes, the free text is
/// gone from every row and each decision says why it is spent.
#[test]
fn a_chain_of_free_text_prompts_resumed_by_hand_takes_one_approval_each() {
    let env = TestEnv::new();
    chain(&env).run().expect_code(90);
    for (i, question) in QUESTIONS.iter().enumerate() {
        let id = the_pending_one(&env, question);
        env.decide(&id, ANSWERS[i]).expect_code(0);
        let out = chain(&env).run();
        if i + 1 < QUESTIONS.len() {
            out.expect_code(90);
            for earlier in &ANSWERS[..=i] {
                assert!(
                    out.out().contains(&format!("got {earlier}\n")),
                    "resume {i} was not given {earlier:?}: {}",
                    out.context()
                );
            }
        } else {
            out.expect_code(0);
            assert!(
                out.out()
                    .ends_with(&format!("answers {}\n", ANSWERS.join(" "))),
                "{}",
                out.context()
            );
        }
    }
    let approvals = env.approvals();
    assert_eq!(
        approvals.len(),
        3,
        "one approval per prompt: {approvals:#?}"
    );
    for a in &approvals {
        assert_eq!(s(a, "status"), "approved", "{a:#?}");
        assert!(a["chosen_value"].is_null(), "free text kept: {a:#?}");
        assert!(a["kept_for"].is_null(), "{a:#?}");
        assert!(
            s(a, "consumed_reason").contains("completed"),
            "spent when the chain completed: {a:#?}"
        );
    }
    let runs = env.runs();
    assert_eq!(runs.len(), 4, "{runs:#?}");
    // Each run is the resume of the one before it.
    for pair in runs.windows(2) {
        assert_eq!(
            s(&pair[1], "resumed_from"),
            s(&pair[0], "tool_run_id"),
            "{runs:#?}"
        );
    }
    assert_eq!(s(&runs[3], "status"), "completed");
}

/// (b) The same chain through `monitor worker --once` after each decision: three approvals,
/// and the last resume receives all three answers.
#[test]
fn a_chain_of_free_text_prompts_resumed_by_the_worker_takes_one_approval_each() {
    let env = TestEnv::new();
    chain(&env).run().expect_code(90);
    for (i, question) in QUESTIONS.iter().enumerate() {
        let id = the_pending_one(&env, question);
        env.decide(&id, ANSWERS[i]).expect_code(0);
        let out = env.monitor().args(["worker", "--once"]).run();
        out.expect_code(0);
        assert!(out.out().contains("resuming"), "{}", out.context());
    }
    assert!(pending(&env).is_empty(), "{:#?}", env.approvals());
    assert_eq!(env.approvals().len(), 3, "{:#?}", env.approvals());
    let last = env.runs().pop().expect("runs");
    assert_eq!(s(&last, "status"), "completed", "{last:#?}");
    let output = String::from_utf8_lossy(&env.run_log(s(&last, "tool_run_id"))).into_owned();
    assert!(
        output.contains(&format!("answers {}", ANSWERS.join(" "))),
        "{output}"
    );
}

/// (a) A decision whose resume stopped at another prompt is spent for everyone but that
/// resume's own resume: a later, separate wait-mode run of the same command is asked the
/// first question anew — nothing is typed into it.
#[test]
fn a_separate_wait_mode_run_is_asked_not_typed_into_after_a_resume_stopped_elsewhere() {
    let env = TestEnv::new();
    let cmd = |env: &TestEnv| {
        let mut c = env.shim();
        c.arg(tool())
            .args(["ask-twice", "First? [y/N] ", "Second? [y/N] "]);
        c
    };
    cmd(&env).run().expect_code(90);
    let first = the_pending_one(&env, "First? [y/N]");
    env.decide(&first, "y").expect_code(0);
    // The worker's resume answers the first prompt and stops at the second.
    env.monitor()
        .args(["worker", "--once"])
        .run()
        .expect_code(0);
    let second = the_pending_one(&env, "Second? [y/N]");

    // A separate run of the same command, in wait mode: it must ask about the first prompt
    // itself. (Before: the first decision was typed into it, and it waited at the second
    // prompt, having taken that approval over.)
    let running = cmd(&env)
        .env("HEADLESS_RUN_ON_PROMPT", "wait")
        .timeout(Duration::from_secs(60))
        .spawn();
    let mut asked = None;
    let seen = wait_for_state(Duration::from_secs(30), || {
        asked = pending(&env)
            .into_iter()
            .find(|a| s(a, "approval_id") != second);
        asked.is_some()
    });
    assert!(
        seen,
        "the separate run asked nothing: {:#?}",
        env.approvals()
    );
    let asked = asked.unwrap();
    assert_eq!(
        s(&asked, "prompt_line"),
        "First? [y/N]",
        "it was answered without a decision for it: {asked:#?}"
    );
    assert!(
        !String::from_utf8_lossy(&running.stdout_now()).contains("First? [y/N] y"),
        "typed into"
    );
    env.decide(s(&asked, "approval_id"), "reject")
        .expect_code(0);
    let out = running.wait();
    out.expect_code(91);
    // The chain it did not touch is still there for its own resume: the first decision
    // is kept for the run that stopped at the second prompt.
    assert_eq!(s(&env.approval_by_id(&second), "status"), "pending");
    let kept = env.approval_by_id(&first);
    assert_eq!(
        s(&kept, "kept_for"),
        s(&env.approval_by_id(&second), "tool_run_id"),
        "{kept:#?}"
    );
}

/// (c) A screen with per-run random text (a uuid, a hex id, a mixed letter+digit token,
/// the epoch time, an ISO timestamp) above the question: the decision made on the first
/// run's screen answers the second run, whose ids all differ.
#[test]
fn a_prompt_with_per_run_random_ids_converges() {
    let env = TestEnv::new();
    let cmd = |env: &TestEnv| {
        let mut c = env.shim();
        c.arg(tool()).args(["ask-with-ids", "Deploy? [y/N] "]);
        c
    };
    cmd(&env).run().expect_code(90);
    let id = the_pending_one(&env, "Deploy? [y/N]");
    env.decide(&id, "y").expect_code(0);
    // At least a second apart: the epoch and the timestamp differ too.
    std::thread::sleep(Duration::from_millis(1100));
    let out = cmd(&env).run();
    out.expect_code(0);
    assert!(out.out().ends_with("got y\n"), "{}", out.context());
    assert_eq!(env.approvals().len(), 1, "{:#?}", env.approvals());
}
