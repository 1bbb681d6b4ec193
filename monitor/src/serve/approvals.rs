//! `/api/v1/approvals`: listing, one approval, deciding, its audit rows.

use super::openapi::*;
use super::*;
use hr_shared::wire::{ApprovalView, ApprovalsBody, AuditBody, DecideRequest, DecisionRequest};

/// An approval as the API shows it: its row, and its run's command line, directory and
/// host.
pub(super) fn approval_view(
    store: &mut dyn OperatorStore,
    a: &Approval,
) -> Result<ApprovalView, ApiError> {
    let run = store.run(&a.tool_run_id).map_err(ApiError::store)?;
    Ok(ApprovalView::new(a.clone(), run.as_ref()))
}

#[utoipa::path(
    get,
    path = "/api/v1/approvals",
    operation_id = "listApprovals",
    summary = "The approvals",
    params(
        ("status" = Option<String>, Query, description = "statuses, comma-separated, or `all` (default: pending)"),
        ("include_all" = Option<bool>, Query, description = "`true`: every status (as `status=all`)"),
        ("tool" = Option<String>, Query),
        ("run" = Option<String>, Query, description = "only this run's (TR-…)"),
        ("execution" = Option<String>, Query),
        ("since" = Option<String>, Query),
        ("limit" = Option<usize>, Query, minimum = 1, maximum = 10000),
    ),
    responses(
        (status = 200, description = "approvals: the pending ones oldest first (the default), any other status newest first", body = ApprovalsBody),
        (status = 400, description = BAD_INPUT, body = ErrorBody),
        (status = 401, description = NO_TOKEN, body = ErrorBody),
        (status = 403, description = ROLE, body = ErrorBody),
        (status = 429, description = HELD_OFF, body = ErrorBody),
        (status = 503, description = STORE_DOWN, body = ErrorBody),
    )
)]
pub(super) async fn list_approvals(
    State(s): State<Arc<Server>>,
    _: Reader,
    Params(q): Params<query::ListQuery>,
) -> Result<Response, ApiError> {
    let f = filters(q)?;
    let statuses = if f.statuses.is_empty() {
        vec![ApprovalStatus::Pending]
    } else {
        f.statuses
            .iter()
            .map(|s| {
                if s == "all" {
                    return Ok(None);
                }
                s.parse::<ApprovalStatus>().map(Some).map_err(|_| {
                    ApiError::new(
                        StatusCode::BAD_REQUEST,
                        "status is pending, approved, rejected, expired or all",
                    )
                })
            })
            .collect::<Result<Vec<_>, _>>()?
            .into_iter()
            .flatten()
            .collect()
    };
    let filter = ApprovalFilter {
        statuses,
        tool: f.tool,
        tool_run_id: f.run,
        execution_id: f.execution,
        request_fingerprint: None,
        since: f.since,
        limit: Some(f.limit.unwrap_or(100)),
    };
    let list = s
        .with_store(move |st| {
            let all = or_none(st.approvals(&filter))?;
            all.iter()
                .map(|a| approval_view(st, a))
                .collect::<Result<Vec<_>, _>>()
        })
        .await?;
    Ok(ok(StatusCode::OK, &ApprovalsBody { approvals: list }))
}

#[utoipa::path(
    get,
    path = "/api/v1/approvals/{id}",
    operation_id = "getApproval",
    summary = "One approval",
    params(("id" = String, Path, description = "AP-…")),
    responses(
        (status = 200, description = "the approval", body = ApprovalView),
        (status = 400, description = BAD_ID, body = ErrorBody),
        (status = 401, description = NO_TOKEN, body = ErrorBody),
        (status = 403, description = ROLE, body = ErrorBody),
        (status = 404, description = UNKNOWN, body = ErrorBody),
        (status = 429, description = HELD_OFF, body = ErrorBody),
        (status = 503, description = STORE_DOWN, body = ErrorBody),
    )
)]
pub(super) async fn one_approval(
    State(s): State<Arc<Server>>,
    _: Reader,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let v = s
        .with_store(move |st| match or_missing(st.approval(&id))? {
            Some(a) => approval_view(st, &a),
            None => Err(ApiError::new(StatusCode::NOT_FOUND, "no such approval")),
        })
        .await?;
    Ok(ok(StatusCode::OK, &v))
}

/// A decision's body as the server reads it ([`DecideRequest`], [`DecisionRequest`], or a
/// cancel's [`CancelRequest`](hr_shared::wire::CancelRequest), whose `reason` is a
/// `comment`); an empty body is `{}`. Read field by field, to say which field is wrong.
#[derive(Debug, Default)]
pub(super) struct DecisionBody {
    pub(super) value: Option<String>,
    pub(super) comment: Option<String>,
    /// The version of the approval the client showed (`screen_digest`): the store refuses
    /// a decision on any other (409).
    pub(super) version: Option<String>,
}

pub(super) fn body_fields(body: &Bytes) -> Result<DecisionBody, ApiError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(DecisionBody::default());
    }
    let v: Value = serde_json::from_slice(body)
        .map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, format!("not JSON: {e}")))?;
    let obj = v
        .as_object()
        .ok_or_else(|| ApiError::new(StatusCode::BAD_REQUEST, "the body is a JSON object"))?;
    let text = |k: &str| -> Result<Option<String>, ApiError> {
        match obj.get(k) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) if s.len() <= 4096 => Ok(Some(s.clone())),
            Some(_) => Err(ApiError::new(
                StatusCode::BAD_REQUEST,
                format!("`{k}` is a string of at most 4096 bytes"),
            )),
        }
    };
    for k in obj.keys() {
        if !["value", "comment", "reason", "version"].contains(&k.as_str()) {
            return Err(ApiError::new(
                StatusCode::BAD_REQUEST,
                format!("unknown field `{}`", hr_shared::sanitize::sanitize_line(k)),
            ));
        }
    }
    Ok(DecisionBody {
        value: text("value")?,
        comment: text("comment")?.or(text("reason")?),
        version: text("version")?,
    })
}

/// Decides approval `id` with `value` as `caller`: the CLI's outcomes as status codes.
pub(super) async fn decide_as(
    s: &Server,
    c: &Caller,
    id: String,
    value: String,
    body: DecisionBody,
) -> Result<Response, ApiError> {
    decide_via(s, c, "http", id, value, body).await
}

/// [`decide_as`] through `via` (`http`: the API with a token; `link`: a decision link).
pub(super) async fn decide_via(
    s: &Server,
    c: &Caller,
    via: &str,
    id: String,
    value: String,
    body: DecisionBody,
) -> Result<Response, ApiError> {
    let DecisionBody {
        comment, version, ..
    } = body;
    let by = c.name.clone();
    let groups = c.groups.clone();
    let paths = s.paths.clone();
    // Where the store records `decided_by` from its own login (PostgreSQL: the server's,
    // not the client's), the channel names the token.
    let channel = if hr_shared::store::capabilities::of(&paths).decider_from_login {
        format!("{via}:{by}")
    } else {
        via.to_owned()
    };
    let (status, body) = s
        .with_store(move |st| {
            let who = Decider {
                by: &by,
                channel: &channel,
                comment: comment.as_deref(),
                version: version.as_deref(),
                groups: &groups,
            };
            let outcome = hr_shared::control::decide(st, &paths, &id, &value, &who)
                .map_err(ApiError::store)?;
            let why = hr_shared::approvals::refusal(&outcome).unwrap_or_default();
            match outcome {
                DecideOutcome::Decided(a) => {
                    Ok((StatusCode::OK, approval_view(st, &a)?.answering("decided")))
                }
                // Counted; still pending (more reviewers, or a wait timer holds it).
                DecideOutcome::Reviewed(a) => Ok((
                    StatusCode::ACCEPTED,
                    approval_view(st, &a)?.answering("reviewed"),
                )),
                // The same decision again: a no-op, as `monitor decide` counts it (exit 0).
                DecideOutcome::AlreadySame(a) => Ok((
                    StatusCode::OK,
                    approval_view(st, &a)?.answering("unchanged"),
                )),
                DecideOutcome::NotFound => {
                    Err(ApiError::new(StatusCode::NOT_FOUND, "no such approval"))
                }
                // A pipeline's human step that names who decides it (the store checks).
                DecideOutcome::Refused(why) => {
                    Err(ApiError::new(StatusCode::FORBIDDEN, why).with("outcome", json!("refused")))
                }
                DecideOutcome::Invalid(e) => Err(ApiError::new(
                    StatusCode::UNPROCESSABLE_ENTITY,
                    format!(
                        "`{}` is not a valid value{}",
                        hr_shared::sanitize::sanitize_line(&e.value),
                        e.note
                    ),
                )
                .with("valid", json!(e.valid))
                .with("note", json!(e.note))),
                DecideOutcome::Conflict(a) if a.superseded_by.is_some() => {
                    Err(not_this_version(st, &why, &a, "superseded")?)
                }
                DecideOutcome::Conflict(a) => Err(already_decided(st, &a, "conflict")?),
                DecideOutcome::Changed(a) => Err(not_this_version(st, &why, &a, "changed")?),
            }
        })
        .await?;
    Ok(ok(status, &body))
}

/// The 409 of another decision already made: who and when, `outcome` (`conflict`), and the
/// approval. (The same decision again is not one: it answers 200, `outcome: unchanged`.)
pub(super) fn already_decided(
    st: &mut dyn OperatorStore,
    a: &Approval,
    outcome: &str,
) -> Result<ApiError, ApiError> {
    Ok(ApiError::new(
        StatusCode::CONFLICT,
        format!(
            "already {} by {} at {}",
            a.status,
            a.decided_by.as_deref().unwrap_or("?"),
            a.decided_at.as_deref().unwrap_or("?")
        ),
    )
    .with("decided_by", json!(a.decided_by))
    .with("decided_at", json!(a.decided_at))
    .with("status", json!(a.status))
    .with("outcome", json!(outcome))
    .with("approval", approval_view(st, a)?))
}

/// The 409 of a decision made on another version than the approval's now: `superseded`
/// (a changed screen replaced it: `superseded_by` names the approval to read) or `changed`
/// (not the version the client showed).
pub(super) fn not_this_version(
    st: &mut dyn OperatorStore,
    why: &str,
    a: &Approval,
    outcome: &str,
) -> Result<ApiError, ApiError> {
    Ok(ApiError::new(StatusCode::CONFLICT, why)
        .with("outcome", json!(outcome))
        .with("superseded_by", json!(a.superseded_by))
        .with("version", json!(a.version()))
        .with("approval", approval_view(st, a)?))
}

#[utoipa::path(
    post,
    path = "/api/v1/approvals/{id}/approve",
    operation_id = "approve",
    summary = "Approve",
    params(("id" = String, Path, description = "AP-…")),
    request_body = Option<DecisionRequest>,
    responses(
        (status = 200, description = "decided (`outcome: decided`), or the same decision again: a no-op (`outcome: unchanged`)", body = ApprovalView),
        (status = 202, description = "counted, still pending: the approval needs more reviewers, or its wait timer holds it (`review_status` says which)", body = ApprovalView),
        (status = 400, description = BAD_INPUT, body = ErrorBody),
        (status = 401, description = NO_TOKEN, body = ErrorBody),
        (status = 403, description = ROLE_OR_DECIDERS, body = ErrorBody),
        (status = 404, description = UNKNOWN, body = ErrorBody),
        (status = 409, description = DECIDED, body = ErrorBody),
        (status = 413, description = TOO_LARGE, body = ErrorBody),
        (status = 422, description = INVALID, body = ErrorBody),
        (status = 429, description = HELD_OFF, body = ErrorBody),
        (status = 503, description = STORE_DOWN, body = ErrorBody),
    )
)]
pub(super) async fn approve(
    State(s): State<Arc<Server>>,
    Operator(c): Operator,
    Path(id): Path<String>,
    body: Bytes,
) -> Result<Response, ApiError> {
    decide_as(&s, &c, id, "approve".into(), body_fields(&body)?).await
}

#[utoipa::path(
    post,
    path = "/api/v1/approvals/{id}/reject",
    operation_id = "reject",
    summary = "Reject",
    params(("id" = String, Path, description = "AP-…")),
    request_body = Option<DecisionRequest>,
    responses(
        (status = 200, description = "decided (`outcome: decided`), or the same decision again: a no-op (`outcome: unchanged`)", body = ApprovalView),
        (status = 202, description = "counted, still pending: the approval needs more reviewers, or its wait timer holds it (`review_status` says which)", body = ApprovalView),
        (status = 400, description = BAD_INPUT, body = ErrorBody),
        (status = 401, description = NO_TOKEN, body = ErrorBody),
        (status = 403, description = ROLE_OR_DECIDERS, body = ErrorBody),
        (status = 404, description = UNKNOWN, body = ErrorBody),
        (status = 409, description = DECIDED, body = ErrorBody),
        (status = 413, description = TOO_LARGE, body = ErrorBody),
        (status = 422, description = INVALID, body = ErrorBody),
        (status = 429, description = HELD_OFF, body = ErrorBody),
        (status = 503, description = STORE_DOWN, body = ErrorBody),
    )
)]
pub(super) async fn reject(
    State(s): State<Arc<Server>>,
    Operator(c): Operator,
    Path(id): Path<String>,
    body: Bytes,
) -> Result<Response, ApiError> {
    decide_as(&s, &c, id, "reject".into(), body_fields(&body)?).await
}

#[utoipa::path(
    post,
    path = "/api/v1/approvals/{id}/decide",
    operation_id = "decide",
    summary = "Decide with a value",
    params(("id" = String, Path, description = "AP-…")),
    request_body = DecideRequest,
    responses(
        (status = 200, description = "decided (`outcome: decided`), or the same decision again: a no-op (`outcome: unchanged`)", body = ApprovalView),
        (status = 202, description = "counted, still pending: the approval needs more reviewers, or its wait timer holds it (`review_status` says which)", body = ApprovalView),
        (status = 400, description = BAD_INPUT, body = ErrorBody),
        (status = 401, description = NO_TOKEN, body = ErrorBody),
        (status = 403, description = ROLE_OR_DECIDERS, body = ErrorBody),
        (status = 404, description = UNKNOWN, body = ErrorBody),
        (status = 409, description = DECIDED, body = ErrorBody),
        (status = 413, description = TOO_LARGE, body = ErrorBody),
        (status = 422, description = INVALID, body = ErrorBody),
        (status = 429, description = HELD_OFF, body = ErrorBody),
        (status = 503, description = STORE_DOWN, body = ErrorBody),
    )
)]
pub(super) async fn decide(
    State(s): State<Arc<Server>>,
    Operator(c): Operator,
    Path(id): Path<String>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let mut fields = body_fields(&body)?;
    let value = fields
        .value
        .take()
        .ok_or_else(|| ApiError::new(StatusCode::BAD_REQUEST, "`value` is needed"))?;
    decide_as(&s, &c, id, value, fields).await
}

/// `GET /api/v1/approvals/{id}/audit`: the approval's audit rows, oldest first.
#[utoipa::path(
    get,
    path = "/api/v1/approvals/{id}/audit",
    operation_id = "approvalAudit",
    summary = "An approval's audit rows",
    description = "The approval's audit rows (status changes and decisions), oldest first; none for an unknown id.",
    params(("id" = String, Path, description = "AP-…")),
    responses(
        (status = 200, description = "its audit rows, oldest first", body = AuditBody),
        (status = 400, description = BAD_ID, body = ErrorBody),
        (status = 401, description = NO_TOKEN, body = ErrorBody),
        (status = 403, description = ROLE, body = ErrorBody),
        (status = 429, description = HELD_OFF, body = ErrorBody),
        (status = 503, description = STORE_DOWN, body = ErrorBody),
    )
)]
pub(super) async fn approval_audit(
    State(s): State<Arc<Server>>,
    _: Reader,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let rows = s
        .with_store(move |st| or_none(st.audit_of_approval(&id)))
        .await?;
    let audit = rows.into_iter().map(Into::into).collect();
    Ok(ok(StatusCode::OK, &AuditBody { audit }))
}
