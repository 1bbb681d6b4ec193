//! The store contract: what every implementation of [`RunnerStore`] and [`OperatorStore`]
//! must do, as cases generic over a [`StoreUnderTest`] factory. `contract_tests!(name,
//! Factory)` instantiates every case as `mod name { #[test] fn case() … }`.
//!
//! The cases reach the store only through the two traits (rows are seeded the way a shim
//! writes them: `record` with `RunWrite::Start`, `resolve_prompt`, `cooperative`), so a new
//! store passes them unchanged; only its factory is new. Each case gets a store of its own
//! and, after it, the store's audit chain must verify with no decision left unrecorded.

use hr_shared::approvals::{Approval, DecideOutcome, Decider, PromptKind};
use hr_shared::config::OnExpire;
use hr_shared::event::{ApprovalOption, EventBody, LogEvent};
use hr_shared::fingerprint;
use hr_shared::id;
use hr_shared::prompt::Prompt;
use hr_shared::rules::{HostFacts, Liveness};
use hr_shared::runs::{StatusChange, ToolRun};
use hr_shared::status::RunStatus;
use hr_shared::store::{
    AdminStore, Asker, Done, OperatorStore, PromptRequest, PromptResolution, Recorded, Replace,
    RunWrite, RunnerStore,
};
use hr_shared::time;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, SystemTime};

pub mod chains;
pub mod identity;
pub mod operator;
// Only the stores that keep pipelines run these (not the runner API's suite).
#[allow(dead_code)]
pub mod pipelines;
pub mod regressions;
pub mod reviews;
pub mod runner;

/// One kind of store under test: how to get an empty one and sessions on it.
///
/// To put a new store under the contract, implement this for a factory type and add
/// `contract_tests!(its_name, ItsFactory);` to `store_contract.rs`.
pub trait StoreUnderTest: Sized + Sync {
    /// A new, empty store of its own, shared with no other `fresh()` (cases run in
    /// parallel); dropping the value removes it.
    fn fresh() -> Self;

    /// A new runner session on this store: a connection of its own, as another shim
    /// process would have. Later sessions must see what earlier ones committed.
    fn runner(&self) -> Box<dyn RunnerStore>;

    /// A new operator session on this store (the `monitor`'s), a connection of its own.
    fn operator(&self) -> Box<dyn AdminStore>;

    /// A worker's session (`monitor worker`): the identity that started the runner's runs
    /// (the embedded store's owner, the runner's own login), the only one that may claim
    /// them to run again. The default is [`StoreUnderTest::operator`] (one identity).
    fn worker(&self) -> Box<dyn AdminStore> {
        self.operator()
    }

    /// A runner session of another identity than [`StoreUnderTest::runner`]'s (another
    /// login, another token, a session writing for another user): what it starts is never
    /// claimed by [`StoreUnderTest::worker`].
    fn stranger(&self) -> Box<dyn RunnerStore>;

    /// A pipeline runner's session on this store, as the runner's identity (what
    /// `monitor pipeline run` opens), for a store under `pipeline_contract_tests!`; `None`
    /// where the store keeps no pipelines (a server's runner API).
    #[allow(dead_code)]
    fn pipelines(&self) -> Option<Box<dyn hr_shared::store::pipelines::PipelineStore>> {
        None
    }

    /// Whether the runner's runs may be resumed on the store's side at all. A server's
    /// runner API says no: its runners' runs are run again on their own machines.
    fn resumable(&self) -> bool {
        true
    }

    /// An operator session on a store of this kind that is not there (no database, no
    /// server): `connect` must fail.
    fn absent_operator(&self) -> Box<dyn AdminStore>;

    /// Replaces the store under its open sessions with a new, empty one (what `replaced`
    /// reports). `false`: this kind of store cannot be replaced under a session, and the
    /// `replaced` case only checks that nothing is reported.
    fn replace_with_empty(&self) -> bool;

    /// Who a decision, cancellation or remembered decision is recorded as when the caller
    /// says it is `claimed`: that name on a store that trusts its one user (SQLite); the
    /// authenticated login on a store that authenticates (PostgreSQL), whatever the client
    /// says.
    fn recorded_as(&self, claimed: &str) -> String {
        claimed.to_owned()
    }

    /// Whether `keep_for_later` keeps a row where a later operator session finds it. A
    /// store that keeps rows in the host's spool instead (delivered by the host's next
    /// runner session) says no, and must return false from `keep_for_later`.
    fn keeps_rows_for_later(&self) -> bool {
        true
    }

    /// Whether an approval asked with `on_expire = default` is answered with its default
    /// when it expires. A store whose runners are not trusted (PostgreSQL) expires every
    /// approval as a rejection: a default nobody decided could be planted by a tool.
    fn honours_expiry_defaults(&self) -> bool {
        true
    }

    /// Whether a runner's own config's policies (`PromptRequest::policies`) answer its
    /// prompts. The runner API does not take them from its (untrusted) runners.
    fn takes_runner_policies(&self) -> bool {
        true
    }

    /// Who the store records as the owner of the runs a [`StoreUnderTest::runner`]
    /// session starts (DESIGN §14: the identity it authenticated, never the row's word).
    fn runner_identity(&self) -> String;

    /// Whether the store records the writer's own uid as `metadata.uid` (the embedded
    /// store, whose only writer is its owner).
    fn stamps_uid(&self) -> bool {
        false
    }

    /// A run's first row as the store keeps it: owned by the runner's identity. The runner
    /// API marks its runners' rows as theirs (`metadata.runner`) and drops what would hand
    /// them to a worker.
    fn stored_row(&self, row: ToolRun) -> ToolRun {
        let uid = self.stamps_uid().then(hr_shared::proc::effective_uid);
        row.stamped(&self.runner_identity(), uid)
    }

    /// A person who reviews approvals: an operator session as `name`, a member of
    /// `groups` (names as [`StoreUnderTest::group`] gives them). The embedded store and a
    /// server's own store take the decider's name and groups from the front-end that
    /// authenticated it; PostgreSQL from a login of that name and its roles.
    fn reviewer(&self, name: &str, groups: &[&str]) -> Reviewer {
        Reviewer {
            op: self.operator(),
            by: name.to_owned(),
            groups: groups.iter().map(|g| self.group(g)).collect(),
            recorded: name.to_owned(),
        }
    }

    /// The name of reviewer group `name` on this store.
    fn group(&self, name: &str) -> String {
        name.to_owned()
    }

    /// A command's request fingerprint as the store keeps it (the runner API keeps each
    /// token's apart).
    fn stored_fingerprint(&self, fingerprint: &str) -> String {
        fingerprint.to_owned()
    }
}

/// A reviewer's session, and who it decides as.
pub struct Reviewer {
    pub op: Box<dyn AdminStore>,
    pub by: String,
    pub groups: Vec<String>,
    /// What the store records as the reviewer.
    pub recorded: String,
}

/// [`StoreUnderTest::recorded_as`], as compared with `decided_by`.
pub fn who<S: StoreUnderTest>(s: &S, claimed: &str) -> Option<String> {
    Some(s.recorded_as(claimed))
}

/// Runs one case on a fresh store, then checks the store's audit chain.
pub fn run_case<S: StoreUnderTest>(case: fn(&S)) {
    let store = S::fresh();
    case(&store);
    audit_intact(&store);
}

/// The audit chain verifies, holds rows, and every decision has its audit row.
pub fn audit_intact<S: StoreUnderTest>(s: &S) {
    let mut op = s.operator();
    let report = op.verify_audit().expect("verify_audit");
    assert!(report.intact(), "audit chain broken: {report:?}");
    assert!(report.rows > 0, "no audit rows after the case: {report:?}");
    assert_eq!(
        op.unrecorded_decisions().expect("unrecorded_decisions"),
        Vec::<(String, String)>::new(),
        "decisions without an audit row"
    );
}

/// Instantiates every contract case for a store factory.
macro_rules! contract_tests {
    ($name:ident, $store:ty) => {
        mod $name {
            #[allow(unused_imports)]
            use super::*;
            contract_cases!($store, runner:
                connect_then_work,
                record_start_touch_pid_status_end_in_batches,
                start_with_row_may_exist_does_not_insert_twice,
                replace_live_and_any_but_cancelled,
                cancelled_write_records_the_exit_code,
                consume_and_release_answers,
                abandon_expires_pending_approvals,
                withdraw_closes_one_pending_question,
                keep_for_later_lands_in_a_later_session,
                kept_row_landed_discards_the_kept_row,
                replaced_is_reported_once,
                resolve_prompt_creates_a_pending_approval,
                a_decision_answers_one_rerun_once,
                a_rejection_ends_the_rerun,
                a_policy_answers_with_its_channel,
                takeover_of_a_parked_runs_approval,
                no_takeover_from_a_supervised_twin,
                takeover_from_a_run_whose_shim_is_gone,
                cooperative_pending_then_already_decided,
                cooperative_keeps_a_safe_approval_id_once,
                check_auto_approval_cases,
                runner_expire_due,
                change_mark_moves_after_another_sessions_write,
                two_reruns_race_for_one_decision,
                two_retries_race_for_one_takeover,
                free_text_decision_answers_a_text_prompt,
            );
            contract_cases!($store, operator:
                run_and_runs_with_filters,
                supervised_runs_are_live_and_unended,
                export_runs_json_equals_runs,
                approval_and_approvals_with_filters,
                pending_approvals_are_listed_oldest_first,
                decide_first_writer_wins,
                two_deciders_race_on_two_sessions,
                cancel_marks_rejects_and_refuses,
                reconcile_with_host_facts,
                operator_expire_due,
                decided_parked_lists_parked_runs_with_decisions,
                claim_two_workers_one_wins,
                take_over_claim_and_set_resumed_run,
                resumes_of_oldest_first,
                close_run_only_from_the_given_statuses,
                consume_is_single_use,
                gc_preview_and_gc,
                remembered_decision_answers_a_later_prompt,
                audit_of_run_tells_the_story,
                counts_and_live_counts,
                health_reports_a_supported_schema,
                ids_by_prefix,
                audit_after_is_a_resumable_feed,
            );
            contract_cases!($store, identity:
                a_changed_screen_supersedes_the_approval,
                the_same_screen_keeps_the_approval_as_it_was,
                a_decision_on_another_version_decides_nothing,
                a_run_started_by_another_identity_is_never_claimed,
            );
            contract_cases!($store, chains:
                a_decision_goes_to_its_resume_not_to_a_separate_run,
                a_chain_resume_gets_every_earlier_answer,
                a_resume_that_stops_elsewhere_spends_the_decision,
                a_resume_that_ends_without_the_prompt_spends_the_decision,
                a_resume_that_fails_to_start_leaves_the_decision,
                a_run_started_before_the_decision_is_not_its_resume,
                a_claimed_decision_goes_only_to_the_workers_resume,
                cancelling_a_parked_chain_spends_its_decisions,
                a_released_answer_stays_with_its_run,
                gc_keeps_what_a_live_chain_needs,
            );
            contract_cases!($store, reviews:
                two_distinct_people_approve,
                never_the_runs_own_identity_and_one_rejection_ends_it,
                a_group_admits_only_its_members,
                a_wait_timer_holds_the_decision,
                cancel_closes_what_needs_reviewers_and_what_is_held,
                nobody_answers_what_needs_people,
            );
            contract_cases!($store, regressions:
                returned_approval_is_the_stored_one,
                a_supervised_twins_decision_is_not_taken,
                cancel_reports_the_expiry_it_causes,
                a_cancelled_runs_rejection_does_not_answer_a_retry,
            );
        }
    };
}

/// The cases for a store that keeps pipelines (the embedded store, PostgreSQL; the runner
/// API keeps none): `pipeline_contract_tests!(name, Factory)`, beside `contract_tests!`.
#[allow(unused_macros)]
macro_rules! pipeline_contract_tests {
    ($name:ident, $store:ty) => {
        mod $name {
            #[allow(unused_imports)]
            use super::*;
            contract_cases!($store, pipelines:
                a_human_step_passes_only_with_a_persons_approval,
            );
        }
    };
}

/// `#[test]` functions for the named cases of `crate::contract::$module`.
macro_rules! contract_cases {
    ($store:ty, $module:ident: $($case:ident),* $(,)?) => {
        $(
            #[test]
            fn $case() {
                $crate::contract::run_case::<$store>($crate::contract::$module::$case::<$store>);
            }
        )*
    };
}

/// Host `h` (the host of `hr_shared::testing::run` rows), where only the listed shim pids
/// run (as the same process, or reused by another one); every other pid is gone.
#[derive(Debug, Default, Clone)]
pub struct FakeHost {
    pub alive: Vec<i64>,
    pub reused: Vec<i64>,
}

impl FakeHost {
    /// A host where these shims run.
    pub fn alive(pids: &[i64]) -> Self {
        FakeHost {
            alive: pids.to_vec(),
            reused: Vec::new(),
        }
    }
}

impl HostFacts for FakeHost {
    fn host(&self) -> &str {
        "h"
    }

    fn process(&self, pid: i32, _start_time: Option<u64>) -> Liveness {
        let pid = i64::from(pid);
        if self.alive.contains(&pid) {
            Liveness::Same
        } else if self.reused.contains(&pid) {
            Liveness::Reused
        } else {
            Liveness::Gone
        }
    }
}

/// A distinct shim pid for each run, so a [`FakeHost`] can tell them apart.
fn next_shim_pid() -> i64 {
    static NEXT: AtomicI64 = AtomicI64::new(20_000);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// A command: tool, argv, cwd. Runs of the same command share a request fingerprint.
#[derive(Debug, Clone)]
pub struct Cmd {
    pub tool: String,
    pub argv: Vec<String>,
    pub cwd: String,
}

impl Cmd {
    pub fn new(tool: &str, args: &[&str]) -> Cmd {
        let mut argv = vec![tool.to_owned()];
        argv.extend(args.iter().map(|a| (*a).to_owned()));
        Cmd {
            tool: tool.to_owned(),
            argv,
            cwd: "/work/project".to_owned(),
        }
    }

    pub fn fingerprint(&self) -> String {
        fingerprint::request(&self.tool, &self.argv, &self.cwd)
    }

    /// A new run of this command (a fresh id and shim pid) with `status`, started now.
    pub fn row(&self, status: RunStatus) -> ToolRun {
        let mut row = hr_shared::testing::run(&id::new_run_id(), &self.tool, status);
        row.argv_json = self.argv.clone();
        row.cwd = Some(self.cwd.clone());
        row.shim_pid = Some(next_shim_pid());
        row
    }
}

/// `n` new run ids in creation order (ids made in the same millisecond are not).
pub fn ordered_run_ids(n: usize) -> Vec<String> {
    let mut ids: Vec<String> = (0..n).map(|_| id::new_run_id()).collect();
    ids.sort();
    ids
}

/// One shim: a runner session of its own on its run.
pub struct Shim {
    pub store: Box<dyn RunnerStore>,
    pub run: ToolRun,
    pub who: Asker,
}

impl Shim {
    /// A shim for `row` (a run of `cmd`) that has not written anything yet.
    pub fn new<S: StoreUnderTest>(s: &S, cmd: &Cmd, row: ToolRun) -> Shim {
        let who = Asker {
            tool_run_id: row.tool_run_id.clone(),
            tool: cmd.tool.clone(),
            execution_id: row.execution_id.clone().unwrap_or_default(),
            request_fingerprint: cmd.fingerprint(),
            argv: cmd.argv.clone(),
            cwd: cmd.cwd.clone(),
            tool_digest: None,
            actor: "shim-user".to_owned(),
            review: Default::default(),
        };
        Shim {
            store: s.runner(),
            run: row,
            who,
        }
    }

    /// A new running run of `cmd`, its row recorded.
    pub fn start<S: StoreUnderTest>(s: &S, cmd: &Cmd) -> Shim {
        Shim::start_row(s, cmd, cmd.row(RunStatus::Running))
    }

    /// The run `monitor worker` starts to resume parked run `parked` (a run of `cmd`): its
    /// row names the run it resumes (`resumed_from`).
    pub fn resume_of<S: StoreUnderTest>(s: &S, cmd: &Cmd, parked: &str) -> Shim {
        let mut row = cmd.row(RunStatus::Running);
        row.resumed_from = Some(parked.to_owned());
        Shim::start_row(s, cmd, row)
    }

    /// `row` (a run of `cmd`) recorded as it is.
    pub fn start_row<S: StoreUnderTest>(s: &S, cmd: &Cmd, row: ToolRun) -> Shim {
        let mut shim = Shim::new(s, cmd, row);
        let done = shim.write(vec![RunWrite::Start(Box::new(shim.run.clone()))]);
        assert_eq!(
            done.value,
            Recorded {
                inserted: true,
                cancelled: false
            }
        );
        assert!(done.effects.events.is_empty(), "{:?}", done.effects.events);
        shim
    }

    pub fn id(&self) -> &str {
        &self.run.tool_run_id
    }

    /// Records a batch for this run.
    pub fn write(&mut self, writes: Vec<RunWrite>) -> Done<Recorded> {
        let id = self.run.tool_run_id.clone();
        self.store
            .record(&id, &writes, "shim-user", false)
            .expect("record")
    }

    /// Asks `req` on a host where this shim is alive (and no other).
    pub fn ask(&mut self, req: &PromptRequest) -> Done<PromptResolution> {
        let host = FakeHost::alive(&[self.run.shim_pid.unwrap_or_default()]);
        self.ask_on(req, &host)
    }

    pub fn ask_on(&mut self, req: &PromptRequest, host: &dyn HostFacts) -> Done<PromptResolution> {
        self.store
            .resolve_prompt(&self.who, req, host)
            .expect("resolve_prompt")
    }

    /// Asks and expects a new pending approval.
    pub fn ask_pending(&mut self, req: &PromptRequest) -> Approval {
        match self.ask(req).value {
            PromptResolution::Pending {
                approval,
                taken_over: false,
            } => *approval,
            other => panic!("expected a new pending approval, got {other:?}"),
        }
    }

    /// Exit mode: the shim gives back what it used and parks its run (exit 90).
    pub fn park(&mut self) {
        self.write(vec![
            RunWrite::Release(None),
            RunWrite::Status(parked(), Replace::AnyButCancelled),
        ]);
    }

    /// The shim's final word: `status` with `exit_code`, then its pending approvals closed.
    pub fn end(&mut self, status: RunStatus, exit_code: i32) -> Done<Recorded> {
        let change = StatusChange {
            exit_code: Some(exit_code),
            at: Some(time::now_rfc3339()),
            ..StatusChange::to(status, Some(format!("exited with code {exit_code}")))
        };
        self.write(vec![
            RunWrite::Status(change, Replace::AnyButCancelled),
            RunWrite::Abandon(format!(
                "the run ended before a decision (exited with code {exit_code})"
            )),
        ])
    }
}

/// The change that parks a run on an approval (exit mode, exit 90).
pub fn parked() -> StatusChange {
    StatusChange {
        exit_code: Some(90),
        finished: false,
        at: Some(time::now_rfc3339()),
        ..StatusChange::to(
            RunStatus::WaitingApproval,
            Some("waiting for an approval (exit mode)".into()),
        )
    }
}

/// The prompt line of [`yes_no`].
pub const RM_LINE: &str = "rm: remove regular file 'a.txt'?";

/// `rm -i`'s question as the prompt matcher gives it: y/n with keys, default n; asked with
/// a TTL of one hour, rejected on expiry.
pub fn yes_no(tool: &str) -> PromptRequest {
    let opt = |v: &str, l: &str| ApprovalOption {
        value: v.into(),
        label: l.into(),
        keys: Some(format!("{v}\r")),
    };
    PromptRequest {
        prompt: Prompt {
            kind: PromptKind::Choice,
            secret: false,
            rule: "builtin:rm".into(),
            question: RM_LINE.into(),
            prompt_line: RM_LINE.into(),
            context: "$ rm -i a.txt\nrm: remove regular file 'a.txt'?".into(),
            options: vec![opt("y", "Yes"), opt("n", "No")],
            default: Some("n".into()),
            allows_text: false,
            alternative: Some("rm -f".into()),
            select: None,
        },
        prompt_fingerprint: fingerprint::prompt(tool, RM_LINE),
        policies: Vec::new(),
        ttl: Some(Duration::from_secs(3600)),
        on_expire: OnExpire::Reject,
    }
}

/// A TTL short enough to wait out, long enough for a case to set up its other rows first.
pub const SHORT_TTL: Duration = Duration::from_millis(1000);

/// Waits until approvals asked with [`SHORT_TTL`] are overdue.
pub fn wait_out_short_ttl() {
    std::thread::sleep(SHORT_TTL + Duration::from_millis(100));
}

/// [`yes_no`] with another TTL and expiry action.
pub fn yes_no_expiring(tool: &str, ttl: Duration, on_expire: OnExpire) -> PromptRequest {
    PromptRequest {
        ttl: Some(ttl),
        on_expire,
        ..yes_no(tool)
    }
}

/// Claims `approval_id` for resuming as a worker of the runner's own identity would
/// ([`StoreUnderTest::worker`]): whether it won. On a store whose runner runs are not
/// resumed on its side, the claim must be refused, naming whose run it is (then false).
pub fn worker_claim<S: StoreUnderTest>(s: &S, approval_id: &str, worker: &str) -> bool {
    match s.worker().claim(approval_id, worker) {
        Ok(won) => {
            assert!(s.resumable(), "claimed a run no worker here may run again");
            won
        }
        Err(hr_shared::store::StoreError::Denied(why)) if !s.resumable() => {
            assert!(why.contains("not resumed"), "{why}");
            false
        }
        Err(e) => panic!("claim {approval_id}: {e}"),
    }
}

pub fn decider(by: &str) -> Decider<'_> {
    Decider {
        by,
        channel: "cli",
        comment: None,
        version: None,
        groups: &[],
    }
}

/// Decides and expects it decided now.
pub fn decide(op: &mut dyn OperatorStore, approval_id: &str, value: &str, by: &str) -> Approval {
    match op
        .decide(approval_id, value, &decider(by))
        .expect("decide")
        .value
    {
        DecideOutcome::Decided(a) => *a,
        other => panic!("expected Decided, got {other:?}"),
    }
}

/// The run as the store has it now.
pub fn run_now(op: &mut dyn OperatorStore, id: &str) -> ToolRun {
    op.run(id)
        .expect("run")
        .unwrap_or_else(|| panic!("no run {id}"))
}

/// The approval as the store has it now.
pub fn approval_now(op: &mut dyn OperatorStore, id: &str) -> Approval {
    op.approval(id)
        .expect("approval")
        .unwrap_or_else(|| panic!("no approval {id}"))
}

/// The `event` names of log events.
pub fn names(events: &[LogEvent]) -> Vec<&'static str> {
    events.iter().map(|e| e.body.name()).collect()
}

/// The `tool_status_change` events about run `id`: (status, previous).
pub fn status_changes(events: &[LogEvent], id: &str) -> Vec<(RunStatus, Option<RunStatus>)> {
    events
        .iter()
        .filter(|e| e.tool_run_id == id)
        .filter_map(|e| match &e.body {
            EventBody::ToolStatusChange {
                status,
                previous_status,
                ..
            } => Some((*status, *previous_status)),
            _ => None,
        })
        .collect()
}

/// The `approval_status_change` events: (approval id, status, decided_by).
pub fn approval_changes(
    events: &[LogEvent],
) -> Vec<(String, hr_shared::status::ApprovalStatus, Option<String>)> {
    events
        .iter()
        .filter_map(|e| match &e.body {
            EventBody::ApprovalStatusChange {
                approval_id,
                status,
                decided_by,
                ..
            } => Some((approval_id.clone(), *status, decided_by.clone())),
            _ => None,
        })
        .collect()
}

/// An RFC 3339 stamp `secs` from now (negative: in the past).
pub fn stamp(secs: i64) -> String {
    let now = SystemTime::now();
    let t = if secs >= 0 {
        now + Duration::from_secs(secs as u64)
    } else {
        now - Duration::from_secs(secs.unsigned_abs())
    };
    time::to_rfc3339(t)
}

/// The values of an approval's options.
pub fn option_values(a: &Approval) -> Vec<&str> {
    a.options_json.iter().map(|o| o.value.as_str()).collect()
}

/// Approval ids of a list.
pub fn approval_ids(list: &[Approval]) -> Vec<&str> {
    list.iter().map(|a| a.approval_id.as_str()).collect()
}

/// Run ids of a list.
pub fn run_ids(list: &[ToolRun]) -> Vec<&str> {
    list.iter().map(|r| r.tool_run_id.as_str()).collect()
}
