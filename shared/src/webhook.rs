//! Webhooks: what `monitor serve` posts when an approval is asked or decided, and how a
//! receiver knows it came from here. Pure: the bodies and the signature; sending and
//! retrying are the server's.
//!
//! **Signature.** With a secret, each attempt carries
//! `X-Headless-Run-Signature: t=UNIX,v1=HEX`, where HEX is HMAC-SHA-256 under the secret of
//! `UNIX.BODY` (the timestamp, a dot, the exact body bytes). A receiver recomputes it,
//! compares in constant time, and refuses a timestamp older than a few minutes (a
//! replayed request); `X-Headless-Run-Delivery` (the same on every retry of one delivery)
//! lets it drop a delivery it already took. [`verify`] is that check.

use crate::approvals::Approval;
use crate::sanitize::{clip, sanitize_line};
use hmac::{KeyInit, Mac};
use serde_json::{Value, json};

type HmacSha256 = hmac::Hmac<sha2::Sha256>;

/// The signature header's name.
pub const SIGNATURE_HEADER: &str = "X-Headless-Run-Signature";
/// The delivery id's header: one per approval and event, the same on each retry.
pub const DELIVERY_HEADER: &str = "X-Headless-Run-Delivery";
/// The event's header (`approval_needed`, `approval_status_change`).
pub const EVENT_HEADER: &str = "X-Headless-Run-Event";
/// How old a signed timestamp [`verify`] takes by default.
pub const TOLERANCE_SECS: u64 = 300;

/// What happened to the approval.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// Asked: waiting for a decision.
    Pending,
    /// Decided (approved, rejected), expired, or withdrawn: no longer waiting.
    Decided,
}

impl Event {
    /// Its name: the log's event of the same fact (DESIGN's `approval_needed`,
    /// `approval_status_change`).
    pub fn as_str(self) -> &'static str {
        match self {
            Event::Pending => "approval_needed",
            Event::Decided => "approval_status_change",
        }
    }
}

/// The id of one delivery: the approval and the status it reports.
pub fn delivery_id(a: &Approval) -> String {
    format!("{}:{}", a.approval_id, a.status)
}

/// The link to the approval on the web page, when the server's public URL is known.
pub fn approval_link(base: Option<&str>, a: &Approval) -> Option<String> {
    base.map(|b| format!("{}/#/approvals/{}", b.trim_end_matches('/'), a.approval_id))
}

/// The JSON body: the event, its delivery id, when it was sent, the approval row, and the
/// link to it.
pub fn json_body(event: Event, a: &Approval, link: Option<&str>, sent_at: &str) -> Value {
    json!({
        "event": event.as_str(),
        "delivery": delivery_id(a),
        "sent_at": sent_at,
        "approval": a,
        "link": link,
    })
}

/// A Slack-compatible message (an incoming webhook's `text` and `blocks`): the question,
/// the tool and run as context, the options, and a button to the approval when the link is
/// known. What the tool wrote is stripped of control characters and shown as plain text in
/// the blocks; in `text` (the notification, which Slack reads as markup) `&`, `<` and `>`
/// are escaped, so a question cannot mention `<!channel>` or make a link.
///
/// With `buttons` (the server takes Slack's interactions: `[slack]`), a pending approval
/// also gets Approve and Reject buttons, whose value names the approval and the version
/// shown ([`slack_action_value`]); Approve asks to confirm.
pub fn slack_body(event: Event, a: &Approval, link: Option<&str>, buttons: bool) -> Value {
    let tool = sanitize_line(&a.tool_name);
    let question = sanitize_line(&a.question);
    let what = match event {
        Event::Pending => format!("{tool} asks: {question}"),
        Event::Decided => format!(
            "{} was {}{}: {}",
            a.approval_id,
            a.status,
            a.decided_by
                .as_deref()
                .map(|b| format!(" by {}", sanitize_line(b)))
                .unwrap_or_default(),
            question
        ),
    };
    let mut context = format!("{} · run {}", a.approval_id, a.tool_run_id);
    if event == Event::Pending && !a.options_json.is_empty() {
        let values: Vec<String> = a
            .options_json
            .iter()
            .map(|o| sanitize_line(&o.value))
            .collect();
        context.push_str(&format!(" · options: {}", values.join(", ")));
    }
    let mut blocks = vec![
        json!({"type": "section", "text": {"type": "plain_text", "text": clip(&what, 2900)}}),
        json!({"type": "context", "elements": [{"type": "plain_text", "text": clip(&context, 2000)}]}),
    ];
    let mut elements = Vec::new();
    if event == Event::Pending && buttons {
        let value = slack_action_value(a);
        elements.push(json!({
            "type": "button",
            "text": {"type": "plain_text", "text": "Approve"},
            "style": "primary",
            "action_id": SLACK_APPROVE,
            "value": value,
            "confirm": {
                "title": {"type": "plain_text", "text": "Approve?"},
                "text": {"type": "plain_text", "text": clip(&what, 290)},
                "confirm": {"type": "plain_text", "text": "Approve"},
                "deny": {"type": "plain_text", "text": "Cancel"},
            },
        }));
        elements.push(json!({
            "type": "button",
            "text": {"type": "plain_text", "text": "Reject"},
            "style": "danger",
            "action_id": SLACK_REJECT,
            "value": value,
        }));
    }
    if let (Event::Pending, Some(url)) = (event, link) {
        elements.push(json!({
            "type": "button",
            "text": {"type": "plain_text", "text": "Open to decide"},
            "url": url,
            "action_id": "open",
        }));
    }
    if !elements.is_empty() {
        blocks.push(json!({"type": "actions", "elements": elements}));
    }
    json!({ "text": slack_escape(&clip(&what, 3000)), "blocks": blocks })
}

/// The `action_id` of the Approve button.
pub const SLACK_APPROVE: &str = "hr_approve";
/// The `action_id` of the Reject button.
pub const SLACK_REJECT: &str = "hr_reject";

/// A button's value: the approval and the version shown (`AP-…~VERSION`).
pub fn slack_action_value(a: &Approval) -> String {
    format!("{}~{}", a.approval_id, a.version().unwrap_or(""))
}

/// What a Slack interaction asks: the Slack user, the decision (`approve` or `reject`),
/// the approval and the version its message showed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlackAction {
    pub user_id: String,
    pub value: &'static str,
    pub approval_id: String,
    pub version: Option<String>,
}

/// Why a Slack request is refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SlackRefused {
    /// Not signed with the signing secret, or too old (a replay): 401.
    Unsigned,
    /// Signed, but not one of our buttons' interactions: 400, saying what.
    NotOurs(String),
}

/// Checks a Slack request (`X-Slack-Request-Timestamp`, `X-Slack-Signature: v0=HEX`, the
/// exact body) the way Slack documents it — HMAC-SHA-256 under the signing secret of
/// `v0:TIMESTAMP:BODY`, and a timestamp within five minutes of `now` — then reads the
/// button that was pressed from its `payload`.
pub fn slack_action(
    secret: &[u8],
    timestamp: &str,
    signature: &str,
    body: &[u8],
    now: u64,
) -> Result<SlackAction, SlackRefused> {
    let ts: u64 = timestamp
        .trim()
        .parse()
        .map_err(|_| SlackRefused::Unsigned)?;
    if now.abs_diff(ts) > 300 {
        return Err(SlackRefused::Unsigned);
    }
    let sig = signature
        .trim()
        .strip_prefix("v0=")
        .and_then(unhex)
        .ok_or(SlackRefused::Unsigned)?;
    let mut m = <HmacSha256 as KeyInit>::new_from_slice(secret).expect("HMAC takes any key");
    m.update(format!("v0:{ts}:").as_bytes());
    m.update(body);
    m.verify_slice(&sig).map_err(|_| SlackRefused::Unsigned)?;
    let not_ours = |why: &str| SlackRefused::NotOurs(why.to_owned());
    let text = std::str::from_utf8(body).map_err(|_| not_ours("the body is not text"))?;
    let payload = text
        .split('&')
        .find_map(|kv| kv.strip_prefix("payload="))
        .map(form_decode)
        .ok_or_else(|| not_ours("no payload"))?;
    let v: Value =
        serde_json::from_str(&payload).map_err(|_| not_ours("the payload is not JSON"))?;
    if v["type"] != "block_actions" {
        return Err(not_ours("not a button's action"));
    }
    let user_id = v["user"]["id"]
        .as_str()
        .filter(|u| !u.is_empty())
        .ok_or_else(|| not_ours("no user"))?
        .to_owned();
    let action = &v["actions"][0];
    let value = match action["action_id"].as_str() {
        Some(SLACK_APPROVE) => "approve",
        Some(SLACK_REJECT) => "reject",
        _ => return Err(not_ours("not one of our buttons")),
    };
    let (id, version) = action["value"]
        .as_str()
        .and_then(|v| v.split_once('~'))
        .ok_or_else(|| not_ours("no approval in the button"))?;
    Ok(SlackAction {
        user_id,
        value,
        approval_id: id.to_owned(),
        version: (!version.is_empty()).then(|| version.to_owned()),
    })
}

/// `application/x-www-form-urlencoded` text decoded: `+` is a space, `%XX` a byte.
fn form_decode(s: &str) -> String {
    let hex = |c: u8| (c as char).to_digit(16).map(|d| d as u8);
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < b.len() => match (hex(b[i + 1]), hex(b[i + 2])) {
                (Some(h), Some(l)) => {
                    out.push(h * 16 + l);
                    i += 3;
                    continue;
                }
                _ => out.push(b'%'),
            },
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Text Slack reads as markup (`mrkdwn`), made inert: its three control characters escaped.
fn slack_escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// The signature header's value for `body` sent at `unix` under `secret`.
pub fn sign(secret: &[u8], unix: u64, body: &[u8]) -> String {
    let sig = mac(secret, unix, body).finalize().into_bytes();
    format!("t={unix},v1={}", crate::audit::hex(&sig))
}

/// The HMAC of `unix.body` under `secret`, not yet finished.
fn mac(secret: &[u8], unix: u64, body: &[u8]) -> HmacSha256 {
    let mut m = <HmacSha256 as KeyInit>::new_from_slice(secret).expect("HMAC takes any key");
    m.update(unix.to_string().as_bytes());
    m.update(b".");
    m.update(body);
    m
}

/// Why a signed request is refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refused {
    /// The header is missing or not `t=…,v1=…`.
    Malformed,
    /// Signed more than the tolerance before (or after) `now`: a replay, or a clock off.
    Stale,
    /// The signature is not this body's under this secret.
    Forged,
}

/// Checks a received request: its signature header, its exact body, the receiver's clock
/// (`now`, UNIX seconds) and how old a request it takes.
pub fn verify(
    secret: &[u8],
    header: &str,
    body: &[u8],
    now: u64,
    tolerance: u64,
) -> Result<(), Refused> {
    let mut unix = None;
    let mut sig = None;
    for part in header.split(',') {
        match part.trim().split_once('=') {
            Some(("t", v)) => unix = v.parse::<u64>().ok(),
            Some(("v1", v)) => sig = unhex(v),
            _ => {}
        }
    }
    let (Some(unix), Some(sig)) = (unix, sig) else {
        return Err(Refused::Malformed);
    };
    if now.abs_diff(unix) > tolerance {
        return Err(Refused::Stale);
    }
    mac(secret, unix, body)
        .verify_slice(&sig)
        .map_err(|_| Refused::Forged)
}

pub(crate) fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 4231's test case 2: the MAC is HMAC-SHA-256 as specified.
    #[test]
    fn the_mac_is_hmac_sha256() {
        let mut m = <HmacSha256 as KeyInit>::new_from_slice(b"Jefe").unwrap();
        m.update(b"what do ya want for nothing?");
        assert_eq!(
            crate::audit::hex(&m.finalize().into_bytes()),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }

    #[test]
    fn a_signature_holds_for_its_body_its_time_and_its_secret_only() {
        let body = br#"{"event":"approval_needed"}"#;
        let header = sign(b"s3cret", 1_800_000_000, body);
        assert!(header.starts_with("t=1800000000,v1="), "{header}");
        assert_eq!(verify(b"s3cret", &header, body, 1_800_000_100, 300), Ok(()));
        // Another body, another secret, another time in the header: refused.
        assert_eq!(
            verify(
                b"s3cret",
                &header,
                br#"{"event":"approval_status_change"}"#,
                1_800_000_000,
                300
            ),
            Err(Refused::Forged)
        );
        assert_eq!(
            verify(b"other", &header, body, 1_800_000_000, 300),
            Err(Refused::Forged)
        );
        let moved = header.replace("t=1800000000", "t=1800000050");
        assert_eq!(
            verify(b"s3cret", &moved, body, 1_800_000_050, 300),
            Err(Refused::Forged)
        );
        // Replayed later than the tolerance: stale, whatever the signature.
        assert_eq!(
            verify(b"s3cret", &header, body, 1_800_000_301, 300),
            Err(Refused::Stale)
        );
        for bad in ["", "t=1", "v1=00", "t=x,v1=00", "t=1800000000,v1=zz"] {
            assert_eq!(
                verify(b"s3cret", bad, body, 1_800_000_000, 300),
                Err(Refused::Malformed),
                "{bad}"
            );
        }
    }

    #[test]
    fn the_slack_message_shows_the_question_as_plain_text_with_a_button_to_the_approval() {
        let mut a = crate::testing::approval("AP-1", crate::approvals::PromptKind::Text);
        a.tool_name = "terraform".into();
        a.question = "Do you want to perform these actions? *bold* <!channel>".into();
        let link = approval_link(Some("https://hr.example:8443/"), &a);
        assert_eq!(
            link.as_deref(),
            Some("https://hr.example:8443/#/approvals/AP-1")
        );
        a.tool_name = "terra\u{1b}[31mform".into();
        let m = slack_body(Event::Pending, &a, link.as_deref(), false);
        let text = m["text"].as_str().unwrap();
        assert!(text.starts_with("terraform asks: Do you"), "{text}");
        // Nothing Slack would read as a mention or a link; no control character anywhere.
        assert!(
            text.contains("&lt;!channel&gt;") && !text.contains("<!channel>"),
            "{text}"
        );
        assert!(!m.to_string().contains("\\u001b"), "{m}");
        assert_eq!(
            m["blocks"][0]["text"]["text"],
            "terraform asks: Do you want to perform these actions? *bold* <!channel>"
        );
        assert_eq!(m["blocks"][0]["text"]["type"], "plain_text");
        assert_eq!(
            m["blocks"][2]["elements"][0]["url"],
            "https://hr.example:8443/#/approvals/AP-1"
        );
        // Decided: no button; who decided is said.
        a.status = crate::status::ApprovalStatus::Approved;
        a.decided_by = Some("alice".into());
        let m = slack_body(Event::Decided, &a, link.as_deref(), false);
        assert_eq!(m["blocks"].as_array().unwrap().len(), 2, "{m}");
        assert!(
            m["text"].as_str().unwrap().contains("approved by alice"),
            "{m}"
        );
        let long = "x".repeat(5000);
        assert_eq!(clip(&long, 3000).chars().count(), 3000);
    }

    /// Slack's own example of a signed request (its documentation's secret, timestamp,
    /// body and signature), checked the way Slack says to.
    #[test]
    fn a_slack_request_is_checked_as_slack_documents_it() {
        let secret = b"8f742231b10e8888abcd99yyyzzz85a5";
        let body = b"token=xyzz0WbapA4vBCDEFasx0q6G&team_id=T1DC2JH3J&team_domain=testteamnow&channel_id=G8PSS9T3V&channel_name=foobar&user_id=U2CERLKJA&user_name=roadrunner&command=%2Fwebhook-collect&text=&response_url=https%3A%2F%2Fhooks.slack.com%2Fcommands%2FT1DC2JH3J%2F397700885554%2F96rGlfmibIGlgcZRskXaIFfN&trigger_id=398738663015.47445629121.803a0bc887a14d10d2c447fce8b6703c";
        let sig = "v0=a2114d57b48eac39b9ad189dd8316235a7b4a8d21a10bd27519666489c69b503";
        // Signed, but a slash command, not a button: not ours (the signature held).
        assert_eq!(
            slack_action(secret, "1531420618", sig, body, 1_531_420_618 + 10),
            Err(SlackRefused::NotOurs("no payload".into()))
        );
        // Too old, another secret, another body: unsigned.
        for (secret, now, body) in [
            (&secret[..], 1_531_420_618 + 301, &body[..]),
            (b"another-secret", 1_531_420_618, &body[..]),
            (&secret[..], 1_531_420_618, b"token=x"),
        ] {
            assert_eq!(
                slack_action(secret, "1531420618", sig, body, now),
                Err(SlackRefused::Unsigned)
            );
        }
    }

    #[test]
    fn a_button_press_names_the_user_the_decision_and_the_version_shown() {
        use hmac::Mac;
        let mut a = crate::testing::approval("AP-1", crate::approvals::PromptKind::Confirm);
        a.screen_digest = Some("sd1".into());
        let m = slack_body(Event::Pending, &a, None, true);
        let buttons = &m["blocks"][2]["elements"];
        assert_eq!(buttons[0]["action_id"], SLACK_APPROVE);
        assert_eq!(buttons[0]["value"], "AP-1~sd1");
        assert!(buttons[0]["confirm"].is_object());
        assert_eq!(buttons[1]["action_id"], SLACK_REJECT);
        let payload = serde_json::json!({
            "type": "block_actions",
            "user": {"id": "U1", "username": "alice"},
            "actions": [{"action_id": SLACK_REJECT, "value": "AP-1~sd1"}],
        })
        .to_string();
        let encoded: String = payload
            .bytes()
            .map(|b| match b {
                b' ' => "+".to_owned(),
                b if b.is_ascii_alphanumeric() => (b as char).to_string(),
                b => format!("%{b:02X}"),
            })
            .collect();
        let body = format!("payload={encoded}");
        let mut mac = <HmacSha256 as KeyInit>::new_from_slice(b"s3cret").unwrap();
        mac.update(format!("v0:100:{body}").as_bytes());
        let sig = format!("v0={}", crate::audit::hex(&mac.finalize().into_bytes()));
        assert_eq!(
            slack_action(b"s3cret", "100", &sig, body.as_bytes(), 100),
            Ok(SlackAction {
                user_id: "U1".into(),
                value: "reject",
                approval_id: "AP-1".into(),
                version: Some("sd1".into()),
            })
        );
        assert_eq!(form_decode("a%2Bb+c%zz%4"), "a+b c%zz%4");
    }
}
