//! `monitor doctor`: checks the set-up and names every problem. Read-only: the database is
//! opened read-only, nothing is created or migrated.

use crate::cli::Ctx;
use crate::cmd::install::{self, Entry};
use crate::error::{CliError, CliResult};
use crate::locate;
use hr_shared::sanitize::sanitize_line;
use hr_shared::store;
use hr_shared::{config, paths};
use std::fs;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const AFTER_HELP: &str = "\
Checks, one line each (ok / FAIL / info):
  * the state dir is 0700 and every file in it 0600 (each one that is not is named);
  * the database opens, its schema version is the one this build writes, it is in WAL mode;
  * the configuration files parse;
  * headless-run is found (beside monitor or on PATH);
  * the shim dir (--dir, else HEADLESS_RUN_SHIM_DIR, else ~/.local/share/headless-run/bin)
    is on PATH, before the real tools, and what each shimmed tool resolves to;
  * /proc/PID/syscall of a child process is readable (prompt detection needs it; without
    it the shim falls back to slower heuristics);
  * the audit chain (the events table) is intact: no row edited or deleted.
With --server (or HEADLESS_RUN_SERVER), the database checks are replaced by one: the
server answers and takes the token.
Exit 1 when any check fails.

Examples:
  monitor doctor
  monitor doctor --dir ~/.local/share/headless-run/bin";

#[derive(Debug, clap::Args)]
#[command(after_help = AFTER_HELP)]
pub struct Args {
    /// The shim dir to check (default: the one `monitor install` uses: HEADLESS_RUN_SHIM_DIR,
    /// else ~/.local/share/headless-run/bin)
    #[arg(long, value_name = "DIR")]
    dir: Option<PathBuf>,
    /// Print one JSON object: schema, problems, checks (level ok|info|fail, text)
    #[arg(long)]
    json: bool,
}

struct Report {
    problems: usize,
    /// With --json: the checks, kept to print as one object at the end.
    checks: Option<Vec<(&'static str, String)>>,
}

impl Report {
    fn line(&mut self, level: &'static str, what: &str) {
        match &mut self.checks {
            Some(checks) => checks.push((level, what.to_owned())),
            None => {
                let shown = if level == "fail" { "FAIL" } else { level };
                crate::outln!("{shown:<5} {what}");
            }
        }
    }
    fn ok(&mut self, what: impl AsRef<str>) {
        self.line("ok", what.as_ref());
    }
    fn info(&mut self, what: impl AsRef<str>) {
        self.line("info", what.as_ref());
    }
    fn fail(&mut self, what: impl AsRef<str>) {
        self.problems += 1;
        self.line("fail", what.as_ref());
    }
}

pub fn run(ctx: &Ctx, args: Args) -> CliResult {
    let mut r = Report {
        problems: 0,
        checks: args.json.then(Vec::new),
    };
    check_permissions(ctx, &mut r);
    check_database(ctx, &mut r);
    check_config(&mut r);
    check_shims(args.dir.as_deref(), &mut r)?;
    check_proc(&mut r);
    if let Some(checks) = &r.checks {
        let checks: Vec<serde_json::Value> = checks
            .iter()
            .map(|(level, text)| serde_json::json!({ "level": level, "text": text }))
            .collect();
        crate::output::print_report(serde_json::json!({
            "problems": r.problems,
            "checks": checks,
        }))?;
        return if r.problems > 0 {
            Err(CliError::silent(hr_shared::exit::monitor::ERROR))
        } else {
            Ok(())
        };
    }
    if r.problems > 0 {
        return Err(CliError::error(format!(
            "{} problem{} found",
            r.problems,
            if r.problems == 1 { "" } else { "s" }
        )));
    }
    crate::outln!("all checks passed");
    Ok(())
}

fn mode_of(p: &Path) -> Option<u32> {
    fs::symlink_metadata(p)
        .ok()
        .map(|m| m.permissions().mode() & 0o777)
}

fn check_permissions(ctx: &Ctx, r: &mut Report) {
    let root = &ctx.paths.root;
    match mode_of(root) {
        None => {
            // A fresh install: not a problem, just nothing to check yet.
            r.info(format!(
                "state dir {} does not exist yet: nothing has run with it (the first headless-run creates it, 0700)",
                root.display()
            ));
            return;
        }
        Some(0o700) => r.ok(format!("state dir {} is 0700", root.display())),
        Some(m) => r.fail(format!(
            "state dir {} is {m:04o}, not 0700 (chmod 700 {})",
            root.display(),
            root.display()
        )),
    }
    let mut bad = Vec::new();
    let mut foreign = Vec::new();
    let mut files = 0usize;
    // SAFETY: geteuid cannot fail.
    let me = unsafe { libc::geteuid() };
    if let Ok(meta) = fs::symlink_metadata(root) {
        use std::os::unix::fs::MetadataExt;
        if meta.uid() != me {
            foreign.push(format!(
                "{} is owned by uid {}, not by you (uid {me})",
                root.display(),
                meta.uid()
            ));
        }
    }
    walk(root, &mut |path, meta| {
        use std::os::unix::fs::MetadataExt;
        if meta.file_type().is_symlink() {
            let to = fs::read_link(path).unwrap_or_default();
            foreign.push(format!(
                "{} is a symbolic link (to {}): state is reached through nothing but its own files",
                path.display(),
                to.display()
            ));
            return;
        }
        if meta.uid() != me {
            foreign.push(format!(
                "{} is owned by uid {}, not by you (uid {me})",
                path.display(),
                meta.uid()
            ));
        }
        let mode = meta.permissions().mode() & 0o777;
        if meta.is_dir() {
            if mode & 0o077 != 0 {
                bad.push(format!("{} is {mode:04o} (want 0700)", path.display()));
            }
        } else if meta.is_file() {
            files += 1;
            if mode & 0o077 != 0 {
                bad.push(format!("{} is {mode:04o} (want 0600)", path.display()));
            }
        }
    });
    // The database may live elsewhere (HEADLESS_RUN_DB).
    if !ctx.paths.db.starts_with(root) {
        for suffix in ["", "-wal", "-shm"] {
            let mut p = ctx.paths.db.as_os_str().to_owned();
            p.push(suffix);
            let p = PathBuf::from(p);
            if let Some(mode) = mode_of(&p) {
                files += 1;
                if mode & 0o077 != 0 {
                    bad.push(format!("{} is {mode:04o} (want 0600)", p.display()));
                }
            }
        }
    }
    if bad.is_empty() {
        r.ok(format!("{files} state files are private (0600, dirs 0700)"));
    }
    for b in bad {
        r.fail(format!("{b}: readable by others"));
    }
    for f in foreign {
        r.fail(f);
    }
}

/// Visits everything under `dir` (not following links).
fn walk(dir: &Path, f: &mut dyn FnMut(&Path, &fs::Metadata)) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let path = e.path();
        let Ok(meta) = fs::symlink_metadata(&path) else {
            continue;
        };
        f(&path, &meta);
        if meta.is_dir() {
            walk(&path, f);
        }
    }
}

fn check_database(ctx: &Ctx, r: &mut Report) {
    if let Some(server) = &ctx.paths.server {
        // The server's database and audit chain are its host's to check.
        let mut store = store::inspector(&ctx.paths);
        match store.connect() {
            Ok(()) => r.ok(format!(
                "server {} answers and takes the token",
                sanitize_line(server)
            )),
            Err(e) => r.fail(format!("cannot use the server: {e}")),
        }
        r.info("the server's database and audit chain are checked by `monitor doctor` on its host");
        return;
    }
    let path = &ctx.paths.db;
    // A database server (the server's case is above), or a file here.
    let remote = !store::capabilities::of(&ctx.paths).database_file;
    let name = ctx.paths.store_label();
    if !remote && !path.exists() {
        r.info(format!(
            "no database at {} yet (the first tool run through headless-run creates it)",
            path.display()
        ));
        return;
    }
    // Not through a server (above): the store itself, read as it is.
    let mut store = match store::local_inspector(&ctx.paths, "checking the database") {
        Ok(store) => store,
        Err(e) => {
            r.fail(format!("cannot open {name}: {e}"));
            return;
        }
    };
    if let Err(e) = store.connect() {
        r.fail(format!("cannot open {name}: {e}"));
        return;
    }
    // One runner login per OS user per host (DESIGN §14): checked with any login, a
    // runner's own included (it sees its own runs).
    if let Some(url) = &ctx.paths.store_url {
        match hr_shared::store::postgres::shared_logins(url) {
            Ok(shared) if shared.is_empty() => {
                r.ok("no runner login is shared by two OS users of a host (as its runs say)")
            }
            Ok(shared) => {
                for s in shared {
                    r.fail(s.warning());
                }
            }
            Err(e) => r.info(format!("cannot check who shares a runner login: {e}")),
        }
    }
    let health = match store.health() {
        Ok(h) => h,
        Err(e) if remote => {
            r.fail(format!(
                "{name}: no headless-run schema readable by this login ({e}); `monitor db init` creates it, `monitor db grant` gives a login a role"
            ));
            return;
        }
        Err(e) => {
            r.fail(format!("{name}: not a usable database: {e}"));
            return;
        }
    };
    let (v, supported) = (health.schema_version, health.supported_version);
    let migrate = if remote {
        "`monitor db init` migrates it"
    } else {
        "any monitor or headless-run command migrates it"
    };
    if v == supported {
        r.ok(format!("database {name} at schema version {v}"));
    } else if v < supported {
        r.fail(format!(
            "database {name} is at schema version {v}, this build writes {supported} ({migrate})"
        ));
    } else {
        r.fail(format!(
            "database {name} is at schema version {v}, newer than this build ({supported}): upgrade headless-run and monitor"
        ));
    }
    let m = health.journal;
    if remote {
        r.ok("PostgreSQL store: decisions are recorded with the login that made them");
    } else if m.eq_ignore_ascii_case("wal") {
        r.ok("database in WAL mode");
    } else {
        r.fail(format!(
            "database journal mode is {m}, not wal (any headless-run command sets it)"
        ));
    }
    let report = store.verify_audit();
    if let Ok(report) = &report {
        check_known_head(ctx, store.as_mut(), report, r);
    }
    match report {
        Ok(report) if report.intact() => r.ok(format!("audit chain intact ({} rows)", report.rows)),
        Ok(report) => {
            for (id, why) in report.problems.iter().take(20) {
                r.fail(format!("audit chain broken at row {id}: {why}"));
            }
            if report.problems.len() > 20 {
                r.fail(format!(
                    "audit chain: {} more problems",
                    report.problems.len() - 20
                ));
            }
        }
        Err(e) => r.fail(format!("cannot verify the audit chain: {e}")),
    }
    match store.unrecorded_decisions() {
        Ok(found) if found.is_empty() => r.ok("every decision is in the audit chain"),
        Ok(found) => {
            for (id, what) in found.iter().take(20) {
                r.fail(format!(
                    "approval {id} says `{what}` but no decision like that was recorded (written past monitor?)"
                ));
            }
        }
        Err(e) => r.fail(format!(
            "cannot check decisions against the audit chain: {e}"
        )),
    }
}

/// The audit chains' heads as a previous `doctor` saw them (`STATE/audit.head`, a line per
/// chain: one on SQLite, one per login on PostgreSQL): each still there with the same hash,
/// or the database was replaced, emptied or a chain cut back since. The file is then kept
/// (the problem stays reported until someone looks: remove it to accept the database as it
/// is); otherwise it moves on to the current heads.
fn check_known_head(
    ctx: &Ctx,
    store: &mut dyn hr_shared::store::AdminStore,
    report: &hr_shared::audit::ChainReport,
    r: &mut Report,
) {
    let file = ctx.paths.root.join("audit.head");
    let known = fs::read_to_string(&file)
        .map(|t| parse_heads(&t))
        .unwrap_or_default();
    let mut keep_old = false;
    for (id, hash, when) in known {
        match store.audit_hash(id) {
            Ok(Some(h)) if h == hash => r.ok(format!(
                "the audit chain still holds the head a check saw at {when} (row {id})"
            )),
            Ok(Some(_)) => {
                keep_old = true;
                r.fail(format!(
                    "audit row {id} is not the one a check saw at {when}: the database was replaced since (remove {} to accept it)",
                    file.display()
                ));
            }
            Ok(None) => {
                keep_old = true;
                r.fail(format!(
                    "audit row {id}, seen by a check at {when}, is gone: the database was replaced, emptied or cut back since (remove {} to accept it)",
                    file.display()
                ));
            }
            Err(e) => {
                keep_old = true;
                r.fail(format!("cannot look up audit row {id}: {e}"));
            }
        }
    }
    if !keep_old && !report.heads.is_empty() && report.intact() {
        let text = format_heads(&report.heads, &hr_shared::time::now_rfc3339());
        let tmp = file.with_extension("head.tmp");
        let written = fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)
            .and_then(|mut f| std::io::Write::write_all(&mut f, text.as_bytes()))
            .and_then(|()| fs::rename(&tmp, &file));
        if let Err(e) = written {
            r.info(format!(
                "cannot keep the audit head in {}: {e}",
                file.display()
            ));
        }
    }
}

/// `audit.head`'s lines: `ID HASH WHEN`, a chain each (a file from before chains per login
/// has one line). Lines that do not read are skipped.
fn parse_heads(text: &str) -> Vec<(i64, String, String)> {
    text.lines()
        .filter_map(|line| {
            let mut w = line.split_whitespace();
            Some((
                w.next()?.parse::<i64>().ok()?,
                w.next()?.to_owned(),
                w.next().unwrap_or("?").to_owned(),
            ))
        })
        .collect()
}

/// The heads as `audit.head` keeps them.
fn format_heads(heads: &[(i64, String)], when: &str) -> String {
    heads
        .iter()
        .map(|(id, hash)| format!("{id} {hash} {when}\n"))
        .collect()
}

fn check_config(r: &mut Report) {
    let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/"));
    match config::Config::load(&cwd, &paths::real_env) {
        Ok(cfg) => {
            if cfg.warnings.is_empty() {
                r.ok("configuration parses");
            }
            for w in &cfg.warnings {
                r.fail(sanitize_line(w));
            }
            // Policies decide without a person: say which, so none goes unnoticed.
            for p in cfg.policies() {
                r.info(format!(
                    "policy {} in the user config answers `{}` without a person (`monitor policies` lists them)",
                    sanitize_line(&p.name),
                    sanitize_line(&p.value)
                ));
            }
        }
        Err(e) => r.fail(sanitize_line(&e.to_string())),
    }
}

fn check_shims(dir: Option<&Path>, r: &mut Report) -> CliResult {
    match locate::shim_binary() {
        Ok(p) => r.ok(format!("headless-run: {}", p.display())),
        Err(e) => r.fail(e.to_string()),
    }
    let dir = install::shim_dir(dir)?;
    let entries = match install::links(&dir) {
        Ok(e) => e,
        Err(_) => {
            r.info(format!(
                "no shim dir at {} (no tools shimmed; `monitor install TOOL` adds some)",
                dir.display()
            ));
            return Ok(());
        }
    };
    let ours: Vec<String> = entries
        .iter()
        .filter(|(_, k)| *k == Entry::Ours)
        .map(|(n, _)| n.clone())
        .collect();
    for (name, kind) in &entries {
        let name_s = sanitize_line(name);
        match kind {
            Entry::Ours => match install::real_tool(name, &dir) {
                Ok(real) => r.ok(format!(
                    "{name_s} is shimmed; the real one is {}",
                    real.display()
                )),
                Err(e) => r.fail(format!(
                    "{name_s} is shimmed but resolves to nothing: {}",
                    sanitize_line(&e.to_string())
                )),
            },
            Entry::Dangling(t) => r.fail(format!(
                "{} is a broken link to {} (monitor install {name_s})",
                dir.join(name).display(),
                t.display()
            )),
            Entry::Foreign => r.fail(format!(
                "{} is not a link to headless-run (replaced by another file?): `{name_s}` from the shim dir runs unsupervised",
                dir.join(name).display()
            )),
        }
    }
    if ours.is_empty() {
        r.info(format!(
            "no tools shimmed in {} (`monitor install TOOL` adds some)",
            dir.display()
        ));
        return Ok(());
    }
    match install::path_order(&dir, &ours) {
        Ok(()) => r.ok(format!(
            "shim dir {} is on PATH before the real tools",
            dir.display()
        )),
        Err(why) => r.fail(format!(
            "{why}: the shimmed tools do not go through headless-run; add export PATH=\"{}:$PATH\"",
            dir.display()
        )),
    }
    Ok(())
}

fn check_proc(r: &mut Report) {
    let child = Command::new("sleep")
        .arg("5")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn();
    let mut child = match child {
        Ok(c) => c,
        Err(e) => {
            r.fail(format!("cannot start `sleep` to test /proc access: {e}"));
            return;
        }
    };
    let path = format!("/proc/{}/syscall", child.id());
    // Right after the fork the child may still be running; its syscall reads `running`.
    let deadline = Instant::now() + Duration::from_secs(2);
    let result = loop {
        match fs::read_to_string(&path) {
            Ok(text) if text.starts_with("running") && Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(10));
            }
            other => break other,
        }
    };
    let _ = child.kill();
    let _ = child.wait();
    match result {
        Ok(text) if !text.trim().is_empty() => r.ok(format!(
            "{path} of a child is readable (prompt detection can see blocked reads)"
        )),
        Ok(_) => r.fail(format!("{path} is empty: prompt detection falls back to heuristics")),
        Err(e) => r.fail(format!(
            "{path} is not readable ({e}): prompt detection falls back to heuristics (ptrace restrictions? try kernel.yama.ptrace_scope=0)"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A head per chain, read back as written; a file of one head (before chains per login)
    /// reads as one chain, and a damaged line is skipped, not a failure.
    #[test]
    fn audit_heads_are_kept_a_line_per_chain() {
        let heads = vec![(3, "aa".to_owned()), (9, "bb".to_owned())];
        let text = format_heads(&heads, "2026-11-28T03:00:00Z");
        assert_eq!(text.lines().count(), 2);
        assert_eq!(
            parse_heads(&text),
            [
                (3, "aa".to_owned(), "2026-11-28T03:00:00Z".to_owned()),
                (9, "bb".to_owned(), "2026-11-28T03:00:00Z".to_owned())
            ]
        );
        assert_eq!(
            parse_heads("12 cc 2026-11-01T00:00:00Z\nnot a head\n"),
            [(12, "cc".to_owned(), "2026-11-01T00:00:00Z".to_owned())]
        );
    }
}
