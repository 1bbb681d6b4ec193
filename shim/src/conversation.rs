//! The prompt conversation of supervised mode as a state machine: it looks at what the
//! terminal shows while output is idle, decides whether the tool is asking something, and
//! turns the store's resolution or a wait-mode decision into keys. It does no I/O: the
//! supervisor feeds it observations and replies and carries out the [`Action`]s it returns,
//! so every rule here can be driven by made-up screens and decisions in unit tests.

use crate::blocked::Reading;
use crate::screen::{self, ScreenText};
use crate::store::ASK_TIMEOUT;
use hr_shared::approvals::Approval;
use hr_shared::approvals::PromptKind;
use hr_shared::config::{Config, OnPrompt, Resolved};
use hr_shared::exit::RunOutcome;
use hr_shared::fingerprint;
use hr_shared::policy::{self, PromptFacts};
use hr_shared::prompt::{self, Prompt, ScreenFacts};
use hr_shared::sanitize::sanitize_line;
use hr_shared::store::watch::{self, Watched};
use hr_shared::store::{PromptRequest, PromptResolution};
use std::io;
use std::sync::mpsc::TryRecvError;
use std::time::{Duration, Instant};

/// What the conversation needs to know about the run, fixed for its whole length.
pub struct Setup<'a> {
    /// The tool's name as shown and stored.
    pub tool: &'a str,
    /// Its name for stderr lines (escaped).
    pub label: &'a str,
    pub settings: &'a Resolved,
    /// Prompt rules and policies.
    pub config: &'a Config,
    /// The command line and working directory, for the conditions of config policies.
    pub argv: Vec<String>,
    pub cwd: String,
}

/// Whether the foreground group waits on the terminal, and how much CPU it has used: two
/// equal samples in a row mean nothing moved in between.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Blocked {
    pub cpu_ticks: u64,
    pub reading: Reading,
    /// What reads the terminal is a pager (`less`, `more`): it shows a file, asks nothing.
    pub pager: bool,
}

/// The terminal modes that matter to a prompt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Modes {
    /// ICANON: the tool reads lines (off: single keys or a full-screen menu).
    pub canonical: bool,
    /// ECHO: off while blocked in line mode is a secret prompt.
    pub echo: bool,
    /// The VEOF character (0 when unset).
    pub eof: u8,
}

impl Modes {
    pub fn of(t: &libc::termios) -> Modes {
        Modes {
            canonical: t.c_lflag & libc::ICANON != 0,
            echo: t.c_lflag & libc::ECHO != 0,
            eof: t.c_cc[libc::VEOF],
        }
    }
}

/// What one detector tick may look at. Each look costs something (a lock, syscalls, a walk
/// of `/proc`), so the conversation asks for them one by one, only as far as it needs.
pub trait Observe {
    /// Whether the screen model has taken in all output read so far.
    fn caught_up(&self) -> bool;
    /// The foreground group's state; `None` when there is no foreground group.
    fn blocked(&mut self) -> Option<Blocked>;
    fn modes(&mut self) -> Option<Modes>;
    /// The rendered screen; `None` when it cannot be read.
    fn screen(&mut self) -> Option<ScreenText>;
    /// Who reads the terminal now (the reading processes' pids and start times, as one
    /// number); `None` when `/proc` will not say.
    fn reader(&mut self) -> Option<u64> {
        None
    }
    /// Whether output has come since the screen last changed (it only animates: a spinner,
    /// a cycling banner): the tool uses CPU to draw, so CPU time is no sign of work then.
    fn animating(&self) -> bool {
        false
    }
    /// Whether no output at all, animation included, has come for the idle window: a
    /// program that draws a spinner or a timer is at work, not waiting for keys.
    fn quiet(&self) -> bool {
        true
    }
}

/// What the supervisor is to do, in order.
#[derive(Debug)]
pub enum Action {
    /// Write these bytes to the tool's terminal (EOF, Enter); a failure changes nothing.
    Write(Vec<u8>),
    /// Type an answer, then report how the write went with [`Conversation::typed`].
    Type(Typing),
    /// Send this prompt to the store and feed its reply to [`Conversation::reply`].
    Ask(Box<PromptRequest>),
    /// The answer taken for this approval was not typed: give it back.
    Release(String),
    /// A wait-mode decision reached this run: mark the approval consumed (its outcome stays
    /// with this run, a yes or a no); `answering`: it is being typed, the run goes on.
    Consume {
        approval_id: String,
        answering: bool,
    },
    /// Watch this approval and feed what comes to [`Conversation::watched`] (or say
    /// [`Conversation::unwatched`] when it cannot be watched).
    Watch(Box<Approval>),
    /// Nothing waits for this pending approval any more (its question left the screen):
    /// close it (`RunWrite::Withdraw`), saying why; the run goes on.
    Withdraw { approval_id: String, why: String },
    /// The stderr line and the notify hook for a pending approval.
    Announce {
        approval: Box<Approval>,
        waiting: bool,
        taken_over: bool,
    },
    /// End the tool with this outcome.
    End(RunOutcome),
    /// Nothing is asked, and what reads the terminal has waited for keys for `waited` on a
    /// screen where EOF means nothing (`kind`): end it (TERM), as it would end without a
    /// terminal. The tool itself goes on, as it would once its editor failed.
    EndUnasked {
        waited: Duration,
        kind: &'static str,
    },
    /// One line for stderr.
    Say(String),
}

/// An answer to type, and what the conversation remembers once it is typed.
#[derive(Debug)]
pub struct Typing {
    pub keys: Vec<u8>,
    pending_enter: Option<PendingEnter>,
    answered: String,
    /// The prompt line answered.
    line: String,
}

/// Keys typed a step at a time, each step checked on the screen before the next, and
/// Enter only once the screen shows what was decided.
#[derive(Debug)]
struct Steer {
    prompt: Prompt,
    goal: Goal,
    approval_id: String,
    /// The line for stderr once it is submitted.
    answered: String,
    /// The output count when the last keys were sent: the tool has drawn since when it
    /// differs.
    sent_seq: u64,
    sent_at: Instant,
    steps: usize,
    /// The screen's rows when the text was typed (a field may stand on a row of its own,
    /// under its question, away from the cursor).
    before: Vec<String>,
    /// A menu's highlighted item and boxes when the last key was sent: a menu that marks its
    /// current item only by how it is drawn redraws no text when the highlight moves.
    seen: Option<(usize, Vec<bool>)>,
}

#[derive(Debug)]
enum Goal {
    /// Move a menu's highlight to this item, then press Enter.
    Select(usize),
    /// Check exactly these items of a check-box menu (space on each that differs, moving
    /// the highlight to it), then press Enter.
    Check(Vec<bool>),
    /// The field shows exactly this text (it was cleared first), then press Enter.
    Text(String),
}

/// Arrow keys, as the terminal's cursor-key mode says they are sent: down or up, or for
/// items side by side (a toggle), right or left.
fn arrow(forward: bool, application: bool, horizontal: bool) -> Vec<u8> {
    let key = match (horizontal, forward) {
        (false, true) => b'B',
        (false, false) => b'A',
        (true, true) => b'C',
        (true, false) => b'D',
    };
    vec![0x1b, if application { b'O' } else { b'[' }, key]
}

/// Backspace (DEL) `n` times: empties a field of `n` characters with the cursor at its end.
/// Every line editor takes it (readline, prompt_toolkit, Node's readline and the libraries
/// on it, Go's, Ruby's, Rust's); Ctrl-U is not universal (`prompts` inserts it as text), and
/// a backspace more than the field holds does nothing.
fn erase(n: usize) -> Vec<u8> {
    vec![0x7f; n.min(MAX_ERASE)]
}

/// The most backspaces sent to empty a field.
const MAX_ERASE: usize = 200;

/// How many characters a text field may hold when an answer is typed into it: on the
/// cursor's line, what follows the prompt's own text (`Project name: demo`, `? Name › demo`
/// — after the last `: `, `› `, `> `, `» `, `? `); on a line with no such mark, the whole
/// line; with the cursor hidden (the field drawn on a row of its own, its cursor faked),
/// the longest of the screen's last rows.
fn field_room(prompt_line: &str, rows: &[String], cursor_hidden: bool) -> usize {
    if cursor_hidden {
        return rows
            .iter()
            .rev()
            .filter(|r| !r.trim().is_empty())
            .take(4)
            .map(|r| r.trim().chars().count())
            .max()
            .unwrap_or(0);
    }
    let line = sanitize_line(prompt_line);
    let line = line.trim_end();
    if line.ends_with([':', '›', '>', '»', '?', '❯', ')', ']']) {
        // The prompt's mark, or its default in brackets, ends the line: the field is empty.
        return 0;
    }
    [": ", "› ", "> ", "» ", "? ", "❯ "]
        .iter()
        .filter_map(|mark| line.rfind(mark).map(|at| at + mark.len()))
        .max()
        .map_or_else(|| line.chars().count(), |at| line[at..].chars().count())
}

/// Whether a row of the screen, away from the cursor, shows exactly `text` in place of a
/// field's content: a row that changed since `before` and reads as [`field_shows`] says,
/// once a faked cursor (a block at its end) is left off. The block counts as a change: a
/// placeholder (`│  demo`, its first letter under the cursor) typed over with the same
/// word reads `│  demo█`.
fn field_row_shows(before: &[String], now: &[String], text: &str) -> bool {
    now.iter().enumerate().any(|(i, row)| {
        let old = before.get(i).map_or("", String::as_str);
        let row = sanitize_line(row);
        let row = row.trim_end();
        let content = row.trim_end_matches(prompt::DRAWN_CURSORS).trim_end();
        row != old.trim_end() && field_shows(old, content, text)
    })
}

/// Whether the prompt line `shown` shows exactly `text` typed into the field of `asked`
/// (the prompt line when it was asked): the line ends with the text, and what comes before
/// it is the prompt's own start — the asked line itself, or the asked line less a hint at
/// its end that the field's content replaces (`(demo)`, `[demo]`) or the pre-filled
/// value it was cleared of.
pub fn field_shows(asked: &str, shown: &str, text: &str) -> bool {
    // Both lines as the prompt records them: trimmed (a dialog's box stands indented).
    let shown = sanitize_line(shown);
    let shown = shown.trim();
    let Some(before) = shown.strip_suffix(text.trim_end()) else {
        return false;
    };
    let head = before.trim_end();
    let asked = asked.trim();
    !head.is_empty() && asked.starts_with(head) && {
        // What the field replaced: a bracketed hint or the pre-filled text — or nothing,
        // when the answer stands apart from the prompt (`Name: myproj`, `Name:myproj`), not
        // run on from a value the field kept (`demo` + `myproj` = `demomyproj`).
        let rest = &asked[head.len()..];
        if rest.is_empty() {
            before.chars().last().is_some_and(|c| !c.is_alphanumeric())
        } else {
            rest.starts_with(char::is_whitespace)
        }
    }
}

/// Whether a menu item names Esc as its key, in brackets at its end: `(esc)`, `(Esc to
/// stop)`.
fn is_esc_item(item: &str) -> bool {
    let item = item.trim_end();
    item.ends_with(')')
        && item.rfind('(').is_some_and(|at| {
            let inside = item[at + 1..].to_ascii_lowercase();
            inside == "esc)" || inside.starts_with("esc ")
        })
}

/// Whether a menu's title is the one it was asked with: the same, or the same with a hint
/// after it dropped or added once a key was pressed (inquirer's `? Pick a color (Use arrow
/// keys)` becomes `? Pick a color`).
fn same_title(now: &str, asked: &str) -> bool {
    let (short, long) = if now.len() <= asked.len() {
        (now, asked)
    } else {
        (asked, now)
    };
    now == asked
        || (short.chars().filter(|c| c.is_alphanumeric()).count() >= 3
            && long.starts_with(short)
            && ["(", "-", "›", "…", "["]
                .iter()
                .any(|m| long[short.len()..].trim_start().starts_with(m)))
}

/// A menu's title without the selection it may show after the question: a check-box
/// menu's checked items (tty-prompt's `Pick toppings ham, olives (Press …)` → `Pick
/// toppings (Press …)`), a list's highlighted item (beaupy's `Deploy now? (Y/N) Yes` →
/// `Deploy now? (Y/N)`).
fn without_selection(title: &str, menu: &hr_shared::prompt::SelectMenu) -> String {
    let names = menu.names();
    let chosen: Vec<&str> = if menu.checkbox {
        names
            .iter()
            .zip(menu.checked())
            .filter(|(_, c)| *c)
            .map(|(n, _)| n.as_str())
            .collect()
    } else {
        names
            .get(menu.highlighted)
            .map(String::as_str)
            .into_iter()
            .collect()
    };
    if chosen.is_empty() {
        return title.to_owned();
    }
    let listed = format!(" {}", chosen.join(", "));
    let (head, hint) = match title.find(" (") {
        Some(at) => title.split_at(at),
        None => (title, ""),
    };
    let stripped = |text: &str| {
        text.trim_end()
            .strip_suffix(&listed)
            .filter(|question| !question.trim().is_empty())
            .map(str::to_owned)
    };
    stripped(title)
        .or_else(|| stripped(head).map(|question| format!("{question}{hint}")))
        .unwrap_or_else(|| title.to_owned())
}

/// Whether the prompt line `shown` ends with `text` masked (`******`, `••••`): a field
/// that hides what is typed into it.
fn masks(shown: &str, text: &str) -> bool {
    let n = text.chars().count();
    let tail: Vec<char> = shown.trim_end().chars().rev().take(n).collect();
    n > 0
        && tail.len() == n
        && tail
            .iter()
            .all(|c| matches!(c, '*' | '•' | '●' | '·' | '∙'))
}

/// Text typed in raw mode without Enter, and the prompt line it was typed on: if it shows
/// up echoed on that line while the tool still waits, the prompt wants Enter too.
#[derive(Debug)]
struct PendingEnter {
    line: String,
    typed: String,
}

enum State {
    /// Looking for a prompt whenever output is idle.
    Looking,
    /// A prompt was sent to the store; its reply is awaited.
    Asking {
        prompt: Prompt,
        /// Who read the terminal when it was asked.
        reader: Option<u64>,
        canonical: bool,
        /// The output count when the prompt was seen: if output came since, it is gone.
        seq: u64,
        since: Instant,
    },
    /// Wait mode: the tool is kept at its prompt until the approval is decided; `reader`:
    /// who read the terminal when it was asked; `seq`: the output count then.
    Waiting {
        prompt: Prompt,
        approval_id: String,
        reader: Option<u64>,
        seq: u64,
        /// A decision that came while the screen did not show its prompt as asked (the
        /// tool between two reads, a frame half drawn), and since when it is held: looked
        /// at again each tick, for up to [`HOLD`].
        held: Option<(Box<Approval>, Instant)>,
        /// Since when the screen has shown something other than the question asked (no
        /// question, or another one), with no decision yet, and what: see
        /// [`WITHDRAW_AFTER`].
        gone: Option<(Instant, String)>,
        /// The output count when the screen was last read for that: a screen not changed
        /// since is not read again (a clock ticking above a question for hours).
        looked: u64,
    },
    /// An answer is being typed and checked step by step.
    Steering(Box<Steer>),
}

/// How long a decision is held while its prompt is not shown as asked, looked at again
/// each tick, before it is given back.
const HOLD: Duration = Duration::from_secs(2);

/// How long a pending approval's question must have been off the screen (the tool asks
/// nothing, or something else: its own timeout took a default, or it was answered some
/// other way) before the approval is withdrawn — at least this, and two idle windows. A
/// frame half drawn, a redraw, a resize are over long before.
const WITHDRAW_AFTER: Duration = Duration::from_secs(3);

pub struct Conversation<'a> {
    setup: Setup<'a>,
    state: State,
    /// Reads of output so far: tells "the screen changed" without comparing screens.
    output_seq: u64,
    /// The previous sample: a prompt needs two equal ones in a row.
    prev: Option<Blocked>,
    /// When keys that answer no question (EOF, a pager's space) were last written.
    last_nudge: Option<Instant>,
    /// Who was given EOF with nothing asked: the same reader asking right after is asking
    /// about that EOF (IPython's `Do you really want to exit ([y]/n)?`), and gets EOF again,
    /// as `/dev/null` would give it.
    eof_reader: Option<u64>,
    /// Since when the tool has been seen waiting for keys with nothing asked on a screen
    /// EOF means nothing to (an editor, `top`), and when it was last seen so.
    unasked: Option<Unasked>,
    /// The output count when the shim last typed: no new prompt until the tool reacts.
    typed_at: Option<u64>,
    pending_enter: Option<PendingEnter>,
    /// The prompt line last answered, and the screen it first showed its answer on: while
    /// that screen stays, it is the answered prompt, not a new one (a tool may sit quietly
    /// after an answer); a screen that changes (an error under it) is looked at anew.
    answered_line: Option<(String, Option<u64>)>,
    /// Keys that answered were just written (`Some(None)`), at the tick time given
    /// (`Some(Some(t))`): nothing more is typed until [`ANSWER_GAP`] has passed.
    answered_at: Option<Option<Instant>>,
    /// The screen last classified for a prompt (its rows, cleaned, and whether the cursor
    /// was hidden): where a field's text is looked for once an answer is typed into it.
    classified: std::cell::RefCell<(Vec<String>, bool)>,
    /// The tool has drawn a screen of its own (hidden the terminal's cursor, or taken the
    /// alternate screen): its keys are commands, read while it works too.
    draws_own_screen: bool,
}

/// A stretch of looks that each saw the tool waiting for keys with nothing asked.
#[derive(Debug, Clone, Copy)]
struct Unasked {
    since: Instant,
    seen: Instant,
}

/// The least time between an answer and the next keys typed. A tool that took an answer
/// may still be switching screens, and some drop a key that comes too soon after the last
/// (Codex CLI ignores an Enter within half a second of the previous one); a person never
/// types that fast from one question to the next.
pub const ANSWER_GAP: Duration = Duration::from_millis(1000);

impl<'a> Conversation<'a> {
    pub fn new(setup: Setup<'a>) -> Self {
        Conversation {
            setup,
            state: State::Looking,
            output_seq: 0,
            prev: None,
            last_nudge: None,
            eof_reader: None,
            unasked: None,
            typed_at: None,
            pending_enter: None,
            answered_line: None,
            answered_at: None,
            classified: Default::default(),
            draws_own_screen: false,
        }
    }

    /// A prompt was sent to the store and its reply is awaited.
    pub fn asking(&self) -> bool {
        matches!(self.state, State::Asking { .. })
    }

    /// An answer is being typed step by step: when the next step may be looked at, at the
    /// earliest (`last_output`: when the tool last drew).
    pub fn steering_at(&self, last_output: Instant) -> Option<Instant> {
        matches!(self.state, State::Steering(_)).then(|| last_output + self.settle())
    }

    /// How long the tool's drawing must have been still before a step is checked.
    fn settle(&self) -> Duration {
        (self.setup.settings.prompt_idle / 6).max(Duration::from_millis(30))
    }

    /// Whether keys that answered were typed less than [`ANSWER_GAP`] ago (the first look
    /// after typing them starts the clock).
    fn too_soon(&mut self, now: Instant) -> bool {
        match self.answered_at {
            None => false,
            Some(None) => {
                self.answered_at = Some(Some(now));
                true
            }
            Some(Some(at)) => now < at + ANSWER_GAP,
        }
    }

    /// The tool is kept at a prompt until its approval is decided.
    pub fn waiting(&self) -> bool {
        matches!(self.state, State::Waiting { .. })
    }

    /// The tool wrote something: the screen changed.
    pub fn output(&mut self) {
        self.output_seq += 1;
        self.prev = None;
    }

    /// The tool is being ended for whatever reason: nothing more is asked or awaited.
    pub fn stop(&mut self) {
        self.state = State::Looking;
    }

    /// One detector tick, `idle_for` after the last output: is the tool blocked reading its
    /// terminal, and what shows?
    pub fn tick(
        &mut self,
        now: Instant,
        idle_for: Duration,
        obs: &mut impl Observe,
    ) -> Vec<Action> {
        if matches!(self.state, State::Steering(_)) {
            return self.steer(now, idle_for, obs);
        }
        if !matches!(self.state, State::Looking) {
            return Vec::new();
        }
        self.too_soon(now);
        let idle_window = self.setup.settings.prompt_idle;
        // Sampling from half the window on lets two samples agree by the time it closes.
        if idle_for < idle_window / 2 || !obs.caught_up() {
            return Vec::new();
        }
        // After typing an answer, nothing is a new prompt until the tool has reacted.
        if self.typed_at == Some(self.output_seq) {
            return Vec::new();
        }
        let Some(sample) = obs.blocked() else {
            return Vec::new();
        };
        // Two samples agree: the same reading state, and no CPU used in between — unless
        // the screen only animates, which costs CPU without anything changing.
        let steady = self.prev.is_some_and(|p| {
            p.reading == sample.reading
                && p.pager == sample.pager
                && (p.cpu_ticks == sample.cpu_ticks || obs.animating())
        });
        self.prev = Some(sample);
        if idle_for < idle_window || !steady || sample.reading == Reading::No {
            return Vec::new();
        }
        let Some(modes) = obs.modes() else {
            return Vec::new();
        };
        let Some(shown) = obs.screen() else {
            return Vec::new();
        };
        // Where /proc will not say (setuid tools), only a prompt-shaped last line counts.
        if sample.reading == Reading::Unknown
            && !shown
                .last_lines(1)
                .first()
                .is_some_and(|l| screen::looks_like_question(l))
        {
            return Vec::new();
        }
        if sample.pager && sample.reading == Reading::Yes {
            return self.page(now, &shown).into_iter().collect();
        }
        self.draws_own_screen |= shown.cursor_hidden || shown.full_screen;
        // A coding agent that draws its own screen (Gemini CLI, Codex, Claude Code …) reads
        // keys while it works: its input box is its conversation, ^D there quits it
        // (Gemini types `/quit`), and a field for free text is that input, not a question
        // (Codex's `›`). Its questions are menus and confirms. (aider's line prompt takes
        // EOF as the end of its input, as without a terminal.)
        let agent_input =
            self.draws_own_screen && hr_shared::mode::is_coding_agent(self.setup.tool);
        if !shown.asks(modes.canonical) {
            // A full-screen program (the alternate screen, or a raw-mode one that hides its
            // cursor and draws where it likes: `top`) is not sent EOF: its keys are
            // commands, ^D would quit Codex CLI. One that asks nothing for long (an editor,
            // a monitor) is ended as without a terminal.
            if shown.full_screen {
                return self.unasked(now, &shown, obs, "a full-screen program");
            }
            if shown.cursor_hidden && !modes.canonical {
                return self.unasked(now, &shown, obs, "a screen with its cursor hidden");
            }
            if agent_input {
                return self.unasked(now, &shown, obs, "a coding agent's input");
            }
            return self.eof(now, modes, obs).into_iter().collect();
        }
        // The reader just given EOF asks something now: it is asking about that EOF (a
        // REPL's `really exit?`). Its input is at its end, as `/dev/null` would be: EOF
        // again, never a guessed answer.
        if self.eof_reader.is_some() && obs.reader() == self.eof_reader {
            return self.eof(now, modes, obs).into_iter().collect();
        }
        if let Some(pe) = self.pending_enter.take() {
            let line = sanitize_line(&shown.prompt_line);
            let line = line.trim();
            if line.len() > pe.line.len()
                && line.starts_with(&pe.line)
                && line[pe.line.len()..].trim() == pe.typed
            {
                self.typed_at = Some(self.output_seq);
                return vec![Action::Write(b"\r".to_vec())];
            }
        }
        if let Some((answered, seen)) = self.answered_line.take() {
            let line = sanitize_line(&shown.prompt_line);
            let line = line.trim();
            let digest = shown.still_digest();
            if line.len() > answered.len()
                && line.starts_with(&answered)
                && seen.is_none_or(|d| d == digest)
            {
                // The prompt just answered, its answer echoed after it.
                self.answered_line = Some((answered, Some(digest)));
                return Vec::new();
            }
        }
        if self.too_soon(now) {
            return Vec::new();
        }
        let prompt = match self.read_prompt(&shown, modes) {
            Ok(prompt) => prompt,
            Err(kind) => return self.unasked(now, &shown, obs, kind),
        };
        if agent_input
            && !prompt.secret
            && matches!(prompt.kind, PromptKind::Text | PromptKind::Unknown)
        {
            return self.unasked(now, &shown, obs, "a coding agent's input");
        }
        if prompt.secret {
            let alternative = prompt
                .alternative
                .clone()
                .unwrap_or_else(|| prompt::secret_alternative(self.setup.tool));
            return vec![Action::End(RunOutcome::SecretRefused {
                prompt: prompt.prompt_line,
                alternative,
            })];
        }
        let settings = self.setup.settings;
        let request = PromptRequest {
            prompt_fingerprint: fingerprint::prompt(self.setup.tool, &prompt.prompt_line),
            policies: self.config_policies(&prompt),
            ttl: settings.approval_ttl,
            on_expire: settings.on_expire,
            prompt: prompt.clone(),
        };
        self.unasked = None;
        self.state = State::Asking {
            prompt,
            reader: obs.reader(),
            canonical: modes.canonical,
            seq: self.output_seq,
            since: now,
        };
        vec![Action::Ask(Box::new(request))]
    }

    /// A read with nothing asked (nothing on screen, a REPL's bare prompt, a raw-mode read
    /// with nothing question-like shown): answer EOF, the terminal's VEOF character, as
    /// /dev/null would without the shim. Line discipline and readline alike take it on an
    /// empty line as the end of input. Who was given it is remembered: its next question
    /// is about that EOF.
    fn eof(&mut self, now: Instant, modes: Modes, obs: &mut impl Observe) -> Option<Action> {
        let eof = if modes.eof == 0 { 4 } else { modes.eof };
        self.unasked = None;
        let nudged = self.nudge(now, vec![eof]);
        if nudged.is_some() {
            self.eof_reader = obs.reader();
        }
        nudged
    }

    /// The tool waits for keys with nothing asked, on a screen where EOF means nothing
    /// (`kind`). Left alone for a while — a program may draw its question seconds later —
    /// but once every look for [`Resolved::not_prompt_timeout`] has found it so (each look
    /// within that time of the last one; redraws between them are fine: `top`), what waits
    /// is ended, as it would end without a terminal. A blank screen is a program still
    /// starting (Codex CLI draws its menu seconds later), and one still drawing — a spinner,
    /// a timer — is at work: neither counts.
    ///
    /// [`Resolved::not_prompt_timeout`]: hr_shared::config::Resolved
    fn unasked(
        &mut self,
        now: Instant,
        shown: &ScreenText,
        obs: &mut impl Observe,
        kind: &'static str,
    ) -> Vec<Action> {
        let Some(limit) = self.setup.settings.not_prompt_timeout else {
            return Vec::new();
        };
        if shown.rows.iter().all(|r| r.trim().is_empty()) || !obs.quiet() {
            return Vec::new();
        }
        let since = match self.unasked {
            Some(u) if now <= u.seen + limit => u.since,
            _ => now,
        };
        if now < since + limit {
            self.unasked = Some(Unasked { since, seen: now });
            return Vec::new();
        }
        self.unasked = None;
        self.prev = None;
        vec![Action::EndUnasked {
            waited: now - since,
            kind,
        }]
    }

    /// A pager waits at its prompt: without the shim (stdout not a terminal) it would have
    /// copied the whole file, so page through it — a screen at a time, so everything passes
    /// through the output — and quit at its end (`(END)`).
    fn page(&mut self, now: Instant, shown: &ScreenText) -> Option<Action> {
        self.unasked = None;
        let at_end = shown
            .last_lines(1)
            .first()
            .is_some_and(|l| l.contains("(END)"));
        self.nudge(now, if at_end { b"q".to_vec() } else { b" ".to_vec() })
    }

    /// Writes `keys` that answer no question — once per idle window, so a tool that reads
    /// again gets the next ones only after a pause.
    fn nudge(&mut self, now: Instant, keys: Vec<u8>) -> Option<Action> {
        let idle_window = self.setup.settings.prompt_idle;
        if self.last_nudge.is_some_and(|t| now < t + idle_window) {
            return None;
        }
        self.last_nudge = Some(now);
        self.prev = None;
        Some(Action::Write(keys))
    }

    /// The config policies whose conditions hold for this prompt, in order: (name, value).
    fn config_policies(&self, p: &Prompt) -> Vec<(String, String)> {
        let facts = PromptFacts {
            tool: self.setup.tool,
            prompt_line: &p.prompt_line,
            question: &p.question,
            argv: &self.setup.argv,
            cwd: &self.setup.cwd,
        };
        policy::matching(self.setup.config, &facts)
    }

    /// What came on the store's reply channel so far (`rx.try_recv()`): nothing yet is
    /// waited for up to [`ASK_TIMEOUT`] after asking.
    pub fn reply(
        &mut self,
        now: Instant,
        got: Result<Result<PromptResolution, String>, TryRecvError>,
    ) -> Vec<Action> {
        let State::Asking { since, .. } = self.state else {
            return Vec::new();
        };
        let answer = match got {
            Ok(answer) => answer,
            Err(TryRecvError::Empty) if now < since + ASK_TIMEOUT => return Vec::new(),
            Err(_) => Err("the state store did not answer".to_owned()),
        };
        let State::Asking {
            prompt,
            reader,
            canonical,
            seq,
            ..
        } = std::mem::replace(&mut self.state, State::Looking)
        else {
            return Vec::new();
        };
        match answer {
            Err(why) => vec![Action::End(RunOutcome::Unrecorded {
                prompt: prompt.prompt_line,
                why,
            })],
            Ok(PromptResolution::Answer { approval, value }) => {
                if self.output_seq != seq {
                    return vec![
                        Action::Say(format!(
                            "headless-run: {}: the prompt went away before {} could answer it; the answer was not typed (it stays for the prompt's return)",
                            self.setup.label, approval.approval_id
                        )),
                        Action::Release(approval.approval_id),
                    ];
                }
                self.answer(now, prompt, canonical, &value, &approval)
            }
            Ok(PromptResolution::Rejected { approval }) => self.reject(&approval),
            Ok(PromptResolution::Pending {
                approval,
                taken_over,
            }) => {
                let wait = self.setup.settings.on_prompt == OnPrompt::Wait;
                let approval_id = approval.approval_id.clone();
                let announce = Action::Announce {
                    approval: approval.clone(),
                    waiting: wait,
                    taken_over,
                };
                if wait {
                    self.state = State::Waiting {
                        prompt,
                        approval_id,
                        reader,
                        seq,
                        held: None,
                        gone: None,
                        looked: seq,
                    };
                    vec![announce, Action::Watch(approval)]
                } else {
                    vec![
                        announce,
                        Action::End(RunOutcome::ApprovalPending { approval_id }),
                    ]
                }
            }
        }
    }

    /// The approval of [`Action::Watch`] cannot be watched: the run waits as in exit mode.
    pub fn unwatched(&mut self) -> Vec<Action> {
        match std::mem::replace(&mut self.state, State::Looking) {
            State::Waiting { approval_id, .. } => {
                vec![Action::End(RunOutcome::ApprovalPending { approval_id })]
            }
            other => {
                self.state = other;
                Vec::new()
            }
        }
    }

    /// Wait mode: what came from the approval's watcher so far (`rx.try_recv()`).
    pub fn watched(
        &mut self,
        now: Instant,
        got: Result<Watched, TryRecvError>,
        obs: &mut impl Observe,
    ) -> Vec<Action> {
        if !self.waiting() {
            return Vec::new();
        }
        let held = match &self.state {
            State::Waiting {
                held: Some((a, _)), ..
            } => Some(a.as_ref().clone()),
            _ => None,
        };
        let decided = match (got, held) {
            (Ok(Watched::Decided(a)), _) => *a,
            (Err(_), Some(a)) => a,
            (Err(TryRecvError::Empty), None) => return self.still_asked(now, obs),
            (Err(TryRecvError::Disconnected), None) => {
                let State::Waiting { prompt, .. } =
                    std::mem::replace(&mut self.state, State::Looking)
                else {
                    return Vec::new();
                };
                return vec![Action::End(RunOutcome::Unrecorded {
                    prompt: prompt.prompt_line,
                    why: "the approval could not be watched".into(),
                })];
            }
        };
        let State::Waiting {
            prompt,
            approval_id,
            reader,
            seq,
            held,
            ..
        } = std::mem::replace(&mut self.state, State::Looking)
        else {
            return Vec::new();
        };
        if !decided.answers() {
            // A no given to this run ends it, and ends with it: a later run of the same
            // command is asked again rather than answered by it.
            let mut actions = vec![Action::Consume {
                approval_id: decided.approval_id.clone(),
                answering: false,
            }];
            actions.extend(self.reject(&decided));
            return actions;
        }
        // A yes is typed only into the prompt it was given for: the same reader still
        // blocked on the same prompt, the screen as the operator saw it. Otherwise it is
        // not used (it stays decided, for that screen), and the screen is asked about anew.
        if let Some(why) = self.moved_on(&prompt, reader, seq, obs) {
            // Between two reads, or half-way through drawing a frame (an agent redrawing
            // its screen), it may not show the prompt for an instant: look again each tick
            // for a while, and type only once all of it matches, rather than give the
            // decision back at once.
            let since = held.map_or(now, |(_, since)| since);
            if now.saturating_duration_since(since) < HOLD {
                self.state = State::Waiting {
                    prompt,
                    approval_id,
                    reader,
                    seq,
                    held: Some((Box::new(decided), since)),
                    gone: None,
                    looked: seq,
                };
                return Vec::new();
            }
            self.prev = None;
            return vec![Action::Say(format!(
                "headless-run: {}: {} was decided for {:?}, which is no longer what the tool asks ({why}); not typed — asking again",
                self.setup.tool, decided.approval_id, prompt.prompt_line
            ))];
        }
        let value = decided.chosen_value.clone().unwrap_or_default();
        let consume = Action::Consume {
            approval_id: decided.approval_id.clone(),
            answering: true,
        };
        // The modes now, not when the prompt was seen: the tool may have switched meanwhile.
        let canonical = obs.modes().is_none_or(|m| m.canonical);
        let mut actions = vec![consume];
        actions.extend(self.answer(now, prompt, canonical, &value, &decided));
        actions
    }

    /// Wait mode, nothing decided yet: whether the tool still asks what it was asked for.
    /// Once the screen has shown no question, or another one, for [`WITHDRAW_AFTER`] (and
    /// two idle windows), nothing waits for the approval any more — the tool's own timeout
    /// took its default, or it was answered some other way: it is withdrawn, and the screen
    /// is looked at anew (a question that comes back is asked again). Only a screen that
    /// changed since the question was asked is read at all.
    fn still_asked(&mut self, now: Instant, obs: &mut impl Observe) -> Vec<Action> {
        let State::Waiting {
            prompt,
            seq,
            gone,
            looked,
            ..
        } = &mut self.state
        else {
            return Vec::new();
        };
        if self.output_seq == *seq {
            *gone = None;
            return Vec::new();
        }
        let asked_line = prompt.prompt_line.clone();
        // Read the screen only when it changed since the last look.
        if *looked != self.output_seq {
            if !obs.caught_up() {
                return Vec::new();
            }
            let (Some(modes), Some(shown)) = (obs.modes(), obs.screen()) else {
                return Vec::new();
            };
            let asked = fingerprint::prompt(self.setup.tool, &asked_line);
            let why = match self.read_prompt(&shown, modes) {
                Ok(p) if fingerprint::prompt(self.setup.tool, &p.prompt_line) == asked => None,
                Ok(p) if p.kind == PromptKind::Unknown => {
                    Some(format!("its last line is {:?} now", p.prompt_line))
                }
                Ok(p) => Some(format!("it now asks {:?}", p.prompt_line)),
                Err(_) => Some("it asks nothing now".to_owned()),
            };
            let State::Waiting { gone, looked, .. } = &mut self.state else {
                return Vec::new();
            };
            *looked = self.output_seq;
            *gone = why.map(|w| (gone.as_ref().map_or(now, |(since, _)| *since), w));
        }
        let State::Waiting {
            gone, approval_id, ..
        } = &mut self.state
        else {
            return Vec::new();
        };
        let Some((since, why)) = gone.as_ref() else {
            return Vec::new();
        };
        let after = WITHDRAW_AFTER.max(self.setup.settings.prompt_idle * 2);
        if now.saturating_duration_since(*since) < after {
            return Vec::new();
        }
        let why = format!("the tool no longer asks {asked_line:?}: {why}");
        let approval_id = std::mem::take(approval_id);
        self.state = State::Looking;
        self.prev = None;
        vec![
            Action::Say(format!(
                "headless-run: {}: approval {approval_id} withdrawn, nobody need decide it ({why})",
                self.setup.label
            )),
            Action::Withdraw { approval_id, why },
        ]
    }

    /// Why the terminal no longer shows `asked` to the reader that was asked, if it does
    /// not: the tool wrote something since (`seq`: the output count when it asked), stopped
    /// reading, another process reads, the prompt or the screen changed.
    fn moved_on(
        &self,
        asked: &Prompt,
        reader: Option<u64>,
        seq: u64,
        obs: &mut impl Observe,
    ) -> Option<String> {
        if obs.blocked().is_none_or(|b| b.reading == Reading::No) {
            return Some("it no longer waits for input".into());
        }
        if let (Some(then), Some(now)) = (reader, obs.reader())
            && then != now
        {
            return Some("another process reads the terminal now".into());
        }
        let (Some(modes), Some(shown)) = (obs.modes(), obs.screen()) else {
            return Some("its screen cannot be read".into());
        };
        let Ok(now) = self.read_prompt(&shown, modes) else {
            return Some("it no longer asks anything".into());
        };
        if fingerprint::prompt(self.setup.tool, &now.prompt_line)
            != fingerprint::prompt(self.setup.tool, &asked.prompt_line)
        {
            return Some(format!("it now asks {:?}", now.prompt_line));
        }
        if fingerprint::seen(&now) != fingerprint::seen(asked) {
            return Some("the screen around the prompt changed".into());
        }
        // The same text drawn again is still another question (a read that timed out and
        // asked anew), and a screen not yet caught up cannot be vouched for.
        if self.output_seq != seq || !obs.caught_up() {
            return Some("it wrote something since it asked".into());
        }
        None
    }

    /// The prompt on `shown` as the conversation reads it: [`Self::classify`], and on a
    /// screen whose cursor is hidden with nothing recognised, the row shaped like a
    /// question (or, with none, why nothing is asked). The same reading decides whether a
    /// decision still fits the screen.
    fn read_prompt(&self, shown: &ScreenText, modes: Modes) -> Result<Prompt, &'static str> {
        let mut prompt = self.classify(shown, modes);
        // A program that hides its cursor: with no menu or question recognised, the line the
        // cursor was left on (a logo's last row) is not what it asks. A full-screen program
        // (Codex's login under its logo) is left to draw its question; on other screens a
        // row shaped like a question (@clack's `What is your project name?`) is it.
        if shown.cursor_hidden
            && !modes.canonical
            && prompt.kind == PromptKind::Unknown
            && !prompt.secret
        {
            match shown.question_row_index().filter(|_| !shown.full_screen) {
                Some(at) => {
                    let row = &shown.rows[at];
                    prompt.prompt_line = sanitize_line(row)
                        .trim()
                        .trim_start_matches(['◆', ' '])
                        .to_owned();
                    if prompt::is_secret_question(&prompt.prompt_line) {
                        // A library's masked field (`◆  API token` over `│  ▪▪▪`).
                        prompt.secret = true;
                        prompt.rule = "secret:text".into();
                    } else if let Some((value, false)) = shown.field_under(at) {
                        // The field under it holds a value (not a dim placeholder): Enter
                        // submits it as it stands.
                        prompt.kind = PromptKind::Text;
                        prompt.rule = "generic:text-prefilled".into();
                        prompt.options = vec![hr_shared::event::ApprovalOption {
                            label: format!("As pre-filled ({value})"),
                            value: value.clone(),
                            keys: Some("\r".into()),
                        }];
                        prompt.default = Some(value);
                    }
                }
                None if shown.full_screen => return Err("a full-screen program"),
                None => return Err("a screen with its cursor hidden"),
            }
        }
        Ok(prompt)
    }

    /// The prompt on `shown`, as the detector reads it.
    fn classify(&self, shown: &ScreenText, modes: Modes) -> Prompt {
        *self.classified.borrow_mut() = (
            shown.rows.iter().map(|r| sanitize_line(r)).collect(),
            shown.cursor_hidden,
        );
        let end = (shown.cursor_row + 1).min(shown.rows.len());
        prompt::classify(
            &ScreenFacts {
                tool: self.setup.tool,
                rows: &shown.rows[..end],
                below: &shown.rows[end..],
                cursor_hidden: shown.cursor_hidden,
                emphasis: &shown.emphasis,
                prompt_line: &shown.prompt_line,
                echo: modes.echo,
                canonical: modes.canonical,
            },
            self.setup.config.prompt_rules(),
        )
    }

    /// What answering prompt `p` with `value` takes: the keys of an option or of a line
    /// of text; for an arrow-key menu or a line editor's field, keys typed and checked on
    /// the screen step by step ([`Self::steer`]); or the end of the tool when the value
    /// cannot be typed.
    fn answer(
        &mut self,
        now: Instant,
        p: Prompt,
        canonical: bool,
        value: &str,
        a: &Approval,
    ) -> Vec<Action> {
        let answered = format!(
            "headless-run: {}: answered {:?} with `{value}` ({}, {} by {})",
            self.setup.label,
            p.prompt_line,
            a.approval_id,
            a.status,
            watch::decided_by(a)
        );
        // An item that names Esc as its key (Copilot's `No, and tell Copilot what to do
        // differently (Esc to stop)`, which Enter does not choose) is chosen by Esc.
        if let Some(menu) = p.select.as_ref().filter(|m| !m.checkbox)
            && let Some(item) = p.select_index(value).and_then(|i| menu.items.get(i))
            && is_esc_item(item)
        {
            return vec![Action::Type(Typing {
                keys: vec![0x1b],
                pending_enter: None,
                answered,
                line: p.prompt_line.clone(),
            })];
        }
        let is_option = p.options.iter().any(|o| o.value == value);
        let goal = match &p.select {
            Some(menu) if !menu.checkbox => p.select_index(value).map(Goal::Select),
            Some(_) => p.check_set(value).map(Goal::Check),
            _ if !canonical && !is_option && p.allows_text => {
                hr_shared::approvals::is_acceptable_text(value)
                    .then(|| Goal::Text(value.to_owned()))
            }
            _ => None,
        };
        if let Some(goal) = goal {
            let (before, hidden) = self.classified.borrow().clone();
            let first = match &goal {
                // The first look at the menu sends the first arrow (or Enter).
                Goal::Select(_) | Goal::Check(_) => Vec::new(),
                Goal::Text(text) => [
                    erase(field_room(&p.prompt_line, &before, hidden)),
                    text.as_bytes().to_vec(),
                ]
                .concat(),
            };
            let steps = usize::from(!first.is_empty());
            self.state = State::Steering(Box::new(Steer {
                prompt: p,
                goal,
                approval_id: a.approval_id.clone(),
                answered,
                sent_seq: self.output_seq,
                sent_at: now,
                steps,
                before,
                seen: None,
            }));
            self.prev = None;
            return if first.is_empty() {
                Vec::new()
            } else {
                vec![Action::Write(first)]
            };
        }
        let Some(keys) = p.keys_for(value, canonical) else {
            return vec![Action::End(RunOutcome::Rejected {
                approval_id: a.approval_id.clone(),
                why: format!("answer `{value}` cannot be typed into this prompt"),
            })];
        };
        // Enter follows only if the keys show up echoed on the prompt line while the tool
        // still waits (a line editor); a key a menu acts on at once never does.
        let pending_enter = (!canonical && !keys.ends_with(b"\r")).then(|| PendingEnter {
            line: p.prompt_line.clone(),
            typed: String::from_utf8_lossy(&keys).into_owned(),
        });
        vec![Action::Type(Typing {
            keys,
            pending_enter,
            answered,
            line: p.prompt_line.clone(),
        })]
    }

    /// One step of typing an answer that is checked on the screen: once the tool has drawn
    /// what the last keys did (or a while has passed), look. A menu whose items are no
    /// longer the ones decided on, or a prompt that went away, gives the decision back and
    /// asks again; a highlight that does not reach the item, or a field that does not show
    /// exactly the answer, is not submitted and ends the tool. Otherwise the next arrow, or
    /// Enter.
    fn steer(&mut self, now: Instant, idle_for: Duration, obs: &mut impl Observe) -> Vec<Action> {
        let State::Steering(st) = &self.state else {
            return Vec::new();
        };
        let idle_window = self.setup.settings.prompt_idle;
        let settle = self.settle();
        if idle_for < settle || !obs.caught_up() {
            return Vec::new();
        }
        let (steps, sent_at) = (st.steps, st.sent_at);
        let drew = self.output_seq != st.sent_seq;
        if steps == 0 && self.too_soon(now) {
            return Vec::new();
        }
        if steps > 0 && !drew && now < sent_at + idle_window * 2 {
            return Vec::new();
        }
        let State::Steering(mut st) = std::mem::replace(&mut self.state, State::Looking) else {
            return Vec::new();
        };
        // What looks wrong is looked at again until the tool has had its time to draw (a
        // redraw in two writes, a moment of CPU between reads); only then is it so.
        let patient = now < st.sent_at + idle_window * 2;
        let (Some(shown), Some(modes)) = (obs.screen(), obs.modes()) else {
            if patient {
                self.state = State::Steering(st);
                return Vec::new();
            }
            return self.steer_lost(&st, "its screen cannot be read".into());
        };
        if obs.blocked().is_none_or(|b| b.reading == Reading::No) {
            if patient {
                self.state = State::Steering(st);
                return Vec::new();
            }
            return self.steer_lost(&st, "it no longer waits for input".into());
        }
        let failed = |st: &Steer, why: String| {
            vec![Action::End(RunOutcome::Rejected {
                approval_id: st.approval_id.clone(),
                why: format!("{why}; not submitted"),
            })]
        };
        match st.goal {
            Goal::Select(target) => {
                let now_shown = self.classify(&shown, modes);
                // The same menu: its title (less the item it may echo after the question)
                // and its items as the operator saw them.
                let title = |p: &Prompt| match &p.select {
                    Some(m) => without_selection(&p.prompt_line, m),
                    None => p.prompt_line.clone(),
                };
                let same_title = same_title(&now_shown.prompt_line, &st.prompt.prompt_line)
                    || same_title(&title(&now_shown), &title(&st.prompt));
                let Some(menu) = now_shown.select.filter(|m| {
                    same_title
                        && st
                            .prompt
                            .select
                            .as_ref()
                            .is_some_and(|was| was.items == m.items)
                }) else {
                    if patient {
                        self.state = State::Steering(st);
                        return Vec::new();
                    }
                    return self.steer_lost(&st, "the menu changed".into());
                };
                if menu.highlighted == target {
                    return self.submit(*st);
                }
                let moved = st.seen.as_ref() != Some(&(menu.highlighted, menu.checked()));
                if st.steps > 2 * menu.items.len() + 2 || (st.steps > 0 && !drew && !moved) {
                    return failed(
                        &st,
                        format!(
                            "the highlight did not reach {:?} (it is on {:?})",
                            menu.items[target], menu.items[menu.highlighted]
                        ),
                    );
                }
                st.steps += 1;
                st.sent_seq = self.output_seq;
                st.sent_at = now;
                st.seen = Some((menu.highlighted, menu.checked()));
                let keys = arrow(target > menu.highlighted, shown.app_cursor, menu.horizontal);
                self.state = State::Steering(st);
                vec![Action::Write(keys)]
            }
            Goal::Check(ref target) => {
                let now_shown = self.classify(&shown, modes);
                // The same menu: its title and its items (boxes aside) as the operator saw,
                // the title less the selection it may list (tty-prompt's `Pick toppings
                // ham`), which changes with every box.
                let title = |p: &Prompt| match &p.select {
                    Some(m) => without_selection(&p.prompt_line, m),
                    None => p.prompt_line.clone(),
                };
                let same_title = same_title(&title(&now_shown), &title(&st.prompt));
                let Some(menu) = now_shown.select.filter(|m| {
                    same_title
                        && m.checkbox
                        && st
                            .prompt
                            .select
                            .as_ref()
                            .is_some_and(|was| was.names() == m.names())
                }) else {
                    if patient {
                        self.state = State::Steering(st);
                        return Vec::new();
                    }
                    return self.steer_lost(&st, "the menu changed".into());
                };
                let checked = menu.checked();
                if &checked == target {
                    return self.submit(*st);
                }
                // The nearest item whose box differs: move there, then space.
                let at = menu.highlighted;
                let differs = |i: &usize| checked[*i] != target[*i];
                let next = (0..checked.len())
                    .filter(differs)
                    .min_by_key(|i| i.abs_diff(at))
                    .unwrap_or(at);
                let moved = st.seen.as_ref() != Some(&(at, checked.clone()));
                if st.steps > 4 * menu.items.len() + 4 || (st.steps > 0 && !drew && !moved) {
                    return failed(
                        &st,
                        format!(
                            "the boxes did not come to {:?} (they show {:?})",
                            hr_shared::prompt::multi_value(&menu.names(), target),
                            hr_shared::prompt::multi_value(&menu.names(), &checked)
                        ),
                    );
                }
                st.steps += 1;
                st.sent_seq = self.output_seq;
                st.sent_at = now;
                st.seen = Some((at, checked.clone()));
                let keys = if next == at {
                    b" ".to_vec()
                } else {
                    arrow(next > at, shown.app_cursor, menu.horizontal)
                };
                self.state = State::Steering(st);
                vec![Action::Write(keys)]
            }
            Goal::Text(ref text) => {
                if field_shows(&st.prompt.prompt_line, &shown.prompt_line, text)
                    || field_row_shows(&st.before, &shown.rows, text)
                {
                    return self.submit(*st);
                }
                if patient {
                    self.state = State::Steering(st);
                    return Vec::new();
                }
                let line = sanitize_line(&shown.prompt_line);
                let mut actions = vec![Action::Write(erase(text.chars().count()))];
                if masks(&line, text) {
                    // The field hides what is typed: it asks for a secret, which is never
                    // answered from the store.
                    let alternative = st
                        .prompt
                        .alternative
                        .clone()
                        .unwrap_or_else(|| prompt::secret_alternative(self.setup.tool));
                    actions.push(Action::End(RunOutcome::SecretRefused {
                        prompt: st.prompt.prompt_line.clone(),
                        alternative,
                    }));
                    return actions;
                }
                actions.extend(failed(
                    &st,
                    format!("the field showed {:?}, not the answer", line.trim()),
                ));
                actions
            }
        }
    }

    /// The screen shows what was decided: press Enter.
    fn submit(&mut self, st: Steer) -> Vec<Action> {
        self.eof_reader = None;
        self.typed_at = Some(self.output_seq);
        self.prev = None;
        self.answered_at = Some(None);
        self.answered_line = Some((st.prompt.prompt_line.clone(), None));
        vec![Action::Write(b"\r".to_vec()), Action::Say(st.answered)]
    }

    /// The prompt an answer was being typed into went away: give the decision back (it stays
    /// for that prompt's return) and look at the screen anew.
    fn steer_lost(&mut self, st: &Steer, why: String) -> Vec<Action> {
        self.prev = None;
        // Typed text is taken back out of the field it was typed into.
        let clear = match &st.goal {
            Goal::Text(text) => Some(Action::Write(erase(text.chars().count()))),
            Goal::Select(_) | Goal::Check(_) => None,
        };
        clear
            .into_iter()
            .chain([
                Action::Say(format!(
                    "headless-run: {}: {} was decided for {:?}, which is no longer what the tool asks ({why}); not submitted — asking again",
                    self.setup.label, st.approval_id, st.prompt.prompt_line
                )),
                Action::Release(st.approval_id.clone()),
            ])
            .collect()
    }

    /// How writing the keys of an [`Action::Type`] went. Keys that did not reach the tool
    /// leave the conversation as it was, so the same prompt is looked at again.
    pub fn typed(&mut self, t: Typing, written: io::Result<()>) -> Vec<Action> {
        if let Err(e) = written {
            return vec![Action::Say(format!(
                "headless-run: {}: cannot type the answer: {e}",
                self.setup.label
            ))];
        }
        self.eof_reader = None;
        self.typed_at = Some(self.output_seq);
        self.prev = None;
        self.answered_at = Some(None);
        self.pending_enter = t.pending_enter;
        self.answered_line = Some((t.line, None));
        vec![Action::Say(t.answered)]
    }

    fn reject(&self, a: &Approval) -> Vec<Action> {
        let why = format!("{} by {}", a.status, watch::decided_by(a));
        vec![
            Action::Say(format!(
                "headless-run: {}: approval {} was {why}; ending the tool (exit 91)",
                self.setup.label, a.approval_id
            )),
            Action::End(RunOutcome::Rejected {
                approval_id: a.approval_id.clone(),
                why,
            }),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hr_shared::approvals::PromptKind;
    use hr_shared::config::NOT_PROMPT_TIMEOUT;
    use hr_shared::status::ApprovalStatus;
    use hr_shared::testing;

    const IDLE: Duration = Duration::from_millis(300);
    const YES_NO: &[u8] = b"working...\nContinue? [y/N] ";

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    /// A made-up terminal: what the conversation would read from the pty, `/proc` and the
    /// recorder, and how often it sampled the foreground group.
    struct Tty {
        caught_up: bool,
        blocked: Option<Blocked>,
        modes: Option<Modes>,
        screen: ScreenText,
        samples: usize,
        /// Who reads the terminal.
        reader: Option<u64>,
        /// No output at all for the idle window (no spinner drawing).
        quiet: bool,
    }

    impl Observe for Tty {
        fn caught_up(&self) -> bool {
            self.caught_up
        }
        fn blocked(&mut self) -> Option<Blocked> {
            self.samples += 1;
            self.blocked
        }
        fn modes(&mut self) -> Option<Modes> {
            self.modes
        }
        fn screen(&mut self) -> Option<ScreenText> {
            Some(self.screen.clone())
        }
        fn reader(&mut self) -> Option<u64> {
            self.reader
        }
        fn quiet(&self) -> bool {
            self.quiet
        }
    }

    const LINE_MODE: Modes = Modes {
        canonical: true,
        echo: true,
        eof: 4,
    };
    const RAW_MODE: Modes = Modes {
        canonical: false,
        echo: true,
        eof: 4,
    };

    /// A tool run under a conversation: a clock, the time of the last output and the
    /// terminal it shows.
    struct Run {
        conv: Conversation<'static>,
        tty: Tty,
        now: Instant,
        last_output: Instant,
    }

    impl Run {
        fn new(on_prompt: OnPrompt) -> Run {
            let settings = Box::leak(Box::new(Resolved {
                prompt_idle: IDLE,
                on_prompt,
                approval_ttl: Some(Duration::from_secs(3600)),
                ..Resolved::default()
            }));
            let config = Box::leak(Box::new(Config::default()));
            let conv = Conversation::new(Setup {
                tool: "deploy",
                label: "deploy",
                settings,
                config,
                argv: vec!["deploy".into(), "--prod".into()],
                cwd: "/srv".into(),
            });
            let now = Instant::now();
            let mut run = Run {
                conv,
                tty: Tty {
                    caught_up: true,
                    blocked: Some(Blocked {
                        cpu_ticks: 7,
                        reading: Reading::Yes,
                        pager: false,
                    }),
                    modes: Some(LINE_MODE),
                    screen: ScreenText::default(),
                    samples: 0,
                    reader: Some(41),
                    quiet: true,
                },
                now,
                last_output: now,
            };
            run.show(YES_NO);
            run
        }

        /// The tool writes and its screen becomes `bytes`.
        fn show(&mut self, bytes: &[u8]) {
            self.conv.output();
            self.tty.screen = ScreenText::rendered(10, 60, bytes);
            self.last_output = self.now;
        }

        /// A detector tick `d` after the previous one.
        fn tick_after(&mut self, d: Duration) -> Vec<Action> {
            self.now += d;
            let idle_for = self.now - self.last_output;
            self.conv.tick(self.now, idle_for, &mut self.tty)
        }

        /// Ticks through one idle window: two samples that agree, the second one past it.
        fn idle(&mut self) -> Vec<Action> {
            let first = self.tick_after(ms(200));
            assert!(first.is_empty(), "{first:?}");
            self.tick_after(ms(150))
        }

        /// Idles until the prompt is asked about.
        fn ask(&mut self) -> PromptRequest {
            match self.idle().as_slice() {
                [Action::Ask(request)] => (**request).clone(),
                other => panic!("expected a question to the store, got {other:?}"),
            }
        }

        fn reply(&mut self, resolution: PromptResolution) -> Vec<Action> {
            self.now += ms(5);
            self.conv.reply(self.now, Ok(Ok(resolution)))
        }

        fn watched(&mut self, got: Result<Watched, TryRecvError>) -> Vec<Action> {
            self.conv.watched(self.now, got, &mut self.tty)
        }

        /// Carries out a typing as the pty would take it: written in full.
        fn type_keys(&mut self, actions: Vec<Action>) -> Vec<u8> {
            let mut typing = None;
            for a in actions {
                match a {
                    Action::Type(t) => typing = Some(t),
                    Action::Consume {
                        answering: true, ..
                    } => {}
                    other => panic!("expected only typing, got {other:?}"),
                }
            }
            let t = typing.expect("keys to type");
            let keys = t.keys.clone();
            let said = self.conv.typed(t, Ok(()));
            assert!(
                matches!(said.as_slice(), [Action::Say(line)] if line.contains("answered")),
                "{said:?}"
            );
            keys
        }
    }

    fn pending(id: &str) -> Box<Approval> {
        Box::new(testing::approval(id, PromptKind::Choice))
    }

    fn decided(id: &str, status: ApprovalStatus, value: Option<&str>) -> Box<Approval> {
        let mut a = testing::approval(id, PromptKind::Choice);
        a.status = status;
        a.chosen_value = value.map(str::to_owned);
        a.decided_by = Some("alice".into());
        a.decision_channel = Some("cli".into());
        Box::new(a)
    }

    fn ended(actions: &[Action]) -> Option<&RunOutcome> {
        actions.iter().find_map(|a| match a {
            Action::End(o) => Some(o),
            _ => None,
        })
    }

    fn typed_anything(actions: &[Action]) -> bool {
        actions
            .iter()
            .any(|a| matches!(a, Action::Type(_) | Action::Write(_)))
    }

    #[test]
    fn a_question_while_blocked_is_asked() {
        let mut run = Run::new(OnPrompt::Exit);
        let request = run.ask();
        assert_eq!(request.prompt.prompt_line, "Continue? [y/N]");
        assert_eq!(request.prompt.rule, "generic:yes-no");
        assert_eq!(
            request.prompt_fingerprint,
            fingerprint::prompt("deploy", "Continue? [y/N]")
        );
        assert_eq!(request.ttl, Some(Duration::from_secs(3600)));
        assert!(request.policies.is_empty());
        assert!(run.conv.asking());
        // While the store decides, the terminal is not looked at again.
        let samples = run.tty.samples;
        assert!(run.tick_after(ms(500)).is_empty());
        assert_eq!(run.tty.samples, samples);
    }

    #[test]
    fn nothing_is_sampled_before_half_the_idle_window_or_before_the_screen_caught_up() {
        let mut run = Run::new(OnPrompt::Exit);
        assert!(run.tick_after(ms(100)).is_empty());
        assert_eq!(run.tty.samples, 0);
        run.tty.caught_up = false;
        assert!(run.tick_after(ms(400)).is_empty());
        assert!(run.tick_after(ms(400)).is_empty());
        assert_eq!(run.tty.samples, 0);
        run.tty.caught_up = true;
        assert!(run.tick_after(ms(50)).is_empty(), "first sample");
        assert!(matches!(
            run.tick_after(ms(50)).as_slice(),
            [Action::Ask(_)]
        ));
    }

    #[test]
    fn steady_but_not_idle_long_enough_is_not_a_prompt() {
        let mut run = Run::new(OnPrompt::Exit);
        assert!(run.tick_after(ms(200)).is_empty());
        assert!(run.tick_after(ms(50)).is_empty(), "250 ms idle, steady");
        assert_eq!(run.tty.samples, 2);
        assert!(matches!(
            run.tick_after(ms(60)).as_slice(),
            [Action::Ask(_)]
        ));
    }

    #[test]
    fn a_group_using_cpu_is_not_at_a_prompt() {
        let mut run = Run::new(OnPrompt::Exit);
        for i in 0..20 {
            run.tty.blocked = Some(Blocked {
                cpu_ticks: i,
                reading: Reading::Yes,
                pager: false,
            });
            assert!(run.tick_after(ms(100)).is_empty());
        }
        // Once it stops, the next sample agrees with the last one: a prompt.
        assert!(matches!(
            run.tick_after(ms(100)).as_slice(),
            [Action::Ask(_)]
        ));
    }

    #[test]
    fn a_group_not_reading_the_terminal_is_not_at_a_prompt() {
        let mut run = Run::new(OnPrompt::Exit);
        run.tty.blocked = Some(Blocked {
            cpu_ticks: 7,
            reading: Reading::No,
            pager: false,
        });
        for _ in 0..10 {
            assert!(run.tick_after(ms(200)).is_empty());
        }
        run.tty.blocked = None;
        for _ in 0..10 {
            assert!(run.tick_after(ms(200)).is_empty(), "no foreground group");
        }
    }

    #[test]
    fn an_unknown_reading_counts_only_with_a_prompt_shaped_last_line() {
        let mut run = Run::new(OnPrompt::Exit);
        run.tty.blocked = Some(Blocked {
            cpu_ticks: 7,
            reading: Reading::Unknown,
            pager: false,
        });
        run.show(b"compiling\n");
        for _ in 0..10 {
            assert!(run.tick_after(ms(200)).is_empty(), "neither asked nor EOF");
        }
        run.show(b"[sudo] password for me: ");
        run.tty.modes = Some(Modes {
            echo: false,
            ..LINE_MODE
        });
        let actions = run.idle();
        assert!(
            matches!(ended(&actions), Some(RunOutcome::SecretRefused { .. })),
            "{actions:?}"
        );
    }

    #[test]
    fn a_read_with_nothing_asked_gets_eof_once_per_idle_window() {
        let mut run = Run::new(OnPrompt::Exit);
        run.show(b"reading input\n");
        run.tty.modes = Some(Modes {
            eof: 0x1a,
            ..LINE_MODE
        });
        assert!(matches!(run.idle().as_slice(), [Action::Write(b)] if b == &[0x1a]));
        // The tool reads again at once: the next EOF waits for the window to pass.
        let mut eofs = Vec::new();
        for i in 1..=12 {
            if !run.tick_after(ms(50)).is_empty() {
                eofs.push(i * 50);
            }
        }
        assert_eq!(eofs, vec![300, 600], "one per {IDLE:?}");

        // An unset VEOF is ^D.
        let mut run = Run::new(OnPrompt::Exit);
        run.show(b"");
        run.tty.modes = Some(Modes {
            eof: 0,
            ..LINE_MODE
        });
        assert!(matches!(run.idle().as_slice(), [Action::Write(b)] if b == &[4]));
    }

    #[test]
    fn a_raw_read_with_nothing_asked_gets_eof_at_once() {
        // `bash -c 'read -e x'`, `bc -q`: readline in raw mode, an empty screen.
        let mut run = Run::new(OnPrompt::Exit);
        run.show(b"");
        run.tty.modes = Some(RAW_MODE);
        assert!(matches!(run.idle().as_slice(), [Action::Write(b)] if b == &[4]));
        assert!(!run.conv.asking());
    }

    #[test]
    fn a_full_screen_program_that_asks_nothing_yet_gets_no_eof() {
        // Codex CLI: the alternate screen, cleared, its menu drawn seconds later; ^D would
        // quit it.
        let mut run = Run::new(OnPrompt::Exit);
        run.show(b"\x1b[?1049h\x1b[1;1H\x1b[J");
        run.tty.modes = Some(RAW_MODE);
        assert!(run.idle().is_empty());
        assert!(run.tick_after(ms(2000)).is_empty());
        // Mouse reporting on is a full-screen program too.
        let mut run = Run::new(OnPrompt::Exit);
        run.show(b"\x1b[?1000h");
        run.tty.modes = Some(RAW_MODE);
        assert!(run.idle().is_empty());
    }

    #[test]
    fn a_hidden_cursor_left_on_a_logo_is_no_prompt() {
        // The cursor hidden on the last row of an animated logo, nothing recognised: what
        // the row says is not asked.
        let mut run = Run::new(OnPrompt::Exit);
        run.show(b"\x1b[?25l\x1b[?1049h   Welcome\r\n     \xe2\xa0\x89\xe2\xa0\x9b\xe2\xa0\xbb");
        run.tty.modes = Some(RAW_MODE);
        assert!(run.idle().is_empty());
        assert!(run.tick_after(ms(2000)).is_empty());
        // @clack/prompts hides the cursor at every prompt, outside the alternate screen: its
        // question row is what is asked, not the field the cursor was left in.
        let mut run = Run::new(OnPrompt::Exit);
        run.show(
            "\x1b[?25l\u{25c6}  What is your project name?\r\n\u{2502}  \x1b[2mmy-app\x1b[0m\r\n\u{2514}"
                .as_bytes(),
        );
        run.tty.modes = Some(RAW_MODE);
        let request = run.ask();
        assert_eq!(request.prompt.prompt_line, "What is your project name?");
        // Its field shows a dim placeholder: no default, only a typed answer.
        assert_eq!(request.prompt.default, None);
        // A field drawn plain holds a value: Enter submits it as it stands.
        let mut run = Run::new(OnPrompt::Exit);
        run.show(
            "\x1b[?25l\u{25c6}  What is your project name?\r\n\u{2502}  my-app\u{2588}\r\n\u{2514}"
                .as_bytes(),
        );
        run.tty.modes = Some(RAW_MODE);
        let request = run.ask();
        assert_eq!(request.prompt.rule, "generic:text-prefilled");
        assert_eq!(request.prompt.default.as_deref(), Some("my-app"));
        // The same row with the cursor shown is asked about.
        let mut run = Run::new(OnPrompt::Exit);
        run.show(b"   Welcome\r\n     \xe2\xa0\x89\xe2\xa0\x9b\xe2\xa0\xbb");
        run.tty.modes = Some(RAW_MODE);
        assert!(matches!(run.idle().as_slice(), [Action::Ask(_)]));
    }

    #[test]
    fn a_bare_repl_prompt_gets_eof_in_raw_and_line_mode() {
        for (modes, shown) in [
            (
                RAW_MODE,
                &b"Python 3.11.7\nType \"help\" for more information.\n>>> "[..],
            ),
            (RAW_MODE, b"SQLite version 3.40.1\nsqlite> "),
            (RAW_MODE, b"bash-5.2# "),
            (LINE_MODE, b"$ "),
        ] {
            let mut run = Run::new(OnPrompt::Exit);
            run.show(shown);
            run.tty.modes = Some(modes);
            let actions = run.idle();
            assert!(
                matches!(actions.as_slice(), [Action::Write(b)] if b == &[4]),
                "{}: {actions:?}",
                String::from_utf8_lossy(shown)
            );
        }
    }

    #[test]
    fn a_bare_prompt_under_a_question_or_menu_is_asked() {
        for modes in [RAW_MODE, LINE_MODE] {
            let mut run = Run::new(OnPrompt::Exit);
            run.show(b"Which environment should be deployed?\n> ");
            run.tty.modes = Some(modes);
            let request = run.ask();
            assert_eq!(request.prompt.prompt_line, ">");
            assert!(request.prompt.question.contains("Which environment"));

            let mut run = Run::new(OnPrompt::Exit);
            run.show(b"1) Proceed with standard installation\n2) Customize installation\n3) Cancel installation\n>");
            run.tty.modes = Some(modes);
            assert_eq!(run.ask().prompt.rule, "generic:numbered-menu");
        }
    }

    #[test]
    fn a_raw_menu_above_an_empty_cursor_line_is_asked() {
        let mut run = Run::new(OnPrompt::Exit);
        run.show(b"Deploy where?\r\n1. staging\r\n2. production\r\n");
        run.tty.modes = Some(RAW_MODE);
        let request = run.ask();
        assert_eq!(request.prompt.rule, "generic:numbered-menu");
        let values: Vec<&str> = request
            .prompt
            .options
            .iter()
            .map(|o| o.value.as_str())
            .collect();
        assert_eq!(values, ["1", "2"]);
    }

    #[test]
    fn a_pager_is_paged_through_and_quit_at_its_end_never_asked() {
        let mut run = Run::new(OnPrompt::Exit);
        run.tty.blocked = Some(Blocked {
            cpu_ticks: 7,
            reading: Reading::Yes,
            pager: true,
        });
        run.tty.modes = Some(RAW_MODE);
        run.show(b"line 1\nline 2\nlines.txt");
        assert!(matches!(run.idle().as_slice(), [Action::Write(b)] if b == b" "));
        run.show(b"line 3\nline 4\n:");
        assert!(matches!(run.idle().as_slice(), [Action::Write(b)] if b == b" "));
        run.show(b"line 5\n(END)");
        assert!(matches!(run.idle().as_slice(), [Action::Write(b)] if b == b"q"));
        // Even a pager showing something question-shaped is not asked about.
        run.show(b"Really quit? [y/N]\nlines.txt (END)");
        assert!(matches!(run.idle().as_slice(), [Action::Write(b)] if b == b"q"));
        assert!(!run.conv.asking());
    }

    /// The time waited, when `actions` end what waits with nothing asked.
    fn unasked_end(actions: &[Action]) -> Option<Duration> {
        actions.iter().find_map(|a| match a {
            Action::EndUnasked { waited, .. } => Some(*waited),
            _ => None,
        })
    }

    /// Ticks every `every` for `total`, the tool drawing nothing, checking that nothing is
    /// typed or asked: when (after the first tick) what waits is ended, if it is.
    fn tick_until_ended(run: &mut Run, every: Duration, total: Duration) -> Option<Duration> {
        let start = run.now;
        while run.now < start + total {
            let actions = run.tick_after(every);
            assert!(!typed_anything(&actions), "{actions:?}");
            assert!(
                !actions.iter().any(|a| matches!(a, Action::Ask(_))),
                "{actions:?}"
            );
            if let Some(waited) = unasked_end(&actions) {
                assert!(waited >= NOT_PROMPT_TIMEOUT, "{waited:?}");
                return Some(run.now - start);
            }
        }
        None
    }

    /// vim's screen: the alternate screen, a column of `~`, the file name at the bottom.
    const VIM: &[u8] = b"\x1b[?1049h\x1b[H\x1b[2J\n~\n~\n~\n\"notes.txt\" [New]\x1b[1;1H";

    #[test]
    fn an_editor_waiting_with_nothing_asked_is_ended_after_the_not_prompt_timeout() {
        let mut run = Run::new(OnPrompt::Exit);
        run.show(VIM);
        run.tty.modes = Some(RAW_MODE);
        let at =
            tick_until_ended(&mut run, ms(100), Duration::from_secs(30)).expect("vim is ended");
        // Never sent EOF or anything else; ended once the timeout has passed since the first
        // look that found it waiting (the idle window after it drew).
        assert!(at >= NOT_PROMPT_TIMEOUT, "{at:?}");
        assert!(at <= NOT_PROMPT_TIMEOUT + IDLE * 2, "{at:?}");
        assert!(!run.conv.asking());
        // What comes next is counted afresh.
        assert_eq!(tick_until_ended(&mut run, ms(100), ms(4000)), None);
    }

    #[test]
    fn a_program_redrawing_every_second_between_looks_is_still_ended() {
        // `top`: raw mode, the cursor hidden, the whole screen drawn anew every second.
        let mut run = Run::new(OnPrompt::Exit);
        run.tty.modes = Some(RAW_MODE);
        let mut ended = None;
        for second in 0..30u64 {
            run.show(
                format!(
                    "\x1b[?25l\x1b[Htop - up {second} s\nTasks: {} total\n",
                    90 + second
                )
                .as_bytes(),
            );
            for _ in 0..10 {
                let actions = run.tick_after(ms(100));
                assert!(!typed_anything(&actions), "no EOF, no keys: {actions:?}");
                if unasked_end(&actions).is_some() {
                    ended.get_or_insert(second);
                }
            }
        }
        let second = ended.expect("top is ended");
        assert!((5..=7).contains(&second), "{second}");
    }

    #[test]
    fn a_program_still_drawing_or_not_drawn_yet_or_told_to_wait_is_left_alone() {
        // A spinner keeps drawing: at work, not waiting.
        let mut run = Run::new(OnPrompt::Exit);
        run.show(b"\x1b[?25l\xe2\x9c\xbb Thinking\xe2\x80\xa6");
        run.tty.modes = Some(RAW_MODE);
        run.tty.quiet = false;
        assert_eq!(
            tick_until_ended(&mut run, ms(100), Duration::from_secs(30)),
            None
        );
        // A blank alternate screen: still starting (Codex draws its menu seconds later).
        let mut run = Run::new(OnPrompt::Exit);
        run.show(b"\x1b[?1049h\x1b[H\x1b[2J");
        run.tty.modes = Some(RAW_MODE);
        assert_eq!(
            tick_until_ended(&mut run, ms(100), Duration::from_secs(30)),
            None
        );
        // not_prompt_timeout = "none": it waits (for the stall timeout).
        let mut run = Run::new(OnPrompt::Exit);
        let settings = Box::leak(Box::new(Resolved {
            not_prompt_timeout: None,
            ..run.conv.setup.settings.clone()
        }));
        run.conv.setup.settings = settings;
        run.show(VIM);
        run.tty.modes = Some(RAW_MODE);
        assert_eq!(
            tick_until_ended(&mut run, ms(100), Duration::from_secs(30)),
            None
        );
    }

    #[test]
    fn a_stretch_of_output_longer_than_the_timeout_counts_again_from_the_next_look() {
        let mut run = Run::new(OnPrompt::Exit);
        run.tty.modes = Some(RAW_MODE);
        run.show(VIM);
        assert_eq!(tick_until_ended(&mut run, ms(100), ms(3000)), None);
        // Six seconds of output with no look in between (a tool at work).
        for i in 0..60 {
            run.show(format!("\x1b[?1049h\x1b[5;1H~ working {i}\x1b[1;1H").as_bytes());
            assert!(run.tick_after(ms(100)).is_empty());
        }
        let at = tick_until_ended(&mut run, ms(100), Duration::from_secs(30)).expect("ended");
        assert!(at >= NOT_PROMPT_TIMEOUT, "counted afresh: {at:?}");
    }

    #[test]
    fn a_question_from_the_reader_just_given_eof_gets_eof_again() {
        // IPython: EOF at its bare prompt, then `Do you really want to exit ([y]/n)?` from
        // the same process.
        let mut run = Run::new(OnPrompt::Exit);
        run.tty.modes = Some(RAW_MODE);
        run.show(b"IPython 9.18.1 -- An enhanced Interactive Python.\n\nIn [1]: ");
        assert!(matches!(run.idle().as_slice(), [Action::Write(b)] if b == &[4]));
        run.tty.modes = Some(LINE_MODE);
        run.show(b"\nDo you really want to exit ([y]/n)? ");
        let actions = run.idle();
        assert!(
            matches!(actions.as_slice(), [Action::Write(b)] if b == &[4]),
            "EOF again, never an approval: {actions:?}"
        );
        // Another process asking after that EOF asks for itself.
        run.show(b"\nDeploy to production? [y/N] ");
        run.tty.reader = Some(99);
        assert!(matches!(run.idle().as_slice(), [Action::Ask(_)]));
        // Where /proc will not say who reads, a question is asked.
        let mut run = Run::new(OnPrompt::Exit);
        run.tty.reader = None;
        run.show(b">>> ");
        assert!(matches!(run.idle().as_slice(), [Action::Write(_)]));
        run.show(b"\nDo you really want to exit ([y]/n)? ");
        assert!(matches!(run.idle().as_slice(), [Action::Ask(_)]));
    }

    #[test]
    fn a_pinentry_dialog_is_a_secret_in_raw_mode() {
        // pinentry-curses: raw mode, echo off, the cursor at the start of the entry field.
        let mut run = Run::new(OnPrompt::Exit);
        run.show(
            b"\x1b[2J\x1b[3;5H\xe2\x94\x82 Please enter the passphrase\x1b[5;5H\xe2\x94\x82 Passphrase: ________\x1b[5;19H",
        );
        run.tty.modes = Some(Modes {
            canonical: false,
            echo: false,
            eof: 4,
        });
        let actions = run.idle();
        assert!(
            matches!(ended(&actions), Some(RunOutcome::SecretRefused { prompt, .. }) if prompt.contains("Passphrase:")),
            "{actions:?}"
        );
    }

    #[test]
    fn echo_off_in_line_mode_is_a_secret_and_refused() {
        let mut run = Run::new(OnPrompt::Wait);
        run.show(b"Password: ");
        run.tty.modes = Some(Modes {
            echo: false,
            ..LINE_MODE
        });
        let actions = run.idle();
        let [Action::End(outcome)] = actions.as_slice() else {
            panic!("{actions:?}");
        };
        let RunOutcome::SecretRefused {
            prompt,
            alternative,
        } = outcome
        else {
            panic!("{outcome:?}");
        };
        assert_eq!(prompt, "Password:");
        assert!(!alternative.is_empty());
        assert_eq!(outcome.exit_code(), 93);
        assert!(!run.conv.asking());
    }

    #[test]
    fn a_stored_answer_is_typed() {
        let mut run = Run::new(OnPrompt::Exit);
        run.ask();
        let actions = run.reply(PromptResolution::Answer {
            approval: decided("AP-1", ApprovalStatus::Approved, Some("y")),
            value: "y".into(),
        });
        assert!(!run.conv.asking());
        assert_eq!(run.type_keys(actions), b"y\r");
    }

    #[test]
    fn an_answer_after_the_output_moved_on_is_released_not_typed() {
        let mut run = Run::new(OnPrompt::Exit);
        run.ask();
        run.show(b"Continue? [y/N] \nno longer asking\n");
        let actions = run.reply(PromptResolution::Answer {
            approval: decided("AP-1", ApprovalStatus::Approved, Some("y")),
            value: "y".into(),
        });
        assert!(!typed_anything(&actions), "{actions:?}");
        assert!(
            matches!(actions.as_slice(), [Action::Say(_), Action::Release(id)] if id == "AP-1"),
            "{actions:?}"
        );
    }

    #[test]
    fn an_answer_that_cannot_be_typed_ends_the_tool() {
        let mut run = Run::new(OnPrompt::Exit);
        run.ask();
        let actions = run.reply(PromptResolution::Answer {
            approval: decided("AP-1", ApprovalStatus::Approved, Some("maybe")),
            value: "maybe".into(),
        });
        assert!(
            matches!(ended(&actions), Some(RunOutcome::Rejected { why, .. }) if why.contains("cannot be typed")),
            "{actions:?}"
        );
        assert!(!typed_anything(&actions));
    }

    #[test]
    fn a_rejection_ends_the_tool_with_91() {
        let mut run = Run::new(OnPrompt::Exit);
        run.ask();
        let actions = run.reply(PromptResolution::Rejected {
            approval: decided("AP-1", ApprovalStatus::Rejected, None),
        });
        let outcome = ended(&actions).expect("the tool ends");
        assert_eq!(outcome.exit_code(), 91);
        assert!(
            matches!(outcome, RunOutcome::Rejected { approval_id, why } if approval_id == "AP-1" && why == "rejected by alice via cli"),
            "{outcome:?}"
        );
        assert!(!typed_anything(&actions));
    }

    #[test]
    fn pending_in_exit_mode_ends_the_tool_with_90() {
        let mut run = Run::new(OnPrompt::Exit);
        run.ask();
        let actions = run.reply(PromptResolution::Pending {
            approval: pending("AP-1"),
            taken_over: true,
        });
        let [
            Action::Announce {
                waiting: false,
                taken_over: true,
                ..
            },
            Action::End(outcome),
        ] = actions.as_slice()
        else {
            panic!("{actions:?}");
        };
        assert_eq!(
            outcome,
            &RunOutcome::ApprovalPending {
                approval_id: "AP-1".into()
            }
        );
        assert_eq!(outcome.exit_code(), 90);
        assert!(!run.conv.waiting());
    }

    /// Wait mode up to the watcher: the approval is announced and watched.
    fn waiting_run() -> Run {
        let mut run = Run::new(OnPrompt::Wait);
        run.ask();
        let actions = run.reply(PromptResolution::Pending {
            approval: pending("AP-1"),
            taken_over: false,
        });
        assert!(
            matches!(
                actions.as_slice(),
                [
                    Action::Announce {
                        waiting: true,
                        taken_over: false,
                        ..
                    },
                    Action::Watch(a)
                ] if a.approval_id == "AP-1"
            ),
            "{actions:?}"
        );
        assert!(run.conv.waiting());
        assert!(run.watched(Err(TryRecvError::Empty)).is_empty());
        let samples = run.tty.samples;
        assert!(run.tick_after(ms(1000)).is_empty(), "kept at its prompt");
        assert_eq!(run.tty.samples, samples);
        run
    }

    #[test]
    fn pending_in_wait_mode_types_the_approved_value() {
        let mut run = waiting_run();
        let actions = run.watched(Ok(Watched::Decided(decided(
            "AP-1",
            ApprovalStatus::Approved,
            Some("n"),
        ))));
        assert!(
            matches!(actions.first(), Some(Action::Consume { approval_id, answering: true }) if approval_id == "AP-1"),
            "{actions:?}"
        );
        assert_eq!(run.type_keys(actions), b"n\r");
        assert!(!run.conv.waiting());
    }

    /// Issue 12 item 7: a tool that asked one thing, gave up its read and asks another gets
    /// nothing typed for the first question's decision; the new screen is asked about.
    #[test]
    fn a_decision_for_a_question_no_longer_asked_is_not_typed() {
        let mut run = waiting_run();
        run.show(b"Run the unit tests? [y/N] \r\nDROP the production database? [y/N] ");
        let actions = run.watched(Ok(Watched::Decided(decided(
            "AP-1",
            ApprovalStatus::Approved,
            Some("y"),
        ))));
        // Held a while (a frame half drawn looks the same), never typed; then given back.
        assert!(actions.is_empty(), "{actions:?}");
        run.now += HOLD + ms(1);
        let actions = run.watched(Err(TryRecvError::Disconnected));
        assert!(
            matches!(actions.as_slice(), [Action::Say(line)] if line.contains("not typed") && line.contains("DROP")),
            "{actions:?}"
        );
        assert!(!run.conv.waiting());
        // The new question is asked about as any prompt is.
        let request = run.ask();
        assert!(request.prompt.prompt_line.contains("DROP"), "{request:?}");
    }

    /// The same question drawn again (a read that timed out and asked anew): another
    /// question, not typed into.
    #[test]
    fn a_decision_for_a_question_drawn_again_is_not_typed() {
        let mut run = waiting_run();
        run.show(YES_NO);
        let actions = run.watched(Ok(Watched::Decided(decided(
            "AP-1",
            ApprovalStatus::Approved,
            Some("y"),
        ))));
        assert!(actions.is_empty(), "{actions:?}");
        run.now += HOLD + ms(1);
        let actions = run.watched(Err(TryRecvError::Disconnected));
        assert!(
            matches!(actions.as_slice(), [Action::Say(line)] if line.contains("wrote something since")),
            "{actions:?}"
        );
        assert!(!typed_anything(&actions));
    }

    /// The same prompt line, but the screen around it changed (`2 to add` became `3 to
    /// add`): not typed either.
    #[test]
    fn a_decision_for_a_changed_screen_is_not_typed() {
        let mut run = Run::new(OnPrompt::Wait);
        run.show(b"Plan: 2 to add\r\nProceed? [y/N] ");
        run.ask();
        run.reply(PromptResolution::Pending {
            approval: pending("AP-1"),
            taken_over: false,
        });
        assert!(run.conv.waiting());
        run.show(b"Plan: 3 to add\r\nProceed? [y/N] ");
        let actions = run.watched(Ok(Watched::Decided(decided(
            "AP-1",
            ApprovalStatus::Approved,
            Some("y"),
        ))));
        assert!(actions.is_empty(), "held a while: {actions:?}");
        run.now += HOLD + ms(1);
        let actions = run.watched(Err(TryRecvError::Disconnected));
        assert!(
            matches!(actions.as_slice(), [Action::Say(line)] if line.contains("screen")),
            "{actions:?}"
        );
        assert!(!typed_anything(&actions));
    }

    #[test]
    fn a_decision_that_comes_between_two_reads_is_held_then_typed() {
        // Claude Code redraws its blinking bullet: for an instant it is not reading.
        let mut run = waiting_run();
        let reading = run.tty.blocked;
        run.tty.blocked = Some(Blocked {
            cpu_ticks: 7,
            reading: Reading::No,
            pager: false,
        });
        let yes = || {
            Ok(Watched::Decided(decided(
                "AP-1",
                ApprovalStatus::Approved,
                Some("y"),
            )))
        };
        let actions = run.watched(yes());
        assert!(actions.is_empty(), "held, not given back: {actions:?}");
        assert!(run.conv.waiting());
        // The watcher has ended; the held decision is looked at again on the next tick.
        let actions = run.watched(Err(TryRecvError::Disconnected));
        assert!(actions.is_empty(), "{actions:?}");
        run.tty.blocked = reading;
        let actions = run.watched(Err(TryRecvError::Disconnected));
        assert!(
            typed_anything(&actions),
            "typed once it reads again: {actions:?}"
        );
        // Not reading for longer than the hold: given back, as before.
        let mut run = waiting_run();
        run.tty.blocked = Some(Blocked {
            cpu_ticks: 7,
            reading: Reading::No,
            pager: false,
        });
        assert!(run.watched(yes()).is_empty());
        run.now += HOLD + ms(1);
        let actions = run.watched(Err(TryRecvError::Empty));
        assert!(
            matches!(actions.as_slice(), [Action::Say(line)] if line.contains("no longer waits")),
            "{actions:?}"
        );
        assert!(!typed_anything(&actions));
    }

    /// Issue 27: a question nobody has decided yet that left the screen (the tool's own
    /// timeout took its default and it went on, or it asks something else now) is
    /// withdrawn once it has been gone for a while, and what shows now is asked about; the
    /// same question drawn again, or a frame without it for an instant, keeps it.
    #[test]
    fn a_pending_question_that_left_the_screen_is_withdrawn() {
        let mut run = waiting_run();
        // Drawn again (a clock above it ticked): still asked, however long.
        run.show(b"working... 2s\nContinue? [y/N] ");
        for _ in 0..10 {
            run.now += WITHDRAW_AFTER;
            assert!(run.watched(Err(TryRecvError::Empty)).is_empty());
        }
        assert!(run.conv.waiting());
        // Gone for an instant, then back: kept.
        run.show(b"working... 3s\n");
        assert!(run.watched(Err(TryRecvError::Empty)).is_empty());
        run.now += WITHDRAW_AFTER - ms(100);
        assert!(run.watched(Err(TryRecvError::Empty)).is_empty());
        run.show(b"working... 4s\nContinue? [y/N] ");
        run.now += ms(200);
        assert!(run.watched(Err(TryRecvError::Empty)).is_empty());
        assert!(run.conv.waiting(), "the clock restarts once it is back");
        // Another question for longer: withdrawn, saying what it asks now.
        run.show(b"no answer: continuing\nDelete the cache too? [y/N] ");
        assert!(run.watched(Err(TryRecvError::Empty)).is_empty());
        run.now += WITHDRAW_AFTER - ms(1);
        assert!(run.watched(Err(TryRecvError::Empty)).is_empty());
        run.now += ms(2);
        let actions = run.watched(Err(TryRecvError::Empty));
        assert!(
            matches!(actions.as_slice(), [
                Action::Say(line),
                Action::Withdraw { approval_id, why },
            ] if approval_id == "AP-1" && line.contains("AP-1 withdrawn")
                && why.contains("Continue? [y/N]") && why.contains("Delete the cache")),
            "{actions:?}"
        );
        assert!(!run.conv.waiting());
        assert!(!typed_anything(&actions));
        // The new question is asked about as any prompt is.
        let request = run.ask();
        assert!(request.prompt.prompt_line.contains("Delete"), "{request:?}");

        // Nothing asked any more (the tool went on working): withdrawn too.
        let mut run = waiting_run();
        run.show(b"no answer: continuing\ncompiling...\n");
        assert!(run.watched(Err(TryRecvError::Empty)).is_empty());
        run.now += WITHDRAW_AFTER;
        let actions = run.watched(Err(TryRecvError::Empty));
        assert!(
            matches!(actions.as_slice(), [_, Action::Withdraw { why, .. }] if why.contains("last line is \"compiling...\"")),
            "{actions:?}"
        );
    }

    #[test]
    fn pending_in_wait_mode_then_rejected_ends_with_91() {
        let mut run = waiting_run();
        let actions = run.watched(Ok(Watched::Decided(decided(
            "AP-1",
            ApprovalStatus::Rejected,
            None,
        ))));
        assert_eq!(ended(&actions).map(RunOutcome::exit_code), Some(91));
        // The no is used up by this run: it answers no later run.
        assert!(
            matches!(actions.first(), Some(Action::Consume { approval_id, answering: false }) if approval_id == "AP-1"),
            "{actions:?}"
        );
        assert!(!typed_anything(&actions));
        assert!(!run.conv.waiting());
    }

    #[test]
    fn expired_with_a_default_answers_and_plain_expiry_rejects() {
        let mut run = waiting_run();
        let actions = run.watched(Ok(Watched::Decided(decided(
            "AP-1",
            ApprovalStatus::Expired,
            Some("n"),
        ))));
        assert_eq!(run.type_keys(actions), b"n\r");

        let mut run = waiting_run();
        let actions = run.watched(Ok(Watched::Decided(decided(
            "AP-1",
            ApprovalStatus::Expired,
            None,
        ))));
        assert_eq!(ended(&actions).map(RunOutcome::exit_code), Some(91));
    }

    #[test]
    fn a_lost_or_missing_watcher_ends_the_wait() {
        let mut run = waiting_run();
        let actions = run.watched(Err(TryRecvError::Disconnected));
        assert!(
            matches!(ended(&actions), Some(RunOutcome::Unrecorded { prompt, .. }) if prompt == "Continue? [y/N]"),
            "{actions:?}"
        );
        assert!(!run.conv.waiting());

        let mut run = waiting_run();
        let actions = run.conv.unwatched();
        assert_eq!(ended(&actions).map(RunOutcome::exit_code), Some(90));
        assert!(!run.conv.waiting());
    }

    #[test]
    fn a_silent_store_ends_the_tool_after_the_ask_timeout() {
        let mut run = Run::new(OnPrompt::Exit);
        run.ask();
        let asked = run.now;
        assert!(
            run.conv
                .reply(asked + ASK_TIMEOUT - ms(1), Err(TryRecvError::Empty))
                .is_empty()
        );
        assert!(run.conv.asking());
        let actions = run
            .conv
            .reply(asked + ASK_TIMEOUT, Err(TryRecvError::Empty));
        assert!(
            matches!(ended(&actions), Some(RunOutcome::Unrecorded { why, .. }) if why == "the state store did not answer"),
            "{actions:?}"
        );

        let mut run = Run::new(OnPrompt::Exit);
        run.ask();
        let actions = run.conv.reply(run.now, Err(TryRecvError::Disconnected));
        assert!(matches!(
            ended(&actions),
            Some(RunOutcome::Unrecorded { .. })
        ));

        let mut run = Run::new(OnPrompt::Exit);
        run.ask();
        let actions = run.conv.reply(run.now, Ok(Err("disk full".into())));
        assert!(
            matches!(ended(&actions), Some(RunOutcome::Unrecorded { why, .. }) if why == "disk full"),
            "{actions:?}"
        );
        assert_eq!(ended(&actions).map(RunOutcome::exit_code), Some(125));
    }

    #[test]
    fn after_typing_the_same_screen_is_no_new_prompt_until_output() {
        let mut run = Run::new(OnPrompt::Exit);
        run.ask();
        let actions = run.reply(PromptResolution::Answer {
            approval: decided("AP-1", ApprovalStatus::Approved, Some("y")),
            value: "y".into(),
        });
        run.type_keys(actions);
        let samples = run.tty.samples;
        for _ in 0..10 {
            assert!(run.tick_after(ms(300)).is_empty());
        }
        assert_eq!(run.tty.samples, samples, "not even sampled");
        // The tool answers with the same question again: that is a new prompt.
        run.show(YES_NO);
        run.ask();
    }

    #[test]
    fn keys_that_did_not_reach_the_tool_leave_the_prompt_to_be_asked_again() {
        let mut run = Run::new(OnPrompt::Exit);
        run.ask();
        let actions = run.reply(PromptResolution::Answer {
            approval: decided("AP-1", ApprovalStatus::Approved, Some("y")),
            value: "y".into(),
        });
        let Some(Action::Type(t)) = actions.into_iter().next() else {
            panic!("keys to type");
        };
        let said = run
            .conv
            .typed(t, Err(io::Error::from_raw_os_error(libc::EIO)));
        assert!(
            matches!(said.as_slice(), [Action::Say(line)] if line.contains("cannot type the answer")),
            "{said:?}"
        );
        assert!(matches!(
            run.tick_after(ms(10)).as_slice(),
            [Action::Ask(_)]
        ));
    }

    #[test]
    fn a_raw_answer_echoed_on_its_line_gets_enter() {
        let mut run = Run::new(OnPrompt::Exit);
        run.tty.modes = Some(RAW_MODE);
        run.ask();
        let actions = run.reply(PromptResolution::Answer {
            approval: decided("AP-1", ApprovalStatus::Approved, Some("y")),
            value: "y".into(),
        });
        assert_eq!(run.type_keys(actions), b"y");
        // The tool echoes the key and still waits on the same line: it wants Enter.
        run.show(b"working...\nContinue? [y/N] y");
        assert!(
            matches!(run.idle().as_slice(), [Action::Write(b)] if b == b"\r"),
            "Enter"
        );
        for _ in 0..10 {
            assert!(run.tick_after(ms(300)).is_empty(), "once, then quiet");
        }
    }

    #[test]
    fn a_raw_answer_taken_at_once_needs_no_enter() {
        let mut run = Run::new(OnPrompt::Exit);
        run.tty.modes = Some(RAW_MODE);
        run.ask();
        let actions = run.reply(PromptResolution::Answer {
            approval: decided("AP-1", ApprovalStatus::Approved, Some("y")),
            value: "y".into(),
        });
        run.type_keys(actions);
        // The tool moved on to another question: that one is asked, no Enter is sent —
        // once a person's pause after the answer has passed.
        run.show(b"Continue? [y/N] y\nReally? [y/N] ");
        assert!(
            run.idle().is_empty(),
            "asked within ANSWER_GAP of the answer"
        );
        let asked = run.tick_after(ANSWER_GAP);
        let [Action::Ask(request)] = asked.as_slice() else {
            panic!("expected a question to the store, got {asked:?}");
        };
        assert_eq!(request.prompt.prompt_line, "Really? [y/N]");
    }

    #[test]
    fn a_stopped_conversation_ignores_late_replies() {
        let mut run = Run::new(OnPrompt::Exit);
        run.ask();
        run.conv.stop();
        assert!(!run.conv.asking());
        let actions = run.reply(PromptResolution::Answer {
            approval: decided("AP-1", ApprovalStatus::Approved, Some("y")),
            value: "y".into(),
        });
        assert!(actions.is_empty(), "{actions:?}");
    }

    /// An @inquirer-style select menu with the highlight on item `at`, the cursor parked
    /// on the key hint below it.
    fn menu_screen(at: usize) -> Vec<u8> {
        let mut out = b"? Pick a color\n".to_vec();
        for (i, item) in ["red", "green", "blue"].iter().enumerate() {
            let pointer = if i == at { "\x1b[36m\u{276f} " } else { "  " };
            out.extend(format!("{pointer}{item}\x1b[0m\n").as_bytes());
        }
        out.extend("\n\u{2191}\u{2193} navigate".as_bytes());
        out
    }

    fn writes(actions: &[Action]) -> Vec<Vec<u8>> {
        actions
            .iter()
            .filter_map(|a| match a {
                Action::Write(k) => Some(k.clone()),
                _ => None,
            })
            .collect()
    }

    /// Settles after the tool drew: ticks until the conversation acts (or gives up).
    fn settle(run: &mut Run) -> Vec<Action> {
        for _ in 0..20 {
            let actions = run.tick_after(ms(50));
            if !actions.is_empty() {
                return actions;
            }
        }
        Vec::new()
    }

    fn answered_select(run: &mut Run, value: &str) -> Vec<Action> {
        run.tty.modes = Some(RAW_MODE);
        run.show(&menu_screen(1));
        let request = run.ask();
        assert_eq!(request.prompt.rule, "generic:select");
        assert_eq!(request.prompt.prompt_line, "? Pick a color");
        assert_eq!(request.prompt.default.as_deref(), Some("green"));
        run.reply(PromptResolution::Answer {
            approval: decided("AP-1", ApprovalStatus::Approved, Some(value)),
            value: value.into(),
        })
    }

    #[test]
    fn a_select_menu_is_answered_by_moving_the_highlight_and_checking_it() {
        let mut run = Run::new(OnPrompt::Exit);
        let first = answered_select(&mut run, "blue");
        assert!(
            first.is_empty(),
            "nothing is typed before the menu is looked at: {first:?}"
        );
        let step = settle(&mut run);
        assert_eq!(writes(&step), [b"\x1b[B".to_vec()], "one arrow down");
        // Until the tool draws the moved highlight, nothing more is sent.
        assert!(run.tick_after(ms(50)).is_empty());
        run.show(&menu_screen(2));
        let done = settle(&mut run);
        assert_eq!(
            writes(&done),
            [b"\r".to_vec()],
            "Enter once blue is highlighted"
        );
        assert!(
            done.iter()
                .any(|a| matches!(a, Action::Say(l) if l.contains("answered")))
        );
        // Upwards, in application cursor-key mode.
        let mut run = Run::new(OnPrompt::Exit);
        answered_select(&mut run, "red");
        run.tty.screen.app_cursor = true;
        assert_eq!(writes(&settle(&mut run)), [b"\x1bOA".to_vec()]);
    }

    /// A check-box menu: `at` highlighted, `checked` ticked.
    fn checkbox_screen(at: usize, checked: [bool; 3]) -> Vec<u8> {
        let mut s = "\x1b[H\x1b[2J? Pick toppings\r\n".to_owned();
        for (i, item) in ["cheese", "ham", "olives"].iter().enumerate() {
            let pointer = if i == at { "\u{276f}" } else { " " };
            let tick = if checked[i] { "\u{25c9}" } else { "\u{25ef}" };
            s.push_str(&format!("{pointer}{tick} {item}\r\n"));
        }
        s.into_bytes()
    }

    #[test]
    fn a_checkbox_menu_is_steered_to_the_decided_set_then_submitted() {
        let mut run = Run::new(OnPrompt::Exit);
        run.tty.modes = Some(RAW_MODE);
        run.show(&checkbox_screen(0, [false, true, false]));
        let request = run.ask();
        assert_eq!(request.prompt.rule, "generic:checkbox");
        assert_eq!(request.prompt.default.as_deref(), Some("ham"));
        let first = run.reply(PromptResolution::Answer {
            approval: decided("AP-1", ApprovalStatus::Approved, Some("cheese,olives")),
            value: "cheese,olives".into(),
        });
        assert!(first.is_empty(), "looked at before any key: {first:?}");
        // cheese (highlighted) is off: space.
        assert_eq!(writes(&settle(&mut run)), [b" ".to_vec()]);
        run.show(&checkbox_screen(0, [true, true, false]));
        // ham is on and must be off: down, then space.
        assert_eq!(writes(&settle(&mut run)), [b"\x1b[B".to_vec()]);
        run.show(&checkbox_screen(1, [true, true, false]));
        assert_eq!(writes(&settle(&mut run)), [b" ".to_vec()]);
        run.show(&checkbox_screen(1, [true, false, false]));
        assert_eq!(writes(&settle(&mut run)), [b"\x1b[B".to_vec()]);
        run.show(&checkbox_screen(2, [true, false, false]));
        assert_eq!(writes(&settle(&mut run)), [b" ".to_vec()]);
        run.show(&checkbox_screen(2, [true, false, true]));
        // The boxes show what was decided: Enter.
        assert_eq!(writes(&settle(&mut run)), [b"\r".to_vec()]);
        // A box that does not take the key: nothing submitted.
        let mut run = Run::new(OnPrompt::Exit);
        run.tty.modes = Some(RAW_MODE);
        run.show(&checkbox_screen(0, [false, true, false]));
        run.ask();
        run.reply(PromptResolution::Answer {
            approval: decided("AP-1", ApprovalStatus::Approved, Some("cheese,ham")),
            value: "cheese,ham".into(),
        });
        assert_eq!(writes(&settle(&mut run)), [b" ".to_vec()]);
        let mut gave_up = Vec::new();
        for _ in 0..40 {
            gave_up = run.tick_after(ms(100));
            if !gave_up.is_empty() {
                break;
            }
        }
        assert!(
            matches!(ended(&gave_up), Some(RunOutcome::Rejected { why, .. }) if why.contains("boxes")),
            "{gave_up:?}"
        );
    }

    #[test]
    fn a_select_menu_that_changes_or_does_not_move_is_not_submitted() {
        // Other items than the operator saw: the decision is given back, nothing submitted.
        let mut run = Run::new(OnPrompt::Exit);
        answered_select(&mut run, "blue");
        run.show("? Pick a region\n\x1b[36m\u{276f} eu-west\x1b[0m\n  us-east\n".as_bytes());
        let lost = settle(&mut run);
        assert!(
            lost.iter()
                .any(|a| matches!(a, Action::Release(id) if id == "AP-1")),
            "{lost:?}"
        );
        assert!(writes(&lost).is_empty(), "{lost:?}");
        // The arrow did nothing: the tool ends, Enter never sent.
        let mut run = Run::new(OnPrompt::Exit);
        answered_select(&mut run, "blue");
        assert_eq!(writes(&settle(&mut run)), [b"\x1b[B".to_vec()]);
        let stuck = settle(&mut run);
        assert!(
            matches!(ended(&stuck), Some(RunOutcome::Rejected { why, .. }) if why.contains("did not reach")),
            "{stuck:?}"
        );
        assert!(!writes(&stuck).contains(&b"\r".to_vec()));
        // The highlight jumps past the item (a menu that skips): it steers back, bounded.
        let mut run = Run::new(OnPrompt::Exit);
        answered_select(&mut run, "blue");
        let mut sent = 0;
        loop {
            let acts = settle(&mut run);
            if ended(&acts).is_some() {
                break;
            }
            assert!(!writes(&acts).contains(&b"\r".to_vec()), "never submitted");
            sent += 1;
            assert!(sent < 20, "steering is bounded");
            run.show(&menu_screen(if sent % 2 == 1 { 0 } else { 1 }));
        }
    }

    #[test]
    fn a_text_answer_in_raw_mode_clears_the_field_and_checks_it_before_enter() {
        let mut run = Run::new(OnPrompt::Exit);
        run.tty.modes = Some(RAW_MODE);
        run.show(b"Project name: demo");
        let request = run.ask();
        assert!(request.prompt.allows_text);
        let first = run.reply(PromptResolution::Answer {
            approval: decided("AP-1", ApprovalStatus::Approved, Some("myproj")),
            value: "myproj".into(),
        });
        assert_eq!(
            writes(&first),
            [b"\x7f\x7f\x7f\x7fmyproj".to_vec()],
            "demo erased"
        );
        run.show(b"Project name: myproj");
        let done = settle(&mut run);
        assert_eq!(writes(&done), [b"\r".to_vec()]);
        // A field that did not take the answer as typed: erased, not submitted.
        let mut run = Run::new(OnPrompt::Exit);
        run.tty.modes = Some(RAW_MODE);
        run.show(b"Project name: demo");
        run.ask();
        run.reply(PromptResolution::Answer {
            approval: decided("AP-1", ApprovalStatus::Approved, Some("myproj")),
            value: "myproj".into(),
        });
        run.show(b"Project name: xmyproj");
        let bad = settle(&mut run);
        assert_eq!(writes(&bad), [erase(6)], "what was typed is erased");
        assert!(
            matches!(ended(&bad), Some(RunOutcome::Rejected { why, .. }) if why.contains("xmyproj"))
        );
        // A field that masks what is typed asks for a secret: erased, refused as one (93).
        let mut run = Run::new(OnPrompt::Exit);
        run.tty.modes = Some(RAW_MODE);
        run.show(b"? Enter the value");
        run.ask();
        run.reply(PromptResolution::Answer {
            approval: decided("AP-1", ApprovalStatus::Approved, Some("hunter2")),
            value: "hunter2".into(),
        });
        run.show(b"? Enter the value *******");
        let masked = settle(&mut run);
        assert_eq!(writes(&masked), [erase(7)]);
        assert!(
            matches!(ended(&masked), Some(RunOutcome::SecretRefused { .. })),
            "{masked:?}"
        );
    }

    #[test]
    fn a_menus_title_may_drop_its_hint() {
        assert!(same_title(
            "? Pick a color",
            "? Pick a color (Use arrow keys)"
        ));
        assert!(same_title(
            "? Pick a color (Use arrow keys)",
            "? Pick a color"
        ));
        assert!(!same_title("? Pick a colour", "? Pick a color"));
        assert!(!same_title("? Pick a color scheme", "? Pick a color"));
    }

    #[test]
    fn a_fields_room_is_what_follows_the_prompts_mark() {
        let none: &[String] = &[];
        assert_eq!(field_room("Project name: demo", none, false), 4);
        assert_eq!(field_room("? Project name › demo", none, false), 4);
        assert_eq!(field_room("Name: ", none, false), 0);
        assert_eq!(field_room("? Project name (demo) ", none, false), 0);
        // questionary's pre-filled field has no mark between question and value: enough
        // backspaces for both (the question itself is not part of the field).
        assert_eq!(field_room("? Project name demo", none, false), 17);
        assert_eq!(
            field_room("Project name demo", none, false),
            17,
            "no mark: the line"
        );
        // A field on a row of its own under a hidden cursor: the longest last row.
        let rows: Vec<String> = ["◆  Project name", "│  demo", "└"]
            .map(String::from)
            .to_vec();
        assert_eq!(field_room("◆  Project name", &rows, true), 15);
    }

    #[test]
    fn a_check_box_title_is_compared_without_the_selection_it_lists() {
        let menu = |items: [&str; 3]| hr_shared::prompt::SelectMenu {
            items: items.map(String::from).to_vec(),
            highlighted: 1,
            checkbox: true,
            title_row: 0,
            first_row: 1,
            horizontal: false,
        };
        let ham = menu(["⬡ cheese", "⬢ ham", "⬡ olives"]);
        let two = menu(["⬢ cheese", "⬡ ham", "⬢ olives"]);
        let none = menu(["⬡ cheese", "⬡ ham", "⬡ olives"]);
        let asked = without_selection("Pick toppings ham (Press ↑/↓ arrow to move)", &ham);
        assert_eq!(asked, "Pick toppings (Press ↑/↓ arrow to move)");
        let now = without_selection("Pick toppings cheese, olives", &two);
        assert_eq!(now, "Pick toppings");
        assert!(same_title(&now, &asked));
        assert_eq!(without_selection("Pick toppings", &none), "Pick toppings");
        // A title that only ends like an item is not cut to nothing, nor one that lists
        // something else.
        assert_eq!(without_selection("ham", &ham), "ham");
        assert_eq!(
            without_selection("Pick ham or olives", &two),
            "Pick ham or olives"
        );
    }

    #[test]
    fn an_item_that_names_esc_is_chosen_by_esc() {
        for yes in [
            "3. No, and tell Copilot what to do differently (Esc to stop)",
            "3. No, suggest changes (esc)",
            "No (esc)",
        ] {
            assert!(is_esc_item(yes), "{yes}");
        }
        for no in ["1. Yes", "Escape the loop", "No (escape hatch)", "(esc) No"] {
            assert!(!is_esc_item(no), "{no}");
        }
    }

    #[test]
    fn a_list_title_is_compared_without_the_item_it_echoes() {
        // beaupy's confirm: the question line shows the item the arrows moved to.
        let menu = |highlighted| hr_shared::prompt::SelectMenu {
            items: vec!["Yes".into(), "No".into()],
            highlighted,
            checkbox: false,
            title_row: 0,
            first_row: 1,
            horizontal: false,
        };
        let asked = without_selection("Deploy now? (Y/N)", &menu(1));
        assert_eq!(asked, "Deploy now? (Y/N)");
        let now = without_selection("Deploy now? (Y/N) Yes", &menu(0));
        assert_eq!(now, "Deploy now? (Y/N)");
        assert!(same_title(&now, &asked));
        // Only the highlighted item is taken off, not another one.
        assert_eq!(
            without_selection("Deploy now? (Y/N) No", &menu(0)),
            "Deploy now? (Y/N) No"
        );
    }

    #[test]
    fn a_field_on_a_row_of_its_own_shows_the_answer_there() {
        let before: Vec<String> = ["◆  Project name", "│  demo", "└"]
            .map(String::from)
            .to_vec();
        let now: Vec<String> = ["◆  Project name", "│  myproj█", "└"]
            .map(String::from)
            .to_vec();
        assert!(field_row_shows(&before, &now, "myproj"));
        let kept: Vec<String> = ["◆  Project name", "│  demomyproj", "└"]
            .map(String::from)
            .to_vec();
        assert!(
            !field_row_shows(&before, &kept, "myproj"),
            "run on from what the field kept"
        );
        assert!(
            !field_row_shows(&before, &before, "demo"),
            "an unchanged row shows nothing typed"
        );
        // The placeholder's own word typed: the drawn cursor after it is the change.
        let typed: Vec<String> = ["◆  Project name", "│  demo█", "└"]
            .map(String::from)
            .to_vec();
        assert!(field_row_shows(&before, &typed, "demo"));
    }

    #[test]
    fn a_field_shows_the_answer_only_in_place_of_its_content() {
        for (asked, shown) in [
            ("Project name: demo", "Project name: myproj"),
            ("? Project name (demo)", "? Project name myproj"),
            ("? Project name", "? Project name myproj"),
            ("Name:", "Name:myproj"),
            // whiptail's input box: the row indented, the prompt recorded trimmed.
            ("│ demo", "                    │ myproj"),
        ] {
            assert!(field_shows(asked, shown, "myproj"), "{asked} / {shown}");
        }
        for (asked, shown) in [
            // A field that kept its pre-filled value (Ctrl-U ignored): run on, refused.
            ("Project name: demo", "Project name: demomyproj"),
            ("Project name: demo", "Project name: xmyproj"),
            ("Project name: demo", "Project name: de"),
            ("? Token", "? Token ******"),
            ("? Project name", "myproj"),
            ("Name: a", "Other: myproj"),
        ] {
            assert!(!field_shows(asked, shown, "myproj"), "{asked} / {shown}");
        }
    }

    /// Issue 16 item 3: the prompt just answered, still showing with its answer while the
    /// tool sits quietly, is not asked again; a new question below it is.
    #[test]
    fn an_answered_prompt_showing_its_answer_is_not_asked_again() {
        let mut run = Run::new(OnPrompt::Exit);
        run.tty.modes = Some(RAW_MODE);
        run.show(b"Deploy? [y/N] ");
        run.ask();
        let answer = run.reply(PromptResolution::Answer {
            approval: decided("AP-1", ApprovalStatus::Approved, Some("y")),
            value: "y".into(),
        });
        let typed = run.type_keys(answer);
        assert_eq!(typed, b"y");
        // Echoed on its line while the tool still waits: Enter follows.
        run.show(b"Deploy? [y/N] y");
        assert_eq!(writes(&run.idle()), [b"\r".to_vec()]);
        // Redrawn with its answer (the tool sits quietly after it): nothing is asked.
        run.show(b"Deploy? [y/N] y");
        assert!(run.idle().is_empty());
        assert!(run.tick_after(ms(400)).is_empty());
        // The same prompt with an error drawn under it: looked at anew, asked.
        let mut again = Run::new(OnPrompt::Exit);
        again.tty.modes = Some(RAW_MODE);
        again.show(b"Name: ");
        again.ask();
        let answer = again.reply(PromptResolution::Answer {
            approval: decided("AP-2", ApprovalStatus::Approved, Some("bob")),
            value: "bob".into(),
        });
        assert_eq!(
            writes(&answer),
            [b"bob".to_vec()],
            "an empty field: nothing to erase"
        );
        again.show(b"Name: bob");
        assert_eq!(writes(&settle(&mut again)), [b"\r".to_vec()]);
        again.show(b"Name: bob");
        assert!(again.idle().is_empty(), "the answered prompt, quiet");
        again.tick_after(ANSWER_GAP);
        // (Drawn below with the cursor put back after the answer, as inquirer does.)
        again.show(b"Name: bob\x1b7\x1b[2;1H> That name is taken\x1b8");
        assert!(
            matches!(again.idle().as_slice(), [Action::Ask(_)]),
            "a changed screen is asked about"
        );
        // A new question under it is asked.
        run.show(b"Deploy? [y/N] y\r\nDrop the database too? [y/N] ");
        let request = run.ask();
        assert!(request.prompt.prompt_line.contains("Drop"), "{request:?}");
    }
}
