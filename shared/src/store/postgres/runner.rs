//! The runner: a shim's session, the functions of `headless_runner` for its one run.

use super::*;

/// A shim's session: the functions of `headless_runner`, for its one run.
pub struct PgRunner {
    pub(super) pg: PgStore,
    /// The host's state dir, whose spool holds final rows earlier shims could not write.
    pub(super) paths: StatePaths,
    /// The spool was delivered on this session's first connection.
    delivered: bool,
    /// The run this session started (its capability is in [`CAPABILITIES`]).
    pub(super) run: Option<String>,
}

impl PgRunner {
    pub fn new(url: &str, paths: &StatePaths) -> Self {
        let mut pg = PgStore::new(url);
        if let Ok(t) = &mut pg.config {
            t.config.options(RUNNER_IDLE);
        }
        PgRunner {
            pg,
            paths: paths.clone(),
            delivered: false,
            run: None,
        }
    }

    /// Delivers the spooled final rows of earlier runs of this host (their shims could not
    /// reach the server before they exited); each file goes once its row has landed, or
    /// when the server says it is not this login's to deliver.
    fn deliver_spool(&mut self) -> StoreResult<usize> {
        let host = crate::rules::LocalHost::new();
        let mut n = 0;
        for (path, run) in crate::spool::spooled(&self.paths) {
            let fp = request_fingerprint(&run);
            // The spool is this host's: whether the run's shim still runs is known here.
            let gone = rules::shim_gone(&run, &host).is_some();
            match self.pg.tx(|tx| {
                Ok(tx
                    .query_one(
                        "SELECT hr.run_deliver($1::text::jsonb, $2, $3)",
                        &[&to_json(&run), &fp, &gone],
                    )?
                    .get::<_, Option<bool>>(0))
            }) {
                Ok(landed) => match landed {
                    // Its shim still writes the run: left for a later delivery.
                    None => {}
                    Some(landed) => {
                        n += usize::from(landed);
                        let _ = std::fs::remove_file(&path);
                    }
                },
                Err(StoreError::Denied(_)) => {
                    let _ = std::fs::remove_file(&path);
                }
                Err(e) => return Err(e),
            }
        }
        Ok(n)
    }

    /// The run this session speaks for, and its capability: the one it started, else (a
    /// wait-mode watcher's second session) the one run this process started.
    fn own(&self) -> Option<(String, String)> {
        let caps = CAPABILITIES.lock().ok()?;
        match &self.run {
            Some(run) => Some((run.clone(), caps.get(run)?.clone())),
            None if caps.len() == 1 => caps.iter().next().map(|(k, v)| (k.clone(), v.clone())),
            None => None,
        }
    }

    fn expire(&mut self) -> StoreResult<Vec<Approval>> {
        self.pg.docs("SELECT x::text FROM hr.expire_due() x", &[])
    }

    /// Moves the run to `waiting_approval` for `approval` (its log event in `fx`).
    fn wait_for(
        &mut self,
        who: &Asker,
        cap: &str,
        approval: &Approval,
        fx: &mut Effects,
    ) -> StoreResult<()> {
        let change = StatusChange::to(
            RunStatus::WaitingApproval,
            Some(format!("waiting for approval {}", approval.approval_id)),
        );
        let run = who.tool_run_id.as_str();
        let moved = self
            .pg
            .tx(|tx| status(tx, run, cap, &change, "not_final"))?;
        if let Some(m) = moved {
            fx.events.push(m.event());
            fx.status = Some(RunStatus::WaitingApproval);
        }
        Ok(())
    }
}

/// A new run capability: 256 random bits from the kernel, as hex.
pub(super) fn new_capability() -> String {
    crate::audit::hex(&random_key())
}

/// 256 random bits from the kernel.
pub(super) fn random_key() -> [u8; 32] {
    let mut bytes = [0u8; 32];
    let read = std::fs::File::open("/dev/urandom")
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut bytes));
    if read.is_err() {
        // SAFETY: getrandom writes at most the buffer's length into it.
        let n = unsafe { libc::getrandom(bytes.as_mut_ptr().cast(), bytes.len(), 0) };
        assert_eq!(
            n,
            bytes.len() as isize,
            "no randomness for a run capability"
        );
    }
    bytes
}

/// The request fingerprint of a run's command, as the shim computes it for its asker.
pub(super) fn request_fingerprint(run: &ToolRun) -> String {
    fingerprint::request(
        &run.tool_name,
        &run.argv_json,
        run.cwd.as_deref().unwrap_or(""),
    )
}

/// A status change the server made (`hr.moved`), for the log. (`Serialize`: what a
/// transaction hands out is [`super::Detached`].)
#[derive(Debug, serde::Deserialize, serde::Serialize)]
pub(super) struct Moved {
    tool_run_id: String,
    tool_name: Option<String>,
    execution_id: Option<String>,
    from: RunStatus,
    to: RunStatus,
    reason: Option<String>,
}

impl Moved {
    fn event(&self) -> LogEvent {
        LogEvent::about_run(
            EventBody::status_change(
                Some(self.from),
                &StatusChange::to(self.to, self.reason.clone()),
            ),
            self.tool_name.as_deref().unwrap_or(""),
            &self.tool_run_id,
            self.execution_id.as_deref(),
        )
    }
}

/// An approval as a runner function returns it, with what else it did.
#[derive(Debug, serde::Deserialize, serde::Serialize)]
pub(super) struct Touched {
    #[serde(flatten)]
    approval: Approval,
    /// The run it closed or cancelled on the way.
    #[serde(rename = "_closed", default)]
    closed: Option<Moved>,
    /// The run that asked it (runner reads), for the takeover rules.
    #[serde(rename = "_owner", default)]
    owner: Option<ToolRun>,
    /// Whether it is offered to the reading run (`hr.offered`: its own unused decision, or
    /// one the run it resumes holds for it).
    #[serde(rename = "_offered", default)]
    offered: bool,
}

/// A run's first batch as a shim sends it: its row alone, or its row and its pid.
fn start_and_pid(writes: &[RunWrite]) -> Option<(&ToolRun, Option<i32>)> {
    match writes {
        [RunWrite::Start(run)] => Some((run, None)),
        [RunWrite::Start(run), RunWrite::Pid(pid)] => Some((run, Some(*pid))),
        _ => None,
    }
}

/// A batch that only marks the run (heartbeats, output, the tool's last error), as one
/// mark: the latest of each field. `None` when it holds anything else.
fn only_touches(writes: &[RunWrite]) -> Option<crate::runs::Touch> {
    let mut merged = crate::runs::Touch::default();
    for w in writes {
        let RunWrite::Touch(t) = w else {
            return None;
        };
        let newer = |old: &mut Option<String>, new: &Option<String>| {
            if new.is_some() {
                old.clone_from(new);
            }
        };
        newer(&mut merged.last_output_at, &t.last_output_at);
        newer(&mut merged.last_heartbeat_at, &t.last_heartbeat_at);
        newer(
            &mut merged.supervisor_heartbeat_at,
            &t.supervisor_heartbeat_at,
        );
        newer(&mut merged.last_error_msg, &t.last_error_msg);
    }
    (!writes.is_empty()).then_some(merged)
}

/// The server's guard for a status change by the shim.
pub(super) fn guard_name(replace: Replace) -> &'static str {
    match replace {
        Replace::Live => "not_final",
        Replace::AnyButCancelled => "not_cancelled",
    }
}

/// What a batch learnt besides writing: approvals it abandoned, a cancellation it found.
#[derive(Default)]
pub(super) struct Learnt {
    abandoned: Vec<Approval>,
    cancelled: bool,
    /// A cancel nobody recorded, moved by this batch: its status event.
    moved: Vec<LogEvent>,
}

pub(super) fn write_one(
    tx: &mut postgres::Transaction<'_>,
    run_id: &str,
    cap: &mut Option<String>,
    w: &RunWrite,
    may_exist: bool,
    learnt: &mut Learnt,
) -> Result<(), postgres::Error> {
    let c = cap.clone().unwrap_or_default();
    let c = c.as_str();
    match w {
        RunWrite::Start(run) => {
            // Made by `record` before the first try (the server keeps only its hash).
            let mine = cap.clone().unwrap_or_else(new_capability);
            let row = tx.query_one(
                "SELECT hr.run_start($1::text::jsonb, $2, $3, $4)",
                &[&to_json(run), &request_fingerprint(run), &may_exist, &mine],
            )?;
            *cap = row.get(0);
        }
        RunWrite::Pid(pid) => {
            tx.execute(
                "SELECT hr.run_pid($1, $2, $3)",
                &[&run_id, &c, &i64::from(*pid)],
            )?;
        }
        RunWrite::Touch(t) => {
            let status: Option<String> = tx
                .query_one(
                    "SELECT hr.run_touch($1, $2, $3, $4, $5, $6)",
                    &[
                        &run_id,
                        &c,
                        &t.last_output_at,
                        &t.last_heartbeat_at,
                        &t.supervisor_heartbeat_at,
                        &t.last_error_msg,
                    ],
                )?
                .get(0);
            learnt.cancelled |= status.as_deref() == Some(RunStatus::Cancelled.as_str());
        }
        RunWrite::Status(change, replace) => {
            status(tx, run_id, c, change, guard_name(*replace))?;
        }
        RunWrite::Cancelled { exit_code, at } => {
            // The canceller's status stays; a signal nobody recorded is said so.
            let moved = status(
                tx,
                run_id,
                c,
                &StatusChange {
                    exit_code: Some(*exit_code),
                    at: Some(at.clone()),
                    ..StatusChange::to(
                        RunStatus::Cancelled,
                        Some("cancelled by a signal to headless-run".into()),
                    )
                },
                "not_final",
            )?;
            if let Some(m) = &moved {
                learnt.moved.push(m.event());
            }
            if moved.is_none() {
                tx.execute(
                    "SELECT hr.run_exit($1, $2, $3, $4)",
                    &[&run_id, &c, exit_code, at],
                )?;
            }
        }
        RunWrite::Consume(approval_id) => {
            tx.execute(
                "SELECT hr.approval_consume($1, $2, $3, NULL, false)",
                &[&run_id, &c, approval_id],
            )?;
        }
        RunWrite::Release(one) => {
            let why = match one {
                None => "the run stopped at a later prompt",
                Some(_) => "the prompt went away before the answer was typed",
            };
            tx.execute(
                "SELECT hr.approval_release($1, $2, $3, $4)",
                &[&run_id, &c, one, &why],
            )?;
        }
        RunWrite::Abandon(why) => {
            for row in tx.query(
                "SELECT x::text FROM hr.approval_abandon($1, $2, $3) x",
                &[&run_id, &c, why],
            )? {
                if let Ok(a) = serde_json::from_str(row.get::<_, &str>(0)) {
                    learnt.abandoned.push(a);
                }
            }
        }
        RunWrite::Withdraw { approval_id, why } => {
            for row in tx.query(
                "SELECT x::text FROM hr.approval_withdraw($1, $2, $3, $4) x",
                &[&run_id, &c, approval_id, why],
            )? {
                if let Ok(a) = serde_json::from_str(row.get::<_, &str>(0)) {
                    learnt.abandoned.push(a);
                }
            }
        }
        RunWrite::Environment(env) => {
            tx.execute(
                "SELECT hr.run_environment($1, $2, $3::text::jsonb)",
                &[&run_id, &c, &to_json(env)],
            )?;
        }
    }
    Ok(())
}

/// A status change of the shim's own run: what it did, when it did something.
pub(super) fn status(
    tx: &mut postgres::Transaction<'_>,
    run_id: &str,
    cap: &str,
    change: &StatusChange,
    guard: &str,
) -> Result<Option<Moved>, postgres::Error> {
    let row = tx.query_one(
        "SELECT hr.run_status($1, $2, $3, $4, $5, $6, $7, $8, $9)::text",
        &[
            &run_id,
            &cap,
            &change.status.as_str(),
            &change.reason,
            &change.exit_code,
            &change.finished,
            &change.error,
            &change.at,
            &guard,
        ],
    )?;
    Ok(row
        .get::<_, Option<&str>>(0)
        .and_then(|t| serde_json::from_str(t).ok()))
}

impl RunnerStore for PgRunner {
    fn connect(&mut self) -> StoreResult<()> {
        self.pg.client()?;
        if !std::mem::replace(&mut self.delivered, true) {
            self.deliver_spool()?;
        }
        Ok(())
    }

    fn record(
        &mut self,
        run_id: &str,
        writes: &[RunWrite],
        _actor: &str,
        row_may_exist: bool,
    ) -> StoreResult<Done<Recorded>> {
        let inserted = writes.iter().any(|w| matches!(w, RunWrite::Start(_)));
        // The run's capability is made once, before its first write is tried, and kept:
        // a retry (here or in a later batch) whose first commit was not acknowledged shows
        // the same one.
        let before = CAPABILITIES.lock().ok().and_then(|mut m| {
            if inserted && !m.contains_key(run_id) {
                let made = derived_capability(run_id).unwrap_or_else(new_capability);
                m.insert(run_id.to_owned(), made);
            }
            m.get(run_id)
                .cloned()
                .or_else(|| derived_capability(run_id))
        });
        // A batch of marks alone (a heartbeat, an output mark): one statement by itself.
        if let (Some(touch), Some(c)) = (only_touches(writes), before.as_deref())
            && !row_may_exist
        {
            use postgres::types::Type;
            let status: Option<String> = self.pg.once(
                "SELECT hr.run_touch($1, $2, $3, $4, $5, $6)",
                &[
                    (&run_id, Type::TEXT),
                    (&c, Type::TEXT),
                    (&touch.last_output_at, Type::TEXT),
                    (&touch.last_heartbeat_at, Type::TEXT),
                    (&touch.supervisor_heartbeat_at, Type::TEXT),
                    (&touch.last_error_msg, Type::TEXT),
                ],
                |row| row.get(0),
            )?;
            return Ok(Done::quiet(Recorded {
                inserted: false,
                cancelled: status.as_deref() == Some(RunStatus::Cancelled.as_str()),
            }));
        }
        // A run's first batch (its row, and its pid): one statement by itself, so the audit
        // chain's lock it takes is held for the function and its commit on the server, not
        // for a round trip through the pooler as well.
        if let (Some((run, pid)), Some(mine), false) =
            (start_and_pid(writes), before.as_deref(), row_may_exist)
        {
            use postgres::types::Type;
            let (doc, fp, pid) = (to_json(run), request_fingerprint(run), pid.map(i64::from));
            let got: Option<String> = self.pg.once(
                "WITH s AS (SELECT hr.run_start($1::text::jsonb, $2, false, $3) AS cap),
                      p AS (SELECT hr.run_pid($4, s.cap, $5) FROM s
                            WHERE s.cap IS NOT NULL AND $5::bigint IS NOT NULL)
                 SELECT (SELECT cap FROM s) WHERE (SELECT count(*) FROM p) >= 0",
                &[
                    (&doc, Type::TEXT),
                    (&fp, Type::TEXT),
                    (&mine, Type::TEXT),
                    (&run_id, Type::TEXT),
                    (&pid, Type::INT8),
                ],
                |row| row.get(0),
            )?;
            self.run = Some(run_id.to_owned());
            if let Ok(mut m) = CAPABILITIES.lock() {
                match got {
                    Some(cap) => m.insert(run_id.to_owned(), cap),
                    None => m.remove(run_id),
                };
            }
            return Ok(Done::quiet(Recorded {
                inserted: true,
                cancelled: false,
            }));
        }
        let mut cap = before.clone();
        let mut learnt = Learnt::default();
        self.pg.tx(|tx| {
            learnt = Learnt::default();
            cap = before.clone();
            for w in writes {
                write_one(tx, run_id, &mut cap, w, row_may_exist, &mut learnt)?;
            }
            Ok(())
        })?;
        if inserted {
            self.run = Some(run_id.to_owned());
            if let Ok(mut m) = CAPABILITIES.lock() {
                match cap {
                    Some(cap) => m.insert(run_id.to_owned(), cap),
                    // Another session holds that run: this one has no capability for it.
                    None => m.remove(run_id),
                };
            }
        }
        let events = learnt
            .abandoned
            .iter()
            .map(Approval::status_event)
            .chain(learnt.moved)
            .collect();
        Ok(Done::with_events(
            Recorded {
                inserted,
                cancelled: learnt.cancelled,
            },
            events,
        ))
    }

    /// Rows are kept for later by the shim's own spool, which the host's next runner
    /// session delivers ([`PgRunner::connect`]); nothing to keep here.
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
        let run = who.tool_run_id.as_str();
        let cap = capability(run);
        let mut fx = Effects::default();
        for a in self.expire()? {
            fx.events.push(a.status_event());
        }
        let seen: Vec<Touched> = self.pg.docs(
            "SELECT x::text FROM hr.runner_approvals($1, $2, $3) x",
            &[&run, &cap, &req.prompt_fingerprint],
        )?;
        // The facts (`answering::plan`): the decisions offered to this run (`hr.offered`:
        // its own, or those the parked run it resumes holds for it), in the order they
        // were asked; the policies; a pending approval of another run, with that run.
        let mut offered: Vec<Approval> = seen
            .iter()
            .filter(|t| t.offered)
            .map(|t| t.approval.clone())
            .collect();
        offered.sort_by(|x, y| x.approval_id.cmp(&y.approval_id));
        let mut policies = req.policies.clone();
        if let Some(p) = self.pg.doc::<RememberedPolicy>(
            "SELECT hr.runner_remembered($1, $2, $3)::text",
            &[&run, &cap, &req.prompt_fingerprint],
        )? {
            policies.push((p.name, p.value));
        }
        let pending = seen
            .iter()
            .find(|t| t.approval.status == ApprovalStatus::Pending && t.approval.tool_run_id != run)
            .map(|t| (t.approval.clone(), t.owner.clone()));
        let plan = answering::plan(
            answering::Facts {
                prompt: &req.prompt,
                tool_digest: who.tool_digest.as_deref(),
                offered,
                policies,
                pending,
                host,
            },
            approval_for(who, req),
        );
        // 1. A decision offered to this run; the server checks it again as it uses it.
        for a in &plan.answers {
            if let Some(used) = self.pg.doc::<Touched>(
                "SELECT hr.approval_consume($1, $2, $3, NULL, false)::text",
                &[&run, &cap, &a.approval_id],
            )? {
                fx.events.extend(used.closed.as_ref().map(Moved::event));
                let value = used.approval.chosen_value.clone().unwrap_or_default();
                return Ok(Done {
                    value: PromptResolution::decided(used.approval, value),
                    effects: fx,
                });
            }
        }
        // 2. A policy.
        fx.warnings.extend(plan.warnings);
        if let Some(by) = plan.policy {
            let recorded: Approval = self
                .pg
                .doc(
                    "SELECT hr.approval_by_policy($1, $2, $3::text::jsonb, $4, $5, $6)::text",
                    &[
                        &run,
                        &cap,
                        &to_json(&by.approval),
                        &by.name,
                        &by.decision.status.as_str(),
                        &by.decision.chosen_value,
                    ],
                )?
                .ok_or_else(|| {
                    StoreError::Server("the policy's approval was not recorded".into())
                })?;
            fx.events.push(recorded.needed_event());
            fx.events.push(recorded.status_event());
            let value = recorded.chosen_value.clone().unwrap_or_default();
            return Ok(Done {
                value: PromptResolution::decided(recorded, value),
                effects: fx,
            });
        }
        // 3. A takeover (the server checks the run no longer holds it, and the screen);
        // 4. else a new question. Each with the run's move to `waiting_approval`, in one
        //    transaction: no approval is left without a run waiting for it.
        let (old, keeps, fresh) = match plan.ask {
            Ask::TakeOver { old, fresh } => (Some(old), true, fresh),
            Ask::Supersede { old, fresh } => (Some(old), false, fresh),
            Ask::New { fresh } => (None, false, fresh),
        };
        let fresh_json = to_json(&fresh);
        let fresh_id = fresh.approval_id.clone();
        let mut superseded: Option<Approval> = None;
        let (touched, taken_over, moved) = self
            .pg
            .tx(|tx| {
                let mut taken = None;
                let mut replaced = None;
                if let Some(o) = &old {
                    let (sql, args): (&str, Vec<&(dyn ToSql + Sync)>) = if keeps {
                        (
                            "SELECT hr.approval_take_over($1, $2, $3, $4::text::jsonb, $5, $6)::text",
                            vec![&run, &cap, &o.approval_id, &fresh_json, &o.tool_run_id, &true],
                        )
                    } else {
                        (
                            "SELECT hr.approval_supersede($1, $2, $3, $4::text::jsonb, $5, $6, $7)::text",
                            vec![
                                &run,
                                &cap,
                                &o.approval_id,
                                &fresh_json,
                                &fresh_id,
                                &o.tool_run_id,
                                &true,
                            ],
                        )
                    };
                    let row = tx.query_one(sql, &args)?;
                    let doc = row.get::<_, Option<&str>>(0);
                    if !keeps {
                        replaced = doc
                            .and_then(|t| serde_json::from_str::<serde_json::Value>(t).ok())
                            .and_then(|v| serde_json::from_value::<Approval>(v["_superseded"].clone()).ok());
                    }
                    taken = doc.and_then(|t| serde_json::from_str::<Touched>(t).ok());
                }
                let taken_over = taken.is_some() && keeps;
                let touched = match taken {
                    Some(t) => t,
                    None => {
                        let row = tx.query_one(
                            "SELECT hr.approval_ask($1, $2, $3::text::jsonb, $4)::text",
                            &[&run, &cap, &fresh_json, &fresh_id],
                        )?;
                        match row
                            .get::<_, Option<&str>>(0)
                            .and_then(|t| serde_json::from_str::<Touched>(t).ok())
                        {
                            Some(t) => t,
                            None => return Ok(None),
                        }
                    }
                };
                let change = StatusChange::to(
                    RunStatus::WaitingApproval,
                    Some(format!(
                        "waiting for approval {}",
                        touched.approval.approval_id
                    )),
                );
                let moved = status(tx, run, &cap, &change, "not_final")?;
                superseded = replaced;
                Ok(Some((touched, taken_over, moved)))
            })?
            .ok_or_else(|| StoreError::Server("the approval was not recorded".into()))?;
        if !taken_over {
            fx.events.push(touched.approval.needed_event());
        }
        if let Some(old) = &superseded {
            fx.events.push(old.status_event());
        }
        if let Some(closed) = &touched.closed {
            fx.events.push(closed.event());
        }
        if let Some(m) = moved {
            fx.events.push(m.event());
            fx.status = Some(RunStatus::WaitingApproval);
        }
        Ok(Done {
            value: PromptResolution::Pending {
                approval: Box::new(touched.approval),
                taken_over,
            },
            effects: fx,
        })
    }

    fn cooperative(
        &mut self,
        who: &Asker,
        req: &CooperativeRequest,
        ttl: Option<Duration>,
        on_expire: OnExpire,
    ) -> StoreResult<Done<Cooperative>> {
        let run = who.tool_run_id.as_str();
        let cap = capability(run);
        let mut fx = Effects::default();
        let (fresh, prompt_fp) =
            crate::store::asking::cooperative_approval(who, req, ttl, on_expire);
        let seen: Vec<Touched> = self.pg.docs(
            "SELECT x::text FROM hr.runner_approvals($1, $2, $3) x",
            &[&run, &cap, &prompt_fp],
        )?;
        if seen
            .iter()
            .any(|t| t.approval.consumed_by.as_deref() == Some(run))
        {
            return Ok(Done::quiet(Cooperative::AlreadyDecided));
        }
        // The tool may name its approval (an id of the usual shape, not taken): the server
        // falls back to a fresh id when it is taken.
        let mut wanted = fresh.clone();
        if let Some(w) = req
            .approval_id
            .as_deref()
            .map(str::to_ascii_uppercase)
            .filter(|w| crate::id::has_shape(w, crate::id::APPROVAL_PREFIX))
        {
            wanted.approval_id = w;
        }
        let a: Approval = self
            .pg
            .doc(
                "SELECT hr.approval_ask($1, $2, $3::text::jsonb, $4)::text",
                &[&run, &cap, &to_json(&wanted), &fresh.approval_id],
            )?
            .ok_or_else(|| StoreError::Server("the approval was not recorded".into()))?;
        fx.events.push(a.needed_event());
        self.wait_for(who, &cap, &a, &mut fx)?;
        Ok(Done {
            value: Cooperative::Pending(Box::new(a)),
            effects: fx,
        })
    }

    fn check_auto_approval(
        &mut self,
        who: &Asker,
        approval_id: &str,
        value: &str,
        resumed_from: Option<&str>,
    ) -> StoreResult<Done<Result<Approval, String>>> {
        let run = who.tool_run_id.as_str();
        let cap = capability(run);
        let a: Option<Approval> = self.pg.doc(
            "SELECT hr.runner_approval($1, $2, $3)::text",
            &[&run, &cap, &approval_id],
        )?;
        let verdict = crate::store::asking::auto_approval_verdict(
            a.as_ref(),
            who,
            approval_id,
            value,
            resumed_from,
        );
        if let Err(why) = verdict {
            return Ok(Done::quiet(Err(why)));
        }
        let Some(used) = self.pg.doc::<Touched>(
            "SELECT hr.approval_consume($1, $2, $3, NULL, true)::text",
            &[&run, &cap, &approval_id],
        )?
        else {
            return Ok(Done::quiet(Err(format!(
                "approval {approval_id} was already used"
            ))));
        };
        let mut fx = Effects::default();
        fx.events.extend(used.closed.as_ref().map(Moved::event));
        Ok(Done {
            value: Ok(a.unwrap_or(used.approval)),
            effects: fx,
        })
    }

    fn approval(&mut self, approval_id: &str) -> StoreResult<Option<Approval>> {
        let Some((run, cap)) = self.own() else {
            return Ok(None);
        };
        self.pg.doc(
            "SELECT hr.runner_approval($1, $2, $3)::text",
            &[&run, &cap, &approval_id],
        )
    }

    fn expire_due(&mut self) -> StoreResult<Done<Vec<Approval>>> {
        let expired = self.expire()?;
        let events = expired.iter().map(Approval::status_event).collect();
        Ok(Done::with_events(expired, events))
    }

    fn change_mark(&mut self) -> StoreResult<u64> {
        self.pg.change_mark()
    }
}
