//! `headless-run`: runs a command-line tool in a pseudo-terminal, passes its output through
//! unchanged, records the run, enforces hard and stall timeouts, and (in headless mode)
//! turns a prompt nobody can see into an approval. See `headless-run --help`.

mod agent_hook;
mod blocked;
mod cli;
mod conversation;
mod event_fd;
mod finish;
mod gate;
mod group;
mod interactive;
mod notify;
mod permission;
mod pty;
mod queries;
mod recorder;
mod redact;
mod run;
mod screen;
mod signals;
mod spawn;
mod store;
mod supervise;

use std::process::ExitCode;

fn main() -> ExitCode {
    // Three threads allocate a little each: one malloc arena spares each new thread the
    // reservation and trimming of an arena of its own.
    #[cfg(target_env = "gnu")]
    // SAFETY: mallopt only tunes the allocator; called before any other thread exists.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 1);
    }
    // A server's token is the shim's alone: out of the environment the tool could read
    // through /proc before any thread starts.
    hr_shared::store::url::take_token();
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    if args.first().is_some_and(|a0| {
        std::path::Path::new(a0).file_name() == Some(notify::WATCHDOG_NAME.as_ref())
    }) {
        return ExitCode::from(notify::watchdog(&args[1..]));
    }
    // A run's last writes, handed over by a shim that has exited (`finish`).
    if args.len() == 1
        && std::path::Path::new(&args[0]).file_name() == Some(finish::FINISHER_NAME.as_ref())
    {
        return ExitCode::from(finish::main());
    }
    // `headless-run --hook AGENT` / `--mcp`: an agent's permission hook, not a run.
    if args.len() > 1
        && (args[1] == "--hook" || args[1] == "--mcp")
        && std::path::Path::new(&args[0]).file_name()
            == Some(hr_shared::tool_path::SHIM_NAME.as_ref())
    {
        return ExitCode::from(agent_hook::main(&args[1..]));
    }
    // A pipeline step's headless-run waits here until its runner has recorded its pid.
    if !gate::pass() {
        return ExitCode::from(hr_shared::exit::shim::SHIM_FAILED);
    }
    ExitCode::from(run::main_with(args))
}
