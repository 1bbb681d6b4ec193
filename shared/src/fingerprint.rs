//! Fingerprints that let a decision find its way back to the prompt it answers.
//!
//! * The **request fingerprint** names the command: tool, argv and working directory. A
//!   re-run of the same command (by `monitor worker` or a CI retry) has the same one.
//! * The **prompt fingerprint** names the question: the tool and its prompt line, with the
//!   parts that change between runs of the same question collapsed (digits, hashes,
//!   directories of paths, spacing), so `rm: remove regular file '/tmp/tmp.x81/a.txt'? `
//!   and the same prompt in tomorrow's temp dir match.
//! * The **screen digest** names what the operator saw: the prompt's context, normalised
//!   only for what cannot matter (spacing, blank lines, clock times and dates, spinner
//!   glyphs) and for what each run of a command prints anew (uuids, hex ids, long mixed
//!   letter-and-digit tokens, epoch and ISO timestamps: [`volatile`]) — small numbers are
//!   kept, so `Plan: 2 to add` and `Plan: 3 to add` differ. A decision is typed or re-used
//!   only while the screen has the digest it was made on.

use crate::audit::hex;
use crate::sanitize::{sanitize_line, sanitize_text};
use regex::Regex;
use sha2::{Digest, Sha256};
use std::sync::LazyLock;

/// SHA-256 over length-prefixed fields, as lower-case hex (`kind` names what is hashed, so
/// that two kinds of thing never share a digest).
pub(crate) fn digest(kind: &str, fields: &[&str]) -> String {
    let mut h = Sha256::new();
    h.update(kind.as_bytes());
    for f in fields {
        h.update((f.len() as u64).to_le_bytes());
        h.update(f.as_bytes());
    }
    hex(&h.finalize())
}

/// The fingerprint of a command: tool name, every argument, and the working directory.
pub fn request(tool: &str, argv: &[String], cwd: &str) -> String {
    let argv_json = serde_json::to_string(argv).unwrap_or_default();
    digest("request/v1", &[tool, &argv_json, cwd])
}

/// The fingerprint of a prompt line shown by `tool`.
pub fn prompt(tool: &str, prompt_line: &str) -> String {
    digest("prompt/v1", &[tool, &normalize_prompt(prompt_line)])
}

/// Interpreters whose first non-option argument is the script they run.
const INTERPRETERS: &[&str] = &[
    "sh", "bash", "dash", "zsh", "ksh", "fish", "python", "python2", "python3", "node", "nodejs",
    "deno", "bun", "perl", "ruby", "php", "lua", "Rscript", "pwsh",
];

/// What a command runs, as one digest: the resolved executable and, for an interpreter,
/// the script it is given (resolved against `cwd`). Made from each file's contents (SHA-256),
/// so the same tool is the same on every host and in every fresh copy — an ephemeral CI
/// runner installs it anew for each job, with new inodes and times — and any change to a
/// byte is a new tool. A file that cannot be read (execute-only) or is larger than
/// [`CONTENT_LIMIT`] counts by its identity instead — device, inode, size, modification and
/// change times — which any write changes too, but which a copy does not keep: such a tool
/// is asked about anew on a new runner, never taken for another. Read once per run, when it
/// first asks, on the store's thread (off the output path). `None` only when the executable
/// is not there at all.
pub fn tool(
    executable: &std::path::Path,
    argv: &[String],
    cwd: &std::path::Path,
) -> Option<String> {
    let exe = file_digest(executable)?;
    let name = executable
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or("");
    let base = name.trim_end_matches(|c: char| c.is_ascii_digit() || c == '.');
    let script = (INTERPRETERS.contains(&name) || INTERPRETERS.contains(&base))
        .then(|| argv.iter().skip(1).find(|a| !a.starts_with('-')))
        .flatten()
        .map(|s| cwd.join(s))
        .filter(|p| p.is_file())
        .and_then(|p| file_digest(&p).map(|id| format!("{}={id}", p.display())))
        .unwrap_or_default();
    Some(digest("tool/v2", &[&exe, &script]))
}

/// The largest file [`tool`] reads whole (256 MiB: a second or so of hashing at most).
pub const CONTENT_LIMIT: u64 = 256 << 20;

/// `sha256:HEX` of a regular file's bytes, or `stat:IDENTITY` of one that cannot be read or
/// is larger than [`CONTENT_LIMIT`]; `None` when there is no file. Opened without blocking
/// and checked on the open file, so a FIFO put at the path is never waited on.
fn file_digest(path: &std::path::Path) -> Option<String> {
    use std::io::Read;
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
    let identity = |m: &std::fs::Metadata| {
        format!(
            "stat:{}:{}:{}:{}.{}:{}.{}",
            m.dev(),
            m.ino(),
            m.size(),
            m.mtime(),
            m.mtime_nsec(),
            m.ctime(),
            m.ctime_nsec()
        )
    };
    let meta = std::fs::metadata(path).ok()?;
    if !meta.is_file() {
        return Some(identity(&meta));
    }
    let Ok(mut f) = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
    else {
        return Some(identity(&meta));
    };
    let Ok(opened) = f.metadata() else {
        return Some(identity(&meta));
    };
    if !opened.is_file() || opened.size() > CONTENT_LIMIT {
        return Some(identity(&opened));
    }
    let mut hash = Sha256::new();
    let mut buf = vec![0u8; 1 << 16];
    loop {
        match f.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => hash.update(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => return Some(identity(&opened)),
        }
    }
    Some(format!("sha256:{}", hex(&hash.finalize())))
}

/// What the operator saw of a prompt: the screen above the question, and the question.
pub fn seen_text(context: &str, question: &str) -> String {
    format!("{context}\n{question}")
}

/// A short name for a state dir (its path's digest), for what is kept for it elsewhere.
pub fn state_key(root: &str) -> String {
    digest("state/v1", &[root])[..16].to_owned()
}

/// The digest of what the operator saw of `p` (its context and question).
pub fn seen(p: &crate::prompt::Prompt) -> String {
    screen(&seen_text(&p.context, &p.question))
}

/// The digest of the screen an approval was asked on (its context and question).
pub fn screen(context: &str) -> String {
    digest("screen/v1", &[&normalize_screen(context)])
}

/// The context with only what cannot matter removed: spacing runs, blank lines, clock
/// times (`12:34:56`, `12:34:56.789`), dates (`2026-11-23`, with a `T…Z` time), spinner
/// glyphs (braille cells, [`SPINNERS`], and a lone `| / \` before the text — not `-`, which also marks
/// what a plan destroys), what blinks (block elements of a logo, [`BLOCKS`]; a bullet at
/// a row's very start, [`BLINKING`]), and per-run random text ([`volatile`]: a word that is nothing
/// else is dropped, as a clock time is). Small numbers stay.
pub fn normalize_screen(context: &str) -> String {
    let mut lines = Vec::new();
    for line in sanitize_text(context).lines() {
        // A status bullet at the very start of a row that blinks (Claude Code's `●` before
        // the step it waits on is drawn and erased every half second): the same screen.
        let line = match line.strip_prefix(BLINKING) {
            Some(rest) if rest.starts_with(' ') => rest,
            _ => line,
        };
        let line = volatile(line);
        let words: Vec<String> = line
            .split_whitespace()
            .filter(|w| !is_placeholder(w))
            .filter_map(|w| {
                let w: String = w
                    .chars()
                    .filter(|c| {
                        !('\u{2800}'..='\u{28ff}').contains(c)
                            && !BLOCKS.contains(c)
                            && !SPINNERS.contains(c)
                    })
                    .collect();
                (!w.is_empty() && !is_clock_or_date(&w)).then_some(w)
            })
            .collect();
        let mut words = words.as_slice();
        if words.len() > 1 && matches!(words[0].as_str(), "|" | "/" | "\\") {
            words = &words[1..];
        }
        if !words.is_empty() {
            lines.push(words.join(" "));
        }
    }
    lines.join("\n")
}

/// Block elements (`▐▛███▛█`, `▝▜██▀`): the pixels of logos and mascots that animate (Claude
/// Code's blinks its eyes while it waits) and of progress bars, whose figures say the same.
const BLOCKS: std::ops::RangeInclusive<char> = '\u{2580}'..='\u{259f}';

/// Bullets that agents blink at the start of a row while they wait.
const BLINKING: &[char] = &['●', '⏺'];

/// What stands for per-run random text in a normalised screen.
const ID: &str = "\u{1}id";
const TIME: &str = "\u{1}time";

/// Whether `word` is only a placeholder of [`volatile`] (with brackets or punctuation).
fn is_placeholder(word: &str) -> bool {
    let w = word.trim_matches(|c: char| "[](),;:.='\"".contains(c));
    w == ID || w == TIME
}

/// Timestamps: ISO 8601 (a date, `T` or a space, a clock time with optional fraction and
/// zone) and epoch seconds (or milli-, micro-, nanoseconds) from 2014 to 2039.
static TIMESTAMP: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r"(?x)
        \b\d{4}-\d{2}-\d{2}[T\x20]\d{2}:\d{2}(?::\d{2}(?:[.,]\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?
        | \b(?:1[4-9]|2[0-1])\d{8}(?:\d{3}|\d{6}|\d{9})?(?:\.\d+)?\b",
    )
    .expect("the timestamp pattern")
});

/// Ids: uuids, and runs of letters and digits that look random ([`random_token`]).
static UUID: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?i)\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b")
        .expect("the uuid pattern")
});
static ALNUM: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"[A-Za-z0-9]{8,}").expect("the token pattern"));

/// Whether a run of letters and digits looks like a per-run random id rather than a word,
/// a version or a count: 12 or more digits; or hex of 12 or more with letters and digits
/// (a hash, a container id); or 8 or more characters with at least two letters and two
/// digits that change between letter and digit three times or more (`a8Kd92Lx`,
/// `req7f3k2`) — `ubuntu2204`, `sha256sum` and `x86` stay words.
fn random_token(t: &str) -> bool {
    let digits = t.bytes().filter(u8::is_ascii_digit).count();
    let letters = t.len() - digits;
    if letters == 0 {
        return t.len() >= 12;
    }
    if digits == 0 {
        return false;
    }
    if t.len() >= 12 && t.bytes().all(|b| b.is_ascii_hexdigit()) {
        return true;
    }
    let changes = t
        .as_bytes()
        .windows(2)
        .filter(|w| w[0].is_ascii_digit() != w[1].is_ascii_digit())
        .count();
    digits >= 2 && letters >= 2 && changes >= 3
}

/// `line` with what each run of a command prints anew replaced by placeholders: ISO and
/// epoch timestamps, uuids, and random-looking ids ([`random_token`]). Numbers of up to
/// eleven digits that are no timestamp stay as they are: `Plan: 2 to add` is not
/// `Plan: 3 to add`.
pub fn volatile(line: &str) -> String {
    let line = TIMESTAMP.replace_all(line, TIME);
    let line = UUID.replace_all(&line, ID);
    ALNUM
        .replace_all(&line, |c: &regex::Captures<'_>| {
            if random_token(&c[0]) {
                ID.to_owned()
            } else {
                c[0].to_owned()
            }
        })
        .into_owned()
}

/// Glyphs spinners cycle through, besides the braille cells: quarter circles and squares,
/// and the star frames coding agents use (`✻ Thinking…`).
const SPINNERS: &[char] = &[
    '◐', '◓', '◑', '◒', '◴', '◷', '◶', '◵', '◰', '◳', '◲', '◱', '▖', '▘', '▝', '▗', '✶', '✸', '✹',
    '✺', '✷', '✻', '✽', '✳', '✢',
];

/// `12:34`, `12:34:56.789`, `2026-11-23`, `2026-11-23T12:34:56Z`, with brackets or
/// trailing punctuation around them.
fn is_clock_or_date(word: &str) -> bool {
    let w = word.trim_matches(|c: char| "[](),;".contains(c));
    let shape: String = w
        .chars()
        .map(|c| if c.is_ascii_digit() { '9' } else { c })
        .collect();
    let shape = shape.trim_end_matches('Z');
    let time = |t: &str| {
        let t = t.split(['.', ',']).next().unwrap_or(t);
        t == "99:99" || t == "99:99:99" || t == "9:99" || t == "9:99:99"
    };
    match shape.split_once('T') {
        Some((d, t)) => d == "9999-99-99" && time(t),
        None => shape == "9999-99-99" || shape == "9999/99/99" || time(shape),
    }
}

/// The prompt line with what varies between runs collapsed: directories of paths (`…/`),
/// runs of hex that look like hashes or ids (`#`), digit runs (`0`), spacing (one space),
/// control characters (gone).
pub fn normalize_prompt(line: &str) -> String {
    let clean = sanitize_line(line);
    let mut words = Vec::new();
    for word in clean.split_whitespace() {
        words.push(normalize_word(word));
    }
    words.join(" ")
}

fn normalize_word(word: &str) -> String {
    // A path: keep only its last component, so the same file in another directory matches.
    let word = match word.rfind('/') {
        Some(i) if word[..i].contains('/') || word.starts_with('/') || word.starts_with("'/") => {
            let (lead, _) = split_leading_quote(word);
            format!("{lead}…/{}", &word[i + 1..])
        }
        _ => word.to_owned(),
    };
    let mut out = String::with_capacity(word.len());
    let chars: Vec<char> = word.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        if chars[i].is_ascii_hexdigit() {
            let start = i;
            while i < chars.len() && chars[i].is_ascii_hexdigit() {
                i += 1;
            }
            let run: String = chars[start..i].iter().collect();
            let digits = run.chars().filter(char::is_ascii_digit).count();
            if run.len() >= 8 && digits > 0 && digits < run.len() {
                out.push('#');
            } else {
                // Not a hash: collapse only its digit runs.
                let mut prev_digit = false;
                for c in run.chars() {
                    if c.is_ascii_digit() {
                        if !prev_digit {
                            out.push('0');
                        }
                        prev_digit = true;
                    } else {
                        out.push(c);
                        prev_digit = false;
                    }
                }
            }
        } else {
            out.push(chars[i]);
            i += 1;
        }
    }
    out
}

fn split_leading_quote(word: &str) -> (&str, &str) {
    let n = word
        .char_indices()
        .find(|(_, c)| !matches!(c, '\'' | '"' | '`' | '(' | '['))
        .map_or(word.len(), |(i, _)| i);
    word.split_at(n)
}

/// The request fingerprint a runner's command is kept under (the runner API): its own per
/// token, so that a decision made for one token's run is never taken by another token's run
/// of the same command line in the same directory.
pub fn runner(token: &str, client: &str) -> String {
    request(&format!("runner:{token}"), &[client.to_owned()], "")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The same bytes are the same tool in a fresh copy (a new runner: new inode and
    /// times); one changed byte, of the executable or of an interpreter's script, is not.
    #[test]
    fn a_tool_is_its_contents_wherever_it_is_copied() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (dir.path().join("a"), dir.path().join("b"));
        std::fs::create_dir_all(&a).unwrap();
        std::fs::create_dir_all(&b).unwrap();
        for d in [&a, &b] {
            std::fs::write(d.join("tf"), "#!/bin/sh\necho apply\n").unwrap();
            std::fs::write(d.join("deploy.sh"), "echo v1\n").unwrap();
        }
        let argv = |s: &str| vec!["sh".to_owned(), s.to_owned()];
        let sh = std::path::Path::new("/bin/sh");
        assert_eq!(
            tool(&a.join("tf"), &[], &a),
            tool(&b.join("tf"), &[], &b),
            "a copy is the same tool"
        );
        assert_eq!(tool(sh, &argv("deploy.sh"), &a).map(|d| d.len()), Some(64));
        std::fs::write(b.join("tf"), "#!/bin/sh\necho APPLY\n").unwrap();
        assert_ne!(tool(&a.join("tf"), &[], &a), tool(&b.join("tf"), &[], &b));
        // An interpreter's script: its path and contents count.
        let before = tool(sh, &argv("deploy.sh"), &a);
        std::fs::write(a.join("deploy.sh"), "echo v2\n").unwrap();
        assert_ne!(before, tool(sh, &argv("deploy.sh"), &a));
        assert_eq!(tool(&dir.path().join("missing"), &[], &a), None);
    }

    /// A file that cannot be read whole is known by its identity, never skipped: a FIFO is
    /// not waited on, and its digest differs from any content's.
    #[test]
    fn a_fifo_or_unreadable_file_is_known_by_its_identity() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: a valid path and mode.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let got = file_digest(&fifo).unwrap();
        assert!(got.starts_with("stat:"), "{got}");
        let file = dir.path().join("f");
        std::fs::write(&file, "x").unwrap();
        assert!(file_digest(&file).unwrap().starts_with("sha256:"));
        assert!(tool(&fifo, &[], dir.path()).is_some());
    }

    #[test]
    fn screens_differ_by_digits_but_not_by_clocks_spacing_or_spinners() {
        let a = "Plan: 2 to add, 0 to change\n\n  Do you want to perform these actions?";
        let b = "Plan: 3 to add, 0 to change\n\n  Do you want to perform these actions?";
        assert_ne!(screen(a), screen(b));
        assert_eq!(
            screen("[12:30:01] fetching   done\n\nDeploy?"),
            screen("[12:31:59] fetching done\nDeploy?")
        );
        assert_eq!(
            screen("2026-11-23T12:30:01.123Z start\n⠋ Working\nDeploy?"),
            screen("2026-11-24T01:00:00Z start\n⠙ Working\nDeploy?")
        );
        assert_eq!(screen("| building\nDeploy?"), screen("/ building\nDeploy?"));
        assert_eq!(
            screen("◐ waiting\n✻ Thinking\nGo?"),
            screen("◓ waiting\n✶ Thinking\nGo?")
        );
        // A plan's `-` (destroy) is no spinner frame.
        assert_ne!(
            screen("- aws_instance.db\nApply?"),
            screen("aws_instance.db\nApply?")
        );
        assert_ne!(screen("rm 'a.txt'?"), screen("rm 'b.txt'?"));
        // Claude Code blinks the bullet of the step it waits on (issue 27).
        assert_eq!(
            screen(
                "● Writing the proof file
  $ echo x > y
Do you want to proceed?"
            ),
            screen(
                "  Writing the proof file
  $ echo x > y
Do you want to proceed?"
            )
        );
        // Its mascot blinks its eyes: block elements are a logo's pixels.
        assert_eq!(
            screen(" ▐▛███▛█   Claude Code v2.1.330\nProceed?"),
            screen(" ▐▛███▂█   Claude Code v2.1.330\nProceed?")
        );
        assert_eq!(
            screen("█▟         Claude Code v2.1.330\nProceed?"),
            screen(" ▐▛███▛█   Claude Code v2.1.330\nProceed?")
        );
        // A radio dot inside a frame or an indented list is no blinking bullet.
        assert_ne!(screen("│  ● Yes / ○ No"), screen("│  ○ Yes / ● No"));
    }

    /// Issue 26 item 4: what each run prints anew does not make its prompt a new one…
    #[test]
    fn screens_with_per_run_ids_and_timestamps_are_the_same_screen() {
        let run = |session: &str, id: &str, token: &str, epoch: &str, iso: &str| {
            format!(
                "session {session}\nrequest id {id} (trace {token})\nstarted at {epoch}, {iso}\n\
                 Plan: 2 to add, 0 to change.\nDeploy? [y/N]"
            )
        };
        let a = run(
            "550e8400-e29b-41d4-a716-446655440000",
            "9f86d081884c7d65",
            "a8k2m9p4x7q3",
            "1764182733",
            "2026-11-26T18:45:33.360123+00:00",
        );
        let b = run(
            "6BA7B810-9DAD-11D1-80B4-00C04FD430C8",
            "3c9e1b2a7f4d8e60",
            "z3y7w2v9u4t8",
            "1764182799",
            "2026-11-26T18:46:39.901234+00:00",
        );
        assert_eq!(screen(&a), screen(&b));
        // Inside words and paths too, and epoch milliseconds.
        assert_eq!(
            screen("wrote /tmp/run-7f3a9c2e1b4d5e6f/out.json at 1764182733123\nKeep? [y/N]"),
            screen("wrote /tmp/run-0a1b2c3d4e5f6a7b/out.json at 1764182799456\nKeep? [y/N]")
        );
        // A screen from before, with a timestamp as a word of its own, keeps its digest.
        assert_eq!(
            normalize_screen("2026-11-23T12:30:01.123Z start\nDeploy?"),
            "start\nDeploy?"
        );
    }

    /// …while small numbers, words with digits and versions stay what they say.
    #[test]
    fn small_numbers_versions_and_words_with_digits_stay_significant() {
        assert_ne!(
            screen("Plan: 2 to add, 0 to change.\nApply?"),
            screen("Plan: 3 to add, 0 to change.\nApply?")
        );
        assert_ne!(
            screen("Delete 1073741824 bytes?"),
            screen("Delete 1073741825 bytes?"),
            "a size is no epoch"
        );
        assert_ne!(screen("Install ubuntu2204?"), screen("Install ubuntu2404?"));
        assert_ne!(screen("Upgrade to v1.2.3?"), screen("Upgrade to v1.2.4?"));
        assert_ne!(screen("Use python3.11?"), screen("Use python3.12?"));
        assert_ne!(screen("Remove 12 files?"), screen("Remove 120 files?"));
        for word in [
            "ubuntu2204",
            "sha256sum",
            "x86_64",
            "node18",
            "abc12",
            "deadbeef",
        ] {
            assert_eq!(volatile(word), word, "{word}");
        }
        for id in ["a8Kd92Lx", "9f86d081884c", "123456789012", "req7f3k2m9"] {
            assert_ne!(volatile(id), id, "{id}");
        }
    }

    #[test]
    fn prompts_differing_only_in_temp_dirs_and_numbers_match() {
        let a = "rm: remove regular file '/tmp/tmp.x81Qa/a.txt'? ";
        let b = "rm: remove regular file '/tmp/tmp.Zz9/a.txt'?";
        assert_eq!(prompt("rm", a), prompt("rm", b));
        assert_eq!(normalize_prompt(a), "rm: remove regular file '…/a.txt'?");
        assert_ne!(
            prompt("rm", a),
            prompt("rm", "rm: remove regular file '/tmp/x/b.txt'? ")
        );
        assert_ne!(prompt("rm", a), prompt("cp", a));
        assert_eq!(
            normalize_prompt("Retry 3 of 10 (id 9f86d081884c7d65)?"),
            "Retry 0 of 0 (id #)?"
        );
        assert_eq!(
            normalize_prompt("\x1b[1mProceed\x1b[0m   (Y/n)?  "),
            "Proceed (Y/n)?"
        );
    }

    #[test]
    fn request_depends_on_every_part() {
        let argv = vec!["rm".to_string(), "-i".to_string(), "a".to_string()];
        let base = request("rm", &argv, "/w");
        assert_eq!(base, request("rm", &argv, "/w"));
        assert_ne!(base, request("rm", &argv, "/x"));
        assert_ne!(base, request("rm", &argv[..2], "/w"));
        // Field boundaries cannot be shifted to forge a match.
        assert_ne!(
            request("a", &["b".into()], "c"),
            request("ab", &[String::new()], "c")
        );
        assert_eq!(base.len(), 64);
    }
}
