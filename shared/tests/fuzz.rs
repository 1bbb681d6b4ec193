//! Property-based fuzzing (proptest) of everything that reads what a tool wrote: the
//! event-line parser (`event::parse_tool_line`), the screen sanitizer
//! (`sanitize::{sanitize_text, sanitize_line, sanitize_bytes}`), the prompt matcher
//! (`prompt::classify`) and prompt fingerprints (`fingerprint::normalize_prompt`).
//!
//! Inputs are arbitrary bytes and strings built from hostile pieces: escape sequences
//! (complete and cut off), NUL and other C0/C1 controls, invalid UTF-8, bidi controls,
//! JSON-shaped fragments, well-formed events with wrong-typed, duplicated and oversized
//! fields, prompt shapes, and single inputs of about 1 MB.
//!
//! The CI budget is small: 256 cases per property (1/64 of that, at least 4, for the 1 MB
//! inputs), about two seconds for the whole file. A longer run, 100 000 cases per property
//! (about ten minutes in a debug build; `--release` makes it several times faster):
//!
//! ```sh
//! PROPTEST_CASES=100000 cargo test -p headless-run-shared --test fuzz
//! ```
//!
//! A failing case is shrunk and printed, and its seed saved in
//! `fuzz.proptest-regressions` beside this file (checked in: those cases run first, every
//! time). The 1 MB properties save none: fix what they find and pin it with a unit test.

use hr_shared::event::{
    ApprovalOption, Channel, EventToken, MAX_EVENT_LINE, ToolSignal, is_safe_id, parse_tool_line,
};
use hr_shared::fingerprint::{self, normalize_prompt};
use hr_shared::prompt::{self, CONTEXT_LINES, MENU_QUESTION_LINES, QUESTION_LINES, ScreenFacts};
use hr_shared::sanitize::{sanitize_bytes, sanitize_line, sanitize_text};
use proptest::collection::vec;
use proptest::prelude::*;
use proptest::sample::select;
use proptest::test_runner::TestRunner;
use serde_json::{Map, Value, json};

/// For the 1 MB inputs: runs `test` on `strategy` for 1/`HUGE_SHARE` of the configured
/// cases (`PROPTEST_CASES`, default 256), at least 4. (A `proptest!` block cannot do this:
/// `PROPTEST_CASES` overrides any count given to it.)
fn run_huge<S: Strategy>(strategy: S, test: impl Fn(S::Value) -> Checked)
where
    S::Value: std::fmt::Debug,
{
    let base = ProptestConfig::default();
    let mut runner = TestRunner::new(ProptestConfig {
        cases: (base.cases / HUGE_SHARE).max(4),
        // A 1 MB counterexample is shrunk, reported and fixed, not stored.
        failure_persistence: None,
        ..base
    });
    if let Err(e) = runner.run(&strategy, test) {
        panic!("{e}");
    }
}

/// How much rarer the 1 MB cases are than the others.
const HUGE_SHARE: u32 = 64;

// ------------------------------------------------------------------------ what's safe

/// The bidirectional controls (Unicode's Bidi_Control property): marks, embeddings,
/// overrides and isolates, which can make text read in another order than it is stored.
fn is_bidi_control(c: char) -> bool {
    matches!(c, '\u{061c}' | '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
        // Invisible characters and Unicode line/paragraph separators go too.
        || matches!(c, '\u{200b}'..='\u{200d}' | '\u{2060}' | '\u{feff}' | '\u{2028}' | '\u{2029}')
        // And every other default-ignorable character: tags, invisible operators,
        // fillers, variation selectors, the soft hyphen (issue 12.15).
        || matches!(
            c,
            '\u{00ad}'
                | '\u{034f}'
                | '\u{115f}'
                | '\u{1160}'
                | '\u{17b4}'
                | '\u{17b5}'
                | '\u{180b}'..='\u{180f}'
                | '\u{2061}'..='\u{2065}'
                | '\u{206a}'..='\u{206f}'
                | '\u{3164}'
                | '\u{fe00}'..='\u{fe0f}'
                | '\u{ffa0}'
                | '\u{fff0}'..='\u{fffb}'
                | '\u{1bca0}'..='\u{1bca3}'
                | '\u{1d173}'..='\u{1d17a}'
                | '\u{e0000}'..='\u{e0fff}'
        )
}

/// Text that cannot drive a terminal: no ESC, no C0/C1 control (but `\n` where
/// `newlines` allows it), no bidi control.
fn terminal_safe(what: &str, s: &str, newlines: bool) -> Checked {
    for c in s.chars() {
        let ok = if c == '\n' {
            newlines
        } else {
            !c.is_control() && !is_bidi_control(c)
        };
        prop_assert!(ok, "{} holds {:?}: {:?}", what, c, s);
    }
    Ok(())
}

/// What a check returns: a failure is shrunk and reported by proptest (without the panic
/// noise of `assert!`).
type Checked = Result<(), TestCaseError>;

// ------------------------------------------------------------------------ generators

/// Pieces that matter to the code under test, as raw bytes (some of them not UTF-8).
const FRAGMENTS: &[&[u8]] = &[
    // JSON shapes and the event vocabulary.
    b"{",
    b"}",
    b"[",
    b"]",
    b",",
    b":",
    b"\"",
    b"\\",
    b"\"event\"",
    b"\"heartbeat\"",
    b"\"approval_needed\"",
    b"\"question\"",
    b"\"options\"",
    b"\"default\"",
    b"\"approvalId\"",
    b"\"approval_id\"",
    b"\"toolRunId\"",
    b"\"context\"",
    b"\"allowsText\"",
    b"\"message\"",
    b"\"value\"",
    b"\"label\"",
    b"{\"event\":\"heartbeat\"}",
    b"{\"event\":\"approval_needed\",\"question\":\"Go?\"}",
    b"true",
    b"null",
    b"42",
    b"-1e999",
    b"1e400",
    b"\"\\u001b[31m\"",
    b"\"\\u0000\"",
    b"\"\\ud800\"",
    b"\"\\udc00\\ud800\"",
    b"\"\\n\"",
    // Escape sequences, whole and cut off, 7-bit and 8-bit (C1 as UTF-8 and as raw bytes).
    b"\x1b",
    b"\x1b[",
    b"\x1b[1;31m",
    b"\x1b[0m",
    b"\x1b[2J\x1b[H",
    b"\x1b[?1049h",
    b"\x1b[10;5H",
    b"\x1b]0;title\x07",
    b"\x1b]8;;http://x\x1b\\",
    b"\x1b]",
    b"\x1bP",
    b"\x1bPq#0\x1b\\",
    b"\x1b\\",
    b"\x1b(B",
    b"\x1b(",
    b"\x1b7",
    b"\x07",
    b"\x08",
    b"\x7f",
    b"\xc2\x9b",
    b"\xc2\x9b31m",
    b"\xc2\x9c",
    b"\xc2\x9d",
    b"\xc2\x90",
    b"\x9b",
    b"\x00",
    b"\r",
    b"\n",
    b"\r\n",
    b"\t",
    b" ",
    b"   ",
    // Invisible characters: a tag, an invisible operator, fillers, a variation selector.
    "\u{e0041}\u{e0020}".as_bytes(),
    "\u{2062}".as_bytes(),
    "\u{3164}\u{115f}".as_bytes(),
    "\u{180e}".as_bytes(),
    "\u{fe0f}".as_bytes(),
    // Invalid UTF-8: stray bytes, a cut-off sequence, a surrogate, an overlong NUL.
    b"\xff",
    b"\xfe",
    b"\xc3",
    b"\xe2\x80",
    b"\xed\xa0\x80",
    b"\xc0\x80",
    // Bidi controls (RLO, LRI, PDI, RLM, ALM) and other invisibles.
    b"\xe2\x80\xae",
    b"\xe2\x81\xa6",
    b"\xe2\x81\xa9",
    b"\xe2\x80\x8f",
    b"\xd8\x9c",
    b"\xe2\x80\x8b",
    b"\xef\xbb\xbf",
    b"\xe2\x80\xa8",
    // Prompt shapes.
    b"Proceed? [y/N] ",
    b"[Y/n]",
    b"(y/n)",
    b"(yes/no)",
    b"(yes/no/[fingerprint])? ",
    b"([y]/n)",
    b"(y)",
    b"(Y)es/(N)o/(A)ll/(S)kip all [Yes]: ",
    b"(i)gnore, (w)ipe, (b)ackup",
    b"1) Proceed",
    b"2. Yes",
    b"\xe2\x9d\xaf 1. Yes",
    b"[3] Cancel",
    b" (default)",
    b"Press Enter to continue",
    b"Country Name (2 letter code) [AU]:",
    b"[]: ",
    b"Password: ",
    b"Enter passphrase for key '/root/.ssh/id_ed25519': ",
    b"  Enter a value: ",
    b"Only 'yes' will be accepted to approve.",
    b"Would you like to run the following command?",
    b"rm: remove regular file '/tmp/tmp.x81/a.txt'? ",
    b"? ",
    b": ",
    b"/tmp/x/y",
    b"9f86d081884c7d65",
    b"12345",
    // Small tokens that compose into shapes no fragment above has.
    b"(",
    b")",
    b"/",
    b"y",
    b"Y",
    b"yes",
    b"Yes",
    b"n",
    b"N",
    b"no",
    b"No",
    b"1.",
    b"2)",
];

/// One piece of hostile input.
fn fragment() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        4 => select(FRAGMENTS).prop_map(<[u8]>::to_vec),
        2 => vec(any::<u8>(), 1..12),
        2 => vec(any::<char>(), 1..8).prop_map(|cs| cs.into_iter().collect::<String>().into_bytes()),
        1 => "[a-zA-Z0-9 ]{1,12}".prop_map(String::into_bytes),
    ]
}

/// Arbitrary bytes: hostile pieces run together.
fn hostile_bytes(max_pieces: usize) -> impl Strategy<Value = Vec<u8>> {
    vec(fragment(), 0..max_pieces).prop_map(|v| v.concat())
}

/// Arbitrary text: the same, read as (lossy) UTF-8.
fn hostile_text(max_pieces: usize) -> impl Strategy<Value = String> {
    hostile_bytes(max_pieces).prop_map(|b| String::from_utf8_lossy(&b).into_owned())
}

/// About 1 MB of one repeated hostile piece, with a hostile head and tail.
fn huge_bytes() -> impl Strategy<Value = Vec<u8>> {
    (hostile_bytes(8), fragment(), hostile_bytes(8)).prop_map(|(head, piece, tail)| {
        let mut b = head;
        let times = (1 << 20) / piece.len().max(1);
        b.extend(piece.repeat(times));
        b.extend(tail);
        b
    })
}

/// A JSON value of a type a field may wrongly have.
fn wrong_typed() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(Value::from),
        Just(json!([])),
        Just(json!({})),
        Just(json!([1, "two", null])),
        Just(json!({"value": 1})),
    ]
}

/// How a generated event is meant to come out of the parser.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Expect {
    Heartbeat,
    Approval,
    /// A pipeline step's result (not generated here: a `result` line must not come out of
    /// another event).
    Result,
    /// An `error` event: its message becomes the run's `last_error_msg`.
    Error,
    NotAnEvent,
}

/// A well-formed event line (heartbeat or approval_needed) with hostile field values, or
/// one made wrong on purpose (a wrong-typed field, both spellings of an id, an unknown
/// event, a blank question), with what the parser must make of it.
fn event_line() -> impl Strategy<Value = (Vec<u8>, Expect)> {
    let text = || hostile_text(6);
    let option = prop_oneof![
        text().prop_map(Value::from),
        (text(), proptest::option::of(text())).prop_map(|(v, l)| json!({"value": v, "label": l})),
    ];
    (
        select(
            &[
                "heartbeat",
                "approval_needed",
                "approval_needed",
                "error",
                "other",
            ][..],
        ),
        text(),
        vec(option, 0..40),
        proptest::option::of(text()),
        // Id spellings: 0 none, 1 camelCase, 2 snake_case, 3 both.
        0..4u8,
        text(),
        proptest::option::of(any::<bool>()),
        proptest::option::of(text()),
        // Which field, if any, gets a wrong type (0..=5), or none (6+).
        0..12u8,
        wrong_typed(),
        any::<bool>(),
    )
        .prop_map(
            |(event, question, options, default, ids, id, allows, context, wrong, bad, pad)| {
                let mut m = Map::new();
                m.insert("event".into(), Value::from(event));
                let mut expect = match event {
                    "heartbeat" => Expect::Heartbeat,
                    "error" if !sanitize_text(&question).trim().is_empty() => Expect::Error,
                    "approval_needed" if !sanitize_text(&question).trim().is_empty() => {
                        Expect::Approval
                    }
                    _ => Expect::NotAnEvent,
                };
                if event == "heartbeat" || event == "error" {
                    m.insert("message".into(), Value::from(question));
                } else {
                    m.insert("question".into(), Value::from(question));
                    m.insert("options".into(), Value::from(options));
                    if let Some(d) = default {
                        m.insert("default".into(), Value::from(d));
                    }
                    if let Some(a) = allows {
                        m.insert("allowsText".into(), Value::from(a));
                    }
                    if let Some(c) = context {
                        m.insert("context".into(), Value::from(c));
                    }
                }
                if ids & 1 != 0 {
                    m.insert("approvalId".into(), Value::from(id.clone()));
                }
                if ids & 2 != 0 {
                    m.insert("approval_id".into(), Value::from(id));
                }
                if ids == 3 {
                    // Both spellings of one field: a duplicate, not an event.
                    expect = Expect::NotAnEvent;
                }
                let field = match wrong {
                    0 if event == "heartbeat" || event == "error" => Some("message"),
                    0 => Some("question"),
                    1 => Some("options"),
                    2 => Some("default"),
                    3 => Some("allowsText"),
                    4 => Some("context"),
                    5 => Some("toolRunId"),
                    _ => None,
                };
                if let Some(field) = field {
                    // Every field but `event` is optional: null is as good as absent, and
                    // a bool is the right type for allowsText, an empty array for options.
                    let right_type = bad.is_null()
                        || (field == "allowsText" && bad.is_boolean())
                        || (field == "options" && bad == json!([]));
                    // A null question is no question.
                    // A null question (or an error's null message) is none.
                    if !right_type
                        || (field == "question" && bad.is_null())
                        || (field == "message" && event == "error" && bad.is_null())
                    {
                        expect = Expect::NotAnEvent;
                    }
                    m.insert(field.into(), bad);
                }
                let mut line = serde_json::to_vec(&Value::Object(m)).expect("serialize");
                if pad {
                    line.splice(0..0, b"  ".iter().copied());
                    line.extend(b" \r");
                }
                if line.len() > MAX_EVENT_LINE {
                    expect = Expect::NotAnEvent;
                }
                (line, expect)
            },
        )
}

// ------------------------------------------------------------------------ the checks

/// Everything an accepted event must be: a whole JSON object under the bound, with every
/// field bounded and every id and option value safe.
fn check_event(line: &[u8], signal: &ToolSignal) -> Checked {
    prop_assert!(
        line.len() <= MAX_EVENT_LINE,
        "accepted {} bytes",
        line.len()
    );
    let value: Result<Value, _> = serde_json::from_slice(line.trim_ascii());
    prop_assert!(
        value.as_ref().is_ok_and(Value::is_object),
        "accepted what is not a JSON object ({:?}): {:?}",
        value,
        String::from_utf8_lossy(line)
    );
    match signal {
        ToolSignal::Heartbeat { message } => {
            if let Some(m) = message {
                prop_assert!(m.len() <= 256, "heartbeat message of {} bytes", m.len());
                terminal_safe("heartbeat message", m, false)?;
            }
        }
        ToolSignal::Result(data) => {
            prop_assert!(data.is_object(), "a result that is not an object: {data}");
        }
        ToolSignal::Error { message } => {
            prop_assert!(!message.trim().is_empty(), "blank error");
            prop_assert!(
                message.len() <= 1024,
                "error message of {} bytes",
                message.len()
            );
            terminal_safe("error message", message, false)?;
        }
        ToolSignal::ApprovalNeeded(req)
        | ToolSignal::PermissionRequest(hr_shared::event::PermissionRequest {
            request: req, ..
        }) => {
            prop_assert!(!req.question.trim().is_empty(), "blank question");
            prop_assert!(
                req.question.len() <= 2048,
                "question of {}",
                req.question.len()
            );
            prop_assert!(req.context.as_ref().is_none_or(|c| c.len() <= 8192));
            // Nothing that could drive a terminal or hide text (issue 12.15).
            terminal_safe("question", &req.question, true)?;
            if let Some(c) = &req.context {
                terminal_safe("context", c, true)?;
            }
            for o in &req.options {
                terminal_safe("option value", &o.value, false)?;
                terminal_safe("option label", &o.label, false)?;
            }
            for id in [&req.approval_id, &req.tool_run_id].into_iter().flatten() {
                prop_assert!(is_safe_id(id), "unsafe id {id:?}");
            }
            prop_assert!(
                (1..=32).contains(&req.options.len()),
                "{} options",
                req.options.len()
            );
            check_option_values(&req.options)?;
            for o in &req.options {
                prop_assert!(o.label.len() <= 256, "label of {}", o.label.len());
                prop_assert_eq!(
                    o.keys.as_deref(),
                    None,
                    "a tool cannot choose the keys typed"
                );
            }
            if let Some(d) = &req.default {
                prop_assert!(req.options.iter().any(|o| &o.value == d), "default {d:?}");
            }
        }
    }
    Ok(())
}

/// Option values a person can type on a command line: one short line, no control
/// character, no surrounding space, each offered once.
fn check_option_values(options: &[ApprovalOption]) -> Checked {
    for (i, o) in options.iter().enumerate() {
        prop_assert!(!o.value.is_empty(), "empty option value");
        prop_assert!(o.value.len() <= 256, "option value of {}", o.value.len());
        prop_assert!(
            !o.value.chars().any(char::is_control),
            "option value {:?}",
            o.value
        );
        prop_assert_eq!(
            o.value.trim(),
            o.value.as_str(),
            "option value with spacing"
        );
        prop_assert!(
            !options[..i].iter().any(|p| p.value == o.value),
            "option value {:?} offered twice: {options:?}",
            o.value
        );
    }
    Ok(())
}

fn check_sanitizers(input: &str) -> Checked {
    let text = sanitize_text(input);
    let line = sanitize_line(input);
    terminal_safe("sanitize_text", &text, true)?;
    terminal_safe("sanitize_line", &line, false)?;
    prop_assert_eq!(
        &sanitize_text(&text),
        &text,
        "sanitize_text is not idempotent"
    );
    prop_assert_eq!(
        &sanitize_line(&line),
        &line,
        "sanitize_line is not idempotent"
    );
    prop_assert_eq!(&line, &text.replace('\n', " "), "line and text disagree");
    prop_assert!(text.len() <= input.len(), "sanitizing added text");
    Ok(())
}

// ------------------------------------------------------------------------ parse_tool_line

/// A line read from the event descriptor, where every event line counts.
fn on_fd(line: &[u8]) -> Option<ToolSignal> {
    parse_tool_line(line, Channel::EventFd, None)
}

const TOKEN: &str = "00112233445566778899aabbccddeeff";

/// `line` (a JSON object) with `"token":TOKEN` as its first field.
fn with_token(line: &[u8]) -> Vec<u8> {
    let start = line.iter().position(|&b| b == b'{').map_or(0, |i| i + 1);
    let mut out = line[..start].to_vec();
    out.extend(format!("\"token\":\"{TOKEN}\",").as_bytes());
    out.extend(&line[start..]);
    out
}

proptest! {
    #[test]
    fn parse_tool_line_on_hostile_bytes(line in hostile_bytes(48)) {
        if let Some(signal) = on_fd(&line) {
            check_event(&line, &signal)?;
        }
    }

    #[test]
    fn parse_tool_line_on_arbitrary_bytes(line in vec(any::<u8>(), 0..512)) {
        if let Some(signal) = on_fd(&line) {
            check_event(&line, &signal)?;
        }
    }

    #[test]
    fn parse_tool_line_on_generated_events((line, expect) in event_line()) {
        let got = on_fd(&line);
        if let Some(signal) = &got {
            check_event(&line, signal)?;
        }
        let kind = match got {
            Some(ToolSignal::Heartbeat { .. }) => Expect::Heartbeat,
            Some(ToolSignal::ApprovalNeeded(_) | ToolSignal::PermissionRequest(_)) => {
                Expect::Approval
            }
            Some(ToolSignal::Result(_)) => Expect::Result,
            Some(ToolSignal::Error { .. }) => Expect::Error,
            None => Expect::NotAnEvent,
        };
        prop_assert_eq!(kind, expect, "{}", String::from_utf8_lossy(&line));
    }

    /// On the terminal a line is an event only with the run's token, and then the same
    /// event as on the descriptor (issue 12.14).
    #[test]
    fn on_the_terminal_only_the_token_makes_an_event((line, _) in event_line()) {
        let token = EventToken::from_hex(TOKEN).unwrap();
        prop_assert_eq!(parse_tool_line(&line, Channel::Terminal, Some(&token)), None);
        prop_assert_eq!(parse_tool_line(&line, Channel::Terminal, None), None);
        let tokened = with_token(&line);
        if tokened.len() <= MAX_EVENT_LINE {
            prop_assert_eq!(
                parse_tool_line(&tokened, Channel::Terminal, Some(&token)),
                on_fd(&line),
                "{}",
                String::from_utf8_lossy(&tokened)
            );
        }
    }

    #[test]
    fn parse_tool_line_never_takes_part_of_a_line(
        (line, _) in event_line(),
        junk in prop_oneof![Just(b"x".to_vec()), Just(b"\x1b[0m".to_vec()), Just(b"\0".to_vec()), Just(b"{}".to_vec())],
        before in any::<bool>(),
    ) {
        let mut framed = line.clone();
        if before {
            framed.splice(0..0, junk);
        } else {
            framed.extend(junk);
        }
        prop_assert_eq!(on_fd(&framed), None, "{}", String::from_utf8_lossy(&framed));
    }
}

#[test]
fn parse_tool_line_on_huge_lines() {
    run_huge((huge_bytes(), any::<bool>()), |(line, wrap)| {
        let line = if wrap {
            // JSON-shaped: a heartbeat whose message is the whole huge input.
            let mut l = b"{\"event\":\"heartbeat\",\"message\":\"".to_vec();
            l.extend(
                line.iter()
                    .filter(|&&b| b != b'"' && b != b'\\' && (0x20..0x7f).contains(&b)),
            );
            l.extend(b"\"}");
            l
        } else {
            line
        };
        let got = on_fd(&line);
        if line.len() > MAX_EVENT_LINE {
            prop_assert!(got.is_none(), "accepted a line of {} bytes", line.len());
        }
        if let Some(signal) = got {
            check_event(&line, &signal)?;
        }
        Ok(())
    });
}

// ------------------------------------------------------------------------ sanitizers

proptest! {
    #[test]
    fn sanitizers_on_hostile_text(input in hostile_text(64)) {
        check_sanitizers(&input)?;
    }

    #[test]
    fn sanitizers_on_arbitrary_chars(input in vec(any::<char>(), 0..256).prop_map(String::from_iter)) {
        check_sanitizers(&input)?;
    }

    #[test]
    fn sanitize_bytes_on_arbitrary_bytes(input in hostile_bytes(64)) {
        let out = sanitize_bytes(&input);
        terminal_safe("sanitize_bytes", &out, true)?;
        prop_assert_eq!(sanitize_text(&out), out);
    }

    #[test]
    fn sanitizers_keep_safe_text_as_it_is(
        input in vec(any::<char>(), 0..128)
            .prop_map(|cs| cs.into_iter()
                .filter(|&c| c == '\n' || (!c.is_control() && !is_bidi_control(c)))
                .collect::<String>())
    ) {
        prop_assert_eq!(sanitize_text(&input), input.clone());
        prop_assert_eq!(sanitize_line(&input), input.replace('\n', " "));
    }
}

#[test]
fn sanitizers_on_huge_text() {
    run_huge(huge_bytes(), |input| {
        check_sanitizers(&String::from_utf8_lossy(&input))
    });
}

// ------------------------------------------------------------------------ prompt::classify

fn tool_name() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => select(&["rm", "cp", "terraform", "codex", "apt-get", "ssh", "git", "sh", "python3"][..])
            .prop_map(str::to_owned),
        1 => hostile_text(3),
    ]
}

/// A screen: rows of hostile text (prompt shapes among them), the cursor's line, modes.
fn screen(
    max_row_pieces: usize,
) -> impl Strategy<Value = (String, Vec<String>, String, bool, bool)> {
    (
        tool_name(),
        vec(hostile_text(max_row_pieces), 0..30),
        hostile_text(max_row_pieces),
        any::<bool>(),
        any::<bool>(),
    )
}

fn check_classify(
    tool: &str,
    rows: &[String],
    prompt_line: &str,
    echo: bool,
    canonical: bool,
) -> Checked {
    let facts = ScreenFacts {
        tool,
        rows,
        prompt_line,
        echo,
        canonical,
        below: &[],
        cursor_hidden: false,
        emphasis: &[],
    };
    let p = prompt::classify(&facts, std::iter::empty());
    terminal_safe("question", &p.question, true)?;
    terminal_safe("context", &p.context, true)?;
    terminal_safe("prompt_line", &p.prompt_line, false)?;
    // A numbered menu's question keeps its title and items (up to MENU_QUESTION_LINES);
    // any other question at most QUESTION_LINES.
    use hr_shared::approvals::PromptKind;
    let limit = if matches!(
        p.kind,
        PromptKind::Menu | PromptKind::Select | PromptKind::MultiSelect
    ) {
        MENU_QUESTION_LINES
    } else {
        QUESTION_LINES
    };
    prop_assert!(
        p.question.lines().count() <= limit,
        "question: {:?}",
        p.question
    );
    prop_assert!(
        p.context.lines().count() <= CONTEXT_LINES,
        "context: {:?}",
        p.context
    );
    if p.secret {
        prop_assert!(p.options.is_empty(), "a secret prompt with answers: {p:?}");
        prop_assert_eq!(p.default, None);
        return Ok(());
    }
    prop_assert!(!p.options.is_empty(), "no way to answer or abort: {p:?}");
    check_option_values(&p.options)?;
    for o in &p.options {
        terminal_safe("option label", &o.label, false)?;
        if let Some(keys) = &o.keys {
            prop_assert!(!keys.is_empty(), "empty keys for {:?}", o.value);
            for c in keys.chars() {
                prop_assert!(
                    c == '\r' || c == '\x1b' || (!c.is_control() && !is_bidi_control(c)),
                    "keys {keys:?} for {:?} hold {c:?}",
                    o.value
                );
            }
            prop_assert_eq!(
                p.keys_for(&o.value, canonical),
                Some(keys.as_bytes().to_vec()),
                "keys_for {:?}",
                o.value
            );
        }
    }
    if let Some(d) = &p.default {
        // A multi-select's default is a set of its items; any other's, one of its options.
        prop_assert!(
            p.options.iter().any(|o| &o.value == d) || p.check_set(d).is_some(),
            "default {d:?} in {p:?}"
        );
    }
    Ok(())
}

proptest! {
    #[test]
    fn classify_on_hostile_screens((tool, rows, prompt_line, echo, canonical) in screen(12)) {
        check_classify(&tool, &rows, &prompt_line, echo, canonical)?;
    }

    #[test]
    fn classify_free_text_answers_are_one_clean_line(
        (tool, rows, prompt_line, _echo, canonical) in screen(6),
        answer in hostile_text(6),
    ) {
        let facts = ScreenFacts { tool: &tool, rows: &rows, prompt_line: &prompt_line, echo: true, canonical, below: &[], cursor_hidden: false , emphasis: &[]};
        let p = prompt::classify(&facts, std::iter::empty());
        let is_option = p.option_for(&answer).is_some();
        if let (Some(keys), false) = (p.keys_for(&answer, canonical), is_option) {
            // Free text is typed as it is (and Enter in line mode), only where allowed,
            // and only when it is one line without control characters.
            prop_assert!(p.allows_text, "free text typed into {:?}", p.rule);
            let want = if canonical { format!("{answer}\r") } else { answer.clone() };
            prop_assert_eq!(String::from_utf8_lossy(&keys), want);
            prop_assert!(!answer.is_empty() && !answer.chars().any(char::is_control), "typed {:?}", answer);
        }
    }
}

#[test]
fn classify_on_huge_screens() {
    let strategy = (huge_bytes(), 0..3usize, any::<bool>(), any::<bool>());
    run_huge(strategy, |(line, rows, echo, canonical)| {
        let text = String::from_utf8_lossy(&line).into_owned();
        let rows: Vec<String> = vec![text.clone(); rows];
        check_classify("sh", &rows, &text, echo, canonical)
    });
}

// ------------------------------------------------------------------------ fingerprints

/// A word of a prompt: printable, no spacing, no control.
fn word() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => "[A-Za-z0-9'\"?:()\\[\\]/._-]{1,12}",
        1 => vec(any::<char>(), 1..6).prop_map(|cs| cs
            .into_iter()
            .filter(|c| !c.is_whitespace() && !c.is_control() && !is_bidi_control(*c))
            .collect::<String>())
            .prop_filter("non-empty", |w| !w.is_empty()),
        1 => select(&["[y/N]", "(yes/no)", "/tmp/tmp.x81Qa/a.txt", "'/tmp/x/a.txt'?", "9f86d081884c7d65", "3", "of", "…"][..])
            .prop_map(str::to_owned),
    ]
}

/// Escape sequences that change how a prompt looks, not what it says.
const STYLING: &[&str] = &[
    "\x1b[0m",
    "\x1b[1m",
    "\x1b[1;31m",
    "\x1b[38;5;208m",
    "\x1b[2K",
    "\x1b[?25l",
    "\x1b]0;title\x07",
    "\x1b]8;;http://example.invalid\x1b\\",
    "\x1b(B",
    "\u{9b}0m",
];

/// Spacing that separates words.
const SPACING: &[&str] = &[" ", "  ", "\t", " \t ", "\u{a0}", "\n", "   "];

proptest! {
    #[test]
    fn normalize_prompt_ignores_spacing_and_styling(
        words in vec(word(), 1..12),
        seps in vec(select(SPACING), 12),
        styles in vec((any::<prop::sample::Index>(), select(STYLING)), 0..6),
        lead in select(SPACING),
        trail in select(SPACING),
        tool in tool_name(),
    ) {
        let plain = words.join(" ");
        // The same words with other spacing and escape codes in and between words.
        let mut styled = String::from(lead);
        for (i, w) in words.iter().enumerate() {
            if i > 0 {
                styled.push_str(seps[i % seps.len()]);
            }
            styled.push_str(w);
        }
        styled.push_str(trail);
        // Inserted at places in the text, never inside another escape code.
        let bounds: Vec<usize> = (0..=styled.len()).filter(|&b| styled.is_char_boundary(b)).collect();
        let mut at: Vec<(usize, &str)> = styles.iter().map(|(i, code)| (bounds[i.index(bounds.len())], *code)).collect();
        at.sort_by_key(|&(b, _)| std::cmp::Reverse(b));
        for (b, code) in at {
            styled.insert_str(b, code);
        }
        let norm = normalize_prompt(&plain);
        prop_assert_eq!(&normalize_prompt(&styled), &norm, "styled: {:?}", styled);
        prop_assert_eq!(fingerprint::prompt(&tool, &styled), fingerprint::prompt(&tool, &plain));
        prop_assert_eq!(normalize_prompt(&norm), norm.clone(), "not idempotent");
        terminal_safe("normalized prompt", &norm, false)?;
    }

    #[test]
    fn normalize_prompt_on_hostile_text(input in hostile_text(32)) {
        let norm = normalize_prompt(&input);
        terminal_safe("normalized prompt", &norm, false)?;
        prop_assert_eq!(norm.trim(), norm.as_str());
        prop_assert!(!norm.contains("  "), "double space in {:?}", norm);
    }
}
