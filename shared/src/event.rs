//! The JSON event protocol: what goes to `logs/combined.log` (snake_case out), and the
//! events a cooperative tool may print on its own output (both spellings accepted in).

use crate::status::{ApprovalStatus, RunStatus};
use serde::{Deserialize, Serialize};

/// The most text a `tool_output` event carries; the raw run log has the rest.
pub const MAX_OUTPUT_TEXT: usize = 4096;

/// A tool output line longer than this is never taken for an event.
pub const MAX_EVENT_LINE: usize = 64 * 1024;

/// One answer an approval offers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
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

/// An event a tool printed as a line of its own output.
#[derive(Debug, Clone, PartialEq)]
pub enum ToolSignal {
    /// `{"event":"heartbeat", …}`: the tool is alive.
    Heartbeat { message: Option<String> },
    /// `{"event":"approval_needed", …}`: the tool asks for a decision.
    ApprovalNeeded(CooperativeRequest),
}

/// A cooperative tool's approval request.
#[derive(Debug, Clone, PartialEq)]
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
}

/// Bounds on what a cooperative request may carry.
const MAX_QUESTION: usize = 2048;
const MAX_OPTIONS: usize = 32;
const MAX_OPTION_FIELD: usize = 256;
const MAX_CONTEXT: usize = 8192;

#[derive(Deserialize)]
struct RawSignal {
    event: String,
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

/// Reads one complete output line (without its newline) as a tool event. Anything that is
/// not a whole JSON object under [`MAX_EVENT_LINE`] with a known `event` and well-typed
/// fields is `None`: ordinary output.
pub fn parse_tool_line(line: &[u8]) -> Option<ToolSignal> {
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
    match raw.event.as_str() {
        "heartbeat" => Some(ToolSignal::Heartbeat {
            message: raw.message.map(|mut m| {
                truncate_utf8(&mut m, MAX_OPTION_FIELD);
                m
            }),
        }),
        "approval_needed" => {
            let mut question = raw.question.filter(|q| !q.trim().is_empty())?;
            truncate_utf8(&mut question, MAX_QUESTION);
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
                    clean_option(value, label)
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
                .filter(|d| options.iter().any(|o| &o.value == d));
            Some(ToolSignal::ApprovalNeeded(CooperativeRequest {
                approval_id: raw.approval_id.filter(|id| is_safe_id(id)),
                tool_run_id: raw.tool_run_id.filter(|id| is_safe_id(id)),
                question,
                options,
                default,
                allows_text: raw.allows_text.unwrap_or(false),
                context: raw.context.map(|mut c| {
                    truncate_utf8(&mut c, MAX_CONTEXT);
                    c
                }),
            }))
        }
        _ => None,
    }
}

/// An option value must be one short line a person can type on the command line; the
/// label is free text within a bound.
fn clean_option(value: String, mut label: String) -> Option<ApprovalOption> {
    let value = value.trim().to_owned();
    if value.is_empty() || value.len() > MAX_OPTION_FIELD || value.chars().any(char::is_control) {
        return None;
    }
    truncate_utf8(&mut label, MAX_OPTION_FIELD);
    Some(ApprovalOption {
        value,
        label,
        keys: None,
    })
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
    hay.windows(needle.len()).any(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::*;

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
            parse_tool_line(br#"{"event":"heartbeat"}"#),
            Some(ToolSignal::Heartbeat { message: None })
        );
        assert_eq!(
            parse_tool_line(b"  {\"event\": \"heartbeat\", \"message\": \"step 3\"}\r"),
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
            let Some(ToolSignal::ApprovalNeeded(req)) = parse_tool_line(line.as_bytes()) else {
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
            assert_eq!(
                parse_tool_line(line),
                None,
                "{}",
                String::from_utf8_lossy(line)
            );
        }
        let mut huge = b"{\"event\":\"heartbeat\",\"message\":\"".to_vec();
        huge.extend(std::iter::repeat_n(b'x', MAX_EVENT_LINE));
        huge.extend(b"\"}");
        assert_eq!(parse_tool_line(&huge), None);
    }

    #[test]
    fn hostile_fields_are_bounded() {
        let long_q = "q".repeat(10_000);
        let line = format!(
            r#"{{"event":"approval_needed","approvalId":"../../etc/passwd","question":"{long_q}","options":["ok\nrm -rf /","fine"],"default":"missing"}}"#
        );
        let Some(ToolSignal::ApprovalNeeded(req)) = parse_tool_line(line.as_bytes()) else {
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
        let Some(ToolSignal::ApprovalNeeded(req)) = parse_tool_line(line.as_bytes()) else {
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
}
