//! `monitor approvals`: the approvals, pending ones by default, as a table or JSON.

use crate::cli::Ctx;
use crate::error::{CliError, CliResult};
use crate::output::{self, Table};
use hr_shared::approvals::{Approval, ApprovalFilter};
use hr_shared::sanitize::sanitize_line;
use hr_shared::status::ApprovalStatus;
use hr_shared::store::OperatorStore;
use hr_shared::time;
use std::time::SystemTime;

/// Which statuses `--status` selects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum StatusArg {
    Pending,
    Approved,
    Rejected,
    Expired,
    All,
}

#[derive(Debug, clap::Args)]
#[command(after_help = "\
The table shows, per approval: its id, the tool, how long ago it was asked, the time left
before it expires, the options (the default in brackets, `+text` where free text is
allowed) and the question on one line. Decide with `monitor decide AP-… VALUE`; see one in
full with `monitor show AP-…`.

--json prints an array of objects whose fields are the approvals columns (options_json as
the array it holds).

Examples:
  monitor approvals                       # what waits for a decision
  monitor approvals --status all --tool apt-get --since 1d
  monitor approvals --json | jq -r '.[].approval_id'")]
pub struct Args {
    /// Which approvals to list
    #[arg(long, value_enum, value_name = "STATUS", default_value = "pending")]
    status: StatusArg,
    /// Only approvals of this tool
    #[arg(long, value_name = "T")]
    tool: Option<String>,
    /// Only approvals of this run (TR-…)
    #[arg(long, value_name = "TR")]
    run: Option<String>,
    /// Only approvals of this execution (HEADLESS_RUN_EXECUTION_ID)
    #[arg(long, value_name = "ID")]
    execution: Option<String>,
    /// Only approvals asked since then: a duration back from now (2h, 30m) or an RFC 3339 time
    #[arg(long, value_name = "WHEN", value_parser = crate::parse::since)]
    since: Option<String>,
    /// At most N approvals: pending ones oldest first, others newest first (0: all; default: every pending one, else 50)
    #[arg(long, value_name = "N")]
    limit: Option<usize>,
    /// Print JSON
    #[arg(long)]
    json: bool,
}

pub fn run(ctx: &Ctx, args: Args) -> CliResult {
    if let Some(run) = &args.run {
        crate::parse::run_id(run)?;
    }
    // No state yet: nothing has asked, which is an empty list, not an error.
    let Some(mut store) = ctx.open_if_any()? else {
        if args.json {
            crate::outln!("[]");
        } else {
            crate::outln!("no {}approvals", status_prefix(args.status));
        }
        return Ok(());
    };
    let run = match &args.run {
        Some(r) => Some(ctx.full_id(store.as_mut(), r)?),
        None => None,
    };
    // Pending approvals are work nobody may miss: all of them unless told otherwise.
    let limit = args.limit.unwrap_or(match args.status {
        StatusArg::Pending => 0,
        _ => 50,
    });
    let statuses = match args.status {
        StatusArg::Pending => vec![ApprovalStatus::Pending],
        StatusArg::Approved => vec![ApprovalStatus::Approved],
        StatusArg::Rejected => vec![ApprovalStatus::Rejected],
        StatusArg::Expired => vec![ApprovalStatus::Expired],
        StatusArg::All => Vec::new(),
    };
    let list = store.approvals(&ApprovalFilter {
        statuses,
        tool: args.tool,
        tool_run_id: run,
        execution_id: args.execution,
        request_fingerprint: None,
        since: args.since,
        limit: (limit > 0).then_some(limit),
    })?;
    // What is being approved: the command that asked, where, on which host.
    let asked: Vec<Asked> = list
        .iter()
        .map(|a| Asked::of(store.as_mut(), a))
        .collect::<CliResult<_>>()?;
    if args.json {
        let objects = list
            .iter()
            .zip(&asked)
            .map(|(a, w)| w.to_json(a))
            .collect::<CliResult<Vec<_>>>()?;
        return Ok(output::print_json(&objects)?);
    }
    if list.is_empty() {
        crate::outln!("no {}approvals", status_prefix(args.status));
        return Ok(());
    }
    let decided = args.status != StatusArg::Pending;
    let width = output::terminal_width();
    crate::out!("{}", table(&list, &asked, decided).render(width));
    Ok(())
}

/// The command an approval was asked by, from its run: what the operator approves.
pub struct Asked {
    pub command: Option<Vec<String>>,
    pub cwd: Option<String>,
    pub host: Option<String>,
}

impl Asked {
    pub fn of(store: &mut dyn OperatorStore, a: &Approval) -> CliResult<Asked> {
        let run = store.run(&a.tool_run_id)?;
        Ok(Asked {
            command: run.as_ref().map(|r| r.argv_json.clone()),
            cwd: run.as_ref().and_then(|r| r.cwd.clone()),
            host: run.and_then(|r| r.host),
        })
    }

    /// The approval's columns plus `command` (argv), `cwd` and `host`.
    pub fn to_json(&self, a: &Approval) -> CliResult<serde_json::Value> {
        let mut value = serde_json::to_value(a).map_err(|e| CliError::error(e.to_string()))?;
        if let Some(obj) = value.as_object_mut() {
            obj.insert("command".into(), serde_json::json!(self.command));
            obj.insert("cwd".into(), serde_json::json!(self.cwd));
            obj.insert("host".into(), serde_json::json!(self.host));
        }
        Ok(value)
    }

    /// The command line, shell-quoted, for people.
    pub fn command_line(&self) -> String {
        self.command
            .as_deref()
            .map(output::shell_words)
            .unwrap_or_default()
    }
}

/// `pending ` (for "no pending approvals"), nothing for all.
fn status_prefix(s: StatusArg) -> String {
    match s {
        StatusArg::All => String::new(),
        other => format!("{} ", status_word(other)),
    }
}

fn status_word(s: StatusArg) -> &'static str {
    match s {
        StatusArg::Pending => "pending",
        StatusArg::Approved => "approved",
        StatusArg::Rejected => "rejected",
        StatusArg::Expired => "expired",
        StatusArg::All => "",
    }
}

/// The human table; with `decided`, the status and who decided are shown too.
pub fn table(list: &[Approval], asked: &[Asked], decided: bool) -> Table {
    let mut headers = vec!["APPROVAL", "TOOL", "AGE", "LEFT"];
    let reviewed = list.iter().any(|a| hr_shared::reviews::short(a).is_some());
    if reviewed {
        headers.push("REVIEWS");
    }
    if decided {
        headers.extend(["STATUS", "VALUE", "BY"]);
    }
    headers.extend(["OPTIONS", "COMMAND", "QUESTION"]);
    let mut t = Table::new(headers);
    for (a, w) in list.iter().zip(asked) {
        let mut row = vec![
            a.approval_id.clone(),
            clip(&sanitize_line(&a.tool_name), 16),
            time::age_of(&a.created_at)
                .map(time::short_duration)
                .unwrap_or_default(),
            time_left(a),
        ];
        if reviewed {
            row.push(clip(&hr_shared::reviews::short(a).unwrap_or_default(), 16));
        }
        if decided {
            row.push(a.status.to_string());
            row.push(clip(
                &a.chosen_value
                    .as_deref()
                    .map(sanitize_line)
                    .unwrap_or_default(),
                16,
            ));
            row.push(clip(
                &sanitize_line(a.decided_by.as_deref().unwrap_or("")),
                20,
            ));
        }
        row.push(clip(&options_summary(a), 32));
        row.push(clip(&sanitize_line(&w.command_line()), 32));
        row.push(sanitize_line(&a.question).trim().to_owned());
        t.row(row);
    }
    t
}

/// `y/[n]`, `1/2/3`, `abort+text`: the values, the default in brackets.
pub fn options_summary(a: &Approval) -> String {
    let mut s = a
        .options_json
        .iter()
        .map(|o| {
            let v = sanitize_line(&o.value);
            if a.default_value.as_deref() == Some(o.value.as_str()) {
                format!("[{v}]")
            } else {
                v
            }
        })
        .collect::<Vec<_>>()
        .join("/");
    if a.allows_text {
        s.push_str("+text");
    }
    s
}

/// Time until a pending approval expires: `23h59m`, `expired`, or `-` (never / decided).
pub fn time_left(a: &Approval) -> String {
    if a.status != ApprovalStatus::Pending {
        return "-".into();
    }
    let Some(at) = a.expires_at.as_deref().and_then(time::parse_rfc3339) else {
        return "-".into();
    };
    match at.duration_since(SystemTime::now()) {
        Ok(d) => time::short_duration(d),
        Err(_) => "expired".into(),
    }
}

pub use hr_shared::sanitize::clip;

/// One approval for `monitor show AP-…`.
pub fn show(ctx: &Ctx, id: &str, json: bool) -> CliResult {
    let mut store = ctx.open()?;
    let id = &ctx.full_id(store.as_mut(), id)?;
    let Some(a) = store.approval(id)? else {
        return Err(CliError::not_found(format!("no approval {id}")));
    };
    let asked = Asked::of(store.as_mut(), &a)?;
    if json {
        // The columns, the command that asked, plus the approval's audit rows.
        let mut value = asked.to_json(&a)?;
        if let Some(obj) = value.as_object_mut() {
            let events = store.audit_of_approval(id)?;
            obj.insert(
                "events".into(),
                serde_json::to_value(&events).map_err(|e| CliError::error(e.to_string()))?,
            );
        }
        return Ok(output::print_json(&value)?);
    }
    let field = |name: &str, value: Option<&str>| {
        crate::outln!(
            "{name:<20} {}",
            value.map(sanitize_line).unwrap_or_else(|| "-".into())
        );
    };
    field("approval_id", Some(&a.approval_id));
    field("status", Some(a.status.as_str()));
    field("tool_name", Some(&a.tool_name));
    field("tool_run_id", Some(&a.tool_run_id));
    field("execution_id", a.execution_id.as_deref());
    field("command", Some(&asked.command_line()));
    field("cwd", asked.cwd.as_deref());
    field("host", asked.host.as_deref());
    field("question", Some(&a.question));
    field("prompt_line", a.prompt_line.as_deref());
    field("prompt_kind", a.prompt_kind.map(|k| k.as_str()));
    field("rule_name", a.rule_name.as_deref());
    field("default_value", a.default_value.as_deref());
    field(
        "allows_text",
        Some(if a.allows_text { "yes" } else { "no" }),
    );
    field("created_at", Some(&a.created_at));
    let left = time_left(&a);
    field(
        "expires_at",
        a.expires_at
            .as_deref()
            .map(|e| format!("{e} ({left} left, then {})", a.expire_action))
            .as_deref(),
    );
    field("reviews", hr_shared::reviews::summary(&a).as_deref());
    field("chosen_value", a.chosen_value.as_deref());
    field("decided_at", a.decided_at.as_deref());
    field("decided_by", a.decided_by.as_deref());
    field("decision_channel", a.decision_channel.as_deref());
    field("comment", a.comment.as_deref());
    field("consumed_at", a.consumed_at.as_deref());
    field("consumed_by", a.consumed_by.as_deref());
    field(
        "kept_for",
        a.kept_for
            .as_deref()
            .map(|r| format!("{r} (its resume, and no other run, may use it again)"))
            .as_deref(),
    );
    field("consumed_reason", a.consumed_reason.as_deref());
    field("claimed_by", a.claimed_by.as_deref());
    field("resumed_run_id", a.resumed_run_id.as_deref());
    field("request_fingerprint", a.request_fingerprint.as_deref());
    field("prompt_fingerprint", a.prompt_fingerprint.as_deref());
    crate::outln!("\noptions:");
    for o in &a.options_json {
        let default = if a.default_value.as_deref() == Some(o.value.as_str()) {
            "  (default)"
        } else {
            ""
        };
        crate::outln!(
            "  {:<12} {}{default}",
            sanitize_line(&o.value),
            sanitize_line(&o.label)
        );
    }
    if a.allows_text {
        crate::outln!("  (or any one line of text)");
    }
    if let Some(ctx_text) = a.context.as_ref().filter(|c| !c.trim().is_empty()) {
        crate::outln!("\ncontext:");
        for line in hr_shared::sanitize::sanitize_text(ctx_text).lines() {
            crate::outln!("  {line}");
        }
    }
    if a.status == ApprovalStatus::Pending {
        crate::outln!(
            "\ndecide: monitor decide {} {}",
            a.approval_id,
            a.valid_values()
                .iter()
                .map(|v| sanitize_line(v))
                .collect::<Vec<_>>()
                .join("|")
        );
    }
    Ok(())
}
