//! The doorbell: `LISTEN` on the server, a byte down a pipe per notification — or, where
//! the state dir's relay listens already, its bell file ([`crate::store::relay`]).

use super::*;
use crate::store::doorbell::Doorbell;
use crate::store::relay;

/// A doorbell for the server of `url` (where this process would `LISTEN`), for a waiter of
/// the state dir `root`.
///
/// When a relay of `root` is alive (`monitor worker` holds its lock) and listens to the same
/// server and database, an inotify watch of its bell file: no connection of this waiter's
/// own. Otherwise a thread holds one connection that `LISTEN`s on `headless_run` and rings
/// on every notification, and once after each (re)connect (what happened while it was not
/// listening); a lost connection is retried every second, and the waiter's own poll covers
/// the gap. A relay that stops later leaves its waiters on their poll until a new one rings
/// the same file (its first ring, after it connects, covers the gap); they do not open
/// connections of their own then, which would be the herd of listeners a relay is there to
/// spare the server. `None` when no watch, pipe or thread can be made.
///
/// Either bell only says "look now": the waiter reads the store whenever it rings, so a
/// spurious ring (a relay's ring after its connect, a notification about another run)
/// costs one look and nothing else.
pub fn listen(url: &str, root: &std::path::Path) -> Option<Doorbell> {
    let config = target(url).ok()?;
    if relay::relaying(root).is_some_and(|key| key == listen_key(&config)) {
        return Doorbell::for_file(&relay::bell_path(root));
    }
    crate::store::doorbell::fed_by("pg-listen", move |bell| {
        listen_loop(&config, || crate::store::doorbell::ring(bell))
    })
}

/// What a listener of `target` hears: its server (hosts and ports) and database, which a
/// relay writes into its lock file and a waiter compares with its own — as a SHA-256
/// digest, so the file names no host, database or login. The login is left out: every
/// session of a database hears its notifications.
pub fn listen_key(target: &Target) -> String {
    use postgres::config::Host;
    let c = &target.config;
    let hosts: Vec<String> = c
        .get_hosts()
        .iter()
        .map(|h| match h {
            Host::Tcp(name) => name.clone(),
            Host::Unix(dir) => dir.display().to_string(),
        })
        .collect();
    let mut ports: Vec<String> = c.get_ports().iter().map(u16::to_string).collect();
    if ports.is_empty() {
        ports.push("5432".into());
    }
    // A URL without a database reaches the one named after its login.
    let db = c.get_dbname().or(c.get_user()).unwrap_or_default();
    let plain = format!("{}:{}/{db}", hosts.join(","), ports.join(","));
    use sha2::Digest;
    crate::audit::hex(&sha2::Sha256::digest(plain.as_bytes()))
}

/// Holds one connection to `config` that `LISTEN`s on `headless_run`, and calls `ring` on
/// every notification and once after each (re)connect; a lost connection is retried every
/// second. Returns once `ring` says nobody is listening any more (false).
pub fn listen_loop(config: &Target, mut ring: impl FnMut() -> bool) {
    use postgres::fallible_iterator::FallibleIterator;
    loop {
        if let Ok(mut client) = connect(config)
            && client.batch_execute("LISTEN headless_run").is_ok()
        {
            if !ring() {
                return;
            }
            let mut notes = client.notifications();
            let mut iter = notes.blocking_iter();
            while let Ok(Some(_)) = iter.next() {
                if !ring() {
                    return;
                }
            }
        }
        if !ring() {
            return;
        }
        std::thread::sleep(Duration::from_secs(1));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_listen_key_names_the_server_and_database_not_the_login() {
        let key = |url: &str| listen_key(&target(url).unwrap());
        let plain = key("postgres://runner:pw@db.test:5433/hr");
        assert_eq!(plain.len(), 64, "a digest: {plain}");
        assert!(!plain.contains("db.test") && !plain.contains("runner"));
        assert_eq!(
            key("postgres://alice@db.test:5433/hr?sslmode=disable"),
            key("postgres://runner:pw@db.test:5433/hr")
        );
        assert_ne!(
            key("postgres://runner@db.test:5433/hr"),
            key("postgres://runner@db.test:5433/other")
        );
        // No port: libpq's (PGPORT fills it in when set).
        if std::env::var_os("PGPORT").is_none() {
            assert_eq!(
                key("postgres://runner@db.test/hr"),
                key("postgres://runner@db.test:5432/hr")
            );
        }
        assert_ne!(
            key("postgres://runner@pooler.test:6432/hr"),
            key("postgres://runner@db.test:5432/hr")
        );
    }
}
