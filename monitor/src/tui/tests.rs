//! Rendering tests: a real database in a temp dir, read by the feed's own `load`, drawn on
//! ratatui's `TestBackend` and compared with committed insta snapshots. Times are relative
//! to a `now` the test fixes (clock times, pids and the host are filtered out), ids are
//! chosen by the test. Plus the loop driven through its channels, and the feed thread.

use super::app::{App, InputKind, Msg, Overlay, Pane, Request, RunQuery, View, update};
use super::draw::{draw, status_color};
use super::feed::{self, Snapshot};
use super::run_loop;
use super::view;
use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
use hr_shared::approvals::{Approval, DecideOutcome, Decider, PromptKind};
use hr_shared::db::StoreError;
use hr_shared::event::ApprovalOption;
use hr_shared::paths::StatePaths;
use hr_shared::rules::LocalHost;
use hr_shared::runs::{self, ToolRun};
use hr_shared::status::RunStatus;
use hr_shared::store::sqlite::SqliteStore;
use hr_shared::store::{OperatorStore, RunWrite, RunnerStore};
use hr_shared::{proc, testing, time};
use ratatui::Terminal;
use ratatui::backend::TestBackend;
use ratatui::buffer::Buffer;
use std::sync::mpsc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// A test's world: a state dir with a database, and the `now` everything is relative to.
struct World {
    _tmp: tempfile::TempDir,
    paths: StatePaths,
    /// Behind a cell so that a snapshot can be read while `&self` builds the app.
    store: std::cell::RefCell<SqliteStore>,
    now: SystemTime,
}

impl World {
    fn new() -> World {
        let tmp = tempfile::tempdir().unwrap();
        let paths = StatePaths {
            root: tmp.path().join("state"),
            db: tmp.path().join("state/state.db"),
            store_url: None,
            listen_url: None,
            server: None,
        };
        paths.ensure_dirs().unwrap();
        let mut store = SqliteStore::create(paths.clone());
        RunnerStore::connect(&mut store).unwrap();
        // Whole seconds, so ages come out round.
        let secs = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_secs();
        World {
            _tmp: tmp,
            paths,
            store: std::cell::RefCell::new(store),
            now: UNIX_EPOCH + Duration::from_secs(secs),
        }
    }

    fn ago(&self, secs: u64) -> String {
        time::to_rfc3339(self.now - Duration::from_secs(secs))
    }

    fn ahead(&self, secs: u64) -> String {
        time::to_rfc3339(self.now + Duration::from_secs(secs))
    }

    /// A run started `started` seconds ago; live runs get this process as their shim (so
    /// they are alive), finished ones an end time.
    fn run(&self, id: &str, tool: &str, status: RunStatus, started: u64) -> ToolRun {
        let me = std::process::id() as i64;
        let finished = status.is_final();
        ToolRun {
            execution_id: Some("EX-TEST".into()),
            started_at: self.ago(started),
            completed_at: finished.then(|| self.ago(started.saturating_sub(3))),
            last_output_at: Some(self.ago(started.saturating_sub(1))),
            supervisor_heartbeat_at: (!finished).then(|| self.ago(1)),
            pid: Some(me + 1),
            shim_pid: Some(me),
            shim_start_time: proc::read_stat(me as i32).map(|s| s.start_time as i64),
            host: Some(proc::hostname()),
            argv_json: vec![tool.into(), "--yes".into()],
            cwd: Some("/work/project".into()),
            updated_at: self.ago(0),
            ..testing::run(id, tool, status)
        }
    }

    fn approval(&self, id: &str, run: &ToolRun, question: &str, asked: u64) -> Approval {
        Approval {
            tool_run_id: run.tool_run_id.clone(),
            tool_name: run.tool_name.clone(),
            execution_id: run.execution_id.clone(),
            question: question.into(),
            context: Some(format!("some output\n{question}")),
            created_at: self.ago(asked),
            expires_at: Some(self.ahead(24 * 3600 - asked)),
            prompt_line: Some(question.into()),
            rule_name: None,
            ..testing::approval(id, PromptKind::Choice)
        }
    }

    fn insert_runs(&mut self, list: &[ToolRun]) {
        self.store.get_mut().import_rows(list, &[], "test").unwrap();
    }

    fn insert_approvals(&mut self, list: &[Approval]) {
        self.store.get_mut().import_rows(&[], list, "test").unwrap();
    }

    /// Records liveness timestamps of run `id`, as its shim would.
    fn touch(&mut self, id: &str, t: runs::Touch) {
        self.store
            .get_mut()
            .record(id, &[RunWrite::Touch(t)], "test", false)
            .unwrap();
    }

    /// What the feed would send, for this query and open run.
    fn snapshot(&self, query: &RunQuery, open: Option<&str>) -> Snapshot {
        let mut store = self.store.borrow_mut();
        let mut snap = feed::load(&mut *store, &self.paths, query, open, self.now).unwrap();
        snap.vanished = feed::vanished(&mut *store, &LocalHost::new()).unwrap();
        snap
    }

    fn app(&self, snap: Snapshot) -> App {
        let mut app = App::new(self.now, "/home/op/.local/state/headless-run".into(), None);
        update(&mut app, Msg::Snapshot(Box::new(snap)));
        app
    }

    /// A database with a run in every status, and approvals.
    fn busy(&mut self) {
        let mut list = vec![
            self.run(
                "TR-90000000000000000000QUEUED",
                "make",
                RunStatus::Queued,
                2,
            ),
            self.run(
                "TR-8000000000000000000RUNNING",
                "cargo",
                RunStatus::Running,
                95,
            ),
            self.run(
                "TR-6000000000000000000WAITING",
                "terraform",
                RunStatus::WaitingApproval,
                600,
            ),
            self.run(
                "TR-5000000000000000000STALLED",
                "pip",
                RunStatus::Stalled,
                900,
            ),
            self.run(
                "TR-40000000000000000COMPLETED",
                "apt-get",
                RunStatus::Completed,
                1800,
            ),
            self.run(
                "TR-30000000000000000000FAILED",
                "ssh",
                RunStatus::Failed,
                3600,
            ),
            self.run(
                "TR-2000000000000000000TIMEOUT",
                "git",
                RunStatus::FailedTimeout,
                7200,
            ),
            self.run(
                "TR-10000000000000000CANCELLED",
                "aider",
                RunStatus::Cancelled,
                86400 + 7200,
            ),
        ];
        list[4].exit_code = Some(0);
        list[5].exit_code = Some(255);
        list[5].reason = Some("exited with code 255".into());
        list[6].exit_code = Some(124);
        list[6].reason = Some("hard timeout (30m)".into());
        list[7].reason = Some("cancelled by alice".into());
        // A running run whose shim is gone: shown (and counted) as failed.
        let mut gone = self.run(
            "TR-700000000000000000VANISHED",
            "codex",
            RunStatus::Running,
            300,
        );
        gone.shim_pid = Some(i32::MAX as i64 - 7);
        list.push(gone);
        list.sort_by(|a, b| a.tool_run_id.cmp(&b.tool_run_id));
        self.insert_runs(&list);
        let waiting = list
            .iter()
            .find(|r| r.status == RunStatus::WaitingApproval)
            .unwrap()
            .clone();
        let a1 = self.approval(
            "AP-0000000000000000000000APP1",
            &waiting,
            "Do you want to perform these actions? Only 'yes' will be accepted to approve.",
            600,
        );
        let mut a2 = self.approval(
            "AP-0000000000000000000000APP2",
            &waiting,
            "Overwrite /etc/hosts? [y/N]",
            120,
        );
        a2.expires_at = Some(self.ahead(20 * 60));
        self.insert_approvals(&[a1, a2]);
        let log = [
            r#"{"event":"tool_status_change","timestamp":"TS","tool":"cargo","tool_run_id":"TR-8000000000000000000RUNNING","status":"running"}"#,
            r#"{"event":"tool_output","timestamp":"TS","tool":"cargo","tool_run_id":"TR-8000000000000000000RUNNING","stream":"pty","text":"   Compiling monitor v0.1.0"}"#,
            r#"{"event":"approval_needed","timestamp":"TS","tool":"terraform","tool_run_id":"TR-6000000000000000000WAITING","approval_id":"AP-0000000000000000000000APP1","question":"Do you want to perform these actions?","options":[{"value":"yes","label":"Yes"}]}"#,
            r#"{"event":"tool_status_change","timestamp":"TS","tool":"ssh","tool_run_id":"TR-30000000000000000000FAILED","status":"failed","exit_code":255,"reason":"exited with code 255"}"#,
            r#"{"event":"approval_status_change","timestamp":"TS","tool":"apt-get","tool_run_id":"TR-40000000000000000COMPLETED","approval_id":"AP-0000000000000000000000APP0","status":"approved","chosen_value":"y","decided_by":"alice","decision_channel":"tui"}"#,
        ]
        .map(|l| l.replace("TS", "2026-01-02T03:04:05.000Z"))
        .join("\n");
        std::fs::write(self.paths.combined_log(), log + "\n").unwrap();
    }
}

fn render(app: &App, w: u16, h: u16) -> Buffer {
    let mut term = Terminal::new(TestBackend::new(w, h)).unwrap();
    term.draw(|f| draw(app, f)).unwrap();
    term.backend().buffer().clone()
}

/// The buffer as text, one line per row, trailing spaces cut.
fn text(buf: &Buffer) -> String {
    let mut out = String::new();
    for y in 0..buf.area.height {
        let mut line = String::new();
        for x in 0..buf.area.width {
            line.push_str(buf[(x, y)].symbol());
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// Asserts the screen against its snapshot, with clock times, pids and the host filtered.
fn snapshot(name: &str, buf: &Buffer) {
    let screen = text(buf);
    insta::with_settings!({
        filters => vec![
            (r"\d\d:\d\d:\d\d", "[hh:mm:ss]"),
            // Pids and the host name vary in length: take the padding after them too.
            (r"pid \d+ · shim \d+ · host [^\s│]+ *", "pid [pid] · shim [pid] · host [host] "),
            (r"pid \d+", "pid [pid]"),
            (r"( in \S+ on )[^\s│]+ *", "$1[host] "),
        ],
        prepend_module_to_snapshot => false,
        omit_expression => true,
    }, {
        insta::assert_snapshot!(name, screen);
    });
}

fn key(c: char) -> Msg {
    Msg::Key(KeyEvent::new(KeyCode::Char(c), KeyModifiers::NONE))
}

fn code(k: KeyCode) -> Msg {
    Msg::Key(KeyEvent::new(k, KeyModifiers::NONE))
}

/// What must never reach the operator's terminal from a tool: control characters (the
/// escape that starts every sequence among them), bidirectional controls that reorder what
/// is read, and invisible characters that hide or split words. Spelled out here rather than
/// taken from the sanitizer, so a sanitizer that lets one through fails the tests.
fn harmful(c: char) -> bool {
    c.is_control()
        || matches!(c, '\u{061c}' | '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
        || matches!(
            c,
            '\u{200b}'..='\u{200d}' | '\u{2060}' | '\u{feff}' | '\u{2028}' | '\u{2029}'
        )
        // Text no terminal shows: tags, invisible operators, fillers, variation selectors.
        || matches!(
            c,
            '\u{e0000}'..='\u{e0fff}'
                | '\u{2061}'..='\u{2064}'
                | '\u{180e}'
                | '\u{3164}'
                | '\u{115f}'
                | '\u{1160}'
                | '\u{ffa0}'
                | '\u{00ad}'
                | '\u{fe00}'..='\u{fe0f}'
        )
}

/// Every string the view model holds for this state (each run, approval, log line, the
/// open run, the status line — drawn or not) is free of [`harmful`] characters. This looks
/// before ratatui, which drops control and zero-width characters by itself and so would
/// hide a missing sanitizer from a test that only reads the screen.
fn assert_clean_model(app: &App) -> Vec<String> {
    let texts = view::all_texts(app);
    for t in &texts {
        assert!(
            !t.chars().any(harmful),
            "a harmful character is about to be drawn: {t:?}"
        );
    }
    texts
}

/// No cell holds an escape or any other control character. Ratatui drops those itself, so
/// this cannot catch a missing sanitizer: [`assert_clean_model`] does.
fn assert_harmless(buf: &Buffer) {
    for cell in buf.content() {
        assert!(
            !cell.symbol().chars().any(|c| c.is_control()),
            "a control character reached the screen: {:?}",
            cell.symbol()
        );
    }
}

#[test]
fn empty_database_is_calm() {
    let w = World::new();
    let app = w.app(w.snapshot(&RunQuery::default(), None));
    let buf = render(&app, 100, 24);
    let screen = text(&buf);
    assert!(screen.contains("✓ all calm"), "{screen}");
    assert!(screen.contains("no runs yet"), "{screen}");
    snapshot("empty_database", &buf);
}

#[test]
fn busy_database_shows_every_status_in_words_and_colour() {
    let mut w = World::new();
    w.busy();
    let app = w.app(w.snapshot(&RunQuery::default(), None));
    let buf = render(&app, 140, 40);
    let screen = text(&buf);
    for st in RunStatus::ALL {
        assert!(screen.contains(st.as_str()), "{} missing:\n{screen}", st);
    }
    // Each status word is drawn in its colour (in the runs table's rows).
    for y in 0..buf.area.height {
        let row: String = (0..buf.area.width).map(|x| buf[(x, y)].symbol()).collect();
        if !row.contains("TR-") {
            continue;
        }
        for st in [
            RunStatus::Running,
            RunStatus::Stalled,
            RunStatus::Cancelled,
            RunStatus::FailedTimeout,
        ] {
            let word = format!(" {} ", st.as_str());
            if let Some(byte) = row.find(&word) {
                let x = row[..byte].chars().count() as u16 + 1;
                assert_eq!(buf[(x, y)].fg, status_color(st), "{st} on row {y}");
            }
        }
    }
    // The vanished shim's run is shown failed, with why.
    assert!(screen.contains("supervisor vanished"), "{screen}");
    snapshot("busy_database", &buf);
}

#[test]
fn alerts_count_stalled_failed_waiting_and_expiring() {
    let mut w = World::new();
    w.busy();
    let app = w.app(w.snapshot(&RunQuery::default(), None));
    let buf = render(&app, 160, 30);
    let top = text(&buf).lines().next().unwrap_or_default().to_owned();
    // ssh, git (timeout) and the vanished codex run.
    assert!(top.contains("✗ 3 failed in 24h"), "{top}");
    assert!(top.contains(" 1 stalled"), "{top}");
    assert!(top.contains(" 1 waiting for approval"), "{top}");
    assert!(top.contains(" 1 approval expiring within 1h"), "{top}");
    // The vanished run no longer counts as running.
    assert!(top.contains("1 running · 2 pending · 9 runs"), "{top}");
    assert!(!top.contains("monitor worker"), "{top}");
    snapshot("alerts", &buf);
    // Decided, the waiting run needs the worker now, not a decision.
    for id in [
        "AP-0000000000000000000000APP1",
        "AP-0000000000000000000000APP2",
    ] {
        let who = hr_shared::approvals::Decider {
            by: "alice",
            channel: "cli",
            comment: None,
            version: None,
            groups: &[],
        };
        let _ = OperatorStore::decide(&mut *w.store.borrow_mut(), id, "approve", &who);
    }
    let app = w.app(w.snapshot(&RunQuery::default(), None));
    let top = text(&render(&app, 160, 30))
        .lines()
        .next()
        .unwrap_or_default()
        .to_owned();
    assert!(!top.contains("waiting for approval"), "{top}");
    assert!(
        top.contains("1 approved, waiting for `monitor worker` to resume"),
        "{top}"
    );
}

/// Issue 15 item 8: a run the stall timeout ended counts as stalled, not as a failure.
#[test]
fn a_run_the_stall_timeout_ended_counts_as_stalled_not_failed() {
    let mut w = World::new();
    w.busy();
    let mut ended = w.run(
        "TR-0500000000000000STALLENDED",
        "npm",
        RunStatus::Stalled,
        120,
    );
    ended.exit_code = Some(92);
    ended.completed_at = Some(w.ago(60));
    ended.reason = Some("no output and no heartbeat for 10m".into());
    w.insert_runs(&[ended]);
    let app = w.app(w.snapshot(&RunQuery::default(), None));
    let top = text(&render(&app, 160, 30))
        .lines()
        .next()
        .unwrap_or_default()
        .to_owned();
    assert!(top.contains("✗ 3 failed in 24h"), "unchanged: {top}");
    assert!(
        top.contains(" 2 stalled"),
        "the live one and the ended one: {top}"
    );
}

#[test]
fn approvals_pane_and_an_approval_in_full() {
    let mut w = World::new();
    w.busy();
    let mut app = w.app(w.snapshot(&RunQuery::default(), None));
    update(&mut app, code(KeyCode::Tab));
    assert_eq!(app.focus, Pane::Approvals);
    update(&mut app, code(KeyCode::Down));
    snapshot("approvals_pane", &render(&app, 120, 30));
    update(&mut app, code(KeyCode::Enter));
    assert!(matches!(app.overlay, Some(Overlay::Approval(_))));
    update(&mut app, key('c'));
    for c in "ok by me".chars() {
        update(&mut app, key(c));
    }
    update(&mut app, code(KeyCode::Enter));
    snapshot("approval_overlay", &render(&app, 120, 30));
    // Digit 2 picks the second option, with the comment.
    let reqs = update(&mut app, key('2'));
    assert_eq!(
        reqs,
        [Request::Decide {
            approval_id: "AP-0000000000000000000000APP1".into(),
            value: "n".into(),
            comment: Some("ok by me".into()),
            version: None,
        }]
    );
}

#[test]
fn run_detail_renders_output_approvals_and_history() {
    let mut w = World::new();
    w.busy();
    let id = "TR-6000000000000000000WAITING";
    std::fs::write(
        w.paths.run_log(id),
        b"Terraform will perform the following actions:\n\n  \x1b[32m+\x1b[0m resource \"aws_instance\" \"web\"\n\x1b]0;owned\x07Plan: 1 to add, 0 to change, 0 to destroy.\n\nDo you want to perform these actions?\n  Enter a value: ",
    )
    .unwrap();
    let mut app = w.app(w.snapshot(&RunQuery::default(), None));
    let sel = app.runs().iter().position(|r| r.tool_run_id == id).unwrap();
    app.run_sel = sel;
    let reqs = update(&mut app, code(KeyCode::Enter));
    assert_eq!(reqs, [Request::Open(Some(id.into()))]);
    assert_eq!(app.view, View::Run(id.into()));
    update(
        &mut app,
        Msg::Snapshot(Box::new(w.snapshot(&RunQuery::default(), Some(id)))),
    );
    let buf = render(&app, 120, 40);
    assert_harmless(&buf);
    let screen = text(&buf);
    assert!(
        screen.contains("+ resource \"aws_instance\" \"web\""),
        "{screen}"
    );
    assert!(!screen.contains("owned"), "{screen}");
    snapshot("run_detail", &buf);
    // x asks first; anything but y keeps the run.
    update(&mut app, key('x'));
    assert_eq!(app.confirm_cancel.as_deref(), Some(id));
    snapshot("run_detail_confirm_cancel", &render(&app, 120, 40));
    assert!(update(&mut app, key('n')).is_empty());
    update(&mut app, key('x'));
    assert_eq!(
        update(&mut app, key('y')),
        [Request::Cancel { run_id: id.into() }]
    );
}

/// DESIGN §14: a parked run says who started it and who would run it again — and, when
/// this user's worker may not (it says it ran as another uid), why not.
#[test]
fn a_parked_run_says_who_resumes_it_and_why_not_you() {
    let mut w = World::new();
    let id = "TR-7000000000000000000PARKED1";
    let mut run = w.run(id, "deploy", RunStatus::WaitingApproval, 30);
    run.exit_code = Some(90);
    run.owner = Some(hr_shared::proc::user_name(hr_shared::proc::effective_uid()));
    run.metadata = Some(serde_json::json!({ "uid": 4242 }));
    w.insert_runs(&[run]);
    let mut app = w.app(w.snapshot(&RunQuery::default(), Some(id)));
    app.view = View::Run(id.into());
    let screen = text(&render(&app, 200, 40));
    let line = |label: &str| {
        screen
            .lines()
            .find(|l| l.contains(label))
            .unwrap_or_else(|| panic!("no `{label}` line: {screen}"))
            .to_owned()
    };
    assert!(
        line("│ started by").contains(run_owner().as_str()),
        "{screen}"
    );
    let resumed = line("│ resume ");
    assert!(
        resumed.contains("as uid 4242") && resumed.contains("not by"),
        "{resumed}"
    );
}

fn run_owner() -> String {
    hr_shared::proc::user_name(hr_shared::proc::effective_uid())
}

#[test]
fn fits_80_by_24() {
    let mut w = World::new();
    w.busy();
    let app = w.app(w.snapshot(&RunQuery::default(), None));
    let buf = render(&app, 80, 24);
    let screen = text(&buf);
    assert!(
        screen.lines().next().unwrap_or("").contains("ALERTS"),
        "{screen}"
    );
    assert!(screen.contains("waiting_approval"), "{screen}");
    assert!(screen.contains("Pending approvals (2)"), "{screen}");
    snapshot("busy_80x24", &buf);
    // And at a size too small to be useful, it still draws without panicking.
    render(&app, 20, 5);
    render(&app, 1, 1);
}

#[test]
fn a_question_full_of_escape_sequences_is_drawn_harmlessly() {
    let mut w = World::new();
    let mut run = w.run(
        "TR-000000000000000000HOSTILE1",
        "evil\x1b[2J\u{200b}\u{115f}tool",
        RunStatus::WaitingApproval,
        10,
    );
    run.reason = Some("\x1b]0;pwned\x07reason\u{202e}\x1b[31m red".into());
    run.argv_json = vec!["evil".into(), "\x1b[1;1H\x1b[2Jwipe".into()];
    w.insert_runs(&[run.clone()]);
    let mut a = w.approval(
        "AP-\x1b[31m00000000000000000HOSTILE",
        &run,
        "\x1b[2J\x1b[H\x1b]0;owned\x07\x1b]8;;http://evil\x1b\\Delete\x1b]8;;\x1b\\ every\u{200d}thing?\u{e0061}\u{e0070}\u{2066}\x07\x08\r\u{202e}[y/N]\x1bP1$r\x1b\\ \u{feff}\u{9b}31m",
        5,
    );
    a.context =
        Some("\x1b[?1049h\x1b[?25lfull \u{2028}scr\u{2062}een\u{180e}\x1b[6n\n\x1b]52;c;Y2xpcGJvYXJk\x07".into());
    a.options_json[0].label = "\x1b[5mYes\u{200f}\u{3164}\x1b[0m".into();
    a.options_json[1].value = "n\x1b[D".into();
    w.insert_approvals(&[a.clone()]);
    std::fs::write(
        w.paths.combined_log(),
        format!(
            "{}\n",
            serde_json::json!({"event":"tool_output","timestamp":"2026-01-02T03:04:05.000Z","tool":"evil\x1b[2J","tool_run_id":"TR-1","stream":"pty","text":"\x1b]0;title\x07\x1b[31mred\u{202e}\x1b[0m\u{2060}"})
        ),
    )
    .unwrap();
    std::fs::write(
        w.paths.run_log(&run.tool_run_id),
        "\x1b]0;t\x07\x1b[?1049hhel\u{200b}lo\u{202e}\x1b[6n\x07\n",
    )
    .unwrap();
    let mut app = w.app(w.snapshot(&RunQuery::default(), None));
    let texts = assert_clean_model(&app);
    for shown in [
        "Delete everything?",
        "eviltool",
        "reason red",
        "│ red",
        "full screen",
    ] {
        assert!(
            texts.iter().any(|t| t.contains(shown)),
            "{shown}: {texts:?}"
        );
    }
    let buf = render(&app, 120, 30);
    assert_harmless(&buf);
    let screen = text(&buf);
    assert!(screen.contains("Delete everything?"), "{screen}");
    snapshot("hostile_question", &buf);
    update(&mut app, code(KeyCode::Tab));
    update(&mut app, code(KeyCode::Enter));
    // A comment and a failed decision, both carrying a tool's text back to the screen.
    update(&mut app, key('c'));
    for c in "ok \u{202e}\u{200b}".chars() {
        update(&mut app, key(c));
    }
    assert_clean_model(&app);
    update(&mut app, code(KeyCode::Enter));
    update(
        &mut app,
        Msg::Decided {
            approval_id: a.approval_id.clone(),
            value: "n\x1b[D".into(),
            result: Err("\x1b]0;x\x07refused\u{202e}".into()),
        },
    );
    let texts = assert_clean_model(&app);
    assert!(texts.iter().any(|t| t.contains("refused")), "{texts:?}");
    // The snapshot below is of the overlay as it was.
    app.notice = None;
    app.comment = None;
    let buf = render(&app, 120, 30);
    assert_harmless(&buf);
    snapshot("hostile_question_overlay", &buf);
    update(&mut app, code(KeyCode::Esc));
    update(&mut app, code(KeyCode::BackTab));
    update(&mut app, code(KeyCode::Enter));
    update(
        &mut app,
        Msg::Snapshot(Box::new(
            w.snapshot(&RunQuery::default(), Some(&run.tool_run_id)),
        )),
    );
    let texts = assert_clean_model(&app);
    assert!(texts.iter().any(|t| t.contains("hello")), "{texts:?}");
    assert!(texts.iter().any(|t| t.contains("evil wipe")), "{texts:?}");
    let buf = render(&app, 120, 30);
    assert_harmless(&buf);
    assert!(text(&buf).contains("hello"));
}

#[test]
fn a_missing_database_is_a_message_not_a_crash() {
    let w = World::new();
    let mut app = App::new(w.now, "/home/op/.local/state/headless-run".into(), None);
    let err = StoreError::Missing(w.paths.root.join("nope.db"));
    update(
        &mut app,
        Msg::StoreDown(err.to_string().replace(
            &w.paths.root.display().to_string(),
            "/home/op/.local/state/headless-run",
        )),
    );
    let buf = render(&app, 80, 24);
    let screen = text(&buf);
    assert!(screen.contains("Cannot read the database"), "{screen}");
    snapshot("no_database", &buf);
    // Once it can be read, the data replaces the message.
    update(
        &mut app,
        Msg::Snapshot(Box::new(w.snapshot(&RunQuery::default(), None))),
    );
    assert!(!text(&render(&app, 80, 24)).contains("Cannot read"));
}

#[test]
fn help_lists_every_key() {
    let w = World::new();
    let mut app = w.app(w.snapshot(&RunQuery::default(), None));
    update(&mut app, key('?'));
    let buf = render(&app, 100, 30);
    let screen = text(&buf);
    for k in [
        "Tab",
        "Enter",
        "Esc",
        "/",
        "a ",
        "r ",
        "1-9",
        "t ",
        "c ",
        "x ",
        "q  Ctrl-C",
    ] {
        assert!(screen.contains(k), "{k} missing:\n{screen}");
    }
    snapshot("help", &buf);
    update(&mut app, code(KeyCode::Esc));
    assert_eq!(app.overlay, None);
}

#[test]
fn filter_by_status_and_tool() {
    let mut w = World::new();
    w.busy();
    let mut app = w.app(w.snapshot(&RunQuery::default(), None));
    update(&mut app, key('/'));
    assert!(matches!(
        app.input.as_ref().map(|i| &i.kind),
        Some(InputKind::Filter)
    ));
    for c in "fail ssh".chars() {
        update(&mut app, key(c));
    }
    let reqs = update(&mut app, code(KeyCode::Enter));
    let [Request::Filter(q)] = reqs.as_slice() else {
        panic!("{reqs:?}")
    };
    assert_eq!(q.statuses, [RunStatus::Failed, RunStatus::FailedTimeout]);
    update(&mut app, Msg::Snapshot(Box::new(w.snapshot(q, None))));
    let screen = text(&render(&app, 120, 30));
    assert!(screen.contains("[filter: fail ssh]"), "{screen}");
    let shown: Vec<&str> = app.runs().iter().map(|r| r.tool_name.as_str()).collect();
    assert_eq!(shown, ["ssh"]);
}

#[test]
fn decision_outcomes_are_told_in_the_status_line() {
    let mut w = World::new();
    w.busy();
    let mut app = w.app(w.snapshot(&RunQuery::default(), None));
    // Someone else decided first: the loser is told who won, and when.
    let id = "AP-0000000000000000000000APP1";
    let bob = Decider {
        by: "bob",
        channel: "cli",
        comment: None,
        version: None,
        groups: &[],
    };
    let won = w.store.get_mut().decide(id, "n", &bob).unwrap().value;
    assert!(matches!(won, DecideOutcome::Decided(_)));
    let alice = Decider {
        by: "alice",
        channel: "tui",
        comment: None,
        version: None,
        groups: &[],
    };
    let lost = w
        .store
        .get_mut()
        .decide(id, "approve", &alice)
        .unwrap()
        .value;
    update(
        &mut app,
        Msg::Decided {
            approval_id: id.into(),
            value: "approve".into(),
            result: Ok(lost),
        },
    );
    let screen = text(&render(&app, 140, 30));
    let last = screen.lines().last().unwrap_or("").to_owned();
    assert!(last.contains("already decided by bob at "), "{last}");
    assert!(last.contains("(approved `n`)"), "{last}");
    snapshot("lost_the_race", &render(&app, 140, 30));
    // Read-only inside a supervised tool: the decision is refused before it is asked.
    app.read_only = Some("HEADLESS_RUN_TOOL_RUN_ID is set".into());
    app.focus = Pane::Approvals;
    assert!(update(&mut app, key('a')).is_empty());
    assert!(
        app.notice
            .as_ref()
            .is_some_and(|n| n.text.contains("refused"))
    );
}

#[test]
fn the_loop_turns_keys_into_requests_and_results_into_the_screen() {
    let mut w = World::new();
    w.busy();
    let (tx, rx) = mpsc::channel();
    let (req_tx, req_rx) = mpsc::channel();
    let mut app = App::new(w.now, "/state".into(), None);
    let mut term = Terminal::new(TestBackend::new(120, 30)).unwrap();
    tx.send(Msg::Snapshot(Box::new(
        w.snapshot(&RunQuery::default(), None),
    )))
    .unwrap();
    // The newest run is selected; Down to the terraform run, whose approval `a` approves.
    let waiting = "TR-6000000000000000000WAITING";
    let pos = w
        .snapshot(&RunQuery::default(), None)
        .runs
        .iter()
        .position(|r| r.tool_run_id == waiting)
        .unwrap();
    for _ in 0..pos {
        tx.send(code(KeyCode::Down)).unwrap();
    }
    tx.send(key('a')).unwrap();
    tx.send(Msg::Quit).unwrap();
    run_loop(&mut term, &mut app, &rx, &req_tx).unwrap();
    let reqs: Vec<Request> = req_rx.try_iter().collect();
    assert_eq!(
        reqs,
        [Request::Decide {
            approval_id: "AP-0000000000000000000000APP2".into(),
            value: "approve".into(),
            comment: None,
            version: None,
        }]
    );
    assert!(app.quit);
}

#[test]
fn the_feed_notices_changes_quickly_and_decides() {
    let mut w = World::new();
    let (tx, rx) = mpsc::channel();
    let (req_tx, req_rx) = mpsc::channel();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let handle = feed::spawn(w.paths.clone(), None, tx, req_rx, stop).unwrap();
    let next_snapshot = |rx: &mpsc::Receiver<Msg>| -> (Snapshot, Duration) {
        let t0 = Instant::now();
        loop {
            match rx.recv_timeout(Duration::from_secs(5)) {
                Ok(Msg::Snapshot(s)) => return (*s, t0.elapsed()),
                Ok(_) => continue,
                Err(e) => panic!("no snapshot: {e}"),
            }
        }
    };
    let (first, _) = next_snapshot(&rx);
    assert!(first.runs.is_empty());
    let run = w.run(
        "TR-000000000000000000000NEW01",
        "rm",
        RunStatus::WaitingApproval,
        1,
    );
    let a = w.approval("AP-00000000000000000000000NEW", &run, "rm: remove 'x'?", 1);
    w.insert_runs(&[run]);
    w.insert_approvals(&[a]);
    let (snap, took) = next_snapshot(&rx);
    // Written in two transactions: the second may come in its own snapshot.
    let snap = if snap.approvals.is_empty() {
        next_snapshot(&rx).0
    } else {
        snap
    };
    assert_eq!(snap.runs.len(), 1);
    assert_eq!(snap.approvals.len(), 1);
    // The feed polls every 50 ms (scripts/bench measures the latency); this bound only
    // catches a feed that stopped noticing changes.
    assert!(took < Duration::from_secs(2), "took {took:?}");
    req_tx
        .send(Request::Decide {
            approval_id: "AP-00000000000000000000000NEW".into(),
            value: "approve".into(),
            comment: Some("fine".into()),
            version: None,
        })
        .unwrap();
    let outcome = loop {
        match rx.recv_timeout(Duration::from_secs(5)) {
            Ok(Msg::Decided { result, .. }) => break result,
            Ok(_) => continue,
            Err(e) => panic!("no decision: {e}"),
        }
    };
    let Ok(DecideOutcome::Decided(a)) = outcome else {
        panic!("{outcome:?}")
    };
    assert_eq!(a.decision_channel.as_deref(), Some("tui"));
    assert_eq!(a.decided_by.as_deref(), Some(proc::current_user().as_str()));
    assert_eq!(a.comment.as_deref(), Some("fine"));
    assert_eq!(a.chosen_value.as_deref(), Some("y"));
    let logged = std::fs::read_to_string(w.paths.combined_log()).unwrap();
    assert!(logged.contains("\"approval_status_change\""), "{logged}");
    drop(req_tx);
    handle.join().unwrap();
}

#[test]
fn the_feed_reports_a_missing_database_and_recovers() {
    let tmp = tempfile::tempdir().unwrap();
    let paths = StatePaths {
        root: tmp.path().join("state"),
        db: tmp.path().join("state/state.db"),
        store_url: None,
        listen_url: None,
        server: None,
    };
    let (tx, rx) = mpsc::channel();
    let (req_tx, req_rx) = mpsc::channel();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let handle = feed::spawn(paths.clone(), None, tx, req_rx, stop.clone()).unwrap();
    match rx.recv_timeout(Duration::from_secs(5)) {
        Ok(Msg::StoreDown(why)) => assert!(why.contains("no database"), "{why}"),
        other => panic!("{other:?}"),
    }
    RunnerStore::connect(&mut SqliteStore::create(paths.clone())).unwrap();
    match rx.recv_timeout(Duration::from_secs(5)) {
        Ok(Msg::Snapshot(_)) => {}
        other => panic!("{other:?}"),
    }
    // A signal's flag makes the feed ask the dashboard to quit.
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let quit = (0..50).any(|_| matches!(rx.recv_timeout(Duration::from_secs(5)), Ok(Msg::Quit)));
    assert!(quit);
    drop(req_tx);
    drop(rx);
    handle.join().unwrap();
}

#[test]
fn the_top_follows_new_runs_but_a_chosen_run_or_approval_stays_chosen() {
    let mut w = World::new();
    let a = w.run("TR-10000000000000000000000001", "a", RunStatus::Running, 30);
    let b = w.run(
        "TR-20000000000000000000000002",
        "b",
        RunStatus::WaitingApproval,
        20,
    );
    w.insert_runs(&[a, b.clone()]);
    let ap1 = w.approval("AP-10000000000000000000000001", &b, "first?", 20);
    w.insert_approvals(&[ap1]);
    let mut app = w.app(w.snapshot(&RunQuery::default(), None));
    assert_eq!(app.selected_run().map(|r| r.tool_name.as_str()), Some("b"));
    let c = w.run("TR-30000000000000000000000003", "c", RunStatus::Running, 10);
    w.insert_runs(std::slice::from_ref(&c));
    let ap2 = w.approval("AP-20000000000000000000000002", &c, "second?", 10);
    w.insert_approvals(&[ap2]);
    update(
        &mut app,
        Msg::Snapshot(Box::new(w.snapshot(&RunQuery::default(), None))),
    );
    // At the top: the newest run. The approval chosen before stays chosen.
    assert_eq!(app.selected_run().map(|r| r.tool_name.as_str()), Some("c"));
    assert_eq!(
        app.selected_approval().map(|a| a.question.as_str()),
        Some("first?")
    );
    // Moved down to a run: it stays selected as newer runs arrive.
    update(&mut app, code(KeyCode::Down));
    assert_eq!(app.selected_run().map(|r| r.tool_name.as_str()), Some("b"));
    let d = w.run("TR-40000000000000000000000004", "d", RunStatus::Running, 5);
    w.insert_runs(&[d]);
    update(
        &mut app,
        Msg::Snapshot(Box::new(w.snapshot(&RunQuery::default(), None))),
    );
    assert_eq!(app.selected_run().map(|r| r.tool_name.as_str()), Some("b"));
}

#[test]
fn free_text_only_where_the_approval_allows_it() {
    let mut w = World::new();
    let run = w.run(
        "TR-10000000000000000000000TXT",
        "git",
        RunStatus::WaitingApproval,
        5,
    );
    w.insert_runs(std::slice::from_ref(&run));
    let mut text = w.approval("AP-20000000000000000000000TXT", &run, "Branch name:", 5);
    text.allows_text = true;
    text.prompt_kind = Some(PromptKind::Unknown);
    text.options_json.truncate(0);
    text.options_json.push(ApprovalOption {
        value: "abort".into(),
        label: "Abort".into(),
        keys: None,
    });
    let choice = w.approval("AP-10000000000000000000000CHO", &run, "Sure? [y/N]", 5);
    w.insert_approvals(&[text, choice]);
    let mut app = w.app(w.snapshot(&RunQuery::default(), None));
    update(&mut app, code(KeyCode::Tab));
    // The newest approval takes text: `t`, type, Enter.
    update(&mut app, key('t'));
    assert!(matches!(
        app.input.as_ref().map(|i| &i.kind),
        Some(InputKind::Text(_))
    ));
    for c in "feature/x".chars() {
        update(&mut app, key(c));
    }
    snapshot("free_text_input", &render(&app, 100, 24));
    assert_eq!(
        update(&mut app, code(KeyCode::Enter)),
        [Request::Decide {
            approval_id: "AP-20000000000000000000000TXT".into(),
            value: "feature/x".into(),
            comment: None,
            version: None,
        }]
    );
    // The other one does not: `t` says so, and digits past its options are refused.
    update(&mut app, code(KeyCode::Down));
    assert!(update(&mut app, key('t')).is_empty());
    assert!(app.input.is_none());
    assert!(
        app.notice
            .as_ref()
            .is_some_and(|n| n.text.contains("does not take free text"))
    );
    assert!(update(&mut app, key('3')).is_empty());
    assert!(
        app.notice
            .as_ref()
            .is_some_and(|n| n.text.contains("no option 3"))
    );
    assert_eq!(
        update(&mut app, key('r')),
        [Request::Decide {
            approval_id: "AP-10000000000000000000000CHO".into(),
            value: "reject".into(),
            comment: None,
            version: None,
        }]
    );
}

#[test]
fn a_corrupt_database_is_a_message_not_a_crash() {
    let tmp = tempfile::tempdir().unwrap();
    let paths = StatePaths {
        root: tmp.path().join("state"),
        db: tmp.path().join("state/state.db"),
        store_url: None,
        listen_url: None,
        server: None,
    };
    paths.ensure_dirs().unwrap();
    // Garbage where the database should be: no SQLite header, just noise.
    let garbage: Vec<u8> = (0..64 * 1024u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    std::fs::write(&paths.db, &garbage).unwrap();
    let (tx, rx) = mpsc::channel();
    let (req_tx, req_rx) = mpsc::channel();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let handle = feed::spawn(paths.clone(), None, tx, req_rx, stop).unwrap();
    let why = match rx.recv_timeout(Duration::from_secs(5)) {
        Ok(Msg::StoreDown(why)) => why,
        other => panic!("{other:?}"),
    };
    assert!(why.contains("not a usable SQLite database"), "{why}");
    assert!(why.contains("move it aside"), "{why}");
    // Told once, not on every retry.
    assert!(
        rx.recv_timeout(Duration::from_millis(1500)).is_err(),
        "the same problem was sent again"
    );
    drop(req_tx);
    handle.join().unwrap();
    let mut app = App::new(
        SystemTime::UNIX_EPOCH,
        "/home/op/.local/state/headless-run".into(),
        None,
    );
    let shown = why.replace(
        &paths.root.display().to_string(),
        "/home/op/.local/state/headless-run",
    );
    update(&mut app, Msg::StoreDown(shown));
    for (w, h) in [(80, 24), (120, 40), (20, 5)] {
        let screen = text(&render(&app, w, h));
        if w >= 80 {
            assert!(screen.contains("Cannot read the database"), "{screen}");
            assert!(screen.contains("DATABASE"), "{screen}");
        }
    }
    snapshot("corrupt_database", &render(&app, 80, 24));
    // Keys still work: q quits.
    update(&mut app, key('q'));
    assert!(app.quit);
}

#[test]
fn ctrl_c_quits_from_anywhere() {
    let mut w = World::new();
    w.busy();
    let ctrl_c = || Msg::Key(KeyEvent::new(KeyCode::Char('c'), KeyModifiers::CONTROL));
    // Through the loop, as the input thread sends it: the loop returns.
    let (tx, rx) = mpsc::channel();
    let (req_tx, req_rx) = mpsc::channel();
    let mut app = App::new(w.now, "/state".into(), None);
    let mut term = Terminal::new(TestBackend::new(80, 24)).unwrap();
    tx.send(Msg::Snapshot(Box::new(
        w.snapshot(&RunQuery::default(), None),
    )))
    .unwrap();
    tx.send(ctrl_c()).unwrap();
    // Kept open: the loop must end on the key, not because the senders went away.
    run_loop(&mut term, &mut app, &rx, &req_tx).unwrap();
    assert!(app.quit);
    assert!(
        req_rx.try_iter().next().is_none(),
        "Ctrl-C decided something"
    );
    drop(tx);
    // Wherever the dashboard is: typing (where `c` is a letter), the help, an approval's
    // card, a run's detail, a pending cancel.
    let states: Vec<(&str, Vec<Msg>)> = vec![
        ("filter", vec![key('/')]),
        ("comment", vec![code(KeyCode::Tab), key('c')]),
        ("help", vec![key('?')]),
        ("card", vec![code(KeyCode::Tab), code(KeyCode::Enter)]),
        ("detail", vec![code(KeyCode::Enter)]),
        ("cancel", vec![key('x')]),
    ];
    for (what, keys) in states {
        let mut app = w.app(w.snapshot(&RunQuery::default(), None));
        for k in keys {
            update(&mut app, k);
        }
        assert!(!app.quit, "{what}: quit before Ctrl-C");
        let reqs = update(&mut app, ctrl_c());
        assert!(app.quit, "{what}: Ctrl-C did not quit");
        assert!(reqs.is_empty(), "{what}: {reqs:?}");
    }
}

/// Regression: a remote run whose heartbeat had gone stale was compared with its reason,
/// which says how old the heartbeat is, so every liveness check (each 2 s) found it
/// "changed" and the dashboard read and drew everything again, forever. Heartbeats of live
/// runs (which the runs table does not show) are not news either.
#[test]
fn the_feed_stays_quiet_when_nothing_shown_changes() {
    let mut w = World::new();
    let live = w.run(
        "TR-10000000000000000000000LIVE",
        "cargo",
        RunStatus::Running,
        60,
    );
    let mut remote = w.run(
        "TR-2000000000000000000000REMOTE",
        "ssh",
        RunStatus::Running,
        600,
    );
    remote.host = Some("another-host.invalid".into());
    remote.shim_pid = Some(1);
    remote.supervisor_heartbeat_at = Some(w.ago(300));
    w.insert_runs(&[live.clone(), remote.clone()]);
    let (tx, rx) = mpsc::channel();
    let (req_tx, req_rx) = mpsc::channel();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let handle = feed::spawn(w.paths.clone(), None, tx, req_rx, stop).unwrap();
    let first = match rx.recv_timeout(Duration::from_secs(5)) {
        Ok(Msg::Snapshot(s)) => s,
        other => panic!("{other:?}"),
    };
    assert_eq!(
        first.vanished.keys().collect::<Vec<_>>(),
        [&remote.tool_run_id]
    );
    assert!(
        first.vanished[&remote.tool_run_id]
            .why
            .contains("heartbeat")
    );
    // Heartbeats for longer than a liveness check: the live run's every 100 ms.
    let until = Instant::now() + feed::LIVENESS + Duration::from_millis(600);
    while Instant::now() < until {
        let beat = runs::Touch {
            supervisor_heartbeat_at: Some(time::now_rfc3339()),
            last_heartbeat_at: Some(time::now_rfc3339()),
            ..runs::Touch::default()
        };
        w.touch(&live.tool_run_id, beat.clone());
        if let Ok(msg) = rx.recv_timeout(Duration::from_millis(100)) {
            panic!("nothing shown changed, yet the feed sent {msg:?}");
        }
    }
    // Something shown changes: it comes at once.
    let mut out = runs::Touch {
        last_output_at: Some(time::now_rfc3339()),
        ..runs::Touch::default()
    };
    out.last_output_at = Some(w.ago(0));
    w.touch(&live.tool_run_id, out.clone());
    match rx.recv_timeout(Duration::from_secs(2)) {
        Ok(Msg::Snapshot(s)) => assert!(!s.shows_same(&first)),
        other => panic!("{other:?}"),
    }
    drop(req_tx);
    handle.join().unwrap();
}

#[test]
fn snapshots_differing_only_in_heartbeats_show_the_same() {
    let mut w = World::new();
    w.busy();
    let id = "TR-8000000000000000000RUNNING";
    let before = w.snapshot(&RunQuery::default(), None);
    let beat = runs::Touch {
        supervisor_heartbeat_at: Some(w.ahead(3)),
        last_heartbeat_at: Some(w.ahead(3)),
        ..runs::Touch::default()
    };
    w.touch(id, beat.clone());
    let after = w.snapshot(&RunQuery::default(), None);
    assert_ne!(before, after);
    assert!(before.shows_same(&after));
    // The open run's detail shows its heartbeats: there they count.
    let before = w.snapshot(&RunQuery::default(), Some(id));
    let beat = runs::Touch {
        supervisor_heartbeat_at: Some(w.ahead(6)),
        ..runs::Touch::default()
    };
    w.touch(id, beat.clone());
    assert!(!before.shows_same(&w.snapshot(&RunQuery::default(), Some(id))));
    // Output is shown (LAST OUT).
    let before = w.snapshot(&RunQuery::default(), None);
    let out = runs::Touch {
        last_output_at: Some(w.ahead(1)),
        ..runs::Touch::default()
    };
    w.touch(id, out.clone());
    assert!(!before.shows_same(&w.snapshot(&RunQuery::default(), None)));
}

/// The pipelines pane keeps its selection on the same execution when a newer one comes (a
/// decision key must never land on another pipeline's step), and gives up focus when the
/// list empties.
#[test]
fn the_pipelines_pane_keeps_its_selection_on_the_same_execution() {
    let w = World::new();
    let row = |id: &str, waiting: Option<&str>| feed::PipelineRow {
        execution_id: id.into(),
        name: "deploy".into(),
        status: hr_shared::pipeline::ExecutionState::WaitingApproval,
        steps: vec![
            ("build".into(), 1, "completed".into()),
            ("ok".into(), 1, "waiting_approval".into()),
        ],
        waiting: waiting.map(str::to_owned),
    };
    let mut snap = w.snapshot(&RunQuery::default(), None);
    snap.pipelines = vec![row("EX-B", Some("AP-B")), row("EX-A", Some("AP-A"))];
    let mut app = w.app(snap.clone());
    let screen = text(&render(&app, 120, 40));
    assert!(screen.contains("Pipelines (2)"), "{screen}");
    assert!(screen.contains("build✓ ok?"), "{screen}");
    // Tab: Runs → Approvals → Pipelines (there are some); select the older one.
    update(&mut app, code(KeyCode::Tab));
    update(&mut app, code(KeyCode::Tab));
    assert_eq!(app.focus, Pane::Pipelines);
    update(&mut app, code(KeyCode::Down));
    assert_eq!(app.pipeline_sel, 1);
    // A newer execution comes first: the selection stays on EX-A.
    snap.pipelines.insert(0, row("EX-C", None));
    update(&mut app, Msg::Snapshot(Box::new(snap.clone())));
    assert_eq!(app.pipelines()[app.pipeline_sel].execution_id, "EX-A");
    // The list empties: focus moves to a pane that is drawn.
    snap.pipelines.clear();
    update(&mut app, Msg::Snapshot(Box::new(snap)));
    assert_eq!(app.focus, Pane::Approvals);
    assert!(!text(&render(&app, 120, 40)).contains("Pipelines ("));
}
