//! `monitor decide AP-ID VALUE`: one decision, first writer wins, never from inside a
//! supervised tool (no self-approval).

use crate::cli::Ctx;
use crate::error::{CliError, CliResult};
use crate::parse;
use hr_shared::approvals::{self, Approval, DecideOutcome, Decider, PromptKind};
use hr_shared::proc;
use hr_shared::sanitize::sanitize_line;
use hr_shared::status::ApprovalStatus;
use hr_shared::store::RememberScope;

const AFTER_HELP: &str = "\
VALUE is `approve` (the approving option), `reject` (or `abort`: end the tool), one of
the approval's option values (`monitor show AP-…` lists them), or free text where the
approval allows it.

The first decision wins: deciding an approval someone else already decided exits 3 and
says who decided it and when; repeating the same decision is a no-op (exit 0). A value
that is not valid exits 2 and lists the valid ones; an unknown id exits 4.

An approval never changes once asked: when a retry shows another screen (\"Plan: 1 to
add\" became \"42 to destroy\"), the old approval ends superseded and a new one is asked.
Deciding the old one exits 3 and names the new one, so a script that approves an id it
has not read never approves what it did not see. --seen VERSION (the `screen_digest` that
`monitor show --json` prints) refuses the decision (exit 3) unless the approval is that
version.

decided_by is the OS user running this command (from its uid, not $USER); with --server,
the server records the token's name, channel http (a viewer or runner token may not
decide). Deciding is refused inside a tool supervised by headless-run
(HEADLESS_RUN_TOOL_RUN_ID set, or a headless-run ancestor process): a tool cannot approve
its own prompts.

--remember stores an approval as a policy: later prompts with the same prompt fingerprint
of the same command line in the same directory are answered the same way (each still gets
its own approval row, decided by policy:remembered:AP-…). --any-args widens that to any
arguments of the tool, --any-dir to any directory; the scope is printed. Rejections are
not remembered.

Examples:
  monitor decide AP-01J… approve
  monitor decide AP-01J… reject --comment 'not on a Friday'
  monitor decide AP-01J… y --remember --any-dir";

#[derive(Debug, clap::Args)]
#[command(after_help = AFTER_HELP)]
pub struct Args {
    /// The approval to decide (AP-…)
    id: String,
    /// approve, reject, an option value, or free text where allowed
    value: String,
    /// A comment stored with the decision
    #[arg(long, value_name = "T")]
    comment: Option<String>,
    /// Decide only if the approval is this version (its screen_digest, as you read it)
    #[arg(long, value_name = "VERSION")]
    seen: Option<String>,
    /// Also answer this prompt of this command, in this directory, the same way from now on
    #[arg(long)]
    remember: bool,
    /// With --remember: for any arguments of the tool, not only this command line
    #[arg(long, requires = "remember")]
    any_args: bool,
    /// With --remember: in any directory, not only this one
    #[arg(long, requires = "remember")]
    any_dir: bool,
    /// Print the result as a JSON object: schema, outcome (`decided`; `unchanged` for the
    /// same decision again; `reviewed` when it counted but the approval needs more
    /// reviewers or a wait timer holds it) and the approval's row
    #[arg(long)]
    json: bool,
}

pub fn run(ctx: &Ctx, args: Args) -> CliResult {
    refuse_inside_supervised_tool()?;
    parse::approval_id(&args.id)?;
    if args
        .comment
        .as_deref()
        .is_some_and(|c| c.chars().any(|ch| ch.is_control() && ch != '\n'))
    {
        return Err(CliError::usage(
            "--comment must not hold control characters",
        ));
    }
    if args.remember && !hr_shared::store::capabilities::of(&ctx.paths).admin {
        // Checked before deciding: the decision must not go through without it.
        return Err(CliError::usage(
            "--remember is not available with --server (remembered decisions are kept in the server's store, not served); decide without --remember, or remember it on the server's host",
        ));
    }
    let mut store = ctx.open()?;
    let id = &ctx.full_id(store.as_mut(), &args.id)?;
    let Some(before) = store.approval(id)? else {
        return Err(CliError::not_found(format!("no approval {id}")));
    };
    if args.remember
        && (before.prompt_fingerprint.is_none()
            || before.prompt_kind == Some(PromptKind::Cooperative))
    {
        return Err(CliError::usage(format!(
            "{id} is a cooperative tool's request, which asks through AUTO_APPROVAL on a re-run, not at a prompt: there is nothing to remember; decide without --remember"
        )));
    }
    if args.remember
        && approvals::value_decision(&before, &args.value)
            .is_ok_and(|r| r.status == ApprovalStatus::Rejected)
    {
        return Err(CliError::usage(
            "--remember keeps approvals only (a remembered decision answers later prompts; it never ends a tool); decide without --remember",
        ));
    }
    if args.remember
        && approvals::value_decision(&before, &args.value).is_ok_and(|r| {
            r.chosen_value
                .as_deref()
                .is_some_and(|v| !before.options_json.iter().any(|o| o.value == v))
        })
    {
        return Err(CliError::usage(
            "--remember keeps one of the prompt's options only, never free text (a remembered value is kept in the store and typed into later prompts); decide without --remember",
        ));
    }
    // The scope of a remembered decision is the asking run's command line and directory:
    // without that run, it could only be remembered for any, and only when asked so.
    if args.remember
        && !(args.any_args && args.any_dir)
        && store.run(&before.tool_run_id)?.is_none()
    {
        return Err(CliError::usage(format!(
            "the run that asked {id} is gone (garbage-collected), so its command line and directory are unknown; pass --any-args --any-dir to remember it for every run of `{}`, or decide without --remember",
            sanitize_line(&before.tool_name)
        )));
    }
    let by = proc::current_user();
    let groups = proc::current_groups();
    let who = Decider {
        by: &by,
        channel: "cli",
        comment: args.comment.as_deref(),
        version: args.seen.as_deref(),
        groups: &groups,
    };
    let out = hr_shared::control::decide(store.as_mut(), &ctx.paths, id, &args.value, &who)?;
    let decided = match out {
        DecideOutcome::Decided(a) => {
            if !args.json {
                crate::outln!("{}", decided_line(&a));
            }
            report(&args, "decided", &a)?;
            a
        }
        DecideOutcome::AlreadySame(a) => {
            if !args.json {
                crate::outln!("already {}", decision_summary(&a));
            }
            report(&args, "unchanged", &a)?;
            a
        }
        // Counted (or counted before), and still pending: more reviewers, or a wait timer.
        DecideOutcome::Reviewed(a) => {
            if !args.json {
                crate::outln!(
                    "{}: your approval is counted; {}",
                    a.approval_id,
                    hr_shared::reviews::summary(&a).unwrap_or_default()
                );
            }
            report(&args, "reviewed", &a)?;
            if args.remember {
                return Err(CliError::usage(
                    "--remember: not remembered, since the approval is not decided yet (it needs more reviewers or its wait timer holds it)",
                ));
            }
            return Ok(());
        }
        refused @ (DecideOutcome::Conflict(_) | DecideOutcome::Changed(_)) => {
            return Err(CliError::conflict(
                approvals::refusal(&refused).unwrap_or_default(),
            ));
        }
        DecideOutcome::NotFound => return Err(CliError::not_found(format!("no approval {id}"))),
        // A pipeline's human step that names who decides it (checked by the store).
        DecideOutcome::Refused(why) => return Err(CliError::error(sanitize_line(&why))),
        DecideOutcome::Invalid(e) => {
            return Err(CliError::usage(format!(
                "`{}` is not a valid answer for {id}; valid values: {}{}",
                sanitize_line(&e.value),
                e.valid
                    .iter()
                    .map(|v| sanitize_line(v))
                    .collect::<Vec<_>>()
                    .join(", "),
                sanitize_line(&e.note)
            )));
        }
    };
    if args.remember {
        remember(ctx, &decided, &by, &args)?;
    }
    Ok(())
}

/// With --json: the decision as one object.
fn report(args: &Args, outcome: &str, a: &Approval) -> CliResult {
    if !args.json {
        return Ok(());
    }
    let row = serde_json::to_value(a).map_err(|e| CliError::error(e.to_string()))?;
    crate::output::print_report(serde_json::json!({ "outcome": outcome, "approval": row }))
}

/// `approved AP-… with `y` (by alice via cli)` / `rejected AP-… (by alice via cli)`.
fn decided_line(a: &Approval) -> String {
    let by = sanitize_line(a.decided_by.as_deref().unwrap_or("?"));
    let channel = sanitize_line(a.decision_channel.as_deref().unwrap_or("?"));
    let tail = match a.status {
        ApprovalStatus::Approved => "; `monitor worker` resumes a run that exited 90",
        _ => "",
    };
    match &a.chosen_value {
        Some(v) if a.status == ApprovalStatus::Approved => format!(
            "approved {} with `{}` (by {by} via {channel}){tail}",
            a.approval_id,
            sanitize_line(v)
        ),
        _ => format!("{} {} (by {by} via {channel})", a.status, a.approval_id),
    }
}

/// `approved: y by alice at T`.
fn decision_summary(a: &Approval) -> String {
    format!(
        "{}{} by {} at {}",
        a.status,
        a.chosen_value
            .as_deref()
            .map(|v| format!(": {}", sanitize_line(v)))
            .unwrap_or_default(),
        sanitize_line(a.decided_by.as_deref().unwrap_or("?")),
        a.decided_at.as_deref().unwrap_or("?")
    )
}

fn remember(ctx: &Ctx, a: &Approval, by: &str, args: &Args) -> CliResult {
    let mut store = ctx.open_local("remembering a decision (--remember)")?;
    let Some(fp) = a.prompt_fingerprint.as_deref() else {
        return Ok(());
    };
    let value = match a.status {
        ApprovalStatus::Approved => a.chosen_value.clone().unwrap_or_else(|| "approve".into()),
        // Rejected (by someone else first) or expired: nothing to remember.
        _ => {
            return Err(CliError::conflict(format!(
                "{} {}; nothing to remember",
                a.approval_id, a.status
            )));
        }
    };
    // The command that asked: its line and directory are the decision's scope.
    let run = store.run(&a.tool_run_id)?;
    let scope = RememberScope {
        argv: run
            .as_ref()
            .map(|r| r.argv_json.clone())
            .filter(|_| !args.any_args),
        cwd: run.and_then(|r| r.cwd).filter(|_| !args.any_dir),
    };
    let policy = store.remember(&a.tool_name, fp, &scope, &value, &a.approval_id, by)?;
    let args_part = match &policy.argv_json {
        Some(argv) => format!("of `{}`", sanitize_line(&crate::output::shell_words(argv))),
        None => format!("of `{}` with any arguments", sanitize_line(&a.tool_name)),
    };
    let dir_part = match &policy.cwd {
        Some(cwd) => format!("in {}", sanitize_line(cwd)),
        None => "in any directory".to_owned(),
    };
    let line = format!(
        "remembered: this prompt {args_part} {dir_part} is answered `{}` ({})",
        sanitize_line(&value),
        policy.policy_id
    );
    // With --json, stdout holds the one object.
    if args.json {
        eprintln!("{line}");
    } else {
        crate::outln!("{line}");
    }
    Ok(())
}

/// No self-approval: a tool supervised by headless-run must not decide its own prompts.
fn refuse_inside_supervised_tool() -> CliResult {
    match hr_shared::self_approval::inside_supervised_tool() {
        Some(why) => Err(CliError::error(format!(
            "refusing to decide: {why}; a tool cannot approve its own prompts — decide from another terminal"
        ))),
        None => Ok(()),
    }
}
