//! The operator's and the CI user's first contact (issue 15): no state yet is an empty answer,
//! not an error; history cannot be deleted from inside a supervised tool; bad durations are
//! usage errors, never panics, and a timeout of zero is refused rather than read as none.

use headless_run_e2e::*;
use std::time::Duration;

#[test]
fn no_state_yet_lists_nothing_and_exits_0() {
    let env = TestEnv::new();
    let runs = env.monitor().arg("runs").run();
    runs.expect_code(0);
    assert_eq!(runs.out().trim(), "no runs", "{}", runs.context());
    let json = env.monitor().args(["runs", "--json"]).run();
    json.expect_code(0);
    assert_eq!(json.out().trim(), "[]", "{}", json.context());
    let aps = env
        .monitor()
        .args(["approvals", "--status", "all", "--json"])
        .run();
    aps.expect_code(0);
    assert_eq!(aps.out().trim(), "[]", "{}", aps.context());
    let pending = env.monitor().arg("approvals").run();
    pending.expect_code(0);
    assert_eq!(pending.out().trim(), "no pending approvals");
    let gc = env
        .monitor()
        .args(["gc", "--older-than", "1d", "--dry-run"])
        .run();
    gc.expect_code(0);
    assert!(gc.out().contains("would delete 0 runs"), "{}", gc.context());
    // Looking created nothing.
    assert!(
        !env.state().exists(),
        "the state dir was created by a listing"
    );
    // What names one thing still says it is not there.
    env.monitor()
        .args(["show", "TR-01M843P2RDXRN7QN3V3KQE7DE4"])
        .run()
        .expect_code(1);
}

#[test]
fn gc_is_refused_inside_a_supervised_tool() {
    let env = TestEnv::new();
    env.shim().arg("true").run().expect_code(0);
    std::thread::sleep(Duration::from_millis(20));
    // A tool under headless-run runs `monitor gc`: refused, the history stays.
    let inside = env
        .shim()
        .args([
            bin("monitor").to_str().unwrap(),
            "gc",
            "--older-than",
            "1ms",
        ])
        .run();
    inside.expect_code(1);
    // The tool's stderr is the pty: it reaches the shim's stdout.
    assert!(
        inside.out().contains("refusing to delete history"),
        "{}",
        inside.context()
    );
    assert_eq!(env.runs().len(), 2, "gc deleted runs from inside a tool");
    // The same from a terminal of the operator's deletes the finished runs.
    let outside = env.monitor().args(["gc", "--older-than", "1ms"]).run();
    outside.expect_code(0);
    assert!(env.runs().is_empty(), "{}", outside.context());
}

#[test]
fn bad_durations_are_usage_errors_not_panics() {
    let env = TestEnv::new();
    env.shim().arg("true").run().expect_code(0);
    let id = s(&env.only_run(), "tool_run_id").to_owned();
    for args in [
        vec!["runs", "--since", "500000h"],
        vec!["approvals", "--since", "500000h"],
        vec!["gc", "--older-than", "500000h"],
        vec!["wait", &id, "--timeout", "18446744073709551615s"],
        vec!["wait", &id, "--timeout", "18446744073709551615"],
        vec!["wait", &id, "--timeout", "0"],
        vec!["wait", &id, "--timeout", "0.0000000001"],
        vec!["worker", "--interval", "0"],
    ] {
        let out = env.monitor().args(&args).run();
        out.expect_code(2);
        assert!(
            !out.stderr.contains("panicked"),
            "{args:?}: {}",
            out.context()
        );
    }
    for args in [
        vec!["--timeout", "0"],
        vec!["--stall-timeout", "0.0000000001"],
        vec!["--timeout", "18446744073709551615s"],
        // Shorter than the prompt idle window (300ms): a tool at a prompt would be stalled
        // before the prompt is seen.
        vec!["--stall-timeout", "100ms"],
    ] {
        let out = env.shim().args(&args).args(["--", "true"]).run();
        out.expect_code(125);
        assert!(
            !out.stderr.contains("panicked"),
            "{args:?}: {}",
            out.context()
        );
    }
    assert_eq!(env.runs().len(), 1, "a refused invocation recorded a run");
    // `none` is how a limit is switched off.
    env.shim()
        .args(["--timeout", "none", "--", "true"])
        .run()
        .expect_code(0);
}

/// Issue 15 item 4: a mistyped option is a usage error naming it (with a suggestion), not a
/// tool of that name; nothing is recorded. Only `--` or the first non-option word starts the
/// tool. A tool that is not found keeps the whole `PATH` out of its run's reason.
#[test]
fn a_mistyped_option_is_a_usage_error_not_a_tool() {
    let env = TestEnv::new();
    let out = env.shim().args(["--tiemout", "1s", "--", "true"]).run();
    out.expect_code(125);
    assert!(out.stderr.contains("'--tiemout'"), "{}", out.stderr);
    assert!(out.stderr.contains("'--timeout'"), "{}", out.stderr);
    assert!(env.runs().is_empty(), "{:#?}", env.runs());
    // The tool's own options after its name still reach it; `--` still starts a tool that
    // looks like an option.
    let out = env.shim().args(["sh", "-c", "echo $0 -x", "--yes"]).run();
    out.expect_code(0);
    assert_eq!(out.out(), "--yes -x\n");
    let out = env.shim().args(["--", "no-such-tool-anywhere"]).run();
    out.expect_code(127);
    assert!(out.stderr.contains("searched PATH="), "{}", out.stderr);
    let runs = env.runs();
    assert_eq!(
        s(&runs[runs.len() - 1], "reason"),
        "no-such-tool-anywhere: command not found on PATH"
    );
}

/// Issue 15 item 8 (part): when the tool's prompt has no newline and stdout and stderr are
/// one terminal, the shim's line about the approval starts on a line of its own.
#[test]
fn the_shims_line_starts_on_its_own_line_after_a_prompt() {
    let env = TestEnv::new();
    let mut cmd = env.command(bin("headless-run")).cmd;
    cmd.env("HEADLESS", "1")
        .arg(tool())
        .args(["ask", "Proceed? [y/N] "]);
    let (code, screen) = run_in_pty(cmd, None, std::time::Duration::from_secs(30));
    assert_eq!(code, Some(90));
    let screen = String::from_utf8_lossy(&screen);
    let at = screen
        .find("headless-run: tool.py asks")
        .unwrap_or_else(|| panic!("{screen:?}"));
    let before = &screen[..at];
    assert!(
        before.ends_with('\n'),
        "the line does not start afresh: {screen:?}"
    );
    assert!(before.contains("Proceed? [y/N] "), "{screen:?}");
}

/// Issue 15 item 6: any unique prefix of an id, in any case, names it in every command;
/// an ambiguous one is a usage error listing the matches, an unknown one "not found".
#[test]
fn ids_can_be_given_by_a_unique_prefix_in_any_case() {
    let env = TestEnv::new();
    env.shim().arg("true").run().expect_code(0);
    env.shim()
        .arg(tool())
        .args(["ask", "Proceed? [y/N] "])
        .run()
        .expect_code(90);
    let ap = env.pending_approval();
    let ap_id = s(&ap, "approval_id").to_owned();
    let run_id = s(&ap, "tool_run_id").to_owned();
    // Both runs were started in the same few milliseconds: their ids share a long
    // prefix. Enough of the random part makes each unique.
    let short_ap = ap_id[..20].to_ascii_lowercase();
    let shown = env.monitor().args(["show", &short_ap, "--json"]).run();
    shown.expect_code(0);
    assert!(shown.out().contains(&ap_id), "{}", shown.context());
    let short_run = run_id[..22].to_ascii_lowercase();
    env.monitor()
        .args(["show", &short_run])
        .run()
        .expect_code(0);
    // Ambiguous: both runs start with TR-.
    let out = env.monitor().args(["show", "tr-"]).run();
    out.expect_code(2);
    assert!(out.stderr.contains("names 2 ids"), "{}", out.stderr);
    env.monitor().args(["show", "TR-ZZZZ"]).run().expect_code(4);
    // Deciding by a prefix decides the whole id.
    env.monitor()
        .args(["decide", &short_ap, "n"])
        .run()
        .expect_code(0);
    assert_eq!(s(&env.approval_by_id(&ap_id), "status"), "approved");
}

/// Issue 15 item 7: the approval views say what is being approved — the command line, its
/// directory, host and execution — in the table, `show`, and `--json`.
#[test]
fn approval_views_show_the_command_being_approved() {
    let env = TestEnv::new();
    env.shim()
        .arg(tool())
        .args(["ask", "Ship it? [y/N] ", "my arg"])
        .run()
        .expect_code(90);
    let ap = env.pending_approval();
    let id = s(&ap, "approval_id").to_owned();
    let work = env.work().display().to_string();
    // --json: the columns plus command (argv), cwd and host.
    assert_eq!(ap["command"][1], "ask", "{ap:#?}");
    assert_eq!(ap["command"][3], "my arg", "{ap:#?}");
    assert_eq!(ap["cwd"], work.as_str(), "{ap:#?}");
    assert!(
        ap["host"].as_str().is_some_and(|h| !h.is_empty()),
        "{ap:#?}"
    );
    assert!(ap["execution_id"].as_str().is_some(), "{ap:#?}");
    let shown = env.monitor().args(["show", &id]).run();
    shown.expect_code(0);
    assert!(shown.out().contains("'my arg'"), "{}", shown.out());
    assert!(
        shown
            .out()
            .contains(&format!("cwd                  {work}")),
        "{}",
        shown.out()
    );
    let table = env.monitor().arg("approvals").env("COLUMNS", "250").run();
    table.expect_code(0);
    assert!(table.out().contains("COMMAND"), "{}", table.out());
    // The command line, clipped to its column.
    let tool_path = tool().display().to_string();
    assert!(table.out().contains(&tool_path[..12]), "{}", table.out());
}

/// Issue 15 item 12 (part): a mistyped status is a usage error listing the valid ones, for
/// runs as for approvals; a zero worker interval is refused.
#[test]
fn value_errors_list_the_valid_values() {
    let env = TestEnv::new();
    let out = env.monitor().args(["runs", "--status", "faild"]).run();
    out.expect_code(2);
    assert!(out.stderr.contains("possible values"), "{}", out.stderr);
    assert!(out.stderr.contains("'failed'"), "{}", out.stderr);
    let out = env.monitor().args(["approvals", "--status", "pend"]).run();
    out.expect_code(2);
    assert!(out.stderr.contains("'pending'"), "{}", out.stderr);
    env.monitor()
        .args(["worker", "--interval", "0"])
        .run()
        .expect_code(2);
}
