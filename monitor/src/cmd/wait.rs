//! `monitor wait ID [--timeout DUR]`: blocks until an approval is decided or a run ends.

use crate::cli::Ctx;
use crate::error::{CliError, CliResult};
use crate::parse::{self, IdKind};
use crate::stop;
use hr_shared::approvals::{Approval, ApprovalFilter};
use hr_shared::rules::{self, LocalHost};
use hr_shared::runs::ToolRun;
use hr_shared::sanitize::sanitize_line;
use hr_shared::status::ApprovalStatus;
use hr_shared::store::{OperatorStore, capabilities};
use std::time::{Duration, Instant};

/// How often the store is looked at (its cheap change mark unless it changed).
const POLL: Duration = Duration::from_millis(50);
/// The same on a database or `monitor serve` server, where each look is a request; its
/// doorbell (the server's notifications, or a long poll of the mark) says sooner.
const SERVER_POLL: Duration = Duration::from_millis(500);
/// How often a live run's headless-run is checked for having vanished.
const LIVENESS: Duration = Duration::from_secs(1);

#[derive(Debug, clap::Args)]
#[command(after_help = "\
For an approval (AP-…): until it is approved, rejected or expired. For a run (TR-…): until
it ends (completed, failed, failed_timeout, cancelled) or is parked on an approval (its
headless-run exited 90; the approval id is printed). Prints the outcome on one line.

Exit codes: 0 when it happened (whatever the outcome), 1 on --timeout (or when the run's
headless-run vanished without recording an end: run `monitor reconcile`), 4 for an unknown
id.

Examples:
  monitor wait AP-01m8 --timeout 10m && monitor worker --once
  monitor wait TR-01m8 --json")]
pub struct Args {
    /// An approval (AP-…) or a run (TR-…)
    id: String,
    /// Give up after this long (default: wait for ever)
    #[arg(long, value_name = "DUR", value_parser = parse::nonzero)]
    timeout: Option<Duration>,
    /// Print the outcome as a JSON object: schema, id, outcome (the line), and the
    /// approval's or run's row as `approval` / `run`
    #[arg(long)]
    json: bool,
}

enum Look {
    /// The outcome's line, and the row as `(field name, value)` for --json.
    Done(String, (&'static str, serde_json::Value)),
    Vanished(String),
    NotYet(String),
}

pub fn run(ctx: &Ctx, args: Args) -> CliResult {
    let kind = parse::id_kind(&args.id)?;
    let mut store = ctx.open()?;
    // A write to the database (the decision, the run ending) is looked at at once.
    let bell = hr_shared::store::doorbell::for_store(&ctx.paths);
    let id = &ctx.full_id(store.as_mut(), &args.id)?;
    let host = LocalHost::new();
    stop::install();
    let deadline = args.timeout.map(|t| Instant::now() + t);
    let mut seen_version = None;
    let mut last_liveness = Instant::now();
    let mut state = String::new();
    loop {
        let version = store.change_mark()?;
        let check_live = last_liveness.elapsed() >= LIVENESS;
        if seen_version != Some(version) || check_live {
            seen_version = Some(version);
            if check_live {
                last_liveness = Instant::now();
            }
            let look = match kind {
                IdKind::Approval => look_approval(store.as_mut(), id)?,
                IdKind::Run => look_run(store.as_mut(), id, check_live.then_some(&host))?,
            };
            match look {
                Look::Done(line, (field, row)) => {
                    if args.json {
                        return crate::output::print_report(serde_json::json!({
                            "id": id,
                            "outcome": line,
                            field: row,
                        }));
                    }
                    crate::outln!("{line}");
                    return Ok(());
                }
                Look::Vanished(line) => return Err(CliError::error(line)),
                Look::NotYet(s) => state = s,
            }
        }
        if stop::requested() {
            return Err(CliError::error(format!(
                "interrupted; {id} is still {state}"
            )));
        }
        if let Some(d) = deadline
            && Instant::now() >= d
        {
            return Err(CliError::error(format!(
                "timed out after {}: {id} is still {state}",
                hr_shared::time::short_duration(args.timeout.unwrap_or_default())
            )));
        }
        // A database file rings its doorbell at each change; a server's notifications
        // (or its long poll) ring it too, and the look between them costs a round trip.
        let poll = if capabilities::of(&ctx.paths).database_file {
            POLL
        } else {
            SERVER_POLL
        };
        stop::sleep_or_ring(poll, 0, bell.as_ref());
    }
}

fn look_approval(store: &mut dyn OperatorStore, id: &str) -> CliResult<Look> {
    let Some(a) = store.approval(id)? else {
        return Err(CliError::not_found(format!("no approval {id}")));
    };
    if a.status == ApprovalStatus::Pending {
        return Ok(Look::NotYet("pending".into()));
    }
    Ok(Look::Done(approval_outcome(&a), ("approval", to_json(&a)?)))
}

fn to_json<T: serde::Serialize>(row: &T) -> CliResult<serde_json::Value> {
    serde_json::to_value(row).map_err(|e| CliError::error(e.to_string()))
}

/// `AP-… approved: y by alice at T` (with the comment, if any).
pub fn approval_outcome(a: &Approval) -> String {
    format!(
        "{} {}{} by {} at {}{}",
        a.approval_id,
        a.status,
        a.chosen_value
            .as_deref()
            .map(|v| format!(": {}", sanitize_line(v)))
            .unwrap_or_default(),
        sanitize_line(a.decided_by.as_deref().unwrap_or("?")),
        a.decided_at.as_deref().unwrap_or("?"),
        a.comment
            .as_deref()
            .map(|c| format!(" ({})", sanitize_line(c)))
            .unwrap_or_default()
    )
}

/// A run's state; `host` (checked about once a second) to tell whether its shim vanished.
fn look_run(store: &mut dyn OperatorStore, id: &str, host: Option<&LocalHost>) -> CliResult<Look> {
    let Some(run) = store.run(id)? else {
        return Err(CliError::not_found(format!("no run {id}")));
    };
    // Ended, or ended as stalled by its own shim (exit 92: the status stays `stalled`).
    if rules::phase(&run).is_over() {
        return Ok(Look::Done(run_outcome(&run), ("run", to_json(&run)?)));
    }
    if rules::is_parked(&run) {
        let pending = store.approvals(&ApprovalFilter {
            tool_run_id: Some(id.to_owned()),
            statuses: vec![ApprovalStatus::Pending],
            limit: Some(1),
            ..Default::default()
        })?;
        let hint = match pending.first() {
            Some(a) => format!(
                ": approval {} pending (monitor decide {} VALUE)",
                a.approval_id, a.approval_id
            ),
            None => ": its approval is decided; `monitor worker` resumes it".into(),
        };
        return Ok(Look::Done(
            format!("{id} waiting_approval (exited 90){hint}"),
            ("run", to_json(&run)?),
        ));
    }
    if let Some(host) = host
        && let Some(why) = rules::shim_gone(&run, host)
    {
        return Ok(Look::Vanished(format!(
            "{id} is still {} but {}; `monitor reconcile` marks it failed",
            run.status,
            sanitize_line(&why)
        )));
    }
    Ok(Look::NotYet(run.status.to_string()))
}

/// `TR-… completed (exit 0)` / `TR-… failed (exit 3): exited with code 3`.
pub fn run_outcome(run: &ToolRun) -> String {
    format!(
        "{} {}{}{}",
        run.tool_run_id,
        run.status,
        run.exit_code
            .map(|c| format!(" (exit {c})"))
            .unwrap_or_default(),
        run.reason
            .as_deref()
            .map(|r| format!(": {}", sanitize_line(r)))
            .unwrap_or_default()
    )
}
