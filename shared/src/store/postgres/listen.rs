//! The doorbell: `LISTEN` on the server, a byte down a pipe per notification.

use super::*;

/// A doorbell for the server of `url`: a thread holds one connection that `LISTEN`s on
/// `headless_run` and rings on every notification, and once after each (re)connect (what
/// happened while it was not listening). A lost connection is retried every second; the
/// waiter's own poll covers the gap. `None` when no pipe or thread can be made.
pub fn listen(url: &str) -> Option<crate::store::doorbell::Doorbell> {
    let config = target(url).ok()?;
    crate::store::doorbell::fed_by("pg-listen", move |bell| listen_loop(&config, bell))
}

pub(super) fn listen_loop(config: &Target, bell: &std::os::fd::OwnedFd) {
    use postgres::fallible_iterator::FallibleIterator;
    loop {
        if let Ok(mut client) = connect(config)
            && client.batch_execute("LISTEN headless_run").is_ok()
        {
            if !crate::store::doorbell::ring(bell) {
                return;
            }
            let mut notes = client.notifications();
            let mut iter = notes.blocking_iter();
            while let Ok(Some(_)) = iter.next() {
                if !crate::store::doorbell::ring(bell) {
                    return;
                }
            }
        }
        if !crate::store::doorbell::ring(bell) {
            return;
        }
        std::thread::sleep(Duration::from_secs(1));
    }
}
