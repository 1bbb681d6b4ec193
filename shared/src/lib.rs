//! Everything `headless-run` and `monitor` must agree on: where state lives, the store seam
//! (`store`: the runner and operator traits, and the SQLite store behind them, whose schema
//! and queries — `db`, `runs`, `approvals`, `audit`, … — are crate-private), the rules in
//! front of it (`rules`), statuses and exit codes, the JSON event protocol, ids and time.
//! See ARCHITECTURE.md for the map.

pub mod answering;
pub mod approvals;
pub mod audit;
pub mod config;
pub mod control;
/// The embedded store's schema and connections (`store::sqlite::schema`).
pub use store::sqlite::schema as db;
pub mod event;
pub mod exit;
pub mod export;
pub mod fingerprint;
pub mod finishing;
pub mod gc;
pub mod id;
pub mod links;
pub mod logfile;
pub mod mode;
pub mod paths;
pub mod pipeline;
pub mod policy;
pub mod proc;
pub mod prompt;
#[cfg(feature = "http")]
pub mod remote;
pub mod resume;
pub mod reviews;
pub mod rules;
pub mod runs;
pub mod sanitize;
pub mod self_approval;
pub mod shell;
pub mod spool;
pub mod status;
pub mod store;
#[cfg(any(test, feature = "testing"))]
pub mod testing;
pub mod time;
pub mod tool_path;
pub mod url;
pub mod webhook;
pub mod widget;
pub mod wire;
