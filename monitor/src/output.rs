//! Printing for people and for scripts: tables that fit the terminal, and JSON.

use serde::Serialize;
use std::io::{self, Write};
use unicode_width::{UnicodeWidthChar, UnicodeWidthStr};

/// Writes to stdout like `print!`, but a closed pipe (`monitor runs | head -1`) ends the
/// process quietly with exit 0 instead of a panic; any other write error exits 1 with a
/// message. Called through [`out!`](crate::out) and [`outln!`](crate::outln), only after
/// the command's work is committed.
pub fn write_stdout(args: std::fmt::Arguments<'_>, newline: bool) {
    let stdout = io::stdout();
    let mut out = stdout.lock();
    let written = out.write_fmt(args).and_then(|()| {
        if newline {
            out.write_all(b"\n")
        } else {
            Ok(())
        }
    });
    if let Err(e) = written {
        if e.kind() == io::ErrorKind::BrokenPipe {
            std::process::exit(0);
        }
        eprintln!("monitor: cannot write to stdout: {e}");
        std::process::exit(1);
    }
}

/// `print!` to stdout, quiet on a closed pipe.
#[macro_export]
macro_rules! out {
    ($($arg:tt)*) => { $crate::output::write_stdout(format_args!($($arg)*), false) };
}

/// `println!` to stdout, quiet on a closed pipe.
#[macro_export]
macro_rules! outln {
    () => { $crate::output::write_stdout(format_args!(""), true) };
    ($($arg:tt)*) => { $crate::output::write_stdout(format_args!($($arg)*), true) };
}

/// The width to fit: the terminal's, or `None` when stdout is not a terminal (no cutting).
pub fn terminal_width() -> Option<usize> {
    // SAFETY: ws is a valid winsize for TIOCGWINSZ to fill.
    let mut ws: libc::winsize = unsafe { std::mem::zeroed() };
    let ok = unsafe { libc::ioctl(libc::STDOUT_FILENO, libc::TIOCGWINSZ, &mut ws) } == 0;
    if ok && ws.ws_col > 0 {
        return Some(ws.ws_col as usize);
    }
    None
}

/// Whether stdout is a terminal (a person reading, not a script).
pub fn stdout_is_terminal() -> bool {
    // SAFETY: isatty only inspects the descriptor.
    unsafe { libc::isatty(libc::STDOUT_FILENO) == 1 }
}

/// A command line as a POSIX shell would read it back (see `hr_shared::shell`).
pub fn shell_words(argv: &[String]) -> String {
    hr_shared::shell::words(argv)
}

/// Prints `value` as one JSON document (characters that could drive a terminal escaped, see
/// [`escape_terminal_controls`]).
/// The version of the `--json` reports of commands that act (`decide`, `wait`, `cancel`):
/// each object carries it as `schema`, raised when a field changes meaning or goes away.
pub const REPORT_SCHEMA: u32 = 1;

/// One `--json` report of a command that acts: `{"schema": …, fields…}`.
pub fn print_report(fields: serde_json::Value) -> crate::error::CliResult {
    let mut obj = serde_json::Map::new();
    obj.insert("schema".into(), serde_json::json!(REPORT_SCHEMA));
    if let serde_json::Value::Object(m) = fields {
        obj.extend(m);
    }
    Ok(print_json(&serde_json::Value::Object(obj))?)
}

pub fn print_json<T: Serialize + ?Sized>(value: &T) -> io::Result<()> {
    let json = serde_json::to_vec(value).map_err(io::Error::other)?;
    let stdout = io::stdout();
    let mut out = stdout.lock();
    match escape_terminal_controls(&json) {
        Some(escaped) => out.write_all(escaped.as_bytes())?,
        None => out.write_all(&json)?,
    }
    out.write_all(b"\n")?;
    out.flush()
}

/// JSON text with DEL, the C1 controls and the bidirectional overrides written as `\uXXXX`
/// escapes, or `None` when it holds none. serde_json escapes only C0 controls; the others
/// are legal raw in JSON strings but a terminal may act on them. In JSON they can only occur
/// inside strings, so the escaped text parses to the same value.
pub fn escape_terminal_controls(json: &[u8]) -> Option<String> {
    let text = std::str::from_utf8(json).ok()?;
    let risky = |c: char| matches!(c, '\u{7f}'..='\u{9f}' | '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}');
    // Fast path: every risky character is encoded with a 0x7f, 0xc2 or 0xe2 byte.
    if !json.iter().any(|&b| b == 0x7f || b == 0xc2 || b == 0xe2) || !text.chars().any(risky) {
        return None;
    }
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        if risky(c) {
            out.push_str(&format!("\\u{:04x}", c as u32));
        } else {
            out.push(c);
        }
    }
    Some(out)
}

/// Whether tables colour their status words: `--color always|never|auto` (auto: stdout is
/// a terminal, `NO_COLOR` is unset or empty, and `TERM` is not `dumb`).
static COLOR: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ColorWhen {
    Auto,
    Always,
    Never,
}

/// Decides colour once, from the flag and the environment.
pub fn set_color(when: ColorWhen) {
    let on = match when {
        ColorWhen::Always => true,
        ColorWhen::Never => false,
        ColorWhen::Auto => {
            stdout_is_terminal()
                && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
                && std::env::var_os("TERM").is_none_or(|t| t != "dumb")
        }
    };
    COLOR.store(on, std::sync::atomic::Ordering::Relaxed);
}

/// The SGR colour of a status word, if it has one.
fn status_sgr(word: &str) -> Option<&'static str> {
    Some(match word {
        "failed" | "failed_timeout" | "rejected" => "31",
        "stalled" => "35",
        "waiting_approval" | "pending" | "queued" => "33",
        "completed" | "approved" | "resumed" => "32",
        "running" => "36",
        "cancelled" | "expired" => "2",
        _ => return None,
    })
}

/// A text table: columns sized to their content; the last column is cut to fit `width`.
pub struct Table {
    headers: Vec<&'static str>,
    rows: Vec<Vec<String>>,
    /// The column of status words, coloured when colour is on.
    status_column: Option<usize>,
}

impl Table {
    pub fn new(headers: Vec<&'static str>) -> Self {
        Table {
            status_column: headers.iter().position(|h| *h == "STATUS"),
            headers,
            rows: Vec::new(),
        }
    }

    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    /// Renders with two spaces between columns, aligned by display width (a CJK character
    /// or an emoji takes two columns).
    pub fn render(&self, width: Option<usize>) -> String {
        let n = self.headers.len();
        let mut widths: Vec<usize> = self.headers.iter().map(|h| h.width()).collect();
        for row in &self.rows {
            for (i, cell) in row.iter().enumerate().take(n) {
                widths[i] = widths[i].max(cell.width());
            }
        }
        let mut out = String::new();
        let all = std::iter::once(
            self.headers
                .iter()
                .map(|h| h.to_string())
                .collect::<Vec<_>>(),
        )
        .chain(self.rows.iter().cloned());
        let color = COLOR.load(std::sync::atomic::Ordering::Relaxed);
        for (r, row) in all.enumerate() {
            let mut line = String::new();
            // Where the status word is in the line (bytes), and its colour.
            let mut paint: Option<(usize, usize, &str)> = None;
            for (i, cell) in row.iter().enumerate().take(n) {
                if color && r > 0 && Some(i) == self.status_column {
                    paint = status_sgr(cell).map(|sgr| (line.len(), line.len() + cell.len(), sgr));
                }
                line.push_str(cell);
                if i + 1 < n {
                    line.extend(std::iter::repeat_n(' ', widths[i] - cell.width() + 2));
                }
            }
            let line = line.trim_end();
            // Cut by what shows, then colour what is left of the status word.
            let (kept, cut) = match width {
                Some(w) if line.width() > w => (cut_to_width(line, w.saturating_sub(1)), true),
                _ => (line, false),
            };
            match paint {
                Some((start, end, sgr)) if end <= kept.len() => {
                    out.push_str(&kept[..start]);
                    out.push_str(&format!("\x1b[{sgr}m{}\x1b[0m", &kept[start..end]));
                    out.push_str(&kept[end..]);
                }
                _ => out.push_str(kept),
            }
            if cut {
                out.push('…');
            }
            out.push('\n');
        }
        out
    }
}

/// The longest start of `s` that takes at most `w` columns.
fn cut_to_width(s: &str, w: usize) -> &str {
    let mut used = 0;
    for (i, c) in s.char_indices() {
        used += c.width().unwrap_or(0);
        if used > w {
            return &s[..i];
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn terminal_controls_in_json_are_escaped() {
        let v = serde_json::json!({"q": "a\u{9b}31mb\u{202e}c\u{1b}d"});
        let raw = serde_json::to_vec(&v).unwrap();
        let escaped = escape_terminal_controls(&raw).unwrap();
        assert_eq!(escaped, r#"{"q":"a\u009b31mb\u202ec\u001bd"}"#);
        let back: serde_json::Value = serde_json::from_str(&escaped).unwrap();
        assert_eq!(back, v);
        assert!(escape_terminal_controls(br#"{"q":"caf\u00e9 \u2014"}"#).is_none());
        assert!(escape_terminal_controls("{\"q\":\"café — ok\"}".as_bytes()).is_none());
    }

    #[test]
    fn table_aligns_and_fits() {
        let mut t = Table::new(vec!["ID", "TOOL", "REASON"]);
        t.row(vec![
            "TR-1".into(),
            "rm".into(),
            "exited with code 1".into(),
        ]);
        t.row(vec!["TR-22".into(), "terraform".into(), String::new()]);
        let full = t.render(None);
        assert_eq!(
            full,
            "ID     TOOL       REASON\nTR-1   rm         exited with code 1\nTR-22  terraform\n"
        );
        let cut = t.render(Some(20));
        assert!(cut.lines().all(|l| l.width() <= 20), "{cut}");
        assert!(cut.contains('…'));
    }

    #[test]
    fn wide_characters_align_and_fit_by_display_width() {
        let mut t = Table::new(vec!["ID", "TOOL", "REASON"]);
        t.row(vec![
            "TR-1".into(),
            "デプロイ".into(),
            "失敗しました: 理由".into(),
        ]);
        t.row(vec!["TR-2".into(), "rm".into(), "ok".into()]);
        let full = t.render(None);
        let lines: Vec<&str> = full.lines().collect();
        // REASON starts at the same column on every line.
        let col = |l: &str, word: &str| l[..l.find(word).unwrap()].width();
        assert_eq!(col(lines[0], "REASON"), col(lines[1], "失敗"));
        assert_eq!(col(lines[0], "REASON"), col(lines[2], "ok"));
        for w in [10, 17, 21, 22] {
            let cut = t.render(Some(w));
            assert!(cut.lines().all(|l| l.width() <= w), "{w}: {cut}");
        }
    }
}
