//! Long polls and event streams: `/api/v1/mark` and `/api/v1/events`, woken by the store's
//! doorbell.

use super::openapi::*;
use super::*;
use hr_shared::wire::Mark;

/// The events a stream carries: status and approval changes.
pub(super) const STREAMED: &[&str] = &[
    "tool_status_change",
    "approval_needed",
    "approval_status_change",
];

/// A watch that moves whenever the store's doorbell rings (a thread of its own waits on
/// the bell); one that never moves when the store has none (its sender is handed back, to
/// be kept: a closed watch would wake its waiters at once, for ever).
pub(super) fn bell(
    paths: &StatePaths,
) -> (
    tokio::sync::watch::Receiver<u64>,
    Option<tokio::sync::watch::Sender<u64>>,
) {
    let (tx, rx) = tokio::sync::watch::channel(0u64);
    let _ = paths.ensure_dirs();
    let Some(door) = store::doorbell::for_store(paths) else {
        return (rx, Some(tx));
    };
    {
        let _ = std::thread::Builder::new()
            .name("bell".into())
            .spawn(move || {
                let mut n = 0u64;
                loop {
                    if door.wait(Duration::from_secs(1)) {
                        n += 1;
                        if tx.send(n).is_err() {
                            return;
                        }
                    } else if tx.is_closed() {
                        return;
                    }
                }
            });
    }
    (rx, None)
}

impl Server {
    /// Waits up to `most` for the store's bell (at most [`EVENTS_LOOK`] when it has none).
    pub(super) async fn next_ring(
        &self,
        bell: &mut tokio::sync::watch::Receiver<u64>,
        most: Duration,
    ) {
        let _ = tokio::time::timeout(most.min(EVENTS_LOOK), bell.changed()).await;
    }
}

/// The longest a long poll of `/api/v1/mark` is held open.
pub(super) const MARK_WAIT_MAX: u64 = 60;

/// `GET /api/v1/mark?after=M&wait=S`: the store's change mark; with `after`, held open up to
/// `wait` seconds until it differs from `M` (a long poll: wait-mode runners and
/// `--server` clients learn of a decision at once, without polling).
#[utoipa::path(
    get,
    path = "/api/v1/mark",
    operation_id = "changeMark",
    summary = "The store's change mark, or a long poll of it",
    description = "The store's change mark: a number that moves whenever anything in the store may have changed. With `after`, a long poll: held open up to `wait` seconds until the mark differs from `after` (wait-mode runners and `monitor --server` learn of decisions at once). Any role. A long poll counts against the token's --max-streams-per-token, and ends with 401 within about a second of the token's revocation or expiry.",
    params(
        ("after" = Option<usize>, Query),
        ("wait" = Option<usize>, Query, minimum = 0, maximum = 60),
    ),
    responses(
        (status = 200, description = "the mark", body = Mark),
        (status = 400, description = BAD_INPUT, body = ErrorBody),
        (status = 401, description = NO_TOKEN, body = ErrorBody),
        (status = 429, description = HELD_OFF_OR_STREAMS, body = ErrorBody),
        (status = 503, description = STORE_FAILED, body = ErrorBody),
    )
)]
pub(super) async fn mark(
    State(s): State<Arc<Server>>,
    Watcher(c): Watcher,
    Params(q): Params<query::MarkQuery>,
) -> Result<Response, ApiError> {
    let after = number(q.after.as_deref(), "after", 0, u64::MAX)?;
    let wait =
        Duration::from_secs(number(q.wait.as_deref(), "wait", 0, MARK_WAIT_MAX)?.unwrap_or(0));
    let deadline = Instant::now() + wait;
    let mut bell = s.bell.clone();
    // Taken once the poll waits (one answered at once holds nothing); given back when the
    // handler ends, or is dropped with its connection.
    let mut slot = None;
    loop {
        if slot.is_some() && !s.still_live(&c) {
            return Err(ApiError::new(
                StatusCode::UNAUTHORIZED,
                "the token was revoked or expired while this long poll waited",
            ));
        }
        let m = s
            .marks
            .call(|st| match st.change_mark() {
                Err(hr_shared::db::StoreError::Missing(_)) => Ok(0),
                other => other.map_err(ApiError::store),
            })
            .await?;
        let now = Instant::now();
        if after != Some(m) || now >= deadline || s.stopping.load(Ordering::Relaxed) {
            return Ok(ok(StatusCode::OK, &Mark { mark: m }));
        }
        if slot.is_none() {
            slot = Some(s.stream_slot(&c)?);
        }
        s.next_ring(&mut bell, deadline - now).await;
    }
}

/// How often an event stream or a long poll looks for news (and at its token: a revoked
/// or expired one ends it within about this).
pub(super) const EVENTS_LOOK: Duration = Duration::from_millis(250);

/// `GET /api/v1/events`: the audit chain's status and approval changes as server-sent
/// events, each with its row id as the event id; from `Last-Event-ID` (or `?after=`), else
/// from now. Once its token is revoked or expired, a last `token_ended` event and the end
/// (and the connection closed: a client sees the end whatever it makes of the body).
#[utoipa::path(
    get,
    path = "/api/v1/events",
    operation_id = "events",
    summary = "Status and approval changes, as server-sent events",
    description = "Server-sent events (text/event-stream): tool_status_change, approval_needed and approval_status_change, each with its audit row id as the event id. Resumable: Last-Event-ID (or ?after=ID) sends what came after that id; without either, from now. The stream stays open while its token is in force: once the token is revoked or expires, a last `token_ended` event (data: {\"error\": …}) and the end, within about a second, the connection closed. A token holds at most --max-streams-per-token streams and long polls open.",
    params(
        ("after" = Option<usize>, Query),
        ("Last-Event-ID" = Option<String>, Header, nullable = false),
    ),
    responses(
        (status = 200, description = "the stream", body = String, content_type = "text/event-stream"),
        (status = 400, description = BAD_INPUT, body = ErrorBody),
        (status = 401, description = NO_TOKEN, body = ErrorBody),
        (status = 403, description = ROLE, body = ErrorBody),
        (status = 429, description = HELD_OFF_OR_STREAMS, body = ErrorBody),
        (status = 503, description = STORE_DOWN, body = ErrorBody),
    )
)]
pub(super) async fn events(
    State(s): State<Arc<Server>>,
    Reader(c): Reader,
    headers: HeaderMap,
    Params(q): Params<query::AfterQuery>,
) -> Result<Response, ApiError> {
    use axum::response::sse::{Event, KeepAlive, Sse};
    let given = headers
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
        .or(q.after);
    let start = match given {
        Some(v) => v
            .trim()
            .parse::<i64>()
            .ok()
            .filter(|n| *n >= 0)
            .ok_or_else(|| ApiError::new(StatusCode::BAD_REQUEST, "an event id is a number"))?,
        None => {
            s.with_store(|st| match own(st)?.audit_head_id() {
                Err(hr_shared::db::StoreError::Missing(_)) => Ok(0),
                other => other.map_err(ApiError::store),
            })
            .await?
        }
    };
    let slot = s.stream_slot(&c)?;
    let state = Streaming {
        s: s.clone(),
        caller: c.clone(),
        last: start,
        queue: std::collections::VecDeque::new(),
        ended: false,
        _slot: slot,
    };
    let stream = futures_util::stream::unfold(state, |mut on| async move {
        if on.ended {
            return None;
        }
        loop {
            if let Some(row) = on.queue.pop_front() {
                let data = json!({
                    "id": row.id,
                    "at": row.at,
                    "event": row.event,
                    "tool_run_id": row.tool_run_id,
                    "approval_id": row.approval_id,
                    "actor": row.actor,
                    "data": serde_json::from_str::<Value>(&row.data).unwrap_or(Value::Null),
                });
                let event = Event::default()
                    .id(row.id.to_string())
                    .event(row.event.clone())
                    .data(data.to_string());
                return Some((Ok::<Event, std::convert::Infallible>(event), on));
            }
            if on.s.stopping.load(Ordering::Relaxed) {
                return None;
            }
            // Looked at before every read of the store: at most [`EVENTS_LOOK`] apart.
            if !on.s.still_live(&on.caller) {
                on.ended = true;
                let data = json!({ "error": "the token was revoked or has expired" });
                let event = Event::default().event("token_ended").data(data.to_string());
                return Some((Ok(event), on));
            }
            let after = on.last;
            let rows =
                on.s.with_store(move |st| or_none(own(st)?.audit_after(after, 100)))
                    .await
                    .unwrap_or_default();
            match rows.last() {
                Some(newest) => {
                    on.last = newest.id;
                    on.queue.extend(
                        rows.into_iter()
                            .filter(|r| STREAMED.contains(&r.event.as_str())),
                    );
                }
                None => {
                    let mut bell = on.s.bell.clone();
                    on.s.next_ring(&mut bell, EVENTS_LOOK).await;
                }
            }
        }
    });
    // A comment every few seconds: hyper learns that a client went away only when a write
    // fails, and until then the stream holds its connection and its token's place.
    let mut resp = Sse::new(stream)
        .keep_alive(KeepAlive::new().interval(SSE_KEEP_ALIVE))
        .into_response();
    resp.headers_mut().insert(
        header::CONNECTION,
        header::HeaderValue::from_static("close"),
    );
    resp.extensions_mut().insert(c);
    Ok(resp)
}

/// How often an idle event stream sends a comment.
pub(super) const SSE_KEEP_ALIVE: Duration = Duration::from_secs(5);

/// An event stream's state: where it is in the audit chain, the rows fetched and not yet
/// sent, and its token's place (given back when the stream is dropped).
pub(super) struct Streaming {
    s: Arc<Server>,
    caller: Caller,
    last: i64,
    queue: std::collections::VecDeque<hr_shared::audit::AuditRow>,
    ended: bool,
    _slot: limits::Slot,
}
