//! Finishers: a shim on the embedded store whose last writes have not landed when its tool
//! ends does not keep the tool's caller waiting for the database. It hands them to a
//! finisher (itself started again as `headless-run-finish`, in a session of its own) and
//! exits with the tool's code at once; the finisher writes them and exits.
//!
//! So that nobody reads a run as still running while its finisher writes it, the shim takes
//! `STATE/finishing.lock` shared before it starts the finisher, which inherits that lock
//! and holds it until it is done. A reader that must see every ended run (`monitor`'s
//! commands, reconciliation, the tests) first takes the lock exclusively for a moment:
//! [`settle`] returns once no finisher of the state dir is left, or after a bound (a
//! finisher waiting on a locked database may take the busy timeout).

use crate::paths::StatePaths;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// The longest a reader waits for finishers before it reads anyway.
pub const SETTLE_MAX: Duration = Duration::from_secs(2);

/// `STATE/finishing.lock`.
pub fn lock_path(paths: &StatePaths) -> PathBuf {
    paths.root.join("finishing.lock")
}

fn open(paths: &StatePaths, create: bool) -> io::Result<OwnedFd> {
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(create)
        .create(create)
        .mode(0o600)
        .custom_flags(libc::O_CLOEXEC | libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(lock_path(paths))?;
    Ok(OwnedFd::from(f))
}

fn flock(fd: &OwnedFd, op: libc::c_int) -> io::Result<()> {
    // SAFETY: flock on a descriptor we own.
    if unsafe { libc::flock(fd.as_raw_fd(), op) } == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// The lock a shim holds (shared) for its finisher, which inherits it: never waits (a
/// reader holds it exclusively only for a moment; the shim then waits for its store as
/// before instead).
pub fn hold(paths: &StatePaths) -> io::Result<OwnedFd> {
    let fd = open(paths, true)?;
    flock(&fd, libc::LOCK_SH | libc::LOCK_NB)?;
    Ok(fd)
}

/// Waits until no finisher of `paths` is writing (true), or `max` has passed (false). No
/// lock file: no finisher ever ran there.
pub fn settle(paths: &StatePaths, max: Duration) -> bool {
    let Ok(fd) = open(paths, false) else {
        return true;
    };
    let deadline = Instant::now() + max;
    let mut pause = Duration::from_micros(200);
    loop {
        match flock(&fd, libc::LOCK_EX | libc::LOCK_NB) {
            // Closing the descriptor lets go of it at once.
            Ok(()) => return true,
            Err(e) if e.raw_os_error() == Some(libc::EWOULDBLOCK) => {}
            Err(_) => return true,
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(10));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reader_waits_for_a_held_finisher_lock_and_not_otherwise() {
        let tmp = tempfile::tempdir().unwrap();
        let paths = StatePaths::at(tmp.path());
        assert!(
            settle(&paths, Duration::ZERO),
            "no lock file: nothing to wait for"
        );
        let held = hold(&paths).unwrap();
        // A second shim holds it too: shared.
        let second = hold(&paths).unwrap();
        assert!(
            !settle(&paths, Duration::from_millis(20)),
            "held: not settled"
        );
        drop(held);
        assert!(
            !settle(&paths, Duration::from_millis(20)),
            "one holder left"
        );
        drop(second);
        assert!(settle(&paths, Duration::ZERO));
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(lock_path(&paths))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
    }

    #[test]
    fn a_lock_inherited_by_another_descriptor_stays_held_until_both_are_closed() {
        let tmp = tempfile::tempdir().unwrap();
        let paths = StatePaths::at(tmp.path());
        let held = hold(&paths).unwrap();
        // What a finisher started with the descriptor has: the same open file.
        let inherited = held.try_clone().unwrap();
        drop(held);
        assert!(!settle(&paths, Duration::from_millis(20)));
        drop(inherited);
        assert!(settle(&paths, Duration::ZERO));
    }
}
