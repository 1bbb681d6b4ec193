//! One module per subcommand.

pub mod approvals;
pub mod cancel;
pub mod completions;
pub mod config;
pub mod db;
pub mod decide;
pub mod doctor;
pub mod gc;
pub mod install;
pub mod link;
pub mod logs;
pub mod pipeline;
pub mod policies;
pub mod reconcile;
pub mod restart;
pub mod runs;
pub mod show;
pub mod token;
pub mod wait;
pub mod worker;
