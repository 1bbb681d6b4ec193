//! Whether this process runs inside a tool that `headless-run` supervises. A decider there
//! must refuse: otherwise a tool (an agent) could approve its own prompt.

use crate::mode::ENV_TOOL_RUN_ID;
use crate::proc;

/// `Some(why)` when this process runs inside a supervised tool: `HEADLESS_RUN_TOOL_RUN_ID`
/// is in its environment, or a `headless-run` (by executable, so symlink names count too)
/// is among its ancestors.
pub fn inside_supervised_tool() -> Option<String> {
    if let Some(id) = std::env::var_os(ENV_TOOL_RUN_ID) {
        return Some(format!(
            "{ENV_TOOL_RUN_ID} is set ({}): running inside a supervised tool",
            id.to_string_lossy()
        ));
    }
    proc::ancestors(std::process::id() as i32)
        .into_iter()
        .find(|p| p.comm == "headless-run" || exe_name(p.pid).as_deref() == Some("headless-run"))
        .map(|p| {
            format!(
                "process {} (headless-run) is an ancestor: running inside a supervised tool",
                p.pid
            )
        })
}

fn exe_name(pid: i32) -> Option<String> {
    let exe = std::fs::read_link(format!("/proc/{pid}/exe")).ok()?;
    Some(exe.file_name()?.to_string_lossy().into_owned())
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
