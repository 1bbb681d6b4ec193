//! Printing for people and for scripts: tables that fit the terminal, and JSON.

use serde::Serialize;
use std::io::{self, Write};

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

/// Prints `value` as one JSON document.
pub fn print_json<T: Serialize + ?Sized>(value: &T) -> io::Result<()> {
    let stdout = io::stdout();
    let mut out = io::BufWriter::with_capacity(256 * 1024, stdout.lock());
    serde_json::to_writer(&mut out, value).map_err(io::Error::other)?;
    out.write_all(b"\n")?;
    out.flush()
}

/// A text table: columns sized to their content; the last column is cut to fit `width`.
pub struct Table {
    headers: Vec<&'static str>,
    rows: Vec<Vec<String>>,
}

impl Table {
    pub fn new(headers: Vec<&'static str>) -> Self {
        Table {
            headers,
            rows: Vec::new(),
        }
    }

    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    /// Renders with two spaces between columns.
    pub fn render(&self, width: Option<usize>) -> String {
        let n = self.headers.len();
        let mut widths: Vec<usize> = self.headers.iter().map(|h| h.chars().count()).collect();
        for row in &self.rows {
            for (i, cell) in row.iter().enumerate().take(n) {
                widths[i] = widths[i].max(cell.chars().count());
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
        for row in all {
            let mut line = String::new();
            for (i, cell) in row.iter().enumerate().take(n) {
                if i + 1 == n {
                    line.push_str(cell);
                } else {
                    line.push_str(cell);
                    line.extend(std::iter::repeat_n(
                        ' ',
                        widths[i] - cell.chars().count() + 2,
                    ));
                }
            }
            let line = line.trim_end();
            match width {
                Some(w) if line.chars().count() > w => {
                    let cut: String = line.chars().take(w.saturating_sub(1)).collect();
                    out.push_str(&cut);
                    out.push('…');
                }
                _ => out.push_str(line),
            }
            out.push('\n');
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        assert!(cut.lines().all(|l| l.chars().count() <= 20), "{cut}");
        assert!(cut.contains('…'));
    }
}
