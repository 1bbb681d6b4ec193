//! Old state still loads: a database made by each released schema version (v1–v4), a
//! `logs/combined.log` and a spooled run row as older builds wrote them are checked in
//! under `tests/fixtures/old_state/` (made by `make.py` there, which says how) and must
//! open, read and take writes through the library.
//!
//! Each fixture is copied into a fresh state dir first (`open_fixture`), so the checked-in
//! files are never changed. Each case is a function of an open state store (or state dir):
//! opening goes through `open_store` alone, so a new store type changes that one helper.
//!
//! What every database is checked for: it migrates to `SCHEMA_VERSION` in WAL mode; every
//! run and approval reads back field for field as the fixture's `state-vN.expected.json`
//! says (`runs::get`/`list`, the streamed JSON export, `approvals::get`/`list`); the
//! queries a re-run and the worker depend on still find old rows (fingerprints recomputed
//! by this build, `find_answer`, `find_pending`, remembered policies, parked runs with
//! decisions, resumes); the library can write to it (a new run, a decision, an expiry, a
//! consumed answer, a remembered policy, an approval on a v1 database); and the audit
//! chain an old build wrote verifies, before and after.

use hr_shared::approvals::{self, Approval, ApprovalFilter, DecideOutcome, Decider, PromptKind};
use hr_shared::db::{self, OpenMode};
use hr_shared::event::{ApprovalOption, EventBody, LogEvent};
use hr_shared::paths::{self, StatePaths};
use hr_shared::runs::{self, Guard, RunFilter, StatusChange, ToolRun};
use hr_shared::status::{ApprovalStatus, RunStatus};
use hr_shared::{alerts, audit, export, fingerprint, id, policy, resume, spool, time};
use rusqlite::Connection;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use tempfile::TempDir;

// --- fixtures ---------------------------------------------------------------------------

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/old_state")
}

/// A fresh state dir (0700) holding a copy of the database made by schema `version` as
/// `state.db` (0600).
fn open_fixture(version: u32) -> (TempDir, StatePaths) {
    let (tmp, paths) = fresh_state_dir();
    fs::copy(fixtures().join(format!("state-v{version}.db")), &paths.db).expect("copy the fixture");
    fs::set_permissions(&paths.db, fs::Permissions::from_mode(0o600)).expect("chmod 0600");
    (tmp, paths)
}

/// An empty state dir (0700) with no database yet.
fn fresh_state_dir() -> (TempDir, StatePaths) {
    let tmp = tempfile::tempdir().expect("tempdir");
    let root = tmp.path().join("state");
    paths::create_private_dir(&root).expect("state dir");
    let paths = StatePaths {
        db: root.join("state.db"),
        root,
    };
    (tmp, paths)
}

/// The state store of `paths`, as every binary opens it (an existing database, migrated
/// forward).
fn open_store(paths: &StatePaths) -> Connection {
    db::open(&paths.db, OpenMode::Existing)
        .unwrap_or_else(|e| panic!("{} does not open: {e}", paths.db.display()))
}

/// What `make.py` wrote into `state-vN.db`, as the library should read it back.
#[derive(Debug, Deserialize)]
struct Expected {
    version: i64,
    made_by: String,
    runs: BTreeMap<String, ToolRun>,
    #[serde(default)]
    approvals: BTreeMap<String, Approval>,
    #[serde(default)]
    policies: BTreeMap<String, serde_json::Value>,
    audit_rows: u64,
}

impl Expected {
    fn load(version: u32) -> Expected {
        let path = fixtures().join(format!("state-v{version}.expected.json"));
        let text = fs::read_to_string(&path).expect("read the expected rows");
        let exp: Expected = serde_json::from_str(&text).expect("parse the expected rows");
        assert_eq!(exp.version, i64::from(version), "{}", path.display());
        exp
    }

    fn run(&self, role: &str) -> &ToolRun {
        self.runs
            .get(role)
            .unwrap_or_else(|| panic!("v{}: no run `{role}`", self.version))
    }

    fn approval(&self, role: &str) -> &Approval {
        self.approvals
            .get(role)
            .unwrap_or_else(|| panic!("v{}: no approval `{role}`", self.version))
    }
}

// --- one test per old version -----------------------------------------------------------

#[test]
fn database_made_by_schema_v1_loads() {
    let (_tmp, paths) = open_fixture(1);
    let mut conn = open_store(&paths);
    let exp = Expected::load(1);
    is_migrated(&conn, &exp);
    chain_is_intact(&conn, Some(exp.audit_rows));
    reads_runs(&conn, &exp);
    v1_runs_are_as_written(&conn, &exp);
    takes_new_runs(&mut conn, &exp);
    takes_approvals_on_a_v1_database(&mut conn, &exp);
    chain_is_intact(&conn, None);
}

#[test]
fn database_made_by_schema_v2_loads() {
    approvals_era_database_loads(2);
}

#[test]
fn database_made_by_schema_v3_loads() {
    approvals_era_database_loads(3);
}

#[test]
fn database_made_by_schema_v4_loads() {
    approvals_era_database_loads(4);
}

/// v2–v4 hold the same story: finished, failed and vanished runs, runs parked on a pending,
/// an approved (and remembered), a rejected and an overdue approval, and a parked run
/// whose approval a resume consumed.
fn approvals_era_database_loads(version: u32) {
    let (_tmp, paths) = open_fixture(version);
    let mut conn = open_store(&paths);
    let exp = Expected::load(version);
    is_migrated(&conn, &exp);
    chain_is_intact(&conn, Some(exp.audit_rows));
    reads_runs(&conn, &exp);
    reads_approvals(&conn, &exp);
    old_decisions_are_found_again(&conn, &exp);
    takes_new_runs(&mut conn, &exp);
    takes_decisions(&mut conn, &exp);
    chain_is_intact(&conn, None);
}

// --- cases on an open store -------------------------------------------------------------

fn is_migrated(conn: &Connection, exp: &Expected) {
    assert_eq!(
        db::schema_version(conn).unwrap(),
        db::SCHEMA_VERSION,
        "made by {} at v{}",
        exp.made_by,
        exp.version
    );
    assert_eq!(db::journal_mode(conn).unwrap(), "wal");
}

/// The audit chain verifies; `rows`, when given, is how many rows it must have.
fn chain_is_intact(conn: &Connection, rows: Option<u64>) {
    let report = audit::verify(conn).unwrap();
    assert!(report.intact(), "{:?}", report.problems);
    if let Some(rows) = rows {
        assert_eq!(report.rows, rows);
    }
    assert_eq!(audit::unrecorded_decisions(conn).unwrap(), []);
}

fn reads_runs(conn: &Connection, exp: &Expected) {
    for (role, want) in &exp.runs {
        let got = runs::get(conn, &want.tool_run_id).unwrap();
        assert_eq!(got.as_ref(), Some(want), "v{} run `{role}`", exp.version);
    }
    let listed = runs::list(conn, &RunFilter::default()).unwrap();
    let mut ids: Vec<&str> = exp.runs.values().map(|r| r.tool_run_id.as_str()).collect();
    ids.sort_unstable_by(|a, b| b.cmp(a));
    assert_eq!(
        listed
            .iter()
            .map(|r| r.tool_run_id.as_str())
            .collect::<Vec<_>>(),
        ids,
        "runs::list, newest first"
    );
    // `monitor runs --json` streams the rows itself: the same document as the rows read.
    let mut json = Vec::new();
    let n = export::write_runs_json(conn, &RunFilter::default(), &mut json).unwrap();
    assert_eq!(n, exp.runs.len());
    let exported: Vec<ToolRun> = serde_json::from_slice(&json).unwrap();
    assert_eq!(exported, listed);

    let mut want_counts: BTreeMap<&str, i64> = BTreeMap::new();
    for r in exp.runs.values() {
        *want_counts.entry(r.status.as_str()).or_default() += 1;
    }
    let counts: BTreeMap<&str, i64> = runs::count_by_status(conn)
        .unwrap()
        .into_iter()
        .map(|(s, n)| (s.as_str(), n))
        .collect();
    assert_eq!(counts, want_counts);

    // The shim killed with -9 is the one run reconcile should still look at.
    let supervised: Vec<String> = runs::supervised(conn, None)
        .unwrap()
        .into_iter()
        .map(|r| r.tool_run_id)
        .collect();
    assert_eq!(supervised, [exp.run("vanished").tool_run_id.clone()]);

    let done = exp.run("completed");
    assert_eq!(
        (done.status, done.exit_code, done.reason.as_deref()),
        (RunStatus::Completed, Some(0), None)
    );
    assert!(done.completed_at.is_some());
    let failed = exp.run("failed");
    assert_eq!(
        (failed.status, failed.exit_code, failed.reason.as_deref()),
        (RunStatus::Failed, Some(101), Some("exited with code 101"))
    );
    assert_eq!(failed.argv_json, ["cargo", "test"]);
    assert_eq!(
        failed.metadata.as_ref().and_then(|m| m["mode"].as_str()),
        Some("pty")
    );
}

/// What only the v1 database holds: a hard timeout, and a run its shim killed as stalled.
fn v1_runs_are_as_written(conn: &Connection, exp: &Expected) {
    let timed_out = runs::get(conn, &exp.run("timed_out").tool_run_id)
        .unwrap()
        .unwrap();
    assert_eq!(
        (timed_out.status, timed_out.exit_code),
        (RunStatus::FailedTimeout, Some(124))
    );
    let killed = runs::get(conn, &exp.run("stall_killed").tool_run_id)
        .unwrap()
        .unwrap();
    assert_eq!(
        (killed.status, killed.exit_code),
        (RunStatus::Stalled, Some(92))
    );
    // v1 wrote the pid after the row (`runs::set_pid`): it is there all the same.
    assert!(exp.runs.values().all(|r| r.pid.is_some()));
}

fn reads_approvals(conn: &Connection, exp: &Expected) {
    for (role, want) in &exp.approvals {
        let got = approvals::get(conn, &want.approval_id).unwrap();
        assert_eq!(
            got.as_ref(),
            Some(want),
            "v{} approval `{role}`",
            exp.version
        );
    }
    let pending: Vec<String> = approvals::list(
        conn,
        &ApprovalFilter {
            statuses: vec![ApprovalStatus::Pending],
            ..Default::default()
        },
    )
    .unwrap()
    .into_iter()
    .map(|a| a.approval_id)
    .collect();
    let mut want = vec![
        exp.approval("pending").approval_id.clone(),
        exp.approval("overdue").approval_id.clone(),
    ];
    want.sort_unstable_by(|a, b| b.cmp(a));
    assert_eq!(pending, want);
    // Both pending; the overdue one is past its expiry (it expired 2026-11-22).
    assert_eq!(
        approvals::pending_counts(conn, std::time::Duration::ZERO).unwrap(),
        (2, 1)
    );

    let approved = exp.approval("approved");
    assert_eq!(
        (approved.status, approved.chosen_value.as_deref()),
        (ApprovalStatus::Approved, Some("y"))
    );
    assert_eq!(approved.decided_by.as_deref(), Some("alice"));
    assert_eq!(approved.consumed_at, None);
    assert_eq!(
        approved
            .options_json
            .iter()
            .map(|o| o.value.as_str())
            .collect::<Vec<_>>(),
        ["y", "n"]
    );
    assert_eq!(approved.prompt_kind, Some(PromptKind::Choice));
    assert_eq!(approved.expire_action, "reject");
    let rejected = exp.approval("rejected");
    assert_eq!(
        (rejected.status, rejected.chosen_value.as_deref()),
        (ApprovalStatus::Rejected, None)
    );
    assert_eq!(rejected.comment.as_deref(), Some("not during the freeze"));
    let overdue = exp.approval("overdue");
    assert_eq!(
        (
            overdue.expire_action.as_str(),
            overdue.default_value.as_deref()
        ),
        ("default", Some("n"))
    );
    let resumed = exp.approval("parked_resumed");
    let resume = exp.run("resume");
    assert_eq!(resumed.consumed_by.as_ref(), Some(&resume.tool_run_id));
    assert_eq!(resumed.resumed_run_id.as_ref(), Some(&resume.tool_run_id));
    assert!(
        resumed
            .claimed_by
            .as_deref()
            .is_some_and(|w| w.starts_with("worker:"))
    );

    // Runs parked on an approval (exit 90) read as parked.
    for role in ["pending", "approved", "rejected", "overdue"] {
        let run = exp.run(role);
        assert_eq!(
            (run.status, run.exit_code),
            (RunStatus::WaitingApproval, Some(90)),
            "{role}"
        );
        assert!(hr_shared::control::is_parked(run), "{role}");
    }
    let live: BTreeMap<&str, i64> = alerts::live_counts(conn)
        .unwrap()
        .into_iter()
        .map(|(s, n)| (s.as_str(), n))
        .collect();
    assert_eq!(
        live,
        BTreeMap::from([("running", 1), ("waiting_approval", 4)])
    );
    assert_eq!(
        alerts::failed_since(conn, "2026-01-01T00:00:00.000Z").unwrap(),
        1
    );
}

/// What a re-run or the worker of this build looks up in an old database finds what the
/// old build left: fingerprints are recomputed here, not read from the fixture.
fn old_decisions_are_found_again(conn: &Connection, exp: &Expected) {
    for (role, a) in &exp.approvals {
        let run = runs::get(conn, &a.tool_run_id).unwrap().unwrap();
        let request = fingerprint::request(
            &run.tool_name,
            &run.argv_json,
            run.cwd.as_deref().unwrap_or(""),
        );
        assert_eq!(a.request_fingerprint.as_ref(), Some(&request), "{role}");
        let line = a.prompt_line.as_deref().expect("a prompt line");
        let prompt = fingerprint::prompt(&a.tool_name, line);
        assert_eq!(a.prompt_fingerprint.as_ref(), Some(&prompt), "{role}");
    }
    let fps = |a: &Approval| {
        (
            a.request_fingerprint.clone().unwrap(),
            a.prompt_fingerprint.clone().unwrap(),
        )
    };
    // A re-run of the approved command is answered by the decision made before.
    let approved = exp.approval("approved");
    let (req, prompt) = fps(approved);
    let found = approvals::find_answer(conn, &req, &prompt).unwrap();
    assert_eq!(
        found.map(|a| a.approval_id),
        Some(approved.approval_id.clone())
    );
    // One whose decision a resume already used is not answered again.
    let (req, prompt) = fps(exp.approval("parked_resumed"));
    assert_eq!(approvals::find_answer(conn, &req, &prompt).unwrap(), None);
    // A retry of the pending one takes it over.
    let pending = exp.approval("pending");
    let (req, prompt) = fps(pending);
    let found = approvals::find_pending(conn, &req, &prompt).unwrap();
    assert_eq!(
        found.map(|a| a.approval_id),
        Some(pending.approval_id.clone())
    );
    // The remembered decision answers that prompt of that tool.
    let want = &exp.policies["remembered"];
    let remembered = policy::find_remembered(conn, &approved.tool_name, &prompt_of(approved))
        .unwrap()
        .expect("the remembered decision");
    assert_eq!(&serde_json::to_value(&remembered).unwrap(), want);
    assert_eq!(remembered.value, "y");
    // The worker finds the parked runs that have a decision, with that decision.
    let parked: Vec<(String, Vec<String>, usize)> = resume::decided_parked(conn)
        .unwrap()
        .into_iter()
        .map(|p| {
            let decided = p.decided.into_iter().map(|a| a.approval_id).collect();
            (p.run.tool_run_id, decided, p.pending)
        })
        .collect();
    let mut want = vec![
        (
            exp.run("approved").tool_run_id.clone(),
            vec![approved.approval_id.clone()],
            0,
        ),
        (
            exp.run("rejected").tool_run_id.clone(),
            vec![exp.approval("rejected").approval_id.clone()],
            0,
        ),
    ];
    want.sort();
    assert_eq!(parked, want);
    let resumes: Vec<String> = resume::resumes_of(conn, &exp.run("parked_resumed").tool_run_id)
        .unwrap()
        .into_iter()
        .map(|r| r.tool_run_id)
        .collect();
    assert_eq!(resumes, [exp.run("resume").tool_run_id.clone()]);
}

fn prompt_of(a: &Approval) -> String {
    a.prompt_fingerprint.clone().expect("a prompt fingerprint")
}

/// A run as this build's shim writes it.
fn new_run(tool: &str) -> ToolRun {
    let now = time::now_rfc3339();
    ToolRun {
        tool_run_id: id::new_run_id(),
        tool_name: tool.into(),
        execution_id: Some(id::new_execution_id()),
        status: RunStatus::Running,
        reason: None,
        exit_code: None,
        started_at: now.clone(),
        completed_at: None,
        last_output_at: None,
        last_heartbeat_at: None,
        supervisor_heartbeat_at: Some(now.clone()),
        last_error_msg: None,
        pid: Some(7001),
        shim_pid: Some(7000),
        shim_start_time: Some(123_456),
        host: Some("build-02".into()),
        argv_json: vec![tool.into(), "--check".into()],
        cwd: Some("/home/ci/src/app".into()),
        resumed_from: None,
        metadata: Some(serde_json::json!({"mode": "pty", "tool_path": "/usr/bin/x"})),
        updated_at: now,
    }
}

/// A new run goes in, ends, and reads back; the old ones are untouched.
fn takes_new_runs(conn: &mut Connection, exp: &Expected) {
    let run = new_run("rustfmt");
    db::write(conn, |tx| runs::insert(tx, &run, "ci")).unwrap();
    assert_eq!(
        runs::get(conn, &run.tool_run_id).unwrap().as_ref(),
        Some(&run)
    );
    let previous = db::write(conn, |tx| {
        runs::change_status(
            tx,
            &run.tool_run_id,
            &StatusChange {
                status: RunStatus::Failed,
                reason: Some("exited with code 1".into()),
                exit_code: Some(1),
                finished: true,
                error: None,
                at: None,
            },
            "ci",
            Guard::NotFinal,
        )
    })
    .unwrap();
    assert_eq!(previous, Some(RunStatus::Running));
    let ended = runs::get(conn, &run.tool_run_id).unwrap().unwrap();
    assert_eq!(
        (ended.status, ended.exit_code),
        (RunStatus::Failed, Some(1))
    );
    assert!(ended.completed_at.is_some());
    // The newest run lists first, before every old one.
    let newest = runs::list(
        conn,
        &RunFilter {
            limit: Some(1),
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!(newest[0].tool_run_id, run.tool_run_id);
    assert_eq!(
        runs::list(conn, &RunFilter::default()).unwrap().len(),
        exp.runs.len() + 1
    );
    // An old run still takes a status change: the vanished one, reconciled.
    let vanished = &exp.run("vanished").tool_run_id;
    let previous = db::write(conn, |tx| {
        runs::change_status(
            tx,
            vanished,
            &StatusChange::to(
                RunStatus::Failed,
                Some("supervisor vanished (pid 1 is not running)".into()),
            ),
            "monitor",
            Guard::NotFinal,
        )
    })
    .unwrap();
    assert_eq!(previous, Some(RunStatus::Running));
    let after = runs::get(conn, vanished).unwrap().unwrap();
    assert_eq!(after.status, RunStatus::Failed);
    assert_eq!(after.argv_json, exp.run("vanished").argv_json);
}

/// A v1 database never held approvals; migrated, it takes one and its decision, and a
/// remembered policy.
fn takes_approvals_on_a_v1_database(conn: &mut Connection, exp: &Expected) {
    let run = exp.run("completed");
    let now = time::now_rfc3339();
    let a = Approval {
        approval_id: id::new_approval_id(),
        tool_run_id: run.tool_run_id.clone(),
        tool_name: run.tool_name.clone(),
        execution_id: run.execution_id.clone(),
        question: "Continue? [y/N]".into(),
        context: None,
        options_json: vec![
            ApprovalOption {
                value: "y".into(),
                label: "Yes".into(),
                keys: None,
            },
            ApprovalOption {
                value: "n".into(),
                label: "No".into(),
                keys: None,
            },
        ],
        default_value: Some("n".into()),
        allows_text: false,
        status: ApprovalStatus::Pending,
        chosen_value: None,
        created_at: now,
        decided_at: None,
        expires_at: None,
        decided_by: None,
        decision_channel: None,
        comment: None,
        request_fingerprint: Some("r".into()),
        prompt_fingerprint: Some("p".into()),
        consumed_at: None,
        consumed_by: None,
        prompt_kind: Some(PromptKind::Choice),
        prompt_line: Some("Continue? [y/N]".into()),
        rule_name: Some("generic:yes-no".into()),
        expire_action: "default".into(),
        claimed_by: None,
        claimed_at: None,
        resumed_run_id: None,
    };
    db::write(conn, |tx| approvals::insert(tx, &a, "ci")).unwrap();
    assert_eq!(
        approvals::get(conn, &a.approval_id).unwrap().as_ref(),
        Some(&a)
    );
    let out = db::write(conn, |tx| {
        approvals::decide(tx, &a.approval_id, "y", &carol())
    })
    .unwrap();
    let DecideOutcome::Decided(decided) = out else {
        panic!("not decided: {out:?}");
    };
    assert_eq!(
        (decided.status, decided.chosen_value.as_deref()),
        (ApprovalStatus::Approved, Some("y"))
    );
    db::write(conn, |tx| {
        policy::remember(tx, &a.tool_name, "p", "y", &a.approval_id, "carol")
    })
    .unwrap();
    let remembered = policy::find_remembered(conn, &a.tool_name, "p")
        .unwrap()
        .unwrap();
    assert_eq!(remembered.source_approval_id.as_ref(), Some(&a.approval_id));
}

fn carol() -> Decider<'static> {
    Decider {
        by: "carol",
        channel: "cli",
        comment: None,
    }
}

/// The pending approval is decided, the decided ones refuse another answer, the overdue
/// one expires with its default, a decision is consumed once, a newer remembered decision
/// replaces the old one.
fn takes_decisions(conn: &mut Connection, exp: &Expected) {
    let pending = &exp.approval("pending").approval_id;
    let out = db::write(conn, |tx| approvals::decide(tx, pending, "y", &carol())).unwrap();
    let DecideOutcome::Decided(decided) = out else {
        panic!("not decided: {out:?}");
    };
    assert_eq!(
        (decided.status, decided.chosen_value.as_deref()),
        (ApprovalStatus::Approved, Some("y"))
    );
    let read = approvals::get(conn, pending).unwrap().unwrap();
    assert_eq!(read.decided_by.as_deref(), Some("carol"));
    assert_eq!(read.question, exp.approval("pending").question);

    let approved = &exp.approval("approved").approval_id;
    let again = db::write(conn, |tx| approvals::decide(tx, approved, "y", &carol())).unwrap();
    assert!(matches!(again, DecideOutcome::AlreadySame(_)), "{again:?}");
    let other = db::write(conn, |tx| approvals::decide(tx, approved, "n", &carol())).unwrap();
    let DecideOutcome::Conflict(kept) = other else {
        panic!("not a conflict: {other:?}");
    };
    assert_eq!(kept.decided_by.as_deref(), Some("alice"));

    let overdue = exp.approval("overdue");
    assert!(
        overdue.is_overdue(&time::now_rfc3339()),
        "the clock is before the fixture's expiry ({:?})",
        overdue.expires_at
    );
    let expired = db::write(conn, approvals::expire_due).unwrap();
    assert_eq!(
        expired
            .iter()
            .map(|a| (a.approval_id.as_str(), a.status, a.chosen_value.as_deref()))
            .collect::<Vec<_>>(),
        [(
            overdue.approval_id.as_str(),
            ApprovalStatus::Expired,
            Some("n")
        )]
    );

    let rerun = new_run(&exp.run("approved").tool_name);
    let consumed = db::write(conn, |tx| {
        runs::insert(tx, &rerun, "ci")?;
        let first = approvals::consume(tx, approved, &rerun.tool_run_id, "ci")?;
        let second = approvals::consume(tx, approved, &rerun.tool_run_id, "ci")?;
        Ok((first, second))
    })
    .unwrap();
    assert_eq!(consumed, (true, false));
    let used = approvals::get(conn, approved).unwrap().unwrap();
    assert_eq!(used.consumed_by.as_ref(), Some(&rerun.tool_run_id));

    let a = exp.approval("approved");
    let prompt = prompt_of(a);
    db::write(conn, |tx| {
        policy::remember(tx, &a.tool_name, &prompt, "n", pending, "carol")
    })
    .unwrap();
    let now = policy::find_remembered(conn, &a.tool_name, &prompt)
        .unwrap()
        .unwrap();
    assert_eq!(
        (now.value.as_str(), now.created_by.as_str()),
        ("n", "carol")
    );
    let old_enabled: i64 = conn
        .query_row(
            "SELECT enabled FROM policies WHERE policy_id = ?1",
            [exp.policies["remembered"]["policy_id"].as_str().unwrap()],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(old_enabled, 0);
}

// --- the combined log and the spool -----------------------------------------------------

#[test]
fn old_combined_log_is_understood() {
    let (_tmp, paths) = fresh_state_dir();
    paths.ensure_dirs().unwrap();
    fs::copy(fixtures().join("combined.log"), paths.combined_log()).unwrap();
    combined_log_is_understood(&paths);
}

/// Every line of the log parses as a `LogEvent`, each event kind is there with its fields,
/// and each line is exactly what this build would write for that event.
fn combined_log_is_understood(paths: &StatePaths) {
    let text = fs::read_to_string(paths.combined_log()).unwrap();
    let mut events = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let ev: LogEvent =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("line {}: {e}: {line}", n + 1));
        assert_eq!(
            serde_json::to_string(&ev).unwrap(),
            line,
            "line {} reads back differently",
            n + 1
        );
        events.push(ev);
    }
    let kinds: BTreeMap<&str, usize> = events.iter().fold(BTreeMap::new(), |mut m, e| {
        *m.entry(e.body.name()).or_default() += 1;
        m
    });
    assert_eq!(
        kinds,
        BTreeMap::from([
            ("approval_needed", 2),
            ("approval_status_change", 2),
            ("heartbeat", 2),
            ("tool_output", 4),
            ("tool_status_change", 4),
        ])
    );
    let first = &events[0];
    assert_eq!(first.tool, "deploy.sh");
    assert!(id::has_shape(&first.tool_run_id, id::RUN_PREFIX));
    assert!(
        first
            .execution_id
            .as_deref()
            .is_some_and(|e| id::has_shape(e, id::EXECUTION_PREFIX))
    );
    assert_eq!(
        first.body,
        EventBody::ToolStatusChange {
            status: RunStatus::Running,
            previous_status: None,
            reason: None,
            exit_code: None,
        }
    );
    let outputs: Vec<(usize, bool, u64)> = events
        .iter()
        .filter_map(|e| match &e.body {
            EventBody::ToolOutput {
                stream,
                text,
                truncated,
                skipped_lines,
            } => {
                assert_eq!(stream, "pty");
                Some((text.len(), *truncated, *skipped_lines))
            }
            _ => None,
        })
        .collect();
    assert_eq!(
        outputs,
        [
            (22, false, 0),
            (22, false, 0),
            (4096, true, 0),
            (11, false, 37)
        ]
    );
    let beats: Vec<(&str, Option<&str>)> = events
        .iter()
        .filter_map(|e| match &e.body {
            EventBody::Heartbeat { source, message } => Some((source.as_str(), message.as_deref())),
            _ => None,
        })
        .collect();
    assert_eq!(beats, [("tool", Some("step 3 of 5")), ("tool", None)]);
    let needed: Vec<(&str, Vec<&str>, Option<&str>, bool)> = events
        .iter()
        .filter_map(|e| match &e.body {
            EventBody::ApprovalNeeded {
                question,
                options,
                default,
                allows_text,
                expires_at,
                ..
            } => {
                assert!(expires_at.is_some());
                let values = options.iter().map(|o| o.value.as_str()).collect();
                Some((question.as_str(), values, default.as_deref(), *allows_text))
            }
            _ => None,
        })
        .collect();
    assert_eq!(
        needed,
        [
            (
                "Deploy to production? [y/N]",
                vec!["y", "n"],
                Some("n"),
                false
            ),
            (
                "Rotate the signing key?",
                vec!["approve", "reject"],
                Some("reject"),
                false
            ),
        ]
    );
    // (status, chosen value, decided by, channel)
    type Decision<'a> = (
        ApprovalStatus,
        Option<&'a str>,
        Option<&'a str>,
        Option<&'a str>,
    );
    let decisions: Vec<Decision<'_>> = events
        .iter()
        .filter_map(|e| match &e.body {
            EventBody::ApprovalStatusChange {
                status,
                chosen_value,
                decided_by,
                decision_channel,
                ..
            } => Some((
                *status,
                chosen_value.as_deref(),
                decided_by.as_deref(),
                decision_channel.as_deref(),
            )),
            _ => None,
        })
        .collect();
    assert_eq!(
        decisions,
        [
            (
                ApprovalStatus::Approved,
                Some("y"),
                Some("alice"),
                Some("cli")
            ),
            (
                ApprovalStatus::Expired,
                Some("reject"),
                Some("system:expiry"),
                Some("system:expiry")
            ),
        ]
    );
    let statuses: Vec<(RunStatus, Option<RunStatus>, Option<i32>)> = events
        .iter()
        .filter_map(|e| match &e.body {
            EventBody::ToolStatusChange {
                status,
                previous_status,
                exit_code,
                ..
            } => Some((*status, *previous_status, *exit_code)),
            _ => None,
        })
        .collect();
    assert_eq!(
        statuses,
        [
            (RunStatus::Running, None, None),
            (RunStatus::WaitingApproval, Some(RunStatus::Running), None),
            (
                RunStatus::WaitingApproval,
                Some(RunStatus::WaitingApproval),
                Some(90)
            ),
            (RunStatus::Failed, Some(RunStatus::Running), Some(3)),
        ]
    );
}

/// The spooled row and the state dir it is replayed into.
fn spooled_run() -> (PathBuf, ToolRun) {
    let dir = fixtures().join("spool");
    let mut files: Vec<PathBuf> = fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(files.len(), 1, "{files:?}");
    let file = files.remove(0);
    #[derive(Deserialize)]
    struct SpoolExpected {
        run: ToolRun,
    }
    let text = fs::read_to_string(fixtures().join("spool.expected.json")).unwrap();
    let exp: SpoolExpected = serde_json::from_str(&text).unwrap();
    assert_eq!(
        file.file_name().and_then(|n| n.to_str()),
        Some(format!("{}.json", exp.run.tool_run_id).as_str())
    );
    (file, exp.run)
}

/// A fresh state dir with the old spool file in `STATE/spool/` and a new database.
fn state_with_spool() -> (TempDir, StatePaths, Connection, ToolRun) {
    let (tmp, paths) = fresh_state_dir();
    let (file, run) = spooled_run();
    let dir = spool::dir(&paths);
    paths::create_private_dir(&dir).unwrap();
    let to = dir.join(file.file_name().unwrap());
    fs::copy(&file, &to).unwrap();
    fs::set_permissions(&to, fs::Permissions::from_mode(0o600)).unwrap();
    let conn = db::open(&paths.db, OpenMode::Create).unwrap();
    (tmp, paths, conn, run)
}

#[test]
fn old_spool_file_lands_in_a_new_database() {
    let (_tmp, paths, mut conn, run) = state_with_spool();
    spooled_row_lands(&mut conn, &paths, &run);
}

/// Its row never reached the database: replay inserts it whole.
fn spooled_row_lands(conn: &mut Connection, paths: &StatePaths, run: &ToolRun) {
    let done = spool::replay(conn, paths, "monitor").unwrap();
    assert_eq!(done, std::slice::from_ref(&run.tool_run_id));
    assert_eq!(
        runs::get(conn, &run.tool_run_id).unwrap().as_ref(),
        Some(run)
    );
    assert_eq!((run.status, run.exit_code), (RunStatus::Failed, Some(1)));
    spool_is_empty(paths);
    let rows = audit::for_run(conn, &run.tool_run_id).unwrap();
    assert_eq!(
        rows.iter()
            .map(|r| (r.event.as_str(), r.actor.as_str()))
            .collect::<Vec<_>>(),
        [("tool_status_change", "monitor")]
    );
    chain_is_intact(conn, Some(1));
}

#[test]
fn old_spool_file_ends_its_running_row() {
    let (_tmp, paths, mut conn, run) = state_with_spool();
    spooled_row_ends_its_run(&mut conn, &paths, &run);
}

/// Its first row landed (running) and the final one was spooled: replay ends the run as
/// the spooled row says.
fn spooled_row_ends_its_run(conn: &mut Connection, paths: &StatePaths, run: &ToolRun) {
    let mut first = run.clone();
    first.status = RunStatus::Running;
    first.reason = None;
    first.exit_code = None;
    first.completed_at = None;
    first.updated_at = first.started_at.clone();
    db::write(conn, |tx| runs::insert(tx, &first, "ci")).unwrap();
    let done = spool::replay(conn, paths, "monitor").unwrap();
    assert_eq!(done, std::slice::from_ref(&run.tool_run_id));
    let got = runs::get(conn, &run.tool_run_id).unwrap().unwrap();
    assert_eq!(
        (
            got.status,
            got.exit_code,
            got.reason.as_deref(),
            got.completed_at.as_deref()
        ),
        (
            RunStatus::Failed,
            Some(1),
            Some("exited with code 1"),
            run.completed_at.as_deref()
        )
    );
    assert_eq!(got.argv_json, run.argv_json);
    spool_is_empty(paths);
    chain_is_intact(conn, Some(2));
}

fn spool_is_empty(paths: &StatePaths) {
    let left: Vec<_> = fs::read_dir(spool::dir(paths))
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert!(left.is_empty(), "left in the spool: {left:?}");
}

// --- what an upgrade must not leave behind ----------------------------------------------

/// The schema of a database as `sqlite_master` has it (auto-indexes have no SQL).
fn schema(conn: &Connection) -> Vec<(String, String, Option<String>)> {
    let mut stmt = conn
        .prepare("SELECT type, name, sql FROM sqlite_master ORDER BY type, name")
        .unwrap();
    stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .unwrap()
        .collect::<rusqlite::Result<Vec<_>>>()
        .unwrap()
}

/// An old database, migrated, has the tables and indexes a new one gets: the queries
/// written for them (and their plans) hold on upgraded state too. A shipped migration that
/// is edited afterwards shows here: the v4 entry cb9c46c shipped made only
/// `tool_runs_open`, and `tool_runs_failed` was added to that entry later (bd1b6e8,
/// 9bd4ae9), so a database cb9c46c took to v4 is never given it.
#[test]
fn every_old_database_migrates_to_the_schema_of_a_new_one() {
    let (_tmp, fresh) = fresh_state_dir();
    let want = schema(&db::open(&fresh.db, OpenMode::Create).unwrap());
    let mut differences = Vec::new();
    for version in 1..=4 {
        let (_tmp, paths) = open_fixture(version);
        let got = schema(&open_store(&paths));
        let missing: Vec<&str> = want
            .iter()
            .filter(|w| !got.contains(w))
            .map(|w| w.1.as_str())
            .collect();
        let extra: Vec<&str> = got
            .iter()
            .filter(|g| !want.contains(g))
            .map(|g| g.1.as_str())
            .collect();
        if !missing.is_empty() || !extra.is_empty() {
            differences.push(format!(
                "v{version}: missing or different {missing:?}, not in a new database {extra:?}"
            ));
        }
    }
    assert!(differences.is_empty(), "{}", differences.join("\n"));
}

/// v1 (3f60413) ended a run its shim killed as stalled (exit 92) without `completed_at`
/// (`finished` was `status.is_final()` until ea44d98). This build counts such a run among
/// the failures, not as a live stall (`alerts::live_counts`, `alerts::failed_since` tell
/// the two apart by `completed_at`): the row v1 wrote must count that way too, or the
/// dashboard shows a stall that ended long ago as live, for ever.
#[test]
fn a_v1_stall_killed_run_is_not_counted_live() {
    let (_tmp, paths) = open_fixture(1);
    let conn = open_store(&paths);
    let exp = Expected::load(1);
    let killed = exp.run("stall_killed");
    assert_eq!(
        (
            killed.status,
            killed.exit_code,
            killed.completed_at.as_deref()
        ),
        (RunStatus::Stalled, Some(92), None),
        "the fixture holds what v1 wrote"
    );
    let live: BTreeMap<&str, i64> = alerts::live_counts(&conn)
        .unwrap()
        .into_iter()
        .map(|(s, n)| (s.as_str(), n))
        .collect();
    // Only the run whose shim was killed with -9 has not ended.
    assert_eq!(live, BTreeMap::from([("running", 1)]));
    // cargo test (101), npm ci (hard timeout) and the stall-killed fetch.
    assert_eq!(
        alerts::failed_since(&conn, "2026-01-01T00:00:00.000Z").unwrap(),
        3
    );
}
