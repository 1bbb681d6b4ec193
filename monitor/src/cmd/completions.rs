//! `monitor completions SHELL` and `monitor man DIR`: shell completions and man pages for
//! both binaries, generated from the same clap definitions their parsers use.

use crate::error::{CliError, CliResult};
use clap::{Args as ClapArgs, CommandFactory, ValueEnum};
use std::io::Write;
use std::path::PathBuf;

/// headless-run's own command-line definition, shared with the shim (compiled here for
/// its clap `Command` only; the shim's parsing code is unused in monitor).
#[allow(dead_code)]
#[path = "../../../shim/src/cli.rs"]
mod shim_cli;

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum Shell {
    Bash,
    Zsh,
    Fish,
    Elvish,
    Powershell,
}

#[derive(Debug, ClapArgs)]
#[command(after_help = "Examples:
  monitor completions bash > ~/.local/share/bash-completion/completions/monitor
  monitor completions zsh --for headless-run > ~/.zfunc/_headless-run
  monitor completions fish > ~/.config/fish/completions/monitor.fish")]
pub struct Args {
    /// The shell to complete in
    shell: Shell,
    /// Whose completions: monitor's (default) or headless-run's
    #[arg(long = "for", value_name = "BINARY", default_value = "monitor", value_parser = ["monitor", "headless-run"])]
    binary: String,
}

#[derive(Debug, ClapArgs)]
#[command(after_help = "Example:
  monitor man ~/.local/share/man/man1 && man monitor-decide")]
pub struct ManArgs {
    /// Where to write the pages (created if missing): monitor.1, monitor-SUBCOMMAND.1 for
    /// each subcommand, headless-run.1
    dir: PathBuf,
}

fn command_for(binary: &str) -> clap::Command {
    match binary {
        "headless-run" => shim_cli::Flags::command(),
        _ => crate::cli::command(),
    }
}

pub fn completions(args: Args) -> CliResult {
    let mut cmd = command_for(&args.binary);
    let name = args.binary.clone();
    let mut out = Vec::new();
    match args.shell {
        Shell::Bash => {
            clap_complete::generate(clap_complete::Shell::Bash, &mut cmd, &name, &mut out)
        }
        Shell::Zsh => clap_complete::generate(clap_complete::Shell::Zsh, &mut cmd, &name, &mut out),
        Shell::Fish => {
            clap_complete::generate(clap_complete::Shell::Fish, &mut cmd, &name, &mut out)
        }
        Shell::Elvish => {
            clap_complete::generate(clap_complete::Shell::Elvish, &mut cmd, &name, &mut out)
        }
        Shell::Powershell => {
            clap_complete::generate(clap_complete::Shell::PowerShell, &mut cmd, &name, &mut out)
        }
    }
    std::io::stdout()
        .write_all(&out)
        .map_err(|e| CliError::error(format!("cannot write the completions: {e}")))
}

pub fn man(args: ManArgs) -> CliResult {
    std::fs::create_dir_all(&args.dir)
        .map_err(|e| CliError::error(format!("cannot create {}: {e}", args.dir.display())))?;
    let mut written = Vec::new();
    let mut page = |name: &str, cmd: clap::Command| -> CliResult {
        let mut buf = Vec::new();
        // A page's name lives as long as the command (clap's names are static strings).
        let static_name: &'static str = Box::leak(name.to_owned().into_boxed_str());
        clap_mangen::Man::new(cmd.name(static_name))
            .render(&mut buf)
            .map_err(|e| CliError::error(format!("cannot render {name}.1: {e}")))?;
        let path = args.dir.join(format!("{name}.1"));
        std::fs::write(&path, buf)
            .map_err(|e| CliError::error(format!("cannot write {}: {e}", path.display())))?;
        written.push(path);
        Ok(())
    };
    let monitor = crate::cli::command();
    for sub in monitor.get_subcommands() {
        if sub.get_name() == "help" {
            continue;
        }
        page(&format!("monitor-{}", sub.get_name()), sub.clone())?;
    }
    page("monitor", monitor)?;
    page("headless-run", shim_cli::Flags::command())?;
    for p in &written {
        crate::outln!("{}", p.display());
    }
    Ok(())
}
