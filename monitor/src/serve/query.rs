//! Query strings as types: each endpoint names the parameters it takes in a struct, and
//! [`Params`] refuses any other (400 `unknown parameter`), a parameter given twice, and
//! (each struct's own check) a value out of range — before the handler runs.

use super::ApiError;
use axum::extract::{FromRequestParts, Query};
use axum::http::StatusCode;
use axum::http::request::Parts;
use serde::Deserialize;
use serde::de::DeserializeOwned;

/// The query string read into `T` (a struct of `Option<String>`s that denies unknown
/// fields).
pub(super) struct Params<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequestParts<S> for Params<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, ApiError> {
        Query::<T>::try_from_uri(&parts.uri)
            .map(|Query(q)| Params(q))
            .map_err(|e| refused(&e.body_text()))
    }
}

/// Why a query string was refused, in the API's words.
fn refused(why: &str) -> ApiError {
    let named = |marker: &str| {
        why.split_once(marker)
            .and_then(|(_, rest)| rest.split_once('`'))
            .map(|(name, _)| hr_shared::sanitize::sanitize_line(name))
    };
    let message = if let Some(k) = named("unknown field `") {
        format!("unknown parameter `{k}`")
    } else if let Some(k) = named("duplicate field `") {
        format!("parameter `{k}` is given twice")
    } else {
        format!(
            "not a query string this endpoint takes: {}",
            hr_shared::sanitize::sanitize_line(why)
        )
    };
    ApiError::new(StatusCode::BAD_REQUEST, message)
}

/// A number from `min` to `max` in parameter `k`, when given; else 400.
pub(super) fn number(
    v: Option<&str>,
    k: &str,
    min: u64,
    max: u64,
) -> Result<Option<u64>, ApiError> {
    v.map(|v| {
        v.parse::<u64>()
            .ok()
            .filter(|n| (min..=max).contains(n))
            .ok_or_else(|| {
                ApiError::new(
                    StatusCode::BAD_REQUEST,
                    format!("`{k}` is a number from {min} to {max}"),
                )
            })
    })
    .transpose()
}

/// `GET /api/v1/runs` and `/api/v1/approvals`: `status` (comma-separated), `tool`, `run`
/// (approvals only), `execution`, `since`, `limit` (1–10000).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ListQuery {
    pub status: Option<String>,
    /// `true`: every status (as `status=all`), as gate services spell it.
    pub include_all: Option<String>,
    pub tool: Option<String>,
    pub run: Option<String>,
    pub execution: Option<String>,
    pub since: Option<String>,
    pub limit: Option<String>,
}

/// `GET /api/v1/runs/{id}`: `tail`, the run log's last lines (0–10000).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct TailQuery {
    pub tail: Option<String>,
}

/// `GET /api/v1/ids`: `prefix`, `limit` (1–100).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct IdsQuery {
    pub prefix: Option<String>,
    pub limit: Option<String>,
}

/// `GET /api/v1/counts`: `since`, `soon` (seconds).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct CountsQuery {
    pub since: Option<String>,
    pub soon: Option<String>,
    /// `true`: only the live counts and pending approvals (cheap; what a dashboard polls).
    pub live: Option<String>,
}

/// `GET /api/v1/executions`: `limit` (1–1000).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct LimitQuery {
    pub limit: Option<String>,
}

/// `GET /api/v1/mark`: `after` (a change mark), `wait` (seconds).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct MarkQuery {
    pub after: Option<String>,
    pub wait: Option<String>,
}

/// `GET /api/v1/events`: `after` (an event id; `Last-Event-ID` says the same).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct AfterQuery {
    pub after: Option<String>,
}

/// `GET /api/v1/runner/live`: `host`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct HostQuery {
    pub host: Option<String>,
    /// A command's request fingerprint, as the runner sends it.
    pub fingerprint: Option<String>,
}

/// A `true`/`false` (or `1`/`0`) query flag, absent meaning false; anything else is a 400
/// naming it.
pub(super) fn flag(value: Option<&str>, name: &str) -> Result<bool, super::ApiError> {
    match value {
        None | Some("false") | Some("0") => Ok(false),
        Some("true") | Some("1") => Ok(true),
        Some(_) => Err(super::ApiError::new(
            axum::http::StatusCode::BAD_REQUEST,
            format!("{name} is true or false"),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::Uri;

    fn read<T: DeserializeOwned>(uri: &str) -> Result<T, String> {
        Query::<T>::try_from_uri(&uri.parse::<Uri>().unwrap())
            .map(|Query(q)| q)
            .map_err(|e| refused(&e.body_text()).message().to_owned())
    }

    #[test]
    fn a_query_names_only_what_its_endpoint_takes_once() {
        let q: ListQuery = read("/api/v1/runs?status=failed,stalled&limit=5").unwrap();
        assert_eq!(q.status.as_deref(), Some("failed,stalled"));
        assert_eq!(q.limit.as_deref(), Some("5"));
        assert_eq!(
            read::<ListQuery>("/api/v1/runs?colour=red").unwrap_err(),
            "unknown parameter `colour`"
        );
        assert_eq!(
            read::<LimitQuery>("/x?limit=1&limit=2").unwrap_err(),
            "parameter `limit` is given twice"
        );
        // A name is cleaned before it is said back.
        assert_eq!(
            read::<TailQuery>("/x?%1B%5B31mred=1").unwrap_err(),
            "unknown parameter `red`"
        );
        let none: CountsQuery = read("/api/v1/counts").unwrap();
        assert!(none.since.is_none() && none.soon.is_none());
    }

    #[test]
    fn numbers_are_checked_against_their_range() {
        assert_eq!(number(Some("7"), "soon", 0, 10).unwrap(), Some(7));
        assert_eq!(number(None, "soon", 0, 10).unwrap(), None);
        for bad in ["11", "-1", "x", ""] {
            let e = number(Some(bad), "soon", 0, 10).unwrap_err();
            assert_eq!(e.message(), "`soon` is a number from 0 to 10");
        }
    }
}
