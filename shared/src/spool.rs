//! Final run rows that could not reach the database before a shim had to exit (another
//! process held the lock longer than the shim may wait, or the disk was full): each is kept
//! as a file in `STATE/spool/` and written to the database by the next process that gets it
//! (a shim's store thread as it starts, the monitor, the worker). A lock loses nothing.
//!
//! When the state dir's disk is full, the spool cannot be written there either: the row
//! goes to a fallback spool in memory (`$XDG_RUNTIME_DIR`, else `/dev/shm`, in a directory
//! of this user's, 0700, one per state dir), replayed the same way once the disk has room.
//! A full disk loses nothing either (a reboot before then does).

use crate::paths::{self, StatePaths};
use crate::runs::ToolRun;
use std::io;
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;

/// `STATE/spool`.
pub fn dir(paths: &StatePaths) -> PathBuf {
    paths.root.join("spool")
}

/// The fallback spool for `paths`, in memory: `$XDG_RUNTIME_DIR/headless-run-spool/KEY`, else
/// `/dev/shm/headless-run-spool-UID/KEY`, KEY naming the state dir. `None` when neither is
/// there.
pub fn fallback_dir(paths: &StatePaths) -> Option<PathBuf> {
    fallback_dirs(paths).into_iter().next()
}

/// Every place a fallback spool for `paths` may be, the one written to first: a process
/// started from cron (no `XDG_RUNTIME_DIR`) and one in a login session must find each
/// other's rows.
fn fallback_dirs(paths: &StatePaths) -> Vec<PathBuf> {
    // SAFETY: geteuid cannot fail.
    let uid = unsafe { libc::geteuid() };
    let key = crate::fingerprint::state_key(&paths.root.to_string_lossy());
    let runtime = std::env::var_os("XDG_RUNTIME_DIR")
        .map(PathBuf::from)
        .filter(|d| d.is_absolute() && d.is_dir())
        .map(|d| d.join("headless-run-spool"));
    let shm = Some(PathBuf::from("/dev/shm"))
        .filter(|d| d.is_dir())
        .map(|d| d.join(format!("headless-run-spool-{uid}")));
    runtime
        .into_iter()
        .chain(shm)
        .map(|base| base.join(&key))
        .collect()
}

/// The most rows a fallback spool holds: it is memory, and a store that never comes back
/// must not fill it.
const FALLBACK_MAX: usize = 1000;

/// Whether `dir` (and the directory holding it) is this user's own, private, and no link:
/// in a world-writable place such as `/dev/shm`, another user could have made it first.
fn own_private_dir(dir: &std::path::Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    // SAFETY: geteuid cannot fail.
    let uid = unsafe { libc::geteuid() };
    [Some(dir), dir.parent()].into_iter().flatten().all(|d| {
        std::fs::symlink_metadata(d).is_ok_and(|m| {
            m.is_dir() && !m.file_type().is_symlink() && m.uid() == uid && m.mode() & 0o077 == 0
        })
    })
}

/// Keeps `run` (its final state) for a later writer. Written whole or not at all: in the
/// state dir's spool, else (a full disk) in the fallback spool.
pub fn write(paths: &StatePaths, run: &ToolRun) -> io::Result<PathBuf> {
    match write_in(&dir(paths), run) {
        Ok(p) => Ok(p),
        Err(e) => {
            let Some(fallback) = fallback_dir(paths) else {
                return Err(e);
            };
            if let Some(parent) = fallback.parent() {
                paths::create_private_dir(parent)?;
            }
            paths::create_private_dir(&fallback)?;
            let held = std::fs::read_dir(&fallback).map(|d| d.count()).unwrap_or(0);
            if held >= FALLBACK_MAX {
                return Err(io::Error::other(format!(
                    "{} already holds {held} runs for a store that does not take them",
                    fallback.display()
                )));
            }
            if !own_private_dir(&fallback) {
                return Err(io::Error::other(format!(
                    "{} is not a private directory of this user's",
                    fallback.display()
                )));
            }
            write_in(&fallback, run)
        }
    }
}

fn write_in(dir: &std::path::Path, run: &ToolRun) -> io::Result<PathBuf> {
    paths::create_private_dir(dir)?;
    // A spool in a directory another user owns (a shared state dir) would be replayed by
    // its owner's sessions as theirs: never written there.
    if !own_private_dir(dir) {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!(
                "{} is not in a private state dir of this user's",
                dir.display()
            ),
        ));
    }
    let path = dir.join(format!("{}.json", run.tool_run_id));
    let bytes = serde_json::to_vec(run).map_err(io::Error::other)?;
    crate::paths::write_private(&path, &bytes, crate::paths::Put::Replace)?;
    Ok(path)
}

/// Removes the spooled row of run `id`, if any (it reached the database after all).
pub fn discard(paths: &StatePaths, id: &str) {
    let _ = std::fs::remove_file(dir(paths).join(format!("{id}.json")));
    for fallback in fallback_dirs(paths) {
        let _ = std::fs::remove_file(fallback.join(format!("{id}.json")));
    }
}

/// The spool dirs to replay: the state dir's and the fallback, each only when it is this
/// user's own and private (in it and the directory holding it): a row another user could
/// have put there would be recorded as this user's run.
fn spool_dirs(paths: &StatePaths) -> Vec<PathBuf> {
    std::iter::once(dir(paths))
        .chain(fallback_dirs(paths))
        .filter(|d| own_private_dir(d))
        .collect()
}

/// A spooled file's bytes: a regular file of this user's, never through a link.
fn read_own(path: &std::path::Path) -> Option<Vec<u8>> {
    use std::io::Read;
    use std::os::unix::fs::MetadataExt;
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)
        .ok()?;
    let meta = f.metadata().ok()?;
    if !meta.is_file() || meta.uid() != crate::proc::effective_uid() {
        return None;
    }
    let mut bytes = Vec::new();
    f.take(1 << 20).read_to_end(&mut bytes).ok()?;
    Some(bytes)
}

/// The spooled runs (file, row), skipping files that do not read as one (left for a person
/// to look at).
pub fn spooled(paths: &StatePaths) -> Vec<(PathBuf, ToolRun)> {
    spool_dirs(paths)
        .iter()
        .filter_map(|d| std::fs::read_dir(d).ok())
        .flat_map(|e| e.flatten())
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .filter_map(|p| {
            let run = serde_json::from_slice::<ToolRun>(&read_own(&p)?).ok()?;
            Some((p, run))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fallback spool lives in a world-writable place: a dir someone else could have made
    /// first (group- or world-accessible, or a link) is not used.
    #[test]
    fn only_a_private_dir_of_ours_is_a_fallback_spool() {
        use std::os::unix::fs::PermissionsExt;
        let tmp = tempfile::tempdir().unwrap();
        let base = tmp.path().join("base");
        let dir = base.join("key");
        std::fs::create_dir_all(&dir).unwrap();
        let mode = |p: &std::path::Path, m: u32| {
            std::fs::set_permissions(p, std::fs::Permissions::from_mode(m)).unwrap()
        };
        mode(&base, 0o700);
        mode(&dir, 0o700);
        assert!(own_private_dir(&dir));
        mode(&dir, 0o770);
        assert!(!own_private_dir(&dir), "group-accessible");
        mode(&dir, 0o700);
        mode(&base, 0o777);
        assert!(
            !own_private_dir(&dir),
            "in a world-writable parent of its own"
        );
        mode(&base, 0o700);
        let link = base.join("link");
        std::os::unix::fs::symlink(&dir, &link).unwrap();
        assert!(!own_private_dir(&link), "a link");
    }
}
