//! The notify hook: a command from config (`[notify] command = [...]`, no shell) run for
//! each new approval, given the approval as environment variables and as one JSON object on
//! stdin. Its output is discarded and its failure never touches the run; a hook still
//! running after its timeout is killed (unless the shim has exited first, in exit mode).

use hr_shared::approvals::Approval;
use hr_shared::config::NotifyConfig;
use std::io::Write;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// How long a hook may run by default.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

/// The `monitor decide` command line that approves `a`.
pub fn decide_command(a: &Approval) -> String {
    format!("monitor decide {} approve", a.approval_id)
}

/// Starts the hook for `a` in the background. Returns a warning to print when it could not
/// be started.
pub fn run(cfg: &NotifyConfig, a: &Approval) -> Option<String> {
    let (program, args) = cfg.command.split_first()?;
    let values: Vec<&str> = a.options_json.iter().map(|o| o.value.as_str()).collect();
    let json = serde_json::to_vec(&a.needed_event()).unwrap_or_default();
    let mut cmd = Command::new(program);
    cmd.args(args)
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
        .env("HEADLESS_RUN_DECIDE_COMMAND", decide_command(a))
        // The hook is not the tool: it must not pass for a supervised tool's child.
        .env_remove("HEADLESS_RUN_TOOL_RUN_ID")
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => return Some(format!("notify hook {program:?} could not start: {e}")),
    };
    let timeout = cfg
        .timeout
        .map(|l| l.0.unwrap_or(Duration::MAX))
        .unwrap_or(DEFAULT_TIMEOUT);
    let _ = std::thread::Builder::new()
        .name("notify".into())
        .spawn(move || {
            if let Some(mut stdin) = child.stdin.take() {
                // A hook that does not read its stdin must not block us.
                let _ = stdin.write_all(&json);
            }
            let deadline = Instant::now().checked_add(timeout);
            loop {
                if let Ok(Some(_)) = child.try_wait() {
                    return;
                }
                if deadline.is_some_and(|d| Instant::now() >= d) {
                    let _ = child.kill();
                    let _ = child.wait();
                    return;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        });
    None
}
