//! `monitor config [--tool T] [--example] [--json]`: the settings in force, each with where it
//! comes from (default, user file, project file, environment), and the example config file.

use crate::cli::Ctx;
use crate::error::{CliError, CliResult};
use crate::output::{self, Table};
use hr_shared::config::{self, Config};
use hr_shared::paths;
use hr_shared::sanitize::sanitize_line;

/// The example config file, as shipped (`monitor/config.example.toml`).
pub const EXAMPLE: &str = include_str!("../../config.example.toml");

#[derive(Debug, clap::Args)]
#[command(after_help = "\
Shows what headless-run would use for a tool run from this directory: each setting's value
and where it comes from — `default`, `user:PATH`, `project:PATH` (the nearest
.headless-run.toml, which may only describe prompts), `environment` (HEADLESS_RUN_*) — and
the prompt rules, policies and notify hook in force. Flags given to headless-run override
all of these.

Examples:
  monitor config
  monitor config --tool terraform
  monitor config --example > ~/.config/headless-run/config.toml")]
pub struct Args {
    /// The settings for this tool (its [tools.TOOL] sections apply)
    #[arg(long, value_name = "T", default_value = "")]
    tool: String,
    /// Print the example config file (every setting, commented) and exit
    #[arg(long)]
    example: bool,
    /// Print JSON
    #[arg(long)]
    json: bool,
}

pub fn run(_ctx: &Ctx, args: Args) -> CliResult {
    if args.example {
        crate::out!("{EXAMPLE}");
        return Ok(());
    }
    let cwd = std::env::current_dir().unwrap_or_else(|_| "/".into());
    let config = Config::load(&cwd, &paths::real_env)
        .map_err(|e| CliError::usage(sanitize_line(&e.to_string())))?;
    let env = config::env_settings(&paths::real_env)
        .map_err(|e| CliError::usage(sanitize_line(&e.to_string())))?;
    let settings = config.explain(&args.tool, &env);
    let rules: Vec<String> = config
        .prompt_rules()
        .map(|r| format!("{}:{}", r.origin.as_str(), r.name))
        .collect();
    let policies: Vec<String> = config.policies().map(|p| p.name.clone()).collect();
    let notify = config.notify().map(|n| n.command.clone());
    if args.json {
        return Ok(output::print_json(&serde_json::json!({
            "settings": settings,
            "prompt_rules": rules,
            "policies": policies,
            "notify": notify,
            "files": config.layers.iter().map(|(p, _)| p.display().to_string()).collect::<Vec<_>>(),
            "warnings": config.warnings,
        }))?);
    }
    let mut t = Table::new(vec!["SETTING", "VALUE", "FROM"]);
    for s in &settings {
        t.row(vec![
            s.key.to_owned(),
            sanitize_line(&s.value),
            sanitize_line(&s.from),
        ]);
    }
    crate::out!("{}", t.render(output::terminal_width()));
    let list = |v: &[String]| {
        if v.is_empty() {
            "none".to_owned()
        } else {
            sanitize_line(&v.join(", "))
        }
    };
    crate::outln!("prompt rules: {}", list(&rules));
    crate::outln!("policies: {}", list(&policies));
    crate::outln!(
        "notify: {}",
        notify
            .map(|c| sanitize_line(&output::shell_words(&c)))
            .unwrap_or_else(|| "none".into())
    );
    for w in &config.warnings {
        crate::outln!("warning: {}", sanitize_line(w));
    }
    Ok(())
}
