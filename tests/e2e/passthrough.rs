//! Output passes through byte for byte (text, binary, non-UTF-8, huge lines) and exit
//! statuses are the tool's own.

use headless_run_e2e::*;

#[test]
fn text_output_is_byte_identical_without_carriage_returns() {
    let env = TestEnv::new();
    let out = env
        .shim()
        .args(["--", "printf", "a\\nb\\n\\ttab  \\n"])
        .run();
    out.expect_code(0);
    assert_eq!(out.stdout, b"a\nb\n\ttab  \n");
}

#[test]
fn binary_and_non_utf8_output_is_byte_identical() {
    let env = TestEnv::new();
    let mut data: Vec<u8> = (0..=255u8).cycle().take(256 * 1024).collect();
    data.extend_from_slice(b"\xff\xfe\xc3\x28 invalid utf-8 \x00\x1b[31m\r\n\x04\x03");
    let file = env.path().join("blob.bin");
    std::fs::write(&file, &data).unwrap();
    let out = env.shim().arg(tool()).arg("cat-file").arg(&file).run();
    out.expect_code(0);
    assert_eq!(out.stdout.len(), data.len());
    assert!(out.stdout == data, "output differs from the file");
}

#[test]
fn a_ten_megabyte_line_passes_through() {
    let env = TestEnv::new();
    let out = env.shim().arg(tool()).args(["long-line", "10485760"]).run();
    out.expect_code(0);
    assert_eq!(out.stdout.len(), 10 * 1024 * 1024 + 1);
    assert!(
        out.stdout[..out.stdout.len() - 1]
            .iter()
            .all(|&b| b == b'x')
    );
    // The log event for it is truncated, not 10 MB.
    let ev = env
        .log_events()
        .into_iter()
        .find(|e| e["event"] == "tool_output")
        .expect("tool_output event");
    assert_eq!(ev["truncated"], true);
    assert!(ev["text"].as_str().unwrap().len() <= 4096);
}

#[test]
fn exit_codes_pass_through() {
    for code in [0, 1, 7, 255] {
        let env = TestEnv::new();
        env.shim()
            .arg(tool())
            .args(["exit", &code.to_string()])
            .run()
            .expect_code(code);
        let run = env.only_run();
        assert_eq!(n(&run, "exit_code"), i64::from(code));
        assert_eq!(
            s(&run, "status"),
            if code == 0 { "completed" } else { "failed" }
        );
    }
}

#[test]
fn death_by_signal_is_128_plus_n() {
    for (sig, name) in [(9, "SIGKILL"), (15, "SIGTERM")] {
        let env = TestEnv::new();
        env.shim()
            .arg(tool())
            .args(["kill-self", &sig.to_string()])
            .run()
            .expect_code(128 + sig);
        let run = env.only_run();
        assert_eq!(s(&run, "status"), "failed");
        assert!(s(&run, "reason").contains(name), "{run:?}");
    }
}

#[test]
fn many_lines_all_arrive_in_order() {
    let env = TestEnv::new();
    let out = env.shim().arg(tool()).args(["lines", "20000"]).run();
    out.expect_code(0);
    let text = out.out();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 20000);
    assert_eq!(lines[0], "line 0");
    assert_eq!(lines[19999], "line 19999");
    // The raw run log has every byte, even where the event log is rate-limited.
    let id = s(&env.only_run(), "tool_run_id").to_owned();
    assert_eq!(env.run_log(&id), out.stdout);
}

#[test]
fn help_and_bad_flags() {
    let env = TestEnv::new();
    let out = env.shim().arg("--help").run();
    out.expect_code(0);
    assert!(out.out().contains("Exit codes:"), "{}", out.out());
    let out = env.shim().args(["--timeout", "soon", "true"]).run();
    out.expect_code(125);
    assert!(out.stderr.contains("soon"), "{}", out.stderr);
    let out = env.shim().args(["--on-stall", "nap", "true"]).run();
    out.expect_code(125);
    env.shim().run().expect_code(125);
}

/// Issue 15 item 15: the run log keeps every byte even when the recorder is starved of CPU
/// (the shim, its recorder thread and a flooding tool all pinned to one core): the shim
/// stops reading while the recorder is far behind, so the tool waits instead of bytes
/// being dropped.
#[test]
fn a_flood_on_one_starved_core_loses_nothing_from_the_run_log() {
    let taskset = need("taskset", "util-linux");
    let env = TestEnv::new();
    let out = env
        .command(&taskset)
        .args(["-c", "0"])
        .arg(bin("headless-run"))
        .env("HEADLESS", "1")
        .args(["sh", "-c", "head -c 4000000 /dev/urandom | od -An -tx1 -v"])
        .timeout(std::time::Duration::from_secs(120))
        .run();
    out.expect_code(0);
    let run = env.only_run();
    let id = s(&run, "tool_run_id").to_owned();
    let log = env.run_log(&id);
    assert!(
        !String::from_utf8_lossy(&log).contains("not logged"),
        "nothing was dropped"
    );
    assert_eq!(log.len(), out.stdout.len(), "the run log holds every byte");
    assert!(log == out.stdout, "byte for byte");
}
