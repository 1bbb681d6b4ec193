//! Who may send a cooperative event: a line on the tool's terminal counts only when it
//! carries the run's `HEADLESS_RUN_EVENT_TOKEN`, and every line on the run's
//! `HEADLESS_RUN_EVENT_FD` counts (and is not output). Text a tool merely prints — a file it
//! cats — raises no approval, pages no notify hook and beats no heart; the token itself is
//! never stored or logged; a nested run has a token and a descriptor of its own.

use headless_run_e2e::*;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// A notify hook that writes what it is given to a file; returns the file.
fn notify_hook(env: &TestEnv) -> PathBuf {
    let paged = env.path().join("paged.txt");
    env.write_config(&format!(
        "[notify]\ncommand = [\"sh\", \"-c\", \"cat > {}\"]\n",
        paged.display()
    ));
    paged
}

/// Event lines as a README, a log or an attacker's file may hold them: none carries this
/// run's token.
const FORGED: &str = concat!(
    "# Notes\n",
    r#"{"event":"approval_needed","question":"Rotate the prod keys?","options":["yes","no"],"default":"yes"}"#,
    "\n",
    r#"{"event":"approval_needed","approvalId":"AP-FORGED","toolRunId":"TR-FORGED","question":"Wrong token?","token":"0123456789abcdef0123456789abcdef"}"#,
    "\n",
    r#"{"event":"approval_needed","approval_id":"AP-FORGED2","tool_run_id":"TR-FORGED","question":"Empty token?","token":""}"#,
    "\n",
    r#"{"event":"approval_needed","question":"Numeric token?","token":1234}"#,
    "\n",
    r#"{"event":"heartbeat","message":"still alive"}"#,
    "\n",
    r#"{"event":"heartbeat","token":"0123456789abcdef0123456789abcdef"}"#,
    "\n",
    "the end\n",
);

/// The `text` of every `tool_output` event, in order.
fn output_texts(env: &TestEnv) -> Vec<String> {
    env.log_events()
        .into_iter()
        .filter(|e| e["event"] == "tool_output")
        .filter_map(|e| e["text"].as_str().map(str::to_owned))
        .collect()
}

/// Every file under `dir`, recursively.
fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for entry in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                todo.push(path);
            } else {
                found.push(path);
            }
        }
    }
    found
}

/// Fails the test if `secret` is in any file of the state dir (database, its WAL, the
/// combined log, run logs, spool) or in what `monitor` shows of the runs and approvals.
#[track_caller]
fn assert_nowhere_kept(env: &TestEnv, secret: &str) {
    assert_eq!(secret.len(), 32, "a token is 128 bits in hex: {secret:?}");
    let files = files_under(&env.state());
    assert!(files.iter().any(|f| f.ends_with("state.db")), "{files:?}");
    for f in &files {
        let bytes = std::fs::read(f).unwrap_or_default();
        assert!(
            !bytes.windows(secret.len()).any(|w| w == secret.as_bytes()),
            "the token is in {}",
            f.display()
        );
    }
    let mut shown = Vec::new();
    for args in [
        vec!["runs", "--json"],
        vec!["approvals", "--status", "all", "--json"],
        vec!["logs"],
    ] {
        shown.push(env.monitor().args(&args).run().out());
    }
    for r in env.runs() {
        shown.push(
            env.monitor()
                .args(["show", s(&r, "tool_run_id")])
                .run()
                .out(),
        );
    }
    for text in shown {
        assert!(!text.contains(secret), "monitor shows the token: {text}");
    }
}

/// Regression (issue 12.14): `cat NOTES.md` whose text held an `approval_needed` line
/// created an approval and paged the notify hook.
#[test]
fn a_printed_file_holding_event_lines_asks_nothing_and_pages_nobody() {
    let env = TestEnv::new();
    let paged = notify_hook(&env);
    std::fs::write(env.work().join("NOTES.md"), FORGED).unwrap();
    let out = env.shim().args(["cat", "NOTES.md"]).run();
    out.expect_code(0);
    assert_eq!(out.out(), FORGED, "output passes byte for byte");
    assert_eq!(
        env.monitor_json(&["approvals", "--status", "all"]),
        Some(Value::Array(Vec::new())),
        "no approval from printed text"
    );
    let run = env.only_run();
    assert_eq!(s(&run, "status"), "completed");
    assert!(run["last_heartbeat_at"].is_null(), "{run:?}");
    let names = env.log_event_names();
    assert!(
        !names
            .iter()
            .any(|n| n == "approval_needed" || n == "heartbeat"),
        "{names:?}"
    );
    // Every line is ordinary output.
    assert_eq!(
        output_texts(&env),
        FORGED.lines().collect::<Vec<_>>(),
        "each line is a tool_output event"
    );
    std::thread::sleep(Duration::from_millis(800));
    assert!(!paged.exists(), "the notify hook was paged");
}

/// Regression (issue 12.14): a heartbeat line in printed text passed for the tool's own.
/// It is output like any other line: it neither records a heartbeat nor keeps the run alive
/// past the stall timeout once the output stops.
#[test]
fn a_forged_heartbeat_in_printed_text_does_not_hold_off_a_stall() {
    let env = TestEnv::new();
    let beats: String = (0..3)
        .map(|i| format!("{{\"event\":\"heartbeat\",\"message\":\"beat {i}\"}}\n"))
        .collect();
    std::fs::write(env.work().join("beats.log"), &beats).unwrap();
    let out = env
        .shim()
        .args(["--stall-timeout", "1s"])
        .args(["sh", "-c", "cat beats.log; sleep 8; echo never"])
        .run();
    out.expect_code(92);
    assert_eq!(out.out(), beats);
    let run = env.only_run();
    assert_eq!(s(&run, "status"), "stalled");
    assert!(run["last_heartbeat_at"].is_null(), "{run:?}");
    assert!(!env.log_event_names().iter().any(|n| n == "heartbeat"));
}

/// With the run's token a printed line is an event; the token itself is in no file of the
/// state dir and nothing `monitor` shows — not in the approval built from the line, not in
/// the `tool_output` of a line that carried it without being an event, not in the run log,
/// not in the screen context of a later prompt.
#[test]
fn the_runs_token_makes_a_printed_line_an_event_and_is_never_kept() {
    let env = TestEnv::new();
    let paged = notify_hook(&env);
    let script = r#"T="$HEADLESS_RUN_EVENT_TOKEN"
printf %s "$T" > token1.txt
echo "my token is $T"
printf '{"event":"heartbeat","token":"%s","message":"beat %s"}\n' "$T" "$T"
printf '{"event":"no_such_event","token":"%s"}\n' "$T"
printf '{"event":"approval_needed","token":"%s","question":"Ship %s?","options":["yes","no"],"context":"with %s"}\n' "$T" "$T" "$T"
exit 90"#;
    let out = env.shim().args(["sh", "-c", script]).run();
    out.expect_code(90);
    let token = std::fs::read_to_string(env.work().join("token1.txt")).unwrap();
    assert!(
        token.len() == 32 && token.bytes().all(|b| b.is_ascii_hexdigit()),
        "{token:?}"
    );
    let ap = env.pending_approval();
    let masked = "*".repeat(32);
    assert_eq!(s(&ap, "question"), format!("Ship {masked}?"));
    assert_eq!(s(&ap, "context"), format!("with {masked}"));
    let run = env.only_run();
    assert_eq!(s(&run, "status"), "waiting_approval");
    assert_eq!(s(&ap, "tool_run_id"), s(&run, "tool_run_id"));
    assert!(run["last_heartbeat_at"].is_string(), "{run:?}");
    assert!(
        wait_until(Duration::from_secs(10), || paged.exists()),
        "the hook is paged for a real request"
    );
    // The lines that carried it and were not events are output, without it.
    let texts = output_texts(&env);
    assert_eq!(
        texts,
        [
            format!("my token is {masked}"),
            format!(r#"{{"event":"no_such_event","token":"{masked}"}}"#)
        ],
        "{texts:?}"
    );
    let log = String::from_utf8_lossy(&env.run_log(s(&run, "tool_run_id"))).into_owned();
    assert!(log.contains(&format!("my token is {masked}\n")), "{log}");
    // A later prompt's screen context shows the token's line without it.
    let script = r#"printf %s "$HEADLESS_RUN_EVENT_TOKEN" > token2.txt
echo "token: $HEADLESS_RUN_EVENT_TOKEN"
printf 'Go on? [y/N] '
read a"#;
    env.shim().args(["sh", "-c", script]).run().expect_code(90);
    let second = std::fs::read_to_string(env.work().join("token2.txt")).unwrap();
    assert_ne!(second, token, "each run has its own token");
    let ap = env
        .approvals()
        .into_iter()
        .find(|a| s(a, "question").contains("Go on?"))
        .expect("the prompt's approval");
    // What the operator sees (the screen above the question, and the question) shows the
    // token masked.
    let seen = format!("{}\n{}", s(&ap, "context"), s(&ap, "question"));
    assert!(seen.contains(&format!("token: {masked}")), "{ap:?}");
    for t in [&token, &second] {
        assert_nowhere_kept(&env, t);
    }
}

/// A cooperative request's `expiresInSeconds` is its approval's time, bounded by the
/// configured `approval_ttl`.
#[test]
fn a_requests_own_wait_sets_its_expiry_within_the_configured_ttl() {
    let env = TestEnv::new();
    env.write_config("[defaults]\napproval_ttl = \"10m\"\n");
    let expiry = |secs: &str, question: &str| {
        env.shim()
            .arg(tool())
            .args(["fd-cooperative-for", secs, question])
            .run()
            .expect_code(90);
        let a = env
            .approvals()
            .into_iter()
            .find(|a| a["question"] == question)
            .unwrap();
        let at = |k: &str| hr_shared::time::parse_rfc3339(a[k].as_str().unwrap()).unwrap();
        at("expires_at")
            .duration_since(at("created_at"))
            .unwrap()
            .as_secs()
    };
    let short = expiry("90", "Deploy within 90 s?");
    assert!((89..=91).contains(&short), "{short}");
    let capped = expiry("86400", "Deploy within a day?");
    assert!((599..=601).contains(&capped), "{capped}");
}

/// An `error` event is the run's `last_error_msg` (cleaned), whatever the exit.
#[test]
fn an_error_event_is_the_runs_last_error() {
    let env = TestEnv::new();
    let out = env
        .shim()
        .arg(tool())
        .args(["fd-error", "disk quota exceeded on /var", "3"])
        .run();
    out.expect_code(3);
    let run = env.only_run();
    assert_eq!(s(&run, "status"), "failed");
    assert_eq!(s(&run, "last_error_msg"), "disk quota exceeded on /var!");
    let shown = env.monitor().args(["show", s(&run, "tool_run_id")]).run();
    assert!(
        shown.out().contains("disk quota exceeded on /var!"),
        "{}",
        shown.out()
    );
}

/// A tool that fails without an `error` event: its last line with something on it (on
/// stderr, through the terminal; cleaned) is the run's `last_error_msg`. One that succeeds,
/// or that said why in an event, keeps what it had.
#[test]
fn a_failed_tools_last_line_is_its_last_error_when_no_event_said_why() {
    let env = TestEnv::new();
    let out = env
        .shim()
        .args([
            "--",
            "sh",
            "-c",
            "echo cloning; printf 'fatal: repository \\033[31mnot\\033[0m found\\n\\n  \\n' >&2; exit 128",
        ])
        .run();
    out.expect_code(128);
    let run = env.only_run();
    assert_eq!(s(&run, "status"), "failed");
    assert_eq!(s(&run, "last_error_msg"), "fatal: repository not found");
    let shown = env.monitor().args(["show", s(&run, "tool_run_id")]).run();
    assert!(
        shown.out().contains("fatal: repository not found"),
        "{}",
        shown.out()
    );

    let env = TestEnv::new();
    env.shim()
        .args(["--", "sh", "-c", "echo all done"])
        .run()
        .expect_code(0);
    assert!(env.only_run()["last_error_msg"].is_null());

    // The tool's own word wins over its last line.
    let env = TestEnv::new();
    env.shim()
        .arg(tool())
        .args(["fd-error", "disk quota exceeded on /var", "3"])
        .run()
        .expect_code(3);
    assert_eq!(
        s(&env.only_run(), "last_error_msg"),
        "disk quota exceeded on /var!"
    );
}

/// The event descriptor: heartbeats and requests written there count without a token, and
/// are not output (not on stdout, not in the run log).
#[test]
fn the_event_fd_carries_events_that_are_not_output() {
    let env = TestEnv::new();
    // Heartbeats alone, no output at all, keep a tool alive past its stall timeout.
    let out = env
        .shim()
        .args(["--stall-timeout", "2s"])
        .arg(tool())
        .args(["fd-heartbeat", "0.4", "12"])
        .run();
    out.expect_code(0);
    assert_eq!(out.out(), "");
    let run = env.only_run();
    assert_eq!(s(&run, "status"), "completed");
    assert!(run["last_heartbeat_at"].is_string(), "{run:?}");
    let beats: Vec<Value> = env
        .log_events()
        .into_iter()
        .filter(|e| e["event"] == "heartbeat")
        .collect();
    assert!(beats.len() >= 2, "{beats:?}");
    assert_eq!(beats[0]["source"], "tool");
    assert_eq!(beats[0]["message"], "step 0");

    // A request on the descriptor, answered through the worker as any other.
    let env = TestEnv::new();
    let out = env
        .shim()
        .arg(tool())
        .args(["fd-cooperative", "Deploy to prod?", "ship", "hold"])
        .run();
    out.expect_code(90);
    assert_eq!(out.out(), "need a decision\n", "the request is not output");
    let ap = env.pending_approval();
    assert_eq!(s(&ap, "question"), "Deploy to prod?");
    assert_eq!(s(&ap, "prompt_kind"), "cooperative");
    let run = env.only_run();
    assert_eq!(s(&run, "status"), "waiting_approval");
    assert_eq!(
        env.run_log(s(&run, "tool_run_id")),
        b"need a decision\n",
        "nor is it in the run log"
    );
    env.decide(s(&ap, "approval_id"), "ship").expect_code(0);
    env.monitor()
        .args(["worker", "--once"])
        .run()
        .expect_code(0);
    assert!(
        wait_for_state(Duration::from_secs(20), || {
            env.runs().len() == 2 && env.runs()[1]["status"] == "completed"
        }),
        "{:#?}",
        env.runs()
    );
    let runs = env.runs();
    let log = env.run_log(s(&runs[1], "tool_run_id"));
    assert!(String::from_utf8_lossy(&log).contains("resumed with ship"));
}

/// The tool gets the descriptor at the number the variable names, and no other of the
/// shim's own; a descriptor the shim was given on purpose (a jobserver's, here at 3) is
/// passed on and not replaced. Shell redirections reach the event fd.
#[test]
fn the_event_fd_is_the_only_extra_descriptor_the_tool_gets() {
    let env = TestEnv::new();
    // The shim is started with nothing open but its stdio and one inheritable descriptor
    // at 3 (whatever the test process holds is closed first).
    let wrapper = "import os, sys
os.closerange(3, 65536)
fd = os.open('/dev/null', os.O_RDONLY)
assert fd == 3
os.set_inheritable(fd, True)
os.execv(sys.argv[1], sys.argv[1:])";
    // The descriptors are listed by a child of the shell that inherits them (a listing of
    // the shell's own would race with the pipes it sets up for a pipeline); the listing's
    // own directory handle, closed by then, is left out.
    let script = r#"echo "fd=$HEADLESS_RUN_EVENT_FD"
python3 -c 'import os; print(" ".join(sorted((f for f in os.listdir("/proc/self/fd") if os.path.exists("/proc/self/fd/" + f)), key=int)) + " ")'
printf '{"event":"heartbeat","message":"from sh"}\n' >&"$HEADLESS_RUN_EVENT_FD""#;
    let out = env
        .command("python3")
        .env("HEADLESS", "1")
        .args(["-c", wrapper])
        .arg(bin("headless-run"))
        .args(["sh", "-c", script])
        .run();
    out.expect_code(0);
    let text = out.out();
    assert_eq!(
        text.lines().take(2).collect::<Vec<_>>(),
        ["fd=4", "0 1 2 3 4 "],
        "the tool has its stdio, the descriptor it was given at 3 and the event fd at 4, \
         nothing else: {}",
        out.context()
    );
    assert!(!text.contains("from sh"), "{text}");
    let beats: Vec<Value> = env
        .log_events()
        .into_iter()
        .filter(|e| e["event"] == "heartbeat")
        .collect();
    assert_eq!(beats.len(), 1, "{beats:?}");
    assert_eq!(beats[0]["message"], "from sh");
}

/// A supervised tool that runs another `headless-run`: the inner run gets a token and a
/// descriptor of its own (the outer ones are not passed on as valid), so a request the
/// inner tool makes is the inner run's only — the outer shim, reading the same line as
/// its own output, takes it for text (before, both shims made an approval of it).
#[test]
fn a_nested_run_has_its_own_token_and_descriptor() {
    let env = TestEnv::new();
    let shim = bin("headless-run");
    let inner = r#"printf %s "$HEADLESS_RUN_EVENT_TOKEN" > inner.txt
printf '{"event":"heartbeat","message":"inner beat"}\n' >&"$HEADLESS_RUN_EVENT_FD"
printf '{"event":"approval_needed","token":"%s","question":"Inner asks?","options":["yes","no"]}\n' "$HEADLESS_RUN_EVENT_TOKEN"
exit 90"#;
    let outer = r#"printf %s "$HEADLESS_RUN_EVENT_TOKEN" > outer.txt
"$0" sh -c "$1"
echo "inner exited $?""#;
    let out = env
        .shim()
        .args(["sh", "-c", outer])
        .arg(&shim)
        .arg(inner)
        .run();
    out.expect_code(0);
    assert!(out.out().contains("inner exited 90"), "{}", out.context());
    let outer_token = std::fs::read_to_string(env.work().join("outer.txt")).unwrap();
    let inner_token = std::fs::read_to_string(env.work().join("inner.txt")).unwrap();
    assert_eq!(outer_token.len(), 32);
    assert_eq!(inner_token.len(), 32);
    assert_ne!(outer_token, inner_token);
    let runs = env.runs();
    assert_eq!(runs.len(), 2, "{runs:#?}");
    let (outer_run, inner_run) = (&runs[0], &runs[1]);
    assert_eq!(arr(outer_run, "argv_json")[0], "sh");
    let approvals = env.approvals();
    assert_eq!(approvals.len(), 1, "{approvals:#?}");
    assert_eq!(s(&approvals[0], "tool_run_id"), s(inner_run, "tool_run_id"));
    assert_eq!(s(inner_run, "status"), "waiting_approval");
    assert_eq!(s(outer_run, "status"), "completed");
    // The inner tool's descriptor is the inner run's.
    assert!(inner_run["last_heartbeat_at"].is_string(), "{inner_run:?}");
    assert!(outer_run["last_heartbeat_at"].is_null(), "{outer_run:?}");
    assert_nowhere_kept(&env, &outer_token);
    // The inner run keeps its own token nowhere; the outer run records the inner tool's
    // line as the output it is (the inner shim passes output through byte for byte).
    for f in files_under(&env.state()) {
        let name = f.file_name().unwrap().to_string_lossy().into_owned();
        if name.starts_with("state.db") || name.starts_with(s(inner_run, "tool_run_id")) {
            let bytes = std::fs::read(&f).unwrap_or_default();
            assert!(
                !bytes.windows(32).any(|w| w == inner_token.as_bytes()),
                "the inner token is in {}",
                f.display()
            );
        }
    }
}
