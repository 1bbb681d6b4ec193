//! The dashboard (`monitor` with no subcommand): alerts, runs, pending approvals and the
//! log, live. `app` holds the state and its `update`, `draw` only reads it, `input` reads
//! keys on its own thread, `feed` reads (and writes) the database on another, and `tail`
//! makes log files fit to draw. The loop here is generic over the ratatui backend, so tests
//! drive it with `TestBackend`.

pub mod app;
pub mod draw;
pub mod feed;
pub mod input;
pub mod tail;
#[cfg(test)]
mod tests;
pub mod view;

use crate::error::{CliError, CliResult};
use app::{App, Msg, Request, update};
use crossterm::ExecutableCommand;
use crossterm::cursor::{Hide, Show};
use crossterm::terminal::{
    EnterAlternateScreen, LeaveAlternateScreen, disable_raw_mode, enable_raw_mode,
};
use hr_shared::paths::StatePaths;
use hr_shared::store::capabilities::{self, Backend as Store};
use ratatui::Terminal;
use ratatui::backend::{Backend, CrosstermBackend};
use std::io::IsTerminal;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::time::{Duration, SystemTime};

/// The clock's tick: ages and time left are drawn to the second.
pub const TICK: Duration = Duration::from_secs(1);

/// Opens the dashboard on this terminal until `q`, Ctrl-C or a signal.
pub fn run(paths: &StatePaths) -> CliResult {
    if !std::io::stdout().is_terminal() || !std::io::stdin().is_terminal() {
        return Err(CliError::error(
            "the dashboard needs a terminal; for scripts use `monitor runs` or `monitor show`",
        ));
    }
    let read_only = hr_shared::self_approval::inside_supervised_tool();
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [libc::SIGTERM, libc::SIGHUP, libc::SIGINT, libc::SIGQUIT] {
        signal_hook::flag::register(sig, stop.clone())?;
    }
    let (tx, rx) = mpsc::channel::<Msg>();
    let (req_tx, req_rx) = mpsc::channel::<Request>();

    install_panic_hook();
    let guard = TerminalGuard::enter()?;
    let mut terminal = Terminal::new(CrosstermBackend::new(std::io::stdout()))?;
    input::spawn(tx.clone())?;
    feed::spawn(paths.clone(), read_only.clone(), tx, req_rx, stop)?;
    feed::spawn_bell(paths, req_tx.clone());
    let mut app = App::new(
        SystemTime::now(),
        if capabilities::of(paths).database_file {
            paths.root.display().to_string()
        } else {
            paths.store_label()
        },
        read_only,
    );
    app.server = (Store::of(paths) == Store::Server).then(|| paths.store_label());
    let result = run_loop(&mut terminal, &mut app, &rx, &req_tx);
    drop(guard);
    Ok(result?)
}

/// The loop: wait for a message (or the clock), apply it and everything else already
/// queued, draw once. Returns when the app wants to quit or every sender is gone.
pub fn run_loop<B: Backend>(
    terminal: &mut Terminal<B>,
    app: &mut App,
    rx: &Receiver<Msg>,
    requests: &Sender<Request>,
) -> Result<(), B::Error> {
    terminal.draw(|f| draw::draw(app, f))?;
    loop {
        let first = match rx.recv_timeout(TICK) {
            Ok(msg) => msg,
            Err(RecvTimeoutError::Timeout) => Msg::Tick(SystemTime::now()),
            Err(RecvTimeoutError::Disconnected) => return Ok(()),
        };
        let mut batch = vec![first];
        batch.extend(rx.try_iter());
        batch.push(Msg::Tick(SystemTime::now()));
        for msg in batch {
            for req in update(app, msg) {
                // The feed only goes away when the process is ending anyway.
                let _ = requests.send(req);
            }
        }
        if app.quit {
            return Ok(());
        }
        terminal.draw(|f| draw::draw(app, f))?;
    }
}

/// Puts the terminal back: cooked mode, main screen, cursor shown. Safe to call twice.
fn restore_terminal() {
    let _ = disable_raw_mode();
    let mut out = std::io::stdout();
    let _ = out.execute(LeaveAlternateScreen);
    let _ = out.execute(Show);
}

/// Raw mode and the alternate screen for as long as it lives; every way out (return,
/// error, unwinding) restores the terminal.
struct TerminalGuard;

impl TerminalGuard {
    fn enter() -> std::io::Result<Self> {
        enable_raw_mode()?;
        let guard = TerminalGuard;
        let mut out = std::io::stdout();
        out.execute(EnterAlternateScreen)?;
        out.execute(Hide)?;
        Ok(guard)
    }
}

impl Drop for TerminalGuard {
    fn drop(&mut self) {
        restore_terminal();
    }
}

/// A panic restores the terminal before the message is printed (release builds abort on
/// panic, so no destructor would run).
fn install_panic_hook() {
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        restore_terminal();
        previous(info);
    }));
}
