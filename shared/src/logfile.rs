//! The JSONL writer for `logs/combined.log`: one whole event per `write(2)` on an
//! `O_APPEND` file, so lines from many processes never interleave.

use crate::event::LogEvent;
use crate::paths;
use std::fs::{self, File};
use std::io::{self, Write};
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
        if fs::metadata(path)
            .map(|m| m.len() > ROTATE_BYTES)
            .unwrap_or(false)
        {
            let mut rotated = path.as_os_str().to_owned();
            rotated.push(".1");
            // Two writers may race to rotate; losing the race is harmless.
            let _ = fs::rename(path, PathBuf::from(rotated));
        }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::EventBody;
    use crate::status::RunStatus;

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
