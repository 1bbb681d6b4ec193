//! The prompt matcher: given what the screen shows while a tool is blocked reading its
//! terminal (and the terminal's modes), what is it asking, which answers does it take, and
//! which keys give each answer?
//!
//! In order: a secret (ECHO off in line mode, or a password-shaped prompt) is refused; user
//! rules from config; built-in rules for tools whose prompts have no generic shape
//! (`rm -i`, terraform, Codex); generic shapes (`[y/N]`, `(Y/n)`, `(yes/no)`, `([y]/n)`,
//! `(Y)es/(N)o/…`, numbered menus, "Press Enter", `Name [default]:`); otherwise a question
//! no rule knows, answered by `abort` or free text. The capital letter (or the bracketed
//! word) is the default.
//!
//! Keys: in line mode an answer is its text and Enter; in raw mode (ICANON off) only the
//! text, since single-key prompts and full-screen menus act on the key itself. (The shim
//! adds Enter when the text shows up echoed on a prompt line that still waits.)

use crate::approvals::PromptKind;
use crate::config::PromptRuleConfig;
use crate::event::ApprovalOption;
use crate::sanitize::sanitize_line;
use crate::widget::{self, Bracketed, line_keys, opt};
use regex::Regex;
use std::sync::LazyLock;

/// Cursors some libraries draw themselves at a field's end (promptui's `█`, @clack's): no
/// part of what the field holds.
pub const DRAWN_CURSORS: &[char] = &['█', '▌', '▋', '▍', '▎', '▏'];

/// The most screen lines kept as an approval's context.
pub const CONTEXT_LINES: usize = 20;
/// The most lines taken as the question.
pub const QUESTION_LINES: usize = 6;
/// The most lines taken as a numbered menu's question: its title, items and prompt.
pub const MENU_QUESTION_LINES: usize = 24;

/// What the shim saw while the tool was blocked reading.
#[derive(Debug, Clone)]
pub struct ScreenFacts<'a> {
    /// The tool's name (`rm`, `terraform`).
    pub tool: &'a str,
    /// The screen's rows from the top down to the cursor's row, trailing blanks trimmed.
    pub rows: &'a [String],
    /// The cursor's row up to the cursor.
    pub prompt_line: &'a str,
    /// Terminal modes while blocked.
    pub echo: bool,
    pub canonical: bool,
    /// The screen's rows below the cursor's row (where full-screen prompts draw their menus).
    pub below: &'a [String],
    /// The cursor is hidden (a full-screen program draws): where it stands says nothing, so
    /// a menu is looked for anywhere on the screen.
    pub cursor_hidden: bool,
    /// How each character of `rows` and then `below` is drawn (the shim's
    /// `screen::emphasis`: higher stands out more, negative is dim); empty where unknown.
    pub emphasis: &'a [Vec<i8>],
}

/// A recognised prompt.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Prompt {
    pub kind: PromptKind,
    /// A password, passphrase or token: never recorded, never answered.
    pub secret: bool,
    /// Which rule recognised it (`builtin:rm`, `generic:yes-no`, `user:NAME`, `unknown`).
    pub rule: String,
    /// The question: the last lines of the screen up to the prompt.
    pub question: String,
    /// The line the answer is typed on (or the last line, when the cursor's is empty).
    pub prompt_line: String,
    /// Up to [`CONTEXT_LINES`] lines of the screen above the question (earlier output, the
    /// notices cut from the question).
    pub context: String,
    /// The answers, each with the keys that give it.
    pub options: Vec<ApprovalOption>,
    pub default: Option<String>,
    pub allows_text: bool,
    /// The tool's non-interactive alternative, for messages.
    pub alternative: Option<String>,
    /// An arrow-key menu: its options are its items, chosen by moving the highlight.
    pub select: Option<SelectMenu>,
}

impl Prompt {
    /// Whether `value` answers this prompt: an arrow-key menu's item (chosen by steering
    /// the highlight to it), or a value with keys.
    pub fn takes(&self, value: &str) -> bool {
        self.select_index(value).is_some()
            || self.check_set(value).is_some()
            || self.keys_for(value, true).is_some()
    }

    /// Which items of a check-box menu `value` leaves checked (`cheese,olives`, `none`).
    pub fn check_set(&self, value: &str) -> Option<Vec<bool>> {
        let menu = self.select.as_ref().filter(|m| m.checkbox)?;
        multi_set(&menu.names(), value)
    }

    /// Which item of an arrow-key menu `value` chooses.
    pub fn select_index(&self, value: &str) -> Option<usize> {
        self.select
            .as_ref()
            .filter(|m| !m.checkbox)
            .and_then(|_| self.options.iter().position(|o| o.value == value))
    }

    /// The option `value` names: its value, or for a confirm `y`/`n` (its answers are `yes`
    /// and `no`; `y` and `n` say the same).
    pub fn option_for(&self, value: &str) -> Option<&ApprovalOption> {
        let value = match (self.kind, value) {
            (PromptKind::Confirm, "y" | "Y") => "yes",
            (PromptKind::Confirm, "n" | "N") => "no",
            _ => value,
        };
        self.options.iter().find(|o| o.value == value)
    }

    /// The bytes to type for a chosen value: an option's keys, or free text where allowed.
    /// `None` for a value that does not answer (`abort`) or is not acceptable.
    pub fn keys_for(&self, value: &str, canonical: bool) -> Option<Vec<u8>> {
        if let Some(o) = self.option_for(value) {
            return o.keys.as_ref().map(|k| k.as_bytes().to_vec());
        }
        if self.allows_text && crate::approvals::is_acceptable_text(value) {
            return Some(line_keys(value, canonical).into_bytes());
        }
        None
    }
}

fn abort_option() -> ApprovalOption {
    opt("abort", "Abort: end the tool", None)
}

/// Recognises the prompt on the screen. `user_rules` come from config, most specific
/// first.
pub fn classify<'r>(
    facts: &ScreenFacts<'_>,
    user_rules: impl IntoIterator<Item = &'r PromptRuleConfig>,
) -> Prompt {
    let rows: Vec<String> = facts.rows.iter().map(|r| sanitize_line(r)).collect();
    let nonempty: Vec<&str> = rows
        .iter()
        .map(|r| r.trim_end())
        .filter(|r| !r.trim().is_empty())
        .collect();
    // With the cursor hidden, where it was left in its row says nothing (enquirer parks it
    // inside the question, before `(y/N) ‣ false`): the whole row is the prompt line.
    let cursor_line = if facts.cursor_hidden && !facts.prompt_line.trim().is_empty() {
        rows.last()
            .map(|r| r.trim_end().to_owned())
            .unwrap_or_default()
    } else {
        sanitize_line(facts.prompt_line).trim_end().to_owned()
    };
    let prompt_line = if cursor_line.trim().is_empty() {
        nonempty.last().map(|s| s.to_string()).unwrap_or_default()
    } else {
        cursor_line
    };
    // A widget's key help drawn under its field (beaupy's `(enter to confirm)`) is not
    // where the answer goes: the field is the nearest row above it that is not help.
    let prompt_line = if is_key_help(&prompt_line) {
        nonempty
            .iter()
            .rev()
            .skip_while(|r| r.trim() != prompt_line.trim())
            .find(|r| !is_key_help(r))
            .map_or(prompt_line, |r| r.to_string())
    } else {
        prompt_line
    };
    // A cursor some libraries draw themselves (promptui's `█`) is not part of the line.
    let prompt_line = prompt_line
        .trim_end()
        .trim_end_matches(DRAWN_CURSORS)
        .trim_end()
        .to_owned();
    let (question, context) = split_question(&rows, &prompt_line, QUESTION_LINES);
    let mut p = Prompt {
        kind: PromptKind::Unknown,
        secret: false,
        rule: "unknown".into(),
        question,
        prompt_line: prompt_line.trim().to_owned(),
        context,
        options: Vec::new(),
        default: None,
        allows_text: false,
        alternative: alternative_for(facts.tool).map(str::to_owned),
        select: None,
    };
    let canonical = facts.canonical;

    // ECHO off in line mode is how every password prompt reads (getpass, ssh, sudo, git).
    if !facts.echo && canonical {
        p.secret = true;
        p.rule = "secret:echo-off".into();
        return p;
    }
    for rule in user_rules {
        if rule.tool.as_deref().is_some_and(|t| t != facts.tool) {
            continue;
        }
        if !(rule.regex.regex.is_match(&p.prompt_line) || rule.regex.regex.is_match(&p.question)) {
            continue;
        }
        p.rule = format!("{}:{}", rule.origin.as_str(), rule.name);
        if let Some(alt) = &rule.alternative {
            p.alternative = Some(alt.clone());
        }
        if rule.secret {
            p.secret = true;
            return p;
        }
        p.options = rule
            .options
            .iter()
            .map(|o| {
                let keys = o
                    .keys
                    .clone()
                    .unwrap_or_else(|| line_keys(&o.value, canonical));
                opt(&o.value, o.label.as_deref().unwrap_or(&o.value), Some(keys))
            })
            .collect();
        p.default = rule.default.clone();
        p.allows_text = rule.allows_text;
        p.kind = if p.options.is_empty() {
            PromptKind::Text
        } else {
            PromptKind::Choice
        };
        if p.allows_text && p.options.is_empty() {
            p.options.push(abort_option());
        }
        return p;
    }
    if builtin(facts.tool, &mut p, canonical) {
        return p;
    }
    // A full-screen program's key box is looked for first: a menu answered before it may
    // still stand above it (Ink leaves what scrolled away).
    if let Some(field) = (facts.cursor_hidden && !canonical)
        .then(|| secret_field_shown(&rows, facts.below))
        .flatten()
    {
        p.secret = true;
        p.rule = "secret:text".into();
        p.prompt_line = field;
        return p;
    }
    if !canonical && select_prompt(&mut p, &rows, facts) {
        return p;
    }
    if !canonical && toggle_prompt(&mut p, facts) {
        return p;
    }
    if !canonical && button_prompt(&mut p, facts) {
        return p;
    }
    if is_secret_text(&p.prompt_line, canonical)
        || (!canonical
            && label_above(&nonempty, &p.prompt_line).is_some_and(|l| is_secret_text(l, canonical)))
    {
        p.secret = true;
        p.rule = "secret:text".into();
        return p;
    }

    // One-line widgets (DESIGN §15): a letter choice, a confirm, a number in a range,
    // words to choose from, a word to type in full.
    let above: Vec<&str> = nonempty[nonempty.len().saturating_sub(16)..].to_vec();
    let shape = widget::letters(&p.prompt_line, &above, canonical)
        .or_else(|| widget::confirm(&p.prompt_line, canonical))
        .or_else(|| widget::number(&p.prompt_line, &above, canonical))
        .or_else(|| widget::choices(&p.prompt_line, &above, canonical))
        .or_else(|| {
            let asked: Vec<&str> = p.question.lines().collect();
            widget::typed_word(&asked, canonical)
        });
    if let Some(shape) = shape {
        p.kind = shape.kind;
        p.rule = shape.rule.into();
        p.options = shape.options;
        p.default = shape.default;
        p.allows_text = shape.allows_text;
        return p;
    }
    let tall = &nonempty[nonempty.len().saturating_sub(40)..];
    if let Some((options, default)) = column_menu(tall, &p.prompt_line, canonical) {
        (p.question, p.context) = split_question(&rows, &prompt_line, MENU_QUESTION_LINES);
        p.kind = PromptKind::Select;
        p.rule = "generic:column-menu".into();
        p.options = options;
        p.default = default;
        p.allows_text = true;
        return p;
    }
    let tail = &nonempty[nonempty.len().saturating_sub(12)..];
    // `Press Enter to continue` under a numbered list (Claude Code's security notes) asks
    // for Enter, not for an item.
    if let Some((options, default)) =
        numbered_menu(tail, canonical).filter(|_| !ACKNOWLEDGE_ONLY.is_match(&p.prompt_line))
    {
        (p.question, p.context) = split_question(&rows, &prompt_line, MENU_QUESTION_LINES);
        p.kind = PromptKind::Select;
        p.rule = "generic:numbered-menu".into();
        p.options = options;
        p.default = default;
        return p;
    }
    if PRESS_ENTER.is_match(&p.prompt_line) || PRESS_ENTER.is_match(&p.question) {
        p.kind = PromptKind::Acknowledge;
        p.rule = "generic:press-enter".into();
        p.options = vec![opt("continue", "Continue (Enter)", Some("\r".into()))];
        p.default = Some("continue".into());
        return p;
    }
    if let Some(inner) = text_bracket(&p.prompt_line) {
        p.kind = PromptKind::Text;
        p.allows_text = true;
        match widget::bracketed(&inner) {
            Bracketed::Default(default) => {
                p.rule = "generic:text-default".into();
                p.options = vec![opt(
                    &default,
                    &format!("The default ({default})"),
                    Some("\r".into()),
                )];
                p.default = Some(default);
                return p;
            }
            Bracketed::MayBeEmpty => {
                p.rule = "generic:text-optional".into();
                p.options = vec![opt("empty", "Empty answer (Enter)", Some("\r".into()))];
                return p;
            }
            // A hint (`(m for help)`): a question with free text, no default.
            Bracketed::Hint => {}
        }
    }
    // A raw-mode field pre-filled with a value (`Project name: demo`, readline's
    // `read -e -i`, `prompts`' `initial`): the cursor stands right after the value, behind
    // the prompt's mark. Enter submits the value as it stands.
    if let Some(initial) = (!canonical)
        .then(|| {
            (!facts.cursor_hidden)
                .then(|| prefilled(&p.prompt_line))
                .flatten()
                .or_else(|| prefilled_by_emphasis(facts))
        })
        .flatten()
    {
        p.kind = PromptKind::Text;
        p.rule = "generic:text-prefilled".into();
        p.allows_text = true;
        p.options = vec![opt(
            &initial,
            &format!("As pre-filled ({initial})"),
            Some("\r".into()),
        )];
        p.default = Some(initial);
        return p;
    }
    // A dialog program's password box (whiptail, dialog: `│ API token │` over an empty
    // field, the cursor in it): a box whose lines ask for a password, token or key, and a
    // field in it (`____`, or the cursor on a row of nothing but the box's sides).
    let boxed = rows
        .iter()
        .rev()
        .take(QUESTION_LINES + 2)
        .any(|r| r.contains(['│', '┌', '└']) || r.contains("lqq"));
    let field = p.question.contains("____")
        || p.prompt_line
            .chars()
            .all(|c| c == '│' || c == 'x' || c == ' ' || c == '_');
    if !canonical && boxed && field && is_secret_question(&p.question) {
        p.secret = true;
        p.rule = "secret:text".into();
        return p;
    }
    p.kind = PromptKind::Unknown;
    p.allows_text = true;
    p.options = vec![abort_option()];
    p
}

/// The value a raw-mode field was pre-filled with where no mark stands between question and
/// value (@inquirer's `prefill`, questionary's and inquire's `default`: `? Project name
/// demo`): the text at the end of the cursor's row drawn otherwise than the question's last
/// word right before it (the question bold or coloured, the value plain). A dim value is a
/// placeholder, not a value; with nothing to tell them apart, there is none.
fn prefilled_by_emphasis(facts: &ScreenFacts<'_>) -> Option<String> {
    let at = facts.rows.len().checked_sub(1)?;
    let row: Vec<char> = facts.rows[at].trim_end().chars().collect();
    let e = facts.emphasis.get(at)?;
    if e.len() < row.len() || row.is_empty() {
        return None;
    }
    let value_style = e[row.len() - 1];
    let mut start = row.len();
    while start > 0 && (row[start - 1] == ' ' || e[start - 1] == value_style) {
        start -= 1;
    }
    while start < row.len() && row[start] == ' ' {
        start += 1;
    }
    // The question's last character, right before the space before the value.
    let gap = start.checked_sub(1).filter(|&g| row[g] == ' ')?;
    let q = (0..gap).rev().find(|&i| row[i] != ' ')?;
    let value: String = row[start..].iter().collect();
    let question: String = row[..=q].iter().collect();
    let asks = question.chars().filter(|c| c.is_alphanumeric()).count() >= 3;
    (value_style >= 0 && e[q] != value_style && asks && !value.trim().is_empty())
        .then(|| sanitize_line(value.trim()))
        .filter(|v| !v.is_empty())
}

/// The value a raw-mode field was pre-filled with: the text after the prompt's mark
/// (`:`, `?`, `›`, `»`, `>`, `❯` and a space) up to the cursor, on a line that reads as a
/// label and its value (`Project name: demo`). Not a bracketed hint (`(demo)`), and not a
/// shell's or REPL's prompt.
fn prefilled(line: &str) -> Option<String> {
    static FIELD: LazyLock<Regex> = LazyLock::new(|| {
        Regex::new(r"^\s*[?!◆◇]?\s*([A-Za-z][^:?›»>❯]{0,80}[:?›»>❯])\s+([^\s\[\](){}<>][^\[\](){}]{0,200}?)\s*$")
            .expect("prefilled regex")
    });
    let c = FIELD.captures(line)?;
    let value = c[2].trim();
    (!value.is_empty() && !is_repl_prompt(line)).then(|| value.to_owned())
}

/// The question (at most `limit` lines, see [`question_of`]) and the context: up to
/// [`CONTEXT_LINES`] non-empty rows above it.
fn split_question(rows: &[String], prompt_line: &str, limit: usize) -> (String, String) {
    let (question, first) = question_of(rows, prompt_line, limit);
    let above: Vec<&str> = rows[..first]
        .iter()
        .map(|r| r.trim_end())
        .filter(|r| !r.trim().is_empty() && !is_box_edge(r))
        .collect();
    let context = above[above.len().saturating_sub(CONTEXT_LINES)..].join("\n");
    (question, context)
}

/// The question: the prompt's own lines, at most `limit` ([`QUESTION_LINES`]; a menu's
/// [`MENU_QUESTION_LINES`], so that its title stays with its items) — its paragraph (the
/// lines above it back to a blank line), cut at the first line that is some earlier
/// output's notice rather than part of a question (apt's `N: Ignoring file …`, `[INFO] …`,
/// a timestamped log line). A paragraph that is only a bare prompt line (`Enter a value:`)
/// takes the paragraph before it too, where the real question is. Also returns the index
/// of the question's first row: the rows above it are the context.
fn question_of(rows: &[String], prompt_line: &str, limit: usize) -> (String, usize) {
    let mut lines: Vec<String> = Vec::new();
    let mut first = rows.len();
    let mut paragraphs = 0;
    let mut in_paragraph = false;
    for (i, r) in rows.iter().enumerate().rev() {
        // A box's top and bottom edges say nothing; its sides are not text (Gemini CLI's
        // command in a box inside its dialog's box).
        if is_box_edge(r) {
            continue;
        }
        let mut r = r.trim().to_owned();
        while let Some(inner) = Some(unbox(&r).trim().to_owned()).filter(|u| *u != r) {
            r = inner;
        }
        let r = r.as_str();
        if r.is_empty() {
            if in_paragraph {
                in_paragraph = false;
                paragraphs += 1;
                // A paragraph of only the prompt, or of a menu's items and the prompt (a
                // menu's limit is larger), asks nothing by itself: its title is above.
                let only_items = limit > QUESTION_LINES
                    && lines.len() > 1
                    && lines[1..].iter().all(|l| MENU_ITEM_START.is_match(l));
                let bare = (lines.len() == 1 && !lines[0].contains('?')) || only_items;
                if paragraphs >= 2 || !bare {
                    break;
                }
            }
            continue;
        }
        if !lines.is_empty() && is_notice(r) {
            break;
        }
        in_paragraph = true;
        lines.push(r.to_owned());
        first = i;
        if lines.len() == limit {
            break;
        }
    }
    lines.reverse();
    if lines.is_empty() {
        return (prompt_line.trim().to_owned(), rows.len());
    }
    (lines.join("\n"), first)
}

/// A box's top or bottom edge: corners and a run of horizontal lines, nothing else
/// (`╭────╮`, `└──┘`, `│ ╰───╯ │`).
fn is_box_edge(row: &str) -> bool {
    let t = row.trim();
    t.chars().filter(|c| matches!(c, '─' | '━' | '═')).count() >= 3
        && t.chars().any(|c| "╭╮╰╯┌┐└┘╔╗╚╝┏┓┗┛".contains(c))
        && t.chars()
            .all(|c| c == ' ' || "─━═╭╮╰╯┌┐└┘╔╗╚╝┏┓┗┛│┃║".contains(c))
}

/// The start of a numbered menu item: `1)`, `2.`, `[3]`, `(4)`.
static MENU_ITEM_START: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^\s*(?:\(\d{1,3}\)|\[\d{1,3}\]|\d{1,3}[.)])\s").expect("item regex")
});

/// A widget's key help on a row of its own, in brackets: `(enter to confirm)`, `(space to
/// tick one, ctrl+a to tick/untick all, enter to confirm)`, `[↑↓ to move, enter to select]`,
/// `(Use arrow keys)`. It tells how to answer; it is not what is asked, nor the field.
pub fn is_key_help(line: &str) -> bool {
    static HELP: LazyLock<Regex> = LazyLock::new(|| {
        Regex::new(
            r"(?i)^[(\[].*\b(?:enter|return|space|esc|escape|tab|ctrl[+-]\w|arrow keys?|arrows)\b.*\bto (?:confirm|select|submit|tick|toggle|move|navigate|cancel|accept|choose|pick)\b.*[)\]]$|^[(\[](?:use |press )?(?:the )?arrow keys[^()\[\]]*[)\]]$",
        )
        .unwrap()
    });
    HELP.is_match(line.trim())
}

/// The label on the row above a field drawn on a row of its own with nothing typed in it
/// but a prompt mark or masks (beaupy's `API token` over `>`): the field's question.
fn label_above<'a>(nonempty: &[&'a str], prompt_line: &str) -> Option<&'a str> {
    let field = prompt_line
        .trim()
        .trim_start_matches(['>', '›', '❯', '»', ':', '?'])
        .trim_matches(|c: char| c.is_whitespace() || matches!(c, '*' | '•' | '●' | '∙'));
    if !field.is_empty() {
        return None;
    }
    let at = nonempty
        .iter()
        .rposition(|r| r.trim() == prompt_line.trim())?;
    at.checked_sub(1).map(|i| nonempty[i])
}

/// A line that reports rather than asks: apt's and dpkg's `N:`/`W:`/`E:`/`I:` notices,
/// compiler- and git-style lowercase `warning:`/`note:`/`hint:` lines, bracketed log levels
/// (`[INFO]`, `[warn]`), `npm WARN`, and lines that start with a timestamp. Capitalised
/// `Warning:` / `Note:` sentences are left in: a tool may be explaining its question.
pub fn is_notice(line: &str) -> bool {
    static NOTICE: LazyLock<Regex> = LazyLock::new(|| {
        Regex::new(
            r"^(?:[NWEI]: |(?:warning|note|hint|info|debug|error)(?:\[[^\]]*\])?: |\[(?i:info|warn|warning|notice|note|debug|error|trace)\]|(?:npm|yarn|pnpm) (?i:warn|notice|err!)|\d{4}-\d\d-\d\d[T ]\d\d:\d\d)",
        )
        .expect("notice regex")
    });
    NOTICE.is_match(line.trim_start())
}

/// A REPL's or a shell's own prompt alone on its line: the tool waits for commands and
/// asks nothing (`>>>`, `>`, `$`, `#`, `%`, `sqlite>`, `mysql>`, `postgres=#`, `bash-5.2$`,
/// `user@host:~/src$`, `(venv) user@host:~$`, `irb(main):001:0>`, `iex(1)>`, `(gdb)`,
/// `(Pdb)`, `In [3]:`). With stdin carrying nothing, such a read gets EOF, as it would
/// from /dev/null.
pub fn is_repl_prompt(line: &str) -> bool {
    static REPL: LazyLock<Regex> = LazyLock::new(|| {
        Regex::new(concat!(
            r"^(?:",
            r">>>|>|\$|#|%",
            r"|(?:sqlite|mysql|ghci|Prelude|scala|jshell|julia|node|lua|ipdb|gdb|irb|pry|iex|sftp|ftp|cqlsh|redis)(?:\([^()\s]*\))?(?::\d+)*>",
            r"|MariaDB \[[^\]]*\]>",
            r"|\((?:gdb|lldb|Pdb|pdb|rdb|jdb)\)",
            r"|[\w-]+[=\-(][#>]",
            r"|In \[\d+\]:",
            r"|(?:\([\w.-]+\) )?[\w.-]+(?:@[\w.-]+)?(?::\S*)?[$#%]",
            r")$",
        ))
        .expect("repl regex")
    });
    REPL.is_match(sanitize_line(line).trim())
}

/// Whether these lines (oldest first) hold a numbered menu (`1) …`, `2. …`, `❯ 1. …`).
pub fn shows_menu(lines: &[&str]) -> bool {
    numbered_menu(lines, true).is_some()
}

/// A line that only asks to go on (`Press Enter to continue`), offering nothing to choose.
static ACKNOWLEDGE_ONLY: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?i)^\W*press\s+(enter|return)(\s+key)?\s+to\s+(continue|proceed|go on)\W*$")
        .expect("acknowledge regex")
});

static SECRET: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r"(?i)\b(password|passphrase|pass phrase|passcode|passwort|pin|token|secret|api[ _-]?key|unseal key|private key|otp|one[- ]time (?:password|code)|(?:2fa|mfa|verification|access|auth|authentication|security) code|credentials?)\b",
    )
    .expect("secret regex")
});

static PRESS_ENTER: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?i)\bpress\s+(enter|return|any key|<enter>|\[enter\])").expect("press regex")
});

/// The bracketed text that closes a text prompt: `Country Name (2 letter code) [AU]:`,
/// `package name: (probe)`, `? Project name (demo)` — a default, a hint or a note that the
/// field may stay empty ([`widget::bracketed`] tells which).
fn text_bracket(line: &str) -> Option<String> {
    static SQUARE: LazyLock<Regex> =
        LazyLock::new(|| Regex::new(r"\[([^\[\]]{0,80})\]\s*:\s*$").expect("text default regex"));
    static PAREN: LazyLock<Regex> = LazyLock::new(|| {
        Regex::new(r"(?:[:?]\s*|\s)\(([^()|]{1,60})\)\s*[:?›»❯>]?\s*$")
            .expect("paren default regex")
    });
    SQUARE
        .captures(line)
        .or_else(|| PAREN.captures(line))
        .map(|c| c[1].to_owned())
}

/// A prompt line that asks for a secret by its words (password, token, API key, unseal
/// key, OTP or 2FA code, credentials …) — whatever the terminal's echo says, since raw-mode
/// readers always turn ECHO off and mask or hide typing themselves. It must read as a
/// field (`Token:`) or, in raw mode, as a prompt library's question (`? Enter your API
/// token`); a line that offers choices (`Delete the token? [y/N]`) is a choice.
fn is_secret_text(line: &str, canonical: bool) -> bool {
    let t = line.trim();
    // In raw mode a library draws its field as it likes (tty-prompt's `API token •••`): a
    // label of a few words, or a line ending in mask characters, is one too.
    let masked = t.ends_with(['•', '*', '●', '▪', '∙']);
    let field = t.ends_with(':')
        || (!canonical
            && (t.starts_with('?')
                || t.ends_with('>')
                || masked
                || t.split_whitespace().count() <= 3));
    field && SECRET.is_match(t) && !offers_choices(t)
}

/// A full-screen program's input box that asks for a secret, near the bottom of the screen
/// (Gemini CLI's `Enter Gemini API Key` over `Paste your API key here`): a row that tells
/// the user to enter, paste or type a password, token or key. Its cursor is hidden, so
/// which field has focus cannot be told: any such row refuses.
fn secret_field_shown(rows: &[String], below: &[String]) -> Option<String> {
    static ASKS_FOR: LazyLock<Regex> =
        LazyLock::new(|| Regex::new(r"(?i)^(enter|paste|type|provide|input)\b").unwrap());
    let all: Vec<String> = rows
        .iter()
        .cloned()
        .chain(below.iter().map(|r| sanitize_line(r)))
        .map(|r| unbox(&unbox(&r)))
        .collect();
    // A menu's items name what they lead to (`Paste an authentication token`); they ask
    // for nothing themselves.
    let items = select_menu(&all, None).map(|m| m.items).unwrap_or_default();
    let shown: Vec<&str> = all
        .iter()
        .map(|r| r.trim())
        .filter(|r| !r.is_empty())
        .collect();
    shown[shown.len().saturating_sub(8)..]
        .iter()
        .find(|t| {
            ASKS_FOR.is_match(t)
                && SECRET.is_match(t)
                && !t.ends_with('.')
                && !items.iter().any(|i| t.ends_with(i.as_str()))
        })
        .map(|t| (*t).to_owned())
}

/// Whether a question asks by its words for a password, token, key or code (and offers no
/// choices): a library's masked field, whatever its shape.
pub fn is_secret_question(line: &str) -> bool {
    SECRET.is_match(line) && !offers_choices(line)
}

/// Whether a line offers generic choices (`[y/N]`, `(yes/no)`, `(Y)es/(N)o/…`).
pub fn offers_choices(line: &str) -> bool {
    widget::confirm(line, true).is_some() || widget::letters(line, &[], true).is_some()
}

/// Lines such as `1) Proceed`, `2. Yes`, `❯ 1. Yes`, `[3] Cancel`, numbered from 1.
fn numbered_menu(lines: &[&str], canonical: bool) -> Option<(Vec<ApprovalOption>, Option<String>)> {
    static ITEM: LazyLock<Regex> = LazyLock::new(|| {
        Regex::new(
            r"^\s*([❯>›▶→*]\s*)?(?:\[\s*(\d{1,2})\]|\((\d{1,2})\)|(\d{1,2})[.)])\s+(\S.*?)\s*$",
        )
        .unwrap()
    });
    static TITLE_DEFAULT: LazyLock<Regex> =
        LazyLock::new(|| Regex::new(r"[\[(]([^\[\]()]{1,40})[\])]\s*[:?]?\s*$").unwrap());
    let mut options: Vec<ApprovalOption> = Vec::new();
    let mut default = None;
    let mut last_item = 0;
    let mut first_item = 0;
    for (at, line) in lines.iter().enumerate() {
        let Some(c) = ITEM.captures(line) else {
            continue;
        };
        let n = c
            .get(2)
            .or(c.get(3))
            .or(c.get(4))
            .map_or("", |m| m.as_str());
        let label = c[5].to_owned();
        let num = n.parse::<usize>().unwrap_or(0);
        let last = options.last().and_then(|o| o.value.parse::<usize>().ok());
        // Numbered from 1 (or 0: cleo's `[ 0] red`), each number above the one before (gpg
        // skips some: 1 2 3 4 9 10 14); a restart starts a new menu; anything else is not a
        // menu item.
        if num == 0 || (num == 1 && last != Some(0)) {
            options.clear();
            default = None;
            first_item = at;
        } else if last.is_none_or(|l| num <= l) || options.is_empty() {
            continue;
        }
        let lower = label.to_ascii_lowercase();
        if c.get(1).is_some()
            || lower.contains("(default")
            || lower.contains("[default")
            || lower.contains("*default*")
        {
            default = Some(n.to_owned());
        }
        options.push(opt(n, &label, Some(line_keys(n, canonical))));
        last_item = at;
    }
    // No item marked: the question names the default item in brackets (cleo's
    // `Pick a color [green]:` over `[ 0] red`, `[ 1] green`).
    if default.is_none()
        && let Some(c) = lines[..first_item]
            .iter()
            .rev()
            .find_map(|l| TITLE_DEFAULT.captures(l))
    {
        let named = c[1].trim();
        default = options
            .iter()
            .find(|o| o.label == named || o.value == named)
            .map(|o| o.value.clone());
    }
    // The menu ends right above the prompt (a line or two between at most): an earlier
    // menu further up is not what is asked now.
    (options.len() >= 2 && lines.len() - last_item <= 3).then_some((options, default))
}

/// Debconf's readline and teletype menus (`dpkg-reconfigure tzdata`): `  N. label` items
/// laid out in columns, several on a line, numbered down each column; the block of item
/// lines right above the prompt. All items count, in number order (1..n, none missing);
/// the default is the number in the prompt's brackets (`Geographic area [8]:`). Debconf
/// also takes an item's name, so free text is allowed.
fn column_menu(
    lines: &[&str],
    prompt_line: &str,
    canonical: bool,
) -> Option<(Vec<ApprovalOption>, Option<String>)> {
    static START: LazyLock<Regex> =
        LazyLock::new(|| Regex::new(r"(?:^\s*|\s{2,})(\d{1,3})[.)]\s+").expect("column regex"));
    static DEFAULT: LazyLock<Regex> =
        LazyLock::new(|| Regex::new(r"\[(\d{1,3})\]\s*:?\s*$").expect("default regex"));
    let mut items: Vec<(usize, String)> = Vec::new();
    let mut several = false;
    for (below, line) in lines.iter().rev().enumerate() {
        let starts: Vec<regex::Captures<'_>> = START.captures_iter(line).collect();
        let at_start = starts
            .first()
            .is_some_and(|c| c.get(0).is_some_and(|m| m.start() == 0));
        if !at_start {
            // Only the block right above the prompt (a line or two between at most).
            if items.is_empty() && below < 3 {
                continue;
            }
            break;
        }
        several |= starts.len() >= 2;
        for (i, c) in starts.iter().enumerate() {
            let whole = c.get(0)?;
            let end = starts
                .get(i + 1)
                .and_then(|n| n.get(0))
                .map_or(line.len(), |m| m.start());
            let label = line[whole.end()..end].trim();
            if label.is_empty() {
                return None;
            }
            items.push((c[1].parse().ok()?, label.to_owned()));
        }
    }
    if !several || items.len() < 2 {
        return None;
    }
    items.sort_by_key(|(n, _)| *n);
    if items.iter().enumerate().any(|(i, (n, _))| *n != i + 1) {
        return None;
    }
    let options: Vec<ApprovalOption> = items
        .iter()
        .map(|(n, label)| {
            let n = n.to_string();
            opt(&n, label, Some(line_keys(&n, canonical)))
        })
        .collect();
    let default = DEFAULT
        .captures(prompt_line)
        .map(|c| c[1].to_owned())
        .filter(|d| options.iter().any(|o| &o.value == d));
    Some((options, default))
}

/// A menu whose highlighted item moves with the arrow keys: @inquirer `select`,
/// questionary and InquirerPy `select`, the `❯ 1. Yes` menus of coding agents. One item
/// carries a pointer (`❯`, `»`, `›`, `>`, `▶`, …); the others are indented to the same
/// column; the nearest line above the items is the menu's title.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SelectMenu {
    /// The items as shown, pointer and indentation removed.
    pub items: Vec<String>,
    /// The highlighted item.
    pub highlighted: usize,
    /// Items with check boxes (`◉ red`, `○ green`): submitted as a whole, as shown.
    pub checkbox: bool,
    /// The title's row on the screen (the menu's question).
    pub title_row: usize,
    /// The first item's row: rows between the title and it explain the question.
    pub first_row: usize,
    /// The items stand side by side (a toggle's `No / Yes`): moved with left and right.
    #[serde(default)]
    pub horizontal: bool,
}

impl SelectMenu {
    /// The items without their check boxes (`◉ cheese` → `cheese`).
    pub fn names(&self) -> Vec<String> {
        self.items
            .iter()
            .map(|i| {
                if self.checkbox {
                    i.strip_prefix("[x]")
                        .or_else(|| i.strip_prefix("[ ]"))
                        .unwrap_or(i)
                        .trim_start_matches(|c: char| BOXES.contains(&c))
                        .trim()
                        .to_owned()
                } else {
                    i.clone()
                }
            })
            .collect()
    }

    /// Which items are checked (all unchecked for a menu without boxes).
    pub fn checked(&self) -> Vec<bool> {
        self.items
            .iter()
            .map(|i| self.checkbox && (i.starts_with(CHECKED) || i.starts_with("[x]")))
            .collect()
    }
}

/// A multi-select decision's value for the items `names` with `checked` ones chosen:
/// their names in item order, comma-joined; `none` for none.
pub fn multi_value(names: &[String], checked: &[bool]) -> String {
    let chosen: Vec<&str> = names
        .iter()
        .zip(checked)
        .filter(|(_, c)| **c)
        .map(|(n, _)| n.as_str())
        .collect();
    if chosen.is_empty() {
        "none".into()
    } else {
        chosen.join(",")
    }
}

/// The items a multi-select decision `value` names (`cheese,olives`, `none`), matched to
/// `names` case-insensitively, as a checked-or-not list; `None` when a name is no item.
pub fn multi_set(names: &[String], value: &str) -> Option<Vec<bool>> {
    let mut set = vec![false; names.len()];
    if value.trim().eq_ignore_ascii_case("none") && !names.iter().any(|n| n == "none") {
        return Some(set);
    }
    for part in value.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let at = names
            .iter()
            .position(|n| n == part)
            .or_else(|| names.iter().position(|n| n.eq_ignore_ascii_case(part)))?;
        set[at] = true;
    }
    set.contains(&true).then_some(set)
}

const POINTERS: &[char] = &['❯', '›', '»', '>', '▶', '►', '➤', '→', '➜', '▸', '‣'];
const BOXES: &[char] = &[
    '◯', '◉', '○', '●', '◎', '☐', '☑', '☒', '□', '■', '⬡', '⬢', '◻', '◼',
];
/// Marks a check box drawn in brackets holds when checked (`[x]`, `[✓]`, `[*]`).
const BRACKET_TICKS: &[char] = &['x', 'X', '✓', '✔', '*', '■', '•', '●'];
const CHECKED: &[char] = &['◉', '●', '◎', '☑', '☒', '■', '⬢', '◼'];

/// A check mark some menus put after the pointer on the item already in effect (Claude
/// Code's `❯ ✔ Auto`): not part of the item.
const CURRENT: &[char] = &['✔', '✓'];

/// The character column where a pointer line's item text starts, if `row` is one (leading
/// spaces, a pointer glyph, optional spaces and a check mark, then text). A radio dot (`●`)
/// points only at a numbered item (Gemini CLI's `● 1. Trust folder`): elsewhere it is a
/// ticked box.
fn pointer_column(row: &str) -> Option<usize> {
    let mut chars = row.chars().enumerate().skip_while(|&(_, c)| c == ' ');
    let (_, pointer) = chars.next()?;
    let mut text = chars.skip_while(|&(_, c)| c == ' ').peekable();
    if text.peek().is_some_and(|&(_, c)| CURRENT.contains(&c)) {
        text.next();
    }
    let (col, _) = text.find(|&(_, c)| c != ' ')?;
    let radio = pointer == '●' && numbered_item(&row.chars().skip(col).collect::<String>());
    (POINTERS.contains(&pointer) || radio).then_some(col)
}

/// `1. Yes`, `2) No`: an item chosen by its number.
fn numbered_item(text: &str) -> bool {
    let digits = text.chars().take_while(char::is_ascii_digit).count();
    digits > 0 && (text[digits..].starts_with(". ") || text[digits..].starts_with(") "))
}

/// A row inside a box (`│ text │`, Ink's bordered panels) with the borders blanked, so its
/// text keeps its columns.
fn unbox(row: &str) -> String {
    const SIDES: &[char] = &['│', '┃', '║'];
    let trimmed = row.trim();
    match (trimmed.chars().next(), trimmed.chars().last()) {
        (Some(l), Some(r)) if SIDES.contains(&l) && l == r && trimmed.chars().count() > 1 => {
            let lead = row.len() - row.trim_start().len();
            let inner = &trimmed[l.len_utf8()..trimmed.len() - r.len_utf8()];
            format!("{} {} ", &row[..lead], inner).trim_end().to_owned()
        }
        _ => row.to_owned(),
    }
}

/// The arrow-key menu on a screen (sanitized rows, top down) whose cursor is on
/// `cursor_row`: the last pointer line, the rows next to it indented to its item column,
/// and a title above them. The cursor must be on the title, the items, or just below them
/// (a key hint), so that a `>`-quoted line far up in the output is no menu; a hidden cursor
/// (`None`: a full-screen program) says nothing, and the menu may be anywhere. Items must
/// be distinct: an item is chosen by its text. Numbered items (`> 1. Sign in`) may have
/// description lines indented under them and blank lines between them; rows inside a box
/// are read without its borders.
pub fn select_menu(rows: &[String], cursor_row: Option<usize>) -> Option<SelectMenu> {
    let rows: Vec<String> = rows.iter().map(|r| unbox(r)).collect();
    let (at, col) = rows
        .iter()
        .enumerate()
        .rev()
        .find_map(|(i, r)| pointer_column(r).map(|c| (i, c)))?;
    let lead = |r: &str| r.chars().take_while(|&c| c == ' ').count();
    let text = |r: &str| r.chars().skip(col).collect::<String>().trim().to_owned();
    // An item's text starts at the pointer line's item column, after a check mark on the
    // item in effect (`  ✔ Auto` once the highlight moved off it).
    let aligned = |r: &str| {
        let mut chars = r
            .chars()
            .enumerate()
            .skip_while(|&(_, c)| c == ' ')
            .peekable();
        if chars.peek().is_some_and(|&(_, c)| CURRENT.contains(&c)) {
            chars.next();
            if chars.peek().is_none_or(|&(_, c)| c != ' ') {
                return false;
            }
        }
        chars
            .find(|&(_, c)| c != ' ')
            .is_some_and(|(i, _)| i == col)
    };
    let number = |r: &str| -> Option<i64> {
        let t = text(r);
        numbered_item(&t)
            .then(|| {
                t.chars()
                    .take_while(char::is_ascii_digit)
                    .collect::<String>()
            })
            .and_then(|d| d.parse().ok())
    };
    let numbered = number(&rows[at]);
    // Numbered items follow each other (`2.` after `1.`), with their descriptions (indented
    // deeper) and single blank lines between them; other items are one block.
    let mut item_rows = vec![at];
    for dir in [-1i64, 1] {
        let mut i = at as i64 + dir;
        let mut expect = numbered.map(|n| n + dir);
        let mut blanks = 0;
        while i >= 0 && (i as usize) < rows.len() {
            let r = &rows[i as usize];
            match expect {
                None if aligned(r) => item_rows.push(i as usize),
                Some(n) if aligned(r) && number(r) == Some(n) => {
                    item_rows.push(i as usize);
                    expect = Some(n + dir);
                    blanks = 0;
                }
                Some(_) if r.trim().is_empty() && blanks == 0 => blanks += 1,
                Some(_) if !r.trim().is_empty() && lead(r) > col => blanks = 0,
                _ => break,
            }
            i += dir;
        }
    }
    item_rows.sort_unstable();
    let (first, last) = (item_rows[0], *item_rows.last()?);
    if first == last {
        return None;
    }
    let title_row = menu_title(&rows[..first], cursor_row.is_none())?;
    // Below the items, only a key hint may stand between them and the cursor (or, with the
    // cursor hidden, the screen's end): a question there (`Continue? [Y/n]` under a `>`
    // list) is what is asked, not the list.
    let end = match cursor_row {
        Some(cursor_row) if cursor_row < title_row || cursor_row > last + 3 => return None,
        Some(cursor_row) => cursor_row.min(rows.len() - 1).max(last),
        None => (0..rows.len())
            .rev()
            .find(|&i| !rows[i].trim().is_empty())
            .unwrap_or(last)
            .max(last),
    };
    if rows[last + 1..=end]
        .iter()
        .map(|r| r.trim())
        .any(|r| r.ends_with('?') || r.ends_with(':') || offers_choices(r))
    {
        return None;
    }
    let items: Vec<String> = item_rows.iter().map(|&i| text(&rows[i])).collect();
    let distinct: std::collections::HashSet<&String> = items.iter().collect();
    if distinct.len() != items.len() {
        return None;
    }
    let checkbox = items
        .iter()
        .all(|i| i.starts_with(BOXES) || i.starts_with("[ ]") || i.starts_with("[x]"));
    Some(SelectMenu {
        highlighted: item_rows.iter().position(|&i| i == at)?,
        items,
        checkbox,
        title_row,
        first_row: first,
        horizontal: false,
    })
}

/// A list whose current item has no pointer (@clack/prompts, `prompts`' multiselect): item
/// rows, one under the other at one indent (a `│` frame at their left aside), each starting
/// with a radio dot or a check box. Radio dots (`○ red`, `● green`): the filled one is the
/// current item. Check boxes (`◻ cheese`, `◼ ham`, `◯`/`◉`): the current item is the one
/// drawn standing out from all the others (its emphasis, as the shim's screen model scores
/// it); with none that does, it is no menu. Its title is the row right above the items.
fn marked_menu(facts: &ScreenFacts<'_>) -> Option<SelectMenu> {
    const RADIO: &[char] = &['○', '●'];
    let all: Vec<&String> = facts.rows.iter().chain(facts.below.iter()).collect();
    // (row, glyph column in chars, glyph, label start in chars, label)
    let item = |at: usize| -> Option<(usize, char, usize, String)> {
        let raw = all[at].as_str();
        let chars: Vec<char> = raw.chars().collect();
        let mut i = 0;
        while i < chars.len() && (chars[i] == ' ' || chars[i] == '│' || chars[i] == '┃') {
            i += 1;
        }
        // dialoguer draws its boxes as `⬚` (unchecked) and `✔` (checked); beaupy as `[ ]`
        // and `[✓]` (any mark in brackets).
        let (glyph, width) = match (chars.get(i), chars.get(i + 1), chars.get(i + 2)) {
            (Some('['), Some(' '), Some(']')) => ('◻', 3),
            (Some('['), Some(m), Some(']')) if BRACKET_TICKS.contains(m) => ('◼', 3),
            (Some('⬚'), _, _) => ('◻', 1),
            (Some('✔'), _, _) => ('◼', 1),
            (Some(g), _, _) => (*g, 1),
            _ => return None,
        };
        if !BOXES.contains(&glyph) || chars.get(i + width) != Some(&' ') {
            return None;
        }
        let mut j = i + width;
        while j < chars.len() && chars[j] == ' ' {
            j += 1;
        }
        let label: String = chars[j..].iter().collect::<String>().trim_end().to_owned();
        (!label.is_empty()).then_some((i, glyph, j, label))
    };
    let last = (0..all.len()).rev().find(|&i| item(i).is_some())?;
    let mut first = last;
    let column = item(last)?.0;
    while first > 0 && item(first - 1).is_some_and(|it| it.0 == column) {
        first -= 1;
    }
    if last - first < 1 || first == 0 {
        return None;
    }
    let mut items: Vec<(usize, char, usize, String)> = (first..=last).filter_map(item).collect();
    // One glyph for every box (enquirer's `✔`): whether each is checked is told by how it
    // is drawn — in colour checked, dim or grey not.
    if items.iter().all(|it| it.1 == items[0].1) && !RADIO.contains(&items[0].1) {
        for (k, it) in items.iter_mut().enumerate() {
            let drawn = facts
                .emphasis
                .get(first + k)
                .and_then(|e| e.get(it.0))
                .copied();
            if drawn == Some(-1) {
                it.1 = '◻';
            }
        }
    }
    let labels: Vec<String> = items.iter().map(|it| sanitize_line(&it.3)).collect();
    let mut distinct = labels.clone();
    distinct.sort();
    distinct.dedup();
    if distinct.len() != labels.len() {
        return None;
    }
    let radio = items.iter().all(|it| RADIO.contains(&it.1));
    let (highlighted, checkbox) = if radio {
        let filled: Vec<usize> = (0..items.len()).filter(|&k| items[k].1 == '●').collect();
        match filled.as_slice() {
            [one] => (*one, false),
            _ => return None,
        }
    } else {
        // How each item's label is drawn; the current one stands out from every other.
        let scores: Vec<i8> = items
            .iter()
            .enumerate()
            .map(|(k, it)| {
                facts
                    .emphasis
                    .get(first + k)
                    .and_then(|e| e.get(it.2..it.2 + it.3.chars().count()))
                    .and_then(|s| s.iter().max().copied())
            })
            .collect::<Option<Vec<i8>>>()?;
        let top = *scores.iter().max()?;
        let at: Vec<usize> = (0..scores.len()).filter(|&k| scores[k] == top).collect();
        match at.as_slice() {
            [one] => (*one, true),
            _ => return None,
        }
    };
    // The title: within a few rows above, a library's question (`? …`, `◆ …`), else a row
    // ending as a question does, else the nearest non-empty row — read without a frame
    // (`prompts` puts its key instructions between question and items).
    let body = |i: usize| {
        all[i]
            .trim()
            .trim_start_matches(['│', '┃'])
            .trim()
            .to_owned()
    };
    let near = first.saturating_sub(8)..first;
    let title_row = near
        .clone()
        .rev()
        .find(|&i| {
            let b = body(i);
            b.starts_with("? ") || b.starts_with('◆')
        })
        .or_else(|| near.clone().rev().find(|&i| body(i).ends_with('?')))
        .or_else(|| (0..first).rev().find(|&i| !body(i).is_empty()))?;
    Some(SelectMenu {
        items: if checkbox {
            items
                .iter()
                .zip(&labels)
                .map(|(it, l)| format!("{} {l}", it.1))
                .collect()
        } else {
            labels
        },
        highlighted,
        checkbox,
        title_row,
        first_row: first,
        horizontal: false,
    })
}

/// The row of a menu's question, among the rows above its items: the nearest non-empty
/// row when the cursor is shown (the menu is around it) or when that row reads as a
/// question (`? Pick a color`, `Select:`); else (a full-screen program's hidden cursor)
/// the nearest row that asks
/// (holds a `?`) among the few above, back to a ruled line (Gemini CLI's `Do you trust the
/// files in this folder?` above a paragraph that explains, Claude Code's `Quick safety
/// check: Is this a project you … trust?` above a link); else the nearest row when it
/// stands alone, or the first row of its paragraph, its heading (Claude Code's `Choose the
/// text style …` above `To change this later, run /theme`).
fn menu_title(above: &[String], cursor_hidden: bool) -> Option<usize> {
    // A line of glyphs only (a pointer `›` left from a redraw, a rule) names nothing.
    let nearest = (0..above.len())
        .rev()
        .find(|&i| above[i].chars().any(char::is_alphanumeric))?;
    let near = above[nearest].trim();
    if !cursor_hidden || near.starts_with("? ") || near.ends_with(':') || near.ends_with('?') {
        return Some(nearest);
    }
    let ruled = |r: &str| r.trim().chars().all(|c| "─━═-–—╌┄┈╭╮╰╯".contains(c));
    let asks = |r: &str| r.trim_end().ends_with('?') || r.contains("? ");
    if let Some(q) = (0..=nearest)
        .rev()
        .filter(|&i| !above[i].trim().is_empty())
        .take(8)
        .take_while(|&i| !ruled(&above[i]))
        .find(|&i| asks(&above[i]))
    {
        return Some(q);
    }
    let mut start = nearest;
    while start > 0 && !above[start - 1].trim().is_empty() && nearest - start < 6 {
        start -= 1;
    }
    Some(start)
}

/// An arrow-key menu below or around the cursor: the prompt becomes the menu's title, its
/// options the items (the highlighted one the default), chosen by moving the highlight
/// (the shim steers it, checking the screen at each step). A check-box menu is decided as
/// a whole: submit the selection shown, or abort.
fn select_prompt(p: &mut Prompt, rows: &[String], facts: &ScreenFacts<'_>) -> bool {
    let (below, cursor_hidden) = (facts.below, facts.cursor_hidden);
    let cursor_row = (!cursor_hidden).then(|| rows.len().saturating_sub(1));
    let all: Vec<String> = rows
        .iter()
        .cloned()
        .chain(below.iter().map(|r| sanitize_line(r)))
        .map(|r| unbox(&r))
        .collect();
    let Some(menu) = select_menu(&all, cursor_row).or_else(|| marked_menu(facts)) else {
        return false;
    };
    let title = all[menu.title_row]
        .trim()
        .trim_start_matches(['│', '┃', '◆', '◇', ' '])
        .to_owned();
    (p.question, p.context) = split_question(&all[..=menu.title_row], &title, QUESTION_LINES);
    // What stands between the title and the items explains the question.
    let explained: Vec<&str> = all[menu.title_row + 1..menu.first_row]
        .iter()
        .map(|r| r.trim())
        .filter(|r| !r.is_empty())
        .collect();
    if !explained.is_empty() {
        p.question = format!("{}\n{}", p.question, explained.join("\n"));
    }
    p.prompt_line = title;
    p.kind = PromptKind::Select;
    p.allows_text = false;
    if menu.checkbox {
        // Any items, each with its box: the options are the items; a decision names the
        // set to submit (`cheese,olives`, `none`); the default is the set shown checked.
        p.kind = PromptKind::MultiSelect;
        p.rule = "generic:checkbox".into();
        let names = menu.names();
        p.options = names.iter().map(|n| opt(n, n, None)).collect();
        p.default = Some(multi_value(&names, &menu.checked()));
    } else {
        p.rule = "generic:select".into();
        // Numbered items (`1. Yes`) are chosen by their number, others by their text.
        let numbered = menu.items.iter().enumerate().all(|(i, item)| {
            let n = (i + 1).to_string();
            item.strip_prefix(&n)
                .is_some_and(|r| r.starts_with(". ") || r.starts_with(") "))
        });
        p.options = menu
            .items
            .iter()
            .enumerate()
            .map(|(i, item)| {
                let value = if numbered {
                    (i + 1).to_string()
                } else {
                    item.clone()
                };
                opt(&value, item, None)
            })
            .collect();
        p.default = Some(p.options[menu.highlighted].value.clone());
    }
    p.select = Some(menu);
    true
}

/// A row of buttons near the bottom of the screen (opencode's `Allow once   Allow always
/// Reject`): two to six short labels side by side, each starting with a capital, two to
/// eight spaces apart, the current one drawn standing out from all the others (its own
/// background; key hints after them on the row, `enter confirm`, are no buttons). `rows`
/// is the whole screen, top down, `emphasis` how each of its characters is drawn. Its
/// question is the block of rows above it. With nothing to tell the current button, no
/// row of buttons is read.
pub fn button_row(rows: &[String], emphasis: &[Vec<i8>]) -> Option<SelectMenu> {
    let last = rows.iter().rposition(|r| !r.trim().is_empty())?;
    for at in (last.saturating_sub(6)..=last).rev() {
        let Some(e) = emphasis.get(at).filter(|e| !e.is_empty()) else {
            continue;
        };
        let chars: Vec<char> = rows[at].chars().collect();
        // (first column, text) of each run of text two or more spaces apart.
        let mut runs: Vec<(usize, String)> = Vec::new();
        let mut i = 0;
        while i < chars.len() {
            if chars[i] == ' ' || matches!(chars[i], '│' | '┃' | '║') {
                i += 1;
                continue;
            }
            let from = i;
            while i < chars.len()
                && !(chars[i] == ' ' && chars.get(i + 1).is_none_or(|&c| c == ' '))
                && !matches!(chars[i], '│' | '┃' | '║')
            {
                i += 1;
            }
            runs.push((from, chars[from..i].iter().collect()));
        }
        // A button's label is a few plain words: no digits (htop's function-key bar,
        // `F1Help  F2Setup …`, is no row of buttons), no symbols.
        let button = |t: &str| {
            t.chars().next().is_some_and(char::is_uppercase)
                && t.chars().count() <= 24
                && t.split_whitespace().count() <= 4
                && t.chars().all(|c| c.is_alphabetic() || " ,'’-".contains(c))
        };
        let Some(first) = runs.iter().position(|(_, t)| button(t)) else {
            continue;
        };
        let mut buttons = vec![runs[first].clone()];
        for (col, t) in &runs[first + 1..] {
            let (pcol, pt) = buttons.last()?;
            let gap = col - (pcol + pt.chars().count());
            if !button(t) || gap > 8 {
                break;
            }
            buttons.push((*col, t.clone()));
        }
        if !(2..=6).contains(&buttons.len()) {
            continue;
        }
        let scores: Vec<i8> = buttons
            .iter()
            .map(|(col, t)| {
                e.get(*col..col + t.chars().count())
                    .and_then(|s| s.iter().max().copied())
            })
            .collect::<Option<Vec<i8>>>()?;
        let top = *scores.iter().max()?;
        let current: Vec<usize> = (0..scores.len()).filter(|&k| scores[k] == top).collect();
        let [highlighted] = current.as_slice() else {
            continue;
        };
        if top < 2 {
            continue;
        }
        // The question: the block above, back over at most two blank rows at a time, to
        // ten rows up; its first row is the title.
        let body = |i: usize| {
            rows[i]
                .trim()
                .trim_matches(|c: char| matches!(c, '│' | '┃' | '║'))
                .trim()
                .to_owned()
        };
        let mut title_row = None;
        let mut blanks = 0;
        for i in (at.saturating_sub(10)..at).rev() {
            if body(i).is_empty() {
                blanks += 1;
                if blanks > 2 && title_row.is_some() {
                    break;
                }
                continue;
            }
            if body(i).chars().all(|c| "─━═-╌ ".contains(c)) {
                break;
            }
            blanks = 0;
            title_row = Some(i);
        }
        return Some(SelectMenu {
            items: buttons.into_iter().map(|(_, t)| t).collect(),
            highlighted: *highlighted,
            checkbox: false,
            title_row: title_row?,
            first_row: at,
            horizontal: true,
        });
    }
    None
}

/// [`button_row`] as a prompt: a select whose items are the buttons, chosen by their
/// number (a button's own word may be a decision word: `Reject`).
fn button_prompt(p: &mut Prompt, facts: &ScreenFacts<'_>) -> bool {
    let all: Vec<String> = facts
        .rows
        .iter()
        .chain(facts.below.iter())
        .map(|r| sanitize_line(r))
        .collect();
    let Some(menu) = button_row(&all, facts.emphasis) else {
        return false;
    };
    let body = |r: &str| {
        r.trim()
            .trim_matches(|c: char| matches!(c, '│' | '┃' | '║'))
            .trim()
            .to_owned()
    };
    let lines: Vec<String> = all[menu.title_row..menu.first_row]
        .iter()
        .map(|r| body(r))
        .filter(|r| !r.is_empty())
        .collect();
    p.prompt_line = lines[0]
        .trim_start_matches(|c: char| !c.is_alphanumeric())
        .to_owned();
    p.question = lines.join("\n");
    let above: Vec<&str> = all[..menu.title_row]
        .iter()
        .map(|r| r.trim_end())
        .filter(|r| !r.trim().is_empty())
        .collect();
    p.context = above[above.len().saturating_sub(CONTEXT_LINES)..].join("\n");
    p.kind = PromptKind::Select;
    p.rule = "generic:buttons".into();
    p.allows_text = false;
    p.options = menu
        .items
        .iter()
        .enumerate()
        .map(|(i, item)| opt(&(i + 1).to_string(), item, None))
        .collect();
    p.default = Some((menu.highlighted + 1).to_string());
    p.select = Some(menu);
    true
}

/// A toggle: two words side by side at the end of a row, `off / on`, `● Yes / ○ No`, the
/// current one marked by a dot or drawn standing out from the other (underlined, reverse,
/// coloured where the other is grey). Its question is the row's text before the words, or
/// the nearest question above. Answered by moving with left and right, checked on the
/// screen, then Enter. Two words with nothing to tell which is current are no toggle.
fn toggle_prompt(p: &mut Prompt, facts: &ScreenFacts<'_>) -> bool {
    static PAIR: LazyLock<Regex> = LazyLock::new(|| {
        Regex::new(r"(?:^|[\s›>»:?·│])\s*([●○◉◯]\s*)?([A-Za-z][\w-]{0,15})\s+/\s+([●○◉◯]\s*)?([A-Za-z][\w-]{0,15})\s*$")
            .expect("toggle regex")
    });
    let all: Vec<&String> = facts.rows.iter().chain(facts.below.iter()).collect();
    let last = all.iter().rposition(|r| !r.trim().is_empty());
    let Some(last) = last else { return false };
    let first = last.saturating_sub(6);
    for at in (first..=last).rev() {
        let raw = all[at].as_str();
        let Some(c) = PAIR.captures(raw) else {
            continue;
        };
        let (Some(a), Some(b)) = (c.get(2), c.get(4)) else {
            continue;
        };
        let dot = |m: Option<regex::Match<'_>>| {
            m.map(|m| m.as_str().trim()).map(|d| matches!(d, "●" | "◉"))
        };
        let current = match (dot(c.get(1)), dot(c.get(3))) {
            (Some(true), Some(false)) => Some(0),
            (Some(false), Some(true)) => Some(1),
            (None, None) => facts.emphasis.get(at).and_then(|e| {
                let score = |m: regex::Match<'_>| {
                    let from = raw[..m.start()].chars().count();
                    let n = m.as_str().chars().count();
                    e.get(from..from + n).and_then(|s| s.iter().max().copied())
                };
                match (score(a), score(b)) {
                    (Some(x), Some(y)) if x > y => Some(0),
                    (Some(x), Some(y)) if y > x => Some(1),
                    _ => None,
                }
            }),
            _ => None,
        };
        let Some(current) = current else {
            continue;
        };
        let head = sanitize_line(&raw[..c.get(0).map_or(0, |m| m.start())]);
        let head = head
            .trim()
            .trim_end_matches(['›', '>', '»', '·', '│', ':'])
            .trim();
        // The question: the row's own text before the words, or the nearest row above
        // shaped like a question.
        let (title, title_row) = if head.chars().any(char::is_alphanumeric) {
            (head.to_owned(), at)
        } else {
            let Some(above) = (at.saturating_sub(4)..at).rev().find(|&i| {
                let t = sanitize_line(all[i]);
                let t = t.trim();
                t.ends_with('?') || t.ends_with(':')
            }) else {
                continue;
            };
            (
                sanitize_line(all[above])
                    .trim()
                    .trim_start_matches(['◆', '◇', '│', '?', ' '])
                    .to_owned(),
                above,
            )
        };
        let words = [a.as_str(), b.as_str()];
        let flag = |w: &str| match w.to_ascii_lowercase().as_str() {
            "yes" | "y" | "on" | "true" | "enable" | "enabled" => Some(true),
            "no" | "n" | "off" | "false" | "disable" | "disabled" => Some(false),
            _ => None,
        };
        let boolean = matches!(
            (flag(words[0]), flag(words[1])),
            (Some(x), Some(y)) if x != y
        );
        p.options = words
            .iter()
            .map(|w| {
                let value = match flag(w) {
                    Some(true) if boolean => "yes".to_owned(),
                    Some(false) if boolean => "no".to_owned(),
                    _ => w.to_string(),
                };
                opt(&value, &sanitize_line(w), None)
            })
            .collect();
        p.default = Some(p.options[current].value.clone());
        p.kind = PromptKind::Toggle;
        p.rule = "generic:toggle".into();
        p.allows_text = false;
        let rows: Vec<String> = all.iter().map(|r| sanitize_line(r)).collect();
        (p.question, p.context) = split_question(&rows[..=title_row], &title, QUESTION_LINES);
        if title_row == at {
            p.question = title.clone();
        }
        p.prompt_line = title;
        p.select = Some(SelectMenu {
            items: words.iter().map(|w| sanitize_line(w)).collect(),
            highlighted: current,
            checkbox: false,
            title_row,
            first_row: at,
            horizontal: true,
        });
        return true;
    }
    false
}

/// Tools whose prompts have no generic shape, or whose answers are special.
fn builtin(tool: &str, p: &mut Prompt, canonical: bool) -> bool {
    static COREUTILS: LazyLock<Regex> = LazyLock::new(|| {
        Regex::new(r"^(rm|cp|mv|ln): (remove|overwrite|replace|descend into|unlink)\b.*\?\s*$")
            .unwrap()
    });
    let line = p.prompt_line.clone();
    if let Some(c) = COREUTILS.captures(&line) {
        // Anything but `y` is no: a confirm whose default is no.
        p.kind = PromptKind::Confirm;
        p.rule = format!("builtin:{}", &c[1]);
        p.options = vec![
            opt("yes", "Yes", Some(line_keys("y", canonical))),
            opt("no", "No", Some(line_keys("n", canonical))),
        ];
        p.default = Some("no".into());
        return true;
    }
    if line.trim_end().ends_with("Enter a value:")
        && (p.question.contains("Only 'yes' will be accepted") || tool == "terraform")
    {
        // A word typed in full: anything but `yes` cancels.
        p.kind = PromptKind::Word;
        p.rule = "builtin:terraform".into();
        p.options = vec![
            opt(
                "yes",
                "Yes (only 'yes' approves)",
                Some(line_keys("yes", canonical)),
            ),
            opt("no", "No", Some(line_keys("no", canonical))),
        ];
        p.default = None;
        return true;
    }
    if tool == "codex"
        && p.question
            .contains("Would you like to run the following command?")
    {
        p.kind = PromptKind::Select;
        p.rule = "builtin:codex".into();
        p.options = vec![
            opt("1", "Yes, proceed", Some("y".into())),
            opt(
                "2",
                "Yes, and don't ask again for these commands",
                Some("p".into()),
            ),
            opt(
                "3",
                "No, tell Codex what to do differently",
                Some("\x1b".into()),
            ),
        ];
        p.default = None;
        return true;
    }
    false
}

/// The usual non-interactive way out, by tool (from PROMPTS.md).
pub fn alternative_for(tool: &str) -> Option<&'static str> {
    Some(match tool {
        "apt" | "apt-get" => "pass -y and set DEBIAN_FRONTEND=noninteractive",
        "pip" | "pip3" => "pass -y (uninstall), --exists-action, or set PIP_NO_INPUT=1",
        "conda" | "mamba" => "pass -y",
        "npx" => "pass --yes",
        "npm" => "use npm init -y",
        "rm" => "drop -i (or pass -f)",
        "cp" | "mv" => "pass -f (overwrite) or -n (never overwrite)",
        "ssh" | "scp" | "sftp" => {
            "use a key with ssh-agent, -o BatchMode=yes, -o StrictHostKeyChecking=accept-new"
        }
        "ssh-keygen" => {
            "pass -N '' (no passphrase) or -N from a secret store, and remove an existing key file first"
        }
        "git" => "configure a credential helper or GIT_ASKPASS; GIT_TERMINAL_PROMPT=0 fails fast",
        "sudo" => "use sudo -n with a NOPASSWD rule",
        "docker" => "use docker login --password-stdin; pass -f to prune",
        "terraform" => "pass -auto-approve (apply/destroy) and -input=false",
        "gcloud" => "pass --quiet",
        "rustup-init" => "pass -y",
        "openssl" => "pass -subj '/C=…/CN=…' (and -passout/-passin for passphrases)",
        "aider" => "pass --yes-always",
        "claude" => "run with -p and --allowedTools or --permission-mode",
        "codex" => "use codex exec, or -a never; give the key with OPENAI_API_KEY",
        "gemini" => "run with -p and --approval-mode; give the key with GEMINI_API_KEY",
        "gpg" | "gpg2" => {
            "pass --batch --pinentry-mode loopback with --passphrase-file or --passphrase-fd, or use a key without a passphrase"
        }
        _ => return None,
    })
}

/// The alternative for a refused secret prompt: the tool's own, or the general advice.
pub fn secret_alternative(tool: &str) -> String {
    alternative_for(tool)
        .unwrap_or("give the secret through an environment variable, a file or the tool's non-interactive option")
        .to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::ConfigFile;
    use std::path::Path;

    fn screen(tool: &str, text: &str, echo: bool, canonical: bool) -> Prompt {
        let rows: Vec<String> = text.split('\n').map(str::to_owned).collect();
        let prompt_line = rows.last().cloned().unwrap_or_default();
        classify(
            &ScreenFacts {
                tool,
                rows: &rows,
                prompt_line: &prompt_line,
                echo,
                canonical,
                below: &[],
                cursor_hidden: false,
                emphasis: &[],
            },
            &[],
        )
    }

    fn line(tool: &str, text: &str) -> Prompt {
        screen(tool, text, true, true)
    }

    fn values(p: &Prompt) -> Vec<&str> {
        p.options.iter().map(|o| o.value.as_str()).collect()
    }

    #[test]
    fn yes_no_shapes_and_their_defaults() {
        for (text, vals, default) in [
            (
                "Do you want to continue? [Y/n] ",
                ["yes", "no"],
                Some("yes"),
            ),
            (
                "Are you sure you want to continue? [y/N] ",
                ["yes", "no"],
                Some("no"),
            ),
            ("Proceed (Y/n)? ", ["yes", "no"], Some("yes")),
            ("Overwrite (y/n)? ", ["yes", "no"], None),
            ("Proceed ([y]/n)? ", ["yes", "no"], Some("yes")),
            ("Ok to proceed? (y) ", ["yes", "no"], Some("yes")),
            ("Is this OK? (yes) ", ["yes", "no"], Some("yes")),
            (
                "Are you sure you want to continue connecting (yes/no/[fingerprint])? ",
                ["yes", "no"],
                None,
            ),
            ("Continue? [yes/no]: ", ["yes", "no"], None),
            ("Delete it? [Yes/no] ", ["yes", "no"], Some("yes")),
        ] {
            let p = line("x", text);
            assert_eq!(p.rule, "generic:yes-no", "{text}");
            assert_eq!(values(&p), vals, "{text}");
            assert_eq!(p.default.as_deref(), default, "{text}");
            assert!(!p.secret);
            // Typed as the tool spells it: `y` for `[y/N]`, `yes` for `(yes/no)`.
            let keys = String::from_utf8(p.keys_for("yes", true).unwrap()).unwrap();
            assert!(keys == "y\r" || keys == "yes\r", "{text}: {keys:?}");
        }
    }

    #[test]
    fn raw_mode_types_no_enter() {
        let p = screen("x", "Continue? [y/N] ", false, false);
        assert!(
            !p.secret,
            "raw mode with echo off is a key prompt, not a secret"
        );
        assert_eq!(p.keys_for("y", false), Some(b"y".to_vec()));
    }

    #[test]
    fn builtin_coreutils_and_terraform() {
        let p = line("rm", "rm: remove regular file 'a.txt'? ");
        assert_eq!(p.rule, "builtin:rm");
        assert_eq!(p.kind, PromptKind::Confirm);
        assert_eq!(p.default.as_deref(), Some("no"));
        assert_eq!(p.keys_for("yes", true), Some(b"y\r".to_vec()));
        let p = line("cp", "cp: overwrite 'b'? ");
        assert_eq!(p.rule, "builtin:cp");
        let p = line(
            "terraform",
            "Do you want to perform these actions?\n  Terraform will perform the actions described above.\n  Only 'yes' will be accepted to approve.\n\n  Enter a value: ",
        );
        assert_eq!(p.rule, "builtin:terraform");
        assert_eq!(values(&p), ["yes", "no"]);
        assert_eq!(p.prompt_line, "Enter a value:");
        assert_eq!(
            p.question,
            "Do you want to perform these actions?\nTerraform will perform the actions described above.\nOnly 'yes' will be accepted to approve.\nEnter a value:"
        );
        assert!(!p.context.contains("Only 'yes' will be accepted"), "{p:?}");
    }

    #[test]
    fn menus() {
        let p = line(
            "aider",
            "Add file to the chat? (Y)es/(N)o/(A)ll/(S)kip all/(D)on't ask again [Yes]: ",
        );
        assert_eq!(p.rule, "generic:letter-menu");
        assert_eq!(values(&p), ["y", "n", "a", "s", "d"]);
        assert_eq!(p.default.as_deref(), Some("y"));
        assert_eq!(p.options[3].label, "Skip all");
        let p = line("pip", "(i)gnore, (w)ipe, (b)ackup ");
        assert_eq!(values(&p), ["i", "w", "b"]);
        let p = line(
            "rustup-init",
            "Current installation options:\n\n1) Proceed with standard installation (default - just press enter)\n2) Customize installation\n3) Cancel installation\n>",
        );
        assert_eq!(p.rule, "generic:numbered-menu");
        assert_eq!(values(&p), ["1", "2", "3"]);
        assert_eq!(p.default.as_deref(), Some("1"));
        assert_eq!(p.keys_for("2", true), Some(b"2\r".to_vec()));
        // A full-screen raw-mode menu (Claude Code): chosen by moving its highlight.
        let p = screen(
            "claude",
            "Do you want to proceed?\n❯ 1. Yes\n  2. Yes, and don't ask again for ls commands\n  3. No, and tell Claude what to do differently (esc)\n",
            false,
            false,
        );
        assert_eq!(p.kind, PromptKind::Select);
        assert_eq!(values(&p), ["1", "2", "3"]);
        assert_eq!(p.default.as_deref(), Some("1"));
        assert_eq!(p.rule, "generic:select");
        assert_eq!(p.select_index("3"), Some(2));
        assert!(p.takes("3") && !p.takes("4"));
        let p = screen(
            "codex",
            "Would you like to run the following command?\n1. Yes, proceed (y)\n2. Yes, and don't ask again (p)\n3. No (esc)\n",
            false,
            false,
        );
        assert_eq!(p.rule, "builtin:codex");
        assert_eq!(p.keys_for("3", false), Some(b"\x1b".to_vec()));
    }

    #[test]
    fn secrets_are_recognised_and_never_get_keys() {
        let p = screen(
            "ssh-keygen",
            "Enter passphrase (empty for no passphrase): ",
            false,
            true,
        );
        assert!(p.secret);
        assert_eq!(p.rule, "secret:echo-off");
        assert!(p.options.is_empty());
        for text in [
            "[sudo] password for alice: ",
            "Password for 'https://bob@example.com': ",
            "Enter API token: ",
        ] {
            assert!(line("x", text).secret, "{text}");
        }
        assert!(!line("x", "Save the token to disk? [y/N] ").secret);
        assert!(!line("x", "Reset password? ").secret);
    }

    #[test]
    fn text_prompts() {
        let p = line("openssl", "Country Name (2 letter code) [AU]:");
        assert_eq!(p.kind, PromptKind::Text);
        assert_eq!(p.default.as_deref(), Some("AU"));
        assert!(p.allows_text);
        assert_eq!(p.keys_for("AU", true), Some(b"\r".to_vec()));
        assert_eq!(p.keys_for("NZ", true), Some(b"NZ\r".to_vec()));
        assert_eq!(p.keys_for("bad\nline", true), None);
        let p = line("openssl", "Email Address []:");
        assert_eq!(values(&p), ["empty"]);
        let p = line("git", "Username for 'https://example.com': ");
        assert_eq!(p.kind, PromptKind::Unknown);
        assert_eq!(values(&p), ["abort"]);
        assert!(p.allows_text);
        assert_eq!(p.keys_for("abort", true), None);
        assert_eq!(p.alternative.as_deref(), alternative_for("git"));
        let p = line("x", "Press Enter to continue...");
        assert_eq!(p.kind, PromptKind::Acknowledge);
        assert_eq!(p.keys_for("continue", true), Some(b"\r".to_vec()));
    }

    #[test]
    fn colour_and_cursor_moves_are_plain_text_by_now() {
        // The shim renders the screen first; escapes left in rows are still removed.
        let p = line("x", "\x1b[1;33mContinue?\x1b[0m [y/N] ");
        assert_eq!(p.prompt_line, "Continue? [y/N]");
        assert_eq!(p.rule, "generic:yes-no");
    }

    #[test]
    fn question_is_the_prompts_paragraph() {
        let p = line(
            "apt-get",
            "Reading package lists...\n\nThe following packages will be installed:\n  curl\nDo you want to continue? [Y/n] ",
        );
        assert_eq!(
            p.question,
            "The following packages will be installed:\ncurl\nDo you want to continue? [Y/n]"
        );
        assert!(p.context.starts_with("Reading package lists..."));
    }

    #[test]
    fn notices_above_a_question_go_to_the_context() {
        // apt 2.6 as captured through a pty: the notices sit right above the question.
        let screen_text = "Reading package lists... Done\nThe following NEW packages will be installed:\n  hr-demo-a hr-demo-b\n0 upgraded, 2 newly installed, 0 to remove and 0 not upgraded.\nAfter this operation, 61.4 kB of additional disk space will be used.\nN: Ignoring file 'a.list.old' in directory '/etc/apt/sources.list.d/' as it has an invalid filename extension\nN: Ignoring file 'b.sources.bak1' in directory '/etc/apt/sources.list.d/' as it has an invalid filename extension\nDo you want to continue? [Y/n] ";
        let p = line("apt-get", screen_text);
        assert_eq!(p.question, "Do you want to continue? [Y/n]");
        assert!(
            p.context
                .ends_with("as it has an invalid filename extension"),
            "{p:?}"
        );
        assert!(p.context.contains("N: Ignoring file 'a.list.old'"));
        assert!(p.context.starts_with("Reading package lists... Done"));
        assert!(!p.context.contains("Do you want"));
        // With a blank line between, the same.
        let p = line(
            "apt-get",
            &screen_text.replace("\nDo you want", "\n\nDo you want"),
        );
        assert_eq!(p.question, "Do you want to continue? [Y/n]");
        assert!(p.context.contains("N: Ignoring file 'b.sources.bak1'"));
        // A bare prompt's paragraph still reaches back to its question, but not past a
        // notice.
        let p = line(
            "x",
            "W: cache is stale\nDeploy to production?\n  This cannot be undone.\n\nEnter a value: ",
        );
        assert_eq!(
            p.question,
            "Deploy to production?\nThis cannot be undone.\nEnter a value:"
        );
        assert_eq!(p.context, "W: cache is stale");
        let p = line(
            "x",
            "[INFO] fetched 3 files\n2024-05-01 10:00:01 sync done\nContinue? [y/N] ",
        );
        assert_eq!(p.question, "Continue? [y/N]");
        // Text that explains the question stays with it.
        let p = line(
            "x",
            "Warning: this drops the database.\nNote: backups are kept.\nContinue? [y/N] ",
        );
        assert_eq!(
            p.question,
            "Warning: this drops the database.\nNote: backups are kept.\nContinue? [y/N]"
        );
        assert_eq!(p.context, "");
    }

    #[test]
    fn notices() {
        for yes in [
            "N: Ignoring file 'x' in directory '/etc/apt/sources.list.d/'",
            "W: Some index files failed to download.",
            "E: Unable to locate package foo",
            "warning: unused variable: `x`",
            "error[E0425]: cannot find value",
            "hint: Using 'master' as the name for the initial branch.",
            "[INFO] Building jar",
            "[warn] deprecated",
            "npm WARN deprecated inflight@1.0.6",
            "2024-05-01T10:00:01Z sync done",
            "2024-05-01 10:00:01,123 INFO started",
        ] {
            assert!(is_notice(yes), "{yes}");
        }
        for no in [
            "Do you want to continue? [Y/n]",
            "Warning: this cannot be undone.",
            "Note: the key will be overwritten.",
            "Need to get 1288 B of archives.",
            "N:",
            "Enter a value:",
        ] {
            assert!(!is_notice(no), "{no}");
        }
    }

    #[test]
    fn repl_prompts() {
        for yes in [
            ">>>",
            ">>> ",
            ">",
            "$ ",
            "#",
            "%",
            "sqlite>",
            "mysql>",
            "MariaDB [(none)]>",
            "postgres=#",
            "postgres=>",
            "bash-5.2$",
            "sh-5.2#",
            "root@build-7:/srv/app#",
            "alice@host:~/src$ ",
            "(venv) alice@host:~/src$",
            "irb(main):001:0>",
            "iex(1)>",
            "node>",
            "(gdb)",
            "(Pdb)",
            "In [3]:",
            "\x1b[1m>>> \x1b[0m",
        ] {
            assert!(is_repl_prompt(yes), "{yes:?}");
        }
        for no in [
            "",
            "Continue? [y/N]",
            "Enter a value:",
            "Name>",
            "Password:",
            "Which environment? >",
            "rm: remove regular file 'a'?",
            "Passphrase: ____",
            "Total: 5$",
            "Press Enter to continue",
            "lines.txt",
            ":",
            "(END)",
        ] {
            assert!(!is_repl_prompt(no), "{no:?}");
        }
    }

    #[test]
    fn menus_are_seen_in_any_lines() {
        assert!(shows_menu(&[
            "Deploy where?",
            "1. staging",
            "2. production"
        ]));
        assert!(shows_menu(&["❯ 1. Yes", "  2. No"]));
        assert!(!shows_menu(&["1. only one item"]));
        assert!(!shows_menu(&["Type \"help\" for more information."]));
    }

    #[test]
    fn user_rules_come_first() {
        let cfg = ConfigFile::parse(
            Path::new("/x.toml"),
            r#"
[[prompt_rules]]
name = "deploy"
tool = "deploy.sh"
regex = 'Deploy to (\w+)\?'
options = [{ value = "go", label = "Ship it", keys = "GO\r" }, { value = "stop" }]
default = "stop"

[[prompt_rules]]
name = "vault"
regex = 'Vault unseal key'
secret = true
alternative = "use VAULT_TOKEN"
"#,
        )
        .unwrap();
        let rows = vec!["Deploy to prod? [y/N] ".to_string()];
        let p = classify(
            &ScreenFacts {
                tool: "deploy.sh",
                rows: &rows,
                prompt_line: &rows[0],
                echo: true,
                canonical: true,
                below: &[],
                cursor_hidden: false,
                emphasis: &[],
            },
            &cfg.prompt_rules,
        );
        assert_eq!(p.rule, "user:deploy");
        assert_eq!(p.keys_for("go", true), Some(b"GO\r".to_vec()));
        assert_eq!(p.keys_for("stop", true), Some(b"stop\r".to_vec()));
        assert_eq!(p.default.as_deref(), Some("stop"));
        // Another tool: the rule does not apply, the generic shape does.
        let p = classify(
            &ScreenFacts {
                tool: "other",
                rows: &rows,
                prompt_line: &rows[0],
                echo: true,
                canonical: true,
                below: &[],
                cursor_hidden: false,
                emphasis: &[],
            },
            &cfg.prompt_rules,
        );
        assert_eq!(p.rule, "generic:yes-no");
        let rows = vec!["Vault unseal key (will be hidden): ".to_string()];
        let p = classify(
            &ScreenFacts {
                tool: "vault",
                rows: &rows,
                prompt_line: &rows[0],
                echo: true,
                canonical: true,
                below: &[],
                cursor_hidden: false,
                emphasis: &[],
            },
            &cfg.prompt_rules,
        );
        assert!(p.secret);
        assert_eq!(p.alternative.as_deref(), Some("use VAULT_TOKEN"));
    }

    #[test]
    fn an_unknown_question_offers_abort_and_text() {
        let p = line("x", "What is your quest? ");
        assert_eq!(p.kind, PromptKind::Unknown);
        assert_eq!(p.rule, "unknown");
        assert!(p.allows_text);
        assert_eq!(
            p.keys_for("to seek the grail", true),
            Some(b"to seek the grail\r".to_vec())
        );
    }

    /// Every prompt of PROMPTS.md: (tool, screen, echo, canonical) → secret, or the option
    /// values and default.
    #[test]
    fn every_prompt_in_prompts_md() {
        type Want<'a> = Option<(&'a [&'a str], Option<&'a str>)>;
        let cases: Vec<(&str, &str, bool, bool, Want<'_>)> = vec![
            (
                "apt-get",
                "Do you want to continue? [Y/n] ",
                true,
                true,
                Some((&["yes", "no"], Some("yes"))),
            ),
            (
                "pip",
                "Proceed (Y/n)? ",
                true,
                true,
                Some((&["yes", "no"], Some("yes"))),
            ),
            (
                "pip",
                "(i)gnore, (w)ipe, (b)ackup ",
                true,
                true,
                Some((&["i", "w", "b"], None)),
            ),
            (
                "conda",
                "Proceed ([y]/n)? ",
                true,
                true,
                Some((&["yes", "no"], Some("yes"))),
            ),
            (
                "npx",
                "Need to install the following packages:\n  cowsay@1.6.0\nOk to proceed? (y) ",
                true,
                true,
                Some((&["yes", "no"], Some("yes"))),
            ),
            (
                "npm",
                "Is this OK? (yes) ",
                true,
                true,
                Some((&["yes", "no"], Some("yes"))),
            ),
            (
                "rm",
                "rm: remove regular empty file 'x'? ",
                true,
                true,
                Some((&["yes", "no"], Some("no"))),
            ),
            (
                "rm",
                "rm: remove write-protected regular file 'x'? ",
                true,
                true,
                Some((&["yes", "no"], Some("no"))),
            ),
            (
                "cp",
                "cp: overwrite 'b'? ",
                true,
                true,
                Some((&["yes", "no"], Some("no"))),
            ),
            (
                "mv",
                "mv: overwrite 'b'? ",
                true,
                true,
                Some((&["yes", "no"], Some("no"))),
            ),
            (
                "ssh",
                "Are you sure you want to continue connecting (yes/no/[fingerprint])? ",
                true,
                true,
                Some((&["yes", "no"], None)),
            ),
            ("ssh", "alice@example.com's password: ", false, true, None),
            (
                "ssh",
                "Enter passphrase for key '/home/a/.ssh/id_ed25519': ",
                false,
                true,
                None,
            ),
            (
                "ssh-keygen",
                "/tmp/k already exists.\nOverwrite (y/n)? ",
                true,
                true,
                Some((&["yes", "no"], None)),
            ),
            (
                "ssh-keygen",
                "Enter passphrase (empty for no passphrase): ",
                false,
                true,
                None,
            ),
            (
                "git",
                "Username for 'https://example.com': ",
                true,
                true,
                Some((&["abort"], None)),
            ),
            (
                "git",
                "Password for 'https://alice@example.com': ",
                false,
                true,
                None,
            ),
            ("sudo", "[sudo] password for alice: ", false, true, None),
            ("sudo", "[sudo: authenticate] Password: ", false, true, None),
            ("docker", "Username: ", true, true, Some((&["abort"], None))),
            ("docker", "Password: ", false, true, None),
            (
                "docker",
                "Are you sure you want to continue? [y/N] ",
                true,
                true,
                Some((&["yes", "no"], Some("no"))),
            ),
            (
                "terraform",
                "Do you want to perform these actions?\n  Terraform will perform the actions described above.\n  Only 'yes' will be accepted to approve.\n\n  \x1b[1mEnter a value:\x1b[0m ",
                true,
                true,
                Some((&["yes", "no"], None)),
            ),
            (
                "gcloud",
                "Do you want to continue (Y/n)? ",
                true,
                true,
                Some((&["yes", "no"], Some("yes"))),
            ),
            (
                "rustup-init",
                "1) Proceed with standard installation (default - just press enter)\n2) Customize installation\n3) Cancel installation\n>",
                true,
                true,
                Some((&["1", "2", "3"], Some("1"))),
            ),
            (
                "openssl",
                "Country Name (2 letter code) [AU]:",
                true,
                true,
                Some((&["AU"], Some("AU"))),
            ),
            (
                "openssl",
                "State or Province Name (full name) [Some-State]:",
                true,
                true,
                Some((&["Some-State"], Some("Some-State"))),
            ),
            (
                "aider",
                "Create new file? (Y)es/(N)o [Yes]: ",
                true,
                true,
                Some((&["yes", "no"], Some("yes"))),
            ),
            (
                "aider",
                "Run shell command? (Y)es/(N)o/(D)on't ask again [Yes]: ",
                true,
                true,
                Some((&["y", "n", "d"], Some("y"))),
            ),
            (
                "claude",
                "Do you want to proceed?\n\u{276f} 1. Yes\n  2. Yes, and don't ask again for this command\n  3. No, and tell Claude what to do differently (esc)",
                false,
                false,
                Some((&["1", "2", "3"], Some("1"))),
            ),
            (
                "codex",
                "Would you like to run the following command?\n1. Yes, proceed (y)\n2. Yes, and don't ask again for commands that start with git (p)\n3. No, and tell Codex what to do differently (esc)",
                false,
                false,
                Some((&["1", "2", "3"], None)),
            ),
            (
                "x",
                "Press Enter to continue",
                true,
                true,
                Some((&["continue"], Some("continue"))),
            ),
            (
                "x",
                "Press any key to continue . . .",
                true,
                false,
                Some((&["continue"], Some("continue"))),
            ),
        ];
        for (tool, text, echo, canonical, want) in cases {
            let p = screen(tool, text, echo, canonical);
            match want {
                None => assert!(p.secret, "{tool}: {text:?} should be a secret: {p:?}"),
                Some((vals, default)) => {
                    assert!(!p.secret, "{tool}: {text:?}");
                    assert_eq!(values(&p), vals, "{tool}: {text:?} → {}", p.rule);
                    assert_eq!(p.default.as_deref(), default, "{tool}: {text:?}");
                    for o in &p.options {
                        if o.value != "abort" {
                            assert!(p.takes(&o.value), "{tool}: {} cannot be typed", o.value);
                        }
                    }
                }
            }
        }
    }

    fn rows(text: &str) -> Vec<String> {
        text.split('\n').map(str::to_owned).collect()
    }

    /// Classifies a raw-mode screen whose cursor is on row `cursor`.
    fn raw_screen(text: &str, cursor: usize) -> Prompt {
        let all = rows(text);
        let (above, below) = all.split_at(cursor + 1);
        classify(
            &ScreenFacts {
                tool: "tool",
                rows: above,
                prompt_line: &above[cursor],
                echo: false,
                canonical: false,
                below,
                cursor_hidden: false,
                emphasis: &[],
            },
            &[],
        )
    }

    /// Classifies a full-screen program's screen: the cursor hidden, left on row `cursor`.
    fn hidden_cursor_screen(text: &str, cursor: usize) -> Prompt {
        let all = rows(text);
        let (above, below) = all.split_at(cursor + 1);
        classify(
            &ScreenFacts {
                tool: "agent",
                rows: above,
                prompt_line: &above[cursor],
                echo: false,
                canonical: false,
                below,
                cursor_hidden: true,
                emphasis: &[],
            },
            &[],
        )
    }

    #[test]
    fn coding_agent_menus_are_read_anywhere_on_a_hidden_cursor_screen() {
        // Codex CLI: a logo above (the cursor left on its last row), numbered items with
        // descriptions and blank lines between them.
        let codex = "   \u{2880}\u{28e4}\u{28f6}\u{28ff}\u{28ff}\n    \u{2809}\u{281b}\u{283b}\n\n  Welcome to Codex, OpenAI's command-line coding agent\n\n  Choose how you want to use Codex.\n\n> 1. Sign in with ChatGPT\n     Usage included with Plus\n\n  2. Sign in with Device Code\n     Sign in from another device\n\n  3. Sign in another way\n     Use an API key\n\n  Press enter to continue";
        let p = hidden_cursor_screen(codex, 1);
        assert_eq!(p.rule, "generic:select");
        assert_eq!(p.prompt_line, "Choose how you want to use Codex.");
        assert_eq!(values(&p), ["1", "2", "3"]);
        assert_eq!(p.default.as_deref(), Some("1"));
        assert_eq!(p.options[1].label, "2. Sign in with Device Code");
        // The same rows with the cursor shown far above: not near the cursor, no menu.
        assert_ne!(raw_screen(codex, 1).rule, "generic:select");
        // Caught mid-redraw, a pointer glyph left alone on the row above the items: the
        // title is still the question above it (seen in CI, the title read as `›`).
        let redraw = "  Sign in another way\n\n  \u{203a}\n\n> 1. Provide your own API key\n     Pay for what you use\n\n  2. Go back\n";
        let p = hidden_cursor_screen(redraw, 0);
        assert_eq!(p.rule, "generic:select");
        assert_eq!(p.prompt_line, "Sign in another way");
        assert_eq!(values(&p), ["1", "2"]);
        // Claude Code: the item in effect carries a check mark, on or off the highlight;
        // the question is the paragraph's heading, not the hint under it.
        let claude = " Let's get started.\n\n Choose the text style that looks best with your terminal\n To change this later, run /theme\n\n {0} \u{2714} Auto (match terminal)\n {1}   Dark mode\n     Light mode\n\n \u{254c}\u{254c}\u{254c}\n  1  function greet() {{";
        for (auto, dark, highlighted) in [
            ("\u{276f}", " ", "Auto (match terminal)"),
            (" ", "\u{276f}", "Dark mode"),
        ] {
            let text = claude
                .replace("{0}", auto)
                .replace("{1}", dark)
                .replace("{{", "{");
            let p = hidden_cursor_screen(&text, 0);
            assert_eq!(
                p.prompt_line,
                "Choose the text style that looks best with your terminal"
            );
            assert_eq!(
                values(&p),
                ["Auto (match terminal)", "Dark mode", "Light mode"]
            );
            assert_eq!(p.default.as_deref(), Some(highlighted));
        }
        // Gemini CLI: a box, a radio dot on the highlighted numbered item, the question
        // above a paragraph that explains it.
        let gemini = " \u{256d}\u{2500}\u{2500}\u{256e}\n \u{2502} Do you trust the files in this folder?   \u{2502}\n \u{2502}                                          \u{2502}\n \u{2502} Trusting a folder allows Gemini CLI to    \u{2502}\n \u{2502} load its local configurations.            \u{2502}\n \u{2502}                                          \u{2502}\n \u{2502} \u{25cf} 1. Trust folder (work)                  \u{2502}\n \u{2502}   2. Trust parent folder (home)          \u{2502}\n \u{2502}   3. Don't trust                         \u{2502}\n \u{2570}\u{2500}\u{2500}\u{256f}";
        let p = hidden_cursor_screen(gemini, 9);
        assert_eq!(p.rule, "generic:select");
        assert_eq!(p.prompt_line, "Do you trust the files in this folder?");
        assert_eq!(values(&p), ["1", "2", "3"]);
        assert!(
            p.question.contains("Trusting a folder allows"),
            "{}",
            p.question
        );
        // A ticked box is no pointer where items are not numbered.
        assert!(select_menu(&rows("Pick:\n  \u{25cf} red\n  \u{25cb} green"), None).is_none());
    }

    #[test]
    fn a_key_box_on_a_hidden_cursor_screen_is_a_secret_even_under_an_answered_menu() {
        let screen = " \u{2502} \u{25cf} 1. Trust folder (work)   \u{2502}\n \u{2502}   2. Don't trust            \u{2502}\n\n \u{2502} Enter Gemini API Key       \u{2502}\n \u{2502} \u{256d}\u{2500}\u{256e} \u{2502}\n \u{2502} \u{2502} Paste your API key here \u{2502} \u{2502}\n \u{2502} (Press Enter to submit, Esc to cancel) \u{2502}";
        let p = hidden_cursor_screen(screen, 0);
        assert!(p.secret, "{p:?}");
        assert_eq!(p.prompt_line, "Enter Gemini API Key");
        // A menu item that names a key asks for no key.
        let auth = " How would you like to authenticate?\n \u{25cf} 1. Sign in with Google\n   2. Use Gemini API Key";
        let p = hidden_cursor_screen(auth, 0);
        assert!(!p.secret);
        assert_eq!(p.rule, "generic:select");
    }

    #[test]
    fn hidden_cursor_menus_keep_the_rules_of_shown_ones() {
        // gh auth login hides its cursor: an item naming a token asks for no token.
        let gh = "? How would you like to authenticate GitHub CLI?\n> Login with a web browser\n  Paste an authentication token";
        let p = hidden_cursor_screen(gh, 0);
        assert!(!p.secret, "{p:?}");
        assert_eq!(p.rule, "generic:select");
        assert_eq!(
            p.prompt_line,
            "? How would you like to authenticate GitHub CLI?"
        );
        // A question under a `>` list is what is asked, hidden cursor or not.
        let below = "Changes:\n> file a\n  file b\nContinue? [Y/n] ";
        assert_eq!(hidden_cursor_screen(below, 3).rule, "generic:yes-no");
        // Numbered items far apart, or not in sequence, are not one menu.
        let apart = "Do you want to proceed?\n\u{276f} 1. Yes\n  2. No\n\n\n\n  3. rm -rf /tmp/x";
        assert_eq!(values(&hidden_cursor_screen(apart, 0)), ["1", "2"]);
        let restarted = "Pick one:\n\u{276f} 1. Yes\n  2. No\n  1. Other";
        assert_eq!(values(&hidden_cursor_screen(restarted, 0)), ["1", "2"]);
        // With the cursor shown, the title is the row right above the items, not an
        // answered question further up.
        let answered = "? Use TypeScript? Yes\nSelect a region\n> us-east\n  eu-west";
        assert_eq!(raw_screen(answered, 2).prompt_line, "Select a region");
        // A sentence that mentions a key is no key field.
        let sentence = "Welcome back.\n  Enter your API key in the settings page.\n > ";
        assert!(!hidden_cursor_screen(sentence, 2).secret);
    }

    #[test]
    fn a_numbered_menu_whose_prompt_mentions_enter_is_still_a_menu() {
        let mirrors = "Pick a mirror:\n1) us\n2) eu\nChoice (press Enter for 1): ";
        let p = line("tool", mirrors);
        assert_eq!(p.rule, "generic:numbered-menu", "{p:?}");
        assert_eq!(values(&p), ["1", "2"]);
    }

    #[test]
    fn press_enter_under_a_numbered_list_asks_for_enter() {
        let notes = "Security notes:\n\n 1. Claude can make mistakes\n 2. Due to prompt injection risks, only use it with code you trust\n\n Press Enter to continue";
        let p = raw_screen(notes, 5);
        assert_eq!(p.rule, "generic:press-enter");
        assert_eq!(values(&p), ["continue"]);
    }

    #[test]
    fn select_menus_of_the_common_libraries_are_read_with_their_highlight() {
        // @inquirer/prompts: cursor on the key hint below the items.
        let inquirer = "? Pick a color\n  red\n\u{276f} green\n  blue\n\n\u{2191}\u{2193} navigate \u{2022} \u{23ce} select";
        // questionary: cursor on the title.
        let questionary = "? Pick a color (Use arrow keys)\n   red\n \u{bb} green\n   blue";
        // InquirerPy: cursor on the highlighted item.
        let inquirerpy = "? Pick one:\n  red\n\u{276f} green\n  blue";
        for (text, cursor, title) in [
            (inquirer, 5, "? Pick a color"),
            (questionary, 0, "? Pick a color (Use arrow keys)"),
            (inquirerpy, 2, "? Pick one:"),
        ] {
            let p = raw_screen(text, cursor);
            assert_eq!(p.rule, "generic:select", "{text}");
            assert_eq!(p.prompt_line, title);
            assert_eq!(p.question, title);
            assert_eq!(values(&p), ["red", "green", "blue"]);
            assert_eq!(p.default.as_deref(), Some("green"));
            assert!(!p.allows_text);
            assert!(p.takes("blue") && !p.takes("purple") && p.keys_for("blue", false).is_none());
            assert_eq!(p.select.as_ref().unwrap().highlighted, 1);
        }
        // A coding agent's numbered arrow menu, earlier output above it as context.
        let agent = "Edited src/main.rs\n\nDo you want to make this edit?\n\u{276f} 1. Yes\n  2. Yes, and don't ask again this session\n  3. No, and tell Claude what to do differently (esc)";
        let p = raw_screen(agent, 3);
        assert_eq!(p.rule, "generic:select");
        assert_eq!(p.question, "Do you want to make this edit?");
        assert_eq!(p.context, "Edited src/main.rs");
        assert_eq!(values(&p), ["1", "2", "3"]);
        assert_eq!(p.default.as_deref(), Some("1"));
        assert_eq!(
            p.options[1].label,
            "2. Yes, and don't ask again this session"
        );
        assert_eq!(p.select_index("3"), Some(2));
    }

    /// A raw-mode screen with its cursor hidden, each row drawn as `emphasis` says.
    fn framed(rows: &[&str], emphasis: &[Vec<i8>]) -> Prompt {
        let rows: Vec<String> = rows.iter().map(|r| r.to_string()).collect();
        classify(
            &ScreenFacts {
                tool: "node",
                rows: &rows,
                prompt_line: "",
                echo: false,
                canonical: false,
                below: &[],
                cursor_hidden: true,
                emphasis,
            },
            &[],
        )
    }

    #[test]
    fn a_toggle_is_its_two_words_the_current_one_its_default() {
        // @clack/prompts' confirm: radio dots mark the current word.
        let p = framed(
            &["┌  deploy", "│", "◆  Deploy now?", "│  ● Yes / ○ No", "└"],
            &[],
        );
        assert_eq!(p.kind, PromptKind::Toggle);
        assert_eq!(p.rule, "generic:toggle");
        assert_eq!(p.prompt_line, "Deploy now?");
        assert_eq!(values(&p), ["yes", "no"]);
        assert_eq!(p.default.as_deref(), Some("yes"));
        let menu = p.select.as_ref().unwrap();
        assert!(menu.horizontal);
        assert_eq!(p.select_index("no"), Some(1));
        // prompts' toggle: only how the words are drawn says which is current.
        let row = "? Enable cache? › off / on";
        let mut e = vec![0i8; row.chars().count()];
        let n = e.len();
        e[n - 2] = 3;
        e[n - 1] = 3;
        e[n - 8..n - 5].fill(-1);
        let p = framed(&[row], &[e]);
        assert_eq!(p.kind, PromptKind::Toggle);
        assert_eq!(p.prompt_line, "? Enable cache?");
        assert_eq!(values(&p), ["no", "yes"]);
        assert_eq!(p.options[0].label, "off");
        assert_eq!(p.default.as_deref(), Some("yes"));
        // The same words with nothing to tell which is current: no toggle, no guess.
        let p = framed(&[row], &[vec![0i8; row.chars().count()]]);
        assert_ne!(p.kind, PromptKind::Toggle);
        let p = framed(&[row], &[]);
        assert_ne!(p.kind, PromptKind::Toggle);
    }

    #[test]
    fn a_widgets_key_help_under_its_field_is_neither_field_nor_question() {
        for help in [
            "(enter to confirm)",
            "(space to tick one, ctrl+a to tick/untick all, enter to confirm)",
            "[↑↓ to move, enter to select]",
            "(Use arrow keys)",
        ] {
            assert!(is_key_help(help), "{help}");
        }
        for not in [
            "(y/N)",
            "[Y/n]",
            "Press enter to continue",
            "(default: enter)",
            "Use arrow keys to pick one of the options below, then enter to confirm",
        ] {
            assert!(!is_key_help(not), "{not}");
        }
        // beaupy's pre-filled field: `> demo` over its help; its masked field is a secret.
        let p = framed(&["Project name", "> demo", "", "(enter to confirm)"], &[]);
        assert_eq!(p.prompt_line, "> demo");
        assert!(p.allows_text && !p.secret, "{p:?}");
        for field in [">", "> ***"] {
            let p = framed(&["API token", field, "", "(enter to confirm)"], &[]);
            assert!(p.secret, "{field}: {p:?}");
        }
        // A field with a value is no secret's label, nor is a label that is not one.
        let p = framed(&["Project name", ">", "", "(enter to confirm)"], &[]);
        assert!(!p.secret, "{p:?}");
    }

    #[test]
    fn a_question_in_boxes_is_read_without_their_edges_and_sides() {
        // Gemini CLI's permission dialog: the command in a box inside the dialog's box.
        let rows = [
            "> Run the proof command",
            "",
            "╭──────────────────────────────────────╮",
            "│ ? Shell  echo ran > proof.txt        │",
            "│ ╭──────────────────────────────────╮ │",
            "│ │ echo ran > proof.txt             │ │",
            "│ ╰──────────────────────────────────╯ │",
            "│ Allow execution of [Shell]?          │",
            "│                                      │",
            "│ ● 1. Allow once                      │",
            "│   2. Allow for this session          │",
            "│   3. No, suggest changes (esc)       │",
            "╰──────────────────────────────────────╯",
        ];
        let p = framed(&rows, &[]);
        assert_eq!(p.prompt_line, "Allow execution of [Shell]?", "{p:?}");
        assert_eq!(
            p.question,
            "? Shell  echo ran > proof.txt\necho ran > proof.txt\nAllow execution of [Shell]?"
        );
        assert_eq!(p.context, "> Run the proof command");
        assert_eq!(values(&p), ["1", "2", "3"]);
        assert!(is_box_edge("│ ╰───╯ │") && !is_box_edge("│ a ─── b │") && !is_box_edge("────"));
    }

    #[test]
    fn a_row_of_buttons_is_a_menu_moved_sideways_its_current_button_drawn_apart() {
        // opencode: the panel painted one colour, the current button another.
        let rows: Vec<String> = [
            "  ┃  △ Permission required",
            "  ┃    # Shell command",
            "  ┃",
            "  ┃  $ echo ran > proof.txt",
            "  ┃",
            "  ┃   Allow once   Allow always   Reject        ctrl+f fullscreen  ⇆ select  enter confirm",
        ]
        .map(String::from)
        .to_vec();
        let buttons = rows[5].clone();
        let at = |word: &str| {
            buttons
                .find(word)
                .map(|b| buttons[..b].chars().count())
                .unwrap()
        };
        let mut e: Vec<Vec<i8>> = rows.iter().map(|r| vec![-1; r.chars().count()]).collect();
        let start = at("Allow always");
        e[5][start..start + "Allow always".len()].fill(4);
        let menu = button_row(&rows, &e).expect("a row of buttons");
        assert_eq!(menu.items, ["Allow once", "Allow always", "Reject"]);
        assert_eq!(menu.highlighted, 1);
        assert!(menu.horizontal);
        let p = framed(&rows.iter().map(String::as_str).collect::<Vec<_>>(), &e);
        assert_eq!(p.rule, "generic:buttons");
        assert_eq!(p.prompt_line, "Permission required");
        assert!(p.question.contains("$ echo ran > proof.txt"), "{p:?}");
        assert_eq!(values(&p), ["1", "2", "3"]);
        assert_eq!(p.default.as_deref(), Some("2"));
        // Buttons drawn alike (none current), or words that are no buttons: no menu.
        let flat: Vec<Vec<i8>> = rows.iter().map(|r| vec![-1; r.chars().count()]).collect();
        assert!(button_row(&rows, &flat).is_none());
        // htop's function-key bar, one key drawn apart: no buttons.
        let bar = vec!["F1Help  F2Setup  F3Search  F4Filter  F10Quit".to_string()];
        let mut be = vec![vec![0i8; bar[0].chars().count()]];
        be[0][17..25].fill(4);
        assert!(button_row(&bar, &be).is_none());
        let prose = vec!["Build finished in 2s   All good".to_string()];
        assert!(button_row(&prose, &[vec![0; prose[0].chars().count()]]).is_none());
    }

    #[test]
    fn check_boxes_drawn_in_brackets_are_a_check_box_list() {
        // beaupy: `[ ]` / `[✓]`, the current item's label in colour.
        let rows = [
            "Pick toppings",
            "[ ] cheese",
            "[✓] ham",
            "[ ] olives",
            "",
            "(space to tick one, enter to confirm)",
        ];
        let mut e: Vec<Vec<i8>> = rows.iter().map(|r| vec![0; r.chars().count()]).collect();
        e[2][4..].fill(2);
        let p = framed(&rows, &e);
        assert_eq!(p.kind, PromptKind::MultiSelect, "{p:?}");
        assert_eq!(p.prompt_line, "Pick toppings");
        let menu = p.select.as_ref().unwrap();
        assert_eq!(menu.names(), ["cheese", "ham", "olives"]);
        assert_eq!(menu.checked(), [false, true, false]);
        assert_eq!(menu.highlighted, 1);
        // With nothing to tell the current item, no menu is guessed.
        let flat: Vec<Vec<i8>> = rows.iter().map(|r| vec![0; r.chars().count()]).collect();
        assert_ne!(framed(&rows, &flat).kind, PromptKind::MultiSelect);
    }

    #[test]
    fn lists_marked_by_a_radio_dot_or_by_emphasis_are_menus() {
        // @clack/prompts' select: the filled dot is the current item.
        let p = framed(
            &[
                "│",
                "◆  Pick a color",
                "│  ○ red",
                "│  ● green",
                "│  ○ blue",
                "│  ↑/↓ to navigate • Enter: confirm",
                "└",
            ],
            &[],
        );
        assert_eq!(p.kind, PromptKind::Select, "{p:?}");
        assert_eq!(p.prompt_line, "Pick a color");
        assert_eq!(values(&p), ["red", "green", "blue"]);
        assert_eq!(p.default.as_deref(), Some("green"));
        // Its multiselect: boxes; the current item only drawn brighter than the others.
        let rows = [
            "│",
            "◆  Pick toppings",
            "│  ◻ cheese",
            "│  ◼ ham",
            "│  ◻ olives",
            "└",
        ];
        let mut e: Vec<Vec<i8>> = rows.iter().map(|r| vec![0; r.chars().count()]).collect();
        for k in [3, 4] {
            let n = e[k].len();
            e[k][5..n].fill(-1);
        }
        let p = framed(&rows, &e);
        assert_eq!(p.kind, PromptKind::MultiSelect, "{p:?}");
        assert_eq!(values(&p), ["cheese", "ham", "olives"]);
        assert_eq!(p.default.as_deref(), Some("ham"));
        assert_eq!(p.select.as_ref().unwrap().highlighted, 0);
        // Nothing tells which is current: no menu.
        let p = framed(&rows, &[]);
        assert_ne!(p.kind, PromptKind::MultiSelect);
        // dialoguer's: `⬚` and `✔`, the current item in colour.
        let rows = ["? Pick toppings ›", "⬚ cheese", "✔ ham", "⬚ olives"];
        let mut e: Vec<Vec<i8>> = rows.iter().map(|r| vec![0; r.chars().count()]).collect();
        let n = e[1].len();
        e[1][2..n].fill(1);
        let p = framed(&rows, &e);
        assert_eq!(p.kind, PromptKind::MultiSelect, "{p:?}");
        assert_eq!(p.default.as_deref(), Some("ham"));
        assert_eq!(p.prompt_line, "? Pick toppings ›");
        // enquirer's: one `✔` for every box, green when checked, dim when not; the
        // current item's name underlined.
        let rows = ["? Pick toppings …", "✔ cheese", "✔ ham", "✔ olives"];
        let mut e: Vec<Vec<i8>> = rows.iter().map(|r| vec![0; r.chars().count()]).collect();
        e[1][0] = -1;
        e[2][0] = 1;
        e[3][0] = -1;
        e[1][2..].fill(3);
        let p = framed(&rows, &e);
        assert_eq!(p.kind, PromptKind::MultiSelect, "{p:?}");
        assert_eq!(p.default.as_deref(), Some("ham"));
        assert_eq!(p.select.as_ref().unwrap().highlighted, 0);
        // Every box dim: none checked.
        e[2][0] = -1;
        assert_eq!(framed(&rows, &e).default.as_deref(), Some("none"));
    }

    #[test]
    fn a_value_drawn_apart_from_its_question_is_pre_filled() {
        let row = "? Project name demo";
        let n = row.chars().count();
        let mut e = vec![1i8; n];
        e[2..14].fill(2); // the question in bold
        e[14] = 0;
        e[15..].fill(0); // the value plain
        let rows = vec![row.to_owned()];
        let facts = |e: Vec<i8>| {
            let emphasis = vec![e];
            classify(
                &ScreenFacts {
                    tool: "node",
                    rows: &rows,
                    prompt_line: row,
                    echo: false,
                    canonical: false,
                    below: &[],
                    cursor_hidden: false,
                    emphasis: &emphasis,
                },
                &[],
            )
        };
        let p = facts(e.clone());
        assert_eq!(p.rule, "generic:text-prefilled");
        assert_eq!(p.default.as_deref(), Some("demo"));
        // Drawn dim, it is a placeholder: no value.
        let mut dim = e.clone();
        dim[15..].fill(-1);
        assert_ne!(facts(dim).rule, "generic:text-prefilled");
        // Drawn like the question: nothing tells the value apart.
        assert_ne!(facts(vec![0; n]).rule, "generic:text-prefilled");
    }

    #[test]
    fn a_dialog_boxs_password_field_is_a_secret() {
        let p = screen(
            "whiptail",
            "┌──────────────┐\n│ API token    │\n│ ____________ │\n│ <Ok>         │",
            false,
            false,
        );
        assert!(p.secret, "{p:?}");
    }

    #[test]
    fn library_fields_in_raw_mode() {
        // tty-prompt's masked field: a secret by its words.
        assert!(screen("ruby", "API token •••", false, false).secret);
        assert!(!screen("ruby", "Delete the API token? (y/N)", false, false).secret);
        // dialoguer's default before its mark.
        let p = screen("x", "? Project name (demo) ›", false, false);
        assert_eq!(p.default.as_deref(), Some("demo"));
        // promptui's drawn cursor is no part of the line.
        let p = screen("x", "? Deploy now? [y/N] █", false, false);
        assert_eq!(p.prompt_line, "? Deploy now? [y/N]");
    }

    #[test]
    fn enquirers_confirm_shows_its_value_after_the_choice() {
        let rows = vec!["? Deploy now? (y/N) ‣ false".to_owned()];
        let p = classify(
            &ScreenFacts {
                tool: "node",
                rows: &rows,
                prompt_line: "? Deploy now?",
                echo: false,
                canonical: false,
                below: &[],
                cursor_hidden: true,
                emphasis: &[],
            },
            &[],
        );
        assert_eq!(p.kind, PromptKind::Confirm, "{p:?}");
        assert_eq!(p.default.as_deref(), Some("no"));
    }

    #[test]
    fn a_menu_numbered_from_zero_takes_its_default_from_the_question() {
        // cleo's choice.
        let p = line(
            "python",
            "Pick a color [green]:\n  [ 0] red\n  [ 1] green\n  [ 2] blue\n > ",
        );
        assert_eq!(p.rule, "generic:numbered-menu");
        assert_eq!(values(&p), ["0", "1", "2"]);
        assert_eq!(p.options[2].label, "blue");
        assert_eq!(p.default.as_deref(), Some("1"));
        assert_eq!(p.keys_for("2", true), Some(b"2\r".to_vec()));
    }

    #[test]
    fn a_prefilled_raw_field_offers_its_value_as_it_stands() {
        let p = screen("bash", "Project name: demo", true, false);
        assert_eq!(p.kind, PromptKind::Text);
        assert_eq!(p.rule, "generic:text-prefilled");
        assert_eq!(values(&p), ["demo"]);
        assert_eq!(p.default.as_deref(), Some("demo"));
        assert_eq!(p.keys_for("demo", false), Some(b"\r".to_vec()));
        assert!(p.allows_text);
        let p = screen("node", "? Project name › demo", true, false);
        assert_eq!(p.default.as_deref(), Some("demo"));
        // In line mode nothing is pre-filled: the text was printed, not put in the field.
        let p = screen("bash", "Project name: demo", true, true);
        assert_ne!(p.rule, "generic:text-prefilled");
        // An empty field, a bracketed default, a shell prompt: no value.
        for line in ["Project name: ", "? Project name (demo)", "user@host:~$ ls"] {
            let p = screen("x", line, true, false);
            assert_ne!(p.rule, "generic:text-prefilled", "{line}");
        }
    }

    #[test]
    fn a_checkbox_menu_is_decided_as_the_set_to_submit() {
        let p = raw_screen(
            "? Pick some\n\u{276f}\u{25c9} red\n \u{25ef} green\n \u{25c9} blue\n\n\u{2191}\u{2193} navigate",
            5,
        );
        assert_eq!(p.rule, "generic:checkbox");
        assert_eq!(p.kind, PromptKind::MultiSelect);
        assert_eq!(values(&p), ["red", "green", "blue"]);
        assert_eq!(
            p.default.as_deref(),
            Some("red,blue"),
            "the set shown checked"
        );
        assert_eq!(p.check_set("green"), Some(vec![false, true, false]));
        assert_eq!(p.check_set("Blue, red"), Some(vec![true, false, true]));
        assert_eq!(p.check_set("none"), Some(vec![false, false, false]));
        assert_eq!(p.check_set("purple"), None);
        assert!(p.takes("red,green") && !p.takes("red,purple"));
        assert_eq!(p.keys_for("red", false), None, "steered, never typed");
    }

    #[test]
    fn quoted_or_far_away_pointer_lines_and_line_mode_are_no_select_menu() {
        // Line mode: a `>` list is text, not an arrow menu.
        let rs = rows("Changes:\n> added x\n  fixed y\nContinue? [y/N] ");
        let p = classify(
            &ScreenFacts {
                tool: "tool",
                rows: &rs,
                prompt_line: &rs[3],
                echo: true,
                canonical: true,
                below: &[],
                cursor_hidden: false,
                emphasis: &[],
            },
            &[],
        );
        assert_eq!(p.rule, "generic:yes-no");
        // Raw mode, but the pointer lines are far above the cursor's question.
        let far = "Notes:\n> one\n  two\nbuilding\nlinking\ntesting\npackaging\nContinue? [y/N] ";
        assert_eq!(raw_screen(far, 7).rule, "generic:yes-no");
        // Items that repeat cannot be chosen by their text.
        assert!(select_menu(&rows("Pick:\n\u{276f} same\n  same"), Some(0)).is_none());
        // One pointer line alone is no menu.
        assert!(select_menu(&rows("Pick:\n\u{276f} only"), Some(0)).is_none());
    }

    #[test]
    fn defaults_and_choices_in_common_shapes() {
        // npm init and @inquirer input: `(default)` at the end; Enter takes it.
        for (text, default) in [
            ("package name: (probe) ", "probe"),
            ("? Project name (demo)", "demo"),
        ] {
            let p = line("npm", text);
            assert_eq!(p.rule, "generic:text-default", "{text}");
            assert_eq!(p.default.as_deref(), Some(default));
            assert_eq!(p.keys_for(default, true), Some(b"\r".to_vec()));
            assert!(p.allows_text);
        }
        // Remarks and ranges in parentheses are no default.
        for text in ["Comment (optional): ", "Pick one (1-3): "] {
            assert_ne!(line("t", text).rule, "generic:text-default", "{text}");
        }
        // openssl / adduser: `[]` is an empty default.
        let p = line("openssl", "Organizational Unit Name (eg, section) []:");
        assert_eq!(values(&p), ["empty"]);
        // rich Prompt with choices.
        let p = line("python", "Pick a color [red/green/blue] (green): ");
        assert_eq!(p.rule, "generic:choices");
        assert_eq!(values(&p), ["red", "green", "blue"]);
        assert_eq!(p.default.as_deref(), Some("green"));
        assert_eq!(p.keys_for("blue", true), Some(b"blue\r".to_vec()));
        // gpg's menus: `(N)` items, numbers skipped, `*default*`.
        let gpg = "Please select what kind of key you want:\n   (1) RSA and RSA\n   (2) DSA and Elgamal\n   (3) DSA (sign only)\n   (4) RSA (sign only)\n   (9) ECC (sign and encrypt) *default*\n  (10) ECC (sign only)\n  (14) Existing key from card\nYour selection? ";
        let p = line("gpg", gpg);
        assert_eq!(p.rule, "generic:numbered-menu");
        assert_eq!(values(&p), ["1", "2", "3", "4", "9", "10", "14"]);
        assert_eq!(p.default.as_deref(), Some("9"));
        assert!(
            p.question
                .starts_with("Please select what kind of key you want:"),
            "a menu's question keeps its title: {}",
            p.question
        );
    }

    #[test]
    fn secrets_are_known_by_their_words_whatever_the_echo_says() {
        // Raw-mode readers turn ECHO off and mask typing themselves: the words decide.
        for text in [
            "? Enter your API token",
            "? Password",
            "Vault unseal key:",
            "Enter the 2FA code:",
            "? Access code >",
            "AWS credentials:",
        ] {
            let p = screen("tool", text, false, false);
            assert!(p.secret, "{text}: {p:?}");
            assert_eq!(p.rule, "secret:text");
        }
        // Choices about a token are choices; a raw-mode line that is no field is not a
        // secret by its words alone.
        for text in ["Delete the old token? [y/N]", "Rotating the token now"] {
            assert!(!screen("tool", text, true, false).secret, "{text}");
        }
        // A select menu titled with such a word is a menu.
        let p = raw_screen(
            "? Pick a token type (Use arrow keys)\n \u{bb} classic\n   fine-grained",
            0,
        );
        assert_eq!(p.rule, "generic:select");
    }

    #[test]
    fn debconf_menus_in_columns_offer_every_item() {
        let tz = "Please select the geographic area in which you live.\n\n  1. Africa   3. Antarctica  5. Arctic    7. Atlantic  9. Indian    11. US\n  2. America  4. Australia   6. Asia      8. Europe    10. Pacific  12. Etc\nGeographic area [8]: ";
        let p = line("dpkg-reconfigure", tz);
        assert_eq!(p.rule, "generic:column-menu");
        let want: Vec<String> = (1..=12).map(|n| n.to_string()).collect();
        assert_eq!(values(&p), want);
        assert_eq!(p.options[10].label, "US");
        assert_eq!(p.options[2].label, "Antarctica");
        assert_eq!(p.default.as_deref(), Some("8"));
        assert_eq!(p.keys_for("12", true), Some(b"12\r".to_vec()));
        assert!(
            p.question.starts_with("Please select the geographic area"),
            "{}",
            p.question
        );
        // One line.
        let p = line("debconf", "Use the proxy?\n  1. yes  2. no\nAnswer: ");
        assert_eq!(values(&p), ["1", "2"]);
        // A gap in the numbering is no menu.
        assert_ne!(
            line("t", "  1. a  3. c\nPick: ").rule,
            "generic:column-menu"
        );
    }

    #[test]
    fn an_earlier_menu_is_not_the_question_asked_below_it() {
        let gpg = "Please select what kind of key you want:\n   (1) RSA and RSA (default)\n   (2) DSA and Elgamal\n  (14) Existing key from card\nYour selection? 1\nRSA keys may be between 1024 and 4096 bits long.\nWhat keysize do you want? (3072) ";
        let p = line("gpg", gpg);
        assert_eq!(p.rule, "generic:text-default");
        assert_eq!(p.default.as_deref(), Some("3072"));
    }

    #[test]
    fn review_cases_a_list_over_a_question_paths_and_units() {
        // A `>` list above a raw-mode question: the question is asked, not the list.
        let p = raw_screen("Changes:\n> file a\n  file b\nContinue? [Y/n]", 3);
        assert_eq!(p.rule, "generic:yes-no", "{p:?}");
        // Paths and formats in brackets are text defaults, not choices.
        for (text, default) in [
            ("Branch [origin/main]: ", "origin/main"),
            ("Format [YYYY/MM/DD]: ", "YYYY/MM/DD"),
        ] {
            let p = line("t", text);
            assert_eq!(p.rule, "generic:text-default", "{text}");
            assert_eq!(p.default.as_deref(), Some(default));
        }
        assert_eq!(line("t", "Pick [red/green/blue]: ").rule, "generic:choices");
        // A unit in parentheses is no default.
        assert_ne!(line("t", "Disk size (GB): ").rule, "generic:text-default");
    }
}
