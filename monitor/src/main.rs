//! `monitor`: the dashboard and command line over headless-run's state. One module per
//! subcommand under `cmd/`; `error` is the one place failures become exit codes.

mod cli;
mod cmd;
mod error;
mod locate;
mod output;
mod parse;
mod pipeline;
mod serve;
mod stop;
mod tui;
mod worker;

use std::process::ExitCode;

fn main() -> ExitCode {
    match cli::run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            if !e.message.is_empty() {
                eprintln!("monitor: {}", e.message);
            }
            ExitCode::from(e.code)
        }
    }
}
