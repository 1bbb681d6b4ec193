//! The command line: `monitor [SUBCOMMAND]`. With no subcommand, the dashboard.

use crate::cmd;
use crate::error::{CliError, CliResult};
use clap::{Parser, Subcommand};
use hr_shared::db::{self, OpenMode};
use hr_shared::paths::StatePaths;
use rusqlite::Connection;
use std::path::PathBuf;

const AFTER_HELP: &str = "\
Exit codes: 0 ok, 1 error, 2 usage or invalid value, 3 conflict (already decided),
4 not found.

State: --state-dir, else HEADLESS_RUN_HOME, else $XDG_STATE_HOME/headless-run, else
~/.local/state/headless-run; HEADLESS_RUN_DB overrides the database path only.";

#[derive(Debug, Parser)]
#[command(
    name = "monitor",
    version,
    about = "See and decide what headless-run'd tools are doing: runs, alerts, approvals.",
    after_help = AFTER_HELP
)]
struct Cli {
    /// State directory (default: HEADLESS_RUN_HOME or ~/.local/state/headless-run)
    #[arg(long, global = true, value_name = "DIR")]
    state_dir: Option<PathBuf>,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// List tool runs, newest first
    Runs(cmd::runs::Args),
    /// Show one run (with its output tail) or one approval
    Show(cmd::show::Args),
}

/// Where the state lives, and the database opened on demand.
pub struct Ctx {
    pub paths: StatePaths,
}

impl Ctx {
    /// Opens the existing database (migrating it forward if it is older).
    pub fn open(&self) -> CliResult<Connection> {
        Ok(db::open(&self.paths.db, OpenMode::Existing)?)
    }
}

/// Parses the command line and runs the command.
pub fn run() -> CliResult {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            use clap::error::ErrorKind;
            let _ = e.print();
            return match e.kind() {
                ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => Ok(()),
                _ => Err(CliError::silent(hr_shared::exit::monitor::USAGE)),
            };
        }
    };
    let paths = StatePaths::resolve(cli.state_dir.as_deref())
        .map_err(|e| CliError::error(e.to_string()))?;
    let ctx = Ctx { paths };
    match cli.command {
        Some(Command::Runs(args)) => cmd::runs::run(&ctx, args),
        Some(Command::Show(args)) => cmd::show::run(&ctx, args),
        None => crate::tui::run(&ctx.paths),
    }
}
