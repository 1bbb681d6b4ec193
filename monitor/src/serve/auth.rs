//! Who calls, as an extractor per role: a handler names the role it serves in its
//! arguments (`Reader(c)`, `Operator(c)`, `Runner(c)`, `Watcher(c)`), and the request is
//! refused before the handler runs — 401 without a valid token, 429 after too many failures
//! from its address, 403 for another role. The caller's name reaches the request log
//! through the [`CallerSlot`] the log puts in each request, whatever the handler answers.

use super::tokens::Role;
use super::{ApiError, Caller, Server};
use axum::extract::{ConnectInfo, FromRequestParts};
use axum::http::StatusCode;
use axum::http::request::Parts;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex};

/// Where the request log finds who made the request (set once the token is known).
#[derive(Clone, Default)]
pub(super) struct CallerSlot(Arc<Mutex<Option<String>>>);

impl CallerSlot {
    fn set(&self, name: &str) {
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = Some(name.to_owned());
    }

    /// The caller's token name, if the request was authenticated.
    pub(super) fn name(&self) -> Option<String> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

/// The caller of the request in `parts`, when its role is one of `roles`.
fn authenticate(parts: &Parts, s: &Server, roles: &[Role]) -> Result<Caller, ApiError> {
    let ip = parts
        .extensions
        .get::<ConnectInfo<SocketAddr>>()
        .map_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED), |c| c.0.ip());
    let c = s.caller(ip, &parts.headers)?;
    if let Some(slot) = parts.extensions.get::<CallerSlot>() {
        slot.set(&c.name);
    }
    if !roles.contains(&c.role) {
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            format!("a {} token may not do this", c.role.as_str()),
        ));
    }
    Ok(c)
}

macro_rules! role_extractor {
    ($(#[$doc:meta])* $name:ident: $($role:ident),+) => {
        $(#[$doc])*
        pub(super) struct $name(pub Caller);

        impl FromRequestParts<Arc<Server>> for $name {
            type Rejection = ApiError;

            async fn from_request_parts(
                parts: &mut Parts,
                s: &Arc<Server>,
            ) -> Result<Self, ApiError> {
                authenticate(parts, s, &[$(Role::$role),+]).map($name)
            }
        }
    };
}

role_extractor!(
    /// An operator's or a viewer's token: what reads.
    Reader: Operator, Viewer
);
role_extractor!(
    /// An operator's token: what decides and cancels.
    Operator: Operator
);
role_extractor!(
    /// Any token: the change mark, which runners long-poll too.
    Watcher: Operator, Viewer, Runner
);

/// A runner's token, on a server that serves the runner API (on the PostgreSQL store:
/// `--runner-db`).
pub(super) struct Runner(pub Caller);

impl FromRequestParts<Arc<Server>> for Runner {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, s: &Arc<Server>) -> Result<Self, ApiError> {
        let c = authenticate(parts, s, &[Role::Runner])?;
        if !s.runner_api {
            return Err(ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "the runner API on the PostgreSQL store needs a runner login: monitor serve --runner-db URL",
            ));
        }
        Ok(Runner(c))
    }
}
