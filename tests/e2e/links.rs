//! Decision links: `monitor link` signs a short-lived, single-use link to one approval for
//! one operator; the server reads and decides through it (`/api/v1/links/…`) as that
//! operator, once; a link that is not link-only needs that operator's token too; e-mails
//! carry one per mail; the page opens it on a phone-sized Chromium.

use crate::serve::{Served, token};
use crate::webhooks::{Smtp, config, received, smtp};
use headless_run_e2e::*;
use serde_json::Value;
use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

/// A pending `rm -i` approval (exit mode, 90) on `env`'s store: its id.
fn pending_rm(env: &TestEnv, file: &str) -> String {
    std::fs::write(env.work().join(file), "x").unwrap();
    env.shim()
        .args(["--", "rm", "-i", file])
        .run()
        .expect_code(90);
    let list = env.monitor().args(["approvals", "--json"]).run();
    list.expect_code(0);
    let v: Value = serde_json::from_str(&list.out()).unwrap();
    v.as_array()
        .or_else(|| v["approvals"].as_array())
        .unwrap()
        .iter()
        .find(|a| {
            a["question"]
                .as_str()
                .is_some_and(|q| q.contains(&format!("'{file}'")))
        })
        .and_then(|a| a["approval_id"].as_str())
        .unwrap_or_else(|| panic!("no approval for {file}: {}", list.out()))
        .to_owned()
}

/// A mail's text with quoted-printable soft line breaks and `=XX` escapes undone (a long
/// link is wrapped).
fn unfold(content: &str) -> String {
    let joined = content.replace("=\r\n", "").replace("=\n", "");
    let mut out = Vec::new();
    let b = joined.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'='
            && i + 2 < b.len()
            && let Ok(x) = u8::from_str_radix(&joined[i + 1..i + 3], 16)
        {
            out.push(x);
            i += 3;
            continue;
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn link(env: &TestEnv, args: &[&str]) -> String {
    let out = env.monitor().arg("link").args(args).run();
    out.expect_code(0);
    out.out().trim().to_owned()
}

fn get(served: &Served, tok: &str, bearer: Option<&str>) -> (u16, Value) {
    let (st, text) = served.call("GET", &format!("/api/v1/links/{tok}"), bearer, None);
    (st, serde_json::from_str(&text).unwrap_or(Value::Null))
}

fn decide(served: &Served, tok: &str, bearer: Option<&str>, value: &str) -> (u16, Value) {
    let (st, text) = served.call(
        "POST",
        &format!("/api/v1/links/{tok}/decide"),
        bearer,
        Some(&format!("{{\"value\":\"{value}\"}}")),
    );
    (st, serde_json::from_str(&text).unwrap_or(Value::Null))
}

#[test]
fn a_link_decides_once_as_its_operator_and_refuses_everyone_else() {
    let env = TestEnv::new();
    let alice = token(&env, "alice", "operator");
    let bob = token(&env, "bob", "operator");
    token(&env, "carol", "operator");
    token(&env, "wall", "viewer");
    let served = Served::start(&env);
    let first = pending_rm(&env, "one");
    let second = pending_rm(&env, "two");

    // Made on the server's host, for an operator with a token in force, of a pending
    // approval; printed as the page's URL with --base.
    let url = link(
        &env,
        &[
            &first,
            "--operator",
            "alice",
            "--link-only",
            "--base",
            "https://hr.example:8443/",
        ],
    );
    let tok = url
        .strip_prefix("https://hr.example:8443/#/l/")
        .unwrap_or_else(|| panic!("{url}"))
        .to_owned();
    assert!(tok.starts_with(&format!("v1~{first}~alice~")), "{tok}");
    for (args, code) in [
        (vec![first.as_str(), "--operator", "wall"], 2),
        (vec![first.as_str(), "--operator", "nobody"], 2),
        (
            vec!["AP-01ZZZZZZZZZZZZZZZZZZZZZZZZ", "--operator", "alice"],
            4,
        ),
        (
            vec![first.as_str(), "--operator", "alice", "--expires", "8d"],
            2,
        ),
        (
            vec![
                first.as_str(),
                "--operator",
                "alice",
                "--base",
                "hr.example",
            ],
            2,
        ),
    ] {
        let out = env.monitor().arg("link").args(&args).run();
        assert_eq!(out.code(), code, "{args:?}: {}", out.context());
    }
    let remote = env
        .monitor()
        .args([
            "--server",
            &served.url(),
            "link",
            &first,
            "--operator",
            "alice",
        ])
        .run();
    assert_eq!(remote.code(), 2, "{}", remote.context());
    // The key is the server's, 0600.
    let mode = std::fs::metadata(env.state().join("link.key"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);

    // Read without a login: the link and its approval.
    let (st, v) = get(&served, &tok, None);
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["link"]["operator"], "alice");
    assert_eq!(v["link"]["link_only"], true);
    assert_eq!(v["approval"]["approval_id"], first.as_str());
    // A changed character is no link; nothing is said about why.
    let forged = tok.replace("~alice~", "~bob~");
    assert_eq!(get(&served, &forged, None).0, 404);
    assert_eq!(decide(&served, &forged, None, "y").0, 404);
    assert_eq!(get(&served, "v1~garbage", None).0, 404);

    // Decided through it, as alice, channel `link`; then it is spent.
    let (st, v) = decide(&served, &tok, None, "y");
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["status"], "approved");
    assert_eq!(v["decided_by"], "alice");
    assert_eq!(v["decision_channel"], "link");
    let (st, v) = decide(&served, &tok, None, "y");
    assert_eq!(st, 410, "{v}");
    assert!(v["error"].as_str().unwrap().contains("used"), "{v}");
    assert_eq!(get(&served, &tok, None).0, 410);
    let used = env.state().join("links-used");
    assert_eq!(
        std::fs::metadata(&used).unwrap().permissions().mode() & 0o777,
        0o600
    );

    // A link that needs its operator's login: none → 401, another operator's → 403,
    // bob's → decided as bob.
    let tok2 = link(&env, &[&second, "--operator", "bob"]);
    assert_eq!(get(&served, &tok2, None).0, 401);
    let (st, v) = get(&served, &tok2, Some(&alice));
    assert_eq!(st, 403, "{v}");
    assert!(v["error"].as_str().unwrap().contains("for bob"), "{v}");
    assert_eq!(decide(&served, &tok2, Some(&alice), "reject").0, 403);
    assert_eq!(get(&served, &tok2, Some(&bob)).0, 200);
    let (st, v) = decide(&served, &tok2, Some(&bob), "reject");
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["status"], "rejected");
    assert_eq!(v["decided_by"], "bob");

    // Ended: refused as ended.
    let third = pending_rm(&env, "three");
    let short = link(
        &env,
        &[
            &third,
            "--operator",
            "alice",
            "--link-only",
            "--expires",
            "1s",
        ],
    );
    std::thread::sleep(Duration::from_millis(2100));
    let (st, v) = decide(&served, &short, None, "y");
    assert_eq!(st, 410, "{v}");
    assert!(v["error"].as_str().unwrap().contains("ended"), "{v}");
    // Its operator's token revoked: the link decides nothing.
    let carols = link(&env, &[&third, "--operator", "carol", "--link-only"]);
    env.monitor()
        .args(["token", "revoke", "carol"])
        .run()
        .expect_code(0);
    let (st, v) = decide(&served, &carols, None, "y");
    assert_eq!(st, 403, "{v}");
    let shown = env.monitor().args(["show", &third, "--json"]).run();
    assert!(shown.out().contains("\"pending\""), "{}", shown.out());
    // A link to an approval already decided: the store says so.
    let late = link(&env, &[&third, "--operator", "alice", "--link-only"]);
    env.monitor()
        .args(["decide", &third, "n"])
        .run()
        .expect_code(0);
    let (st, v) = decide(&served, &late, None, "y");
    assert_eq!(st, 409, "{v}");
    served.stop().expect_code(0);
}

#[test]
fn a_mail_carries_a_link_for_its_operator_that_decides_once() {
    let env = TestEnv::new();
    token(&env, "alice", "operator");
    let Smtp {
        _server,
        port,
        out,
        ca,
        ..
    } = smtp(&env);
    let file = config(
        &env,
        &format!(
            "[[email]]\nto = [\"alice@example.com\"]\nfrom = \"hr@example.com\"\n\
             smtp = \"smtp://127.0.0.1:{port}\"\nusername_env = \"HR_SMTP_USER\"\npassword_env = \"HR_SMTP_PASSWORD\"\n\
             ca = \"{}\"\nlink = \"https://hr.example:8443\"\noperator = \"alice\"\nlink_only = true\nlink_expires = \"20m\"\n",
            ca.display()
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
    let id = pending_rm(&env, "mailed");
    let mail = received(&out, |l| !l.is_empty());
    let content = unfold(mail[0]["content"].as_str().unwrap());
    let url = content
        .lines()
        .find_map(|l| l.strip_prefix("Decide: "))
        .unwrap_or_else(|| panic!("{content}"))
        .trim();
    let tok = url
        .strip_prefix("https://hr.example:8443/#/l/")
        .unwrap_or_else(|| panic!("{url}"));
    assert!(tok.starts_with(&format!("v1~{id}~alice~")), "{tok}");
    let (st, v) = decide(&served, tok, None, "y");
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["decided_by"], "alice");
    assert_eq!(decide(&served, tok, None, "y").0, 410);
    served.stop().expect_code(0);

    // An operator without a link to point at, or link_only without an operator: refused
    // before the server listens.
    for bad in [
        "[[email]]\nto = [\"a@example.com\"]\nfrom = \"hr@example.com\"\nsmtp = \"smtps://127.0.0.1:1\"\noperator = \"alice\"\n",
        "[[email]]\nto = [\"a@example.com\"]\nfrom = \"hr@example.com\"\nsmtp = \"smtps://127.0.0.1:1\"\nlink = \"https://x\"\nlink_only = true\n",
    ] {
        let f = config(&env, bad);
        let out = env
            .monitor()
            .env("HEADLESS_RUN_CONFIG", &f)
            .args(["serve", "--listen", "127.0.0.1:0"])
            .timeout(Duration::from_secs(30))
            .run();
        assert_eq!(out.code(), 2, "{}", out.context());
        assert!(out.stderr.contains("email:"), "{}", out.stderr);
    }
}

#[test]
fn a_link_opens_one_approval_on_a_phone_and_decides_it_once() {
    let node = need("node", "nodejs");
    let modules = playwright_dir();
    let chromium = chromium_bin();
    let env = TestEnv::new();
    let bob = token(&env, "bob", "operator");
    token(&env, "alice", "operator");
    let served = Served::start(&env);
    let first = pending_rm(&env, "phone");
    let second = pending_rm(&env, "desk");
    let base = served.url();
    let only = link(
        &env,
        &[
            &first,
            "--operator",
            "alice",
            "--link-only",
            "--base",
            &base,
        ],
    );
    let login = link(&env, &[&second, "--operator", "bob", "--base", &base]);
    let driver = modules.join("link.mjs");
    std::fs::copy(fixture("web/link.mjs"), &driver).unwrap();
    let shot = env.path().join("link.png");
    let out = env
        .command(&node)
        .arg(&driver)
        .env("CHROMIUM", &chromium)
        .env("PROFILE", env.path().join("chromium-profile"))
        .env("SCREENSHOT", &shot)
        .env("LINK", &only)
        .env("LOGIN_LINK", &login)
        .env("TOKEN", &bob)
        .env("QUESTION", "remove regular file 'phone'")
        .timeout(Duration::from_secs(120))
        .run();
    assert_eq!(out.code(), 0, "{}", out.context());
    let said: Vec<Value> = out
        .out()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let find = |key: &str| {
        said.iter()
            .find_map(|v| v.get(key).cloned())
            .unwrap_or_else(|| panic!("no {key} in {said:?}"))
    };
    assert!(
        find("note")
            .as_str()
            .unwrap()
            .contains("For alice (this link decides by itself)"),
        "{said:?}"
    );
    assert_eq!(find("login_shown"), false, "{said:?}");
    assert!(
        find("overflow").as_i64().unwrap() <= 0,
        "wider than the phone: {said:?}"
    );
    assert!(
        find("decided").as_str().unwrap().starts_with("approved"),
        "{said:?}"
    );
    assert!(find("again").as_str().unwrap().contains("used"), "{said:?}");
    assert!(
        find("login_note")
            .as_str()
            .unwrap()
            .contains("needs its operator's login"),
        "{said:?}"
    );
    assert!(
        find("after_login").as_str().unwrap().contains("For bob"),
        "{said:?}"
    );
    assert_eq!(find("errors"), serde_json::json!([]), "{said:?}");
    assert!(std::fs::metadata(&shot).unwrap().len() > 1000);
    let shown = env.monitor().args(["show", &first, "--json"]).run();
    assert!(
        shown.out().contains("\"decision_channel\": \"link\"")
            || shown.out().contains("\"decision_channel\":\"link\""),
        "{}",
        shown.out()
    );
    served.stop().expect_code(0);
}
