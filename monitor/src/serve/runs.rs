//! `/api/v1/runs`, `/api/v1/ids`, `/api/v1/counts`: runs, cancelling one, its audit rows.

use super::openapi::*;
use super::*;
use hr_shared::wire::{
    AuditBody, CancelBody, CancelKind, CancelRequest, CountsBody, IdsBody, RunDetail, RunsBody,
};

#[utoipa::path(
    get,
    path = "/api/v1/runs",
    operation_id = "listRuns",
    summary = "The runs",
    params(
        ("status" = Option<String>, Query, description = "statuses, comma-separated, or `all`"),
        ("include_all" = Option<bool>, Query, description = "`true`: every status (as `status=all`)"),
        ("tool" = Option<String>, Query),
        ("execution" = Option<String>, Query),
        ("since" = Option<String>, Query),
        ("limit" = Option<usize>, Query, minimum = 1, maximum = 10000),
    ),
    responses(
        (status = 200, description = "runs, newest first", body = RunsBody),
        (status = 400, description = BAD_INPUT, body = ErrorBody),
        (status = 401, description = NO_TOKEN, body = ErrorBody),
        (status = 403, description = ROLE, body = ErrorBody),
        (status = 429, description = HELD_OFF, body = ErrorBody),
        (status = 503, description = STORE_DOWN, body = ErrorBody),
    )
)]
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
    // `all` (or include_all=true): every status, as no filter.
    let statuses = f
        .statuses
        .iter()
        .filter(|s| *s != "all")
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
    Ok(ok(StatusCode::OK, &RunsBody { runs }))
}

#[utoipa::path(
    get,
    path = "/api/v1/runs/{id}",
    operation_id = "getRun",
    summary = "One run, with the end of its output",
    params(
        ("id" = String, Path, description = "TR-…"),
        ("tail" = Option<usize>, Query, minimum = 0, maximum = 10000, description = "lines of output (default 40)"),
    ),
    responses(
        (status = 200, description = "the run, with its output tail", body = RunDetail),
        (status = 400, description = BAD_INPUT, body = ErrorBody),
        (status = 401, description = NO_TOKEN, body = ErrorBody),
        (status = 403, description = ROLE, body = ErrorBody),
        (status = 404, description = UNKNOWN, body = ErrorBody),
        (status = 429, description = HELD_OFF, body = ErrorBody),
        (status = 503, description = STORE_DOWN, body = ErrorBody),
    )
)]
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
    let output_tail = match lines {
        0 => String::new(),
        n => crate::cmd::show::output_tail(&log, n),
    };
    Ok(ok(StatusCode::OK, &RunDetail { run, output_tail }))
}

#[utoipa::path(
    post,
    path = "/api/v1/runs/{id}/cancel",
    operation_id = "cancelRun",
    summary = "Cancel a run",
    params(("id" = String, Path, description = "TR-…")),
    request_body = Option<CancelRequest>,
    responses(
        (status = 200, description = "cancelled", body = CancelBody),
        (status = 400, description = BAD_INPUT, body = ErrorBody),
        (status = 401, description = NO_TOKEN, body = ErrorBody),
        (status = 403, description = ROLE, body = ErrorBody),
        (status = 404, description = UNKNOWN, body = ErrorBody),
        (status = 409, description = "the run has ended already", body = ErrorBody),
        (status = 413, description = TOO_LARGE, body = ErrorBody),
        (status = 429, description = HELD_OFF, body = ErrorBody),
        (status = 503, description = STORE_DOWN, body = ErrorBody),
    )
)]
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
                groups: &[],
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
                .with("run", &run)),
                CancelOutcome::Signalled { run, shim_pid } => Ok((
                    StatusCode::OK,
                    CancelBody {
                        outcome: CancelKind::Signalled,
                        run: *run,
                        shim_pid: Some(i64::from(shim_pid)),
                    },
                )),
                CancelOutcome::Marked { run } => Ok((
                    StatusCode::OK,
                    CancelBody {
                        outcome: CancelKind::Marked,
                        run: *run,
                        shim_pid: None,
                    },
                )),
            }
        })
        .await?;
    Ok(ok(status, &body))
}

/// `GET /api/v1/runs/{id}/audit`: the run's audit rows, oldest first (none for an unknown
/// run).
#[utoipa::path(
    get,
    path = "/api/v1/runs/{id}/audit",
    operation_id = "runAudit",
    summary = "A run's audit rows",
    description = "The run's audit rows (status changes and decisions), oldest first; none for an unknown id.",
    params(("id" = String, Path, description = "TR-…")),
    responses(
        (status = 200, description = "its audit rows, oldest first", body = AuditBody),
        (status = 400, description = BAD_ID, body = ErrorBody),
        (status = 401, description = NO_TOKEN, body = ErrorBody),
        (status = 403, description = ROLE, body = ErrorBody),
        (status = 429, description = HELD_OFF, body = ErrorBody),
        (status = 503, description = STORE_DOWN, body = ErrorBody),
    )
)]
pub(super) async fn run_audit(
    State(s): State<Arc<Server>>,
    _: Reader,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let rows = s
        .with_store(move |st| or_none(st.audit_of_run(&id)))
        .await?;
    let audit = rows.into_iter().map(Into::into).collect();
    Ok(ok(StatusCode::OK, &AuditBody { audit }))
}

/// `GET /api/v1/ids?prefix=&limit=`: the ids of runs (`TR-…`) or approvals (`AP-…`) that
/// start with `prefix` (any case), in id order; an exact id alone. What `monitor --server`
/// resolves a short id with.
#[utoipa::path(
    get,
    path = "/api/v1/ids",
    operation_id = "idsStartingWith",
    summary = "The ids that start so",
    description = "The ids of runs (TR-…) or approvals (AP-…) that start with `prefix` (any case), in id order; an exact id alone. `monitor --server` resolves short ids with it.",
    params(
        ("prefix" = String, Query, min_length = 1, max_length = 64, pattern = "^[A-Za-z0-9-]+$"),
        ("limit" = Option<usize>, Query, minimum = 1, maximum = 100),
    ),
    responses(
        (status = 200, description = "the ids", body = IdsBody),
        (status = 400, description = BAD_INPUT, body = ErrorBody),
        (status = 401, description = NO_TOKEN, body = ErrorBody),
        (status = 403, description = ROLE, body = ErrorBody),
        (status = 429, description = HELD_OFF, body = ErrorBody),
        (status = 503, description = STORE_DOWN, body = ErrorBody),
    )
)]
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
    Ok(ok(StatusCode::OK, &IdsBody { ids: found }))
}

/// `GET /api/v1/counts?since=&soon=`: runs by live status, pending approvals and how many
/// of them expire within `soon` seconds (default 3600), every run by status, and the
/// failures and stalls since `since` (a duration back from now or an RFC 3339 time; without
/// it, all time). The dashboard's alerts line.
#[utoipa::path(
    get,
    path = "/api/v1/counts",
    operation_id = "counts",
    summary = "Runs by status and pending approvals",
    description = "Live runs by status, pending approvals and how many expire within `soon` seconds, every run by status, and the failures and stalls since `since` (default: all time). The dashboard's alerts line.",
    params(
        ("since" = Option<String>, Query, description = "a duration back from now (24h) or an RFC 3339 time"),
        ("live" = Option<bool>, Query, description = "`true`: only live runs and pending approvals (what a dashboard polls; `totals` empty)"),
        ("soon" = Option<usize>, Query, minimum = 0, maximum = 31622400, description = "seconds (default 3600)"),
    ),
    responses(
        (status = 200, description = "the counts", body = CountsBody),
        (status = 400, description = BAD_INPUT, body = ErrorBody),
        (status = 401, description = NO_TOKEN, body = ErrorBody),
        (status = 403, description = ROLE, body = ErrorBody),
        (status = 429, description = HELD_OFF, body = ErrorBody),
        (status = 503, description = STORE_DOWN, body = ErrorBody),
    )
)]
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
    let live = query::flag(q.live.as_deref(), "live")?;
    if live && since.is_some() {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "give since or live=true, not both",
        ));
    }
    let counts = s
        .with_store(move |st| {
            // Without `since`: since the beginning (every failure and stall kept); with
            // live=true only what has not ended.
            let counts = if live {
                st.live_counts(soon)
            } else {
                let since = since.unwrap_or_else(|| "1970-01-01T00:00:00.000Z".to_owned());
                st.counts(&since, soon)
            };
            match counts {
                Err(hr_shared::db::StoreError::Missing(_)) => Ok(Default::default()),
                other => other.map_err(ApiError::store),
            }
        })
        .await?;
    Ok(ok(StatusCode::OK, &CountsBody::from(counts)))
}
