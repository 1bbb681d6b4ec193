//! The prompt conversation of supervised mode as a state machine: it looks at what the
//! terminal shows while output is idle, decides whether the tool is asking something, and
//! turns the store's resolution or a wait-mode decision into keys. It does no I/O: the
//! supervisor feeds it observations and replies and carries out the [`Action`]s it returns,
//! so every rule here can be driven by made-up screens and decisions in unit tests.

use crate::blocked::Reading;
use crate::screen::{self, ScreenText};
use crate::store::ASK_TIMEOUT;
use hr_shared::approvals::{Approval, PromptKind};
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
    /// A wait-mode decision is being typed: mark the approval consumed and the run running.
    Consume(String),
    /// Watch this approval and feed what comes to [`Conversation::watched`] (or say
    /// [`Conversation::unwatched`] when it cannot be watched).
    Watch(Box<Approval>),
    /// The stderr line and the notify hook for a pending approval.
    Announce {
        approval: Box<Approval>,
        waiting: bool,
        taken_over: bool,
    },
    /// End the tool with this outcome.
    End(RunOutcome),
    /// One line for stderr.
    Say(String),
}

/// An answer to type, and what the conversation remembers once it is typed.
#[derive(Debug)]
pub struct Typing {
    pub keys: Vec<u8>,
    pending_enter: Option<PendingEnter>,
    answered: String,
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
        canonical: bool,
        /// The output count when the prompt was seen: if output came since, it is gone.
        seq: u64,
        since: Instant,
    },
    /// Wait mode: the tool is kept at its prompt until the approval is decided.
    Waiting { prompt: Prompt, approval_id: String },
}

pub struct Conversation<'a> {
    setup: Setup<'a>,
    state: State,
    /// Reads of output so far: tells "the screen changed" without comparing screens.
    output_seq: u64,
    /// The previous sample: a prompt needs two equal ones in a row.
    prev: Option<Blocked>,
    last_eof: Option<Instant>,
    /// The output count when the shim last typed: no new prompt until the tool reacts.
    typed_at: Option<u64>,
    pending_enter: Option<PendingEnter>,
}

impl<'a> Conversation<'a> {
    pub fn new(setup: Setup<'a>) -> Self {
        Conversation {
            setup,
            state: State::Looking,
            output_seq: 0,
            prev: None,
            last_eof: None,
            typed_at: None,
            pending_enter: None,
        }
    }

    /// A prompt was sent to the store and its reply is awaited.
    pub fn asking(&self) -> bool {
        matches!(self.state, State::Asking { .. })
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
        if !matches!(self.state, State::Looking) {
            return Vec::new();
        }
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
        let steady = self.prev == Some(sample);
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
        if !shown.shows_question() {
            return if modes.canonical {
                self.eof(now, modes).into_iter().collect()
            } else {
                Vec::new()
            };
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
        let end = (shown.cursor_row + 1).min(shown.rows.len());
        let prompt = prompt::classify(
            &ScreenFacts {
                tool: self.setup.tool,
                rows: &shown.rows[..end],
                prompt_line: &shown.prompt_line,
                echo: modes.echo,
                canonical: modes.canonical,
            },
            self.setup.config.prompt_rules(),
        );
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
        self.state = State::Asking {
            prompt,
            canonical: modes.canonical,
            seq: self.output_seq,
            since: now,
        };
        vec![Action::Ask(Box::new(request))]
    }

    /// A read with nothing asked: answer EOF, as /dev/null would without the shim — once
    /// per idle window, so a tool that reads again gets its next EOF after a pause.
    fn eof(&mut self, now: Instant, modes: Modes) -> Option<Action> {
        let idle_window = self.setup.settings.prompt_idle;
        if self.last_eof.is_some_and(|t| now < t + idle_window) {
            return None;
        }
        self.last_eof = Some(now);
        self.prev = None;
        Some(Action::Write(vec![if modes.eof == 0 {
            4
        } else {
            modes.eof
        }]))
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
        self.setup
            .config
            .policies()
            .filter(|pol| policy::config_matches(pol, &facts))
            .map(|pol| (pol.name.clone(), pol.value.clone()))
            .collect()
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
                            self.setup.tool, approval.approval_id
                        )),
                        Action::Release(approval.approval_id),
                    ];
                }
                vec![self.answer(&prompt, canonical, &value, &approval)]
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
        got: Result<Watched, TryRecvError>,
        obs: &mut impl Observe,
    ) -> Vec<Action> {
        if !self.waiting() {
            return Vec::new();
        }
        let decided = match got {
            Ok(Watched::Decided(a)) => *a,
            Err(TryRecvError::Empty) => return Vec::new(),
            Err(TryRecvError::Disconnected) => {
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
        let State::Waiting { prompt, .. } = std::mem::replace(&mut self.state, State::Looking)
        else {
            return Vec::new();
        };
        if !decided.answers() {
            return self.reject(&decided);
        }
        let value = decided.chosen_value.clone().unwrap_or_default();
        let consume = Action::Consume(decided.approval_id.clone());
        // The modes now, not when the prompt was seen: the tool may have switched meanwhile.
        let canonical = obs.modes().is_none_or(|m| m.canonical);
        vec![consume, self.answer(&prompt, canonical, &value, &decided)]
    }

    /// The keys of `value` for prompt `p`, or the end of the tool when they cannot be typed.
    fn answer(&self, p: &Prompt, canonical: bool, value: &str, a: &Approval) -> Action {
        let Some(keys) = p.keys_for(value, canonical) else {
            return Action::End(RunOutcome::Rejected {
                approval_id: a.approval_id.clone(),
                why: format!("answer `{value}` cannot be typed into this prompt"),
            });
        };
        let pending_enter = (!canonical && !keys.ends_with(b"\r") && p.kind != PromptKind::Menu)
            .then(|| PendingEnter {
                line: p.prompt_line.clone(),
                typed: String::from_utf8_lossy(&keys).into_owned(),
            });
        let answered = format!(
            "headless-run: {}: answered {:?} with `{value}` ({}, {} by {})",
            self.setup.tool,
            p.prompt_line,
            a.approval_id,
            a.status,
            watch::decided_by(a)
        );
        Action::Type(Typing {
            keys,
            pending_enter,
            answered,
        })
    }

    /// How writing the keys of an [`Action::Type`] went. Keys that did not reach the tool
    /// leave the conversation as it was, so the same prompt is looked at again.
    pub fn typed(&mut self, t: Typing, written: io::Result<()>) -> Vec<Action> {
        if let Err(e) = written {
            return vec![Action::Say(format!(
                "headless-run: {}: cannot type the answer: {e}",
                self.setup.tool
            ))];
        }
        self.typed_at = Some(self.output_seq);
        self.prev = None;
        self.pending_enter = t.pending_enter;
        vec![Action::Say(t.answered)]
    }

    fn reject(&self, a: &Approval) -> Vec<Action> {
        let why = format!("{} by {}", a.status, watch::decided_by(a));
        vec![
            Action::Say(format!(
                "headless-run: {}: approval {} was {why}; ending the tool (exit 91)",
                self.setup.tool, a.approval_id
            )),
            Action::End(RunOutcome::Rejected {
                approval_id: a.approval_id.clone(),
                why,
            }),
        ]
    }
}

