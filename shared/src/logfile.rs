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
/// `combined.log.1` and starts a new one (`HEADLESS_RUN_LOG_MAX` changes it).
pub const ROTATE_BYTES: u64 = 64 * 1024 * 1024;
/// How many rotated generations are kept (`combined.log.1` … `.N`; `HEADLESS_RUN_LOG_KEEP`).
pub const KEEP_GENERATIONS: u32 = 1;
/// The most generations that may be asked for.
pub const MAX_GENERATIONS: u32 = 100;

/// When the combined log is rotated and how many old ones are kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rotation {
    pub max_bytes: u64,
    pub keep: u32,
}

impl Rotation {
    /// From `HEADLESS_RUN_LOG_MAX` (bytes, or with a K/M/G suffix: `16M`) and
    /// `HEADLESS_RUN_LOG_KEEP` (1–100); a value that does not parse keeps its default.
    pub fn from_env(get: &dyn Fn(&str) -> Option<std::ffi::OsString>) -> Rotation {
        let max_bytes = get("HEADLESS_RUN_LOG_MAX")
            .and_then(|v| parse_size(&v.to_string_lossy()))
            .filter(|&n| n >= 4096)
            .unwrap_or(ROTATE_BYTES);
        let keep = get("HEADLESS_RUN_LOG_KEEP")
            .and_then(|v| v.to_string_lossy().trim().parse::<u32>().ok())
            .filter(|k| (1..=MAX_GENERATIONS).contains(k))
            .unwrap_or(KEEP_GENERATIONS);
        Rotation { max_bytes, keep }
    }
}

/// `65536`, `64K`, `16M`, `1G` (powers of 1024; `KB`, `MiB` and lower case too).
pub fn parse_size(s: &str) -> Option<u64> {
    let s = s.trim();
    let digits = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (n, unit) = s.split_at(digits);
    let n: u64 = n.parse().ok()?;
    let mult: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" | "kib" => 1 << 10,
        "m" | "mb" | "mib" => 1 << 20,
        "g" | "gb" | "gib" => 1 << 30,
        _ => return None,
    };
    n.checked_mul(mult)
}

/// Generation `n` of the log at `path` (`combined.log.N`).
pub fn generation(path: &Path, n: u32) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(format!(".{n}"));
    PathBuf::from(s)
}

/// The log's files, oldest first: every rotated generation there is, then the log itself.
pub fn files(path: &Path) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = (1..=MAX_GENERATIONS)
        .map(|n| generation(path, n))
        .take_while(|p| p.exists())
        .collect();
    out.reverse();
    out.push(path.to_path_buf());
    out
}

/// An open combined log. A writer keeps it bounded as it writes, not only when it opens it:
/// every [`CombinedLog::check_every`] bytes of its own it looks again, rotates the log once
/// past the limit, and follows a log another writer rotated — so a flooding tool cannot
/// outrun the rotation (the log stays within the limit, plus what the writers wrote since
/// their last look).
#[derive(Debug)]
pub struct CombinedLog {
    file: File,
    path: PathBuf,
    rotation: Rotation,
    /// Bytes this writer appended since it last looked.
    since_look: u64,
}

impl CombinedLog {
    /// Opens (creating 0600, rotating if too large) the log at `path`.
    pub fn open(path: &Path) -> io::Result<Self> {
        Self::open_rotating(path, Rotation::from_env(&crate::paths::real_env))
    }

    fn open_rotating(path: &Path, rotation: Rotation) -> io::Result<Self> {
        let file = paths::open_private_append(path)?;
        let mut log = CombinedLog {
            file,
            path: path.to_path_buf(),
            rotation,
            since_look: 0,
        };
        if log.file.metadata()?.len() > rotation.max_bytes {
            log.look()?;
        }
        Ok(log)
    }

    /// How many bytes a writer appends between two looks at the log's size: a sixteenth
    /// of the limit, from 4 KiB to 1 MiB.
    pub fn check_every(&self) -> u64 {
        (self.rotation.max_bytes / 16).clamp(4096, 1 << 20)
    }

    /// Appends one event as one line.
    pub fn append(&mut self, event: &LogEvent) -> io::Result<()> {
        let mut line = serde_json::to_vec(event).map_err(io::Error::other)?;
        line.push(b'\n');
        self.file.write_all(&line)?;
        self.since_look += line.len() as u64;
        if self.since_look >= self.check_every() {
            self.since_look = 0;
            self.look()?;
        }
        Ok(())
    }

    /// Keeps the log bounded: rotates it when this writer's file is still the log and past
    /// the limit, and reopens the log when its file is not the log any more (another writer
    /// rotated it, or it was removed).
    fn look(&mut self) -> io::Result<()> {
        let mine = self.file.metadata()?;
        let current =
            fs::metadata(&self.path).is_ok_and(|m| m.dev() == mine.dev() && m.ino() == mine.ino());
        if current && mine.len() <= self.rotation.max_bytes {
            return Ok(());
        }
        if current {
            rotate_if_still_current(&self.path, &self.file, self.rotation)?;
        }
        self.file = paths::open_private_append(&self.path)?;
        Ok(())
    }

    /// Where this log is.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// Rotates the log `file` (open on `path`), one writer at a time: under the lock, and only
/// if `path` is still the very file this writer opened and still past the limit, the
/// older generations move up one (`.N-1` → `.N`, the oldest beyond `keep` dropped) and
/// `path` becomes `path.1`. A writer that lost the race finds `path` replaced and leaves it
/// — so a rotated log is never renamed over by a second, late rotation.
fn rotate_if_still_current(path: &Path, file: &File, rotation: Rotation) -> io::Result<()> {
    // SAFETY: flock on a descriptor we own; released when the descriptor closes.
    let locked = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) } == 0;
    let mine = file.metadata()?;
    let still_current = fs::metadata(path).is_ok_and(|m| {
        m.dev() == mine.dev() && m.ino() == mine.ino() && m.len() > rotation.max_bytes
    });
    if locked && still_current {
        for n in (1..rotation.keep).rev() {
            match fs::rename(generation(path, n), generation(path, n + 1)) {
                Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
                _ => {}
            }
        }
        fs::rename(path, generation(path, 1))?;
        // Generations past `keep` (left by a larger keep earlier) go.
        for n in rotation.keep + 1..=MAX_GENERATIONS {
            if fs::remove_file(generation(path, n)).is_err() {
                break;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::EventBody;
    use crate::status::RunStatus;

    const AT_50: Rotation = Rotation {
        max_bytes: 50,
        keep: 1,
    };

    #[test]
    fn racing_rotations_never_rename_over_a_rotated_log() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("combined.log");
        let rotated = tmp.path().join("combined.log.1");
        fs::write(&path, vec![b'x'; 100]).unwrap();
        // Writer B opens the big file; writer A opens it too and rotates it first…
        let b = paths::open_private_append(&path).unwrap();
        let mut a = CombinedLog::open_rotating(&path, AT_50).unwrap();
        assert_eq!(fs::metadata(&rotated).unwrap().len(), 100);
        a.file.write_all(&[b'y'; 60]).unwrap();
        // …then B, late, tries: the new file is past the limit too, but it is not the one B
        // opened, so the rotated log stays.
        rotate_if_still_current(&path, &b, AT_50).unwrap();
        assert_eq!(fs::metadata(&rotated).unwrap().len(), 100);
        assert_eq!(fs::metadata(&path).unwrap().len(), 60);
        // A writer that opens the new file now rotates it in turn.
        let _c = CombinedLog::open_rotating(&path, AT_50).unwrap();
        assert_eq!(fs::metadata(&rotated).unwrap().len(), 60);
        assert_eq!(fs::metadata(&path).unwrap().len(), 0);
        // Under the limit nothing moves.
        let _d = CombinedLog::open_rotating(&path, AT_50).unwrap();
        assert_eq!(fs::metadata(&rotated).unwrap().len(), 60);
    }

    /// A writer that never closes its log keeps it within the limit (plus one look's worth
    /// and a line), and so does a second writer beside it: each follows the other's
    /// rotations. Nothing is lost beyond the generations kept.
    #[test]
    fn long_lived_writers_cannot_outrun_the_rotation() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("combined.log");
        let rotation = Rotation {
            max_bytes: 64 * 1024,
            keep: 2,
        };
        let mut a = CombinedLog::open_rotating(&path, rotation).unwrap();
        let mut b = CombinedLog::open_rotating(&path, rotation).unwrap();
        let slack = a.check_every() * 2 + 8192;
        let text = "x".repeat(3000);
        let mut written = 0u64;
        for i in 0..2000 {
            let event = LogEvent::about_run(
                crate::event::EventBody::ToolOutput {
                    stream: "pty".into(),
                    text: format!("{i} {text}"),
                    truncated: false,
                    skipped_lines: 0,
                },
                "flood",
                "TR-1",
                None,
            );
            if i % 2 == 0 {
                a.append(&event)
            } else {
                b.append(&event)
            }
            .unwrap();
            written += 3000;
        }
        assert!(written > 5_000_000);
        let sizes: Vec<u64> = files(&path)
            .iter()
            .map(|f| fs::metadata(f).unwrap().len())
            .collect();
        assert_eq!(sizes.len(), 3, "two generations and the log: {sizes:?}");
        for s in &sizes {
            assert!(*s <= rotation.max_bytes + slack, "{sizes:?}");
        }
        // Every line whole.
        for f in files(&path) {
            for line in fs::read_to_string(&f).unwrap().lines() {
                serde_json::from_str::<serde_json::Value>(line).expect("a whole event");
            }
        }
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

    #[test]
    fn generations_move_up_and_the_oldest_beyond_keep_goes() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("combined.log");
        let three = Rotation {
            max_bytes: 10,
            keep: 3,
        };
        for round in 0..5u8 {
            fs::write(&path, vec![b'a' + round; 20]).unwrap();
            let _ = CombinedLog::open_rotating(&path, three).unwrap();
        }
        // Rounds 4, 3 and 2 kept as .1, .2, .3; 0 and 1 gone.
        let first = |p: PathBuf| fs::read(p).unwrap()[0];
        assert_eq!(first(generation(&path, 1)), b'e');
        assert_eq!(first(generation(&path, 2)), b'd');
        assert_eq!(first(generation(&path, 3)), b'c');
        assert!(!generation(&path, 4).exists());
        assert_eq!(
            files(&path),
            [
                generation(&path, 3),
                generation(&path, 2),
                generation(&path, 1),
                path.clone()
            ]
        );
        // A smaller keep later drops the generations past it.
        fs::write(&path, vec![b'z'; 20]).unwrap();
        let _ = CombinedLog::open_rotating(
            &path,
            Rotation {
                max_bytes: 10,
                keep: 1,
            },
        )
        .unwrap();
        assert_eq!(first(generation(&path, 1)), b'z');
        assert!(!generation(&path, 2).exists() && !generation(&path, 3).exists());
    }

    #[test]
    fn rotation_comes_from_the_environment_within_bounds() {
        let env = |max: &'static str, keep: &'static str| {
            Rotation::from_env(&move |k: &str| match k {
                "HEADLESS_RUN_LOG_MAX" => Some(max.into()),
                "HEADLESS_RUN_LOG_KEEP" => Some(keep.into()),
                _ => None,
            })
        };
        assert_eq!(
            env("16M", "5"),
            Rotation {
                max_bytes: 16 << 20,
                keep: 5
            }
        );
        assert_eq!(env("65536", "1").max_bytes, 65536);
        // Nonsense, zero, too small or too many: the defaults.
        let defaults = Rotation {
            max_bytes: ROTATE_BYTES,
            keep: KEEP_GENERATIONS,
        };
        assert_eq!(env("lots", "0"), defaults);
        assert_eq!(env("10", "101"), defaults);
        assert_eq!(env("99999999999999999999G", "x"), defaults);
    }
}
