//! The `approvals` table: a question a tool asked, the answers it allows, and the one
//! decision it gets. Deciding is first-writer-wins (`UPDATE … WHERE status = 'pending'`),
//! a decision answers only the run it is offered to (`store::sqlite::chain`: once per run, kept for
//! its chain's next resume, then spent with a reason), and every change leaves an audit row.
//!
//! What a decider may pass as the value: `approve` (the tool's own default, DESIGN §15;
//! the first option for user rules and cooperative requests), `reject` (or `abort`: end the tool), one of the option
//! values, or free text where the approval allows it.

use crate::audit;
use crate::event::ApprovalOption;
use crate::status::ApprovalStatus;
use serde::{Deserialize, Serialize};

/// The longest free-text answer accepted.
pub const MAX_TEXT_ANSWER: usize = 1024;

/// How a prompt is answered: its widget (DESIGN §15), one of a closed set. `Choice` and
/// `Menu` are what rows from before widgets say, and what user rules with options are.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum PromptKind {
    /// Yes or no (`[y/N]`, `(y,N)`, `(Y)es/(N)o [Yes]`).
    Confirm,
    /// A two-state switch drawn as its two words (`› No / Yes`), the current one marked.
    Toggle,
    /// One letter of several (`[y,n,q,a,d,?]?`, `(Y/I/N/O/D/Z) [default=N]`).
    Letter,
    /// A word that must be typed in full (`Type 'yes' to continue`): never the default.
    Word,
    /// A number in a range (`(1-4, default 1)`).
    Number,
    /// One item of a list: numbered, or chosen by moving a highlight.
    Select,
    /// Any items of a list, each with a check box.
    MultiSelect,
    /// A choice between options a user rule or built-in rule lists.
    Choice,
    /// A numbered or full-screen menu (rows from before widgets).
    Menu,
    /// A line of text (with an optional default or pre-filled value).
    Text,
    /// Press Enter / any key.
    Acknowledge,
    /// A question no rule knows: abort, or a free-text answer.
    Unknown,
    /// A cooperative tool's `approval_needed` line.
    Cooperative,
}

impl PromptKind {
    const ALL: [PromptKind; 13] = [
        PromptKind::Confirm,
        PromptKind::Toggle,
        PromptKind::Letter,
        PromptKind::Word,
        PromptKind::Number,
        PromptKind::Select,
        PromptKind::MultiSelect,
        PromptKind::Choice,
        PromptKind::Menu,
        PromptKind::Text,
        PromptKind::Acknowledge,
        PromptKind::Unknown,
        PromptKind::Cooperative,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            PromptKind::Confirm => "confirm",
            PromptKind::Toggle => "toggle",
            PromptKind::Letter => "letter",
            PromptKind::Word => "word",
            PromptKind::Number => "number",
            PromptKind::Select => "select",
            PromptKind::MultiSelect => "multi_select",
            PromptKind::Choice => "choice",
            PromptKind::Menu => "menu",
            PromptKind::Text => "text",
            PromptKind::Acknowledge => "acknowledge",
            PromptKind::Unknown => "unknown",
            PromptKind::Cooperative => "cooperative",
        }
    }

    pub(crate) fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.as_str() == s)
    }

    /// Whether `approve` stands for the tool's own default (DESIGN §15): refused where the
    /// widget has none, and always for a word that must be typed. The kinds from before
    /// widgets, user rules and cooperative tools keep the first option.
    pub fn approve_is_default(self) -> bool {
        !matches!(
            self,
            PromptKind::Choice | PromptKind::Menu | PromptKind::Cooperative
        )
    }
}

/// A row of `approvals`. Serialized with the column names (`options_json` as the array it
/// holds), as `--json` prints it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema), schema(as = ApprovalRow))]
pub struct Approval {
    pub approval_id: String,
    pub tool_run_id: String,
    pub tool_name: String,
    pub execution_id: Option<String>,
    pub question: String,
    pub context: Option<String>,
    /// The answers offered (`value`, `label`; never the keys typed).
    pub options_json: Vec<ApprovalOption>,
    pub default_value: Option<String>,
    pub allows_text: bool,
    pub status: ApprovalStatus,
    pub chosen_value: Option<String>,
    pub created_at: String,
    pub decided_at: Option<String>,
    pub expires_at: Option<String>,
    pub decided_by: Option<String>,
    pub decision_channel: Option<String>,
    pub comment: Option<String>,
    pub request_fingerprint: Option<String>,
    pub prompt_fingerprint: Option<String>,
    pub consumed_at: Option<String>,
    pub consumed_by: Option<String>,
    pub prompt_kind: Option<PromptKind>,
    pub prompt_line: Option<String>,
    pub rule_name: Option<String>,
    /// `reject` or `default`: what expiry means for this approval.
    pub expire_action: String,
    pub claimed_by: Option<String>,
    pub claimed_at: Option<String>,
    pub resumed_run_id: Option<String>,
    /// The digest of the screen it was asked on (`fingerprint::seen`: context and question): a
    /// decision answers only that screen. None for cooperative requests and old rows.
    #[serde(default)]
    pub screen_digest: Option<String>,
    /// What the asking command ran (`fingerprint::tool`: its executable and script): a
    /// decision is not used, nor resumed, for a command that runs something else now.
    #[serde(default)]
    pub tool_digest: Option<String>,
    /// The approval that replaced this one when a retry showed another screen (DESIGN §14:
    /// an approval never changes under the operator; this one ended `expired`, decided by
    /// `system:superseded`, and the question lives on in the new one).
    #[serde(default)]
    pub superseded_by: Option<String>,
    /// The approval this one replaced (the other side of `superseded_by`): the same question
    /// asked again on a changed screen.
    #[serde(default)]
    pub supersedes: Option<String>,
    /// While the decision is used by a chain that is still live: the run that used it last,
    /// whose resume (and no other run) may use it again — the run that parked at a later
    /// prompt after answering this one (`store::sqlite::chain`). `None` once it is spent.
    #[serde(default)]
    pub kept_for: Option<String>,
    /// Why the decision is spent, once it is (`consumed_at` set, `kept_for` gone): the run
    /// of its chain that ended, or the resume that did not use it. `None` while it is
    /// unused or kept, and for decisions used before reasons were kept.
    #[serde(default)]
    pub consumed_reason: Option<String>,
    /// Distinct people who must approve before the decision counts (`[[reviewers]]`;
    /// 1: anyone who may decide). See [`crate::reviews`].
    #[serde(default = "one")]
    pub reviews_required: u32,
    /// The group those people must belong to, if any.
    #[serde(default)]
    pub reviewer_group: Option<String>,
    /// How long an approved decision is held before it is used (0: not held).
    #[serde(default)]
    pub wait_seconds: u64,
    /// The approvals given so far, while more are needed (and, once decided, all of them).
    #[serde(default)]
    pub reviews: Vec<crate::reviews::Review>,
    /// While the decision is held by its wait timer: when it will be used. The approval
    /// stays `pending` until then, and any reviewer may still reject it.
    #[serde(default)]
    pub usable_at: Option<String>,
}

fn one() -> u32 {
    1
}

/// Who ends an approval that a changed screen replaced (its `decided_by` and channel).
pub const SUPERSEDED: &str = Channel::SUPERSEDED;

/// Who closes a pending approval whose question nothing waits for any more (its
/// `decided_by`, on the closing channel: [`Channel::Closed`]).
pub const WITHDRAWN: &str = "system:withdrawn";

/// The closing channel as a literal, for SQL built with `concat!`: see [`Channel::Closed`].
macro_rules! closed_channel {
    () => {
        "system:run-ended"
    };
}
pub(crate) use closed_channel;

/// Who or what settled an approval, as its `decision_channel` says: the one place that
/// reads that string (SQL spells the same values; `pg_sql_names_only_known_channels`
/// checks them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Channel<'a> {
    /// A person, from the CLI (`cli`), the dashboard (`tui`), the web page or the API
    /// (`http`, `http:TOKEN`).
    Person(&'a str),
    /// A policy (`policy:NAME`): the config's, or a remembered decision.
    Policy(&'a str),
    /// Its TTL ran out (`system:expiry`).
    Expiry,
    /// Closed with nobody to answer it (`system:run-ended`): its run ended, or its question
    /// was withdrawn (`decided_by` says which). It answers nothing, ever.
    Closed,
    /// Replaced by an approval for a changed screen (`system:superseded`).
    Superseded,
    /// Another `system:` channel (a newer build's): not a person.
    System(&'a str),
}

impl<'a> Channel<'a> {
    pub const EXPIRY: &'static str = "system:expiry";
    pub const CLOSED: &'static str = closed_channel!();
    pub const SUPERSEDED: &'static str = "system:superseded";

    /// The channel a `decision_channel` names.
    pub fn of(channel: &'a str) -> Channel<'a> {
        match channel {
            Self::EXPIRY => Channel::Expiry,
            Self::CLOSED => Channel::Closed,
            Self::SUPERSEDED => Channel::Superseded,
            c => match (c.strip_prefix("policy:"), c.strip_prefix("system:")) {
                (Some(name), _) => Channel::Policy(name),
                (_, Some(_)) => Channel::System(c),
                _ => Channel::Person(c),
            },
        }
    }

    /// Whether a person decided through it.
    pub fn is_person(self) -> bool {
        matches!(self, Channel::Person(_))
    }
}

impl Approval {
    /// The version of what the operator is shown: the digest of its screen (context and
    /// question). It never changes once asked (a changed screen is a new approval); every
    /// way to decide sends the version it showed, and the store refuses any other.
    pub fn version(&self) -> Option<&str> {
        self.screen_digest.as_deref()
    }

    /// The value `approve` stands for: the tool's own default where the widget has one
    /// (none for a word that must be typed, nor for a confirm without a default); for rows
    /// from before widgets, user rules' choices and cooperative requests, the first option.
    pub fn approve_value(&self) -> Option<&str> {
        match self.prompt_kind {
            Some(PromptKind::Word) => None,
            Some(k) if k.approve_is_default() => self.default_value.as_deref(),
            _ => self
                .options_json
                .iter()
                .map(|o| o.value.as_str())
                .find(|v| !is_abort_word(v)),
        }
    }

    /// The option that means "no" (a confirm's `no`, Claude Code's `3. No`, Codex's `No,
    /// and tell Codex what to do differently`): the one option whose label or value starts
    /// with a word of refusal. `deny` chooses it — the tool hears no and goes on, where
    /// `reject` ends it. `None` where no option, or more than one, says no.
    pub fn deny_value(&self) -> Option<&str> {
        let no: Vec<&ApprovalOption> = self
            .options_json
            .iter()
            .filter(|o| !is_abort_word(&o.value) && (means_no(&o.label) || means_no(&o.value)))
            .collect();
        match no.as_slice() {
            [one] => Some(one.value.as_str()),
            _ => None,
        }
    }

    /// The values a decider may pass, for error messages and help.
    pub fn valid_values(&self) -> Vec<String> {
        let mut v = Vec::new();
        if self.approve_value().is_some() {
            v.push("approve".to_owned());
        }
        if self.deny_value().is_some() {
            v.push("deny".to_owned());
        }
        v.push("reject".to_owned());
        for o in &self.options_json {
            if !v.contains(&o.value) {
                v.push(o.value.clone());
            }
        }
        if self.allows_text && !self.asks_for_secret() {
            v.push("any text".to_owned());
        }
        v
    }

    /// Whether the question reads like it asks for a secret (a password, a token, a key, a
    /// one-time code): no free-text answer is taken for it — a secret is never stored in,
    /// nor typed from, the database.
    pub fn asks_for_secret(&self) -> bool {
        crate::sanitize::looks_like_secret_request(&self.question)
            || self
                .prompt_line
                .as_deref()
                .is_some_and(crate::sanitize::looks_like_secret_request)
    }

    /// Whether the chosen value is free text (none of the options): such an answer is the
    /// tool's business only — it is logged and audited as a digest, and dropped from the
    /// row once its chain ends (it is kept while a resume may type it again).
    pub fn chose_free_text(&self) -> bool {
        self.chosen_value
            .as_deref()
            .is_some_and(|v| !self.options_json.iter().any(|o| o.value == v))
    }

    /// The chosen value as the combined log and the audit chain may show it: an option's
    /// value as it is, free text only as its digest (`sha256:…`).
    pub fn logged_value(&self) -> Option<String> {
        if self.chose_free_text() {
            use sha2::{Digest, Sha256};
            let v = self.chosen_value.as_deref().unwrap_or("");
            return Some(format!(
                "sha256:{}",
                audit::hex(&Sha256::digest(v.as_bytes()))
            ));
        }
        self.chosen_value.clone()
    }

    /// Who or what settled it; `None` while pending.
    pub fn channel(&self) -> Option<Channel<'_>> {
        self.decision_channel.as_deref().map(Channel::of)
    }

    /// Whether a person decided it (not a policy, its expiry or the system).
    pub fn by_a_person(&self) -> bool {
        self.decided_by.is_some() && self.channel().is_some_and(Channel::is_person)
    }

    /// Whether it was closed with nobody to answer it ([`Channel::Closed`]).
    pub fn closed(&self) -> bool {
        self.channel() == Some(Channel::Closed)
    }

    /// Whether this decision answers the prompt (rather than ending the tool).
    pub fn answers(&self) -> bool {
        match self.status {
            ApprovalStatus::Approved => true,
            ApprovalStatus::Expired => self.chosen_value.is_some(),
            _ => false,
        }
    }

    /// Whether the approval is still pending but past its expiry time.
    pub fn is_overdue(&self, now: &str) -> bool {
        self.status == ApprovalStatus::Pending
            && self.usable_at.is_none()
            && self.expires_at.as_deref().is_some_and(|e| e <= now)
    }
}

impl Approval {
    /// The `approval_needed` event of `logs/combined.log`.
    pub fn needed_event(&self) -> crate::event::LogEvent {
        self.log_event(crate::event::EventBody::ApprovalNeeded {
            approval_id: self.approval_id.clone(),
            question: self.question.clone(),
            options: self
                .options_json
                .iter()
                .map(|o| ApprovalOption {
                    keys: None,
                    ..o.clone()
                })
                .collect(),
            default: self.default_value.clone(),
            allows_text: self.allows_text,
            expires_at: self.expires_at.clone(),
        })
    }

    /// The `approval_status_change` event of `logs/combined.log`, for its current status.
    pub fn status_event(&self) -> crate::event::LogEvent {
        self.log_event(crate::event::EventBody::ApprovalStatusChange {
            approval_id: self.approval_id.clone(),
            status: self.status,
            chosen_value: self.logged_value(),
            decided_by: self.decided_by.clone(),
            decision_channel: self.decision_channel.clone(),
            comment: self.comment.clone(),
        })
    }

    fn log_event(&self, body: crate::event::EventBody) -> crate::event::LogEvent {
        crate::event::LogEvent::about_run(
            body,
            &self.tool_name,
            &self.tool_run_id,
            self.execution_id.as_deref(),
        )
    }
}

fn is_abort_word(v: &str) -> bool {
    v.eq_ignore_ascii_case("reject") || v.eq_ignore_ascii_case("abort")
}

/// What a decider's value resolves to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ValueDecision {
    pub status: ApprovalStatus,
    pub chosen_value: Option<String>,
}

/// A value that is not a valid decision for this approval.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{value}` is not a valid answer; valid: {}{note}", valid.join(", "))]
pub struct InvalidValue {
    pub value: String,
    pub valid: Vec<String>,
    /// Why, where the list alone does not say (`approve` on a prompt without a default).
    pub note: String,
}

/// Resolves a decider's value against the approval's options.
/// Whether an answer's label says no: its first word, after a number (`3.`, `(3)`, `[3]`)
/// and a pointer, is `no`, `deny`, `decline` or `don't`.
fn means_no(label: &str) -> bool {
    let rest = label
        .trim_start()
        .trim_start_matches(['❯', '>', '›', '*', ' '])
        .trim_start_matches(|c: char| c.is_ascii_digit() || "[]().".contains(c))
        .trim_start();
    let word: String = rest
        .chars()
        .take_while(|c| c.is_alphabetic() || *c == '\'' || *c == '’')
        .collect::<String>()
        .to_lowercase()
        .replace('’', "'");
    matches!(
        word.as_str(),
        "no" | "deny" | "decline" | "don't" | "dont" | "reject" | "refuse" | "disallow"
    )
}

pub fn value_decision(
    a: &Approval,
    input: &str,
) -> std::result::Result<ValueDecision, InvalidValue> {
    let invalid = || InvalidValue {
        value: input.to_owned(),
        valid: a.valid_values(),
        note: String::new(),
    };
    let approved = |v: &str| ValueDecision {
        status: ApprovalStatus::Approved,
        chosen_value: Some(v.to_owned()),
    };
    // An exact option value wins over the keywords (a cooperative tool may offer `approve`).
    if let Some(o) = a.options_json.iter().find(|o| o.value == input) {
        if is_abort_word(&o.value) {
            return Ok(ValueDecision {
                status: ApprovalStatus::Rejected,
                chosen_value: Some(o.value.clone()),
            });
        }
        return Ok(approved(&o.value));
    }
    // A multi-select: the set of items to submit (`cheese,olives`, `none`), in item order;
    // `submit` is the set shown.
    if a.prompt_kind == Some(PromptKind::MultiSelect) && !is_abort_word(input) {
        let names: Vec<String> = a.options_json.iter().map(|o| o.value.clone()).collect();
        let wanted =
            if input.eq_ignore_ascii_case("approve") || input.eq_ignore_ascii_case("submit") {
                a.default_value.as_deref().unwrap_or("none")
            } else {
                input
            };
        return crate::prompt::multi_set(&names, wanted)
            .map(|set| approved(&crate::prompt::multi_value(&names, &set)))
            .ok_or_else(|| InvalidValue {
                note: " (a set of items, comma-separated, or `none`)".into(),
                ..invalid()
            });
    }
    if input.eq_ignore_ascii_case("deny") {
        return a.deny_value().map(approved).ok_or_else(|| InvalidValue {
            note: " (`deny` picks the one answer that says no, and this prompt shows none, or several: name the answer, or `reject` to end the tool)"
                .into(),
            ..invalid()
        });
    }
    if input.eq_ignore_ascii_case("approve") {
        return a.approve_value().map(approved).ok_or_else(|| InvalidValue {
            note: " (`approve` takes the tool's own default, and this prompt shows none: name the answer)"
                .into(),
            ..invalid()
        });
    }
    if is_abort_word(input) {
        return Ok(ValueDecision {
            status: ApprovalStatus::Rejected,
            chosen_value: None,
        });
    }
    // Options are matched case-insensitively when that is unambiguous (`Y` for `y`).
    let folded: Vec<&ApprovalOption> = a
        .options_json
        .iter()
        .filter(|o| o.value.eq_ignore_ascii_case(input))
        .collect();
    if let [one] = folded.as_slice() {
        return Ok(approved(&one.value));
    }
    // An item by its label (`blue` for the item `3` labelled `blue` or `3. blue`), where
    // only one label reads so.
    let unnumbered = |label: &str| {
        let t = label.trim();
        let rest = t.trim_start_matches(|c: char| c.is_ascii_digit());
        match rest.strip_prefix(". ").or_else(|| rest.strip_prefix(") ")) {
            Some(r) if rest.len() < t.len() => r.trim().to_owned(),
            _ => t.to_owned(),
        }
    };
    let by_label: Vec<&ApprovalOption> = a
        .options_json
        .iter()
        .filter(|o| !is_abort_word(&o.value))
        .filter(|o| {
            o.label.trim().eq_ignore_ascii_case(input)
                || unnumbered(&o.label).eq_ignore_ascii_case(input)
        })
        .collect();
    if let [one] = by_label.as_slice() {
        return Ok(approved(&one.value));
    }
    // `yes` / `no` where the options are `y` / `n`, and the other way round.
    let alias = match input.to_ascii_lowercase().as_str() {
        "yes" => Some("y"),
        "no" => Some("n"),
        "y" => Some("yes"),
        "n" => Some("no"),
        _ => None,
    };
    if let Some(o) = alias.and_then(|v| a.options_json.iter().find(|o| o.value == v)) {
        return Ok(approved(&o.value));
    }
    // Free text, where allowed — never for a question that asks for a secret.
    if a.allows_text && !a.asks_for_secret() && is_acceptable_text(input) {
        return Ok(approved(input));
    }
    Err(invalid())
}

/// Free text that may be typed into a terminal: one line, no control characters, bounded.
pub fn is_acceptable_text(s: &str) -> bool {
    !s.is_empty() && s.len() <= MAX_TEXT_ANSWER && !s.chars().any(char::is_control)
}

/// Which approvals to list.
#[derive(Debug, Clone, Default)]
pub struct ApprovalFilter {
    /// Any of these statuses (empty: all).
    pub statuses: Vec<ApprovalStatus>,
    pub tool: Option<String>,
    pub tool_run_id: Option<String>,
    pub execution_id: Option<String>,
    /// Asked by this command (its request fingerprint, as stored).
    pub request_fingerprint: Option<String>,
    /// Asked at or after this RFC 3339 time.
    pub since: Option<String>,
    /// At most this many, in [`ApprovalFilter::order`].
    pub limit: Option<usize>,
}

impl ApprovalFilter {
    /// The order every store lists in, as SQL: the pending queue oldest first (who has
    /// waited longest comes first, and a limit keeps the oldest), anything else newest
    /// first.
    pub fn order(&self) -> &'static str {
        if self.statuses == [ApprovalStatus::Pending] {
            "ASC"
        } else {
            "DESC"
        }
    }
}

/// Who decides, and how.
#[derive(Debug, Clone)]
pub struct Decider<'a> {
    /// The OS user (or `policy:NAME`, `system:expiry`).
    pub by: &'a str,
    /// `cli`, `tui`, `policy:NAME`, `system:expiry`.
    pub channel: &'a str,
    pub comment: Option<&'a str>,
    /// The version of the approval the decider was shown ([`Approval::version`]); `None`:
    /// the approval as its id names it (an approval never changes once asked).
    pub version: Option<&'a str>,
    /// The groups the authenticated decider belongs to, as its front-end knows them (the
    /// OS groups of the deciding process, a token's groups on `monitor serve`): what an
    /// approval that needs reviewers of a group is checked against. PostgreSQL asks its
    /// own roles instead.
    pub groups: &'a [String],
}

/// How a decision attempt ended.
#[derive(Debug, Clone, PartialEq)]
pub enum DecideOutcome {
    /// This call decided it.
    Decided(Box<Approval>),
    /// The approval needs more than this decision (more reviewers, or its wait timer
    /// holds it): this approval was counted (or had been), and it is still pending.
    Reviewed(Box<Approval>),
    /// It was already decided the same way: nothing changed.
    AlreadySame(Box<Approval>),
    /// Someone else decided it first (or it expired, or a changed screen superseded it:
    /// `superseded_by`).
    Conflict(Box<Approval>),
    /// It is not the version the decider was shown: nothing was decided.
    Changed(Box<Approval>),
    /// This decider may not decide it (a pipeline human step that names its deciders):
    /// why. Nothing was decided.
    Refused(String),
    NotFound,
    Invalid(InvalidValue),
}

/// Why a decision was not made, for a person: who decided the approval first (or that a
/// changed screen superseded it, naming the approval to read instead), or that it is not
/// the version the decider was shown. `None` for outcomes that are not refusals of this
/// kind. Text from the store is cleaned.
pub fn refusal(outcome: &DecideOutcome) -> Option<String> {
    use crate::sanitize::sanitize_line;
    match outcome {
        DecideOutcome::Conflict(a) => Some(match &a.superseded_by {
            Some(new) => format!(
                "{} was superseded by {}: the screen changed after it was asked, so it was asked again; read {} (`monitor show {}`) and decide that one",
                a.approval_id,
                sanitize_line(new),
                sanitize_line(new),
                sanitize_line(new)
            ),
            None => format!(
                "{} was already decided by {} at {} ({}, {})",
                a.approval_id,
                sanitize_line(a.decided_by.as_deref().unwrap_or("?")),
                a.decided_at
                    .as_deref()
                    .map(sanitize_line)
                    .unwrap_or_else(|| "?".into()),
                a.status,
                a.chosen_value
                    .as_deref()
                    .map(sanitize_line)
                    .unwrap_or_else(|| "no value".into())
            ),
        }),
        DecideOutcome::Refused(why) => Some(why.clone()),
        DecideOutcome::Changed(a) => Some(format!(
            "{} is not the version you were shown (it is {}): read it again (`monitor show {}`) before deciding",
            a.approval_id,
            a.version()
                .map(sanitize_line)
                .unwrap_or_else(|| "unversioned".into()),
            a.approval_id
        )),
        _ => None,
    }
}

/// What a decision on `current` is refused as before anything else is looked at: an
/// approval a changed screen replaced (the decider is pointed to the new one), or another
/// version than the one the decider was shown. One rule for every store.
pub fn version_refusal(current: &Approval, who: &Decider<'_>) -> Option<DecideOutcome> {
    if current.superseded_by.is_some() {
        return Some(DecideOutcome::Conflict(Box::new(current.clone())));
    }
    match who.version {
        Some(seen) if current.version() != Some(seen) => {
            Some(DecideOutcome::Changed(Box::new(current.clone())))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    /// Who settled an approval is read in one place: each channel the stores write means
    /// what `Channel` says, and the SQL of both stores names no `system:` or `policy:`
    /// channel other than these.
    #[test]
    fn channels_are_read_in_one_place_and_sql_names_only_known_ones() {
        assert_eq!(Channel::of("cli"), Channel::Person("cli"));
        assert_eq!(Channel::of("http:alice"), Channel::Person("http:alice"));
        assert_eq!(Channel::of("policy:trusted"), Channel::Policy("trusted"));
        assert_eq!(Channel::of("system:expiry"), Channel::Expiry);
        assert_eq!(Channel::of("system:run-ended"), Channel::Closed);
        assert_eq!(Channel::of(SUPERSEDED), Channel::Superseded);
        assert_eq!(Channel::of("system:new"), Channel::System("system:new"));
        assert!(Channel::of("tui").is_person() && !Channel::of("policy:x").is_person());
        assert!(!Channel::Closed.is_person() && !Channel::Expiry.is_person());
        // The channels, and who closes a question nobody answered (`decided_by`).
        let known = [
            Channel::EXPIRY,
            Channel::CLOSED,
            Channel::SUPERSEDED,
            WITHDRAWN,
        ];
        let sql = [
            include_str!("store/pg/v1.sql"),
            include_str!("store/pg/v2.sql"),
            include_str!("store/pg/v3.sql"),
            include_str!("store/pg/v4.sql"),
            include_str!("store/pg/v5.sql"),
            include_str!("store/pg/v6.sql"),
            include_str!("store/pg/functions/core.sql"),
            include_str!("store/pg/functions/chain.sql"),
            include_str!("store/pg/functions/runner.sql"),
            include_str!("store/pg/functions/worker.sql"),
            include_str!("store/pg/functions/operator.sql"),
            include_str!("store/pg/functions/pipelines.sql"),
            include_str!("approvals.rs"),
            include_str!("store/sqlite/approvals.rs"),
            include_str!("store/sqlite/chain.rs"),
            include_str!("store/sqlite/asking.rs"),
            include_str!("store/asking.rs"),
        ];
        let mut seen = std::collections::BTreeSet::new();
        for text in sql {
            for (at, _) in text.match_indices("'system:") {
                let word: String = text[at + 1..]
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || matches!(c, ':' | '-'))
                    .collect();
                seen.insert(word);
            }
        }
        assert!(seen.contains(Channel::CLOSED), "{seen:?}");
        for w in &seen {
            // `LIKE 'system:%'` (and `'policy:%'`): "not a person", as `is_person` says.
            if w == "system:" {
                assert!(!Channel::of("system:anything").is_person());
                assert!(!Channel::of("policy:anything").is_person());
                continue;
            }
            assert!(
                known.contains(&w.as_str()),
                "SQL names {w}, which Channel does not know"
            );
        }
    }

    use super::*;
    use crate::testing::approval as sample;

    #[test]
    fn deny_picks_the_one_answer_that_says_no() {
        let opt = |value: &str, label: &str| ApprovalOption {
            value: value.into(),
            label: label.into(),
            keys: None,
        };
        // Claude Code's permission menu.
        let mut menu = sample("AP-1", PromptKind::Select);
        menu.options_json = vec![
            opt("1", "1. Yes"),
            opt("2", "2. Yes, and don't ask again for echo commands"),
            opt("3", "3. No, and tell Claude what to do differently (esc)"),
        ];
        assert_eq!(menu.deny_value(), Some("3"));
        let d = value_decision(&menu, "deny").unwrap();
        assert_eq!(d.status, ApprovalStatus::Approved);
        assert_eq!(d.chosen_value.as_deref(), Some("3"));
        assert!(menu.valid_values().contains(&"deny".to_owned()));
        // A confirm's `no`; a hook's own `deny` option is itself.
        let mut confirm = sample("AP-2", PromptKind::Confirm);
        confirm.options_json = vec![opt("yes", "Yes"), opt("no", "No")];
        assert_eq!(
            value_decision(&confirm, "deny")
                .unwrap()
                .chosen_value
                .as_deref(),
            Some("no")
        );
        let mut hook = sample("AP-3", PromptKind::Choice);
        hook.options_json = vec![opt("allow", "Yes, allow it"), opt("deny", "No, deny it")];
        assert_eq!(
            value_decision(&hook, "deny")
                .unwrap()
                .chosen_value
                .as_deref(),
            Some("deny")
        );
        // opencode's button row: `Reject` is its no.
        let mut buttons = sample("AP-7", PromptKind::Select);
        buttons.options_json = vec![
            opt("1", "Allow once"),
            opt("2", "Allow always"),
            opt("3", "Reject"),
        ];
        assert_eq!(buttons.deny_value(), Some("3"));
        // None says no, or two do: refused, saying why; `reject` is not an item of no.
        let mut none = sample("AP-4", PromptKind::Select);
        none.options_json = vec![opt("red", "red"), opt("abort", "Abort: end the tool")];
        let err = value_decision(&none, "deny").unwrap_err();
        assert!(err.note.contains("says no"), "{err:?}");
        assert!(!none.valid_values().contains(&"deny".to_owned()));
        let mut two = sample("AP-5", PromptKind::Select);
        two.options_json = vec![opt("1", "No"), opt("2", "No, never"), opt("3", "Yes")];
        assert!(value_decision(&two, "deny").is_err());
        // `Nope`, `Notify`, `Normal` are no refusal.
        let mut words = sample("AP-6", PromptKind::Select);
        words.options_json = vec![opt("1", "Notify me"), opt("2", "Normal mode")];
        assert_eq!(words.deny_value(), None);
    }

    #[test]
    fn approve_is_the_widgets_own_default_and_refused_without_one() {
        let yes_no = || {
            vec![
                ApprovalOption {
                    value: "yes".into(),
                    label: "Yes".into(),
                    keys: None,
                },
                ApprovalOption {
                    value: "no".into(),
                    label: "No".into(),
                    keys: None,
                },
            ]
        };
        let mut confirm = sample("AP-1", PromptKind::Confirm);
        confirm.options_json = yes_no();
        confirm.default_value = Some("no".into());
        // `[y/N]`: approving takes the tool's default, and the record says which.
        let d = value_decision(&confirm, "approve").unwrap();
        assert_eq!(d.chosen_value.as_deref(), Some("no"));
        assert_eq!(
            value_decision(&confirm, "y")
                .unwrap()
                .chosen_value
                .as_deref(),
            Some("yes")
        );
        // `(y/n)` with no default: `approve` means nothing; the operator names it.
        confirm.default_value = None;
        let err = value_decision(&confirm, "approve").unwrap_err();
        assert_eq!(err.valid, ["deny", "reject", "yes", "no"]);
        assert!(err.to_string().contains("shows none"), "{err}");
        // A word to type in full is never approved by default.
        let mut word = sample("AP-2", PromptKind::Word);
        word.options_json = yes_no();
        word.default_value = Some("yes".into());
        assert!(value_decision(&word, "approve").is_err());
        assert_eq!(
            value_decision(&word, "yes")
                .unwrap()
                .chosen_value
                .as_deref(),
            Some("yes")
        );
        // A select: the highlighted item.
        let mut select = sample("AP-3", PromptKind::Select);
        select.default_value = Some("n".into());
        assert_eq!(
            value_decision(&select, "approve")
                .unwrap()
                .chosen_value
                .as_deref(),
            Some("n")
        );
    }

    #[test]
    fn a_multi_select_is_decided_as_a_set_of_its_items() {
        let mut m = sample("AP-1", PromptKind::MultiSelect);
        m.options_json = ["cheese", "ham", "olives"]
            .iter()
            .map(|v| ApprovalOption {
                value: (*v).to_owned(),
                label: (*v).to_owned(),
                keys: None,
            })
            .collect();
        m.default_value = Some("ham".into());
        let chosen = |v: &str| value_decision(&m, v).unwrap().chosen_value.unwrap();
        assert_eq!(
            chosen("olives, Cheese"),
            "cheese,olives",
            "item order, as named"
        );
        assert_eq!(chosen("approve"), "ham", "the set shown");
        assert_eq!(chosen("submit"), "ham");
        assert_eq!(chosen("none"), "none");
        assert!(value_decision(&m, "cheese,bacon").is_err());
        assert_eq!(
            value_decision(&m, "reject").unwrap().status,
            ApprovalStatus::Rejected
        );
    }

    #[test]
    fn an_item_is_chosen_by_its_label_too() {
        let mut menu = sample("AP-1", PromptKind::Select);
        menu.options_json = ["1. red", "2. green", "3. blue"]
            .iter()
            .enumerate()
            .map(|(i, l)| ApprovalOption {
                value: (i + 1).to_string(),
                label: (*l).to_owned(),
                keys: None,
            })
            .collect();
        assert_eq!(
            value_decision(&menu, "blue")
                .unwrap()
                .chosen_value
                .as_deref(),
            Some("3")
        );
        assert_eq!(
            value_decision(&menu, "2. Green")
                .unwrap()
                .chosen_value
                .as_deref(),
            Some("2")
        );
        assert!(value_decision(&menu, "purple").is_err());
    }

    #[test]
    fn values_resolve_against_options() {
        let a = sample("AP-1", PromptKind::Choice);
        let ok = |v: &str| value_decision(&a, v).unwrap();
        assert_eq!(ok("approve").chosen_value.as_deref(), Some("y"));
        assert_eq!(ok("n").status, ApprovalStatus::Approved);
        assert_eq!(ok("Y").chosen_value.as_deref(), Some("y"));
        // `yes` / `no` where the options are `y` / `n`.
        assert_eq!(ok("yes").chosen_value.as_deref(), Some("y"));
        assert_eq!(ok("No").chosen_value.as_deref(), Some("n"));
        assert_eq!(ok("reject").status, ApprovalStatus::Rejected);
        assert_eq!(ok("abort").status, ApprovalStatus::Rejected);
        let err = value_decision(&a, "maybe").unwrap_err();
        assert_eq!(err.valid, ["approve", "deny", "reject", "y", "n"]);
        assert!(
            err.to_string()
                .contains("valid: approve, deny, reject, y, n")
        );

        let mut text = sample("AP-2", PromptKind::Unknown);
        text.options_json = vec![ApprovalOption {
            value: "abort".into(),
            label: "Abort".into(),
            keys: None,
        }];
        text.default_value = None;
        text.allows_text = true;
        assert!(value_decision(&text, "approve").is_err());
        assert_eq!(
            value_decision(&text, "alice")
                .unwrap()
                .chosen_value
                .as_deref(),
            Some("alice")
        );
        assert_eq!(
            value_decision(&text, "abort").unwrap().status,
            ApprovalStatus::Rejected
        );
        assert!(value_decision(&text, "two\nlines").is_err());
        assert!(value_decision(&text, &"x".repeat(MAX_TEXT_ANSWER + 1)).is_err());
    }
}
