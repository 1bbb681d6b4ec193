//! Configuration: the user's `config.toml`, overridden by the nearest `.headless-run.toml`
//! from the working directory upward, overridden by environment variables, overridden by
//! flags. A broken file is an error naming the file, the line and the key.
//!
//! ```toml
//! [defaults]
//! timeout = "30m"          # hard limit ("none" for no limit)
//! stall_timeout = "10m"    # no output and no heartbeat
//! on_stall = "kill"        # or "mark"
//! on_prompt = "exit"       # or "wait"
//! prompt_idle = "300ms"
//! not_prompt_timeout = "5s" # nothing asked (an editor, top): end what waits ("none": wait)
//! kill_grace = "3s"
//! approval_ttl = "24h"
//! on_expire = "reject"     # or "default"
//!
//! [tools.terraform]
//! stall_timeout = "30m"
//!
//! [[prompt_rules]]
//! name = "deploy"
//! tool = "deploy.sh"
//! regex = 'Deploy to (\w+)\?'
//! options = [{ value = "yes", keys = "yes\r" }, { value = "no" }]
//! default = "no"
//!
//! [[policies]]
//! name = "tmp-files"
//! tool = "rm"
//! value = "y"
//! when = [{ field = "prompt", op = "glob", value = "*.tmp'? " }]
//!
//! [notify]
//! command = ["/usr/local/bin/page-oncall"]
//! ```

use crate::paths::{self, EnvLookup};
use regex::Regex;
use serde::de::Error as _;
use serde::{Deserialize, Deserializer};
use std::collections::BTreeMap;
use std::fmt;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The project file name looked up from the working directory upward.
pub const PROJECT_FILE: &str = ".headless-run.toml";

/// Why the configuration could not be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("config error in {}{}{}: {message}", file.display(), line.map(|l| format!(", line {l}")).unwrap_or_default(), key.as_ref().map(|k| format!(", key `{k}`")).unwrap_or_default())]
    Invalid {
        file: PathBuf,
        line: Option<usize>,
        key: Option<String>,
        message: String,
    },
    #[error("config error: cannot read {}: {source}", file.display())]
    Read {
        file: PathBuf,
        source: std::io::Error,
    },
    #[error("config error in environment variable {var}: {message}")]
    Env { var: String, message: String },
}

/// What to do when a run stalls.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OnStall {
    /// End the tool: status `stalled`, exit 92.
    Kill,
    /// Only mark the run `stalled`; back to `running` when output resumes.
    Mark,
}

/// What to do when a tool blocks on a prompt in headless mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OnPrompt {
    /// Record the approval, end the tool, exit 90.
    Exit,
    /// Record the approval, keep the tool alive and type the decision.
    Wait,
}

/// What an expired approval means.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum OnExpire {
    Reject,
    Default,
}

macro_rules! parse_enum {
    ($ty:ty, $($name:literal => $val:expr),+) => {
        impl std::str::FromStr for $ty {
            type Err = String;
            fn from_str(s: &str) -> Result<Self, String> {
                match s.trim() {
                    $($name => Ok($val),)+
                    other => Err(format!("`{other}` is not one of: {}", [$($name),+].join(", "))),
                }
            }
        }
    };
}
parse_enum!(OnStall, "kill" => OnStall::Kill, "mark" => OnStall::Mark);
parse_enum!(OnPrompt, "exit" => OnPrompt::Exit, "wait" => OnPrompt::Wait);
parse_enum!(OnExpire, "reject" => OnExpire::Reject, "default" => OnExpire::Default);

/// A duration setting that may also be switched off (`"none"`, `"off"`, `"never"`). Zero is
/// kept as zero: a zero timeout is refused by [`Resolved::check`] rather than read as "no
/// timeout", which is what `none` says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limit(pub Option<Duration>);

impl Limit {
    /// Parses `10m`, `90`, `1.5`, `none`, `off`.
    pub fn parse(s: &str) -> Result<Limit, String> {
        match s.trim() {
            "none" | "off" | "never" => Ok(Limit(None)),
            other => crate::time::parse_duration(other).map(|d| Limit(Some(d))),
        }
    }
}

impl<'de> Deserialize<'de> for Limit {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl serde::de::Visitor<'_> for V {
            type Value = Limit;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a duration such as \"90s\", \"10m\", \"1h30m\", a number of seconds, or \"none\"")
            }
            fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<Limit, E> {
                Limit::parse(s).map_err(E::custom)
            }
            fn visit_i64<E: serde::de::Error>(self, n: i64) -> Result<Limit, E> {
                if n < 0 {
                    return Err(E::custom("a duration cannot be negative"));
                }
                crate::time::parse_duration(&n.to_string())
                    .map(|d| Limit(Some(d)))
                    .map_err(E::custom)
            }
            fn visit_f64<E: serde::de::Error>(self, n: f64) -> Result<Limit, E> {
                if !(n.is_finite() && n >= 0.0) {
                    return Err(E::custom("a duration must be a non-negative number"));
                }
                crate::time::parse_duration(&n.to_string())
                    .map(|d| Limit(Some(d)))
                    .map_err(E::custom)
            }
        }
        d.deserialize_any(V)
    }
}

/// Thresholds and behaviours; every field optional so that layers can be overlaid.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Settings {
    pub timeout: Option<Limit>,
    pub stall_timeout: Option<Limit>,
    pub on_stall: Option<OnStall>,
    pub on_prompt: Option<OnPrompt>,
    pub prompt_idle: Option<Limit>,
    pub not_prompt_timeout: Option<Limit>,
    pub kill_grace: Option<Limit>,
    pub approval_ttl: Option<Limit>,
    pub on_expire: Option<OnExpire>,
}

impl Settings {
    /// Removes what shapes decisions (`approval_ttl`, `on_expire`, `on_prompt`); returns
    /// the keys of those that were set.
    pub fn drop_decision_settings(&mut self) -> Vec<&'static str> {
        [
            ("approval_ttl", self.approval_ttl.take().is_some()),
            ("on_expire", self.on_expire.take().is_some()),
            ("on_prompt", self.on_prompt.take().is_some()),
        ]
        .into_iter()
        .filter_map(|(key, was_set)| was_set.then_some(key))
        .collect()
    }

    /// Takes every field that `top` sets.
    pub fn overlay(&mut self, top: &Settings) {
        macro_rules! take {
            ($($f:ident),+) => { $( if top.$f.is_some() { self.$f = top.$f; } )+ };
        }
        take!(
            timeout,
            stall_timeout,
            on_stall,
            on_prompt,
            prompt_idle,
            not_prompt_timeout,
            kill_grace,
            approval_ttl,
            on_expire
        );
    }

    /// Fills in the built-in defaults.
    pub fn resolve(&self) -> Resolved {
        let d = Resolved::default();
        Resolved {
            timeout: self.timeout.map_or(d.timeout, |l| l.0),
            stall_timeout: self.stall_timeout.map_or(d.stall_timeout, |l| l.0),
            on_stall: self.on_stall.unwrap_or(d.on_stall),
            on_prompt: self.on_prompt.unwrap_or(d.on_prompt),
            prompt_idle: self
                .prompt_idle
                .map_or(d.prompt_idle, |l| l.0.unwrap_or(Duration::from_millis(50))),
            not_prompt_timeout: self
                .not_prompt_timeout
                .map_or(d.not_prompt_timeout, |l| l.0),
            kill_grace: self
                .kill_grace
                .map_or(d.kill_grace, |l| l.0.unwrap_or(Duration::ZERO)),
            approval_ttl: self.approval_ttl.map_or(d.approval_ttl, |l| l.0),
            on_expire: self.on_expire.unwrap_or(d.on_expire),
        }
    }
}

/// Settings with every value decided.
#[derive(Debug, Clone, PartialEq)]
pub struct Resolved {
    /// Hard wall-clock limit (`None`: none).
    pub timeout: Option<Duration>,
    /// No output and no heartbeat for this long is a stall (`None`: never).
    pub stall_timeout: Option<Duration>,
    pub on_stall: OnStall,
    pub on_prompt: OnPrompt,
    /// Output idle this long before the prompt detector looks.
    pub prompt_idle: Duration,
    /// A tool blocked reading its terminal with nothing asked (an editor, a full-screen
    /// program) this long has what waits ended, as without a terminal (`None`: it waits,
    /// for the stall timeout).
    pub not_prompt_timeout: Option<Duration>,
    /// Between TERM and KILL when ending a tool.
    pub kill_grace: Duration,
    /// How long an approval stays pending (`None`: forever).
    pub approval_ttl: Option<Duration>,
    pub on_expire: OnExpire,
}

impl Resolved {
    /// Refuses settings that cannot mean what they say: a zero (or sub-nanosecond) timeout,
    /// which is no time at all — `none` switches a limit off — and a stall timeout shorter
    /// than the prompt idle window, which would call a tool at a prompt stalled before its
    /// prompt is seen.
    pub fn check(&self) -> Result<(), String> {
        for (key, value) in [
            ("timeout", self.timeout),
            ("stall_timeout", self.stall_timeout),
            ("approval_ttl", self.approval_ttl),
            ("prompt_idle", Some(self.prompt_idle)),
            ("not_prompt_timeout", self.not_prompt_timeout),
        ] {
            if value.is_some_and(|d| d.is_zero()) {
                return Err(format!(
                    "{key} is 0, which is no time at all; give a duration, or `none` to switch it off"
                ));
            }
        }
        if let Some(stall) = self.stall_timeout
            && stall < self.prompt_idle
        {
            return Err(format!(
                "stall_timeout ({}) is shorter than prompt_idle ({}): a tool waiting at a prompt would be called stalled before the prompt is seen",
                crate::time::short_duration(stall),
                crate::time::short_duration(self.prompt_idle)
            ));
        }
        Ok(())
    }
}

/// How long a tool may wait with nothing asked before what waits is ended (the default of
/// `not_prompt_timeout`): a few seconds, about what vim takes to give up without a terminal.
pub const NOT_PROMPT_TIMEOUT: Duration = Duration::from_secs(5);

impl Default for Resolved {
    fn default() -> Self {
        Resolved {
            timeout: None,
            stall_timeout: Some(Duration::from_secs(600)),
            on_stall: OnStall::Kill,
            on_prompt: OnPrompt::Exit,
            prompt_idle: Duration::from_millis(300),
            not_prompt_timeout: Some(NOT_PROMPT_TIMEOUT),
            kill_grace: Duration::from_secs(3),
            approval_ttl: Some(Duration::from_secs(24 * 3600)),
            on_expire: OnExpire::Reject,
        }
    }
}

/// A regular expression, compiled when the config is read so a bad one is reported with
/// its file, line and key.
#[derive(Debug, Clone)]
pub struct Pattern {
    pub source: String,
    pub regex: Regex,
}

impl Pattern {
    /// Compiles `source`.
    pub fn new(source: &str) -> Result<Self, String> {
        Regex::new(source)
            .map(|regex| Pattern {
                source: source.to_owned(),
                regex,
            })
            .map_err(|e| format!("invalid regex: {e}"))
    }
}

impl PartialEq for Pattern {
    fn eq(&self, other: &Self) -> bool {
        self.source == other.source
    }
}

impl<'de> Deserialize<'de> for Pattern {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Pattern::new(&s).map_err(D::Error::custom)
    }
}

/// An answer a prompt rule offers.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OptionConfig {
    pub value: String,
    #[serde(default)]
    pub label: Option<String>,
    /// Exact keys to type; default: the value and Enter (`"VALUE\r"`).
    #[serde(default)]
    pub keys: Option<String>,
}

/// Which file a rule came from: the user's own, or a project's (which may only describe
/// prompts). Shown before the rule's name: `user:deploy`, `project:deploy`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Origin {
    #[default]
    User,
    Project,
}

impl Origin {
    pub fn as_str(self) -> &'static str {
        match self {
            Origin::User => "user",
            Origin::Project => "project",
        }
    }
}

/// A user prompt rule.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, try_from = "RawPromptRule")]
pub struct PromptRuleConfig {
    pub name: String,
    /// The file it came from (set as the file is loaded).
    pub origin: Origin,
    pub tool: Option<String>,
    pub regex: Pattern,
    pub options: Vec<OptionConfig>,
    pub default: Option<String>,
    pub secret: bool,
    pub allows_text: bool,
    /// The tool's non-interactive alternative, shown when the prompt is refused.
    pub alternative: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPromptRule {
    name: String,
    #[serde(default)]
    tool: Option<String>,
    regex: Pattern,
    #[serde(default)]
    options: Vec<OptionConfig>,
    #[serde(default)]
    default: Option<String>,
    #[serde(default)]
    secret: bool,
    #[serde(default)]
    allows_text: bool,
    #[serde(default)]
    alternative: Option<String>,
}

impl TryFrom<RawPromptRule> for PromptRuleConfig {
    type Error = String;
    fn try_from(r: RawPromptRule) -> Result<Self, String> {
        if r.name.trim().is_empty() {
            return Err("a prompt rule needs a non-empty name".into());
        }
        if !r.secret && r.options.is_empty() && !r.allows_text {
            return Err(format!(
                "prompt rule `{}` needs options (or allows_text = true, or secret = true)",
                r.name
            ));
        }
        if let Some(bad) = r
            .options
            .iter()
            .find(|o| o.value.trim().is_empty() || o.value.chars().any(char::is_control))
        {
            return Err(format!(
                "prompt rule `{}`: option value {:?} must be non-empty plain text",
                r.name, bad.value
            ));
        }
        // Keys are typed into the tool: plain text and at most a final Enter, so a rule can
        // never send a control sequence the operator did not see as an option.
        if let Some(bad) = r.options.iter().find_map(|o| {
            let keys = o.keys.as_deref()?;
            let body = keys.strip_suffix('\r').unwrap_or(keys);
            body.chars().any(char::is_control).then_some(keys)
        }) {
            return Err(format!(
                "prompt rule `{}`: keys {bad:?} may hold no control characters but a final \\r",
                r.name
            ));
        }
        if let Some(d) = &r.default
            && !r.options.iter().any(|o| &o.value == d)
        {
            return Err(format!(
                "prompt rule `{}`: default `{d}` is not one of its option values",
                r.name
            ));
        }
        Ok(PromptRuleConfig {
            name: r.name,
            origin: Origin::User,
            tool: r.tool,
            regex: r.regex,
            options: r.options,
            default: r.default,
            secret: r.secret,
            allows_text: r.allows_text,
            alternative: r.alternative,
        })
    }
}

/// What a policy condition looks at.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CondField {
    /// The tool name.
    Tool,
    /// The prompt line (the cursor's line).
    Prompt,
    /// The whole question.
    Question,
    /// The command line, joined with spaces.
    Argv,
    /// Any single argument (true if one matches).
    Arg,
    /// The working directory.
    Cwd,
}

/// How a policy condition compares.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CondOp {
    Equals,
    NotEquals,
    Contains,
    StartsWith,
    EndsWith,
    /// A regular expression search.
    Matches,
    /// A shell-style glob (`*`, `?`) over the whole text.
    Glob,
}

/// One structured condition: field, operator, value. Never evaluated as code.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, try_from = "RawCondition")]
pub struct Condition {
    pub field: CondField,
    pub op: CondOp,
    pub value: String,
    /// Compiled when `op` is `matches`.
    pub regex: Option<Pattern>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCondition {
    field: CondField,
    op: CondOp,
    value: String,
}

impl TryFrom<RawCondition> for Condition {
    type Error = String;
    fn try_from(r: RawCondition) -> Result<Self, String> {
        let regex = match r.op {
            CondOp::Matches => Some(Pattern::new(&r.value)?),
            _ => None,
        };
        Ok(Condition {
            field: r.field,
            op: r.op,
            value: r.value,
            regex,
        })
    }
}

/// A policy: prompts matching every condition are decided with `value` automatically.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PolicyConfig {
    pub name: String,
    #[serde(default)]
    pub tool: Option<String>,
    /// Shorthand for a `matches` condition on the prompt line.
    #[serde(default)]
    pub prompt: Option<Pattern>,
    /// Shorthand for a `matches` condition on the joined command line.
    #[serde(default)]
    pub argv: Option<Pattern>,
    #[serde(default)]
    pub when: Vec<Condition>,
    pub value: String,
}

/// `[[reviewers]]`: what an approval asked by a matching command needs before its decision
/// is used — N distinct people (never the run's own user, optionally of a group) and a
/// wait timer (`crate::reviews`). Matched on the command (tool, command line, arguments,
/// directory), never on what the tool prints. Every matching rule of every file applies:
/// the strictest of each wins, so a project file can add to what the user's asks, never
/// take away.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReviewersConfig {
    pub name: String,
    #[serde(default)]
    pub tool: Option<String>,
    /// Shorthand for a `matches` condition on the joined command line.
    #[serde(default)]
    pub argv: Option<Pattern>,
    /// Conditions on `tool`, `argv`, `arg` and `cwd` (not the prompt: a rule is chosen
    /// before anything is asked).
    #[serde(default)]
    pub when: Vec<Condition>,
    /// Distinct people who must approve (1–20; default 1).
    #[serde(default)]
    pub required: Option<u32>,
    /// They must be members of this group (an OS group, a PostgreSQL role, or a token's
    /// `--group` on `monitor serve`).
    #[serde(default)]
    pub group: Option<String>,
    /// How long an approved decision is held before it is used (`10m`); any reviewer may
    /// still reject it meanwhile.
    #[serde(default)]
    pub wait: Option<Limit>,
}

impl ReviewersConfig {
    /// The most people a rule may ask for.
    pub const MAX_REQUIRED: u32 = crate::reviews::MAX_REQUIRED;

    /// What is wrong with the rule, if anything: (key, message).
    fn check(&self) -> Result<(), (&'static str, String)> {
        if let Some(n) = self.required
            && !(1..=Self::MAX_REQUIRED).contains(&n)
        {
            return Err((
                "required",
                format!("{n} people: between 1 and {}", Self::MAX_REQUIRED),
            ));
        }
        if let Some(g) = &self.group
            && !crate::reviews::valid_group(g)
        {
            return Err((
                "group",
                "a group name is letters, digits, `.`, `_`, `-` and `@`, at most 64".into(),
            ));
        }
        match self.wait.map(|w| w.0) {
            Some(None) => {
                return Err((
                    "wait",
                    "a wait timer is a duration (`10m`), not `none`".into(),
                ));
            }
            Some(Some(d)) if d.as_secs() > crate::reviews::MAX_WAIT_SECS => {
                return Err(("wait", "a wait timer is at most 30 days".into()));
            }
            _ => {}
        }
        if let Some(c) = self
            .when
            .iter()
            .find(|c| matches!(c.field, CondField::Prompt | CondField::Question))
        {
            return Err((
                "when",
                format!(
                    "`{}` is what a tool prints: a reviewers rule is chosen from the command (tool, argv, arg, cwd) before anything is asked",
                    match c.field {
                        CondField::Prompt => "prompt",
                        _ => "question",
                    }
                ),
            ));
        }
        if self.required.is_none() && self.group.is_none() && self.wait.is_none() {
            return Err((
                "required",
                "the rule asks for nothing: set `required`, `group` or `wait`".into(),
            ));
        }
        Ok(())
    }
}

/// The notify hook: a command run for each new approval.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NotifyConfig {
    /// Program and arguments (no shell).
    pub command: Vec<String>,
    /// How long it may run before it is killed (default 10s).
    #[serde(default)]
    pub timeout: Option<Limit>,
}

/// `[[webhooks]]`: where `monitor serve` posts each approval asked and decided.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WebhookConfig {
    /// The receiver (`https://…`; `http://` only on loopback). A Slack incoming webhook's
    /// URL is itself a secret: it is never logged, only its host.
    pub url: String,
    /// `json` (the default: the event and the approval row) or `slack` (a message with
    /// blocks, for a Slack-compatible incoming webhook).
    #[serde(default)]
    pub format: WebhookFormat,
    /// The environment variable of `monitor serve` holding the signing secret: each request
    /// is then signed (`X-Headless-Run-Signature`, `hr_shared::webhook`).
    #[serde(default)]
    pub secret_env: Option<String>,
    /// Attempts after the first failed one (a connection error, 408, 429 or 5xx), one to
    /// 60 seconds apart, doubling (default 5).
    #[serde(default)]
    pub retries: Option<u32>,
    /// The web page's public URL, for a link to each approval (`URL/#/approvals/AP-…`).
    #[serde(default)]
    pub link: Option<String>,
}

/// `[[email]]`: whom `monitor serve` mails each approval asked.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EmailConfig {
    /// Recipients (`name@host` or `Name <name@host>`).
    pub to: Vec<String>,
    /// The sender.
    pub from: String,
    /// The SMTP server: `smtp://HOST[:PORT]` (STARTTLS required; port 587 by default) or
    /// `smtps://HOST[:PORT]` (TLS from the first byte; 465). Never in clear.
    pub smtp: String,
    /// The server's environment variables holding the SMTP login and password, if it
    /// wants one.
    #[serde(default)]
    pub username_env: Option<String>,
    #[serde(default)]
    pub password_env: Option<String>,
    /// CA certificates (PEM) to trust for the SMTP server, instead of the system's.
    #[serde(default)]
    pub ca: Option<PathBuf>,
    /// The web page's public URL, for a link to each approval.
    #[serde(default)]
    pub link: Option<String>,
    /// The operator (a token's name) these recipients are: each mail then carries a signed,
    /// single-use decision link for them (`hr_shared::links`) instead of a plain one.
    #[serde(default)]
    pub operator: Option<String>,
    /// With `operator`: the link alone decides, without a login (only for a mailbox that
    /// operator alone reads).
    #[serde(default)]
    pub link_only: bool,
    /// How long a decision link lasts (default 1h, at most 7d).
    #[serde(default)]
    pub link_expires: Option<Limit>,
    /// Attempts after a failed one (default 5), one to 60 seconds apart.
    #[serde(default)]
    pub retries: Option<u32>,
}

/// `[slack]`: `monitor serve` takes the Approve and Reject buttons of its Slack messages
/// (`POST /api/v1/slack/actions`, Slack's "interactivity request URL").
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SlackConfig {
    /// The server's environment variable holding the Slack app's signing secret.
    pub signing_secret_env: String,
    /// Slack user id → the operator token it decides as (`U0123ABCD = "alice"`). A Slack
    /// user not listed decides nothing.
    #[serde(default)]
    pub users: BTreeMap<String, String>,
}

/// A webhook's body.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum WebhookFormat {
    #[default]
    Json,
    Slack,
}

/// One configuration file.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConfigFile {
    #[serde(default)]
    pub defaults: Settings,
    #[serde(default)]
    pub tools: BTreeMap<String, Settings>,
    #[serde(default)]
    pub prompt_rules: Vec<PromptRuleConfig>,
    #[serde(default)]
    pub policies: Vec<PolicyConfig>,
    /// What approvals of matching commands need: reviewers and wait timers.
    #[serde(default)]
    pub reviewers: Vec<ReviewersConfig>,
    #[serde(default)]
    pub notify: Option<NotifyConfig>,
    /// Where `monitor serve` posts approvals. Read from the user's file only.
    #[serde(default)]
    pub webhooks: Vec<WebhookConfig>,
    /// Whom `monitor serve` mails approvals. Read from the user's file only.
    #[serde(default)]
    pub email: Vec<EmailConfig>,
    /// Slack's buttons: who each Slack user is here. Read from the user's file only.
    #[serde(default)]
    pub slack: Option<SlackConfig>,
    /// The store to record in (`postgres://…`), when not the state dir's SQLite database;
    /// `HEADLESS_RUN_DB` wins over it. Read from the user's file only.
    #[serde(default)]
    pub store: Option<String>,
    /// What this host's `monitor worker` runs besides its own identity's work. Read from the
    /// user's file only.
    #[serde(default)]
    pub worker: Option<WorkerConfig>,
}

/// `[worker]`: whom this host's workers trust.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkerConfig {
    /// Identities (PostgreSQL logins) whose pipelines' labelled steps a label worker here
    /// runs besides its own identity's, when their starter named this worker's identity
    /// (`monitor pipeline run --workers`). Never from a project file or a row.
    #[serde(default)]
    pub pipelines_from: Vec<String>,
}

/// The `store` key of the user's config file (`HEADLESS_RUN_CONFIG`, else the XDG one), if
/// it names a PostgreSQL store. Read apart from the rest of the file (whose errors
/// `Config::load` reports), since the store is chosen before anything else.
pub fn user_store(env: EnvLookup<'_>) -> Option<String> {
    let file = match env("HEADLESS_RUN_CONFIG").filter(|v| !v.is_empty()) {
        Some(explicit) => PathBuf::from(explicit),
        None => paths::user_config_file(env)?,
    };
    let text = read_bounded(&file).ok()?;
    let table: toml::Table = toml::from_str(&text).ok()?;
    table
        .get("store")?
        .as_str()
        .filter(|s| crate::url::is_url(s))
        .map(str::to_owned)
}

impl ConfigFile {
    /// Parses the text of `file`.
    pub fn parse(file: &Path, text: &str) -> Result<Self, ConfigError> {
        let invalid = |e: &toml::de::Error, key: Option<String>| ConfigError::Invalid {
            file: file.to_path_buf(),
            line: e.span().map(|s| line_of(text, s.start)),
            key: key.filter(|k| !k.is_empty() && k != "."),
            message: e.message().trim().to_owned(),
        };
        let de = toml::Deserializer::parse(text).map_err(|e| invalid(&e, None))?;
        let cfg: ConfigFile = serde_path_to_error::deserialize(de).map_err(|e| {
            let key = clean_path(&e.path().to_string());
            invalid(e.inner(), Some(key))
        })?;
        for (i, r) in cfg.reviewers.iter().enumerate() {
            if let Err((key, message)) = r.check() {
                return Err(ConfigError::Invalid {
                    file: file.to_path_buf(),
                    line: key_line(text, "reviewers"),
                    key: Some(format!("reviewers[{i}].{key}")),
                    message,
                });
            }
        }
        Ok(cfg)
    }
}

fn clean_path(path: &str) -> String {
    // serde_path_to_error prints sequence indexes as `[0]` and unknown steps as `?`.
    path.replace(".?", "").trim_start_matches('?').to_owned()
}

fn line_of(text: &str, offset: usize) -> usize {
    text.as_bytes()[..offset.min(text.len())]
        .iter()
        .filter(|&&b| b == b'\n')
        .count()
        + 1
}

/// All configuration files that apply, lowest precedence first.
#[derive(Debug, Clone, Default)]
pub struct Config {
    pub layers: Vec<(PathBuf, ConfigFile)>,
    /// What was read but not taken (policies or a notify hook in a project file), one line
    /// each, naming file, line and key: the shim says them on stderr, `doctor` lists them.
    pub warnings: Vec<String>,
}

impl Config {
    /// Loads the user file (`HEADLESS_RUN_CONFIG`, else the XDG one) and the nearest project
    /// file from `cwd` upward.
    pub fn load(cwd: &Path, env: EnvLookup<'_>) -> Result<Self, ConfigError> {
        let mut layers = Vec::new();
        match env("HEADLESS_RUN_CONFIG").filter(|v| !v.is_empty()) {
            Some(explicit) => {
                let file = PathBuf::from(explicit);
                layers.push((file.clone(), read_file(&file)?));
            }
            None => {
                if let Some(file) = paths::user_config_file(env)
                    && let Some((cfg, _)) = read_if_exists(&file)?
                {
                    layers.push((file, cfg));
                }
            }
        }
        let mut warnings = Vec::new();
        let home = env("HOME").filter(|h| !h.is_empty()).map(PathBuf::from);
        for dir in cwd.ancestors() {
            let file = dir.join(PROJECT_FILE);
            if let Some(why) = untrusted(&file) {
                warnings.push(format!(
                    "project:{}: ignored: {why} (only your own file, writable by you alone, is read)",
                    file.display()
                ));
            } else if let Some((mut cfg, text)) = read_if_exists(&file)? {
                warnings.extend(describe_prompts_only(&mut cfg, &file, &text));
                layers.push((file, cfg));
                break;
            }
            // The search ends at the repository's root or the home directory: a file above
            // them belongs to someone else's tree.
            if home.as_deref() == Some(dir) || dir.join(".git").exists() {
                break;
            }
        }
        Ok(Config { layers, warnings })
    }

    /// The files' settings for `tool`: each layer's defaults then its `[tools.TOOL]`.
    pub fn settings_for(&self, tool: &str) -> Settings {
        let mut s = Settings::default();
        for (_, layer) in &self.layers {
            s.overlay(&layer.defaults);
            if let Some(t) = layer.tools.get(tool) {
                s.overlay(t);
            }
        }
        s
    }

    /// Prompt rules, most specific layer (the project file) first.
    pub fn prompt_rules(&self) -> impl Iterator<Item = &PromptRuleConfig> {
        self.layers
            .iter()
            .rev()
            .flat_map(|(_, l)| l.prompt_rules.iter())
    }

    /// Policies, project file first.
    pub fn reviewers(&self) -> impl Iterator<Item = &ReviewersConfig> {
        self.layers.iter().flat_map(|(_, l)| l.reviewers.iter())
    }

    pub fn policies(&self) -> impl Iterator<Item = &PolicyConfig> {
        self.layers
            .iter()
            .rev()
            .flat_map(|(_, l)| l.policies.iter())
    }

    /// The identities whose pipelines' labelled steps this host's label workers run besides
    /// their own (`[worker] pipelines_from`, the user's file only).
    pub fn pipelines_from(&self) -> Vec<String> {
        self.layers
            .iter()
            .filter_map(|(_, l)| l.worker.as_ref())
            .flat_map(|w| w.pipelines_from.iter().cloned())
            .collect()
    }

    /// The webhooks of every layer (only the user's file may have them).
    pub fn webhooks(&self) -> Vec<WebhookConfig> {
        self.layers
            .iter()
            .flat_map(|(_, l)| l.webhooks.iter().cloned())
            .collect()
    }

    /// `[slack]`: how `monitor serve` takes Slack's button presses (the user's file only).
    pub fn slack(&self) -> Option<&SlackConfig> {
        self.layers.iter().rev().find_map(|(_, l)| l.slack.as_ref())
    }

    /// The e-mail recipients of every layer (only the user's file may have them).
    pub fn email(&self) -> Vec<EmailConfig> {
        self.layers
            .iter()
            .flat_map(|(_, l)| l.email.iter().cloned())
            .collect()
    }

    /// The notify hook of the most specific layer that has one.
    pub fn notify(&self) -> Option<&NotifyConfig> {
        self.layers
            .iter()
            .rev()
            .find_map(|(_, l)| l.notify.as_ref())
    }
}

/// Why a project file may not be read at all: owned by another user, or writable by others.
fn untrusted(file: &Path) -> Option<String> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(file).ok()?;
    // SAFETY: geteuid cannot fail.
    let me = unsafe { libc::geteuid() };
    if meta.uid() != me {
        return Some(format!(
            "owned by uid {}, not by you (uid {me})",
            meta.uid()
        ));
    }
    let mode = meta.mode() & 0o777;
    (mode & 0o022 != 0).then(|| format!("writable by others (mode {mode:04o})"))
}

/// A project file travels with the code (a cloned repository, a directory the supervised
/// tool can write): it may tune thresholds and describe prompts — which text is a prompt,
/// its options, whether it is secret — but nothing that decides or answers without a
/// person: policies, the notify hook, `approval_ttl`, `on_expire`, `on_prompt`, and a
/// rule's `keys` and `default` are taken from the user's own file only. What it held of
/// those is removed, one warning each (file and line).
fn describe_prompts_only(cfg: &mut ConfigFile, file: &Path, text: &str) -> Vec<String> {
    let mut found = Vec::new();
    if !cfg.policies.is_empty() {
        found.push("policies");
    }
    if cfg.notify.is_some() {
        found.push("notify");
    }
    if !cfg.webhooks.is_empty() {
        found.push("webhooks");
    }
    if !cfg.email.is_empty() {
        found.push("email");
    }
    if cfg.slack.is_some() {
        found.push("slack");
    }
    if cfg.store.is_some() {
        found.push("store");
    }
    if cfg.worker.is_some() {
        found.push("worker");
    }
    cfg.policies.clear();
    cfg.notify = None;
    cfg.webhooks.clear();
    cfg.email.clear();
    cfg.slack = None;
    cfg.store = None;
    cfg.worker = None;
    for settings in std::iter::once(&mut cfg.defaults).chain(cfg.tools.values_mut()) {
        for key in settings.drop_decision_settings() {
            if !found.contains(&key) {
                found.push(key);
            }
        }
    }
    for rule in &mut cfg.prompt_rules {
        rule.origin = Origin::Project;
        if rule.default.take().is_some() && !found.contains(&"default") {
            found.push("default");
        }
        for o in &mut rule.options {
            if o.keys.take().is_some() && !found.contains(&"keys") {
                found.push("keys");
            }
        }
    }
    found
        .into_iter()
        .map(|key| {
            format!(
                "project:{}{}: `{key}` ignored: where runs are recorded, whom a worker trusts and what decides or answers (store, worker, policies, notify, webhooks, email, slack, approval_ttl, on_expire, on_prompt, a rule's keys and default) is read only from the user config, never from a project's {PROJECT_FILE}",
                file.display(),
                key_line(text, key).map(|l| format!(":{l}")).unwrap_or_default(),
            )
        })
        .collect()
}

/// One effective setting and where it came from (`default`, `user:PATH`, `project:PATH`,
/// `environment`), for `monitor config`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Explained {
    pub key: &'static str,
    pub value: String,
    pub from: String,
}

impl Config {
    /// The effective settings for `tool` (files, then `env`'s variables), each with its
    /// source.
    pub fn explain(&self, tool: &str, env: &Settings) -> Vec<Explained> {
        let mut layers: Vec<(String, &Settings)> = Vec::new();
        for (path, file) in &self.layers {
            let kind = if path.file_name().is_some_and(|n| n == PROJECT_FILE) {
                "project"
            } else {
                "user"
            };
            layers.push((format!("{kind}:{}", path.display()), &file.defaults));
            if let Some(t) = file.tools.get(tool) {
                layers.push((format!("{kind}:{} [tools.{tool}]", path.display()), t));
            }
        }
        layers.push(("environment".into(), env));
        let mut merged = Settings::default();
        for (_, s) in &layers {
            merged.overlay(s);
        }
        let r = merged.resolve();
        let from = |set: &dyn Fn(&Settings) -> bool| {
            layers
                .iter()
                .rev()
                .find(|(_, s)| set(s))
                .map(|(name, _)| name.clone())
                .unwrap_or_else(|| "default".into())
        };
        let limit = |d: Option<Duration>| {
            d.map(crate::time::short_duration)
                .unwrap_or_else(|| "none".into())
        };
        vec![
            Explained {
                key: "timeout",
                value: limit(r.timeout),
                from: from(&|s| s.timeout.is_some()),
            },
            Explained {
                key: "stall_timeout",
                value: limit(r.stall_timeout),
                from: from(&|s| s.stall_timeout.is_some()),
            },
            Explained {
                key: "on_stall",
                value: format!("{:?}", r.on_stall).to_lowercase(),
                from: from(&|s| s.on_stall.is_some()),
            },
            Explained {
                key: "on_prompt",
                value: format!("{:?}", r.on_prompt).to_lowercase(),
                from: from(&|s| s.on_prompt.is_some()),
            },
            Explained {
                key: "prompt_idle",
                value: limit(Some(r.prompt_idle)),
                from: from(&|s| s.prompt_idle.is_some()),
            },
            Explained {
                key: "not_prompt_timeout",
                value: limit(r.not_prompt_timeout),
                from: from(&|s| s.not_prompt_timeout.is_some()),
            },
            Explained {
                key: "kill_grace",
                value: limit(Some(r.kill_grace)),
                from: from(&|s| s.kill_grace.is_some()),
            },
            Explained {
                key: "approval_ttl",
                value: limit(r.approval_ttl),
                from: from(&|s| s.approval_ttl.is_some()),
            },
            Explained {
                key: "on_expire",
                value: format!("{:?}", r.on_expire).to_lowercase(),
                from: from(&|s| s.on_expire.is_some()),
            },
        ]
    }
}

fn read_file(file: &Path) -> Result<ConfigFile, ConfigError> {
    let text = read_bounded(file).map_err(|source| ConfigError::Read {
        file: file.to_path_buf(),
        source,
    })?;
    ConfigFile::parse(file, &text)
}

/// The most a config file may hold: more is not a config file.
const MAX_CONFIG_BYTES: u64 = 1 << 20;

/// A config file's text: a regular file only (a FIFO or a device such as `/dev/zero` would
/// block or never end — before any timeout is armed), at most [`MAX_CONFIG_BYTES`].
fn read_bounded(file: &Path) -> std::io::Result<String> {
    use std::io::Read;
    let meta = std::fs::metadata(file)?;
    if !meta.is_file() {
        return Err(std::io::Error::other("not a regular file"));
    }
    if meta.len() > MAX_CONFIG_BYTES {
        return Err(std::io::Error::other(format!(
            "larger than {} KiB",
            MAX_CONFIG_BYTES / 1024
        )));
    }
    // O_NONBLOCK: should it have become a FIFO since, opening does not wait for a writer.
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(file)?;
    let mut text = String::new();
    f.take(MAX_CONFIG_BYTES + 1).read_to_string(&mut text)?;
    if text.len() as u64 > MAX_CONFIG_BYTES {
        return Err(std::io::Error::other("grew past the size limit while read"));
    }
    Ok(text)
}

/// The first line that opens table `key` or assigns it at the top level.
fn key_line(text: &str, key: &str) -> Option<usize> {
    text.lines()
        .position(|l| {
            let l = l.trim_start();
            let rest = l
                .strip_prefix("[[")
                .or_else(|| l.strip_prefix('['))
                .unwrap_or(l)
                .trim_start();
            rest.strip_prefix(key).is_some_and(|after| {
                let after = after.trim_start();
                after.starts_with(']') || after.starts_with('=') || after.starts_with('.')
            })
        })
        .map(|i| i + 1)
}

fn read_if_exists(file: &Path) -> Result<Option<(ConfigFile, String)>, ConfigError> {
    match std::fs::symlink_metadata(file) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        _ => {}
    }
    match read_bounded(file) {
        Ok(text) => ConfigFile::parse(file, &text).map(|c| Some((c, text))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(ConfigError::Read {
            file: file.to_path_buf(),
            source,
        }),
    }
}

/// Settings from `HEADLESS_RUN_*` environment variables.
pub fn env_settings(env: EnvLookup<'_>) -> Result<Settings, ConfigError> {
    fn get<T>(
        env: EnvLookup<'_>,
        var: &str,
        parse: impl Fn(&str) -> Result<T, String>,
    ) -> Result<Option<T>, ConfigError> {
        match env(var) {
            None => Ok(None),
            Some(v) if v.is_empty() => Ok(None),
            Some(v) => parse(&v.to_string_lossy())
                .map(Some)
                .map_err(|message| ConfigError::Env {
                    var: var.to_owned(),
                    message,
                }),
        }
    }
    Ok(Settings {
        timeout: get(env, "HEADLESS_RUN_TIMEOUT", Limit::parse)?,
        stall_timeout: get(env, "HEADLESS_RUN_STALL_TIMEOUT", Limit::parse)?,
        on_stall: get(env, "HEADLESS_RUN_ON_STALL", str::parse)?,
        on_prompt: get(env, "HEADLESS_RUN_ON_PROMPT", str::parse)?,
        prompt_idle: get(env, "HEADLESS_RUN_PROMPT_IDLE", Limit::parse)?,
        not_prompt_timeout: get(env, "HEADLESS_RUN_NOT_PROMPT_TIMEOUT", Limit::parse)?,
        kill_grace: get(env, "HEADLESS_RUN_KILL_GRACE", Limit::parse)?,
        approval_ttl: get(env, "HEADLESS_RUN_APPROVAL_TTL", Limit::parse)?,
        on_expire: get(env, "HEADLESS_RUN_ON_EXPIRE", str::parse)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;
    use std::ffi::OsString;

    fn parse(text: &str) -> Result<ConfigFile, ConfigError> {
        ConfigFile::parse(Path::new("/etc/x.toml"), text)
    }

    #[test]
    fn full_example_parses() {
        let cfg = parse(
            r#"
[defaults]
timeout = "30m"
stall_timeout = 90
on_stall = "mark"
prompt_idle = "250ms"

[tools.terraform]
stall_timeout = "none"

[[prompt_rules]]
name = "deploy"
tool = "deploy.sh"
regex = 'Deploy to (\w+)\?'
options = [{ value = "yes", keys = "yes\r" }, { value = "no", label = "No" }]
default = "no"

[[policies]]
name = "tmp"
tool = "rm"
value = "y"
when = [{ field = "prompt", op = "glob", value = "*.tmp'? " }]

[notify]
command = ["/bin/true"]
"#,
        )
        .unwrap();
        let s = cfg.defaults.resolve();
        assert_eq!(s.timeout, Some(Duration::from_secs(1800)));
        assert_eq!(s.stall_timeout, Some(Duration::from_secs(90)));
        assert_eq!(s.on_stall, OnStall::Mark);
        assert_eq!(s.prompt_idle, Duration::from_millis(250));
        assert_eq!(cfg.tools["terraform"].stall_timeout, Some(Limit(None)));
        assert_eq!(
            cfg.prompt_rules[0].options[0].keys.as_deref(),
            Some("yes\r")
        );
        assert!(cfg.prompt_rules[0].regex.regex.is_match("Deploy to prod?"));
        assert_eq!(cfg.policies[0].when[0].op, CondOp::Glob);
        assert_eq!(cfg.notify.unwrap().command, ["/bin/true"]);
    }

    fn invalid(text: &str) -> (Option<usize>, Option<String>, String) {
        match parse(text).unwrap_err() {
            ConfigError::Invalid {
                line, key, message, ..
            } => (line, key, message),
            other => panic!("unexpected {other}"),
        }
    }

    #[test]
    fn bad_duration_names_line_and_key() {
        let (line, key, msg) = invalid("[defaults]\n\nstall_timeout = \"ten minutes\"\n");
        assert_eq!(line, Some(3));
        assert_eq!(key.as_deref(), Some("defaults.stall_timeout"));
        assert!(msg.contains("invalid duration"), "{msg}");
        let err = parse("[defaults]\n\nstall_timeout = \"ten minutes\"\n")
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("config error in /etc/x.toml, line 3, key `defaults.stall_timeout`"),
            "{err}"
        );
    }

    #[test]
    fn unknown_key_is_an_error() {
        let (line, key, msg) = invalid("[defaults]\nstal_timeout = \"1m\"\n");
        assert_eq!(line, Some(2));
        assert!(
            msg.contains("unknown field `stal_timeout`"),
            "{msg} {key:?}"
        );
    }

    #[test]
    fn bad_enum_and_syntax() {
        let (line, key, _) = invalid("[tools.apt]\non_stall = \"explode\"\n");
        assert_eq!(line, Some(2));
        assert_eq!(key.as_deref(), Some("tools.apt.on_stall"));
        let (line, _, _) = invalid("[defaults\ntimeout = 1\n");
        assert_eq!(line, Some(1));
    }

    #[test]
    fn bad_regex_and_rule_checks() {
        let (line, key, msg) = invalid(
            "[[prompt_rules]]\nname = \"x\"\nregex = \"(unclosed\"\noptions = [{value=\"y\"}]\n",
        );
        assert_eq!(line, Some(3));
        assert_eq!(key.as_deref(), Some("prompt_rules[0].regex"));
        assert!(msg.contains("invalid regex"), "{msg}");
        let (_, _, msg) = invalid(
            "[[prompt_rules]]\nname = \"x\"\nregex = \"y\"\noptions = [{value=\"y\"}]\ndefault = \"n\"\n",
        );
        assert!(
            msg.contains("default `n` is not one of its option values"),
            "{msg}"
        );
        let (_, key, msg) = invalid(
            "[[policies]]\nname=\"p\"\nvalue=\"y\"\nwhen=[{field=\"argv\", op=\"eval\", value=\"x\"}]\n",
        );
        assert!(msg.contains("unknown variant `eval`"), "{msg}");
        assert!(key.unwrap().starts_with("policies[0].when"));
    }

    #[test]
    fn layers_and_env() {
        let tmp = tempfile::tempdir().unwrap();
        let user = tmp.path().join("user.toml");
        std::fs::write(
            &user,
            "[defaults]\ntimeout = \"1h\"\nstall_timeout = \"5m\"\n[tools.apt]\ntimeout = \"2h\"\n",
        )
        .unwrap();
        let proj = tmp.path().join("proj");
        let deep = proj.join("a/b");
        std::fs::create_dir_all(&deep).unwrap();
        std::fs::write(
            proj.join(PROJECT_FILE),
            "[defaults]\nstall_timeout = \"1m\"\n",
        )
        .unwrap();
        let vars: HashMap<&str, OsString> = [
            ("HEADLESS_RUN_CONFIG", OsString::from(&user)),
            ("HEADLESS_RUN_ON_PROMPT", OsString::from("wait")),
        ]
        .into_iter()
        .collect();
        let env = |k: &str| vars.get(k).cloned();
        let cfg = Config::load(&deep, &env).unwrap();
        assert_eq!(cfg.layers.len(), 2);
        let mut s = cfg.settings_for("apt");
        s.overlay(&env_settings(&env).unwrap());
        let r = s.resolve();
        assert_eq!(r.timeout, Some(Duration::from_secs(7200)));
        assert_eq!(r.stall_timeout, Some(Duration::from_secs(60)));
        assert_eq!(r.on_prompt, OnPrompt::Wait);
        let bad = |k: &str| (k == "HEADLESS_RUN_TIMEOUT").then(|| OsString::from("soon"));
        let err = env_settings(&bad).unwrap_err().to_string();
        assert!(err.contains("HEADLESS_RUN_TIMEOUT"), "{err}");
    }

    /// Webhooks send the approvals (commands, questions) elsewhere: a project file's are
    /// dropped with a warning; the user's are kept.
    #[test]
    fn a_project_file_cannot_bring_webhooks() {
        let tmp = tempfile::tempdir().unwrap();
        let user = tmp.path().join("user.toml");
        std::fs::write(
            &user,
            "[[webhooks]]\nurl = \"https://hooks.example/mine\"\nformat = \"slack\"\n",
        )
        .unwrap();
        let proj = tmp.path().join("repo");
        std::fs::create_dir_all(&proj).unwrap();
        std::fs::write(
            proj.join(PROJECT_FILE),
            "[[webhooks]]\nurl = \"https://attacker.example/x\"\n",
        )
        .unwrap();
        let vars: HashMap<&str, OsString> = [("HEADLESS_RUN_CONFIG", OsString::from(&user))]
            .into_iter()
            .collect();
        let env = |k: &str| vars.get(k).cloned();
        let cfg = Config::load(&proj, &env).unwrap();
        let hooks = cfg.webhooks();
        assert_eq!(hooks.len(), 1, "{hooks:?}");
        assert_eq!(hooks[0].url, "https://hooks.example/mine");
        assert_eq!(hooks[0].format, WebhookFormat::Slack);
        assert!(
            cfg.warnings
                .iter()
                .any(|w| w.contains(".headless-run.toml:1: `webhooks` ignored")),
            "{:?}",
            cfg.warnings
        );
    }

    #[test]
    fn a_project_file_cannot_bring_policies_or_a_notify_hook() {
        let tmp = tempfile::tempdir().unwrap();
        let user = tmp.path().join("user.toml");
        std::fs::write(
            &user,
            "[[policies]]\nname = \"mine\"\nvalue = \"y\"\n[notify]\ncommand = [\"true\"]\n",
        )
        .unwrap();
        let proj = tmp.path().join("repo");
        std::fs::create_dir_all(&proj).unwrap();
        std::fs::write(
            proj.join(PROJECT_FILE),
            "[defaults]\nstall_timeout = \"1m\"\n\n[[policies]]\nname = \"sneaky\"\nvalue = \"y\"\n\n[notify]\ncommand = [\"curl\"]\n",
        )
        .unwrap();
        let vars: HashMap<&str, OsString> = [("HEADLESS_RUN_CONFIG", OsString::from(&user))]
            .into_iter()
            .collect();
        let env = |k: &str| vars.get(k).cloned();
        let cfg = Config::load(&proj, &env).unwrap();
        let names: Vec<&str> = cfg.policies().map(|p| p.name.as_str()).collect();
        assert_eq!(names, ["mine"]);
        assert_eq!(cfg.notify().unwrap().command, ["true"]);
        assert_eq!(
            cfg.settings_for("x").resolve().stall_timeout,
            Some(Duration::from_secs(60))
        );
        assert_eq!(cfg.warnings.len(), 2, "{:?}", cfg.warnings);
        assert!(
            cfg.warnings[0].contains(".headless-run.toml:4: `policies` ignored"),
            "{:?}",
            cfg.warnings
        );
        assert!(
            cfg.warnings[1].contains(".headless-run.toml:8: `notify` ignored"),
            "{:?}",
            cfg.warnings
        );
        assert_eq!(key_line("a = 1\n  [ notify . x ]\n", "notify"), Some(2));
        assert_eq!(key_line("notifyx = 1\n", "notify"), None);
    }

    #[test]
    fn the_store_comes_from_the_user_file_only() {
        let tmp = tempfile::tempdir().unwrap();
        let user = tmp.path().join("user.toml");
        std::fs::write(&user, "store = \"postgres://ci@db/hr\"\n").unwrap();
        let proj = tmp.path().join("repo");
        std::fs::create_dir_all(&proj).unwrap();
        std::fs::write(
            proj.join(PROJECT_FILE),
            "store = \"postgres://attacker@evil/hr\"\n",
        )
        .unwrap();
        let vars: HashMap<&str, OsString> = [("HEADLESS_RUN_CONFIG", OsString::from(&user))]
            .into_iter()
            .collect();
        let env = |k: &str| vars.get(k).cloned();
        assert_eq!(user_store(&env).as_deref(), Some("postgres://ci@db/hr"));
        let cfg = Config::load(&proj, &env).unwrap();
        assert!(
            cfg.warnings
                .iter()
                .any(|w| w.contains(".headless-run.toml:1: `store` ignored")),
            "{:?}",
            cfg.warnings
        );
        assert!(
            cfg.layers
                .iter()
                .all(|(f, l)| f == &user || l.store.is_none())
        );
        // Not a postgres URL, or no file: the state dir's SQLite database.
        std::fs::write(&user, "store = \"/tmp/x.db\"\n").unwrap();
        assert_eq!(user_store(&env), None);
        std::fs::remove_file(&user).unwrap();
        assert_eq!(user_store(&env), None);
    }

    #[test]
    fn limits() {
        assert_eq!(Limit::parse("none"), Ok(Limit(None)));
        assert_eq!(Limit::parse("0"), Ok(Limit(Some(Duration::ZERO))));
        let zero = Settings {
            timeout: Some(Limit::parse("0").unwrap()),
            ..Settings::default()
        };
        assert!(zero.resolve().check().unwrap_err().contains("timeout is 0"));
        let sub_ns = Settings {
            stall_timeout: Some(Limit::parse("0.0000000001").unwrap()),
            ..Settings::default()
        };
        assert!(sub_ns.resolve().check().is_err());
        let short_stall = Settings {
            stall_timeout: Some(Limit::parse("100ms").unwrap()),
            ..Settings::default()
        };
        let err = short_stall.resolve().check().unwrap_err();
        assert!(err.contains("shorter than prompt_idle"), "{err}");
        assert_eq!(Settings::default().resolve().check(), Ok(()));
        assert_eq!(Limit::parse("2s"), Ok(Limit(Some(Duration::from_secs(2)))));
    }

    #[test]
    fn not_prompt_timeout_defaults_to_a_few_seconds_and_can_wait() {
        assert_eq!(
            Settings::default().resolve().not_prompt_timeout,
            Some(NOT_PROMPT_TIMEOUT)
        );
        let cfg = parse("[defaults]\nnot_prompt_timeout = \"20s\"\n[tools.vim]\nnot_prompt_timeout = \"none\"\n").unwrap();
        assert_eq!(
            cfg.defaults.resolve().not_prompt_timeout,
            Some(Duration::from_secs(20))
        );
        assert_eq!(cfg.tools["vim"].resolve().not_prompt_timeout, None);
        let env =
            |v: &str| (v == "HEADLESS_RUN_NOT_PROMPT_TIMEOUT").then(|| OsString::from("none"));
        assert_eq!(
            env_settings(&env).unwrap().not_prompt_timeout,
            Some(Limit(None))
        );
        let zero = Settings {
            not_prompt_timeout: Some(Limit::parse("0").unwrap()),
            ..Settings::default()
        };
        assert!(
            zero.resolve()
                .check()
                .unwrap_err()
                .contains("not_prompt_timeout is 0")
        );
    }
}
