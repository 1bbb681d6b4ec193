//! `monitor db`: set up the PostgreSQL store (schema, roles) and give logins their role.

use crate::error::{CliError, CliResult};
use hr_shared::store::postgres;

#[derive(Debug, clap::Args)]
#[command(after_help = "\
The PostgreSQL store keeps runs and approvals of many hosts and users on one server, with
the server's roles as the trust boundary. Point both binaries at it with
HEADLESS_RUN_DB=postgres://USER@HOST/DB (libpq-style URL; PGPASSWORD and the other PG*
variables fill in what the URL leaves out).

Roles (`db grant`):
  runner    what a headless-run needs for its own run and nothing more
  operator  decide, cancel and read everything; decisions are recorded with the login
  viewer    read only

Examples:
  monitor db init postgres://admin@db.internal/headless
  monitor db grant ci-runner-1 runner --url postgres://admin@db.internal/headless
  monitor db grant alice operator --url postgres://admin@db.internal/headless")]
pub struct Args {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, clap::Subcommand)]
enum Command {
    /// Create or migrate the schema and the three roles (safe to run again, and from two
    /// hosts at once); needs a login that may create roles
    Init {
        /// The server (default: HEADLESS_RUN_DB)
        url: Option<String>,
    },
    /// Make an existing login a runner, operator or viewer
    Grant {
        /// The login (create it first, with a password or for peer or certificate auth)
        user: String,
        /// runner, operator or viewer
        #[arg(value_parser = ["runner", "operator", "viewer"])]
        role: String,
        /// The server (default: HEADLESS_RUN_DB)
        #[arg(long)]
        url: Option<String>,
    },
}

fn url_or_env(url: Option<String>) -> CliResult<String> {
    let url = url.or_else(hr_shared::store::url_from_env).ok_or_else(|| {
        CliError::usage("give the server's URL (postgres://…) or set HEADLESS_RUN_DB")
    })?;
    if !postgres::is_url(&url) {
        return Err(CliError::usage(format!(
            "`{}` is not a postgres:// URL",
            hr_shared::sanitize::sanitize_line(&url)
        )));
    }
    Ok(url)
}

pub fn run(args: Args) -> CliResult {
    match args.command {
        Command::Init { url } => {
            let report = postgres::init(&url_or_env(url)?)?;
            if report.from_version == report.to_version {
                crate::outln!(
                    "schema v{} is up to date; roles headless_runner, headless_operator, headless_viewer in place",
                    report.to_version
                );
            } else {
                crate::outln!(
                    "schema v{} → v{}; roles headless_runner, headless_operator, headless_viewer in place",
                    report.from_version,
                    report.to_version
                );
            }
        }
        Command::Grant { user, role, url } => {
            let url = url_or_env(url)?;
            let pg_role = postgres::grant(&url, &user, &role)?;
            crate::outln!(
                "{} is now a member of {pg_role}",
                hr_shared::sanitize::sanitize_line(&user)
            );
            if role == "runner" {
                // One login per OS user per host: a worker runs only its own login's runs,
                // as itself, so a login two users share lets each run the other's.
                crate::outln!(
                    "use {} for one OS user on one host only (each user of each host gets a runner login of its own)",
                    hr_shared::sanitize::sanitize_line(&user)
                );
                match postgres::shared_logins(&url) {
                    Ok(shared) => {
                        for s in shared.iter().filter(|s| s.login == user) {
                            eprintln!("monitor db grant: warning: {}", s.warning());
                        }
                    }
                    Err(e) => eprintln!(
                        "monitor db grant: warning: cannot check who uses {}: {e}",
                        hr_shared::sanitize::sanitize_line(&user)
                    ),
                }
            }
        }
    }
    Ok(())
}
