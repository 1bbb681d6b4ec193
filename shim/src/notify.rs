//! The notify hook: a command from config (`[notify] command = [...]`, no shell) run for
//! each new approval, given the approval as environment variables and as one JSON object on
//! stdin. Its output is discarded and its failure never touches the run; a hook still
//! running after its timeout is killed by its watchdog, which outlives the shim.

use hr_shared::approvals::Approval;
use hr_shared::config::NotifyConfig;
use hr_shared::tool_path;
use std::io::Write;
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// How long a hook may run by default.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

/// The `monitor decide` command line that approves `a`, for the state reached by
/// `monitor` (see `StatePaths::monitor_command`).
pub fn decide_command(monitor: &str, a: &Approval) -> String {
    format!("{monitor} decide {} approve", a.approval_id)
}

/// The name the shim is started under to act as a hook's watchdog (argv[0]).
pub const WATCHDOG_NAME: &str = "headless-run-notify";

/// What the approval is for: the command that asked, where, on which host; and the
/// `monitor` command line that reaches its state.
pub struct AskedBy {
    pub argv: Vec<String>,
    pub cwd: String,
    pub host: String,
    pub monitor: String,
}

/// Starts the hook for `a` in the background, under a watchdog: the shim itself started
/// again as `headless-run-notify`, which runs the hook and kills it after its timeout —
/// even when the shim has exited meanwhile (exit mode exits at once). Returns a warning to
/// print when it could not be started.
pub fn run(cfg: &NotifyConfig, a: &Approval, by: &AskedBy) -> Option<String> {
    let (program, args) = cfg.command.split_first()?;
    let path_var = std::env::var_os("PATH");
    let resolved = match tool_path::find_tool(
        program.as_ref(),
        path_var.as_deref(),
        tool_path::ShimIdentity::current().as_ref(),
        None,
    ) {
        Ok(p) => p,
        Err(e) => return Some(format!("notify hook {program:?} could not start: {e}")),
    };
    let values: Vec<&str> = a.options_json.iter().map(|o| o.value.as_str()).collect();
    let mut event = serde_json::to_value(a.needed_event()).unwrap_or_default();
    if let Some(obj) = event.as_object_mut() {
        obj.insert("command".into(), serde_json::json!(by.argv));
        obj.insert("cwd".into(), serde_json::json!(by.cwd));
        obj.insert("host".into(), serde_json::json!(by.host));
    }
    let json = serde_json::to_vec(&event).unwrap_or_default();
    let command = serde_json::to_string(&by.argv).unwrap_or_default();
    let timeout = cfg
        .timeout
        .map(|l| l.0.unwrap_or(Duration::MAX))
        .unwrap_or(DEFAULT_TIMEOUT);
    let me = match std::env::current_exe() {
        Ok(p) => p,
        Err(e) => return Some(format!("notify hook {program:?} could not start: {e}")),
    };
    let mut cmd = Command::new(me);
    cmd.arg0(WATCHDOG_NAME)
        .arg(timeout.as_millis().min(u128::from(u64::MAX)).to_string())
        .arg(&resolved)
        .args(args)
        .env("HEADLESS_RUN_APPROVAL_ID", &a.approval_id)
        .env("HEADLESS_RUN_APPROVAL_TOOL", &a.tool_name)
        .env("HEADLESS_RUN_APPROVAL_RUN_ID", &a.tool_run_id)
        .env("HEADLESS_RUN_APPROVAL_QUESTION", &a.question)
        .env("HEADLESS_RUN_APPROVAL_OPTIONS", values.join(","))
        .env(
            "HEADLESS_RUN_APPROVAL_DEFAULT",
            a.default_value.as_deref().unwrap_or(""),
        )
        .env(
            "HEADLESS_RUN_APPROVAL_EXPIRES_AT",
            a.expires_at.as_deref().unwrap_or(""),
        )
        .env(
            "HEADLESS_RUN_DECIDE_COMMAND",
            decide_command(&by.monitor, a),
        )
        .env("HEADLESS_RUN_APPROVAL_COMMAND", command)
        .env("HEADLESS_RUN_APPROVAL_CWD", &by.cwd)
        .env("HEADLESS_RUN_APPROVAL_HOST", &by.host)
        .env(
            "HEADLESS_RUN_APPROVAL_EXECUTION_ID",
            a.execution_id.as_deref().unwrap_or(""),
        )
        // The hook is not the tool: it must not pass for a supervised tool's child, nor
        // send events as one (a shim inside a supervised tool inherits its run's token).
        .env_remove("HEADLESS_RUN_TOOL_RUN_ID")
        .env_remove(hr_shared::event::ENV_EVENT_TOKEN)
        .env_remove(hr_shared::event::ENV_EVENT_FD)
        .env_remove(hr_shared::store::url::ENV_TOKEN)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => return Some(format!("notify hook {program:?} could not start: {e}")),
    };
    if let Ok(mut hooks) = WATCHDOGS.lock() {
        hooks.push(child.id() as i32);
    }
    let _ = std::thread::Builder::new()
        .name("notify".into())
        .spawn(move || {
            if let Some(mut stdin) = child.stdin.take() {
                // A hook that does not read its stdin must not block us: the approval is
                // far smaller than a pipe's buffer.
                let _ = stdin.write_all(&json);
            }
            let _ = child.wait();
        });
    None
}

/// The watchdogs of notify hooks this shim started: not the tool's, so never ended with it.
static WATCHDOGS: std::sync::Mutex<Vec<i32>> = std::sync::Mutex::new(Vec::new());

/// The pids of the notify hooks' watchdogs this shim started.
pub fn watchdogs() -> Vec<i32> {
    WATCHDOGS.lock().map(|h| h.clone()).unwrap_or_default()
}

/// The watchdog (`headless-run-notify TIMEOUT_MS PROGRAM ARGS...`): runs the hook with this
/// process's stdin (the approval as JSON) and environment, no output, and kills it once the
/// timeout has passed. Its exit code is the hook's (124 when killed); nobody reads it.
pub fn watchdog(args: &[std::ffi::OsString]) -> u8 {
    let Some((timeout, rest)) = args.split_first() else {
        return 2;
    };
    let Some((program, hook_args)) = rest.split_first() else {
        return 2;
    };
    let Some(timeout) = timeout.to_str().and_then(|t| t.parse::<u64>().ok()) else {
        return 2;
    };
    // Its own session: signals meant for the shim's caller's group are not for the hook.
    // SAFETY: setsid has no memory effects; failure (already a leader) is harmless.
    unsafe { libc::setsid() };
    let Ok(mut child) = Command::new(program)
        .args(hook_args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
    else {
        return 127;
    };
    let deadline = Instant::now().checked_add(Duration::from_millis(timeout));
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return status.code().map_or(1, |c| c as u8),
            Ok(None) => {}
            Err(_) => return 1,
        }
        if deadline.is_some_and(|d| Instant::now() >= d) {
            let _ = child.kill();
            let _ = child.wait();
            return 124;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}
