//! `monitor serve` under hostile clients, against the real binary: a revoked or expired
//! token's open stream and long poll end; failed authentications hold off bad tokens, never
//! a good one; slow and silent clients are cut off; connections beyond the cap are refused
//! and the server goes on; a token holds at most its streams; plain HTTP off loopback and a
//! TLS key others may read are refused. Every bound asserted is a generous functional one
//! (the thing ends at all, well before the client would have ended it), not a speed.

use crate::serve::{Served, open_stream, read_until, token};
use headless_run_e2e::*;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

/// Reads until the server closes the connection (EOF or a reset) and returns what came;
/// panics if it is still open after `limit`.
fn read_to_close(stream: &mut TcpStream, got: &mut String, limit: Duration) {
    stream
        .set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let end = Instant::now() + limit;
    let mut buf = [0u8; 8192];
    loop {
        assert!(
            Instant::now() < end,
            "the server kept the connection open: {got}"
        );
        match stream.read(&mut buf) {
            Ok(0) => return,
            Ok(n) => got.push_str(&String::from_utf8_lossy(&buf[..n])),
            Err(e)
                if e.kind() == std::io::ErrorKind::WouldBlock
                    || e.kind() == std::io::ErrorKind::TimedOut => {}
            Err(_) => return, // reset: closed too
        }
    }
}

/// A stream opened with `token`, its answer's head read: the status line and headers.
fn stream_head(port: u16, token: &str) -> (TcpStream, String) {
    let mut s = open_stream(port, token, None);
    let mut got = String::new();
    read_until(&mut s, &mut got, "\r\n\r\n", Duration::from_secs(10));
    (s, got)
}

/// `GET PATH` on a kept-alive connection: the status and body of one answer.
fn keep_alive_get(s: &mut TcpStream, path: &str) -> Option<(u16, String)> {
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: localhost\r\n\r\n").as_bytes())
        .ok()?;
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let text = String::from_utf8_lossy(&got).into_owned();
        if let Some((head, body)) = text.split_once("\r\n\r\n") {
            let len: usize = head
                .lines()
                .find_map(|l| {
                    l.to_ascii_lowercase()
                        .strip_prefix("content-length:")
                        .map(|v| v.trim().parse().unwrap_or(0))
                })
                .unwrap_or(0);
            if body.len() >= len {
                let status = head.split(' ').nth(1)?.parse().ok()?;
                return Some((status, body.to_owned()));
            }
        }
        match s.read(&mut buf) {
            Ok(0) | Err(_) => return None,
            Ok(n) => got.extend_from_slice(&buf[..n]),
        }
    }
}

#[test]
fn a_revoked_tokens_open_stream_and_long_poll_end_and_other_tokens_go_on() {
    let env = TestEnv::new();
    let doomed = token(&env, "doomed", "viewer");
    let other = token(&env, "other", "viewer");
    // Two places a token: its stream and its long poll fill them, which shows when the
    // long poll is waiting.
    let served = Served::start_args(&env, &[], &["--max-streams-per-token", "2"]);
    let (mut stream, head) = stream_head(served.port, &doomed);
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    let (mut kept, head) = stream_head(served.port, &other);
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    // A long poll held open up to a minute on the current mark.
    let (st, v) = served.json("GET", "/api/v1/mark", &doomed, None);
    assert_eq!(st, 200, "{v}");
    let path = format!("/api/v1/mark?after={}&wait=60", v["mark"]);
    let poll = {
        let (port, doomed) = (served.port, doomed.clone());
        std::thread::spawn(move || {
            loop {
                let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
                let req = format!(
                    "GET {path} HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer {doomed}\r\nConnection: close\r\n\r\n"
                );
                s.write_all(req.as_bytes()).unwrap();
                let started = Instant::now();
                let mut got = String::new();
                read_to_close(&mut s, &mut got, Duration::from_secs(90));
                // Refused while the probe below held the place: asked again.
                if !got.starts_with("HTTP/1.1 429") {
                    return (got, started.elapsed());
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        })
    };
    // Waiting once a probe finds the token's places full: the probes come one after the
    // other, and one that finds a place holds it a second and gives it back.
    let probe = format!("/api/v1/mark?after={}&wait=1", v["mark"]);
    assert!(
        wait_until(Duration::from_secs(30), || served
            .json("GET", &probe, &doomed, None)
            .0
            == 429),
        "the long poll never waited"
    );

    env.monitor()
        .args(["token", "revoke", "doomed"])
        .run()
        .expect_code(0);
    // The stream says why and ends, its connection closed, well before any client timeout.
    let mut got = head;
    read_to_close(&mut stream, &mut got, Duration::from_secs(10));
    assert!(got.contains("event: token_ended"), "{got}");
    assert!(got.contains("revoked or has expired"), "{got}");
    // The long poll is answered 401 long before its minute is up.
    let (answer, took) = poll.join().unwrap();
    assert!(answer.starts_with("HTTP/1.1 401"), "{answer}");
    assert!(answer.contains("revoked or expired while"), "{answer}");
    assert!(took < Duration::from_secs(30), "{took:?}: {answer}");
    // A new request with it is refused; the other token's stream is still open and served.
    assert_eq!(
        served.call("GET", "/api/v1/events", Some(&doomed), None).0,
        401
    );
    let (st, _) = served.json("GET", "/api/v1/approvals", &other, None);
    assert_eq!(st, 200);
    kept.set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    let mut buf = [0u8; 64];
    assert!(
        !matches!(kept.read(&mut buf), Ok(0)),
        "the other token's stream was ended"
    );
    served.stop().expect_code(0);
}

#[test]
fn an_expired_tokens_open_stream_ends() {
    let env = TestEnv::new();
    let served = Served::start(&env);
    // Long enough to open the stream in; it then expires while the stream is open.
    let out = env
        .monitor()
        .args([
            "token",
            "create",
            "brief",
            "--role",
            "viewer",
            "--expires",
            "5s",
        ])
        .run();
    out.expect_code(0);
    let brief = out.out().trim().to_owned();
    let (mut stream, head) = stream_head(served.port, &brief);
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    let mut got = head;
    read_to_close(&mut stream, &mut got, Duration::from_secs(60));
    assert!(got.contains("event: token_ended"), "{got}");
    assert_eq!(
        served.call("GET", "/api/v1/events", Some(&brief), None).0,
        401
    );
    served.stop().expect_code(0);
}

#[test]
fn failed_authentications_hold_off_bad_tokens_but_never_a_valid_one() {
    let env = TestEnv::new();
    let op = token(&env, "alice", "operator");
    let served = Served::start(&env);
    let codes: Vec<u16> = (0..12)
        .map(|_| {
            served
                .call("GET", "/api/v1/runs", Some("hrt_guess"), None)
                .0
        })
        .collect();
    assert_eq!(&codes[..10], &[401; 10], "{codes:?}");
    assert_eq!(&codes[10..], &[429, 429], "{codes:?}");
    // Held off: bad and missing tokens get 429 naming the limit; a good one is served,
    // before and after them.
    assert_eq!(served.call("GET", "/api/v1/runs", Some(&op), None).0, 200);
    let (st, body) = served.call("GET", "/api/v1/runs", Some("hrt_other_guess"), None);
    assert_eq!(st, 429, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert!(
        v["error"].as_str().unwrap().contains("--auth-failures"),
        "{v}"
    );
    assert_eq!(served.call("GET", "/api/v1/runs", None, None).0, 429);
    assert_eq!(
        served.call("GET", "/api/v1/approvals", Some(&op), None).0,
        200
    );
    let (st, _) = served.json("GET", "/api/v1/mark", &op, None);
    assert_eq!(st, 200);
    let (stream, head) = stream_head(served.port, &op);
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    drop(stream);
    served.stop().expect_code(0);
}

#[test]
fn slow_and_silent_clients_are_cut_off_at_the_header_timeout() {
    let env = TestEnv::new();
    let served = Served::start_args(&env, &[], &["--header-timeout", "2s"]);
    // Silent: connects and sends nothing.
    let mut silent = TcpStream::connect(("127.0.0.1", served.port)).unwrap();
    let mut got = String::new();
    read_to_close(&mut silent, &mut got, Duration::from_secs(30));
    // Slow: a header line every 300 ms, for a minute if it is let.
    let mut slow = TcpStream::connect(("127.0.0.1", served.port)).unwrap();
    slow.write_all(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n")
        .unwrap();
    let mut writer = slow.try_clone().unwrap();
    let dripping = std::thread::spawn(move || {
        let end = Instant::now() + Duration::from_secs(60);
        let mut n = 0;
        while Instant::now() < end {
            n += 1;
            if writer
                .write_all(format!("X-Slow-{n}: y\r\n").as_bytes())
                .is_err()
            {
                return true; // the server closed it
            }
            std::thread::sleep(Duration::from_millis(300));
        }
        false
    });
    let mut got = String::new();
    read_to_close(&mut slow, &mut got, Duration::from_secs(30));
    assert!(!got.contains("200 OK"), "{got}");
    assert!(
        dripping.join().unwrap(),
        "the slow client was never cut off"
    );
    // A client that sends its request in time is served as ever; its connection, left
    // idle after the answer, is closed the same way.
    let mut idle = TcpStream::connect(("127.0.0.1", served.port)).unwrap();
    assert_eq!(
        keep_alive_get(&mut idle, "/healthz").map(|a| a.0),
        Some(200)
    );
    let mut got = String::new();
    read_to_close(&mut idle, &mut got, Duration::from_secs(30));
    assert!(got.is_empty(), "{got}");
    assert_eq!(served.call("GET", "/healthz", None, None).0, 200);
    served.stop().expect_code(0);
}

#[test]
fn connections_beyond_the_cap_are_refused_and_the_server_goes_on() {
    let env = TestEnv::new();
    let viewer = token(&env, "screen", "viewer");
    let served = Served::start_args(
        &env,
        &[],
        &["--max-connections", "2", "--header-timeout", "120s"],
    );
    // Two kept-alive connections, each with an answered request: both hold their place
    // (one refused because the start-up probe still held its place is tried again).
    let hold = || {
        let mut held = None;
        assert!(wait_until(Duration::from_secs(10), || {
            let mut s = TcpStream::connect(("127.0.0.1", served.port)).unwrap();
            match keep_alive_get(&mut s, "/healthz") {
                Some((200, _)) => {
                    held = Some(s);
                    true
                }
                _ => false,
            }
        }));
        held.unwrap()
    };
    let (first, second) = (hold(), hold());
    // One more: 503 naming the cap, or closed; never served, never left hanging.
    let mut extra = TcpStream::connect(("127.0.0.1", served.port)).unwrap();
    let _ = extra.write_all(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n");
    let mut got = String::new();
    read_to_close(&mut extra, &mut got, Duration::from_secs(10));
    assert!(!got.contains("200 OK"), "{got}");
    if !got.is_empty() {
        assert!(got.starts_with("HTTP/1.1 503"), "{got}");
        assert!(got.contains("--max-connections"), "{got}");
    }
    // The held connections are still served.
    let mut first = first;
    assert_eq!(
        keep_alive_get(&mut first, "/healthz").map(|a| a.0),
        Some(200)
    );
    // Once they close, others are served again, and the refusal was counted.
    drop((first, second));
    assert!(wait_until(Duration::from_secs(10), || {
        TcpStream::connect(("127.0.0.1", served.port))
            .ok()
            .and_then(|mut s| keep_alive_get(&mut s, "/healthz"))
            .is_some_and(|(st, _)| st == 200)
    }));
    let (st, metrics) = served.call("GET", "/metrics", Some(&viewer), None);
    assert_eq!(st, 200, "{metrics}");
    let refused: u64 = metrics
        .lines()
        .find_map(|l| l.strip_prefix("headless_run_connections_refused_total "))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("{metrics}"));
    assert!(refused >= 1, "{metrics}");
    let out = served.stop();
    out.expect_code(0);
    assert!(
        out.stderr.contains("refusing connections"),
        "{}",
        out.stderr
    );
}

#[test]
fn a_token_holds_at_most_its_streams_and_other_tokens_are_unaffected() {
    let env = TestEnv::new();
    let greedy = token(&env, "greedy", "viewer");
    let other = token(&env, "other", "viewer");
    let served = Served::start_args(&env, &[], &["--max-streams-per-token", "2"]);
    let (a, head) = stream_head(served.port, &greedy);
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    let (_b, head) = stream_head(served.port, &greedy);
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    // A third stream, and a long poll that would wait: 429 naming the cap.
    let (st, v) = served.json("GET", "/api/v1/events", &greedy, None);
    assert_eq!(st, 429, "{v}");
    assert_eq!(v["limit"], 2, "{v}");
    assert!(
        v["error"]
            .as_str()
            .unwrap()
            .contains("--max-streams-per-token 2"),
        "{v}"
    );
    let (_, mark) = served.json("GET", "/api/v1/mark", &greedy, None);
    let (st, v) = served.json(
        "GET",
        &format!("/api/v1/mark?after={}&wait=30", mark["mark"]),
        &greedy,
        None,
    );
    assert_eq!(st, 429, "{v}");
    // Requests that hold nothing are served as ever; another token streams.
    assert_eq!(served.json("GET", "/api/v1/runs", &greedy, None).0, 200);
    assert_eq!(served.json("GET", "/api/v1/mark", &greedy, None).0, 200);
    let (_c, head) = stream_head(served.port, &other);
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    // A stream whose client went away gives its place back (the server learns of it at
    // its next write: a keep-alive comment every few seconds).
    drop(a);
    assert!(
        wait_until_every(Duration::from_secs(60), Duration::from_millis(500), || {
            stream_head(served.port, &greedy)
                .1
                .starts_with("HTTP/1.1 200")
        }),
        "the place of a closed stream never came back"
    );
    served.stop().expect_code(0);
}

#[test]
fn plain_http_off_loopback_is_refused_unless_the_risk_is_taken() {
    let env = TestEnv::new();
    for listen in ["0.0.0.0:0", "[::]:0"] {
        let out = env.monitor().args(["serve", "--listen", listen]).run();
        out.expect_code(2);
        assert!(
            out.stderr.contains("--insecure-plain-http"),
            "{}",
            out.stderr
        );
        assert!(out.stderr.contains("in clear"), "{}", out.stderr);
        assert!(!out.stderr.contains("listening"), "{}", out.stderr);
    }
    let served = Served::start_on(&env, "0.0.0.0", &[], &["--insecure-plain-http"]);
    assert_eq!(served.call("GET", "/healthz", None, None).0, 200);
    served.stop().expect_code(0);
}

#[test]
fn a_tls_key_others_may_read_is_refused_and_a_private_one_serves_even_through_a_link() {
    use std::os::unix::fs::PermissionsExt;
    let curl = need("curl", "curl");
    let env = TestEnv::new();
    let [ca, cert, key, _] = crate::postgres::certificates(env.path());
    let serve = |key: &std::path::Path| {
        env.monitor()
            .args(["serve", "--listen", "127.0.0.1:0", "--tls-cert"])
            .arg(&cert)
            .arg("--tls-key")
            .arg(key)
            .run()
    };
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644)).unwrap();
    let out = serve(&key);
    out.expect_code(2);
    assert!(
        out.stderr.contains("mode 644") && out.stderr.contains("chmod 600"),
        "{}",
        out.stderr
    );
    // A link to it (certbot's live/…/privkey.pem) is checked at its end: still refused.
    let link = env.path().join("link.key");
    std::os::unix::fs::symlink(&key, &link).unwrap();
    let out = serve(&link);
    out.expect_code(2);
    assert!(out.stderr.contains("mode 644"), "{}", out.stderr);
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
    let out = serve(env.path());
    out.expect_code(2);
    assert!(out.stderr.contains("not a regular file"), "{}", out.stderr);

    // 0600 serves, on any address (TLS makes it safe), and a client silent in its
    // handshake is cut off.
    let (cert, key) = (cert.display().to_string(), link.display().to_string());
    let served = Served::start_on(
        &env,
        "0.0.0.0",
        &[],
        &[
            "--tls-cert",
            &cert,
            "--tls-key",
            &key,
            "--header-timeout",
            "2s",
        ],
    );
    let health = env
        .command(&curl)
        .args(["-sS", "--max-time", "10", "--cacert"])
        .arg(&ca)
        .arg(format!("https://127.0.0.1:{}/healthz", served.port))
        .run();
    health.expect_code(0);
    assert_eq!(health.out(), "ok\n");
    let mut silent = TcpStream::connect(("127.0.0.1", served.port)).unwrap();
    let mut got = String::new();
    read_to_close(&mut silent, &mut got, Duration::from_secs(30));
    served.stop().expect_code(0);
}
