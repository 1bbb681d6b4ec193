//! Finding the real tool on `PATH` for the shim, skipping every candidate that is the shim
//! itself (a link to it, or a copy named `headless-run`) and the `HEADLESS_RUN_SHIM_DIR`,
//! so that a shim link never runs itself in a loop.

use std::ffi::{CString, OsStr, OsString};
use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// The file name the shim is installed under.
pub const SHIM_NAME: &str = "headless-run";

/// Why a tool could not be resolved.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FindToolError {
    #[error("{tool}: command not found (searched PATH={searched}{skipped})",
        tool = tool.to_string_lossy(),
        searched = searched.to_string_lossy(),
        skipped = skipped_note(skipped))]
    NotFound {
        tool: OsString,
        searched: OsString,
        skipped: Vec<PathBuf>,
    },
    #[error("{path}: {why}", path = path.display())]
    NotExecutable { path: PathBuf, why: String },
}

impl FindToolError {
    /// One short line for tables and the run's reason (the whole `PATH` stays in the full
    /// message, for stderr and the run's error).
    pub fn short(&self) -> String {
        match self {
            FindToolError::NotFound { tool, .. } => {
                format!("{}: command not found on PATH", tool.to_string_lossy())
            }
            other => other.to_string(),
        }
    }
}

fn skipped_note(skipped: &[PathBuf]) -> String {
    if skipped.is_empty() {
        String::new()
    } else {
        let dirs: Vec<String> = skipped.iter().map(|d| d.display().to_string()).collect();
        format!("; skipped shim dirs: {}", dirs.join(":"))
    }
}

/// The running shim binary, to recognise links to it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShimIdentity {
    dev: u64,
    ino: u64,
}

impl ShimIdentity {
    /// The identity of the running executable.
    pub fn current() -> Option<Self> {
        let meta = fs::metadata(std::env::current_exe().ok()?).ok()?;
        Some(ShimIdentity {
            dev: meta.dev(),
            ino: meta.ino(),
        })
    }

    /// The identity of the file at `path` (following links).
    pub fn of(path: &Path) -> Option<Self> {
        let meta = fs::metadata(path).ok()?;
        Some(ShimIdentity {
            dev: meta.dev(),
            ino: meta.ino(),
        })
    }
}

/// Whether `candidate` is the shim: the same file as `shim`, or a file named like it.
pub fn is_shim(candidate: &Path, meta: &fs::Metadata, shim: Option<&ShimIdentity>) -> bool {
    if shim.is_some_and(|s| s.dev == meta.dev() && s.ino == meta.ino()) {
        return true;
    }
    fs::canonicalize(candidate)
        .ok()
        .and_then(|p| p.file_name().map(|n| n == OsStr::new(SHIM_NAME)))
        .unwrap_or(false)
}

/// Resolves `tool` as a shell would, skipping the shim.
pub fn find_tool(
    tool: &OsStr,
    path_var: Option<&OsStr>,
    shim: Option<&ShimIdentity>,
    skip_dir: Option<&Path>,
) -> Result<PathBuf, FindToolError> {
    if tool.as_bytes().contains(&b'/') {
        let path = PathBuf::from(tool);
        return match fs::metadata(&path) {
            Err(_) => Err(FindToolError::NotFound {
                tool: tool.to_owned(),
                searched: OsString::from("(not searched: the name is a path)"),
                skipped: Vec::new(),
            }),
            Ok(meta) if is_shim(&path, &meta, shim) => Err(FindToolError::NotExecutable {
                path,
                why: "is headless-run itself; give the real tool".into(),
            }),
            Ok(meta) => check_executable(path, &meta),
        };
    }
    if tool.is_empty() {
        return Err(FindToolError::NotFound {
            tool: tool.to_owned(),
            searched: path_var.unwrap_or_default().to_owned(),
            skipped: Vec::new(),
        });
    }
    let searched = path_var.map(OsStr::to_owned).unwrap_or_default();
    let mut skipped = Vec::new();
    let mut not_executable = None;
    for dir in std::env::split_paths(&searched) {
        let dir = if dir.as_os_str().is_empty() {
            PathBuf::from(".")
        } else {
            dir
        };
        if skip_dir.is_some_and(|s| same_dir(s, &dir)) {
            skipped.push(dir);
            continue;
        }
        let candidate = dir.join(tool);
        let Ok(meta) = fs::metadata(&candidate) else {
            continue;
        };
        if is_shim(&candidate, &meta, shim) {
            skipped.push(dir);
            continue;
        }
        match check_executable(candidate, &meta) {
            Ok(found) => return Ok(found),
            Err(e) => {
                not_executable.get_or_insert(e);
            }
        }
    }
    Err(not_executable.unwrap_or(FindToolError::NotFound {
        tool: tool.to_owned(),
        searched,
        skipped,
    }))
}

fn same_dir(a: &Path, b: &Path) -> bool {
    a == b
        || match (fs::metadata(a), fs::metadata(b)) {
            (Ok(x), Ok(y)) => x.dev() == y.dev() && x.ino() == y.ino(),
            _ => false,
        }
}

fn check_executable(path: PathBuf, meta: &fs::Metadata) -> Result<PathBuf, FindToolError> {
    if meta.is_dir() {
        return Err(FindToolError::NotExecutable {
            path,
            why: "is a directory".into(),
        });
    }
    let Ok(c) = CString::new(path.as_os_str().as_bytes()) else {
        return Err(FindToolError::NotExecutable {
            path,
            why: "contains a NUL byte".into(),
        });
    };
    // SAFETY: c is a valid NUL-terminated path.
    if unsafe { libc::access(c.as_ptr(), libc::X_OK) } != 0 || meta.mode() & 0o111 == 0 {
        return Err(FindToolError::NotExecutable {
            path,
            why: "permission denied (not executable)".into(),
        });
    }
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::{PermissionsExt, symlink};

    fn exe(path: &Path) {
        fs::write(path, "#!/bin/sh\n").unwrap();
        fs::set_permissions(path, fs::Permissions::from_mode(0o755)).unwrap();
    }

    #[test]
    fn skips_links_to_the_shim() {
        let tmp = tempfile::tempdir().unwrap();
        let shim = tmp.path().join("bin/headless-run");
        fs::create_dir_all(shim.parent().unwrap()).unwrap();
        exe(&shim);
        let links = tmp.path().join("links");
        fs::create_dir(&links).unwrap();
        symlink(&shim, links.join("mytool")).unwrap();
        let real = tmp.path().join("real");
        fs::create_dir(&real).unwrap();
        exe(&real.join("mytool"));
        let path = std::env::join_paths([&links, &real]).unwrap();
        let id = ShimIdentity::of(&shim);
        let found = find_tool(OsStr::new("mytool"), Some(&path), id.as_ref(), None).unwrap();
        assert_eq!(found, real.join("mytool"));
    }

    #[test]
    fn only_the_shim_means_not_found() {
        let tmp = tempfile::tempdir().unwrap();
        let shim = tmp.path().join("headless-run");
        exe(&shim);
        let links = tmp.path().join("links");
        fs::create_dir(&links).unwrap();
        symlink(&shim, links.join("mytool")).unwrap();
        let err = find_tool(OsStr::new("mytool"), Some(links.as_os_str()), None, None).unwrap_err();
        let msg = err.to_string();
        assert!(matches!(err, FindToolError::NotFound { .. }));
        assert!(msg.contains("mytool: command not found"), "{msg}");
        assert!(msg.contains("skipped shim dirs"), "{msg}");
    }

    #[test]
    fn shim_dir_is_skipped() {
        let tmp = tempfile::tempdir().unwrap();
        let a = tmp.path().join("a");
        let b = tmp.path().join("b");
        fs::create_dir(&a).unwrap();
        fs::create_dir(&b).unwrap();
        exe(&a.join("t"));
        exe(&b.join("t"));
        let path = std::env::join_paths([&a, &b]).unwrap();
        let found = find_tool(OsStr::new("t"), Some(&path), None, Some(&a)).unwrap();
        assert_eq!(found, b.join("t"));
    }

    #[test]
    fn not_executable_and_explicit_paths() {
        let tmp = tempfile::tempdir().unwrap();
        let f = tmp.path().join("plain");
        fs::write(&f, "data").unwrap();
        let err = find_tool(
            OsStr::new("plain"),
            Some(tmp.path().as_os_str()),
            None,
            None,
        )
        .unwrap_err();
        assert!(matches!(err, FindToolError::NotExecutable { .. }), "{err}");
        let err = find_tool(f.as_os_str(), None, None, None).unwrap_err();
        assert!(matches!(err, FindToolError::NotExecutable { .. }), "{err}");
        let err = find_tool(tmp.path().as_os_str(), None, None, None).unwrap_err();
        assert!(err.to_string().contains("is a directory"), "{err}");
        let err = find_tool(OsStr::new("./nope"), None, None, None).unwrap_err();
        assert!(matches!(err, FindToolError::NotFound { .. }));
        let err = find_tool(
            OsStr::new("surely-not-a-tool"),
            Some(OsStr::new("/nonexistent")),
            None,
            None,
        )
        .unwrap_err();
        assert!(err.to_string().contains("PATH=/nonexistent"), "{err}");
    }
}
