//! Drawing: `draw(&App, &mut Frame)` only reads the state. Every string a tool could have
//! written (names, questions, context, output, reasons, argv, ids) goes through
//! `sanitize_line` here, right before it reaches the screen.

use super::app::{App, InputKind, Level, NOTICE_FOR, Overlay, Pane, View};
use super::feed::{EXPIRY_SOON, RUN_LIMIT, RunDetail};
use super::tail::{LogKind, short_id};
use hr_shared::approvals::Approval;
use hr_shared::runs::ToolRun;
use hr_shared::sanitize::sanitize_line;
use hr_shared::status::{ApprovalStatus, RunStatus};
use hr_shared::time::{parse_rfc3339, short_duration};
use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style, Stylize};
use ratatui::text::{Line, Span, Text};
use ratatui::widgets::{Block, Cell, Clear, Paragraph, Row, Table, TableState, Wrap};
use std::time::{Duration, SystemTime};

/// Tables wider than this show every column.
const WIDE: u16 = 110;

/// The colour of a run status (the word is always drawn too).
pub fn status_color(s: RunStatus) -> Color {
    match s {
        RunStatus::Running => Color::Cyan,
        RunStatus::Completed => Color::Green,
        RunStatus::Failed | RunStatus::FailedTimeout => Color::Red,
        RunStatus::Stalled => Color::Magenta,
        RunStatus::WaitingApproval => Color::Yellow,
        RunStatus::Cancelled => Color::DarkGray,
        RunStatus::Queued => Color::Blue,
    }
}

fn clean(s: &str) -> String {
    sanitize_line(s)
}

fn since(now: SystemTime, stamp: &str) -> Option<Duration> {
    now.duration_since(parse_rfc3339(stamp)?).ok()
}

fn ago(now: SystemTime, stamp: Option<&str>) -> String {
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

fn took(now: SystemTime, run: &ToolRun) -> String {
    let Some(start) = parse_rfc3339(&run.started_at) else {
        return "—".into();
    };
    let end = run
        .completed_at
        .as_deref()
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

/// Draws the whole screen.
pub fn draw(app: &App, f: &mut Frame) {
    let area = f.area();
    let [top, body, bottom] = area.layout(&Layout::vertical([
        Constraint::Length(1),
        Constraint::Fill(1),
        Constraint::Length(1),
    ]));
    draw_alerts(app, f, top);
    match (&app.data, &app.view) {
        (None, _) => draw_no_data(app, f, body),
        (Some(_), View::Dashboard) => draw_dashboard(app, f, body),
        (Some(_), View::Run(id)) => draw_detail(app, f, body, id),
    }
    draw_status_line(app, f, bottom);
    match &app.overlay {
        Some(Overlay::Help) => draw_help(f, body),
        Some(Overlay::Approval(id)) => draw_approval(app, f, body, id),
        None => {}
    }
}

/// Runs in a live status, less those whose shim vanished (they count as failed).
fn count(app: &App, status: RunStatus) -> i64 {
    let Some(d) = &app.data else { return 0 };
    let stored = d
        .live
        .iter()
        .find(|(s, _)| *s == status)
        .map(|(_, n)| *n)
        .unwrap_or(0);
    let vanished = d.vanished.values().filter(|v| v.status == status).count() as i64;
    (stored - vanished).max(0)
}

fn draw_alerts(app: &App, f: &mut Frame, area: Rect) {
    let mut spans: Vec<Span> = Vec::new();
    let sep = || Span::raw("  ");
    if let Some(problem) = &app.problem {
        spans.push(" DATABASE ".bold().white().on_red());
        spans.push(Span::raw(" "));
        spans.push(Span::styled(clean(problem), Style::new().red()));
        if app.data.is_some() {
            spans.push(Span::raw(" (showing what was read before)").dim());
        }
        f.render_widget(Paragraph::new(Line::from(spans)), area);
        return;
    }
    let Some(d) = &app.data else {
        f.render_widget(Paragraph::new(" reading the database…").dim(), area);
        return;
    };
    let failed = d.aggregates.failed_recent + d.vanished.len() as i64;
    let stalled = count(app, RunStatus::Stalled);
    let waiting = count(app, RunStatus::WaitingApproval);
    // (count, full text, compact text, style): the compact words are used when the full
    // ones do not fit the width.
    let plural = |n: i64| if n == 1 { "" } else { "s" };
    let all = [
        (
            failed,
            format!("✗ {failed} failed in 24h"),
            format!("✗ {failed} failed/24h"),
            Style::new().red().bold(),
        ),
        (
            stalled,
            format!("{stalled} stalled"),
            format!("{stalled} stalled"),
            Style::new().magenta().bold(),
        ),
        (
            waiting,
            format!("{waiting} waiting for approval"),
            format!("{waiting} waiting"),
            Style::new().yellow().bold(),
        ),
        (
            d.expiring,
            format!(
                "{} approval{} expiring within 1h",
                d.expiring,
                plural(d.expiring)
            ),
            format!("{} expiring <1h", d.expiring),
            Style::new().yellow(),
        ),
    ];
    let build = |compact: bool| -> Vec<Span<'static>> {
        let mut out = Vec::new();
        for (n, full, short, style) in &all {
            if *n > 0 {
                out.push(sep());
                out.push(Span::styled(
                    if compact { short.clone() } else { full.clone() },
                    *style,
                ));
            }
        }
        out
    };
    let alerts = build(false);
    if alerts.is_empty() {
        spans.push(Span::styled(" ✓ all calm", Style::new().green()));
    } else {
        spans.push(" ALERTS ".bold().black().on_yellow());
        let alerts = if Line::from(alerts.clone()).width() + 8 <= area.width as usize {
            alerts
        } else {
            build(true)
        };
        spans.extend(alerts);
    }
    let running = count(app, RunStatus::Running);
    let total: i64 = d.aggregates.totals.iter().map(|(_, n)| n).sum();
    let mut tail = vec![
        sep(),
        Span::raw(format!(
            "{running} running · {} pending · {total} run{}",
            d.pending,
            plural(total)
        ))
        .dim(),
    ];
    if app.read_only.is_some() {
        tail.insert(0, "READ-ONLY".bold().red());
        tail.insert(0, sep());
    }
    // The counts are a courtesy: they go when the alerts need the width.
    let mut line = Line::from(spans);
    if line.width() + Line::from(tail.clone()).width() <= area.width as usize {
        line.spans.extend(tail);
    }
    f.render_widget(Paragraph::new(line), area);
}

fn draw_no_data(app: &App, f: &mut Frame, area: Rect) {
    let box_area = area.centered(Constraint::Percentage(90), Constraint::Length(11));
    let mut lines = vec![Line::from("")];
    match &app.problem {
        Some(problem) => {
            lines.push(Line::from(" Cannot read the database.".bold().red()));
            lines.push(Line::from(format!(" {}", clean(problem))));
            lines.push(Line::from(""));
            lines.push(Line::from(format!(" state dir: {}", clean(&app.state_dir))).dim());
            lines.push(Line::from(" Retrying every second: the dashboard fills in"));
            lines.push(Line::from(" as soon as the database can be read."));
        }
        None => lines.push(Line::from(" Reading the database…")),
    }
    f.render_widget(Clear, box_area);
    f.render_widget(
        Paragraph::new(lines)
            .wrap(Wrap { trim: false })
            .block(Block::bordered().title(" headless-run monitor ")),
        box_area,
    );
}

fn pane_block(title: String, focused: bool) -> Block<'static> {
    // The focused pane says so in words too, not only by colour.
    let title = if focused {
        format!("▶{}", title)
    } else {
        title
    };
    let b = Block::bordered().title(title);
    if focused {
        b.border_style(Style::new().cyan())
            .title_style(Style::new().bold())
    } else {
        b.border_style(Style::new().dark_gray())
    }
}

fn draw_dashboard(app: &App, f: &mut Frame, area: Rect) {
    let pending = app.approvals().len() as u16;
    let h = area.height;
    let approvals_h = if pending == 0 {
        3
    } else {
        (pending + 3).min((h * 35 / 100).max(5))
    };
    // The runs take what they need (up to all but a quarter for the log); the log the rest.
    let runs_wanted = (app.runs().len() as u16).saturating_add(3).max(5);
    let runs_max = h
        .saturating_sub(approvals_h)
        .saturating_sub((h / 4).max(4))
        .max(5);
    let runs_h = runs_wanted.min(runs_max);
    let [runs, approvals, log] = area.layout(&Layout::vertical([
        Constraint::Length(runs_h),
        Constraint::Length(approvals_h),
        Constraint::Fill(1),
    ]));
    draw_runs(app, f, runs);
    draw_approvals(app, f, approvals);
    draw_log(app, f, log);
}

/// A table's window: the first row to show so that `sel` is visible in `height` rows.
fn offset_for(sel: usize, height: usize) -> usize {
    sel.saturating_sub(height.saturating_sub(1))
}

fn draw_runs(app: &App, f: &mut Frame, area: Rect) {
    let focused = app.focus == Pane::Runs;
    let runs = app.runs();
    let mut title = String::from(" Runs ");
    if !app.query.is_empty() {
        title.push_str(&format!("[filter: {}] ", clean(&app.query.text)));
    }
    if runs.len() >= RUN_LIMIT {
        title.push_str(&format!("(newest {RUN_LIMIT}) "));
    }
    let wide = area.width >= WIDE;
    let header: Vec<&str> = if wide {
        vec![
            "RUN", "TOOL", "STATUS", "STARTED", "TOOK", "LAST OUT", "EXIT", "REASON",
        ]
    } else {
        vec!["RUN", "TOOL", "STATUS", "AGE", "EXIT", "REASON"]
    };
    let widths: Vec<Constraint> = if wide {
        vec![
            Constraint::Length(12),
            Constraint::Length(14),
            Constraint::Length(16),
            Constraint::Length(7),
            Constraint::Length(7),
            Constraint::Length(8),
            Constraint::Length(4),
            Constraint::Fill(1),
        ]
    } else {
        vec![
            Constraint::Length(12),
            Constraint::Length(10),
            Constraint::Length(16),
            Constraint::Length(6),
            Constraint::Length(4),
            Constraint::Fill(1),
        ]
    };
    let rows: Vec<Row> = runs
        .iter()
        .map(|r| {
            let status = app.shown_status(r);
            let reason = app
                .vanished_reason(r)
                .map(str::to_owned)
                .or_else(|| r.reason.clone())
                .unwrap_or_default();
            let exit = r.exit_code.map(|c| c.to_string()).unwrap_or_default();
            let mut cells = vec![
                Cell::from(short_id(&r.tool_run_id)),
                Cell::from(clean(&r.tool_name)),
                Cell::from(Span::styled(
                    status.as_str(),
                    Style::new().fg(status_color(status)),
                )),
                Cell::from(ago(app.now, Some(&r.started_at))),
            ];
            if wide {
                cells.push(Cell::from(took(app.now, r)));
                cells.push(Cell::from(ago(app.now, r.last_output_at.as_deref())));
            }
            cells.push(Cell::from(exit));
            cells.push(Cell::from(clean(&reason)));
            Row::new(cells)
        })
        .collect();
    let empty = runs.is_empty();
    let table = Table::new(rows, widths)
        .header(Row::new(header).style(Style::new().bold().underlined()))
        .block(pane_block(title, focused))
        .row_highlight_style(if focused {
            Style::new().add_modifier(Modifier::REVERSED)
        } else {
            Style::new().add_modifier(Modifier::BOLD)
        })
        .highlight_symbol(if focused { "▶ " } else { "› " });
    let visible = area.height.saturating_sub(3) as usize;
    let mut state = TableState::default()
        .with_selected((!empty).then_some(app.run_sel))
        .with_offset(offset_for(app.run_sel, visible));
    f.render_stateful_widget(table, area, &mut state);
    if empty {
        let msg = if app.query.is_empty() {
            " no runs yet — start a tool with `headless-run -- TOOL`"
        } else {
            " no runs match the filter (/ to change it)"
        };
        let inner = Rect {
            y: area.y + 2,
            height: 1,
            ..Block::bordered().inner(area)
        };
        if inner.y < area.bottom().saturating_sub(1) {
            f.render_widget(Paragraph::new(msg).dim(), inner);
        }
    }
}

fn draw_approvals(app: &App, f: &mut Frame, area: Rect) {
    let focused = app.focus == Pane::Approvals;
    let list = app.approvals();
    let title = format!(" Pending approvals ({}) ", list.len());
    if list.is_empty() {
        f.render_widget(
            Paragraph::new(" none — nothing is waiting for a decision")
                .dim()
                .block(pane_block(title, focused)),
            area,
        );
        return;
    }
    let wide = area.width >= WIDE;
    let mut header = vec!["TOOL", "QUESTION", "AGE", "LEFT", "OPTIONS"];
    let mut widths = vec![
        Constraint::Length(10),
        Constraint::Fill(1),
        Constraint::Length(6),
        Constraint::Length(7),
        Constraint::Length(if wide { 28 } else { 18 }),
    ];
    if wide {
        header.insert(0, "APPROVAL");
        widths.insert(0, Constraint::Length(12));
    }
    let rows: Vec<Row> = list
        .iter()
        .map(|a| {
            let (left, urgent) = time_left(app.now, a);
            let mut cells = vec![
                Cell::from(clean(&a.tool_name)),
                Cell::from(clean(&a.question)),
                Cell::from(ago(app.now, Some(&a.created_at))),
                Cell::from(Span::styled(
                    left,
                    if urgent {
                        Style::new().red().bold()
                    } else {
                        Style::new()
                    },
                )),
                Cell::from(options_summary(a)),
            ];
            if wide {
                cells.insert(0, Cell::from(short_id(&a.approval_id)));
            }
            Row::new(cells).style(Style::new().yellow())
        })
        .collect();
    let table = Table::new(rows, widths)
        .header(Row::new(header).style(Style::new().bold().underlined()))
        .block(pane_block(title, focused))
        .row_highlight_style(if focused {
            Style::new().add_modifier(Modifier::REVERSED)
        } else {
            Style::new()
        })
        .highlight_symbol(if focused { "▶ " } else { "  " });
    let visible = area.height.saturating_sub(3) as usize;
    let mut state = TableState::default()
        .with_selected(Some(app.approval_sel))
        .with_offset(offset_for(app.approval_sel, visible));
    f.render_stateful_widget(table, area, &mut state);
}

fn log_style(kind: LogKind) -> Style {
    match kind {
        LogKind::Status(s) => Style::new().fg(status_color(s)),
        LogKind::ApprovalNeeded => Style::new().yellow(),
        LogKind::Decision => Style::new().green(),
        LogKind::Output => Style::new(),
        LogKind::Heartbeat | LogKind::Unreadable => Style::new().dark_gray(),
    }
}

fn draw_log(app: &App, f: &mut Frame, area: Rect) {
    let focused = app.focus == Pane::Log;
    let lines = app.data.as_ref().map(|d| d.log.as_slice()).unwrap_or(&[]);
    let height = area.height.saturating_sub(2) as usize;
    let end = lines.len().saturating_sub(app.log_back);
    let start = end.saturating_sub(height);
    let mut title = String::from(" Log (UTC) ");
    if app.log_back > 0 {
        title.push_str(&format!("— {} lines back ", app.log_back));
    }
    let text: Vec<Line> = lines[start..end]
        .iter()
        .map(|l| {
            Line::from(vec![
                Span::raw(format!("{} ", l.time)).dim(),
                Span::raw(format!("{} ", clean(&l.tool))).bold(),
                Span::raw(format!("{} ", clean(&l.run))).dim(),
                Span::styled(clean(&l.text), log_style(l.kind)),
            ])
        })
        .collect();
    let para = if text.is_empty() {
        Paragraph::new(" no events yet").dim()
    } else {
        Paragraph::new(text)
    };
    f.render_widget(para.block(pane_block(title, focused)), area);
}

fn field(name: &str, value: impl Into<String>) -> Line<'static> {
    field_spans(name, vec![Span::raw(value.into())])
}

fn field_spans(name: &str, mut value: Vec<Span<'static>>) -> Line<'static> {
    let mut spans = vec![Span::styled(
        format!(" {name:<13}"),
        Style::new().dark_gray(),
    )];
    spans.append(&mut value);
    Line::from(spans)
}

fn draw_detail(app: &App, f: &mut Frame, area: Rect, id: &str) {
    let detail = app
        .data
        .as_ref()
        .and_then(|d| d.detail.as_ref())
        .filter(|d| d.run.tool_run_id == id);
    let Some(d) = detail else {
        let known = app.runs().iter().any(|r| r.tool_run_id == id);
        let text = if known {
            format!(" loading {}…", clean(id))
        } else {
            format!(" loading {}… (or no such run)", clean(id))
        };
        f.render_widget(
            Paragraph::new(text).block(Block::bordered().title(" Run ")),
            area,
        );
        return;
    };
    let approvals_h = if d.approvals.is_empty() {
        0
    } else {
        (d.approvals.len() as u16 + 2).min(6)
    };
    let [fields_area, approvals_area, output_area] = area.layout(&Layout::vertical([
        Constraint::Length(10),
        Constraint::Length(approvals_h),
        Constraint::Fill(1),
    ]));
    if area.width >= 100 {
        let [left, right] = fields_area.layout(&Layout::horizontal([
            Constraint::Fill(3),
            Constraint::Fill(2),
        ]));
        draw_run_fields(app, f, left, d);
        draw_run_history(f, right, d);
    } else {
        draw_run_fields(app, f, fields_area, d);
    }
    if approvals_h > 0 {
        draw_run_approvals(app, f, approvals_area, d);
    }
    draw_output(app, f, output_area, d);
}

fn draw_run_fields(app: &App, f: &mut Frame, area: Rect, d: &RunDetail) {
    let r = &d.run;
    let status = app.shown_status(r);
    let mut status_spans = vec![Span::styled(
        status.as_str(),
        Style::new().fg(status_color(status)).bold(),
    )];
    if let Some(c) = r.exit_code {
        status_spans.push(Span::raw(format!("  exit {c}")));
    }
    let reason = app
        .vanished_reason(r)
        .map(str::to_owned)
        .or_else(|| r.reason.clone());
    if let Some(reason) = reason {
        status_spans.push(Span::raw(format!("  {}", clean(&reason))));
    }
    let opt = |v: Option<i64>| v.map(|p| p.to_string()).unwrap_or_else(|| "—".into());
    let lines = vec![
        field_spans("status", status_spans),
        field("argv", clean(&r.argv_json.join(" "))),
        field("cwd", clean(r.cwd.as_deref().unwrap_or("—"))),
        field(
            "started",
            format!(
                "{} · took {}",
                ago_phrase(app.now, Some(&r.started_at)),
                took(app.now, r)
            ),
        ),
        field(
            "last output",
            format!(
                "{} · heartbeat {} · supervisor {}",
                ago_phrase(app.now, r.last_output_at.as_deref()),
                ago_phrase(app.now, r.last_heartbeat_at.as_deref()),
                ago_phrase(app.now, r.supervisor_heartbeat_at.as_deref()),
            ),
        ),
        field(
            "process",
            format!(
                "pid {} · shim {} · host {}",
                opt(r.pid),
                opt(r.shim_pid),
                clean(r.host.as_deref().unwrap_or("—"))
            ),
        ),
        field("execution", clean(r.execution_id.as_deref().unwrap_or("—"))),
        field(
            "resumed from",
            clean(r.resumed_from.as_deref().unwrap_or("—")),
        ),
    ];
    let block = Block::bordered().title(format!(
        " Run {} · {} ",
        clean(&r.tool_run_id),
        clean(&r.tool_name)
    ));
    f.render_widget(Paragraph::new(lines).block(block), area);
}

fn draw_run_history(f: &mut Frame, area: Rect, d: &RunDetail) {
    let height = area.height.saturating_sub(2) as usize;
    let start = d.events.len().saturating_sub(height);
    let lines: Vec<Line> = d.events[start..]
        .iter()
        .map(|e| {
            let what = serde_json::from_str::<serde_json::Value>(&e.data)
                .ok()
                .and_then(|v| v.get("status").and_then(|s| s.as_str()).map(str::to_owned))
                .unwrap_or_default();
            Line::from(vec![
                Span::raw(format!(" {} ", e.at.get(11..19).unwrap_or(""))).dim(),
                Span::raw(clean(&e.event.replace('_', " "))),
                Span::raw(format!(" {}", clean(&what))).bold(),
                Span::raw(format!(" · {}", clean(&e.actor))).dim(),
            ])
        })
        .collect();
    f.render_widget(
        Paragraph::new(lines).block(Block::bordered().title(" History (UTC) ")),
        area,
    );
}

fn draw_run_approvals(app: &App, f: &mut Frame, area: Rect, d: &RunDetail) {
    let lines: Vec<Line> = d
        .approvals
        .iter()
        .map(|a| {
            let style = match a.status {
                ApprovalStatus::Pending => Style::new().yellow().bold(),
                ApprovalStatus::Approved => Style::new().green(),
                ApprovalStatus::Rejected | ApprovalStatus::Expired => Style::new().red(),
            };
            let mut spans = vec![
                Span::raw(format!(" {} ", short_id(&a.approval_id))),
                Span::styled(format!("{:<8} ", a.status.as_str()), style),
                Span::raw(clean(&a.question)),
            ];
            match a.status {
                ApprovalStatus::Pending => {
                    let (left, _) = time_left(app.now, a);
                    spans.push(Span::raw(format!("  [{}]  left {left}", options_summary(a))).dim());
                }
                _ => {
                    if let Some(v) = &a.chosen_value {
                        spans.push(Span::raw(format!("  → `{}`", clean(v))));
                    }
                    if let Some(by) = &a.decided_by {
                        spans.push(
                            Span::raw(format!(
                                " by {} ({})",
                                clean(by),
                                clean(a.decision_channel.as_deref().unwrap_or("?"))
                            ))
                            .dim(),
                        );
                    }
                }
            }
            Line::from(spans)
        })
        .collect();
    f.render_widget(
        Paragraph::new(lines).block(Block::bordered().title(" Approvals ")),
        area,
    );
}

fn draw_output(app: &App, f: &mut Frame, area: Rect, d: &RunDetail) {
    let height = area.height.saturating_sub(2) as usize;
    let back = app.output_back.min(d.output.len().saturating_sub(height));
    let end = d.output.len().saturating_sub(back);
    let start = end.saturating_sub(height);
    let mut title = format!(" Output (last {} lines) ", d.output.len());
    if back > 0 {
        title.push_str(&format!("— {back} lines back "));
    }
    let lines: Vec<Line> = d.output[start..end]
        .iter()
        .map(|l| Line::from(format!(" {}", clean(l))))
        .collect();
    let para = if lines.is_empty() {
        Paragraph::new(" no output recorded").dim()
    } else {
        Paragraph::new(lines)
    };
    f.render_widget(para.block(Block::bordered().title(title)), area);
}

fn key_hints(app: &App) -> &'static str {
    match (&app.view, &app.overlay) {
        (_, Some(Overlay::Approval(_))) => {
            " a approve · r reject · 1-9 option · t text · c comment · Esc close · ? help"
        }
        (View::Run(_), _) => {
            " Esc back · x cancel run · a/r/1-9/t/c decide · ↑↓ scroll · ? help · q quit"
        }
        (View::Dashboard, _) => match app.focus {
            Pane::Runs => {
                " Tab pane · ↑↓ move · Enter open · / filter · x cancel · a/r/1-9 decide · ? help · q quit"
            }
            Pane::Approvals => {
                " Tab pane · ↑↓ move · Enter details · a approve · r reject · 1-9 option · t text · c comment · ? help"
            }
            Pane::Log => " Tab pane · ↑↓ scroll · End follow · ? help · q quit",
        },
    }
}

fn draw_status_line(app: &App, f: &mut Frame, area: Rect) {
    if let Some(input) = &app.input {
        let (label, hint) = match &input.kind {
            InputKind::Filter => (
                " / filter: ".to_owned(),
                "   status words (running, fail, stalled, waiting…) and/or a tool · Enter apply · Esc cancel",
            ),
            InputKind::Text(id) => (
                format!(" answer for {}: ", short_id(id)),
                "   Enter send · Esc cancel",
            ),
            InputKind::Comment(id) => (
                format!(" comment for {}: ", short_id(id)),
                "   Enter keep · Esc cancel",
            ),
        };
        let line = Line::from(vec![
            Span::styled(label, Style::new().bold().cyan()),
            Span::raw(clean(&input.buf)),
            Span::raw("█"),
            Span::raw(hint).dim(),
        ]);
        f.render_widget(Paragraph::new(line), area);
        return;
    }
    if let Some(run_id) = &app.confirm_cancel {
        let tool = app
            .runs()
            .iter()
            .find(|r| &r.tool_run_id == run_id)
            .map(|r| clean(&r.tool_name))
            .unwrap_or_default();
        let line = Line::from(vec![
            Span::styled(
                format!(" Cancel run {} {tool}? ", short_id(run_id)),
                Style::new().bold().black().on_yellow(),
            ),
            Span::raw(" y to cancel it, any other key to keep it running"),
        ]);
        f.render_widget(Paragraph::new(line), area);
        return;
    }
    let fresh = app.notice.as_ref().filter(|n| {
        app.now
            .duration_since(n.at)
            .map(|d| d < NOTICE_FOR)
            .unwrap_or(true)
    });
    if let Some(n) = fresh {
        let style = match n.level {
            Level::Info => Style::new(),
            Level::Ok => Style::new().green().bold(),
            Level::Warn => Style::new().yellow().bold(),
            Level::Error => Style::new().red().bold(),
        };
        f.render_widget(
            Paragraph::new(Span::styled(format!(" {}", clean(&n.text)), style)),
            area,
        );
        return;
    }
    f.render_widget(Paragraph::new(key_hints(app)).dim(), area);
}

/// Every key, as the help overlay lists it.
pub const HELP: &[(&str, &str)] = &[
    (
        "Tab / Shift-Tab",
        "next / previous pane (runs, approvals, log)",
    ),
    ("↑ ↓  j k", "move (scroll in the log and a run's output)"),
    ("PgUp PgDn  g G", "page, first, last"),
    ("Enter", "open the run / the approval's details"),
    ("Esc", "back, close, cancel typing"),
    (
        "/",
        "filter runs: status words and/or a tool (`fail terraform`)",
    ),
    ("a", "approve the selected approval (or the selected run's)"),
    ("r", "reject it"),
    ("1-9", "choose option 1-9"),
    (
        "t",
        "type a free-text answer (where the approval allows it)",
    ),
    ("c", "add a comment to the next decision"),
    ("x", "cancel the selected run (asks y/n)"),
    ("?", "this help"),
    ("q  Ctrl-C", "quit"),
];

fn draw_help(f: &mut Frame, area: Rect) {
    let height = (HELP.len() as u16 + 4).min(area.height);
    let box_area = area.centered(Constraint::Max(76), Constraint::Length(height));
    let mut lines: Vec<Line> = HELP
        .iter()
        .map(|(k, what)| {
            Line::from(vec![
                Span::styled(format!(" {k:<16}"), Style::new().bold().cyan()),
                Span::raw(*what),
            ])
        })
        .collect();
    lines.push(Line::from(""));
    lines.push(
        Line::from(" Decisions are recorded as yours, channel `tui`. Any key closes this.").dim(),
    );
    f.render_widget(Clear, box_area);
    f.render_widget(
        Paragraph::new(lines).block(
            Block::bordered()
                .title(" Keys ")
                .border_style(Style::new().cyan()),
        ),
        box_area,
    );
}

fn draw_approval(app: &App, f: &mut Frame, area: Rect, id: &str) {
    let Some(a) = app.approval(id) else {
        let box_area = area.centered(Constraint::Percentage(90), Constraint::Length(3));
        f.render_widget(Clear, box_area);
        f.render_widget(
            Paragraph::new(format!(" {} is no longer pending.", clean(id)))
                .block(Block::bordered().title(" Approval ")),
            box_area,
        );
        return;
    };
    let (left, urgent) = time_left(app.now, a);
    let mut lines = vec![
        Line::from(vec![
            Span::raw(format!(" {} ", clean(&a.tool_name))).bold(),
            Span::raw(format!(
                "run {} · asked {} ago · ",
                short_id(&a.tool_run_id),
                ago(app.now, Some(&a.created_at))
            )),
            Span::styled(
                format!("expires in {left}"),
                if urgent {
                    Style::new().red().bold()
                } else {
                    Style::new()
                },
            ),
            Span::raw(format!(" · {}", a.status)),
        ]),
        Line::from(""),
        Line::from(" Question".bold()),
        Line::from(Span::styled(
            format!("   {}", clean(&a.question)),
            Style::new().yellow(),
        )),
    ];
    if let Some(ctx) = a.context.as_deref().filter(|c| !c.trim().is_empty()) {
        lines.push(Line::from(""));
        lines.push(Line::from(" Screen".bold()));
        let ctx_lines: Vec<&str> = ctx.lines().collect();
        let keep = ctx_lines.len().saturating_sub(8);
        for l in &ctx_lines[keep..] {
            lines.push(Line::from(format!("   {}", clean(l))).dim());
        }
    }
    lines.push(Line::from(""));
    lines.push(Line::from(" Answers".bold()));
    for (i, o) in a.options_json.iter().enumerate() {
        let key = if i < 9 {
            format!("{}", i + 1)
        } else {
            " ".into()
        };
        let default = if a.default_value.as_deref() == Some(o.value.as_str()) {
            "  (default)"
        } else {
            ""
        };
        lines.push(Line::from(vec![
            Span::styled(format!("   {key}  "), Style::new().bold().cyan()),
            Span::raw(format!("{:<10} ", clean(&o.value))),
            Span::raw(clean(&o.label)),
            Span::raw(default).dim(),
        ]));
    }
    if a.allows_text {
        lines.push(Line::from(vec![
            Span::styled("   t  ", Style::new().bold().cyan()),
            Span::raw("type a free-text answer"),
        ]));
    }
    lines.push(Line::from(vec![
        Span::styled("   a  ", Style::new().bold().cyan()),
        Span::raw(match a.approve_value() {
            Some(v) => format!("approve (answers `{}`)", clean(v)),
            None => "approve: not available (no approving answer)".into(),
        }),
    ]));
    lines.push(Line::from(vec![
        Span::styled("   r  ", Style::new().bold().cyan()),
        Span::raw("reject (the tool is ended)"),
    ]));
    if let Some((cid, text)) = &app.comment
        && cid == id
    {
        lines.push(Line::from(""));
        lines.push(Line::from(format!(" Comment for the decision: {}", clean(text))).italic());
    }
    let width = (area.width * 9 / 10).max(20);
    let inner_w = width.saturating_sub(2).max(1) as usize;
    let rows: usize = lines
        .iter()
        .map(|l| l.width().div_ceil(inner_w).max(1))
        .sum();
    let height = (rows as u16).saturating_add(2).min(area.height);
    let para = Paragraph::new(Text::from(lines)).wrap(Wrap { trim: false });
    let box_area = area.centered(Constraint::Length(width), Constraint::Length(height));
    f.render_widget(Clear, box_area);
    f.render_widget(
        para.block(
            Block::bordered()
                .title(format!(" Approval {} ", clean(&a.approval_id)))
                .border_style(Style::new().yellow()),
        ),
        box_area,
    );
}
