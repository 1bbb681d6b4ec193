//! `/api/v1/executions`: pipelines and their human steps.

use super::openapi::*;
use super::*;
use hr_shared::wire::{
    ApprovalView, DecisionRequest, ExecutionDetail, ExecutionSummary, ExecutionsBody, PipelineView,
};

#[utoipa::path(
    post,
    path = "/api/v1/executions/{id}/approve",
    operation_id = "approveExecution",
    summary = "Approve an execution's one pending approval",
    params(("id" = String, Path, description = "the execution id")),
    request_body = Option<DecisionRequest>,
    responses(
        (status = 200, description = "decided", body = ApprovalView),
        (status = 400, description = BAD_INPUT, body = ErrorBody),
        (status = 401, description = NO_TOKEN, body = ErrorBody),
        (status = 403, description = ROLE_OR_DECIDERS, body = ErrorBody),
        (status = 404, description = "no such execution", body = ErrorBody),
        (status = 409, description = "nothing of the execution waits (its last decision: by whom, when; its last run's or its pipeline's status), several do, it was decided already, or it is not the version shown (`outcome`: changed, superseded)", body = ErrorBody),
        (status = 413, description = TOO_LARGE, body = ErrorBody),
        (status = 422, description = INVALID, body = ErrorBody),
        (status = 429, description = HELD_OFF, body = ErrorBody),
        (status = 503, description = STORE_DOWN, body = ErrorBody),
    )
)]
pub(super) async fn approve_execution(
    State(s): State<Arc<Server>>,
    Operator(c): Operator,
    Path(id): Path<String>,
    body: Bytes,
) -> Result<Response, ApiError> {
    decide_execution(&s, &c, id, "approve", &body).await
}

#[utoipa::path(
    post,
    path = "/api/v1/executions/{id}/reject",
    operation_id = "rejectExecution",
    summary = "Reject an execution's one pending approval",
    params(("id" = String, Path, description = "the execution id")),
    request_body = Option<DecisionRequest>,
    responses(
        (status = 200, description = "decided", body = ApprovalView),
        (status = 400, description = BAD_INPUT, body = ErrorBody),
        (status = 401, description = NO_TOKEN, body = ErrorBody),
        (status = 403, description = ROLE_OR_DECIDERS, body = ErrorBody),
        (status = 404, description = "no such execution", body = ErrorBody),
        (status = 409, description = "nothing of the execution waits (its last decision: by whom, when; its last run's or its pipeline's status), several do, it was decided already, or it is not the version shown (`outcome`: changed, superseded)", body = ErrorBody),
        (status = 413, description = TOO_LARGE, body = ErrorBody),
        (status = 422, description = INVALID, body = ErrorBody),
        (status = 429, description = HELD_OFF, body = ErrorBody),
        (status = 503, description = STORE_DOWN, body = ErrorBody),
    )
)]
pub(super) async fn reject_execution(
    State(s): State<Arc<Server>>,
    Operator(c): Operator,
    Path(id): Path<String>,
    body: Bytes,
) -> Result<Response, ApiError> {
    decide_execution(&s, &c, id, "reject", &body).await
}

/// Decides the one pending approval of execution `id` with `action` (`approve` or
/// `reject`).
async fn decide_execution(
    s: &Server,
    c: &Caller,
    id: String,
    action: &str,
    body: &Bytes,
) -> Result<Response, ApiError> {
    let fields = body_fields(body)?;
    let execution = id.clone();
    let pending = s
        .with_store(move |st| {
            or_none(st.approvals(&ApprovalFilter {
                statuses: vec![ApprovalStatus::Pending],
                execution_id: Some(execution),
                ..Default::default()
            }))
        })
        .await?;
    // A question asked again on a changed screen is approved only by one who sends its
    // version: "approve the execution" was meant for what was shown before.
    if let [one] = pending.as_slice()
        && let Some(old) = &one.supersedes
        && fields.version.is_none()
    {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            format!(
                "{} replaced {old} when the screen changed: read it and send its version",
                one.approval_id
            ),
        )
        .with("outcome", json!("changed"))
        .with("approval_id", json!(one.approval_id))
        .with("version", json!(one.version())));
    }
    match pending.as_slice() {
        [] => Err(nothing_pending(s, id).await?),
        [one] => decide_as(s, c, one.approval_id.clone(), action.to_owned(), fields).await,
        many => Err(ApiError::new(
            StatusCode::CONFLICT,
            "several approvals of this execution are pending: decide one by id",
        )
        .with(
            "pending",
            json!(
                many.iter()
                    .map(|a| a.approval_id.clone())
                    .collect::<Vec<_>>()
            ),
        )),
    }
}

/// Pipeline execution `id`, if the store keeps one (a read: the embedded store's database
/// is not created for it).
async fn pipeline_of(
    s: &Server,
    id: &str,
) -> Result<Option<hr_shared::store::pipelines::Execution>, ApiError> {
    let paths = s.paths.clone();
    let look = id.to_owned();
    tokio::task::spawn_blocking(move || {
        if hr_shared::store::capabilities::of(&paths).database_file && !paths.db.exists() {
            return Ok(None);
        }
        hr_shared::store::pipelines::for_store(&paths).and_then(|mut st| st.pipeline(&look))
    })
    .await
    .map_err(|e| ApiError::new(StatusCode::SERVICE_UNAVAILABLE, e.to_string()))?
    .map_err(ApiError::store)
}

/// Why execution `id` has nothing to approve or reject: 404 when it is unknown; else 409
/// saying its state — its last approval's decision (who, when), or its last run's status.
async fn nothing_pending(s: &Server, id: String) -> Result<ApiError, ApiError> {
    let exid = id.clone();
    let (approval, run) = s
        .with_store(move |st| {
            let approval = or_none(st.approvals(&ApprovalFilter {
                execution_id: Some(exid.clone()),
                limit: Some(1),
                ..Default::default()
            }))?
            .into_iter()
            .next();
            let run = or_none(st.runs(&RunFilter {
                execution_id: Some(exid),
                limit: Some(1),
                ..Default::default()
            }))?
            .into_iter()
            .next();
            Ok((approval, run))
        })
        .await?;
    // A pipeline may have no run yet (queued, or cancelled before its first step).
    let pipeline = if approval.is_none() && run.is_none() {
        pipeline_of(s, &id).await?
    } else {
        None
    };
    let id = hr_shared::sanitize::sanitize_line(&id);
    if let Some(p) = pipeline {
        return Ok(ApiError::new(
            StatusCode::CONFLICT,
            format!(
                "nothing of {id} waits for a decision: the pipeline is {}",
                p.status
            ),
        )
        .with("outcome", json!("not_waiting"))
        .with("pipeline_status", json!(p.status.as_str())));
    }
    Ok(match (approval, run) {
        (Some(a), _) => ApiError::new(
            StatusCode::CONFLICT,
            format!(
                "nothing of {id} waits for a decision: its last approval, {}, was {} by {} at {}",
                a.approval_id,
                a.status,
                hr_shared::sanitize::sanitize_line(a.decided_by.as_deref().unwrap_or("?")),
                hr_shared::sanitize::sanitize_line(a.decided_at.as_deref().unwrap_or("?"))
            ),
        )
        .with("outcome", json!("not_waiting"))
        .with("status", json!(a.status))
        .with("decided_by", json!(a.decided_by))
        .with("decided_at", json!(a.decided_at))
        .with("approval_id", json!(a.approval_id)),
        (None, Some(r)) => ApiError::new(
            StatusCode::CONFLICT,
            format!(
                "nothing of {id} waits for a decision: its last run, {}, is {}",
                r.tool_run_id, r.status
            ),
        )
        .with("outcome", json!("not_waiting"))
        .with("run_status", json!(r.status)),
        (None, None) => ApiError::new(StatusCode::NOT_FOUND, "no such execution"),
    })
}

/// `GET /api/v1/executions?limit=`: the pipeline executions (`monitor pipeline`), newest
/// first, each with its steps' states.
#[utoipa::path(
    get,
    path = "/api/v1/executions",
    operation_id = "listExecutions",
    summary = "The pipeline executions",
    description = "The pipeline executions (`monitor pipeline`), newest first, each with its steps' states. On a store that keeps no pipelines, none.",
    params(("limit" = Option<usize>, Query, minimum = 1, maximum = 1000)),
    responses(
        (status = 200, description = "the executions", body = ExecutionsBody),
        (status = 400, description = BAD_INPUT, body = ErrorBody),
        (status = 401, description = NO_TOKEN, body = ErrorBody),
        (status = 403, description = ROLE, body = ErrorBody),
        (status = 429, description = HELD_OFF, body = ErrorBody),
        (status = 503, description = STORE_FAILED, body = ErrorBody),
    )
)]
pub(super) async fn list_executions(
    State(s): State<Arc<Server>>,
    _: Reader,
    Params(q): Params<query::LimitQuery>,
) -> Result<Response, ApiError> {
    let limit = match q.limit {
        None => 50,
        Some(l) => l
            .parse::<usize>()
            .ok()
            .filter(|n| (1..=1000).contains(n))
            .ok_or_else(|| {
                ApiError::new(StatusCode::BAD_REQUEST, "limit is a number from 1 to 1000")
            })?,
    };
    let paths = s.paths.clone();
    let list = tokio::task::spawn_blocking(move || {
        // The embedded store has none before its database exists (a GET creates none).
        if hr_shared::store::capabilities::of(&paths).database_file && !paths.db.exists() {
            return Ok(Vec::new());
        }
        hr_shared::store::pipelines::for_store(&paths).and_then(|mut st| st.pipelines(limit))
    })
    .await
    .map_err(|e| ApiError::new(StatusCode::SERVICE_UNAVAILABLE, e.to_string()))?
    .map_err(ApiError::store)?;
    let executions = list.into_iter().map(ExecutionSummary::from).collect();
    Ok(ok(StatusCode::OK, &ExecutionsBody { executions }))
}

/// `GET /api/v1/executions/{id}`: an execution — its runs, its approvals, and when it is a
/// pipeline, its status and steps.
#[utoipa::path(
    get,
    path = "/api/v1/executions/{id}",
    operation_id = "getExecution",
    summary = "One execution",
    description = "An execution (HEADLESS_RUN_EXECUTION_ID): its runs and approvals, newest first, and when it is a pipeline (`monitor pipeline`), its status and steps (node, iteration, status, exit_code, result, comment, reason, …).",
    params(("id" = String, Path, description = "EX-…")),
    responses(
        (status = 200, description = "the execution", body = ExecutionDetail),
        (status = 400, description = BAD_ID, body = ErrorBody),
        (status = 401, description = NO_TOKEN, body = ErrorBody),
        (status = 403, description = ROLE, body = ErrorBody),
        (status = 404, description = "no such execution", body = ErrorBody),
        (status = 429, description = HELD_OFF, body = ErrorBody),
        (status = 503, description = STORE_FAILED, body = ErrorBody),
    )
)]
pub(super) async fn one_execution(
    State(s): State<Arc<Server>>,
    _: Reader,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let execution = id.clone();
    let (runs, approvals) = s
        .with_store(move |st| {
            let runs = or_none(st.runs(&RunFilter {
                execution_id: Some(execution.clone()),
                limit: Some(10_000),
                ..Default::default()
            }))?;
            let approvals = or_none(st.approvals(&ApprovalFilter {
                execution_id: Some(execution),
                limit: Some(10_000),
                ..Default::default()
            }))?;
            Ok((runs, approvals))
        })
        .await?;
    let pipeline = pipeline_of(&s, &id).await?;
    if runs.is_empty() && approvals.is_empty() && pipeline.is_none() {
        return Err(ApiError::new(StatusCode::NOT_FOUND, "no such execution"));
    }
    let detail = ExecutionDetail {
        execution_id: id,
        pipeline: pipeline.map(PipelineView::from),
        runs,
        approvals,
    };
    Ok(ok(StatusCode::OK, &detail))
}
