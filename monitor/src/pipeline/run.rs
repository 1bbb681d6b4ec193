//! Driving an execution: the runner reads the steps from the store, starts what is ready
//! (a task or gate as a `headless-run` of its command, a human step as an approval), and
//! writes each outcome back through the engine with a compare-and-swap. It keeps nothing
//! the store does not have: killed at any point, another runner (`pipeline resume`) reads
//! the row and carries on — a step whose headless-run still runs or has ended is adopted,
//! never started again.

use super::engine::{self, ExecutionStatus, Outcome, Step, StepData, StepRun, StepStatus};
use super::file::{Definition, Kind};
use hr_shared::approvals::Approval;
use hr_shared::config::OnExpire;
use hr_shared::event::{ApprovalOption, CooperativeRequest};
use hr_shared::mode::CANCEL_SIGNAL;
use hr_shared::paths::StatePaths;
use hr_shared::runs::{StatusChange, ToolRun};
use hr_shared::status::{ApprovalStatus, RunStatus};
use hr_shared::store::pipelines::{Execution, ExecutionState, PipelineStore};
use hr_shared::store::{Asker, Cooperative, RunWrite, StoreError};
use hr_shared::{fingerprint, id, proc, time};
use serde::Deserialize;
use std::collections::{BTreeMap, HashMap};
use std::os::fd::{AsRawFd, FromRawFd};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Why driving a pipeline stopped: its store failed (the store's error kept as it is), or
/// the pipeline cannot go on (its definition, a step's process, another runner's claim).
#[derive(Debug)]
pub enum RunError {
    Store(StoreError),
    /// No execution has this id.
    Unknown(String),
    /// The execution has ended: it takes no runner and no outcome.
    Ended(String),
    Pipeline(String),
}

impl std::fmt::Display for RunError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RunError::Store(e) => e.fmt(f),
            RunError::Unknown(why) | RunError::Ended(why) | RunError::Pipeline(why) => {
                f.write_str(why)
            }
        }
    }
}

impl std::error::Error for RunError {}

impl From<StoreError> for RunError {
    fn from(e: StoreError) -> Self {
        RunError::Store(e)
    }
}

impl From<String> for RunError {
    fn from(why: String) -> Self {
        RunError::Pipeline(why)
    }
}

/// A runner whose heartbeat is older than this (on another host) is gone.
pub const RUNNER_STALE: Duration = Duration::from_secs(30);
/// How often the runner says it is alive.
const HEARTBEAT: Duration = Duration::from_secs(2);
/// How often a step's outcome the store refused is tried before it is left to a resume.
const UNAPPLIED_TRIES: u32 = 5;
/// How often it looks when nothing wakes it.
const LOOK: Duration = Duration::from_millis(100);

/// Who drives: this host, pid and the pid's start time.
pub fn me() -> String {
    let pid = std::process::id() as i32;
    let start = proc::read_stat(pid).map(|s| s.start_time).unwrap_or(0);
    format!("{} {pid} {start}", proc::hostname())
}

/// Whether the runner named `runner` (as [`me`] makes it) is gone: on this host by its pid
/// and start time, elsewhere by its heartbeat.
pub fn runner_gone(runner: &str, heartbeat_at: Option<&str>) -> bool {
    let mut parts = runner.split(' ');
    let (Some(host), Some(pid), Some(start)) = (parts.next(), parts.next(), parts.next()) else {
        return true;
    };
    if host == proc::hostname() {
        let (Ok(pid), Ok(start)) = (pid.parse::<i32>(), start.parse::<u64>()) else {
            return true;
        };
        return !proc::same_process(pid, Some(start));
    }
    // A beat from a clock a little ahead of this one is alive; none, one that cannot be
    // read, or one from far ahead is gone.
    heartbeat_at.and_then(time::parse_rfc3339).is_none_or(|at| {
        match std::time::SystemTime::now().duration_since(at) {
            Ok(age) => age > RUNNER_STALE,
            Err(ahead) => ahead.duration() > RUNNER_STALE * 10,
        }
    })
}

/// How a drive ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum End {
    Completed,
    Failed(String),
    /// Only human steps are left, and the runner was asked not to wait (`--detach`).
    Waiting,
    Cancelled(String),
}

/// A step's command, started by this runner.
struct Started {
    execution: String,
    node: String,
    iteration: u32,
    attempt: u32,
    child: Child,
    /// Readable when the child exits (`pidfd_open`), to wake at once; `None` where the
    /// kernel has none (then the runner looks every few milliseconds).
    pidfd: Option<std::os::fd::OwnedFd>,
    /// Let go at its gate: its command ran (false: held back, it exits without running and
    /// its exit says nothing about the step).
    released: bool,
    /// Told to stop: its step was cancelled (another way into a `wait_for: first` merge
    /// won).
    stopping: bool,
}

/// A descriptor that becomes readable when process `pid` (our child) exits.
fn pidfd(pid: i32) -> Option<std::os::fd::OwnedFd> {
    // SAFETY: pidfd_open takes a pid and flags; a valid result is a descriptor we own.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    (fd >= 0).then(|| unsafe { std::os::fd::OwnedFd::from_raw_fd(fd as i32) })
}

pub struct Driver {
    paths: StatePaths,
    store: Box<dyn PipelineStore>,
    me: String,
    shim: PathBuf,
    detach: bool,
    started: Vec<Started>,
    /// Says what happened, one line each (stderr).
    quiet: bool,
    /// A label worker's (`monitor worker --labels`): it runs the labelled steps it claims,
    /// of executions another runner drives.
    worker_mode: bool,
    /// Lines said, kept for the caller instead of printed (the label worker's).
    kept: Option<Vec<String>>,
    /// Outcomes of ended children not yet written (the store said no), with how often they
    /// were tried: tried again first, given up after a few tries.
    unapplied: Vec<(String, String, u32, Outcome, i32, u32)>,
    /// Labelled steps said to wait for their worker (said once each).
    told: std::collections::HashSet<(String, u32)>,
    /// Human steps whose approval was found in the store (execution, node, iteration).
    verified: std::collections::HashSet<(String, String, u32)>,
    /// Who the store says this process is (learnt on first use): the only identity whose
    /// executions it drives.
    identity: Option<String>,
    /// A label worker's: the identities whose executions' labelled steps it also runs (its
    /// host's `[worker] pipelines_from`).
    trusted: Vec<String>,
    /// Executions whose stored definition was found to be the one pinned at their start.
    pinned: std::collections::HashSet<String>,
    /// Runs of cancelled human steps whose question was withdrawn.
    withdrawn: std::collections::HashSet<String>,
    /// The executions it drives or runs steps of, as last read.
    known: HashMap<String, Known>,
}

/// The store's row, read as the engine's types (the definition and vars shared with the
/// execution as this process knows it: they never change once stored).
#[derive(Clone)]
struct View {
    ex: Execution,
    /// The definition as stored (`ex.definition` is left empty).
    raw: Arc<serde_json::Value>,
    def: Arc<Definition>,
    vars: Arc<BTreeMap<String, String>>,
    /// The steps (`ex.steps` is left empty, but for the write), shared with the execution
    /// as known here until changed (`Arc::make_mut`).
    steps: Arc<Vec<Step>>,
}

fn view(mut ex: Execution) -> Result<View, RunError> {
    let raw = Arc::new(std::mem::take(&mut ex.definition));
    let def = Definition::deserialize(raw.as_ref())
        .map_err(|e| format!("{}: its stored definition: {e}", ex.execution_id))?;
    let vars = BTreeMap::deserialize(&ex.vars)
        .map_err(|e| format!("{}: its stored vars: {e}", ex.execution_id))?;
    let steps = Arc::new(std::mem::take(&mut ex.steps));
    Ok(View {
        ex,
        raw,
        def: Arc::new(def),
        vars: Arc::new(vars),
        steps,
    })
}

/// An execution as this process last read it ([`Driver::load`]): brought up to date by
/// reading only what was written since (`PipelineStore::pipeline_refresh`), its definition
/// and vars read once.
struct Known {
    /// Its definition and steps left empty (in `raw` and `steps`).
    ex: Execution,
    steps: Arc<Vec<Step>>,
    raw: Arc<serde_json::Value>,
    def: Arc<Definition>,
    vars: Arc<BTreeMap<String, String>>,
}

impl Known {
    fn of(v: &View) -> Known {
        Known {
            ex: v.ex.clone(),
            steps: v.steps.clone(),
            raw: v.raw.clone(),
            def: v.def.clone(),
            vars: v.vars.clone(),
        }
    }

    fn view(&self) -> View {
        View {
            ex: self.ex.clone(),
            raw: self.raw.clone(),
            def: self.def.clone(),
            vars: self.vars.clone(),
            steps: self.steps.clone(),
        }
    }
}

/// The steps out of `steps`: taken when nothing else shares them, else copied.
fn owned_steps(steps: &mut Arc<Vec<Step>>) -> Vec<Step> {
    match Arc::get_mut(steps) {
        Some(only) => std::mem::take(only),
        None => steps.as_ref().clone(),
    }
}

/// Where a step's result is kept: `STATE/pipelines/EX/NODE.ITERATION.ATTEMPT.json`.
fn result_file(paths: &StatePaths, ex: &str, s: &Step) -> PathBuf {
    paths
        .root
        .join("pipelines")
        .join(ex)
        .join(format!("{}.{}.{}.json", s.node, s.iteration, s.attempt))
}

/// The largest result kept (it travels in its step's row, and on PostgreSQL in the
/// execution's row with every write).
const MAX_RESULT: u64 = 64 * 1024;

fn read_result(path: &std::path::Path) -> Option<serde_json::Value> {
    use std::io::Read;
    let mut text = String::new();
    std::fs::File::open(path)
        .ok()?
        .take(MAX_RESULT + 1)
        .read_to_string(&mut text)
        .ok()?;
    if text.len() as u64 > MAX_RESULT {
        return None;
    }
    serde_json::from_str(&text).ok()
}

impl Driver {
    pub fn new(
        paths: StatePaths,
        store: Box<dyn PipelineStore>,
        shim: PathBuf,
        detach: bool,
        quiet: bool,
    ) -> Self {
        Driver {
            paths,
            store,
            me: me(),
            shim,
            detach,
            started: Vec::new(),
            quiet,
            worker_mode: false,
            kept: None,
            unapplied: Vec::new(),
            told: std::collections::HashSet::new(),
            verified: std::collections::HashSet::new(),
            identity: None,
            trusted: Vec::new(),
            pinned: std::collections::HashSet::new(),
            withdrawn: std::collections::HashSet::new(),
            known: HashMap::new(),
        }
    }

    /// Why no step of `v` may start: its stored definition is not the one pinned when it
    /// started (its digest), or is not one `pipeline check` passes — whatever wrote the row.
    /// Checked once per execution (a definition never changes once stored).
    fn unpinned(&mut self, v: &View) -> Option<String> {
        if self.pinned.contains(&v.ex.execution_id) {
            return None;
        }
        let def = match Definition::from_stored(&v.raw) {
            Ok(def) => def,
            Err(e) => return Some(format!("its stored definition is refused: {e}")),
        };
        if let Some(want) = &v.ex.definition_digest
            && def.digest() != *want
        {
            return Some(
                "its stored definition is not the one it started with (its digest differs)".into(),
            );
        }
        self.pinned.insert(v.ex.execution_id.clone());
        None
    }

    /// Who the store says this process is ([`PipelineStore::identity`]).
    fn identity(&mut self) -> Result<String, RunError> {
        if let Some(id) = &self.identity {
            return Ok(id.clone());
        }
        let id = self.store.identity()?;
        self.identity = Some(id.clone());
        Ok(id)
    }

    /// Why `ex` is not this process's to drive (DESIGN §14), if it is not.
    fn not_ours(&mut self, ex: &Execution) -> Result<Option<String>, RunError> {
        let identity = self.identity()?;
        Ok(hr_shared::rules::execution_not_ours(
            ex,
            &identity,
            hr_shared::proc::effective_uid(),
        ))
    }

    fn say(&mut self, msg: impl AsRef<str>) {
        if let Some(kept) = &mut self.kept {
            kept.push(msg.as_ref().to_owned());
            return;
        }
        if !self.quiet {
            eprintln!("monitor pipeline: {}", msg.as_ref());
        }
    }

    /// The execution as stored now. One read before is brought up to date with what was
    /// written since (the whole row is read only the first time).
    fn load(&mut self, id: &str) -> Result<View, RunError> {
        if let Some(k) = self.known.get_mut(id) {
            // Nothing written since: nothing to read.
            if self.store.pipeline_version(id)? == Some(k.ex.version) {
                return Ok(k.view());
            }
            k.ex.steps = owned_steps(&mut k.steps);
            let found = self.store.pipeline_refresh(&mut k.ex);
            k.steps = Arc::new(std::mem::take(&mut k.ex.steps));
            if !found? {
                self.known.remove(id);
                return Err(RunError::Unknown(format!("no pipeline execution {id}")));
            }
            // Read whole again (a store that keeps no rows of steps, a row that cannot be
            // read): its definition is back in the row.
            if !k.ex.definition.is_null() {
                let mut k = self.known.remove(id).expect("just found");
                k.ex.steps = owned_steps(&mut k.steps);
                return self.known_as(view(k.ex)?);
            }
            let v = k.view();
            if v.ex.is_final() {
                self.known.remove(id);
            }
            return Ok(v);
        }
        let ex = self
            .store
            .pipeline(id)?
            .ok_or_else(|| RunError::Unknown(format!("no pipeline execution {id}")))?;
        self.known_as(view(ex)?)
    }

    /// Keeps `v` as the execution known here (while it has not ended).
    fn known_as(&mut self, v: View) -> Result<View, RunError> {
        if v.ex.is_final() {
            self.known.remove(&v.ex.execution_id);
        } else {
            self.known.insert(v.ex.execution_id.clone(), Known::of(&v));
        }
        Ok(v)
    }

    /// Reads, changes and writes the row until the write lands (another writer moved it:
    /// read again). `change` returns false to write nothing. Refused once another runner
    /// holds the execution.
    fn update(
        &mut self,
        id: &str,
        change: impl FnMut(&mut View) -> Result<bool, RunError>,
    ) -> Result<View, RunError> {
        self.update_as(id, !self.worker_mode, change)
    }

    fn update_as(
        &mut self,
        id: &str,
        ours_only: bool,
        mut change: impl FnMut(&mut View) -> Result<bool, RunError>,
    ) -> Result<View, RunError> {
        for _ in 0..1000 {
            let mut v = self.load(id)?;
            if ours_only && v.ex.runner.as_deref() != Some(self.me.as_str()) {
                return Err(format!(
                    "{id}: another runner took it over ({})",
                    v.ex.runner.as_deref().unwrap_or("none")
                )
                .into());
            }
            // The steps as read (shared, not copied): only what the change changes is written.
            let before = v.steps.clone();
            if !change(&mut v)? {
                return Ok(v);
            }
            hr_shared::pipeline::settle_status(&mut v.ex, &v.def, &v.steps);
            // The runner's heartbeat is its own: a label worker's writes do not keep a dead
            // runner looking alive.
            if !self.worker_mode {
                v.ex.heartbeat_at = Some(time::now_rfc3339());
            }
            v.ex.steps = owned_steps(&mut v.steps);
            let landed = self.store.pipeline_swap_from(&before, &v.ex);
            v.steps = Arc::new(std::mem::take(&mut v.ex.steps));
            if landed? {
                v.ex.version += 1;
                // What was written is what is known now: the next read has nothing to read.
                let _ = self.known_as(v.clone());
                return Ok(v);
            }
        }
        Err(format!("{id}: could not write the execution (always moved by another)").into())
    }

    /// Takes the execution: when nobody drives it, or its runner is gone. False: another
    /// runner drives it.
    pub fn claim(&mut self, id: &str) -> Result<bool, RunError> {
        // Only the identity that started it drives it, whoever the row names as its runner.
        let ex = self.load(id)?.ex;
        if let Some(why) = self.not_ours(&ex)? {
            return Err(format!("{id}: not resumed here: {why}").into());
        }
        let me = self.me.clone();
        let mut taken = false;
        self.update_as(id, false, |v| {
            if v.ex.is_final() {
                return Err(RunError::Ended(format!(
                    "{id} has ended ({}{})",
                    v.ex.status,
                    v.ex.reason
                        .as_deref()
                        .map(|r| format!(": {r}"))
                        .unwrap_or_default()
                )));
            }
            match v.ex.runner.as_deref() {
                Some(r) if r == me => {
                    taken = true;
                    Ok(false)
                }
                Some(r) if !runner_gone(r, v.ex.heartbeat_at.as_deref()) => {
                    taken = false;
                    Ok(false)
                }
                _ => {
                    v.ex.runner = Some(me.clone());
                    taken = true;
                    Ok(true)
                }
            }
        })?;
        Ok(taken)
    }

    /// Applies `outcome` of a step (an outcome another runner applied first is dropped).
    fn apply(
        &mut self,
        id: &str,
        node: &str,
        iteration: u32,
        outcome: Outcome,
    ) -> Result<(), RunError> {
        self.apply_claimed(id, node, iteration, outcome, None)
    }

    /// As [`Driver::apply`]; with `pid`, only while the step is still the claim of that
    /// headless-run (a step taken over and started again is not settled by the first one's
    /// late end).
    fn apply_claimed(
        &mut self,
        id: &str,
        node: &str,
        iteration: u32,
        outcome: Outcome,
        pid: Option<i32>,
    ) -> Result<(), RunError> {
        // A label worker reports how its step ended; the execution's runner moves on.
        if self.worker_mode {
            return self.report(id, node, iteration, outcome, pid);
        }
        self.update(id, |v| {
            let Some(t) = v
                .steps
                .iter()
                .find(|s| s.node == node && s.iteration == iteration)
            else {
                return Ok(false);
            };
            // An execution that has ended (failed, cancelled) takes no more outcomes.
            if v.ex.is_final()
                || t.status.is_final()
                || pid.is_some_and(|p| t.run.as_ref().and_then(|r| r.pid) != Some(p))
            {
                return Ok(false);
            }
            v.steps = Arc::new(engine::advance(
                &v.def,
                &v.vars,
                &v.steps,
                node,
                iteration,
                outcome.clone(),
            )?);
            Ok(true)
        })?;
        Ok(())
    }

    /// A label worker's word on a step it claimed (`pid`: while still that headless-run's
    /// claim): kept in the step for the execution's runner to apply ([`Driver::take_reports`]).
    fn report(
        &mut self,
        id: &str,
        node: &str,
        iteration: u32,
        outcome: Outcome,
        pid: Option<i32>,
    ) -> Result<(), RunError> {
        let me = self.me.clone();
        self.update(id, |v| {
            let Some(t) = visit_mut(&mut v.steps, node, iteration) else {
                return Ok(false);
            };
            let Some(r) = t.run.as_mut() else {
                return Ok(false);
            };
            if v.ex.is_final()
                || t.status != StepStatus::Running
                || r.worker.as_deref() != Some(me.as_str())
                || r.report.is_some()
                || pid.is_some_and(|p| r.pid != Some(p))
            {
                return Ok(false);
            }
            r.report = Some(outcome.clone());
            Ok(true)
        })?;
        Ok(())
    }

    /// Labelled steps whose worker reported how they ended: their outcomes applied here
    /// (a label worker reports; the execution's own runner moves the pipeline). True when
    /// one was.
    fn take_reports(&mut self, id: &str, v: &View) -> Result<bool, RunError> {
        let reported: Vec<(String, u32, Outcome)> = v
            .steps
            .iter()
            .filter(|s| s.status == StepStatus::Running)
            .filter_map(|s| Some((s.node.clone(), s.iteration, s.run.as_ref()?.report.clone()?)))
            .collect();
        let any = !reported.is_empty();
        for (node, iteration, outcome) in reported {
            self.say(format!("{node}: its worker reports {}", describe(&outcome)));
            self.apply(id, &node, iteration, outcome)?;
        }
        Ok(any)
    }

    /// Drives the execution until it ends (or, with `detach`, only human steps are left).
    pub fn drive(&mut self, id: &str) -> Result<End, RunError> {
        let mut beat = Instant::now();
        let bell = hr_shared::store::doorbell::for_store(&self.paths);
        self.adopt(id)?;
        loop {
            self.reap()?;
            let mut v = self.load(id)?;
            if self.take_reports(id, &v)? {
                v = self.load(id)?;
            }
            if self.reconcile_workers(id, &v)? {
                v = self.load(id)?;
            }
            if v.ex.status == ExecutionState::Cancelled {
                for s in &mut self.started {
                    // The step's headless-run ends its tool's group and records the run cancelled.
                    // SAFETY: a signal to our own child.
                    unsafe { libc::kill(s.child.id() as i32, CANCEL_SIGNAL) };
                }
                for mut s in std::mem::take(&mut self.started) {
                    let _ = s.child.wait();
                }
                return Ok(End::Cancelled(v.ex.reason.unwrap_or_default()));
            }
            if v.ex.runner.as_deref() != Some(self.me.as_str()) {
                return Err(format!(
                    "{id}: another runner took it over ({})",
                    v.ex.runner.unwrap_or_default()
                )
                .into());
            }
            self.stop_cancelled(id, &v);
            self.start_ready(id, &v)?;
            self.check_humans(id, &v)?;
            let v = self.load(id)?;
            match engine::status(&v.def, &v.steps) {
                ExecutionStatus::Completed if self.started.is_empty() => {
                    self.finish(id)?;
                    return Ok(End::Completed);
                }
                ExecutionStatus::Failed(r) if self.started.is_empty() => {
                    self.withdraw_questions(id, &r);
                    self.finish(id)?;
                    return Ok(End::Failed(r));
                }
                ExecutionStatus::WaitingApproval if self.started.is_empty() && self.detach => {
                    self.release(id)?;
                    return Ok(End::Waiting);
                }
                _ => {}
            }
            if beat.elapsed() >= HEARTBEAT {
                self.update(id, |_| Ok(true))?;
                beat = Instant::now();
            }
            self.wait_for_news(bell.as_ref());
        }
    }

    /// Waits until a step's headless-run exits or the store's doorbell rings (a decision),
    /// at most a second (the heartbeat's beat).
    fn wait_for_news(&self, bell: Option<&hr_shared::store::doorbell::Doorbell>) {
        let mut fds: Vec<libc::pollfd> = Vec::new();
        for s in &self.started {
            match &s.pidfd {
                Some(fd) => fds.push(libc::pollfd {
                    fd: fd.as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                }),
                // No pidfd: look again soon.
                None => {
                    std::thread::sleep(Duration::from_millis(5));
                    return;
                }
            }
        }
        if let Some(b) = bell {
            if b.rang() {
                return;
            }
            fds.push(libc::pollfd {
                fd: b.fd(),
                events: libc::POLLIN,
                revents: 0,
            });
        }
        if fds.is_empty() {
            std::thread::sleep(LOOK);
            return;
        }
        // SAFETY: a valid array of pollfds of its length.
        unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, 1000) };
        if let Some(b) = bell {
            b.rang();
        }
    }

    /// The questions its human steps still ask, withdrawn once the execution has failed: no
    /// one is left to decide for a pipeline that no longer waits.
    fn withdraw_questions(&mut self, id: &str, why: &str) {
        let Ok(runs) = self.store.execution_runs(id) else {
            return;
        };
        let why = format!("the pipeline failed: {why}");
        let actor = proc::current_user();
        for r in runs
            .iter()
            .filter(|r| r.tool_name == "pipeline" && r.status == RunStatus::WaitingApproval)
        {
            if let Err(e) = self
                .store
                .withdraw_step_question(&r.tool_run_id, &why, &actor)
            {
                self.say(format!("{}: its question stays: {e}", r.tool_run_id));
            }
        }
    }

    /// Ends the drive: the runner lets go of a finished execution.
    fn finish(&mut self, id: &str) -> Result<(), RunError> {
        self.update(id, |v| {
            v.ex.runner = None;
            Ok(true)
        })?;
        Ok(())
    }

    /// Lets go of an execution left waiting for a person (`pipeline resume`, or the
    /// worker, picks it up after the decision).
    fn release(&mut self, id: &str) -> Result<(), RunError> {
        self.finish(id)
    }

    /// Steps another runner left running: a headless-run that has ended gives its outcome;
    /// one that still runs is waited for; one that never started is made ready again.
    fn adopt(&mut self, id: &str) -> Result<(), RunError> {
        let v = self.load(id)?;
        let left: Vec<Step> = v
            .steps
            .iter()
            .filter(|s| s.status == StepStatus::Running)
            .cloned()
            .collect();
        for s in left {
            // A label worker's that reported its end: applied as the runner goes.
            if s.run.as_ref().is_some_and(|r| r.report.is_some()) {
                continue;
            }
            // A label worker's, alive: its worker reports it.
            if s.run.as_ref().is_some_and(|r| {
                r.worker
                    .as_deref()
                    .is_some_and(|w| !runner_gone(w, r.beat_at.as_deref()))
            }) {
                continue;
            }
            self.adopt_one(id, s)?;
        }
        Ok(())
    }

    /// Labelled steps whose worker is gone (its host's process, or its beat stale): taken
    /// over as a dead runner's steps are — an ended headless-run gives its outcome, one
    /// that never started makes the step ready again, one still running is waited for.
    /// True when it took one over (the row moved).
    fn reconcile_workers(&mut self, id: &str, v: &View) -> Result<bool, RunError> {
        let gone: Vec<Step> = v
            .steps
            .iter()
            .filter(|s| {
                s.status == StepStatus::Running
                    && s.run.as_ref().is_some_and(|r| {
                        r.report.is_none()
                            && r.worker
                                .as_deref()
                                .is_some_and(|w| runner_gone(w, r.beat_at.as_deref()))
                    })
            })
            .cloned()
            .collect();
        let gone_none = gone.is_empty();
        for s in gone {
            self.say(format!(
                "{}: its worker ({}) is gone",
                s.node,
                s.run
                    .as_ref()
                    .and_then(|r| r.worker.clone())
                    .unwrap_or_default()
            ));
            self.adopt_one(id, s)?;
        }
        Ok(!gone_none)
    }

    /// One step another runner (or worker) left running.
    fn adopt_one(&mut self, id: &str, s: Step) -> Result<(), RunError> {
        // Without a pid in the store its headless-run never started: it waits at a pipe
        // for the runner's word after the pid is kept, and exits when the runner dies.
        let Some((pid, r)) = s.run.as_ref().and_then(|r| Some((r.pid?, r.clone()))) else {
            return self.back_to_ready(id, &s);
        };
        // On this host the process says whether it still runs; on another, only its row
        // does: looked for as long as a worker's beat may be late.
        let here = r.host == proc::hostname();
        let mut found = None;
        for n in 0..if here { 50 } else { 150 } {
            // Alive meanwhile: a long look must not make this runner seem gone.
            if n % 10 == 9 {
                self.update(id, |_| Ok(true))?;
            }
            let runs = self.store.execution_runs(id)?;
            found = runs.into_iter().find(|t| {
                t.shim_pid == Some(i64::from(pid))
                    && t.host.as_deref() == Some(r.host.as_str())
                    && r.pid_start
                        .is_none_or(|st| t.shim_start_time == Some(st as i64))
            });
            if found.is_some() || (here && !proc::same_process(pid, r.pid_start)) {
                break;
            }
            // Started, its row not written yet: look again shortly.
            std::thread::sleep(Duration::from_millis(200));
        }
        let Some(t) = found else {
            if here {
                // Its headless-run is gone without a row: it never got past its gate.
                return self.back_to_ready(id, &s);
            }
            // Released on another host, and no word of it: it may have run, so it is
            // not started again — the step fails.
            self.say(format!(
                "{}: its headless-run on {} left no record",
                s.node, r.host
            ));
            return self.apply(
                id,
                &s.node,
                s.iteration,
                Outcome::Exited {
                    code: 125,
                    result: None,
                },
            );
        };
        let code = if t.exit_code.is_some() && t.status.is_final() {
            self.say(format!(
                "{}: adopted {}: it ended with {}",
                s.node,
                t.tool_run_id,
                t.exit_code.unwrap_or(1)
            ));
            t.exit_code.unwrap_or(1)
        } else {
            // Still running under a headless-run that is not our child: wait for its
            // row to end.
            self.say(format!(
                "{}: waiting for {} (left running)",
                s.node, t.tool_run_id
            ));
            self.wait_for_run(id, &t.tool_run_id)?
        };
        let result = read_result(&result_file(&self.paths, id, &s));
        self.apply(id, &s.node, s.iteration, Outcome::Exited { code, result })
    }

    /// A step marked running whose command never started: ready again.
    fn back_to_ready(&mut self, id: &str, s: &Step) -> Result<(), RunError> {
        self.say(format!("{}: never started; ready again", s.node));
        self.update(id, |v| {
            let Some(t) = step_mut(&mut v.steps, s) else {
                return Ok(false);
            };
            // Still as it was seen (not claimed anew meanwhile).
            if t.status != StepStatus::Running || t.run != s.run {
                return Ok(false);
            }
            t.status = StepStatus::Ready;
            t.run = None;
            Ok(true)
        })?;
        Ok(())
    }

    /// Waits until run `run_id` has ended; its exit code (125 when its headless-run
    /// vanished without recording an end; 130 when the execution was cancelled meanwhile).
    fn wait_for_run(&mut self, id: &str, run_id: &str) -> Result<i32, RunError> {
        let host = hr_shared::rules::LocalHost::new();
        let mut beat = Instant::now();
        loop {
            let runs = self.store.execution_runs(id)?;
            match runs.iter().find(|t| t.tool_run_id == run_id) {
                Some(t) if t.status.is_final() => return Ok(t.exit_code.unwrap_or(1)),
                Some(t) if hr_shared::rules::shim_gone(t, &host).is_some() => {
                    self.say(format!("{run_id}: its headless-run vanished"));
                    return Ok(125);
                }
                None => return Ok(125),
                Some(_) => {}
            }
            if beat.elapsed() >= HEARTBEAT {
                let v = self.update(id, |_| Ok(true))?;
                if v.ex.status == ExecutionState::Cancelled {
                    return Ok(130);
                }
                beat = Instant::now();
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Children that have exited: their outcomes.
    fn reap(&mut self) -> Result<(), RunError> {
        let mut done = Vec::new();
        let mut i = 0;
        while i < self.started.len() {
            match self.started[i].child.try_wait() {
                Ok(Some(status)) => {
                    let s = self.started.remove(i);
                    done.push((s, status));
                }
                Ok(None) => i += 1,
                Err(e) => return Err(format!("cannot wait for a step: {e}").into()),
            }
        }
        for (s, status) in done {
            use std::os::unix::process::ExitStatusExt;
            if !s.released {
                continue;
            }
            let code = status
                .code()
                .unwrap_or_else(|| 128 + status.signal().unwrap_or(0));
            let mut probe = Step::new(&s.node, s.iteration, StepStatus::Running);
            probe.attempt = s.attempt;
            let id = s.execution.clone();
            let result = read_result(&result_file(&self.paths, &id, &probe));
            crash_point("after-exit");
            self.say(format!("{}: exited with {code}", s.node));
            let pid = s.child.id() as i32;
            let outcome = Outcome::Exited { code, result };
            self.unapplied
                .push((id, s.node.clone(), s.iteration, outcome, pid, 0));
        }
        // Oldest first, those a store error kept from being written included.
        while let Some((ex, node, iteration, outcome, pid, tries)) = self.unapplied.first().cloned()
        {
            if let Err(e) = self.apply_claimed(&ex, &node, iteration, outcome, Some(pid)) {
                if tries + 1 >= UNAPPLIED_TRIES {
                    self.unapplied.remove(0);
                    self.say(format!(
                        "{ex}: the end of step {node} could not be written ({e}); left to whoever resumes it"
                    ));
                } else {
                    self.unapplied[0].5 = tries + 1;
                }
                return Err(e);
            }
            self.unapplied.remove(0);
        }
        Ok(())
    }

    /// Steps the engine cancelled (the losers of a `wait_for: first` merge): their commands
    /// stopped (the step's headless-run ends its tool's group and records its run), their
    /// questions withdrawn.
    fn stop_cancelled(&mut self, id: &str, v: &View) {
        self.stop_cancelled_commands(id, v);
        self.withdraw_cancelled_questions(v);
    }

    /// The commands of this runner's (or label worker's) steps that were cancelled.
    fn stop_cancelled_commands(&mut self, id: &str, v: &View) {
        let cancelled = |node: &str, iteration: u32| {
            v.steps.iter().any(|t| {
                t.node == node && t.iteration == iteration && t.status == StepStatus::Cancelled
            })
        };
        let mut told = Vec::new();
        for s in &mut self.started {
            if s.execution == id && !s.stopping && cancelled(&s.node, s.iteration) {
                s.stopping = true;
                // SAFETY: a signal to our own child.
                unsafe { libc::kill(s.child.id() as i32, CANCEL_SIGNAL) };
                told.push(s.node.clone());
            }
        }
        for node in told {
            self.say(format!(
                "{node}: cancelled (another way reached the merge first)"
            ));
        }
    }

    /// The questions of cancelled human steps, withdrawn once each.
    fn withdraw_cancelled_questions(&mut self, v: &View) {
        let asked: Vec<(String, String)> = v
            .steps
            .iter()
            .filter(|t| t.status == StepStatus::Cancelled)
            .filter(|t| {
                matches!(
                    v.def.node(&t.node).map(|n| &n.kind),
                    Some(Kind::Human { .. })
                )
            })
            .filter_map(|t| {
                let run = t.run.as_ref()?.tool_run_id.clone()?;
                Some((run, t.reason.clone().unwrap_or_default()))
            })
            .collect();
        let actor = proc::current_user();
        for (run, why) in asked {
            if self.withdrawn.insert(run.clone())
                && let Err(e) =
                    self.store
                        .withdraw_step_question(&run, &format!("cancelled: {why}"), &actor)
            {
                self.say(format!("{run}: its question stays: {e}"));
            }
        }
    }

    /// Starts the ready tasks, gates and human steps; tasks and gates only while fewer than
    /// the pipeline's `max_parallel` run.
    fn start_ready(&mut self, id: &str, v: &View) -> Result<(), RunError> {
        let ready: Vec<Step> = v
            .steps
            .iter()
            .filter(|s| s.status == StepStatus::Ready)
            .cloned()
            .collect();
        let mut room = room(v);
        for s in ready {
            let Some(node) = v.def.node(&s.node) else {
                continue;
            };
            let command = matches!(node.kind, Kind::Task { .. } | Kind::Gate { .. });
            if command && room == Some(0) {
                if self
                    .told
                    .insert((format!("max_parallel:{}", s.node), s.iteration))
                {
                    self.say(format!(
                        "{}: waits: max_parallel ({}) steps run",
                        s.node,
                        v.def.max_parallel.unwrap_or_default()
                    ));
                }
                continue;
            }
            // A labelled step waits for a worker of its label (`monitor worker --labels`):
            // said once.
            if let Kind::Task { run } | Kind::Gate { run, .. } = &node.kind
                && let Some(label) = &run.host
            {
                if self.told.insert((s.node.clone(), s.iteration)) {
                    self.say(format!(
                        "{}: waits for a worker of label `{label}` (monitor worker --labels {label} on that host, with this store)",
                        s.node
                    ));
                }
                continue;
            }
            match &node.kind {
                Kind::Task { .. } | Kind::Gate { .. } => {
                    self.start_command(id, v, &s)?;
                    room = room.map(|r| r.saturating_sub(1));
                }
                Kind::Human { .. } => self.ask_human(id, v, &s)?,
                _ => {}
            }
        }
        Ok(())
    }

    /// Moves a ready step to `status` with `run` (so that no other runner takes it): false
    /// when it is not ready any more, or the execution has ended or failed (nothing new
    /// starts then).
    fn mark_ready(
        &mut self,
        id: &str,
        s: &Step,
        status: StepStatus,
        run: StepRun,
    ) -> Result<bool, RunError> {
        let mut marked = false;
        self.update(id, |w| {
            marked = false;
            if stopped(w) {
                return Ok(false);
            }
            // The bound on what runs at once, held on the row being swapped: two runners
            // (or a runner and a label worker) cannot both take its last place.
            let command = w
                .def
                .node(&s.node)
                .is_some_and(|n| matches!(n.kind, Kind::Task { .. } | Kind::Gate { .. }));
            if status == StepStatus::Running && command && room(w) == Some(0) {
                return Ok(false);
            }
            let Some(t) = step_mut(&mut w.steps, s) else {
                return Ok(false);
            };
            if t.status != StepStatus::Ready {
                return Ok(false);
            }
            t.status = status;
            t.run = Some(run.clone());
            marked = true;
            Ok(true)
        })?;
        Ok(marked)
    }

    /// Marks the step running (so that no other runner starts it), then starts its
    /// headless-run and records the pid.
    fn start_command(&mut self, id: &str, v: &View, s: &Step) -> Result<(), RunError> {
        let node = v.def.node(&s.node).expect("ready steps are nodes");
        let (Kind::Task { run } | Kind::Gate { run, .. }) = &node.kind else {
            return Ok(());
        };
        // Only what was checked and pinned at the start runs, whatever wrote the row since.
        if let Some(why) = self.unpinned(v) {
            self.say(format!("{}: not started: {why}", s.node));
            return self.refuse(id, s, why);
        }
        // Whatever the row says, a step a human step guards starts only once that human
        // step's approval is in the store.
        match self.unguarded(id, v, s) {
            Ok(None) => {}
            Ok(Some(why)) => {
                self.say(format!("{}: {why}", s.node));
                return self.refuse(id, s, why);
            }
            Err(e) => {
                self.say(format!(
                    "{}: cannot check what guards it ({e}); it waits",
                    s.node
                ));
                return Ok(());
            }
        }
        let here = proc::hostname();
        let started_at = time::now_rfc3339();
        let worker = self.worker_mode.then(|| self.me.clone());
        // A label worker claims as its own identity (on PostgreSQL the server checks it).
        let login = match self.worker_mode {
            true => Some(self.identity()?),
            false => None,
        };
        let run_at = StepRun {
            host: here,
            started_at,
            worker: worker.clone(),
            beat_at: worker.as_ref().map(|_| time::now_rfc3339()),
            login,
            ..StepRun::default()
        };
        if !self.mark_ready(id, s, StepStatus::Running, run_at)? {
            return Ok(());
        }
        crash_point("after-mark");
        let result = result_file(&self.paths, id, s);
        if let Some(dir) = result.parent() {
            hr_shared::paths::create_private_dir(dir)
                .map_err(|e| format!("cannot make {}: {e}", dir.display()))?;
        }
        let _ = std::fs::remove_file(&result);
        // The step's headless-run waits at a pipe until its pid is in the store
        // (`hr_shared::pipeline::ENV_GATE_FD`): killed before that, the runner leaves no
        // headless-run behind (the pipe's end closes, it exits without starting), so a
        // resume that finds no pid may start the step. Started directly (no shell, no
        // `pre_exec`: the cheap way to start a process), it keeps its pid and start time.
        let mut fds = [0; 2];
        // SAFETY: fds has room for the two descriptors pipe2 writes.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
            return Err(format!("cannot make a pipe: {}", std::io::Error::last_os_error()).into());
        }
        // SAFETY: both are fresh descriptors nobody else owns.
        let (gate_r, gate_w) = unsafe {
            (
                std::os::fd::OwnedFd::from_raw_fd(fds[0]),
                std::os::fd::OwnedFd::from_raw_fd(fds[1]),
            )
        };
        // The read end alone is inherited (the runner starts one step at a time; it is
        // closed here right after the start). SAFETY: a flag of a descriptor we own.
        if unsafe { libc::fcntl(gate_r.as_raw_fd(), libc::F_SETFD, 0) } != 0 {
            return Err(format!(
                "cannot pass the step its gate: {}",
                std::io::Error::last_os_error()
            )
            .into());
        }
        let mut cmd = Command::new(&self.shim);
        if let Some(t) = &run.timeout {
            cmd.args(["--timeout", t]);
        }
        if let Some(t) = &run.stall_timeout {
            cmd.args(["--stall-timeout", t]);
        }
        cmd.args(["--on-prompt", run.on_prompt.as_deref().unwrap_or("wait")]);
        // The directory the pipeline was started in, whoever resumes it from wherever; a
        // label worker on a host without it uses its own.
        let mut base = PathBuf::from(&v.ex.dir);
        if self.worker_mode && !base.is_dir() {
            base = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/"));
        }
        // Given to headless-run rather than set here: a command with a directory to change
        // to is started by fork (whose cost grows with this process's memory), one without
        // by the cheaper posix_spawn.
        cmd.arg("--cwd").arg(match &run.cwd {
            Some(dir) => base.join(dir),
            None => base,
        });
        cmd.arg("--").args(run.command.argv());
        cmd.envs(
            v.vars
                .iter()
                .map(|(k, val)| (format!("PIPELINE_VAR_{k}"), val.clone())),
        )
        .envs(&run.env)
        .envs(s.env.iter().filter(|(k, _)| v.def.allows_env(&s.node, k)))
        .env(hr_shared::mode::ENV_EXECUTION_ID, id)
        // Set after the node's own `env`, which cannot name the gate away.
        .env(
            hr_shared::pipeline::ENV_GATE_FD,
            gate_r.as_raw_fd().to_string(),
        )
        .env(hr_shared::event::ENV_RESULT_FILE, &result)
        .env(
            hr_shared::event::ENV_PIPELINE_STEP,
            format!("{id}/{}#{}", s.node, s.iteration),
        )
        .env("HEADLESS", "1")
        .stdin(Stdio::null());
        self.say(format!(
            "{}: {}",
            s.node,
            hr_shared::shell::words(&run.command.argv())
        ));
        let spawned = cmd.spawn();
        drop(gate_r);
        let child = match spawned {
            Ok(c) => c,
            Err(e) => {
                self.say(format!(
                    "{}: cannot start {}: {e}",
                    s.node,
                    self.shim.display()
                ));
                return self.apply(
                    id,
                    &s.node,
                    s.iteration,
                    Outcome::Exited {
                        code: 127,
                        result: None,
                    },
                );
            }
        };
        let pid = child.id() as i32;
        let pid_start = proc::read_stat(pid).map(|st| st.start_time);
        self.started.push(Started {
            execution: id.to_owned(),
            node: s.node.clone(),
            iteration: s.iteration,
            attempt: s.attempt,
            child,
            pidfd: pidfd(pid),
            released: false,
            stopping: false,
        });
        let mut kept = false;
        let recorded = self.update(id, |w| {
            // Cancelled (or failed) meanwhile: it never starts.
            if stopped(w) {
                kept = false;
                return Ok(false);
            }
            let Some(t) = step_mut(&mut w.steps, s) else {
                kept = false;
                return Ok(false);
            };
            match &mut t.run {
                // Still ours: not taken over meanwhile (a worker thought gone).
                Some(r) if t.status == StepStatus::Running && r.worker == worker => {
                    r.pid = Some(pid);
                    r.pid_start = pid_start;
                    kept = true;
                    Ok(true)
                }
                _ => {
                    kept = false;
                    Ok(false)
                }
            }
        });
        // Only now may it start, and only with its pid kept (dropping the pipe unwritten
        // makes it exit instead; its exit is then reaped as a step that did not run).
        if recorded.is_ok() && kept {
            crash_point("after-pid");
            // SAFETY: two bytes from a valid buffer to a descriptor we own.
            unsafe { libc::write(gate_w.as_raw_fd(), b"g\n".as_ptr().cast(), 2) };
            if let Some(last) = self.started.last_mut() {
                last.released = true;
            }
        }
        drop(gate_w);
        recorded.map(|_| ())
    }

    /// Why `s` may not start, from the store rather than the row: a human step guarding it
    /// without an approval there (its own question, asked in its own run of this
    /// execution, the newest question of that step, approved by a person); or, when it is
    /// guarded, a step that has run as often as it may already, or a second visit of a step
    /// on no loop. `Err`: the store could not be read (tried again later, not a refusal).
    fn unguarded(&mut self, id: &str, v: &View, s: &Step) -> Result<Option<String>, RunError> {
        // (A visit before that was only skipped — a way not taken — never ran.)
        let ran_before = v.steps.iter().any(|t| {
            t.node == s.node && t.iteration < s.iteration && t.status != StepStatus::Skipped
        });
        if ran_before && !hr_shared::pipeline::on_a_loop(&v.def, &s.node) {
            return Ok(Some(format!(
                "not started: `{}` is on no loop, so it has no visit {}",
                s.node, s.iteration
            )));
        }
        if hr_shared::pipeline::guards(&v.def, &s.node).is_empty() {
            return Ok(None);
        }
        // Only runs of the execution's own identity and of the label workers it named
        // count: whatever another login tags with this execution is not its history.
        let runs: Vec<ToolRun> = self
            .store
            .execution_runs(id)?
            .into_iter()
            .filter(|r| match (r.owner.as_deref(), v.ex.owner.as_deref()) {
                (Some(o), Some(starter)) => o == starter || v.ex.workers.iter().any(|w| w == o),
                _ => true,
            })
            .collect();
        let tag = format!("{id}/{}#{}", s.node, s.iteration);
        let ran = runs
            .iter()
            .filter(|r| r.tool_name != "pipeline" && r.pipeline_step() == Some(tag.as_str()))
            .count();
        if ran > s.attempt as usize {
            return Ok(Some(format!(
                "not started: `{}` has run {ran} time(s) already",
                s.node
            )));
        }
        let store = &mut self.store;
        let verified = &mut self.verified;
        hr_shared::pipeline::unguarded(&v.def, &v.steps, s, |h| {
            let key = (id.to_owned(), h.node.clone(), h.iteration);
            if verified.contains(&key) {
                return Ok(true);
            }
            let Some(ap) = h.run.as_ref().and_then(|r| r.approval_id.as_deref()) else {
                return Ok(false);
            };
            let a = store.step_approval(ap)?;
            let proved = hr_shared::pipeline::human_step_proved(&v.ex, h, a.as_ref(), &runs);
            if proved {
                verified.insert(key);
            }
            Ok(proved)
        })
    }

    /// Fails a ready step that may not start (only while it is still ready).
    fn refuse(&mut self, id: &str, s: &Step, why: String) -> Result<(), RunError> {
        // A label worker claims it and reports the refusal: the runner fails it.
        if self.worker_mode {
            let run = StepRun {
                host: proc::hostname(),
                started_at: time::now_rfc3339(),
                worker: Some(self.me.clone()),
                beat_at: Some(time::now_rfc3339()),
                login: self.identity.clone(),
                ..StepRun::default()
            };
            if self.mark_ready(id, s, StepStatus::Running, run)? {
                self.report(
                    id,
                    &s.node,
                    s.iteration,
                    Outcome::Refused { reason: why },
                    None,
                )?;
            }
            return Ok(());
        }
        self.update(id, |w| {
            if stopped(w)
                || !w.steps.iter().any(|t| {
                    t.node == s.node && t.iteration == s.iteration && t.status == StepStatus::Ready
                })
            {
                return Ok(false);
            }
            w.steps = Arc::new(engine::advance(
                &w.def,
                &w.vars,
                &w.steps,
                &s.node,
                s.iteration,
                Outcome::Refused {
                    reason: why.clone(),
                },
            )?);
            Ok(true)
        })?;
        Ok(())
    }

    /// Asks a human step's question: a run of its own (`pipeline`, parked on the
    /// approval, the step in its metadata) with a cooperative approval; the step waits.
    fn ask_human(&mut self, id: &str, v: &View, s: &Step) -> Result<(), RunError> {
        let node = v.def.node(&s.node).expect("ready steps are nodes");
        let Kind::Human {
            title,
            question,
            options,
            default,
            expires,
            ..
        } = &node.kind
        else {
            return Ok(());
        };
        let run_id = id::new_run_id();
        let argv = vec!["pipeline".to_owned(), v.def.name.clone(), s.node.clone()];
        // The pipeline's directory, whoever asks from wherever.
        let cwd = v.ex.dir.clone();
        let now = time::now_rfc3339();
        // Marked first: a runner killed after it asks leaves the approval findable.
        let here = proc::hostname();
        let asked_at = StepRun {
            host: here.clone(),
            started_at: now.clone(),
            tool_run_id: Some(run_id.clone()),
            ..StepRun::default()
        };
        if !self.mark_ready(id, s, StepStatus::WaitingApproval, asked_at)? {
            return Ok(());
        }
        crash_point("after-ask-mark");
        let row = ToolRun {
            tool_run_id: run_id.clone(),
            tool_name: "pipeline".into(),
            execution_id: Some(id.to_owned()),
            status: RunStatus::WaitingApproval,
            reason: Some(format!("pipeline {} waits at `{}`", v.def.name, s.node)),
            // Parked (90): no headless-run supervises it, nothing reconciles it away.
            exit_code: Some(i32::from(hr_shared::exit::shim::APPROVAL_PENDING)),
            started_at: now.clone(),
            completed_at: None,
            last_output_at: None,
            last_heartbeat_at: None,
            supervisor_heartbeat_at: None,
            last_error_msg: None,
            pid: None,
            shim_pid: None,
            shim_start_time: None,
            host: Some(here.clone()),
            argv_json: argv.clone(),
            cwd: Some(cwd.clone()),
            resumed_from: None,
            metadata: Some(serde_json::json!({
                "pipeline": format!("{id}/{}#{}", s.node, s.iteration),
                "uid": hr_shared::proc::real_uid(),
            })),
            updated_at: now,
            owner: None,
        };
        let actor = proc::current_user();
        self.store
            .record(&run_id, &[RunWrite::Start(Box::new(row))], &actor, false)?;
        let who = Asker {
            tool_run_id: run_id.clone(),
            tool: "pipeline".into(),
            execution_id: id.to_owned(),
            request_fingerprint: fingerprint::request("pipeline", &argv, &cwd),
            argv,
            cwd,
            tool_digest: None,
            actor,
            review: v.def.review_of(&s.node),
        };
        let req = CooperativeRequest {
            approval_id: None,
            tool_run_id: Some(run_id.clone()),
            question: question.clone(),
            options: options
                .iter()
                .map(|o| ApprovalOption {
                    value: o.clone(),
                    label: o.clone(),
                    keys: None,
                })
                .collect(),
            default: default.clone(),
            allows_text: false,
            context: Some(format!(
                "Pipeline {} ({id}), step {}: {title}",
                v.def.name, s.node
            )),
            expires_in_seconds: None,
        };
        // The step's own `expires`, else the configured `approval_ttl` (for `pipeline`), as
        // for any approval: a human step no one decides does not wait forever.
        let ttl = match expires.as_deref() {
            Some(e) => time::parse_duration(e).ok(),
            None => hr_shared::config::Config::load(
                std::path::Path::new(&v.ex.dir),
                &hr_shared::paths::real_env,
            )
            .map(|c| c.settings_for("pipeline").resolve().approval_ttl)
            .unwrap_or(hr_shared::config::Resolved::default().approval_ttl),
        };
        let asked = self.store.cooperative(&who, &req, ttl, OnExpire::Reject)?;
        hr_shared::control::log_events(&self.paths.combined_log(), &asked.effects.events);
        let Cooperative::Pending(approval) = asked.value else {
            return Err(format!("{}: the approval was not asked", s.node).into());
        };
        crash_point("after-ask");
        self.say(format!(
            "{}: waiting for a decision on {} ({title})",
            s.node, approval.approval_id
        ));
        let ap = approval.approval_id.clone();
        self.update(id, |w| {
            let Some(t) = step_mut(&mut w.steps, s) else {
                return Ok(false);
            };
            match &mut t.run {
                Some(r) => {
                    r.approval_id = Some(ap.clone());
                    Ok(true)
                }
                None => Ok(false),
            }
        })?;
        Ok(())
    }

    /// Human steps whose approval has been decided (or expired): their outcomes.
    fn check_humans(&mut self, id: &str, v: &View) -> Result<(), RunError> {
        let waiting: Vec<Step> = v
            .steps
            .iter()
            .filter(|s| s.status == StepStatus::WaitingApproval)
            .cloned()
            .collect();
        if !waiting.is_empty() {
            // An approval past its `expires` is expired here (a rejection), as a worker
            // would.
            self.store.expire_due()?;
        }
        for s in waiting {
            let Some(r) = &s.run else { continue };
            let Some(ap) = &r.approval_id else {
                // Killed between marking and asking: find the question by its run.
                if let Some(run) = &r.tool_run_id
                    && let Some(a) = self.approval_of_run(run)?
                {
                    let ap = a.approval_id.clone();
                    self.update(id, |w| {
                        if let Some(t) = step_mut(&mut w.steps, &s)
                            && let Some(r) = &mut t.run
                        {
                            r.approval_id = Some(ap.clone());
                            return Ok(true);
                        }
                        Ok(false)
                    })?;
                } else {
                    // Never asked: its run (if it was written) ends, and the step asks anew.
                    if let Some(run) = &r.tool_run_id {
                        let change = StatusChange {
                            exit_code: Some(1),
                            finished: true,
                            ..StatusChange::to(
                                RunStatus::Failed,
                                Some("the pipeline's runner stopped before asking".into()),
                            )
                        };
                        let _ = self
                            .store
                            .close_step_run(run, None, change, &proc::current_user());
                    }
                    self.update(id, |w| {
                        if let Some(t) = step_mut(&mut w.steps, &s)
                            .filter(|t| t.status == StepStatus::WaitingApproval)
                        {
                            t.status = StepStatus::Ready;
                            t.run = None;
                            return Ok(true);
                        }
                        Ok(false)
                    })?;
                }
                continue;
            };
            let Some(a) = self.store.step_approval(ap)? else {
                continue;
            };
            if a.status == ApprovalStatus::Pending {
                continue;
            }
            let approved = hr_shared::pipeline::approves(&a);
            self.say(format!(
                "{}: {} by {}",
                s.node,
                if approved { "approved" } else { "not approved" },
                hr_shared::sanitize::sanitize_line(a.decided_by.as_deref().unwrap_or("nobody"))
            ));
            // The question's run ends with the decision, and the answer is used up — unless
            // that is done (the decision moved the step and ended the run, or a runner before
            // this one closed it and died).
            if let Some(run) = &r.tool_run_id
                && a.consumed_at.is_none()
            {
                let actor = proc::current_user();
                self.store.close_step_run(
                    run,
                    Some(&a.approval_id),
                    hr_shared::pipeline::closing(&a),
                    &actor,
                )?;
                crash_point("after-close");
            }
            let outcome = hr_shared::pipeline::outcome_of(&a);
            self.apply(id, &s.node, s.iteration, outcome)?;
        }
        Ok(())
    }

    /// The approval a human step's run asked, if it got as far as asking.
    fn approval_of_run(&mut self, run: &str) -> Result<Option<Approval>, RunError> {
        Ok(self.store.approvals_of_run(run)?.into_iter().next())
    }
}

/// A label worker (`monitor worker --labels a,b`): it runs the ready steps whose `host` is
/// one of its labels, of the open executions its store shows it (on PostgreSQL: those its
/// own login started), each claimed by a compare-and-swap so that one worker runs it, and
/// writes their outcomes to the execution; the execution's runner goes on from there. While
/// a step runs the worker beats on it; a runner that finds the beat stale (or the worker's
/// process gone, on its host) takes the step over as it takes over a dead runner's.
pub struct LabelWorker {
    driver: Driver,
    labels: Vec<String>,
    beat: Instant,
    /// Executions it will not run steps of, already said.
    refused: std::collections::HashSet<String>,
}

impl LabelWorker {
    /// `trusted`: the identities whose executions' labelled steps it runs besides its own
    /// (its host's `[worker] pipelines_from`; their starters must name it too).
    pub fn new(
        paths: StatePaths,
        store: Box<dyn PipelineStore>,
        shim: PathBuf,
        labels: Vec<String>,
        trusted: Vec<String>,
    ) -> Self {
        let mut driver = Driver::new(paths, store, shim, false, true);
        driver.worker_mode = true;
        driver.kept = Some(Vec::new());
        driver.trusted = trusted;
        LabelWorker {
            driver,
            labels,
            beat: Instant::now(),
            refused: std::collections::HashSet::new(),
        }
    }

    /// How many steps it runs now.
    pub fn busy(&self) -> usize {
        self.driver.started.len()
    }

    /// One pass: the outcomes of its steps that ended, the end of those whose execution was
    /// cancelled, a beat on those still running, and (with `claim`) new steps. Returns what
    /// it did, one line each.
    pub fn pass(&mut self, claim: bool) -> Result<Vec<String>, RunError> {
        let out = self.pass_inner(claim);
        let said = self
            .driver
            .kept
            .as_mut()
            .map(std::mem::take)
            .unwrap_or_default();
        out.map(|()| said)
    }

    fn pass_inner(&mut self, claim: bool) -> Result<(), RunError> {
        let d = &mut self.driver;
        // An outcome the store refused does not stop the beats of the other steps.
        if let Err(e) = d.reap() {
            d.say(e.to_string());
        }
        let mine: Vec<(String, String, u32)> = d
            .started
            .iter()
            .map(|s| (s.execution.clone(), s.node.clone(), s.iteration))
            .collect();
        let beat = self.beat.elapsed() >= HEARTBEAT;
        for (ex, node, iteration) in &mine {
            // One execution that cannot be read stops neither the others nor their beats.
            let v = match d.load(ex) {
                Ok(v) => v,
                Err(e) => {
                    d.say(e.to_string());
                    continue;
                }
            };
            if v.ex.status == ExecutionState::Cancelled {
                for s in d
                    .started
                    .iter()
                    .filter(|s| s.execution == *ex && s.node == *node)
                {
                    // SAFETY: a signal to our own child (its headless-run ends its tool).
                    unsafe { libc::kill(s.child.id() as i32, CANCEL_SIGNAL) };
                }
                continue;
            }
            // A labelled step that lost a `wait_for: first` race: stopped here too.
            d.stop_cancelled_commands(ex, &v);
            if beat {
                let me = d.me.clone();
                let beaten = d.update(ex, |w| {
                    if w.ex.is_final() {
                        return Ok(false);
                    }
                    let Some(t) = visit_mut(&mut w.steps, node, *iteration) else {
                        return Ok(false);
                    };
                    match &mut t.run {
                        Some(r)
                            if t.status == StepStatus::Running
                                && r.worker.as_deref() == Some(me.as_str()) =>
                        {
                            r.beat_at = Some(time::now_rfc3339());
                            Ok(true)
                        }
                        _ => Ok(false),
                    }
                });
                if let Err(e) = beaten {
                    d.say(e.to_string());
                }
            }
        }
        if beat {
            self.beat = Instant::now();
        }
        // Only the executions with a step running here stay known: a long-lived worker
        // keeps no copy of those it is done with.
        let running = &d.started;
        d.known
            .retain(|id, _| running.iter().any(|s| s.execution == *id));
        if !claim {
            return Ok(());
        }
        let open = d.store.open_pipelines(500)?;
        let identity = d.identity()?;
        for ex in open {
            if ex.status != ExecutionState::Running {
                continue;
            }
            let id = ex.execution_id.clone();
            // Only its own identity's, or a trusted starter's that named it (DESIGN §14):
            // what a row says never makes a host run someone's command.
            if let Some(why) = hr_shared::rules::labelled_not_ours(
                &ex,
                &identity,
                proc::effective_uid(),
                &d.trusted,
            ) {
                if self.refused.insert(id.clone()) {
                    d.say(format!("{id}: its labelled steps are not run here: {why}"));
                }
                continue;
            }
            let v = match view(ex) {
                Ok(v) => v,
                Err(e) => {
                    d.say(e.to_string());
                    continue;
                }
            };
            if stopped(&v) {
                continue;
            }
            let ready: Vec<Step> = v
                .steps
                .iter()
                .filter(|s| s.status == StepStatus::Ready)
                .filter(|s| {
                    v.def.node(&s.node).is_some_and(|n| match &n.kind {
                        Kind::Task { run } | Kind::Gate { run, .. } => run
                            .host
                            .as_ref()
                            .is_some_and(|h| self.labels.iter().any(|l| l == h)),
                        _ => false,
                    })
                })
                .cloned()
                .collect();
            for s in ready.into_iter().take(room(&v).unwrap_or(usize::MAX)) {
                d.say(format!("{id}: step {} (its label is one of ours)", s.node));
                if let Err(e) = d.start_command(&id, &v, &s) {
                    d.say(format!("{id}: step {}: {e}", s.node));
                }
            }
        }
        Ok(())
    }
}

/// For the tests of crash safety: `HEADLESS_RUN_TEST_CRASH=POINT` kills the runner (-9)
/// when it reaches that point (`after-mark`, `after-pid`, `after-exit`, `after-ask-mark`,
/// `after-ask`, `after-close`), as a power cut or an OOM kill would. Only in the debug
/// builds the tests run: a release build has no such switch.
#[cfg(debug_assertions)]
fn crash_point(point: &str) {
    if std::env::var_os("HEADLESS_RUN_TEST_CRASH").is_some_and(|p| p == point) {
        // SAFETY: a signal to this process.
        unsafe { libc::kill(libc::getpid(), libc::SIGKILL) };
    }
}

#[cfg(not(debug_assertions))]
fn crash_point(_point: &str) {}

/// The visit `s` names, to change (copied first when shared, and only it).
fn step_mut<'a>(steps: &'a mut Arc<Vec<Step>>, s: &Step) -> Option<&'a mut StepData> {
    visit_mut(steps, &s.node, s.iteration)
}

/// Visit `iteration` of `node`, to change (copied first when shared, and only it).
fn visit_mut<'a>(
    steps: &'a mut Arc<Vec<Step>>,
    node: &str,
    iteration: u32,
) -> Option<&'a mut StepData> {
    let i = steps
        .iter()
        .position(|t| t.node == node && t.iteration == iteration)?;
    Arc::make_mut(steps).get_mut(i).map(|t| &mut **t)
}

/// An outcome as a worker's report reads.
fn describe(o: &Outcome) -> String {
    match o {
        Outcome::Exited { code, .. } => format!("exit {code}"),
        Outcome::Refused { reason } => format!("it was not started: {reason}"),
        Outcome::Approved { .. } => "approved".into(),
        Outcome::Rejected { reason } => format!("rejected: {reason}"),
    }
}

/// Whether the execution takes no new step: it has ended (cancelled too) or a step failed.
/// How many more tasks and gates may start under the pipeline's `max_parallel` (`None`: no
/// bound): the bound less those running, wherever they run.
fn room(v: &View) -> Option<usize> {
    let running = v
        .steps
        .iter()
        .filter(|s| s.status == StepStatus::Running)
        .filter(|s| {
            v.def
                .node(&s.node)
                .is_some_and(|n| matches!(n.kind, Kind::Task { .. } | Kind::Gate { .. }))
        })
        .count();
    v.def
        .max_parallel
        .map(|m| (m as usize).saturating_sub(running))
}

fn stopped(v: &View) -> bool {
    v.ex.is_final() || matches!(engine::status(&v.def, &v.steps), ExecutionStatus::Failed(_))
}
