//! The command line: `monitor [SUBCOMMAND]`. With no subcommand, the dashboard.

use crate::cmd;
use crate::error::{CliError, CliResult};
use clap::{Parser, Subcommand};
use hr_shared::paths::StatePaths;
use hr_shared::store::{self, AdminStore, Done, OperatorStore};
use std::path::PathBuf;

const AFTER_HELP: &str = "\
Exit codes: 0 ok, 1 error, 2 usage or invalid value, 3 conflict (already decided),
4 not found.

State: --state-dir, else HEADLESS_RUN_HOME, else $XDG_STATE_HOME/headless-run, else
~/.local/state/headless-run; HEADLESS_RUN_DB overrides the database path only (or names a
PostgreSQL store: postgres://…; HEADLESS_RUN_LISTEN_DB=postgres://… then where to LISTEN for
its notifications when no `monitor worker` of the state dir relays them).

Server: --server URL (else HEADLESS_RUN_SERVER) runs `runs`, `approvals`, `show`, `decide`,
`wait`, `cancel`, `doctor` and the dashboard against a `monitor serve` server's API, with
a viewer or operator token: HEADLESS_RUN_TOKEN, else `token = \"…\"` in the credentials
file ($HEADLESS_RUN_CREDENTIALS, else $XDG_CONFIG_HOME/headless-run/credentials.toml),
which must be yours and mode 0600 (it may also hold `server = \"https://…\"` and
`ca = \"/path/ca.pem\"`). An https:// server is verified against the system's roots, or
HEADLESS_RUN_SERVER_CA. The server records decisions and cancels as the token's name over
http, and signals the run's headless-run itself. `worker`, `reconcile`, `gc`, `logs`,
`policies` and `restart` work on a store of this host and refuse a server; `token`,
`install` and `db` refuse --server. --server '' ignores HEADLESS_RUN_SERVER.";

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
    /// Colour status words in tables: auto (a terminal, NO_COLOR unset, TERM not dumb),
    /// always, never
    #[arg(long, global = true, value_name = "WHEN", default_value = "auto")]
    color: crate::output::ColorWhen,
    /// A `monitor serve` server to work against instead of a local store (default:
    /// HEADLESS_RUN_SERVER); token from HEADLESS_RUN_TOKEN or the credentials file
    #[arg(long, global = true, value_name = "URL")]
    server: Option<String>,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// List tool runs, newest first
    Runs(cmd::runs::Args),
    /// List approvals (pending ones by default)
    Approvals(cmd::approvals::Args),
    /// Show one run (with its approvals and output tail) or one approval
    Show(cmd::show::Args),
    /// Decide an approval: approve, reject, or pick an option
    Decide(cmd::decide::Args),
    /// Block until an approval is decided or a run ends
    Wait(cmd::wait::Args),
    /// The combined event log, or one run's output; -f follows
    Logs(cmd::logs::Args),
    /// Resume runs whose approval was decided; reconcile and expire on every pass
    Worker(cmd::worker::Args),
    /// One pass: fail runs whose headless-run vanished, expire overdue approvals
    Reconcile(cmd::reconcile::Args),
    /// End a live run: its tool's process group is ended, status cancelled
    Cancel(cmd::cancel::Args),
    /// Run an ended run's command again, in its directory, as a new run linked to it
    Restart(cmd::restart::Args),
    /// Create (or --list, --remove) links that run tools through headless-run
    Install(cmd::install::Args),
    /// Check permissions, schema, PATH, /proc access and the audit chain
    Doctor(cmd::doctor::Args),
    /// Delete finished runs older than a duration, with their approvals and logs
    Gc(cmd::gc::Args),
    /// The policies that decide without a person (config and remembered); remove one
    Policies(cmd::policies::Args),
    /// The settings in force and where each comes from; --example prints a config file
    Config(cmd::config::Args),
    /// Set up the PostgreSQL store: `db init URL`, `db grant USER runner|operator|viewer`
    Db(cmd::db::Args),
    /// Pipelines of supervised steps with human gates: run, resume, status, list, cancel
    Pipeline(cmd::pipeline::Args),
    /// Serve the operator API over HTTP (approvals, decisions, runs, metrics)
    Serve(crate::serve::Args),
    /// API tokens for `monitor serve`: create (shown once), list, revoke
    Token(cmd::token::Args),
    /// A signed, short-lived, single-use link to decide one approval on the web page
    Link(cmd::link::Args),
    /// Shell completions for monitor or headless-run (bash, zsh, fish, elvish, powershell)
    Completions(cmd::completions::Args),
    /// Write man pages for monitor, each subcommand and headless-run into a directory
    Man(cmd::completions::ManArgs),
}

/// The whole command line as clap knows it (for completions and man pages).
pub fn command() -> clap::Command {
    use clap::CommandFactory;
    Cli::command()
}

/// Where the state lives, and the database opened on demand.
pub struct Ctx {
    pub paths: StatePaths,
}

impl Ctx {
    /// Opens the store (an SQLite database must exist; it is migrated forward if older).
    /// Final rows a shim had to leave in the spool are written as it opens, so that what
    /// is shown is complete; a read-only database leaves them for a writer.
    pub fn open(&self) -> CliResult<Box<dyn OperatorStore>> {
        let mut store = store::operator(&self.paths);
        store.connect()?;
        Ok(store)
    }

    /// The store itself, for what a server's operator API does not serve (resuming runs,
    /// gc, remembered decisions, the audit chain's checks): refused with `--server`,
    /// naming `what`.
    pub fn open_local(&self, what: &'static str) -> CliResult<Box<dyn AdminStore>> {
        let mut store = store::local(&self.paths, what)?;
        store.connect()?;
        Ok(store)
    }

    /// [`Ctx::open_local`], or `None` when nothing has run with this state dir yet.
    pub fn open_local_if_any(&self, what: &'static str) -> CliResult<Option<Box<dyn AdminStore>>> {
        let mut store = store::local(&self.paths, what)?;
        match store.connect() {
            Ok(()) => Ok(Some(store)),
            Err(hr_shared::db::StoreError::Missing(_)) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// The store, or `None` when nothing has run with this state dir yet (no database):
    /// for listings, where no state is an empty answer rather than an error.
    pub fn open_if_any(&self) -> CliResult<Option<Box<dyn OperatorStore>>> {
        let mut store = store::operator(&self.paths);
        match store.connect() {
            Ok(()) => Ok(Some(store)),
            Err(hr_shared::db::StoreError::Missing(_)) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// The whole id that `input` names: any unique prefix of a run's (`TR-…`) or an
    /// approval's (`AP-…`) id, in any case. Unknown: exit 4; several: exit 2, naming them.
    pub fn full_id(&self, store: &mut dyn OperatorStore, input: &str) -> CliResult<String> {
        crate::parse::id_kind(input)?;
        let prefix = input.trim().to_ascii_uppercase();
        let found = store.ids_starting_with(&prefix, 10)?;
        let shown = hr_shared::sanitize::sanitize_line(input);
        match found.as_slice() {
            [] => Err(CliError::not_found(format!(
                "no {} {shown}",
                if prefix.starts_with(hr_shared::id::APPROVAL_PREFIX) {
                    "approval"
                } else {
                    "run"
                }
            ))),
            [one] => Ok(one.clone()),
            many => Err(CliError::usage(format!(
                "`{shown}` names {}{} ids: {}; give more of it",
                if many.len() >= 10 { "at least " } else { "" },
                many.len(),
                many.join(", ")
            ))),
        }
    }

    /// Appends an operation's events to the combined log and hands back its outcome.
    pub fn logged<T>(&self, done: Done<T>) -> T {
        hr_shared::control::log_events(&self.paths.combined_log(), &done.effects.events);
        done.value
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
    crate::output::set_color(cli.color);
    let mut paths = StatePaths::resolve(cli.state_dir.as_deref())
        .map_err(|e| CliError::error(e.to_string()))?;
    if cli.server.is_some() {
        paths.server =
            hr_shared::remote::server_url(cli.server.as_deref(), &hr_shared::paths::real_env);
    }
    let ctx = Ctx { paths };
    if let Some(command) = &cli.command {
        local_only(
            command,
            &ctx,
            cli.server.as_deref().is_some_and(|s| !s.is_empty()),
        )?;
    }
    match cli.command {
        Some(Command::Runs(args)) => cmd::runs::run(&ctx, args),
        Some(Command::Approvals(args)) => cmd::approvals::run(&ctx, args),
        Some(Command::Show(args)) => cmd::show::run(&ctx, args),
        Some(Command::Decide(args)) => cmd::decide::run(&ctx, args),
        Some(Command::Wait(args)) => cmd::wait::run(&ctx, args),
        Some(Command::Logs(args)) => cmd::logs::run(&ctx, args),
        Some(Command::Worker(args)) => cmd::worker::run(&ctx, args),
        Some(Command::Reconcile(args)) => cmd::reconcile::run(&ctx, args),
        Some(Command::Cancel(args)) => cmd::cancel::run(&ctx, args),
        Some(Command::Install(args)) => cmd::install::run(args),
        Some(Command::Doctor(args)) => cmd::doctor::run(&ctx, args),
        Some(Command::Gc(args)) => cmd::gc::run(&ctx, args),
        Some(Command::Policies(args)) => cmd::policies::run(&ctx, args),
        Some(Command::Config(args)) => cmd::config::run(&ctx, args),
        Some(Command::Db(args)) => cmd::db::run(args),
        Some(Command::Serve(args)) => crate::serve::run(&ctx, args),
        Some(Command::Token(args)) => cmd::token::run(&ctx, args),
        Some(Command::Link(args)) => cmd::link::run(&ctx, args),
        Some(Command::Pipeline(args)) => cmd::pipeline::run(&ctx, args),
        Some(Command::Completions(args)) => cmd::completions::completions(args),
        Some(Command::Restart(args)) => cmd::restart::run(&ctx, args),
        Some(Command::Man(args)) => cmd::completions::man(args),
        None => crate::tui::run(&ctx.paths),
    }
}

/// Refuses a command that works on this host's own store or files when a server is to be
/// used: those that need the store whether the server came from `--server` or
/// `HEADLESS_RUN_SERVER`; those that do not use it (`token`, `install`, `db`) only when
/// `--server` was given (`flag`), since a runner host or the server's own host may have
/// HEADLESS_RUN_SERVER set for other commands.
fn local_only(command: &Command, ctx: &Ctx, flag: bool) -> CliResult {
    let Some(server) = &ctx.paths.server else {
        return Ok(());
    };
    let (name, what, without_flag_too) = match command {
        Command::Worker(_) => (
            "worker",
            "it resumes the runs of this host from a store it reaches directly",
            true,
        ),
        Command::Reconcile(_) => (
            "reconcile",
            "it checks runs against this host's processes in a store it reaches directly (the server's host runs it)",
            true,
        ),
        Command::Gc(_) => ("gc", "it deletes from a store of this host", true),
        Command::Logs(_) => (
            "logs",
            "it reads this host's log files (`monitor --server URL show TR-…` shows a run's output tail)",
            true,
        ),
        Command::Policies(_) => (
            "policies",
            "remembered decisions are kept in the server's store, not served",
            true,
        ),
        Command::Restart(_) => (
            "restart",
            "it runs a run's command again on this host, from a store it reaches directly",
            true,
        ),
        Command::Token(_) => (
            "token",
            "tokens are made on the server's host, where `monitor serve` reads them",
            false,
        ),
        Command::Link(_) => (
            "link",
            "links are signed with the server's key, on the server's host",
            false,
        ),
        Command::Install(_) => (
            "install",
            "it makes links on this host and uses no server",
            false,
        ),
        Command::Db(_) => (
            "db",
            "it sets up a PostgreSQL store, named by its own URL",
            false,
        ),
        _ => return Ok(()),
    };
    if !flag && !without_flag_too {
        return Ok(());
    }
    let given = if flag {
        "--server".to_owned()
    } else {
        format!(
            "HEADLESS_RUN_SERVER={}",
            hr_shared::sanitize::sanitize_line(server)
        )
    };
    Err(CliError::usage(format!(
        "`monitor {name}` does not work against a server ({given}): {what}; run it on the server's host without a server"
    )))
}
