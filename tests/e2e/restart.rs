//! `monitor restart TR-…` (issue 15 item 11): an ended run's command again, through
//! headless-run, in its directory and execution, linked to the old run; refused for live
//! and parked runs, other hosts and other users.

use crate::rows::Run;
use headless_run_e2e::*;

#[test]
fn restart_runs_an_ended_command_again_linked_to_it() {
    let env = TestEnv::new();
    let script = "echo attempt >> attempts.log; echo \"in $(pwd)\"; exit 3";
    let first = env.shim().args(["sh", "-c", script]).run();
    first.expect_code(3);
    let old = env.only_run();
    let old_id = s(&old, "tool_run_id").to_owned();
    // From elsewhere, by an id prefix in lower case.
    let prefix = old_id[..10].to_ascii_lowercase();
    let out = env
        .monitor()
        .args(["restart", &prefix])
        .current_dir(env.path())
        .run();
    // Monitor's own codes: it ran (0); the tool's code is in the outcome line.
    out.expect_code(0);
    assert!(
        out.out()
            .trim_end()
            .ends_with("ran again: exit 3 (monitor runs shows the new run)"),
        "{}",
        out.context()
    );
    assert!(
        out.out().contains(&format!("in {}", env.work().display())),
        "the command ran in its own directory, its output on monitor's: {}",
        out.context()
    );
    assert!(out.stderr.contains("restarting"), "{}", out.stderr);
    let attempts = std::fs::read_to_string(env.work().join("attempts.log")).unwrap();
    assert_eq!(attempts.lines().count(), 2);
    let runs = env.runs();
    assert_eq!(runs.len(), 2, "{runs:#?}");
    let new = runs
        .iter()
        .find(|r| s(r, "tool_run_id") != old_id)
        .unwrap()
        .clone();
    assert_eq!(new["metadata"]["restart_of"], old_id.as_str(), "{new:#?}");
    assert_eq!(s(&new, "execution_id"), s(&old, "execution_id"));
    assert_eq!(s(&new, "cwd"), s(&old, "cwd"));
    assert_eq!(n(&new, "exit_code"), 3);
}

#[test]
fn restart_refuses_live_parked_foreign_and_unknown_runs() {
    let env = TestEnv::new();
    // Parked on an approval: decide it instead.
    env.shim()
        .arg(tool())
        .args(["ask", "Deploy? [y/N] "])
        .run()
        .expect_code(90);
    let parked = s(&env.only_run(), "tool_run_id").to_owned();
    let out = env.monitor().args(["restart", &parked]).run();
    out.expect_code(3);
    assert!(out.stderr.contains("parked"), "{}", out.stderr);
    // Another host's run.
    let mut foreign = Run::parked(&env, &["true"]);
    foreign.status = "failed".into();
    foreign.exit_code = Some(1);
    foreign.host = "elsewhere.example".into();
    foreign.insert(&env);
    let out = env.monitor().args(["restart", &foreign.id]).run();
    out.expect_code(1);
    assert!(out.stderr.contains("elsewhere.example"), "{}", out.stderr);
    // Unknown, and not a run id.
    env.monitor()
        .args(["restart", "TR-00000000000000000000000000"])
        .run()
        .expect_code(4);
    env.monitor()
        .args(["restart", "AP-01"])
        .run()
        .expect_code(2);
    // Nothing new was run.
    assert_eq!(env.runs().len(), 2);
}

#[test]
fn restart_is_refused_inside_a_supervised_tool() {
    let env = TestEnv::new();
    env.shim().args(["false"]).run().expect_code(1);
    let id = s(&env.only_run(), "tool_run_id").to_owned();
    let monitor = bin("monitor");
    let out = env.shim().arg(&monitor).args(["restart", &id]).run();
    out.expect_code(1);
    assert!(
        out.out().contains("refusing to restart"),
        "{}",
        out.context()
    );
    assert_eq!(
        env.runs().len(),
        2,
        "only the supervised monitor itself ran"
    );
}
