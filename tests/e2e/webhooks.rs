//! Webhooks (`[[webhooks]]`), posted by `monitor serve` to real local receivers
//! (`tests/fixtures/webhook_receiver.py`, which checks each signature as the README tells a
//! receiver to): an approval asked and then decided reaches a JSON receiver — retried
//! after its first attempt failed — and a Slack-format one, each signed with its own
//! secret; the server's log names the receivers by host only; a configuration the server
//! cannot honour is refused before it listens.

use crate::serve::Served;
use headless_run_e2e::*;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// A receiver on loopback: its URL (with a path that stands for a secret) and its log.
fn receiver(
    env: &TestEnv,
    name: &str,
    secret: &str,
    fail_first: bool,
) -> (Running, String, PathBuf) {
    receiver_with(env, name, secret, fail_first, false)
}

/// [`receiver`], answering every post with a redirect when `redirect`.
fn receiver_with(
    env: &TestEnv,
    name: &str,
    secret: &str,
    fail_first: bool,
    redirect: bool,
) -> (Running, String, PathBuf) {
    let port_file = env.path().join(format!("{name}.port"));
    let out = env.path().join(format!("{name}.jsonl"));
    let running = env
        .command("python3")
        .arg(fixture("webhook_receiver.py"))
        .arg(&port_file)
        .arg(&out)
        .env("SECRET", secret)
        .env("FAIL_FIRST", if fail_first { "1" } else { "0" })
        .env("REDIRECT", if redirect { "1" } else { "0" })
        .timeout(Duration::from_secs(300))
        .spawn();
    let port = port_of(&port_file);
    let url = format!("http://127.0.0.1:{port}/services/T000/B000/{name}-path-secret");
    (running, url, out)
}

/// The port a fixture server wrote to `port_file` once it listens (within 30 s).
pub(crate) fn port_of(port_file: &Path) -> String {
    let end = Instant::now() + Duration::from_secs(30);
    while !port_file.exists() {
        assert!(Instant::now() < end, "{} never came", port_file.display());
        std::thread::sleep(Duration::from_millis(50));
    }
    std::fs::read_to_string(port_file).unwrap()
}

/// The receiver's log once `done` holds of it (within a minute).
pub(crate) fn received(out: &Path, done: impl Fn(&[Value]) -> bool) -> Vec<Value> {
    let end = Instant::now() + Duration::from_secs(60);
    loop {
        let lines: Vec<Value> = std::fs::read_to_string(out)
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        if done(&lines) {
            return lines;
        }
        assert!(Instant::now() < end, "not received: {lines:#?}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A real SMTP server (aiosmtpd, `tests/fixtures/smtp_receiver.py`) on loopback taking
/// nothing before STARTTLS and nothing unauthenticated (login `hr-mailer`/`mail-s3cret`),
/// its certificate signed by `ca` (`other_ca` signed nothing of it); what it got is in `out`.
pub(crate) struct Smtp {
    pub _server: Running,
    pub port: String,
    pub out: PathBuf,
    pub ca: PathBuf,
    pub other_ca: PathBuf,
}

pub(crate) fn smtp(env: &TestEnv) -> Smtp {
    let python = aiosmtpd_python();
    let [ca, cert, key, other_ca] = crate::postgres::certificates(env.path());
    let port_file = env.path().join("smtp.port");
    let out = env.path().join("smtp.jsonl");
    let server = env
        .command(&python)
        .arg(fixture("smtp_receiver.py"))
        .arg(&port_file)
        .arg(&out)
        .arg(&cert)
        .arg(&key)
        .env("USER_NAME", "hr-mailer")
        .env("PASSWORD", "mail-s3cret")
        .timeout(Duration::from_secs(300))
        .spawn();
    Smtp {
        _server: server,
        port: port_of(&port_file),
        out,
        ca,
        other_ca,
    }
}

pub(crate) fn config(env: &TestEnv, text: &str) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let file = env.path().join("webhooks.toml");
    std::fs::write(&file, text).unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
    file
}

#[test]
fn approvals_asked_and_decided_are_posted_signed_and_retried() {
    let env = TestEnv::new();
    let (json_rx, json_url, json_out) = receiver(&env, "json", "s3cret-one", true);
    let (slack_rx, slack_url, slack_out) = receiver(&env, "slack", "s3cret-two", false);
    let file = config(
        &env,
        &format!(
            "[[webhooks]]\nurl = \"{json_url}\"\nsecret_env = \"HR_HOOK_ONE\"\nlink = \"https://hr.example:8443\"\n\n\
             [[webhooks]]\nurl = \"{slack_url}\"\nformat = \"slack\"\nsecret_env = \"HR_HOOK_TWO\"\nlink = \"https://hr.example:8443\"\n"
        ),
    );
    let file_s = file.to_string_lossy().to_string();
    let served = Served::start_with(
        &env,
        &[
            ("HEADLESS_RUN_CONFIG", &file_s),
            ("HR_HOOK_ONE", "s3cret-one"),
            ("HR_HOOK_TWO", "s3cret-two"),
        ],
    );

    // A question: posted as pending to both.
    std::fs::write(env.work().join("f"), "x").unwrap();
    env.shim()
        .args(["--", "rm", "-i", "f"])
        .run()
        .expect_code(90);
    let ap = env.pending_approval();
    let id = ap["approval_id"].as_str().unwrap().to_owned();
    let json = received(&json_out, |l| l.iter().any(|r| r["status"] == 200));
    // The first attempt failed (500); the same delivery came again, signed anew, and held.
    assert_eq!(json[0]["status"], 500, "{json:#?}");
    assert_eq!(json[1]["delivery"], json[0]["delivery"], "{json:#?}");
    assert_eq!(json[1]["attempt"], 2, "{json:#?}");
    for r in &json {
        assert_eq!(r["signature"], "ok", "{r}");
        assert_eq!(r["event"], "approval_needed", "{r}");
    }
    let body = &json[1]["body"];
    assert_eq!(body["event"], "approval_needed");
    assert_eq!(body["approval"]["approval_id"], id.as_str());
    assert_eq!(body["approval"]["question"], ap["question"]);
    assert_eq!(
        body["link"],
        format!("https://hr.example:8443/#/approvals/{id}")
    );
    assert_eq!(body["delivery"], format!("{id}:pending"));
    let slack = received(&slack_out, |l| !l.is_empty());
    assert_eq!(slack[0]["signature"], "ok", "{slack:#?}");
    let msg = &slack[0]["body"];
    assert!(
        msg["text"].as_str().unwrap().starts_with("rm asks: "),
        "{msg}"
    );
    assert_eq!(msg["blocks"][0]["text"]["type"], "plain_text", "{msg}");
    assert_eq!(
        msg["blocks"][2]["elements"][0]["url"],
        format!("https://hr.example:8443/#/approvals/{id}")
    );

    // Decided: posted as decided, with who decided.
    env.decide(&id, "y").expect_code(0);
    let json = received(&json_out, |l| {
        l.iter()
            .any(|r| r["event"] == "approval_status_change" && r["status"] == 200)
    });
    let decided = json
        .iter()
        .find(|r| r["event"] == "approval_status_change" && r["status"] == 200)
        .unwrap();
    assert_eq!(
        decided["body"]["approval"]["status"], "approved",
        "{decided}"
    );
    assert_eq!(decided["delivery"], format!("{id}:approved"));
    let slack = received(&slack_out, |l| l.len() >= 2);
    assert!(
        slack[1]["body"]["text"]
            .as_str()
            .unwrap()
            .contains(&format!("{id} was approved by ")),
        "{slack:#?}"
    );
    // Nothing else: one pending and one decided delivery each, the JSON one's each tried
    // twice (its receiver fails every first attempt).
    assert_eq!(json.len(), 4, "{json:#?}");
    assert_eq!(slack.len(), 2, "{slack:#?}");

    let out = served.stop();
    out.expect_code(0);
    assert!(
        out.stderr.contains("posting approvals to 2 webhook(s)"),
        "{}",
        out.stderr
    );
    assert!(
        out.stderr.contains("webhook to http://127.0.0.1:")
            && out.stderr.contains("answered 500; again in 1s"),
        "{}",
        out.stderr
    );
    assert!(!out.stderr.contains("path-secret"), "{}", out.stderr);
    drop((json_rx, slack_rx));
}

#[test]
fn a_webhook_the_server_cannot_honour_is_refused_before_it_listens() {
    let env = TestEnv::new();
    for (text, says) in [
        (
            "[[webhooks]]\nurl = \"http://10.1.2.3/hook\"\n",
            "plain http only to loopback",
        ),
        (
            "[[webhooks]]\nurl = \"https://hooks.example/T/SECRET\"\nsecret_env = \"HR_HOOK_UNSET\"\n",
            "HR_HOOK_UNSET (its secret_env) is not set",
        ),
        (
            "[[webhooks]]\nurl = \"https://hooks.example/T/SECRET\"\nformat = \"teams\"\n",
            "format",
        ),
    ] {
        let file = config(&env, text);
        let out = env
            .monitor()
            .args(["serve", "--listen", "127.0.0.1:0"])
            .env("HEADLESS_RUN_CONFIG", &file)
            .env_remove("HR_HOOK_UNSET")
            .timeout(Duration::from_secs(30))
            .run();
        out.expect_code(2);
        assert!(out.stderr.contains(says), "{says}: {}", out.stderr);
        assert!(!out.stderr.contains("listening"), "{}", out.stderr);
        assert!(!out.stderr.contains("SECRET"), "{}", out.stderr);
    }
    // A system with no CA certificate to check an https receiver or SMTP server by.
    let none = env.path().join("no-ca.pem");
    std::fs::write(&none, "").unwrap();
    for text in [
        "[[webhooks]]\nurl = \"https://hooks.example/T/SECRET\"\n",
        "[[email]]\nto = [\"ops@example.com\"]\nfrom = \"hr@example.com\"\nsmtp = \"smtp://mail.example\"\n",
    ] {
        let file = config(&env, text);
        let out = env
            .monitor()
            .args(["serve", "--listen", "127.0.0.1:0"])
            .env("HEADLESS_RUN_CONFIG", &file)
            .env("SSL_CERT_FILE", &none)
            .env("SSL_CERT_DIR", env.path().join("no-ca-dir"))
            .timeout(Duration::from_secs(30))
            .run();
        out.expect_code(2);
        assert!(
            out.stderr.contains("no CA certificate found"),
            "{text}: {}",
            out.stderr
        );
    }
}

/// `[[email]]`: an approval asked is mailed through a real local SMTP server (aiosmtpd)
/// that takes nothing before STARTTLS and nothing unauthenticated: the message arrives
/// encrypted, from the configured login, with the question, the options and the link.
/// Mail to a server whose certificate is not trusted is never sent in clear.
#[test]
fn an_approval_is_mailed_over_starttls_with_a_login() {
    let env = TestEnv::new();
    let Smtp {
        _server,
        port,
        out,
        ca,
        other_ca,
    } = smtp(&env);
    let file = config(
        &env,
        &format!(
            "[[email]]\nto = [\"Ops <ops@example.com>\", \"lead@example.com\"]\nfrom = \"headless-run <hr@example.com>\"\n\
             smtp = \"smtp://127.0.0.1:{port}\"\nusername_env = \"HR_SMTP_USER\"\npassword_env = \"HR_SMTP_PASSWORD\"\n\
             ca = \"{}\"\nlink = \"https://hr.example:8443\"\nretries = 1\n\n\
             [[email]]\nto = [\"nobody@example.com\"]\nfrom = \"hr@example.com\"\nsmtp = \"smtp://127.0.0.1:{port}\"\n\
             username_env = \"HR_SMTP_USER\"\npassword_env = \"HR_SMTP_PASSWORD\"\nca = \"{}\"\nretries = 0\n",
            ca.display(),
            other_ca.display()
        ),
    );
    let file_s = file.to_string_lossy().to_string();
    let served = Served::start_with(
        &env,
        &[
            ("HEADLESS_RUN_CONFIG", &file_s),
            ("HR_SMTP_USER", "hr-mailer"),
            ("HR_SMTP_PASSWORD", "mail-s3cret"),
        ],
    );
    std::fs::write(env.work().join("f"), "x").unwrap();
    env.shim()
        .args(["--", "rm", "-i", "f"])
        .run()
        .expect_code(90);
    let ap = env.pending_approval();
    let id = ap["approval_id"].as_str().unwrap().to_owned();
    let mail = received(&out, |l| !l.is_empty());
    assert_eq!(mail.len(), 1, "{mail:#?}");
    let m = &mail[0];
    assert_eq!(m["tls"], true, "{m}");
    assert_eq!(m["login"], "hr-mailer", "{m}");
    assert_eq!(m["mail_from"], "hr@example.com", "{m}");
    assert_eq!(
        m["rcpt_tos"],
        serde_json::json!(["ops@example.com", "lead@example.com"]),
        "{m}"
    );
    let content = m["content"].as_str().unwrap();
    assert!(
        content.contains("Subject: [headless-run] rm asks: rm: remove regular file"),
        "{content}"
    );
    assert!(content.contains("Options: yes, no"), "{content}");
    assert!(
        content.contains(&format!("Decide: https://hr.example:8443/#/approvals/{id}")),
        "{content}"
    );
    // The second mailer trusts another CA: it gives up, and nothing went in clear.
    let stopped = {
        let end = Instant::now() + Duration::from_secs(60);
        loop {
            let log = served.stderr_now();
            if log.contains("given up") || Instant::now() > end {
                break log;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    };
    // Given up on the certificate, the TLS handshake failed: nothing (not the login) went
    // before it.
    assert!(
        stopped.contains("smtp://127.0.0.1:")
            && stopped.contains("given up")
            && stopped.to_lowercase().contains("certificate"),
        "{stopped}"
    );
    assert_eq!(received(&out, |_| true).len(), 1);
    let out = served.stop();
    out.expect_code(0);
    assert!(!out.stderr.contains("mail-s3cret"), "{}", out.stderr);
}

/// A button of the Slack message pressed, as Slack sends it (`tests/fixtures/slack_press.py`,
/// signed with the app's signing secret): its answer.
fn press(url: &str, secret: &str, user: &str, action: &str, value: &str, age: u64) -> Value {
    let out = std::process::Command::new("python3")
        .arg(fixture("slack_press.py"))
        .args([url, secret, user, action, value, &age.to_string()])
        .output()
        .expect("python3");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn slack_buttons_decide_as_the_operator_their_user_is() {
    let env = TestEnv::new();
    crate::serve::token(&env, "alice", "operator");
    crate::serve::token(&env, "wall", "viewer");
    let (rx, slack_url, slack_out) = receiver(&env, "slack", "s3cret-two", false);
    let file = config(
        &env,
        &format!(
            "[[webhooks]]\nurl = \"{slack_url}\"\nformat = \"slack\"\n\n\
             [slack]\nsigning_secret_env = \"HR_SLACK_SIGNING\"\nusers = {{ U0ALICE = \"alice\", U0WALL = \"wall\" }}\n"
        ),
    );
    let file_s = file.to_string_lossy().to_string();
    let served = Served::start_with(
        &env,
        &[
            ("HEADLESS_RUN_CONFIG", &file_s),
            ("HR_SLACK_SIGNING", "slack-signing-s3cret"),
        ],
    );
    for f in ["one", "two"] {
        std::fs::write(env.work().join(f), "x").unwrap();
        env.shim().args(["--", "rm", "-i", f]).run().expect_code(90);
    }
    let posted = received(&slack_out, |l| l.len() >= 2);
    let buttons: Vec<Value> = posted
        .iter()
        .map(|r| r["body"]["blocks"][2]["elements"].clone())
        .collect();
    for b in &buttons {
        assert_eq!(b[0]["action_id"], "hr_approve", "{b}");
        assert_eq!(b[1]["action_id"], "hr_reject", "{b}");
    }
    let value = |i: usize| buttons[i][0]["value"].as_str().unwrap().to_owned();
    let id = |i: usize| value(i).split('~').next().unwrap().to_owned();
    let actions = format!("{}/api/v1/slack/actions", served.url());
    let secret = "slack-signing-s3cret";

    // Not signed with the secret, or too old: 401, nothing decided.
    let r = press(&actions, "wrong", "U0ALICE", "hr_approve", &value(0), 0);
    assert_eq!(r["status"], 401, "{r}");
    let r = press(&actions, secret, "U0ALICE", "hr_approve", &value(0), 600);
    assert_eq!(r["status"], 401, "{r}");
    // A Slack user who is no operator here: told so, nothing decided.
    let r = press(&actions, secret, "U0BOB", "hr_approve", &value(0), 0);
    assert_eq!(r["status"], 200, "{r}");
    assert!(
        r["body"]["text"]
            .as_str()
            .unwrap()
            .contains("not an operator"),
        "{r}"
    );
    let r = press(&actions, secret, "U0WALL", "hr_approve", &value(0), 0);
    assert!(
        r["body"]["text"]
            .as_str()
            .unwrap()
            .contains("no operator token"),
        "{r}"
    );
    let pending = env
        .approvals()
        .into_iter()
        .filter(|a| a["status"] == "pending")
        .count();
    assert_eq!(pending, 2);

    // Alice approves the first and rejects the second, as herself, channel `slack`.
    let r = press(&actions, secret, "U0ALICE", "hr_approve", &value(0), 0);
    assert_eq!(r["status"], 200, "{r}");
    assert_eq!(r["body"]["response_type"], "ephemeral");
    assert!(
        r["body"]["text"]
            .as_str()
            .unwrap()
            .contains("approved by alice"),
        "{r}"
    );
    let r = press(&actions, secret, "U0ALICE", "hr_reject", &value(1), 0);
    assert!(
        r["body"]["text"]
            .as_str()
            .unwrap()
            .contains("rejected by alice"),
        "{r}"
    );
    for (i, status) in [(0, "approved"), (1, "rejected")] {
        let shown = env.monitor().args(["show", &id(i), "--json"]).run();
        let v: Value = serde_json::from_str(&shown.out()).unwrap();
        let a = if v.get("approval").is_some() {
            &v["approval"]
        } else {
            &v
        };
        assert_eq!(a["status"], status, "{a}");
        assert_eq!(a["decided_by"], "alice", "{a}");
        assert_eq!(a["decision_channel"], "slack", "{a}");
    }
    // Pressed again: already decided, said to the one who pressed.
    let r = press(&actions, secret, "U0ALICE", "hr_reject", &value(0), 0);
    assert!(
        r["body"]["text"].as_str().unwrap().contains("not decided"),
        "{r}"
    );
    drop(rx);
    served.stop().expect_code(0);
}

/// What was asked and decided while no server ran is posted when one starts again (the
/// approvals pending at its last look are kept in the state dir); a redirect is a failure,
/// neither followed nor retried.
#[test]
fn a_restarted_server_posts_what_happened_meanwhile_and_follows_no_redirect() {
    let env = TestEnv::new();
    let (rx, url, out) = receiver(&env, "json", "", false);
    let (moved_rx, moved_url, moved_out) = receiver_with(&env, "moved", "", false, true);
    let file = config(
        &env,
        &format!(
            "[[webhooks]]\nurl = \"{url}\"\n\n[[webhooks]]\nurl = \"{moved_url}\"\nretries = 3\n"
        ),
    );
    let file_s = file.to_string_lossy().to_string();
    let start = || Served::start_with(&env, &[("HEADLESS_RUN_CONFIG", &file_s)]);
    let ask = |f: &str| {
        std::fs::write(env.work().join(f), "x").unwrap();
        env.shim().args(["--", "rm", "-i", f]).run().expect_code(90);
        env.approvals()
            .into_iter()
            .rev()
            .find(|a| a["status"] == "pending")
            .and_then(|a| a["approval_id"].as_str().map(str::to_owned))
            .unwrap()
    };
    let served = start();
    let first = ask("first");
    received(&out, |l| {
        l.iter()
            .any(|r| r["body"]["approval"]["approval_id"] == first)
    });
    let known = std::fs::read_to_string(env.state().join("notified.json")).unwrap();
    assert!(known.contains(&first), "{known}");
    served.stop().expect_code(0);

    // Meanwhile: the first decided, a second asked.
    env.decide(&first, "y").expect_code(0);
    let second = ask("second");
    let served = start();
    let posted = received(&out, |l| {
        l.iter()
            .any(|r| r["body"]["approval"]["approval_id"] == second)
            && l.iter().any(|r| {
                r["event"] == "approval_status_change"
                    && r["body"]["approval"]["approval_id"] == first
            })
    });
    assert_eq!(
        posted
            .iter()
            .filter(|r| r["event"] == "approval_needed"
                && r["body"]["approval"]["approval_id"] == first)
            .count(),
        1,
        "the first was asked once, so posted once: {posted:#?}"
    );
    // The redirecting receiver got each delivery once, at its own path: never at /moved.
    let moved = received(&moved_out, |l| l.len() >= 2);
    assert!(moved.iter().all(|r| r["path"] != "/moved"), "{moved:#?}");
    assert!(
        moved.iter().all(|r| r["attempt"] == 1),
        "retried: {moved:#?}"
    );
    let log = served.stop();
    assert!(log.stderr.contains("redirect"), "{}", log.stderr);
    drop((rx, moved_rx));
}
