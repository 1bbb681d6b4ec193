//! Headless-mode and stdin-mode decisions from the environment, and the names of the
//! variables and signals by which the shim, the tool and the monitor talk.

use std::ffi::OsStr;

/// The run id, given to the tool (and refused by `monitor decide` when set: no
/// self-approval).
pub const ENV_TOOL_RUN_ID: &str = "HEADLESS_RUN_TOOL_RUN_ID";
/// The execution id, given to the tool and passed on to nested runs.
pub const ENV_EXECUTION_ID: &str = "HEADLESS_RUN_EXECUTION_ID";
/// Set by `monitor worker` on a re-run: the run it resumes (recorded as `resumed_from`).
pub const ENV_RESUMED_FROM: &str = "HEADLESS_RUN_RESUMED_FROM";
/// Set by `monitor restart`: the ended run whose command this one runs again (kept in the
/// new run's metadata as `restart_of`).
pub const ENV_RESTART_OF: &str = "HEADLESS_RUN_RESTART_OF";
/// Set by `monitor worker` on a re-run: the approval being resumed.
pub const ENV_APPROVAL_ID: &str = "HEADLESS_RUN_APPROVAL_ID";
/// The worker pool a run belongs to (recorded as `metadata.pool`): a `monitor worker
/// --pool NAME` on any host resumes it, as the run's own user.
pub const ENV_POOL: &str = "HEADLESS_RUN_POOL";

/// A pool name as recorded: letters, digits, `.`, `_`, `-`, at most 64; else none.
pub fn pool_name(v: &str) -> Option<String> {
    let v = v.trim();
    (!v.is_empty()
        && v.len() <= 64
        && v.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')))
    .then(|| v.to_owned())
}
/// Set by `monitor worker` on a re-run: the decided value, for cooperative tools. The shim
/// passes it to the tool only when `HEADLESS_RUN_APPROVAL_ID` names a decided approval of
/// this very command with this value; a bare one is removed (no self-approval).
pub const ENV_AUTO_APPROVAL: &str = "AUTO_APPROVAL";

/// What in a variable's name says "this holds a secret": anywhere in a part of the name...
const SECRET_ANYWHERE: &[&str] = &[
    "TOKEN",
    "SECRET",
    "PASSWORD",
    "PASSWD",
    "PASSPHRASE",
    "CREDENTIAL",
    "PRIVATE",
    "APIKEY",
];
/// ...or at the end of a part (`API_KEY`, `OAUTH`, `GH_PIN`, `MYSQL_PWD`, `SENTRY_DSN`, not
/// `GIT_AUTHOR_NAME`).
const SECRET_SUFFIXES: &[&str] = &[
    "KEY", "AUTH", "PIN", "OTP", "CERT", "SESSION", "COOKIE", "PWD", "JWT", "DSN",
];
/// Names the rules above would catch that hold none: the shell's working directories
/// (ending in `PWD`), and the CA bundles a client verifies its servers with (`CERT`):
/// OpenSSL's trust store and pip's bundle. Paths to public certificates, which a resumed
/// tool needs to reach its servers at all.
const NOT_SECRET: &[&str] = &[
    "PWD",
    "OLDPWD",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "NIX_SSL_CERT_FILE",
    "PIP_CERT",
];

/// Whether an environment variable's name looks like it holds a secret: such variables are
/// never stored (a parked run's environment names them as withheld instead).
///
/// A certificate authority's certificate is public: `…_CA_CERT`, `…CACERT` and `…ROOTCERT`
/// (`PGSSLROOTCERT`) are not caught by `CERT`, nor are the `…_CA_BUNDLE`/`…CAINFO` names,
/// which nothing here catches. A client's own certificate (`PGSSLCERT`, `GIT_SSL_CERT`,
/// `DOCKER_CERT_PATH`) still is, like every `…_KEY`: it comes with its private key and
/// names what authenticates the tool, so it is withheld with the rest (a resume takes it
/// from the executor's own environment).
pub fn looks_secret(name: &str) -> bool {
    let upper = name.to_ascii_uppercase();
    if NOT_SECRET.contains(&upper.as_str()) {
        return false;
    }
    let parts: Vec<&str> = upper.split(|c: char| !c.is_ascii_alphanumeric()).collect();
    parts.iter().enumerate().any(|(i, part)| {
        let of_a_ca = (i > 0 && parts[i - 1] == "CA")
            || part.ends_with("CACERT")
            || part.ends_with("ROOTCERT");
        SECRET_ANYWHERE.iter().any(|s| part.contains(s))
            || SECRET_SUFFIXES
                .iter()
                .any(|s| part.ends_with(s) && !(of_a_ca && *s == "CERT"))
    })
}

/// Whether a variable's value carries credentials whatever its name: a URL with a password
/// in it (`postgres://app:s3cret@db/app`, `https://user:token@host/`).
pub fn value_holds_credentials(value: &str) -> bool {
    value.split_whitespace().any(|word| {
        let Some((_, rest)) = word.split_once("://") else {
            return false;
        };
        let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
        authority.rsplit_once('@').is_some_and(|(userinfo, _)| {
            userinfo.split_once(':').is_some_and(|(_, p)| !p.is_empty())
        })
    })
}

/// A run's environment as a resume restores it: the variables (`HEADLESS_RUN_*` of the
/// run itself and `AUTO_APPROVAL` left out: a resume sets its own), and the names of the
/// secret-looking ones withheld. Variables whose name or value is not UTF-8 are left out.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SavedEnvironment {
    pub vars: std::collections::BTreeMap<String, String>,
    pub withheld: Vec<String>,
    /// The run's own limits and mode as `headless-run` flags (`--timeout 30m`, `--on-prompt
    /// exit`, …): a resume keeps them ([`resume_flags`]).
    #[serde(default)]
    pub flags: Vec<String>,
}

impl SavedEnvironment {
    pub fn capture(
        vars: impl IntoIterator<Item = (std::ffi::OsString, std::ffi::OsString)>,
    ) -> Self {
        let mut out = SavedEnvironment::default();
        for (k, v) in vars {
            let (Ok(k), Ok(v)) = (k.into_string(), v.into_string()) else {
                continue;
            };
            if k.starts_with("HEADLESS_RUN_") || k == ENV_AUTO_APPROVAL {
                continue;
            }
            if looks_secret(&k) || value_holds_credentials(&v) {
                out.withheld.push(k);
            } else {
                out.vars.insert(k, v);
            }
        }
        out.withheld.sort();
        out
    }
}

/// Set by `monitor worker` on a re-run: which withheld variables it gave the resume from
/// its own environment and which it could not ([`ResumeEnv`] as JSON). The shim records it
/// in the run's metadata (`resume_env`) and keeps it from the tool.
pub const ENV_RESUME_ENV: &str = "HEADLESS_RUN_RESUME_ENV";

/// What a resume did with the variables withheld when its run asked: names only, never
/// values.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ResumeEnv {
    /// Taken from the executor's (the worker's) own environment.
    #[serde(default)]
    pub from_worker: Vec<String>,
    /// Not in the executor's environment either: the resume ran without them.
    #[serde(default)]
    pub missing: Vec<String>,
}

/// At most this many names are recorded of each kind (a row's list is not ours to trust
/// in size).
const RESUME_ENV_NAMES: usize = 64;

impl ResumeEnv {
    /// Parses the worker's [`ENV_RESUME_ENV`]: names with control characters removed, each
    /// at most 128 bytes, at most 64 of each kind; `None` when it is not that JSON.
    pub fn parse(text: &str) -> Option<Self> {
        let raw: ResumeEnv = serde_json::from_str(text).ok()?;
        let clean = |names: Vec<String>| -> Vec<String> {
            names
                .into_iter()
                .map(|n| {
                    let mut n = crate::sanitize::sanitize_line(&n);
                    while n.len() > 128 {
                        n.pop();
                    }
                    n
                })
                .filter(|n| !n.is_empty())
                .take(RESUME_ENV_NAMES)
                .collect()
        };
        Some(ResumeEnv {
            from_worker: clean(raw.from_worker),
            missing: clean(raw.missing),
        })
    }

    pub fn is_empty(&self) -> bool {
        self.from_worker.is_empty() && self.missing.is_empty()
    }

    /// What an operator reads about the missing ones, if any: `resumed without
    /// GITHUB_TOKEN (withheld when it asked, not in the worker's environment)`.
    pub fn missing_note(&self) -> Option<String> {
        (!self.missing.is_empty()).then(|| {
            format!(
                "resumed without {} (withheld when it asked, not in the worker's environment)",
                self.missing.join(", ")
            )
        })
    }
}

/// A parked run's environment as its resume gets it (see [`SavedEnvironment::restore`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Restored {
    pub vars: Vec<(String, std::ffi::OsString)>,
    pub report: ResumeEnv,
}

impl SavedEnvironment {
    /// The environment a resume runs in: the saved variables, then each withheld one the
    /// executor's own environment (`own`) has — its session, same user, given to it on
    /// purpose; never a value from the row — and the names of those it lacks.
    ///
    /// What `capture` never keeps is not taken from the row either (`HEADLESS_RUN_*`,
    /// `AUTO_APPROVAL`: the resume sets its own), nor a name no environment can hold
    /// (empty, with `=` or NUL).
    pub fn restore(&self, own: impl Fn(&str) -> Option<std::ffi::OsString>) -> Restored {
        let usable = |k: &str| {
            !k.is_empty()
                && !k.contains(['=', '\0'])
                && !k.starts_with("HEADLESS_RUN_")
                && k != ENV_AUTO_APPROVAL
        };
        let mut out = Restored {
            vars: self
                .vars
                .iter()
                .filter(|(k, v)| usable(k) && !v.contains('\0'))
                .map(|(k, v)| (k.clone(), v.into()))
                .collect(),
            report: ResumeEnv::default(),
        };
        for name in self.withheld.iter().filter(|k| usable(k)) {
            match own(name) {
                Some(value) => {
                    out.report.from_worker.push(name.clone());
                    out.vars.push((name.clone(), value));
                }
                None => out.report.missing.push(name.clone()),
            }
        }
        out
    }
}

/// The signal `monitor cancel` sends to a run's shim: end the tool, status `cancelled`.
pub const CANCEL_SIGNAL: i32 = libc::SIGUSR1;

/// What the environment says about headless mode: `Some(true)` headless, `Some(false)`
/// forced interactive (`HEADLESS=0`), `None` when it does not say (then a terminal on stdin
/// means interactive).
pub fn headless_from_env(headless: Option<&OsStr>, ci: Option<&OsStr>) -> Option<bool> {
    if let Some(v) = headless.map(|v| v.to_string_lossy()) {
        let v = v.trim();
        if is_false(v) {
            return Some(false);
        }
        if !v.is_empty() {
            return Some(true);
        }
    }
    match ci.map(|v| v.to_string_lossy()) {
        Some(v) if !v.trim().is_empty() && !is_false(v.trim()) => Some(true),
        _ => None,
    }
}

fn is_false(v: &str) -> bool {
    v == "0"
        || v.eq_ignore_ascii_case("false")
        || v.eq_ignore_ascii_case("no")
        || v.eq_ignore_ascii_case("off")
}

/// How the tool's stdin is wired in headless (pty) mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StdinMode {
    /// Decide from what the shim's stdin carries.
    Auto,
    /// The tool reads the shim's stdin directly.
    Pass,
    /// The tool's stdin is the pty.
    Pty,
}

impl StdinMode {
    /// Parses `HEADLESS_RUN_STDIN`.
    pub fn parse(v: &str) -> Result<Self, String> {
        match v.trim() {
            "" | "auto" => Ok(StdinMode::Auto),
            "pass" => Ok(StdinMode::Pass),
            "pty" => Ok(StdinMode::Pty),
            other => Err(format!(
                "HEADLESS_RUN_STDIN must be pass, pty or auto, not `{other}`"
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secret_looking_names() {
        for name in [
            "GITHUB_TOKEN",
            "AWS_SECRET_ACCESS_KEY",
            "API_KEY",
            "OPENAI_APIKEY",
            "DB_PASSWORD",
            "MYSQL_PWD_PASSWD",
            "GPG_PASSPHRASE",
            "OAUTH",
            "NPM_AUTH",
            "GOOGLE_CREDENTIALS",
            "SSH_PRIVATE",
            "my_token",
            "MYSQL_PWD",
            "SENTRY_DSN",
            "SUPABASE_JWT",
        ] {
            assert!(looks_secret(name), "{name}");
        }
        for name in [
            "PATH",
            "HOME",
            "GIT_AUTHOR_NAME",
            "LANG",
            "TERM",
            "KEYBOARD_LAYOUT",
            "PWD",
            "OLDPWD",
        ] {
            assert!(!looks_secret(name), "{name}");
        }
        let saved = SavedEnvironment::capture([
            ("PATH".into(), "/bin".into()),
            ("GITHUB_TOKEN".into(), "ghp_x".into()),
            ("HEADLESS_RUN_TOOL_RUN_ID".into(), "TR-1".into()),
            (
                "DATABASE_URL".into(),
                "postgres://app:s3cret@db:5432/app".into(),
            ),
            ("MIRROR".into(), "https://mirror.example/debian".into()),
            ("REPO".into(), "ssh://git@host/repo.git".into()),
        ]);
        assert_eq!(
            saved.vars.keys().collect::<Vec<_>>(),
            ["MIRROR", "PATH", "REPO"]
        );
        assert_eq!(saved.withheld, ["DATABASE_URL", "GITHUB_TOKEN"]);
    }

    #[test]
    fn ca_bundles_are_kept_and_client_keys_withheld() {
        for name in [
            "SSL_CERT_FILE",
            "SSL_CERT_DIR",
            "NIX_SSL_CERT_FILE",
            "REQUESTS_CA_BUNDLE",
            "CURL_CA_BUNDLE",
            "NODE_EXTRA_CA_CERTS",
            "GIT_SSL_CAINFO",
            "GIT_SSL_CAPATH",
            "AWS_CA_BUNDLE",
            "PGSSLROOTCERT",
            "PIP_CERT",
            "CARGO_HTTP_CAINFO",
            "ETCDCTL_CACERT",
            "KUBE_CA_CERT",
            "HEADLESS_RUN_SERVER_CA",
        ] {
            assert!(!looks_secret(name), "{name}");
        }
        // A private key's path, a client's certificate (which comes with one), a CA's own
        // key, and a secret that also names a CA: withheld as before.
        for name in [
            "PGSSLKEY",
            "PGSSLCERT",
            "GIT_SSL_KEY",
            "GIT_SSL_CERT",
            "DOCKER_CERT_PATH",
            "CA_KEY",
            "KUBE_CA_KEY",
            "CA_CERT_TOKEN",
            "SSL_CERT_PASSWORD",
        ] {
            assert!(looks_secret(name), "{name}");
        }
        let saved = SavedEnvironment::capture([
            ("SSL_CERT_FILE".into(), "/etc/ssl/certs/ca.pem".into()),
            ("PGSSLROOTCERT".into(), "/etc/hr/root.crt".into()),
            ("PGSSLKEY".into(), "/home/ci/.postgresql/ci.key".into()),
        ]);
        assert_eq!(
            saved.vars.keys().collect::<Vec<_>>(),
            ["PGSSLROOTCERT", "SSL_CERT_FILE"]
        );
        assert_eq!(saved.withheld, ["PGSSLKEY"]);
    }

    #[test]
    fn a_resume_takes_withheld_variables_from_its_own_environment_only() {
        let saved = SavedEnvironment {
            vars: [
                ("FOO", "bar"),
                // Never captured: only a forged row holds these, and they are not taken.
                ("HEADLESS_RUN_SERVER", "https://elsewhere"),
                ("AUTO_APPROVAL", "yes"),
                ("BAD=NAME", "x"),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect(),
            withheld: ["GITHUB_TOKEN", "NPM_TOKEN", "HEADLESS_RUN_TOKEN", ""]
                .map(String::from)
                .to_vec(),
            flags: Vec::new(),
        };
        let own = |k: &str| {
            matches!(k, "GITHUB_TOKEN" | "HEADLESS_RUN_TOKEN")
                .then(|| std::ffi::OsString::from(format!("own-{k}")))
        };
        let r = saved.restore(own);
        assert_eq!(
            r.vars,
            [
                ("FOO".to_owned(), "bar".into()),
                ("GITHUB_TOKEN".to_owned(), "own-GITHUB_TOKEN".into())
            ]
        );
        assert_eq!(r.report.from_worker, ["GITHUB_TOKEN"]);
        assert_eq!(r.report.missing, ["NPM_TOKEN"]);
        assert_eq!(
            r.report.missing_note().as_deref(),
            Some(
                "resumed without NPM_TOKEN (withheld when it asked, not in the worker's environment)"
            )
        );
        assert_eq!(
            SavedEnvironment::default().restore(own),
            Restored::default()
        );
    }

    #[test]
    fn the_resume_report_is_parsed_clean_and_bounded() {
        let r = ResumeEnv::parse(r#"{"from_worker": ["A\u001b[31m"], "missing": ["B"]}"#).unwrap();
        assert_eq!(r.from_worker, ["A"]);
        assert_eq!(r.missing, ["B"]);
        let many = serde_json::json!({ "missing": vec!["X".repeat(300); 100] }).to_string();
        let r = ResumeEnv::parse(&many).unwrap();
        assert_eq!(r.missing.len(), 64);
        assert!(r.missing.iter().all(|n| n.len() == 128));
        assert!(r.from_worker.is_empty());
        assert!(ResumeEnv::parse("GITHUB_TOKEN").is_none());
        assert!(ResumeEnv::default().missing_note().is_none());
    }

    fn h(headless: Option<&str>, ci: Option<&str>) -> Option<bool> {
        headless_from_env(headless.map(OsStr::new), ci.map(OsStr::new))
    }

    #[test]
    fn headless_rules() {
        assert_eq!(h(None, None), None);
        assert_eq!(h(Some("1"), None), Some(true));
        assert_eq!(h(Some("0"), Some("true")), Some(false));
        assert_eq!(h(None, Some("true")), Some(true));
        assert_eq!(h(None, Some("1")), Some(true));
        assert_eq!(h(None, Some("")), None);
        assert_eq!(h(None, Some("0")), None);
        assert_eq!(h(None, Some("false")), None);
        assert_eq!(h(None, Some("FALSE")), None);
        assert_eq!(h(Some(""), Some("yes")), Some(true));
    }

    #[test]
    fn stdin_modes() {
        assert_eq!(StdinMode::parse("pass"), Ok(StdinMode::Pass));
        assert_eq!(StdinMode::parse("pty"), Ok(StdinMode::Pty));
        assert_eq!(StdinMode::parse(""), Ok(StdinMode::Auto));
        assert!(StdinMode::parse("tty").is_err());
    }
}

/// Coding agents known by their program's name: a prompt inside one of their sessions
/// cannot be answered by a re-run (a re-run is a new conversation; the model would start
/// the task afresh), so a run of one waits for the decision unless exit mode is asked for.
pub const CODING_AGENTS: &[&str] = &[
    "claude",
    "codex",
    "gemini",
    "aider",
    "qwen",
    "opencode",
    "copilot",
    "cursor-agent",
    "amp",
    "goose",
    "crush",
];

/// Whether `tool` (a program's file name) is a known coding agent.
pub fn is_coding_agent(tool: &str) -> bool {
    CODING_AGENTS.contains(&tool)
}

/// The flags that give a resume the limits and mode its run was given on its command line
/// or in its environment (`explicit`: those layers only — the executor's own config
/// file and defaults still apply to the rest, as for any run it starts).
pub fn resume_flags(explicit: &crate::config::Settings) -> Vec<String> {
    use crate::config::{Limit, OnPrompt, OnStall};
    let limit = |l: Option<Limit>| {
        l.map(|Limit(d)| match d {
            Some(d) => format!("{}ms", d.as_millis().max(1)),
            None => "none".to_owned(),
        })
    };
    let on_stall = explicit.on_stall.map(|o| match o {
        OnStall::Kill => "kill".to_owned(),
        OnStall::Mark => "mark".to_owned(),
    });
    let on_prompt = explicit.on_prompt.map(|o| match o {
        OnPrompt::Exit => "exit".to_owned(),
        OnPrompt::Wait => "wait".to_owned(),
    });
    [
        ("--timeout", limit(explicit.timeout)),
        ("--stall-timeout", limit(explicit.stall_timeout)),
        ("--on-stall", on_stall),
        ("--on-prompt", on_prompt),
        ("--prompt-idle", limit(explicit.prompt_idle)),
        ("--not-prompt-timeout", limit(explicit.not_prompt_timeout)),
    ]
    .into_iter()
    .filter_map(|(flag, value)| Some([flag.to_owned(), value?]))
    .flatten()
    .collect()
}

/// The pairs of `flags` (as a stored run holds them) that are the limit and mode flags
/// [`resume_flags`] writes with a value each parses: a row cannot slip another option or
/// a word that would be taken for the command.
pub fn checked_resume_flags(flags: &[String]) -> Vec<String> {
    use crate::config::{Limit, OnPrompt, OnStall};
    flags
        .chunks(2)
        .filter(|p| match p {
            [flag, value] => match flag.as_str() {
                "--timeout" | "--stall-timeout" | "--prompt-idle" | "--not-prompt-timeout" => {
                    Limit::parse(value).is_ok()
                }
                "--on-stall" => value.parse::<OnStall>().is_ok(),
                "--on-prompt" => value.parse::<OnPrompt>().is_ok(),
                _ => false,
            },
            _ => false,
        })
        .flatten()
        .cloned()
        .collect()
}

#[cfg(test)]
mod agent_tests {
    #[test]
    fn a_resume_keeps_the_limits_and_mode_its_run_was_given() {
        use crate::config::{Limit, OnPrompt, Settings};
        let s = Settings {
            timeout: Some(Limit(Some(std::time::Duration::from_secs(90)))),
            stall_timeout: Some(Limit(None)),
            on_prompt: Some(OnPrompt::Exit),
            ..Default::default()
        };
        let flags = super::resume_flags(&s);
        assert_eq!(
            flags,
            [
                "--timeout",
                "90000ms",
                "--stall-timeout",
                "none",
                "--on-prompt",
                "exit"
            ]
        );
        assert!(super::resume_flags(&Settings::default()).is_empty());
        assert_eq!(super::checked_resume_flags(&flags), flags);
        let hostile: Vec<String> = [
            "--timeout",
            "5m",
            "--config",
            "x",
            "rm",
            "-rf",
            "--on-prompt",
            "maybe",
            "--on-stall",
        ]
        .map(String::from)
        .to_vec();
        assert_eq!(super::checked_resume_flags(&hostile), ["--timeout", "5m"]);
    }

    #[test]
    fn coding_agents_are_known_by_their_program_name_only() {
        assert!(super::is_coding_agent("claude"));
        assert!(super::is_coding_agent("aider"));
        assert!(!super::is_coding_agent("claude-wrapper"));
        assert!(!super::is_coding_agent("terraform"));
    }
}
