//! `monitor gc --older-than DUR`: deletes finished runs, their decided approvals and their
//! run logs.

use crate::cli::Ctx;
use crate::error::{CliError, CliResult};
use crate::parse;
use hr_shared::gc::GcReport;
use hr_shared::{proc, time};
use std::time::Duration;

#[derive(Debug, clap::Args)]
#[command(after_help = "\
Deletes runs that ended (completed, failed, failed_timeout, cancelled) more than DUR ago,
their decided approvals and their output logs (logs/runs/TR-….log). Live runs, runs parked
on an approval and pending approvals are kept.

The audit table (events) is NOT pruned: it is append-only and hash-chained, so deleting
from it would break the chain `monitor doctor` verifies. A `gc` row records each
collection. logs/combined.log rotates by itself (at HEADLESS_RUN_LOG_MAX, default 64 MB,
keeping HEADLESS_RUN_LOG_KEEP generations, default 1: combined.log.1 … .N).

Examples:
  monitor gc --older-than 30d --dry-run
  monitor gc --older-than 7d")]
pub struct Args {
    /// Delete what ended longer ago than this (e.g. 30d, 12h)
    #[arg(long, value_name = "DUR", value_parser = parse::age)]
    older_than: Duration,
    /// Only say what would be deleted
    #[arg(long)]
    dry_run: bool,
    /// Print the result as one JSON object: schema, dry_run, cutoff, runs (ids),
    /// approvals, run_logs
    #[arg(long)]
    json: bool,
}

fn print_json(
    args: &Args,
    cutoff: &str,
    runs: &[String],
    approvals: u64,
    logs: usize,
) -> CliResult {
    crate::output::print_report(serde_json::json!({
        "dry_run": args.dry_run,
        "cutoff": cutoff,
        "runs": runs,
        "approvals": approvals,
        "run_logs": logs,
    }))
}

pub fn run(ctx: &Ctx, args: Args) -> CliResult {
    if let Some(why) = hr_shared::self_approval::inside_supervised_tool() {
        return Err(CliError::error(format!(
            "refusing to delete history: {why}; a supervised tool must not erase the record of what it did — run gc from another terminal"
        )));
    }
    let cutoff = time::to_rfc3339(time::before_now(args.older_than).map_err(CliError::usage)?);
    // No state yet: nothing to delete.
    let Some(mut store) = ctx.open_local_if_any("gc")? else {
        let verb = if args.dry_run {
            "would delete"
        } else {
            "deleted"
        };
        if args.json {
            return print_json(&args, &cutoff, &[], 0, 0);
        }
        crate::outln!("{verb} 0 runs, 0 approvals and 0 run logs (no state yet)");
        return Ok(());
    };
    if args.dry_run {
        let GcReport { runs, approvals } = store.gc_preview(&cutoff)?;
        let logs = runs
            .iter()
            .filter(|id| ctx.paths.run_log(id).exists())
            .count();
        if args.json {
            return print_json(&args, &cutoff, &runs, approvals as u64, logs);
        }
        crate::outln!(
            "would delete {} runs, {approvals} approvals and {logs} run logs (ended before {cutoff})",
            runs.len()
        );
        return Ok(());
    }
    let actor = proc::current_user();
    let report = store.gc(&cutoff, &actor)?;
    let mut logs = 0usize;
    let mut bytes = 0u64;
    for id in &report.runs {
        let path = ctx.paths.run_log(id);
        let size = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
        match std::fs::remove_file(&path) {
            Ok(()) => {
                logs += 1;
                bytes += size;
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => eprintln!("monitor: cannot delete {}: {e}", path.display()),
        }
    }
    if args.json {
        return print_json(&args, &cutoff, &report.runs, report.approvals as u64, logs);
    }
    crate::outln!(
        "deleted {} runs, {} approvals and {logs} run logs ({:.1} MB) that ended before {cutoff}",
        report.runs.len(),
        report.approvals,
        bytes as f64 / 1e6
    );
    Ok(())
}
