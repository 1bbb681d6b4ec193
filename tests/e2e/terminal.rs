//! The tool's terminal follows the caller's: its size, a resize (SIGWINCH), and every
//! forwarded signal (HUP, INT, QUIT besides TERM) reach the tool and it keeps running.

use headless_run_e2e::*;
use std::io::Read;
use std::os::fd::AsRawFd;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

#[test]
fn hup_int_and_quit_are_forwarded_and_the_tool_goes_on() {
    let env = TestEnv::new();
    let running = env.shim().arg(tool()).arg("trap-signals").spawn();
    let shown = |text: &str| {
        wait_until(Duration::from_secs(20), || {
            String::from_utf8_lossy(&running.stdout_now()).contains(text)
        })
    };
    assert!(shown("ready 200x50"), "{:?}", running.stdout_now());
    for sig in [libc::SIGHUP, libc::SIGINT, libc::SIGQUIT] {
        running.signal(sig);
        assert!(
            shown(&format!("got {sig}\n")),
            "signal {sig} did not reach the tool: {:?}",
            String::from_utf8_lossy(&running.stdout_now())
        );
    }
    running.signal(libc::SIGTERM);
    let out = running.wait();
    out.expect_code(42);
    assert!(out.out().ends_with("term\n"), "{:?}", out.out());
    let run = env.only_run();
    assert_eq!(s(&run, "status"), "failed");
    assert_eq!(n(&run, "exit_code"), 42);
}

#[test]
fn the_tool_gets_the_callers_terminal_size_and_its_resizes() {
    let env = TestEnv::new();
    // The shim's stdout is a 100×30 terminal (stdin /dev/null: headless, as in CI with a
    // log viewer attached); the tool's pty must be the same size.
    let (master, slave) = open_pty(100, 30);
    let mut cmd = env.shim();
    cmd.arg(tool()).arg("trap-signals");
    let mut child = cmd
        .cmd
        .stdin(Stdio::null())
        .stdout(Stdio::from(slave.try_clone().unwrap()))
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(slave);
    let seen = Arc::new(Mutex::new(Vec::new()));
    let sink = seen.clone();
    let mut reader = std::fs::File::from(master.try_clone().unwrap());
    std::thread::spawn(move || {
        let mut chunk = [0u8; 4096];
        while let Ok(n) = reader.read(&mut chunk) {
            if n == 0 {
                break;
            }
            sink.lock().unwrap().extend_from_slice(&chunk[..n]);
        }
    });
    let shown = |text: &str| {
        wait_until(Duration::from_secs(20), || {
            String::from_utf8_lossy(&seen.lock().unwrap()).contains(text)
        })
    };
    assert!(
        shown("ready 100x30"),
        "{:?}",
        String::from_utf8_lossy(&seen.lock().unwrap())
    );
    // The operator's terminal grows: the kernel would send SIGWINCH to its foreground
    // group; the shim is not a session leader here, so send it by hand.
    let ws = libc::winsize {
        ws_row: 40,
        ws_col: 132,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // SAFETY: TIOCSWINSZ with a valid winsize on our own pty master.
    assert_eq!(
        unsafe { libc::ioctl(master.as_raw_fd(), libc::TIOCSWINSZ, &ws) },
        0
    );
    // SAFETY: kill(2) of our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGWINCH) };
    assert!(
        shown("winch 132x40"),
        "{:?}",
        String::from_utf8_lossy(&seen.lock().unwrap())
    );
    // SAFETY: kill(2) of our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let mut status = None;
    let ended = wait_until(Duration::from_secs(20), || {
        status = child.try_wait().unwrap();
        status.is_some()
    });
    if !ended {
        let _ = child.kill();
        let _ = child.wait();
    }
    assert_eq!(status.and_then(|s| s.code()), Some(42));
}

/// A tool that asks its terminal questions the way TUIs do: it writes the queries while
/// its terminal still echoes (line mode), then turns raw mode on and reads the replies.
const ASKS_THE_TERMINAL: &str = r#"
import os, sys, termios, time, tty
saved = termios.tcgetattr(0)
os.write(1, b"\x1b[6n\x1b[c\x1b]11;?\x1b\\")
time.sleep(0.1)
tty.setraw(0)
got = b""
deadline = time.time() + 5
while time.time() < deadline and got.count(b"\x1b") < 3:
    got += os.read(0, 64)
termios.tcsetattr(0, termios.TCSADRAIN, saved)
print("GOT", got.hex())
"#;

#[test]
fn terminal_queries_are_answered_and_never_echoed() {
    let env = TestEnv::new();
    let out = env.shim().args(["python3", "-c", ASKS_THE_TERMINAL]).run();
    out.expect_code(0);
    let text = out.out();
    let hex = text
        .split_once("GOT ")
        .and_then(|(_, rest)| rest.lines().next())
        .unwrap_or_else(|| panic!("{}", out.context()))
        .to_owned();
    let got = String::from_utf8(
        (0..hex.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
            .collect(),
    )
    .unwrap();
    // The cursor's position (row 1, column 1), an xterm's device attributes, a black
    // background.
    assert!(got.starts_with("\x1b[1;1R"), "{got:?}");
    assert!(got.contains("\x1b[?"), "{got:?}");
    assert!(got.contains("\x1b]11;rgb:"), "{got:?}");
    // Before: replied at once, while the line discipline still echoed, the replies were
    // printed too (`^[[1;1R`, or the raw sequence).
    assert!(
        !text.contains("1;1R") && !text.contains("rgb:"),
        "{}",
        out.context()
    );
}

/// A tool that floods its terminal with queries and never reads a reply: the replies are
/// bounded (64 unanswered at a time), so the shim never blocks writing them into a full
/// input queue, every query still passes through to stdout, and the tool's exit code is
/// kept.
#[test]
fn a_flood_of_unread_terminal_queries_neither_blocks_nor_loses_output() {
    let env = TestEnv::new();
    let flood = r#"
import os, sys, time
for _ in range(20000):
    os.write(1, b"\x1b[6n\x1b[c")
time.sleep(0.5)
print("DONE")
sys.exit(7)
"#;
    let out = env.shim().args(["python3", "-c", flood]).run();
    out.expect_code(7);
    let text = out.out();
    assert_eq!(text.matches("\x1b[6n").count(), 20000, "{}", out.context());
    assert!(text.contains("DONE"), "{}", out.context());
    assert_eq!(s(&env.only_run(), "status"), "failed");
}
