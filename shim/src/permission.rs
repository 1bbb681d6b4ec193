//! Permission requests from a coding agent's own hooks (`headless-run --hook`, `--mcp`),
//! as the supervisor handles them: each is asked as a prompt is — the config's policies, a
//! remembered decision, else a pending approval the operator decides anywhere — and the
//! answer goes back on the hook's pipe, never to the terminal. While one is open, the
//! agent's screen is not read for prompts: the dialog it may draw meanwhile is the same
//! question, already asked.

use hr_shared::approvals::{Approval, PromptKind};
use hr_shared::config::{Config, Resolved};
use hr_shared::event::{PermissionReply, PermissionRequest};
use hr_shared::fingerprint;
use hr_shared::policy::{self, PromptFacts};
use hr_shared::prompt::Prompt;
use hr_shared::sanitize::sanitize_line;
use hr_shared::store::PromptRequest;
use hr_shared::store::watch::{self, Watcher};
use std::io::Write;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::mpsc::Receiver;

/// One open request.
pub struct Open {
    pub reply: PathBuf,
    pub state: State,
}

pub enum State {
    /// The store is resolving it.
    Resolving(Receiver<Result<hr_shared::store::PromptResolution, String>>),
    /// An approval waits for a person; whether its hook still waits for the answer was
    /// last looked at `looked`.
    Waiting {
        watcher: Watcher,
        approval_id: String,
        looked: std::time::Instant,
    },
}

/// How often a waiting hook is looked at: still there to be answered?
pub const LOOK_EVERY: std::time::Duration = std::time::Duration::from_secs(1);

/// Whether the hook that asked still waits for its answer on `path`: it holds the FIFO's
/// read end open while it waits, so an open for writing that would not block succeeds.
/// A hook that was killed, or gave up (its agent's own timeout), leaves no reader (or no
/// FIFO): nothing waits for the decision any more.
pub fn hook_waits(path: &Path) -> bool {
    std::fs::OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOFOLLOW)
        .open(path)
        .and_then(|f| f.metadata())
        .is_ok_and(|m| m.file_type().is_fifo())
}

/// What the run knows that a policy may match on.
pub struct Facts<'a> {
    pub tool: &'a str,
    pub argv: &'a [String],
    pub cwd: &'a str,
    pub settings: &'a Resolved,
    pub config: &'a Config,
}

/// The prompt request a hook's question becomes: its first line is the prompt line
/// (`Bash: rm -rf build`), which the config's policies match as they match a terminal
/// prompt's.
pub fn prompt_request(req: &PermissionRequest, facts: &Facts<'_>) -> PromptRequest {
    let r = &req.request;
    let prompt_line = sanitize_line(r.question.lines().next().unwrap_or_default())
        .trim()
        .to_owned();
    let prompt = Prompt {
        kind: PromptKind::Choice,
        secret: false,
        rule: "agent-hook".into(),
        question: r.question.clone(),
        prompt_line: prompt_line.clone(),
        context: r.context.clone().unwrap_or_default(),
        // Never typed (the answer goes to the hook's pipe): keys only mark each option as an
        // answer the prompt takes, as a policy's value is checked to be.
        options: r
            .options
            .iter()
            .map(|o| hr_shared::event::ApprovalOption {
                keys: Some(String::new()),
                ..o.clone()
            })
            .collect(),
        default: r.default.clone(),
        allows_text: false,
        alternative: None,
        select: None,
    };
    let pf = PromptFacts {
        tool: facts.tool,
        prompt_line: &prompt.prompt_line,
        question: &prompt.question,
        argv: facts.argv,
        cwd: facts.cwd,
    };
    let policies = policy::matching(facts.config, &pf);
    PromptRequest {
        prompt_fingerprint: fingerprint::prompt(facts.tool, &prompt_line),
        policies,
        ttl: facts.settings.approval_ttl,
        on_expire: facts.settings.on_expire,
        prompt,
    }
}

/// The reply for a decided approval.
pub fn reply_for(a: &Approval) -> PermissionReply {
    PermissionReply {
        approval_id: a.approval_id.clone(),
        status: a.status.to_string(),
        value: a.answers().then(|| a.chosen_value.clone()).flatten(),
        decided_by: watch::decided_by(a),
    }
}

/// Writes the answer to the hook's pipe: only a FIFO, never through a link, and never
/// blocking (a hook that gave up has no reader: nothing to tell).
pub fn send(path: &Path, reply: &PermissionReply) -> std::io::Result<()> {
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOFOLLOW)
        .open(path)?;
    if !f.metadata()?.file_type().is_fifo() {
        return Err(std::io::Error::other("not a pipe"));
    }
    let mut line = serde_json::to_vec(reply).map_err(std::io::Error::other)?;
    line.push(b'\n');
    f.write_all(&line)
}

#[cfg(test)]
mod tests {
    use super::*;
    use hr_shared::event::ApprovalOption;
    use hr_shared::event::CooperativeRequest;

    fn request(question: &str) -> PermissionRequest {
        PermissionRequest {
            request: CooperativeRequest {
                approval_id: None,
                tool_run_id: None,
                question: question.into(),
                options: vec![
                    ApprovalOption {
                        value: "allow".into(),
                        label: "Yes".into(),
                        keys: None,
                    },
                    ApprovalOption {
                        value: "deny".into(),
                        label: "No".into(),
                        keys: None,
                    },
                ],
                default: Some("allow".into()),
                allows_text: false,
                context: Some("- old\n+ new".into()),
                expires_in_seconds: None,
            },
            reply: "/tmp/x/reply".into(),
        }
    }

    #[test]
    fn a_hooks_question_is_a_prompt_that_config_policies_match_by_its_first_line() {
        let text = "[[policies]]\nname = \"echo\"\nprompt = \"^Bash: echo \"\nvalue = \"allow\"\n";
        let file = hr_shared::config::ConfigFile::parse(Path::new("/c.toml"), text).unwrap();
        let config = Config {
            layers: vec![("/c.toml".into(), file)],
            warnings: Vec::new(),
        };
        let settings = Resolved::default();
        let facts = Facts {
            tool: "claude",
            argv: &["claude".into()],
            cwd: "/w",
            settings: &settings,
            config: &config,
        };
        let r = prompt_request(&request("Bash: echo hi > x\nWrite x"), &facts);
        assert_eq!(r.prompt.prompt_line, "Bash: echo hi > x");
        assert_eq!(r.prompt.kind, PromptKind::Choice);
        assert_eq!(r.prompt.default.as_deref(), Some("allow"));
        assert_eq!(r.policies, vec![("echo".to_owned(), "allow".to_owned())]);
        assert!(r.prompt.takes("allow") && r.prompt.takes("deny"));
        assert!(!r.prompt.takes("maybe"));
        let r = prompt_request(&request("Bash: rm -rf /\nGone"), &facts);
        assert!(r.policies.is_empty());
    }

    #[test]
    fn the_answer_is_written_only_to_a_fifo() {
        let dir = std::env::temp_dir().join(format!("hr-perm-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir(&dir).unwrap();
        let reply = PermissionReply {
            approval_id: "AP-1".into(),
            status: "approved".into(),
            value: Some("allow".into()),
            decided_by: "root via cli".into(),
        };
        // A plain file, a link, nothing: refused.
        let file = dir.join("file");
        std::fs::write(&file, "").unwrap();
        assert!(send(&file, &reply).is_err());
        assert_eq!(std::fs::read(&file).unwrap(), b"");
        let link = dir.join("link");
        std::os::unix::fs::symlink(&file, &link).unwrap();
        assert!(send(&link, &reply).is_err());
        assert!(send(&dir.join("none"), &reply).is_err());
        // A FIFO with no reader (the hook gave up): an error, not a hang.
        let fifo = dir.join("fifo");
        assert!(!hook_waits(&fifo), "no FIFO: nothing waits");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: a valid C path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        assert!(send(&fifo, &reply).is_err());
        assert!(!hook_waits(&fifo), "a FIFO nobody reads: nothing waits");
        // With a reader: one JSON line.
        let reader = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(&fifo)
            .unwrap();
        assert!(hook_waits(&fifo), "its hook reads it");
        assert!(!hook_waits(&file) && !hook_waits(&link), "only a FIFO");
        send(&fifo, &reply).unwrap();
        let mut got = String::new();
        use std::io::Read;
        let _ = (&reader).read_to_string(&mut got);
        let back: PermissionReply = serde_json::from_str(got.trim()).unwrap();
        assert_eq!(back, reply);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
