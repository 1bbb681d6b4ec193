//! Acting on runs and approvals from outside the shim, one way for every caller (the
//! command line, the dashboard, the worker): deciding with the decision logged, cancelling
//! a run, and reconciling runs whose shim has vanished.

use crate::approvals::{self, Approval, DecideOutcome, Decider};
use crate::db::{self, Result};
use crate::event::{EventBody, LogEvent};
use crate::logfile::CombinedLog;
use crate::mode::CANCEL_SIGNAL;
use crate::runs::{self, Guard, SUPERVISOR_HEARTBEAT, StatusChange, ToolRun};
use crate::status::{ApprovalStatus, RunStatus};
use crate::{proc, time};
use rusqlite::Connection;
use std::path::Path;
use std::time::Duration;

/// A supervisor heartbeat older than this means the shim of a run on another host is gone.
pub const STALE_HEARTBEAT: Duration = Duration::from_secs(SUPERVISOR_HEARTBEAT.as_secs() * 10);

/// The reason recorded for a run whose shim is gone.
pub const VANISHED: &str = "supervisor vanished";

/// Appends events to the combined log; a log that cannot be written loses the events, never
/// the database change they describe.
pub fn log_events(log: &Path, events: &[LogEvent]) {
    if events.is_empty() {
        return;
    }
    if let Ok(mut l) = CombinedLog::open(log) {
        for e in events {
            let _ = l.append(e);
        }
    }
}

fn status_event(run: &ToolRun, previous: RunStatus, change: &StatusChange) -> LogEvent {
    LogEvent {
        body: EventBody::ToolStatusChange {
            status: change.status,
            previous_status: Some(previous),
            reason: change.reason.clone(),
            exit_code: change.exit_code,
        },
        timestamp: time::now_rfc3339(),
        tool: run.tool_name.clone(),
        tool_run_id: run.tool_run_id.clone(),
        execution_id: run.execution_id.clone(),
    }
}

/// Decides an approval (first writer wins) and, when this call decided it, logs
/// `approval_status_change` to `log`.
pub fn decide_logged(
    conn: &mut Connection,
    log: &Path,
    approval_id: &str,
    value: &str,
    who: &Decider<'_>,
) -> Result<DecideOutcome> {
    let out = db::write(conn, |tx| approvals::decide(tx, approval_id, value, who))?;
    match &out {
        DecideOutcome::Decided(a) => log_events(log, &[a.status_event()]),
        // Deciding found it overdue and expired it: that is news too.
        DecideOutcome::Conflict(a) if a.decision_channel.as_deref() == Some("system:expiry") => {
            log_events(log, &[a.status_event()])
        }
        _ => {}
    }
    Ok(out)
}

/// How a cancellation went.
#[derive(Debug, Clone, PartialEq)]
pub enum CancelOutcome {
    /// Marked cancelled, and its shim told to end the tool.
    Signalled {
        run: Box<ToolRun>,
        shim_pid: i32,
    },
    /// Marked cancelled; no live shim to tell (parked on an approval, or gone).
    Marked {
        run: Box<ToolRun>,
    },
    /// It had already ended.
    AlreadyFinal {
        run: Box<ToolRun>,
    },
    NotFound,
}

/// Whether a run's shim is alive: on this host by pid and start time, elsewhere by its
/// supervisor heartbeat. `None` when it is alive, else why not.
pub fn shim_gone(run: &ToolRun, this_host: &str) -> Option<String> {
    let local = run.host.as_deref().is_none_or(|h| h == this_host);
    if local && let Some(pid) = run.shim_pid {
        let start = run.shim_start_time.map(|s| s as u64);
        if proc::same_process(pid as i32, start) {
            return None;
        }
        return Some(if proc::pid_alive(pid as i32) {
            format!("{VANISHED} (pid {pid} now belongs to another process)")
        } else {
            format!("{VANISHED} (pid {pid} is not running)")
        });
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

/// Whether a `waiting_approval` run was parked by a shim that exited on purpose (exit
/// mode: exit code 90), so no shim is expected to be alive for it.
pub fn is_parked(run: &ToolRun) -> bool {
    run.status == RunStatus::WaitingApproval
        && run.exit_code == Some(i32::from(crate::exit::shim::APPROVAL_PENDING))
}

/// Whether a run in a live status already has the exit code its shim recorded as it exited
/// on purpose: parked on an approval (90), or ended as stalled (92, `--on-stall kill`). No
/// shim is expected to be alive for it, and its status is not a vanished supervisor's.
pub fn ended_on_purpose(run: &ToolRun) -> bool {
    run.status.is_live() && run.exit_code.is_some()
}

/// Cancels a live run: marks it `cancelled` (reason, who), rejects its pending approvals,
/// and tells its shim (`SIGUSR1`) to end the tool's process group.
pub fn cancel_run(
    conn: &mut Connection,
    log: &Path,
    tool_run_id: &str,
    reason: Option<&str>,
    who: &Decider<'_>,
) -> Result<CancelOutcome> {
    let Some(run) = runs::get(conn, tool_run_id)? else {
        return Ok(CancelOutcome::NotFound);
    };
    if run.status.is_final() {
        return Ok(CancelOutcome::AlreadyFinal { run: Box::new(run) });
    }
    let why = match reason {
        Some(r) if !r.trim().is_empty() => format!("cancelled by {}: {}", who.by, r.trim()),
        _ => format!("cancelled by {}", who.by),
    };
    let change = StatusChange::to(RunStatus::Cancelled, Some(why));
    let (previous, rejected) = db::write(conn, |tx| {
        let previous = runs::change_status(tx, tool_run_id, &change, who.by, Guard::NotFinal)?;
        let mut rejected = Vec::new();
        if previous.is_some() {
            let pending = approvals::list(
                tx,
                &approvals::ApprovalFilter {
                    statuses: vec![ApprovalStatus::Pending],
                    tool_run_id: Some(tool_run_id.to_owned()),
                    ..Default::default()
                },
            )?;
            let comment = Decider {
                comment: Some("the run was cancelled"),
                ..who.clone()
            };
            for a in pending {
                if let DecideOutcome::Decided(a) =
                    approvals::decide(tx, &a.approval_id, "reject", &comment)?
                {
                    rejected.push(*a);
                }
            }
        }
        Ok((previous, rejected))
    })?;
    let Some(previous) = previous else {
        // It ended between the read and the write.
        let run = runs::get(conn, tool_run_id)?.unwrap_or(run);
        return Ok(CancelOutcome::AlreadyFinal { run: Box::new(run) });
    };
    let mut events = vec![status_event(&run, previous, &change)];
    events.extend(rejected.iter().map(Approval::status_event));
    log_events(log, &events);
    let after = runs::get(conn, tool_run_id)?.unwrap_or(run.clone());
    if !ended_on_purpose(&run)
        && shim_gone(&run, &proc::hostname()).is_none()
        && let Some(pid) = run.shim_pid.map(|p| p as i32)
    {
        // SAFETY: kill(2) of the shim we just checked by pid and start time.
        if unsafe { libc::kill(pid, CANCEL_SIGNAL) } == 0 {
            return Ok(CancelOutcome::Signalled {
                run: Box::new(after),
                shim_pid: pid,
            });
        }
    }
    Ok(CancelOutcome::Marked {
        run: Box::new(after),
    })
}

/// What one reconciliation pass did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ReconcileReport {
    /// Runs marked failed because their shim is gone, with the reason.
    pub vanished: Vec<(String, String)>,
    /// Approvals expired in this pass.
    pub expired: Vec<Approval>,
}

/// One pass: live runs whose shim is gone become `failed` (`supervisor vanished`), and
/// overdue approvals are expired.
pub fn reconcile(conn: &mut Connection, log: &Path, actor: &str) -> Result<ReconcileReport> {
    let host = proc::hostname();
    let live = runs::supervised(conn, None)?;
    let mut report = ReconcileReport::default();
    let mut events = Vec::new();
    for run in live {
        if ended_on_purpose(&run) {
            continue;
        }
        let Some(why) = shim_gone(&run, &host) else {
            continue;
        };
        let change = StatusChange {
            error: Some(why.clone()),
            ..StatusChange::to(RunStatus::Failed, Some(why.clone()))
        };
        let (previous, abandoned) = fail_vanished(conn, &run, &change, &why, actor)?;
        if let Some(previous) = previous {
            events.push(status_event(&run, previous, &change));
            events.extend(abandoned.iter().map(Approval::status_event));
            report.vanished.push((run.tool_run_id.clone(), why));
        }
    }
    report.expired = db::write(conn, approvals::expire_due)?;
    events.extend(report.expired.iter().map(Approval::status_event));
    log_events(log, &events);
    Ok(report)
}

/// Fails `seen` (a live run as listed at the start of the pass, whose shim has since been
/// found gone) unless, read again under the write lock, it has moved on. A shim in exit
/// mode parks its run (exit code 90) and then exits: between the list and this write it
/// may have done both, and its run is then parked, not vanished.
fn fail_vanished(
    conn: &mut Connection,
    seen: &ToolRun,
    change: &StatusChange,
    why: &str,
    actor: &str,
) -> Result<(Option<RunStatus>, Vec<Approval>)> {
    db::write(conn, |tx| {
        match runs::get(tx, &seen.tool_run_id)? {
            Some(now) if now.status == seen.status && !ended_on_purpose(&now) => {}
            _ => return Ok((None, Vec::new())),
        }
        let guard = [seen.status];
        let previous =
            runs::change_status(tx, &seen.tool_run_id, change, actor, Guard::From(&guard))?;
        // Nobody is left to type a decision into this run.
        let abandoned = match previous {
            Some(_) => approvals::abandon_pending(
                tx,
                &seen.tool_run_id,
                &format!("the run ended before a decision ({why})"),
            )?,
            None => Vec::new(),
        };
        Ok((previous, abandoned))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::db::OpenMode;
    use crate::runs::tests::sample;

    fn setup() -> (tempfile::TempDir, Connection) {
        let tmp = tempfile::tempdir().unwrap();
        let conn = db::open(&tmp.path().join("s.db"), OpenMode::Create).unwrap();
        (tmp, conn)
    }

    fn me() -> Decider<'static> {
        Decider {
            by: "tester",
            channel: "cli",
            comment: None,
        }
    }

    #[test]
    fn reconcile_fails_dead_and_reused_shims_but_not_parked_or_live_ones() {
        let (tmp, mut conn) = setup();
        let host = proc::hostname();
        let me_pid = std::process::id() as i64;
        let me_start = proc::read_stat(me_pid as i32).unwrap().start_time as i64;
        let mut alive = sample("TR-ALIVE", "x", RunStatus::Running);
        alive.host = Some(host.clone());
        alive.shim_pid = Some(me_pid);
        alive.shim_start_time = Some(me_start);
        let mut dead = sample("TR-DEAD", "x", RunStatus::Running);
        dead.host = Some(host.clone());
        dead.shim_pid = Some(i32::MAX as i64 - 7);
        let mut reused = sample("TR-REUSED", "x", RunStatus::Stalled);
        reused.host = Some(host.clone());
        reused.shim_pid = Some(me_pid);
        reused.shim_start_time = Some(me_start + 1);
        let mut parked = sample("TR-PARKED", "x", RunStatus::WaitingApproval);
        parked.host = Some(host.clone());
        parked.shim_pid = Some(i32::MAX as i64 - 7);
        parked.exit_code = Some(90);
        // Killed as stalled by its own shim (exit 92): that is how it ended, not a vanishing.
        let mut stall_killed = sample("TR-STALLED", "x", RunStatus::Stalled);
        stall_killed.host = Some(host.clone());
        stall_killed.shim_pid = Some(i32::MAX as i64 - 7);
        stall_killed.exit_code = Some(92);
        let mut remote_stale = sample("TR-REMOTE", "x", RunStatus::Running);
        remote_stale.host = Some("elsewhere".into());
        remote_stale.supervisor_heartbeat_at = Some("2000-01-01T00:00:00.000Z".into());
        let mut remote_fresh = sample("TR-FRESH", "x", RunStatus::Running);
        remote_fresh.host = Some("elsewhere".into());
        remote_fresh.supervisor_heartbeat_at = Some(time::now_rfc3339());
        db::write(&mut conn, |tx| {
            for r in [
                &alive,
                &dead,
                &reused,
                &parked,
                &stall_killed,
                &remote_stale,
                &remote_fresh,
            ] {
                runs::insert(tx, r, "t")?;
            }
            Ok(())
        })
        .unwrap();
        let log = tmp.path().join("combined.log");
        let report = reconcile(&mut conn, &log, "reconcile").unwrap();
        let mut ids: Vec<&str> = report.vanished.iter().map(|(id, _)| id.as_str()).collect();
        ids.sort();
        assert_eq!(ids, ["TR-DEAD", "TR-REMOTE", "TR-REUSED"]);
        let reused = runs::get(&conn, "TR-REUSED").unwrap().unwrap();
        assert_eq!(reused.status, RunStatus::Failed);
        assert!(
            reused.reason.unwrap().contains("another process"),
            "a reused pid is told apart"
        );
        for id in ["TR-ALIVE", "TR-PARKED", "TR-STALLED", "TR-FRESH"] {
            assert!(
                !runs::get(&conn, id).unwrap().unwrap().status.is_final(),
                "{id}"
            );
        }
        let text = std::fs::read_to_string(&log).unwrap();
        assert_eq!(text.lines().count(), 3);
        // A second pass changes nothing.
        assert!(
            reconcile(&mut conn, &log, "reconcile")
                .unwrap()
                .vanished
                .is_empty()
        );
    }

    /// Found by scripts/stress at 256 shims: a run listed as `waiting_approval` whose shim
    /// then parked it (exit code 90) and exited was failed as `supervisor vanished`, so its
    /// decision was never resumed.
    #[test]
    fn reconcile_race_with_a_shim_parking_its_run() {
        let (_tmp, mut conn) = setup();
        let mut run = sample("TR-PARKING", "x", RunStatus::WaitingApproval);
        run.host = Some(proc::hostname());
        run.shim_pid = Some(i32::MAX as i64 - 7);
        db::write(&mut conn, |tx| runs::insert(tx, &run, "t")).unwrap();
        // The pass lists the run before the shim's last write…
        let seen = runs::get(&conn, "TR-PARKING").unwrap().unwrap();
        assert!(!is_parked(&seen));
        let why = shim_gone(&seen, &proc::hostname()).expect("the shim is gone");
        // …which parks it, and then the shim exits.
        let park = StatusChange {
            exit_code: Some(90),
            ..StatusChange::to(RunStatus::WaitingApproval, Some("waiting".into()))
        };
        db::write(&mut conn, |tx| {
            runs::change_status(tx, "TR-PARKING", &park, "shim", Guard::NotFinal)
        })
        .unwrap();
        let change = StatusChange::to(RunStatus::Failed, Some(why.clone()));
        let (previous, _) = fail_vanished(&mut conn, &seen, &change, &why, "w").unwrap();
        assert_eq!(previous, None);
        let now = runs::get(&conn, "TR-PARKING").unwrap().unwrap();
        assert!(is_parked(&now), "{now:?}");
        // A run that really lost its shim still fails.
        let mut lost = sample("TR-LOST", "x", RunStatus::WaitingApproval);
        lost.shim_pid = run.shim_pid;
        db::write(&mut conn, |tx| runs::insert(tx, &lost, "t")).unwrap();
        let seen = runs::get(&conn, "TR-LOST").unwrap().unwrap();
        let (previous, _) = fail_vanished(&mut conn, &seen, &change, &why, "w").unwrap();
        assert_eq!(previous, Some(RunStatus::WaitingApproval));
    }

    #[test]
    fn cancel_marks_rejects_and_refuses_finished_runs() {
        let (tmp, mut conn) = setup();
        let mut parked = sample("TR-P", "rm", RunStatus::WaitingApproval);
        parked.exit_code = Some(90);
        let done = sample("TR-D", "rm", RunStatus::Completed);
        let mut ap = crate::approvals::tests::sample("AP-1", approvals::PromptKind::Choice);
        ap.tool_run_id = "TR-P".into();
        db::write(&mut conn, |tx| {
            runs::insert(tx, &parked, "t")?;
            runs::insert(tx, &done, "t")?;
            approvals::insert(tx, &ap, "t")
        })
        .unwrap();
        let log = tmp.path().join("combined.log");
        let out = cancel_run(&mut conn, &log, "TR-P", Some("not today"), &me()).unwrap();
        let CancelOutcome::Marked { run } = out else {
            panic!("{out:?}")
        };
        assert_eq!(run.status, RunStatus::Cancelled);
        assert_eq!(
            run.reason.as_deref(),
            Some("cancelled by tester: not today")
        );
        let ap = approvals::get(&conn, "AP-1").unwrap().unwrap();
        assert_eq!(ap.status, ApprovalStatus::Rejected);
        assert!(matches!(
            cancel_run(&mut conn, &log, "TR-D", None, &me()).unwrap(),
            CancelOutcome::AlreadyFinal { .. }
        ));
        assert_eq!(
            cancel_run(&mut conn, &log, "TR-NOPE", None, &me()).unwrap(),
            CancelOutcome::NotFound
        );
    }

    #[test]
    fn decide_logged_writes_the_event_once() {
        let (tmp, mut conn) = setup();
        let ap = crate::approvals::tests::sample("AP-1", approvals::PromptKind::Choice);
        db::write(&mut conn, |tx| approvals::insert(tx, &ap, "t")).unwrap();
        let log = tmp.path().join("combined.log");
        decide_logged(&mut conn, &log, "AP-1", "y", &me()).unwrap();
        decide_logged(&mut conn, &log, "AP-1", "y", &me()).unwrap();
        let text = std::fs::read_to_string(&log).unwrap();
        assert_eq!(text.lines().count(), 1, "{text}");
        assert!(text.contains("\"approval_status_change\""));
    }
}
