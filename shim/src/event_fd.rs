//! The run's event descriptor: a pipe whose write end the tool gets at the number named by
//! `HEADLESS_RUN_EVENT_FD`, and whose read end the supervisor polls. What a tool writes
//! there is never output, and every event line on it counts without a token: only a
//! process that was handed the descriptor can write to it. The shim's own ends are
//! close-on-exec, so the tool has the pipe at that one number only; an outer run's
//! descriptor (a supervised tool that runs `headless-run`) is closed on exec, so it never
//! reaches this run's tool.

use hr_shared::event::ENV_EVENT_FD;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// The lowest number the tool's descriptor may get (0–2 are its stdio).
const FIRST: RawFd = 3;
/// The highest number tried: a shim handed this many open descriptors runs without one.
const LAST: RawFd = 255;

/// The pipe, before and after the tool starts.
pub struct EventPipe {
    /// Non-blocking, close-on-exec: the supervisor reads events here.
    pub read: OwnedFd,
    /// Close-on-exec and never at `target`, so that the spawn's `dup2` makes the tool's
    /// copy (and only that one) inheritable. Dropped once the tool has started.
    pub write: OwnedFd,
    /// The number the tool finds it at.
    pub target: RawFd,
}

impl EventPipe {
    /// Opens the pipe and picks the tool's number for it: the lowest from 3 on that the
    /// tool would not otherwise inherit (free, or close-on-exec in the shim), so a
    /// descriptor passed on to the tool on purpose (a jobserver's) is never replaced.
    pub fn open() -> io::Result<EventPipe> {
        let mut fds = [0; 2];
        // SAFETY: fds has room for the two descriptors pipe2 writes.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: pipe2 just returned these two descriptors, owned by nobody else.
        let (read, mut write) =
            unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        // SAFETY: F_GETFL/F_SETFL on a descriptor we own.
        unsafe {
            let flags = libc::fcntl(read.as_raw_fd(), libc::F_GETFL);
            if flags < 0
                || libc::fcntl(read.as_raw_fd(), libc::F_SETFL, flags | libc::O_NONBLOCK) < 0
            {
                return Err(io::Error::last_os_error());
            }
        }
        let target = (FIRST..=LAST)
            .find(|&fd| !inherited(fd))
            .ok_or_else(|| io::Error::other("no descriptor number free for the tool"))?;
        if write.as_raw_fd() == target {
            // dup2 onto itself would leave close-on-exec set: move it out of the way.
            // SAFETY: F_DUPFD_CLOEXEC returns a new descriptor we then own.
            let moved =
                unsafe { libc::fcntl(write.as_raw_fd(), libc::F_DUPFD_CLOEXEC, target + 1) };
            if moved < 0 {
                return Err(io::Error::last_os_error());
            }
            // SAFETY: `moved` is ours alone.
            write = unsafe { OwnedFd::from_raw_fd(moved) };
        }
        Ok(EventPipe {
            read,
            write,
            target,
        })
    }
}

/// Whether a child of the shim would inherit descriptor `fd`: open without close-on-exec.
fn inherited(fd: RawFd) -> bool {
    // SAFETY: F_GETFD only reads the descriptor's flags.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFD) };
    flags >= 0 && flags & libc::FD_CLOEXEC == 0
}

/// A shim started by a supervised tool inherits its run's event descriptor: that one
/// belongs to the outer run, so it is closed on exec here and never reaches this run's
/// tool (or a notify hook). Only a pipe at the number the variable names is touched.
pub fn forget_outer() {
    let Some(fd) = std::env::var_os(ENV_EVENT_FD)
        .and_then(|v| v.to_str().and_then(|s| s.trim().parse::<RawFd>().ok()))
        .filter(|&fd| fd >= FIRST)
    else {
        return;
    };
    if !inherited(fd) {
        return;
    }
    // SAFETY: st is a valid stat buffer; fstat and F_SETFD only touch this descriptor's
    // metadata and flags.
    unsafe {
        let mut st: libc::stat = std::mem::zeroed();
        if libc::fstat(fd, &mut st) == 0 && st.st_mode & libc::S_IFMT == libc::S_IFIFO {
            let flags = libc::fcntl(fd, libc::F_GETFD);
            libc::fcntl(fd, libc::F_SETFD, flags | libc::FD_CLOEXEC);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pipe_is_close_on_exec_and_its_write_end_is_not_at_the_target() {
        let pipe = EventPipe::open().unwrap();
        assert!(pipe.target >= FIRST);
        assert!(!inherited(pipe.read.as_raw_fd()));
        assert!(!inherited(pipe.write.as_raw_fd()));
        assert_ne!(pipe.write.as_raw_fd(), pipe.target);
        assert!(
            !inherited(pipe.target),
            "the target is one the tool would not get"
        );
        // The read end does not block.
        let mut b = [0u8; 1];
        // SAFETY: one byte of b is writable.
        let n = unsafe { libc::read(pipe.read.as_raw_fd(), b.as_mut_ptr().cast(), 1) };
        assert_eq!(n, -1);
        assert_eq!(
            io::Error::last_os_error().raw_os_error(),
            Some(libc::EAGAIN)
        );
    }
}
