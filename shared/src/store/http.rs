//! The runner API: a shim whose store is a `monitor serve` server (`HEADLESS_RUN_SERVER`
//! with a *runner* token), for CI runners that reach HTTPS but not the database.
//!
//! Each [`RunnerStore`] call is one `POST`/`GET` under `/api/v1/runner/`, whose body is the
//! call's arguments and whose answer is its [`Done`] outcome, as the server's own store
//! session returned it. The server checks what a runner may do: only runs its token started,
//! approvals of those runs, expiry always a rejection; a runner token never decides. Facts
//! only this host knows (is pid P with start time S still running?) are sent with the
//! prompt ([`Fact`]), for the runs of this token on this host the server lists first. The
//! bodies are [`crate::wire`]'s, which the server sends and reads too.
//!
//! The server down: calls fail within the client's timeout, the shim carries on as with any
//! store it cannot reach, and the final rows it could not write wait in the host's spool,
//! delivered by the host's next shim that reaches the server ([`DeliverCall`]).

use super::{
    Asker, Cooperative, Done, PromptRequest, PromptResolution, Recorded, RunWrite, RunnerStore,
    StoreResult,
};
use crate::approvals::Approval;
use crate::config::OnExpire;
use crate::db::StoreError;
use crate::event::CooperativeRequest;
use crate::paths::StatePaths;
use crate::remote::{CallError, Client, Remote, encode};
use crate::rules::{HostFacts, Liveness};
use crate::runs::ToolRun;
use crate::wire::{
    AutoApprovalCall, CooperativeCall, DeliverCall, ExpireCall, Fact, LiveRun, Mark, PromptCall,
    RecordCall,
};
use serde::Serialize;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

/// How long one call may take before the server counts as unreachable.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(5);
/// How long connecting may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// How long the server holds a long poll of the change mark open.
pub const LONG_POLL: Duration = Duration::from_secs(20);

/// A runner's first row as the server keeps it: `metadata.runner` names the token (no
/// worker resumes such a run: `rules::not_ours`), and none of the metadata that would hand
/// the run to a worker (`uid`, `pool`) or to a pipeline is kept.
pub fn mark_as_runners(token: &str, row: &mut ToolRun) {
    let mut meta = match row.metadata.take() {
        Some(serde_json::Value::Object(m)) => m,
        _ => serde_json::Map::new(),
    };
    for k in ["uid", "pool", "pipeline", "runner"] {
        meta.remove(k);
    }
    meta.insert("runner".into(), serde_json::Value::String(token.to_owned()));
    row.metadata = Some(serde_json::Value::Object(meta));
}

pub use crate::fingerprint::runner as runner_fingerprint;

/// The facts of a remote host, as it sent them: its name, and the liveness of the
/// processes it was asked about. A process it said nothing about counts as running (no
/// takeover from a run that may still be supervised).
#[derive(Debug, Clone)]
pub struct ReportedHost {
    host: String,
    facts: Vec<Fact>,
}

impl ReportedHost {
    pub fn new(host: String, facts: Vec<Fact>) -> Self {
        ReportedHost { host, facts }
    }
}

impl HostFacts for ReportedHost {
    fn host(&self) -> &str {
        &self.host
    }

    fn process(&self, pid: i32, start_time: Option<u64>) -> Liveness {
        self.facts
            .iter()
            .find(|f| f.pid == pid && (f.start_time == start_time || start_time.is_none()))
            .map(|f| f.liveness)
            .unwrap_or(Liveness::Same)
    }
}

/// A call's failure as a store error: unreachable or failing is the server's, a refusal is
/// `Denied` (the shim says so and carries on as for any store it may not write).
fn store_error(e: CallError) -> StoreError {
    match e {
        CallError::Status {
            status: 401 | 403, ..
        } => StoreError::Denied(e.message()),
        e => StoreError::Server(e.message()),
    }
}

/// A shim's session on a server.
pub struct HttpRunner {
    server: String,
    client: Option<Client>,
    /// The host's state dir, whose spool holds final rows earlier shims could not deliver.
    paths: StatePaths,
    delivered: bool,
}

impl HttpRunner {
    pub fn new(server: &str, paths: &StatePaths) -> Self {
        HttpRunner {
            server: server.to_owned(),
            client: None,
            paths: paths.clone(),
            delivered: false,
        }
    }

    /// A session on `remote` as given (not from the environment).
    pub fn to(remote: &Remote, paths: &StatePaths) -> StoreResult<Self> {
        Ok(HttpRunner {
            server: remote.url.clone(),
            client: Some(
                Client::new(remote, CALL_TIMEOUT, CONNECT_TIMEOUT).map_err(StoreError::Server)?,
            ),
            paths: paths.clone(),
            delivered: false,
        })
    }

    fn client(&mut self) -> StoreResult<&Client> {
        if self.client.is_none() {
            let remote = Remote::resolve(&self.server, &crate::paths::real_env)
                .map_err(StoreError::Server)?;
            self.client = Some(
                Client::new(&remote, CALL_TIMEOUT, CONNECT_TIMEOUT).map_err(StoreError::Server)?,
            );
        }
        Ok(self.client.as_ref().expect("just made"))
    }

    fn post<T: serde::de::DeserializeOwned>(
        &mut self,
        path: &str,
        body: &impl Serialize,
    ) -> StoreResult<T> {
        self.client()?
            .post(&format!("/api/v1/runner/{path}"), body)
            .map_err(store_error)
    }

    fn get<T: serde::de::DeserializeOwned>(&mut self, path: &str) -> StoreResult<T> {
        self.client()?.get(path).map_err(store_error)
    }

    /// Delivers the spooled final rows of earlier runs of this host: each file goes once
    /// its row has landed, or when the server says the run is not this token's (403). A row
    /// the server will not take for another reason stays for a later look and the others
    /// are still tried; a server that fails or cannot be reached ends the round (the next
    /// shim tries again).
    fn deliver_spool(&mut self) -> usize {
        let host = crate::rules::LocalHost::new();
        let mut n = 0;
        let Ok(client) = self.client().cloned() else {
            return 0;
        };
        for (path, run) in crate::spool::spooled(&self.paths) {
            let gone = crate::rules::shim_gone(&run, &host).is_some();
            if !gone {
                continue;
            }
            match client
                .post::<serde_json::Value>("/api/v1/runner/deliver", &DeliverCall { run, gone })
            {
                Ok(_) => {
                    n += 1;
                    let _ = std::fs::remove_file(&path);
                }
                Err(CallError::Status { status: 403, .. }) => {
                    let _ = std::fs::remove_file(&path);
                }
                Err(CallError::Status { status, .. }) if (400..500).contains(&status) => {}
                Err(_) => break,
            }
        }
        n
    }
}

impl RunnerStore for HttpRunner {
    fn connect(&mut self) -> StoreResult<()> {
        self.get::<Mark>("/api/v1/mark")?;
        if !std::mem::replace(&mut self.delivered, true) {
            self.deliver_spool();
        }
        Ok(())
    }

    fn record(
        &mut self,
        run_id: &str,
        writes: &[RunWrite],
        actor: &str,
        row_may_exist: bool,
    ) -> StoreResult<Done<Recorded>> {
        self.post(
            "record",
            &RecordCall {
                run_id: run_id.to_owned(),
                writes: writes.to_vec(),
                actor: actor.to_owned(),
                row_may_exist,
            },
        )
    }

    /// Rows are kept for later by the shim's own spool, which the host's next runner
    /// session delivers ([`HttpRunner::connect`]); nothing to keep here.
    fn keep_for_later(&mut self, _run: &ToolRun) -> bool {
        false
    }

    fn kept_row_landed(&mut self, run_id: &str) {
        crate::spool::discard(&self.paths, run_id);
    }

    fn replaced(&mut self) -> bool {
        false
    }

    fn resolve_prompt(
        &mut self,
        who: &Asker,
        req: &PromptRequest,
        host: &dyn HostFacts,
    ) -> StoreResult<Done<PromptResolution>> {
        // Only the runs that asked this command's pending approvals: the ones a takeover
        // looks at.
        let live: Vec<LiveRun> = self.get(&format!(
            "/api/v1/runner/live?host={}&fingerprint={}",
            encode(host.host()),
            encode(&who.request_fingerprint)
        ))?;
        let facts = live
            .iter()
            .filter_map(|r| {
                let pid = i32::try_from(r.shim_pid?).ok()?;
                let start_time = r.shim_start_time.map(|s| s as u64);
                Some(Fact {
                    pid,
                    start_time,
                    liveness: host.process(pid, start_time),
                })
            })
            .collect();
        self.post(
            "prompt",
            &PromptCall {
                who: who.clone(),
                req: req.clone(),
                host: host.host().to_owned(),
                facts,
            },
        )
    }

    fn cooperative(
        &mut self,
        who: &Asker,
        req: &CooperativeRequest,
        ttl: Option<Duration>,
        on_expire: OnExpire,
    ) -> StoreResult<Done<Cooperative>> {
        self.post(
            "cooperative",
            &CooperativeCall {
                who: who.clone(),
                req: req.clone(),
                ttl,
                on_expire,
            },
        )
    }

    fn check_auto_approval(
        &mut self,
        who: &Asker,
        approval_id: &str,
        value: &str,
        resumed_from: Option<&str>,
    ) -> StoreResult<Done<Result<Approval, String>>> {
        self.post(
            "auto-approval",
            &AutoApprovalCall {
                who: who.clone(),
                approval_id: approval_id.to_owned(),
                value: value.to_owned(),
                resumed_from: resumed_from.map(str::to_owned),
            },
        )
    }

    fn approval(&mut self, approval_id: &str) -> StoreResult<Option<Approval>> {
        self.get(&format!("/api/v1/runner/approvals/{}", encode(approval_id)))
    }

    fn expire_due(&mut self) -> StoreResult<Done<Vec<Approval>>> {
        self.post("expire", &ExpireCall {})
    }

    /// The mark the doorbell's long poll last saw while it is polling (a waiting shim looks
    /// at the mark often: no request each time); else one request.
    fn change_mark(&mut self) -> StoreResult<u64> {
        if BELL_POLLING.load(Ordering::Acquire) {
            return Ok(BELL_MARK.load(Ordering::Acquire));
        }
        Ok(self.get::<Mark>("/api/v1/mark")?.mark)
    }
}

/// The server's change mark as this process's doorbell last saw it, and whether its long poll
/// is answering (then the mark is never older than the poll: a change returns it at once).
static BELL_MARK: AtomicU64 = AtomicU64::new(0);
static BELL_POLLING: AtomicBool = AtomicBool::new(false);

/// A doorbell for a server: a thread long-polls its change mark and rings on every change
/// (and after an error, once a second, so that the waiter looks on its own).
pub fn bell(server: &str) -> Option<super::doorbell::Doorbell> {
    let remote = Remote::resolve(server, &crate::paths::real_env).ok()?;
    let client = Client::new(&remote, LONG_POLL + CALL_TIMEOUT, CONNECT_TIMEOUT).ok()?;
    super::doorbell::fed_by("http-bell", move |bell| {
        let mut last: Option<u64> = None;
        loop {
            let path = match last {
                Some(m) => format!("/api/v1/mark?after={m}&wait={}", LONG_POLL.as_secs()),
                None => "/api/v1/mark".to_owned(),
            };
            match client.get::<Mark>(&path) {
                Ok(Mark { mark }) => {
                    // Kept before the ring: whoever the ring wakes reads the new mark.
                    BELL_MARK.store(mark, Ordering::Release);
                    BELL_POLLING.store(true, Ordering::Release);
                    if last.is_some_and(|l| l != mark) && !super::doorbell::ring(bell) {
                        BELL_POLLING.store(false, Ordering::Release);
                        return;
                    }
                    last = Some(mark);
                }
                Err(_) => {
                    BELL_POLLING.store(false, Ordering::Release);
                    if !super::doorbell::ring(bell) {
                        return;
                    }
                    std::thread::sleep(Duration::from_secs(1));
                }
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reported_host_knows_only_what_it_was_told() {
        let host = ReportedHost::new(
            "ci-7".into(),
            vec![
                Fact {
                    pid: 10,
                    start_time: Some(5),
                    liveness: Liveness::Gone,
                },
                Fact {
                    pid: 11,
                    start_time: None,
                    liveness: Liveness::Reused,
                },
            ],
        );
        assert_eq!(host.host(), "ci-7");
        assert_eq!(host.process(10, Some(5)), Liveness::Gone);
        assert_eq!(host.process(10, None), Liveness::Gone);
        // Another start time is another process: nothing was said about it.
        assert_eq!(host.process(10, Some(6)), Liveness::Same);
        assert_eq!(host.process(11, None), Liveness::Reused);
        assert_eq!(host.process(12, None), Liveness::Same);
    }

    #[test]
    fn refusals_are_denied_and_the_rest_is_the_servers() {
        let denied = store_error(CallError::Status {
            status: 403,
            body: serde_json::json!({"error": "a viewer token may not do this"}),
        });
        assert!(matches!(&denied, StoreError::Denied(m) if m.contains("viewer")));
        let down = store_error(CallError::Unreachable("connection refused".into()));
        assert!(matches!(&down, StoreError::Server(m) if m.contains("refused")));
    }
}
