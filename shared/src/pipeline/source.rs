//! Reading a pipeline file and its subgraphs without trusting what the names point at: a
//! regular file only (a FIFO or a device would block or never end), of bounded size, a
//! subgraph only beneath the directory of the file that names it, and a YAML error that
//! says where and what kind of thing is wrong but never quotes the file.
//!
//! Why so careful for a file the user chose: a pipeline file may come from a repository
//! (a CI job runs `monitor pipeline check` on it), and its `subgraph:` could name
//! `/etc/shadow`, `~/.ssh/id_ed25519` or `/dev/stdin`; the runner can read them, the
//! author could not, and the error would land in a log the author can read.

use std::ffi::CString;
use std::fs::File;
use std::io::Read;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Component, Path, PathBuf};

/// The largest pipeline file read.
pub const MAX_FILE: u64 = 1024 * 1024;

/// The file the user named (a symbolic link to it is followed: it is their argument): a
/// regular file, read whole up to [`MAX_FILE`].
pub fn read_named(file: &Path) -> Result<String, String> {
    let meta = std::fs::metadata(file).map_err(|e| format!("cannot read it: {e}"))?;
    if !meta.is_file() {
        return Err(not_regular(&meta));
    }
    // O_NONBLOCK: should it have become a FIFO since the look, opening does not wait for a
    // writer; the open file is looked at again below.
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(file)
        .map_err(|e| format!("cannot read it: {e}"))?;
    read_regular(f)
}

/// Where a subgraph's file is, and its text.
pub struct Included {
    /// The file as named (the including file's directory joined with the `file:` field),
    /// for messages and for the subgraph's own subgraphs.
    pub path: PathBuf,
    /// Its canonical path: what a cycle of includes is found by.
    pub canonical: PathBuf,
    pub text: String,
}

/// Subgraph `sub` of the file `includer`: a relative path that resolves (links followed)
/// to a regular file in the includer's directory or below it, opened one component at a
/// time without following a link, so that what was checked is what is read.
pub fn read_beneath(includer: &Path, sub: &str) -> Result<Included, String> {
    const RULE: &str = "a subgraph is a file in the directory of the file that names it, or below it (a relative path; no `..`, absolute path or symbolic link out of it)";
    if sub.is_empty() || sub.contains('\0') {
        return Err("an empty file name (or one with a NUL byte)".into());
    }
    let sub_path = Path::new(sub);
    if sub_path.is_absolute() {
        return Err(format!("an absolute path: {RULE}"));
    }
    // Refused as written, before anything is looked up outside: whether a file exists
    // there is none of the pipeline's business.
    let mut depth = 0usize;
    for c in sub_path.components() {
        match c {
            Component::Normal(_) => depth += 1,
            Component::ParentDir if depth == 0 => {
                return Err(format!("`..` leads out of its directory: {RULE}"));
            }
            Component::ParentDir => depth -= 1,
            _ => {}
        }
    }
    let dir = includer.parent().unwrap_or(Path::new(""));
    let path = dir.join(sub_path);
    let here = if dir.as_os_str().is_empty() {
        Path::new(".")
    } else {
        dir
    };
    let base = std::fs::canonicalize(here)
        .map_err(|e| format!("its directory {}: {e}", here.display()))?;
    let canonical = std::fs::canonicalize(&path).map_err(|e| format!("cannot find it: {e}"))?;
    let rel = match canonical.strip_prefix(&base) {
        Ok(r) if !r.as_os_str().is_empty() => r.to_path_buf(),
        _ => {
            return Err(format!(
                "it resolves to {}, outside {}: {RULE}",
                canonical.display(),
                base.display()
            ));
        }
    };
    let f = open_beneath(&base, &rel)?;
    let text = read_regular(f)?;
    Ok(Included {
        path,
        canonical,
        text,
    })
}

/// Opens `rel` (plain components) beneath directory `base`: each directory with
/// `O_NOFOLLOW`, the last only if `lstat` says it is a regular file, then with
/// `O_NOFOLLOW | O_NONBLOCK`. A component that became a link since `base` and `rel` were
/// resolved is refused rather than followed out.
fn open_beneath(base: &Path, rel: &Path) -> Result<File, String> {
    let c = |p: &std::ffi::OsStr| {
        CString::new(p.as_bytes()).map_err(|_| "a file name with a NUL byte".to_owned())
    };
    let open_at = |dirfd: libc::c_int, name: &CString, flags: libc::c_int| {
        // SAFETY: `name` is a NUL-terminated string that outlives the call; the result is
        // checked before it is owned.
        let fd = unsafe { libc::openat(dirfd, name.as_ptr(), flags | libc::O_CLOEXEC) };
        if fd < 0 {
            Err(std::io::Error::last_os_error())
        } else {
            // SAFETY: a descriptor just opened, owned by nothing else.
            Ok(unsafe { OwnedFd::from_raw_fd(fd) })
        }
    };
    let refused = |e: std::io::Error| {
        if e.raw_os_error() == Some(libc::ELOOP) || e.raw_os_error() == Some(libc::ENOTDIR) {
            "a component changed (into a symbolic link?) while it was opened: refused".to_owned()
        } else {
            format!("cannot open it: {e}")
        }
    };
    let mut dir: OwnedFd = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW)
        .open(base)
        .map_err(refused)?
        .into();
    let parts: Vec<&std::ffi::OsStr> = rel
        .components()
        .map(|p| match p {
            Component::Normal(n) => Ok(n),
            _ => Err("not a plain path beneath its directory".to_owned()),
        })
        .collect::<Result<_, _>>()?;
    let Some((last, dirs)) = parts.split_last() else {
        return Err("not a file".into());
    };
    for d in dirs {
        dir = open_at(
            dir.as_raw_fd(),
            &c(d)?,
            libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW,
        )
        .map_err(refused)?;
    }
    let name = c(last)?;
    // Looked at before it is opened: opening a device can do something by itself.
    // SAFETY: a zeroed `stat` is a valid out-parameter; `name` outlives the call.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    if unsafe {
        libc::fstatat(
            dir.as_raw_fd(),
            name.as_ptr(),
            &mut st,
            libc::AT_SYMLINK_NOFOLLOW,
        )
    } != 0
    {
        return Err(format!(
            "cannot look at it: {}",
            std::io::Error::last_os_error()
        ));
    }
    if st.st_mode & libc::S_IFMT != libc::S_IFREG {
        return Err(match st.st_mode & libc::S_IFMT {
            libc::S_IFIFO => "a FIFO, not a regular file".to_owned(),
            libc::S_IFDIR => "a directory, not a regular file".to_owned(),
            libc::S_IFLNK => {
                "it changed into a symbolic link while it was opened: refused".to_owned()
            }
            _ => "not a regular file (a device or socket?)".to_owned(),
        });
    }
    let fd = open_at(
        dir.as_raw_fd(),
        &name,
        libc::O_RDONLY | libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY,
    )
    .map_err(refused)?;
    Ok(File::from(fd))
}

/// An open file's text, if it is a regular file (looked at on the open file, so that a
/// swap after a check by name is seen) of at most [`MAX_FILE`].
fn read_regular(f: File) -> Result<String, String> {
    let meta = f.metadata().map_err(|e| format!("cannot read it: {e}"))?;
    if !meta.is_file() {
        return Err(not_regular(&meta));
    }
    if meta.len() > MAX_FILE {
        return Err("larger than 1 MB".into());
    }
    let mut text = String::new();
    f.take(MAX_FILE + 1)
        .read_to_string(&mut text)
        .map_err(|e| format!("cannot read it: {e}"))?;
    if text.len() as u64 > MAX_FILE {
        return Err("larger than 1 MB".into());
    }
    Ok(text)
}

fn not_regular(meta: &std::fs::Metadata) -> String {
    use std::os::unix::fs::FileTypeExt;
    let t = meta.file_type();
    let what = if t.is_fifo() {
        "a FIFO"
    } else if t.is_dir() {
        "a directory"
    } else if t.is_char_device() || t.is_block_device() {
        "a device"
    } else if t.is_socket() {
        "a socket"
    } else {
        "not a file"
    };
    format!("{what}, not a regular file (a pipeline file is read whole before anything runs)")
}

/// What kind of thing serde_yaml_ng found wrong, in words of our own.
const YAML_KINDS: &[(&str, &str)] = &[
    ("unknown field", "a field a pipeline file does not have"),
    (
        "unknown variant",
        "a value that is not one of those allowed there (a kind, an operator)",
    ),
    ("missing field", "a required field is missing"),
    ("duplicate field", "a field given twice"),
    ("invalid type", "a value of the wrong type"),
    ("invalid value", "a value that is not allowed there"),
    ("invalid length", "a list of the wrong length"),
    ("did not match any variant", "a value of the wrong shape"),
];

/// A YAML error's message without the file's content. serde_yaml_ng quotes the offending
/// key or value (`invalid type: string "root:$6$…"`, `unknown field \`password\``) and
/// prefixes a path that holds map keys (`vars.SECRET: …`). With `names` false (a
/// subgraph) the message is only the kind of error, from a fixed list; with `names` true
/// (the file the user named) a quoted word is kept when it is a name (letters, digits,
/// `_`, `.`, `-`, at most 64: `teleport`, `edgez`), which is what one needs to fix a typo,
/// and every other quote — a value, a line — is left out.
pub fn yaml_reason(e: &serde_yaml_ng::Error, names: bool) -> String {
    let full = e.to_string();
    // The location is shown by the error itself.
    let msg = e
        .location()
        .and_then(|l| full.strip_suffix(&format!(" at line {} column {}", l.line(), l.column())))
        .unwrap_or(&full);
    let kind = YAML_KINDS
        .iter()
        .filter_map(|(phrase, words)| msg.find(phrase).map(|i| (i, *words)))
        .min_by_key(|(i, _)| *i);
    if !names {
        let words = kind.map_or("not valid YAML", |(_, w)| w);
        return format!("not a pipeline file: {words} (its content is not shown)");
    }
    let (path, rest) = match kind {
        Some((i, _)) => msg.split_at(i),
        None => ("", msg),
    };
    let path = path
        .strip_suffix(": ")
        .filter(|p| {
            p.len() <= 128
                && p.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"_.-[]".contains(&b))
        })
        .map(|p| format!("{p}: "))
        .unwrap_or_default();
    crate::sanitize::sanitize_line(&format!("{path}{}", keep_names(rest)))
}

/// A name as it may be quoted back: letters, digits, `_`, `.`, `-`, at most 64.
fn is_name(s: &str) -> bool {
    (1..=64).contains(&s.len())
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
}

/// `msg` with every `…` quote that is not a name, and every "…" quote, left out.
fn keep_names(msg: &str) -> String {
    let mut out = String::with_capacity(msg.len());
    let mut rest = msg;
    while let Some(i) = rest.find(['`', '"']) {
        out.push_str(&rest[..i]);
        let quote = &rest[i..i + 1];
        let after = &rest[i + 1..];
        let end = if quote == "`" {
            after.find('`')
        } else {
            // A Debug-escaped string: `\"` and `\\` do not end it.
            let mut escaped = false;
            after.char_indices().find_map(|(j, ch)| {
                if escaped {
                    escaped = false;
                    None
                } else if ch == '\\' {
                    escaped = true;
                    None
                } else {
                    (ch == '"').then_some(j)
                }
            })
        };
        let Some(end) = end else {
            // An unclosed quote: what follows may all be content.
            out.push_str(quote);
            out.push('…');
            return out;
        };
        let inner = &after[..end];
        out.push_str(quote);
        out.push_str(if quote == "`" && is_name(inner) {
            inner
        } else {
            "…"
        });
        out.push_str(quote);
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_link_that_appears_after_the_path_was_resolved_is_not_followed() {
        // `open_beneath` is given a path already resolved; a component that is a link by
        // the time it opens (swapped in since) is refused, in the middle or at the end.
        let top = tempfile::tempdir().unwrap();
        let base = top.path().join("p");
        std::fs::create_dir_all(base.join("real")).unwrap();
        std::fs::write(base.join("real/sub.yaml"), "x").unwrap();
        std::fs::write(top.path().join("secret"), "x").unwrap();
        let base = std::fs::canonicalize(&base).unwrap();
        assert!(open_beneath(&base, Path::new("real/sub.yaml")).is_ok());
        std::os::unix::fs::symlink(top.path(), base.join("swapped")).unwrap();
        let e = open_beneath(&base, Path::new("swapped/secret")).unwrap_err();
        assert!(e.contains("symbolic link"), "{e}");
        std::os::unix::fs::symlink(top.path().join("secret"), base.join("last.yaml")).unwrap();
        let e = open_beneath(&base, Path::new("last.yaml")).unwrap_err();
        assert!(e.contains("symbolic link"), "{e}");
        assert!(open_beneath(&base, Path::new("../secret")).is_err());
    }

    #[test]
    fn only_names_are_quoted_back() {
        assert_eq!(
            keep_names("unknown field `edgez`, expected one of `name`"),
            "unknown field `edgez`, expected one of `name`"
        );
        assert_eq!(
            keep_names("invalid type: string \"a \\\"b\\\" `c` \\\\\", expected x"),
            "invalid type: string \"…\", expected x"
        );
        assert_eq!(
            keep_names("unknown field `root:$6$x`, expected `a`"),
            "unknown field `…`, expected `a`"
        );
        assert_eq!(keep_names("unclosed `secret line"), "unclosed `…");
        assert_eq!(keep_names("unclosed \"secret line"), "unclosed \"…");
        assert_eq!(keep_names(&format!("`{}`", "a".repeat(65))), "`…`");
    }
}
