//! The dashboard's state and its one `update` step: every key, snapshot and result arrives
//! as a [`Msg`]; `update` changes the [`App`] and returns the [`Request`]s for the feed
//! thread (reads and writes of the database). Nothing here does I/O, so it is tested
//! directly.

use super::feed::Snapshot;
use super::tail::short_id;
use crossterm::event::{KeyCode, KeyEvent, KeyEventKind, KeyModifiers};
use hr_shared::approvals::{Approval, DecideOutcome};
use hr_shared::control::CancelOutcome;
use hr_shared::runs::ToolRun;
use hr_shared::sanitize::sanitize_line;
use hr_shared::status::{ApprovalStatus, RunStatus};
use std::time::{Duration, SystemTime};

/// How long a notice stays in the status line.
pub const NOTICE_FOR: Duration = Duration::from_secs(30);

/// What arrives at the dashboard's loop.
#[derive(Debug)]
pub enum Msg {
    Key(KeyEvent),
    Resize,
    /// The clock moved on (ages and time left are drawn from `App::now`).
    Tick(SystemTime),
    Snapshot(Box<Snapshot>),
    /// The database cannot be read (missing, corrupt, …); the feed keeps retrying.
    StoreDown(String),
    Decided {
        approval_id: String,
        value: String,
        result: Result<DecideOutcome, String>,
    },
    Cancelled {
        run_id: String,
        result: Result<CancelOutcome, String>,
    },
    /// A signal asked us to end.
    Quit,
}

/// What the feed thread is asked to do.
#[derive(Debug, Clone, PartialEq)]
pub enum Request {
    Filter(RunQuery),
    /// Load this run's detail with every snapshot (`None`: no run is open).
    Open(Option<String>),
    Decide {
        approval_id: String,
        value: String,
        comment: Option<String>,
        /// The version of the approval the dashboard showed: the store refuses another.
        version: Option<String>,
    },
    Cancel {
        run_id: String,
    },
    /// The store's doorbell rang (the PostgreSQL store's notification): look now.
    Ring,
}

/// Which runs the table shows.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RunQuery {
    pub statuses: Vec<RunStatus>,
    pub tool: Option<String>,
    /// As the operator typed it.
    pub text: String,
}

impl RunQuery {
    /// Parses a filter: status names (or a prefix of three letters or more, so `fail` is
    /// `failed` and `failed_timeout`), `status:NAME`, a tool name, `tool:NAME`. Empty: all.
    pub fn parse(text: &str) -> Result<RunQuery, String> {
        let mut q = RunQuery {
            text: text.trim().to_owned(),
            ..RunQuery::default()
        };
        for word in text.split_whitespace() {
            let (forced, value) = match word.split_once(':') {
                Some(("status", v)) => (Some(true), v),
                Some(("tool", v)) => (Some(false), v),
                _ => (None, word),
            };
            let lower = value.to_ascii_lowercase();
            let statuses: Vec<RunStatus> = RunStatus::ALL
                .into_iter()
                .filter(|s| {
                    s.as_str() == lower || (lower.len() >= 3 && s.as_str().starts_with(&lower))
                })
                .collect();
            match forced {
                Some(true) if statuses.is_empty() => {
                    return Err(format!(
                        "no status `{value}`; statuses: {}",
                        RunStatus::ALL.map(|s| s.as_str()).join(", ")
                    ));
                }
                None | Some(true) if !statuses.is_empty() => {
                    for s in statuses {
                        if !q.statuses.contains(&s) {
                            q.statuses.push(s);
                        }
                    }
                }
                _ => {
                    if q.tool.is_some() {
                        return Err("one tool at a time".into());
                    }
                    q.tool = Some(value.to_owned());
                }
            }
        }
        Ok(q)
    }

    pub fn is_empty(&self) -> bool {
        self.statuses.is_empty() && self.tool.is_none()
    }
}

/// The panes of the dashboard, in Tab order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pane {
    Runs,
    Approvals,
    /// Shown (and a Tab stop) only while there are pipeline executions.
    Pipelines,
    Log,
}

/// The body of the screen.
#[derive(Debug, Clone, PartialEq)]
pub enum View {
    Dashboard,
    /// One run's detail.
    Run(String),
}

/// Drawn over the body.
#[derive(Debug, Clone, PartialEq)]
pub enum Overlay {
    Help,
    /// One pending approval in full.
    Approval(String),
}

/// A line being typed in the status line.
#[derive(Debug, Clone, PartialEq)]
pub enum InputKind {
    Filter,
    /// A free-text answer to an approval.
    Text(String),
    /// A comment to go with the next decision on an approval.
    Comment(String),
}

#[derive(Debug, Clone, PartialEq)]
pub struct Input {
    pub kind: InputKind,
    pub buf: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    Info,
    Ok,
    Warn,
    Error,
}

/// A message in the status line.
#[derive(Debug, Clone, PartialEq)]
pub struct Notice {
    pub level: Level,
    pub text: String,
    pub at: SystemTime,
}

/// Everything the dashboard knows; `draw` only reads it.
#[derive(Debug, Clone)]
pub struct App {
    pub now: SystemTime,
    /// The last snapshot read (kept while the database is unavailable).
    pub data: Option<Snapshot>,
    /// Why the database cannot be read right now.
    pub problem: Option<String>,
    pub state_dir: String,
    /// The `monitor serve` server read instead of a local store (`--server`), if any.
    pub server: Option<String>,
    pub focus: Pane,
    pub run_sel: usize,
    pub approval_sel: usize,
    pub pipeline_sel: usize,
    /// Lines scrolled back from the end of the log pane (0: follow).
    pub log_back: usize,
    /// Lines scrolled back from the end of the detail's output.
    pub output_back: usize,
    pub view: View,
    pub overlay: Option<Overlay>,
    pub input: Option<Input>,
    /// A run waiting for y/n before it is cancelled.
    pub confirm_cancel: Option<String>,
    /// A comment for the next decision on an approval: (approval id, text).
    pub comment: Option<(String, String)>,
    pub query: RunQuery,
    pub notice: Option<Notice>,
    /// Why decisions are refused here (inside a supervised tool), if they are.
    pub read_only: Option<String>,
    pub quit: bool,
}

impl App {
    pub fn new(now: SystemTime, state_dir: String, read_only: Option<String>) -> Self {
        App {
            now,
            data: None,
            problem: None,
            state_dir,
            server: None,
            focus: Pane::Runs,
            run_sel: 0,
            approval_sel: 0,
            pipeline_sel: 0,
            log_back: 0,
            output_back: 0,
            view: View::Dashboard,
            overlay: None,
            input: None,
            confirm_cancel: None,
            comment: None,
            query: RunQuery::default(),
            notice: None,
            read_only,
            quit: false,
        }
    }

    pub fn runs(&self) -> &[ToolRun] {
        self.data.as_ref().map(|d| d.runs.as_slice()).unwrap_or(&[])
    }

    pub fn approvals(&self) -> &[Approval] {
        self.data
            .as_ref()
            .map(|d| d.approvals.as_slice())
            .unwrap_or(&[])
    }

    pub fn selected_run(&self) -> Option<&ToolRun> {
        self.runs().get(self.run_sel)
    }

    pub fn selected_approval(&self) -> Option<&Approval> {
        self.approvals().get(self.approval_sel)
    }

    /// The pipeline executions read (newest first).
    pub fn pipelines(&self) -> &[super::feed::PipelineRow] {
        self.data
            .as_ref()
            .map(|d| d.pipelines.as_slice())
            .unwrap_or(&[])
    }

    /// A pending approval by id (from the pending list, or the open run's approvals).
    pub fn approval(&self, id: &str) -> Option<&Approval> {
        let detail = self
            .data
            .as_ref()
            .and_then(|d| d.detail.as_ref())
            .map(|d| d.approvals.as_slice())
            .unwrap_or(&[]);
        self.approvals()
            .iter()
            .chain(detail)
            .find(|a| a.approval_id == id)
    }

    /// The pending approval of a run, if it has one.
    pub fn pending_of(&self, run_id: &str) -> Option<&Approval> {
        let detail = self
            .data
            .as_ref()
            .and_then(|d| d.detail.as_ref())
            .map(|d| d.approvals.as_slice())
            .unwrap_or(&[]);
        self.approvals()
            .iter()
            .chain(detail)
            .find(|a| a.tool_run_id == run_id && a.status == ApprovalStatus::Pending)
    }

    /// The status a run is shown with: a live run whose shim vanished is failed.
    pub fn shown_status(&self, run: &ToolRun) -> RunStatus {
        match &self.data {
            Some(d) if d.vanished.contains_key(&run.tool_run_id) => RunStatus::Failed,
            _ => run.status,
        }
    }

    /// Why a run is shown failed though stored live, if it is.
    pub fn vanished_reason(&self, run: &ToolRun) -> Option<&str> {
        self.data
            .as_ref()
            .and_then(|d| d.vanished.get(&run.tool_run_id))
            .map(|v| v.why.as_str())
    }

    /// The approval decision keys act on here, if any.
    fn decision_target(&self) -> Option<&Approval> {
        if let Some(Overlay::Approval(id)) = &self.overlay {
            return self.approval(id);
        }
        match &self.view {
            View::Run(id) => self.pending_of(id),
            View::Dashboard => match self.focus {
                Pane::Approvals => self.selected_approval(),
                Pane::Runs => self
                    .selected_run()
                    .and_then(|r| self.pending_of(&r.tool_run_id)),
                // The selected pipeline's waiting human step.
                Pane::Pipelines => self
                    .pipelines()
                    .get(self.pipeline_sel)
                    .and_then(|p| p.waiting.as_deref())
                    .and_then(|id| self.approval(id)),
                Pane::Log => None,
            },
        }
    }

    fn notify(&mut self, level: Level, text: impl Into<String>) {
        self.notice = Some(Notice {
            level,
            text: text.into(),
            at: self.now,
        });
    }
}

/// Applies one message; returns what the feed must do.
pub fn update(app: &mut App, msg: Msg) -> Vec<Request> {
    match msg {
        Msg::Key(key) => on_key(app, key),
        Msg::Resize => Vec::new(),
        Msg::Tick(now) => {
            app.now = now;
            Vec::new()
        }
        Msg::Snapshot(snap) => {
            on_snapshot(app, *snap);
            Vec::new()
        }
        Msg::StoreDown(why) => {
            app.problem = Some(why);
            Vec::new()
        }
        Msg::Decided {
            approval_id,
            value,
            result,
        } => {
            let (level, text) = describe_decision(&approval_id, &value, result);
            app.notify(level, text);
            if let Some(Overlay::Approval(id)) = &app.overlay
                && *id == approval_id
                && level == Level::Ok
            {
                app.overlay = None;
            }
            Vec::new()
        }
        Msg::Cancelled { run_id, result } => {
            let (level, text) = describe_cancel(&run_id, result);
            app.notify(level, text);
            Vec::new()
        }
        Msg::Quit => {
            app.quit = true;
            Vec::new()
        }
    }
}

fn on_snapshot(app: &mut App, snap: Snapshot) {
    let old_run = app.selected_run().map(|r| r.tool_run_id.clone());
    let old_approval = app.selected_approval().map(|a| a.approval_id.clone());
    let old_pipeline = app
        .pipelines()
        .get(app.pipeline_sel)
        .map(|p| p.execution_id.clone());
    app.problem = None;
    // At the top of the runs, follow the newest run (a dashboard left open shows what is
    // new); anywhere else, and always for approvals (a decision key must never land on an
    // approval that slid under the cursor), keep the selection on the same item.
    if app.run_sel > 0 {
        app.run_sel = old_run
            .and_then(|id| snap.runs.iter().position(|r| r.tool_run_id == id))
            .unwrap_or(app.run_sel);
    }
    app.run_sel = app.run_sel.min(snap.runs.len().saturating_sub(1));
    app.approval_sel = old_approval
        .and_then(|id| snap.approvals.iter().position(|a| a.approval_id == id))
        .unwrap_or(app.approval_sel)
        .min(snap.approvals.len().saturating_sub(1));
    // The same for pipelines (`a` decides the selected one's human step).
    app.pipeline_sel = old_pipeline
        .and_then(|id| snap.pipelines.iter().position(|p| p.execution_id == id))
        .unwrap_or(app.pipeline_sel)
        .min(snap.pipelines.len().saturating_sub(1));
    if snap.pipelines.is_empty() && app.focus == Pane::Pipelines {
        app.focus = Pane::Approvals;
    }
    app.data = Some(snap);
}

fn clock(stamp: Option<&str>) -> String {
    match stamp.and_then(|s| s.get(11..19)) {
        Some(t) => format!("{t} UTC"),
        None => "an unknown time".into(),
    }
}

/// The status-line text for how a decision went.
pub fn describe_decision(
    approval_id: &str,
    value: &str,
    result: Result<DecideOutcome, String>,
) -> (Level, String) {
    let ap = short_id(approval_id);
    let value = sanitize_line(value);
    match result {
        Ok(DecideOutcome::Decided(a)) => {
            let mut t = format!("✓ {ap} {}", a.status);
            if let Some(v) = &a.chosen_value {
                t.push_str(&format!(" `{}`", sanitize_line(v)));
            }
            t.push_str(&format!(
                " — {}: {} — by {} (tui)",
                sanitize_line(&a.tool_name),
                sanitize_line(&a.question),
                sanitize_line(a.decided_by.as_deref().unwrap_or("?"))
            ));
            if let Some(c) = &a.comment {
                t.push_str(&format!(", comment: {}", sanitize_line(c)));
            }
            (Level::Ok, t)
        }
        Ok(DecideOutcome::Reviewed(a)) => (
            Level::Ok,
            format!(
                "✓ {ap} your approval is counted: {}",
                hr_shared::reviews::summary(&a).unwrap_or_default()
            ),
        ),
        Ok(DecideOutcome::AlreadySame(a)) => (
            Level::Info,
            format!(
                "{ap} was already {} the same way by {} at {}: nothing changed",
                a.status,
                sanitize_line(a.decided_by.as_deref().unwrap_or("?")),
                clock(a.decided_at.as_deref())
            ),
        ),
        Ok(DecideOutcome::Conflict(a)) if a.superseded_by.is_some() => (
            Level::Warn,
            format!(
                "✗ {ap} was superseded by {}: the screen changed, it was asked again — read the new one; your `{value}` was not applied",
                short_id(a.superseded_by.as_deref().unwrap_or("?"))
            ),
        ),
        Ok(DecideOutcome::Conflict(a)) => {
            let what = match &a.chosen_value {
                Some(v) => format!("{} `{}`", a.status, sanitize_line(v)),
                None => a.status.to_string(),
            };
            (
                Level::Warn,
                format!(
                    "✗ {ap} already decided by {} at {} ({what}); your `{value}` was not applied",
                    sanitize_line(a.decided_by.as_deref().unwrap_or("?")),
                    clock(a.decided_at.as_deref()),
                ),
            )
        }
        Ok(DecideOutcome::Changed(_)) => (
            Level::Warn,
            format!(
                "✗ {ap} is not the version shown here; look again — your `{value}` was not applied"
            ),
        ),
        Ok(DecideOutcome::NotFound) => (Level::Error, format!("✗ no approval {ap}")),
        Ok(DecideOutcome::Refused(why)) => (
            Level::Error,
            format!("✗ {ap} not decided: {}", sanitize_line(&why)),
        ),
        Ok(DecideOutcome::Invalid(e)) => (
            Level::Error,
            format!("✗ {ap}: {}", sanitize_line(&e.to_string())),
        ),
        Err(e) => (
            Level::Error,
            format!("✗ {ap} not decided: {}", sanitize_line(&e)),
        ),
    }
}

/// The status-line text for how a cancellation went.
pub fn describe_cancel(run_id: &str, result: Result<CancelOutcome, String>) -> (Level, String) {
    let tr = short_id(run_id);
    match result {
        Ok(CancelOutcome::Signalled { run, shim_pid }) => (
            Level::Ok,
            format!(
                "✓ cancelled {tr} ({}); its shim (pid {shim_pid}) is ending the tool",
                sanitize_line(&run.tool_name)
            ),
        ),
        Ok(CancelOutcome::Marked { run }) => (
            Level::Ok,
            format!(
                "✓ marked {tr} ({}) cancelled; no live shim to stop",
                sanitize_line(&run.tool_name)
            ),
        ),
        Ok(CancelOutcome::AlreadyFinal { run }) => (
            Level::Info,
            format!("{tr} had already ended: {}", run.status),
        ),
        Ok(CancelOutcome::NotFound) => (Level::Error, format!("✗ no run {tr}")),
        Err(e) => (
            Level::Error,
            format!("✗ {tr} not cancelled: {}", sanitize_line(&e)),
        ),
    }
}

fn on_key(app: &mut App, key: KeyEvent) -> Vec<Request> {
    if key.kind == KeyEventKind::Release {
        return Vec::new();
    }
    let ctrl = key.modifiers.contains(KeyModifiers::CONTROL);
    if ctrl && matches!(key.code, KeyCode::Char('c') | KeyCode::Char('q')) {
        app.quit = true;
        return Vec::new();
    }
    if app.input.is_some() {
        return on_input_key(app, key);
    }
    if let Some(run_id) = app.confirm_cancel.take() {
        if matches!(key.code, KeyCode::Char('y') | KeyCode::Char('Y')) {
            app.notify(Level::Info, format!("cancelling {}…", short_id(&run_id)));
            return vec![Request::Cancel { run_id }];
        }
        app.notify(Level::Info, format!("{} not cancelled", short_id(&run_id)));
        return Vec::new();
    }
    if app.overlay == Some(Overlay::Help) {
        match key.code {
            KeyCode::Char('q') => app.quit = true,
            _ => app.overlay = None,
        }
        return Vec::new();
    }
    match key.code {
        KeyCode::Char('q') => {
            app.quit = true;
            return Vec::new();
        }
        KeyCode::Char('?') | KeyCode::F(1) => {
            app.overlay = Some(Overlay::Help);
            return Vec::new();
        }
        KeyCode::Char('a' | 'r' | 't' | 'c' | '1'..='9') => return on_decision_key(app, key.code),
        _ => {}
    }
    if let Some(Overlay::Approval(_)) = &app.overlay {
        if matches!(
            key.code,
            KeyCode::Esc | KeyCode::Enter | KeyCode::Backspace | KeyCode::Left
        ) {
            app.overlay = None;
        }
        return Vec::new();
    }
    match app.view.clone() {
        View::Run(id) => on_detail_key(app, key, &id),
        View::Dashboard => on_dashboard_key(app, key),
    }
}

fn on_detail_key(app: &mut App, key: KeyEvent, id: &str) -> Vec<Request> {
    match key.code {
        KeyCode::Esc | KeyCode::Backspace | KeyCode::Left | KeyCode::Char('h') => {
            app.view = View::Dashboard;
            app.output_back = 0;
            vec![Request::Open(None)]
        }
        KeyCode::Char('x') => ask_cancel(app, id.to_owned()),
        KeyCode::Up | KeyCode::Char('k') => {
            app.output_back = app.output_back.saturating_add(1);
            Vec::new()
        }
        KeyCode::Down | KeyCode::Char('j') => {
            app.output_back = app.output_back.saturating_sub(1);
            Vec::new()
        }
        KeyCode::PageUp => {
            app.output_back = app.output_back.saturating_add(10);
            Vec::new()
        }
        KeyCode::PageDown => {
            app.output_back = app.output_back.saturating_sub(10);
            Vec::new()
        }
        KeyCode::End | KeyCode::Char('G') => {
            app.output_back = 0;
            Vec::new()
        }
        _ => Vec::new(),
    }
}

fn ask_cancel(app: &mut App, run_id: String) -> Vec<Request> {
    let run = app
        .runs()
        .iter()
        .chain(
            app.data
                .as_ref()
                .and_then(|d| d.detail.as_ref())
                .map(|d| &d.run),
        )
        .find(|r| r.tool_run_id == run_id);
    match run {
        Some(r) if r.status.is_final() => {
            let text = format!("{} has already ended ({})", short_id(&run_id), r.status);
            app.notify(Level::Info, text);
        }
        _ => app.confirm_cancel = Some(run_id),
    }
    Vec::new()
}

fn move_sel(sel: &mut usize, len: usize, code: KeyCode) -> bool {
    let last = len.saturating_sub(1);
    let new = match code {
        KeyCode::Up | KeyCode::Char('k') => sel.saturating_sub(1),
        KeyCode::Down | KeyCode::Char('j') => (*sel + 1).min(last),
        KeyCode::PageUp => sel.saturating_sub(10),
        KeyCode::PageDown => (*sel + 10).min(last),
        KeyCode::Home | KeyCode::Char('g') => 0,
        KeyCode::End | KeyCode::Char('G') => last,
        _ => return false,
    };
    *sel = new;
    true
}

fn on_dashboard_key(app: &mut App, key: KeyEvent) -> Vec<Request> {
    match key.code {
        KeyCode::Tab => {
            let pipelines = !app.pipelines().is_empty();
            app.focus = match app.focus {
                Pane::Runs => Pane::Approvals,
                Pane::Approvals if pipelines => Pane::Pipelines,
                Pane::Approvals | Pane::Pipelines => Pane::Log,
                Pane::Log => Pane::Runs,
            };
            return Vec::new();
        }
        KeyCode::BackTab => {
            let pipelines = !app.pipelines().is_empty();
            app.focus = match app.focus {
                Pane::Runs => Pane::Log,
                Pane::Approvals => Pane::Runs,
                Pane::Pipelines => Pane::Approvals,
                Pane::Log if pipelines => Pane::Pipelines,
                Pane::Log => Pane::Approvals,
            };
            return Vec::new();
        }
        KeyCode::Char('/') => {
            app.input = Some(Input {
                kind: InputKind::Filter,
                buf: app.query.text.clone(),
            });
            return Vec::new();
        }
        KeyCode::Esc => {
            app.notice = None;
            return Vec::new();
        }
        _ => {}
    }
    match app.focus {
        Pane::Runs => {
            let len = app.runs().len();
            if move_sel(&mut app.run_sel, len, key.code) {
                return Vec::new();
            }
            match key.code {
                KeyCode::Enter | KeyCode::Right | KeyCode::Char('l') => {
                    if let Some(id) = app.selected_run().map(|r| r.tool_run_id.clone()) {
                        app.view = View::Run(id.clone());
                        app.output_back = 0;
                        return vec![Request::Open(Some(id))];
                    }
                    Vec::new()
                }
                KeyCode::Char('x') => match app.selected_run().map(|r| r.tool_run_id.clone()) {
                    Some(id) => ask_cancel(app, id),
                    None => Vec::new(),
                },
                _ => Vec::new(),
            }
        }
        Pane::Approvals => {
            let len = app.approvals().len();
            if move_sel(&mut app.approval_sel, len, key.code) {
                return Vec::new();
            }
            if key.code == KeyCode::Enter
                && let Some(id) = app.selected_approval().map(|a| a.approval_id.clone())
            {
                app.overlay = Some(Overlay::Approval(id));
            }
            Vec::new()
        }
        Pane::Pipelines => {
            let len = app.pipelines().len();
            move_sel(&mut app.pipeline_sel, len, key.code);
            Vec::new()
        }
        Pane::Log => {
            let len = app.data.as_ref().map(|d| d.log.len()).unwrap_or(0);
            let mut pos = len.saturating_sub(1).saturating_sub(app.log_back);
            if move_sel(&mut pos, len, key.code) {
                app.log_back = len.saturating_sub(1).saturating_sub(pos);
            }
            Vec::new()
        }
    }
}

fn on_decision_key(app: &mut App, code: KeyCode) -> Vec<Request> {
    if let Some(why) = &app.read_only {
        let text = format!("✗ decisions are refused here: {why}");
        app.notify(Level::Error, text);
        return Vec::new();
    }
    let Some(target) = app.decision_target() else {
        if matches!(code, KeyCode::Char('a' | 'r' | 't' | 'c' | '1'..='9')) {
            let text = match app.focus {
                Pane::Runs if app.view == View::Dashboard => {
                    "this run has no pending approval; Tab to the approvals pane"
                }
                Pane::Pipelines if app.view == View::Dashboard => {
                    "this pipeline waits for no decision"
                }
                _ => "no pending approval selected",
            };
            app.notify(Level::Info, text);
        }
        return Vec::new();
    };
    let id = target.approval_id.clone();
    let value = match code {
        KeyCode::Char('a') => "approve".to_owned(),
        KeyCode::Char('r') => "reject".to_owned(),
        KeyCode::Char(d @ '1'..='9') => {
            let n = d as usize - '0' as usize;
            match target.options_json.get(n - 1) {
                Some(o) => o.value.clone(),
                None => {
                    let text = format!(
                        "{} has {} option(s); no option {n}",
                        short_id(&id),
                        target.options_json.len()
                    );
                    app.notify(Level::Warn, text);
                    return Vec::new();
                }
            }
        }
        KeyCode::Char('t') => {
            if !target.allows_text {
                let text = format!("{} does not take free text", short_id(&id));
                app.notify(Level::Warn, text);
            } else {
                app.input = Some(Input {
                    kind: InputKind::Text(id),
                    buf: String::new(),
                });
            }
            return Vec::new();
        }
        KeyCode::Char('c') => {
            let buf = match &app.comment {
                Some((cid, text)) if *cid == id => text.clone(),
                _ => String::new(),
            };
            app.input = Some(Input {
                kind: InputKind::Comment(id),
                buf,
            });
            return Vec::new();
        }
        _ => return Vec::new(),
    };
    vec![decide(app, id, value)]
}

fn decide(app: &mut App, approval_id: String, value: String) -> Request {
    let comment = match app.comment.take() {
        Some((id, text)) if id == approval_id => Some(text),
        other => {
            app.comment = other;
            None
        }
    };
    app.notify(
        Level::Info,
        format!(
            "deciding {} → {}…",
            short_id(&approval_id),
            sanitize_line(&value)
        ),
    );
    // The version the operator is looking at: what they decide on.
    let version = app
        .approvals()
        .iter()
        .find(|a| a.approval_id == approval_id)
        .and_then(|a| a.version().map(str::to_owned));
    Request::Decide {
        approval_id,
        value,
        comment,
        version,
    }
}

fn on_input_key(app: &mut App, key: KeyEvent) -> Vec<Request> {
    let Some(input) = app.input.as_mut() else {
        return Vec::new();
    };
    let ctrl = key.modifiers.contains(KeyModifiers::CONTROL);
    match key.code {
        KeyCode::Esc => {
            app.input = None;
            Vec::new()
        }
        KeyCode::Backspace => {
            input.buf.pop();
            Vec::new()
        }
        KeyCode::Char('u') if ctrl => {
            input.buf.clear();
            Vec::new()
        }
        KeyCode::Char(c) if !ctrl && !c.is_control() => {
            if input.buf.len() < hr_shared::approvals::MAX_TEXT_ANSWER {
                input.buf.push(c);
            }
            Vec::new()
        }
        KeyCode::Enter => {
            let Some(Input { kind, buf }) = app.input.take() else {
                return Vec::new();
            };
            match kind {
                InputKind::Filter => match RunQuery::parse(&buf) {
                    Ok(q) => {
                        app.query = q.clone();
                        app.run_sel = 0;
                        let text = if q.is_empty() {
                            "showing all runs".to_owned()
                        } else {
                            format!("filter: {}", sanitize_line(&q.text))
                        };
                        app.notify(Level::Info, text);
                        vec![Request::Filter(q)]
                    }
                    Err(e) => {
                        app.notify(Level::Error, format!("✗ filter: {e}"));
                        app.input = Some(Input {
                            kind: InputKind::Filter,
                            buf,
                        });
                        Vec::new()
                    }
                },
                InputKind::Text(id) => {
                    if buf.is_empty() {
                        app.notify(Level::Info, "nothing typed: not decided");
                        return Vec::new();
                    }
                    vec![decide(app, id, buf)]
                }
                InputKind::Comment(id) => {
                    let text = buf.trim().to_owned();
                    if text.is_empty() {
                        app.comment = None;
                        app.notify(Level::Info, "comment cleared");
                    } else {
                        app.notify(
                            Level::Info,
                            format!(
                                "comment kept for {}: now decide with a, r, 1-9 or t",
                                short_id(&id)
                            ),
                        );
                        app.comment = Some((id, text));
                    }
                    Vec::new()
                }
            }
        }
        _ => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filters_parse() {
        let q = RunQuery::parse("fail terraform").unwrap();
        assert_eq!(q.statuses, [RunStatus::Failed, RunStatus::FailedTimeout]);
        assert_eq!(q.tool.as_deref(), Some("terraform"));
        let q = RunQuery::parse("status:stalled tool:run").unwrap();
        assert_eq!(q.statuses, [RunStatus::Stalled]);
        assert_eq!(q.tool.as_deref(), Some("run"));
        assert!(RunQuery::parse("").unwrap().is_empty());
        assert!(RunQuery::parse("status:nope").is_err());
        assert!(RunQuery::parse("apt pip").is_err());
        assert_eq!(
            RunQuery::parse("waiting").unwrap().statuses,
            [RunStatus::WaitingApproval]
        );
    }
}
