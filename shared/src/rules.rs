//! The rules in front of the store, as plain functions over data: a run's lifecycle phase,
//! whether its shim is gone, whether a retry may take over an approval, whether a decision
//! answers a prompt. Facts only the caller's machine knows (its host name, whether pid P
//! still runs with start time S) come in through [`HostFacts`], never as queries made inside
//! a transaction, so a central server can apply the rules for another host.

use crate::approvals::Approval;
use crate::exit::shim::{APPROVAL_PENDING, STALLED};
use crate::prompt::Prompt;
use crate::runs::{SUPERVISOR_HEARTBEAT, ToolRun};
use crate::status::RunStatus;
use crate::{proc, time};
use std::time::Duration;

/// A supervisor heartbeat older than this means the shim of a run on another host is gone.
pub const STALE_HEARTBEAT: Duration = Duration::from_secs(SUPERVISOR_HEARTBEAT.as_secs() * 10);

/// The reason recorded for a run whose shim is gone.
pub const VANISHED: &str = "supervisor vanished";

/// What became of a process the rules ask about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub enum Liveness {
    /// It runs, and it is the same process (same start time).
    Same,
    /// The pid runs, but it is another process now.
    Reused,
    /// Nothing runs with that pid.
    Gone,
}

/// What only the caller's machine knows.
pub trait HostFacts {
    /// This host's name, as runs record it.
    fn host(&self) -> &str;
    /// Whether `pid` runs here with `start_time` (clock ticks since boot; `None`: any).
    fn process(&self, pid: i32, start_time: Option<u64>) -> Liveness;
}

/// The facts of the machine this process runs on.
#[derive(Debug, Clone)]
pub struct LocalHost {
    host: String,
}

impl LocalHost {
    pub fn new() -> Self {
        LocalHost {
            host: proc::hostname(),
        }
    }
}

impl Default for LocalHost {
    fn default() -> Self {
        LocalHost::new()
    }
}

impl HostFacts for LocalHost {
    fn host(&self) -> &str {
        &self.host
    }

    fn process(&self, pid: i32, start_time: Option<u64>) -> Liveness {
        if proc::same_process(pid, start_time) {
            Liveness::Same
        } else if proc::pid_alive(pid) {
            Liveness::Reused
        } else {
            Liveness::Gone
        }
    }
}

/// Where a run stands, derived from its row: the one place that reads `status`,
/// `exit_code` and `completed_at` together.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunPhase {
    /// Recorded, not started.
    Queued,
    /// A shim supervises it (running, stalled while marked, or waiting in wait mode).
    Live(RunStatus),
    /// Its shim exited 90 on purpose: it waits for a decision and a resume.
    Parked,
    /// Its shim ended it as stalled (exit 92): over, though its status stays `stalled`.
    StallEnded,
    /// A parked run whose decision was taken up by a re-run.
    Resumed,
    /// Over, with this status and exit code.
    Ended {
        status: RunStatus,
        exit_code: Option<i32>,
    },
}

impl RunPhase {
    /// A shim is expected to be alive for the run.
    pub fn supervised(self) -> bool {
        matches!(self, RunPhase::Live(_))
    }

    /// The run is over (nothing supervises it, nothing will change it by itself), parked
    /// runs excepted: they wait for a resume.
    pub fn is_over(self) -> bool {
        matches!(
            self,
            RunPhase::StallEnded | RunPhase::Resumed | RunPhase::Ended { .. }
        )
    }
}

/// The phase of a run.
pub fn phase(run: &ToolRun) -> RunPhase {
    let parked_code = i32::from(APPROVAL_PENDING);
    match (run.status, run.exit_code) {
        (RunStatus::Queued, _) => RunPhase::Queued,
        (RunStatus::WaitingApproval, Some(c)) if c == parked_code => RunPhase::Parked,
        // A live status with an exit code: its shim recorded how it ended on purpose.
        (RunStatus::Stalled, Some(_)) => RunPhase::StallEnded,
        (s, Some(code)) if s.is_live() => RunPhase::Ended {
            status: s,
            exit_code: Some(code),
        },
        (s, _) if s.is_live() => RunPhase::Live(s),
        (RunStatus::Completed, Some(c)) if c == parked_code => RunPhase::Resumed,
        (s, code) => RunPhase::Ended {
            status: s,
            exit_code: code,
        },
    }
}

/// Who would run a recorded command again (a worker's resume, a restart): the identity its
/// store session authenticated (`OperatorStore::identity`: the embedded store's owner, a
/// PostgreSQL login), and the facts of its own process and host.
#[derive(Debug, Clone, Copy)]
pub struct Executor<'a> {
    pub identity: &'a str,
    /// Its effective uid.
    pub uid: u32,
    pub host: &'a str,
    /// The worker pool it also serves (`--pool`).
    pub pool: Option<&'a str>,
}

/// Why `run` was not started by `identity` (uid `uid`), as its store recorded it: then no
/// session of that identity may run its command again (DESIGN §14). What counts is the
/// `owner` the store set from the session that wrote the run, never a field the run's own
/// shim wrote — except for runs from before owners were recorded, whose claimed uid must be
/// the caller's. The stores refuse to claim such a run; `not_ours` says it to the worker.
pub fn not_owned(run: &ToolRun, identity: &str, uid: u32) -> Option<String> {
    // A run recorded through a server's runner API ran on the runner's machine: no worker
    // here runs its command (whatever host or user it claims).
    if let Some(token) = run.runner() {
        return Some(format!(
            "it was recorded by runner token {}: run it again on that runner",
            crate::sanitize::sanitize_line(token)
        ));
    }
    match run.owner.as_deref() {
        Some(owner) if owner != identity => Some(format!(
            "it was started by {}, not by {}: only a worker of {} runs it again",
            crate::sanitize::sanitize_line(owner),
            crate::sanitize::sanitize_line(identity),
            crate::sanitize::sanitize_line(owner),
        )),
        // Every shim that records an owner's run says which user it ran as: one that does
        // not (or not as a number) was not written by a shim.
        Some(_) if run.uid().is_none() => {
            Some("it does not say which user it ran as: not run again by anyone".into())
        }
        Some(_) => None,
        None => claimed_uid(run, uid),
    }
}

/// Why the uid `run`'s shim said it ran as is not `uid`.
fn claimed_uid(run: &ToolRun, uid: u32) -> Option<String> {
    let claimed = run.uid()?;
    (claimed != u64::from(uid)).then(|| {
        let who = u32::try_from(claimed)
            .map(crate::proc::describe_uid)
            .unwrap_or_else(|_| format!("uid {claimed}"));
        format!("it was run by {who}, not by uid {uid}: only its own user may run it again")
    })
}

/// Why `run` is not for executor `me` to run again (restart, or a worker's resume): another
/// identity started it ([`not_owned`]), it ran on another host (unless both are of worker
/// pool `me.pool`), or its shim ran as another uid. A run is only ever run again by the
/// identity that started it, as its own user, where it ran or in its pool; runs from before
/// hosts were recorded have none, and pass that part.
pub fn not_ours(run: &ToolRun, me: &Executor<'_>) -> Option<String> {
    if let Some(why) = not_owned(run, me.identity, me.uid) {
        return Some(why);
    }
    // A run of this worker's pool is its business on whichever host it ran.
    let in_pool = me.pool.is_some() && run.pool() == me.pool;
    if let Some(theirs) = run.host.as_deref().filter(|h| *h != me.host && !in_pool) {
        return Some(format!(
            "it ran on {}, not on this host ({}): run it again there",
            crate::sanitize::sanitize_line(theirs),
            crate::sanitize::sanitize_line(me.host)
        ));
    }
    // One login shared by two OS users of a host: whatever the login, never as another
    // user than the one the run says it ran as (the login, not this, is the boundary).
    claimed_uid(run, me.uid)
}

/// Who runs a parked run's command again, for an operator to read (`monitor show`, the
/// dashboard): a worker of the identity that started it, where it ran (or in its pool) —
/// and, when `me` (the reader's own identity as an executor) may not, why not. Runs of a
/// server's runner API are run again on their runner.
pub fn resume_note(run: &ToolRun, me: Option<&Executor<'_>>) -> String {
    use crate::sanitize::sanitize_line;
    if let Some(token) = run.runner() {
        return format!(
            "on its runner (token {}), never by a worker here",
            sanitize_line(token)
        );
    }
    let who = run
        .owner
        .as_deref()
        .map(sanitize_line)
        .unwrap_or_else(|| "its own user".into());
    let place = match (run.pool(), run.host.as_deref()) {
        (Some(pool), _) => format!("in pool {}", sanitize_line(pool)),
        (None, Some(host)) => format!("on {}", sanitize_line(host)),
        (None, None) => "on its host".into(),
    };
    // The user it says it ran as: a worker runs it only as that user.
    let user = run
        .uid()
        .and_then(|u| u32::try_from(u).ok())
        .map(|u| format!(", as {}", crate::proc::describe_uid(u)))
        .unwrap_or_default();
    let base = format!("by a worker of {who} {place}{user}");
    match me.and_then(|m| not_ours(run, m).map(|why| (m, why))) {
        Some((m, why)) => format!("{base}; not by {}'s: {why}", sanitize_line(m.identity)),
        None => base,
    }
}

/// Why pipeline execution `ex` is not for `identity` (uid `uid`) to drive — resume, or run
/// its steps: another identity started it, as the store recorded it, or (the same login
/// shared by two users) its starter said it ran as another uid. Executions from before
/// owners were recorded (the embedded store's, whose only writer is its owner) pass.
pub fn execution_not_ours(
    ex: &crate::pipeline::Execution,
    identity: &str,
    uid: u32,
) -> Option<String> {
    if let Some(owner) = ex.owner.as_deref().filter(|o| *o != identity) {
        return Some(format!(
            "it was started by {}, not by {}: only {} drives it and runs its steps",
            crate::sanitize::sanitize_line(owner),
            crate::sanitize::sanitize_line(identity),
            crate::sanitize::sanitize_line(owner),
        ));
    }
    let claimed = ex.uid.filter(|u| *u != uid)?;
    Some(format!(
        "it was started as {}, not as uid {uid}: only its own user runs its steps",
        crate::proc::describe_uid(claimed)
    ))
}

/// Why a label worker of `identity` (uid `uid`) does not run labelled steps of `ex`: it is
/// not this identity's own ([`execution_not_ours`]) and either this host does not trust its
/// starter (`trusted`: the user config's `[worker] pipelines_from`, never a row) or its
/// starter did not name this identity among its label workers.
pub fn labelled_not_ours(
    ex: &crate::pipeline::Execution,
    identity: &str,
    uid: u32,
    trusted: &[String],
) -> Option<String> {
    let why = execution_not_ours(ex, identity, uid)?;
    let Some(owner) = ex.owner.as_deref().filter(|o| *o != identity) else {
        return Some(why);
    };
    if !trusted.iter().any(|t| t == owner) {
        return Some(format!(
            "{why} (this host trusts no pipeline of {} for its label workers: [worker] pipelines_from in its user config)",
            crate::sanitize::sanitize_line(owner)
        ));
    }
    if !ex.workers.iter().any(|w| w == identity) {
        return Some(format!(
            "{why}, and it did not name {} among its workers (monitor pipeline run --workers)",
            crate::sanitize::sanitize_line(identity)
        ));
    }
    None
}

/// Whether a `waiting_approval` run was parked by a shim that exited on purpose (exit
/// mode: exit code 90), so no shim is expected to be alive for it.
pub fn is_parked(run: &ToolRun) -> bool {
    phase(run) == RunPhase::Parked
}

/// Whether a run in a live status already has the exit code its shim recorded as it exited
/// on purpose: parked on an approval (90), or ended as stalled (92). No shim is expected to
/// be alive for it, and its status is not a vanished supervisor's.
pub fn ended_on_purpose(run: &ToolRun) -> bool {
    run.status.is_live() && !phase(run).supervised()
}

/// Whether the run's shim is gone: on its own host by pid and start time, elsewhere by its
/// supervisor heartbeat (`now` is the caller's clock). `None` when it is alive, else why not.
pub fn shim_gone(run: &ToolRun, host: &dyn HostFacts) -> Option<String> {
    let local = run.host.as_deref().is_none_or(|h| h == host.host());
    if local && let Some(pid) = run.shim_pid {
        let start = run.shim_start_time.map(|s| s as u64);
        return match host.process(pid as i32, start) {
            Liveness::Same => None,
            Liveness::Reused => Some(format!(
                "{VANISHED} (pid {pid} now belongs to another process)"
            )),
            Liveness::Gone => Some(format!("{VANISHED} (pid {pid} is not running)")),
        };
    }
    let beat = run
        .supervisor_heartbeat_at
        .as_deref()
        .or(Some(run.started_at.as_str()))
        .and_then(time::age_of);
    match beat {
        Some(age) if age > STALE_HEARTBEAT => Some(format!(
            "{VANISHED} (no supervisor heartbeat for {})",
            time::short_duration(age)
        )),
        _ => None,
    }
}

/// Whether reconciliation should fail this run as vanished, and why.
pub fn vanished(run: &ToolRun, host: &dyn HostFacts) -> Option<String> {
    if !phase(run).supervised() {
        return None;
    }
    shim_gone(run, host)
}

/// Whether a retry may take over a pending approval of `owner` (the run that asked it):
/// only from a run nobody supervises any more — parked by exit 90, or its shim gone (or
/// the run deleted). A twin still waiting for it in wait mode keeps it.
pub fn may_take_over(owner: Option<&ToolRun>, host: &dyn HostFacts) -> bool {
    owner.is_none_or(|run| is_parked(run) || shim_gone(run, host).is_some())
}

/// Whether decision `a` can still answer a prompt (issue 26: a decision stays with its
/// run): decided, not closed with the run that asked it (`system:run-ended`), and either
/// unused yet or kept for a chain that is still live (`kept_for`). Once spent it answers
/// nothing, ever.
pub fn live(a: &Approval) -> bool {
    a.status != crate::status::ApprovalStatus::Pending
        && !a.closed()
        && (a.consumed_at.is_none() || a.kept_for.is_some())
}

/// The run whose resume a live decision is offered to: the run that asked it while nobody
/// has used it, then the run of its chain that used it last.
pub fn holder(a: &Approval) -> Option<&str> {
    match &a.consumed_at {
        None => Some(a.tool_run_id.as_str()),
        Some(_) => a.kept_for.as_deref(),
    }
}

/// Whether live decision `a` is offered to run `run`, which is bound to resume run
/// `resumes` (if any, [`store::sqlite::chain`]): its own decision while unused (wait mode: its own
/// shim types it; or the prompt came back), or one its chain holds for it. Nothing else:
/// never a decision of a run it does not resume, and never one it used itself already.
pub fn offered(a: &Approval, run: &str, resumes: Option<&str>) -> bool {
    if !live(a) {
        return false;
    }
    match holder(a) {
        Some(h) if h == run => a.consumed_at.is_none(),
        Some(h) => Some(h) == resumes,
        None => false,
    }
}

/// Whether a run's first row can be the resume of a parked run at all: a supervised run
/// (not an interactive one, whose prompts nobody answers), starting now, not a pipeline's
/// human step.
pub fn binds_at_start(row: &ToolRun) -> bool {
    let mode = row
        .metadata
        .as_ref()
        .and_then(|m| m.get("mode"))
        .and_then(|m| m.as_str());
    row.status == RunStatus::Running && mode != Some("interactive") && row.pipeline_step().is_none()
}

/// Whether new run `new` (its first row, as the store stamped it) is the resume of parked
/// run `h`, whose own decision `o` is made and unused: the same command (tool, command
/// line, directory, the same runner token) of the same identity and user (where both rows
/// say which), and either the run a worker started to resume `h` (`resumed_from`), or — by
/// hand, a CI retry — a run that names no other run, while no worker has claimed the
/// decision and it is a prompt's (a cooperative tool's is handed over by the worker only). The store checks besides that nobody resumes `h` yet (the first run to start
/// after the decision is its resume) and binds them in the same transaction.
pub fn may_bind(new: &ToolRun, h: &ToolRun, o: &Approval) -> bool {
    let same_command = h.tool_run_id != new.tool_run_id
        && h.tool_name == new.tool_name
        && h.argv_json == new.argv_json
        && h.cwd == new.cwd
        && h.runner() == new.runner()
        && h.owner
            .as_ref()
            .is_none_or(|owner| Some(owner) == new.owner.as_ref())
        && h.uid().is_none_or(|uid| Some(uid) == new.uid());
    let decided = o.tool_run_id == h.tool_run_id
        && o.status != crate::status::ApprovalStatus::Pending
        && o.consumed_at.is_none()
        && !o.closed();
    let resumes = match new.resumed_from.as_deref() {
        Some(from) => from == h.tool_run_id,
        // A cooperative tool's decision reaches it only as the worker's `AUTO_APPROVAL`:
        // a run by hand could never use it.
        None => {
            o.claimed_by.is_none()
                && o.prompt_kind != Some(crate::approvals::PromptKind::Cooperative)
        }
    };
    same_command && decided && resumes && is_parked(h)
}

/// How a resume that did not use the decision it was given ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResumeEnd {
    /// It parked at another prompt (exit 90).
    Parked,
    /// It exited with this code before the prompt appeared (0: the prompt never did).
    Exited(i32),
    /// It ended with this status and no exit code of its own (cancelled, or its shim gone).
    Ended(RunStatus),
}

/// Why the run that asked approval `approval_id` (decided `status`) failed when its
/// resume `resume` ended without using the decision: the reason it records.
pub fn unused_resume_reason(
    approval_id: &str,
    status: crate::status::ApprovalStatus,
    resume: &str,
    end: ResumeEnd,
) -> String {
    let how = match end {
        ResumeEnd::Parked => "stopped at another prompt (exit 90)".to_owned(),
        ResumeEnd::Exited(0) => {
            "exited 0 without the prompt appearing again: the decision answered nothing".to_owned()
        }
        ResumeEnd::Exited(code) => format!("exited {code} before reaching the prompt"),
        ResumeEnd::Ended(status) => format!("ended ({status}) before reaching the prompt"),
    };
    format!("approval {approval_id} {status}; resumed as {resume}, which {how}")
}

/// Exit codes of a resume that failed to start (the shim itself, or the tool not
/// executable / not found): it used nothing, and the decision stays for the next attempt.
pub const FAILED_START: [i32; 3] = [125, 126, 127];

/// Whether a decided approval answers (or ends) `prompt`: a rejection always does; an
/// approval only when its value has keys for this prompt.
pub fn decision_fits(a: &Approval, prompt: &Prompt) -> bool {
    !a.answers() || a.chosen_value.as_deref().is_some_and(|v| prompt.takes(v))
}

/// Whether a decided approval may answer a prompt shown on a screen with digest `screen`:
/// a rejection always may (it only ends the tool); a yes only on the screen it was given on
/// (approvals from before screen digests, and cooperative requests, have none).
pub fn screen_fits(a: &Approval, screen: &str) -> bool {
    !a.answers() || a.screen_digest.as_deref().is_none_or(|d| d == screen)
}

/// Whether a decided approval may answer a run of a command that now runs `tool` (its
/// `fingerprint::tool`): a rejection always may; a yes only for the executable and script
/// it was asked by (approvals from before tool digests have none).
pub fn tool_fits(a: &Approval, tool: Option<&str>) -> bool {
    !a.answers() || a.tool_digest.as_deref().is_none_or(|d| Some(d) == tool)
}

/// What an overdue approval becomes at `now`: expired, answered with its default where it
/// was asked with `on_expire = "default"` (and has one), else without a decision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Expiry {
    pub chosen_value: Option<String>,
    pub comment: String,
}

/// The expiry of `a` at `now` (RFC 3339), or `None` while it is not due (or not pending).
pub fn expiry(a: &Approval, now: &str) -> Option<Expiry> {
    if !a.is_overdue(now) {
        return None;
    }
    // An approval that needs reviewers is never answered by nobody.
    let chosen_value = (a.expire_action == "default"
        && !crate::reviews::Requirement::of(a).needs_reviewers())
    .then(|| a.default_value.clone())
    .flatten();
    let comment = match &chosen_value {
        Some(v) => format!("expired at {now}; answered with the default `{v}`"),
        None => format!("expired at {now} without a decision"),
    };
    Some(Expiry {
        chosen_value,
        comment,
    })
}

/// The reason a cancelled run records: `cancelled by alice: REASON`.
pub fn cancel_reason(by: &str, reason: Option<&str>) -> String {
    match reason.map(str::trim).filter(|r| !r.is_empty()) {
        Some(r) => format!("cancelled by {by}: {r}"),
        None => format!("cancelled by {by}"),
    }
}

/// What a worker does with a parked run and its decided, unconsumed approvals.
#[derive(Debug, Clone, PartialEq)]
pub enum ResumeVerdict {
    /// A decision said no (rejected, or expired without an answer): the run fails.
    Fail(Approval),
    /// Another of its approvals is still pending: nothing yet.
    Wait,
    /// Re-run it with this approval's answer.
    Resume(Approval),
}

/// The verdict on a parked run: a decision that ends the tool settles it, whatever else is
/// pending; otherwise it resumes with its newest decision once nothing is pending.
pub fn resume_verdict(decided: &[Approval], pending: usize) -> ResumeVerdict {
    if let Some(no) = decided.iter().find(|a| !a.answers()) {
        return ResumeVerdict::Fail(no.clone());
    }
    match decided.last() {
        Some(a) if pending == 0 => ResumeVerdict::Resume(a.clone()),
        _ => ResumeVerdict::Wait,
    }
}

/// Whether a run stalled and was ended for it (exit 92) — a stall, not a live one.
pub fn stall_ended(run: &ToolRun) -> bool {
    run.status == RunStatus::Stalled && run.exit_code == Some(i32::from(STALLED))
}

/// Whether the worker that wrote claim `claimed_by` is known to be gone: a claim of this
/// host whose process is no longer the one that claimed. Claims of other hosts, or in a
/// shape this build does not know, are never judged gone.
pub fn claimer_gone(claimed_by: &str, host: &dyn HostFacts) -> bool {
    let Some(rest) = claimed_by.strip_prefix("worker:") else {
        return false;
    };
    // The host name may itself hold colons: take pid and start from the right.
    let mut parts = rest.rsplitn(3, ':');
    let (Some(start), Some(pid), Some(name)) = (parts.next(), parts.next(), parts.next()) else {
        return false;
    };
    let (Ok(start), Ok(pid)) = (start.parse::<u64>(), pid.parse::<i32>()) else {
        return false;
    };
    if name != host.host() {
        return false;
    }
    host.process(pid, (start != 0).then_some(start)) != Liveness::Same
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runs::ToolRun;

    fn me<'a>(identity: &'a str, uid: u32, pool: Option<&'a str>) -> Executor<'a> {
        Executor {
            identity,
            uid,
            host: "here",
            pool,
        }
    }

    #[test]
    fn a_pool_takes_in_other_hosts_but_never_other_users() {
        let mut run = crate::testing::run("TR-P", "make", RunStatus::WaitingApproval);
        run.host = Some("build-08".into());
        run.metadata = Some(serde_json::json!({ "pool": "ci", "uid": 1000 }));
        let ci = me("ci", 1000, Some("ci"));
        assert!(not_ours(&run, &me("ci", 1000, None)).is_some_and(|w| w.contains("build-08")));
        assert_eq!(
            not_ours(&run, &ci),
            None,
            "no owner recorded: the uid decides"
        );
        assert!(not_ours(&run, &me("ci", 1000, Some("other"))).is_some());
        assert!(not_ours(&run, &me("ci", 0, Some("ci"))).is_some_and(|w| w.contains("uid 1000")));
        run.metadata = Some(serde_json::json!({ "uid": 1000 }));
        assert!(not_ours(&run, &ci).is_some(), "no pool recorded");
    }

    #[test]
    fn the_owner_the_store_recorded_decides_whatever_the_row_claims() {
        let mut run = crate::testing::run("TR-O", "make", RunStatus::WaitingApproval);
        run.host = Some("here".into());
        // The row says uid 0 and no owner: a tool forging its row for root's worker.
        run.metadata = Some(serde_json::json!({ "uid": 0 }));
        run.owner = Some("alice".into());
        let why = not_ours(&run, &me("root", 0, None)).expect("refused");
        assert!(
            why.contains("started by alice") && why.contains("not by root"),
            "{why}"
        );
        assert_eq!(not_owned(&run, "alice", 1000), None, "alice's own login");
        // The same login, but the run says another uid: still never as that user.
        assert!(not_ours(&run, &me("alice", 1000, None)).is_some_and(|w| w.contains("uid 0")));
        run.metadata = Some(serde_json::json!({ "uid": 1000 }));
        assert_eq!(not_ours(&run, &me("alice", 1000, None)), None);
        // An owner's run that says no user (or not as a number) was no shim's: nobody's.
        for meta in [serde_json::json!({}), serde_json::json!({ "uid": "1000" })] {
            run.metadata = Some(meta);
            assert!(
                not_owned(&run, "alice", 1000).is_some_and(|w| w.contains("which user")),
                "{:?}",
                run.metadata
            );
        }
        run.metadata = Some(serde_json::json!({ "uid": 1000 }));
        // Names are drawn cleaned.
        run.owner = Some("evil\x1b[2J".into());
        assert!(
            !not_ours(&run, &me("root", 0, None))
                .unwrap()
                .contains('\x1b')
        );
    }

    #[test]
    fn an_execution_is_driven_only_by_its_starter_and_its_steps_by_trusted_named_workers() {
        let mut ex = crate::pipeline::Execution {
            execution_id: "EX-1".into(),
            name: "deploy".into(),
            file: None,
            dir: "/w".into(),
            definition: serde_json::json!({}),
            vars: serde_json::json!({}),
            steps: Vec::new(),
            status: crate::pipeline::ExecutionState::Running,
            reason: None,
            runner: None,
            heartbeat_at: None,
            created_at: String::new(),
            updated_at: String::new(),
            version: 1,
            owner: Some("alice".into()),
            uid: Some(1000),
            definition_digest: None,
            workers: Vec::new(),
        };
        assert_eq!(execution_not_ours(&ex, "alice", 1000), None);
        assert!(execution_not_ours(&ex, "root", 0).is_some_and(|w| w.contains("started by alice")));
        assert!(execution_not_ours(&ex, "alice", 0).is_some_and(|w| w.contains("uid 1000")));
        // A label worker of another identity: trusted by its host and named by the starter.
        let trusted = vec!["alice".to_owned()];
        assert!(
            labelled_not_ours(&ex, "deploy2", 2000, &[])
                .is_some_and(|w| w.contains("pipelines_from"))
        );
        assert!(
            labelled_not_ours(&ex, "deploy2", 2000, &trusted)
                .is_some_and(|w| w.contains("--workers"))
        );
        ex.workers = vec!["deploy2".into()];
        assert_eq!(labelled_not_ours(&ex, "deploy2", 2000, &trusted), None);
        assert!(
            labelled_not_ours(&ex, "deploy2", 2000, &[]).is_some(),
            "named, not trusted"
        );
        // Its own: as for driving it.
        assert_eq!(labelled_not_ours(&ex, "alice", 1000, &[]), None);
        ex.owner = None;
        assert_eq!(
            execution_not_ours(&ex, "alice", 1000),
            None,
            "from before owners"
        );
    }

    #[test]
    fn a_runner_apis_run_is_no_workers_whatever_it_claims() {
        let mut run = crate::testing::run("TR-R", "make", RunStatus::WaitingApproval);
        run.host = Some("here".into());
        run.metadata = Some(serde_json::json!({ "uid": 1000, "pool": "ci", "runner": "ci-7" }));
        run.owner = Some("ci".into());
        for pool in [None, Some("ci")] {
            assert!(
                not_ours(&run, &me("ci", 1000, pool))
                    .is_some_and(|w| w.contains("runner token ci-7"))
            );
        }
    }

    struct Facts {
        host: &'static str,
        alive: Liveness,
    }

    impl HostFacts for Facts {
        fn host(&self) -> &str {
            self.host
        }
        fn process(&self, _pid: i32, _start: Option<u64>) -> Liveness {
            self.alive
        }
    }

    fn run(status: RunStatus, exit_code: Option<i32>) -> ToolRun {
        let mut r = crate::testing::run("TR-1", "tool", status);
        r.exit_code = exit_code;
        r.host = Some("here".into());
        r.shim_pid = Some(42);
        r
    }

    #[test]
    fn phases_follow_status_and_exit_code() {
        assert_eq!(
            phase(&run(RunStatus::Running, None)),
            RunPhase::Live(RunStatus::Running)
        );
        assert_eq!(
            phase(&run(RunStatus::WaitingApproval, None)),
            RunPhase::Live(RunStatus::WaitingApproval)
        );
        assert_eq!(
            phase(&run(RunStatus::WaitingApproval, Some(90))),
            RunPhase::Parked
        );
        assert_eq!(
            phase(&run(RunStatus::Stalled, Some(92))),
            RunPhase::StallEnded
        );
        assert_eq!(
            phase(&run(RunStatus::Completed, Some(90))),
            RunPhase::Resumed
        );
        assert_eq!(
            phase(&run(RunStatus::Failed, Some(1))),
            RunPhase::Ended {
                status: RunStatus::Failed,
                exit_code: Some(1)
            }
        );
        assert_eq!(phase(&run(RunStatus::Queued, None)), RunPhase::Queued);
        assert!(is_parked(&run(RunStatus::WaitingApproval, Some(90))));
        assert!(!is_parked(&run(RunStatus::WaitingApproval, None)));
        assert!(ended_on_purpose(&run(RunStatus::Stalled, Some(92))));
        assert!(ended_on_purpose(&run(RunStatus::WaitingApproval, Some(90))));
        assert!(!ended_on_purpose(&run(RunStatus::Running, None)));
        assert!(!ended_on_purpose(&run(RunStatus::Completed, Some(0))));
    }

    #[test]
    fn a_local_shim_is_judged_by_its_process() {
        let r = run(RunStatus::Running, None);
        let same = Facts {
            host: "here",
            alive: Liveness::Same,
        };
        assert_eq!(shim_gone(&r, &same), None);
        let reused = Facts {
            host: "here",
            alive: Liveness::Reused,
        };
        assert!(shim_gone(&r, &reused).unwrap().contains("another process"));
        let gone = Facts {
            host: "here",
            alive: Liveness::Gone,
        };
        assert!(shim_gone(&r, &gone).unwrap().starts_with(VANISHED));
        assert!(vanished(&r, &gone).is_some());
        // Parked or stall-ended runs have no shim to lose.
        assert_eq!(
            vanished(&run(RunStatus::WaitingApproval, Some(90)), &gone),
            None
        );
        assert_eq!(vanished(&run(RunStatus::Stalled, Some(92)), &gone), None);
    }

    #[test]
    fn a_remote_shim_is_judged_by_its_heartbeat() {
        let mut r = run(RunStatus::Running, None);
        r.host = Some("elsewhere".into());
        // Whatever the local pid says, another host's run goes by its heartbeat.
        let local = Facts {
            host: "here",
            alive: Liveness::Gone,
        };
        r.supervisor_heartbeat_at = Some(time::now_rfc3339());
        assert_eq!(shim_gone(&r, &local), None);
        r.supervisor_heartbeat_at = Some("2020-01-01T00:00:00.000Z".into());
        assert!(
            shim_gone(&r, &local)
                .unwrap()
                .contains("no supervisor heartbeat")
        );
    }

    #[test]
    fn expiry_answers_with_the_default_only_where_asked_to() {
        let mut a = crate::testing::approval("AP-1", crate::approvals::PromptKind::Choice);
        a.expires_at = Some("2026-01-01T00:00:00.000Z".into());
        assert_eq!(expiry(&a, "2025-12-31T23:59:59.000Z"), None);
        let e = expiry(&a, "2026-01-01T00:00:00.000Z").unwrap();
        assert_eq!(e.chosen_value, None);
        assert!(e.comment.contains("without a decision"), "{e:?}");
        a.expire_action = "default".into();
        let e = expiry(&a, "2026-01-02T00:00:00.000Z").unwrap();
        assert_eq!(e.chosen_value.as_deref(), Some("n"));
        a.status = crate::status::ApprovalStatus::Approved;
        assert_eq!(expiry(&a, "2026-01-02T00:00:00.000Z"), None);
    }

    #[test]
    fn cancel_reasons_name_who() {
        assert_eq!(cancel_reason("alice", None), "cancelled by alice");
        assert_eq!(cancel_reason("alice", Some("  ")), "cancelled by alice");
        assert_eq!(
            cancel_reason("alice", Some(" not today ")),
            "cancelled by alice: not today"
        );
    }

    #[test]
    fn resume_verdicts() {
        use crate::approvals::PromptKind;
        use crate::status::ApprovalStatus;
        let mut yes = crate::testing::approval("AP-1", PromptKind::Choice);
        yes.status = ApprovalStatus::Approved;
        yes.chosen_value = Some("y".into());
        let mut no = crate::testing::approval("AP-2", PromptKind::Choice);
        no.status = ApprovalStatus::Rejected;
        assert_eq!(
            resume_verdict(&[yes.clone()], 0),
            ResumeVerdict::Resume(yes.clone())
        );
        assert_eq!(resume_verdict(&[yes.clone()], 1), ResumeVerdict::Wait);
        assert_eq!(resume_verdict(&[], 0), ResumeVerdict::Wait);
        // A no settles it even while another approval is pending.
        assert_eq!(
            resume_verdict(&[yes, no.clone()], 2),
            ResumeVerdict::Fail(no)
        );
    }

    #[test]
    fn takeover_only_from_unsupervised_runs() {
        let alive = Facts {
            host: "here",
            alive: Liveness::Same,
        };
        let gone = Facts {
            host: "here",
            alive: Liveness::Gone,
        };
        let parked = run(RunStatus::WaitingApproval, Some(90));
        let waiting = run(RunStatus::WaitingApproval, None);
        assert!(may_take_over(Some(&parked), &alive));
        assert!(!may_take_over(Some(&waiting), &alive));
        assert!(may_take_over(Some(&waiting), &gone));
        assert!(may_take_over(None, &alive));
    }
}
