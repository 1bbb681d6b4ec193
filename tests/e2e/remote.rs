//! `monitor --server URL`: the operator commands and the dashboard against a real
//! `monitor serve`, from a client with a state dir of its own (nothing local to read). A
//! waiting tool listed, shown and decided by short id (recorded as the token's name over
//! http, in the server's store), `wait` on the approval and the run, `runs --json`, the
//! first writer winning and an invalid value as on a local store, `cancel` ending a live
//! tool through the server; which tokens may not (viewer, runner, none), the credentials
//! file (0644 refused, 0600 used, with HEADLESS_RUN_SERVER), commands that cannot work
//! remotely, the server down; and the dashboard in tmux approving a prompt by key.

use crate::dashboard::{Tmux, monitor_argv};
use crate::serve::{Served, token};
use headless_run_e2e::*;
use serde_json::Value;
use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

/// `monitor --server URL …` from `client`, with `token` (none: no HEADLESS_RUN_TOKEN).
fn remote(client: &TestEnv, url: &str, token: Option<&str>) -> Cmd {
    let mut cmd = client.monitor();
    cmd.args(["--server", url]);
    if let Some(t) = token {
        cmd.env("HEADLESS_RUN_TOKEN", t);
    }
    cmd
}

/// `monitor --server URL ARGS --json`, parsed.
fn remote_json(client: &TestEnv, url: &str, token: &str, args: &[&str]) -> Value {
    let out = remote(client, url, Some(token))
        .args(args)
        .arg("--json")
        .run();
    out.expect_code(0);
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{args:?}: no JSON ({e}); {}", out.context()))
}

/// The pending approvals the server lists, as the client sees them.
fn pending(client: &TestEnv, url: &str, token: &str) -> Vec<Value> {
    remote_json(client, url, token, &["approvals"])
        .as_array()
        .cloned()
        .unwrap_or_default()
}

/// Waits for the one pending approval whose question mentions `what`.
fn pending_about(client: &TestEnv, url: &str, token: &str, what: &str, tool: &Running) -> Value {
    let mut found = None;
    let seen = wait_for_state(Duration::from_secs(20), || {
        found = pending(client, url, token)
            .into_iter()
            .find(|a| a["question"].as_str().is_some_and(|q| q.contains(what)));
        found.is_some()
    });
    assert!(
        seen,
        "no pending approval about {what}; tool: {}",
        tool.stderr_now()
    );
    found.unwrap()
}

fn field<'a>(v: &'a Value, k: &str) -> &'a str {
    v[k].as_str()
        .unwrap_or_else(|| panic!("no string {k} in {v}"))
}

#[test]
fn the_operator_commands_work_against_a_server_as_the_token() {
    let env = TestEnv::new();
    let (op, viewer, runner) = (
        token(&env, "alice", "operator"),
        token(&env, "wall-screen", "viewer"),
        token(&env, "ci-runner", "runner"),
    );
    let served = Served::start(&env);
    let url = served.url();
    let client = TestEnv::new();

    // Nothing has run on the server yet: empty listings, not errors.
    let out = remote(&client, &url, Some(&viewer)).arg("approvals").run();
    out.expect_code(0);
    assert!(out.out().contains("no pending approvals"), "{}", out.out());

    // A tool on the server's host waits at its prompt.
    std::fs::write(env.work().join("victim"), "x").unwrap();
    let tool = env
        .shim()
        .args(["--", "rm", "-i", "victim"])
        .timeout(Duration::from_secs(90))
        .spawn_wait_mode();
    let ap = pending_about(&client, &url, &viewer, "victim", &tool);
    let id = field(&ap, "approval_id").to_owned();
    let run_id = field(&ap, "tool_run_id").to_owned();
    assert_eq!(ap["command"], serde_json::json!(["rm", "-i", "victim"]));
    assert_eq!(field(&ap, "cwd"), env.work().display().to_string());

    // The table, and the approval in full by a short id in lower case.
    let table = remote(&client, &url, Some(&viewer)).arg("approvals").run();
    table.expect_code(0);
    assert!(
        table.out().contains(&id) && table.out().contains("rm -i victim"),
        "{}",
        table.out()
    );
    let short = id[..id.len() - 6].to_lowercase();
    let shown = remote(&client, &url, Some(&viewer))
        .args(["show", &short])
        .run();
    shown.expect_code(0);
    let text = shown.out();
    assert!(
        text.contains(&format!("{:<20} {id}", "approval_id")),
        "{text}"
    );
    assert!(text.contains("remove regular file 'victim'"), "{text}");
    assert!(text.contains("rm -i victim"), "{text}");
    assert!(
        text.contains(&format!("decide: monitor decide {id} ")),
        "{text}"
    );
    let json = remote_json(&client, &url, &viewer, &["show", &id]);
    let events: Vec<&str> = json["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| e["event"].as_str())
        .collect();
    assert!(events.contains(&"approval_needed"), "{json}");
    // The endpoints added for `--server` are the operator API's: viewers and operators
    // read them, a runner token gets 403.
    for path in [
        format!("/api/v1/ids?prefix={}", &id[..8]),
        "/api/v1/counts?since=1h&soon=60".to_owned(),
        format!("/api/v1/runs/{run_id}/audit"),
        format!("/api/v1/approvals/{id}/audit"),
    ] {
        let (st, v) = served.json("GET", &path, &viewer, None);
        assert_eq!(st, 200, "{path}: {v}");
        let (st, v) = served.json("GET", &path, &runner, None);
        assert_eq!(st, 403, "{path}: {v}");
    }
    let (_, v) = served.json(
        "GET",
        &format!("/api/v1/ids?prefix={}", &id[..8]),
        &op,
        None,
    );
    assert_eq!(v["ids"], serde_json::json!([id.clone()]), "{v}");
    let (_, v) = served.json("GET", "/api/v1/counts?since=1h", &op, None);
    assert_eq!(
        (v["pending"].as_i64(), v["live"][0]["status"].as_str()),
        (Some(1), Some("waiting_approval")),
        "{v}"
    );
    // An id the server does not know: exit 4, as on a local store.
    let unknown = remote(&client, &url, Some(&viewer))
        .args(["show", "AP-ZZZZZZ"])
        .run();
    unknown.expect_code(4);

    // `wait` on the approval, from the client, until it is decided.
    let waiter = remote(&client, &url, Some(&viewer))
        .args(["wait", &id, "--timeout", "60s"])
        .spawn();

    // Who may not decide: a viewer, a runner, nobody.
    for (tok, role) in [(&viewer, "viewer"), (&runner, "runner")] {
        let out = remote(&client, &url, Some(tok.as_str()))
            .args(["decide", &id, "yes"])
            .run();
        out.expect_code(1);
        assert!(
            out.stderr
                .contains(&format!("{url}: a {role} token may not do this (HTTP 403)")),
            "{}",
            out.stderr
        );
    }
    let out = remote(&client, &url, None)
        .args(["decide", &id, "yes"])
        .run();
    out.expect_code(1);
    assert!(
        out.stderr.contains(&format!("no token for {url}"))
            && out.stderr.contains("HEADLESS_RUN_TOKEN"),
        "{}",
        out.stderr
    );
    let out = remote(&client, &url, Some("hrt_not-a-token"))
        .args(["approvals"])
        .run();
    out.expect_code(1);
    assert!(
        out.stderr
            .contains("the token is unknown, expired or revoked"),
        "{}",
        out.stderr
    );
    assert_eq!(s(&env.approval_by_id(&id), "status"), "pending");
    // --remember is refused before anything is decided.
    let out = remote(&client, &url, Some(&op))
        .args(["decide", &id, "yes", "--remember"])
        .run();
    out.expect_code(2);
    assert!(out.stderr.contains("--remember"), "{}", out.stderr);
    assert_eq!(s(&env.approval_by_id(&id), "status"), "pending");

    // The operator decides: recorded in the server's store as the token's name over http.
    let out = remote(&client, &url, Some(&op))
        .args(["decide", &short, "yes", "--comment", "ship it"])
        .run();
    out.expect_code(0);
    assert!(
        out.out()
            .contains(&format!("approved {id} with `yes` (by alice via http)")),
        "{}",
        out.out()
    );
    let row = env.approval_by_id(&id);
    assert_eq!(
        (
            s(&row, "status"),
            s(&row, "chosen_value"),
            s(&row, "decided_by"),
            s(&row, "decision_channel"),
            s(&row, "comment"),
        ),
        ("approved", "yes", "alice", "http", "ship it")
    );
    tool.wait().expect_code(0);
    assert!(!env.work().join("victim").exists());
    let waited = waiter.wait();
    waited.expect_code(0);
    assert!(
        waited
            .out()
            .contains(&format!("{id} approved: yes by alice at ")),
        "{}",
        waited.out()
    );
    assert!(waited.out().contains("(ship it)"), "{}", waited.out());

    // The same decision again is a no-op; another one is refused, naming who decided.
    let again = remote(&client, &url, Some(&op))
        .args(["decide", &id, "y"])
        .run();
    again.expect_code(0);
    assert!(
        again
            .out()
            .starts_with("already approved: yes by alice at "),
        "{}",
        again.out()
    );
    let other = remote(&client, &url, Some(&op))
        .args(["decide", &id, "reject"])
        .run();
    other.expect_code(3);
    assert!(
        other
            .stderr
            .contains(&format!("{id} was already decided by alice at ")),
        "{}",
        other.stderr
    );

    // The run: waited for (already over), shown with its output tail and audit trail.
    let waited = remote(&client, &url, Some(&viewer))
        .args(["wait", &run_id, "--timeout", "30s"])
        .run();
    waited.expect_code(0);
    assert!(
        waited
            .out()
            .contains(&format!("{run_id} completed (exit 0)")),
        "{}",
        waited.out()
    );
    let run = remote_json(&client, &url, &viewer, &["show", &run_id]);
    assert_eq!(run["status"], "completed", "{run}");
    assert!(
        field(&run, "output_tail").contains("remove regular file 'victim'"),
        "the server's log, not the client's: {run}"
    );
    assert_eq!(run["approvals"][0]["approval_id"], id.as_str(), "{run}");
    assert!(
        run["events"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["event"] == "tool_status_change"),
        "{run}"
    );

    // A value the prompt does not offer: exit 2, the valid ones listed.
    std::fs::write(env.work().join("second"), "x").unwrap();
    env.shim()
        .args(["--", "rm", "-i", "second"])
        .run()
        .expect_code(90);
    let second = pending(&client, &url, &viewer)
        .into_iter()
        .find(|a| field(a, "question").contains("second"))
        .expect("the parked run's approval");
    let second_id = field(&second, "approval_id").to_owned();
    let out = remote(&client, &url, Some(&op))
        .args(["decide", &second_id, "maybe"])
        .run();
    out.expect_code(2);
    assert!(
        out.stderr.contains(&format!(
            "`maybe` is not a valid answer for {second_id}; valid values: "
        )) && out.stderr.contains("y"),
        "{}",
        out.stderr
    );

    // The runs, as JSON: both, newest first, with the parked one waiting.
    let runs = remote_json(&client, &url, &viewer, &["runs"]);
    let runs = runs.as_array().unwrap();
    assert_eq!(runs.len(), 2, "{runs:?}");
    assert_eq!(runs[1]["tool_run_id"], run_id.as_str());
    assert_eq!(runs[1]["status"], "completed");
    assert_eq!(runs[0]["status"], "waiting_approval");
    assert_eq!(
        runs[0]["argv_json"],
        serde_json::json!(["rm", "-i", "second"])
    );

    // A live run cancelled through the server, which signals its headless-run.
    let long = env
        .shim()
        .args(["--", "sh", "-c", "echo started; sleep 60"])
        .timeout(Duration::from_secs(60))
        .spawn();
    let mut live = String::new();
    assert!(
        wait_for_state(Duration::from_secs(20), || {
            let r = remote_json(&client, &url, &viewer, &["runs", "--status", "running"]);
            live = r[0]["tool_run_id"].as_str().unwrap_or_default().to_owned();
            !live.is_empty()
        }),
        "the long run never showed: {}",
        long.stderr_now()
    );
    let out = remote(&client, &url, Some(&viewer))
        .args(["cancel", &live])
        .run();
    out.expect_code(1);
    assert!(
        out.stderr.contains("a viewer token may not"),
        "{}",
        out.stderr
    );
    let out = remote(&client, &url, Some(&op))
        .args(["cancel", &live, "--reason", "enough"])
        .run();
    out.expect_code(0);
    assert!(
        out.out().contains(&format!(
            "{live} cancelled by alice: enough; the server's headless-run (pid "
        )),
        "{}",
        out.out()
    );
    long.wait().expect_code(143);
    let row = env.run_by_id(&live);
    assert_eq!(
        (s(&row, "status"), s(&row, "reason")),
        ("cancelled", "cancelled by alice: enough")
    );
    let out = remote(&client, &url, Some(&op))
        .args(["cancel", &live])
        .run();
    out.expect_code(3);
    assert!(
        out.stderr
            .contains(&format!("{live} has already ended: cancelled")),
        "{}",
        out.stderr
    );

    // Nothing was written on the client's side.
    assert!(!client.state().join("state.db").exists());
    served.stop().expect_code(0);
}

#[test]
fn the_token_comes_from_a_private_credentials_file_and_problems_are_said_clearly() {
    let env = TestEnv::new();
    let viewer = token(&env, "wall-screen", "viewer");
    let served = Served::start(&env);
    let url = served.url();
    let client = TestEnv::new();
    // The server named by HEADLESS_RUN_SERVER, the token in the default credentials file.
    let file = client.path().join("config/headless-run/credentials.toml");
    std::fs::create_dir_all(file.parent().unwrap()).unwrap();
    std::fs::write(&file, format!("server = \"{url}\"\ntoken = \"{viewer}\"\n")).unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
    let by_env = || {
        let mut c = client.monitor();
        c.env("HEADLESS_RUN_SERVER", &url);
        c
    };
    let out = by_env().arg("approvals").run();
    out.expect_code(1);
    assert!(
        out.stderr.contains(&file.display().to_string())
            && out
                .stderr
                .contains("readable by others (mode 644); chmod 600 it"),
        "{}",
        out.stderr
    );
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
    let out = by_env().arg("approvals").run();
    out.expect_code(0);
    assert!(out.out().contains("no pending approvals"), "{}", out.out());
    let out = by_env().args(["doctor", "--json"]).run();
    let report: Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
    assert!(
        report["checks"]
            .as_array()
            .is_some_and(|c| c.iter().any(|c| c["level"] == "ok"
                && c["text"]
                    .as_str()
                    .is_some_and(|t| t.contains(&format!("server {url} answers"))))),
        "{}",
        out.context()
    );

    // What works on this host's own store says so, with a usage exit.
    for args in [
        &["gc", "--older-than", "1d"][..],
        &["worker", "--once"],
        &["reconcile"],
        &["logs"],
        &["policies"],
    ] {
        let out = by_env().args(args).run();
        out.expect_code(2);
        assert!(
            out.stderr.contains(&format!(
                "`monitor {}` does not work against a server (HEADLESS_RUN_SERVER={url})",
                args[0]
            )),
            "{args:?}: {}",
            out.stderr
        );
    }
    let out = client
        .monitor()
        .args(["--server", &url, "token", "list"])
        .run();
    out.expect_code(2);
    assert!(
        out.stderr
            .contains("`monitor token` does not work against a server (--server)"),
        "{}",
        out.stderr
    );
    // Not a URL.
    let out = client
        .monitor()
        .args(["--server", "localhost:1", "runs"])
        .run();
    out.expect_code(1);
    assert!(out.stderr.contains("http:// or https://"), "{}", out.stderr);

    // The server down: a clear error naming it.
    served.stop().expect_code(0);
    let out = by_env().arg("runs").run();
    out.expect_code(1);
    assert!(
        out.stderr
            .contains(&format!("monitor: cannot reach the server at {url}: ")),
        "{}",
        out.stderr
    );
    let out = by_env().args(["decide", "AP-01ABC", "approve"]).run();
    out.expect_code(1);
    assert!(
        out.stderr
            .contains(&format!("cannot reach the server at {url}")),
        "{}",
        out.stderr
    );
}

#[test]
fn the_dashboard_against_a_server_approves_a_prompt_by_key() {
    if !Tmux::installed() {
        eprintln!("skipping the remote dashboard test: tmux is not installed");
        return;
    }
    let env = TestEnv::new();
    let op = token(&env, "alice", "operator");
    let served = Served::start(&env);
    let url = served.url();
    let client = TestEnv::new();
    std::fs::write(env.work().join("FILE"), "x").unwrap();
    let tool = env
        .shim()
        .args(["--on-prompt", "wait", "--", "rm", "-i", "FILE"])
        .timeout(Duration::from_secs(90))
        .spawn();
    let ap = pending_about(&client, &url, &op, "FILE", &tool);
    let id = field(&ap, "approval_id").to_owned();

    // The dashboard of a client with no state of its own, in a clean environment.
    let exit_file = client.path().join("monitor.exit");
    let mut argv = monitor_argv(&client, &exit_file);
    let monitor = argv.pop().unwrap();
    argv.push(format!("HEADLESS_RUN_TOKEN={op}"));
    argv.extend([monitor, "--server".into(), url.clone()]);
    let tmux = Tmux::start(&client, 140, 40, &argv);
    let screen = tmux.wait_for(
        &env,
        "the server's approval",
        Duration::from_secs(20),
        |s| s.contains("Pending approvals (1)") && s.contains("rm: remove regular file 'FILE'?"),
    );
    assert!(
        screen.lines().next().is_some_and(|l| l.contains(&url)),
        "the header names the server:\n{screen}"
    );

    // `1` on the selected run answers its approval with its first option, yes, through the
    // server (`a` would take rm's own default, no).
    tmux.keys(&["1"]);
    tool.wait().expect_code(0);
    assert!(!env.work().join("FILE").exists());
    let screen = tmux.wait_for(&env, "the decision", Duration::from_secs(20), |s| {
        s.contains("Pending approvals (0)") && s.contains("completed")
    });
    assert!(screen.contains("approved `yes`"), "{screen}");
    let row = env.approval_by_id(&id);
    assert_eq!(
        (
            s(&row, "status"),
            s(&row, "decided_by"),
            s(&row, "decision_channel")
        ),
        ("approved", "alice", "http")
    );

    tmux.keys(&["q"]);
    let exited = wait_until(Duration::from_secs(10), || {
        std::fs::read_to_string(&exit_file).is_ok_and(|t| t.ends_with('\n'))
    });
    let status = std::fs::read_to_string(&exit_file).unwrap_or_default();
    assert!(
        exited && status.trim() == "0",
        "monitor did not exit 0 on q: {status:?}"
    );
    served.stop().expect_code(0);
}

#[test]
fn an_https_server_is_verified_against_the_given_ca() {
    let env = TestEnv::new();
    let viewer = token(&env, "wall-screen", "viewer");
    let [ca, cert, key, other_ca] = crate::postgres::certificates(env.path());
    let (cert, key) = (cert.display().to_string(), key.display().to_string());
    let served = Served::start_args(&env, &[], &["--tls-cert", &cert, "--tls-key", &key]);
    let url = format!("https://127.0.0.1:{}", served.port);
    let client = TestEnv::new();
    let out = remote(&client, &url, Some(&viewer))
        .env("HEADLESS_RUN_SERVER_CA", &ca)
        .arg("runs")
        .run();
    out.expect_code(0);
    assert_eq!(out.out().trim(), "no runs");
    // A certificate the given CA did not sign: refused, naming the server.
    let out = remote(&client, &url, Some(&viewer))
        .env("HEADLESS_RUN_SERVER_CA", &other_ca)
        .arg("runs")
        .run();
    out.expect_code(1);
    assert!(
        out.stderr
            .contains(&format!("cannot reach the server at {url}")),
        "{}",
        out.stderr
    );
    served.stop().expect_code(0);
}
