//! `monitor cancel TR-ID [--reason T]`: ends a live run.

use crate::cli::Ctx;
use crate::error::{CliError, CliResult};
use crate::parse;
use hr_shared::approvals::Decider;
use hr_shared::control::CancelOutcome;
use hr_shared::proc;
use hr_shared::rules::LocalHost;
use hr_shared::sanitize::sanitize_line;

#[derive(Debug, clap::Args)]
#[command(after_help = "\
The run becomes cancelled (reason: `cancelled by USER: REASON`, the user from this
process's uid), its pending approvals are rejected, and its headless-run is signalled
(SIGUSR1) to end the tool's whole process group; headless-run then exits 143. A run parked
on an approval (exit 90) has no live process: it is only marked. A run that has already
ended exits 3; an unknown id exits 4.

With --server, the server cancels it as the token's name and signals the headless-run
when it runs on the server's host; one on another host learns of it from the store and
ends the tool at its next write (within seconds). Nothing is signalled on this host.

Examples:
  monitor cancel TR-01m8a --reason 'stuck on a lock'")]
pub struct Args {
    /// The run to cancel (TR-…)
    id: String,
    /// Why (stored in the run's reason)
    #[arg(long, value_name = "T")]
    reason: Option<String>,
    /// Print the result as a JSON object: schema, outcome (`signalled`: its headless-run
    /// was told to end the tool; `marked`: nothing live to signal), shim_pid, and the run
    #[arg(long)]
    json: bool,
}

fn report(outcome: &str, run: &hr_shared::runs::ToolRun, shim_pid: Option<i32>) -> CliResult {
    let row = serde_json::to_value(run).map_err(|e| CliError::error(e.to_string()))?;
    crate::output::print_report(serde_json::json!({
        "outcome": outcome,
        "shim_pid": shim_pid,
        "run": row,
    }))
}

pub fn run(ctx: &Ctx, args: Args) -> CliResult {
    parse::run_id(&args.id)?;
    let mut store = ctx.open()?;
    let id = &ctx.full_id(store.as_mut(), &args.id)?;
    let by = proc::current_user();
    let reason = args.reason.as_deref().map(sanitize_line);
    let who = Decider {
        by: &by,
        channel: "cli",
        comment: reason.as_deref(),
        version: None,
        groups: &[],
    };
    // A server signals the run's headless-run itself, on its host: nothing is signalled here.
    let remote = !hr_shared::store::capabilities::of(&ctx.paths).host_files;
    let outcome = hr_shared::control::cancel(
        store.as_mut(),
        &ctx.paths,
        id,
        reason.as_deref(),
        &who,
        &LocalHost::new(),
    )?;
    match outcome {
        CancelOutcome::Signalled { run, shim_pid } if args.json => {
            report("signalled", &run, Some(shim_pid))
        }
        CancelOutcome::Marked { run } if args.json => report("marked", &run, None),
        CancelOutcome::Signalled { run, shim_pid } => {
            crate::outln!(
                "{id} {}; {}headless-run (pid {shim_pid}) told to end the tool",
                sanitize_line(run.reason.as_deref().unwrap_or("cancelled")),
                if remote { "the server's " } else { "" }
            );
            Ok(())
        }
        CancelOutcome::Marked { run } if remote => {
            crate::outln!(
                "{id} {}; no headless-run on the server's host to signal (parked on an approval, gone, or on another host, where it ends the tool at its next write to the store)",
                sanitize_line(run.reason.as_deref().unwrap_or("cancelled"))
            );
            Ok(())
        }
        CancelOutcome::Marked { run } => {
            crate::outln!(
                "{id} {}; no live headless-run to signal (parked on an approval, or gone)",
                sanitize_line(run.reason.as_deref().unwrap_or("cancelled"))
            );
            Ok(())
        }
        CancelOutcome::AlreadyFinal { run } => Err(CliError::conflict(format!(
            "{id} has already ended: {}{}{}",
            run.status,
            run.completed_at
                .as_deref()
                .map(|t| format!(" at {t}"))
                .unwrap_or_default(),
            run.reason
                .as_deref()
                .map(|r| format!(" ({})", sanitize_line(r)))
                .unwrap_or_default()
        ))),
        CancelOutcome::NotFound => Err(CliError::not_found(format!("no run {id}"))),
    }
}
