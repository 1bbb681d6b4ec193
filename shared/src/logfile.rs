//! The JSONL writer for `logs/combined.log`: one whole event per `write(2)` on an
//! `O_APPEND` file, so lines from many processes never interleave.

use crate::event::LogEvent;
use crate::paths;
use std::fs::{self, File};
use std::io::{self, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// When the combined log grows past this, the next writer to open it renames it to
/// `combined.log.1` and starts a new one.
pub const ROTATE_BYTES: u64 = 64 * 1024 * 1024;

/// An open combined log.
#[derive(Debug)]
pub struct CombinedLog {
    file: File,
    path: PathBuf,
}

impl CombinedLog {
    /// Opens (creating 0600, rotating if too large) the log at `path`.
    pub fn open(path: &Path) -> io::Result<Self> {
        Self::open_rotating_at(path, ROTATE_BYTES)
    }

    fn open_rotating_at(path: &Path, limit: u64) -> io::Result<Self> {
        let file = paths::open_private_append(path)?;
        if file.metadata()?.len() <= limit {
            return Ok(CombinedLog {
                file,
                path: path.to_path_buf(),
            });
        }
        rotate_if_still_current(path, &file, limit)?;
        drop(file);
        Ok(CombinedLog {
            file: paths::open_private_append(path)?,
            path: path.to_path_buf(),
        })
    }

    /// Appends one event as one line.
    pub fn append(&mut self, event: &LogEvent) -> io::Result<()> {
        let mut line = serde_json::to_vec(event).map_err(io::Error::other)?;
        line.push(b'\n');
        self.file.write_all(&line)
    }

    /// Where this log is.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// Rotates the log `file` (open on `path`), one writer at a time: under the lock, `path` is
/// renamed to `path.1` only if it is still the very file this writer opened and still past
/// `limit`. A writer that lost the race finds `path` replaced and leaves it — so a rotated
/// log is never renamed over by a second, late rotation.
fn rotate_if_still_current(path: &Path, file: &File, limit: u64) -> io::Result<()> {
    // SAFETY: flock on a descriptor we own; released when the descriptor closes.
    let locked = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) } == 0;
    let mine = file.metadata()?;
    let still_current = fs::metadata(path)
        .is_ok_and(|m| m.dev() == mine.dev() && m.ino() == mine.ino() && m.len() > limit);
    if locked && still_current {
        let mut rotated = path.as_os_str().to_owned();
        rotated.push(".1");
        fs::rename(path, PathBuf::from(rotated))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::EventBody;
    use crate::status::RunStatus;

    #[test]
    fn racing_rotations_never_rename_over_a_rotated_log() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("combined.log");
        let rotated = tmp.path().join("combined.log.1");
        fs::write(&path, vec![b'x'; 100]).unwrap();
        // Writer B opens the big file; writer A opens it too and rotates it first…
        let b = paths::open_private_append(&path).unwrap();
        let mut a = CombinedLog::open_rotating_at(&path, 50).unwrap();
        assert_eq!(fs::metadata(&rotated).unwrap().len(), 100);
        a.file.write_all(&[b'y'; 60]).unwrap();
        // …then B, late, tries: the new file is past the limit too, but it is not the one B
        // opened, so the rotated log stays.
        rotate_if_still_current(&path, &b, 50).unwrap();
        assert_eq!(fs::metadata(&rotated).unwrap().len(), 100);
        assert_eq!(fs::metadata(&path).unwrap().len(), 60);
        // A writer that opens the new file now rotates it in turn.
        let _c = CombinedLog::open_rotating_at(&path, 50).unwrap();
        assert_eq!(fs::metadata(&rotated).unwrap().len(), 60);
        assert_eq!(fs::metadata(&path).unwrap().len(), 0);
        // Under the limit nothing moves.
        let _d = CombinedLog::open_rotating_at(&path, 50).unwrap();
        assert_eq!(fs::metadata(&rotated).unwrap().len(), 60);
    }

    #[test]
    fn appends_whole_lines() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("combined.log");
        let mut log = CombinedLog::open(&path).unwrap();
        for i in 0..3 {
            log.append(&LogEvent {
                body: EventBody::ToolStatusChange {
                    status: RunStatus::Running,
                    previous_status: None,
                    reason: Some(format!("r{i}")),
                    exit_code: None,
                },
                timestamp: "t".into(),
                tool: "x".into(),
                tool_run_id: "TR-1".into(),
                execution_id: None,
            })
            .unwrap();
        }
        let text = fs::read_to_string(&path).unwrap();
        let events: Vec<LogEvent> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(events.len(), 3);
    }

    #[test]
    fn rotates_when_large() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("combined.log");
        let f = File::create(&path).unwrap();
        f.set_len(ROTATE_BYTES + 1).unwrap();
        let log = CombinedLog::open(&path).unwrap();
        assert_eq!(fs::metadata(log.path()).unwrap().len(), 0);
        assert!(tmp.path().join("combined.log.1").exists());
    }
}
