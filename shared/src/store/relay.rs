//! The host's relay of the PostgreSQL server's notifications, as files of the state dir.
//!
//! `monitor worker` holds the one `LISTEN headless_run` connection of its state dir and, on
//! every notification, writes the bell file ([`BELL_FILE`]); the state dir's waiters (a
//! wait-mode shim, `monitor wait`, the dashboard, …) watch that file with inotify instead of
//! each holding a connection of its own — so a server sees one listener per host and user,
//! and a waiter that reaches the server through a transaction pooler (which cannot carry
//! `LISTEN`) still hears of decisions.
//!
//! While it relays, the worker holds an exclusive `flock` on [`LOCK_FILE`], which names the
//! server and database it listens to ([`crate::store::postgres::listen_key`]). The kernel
//! releases a dead process's lock, so a lock someone holds is a live relay; a waiter uses
//! it only when it names where the waiter would listen itself. `flock`, not `fcntl`: its
//! lock belongs to the open file description, so a probe's own `close` in the relay's
//! process (the worker's doorbell is its own relay's) never drops the relay's lock.

use std::fs::{File, OpenOptions};
use std::io::{self, Read};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// Locked (exclusive `flock`) by the relay while it relays; holds what it listens to.
pub const LOCK_FILE: &str = "notify.relay";

/// Written by the relay on every notification of the server (and after each connect).
pub const BELL_FILE: &str = "notify.bell";

/// The longest listen key read from the lock file.
const KEY_MAX: u64 = 4096;

/// The relay lock of the state dir `root`.
pub fn lock_path(root: &Path) -> PathBuf {
    root.join(LOCK_FILE)
}

/// The bell file of the state dir `root`.
pub fn bell_path(root: &Path) -> PathBuf {
    root.join(BELL_FILE)
}

/// What the live relay of the state dir `root` listens to (its listen key); `None` when no
/// relay holds the lock (no lock file — it is never created here —, a lock nobody holds,
/// or a file that is not the caller's own).
pub fn relaying(root: &Path) -> Option<String> {
    let path = lock_path(root);
    let mut file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_CLOEXEC | libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(&path)
        .ok()?;
    let meta = file.metadata().ok()?;
    if crate::paths::not_own(&path, &meta, false).is_some() {
        return None;
    }
    if !held_by_another(&file) {
        return None;
    }
    let mut key = String::new();
    (&mut file).take(KEY_MAX).read_to_string(&mut key).ok()?;
    Some(key.trim().to_owned())
}

/// Whether another open file description holds a lock on `file`: a shared lock of ours
/// cannot be had at once. (One that could is released as `file` closes.)
fn held_by_another(file: &File) -> bool {
    // SAFETY: flock on a descriptor we own.
    if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_SH | libc::LOCK_NB) } == 0 {
        return false;
    }
    io::Error::last_os_error().raw_os_error() == Some(libc::EWOULDBLOCK)
}

/// The relay's lock on its state dir's [`LOCK_FILE`], held for as long as this lives (and
/// by nobody once its process is gone).
#[derive(Debug)]
pub struct RelayLock {
    file: File,
}

impl RelayLock {
    /// Opens the lock file of the state dir `root`, creating it 0600; never through a link,
    /// and only a regular file of the caller's own. Not locked yet: [`RelayLock::take`].
    pub fn open(root: &Path) -> io::Result<RelayLock> {
        let path = lock_path(root);
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            // Close-on-exec: a resumed tool that outlives the worker must not keep the lock
            // (waiters would take a relay nobody runs for a live one).
            .custom_flags(libc::O_CLOEXEC | libc::O_NOFOLLOW | libc::O_NONBLOCK)
            .open(&path)?;
        let meta = file.metadata()?;
        if let Some(why) = crate::paths::not_own(&path, &meta, false) {
            return Err(io::Error::new(io::ErrorKind::PermissionDenied, why));
        }
        Ok(RelayLock { file })
    }

    /// Takes the lock, exclusive: `Ok(false)` when another relay holds it (without `wait`);
    /// with `wait`, blocks until it is free.
    pub fn take(&self, wait: bool) -> io::Result<bool> {
        let how = if wait {
            libc::LOCK_EX
        } else {
            libc::LOCK_EX | libc::LOCK_NB
        };
        loop {
            // SAFETY: flock on a descriptor we own.
            if unsafe { libc::flock(self.file.as_raw_fd(), how) } == 0 {
                return Ok(true);
            }
            let e = io::Error::last_os_error();
            match e.raw_os_error() {
                Some(libc::EINTR) => continue,
                Some(libc::EWOULDBLOCK) if !wait => return Ok(false),
                _ => return Err(e),
            }
        }
    }

    /// Writes what it relays (its listen key) into the lock file, for waiters to compare with
    /// where they would listen themselves. Only while the lock is held.
    pub fn announce(&self, key: &str) -> io::Result<()> {
        self.file.set_len(0)?;
        self.file.write_all_at(format!("{key}\n").as_bytes(), 0)
    }
}

/// The bell file the relay writes: opened (0600, the caller's own, not a link) on the
/// first ring and again when it was removed meanwhile.
#[derive(Debug)]
pub struct BellFile {
    path: PathBuf,
    file: Option<File>,
}

impl BellFile {
    /// The bell of the state dir `root` (nothing is opened yet).
    pub fn new(root: &Path) -> BellFile {
        BellFile {
            path: bell_path(root),
            file: None,
        }
    }

    /// Rings: one byte written at the start of the file (inotify's `IN_MODIFY` for the
    /// waiters; the file stays one byte long, and rings not yet read by a waiter fold into
    /// one event). Whether it was written.
    pub fn ring(&mut self) -> bool {
        // A bell file someone removed is opened anew (a waiter watches the name).
        if self
            .file
            .as_ref()
            .is_none_or(|f| !f.metadata().is_ok_and(|m| m.nlink() > 0))
        {
            self.file = self.open().ok();
        }
        match &self.file {
            Some(f) => f.write_all_at(b"!", 0).is_ok(),
            None => false,
        }
    }

    fn open(&self) -> io::Result<File> {
        let file = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .custom_flags(libc::O_CLOEXEC | libc::O_NOFOLLOW | libc::O_NONBLOCK)
            .open(&self.path)?;
        let meta = file.metadata()?;
        if let Some(why) = crate::paths::not_own(&self.path, &meta, false) {
            return Err(io::Error::new(io::ErrorKind::PermissionDenied, why));
        }
        Ok(file)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn a_relay_is_alive_only_while_another_open_file_holds_its_lock() {
        let dir = tempfile::tempdir().unwrap();
        // No lock file: no relay, and the probe creates none.
        assert_eq!(relaying(dir.path()), None);
        assert!(!lock_path(dir.path()).exists());
        // A lock file nobody holds (a relay that ended): none.
        let lock = RelayLock::open(dir.path()).unwrap();
        assert_eq!(relaying(dir.path()), None);
        // Held (by another open file description, here of this very process): alive, with
        // what it relays.
        assert!(lock.take(false).unwrap());
        lock.announce("db.test:5432/hr").unwrap();
        assert_eq!(relaying(dir.path()).as_deref(), Some("db.test:5432/hr"));
        // The probe's close released nothing: still alive, and a second relay cannot take it.
        assert!(relaying(dir.path()).is_some());
        let second = RelayLock::open(dir.path()).unwrap();
        assert!(!second.take(false).unwrap());
        // A relay that stops (or dies: the kernel closes its files) leaves none.
        drop(lock);
        assert_eq!(relaying(dir.path()), None);
        assert!(second.take(false).unwrap());
        second.announce("other:5432/hr").unwrap();
        assert_eq!(relaying(dir.path()).as_deref(), Some("other:5432/hr"));
        assert_eq!(
            std::fs::metadata(lock_path(dir.path()))
                .unwrap()
                .permissions()
                .mode()
                & 0o777,
            0o600
        );
    }

    #[test]
    fn a_lock_file_that_is_a_link_is_neither_used_nor_followed() {
        let dir = tempfile::tempdir().unwrap();
        let elsewhere = dir.path().join("elsewhere");
        std::os::unix::fs::symlink(&elsewhere, lock_path(dir.path())).unwrap();
        assert!(RelayLock::open(dir.path()).is_err());
        assert_eq!(relaying(dir.path()), None);
        std::os::unix::fs::symlink(&elsewhere, bell_path(dir.path())).unwrap();
        assert!(!BellFile::new(dir.path()).ring());
        assert!(!elsewhere.exists(), "created through a link");
    }

    #[test]
    fn the_bell_rings_the_doorbell_watching_it_and_stays_one_byte() {
        let dir = tempfile::tempdir().unwrap();
        let door =
            super::super::doorbell::Doorbell::for_file(&bell_path(dir.path())).expect("inotify");
        // The lock file beside it rings nothing.
        let lock = RelayLock::open(dir.path()).unwrap();
        lock.announce("x").unwrap();
        assert!(!door.wait(std::time::Duration::from_millis(50)));
        let mut bell = BellFile::new(dir.path());
        for _ in 0..3 {
            assert!(bell.ring());
            assert!(door.wait(std::time::Duration::from_secs(5)));
            assert!(!door.rang(), "drained");
        }
        let meta = std::fs::metadata(bell_path(dir.path())).unwrap();
        assert_eq!((meta.len(), meta.permissions().mode() & 0o777), (1, 0o600));
        // Removed under the relay: made again at the next ring, and still heard.
        std::fs::remove_file(bell_path(dir.path())).unwrap();
        door.rang();
        assert!(bell.ring());
        assert!(door.wait(std::time::Duration::from_secs(5)));
        assert!(bell_path(dir.path()).exists());
    }
}
