//! Whether this process runs inside a tool that `headless-run` supervises. A decider there
//! must refuse: otherwise a tool (an agent) could approve its own prompt.

use crate::mode::ENV_TOOL_RUN_ID;
use crate::proc;
use crate::sanitize::sanitize_line;
use crate::tool_path::SHIM_NAME;

/// `Some(why)` when this process runs inside a supervised tool: `HEADLESS_RUN_TOOL_RUN_ID`
/// is in its environment, or a `headless-run` is among its ancestors (by command name, or by
/// the executable a link-named shim runs, also when that binary has been replaced since).
pub fn inside_supervised_tool() -> Option<String> {
    if let Some(id) = std::env::var_os(ENV_TOOL_RUN_ID) {
        return Some(format!(
            "{ENV_TOOL_RUN_ID}={} is set: running inside a supervised tool",
            sanitize_line(&id.to_string_lossy())
        ));
    }
    proc::ancestors(std::process::id() as i32)
        .into_iter()
        .find(|p| p.comm == SHIM_NAME || exe_is_shim(p.pid))
        .map(|p| {
            format!(
                "{SHIM_NAME} is an ancestor process (pid {}): running inside a supervised tool",
                p.pid
            )
        })
}

fn exe_is_shim(pid: i32) -> bool {
    std::fs::read_link(format!("/proc/{pid}/exe"))
        .ok()
        .and_then(|exe| exe.file_name().map(|n| n.to_string_lossy().into_owned()))
        // A binary replaced since it started reads `headless-run (deleted)`.
        .is_some_and(|n| n == SHIM_NAME || n.starts_with(&format!("{SHIM_NAME} (")))
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_test_runner_is_not_supervised() {
        // cargo test does not run under headless-run (unless someone wraps it on purpose).
        if std::env::var_os(super::ENV_TOOL_RUN_ID).is_none() {
            assert_eq!(super::inside_supervised_tool(), None);
        }
    }
}
