//! `monitor logs [-f] [--run TR-ID] [--json]`: the combined event log pretty-printed (or
//! raw), or one run's output; `-f` follows through rotation and a file not there yet.

use crate::cli::Ctx;
use crate::error::{CliError, CliResult};
use crate::output;
use crate::parse;
use hr_shared::sanitize::{sanitize_line, sanitize_text};
use serde_json::Value;
use std::fs::File;
use std::io::{self, BufRead, BufReader, Read, Seek, SeekFrom, Write};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// How often a followed file is looked at.
const FOLLOW_POLL: Duration = Duration::from_millis(100);
/// A partial last line is shown (to a terminal) after this long without its newline: a
/// prompt never gets one.
const PARTIAL_LINE_AFTER: Duration = Duration::from_millis(500);

#[derive(Debug, clap::Args)]
#[command(after_help = "\
Without --run: logs/combined.log (after the generations rotated out of it, oldest first:
combined.log.N … .1; see HEADLESS_RUN_LOG_MAX and HEADLESS_RUN_LOG_KEEP), one event per line: time, tool, run, event and its text, with control characters
removed. --json prints the lines as they are (JSON objects; see the README for the fields).

With --run TR-…: that run's raw output (logs/runs/TR-….log), byte for byte when piped;
to a terminal, escape sequences and control characters are removed. With --json too: the
run's events from the combined log instead.

-f keeps printing what is appended: it follows the combined log through rotation and waits
for a file that does not exist yet; following a run's output ends once the run has ended.

Examples:
  monitor logs -n 50                     # the last 50 events
  monitor logs -f --json | jq 'select(.event == \"approval_needed\")'
  monitor logs --run TR-01m8a > output.txt")]
pub struct Args {
    /// Keep printing new lines as they are written
    #[arg(short = 'f', long)]
    follow: bool,
    /// One run's output (or, with --json, its events)
    #[arg(long, value_name = "TR-ID")]
    run: Option<String>,
    /// Raw JSON lines of the combined log
    #[arg(long)]
    json: bool,
    /// Start with the last N lines (default: all, or 10 with -f)
    #[arg(short = 'n', long, value_name = "N")]
    lines: Option<usize>,
}

/// How lines are printed.
#[derive(Clone, Copy)]
enum Format {
    /// Combined log, pretty; optionally only one run's events.
    Pretty,
    /// Combined log lines as they are.
    Json,
    /// A run's raw output.
    Raw,
}

struct Printer {
    format: Format,
    only_run: Option<String>,
    terminal: bool,
    out: io::BufWriter<io::Stdout>,
}

impl Printer {
    fn line(&mut self, line: &[u8]) -> io::Result<()> {
        match self.format {
            Format::Raw => {
                if self.terminal {
                    let text = String::from_utf8_lossy(line);
                    let text = text.strip_suffix('\n').unwrap_or(&text);
                    // What a terminal would show of a line rewritten with `\r`.
                    let shown = text.split('\r').rfind(|s| !s.is_empty()).unwrap_or("");
                    writeln!(self.out, "{}", sanitize_text(shown))
                } else {
                    self.out.write_all(line)
                }
            }
            Format::Json | Format::Pretty => {
                let body = line.strip_suffix(b"\n").unwrap_or(line);
                if body.is_empty() {
                    return Ok(());
                }
                let parsed: Option<Value> = serde_json::from_slice(body).ok();
                if let Some(run) = &self.only_run
                    && parsed.as_ref().and_then(|v| v["tool_run_id"].as_str()) != Some(run.as_str())
                {
                    return Ok(());
                }
                if let Format::Json = self.format {
                    match output::escape_terminal_controls(body).filter(|_| self.terminal) {
                        Some(escaped) => self.out.write_all(escaped.as_bytes())?,
                        None => self.out.write_all(body)?,
                    }
                    return self.out.write_all(b"\n");
                }
                match parsed {
                    Some(v) => writeln!(self.out, "{}", pretty(&v)),
                    None => writeln!(
                        self.out,
                        "(not a JSON event) {}",
                        sanitize_line(&String::from_utf8_lossy(body))
                    ),
                }
            }
        }
    }
}

pub fn run(ctx: &Ctx, args: Args) -> CliResult {
    let terminal = output::stdout_is_terminal();
    // A quick run's status events are written by its finisher after its shim exits.
    hr_shared::finishing::settle(&ctx.paths, hr_shared::finishing::SETTLE_MAX);
    let (paths, format, only_run, run_id) = match &args.run {
        Some(id) => {
            parse::run_id(id)?;
            // An unknown run is an error; a database that cannot be read does not stop us
            // from printing a log file that exists.
            let id = match ctx.open() {
                Ok(mut store) => ctx.full_id(store.as_mut(), id)?,
                Err(_) if ctx.paths.run_log(id).exists() => id.to_owned(),
                Err(_) => return Err(CliError::not_found(format!("no run {id}"))),
            };
            if args.json {
                let log = ctx.paths.combined_log();
                (
                    hr_shared::logfile::files(&log),
                    Format::Pretty,
                    Some(id.clone()),
                    Some(id),
                )
            } else {
                (vec![ctx.paths.run_log(&id)], Format::Raw, None, Some(id))
            }
        }
        None => {
            let log = ctx.paths.combined_log();
            (hr_shared::logfile::files(&log), Format::Pretty, None, None)
        }
    };
    let format = match (format, args.json) {
        (Format::Pretty, true) => Format::Json,
        (f, _) => f,
    };
    let mut printer = Printer {
        format,
        only_run,
        terminal,
        out: io::BufWriter::new(io::stdout()),
    };
    let Some(current) = paths.last().cloned() else {
        return Ok(());
    };
    let limit = args.lines.or(args.follow.then_some(10));
    // What is there now: every file in order, or the last N lines of them.
    let start_at = print_existing(&paths, limit, &mut printer)?;
    printer.out.flush()?;
    if !args.follow {
        if !paths.iter().any(|p| p.exists()) {
            match format {
                Format::Raw => {
                    eprintln!("monitor: {} has no output yet", run_id.unwrap_or_default())
                }
                _ => eprintln!(
                    "monitor: no events yet ({} does not exist)",
                    current.display()
                ),
            }
        }
        return Ok(());
    }
    follow(ctx, &current, start_at, run_id.as_deref(), &mut printer)
}

/// Prints what the files hold now (all, or the last `limit` lines across them); returns
/// where the last file ended (its inode and length), to follow from there.
fn print_existing(
    files: &[PathBuf],
    limit: Option<usize>,
    printer: &mut Printer,
) -> CliResult<Option<(u64, u64)>> {
    let mut end = None;
    match limit {
        None => {
            for (i, path) in files.iter().enumerate() {
                let Ok(f) = File::open(path) else { continue };
                let meta = f.metadata()?;
                let mut reader = BufReader::new(f.take(meta.len()));
                let mut line = Vec::new();
                loop {
                    line.clear();
                    if reader.read_until(b'\n', &mut line)? == 0 {
                        break;
                    }
                    printer.line(&line)?;
                }
                if i + 1 == files.len() {
                    end = Some((meta.ino(), meta.len()));
                }
            }
        }
        Some(n) => {
            // Gather the last n lines, newest file first.
            let mut wanted: Vec<Vec<u8>> = Vec::new();
            for (i, path) in files.iter().enumerate().rev() {
                let Ok(mut f) = File::open(path) else {
                    continue;
                };
                let meta = f.metadata()?;
                if i + 1 == files.len() {
                    end = Some((meta.ino(), meta.len()));
                }
                if wanted.len() >= n {
                    continue;
                }
                let mut lines = tail_lines(&mut f, meta.len(), n - wanted.len())?;
                lines.append(&mut wanted);
                wanted = lines;
            }
            for l in &wanted {
                printer.line(l)?;
            }
        }
    }
    Ok(end)
}

/// The last `n` lines of the first `len` bytes of `f`, read backwards in blocks: each block
/// read once and its newlines counted once, so the cost is linear in what the lines hold
/// (not in the square of it, as re-counting a growing buffer was).
fn tail_lines(f: &mut File, len: u64, n: usize) -> io::Result<Vec<Vec<u8>>> {
    if n == 0 || len == 0 {
        return Ok(Vec::new());
    }
    const BLOCK: u64 = 64 * 1024;
    let mut start = len;
    // Blocks from the end backwards; newlines seen in them, the file's last byte aside (the
    // last line may lack its newline, or end with it).
    let mut blocks: Vec<Vec<u8>> = Vec::new();
    let mut newlines = 0usize;
    while start > 0 {
        let from = start.saturating_sub(BLOCK);
        let mut block = vec![0u8; (start - from) as usize];
        f.seek(SeekFrom::Start(from))?;
        f.read_exact(&mut block)?;
        let counted = if start == len {
            block.strip_suffix(b"\n").unwrap_or(&block)
        } else {
            &block[..]
        };
        newlines += counted.iter().filter(|&&b| b == b'\n').count();
        blocks.push(block);
        start = from;
        // n lines need n newlines before them (or the start of the file).
        if newlines >= n {
            break;
        }
    }
    let mut buf = Vec::with_capacity(blocks.iter().map(Vec::len).sum());
    for b in blocks.iter().rev() {
        buf.extend_from_slice(b);
    }
    let mut lines: Vec<Vec<u8>> = buf
        .split_inclusive(|&b| b == b'\n')
        .map(<[u8]>::to_vec)
        .collect();
    if start > 0 && !lines.is_empty() {
        // The first piece may be the end of a longer line.
        lines.remove(0);
    }
    let skip = lines.len().saturating_sub(n);
    Ok(lines.split_off(skip))
}

/// A file followed by name: reopened when it is replaced (rotation) or appears.
struct Followed {
    path: PathBuf,
    file: Option<File>,
    ino: u64,
    pos: u64,
    /// The file rotated out: writers that opened it before the rotation may still append
    /// whole lines to it for a while.
    retired: Option<Retired>,
}

struct Retired {
    file: File,
    pos: u64,
    last_growth: Instant,
}

/// A rotated-out file is read until it has not grown for this long.
const RETIRED_GRACE: Duration = Duration::from_secs(60);

impl Followed {
    /// New bytes since the last call, across a rotation.
    fn read_new(&mut self) -> io::Result<Vec<u8>> {
        let mut data = Vec::new();
        self.drain_retired(&mut data)?;
        if self.file.is_none() {
            self.reopen(0)?;
        }
        self.drain_into(&mut data)?;
        match std::fs::metadata(&self.path) {
            Ok(meta) if self.file.is_none() || meta.ino() != self.ino => {
                // Rotated (or created): the old file was read to its end above; go on with
                // the new one from its start, and keep an eye on the old one.
                if let Some(file) = self.file.take() {
                    self.retired = Some(Retired {
                        file,
                        pos: self.pos,
                        last_growth: Instant::now(),
                    });
                }
                self.reopen(0)?;
                self.drain_into(&mut data)?;
            }
            Ok(meta) if meta.len() < self.pos => {
                // Truncated in place: start over.
                self.pos = 0;
                self.drain_into(&mut data)?;
            }
            _ => {}
        }
        Ok(data)
    }

    fn reopen(&mut self, pos: u64) -> io::Result<()> {
        match File::open(&self.path) {
            Ok(f) => {
                self.ino = f.metadata()?.ino();
                self.file = Some(f);
                self.pos = pos;
                Ok(())
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                self.file = None;
                Ok(())
            }
            Err(e) => Err(e),
        }
    }

    /// Whole lines appended to the rotated-out file since the last look.
    fn drain_retired(&mut self, data: &mut Vec<u8>) -> io::Result<()> {
        let Some(r) = &mut self.retired else {
            return Ok(());
        };
        let mut fresh = Vec::new();
        r.file.seek(SeekFrom::Start(r.pos))?;
        r.file.read_to_end(&mut fresh)?;
        if let Some(end) = fresh.iter().rposition(|&b| b == b'\n') {
            data.extend_from_slice(&fresh[..=end]);
            r.pos += end as u64 + 1;
            r.last_growth = Instant::now();
        } else if r.last_growth.elapsed() >= RETIRED_GRACE {
            self.retired = None;
        }
        Ok(())
    }

    fn drain_into(&mut self, data: &mut Vec<u8>) -> io::Result<()> {
        if let Some(f) = &mut self.file {
            f.seek(SeekFrom::Start(self.pos))?;
            let n = f.read_to_end(data)?;
            self.pos += n as u64;
        }
        Ok(())
    }
}

fn follow(
    ctx: &Ctx,
    path: &Path,
    start_at: Option<(u64, u64)>,
    run_id: Option<&str>,
    printer: &mut Printer,
) -> CliResult {
    let mut followed = Followed {
        path: path.to_path_buf(),
        file: None,
        ino: 0,
        pos: 0,
        retired: None,
    };
    if let Some((ino, len)) = start_at {
        followed.reopen(len)?;
        if followed.ino != ino {
            // Replaced between the first read and now: read the new one whole.
            followed.pos = 0;
        }
    }
    let follow_run_log = matches!(printer.format, Format::Raw);
    let mut pending: Vec<u8> = Vec::new();
    let mut pending_since = Instant::now();
    let mut last_status_check = Instant::now();
    loop {
        let data = followed.read_new()?;
        if !data.is_empty() {
            if pending.is_empty() {
                pending_since = Instant::now();
            }
            pending.extend_from_slice(&data);
            let cut = pending.iter().rposition(|&b| b == b'\n').map(|i| i + 1);
            if let Some(cut) = cut {
                let rest = pending.split_off(cut);
                for line in pending.split_inclusive(|&b| b == b'\n') {
                    printer.line(line)?;
                }
                pending = rest;
                pending_since = Instant::now();
            }
        }
        // A prompt has no newline: show a partial line of raw output once it sat a while.
        if follow_run_log
            && !pending.is_empty()
            && (!printer.terminal || pending_since.elapsed() >= PARTIAL_LINE_AFTER)
        {
            printer.line(&pending)?;
            pending.clear();
        }
        printer.out.flush()?;
        if let Some(id) = run_id
            && follow_run_log
            && last_status_check.elapsed() >= Duration::from_secs(1)
        {
            last_status_check = Instant::now();
            if run_has_ended(ctx, id) && followed.read_new().map(|d| d.is_empty()).unwrap_or(true) {
                return Ok(());
            }
        }
        std::thread::sleep(FOLLOW_POLL);
    }
}

fn run_has_ended(ctx: &Ctx, id: &str) -> bool {
    ctx.open()
        .ok()
        .and_then(|mut store| store.run(id).ok().flatten())
        .is_some_and(|r| {
            // Parked on an approval: its output ends there too (a resume is a new run).
            let phase = hr_shared::rules::phase(&r);
            phase.is_over() || phase == hr_shared::rules::RunPhase::Parked
        })
}

/// One combined-log event as a line: time, tool, run, event, text.
fn pretty(v: &Value) -> String {
    let s = |k: &str| v[k].as_str().unwrap_or("");
    let ts = s("timestamp");
    // 2026-11-22T08:00:00.123Z → 11-22 08:00:00.123
    let when = ts
        .get(5..23)
        .map(|t| t.replacen('T', " ", 1))
        .unwrap_or_else(|| ts.to_owned());
    let event = s("event");
    let text = match event {
        "tool_status_change" => {
            let mut t = String::new();
            if let Some(prev) = v["previous_status"].as_str() {
                t.push_str(prev);
                t.push_str(" → ");
            }
            t.push_str(s("status"));
            if let Some(code) = v["exit_code"].as_i64() {
                t.push_str(&format!(" (exit {code})"));
            }
            if let Some(r) = v["reason"].as_str() {
                t.push_str(": ");
                t.push_str(r);
            }
            t
        }
        "approval_needed" => {
            let options: Vec<&str> = v["options"]
                .as_array()
                .map(|a| a.iter().filter_map(|o| o["value"].as_str()).collect())
                .unwrap_or_default();
            format!(
                "{} asks: {} [{}]",
                s("approval_id"),
                s("question").trim(),
                options.join("/")
            )
        }
        "approval_status_change" => {
            let mut t = format!("{} {}", s("approval_id"), s("status"));
            if let Some(c) = v["chosen_value"].as_str() {
                t.push_str(&format!(" `{c}`"));
            }
            if let Some(by) = v["decided_by"].as_str() {
                t.push_str(&format!(" by {by}"));
            }
            if let Some(ch) = v["decision_channel"].as_str() {
                t.push_str(&format!(" via {ch}"));
            }
            if let Some(c) = v["comment"].as_str() {
                t.push_str(&format!(": {c}"));
            }
            t
        }
        "heartbeat" => format!("{} {}", s("source"), s("message")),
        "tool_output" => {
            let mut t = s("text").to_owned();
            if v["truncated"].as_bool() == Some(true) {
                t.push_str(" …(truncated)");
            }
            t
        }
        _ => v.to_string(),
    };
    let tool = crate::cmd::approvals::clip(&sanitize_line(s("tool")), 14);
    let label = match event {
        "tool_status_change" => "status",
        "approval_needed" => "approval?",
        "approval_status_change" => "decision",
        "heartbeat" => "heartbeat",
        "tool_output" => "output",
        other => other,
    };
    format!(
        "{when}  {tool:<14}  {run:<29}  {label:<9}  {}",
        sanitize_line(&text),
        run = sanitize_line(s("tool_run_id")),
        label = sanitize_line(label),
        when = sanitize_line(&when),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pretty_lines_are_sanitized() {
        let v = serde_json::json!({
            "event": "tool_output", "timestamp": "2026-11-22T08:00:00.123Z",
            "tool": "rm", "tool_run_id": "TR-1", "stream": "pty",
            "text": "evil\u{1b}]0;title\u{7} text"
        });
        let line = pretty(&v);
        assert!(line.starts_with("11-22 08:00:00.123  rm"), "{line}");
        assert!(line.ends_with("output     evil text"), "{line}");
        let v = serde_json::json!({
            "event": "tool_status_change", "timestamp": "2026-11-22T08:00:00.123Z",
            "tool": "rm", "tool_run_id": "TR-1", "status": "failed",
            "previous_status": "running", "exit_code": 3, "reason": "exited with code 3"
        });
        assert!(pretty(&v).ends_with("running → failed (exit 3): exited with code 3"));
    }

    #[test]
    fn tail_reads_the_last_lines() {
        let tmp = std::env::temp_dir().join(format!("hr-tail-{}", std::process::id()));
        let body: String = (0..50_000).map(|i| format!("line {i}\n")).collect();
        std::fs::write(&tmp, &body).unwrap();
        let mut f = File::open(&tmp).unwrap();
        let len = f.metadata().unwrap().len();
        let lines = tail_lines(&mut f, len, 3).unwrap();
        assert_eq!(
            lines,
            [
                b"line 49997\n".to_vec(),
                b"line 49998\n".to_vec(),
                b"line 49999\n".to_vec()
            ]
        );
        let all = tail_lines(&mut f, len, 100_000).unwrap();
        assert_eq!(all.len(), 50_000);
        std::fs::write(&tmp, "a\nb").unwrap();
        let mut f = File::open(&tmp).unwrap();
        assert_eq!(tail_lines(&mut f, 3, 1).unwrap(), [b"b".to_vec()]);
        // Lines longer than a block, across blocks, the last one without its newline.
        let long: Vec<String> = (0..40)
            .map(|i| format!("{i:03}{}", "x".repeat(30_000 + i * 997)))
            .collect();
        std::fs::write(&tmp, long.join("\n")).unwrap();
        let mut f = File::open(&tmp).unwrap();
        let len = f.metadata().unwrap().len();
        for n in [1, 2, 7, 40, 41] {
            let got = tail_lines(&mut f, len, n).unwrap();
            let want: Vec<Vec<u8>> = long[40 - n.min(40)..]
                .iter()
                .enumerate()
                .map(|(i, l)| {
                    let last = i + 1 == n.min(40);
                    format!("{l}{}", if last { "" } else { "\n" }).into_bytes()
                })
                .collect();
            assert_eq!(got, want, "{n}");
        }
        std::fs::remove_file(&tmp).unwrap();
    }
}
