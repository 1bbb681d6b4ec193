//! The exit-code tables of both binaries, and how a run's outcome maps onto them.
//!
//! | shim code | meaning |
//! | --- | --- |
//! | 0–255 | the tool's own exit code |
//! | 128+N | the tool died of signal N |
//! | 90 | waiting for approval (an approval record was created) |
//! | 91 | the approval was rejected or expired |
//! | 92 | stalled: no output and no heartbeat for the stall timeout |
//! | 93 | a secret prompt in headless mode: refused, never recorded |
//! | 124 | hard timeout |
//! | 125 | the shim itself failed (usage, pty, state store during a prompt) |
//! | 126 / 127 | the tool is not executable / not found |

use crate::status::RunStatus;

/// Exit codes of `headless-run`.
pub mod shim {
    pub const APPROVAL_PENDING: u8 = 90;
    pub const REJECTED: u8 = 91;
    pub const STALLED: u8 = 92;
    pub const SECRET_REFUSED: u8 = 93;
    /// Cancelled by `monitor cancel`: 128 + SIGTERM, as if the tool had been terminated.
    pub const CANCELLED: u8 = 143;
    pub const TIMEOUT: u8 = 124;
    pub const SHIM_FAILED: u8 = 125;
    pub const NOT_EXECUTABLE: u8 = 126;
    pub const NOT_FOUND: u8 = 127;
}

/// Exit codes of `monitor`.
pub mod monitor {
    pub const OK: u8 = 0;
    pub const ERROR: u8 = 1;
    pub const USAGE: u8 = 2;
    pub const CONFLICT: u8 = 3;
    pub const NOT_FOUND: u8 = 4;
}

/// How a supervised run ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunOutcome {
    /// The tool exited by itself with this code.
    Exited(i32),
    /// The tool died of this signal.
    Signaled(i32),
    /// The hard timeout ended it.
    TimedOut,
    /// The stall timeout ended it.
    Stalled,
    /// It blocked on a prompt; an approval is pending (exit mode).
    ApprovalPending { approval_id: String },
    /// The approval for its prompt was rejected or expired.
    Rejected { approval_id: String, why: String },
    /// It asked for a secret in headless mode.
    SecretRefused { prompt: String, alternative: String },
    /// `monitor cancel` (or an operator's signal) ended it.
    Cancelled { reason: String, code: u8 },
    /// It blocked on a prompt in headless mode and the state store could not record it.
    Unrecorded { prompt: String, why: String },
    /// Nothing was asked: what waited on the terminal for keys (an editor, a full-screen
    /// program) was ended as it would end without one. `code` is the tool's exit code then
    /// (128+N for a signal), `what` the stored reason: what waited, and how it all ended.
    NotAPrompt { what: String, code: i32 },
}

impl RunOutcome {
    /// How a process ended by itself, from its raw wait status (`waitpid`): the one
    /// conversion the shim, interactive mode and the worker share.
    pub fn from_wait_status(status: i32) -> RunOutcome {
        if libc::WIFEXITED(status) {
            RunOutcome::Exited(libc::WEXITSTATUS(status))
        } else if libc::WIFSIGNALED(status) {
            RunOutcome::Signaled(libc::WTERMSIG(status))
        } else {
            RunOutcome::Exited(shim::SHIM_FAILED.into())
        }
    }

    /// How a child process ended by itself (`std::process::ExitStatus`).
    pub fn from_exit_status(status: std::process::ExitStatus) -> RunOutcome {
        use std::os::unix::process::ExitStatusExt;
        RunOutcome::from_wait_status(status.into_raw())
    }

    /// The shim's exit code for this outcome.
    pub fn exit_code(&self) -> u8 {
        match self {
            RunOutcome::Exited(code) => (*code & 0xff) as u8,
            RunOutcome::Signaled(sig) => (128 + (*sig & 0x7f)) as u8,
            RunOutcome::TimedOut => shim::TIMEOUT,
            RunOutcome::Stalled => shim::STALLED,
            RunOutcome::ApprovalPending { .. } => shim::APPROVAL_PENDING,
            RunOutcome::Rejected { .. } => shim::REJECTED,
            RunOutcome::SecretRefused { .. } => shim::SECRET_REFUSED,
            RunOutcome::Cancelled { code, .. } => *code,
            RunOutcome::Unrecorded { .. } => shim::SHIM_FAILED,
            RunOutcome::NotAPrompt { code, .. } => (*code & 0xff) as u8,
        }
    }

    /// The run status this outcome leaves behind.
    pub fn status(&self) -> RunStatus {
        match self {
            RunOutcome::Exited(0) => RunStatus::Completed,
            RunOutcome::Exited(_) | RunOutcome::Signaled(_) => RunStatus::Failed,
            RunOutcome::TimedOut => RunStatus::FailedTimeout,
            RunOutcome::Stalled => RunStatus::Stalled,
            RunOutcome::ApprovalPending { .. } => RunStatus::WaitingApproval,
            RunOutcome::Rejected { .. }
            | RunOutcome::SecretRefused { .. }
            | RunOutcome::Unrecorded { .. } => RunStatus::Failed,
            RunOutcome::Cancelled { .. } => RunStatus::Cancelled,
            RunOutcome::NotAPrompt { code: 0, .. } => RunStatus::Completed,
            RunOutcome::NotAPrompt { .. } => RunStatus::Failed,
        }
    }

    /// The stored reason (None for a clean exit 0).
    pub fn reason(&self) -> Option<String> {
        match self {
            RunOutcome::Exited(0) => None,
            RunOutcome::Exited(code) => Some(format!("exited with code {code}")),
            RunOutcome::Signaled(sig) => {
                Some(format!("killed by signal {sig} ({})", signal_name(*sig)))
            }
            RunOutcome::TimedOut => Some("hard timeout".into()),
            RunOutcome::Stalled => Some("no output and no heartbeat for the stall timeout".into()),
            RunOutcome::ApprovalPending { approval_id } => {
                Some(format!("waiting for approval {approval_id}"))
            }
            RunOutcome::Rejected { approval_id, why } => {
                Some(format!("approval {approval_id} {why}"))
            }
            RunOutcome::SecretRefused {
                prompt,
                alternative,
            } => Some(format!(
                "secret prompt refused in headless mode: {prompt:?}; {alternative}"
            )),
            RunOutcome::Cancelled { reason, .. } => Some(reason.clone()),
            RunOutcome::Unrecorded { prompt, why } => Some(format!(
                "a prompt could not be recorded as an approval ({why}): {prompt:?}"
            )),
            RunOutcome::NotAPrompt { what, .. } => Some(what.clone()),
        }
    }

    /// The tool's own exit code to store, where it has one.
    pub fn tool_exit_code(&self) -> Option<i32> {
        match self {
            RunOutcome::Exited(code) => Some(*code),
            RunOutcome::Signaled(sig) => Some(128 + sig),
            RunOutcome::NotAPrompt { code, .. } => Some(*code),
            _ => Some(i32::from(self.exit_code())),
        }
    }
}

/// The conventional name of a signal number (`SIGTERM`), or `signal N`.
pub fn signal_name(sig: i32) -> &'static str {
    match sig {
        libc::SIGHUP => "SIGHUP",
        libc::SIGINT => "SIGINT",
        libc::SIGQUIT => "SIGQUIT",
        libc::SIGILL => "SIGILL",
        libc::SIGTRAP => "SIGTRAP",
        libc::SIGABRT => "SIGABRT",
        libc::SIGBUS => "SIGBUS",
        libc::SIGFPE => "SIGFPE",
        libc::SIGKILL => "SIGKILL",
        libc::SIGUSR1 => "SIGUSR1",
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGUSR2 => "SIGUSR2",
        libc::SIGPIPE => "SIGPIPE",
        libc::SIGALRM => "SIGALRM",
        libc::SIGTERM => "SIGTERM",
        _ => "other signal",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_codes_follow_the_table() {
        assert_eq!(RunOutcome::Exited(0).exit_code(), 0);
        assert_eq!(RunOutcome::Exited(255).exit_code(), 255);
        assert_eq!(RunOutcome::Signaled(9).exit_code(), 137);
        assert_eq!(RunOutcome::Signaled(15).exit_code(), 143);
        assert_eq!(RunOutcome::TimedOut.exit_code(), 124);
        assert_eq!(RunOutcome::Stalled.exit_code(), 92);
        let pending = RunOutcome::ApprovalPending {
            approval_id: "AP-1".into(),
        };
        assert_eq!(pending.exit_code(), 90);
        assert_eq!(pending.status(), RunStatus::WaitingApproval);
    }

    #[test]
    fn wait_statuses_become_outcomes() {
        use std::os::unix::process::ExitStatusExt;
        let exited = std::process::ExitStatus::from_raw(3 << 8);
        assert_eq!(RunOutcome::from_exit_status(exited), RunOutcome::Exited(3));
        let killed = std::process::ExitStatus::from_raw(libc::SIGKILL);
        assert_eq!(
            RunOutcome::from_exit_status(killed),
            RunOutcome::Signaled(libc::SIGKILL)
        );
        assert_eq!(RunOutcome::from_exit_status(killed).exit_code(), 137);
    }

    #[test]
    fn statuses_follow_outcomes() {
        assert_eq!(RunOutcome::Exited(0).status(), RunStatus::Completed);
        assert_eq!(RunOutcome::Exited(7).status(), RunStatus::Failed);
        assert_eq!(RunOutcome::TimedOut.status(), RunStatus::FailedTimeout);
        assert_eq!(RunOutcome::Exited(0).reason(), None);
        assert_eq!(
            RunOutcome::Signaled(15).reason().as_deref(),
            Some("killed by signal 15 (SIGTERM)")
        );
        let ended = |code| RunOutcome::NotAPrompt {
            what: "nothing asked: vim was ended".into(),
            code,
        };
        assert_eq!(ended(1).status(), RunStatus::Failed);
        assert_eq!(ended(1).exit_code(), 1);
        assert_eq!(ended(143).tool_exit_code(), Some(143));
        assert_eq!(ended(0).status(), RunStatus::Completed);
        assert_eq!(
            ended(0).reason().as_deref(),
            Some("nothing asked: vim was ended"),
            "a script that goes on after its editor ends still says why"
        );
    }
}
