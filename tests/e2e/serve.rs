//! `monitor serve`: the operator API over HTTP against the real binaries. Tokens per role,
//! every endpoint and its status codes, a wait-mode tool decided over HTTP, an execution's
//! rejection ending a parked run's resume as failed, cancel, metrics, the failed-auth limit,
//! and a graceful stop.

use headless_run_e2e::*;
use std::io::{Read, Write};
use std::time::Duration;

/// A running `monitor serve` on a free loopback port.
pub(crate) struct Served {
    pub(crate) port: u16,
    proc: Option<Running>,
}

impl Served {
    pub(crate) fn start(env: &TestEnv) -> Served {
        Served::start_with(env, &[])
    }

    /// With extra environment for the server (`HEADLESS_RUN_DB`, …).
    pub(crate) fn start_with(env: &TestEnv, vars: &[(&str, &str)]) -> Served {
        Served::start_args(env, vars, &[])
    }

    pub(crate) fn start_args(env: &TestEnv, vars: &[(&str, &str)], args: &[&str]) -> Served {
        Served::start_on(env, "127.0.0.1", vars, args)
    }

    /// Listening on `host` (an IPv4 address), reached on 127.0.0.1.
    pub(crate) fn start_on(
        env: &TestEnv,
        host: &str,
        vars: &[(&str, &str)],
        args: &[&str],
    ) -> Served {
        let port = hr_shared::testing::pg::free_port();
        let mut cmd = env.monitor();
        for (k, v) in vars {
            cmd.env(k, v);
        }
        let proc = cmd
            .args(["serve", "--listen", &format!("{host}:{port}")])
            .args(args)
            .timeout(Duration::from_secs(120))
            .spawn();
        assert!(
            wait_until(Duration::from_secs(10), || std::net::TcpStream::connect((
                "127.0.0.1",
                port
            ))
            .is_ok()),
            "the server did not listen: {}",
            proc.stderr_now()
        );
        Served {
            port,
            proc: Some(proc),
        }
    }

    /// One request (HTTP/1.1, connection closed after it): status and body.
    pub(crate) fn call(
        &self,
        method: &str,
        path: &str,
        token: Option<&str>,
        body: Option<&str>,
    ) -> (u16, String) {
        let mut s = std::net::TcpStream::connect(("127.0.0.1", self.port)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        let mut req =
            format!("{method} {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n");
        if let Some(t) = token {
            req.push_str(&format!("Authorization: Bearer {t}\r\n"));
        }
        let body = body.unwrap_or("");
        req.push_str(&format!(
            "Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        ));
        s.write_all(req.as_bytes()).unwrap();
        let mut out = Vec::new();
        let _ = s.read_to_end(&mut out);
        let text = String::from_utf8_lossy(&out).into_owned();
        let status = text
            .split(' ')
            .nth(1)
            .and_then(|c| c.parse().ok())
            .unwrap_or_else(|| panic!("no HTTP answer: {text:?}"));
        let body = text
            .split_once("\r\n\r\n")
            .map(|(_, b)| b.to_owned())
            .unwrap_or_default();
        (status, body)
    }

    pub(crate) fn json(
        &self,
        method: &str,
        path: &str,
        token: &str,
        body: Option<&str>,
    ) -> (u16, serde_json::Value) {
        let (status, text) = self.call(method, path, Some(token), body);
        let v = serde_json::from_str(&text)
            .unwrap_or_else(|e| panic!("{path}: not JSON ({e}): {text}"));
        (status, v)
    }

    /// `http://127.0.0.1:PORT`.
    /// What the server said on stderr so far.
    pub(crate) fn stderr_now(&self) -> String {
        self.proc
            .as_ref()
            .map(Running::stderr_now)
            .unwrap_or_default()
    }

    pub(crate) fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// SIGTERM, and the server's exit.
    pub(crate) fn stop(mut self) -> Outcome {
        let p = self.proc.take().unwrap();
        p.signal(libc::SIGTERM);
        p.wait()
    }
}

pub(crate) fn token(env: &TestEnv, name: &str, role: &str) -> String {
    let out = env
        .monitor()
        .args(["token", "create", name, "--role", role])
        .run();
    out.expect_code(0);
    out.out().trim().to_owned()
}

#[test]
fn the_operator_api_decides_lists_cancels_and_answers_every_error_as_json() {
    let env = TestEnv::new();
    let (op, viewer, runner) = (
        token(&env, "alice", "operator"),
        token(&env, "wall-screen", "viewer"),
        token(&env, "ci-runner", "runner"),
    );
    // The secrets are shown once and never stored.
    let stored = std::fs::read_to_string(env.state().join("tokens.json")).unwrap();
    assert!(!stored.contains(&op[4..]), "{stored}");
    let served = Served::start(&env);
    assert_eq!(served.call("GET", "/healthz", None, None).0, 200);
    // Nothing has run yet: empty listings, not errors.
    let (st, v) = served.json("GET", "/api/v1/approvals", &viewer, None);
    assert_eq!(
        (st, v["approvals"].as_array().map(Vec::len)),
        (200, Some(0))
    );

    std::fs::write(env.work().join("victim"), "x").unwrap();
    let tool = env
        .shim()
        .args(["--", "rm", "-i", "victim"])
        .timeout(Duration::from_secs(60))
        .spawn_wait_mode();
    let mut listed = serde_json::Value::Null;
    assert!(
        wait_for_state(Duration::from_secs(20), || {
            listed = served.json("GET", "/api/v1/approvals", &viewer, None).1;
            listed["approvals"].as_array().is_some_and(|a| a.len() == 1)
        }),
        "{listed}; tool: {}",
        tool.stderr_now()
    );
    let ap = &listed["approvals"][0];
    let id = ap["approval_id"].as_str().unwrap().to_owned();
    assert_eq!(ap["command"], serde_json::json!(["rm", "-i", "victim"]));
    assert_eq!(ap["cwd"], env.work().display().to_string());
    assert!(ap["host"].is_string());
    assert!(ap["question"].as_str().unwrap().contains("victim"));
    assert_eq!(
        served
            .json("GET", &format!("/api/v1/approvals/{id}"), &viewer, None)
            .0,
        200
    );

    // Who may not decide.
    let approve = format!("/api/v1/approvals/{id}/approve");
    assert_eq!(served.call("POST", &approve, None, None).0, 401);
    assert_eq!(
        served
            .call("POST", &approve, Some("hrt_not-a-token"), None)
            .0,
        401
    );
    assert_eq!(served.json("POST", &approve, &viewer, None).0, 403);
    assert_eq!(served.json("POST", &approve, &runner, None).0, 403);
    assert_eq!(
        served.json("GET", "/api/v1/approvals", &runner, None).0,
        403
    );
    // Bad input.
    assert_eq!(served.json("POST", &approve, &op, Some("{not json")).0, 400);
    assert_eq!(
        served
            .json("POST", &approve, &op, Some("{\"sneaky\": 1}"))
            .0,
        400
    );
    assert_eq!(
        served
            .json(
                "POST",
                &format!("/api/v1/approvals/{id}/decide"),
                &op,
                Some("{}")
            )
            .0,
        400
    );
    let (st, v) = served.json(
        "POST",
        &format!("/api/v1/approvals/{id}/decide"),
        &op,
        Some("{\"value\": \"maybe\"}"),
    );
    assert_eq!(st, 422, "{v}");
    assert!(
        v["valid"].as_array().unwrap().iter().any(|x| x == "yes"),
        "{v}"
    );
    assert_eq!(
        served
            .json("GET", "/api/v1/approvals?colour=red", &op, None)
            .0,
        400
    );
    assert_eq!(
        served.json("GET", "/api/v1/approvals?limit=0", &op, None).0,
        400
    );
    assert_eq!(
        served
            .json("GET", "/api/v1/runs?status=sleepy", &op, None)
            .0,
        400
    );
    assert_eq!(
        served.json("GET", "/api/v1/approvals/AP-NOPE", &op, None).0,
        404
    );
    assert_eq!(
        served
            .json("POST", "/api/v1/approvals/AP-NOPE/approve", &op, None)
            .0,
        404
    );
    assert_eq!(served.json("GET", "/api/v1/nowhere", &op, None).0, 404);
    let big = format!("{{\"comment\": \"{}\"}}", "x".repeat(70_000));
    assert_eq!(served.call("POST", &approve, Some(&op), Some(&big)).0, 413);

    // The operator answers yes: recorded as the token's name over http; the tool goes on.
    // (`approve` would take rm's own default, no.)
    let (st, v) = served.json(
        "POST",
        &format!("/api/v1/approvals/{id}/decide"),
        &op,
        Some("{\"value\": \"yes\", \"comment\": \"ship it\"}"),
    );
    assert_eq!(st, 200, "{v}");
    assert_eq!(
        (v["decided_by"].as_str(), v["decision_channel"].as_str()),
        (Some("alice"), Some("http"))
    );
    assert_eq!(v["comment"], "ship it");
    assert_eq!(v["outcome"], "decided");
    tool.wait().expect_code(0);
    assert!(!env.work().join("victim").exists());
    // The same decision again is a no-op, as `monitor decide` counts it (exit 0): 200.
    let (st, v) = served.json(
        "POST",
        &format!("/api/v1/approvals/{id}/decide"),
        &op,
        Some("{\"value\": \"yes\"}"),
    );
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["outcome"], "unchanged");
    assert_eq!(v["decided_by"], "alice");
    let (st, v) = served.json("POST", &format!("/api/v1/approvals/{id}/reject"), &op, None);
    assert_eq!(st, 409, "first writer wins: {v}");
    assert_eq!(v["decided_by"], "alice");
    assert_eq!(v["outcome"], "conflict");

    // An execution's one pending approval, rejected by execution id: the parked run's
    // resume ends as failed.
    std::fs::write(env.work().join("second"), "x").unwrap();
    env.shim()
        .env("HEADLESS_RUN_EXECUTION_ID", "EX-01M85700000000000000000000")
        .args(["--", "rm", "-i", "second"])
        .run()
        .expect_code(90);
    assert_eq!(
        served
            .json("POST", "/api/v1/executions/EX-NONE/approve", &op, None)
            .0,
        404
    );
    let (st, v) = served.json(
        "POST",
        "/api/v1/executions/EX-01M85700000000000000000000/reject",
        &op,
        None,
    );
    assert_eq!((st, v["status"].as_str()), (200, Some("rejected")), "{v}");
    // A known execution with nothing waiting: 409 saying what became of it (a gate's
    // "not waiting"); the same again, or the other way, the same.
    for action in ["reject", "approve"] {
        let (st, v) = served.json(
            "POST",
            &format!("/api/v1/executions/EX-01M85700000000000000000000/{action}"),
            &op,
            None,
        );
        assert_eq!(st, 409, "{v}");
        assert_eq!(v["outcome"], "not_waiting", "{v}");
        assert_eq!(v["status"], "rejected", "{v}");
        assert_eq!(v["decided_by"], "alice", "{v}");
        assert!(
            v["error"]
                .as_str()
                .unwrap()
                .contains("was rejected by alice at"),
            "{v}"
        );
    }
    // include_all=true is status=all; both at once is refused; counts without since are
    // all time.
    let (st, all) = served.json("GET", "/api/v1/approvals?include_all=true", &op, None);
    assert_eq!(st, 200, "{all}");
    let (_, same) = served.json("GET", "/api/v1/approvals?status=all", &op, None);
    assert_eq!(all, same);
    assert!(all["approvals"].as_array().unwrap().len() >= 2, "{all}");
    let (st, v) = served.json(
        "GET",
        "/api/v1/approvals?include_all=true&status=pending",
        &op,
        None,
    );
    assert_eq!(st, 400, "{v}");
    let (st, v) = served.json("GET", "/api/v1/runs?include_all=yes", &op, None);
    assert_eq!(st, 400, "{v}");
    // `all` beside another status would quietly mean the other one: refused.
    for path in [
        "/api/v1/runs?status=all,failed",
        "/api/v1/approvals?status=pending,all",
    ] {
        let (st, v) = served.json("GET", path, &op, None);
        assert_eq!(st, 400, "{path}: {v}");
        assert!(v["error"].as_str().unwrap().contains("alone"), "{v}");
    }
    let (st, counts) = served.json("GET", "/api/v1/counts", &op, None);
    assert_eq!(st, 200, "{counts}");
    assert!(
        counts["totals"].as_array().is_some_and(|t| !t.is_empty()),
        "{counts}"
    );
    env.monitor()
        .args(["worker", "--once"])
        .run()
        .expect_code(0);
    let (_, runs) = served.json(
        "GET",
        "/api/v1/runs?execution=EX-01M85700000000000000000000",
        &viewer,
        None,
    );
    assert_eq!(runs["runs"][0]["status"], "failed", "{runs}");
    assert!(env.work().join("second").exists());

    // A live run cancelled over HTTP; its output tail is served, cleaned.
    let long = env
        .shim()
        .args([
            "--",
            "sh",
            "-c",
            "printf 'hello \\033]0;title\\007world\\n'; sleep 60",
        ])
        .timeout(Duration::from_secs(60))
        .spawn();
    let mut run_id = String::new();
    assert!(wait_for_state(Duration::from_secs(10), || {
        let (_, r) = served.json("GET", "/api/v1/runs?status=running", &viewer, None);
        run_id = r["runs"][0]["tool_run_id"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        !run_id.is_empty()
    }));
    assert!(wait_until(Duration::from_secs(10), || {
        served
            .json("GET", &format!("/api/v1/runs/{run_id}"), &viewer, None)
            .1["output_tail"]
            .as_str()
            .is_some_and(|t| t.contains("hello world"))
    }));
    assert_eq!(
        served
            .json(
                "POST",
                &format!("/api/v1/runs/{run_id}/cancel"),
                &viewer,
                None
            )
            .0,
        403
    );
    let (st, v) = served.json(
        "POST",
        &format!("/api/v1/runs/{run_id}/cancel"),
        &op,
        Some("{\"reason\": \"enough\"}"),
    );
    assert_eq!((st, v["outcome"].as_str()), (200, Some("signalled")), "{v}");
    long.wait().expect_code(143);
    assert_eq!(
        served
            .json("POST", &format!("/api/v1/runs/{run_id}/cancel"), &op, None)
            .0,
        409
    );
    assert_eq!(served.json("GET", "/api/v1/runs/TR-NOPE", &op, None).0, 404);

    // Every operation of the served OpenAPI document is answered by a handler (an unknown
    // id is that handler's 404, not the router's), and the document is the checked-in one.
    let (st, doc) = served.call("GET", "/api/v1/openapi.json", None, None);
    assert_eq!(st, 200);
    let checked_in = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/openapi.json"),
    )
    .unwrap();
    assert_eq!(doc, checked_in);
    let doc: serde_json::Value = serde_json::from_str(&doc).unwrap();
    for (path, ops) in doc["paths"].as_object().unwrap() {
        if path == "/api/v1/events" {
            continue; // a stream that stays open: its own test
        }
        for method in ops.as_object().unwrap().keys() {
            let concrete = path.replace("{id}", "ZZ-UNKNOWN");
            let body = (path.ends_with("/decide")).then_some("{\"value\": \"y\"}");
            let (st, text) = served.call(&method.to_uppercase(), &concrete, Some(&op), body);
            assert!(
                !text.contains("no such endpoint") && st != 405,
                "{method} {path}: {st} {text}"
            );
        }
    }

    // Metrics.
    let (st, text) = served.call("GET", "/metrics", Some(&viewer), None);
    assert_eq!(st, 200);
    assert!(
        text.contains("headless_run_runs{status=\"cancelled\"} 1"),
        "{text}"
    );
    assert!(
        text.contains("headless_run_decided_approvals{channel=\"http\"} 2"),
        "{text}"
    );
    assert!(text.contains("headless_run_pending_approvals 0"), "{text}");
    assert_eq!(served.call("GET", "/metrics", None, None).0, 401);

    // Revoked tokens stop working; repeated failures from one address are held off.
    env.monitor()
        .args(["token", "revoke", "wall-screen"])
        .run()
        .expect_code(0);
    assert_eq!(
        served.call("GET", "/api/v1/runs", Some(&viewer), None).0,
        401
    );
    let codes: Vec<u16> = (0..12)
        .map(|_| {
            served
                .call("GET", "/api/v1/runs", Some("hrt_guess"), None)
                .0
        })
        .collect();
    assert_eq!(codes.last(), Some(&429), "{codes:?}");
    assert_eq!(
        served.call("GET", "/api/v1/runs", Some(&op), None).0,
        200,
        "a good token is served from a held-off address"
    );

    // Stopped by SIGTERM; the log names token names, never a token.
    let out = served.stop();
    out.expect_code(0);
    assert!(
        out.stderr.contains("POST /api/v1/approvals/"),
        "{}",
        out.stderr
    );
    assert!(out.stderr.contains(" alice"), "{}", out.stderr);
    assert!(!out.stderr.contains(&op), "{}", out.stderr);
    // A refusal names who was refused: the viewer's cancel, answered 403.
    assert!(
        out.stderr
            .lines()
            .any(|l| l.contains("/cancel 403 ") && l.ends_with(" wall-screen")),
        "{}",
        out.stderr
    );
}

#[test]
fn token_commands_refuse_what_they_must() {
    let env = TestEnv::new();
    let t = token(&env, "bob", "operator");
    assert!(t.starts_with("hrt_") && t.len() == 68, "{t}");
    let again = env
        .monitor()
        .args(["token", "create", "bob", "--role", "viewer"])
        .run();
    again.expect_code(2);
    assert!(again.stderr.contains("in force"), "{}", again.stderr);
    env.monitor()
        .args(["token", "create", "bad name", "--role", "viewer"])
        .run()
        .expect_code(2);
    env.monitor()
        .args(["token", "create", "x", "--role", "admin"])
        .run()
        .expect_code(2);
    env.monitor()
        .args(["token", "revoke", "nobody"])
        .run()
        .expect_code(4);
    let listed = env.monitor().args(["token", "list"]).run();
    listed.expect_code(0);
    assert!(
        listed.out().contains("bob") && listed.out().contains("live"),
        "{}",
        listed.out()
    );
    assert!(!listed.out().contains(&t[4..]));
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(env.state().join("tokens.json"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
    // Listening where it cannot: a clear error.
    let busy = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = busy.local_addr().unwrap().port();
    let out = env
        .monitor()
        .args(["serve", "--listen", &format!("127.0.0.1:{port}")])
        .run();
    out.expect_code(1);
    assert!(out.stderr.contains("cannot listen"), "{}", out.stderr);
}

#[test]
fn schemathesis_finds_no_server_error_and_no_answer_outside_the_document() {
    let st = schemathesis_bin().join("st");
    let env = TestEnv::new();
    let op = token(&env, "fuzzer", "operator");
    // Something to list and decide: a parked run with its pending approval, an ended run.
    std::fs::write(env.work().join("f"), "x").unwrap();
    env.shim()
        .args(["--", "rm", "-i", "f"])
        .run()
        .expect_code(90);
    env.shim().args(["--", "true"]).run().expect_code(0);
    // The fuzzer sends bad tokens on purpose: the failed-auth limit would hold it off.
    let served = Served::start_args(&env, &[], &["--auth-failures", "1000000"]);
    let out = env
        .command(&st)
        .args(["run", &format!("http://127.0.0.1:{}/api/v1/openapi.json", served.port)])
        .args(["-H", &format!("Authorization: Bearer {op}")])
        .args([
            "-c",
            "not_a_server_error,response_schema_conformance,status_code_conformance,content_type_conformance",
            "-n",
            "30",
            "--seed",
            "1",
            // A stream that stays open: `events_stream_status_and_approval_changes…`.
            "--exclude-path",
            "/api/v1/events",
        ])
        .env("NO_COLOR", "1")
        .timeout(Duration::from_secs(300))
        .run();
    assert_eq!(out.code(), 0, "{}", out.context());
    assert!(out.out().contains("passed"), "{}", out.out());
    // The runner API with a runner token: the surface a supervised machine reaches.
    let runner = token(&env, "fuzz-runner", "runner");
    let out = env
        .command(&st)
        .args(["run", &format!("http://127.0.0.1:{}/api/v1/openapi.json", served.port)])
        .args(["-H", &format!("Authorization: Bearer {runner}")])
        .args([
            "-c",
            "not_a_server_error,response_schema_conformance,status_code_conformance,content_type_conformance",
            "-n",
            "50",
            "--seed",
            "1",
            "--include-path-regex",
            "^/api/v1/(runner/|mark)",
        ])
        .env("NO_COLOR", "1")
        .timeout(Duration::from_secs(300))
        .run();
    assert_eq!(out.code(), 0, "{}", out.context());
    assert!(out.out().contains("passed"), "{}", out.out());
    served.stop().expect_code(0);
}

/// Reads from an event stream until `want` has come (or panics after `limit`).
pub(crate) fn read_until(
    stream: &mut std::net::TcpStream,
    got: &mut String,
    want: &str,
    limit: Duration,
) {
    let end = std::time::Instant::now() + limit;
    let mut buf = [0u8; 8192];
    while !got.contains(want) {
        assert!(
            std::time::Instant::now() < end,
            "no {want:?} in the stream: {got}"
        );
        match stream.read(&mut buf) {
            Ok(0) => panic!("the stream ended before {want:?}: {got}"),
            Ok(n) => got.push_str(&String::from_utf8_lossy(&buf[..n])),
            Err(e)
                if e.kind() == std::io::ErrorKind::WouldBlock
                    || e.kind() == std::io::ErrorKind::TimedOut => {}
            Err(e) => panic!("{e}: {got}"),
        }
    }
}

pub(crate) fn open_stream(port: u16, token: &str, last_id: Option<&str>) -> std::net::TcpStream {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let mut req = format!(
        "GET /api/v1/events HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer {token}\r\nAccept: text/event-stream\r\n"
    );
    if let Some(id) = last_id {
        req.push_str(&format!("Last-Event-ID: {id}\r\n"));
    }
    req.push_str("\r\n");
    s.write_all(req.as_bytes()).unwrap();
    s
}

#[test]
fn events_stream_status_and_approval_changes_and_resume_from_the_last_id() {
    let env = TestEnv::new();
    let op = token(&env, "alice", "operator");
    let viewer = token(&env, "screen", "viewer");
    let served = Served::start(&env);
    let (st, _) = served.call("GET", "/api/v1/events?after=soon", Some(&viewer), None);
    assert_eq!(st, 400);
    assert_eq!(served.call("GET", "/api/v1/events", None, None).0, 401);
    let mut stream = open_stream(served.port, &viewer, None);
    let mut got = String::new();
    read_until(&mut stream, &mut got, "\r\n\r\n", Duration::from_secs(10));
    assert!(got.starts_with("HTTP/1.1 200"), "{got}");
    assert!(
        got.to_ascii_lowercase()
            .contains("content-type: text/event-stream"),
        "{got}"
    );

    std::fs::write(env.work().join("victim"), "x").unwrap();
    let tool = env
        .shim()
        .args(["--", "rm", "-i", "victim"])
        .timeout(Duration::from_secs(60))
        .spawn_wait_mode();
    read_until(
        &mut stream,
        &mut got,
        "event: approval_needed",
        Duration::from_secs(20),
    );
    let (_, listed) = served.json("GET", "/api/v1/approvals", &viewer, None);
    let id = listed["approvals"][0]["approval_id"]
        .as_str()
        .unwrap()
        .to_owned();
    // The id of the approval_needed event, to resume from.
    let needed_at = got.find("event: approval_needed").unwrap();
    let event_id = got[..needed_at]
        .rsplit("id: ")
        .next()
        .and_then(|t| t.lines().next())
        .unwrap()
        .trim()
        .to_owned();
    assert!(event_id.parse::<i64>().is_ok(), "{got}");
    let (st, _) = served.json(
        "POST",
        &format!("/api/v1/approvals/{id}/approve"),
        &op,
        None,
    );
    assert_eq!(st, 200);
    read_until(
        &mut stream,
        &mut got,
        "event: approval_status_change",
        Duration::from_secs(10),
    );
    assert!(got.contains("\"decided_by\":\"alice\""), "{got}");
    tool.wait().expect_code(0);
    read_until(
        &mut stream,
        &mut got,
        "\"status\":\"completed\"",
        Duration::from_secs(10),
    );

    // Resumed from the approval_needed event: what came after it, at once.
    let mut again = open_stream(served.port, &viewer, Some(&event_id));
    let mut resumed = String::new();
    read_until(
        &mut again,
        &mut resumed,
        "event: approval_status_change",
        Duration::from_secs(10),
    );
    assert!(!resumed.contains("event: approval_needed"), "{resumed}");

    // A stop is not held open by the streams (held open, the server would outlive its
    // 120 s limit and fail the test).
    served.stop().expect_code(0);
    drop((stream, again));
}

#[test]
fn https_with_a_throw_away_certificate() {
    let curl = need("curl", "curl");
    let env = TestEnv::new();
    let op = token(&env, "alice", "operator");
    let [ca, cert, key, other_ca] = crate::postgres::certificates(env.path());
    let (cert, key) = (cert.display().to_string(), key.display().to_string());
    let served = Served::start_args(&env, &[], &["--tls-cert", &cert, "--tls-key", &key]);
    let get = |cafile: &std::path::Path, path: &str| {
        env.command(&curl)
            .args(["-sS", "--max-time", "10", "--cacert"])
            .arg(cafile)
            .args(["-H", &format!("Authorization: Bearer {op}")])
            .arg(format!("https://127.0.0.1:{}{path}", served.port))
            .run()
    };
    let health = get(&ca, "/healthz");
    health.expect_code(0);
    assert_eq!(health.out(), "ok\n");
    let listed = get(&ca, "/api/v1/approvals");
    listed.expect_code(0);
    assert!(listed.out().contains("\"approvals\""), "{}", listed.out());
    // A client that does not trust the certificate refuses; plain HTTP gets no answer.
    assert_ne!(get(&other_ca, "/healthz").code(), 0);
    let plain = env
        .command(&curl)
        .args(["-sS", "--max-time", "5"])
        .arg(format!("http://127.0.0.1:{}/healthz", served.port))
        .run();
    assert_ne!(plain.code(), 0);
    served.stop().expect_code(0);
    // A certificate that is not one: a clear error.
    let bad = env
        .monitor()
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--tls-cert",
            &key,
            "--tls-key",
            &key,
        ])
        .run();
    bad.expect_code(1);
    assert!(bad.stderr.contains("for TLS"), "{}", bad.stderr);
    env.monitor()
        .args(["serve", "--tls-cert", &cert])
        .run()
        .expect_code(2);
}

#[test]
fn the_web_page_in_a_real_browser_shows_a_prompt_as_text_and_approves_it() {
    let node = need("node", "nodejs");
    let modules = playwright_dir();
    let chromium = chromium_bin();
    let env = TestEnv::new();
    let op = token(&env, "alice", "operator");
    let served = Served::start(&env);
    std::fs::write(env.work().join("victim"), "x").unwrap();
    let waiting = env
        .shim()
        .args([
            "--",
            "sh",
            "-c",
            "printf 'Cleaning the build output of release 7\\n\\n'; rm -i victim",
        ])
        .timeout(Duration::from_secs(90))
        .spawn_wait_mode();
    // A tool whose question would be markup and script, and drive the terminal.
    let hostile = "Proceed with <b>bold</b> <script>alert(1)</script>\u{1b}[31m? [y/N] ";
    let evil = env
        .shim()
        .args(["--", "python3"])
        .arg(tool())
        .args(["ask", hostile])
        .timeout(Duration::from_secs(90))
        .spawn_wait_mode();
    // A pipeline waiting at its human step, its name markup.
    let pipe = env.work().join("web.yaml");
    std::fs::write(
        &pipe,
        "name: '<i>deploy</i>'\nnodes:\n  - { id: build, kind: task, command: 'true' }\n  - { id: ok, kind: human, title: Ship, question: 'Ship it?' }\nedges:\n  - { from: build, to: ok }\n",
    )
    .unwrap();
    env.monitor()
        .args(["pipeline", "run", "--detach", "--execution-id", "EX-web"])
        .arg(&pipe)
        .run()
        .expect_code(90);
    // The driver, beside its modules (ES modules resolve packages from their own dir).
    let driver = modules.join("approve.mjs");
    std::fs::copy(fixture("web/approve.mjs"), &driver).unwrap();
    let shot = env.path().join("approvals.png");
    let out = env
        .command(&node)
        .arg(&driver)
        .env("URL", format!("http://127.0.0.1:{}/", served.port))
        .env("TOKEN", &op)
        .env("CHROMIUM", &chromium)
        .env("SCREENSHOT", &shot)
        .env("PROFILE", env.path().join("chromium-profile"))
        .env("QUESTION", "remove regular file 'victim'")
        .env("HOSTILE", "Proceed with <b>bold</b>")
        .timeout(Duration::from_secs(120))
        .run();
    assert_eq!(out.code(), 0, "{}", out.context());
    let said: Vec<serde_json::Value> = out
        .out()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let find = |key: &str| {
        said.iter()
            .find(|v| v.get(key).is_some())
            .unwrap_or_else(|| panic!("no {key}: {}", out.out()))
    };
    assert!(
        find("refused")["refused"]
            .as_str()
            .unwrap()
            .contains("not valid")
    );
    // The pipeline's row: its name drawn as text, its steps with their states.
    let pipeline = find("pipeline_row");
    let row = pipeline["pipeline_row"].as_str().unwrap();
    assert!(row.contains("<i>deploy</i>"), "{pipeline}");
    assert!(row.contains("waiting_approval"), "{pipeline}");
    assert!(row.contains("build✓") && row.contains("ok?"), "{pipeline}");
    assert_eq!(pipeline["pipeline_injected"], 0, "{pipeline}");
    // Its steps, opened: both visits, the task's exit and the human step's approval.
    let steps = find("steps_view");
    let view = steps["steps_view"].as_str().unwrap();
    assert_eq!(steps["steps_rows"], 2, "{steps}");
    assert!(
        view.contains("build") && view.contains("completed"),
        "{steps}"
    );
    assert!(
        view.contains("ok") && view.contains("waiting_approval") && view.contains("AP-"),
        "{steps}"
    );
    let shown = find("hostile_shown");
    assert_eq!(shown["hostile_as_text"], true, "{shown}");
    assert_eq!(shown["injected_elements"], 0, "{shown}");
    assert_eq!(shown["alerts"], serde_json::json!([]), "{shown}");
    assert!(
        !shown["hostile_shown"].as_str().unwrap().contains('\u{1b}'),
        "{shown}"
    );
    assert!(
        shown["context"].as_str().unwrap().contains("release 7"),
        "the screen around the question: {shown}"
    );
    assert!(
        shown["meta"].as_str().unwrap().contains("rm -i victim"),
        "{shown}"
    );
    assert_eq!(
        shown["default_marked"], 1,
        "the default option is marked: {shown}"
    );
    assert!(
        find("confirm")["confirm"]
            .as_str()
            .unwrap()
            .contains("victim")
    );
    let done = find("outcome");
    assert!(
        done["outcome"].as_str().unwrap().contains("by alice"),
        "{done}"
    );
    // A link to the hostile approval (as a webhook sends), opened afresh at phone size: its
    // card marked and in view, nothing wider than the screen.
    let linked = find("linked_id");
    let ids = find("rm_id");
    assert_eq!(linked["linked_id"], ids["hostile_id"], "{linked}");
    let bx = &linked["linked_box"];
    assert!(
        bx["y"].as_f64().unwrap() < 844.0 && bx["x"].as_f64().unwrap() >= 0.0,
        "{linked}"
    );
    assert!(
        bx["x"].as_f64().unwrap() + bx["width"].as_f64().unwrap() <= 390.0,
        "{linked}"
    );
    assert!(linked["page_width"].as_f64().unwrap() <= 390.0, "{linked}");
    // A link to the approval decided since: the page says what became of it.
    let note = ids["linked_note"].as_str().unwrap();
    assert!(
        note.contains("is approved (by alice): nothing to decide"),
        "{ids}"
    );
    let end = find("errors");
    assert_eq!(end["errors"], serde_json::json!([]), "{end}");
    assert_eq!(end["alerts"], serde_json::json!([]), "{end}");
    // The decision reached the waiting tool.
    waiting.wait().expect_code(0);
    assert!(!env.work().join("victim").exists());
    drop(evil);
    // The README's picture of the page, renewed on request only (a test run leaves the
    // tree as it was): HEADLESS_RUN_UPDATE_SCREENSHOT=1.
    assert!(std::fs::metadata(&shot).is_ok_and(|m| m.len() > 1000));
    if std::env::var_os("HEADLESS_RUN_UPDATE_SCREENSHOT").is_some() {
        let docs =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/web-approvals.png");
        std::fs::copy(&shot, docs).unwrap();
    }
    served.stop().expect_code(0);
}
