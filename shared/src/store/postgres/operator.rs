//! The operator (and the viewer, who may only read; and a host's worker with its runner
//! login).

use super::*;

/// `monitor`'s session: reads the tables, writes through the operator's functions. With a
/// runner login (the host's `monitor worker`), it sees and resumes that login's runs only,
/// through the worker's functions.
pub struct PgOperator {
    pg: PgStore,
    /// Whether the login reads the tables (operator, viewer); learnt on first use.
    reads_tables: Option<bool>,
}

impl PgOperator {
    pub fn new(url: &str) -> Self {
        PgOperator {
            pg: PgStore::new(url),
            reads_tables: None,
        }
    }

    /// Whether this login reads the tables, or is a runner's (a worker's) with functions only.
    fn reads_tables(&mut self) -> StoreResult<bool> {
        if let Some(r) = self.reads_tables {
            return Ok(r);
        }
        let r: bool = self.pg.tx(|tx| {
            Ok(tx
                .query_one("SELECT has_table_privilege('hr.tool_runs', 'SELECT')", &[])?
                .get(0))
        })?;
        self.reads_tables = Some(r);
        Ok(r)
    }

    /// A worker's read of its login's runs (`hr.worker_runs`).
    fn worker_runs(&mut self, kind: &str, arg: Option<&str>) -> StoreResult<Vec<ToolRun>> {
        self.pg.docs(
            "SELECT x::text FROM hr.worker_runs($1, $2) x",
            &[&kind, &arg],
        )
    }

    fn expire(&mut self) -> StoreResult<Done<Vec<Approval>>> {
        let expired: Vec<Approval> = self.pg.docs("SELECT x::text FROM hr.expire_due() x", &[])?;
        let events = expired.iter().map(Approval::status_event).collect();
        Ok(Done::with_events(expired, events))
    }

    /// Audit rows matching `cond`, oldest first (at most `limit`).
    fn audit_rows(
        &mut self,
        cond: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> StoreResult<Vec<AuditRow>> {
        self.audit_rows_limited(cond, params, None)
    }

    fn audit_rows_limited(
        &mut self,
        cond: &str,
        params: &[&(dyn ToSql + Sync)],
        at_most: Option<usize>,
    ) -> StoreResult<Vec<AuditRow>> {
        Ok(self
            .chained_audit_rows(cond, params, at_most)?
            .into_iter()
            .map(|(_, row)| row)
            .collect())
    }

    /// Audit rows in order, each with the chain it belongs to (its login's; '' for the rows
    /// written before schema v8, one chain of their own).
    fn chained_audit_rows(
        &mut self,
        cond: &str,
        params: &[&(dyn ToSql + Sync)],
        at_most: Option<usize>,
    ) -> StoreResult<Vec<(String, AuditRow)>> {
        self.pg.tx(|tx| {
            let rows = tx.query(
                &format!(
                    "SELECT id, at, event, tool_run_id, approval_id, actor, data, prev_hash, hash, chain
                     FROM hr.events WHERE {cond} ORDER BY id{}",
                    limit(at_most)
                ),
                params,
            )?;
            Ok(rows
            .iter()
            .map(|r| {
                (
                    r.get(9),
                    AuditRow {
                        id: r.get(0),
                        at: r.get(1),
                        event: r.get(2),
                        tool_run_id: r.get(3),
                        approval_id: r.get(4),
                        actor: r.get(5),
                        data: r.get(6),
                        prev_hash: r.get(7),
                        hash: r.get(8),
                    },
                )
            })
            .collect())
        })
    }

    /// One boolean from an operator function.
    fn yes(&mut self, sql: &str, params: &[&(dyn ToSql + Sync)]) -> StoreResult<bool> {
        self.pg.tx(|tx| Ok(tx.query_one(sql, params)?.get(0)))
    }
}

pub(super) const RUN_DOC: &str = "hr.run_doc(r)::text";

/// A `WHERE` clause with numbered parameters, built from optional conditions.
#[derive(Default)]
pub(super) struct Where {
    parts: Vec<String>,
    args: Vec<Box<dyn ToSql + Sync>>,
}

impl Where {
    fn push(&mut self, cond: impl FnOnce(usize) -> String, arg: Box<dyn ToSql + Sync>) {
        self.args.push(arg);
        self.parts.push(cond(self.args.len()));
    }
    fn any_of(&mut self, col: &str, values: Vec<String>) {
        if !values.is_empty() {
            self.push(|n| format!("{col} = ANY(${n})"), Box::new(values));
        }
    }
    fn equals(&mut self, col: &str, v: Option<&String>) {
        if let Some(v) = v {
            self.push(|n| format!("{col} = ${n}"), Box::new(v.clone()));
        }
    }
    fn at_least(&mut self, col: &str, v: Option<&String>) {
        if let Some(v) = v {
            self.push(|n| format!("{col} >= ${n}"), Box::new(v.clone()));
        }
    }
    fn clause(&self) -> String {
        if self.parts.is_empty() {
            String::new()
        } else {
            format!(" WHERE {}", self.parts.join(" AND "))
        }
    }
    fn params(&self) -> Vec<&(dyn ToSql + Sync)> {
        self.args
            .iter()
            .map(|a| a.as_ref() as &(dyn ToSql + Sync))
            .collect()
    }
}

pub(super) fn limit(n: Option<usize>) -> String {
    n.map(|n| format!(" LIMIT {n}")).unwrap_or_default()
}

pub(super) fn from_value<T: serde::de::DeserializeOwned>(v: &serde_json::Value) -> StoreResult<T> {
    serde_json::from_value(v.clone())
        .map_err(|e| StoreError::Server(format!("unreadable row: {e}")))
}

impl OperatorStore for PgOperator {
    fn local(&mut self) -> Option<&mut dyn AdminStore> {
        Some(self)
    }

    fn connect(&mut self) -> StoreResult<()> {
        self.pg.client().map(|_| ())
    }

    fn change_mark(&mut self) -> StoreResult<u64> {
        self.pg.change_mark()
    }

    fn ids_starting_with(&mut self, prefix: &str, limit: usize) -> StoreResult<Vec<String>> {
        let (table, column) = if prefix.starts_with(crate::id::APPROVAL_PREFIX) {
            ("hr.approvals", "approval_id")
        } else {
            ("hr.tool_runs", "tool_run_id")
        };
        let end = format!("{prefix}\u{ffff}");
        let n = limit as i64;
        self.pg.tx(|tx| {
            let rows = tx.query(
                &format!(
                    "SELECT {column} FROM {table} WHERE {column} >= $1 AND {column} < $2
                     ORDER BY {column} LIMIT $3"
                ),
                &[&prefix, &end, &n],
            )?;
            Ok(rows.iter().map(|r| r.get(0)).collect())
        })
    }

    fn run(&mut self, tool_run_id: &str) -> StoreResult<Option<ToolRun>> {
        if !self.reads_tables()? {
            return Ok(self.worker_runs("one", Some(tool_run_id))?.pop());
        }
        self.pg.doc(
            &format!("SELECT {RUN_DOC} FROM hr.tool_runs r WHERE tool_run_id = $1"),
            &[&tool_run_id],
        )
    }

    fn runs(&mut self, filter: &RunFilter) -> StoreResult<Vec<ToolRun>> {
        let mut w = Where::default();
        w.any_of(
            "status",
            filter
                .statuses
                .iter()
                .map(|s| s.as_str().to_owned())
                .collect(),
        );
        w.equals("tool_name", filter.tool.as_ref());
        w.equals("execution_id", filter.execution_id.as_ref());
        w.at_least("started_at", filter.since.as_ref());
        let sql = format!(
            "SELECT {RUN_DOC} FROM hr.tool_runs r{} ORDER BY tool_run_id DESC{}",
            w.clause(),
            limit(filter.limit)
        );
        self.pg.docs(&sql, &w.params())
    }

    fn supervised_runs(&mut self, limit_to: Option<usize>) -> StoreResult<Vec<ToolRun>> {
        if !self.reads_tables()? {
            let mut runs = self.worker_runs("supervised", None)?;
            runs.truncate(limit_to.unwrap_or(usize::MAX));
            return Ok(runs);
        }
        let live: Vec<String> = RunStatus::LIVE
            .iter()
            .map(|s| s.as_str().to_owned())
            .collect();
        self.pg.docs(
            &format!(
                "SELECT {RUN_DOC} FROM hr.tool_runs r WHERE status = ANY($1) AND exit_code IS NULL
                 ORDER BY tool_run_id DESC{}",
                limit(limit_to)
            ),
            &[&live],
        )
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
            out.write_all(crate::export::escape_risky(&to_json(run)).as_bytes())?;
        }
        out.write_all(b"]\n")?;
        out.flush()?;
        Ok(runs.len())
    }

    fn approval(&mut self, approval_id: &str) -> StoreResult<Option<Approval>> {
        if !self.reads_tables()? {
            return self.pg.doc(
                "SELECT x::text FROM hr.worker_approvals(NULL, $1) x",
                &[&approval_id],
            );
        }
        self.pg.doc(
            "SELECT to_jsonb(a)::text FROM hr.approvals a WHERE approval_id = $1",
            &[&approval_id],
        )
    }

    fn approvals(&mut self, filter: &ApprovalFilter) -> StoreResult<Vec<Approval>> {
        if !self.reads_tables()? {
            // A worker asks for one run's approvals.
            let run = filter.tool_run_id.as_deref();
            let all: Vec<Approval> = self.pg.docs(
                "SELECT x::text FROM hr.worker_approvals($1, NULL) x",
                &[&run],
            )?;
            return Ok(all
                .into_iter()
                .filter(|a| filter.statuses.is_empty() || filter.statuses.contains(&a.status))
                .take(filter.limit.unwrap_or(usize::MAX))
                .collect());
        }
        let mut w = Where::default();
        w.any_of(
            "status",
            filter
                .statuses
                .iter()
                .map(|s| s.as_str().to_owned())
                .collect(),
        );
        w.equals("tool_name", filter.tool.as_ref());
        w.equals("tool_run_id", filter.tool_run_id.as_ref());
        w.equals("execution_id", filter.execution_id.as_ref());
        w.equals("request_fingerprint", filter.request_fingerprint.as_ref());
        w.at_least("created_at", filter.since.as_ref());
        let sql = format!(
            "SELECT to_jsonb(a)::text FROM hr.approvals a{} ORDER BY approval_id {}{}",
            w.clause(),
            filter.order(),
            limit(filter.limit)
        );
        self.pg.docs(&sql, &w.params())
    }

    fn decide(
        &mut self,
        approval_id: &str,
        value: &str,
        who: &Decider<'_>,
    ) -> StoreResult<Done<DecideOutcome>> {
        let Some(current) = OperatorStore::approval(self, approval_id)? else {
            return Ok(Done::quiet(DecideOutcome::NotFound));
        };
        // Superseded, or not the version shown: said before the value is looked at (the
        // server refuses it again in the decision's transaction).
        if let Some(refused) = approvals::version_refusal(&current, who) {
            return Ok(Done::quiet(refused));
        }
        // A decision a server makes for a token: the token, too, must be among a pipeline
        // step's deciders (the login is checked whatever the channel says).
        let also = (who.channel.starts_with("http:") || who.channel.starts_with("link:"))
            .then_some(who.by);
        // Overdue: the server expires it whatever the value (and says so).
        let overdue = current.is_overdue(&time::now_rfc3339());
        let resolution = match approvals::value_decision(&current, value) {
            Ok(r) => r,
            Err(_) if overdue => ValueDecision {
                status: ApprovalStatus::Rejected,
                chosen_value: None,
            },
            Err(e) if current.status == ApprovalStatus::Pending => {
                return Ok(Done::quiet(DecideOutcome::Invalid(e)));
            }
            Err(_) => return Ok(Done::quiet(DecideOutcome::Conflict(Box::new(current)))),
        };
        let status = resolution.status.as_str();
        let mut closed = None;
        let doc: String = self.pg.tx(|tx| {
            let doc: String = tx
                .query_one(
                    "SELECT hr.decide($1, $2, $3, $4, $5, $6, $7)::text",
                    &[
                        &approval_id,
                        &status,
                        &resolution.chosen_value,
                        &who.comment,
                        &who.channel,
                        &who.version,
                        &also,
                    ],
                )?
                .get(0);
            // A pipeline's human step moves with its decision, in this transaction; under a
            // savepoint, so that whatever goes wrong there leaves the decision standing (the
            // runner then moves the step).
            closed = None;
            if let Ok(v) = serde_json::from_str::<serde_json::Value>(&doc)
                && v["outcome"] == "decided"
                && let Ok(a) = serde_json::from_value::<Approval>(v["approval"].clone())
            {
                let mut sp = tx.savepoint("pipeline_step")?;
                if let Ok(moved) = pipeline_decided(&mut sp, &a) {
                    sp.commit()?;
                    closed = moved;
                }
            }
            Ok(doc)
        })?;
        let doc: serde_json::Value = from_json(&doc)?;
        if doc.get("outcome").and_then(|o| o.as_str()) == Some("refused") {
            let why = doc.get("why").and_then(|w| w.as_str()).unwrap_or("refused");
            return Ok(Done::quiet(DecideOutcome::Refused(why.to_owned())));
        }
        let Some(after) = doc.get("approval").filter(|a| !a.is_null()) else {
            return Ok(Done::quiet(DecideOutcome::NotFound));
        };
        let after: Approval = from_value(after)?;
        Ok(match doc.get("outcome").and_then(|o| o.as_str()) {
            Some("changed") => Done::quiet(DecideOutcome::Changed(Box::new(after))),
            Some("reviewed") => Done::quiet(DecideOutcome::Reviewed(Box::new(after))),
            Some("conflict") if after.superseded_by.is_some() => {
                Done::quiet(DecideOutcome::Conflict(Box::new(after)))
            }
            Some("decided") | Some("expired") => {
                let events = std::iter::once(after.status_event())
                    .chain(closed)
                    .collect();
                let decided = doc.get("outcome").and_then(|o| o.as_str()) == Some("decided");
                Done::with_events(
                    if decided {
                        DecideOutcome::Decided(Box::new(after))
                    } else {
                        DecideOutcome::Conflict(Box::new(after))
                    },
                    events,
                )
            }
            _ => {
                let same = after.status == resolution.status
                    && (resolution.status == ApprovalStatus::Rejected
                        || after.chosen_value == resolution.chosen_value);
                Done::quiet(if same {
                    DecideOutcome::AlreadySame(Box::new(after))
                } else {
                    DecideOutcome::Conflict(Box::new(after))
                })
            }
        })
    }

    fn cancel(
        &mut self,
        tool_run_id: &str,
        reason: Option<&str>,
        _who: &Decider<'_>,
    ) -> StoreResult<Done<CancelOutcome>> {
        let doc: String = self.pg.tx(|tx| {
            Ok(tx
                .query_one("SELECT hr.cancel($1, $2)::text", &[&tool_run_id, &reason])?
                .get(0))
        })?;
        let doc: serde_json::Value = from_json(&doc)?;
        let run: Option<ToolRun> = match doc.get("run") {
            Some(r) if !r.is_null() => Some(from_value(r)?),
            _ => None,
        };
        let Some(run) = run else {
            return Ok(Done::quiet(CancelOutcome::NotFound));
        };
        if doc.get("outcome").and_then(|o| o.as_str()) != Some("cancelled") {
            return Ok(Done::quiet(CancelOutcome::AlreadyFinal {
                run: Box::new(run),
            }));
        }
        let previous = doc
            .get("previous")
            .and_then(|p| p.as_str())
            .and_then(|p| p.parse().ok());
        let change = StatusChange::to(RunStatus::Cancelled, run.reason.clone());
        let mut events = vec![run.status_event(previous, &change)];
        let changed: Vec<Approval> = match doc.get("approvals") {
            Some(list) => from_value(list)?,
            None => Vec::new(),
        };
        events.extend(changed.iter().map(Approval::status_event));
        Ok(Done::with_events(
            CancelOutcome::Marked { run: Box::new(run) },
            events,
        ))
    }

    fn audit_of_run(&mut self, tool_run_id: &str) -> StoreResult<Vec<AuditRow>> {
        self.audit_rows("tool_run_id = $1", &[&tool_run_id])
    }

    fn audit_of_approval(&mut self, approval_id: &str) -> StoreResult<Vec<AuditRow>> {
        self.audit_rows("approval_id = $1", &[&approval_id])
    }

    fn counts(&mut self, failed_since: &str, soon: Duration) -> StoreResult<Counts> {
        let mut counts = self.live_counts(soon)?;
        let failed = ["failed", "failed_timeout"];
        let rows = self.pg.tx(|tx| {
            let totals = tx.query(
                "SELECT status, count(*) FROM hr.tool_runs GROUP BY status",
                &[],
            )?;
            let recent = tx.query_one(
                "SELECT count(*) FILTER (WHERE status = ANY($2)),
                        count(*) FILTER (WHERE status = 'stalled' AND completed_at IS NOT NULL)
                 FROM hr.tool_runs WHERE coalesce(completed_at, started_at) >= $1",
                &[&failed_since, &&failed[..]],
            )?;
            let totals: Vec<(String, i64)> = totals.iter().map(|r| (r.get(0), r.get(1))).collect();
            Ok((totals, recent.get::<_, i64>(0), recent.get::<_, i64>(1)))
        })?;
        counts.totals = rows
            .0
            .iter()
            .filter_map(|(s, n)| s.parse().ok().map(|s| (s, *n)))
            .collect();
        counts.failed_recent = rows.1;
        counts.stalled_recent = rows.2;
        Ok(counts)
    }

    fn live_counts(&mut self, soon: Duration) -> StoreResult<Counts> {
        let cutoff = time::to_rfc3339(std::time::SystemTime::now() + soon);
        let open: Vec<String> = RunStatus::OPEN
            .iter()
            .map(|s| s.as_str().to_owned())
            .collect();
        let (live, pending) = self.pg.tx(|tx| {
            let live = tx.query(
                "SELECT status, count(*) FROM hr.tool_runs
                 WHERE completed_at IS NULL AND status = ANY($1) GROUP BY status",
                &[&open],
            )?;
            let pending = tx.query_one(
                "SELECT count(*), count(*) FILTER (WHERE expires_at IS NOT NULL AND expires_at <= $1)
                 FROM hr.approvals WHERE status = 'pending'",
                &[&cutoff],
            )?;
            let live: Vec<(String, i64)> = live.iter().map(|r| (r.get(0), r.get(1))).collect();
            Ok((live, (pending.get::<_, i64>(0), pending.get::<_, i64>(1))))
        })?;
        Ok(Counts {
            live: live
                .iter()
                .filter_map(|(s, n)| s.parse().ok().map(|s| (s, *n)))
                .collect(),
            pending,
            ..Counts::default()
        })
    }
}

impl WorkerStore for PgOperator {
    fn reconcile(
        &mut self,
        _actor: &str,
        host: &dyn HostFacts,
    ) -> StoreResult<Done<ReconcileReport>> {
        let live = self.supervised_runs(None)?;
        let mut report = ReconcileReport::default();
        let mut events = Vec::new();
        for run in live {
            let Some(why) = rules::vanished(&run, host) else {
                continue;
            };
            let seen = run.status.as_str();
            let doc: Option<String> = self.pg.tx(|tx| {
                Ok(tx
                    .query_one(
                        "SELECT hr.fail_vanished($1, $2, $3)::text",
                        &[&run.tool_run_id, &seen, &why],
                    )?
                    .get(0))
            })?;
            let Some(doc) = doc else {
                continue;
            };
            let doc: serde_json::Value = from_json(&doc)?;
            let change = StatusChange {
                error: Some(why.clone()),
                ..StatusChange::to(RunStatus::Failed, Some(why.clone()))
            };
            let previous = doc
                .get("previous")
                .and_then(|p| p.as_str())
                .and_then(|p| p.parse().ok());
            events.push(run.status_event(previous, &change));
            let abandoned: Vec<Approval> = match doc.get("approvals") {
                Some(list) => from_value(list)?,
                None => Vec::new(),
            };
            events.extend(abandoned.iter().map(Approval::status_event));
            report.vanished.push((run.tool_run_id.clone(), why));
        }
        let expired = self.expire()?;
        report.expired = expired.value;
        events.extend(expired.effects.events);
        Ok(Done::with_events(report, events))
    }

    fn expire_due(&mut self) -> StoreResult<Done<Vec<Approval>>> {
        self.expire()
    }

    fn decided_parked(&mut self) -> StoreResult<Vec<ParkedRun>> {
        let parked: Vec<ToolRun> = if !self.reads_tables()? {
            self.worker_runs("parked", None)?
        } else {
            self.pg.docs(
                &format!(
                    "SELECT {RUN_DOC} FROM hr.tool_runs r
                 WHERE r.status = 'waiting_approval' AND r.exit_code = $1
                   AND EXISTS (SELECT 1 FROM hr.approvals a WHERE a.tool_run_id = r.tool_run_id
                     AND a.status <> 'pending' AND a.consumed_at IS NULL)
                 ORDER BY r.tool_run_id"
                ),
                &[&i32::from(crate::exit::shim::APPROVAL_PENDING)],
            )?
        };
        let mut out = Vec::with_capacity(parked.len());
        for run in parked {
            let all = self.approvals(&ApprovalFilter {
                tool_run_id: Some(run.tool_run_id.clone()),
                ..Default::default()
            })?;
            out.push(ParkedRun::of(run, all));
        }
        Ok(out)
    }

    fn resumes_of(&mut self, waiting_run: &str) -> StoreResult<Vec<ToolRun>> {
        if !self.reads_tables()? {
            return self.worker_runs("resumes", Some(waiting_run));
        }
        self.pg.docs(
            &format!(
                "SELECT {RUN_DOC} FROM hr.tool_runs r WHERE resumed_from = $1 ORDER BY tool_run_id"
            ),
            &[&waiting_run],
        )
    }

    fn identity(&mut self) -> StoreResult<String> {
        self.pg.login()
    }

    fn claim(&mut self, approval_id: &str, worker: &str) -> StoreResult<bool> {
        self.yes("SELECT hr.claim($1, $2)", &[&approval_id, &worker])
    }

    fn take_over_claim(&mut self, approval_id: &str, from: &str, to: &str) -> StoreResult<bool> {
        self.yes(
            "SELECT hr.take_over_claim($1, $2, $3)",
            &[&approval_id, &from, &to],
        )
    }

    fn set_resumed_run(&mut self, approval_id: &str, run: &str) -> StoreResult<()> {
        self.pg
            .tx(|tx| tx.execute("SELECT hr.set_resumed_run($1, $2)", &[&approval_id, &run]))?;
        Ok(())
    }

    fn close_run(
        &mut self,
        tool_run_id: &str,
        change: &StatusChange,
        _actor: &str,
        from: &[RunStatus],
    ) -> StoreResult<Done<Option<RunStatus>>> {
        let previous = self
            .pg
            .tx(|tx| close_run_in(tx, tool_run_id, change, from))?;
        let events = match (previous, self.run(tool_run_id)?) {
            (Some(prev), Some(run)) => vec![run.status_event(Some(prev), change)],
            _ => Vec::new(),
        };
        Ok(Done::with_events(previous, events))
    }

    fn consume(&mut self, approval_id: &str, by_run: &str, _actor: &str) -> StoreResult<bool> {
        self.yes("SELECT hr.consume($1, $2)", &[&approval_id, &by_run])
    }
}

impl AdminStore for PgOperator {
    fn gc_preview(&mut self, cutoff: &str) -> StoreResult<GcReport> {
        let rows = self.pg.tx(|tx| {
            let runs = tx.query(
                "SELECT tool_run_id FROM hr.tool_runs r
                 WHERE hr.is_final(status) AND coalesce(completed_at, updated_at) < $1
                   AND NOT EXISTS (SELECT 1 FROM hr.approvals k
                                   WHERE k.tool_run_id = r.tool_run_id AND k.kept_for IS NOT NULL)
                 ORDER BY tool_run_id",
                &[&cutoff],
            )?;
            let ids: Vec<String> = runs.iter().map(|r| r.get(0)).collect();
            let n = tx.query_one(
                "SELECT count(*) FROM hr.approvals WHERE status <> 'pending' AND tool_run_id = ANY($1)",
                &[&ids],
            )?;
            Ok((ids, n.get::<_, i64>(0)))
        })?;
        Ok(GcReport {
            runs: rows.0,
            approvals: rows.1 as usize,
        })
    }

    fn gc(&mut self, cutoff: &str, _actor: &str) -> StoreResult<GcReport> {
        let doc: String = self
            .pg
            .tx(|tx| Ok(tx.query_one("SELECT hr.gc($1)::text", &[&cutoff])?.get(0)))?;
        let doc: serde_json::Value = from_json(&doc)?;
        Ok(GcReport {
            runs: doc
                .get("runs")
                .map(from_value)
                .transpose()?
                .unwrap_or_default(),
            approvals: doc.get("approvals").and_then(|n| n.as_u64()).unwrap_or(0) as usize,
        })
    }

    fn remember(
        &mut self,
        tool: &str,
        prompt_fingerprint: &str,
        scope: &RememberScope,
        value: &str,
        approval_id: &str,
        _by: &str,
    ) -> StoreResult<RememberedPolicy> {
        let id = crate::id::new_id("PO-");
        let argv = scope.argv.as_ref().map(to_json);
        self.pg
            .doc(
                "SELECT hr.remember($1, $2, $3, $4::text::jsonb, $5, $6, $7)::text",
                &[
                    &id,
                    &tool,
                    &prompt_fingerprint,
                    &argv,
                    &scope.cwd,
                    &value,
                    &approval_id,
                ],
            )?
            .ok_or_else(|| StoreError::Server("the decision was not remembered".into()))
    }

    fn remembered(&mut self) -> StoreResult<Vec<RememberedPolicy>> {
        self.pg.docs(
            "SELECT to_jsonb(p)::text FROM hr.policies p
             WHERE enabled AND source = 'remembered' ORDER BY created_at DESC, policy_id DESC",
            &[],
        )
    }

    fn forget(&mut self, policy_id: &str, _by: &str) -> StoreResult<Option<RememberedPolicy>> {
        self.pg.doc("SELECT hr.forget($1)::text", &[&policy_id])
    }

    fn audit_after(&mut self, after: i64, limit: usize) -> StoreResult<Vec<AuditRow>> {
        self.audit_rows_limited("id > $1", &[&after], Some(limit))
    }

    fn audit_head_id(&mut self) -> StoreResult<i64> {
        self.pg.tx(|tx| {
            Ok(tx
                .query_one("SELECT coalesce(max(id), 0) FROM hr.events", &[])?
                .get(0))
        })
    }

    fn verify_audit(&mut self) -> StoreResult<ChainReport> {
        let rows = self.chained_audit_rows("true", &[], None)?;
        let mut report = ChainReport {
            rows: 0,
            problems: Vec::new(),
            heads: Vec::new(),
        };
        // A chain per login (schema v8): each row follows the row before it in its own.
        let mut heads: BTreeMap<&str, (i64, &str)> = BTreeMap::new();
        for (chain, r) in &rows {
            report.rows += 1;
            let prev = heads
                .get(chain.as_str())
                .map_or(audit::GENESIS, |(_, hash)| *hash);
            if r.prev_hash != prev {
                report
                    .problems
                    .push((r.id, "does not follow the row before it".into()));
            }
            let h = audit::chain_hash(
                &r.prev_hash,
                &r.at,
                &r.event,
                r.tool_run_id.as_deref(),
                r.approval_id.as_deref(),
                &r.actor,
                &r.data,
            );
            if h != r.hash {
                report
                    .problems
                    .push((r.id, "its hash does not match its fields".into()));
            }
            heads.insert(chain, (r.id, &r.hash));
        }
        report.heads = heads
            .into_values()
            .map(|(id, hash)| (id, hash.to_owned()))
            .collect();
        report.heads.sort();
        Ok(report)
    }

    fn audit_hash(&mut self, id: i64) -> StoreResult<Option<String>> {
        self.pg.tx(|tx| {
            Ok(tx
                .query_opt("SELECT hash FROM hr.events WHERE id = $1", &[&id])?
                .map(|r| r.get(0)))
        })
    }

    fn unrecorded_decisions(&mut self) -> StoreResult<Vec<(String, String)>> {
        self.pg.tx(|tx| {
            let rows = tx.query(
                "SELECT a.approval_id, a.status FROM hr.approvals a
                 WHERE a.status <> 'pending' AND NOT EXISTS (SELECT 1 FROM hr.events e
                   WHERE e.approval_id = a.approval_id AND e.event = 'approval_status_change'
                     AND e.data::jsonb->>'status' = a.status)
                 ORDER BY a.approval_id",
                &[],
            )?;
            Ok(rows.iter().map(|r| (r.get(0), r.get(1))).collect())
        })
    }

    fn health(&mut self) -> StoreResult<StoreHealth> {
        let v: i64 = self.pg.tx(|tx| {
            Ok(tx
                .query_one("SELECT version FROM hr.schema_version", &[])?
                .get(0))
        })?;
        Ok(StoreHealth {
            schema_version: v,
            supported_version: SCHEMA_VERSION,
            journal: "postgresql".into(),
        })
    }
}
