//! `monitor runs`: the runs, newest first, as a table or JSON.

use crate::cli::Ctx;
use crate::error::{CliError, CliResult};
use crate::output::{self, Table};
use hr_shared::runs::{self, RunFilter, ToolRun};
use hr_shared::sanitize::sanitize_line;
use hr_shared::status::RunStatus;
use hr_shared::time;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Only runs in this status (repeatable): running, completed, failed, failed_timeout,
    /// stalled, waiting_approval, cancelled, queued
    #[arg(long, value_name = "S", value_parser = str::parse::<RunStatus>)]
    status: Vec<RunStatus>,
    /// Only runs of this tool
    #[arg(long, value_name = "T")]
    tool: Option<String>,
    /// At most N runs (0: all)
    #[arg(long, value_name = "N", default_value_t = 50)]
    limit: usize,
    /// Print JSON (an array of objects whose fields are the tool_runs columns)
    #[arg(long)]
    json: bool,
}

pub fn run(ctx: &Ctx, args: Args) -> CliResult {
    let conn = ctx.open()?;
    let filter = RunFilter {
        statuses: args.status,
        tool: args.tool,
        limit: (args.limit > 0).then_some(args.limit),
        ..RunFilter::default()
    };
    let runs = runs::list(&conn, &filter)?;
    if args.json {
        return Ok(output::print_json(&runs)?);
    }
    if runs.is_empty() {
        println!("no runs");
        return Ok(());
    }
    print!("{}", table(&runs).render(output::terminal_width()));
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
            r.status.to_string(),
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
    let end = match &r.completed_at {
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

/// Parses an id argument, or says what was expected.
pub fn require_id(id: &str) -> CliResult<&str> {
    if id.starts_with("TR-") || id.starts_with("AP-") {
        Ok(id)
    } else {
        Err(CliError::usage(format!(
            "`{id}` is not a run id (TR-…) or an approval id (AP-…)"
        )))
    }
}
