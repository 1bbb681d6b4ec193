//! `monitor show ID`: one run with its approvals, output tail and audit trail, or one
//! approval.

use crate::cli::Ctx;
use crate::cmd::approvals::{clip, options_summary};
use crate::error::{CliError, CliResult};
use crate::output;
use crate::parse::{self, IdKind};
use hr_shared::approvals::ApprovalFilter;
use hr_shared::sanitize::{sanitize_line, sanitize_text};
use std::io::{Read, Seek, SeekFrom};

#[derive(Debug, clap::Args)]
#[command(after_help = "\
Examples:
  monitor show TR-01m8a                  # a run: its approvals, audit trail, output tail
  monitor show AP-01m8b --json           # an approval: question, context, options, command")]
pub struct Args {
    /// A run id (TR-…) or an approval id (AP-…)
    id: String,
    /// Lines of output to show
    #[arg(long, value_name = "N", default_value_t = 20)]
    tail: usize,
    /// Print JSON: a run's columns plus `approvals`, `output_tail` and `events`; an
    /// approval's columns plus `events`
    #[arg(long)]
    json: bool,
}

pub fn run(ctx: &Ctx, args: Args) -> CliResult {
    if parse::id_kind(&args.id)? == IdKind::Approval {
        return crate::cmd::approvals::show(ctx, &args.id, args.json);
    }
    let mut store = ctx.open()?;
    let id = &ctx.full_id(store.as_mut(), &args.id)?;
    let Some(run) = store.run(id)? else {
        return Err(CliError::not_found(format!("no run {id}")));
    };
    // A server serves the tail of its host's log; locally, the log file is here.
    let tail = match store.output_tail(id, args.tail)? {
        Some(tail) => tail,
        None => output_tail(&ctx.paths.run_log(id), args.tail),
    };
    let events = store.audit_of_run(id)?;
    let mut approvals = store.approvals(&ApprovalFilter {
        tool_run_id: Some(id.to_owned()),
        ..Default::default()
    })?;
    approvals.reverse();
    if args.json {
        let mut value = serde_json::to_value(&run).map_err(|e| CliError::error(e.to_string()))?;
        if let Some(obj) = value.as_object_mut() {
            obj.insert(
                "approvals".into(),
                serde_json::to_value(&approvals).map_err(|e| CliError::error(e.to_string()))?,
            );
            obj.insert("output_tail".into(), tail.clone().into());
            obj.insert(
                "events".into(),
                serde_json::to_value(&events).map_err(|e| CliError::error(e.to_string()))?,
            );
        }
        return Ok(output::print_json(&value)?);
    }
    let field = |name: &str, value: Option<String>| {
        crate::outln!(
            "{name:<24} {}",
            value
                .map(|v| sanitize_line(&v))
                .unwrap_or_else(|| "-".into())
        );
    };
    field("tool_run_id", Some(run.tool_run_id.clone()));
    field("tool_name", Some(run.tool_name.clone()));
    field("status", Some(run.status.to_string()));
    field("reason", run.reason.clone());
    field("exit_code", run.exit_code.map(|c| c.to_string()));
    if run.last_error_msg.is_some() {
        field("last_error", run.last_error_msg.clone());
    }
    field("argv", Some(run.argv_json.join(" ")));
    field("cwd", run.cwd.clone());
    field("execution_id", run.execution_id.clone());
    field("started_at", Some(run.started_at.clone()));
    field("completed_at", run.completed_at.clone());
    field("last_output_at", run.last_output_at.clone());
    field("last_heartbeat_at", run.last_heartbeat_at.clone());
    field(
        "supervisor_heartbeat_at",
        run.supervisor_heartbeat_at.clone(),
    );
    field(
        "pid / shim_pid",
        Some(format!("{} / {}", opt(run.pid), opt(run.shim_pid))),
    );
    field("host", run.host.clone());
    field("resumed_from", run.resumed_from.clone());
    field("started_by", run.owner.clone());
    if let Some(why) = run
        .metadata
        .as_ref()
        .and_then(|m| m.get("on_prompt"))
        .and_then(|o| o.get("why"))
        .and_then(|w| w.as_str())
    {
        field("on_prompt", Some(format!("wait: {why}")));
    }
    if let Some(note) = crate::worker::resume_note(store.as_mut(), &run) {
        field("resumed", Some(note));
    }
    // What the resume lacked of the variables withheld when its run asked (secrets are
    // never stored), and what the worker gave from its own environment.
    if let Some(env) = run
        .metadata
        .as_ref()
        .and_then(|m| m.get("resume_env"))
        .and_then(|v| serde_json::from_value::<hr_shared::mode::ResumeEnv>(v.clone()).ok())
    {
        if let Some(note) = env.missing_note() {
            field("note", Some(note));
        }
        if !env.from_worker.is_empty() {
            field(
                "note",
                Some(format!(
                    "resumed with {} from the worker's environment",
                    env.from_worker.join(", ")
                )),
            );
        }
    }
    if !approvals.is_empty() {
        crate::outln!("\napprovals:");
        for a in &approvals {
            crate::outln!(
                "  {}  {:<8}  {:<12}  {}  {}",
                a.approval_id,
                a.status,
                clip(
                    &a.chosen_value
                        .as_deref()
                        .map(sanitize_line)
                        .unwrap_or_else(|| options_summary(a)),
                    12
                ),
                clip(&sanitize_line(a.decided_by.as_deref().unwrap_or("-")), 16),
                clip(sanitize_line(&a.question).trim(), 60),
            );
        }
    }
    crate::outln!("\nevents:");
    for e in &events {
        crate::outln!("  {}  {}  {}", e.at, e.event, sanitize_line(&e.data));
    }
    crate::outln!("\noutput (last {} lines):", args.tail);
    for line in tail.lines() {
        crate::outln!("  {line}");
    }
    Ok(())
}

fn opt(v: Option<i64>) -> String {
    v.map(|v| v.to_string()).unwrap_or_else(|| "-".into())
}

/// The last `lines` lines of a run log, with control characters removed.
pub fn output_tail(path: &std::path::Path, lines: usize) -> String {
    const WINDOW: u64 = 64 * 1024;
    let Ok(mut f) = std::fs::File::open(path) else {
        return String::new();
    };
    let len = f.metadata().map(|m| m.len()).unwrap_or(0);
    let _ = f.seek(SeekFrom::Start(len.saturating_sub(WINDOW)));
    let mut buf = Vec::new();
    let _ = f.take(WINDOW).read_to_end(&mut buf);
    let text = sanitize_text(&String::from_utf8_lossy(&buf).replace('\r', "\n"));
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}
