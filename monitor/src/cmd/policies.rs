//! `monitor policies [remove PO-ID]`: what decides prompts without a person — the config's
//! policies (with the file they come from) and the decisions remembered with `monitor decide
//! --remember` (with their scope) — and withdrawing a remembered one.

use crate::cli::Ctx;
use crate::error::{CliError, CliResult};
use crate::output::{self, Table, shell_words};
use hr_shared::config::Config;
use hr_shared::paths;
use hr_shared::policy::RememberedPolicy;
use hr_shared::sanitize::sanitize_line;
use serde::Serialize;

#[derive(Debug, clap::Args)]
#[command(after_help = "\
Lists every policy that can decide a prompt without a person: those of your config file
(`[[policies]]`, source user:PATH; a project's .headless-run.toml may hold none) and the
decisions remembered with `monitor decide … --remember` (id PO-…, source remembered, with the
command line and directory they are limited to). Each automatic decision is still an
approval row, decided by policy:NAME.

Examples:
  monitor policies
  monitor policies --json
  monitor policies remove PO-01J…     # withdraw a remembered decision (audited)")]
pub struct Args {
    #[command(subcommand)]
    action: Option<Action>,
    /// Print JSON
    #[arg(long)]
    json: bool,
}

#[derive(Debug, clap::Subcommand)]
enum Action {
    /// Withdraw a remembered decision: later prompts are asked again
    Remove {
        /// The remembered decision (PO-…)
        id: String,
    },
}

/// One policy, as listed.
#[derive(Debug, Serialize)]
struct Listed {
    /// `PO-…` for a remembered decision; none for a config policy.
    policy_id: Option<String>,
    name: String,
    tool: Option<String>,
    value: String,
    /// `user:PATH` or `remembered`.
    source: String,
    /// What it is limited to, in words.
    scope: String,
    created_by: Option<String>,
    created_at: Option<String>,
}

pub fn run(ctx: &Ctx, args: Args) -> CliResult {
    if let Some(Action::Remove { id }) = args.action {
        return remove(ctx, &id);
    }
    let mut listed = config_policies()?;
    if let Some(mut store) = ctx.open_local_if_any("listing remembered decisions")? {
        listed.extend(store.remembered()?.iter().map(remembered));
    }
    if args.json {
        return Ok(output::print_json(&listed)?);
    }
    if listed.is_empty() {
        crate::outln!("no policies");
        return Ok(());
    }
    let mut t = Table::new(vec!["ID", "NAME", "TOOL", "VALUE", "SCOPE", "SOURCE"]);
    for p in &listed {
        t.row(vec![
            p.policy_id.clone().unwrap_or_else(|| "-".into()),
            sanitize_line(&p.name),
            p.tool
                .as_deref()
                .map(sanitize_line)
                .unwrap_or_else(|| "any".into()),
            sanitize_line(&p.value),
            sanitize_line(&p.scope),
            sanitize_line(&p.source),
        ]);
    }
    crate::out!("{}", t.render(output::terminal_width()));
    Ok(())
}

/// The user config's policies (a project file's are never taken).
fn config_policies() -> CliResult<Vec<Listed>> {
    let cwd = std::env::current_dir().unwrap_or_else(|_| "/".into());
    let config = Config::load(&cwd, &paths::real_env)
        .map_err(|e| CliError::usage(sanitize_line(&e.to_string())))?;
    Ok(config
        .layers
        .iter()
        .flat_map(|(file, layer)| {
            layer.policies.iter().map(move |p| Listed {
                policy_id: None,
                name: p.name.clone(),
                tool: p.tool.clone(),
                value: p.value.clone(),
                source: format!("user:{}", file.display()),
                scope: format!(
                    "{} condition(s)",
                    p.when.len() + usize::from(p.prompt.is_some()) + usize::from(p.argv.is_some())
                ),
                created_by: None,
                created_at: None,
            })
        })
        .collect())
}

fn remembered(p: &RememberedPolicy) -> Listed {
    let args = match &p.argv_json {
        Some(argv) => format!("`{}`", shell_words(argv)),
        None => "any arguments".into(),
    };
    let dir = match &p.cwd {
        Some(cwd) => format!("in {cwd}"),
        None => "in any directory".into(),
    };
    Listed {
        policy_id: Some(p.policy_id.clone()),
        name: p.name.clone(),
        tool: p.tool_name.clone(),
        value: p.value.clone(),
        source: p.source.clone(),
        scope: format!("this prompt of {args} {dir}"),
        created_by: Some(p.created_by.clone()),
        created_at: Some(p.created_at.clone()),
    }
}

fn remove(ctx: &Ctx, id: &str) -> CliResult {
    if let Some(why) = hr_shared::self_approval::inside_supervised_tool() {
        return Err(CliError::error(format!(
            "refusing to change policies: {why}; a supervised tool must not change what decides its prompts"
        )));
    }
    if !id.starts_with("PO-") {
        return Err(CliError::usage(format!(
            "`{}` is not a remembered decision's id (PO-…): `monitor policies` lists them",
            sanitize_line(id)
        )));
    }
    let by = hr_shared::proc::current_user();
    match ctx
        .open_local("withdrawing a remembered decision")?
        .forget(id, &by)?
    {
        Some(p) => {
            crate::outln!(
                "removed {id}: `{}` prompts are asked again ({})",
                sanitize_line(p.tool_name.as_deref().unwrap_or("?")),
                sanitize_line(&remembered(&p).scope)
            );
            Ok(())
        }
        None => Err(CliError::not_found(format!(
            "no remembered decision {id} in force"
        ))),
    }
}
