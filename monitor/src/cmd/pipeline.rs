//! `monitor pipeline run|resume|status|list|cancel|check`: pipelines of supervised steps with
//! human gates (`crate::pipeline`).

use crate::cli::Ctx;
use crate::error::{CliError, CliResult};
use crate::output::Table;
use crate::pipeline::engine::{self, StepStatus};
use crate::pipeline::file::Definition;
use crate::pipeline::run::{Driver, End, RunError};
use hr_shared::approvals::Decider;
use hr_shared::sanitize::sanitize_line;
use hr_shared::store::pipelines::{self, Execution, PipelineStore};
use hr_shared::{id, proc, time};
use serde_json::json;
use std::path::PathBuf;

#[derive(Debug, clap::Args)]
#[command(after_help = "\
A pipeline file (YAML) lists `nodes` — task (a command), gate (a command that passes or
fails; `retries`), human (an approval: title, question, options, default, expires), branch
(a structured condition: field, operator, value; on_true, on_false, max_iterations),
parallel, merge, subgraph (another file, in this file's directory or below it) — and
`edges` (from, to, an optional condition, and `map` of earlier steps' fields into the next
step's environment). `map` sets only names listed under `inputs:` at the top of the file,
or PIPELINE_… ones (not PIPELINE_VAR_…), and never one that loads code or configures a
tool (PATH, LD_*, BASH_*, PYTHON*, NODE_OPTIONS, GIT_*, *_PROXY, HEADLESS*, …), declared or
not. Fields: steps.ID.exit_code, steps.ID.status, steps.ID.iteration, steps.ID.comment,
steps.ID.result.PATH (the JSON a step sends as {\"event\":\"result\",\"data\":{…}} on
HEADLESS_RUN_EVENT_FD), vars.NAME. The file is checked in full before anything runs.

Every step runs through headless-run (timeouts, stalls, prompts → approvals; on_prompt wait
by default), with HEADLESS_RUN_EXECUTION_ID set to the pipeline's execution id. A human step
is an approval like any other: decide it with `monitor decide`, the dashboard, the web page
or POST /api/v1/executions/EX-…/approve; the approver's comment reaches the steps after it
as HEADLESS_RUN_APPROVAL_COMMENT. The store holds the steps' states: a runner killed at any
point is replaced by `pipeline resume EX-…`, which runs no completed step again and adopts a
step whose headless-run still runs or has ended.

Exit codes: run and resume — 0 completed, 1 failed or cancelled (or the runner could not go
on), 2 a bad file or usage, 3 the execution id is taken / another runner drives it / it has
ended, 90 left waiting for a decision (--detach); status, resume, cancel — 4 no such
execution; cancel — 3 it has ended already.

Examples:
  monitor pipeline check deploy.yaml
  monitor pipeline run deploy.yaml --var target=prod
  monitor pipeline run deploy.yaml --detach; monitor decide AP-… approve; monitor pipeline resume EX-…
  monitor pipeline status EX-01m8 --json")]
pub struct Args {
    #[command(subcommand)]
    command: Sub,
}

#[derive(Debug, clap::Subcommand)]
enum Sub {
    /// Run a pipeline file until it ends
    Run(RunArgs),
    /// Take over an execution whose runner is gone (or that waits for a decision) and
    /// carry on
    Resume(ResumeArgs),
    /// One execution: its status and its steps
    Status(StatusArgs),
    /// Executions, newest first
    List(ListArgs),
    /// Stop an execution: its running steps end, its pending human steps are rejected
    Cancel(CancelArgs),
    /// Check a pipeline file without running it
    Check(CheckArgs),
}

#[derive(Debug, clap::Args)]
struct RunArgs {
    /// The pipeline file (YAML)
    file: PathBuf,
    /// The execution id (default: a new EX-…)
    #[arg(long, value_name = "ID")]
    execution_id: Option<String>,
    /// A variable (vars.NAME in conditions, PIPELINE_VAR_NAME in steps); repeatable
    #[arg(long = "var", value_name = "NAME=VALUE")]
    vars: Vec<String>,
    /// Do not wait at a human step: exit 90 and leave it for `pipeline resume`
    #[arg(long)]
    detach: bool,
    /// Let the label workers of these other identities (PostgreSQL logins) run its
    /// labelled steps, when their own host's config trusts you too ([worker]
    /// pipelines_from); comma-separated. Fixed for the execution.
    #[arg(long, value_name = "LOGIN,…", value_delimiter = ',', value_parser = login_arg)]
    workers: Vec<String>,
    /// Print the outcome as JSON
    #[arg(long)]
    json: bool,
}

fn login_arg(s: &str) -> Result<String, String> {
    let ok = (1..=63).contains(&s.len())
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-' || b == b'.');
    if ok {
        Ok(s.to_owned())
    } else {
        Err("a login is letters, digits, `_`, `-` and `.`, at most 63".into())
    }
}

#[derive(Debug, clap::Args)]
struct ResumeArgs {
    /// The execution (EX-…)
    id: String,
    #[arg(long)]
    detach: bool,
    #[arg(long)]
    json: bool,
}

#[derive(Debug, clap::Args)]
struct StatusArgs {
    id: String,
    #[arg(long)]
    json: bool,
}

#[derive(Debug, clap::Args)]
struct ListArgs {
    /// At most this many
    #[arg(long, default_value_t = 50)]
    limit: usize,
    #[arg(long)]
    json: bool,
}

#[derive(Debug, clap::Args)]
struct CancelArgs {
    id: String,
    /// Why (recorded)
    #[arg(long)]
    reason: Option<String>,
    #[arg(long)]
    json: bool,
}

#[derive(Debug, clap::Args)]
#[command(after_help = "\
Every rule `pipeline run` applies, and nothing run: kinds and fields, targets, cycles only
through a branch with max_iterations, every node reachable, `map` only into a name listed
under `inputs:` (or PIPELINE_…) and never into one that loads code or configures a tool,
each subgraph a regular file in the directory of the file that names it or below it. The
file must be a regular file of at most 1 MB. An error names file:line:column; it quotes a
key or kind of FILE but never a value or a line, and nothing of a subgraph.

Exit codes: 0 the file is good, 2 it is refused (or cannot be read).

Examples:
  monitor pipeline check examples/deploy.yaml
  monitor pipeline check deploy.yaml && monitor pipeline run deploy.yaml")]
struct CheckArgs {
    /// The pipeline file (YAML)
    file: PathBuf,
}

pub fn run(ctx: &Ctx, args: Args) -> CliResult {
    match args.command {
        Sub::Check(a) => {
            let def = load(&a.file)?;
            crate::outln!(
                "{}: ok ({} nodes, {} edges, starts at {})",
                a.file.display(),
                def.nodes.len(),
                def.edges.len(),
                def.start
            );
            Ok(())
        }
        Sub::Run(a) => start(ctx, a),
        Sub::Resume(a) => resume(ctx, &a.id, a.detach, a.json),
        Sub::Status(a) => status(ctx, &a.id, a.json),
        Sub::List(a) => list(ctx, a.limit, a.json),
        Sub::Cancel(a) => cancel(ctx, &a.id, a.reason.as_deref(), a.json),
    }
}

/// The file, checked: every error it has, one a line, and how many when more than one.
fn load(file: &std::path::Path) -> CliResult<Definition> {
    Definition::load_all(file).map_err(|errors| {
        let mut text = errors
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join("\n");
        if errors.len() > 1 {
            text.push_str(&format!("\n{} errors", errors.len()));
        }
        CliError::usage(text)
    })
}

fn store(ctx: &Ctx) -> CliResult<Box<dyn PipelineStore>> {
    let mut s = pipelines::for_store(&ctx.paths)?;
    s.connect()?;
    Ok(s)
}

fn shim() -> CliResult<PathBuf> {
    crate::locate::shim_binary().map_err(|e| CliError::error(e.to_string()))
}

fn start(ctx: &Ctx, a: RunArgs) -> CliResult {
    let def = load(&a.file)?;
    let mut vars = def.vars.clone();
    for v in &a.vars {
        let Some((k, val)) = v.split_once('=') else {
            return Err(CliError::usage(format!("--var {v}: NAME=VALUE")));
        };
        if k.is_empty() || !k.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
            return Err(CliError::usage(format!(
                "--var {}: a name is letters, digits and _",
                sanitize_line(k)
            )));
        }
        vars.insert(k.to_owned(), val.to_owned());
    }
    let exid = match a.execution_id {
        Some(e) if safe_id(&e) => e,
        Some(e) => {
            return Err(CliError::usage(format!(
                "--execution-id {}: letters, digits, - and _ (at most 64)",
                sanitize_line(&e)
            )));
        }
        None => id::new_execution_id(),
    };
    let steps = engine::start(&def, &vars).map_err(CliError::error)?;
    let now = time::now_rfc3339();
    let me = crate::pipeline::run::me();
    let ex = Execution {
        execution_id: exid.clone(),
        name: def.name.clone(),
        file: Some(a.file.display().to_string()),
        dir: std::env::current_dir()
            .map_err(|e| CliError::error(format!("the current directory: {e}")))?
            .display()
            .to_string(),
        definition: serde_json::to_value(&def).map_err(|e| CliError::error(e.to_string()))?,
        vars: serde_json::to_value(&vars).map_err(|e| CliError::error(e.to_string()))?,
        status: (&engine::status(&def, &steps)).into(),
        steps,
        reason: None,
        runner: Some(me),
        heartbeat_at: Some(now.clone()),
        created_at: now.clone(),
        updated_at: now,
        version: 1,
        // The store records who started it (and, on the embedded store, as which uid).
        owner: None,
        uid: Some(proc::effective_uid()),
        // Pinned: whoever runs a step checks the stored definition against it.
        definition_digest: Some(def.digest()),
        workers: a.workers.clone(),
    };
    let mut st = store(ctx)?;
    if !st.pipeline_insert(&ex)? {
        return Err(CliError::conflict(format!(
            "execution {exid} exists already (pipeline resume {exid})"
        )));
    }
    if !a.json {
        eprintln!("monitor pipeline: {} started as {exid}", def.name);
    }
    let shim = shim()?;
    let mut driver = Driver::new(ctx.paths.clone(), st, shim, a.detach, a.json);
    let end = driver.drive(&exid)?;
    finish(ctx, &exid, end, a.json)
}

fn resume(ctx: &Ctx, exid: &str, detach: bool, json: bool) -> CliResult {
    let st = store(ctx)?;
    let mut driver = Driver::new(ctx.paths.clone(), st, shim()?, detach, json);
    match driver.claim(exid) {
        Ok(true) => {}
        Ok(false) => {
            return Err(CliError::conflict(format!(
                "{exid} has a runner that is alive; it carries on"
            )));
        }
        Err(e @ RunError::Unknown(_)) => return Err(CliError::not_found(e.to_string())),
        Err(e @ RunError::Ended(_)) => return Err(CliError::conflict(e.to_string())),
        // Unreadable, or the store failing: an error, not a conflict.
        Err(e) => return Err(e.into()),
    }
    if !json {
        eprintln!("monitor pipeline: resuming {exid}");
    }
    let end = driver.drive(exid)?;
    finish(ctx, exid, end, json)
}

/// Says how the drive ended, with the exit code.
fn finish(ctx: &Ctx, exid: &str, end: End, json: bool) -> CliResult {
    let (word, code, why) = match &end {
        End::Completed => ("completed", 0, None),
        End::Failed(r) => ("failed", 1, Some(r.clone())),
        End::Cancelled(r) => ("cancelled", 1, Some(r.clone())),
        End::Waiting => (
            "waiting_approval",
            hr_shared::exit::shim::APPROVAL_PENDING,
            None,
        ),
    };
    if json {
        let ex = store(ctx)?.pipeline(exid)?;
        crate::outln!(
            "{}",
            json!({
                "execution_id": exid,
                "outcome": word,
                "reason": why,
                "execution": ex.map(|e| execution_json(&e)),
            })
        );
    } else {
        match &why {
            Some(r) => crate::outln!("{exid} {word}: {}", sanitize_line(r)),
            None => crate::outln!("{exid} {word}"),
        }
        if end == End::Waiting {
            crate::outln!("  decide, then: monitor pipeline resume {exid}");
        }
    }
    if code == 0 {
        Ok(())
    } else {
        Err(CliError::silent(code))
    }
}

fn execution_json(e: &Execution) -> serde_json::Value {
    json!({
        "execution_id": e.execution_id,
        "name": e.name,
        "file": e.file,
        "status": e.status,
        "reason": e.reason,
        "runner": e.runner,
        "heartbeat_at": e.heartbeat_at,
        "created_at": e.created_at,
        "updated_at": e.updated_at,
        "vars": e.vars,
        "steps": e.steps,
    })
}

fn get(ctx: &Ctx, exid: &str) -> CliResult<Execution> {
    store(ctx)?.pipeline(exid)?.ok_or_else(|| {
        CliError::not_found(format!("no pipeline execution {}", sanitize_line(exid)))
    })
}

fn status(ctx: &Ctx, exid: &str, json: bool) -> CliResult {
    let ex = get(ctx, exid)?;
    if json {
        crate::outln!("{}", execution_json(&ex));
        return Ok(());
    }
    let steps = &ex.steps;
    crate::outln!(
        "{} {} {}{}",
        ex.execution_id,
        sanitize_line(&ex.name),
        ex.status,
        ex.reason
            .as_deref()
            .map(|r| format!(": {}", sanitize_line(r)))
            .unwrap_or_default()
    );
    // A node's label, where the file gave one, beside its id.
    let labels: std::collections::HashMap<&str, &str> = ex.definition["nodes"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|n| Some((n["id"].as_str()?, n["label"].as_str()?)))
        .collect();
    let mut t = Table::new(vec!["STEP", "ITER", "STATUS", "DETAIL"]);
    for s in steps {
        let mut detail = Vec::new();
        if let Some(c) = s.exit_code {
            detail.push(format!("exit {c}"));
        }
        if s.attempt > 0 {
            detail.push(format!("retries {}", s.attempt));
        }
        if let Some(r) = &s.run {
            if let Some(a) = &r.approval_id {
                detail.push(a.clone());
            }
            if let Some(p) = r.pid
                && s.status == StepStatus::Running
            {
                detail.push(format!("pid {p} on {}", sanitize_line(&r.host)));
            }
        }
        if let Some(c) = &s.comment {
            detail.push(format!("comment: {}", sanitize_line(c)));
        }
        if let Some(r) = &s.reason {
            detail.push(sanitize_line(r));
        }
        let name = match labels.get(s.node.as_str()) {
            Some(l) => format!("{} ({})", s.node, l),
            None => s.node.clone(),
        };
        t.row(vec![
            sanitize_line(&name),
            s.iteration.to_string(),
            s.status.as_str().to_owned(),
            detail.join(", "),
        ]);
    }
    crate::out!("{}", t.render(crate::output::terminal_width()));
    Ok(())
}

fn list(ctx: &Ctx, limit: usize, json: bool) -> CliResult {
    let all = store(ctx)?.pipelines(limit)?;
    if json {
        crate::outln!(
            "{}",
            serde_json::Value::Array(all.iter().map(execution_json).collect())
        );
        return Ok(());
    }
    if all.is_empty() {
        crate::outln!("no pipeline executions");
        return Ok(());
    }
    let mut t = Table::new(vec!["EXECUTION", "PIPELINE", "STATUS", "STARTED", "REASON"]);
    for e in &all {
        t.row(vec![
            e.execution_id.clone(),
            sanitize_line(&e.name),
            e.status.to_string(),
            time::age_of(&e.created_at)
                .map(|d| format!("{} ago", time::short_duration(d)))
                .unwrap_or_default(),
            sanitize_line(e.reason.as_deref().unwrap_or("")),
        ]);
    }
    crate::out!("{}", t.render(crate::output::terminal_width()));
    Ok(())
}

fn cancel(ctx: &Ctx, exid: &str, reason: Option<&str>, json: bool) -> CliResult {
    let mut st = store(ctx)?;
    let by = proc::current_user();
    let why = match reason {
        Some(r) => format!("cancelled by {by}: {}", sanitize_line(r)),
        None => format!("cancelled by {by}"),
    };
    let mut ex = st.pipeline(exid)?.ok_or_else(|| {
        CliError::not_found(format!("no pipeline execution {}", sanitize_line(exid)))
    })?;
    loop {
        if ex.is_final() {
            return Err(CliError::conflict(format!(
                "{exid} has ended already ({})",
                ex.status
            )));
        }
        // Only the steps the cancel changes are written.
        let before = ex.steps.clone();
        ex.cancel(&why);
        if st.pipeline_swap_from(&before, &ex)? {
            break;
        }
        ex = st
            .pipeline(exid)?
            .ok_or_else(|| CliError::not_found(exid.to_owned()))?;
    }
    // Its runs still going end too: pending human steps are rejected, running steps'
    // headless-runs are told to end their tools (the runner, if alive, also stops them).
    let mut op = ctx.open()?;
    let who = Decider {
        by: &by,
        channel: "cli",
        comment: reason,
        version: None,
        groups: &[],
    };
    let mut ended = 0;
    for r in st.execution_runs(exid)? {
        if r.status.is_final() {
            continue;
        }
        let host = hr_shared::rules::LocalHost::new();
        if hr_shared::control::cancel(
            op.as_mut(),
            &ctx.paths,
            &r.tool_run_id,
            Some(&why),
            &who,
            &host,
        )
        .is_ok()
        {
            ended += 1;
        }
    }
    if json {
        crate::outln!(
            "{}",
            json!({ "execution_id": exid, "outcome": "cancelled", "reason": why, "runs_ended": ended })
        );
    } else {
        crate::outln!("{exid} cancelled ({ended} runs ended)");
    }
    Ok(())
}

fn safe_id(id: &str) -> bool {
    (1..=64).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}
