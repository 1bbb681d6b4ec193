//! `monitor token`: the API tokens `monitor serve` accepts.

use crate::cli::Ctx;
use crate::error::{CliError, CliResult};
use crate::serve::tokens::{self, Role, Token};

#[derive(Debug, clap::Args)]
#[command(after_help = "\
A token is shown once, when it is made; only its SHA-256 is kept (STATE/tokens.json, 0600).
Send it as `Authorization: Bearer TOKEN`. Decisions made with it are recorded as decided by
the token's name, channel `http`. Never put a token in a supervised tool's environment.

Examples:
  monitor token create alice-laptop --role operator --expires 30d
  monitor token create bob --role operator --group ops
  monitor token create dashboard --role viewer
  monitor token list
  monitor token revoke alice-laptop")]
pub struct Args {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, clap::Subcommand)]
enum Command {
    /// Make a token and print it (once)
    Create {
        /// Its name: what decisions made with it are recorded as
        name: String,
        /// What it may do
        #[arg(long, value_enum)]
        role: Role,
        /// Ends after this long (e.g. 12h, 30d); default: never
        #[arg(long, value_name = "DUR", value_parser = crate::parse::nonzero)]
        expires: Option<std::time::Duration>,
        /// A reviewer group its holder belongs to (repeat for several): approvals that need
        /// reviewers of that group (`[[reviewers]] group = …`) accept its decisions
        #[arg(long = "group", value_name = "GROUP")]
        groups: Vec<String>,
    },
    /// The tokens (never their secrets)
    List,
    /// End a token now
    Revoke { name: String },
}

pub fn run(ctx: &Ctx, args: Args) -> CliResult {
    let now = hr_shared::time::now_rfc3339();
    let mut all = tokens::load(&ctx.paths).map_err(CliError::error)?;
    match args.command {
        Command::Create {
            name,
            role,
            expires,
            groups,
        } => {
            if !tokens::valid_name(&name) {
                return Err(CliError::usage(
                    "a token name is letters, digits, `.`, `_`, `-` and `@`, at most 64",
                ));
            }
            if let Some(bad) = groups.iter().find(|g| !tokens::valid_name(g)) {
                return Err(CliError::usage(format!(
                    "--group {}: a group name is letters, digits, `.`, `_`, `-` and `@`, at most 64",
                    hr_shared::sanitize::sanitize_line(bad)
                )));
            }
            if all.iter().any(|t| t.name == name && t.live(&now)) {
                return Err(CliError::usage(format!(
                    "a token named {name} is in force; revoke it first"
                )));
            }
            let secret = tokens::new_secret().map_err(CliError::error)?;
            all.retain(|t| t.name != name);
            all.push(Token {
                name,
                role,
                hash: tokens::hash(&secret),
                created_at: now,
                expires_at: expires
                    .map(|d| hr_shared::time::to_rfc3339(std::time::SystemTime::now() + d)),
                revoked_at: None,
                groups,
            });
            tokens::save(&ctx.paths, &all).map_err(CliError::error)?;
            crate::outln!("{secret}");
        }
        Command::List => {
            crate::outln!(
                "{:24} {:9} {:8} {:26} {:26} GROUPS",
                "NAME",
                "ROLE",
                "STATE",
                "CREATED",
                "EXPIRES"
            );
            for t in &all {
                let state = if t.revoked_at.is_some() {
                    "revoked"
                } else if t.live(&now) {
                    "live"
                } else {
                    "expired"
                };
                crate::outln!(
                    "{:24} {:9} {:8} {:26} {:26} {}",
                    t.name,
                    t.role.as_str(),
                    state,
                    t.created_at,
                    t.expires_at.as_deref().unwrap_or("never"),
                    if t.groups.is_empty() {
                        "-".to_owned()
                    } else {
                        t.groups.join(",")
                    }
                );
            }
        }
        Command::Revoke { name } => {
            let Some(t) = all
                .iter_mut()
                .find(|t| t.name == name && t.revoked_at.is_none())
            else {
                return Err(CliError::not_found(format!("no token {name} in force")));
            };
            t.revoked_at = Some(now);
            tokens::save(&ctx.paths, &all).map_err(CliError::error)?;
            crate::outln!("revoked {name}");
        }
    }
    Ok(())
}
