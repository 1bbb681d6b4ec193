//! Decision links (`hr_shared::links`) on the server: the key that signs them
//! (`STATE/link.key`, made on first use, 0600), the nonces of links used
//! (`STATE/links-used`, kept until they end, under a lock so that two requests — or two
//! servers on one state dir — never both use one link), and the two endpoints a link's page
//! calls: read the approval, decide it once.
//!
//! A link is for one operator: decisions through it are recorded as that operator's token
//! (which must still be in force), with its groups. Unless it is link-only, the page must
//! also send that operator's token: the link then only says which approval, and the login
//! says who.

use super::approvals::{approval_view, body_fields, decide_via};
use super::openapi::*;
use super::tokens;
use super::*;
use axum::extract::ConnectInfo;
use hr_shared::links::{Link, Refused};
use hr_shared::wire::{ApprovalView, DecideRequest, LinkBody, LinkInfo};
use std::io::{BufRead, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;

fn key_file(paths: &StatePaths) -> PathBuf {
    paths.root.join("link.key")
}

fn used_file(paths: &StatePaths) -> PathBuf {
    paths.root.join("links-used")
}

/// The link key of this state dir, made (32 random bytes, 0600) if there is none.
pub fn key(paths: &StatePaths) -> Result<Vec<u8>, String> {
    let f = key_file(paths);
    match std::fs::read_to_string(&f) {
        Ok(text) => {
            let key = text.trim();
            if key.len() == 64 && key.chars().all(|c| c.is_ascii_hexdigit()) {
                return Ok(key.as_bytes().to_vec());
            }
            return Err(format!("{}: not a link key (64 hex digits)", f.display()));
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(format!("cannot read {}: {e}", f.display())),
    }
    paths.ensure_dirs().map_err(|e| e.to_string())?;
    let secret = tokens::new_secret()?;
    let hex = secret.trim_start_matches("hrt_").to_owned();
    // Another process may have made one first: its key wins (links it signed stay good).
    hr_shared::paths::write_private(&f, hex.as_bytes(), hr_shared::paths::Put::KeepExisting)
        .map_err(|e| format!("cannot write {}: {e}", f.display()))?;
    key(paths)
}

/// A new link to `approval_id` for `operator`, lasting `ttl`: its token.
pub fn make(
    paths: &StatePaths,
    approval_id: &str,
    operator: &str,
    ttl: std::time::Duration,
    link_only: bool,
) -> Result<String, String> {
    let secs = ttl.as_secs().clamp(1, hr_shared::links::MAX_TTL_SECS);
    let link = Link {
        approval_id: approval_id.to_owned(),
        operator: operator.to_owned(),
        expires: unix_now() + secs,
        nonce: hr_shared::links::new_nonce()?,
        link_only,
    };
    link.sign(&key(paths)?)
        .ok_or_else(|| format!("no link can carry `{approval_id}` for `{operator}`"))
}

fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// Marks `link` used: false when it already was. Under an exclusive lock on the file, which
/// keeps the nonces of links that have not ended (rewritten without the others now and then).
fn spend(paths: &StatePaths, link: &Link) -> Result<bool, String> {
    let f = used_file(paths);
    let file = std::fs::OpenOptions::new()
        .read(true)
        .append(true)
        .create(true)
        .mode(0o600)
        .open(&f)
        .map_err(|e| format!("cannot open {}: {e}", f.display()))?;
    // SAFETY: flock on a descriptor we own; released when `file` closes.
    if unsafe { libc::flock(std::os::fd::AsRawFd::as_raw_fd(&file), libc::LOCK_EX) } != 0 {
        return Err(format!(
            "cannot lock {}: {}",
            f.display(),
            std::io::Error::last_os_error()
        ));
    }
    let now = unix_now();
    let mut live = Vec::new();
    let mut lines = 0;
    for line in std::io::BufReader::new(&file).lines() {
        let line = line.map_err(|e| format!("cannot read {}: {e}", f.display()))?;
        lines += 1;
        let Some((nonce, until)) = line.split_once(' ') else {
            continue;
        };
        if nonce == link.nonce {
            return Ok(false);
        }
        if until.parse::<u64>().is_ok_and(|u| u > now) {
            live.push(line);
        }
    }
    let entry = format!("{} {}\n", link.nonce, link.expires);
    if lines > 2 * live.len() + 64 {
        // Mostly ended links: written again with the live ones (still under the lock).
        live.push(entry.trim_end().to_owned());
        let text: String = live.iter().map(|l| format!("{l}\n")).collect();
        file.set_len(0)
            .and_then(|()| (&file).write_all(text.as_bytes()))
            .and_then(|()| file.sync_data())
    } else {
        (&file)
            .write_all(entry.as_bytes())
            .and_then(|()| file.sync_data())
    }
    .map_err(|e| format!("cannot write {}: {e}", f.display()))?;
    Ok(true)
}

/// Whether `link` was used already (a read: the page may show it again until it is used).
fn spent(paths: &StatePaths, link: &Link) -> bool {
    std::fs::File::open(used_file(paths)).is_ok_and(|f| {
        std::io::BufReader::new(f)
            .lines()
            .map_while(Result::ok)
            .any(|l| l.split(' ').next() == Some(link.nonce.as_str()))
    })
}

/// The link in `token`, and the operator it decides as: refused when it is not this
/// server's, has ended or was used, when its operator has no operator token in force, or
/// (not link-only) when the request does not carry that operator's token.
fn resolve(
    s: &Server,
    ip: IpAddr,
    headers: &HeaderMap,
    token: &str,
) -> Result<(Link, Caller), ApiError> {
    let key = key(&s.paths).map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, e))?;
    let link = match Link::verify(token, &key, unix_now()) {
        Ok(l) => l,
        Err(Refused::Invalid) => {
            return Err(ApiError::new(
                StatusCode::NOT_FOUND,
                "no such link (it is not one this server signed)",
            ));
        }
        Err(Refused::Expired) => {
            return Err(
                ApiError::new(StatusCode::GONE, "this link has ended: ask for a new one")
                    .with("outcome", json!("expired")),
            );
        }
    };
    if spent(&s.paths, &link) {
        return Err(ApiError::new(
            StatusCode::GONE,
            "this link was used already: ask for a new one",
        )
        .with("outcome", json!("used")));
    }
    let Some(operator) = s.operator_in_force(&link.operator)? else {
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            format!(
                "this link is for {}, who has no operator token in force",
                hr_shared::sanitize::sanitize_line(&link.operator)
            ),
        ));
    };
    if !link.link_only {
        let c = s.caller(ip, headers)?;
        if c.name != link.operator {
            return Err(ApiError::new(
                StatusCode::FORBIDDEN,
                format!(
                    "this link is for {}: log in with their token",
                    hr_shared::sanitize::sanitize_line(&link.operator)
                ),
            ));
        }
    }
    Ok((link, operator))
}

fn info(link: &Link) -> LinkInfo {
    LinkInfo {
        approval_id: link.approval_id.clone(),
        operator: link.operator.clone(),
        link_only: link.link_only,
        expires_at: hr_shared::time::to_rfc3339(
            std::time::UNIX_EPOCH + std::time::Duration::from_secs(link.expires),
        ),
    }
}

/// The caller's address (for the failed-authentication limit of a login-needing link).
pub(super) struct Peer(IpAddr);

impl axum::extract::FromRequestParts<Arc<Server>> for Peer {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        _: &Arc<Server>,
    ) -> Result<Self, ApiError> {
        Ok(Peer(
            parts
                .extensions
                .get::<ConnectInfo<SocketAddr>>()
                .map_or(IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED), |c| c.0.ip()),
        ))
    }
}

#[utoipa::path(
    get,
    path = "/api/v1/links/{token}",
    operation_id = "readLink",
    summary = "A decision link's approval",
    description = "What a decision link (`monitor link`, or an e-mail's) points to. A link-only link needs no token; another needs its operator's.",
    params(("token" = String, Path, description = "the link's token (`v1~…`)")),
    security((), ("bearer" = [])),
    responses(
        (status = 200, description = "the link and its approval", body = LinkBody),
        (status = 401, description = NO_TOKEN, body = ErrorBody),
        (status = 403, description = "the link is for another operator, or its operator's token is no longer in force", body = ErrorBody),
        (status = 404, description = "not a link this server signed", body = ErrorBody),
        (status = 410, description = "the link has ended or was used", body = ErrorBody),
        (status = 429, description = HELD_OFF, body = ErrorBody),
        (status = 503, description = STORE_DOWN, body = ErrorBody),
    )
)]
pub(super) async fn read_link(
    State(s): State<Arc<Server>>,
    Peer(ip): Peer,
    headers: HeaderMap,
    Path(token): Path<String>,
) -> Result<Response, ApiError> {
    let (link, _) = resolve(&s, ip, &headers, &token)?;
    let id = link.approval_id.clone();
    let approval = s
        .with_store(move |st| match or_missing(st.approval(&id))? {
            Some(a) => approval_view(st, &a),
            None => Err(ApiError::new(StatusCode::NOT_FOUND, "no such approval")),
        })
        .await?;
    Ok(ok(
        StatusCode::OK,
        &LinkBody {
            link: info(&link),
            approval,
        },
    ))
}

#[utoipa::path(
    post,
    path = "/api/v1/links/{token}/decide",
    operation_id = "decideByLink",
    summary = "Decide through a decision link, once",
    description = "Decides the link's approval as the link's operator (channel `link`). The link is spent by this call, whatever the store answers.",
    params(("token" = String, Path, description = "the link's token (`v1~…`)")),
    security((), ("bearer" = [])),
    request_body = DecideRequest,
    responses(
        (status = 200, description = "decided", body = ApprovalView),
        (status = 202, description = "counted, still pending (more reviewers, or a wait timer)", body = ApprovalView),
        (status = 400, description = BAD_INPUT, body = ErrorBody),
        (status = 401, description = NO_TOKEN, body = ErrorBody),
        (status = 403, description = "the link is for another operator, its operator's token is no longer in force, or the store refused this decider", body = ErrorBody),
        (status = 404, description = "not a link this server signed, or no such approval", body = ErrorBody),
        (status = 409, description = DECIDED, body = ErrorBody),
        (status = 410, description = "the link has ended or was used", body = ErrorBody),
        (status = 413, description = TOO_LARGE, body = ErrorBody),
        (status = 422, description = INVALID, body = ErrorBody),
        (status = 429, description = HELD_OFF, body = ErrorBody),
        (status = 503, description = STORE_DOWN, body = ErrorBody),
    )
)]
pub(super) async fn decide_link(
    State(s): State<Arc<Server>>,
    Peer(ip): Peer,
    headers: HeaderMap,
    Path(token): Path<String>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let fields = body_fields(&body)?;
    let Some(value) = fields.value.clone() else {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "`value` is required",
        ));
    };
    let (link, caller) = resolve(&s, ip, &headers, &token)?;
    if !spend(&s.paths, &link).map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, e))? {
        return Err(ApiError::new(
            StatusCode::GONE,
            "this link was used already: ask for a new one",
        )
        .with("outcome", json!("used")));
    }
    decide_via(&s, &caller, "link", link.approval_id, value, fields).await
}
