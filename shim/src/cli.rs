//! How the shim was called: explicitly (`headless-run [OPTIONS] [--] TOOL ARGS`) or through a
//! link named after the tool (busybox style: every argument belongs to the tool).

use clap::Parser;
use hr_shared::config::{Limit, OnPrompt, OnStall, Settings};
use hr_shared::tool_path::SHIM_NAME;
use std::ffi::OsString;
use std::path::{Path, PathBuf};

const AFTER_HELP: &str = "\
Modes:
  Headless (HEADLESS=1, or CI set to anything but \"\", 0, false): the tool runs in a pty;
  prompts become approvals (see `monitor approvals`). Otherwise, when stdin is a terminal,
  the tool runs with the terminal as usual and the run is only recorded. HEADLESS=0 forces
  the latter.

Nothing asked:
  A program that waits for keys with nothing asked (an editor, top, htop, a full-screen
  REPL) is ended (TERM) after --not-prompt-timeout, as it would end without a terminal; a
  REPL asking to confirm its exit after EOF gets EOF again; a pager run directly writes to
  a pipe, as without a terminal.

Coding agents:
  A run of a known coding agent (claude, codex, gemini, aider, …) waits at its prompts
  unless exit mode is asked for: a conversation cannot be re-run.
  headless-run --hook claude [--install [--settings FILE]]   Claude Code's permission hook
  headless-run --mcp     an MCP permission prompt tool for claude -p
  Both ask the run that supervises the agent (HEADLESS=1 headless-run -- claude …).

Symlink mode:
  A link to headless-run named after a tool (see `monitor install`) runs that tool: all
  arguments go to the tool, options come from the environment and the config file.

Exit codes:
  0-255  the tool's own exit code        128+N  the tool died of signal N
  90     waiting for approval            91     approval rejected or expired
  92     stalled (no output/heartbeat)   93     secret prompt refused in headless mode
  124    hard timeout                    125    headless-run itself failed
  126    tool not executable             127    tool not found

Environment:
  HEADLESS_RUN_HOME, HEADLESS_RUN_DB, HEADLESS_RUN_TIMEOUT, HEADLESS_RUN_STALL_TIMEOUT,
  HEADLESS_RUN_ON_STALL, HEADLESS_RUN_ON_PROMPT, HEADLESS_RUN_PROMPT_IDLE,
  HEADLESS_RUN_NOT_PROMPT_TIMEOUT, HEADLESS_RUN_KILL_GRACE, HEADLESS_RUN_EXECUTION_ID,
  HEADLESS_RUN_STDIN=pass|pty, HEADLESS_RUN_SHIM_DIR, HEADLESS_RUN_CONFIG, HEADLESS_RUN_POOL,
  HEADLESS_RUN_STORE_DEFER (default 20ms: a run that ends sooner is written to the embedded
  store by a finisher after headless-run has exited; monitor waits for it)
  (HEADLESS_RUN_DB=postgres://… records on a PostgreSQL server;
  HEADLESS_RUN_LISTEN_DB=postgres://… is where a waiting run LISTENs for its notifications
  when no monitor worker of the state dir relays them, else HEADLESS_RUN_DB)

Examples:
  HEADLESS=1 headless-run --timeout 30m -- terraform apply
  headless-run --on-prompt wait --stall-timeout 5m -- ./deploy.sh
  monitor install terraform && export PATH=~/.local/share/headless-run/bin:$PATH";

/// The explicit command line.
#[derive(Debug, Parser)]
#[command(
    name = "headless-run",
    version,
    about = "Run a command-line tool so that it can never hang unseen: in a pty, recorded, \
             with timeouts, and with its prompts turned into approvals.",
    after_help = AFTER_HELP,
    override_usage = "headless-run [OPTIONS] [--] TOOL [ARGS]..."
)]
#[derive(Default)]
pub struct Flags {
    /// Hard wall-clock limit, e.g. 30m (env HEADLESS_RUN_TIMEOUT; default none)
    #[arg(long, value_name = "DUR", value_parser = Limit::parse)]
    pub timeout: Option<Limit>,
    /// No output and no heartbeat for this long is a stall (env HEADLESS_RUN_STALL_TIMEOUT; default 10m)
    #[arg(long, value_name = "DUR", value_parser = Limit::parse)]
    pub stall_timeout: Option<Limit>,
    /// On a stall: end the tool (exit 92), or only mark the run stalled
    #[arg(long, value_name = "kill|mark", value_parser = str::parse::<OnStall>)]
    pub on_stall: Option<OnStall>,
    /// On a prompt in headless mode: exit 90, or keep the tool alive and wait for the decision
    #[arg(long, value_name = "exit|wait", value_parser = str::parse::<OnPrompt>)]
    pub on_prompt: Option<OnPrompt>,
    /// How long output must be idle before the prompt detector looks (default 300ms)
    #[arg(long, value_name = "DUR", value_parser = Limit::parse)]
    pub prompt_idle: Option<Limit>,
    /// A program waiting for keys with nothing asked (an editor, top) is ended, as without a
    /// terminal, after this long; none: it waits (env HEADLESS_RUN_NOT_PROMPT_TIMEOUT; default 5s)
    #[arg(long, value_name = "DUR", value_parser = Limit::parse)]
    pub not_prompt_timeout: Option<Limit>,
    /// Groups runs (env HEADLESS_RUN_EXECUTION_ID)
    #[arg(long, value_name = "ID")]
    pub execution_id: Option<String>,
    /// State directory (env HEADLESS_RUN_HOME; default ~/.local/state/headless-run)
    #[arg(long, value_name = "DIR")]
    pub state_dir: Option<PathBuf>,
    /// Run the tool in this directory, as `cd DIR && headless-run …` would (exit 125 when
    /// it cannot be entered)
    #[arg(short = 'C', long, value_name = "DIR")]
    pub cwd: Option<PathBuf>,
    /// The tool and its arguments
    // Only an explicit `--` or the first word that is not an option starts the tool, so a
    // mistyped option (`--tiemout`) is a usage error, not a tool of that name.
    #[arg(required = true, trailing_var_arg = true, value_name = "TOOL")]
    pub command: Vec<OsString>,
}

impl Flags {
    /// The settings the flags override.
    pub fn settings(&self) -> Settings {
        Settings {
            timeout: self.timeout,
            stall_timeout: self.stall_timeout,
            on_stall: self.on_stall,
            on_prompt: self.on_prompt,
            prompt_idle: self.prompt_idle,
            not_prompt_timeout: self.not_prompt_timeout,
            ..Settings::default()
        }
    }
}

/// A parsed invocation.
#[derive(Debug)]
pub struct Invocation {
    /// The tool as named (`terraform`, `./deploy.sh`).
    pub tool: OsString,
    pub args: Vec<OsString>,
    pub flags: Option<Flags>,
}

/// What to do.
pub enum Parsed {
    Run(Invocation),
    /// Print `text` (to stdout when `code` is 0, else stderr) and exit.
    Exit {
        code: u8,
        text: String,
    },
}

/// Parses the process arguments.
pub fn parse(argv: Vec<OsString>) -> Parsed {
    let argv0 = argv
        .first()
        .cloned()
        .unwrap_or_else(|| OsString::from(SHIM_NAME));
    let name = Path::new(&argv0)
        .file_name()
        .map(|n| n.to_owned())
        .unwrap_or_default();
    if !name.is_empty() && name != SHIM_NAME {
        return Parsed::Run(Invocation {
            tool: name,
            args: argv.into_iter().skip(1).collect(),
            flags: None,
        });
    }
    // `headless-run -- TOOL ARGS`, the usual call from scripts, has no option to parse:
    // building clap's command for it cost a tenth of a millisecond of every start.
    if argv.len() > 2 && argv[1] == "--" {
        let mut rest = argv.into_iter().skip(2);
        return Parsed::Run(Invocation {
            tool: rest.next().unwrap_or_default(),
            args: rest.collect(),
            flags: Some(Flags::default()),
        });
    }
    match Flags::try_parse_from(argv) {
        Ok(mut flags) => {
            let mut command = std::mem::take(&mut flags.command).into_iter();
            let tool = command.next().unwrap_or_default();
            Parsed::Run(Invocation {
                tool,
                args: command.collect(),
                flags: Some(flags),
            })
        }
        Err(e) => {
            use clap::error::ErrorKind;
            let code = match e.kind() {
                ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => 0,
                _ => hr_shared::exit::shim::SHIM_FAILED,
            };
            Parsed::Exit {
                code,
                text: e.render().to_string(),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(v: &[&str]) -> Vec<OsString> {
        v.iter().map(OsString::from).collect()
    }

    /// `-- TOOL ARGS` skips clap: the same invocation as clap's parse of it.
    #[test]
    fn a_bare_double_dash_call_parses_as_clap_would() {
        for call in [
            &["/usr/bin/headless-run", "--", "rm", "-i", "--timeout", "x"][..],
            &["headless-run", "--", "true"][..],
            &["headless-run", "--", "--", "-x"][..],
            &["headless-run", "--", ""][..],
        ] {
            let Parsed::Run(fast) = parse(args(call)) else {
                panic!("{call:?}")
            };
            let clap = Flags::try_parse_from(args(call)).unwrap();
            assert_eq!(fast.tool, clap.command[0], "{call:?}");
            assert_eq!(fast.args, clap.command[1..], "{call:?}");
            let flags = fast.flags.expect("explicit mode");
            assert_eq!(
                format!("{:?}", flags.settings()),
                format!("{:?}", clap.settings())
            );
            assert!(
                flags.state_dir.is_none() && flags.cwd.is_none() && flags.execution_id.is_none()
            );
        }
        // `headless-run --` alone is clap's usage error.
        assert!(matches!(
            parse(args(&["headless-run", "--"])),
            Parsed::Exit { code: 125, .. }
        ));
    }

    #[test]
    fn explicit_mode_stops_at_the_tool() {
        let Parsed::Run(inv) = parse(args(&[
            "/usr/bin/headless-run",
            "--timeout",
            "5s",
            "rm",
            "-i",
            "--timeout",
            "x",
        ])) else {
            panic!()
        };
        assert_eq!(inv.tool, "rm");
        assert_eq!(inv.args, args(&["-i", "--timeout", "x"]));
        assert_eq!(
            inv.flags.unwrap().timeout,
            Some(Limit(Some(std::time::Duration::from_secs(5))))
        );
    }

    #[test]
    fn double_dash_and_hyphen_tools() {
        let Parsed::Run(inv) = parse(args(&["headless-run", "--", "-weird", "a"])) else {
            panic!()
        };
        assert_eq!(inv.tool, "-weird");
    }

    #[test]
    fn symlink_mode_passes_everything() {
        let Parsed::Run(inv) = parse(args(&["/shims/terraform", "--timeout", "apply"])) else {
            panic!()
        };
        assert_eq!(inv.tool, "terraform");
        assert_eq!(inv.args, args(&["--timeout", "apply"]));
        assert!(inv.flags.is_none());
    }

    #[test]
    fn usage_errors_exit_125() {
        for bad in [
            &["headless-run"][..],
            &["headless-run", "--timeout", "soon", "x"],
            &["headless-run", "--on-stall", "nap", "x"],
            &["headless-run", "--tiemout", "1s", "--", "true"],
            &["headless-run", "-x", "true"],
        ] {
            match parse(args(bad)) {
                Parsed::Exit { code, .. } => assert_eq!(code, 125, "{bad:?}"),
                Parsed::Run(_) => panic!("{bad:?} parsed"),
            }
        }
        assert!(matches!(
            parse(args(&["headless-run", "--help"])),
            Parsed::Exit { code: 0, .. }
        ));
        let Parsed::Exit { text, .. } = parse(args(&["headless-run", "--tiemout", "1s", "true"]))
        else {
            panic!("parsed")
        };
        assert!(
            text.contains("--tiemout") && text.contains("--timeout"),
            "{text}"
        );
        // A tool's own options after its name are its own.
        let Parsed::Run(inv) = parse(args(&["headless-run", "ls", "-la", "--color"])) else {
            panic!()
        };
        assert_eq!(inv.args, args(&["-la", "--color"]));
    }
}
