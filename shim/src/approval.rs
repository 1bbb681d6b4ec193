//! From a recognised prompt to an answer or an approval, each in one database
//! transaction on the store thread:
//!
//! 1. a decided, unconsumed approval of this command for this prompt (an earlier run asked;
//!    someone decided) is consumed and answers it — or, rejected, ends the run (exit 91);
//! 2. a config policy or a remembered decision answers it, recorded as an approval decided
//!    by `policy:NAME`;
//! 3. a pending approval for the same prompt of the same command (a retry asking again) is
//!    taken over by this run;
//! 4. otherwise a new pending approval is created and the run waits.
//!
//! Also here: cooperative `approval_needed` requests, the check that makes a caller's bare
//! `AUTO_APPROVAL` worthless, and the wait-mode watcher that notices a decision within
//! 50 ms.

use hr_shared::approvals::{self, Approval, PromptKind, Resolution};
use hr_shared::config::OnExpire;
use hr_shared::control;
use hr_shared::db::{self, OpenMode};
use hr_shared::event::{CooperativeRequest, EventBody, LogEvent};
use hr_shared::policy;
use hr_shared::prompt::Prompt;
use hr_shared::runs::{self, Guard, StatusChange};
use hr_shared::sanitize::{sanitize_line, sanitize_text};
use hr_shared::status::{ApprovalStatus, RunStatus};
use hr_shared::{fingerprint, id, proc, time};
use rusqlite::{Connection, Transaction};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver};
use std::time::{Duration, Instant, SystemTime};

/// The run asking, as the store thread knows it.
#[derive(Debug, Clone)]
pub struct Asker {
    pub tool_run_id: String,
    pub tool: String,
    pub execution_id: String,
    pub request_fingerprint: String,
    pub actor: String,
}

/// A prompt to resolve.
#[derive(Debug, Clone)]
pub struct PromptRequest {
    pub prompt: Prompt,
    pub prompt_fingerprint: String,
    /// The config policies that matched, in config order: (name, value). The first whose
    /// value answers the prompt (or rejects it) decides; a remembered decision comes after.
    pub policies: Vec<(String, String)>,
    pub ttl: Option<Duration>,
    pub on_expire: OnExpire,
}

/// What the database said.
#[derive(Debug, Clone)]
pub enum PromptResolution {
    /// Type this value: a decision (or a policy) answers the prompt.
    Answer {
        approval: Box<Approval>,
        value: String,
    },
    /// A decision said no.
    Rejected { approval: Box<Approval> },
    /// An approval waits for a decision.
    Pending {
        approval: Box<Approval>,
        /// It was already pending for an earlier run of the same command.
        taken_over: bool,
    },
}

/// What a transaction did, for the combined log and the store's idea of the run's status.
#[derive(Default)]
pub struct Effects {
    pub events: Vec<LogEvent>,
    /// This run's new status, if it changed.
    pub status: Option<RunStatus>,
    /// Said once on stderr (a policy whose value does not answer the prompt).
    pub warnings: Vec<String>,
}

fn status_event(
    run_id: &str,
    tool: &str,
    execution_id: Option<&str>,
    previous: RunStatus,
    change: &StatusChange,
) -> LogEvent {
    LogEvent {
        body: EventBody::ToolStatusChange {
            status: change.status,
            previous_status: Some(previous),
            reason: change.reason.clone(),
            exit_code: change.exit_code,
        },
        timestamp: time::now_rfc3339(),
        tool: tool.to_owned(),
        tool_run_id: run_id.to_owned(),
        execution_id: execution_id.map(str::to_owned),
    }
}

/// The approval row a prompt becomes.
pub fn approval_for(who: &Asker, req: &PromptRequest) -> Approval {
    let p = &req.prompt;
    let now = SystemTime::now();
    Approval {
        approval_id: id::new_approval_id(),
        tool_run_id: who.tool_run_id.clone(),
        tool_name: who.tool.clone(),
        execution_id: Some(who.execution_id.clone()),
        question: p.question.clone(),
        context: Some(p.context.clone()),
        options_json: p.options.clone(),
        default_value: p.default.clone(),
        allows_text: p.allows_text,
        status: ApprovalStatus::Pending,
        chosen_value: None,
        created_at: time::to_rfc3339(now),
        decided_at: None,
        expires_at: req.ttl.map(|ttl| time::to_rfc3339(now + ttl)),
        decided_by: None,
        decision_channel: None,
        comment: None,
        request_fingerprint: Some(who.request_fingerprint.clone()),
        prompt_fingerprint: Some(req.prompt_fingerprint.clone()),
        consumed_at: None,
        consumed_by: None,
        prompt_kind: Some(p.kind),
        prompt_line: Some(p.prompt_line.clone()),
        rule_name: Some(p.rule.clone()),
        expire_action: match req.on_expire {
            OnExpire::Reject => "reject".into(),
            OnExpire::Default => "default".into(),
        },
        claimed_by: None,
        claimed_at: None,
        resumed_run_id: None,
    }
}

/// Resolves a prompt (steps 1–4 above) in one write transaction.
pub fn resolve(
    conn: &mut Connection,
    who: &Asker,
    req: &PromptRequest,
) -> db::Result<(PromptResolution, Effects)> {
    db::write(conn, |tx| {
        let mut fx = Effects::default();
        // Overdue approvals are expired first, so a re-run after the TTL finds the expiry
        // (rejected, or the default answer) rather than a pending approval nobody decides.
        for a in approvals::expire_due(tx)? {
            fx.events.push(a.status_event());
        }
        let answerable = |a: &Approval| {
            a.chosen_value
                .as_deref()
                .is_some_and(|v| req.prompt.keys_for(v, true).is_some())
        };
        // 1. A decision for an earlier run of this command.
        if let Some(a) =
            approvals::find_answer(tx, &who.request_fingerprint, &req.prompt_fingerprint)?
            && (!a.answers() || answerable(&a))
        {
            approvals::consume(tx, &a.approval_id, &who.tool_run_id, &who.actor)?;
            approvals::set_resumed_run(tx, &a.approval_id, &who.tool_run_id)?;
            close_waiting_run(tx, who, &a, &mut fx)?;
            let a = approvals::get(tx, &a.approval_id)?.unwrap_or(a);
            return Ok(if a.answers() {
                let value = a.chosen_value.clone().unwrap_or_default();
                (
                    PromptResolution::Answer {
                        approval: Box::new(a),
                        value,
                    },
                    fx,
                )
            } else {
                (
                    PromptResolution::Rejected {
                        approval: Box::new(a),
                    },
                    fx,
                )
            });
        }
        // 2. A policy: the config's, in order, then a remembered decision.
        let mut fresh = approval_for(who, req);
        let mut candidates = req.policies.clone();
        if let Some(p) = policy::find_remembered(tx, &who.tool, &req.prompt_fingerprint)? {
            candidates.push((p.name, p.value));
        }
        for (name, value) in candidates {
            let decided = match approvals::resolve_value(&fresh, &value) {
                Ok(r) if r.status == ApprovalStatus::Rejected => Some(r),
                Ok(r)
                    if r.chosen_value
                        .as_deref()
                        .is_some_and(|v| req.prompt.keys_for(v, true).is_some()) =>
                {
                    Some(r)
                }
                _ => None,
            };
            let Some(Resolution {
                status,
                chosen_value,
            }) = decided
            else {
                fx.warnings.push(format!(
                    "policy {name}: `{value}` is not an answer to {:?} (valid: {}); asking for a decision instead",
                    req.prompt.prompt_line,
                    fresh.valid_values().join(", ")
                ));
                continue;
            };
            let channel = format!("policy:{name}");
            let now = time::now_rfc3339();
            fresh.status = status;
            fresh.chosen_value = chosen_value.clone();
            fresh.decided_at = Some(now.clone());
            fresh.decided_by = Some(channel.clone());
            fresh.decision_channel = Some(channel.clone());
            fresh.consumed_at = Some(now);
            fresh.consumed_by = Some(who.tool_run_id.clone());
            approvals::insert(tx, &fresh, &channel)?;
            fx.events.push(fresh.needed_event());
            fx.events.push(fresh.status_event());
            let approval = Box::new(fresh);
            return Ok((
                match (status, chosen_value) {
                    (ApprovalStatus::Approved, Some(value)) => {
                        PromptResolution::Answer { approval, value }
                    }
                    _ => PromptResolution::Rejected { approval },
                },
                fx,
            ));
        }
        // 3. A retry asking the same question takes the pending approval over — only from
        //    a run nobody supervises any more (parked by exit 90, or its shim gone): a
        //    twin still waiting for it in wait mode keeps it, and this run asks anew.
        let pending =
            approvals::find_pending(tx, &who.request_fingerprint, &req.prompt_fingerprint)?
                .filter(|old| old.tool_run_id != who.tool_run_id);
        let pending = match pending {
            Some(old) => {
                let orphaned = runs::get(tx, &old.tool_run_id)?.is_none_or(|run| {
                    control::is_parked(&run)
                        || control::shim_gone(&run, &proc::hostname()).is_some()
                });
                orphaned.then_some(old)
            }
            None => None,
        };
        let (approval, taken_over) = match pending {
            Some(old) => {
                approvals::move_to_run(tx, &old.approval_id, &who.tool_run_id)?;
                let change = StatusChange::to(
                    RunStatus::Cancelled,
                    Some(format!(
                        "superseded by a retry, {}, which now waits for {}",
                        who.tool_run_id, old.approval_id
                    )),
                );
                if let Some(prev) = runs::change_status(
                    tx,
                    &old.tool_run_id,
                    &change,
                    &who.actor,
                    Guard::From(&[RunStatus::WaitingApproval]),
                )? {
                    fx.events.push(status_event(
                        &old.tool_run_id,
                        &old.tool_name,
                        old.execution_id.as_deref(),
                        prev,
                        &change,
                    ));
                }
                let moved = approvals::get(tx, &old.approval_id)?.unwrap_or(old);
                (moved, true)
            }
            // 4. A new question.
            _ => {
                approvals::insert(tx, &fresh, &who.actor)?;
                fx.events.push(fresh.needed_event());
                (fresh, false)
            }
        };
        wait_for(tx, who, &approval, &mut fx)?;
        Ok((
            PromptResolution::Pending {
                approval: Box::new(approval),
                taken_over,
            },
            fx,
        ))
    })
}

/// This run → `waiting_approval`.
fn wait_for(tx: &Transaction<'_>, who: &Asker, a: &Approval, fx: &mut Effects) -> db::Result<()> {
    let change = StatusChange::to(
        RunStatus::WaitingApproval,
        Some(format!("waiting for approval {}", a.approval_id)),
    );
    if let Some(prev) =
        runs::change_status(tx, &who.tool_run_id, &change, &who.actor, Guard::NotFinal)?
    {
        fx.events.push(status_event(
            &who.tool_run_id,
            &who.tool,
            Some(&who.execution_id),
            prev,
            &change,
        ));
        fx.status = Some(RunStatus::WaitingApproval);
    }
    Ok(())
}

/// The run that asked first (and exited 90) is done once a re-run takes up its decision.
fn close_waiting_run(
    tx: &Transaction<'_>,
    who: &Asker,
    a: &Approval,
    fx: &mut Effects,
) -> db::Result<()> {
    if a.tool_run_id == who.tool_run_id {
        return Ok(());
    }
    let by = a.decided_by.as_deref().unwrap_or("someone");
    let change = if a.answers() {
        StatusChange::to(
            RunStatus::Completed,
            Some(format!(
                "approval {} {} by {by}; resumed as {}",
                a.approval_id, a.status, who.tool_run_id
            )),
        )
    } else {
        StatusChange::to(
            RunStatus::Failed,
            Some(format!("approval {} {} by {by}", a.approval_id, a.status)),
        )
    };
    if let Some(prev) = runs::change_status(
        tx,
        &a.tool_run_id,
        &change,
        &who.actor,
        Guard::From(&[RunStatus::WaitingApproval]),
    )? {
        fx.events.push(status_event(
            &a.tool_run_id,
            &a.tool_name,
            a.execution_id.as_deref(),
            prev,
            &change,
        ));
    }
    Ok(())
}

/// What became of a cooperative request.
#[derive(Debug, Clone)]
pub enum Cooperative {
    /// A new pending approval.
    Pending(Box<Approval>),
    /// This command's request was already decided (the re-run has `AUTO_APPROVAL`).
    AlreadyDecided,
}

/// Records a cooperative tool's `approval_needed` line.
pub fn cooperative(
    conn: &mut Connection,
    who: &Asker,
    req: &CooperativeRequest,
    ttl: Option<Duration>,
    on_expire: OnExpire,
) -> db::Result<(Cooperative, Effects)> {
    let question = sanitize_text(&req.question);
    let prompt_fp = fingerprint::prompt(&who.tool, &question);
    db::write(conn, |tx| {
        let mut fx = Effects::default();
        let decided =
            approvals::find_used_by(tx, &who.request_fingerprint, &prompt_fp, &who.tool_run_id)?;
        if decided.is_some() {
            return Ok((Cooperative::AlreadyDecided, fx));
        }
        let mut a = approval_for(
            who,
            &PromptRequest {
                prompt: Prompt {
                    kind: PromptKind::Cooperative,
                    secret: false,
                    rule: "cooperative".into(),
                    question: question.clone(),
                    prompt_line: sanitize_line(&question),
                    context: req
                        .context
                        .as_deref()
                        .map(sanitize_text)
                        .unwrap_or_default(),
                    options: req.options.clone(),
                    default: req.default.clone(),
                    allows_text: req.allows_text,
                    alternative: None,
                },
                prompt_fingerprint: prompt_fp.clone(),
                policies: Vec::new(),
                ttl,
                on_expire,
            },
        );
        if req.context.is_none() {
            a.context = None;
        }
        // The tool may name its approval; a name already taken (or not ours to take) is
        // replaced.
        if let Some(wanted) = req
            .approval_id
            .as_deref()
            .filter(|w| id::has_shape(w, id::APPROVAL_PREFIX) || w.starts_with(id::APPROVAL_PREFIX))
            && approvals::get(tx, wanted)?.is_none()
        {
            a.approval_id = wanted.to_owned();
        }
        approvals::insert(tx, &a, &who.actor)?;
        fx.events.push(a.needed_event());
        wait_for(tx, who, &a, &mut fx)?;
        Ok((Cooperative::Pending(Box::new(a)), fx))
    })
}

/// Whether a caller's `AUTO_APPROVAL` is a real decision for this command: the approval
/// `HEADLESS_RUN_APPROVAL_ID` names must be decided, answer with exactly this value, and
/// belong to this command. A cooperative one is consumed here (the tool acts on the
/// variable); a prompt one is consumed when the prompt shows.
pub fn validate_auto_approval(
    conn: &mut Connection,
    who: &Asker,
    approval_id: Option<&str>,
    value: &str,
) -> Result<(Approval, Effects), String> {
    let Some(approval_id) = approval_id.filter(|a| !a.is_empty()) else {
        return Err("HEADLESS_RUN_APPROVAL_ID is not set".into());
    };
    db::write(conn, |tx| {
        let mut fx = Effects::default();
        let Some(a) = approvals::get(tx, approval_id)? else {
            return Ok(Err(format!("no approval {approval_id}")));
        };
        if !a.answers() || a.chosen_value.as_deref() != Some(value) {
            return Ok(Err(format!(
                "approval {approval_id} is not decided with this value"
            )));
        }
        if a.request_fingerprint.as_deref() != Some(&who.request_fingerprint) {
            return Ok(Err(format!(
                "approval {approval_id} was asked by another command"
            )));
        }
        if a.prompt_kind == Some(PromptKind::Cooperative) {
            if !approvals::consume(tx, approval_id, &who.tool_run_id, &who.actor)? {
                return Ok(Err(format!("approval {approval_id} was already used")));
            }
            approvals::set_resumed_run(tx, approval_id, &who.tool_run_id)?;
            close_waiting_run(tx, who, &a, &mut fx)?;
        }
        Ok(Ok((a, fx)))
    })
    .map_err(|e| e.to_string())
    .and_then(|r| r)
}

/// What a wait-mode watcher reports.
#[derive(Debug)]
pub enum Watched {
    /// The approval is no longer pending (decided or expired).
    Decided(Box<Approval>),
}

/// Watches one approval from its own connection: `PRAGMA data_version` every 50 ms (a
/// change in another connection is the only thing that can decide it), and expiry on time.
pub struct Watcher {
    pub rx: Receiver<Watched>,
    stop: Arc<AtomicBool>,
}

/// How often a watcher looks.
pub const WATCH_EVERY: Duration = Duration::from_millis(50);

impl Watcher {
    pub fn start(db_path: PathBuf, log_path: PathBuf, approval: &Approval) -> Watcher {
        let (tx, rx) = mpsc::channel();
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let id = approval.approval_id.clone();
        let expires = approval
            .expires_at
            .as_deref()
            .and_then(time::parse_rfc3339)
            .and_then(|t| t.duration_since(SystemTime::now()).ok())
            .map(|left| Instant::now() + left);
        let _ = std::thread::Builder::new()
            .name("approval-watch".into())
            .spawn(move || {
                let mut conn = None;
                let mut seen = None;
                while !flag.load(Ordering::Relaxed) {
                    if conn.is_none() {
                        conn = db::open(&db_path, OpenMode::Existing).ok();
                    }
                    if let Some(c) = conn.as_mut() {
                        let overdue = expires.is_some_and(|e| Instant::now() >= e);
                        let version = db::data_version(c).ok();
                        if overdue || version.is_none() || version != seen {
                            seen = version;
                            if overdue {
                                let expired =
                                    db::write(c, approvals::expire_due).unwrap_or_default();
                                control::log_events(
                                    &log_path,
                                    &expired
                                        .iter()
                                        .map(Approval::status_event)
                                        .collect::<Vec<_>>(),
                                );
                            }
                            match approvals::get(c, &id) {
                                Ok(Some(a)) if a.status != ApprovalStatus::Pending => {
                                    let _ = tx.send(Watched::Decided(Box::new(a)));
                                    return;
                                }
                                Ok(Some(_)) => {}
                                // Gone (gc'd) or unreadable: try a fresh connection.
                                _ => conn = None,
                            }
                        }
                    }
                    std::thread::sleep(WATCH_EVERY);
                }
            });
        Watcher { rx, stop }
    }
}

impl Drop for Watcher {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// Who decided, for messages: `alice via cli`, `policy:tmp-files`.
pub fn decided_by(a: &Approval) -> String {
    match (a.decided_by.as_deref(), a.decision_channel.as_deref()) {
        (Some(by), Some(ch)) if by != ch => format!("{by} via {ch}"),
        (Some(by), _) => by.to_owned(),
        _ => "nobody".into(),
    }
}
