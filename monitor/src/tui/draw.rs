//! Drawing: `draw(&App, &mut Frame)` only reads the state. The text comes from `view`,
//! which sanitizes every string a tool could have written; this file lays it out, colours
//! it, and builds only the rows that fit on the screen.

use super::app::{App, InputKind, Level, NOTICE_FOR, Overlay, Pane, View};
use super::feed::{RUN_LIMIT, RunDetail};
use super::tail::LogKind;
use super::view::{self, clean};
use hr_shared::status::{ApprovalStatus, RunStatus};
use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style, Stylize};
use ratatui::text::{Line, Span, Text};
use ratatui::widgets::{Block, Cell, Clear, Paragraph, Row, Table, TableState, Wrap};

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
        spans.push(match app.server {
            Some(_) => " SERVER ".bold().white().on_red(),
            None => " DATABASE ".bold().white().on_red(),
        });
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
    // Stalled: live and silent now, or ended by the stall timeout in the last 24 h.
    let stalled = count(app, RunStatus::Stalled) + d.aggregates.stalled_recent;
    // Runs waiting on an approval: those whose approval still needs a decision, and those
    // decided and waiting for `monitor worker` to resume them.
    let waiting_runs = count(app, RunStatus::WaitingApproval);
    let waiting = waiting_runs.min(d.pending);
    let decided = waiting_runs - waiting;
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
            decided,
            format!("{decided} approved, waiting for `monitor worker` to resume"),
            format!("{decided} decided, run `monitor worker`"),
            Style::new().cyan(),
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
    if let Some(server) = &app.server {
        tail.push(Span::raw(format!(" · {}", clean(server))).dim());
    }
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
            let (what, store) = match app.server {
                Some(_) => (" Cannot read from the server.", " server"),
                None => (" Cannot read the database.", " state dir"),
            };
            lines.push(Line::from(what.bold().red()));
            lines.push(Line::from(format!(" {}", clean(problem))));
            lines.push(Line::from(""));
            lines.push(Line::from(format!("{store}: {}", clean(&app.state_dir))).dim());
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
    // Pipelines, when there are any, between the approvals and the log.
    let pipelines_h = match app.pipelines().len() as u16 {
        0 => 0,
        n => (n + 3).min((h / 4).max(4)),
    };
    let [runs, approvals, pipelines, log] = area.layout(&Layout::vertical([
        Constraint::Length(runs_h.saturating_sub(pipelines_h / 2).max(5)),
        Constraint::Length(approvals_h),
        Constraint::Length(pipelines_h),
        Constraint::Fill(1),
    ]));
    draw_runs(app, f, runs);
    draw_approvals(app, f, approvals);
    if pipelines_h > 0 {
        draw_pipelines(app, f, pipelines);
    }
    draw_log(app, f, log);
}

/// A step's status as one glyph (the word is in the status column and `pipeline status`).
fn step_glyph(status: &str) -> &'static str {
    match status {
        "completed" => "✓",
        "failed" => "✗",
        "running" => "▶",
        "waiting_approval" => "?",
        "skipped" => "-",
        "cancelled" => "⊘",
        _ => "·",
    }
}

fn draw_pipelines(app: &App, f: &mut Frame, area: Rect) {
    let focused = app.focus == Pane::Pipelines;
    let list = app.pipelines();
    let title = format!(" Pipelines ({}) ", list.len());
    let (first, end, selected) = window(list.len(), app.pipeline_sel, area);
    let rows: Vec<Row> = list[first..end]
        .iter()
        .map(|p| {
            let steps = p
                .steps
                .iter()
                .map(|(node, n, st)| {
                    let times = if *n > 1 {
                        format!("×{n}")
                    } else {
                        String::new()
                    };
                    format!("{}{times}{}", clean(node), step_glyph(st))
                })
                .collect::<Vec<_>>()
                .join(" ");
            let color = match p.status.as_str() {
                "completed" => Color::Green,
                "failed" => Color::Red,
                "waiting_approval" => Color::Yellow,
                "running" => Color::Cyan,
                _ => Color::DarkGray,
            };
            Row::new(vec![
                Cell::from(p.execution_id.clone()),
                Cell::from(clean(&p.name)),
                Cell::from(Span::styled(p.status.as_str(), Style::new().fg(color))),
                Cell::from(steps),
            ])
        })
        .collect();
    let table = Table::new(
        rows,
        [
            Constraint::Length(30),
            Constraint::Length(14),
            Constraint::Length(17),
            Constraint::Fill(1),
        ],
    )
    .header(
        Row::new(vec!["EXECUTION", "PIPELINE", "STATUS", "STEPS"])
            .style(Style::new().bold().underlined()),
    )
    .block(pane_block(title, focused))
    .row_highlight_style(if focused {
        Style::new().add_modifier(Modifier::REVERSED)
    } else {
        Style::new()
    })
    .highlight_symbol(if focused { "▶ " } else { "  " });
    let mut state = TableState::default().with_selected(selected);
    f.render_stateful_widget(table, area, &mut state);
}

/// A table's window: the first row to show so that `sel` is visible in `height` rows.
fn offset_for(sel: usize, height: usize) -> usize {
    sel.saturating_sub(height.saturating_sub(1))
}

/// The rows of a table that fit in `area` (borders and a header around them), and where
/// the selection falls among them: `(first, end, selected)`. Only these rows are built.
fn window(len: usize, sel: usize, area: Rect) -> (usize, usize, Option<usize>) {
    let visible = area.height.saturating_sub(3) as usize;
    let first = offset_for(sel, visible).min(len);
    let end = (first + visible).min(len);
    let selected = (sel >= first && sel < end).then(|| sel - first);
    (first, end, selected)
}

fn draw_runs(app: &App, f: &mut Frame, area: Rect) {
    let focused = app.focus == Pane::Runs;
    let runs = app.runs();
    let mut title = String::from(" Runs ");
    if let Some(filter) = view::filter_text(app) {
        title.push_str(&format!("[filter: {filter}] "));
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
    let (first, end, selected) = window(runs.len(), app.run_sel, area);
    let rows: Vec<Row> = runs[first..end]
        .iter()
        .map(|r| {
            let row = view::run_row(app, r);
            let mut cells = vec![
                Cell::from(row.id),
                Cell::from(row.tool),
                Cell::from(Span::styled(
                    row.status_word,
                    Style::new().fg(status_color(row.status)),
                )),
                Cell::from(row.started),
            ];
            if wide {
                cells.push(Cell::from(row.took));
                cells.push(Cell::from(row.last_output));
            }
            cells.push(Cell::from(row.exit));
            cells.push(Cell::from(row.reason));
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
    let mut state = TableState::default().with_selected(selected);
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
    let (first, end, selected) = window(list.len(), app.approval_sel, area);
    let rows: Vec<Row> = list[first..end]
        .iter()
        .map(|a| {
            let row = view::approval_row(app, a);
            let mut cells = vec![
                Cell::from(row.tool),
                Cell::from(row.question),
                Cell::from(row.age),
                Cell::from(Span::styled(
                    row.left,
                    if row.urgent {
                        Style::new().red().bold()
                    } else {
                        Style::new()
                    },
                )),
                Cell::from(row.options),
            ];
            if wide {
                cells.insert(0, Cell::from(row.id));
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
    let mut state = TableState::default().with_selected(selected);
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
            let row = view::log_row(l);
            Line::from(vec![
                Span::raw(format!("{} ", row.time)).dim(),
                Span::raw(format!("{} ", row.tool)).bold(),
                Span::raw(format!("{} ", row.run)).dim(),
                Span::styled(row.text, log_style(row.kind)),
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
    // Borders, the status line, then one line per field.
    let fields_h = view::run_fields(app, d).fields.len() as u16 + 3;
    let [fields_area, approvals_area, output_area] = area.layout(&Layout::vertical([
        Constraint::Length(fields_h),
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
    let v = view::run_fields(app, d);
    let mut status_spans = vec![Span::styled(
        v.status.as_str(),
        Style::new().fg(status_color(v.status)).bold(),
    )];
    if let Some(c) = v.exit {
        status_spans.push(Span::raw(format!("  exit {c}")));
    }
    if let Some(reason) = v.reason {
        status_spans.push(Span::raw(format!("  {reason}")));
    }
    let mut lines = vec![field_spans("status", status_spans)];
    lines.extend(v.fields.into_iter().map(|(name, value)| field(name, value)));
    let block = Block::bordered().title(v.title);
    f.render_widget(Paragraph::new(lines).block(block), area);
}

fn draw_run_history(f: &mut Frame, area: Rect, d: &RunDetail) {
    let height = area.height.saturating_sub(2) as usize;
    let start = d.events.len().saturating_sub(height);
    let lines: Vec<Line> = d.events[start..]
        .iter()
        .map(|e| {
            let h = view::history_row(e);
            Line::from(vec![
                Span::raw(format!(" {} ", h.time)).dim(),
                Span::raw(h.event),
                Span::raw(format!(" {}", h.what)).bold(),
                Span::raw(format!(" · {}", h.actor)).dim(),
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
            let row = view::run_approval_row(app, a);
            let style = match row.status {
                ApprovalStatus::Pending => Style::new().yellow().bold(),
                ApprovalStatus::Approved => Style::new().green(),
                ApprovalStatus::Rejected | ApprovalStatus::Expired => Style::new().red(),
            };
            let mut spans = vec![
                Span::raw(format!(" {} ", row.id)),
                Span::styled(format!("{:<8} ", row.status.as_str()), style),
                Span::raw(row.question),
            ];
            if row.status == ApprovalStatus::Pending {
                spans.push(Span::raw(row.note).dim());
            } else {
                spans.push(Span::raw(row.note));
                spans.push(Span::raw(row.decided_by).dim());
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
        .map(|l| Line::from(view::output_line(l)))
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
            Pane::Pipelines => {
                " Tab pane · ↑↓ move · a approve · r reject · c comment the waiting human step · ? help"
            }
            Pane::Log => " Tab pane · ↑↓ scroll · End follow · ? help · q quit",
        },
    }
}

fn draw_status_line(app: &App, f: &mut Frame, area: Rect) {
    if let Some(input) = &app.input {
        let hint = match &input.kind {
            InputKind::Filter => {
                "   status words (running, fail, stalled, waiting…) and/or a tool · Enter apply · Esc cancel"
            }
            InputKind::Text(_) => "   Enter send · Esc cancel",
            InputKind::Comment(_) => "   Enter keep · Esc cancel",
        };
        let line = Line::from(vec![
            Span::styled(view::input_label(input), Style::new().bold().cyan()),
            Span::raw(view::input_text(input)),
            Span::raw("█"),
            Span::raw(hint).dim(),
        ]);
        f.render_widget(Paragraph::new(line), area);
        return;
    }
    if let Some(run_id) = &app.confirm_cancel {
        let line = Line::from(vec![
            Span::styled(
                view::confirm_cancel_text(app, run_id),
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
            Paragraph::new(Span::styled(view::notice_text(n), style)),
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
    let card = view::approval_card(app, a);
    let mut lines = vec![
        Line::from(vec![
            Span::raw(format!(" {} ", card.tool)).bold(),
            Span::raw(card.asked),
            Span::styled(
                format!("expires in {}", card.left),
                if card.urgent {
                    Style::new().red().bold()
                } else {
                    Style::new()
                },
            ),
            Span::raw(format!(" · {}", card.status)),
        ]),
        Line::from(""),
    ];
    if let Some(reviews) = hr_shared::reviews::summary(a) {
        lines.push(Line::from(vec![
            Span::raw(" Reviews ").bold(),
            Span::styled(reviews, Style::new().magenta()),
        ]));
        lines.push(Line::from(""));
    }
    if let Some(command) = card.command {
        lines.push(Line::from(" Command".bold()));
        lines.push(Line::from(format!("   {command}")));
        if let Some(place) = card.place {
            lines.push(Line::from(format!("   {place}")).dim());
        }
        lines.push(Line::from(""));
    }
    lines.push(Line::from(" Question".bold()));
    lines.push(Line::from(Span::styled(
        format!("   {}", card.question),
        Style::new().yellow(),
    )));
    if !card.context.is_empty() {
        lines.push(Line::from(""));
        lines.push(Line::from(" Screen".bold()));
        for l in card.context {
            lines.push(Line::from(format!("   {l}")).dim());
        }
    }
    lines.push(Line::from(""));
    lines.push(Line::from(" Answers".bold()));
    for answer in card.answers {
        lines.push(Line::from(vec![
            Span::styled(format!("   {}  ", answer.key), Style::new().bold().cyan()),
            Span::raw(format!("{:<10} ", answer.value)),
            Span::raw(answer.label),
            Span::raw(if answer.default { "  (default)" } else { "" }).dim(),
        ]));
    }
    if card.allows_text {
        lines.push(Line::from(vec![
            Span::styled("   t  ", Style::new().bold().cyan()),
            Span::raw("type a free-text answer"),
        ]));
    }
    lines.push(Line::from(vec![
        Span::styled("   a  ", Style::new().bold().cyan()),
        Span::raw(card.approve),
    ]));
    lines.push(Line::from(vec![
        Span::styled("   r  ", Style::new().bold().cyan()),
        Span::raw("reject (the tool is ended)"),
    ]));
    if let Some(comment) = card.comment {
        lines.push(Line::from(""));
        lines.push(Line::from(format!(" Comment for the decision: {comment}")).italic());
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
                .title(card.title)
                .border_style(Style::new().yellow()),
        ),
        box_area,
    );
}
