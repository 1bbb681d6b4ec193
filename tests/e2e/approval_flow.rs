//! The approval protocol through the real shim: exit mode and its resume by re-running the
//! same command, wait mode typing a decision made by another process, several prompts in a
//! row, cooperative tools, policies, expiry, the notify hook, and why a caller's own
//! `AUTO_APPROVAL` answers nothing.

use headless_run_e2e::*;
use serde_json::Value;
use std::time::Duration;

fn rm_i(env: &TestEnv, file: &str) -> Cmd {
    let mut c = env.shim();
    c.args(["rm", "-i", file]);
    c
}

#[test]
fn exit_mode_approve_then_the_same_command_again_answers_and_completes() {
    let env = TestEnv::new();
    let file = env.work().join("a.txt");
    std::fs::write(&file, "x").unwrap();
    rm_i(&env, "a.txt").run().expect_code(90);
    let ap = env.pending_approval();
    let id = s(&ap, "approval_id").to_owned();
    env.decide(&id, "yes").expect_code(0);
    // A CI retry: the same command, in the same directory.
    let out = rm_i(&env, "a.txt").run();
    out.expect_code(0);
    assert!(!file.exists(), "the file really is removed");
    assert!(
        out.stderr.contains(&format!("with `yes` ({id}")),
        "{}",
        out.stderr
    );
    let runs = env.runs();
    assert_eq!(runs.len(), 2);
    assert_eq!(s(&runs[0], "status"), "completed", "{runs:#?}");
    assert!(
        s(&runs[0], "reason").contains(&format!("resumed as {}", s(&runs[1], "tool_run_id"))),
        "{runs:#?}"
    );
    assert_eq!(s(&runs[1], "status"), "completed");
    let ap = &env.approvals()[0];
    assert_eq!(s(ap, "status"), "approved");
    assert_eq!(s(ap, "chosen_value"), "yes");
    assert_eq!(s(ap, "consumed_by"), s(&runs[1], "tool_run_id"));
    // Single use: a third run asks again.
    std::fs::write(&file, "x").unwrap();
    rm_i(&env, "a.txt").run().expect_code(90);
    assert_eq!(env.approvals().len(), 2);
    let audit: Vec<String> = env
        .audit_of(&id)
        .iter()
        .map(|r| s(r, "event").to_owned())
        .collect();
    // Used by the re-run, then spent when the re-run completed (issue 26).
    assert_eq!(
        audit,
        [
            "approval_needed",
            "approval_status_change",
            "approval_consumed",
            "approval_spent"
        ]
    );
    assert!(
        s(&env.approval_by_id(&id), "consumed_reason").contains("completed"),
        "{:#?}",
        env.approval_by_id(&id)
    );
}

#[test]
fn exit_mode_reject_ends_the_rerun_with_91() {
    let env = TestEnv::new();
    let file = env.work().join("keep.txt");
    std::fs::write(&file, "x").unwrap();
    rm_i(&env, "keep.txt").run().expect_code(90);
    let id = s(&env.pending_approval(), "approval_id").to_owned();
    env.decide(&id, "reject").expect_code(0);
    let out = rm_i(&env, "keep.txt").run();
    out.expect_code(91);
    assert!(file.exists());
    assert!(out.stderr.contains("rejected by"), "{}", out.stderr);
    let runs = env.runs();
    assert_eq!(s(&runs[1], "status"), "failed");
    assert_eq!(n(&runs[1], "exit_code"), 91);
    assert!(s(&runs[1], "reason").contains(&id), "{runs:#?}");
    assert_eq!(
        s(&runs[0], "status"),
        "failed",
        "the asking run is closed too"
    );
    let decided = env.events_about("approval_status_change", &id);
    assert_eq!(decided.len(), 1, "{decided:#?}");
    assert_eq!(decided[0]["status"], "rejected");
    assert_eq!(
        env.logged_statuses(s(&runs[0], "tool_run_id")),
        // Asked, then parked by its exit 90, then closed by the re-run.
        ["running", "waiting_approval", "failed"]
    );
    assert_eq!(
        env.logged_statuses(s(&runs[1], "tool_run_id")),
        ["running", "failed"]
    );
    let end = env.events_about("tool_status_change", s(&runs[1], "tool_run_id"));
    assert_eq!(end.last().unwrap()["exit_code"], 91);
}

#[test]
fn choosing_no_is_an_answer_not_a_rejection() {
    let env = TestEnv::new();
    let file = env.work().join("b.txt");
    std::fs::write(&file, "x").unwrap();
    rm_i(&env, "b.txt").run().expect_code(90);
    let id = s(&env.pending_approval(), "approval_id").to_owned();
    env.decide(&id, "n").expect_code(0);
    let out = rm_i(&env, "b.txt").run();
    out.expect_code(0);
    assert!(file.exists(), "rm was told no and kept the file");
}

#[test]
fn wait_mode_types_a_decision_made_by_another_process() {
    let env = TestEnv::new();
    let file = env.work().join("c.txt");
    std::fs::write(&file, "x").unwrap();
    let running = env
        .shim()
        .args(["--on-prompt", "wait", "rm", "-i", "c.txt"])
        .spawn();
    let ap = env.pending_approval();
    let run = env.only_run();
    assert_eq!(s(&run, "status"), "waiting_approval");
    assert!(
        run["exit_code"].is_null(),
        "a waiting shim is alive, not parked"
    );
    assert!(alive(n(&run, "pid") as i32), "the tool is kept alive");
    env.decide(s(&ap, "approval_id"), "y").expect_code(0);
    let out = running.wait();
    out.expect_code(0);
    assert!(!file.exists());
    assert!(
        out.out().ends_with("? y\n"),
        "the answer is echoed like typing: {:?}",
        out.out()
    );
    let run = env.only_run();
    assert_eq!(s(&run, "status"), "completed");
    let ap = &env.approvals()[0];
    assert_eq!(s(ap, "consumed_by"), s(&run, "tool_run_id"));
    let statuses = env.status_events();
    assert_eq!(
        statuses,
        ["running", "waiting_approval", "running", "completed"]
    );
}

#[test]
fn wait_mode_rejection_ends_the_tool_with_91() {
    let env = TestEnv::new();
    let running = env
        .shim()
        .args(["--on-prompt", "wait"])
        .arg(tool())
        .args(["ask", "Deploy? [y/N] "])
        .spawn();
    let ap = env.pending_approval();
    let pid = n(&env.only_run(), "pid") as i32;
    env.decide(s(&ap, "approval_id"), "reject").expect_code(0);
    let out = running.wait();
    out.expect_code(91);
    assert!(!out.out().contains("got"));
    assert!(wait_until(Duration::from_secs(5), || !alive(pid)));
    assert_eq!(s(&env.only_run(), "status"), "failed");
    // The no stays with the run it was given to: a fresh run of the same command is asked
    // again (exit mode: 90), not ended at once by the old rejection.
    let rejected = env.approvals().remove(0);
    assert_eq!(s(&rejected, "status"), "rejected");
    assert!(!rejected["consumed_at"].is_null(), "{rejected:#?}");
    let again = env.shim().arg(tool()).args(["ask", "Deploy? [y/N] "]).run();
    again.expect_code(90);
    assert_eq!(env.approvals().len(), 2, "the re-run asked anew");
}

#[test]
fn wait_mode_does_not_count_the_wait_against_the_stall_timeout() {
    let env = TestEnv::new();
    let running = env
        .shim()
        .args([
            "--on-prompt",
            "wait",
            "--stall-timeout",
            "1s",
            "--timeout",
            "2s",
        ])
        .arg(tool())
        .args(["ask", "Go on? [y/N] "])
        .spawn();
    let ap = env.pending_approval();
    std::thread::sleep(Duration::from_millis(2500));
    env.decide(s(&ap, "approval_id"), "y").expect_code(0);
    let out = running.wait();
    out.expect_code(0);
    assert!(out.out().ends_with("got y\n"), "{:?}", out.out());
}

#[test]
fn openssl_req_prompts_are_answered_one_approval_at_a_time() {
    let env = TestEnv::new();
    let cnf = env.work().join("req.cnf");
    std::fs::write(
        &cnf,
        "[req]\ndistinguished_name = dn\nprompt = yes\n[dn]\n\
         countryName = Country Name (2 letter code)\ncountryName_default = AU\n\
         organizationName = Organization Name (eg, company)\norganizationName_default = Widgits\n\
         commonName = Common Name (e.g. server FQDN)\n",
    )
    .unwrap();
    let running = env
        .shim()
        .args([
            "--on-prompt",
            "wait",
            "openssl",
            "req",
            "-new",
            "-newkey",
            "rsa:1024",
        ])
        .args([
            "-nodes", "-keyout", "k.pem", "-out", "r.csr", "-config", "req.cnf",
        ])
        .timeout(Duration::from_secs(90))
        .spawn();
    let mut answered = Vec::new();
    for value in ["NZ", "approve", "example.test"] {
        let ap = env.pending_approval();
        let pending = env
            .approvals()
            .iter()
            .filter(|a| a["status"] == "pending")
            .count();
        assert_eq!(pending, 1, "one approval at a time");
        answered.push(s(&ap, "prompt_line").to_owned());
        env.decide(s(&ap, "approval_id"), value).expect_code(0);
        assert!(wait_for_state(Duration::from_secs(10), || {
            env.approvals()
                .iter()
                .all(|a| a["status"] != "pending" || a["approval_id"] != ap["approval_id"])
        }));
    }
    let out = running.wait();
    out.expect_code(0);
    assert_eq!(
        answered,
        [
            "Country Name (2 letter code) [AU]:",
            "Organization Name (eg, company) [Widgits]:",
            "Common Name (e.g. server FQDN) []:"
        ]
    );
    let subject = std::process::Command::new("openssl")
        .args(["req", "-in", "r.csr", "-noout", "-subject"])
        .current_dir(env.work())
        .output()
        .unwrap();
    let subject = String::from_utf8_lossy(&subject.stdout);
    assert!(subject.contains("C = NZ"), "{subject}");
    assert!(
        subject.contains("O = Widgits"),
        "approve took the default: {subject}"
    );
    assert!(subject.contains("CN = example.test"), "{subject}");
    assert_eq!(env.approvals().len(), 3);
}

#[test]
fn a_prompt_after_an_answered_one_chains_through_reruns() {
    let env = TestEnv::new();
    let cmd = |env: &TestEnv| {
        let mut c = env.shim();
        c.arg(tool())
            .args(["ask-twice", "First? [y/N] ", "Second? [y/N] "]);
        c
    };
    cmd(&env).run().expect_code(90);
    let first = env.pending_approval();
    env.decide(s(&first, "approval_id"), "y").expect_code(0);
    // The re-run answers the first prompt and stops at the second.
    cmd(&env).run().expect_code(90);
    let second = env.pending_approval();
    assert_eq!(s(&second, "prompt_line"), "Second? [y/N]");
    env.decide(s(&second, "approval_id"), "y").expect_code(0);
    // The first answer was given back when the second run stopped: the third run can
    // answer both.
    let out = cmd(&env).run();
    out.expect_code(0);
    assert!(out.out().contains("answers y y"), "{}", out.out());
}

#[test]
fn a_retry_while_pending_takes_the_approval_over() {
    let env = TestEnv::new();
    std::fs::write(env.work().join("d.txt"), "x").unwrap();
    rm_i(&env, "d.txt").run().expect_code(90);
    let out = rm_i(&env, "d.txt").run();
    out.expect_code(90);
    assert!(out.stderr.contains("still pending"), "{}", out.stderr);
    let approvals = env.approvals();
    assert_eq!(approvals.len(), 1, "no duplicate approval");
    let runs = env.runs();
    assert_eq!(s(&runs[0], "status"), "cancelled");
    assert!(s(&runs[0], "reason").contains("superseded"), "{runs:#?}");
    assert_eq!(s(&approvals[0], "tool_run_id"), s(&runs[1], "tool_run_id"));
}

#[test]
fn twin_commands_waiting_at_once_each_get_their_own_approval() {
    // The same command twice in wait mode: the second must not take the first one's
    // approval over while the first still waits for it (both would type the decision).
    let env = TestEnv::new();
    let twin = |env: &TestEnv| {
        env.shim()
            .args(["--on-prompt", "wait"])
            .arg(tool())
            .args(["ask", "Go? [y/N] "])
            .spawn()
    };
    let first = twin(&env);
    let a1 = s(&env.pending_approval(), "approval_id").to_owned();
    let second = twin(&env);
    assert!(
        wait_for_state(Duration::from_secs(20), || env
            .approvals()
            .iter()
            .filter(|a| a["status"] == "pending")
            .count()
            == 2),
        "{:#?}",
        env.approvals()
    );
    let runs = env.runs();
    assert!(
        runs.iter().all(|r| r["status"] == "waiting_approval"),
        "{runs:#?}"
    );
    env.decide(&a1, "y").expect_code(0);
    let out = first.wait();
    out.expect_code(0);
    assert!(out.out().ends_with("got y\n"), "{:?}", out.out());
    let approvals = env.approvals();
    let a2 = approvals
        .iter()
        .find(|a| a["status"] == "pending")
        .expect("the twin's approval still waits");
    assert_ne!(s(a2, "tool_run_id"), s(&approvals[0], "tool_run_id"));
    env.decide(s(a2, "approval_id"), "n").expect_code(0);
    let out = second.wait();
    out.expect_code(0);
    assert!(out.out().ends_with("got n\n"), "{:?}", out.out());
    let runs = env.runs();
    assert!(runs.iter().all(|r| r["status"] == "completed"), "{runs:#?}");
}

#[test]
fn a_cooperative_tool_asks_with_a_json_line_and_is_resumed_by_the_worker() {
    let env = TestEnv::new();
    let out = env
        .shim()
        .arg(tool())
        .args(["cooperative", "Deploy to prod?", "ship", "hold"])
        .run();
    out.expect_code(90);
    let ap = env.pending_approval();
    assert_eq!(s(&ap, "question"), "Deploy to prod?");
    assert_eq!(s(&ap, "prompt_kind"), "cooperative");
    assert_eq!(s(&ap, "default_value"), "hold");
    let run = env.only_run();
    assert_eq!(s(&run, "status"), "waiting_approval");
    assert_eq!(s(&ap, "tool_run_id"), s(&run, "tool_run_id"));
    env.decide(s(&ap, "approval_id"), "ship").expect_code(0);
    env.monitor()
        .args(["worker", "--once"])
        .run()
        .expect_code(0);
    let done = wait_for_state(Duration::from_secs(20), || {
        env.runs().len() == 2 && env.runs()[1]["status"] == "completed"
    });
    assert!(done, "{:#?}", env.runs());
    let runs = env.runs();
    let log = env.run_log(s(&runs[1], "tool_run_id"));
    assert!(
        String::from_utf8_lossy(&log).contains("resumed with ship"),
        "the tool got AUTO_APPROVAL from the worker"
    );
    let ap = &env.approvals()[0];
    assert_eq!(s(ap, "consumed_by"), s(&runs[1], "tool_run_id"));
    let id = s(ap, "approval_id");
    let needed = env.events_about("approval_needed", id);
    assert_eq!(needed.len(), 1, "{needed:#?}");
    assert_eq!(needed[0]["question"], "Deploy to prod?");
    assert_eq!(needed[0]["tool_run_id"], s(&runs[0], "tool_run_id"));
    let decided = env.events_about("approval_status_change", id);
    assert_eq!(decided[0]["status"], "approved");
    assert_eq!(decided[0]["chosen_value"], "ship");
    assert_eq!(
        env.logged_statuses(s(&runs[0], "tool_run_id")),
        ["running", "waiting_approval", "completed"]
    );
    assert_eq!(
        env.logged_statuses(s(&runs[1], "tool_run_id")),
        ["running", "completed"]
    );
}

#[test]
fn a_callers_own_auto_approval_answers_nothing() {
    let env = TestEnv::new();
    std::fs::write(env.work().join("e.txt"), "x").unwrap();
    let out = rm_i(&env, "e.txt").env("AUTO_APPROVAL", "y").run();
    out.expect_code(90);
    assert!(env.work().join("e.txt").exists());
    assert!(
        out.stderr.contains("AUTO_APPROVAL ignored"),
        "{}",
        out.stderr
    );
    // Nor does it reach a cooperative tool, even naming a real (pending) approval.
    let id = s(&env.pending_approval(), "approval_id").to_owned();
    let out = env
        .shim()
        .env("AUTO_APPROVAL", "ship")
        .env("HEADLESS_RUN_APPROVAL_ID", &id)
        .arg(tool())
        .args(["cooperative", "Deploy?", "ship", "hold"])
        .run();
    out.expect_code(90);
    assert!(!out.out().contains("resumed with"), "{}", out.out());
    // Nothing was decided or consumed: both approvals still wait for a person.
    for a in env.approvals() {
        assert_eq!(s(&a, "status"), "pending", "{a:#?}");
        assert!(a["consumed_at"].is_null(), "{a:#?}");
    }
    assert!(
        env.log_event_names()
            .iter()
            .all(|e| e != "approval_status_change"),
        "no decision was logged"
    );
}

/// `AUTO_APPROVAL` is a single-use token the worker hands to the one re-run it claimed the
/// decision for: a caller who knows a decided approval's id and value cannot replay it.
#[test]
fn a_decided_approval_is_no_token_for_a_callers_own_rerun() {
    let env = TestEnv::new();
    let coop = |c: &mut Cmd| {
        c.arg(tool())
            .args(["cooperative", "Deploy?", "ship", "hold"]);
    };
    let mut first = env.shim();
    coop(&mut first);
    first.run().expect_code(90);
    let id = s(&env.pending_approval(), "approval_id").to_owned();
    env.decide(&id, "ship").expect_code(0);
    // Not the worker's re-run: the variable is removed, the tool asks again.
    let mut replay = env.shim();
    replay
        .env("AUTO_APPROVAL", "ship")
        .env("HEADLESS_RUN_APPROVAL_ID", &id);
    coop(&mut replay);
    let out = replay.run();
    out.expect_code(90);
    assert!(!out.out().contains("resumed with"), "{}", out.context());
    assert!(
        out.stderr.contains("AUTO_APPROVAL ignored"),
        "{}",
        out.stderr
    );
    let ap = env.approval_by_id(&id);
    assert!(
        ap["consumed_at"].is_null(),
        "the replay used the decision up: {ap:#?}"
    );
    // The worker's resume still gets it, once.
    env.monitor()
        .args(["worker", "--once"])
        .run()
        .expect_code(0);
    let resumed = wait_for_state(Duration::from_secs(20), || {
        env.approval_by_id(&id)["consumed_at"].is_string()
    });
    assert!(resumed, "{:#?}", env.approvals());
}

#[test]
fn a_policy_approves_rm_of_tmp_files_and_nothing_else() {
    let env = TestEnv::new();
    env.write_config(
        r#"
[[policies]]
name = "tmp-files"
tool = "rm"
value = "y"
when = [{ field = "prompt", op = "glob", value = "*.tmp'?" }]
"#,
    );
    std::fs::write(env.work().join("scratch.tmp"), "x").unwrap();
    std::fs::write(env.work().join("keep.txt"), "x").unwrap();
    let out = rm_i(&env, "scratch.tmp").run();
    out.expect_code(0);
    assert!(!env.work().join("scratch.tmp").exists());
    let ap = &env.approvals()[0];
    assert_eq!(s(ap, "status"), "approved");
    assert_eq!(s(ap, "decided_by"), "policy:tmp-files");
    assert_eq!(s(ap, "decision_channel"), "policy:tmp-files");
    assert_eq!(s(ap, "chosen_value"), "yes");
    assert!(ap["consumed_at"].is_string());
    let id = s(ap, "approval_id").to_owned();
    let decided = env.events_about("approval_status_change", &id);
    assert_eq!(decided.len(), 1, "{decided:#?}");
    assert_eq!(decided[0]["status"], "approved");
    assert_eq!(decided[0]["chosen_value"], "yes");
    assert_eq!(env.events_about("approval_needed", &id).len(), 1);
    let audit = env.audit_of(&id);
    assert_eq!(s(&audit[0], "event"), "approval_needed");
    assert_eq!(s(&audit[0], "actor"), "policy:tmp-files");
    rm_i(&env, "keep.txt").run().expect_code(90);
    assert!(env.work().join("keep.txt").exists());
}

#[test]
fn a_policy_can_reject_and_one_whose_value_does_not_fit_is_named() {
    let env = TestEnv::new();
    env.write_config(
        r#"
[[policies]]
name = "confused"
tool = "rm"
value = "maybe"

[[policies]]
name = "no-deletes"
tool = "rm"
value = "reject"
"#,
    );
    std::fs::write(env.work().join("precious.txt"), "x").unwrap();
    let out = rm_i(&env, "precious.txt").run();
    out.expect_code(91);
    assert!(env.work().join("precious.txt").exists());
    assert!(
        out.stderr
            .contains("policy confused: `maybe` is not an answer"),
        "{}",
        out.stderr
    );
    let ap = &env.approvals()[0];
    assert_eq!(s(ap, "status"), "rejected");
    assert_eq!(s(ap, "decided_by"), "policy:no-deletes");
    let run = env.only_run();
    assert_eq!(s(&run, "status"), "failed");
    assert_eq!(n(&run, "exit_code"), 91);
    let id = s(ap, "approval_id");
    assert_eq!(
        env.events_about("approval_status_change", id)[0]["status"],
        "rejected"
    );
    assert_eq!(
        env.logged_statuses(s(&run, "tool_run_id")),
        ["running", "failed"]
    );
}

#[test]
fn a_project_file_cannot_approve_its_own_prompts() {
    let env = TestEnv::new();
    std::fs::write(
        env.work().join(".headless-run.toml"),
        "[defaults]\nprompt_idle = \"200ms\"\n\n[[policies]]\nname = \"self\"\nvalue = \"y\"\n",
    )
    .unwrap();
    std::fs::write(env.work().join("f.txt"), "x").unwrap();
    let out = rm_i(&env, "f.txt").run();
    out.expect_code(90);
    assert!(env.work().join("f.txt").exists());
    assert!(
        out.stderr
            .contains(".headless-run.toml:4: `policies` ignored"),
        "{}",
        out.stderr
    );
    assert_eq!(s(&env.pending_approval(), "status"), "pending");
    // doctor names it too.
    let doc = env.monitor().arg("doctor").run();
    doc.expect_code(1);
    assert!(doc.out().contains("`policies` ignored"), "{}", doc.out());
}

#[test]
fn an_expired_approval_ends_a_waiting_tool_or_takes_the_default() {
    let env = TestEnv::new();
    let out = env
        .shim()
        .env("HEADLESS_RUN_APPROVAL_TTL", "1s")
        .args(["--on-prompt", "wait"])
        .arg(tool())
        .args(["ask", "Go? [y/N] "])
        .run();
    out.expect_code(91);
    let ap = &env.approvals()[0];
    assert_eq!(s(ap, "status"), "expired");
    assert_eq!(s(ap, "decided_by"), "system:expiry");
    assert!(ap["chosen_value"].is_null());
    let expired = env.events_about("approval_status_change", s(ap, "approval_id"));
    assert_eq!(expired.len(), 1, "{expired:#?}");
    assert_eq!(expired[0]["status"], "expired");
    assert_eq!(
        env.logged_statuses(s(&env.only_run(), "tool_run_id")),
        ["running", "waiting_approval", "failed"]
    );

    let env = TestEnv::new();
    let out = env
        .shim()
        .env("HEADLESS_RUN_APPROVAL_TTL", "1s")
        .env("HEADLESS_RUN_ON_EXPIRE", "default")
        .args(["--on-prompt", "wait"])
        .arg(tool())
        .args(["ask", "Go? [Y/n] "])
        .run();
    out.expect_code(0);
    assert!(out.out().ends_with("got y\n"), "{:?}", out.out());
    let ap = &env.approvals()[0];
    assert_eq!(s(ap, "status"), "expired");
    assert_eq!(s(ap, "chosen_value"), "yes");
}

#[test]
fn an_approval_that_expired_unseen_ends_a_hand_rerun_with_91_or_its_default() {
    // Exit mode with no worker and no reconcile running: the re-run itself notices the
    // expiry instead of taking the overdue approval over.
    let env = TestEnv::new();
    std::fs::write(env.work().join("old.txt"), "x").unwrap();
    rm_i(&env, "old.txt")
        .env("HEADLESS_RUN_APPROVAL_TTL", "1s")
        .run()
        .expect_code(90);
    let id = s(&env.pending_approval(), "approval_id").to_owned();
    std::thread::sleep(Duration::from_millis(1100));
    let out = rm_i(&env, "old.txt").run();
    out.expect_code(91);
    assert!(env.work().join("old.txt").exists());
    let ap = &env.approvals()[0];
    assert_eq!(env.approvals().len(), 1);
    assert_eq!(s(ap, "status"), "expired");
    assert_eq!(s(ap, "decided_by"), "system:expiry");
    let runs = env.runs();
    assert_eq!(s(&runs[0], "status"), "failed", "{runs:#?}");
    assert_eq!(s(&runs[1], "status"), "failed");
    assert_eq!(n(&runs[1], "exit_code"), 91);
    assert_eq!(
        env.events_about("approval_status_change", &id)[0]["status"],
        "expired"
    );

    let env = TestEnv::new();
    let ask = |env: &TestEnv| {
        let mut c = env.shim();
        c.arg(tool()).args(["ask", "Go? [Y/n] "]);
        c
    };
    ask(&env)
        .env("HEADLESS_RUN_APPROVAL_TTL", "1s")
        .env("HEADLESS_RUN_ON_EXPIRE", "default")
        .run()
        .expect_code(90);
    std::thread::sleep(Duration::from_millis(1100));
    let out = ask(&env).run();
    out.expect_code(0);
    assert!(out.out().ends_with("got y\n"), "{:?}", out.out());
    assert_eq!(s(&env.approvals()[0], "chosen_value"), "yes");
}

#[test]
fn the_notify_hook_gets_the_approval_and_its_failure_changes_nothing() {
    let env = TestEnv::new();
    let seen = env.path().join("notified.txt");
    env.write_config(&format!(
        r#"
[notify]
command = ["sh", "-c", "{{ echo \"id=$HEADLESS_RUN_APPROVAL_ID tool=$HEADLESS_RUN_APPROVAL_TOOL opts=$HEADLESS_RUN_APPROVAL_OPTIONS\"; echo \"cmd=$HEADLESS_RUN_DECIDE_COMMAND\"; echo \"asked=$HEADLESS_RUN_APPROVAL_COMMAND in $HEADLESS_RUN_APPROVAL_CWD on $HEADLESS_RUN_APPROVAL_HOST\"; cat; }} > {}; exit 3"]
"#,
        seen.display()
    ));
    std::fs::write(env.work().join("f.txt"), "x").unwrap();
    rm_i(&env, "f.txt").run().expect_code(90);
    let id = s(&env.pending_approval(), "approval_id").to_owned();
    assert!(wait_until(Duration::from_secs(10), || {
        std::fs::read_to_string(&seen).is_ok_and(|t| t.contains("\"event\":\"approval_needed\""))
    }));
    let text = std::fs::read_to_string(&seen).unwrap();
    assert!(
        text.contains(&format!("id={id} tool=rm opts=yes,no")),
        "{text}"
    );
    assert!(
        text.contains(&format!(
            "cmd=monitor --state-dir {} decide {id} approve",
            env.state().display()
        )),
        "{text}"
    );
    // What is being approved: the command, where, on which host (issue 15 item 7).
    let work = env.work().display().to_string();
    assert!(
        text.contains(&format!("asked=[\"rm\",\"-i\",\"f.txt\"] in {work} on ")),
        "{text}"
    );
    assert!(
        text.contains("\"command\":[\"rm\",\"-i\",\"f.txt\"]"),
        "{text}"
    );
    // What the hook prints goes nowhere, and it is not taken for a supervised tool.
    let env = TestEnv::new();
    let seen = env.path().join("env.txt");
    let pidfile = env.path().join("hook.pid");
    env.write_config(&format!(
        r#"
[notify]
command = ["sh", "-c", "echo \"run_id=${{HEADLESS_RUN_TOOL_RUN_ID:-unset}}\" > {}; echo HOOK-OUT; echo HOOK-ERR >&2; echo $$ > {}; exec sleep 60"]
timeout = "1s"
"#,
        seen.display(),
        pidfile.display()
    ));
    std::fs::write(env.work().join("h.txt"), "x").unwrap();
    let out = rm_i(&env, "h.txt")
        .env("HEADLESS_RUN_TOOL_RUN_ID", "TR-OUTER")
        .run();
    out.expect_code(90);
    assert!(
        !out.out().contains("HOOK") && !out.stderr.contains("HOOK"),
        "{}",
        out.context()
    );
    assert!(wait_until(Duration::from_secs(10), || {
        std::fs::read_to_string(&pidfile).is_ok_and(|t| t.ends_with('\n'))
    }));
    assert_eq!(std::fs::read_to_string(&seen).unwrap(), "run_id=unset\n");
    // The shim exited at once (exit mode); the hook is still killed after its 1 s.
    let pid: i32 = std::fs::read_to_string(&pidfile)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(
        wait_until(Duration::from_secs(15), || !alive(pid)),
        "the hook outlived its timeout"
    );

    // A hook that cannot even start is a warning, not a failure.
    let env = TestEnv::new();
    env.write_config("[notify]\ncommand = [\"/nonexistent/hook\"]\n");
    std::fs::write(env.work().join("g.txt"), "x").unwrap();
    let out = rm_i(&env, "g.txt").run();
    out.expect_code(90);
    assert!(out.stderr.contains("notify hook"), "{}", out.stderr);
}

#[test]
fn a_remembered_decision_answers_the_same_prompt_later() {
    let env = TestEnv::new();
    let file = env.work().join("h.txt");
    std::fs::write(&file, "x").unwrap();
    rm_i(&env, "h.txt").run().expect_code(90);
    let id = s(&env.pending_approval(), "approval_id").to_owned();
    let out = env.monitor().args(["decide", &id, "y", "--remember"]).run();
    out.expect_code(0);
    // The scope is this command line in this directory, and it says so.
    assert!(out.out().contains("of `rm -i h.txt` in "), "{}", out.out());
    // The decision itself answers the retry…
    rm_i(&env, "h.txt").run().expect_code(0);
    assert!(!file.exists());
    // …and the remembered policy later runs of that command there.
    std::fs::write(&file, "x").unwrap();
    rm_i(&env, "h.txt").run().expect_code(0);
    assert!(!file.exists());
    // Not another file, nor another directory: those were never decided, and are asked.
    std::fs::write(env.work().join("other.txt"), "x").unwrap();
    rm_i(&env, "other.txt").run().expect_code(90);
    assert!(env.work().join("other.txt").exists());
    let elsewhere = env.work().join("sub");
    std::fs::create_dir_all(&elsewhere).unwrap();
    std::fs::write(elsewhere.join("h.txt"), "x").unwrap();
    rm_i(&env, "h.txt")
        .current_dir(&elsewhere)
        .run()
        .expect_code(90);
    assert!(elsewhere.join("h.txt").exists());
    let approvals = env.approvals();
    let auto: Vec<_> = approvals
        .iter()
        .filter(|a| a["decided_by"] == format!("policy:remembered:{id}"))
        .collect();
    assert_eq!(auto.len(), 1, "{approvals:#?}");
    assert_eq!(s(auto[0], "chosen_value"), "yes");
    // Widened on purpose: any arguments, any directory.
    let pending = env.pending_approval();
    let out = env
        .monitor()
        .args([
            "decide",
            s(&pending, "approval_id"),
            "y",
            "--remember",
            "--any-args",
            "--any-dir",
        ])
        .run();
    out.expect_code(0);
    assert!(
        out.out().contains("with any arguments in any directory"),
        "{}",
        out.out()
    );
    // The same prompt of other arguments in a third directory is now answered.
    let third = env.work().join("third");
    std::fs::create_dir_all(&third).unwrap();
    std::fs::write(third.join("h.txt"), "x").unwrap();
    env.shim()
        .args(["rm", "-i", "-v", "h.txt"])
        .current_dir(&third)
        .run()
        .expect_code(0);
    assert!(!third.join("h.txt").exists());
}

/// Issue 12 item 7: a tool that asked "Run the unit tests?", timed out its read and asked
/// "DROP the production database?" gets nothing typed for the first question's decision:
/// the shim sees the screen is no longer what was approved and asks about the new one.
#[test]
fn wait_mode_types_only_into_the_prompt_that_was_approved() {
    let env = TestEnv::new();
    let running = env
        .shim()
        .args(["--on-prompt", "wait"])
        .arg(tool())
        .args([
            "ask-then-switch",
            "Run the unit tests? [y/N] ",
            "DROP the production database? [y/N] ",
            "2",
        ])
        .spawn();
    let first = env.pending_approval();
    assert!(s(&first, "question").contains("unit tests"), "{first:#?}");
    let run_id = s(&env.only_run(), "tool_run_id").to_owned();
    // The tool gives up on the first question and asks the second…
    assert!(wait_for_state(Duration::from_secs(20), || {
        String::from_utf8_lossy(&env.run_log(&run_id)).contains("DROP")
    }));
    // …and only then is the first one approved.
    env.decide(s(&first, "approval_id"), "y").expect_code(0);
    let mut second = None;
    assert!(wait_for_state(Duration::from_secs(20), || {
        second = env
            .approvals()
            .into_iter()
            .find(|a| a["status"] == "pending" && s(a, "question").contains("DROP"));
        second.is_some()
    }));
    let second = second.unwrap_or_default();
    // The yes for the tests was not used for the database.
    let first_now = env.approval_by_id(s(&first, "approval_id"));
    assert!(first_now["consumed_at"].is_null(), "{first_now:#?}");
    env.decide(s(&second, "approval_id"), "n").expect_code(0);
    let out = running.wait();
    out.expect_code(0);
    assert!(out.out().contains("second got n"), "{}", out.context());
    assert!(!out.out().contains("second got y"), "{}", out.context());
    assert!(out.stderr.contains("not typed"), "{}", out.stderr);
}

/// Issue 12 item 8: a decision covers the screen it was made on. Approved for "Plan: 2 to
/// add", a re-run whose plan now says 3 gets a new approval that shows what changed.
#[test]
fn a_rerun_on_a_changed_screen_is_asked_again_showing_what_changed() {
    let env = TestEnv::new();
    let count = env.work().join("count");
    std::fs::write(&count, "2").unwrap();
    let plan = |env: &TestEnv| {
        let mut c = env.shim();
        c.arg(tool()).args(["plan", count.to_str().unwrap()]);
        c
    };
    plan(&env).run().expect_code(90);
    let first = env.pending_approval();
    env.decide(s(&first, "approval_id"), "yes").expect_code(0);
    // The plan changed between the decision and the re-run.
    std::fs::write(&count, "3").unwrap();
    let out = plan(&env).run();
    out.expect_code(90);
    assert!(!out.out().contains("applied"), "{}", out.context());
    let second = env.pending_approval();
    assert_ne!(s(&second, "approval_id"), s(&first, "approval_id"));
    let context = s(&second, "context");
    assert!(context.contains("The screen changed since"), "{context}");
    assert!(context.contains("+ Plan: 3 to add"), "{context}");
    assert!(context.contains("- Plan: 2 to add"), "{context}");
    // The old decision is spent (issue 26): the re-run was the resume it was offered to,
    // and did not use it. The new one, once given, applies the 3.
    let old = env.approval_by_id(s(&first, "approval_id"));
    assert!(old["consumed_at"].is_string(), "{old:#?}");
    assert!(
        s(&old, "consumed_reason").contains("without using it"),
        "{old:#?}"
    );
    env.decide(s(&second, "approval_id"), "yes").expect_code(0);
    let out = plan(&env).run();
    out.expect_code(0);
    assert!(out.out().ends_with("applied 3\n"), "{}", out.context());
}

/// Issue 12 item 1 (defence in depth): a free-text answer reaches the tool, but the combined
/// log and the audit chain see only its digest, and the row forgets it once used; a
/// question that asks for a secret takes no free text at all.
#[test]
fn free_text_answers_are_never_logged_in_clear_and_secrets_take_none() {
    let env = TestEnv::new();
    let ask = |env: &TestEnv, q: &str| {
        let mut c = env.shim();
        c.arg(tool()).args(["ask", q]);
        c
    };
    ask(&env, "Project name: ").run().expect_code(90);
    let ap = env.pending_approval();
    let id = s(&ap, "approval_id").to_owned();
    env.decide(&id, "myproj-7f3a-unique").expect_code(0);
    let out = ask(&env, "Project name: ").run();
    out.expect_code(0);
    assert!(
        out.out().ends_with("got myproj-7f3a-unique\n"),
        "{}",
        out.context()
    );
    let used = env.approval_by_id(&id);
    assert!(used["chosen_value"].is_null(), "{used:#?}");
    // (The tool's own output — the terminal's echo of what was typed, its `got …` — is its
    // business and logged as such; the decision's events never hold the answer.)
    let decisions: Vec<_> = env
        .log_events()
        .into_iter()
        .filter(|e| e["event"] != "tool_output")
        .collect();
    assert!(
        decisions
            .iter()
            .all(|e| !e.to_string().contains("myproj-7f3a-unique")),
        "the combined log holds the answer: {decisions:#?}"
    );
    assert!(
        decisions
            .iter()
            .any(|e| e["event"] == "approval_status_change"
                && e["chosen_value"]
                    .as_str()
                    .is_some_and(|v| v.starts_with("sha256:"))),
        "{decisions:#?}"
    );
    let audit = env.audit_of(&id);
    assert!(
        audit
            .iter()
            .all(|e| !format!("{e:?}").contains("myproj-7f3a-unique")),
        "{audit:#?}"
    );
    // doctor still finds every decision in the audit chain.
    let doc = env.monitor().arg("doctor").run();
    assert!(
        doc.out().contains("every decision is in the audit chain"),
        "{}",
        doc.out()
    );
    // A prompt that asks for a token, even echoed, is a secret: refused (93), no approval
    // to answer it with text (the store refuses free text for such a question too: see
    // the contract's free_text_decision_answers_a_text_prompt).
    let before = env.approvals().len();
    ask(&env, "API token: ").run().expect_code(93);
    assert_eq!(env.approvals().len(), before);
}

/// Issue 27: a question nobody decided that left the screen — bash's `read -t` gave up and
/// the script went on to its next question — is withdrawn (expired by
/// `system:withdrawn`, its event logged, no longer decidable), and the next question is
/// asked and answered as ever.
#[test]
fn wait_mode_withdraws_a_question_the_tool_stopped_asking() {
    let env = TestEnv::new();
    let script = r#"if read -t 8 -p 'Proceed with the upgrade? [y/N] ' a; then echo "upgrade: $a"; else echo; echo 'no answer in 8s: skipping the upgrade'; fi
read -p 'Delete the cache? [y/N] ' b; echo "cache: $b""#;
    let running = env
        .shim()
        .args(["--on-prompt", "wait", "bash", "-c", script])
        .timeout(Duration::from_secs(60))
        .spawn();
    let first = env.pending_approval();
    assert_eq!(s(&first, "prompt_line"), "Proceed with the upgrade? [y/N]");
    let first_id = s(&first, "approval_id").to_owned();
    // Nobody decides in time; the tool asks its next question, which is asked in turn.
    let second = wait_for_pending_other_than(&env, &first_id);
    assert_eq!(s(&second, "prompt_line"), "Delete the cache? [y/N]");
    let gone = env.approval_by_id(&first_id);
    assert_eq!(s(&gone, "status"), "expired", "{gone:#?}");
    assert_eq!(s(&gone, "decided_by"), "system:withdrawn");
    assert!(gone["chosen_value"].is_null(), "{gone:#?}");
    assert!(
        s(&gone, "comment").contains("no longer asks \"Proceed with the upgrade? [y/N]\"")
            && s(&gone, "comment").contains("Delete the cache"),
        "{gone:#?}"
    );
    let withdrawn: Vec<Value> = env
        .log_events()
        .into_iter()
        .filter(|e| {
            e["event"] == "approval_status_change"
                && e["approval_id"] == first_id.as_str()
                && e["decided_by"] == "system:withdrawn"
        })
        .collect();
    assert_eq!(withdrawn.len(), 1, "{:#?}", env.log_events());
    // Too late to decide it; the live question is decided and typed.
    let late = env.decide(&first_id, "y");
    late.expect_code(3);
    assert!(
        late.stderr.contains("system:withdrawn"),
        "{}",
        late.context()
    );
    env.decide(s(&second, "approval_id"), "y").expect_code(0);
    let out = running.wait();
    out.expect_code(0);
    assert!(
        out.out().contains("skipping the upgrade") && out.out().contains("cache: y"),
        "{}",
        out.context()
    );
    assert!(
        out.stderr.contains(&format!(
            "approval {first_id} withdrawn, nobody need decide it"
        )),
        "{}",
        out.context()
    );
    assert!(!out.out().contains("upgrade: y"), "nothing typed into it");
    let statuses = env.status_events();
    assert_eq!(
        statuses,
        [
            "running",
            "waiting_approval",
            "running",
            "waiting_approval",
            "running",
            "completed"
        ]
    );
}
