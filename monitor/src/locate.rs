//! Finding the `headless-run` binary that links and resumes should run: the one installed
//! beside this `monitor` (they are built and installed together), else the first on PATH.

use hr_shared::tool_path::SHIM_NAME;
use std::ffi::OsStr;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// Why no `headless-run` was found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NoShim {
    pub searched: Vec<PathBuf>,
}

impl std::fmt::Display for NoShim {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let dirs: Vec<String> = self
            .searched
            .iter()
            .map(|d| d.display().to_string())
            .collect();
        write!(
            f,
            "cannot find the {SHIM_NAME} binary (looked beside monitor and on PATH: {}); install it with scripts/install",
            dirs.join(":")
        )
    }
}

/// The `headless-run` to use, as an absolute path.
pub fn shim_binary() -> Result<PathBuf, NoShim> {
    let beside = std::env::current_exe()
        .ok()
        .and_then(|exe| std::fs::canonicalize(exe).ok())
        .and_then(|exe| exe.parent().map(Path::to_path_buf));
    find(beside.as_deref(), std::env::var_os("PATH").as_deref())
}

fn find(beside: Option<&Path>, path_var: Option<&OsStr>) -> Result<PathBuf, NoShim> {
    let mut searched = Vec::new();
    let dirs = beside
        .map(Path::to_path_buf)
        .into_iter()
        .chain(path_var.map(std::env::split_paths).into_iter().flatten());
    for dir in dirs {
        if dir.as_os_str().is_empty() {
            continue;
        }
        let candidate = dir.join(SHIM_NAME);
        if is_executable_file(&candidate) {
            return Ok(std::path::absolute(&candidate).unwrap_or(candidate));
        }
        searched.push(dir);
    }
    Err(NoShim { searched })
}

fn is_executable_file(p: &Path) -> bool {
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn beside_wins_then_path() {
        let tmp = std::env::temp_dir().join(format!("hr-locate-{}", std::process::id()));
        let a = tmp.join("a");
        let b = tmp.join("b");
        std::fs::create_dir_all(&a).unwrap();
        std::fs::create_dir_all(&b).unwrap();
        let exe = b.join(SHIM_NAME);
        std::fs::write(&exe, "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755)).unwrap();
        let path = std::env::join_paths([&a, &b]).unwrap();
        assert_eq!(find(Some(&a), Some(&path)).unwrap(), exe);
        let err = find(Some(&a), Some(a.as_os_str())).unwrap_err();
        assert!(err.to_string().contains("cannot find"), "{err}");
        std::fs::remove_dir_all(&tmp).unwrap();
    }
}
