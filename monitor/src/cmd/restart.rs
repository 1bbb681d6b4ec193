//! `monitor restart TR-ID`: runs an ended run's command again, through headless-run, in its
//! working directory, as a new run linked to the old one.

use crate::cli::Ctx;
use crate::error::{CliError, CliResult};
use crate::{locate, parse};
use hr_shared::mode::{
    ENV_APPROVAL_ID, ENV_AUTO_APPROVAL, ENV_RESTART_OF, ENV_RESUMED_FROM, ENV_TOOL_RUN_ID,
    SavedEnvironment,
};
use hr_shared::rules::{self, RunPhase};
use hr_shared::sanitize::sanitize_line;
use std::process::Command;

#[derive(Debug, clap::Args)]
#[command(after_help = "\
The stored command line runs again through headless-run, in headless mode, in the run's
working directory and execution, with this terminal's output; the new run's metadata names
the old one (`restart_of`). Its outcome is the last line (`… ran again: exit N`); monitor
exits 0 once it ran, whatever the tool's own code (monitor's codes are its own: 1 when
headless-run itself failed, exit 125, or could not be started). The run's
environment is this process's, plus what the run kept when it parked (secret-looking
variables are never kept).

Refused (exit 3) for a run that is still live or parked on an approval (decide it; `monitor
worker` resumes it); refused (exit 1) for a run recorded on another host or by another user,
and inside a supervised tool.

Example:
  monitor restart TR-01m8a      # any unique prefix of the id")]
pub struct Args {
    /// The run whose command to run again (TR-…)
    id: String,
}

pub fn run(ctx: &Ctx, args: Args) -> CliResult {
    parse::run_id(&args.id)?;
    if let Some(why) = hr_shared::self_approval::inside_supervised_tool() {
        return Err(CliError::error(format!(
            "refusing to restart: {why}; a supervised tool cannot start runs through the operator's tools — restart from another terminal"
        )));
    }
    let mut store = ctx.open_local("running recorded commands again")?;
    let id = ctx.full_id(store.as_mut(), &args.id)?;
    let Some(run) = store.run(&id)? else {
        return Err(CliError::not_found(format!("no run {id}")));
    };
    match rules::phase(&run) {
        RunPhase::Ended { .. } | RunPhase::StallEnded | RunPhase::Resumed => {}
        RunPhase::Parked => {
            return Err(CliError::conflict(format!(
                "{id} is parked on an approval: decide it (`monitor approvals --run {id}`) and `monitor worker` resumes it"
            )));
        }
        RunPhase::Queued | RunPhase::Live(_) => {
            return Err(CliError::conflict(format!(
                "{id} is still {}: end it first (`monitor cancel {id}`)",
                run.status
            )));
        }
    }
    // Only the identity that started it runs it again, as itself, where it ran.
    let identity = store.identity()?;
    let me = rules::Executor {
        identity: &identity,
        uid: hr_shared::proc::effective_uid(),
        host: &hr_shared::proc::hostname(),
        pool: None,
    };
    if let Some(why) = rules::not_ours(&run, &me) {
        return Err(CliError::error(format!("{id}: {why}")));
    }
    let meta = run.metadata.as_ref();
    if run.argv_json.is_empty() {
        return Err(CliError::error(format!("{id} has no stored command line")));
    }
    let shim = locate::shim_binary().map_err(|e| CliError::error(e.to_string()))?;
    let mut cmd = Command::new(&shim);
    // The run's recorded environment as a worker's resume takes it (never a
    // HEADLESS_RUN_* setting from the row; withheld secrets from this caller's own), and the
    // caller's own config file.
    if let Some(saved) = meta
        .and_then(|m| m.get("env"))
        .and_then(|e| serde_json::from_value::<SavedEnvironment>(e.clone()).ok())
    {
        cmd.envs(saved.restore(|k| std::env::var_os(k)).vars);
    }
    match crate::worker::own_config_file() {
        Some(file) => cmd.env("HEADLESS_RUN_CONFIG", file),
        None => cmd.env_remove("HEADLESS_RUN_CONFIG"),
    };
    cmd.arg("--")
        .args(&run.argv_json)
        .env("HEADLESS", "1")
        .env(ENV_RESTART_OF, &id)
        .env("HEADLESS_RUN_HOME", &ctx.paths.root)
        .env("HEADLESS_RUN_DB", ctx.paths.child_store())
        .env_remove(ENV_TOOL_RUN_ID)
        .env_remove(ENV_RESUMED_FROM)
        .env_remove(ENV_APPROVAL_ID)
        .env_remove(ENV_AUTO_APPROVAL);
    match ctx.paths.child_listen_store() {
        Some(url) => cmd.env(hr_shared::url::ENV_LISTEN_DB, url),
        None => cmd.env_remove(hr_shared::url::ENV_LISTEN_DB),
    };
    if let Some(ex) = &run.execution_id {
        cmd.env(hr_shared::mode::ENV_EXECUTION_ID, ex);
    }
    if let Some(cwd) = &run.cwd {
        if !std::path::Path::new(cwd).is_dir() {
            return Err(CliError::error(format!(
                "{id}'s working directory {} is gone",
                sanitize_line(cwd)
            )));
        }
        cmd.current_dir(cwd);
    }
    eprintln!(
        "monitor: restarting {id}: {} in {}",
        sanitize_line(&crate::output::shell_words(&run.argv_json)),
        sanitize_line(run.cwd.as_deref().unwrap_or("."))
    );
    let status = cmd
        .status()
        .map_err(|e| CliError::error(format!("cannot start {}: {e}", shim.display())))?;
    match status.code() {
        Some(code) if code != i32::from(hr_shared::exit::shim::SHIM_FAILED) => {
            crate::outln!("{id} ran again: exit {code} (monitor runs shows the new run)");
            Ok(())
        }
        Some(code) => Err(CliError::error(format!(
            "headless-run could not run {id} again (exit {code})"
        ))),
        None => Err(CliError::error(format!(
            "headless-run was killed by a signal while running {id} again"
        ))),
    }
}
