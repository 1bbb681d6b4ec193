//! The resume worker. Each pass: reconcile (vanished shims, expiry), then act on parked
//! runs (exit mode, exit 90) whose approval has been decided:
//!
//! * rejected, or expired without an answer → the waiting run becomes `failed`;
//! * approved (or expired with the default) → the approval is claimed atomically (of two
//!   workers exactly one wins) and the stored command is re-run in its stored directory
//!   through `headless-run`, with `HEADLESS_RUN_APPROVAL_ID` and `HEADLESS_RUN_RESUMED_FROM`
//!   set (and, for a cooperative tool's request only, `AUTO_APPROVAL`, a single-use token
//!   its shim checks against this claim). The re-run shim answers the prompt itself,
//!   consumes the approval and closes the waiting run; when the re-run ends without
//!   reaching the prompt, the worker closes the waiting run from the re-run's exit code.
//!
//! A re-run gets the environment its run had when it asked; from the worker's own
//! environment it gets what was withheld then (secret-looking variables, never stored)
//! where the worker has it, its store (`HEADLESS_RUN_HOME`, and `HEADLESS_RUN_DB` with the
//! worker's PostgreSQL login written in) and the user's config file. A relative command
//! (`./deploy.sh`) is checked and run against the run's directory.
//!
//! Children are never waited for inside a pass: they run in their own process group (an
//! operator's Ctrl-C to the worker does not reach the tools) and are reaped with
//! `try_wait` on later passes. A failure to start one (exec error, or `headless-run`
//! exiting 125/126/127 at once, before the prompt) is retried [`SPAWN_RETRIES`] times,
//! then the waiting run fails.
//!
//! On the PostgreSQL store the worker's loop also relays the server's notifications to the
//! waiters of its state dir ([`start_relay`]): one `LISTEN` connection per host and user
//! instead of one per waiter.

use hr_shared::approvals::{Approval, PromptKind};
use hr_shared::control::{self, ReconcileReport};
use hr_shared::db::StoreError;
use hr_shared::event::LogEvent;
use hr_shared::exit::RunOutcome;
use hr_shared::mode::{
    ENV_APPROVAL_ID, ENV_AUTO_APPROVAL, ENV_EXECUTION_ID, ENV_RESUME_ENV, ENV_RESUMED_FROM,
    ENV_TOOL_RUN_ID, ResumeEnv, SavedEnvironment,
};
use hr_shared::paths::StatePaths;
use hr_shared::resume::{self, ParkedRun};
use hr_shared::rules::{self, LocalHost, ResumeVerdict};
use hr_shared::runs::{StatusChange, ToolRun};
use hr_shared::sanitize::sanitize_line;
use hr_shared::status::{ApprovalStatus, RunStatus};
use hr_shared::store::{self, AdminStore, OperatorStore, StoreResult};
use hr_shared::time;
use std::io::Write as _;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How many times a pipeline's resume that fails is tried before the worker leaves it, and
/// how long it waits more after each failure.
const PIPELINE_TRIES: u32 = 5;
const PIPELINE_BACKOFF: Duration = Duration::from_secs(10);

/// How many times a resume that failed to start is tried again before the run fails.
pub const SPAWN_RETRIES: u32 = 3;

/// A re-run ending with one of these codes this soon, before it reached the prompt, is a
/// failure to start (the shim itself, or the tool not executable / not found).
const SPAWN_FAILURE_CODES: [i32; 3] = [125, 126, 127];
const SPAWN_FAILURE_WINDOW: Duration = Duration::from_secs(5);

/// How often a worker on the PostgreSQL store looks again whether its login is shared.
const SHARED_LOOK: Duration = Duration::from_secs(30);

/// A claim older than this whose worker is gone may be taken over.
const STALE_CLAIM: Duration = Duration::from_secs(10);

/// The shim's exit code for a rejected or expired approval: recorded on a waiting run the
/// worker fails for that reason.
const REJECTED_EXIT: i32 = hr_shared::exit::shim::REJECTED as i32;

/// Whether this worker relays the server's notifications to its state dir's waiters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Relay {
    /// It holds the relay lock and listens.
    Relaying,
    /// Another process of the state dir holds it; this one takes over when it stops.
    Standby,
}

/// On the PostgreSQL store: starts the relay of the server's notifications to the waiters
/// of this state dir (`hr_shared::store::relay`), on a thread of its own. The thread holds
/// the state dir's relay lock — taken here at once, or, when another worker holds it, as
/// soon as that one stops — and with it one connection that `LISTEN`s on
/// `HEADLESS_RUN_LISTEN_DB` (else `HEADLESS_RUN_DB`), writing the bell file on every
/// notification and once after each (re)connect. It runs until the process ends, whose
/// lock the kernel then releases. `Ok(None)` on any other store.
///
/// The lock is taken and what it relays written before this returns, so that this
/// process's own doorbell, made after it, is the relay's bell file rather than a second
/// connection. That is no loop: the relay listens on the server directly (never through
/// `doorbell::for_store`), so its bell never waits on the worker's loop.
pub fn start_relay(paths: &StatePaths) -> Result<Option<Relay>, String> {
    use hr_shared::store::relay::{BellFile, RelayLock};
    let Some(url) = paths.listen_target() else {
        return Ok(None);
    };
    let target = hr_shared::store::postgres::target(url).map_err(|e| e.to_string())?;
    let key = hr_shared::store::postgres::listen_key(&target);
    let said = |e: std::io::Error| format!("{}: {e}", paths.root.display());
    hr_shared::paths::create_private_dir(&paths.root).map_err(said)?;
    let lock = RelayLock::open(&paths.root).map_err(said)?;
    let mut taken = lock.take(false).map_err(said)?;
    // A waiter's look at the lock holds it shared for a moment: only another relay holding
    // it is a reason to stand by.
    for _ in 0..20 {
        if taken || hr_shared::store::relay::relaying(&paths.root).is_some() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
        taken = lock.take(false).map_err(said)?;
    }
    if taken {
        lock.announce(&key).map_err(said)?;
    }
    let root = paths.root.clone();
    std::thread::Builder::new()
        .name("pg-relay".into())
        .spawn(move || {
            if !taken {
                if lock.take(true).is_err() {
                    return;
                }
                let _ = lock.announce(&key);
            }
            let mut bell = BellFile::new(&root);
            // A bell that cannot be written now is tried again at the next notification:
            // the relay goes on listening (its waiters poll meanwhile).
            hr_shared::store::postgres::listen_loop(&target, || {
                bell.ring();
                true
            });
            drop(lock);
        })
        .map_err(|e| e.to_string())?;
    Ok(Some(if taken {
        Relay::Relaying
    } else {
        Relay::Standby
    }))
}

/// What to resume: the parked run and the approval that answers it.
#[derive(Debug, Clone)]
struct Job {
    run: ToolRun,
    approval: Approval,
}

/// A resume in flight.
struct Resume {
    job: Job,
    child: Child,
    started: Instant,
    attempt: u32,
}

/// A resume that failed to start, to try again.
struct Retry {
    job: Job,
    attempts: u32,
    last_error: String,
}

/// For a parked run, who runs it again — a worker of the identity that started it — and,
/// when a worker of this user (with this store session's identity, on this host) would
/// not, why not (`monitor show`, the dashboard). `None` for a run that is not parked.
pub fn resume_note(store: &mut dyn OperatorStore, run: &ToolRun) -> Option<String> {
    if !rules::is_parked(run) {
        return None;
    }
    let identity = store.local().and_then(|s| s.identity().ok());
    let host = hr_shared::proc::hostname();
    let me = identity.as_deref().map(|identity| rules::Executor {
        identity,
        uid: hr_shared::proc::effective_uid(),
        host: &host,
        pool: None,
    });
    Some(rules::resume_note(run, me.as_ref()))
}

/// The worker's state across passes.
pub struct Worker {
    paths: StatePaths,
    shim: PathBuf,
    name: String,
    host: LocalHost,
    /// The store: reopened after an error, and when its file is replaced.
    store: Box<dyn AdminStore>,
    children: Vec<Resume>,
    retries: Vec<Retry>,
    noted_missing_db: bool,
    /// Lines printed since the last call to [`Worker::take_actions`].
    actions: usize,
    /// With `--json`: the lines kept (time, text) instead of printed.
    kept: Option<Vec<(String, String)>>,
    /// This host's name and this process's user: only runs of both are resumed (or, with a
    /// pool, runs of that pool from any host, still only as their own user).
    here: String,
    uid: u32,
    pool: Option<String>,
    /// Who the store says this worker is (its owner, or its login): only runs it recorded as
    /// started by this identity are resumed. Learnt on the first pass.
    identity: Option<String>,
    /// On the PostgreSQL store: why its login is not this user's alone on this host (runs
    /// of other uids of this host under it), and when that was last looked at.
    shared: Option<(Instant, Option<String>)>,
    /// Runs of other hosts or users already reported (said once, then left alone).
    refused: std::collections::HashSet<String>,
    /// Pipelines this worker is resuming: a `monitor pipeline resume` child each.
    pipelines: Vec<(String, Child)>,
    /// Pipelines whose resume failed: how often, and not again before when.
    pipeline_failures: std::collections::HashMap<String, (u32, Instant)>,
    /// `--labels`: the pipeline steps of these host labels are run here.
    labels: Vec<String>,
    /// The identities whose pipelines' labelled steps are run here besides its own (the
    /// user config's `[worker] pipelines_from`).
    trusted: Vec<String>,
    labelled: Option<crate::pipeline::run::LabelWorker>,
}

impl Worker {
    /// A worker on the store `paths` names (the store itself: a server's operator API is
    /// refused).
    pub fn new(paths: StatePaths, shim: PathBuf) -> StoreResult<Self> {
        Ok(Worker {
            store: store::local(&paths, "resuming runs")?,
            paths,
            shim,
            name: resume::worker_name(),
            host: LocalHost::new(),
            children: Vec::new(),
            retries: Vec::new(),
            noted_missing_db: false,
            actions: 0,
            kept: None,
            here: hr_shared::proc::hostname(),
            uid: hr_shared::proc::effective_uid(),
            pool: None,
            identity: None,
            shared: None,
            refused: std::collections::HashSet::new(),
            pipelines: Vec::new(),
            pipeline_failures: std::collections::HashMap::new(),
            labels: Vec::new(),
            trusted: Vec::new(),
            labelled: None,
        })
    }

    /// Also runs the pipeline steps labelled with one of `labels` (their `host`), of its own
    /// identity's executions and of those started by `trusted` identities that named it.
    pub fn with_labels(mut self, labels: Vec<String>, trusted: Vec<String>) -> Self {
        self.labels = labels;
        self.trusted = trusted;
        self
    }

    /// Labelled steps: outcomes of those that ended, beats, and (with `claim`) new ones.
    fn run_labelled(&mut self, claim: bool) -> Result<(), StoreError> {
        if self.labels.is_empty() {
            return Ok(());
        }
        // New steps only while the login is this user's alone (those running finish).
        let claim = claim && self.login_shared().is_none();
        if self.labelled.is_none() {
            let st = match hr_shared::store::pipelines::for_store(&self.paths) {
                Ok(st) => st,
                // Said once: this store keeps no pipelines (through a server).
                Err(e @ StoreError::Unsupported(_)) => {
                    self.labels.clear();
                    return Err(e);
                }
                Err(e) => return Err(e),
            };
            self.labelled = Some(crate::pipeline::run::LabelWorker::new(
                self.paths.clone(),
                st,
                self.shim.clone(),
                self.labels.clone(),
                self.trusted.clone(),
            ));
        }
        let Some(lw) = self.labelled.as_mut() else {
            return Ok(());
        };
        let out = lw.pass(claim);
        let said = match out {
            Ok(said) => said,
            Err(e) => {
                // Opened afresh on the next pass (its steps still run; the next runner
                // to look adopts them).
                if lw.busy() == 0 {
                    self.labelled = None;
                }
                return Err(StoreError::Server(format!("pipeline steps: {e}")));
            }
        };
        for line in said {
            self.say(sanitize_line(&line));
        }
        Ok(())
    }

    /// Also resumes the runs of worker pool `pool`, on whichever host they ran.
    pub fn with_pool(mut self, pool: Option<String>) -> Self {
        self.pool = pool;
        self
    }

    /// The name this worker claims approvals under.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Resumes started and not yet reaped, plus those waiting for a retry (a pipeline's
    /// resume runs the rest of the pipeline: it is started, not waited for).
    pub fn in_flight(&self) -> usize {
        self.children.len() + self.retries.len() + self.labelled.as_ref().map_or(0, |l| l.busy())
    }

    /// The runs being resumed right now.
    pub fn running_ids(&self) -> Vec<String> {
        self.children
            .iter()
            .map(|c| c.job.run.tool_run_id.clone())
            .collect()
    }

    /// How many things this worker reported since the last call.
    pub fn take_actions(&mut self) -> usize {
        std::mem::take(&mut self.actions)
    }

    /// Keep what it reports for [`Worker::kept`] instead of printing it.
    pub fn keep_lines(&mut self) {
        self.kept = Some(Vec::new());
    }

    /// What it reported, kept by [`Worker::keep_lines`]: (time, text).
    pub fn kept(&mut self) -> Vec<(String, String)> {
        self.kept.take().unwrap_or_default()
    }

    fn say(&mut self, line: String) {
        self.actions += 1;
        if let Some(kept) = &mut self.kept {
            kept.push((time::now_rfc3339(), line));
            return;
        }
        // A worker outlives whoever reads its output: a closed stdout is not its end.
        let _ = writeln!(std::io::stdout().lock(), "{} {line}", time::now_rfc3339());
    }

    fn log(&self, events: &[LogEvent]) {
        control::log_events(&self.paths.combined_log(), events);
    }

    /// One full pass. After a store error the next pass opens the store afresh; a database
    /// that does not exist yet is not an error.
    pub fn pass(&mut self, stopping: bool) -> Result<(), StoreError> {
        let out = self.pass_inner(stopping);
        match &out {
            Err(StoreError::Missing(path)) => {
                if !self.noted_missing_db {
                    eprintln!(
                        "monitor worker: no database at {} yet (nothing has run with this state dir)",
                        path.display()
                    );
                    self.noted_missing_db = true;
                }
                return Ok(());
            }
            Err(_) => {}
            Ok(()) => self.noted_missing_db = false,
        }
        out
    }

    /// Who the store says this worker is ([`OperatorStore::identity`]); an error when this
    /// store is not one it may run recorded commands from (another user's).
    pub fn identity(&mut self) -> Result<String, StoreError> {
        if let Some(id) = &self.identity {
            return Ok(id.clone());
        }
        let id = self.store.identity()?;
        self.identity = Some(id.clone());
        Ok(id)
    }

    /// On the PostgreSQL store: why this worker runs nothing — its login is used by
    /// another OS user of this host too (their runs say so), so a run of theirs could be
    /// taken for this user's. Looked at again every [`SHARED_LOOK`].
    fn login_shared(&mut self) -> Option<String> {
        let url = self.paths.store_url.clone()?;
        if let Some((at, why)) = &self.shared
            && at.elapsed() < SHARED_LOOK
        {
            return why.clone();
        }
        let identity = self.identity().ok()?;
        let why = match hr_shared::store::postgres::shared_logins(&url) {
            // Runs that say no host count for every host.
            Ok(found) => found
                .into_iter()
                .find(|s| s.login == identity && (s.host == self.here || s.host.is_empty()))
                .map(|s| s.warning()),
            // Not knowing is no reason to run: it may be (a server not migrated, `monitor db
            // init` migrates it).
            Err(e) => Some(format!(
                "it cannot tell whether its login is this user's alone ({e})"
            )),
        };
        if let Some(w) = &why
            && self
                .shared
                .as_ref()
                .is_none_or(|(_, before)| before.is_none())
        {
            self.say(format!("runs nothing while {}", sanitize_line(w)));
        }
        self.shared = Some((Instant::now(), why.clone()));
        why
    }

    fn pass_inner(&mut self, stopping: bool) -> Result<(), StoreError> {
        self.identity()?;
        let actor = self.name.clone();
        let done = self.store.reconcile(&actor, &self.host)?;
        self.log(&done.effects.events);
        self.report_reconcile(&done.value);
        self.reap()?;
        // Labelled steps' trouble is reported, not in the way of resuming runs.
        if let Err(e) = self.run_labelled(!stopping) {
            eprintln!("monitor worker: {e}");
        }
        if stopping {
            return Ok(());
        }
        self.retry_failed_starts()?;
        self.scan()?;
        self.resume_pipelines()
    }

    /// Only reaps children and retries failed starts (between passes of `--once`).
    pub fn tend(&mut self) -> Result<(), StoreError> {
        self.reap()?;
        if let Err(e) = self.run_labelled(false) {
            eprintln!("monitor worker: {e}");
        }
        self.reap_pipelines();
        self.retry_failed_starts()
    }

    /// Pipelines that need a runner: theirs is gone, or they were left waiting for a
    /// decision that has come. Each is resumed by a `monitor pipeline resume` child (of two
    /// workers, one claims it; the other's child says so and exits).
    fn resume_pipelines(&mut self) -> Result<(), StoreError> {
        self.reap_pipelines();
        if self.login_shared().is_some() {
            return Ok(());
        }
        // Pipelines are kept by the embedded store only, for now.
        let Ok(mut st) = hr_shared::store::pipelines::for_store(&self.paths) else {
            return Ok(());
        };
        let open = st.open_pipelines(500)?;
        let identity = self.identity()?;
        for ex in open {
            if self.pipelines.iter().any(|(id, _)| *id == ex.execution_id) {
                continue;
            }
            // Another identity's pipeline is never driven by this one (its label workers'
            // steps excepted, which `--labels` runs as they are allowed).
            if let Some(why) = rules::execution_not_ours(&ex, &identity, self.uid) {
                if self.refused.insert(ex.execution_id.clone()) {
                    self.say(format!("{}: not resumed here: {why}", ex.execution_id));
                }
                continue;
            }
            // A resume that failed is tried again later, and not after five failures.
            if let Some((n, not_before)) = self.pipeline_failures.get(&ex.execution_id)
                && (*n >= PIPELINE_TRIES || Instant::now() < *not_before)
            {
                continue;
            }
            let why = match &ex.runner {
                Some(r) if crate::pipeline::run::runner_gone(r, ex.heartbeat_at.as_deref()) => {
                    "its runner is gone"
                }
                Some(_) => continue,
                // A decision moved its human step (in the decision's transaction): the
                // steps after it are ready.
                None if ex.status == hr_shared::pipeline::ExecutionState::Running => {
                    "a decision came"
                }
                // Expired, or decided where the step could not be moved at once.
                None if decided_human_step(st.as_mut(), &ex)? => "a decision came",
                None => continue,
            };
            let me = std::env::current_exe().unwrap_or_else(|_| PathBuf::from("monitor"));
            let spawned = Command::new(me)
                .arg("--state-dir")
                .arg(&self.paths.root)
                .args(["pipeline", "resume", &ex.execution_id, "--detach"])
                .stdin(Stdio::null())
                // Its steps' output is theirs, not the worker's report (`--once --json`).
                .stdout(Stdio::null())
                .process_group(0)
                .spawn();
            match spawned {
                Ok(child) => {
                    self.say(format!(
                        "{}: pipeline {} resumed ({why})",
                        ex.execution_id,
                        sanitize_line(&ex.name)
                    ));
                    self.pipelines.push((ex.execution_id.clone(), child));
                }
                Err(e) => eprintln!("monitor worker: cannot resume {}: {e}", ex.execution_id),
            }
        }
        Ok(())
    }

    fn reap_pipelines(&mut self) {
        let mut ended = Vec::new();
        self.pipelines
            .retain_mut(|(id, child)| match child.try_wait() {
                Ok(Some(st)) => {
                    ended.push((id.clone(), st.code()));
                    false
                }
                Ok(None) => true,
                Err(_) => false,
            });
        for (id, code) in ended {
            let how = match code {
                Some(0) => "completed".to_owned(),
                Some(90) => "waits for a decision".to_owned(),
                Some(3) => "is driven by another runner, or has ended".to_owned(),
                Some(1) => "failed, or could not be resumed (exit 1)".to_owned(),
                Some(c) => format!("could not be resumed (exit {c})"),
                None => "was stopped by a signal".to_owned(),
            };
            // Only open executions are resumed: one whose resume failed it (exit 1) is not
            // looked at again, so any other end counts as a failed resume.
            if !matches!(code, Some(0 | 3 | 90)) {
                let e = self
                    .pipeline_failures
                    .entry(id.clone())
                    .or_insert((0, Instant::now()));
                e.0 += 1;
                e.1 = Instant::now() + PIPELINE_BACKOFF * e.0;
                if e.0 >= PIPELINE_TRIES {
                    self.say(format!(
                        "{id}: pipeline {how}; not tried again by this worker (monitor pipeline resume {id})"
                    ));
                    continue;
                }
            }
            self.say(format!("{id}: pipeline {how}"));
        }
    }

    fn report_reconcile(&mut self, r: &ReconcileReport) {
        for (run, why) in &r.vanished {
            self.say(format!("{run} failed: {}", sanitize_line(why)));
        }
        for a in &r.expired {
            let how = match &a.chosen_value {
                Some(v) => format!("answered with the default `{}`", sanitize_line(v)),
                None => "without a decision".into(),
            };
            self.say(format!(
                "{} expired {how} (run {})",
                a.approval_id, a.tool_run_id
            ));
        }
    }

    fn handling(&self, approval_id: &str) -> bool {
        self.children
            .iter()
            .any(|c| c.job.approval.approval_id == approval_id)
            || self
                .retries
                .iter()
                .any(|r| r.job.approval.approval_id == approval_id)
    }

    /// Acts on every parked run with a decided approval.
    fn scan(&mut self) -> Result<(), StoreError> {
        if self.login_shared().is_some() {
            return Ok(());
        }
        let parked = self.store.decided_parked()?;
        for p in parked {
            // A pipeline's human step: its runner takes the decision, there is nothing to
            // run again.
            if p.run.pipeline_step().is_some() {
                continue;
            }
            self.act_on(p)?;
        }
        Ok(())
    }

    fn act_on(&mut self, p: ParkedRun) -> Result<(), StoreError> {
        // Another identity's run is never run by this one; another host's is its workers'.
        let identity = self.identity()?;
        let me = rules::Executor {
            identity: &identity,
            uid: self.uid,
            host: &self.here,
            pool: self.pool.as_deref(),
        };
        if let Some(why) = rules::not_ours(&p.run, &me) {
            if self.refused.insert(p.run.tool_run_id.clone()) {
                self.say(format!("{}: not resumed here: {why}", p.run.tool_run_id));
            }
            return Ok(());
        }
        let approval = match rules::resume_verdict(&p.decided, p.pending) {
            ResumeVerdict::Fail(no) => {
                let reason = refusal_reason(&no);
                self.close_waiting(&p.run, RunStatus::Failed, reason, Some(REJECTED_EXIT), None)?;
                return Ok(());
            }
            ResumeVerdict::Wait => return Ok(()),
            ResumeVerdict::Resume(a) => a,
        };
        if self.handling(&approval.approval_id) {
            return Ok(());
        }
        let id = approval.approval_id.clone();
        let job = Job {
            run: p.run,
            approval,
        };
        match job.approval.claimed_by.clone() {
            None => {
                let me = self.name.clone();
                let won = self.store.claim(&id, &me)?;
                if won {
                    self.start(job, 1);
                }
            }
            Some(by) if by == self.name => self.start(job, 1),
            Some(by) => self.take_over_if_abandoned(job, &by)?,
        }
        Ok(())
    }

    /// A claim whose worker died: finish what it left, or resume in its place.
    fn take_over_if_abandoned(&mut self, job: Job, claimed_by: &str) -> Result<(), StoreError> {
        if !rules::claimer_gone(claimed_by, &self.host) {
            return Ok(());
        }
        let old_enough = job
            .approval
            .claimed_at
            .as_deref()
            .and_then(time::age_of)
            .is_none_or(|age| age >= STALE_CLAIM);
        if !old_enough {
            return Ok(());
        }
        let run_id = job.run.tool_run_id.clone();
        let resumes = self.store.resumes_of(&run_id)?;
        let latest = resumes.last().cloned();
        if let Some(r) = &latest
            && r.status.is_live()
            && !rules::is_parked(r)
            && rules::shim_gone(r, &self.host).is_none()
        {
            // Its re-run is still going; it will close the waiting run, or a later pass will.
            return Ok(());
        }
        let id = job.approval.approval_id.clone();
        let me = self.name.clone();
        let took = self.store.take_over_claim(&id, claimed_by, &me)?;
        if !took {
            return Ok(());
        }
        self.say(format!(
            "{id}: took over the claim of {} (gone)",
            sanitize_line(claimed_by)
        ));
        match latest {
            Some(r) if r.status.is_final() || rules::is_parked(&r) => {
                let code = r.exit_code.unwrap_or(1);
                self.finish(&job, code, Some(r))
            }
            _ => {
                self.start(job, 1);
                Ok(())
            }
        }
    }

    /// Starts the re-run of a claimed job (attempt `attempt`); a failure to start is queued
    /// for a retry.
    fn start(&mut self, job: Job, attempt: u32) {
        // A decision covers what the command ran when it asked: a changed executable or
        // script is not started at all (it could act before reaching the prompt).
        if let Some(why) = tool_changed(&job) {
            let reason = format!(
                "approval {} approved, but {why}: not resumed — run the command again to be asked anew",
                job.approval.approval_id
            );
            if let Err(e) = self.close_waiting(&job.run, RunStatus::Failed, reason, None, Some(why))
            {
                self.say(format!("{}: {e}", job.run.tool_run_id));
            }
            return;
        }
        // A variable withheld as a secret when it asked, and not in this worker's own
        // environment: never started without it (an agent without its key comes up "not
        // logged in", a deploy without its token fails half-way).
        let missing = saved_environment(&job.run)
            .map(|saved| saved.restore(own_env).report.missing)
            .unwrap_or_default();
        if !missing.is_empty() {
            let names = sanitize_line(&missing.join(", "));
            let why = format!(
                "it needs {names} (withheld when it asked), which this worker's environment lacks"
            );
            let reason = format!(
                "approval {} approved, but {why}: not resumed — start `monitor worker` with {names} set, or run the command again",
                job.approval.approval_id
            );
            self.say(format!("{}: {reason}", job.run.tool_run_id));
            if let Err(e) = self.close_waiting(&job.run, RunStatus::Failed, reason, None, Some(why))
            {
                self.say(format!("{}: {e}", job.run.tool_run_id));
            }
            return;
        }
        match self.spawn(&job) {
            Ok(child) => {
                self.say(format!(
                    "resuming {} ({}) with {} = `{}`: headless-run pid {}{}{}",
                    job.run.tool_run_id,
                    sanitize_line(&job.run.tool_name),
                    job.approval.approval_id,
                    sanitize_line(job.approval.chosen_value.as_deref().unwrap_or("")),
                    child.id(),
                    if attempt > 1 {
                        format!(" (attempt {attempt})")
                    } else {
                        String::new()
                    },
                    saved_environment(&job.run)
                        .map(|saved| environment_summary(&saved.restore(own_env).report))
                        .unwrap_or_default()
                ));
                self.children.push(Resume {
                    job,
                    child,
                    started: Instant::now(),
                    attempt,
                });
            }
            Err(why) => {
                self.say(format!(
                    "cannot start the resume of {}: {why}",
                    job.run.tool_run_id
                ));
                self.retries.push(Retry {
                    job,
                    attempts: attempt,
                    last_error: why,
                });
            }
        }
    }

    fn spawn(&self, job: &Job) -> Result<Child, String> {
        let run = &job.run;
        if run.argv_json.is_empty() {
            return Err("the run has no stored command line".into());
        }
        let mut cmd = Command::new(&self.shim);
        // The command's own environment, as it was when it asked. Its secret-looking
        // variables were never stored: each is taken from the worker's own environment —
        // the executor's session, the same user, given its secrets on purpose — where it
        // has it (never from the row), and the shim records which were and which the
        // resume lacks. A run that kept no environment gets the worker's.
        let saved = saved_environment(run);
        // The run's own limits and mode (exit: it was parked), before the executor's.
        if let Some(saved) = &saved {
            cmd.args(hr_shared::mode::checked_resume_flags(&saved.flags));
        }
        match saved.map(|saved| saved.restore(own_env)) {
            Some(restored) => {
                cmd.env_clear().envs(restored.vars);
                if restored.report.is_empty() {
                    cmd.env_remove(ENV_RESUME_ENV);
                } else if let Ok(json) = serde_json::to_string(&restored.report) {
                    cmd.env(ENV_RESUME_ENV, json);
                }
            }
            None => {
                cmd.env_remove(ENV_RESUME_ENV);
            }
        }
        // The user's config as the worker reads it: what shapes the resume's decisions is
        // the executor's own file, not one found through the run's recorded HOME.
        match own_config_file() {
            Some(file) => cmd.env("HEADLESS_RUN_CONFIG", file),
            None => cmd.env_remove("HEADLESS_RUN_CONFIG"),
        };
        cmd.arg("--")
            .args(&run.argv_json)
            .env_remove(ENV_TOOL_RUN_ID)
            .env("HEADLESS", "1")
            .env(ENV_RESUMED_FROM, &run.tool_run_id)
            .env(ENV_APPROVAL_ID, &job.approval.approval_id)
            // The resume stays in the run's pool (the saved environment has no HEADLESS_RUN_*).
            .env(hr_shared::mode::ENV_POOL, run.pool().unwrap_or_default())
            .env("HEADLESS_RUN_HOME", &self.paths.root)
            // The worker's own store: on the PostgreSQL store, its login is the host's
            // runner login (never an operator's: the re-run's tool sees this).
            .env("HEADLESS_RUN_DB", self.paths.child_store())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            // Its own process group: a Ctrl-C meant for the worker must not end the tools.
            .process_group(0);
        match &run.execution_id {
            Some(ex) => cmd.env(ENV_EXECUTION_ID, ex),
            None => cmd.env_remove(ENV_EXECUTION_ID),
        };
        // Where the re-run listens when no relay does: the worker's own choice, as its store.
        match self.paths.child_listen_store() {
            Some(url) => cmd.env(hr_shared::url::ENV_LISTEN_DB, url),
            None => cmd.env_remove(hr_shared::url::ENV_LISTEN_DB),
        };
        // A cooperative tool acts on AUTO_APPROVAL (its shim checks it against this claim
        // and uses it up); a prompt's decision is typed at the prompt by the shim instead,
        // and the variable is not set at all.
        match (&job.approval.prompt_kind, &job.approval.chosen_value) {
            (Some(PromptKind::Cooperative), Some(value)) => cmd.env(ENV_AUTO_APPROVAL, value),
            _ => cmd.env_remove(ENV_AUTO_APPROVAL),
        };
        if let Some(cwd) = &run.cwd {
            cmd.current_dir(cwd);
        }
        cmd.spawn().map_err(|e| match &run.cwd {
            Some(cwd) if !std::path::Path::new(cwd).is_dir() => {
                format!("its working directory {} is gone ({e})", sanitize_line(cwd))
            }
            _ => format!("{}: {e}", self.shim.display()),
        })
    }

    /// Collects children that have exited.
    fn reap(&mut self) -> Result<(), StoreError> {
        let mut i = 0;
        while i < self.children.len() {
            let status = match self.children[i].child.try_wait() {
                Ok(Some(st)) => st,
                Ok(None) => {
                    i += 1;
                    continue;
                }
                Err(e) => {
                    eprintln!(
                        "monitor worker: cannot wait for pid {}: {e}",
                        self.children[i].child.id()
                    );
                    i += 1;
                    continue;
                }
            };
            let done = self.children.swap_remove(i);
            let code = i32::from(RunOutcome::from_exit_status(status).exit_code());
            self.after_exit(done, code)?;
        }
        Ok(())
    }

    fn after_exit(&mut self, done: Resume, code: i32) -> Result<(), StoreError> {
        let run_id = done.job.run.tool_run_id.clone();
        let still_waiting = self
            .store
            .run(&run_id)?
            .is_some_and(|r| r.status == RunStatus::WaitingApproval);
        let consumed = self
            .store
            .approval(&done.job.approval.approval_id)?
            .is_some_and(|a| a.consumed_at.is_some());
        let resumed = self.store.resumes_of(&run_id)?.pop();
        if still_waiting
            && !consumed
            && SPAWN_FAILURE_CODES.contains(&code)
            && done.started.elapsed() < SPAWN_FAILURE_WINDOW
        {
            let why = format!(
                "headless-run exited {code} before reaching the prompt{}{}",
                resumed
                    .as_ref()
                    .map(|r| format!(" (run {})", r.tool_run_id))
                    .unwrap_or_default(),
                ran_without(&done.job.run)
            );
            self.say(format!("resume of {run_id} failed to start: {why}"));
            self.retries.push(Retry {
                job: done.job,
                attempts: done.attempt,
                last_error: why,
            });
            return Ok(());
        }
        let without = if code == 0 {
            String::new()
        } else {
            ran_without(&done.job.run)
        };
        match &resumed {
            Some(r) => self.say(format!(
                "{run_id} resumed as {}: headless-run exited {code}{without}",
                r.tool_run_id
            )),
            None => self.say(format!(
                "{run_id}: resume exited {code} without recording a run{without}"
            )),
        }
        if still_waiting {
            self.finish(&done.job, code, resumed)?;
        }
        Ok(())
    }

    /// Closes a waiting run whose re-run ended without answering its prompt.
    fn finish(&mut self, job: &Job, code: i32, resumed: Option<ToolRun>) -> Result<(), StoreError> {
        let ap = &job.approval.approval_id;
        let (status, reason) = match &resumed {
            Some(r) => {
                // A resume that never met the prompt did not do what was approved, whatever
                // its exit code: reported as such, not as a success. (The store says the
                // same when the resume's own end reaches it first: `hr_shared::chain`.)
                let end = if rules::is_parked(r) {
                    rules::ResumeEnd::Parked
                } else {
                    rules::ResumeEnd::Exited(code)
                };
                (
                    RunStatus::Failed,
                    rules::unused_resume_reason(ap, job.approval.status, &r.tool_run_id, end),
                )
            }
            None => (
                RunStatus::Failed,
                format!("approval {ap} approved; the resume exited {code} without recording a run"),
            ),
        };
        if let Some(r) = &resumed
            && job.approval.resumed_run_id.is_none()
        {
            let rid = r.tool_run_id.clone();
            self.store.set_resumed_run(ap, &rid)?;
        }
        self.close_waiting(&job.run, status, reason, Some(code), None)
    }

    /// Moves a run out of `waiting_approval` (only if it is still there).
    fn close_waiting(
        &mut self,
        run: &ToolRun,
        status: RunStatus,
        reason: String,
        exit_code: Option<i32>,
        error: Option<String>,
    ) -> Result<(), StoreError> {
        let change = StatusChange {
            exit_code,
            error,
            ..StatusChange::to(status, Some(reason.clone()))
        };
        let actor = self.name.clone();
        let done = self.store.close_run(
            &run.tool_run_id,
            &change,
            &actor,
            &[RunStatus::WaitingApproval],
        )?;
        self.log(&done.effects.events);
        if done.value.is_some() {
            self.say(format!(
                "{} {status}: {}",
                run.tool_run_id,
                sanitize_line(&reason)
            ));
        }
        Ok(())
    }

    /// Starts again the resumes that failed to start, or gives up on them.
    fn retry_failed_starts(&mut self) -> Result<(), StoreError> {
        for r in std::mem::take(&mut self.retries) {
            let run_id = r.job.run.tool_run_id.clone();
            let still_waiting = self
                .store
                .run(&run_id)?
                .is_some_and(|run| run.status == RunStatus::WaitingApproval);
            let ours = self
                .store
                .approval(&r.job.approval.approval_id)?
                .is_some_and(|a| {
                    a.consumed_at.is_none() && a.claimed_by.as_deref() == Some(self.name.as_str())
                });
            if !still_waiting || !ours {
                continue;
            }
            if r.attempts > SPAWN_RETRIES {
                let reason = format!(
                    "approval {} approved, but the resume failed to start {} times: {}",
                    r.job.approval.approval_id, r.attempts, r.last_error
                );
                self.close_waiting(
                    &r.job.run,
                    RunStatus::Failed,
                    reason,
                    None,
                    Some(r.last_error.clone()),
                )?;
                continue;
            }
            self.start(r.job, r.attempts + 1);
        }
        Ok(())
    }
}

/// The environment a parked run kept for its resume (metadata `env`).
fn saved_environment(run: &ToolRun) -> Option<SavedEnvironment> {
    let env = run.metadata.as_ref()?.get("env")?;
    serde_json::from_value(env.clone()).ok()
}

/// Why the command of `job` may no longer be resumed with its decision: what it runs (its
/// executable, and an interpreter's script) is not what it ran when it asked.
fn tool_changed(job: &Job) -> Option<String> {
    let asked = job.approval.tool_digest.as_deref()?;
    let path = job
        .run
        .metadata
        .as_ref()
        .and_then(|m| m.get("tool_path"))
        .and_then(|p| p.as_str())
        .unwrap_or("");
    let cwd = std::path::Path::new(job.run.cwd.as_deref().unwrap_or("/"));
    let now = hr_shared::fingerprint::tool(&in_run_dir(path, cwd), &job.run.argv_json, cwd);
    (now.as_deref() != Some(asked)).then(|| {
        format!(
            "{} (or the script it runs) changed since it asked",
            sanitize_line(path)
        )
    })
}

/// A path as the run's shim saw it: a relative one (`./deploy.sh`, or found through a
/// relative `PATH` entry) is relative to the run's directory — where the shim ran it, and
/// where the resume's shim runs — not to wherever the worker was started.
fn in_run_dir(path: &str, cwd: &std::path::Path) -> PathBuf {
    let p = std::path::Path::new(path);
    if p.is_absolute() || path.is_empty() {
        p.to_path_buf()
    } else {
        cwd.join(p)
    }
}

/// A variable of the worker's own environment (the executor's session).
fn own_env(name: &str) -> Option<std::ffi::OsString> {
    std::env::var_os(name)
}

/// This process's user config file: `HEADLESS_RUN_CONFIG`, else its XDG one when it
/// exists (what a re-run it starts reads, never one found through a run's recorded HOME).
pub fn own_config_file() -> Option<PathBuf> {
    if let Some(explicit) = own_env("HEADLESS_RUN_CONFIG").filter(|v| !v.is_empty()) {
        return Some(PathBuf::from(explicit));
    }
    hr_shared::paths::user_config_file(&hr_shared::paths::real_env).filter(|f| f.is_file())
}

/// How the worker says what a resume's environment is: the run's own, with the withheld
/// variables it gave from its own environment and those the resume lacks.
fn environment_summary(report: &ResumeEnv) -> String {
    let mut out = "; in its own environment".to_owned();
    if !report.from_worker.is_empty() {
        out.push_str(&format!(
            ", with {} from the worker's",
            sanitize_line(&report.from_worker.join(", "))
        ));
    }
    if !report.missing.is_empty() {
        out.push_str(&format!(
            ", without {} (withheld when it asked, not in the worker's environment)",
            sanitize_line(&report.missing.join(", "))
        ));
    }
    out
}

/// For a resume that failed: ` (it ran without X, …: withheld when it asked, not in the
/// worker's environment)`, when it lacked any.
fn ran_without(run: &ToolRun) -> String {
    let missing = saved_environment(run)
        .map(|saved| saved.restore(own_env).report.missing)
        .unwrap_or_default();
    if missing.is_empty() {
        return String::new();
    }
    format!(
        " (it ran without {}: withheld when it asked, not in the worker's environment)",
        sanitize_line(&missing.join(", "))
    )
}

/// Why a decision ends the waiting run: `approval AP-… rejected by alice: not now`.
fn refusal_reason(a: &Approval) -> String {
    let by = sanitize_line(a.decided_by.as_deref().unwrap_or("?"));
    match a.status {
        ApprovalStatus::Expired => format!("approval {} expired without a decision", a.approval_id),
        _ => match a.comment.as_deref().filter(|c| !c.trim().is_empty()) {
            Some(c) => format!(
                "approval {} rejected by {by}: {}",
                a.approval_id,
                sanitize_line(c.trim())
            ),
            None => format!("approval {} rejected by {by}", a.approval_id),
        },
    }
}

/// Whether a pipeline left waiting has a human step whose approval is decided.
fn decided_human_step(
    st: &mut dyn hr_shared::store::pipelines::PipelineStore,
    ex: &hr_shared::store::pipelines::Execution,
) -> Result<bool, StoreError> {
    for s in ex
        .steps
        .iter()
        .filter(|s| s.status == crate::pipeline::engine::StepStatus::WaitingApproval)
    {
        let Some(ap) = s.run.as_ref().and_then(|r| r.approval_id.as_deref()) else {
            continue;
        };
        if st
            .step_approval(ap)?
            .is_some_and(|a| a.status != ApprovalStatus::Pending)
        {
            return Ok(true);
        }
    }
    Ok(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn approval(status: ApprovalStatus, by: &str, comment: Option<&str>) -> Approval {
        Approval {
            status,
            decided_by: Some(by.into()),
            comment: comment.map(String::from),
            ..hr_shared::testing::approval("AP-1", hr_shared::approvals::PromptKind::Choice)
        }
    }

    /// The relay takes its state dir's lock before it returns (so the worker's own doorbell
    /// is its bell), names what it listens to, and rings the bell even while the server is
    /// away (after each failed connect: waiters look then); a second worker stands by.
    #[test]
    fn the_relay_holds_the_lock_names_its_server_and_rings_and_a_second_stands_by() {
        use hr_shared::store::relay;
        let tmp = tempfile::tempdir().unwrap();
        let mut paths = StatePaths::at(tmp.path().join("state"));
        assert_eq!(start_relay(&paths), Ok(None), "no relay for SQLite");
        // Nothing listens on port 1: every connect fails at once.
        paths.store_url = Some("postgres://runner@127.0.0.1:1/hr".into());
        assert_eq!(start_relay(&paths), Ok(Some(Relay::Relaying)));
        let key = hr_shared::store::postgres::listen_key(
            &hr_shared::store::postgres::target("postgres://runner@127.0.0.1:1/hr").unwrap(),
        );
        assert_eq!(relay::relaying(&paths.root), Some(key));
        let bell = relay::bell_path(&paths.root);
        let deadline = Instant::now() + Duration::from_secs(20);
        while !bell.exists() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(bell.exists(), "the relay never rang");
        assert_eq!(start_relay(&paths), Ok(Some(Relay::Standby)));
    }

    #[test]
    fn refusal_reasons_name_the_decider() {
        assert_eq!(
            refusal_reason(&approval(ApprovalStatus::Rejected, "alice", None)),
            "approval AP-1 rejected by alice"
        );
        assert_eq!(
            refusal_reason(&approval(
                ApprovalStatus::Rejected,
                "bob",
                Some("not\x1b[31m today")
            )),
            "approval AP-1 rejected by bob: not today"
        );
        assert_eq!(
            refusal_reason(&approval(ApprovalStatus::Expired, "system:expiry", None)),
            "approval AP-1 expired without a decision"
        );
    }
}
