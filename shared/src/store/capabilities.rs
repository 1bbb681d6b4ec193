//! What the configured store can do, for callers that would otherwise branch on which store
//! it is: `monitor`'s commands and dashboard, cancelling, the pipeline runner. Each backend's
//! answer is written once, here; a new backend adds a row to [`Backend::capabilities`].

use crate::paths::StatePaths;

/// Which store a [`StatePaths`] names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// The embedded SQLite database, a file of this host.
    Embedded,
    /// A PostgreSQL server (`HEADLESS_RUN_DB=postgres://…`).
    Postgres,
    /// A `monitor serve` server's API (`HEADLESS_RUN_SERVER`, `monitor --server`).
    Server,
}

/// What a store can do from where this process is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Capabilities {
    /// It keeps pipeline executions this process can read and run.
    pub pipelines: bool,
    /// It is the store itself ([`super::AdminStore`]: resuming runs, gc, the audit chain's
    /// checks, remembered decisions), not an API in front of one.
    pub admin: bool,
    /// The state dir here holds the store's logs (the combined log, the runs' logs), and a
    /// cancelled run on this host is signalled from here; a server does both on its host.
    pub host_files: bool,
    /// The database is a file here: a change rings its doorbell (inotify) at once, and a
    /// file removed or replaced underneath is noticed by its identity.
    pub database_file: bool,
    /// The store itself records who decided from its own authentication (a PostgreSQL
    /// login), not from the name a caller gives, so a caller deciding for someone else
    /// names them in the channel instead.
    pub decider_from_login: bool,
}

impl Backend {
    /// The store `paths` names: a server when one is set, else PostgreSQL when its URL is,
    /// else the embedded database.
    pub fn of(paths: &StatePaths) -> Backend {
        if paths.server.is_some() {
            Backend::Server
        } else if paths.store_url.is_some() {
            Backend::Postgres
        } else {
            Backend::Embedded
        }
    }

    /// This backend's answer.
    pub const fn capabilities(self) -> Capabilities {
        match self {
            Backend::Embedded => Capabilities {
                pipelines: true,
                admin: true,
                host_files: true,
                database_file: true,
                decider_from_login: false,
            },
            Backend::Postgres => Capabilities {
                pipelines: true,
                admin: true,
                host_files: true,
                database_file: false,
                decider_from_login: true,
            },
            Backend::Server => Capabilities {
                pipelines: false,
                admin: false,
                host_files: false,
                database_file: false,
                decider_from_login: false,
            },
        }
    }
}

/// What the store `paths` names can do.
pub fn of(paths: &StatePaths) -> Capabilities {
    Backend::of(paths).capabilities()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn paths(store_url: Option<&str>, server: Option<&str>) -> StatePaths {
        let mut p = StatePaths::at("/nonexistent-hr/state");
        p.store_url = store_url.map(str::to_owned);
        p.server = server.map(str::to_owned);
        p
    }

    #[test]
    fn a_server_wins_over_a_database_url() {
        assert_eq!(Backend::of(&paths(None, None)), Backend::Embedded);
        assert_eq!(
            Backend::of(&paths(Some("postgres://a@b/c"), None)),
            Backend::Postgres
        );
        // `monitor --server` with HEADLESS_RUN_DB also set: the server is what is used.
        assert_eq!(
            Backend::of(&paths(Some("postgres://a@b/c"), Some("https://hr:8443"))),
            Backend::Server
        );
        assert_eq!(
            Backend::of(&paths(None, Some("https://hr:8443"))),
            Backend::Server
        );
    }

    #[test]
    fn only_the_store_itself_administers_and_only_a_file_is_watched_as_one() {
        let [embedded, pg, server] =
            [Backend::Embedded, Backend::Postgres, Backend::Server].map(Backend::capabilities);
        assert!(embedded.admin && pg.admin && !server.admin);
        assert!(embedded.pipelines && pg.pipelines && !server.pipelines);
        assert!(embedded.host_files && pg.host_files && !server.host_files);
        assert!(embedded.database_file && !pg.database_file && !server.database_file);
        assert!(!embedded.decider_from_login && pg.decider_from_login);
        // What `paths.is_embedded()` says and what the capabilities say agree.
        let p = paths(None, None);
        assert_eq!(p.is_embedded(), of(&p).database_file);
    }
}
