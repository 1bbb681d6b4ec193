//! What went wrong with a store: the seam's one error type, whatever the backend (the
//! embedded database's own failures, a database server's with its SQLSTATE, a `monitor
//! serve` server's). `crate::db` re-exports it for the code that predates the seam.

use std::path::PathBuf;

/// What went wrong with the state store.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("no database at {0} (nothing has run with this state dir yet?)")]
    Missing(PathBuf),
    #[error("{path}: not a usable SQLite database ({source}); move it aside to start afresh")]
    Corrupt {
        path: PathBuf,
        source: rusqlite::Error,
    },
    #[error(
        "{path}: schema version {found} is newer than this build understands ({supported}); upgrade headless-run"
    )]
    TooNew {
        path: PathBuf,
        found: i64,
        supported: i64,
    },
    #[error("cannot create the state dir for {path}: {source}")]
    Dir {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot open {}: {source}", path.display())]
    Access {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("database is locked (another process held it for more than {}s)", crate::db::BUSY_TIMEOUT.as_secs())]
    Locked,
    #[error("database is read-only: {0}")]
    ReadOnly(String),
    /// The embedded store belongs to another user (or is reached through a link): it is
    /// read, never written (DESIGN §14). Says whose it is.
    #[error("not your state store: {0}")]
    Foreign(String),
    #[error("database error: {0}")]
    Sqlite(rusqlite::Error),
    /// The database server refused or failed (its message, never the credentials), or
    /// could not be reached.
    #[error("database server: {0}")]
    Server(String),
    /// The database server answered with an error of its own: its SQLSTATE kept (`40001`,
    /// `23505`, …) beside its message, so that a caller can tell a conflict from an outage
    /// without reading the text.
    #[error("database server: {message} (SQLSTATE {code})")]
    Database { code: String, message: String },
    /// The server said this login may not do that.
    #[error("refused by the database server: {0}")]
    Denied(String),
    /// The configured store does not do this yet.
    #[error("{0} is not available on the PostgreSQL store yet")]
    Unsupported(&'static str),
    /// A `monitor serve` server refused or failed (its `error`, with the URL), or could not
    /// be reached (the URL and why); never the token.
    #[error("{0}")]
    Remote(String),
    /// Not something the server's operator API does (`monitor --server`).
    #[error(
        "{0} is not available with --server (HEADLESS_RUN_SERVER): run it on the server's host, without --server"
    )]
    NotRemote(&'static str),
}

impl StoreError {
    /// The database server's SQLSTATE, when it answered with an error of its own.
    pub fn sqlstate(&self) -> Option<&str> {
        match self {
            StoreError::Database { code, .. } => Some(code),
            _ => None,
        }
    }
}
