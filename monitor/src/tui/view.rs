//! What the screen says, as text: each row, line and card the dashboard draws, with every
//! string a tool could have written (names, questions, context, output, reasons, argv,
//! ids, log lines) sanitized here. `draw` only lays these out and colours them, so the
//! tests can check this model itself — ratatui quietly drops some characters on its own,
//! which would hide a missing sanitizer from a test that only looks at the screen.

use super::app::{App, Input, InputKind, Notice};
use super::feed::{EXPIRY_SOON, RunDetail};
use super::tail::{LogKind, LogLine, short_id};
use hr_shared::approvals::Approval;
use hr_shared::audit::AuditRow;
use hr_shared::runs::ToolRun;
use hr_shared::sanitize::sanitize_line;
use hr_shared::status::{ApprovalStatus, RunStatus};
use hr_shared::time::{parse_rfc3339, short_duration};
use std::time::{Duration, SystemTime};

/// A string a tool could have written, made safe to draw on one line.
pub fn clean(s: &str) -> String {
    sanitize_line(s)
}

fn since(now: SystemTime, stamp: &str) -> Option<Duration> {
    now.duration_since(parse_rfc3339(stamp)?).ok()
}

/// `4m05s`, or `—` when there is no such time.
pub fn ago(now: SystemTime, stamp: Option<&str>) -> String {
    match stamp.and_then(|s| since(now, s)) {
        Some(d) => short_duration(d),
        None => "—".into(),
    }
}

/// `4m05s ago`, or `never` when there is no such time.
fn ago_phrase(now: SystemTime, stamp: Option<&str>) -> String {
    match stamp.and_then(|s| since(now, s)) {
        Some(d) => format!("{} ago", short_duration(d)),
        None => "never".into(),
    }
}

/// How long a run took, or has taken so far.
fn took(now: SystemTime, run: &ToolRun) -> String {
    let Some(start) = parse_rfc3339(&run.started_at) else {
        return "—".into();
    };
    let end = hr_shared::runs::worked_until(run)
        .and_then(parse_rfc3339)
        .unwrap_or(now);
    end.duration_since(start)
        .map(short_duration)
        .unwrap_or_else(|_| "—".into())
}

/// Time left before an approval expires: `(text, urgent)`.
fn time_left(now: SystemTime, a: &Approval) -> (String, bool) {
    let Some(exp) = a.expires_at.as_deref().and_then(parse_rfc3339) else {
        return ("—".into(), false);
    };
    match exp.duration_since(now) {
        Ok(d) => (short_duration(d), d <= EXPIRY_SOON),
        Err(_) => ("overdue".into(), true),
    }
}

/// `1:yes 2:no t:text`: the keys that answer an approval.
fn options_summary(a: &Approval) -> String {
    let mut parts: Vec<String> = a
        .options_json
        .iter()
        .enumerate()
        .take(9)
        .map(|(i, o)| format!("{}:{}", i + 1, clean(&o.value)))
        .collect();
    if a.options_json.len() > 9 {
        parts.push("…".into());
    }
    if a.allows_text {
        parts.push("t:text".into());
    }
    parts.join(" ")
}

/// The `HH:MM:SS` of a stored timestamp.
fn clock(stamp: &str) -> String {
    clean(stamp.get(11..19).unwrap_or(""))
}

/// One row of the runs table.
#[derive(Debug, Clone, PartialEq)]
pub struct RunRow {
    pub id: String,
    pub tool: String,
    /// As shown: a live run whose shim vanished is failed.
    pub status: RunStatus,
    /// The status word (`resumed` for a parked run a later run took up).
    pub status_word: &'static str,
    pub started: String,
    pub took: String,
    pub last_output: String,
    pub exit: String,
    pub reason: String,
}

pub fn run_row(app: &App, r: &ToolRun) -> RunRow {
    let reason = app
        .vanished_reason(r)
        .or(r.reason.as_deref())
        .unwrap_or_default();
    RunRow {
        id: short_id(&r.tool_run_id),
        tool: clean(&r.tool_name),
        status: app.shown_status(r),
        status_word: if app.shown_status(r) == r.status {
            hr_shared::runs::shown_status(r)
        } else {
            app.shown_status(r).as_str()
        },
        started: ago(app.now, Some(&r.started_at)),
        took: took(app.now, r),
        last_output: ago(app.now, r.last_output_at.as_deref()),
        exit: r.exit_code.map(|c| c.to_string()).unwrap_or_default(),
        reason: clean(reason),
    }
}

/// One row of the pending approvals.
#[derive(Debug, Clone, PartialEq)]
pub struct ApprovalRow {
    pub id: String,
    pub tool: String,
    pub question: String,
    pub age: String,
    pub left: String,
    /// Expiring within [`EXPIRY_SOON`], or overdue.
    pub urgent: bool,
    pub options: String,
}

pub fn approval_row(app: &App, a: &Approval) -> ApprovalRow {
    let (left, urgent) = time_left(app.now, a);
    ApprovalRow {
        id: short_id(&a.approval_id),
        tool: clean(&a.tool_name),
        question: clean(&a.question),
        age: ago(app.now, Some(&a.created_at)),
        left,
        urgent,
        options: options_summary(a),
    }
}

/// One line of the log pane.
#[derive(Debug, Clone, PartialEq)]
pub struct LogRow {
    pub time: String,
    pub tool: String,
    pub run: String,
    pub kind: LogKind,
    pub text: String,
}

pub fn log_row(l: &LogLine) -> LogRow {
    LogRow {
        time: clean(&l.time),
        tool: clean(&l.tool),
        run: clean(&l.run),
        kind: l.kind,
        text: clean(&l.text),
    }
}

/// The fields of an open run.
#[derive(Debug, Clone, PartialEq)]
pub struct RunFields {
    pub title: String,
    pub status: RunStatus,
    pub exit: Option<i32>,
    pub reason: Option<String>,
    /// (name, value), in order.
    pub fields: Vec<(&'static str, String)>,
}

pub fn run_fields(app: &App, d: &RunDetail) -> RunFields {
    let r = &d.run;
    let opt = |v: Option<i64>| v.map(|p| p.to_string()).unwrap_or_else(|| "—".into());
    RunFields {
        title: format!(" Run {} · {} ", clean(&r.tool_run_id), clean(&r.tool_name)),
        status: app.shown_status(r),
        exit: r.exit_code,
        reason: app.vanished_reason(r).or(r.reason.as_deref()).map(clean),
        fields: vec![
            ("argv", clean(&r.argv_json.join(" "))),
            ("cwd", clean(r.cwd.as_deref().unwrap_or("—"))),
            (
                "started",
                format!(
                    "{} · took {}",
                    ago_phrase(app.now, Some(&r.started_at)),
                    took(app.now, r)
                ),
            ),
            (
                "last output",
                format!(
                    "{} · heartbeat {} · supervisor {}",
                    ago_phrase(app.now, r.last_output_at.as_deref()),
                    ago_phrase(app.now, r.last_heartbeat_at.as_deref()),
                    ago_phrase(app.now, r.supervisor_heartbeat_at.as_deref()),
                ),
            ),
            (
                "process",
                format!(
                    "pid {} · shim {} · host {}",
                    opt(r.pid),
                    opt(r.shim_pid),
                    clean(r.host.as_deref().unwrap_or("—"))
                ),
            ),
            ("execution", clean(r.execution_id.as_deref().unwrap_or("—"))),
            (
                "resumed from",
                clean(r.resumed_from.as_deref().unwrap_or("—")),
            ),
            ("started by", clean(r.owner.as_deref().unwrap_or("—"))),
        ]
        .into_iter()
        .chain(d.resume.as_deref().map(|n| ("resume", clean(n))))
        .collect(),
    }
}

/// One line of an open run's history.
#[derive(Debug, Clone, PartialEq)]
pub struct HistoryRow {
    pub time: String,
    pub event: String,
    /// The status it changed to, if it is a status change.
    pub what: String,
    pub actor: String,
}

pub fn history_row(e: &AuditRow) -> HistoryRow {
    let what = serde_json::from_str::<serde_json::Value>(&e.data)
        .ok()
        .and_then(|v| v.get("status").and_then(|s| s.as_str()).map(str::to_owned))
        .unwrap_or_default();
    HistoryRow {
        time: clock(&e.at),
        event: clean(&e.event.replace('_', " ")),
        what: clean(&what),
        actor: clean(&e.actor),
    }
}

/// One of an open run's approvals.
#[derive(Debug, Clone, PartialEq)]
pub struct RunApprovalRow {
    pub id: String,
    pub status: ApprovalStatus,
    pub question: String,
    /// Pending: `  [1:y 2:n]  left 23h59m`; decided: the answer and who gave it.
    pub note: String,
    pub decided_by: String,
}

pub fn run_approval_row(app: &App, a: &Approval) -> RunApprovalRow {
    let mut note = String::new();
    let mut decided_by = String::new();
    match a.status {
        ApprovalStatus::Pending => {
            let (left, _) = time_left(app.now, a);
            note = format!("  [{}]  left {left}", options_summary(a));
        }
        _ => {
            if let Some(v) = &a.chosen_value {
                note = format!("  → `{}`", clean(v));
            }
            if let Some(by) = &a.decided_by {
                decided_by = format!(
                    " by {} ({})",
                    clean(by),
                    clean(a.decision_channel.as_deref().unwrap_or("?"))
                );
            }
        }
    }
    RunApprovalRow {
        id: short_id(&a.approval_id),
        status: a.status,
        question: clean(&a.question),
        note,
        decided_by,
    }
}

/// One line of an open run's output.
pub fn output_line(l: &str) -> String {
    format!(" {}", clean(l))
}

/// One answer of an approval, as its card lists it.
#[derive(Debug, Clone, PartialEq)]
pub struct Answer {
    /// `1`-`9`, or blank past the ninth.
    pub key: String,
    pub value: String,
    pub label: String,
    pub default: bool,
}

/// A pending approval in full (the overlay).
#[derive(Debug, Clone, PartialEq)]
pub struct ApprovalCard {
    pub title: String,
    pub tool: String,
    /// `run TR-… · asked 5s ago · `
    pub asked: String,
    pub left: String,
    pub urgent: bool,
    pub status: ApprovalStatus,
    pub question: String,
    /// The last lines of the screen it was asked on.
    pub context: Vec<String>,
    /// The command that asked (shell-quoted), and `in DIR on HOST · execution EX-…`.
    pub command: Option<String>,
    pub place: Option<String>,
    pub answers: Vec<Answer>,
    pub allows_text: bool,
    /// What `a` does.
    pub approve: String,
    /// The comment that goes with the next decision, if one was typed for it.
    pub comment: Option<String>,
}

pub fn approval_card(app: &App, a: &Approval) -> ApprovalCard {
    let (left, urgent) = time_left(app.now, a);
    let asker = app.data.as_ref().and_then(|d| d.askers.get(&a.tool_run_id));
    let context = a
        .context
        .as_deref()
        .filter(|c| !c.trim().is_empty())
        .map(|ctx| {
            let lines: Vec<&str> = ctx.lines().collect();
            let keep = lines.len().saturating_sub(8);
            lines[keep..].iter().map(|l| clean(l)).collect()
        })
        .unwrap_or_default();
    let answers = a
        .options_json
        .iter()
        .enumerate()
        .map(|(i, o)| Answer {
            key: if i < 9 {
                format!("{}", i + 1)
            } else {
                " ".into()
            },
            value: clean(&o.value),
            label: clean(&o.label),
            default: a.default_value.as_deref() == Some(o.value.as_str()),
        })
        .collect();
    let comment = match &app.comment {
        Some((id, text)) if *id == a.approval_id => Some(clean(text)),
        _ => None,
    };
    ApprovalCard {
        title: format!(" Approval {} ", clean(&a.approval_id)),
        tool: clean(&a.tool_name),
        asked: format!(
            "run {} · asked {} ago · ",
            short_id(&a.tool_run_id),
            ago(app.now, Some(&a.created_at))
        ),
        left,
        urgent,
        status: a.status,
        question: clean(&a.question),
        context,
        command: asker
            .filter(|w| !w.argv.is_empty())
            .map(|w| clean(&crate::output::shell_words(&w.argv))),
        place: asker.map(|w| {
            let mut place = format!(
                "in {} on {}",
                clean(w.cwd.as_deref().unwrap_or("?")),
                clean(w.host.as_deref().unwrap_or("?"))
            );
            if let Some(ex) = &w.execution_id {
                place.push_str(&format!(" · execution {}", clean(ex)));
            }
            place
        }),
        answers,
        allows_text: a.allows_text,
        approve: match a.approve_value() {
            Some(v) => format!("approve (answers `{}`)", clean(v)),
            None => "approve: not available (no approving answer)".into(),
        },
        comment,
    }
}

/// The filter as the runs pane's title shows it, if there is one.
pub fn filter_text(app: &App) -> Option<String> {
    (!app.query.is_empty()).then(|| clean(&app.query.text))
}

/// What is being typed in the status line.
pub fn input_text(input: &Input) -> String {
    clean(&input.buf)
}

/// The label before what is being typed.
pub fn input_label(input: &Input) -> String {
    match &input.kind {
        InputKind::Filter => " / filter: ".to_owned(),
        InputKind::Text(id) => format!(" answer for {}: ", short_id(id)),
        InputKind::Comment(id) => format!(" comment for {}: ", short_id(id)),
    }
}

/// The question before a run is cancelled.
pub fn confirm_cancel_text(app: &App, run_id: &str) -> String {
    let tool = app
        .runs()
        .iter()
        .find(|r| r.tool_run_id == run_id)
        .map(|r| clean(&r.tool_name))
        .unwrap_or_default();
    format!(" Cancel run {} {tool}? ", short_id(run_id))
}

pub fn notice_text(n: &Notice) -> String {
    format!(" {}", clean(&n.text))
}

/// Every string this state could put on the screen, whichever pane, view or overlay is
/// showing: each run, approval (as a row and as a card), log line, the open run, and the
/// status line. For tests.
#[cfg(test)]
pub fn all_texts(app: &App) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    out.extend(app.problem.as_deref().map(clean));
    out.push(clean(&app.state_dir));
    out.extend(filter_text(app));
    if let Some(input) = &app.input {
        out.push(input_label(input));
        out.push(input_text(input));
    }
    if let Some(id) = &app.confirm_cancel {
        out.push(confirm_cancel_text(app, id));
    }
    out.extend(app.notice.as_ref().map(notice_text));
    for r in app.runs() {
        let row = run_row(app, r);
        out.extend([
            row.id,
            row.tool,
            row.started,
            row.took,
            row.last_output,
            row.exit,
            row.reason,
        ]);
    }
    let data = app.data.as_ref();
    for a in app.approvals() {
        let row = approval_row(app, a);
        out.extend([
            row.id,
            row.tool,
            row.question,
            row.age,
            row.left,
            row.options,
        ]);
        out.extend(card_texts(approval_card(app, a)));
    }
    for l in data.map(|d| d.log.as_slice()).unwrap_or_default() {
        let row = log_row(l);
        out.extend([row.time, row.tool, row.run, row.text]);
    }
    if let Some(d) = data.and_then(|d| d.detail.as_ref()) {
        let f = run_fields(app, d);
        out.push(f.title);
        out.extend(f.reason);
        out.extend(f.fields.into_iter().map(|(_, v)| v));
        for e in &d.events {
            let h = history_row(e);
            out.extend([h.time, h.event, h.what, h.actor]);
        }
        for a in &d.approvals {
            let row = run_approval_row(app, a);
            out.extend([row.id, row.question, row.note, row.decided_by]);
            out.extend(card_texts(approval_card(app, a)));
        }
        out.extend(d.output.iter().map(|l| output_line(l)));
    }
    out
}

#[cfg(test)]
fn card_texts(c: ApprovalCard) -> Vec<String> {
    let mut out = vec![c.title, c.tool, c.asked, c.left, c.question, c.approve];
    out.extend(c.context);
    out.extend(c.comment);
    for a in c.answers {
        out.extend([a.key, a.value, a.label]);
    }
    out
}
