//! The input thread: blocks on the terminal's events and sends keys and resizes to the
//! dashboard's loop, so keys are read however long a draw or a query takes.

use super::app::Msg;
use crossterm::event::{self, Event};
use std::sync::mpsc::Sender;

/// Starts the input thread; it ends when the dashboard's loop is gone or the terminal is.
pub fn spawn(tx: Sender<Msg>) -> std::io::Result<std::thread::JoinHandle<()>> {
    std::thread::Builder::new()
        .name("dashboard-input".into())
        .spawn(move || {
            loop {
                let msg = match event::read() {
                    Ok(Event::Key(key)) => Msg::Key(key),
                    Ok(Event::Resize(..)) => Msg::Resize,
                    Ok(_) => continue,
                    // The terminal is gone (hung up): nothing more will come.
                    Err(_) => Msg::Quit,
                };
                let quit = matches!(msg, Msg::Quit);
                if tx.send(msg).is_err() || quit {
                    return;
                }
            }
        })
}
