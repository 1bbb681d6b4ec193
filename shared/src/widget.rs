//! Prompt lines read as widgets (DESIGN §15): the shapes a one-line prompt takes — a
//! confirm (`[y/N]`, `(y,N)`, `(y/n) [n]`), a letter choice (`[y,n,q,a,d,?]?`,
//! `(Y/I/N/O/D/Z) [default=N]`), a word to type in full (`Type 'yes' to continue`), a
//! number in a range (`(1-4, default 1)`) — each with its options, the tool's own default
//! and the keys of each answer. A bracketed hint (`(m for help)`, `(leave blank to skip)`)
//! is never a default.
//!
//! Pure functions of the screen's text, so every shape is unit-tested here; the prompt
//! matcher (`prompt::classify`) decides which shape applies where.

use crate::approvals::PromptKind;
use crate::event::ApprovalOption;
use regex::Regex;
use std::sync::LazyLock;

/// A widget read off a prompt line.
#[derive(Debug, Clone, PartialEq)]
pub struct Shape {
    pub kind: PromptKind,
    pub rule: &'static str,
    pub options: Vec<ApprovalOption>,
    /// The tool's own default (what Enter on its own gives), when it shows one.
    pub default: Option<String>,
    pub allows_text: bool,
}

pub(crate) fn opt(value: &str, label: &str, keys: Option<String>) -> ApprovalOption {
    ApprovalOption {
        value: value.to_owned(),
        label: label.to_owned(),
        keys,
    }
}

/// The keys of a typed answer: the text and Enter in line mode; in raw mode the text alone
/// (a single-key prompt acts on the key; a line editor gets Enter once the text shows).
pub(crate) fn line_keys(text: &str, canonical: bool) -> String {
    if canonical {
        format!("{text}\r")
    } else {
        text.to_owned()
    }
}

/// A bracketed group on a line: its text and where it ends.
struct Group<'a> {
    inner: &'a str,
    end: usize,
}

/// The `[…]` and `(…)` groups of a line, left to right; a group may hold one nested
/// bracketed word (`(yes/no/[fingerprint])`, `([y]/n)`).
fn groups(line: &str) -> Vec<Group<'_>> {
    static GROUP: LazyLock<Regex> = LazyLock::new(|| {
        Regex::new(r"[\[(]([^\[\]()]*(?:\[[^\]]*\][^\[\]()]*)*)[\])]").expect("group regex")
    });
    GROUP
        .captures_iter(line)
        .map(|c| Group {
            inner: c.get(1).map_or("", |m| m.as_str()),
            end: c.get(0).map_or(0, |m| m.end()),
        })
        .collect()
}

/// `default=N`, `default: no`, `default N`, `def. y`: the value a group names as default.
fn named_default(inner: &str) -> Option<&str> {
    static NAMED: LazyLock<Regex> = LazyLock::new(|| {
        Regex::new(r"(?i)^\s*(?:default|def\.?|defaults to)\s*(?:[:=]|is)?\s*([^\s,;:=]+)\s*$")
            .expect("named default regex")
    });
    NAMED
        .captures(inner)
        .and_then(|c| c.get(1))
        .map(|m| m.as_str().trim_matches(|c| c == '\'' || c == '"'))
}

/// Which of yes/no a word is.
fn yes_or_no(word: &str) -> Option<bool> {
    match word.to_ascii_lowercase().as_str() {
        "y" | "yes" => Some(true),
        "n" | "no" => Some(false),
        _ => None,
    }
}

/// A confirm: a group of yes and no (`[y/N]`, `(y,N)`, `(yes/no)`, `([y]/n)`,
/// `(yes/no/[fingerprint])`, a lone `(y)`), its default from the capital letter, the
/// bracketed word, or a group after it (`(y/n) [n]`, `[y/n] (n)`, `[y/n] [default=n]`).
/// Options `yes` and `no`, typed as the tool spells them (`y` or `yes`).
pub fn confirm(line: &str, canonical: bool) -> Option<Shape> {
    let all = groups(line);
    for (at, g) in all.iter().enumerate().rev() {
        let parts: Vec<&str> = g.inner.split(['/', ',']).map(str::trim).collect();
        let mut yes: Option<&str> = None;
        let mut no: Option<&str> = None;
        let mut default: Option<bool> = None;
        let mut other = false;
        let words: Vec<&str> = parts
            .iter()
            .map(|p| p.trim_matches(|c| c == '[' || c == ']'))
            .collect();
        let all_capitalised = words
            .iter()
            .all(|w| w.chars().next().is_some_and(|c| c.is_ascii_uppercase()));
        for (raw, word) in parts.iter().zip(&words) {
            let bracketed = raw.starts_with('[') && raw.ends_with(']');
            let capital = if word.len() == 1 {
                word.chars().all(|c| c.is_ascii_uppercase())
            } else {
                // `Yes/no`: a capitalised word among lower-case ones.
                parts.len() > 1
                    && !all_capitalised
                    && word.chars().next().is_some_and(|c| c.is_ascii_uppercase())
            };
            match yes_or_no(word) {
                Some(true) => yes = Some(word),
                Some(false) => no = Some(word),
                None if bracketed && word.eq_ignore_ascii_case("fingerprint") => continue,
                None => {
                    other = true;
                    break;
                }
            }
            if bracketed || capital {
                default = yes_or_no(word);
            }
        }
        if other {
            continue;
        }
        let Some(yes_word) = yes else { continue };
        let single = no.is_none();
        if single {
            // `(y)` / `(yes)`: the one shown is what Enter gives.
            default = Some(true);
        }
        if default.is_none() {
            // A default named after the choice: `(y/n) [n]`, `[y/n] (n)`, `[default=N]`.
            default = all[at + 1..]
                .iter()
                .find_map(|later| yes_or_no(named_default(later.inner).unwrap_or(later.inner)));
        }
        if default.is_none() && at + 1 == all.len() {
            // The value the field holds now, after a mark: dialoguer's `(y/n) › no`,
            // enquirer's `(y/N) ‣ false`.
            let after = line[g.end..].trim();
            let word = after
                .strip_prefix(['›', '‣', '»', '❯', '>', ':'])
                .map(str::trim)
                .unwrap_or("");
            default = match word.to_ascii_lowercase().as_str() {
                "true" => Some(true),
                "false" => Some(false),
                w => yes_or_no(w),
            };
        }
        let letters = yes_word.len() == 1;
        let no_word = no
            .map(str::to_owned)
            .unwrap_or_else(|| if letters { "n".into() } else { "no".into() });
        let typed = |w: &str| Some(line_keys(&w.to_ascii_lowercase(), canonical));
        return Some(Shape {
            kind: PromptKind::Confirm,
            rule: "generic:yes-no",
            options: vec![
                opt("yes", "Yes", typed(yes_word)),
                opt("no", "No", typed(&no_word)),
            ],
            default: default.map(|d| if d { "yes" } else { "no" }.to_owned()),
            allows_text: false,
        });
    }
    None
}

/// The help lines a letter choice may be explained by: `y - stage this hunk` (git add -p),
/// `Y or I  : install the package maintainer's version` (dpkg), `[d] delete` .
fn letter_help(help: &[&str], letter: &str) -> Option<String> {
    static HELP: LazyLock<Regex> = LazyLock::new(|| {
        Regex::new(r"^\s*\[?([^\s\]])\]?(?:\s+or\s+\[?([^\s\]])\]?)?\s*(?:-|:|=|\s)\s+(\S.*?)\s*$")
            .expect("letter help regex")
    });
    help.iter().rev().find_map(|line| {
        let c = HELP.captures(line)?;
        let matches = &c[1] == letter || c.get(2).is_some_and(|m| m.as_str() == letter);
        matches.then(|| c[3].to_owned())
    })
}

/// A letter choice: `[y,n,q,a,d,j,J,g,/,e,?]?` (git add -p), `(Y/I/N/O/D/Z) [default=N]`
/// (dpkg), `(i)gnore, (w)ipe, (b)ackup` and `(Y)es/(N)o/(A)ll [Yes]`. Each letter is an
/// option labelled from `help` (the lines above, when they explain them); `?` (help) is
/// not an answer. A choice of only yes and no is a confirm.
pub fn letters(line: &str, help: &[&str], canonical: bool) -> Option<Shape> {
    if let Some(shape) = labelled_letters(line, canonical) {
        return Some(shape);
    }
    let all = groups(line);
    for (at, g) in all.iter().enumerate().rev() {
        let sep = if g.inner.contains(',') { ',' } else { '/' };
        let parts: Vec<&str> = g.inner.split(sep).map(str::trim).collect();
        let single = parts.len() >= 3
            && parts
                .iter()
                .all(|p| p.chars().count() == 1 && !p.chars().all(|c| c.is_ascii_digit()));
        if !single {
            continue;
        }
        let letters: Vec<&str> = parts.iter().copied().filter(|p| *p != "?").collect();
        if letters.iter().all(|l| yes_or_no(l).is_some()) {
            return None;
        }
        // `(Y/I/N/O/D/Z)` in capitals only: the case says nothing, the letters are typed as
        // shown; `[y,n,q,J]`: the case is the letter.
        let options: Vec<ApprovalOption> = letters
            .iter()
            .map(|l| {
                let label = letter_help(help, l).unwrap_or_else(|| (*l).to_owned());
                opt(l, &label, Some(line_keys(l, canonical)))
            })
            .collect();
        let default = all[at + 1..]
            .iter()
            .find_map(|later| {
                named_default(later.inner).or(Some(later.inner).filter(|w| w.len() == 1))
            })
            .and_then(|d| {
                options
                    .iter()
                    .find(|o| o.value == d)
                    .or_else(|| options.iter().find(|o| o.value.eq_ignore_ascii_case(d)))
            })
            .map(|o| o.value.clone());
        return Some(Shape {
            kind: PromptKind::Letter,
            rule: "generic:letters",
            options,
            default,
            allows_text: false,
        });
    }
    None
}

/// `(i)gnore, (w)ipe, (b)ackup` and `(Y)es/(N)o/(A)ll/(S)kip all [Yes]:`: letters in
/// parentheses inside their words; the default in brackets at the end.
fn labelled_letters(line: &str, canonical: bool) -> Option<Shape> {
    static ITEM: LazyLock<Regex> = LazyLock::new(|| {
        Regex::new(r"(?:^|[\s/,])\(([A-Za-z])\)([A-Za-z' ]*[A-Za-z'])?").expect("letter regex")
    });
    static DEFAULT: LazyLock<Regex> =
        LazyLock::new(|| Regex::new(r"\[([A-Za-z' ]+)\]\s*[:?]?\s*$").expect("default regex"));
    let mut options: Vec<ApprovalOption> = Vec::new();
    for c in ITEM.captures_iter(line) {
        let letter = c[1].to_ascii_lowercase();
        let label = format!("{}{}", &c[1], c.get(2).map_or("", |m| m.as_str()));
        if options.iter().any(|o| o.value == letter) {
            continue;
        }
        options.push(opt(&letter, &label, Some(line_keys(&letter, canonical))));
    }
    if options.len() < 2 {
        return None;
    }
    let default = DEFAULT.captures(line).and_then(|c| {
        let word = c[1].trim().to_ascii_lowercase();
        options
            .iter()
            .find(|o| o.label.to_ascii_lowercase() == word || o.value == word)
            .map(|o| o.value.clone())
    });
    let yes_no = options.len() == 2
        && options.iter().any(|o| o.value == "y")
        && options.iter().any(|o| o.value == "n");
    if yes_no {
        let key = |v: &str| {
            options
                .iter()
                .find(|o| o.value == v)
                .and_then(|o| o.keys.clone())
        };
        return Some(Shape {
            kind: PromptKind::Confirm,
            rule: "generic:yes-no",
            options: vec![opt("yes", "Yes", key("y")), opt("no", "No", key("n"))],
            default: default.map(|d| if d == "y" { "yes" } else { "no" }.to_owned()),
            allows_text: false,
        });
    }
    Some(Shape {
        kind: PromptKind::Letter,
        rule: "generic:letter-menu",
        options,
        default,
        allows_text: false,
    })
}

/// Words to choose from, typed as themselves: rich's `Pick a color [red/green/blue]
/// (green):`, click's `Pick a color (red, green, blue) [green]:`, and numbers
/// (`Choose from [1/2/3] (1):`) labelled from the numbered list above (`labels`). The
/// default follows in the other kind of bracket.
pub fn choices(line: &str, labels: &[&str], canonical: bool) -> Option<Shape> {
    static RICH: LazyLock<Regex> = LazyLock::new(|| {
        Regex::new(r"\[([\w.-]+(?:/[\w.-]+)+)\]\s*(?:\(([\w.-]+)\))?\s*:?\s*$")
            .expect("choices regex")
    });
    static CLICK: LazyLock<Regex> = LazyLock::new(|| {
        Regex::new(r"\(([\w.-]+(?:, [\w.-]+)+)\)\s*(?:\[([\w.-]+)\])?\s*:?\s*$")
            .expect("click choices regex")
    });
    let (words, default, explicit): (Vec<&str>, Option<&str>, bool) =
        if let Some(c) = RICH.captures(line) {
            let d = c.get(2).map(|m| m.as_str());
            (c.get(1)?.as_str().split('/').collect(), d, d.is_some())
        } else if let Some(c) = CLICK.captures(line) {
            let d = c.get(2).map(|m| m.as_str());
            let words: Vec<&str> = c.get(1)?.as_str().split(", ").collect();
            // `(eg, company)`: an example, not choices.
            let example = ["eg", "e.g", "e.g.", "ie", "i.e", "i.e.", "ex", "example"]
                .contains(&words[0].to_ascii_lowercase().as_str());
            if example {
                return None;
            }
            (words, d, true)
        } else {
            return None;
        };
    // A path or a format in brackets is a text prompt's default (`Branch [origin/main]:`,
    // `Format [YYYY/MM/DD]:`): choices come with a default after them, or are three or
    // more words none of which is all capitals.
    let shaped = explicit
        || (words.len() >= 3
            && !words
                .iter()
                .any(|w| w.len() > 1 && w.chars().all(|ch| ch.is_ascii_uppercase())));
    if words.len() > 12 || !shaped || words.iter().all(|w| yes_or_no(w).is_some()) {
        return None;
    }
    let options = words
        .iter()
        .map(|w| {
            let label = w
                .parse::<u64>()
                .ok()
                .and_then(|n| numbered_label(labels, n))
                .map_or_else(|| (*w).to_owned(), |l| format!("{w}: {l}"));
            opt(w, &label, Some(line_keys(w, canonical)))
        })
        .collect();
    Some(Shape {
        kind: PromptKind::Select,
        rule: "generic:choices",
        options,
        default: default.filter(|d| words.contains(d)).map(str::to_owned),
        allows_text: false,
    })
}

/// A word the tool wants typed in full: `Type 'yes' to continue, or 'no' to cancel`,
/// `Type "delete" to confirm`, `Only 'yes' will be accepted`. The quoted words are the
/// options; there is no default (`approve` is refused: the operator types the word).
pub fn typed_word(lines: &[&str], canonical: bool) -> Option<Shape> {
    static ASK: LazyLock<Regex> = LazyLock::new(|| {
        Regex::new(r#"(?i)\b(?:type|enter|write|only)\s+(?:in\s+)?(?:the\s+word\s+)?["'‘“`]"#)
            .expect("typed word regex")
    });
    static QUOTED: LazyLock<Regex> =
        LazyLock::new(|| Regex::new(r#"["'‘“`]([\w][\w .-]{0,29})["'’”`]"#).expect("quoted regex"));
    let line = lines.iter().rev().take(3).find(|l| ASK.is_match(l))?;
    let from = ASK.find(line)?.start();
    let mut words: Vec<String> = Vec::new();
    for c in QUOTED.captures_iter(&line[from..]) {
        let w = c[1].trim().to_owned();
        if !w.is_empty() && !words.contains(&w) {
            words.push(w);
        }
    }
    if words.is_empty() || words.len() > 4 {
        return None;
    }
    Some(Shape {
        kind: PromptKind::Word,
        rule: "generic:typed-word",
        options: words
            .iter()
            .map(|w| opt(w, &format!("Type {w:?}"), Some(line_keys(w, canonical))))
            .collect(),
        default: None,
        allows_text: false,
    })
}

/// A number in a range: `(1-4, default 1)`, `[1-10] (3)`, `(1..5) [2]:`. A small range is
/// its numbers, labelled from a numbered list above (`labels`: `1) foo`); a large one takes
/// any text, with the default as an option.
pub fn number(line: &str, labels: &[&str], canonical: bool) -> Option<Shape> {
    static RANGE: LazyLock<Regex> = LazyLock::new(|| {
        Regex::new(r"^\s*(\d{1,6})\s*(?:-|–|\.\.\.?|to)\s*(\d{1,6})\s*(?:[,;]\s*(.*?))?\s*$")
            .expect("range regex")
    });
    let all = groups(line);
    for (at, g) in all.iter().enumerate().rev() {
        let Some(c) = RANGE.captures(g.inner) else {
            continue;
        };
        // Only at the prompt's end: the range and its default close the line.
        let rest = line[g.end..].trim();
        let tail_ok = all[at + 1..].len() <= 1
            && rest
                .trim_start_matches(|ch: char| ch != ':' && ch != '?')
                .trim_start_matches([':', '?'])
                .trim()
                .is_empty();
        if !tail_ok {
            continue;
        }
        let (lo, hi): (u64, u64) = (c[1].parse().ok()?, c[2].parse().ok()?);
        if lo > hi {
            return None;
        }
        let default = c
            .get(3)
            .and_then(|m| named_default(m.as_str()))
            .or_else(|| {
                all.get(at + 1)
                    .map(|g| named_default(g.inner).unwrap_or(g.inner.trim()))
            })
            .filter(|d| d.parse::<u64>().is_ok_and(|n| (lo..=hi).contains(&n)))
            .map(str::to_owned);
        let small = hi - lo < 20;
        let options = if small {
            (lo..=hi)
                .map(|n| {
                    let v = n.to_string();
                    let label = numbered_label(labels, n).unwrap_or_else(|| v.clone());
                    opt(&v, &label, Some(line_keys(&v, canonical)))
                })
                .collect()
        } else {
            default
                .iter()
                .map(|d| {
                    opt(
                        d,
                        &format!("The default ({d})"),
                        Some(line_keys(d, canonical)),
                    )
                })
                .collect()
        };
        return Some(Shape {
            kind: PromptKind::Number,
            rule: "generic:number",
            options,
            default,
            allows_text: !small,
        });
    }
    None
}

/// The label of item `n` of a numbered list (`1) foo`, `2. bar`, `[3] baz`), nearest
/// first.
pub fn numbered_label(lines: &[&str], n: u64) -> Option<String> {
    static ITEM: LazyLock<Regex> = LazyLock::new(|| {
        Regex::new(r"^\s*[❯>›▶→*]?\s*(?:\[(\d{1,3})\]|\((\d{1,3})\)|(\d{1,3})[.)])\s+(\S.*?)\s*$")
            .expect("numbered item regex")
    });
    lines.iter().rev().find_map(|l| {
        let c = ITEM.captures(l)?;
        let num = c
            .get(1)
            .or(c.get(2))
            .or(c.get(3))?
            .as_str()
            .parse::<u64>()
            .ok()?;
        (num == n).then(|| c[4].to_owned())
    })
}

/// What a bracketed word at the end of a text prompt is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Bracketed {
    /// The tool's default, taken by Enter on an empty field.
    Default(String),
    /// An empty answer is allowed (`(leave blank to skip)`, `(optional)`).
    MayBeEmpty,
    /// A hint or remark: neither a default nor a choice (`(m for help)`, `(GB)`).
    Hint,
}

/// Reads the text of a bracketed group at the end of a text prompt: a default
/// (`demo`, `default: demo`), a note that the field may be left empty, or a hint.
pub fn bracketed(inner: &str) -> Bracketed {
    static EMPTY_OK: LazyLock<Regex> = LazyLock::new(|| {
        Regex::new(r"(?i)\b(?:leave (?:it )?(?:blank|empty)|blank to|empty to|enter to skip|to skip|optional|none to skip|press enter for none)\b")
            .expect("empty-ok regex")
    });
    static HINT_WORDS: LazyLock<Regex> = LazyLock::new(|| {
        Regex::new(concat!(
            r"(?i)(?:\bfor help\b|\bhelp\b|\bpress\b|\btype\b|\bhit\b|\buse\b|\bselect\b|\bchoose\b",
            r"|\be\.g\b|\bexample\b|\bi\.e\b|\bsee\b|\bseparated\b|\bcomma\b|\bformat\b|\bwill\b",
            r"|\brequired\b|\brecommended\b|\bexperimental\b|\bbeta\b|\bmax(?:imum)?\b|\bmin(?:imum)?\b",
            r"|\bchars?\b|\bcharacters\b|\bor\b|\bto\b|\bthe\b|\bif\b|\bwhen\b|\bany\b|\bmore\b|\bless\b)"
        ))
        .expect("hint regex")
    });
    const UNITS: &[&str] = &[
        "b", "kb", "mb", "gb", "tb", "kib", "mib", "gib", "bytes", "%", "s", "ms", "sec", "secs",
        "seconds", "min", "mins", "minutes", "h", "hours", "days", "px", "in", "cm", "y", "n",
        "yes", "no", "none", "empty", "default", "optional", "required",
    ];
    let t = inner.trim();
    if t.is_empty() {
        // `Email Address []:`: the default is an empty answer.
        return Bracketed::MayBeEmpty;
    }
    if let Some(d) = named_default(t) {
        return Bracketed::Default(d.to_owned());
    }
    if EMPTY_OK.is_match(t) {
        return Bracketed::MayBeEmpty;
    }
    let lower = t.to_ascii_lowercase();
    if UNITS.contains(&lower.as_str()) || lower.starts_with("e.g") {
        return Bracketed::Hint;
    }
    // A range is a number's (`1-4`), not a default.
    let range = lower.split_once('-').is_some_and(|(a, b)| {
        !a.trim().is_empty()
            && a.trim().chars().all(|c| c.is_ascii_digit())
            && b.trim().chars().all(|c| c.is_ascii_digit())
    });
    // A default is a value: one token, or a short phrase without instructions in it.
    let phrase_words = t.split_whitespace().count();
    if range || (phrase_words > 1 && HINT_WORDS.is_match(t)) || phrase_words > 4 {
        return Bracketed::Hint;
    }
    Bracketed::Default(t.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn values(s: &Shape) -> Vec<&str> {
        s.options.iter().map(|o| o.value.as_str()).collect()
    }

    fn keys(s: &Shape, v: &str) -> String {
        s.options
            .iter()
            .find(|o| o.value == v)
            .and_then(|o| o.keys.clone())
            .unwrap()
    }

    #[test]
    fn a_confirm_takes_its_default_from_the_capital_the_brackets_or_a_group_after_it() {
        for (line, default) in [
            ("Continue? [y/N]", Some("no")),
            ("Continue? [Y/n]", Some("yes")),
            ("Continue? (y,N)", Some("no")),
            ("Continue? (Y,n) ", Some("yes")),
            ("Continue? (y/n) [n]", Some("no")),
            ("Continue? [y/n] (n)", Some("no")),
            ("Continue? [y/n] (y):", Some("yes")),
            ("Continue? [y/n] [default=N]", Some("no")),
            ("Continue? (yes/no) [default: no]", Some("no")),
            ("Continue? ([y]/n)", Some("yes")),
            ("Continue? (y/[n])", Some("no")),
            ("Continue? (y/n)", None),
            ("Continue? (yes/no)", None),
            ("Proceed (y)?", Some("yes")),
            ("Are you sure (yes/no/[fingerprint])?", None),
            ("Overwrite? (Y)es/(N)o [Yes]", Some("yes")),
            ("Overwrite? (Y)es/(N)o [No]:", Some("no")),
        ] {
            let s = letters(line, &[], true)
                .or_else(|| confirm(line, true))
                .unwrap_or_else(|| panic!("{line}: not a confirm"));
            assert_eq!(s.kind, PromptKind::Confirm, "{line}");
            assert_eq!(values(&s), ["yes", "no"], "{line}");
            assert_eq!(s.default.as_deref(), default, "{line}");
        }
    }

    #[test]
    fn a_confirm_types_the_tools_own_spelling() {
        let s = confirm("Delete? [y/N]", true).unwrap();
        assert_eq!(keys(&s, "yes"), "y\r");
        assert_eq!(keys(&s, "no"), "n\r");
        let s = confirm("Delete? (yes/no)", true).unwrap();
        assert_eq!(keys(&s, "yes"), "yes\r");
        let raw = confirm("Delete? (y/N)", false).unwrap();
        assert_eq!(keys(&raw, "yes"), "y", "a single key in raw mode");
    }

    #[test]
    fn a_confirm_with_its_current_value_after_it() {
        // enquirer: `? Deploy now? (y/N) ‣ false`.
        let s = confirm("? Deploy now? (y/N) ‣ false", false).unwrap();
        assert_eq!(s.default.as_deref(), Some("no"));
        // dialoguer: no capital, the current value after the mark.
        let s = confirm("? Deploy now? (y/n) › no", false).unwrap();
        assert_eq!(s.default.as_deref(), Some("no"));
        let s = confirm("? Deploy now? (y/n) › yes", false).unwrap();
        assert_eq!(s.default.as_deref(), Some("yes"));
    }

    #[test]
    fn other_groups_are_not_confirms() {
        for line in [
            "Pick a color [red/green/blue]:",
            "Overwrite? (Y/I/N/O/D/Z) [default=N] ?",
            "Name (demo):",
            "Stage this hunk [y,n,q,a,d,j,J,g,/,e,?]?",
        ] {
            assert!(confirm(line, true).is_none(), "{line}");
        }
    }

    #[test]
    fn letter_choices_list_each_letter_with_the_help_shown_and_the_named_default() {
        let help = [
            "y - stage this hunk",
            "n - do not stage this hunk",
            "q - quit; do not stage this hunk or any of the remaining ones",
        ];
        let s = letters(
            "(1/1) Stage this hunk [y,n,q,a,d,j,J,g,/,e,?]? ",
            &help,
            true,
        )
        .unwrap();
        assert_eq!(s.kind, PromptKind::Letter);
        assert_eq!(
            values(&s),
            ["y", "n", "q", "a", "d", "j", "J", "g", "/", "e"],
            "`?` only shows help"
        );
        assert_eq!(s.options[0].label, "stage this hunk");
        assert_eq!(s.options[3].label, "a", "no help shown for it");
        assert_eq!(s.default, None);
        assert_eq!(keys(&s, "J"), "J\r");

        let help = [
            "    Y or I  : install the package maintainer's version",
            "    N or O  : keep your currently-installed version",
            "      D     : show the differences between the versions",
            "      Z     : start a shell to examine the situation",
        ];
        let line = "*** foo.conf (Y/I/N/O/D/Z) [default=N] ? ";
        let s = letters(line, &help, true).unwrap();
        assert_eq!(values(&s), ["Y", "I", "N", "O", "D", "Z"]);
        assert_eq!(s.default.as_deref(), Some("N"));
        assert_eq!(
            s.options[1].label,
            "install the package maintainer's version"
        );
        assert_eq!(s.options[5].label, "start a shell to examine the situation");
    }

    #[test]
    fn labelled_letters_keep_their_words() {
        let s = letters("(i)gnore, (w)ipe, (b)ackup?", &[], true).unwrap();
        assert_eq!(s.kind, PromptKind::Letter);
        assert_eq!(values(&s), ["i", "w", "b"]);
        assert_eq!(s.options[1].label, "wipe");
        let s = letters("Replace? (Y)es/(N)o/(A)ll/(S)kip all [Yes]:", &[], true).unwrap();
        assert_eq!(values(&s), ["y", "n", "a", "s"]);
        assert_eq!(s.default.as_deref(), Some("y"));
    }

    #[test]
    fn words_to_choose_from_keep_their_default_and_the_labels_of_numbers() {
        let s = choices("Pick a color [red/green/blue] (green): ", &[], true).unwrap();
        assert_eq!(s.kind, PromptKind::Select);
        assert_eq!(values(&s), ["red", "green", "blue"]);
        assert_eq!(s.default.as_deref(), Some("green"));
        assert_eq!(keys(&s, "blue"), "blue\r");
        let s = choices("Pick a color (red, green, blue) [green]: ", &[], true).unwrap();
        assert_eq!(values(&s), ["red", "green", "blue"]);
        assert_eq!(s.default.as_deref(), Some("green"));
        let labels = ["1. Create a new project", "2. Open one", "3. Quit"];
        let s = choices("Choose from [1/2/3] (1): ", &labels, true).unwrap();
        assert_eq!(s.options[1].label, "2: Open one", "labels kept");
        assert_eq!(s.default.as_deref(), Some("1"));
        assert!(choices("Branch [origin/main]:", &[], true).is_none());
        assert!(choices("Organization Name (eg, company) []:", &[], true).is_none());
        assert!(
            choices(
                "Organization Name (eg, company) [Internet Widgits Pty Ltd]:",
                &[],
                true
            )
            .is_none()
        );
        assert!(choices("Continue? [y/n] (n)", &[], true).is_none());
    }

    #[test]
    fn a_typed_word_has_its_words_and_no_default() {
        let s = typed_word(&["Type 'yes' to continue, or 'no' to cancel:"], true).unwrap();
        assert_eq!(s.kind, PromptKind::Word);
        assert_eq!(values(&s), ["yes", "no"]);
        assert_eq!(s.default, None);
        assert_eq!(keys(&s, "yes"), "yes\r");
        let s = typed_word(
            &[
                "This deletes the bucket.",
                "Type \"delete my-bucket\" to confirm:",
            ],
            true,
        )
        .unwrap();
        assert_eq!(values(&s), ["delete my-bucket"]);
        let s = typed_word(
            &[
                "  Terraform will perform the actions described above.",
                "  Only 'yes' will be accepted to approve.",
                "  Enter a value:",
            ],
            true,
        )
        .unwrap();
        assert_eq!(values(&s), ["yes"]);
        assert!(typed_word(&["Name [demo]:"], true).is_none());
        assert!(typed_word(&["It's time to go? [y/N]"], true).is_none());
    }

    #[test]
    fn a_number_has_its_range_its_default_and_the_labels_shown() {
        let s = number("Choose a layout (1-4, default 1):", &[], true).unwrap();
        assert_eq!(s.kind, PromptKind::Number);
        assert_eq!(values(&s), ["1", "2", "3", "4"]);
        assert_eq!(s.default.as_deref(), Some("1"));
        assert!(!s.allows_text);
        let labels = ["1) minimal", "2) standard", "3) full"];
        let s = number("Pick one [1-3] (2): ", &labels, true).unwrap();
        assert_eq!(s.default.as_deref(), Some("2"));
        assert_eq!(s.options[2].label, "full");
        let s = number("Port (1-65535) [8080]:", &[], true).unwrap();
        assert!(s.allows_text);
        assert_eq!(values(&s), ["8080"]);
        assert_eq!(s.default.as_deref(), Some("8080"));
        let s = number("How many (1-4):", &[], true).unwrap();
        assert_eq!(s.default, None);
        assert!(number("Name (demo):", &[], true).is_none());
        assert!(number("Step (1-4) of the setup, go on? [y/N]", &[], true).is_none());
    }

    #[test]
    fn a_hint_is_never_a_default() {
        for hint in [
            "m for help",
            "press enter to continue",
            "e.g. my-app",
            "GB",
            "1-4",
            "comma separated",
            "optional",
            "required",
            "use arrows to move",
        ] {
            assert_ne!(
                bracketed(hint),
                Bracketed::Default(hint.into()),
                "{hint} taken as a default"
            );
        }
        for empty in [
            "leave blank to skip",
            "optional, press enter to skip",
            "Leave empty to skip",
        ] {
            assert_eq!(bracketed(empty), Bracketed::MayBeEmpty, "{empty}");
        }
        assert_eq!(bracketed("demo"), Bracketed::Default("demo".into()));
        assert_eq!(bracketed("my app"), Bracketed::Default("my app".into()));
        assert_eq!(
            bracketed("default: demo"),
            Bracketed::Default("demo".into())
        );
        assert_eq!(
            bracketed("origin/main"),
            Bracketed::Default("origin/main".into())
        );
    }
}
