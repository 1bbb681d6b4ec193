//! `monitor serve`: the operator API over HTTP, on whichever store is configured.
//!
//! axum on a small tokio runtime. The store is used from one thread of its own (its
//! sessions are not `Send`); handlers hand it closures and await the answer. Every
//! `/api/v1` request carries a bearer token (`monitor token`); a token's role says what it
//! may do; decisions are recorded as decided by the token's name, channel `http`, with every
//! rule of the CLI (first writer wins, screen binding, expiry).

mod approvals;
mod auth;
mod executions;
mod limits;
pub mod links;
mod listen;
mod mail;
mod metrics;
mod openapi;
mod query;
mod runner;
mod runs;
mod slack;
mod stream;
pub mod tokens;
mod webhooks;

use crate::cli::Ctx;
use crate::error::{CliError, CliResult};
use approvals::*;
use auth::{Operator, Reader, Watcher};
use axum::body::Bytes;
use axum::extract::{Path, Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use executions::*;
use hr_shared::approvals::{Approval, ApprovalFilter, DecideOutcome, Decider};
use hr_shared::paths::StatePaths;
use hr_shared::runs::RunFilter;
use hr_shared::status::{ApprovalStatus, RunStatus};
use hr_shared::store::{self, OperatorStore};
use hr_shared::wire::ErrorBody;
use openapi::serve_openapi;
use query::{Params, number};
use runs::*;
use serde_json::{Value, json};
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};
use stream::*;
use tokens::Role;

#[derive(Debug, clap::Args)]
#[command(after_help = "\
Serves the operator API under /api/v1 (JSON in and out), /healthz and /metrics (Prometheus
text), over the configured store (the state dir's SQLite database, or HEADLESS_RUN_DB).
Every /api/v1 and /metrics request needs `Authorization: Bearer TOKEN` (`monitor token
create NAME --role operator|viewer`). Errors are {\"error\": …}: 400 bad input, 401 no or
bad token, 403 the role may not, 404 unknown, 409 already decided (by whom, when) or
several pending, 422 not a valid value (the valid ones listed), 429 too many failed
authentications from the address (a valid token is still served) or too many streams
open for the token. Request bodies are limited to 64 KB; no CORS headers are sent.

Hostile clients: a TLS handshake and each request's headers must arrive within
--header-timeout (an idle connection is closed after it too); beyond --max-connections a
connection is refused (503 on plain HTTP) and closed; a token holds at most --max-streams-per-token event
streams and long polls; a stream or long poll ends within a second of its token's
revocation or expiry. Plain HTTP on an address other than loopback is refused (tokens
would cross the network in clear) unless --insecure-plain-http; a --tls-key that is a
link, not a regular file, or that group or others may read is refused.

Endpoints:
  GET  /api/v1/approvals?status=&tool=&run=&execution=&since=&limit=
  GET  /api/v1/approvals/{id}
  POST /api/v1/approvals/{id}/approve     {\"comment\": …}
  POST /api/v1/approvals/{id}/reject      {\"comment\": …}
  POST /api/v1/approvals/{id}/decide      {\"value\": …, \"comment\": …}
  POST /api/v1/executions/{id}/approve    the execution's one pending approval
  POST /api/v1/executions/{id}/reject
  GET  /api/v1/runs?status=&tool=&execution=&since=&limit=
  GET  /api/v1/runs/{id}?tail=N           with its output tail (N lines, default 40)
  GET  /api/v1/runs/{id}/audit            its audit rows
  GET  /api/v1/approvals/{id}/audit       its audit rows
  GET  /api/v1/ids?prefix=&limit=         ids of runs or approvals starting so (short ids)
  GET  /api/v1/counts?since=&soon=        runs by status, pending approvals (the dashboard)
  POST /api/v1/runs/{id}/cancel           {\"reason\": …}
  GET  /api/v1/events                     server-sent events: status and approval changes,
                                          resumable with Last-Event-ID (or ?after=ID); a
                                          last `token_ended` event when the token ends

Stops on SIGINT or SIGTERM after the requests in flight.

Examples:
  monitor token create alice --role operator
  monitor serve --listen 127.0.0.1:8080
  monitor serve --listen 0.0.0.0:8443 --tls-cert fullchain.pem --tls-key privkey.pem
  curl -H \"Authorization: Bearer $TOKEN\" localhost:8080/api/v1/approvals")]
pub struct Args {
    /// Address and port to listen on
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:8080")]
    listen: SocketAddr,
    /// Failed authentications one address may make in a minute before its bad tokens get
    /// 429 (a valid token is always served)
    #[arg(long, value_name = "N", default_value_t = 10)]
    auth_failures: u32,
    /// Serve HTTPS with this certificate chain (PEM), with --tls-key
    #[arg(long, value_name = "PEM", requires = "tls_key")]
    tls_cert: Option<std::path::PathBuf>,
    /// The certificate's private key (PEM): a regular file (not a link) only its owner may
    /// read
    #[arg(long, value_name = "PEM", requires = "tls_cert")]
    tls_key: Option<std::path::PathBuf>,
    /// Serve plain HTTP on an address other than loopback: every token and decision crosses
    /// the network in clear, readable and replayable by anyone on the path
    #[arg(long)]
    insecure_plain_http: bool,
    /// Connections open at once; one more is refused (503 on plain HTTP) and closed
    #[arg(long, value_name = "N", default_value_t = 1024,
          value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    max_connections: u32,
    /// Event streams and long polls one token may hold open at once (beyond: 429)
    #[arg(long, value_name = "N", default_value_t = 32,
          value_parser = clap::value_parser!(u32).range(1..))]
    max_streams_per_token: u32,
    /// The time a client has for its TLS handshake, and then for each request's headers
    /// (a connection idle that long between requests is closed too; headless-run's own
    /// clients drop theirs after 4 s idle, so keep it above that)
    #[arg(long, value_name = "DUR", default_value = "10s", value_parser = crate::parse::nonzero)]
    header_timeout: Duration,
    /// On the PostgreSQL store: the runner login the runner API writes with
    /// (postgres://…; `monitor db grant USER runner`). Without it the runner API answers 503
    /// there; the embedded store needs none.
    #[arg(long, value_name = "URL", env = "HEADLESS_RUN_RUNNER_DB")]
    runner_db: Option<String>,
}

/// Every (method, path) the router answers, as the OpenAPI document names them; a test
/// holds the two together (and the end-to-end test calls every documented operation).
#[cfg(test)]
const ROUTES: &[(&str, &str)] = &[
    ("get", "/"),
    ("get", "/app.js"),
    ("get", "/app.css"),
    ("get", "/healthz"),
    ("get", "/metrics"),
    ("get", "/api/v1/openapi.json"),
    ("get", "/api/v1/approvals"),
    ("get", "/api/v1/approvals/{id}"),
    ("post", "/api/v1/approvals/{id}/approve"),
    ("post", "/api/v1/approvals/{id}/reject"),
    ("post", "/api/v1/approvals/{id}/decide"),
    ("get", "/api/v1/links/{token}"),
    ("post", "/api/v1/links/{token}/decide"),
    ("post", "/api/v1/slack/actions"),
    ("get", "/api/v1/executions"),
    ("get", "/api/v1/executions/{id}"),
    ("post", "/api/v1/executions/{id}/approve"),
    ("post", "/api/v1/executions/{id}/reject"),
    ("get", "/api/v1/runs"),
    ("get", "/api/v1/runs/{id}"),
    ("post", "/api/v1/runs/{id}/cancel"),
    ("get", "/api/v1/runs/{id}/audit"),
    ("get", "/api/v1/approvals/{id}/audit"),
    ("get", "/api/v1/ids"),
    ("get", "/api/v1/counts"),
    ("get", "/api/v1/events"),
    ("get", "/api/v1/mark"),
    ("post", "/api/v1/runner/record"),
    ("get", "/api/v1/runner/live"),
    ("post", "/api/v1/runner/prompt"),
    ("post", "/api/v1/runner/cooperative"),
    ("post", "/api/v1/runner/auto-approval"),
    ("get", "/api/v1/runner/approvals/{id}"),
    ("post", "/api/v1/runner/expire"),
    ("post", "/api/v1/runner/deliver"),
];

/// The approvals page and its script and style (no CDN: it works offline).
const PAGE: &str = include_str!("web/index.html");
const PAGE_JS: &str = include_str!("web/app.js");
const PAGE_CSS: &str = include_str!("web/app.css");

/// The page may run only its own script and style, talk only to this server, and be
/// framed by nobody.
const PAGE_POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
    connect-src 'self'; img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

fn page_file(content_type: &'static str, body: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, content_type),
            (header::CONTENT_SECURITY_POLICY, PAGE_POLICY),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
            (header::X_FRAME_OPTIONS, "DENY"),
            (header::REFERRER_POLICY, "no-referrer"),
            (header::CACHE_CONTROL, "no-store"),
        ],
        body,
    )
        .into_response()
}

#[utoipa::path(
    get,
    path = "/",
    operation_id = "page_",
    summary = "The approvals page",
    security(),
    responses((
        status = 200,
        description = "the approvals page (log in with a token)",
        body = String,
        content_type = "text/html"
    ))
)]
async fn page() -> Response {
    page_file("text/html; charset=utf-8", PAGE)
}

#[utoipa::path(
    get,
    path = "/app.js",
    operation_id = "page_app_js",
    summary = "The page's script",
    security(),
    responses((
        status = 200,
        description = "the page's script",
        body = String,
        content_type = "text/javascript"
    ))
)]
async fn page_js() -> Response {
    page_file("text/javascript; charset=utf-8", PAGE_JS)
}

#[utoipa::path(
    get,
    path = "/app.css",
    operation_id = "page_app_css",
    summary = "The page's style",
    security(),
    responses((
        status = 200,
        description = "the page's style",
        body = String,
        content_type = "text/css"
    ))
)]
async fn page_css() -> Response {
    page_file("text/css; charset=utf-8", PAGE_CSS)
}

#[utoipa::path(
    get,
    path = "/healthz",
    operation_id = "healthz",
    summary = "Whether the server is up",
    security(),
    responses((status = 200, description = "alive", body = String, content_type = "text/plain"))
)]
async fn healthz() -> &'static str {
    "ok\n"
}

/// The largest request body taken.
const BODY_LIMIT: usize = 64 * 1024;
/// The largest body of a runner's writes (a run's first row, its saved environment).
const RUNNER_BODY_LIMIT: usize = 1024 * 1024;

pub fn run(ctx: &Ctx, args: Args) -> CliResult {
    // Refused before anything else is done: nothing listens, nothing is read.
    let tls_paths = args.tls_cert.clone().zip(args.tls_key.clone());
    if let Some(why) =
        listen::refuse_listen(args.listen, tls_paths.is_some(), args.insecure_plain_http)
    {
        return Err(CliError::usage(why));
    }
    let tls = match &tls_paths {
        Some((cert, key)) => {
            let key_pem = listen::read_private_key(key).map_err(CliError::usage)?;
            Some(listen::tls_config(cert, key, &key_pem).map_err(CliError::error)?)
        }
        None => None,
    };
    let live = tokens::load(&ctx.paths)
        .map_err(CliError::error)?
        .iter()
        .filter(|t| t.live(&hr_shared::time::now_rfc3339()))
        .count();
    if live == 0 {
        eprintln!(
            "monitor serve: no token in force: every API request will get 401 (monitor token create NAME --role operator)"
        );
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| CliError::error(format!("cannot start the server: {e}")))?;
    // It serves its own store: a server named in the environment is for clients.
    let mut paths = ctx.paths.clone();
    paths.server = None;
    let runner_paths = match (&paths.store_url, args.runner_db) {
        (_, Some(url)) if !hr_shared::store::postgres::is_url(&url) => {
            return Err(CliError::usage(format!(
                "--runner-db must be a postgres:// URL, not {}",
                hr_shared::store::postgres::without_password(&url)
            )));
        }
        (None, Some(_)) => {
            return Err(CliError::usage(
                "--runner-db is for the PostgreSQL store (HEADLESS_RUN_DB=postgres://…)",
            ));
        }
        (None, None) => Some(paths.clone()),
        (Some(_), Some(url)) => Some(StatePaths {
            store_url: Some(url),
            ..paths.clone()
        }),
        (Some(_), None) => None,
    };
    // The runner API on the PostgreSQL store: its runs' capabilities come from the state
    // dir's key, the same in every server of the state dir, so any of them behind a
    // balancer takes a run's next write.
    if let Some(runner) = runner_paths.as_ref().filter(|p| p.store_url.is_some()) {
        hr_shared::paths::create_private_dir(&runner.root)
            .and_then(|()| hr_shared::store::postgres::capability_key(&runner.root))
            .map(hr_shared::store::postgres::derive_capabilities_from)
            .map_err(|e| {
                CliError::error(format!(
                    "{}: the runner API's capability key: {e}",
                    runner.root.display()
                ))
            })?;
    }
    // The user's config: its webhooks, checked before anything listens.
    let cwd = std::env::current_dir().unwrap_or_else(|_| "/".into());
    let (hooks, mailers, config) =
        match hr_shared::config::Config::load(&cwd, &hr_shared::paths::real_env) {
            Ok(config) => (
                webhooks::hooks(&config.webhooks(), config.slack().is_some())
                    .map_err(CliError::usage)?,
                mail::mailers(&config.email(), &paths).map_err(CliError::usage)?,
                config,
            ),
            Err(e) => return Err(CliError::usage(format!("the config: {e}"))),
        };
    let slack = slack::setup(config.slack()).map_err(CliError::usage)?;
    let options = Options {
        hooks,
        mailers,
        slack: slack.map(Arc::new),
        config: Arc::new(config),
        listen: args.listen,
        fail_limit: args.auth_failures,
        streams_per_token: args.max_streams_per_token,
        limits: listen::Limits {
            max_connections: args.max_connections,
            header_timeout: args.header_timeout,
        },
    };
    runtime.block_on(serve(paths, runner_paths, options, tls))
}

/// How `serve` was asked to serve.
struct Options {
    /// Where approvals are posted (`[[webhooks]]`).
    hooks: Vec<webhooks::Hook>,
    /// Whom approvals are mailed to (`[[email]]`).
    mailers: Vec<mail::Mailer>,
    /// The server's own config: its `[[reviewers]]` apply to its runners' approvals.
    config: Arc<hr_shared::config::Config>,
    /// `[slack]`: Slack's buttons are taken.
    slack: Option<Arc<slack::Slack>>,
    listen: SocketAddr,
    fail_limit: u32,
    streams_per_token: u32,
    limits: listen::Limits,
}

async fn serve(
    paths: StatePaths,
    runner_paths: Option<StatePaths>,
    options: Options,
    tls: Option<Arc<rustls::ServerConfig>>,
) -> CliResult {
    let listen = options.listen;
    let listener = std::net::TcpListener::bind(listen)
        .and_then(|l| l.set_nonblocking(true).map(|()| l))
        .map_err(|e| CliError::error(format!("cannot listen on {listen}: {e}")))?;
    let addr = listener.local_addr().unwrap_or(listen);
    eprintln!(
        "monitor serve: listening on {}://{addr} (store {})",
        if tls.is_some() { "https" } else { "http" },
        paths.store_label()
    );
    let runner_api = runner_paths.is_some();
    let (bell_rx, bell_tx) = bell(&paths);
    let connections = Arc::new(listen::Stats::default());
    let server = Arc::new(Server {
        config: options.config.clone(),
        slack: options.slack.clone(),
        store: {
            let paths = paths.clone();
            Sessions::start("store", STORE_THREADS, move || store::operator(&paths))
        },
        marks: {
            let paths = paths.clone();
            Sessions::start("mark", 1, move || store::operator(&paths))
        },
        runner_api: runner_paths.is_some(),
        runners: {
            let paths = runner_paths.unwrap_or_else(|| paths.clone());
            let n = if runner_api { RUNNER_THREADS } else { 0 };
            Sessions::start("runner", n, move || store::runner(&paths))
        },
        bell: bell_rx,
        _bell_tx: bell_tx,
        paths,
        failures: Mutex::new(limits::Failures::new(options.fail_limit)),
        streams: limits::Streams::new(options.streams_per_token),
        connections: connections.clone(),
        store_errors: AtomicU64::new(0),
        stopping: std::sync::atomic::AtomicBool::new(false),
        token_cache: Mutex::new(None),
    });
    if !options.hooks.is_empty() {
        eprintln!(
            "monitor serve: posting approvals to {} webhook(s)",
            options.hooks.len()
        );
    }
    for m in &options.mailers {
        eprintln!("monitor serve: mailing approvals through {}", m.label);
    }
    webhooks::spawn(server.clone(), options.hooks, options.mailers);
    let app = router(server.clone());
    let stop = async {
        stopped().await;
        // Event streams and long polls end at their next look, so that the graceful stop
        // is not held open by them.
        server.stopping.store(true, Ordering::Relaxed);
    };
    listen::serve(listener, tls, app, options.limits, connections, stop)
        .await
        .map_err(|e| CliError::error(format!("the server failed: {e}")))?;
    eprintln!("monitor serve: stopped");
    Ok(())
}

async fn stopped() {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut int), Ok(mut term)) = (
        signal(SignalKind::interrupt()),
        signal(SignalKind::terminate()),
    ) else {
        return std::future::pending().await;
    };
    tokio::select! {
        _ = int.recv() => {}
        _ = term.recv() => {}
    }
}

fn router(server: Arc<Server>) -> Router {
    Router::new()
        .route("/", get(page))
        .route("/app.js", get(page_js))
        .route("/app.css", get(page_css))
        .route("/healthz", get(healthz))
        .route("/metrics", get(metrics::metrics))
        .route("/api/v1/openapi.json", get(serve_openapi))
        .route("/api/v1/approvals", get(list_approvals))
        .route("/api/v1/approvals/{id}", get(one_approval))
        .route("/api/v1/approvals/{id}/approve", post(approve))
        .route("/api/v1/approvals/{id}/reject", post(reject))
        .route("/api/v1/approvals/{id}/decide", post(decide))
        .route("/api/v1/links/{token}", get(links::read_link))
        .route("/api/v1/links/{token}/decide", post(links::decide_link))
        .route("/api/v1/slack/actions", post(slack::actions))
        .route("/api/v1/executions", get(list_executions))
        .route("/api/v1/executions/{id}", get(one_execution))
        .route("/api/v1/executions/{id}/approve", post(approve_execution))
        .route("/api/v1/executions/{id}/reject", post(reject_execution))
        .route("/api/v1/runs", get(list_runs))
        .route("/api/v1/runs/{id}", get(one_run))
        .route("/api/v1/runs/{id}/cancel", post(cancel_run))
        .route("/api/v1/runs/{id}/audit", get(run_audit))
        .route("/api/v1/approvals/{id}/audit", get(approval_audit))
        .route("/api/v1/ids", get(ids))
        .route("/api/v1/counts", get(counts))
        .route("/api/v1/events", get(events))
        .route("/api/v1/mark", get(mark))
        .route(
            "/api/v1/runner/record",
            post(runner::record).layer(axum::extract::DefaultBodyLimit::max(RUNNER_BODY_LIMIT)),
        )
        .route("/api/v1/runner/live", get(runner::live))
        .route("/api/v1/runner/prompt", post(runner::prompt))
        .route("/api/v1/runner/cooperative", post(runner::cooperative))
        .route("/api/v1/runner/auto-approval", post(runner::auto_approval))
        .route("/api/v1/runner/approvals/{id}", get(runner::approval))
        .route("/api/v1/runner/expire", post(runner::expire))
        .route(
            "/api/v1/runner/deliver",
            post(runner::deliver).layer(axum::extract::DefaultBodyLimit::max(RUNNER_BODY_LIMIT)),
        )
        .fallback(|| async { ApiError::new(StatusCode::NOT_FOUND, "no such endpoint") })
        .layer(axum::extract::DefaultBodyLimit::max(BODY_LIMIT))
        .layer(axum::middleware::from_fn(log_request))
        .with_state(server)
}

/// One line per request on stderr: method, path, status, time, token name — never the
/// token, the query or the body.
async fn log_request(req: Request, next: Next) -> Response {
    let (method, path) = (req.method().clone(), req.uri().path().to_owned());
    let t0 = Instant::now();
    let slot = auth::CallerSlot::default();
    let mut req = req;
    req.extensions_mut().insert(slot.clone());
    let resp = as_json_error(next.run(req).await).await;
    let who = slot.name().unwrap_or_else(|| "-".into());
    eprintln!(
        "{} {method} {} {} {:.1}ms {}",
        hr_shared::time::now_rfc3339(),
        hr_shared::sanitize::sanitize_line(&path),
        resp.status().as_u16(),
        t0.elapsed().as_secs_f64() * 1000.0,
        hr_shared::sanitize::sanitize_line(&who)
    );
    resp
}

/// Every error is JSON: one a framework extractor answered in plain text (a body over the
/// limit: 413; a method the route does not take: 405) says the same as `{"error": …}`.
async fn as_json_error(resp: Response) -> Response {
    let status = resp.status();
    let plain = resp
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/plain"));
    if !(status.is_client_error() || status.is_server_error()) || !plain {
        return resp;
    }
    let text = axum::body::to_bytes(resp.into_body(), 64 * 1024)
        .await
        .map(|b| String::from_utf8_lossy(&b).trim().to_owned())
        .unwrap_or_default();
    let message = if status == StatusCode::PAYLOAD_TOO_LARGE {
        format!("the request body is too large ({text})")
    } else if text.is_empty() {
        status.canonical_reason().unwrap_or("error").to_owned()
    } else {
        text
    };
    ApiError::new(status, message).into_response()
}

struct Server {
    paths: StatePaths,
    /// The server's own config (`[[reviewers]]`: what its runners' approvals need at least).
    config: Arc<hr_shared::config::Config>,
    /// `[slack]`, when Slack's buttons are taken.
    slack: Option<Arc<slack::Slack>>,
    store: Sessions<dyn OperatorStore>,
    /// One session that only reads the change mark: a mark is comparable only with marks
    /// of the same session (SQLite's data version is per connection, and does not move for
    /// the connection's own writes).
    marks: Sessions<dyn OperatorStore>,
    /// Whether the runner API is served (on the PostgreSQL store: with `--runner-db`).
    runner_api: bool,
    /// The runner API's sessions (`runner.rs`).
    runners: Sessions<dyn store::RunnerStore>,
    /// Moves whenever the store may have changed (its doorbell), for long polls and event
    /// streams; without a doorbell they look on their own every [`EVENTS_LOOK`].
    bell: tokio::sync::watch::Receiver<u64>,
    /// The bell's sender when no thread holds it (the store has no doorbell).
    _bell_tx: Option<tokio::sync::watch::Sender<u64>>,
    /// Failed authentications by address (`--auth-failures`).
    failures: Mutex<limits::Failures>,
    /// Event streams and long polls open by token (`--max-streams-per-token`).
    streams: Arc<limits::Streams>,
    /// Connections open and refused (the accept loop's), for `/metrics`.
    connections: Arc<listen::Stats>,
    store_errors: AtomicU64,
    /// Set once a stop was asked for.
    stopping: std::sync::atomic::AtomicBool,
    /// The token file as last read, with what identifies that version of it.
    token_cache: Mutex<Option<(TokenStamp, Arc<Vec<tokens::Token>>)>>,
}

/// A version of the token file: its inode (`monitor token` replaces the file whole, so every
/// change makes a new one), size and modification time.
type TokenStamp = Option<(u64, u64, Option<std::time::SystemTime>)>;

/// The authenticated caller.
#[derive(Debug, Clone)]
struct Caller {
    name: String,
    role: Role,
    /// The token's reviewer groups.
    groups: Vec<String>,
    /// The stored hash of its token: what an open stream checks again.
    hash: String,
}

impl Caller {
    /// Who holds token `t`.
    fn of(t: &tokens::Token) -> Caller {
        Caller {
            name: t.name.clone(),
            role: t.role,
            groups: t.groups.clone(),
            hash: t.hash.clone(),
        }
    }
}

impl Server {
    /// The caller of this request, or 401; a bad or missing token from an address that
    /// failed `--auth-failures` times within the minute gets 429 instead. A valid token is
    /// served whatever its address did: the limit is on failures, so that a client
    /// guessing from a shared address (NAT, a proxy, a CI fleet) never locks out the
    /// others. (That is no oracle worth having: a secret is 256 random bits.)
    fn caller(&self, ip: IpAddr, headers: &HeaderMap) -> Result<Caller, ApiError> {
        let secret = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .map(str::trim);
        let all = self.tokens()?;
        let now = hr_shared::time::now_rfc3339();
        if let Some(t) = secret.and_then(|s| tokens::find(&all, s, &now)) {
            return Ok(Caller::of(t));
        }
        let mut f = self.failures.lock().unwrap_or_else(|e| e.into_inner());
        let at = Instant::now();
        if f.held_off(ip, at) {
            return Err(ApiError::new(
                StatusCode::TOO_MANY_REQUESTS,
                format!(
                    "too many failed authentications from this address ({} within a minute, \
                     --auth-failures): a bad or missing token is refused for the rest of the \
                     minute; a valid token is still served",
                    f.limit()
                ),
            ));
        }
        f.failed(ip, at);
        Err(ApiError::new(
            StatusCode::UNAUTHORIZED,
            if secret.is_some() {
                "the token is unknown, expired or revoked"
            } else {
                "an Authorization: Bearer TOKEN header is needed"
            },
        ))
    }

    /// The operator named `name` as a caller, when an operator token of that name is in
    /// force: who a decision link or a Slack button decides as.
    fn operator_in_force(&self, name: &str) -> Result<Option<Caller>, ApiError> {
        let now = hr_shared::time::now_rfc3339();
        Ok(tokens::operator(&self.tokens()?, name, &now).map(Caller::of))
    }

    /// The tokens, read again only when their file changed.
    fn tokens(&self) -> Result<Arc<Vec<tokens::Token>>, ApiError> {
        use std::os::unix::fs::MetadataExt;
        let stamp = std::fs::metadata(tokens::file(&self.paths))
            .ok()
            .map(|m| (m.ino(), m.len(), m.modified().ok()));
        let mut cache = self.token_cache.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((seen, all)) = cache.as_ref()
            && *seen == stamp
        {
            return Ok(all.clone());
        }
        let all = Arc::new(
            tokens::load(&self.paths)
                .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, e))?,
        );
        *cache = Some((stamp, all.clone()));
        Ok(all)
    }

    /// Whether the caller's token is still in force (not revoked, not expired): what an
    /// open stream or long poll looks at each time it wakes. Cheap: one `stat` of the
    /// token file, read again only when it changed. A file that cannot be read ends the
    /// stream (it is what would refuse a new request).
    fn still_live(&self, c: &Caller) -> bool {
        self.tokens()
            .is_ok_and(|all| tokens::in_force(&all, &c.hash, &hr_shared::time::now_rfc3339()))
    }

    /// A place for one more stream or long poll of the caller's token, or 429 naming the
    /// limit.
    fn stream_slot(&self, c: &Caller) -> Result<limits::Slot, ApiError> {
        self.streams.take(&c.name).ok_or_else(|| {
            let most = self.streams.most();
            ApiError::new(
                StatusCode::TOO_MANY_REQUESTS,
                format!(
                    "the token {} already holds as many event streams and long polls open as \
                     one token may (--max-streams-per-token {most}); close one first",
                    c.name
                ),
            )
            .with("limit", json!(most))
        })
    }

    /// Runs `f` on the store's thread; a store error is a 503.
    async fn with_store<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut (dyn OperatorStore + 'static)) -> Result<T, ApiError> + Send + 'static,
    ) -> Result<T, ApiError> {
        let out = self.store.call(f).await;
        if out
            .as_ref()
            .is_err_and(|e| e.status == StatusCode::SERVICE_UNAVAILABLE)
        {
            self.store_errors.fetch_add(1, Ordering::Relaxed);
        }
        out
    }
}

/// The server's store as the store itself (always: `monitor serve` serves its own store,
/// never another server's API).
fn own(st: &mut dyn OperatorStore) -> Result<&mut dyn store::AdminStore, ApiError> {
    st.local().ok_or_else(|| {
        ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "the server's store is not its own",
        )
    })
}

/// An error answer: `{"error": …}` and more fields where they help.
#[derive(Debug)]
struct ApiError {
    status: StatusCode,
    body: ErrorBody,
}

impl ApiError {
    fn new(status: StatusCode, msg: impl Into<String>) -> Self {
        ApiError {
            status,
            body: ErrorBody::new(msg),
        }
    }

    /// What it says (its `error`).
    fn message(&self) -> &str {
        &self.body.error
    }

    /// With field `key` beside `error`.
    fn with(mut self, key: &str, v: impl serde::Serialize) -> Self {
        self.body.more.insert(
            key.to_owned(),
            serde_json::to_value(v).unwrap_or(Value::Null),
        );
        self
    }

    fn store(e: hr_shared::db::StoreError) -> Self {
        match e {
            hr_shared::db::StoreError::Missing(_) => {
                ApiError::new(StatusCode::NOT_FOUND, "nothing has run with this store yet")
            }
            // The database server's roles said no (on PostgreSQL: a pipeline step's deciders).
            e @ hr_shared::db::StoreError::Denied(_) => {
                ApiError::new(StatusCode::FORBIDDEN, format!("the store: {e}"))
            }
            e => ApiError::new(StatusCode::SERVICE_UNAVAILABLE, format!("the store: {e}")),
        }
    }
}

/// A listing: nothing has run yet (no database) is an empty one, as on the command line.
fn or_none<T>(r: hr_shared::store::StoreResult<Vec<T>>) -> Result<Vec<T>, ApiError> {
    match r {
        Err(hr_shared::db::StoreError::Missing(_)) => Ok(Vec::new()),
        other => other.map_err(ApiError::store),
    }
}

/// One row: no database yet is no row.
fn or_missing<T>(r: hr_shared::store::StoreResult<Option<T>>) -> Result<Option<T>, ApiError> {
    match r {
        Err(hr_shared::db::StoreError::Missing(_)) => Ok(None),
        other => other.map_err(ApiError::store),
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        ok(self.status, &self.body)
    }
}

/// A JSON answer of a wire type. Sent through a `Value`, whose keys are in name order: the
/// bytes the API has always sent.
fn ok<T: serde::Serialize>(status: StatusCode, body: &T) -> Response {
    match serde_json::to_value(body) {
        Ok(v) => (status, Json(v)).into_response(),
        Err(e) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            Json(json!({ "error": format!("cannot write the answer: {e}") })),
        )
            .into_response(),
    }
}

/// Sessions of a store (`S`: the operator's or the runner's trait), on a few threads of
/// their own, each with its own session (reads on SQLite's WAL, and on a server, go side by
/// side; writes are each one transaction). Handlers hand them closures and await the answer.
struct Sessions<S: ?Sized> {
    jobs: Mutex<mpsc::Sender<Job<S>>>,
}

type Job<S> = Box<dyn FnOnce(&mut S) + Send>;

/// How many operator sessions serve the requests.
const STORE_THREADS: usize = 4;
/// How many runner sessions serve the runner API.
const RUNNER_THREADS: usize = 2;

impl<S: ?Sized + 'static> Sessions<S> {
    /// `n` threads named `name-I`, each with the session `open` makes.
    fn start(
        name: &str,
        n: usize,
        open: impl Fn() -> Box<S> + Send + Sync + 'static,
    ) -> Sessions<S> {
        let (tx, rx) = mpsc::channel::<Job<S>>();
        let rx = Arc::new(Mutex::new(rx));
        let open = Arc::new(open);
        for i in 0..n {
            let (rx, open) = (rx.clone(), open.clone());
            std::thread::Builder::new()
                .name(format!("{name}-{i}"))
                .spawn(move || {
                    let mut store = open();
                    loop {
                        let job = match rx.lock() {
                            Ok(rx) => rx.recv(),
                            Err(_) => return,
                        };
                        match job {
                            Ok(job) => job(&mut *store),
                            Err(_) => return,
                        }
                    }
                })
                .expect("start a store thread");
        }
        Sessions {
            jobs: Mutex::new(tx),
        }
    }

    async fn call<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut S) -> Result<T, ApiError> + Send + 'static,
    ) -> Result<T, ApiError> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let job: Job<S> = Box::new(move |s| {
            let _ = tx.send(f(s));
        });
        let sent = self
            .jobs
            .lock()
            .map(|j| j.send(job).is_ok())
            .unwrap_or(false);
        if !sent {
            return Err(ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "the store thread is gone",
            ));
        }
        rx.await.unwrap_or_else(|_| {
            Err(ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "the store thread is gone",
            ))
        })
    }
}

/// The filters a list query says (`status`, `tool`, `run` (approvals only), `execution`,
/// `since`, `limit`); bad values are 400 (unknown keys were refused by [`Params`]).
struct Filters {
    statuses: Vec<String>,
    tool: Option<String>,
    run: Option<String>,
    execution: Option<String>,
    since: Option<String>,
    limit: Option<usize>,
}

fn filters(q: query::ListQuery) -> Result<Filters, ApiError> {
    let since = match q.since.as_deref() {
        Some(s) => {
            Some(crate::parse::since(s).map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, e))?)
        }
        None => None,
    };
    let limit = match q.limit.as_deref() {
        Some(l) => Some(
            l.parse::<usize>()
                .ok()
                .filter(|n| (1..=10_000).contains(n))
                .ok_or_else(|| {
                    ApiError::new(StatusCode::BAD_REQUEST, "limit is a number from 1 to 10000")
                })?,
        ),
        None => None,
    };
    let include_all = query::flag(q.include_all.as_deref(), "include_all")?;
    if include_all && q.status.is_some() {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "give status or include_all=true, not both",
        ));
    }
    let statuses: Vec<String> = if include_all {
        vec!["all".to_owned()]
    } else {
        q.status
            .map(|s| s.split(',').map(str::to_owned).collect())
            .unwrap_or_default()
    };
    // `all` with another status would quietly mean the other one.
    if statuses.len() > 1 && statuses.iter().any(|s| s == "all") {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "status=all lists every status: give it alone",
        ));
    }
    Ok(Filters {
        statuses,
        tool: q.tool,
        run: q.run,
        execution: q.execution,
        since,
        limit,
    })
}

#[cfg(test)]
mod tests {
    use super::metrics::resume_histogram;
    use super::openapi::document;
    use super::*;

    #[test]
    fn the_resume_histogram_counts_used_answers_by_bucket() {
        let mut used =
            hr_shared::testing::approval("AP-1", hr_shared::approvals::PromptKind::Choice);
        used.decided_at = Some("2026-01-01T00:00:00.000Z".into());
        used.consumed_at = Some("2026-01-01T00:00:00.040Z".into());
        used.decision_channel = Some("http".into());
        let mut slow = used.clone();
        slow.consumed_at = Some("2026-01-01T00:00:07.000Z".into());
        slow.decision_channel = Some("cli".into());
        let mut unused = used.clone();
        unused.consumed_at = None;
        // A policy's answer is used at once: not a person's wait.
        let mut policy = used.clone();
        policy.decision_channel = Some("policy:trusted".into());
        let text = resume_histogram(&[used, slow, unused, policy]);
        let line = |le: &str| {
            text.lines()
                .find(|l| l.contains(&format!("le=\"{le}\"")))
                .unwrap()
                .rsplit(' ')
                .next()
                .unwrap()
                .to_owned()
        };
        assert_eq!(line("0.025"), "0");
        assert_eq!(line("0.05"), "1");
        assert_eq!(line("5"), "1");
        assert_eq!(line("10"), "2");
        assert_eq!(line("+Inf"), "2");
        assert!(text.contains("_count 2\n"), "{text}");
        assert!(text.contains("_sum 7.040\n"), "{text}");
        assert!(text.contains("# TYPE headless_run_decision_to_resume_seconds histogram"));
    }

    /// The OpenAPI document names exactly the routes served.
    #[test]
    fn the_openapi_document_names_every_route_and_no_other() {
        let doc: Value = serde_json::from_str(document()).expect("the document is JSON");
        assert_eq!(doc["openapi"], "3.1.0");
        let mut documented: Vec<(String, String)> = doc["paths"]
            .as_object()
            .unwrap()
            .iter()
            .flat_map(|(path, ops)| {
                ops.as_object()
                    .unwrap()
                    .keys()
                    .map(move |m| (m.clone(), path.clone()))
            })
            .collect();
        documented.sort();
        let mut served: Vec<(String, String)> = ROUTES
            .iter()
            .map(|(m, p)| (m.to_string(), p.to_string()))
            .collect();
        served.sort();
        assert_eq!(documented, served);
        // Every operation says what its errors look like, and needs a token unless public.
        for (m, p) in ROUTES {
            let op = &doc["paths"][p][m];
            let public = op["security"].as_array().is_some_and(|s| s.is_empty());
            assert_eq!(
                public,
                [
                    "/",
                    "/app.js",
                    "/app.css",
                    "/healthz",
                    "/api/v1/openapi.json"
                ]
                .contains(p),
                "{m} {p}"
            );
            if !public {
                assert!(op["responses"]["401"].is_object(), "{m} {p}: no 401");
            }
        }
    }
}
