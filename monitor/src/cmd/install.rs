//! `monitor install TOOL...`: links named after tools that run them through
//! `headless-run` (busybox style); `--list` and `--remove`.

use crate::error::{CliError, CliResult};
use crate::locate;
use hr_shared::exit::monitor as code;
use hr_shared::paths;
use hr_shared::sanitize::sanitize_line;
use hr_shared::tool_path::{self, SHIM_NAME, ShimIdentity};
use std::ffi::OsStr;
use std::fs;
use std::io;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};

const AFTER_HELP: &str = "\
Each link DIR/TOOL points at the headless-run binary (the one beside monitor, else the
first on PATH). With DIR on PATH before the real tools, a plain `TOOL ARGS` runs through
headless-run, which finds the real tool further down PATH (it skips directories of links
to itself).

A name that is not a tool on PATH is refused unless --force. An existing file that is not
a link to headless-run is never replaced (exit 3); our own links are replaced. The last
line printed is the PATH line to add to your shell profile.

Exit codes: 0 ok, 1 error, 2 usage, 3 a file in the way, 4 no such tool on PATH (or, with
--remove, no such link).

Examples:
  monitor install terraform apt-get pip    # then put the printed PATH line in your profile
  monitor install --list
  monitor install --remove pip";

#[derive(Debug, clap::Args)]
#[command(after_help = AFTER_HELP)]
pub struct Args {
    /// Tools to link (or, with --remove, to unlink)
    #[arg(value_name = "TOOL")]
    tools: Vec<String>,
    /// Where the links go (default: HEADLESS_RUN_SHIM_DIR, else
    /// $XDG_DATA_HOME/headless-run/bin, i.e. ~/.local/share/headless-run/bin)
    #[arg(long, value_name = "DIR")]
    dir: Option<PathBuf>,
    /// Link a name even if no such tool is on PATH (yet)
    #[arg(long)]
    force: bool,
    /// List the links and what each resolves to
    #[arg(long, conflicts_with_all = ["remove", "force"])]
    list: bool,
    /// Remove these links (only links to headless-run are removed)
    #[arg(long, conflicts_with = "force")]
    remove: bool,
    /// With --list: one JSON object (schema, dir, links: name, kind, real tool)
    #[arg(long, requires = "list")]
    json: bool,
}

/// The shim directory: `--dir`, else `HEADLESS_RUN_SHIM_DIR`, else the default.
pub fn shim_dir(flag: Option<&Path>) -> CliResult<PathBuf> {
    let env = std::env::var_os("HEADLESS_RUN_SHIM_DIR")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from);
    match flag.map(Path::to_path_buf).or(env) {
        Some(d) => {
            std::path::absolute(&d).map_err(|e| CliError::error(format!("{}: {e}", d.display())))
        }
        None => {
            paths::default_shim_dir(&paths::real_env).map_err(|e| CliError::error(e.to_string()))
        }
    }
}

/// What a directory entry is, to us.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Entry {
    /// A link to headless-run.
    Ours,
    /// A link to headless-run whose target is gone.
    Dangling(PathBuf),
    /// Anything else.
    Foreign,
}

/// Whether `path` is one of our links.
pub fn classify(path: &Path) -> Option<Entry> {
    let meta = fs::symlink_metadata(path).ok()?;
    if !meta.file_type().is_symlink() {
        return Some(Entry::Foreign);
    }
    let target = fs::read_link(path).ok()?;
    match fs::canonicalize(path) {
        Ok(real) if real.file_name() == Some(OsStr::new(SHIM_NAME)) => Some(Entry::Ours),
        Ok(real) => {
            // A link to a copy of the binary under another name still counts as ours when
            // it is the very file we would link to.
            let same = locate::shim_binary()
                .ok()
                .and_then(|s| ShimIdentity::of(&s))
                .zip(ShimIdentity::of(&real))
                .is_some_and(|(a, b)| a == b);
            Some(if same { Entry::Ours } else { Entry::Foreign })
        }
        Err(_) if target.file_name() == Some(OsStr::new(SHIM_NAME)) => {
            Some(Entry::Dangling(target))
        }
        Err(_) => Some(Entry::Foreign),
    }
}

/// The links in `dir`, sorted by name.
pub fn links(dir: &Path) -> io::Result<Vec<(String, Entry)>> {
    let mut out = Vec::new();
    for entry in fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with('.') {
            continue;
        }
        if let Some(kind) = classify(&entry.path()) {
            out.push((name, kind));
        }
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(out)
}

/// Where `tool` resolves past every shim directory (and `dir`) on PATH.
pub fn real_tool(tool: &str, dir: &Path) -> Result<PathBuf, tool_path::FindToolError> {
    let shim = locate::shim_binary()
        .ok()
        .and_then(|s| ShimIdentity::of(&s));
    tool_path::find_tool(
        OsStr::new(tool),
        std::env::var_os("PATH").as_deref(),
        shim.as_ref(),
        Some(dir),
    )
}

pub fn run(args: Args) -> CliResult {
    let dir = shim_dir(args.dir.as_deref())?;
    if args.list {
        if !args.tools.is_empty() {
            return Err(CliError::usage("--list takes no tool names"));
        }
        return if args.json {
            list_json(&dir)
        } else {
            list(&dir)
        };
    }
    if args.tools.is_empty() {
        return Err(CliError::usage(
            "name at least one tool (e.g. `monitor install terraform apt-get`), or --list",
        ));
    }
    for t in &args.tools {
        check_name(t)?;
    }
    if args.remove {
        return remove(&dir, &args.tools);
    }
    install(&dir, &args.tools, args.force)
}

fn check_name(tool: &str) -> CliResult {
    if tool.is_empty()
        || tool.contains('/')
        || tool == "."
        || tool == ".."
        || tool.starts_with('.')
        || tool.chars().any(char::is_control)
    {
        return Err(CliError::usage(format!(
            "`{}` is not a tool name (a plain command name, no slashes)",
            sanitize_line(tool)
        )));
    }
    if tool == SHIM_NAME || tool == "monitor" {
        return Err(CliError::usage(format!(
            "`{tool}` cannot be shimmed (it is part of headless-run itself)"
        )));
    }
    Ok(())
}

fn install(dir: &Path, tools: &[String], force: bool) -> CliResult {
    let shim = locate::shim_binary().map_err(|e| CliError::error(e.to_string()))?;
    let shim = fs::canonicalize(&shim).unwrap_or(shim);
    fs::create_dir_all(dir).map_err(|e| {
        CliError::error(format!("cannot create the shim dir {}: {e}", dir.display()))
    })?;
    let mut failed: Option<u8> = None;
    let mut fail = |code: u8, msg: String| {
        eprintln!("monitor: {msg}");
        failed.get_or_insert(code);
    };
    for tool in tools {
        let real = real_tool(tool, dir);
        if let Err(e) = &real
            && !force
        {
            let code = match e {
                tool_path::FindToolError::NotFound { .. } => code::NOT_FOUND,
                tool_path::FindToolError::NotExecutable { .. } => code::ERROR,
            };
            fail(
                code,
                format!(
                    "not linking {tool}: {}; --force links it anyway",
                    sanitize_line(&e.to_string())
                ),
            );
            continue;
        }
        let link = dir.join(tool);
        let what = match classify(&link) {
            None => symlink(&shim, &link).map(|()| "linked"),
            Some(Entry::Ours) if fs::read_link(&link).is_ok_and(|t| t == shim) => {
                Ok("already linked")
            }
            Some(Entry::Ours) | Some(Entry::Dangling(_)) => {
                replace_link(&shim, &link).map(|()| "relinked")
            }
            Some(Entry::Foreign) => {
                fail(
                    code::CONFLICT,
                    format!(
                        "not linking {tool}: {} exists and is not a link to {SHIM_NAME}; remove it yourself if it should go",
                        link.display()
                    ),
                );
                continue;
            }
        };
        match what {
            Ok(what) => crate::outln!(
                "{what} {} → {} (real {tool}: {})",
                link.display(),
                shim.display(),
                real.map(|p| p.display().to_string())
                    .unwrap_or_else(|_| "not on PATH yet".into())
            ),
            Err(e) => fail(code::ERROR, format!("cannot link {}: {e}", link.display())),
        }
    }
    print_path_line(dir, tools);
    match failed {
        Some(c) => Err(CliError::silent(c)),
        None => Ok(()),
    }
}

/// Replaces a link atomically: a new link beside it, renamed over it.
fn replace_link(target: &Path, link: &Path) -> io::Result<()> {
    let name = link
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = link.with_file_name(format!(".{name}.{}.tmp", std::process::id()));
    let _ = fs::remove_file(&tmp);
    symlink(target, &tmp)?;
    fs::rename(&tmp, link).inspect_err(|_| {
        let _ = fs::remove_file(&tmp);
    })
}

/// Where `dir` stands on PATH: `Ok(())` when it is there before every real tool of `tools`,
/// else why not.
pub fn path_order(dir: &Path, tools: &[String]) -> Result<(), String> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let entries: Vec<PathBuf> = std::env::split_paths(&path).collect();
    let same = |p: &Path| {
        p == dir
            || fs::canonicalize(p)
                .ok()
                .zip(fs::canonicalize(dir).ok())
                .is_some_and(|(a, b)| a == b)
    };
    let Some(pos) = entries.iter().position(|p| same(p)) else {
        return Err(format!("{} is not on PATH", dir.display()));
    };
    let mut late = Vec::new();
    for tool in tools {
        if let Ok(real) = real_tool(tool, dir)
            && let Some(real_dir) = real.parent()
            && let Some(rpos) = entries.iter().position(|p| p == real_dir)
            && rpos < pos
        {
            late.push(format!("{tool} ({})", real.display()));
        }
    }
    if late.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "{} is on PATH after the real {}",
            dir.display(),
            late.join(", ")
        ))
    }
}

fn shell_quote_dir(dir: &Path) -> String {
    let s = dir.to_string_lossy();
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if matches!(c, '"' | '$' | '`' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

fn print_path_line(dir: &Path, tools: &[String]) {
    match path_order(dir, tools) {
        Ok(()) => crate::outln!("{} is on PATH before the real tools already", dir.display()),
        Err(why) => {
            crate::outln!("{why}; add this line to your shell profile:");
            crate::outln!("export PATH=\"{}:$PATH\"", shell_quote_dir(dir));
        }
    }
}

/// `--list --json`: the links as data: each name, whether it is ours, broken or another
/// file, and the real tool it resolves to.
fn list_json(dir: &Path) -> CliResult {
    let entries = match links(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == io::ErrorKind::NotFound => Vec::new(),
        Err(e) => return Err(CliError::error(format!("{}: {e}", dir.display()))),
    };
    let links: Vec<serde_json::Value> = entries
        .iter()
        .map(|(name, kind)| match kind {
            Entry::Ours => serde_json::json!({
                "name": name,
                "kind": "shim",
                "real": real_tool(name, dir).ok().map(|p| p.display().to_string()),
            }),
            Entry::Dangling(t) => serde_json::json!({
                "name": name,
                "kind": "broken",
                "target": t.display().to_string(),
            }),
            Entry::Foreign => serde_json::json!({ "name": name, "kind": "other" }),
        })
        .collect();
    crate::output::print_report(serde_json::json!({
        "dir": dir.display().to_string(),
        "links": links,
    }))
}

fn list(dir: &Path) -> CliResult {
    let entries = match links(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            crate::outln!(
                "no shim dir at {} (`monitor install TOOL` creates it)",
                dir.display()
            );
            return Ok(());
        }
        Err(e) => return Err(CliError::error(format!("{}: {e}", dir.display()))),
    };
    if entries.is_empty() {
        crate::outln!("no links in {}", dir.display());
        return Ok(());
    }
    crate::outln!("{}:", dir.display());
    for (name, kind) in &entries {
        let shown = sanitize_line(name);
        match kind {
            Entry::Ours => match real_tool(name, dir) {
                Ok(real) => crate::outln!("  {shown:<16} → {}", real.display()),
                Err(e) => crate::outln!(
                    "  {shown:<16} → (no real tool: {})",
                    sanitize_line(&e.to_string())
                ),
            },
            Entry::Dangling(t) => crate::outln!(
                "  {shown:<16} → broken link to {} (reinstall: monitor install {shown})",
                t.display()
            ),
            Entry::Foreign => {
                crate::outln!("  {shown:<16}   (not a link to {SHIM_NAME}; left alone)")
            }
        }
    }
    let ours: Vec<String> = entries
        .iter()
        .filter(|(_, k)| *k == Entry::Ours)
        .map(|(n, _)| n.clone())
        .collect();
    if let Err(why) = path_order(dir, &ours) {
        crate::outln!(
            "note: {why}: export PATH=\"{}:$PATH\"",
            shell_quote_dir(dir)
        );
    }
    Ok(())
}

fn remove(dir: &Path, tools: &[String]) -> CliResult {
    let mut failed: Option<u8> = None;
    for tool in tools {
        let link = dir.join(tool);
        let res = match classify(&link) {
            None => Err((code::NOT_FOUND, format!("no link {}", link.display()))),
            Some(Entry::Foreign) => Err((
                code::CONFLICT,
                format!(
                    "{} is not a link to {SHIM_NAME}; not removing it",
                    link.display()
                ),
            )),
            Some(_) => fs::remove_file(&link).map_err(|e| {
                (
                    code::ERROR,
                    format!("cannot remove {}: {e}", link.display()),
                )
            }),
        };
        match res {
            Ok(()) => crate::outln!("removed {}", link.display()),
            Err((c, msg)) => {
                eprintln!("monitor: {msg}");
                failed.get_or_insert(c);
            }
        }
    }
    match failed {
        Some(c) => Err(CliError::silent(c)),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_checked() {
        assert!(check_name("terraform").is_ok());
        assert!(check_name("apt-get").is_ok());
        for bad in [
            "",
            "a/b",
            "..",
            ".hidden",
            "headless-run",
            "monitor",
            "x\ny",
        ] {
            assert_eq!(check_name(bad).unwrap_err().code, 2, "{bad:?}");
        }
    }

    #[test]
    fn path_lines_are_quoted() {
        assert_eq!(shell_quote_dir(Path::new("/a b/$x\"")), "/a b/\\$x\\\"");
    }
}
