//! The `approvals` table: a question a tool asked, the answers it allows, and the one
//! decision it gets. Deciding is first-writer-wins (`UPDATE … WHERE status = 'pending'`),
//! a decision answers only the run it is offered to (`crate::chain`: once per run, kept for
//! its chain's next resume, then spent with a reason), and every change leaves an audit row.
//!
//! What a decider may pass as the value: `approve` (the tool's own default, DESIGN §15;
//! the first option for user rules and cooperative requests), `reject` (or `abort`: end the tool), one of the option
//! values, or free text where the approval allows it.

use crate::audit::{self, AuditEntry};
use crate::db::Result;
use crate::event::ApprovalOption;
use crate::status::ApprovalStatus;
use crate::time;
use rusqlite::{Connection, OptionalExtension, Row, Transaction, params};
use serde::{Deserialize, Serialize};

/// The longest free-text answer accepted.
pub const MAX_TEXT_ANSWER: usize = 1024;

/// How a prompt is answered: its widget (DESIGN §15), one of a closed set. `Choice` and
/// `Menu` are what rows from before widgets say, and what user rules with options are.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
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

    fn parse(s: &str) -> Option<Self> {
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
    /// prompt after answering this one (`crate::chain`). `None` once it is spent.
    #[serde(default)]
    pub kept_for: Option<String>,
    /// Why the decision is spent, once it is (`consumed_at` set, `kept_for` gone): the run
    /// of its chain that ended, or the resume that did not use it. `None` while it is
    /// unused or kept, and for decisions used before reasons were kept.
    #[serde(default)]
    pub consumed_reason: Option<String>,
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

const COLUMNS: &str = "approval_id, tool_run_id, tool_name, execution_id, question, context, \
    options_json, default_value, allows_text, status, chosen_value, created_at, decided_at, \
    expires_at, decided_by, decision_channel, comment, request_fingerprint, prompt_fingerprint, \
    consumed_at, consumed_by, prompt_kind, prompt_line, rule_name, expire_action, claimed_by, \
    claimed_at, resumed_run_id, screen_digest, tool_digest, superseded_by, supersedes, kept_for, \
    consumed_reason";

fn from_row(r: &Row<'_>) -> rusqlite::Result<Approval> {
    let options: String = r.get(6)?;
    let status: String = r.get(9)?;
    let kind: Option<String> = r.get(21)?;
    Ok(Approval {
        approval_id: r.get(0)?,
        tool_run_id: r.get(1)?,
        tool_name: r.get(2)?,
        execution_id: r.get(3)?,
        question: r.get(4)?,
        context: r.get(5)?,
        options_json: serde_json::from_str(&options).unwrap_or_default(),
        default_value: r.get(7)?,
        allows_text: r.get::<_, i64>(8)? != 0,
        // A status written by a newer build reads as expired: never answerable.
        status: status.parse().unwrap_or(ApprovalStatus::Expired),
        chosen_value: r.get(10)?,
        created_at: r.get(11)?,
        decided_at: r.get(12)?,
        expires_at: r.get(13)?,
        decided_by: r.get(14)?,
        decision_channel: r.get(15)?,
        comment: r.get(16)?,
        request_fingerprint: r.get(17)?,
        prompt_fingerprint: r.get(18)?,
        consumed_at: r.get(19)?,
        consumed_by: r.get(20)?,
        prompt_kind: kind.as_deref().and_then(PromptKind::parse),
        prompt_line: r.get(22)?,
        rule_name: r.get(23)?,
        expire_action: r.get(24)?,
        claimed_by: r.get(25)?,
        claimed_at: r.get(26)?,
        resumed_run_id: r.get(27)?,
        screen_digest: r.get(28)?,
        tool_digest: r.get(29)?,
        superseded_by: r.get(30)?,
        supersedes: r.get(31)?,
        kept_for: r.get(32)?,
        consumed_reason: r.get(33)?,
    })
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

/// Inserts a new approval and its `approval_needed` audit row.
pub(crate) fn insert(tx: &Transaction<'_>, a: &Approval, actor: &str) -> Result<()> {
    let options: Vec<ApprovalOption> = a
        .options_json
        .iter()
        .map(|o| ApprovalOption {
            keys: None,
            ..o.clone()
        })
        .collect();
    tx.execute(
        &format!(
            "INSERT INTO approvals ({COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, \
             ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20, ?21, ?22, ?23, ?24, ?25, ?26, ?27, ?28, \
             ?29, ?30, ?31, ?32, ?33, ?34)"
        ),
        params![
            a.approval_id,
            a.tool_run_id,
            a.tool_name,
            a.execution_id,
            a.question,
            a.context,
            serde_json::to_string(&options).unwrap_or_else(|_| "[]".into()),
            a.default_value,
            a.allows_text,
            a.status.as_str(),
            a.chosen_value,
            a.created_at,
            a.decided_at,
            a.expires_at,
            a.decided_by,
            a.decision_channel,
            a.comment,
            a.request_fingerprint,
            a.prompt_fingerprint,
            a.consumed_at,
            a.consumed_by,
            a.prompt_kind.map(PromptKind::as_str),
            a.prompt_line,
            a.rule_name,
            a.expire_action,
            a.claimed_by,
            a.claimed_at,
            a.resumed_run_id,
            a.screen_digest,
            a.tool_digest,
            a.superseded_by,
            a.supersedes,
            a.kept_for,
            a.consumed_reason,
        ],
    )?;
    audit::append(
        tx,
        &AuditEntry {
            event: "approval_needed",
            tool_run_id: Some(&a.tool_run_id),
            approval_id: Some(&a.approval_id),
            actor,
            data: serde_json::json!({
                "question": a.question,
                "options": options,
                "default": a.default_value,
                "allows_text": a.allows_text,
                "prompt_kind": a.prompt_kind,
                "rule": a.rule_name,
                "expires_at": a.expires_at,
                "status": a.status,
            }),
        },
    )?;
    if a.status != ApprovalStatus::Pending {
        audit_status(tx, a, actor)?;
    }
    Ok(())
}

fn audit_status(tx: &Transaction<'_>, a: &Approval, actor: &str) -> Result<()> {
    audit::append(
        tx,
        &AuditEntry {
            event: "approval_status_change",
            tool_run_id: Some(&a.tool_run_id),
            approval_id: Some(&a.approval_id),
            actor,
            data: serde_json::json!({
                "status": a.status,
                "chosen_value": a.logged_value(),
                "decided_by": a.decided_by,
                "decision_channel": a.decision_channel,
                "comment": a.comment,
            }),
        },
    )?;
    Ok(())
}

/// One approval by id.
pub(crate) fn get(conn: &Connection, approval_id: &str) -> Result<Option<Approval>> {
    Ok(conn
        .query_row(
            &format!("SELECT {COLUMNS} FROM approvals WHERE approval_id = ?1"),
            [approval_id],
            from_row,
        )
        .optional()?)
}

/// Which approvals to list.
#[derive(Debug, Clone, Default)]
pub struct ApprovalFilter {
    /// Any of these statuses (empty: all).
    pub statuses: Vec<ApprovalStatus>,
    pub tool: Option<String>,
    pub tool_run_id: Option<String>,
    pub execution_id: Option<String>,
    /// Asked at or after this RFC 3339 time.
    pub since: Option<String>,
    /// At most this many, newest first.
    pub limit: Option<usize>,
}

/// Approvals matching the filter, newest first.
pub(crate) fn list(conn: &Connection, filter: &ApprovalFilter) -> Result<Vec<Approval>> {
    let (clause, args) = crate::db::Conditions::default()
        .any_of("status", filter.statuses.iter().map(|s| s.as_str()))
        .equals("tool_name", filter.tool.as_ref())
        .equals("tool_run_id", filter.tool_run_id.as_ref())
        .equals("execution_id", filter.execution_id.as_ref())
        .at_least("created_at", filter.since.as_ref())
        .into_parts();
    let mut sql = format!("SELECT {COLUMNS} FROM approvals{clause} ORDER BY approval_id DESC");
    if let Some(limit) = filter.limit {
        sql.push_str(&format!(" LIMIT {limit}"));
    }
    let mut stmt = conn.prepare(&sql)?;
    let rows = stmt
        .query_map(rusqlite::params_from_iter(args.iter()), from_row)?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(rows)
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
}

/// How a decision attempt ended.
#[derive(Debug, Clone, PartialEq)]
pub enum DecideOutcome {
    /// This call decided it.
    Decided(Box<Approval>),
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

/// Decides approval `id` with `value`, first writer wins. Run inside a write transaction.
/// A pending approval past its expiry is expired first (and the decider told so).
pub(crate) fn decide(
    tx: &Transaction<'_>,
    id: &str,
    value: &str,
    who: &Decider<'_>,
) -> Result<DecideOutcome> {
    let Some(current) = get(tx, id)? else {
        return Ok(DecideOutcome::NotFound);
    };
    let now = time::now_rfc3339();
    if current.is_overdue(&now) {
        expire_one(tx, &current, &now)?;
        let expired = get(tx, id)?.unwrap_or(current);
        return Ok(DecideOutcome::Conflict(Box::new(expired)));
    }
    if let Some(outcome) = version_refusal(&current, who) {
        return Ok(outcome);
    }
    let resolution = match value_decision(&current, value) {
        Ok(r) => r,
        Err(e) => {
            // A finished approval reports who decided it, whatever the value.
            if current.status != ApprovalStatus::Pending {
                return Ok(DecideOutcome::Conflict(Box::new(current)));
            }
            return Ok(DecideOutcome::Invalid(e));
        }
    };
    if current.status != ApprovalStatus::Pending {
        let same = current.status == resolution.status
            && (resolution.status == ApprovalStatus::Rejected
                || current.chosen_value == resolution.chosen_value);
        return Ok(if same {
            DecideOutcome::AlreadySame(Box::new(current))
        } else {
            DecideOutcome::Conflict(Box::new(current))
        });
    }
    let changed = tx.execute(
        "UPDATE approvals SET status = ?2, chosen_value = ?3, decided_at = ?4, decided_by = ?5,
            decision_channel = ?6, comment = ?7
         WHERE approval_id = ?1 AND status = 'pending'",
        params![
            id,
            resolution.status.as_str(),
            resolution.chosen_value,
            now,
            who.by,
            who.channel,
            who.comment,
        ],
    )?;
    let after = get(tx, id)?.unwrap_or(current);
    if changed == 0 {
        return Ok(DecideOutcome::Conflict(Box::new(after)));
    }
    audit_status(tx, &after, who.by)?;
    Ok(DecideOutcome::Decided(Box::new(after)))
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

fn expire_one(tx: &Transaction<'_>, a: &Approval, now: &str) -> Result<bool> {
    let Some(crate::rules::Expiry {
        chosen_value: chosen,
        comment,
    }) = crate::rules::expiry(a, now)
    else {
        return Ok(false);
    };
    let changed = tx.execute(
        "UPDATE approvals SET status = 'expired', chosen_value = ?2, decided_at = ?3,
            decided_by = 'system:expiry', decision_channel = 'system:expiry', comment = ?4
         WHERE approval_id = ?1 AND status = 'pending'",
        params![a.approval_id, chosen, now, comment],
    )?;
    if changed > 0
        && let Some(after) = get(tx, &a.approval_id)?
    {
        audit_status(tx, &after, "system:expiry")?;
    }
    Ok(changed > 0)
}

/// Expires every pending approval past its `expires_at`; returns them as they are now.
pub(crate) fn expire_due(tx: &Transaction<'_>) -> Result<Vec<Approval>> {
    expire_due_of(tx, None)
}

/// Expires the pending approvals past their `expires_at` — all of them, or only those of
/// the command with this request fingerprint; returns them as they are now.
pub(crate) fn expire_due_of(
    tx: &Transaction<'_>,
    request_fingerprint: Option<&str>,
) -> Result<Vec<Approval>> {
    let now = time::now_rfc3339();
    let due: Vec<Approval> = {
        let mut stmt = tx.prepare(&format!(
            "SELECT {COLUMNS} FROM approvals
             WHERE status = 'pending' AND expires_at IS NOT NULL AND expires_at <= ?1
               AND (?2 IS NULL OR request_fingerprint = ?2)"
        ))?;
        stmt.query_map(params![&now, request_fingerprint], from_row)?
            .collect::<rusqlite::Result<Vec<_>>>()?
    };
    let mut out = Vec::new();
    for a in due {
        if expire_one(tx, &a, &now)?
            && let Some(after) = get(tx, &a.approval_id)?
        {
            out.push(after);
        }
    }
    Ok(out)
}

/// Ends pending approval `old` as replaced by `new_id` (a retry showed another screen):
/// `expired`, decided by [`SUPERSEDED`], pointing to the new one. Its question, context and
/// options stay as the operator saw them. Returns the row as it is now, if it was pending.
pub(crate) fn supersede(
    tx: &Transaction<'_>,
    old: &Approval,
    new_id: &str,
    actor: &str,
) -> Result<Option<Approval>> {
    let now = time::now_rfc3339();
    let changed = tx.execute(
        "UPDATE approvals SET status = 'expired', decided_at = ?2, decided_by = ?3,
            decision_channel = ?3, comment = ?4, superseded_by = ?5
         WHERE approval_id = ?1 AND status = 'pending'",
        params![
            old.approval_id,
            now,
            SUPERSEDED,
            format!("the screen changed: asked again as {new_id}"),
            new_id
        ],
    )?;
    if changed == 0 {
        return Ok(None);
    }
    let after = get(tx, &old.approval_id)?;
    if let Some(a) = &after {
        audit_status(tx, a, actor)?;
    }
    Ok(after)
}

/// The approvals of run `tool_run_id` still pending, newest first.
pub(crate) fn pending_of(conn: &Connection, tool_run_id: &str) -> Result<Vec<Approval>> {
    list(
        conn,
        &ApprovalFilter {
            statuses: vec![ApprovalStatus::Pending],
            tool_run_id: Some(tool_run_id.to_owned()),
            ..Default::default()
        },
    )
}

/// Closes the approvals still pending for a run that has ended without their decision (the
/// tool was killed, timed out, or a cooperative tool went on without waiting): `expired`,
/// decided by `system:run-ended`, so nobody decides for a run that no longer waits.
pub(crate) fn abandon_pending(
    tx: &Transaction<'_>,
    tool_run_id: &str,
    why: &str,
) -> Result<Vec<Approval>> {
    let mut out = Vec::new();
    for a in pending_of(tx, tool_run_id)? {
        out.extend(close_pending(
            tx,
            tool_run_id,
            &a.approval_id,
            Channel::CLOSED,
            why,
        )?);
    }
    Ok(out)
}

/// Closes run `tool_run_id`'s pending approval `approval_id`, whose question nothing waits
/// for any more (`RunWrite::Withdraw`): as [`abandon_pending`] does, decided by
/// `system:withdrawn`. None when it is not this run's or not pending (decided meanwhile:
/// the decision stands).
pub(crate) fn withdraw_pending(
    tx: &Transaction<'_>,
    tool_run_id: &str,
    approval_id: &str,
    why: &str,
) -> Result<Option<Approval>> {
    close_pending(tx, tool_run_id, approval_id, WITHDRAWN, why)
}

/// Closes one pending approval of a run that nobody is to decide: `expired` by `by`, on the
/// closing channel (`system:run-ended`: a closed question answers nothing, ever), audited.
fn close_pending(
    tx: &Transaction<'_>,
    tool_run_id: &str,
    approval_id: &str,
    by: &str,
    why: &str,
) -> Result<Option<Approval>> {
    let changed = tx.execute(
        concat!(
            "UPDATE approvals SET status = 'expired', decided_at = ?3, decided_by = ?4,
                decision_channel = '",
            closed_channel!(),
            "', comment = ?5
             WHERE approval_id = ?1 AND tool_run_id = ?2 AND status = 'pending'"
        ),
        params![approval_id, tool_run_id, time::now_rfc3339(), by, why],
    )?;
    if changed == 0 {
        return Ok(None);
    }
    let after = get(tx, approval_id)?;
    if let Some(a) = &after {
        audit_status(tx, a, by)?;
    }
    Ok(after)
}

/// The live decisions of this command for this prompt (`rules::live`), in the order they
/// were asked: whom each is offered to is `rules::offered`'s to say.
pub(crate) fn live_answers(
    conn: &Connection,
    request_fingerprint: &str,
    prompt_fingerprint: &str,
) -> Result<Vec<Approval>> {
    let mut stmt = conn.prepare(&format!(
        "SELECT {COLUMNS} FROM approvals
         WHERE request_fingerprint = ?1 AND prompt_fingerprint = ?2 AND {LIVE}
         ORDER BY approval_id LIMIT 200"
    ))?;
    let rows = stmt
        .query_map(params![request_fingerprint, prompt_fingerprint], from_row)?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(rows)
}

/// SQL: not closed with nobody to answer ([`Channel::Closed`]).
pub(crate) const NOT_CLOSED: &str = concat!("decision_channel IS NOT '", closed_channel!(), "'");

/// SQL for `rules::live`: a decision that can still answer.
const LIVE: &str = concat!(
    "status != 'pending' AND decision_channel IS NOT '",
    closed_channel!(),
    "' AND (consumed_at IS NULL OR kept_for IS NOT NULL)"
);

/// The decided, unused approvals of this command, newest decision first: what parked runs
/// of it wait to be resumed with (`crate::chain::bind_at_start`).
pub(crate) fn fresh_decisions_of_command(
    conn: &Connection,
    request_fingerprint: &str,
) -> Result<Vec<Approval>> {
    let mut stmt = conn.prepare(&format!(
        "SELECT {COLUMNS} FROM approvals
         WHERE request_fingerprint = ?1 AND status != 'pending' AND consumed_at IS NULL
           AND {NOT_CLOSED}
         ORDER BY decided_at DESC, approval_id DESC LIMIT 50"
    ))?;
    let rows = stmt
        .query_map([request_fingerprint], from_row)?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(rows)
}

/// The live decisions held for run `run`'s resume: those it used and keeps (`kept_for`),
/// and its own decided ones nobody used yet.
pub(crate) fn held_for(conn: &Connection, run: &str) -> Result<Vec<Approval>> {
    let mut stmt = conn.prepare(&format!(
        "SELECT {COLUMNS} FROM approvals
         WHERE kept_for = ?1
            OR (tool_run_id = ?1 AND status != 'pending' AND consumed_at IS NULL
                AND {NOT_CLOSED})
         ORDER BY approval_id"
    ))?;
    let rows = stmt
        .query_map([run], from_row)?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(rows)
}

/// The approval of this command for this prompt that run `run` consumed, if any (a
/// cooperative tool re-run with its decision asks again).
pub(crate) fn find_used_by(
    conn: &Connection,
    request_fingerprint: &str,
    prompt_fingerprint: &str,
    run: &str,
) -> Result<Option<Approval>> {
    Ok(conn
        .query_row(
            &format!(
                "SELECT {COLUMNS} FROM approvals
                 WHERE request_fingerprint = ?1 AND prompt_fingerprint = ?2 AND consumed_by = ?3
                 ORDER BY approval_id DESC LIMIT 1"
            ),
            params![request_fingerprint, prompt_fingerprint, run],
            from_row,
        )
        .optional()?)
}

/// A pending approval for this prompt of this command (a retry asking again), if any.
pub(crate) fn find_pending(
    conn: &Connection,
    request_fingerprint: &str,
    prompt_fingerprint: &str,
) -> Result<Option<Approval>> {
    Ok(conn
        .query_row(
            &format!(
                "SELECT {COLUMNS} FROM approvals
                 WHERE request_fingerprint = ?1 AND prompt_fingerprint = ?2 AND status = 'pending'
                 ORDER BY approval_id DESC LIMIT 1"
            ),
            params![request_fingerprint, prompt_fingerprint],
            from_row,
        )
        .optional()?)
}

/// The first use of a decided approval, by run `by_run`: consumed by it, and kept for its
/// resume while its chain is live (`kept_for`). False when it was used before or is not
/// decided. A free-text answer stays on the row until the chain ends ([`spend`]): the
/// chain's next resume types it again.
pub(crate) fn consume(
    tx: &Transaction<'_>,
    approval_id: &str,
    by_run: &str,
    actor: &str,
) -> Result<bool> {
    let changed = tx.execute(
        "UPDATE approvals SET consumed_at = ?2, consumed_by = ?3, kept_for = ?3
         WHERE approval_id = ?1 AND consumed_at IS NULL AND status != 'pending'",
        params![approval_id, time::now_rfc3339(), by_run],
    )?;
    if changed > 0 {
        audit_consumed(tx, approval_id, by_run, actor)?;
    }
    Ok(changed > 0)
}

/// A decision kept for run `by_run`'s chain used again, by `by_run` (the resume it was
/// kept for): now kept for `by_run`'s own resume. False when it is not kept (spent), or
/// kept for `by_run` already (it used it).
pub(crate) fn take_kept(
    tx: &Transaction<'_>,
    approval_id: &str,
    by_run: &str,
    actor: &str,
) -> Result<bool> {
    let changed = tx.execute(
        "UPDATE approvals SET kept_for = ?2
         WHERE approval_id = ?1 AND kept_for IS NOT NULL AND kept_for != ?2",
        params![approval_id, by_run],
    )?;
    if changed > 0 {
        audit_consumed(tx, approval_id, by_run, actor)?;
    }
    Ok(changed > 0)
}

fn audit_consumed(
    tx: &Transaction<'_>,
    approval_id: &str,
    by_run: &str,
    actor: &str,
) -> Result<()> {
    audit::append(
        tx,
        &AuditEntry {
            event: "approval_consumed",
            tool_run_id: Some(by_run),
            approval_id: Some(approval_id),
            actor,
            data: serde_json::json!({ "consumed_by": by_run }),
        },
    )?;
    Ok(())
}

/// Spends a decision for good (`why` recorded as `consumed_reason`): it answers nothing any
/// more, and a free-text answer is dropped from the row. False when it was not live.
pub(crate) fn spend(
    tx: &Transaction<'_>,
    approval_id: &str,
    why: &str,
    actor: &str,
) -> Result<bool> {
    let Some(a) = get(tx, approval_id)? else {
        return Ok(false);
    };
    if !crate::rules::live(&a) {
        return Ok(false);
    }
    let keep_value = !a.chose_free_text();
    tx.execute(
        "UPDATE approvals SET consumed_at = COALESCE(consumed_at, ?2), kept_for = NULL,
            consumed_reason = ?3, chosen_value = CASE WHEN ?4 THEN chosen_value END
         WHERE approval_id = ?1",
        params![approval_id, time::now_rfc3339(), why, keep_value],
    )?;
    audit::append(
        tx,
        &AuditEntry {
            event: "approval_spent",
            tool_run_id: a.kept_for.as_deref().or(Some(&a.tool_run_id)),
            approval_id: Some(approval_id),
            actor,
            data: serde_json::json!({ "reason": why }),
        },
    )?;
    Ok(true)
}

/// Gives back decision `approval_id` that run `by_run` took but could not type (the prompt
/// went away first), to `by_run` again: unused, if `by_run` was its first user; else kept
/// for the run `by_run` resumes (`resumed`), as before `by_run` took it — offered to
/// `by_run` either way when the prompt comes back. False when `by_run` did not hold it.
pub(crate) fn give_back(
    tx: &Transaction<'_>,
    approval_id: &str,
    by_run: &str,
    resumed: Option<&str>,
    why: &str,
    actor: &str,
) -> Result<bool> {
    let Some(a) = get(tx, approval_id)? else {
        return Ok(false);
    };
    if a.kept_for.as_deref() != Some(by_run) {
        return Ok(false);
    }
    match (a.consumed_by.as_deref() == Some(by_run), resumed) {
        (true, _) => tx.execute(
            "UPDATE approvals SET consumed_at = NULL, consumed_by = NULL, kept_for = NULL
             WHERE approval_id = ?1",
            [approval_id],
        )?,
        (false, Some(from)) => tx.execute(
            "UPDATE approvals SET kept_for = ?2 WHERE approval_id = ?1",
            params![approval_id, from],
        )?,
        (false, None) => return Ok(false),
    };
    audit::append(
        tx,
        &AuditEntry {
            event: "approval_released",
            tool_run_id: Some(by_run),
            approval_id: Some(approval_id),
            actor,
            data: serde_json::json!({ "released_by": by_run, "why": why }),
        },
    )?;
    Ok(true)
}

/// Claims an approved approval for a resume by `worker`; false when another worker has it,
/// or a run already resumes its run (a re-run by hand started first: `crate::chain`).
pub(crate) fn claim(tx: &Transaction<'_>, approval_id: &str, worker: &str) -> Result<bool> {
    let changed = tx.execute(
        "UPDATE approvals SET claimed_by = ?2, claimed_at = ?3
         WHERE approval_id = ?1 AND claimed_at IS NULL AND consumed_at IS NULL
           AND status != 'pending' AND resumed_run_id IS NULL",
        params![approval_id, worker, time::now_rfc3339()],
    )?;
    Ok(changed > 0)
}

/// Records the run that resumed an approval.
pub(crate) fn set_resumed_run(tx: &Transaction<'_>, approval_id: &str, run: &str) -> Result<()> {
    tx.execute(
        "UPDATE approvals SET resumed_run_id = ?2 WHERE approval_id = ?1",
        params![approval_id, run],
    )?;
    Ok(())
}

/// Moves a pending approval to another run (a retry of the same command asking the same
/// question takes it over).
pub(crate) fn move_to_run(tx: &Transaction<'_>, approval_id: &str, run: &str) -> Result<()> {
    tx.execute(
        "UPDATE approvals SET tool_run_id = ?2 WHERE approval_id = ?1",
        params![approval_id, run],
    )?;
    Ok(())
}

/// How many approvals are pending, and how many of those expire within `soon`.
pub(crate) fn pending_counts(conn: &Connection, soon: std::time::Duration) -> Result<(i64, i64)> {
    let cutoff = time::to_rfc3339(std::time::SystemTime::now() + soon);
    Ok(conn.query_row(
        "SELECT COUNT(*), COALESCE(SUM(expires_at IS NOT NULL AND expires_at <= ?1), 0)
         FROM approvals WHERE status = 'pending'",
        [cutoff],
        |r| Ok((r.get(0)?, r.get(1)?)),
    )?)
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
            include_str!("store/pg/functions/core.sql"),
            include_str!("store/pg/functions/chain.sql"),
            include_str!("store/pg/functions/runner.sql"),
            include_str!("store/pg/functions/worker.sql"),
            include_str!("store/pg/functions/operator.sql"),
            include_str!("store/pg/functions/pipelines.sql"),
            include_str!("approvals.rs"),
            include_str!("chain.rs"),
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
    use crate::db::{self, OpenMode};
    use crate::testing::approval as sample;

    fn who(by: &str) -> Decider<'_> {
        Decider {
            by,
            channel: "cli",
            comment: None,
            version: None,
        }
    }

    fn setup(a: &Approval) -> (tempfile::TempDir, Connection) {
        let tmp = tempfile::tempdir().unwrap();
        let mut conn = db::open(&tmp.path().join("s.db"), OpenMode::Create).unwrap();
        db::write(&mut conn, |tx| insert(tx, a, "shim")).unwrap();
        (tmp, conn)
    }

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

    #[test]
    fn first_decider_wins_and_repeats_are_no_ops() {
        let (_tmp, mut conn) = setup(&sample("AP-1", PromptKind::Choice));
        let first = db::write(&mut conn, |tx| decide(tx, "AP-1", "y", &who("alice"))).unwrap();
        let DecideOutcome::Decided(a) = first else {
            panic!("{first:?}")
        };
        assert_eq!(a.status, ApprovalStatus::Approved);
        assert_eq!(a.decided_by.as_deref(), Some("alice"));
        let again = db::write(&mut conn, |tx| decide(tx, "AP-1", "approve", &who("bob"))).unwrap();
        assert!(matches!(again, DecideOutcome::AlreadySame(_)), "{again:?}");
        let other = db::write(&mut conn, |tx| decide(tx, "AP-1", "reject", &who("bob"))).unwrap();
        let DecideOutcome::Conflict(c) = other else {
            panic!("{other:?}")
        };
        assert_eq!(c.decided_by.as_deref(), Some("alice"));
        let missing = db::write(&mut conn, |tx| decide(tx, "AP-9", "y", &who("bob"))).unwrap();
        assert_eq!(missing, DecideOutcome::NotFound);
        // Audit: needed, then one status change.
        let events = audit::for_run(&conn, "TR-1").unwrap();
        let kinds: Vec<&str> = events.iter().map(|e| e.event.as_str()).collect();
        assert_eq!(kinds, ["approval_needed", "approval_status_change"]);
        assert!(audit::verify(&conn).unwrap().intact());
    }

    #[test]
    fn invalid_value_on_pending_is_reported() {
        let (_tmp, mut conn) = setup(&sample("AP-1", PromptKind::Choice));
        let out = db::write(&mut conn, |tx| decide(tx, "AP-1", "maybe", &who("a"))).unwrap();
        assert!(matches!(out, DecideOutcome::Invalid(_)), "{out:?}");
        assert_eq!(
            get(&conn, "AP-1").unwrap().unwrap().status,
            ApprovalStatus::Pending
        );
    }

    #[test]
    fn expiry_rejects_or_takes_the_default() {
        let mut a = sample("AP-1", PromptKind::Choice);
        a.expires_at = Some("2000-01-01T00:00:00.000Z".into());
        let mut b = sample("AP-2", PromptKind::Choice);
        b.expires_at = Some("2000-01-01T00:00:00.000Z".into());
        b.expire_action = "default".into();
        let mut c = sample("AP-3", PromptKind::Choice);
        c.expires_at = Some("2999-01-01T00:00:00.000Z".into());
        let (_tmp, mut conn) = setup(&a);
        db::write(&mut conn, |tx| {
            insert(tx, &b, "shim")?;
            insert(tx, &c, "shim")
        })
        .unwrap();
        let expired = db::write(&mut conn, expire_due).unwrap();
        assert_eq!(expired.len(), 2);
        let a = get(&conn, "AP-1").unwrap().unwrap();
        assert_eq!(a.status, ApprovalStatus::Expired);
        assert_eq!(a.decided_by.as_deref(), Some("system:expiry"));
        assert!(!a.answers());
        let b = get(&conn, "AP-2").unwrap().unwrap();
        assert_eq!(b.chosen_value.as_deref(), Some("n"));
        assert!(b.answers());
        assert_eq!(
            get(&conn, "AP-3").unwrap().unwrap().status,
            ApprovalStatus::Pending
        );
    }

    #[test]
    fn deciding_an_overdue_approval_expires_it() {
        let mut a = sample("AP-1", PromptKind::Choice);
        a.expires_at = Some("2000-01-01T00:00:00.000Z".into());
        let (_tmp, mut conn) = setup(&a);
        let out = db::write(&mut conn, |tx| decide(tx, "AP-1", "y", &who("late"))).unwrap();
        let DecideOutcome::Conflict(c) = out else {
            panic!("{out:?}")
        };
        assert_eq!(c.status, ApprovalStatus::Expired);
    }

    #[test]
    fn a_decision_is_used_once_kept_for_its_chain_and_spent_with_a_reason() {
        let mut a = sample("AP-1", PromptKind::Unknown);
        a.allows_text = true;
        let (_tmp, mut conn) = setup(&a);
        assert!(
            live_answers(&conn, "req", "prm").unwrap().is_empty(),
            "pending is not an answer"
        );
        assert!(find_pending(&conn, "req", "prm").unwrap().is_some());
        db::write(&mut conn, |tx| decide(tx, "AP-1", "free text", &who("a"))).unwrap();
        assert_eq!(live_answers(&conn, "req", "prm").unwrap().len(), 1);
        // The first use consumes it, kept for the resume of the run that used it.
        assert!(db::write(&mut conn, |tx| consume(tx, "AP-1", "TR-2", "shim")).unwrap());
        assert!(!db::write(&mut conn, |tx| consume(tx, "AP-1", "TR-3", "shim")).unwrap());
        let used = get(&conn, "AP-1").unwrap().unwrap();
        assert_eq!(used.kept_for.as_deref(), Some("TR-2"));
        assert_eq!(
            used.chosen_value.as_deref(),
            Some("free text"),
            "kept for the chain"
        );
        // TR-3 resumed TR-2: it takes the kept decision on; not twice.
        assert!(db::write(&mut conn, |tx| take_kept(tx, "AP-1", "TR-3", "shim")).unwrap());
        assert!(!db::write(&mut conn, |tx| take_kept(tx, "AP-1", "TR-3", "shim")).unwrap());
        // Given back (not typed after all): kept for TR-2's resume again.
        assert!(
            db::write(&mut conn, |tx| give_back(
                tx,
                "AP-1",
                "TR-3",
                Some("TR-2"),
                "test",
                "shim"
            ))
            .unwrap()
        );
        assert_eq!(
            get(&conn, "AP-1").unwrap().unwrap().kept_for.as_deref(),
            Some("TR-2")
        );
        assert_eq!(live_answers(&conn, "req", "prm").unwrap().len(), 1);
        // Spent: no longer live, the text gone, the reason kept.
        assert!(db::write(&mut conn, |tx| spend(tx, "AP-1", "the chain ended", "shim")).unwrap());
        assert!(!db::write(&mut conn, |tx| spend(tx, "AP-1", "again", "shim")).unwrap());
        let spent = get(&conn, "AP-1").unwrap().unwrap();
        assert_eq!(spent.kept_for, None);
        assert_eq!(spent.chosen_value, None);
        assert_eq!(spent.consumed_reason.as_deref(), Some("the chain ended"));
        assert!(live_answers(&conn, "req", "prm").unwrap().is_empty());
        assert!(audit::verify(&conn).unwrap().intact());
    }

    #[test]
    fn claims_are_exclusive() {
        let (_tmp, mut conn) = setup(&sample("AP-1", PromptKind::Choice));
        assert!(
            !db::write(&mut conn, |tx| claim(tx, "AP-1", "w1")).unwrap(),
            "pending cannot be claimed"
        );
        db::write(&mut conn, |tx| decide(tx, "AP-1", "y", &who("a"))).unwrap();
        assert!(db::write(&mut conn, |tx| claim(tx, "AP-1", "w1")).unwrap());
        assert!(!db::write(&mut conn, |tx| claim(tx, "AP-1", "w2")).unwrap());
    }

    #[test]
    fn keys_are_never_stored_and_json_fields_are_the_columns() {
        let (_tmp, conn) = setup(&sample("AP-1", PromptKind::Choice));
        let raw: String = conn
            .query_row("SELECT options_json FROM approvals", [], |r| r.get(0))
            .unwrap();
        assert_eq!(
            raw,
            r#"[{"value":"y","label":"Yes"},{"value":"n","label":"No"}]"#
        );
        let a = get(&conn, "AP-1").unwrap().unwrap();
        let v = serde_json::to_value(&a).unwrap();
        let mut keys: Vec<&str> = v.as_object().unwrap().keys().map(|k| k.as_str()).collect();
        let mut cols: Vec<&str> = COLUMNS.split(',').map(str::trim).collect();
        keys.sort();
        cols.sort();
        assert_eq!(keys, cols);
        let listed = list(
            &conn,
            &ApprovalFilter {
                statuses: vec![ApprovalStatus::Pending],
                ..Default::default()
            },
        )
        .unwrap();
        assert_eq!(listed.len(), 1);
        assert_eq!(
            pending_counts(&conn, std::time::Duration::ZERO).unwrap(),
            (1, 0)
        );
    }
}
