//! `/api/v1/executions`: pipelines and their human steps.

use super::*;

pub(super) async fn decide_execution(
    State(s): State<Arc<Server>>,
    Operator(c): Operator,
    Path((id, action)): Path<(String, String)>,
    body: Bytes,
) -> Result<Response, ApiError> {
    if action != "approve" && action != "reject" {
        return Err(ApiError::new(StatusCode::NOT_FOUND, "no such endpoint"));
    }
    let fields = body_fields(&body)?;
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
        [] => Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "no pending approval in this execution",
        )),
        [one] => decide_as(&s, &c, one.approval_id.clone(), action, fields).await,
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

/// `GET /api/v1/executions?limit=`: the pipeline executions (`monitor pipeline`), newest
/// first, each with its steps' states.
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
        if paths.is_embedded() && !paths.db.exists() {
            return Ok(Vec::new());
        }
        hr_shared::store::pipelines::for_store(&paths).and_then(|mut st| st.pipelines(limit))
    })
    .await
    .map_err(|e| ApiError::new(StatusCode::SERVICE_UNAVAILABLE, e.to_string()))?
    .map_err(ApiError::store)?;
    let executions: Vec<Value> = list
        .into_iter()
        .map(|p| {
            json!({
                "execution_id": p.execution_id,
                "name": p.name,
                "status": p.status,
                "reason": p.reason,
                "created_at": p.created_at,
                "updated_at": p.updated_at,
                // The states only (a step's result and environment are in
                // GET /api/v1/executions/{id}).
                "steps": p.steps.iter().map(|s| json!({
                    "node": s.node,
                    "iteration": s.iteration,
                    "status": s.status,
                })).collect::<Vec<_>>(),
            })
        })
        .collect();
    Ok(ok(StatusCode::OK, json!({ "executions": executions })))
}

/// `GET /api/v1/executions/{id}`: an execution — its runs, its approvals, and when it is a
/// pipeline, its status and steps.
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
    let paths = s.paths.clone();
    let look = id.clone();
    let pipeline = tokio::task::spawn_blocking(move || {
        // A GET creates no database.
        if paths.is_embedded() && !paths.db.exists() {
            return Ok(None);
        }
        hr_shared::store::pipelines::for_store(&paths).and_then(|mut st| st.pipeline(&look))
    })
    .await
    .map_err(|e| ApiError::new(StatusCode::SERVICE_UNAVAILABLE, e.to_string()))?
    .map_err(ApiError::store)?;
    if runs.is_empty() && approvals.is_empty() && pipeline.is_none() {
        return Err(ApiError::new(StatusCode::NOT_FOUND, "no such execution"));
    }
    let pipeline = pipeline.map(|p| {
        json!({
            "name": p.name,
            "file": p.file,
            "status": p.status,
            "reason": p.reason,
            "runner": p.runner,
            "heartbeat_at": p.heartbeat_at,
            "created_at": p.created_at,
            "updated_at": p.updated_at,
            "vars": p.vars,
            "steps": p.steps,
        })
    });
    Ok(ok(
        StatusCode::OK,
        json!({
            "execution_id": id,
            "pipeline": pipeline,
            "runs": runs,
            "approvals": approvals,
        }),
    ))
}
