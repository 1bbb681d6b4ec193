//! `/api/v1/runs`, `/api/v1/ids`, `/api/v1/counts`: runs, cancelling one, its audit rows.

use super::*;

pub(super) async fn list_runs(
    State(s): State<Arc<Server>>,
    _: Reader,
    Params(q): Params<query::ListQuery>,
) -> Result<Response, ApiError> {
    let f = filters(q)?;
    if f.run.is_some() {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "unknown parameter `run`",
        ));
    }
    let statuses = f
        .statuses
        .iter()
        .map(|s| s.parse::<RunStatus>())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|_| ApiError::new(StatusCode::BAD_REQUEST, "not a run status"))?;
    let filter = RunFilter {
        statuses,
        tool: f.tool,
        execution_id: f.execution,
        since: f.since,
        limit: Some(f.limit.unwrap_or(100)),
    };
    let runs = s.with_store(move |st| or_none(st.runs(&filter))).await?;
    Ok(ok(StatusCode::OK, json!({ "runs": runs })))
}

pub(super) async fn one_run(
    State(s): State<Arc<Server>>,
    _: Reader,
    Path(id): Path<String>,
    Params(q): Params<query::TailQuery>,
) -> Result<Response, ApiError> {
    let lines = match q.tail {
        Some(t) => t
            .parse::<usize>()
            .ok()
            .filter(|n| *n <= 10_000)
            .ok_or_else(|| {
                ApiError::new(StatusCode::BAD_REQUEST, "tail is a number from 0 to 10000")
            })?,
        None => 40,
    };
    let log = s.paths.run_log(&id);
    let run = s
        .with_store(move |st| or_missing(st.run(&id)))
        .await?
        .ok_or_else(|| ApiError::new(StatusCode::NOT_FOUND, "no such run"))?;
    let mut v = serde_json::to_value(&run).unwrap_or(Value::Null);
    v["output_tail"] = json!(match lines {
        0 => String::new(),
        n => crate::cmd::show::output_tail(&log, n),
    });
    Ok(ok(StatusCode::OK, v))
}

pub(super) async fn cancel_run(
    State(s): State<Arc<Server>>,
    Operator(c): Operator,
    Path(id): Path<String>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let reason = body_fields(&body)?.comment;
    let by = c.name.clone();
    let paths = s.paths.clone();
    let (status, body) = s
        .with_store(move |st| {
            use hr_shared::control::CancelOutcome;
            let who = Decider {
                by: &by,
                channel: "http",
                comment: None,
                version: None,
            };
            let outcome = hr_shared::control::cancel(
                st,
                &paths,
                &id,
                reason.as_deref(),
                &who,
                &hr_shared::rules::LocalHost::new(),
            )
            .map_err(ApiError::store)?;
            match outcome {
                CancelOutcome::NotFound => Err(ApiError::new(StatusCode::NOT_FOUND, "no such run")),
                CancelOutcome::AlreadyFinal { run } => Err(ApiError::new(
                    StatusCode::CONFLICT,
                    format!("it has already ended ({})", run.status),
                )
                .with("run", json!(run))),
                CancelOutcome::Signalled { run, shim_pid } => Ok((
                    StatusCode::OK,
                    json!({ "outcome": "signalled", "run": run, "shim_pid": shim_pid }),
                )),
                CancelOutcome::Marked { run } => {
                    Ok((StatusCode::OK, json!({ "outcome": "marked", "run": run })))
                }
            }
        })
        .await?;
    Ok(ok(status, body))
}

/// `GET /api/v1/runs/{id}/audit`: the run's audit rows, oldest first (none for an unknown
/// run).
pub(super) async fn run_audit(
    State(s): State<Arc<Server>>,
    _: Reader,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let rows = s
        .with_store(move |st| or_none(st.audit_of_run(&id)))
        .await?;
    Ok(ok(StatusCode::OK, json!({ "audit": rows })))
}

/// `GET /api/v1/ids?prefix=&limit=`: the ids of runs (`TR-…`) or approvals (`AP-…`) that
/// start with `prefix` (any case), in id order; an exact id alone. What `monitor --server`
/// resolves a short id with.
pub(super) async fn ids(
    State(s): State<Arc<Server>>,
    _: Reader,
    Params(q): Params<query::IdsQuery>,
) -> Result<Response, ApiError> {
    let prefix = q
        .prefix
        .map(|p| p.trim().to_ascii_uppercase())
        .filter(|p| {
            (1..=64).contains(&p.len()) && p.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
        })
        .ok_or_else(|| {
            ApiError::new(
                StatusCode::BAD_REQUEST,
                "`prefix` is the start of an id: 1 to 64 letters, digits and dashes",
            )
        })?;
    let limit = number(q.limit.as_deref(), "limit", 1, 100)?.unwrap_or(10) as usize;
    let found = s
        .with_store(move |st| or_none(st.ids_starting_with(&prefix, limit)))
        .await?;
    Ok(ok(StatusCode::OK, json!({ "ids": found })))
}

/// `GET /api/v1/counts?since=&soon=`: runs by live status, pending approvals and how many
/// of them expire within `soon` seconds (default 3600); with `since` (a duration back from
/// now or an RFC 3339 time) also every run by status and the failures and stalls since
/// then. The dashboard's alerts line.
pub(super) async fn counts(
    State(s): State<Arc<Server>>,
    _: Reader,
    Params(q): Params<query::CountsQuery>,
) -> Result<Response, ApiError> {
    let since = q
        .since
        .as_deref()
        .map(crate::parse::since)
        .transpose()
        .map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, e))?;
    let soon =
        Duration::from_secs(number(q.soon.as_deref(), "soon", 0, 366 * 24 * 3600)?.unwrap_or(3600));
    let counts = s
        .with_store(move |st| {
            let counts = match &since {
                Some(since) => st.counts(since, soon),
                None => st.live_counts(soon),
            };
            match counts {
                Err(hr_shared::db::StoreError::Missing(_)) => Ok(Default::default()),
                other => other.map_err(ApiError::store),
            }
        })
        .await?;
    let body = hr_shared::store::remote::CountsBody::from(counts);
    Ok(ok(
        StatusCode::OK,
        serde_json::to_value(body).unwrap_or(Value::Null),
    ))
}
