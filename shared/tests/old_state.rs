//! Old state still loads: a database made by each released schema version (v1–v9), a
//! `logs/combined.log` and a spooled run row as older builds wrote them are checked in
//! under `tests/fixtures/old_state/` (made by `make.py` there, which says how: v1–v4 as the
//! first build of each version wrote them, v5–v9 as the last build before the next
//! version did; the first v7 and v8 builds' schemas in `first-builds/`) and must open, read and take writes through the store the shim and
//! `monitor` use.
//!
//! Each fixture is copied into a fresh state dir first (`open_fixture`), so the checked-in
//! files are never changed. From v6 the rows say who wrote them (the shim's uid, 1207, and
//! from v8 the owner the store recorded, `ci`): a store is its owner's, and only its owner
//! runs its commands again, so `open_own_fixture` hands the copy to the user running the
//! test first, as if `ci` upgraded its own store (those fields only, by raw SQL on the
//! copy, before the store opens it); `runs_of_another_user_stay_theirs` opens them as they
//! are. Each case is a function of an open store (or state dir): opening goes through
//! `open_store` alone, so a new store type changes that one helper. State is read and
//! written only through the store's traits (`RunnerStore`, what a shim does;
//! `OperatorStore`, `WorkerStore` and `AdminStore`, what `monitor` does; `PipelineStore`,
//! what `monitor pipeline` does). Raw SQL is used only to look at the file itself (its
//! schema, the remembered policies of v2–v5 as stored, whether a policy is enabled, which
//! no trait method says) and to hand a copy over.
//!
//! What every database is checked for: it migrates to `SCHEMA_VERSION` in WAL mode; every
//! run and approval reads back field for field as the fixture's `state-vN.expected.json`
//! says (single reads, lists, the streamed JSON export), with what schema v5 repairs
//! repaired; what a re-run and the worker depend on still works on old rows (fingerprints
//! recomputed by this build; a re-run of an approved command is answered by the old
//! decision, once; a retry takes the pending approval over; the remembered decision
//! answers its prompt; parked runs with decisions and resumes are found); the store can
//! write to it (a new run, a reconciliation, a decision, an expiry, a consumed answer, a
//! remembered policy, an approval on a v1 database); and the audit chain an old build
//! wrote verifies, before and after.
//!
//! What later versions wrote besides, checked on their own databases: v6 — an approval's
//! screen and tool digests are the ones this build computes, a decision answers a re-run
//! on the same screen and tool and not one on a changed screen (asked anew, saying what
//! changed); a remembered decision keeps its scope (that command line in that directory)
//! and answers only there. v7 — pipeline executions read back as `monitor pipeline` reads
//! them (the list, one, the open ones, the runs of each), and their stored definitions pass
//! this build's check. v8 — owners read back; an execution's pinned definition digest is
//! the one this build computes; another user's runs and executions are not this user's to
//! claim, resume or drive.

use hr_shared::approvals::{Approval, ApprovalFilter, DecideOutcome, Decider, PromptKind};
use hr_shared::config::{OnExpire, PromptRuleConfig};
use hr_shared::db::SCHEMA_VERSION;
use hr_shared::event::{EventBody, LogEvent};
use hr_shared::paths::{self, StatePaths};
use hr_shared::pipeline::file::Definition;
use hr_shared::prompt::{self, ScreenFacts};
use hr_shared::rules::{self, HostFacts, Liveness};
use hr_shared::runs::{RunFilter, StatusChange, ToolRun};
use hr_shared::status::{ApprovalStatus, RunStatus};
use hr_shared::store::pipelines::{Execution, ExecutionState, PipelineStore};
use hr_shared::store::sqlite::SqliteStore;
use hr_shared::store::{
    AdminStore, Asker, OperatorStore, PromptRequest, PromptResolution, RememberScope, Replace,
    RunWrite, RunnerStore, StoreError, StoreHealth, WorkerStore,
};
use hr_shared::{fingerprint, id, proc, spool, time};
use rusqlite::{Connection, OpenFlags, params};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;
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

/// Who made the fixtures from v6 on: the uid their shims recorded (`metadata.uid`) and,
/// from v8, the owner their store recorded (the store's owner, `ci`).
const FIXTURE_USER: &str = "ci";
const FIXTURE_UID: u32 = 1207;

/// The user this test runs as, and its uid: what the store records for its own writes.
fn me() -> (String, u32) {
    let uid = proc::effective_uid();
    (proc::user_name(uid), uid)
}

/// [`open_fixture`] as its owner opens it, with what it should read back: from v6 the copy
/// is handed to the user running the test first — the uid its runs say they ran as and,
/// from v8, the owner of its runs and executions become this user's, in the file (raw SQL
/// on the copy, before any store opens it) and in the expected rows alike. Nothing else
/// changes: these fields are in no audit row.
fn open_own_fixture(version: u32) -> (TempDir, StatePaths, Expected) {
    let (tmp, paths) = open_fixture(version);
    let mut exp = Expected::load(version);
    if version >= 6 {
        let (user, uid) = me();
        let conn = Connection::open(&paths.db).expect("open the copy");
        let runs = conn
            .execute(
                "UPDATE tool_runs SET metadata = json_set(metadata, '$.uid', ?1)
                 WHERE json_extract(metadata, '$.uid') = ?2",
                params![uid, FIXTURE_UID],
            )
            .unwrap();
        assert_eq!(runs, exp.runs.len(), "every run says which user it ran as");
        if version >= 8 {
            let owned = conn
                .execute(
                    "UPDATE tool_runs SET owner = ?1 WHERE owner = ?2",
                    params![user, FIXTURE_USER],
                )
                .unwrap();
            assert_eq!(owned, exp.runs.len(), "every run has its owner");
            conn.execute(
                "UPDATE pipelines SET owner = ?1, uid = ?2 WHERE owner = ?3",
                params![user, uid, FIXTURE_USER],
            )
            .unwrap();
        }
        drop(conn);
        exp.rehome(&user, uid);
    }
    (tmp, paths, exp)
}

/// An empty state dir (0700) with no database yet.
fn fresh_state_dir() -> (TempDir, StatePaths) {
    let tmp = tempfile::tempdir().expect("tempdir");
    let root = tmp.path().join("state");
    paths::create_private_dir(&root).expect("state dir");
    let paths = StatePaths::at(root);
    (tmp, paths)
}

/// The state store of `paths`, as `monitor` opens it (an existing database, migrated
/// forward, the spool replayed), connected.
fn open_store(paths: &StatePaths) -> SqliteStore {
    let mut store = SqliteStore::existing(paths.clone());
    OperatorStore::connect(&mut store)
        .unwrap_or_else(|e| panic!("{} does not open: {e}", paths.db.display()));
    store
}

/// The database file itself, read-only, below the store: for what no trait method shows.
fn raw_file(paths: &StatePaths) -> Connection {
    Connection::open_with_flags(&paths.db, OpenFlags::SQLITE_OPEN_READ_ONLY)
        .unwrap_or_else(|e| panic!("{}: {e}", paths.db.display()))
}

/// The host the old runs were recorded on (`build-01`), where none of their processes
/// runs any more.
struct OldHost;

impl HostFacts for OldHost {
    fn host(&self) -> &str {
        "build-01"
    }

    fn process(&self, _pid: i32, _start_time: Option<u64>) -> Liveness {
        Liveness::Gone
    }
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
    /// v7 on: pipeline executions, by role.
    #[serde(default)]
    pipelines: BTreeMap<String, Execution>,
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

    fn pipeline(&self, role: &str) -> &Execution {
        self.pipelines
            .get(role)
            .unwrap_or_else(|| panic!("v{}: no pipeline `{role}`", self.version))
    }

    /// The rows as [`open_own_fixture`] hands them over: the fixture user's uid and owner
    /// become `user`'s (`uid`).
    fn rehome(&mut self, user: &str, uid: u32) {
        for r in self.runs.values_mut() {
            if let Some(m) = r.metadata.as_mut().and_then(|m| m.as_object_mut())
                && m.get("uid").and_then(|u| u.as_u64()) == Some(u64::from(FIXTURE_UID))
            {
                m.insert("uid".into(), uid.into());
            }
            if r.owner.as_deref() == Some(FIXTURE_USER) {
                r.owner = Some(user.to_owned());
            }
        }
        for ex in self.pipelines.values_mut() {
            if ex.owner.as_deref() == Some(FIXTURE_USER) {
                ex.owner = Some(user.to_owned());
                ex.uid = Some(uid);
            }
        }
    }

    /// The runs parked on an approval (exit 90): v2's four, and v6's screen-gated one.
    fn parked_roles(&self) -> Vec<&'static str> {
        let mut roles = vec!["pending", "approved", "rejected", "overdue"];
        if self.approvals.contains_key("screen_gated") {
            roles.push("screen_gated");
        }
        roles
    }

    /// Who decided `approved` (and remembered it): alice with `monitor decide` until v8,
    /// from v8 the store's owner (only the owner writes an embedded store; other people
    /// decide through `monitor serve`, which remembers nothing).
    fn rememberer(&self) -> &'static str {
        if self.version >= 8 {
            FIXTURE_USER
        } else {
            "alice"
        }
    }

    /// Whether the remembered decision has a scope (v6 on: its command line and directory).
    fn scoped_policy(&self) -> bool {
        !self.policies["remembered"]["argv_json"].is_null()
    }

    /// The runs as this build reads them back: as written, but for what schema v5
    /// repaired. A run its shim killed as stalled (exit 92), which v1 wrote without
    /// `completed_at`, ended when it was last updated.
    fn runs_as_migrated(&self) -> BTreeMap<&str, ToolRun> {
        self.runs
            .iter()
            .map(|(role, r)| {
                let mut r = r.clone();
                if r.status == RunStatus::Stalled
                    && r.exit_code.is_some()
                    && r.completed_at.is_none()
                {
                    r.completed_at = Some(r.updated_at.clone());
                }
                (role.as_str(), r)
            })
            .collect()
    }
}

// --- one test per old version -----------------------------------------------------------

#[test]
fn database_made_by_schema_v1_loads() {
    let (_tmp, paths) = open_fixture(1);
    let mut store = open_store(&paths);
    let exp = Expected::load(1);
    is_migrated(&mut store, &exp);
    chain_is_intact(&mut store, Some(exp.audit_rows));
    reads_runs(&mut store, &exp);
    v1_runs_are_as_written(&mut store, &exp);
    takes_new_runs(&mut store, &exp);
    reconciles_the_vanished_run(&mut store, &exp);
    takes_approvals_on_a_v1_database(&mut store);
    chain_is_intact(&mut store, None);
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

#[test]
fn database_made_by_schema_v5_loads() {
    approvals_era_database_loads(5);
}

#[test]
fn database_made_by_schema_v6_loads() {
    approvals_era_database_loads(6);
}

#[test]
fn database_made_by_schema_v7_loads() {
    approvals_era_database_loads(7);
}

#[test]
fn database_made_by_schema_v8_loads() {
    approvals_era_database_loads(8);
}

/// v2–v8 hold the same story: finished, failed and vanished runs, runs parked on a pending,
/// an approved (and remembered), a rejected and an overdue approval, and a parked run
/// whose approval a resume consumed. From v6 its approvals keep their screen and tool, the
/// remembered decision its scope, and one more run is parked on a decision made on its
/// screen; from v7 two pipeline executions (one completed, one whose runner died); from v8
/// every run and execution has its owner.
///
/// The reads come first; then the writes, the expiry first of all, since a reconciliation
/// and every prompt a re-run resolves expire overdue approvals on their way.
fn approvals_era_database_loads(version: u32) {
    let (_tmp, paths, exp) = open_own_fixture(version);
    let mut store = open_store(&paths);
    is_migrated(&mut store, &exp);
    chain_is_intact(&mut store, Some(exp.audit_rows));
    reads_runs(&mut store, &exp);
    reads_approvals(&mut store, &exp);
    old_decisions_are_found_again(&mut store, &exp);
    if version >= 7 {
        reads_pipelines(&mut store, &exp);
        own_executions_are_ours(&exp);
    }
    takes_new_runs(&mut store, &exp);
    expires_the_overdue_one(&mut store, &exp);
    reconciles_the_vanished_run(&mut store, &exp);
    old_decisions_answer_reruns(&mut store, &exp);
    if version >= 6 {
        a_changed_screen_is_asked_anew(&mut store, &exp);
    }
    takes_decisions(&mut store, &exp);
    chain_is_intact(&mut store, None);
}

// --- reads ------------------------------------------------------------------------------

fn is_migrated(store: &mut SqliteStore, exp: &Expected) {
    assert_eq!(
        store.health().unwrap(),
        StoreHealth {
            schema_version: SCHEMA_VERSION,
            supported_version: SCHEMA_VERSION,
            journal: "wal".into(),
        },
        "made by {} at v{}",
        exp.made_by,
        exp.version
    );
}

/// The audit chain verifies; `rows`, when given, is how many rows it must have.
fn chain_is_intact(store: &mut SqliteStore, rows: Option<u64>) {
    let report = store.verify_audit().unwrap();
    assert!(report.intact(), "{:?}", report.problems);
    if let Some(rows) = rows {
        assert_eq!(report.rows, rows);
    }
    assert_eq!(store.unrecorded_decisions().unwrap(), []);
}

/// Failures are counted from here (every fixture is younger).
const SINCE_2026: &str = "2026-01-01T00:00:00.000Z";

fn reads_runs(store: &mut SqliteStore, exp: &Expected) {
    let as_migrated = exp.runs_as_migrated();
    for (role, want) in &as_migrated {
        let got = store.run(&want.tool_run_id).unwrap();
        assert_eq!(got.as_ref(), Some(want), "v{} run `{role}`", exp.version);
    }
    let listed = store.runs(&RunFilter::default()).unwrap();
    let mut ids: Vec<&str> = exp.runs.values().map(|r| r.tool_run_id.as_str()).collect();
    ids.sort_unstable_by(|a, b| b.cmp(a));
    assert_eq!(
        listed
            .iter()
            .map(|r| r.tool_run_id.as_str())
            .collect::<Vec<_>>(),
        ids,
        "runs, newest first"
    );
    // `monitor runs --json` streams the rows itself: the same document as the rows read.
    let mut json = Vec::new();
    let n = store
        .export_runs_json(&RunFilter::default(), &mut json)
        .unwrap();
    assert_eq!(n, exp.runs.len());
    let exported: Vec<ToolRun> = serde_json::from_slice(&json).unwrap();
    assert_eq!(exported, listed);

    let mut want_counts: BTreeMap<&str, i64> = BTreeMap::new();
    for r in exp.runs.values() {
        *want_counts.entry(r.status.as_str()).or_default() += 1;
    }
    let counts: BTreeMap<&str, i64> = store
        .counts(SINCE_2026, Duration::ZERO)
        .unwrap()
        .totals
        .into_iter()
        .map(|(s, n)| (s.as_str(), n))
        .collect();
    assert_eq!(counts, want_counts);

    // The shim killed with -9 is the one run reconcile should still look at.
    let supervised: Vec<String> = store
        .supervised_runs(None)
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
fn v1_runs_are_as_written(store: &mut SqliteStore, exp: &Expected) {
    let timed_out = store
        .run(&exp.run("timed_out").tool_run_id)
        .unwrap()
        .unwrap();
    assert_eq!(
        (timed_out.status, timed_out.exit_code),
        (RunStatus::FailedTimeout, Some(124))
    );
    let written = exp.run("stall_killed");
    let killed = store.run(&written.tool_run_id).unwrap().unwrap();
    assert_eq!(
        (killed.status, killed.exit_code),
        (RunStatus::Stalled, Some(92))
    );
    // v1 wrote it without an end time; v5 gave it the time it was last written.
    assert_eq!(written.completed_at, None);
    assert_eq!(killed.completed_at.as_ref(), Some(&written.updated_at));
    assert_eq!(killed.updated_at, written.updated_at);
    // v1 wrote the pid after the row (`runs::set_pid`): it is there all the same.
    assert!(exp.runs.values().all(|r| r.pid.is_some()));
}

fn reads_approvals(store: &mut SqliteStore, exp: &Expected) {
    for (role, want) in &exp.approvals {
        let got = OperatorStore::approval(store, &want.approval_id).unwrap();
        assert_eq!(
            got.as_ref(),
            Some(want),
            "v{} approval `{role}`",
            exp.version
        );
    }
    let pending: Vec<String> = store
        .approvals(&ApprovalFilter {
            statuses: vec![ApprovalStatus::Pending],
            ..Default::default()
        })
        .unwrap()
        .into_iter()
        .map(|a| a.approval_id)
        .collect();
    let mut want = vec![
        exp.approval("pending").approval_id.clone(),
        exp.approval("overdue").approval_id.clone(),
    ];
    // The pending queue, oldest first.
    want.sort_unstable();
    assert_eq!(pending, want);
    // Both pending; the overdue one is past its expiry (it expired 2026-11-22).
    assert_eq!(store.live_counts(Duration::ZERO).unwrap().pending, (2, 1));

    let approved = exp.approval("approved");
    assert_eq!(
        (approved.status, approved.chosen_value.as_deref()),
        (ApprovalStatus::Approved, Some("y"))
    );
    assert_eq!(approved.decided_by.as_deref(), Some(exp.rememberer()));
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
    let parked = exp.parked_roles();
    for role in &parked {
        let run = exp.run(role);
        assert_eq!(
            (run.status, run.exit_code),
            (RunStatus::WaitingApproval, Some(90)),
            "{role}"
        );
        assert!(rules::is_parked(run), "{role}");
    }
    let counts = store.counts(SINCE_2026, Duration::ZERO).unwrap();
    let live: BTreeMap<&str, i64> = counts.live.iter().map(|(s, n)| (s.as_str(), *n)).collect();
    assert_eq!(
        live,
        BTreeMap::from([("running", 1), ("waiting_approval", parked.len() as i64)])
    );
    assert_eq!(counts.failed_recent, 1);
}

/// What the worker of this build looks up in an old database finds what the old build
/// left, and the fingerprints a re-run of this build computes are the ones the old rows
/// hold (recomputed here, not read from the fixture). Nothing here writes: what a re-run
/// does with them is [`old_decisions_answer_reruns`].
fn old_decisions_are_found_again(store: &mut SqliteStore, exp: &Expected) {
    for (role, a) in &exp.approvals {
        let run = store.run(&a.tool_run_id).unwrap().unwrap();
        let request = fingerprint::request(
            &run.tool_name,
            &run.argv_json,
            run.cwd.as_deref().unwrap_or(""),
        );
        assert_eq!(a.request_fingerprint.as_ref(), Some(&request), "{role}");
        let line = a.prompt_line.as_deref().expect("a prompt line");
        let prompt = fingerprint::prompt(&a.tool_name, line);
        assert_eq!(a.prompt_fingerprint.as_ref(), Some(&prompt), "{role}");
        // The screen the old shim saw is recognised the same way by this build's shim — as
        // the confirm widget it is, whose `yes`/`no` take the old `y`/`n` decisions.
        let req = prompt_of(a);
        assert_eq!(req.prompt.prompt_line, line, "{role}");
        assert_eq!(req.prompt.kind, PromptKind::Confirm, "{role}");
        if let Some(v) = a.chosen_value.as_deref() {
            assert!(
                req.prompt.takes(v),
                "{role}: the old decision `{v}` still answers"
            );
        }
        // v6: the screen it was asked on and the tool that asked, as this build digests
        // them; what the test shows again as the same screen has that digest.
        if exp.version >= 6 {
            let context = a.context.as_deref().expect("the screen above the question");
            assert_eq!(
                a.screen_digest.as_ref(),
                Some(&fingerprint::screen(&fingerprint::seen_text(
                    context,
                    &a.question
                ))),
                "{role}"
            );
            assert_eq!(
                a.screen_digest.as_ref(),
                Some(&fingerprint::seen(&same_screen(a).prompt)),
                "{role}"
            );
            assert!(a.tool_digest.is_some(), "{role}");
        } else {
            assert_eq!((&a.screen_digest, &a.tool_digest), (&None, &None), "{role}");
        }
    }
    let want = &exp.policies["remembered"];
    assert_eq!(want["value"], "y");
    if exp.scoped_policy() {
        // v6: read back in force, with the command line and directory it was made in.
        let approved_run = exp.run("approved");
        let read: Vec<serde_json::Value> = store
            .remembered()
            .unwrap()
            .into_iter()
            .map(|p| serde_json::to_value(p).unwrap())
            .collect();
        assert_eq!(read, std::slice::from_ref(want));
        assert_eq!(want["argv_json"], serde_json::json!(approved_run.argv_json));
        assert_eq!(want["cwd"], serde_json::json!(approved_run.cwd));
    } else {
        // Stored as the old build stored it (this looks at the file).
        assert_eq!(&policy_row(store.paths(), policy_id(want)), want);
    }
    // The worker finds the parked runs that have a decision, with that decision.
    let parked = decided_parked(store);
    assert_eq!(
        parked,
        parked_with_decisions(exp, &["approved", "rejected"])
    );
    let resumes: Vec<String> = store
        .resumes_of(&exp.run("parked_resumed").tool_run_id)
        .unwrap()
        .into_iter()
        .map(|r| r.tool_run_id)
        .collect();
    assert_eq!(resumes, [exp.run("resume").tool_run_id.clone()]);
}

/// The parked runs with decisions the worker finds: (run, its decisions, pending ones).
fn decided_parked(store: &mut SqliteStore) -> Vec<(String, Vec<String>, usize)> {
    store
        .decided_parked()
        .unwrap()
        .into_iter()
        .map(|p| {
            let decided = p.decided.into_iter().map(|a| a.approval_id).collect();
            (p.run.tool_run_id, decided, p.pending)
        })
        .collect()
}

/// The runs of `roles` with their own decision (none pending), and v6's screen-gated one
/// (decided, never resumed), as [`decided_parked`] lists them.
fn parked_with_decisions(exp: &Expected, roles: &[&str]) -> Vec<(String, Vec<String>, usize)> {
    let mut roles = roles.to_vec();
    if exp.approvals.contains_key("screen_gated") {
        roles.push("screen_gated");
    }
    let mut want: Vec<(String, Vec<String>, usize)> = roles
        .iter()
        .map(|role| {
            (
                exp.run(role).tool_run_id.clone(),
                vec![exp.approval(role).approval_id.clone()],
                0,
            )
        })
        .collect();
    want.sort();
    want
}

/// v7: the executions read back as `monitor pipeline` reads them — the list (newest first),
/// each one, the open ones (the one whose runner died), the runs of each (its steps'
/// headless-runs, which say which step they ran) — and their stored definitions pass this
/// build's check (`Definition::from_stored`); from v8 the digest pinned at the start is the
/// one this build computes, so its steps may still be run.
fn reads_pipelines(store: &mut SqliteStore, exp: &Expected) {
    let done = exp.pipeline("completed");
    let open = exp.pipeline("abandoned");
    assert_eq!(
        PipelineStore::pipelines(store, 10).unwrap(),
        [open.clone(), done.clone()],
        "v{} executions, newest first",
        exp.version
    );
    for ex in exp.pipelines.values() {
        assert_eq!(
            PipelineStore::pipeline(store, &ex.execution_id)
                .unwrap()
                .as_ref(),
            Some(ex)
        );
        let def = Definition::from_stored(&ex.definition)
            .unwrap_or_else(|e| panic!("{}: {e:?}", ex.execution_id));
        assert_eq!(def.name, ex.name);
        if exp.version >= 8 {
            assert_eq!(ex.definition_digest.as_ref(), Some(&def.digest()));
        } else {
            assert_eq!(ex.definition_digest, None);
        }
    }
    assert_eq!(
        PipelineStore::open_pipelines(store, 10).unwrap(),
        std::slice::from_ref(open)
    );
    assert_eq!(
        (done.status, done.runner.as_deref(), open.status),
        (ExecutionState::Completed, None, ExecutionState::Running)
    );
    assert!(open.runner.is_some(), "its runner died driving it");
    for (ex, roles) in [
        (done, vec!["step_build", "step_check"]),
        (open, vec!["step_nightly_build"]),
    ] {
        let runs = PipelineStore::execution_runs(store, &ex.execution_id).unwrap();
        let want: Vec<&ToolRun> = roles.iter().map(|r| exp.run(r)).collect();
        assert_eq!(runs.iter().collect::<Vec<_>>(), want);
        for (run, step) in runs.iter().zip(&ex.steps) {
            assert_eq!(
                run.pipeline_step(),
                Some(format!("{}/{}#{}", ex.execution_id, step.node, step.iteration).as_str())
            );
            assert_eq!(
                step.run.as_ref().and_then(|r| r.pid),
                run.shim_pid.map(|p| p as i32),
                "the step's headless-run is its run's shim"
            );
        }
    }
}

/// The executions of a store its owner opens are the owner's to drive: v7's, from before
/// owners were recorded, and v8's (handed to this user with the store).
fn own_executions_are_ours(exp: &Expected) {
    let (user, uid) = me();
    for ex in exp.pipelines.values() {
        assert_eq!(rules::execution_not_ours(ex, &user, uid), None);
    }
}

// --- writes -----------------------------------------------------------------------------

/// A run as this build's shim writes it.
fn new_run(tool: &str) -> ToolRun {
    let now = time::now_rfc3339();
    ToolRun {
        tool_run_id: id::new_run_id(),
        execution_id: Some(id::new_execution_id()),
        status: RunStatus::Running,
        supervisor_heartbeat_at: Some(now),
        pid: Some(7001),
        shim_pid: Some(7000),
        shim_start_time: Some(123_456),
        host: Some("build-02".into()),
        argv_json: vec![tool.into(), "--check".into()],
        cwd: Some("/home/ci/src/app".into()),
        metadata: Some(serde_json::json!({"mode": "pty", "tool_path": "/usr/bin/x"})),
        ..hr_shared::testing::run("", tool, RunStatus::Running)
    }
}

/// Parks run `id` on its approval as an exit-mode shim does when it exits 90: nobody
/// supervises it any more, so a re-run may take up its decision.
fn park(store: &mut SqliteStore, id: &str) {
    let change = StatusChange {
        exit_code: Some(90),
        finished: false,
        ..StatusChange::to(
            RunStatus::WaitingApproval,
            Some("waiting for approval".into()),
        )
    };
    store
        .record(
            id,
            &[RunWrite::Status(change, Replace::AnyButCancelled)],
            "ci",
            false,
        )
        .unwrap();
}

/// Records `run`'s first row as its shim does.
fn start(store: &mut SqliteStore, run: &ToolRun) {
    let done = store
        .record(
            &run.tool_run_id,
            &[RunWrite::Start(Box::new(run.clone()))],
            "ci",
            false,
        )
        .unwrap();
    assert!(done.value.inserted);
}

/// A new run of `argv` in `cwd` (on `build-02`, supervised now), started as its shim
/// starts it; the shim's view of it, to ask with.
fn start_command(store: &mut SqliteStore, argv: &[String], cwd: &str) -> Asker {
    let mut run = new_run(&argv[0]);
    run.tool_name = tool_name(&argv[0]);
    run.argv_json = argv.to_vec();
    run.cwd = Some(cwd.into());
    start(store, &run);
    Asker {
        request_fingerprint: fingerprint::request(&run.tool_name, &run.argv_json, cwd),
        argv: run.argv_json.clone(),
        cwd: cwd.to_owned(),
        tool_digest: None,
        tool_run_id: run.tool_run_id,
        tool: run.tool_name,
        execution_id: run.execution_id.expect("an execution id"),
        actor: "ci".into(),
        review: Default::default(),
    }
}

/// The tool name a shim records for `argv[0]` (its file name).
fn tool_name(argv0: &str) -> String {
    Path::new(argv0)
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or(argv0)
        .to_owned()
}

/// A re-run of `old`'s command (same tool, argv and cwd), by hand or by the worker, running
/// what the run that asked `asked` ran (the tool digest it kept, from v6: the executable
/// has not changed since).
fn rerun_of(store: &mut SqliteStore, old: &ToolRun, asked: Option<&Approval>) -> Asker {
    let mut who = start_command(store, &old.argv_json, old.cwd.as_deref().unwrap_or(""));
    assert_eq!(who.tool, old.tool_name);
    who.tool_digest = asked.and_then(|a| a.tool_digest.clone());
    who
}

/// `line` on the screen of `tool`, blocked reading in line mode with echo on, as this
/// build's shim recognises it (no rules from config) and asks the store about it (no
/// config policy matched).
fn prompt_on_screen(tool: &str, line: &str) -> PromptRequest {
    let rows = [line.to_owned()];
    let prompt = prompt::classify(
        &ScreenFacts {
            tool,
            rows: &rows,
            prompt_line: line,
            echo: true,
            canonical: true,
            below: &[],
            cursor_hidden: false,
            emphasis: &[],
        },
        std::iter::empty::<&PromptRuleConfig>(),
    );
    PromptRequest {
        prompt_fingerprint: fingerprint::prompt(tool, &prompt.prompt_line),
        prompt,
        policies: Vec::new(),
        ttl: None,
        on_expire: OnExpire::Reject,
    }
}

/// The prompt `a` was asked for, shown again: its fingerprint is the one `a` holds.
fn prompt_of(a: &Approval) -> PromptRequest {
    let req = prompt_on_screen(
        &a.tool_name,
        a.prompt_line.as_deref().expect("a prompt line"),
    );
    assert_eq!(
        a.prompt_fingerprint.as_ref(),
        Some(&req.prompt_fingerprint),
        "{}",
        a.approval_id
    );
    req
}

/// The prompt `a` was asked for, on the screen it was asked on (its stored question and
/// context): what the operator saw, whose digest (from v6) is `a`'s.
fn same_screen(a: &Approval) -> PromptRequest {
    let mut req = prompt_of(a);
    req.prompt.context = a.context.clone().unwrap_or_default();
    req.prompt.question = a.question.clone();
    req
}

/// What the store says to `who` about `req`.
fn ask(store: &mut SqliteStore, who: &Asker, req: &PromptRequest) -> PromptResolution {
    store.resolve_prompt(who, req, &OldHost).unwrap().value
}

/// The answer `resolution` must be: (approval, value).
fn answer(resolution: PromptResolution) -> (Approval, String) {
    match resolution {
        PromptResolution::Answer { approval, value } => (*approval, value),
        other => panic!("not answered: {other:?}"),
    }
}

/// The pending approval `resolution` must be: (approval, taken over).
fn pending(resolution: PromptResolution) -> (Approval, bool) {
    match resolution {
        PromptResolution::Pending {
            approval,
            taken_over,
        } => (*approval, taken_over),
        other => panic!("not pending: {other:?}"),
    }
}

/// The decision channel of a remembered policy's answers.
fn policy_channel(policy: &serde_json::Value) -> String {
    format!("policy:{}", policy["name"].as_str().expect("a policy name"))
}

fn policy_id(policy: &serde_json::Value) -> &str {
    policy["policy_id"].as_str().expect("a policy id")
}

/// A row of `policies`, as `RememberedPolicy` serialises it, read from the file.
fn policy_row(paths: &StatePaths, policy_id: &str) -> serde_json::Value {
    raw_file(paths)
        .query_row(
            "SELECT policy_id, name, tool_name, prompt_fingerprint, value, source,
                source_approval_id, created_at, created_by
             FROM policies WHERE policy_id = ?1",
            [policy_id],
            |r| {
                let mut row = serde_json::Map::new();
                for (i, column) in [
                    "policy_id",
                    "name",
                    "tool_name",
                    "prompt_fingerprint",
                    "value",
                    "source",
                    "source_approval_id",
                    "created_at",
                    "created_by",
                ]
                .into_iter()
                .enumerate()
                {
                    let v: Option<String> = r.get(i)?;
                    row.insert(column.into(), v.into());
                }
                Ok(serde_json::Value::Object(row))
            },
        )
        .unwrap_or_else(|e| panic!("policy {policy_id}: {e}"))
}

/// Whether the policy is still the one that answers (the file says so).
fn policy_enabled(paths: &StatePaths, policy_id: &str) -> bool {
    raw_file(paths)
        .query_row(
            "SELECT enabled FROM policies WHERE policy_id = ?1",
            [policy_id],
            |r| r.get::<_, i64>(0),
        )
        .unwrap()
        != 0
}

/// A new run goes in, ends, and reads back; the old ones are untouched.
fn takes_new_runs(store: &mut SqliteStore, exp: &Expected) {
    let run = new_run("rustfmt");
    start(store, &run);
    // Kept as the store's owner's (who alone writes it), whatever the row said.
    let run = owned(&run);
    assert_eq!(store.run(&run.tool_run_id).unwrap().as_ref(), Some(&run));
    let ended = StatusChange {
        status: RunStatus::Failed,
        reason: Some("exited with code 1".into()),
        exit_code: Some(1),
        finished: true,
        error: None,
        at: None,
    };
    store
        .record(
            &run.tool_run_id,
            &[RunWrite::Status(ended, Replace::Live)],
            "ci",
            false,
        )
        .unwrap();
    let after = store.run(&run.tool_run_id).unwrap().unwrap();
    assert_eq!(
        (after.status, after.exit_code),
        (RunStatus::Failed, Some(1))
    );
    assert!(after.completed_at.is_some());
    // It was running when it ended (the audit row of the change says so).
    let changes: Vec<(String, serde_json::Value, serde_json::Value)> = store
        .audit_of_run(&run.tool_run_id)
        .unwrap()
        .into_iter()
        .map(|row| {
            let data: serde_json::Value = serde_json::from_str(&row.data).unwrap();
            (
                row.event,
                data["status"].clone(),
                data["previous_status"].clone(),
            )
        })
        .collect();
    assert_eq!(
        changes,
        [
            (
                "tool_status_change".to_owned(),
                "running".into(),
                serde_json::Value::Null
            ),
            (
                "tool_status_change".to_owned(),
                "failed".into(),
                "running".into()
            ),
        ]
    );
    // The newest run lists first, before every old one.
    let newest = store
        .runs(&RunFilter {
            limit: Some(1),
            ..Default::default()
        })
        .unwrap();
    assert_eq!(newest[0].tool_run_id, run.tool_run_id);
    assert_eq!(
        store.runs(&RunFilter::default()).unwrap().len(),
        exp.runs.len() + 1
    );
    for old in exp.runs_as_migrated().values() {
        assert_eq!(store.run(&old.tool_run_id).unwrap().as_ref(), Some(old));
    }
}

/// An old run still takes a status change: the vanished one, reconciled on its host.
fn reconciles_the_vanished_run(store: &mut SqliteStore, exp: &Expected) {
    let vanished = exp.run("vanished");
    let why = format!(
        "{} (pid {} is not running)",
        rules::VANISHED,
        vanished.shim_pid.expect("a shim pid")
    );
    let done = store.reconcile("monitor", &OldHost).unwrap();
    assert_eq!(
        done.value.vanished,
        [(vanished.tool_run_id.clone(), why.clone())]
    );
    assert_eq!(done.value.expired, []);
    let events: Vec<(&str, &EventBody)> = done
        .effects
        .events
        .iter()
        .map(|e| (e.tool_run_id.as_str(), &e.body))
        .collect();
    assert_eq!(
        events,
        [(
            vanished.tool_run_id.as_str(),
            &EventBody::ToolStatusChange {
                status: RunStatus::Failed,
                previous_status: Some(RunStatus::Running),
                reason: Some(why.clone()),
                exit_code: None,
            }
        )]
    );
    let after = store.run(&vanished.tool_run_id).unwrap().unwrap();
    assert_eq!(
        (after.status, after.reason.as_deref()),
        (RunStatus::Failed, Some(why.as_str()))
    );
    assert_eq!(after.argv_json, vanished.argv_json);
}

/// A v1 database never held approvals; migrated, a prompt of a new run there becomes an
/// approval, takes its decision and a remembered policy, and both answer later runs.
fn takes_approvals_on_a_v1_database(store: &mut SqliteStore) {
    let argv: Vec<String> = vec!["./deploy.sh".into(), "--env".into(), "staging".into()];
    let cwd = "/home/ci/src/app";
    let who = start_command(store, &argv, cwd);
    let mut req = prompt_on_screen(&who.tool, "Continue? [y/N]");
    req.on_expire = OnExpire::Default;
    let done = store.resolve_prompt(&who, &req, &OldHost).unwrap();
    assert_eq!(done.effects.status, Some(RunStatus::WaitingApproval));
    let (a, taken_over) = pending(done.value);
    assert!(!taken_over);
    // It reads back as it was made, but for the options' keys, which are never stored.
    let mut stored = a.clone();
    for o in &mut stored.options_json {
        o.keys = None;
    }
    assert_eq!(
        OperatorStore::approval(store, &a.approval_id)
            .unwrap()
            .as_ref(),
        Some(&stored)
    );
    assert_eq!(
        (
            a.status,
            a.prompt_kind,
            a.default_value.as_deref(),
            a.expire_action.as_str()
        ),
        (
            ApprovalStatus::Pending,
            Some(PromptKind::Confirm),
            Some("no"),
            "default"
        )
    );
    assert_eq!(
        a.options_json
            .iter()
            .map(|o| o.value.as_str())
            .collect::<Vec<_>>(),
        ["yes", "no"]
    );
    assert_eq!(
        (
            a.request_fingerprint.as_ref(),
            a.prompt_fingerprint.as_ref()
        ),
        (
            Some(&who.request_fingerprint),
            Some(&req.prompt_fingerprint)
        )
    );
    assert_eq!(
        store.run(&who.tool_run_id).unwrap().unwrap().status,
        RunStatus::WaitingApproval
    );

    let out = store.decide(&a.approval_id, "y", &carol()).unwrap().value;
    let DecideOutcome::Decided(decided) = out else {
        panic!("not decided: {out:?}");
    };
    assert_eq!(
        (decided.status, decided.chosen_value.as_deref()),
        (ApprovalStatus::Approved, Some("yes"))
    );
    // Widened on purpose to any command line and directory, as before scopes existed.
    let remembered = store
        .remember(
            &a.tool_name,
            &req.prompt_fingerprint,
            &RememberScope::default(),
            "y",
            &a.approval_id,
            "carol",
        )
        .unwrap();
    assert_eq!(remembered.source_approval_id.as_ref(), Some(&a.approval_id));

    // The asking shim exits 90; a re-run of the command is answered by the decision…
    park(store, &who.tool_run_id);
    let again = start_command(store, &argv, cwd);
    let (used, value) = answer(ask(store, &again, &req));
    assert_eq!(
        (used.approval_id.as_str(), value.as_str()),
        (a.approval_id.as_str(), "yes")
    );
    assert_eq!(used.consumed_by.as_ref(), Some(&again.tool_run_id));
    // …and the same prompt of another command by the remembered decision.
    let other = start_command(store, &["./deploy.sh".into(), "--dry-run".into()], cwd);
    let (by_policy, value) = answer(ask(store, &other, &req));
    assert_eq!(value, "yes", "the policy's `y`, the confirm's yes");
    assert_eq!(
        by_policy.decision_channel,
        Some(format!("policy:{}", remembered.name))
    );
    assert_eq!(remembered.name, format!("remembered:{}", a.approval_id));
}

/// A first row as the embedded store keeps it: owned by the user who writes it.
fn owned(run: &ToolRun) -> ToolRun {
    run.stamped(
        &proc::user_name(proc::effective_uid()),
        Some(proc::effective_uid()),
    )
}

fn carol() -> Decider<'static> {
    Decider {
        by: "carol",
        channel: "cli",
        comment: None,
        version: None,
        groups: &[],
    }
}

/// The overdue approval expires with its default.
fn expires_the_overdue_one(store: &mut SqliteStore, exp: &Expected) {
    let overdue = exp.approval("overdue");
    assert!(
        overdue.is_overdue(&time::now_rfc3339()),
        "the clock is before the fixture's expiry ({:?})",
        overdue.expires_at
    );
    let done = WorkerStore::expire_due(store).unwrap();
    assert_eq!(
        done.value
            .iter()
            .map(|a| (
                a.approval_id.as_str(),
                a.status,
                a.chosen_value.as_deref(),
                a.decided_by.as_deref()
            ))
            .collect::<Vec<_>>(),
        [(
            overdue.approval_id.as_str(),
            ApprovalStatus::Expired,
            Some("n"),
            Some("system:expiry")
        )]
    );
    assert_eq!(done.effects.events.len(), 1);
    assert!(WorkerStore::expire_due(store).unwrap().value.is_empty());
}

/// Re-runs of the old commands meet the old decisions: the approved one answers its re-run
/// (once), the one a resume used does not, the pending one is taken over by a retry, the
/// remembered decision answers its prompt for another command, the rejected one ends its
/// re-run.
fn old_decisions_answer_reruns(store: &mut SqliteStore, exp: &Expected) {
    // The decision a resume already used does not answer again: the re-run asks anew.
    let resumed = exp.approval("parked_resumed");
    let who = rerun_of(store, exp.run("parked_resumed"), Some(resumed));
    let (asked, taken_over) = pending(ask(store, &who, &same_screen(resumed)));
    assert!(!taken_over);
    assert_ne!(asked.approval_id, resumed.approval_id);
    assert_eq!(asked.tool_run_id, who.tool_run_id);

    // A retry of the pending one, on the screen it was asked on (by the same tool), takes
    // it over from the parked run that asked it (a row from before v6 is compared by its
    // stored text, a later one by its digests).
    let was_pending = exp.approval("pending");
    let retry = rerun_of(store, exp.run("pending"), Some(was_pending));
    let (taken, taken_over) = pending(ask(store, &retry, &same_screen(was_pending)));
    assert!(taken_over);
    assert_eq!(
        (
            taken.approval_id.as_str(),
            taken.tool_run_id.as_str(),
            taken.status
        ),
        (
            was_pending.approval_id.as_str(),
            retry.tool_run_id.as_str(),
            ApprovalStatus::Pending
        )
    );
    let owner = store.run(&exp.run("pending").tool_run_id).unwrap().unwrap();
    assert_eq!(owner.status, RunStatus::Cancelled);
    assert!(
        owner
            .reason
            .as_deref()
            .is_some_and(|r| r.starts_with("superseded by a retry")),
        "{:?}",
        owner.reason
    );

    // The remembered decision answers that prompt of that tool for another command — up
    // to v5, when a remembered decision had no scope. From v6 it keeps the command line and
    // the directory it was made in, and answers there only: another command line, or the
    // same one in another directory, is asked.
    let approved = exp.approval("approved");
    let remembered = &exp.policies["remembered"];
    let approved_run = exp.run("approved");
    let cwd = approved_run.cwd.as_deref().unwrap_or("");
    let mut other = start_command(store, &["./migrate.sh".into(), "down".into()], cwd);
    other.tool_digest = approved.tool_digest.clone();
    assert_ne!(
        Some(&other.request_fingerprint),
        approved.request_fingerprint.as_ref()
    );
    if exp.scoped_policy() {
        let mut elsewhere = start_command(store, &approved_run.argv_json, "/home/ci/src/other");
        elsewhere.tool_digest = approved.tool_digest.clone();
        for who in [&other, &elsewhere] {
            let (asked, taken_over) = pending(ask(store, who, &same_screen(approved)));
            assert!(!taken_over);
            assert_eq!(
                (
                    asked.tool_run_id.as_str(),
                    asked.decision_channel.as_deref()
                ),
                (who.tool_run_id.as_str(), None),
                "out of the remembered decision's scope ({:?} in {:?})",
                remembered["argv_json"],
                remembered["cwd"]
            );
        }
    } else {
        let (by_policy, value) = answer(ask(store, &other, &same_screen(approved)));
        // The old policy's `y` is the confirm's `yes` (typed as `y`).
        assert_eq!(value, "yes");
        assert_ne!(by_policy.approval_id, approved.approval_id);
        assert_eq!(
            (
                by_policy.status,
                by_policy.decision_channel.clone(),
                by_policy.consumed_by.as_ref()
            ),
            (
                ApprovalStatus::Approved,
                Some(policy_channel(remembered)),
                Some(&other.tool_run_id)
            )
        );
    }

    // A prompt's decision is never handed to a re-run as AUTO_APPROVAL (it is typed at its
    // prompt), whatever the value or the command: the variable is for cooperative tools.
    let rerun = rerun_of(store, approved_run, Some(approved));
    for (who, value) in [(&rerun, "y"), (&rerun, "n"), (&other, "y")] {
        let refused = store
            .check_auto_approval(
                who,
                &approved.approval_id,
                value,
                Some(&approved_run.tool_run_id),
            )
            .unwrap()
            .value
            .expect_err("a prompt's decision is not a token");
        assert!(!refused.is_empty());
    }
    // The re-run is answered by the decision made before (from v6: on the same screen, by
    // the same tool), which it uses up; the run that asked is done.
    let (used, value) = answer(ask(store, &rerun, &same_screen(approved)));
    assert_eq!(
        (used.approval_id.as_str(), value.as_str()),
        (approved.approval_id.as_str(), "y")
    );
    assert_eq!(used.consumed_by.as_ref(), Some(&rerun.tool_run_id));
    assert_eq!(used.resumed_run_id.as_ref(), Some(&rerun.tool_run_id));
    let asked_first = store.run(&approved_run.tool_run_id).unwrap().unwrap();
    assert_eq!(
        (asked_first.status, asked_first.exit_code),
        (RunStatus::Completed, Some(90))
    );
    // Once: the next re-run is not answered by it (the remembered decision answers: the
    // same command line in the same directory is in its scope).
    let next = rerun_of(store, approved_run, Some(approved));
    let (by_policy, value) = answer(ask(store, &next, &same_screen(approved)));
    assert_eq!(value, "yes", "the old policy's `y`, the confirm's yes");
    assert_ne!(by_policy.approval_id, approved.approval_id);
    assert_eq!(by_policy.decision_channel, Some(policy_channel(remembered)));
    assert!(
        !store
            .consume(&approved.approval_id, &next.tool_run_id, "ci")
            .unwrap()
    );

    // The rejection ends its re-run, and the run that asked fails.
    let rejected = exp.approval("rejected");
    let rejected_run = exp.run("rejected");
    let who = rerun_of(store, rejected_run, Some(rejected));
    match ask(store, &who, &same_screen(rejected)) {
        PromptResolution::Rejected { approval } => {
            assert_eq!(approval.approval_id, rejected.approval_id);
            assert_eq!(approval.consumed_by.as_ref(), Some(&who.tool_run_id));
        }
        other => panic!("not rejected: {other:?}"),
    }
    assert_eq!(
        store
            .run(&rejected_run.tool_run_id)
            .unwrap()
            .unwrap()
            .status,
        RunStatus::Failed
    );

    // What the worker has left: the overdue run, answered by its expiry's default (and
    // v6's run parked on a decision nobody has re-run yet).
    assert_eq!(
        decided_parked(store),
        parked_with_decisions(exp, &["overdue"])
    );
}

/// v6: a decision answers only the screen it was given on. A re-run of the screen-gated
/// command (its resume: the same command, tool and user) that shows another screen at the
/// same prompt (`Plan: … one to destroy` where `none to destroy` was approved) is not
/// answered by it: a new question, which says what changed, and the decision stays unused.
fn a_changed_screen_is_asked_anew(store: &mut SqliteStore, exp: &Expected) {
    let gated = exp.approval("screen_gated");
    let who = rerun_of(store, exp.run("screen_gated"), Some(gated));
    let mut changed = same_screen(gated);
    changed.prompt.context = changed
        .prompt
        .context
        .replace("none to destroy", "one to destroy");
    assert_ne!(
        Some(fingerprint::seen(&changed.prompt)),
        gated.screen_digest,
        "the screen changed"
    );
    let (asked, taken_over) = pending(ask(store, &who, &changed));
    assert!(!taken_over);
    assert_ne!(asked.approval_id, gated.approval_id);
    assert_eq!(asked.tool_run_id, who.tool_run_id);
    let context = asked.context.as_deref().unwrap_or("");
    assert!(
        context.starts_with(&format!(
            "The screen changed since {} was decided (approved `y` by alice):\n",
            gated.approval_id
        )),
        "{context}"
    );
    assert!(
        context.contains("\n+ Plan: one to add, none to change, one to destroy.\n")
            && context.contains("\n- Plan: one to add, none to change, none to destroy.\n"),
        "{context}"
    );
    let kept = OperatorStore::approval(store, &gated.approval_id)
        .unwrap()
        .unwrap();
    assert_eq!(
        (kept.status, kept.consumed_at.as_deref()),
        (ApprovalStatus::Approved, None)
    );
}

/// The pending approval is decided and its decision consumed once, the decided ones refuse
/// another answer, a newer remembered decision replaces the old one.
fn takes_decisions(store: &mut SqliteStore, exp: &Expected) {
    let pending = &exp.approval("pending").approval_id;
    let out = store.decide(pending, "y", &carol()).unwrap().value;
    let DecideOutcome::Decided(decided) = out else {
        panic!("not decided: {out:?}");
    };
    assert_eq!(
        (decided.status, decided.chosen_value.as_deref()),
        (ApprovalStatus::Approved, Some("y"))
    );
    let read = OperatorStore::approval(store, pending).unwrap().unwrap();
    assert_eq!(read.decided_by.as_deref(), Some("carol"));
    assert_eq!(read.question, exp.approval("pending").question);
    // The worker's re-run uses it, once.
    let rerun = new_run(&exp.run("pending").tool_name);
    start(store, &rerun);
    let consumed = (
        store.consume(pending, &rerun.tool_run_id, "ci").unwrap(),
        store.consume(pending, &rerun.tool_run_id, "ci").unwrap(),
    );
    assert_eq!(consumed, (true, false));
    let used = OperatorStore::approval(store, pending).unwrap().unwrap();
    assert_eq!(used.consumed_by.as_ref(), Some(&rerun.tool_run_id));

    let approved = exp.approval("approved");
    let again = store
        .decide(&approved.approval_id, "y", &carol())
        .unwrap()
        .value;
    assert!(matches!(again, DecideOutcome::AlreadySame(_)), "{again:?}");
    let other = store
        .decide(&approved.approval_id, "n", &carol())
        .unwrap()
        .value;
    let DecideOutcome::Conflict(kept) = other else {
        panic!("not a conflict: {other:?}");
    };
    assert_eq!(kept.decided_by.as_deref(), Some(exp.rememberer()));

    let prompt = prompt_of(approved);
    let now = store
        .remember(
            &approved.tool_name,
            &prompt.prompt_fingerprint,
            &RememberScope::default(),
            "n",
            pending,
            "carol",
        )
        .unwrap();
    assert_eq!(
        (now.value.as_str(), now.created_by.as_str()),
        ("n", "carol")
    );
    // It answers from now on; the old one no longer does.
    let cwd = exp.run("approved").cwd.clone().unwrap_or_default();
    let who = start_command(store, &["./migrate.sh".into(), "redo".into()], &cwd);
    let (by_policy, value) = answer(ask(store, &who, &prompt));
    assert_eq!(value, "no", "the policy's `n`, the confirm's no");
    assert_eq!(
        by_policy.decision_channel,
        Some(format!("policy:{}", now.name))
    );
    // The old one is replaced — but a scoped one (v6) only by one of its own scope: it stays
    // in force for its command line in its directory.
    let old = &exp.policies["remembered"];
    assert_eq!(
        policy_enabled(store.paths(), policy_id(old)),
        exp.scoped_policy()
    );
    assert!(policy_enabled(store.paths(), &now.policy_id));
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

/// The spooled row: its file, and the row the file holds.
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

/// A fresh state dir whose new database (made as a shim makes it) holds `rows`, then the
/// old spool file in `STATE/spool/`, then the store opened as `monitor` opens it, which
/// replays the spool.
fn state_with_spool(rows: &[ToolRun]) -> (TempDir, StatePaths, SqliteStore) {
    let (tmp, paths) = fresh_state_dir();
    let mut shim = SqliteStore::create(paths.clone());
    RunnerStore::connect(&mut shim).unwrap();
    for r in rows {
        start(&mut shim, r);
    }
    drop(shim);
    let (file, _) = spooled_run();
    let dir = spool::dir(&paths);
    paths::create_private_dir(&dir).unwrap();
    let to = dir.join(file.file_name().unwrap());
    fs::copy(&file, &to).unwrap();
    fs::set_permissions(&to, fs::Permissions::from_mode(0o600)).unwrap();
    let store = open_store(&paths);
    (tmp, paths, store)
}

/// Its row never reached the database: opening the store inserts it whole.
#[test]
fn old_spool_file_lands_in_a_new_database() {
    let (_, run) = spooled_run();
    let (_tmp, paths, mut store) = state_with_spool(&[]);
    let run = owned(&run);
    assert_eq!(store.run(&run.tool_run_id).unwrap().as_ref(), Some(&run));
    assert_eq!((run.status, run.exit_code), (RunStatus::Failed, Some(1)));
    spool_is_empty(&paths);
    // Replayed by whoever opened the store.
    let rows = store.audit_of_run(&run.tool_run_id).unwrap();
    assert_eq!(
        rows.iter()
            .map(|r| (r.event.as_str(), r.actor.as_str()))
            .collect::<Vec<_>>(),
        [("tool_status_change", proc::current_user().as_str())]
    );
    chain_is_intact(&mut store, Some(1));
}

/// Its first row landed (running) and the final one was spooled: opening the store ends
/// the run as the spooled row says.
#[test]
fn old_spool_file_ends_its_running_row() {
    let (_, run) = spooled_run();
    let mut first = run.clone();
    first.status = RunStatus::Running;
    first.reason = None;
    first.exit_code = None;
    first.completed_at = None;
    first.updated_at = first.started_at.clone();
    let (_tmp, paths, mut store) = state_with_spool(&[first]);
    let got = store.run(&run.tool_run_id).unwrap().unwrap();
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
    spool_is_empty(&paths);
    chain_is_intact(&mut store, Some(2));
}

fn spool_is_empty(paths: &StatePaths) {
    let left: Vec<_> = fs::read_dir(spool::dir(paths))
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert!(left.is_empty(), "left in the spool: {left:?}");
}

// --- what an upgrade must not leave behind ----------------------------------------------

/// The schema of a database file as `sqlite_master` has it (auto-indexes have no SQL).
fn schema(paths: &StatePaths) -> Vec<(String, String, Option<String>)> {
    let conn = raw_file(paths);
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
/// 9bd4ae9), so a database cb9c46c took to v4 was never given it — until v5 (5bcc352).
/// v5–v8 were made by the last build of each version, which had the later edits of the v7
/// entry (`pipelines.dir`, 06d6fde) and the v8 entry (`pipelines.workers`, 5843f45;
/// `approvals.supersedes`, 84d9326): databases of the first v7 and v8 builds lack those
/// columns, and v10 repairs them (`databases_of_the_first_v6_v7_and_v8_builds_are_repaired`).
#[test]
fn every_old_database_migrates_to_the_schema_of_a_new_one() {
    let (_tmp, fresh) = fresh_state_dir();
    RunnerStore::connect(&mut SqliteStore::create(fresh.clone())).unwrap();
    let want = schema(&fresh);
    let mut differences = Vec::new();
    for version in 1..=9 {
        let (_tmp, paths) = open_fixture(version);
        drop(open_store(&paths));
        let got = schema(&paths);
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
/// the recent stalls, not as a live one (the live counts and the recent stalls tell the two
/// apart by `completed_at`): the row v1 wrote must count that way too, or the dashboard
/// shows a stall that ended long ago as live, for ever. v5 (5bcc352) repairs the row.
#[test]
fn a_v1_stall_killed_run_is_not_counted_live() {
    let (_tmp, paths) = open_fixture(1);
    let mut store = open_store(&paths);
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
    let counts = store.counts(SINCE_2026, Duration::ZERO).unwrap();
    let live: BTreeMap<&str, i64> = counts.live.iter().map(|(s, n)| (s.as_str(), *n)).collect();
    // Only the run whose shim was killed with -9 has not ended.
    assert_eq!(live, BTreeMap::from([("running", 1)]));
    assert_eq!(store.live_counts(Duration::ZERO).unwrap().live, counts.live);
    // cargo test (101) and npm ci (hard timeout) failed; the stall-killed fetch is counted
    // as a recent stall, apart from them.
    assert_eq!(counts.failed_recent, 2);
    assert_eq!(counts.stalled_recent, 1);
}

/// From v6 a run says which user it ran as, from v8 which identity the store recorded as
/// its owner; an execution (v8) says both. Opened as they are by another user than the one
/// who made them (`ci`, uid 1207), the rows read back as written, owners and all, and the
/// store treats them as it treats another user's now: a worker of this user does not claim
/// their decisions, a run of the same command by this user is not their resume (their
/// decision neither answers nor ends it: it is asked anew, and the decision stays theirs),
/// and this user does not drive their executions.
#[test]
fn runs_of_another_user_stay_theirs() {
    let (user, uid) = me();
    assert!(
        user != FIXTURE_USER && uid != FIXTURE_UID,
        "run as another user than the fixtures' own ({FIXTURE_USER}, uid {FIXTURE_UID})"
    );
    for version in 6..=9 {
        let (_tmp, paths) = open_fixture(version);
        let mut store = open_store(&paths);
        let exp = Expected::load(version);
        is_migrated(&mut store, &exp);
        reads_runs(&mut store, &exp);
        reads_approvals(&mut store, &exp);
        for (role, run) in &exp.runs {
            assert_eq!(run.uid(), Some(u64::from(FIXTURE_UID)), "v{version} {role}");
            let owner = (version >= 8).then_some(FIXTURE_USER);
            assert_eq!(run.owner.as_deref(), owner, "v{version} {role}");
        }

        let approved = exp.approval("approved");
        let why = match store.claim(&approved.approval_id, "worker:build-01:1:1") {
            Err(StoreError::Denied(why)) => why,
            other => panic!("v{version}: claimed another user's run: {other:?}"),
        };
        assert!(why.contains("not resumed"), "{why}");
        if version >= 8 {
            assert!(why.contains("it was started by ci, not by"), "{why}");
        } else {
            assert!(why.contains("1207"), "{why}");
        }

        let rejected = exp.approval("rejected");
        let who = rerun_of(&mut store, exp.run("rejected"), Some(rejected));
        let (asked, taken_over) = pending(ask(&mut store, &who, &same_screen(rejected)));
        assert!(!taken_over);
        assert_ne!(asked.approval_id, rejected.approval_id);
        let theirs = OperatorStore::approval(&mut store, &rejected.approval_id)
            .unwrap()
            .unwrap();
        assert_eq!(
            (
                theirs.consumed_at.as_deref(),
                theirs.resumed_run_id.as_deref()
            ),
            (None, None)
        );
        let run = store
            .run(&exp.run("rejected").tool_run_id)
            .unwrap()
            .unwrap();
        assert_eq!(run.status, RunStatus::WaitingApproval, "still parked");

        if version >= 7 {
            reads_pipelines(&mut store, &exp);
            for ex in exp.pipelines.values() {
                let not_ours = rules::execution_not_ours(ex, &user, uid);
                if version >= 8 {
                    assert!(
                        not_ours
                            .as_deref()
                            .is_some_and(|w| w.contains("it was started by ci")),
                        "{not_ours:?}"
                    );
                } else {
                    // Before owners were recorded, the embedded store's executions are
                    // its owner's, whoever that is.
                    assert_eq!(not_ours, None);
                }
            }
        }
        chain_is_intact(&mut store, None);
    }
}

/// Databases made by the first builds of v6 (5ba83ec: no `approvals.screen_digest`, no
/// `tool_digest`), v7 (6387bdf: no `pipelines.dir`) and v8 (3f8d96d: no
/// `pipelines.workers`, no `approvals.supersedes`), whose migrations were
/// changed after those builds shipped (`first-builds/`: their migrations as shipped, with
/// rows as they wrote them): the v10 repair adds what they lack, so they open, read back,
/// take writes, and end with the columns a new database has.
#[test]
fn databases_of_the_first_v6_v7_and_v8_builds_are_repaired() {
    use hr_shared::store::pipelines::{self, ExecutionState};
    // Each build's own pipeline columns beyond v7's first ones, their values, and the
    // directory the execution then reads back with.
    // (v6 had no pipelines.)
    for (file, pipeline) in [
        ("v6-5ba83ec.sql", None),
        ("v7-6387bdf.sql", Some(("", "", ""))),
        (
            "v8-3f8d96d.sql",
            Some((
                ", dir, owner, uid, definition_digest",
                ", '/srv/old', NULL, NULL, NULL",
                "/srv/old",
            )),
        ),
    ] {
        let (_tmp, paths) = fresh_state_dir();
        let sql = fs::read_to_string(fixtures().join("first-builds").join(file))
            .unwrap_or_else(|e| panic!("{file}: {e}"));
        {
            let conn = Connection::open(&paths.db).expect("create");
            for (i, entry) in sql.split("\n-- user_version ").skip(1).enumerate() {
                let (_, body) = entry.split_once('\n').expect("a marker line");
                conn.execute_batch(body)
                    .unwrap_or_else(|e| panic!("{file} v{}: {e}", i + 1));
                conn.pragma_update(None, "user_version", i as i64 + 1)
                    .unwrap();
            }
            conn.execute(
                "INSERT INTO tool_runs (tool_run_id, tool_name, status, started_at, argv_json,
                     updated_at, exit_code, completed_at)
                 VALUES ('TR-01JFIRSTBUILD0000000000000', 'rm', 'completed',
                     '2026-11-24T10:00:00.000Z', '[\"rm\",\"-i\",\"a\"]',
                     '2026-11-24T10:00:01.000Z', 0, '2026-11-24T10:00:01.000Z')",
                [],
            )
            .unwrap();
            conn.execute(
                "INSERT INTO approvals (approval_id, tool_run_id, tool_name, question,
                     options_json, status, created_at, expire_action)
                 VALUES ('AP-01JFIRSTBUILD0000000000000', 'TR-01JFIRSTBUILD0000000000000',
                     'rm', 'remove a?', '[]', 'pending', '2026-11-24T10:00:00.500Z', 'reject')",
                [],
            )
            .unwrap();
            if let Some((more_columns, more_values, _)) = pipeline {
                conn.execute(
                    &format!(
                        "INSERT INTO pipelines (execution_id, name, definition, vars, steps, status,
                             created_at, updated_at, version{more_columns})
                         VALUES ('EX-first', 'deploy', '{{}}', '{{}}', '[]', 'running',
                             '2026-11-24T10:00:00.000Z', '2026-11-24T10:00:00.000Z', 1{more_values})"
                    ),
                    [],
                )
                .unwrap();
            }
        }
        fs::set_permissions(&paths.db, fs::Permissions::from_mode(0o600)).unwrap();

        let mut store = open_store(&paths);
        let run = OperatorStore::run(&mut store, "TR-01JFIRSTBUILD0000000000000")
            .expect("read the run")
            .expect("the run");
        assert_eq!(run.argv_json, ["rm", "-i", "a"], "{file}");
        let approval = OperatorStore::approval(&mut store, "AP-01JFIRSTBUILD0000000000000")
            .expect("read the approval")
            .expect("the approval");
        assert_eq!(
            (approval.status, approval.supersedes),
            (ApprovalStatus::Pending, None),
            "{file}"
        );
        if let Some((_, _, dir)) = pipeline {
            let mut pipes = pipelines::for_store(&paths).expect("the pipelines");
            let ex = pipes
                .pipeline("EX-first")
                .expect("read the execution")
                .expect("the execution");
            assert_eq!(
                (ex.dir.as_str(), ex.status, ex.workers.len()),
                (dir, ExecutionState::Running, 0),
                "{file}"
            );
            // It takes writes to what it lacked.
            let mut moved = ex.clone();
            moved.workers = vec!["ops".into()];
            moved.dir = "/srv".into();
            assert!(pipes.pipeline_swap(&moved).expect("swap"), "{file}");
        }

        // The columns of a new database, in a new database's order for what it shares.
        let (_fresh_tmp, fresh) = fresh_state_dir();
        store_runner(&fresh);
        let columns = |db: &Path, table: &str| -> std::collections::BTreeSet<String> {
            let c = Connection::open_with_flags(db, OpenFlags::SQLITE_OPEN_READ_ONLY).unwrap();
            let mut st = c
                .prepare(&format!("SELECT name FROM pragma_table_info('{table}')"))
                .unwrap();
            st.query_map([], |r| r.get::<_, String>(0))
                .unwrap()
                .map(Result::unwrap)
                .collect()
        };
        for table in ["tool_runs", "approvals", "pipelines", "policies", "events"] {
            assert_eq!(
                columns(&paths.db, table),
                columns(&fresh.db, table),
                "{file}: {table}"
            );
        }
    }
}

/// A new, empty store in `paths`, as the first shim makes it.
fn store_runner(paths: &StatePaths) {
    let mut s = hr_shared::store::runner(paths);
    s.connect().expect("create the store");
}
