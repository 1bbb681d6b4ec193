//! The JSON event protocol: what goes to `logs/combined.log` (snake_case out), and the
//! events a cooperative tool sends (both spellings accepted in) — on its terminal only
//! with its run's [`EventToken`], on its event descriptor without.

use crate::sanitize::{is_unsafe, sanitize_line, sanitize_text};
use crate::status::{ApprovalStatus, RunStatus};
use serde::{Deserialize, Serialize};
use std::borrow::Cow;

/// The variable that gives a tool its run's event token.
pub const ENV_EVENT_TOKEN: &str = "HEADLESS_RUN_EVENT_TOKEN";
/// The variable that names a tool's event descriptor (a number, such as `3`).
pub const ENV_EVENT_FD: &str = "HEADLESS_RUN_EVENT_FD";
/// The variable that names the event descriptor's pipe (its inode number): an agent's hook
/// that reaches the descriptor through an ancestor (`/proc/PID/fd/N`) writes only to that
/// very pipe, never to another the number happens to name there.
pub const ENV_EVENT_PIPE: &str = "HEADLESS_RUN_EVENT_PIPE";
/// The field of an event line that carries the token.
pub const TOKEN_FIELD: &str = "token";

/// The most text a `tool_output` event carries; the raw run log has the rest.
pub const MAX_OUTPUT_TEXT: usize = 4096;

/// A tool output line longer than this is never taken for an event.
pub const MAX_EVENT_LINE: usize = 64 * 1024;

/// One answer an approval offers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ApprovalOption {
    /// What a decider passes (`yes`, `2`, `abort`).
    pub value: String,
    /// What it means, for people.
    pub label: String,
    /// The exact bytes typed into the tool's terminal to give this answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keys: Option<String>,
}

/// One line of `logs/combined.log`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LogEvent {
    #[serde(flatten)]
    pub body: EventBody,
    pub timestamp: String,
    pub tool: String,
    pub tool_run_id: String,
    #[serde(default)]
    pub execution_id: Option<String>,
}

impl LogEvent {
    /// An event about run `tool_run_id`, stamped now.
    pub fn about_run(
        body: EventBody,
        tool: &str,
        tool_run_id: &str,
        execution_id: Option<&str>,
    ) -> LogEvent {
        LogEvent {
            body,
            timestamp: crate::time::now_rfc3339(),
            tool: tool.to_owned(),
            tool_run_id: tool_run_id.to_owned(),
            execution_id: execution_id.map(str::to_owned),
        }
    }
}

/// What happened; serialized with an `event` tag.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum EventBody {
    ToolStatusChange {
        status: RunStatus,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        previous_status: Option<RunStatus>,
        #[serde(default)]
        reason: Option<String>,
        #[serde(default)]
        exit_code: Option<i32>,
    },
    ApprovalNeeded {
        approval_id: String,
        question: String,
        #[serde(default)]
        options: Vec<ApprovalOption>,
        #[serde(default)]
        default: Option<String>,
        #[serde(default)]
        allows_text: bool,
        #[serde(default)]
        expires_at: Option<String>,
    },
    ApprovalStatusChange {
        approval_id: String,
        status: ApprovalStatus,
        #[serde(default)]
        chosen_value: Option<String>,
        #[serde(default)]
        decided_by: Option<String>,
        #[serde(default)]
        decision_channel: Option<String>,
        #[serde(default)]
        comment: Option<String>,
    },
    Heartbeat {
        /// `tool` for a heartbeat line the tool printed, `supervisor` for the shim's own.
        source: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        message: Option<String>,
    },
    ToolOutput {
        /// `pty` (the tool's terminal: stdout and stderr together).
        stream: String,
        text: String,
        #[serde(default, skip_serializing_if = "is_false")]
        truncated: bool,
        /// Lines left out of the event log before this one (rate limit); the run log has them.
        #[serde(default, skip_serializing_if = "is_zero")]
        skipped_lines: u64,
    },
}

fn is_false(b: &bool) -> bool {
    !*b
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl EventBody {
    /// The `tool_status_change` body of a change from `previous` (none: the run's first
    /// status).
    pub fn status_change(
        previous: Option<RunStatus>,
        change: &crate::runs::StatusChange,
    ) -> EventBody {
        EventBody::ToolStatusChange {
            status: change.status,
            previous_status: previous,
            reason: change.reason.clone(),
            exit_code: change.exit_code,
        }
    }

    /// The `event` tag.
    pub fn name(&self) -> &'static str {
        match self {
            EventBody::ToolStatusChange { .. } => "tool_status_change",
            EventBody::ApprovalNeeded { .. } => "approval_needed",
            EventBody::ApprovalStatusChange { .. } => "approval_status_change",
            EventBody::Heartbeat { .. } => "heartbeat",
            EventBody::ToolOutput { .. } => "tool_output",
        }
    }
}

/// Cuts `s` to at most `max` bytes on a character boundary; says whether it cut.
pub fn truncate_utf8(s: &mut String, max: usize) -> bool {
    if s.len() <= max {
        return false;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s.truncate(end);
    true
}

/// A run's secret for the events its tool prints: 128 random bits as 32 lowercase hex
/// digits, made by the shim for each run and given only to its tool
/// ([`ENV_EVENT_TOKEN`]). A line on the terminal is an event only when it carries it:
/// text the tool merely passes on (a file it prints, a log it tails) cannot. Never stored
/// or logged: [`EventToken::redact`] masks it wherever it shows up.
#[derive(Clone, PartialEq, Eq)]
pub struct EventToken(String);

impl EventToken {
    /// Its length in characters.
    pub const LEN: usize = 32;

    /// A new token from the kernel's random source; `None` when there is none (then only
    /// the event descriptor carries events).
    pub fn generate() -> Option<EventToken> {
        let mut bytes = [0u8; Self::LEN / 2];
        if !crate::id::random_bytes(&mut bytes) {
            return None;
        }
        const HEX: &[u8; 16] = b"0123456789abcdef";
        let mut s = String::with_capacity(Self::LEN);
        for b in bytes {
            s.push(HEX[usize::from(b >> 4)] as char);
            s.push(HEX[usize::from(b & 0xf)] as char);
        }
        Some(EventToken(s))
    }

    /// A given token (tests, fixtures): 32 lowercase hex digits, else `None`.
    pub fn from_hex(s: &str) -> Option<EventToken> {
        (s.len() == Self::LEN && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')))
            .then(|| EventToken(s.to_owned()))
    }

    /// The value to export to the tool.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Whether `claimed` is this token, in time that does not depend on where they differ.
    pub fn matches(&self, claimed: &str) -> bool {
        let (a, b) = (self.0.as_bytes(), claimed.as_bytes());
        if a.len() != b.len() {
            return false;
        }
        let diff = a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y));
        std::hint::black_box(diff) == 0
    }

    /// `bytes` with every occurrence of the token masked as [`EventToken::MASK`] (the same
    /// length, so offsets into the text stay true).
    pub fn redact_bytes<'b>(&self, bytes: &'b [u8]) -> Cow<'b, [u8]> {
        let needle = self.0.as_bytes();
        let Some(first) = find(bytes, needle) else {
            return Cow::Borrowed(bytes);
        };
        let mut out = bytes.to_vec();
        let mut at = first;
        loop {
            out[at..at + needle.len()].copy_from_slice(Self::MASK);
            match find(&out[at + needle.len()..], needle) {
                Some(next) => at += needle.len() + next,
                None => break,
            }
        }
        Cow::Owned(out)
    }

    /// `text` with the token masked.
    pub fn redact(&self, text: &mut String) {
        if let Cow::Owned(masked) = self.redact_bytes(text.as_bytes()) {
            // Only ASCII was replaced by ASCII: still UTF-8.
            *text = String::from_utf8(masked).unwrap_or_default();
        }
    }

    /// What stands where the token was.
    pub const MASK: &'static [u8; Self::LEN] = b"********************************";
}

impl std::fmt::Debug for EventToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("EventToken(…)")
    }
}

/// Where a tool's line came from, which decides what it needs to be an event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Channel {
    /// The tool's terminal: whatever it prints, including text it only passes on. A line
    /// counts only when it carries the run's token.
    Terminal,
    /// The run's event descriptor ([`ENV_EVENT_FD`]): written on purpose, so every event
    /// line counts.
    EventFd,
}

/// An event a tool sent.
#[derive(Debug, Clone, PartialEq)]
pub enum ToolSignal {
    /// `{"event":"heartbeat", …}`: the tool is alive.
    Heartbeat { message: Option<String> },
    /// `{"event":"error","message":…}`: what went wrong, the run's `last_error_msg`.
    Error { message: String },
    /// `{"event":"approval_needed", …}`: the tool asks for a decision.
    ApprovalNeeded(CooperativeRequest),
    /// `{"event":"result","data":{…}}`: what the tool found, for the steps after it in a
    /// pipeline (an object; the last one sent counts).
    Result(serde_json::Value),
    /// `{"event":"permission_request","reply":PATH, …}` (the event descriptor only): an
    /// agent's own permission hook (`headless-run --hook`, `--mcp`) asks whether a tool call
    /// may go ahead, and waits for the answer on the named pipe.
    PermissionRequest(PermissionRequest),
}

/// A permission request from an agent's hook: a question like a cooperative tool's, asked
/// and answered as a prompt is (policies, remembered decisions), whose answer goes back on
/// the hook's own pipe rather than to the terminal.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PermissionRequest {
    pub request: CooperativeRequest,
    /// The FIFO the hook reads the answer from (one JSON line, [`PermissionReply`]).
    pub reply: std::path::PathBuf,
}

/// What the shim writes back to a hook: how the approval ended and the value chosen.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PermissionReply {
    pub approval_id: String,
    /// `approved`, `rejected` or `expired`.
    pub status: String,
    /// The option chosen (`allow`, `deny`); none unless approved.
    pub value: Option<String>,
    /// Who decided (`root via cli`, `policy:read-only`).
    pub decided_by: String,
}

/// Where a shim run as a pipeline's step keeps the step's result (set by the pipeline
/// runner for the shim; never passed on to the tool).
pub const ENV_RESULT_FILE: &str = "HEADLESS_RUN_RESULT_FILE";

/// The pipeline step a shim runs (`EX/NODE#ITERATION`), kept in its run's metadata
/// (`pipeline`): its runner takes the outcome, and no worker re-runs it on its own.
pub const ENV_PIPELINE_STEP: &str = "HEADLESS_RUN_PIPELINE_STEP";

/// A cooperative tool's approval request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct CooperativeRequest {
    /// An id the tool chose, if any (kept only when it is a safe id).
    pub approval_id: Option<String>,
    /// The run id the tool names, if any.
    pub tool_run_id: Option<String>,
    pub question: String,
    pub options: Vec<ApprovalOption>,
    pub default: Option<String>,
    pub allows_text: bool,
    pub context: Option<String>,
    /// How long the tool will wait (`expires_in_seconds`): the approval expires then, or
    /// at the configured `approval_ttl` if that comes first.
    #[serde(default)]
    pub expires_in_seconds: Option<u64>,
}

/// Bounds on what a cooperative request may carry.
const MAX_QUESTION: usize = 2048;
const MAX_OPTIONS: usize = 32;
const MAX_OPTION_FIELD: usize = 256;
/// The longest error message a tool's `error` event keeps.
const MAX_ERROR_TEXT: usize = 1024;
const MAX_CONTEXT: usize = 8192;

#[derive(Deserialize)]
struct RawSignal {
    event: String,
    #[serde(default)]
    token: Option<String>,
    #[serde(default, alias = "approvalId")]
    approval_id: Option<String>,
    #[serde(default, alias = "toolRunId")]
    tool_run_id: Option<String>,
    #[serde(default)]
    question: Option<String>,
    #[serde(default)]
    options: Option<Vec<RawOption>>,
    #[serde(default, alias = "defaultValue", alias = "default_value")]
    default: Option<String>,
    #[serde(default, alias = "allowsText")]
    allows_text: Option<bool>,
    #[serde(default)]
    context: Option<String>,
    #[serde(default)]
    message: Option<String>,
    #[serde(default)]
    data: Option<serde_json::Value>,
    #[serde(default)]
    reply: Option<String>,
    /// Read leniently: a value that is no whole number of seconds is ignored (the request
    /// still counts).
    #[serde(
        default,
        alias = "expiresInSeconds",
        deserialize_with = "lenient_seconds"
    )]
    expires_in_seconds: Option<u64>,
}

fn lenient_seconds<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    Ok(serde_json::Value::deserialize(d)?.as_u64())
}

#[derive(Deserialize)]
#[serde(untagged)]
enum RawOption {
    Plain(String),
    Full {
        value: String,
        #[serde(default)]
        label: Option<String>,
    },
}

/// Reads one complete line (without its newline) from `channel` as a tool event. Anything
/// that is not a whole JSON object under [`MAX_EVENT_LINE`] with a known `event` and
/// well-typed fields is `None`: ordinary output — and so is, on the terminal, a line whose
/// `token` is not the run's `token` (no token: nothing on the terminal is an event). Text
/// is cleaned of what could hide or drive a terminal, and the token is masked in it.
pub fn parse_tool_line(
    line: &[u8],
    channel: Channel,
    token: Option<&EventToken>,
) -> Option<ToolSignal> {
    if line.len() > MAX_EVENT_LINE {
        return None;
    }
    let trimmed = line.trim_ascii();
    if trimmed.first() != Some(&b'{') || trimmed.last() != Some(&b'}') {
        return None;
    }
    // Cheap filter before a JSON parse: every event names its kind.
    if !contains(trimmed, b"\"event\"") {
        return None;
    }
    let raw: RawSignal = serde_json::from_slice(trimmed).ok()?;
    if channel == Channel::Terminal {
        let claimed = raw.token.as_deref()?;
        if !token?.matches(claimed) {
            return None;
        }
    }
    let clean_text = |mut s: String, max: usize| {
        if let Some(t) = token {
            t.redact(&mut s);
        }
        let mut s = sanitize_text(&s);
        truncate_utf8(&mut s, max);
        s
    };
    match raw.event.as_str() {
        "result" => raw
            .data
            .filter(serde_json::Value::is_object)
            .map(ToolSignal::Result),
        "error" => raw
            .message
            .map(|m| sanitize_line(&clean_text(m, MAX_ERROR_TEXT)))
            .filter(|m| !m.trim().is_empty())
            .map(|message| ToolSignal::Error { message }),
        "heartbeat" => Some(ToolSignal::Heartbeat {
            message: raw
                .message
                .map(|m| sanitize_line(&clean_text(m, MAX_OPTION_FIELD))),
        }),
        "permission_request" => {
            // It names a file the shim writes to: only the descriptor's events may.
            if channel != Channel::EventFd {
                return None;
            }
            let reply = std::path::PathBuf::from(raw.reply.clone()?);
            if !reply.is_absolute() {
                return None;
            }
            let request = cooperative_request(raw, &clean_text, token)?;
            Some(ToolSignal::PermissionRequest(PermissionRequest {
                request,
                reply,
            }))
        }
        "approval_needed" => {
            cooperative_request(raw, &clean_text, token).map(ToolSignal::ApprovalNeeded)
        }
        _ => None,
    }
}

/// The approval request an `approval_needed` or `permission_request` line carries.
fn cooperative_request(
    raw: RawSignal,
    clean_text: &dyn Fn(String, usize) -> String,
    token: Option<&EventToken>,
) -> Option<CooperativeRequest> {
    let question = clean_text(raw.question?, MAX_QUESTION);
    if question.trim().is_empty() {
        return None;
    }
    let mut options: Vec<ApprovalOption> = raw
        .options
        .unwrap_or_default()
        .into_iter()
        .filter_map(|o| {
            let (value, label) = match o {
                RawOption::Plain(v) => (v.clone(), v),
                RawOption::Full { value, label } => {
                    let label = label.unwrap_or_else(|| value.clone());
                    (value, label)
                }
            };
            let value = clean_value(&value, token)?;
            let label = sanitize_line(&clean_text(label, MAX_OPTION_FIELD));
            Some(ApprovalOption {
                value,
                label,
                keys: None,
            })
        })
        .collect();
    // Each value once (the first label wins), so a decision names one option.
    let mut seen = std::collections::HashSet::new();
    options.retain(|o| seen.insert(o.value.clone()));
    options.truncate(MAX_OPTIONS);
    if options.is_empty() {
        options = vec![
            ApprovalOption {
                value: "approve".into(),
                label: "Approve".into(),
                keys: None,
            },
            ApprovalOption {
                value: "reject".into(),
                label: "Reject".into(),
                keys: None,
            },
        ];
    }
    let default = raw
        .default
        .and_then(|d| clean_value(&d, token))
        .filter(|d| options.iter().any(|o| &o.value == d));
    Some(CooperativeRequest {
        approval_id: raw.approval_id.filter(|id| is_safe_id(id)),
        tool_run_id: raw.tool_run_id.filter(|id| is_safe_id(id)),
        question,
        options,
        default,
        allows_text: raw.allows_text.unwrap_or(false),
        context: raw.context.map(|c| clean_text(c, MAX_CONTEXT)),
        // At least a second, at most a year; a wait longer than the configured TTL is cut
        // to it where the approval is made.
        expires_in_seconds: raw
            .expires_in_seconds
            .filter(|s| *s > 0)
            .map(|s| s.min(366 * 86_400)),
    })
}

/// An option value must be one short line a person can type on the command line: a value
/// with a control character (a newline) is refused; bidi controls and invisible characters
/// are taken out (`ye\u{2063}s` is `yes`); a value that is nothing once trimmed is
/// refused.
fn clean_value(value: &str, token: Option<&EventToken>) -> Option<String> {
    if value.chars().any(char::is_control) {
        return None;
    }
    let mut value: String = value.chars().filter(|&c| !is_unsafe(c)).collect();
    if let Some(t) = token {
        t.redact(&mut value);
    }
    let value = value.trim();
    if value.is_empty() || value.len() > MAX_OPTION_FIELD {
        return None;
    }
    Some(value.to_owned())
}

/// Ids a tool may choose: 1–100 of `[A-Za-z0-9._:-]`.
pub fn is_safe_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 100
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b':' | b'-'))
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    find(hay, needle).is_some()
}

/// Where `needle` first starts in `hay`.
fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    let (&first, rest) = needle.split_first()?;
    let mut from = 0;
    while from + needle.len() <= hay.len() {
        let at = from
            + hay[from..=hay.len() - needle.len()]
                .iter()
                .position(|&b| b == first)?;
        if &hay[at + 1..at + needle.len()] == rest {
            return Some(at);
        }
        from = at + 1;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A line as read from the event descriptor, where no token is needed.
    fn on_fd(line: &[u8]) -> Option<ToolSignal> {
        parse_tool_line(line, Channel::EventFd, None)
    }

    const TOKEN: &str = "0123456789abcdef0123456789abcdef";

    fn token() -> EventToken {
        EventToken::from_hex(TOKEN).unwrap()
    }

    fn status_event() -> LogEvent {
        LogEvent {
            body: EventBody::ToolStatusChange {
                status: RunStatus::Completed,
                previous_status: Some(RunStatus::Running),
                reason: None,
                exit_code: Some(0),
            },
            timestamp: "2026-11-22T08:00:00.000Z".into(),
            tool: "rm".into(),
            tool_run_id: "TR-1".into(),
            execution_id: Some("EX-1".into()),
        }
    }

    #[test]
    fn a_permission_request_comes_only_on_the_descriptor_with_an_absolute_reply_pipe() {
        let line = br#"{"event":"permission_request","reply":"/tmp/hr-ask-1/reply","question":"Bash: ls\nList","options":[{"value":"allow","label":"Yes"},{"value":"deny","label":"No"}],"default":"allow","context":"ls"}"#;
        let Some(ToolSignal::PermissionRequest(p)) = on_fd(line) else {
            panic!("not a permission request: {:?}", on_fd(line));
        };
        assert_eq!(p.reply, std::path::Path::new("/tmp/hr-ask-1/reply"));
        assert_eq!(p.request.question, "Bash: ls\nList");
        assert_eq!(p.request.default.as_deref(), Some("allow"));
        assert_eq!(p.request.options.len(), 2);
        // Printed on the terminal, even with the token: it names a file the shim writes.
        let t = token();
        let printed = String::from_utf8_lossy(line).replace(
            "\"event\":\"permission_request\"",
            &format!("\"event\":\"permission_request\",\"token\":\"{TOKEN}\""),
        );
        assert_eq!(
            parse_tool_line(printed.as_bytes(), Channel::Terminal, Some(&t)),
            None
        );
        // No reply pipe, or a relative one: nothing.
        for bad in [
            &br#"{"event":"permission_request","question":"Bash: ls"}"#[..],
            br#"{"event":"permission_request","reply":"reply","question":"Bash: ls"}"#,
            br#"{"event":"permission_request","reply":"/tmp/r","question":" "}"#,
        ] {
            assert_eq!(on_fd(bad), None, "{}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn a_result_is_an_object_and_nothing_else() {
        let got = parse_tool_line(
            br#"{"event":"result","data":{"id":"b-42","left":0}}"#,
            Channel::EventFd,
            None,
        );
        assert_eq!(
            got,
            Some(ToolSignal::Result(
                serde_json::json!({"id": "b-42", "left": 0})
            ))
        );
        for line in [
            &br#"{"event":"result","data":[1,2]}"#[..],
            br#"{"event":"result","data":"x"}"#,
            br#"{"event":"result"}"#,
        ] {
            assert_eq!(parse_tool_line(line, Channel::EventFd, None), None);
        }
        // On the terminal, only with the run's token.
        assert_eq!(
            parse_tool_line(br#"{"event":"result","data":{}}"#, Channel::Terminal, None),
            None
        );
    }

    #[test]
    fn status_change_snapshot() {
        let json = serde_json::to_string(&status_event()).unwrap();
        assert_eq!(
            json,
            r#"{"event":"tool_status_change","status":"completed","previous_status":"running","reason":null,"exit_code":0,"timestamp":"2026-11-22T08:00:00.000Z","tool":"rm","tool_run_id":"TR-1","execution_id":"EX-1"}"#
        );
    }

    #[test]
    fn every_event_round_trips() {
        let bodies = vec![
            status_event().body,
            EventBody::ApprovalNeeded {
                approval_id: "AP-1".into(),
                question: "Proceed?".into(),
                options: vec![ApprovalOption {
                    value: "y".into(),
                    label: "Yes".into(),
                    keys: Some("y\r".into()),
                }],
                default: Some("y".into()),
                allows_text: false,
                expires_at: Some("2026-11-23T08:00:00.000Z".into()),
            },
            EventBody::ApprovalStatusChange {
                approval_id: "AP-1".into(),
                status: ApprovalStatus::Approved,
                chosen_value: Some("y".into()),
                decided_by: Some("root".into()),
                decision_channel: Some("cli".into()),
                comment: None,
            },
            EventBody::Heartbeat {
                source: "tool".into(),
                message: Some("50%".into()),
            },
            EventBody::ToolOutput {
                stream: "pty".into(),
                text: "hello".into(),
                truncated: false,
                skipped_lines: 3,
            },
        ];
        for body in bodies {
            let ev = LogEvent {
                body,
                ..status_event()
            };
            let json = serde_json::to_string(&ev).unwrap();
            assert!(
                json.starts_with(&format!("{{\"event\":\"{}\"", ev.body.name())),
                "{json}"
            );
            let back: LogEvent = serde_json::from_str(&json).unwrap();
            assert_eq!(back, ev);
        }
    }

    #[test]
    fn heartbeat_lines() {
        assert_eq!(
            on_fd(br#"{"event":"heartbeat"}"#),
            Some(ToolSignal::Heartbeat { message: None })
        );
        assert_eq!(
            on_fd(b"  {\"event\": \"heartbeat\", \"message\": \"step 3\"}\r"),
            Some(ToolSignal::Heartbeat {
                message: Some("step 3".into())
            })
        );
    }

    #[test]
    fn approval_needed_accepts_both_spellings() {
        for line in [
            r#"{"event":"approval_needed","approvalId":"AP-77","toolRunId":"TR-9","question":"Deploy?","options":["yes","no"],"default":"no"}"#,
            r#"{"event":"approval_needed","approval_id":"AP-77","tool_run_id":"TR-9","question":"Deploy?","options":[{"value":"yes"},{"value":"no","label":"No"}],"default":"no"}"#,
        ] {
            let Some(ToolSignal::ApprovalNeeded(req)) = on_fd(line.as_bytes()) else {
                panic!("not parsed: {line}");
            };
            assert_eq!(req.approval_id.as_deref(), Some("AP-77"));
            assert_eq!(req.tool_run_id.as_deref(), Some("TR-9"));
            assert_eq!(req.question, "Deploy?");
            assert_eq!(
                req.options
                    .iter()
                    .map(|o| o.value.as_str())
                    .collect::<Vec<_>>(),
                ["yes", "no"]
            );
            assert_eq!(req.default.as_deref(), Some("no"));
        }
    }

    #[test]
    fn lines_that_are_not_events() {
        for line in [
            &b"plain text"[..],
            b"{not json}",
            b"{\"event\":\"nope\"}",
            b"{\"level\":\"info\",\"msg\":\"event happened\"}",
            b"{\"event\":\"approval_needed\"}",
            b"{\"event\":\"approval_needed\",\"question\":42}",
            b"{\"event\":\"approval_needed\",\"question\":\"q\",\"question\":\"dup\"}",
            b"{\"event\":\"heartbeat\"",
            b"\xff\xfe{\"event\":\"heartbeat\"}",
        ] {
            assert_eq!(on_fd(line), None, "{}", String::from_utf8_lossy(line));
        }
        let mut huge = b"{\"event\":\"heartbeat\",\"message\":\"".to_vec();
        huge.extend(std::iter::repeat_n(b'x', MAX_EVENT_LINE));
        huge.extend(b"\"}");
        assert_eq!(on_fd(&huge), None);
    }

    #[test]
    fn hostile_fields_are_bounded() {
        let long_q = "q".repeat(10_000);
        let line = format!(
            r#"{{"event":"approval_needed","approvalId":"../../etc/passwd","question":"{long_q}","options":["ok\nrm -rf /","fine"],"default":"missing"}}"#
        );
        let Some(ToolSignal::ApprovalNeeded(req)) = on_fd(line.as_bytes()) else {
            panic!("not parsed");
        };
        assert_eq!(req.approval_id, None);
        assert_eq!(req.question.len(), MAX_QUESTION);
        assert_eq!(req.options.len(), 1);
        assert_eq!(req.options[0].value, "fine");
        assert_eq!(req.default, None);
    }

    /// Found by the fuzz target (shared/tests/fuzz.rs): only adjacent duplicates were
    /// dropped, so `["yes","no","yes"]` offered `yes` twice.
    #[test]
    fn duplicate_option_values_are_offered_once() {
        let line = r#"{"event":"approval_needed","question":"Go?","options":["yes","no",{"value":"yes","label":"Again"}," no "]}"#;
        let Some(ToolSignal::ApprovalNeeded(req)) = on_fd(line.as_bytes()) else {
            panic!("not parsed");
        };
        let values: Vec<&str> = req.options.iter().map(|o| o.value.as_str()).collect();
        assert_eq!(values, ["yes", "no"]);
        assert_eq!(req.options[0].label, "yes");
    }

    #[test]
    fn truncation_respects_char_boundaries() {
        let mut s = "ééé".to_string();
        assert!(truncate_utf8(&mut s, 3));
        assert_eq!(s, "é");
    }

    /// Regression (issue 12.14): any `approval_needed` line on the terminal was a request,
    /// so `cat NOTES.md` asked for approval. Now only the run's token makes it one.
    #[test]
    fn on_the_terminal_only_the_runs_token_makes_an_event() {
        let t = token();
        let line = |extra: &str| {
            format!(r#"{{"event":"approval_needed","question":"Deploy?"{extra}}}"#).into_bytes()
        };
        let wrong = format!(r#","token":"{}""#, TOKEN.replace('0', "1"));
        for forged in [
            line(""),
            line(r#","token":"""#),
            line(r#","token":null"#),
            line(r#","token":42"#),
            line(&wrong),
            line(&format!(r#","token":"{}""#, &TOKEN[..31])),
            line(&format!(r#","token":"{TOKEN}0""#)),
            line(&format!(r#","token":"{}""#, TOKEN.to_uppercase())),
            line(&format!(r#","token":"{TOKEN}","token":"{TOKEN}""#)),
        ] {
            let text = String::from_utf8_lossy(&forged).into_owned();
            assert_eq!(
                parse_tool_line(&forged, Channel::Terminal, Some(&t)),
                None,
                "{text}"
            );
        }
        let real = line(&format!(r#","token":"{TOKEN}""#));
        assert!(matches!(
            parse_tool_line(&real, Channel::Terminal, Some(&t)),
            Some(ToolSignal::ApprovalNeeded(_))
        ));
        // A shim without a token takes nothing from the terminal.
        assert_eq!(parse_tool_line(&real, Channel::Terminal, None), None);
        // Heartbeats too.
        let beat = format!(r#"{{"event":"heartbeat","token":"{TOKEN}"}}"#);
        assert_eq!(
            parse_tool_line(br#"{"event":"heartbeat"}"#, Channel::Terminal, Some(&t)),
            None
        );
        assert_eq!(
            parse_tool_line(beat.as_bytes(), Channel::Terminal, Some(&t)),
            Some(ToolSignal::Heartbeat { message: None })
        );
    }

    #[test]
    fn on_the_event_fd_no_token_is_needed() {
        let t = token();
        for line in [
            r#"{"event":"heartbeat"}"#.to_string(),
            format!(r#"{{"event":"heartbeat","token":"{TOKEN}"}}"#),
            r#"{"event":"heartbeat","token":"whatever"}"#.to_string(),
        ] {
            assert_eq!(
                parse_tool_line(line.as_bytes(), Channel::EventFd, Some(&t)),
                Some(ToolSignal::Heartbeat { message: None }),
                "{line}"
            );
        }
    }

    #[test]
    fn the_token_is_masked_in_what_a_request_carries() {
        let t = token();
        let line = format!(
            r#"{{"event":"approval_needed","token":"{TOKEN}","question":"Use {TOKEN}?","options":[{{"value":"{TOKEN}","label":"is {TOKEN}"}},"ok"],"default":"{TOKEN}","context":"{TOKEN}{TOKEN}"}}"#
        );
        let Some(ToolSignal::ApprovalNeeded(req)) =
            parse_tool_line(line.as_bytes(), Channel::Terminal, Some(&t))
        else {
            panic!("not parsed");
        };
        let debug = format!("{req:?}");
        assert!(!debug.contains(TOKEN), "{debug}");
        let mask = "*".repeat(32);
        assert_eq!(req.question, format!("Use {mask}?"));
        assert_eq!(req.options[0].value, mask);
        assert_eq!(req.options[0].label, format!("is {mask}"));
        assert_eq!(req.context, Some(format!("{mask}{mask}")));
        let beat = format!(r#"{{"event":"heartbeat","token":"{TOKEN}","message":"{TOKEN}"}}"#);
        assert_eq!(
            parse_tool_line(beat.as_bytes(), Channel::Terminal, Some(&t)),
            Some(ToolSignal::Heartbeat {
                message: Some(mask)
            })
        );
    }

    /// Regression (issue 12.15): a request's question, options and context kept invisible
    /// characters (Unicode tags spell a sentence nobody sees).
    #[test]
    fn invisible_characters_are_taken_out_of_a_request() {
        let line = serde_json::json!({
            "event": "approval_needed",
            "question": "Go\u{e0061}\u{e0062}?",
            "options": [{"value": "ye\u{2063}s", "label": "Yes\u{3164}"}, "n\u{180e}o", "\u{e0061}", "yes"],
            "default": "n\u{180e}o",
            "context": "c\u{2062}x",
        })
        .to_string();
        let Some(ToolSignal::ApprovalNeeded(req)) = on_fd(line.as_bytes()) else {
            panic!("not parsed: {line}");
        };
        assert_eq!(req.question, "Go?");
        let options: Vec<(&str, &str)> = req
            .options
            .iter()
            .map(|o| (o.value.as_str(), o.label.as_str()))
            .collect();
        assert_eq!(options, [("yes", "Yes"), ("no", "no")]);
        assert_eq!(req.default.as_deref(), Some("no"));
        assert_eq!(req.context.as_deref(), Some("cx"));
        // A question of nothing visible is no question.
        assert_eq!(
            on_fd(
                serde_json::json!({"event": "approval_needed", "question": "\u{e0041}\u{3164}"})
                    .to_string()
                    .as_bytes()
            ),
            None
        );
    }

    #[test]
    fn tokens_are_random_hex_and_compared_whole() {
        let a = EventToken::generate().unwrap();
        let b = EventToken::generate().unwrap();
        assert_ne!(a, b);
        assert_eq!(EventToken::from_hex(a.as_str()), Some(a.clone()));
        assert!(a.matches(a.as_str()));
        assert!(!a.matches(b.as_str()));
        assert!(!a.matches(""));
        assert!(!a.matches(&a.as_str()[..31]));
        assert_eq!(format!("{a:?}"), "EventToken(…)");
        assert_eq!(EventToken::from_hex("ABC"), None);
        assert_eq!(EventToken::from_hex(&TOKEN.to_uppercase()), None);
    }

    #[test]
    fn redaction_masks_every_occurrence_in_place() {
        let t = token();
        let mask = "*".repeat(32);
        let text = format!("a{TOKEN}{TOKEN}b {} {TOKEN}", &TOKEN[..20]);
        let mut s = text.clone();
        t.redact(&mut s);
        assert_eq!(s, format!("a{mask}{mask}b {} {mask}", &TOKEN[..20]));
        assert_eq!(s.len(), text.len());
        assert!(matches!(t.redact_bytes(b"nothing here"), Cow::Borrowed(_)));
    }

    #[test]
    fn a_wait_that_is_no_whole_number_of_seconds_is_ignored_not_the_request() {
        for wait in ["\"300\"", "300.5", "-1", "0", "null"] {
            let line = format!(
                r#"{{"event":"approval_needed","question":"Deploy?","expiresInSeconds":{wait}}}"#
            );
            match on_fd(line.as_bytes()) {
                Some(ToolSignal::ApprovalNeeded(r)) => {
                    assert_eq!(r.expires_in_seconds, None, "{wait}")
                }
                other => panic!("{wait}: {other:?}"),
            }
        }
        let line =
            br#"{"event":"approval_needed","question":"Deploy?","expires_in_seconds":99999999999}"#;
        let Some(ToolSignal::ApprovalNeeded(r)) = on_fd(line) else {
            panic!("not a request")
        };
        assert_eq!(r.expires_in_seconds, Some(366 * 86_400));
    }
}
