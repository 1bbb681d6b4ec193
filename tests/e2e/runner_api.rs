//! The runner API: a shim on a "runner host" (a state dir of its own) whose store is a
//! `monitor serve` server (`HEADLESS_RUN_SERVER` and a runner token). Wait mode decided over
//! HTTP, exit mode (90) with the approval on the server, what a runner token may not do, no
//! token in the tool's environment, the server down mid-run (the tool unaffected, its row
//! spooled and delivered later), and HTTPS with a throw-away CA.

use crate::serve::{Served, token};
use headless_run_e2e::*;
use serde_json::{Value, json};
use std::time::Duration;

/// A shim on `host` whose store is `served`, with `runner_token`.
fn remote_shim(host: &TestEnv, url: &str, runner_token: &str) -> Cmd {
    let mut c = host.shim();
    c.env("HEADLESS_RUN_SERVER", url)
        .env("HEADLESS_RUN_TOKEN", runner_token);
    c
}

/// The approvals the server lists with `status`.
fn approvals(served: &Served, tok: &str, status: &str) -> Vec<Value> {
    let (st, v) = served.json(
        "GET",
        &format!("/api/v1/approvals?status={status}"),
        tok,
        None,
    );
    assert_eq!(st, 200, "{v}");
    v["approvals"].as_array().cloned().unwrap_or_default()
}

/// The server's run `id`.
fn run_of(served: &Served, tok: &str, id: &str) -> Value {
    let (st, v) = served.json("GET", &format!("/api/v1/runs/{id}"), tok, None);
    assert_eq!(st, 200, "{v}");
    v
}

#[test]
fn a_wait_mode_runner_is_decided_over_http_and_its_token_cannot_decide() {
    let server = TestEnv::new();
    let op = token(&server, "alice", "operator");
    let rt = token(&server, "ci-7", "runner");
    let served = Served::start(&server);
    let host = TestEnv::new();
    std::fs::write(host.work().join("victim"), "x").unwrap();
    let tool = remote_shim(&host, &served.url(), &rt)
        .args(["--", "rm", "-i", "victim"])
        .timeout(Duration::from_secs(60))
        .spawn_wait_mode();
    let mut pending = Vec::new();
    assert!(
        wait_for_state(Duration::from_secs(20), || {
            pending = approvals(&served, &op, "pending");
            pending.len() == 1
        }),
        "no approval on the server; tool: {}",
        tool.stderr_now()
    );
    let ap = &pending[0];
    let id = ap["approval_id"].as_str().unwrap().to_owned();
    assert_eq!(ap["command"], json!(["rm", "-i", "victim"]));
    assert!(ap["question"].as_str().unwrap().contains("victim"), "{ap}");
    // The runner's token decides nothing, by any door.
    for action in ["approve", "reject"] {
        let (st, v) = served.json(
            "POST",
            &format!("/api/v1/approvals/{id}/{action}"),
            &rt,
            None,
        );
        assert_eq!(st, 403, "{v}");
    }
    let (st, _) = served.json(
        "POST",
        &format!("/api/v1/approvals/{id}/decide"),
        &rt,
        Some(r#"{"value":"y"}"#),
    );
    assert_eq!(st, 403);
    // Nor does an operator's token write runs.
    let (st, _) = served.json("POST", "/api/v1/runner/expire", &op, Some("{}"));
    assert_eq!(st, 403);
    // The operator approves; the waiting tool gets its keys at once and finishes.
    let (st, v) = served.json(
        "POST",
        &format!("/api/v1/approvals/{id}/decide"),
        &op,
        Some(r#"{"value":"yes","comment":"go"}"#),
    );
    assert_eq!(st, 200, "{v}");
    tool.wait().expect_code(0);
    assert!(!host.work().join("victim").exists(), "rm did not run");
    let decided = approvals(&served, &op, "approved");
    assert_eq!(decided.len(), 1);
    assert_eq!(decided[0]["decided_by"], "alice");
    assert_eq!(decided[0]["decision_channel"], "http");
    let run = run_of(&served, &op, decided[0]["tool_run_id"].as_str().unwrap());
    assert_eq!(run["status"], "completed", "{run}");
    assert_eq!(run["exit_code"], 0);
    // The answer's trip from decision to keys typed is in the metrics.
    let (st, metrics) = served.call("GET", "/metrics", Some(&op), None);
    assert_eq!(st, 200);
    assert!(
        metrics.contains("headless_run_decision_to_resume_seconds_count 1\n"),
        "{metrics}"
    );
    // The runner host kept no store of its own.
    assert!(!host.state().join("state.db").exists());
    // The server's audit chain holds the story, written as the token, not as whoever the
    // runner said it was.
    served.stop().expect_code(0);
    let actors: Vec<String> = server
        .raw_rows("events")
        .iter()
        .map(|r| r["actor"].as_str().unwrap_or_default().to_owned())
        .collect();
    assert!(actors.iter().any(|a| a == "runner:ci-7"), "{actors:?}");
    assert!(actors.iter().any(|a| a == "alice"), "{actors:?}");
    let doctor = server.monitor().args(["doctor"]).run();
    assert!(doctor.out().contains("audit"), "{}", doctor.out());
}

#[test]
fn exit_mode_parks_the_run_on_the_server_and_a_runner_writes_only_its_own_runs() {
    let server = TestEnv::new();
    let op = token(&server, "alice", "operator");
    let rt = token(&server, "ci-7", "runner");
    let other = token(&server, "ci-8", "runner");
    let served = Served::start(&server);
    let host = TestEnv::new();
    std::fs::write(host.work().join("victim"), "x").unwrap();
    let out = remote_shim(&host, &served.url(), &rt)
        .args(["--", "rm", "-i", "victim"])
        .run();
    out.expect_code(90);
    assert!(host.work().join("victim").exists());
    let pending = approvals(&served, &op, "pending");
    assert_eq!(pending.len(), 1, "{pending:?}");
    let run_id = pending[0]["tool_run_id"].as_str().unwrap().to_owned();
    assert_eq!(run_of(&served, &op, &run_id)["status"], "waiting_approval");
    // Another runner token may not touch the run, nor read its approval.
    let body = json!({"run_id": run_id, "writes": [], "actor": "x", "row_may_exist": false});
    let (st, v) = served.json(
        "POST",
        "/api/v1/runner/record",
        &other,
        Some(&body.to_string()),
    );
    assert_eq!(st, 403, "{v}");
    let ap_id = pending[0]["approval_id"].as_str().unwrap();
    let (st, v) = served.json(
        "GET",
        &format!("/api/v1/runner/approvals/{ap_id}"),
        &other,
        None,
    );
    assert_eq!((st, v), (200, Value::Null));
    // Its own token reads it.
    let (st, v) = served.json(
        "GET",
        &format!("/api/v1/runner/approvals/{ap_id}"),
        &rt,
        None,
    );
    assert_eq!((st, v["approval_id"].as_str()), (200, Some(ap_id)));
    // A run a runner did not start (a made-up id on a row that claims to be another's).
    let (st, _) = served.json(
        "POST",
        "/api/v1/runner/record",
        &rt,
        Some(r#"{"run_id": "../../etc", "writes": [], "actor": "x", "row_may_exist": false}"#),
    );
    assert_eq!(st, 403);
    // A call of the wrong shape is 400; a viewer is 403; no token is 401.
    let (st, _) = served.json("POST", "/api/v1/runner/record", &rt, Some(r#"{"run": 1}"#));
    assert_eq!(st, 400);
    let viewer = token(&server, "wall", "viewer");
    assert_eq!(
        served
            .json("GET", "/api/v1/runner/live?host=h", &viewer, None)
            .0,
        403
    );
    assert_eq!(
        served.call("POST", "/api/v1/runner/expire", None, None).0,
        401
    );
    // Approved on the server: the re-run is answered from there.
    let (st, _) = served.json(
        "POST",
        &format!("/api/v1/approvals/{ap_id}/decide"),
        &op,
        Some(r#"{"value":"yes"}"#),
    );
    assert_eq!(st, 200);
    // Another token's run cannot use the decision up (a run of its own, made by a shim).
    remote_shim(&host, &served.url(), &other)
        .args(["--", "true"])
        .run()
        .expect_code(0);
    let (_, v) = served.json("GET", "/api/v1/runs?tool=true", &op, None);
    let others_run = v["runs"][0]["tool_run_id"].as_str().unwrap().to_owned();
    let steal = json!({"run_id": others_run, "writes": [{"Consume": ap_id}], "actor": "x", "row_may_exist": false});
    let (st, v) = served.json(
        "POST",
        "/api/v1/runner/record",
        &other,
        Some(&steal.to_string()),
    );
    assert_eq!(st, 403, "{v}");
    remote_shim(&host, &served.url(), &rt)
        .args(["--", "rm", "-i", "victim"])
        .run()
        .expect_code(0);
    assert!(!host.work().join("victim").exists());
}

#[test]
fn the_token_never_reaches_the_tool() {
    let server = TestEnv::new();
    let rt = token(&server, "ci-7", "runner");
    let served = Served::start(&server);
    let host = TestEnv::new();
    let out = remote_shim(&host, &served.url(), &rt)
        .args([
            "--",
            "sh",
            "-c",
            "echo \"token=${HEADLESS_RUN_TOKEN:-none} server=${HEADLESS_RUN_SERVER:-none}\"",
        ])
        .run();
    out.expect_code(0);
    assert!(out.out().contains("token=none"), "{}", out.out());
    assert!(!out.out().contains(&rt[4..]));
}

#[test]
fn the_server_down_mid_run_leaves_the_tool_alone_and_its_row_is_delivered_later() {
    let server = TestEnv::new();
    let op = token(&server, "alice", "operator");
    let rt = token(&server, "ci-7", "runner");
    let served = Served::start(&server);
    let host = TestEnv::new();
    let gate = host.work().join("go");
    let tool = remote_shim(&host, &served.url(), &rt)
        .args([
            "--",
            "sh",
            "-c",
            &format!(
                "echo started; while [ ! -e {} ]; do sleep 0.1; done; echo finished; exit 3",
                gate.display()
            ),
        ])
        .timeout(Duration::from_secs(90))
        .spawn();
    let mut run_id = String::new();
    assert!(
        wait_for_state(Duration::from_secs(20), || {
            let (_, v) = served.json("GET", "/api/v1/runs", &op, None);
            match v["runs"][0]["tool_run_id"].as_str() {
                Some(id) => {
                    run_id = id.to_owned();
                    true
                }
                None => false,
            }
        }),
        "the run did not reach the server: {}",
        tool.stderr_now()
    );
    served.stop().expect_code(0);
    std::fs::write(&gate, "").unwrap();
    let out = tool.wait();
    out.expect_code(3);
    assert!(out.out().contains("finished"), "{}", out.out());
    // Its final row waits in the host's spool.
    let spooled = std::fs::read_dir(host.state().join("spool"))
        .map(|d| d.count())
        .unwrap_or(0);
    assert_eq!(spooled, 1, "stderr: {}", out.stderr);
    // The server back: the host's next shim delivers it, once.
    let served = Served::start(&server);
    remote_shim(&host, &served.url(), &rt)
        .args(["--", "true"])
        .run()
        .expect_code(0);
    let run = run_of(&served, &op, &run_id);
    assert_eq!(run["exit_code"], 3, "{run}");
    assert_eq!(run["status"], "failed", "{run}");
    assert_eq!(
        std::fs::read_dir(host.state().join("spool"))
            .map(|d| d.count())
            .unwrap_or(0),
        0
    );
    let (_, v) = served.json("GET", "/api/v1/runs", &op, None);
    assert_eq!(v["runs"].as_array().map(Vec::len), Some(2), "{v}");
}

#[test]
fn over_https_the_runner_checks_the_servers_certificate() {
    let server = TestEnv::new();
    let rt = token(&server, "ci-7", "runner");
    let [ca, cert, key, other_ca] = crate::postgres::certificates(server.path());
    let (cert, key) = (cert.display().to_string(), key.display().to_string());
    let served = Served::start_args(&server, &[], &["--tls-cert", &cert, "--tls-key", &key]);
    let url = format!("https://127.0.0.1:{}", served.port);
    let host = TestEnv::new();
    std::fs::write(host.work().join("victim"), "x").unwrap();
    remote_shim(&host, &url, &rt)
        .env("HEADLESS_RUN_SERVER_CA", &ca)
        .args(["--", "rm", "-i", "victim"])
        .run()
        .expect_code(90);
    // A CA that did not sign it: no store, and the prompt cannot become an approval.
    let refused = remote_shim(&host, &url, &rt)
        .env("HEADLESS_RUN_SERVER_CA", &other_ca)
        .args(["--", "rm", "-i", "victim"])
        .run();
    refused.expect_code(125);
    assert!(
        refused.stderr.to_lowercase().contains("certificate"),
        "{}",
        refused.stderr
    );
    // Only the first reached the server.
    served.stop().expect_code(0);
    let listed = server.monitor().args(["approvals", "--json"]).run();
    listed.expect_code(0);
    let v: Value = serde_json::from_str(&listed.out()).unwrap();
    assert_eq!(v.as_array().map(Vec::len), Some(1), "{v}");
}

#[test]
fn a_runner_gets_no_answer_from_its_own_policy_another_tokens_decision_or_a_worker_here() {
    let server = TestEnv::new();
    let op = token(&server, "alice", "operator");
    let rt = token(&server, "ci-7", "runner");
    let other = token(&server, "ci-8", "runner");
    let served = Served::start(&server);
    let host = TestEnv::new();
    // The runner's own config would answer rm's prompt: through the server it does not.
    let cfg = host.path().join("config/headless-run");
    std::fs::create_dir_all(&cfg).unwrap();
    std::fs::write(
        cfg.join("config.toml"),
        "[[policies]]\nname = \"yes-to-rm\"\ntool = \"rm\"\nvalue = \"y\"\n",
    )
    .unwrap();
    std::fs::write(host.work().join("victim"), "x").unwrap();
    remote_shim(&host, &served.url(), &rt)
        .args(["--", "rm", "-i", "victim"])
        .run()
        .expect_code(90);
    assert!(
        host.work().join("victim").exists(),
        "a runner's policy answered"
    );
    let pending = approvals(&served, &op, "pending");
    assert_eq!(pending.len(), 1, "{pending:?}");
    let ap_id = pending[0]["approval_id"].as_str().unwrap().to_owned();
    let run_id = pending[0]["tool_run_id"].as_str().unwrap().to_owned();
    // Its run is marked as the runner's.
    let run = run_of(&served, &op, &run_id);
    assert_eq!(run["metadata"]["runner"], "ci-7");
    assert!(run["metadata"].get("uid").is_none(), "{run}");
    let (st, _) = served.json(
        "POST",
        &format!("/api/v1/approvals/{ap_id}/decide"),
        &op,
        Some(r#"{"value":"yes"}"#),
    );
    assert_eq!(st, 200);
    // Another token's run of the same command in the same directory is not answered by it:
    // it asks for itself.
    remote_shim(&host, &served.url(), &other)
        .args(["--", "rm", "-i", "victim"])
        .run()
        .expect_code(90);
    assert!(
        host.work().join("victim").exists(),
        "ci-8 used ci-7's decision"
    );
    let decided = approvals(&served, &op, "approved");
    assert!(decided[0]["consumed_at"].is_null(), "{decided:?}");
    // Nor can it check the decision as its AUTO_APPROVAL.
    let (_, v) = served.json("GET", "/api/v1/runs?tool=rm", &op, None);
    let others_run = v["runs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["metadata"]["runner"] == "ci-8")
        .unwrap()["tool_run_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let auto = json!({
        "who": {
            "tool_run_id": others_run, "tool": "rm", "execution_id": "EX-x",
            "request_fingerprint": "f", "argv": ["rm"], "cwd": "/", "tool_digest": null,
            "actor": "x"
        },
        "approval_id": ap_id, "value": "y", "resumed_from": run_id
    });
    let (st, v) = served.json(
        "POST",
        "/api/v1/runner/auto-approval",
        &other,
        Some(&auto.to_string()),
    );
    assert_eq!(st, 403, "{v}");
    // A worker on the server's host does not run a runner's command.
    let worker = server.monitor().args(["worker", "--once"]).run();
    assert!(
        worker.out().contains("recorded by runner token ci-7"),
        "{}",
        worker.context()
    );
    assert_eq!(run_of(&served, &op, &run_id)["status"], "waiting_approval");
    // Its own re-run is answered.
    remote_shim(&host, &served.url(), &rt)
        .args(["--", "rm", "-i", "victim"])
        .run()
        .expect_code(0);
    assert!(!host.work().join("victim").exists());
    // A first row whose id is a path is refused before any file is made.
    let mut row = run_of(&served, &op, &run_id);
    row["tool_run_id"] = json!("../../x");
    let call = json!({"run_id": "../../x", "writes": [{"Start": row}], "actor": "x", "row_may_exist": false});
    let (st, v) = served.json(
        "POST",
        "/api/v1/runner/record",
        &rt,
        Some(&call.to_string()),
    );
    assert_eq!(st, 400, "{v}");
    assert!(!server.path().join("x").exists());
    assert!(!server.state().join("x").exists());
}

#[test]
fn the_token_is_not_in_the_shims_environment_block_either() {
    let server = TestEnv::new();
    let rt = token(&server, "ci-7", "runner");
    let served = Served::start(&server);
    let host = TestEnv::new();
    // The tool's parent is the shim: its /proc environ no longer holds the token.
    let out = remote_shim(&host, &served.url(), &rt)
        .args([
            "--",
            "sh",
            "-c",
            "tr '\\000' '\\n' < /proc/$PPID/environ | grep -c '^HEADLESS_RUN_TOKEN=hrt_' || true",
        ])
        .run();
    out.expect_code(0);
    assert_eq!(out.out().trim(), "0", "{}", out.out());
    assert!(!out.out().contains(&rt[4..]));
}

/// Fifteen hundred live runs of the token on the asking host, then a prompt: it reads and
/// sends the processes of the runs that asked its own command's pending approvals only.
/// Before, every live run of the host went into the prompt's body, which passed the runner
/// API's limit (64 KiB) near a thousand runs: the approval was never recorded and the tool
/// was ended (125). The run parks on its question (90).
#[test]
fn a_prompt_on_a_host_with_many_live_runs_sends_only_its_own_commands_runs() {
    let server = TestEnv::new();
    let op = token(&server, "alice", "operator");
    let rt = token(&server, "ci-7", "runner");
    let served = Served::start(&server);
    let here = hr_shared::proc::hostname();
    for i in 0..1500 {
        let mut run = hr_shared::testing::run(
            &hr_shared::id::new_run_id(),
            "build",
            hr_shared::status::RunStatus::Running,
        );
        run.host = Some(here.clone());
        run.shim_pid = Some(100_000 + i);
        run.argv_json = vec!["build".into(), i.to_string()];
        let call = hr_shared::wire::RecordCall {
            run_id: run.tool_run_id.clone(),
            writes: vec![hr_shared::store::RunWrite::Start(Box::new(run))],
            actor: "ci".into(),
            row_may_exist: false,
        };
        let (st, v) = served.json(
            "POST",
            "/api/v1/runner/record",
            &rt,
            Some(&serde_json::to_string(&call).unwrap()),
        );
        assert_eq!(st, 200, "run {i}: {v}");
    }
    let host = TestEnv::new();
    std::fs::write(host.work().join("victim"), "x").unwrap();
    let out = remote_shim(&host, &served.url(), &rt)
        .args(["--", "rm", "-i", "victim"])
        .run();
    out.expect_code(90);
    let pending = approvals(&served, &op, "pending");
    assert_eq!(pending.len(), 1, "{pending:?}");
    assert!(host.work().join("victim").exists());
}
