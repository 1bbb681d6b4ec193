//! Errors of the monitor and their exit codes: 0 ok, 1 error, 2 usage or invalid value,
//! 3 conflict (already decided), 4 not found.

use hr_shared::db::StoreError;
use hr_shared::exit::monitor as code;

/// A failed command: what to print and how to exit.
#[derive(Debug)]
pub struct CliError {
    pub code: u8,
    pub message: String,
}

impl CliError {
    pub fn error(message: impl Into<String>) -> Self {
        CliError {
            code: code::ERROR,
            message: message.into(),
        }
    }
    pub fn usage(message: impl Into<String>) -> Self {
        CliError {
            code: code::USAGE,
            message: message.into(),
        }
    }
    pub fn conflict(message: impl Into<String>) -> Self {
        CliError {
            code: code::CONFLICT,
            message: message.into(),
        }
    }
    pub fn not_found(message: impl Into<String>) -> Self {
        CliError {
            code: code::NOT_FOUND,
            message: message.into(),
        }
    }
    /// Exit with `code` and nothing more to say (the command printed its own output).
    pub fn silent(code: u8) -> Self {
        CliError {
            code,
            message: String::new(),
        }
    }
}

impl From<crate::pipeline::run::RunError> for CliError {
    /// A store's error keeps its exit code; the pipeline's own is an error.
    fn from(e: crate::pipeline::run::RunError) -> Self {
        match e {
            crate::pipeline::run::RunError::Store(e) => e.into(),
            e => CliError::error(e.to_string()),
        }
    }
}

impl From<StoreError> for CliError {
    fn from(e: StoreError) -> Self {
        CliError {
            code: e.exit_code(),
            message: e.to_string(),
        }
    }
}

impl From<std::io::Error> for CliError {
    fn from(e: std::io::Error) -> Self {
        // A closed pipe (`monitor runs | head`) is not an error worth a message.
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            return CliError::silent(code::OK);
        }
        CliError::error(e.to_string())
    }
}

/// Result of a command.
pub type CliResult<T = ()> = Result<T, CliError>;
