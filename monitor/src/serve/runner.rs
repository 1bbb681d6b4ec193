//! The runner API (`/api/v1/runner/…`): a shim whose store is this server
//! (`hr_shared::store::http::HttpRunner`). Each call runs the same [`RunnerStore`] method on
//! one of the server's own runner sessions, after checking what a runner token may do:
//!
//! - write only the runs it started: a run's first write names its token, kept in
//!   `STATE/runner-runs/RUN_ID` (0600 under 0700); another token's run, or a run a local
//!   shim started, is 403;
//! - ask, use up and read only approvals of its own runs;
//! - never have an approval answered by its expiry: `on_expire` is always a rejection
//!   (the runner says when an approval expires, so a default could be planted by a tool);
//! - never decide: the decision endpoints refuse a runner token (403), and these endpoints
//!   refuse every other role;
//! - be recorded as itself: the audit chain's actor is `runner:TOKEN_NAME`, whatever the
//!   client says.
//!
//! Facts about processes come from the asking host ([`ReportedHost`]), for the runs of its
//! own token it was shown; a process it said nothing about counts as running.

use super::auth::Runner;
use super::openapi::*;
use super::query::{self, Params};
use super::{ApiError, Caller, Server, ok};
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::Response;
use hr_shared::approvals::Approval;
use hr_shared::config::OnExpire;
use hr_shared::runs::{StatusChange, ToolRun};
use hr_shared::store::http::ReportedHost;
use hr_shared::store::{Done, Replace, RunWrite, RunnerStore};
use hr_shared::wire::{
    AutoApprovalCall, CooperativeCall, DeliverCall, ErrorBody, ExpireCall, LiveRun, PromptCall,
    RecordCall, RunnerOutcome,
};
use serde::de::DeserializeOwned;
use std::path::PathBuf;
use std::sync::Arc;

/// Who the audit chain says wrote: the authenticated token, never a name the client gives.
fn actor(c: &Caller) -> String {
    format!("runner:{}", c.name)
}

/// A runner's row as the store keeps it (`store::http::mark_as_runners`).
fn as_runners(c: &Caller, row: &mut ToolRun) {
    hr_shared::store::http::mark_as_runners(&c.name, row);
}

/// The request fingerprint of a runner's command, kept apart per token
/// (`store::http::runner_fingerprint`).
fn fingerprint_for(c: &Caller, client: &str) -> String {
    hr_shared::store::http::runner_fingerprint(&c.name, client)
}

/// Keeps only what this token may see: events about its own runs.
fn own_events(s: &Server, c: &Caller, fx: &mut hr_shared::store::Effects) {
    fx.events
        .retain(|e| owner(s, &e.tool_run_id).as_deref() == Some(c.name.as_str()));
}

/// A JSON body of the call's shape (400 naming what is wrong).
fn body<T: DeserializeOwned>(bytes: &Bytes) -> Result<T, ApiError> {
    serde_json::from_slice(bytes)
        .map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, format!("not a valid call: {e}")))
}

/// Whether `id` can name a file (the ids the shim makes, and nothing with a path in it).
fn safe_id(id: &str) -> bool {
    (1..=64).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// `STATE/runner-runs`.
fn owners_dir(s: &Server) -> PathBuf {
    s.paths.root.join("runner-runs")
}

/// The token that started run `id` through this API, if any.
fn owner(s: &Server, id: &str) -> Option<String> {
    if !safe_id(id) {
        return None;
    }
    std::fs::read_to_string(owners_dir(s).join(id)).ok()
}

/// Refuses a run that is not `c`'s.
fn own(s: &Server, c: &Caller, id: &str) -> Result<(), ApiError> {
    match owner(s, id) {
        Some(o) if o == c.name => Ok(()),
        _ => Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "this run was not started with this token",
        )),
    }
}

/// Makes `c` the owner of run `id`, which must not be in the store yet unless it is `c`'s
/// already (a spooled row's delivery, a retried first write).
async fn claim(s: &Arc<Server>, c: &Caller, id: &str) -> Result<(), ApiError> {
    if !safe_id(id) {
        return Err(ApiError::new(StatusCode::BAD_REQUEST, "not a run id"));
    }
    match owner(s, id) {
        Some(o) if o == c.name => return Ok(()),
        Some(_) => return Err(own(s, c, id).unwrap_err()),
        None => {}
    }
    let look = id.to_owned();
    let exists = s
        .with_store(move |st| super::or_missing(st.run(&look)).map(|r| r.is_some()))
        .await?;
    if exists {
        return Err(own(s, c, id).unwrap_err());
    }
    // Written whole under a name of its own, then linked into place: a reader never sees
    // a half-written owner, and of two first writes at once the first link wins.
    let dir = owners_dir(s);
    hr_shared::paths::create_private_dir(&dir)
        .and_then(|()| {
            hr_shared::paths::write_private(
                &dir.join(id),
                c.name.as_bytes(),
                hr_shared::paths::Put::KeepExisting,
            )
        })
        .map_err(|e| {
            ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                format!("cannot record the run's owner: {e}"),
            )
        })?;
    own(s, c, id)
}

/// Whose run holds an approval, as this token sees it.
#[derive(Debug, PartialEq, Eq)]
enum Holder {
    Mine,
    Other,
    /// No such approval.
    None,
}

async fn holder_of(s: &Arc<Server>, c: &Caller, approval_id: &str) -> Result<Holder, ApiError> {
    let look = approval_id.to_owned();
    let run = s
        .with_store(move |st| super::or_missing(st.approval(&look)))
        .await?
        .map(|a| a.tool_run_id);
    Ok(match run {
        None => Holder::None,
        Some(r) if owner(s, &r).as_deref() == Some(c.name.as_str()) => Holder::Mine,
        Some(_) => Holder::Other,
    })
}

fn not_mine() -> ApiError {
    ApiError::new(
        StatusCode::FORBIDDEN,
        "that approval is not held by a run of this token",
    )
}

/// Runs `f` on a runner session; the answer is its outcome as JSON, with only the events
/// about this token's runs.
async fn answer<T: serde::Serialize + Send + 'static>(
    s: &Arc<Server>,
    c: &Caller,
    f: impl FnOnce(&mut (dyn RunnerStore + 'static)) -> hr_shared::store::StoreResult<Done<T>>
    + Send
    + 'static,
) -> Result<Response, ApiError> {
    let mut out = s
        .runners
        .call(move |st| f(st).map_err(ApiError::store))
        .await?;
    own_events(s, c, &mut out.effects);
    Ok(ok(StatusCode::OK, &out))
}

#[utoipa::path(
    post,
    path = "/api/v1/runner/record",
    operation_id = "runnerRecord",
    summary = "Write a batch of the run's changes",
    description = "Runner API: writes a batch of the run's changes in one transaction (its first write, `Start`, makes the run this token's). Only a runner token, only its own runs.",
    request_body(content = RecordCall, description = "RunnerStore::record"),
    responses(
        (status = 200, description = OUTCOME, body = RunnerOutcome),
        (status = 400, description = NOT_A_CALL, body = ErrorBody),
        (status = 401, description = NO_TOKEN, body = ErrorBody),
        (status = 403, description = RUNNER_ROLE, body = ErrorBody),
        (status = 413, description = TOO_LARGE, body = ErrorBody),
        (status = 429, description = HELD_OFF, body = ErrorBody),
        (status = 503, description = STORE_FAILED, body = ErrorBody),
    )
)]
pub(super) async fn record(
    State(s): State<Arc<Server>>,
    Runner(c): Runner,
    bytes: Bytes,
) -> Result<Response, ApiError> {
    let mut call: RecordCall = body(&bytes)?;
    call.actor = actor(&c);
    for w in &mut call.writes {
        if let RunWrite::Start(row) = w {
            as_runners(&c, row);
            if let Some(from) = &row.resumed_from
                && owner(&s, from).as_deref() != Some(c.name.as_str())
            {
                row.resumed_from = None;
            }
        }
    }
    if call.writes.iter().any(|w| matches!(w, RunWrite::Start(_))) {
        claim(&s, &c, &call.run_id).await?;
    } else {
        own(&s, &c, &call.run_id)?;
    }
    for w in &call.writes {
        match w {
            RunWrite::Start(row) if row.tool_run_id != call.run_id => {
                return Err(ApiError::new(
                    StatusCode::BAD_REQUEST,
                    "the row is another run's",
                ));
            }
            // Only a decision one of its own runs holds is the token's to use up.
            RunWrite::Consume(id) if holder_of(&s, &c, id).await? != Holder::Mine => {
                return Err(not_mine());
            }
            _ => {}
        }
    }
    answer(&s, &c, move |st| {
        st.record(&call.run_id, &call.writes, &call.actor, call.row_may_exist)
    })
    .await
}

/// This token's runs on host `host` (as the runner names it) whose shim may still run.
/// With `fingerprint` (as stored: the token's own), only those that asked a pending
/// approval of that command: the runs a prompt of it could take over, the only ones whose
/// processes its rules look at. What a prompt reads and sends then grows with its own
/// command's queue, not with every run on the host (a thousand live runs on one host made
/// the prompt's body pass the runner API's limit).
async fn live_runs(
    s: &Arc<Server>,
    c: &Caller,
    host: &str,
    fingerprint: Option<String>,
) -> Result<Vec<LiveRun>, ApiError> {
    let runs: Vec<ToolRun> = match fingerprint {
        None => {
            s.with_store(|st| super::or_none(st.supervised_runs(Some(10_000))))
                .await?
        }
        Some(fp) => {
            s.with_store(move |st| {
                let asked = super::or_none(st.approvals(&hr_shared::approvals::ApprovalFilter {
                    statuses: vec![hr_shared::status::ApprovalStatus::Pending],
                    request_fingerprint: Some(fp),
                    ..Default::default()
                }))?;
                let owners: std::collections::BTreeSet<String> =
                    asked.into_iter().map(|a| a.tool_run_id).collect();
                let mut runs = Vec::with_capacity(owners.len());
                for id in owners {
                    if let Some(run) = super::or_missing(st.run(&id))? {
                        runs.push(run);
                    }
                }
                Ok(runs)
            })
            .await?
        }
    };
    Ok(runs
        .into_iter()
        .filter(|r| r.host.as_deref() == Some(host))
        .filter(|r| owner(s, &r.tool_run_id).as_deref() == Some(c.name.as_str()))
        .map(|r| LiveRun {
            tool_run_id: r.tool_run_id,
            shim_pid: r.shim_pid,
            shim_start_time: r.shim_start_time,
        })
        .collect())
}

/// `GET /api/v1/runner/live?host=H[&fingerprint=F]`: this token's runs on host `H` whose
/// shim may still run (with `F`: those that asked a pending approval of that command), for
/// the host to say which of their processes are gone.
#[utoipa::path(
    get,
    path = "/api/v1/runner/live",
    operation_id = "runnerLive",
    summary = "The token's runs on a host whose shim may still run",
    description = "Runner API: this token's runs on `host` whose shim may still run (for the host to say which processes are gone before it asks).",
    params(
        ("host" = String, Query),
        ("fingerprint" = Option<String>, Query, description = "only the runs that asked a pending approval of this command (its request fingerprint, as the runner sends it)"),
    ),
    responses(
        (status = 200, description = "the runs", body = Vec<LiveRun>),
        (status = 400, description = BAD_INPUT, body = ErrorBody),
        (status = 401, description = NO_TOKEN, body = ErrorBody),
        (status = 403, description = RUNNER_ROLE, body = ErrorBody),
        (status = 429, description = HELD_OFF, body = ErrorBody),
        (status = 503, description = STORE_FAILED, body = ErrorBody),
    )
)]
pub(super) async fn live(
    State(s): State<Arc<Server>>,
    Runner(c): Runner,
    Params(q): Params<query::HostQuery>,
) -> Result<Response, ApiError> {
    let host = q
        .host
        .ok_or_else(|| ApiError::new(StatusCode::BAD_REQUEST, "`host` is needed"))?;
    let fingerprint = q.fingerprint.map(|fp| fingerprint_for(&c, &fp));
    let mine = live_runs(&s, &c, &host, fingerprint).await?;
    Ok(ok(StatusCode::OK, &mine))
}

/// The asking run as the server trusts it: its fingerprint kept apart per token, its actor
/// the token, and its approvals needing at least what the server's own `[[reviewers]]` ask
/// for the command (a runner may ask for more, never less).
/// The rules are matched both on what the runner says it runs and on its run's row as
/// stored (what operators are shown): the stricter wins.
async fn trusted(
    s: &Server,
    c: &Caller,
    who: &mut hr_shared::store::Asker,
) -> Result<(), ApiError> {
    who.actor = actor(c);
    who.request_fingerprint = fingerprint_for(c, &who.request_fingerprint);
    let mut floor = hr_shared::policy::reviewers_for(&s.config, &who.tool, &who.argv, &who.cwd);
    if s.config.reviewers().next().is_some() {
        let id = who.tool_run_id.clone();
        if let Some(row) = s
            .with_store(move |st| super::or_missing(st.run(&id)))
            .await?
        {
            floor = floor.stricter(&hr_shared::policy::reviewers_for(
                &s.config,
                &row.tool_name,
                &row.argv_json,
                row.cwd.as_deref().unwrap_or(""),
            ));
        }
    }
    who.review = floor.stricter(&who.review.bounded());
    Ok(())
}

#[utoipa::path(
    post,
    path = "/api/v1/runner/prompt",
    operation_id = "runnerPrompt",
    summary = "Resolve a prompt of the token's run",
    description = "Runner API: resolves a prompt of the token's run (a decision, a policy, a takeover, or a new pending approval). Expiry is always a rejection.",
    request_body(content = PromptCall, description = "the asker, the prompt request, the host's name and its word on its processes"),
    responses(
        (status = 200, description = OUTCOME, body = RunnerOutcome),
        (status = 400, description = NOT_A_CALL, body = ErrorBody),
        (status = 401, description = NO_TOKEN, body = ErrorBody),
        (status = 403, description = RUNNER_ROLE, body = ErrorBody),
        (status = 413, description = TOO_LARGE, body = ErrorBody),
        (status = 429, description = HELD_OFF, body = ErrorBody),
        (status = 503, description = STORE_FAILED, body = ErrorBody),
    )
)]
pub(super) async fn prompt(
    State(s): State<Arc<Server>>,
    Runner(c): Runner,
    bytes: Bytes,
) -> Result<Response, ApiError> {
    let mut call: PromptCall = body(&bytes)?;
    own(&s, &c, &call.who.tool_run_id)?;
    trusted(&s, &c, &mut call.who).await?;
    call.req.on_expire = OnExpire::Reject;
    // A runner's config decides nothing here: only a person (or a remembered decision an
    // operator made) answers its prompts.
    call.req.policies.clear();
    // Its word counts only for the processes of its own runs on the host it names.
    let fingerprint = Some(call.who.request_fingerprint.clone());
    let mine = live_runs(&s, &c, &call.host, fingerprint).await?;
    let facts = call
        .facts
        .into_iter()
        .filter(|f| {
            mine.iter().any(|r| {
                r.shim_pid == Some(i64::from(f.pid))
                    && r.shim_start_time.map(|t| t as u64) == f.start_time
            })
        })
        .collect();
    let host = ReportedHost::new(call.host, facts);
    answer(&s, &c, move |st| {
        st.resolve_prompt(&call.who, &call.req, &host)
    })
    .await
}

#[utoipa::path(
    post,
    path = "/api/v1/runner/cooperative",
    operation_id = "runnerCooperative",
    summary = "Record a cooperative tool's approval request",
    description = "Runner API: records a cooperative tool's approval request for the token's run.",
    request_body(content = CooperativeCall, description = "RunnerStore::cooperative"),
    responses(
        (status = 200, description = OUTCOME, body = RunnerOutcome),
        (status = 400, description = NOT_A_CALL, body = ErrorBody),
        (status = 401, description = NO_TOKEN, body = ErrorBody),
        (status = 403, description = RUNNER_ROLE, body = ErrorBody),
        (status = 413, description = TOO_LARGE, body = ErrorBody),
        (status = 429, description = HELD_OFF, body = ErrorBody),
        (status = 503, description = STORE_FAILED, body = ErrorBody),
    )
)]
pub(super) async fn cooperative(
    State(s): State<Arc<Server>>,
    Runner(c): Runner,
    bytes: Bytes,
) -> Result<Response, ApiError> {
    let mut call: CooperativeCall = body(&bytes)?;
    own(&s, &c, &call.who.tool_run_id)?;
    trusted(&s, &c, &mut call.who).await?;
    answer(&s, &c, move |st| {
        st.cooperative(&call.who, &call.req, call.ttl, OnExpire::Reject)
    })
    .await
}

#[utoipa::path(
    post,
    path = "/api/v1/runner/auto-approval",
    operation_id = "runnerAutoApproval",
    summary = "Check and use up an AUTO_APPROVAL",
    description = "Runner API: whether an AUTO_APPROVAL is a real decision for the token's run (used up by the call).",
    request_body(content = AutoApprovalCall, description = "RunnerStore::check_auto_approval"),
    responses(
        (status = 200, description = OUTCOME, body = RunnerOutcome),
        (status = 400, description = NOT_A_CALL, body = ErrorBody),
        (status = 401, description = NO_TOKEN, body = ErrorBody),
        (status = 403, description = RUNNER_ROLE, body = ErrorBody),
        (status = 413, description = TOO_LARGE, body = ErrorBody),
        (status = 429, description = HELD_OFF, body = ErrorBody),
        (status = 503, description = STORE_FAILED, body = ErrorBody),
    )
)]
pub(super) async fn auto_approval(
    State(s): State<Arc<Server>>,
    Runner(c): Runner,
    bytes: Bytes,
) -> Result<Response, ApiError> {
    let mut call: AutoApprovalCall = body(&bytes)?;
    own(&s, &c, &call.who.tool_run_id)?;
    trusted(&s, &c, &mut call.who).await?;
    // Only an approval one of its own runs asked (one that does not exist is the store's
    // to say so).
    if holder_of(&s, &c, &call.approval_id).await? == Holder::Other {
        return Err(not_mine());
    }
    answer(&s, &c, move |st| {
        st.check_auto_approval(
            &call.who,
            &call.approval_id,
            &call.value,
            call.resumed_from.as_deref(),
        )
    })
    .await
}

/// `GET /api/v1/runner/approvals/{id}`: the approval, when one of this token's runs holds
/// it (else `null`, as for one that does not exist).
#[utoipa::path(
    get,
    path = "/api/v1/runner/approvals/{id}",
    operation_id = "runnerApproval",
    summary = "An approval of one of the token's runs",
    description = "Runner API: an approval of one of the token's runs; null for any other (or none).",
    params(("id" = String, Path)),
    responses(
        (status = 200, description = "the approval, or null", body = Option<Approval>),
        (status = 400, description = BAD_ID, body = ErrorBody),
        (status = 401, description = NO_TOKEN, body = ErrorBody),
        (status = 403, description = RUNNER_ROLE, body = ErrorBody),
        (status = 429, description = HELD_OFF, body = ErrorBody),
        (status = 503, description = STORE_FAILED, body = ErrorBody),
    )
)]
pub(super) async fn approval(
    State(s): State<Arc<Server>>,
    Runner(c): Runner,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let found = s
        .runners
        .call(move |st| st.approval(&id).map_err(ApiError::store))
        .await?;
    let mine = found.filter(|a| owner(&s, &a.tool_run_id).as_deref() == Some(c.name.as_str()));
    Ok(ok(StatusCode::OK, &mine))
}

/// `POST /api/v1/runner/expire`: expires the overdue approvals; its body, if any, is not
/// read.
#[utoipa::path(
    post,
    path = "/api/v1/runner/expire",
    operation_id = "runnerExpire",
    summary = "Expire overdue approvals",
    description = "Runner API: expires overdue approvals (the server's clock).",
    request_body = Option<ExpireCall>,
    responses(
        (status = 200, description = OUTCOME, body = RunnerOutcome),
        (status = 400, description = NOT_A_CALL, body = ErrorBody),
        (status = 401, description = NO_TOKEN, body = ErrorBody),
        (status = 403, description = RUNNER_ROLE, body = ErrorBody),
        (status = 413, description = TOO_LARGE, body = ErrorBody),
        (status = 429, description = HELD_OFF, body = ErrorBody),
        (status = 503, description = STORE_FAILED, body = ErrorBody),
    )
)]
pub(super) async fn expire(
    State(s): State<Arc<Server>>,
    Runner(c): Runner,
) -> Result<Response, ApiError> {
    let mut done = s
        .runners
        .call(|st| st.expire_due().map_err(ApiError::store))
        .await?;
    // What expired elsewhere is not this token's to read.
    done.value
        .retain(|a| owner(&s, &a.tool_run_id).as_deref() == Some(c.name.as_str()));
    own_events(&s, &c, &mut done.effects);
    Ok(ok(StatusCode::OK, &done))
}

/// `POST /api/v1/runner/deliver`: a final row a shim of the host could not write before it
/// exited, from the host's spool: written as that shim would have (the row if it never
/// landed, then its final status — never over a cancellation).
#[utoipa::path(
    post,
    path = "/api/v1/runner/deliver",
    operation_id = "runnerDeliver",
    summary = "Deliver a final row from the host's spool",
    description = "Runner API: a final row a shim of the host could not write before it exited (the host's spool).",
    request_body(content = DeliverCall, description = "the row, and whether its shim no longer runs"),
    responses(
        (status = 200, description = OUTCOME, body = RunnerOutcome),
        (status = 400, description = NOT_A_CALL, body = ErrorBody),
        (status = 401, description = NO_TOKEN, body = ErrorBody),
        (status = 403, description = RUNNER_ROLE, body = ErrorBody),
        (status = 409, description = "its shim still runs", body = ErrorBody),
        (status = 413, description = TOO_LARGE, body = ErrorBody),
        (status = 429, description = HELD_OFF, body = ErrorBody),
        (status = 503, description = STORE_FAILED, body = ErrorBody),
    )
)]
pub(super) async fn deliver(
    State(s): State<Arc<Server>>,
    Runner(c): Runner,
    bytes: Bytes,
) -> Result<Response, ApiError> {
    let call: DeliverCall = body(&bytes)?;
    let mut run = call.run;
    as_runners(&c, &mut run);
    if let Some(from) = &run.resumed_from
        && owner(&s, from).as_deref() != Some(c.name.as_str())
    {
        run.resumed_from = None;
    }
    if !call.gone {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            "its shim still runs: it delivers the row itself",
        ));
    }
    claim(&s, &c, &run.tool_run_id).await?;
    let mut writes = vec![RunWrite::Start(Box::new(run.clone()))];
    if run.status.is_final() {
        writes.push(RunWrite::Status(
            StatusChange {
                status: run.status,
                reason: run.reason.clone(),
                exit_code: run.exit_code,
                finished: true,
                error: run.last_error_msg.clone(),
                at: run.completed_at.clone(),
            },
            Replace::AnyButCancelled,
        ));
    }
    let by = actor(&c);
    let id = run.tool_run_id.clone();
    answer(&s, &c, move |st| st.record(&id, &writes, &by, true)).await
}
