//! Stdin: data given to the shim reaches the tool exactly, with EOF and no echo; with no
//! data (the CI case) a read with nothing asked gets EOF; interactive mode keeps the
//! terminal.

use headless_run_e2e::*;
use std::time::Duration;

#[test]
fn piped_stdin_reaches_the_tool_exactly_without_echo() {
    let env = TestEnv::new();
    let data: Vec<u8> = (0..200_000u32)
        .flat_map(|i| format!("{i}\n").into_bytes())
        .collect();
    let out = env
        .shim()
        .arg(tool())
        .arg("read-stdin")
        .stdin_bytes(data.clone())
        .run();
    out.expect_code(0);
    let header = format!("read {} bytes\n", data.len());
    assert!(
        out.stdout.starts_with(header.as_bytes()),
        "{}",
        &out.out()[..80.min(out.stdout.len())]
    );
    assert_eq!(
        &out.stdout[header.len()..],
        &data[..],
        "stdin was altered or echoed"
    );
}

#[test]
fn a_file_on_stdin_reaches_the_tool() {
    let env = TestEnv::new();
    let file = env.path().join("in.txt");
    std::fs::write(&file, "from a file\n").unwrap();
    let out = env.shim().arg("cat").stdin_file(&file).run();
    out.expect_code(0);
    assert_eq!(out.out(), "from a file\n");
}

#[test]
fn no_stdin_means_eof_for_a_read_with_no_question() {
    let env = TestEnv::new();
    // /dev/null, as in CI.
    let out = env.shim().arg("cat").run();
    out.expect_code(0);
    assert_eq!(out.out(), "");
    let out = env.shim().arg(tool()).arg("read-line").run();
    out.expect_code(3);
    assert_eq!(out.out(), "EOF\n");
    // An empty file and a closed pipe are nothing too.
    let empty = env.path().join("empty");
    std::fs::write(&empty, "").unwrap();
    env.shim()
        .arg("cat")
        .stdin_file(&empty)
        .run()
        .expect_code(0);
    env.shim()
        .arg("cat")
        .stdin_bytes(Vec::new())
        .run()
        .expect_code(0);
}

#[test]
fn the_tool_has_a_terminal_for_stdout_and_the_documented_environment() {
    let env = TestEnv::new();
    let out = env
        .shim()
        .args(["--execution-id", "EX-test-1"])
        .arg(tool())
        .args([
            "env",
            "HEADLESS",
            "HEADLESS_RUN_TOOL_RUN_ID",
            "HEADLESS_RUN_EXECUTION_ID",
        ])
        .run();
    out.expect_code(0);
    let run = env.only_run();
    assert_eq!(
        out.out(),
        format!(
            "HEADLESS=1\nHEADLESS_RUN_TOOL_RUN_ID={}\nHEADLESS_RUN_EXECUTION_ID=EX-test-1\n",
            s(&run, "tool_run_id")
        )
    );
    let out = env.shim().arg(tool()).arg("isatty").run();
    assert_eq!(out.out(), "stdin=True stdout=True\n");
    // No terminal of our own: the pty is 200x50.
    let out = env.shim().arg(tool()).arg("winsize").run();
    assert_eq!(out.out(), "200x50\n");
}

#[test]
fn ci_variable_means_headless_and_headless_0_forces_interactive() {
    let env = TestEnv::new();
    let out = env
        .command(bin("headless-run"))
        .env("CI", "true")
        .arg(tool())
        .args(["env", "HEADLESS"])
        .run();
    assert_eq!(out.out(), "HEADLESS=1\n");
    let out = env
        .command(bin("headless-run"))
        .env("CI", "false")
        .env("HEADLESS", "0")
        .arg(tool())
        .arg("isatty")
        .run();
    // Forced interactive: the tool inherits the (piped) stdout, not a pty.
    assert_eq!(out.out(), "stdin=False stdout=False\n");
    let runs = env.runs();
    assert_eq!(runs[1]["metadata"]["mode"], "interactive", "{runs:?}");
}

#[test]
fn interactive_mode_keeps_the_terminal_and_is_recorded() {
    let env = TestEnv::new();
    // The harness's command: CI, HEADLESS* and the rest of the outside removed.
    let mut cmd = env.command(bin("headless-run")).cmd;
    cmd.arg("sh")
        .arg("-c")
        .arg("read -r answer; echo \"you said $answer; HEADLESS=${HEADLESS:-unset}\"; [ -t 0 ] && echo stdin-is-a-tty");
    let (code, screen) = run_in_pty(
        cmd,
        Some((Duration::from_millis(500), b"hello\r")),
        Duration::from_secs(30),
    );
    assert_eq!(code, Some(0));
    let screen = String::from_utf8_lossy(&screen);
    assert!(
        screen.contains("you said hello; HEADLESS=unset"),
        "{screen}"
    );
    assert!(screen.contains("stdin-is-a-tty"), "{screen}");
    let run = env.only_run();
    assert_eq!(s(&run, "status"), "completed");
    assert_eq!(run["metadata"]["mode"], "interactive", "{run:?}");
}
