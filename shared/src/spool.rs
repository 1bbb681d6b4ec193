//! Final run rows that could not reach the database before a shim had to exit (another
//! process held the lock longer than the shim may wait, or the disk was full): each is kept
//! as a file in `STATE/spool/` and written to the database by the next process that gets it
//! (a shim's store thread as it starts, the monitor, the worker). A lock loses nothing.
//!
//! When the state dir's disk is full, the spool cannot be written there either: the row
//! goes to a fallback spool in memory (`$XDG_RUNTIME_DIR`, else `/dev/shm`, in a directory
//! of this user's, 0700, one per state dir), replayed the same way once the disk has room.
//! A full disk loses nothing either (a reboot before then does).

use crate::db::{self, Result};
use crate::paths::{self, StatePaths};
use crate::rules::VANISHED;
use crate::runs::{Guard, StatusChange, ToolRun, Touch};
use crate::status::RunStatus;
use rusqlite::Connection;
use std::io::{self, Write};
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
    let tmp = dir.join(format!(".{}.tmp", run.tool_run_id));
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)?;
    f.write_all(&serde_json::to_vec(run).map_err(io::Error::other)?)?;
    f.sync_all()?;
    std::fs::rename(&tmp, &path)?;
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

/// Writes every spooled run into the database and removes its file; returns their ids. A
/// row that already ended by itself is left as it is; one still live, or failed only because
/// its shim seemed to vanish, takes the spooled final state. Unreadable files are left for a
/// person to look at.
pub(crate) fn replay(
    conn: &mut Connection,
    paths: &StatePaths,
    actor: &str,
    identity: &str,
) -> Result<Vec<String>> {
    let mut done = Vec::new();
    for (path, run) in spooled(paths) {
        db::write(conn, |tx| {
            match crate::store::sqlite::runs::get(tx, &run.tool_run_id)? {
                // Spooled by this user's own shims (the spool dirs are checked to be ours).
                None => crate::store::sqlite::runs::insert(
                    tx,
                    &run.stamped(identity, Some(crate::proc::effective_uid())),
                    actor,
                )?,
                Some(current) => {
                    let vanished = current.status == RunStatus::Failed
                        && current
                            .reason
                            .as_deref()
                            .is_some_and(|r| r.starts_with(VANISHED));
                    if !current.status.is_final() || vanished {
                        let change = StatusChange {
                            status: run.status,
                            reason: run.reason.clone(),
                            exit_code: run.exit_code,
                            finished: run.completed_at.is_some(),
                            error: run.last_error_msg.clone(),
                            at: run.completed_at.clone(),
                        };
                        crate::store::sqlite::runs::change_status(tx, &run.tool_run_id, &change, actor, Guard::Any)?;
                        crate::store::sqlite::runs::touch(
                            tx,
                            &run.tool_run_id,
                            &Touch {
                                last_output_at: run.last_output_at.clone(),
                                last_heartbeat_at: run.last_heartbeat_at.clone(),
                                supervisor_heartbeat_at: None,
                            },
                        )?;
                    }
                }
            }
            Ok(())
        })?;
        let _ = std::fs::remove_file(&path);
        done.push(run.tool_run_id);
    }
    Ok(done)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::db::OpenMode;
    use crate::testing::run as sample;

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

    #[test]
    fn spooled_rows_land_once_and_do_not_undo_a_later_end() {
        let tmp = tempfile::tempdir().unwrap();
        let paths = StatePaths {
            root: tmp.path().to_path_buf(),
            db: tmp.path().join("state.db"),
            store_url: None,
            server: None,
        };
        let mut conn = db::open(&paths.db, OpenMode::Create).unwrap();
        // A run whose row never landed at all, one that did (still running), one that was
        // reconciled as vanished, and one cancelled meanwhile.
        let mut missing = sample("TR-MISSING", "x", RunStatus::Completed);
        missing.completed_at = Some("2026-11-22T10:00:00.000Z".into());
        missing.exit_code = Some(0);
        let mut live = sample("TR-LIVE", "x", RunStatus::Failed);
        live.exit_code = Some(7);
        live.reason = Some("exited with code 7".into());
        live.completed_at = Some("2026-11-22T10:00:01.000Z".into());
        let mut vanished = live.clone();
        vanished.tool_run_id = "TR-VANISHED".into();
        let mut cancelled = live.clone();
        cancelled.tool_run_id = "TR-CANCELLED".into();
        db::write(&mut conn, |tx| {
            crate::store::sqlite::runs::insert(tx, &sample("TR-LIVE", "x", RunStatus::Running), "t")?;
            let mut v = sample("TR-VANISHED", "x", RunStatus::Failed);
            v.reason = Some(format!("{VANISHED} (pid 1 is not running)"));
            crate::store::sqlite::runs::insert(tx, &v, "t")?;
            let mut c = sample("TR-CANCELLED", "x", RunStatus::Cancelled);
            c.reason = Some("cancelled by alice".into());
            crate::store::sqlite::runs::insert(tx, &c, "t")
        })
        .unwrap();
        for r in [&missing, &live, &vanished, &cancelled] {
            write(&paths, r).unwrap();
        }
        let mut ids = replay(&mut conn, &paths, "replay", "me").unwrap();
        ids.sort();
        assert_eq!(ids.len(), 4);
        let get = |id: &str| crate::store::sqlite::runs::get(&conn, id).unwrap().unwrap();
        assert_eq!(get("TR-MISSING").status, RunStatus::Completed);
        assert_eq!(get("TR-LIVE").exit_code, Some(7));
        assert_eq!(
            get("TR-LIVE").completed_at.as_deref(),
            Some("2026-11-22T10:00:01.000Z")
        );
        assert_eq!(
            get("TR-VANISHED").reason.as_deref(),
            Some("exited with code 7")
        );
        assert_eq!(get("TR-CANCELLED").status, RunStatus::Cancelled);
        assert!(
            replay(&mut conn, &paths, "replay", "me")
                .unwrap()
                .is_empty()
        );
        assert!(crate::audit::verify(&conn).unwrap().intact());
    }
}
