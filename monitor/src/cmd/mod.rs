//! One module per subcommand.

pub mod runs;
pub mod show;
