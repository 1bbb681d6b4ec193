//! A doorbell for the SQLite store: wakes a waiter as soon as the database is written,
//! instead of at its next look. inotify on the database's directory, for writes to the
//! database file and its WAL (a commit in WAL mode appends to `state.db-wal`; the WAL is
//! deleted and made anew across checkpoints, so its directory is watched, not the file).
//! A doorbell only says "look now": the waiter still reads the store's change mark, and
//! without inotify (or when the bell is lost) it looks on its poll as before.
//!
//! On the PostgreSQL store the server sends `NOTIFY headless_run` as a decision, expiry or
//! new approval commits. Where a relay of the state dir is alive (`monitor worker`:
//! [`super::relay`]) the doorbell is the same inotify watch, on the relay's bell file;
//! otherwise a pipe that a listener thread of the waiter's own writes to on every
//! notification ([`super::postgres::listen`]).

use std::ffi::CString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::time::Duration;

/// Rings when the database at `db` or its WAL is written (or, on the PostgreSQL store,
/// when the server notifies).
#[derive(Debug)]
pub struct Doorbell {
    fd: OwnedFd,
    /// The names that ring it: the database's file name, and with `-wal` appended (or a
    /// relay's bell file alone); `None` for a pipe, where any byte rings.
    names: Option<Vec<Vec<u8>>>,
}

/// A doorbell for the store `paths` names.
pub fn for_store(paths: &crate::paths::StatePaths) -> Option<Doorbell> {
    #[cfg(feature = "http")]
    if let Some(server) = &paths.server {
        return super::http::bell(server);
    }
    #[cfg(feature = "postgres")]
    if let Some(url) = paths.listen_target() {
        return super::postgres::listen(url, &paths.root);
    }
    Doorbell::new(&paths.db)
}

#[cfg(any(feature = "http", feature = "postgres"))]
/// A doorbell rung by a thread of its own (`name`), which runs `feed` with the pipe's write
/// end and rings it with [`ring`] (a listener of the server's notifications, a long poll).
pub(crate) fn fed_by(name: &str, feed: impl FnOnce(&OwnedFd) + Send + 'static) -> Option<Doorbell> {
    let mut fds = [0; 2];
    // SAFETY: fds has room for the two descriptors pipe2 writes.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_NONBLOCK | libc::O_CLOEXEC) } != 0 {
        return None;
    }
    // SAFETY: both are fresh descriptors nobody else owns.
    let (read_end, write_end) =
        unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    std::thread::Builder::new()
        .name(name.into())
        .spawn(move || feed(&write_end))
        .ok()?;
    Some(Doorbell::from_pipe(read_end))
}

#[cfg(any(feature = "http", feature = "postgres"))]
/// One byte down a bell's pipe; false once nobody reads it any more.
pub(crate) fn ring(bell: &OwnedFd) -> bool {
    // SAFETY: one readable byte from a valid buffer to a descriptor we own.
    let n = unsafe { libc::write(bell.as_raw_fd(), b"!".as_ptr().cast(), 1) };
    n == 1 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EAGAIN)
}

impl Doorbell {
    #[cfg(any(feature = "http", feature = "postgres"))]
    /// A doorbell rung by bytes written to the other end of the pipe `read_end`
    /// (non-blocking).
    fn from_pipe(read_end: OwnedFd) -> Doorbell {
        Doorbell {
            fd: read_end,
            names: None,
        }
    }

    /// A doorbell for the database at `db`; `None` where inotify cannot watch its
    /// directory (no inotify, no watches left, the directory gone).
    pub fn new(db: &Path) -> Option<Doorbell> {
        let name = db.file_name()?.as_bytes().to_vec();
        let mut wal = name.clone();
        wal.extend_from_slice(b"-wal");
        Doorbell::watching(db, vec![name, wal])
    }

    /// A doorbell rung by writes to the file at `path` alone (a relay's bell file), which
    /// need not exist yet: its directory is watched. `None` as for [`Doorbell::new`].
    pub fn for_file(path: &Path) -> Option<Doorbell> {
        let name = path.file_name()?.as_bytes().to_vec();
        Doorbell::watching(path, vec![name])
    }

    /// inotify on the directory of `path`, rung by the files of that directory called
    /// `names`.
    fn watching(path: &Path, names: Vec<Vec<u8>>) -> Option<Doorbell> {
        let dir = match path.parent() {
            Some(d) if !d.as_os_str().is_empty() => d,
            _ => Path::new("."),
        };
        // SAFETY: inotify_init1 takes flags only; a valid result is a descriptor we own.
        let raw = unsafe { libc::inotify_init1(libc::IN_NONBLOCK | libc::IN_CLOEXEC) };
        if raw < 0 {
            return None;
        }
        // SAFETY: raw is a fresh descriptor nobody else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        let dir = CString::new(dir.as_os_str().as_bytes()).ok()?;
        let mask = libc::IN_MODIFY | libc::IN_CLOSE_WRITE | libc::IN_CREATE | libc::IN_MOVED_TO;
        // SAFETY: a valid inotify descriptor and a NUL-terminated path.
        if unsafe { libc::inotify_add_watch(fd.as_raw_fd(), dir.as_ptr(), mask) } < 0 {
            return None;
        }
        Some(Doorbell {
            fd,
            names: Some(names),
        })
    }

    /// The descriptor to poll for readability (then call [`Doorbell::rang`]).
    pub fn fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// Drains what has come: whether the database or its WAL was written since the last
    /// call. Other files of the directory (logs) do not ring it.
    pub fn rang(&self) -> bool {
        let mut buf = [0u8; 4096];
        let mut rang = false;
        loop {
            // SAFETY: buf is writable for its length.
            let n = unsafe { libc::read(self.fd(), buf.as_mut_ptr().cast(), buf.len()) };
            if n <= 0 {
                return rang;
            }
            rang |= match &self.names {
                Some(names) => events_name(&buf[..n as usize], names),
                None => true,
            };
        }
    }

    /// Waits up to `timeout` for a ring; whether it rang (`false`: the time passed, or the
    /// poll failed — either way the caller looks as it would have anyway).
    pub fn wait(&self, timeout: Duration) -> bool {
        if self.rang() {
            return true;
        }
        let mut pfd = libc::pollfd {
            fd: self.fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        let ms = timeout.as_millis().min(i32::MAX as u128) as i32;
        // SAFETY: one valid pollfd.
        let n = unsafe { libc::poll(&mut pfd, 1, ms) };
        n > 0 && self.rang()
    }
}

/// Whether a buffer of inotify events names one of `names`.
fn events_name(mut buf: &[u8], names: &[Vec<u8>]) -> bool {
    const HEADER: usize = std::mem::size_of::<libc::inotify_event>();
    let mut found = false;
    while buf.len() >= HEADER {
        // The name's length is the header's last field (wd, mask, cookie, len: 4 × u32).
        let len = u32::from_ne_bytes([buf[12], buf[13], buf[14], buf[15]]) as usize;
        let end = (HEADER + len).min(buf.len());
        let name = &buf[HEADER..end];
        let name = &name[..name.iter().position(|&b| b == 0).unwrap_or(name.len())];
        found |= names.iter().any(|n| n.as_slice() == name);
        buf = &buf[end..];
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn rings_for_the_database_and_its_wal_and_not_for_other_files() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("state.db");
        std::fs::write(&db, b"").unwrap();
        let bell = Doorbell::new(&db).expect("inotify");
        assert!(!bell.rang(), "nothing written yet");
        // A log beside it: no ring.
        let mut log = std::fs::File::create(dir.path().join("combined.log")).unwrap();
        log.write_all(b"line\n").unwrap();
        assert!(!bell.wait(Duration::from_millis(50)));
        // The WAL, created and appended: a ring.
        let mut wal = std::fs::File::create(dir.path().join("state.db-wal")).unwrap();
        wal.write_all(b"frame").unwrap();
        assert!(bell.wait(Duration::from_secs(5)));
        assert!(!bell.rang(), "drained");
        // The database file itself.
        std::fs::OpenOptions::new()
            .append(true)
            .open(&db)
            .unwrap()
            .write_all(b"x")
            .unwrap();
        assert!(bell.wait(Duration::from_secs(5)));
        // A name that only starts like it: no ring.
        std::fs::write(dir.path().join("state.db-walrus"), b"x").unwrap();
        assert!(!bell.wait(Duration::from_millis(50)));
    }

    #[test]
    fn no_directory_no_doorbell() {
        assert!(Doorbell::new(Path::new("/nonexistent-dir-hr/state.db")).is_none());
    }
}
