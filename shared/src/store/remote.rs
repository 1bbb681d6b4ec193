//! The operator API as a store: `monitor --server URL` (or `HEADLESS_RUN_SERVER`) runs its
//! commands and the dashboard against a `monitor serve` server, with a viewer or operator
//! token ([`crate::remote`] says where the token comes from).
//!
//! Each [`OperatorStore`] call the API can answer is one request under `/api/v1`; the
//! server applies every rule of the CLI (first writer wins, expiry, screen binding) and
//! records a decision or a cancel as made by the token's name over `http`, whatever the
//! [`Decider`] says. What only the server's host can do (reconcile, gc, the worker's
//! claims, remembered decisions, the audit chain's checks) is
//! [`StoreError::NotRemote`]. Answers carry no [`Effects`](super::Effects): the server logs
//! the events on its host. The bodies are [`crate::wire`]'s, which the server sends.

use super::{Counts, Done, OperatorStore, StoreResult};
use crate::approvals::{Approval, ApprovalFilter, DecideOutcome, Decider, InvalidValue};
use crate::audit::AuditRow;
use crate::control::CancelOutcome;
use crate::db::StoreError;
use crate::remote::{CallError, Client, Remote, encode};
use crate::runs::{RunFilter, ToolRun};
use crate::status::{ApprovalStatus, RunStatus};
use crate::wire::{
    ApprovalView, ApprovalsBody, AuditBody, CancelBody, CancelKind, CancelRequest, CountsBody,
    DecideRequest, ErrorBody, IdsBody, Mark, RunDetail, RunsBody,
};
use serde_json::Value;
use std::io::Write;
use std::time::Duration;

/// How long one call may take.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(30);
/// How long connecting may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// The most rows one listing asks for (the API's bound): `--limit 0` is at most this many.
pub const LIST_LIMIT: usize = 10_000;

/// The query string of `pairs` whose value is set (`?a=1&b=2`, or nothing).
fn query(pairs: &[(&str, Option<String>)]) -> String {
    let parts: Vec<String> = pairs
        .iter()
        .filter_map(|(k, v)| v.as_ref().map(|v| format!("{k}={}", encode(v))))
        .collect();
    if parts.is_empty() {
        String::new()
    } else {
        format!("?{}", parts.join("&"))
    }
}

/// A listing's `limit`: `None` (all) is the API's bound.
fn limit(l: Option<usize>) -> Option<String> {
    Some(l.unwrap_or(LIST_LIMIT).clamp(1, LIST_LIMIT).to_string())
}

/// `monitor`'s session on a server.
pub struct HttpOperator {
    url: String,
    /// The client, or why there is none (no token, a credentials file others may read, a
    /// CA that cannot be read): said by every call, first by [`OperatorStore::connect`].
    client: Result<Client, String>,
}

impl HttpOperator {
    /// The server at `url`, with the token and CA from this process's environment or the
    /// credentials file.
    pub fn new(url: &str) -> Self {
        let client = Remote::resolve(url, &crate::paths::real_env)
            .and_then(|r| Client::new(&r, CALL_TIMEOUT, CONNECT_TIMEOUT));
        HttpOperator {
            url: url.trim_end_matches('/').to_owned(),
            client,
        }
    }

    /// The server's base URL.
    pub fn url(&self) -> &str {
        &self.url
    }

    fn client(&self) -> StoreResult<&Client> {
        self.client
            .as_ref()
            .map_err(|e| StoreError::Remote(e.clone()))
    }

    /// A failed call as the command says it: unreachable names the URL; a refusal or a
    /// failure is the server's own message.
    fn error(&self, e: CallError) -> StoreError {
        match e {
            CallError::Unreachable(why) => {
                StoreError::Remote(format!("cannot reach the server at {}: {why}", self.url))
            }
            e => StoreError::Remote(format!("{}: {}", self.url, e.message())),
        }
    }

    fn get<T: serde::de::DeserializeOwned>(&self, path: &str) -> StoreResult<T> {
        self.client()?.get(path).map_err(|e| self.error(e))
    }

    /// `GET path`; a 404 is `None`.
    fn get_opt<T: serde::de::DeserializeOwned>(&self, path: &str) -> StoreResult<Option<T>> {
        match self.client()?.get(path) {
            Ok(v) => Ok(Some(v)),
            Err(CallError::Status { status: 404, .. }) => Ok(None),
            Err(e) => Err(self.error(e)),
        }
    }

    fn run_with_tail(&self, tool_run_id: &str, tail: usize) -> StoreResult<Option<RunDetail>> {
        self.get_opt(&format!(
            "/api/v1/runs/{}?tail={}",
            encode(tool_run_id),
            tail.min(LIST_LIMIT)
        ))
    }
}

/// The server's error message in an error answer's body.
fn body_error(body: &Value) -> String {
    ErrorBody::read(body).map_or_else(|| "refused".to_owned(), |e| e.error)
}

impl OperatorStore for HttpOperator {
    /// Checks that the server answers and takes the token (a runner token is refused here).
    fn connect(&mut self) -> StoreResult<()> {
        self.change_mark().map(|_| ())
    }

    fn change_mark(&mut self) -> StoreResult<u64> {
        Ok(self.get::<Mark>("/api/v1/mark")?.mark)
    }

    fn ids_starting_with(&mut self, prefix: &str, limit: usize) -> StoreResult<Vec<String>> {
        // No id holds anything else: none, as a local store answers (the API says 400).
        let id_like = (1..=64).contains(&prefix.len())
            && prefix
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-');
        if !id_like {
            return Ok(Vec::new());
        }
        let q = query(&[
            ("prefix", Some(prefix.to_owned())),
            ("limit", Some(limit.clamp(1, 100).to_string())),
        ]);
        Ok(self.get::<IdsBody>(&format!("/api/v1/ids{q}"))?.ids)
    }

    fn run(&mut self, tool_run_id: &str) -> StoreResult<Option<ToolRun>> {
        Ok(self.run_with_tail(tool_run_id, 0)?.map(|b| b.run))
    }

    fn runs(&mut self, filter: &RunFilter) -> StoreResult<Vec<ToolRun>> {
        let statuses: Vec<&str> = filter.statuses.iter().map(|s| s.as_str()).collect();
        let q = query(&[
            ("status", (!statuses.is_empty()).then(|| statuses.join(","))),
            ("tool", filter.tool.clone()),
            ("execution", filter.execution_id.clone()),
            ("since", filter.since.clone()),
            ("limit", limit(filter.limit)),
        ]);
        Ok(self.get::<RunsBody>(&format!("/api/v1/runs{q}"))?.runs)
    }

    /// The live runs with no exit code yet, newest first (as the local stores list them).
    fn supervised_runs(&mut self, limit: Option<usize>) -> StoreResult<Vec<ToolRun>> {
        let mut live = self.runs(&RunFilter {
            statuses: RunStatus::LIVE.to_vec(),
            ..RunFilter::default()
        })?;
        live.retain(|r| r.exit_code.is_none());
        live.sort_by(|a, b| b.tool_run_id.cmp(&a.tool_run_id));
        if let Some(n) = limit {
            live.truncate(n);
        }
        Ok(live)
    }

    fn export_runs_json(
        &mut self,
        filter: &RunFilter,
        out: &mut dyn Write,
    ) -> Result<usize, crate::export::ExportError> {
        let runs = self.runs(filter)?;
        out.write_all(b"[")?;
        for (i, run) in runs.iter().enumerate() {
            if i > 0 {
                out.write_all(b",\n")?;
            }
            let json = serde_json::to_string(run).unwrap_or_else(|_| "null".into());
            out.write_all(crate::export::escape_risky(&json).as_bytes())?;
        }
        out.write_all(b"]\n")?;
        out.flush()?;
        Ok(runs.len())
    }

    fn output_tail(&mut self, tool_run_id: &str, lines: usize) -> StoreResult<Option<String>> {
        Ok(Some(
            self.run_with_tail(tool_run_id, lines)?
                .map(|b| b.output_tail)
                .unwrap_or_default(),
        ))
    }

    fn approval(&mut self, approval_id: &str) -> StoreResult<Option<Approval>> {
        Ok(self
            .get_opt::<ApprovalView>(&format!("/api/v1/approvals/{}", encode(approval_id)))?
            .map(|v| v.approval))
    }

    fn approvals(&mut self, filter: &ApprovalFilter) -> StoreResult<Vec<Approval>> {
        // No status is every status here; the API's default is the pending ones.
        let statuses: Vec<&str> = filter.statuses.iter().map(|s| s.as_str()).collect();
        let status = if statuses.is_empty() {
            "all".to_owned()
        } else {
            statuses.join(",")
        };
        let q = query(&[
            ("status", Some(status)),
            ("tool", filter.tool.clone()),
            ("run", filter.tool_run_id.clone()),
            ("execution", filter.execution_id.clone()),
            ("since", filter.since.clone()),
            ("limit", limit(filter.limit)),
        ]);
        // The API takes no fingerprint: that filter is applied to what it returns.
        Ok(self
            .get::<ApprovalsBody>(&format!("/api/v1/approvals{q}"))?
            .approvals
            .into_iter()
            .map(|v| v.approval)
            .filter(|a| {
                filter.request_fingerprint.is_none()
                    || a.request_fingerprint == filter.request_fingerprint
            })
            .collect())
    }

    /// Decided by the token's name over `http` (the server's rule, not `who.by`); a 409 is
    /// the decision already made, a 422 the valid values.
    fn decide(
        &mut self,
        approval_id: &str,
        value: &str,
        who: &Decider<'_>,
    ) -> StoreResult<Done<DecideOutcome>> {
        let path = format!("/api/v1/approvals/{}/decide", encode(approval_id));
        let body = DecideRequest {
            value: value.to_owned(),
            comment: who.comment.map(str::to_owned),
            version: None,
        };
        let answer = self.client()?.post::<ApprovalView>(&path, &body);
        let outcome = match answer {
            // 202: counted, still pending (more reviewers, or a wait timer holds it).
            Ok(v) if v.approval.status == ApprovalStatus::Pending => {
                DecideOutcome::Reviewed(Box::new(v.approval))
            }
            // The same decision again: a no-op.
            Ok(v) if v.outcome.as_deref() == Some("unchanged") => {
                DecideOutcome::AlreadySame(Box::new(v.approval))
            }
            Ok(v) => DecideOutcome::Decided(Box::new(v.approval)),
            Err(CallError::Status { status: 404, .. }) => DecideOutcome::NotFound,
            // The store's refusal (not the token's role): `outcome: refused`.
            Err(CallError::Status { status: 403, body })
                if ErrorBody::read(&body)
                    .and_then(|e| e.field::<String>("outcome"))
                    .as_deref()
                    == Some("refused") =>
            {
                DecideOutcome::Refused(crate::sanitize::sanitize_line(&body_error(&body)))
            }
            Err(CallError::Status { status: 422, body }) => {
                let e = ErrorBody::read(&body);
                let valid = e
                    .as_ref()
                    .and_then(|e| e.field::<Vec<String>>("valid"))
                    .unwrap_or_default();
                let note = e
                    .and_then(|e| e.field::<String>("note"))
                    .map(|n| crate::sanitize::sanitize_line(&n))
                    .unwrap_or_default();
                DecideOutcome::Invalid(InvalidValue {
                    value: value.to_owned(),
                    valid,
                    note,
                })
            }
            Err(CallError::Status { status: 409, body }) => {
                let e = ErrorBody::read(&body);
                let shown = e.as_ref().and_then(|e| e.field::<ApprovalView>("approval"));
                let a = match shown {
                    Some(v) => v.approval,
                    None => self.approval(approval_id)?.ok_or_else(|| {
                        StoreError::Remote(format!("{}: {}", self.url, body_error(&body)))
                    })?,
                };
                let unchanged =
                    e.and_then(|e| e.field::<String>("outcome")).as_deref() == Some("unchanged");
                if unchanged && a.status != ApprovalStatus::Pending {
                    DecideOutcome::AlreadySame(Box::new(a))
                } else {
                    DecideOutcome::Conflict(Box::new(a))
                }
            }
            Err(e) => return Err(self.error(e)),
        };
        Ok(Done::quiet(outcome))
    }

    /// Cancelled by the token's name; the server signals the run's headless-run when it
    /// supervises it on the server's host (`Signalled`), else the run is only marked and
    /// its headless-run learns of it from the store. Nothing is signalled on this host.
    fn cancel(
        &mut self,
        tool_run_id: &str,
        reason: Option<&str>,
        _who: &Decider<'_>,
    ) -> StoreResult<Done<CancelOutcome>> {
        let path = format!("/api/v1/runs/{}/cancel", encode(tool_run_id));
        let body = CancelRequest {
            reason: reason.map(str::to_owned),
        };
        let outcome = match self.client()?.post::<CancelBody>(&path, &body) {
            Ok(c) if c.outcome == CancelKind::Signalled => CancelOutcome::Signalled {
                shim_pid: c
                    .shim_pid
                    .or(c.run.shim_pid)
                    .and_then(|p| i32::try_from(p).ok())
                    .unwrap_or(0),
                run: Box::new(c.run),
            },
            Ok(c) => CancelOutcome::Marked {
                run: Box::new(c.run),
            },
            Err(CallError::Status { status: 404, .. }) => CancelOutcome::NotFound,
            Err(CallError::Status { status: 409, body }) => {
                let shown = ErrorBody::read(&body).and_then(|e| e.field::<ToolRun>("run"));
                let run = match shown {
                    Some(r) => r,
                    None => self.run(tool_run_id)?.ok_or_else(|| {
                        StoreError::Remote(format!("{}: {}", self.url, body_error(&body)))
                    })?,
                };
                CancelOutcome::AlreadyFinal { run: Box::new(run) }
            }
            Err(e) => return Err(self.error(e)),
        };
        Ok(Done::quiet(outcome))
    }

    fn audit_of_run(&mut self, tool_run_id: &str) -> StoreResult<Vec<AuditRow>> {
        let path = format!("/api/v1/runs/{}/audit", encode(tool_run_id));
        Ok(self
            .get_opt::<AuditBody>(&path)?
            .map(|b| b.audit.into_iter().map(AuditRow::from).collect())
            .unwrap_or_default())
    }

    fn audit_of_approval(&mut self, approval_id: &str) -> StoreResult<Vec<AuditRow>> {
        let path = format!("/api/v1/approvals/{}/audit", encode(approval_id));
        Ok(self
            .get_opt::<AuditBody>(&path)?
            .map(|b| b.audit.into_iter().map(AuditRow::from).collect())
            .unwrap_or_default())
    }

    fn counts(&mut self, failed_since: &str, soon: Duration) -> StoreResult<Counts> {
        let q = query(&[
            ("since", Some(failed_since.to_owned())),
            ("soon", Some(soon.as_secs().to_string())),
        ]);
        Ok(self
            .get::<CountsBody>(&format!("/api/v1/counts{q}"))?
            .into())
    }

    fn live_counts(&mut self, soon: Duration) -> StoreResult<Counts> {
        let q = query(&[
            ("soon", Some(soon.as_secs().to_string())),
            ("live", Some("true".to_owned())),
        ]);
        Ok(self
            .get::<CountsBody>(&format!("/api/v1/counts{q}"))?
            .into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queries_leave_out_what_is_unset_and_encode_the_rest() {
        assert_eq!(query(&[("a", None)]), "");
        assert_eq!(
            query(&[
                ("status", Some("running,failed".into())),
                ("tool", None),
                ("since", Some("2026-01-01T00:00:00+00:00".into())),
            ]),
            "?status=running%2Cfailed&since=2026-01-01T00%3A00%3A00%2B00%3A00"
        );
        assert_eq!(limit(None).as_deref(), Some("10000"));
        assert_eq!(limit(Some(0)).as_deref(), Some("1"));
    }

    #[test]
    fn without_a_token_every_call_says_why() {
        // An http URL with no token anywhere.
        let mut op = HttpOperator {
            url: "http://127.0.0.1:9".into(),
            client: Err("no token for http://127.0.0.1:9".into()),
        };
        let e = op.connect().unwrap_err();
        assert!(e.to_string().contains("no token"), "{e}");
        // What only the store itself does is no call at all: refused before any, naming it.
        assert!(op.local().is_none());
        let paths = crate::paths::StatePaths {
            server: Some("http://127.0.0.1:9".into()),
            ..crate::paths::StatePaths::at("/nonexistent")
        };
        let Err(e) = super::super::local(&paths, "gc") else {
            panic!("a server's API used as the store itself")
        };
        assert!(
            e.to_string().contains("gc is not available with --server"),
            "{e}"
        );
    }

    #[test]
    fn an_unreachable_server_is_named() {
        let remote = Remote {
            url: "http://127.0.0.1:9".into(),
            token: "t".into(),
            ca: None,
        };
        let mut op = HttpOperator {
            url: remote.url.clone(),
            client: Client::new(&remote, Duration::from_secs(2), Duration::from_secs(1)),
        };
        let e = op.approvals(&ApprovalFilter::default()).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("cannot reach the server at http://127.0.0.1:9"),
            "{e}"
        );
    }
}
