//! Coding agents' own permission hooks, answered by the run that supervises the agent:
//!
//! * `headless-run --hook AGENT`: the hook command of a coding agent that can let a hook
//!   decide its permission requests — Claude Code (`PermissionRequest`, fired where it would
//!   show its permission dialog; `PreToolUse` also understood), qwen-code (the same events
//!   and replies), GitHub Copilot CLI (`permissionRequest`, `preToolUse`), Codex CLI
//!   (`PermissionRequest`; `PreToolUse`, which can only deny, for `codex exec`) and Gemini
//!   CLI (`BeforeTool`, which can only deny: the gate with `--approval-mode yolo`).
//! * `headless-run --mcp`: an MCP server over stdio with one tool, `permission`, for
//!   `claude -p --permission-prompt-tool mcp__headless-run__permission` (the
//!   non-interactive mode, which otherwise denies every request unseen).
//! * `headless-run --hook AGENT --install [--settings FILE]`: adds the hook to the agent's
//!   user settings.
//!
//! Each request goes to the enclosing run (the agent started as `headless-run -- AGENT
//! …`) on its event descriptor as a `permission_request`, with a FIFO of the hook's own to
//! answer on; the run asks it as any prompt (policies, remembered decisions, else an
//! approval decided from the CLI, dashboard, web page or API) and writes the answer back.
//! Outside a run, or when the run cannot record it, the hook says nothing and the agent
//! decides as it would without it (its dialog, or its non-interactive denial).

use hr_shared::event::{ENV_EVENT_FD, ENV_EVENT_PIPE, PermissionReply};
use serde_json::{Value, json};
use std::ffi::OsString;
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// How long a hook may wait for a person, as Claude Code's settings are told (seconds):
/// the default approval TTL.
const HOOK_TIMEOUT_SECS: u64 = 86_400;
/// The most of a request read from the agent.
const MAX_INPUT: u64 = 4 << 20;
/// The most context (a diff, a file's start) sent with a question.
const MAX_CONTEXT: usize = 3000;
/// How often a waiting hook tells the run it is alive (and finds out it is gone).
const BEAT: Duration = Duration::from_secs(2);

const USAGE: &str = "\
usage: headless-run --hook AGENT [--install [--settings FILE]]
       headless-run --mcp

  --hook AGENT       a coding agent's hook command: reads the hook's JSON on stdin, asks
                     the enclosing headless-run run, prints the agent's decision. AGENT is
                     claude, qwen, copilot, codex or gemini
  --install          add it to the agent's user settings (~/.claude/settings.json,
                     ~/.qwen/settings.json, ~/.copilot/settings.json, ~/.codex/hooks.json,
                     ~/.gemini/settings.json), or to FILE
  --mcp              an MCP server over stdio with the tool `permission`, for
                     claude -p --permission-prompt-tool mcp__headless-run__permission
";

/// The coding agents whose hooks can decide a permission request, and how each speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HookAgent {
    Claude,
    Qwen,
    Copilot,
    Codex,
    Gemini,
}

impl HookAgent {
    pub fn from_name(name: &str) -> Option<HookAgent> {
        Some(match name {
            "claude" => HookAgent::Claude,
            "qwen" => HookAgent::Qwen,
            "copilot" => HookAgent::Copilot,
            "codex" => HookAgent::Codex,
            "gemini" => HookAgent::Gemini,
            _ => return None,
        })
    }

    fn word(self) -> &'static str {
        match self {
            HookAgent::Claude => "claude",
            HookAgent::Qwen => "qwen",
            HookAgent::Copilot => "copilot",
            HookAgent::Codex => "codex",
            HookAgent::Gemini => "gemini",
        }
    }

    /// The agent's name in a question.
    fn title(self) -> &'static str {
        match self {
            HookAgent::Claude => "Claude Code",
            HookAgent::Qwen => "Qwen Code",
            HookAgent::Copilot => "Copilot",
            HookAgent::Codex => "Codex",
            HookAgent::Gemini => "Gemini CLI",
        }
    }

    /// The user settings file the hook is installed in.
    fn settings_file(self) -> &'static str {
        match self {
            HookAgent::Claude => ".claude/settings.json",
            HookAgent::Qwen => ".qwen/settings.json",
            HookAgent::Copilot => ".copilot/settings.json",
            HookAgent::Codex => ".codex/hooks.json",
            HookAgent::Gemini => ".gemini/settings.json",
        }
    }
}

/// One permission request as the agent's hook sent it: which event, the tool and its input.
#[derive(Debug, PartialEq)]
pub struct HookRequest {
    pub event: HookEvent,
    pub tool: String,
    pub input: Value,
}

/// Which of an agent's hook events: the permission request itself (an allow or a deny
/// replaces its dialog), or the check before every tool call (only a deny counts for some).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HookEvent {
    Permission,
    BeforeTool,
}

/// The request in an agent's hook input, or `None` when it is none to decide here (another
/// event; Claude Code's `bypassPermissions`, where its user chose not to be asked).
pub fn hook_request(agent: HookAgent, event: &Value) -> Option<HookRequest> {
    let input = |key: &str| event.get(key).cloned().unwrap_or(Value::Null);
    let (kind, tool, input) = match agent {
        HookAgent::Copilot => {
            let kind = if text(event, "hookName") == "permissionRequest" {
                HookEvent::Permission
            } else if event.get("toolArgs").is_some() {
                HookEvent::BeforeTool
            } else {
                return None;
            };
            let args = if kind == HookEvent::Permission {
                input("toolInput")
            } else {
                input("toolArgs")
            };
            (kind, text(event, "toolName"), args)
        }
        _ => {
            let kind = match text(event, "hook_event_name").as_str() {
                "PermissionRequest" => HookEvent::Permission,
                "PreToolUse" | "BeforeTool" => HookEvent::BeforeTool,
                _ => return None,
            };
            let bypass = text(event, "permission_mode") == "bypassPermissions";
            if agent == HookAgent::Claude && bypass {
                return None;
            }
            // Codex's PreToolUse comes before every tool call: it is a question only where
            // Codex itself will not ask (`codex exec`, approval `never`: its
            // `bypassPermissions`); elsewhere Codex's own request (PermissionRequest) asks.
            if agent == HookAgent::Codex && kind == HookEvent::BeforeTool && !bypass {
                return None;
            }
            (kind, text(event, "tool_name"), input("tool_input"))
        }
    };
    Some(HookRequest {
        event: kind,
        tool,
        input,
    })
}

/// The agent's reply to a decided request, or `None` to say nothing (the agent goes on as
/// without the hook: an allow on an event that can only deny).
pub fn hook_reply(
    agent: HookAgent,
    event: HookEvent,
    allowed: bool,
    reason: &str,
) -> Option<Value> {
    Some(match (agent, event, allowed) {
        (HookAgent::Copilot, HookEvent::Permission, true) => json!({"behavior": "allow"}),
        (HookAgent::Copilot, HookEvent::Permission, false) => {
            json!({"behavior": "deny", "message": reason})
        }
        (HookAgent::Copilot, HookEvent::BeforeTool, allowed) => json!({
            "permissionDecision": if allowed { "allow" } else { "deny" },
            "permissionDecisionReason": reason}),
        // Gemini CLI's BeforeTool can deny, not allow: an allow says nothing (its approval
        // mode decides; with yolo it runs).
        (HookAgent::Gemini, _, true) => return None,
        (HookAgent::Gemini, _, false) => json!({"decision": "deny", "reason": reason}),
        (_, HookEvent::Permission, true) => json!({"hookSpecificOutput": {
            "hookEventName": "PermissionRequest", "decision": {"behavior": "allow"}}}),
        (_, HookEvent::Permission, false) => json!({"hookSpecificOutput": {
            "hookEventName": "PermissionRequest",
            "decision": {"behavior": "deny", "message": reason}}}),
        // Codex's PreToolUse refuses an allow (it can only deny): nothing is said.
        (HookAgent::Codex, HookEvent::BeforeTool, true) => return None,
        (_, HookEvent::BeforeTool, allowed) => json!({"hookSpecificOutput": {
            "hookEventName": "PreToolUse",
            "permissionDecision": if allowed { "allow" } else { "deny" },
            "permissionDecisionReason": reason}}),
    })
}

/// Runs a `--hook`/`--mcp` invocation (`args` after the program name); the exit code.
pub fn main(args: &[OsString]) -> u8 {
    let args: Vec<String> = args
        .iter()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    let words: Vec<&str> = args.iter().map(String::as_str).collect();
    let agent = |name: &str| {
        let found = HookAgent::from_name(name);
        if found.is_none() {
            eprintln!(
                "headless-run: no hook for {name:?}: claude, qwen, copilot, codex and gemini have one; other agents' prompts are read from the terminal\n{USAGE}"
            );
        }
        found
    };
    match words.as_slice() {
        ["--mcp"] => mcp(),
        ["--hook" | "--mcp", "-h" | "--help"] => {
            print!("{USAGE}");
            0
        }
        ["--hook", name] => agent(name).map_or(2, agent_hook),
        ["--hook", name, "--install"] => agent(name).map_or(2, |a| install(a, None)),
        ["--hook", name, "--install", "--settings", file] => {
            agent(name).map_or(2, |a| install(a, Some(PathBuf::from(file))))
        }
        _ => {
            eprint!("headless-run: bad hook arguments\n{USAGE}");
            2
        }
    }
}

/// What is asked about one tool call: its first line is the prompt line policies match
/// (`Bash: git status`), the rest says what the agent gave as its reason; the context
/// holds the diff or the file.
#[derive(Debug, PartialEq)]
pub struct Described {
    pub question: String,
    pub context: String,
}

fn text(v: &Value, key: &str) -> String {
    v.get(key).and_then(Value::as_str).unwrap_or("").to_owned()
}

fn clip(mut s: String, max: usize) -> String {
    if hr_shared::event::truncate_utf8(&mut s, max) {
        s.push_str("\n…");
    }
    s
}

/// The first of `keys` that `v` holds as a string (agents name one field differently:
/// `file_path`, `filePath`, `path`).
fn field(v: &Value, keys: &[&str]) -> String {
    keys.iter()
        .find_map(|k| v.get(*k).and_then(Value::as_str))
        .unwrap_or("")
        .to_owned()
}

const COMMAND: &[&str] = &["command", "cmd"];
const PATH: &[&str] = &["file_path", "filePath", "path", "absolute_path"];
const OLD: &[&str] = &["old_string", "oldString", "old_str"];
const NEW: &[&str] = &["new_string", "newString", "new_str"];
const CONTENT: &[&str] = &["content", "file_text"];

/// The question for tool `tool` of `agent` called with `input`: a shell command, an edit
/// (as a diff), a file written, or any other tool with its input.
pub fn describe(agent: HookAgent, tool: &str, input: &Value) -> Described {
    let lines =
        |s: &str, mark: char| -> String { s.lines().map(|l| format!("{mark} {l}\n")).collect() };
    let shell = matches!(
        tool,
        "Bash" | "bash" | "run_shell_command" | "shell" | "exec_command"
    ) && !field(input, COMMAND).is_empty();
    let edit = matches!(
        tool,
        "Edit" | "MultiEdit" | "edit" | "replace" | "str_replace"
    ) && !field(input, PATH).is_empty();
    let write = matches!(tool, "Write" | "write_file" | "write" | "create")
        && !field(input, PATH).is_empty();
    let (first, reason, context, asks) = if shell {
        let command = field(input, COMMAND);
        (
            format!("Bash: {command}"),
            field(input, &["description", "justification"]),
            command,
            "run: ".to_owned(),
        )
    } else if edit {
        let path = field(input, PATH);
        // The agent's own diff where it sends one (Copilot's permission request).
        let mut diff = field(input, &["diff"]).trim_start_matches('\n').to_owned();
        if diff.is_empty() {
            diff = format!("--- {path}\n+++ {path}\n");
            let edits: Vec<Value> = match input.get("edits").and_then(Value::as_array) {
                Some(list) => list.clone(),
                None => vec![input.clone()],
            };
            for e in &edits {
                diff.push_str(&lines(&field(e, OLD), '-'));
                diff.push_str(&lines(&field(e, NEW), '+'));
            }
        }
        (
            format!("Edit: {path}"),
            String::new(),
            diff,
            "edit ".to_owned(),
        )
    } else if write {
        let path = field(input, PATH);
        (
            format!("Write: {path}"),
            String::new(),
            lines(&field(input, CONTENT), '+'),
            "write ".to_owned(),
        )
    } else {
        let shown = serde_json::to_string_pretty(input).unwrap_or_default();
        let one: String = serde_json::to_string(input).unwrap_or_default();
        (
            format!("{tool}: {}", clip(one, 160)),
            String::new(),
            shown,
            format!("use {tool}: "),
        )
    };
    let first: String = first.lines().next().unwrap_or_default().to_owned();
    let target = first.split_once(": ").map_or("", |(_, t)| t);
    let question = format!("{} asks to {asks}{target}", agent.title());
    // The first line is what a policy matches: the tool and its target, plain.
    let mut q = first;
    if !reason.is_empty() {
        q.push('\n');
        q.push_str(&reason);
    }
    q.push('\n');
    q.push_str(&question);
    Described {
        question: q,
        context: clip(context, MAX_CONTEXT),
    }
}

/// An agent's hook: stdin holds the event; stdout gets the decision, or nothing (the
/// agent decides as without the hook). Always exits 0: a hook's failure must not read as a
/// denial the agent would pass to its model.
fn agent_hook(agent: HookAgent) -> u8 {
    let who = format!("headless-run --hook {}", agent.word());
    let mut raw = Vec::new();
    if std::io::stdin()
        .take(MAX_INPUT)
        .read_to_end(&mut raw)
        .is_err()
    {
        return 0;
    }
    let Ok(event) = serde_json::from_slice::<Value>(&raw) else {
        eprintln!("{who}: the hook's input is not JSON");
        return 0;
    };
    let Some(req) = hook_request(agent, &event) else {
        return 0;
    };
    let d = describe(agent, &req.tool, &req.input);
    let reply = match ask(&d) {
        Ok(r) => r,
        Err(why) => {
            eprintln!("{who}: {why}; {} decides", agent.title());
            return 0;
        }
    };
    let Some(allowed) = verdict(&reply) else {
        return 0;
    };
    if let Some(out) = hook_reply(agent, req.event, allowed, &reason(&reply)) {
        println!("{out}");
    }
    0
}

/// Allowed (`Some(true)`), denied (`Some(false)`), or not decided here (`None`: the run
/// could not record it).
fn verdict(r: &PermissionReply) -> Option<bool> {
    match r.status.as_str() {
        "approved" | "expired" if r.value.is_some() => Some(r.value.as_deref() == Some("allow")),
        "approved" | "rejected" | "expired" => Some(false),
        _ => None,
    }
}

fn reason(r: &PermissionReply) -> String {
    match r.value.as_deref() {
        Some("allow") => format!("allowed by {} ({})", r.decided_by, r.approval_id),
        _ => format!(
            "The operator denied this ({} by {}, {}). Do not retry it; go on without it or stop.",
            if r.status == "approved" {
                "deny"
            } else {
                &r.status
            },
            r.decided_by,
            r.approval_id
        ),
    }
}

/// The enclosing run's event descriptor, opened for writing: this process's own, or else
/// the nearest ancestor's (through `/proc/PID/fd/N`). Agents start their hooks and MCP
/// servers with few variables and without the descriptors they inherited; the agent itself
/// has both. Only a process that may look into the agent (its own user) can open it, and
/// only the pipe the run named ([`ENV_EVENT_PIPE`]) is taken.
fn event_pipe() -> Option<std::fs::File> {
    let open = pipe_at;
    if let Ok(fd) = std::env::var(ENV_EVENT_FD)
        && let Some(f) = open("self", &fd, std::env::var(ENV_EVENT_PIPE).ok().as_deref())
    {
        return Some(f);
    }
    let mut pid = std::os::unix::process::parent_id() as i32;
    for _ in 0..8 {
        if pid <= 1 {
            return None;
        }
        let environ = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
        let var = |name: &str| {
            let prefix = format!("{name}=");
            environ
                .split(|&b| b == 0)
                .find_map(|kv| kv.strip_prefix(prefix.as_bytes()))
                .map(|v| String::from_utf8_lossy(v).into_owned())
        };
        // (A shell between the agent and its hook has the variables, not the pipe.)
        if let Some(fd) = var(ENV_EVENT_FD)
            && let Some(f) = open(&pid.to_string(), &fd, var(ENV_EVENT_PIPE).as_deref())
        {
            return Some(f);
        }
        pid = hr_shared::proc::read_stat(pid)?.ppid;
    }
    None
}

/// The descriptor `fd` of process `pid` (`self` for this one), opened for writing, when it is
/// the run's pipe: a FIFO, and the very pipe `pipe` (its inode) names where the run says.
fn pipe_at(pid: &str, fd: &str, pipe: Option<&str>) -> Option<std::fs::File> {
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    let fd: RawFd = fd.parse().ok().filter(|fd| *fd > 2)?;
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(format!("/proc/{pid}/fd/{fd}"))
        .ok()?;
    let m = f.metadata().ok()?;
    let same = pipe.is_none_or(|id| id.parse::<u64>().ok() == Some(m.ino()));
    (m.file_type().is_fifo() && same).then_some(f)
}

/// Writes one line to the run's pipe; an error means the run is gone.
fn send_line(pipe: &mut std::fs::File, line: &[u8]) -> std::io::Result<()> {
    pipe.write_all(line)
}

/// A private directory for the answer's FIFO, removed when dropped.
struct AskDir(PathBuf);

impl Drop for AskDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn ask_dir() -> std::io::Result<AskDir> {
    let base = std::env::var_os("XDG_RUNTIME_DIR")
        .map(PathBuf::from)
        .filter(|p| p.is_dir())
        .unwrap_or_else(std::env::temp_dir);
    let template = base.join("hr-ask-XXXXXX");
    let mut bytes = std::ffi::CString::new(template.as_os_str().as_encoded_bytes())
        .map_err(std::io::Error::other)?
        .into_bytes_with_nul();
    // SAFETY: a writable NUL-terminated template ending in XXXXXX.
    let p = unsafe { libc::mkdtemp(bytes.as_mut_ptr().cast()) };
    if p.is_null() {
        return Err(std::io::Error::last_os_error());
    }
    bytes.pop();
    Ok(AskDir(PathBuf::from(OsString::from(
        String::from_utf8_lossy(&bytes).into_owned(),
    ))))
}

/// Asks the enclosing run and waits for its answer.
pub fn ask(d: &Described) -> Result<PermissionReply, String> {
    let mut pipe = event_pipe().ok_or_else(|| {
        "not inside a headless-run run (no event descriptor): start the agent as `headless-run -- AGENT …`"
            .to_owned()
    })?;
    let dir = ask_dir().map_err(|e| format!("cannot make a private directory: {e}"))?;
    let fifo = dir.0.join("reply");
    let c =
        std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).map_err(|e| e.to_string())?;
    // SAFETY: a valid NUL-terminated path.
    if unsafe { libc::mkfifo(c.as_ptr(), 0o600) } != 0 {
        return Err(format!(
            "cannot make the answer's pipe: {}",
            std::io::Error::last_os_error()
        ));
    }
    let open = |write: bool| {
        std::fs::OpenOptions::new()
            .read(!write)
            .write(write)
            .custom_flags(libc::O_NONBLOCK)
            .open(&fifo)
    };
    let mut reader = open(false).map_err(|e| e.to_string())?;
    // Held open so the pipe never reads as ended before the answer comes.
    let _keep = open(true).map_err(|e| e.to_string())?;
    let request = json!({
        "event": "permission_request",
        "reply": fifo,
        "question": d.question,
        "context": d.context,
        "options": [
            {"value": "allow", "label": "Yes, allow it"},
            {"value": "deny", "label": "No, deny it (the agent goes on without it)"},
        ],
        "default": "allow",
    });
    let mut line = serde_json::to_vec(&request).map_err(|e| e.to_string())?;
    line.push(b'\n');
    send_line(&mut pipe, &line).map_err(|e| format!("the run is gone ({e})"))?;
    let mut got = Vec::new();
    loop {
        let mut pfd = libc::pollfd {
            fd: reader.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd.
        let n = unsafe { libc::poll(&mut pfd, 1, BEAT.as_millis() as i32) };
        if n > 0 {
            let mut buf = [0u8; 4096];
            match reader.read(&mut buf) {
                Ok(k) if k > 0 => got.extend_from_slice(&buf[..k]),
                _ => {}
            }
            if let Some(end) = got.iter().position(|&b| b == b'\n') {
                return serde_json::from_slice(&got[..end])
                    .map_err(|e| format!("the run's answer is not understood: {e}"));
            }
            continue;
        }
        let beat = br#"{"event":"heartbeat","message":"an agent's hook waits for a decision"}"#;
        send_line(&mut pipe, &[&beat[..], b"\n"].concat())
            .map_err(|e| format!("the run ended before a decision ({e})"))?;
    }
}

/// Where an agent's settings list its hooks for each event the hook answers, and the entry
/// that runs `command` there: one event, or for Codex two (its PermissionRequest, and the
/// PreToolUse that `codex exec` fires instead).
fn hook_slots(agent: HookAgent, command: &str) -> Vec<(&'static str, Value)> {
    // Claude Code's settings format, which qwen-code and Codex share.
    let matched = |matcher: &str, timeout: u64| {
        json!({"matcher": matcher, "hooks": [{"type": "command", "command": command,
            "timeout": timeout}]})
    };
    match agent {
        HookAgent::Claude => vec![("PermissionRequest", matched("*", HOOK_TIMEOUT_SECS))],
        HookAgent::Codex => vec![
            ("PermissionRequest", matched(".*", HOOK_TIMEOUT_SECS)),
            ("PreToolUse", matched(".*", HOOK_TIMEOUT_SECS)),
        ],
        // qwen-code reads a timeout of 1000 or more as milliseconds.
        HookAgent::Qwen => vec![("PermissionRequest", matched("", HOOK_TIMEOUT_SECS * 1000))],
        HookAgent::Copilot => vec![(
            "permissionRequest",
            json!({"type": "command", "bash": command, "timeoutSec": HOOK_TIMEOUT_SECS}),
        )],
        HookAgent::Gemini => vec![(
            "BeforeTool",
            json!({"matcher": "run_shell_command|replace|write_file", "hooks": [{
                "name": "headless-run", "type": "command", "command": command,
                "timeout": HOOK_TIMEOUT_SECS * 1000}]}),
        )],
    }
}

/// Whether a settings entry (Copilot's a hook itself, the others' a matcher holding hooks)
/// runs `command`.
fn runs(entry: &Value, command: &str) -> bool {
    let is = |h: &Value| {
        h.get("command")
            .or_else(|| h.get("bash"))
            .and_then(Value::as_str)
            == Some(command)
    };
    is(entry)
        || entry
            .get("hooks")
            .and_then(Value::as_array)
            .is_some_and(|hs| hs.iter().any(is))
}

/// Adds `agent`'s hook running `command` to `settings` (a JSON object) unless one is
/// there. Whether it changed anything.
pub fn add_hook(agent: HookAgent, settings: &mut Value, command: &str) -> Result<bool, String> {
    let obj = settings
        .as_object_mut()
        .ok_or("the settings are not a JSON object")?;
    let hooks = obj.entry("hooks").or_insert_with(|| json!({}));
    let hooks = hooks
        .as_object_mut()
        .ok_or("`hooks` in the settings is not an object")?;
    // Every list is checked before anything is added: a bad one changes nothing.
    let slots = hook_slots(agent, command);
    for (event, _) in &slots {
        if hooks.get(*event).is_some_and(|l| !l.is_array()) {
            return Err(format!("`hooks.{event}` is not a list"));
        }
    }
    let mut added = false;
    for (event, entry) in slots {
        let list = hooks.entry(event).or_insert_with(|| json!([]));
        let Some(list) = list.as_array_mut() else {
            continue;
        };
        if !list.iter().any(|m| runs(m, command)) {
            list.push(entry);
            added = true;
        }
    }
    Ok(added)
}

/// What the user must still do once the hook is in an agent's settings.
fn after_install(agent: HookAgent) -> &'static str {
    match agent {
        HookAgent::Codex => {
            "; Codex runs a hook it has not been told to trust only with --dangerously-bypass-hook-trust: review it once with /hooks in codex (or pass that flag). PreToolUse asks only where Codex itself would not (`codex exec`, approval never), and can only deny"
        }
        HookAgent::Gemini => {
            "; Gemini CLI's BeforeTool hook can deny but not allow: run gemini with --approval-mode yolo so that the hook is the gate (otherwise its own dialog asks as well)"
        }
        _ => "",
    }
}

fn install(agent: HookAgent, file: Option<PathBuf>) -> u8 {
    let file = match file
        .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(agent.settings_file())))
    {
        Some(f) => f,
        None => {
            eprintln!("headless-run: no HOME: name the settings file with --settings");
            return 2;
        }
    };
    let exe = std::env::current_exe()
        .ok()
        .and_then(|p| p.canonicalize().ok())
        .unwrap_or_else(|| PathBuf::from("headless-run"));
    let command = format!(
        "{} --hook {}",
        hr_shared::shell::quote(&exe.to_string_lossy()),
        agent.word()
    );
    let mut settings = match std::fs::read(&file) {
        Ok(raw) if raw.iter().all(u8::is_ascii_whitespace) => json!({}),
        Ok(raw) => match serde_json::from_slice::<Value>(&raw) {
            Ok(v) => v,
            Err(e) => {
                eprintln!(
                    "headless-run: {} is not JSON ({e}); left as it is",
                    file.display()
                );
                return 1;
            }
        },
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => json!({}),
        Err(e) => {
            eprintln!("headless-run: cannot read {}: {e}", file.display());
            return 1;
        }
    };
    let event = hook_slots(agent, &command)
        .iter()
        .map(|(e, _)| *e)
        .collect::<Vec<_>>()
        .join(" and ");
    match add_hook(agent, &mut settings, &command) {
        Ok(false) => {
            println!("{}: the hook is already there ({command})", file.display());
            0
        }
        Ok(true) => {
            let text = serde_json::to_string_pretty(&settings).unwrap_or_default() + "\n";
            let written = file
                .parent()
                .map_or(Ok(()), std::fs::create_dir_all)
                .and_then(|_| {
                    let tmp = file.with_extension("json.headless-run-tmp");
                    std::fs::write(&tmp, text)?;
                    std::fs::rename(&tmp, &file)
                });
            match written {
                Ok(()) => {
                    println!(
                        "{}: added a {event} hook ({command}); run {} as `headless-run -- {} …`{}",
                        file.display(),
                        agent.title(),
                        agent.word(),
                        after_install(agent)
                    );
                    0
                }
                Err(e) => {
                    eprintln!("headless-run: cannot write {}: {e}", file.display());
                    1
                }
            }
        }
        Err(why) => {
            eprintln!("headless-run: {}: {why}; left as it is", file.display());
            1
        }
    }
}

/// The MCP server: JSON-RPC 2.0, one message per line on stdin and stdout.
fn mcp() -> u8 {
    let stdin = std::io::stdin();
    let mut out = std::io::stdout();
    let mut line = String::new();
    loop {
        line.clear();
        match std::io::BufRead::read_line(&mut stdin.lock(), &mut line) {
            Ok(0) | Err(_) => return 0,
            Ok(_) => {}
        }
        let Ok(msg) = serde_json::from_str::<Value>(line.trim()) else {
            continue;
        };
        if let Some(reply) = mcp_reply(&msg, &|d| ask(d)) {
            let _ = writeln!(out, "{reply}");
            let _ = out.flush();
        }
    }
}

/// The answer to one MCP message (`None` for a notification); `ask` asks the run.
pub fn mcp_reply(
    msg: &Value,
    ask: &dyn Fn(&Described) -> Result<PermissionReply, String>,
) -> Option<Value> {
    let id = msg.get("id")?.clone();
    let method = msg.get("method").and_then(Value::as_str).unwrap_or("");
    let result = match method {
        "initialize" => {
            let version = msg
                .pointer("/params/protocolVersion")
                .and_then(Value::as_str)
                .unwrap_or("2024-11-05");
            json!({"protocolVersion": version, "capabilities": {"tools": {}},
                "serverInfo": {"name": "headless-run", "version": env!("CARGO_PKG_VERSION")}})
        }
        "ping" => json!({}),
        "tools/list" => json!({"tools": [{
            "name": "permission",
            "description": "Asks the operator of the headless-run run whether a tool call may go ahead (the run's approvals: CLI, dashboard, web page, API, policies).",
            "inputSchema": {"type": "object", "properties": {
                "tool_name": {"type": "string"}, "input": {"type": "object"},
                "tool_use_id": {"type": "string"}}, "required": ["tool_name", "input"]}}]}),
        "tools/call" => {
            let args = msg
                .pointer("/params/arguments")
                .cloned()
                .unwrap_or(json!({}));
            if msg.pointer("/params/name").and_then(Value::as_str) != Some("permission") {
                return Some(json!({"jsonrpc": "2.0", "id": id,
                    "error": {"code": -32602, "message": "unknown tool"}}));
            }
            let input = args.get("input").cloned().unwrap_or(json!({}));
            let d = describe(HookAgent::Claude, &text(&args, "tool_name"), &input);
            let decision = match ask(&d) {
                Ok(r) => match verdict(&r) {
                    Some(true) => json!({"behavior": "allow", "updatedInput": input}),
                    Some(false) => json!({"behavior": "deny", "message": reason(&r)}),
                    None => json!({"behavior": "deny",
                        "message": "headless-run could not record this request; denied"}),
                },
                // `-p` denies what nobody could be asked about; so does this.
                Err(why) => json!({"behavior": "deny", "message": format!("headless-run: {why}")}),
            };
            json!({"content": [{"type": "text", "text": decision.to_string()}]})
        }
        _ => {
            return Some(json!({"jsonrpc": "2.0", "id": id,
                "error": {"code": -32601, "message": format!("method not found: {method}")}}));
        }
    };
    Some(json!({"jsonrpc": "2.0", "id": id, "result": result}))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tool_call_becomes_a_question_whose_first_line_policies_match() {
        let d = describe(
            HookAgent::Claude,
            "Bash",
            &json!({"command": "rm -rf build", "description": "Clean the build"}),
        );
        assert_eq!(d.question.lines().next(), Some("Bash: rm -rf build"));
        assert!(d.question.contains("Clean the build"));
        assert!(d.question.contains("Claude Code asks to run: rm -rf build"));
        let d = describe(
            HookAgent::Claude,
            "Edit",
            &json!({"file_path": "/w/foo.py", "old_string": "return a + b",
                "new_string": "return a - b"}),
        );
        assert_eq!(d.question.lines().next(), Some("Edit: /w/foo.py"));
        assert!(
            d.context.contains("- return a + b\n+ return a - b"),
            "{}",
            d.context
        );
        let d = describe(
            HookAgent::Claude,
            "Write",
            &json!({"file_path": "/w/x", "content": "hi\nthere"}),
        );
        assert_eq!(d.context, "+ hi\n+ there\n");
        let d = describe(HookAgent::Claude, "WebFetch", &json!({"url": "http://x"}));
        assert!(d.question.starts_with("WebFetch: {\"url\":\"http://x\"}"));
        // A command of many lines asks about its first; the context holds it all, bounded.
        let long = "echo a\n".repeat(2000);
        let d = describe(HookAgent::Claude, "Bash", &json!({ "command": long }));
        assert_eq!(d.question.lines().next(), Some("Bash: echo a"));
        assert!(d.context.len() <= MAX_CONTEXT + 4);
    }

    #[test]
    fn each_agents_request_and_reply_in_its_own_words() {
        // qwen-code: Claude Code's shape, its own tool names.
        let q = json!({"hook_event_name": "PermissionRequest", "tool_name": "run_shell_command",
            "tool_input": {"command": "rm -rf build", "description": "clean"},
            "permission_mode": "default"});
        let r = hook_request(HookAgent::Qwen, &q).unwrap();
        assert_eq!(r.event, HookEvent::Permission);
        let d = describe(HookAgent::Qwen, &r.tool, &r.input);
        assert_eq!(d.question.lines().next(), Some("Bash: rm -rf build"));
        assert!(d.question.contains("Qwen Code asks to run: rm -rf build"));
        assert_eq!(
            hook_reply(HookAgent::Qwen, r.event, true, "ok").unwrap(),
            json!({"hookSpecificOutput": {"hookEventName": "PermissionRequest",
                "decision": {"behavior": "allow"}}})
        );
        // Copilot: camelCase, its permission request and its check before each tool.
        let c = json!({"hookName": "permissionRequest", "toolName": "edit",
            "toolInput": {"path": "/w/foo.py", "old_str": "a", "new_str": "b"}});
        let r = hook_request(HookAgent::Copilot, &c).unwrap();
        let d = describe(HookAgent::Copilot, &r.tool, &r.input);
        assert_eq!(d.question.lines().next(), Some("Edit: /w/foo.py"));
        assert!(d.context.contains("- a\n+ b"), "{}", d.context);
        assert_eq!(
            hook_reply(HookAgent::Copilot, r.event, false, "no").unwrap(),
            json!({"behavior": "deny", "message": "no"})
        );
        let pre = json!({"toolName": "bash", "toolArgs": {"command": "ls"}});
        let r = hook_request(HookAgent::Copilot, &pre).unwrap();
        assert_eq!(r.event, HookEvent::BeforeTool);
        assert_eq!(
            hook_reply(HookAgent::Copilot, r.event, true, "ok").unwrap()["permissionDecision"],
            "allow"
        );
        assert!(hook_request(HookAgent::Copilot, &json!({"sessionId": "x"})).is_none());
        // Its edit request carries a unified diff: shown as it is.
        let diff = "\ndiff --git a/f b/f\n--- a/f\n+++ b/f\n@@ -1 +1 @@\n-a\n+b\n";
        let d = describe(
            HookAgent::Copilot,
            "edit",
            &json!({"file_path": "/w/f", "diff": diff}),
        );
        assert_eq!(d.question.lines().next(), Some("Edit: /w/f"));
        assert!(d.context.starts_with("diff --git") && d.context.contains("\n+b\n"));
        // Gemini CLI and Codex's PreToolUse can only deny: an allow says nothing.
        let g = json!({"hook_event_name": "BeforeTool", "tool_name": "replace",
            "tool_input": {"file_path": "/w/f", "old_string": "a", "new_string": "b"}});
        let r = hook_request(HookAgent::Gemini, &g).unwrap();
        assert_eq!(hook_reply(HookAgent::Gemini, r.event, true, "ok"), None);
        assert_eq!(
            hook_reply(HookAgent::Gemini, r.event, false, "no").unwrap(),
            json!({"decision": "deny", "reason": "no"})
        );
        assert_eq!(
            hook_reply(HookAgent::Codex, HookEvent::BeforeTool, true, "ok"),
            None
        );
        // Another event, or Claude Code told not to ask: nothing to decide.
        let other = json!({"hook_event_name": "Stop"});
        assert!(hook_request(HookAgent::Claude, &other).is_none());
        let bypass = json!({"hook_event_name": "PreToolUse", "tool_name": "Bash",
            "permission_mode": "bypassPermissions", "tool_input": {"command": "ls"}});
        assert!(hook_request(HookAgent::Claude, &bypass).is_none());
        // Codex's PreToolUse asks only where Codex will not (`codex exec`: bypass).
        assert!(hook_request(HookAgent::Codex, &bypass).is_some());
        let mut asks_itself = bypass.clone();
        asks_itself["permission_mode"] = json!("default");
        assert!(hook_request(HookAgent::Codex, &asks_itself).is_none());
        asks_itself["hook_event_name"] = json!("PermissionRequest");
        assert!(hook_request(HookAgent::Codex, &asks_itself).is_some());
        assert_eq!(HookAgent::from_name("aider"), None);
    }

    fn reply(status: &str, value: Option<&str>) -> PermissionReply {
        PermissionReply {
            approval_id: "AP-1".into(),
            status: status.into(),
            value: value.map(str::to_owned),
            decided_by: "root via cli".into(),
        }
    }

    #[test]
    fn only_the_runs_own_pipe_is_taken() {
        use std::os::fd::AsRawFd;
        use std::os::unix::fs::MetadataExt;
        let (_read, write) = std::io::pipe().unwrap();
        let fd = write.as_raw_fd().to_string();
        let ino = std::fs::metadata(format!("/proc/self/fd/{fd}"))
            .unwrap()
            .ino();
        assert!(pipe_at("self", &fd, Some(&ino.to_string())).is_some());
        assert!(pipe_at("self", &fd, None).is_some());
        // Another pipe at that number, a plain file, stdio, nothing: not taken.
        assert!(pipe_at("self", &fd, Some(&(ino + 1).to_string())).is_none());
        let path = std::env::temp_dir().join(format!("hr-pipe-at-{}", std::process::id()));
        let file = std::fs::File::create(&path).unwrap();
        assert!(pipe_at("self", &file.as_raw_fd().to_string(), None).is_none());
        std::fs::remove_file(&path).unwrap();
        assert!(pipe_at("self", "1", None).is_none());
        assert!(pipe_at("self", "9999", None).is_none());
        assert!(pipe_at("self", "x", None).is_none());
    }

    #[test]
    fn only_an_allow_allows() {
        assert_eq!(verdict(&reply("approved", Some("allow"))), Some(true));
        assert_eq!(verdict(&reply("approved", Some("deny"))), Some(false));
        assert_eq!(verdict(&reply("rejected", None)), Some(false));
        assert_eq!(verdict(&reply("expired", None)), Some(false));
        assert_eq!(verdict(&reply("expired", Some("allow"))), Some(true));
        assert_eq!(verdict(&reply("unrecorded", None)), None);
        assert!(reason(&reply("approved", Some("deny"))).contains("denied"));
    }

    #[test]
    fn install_adds_the_hook_once_and_keeps_what_is_there() {
        let mut s = json!({"env": {"A": "1"}, "hooks": {"PreToolUse": []}});
        assert_eq!(
            add_hook(HookAgent::Claude, &mut s, "/bin/hr --hook claude"),
            Ok(true)
        );
        assert_eq!(
            add_hook(HookAgent::Claude, &mut s, "/bin/hr --hook claude"),
            Ok(false)
        );
        assert_eq!(s["env"]["A"], "1");
        assert_eq!(s["hooks"]["PermissionRequest"].as_array().unwrap().len(), 1);
        assert_eq!(
            s["hooks"]["PermissionRequest"][0]["hooks"][0]["timeout"],
            HOOK_TIMEOUT_SECS
        );
        assert!(add_hook(HookAgent::Claude, &mut json!([]), "x").is_err());
        assert!(add_hook(HookAgent::Claude, &mut json!({"hooks": []}), "x").is_err());
        // Each agent's own shape: Copilot's entry is the hook itself; qwen's and Gemini's
        // timeouts are milliseconds.
        let mut c = json!({});
        assert_eq!(
            add_hook(HookAgent::Copilot, &mut c, "hr --hook copilot"),
            Ok(true)
        );
        assert_eq!(
            add_hook(HookAgent::Copilot, &mut c, "hr --hook copilot"),
            Ok(false)
        );
        assert_eq!(
            c["hooks"]["permissionRequest"][0]["bash"],
            "hr --hook copilot"
        );
        assert_eq!(
            c["hooks"]["permissionRequest"][0]["timeoutSec"],
            HOOK_TIMEOUT_SECS
        );
        let mut q = json!({});
        add_hook(HookAgent::Qwen, &mut q, "hr --hook qwen").unwrap();
        assert_eq!(
            q["hooks"]["PermissionRequest"][0]["hooks"][0]["timeout"],
            HOOK_TIMEOUT_SECS * 1000
        );
        let mut g = json!({});
        add_hook(HookAgent::Gemini, &mut g, "hr --hook gemini").unwrap();
        assert_eq!(
            g["hooks"]["BeforeTool"][0]["hooks"][0]["command"],
            "hr --hook gemini"
        );
        let mut x = json!({});
        assert_eq!(
            add_hook(HookAgent::Codex, &mut x, "hr --hook codex"),
            Ok(true)
        );
        assert_eq!(x["hooks"]["PermissionRequest"][0]["matcher"], ".*");
        assert_eq!(
            x["hooks"]["PreToolUse"][0]["hooks"][0]["command"],
            "hr --hook codex"
        );
        assert_eq!(
            add_hook(HookAgent::Codex, &mut x, "hr --hook codex"),
            Ok(false)
        );
        // One list that is not a list: nothing added anywhere.
        let mut bad = json!({"hooks": {"PreToolUse": {}}});
        assert!(add_hook(HookAgent::Codex, &mut bad, "hr --hook codex").is_err());
        assert_eq!(bad, json!({"hooks": {"PreToolUse": {}}}));
    }

    #[test]
    fn the_mcp_server_lists_its_tool_and_answers_calls() {
        let allow = |_: &Described| Ok(reply("approved", Some("allow")));
        let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"protocolVersion": "2025-06-18"}});
        let r = mcp_reply(&init, &allow).unwrap();
        assert_eq!(r["result"]["protocolVersion"], "2025-06-18");
        assert_eq!(
            mcp_reply(
                &json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
                &allow
            ),
            None
        );
        let r = mcp_reply(
            &json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}),
            &allow,
        )
        .unwrap();
        assert_eq!(r["result"]["tools"][0]["name"], "permission");
        let call = json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {
            "name": "permission", "arguments": {"tool_name": "Bash",
            "input": {"command": "ls"}, "tool_use_id": "t1"}}});
        let r = mcp_reply(&call, &allow).unwrap();
        let decision: Value =
            serde_json::from_str(r["result"]["content"][0]["text"].as_str().unwrap()).unwrap();
        assert_eq!(
            decision,
            json!({"behavior": "allow", "updatedInput": {"command": "ls"}})
        );
        let deny = |_: &Described| Ok(reply("approved", Some("deny")));
        let r = mcp_reply(&call, &deny).unwrap();
        assert!(
            r["result"]["content"][0]["text"]
                .as_str()
                .unwrap()
                .contains("\"deny\"")
        );
        // Nobody to ask: denied, as `-p` would, saying why.
        let none = |_: &Described| Err("not inside a headless-run run".to_owned());
        let r = mcp_reply(&call, &none).unwrap();
        assert!(
            r["result"]["content"][0]["text"]
                .as_str()
                .unwrap()
                .contains("not inside")
        );
        let r = mcp_reply(
            &json!({"jsonrpc": "2.0", "id": 4, "method": "nope"}),
            &allow,
        )
        .unwrap();
        assert_eq!(r["error"]["code"], -32601);
    }
}
