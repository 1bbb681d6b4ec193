//! The ends of the log files, made fit to draw: a run's raw pty output rendered through a
//! terminal emulator (`vt100`), and `logs/combined.log` as one short line per event. Reads
//! are bounded (the last [`WINDOW`] bytes), and everything is sanitized.

use hr_shared::event::{EventBody, LogEvent};
use hr_shared::sanitize::sanitize_line;
use std::io::{Read, Seek, SeekFrom};
use std::num::NonZeroU16;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// The most of a file's end that is read.
pub const WINDOW: u64 = 64 * 1024;

/// The size of the emulated terminal a run's output is replayed into: the shim's headless
/// pty is 200 columns wide; the rows are many, so the tail of line-oriented output survives.
const EMU_COLS: u16 = 200;
const EMU_ROWS: u16 = 400;

/// The last [`WINDOW`] bytes of a file, starting after the first newline when cut (so no
/// partial first line); empty when the file cannot be read.
pub fn read_end(path: &Path) -> Vec<u8> {
    let Ok(mut f) = std::fs::File::open(path) else {
        return Vec::new();
    };
    let len = f.metadata().map(|m| m.len()).unwrap_or(0);
    let start = len.saturating_sub(WINDOW);
    if f.seek(SeekFrom::Start(start)).is_err() {
        return Vec::new();
    }
    let mut buf = Vec::with_capacity((len - start) as usize);
    let _ = f.take(WINDOW).read_to_end(&mut buf);
    if start > 0
        && let Some(nl) = buf.iter().position(|&b| b == b'\n')
    {
        buf.drain(..=nl);
    }
    buf
}

/// What tells that a file changed without reading it: which file it is, its size and its
/// modification time (the logs are only ever appended to).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileStamp {
    dev: u64,
    ino: u64,
    len: u64,
    mtime_ns: i128,
}

/// The stamp of a file; `None` when it cannot be read (missing: nothing to show).
pub fn stamp(path: &Path) -> Option<FileStamp> {
    let m = std::fs::metadata(path).ok()?;
    Some(FileStamp {
        dev: m.dev(),
        ino: m.ino(),
        len: m.len(),
        mtime_ns: i128::from(m.mtime()) * 1_000_000_000 + i128::from(m.mtime_nsec()),
    })
}

/// The tails the dashboard shows, read (and parsed, or replayed through the emulator) again
/// only when their file's [`FileStamp`] changed: most changes of the database (heartbeats)
/// leave the logs as they were.
#[derive(Debug, Default)]
pub struct TailCache {
    log: Option<(Option<FileStamp>, Vec<LogLine>)>,
    output: Option<(PathBuf, Option<FileStamp>, Vec<String>)>,
}

impl TailCache {
    /// [`combined_log`], from the cache while the file is unchanged.
    pub fn combined_log(&mut self, path: &Path, lines: usize) -> Vec<LogLine> {
        // The stamp is taken before reading: a write in between is read now and its
        // stamp seen (and the file read again) next time.
        let now = stamp(path);
        if let Some((then, cached)) = &self.log
            && *then == now
        {
            return cached.clone();
        }
        let fresh = combined_log(path, lines);
        self.log = Some((now, fresh.clone()));
        fresh
    }

    /// [`run_output`], from the cache while the file is unchanged.
    pub fn run_output(&mut self, path: &Path, lines: usize) -> Vec<String> {
        let now = stamp(path);
        if let Some((p, then, cached)) = &self.output
            && p == path
            && *then == now
        {
            return cached.clone();
        }
        let fresh = run_output(path, lines);
        self.output = Some((path.to_path_buf(), now, fresh.clone()));
        fresh
    }
}

/// The last `lines` lines of a run's output as a terminal shows them: colours, cursor
/// moves and redraws are applied by the emulator, leaving plain text.
pub fn run_output(path: &Path, lines: usize) -> Vec<String> {
    render_output(&read_end(path), lines)
}

/// Renders raw pty bytes; see [`run_output`].
pub fn render_output(raw: &[u8], lines: usize) -> Vec<String> {
    if raw.is_empty() {
        return Vec::new();
    }
    // The shim turns output post-processing off, so a tool's `\n` is stored bare; a
    // terminal would only move down on it. Give it back its carriage return.
    let mut bytes = Vec::with_capacity(raw.len() + raw.len() / 32);
    let mut prev = 0u8;
    for &b in raw {
        if b == b'\n' && prev != b'\r' {
            bytes.push(b'\r');
        }
        bytes.push(b);
        prev = b;
    }
    let (Some(rows), Some(cols)) = (NonZeroU16::new(EMU_ROWS), NonZeroU16::new(EMU_COLS)) else {
        return Vec::new();
    };
    let mut parser = vt100::Parser::new(rows, cols, 0);
    parser.process(&bytes);
    let mut out: Vec<String> = parser
        .screen()
        .rows(0, EMU_COLS)
        .map(|r| sanitize_line(r.trim_end()))
        .collect();
    while out.last().is_some_and(|l| l.is_empty()) {
        out.pop();
    }
    let skip = out.len().saturating_sub(lines);
    out.drain(..skip);
    out
}

/// What kind of event a log line shows (for its colour).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogKind {
    Status(hr_shared::status::RunStatus),
    ApprovalNeeded,
    Decision,
    Output,
    Heartbeat,
    Unreadable,
}

/// One event of the combined log, ready to draw.
#[derive(Debug, Clone, PartialEq)]
pub struct LogLine {
    /// `HH:MM:SS` (UTC) of the event.
    pub time: String,
    pub tool: String,
    pub run: String,
    pub kind: LogKind,
    pub text: String,
}

/// The last `lines` events of the combined log (supervisor heartbeats left out: they are
/// noise), oldest first.
pub fn combined_log(path: &Path, lines: usize) -> Vec<LogLine> {
    let raw = read_end(path);
    let text = String::from_utf8_lossy(&raw);
    let mut out: Vec<LogLine> = text
        .lines()
        .filter(|l| !l.trim().is_empty())
        .filter_map(log_line)
        .collect();
    let skip = out.len().saturating_sub(lines);
    out.drain(..skip);
    out
}

/// Formats one line of the combined log; `None` for events not worth a line.
pub fn log_line(line: &str) -> Option<LogLine> {
    let Ok(ev) = serde_json::from_str::<LogEvent>(line) else {
        return Some(LogLine {
            time: String::new(),
            tool: String::new(),
            run: String::new(),
            kind: LogKind::Unreadable,
            text: sanitize_line(&truncate(line, 200)),
        });
    };
    let (kind, text) = match &ev.body {
        EventBody::ToolStatusChange {
            status,
            reason,
            exit_code,
            ..
        } => {
            let mut t = format!("status {status}");
            if let Some(c) = exit_code {
                t.push_str(&format!(" (exit {c})"));
            }
            if let Some(r) = reason.as_deref().filter(|r| !r.is_empty()) {
                t.push_str(": ");
                t.push_str(r);
            }
            (LogKind::Status(*status), t)
        }
        EventBody::ApprovalNeeded {
            approval_id,
            question,
            options,
            ..
        } => {
            let opts: Vec<&str> = options.iter().map(|o| o.value.as_str()).collect();
            (
                LogKind::ApprovalNeeded,
                format!(
                    "approval needed {}: {question} [{}]",
                    short_id(approval_id),
                    opts.join("/")
                ),
            )
        }
        EventBody::ApprovalStatusChange {
            approval_id,
            status,
            chosen_value,
            decided_by,
            decision_channel,
            comment,
        } => {
            let mut t = format!("approval {} {status}", short_id(approval_id));
            if let Some(v) = chosen_value {
                t.push_str(&format!(" `{v}`"));
            }
            if let Some(by) = decided_by {
                t.push_str(&format!(" by {by}"));
            }
            if let Some(ch) = decision_channel {
                t.push_str(&format!(" ({ch})"));
            }
            if let Some(c) = comment.as_deref().filter(|c| !c.is_empty()) {
                t.push_str(&format!(": {c}"));
            }
            (LogKind::Decision, t)
        }
        EventBody::Heartbeat { source, message } => {
            if source == "supervisor" {
                return None;
            }
            (
                LogKind::Heartbeat,
                format!("heartbeat {}", message.as_deref().unwrap_or("")),
            )
        }
        EventBody::ToolOutput { text, .. } => (LogKind::Output, format!("│ {text}")),
    };
    Some(LogLine {
        time: ev.timestamp.get(11..19).unwrap_or("").to_owned(),
        tool: sanitize_line(&ev.tool),
        run: short_id(&ev.tool_run_id),
        kind,
        text: sanitize_line(&truncate(&text, 400)),
    })
}

fn truncate(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_owned();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end])
}

/// An id as the tables show it: the prefix and the last 8 characters (the random part,
/// enough to tell ids apart at a glance), e.g. `TR-…7K3QZX2A`.
pub fn short_id(id: &str) -> String {
    let id = sanitize_line(id);
    let chars: Vec<char> = id.chars().collect();
    if chars.len() <= 14 {
        return id;
    }
    let prefix: String = chars.iter().take(3).collect();
    let end: String = chars[chars.len() - 8..].iter().collect();
    if prefix.ends_with('-') {
        format!("{prefix}…{end}")
    } else {
        format!("…{end}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_is_rendered_like_a_terminal() {
        let raw = b"one\ntwo\x1b[31m red\x1b[0m\nthree\rTHREE\n\x1b]0;title\x07four\x1b[2K\rfive\n";
        assert_eq!(render_output(raw, 10), ["one", "two red", "THREE", "five"]);
        assert_eq!(render_output(raw, 2), ["THREE", "five"]);
        assert!(render_output(b"", 5).is_empty());
    }

    #[test]
    fn full_screen_output_keeps_what_is_on_screen() {
        let raw = b"junk\x1b[2J\x1b[Hmenu\x1b[3;1H> option 1";
        assert_eq!(render_output(raw, 10), ["menu", "", "> option 1"]);
    }

    #[test]
    fn log_lines_are_short_and_clean() {
        let l = log_line(r#"{"event":"tool_status_change","timestamp":"2026-01-02T03:04:05.678Z","tool":"rm","tool_run_id":"TR-01JABCDEFGHJKMNPQRSTVWXYZ0","status":"completed","exit_code":0}"#).unwrap();
        assert_eq!(l.time, "03:04:05");
        assert_eq!(l.run, "TR-…STVWXYZ0");
        assert_eq!(l.text, "status completed (exit 0)");
        let l = log_line(r#"{"event":"tool_output","timestamp":"2026-01-02T03:04:05.678Z","tool":"x","tool_run_id":"TR-1","stream":"pty","text":"\u001b[31mred\u001b]0;t\u0007"}"#).unwrap();
        assert_eq!(l.text, "│ red");
        assert!(log_line(r#"{"event":"heartbeat","timestamp":"t","tool":"x","tool_run_id":"TR-1","source":"supervisor"}"#).is_none());
        let bad = log_line("not json \x1b[2J").unwrap();
        assert_eq!(bad.kind, LogKind::Unreadable);
        assert_eq!(bad.text, "not json ");
    }

    #[test]
    fn the_cache_reads_a_log_again_only_when_it_changed() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("combined.log");
        let line = |tool: &str| {
            format!(
                "{{\"event\":\"tool_status_change\",\"timestamp\":\"2026-01-02T03:04:05.678Z\",\"tool\":\"{tool}\",\"tool_run_id\":\"TR-1\",\"status\":\"running\"}}\n"
            )
        };
        let mut cache = TailCache::default();
        assert!(cache.combined_log(&path, 10).is_empty());
        std::fs::write(&path, line("one")).unwrap();
        assert_eq!(cache.combined_log(&path, 10).len(), 1);
        // Rewritten in place to the same size, its modification time put back: the stamp
        // is the same, so the file is not read again.
        let mtime = std::fs::metadata(&path).unwrap().modified().unwrap();
        let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        std::io::Write::write_all(&mut &f, line("two").as_bytes()).unwrap();
        f.set_modified(mtime).unwrap();
        drop(f);
        let tools = |cache: &mut TailCache| -> Vec<String> {
            cache
                .combined_log(&path, 10)
                .into_iter()
                .map(|l| l.tool)
                .collect()
        };
        assert_eq!(tools(&mut cache), ["one"]);
        // Appended to: read again.
        let f = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap();
        std::io::Write::write_all(&mut &f, line("new").as_bytes()).unwrap();
        assert_eq!(tools(&mut cache), ["two", "new"]);
        // Another run's output is another file.
        let a = tmp.path().join("a.log");
        let b = tmp.path().join("b.log");
        std::fs::write(&a, b"from a\n").unwrap();
        std::fs::write(&b, b"from b\n").unwrap();
        assert_eq!(cache.run_output(&a, 5), ["from a"]);
        assert_eq!(cache.run_output(&b, 5), ["from b"]);
        assert_eq!(cache.run_output(&a, 5), ["from a"]);
    }

    #[test]
    fn short_ids() {
        assert_eq!(short_id("TR-01JABCDEFGHJKMNPQRSTVWXYZ0"), "TR-…STVWXYZ0");
        assert_eq!(short_id("TR-1"), "TR-1");
    }
}
