//! `/api/v1/approvals`: listing, one approval, deciding, its audit rows.

use super::*;

/// An approval as the API shows it: its row, and its run's command line, directory and
/// host.
pub(super) fn approval_json(
    store: &mut dyn OperatorStore,
    a: &Approval,
) -> Result<Value, ApiError> {
    let run = store.run(&a.tool_run_id).map_err(ApiError::store)?;
    let mut v = serde_json::to_value(a).unwrap_or(Value::Null);
    v["command"] = json!(run.as_ref().map(|r| r.argv_json.clone()));
    v["cwd"] = json!(run.as_ref().and_then(|r| r.cwd.clone()));
    v["host"] = json!(run.as_ref().and_then(|r| r.host.clone()));
    Ok(v)
}

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
        since: f.since,
        limit: Some(f.limit.unwrap_or(100)),
    };
    let list = s
        .with_store(move |st| {
            let all = or_none(st.approvals(&filter))?;
            all.iter()
                .map(|a| approval_json(st, a))
                .collect::<Result<Vec<_>, _>>()
        })
        .await?;
    Ok(ok(StatusCode::OK, json!({ "approvals": list })))
}

pub(super) async fn one_approval(
    State(s): State<Arc<Server>>,
    _: Reader,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let v = s
        .with_store(move |st| match or_missing(st.approval(&id))? {
            Some(a) => approval_json(st, &a),
            None => Err(ApiError::new(StatusCode::NOT_FOUND, "no such approval")),
        })
        .await?;
    Ok(ok(StatusCode::OK, v))
}

/// A decision's body: `{"comment": …, "version": …}` and, for `decide`, `{"value": …}`;
/// an empty body is `{}`.
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
    let DecisionBody {
        comment, version, ..
    } = body;
    let by = c.name.clone();
    let paths = s.paths.clone();
    // On the PostgreSQL store `decided_by` is the server's login (the server records it,
    // not the client): the channel then names the token.
    let channel = match paths.store_url {
        Some(_) => format!("http:{by}"),
        None => "http".to_owned(),
    };
    let (status, body) = s
        .with_store(move |st| {
            let who = Decider {
                by: &by,
                channel: &channel,
                comment: comment.as_deref(),
                version: version.as_deref(),
            };
            let outcome = hr_shared::control::decide(st, &paths, &id, &value, &who)
                .map_err(ApiError::store)?;
            let why = hr_shared::approvals::refusal(&outcome).unwrap_or_default();
            match outcome {
                DecideOutcome::Decided(a) => Ok((StatusCode::OK, approval_json(st, &a)?)),
                DecideOutcome::NotFound => {
                    Err(ApiError::new(StatusCode::NOT_FOUND, "no such approval"))
                }
                // A pipeline's human step that names who decides it (the store checks).
                DecideOutcome::Refused(why) => Err(ApiError::new(StatusCode::FORBIDDEN, why)),
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
                DecideOutcome::AlreadySame(a) => Err(already_decided(st, &a, "unchanged")?),
                DecideOutcome::Conflict(a) if a.superseded_by.is_some() => {
                    Err(not_this_version(st, &why, &a, "superseded")?)
                }
                DecideOutcome::Conflict(a) => Err(already_decided(st, &a, "conflict")?),
                DecideOutcome::Changed(a) => Err(not_this_version(st, &why, &a, "changed")?),
            }
        })
        .await?;
    Ok(ok(status, body))
}

/// The 409 of a decision already made: who and when, `outcome` (`unchanged`: the same
/// decision again, which the CLI counts as done; `conflict`: another one), and the approval.
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
    .with("approval", approval_json(st, a)?))
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
        .with("approval", approval_json(st, a)?))
}

pub(super) async fn decide_approval(
    State(s): State<Arc<Server>>,
    Operator(c): Operator,
    Path((id, action)): Path<(String, String)>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let mut fields = body_fields(&body)?;
    let value = match action.as_str() {
        "approve" | "reject" => action.clone(),
        "decide" => fields
            .value
            .take()
            .ok_or_else(|| ApiError::new(StatusCode::BAD_REQUEST, "`value` is needed"))?,
        _ => return Err(ApiError::new(StatusCode::NOT_FOUND, "no such endpoint")),
    };
    decide_as(&s, &c, id, value, fields).await
}

/// `GET /api/v1/approvals/{id}/audit`: the approval's audit rows, oldest first.
pub(super) async fn approval_audit(
    State(s): State<Arc<Server>>,
    _: Reader,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let rows = s
        .with_store(move |st| or_none(st.audit_of_approval(&id)))
        .await?;
    Ok(ok(StatusCode::OK, json!({ "audit": rows })))
}
