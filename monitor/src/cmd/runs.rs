//! `monitor runs`: the runs, newest first, as a table or JSON.

use crate::cli::Ctx;
use crate::error::CliResult;
use crate::output::{self, Table};
use hr_shared::export::ExportError;
use hr_shared::runs::{RunFilter, ToolRun};
use hr_shared::sanitize::sanitize_line;
use hr_shared::status::RunStatus;
use hr_shared::time;

#[derive(Debug, clap::Args)]
#[command(after_help = "\
Filters combine (all must hold); --status may be given several times (any of them).
--json prints an array of objects whose fields are the tool_runs columns (argv_json as the
array it holds, metadata as the object it holds), newest first.

Examples:
  monitor runs --status failed --status failed_timeout --since 2h
  monitor runs --tool terraform --json | jq '.[0].reason'
  monitor runs --execution EX-01m8 --limit 0")]
pub struct Args {
    /// Only runs in this status (repeatable): running, completed, failed, failed_timeout,
    /// stalled, waiting_approval, cancelled, queued
    #[arg(long, value_name = "S", value_parser = status_parser())]
    status: Vec<RunStatus>,
    /// Only runs of this tool
    #[arg(long, value_name = "T")]
    tool: Option<String>,
    /// Only runs of this execution (HEADLESS_RUN_EXECUTION_ID)
    #[arg(long, value_name = "ID")]
    execution: Option<String>,
    /// Only runs started since then: a duration back from now (2h, 30m) or an RFC 3339 time
    #[arg(long, value_name = "WHEN", value_parser = crate::parse::since)]
    since: Option<String>,
    /// At most N runs (0: all)
    #[arg(long, value_name = "N", default_value_t = 50)]
    limit: usize,
    /// Print JSON (an array of objects whose fields are the tool_runs columns)
    #[arg(long)]
    json: bool,
}

/// `--status`: one of the stored spellings, listed (with a suggestion) when mistyped, as
/// `approvals --status` does.
fn status_parser() -> impl clap::builder::TypedValueParser<Value = RunStatus> {
    use clap::builder::{PossibleValuesParser, TypedValueParser};
    PossibleValuesParser::new(RunStatus::ALL.map(RunStatus::as_str))
        .try_map(|s| s.parse::<RunStatus>())
}

pub fn run(ctx: &Ctx, args: Args) -> CliResult {
    // No state yet: nothing has run, which is an empty list, not an error.
    let Some(mut store) = ctx.open_if_any()? else {
        if args.json {
            crate::outln!("[]");
        } else {
            crate::outln!("no runs");
        }
        return Ok(());
    };
    let filter = RunFilter {
        statuses: args.status,
        tool: args.tool,
        execution_id: args.execution,
        since: args.since,
        limit: (args.limit > 0).then_some(args.limit),
    };
    if args.json {
        // Streamed: 100 000 runs print in well under the design's 150 ms.
        let stdout = std::io::stdout();
        let mut out = stdout.lock();
        return match store.export_runs_json(&filter, &mut out) {
            Ok(_) => Ok(()),
            Err(ExportError::Io(e)) => Err(e.into()),
            Err(ExportError::Store(e)) => Err(e.into()),
        };
    }
    let runs = store.runs(&filter)?;
    if runs.is_empty() {
        crate::outln!("no runs");
        return Ok(());
    }
    crate::out!("{}", table(&runs).render(output::terminal_width()));
    Ok(())
}

/// The human table of runs.
pub fn table(runs: &[ToolRun]) -> Table {
    let mut t = Table::new(vec![
        "RUN", "TOOL", "STATUS", "STARTED", "TOOK", "EXIT", "REASON",
    ]);
    for r in runs {
        t.row(vec![
            r.tool_run_id.clone(),
            sanitize_line(&r.tool_name),
            hr_shared::runs::shown_status(r).to_owned(),
            time::age_of(&r.started_at)
                .map(|d| format!("{} ago", time::short_duration(d)))
                .unwrap_or_default(),
            took(r),
            r.exit_code.map(|c| c.to_string()).unwrap_or_default(),
            sanitize_line(r.reason.as_deref().unwrap_or("")),
        ]);
    }
    t
}

fn took(r: &ToolRun) -> String {
    let start = time::parse_rfc3339(&r.started_at);
    let end = match hr_shared::runs::worked_until(r) {
        Some(c) => time::parse_rfc3339(c),
        None => Some(std::time::SystemTime::now()),
    };
    match (start, end) {
        (Some(s), Some(e)) => e
            .duration_since(s)
            .map(time::short_duration)
            .unwrap_or_default(),
        _ => String::new(),
    }
}
