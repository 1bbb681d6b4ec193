//! The one resolver for where state, configuration and shim links live.
//!
//! State dir: `--state-dir`, else `HEADLESS_RUN_HOME`, else `$XDG_STATE_HOME/headless-run`,
//! else `~/.local/state/headless-run`. `HEADLESS_RUN_DB` overrides only the database path
//! (or names a PostgreSQL store; `HEADLESS_RUN_LISTEN_DB` then where to `LISTEN` for its
//! notifications). Directories are created 0700 and files 0600.

use std::ffi::OsString;
use std::fs::{self, DirBuilder, File, OpenOptions};
use std::io;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// Environment lookup, so resolution can be tested without touching the real environment.
pub type EnvLookup<'a> = &'a dyn Fn(&str) -> Option<OsString>;

/// Reads the real process environment.
pub fn real_env(key: &str) -> Option<OsString> {
    std::env::var_os(key)
}

/// Why no state location could be worked out.
#[derive(Debug, thiserror::Error)]
pub enum PathError {
    #[error(
        "cannot find a home directory for the state dir; set HEADLESS_RUN_HOME or pass --state-dir"
    )]
    NoHome,
    #[error("cannot make {0} absolute: {1}")]
    Absolute(PathBuf, io::Error),
    /// The environment names a store this build cannot reach.
    #[error(
        "{0} names {1}, which this build of headless-run cannot reach (built without its `{2}` feature): build it with its default features"
    )]
    NotBuiltIn(&'static str, &'static str, &'static str),
    /// A variable that can only hold a PostgreSQL URL holds something else (not shown: it
    /// may hold a password).
    #[error("{0} must be a postgres:// or postgresql:// URL ({1}), or unset")]
    NotAUrl(&'static str, &'static str),
    /// `HEADLESS_RUN_LISTEN_DB` logs in as another login than the store's: the tools a
    /// worker resumes inherit it, so it may give them nothing the store's URL does not.
    #[error(
        "HEADLESS_RUN_LISTEN_DB must log in as the same login as HEADLESS_RUN_DB (it is the same server without the pooler; the tools a worker resumes inherit it)"
    )]
    OtherListenLogin,
}

/// Where one installation keeps its state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StatePaths {
    /// The state directory.
    pub root: PathBuf,
    /// The SQLite database (`root/state.db` unless `HEADLESS_RUN_DB` says otherwise).
    pub db: PathBuf,
    /// The PostgreSQL store, when `HEADLESS_RUN_DB` is a `postgres://` URL (then `db` is
    /// unused).
    pub store_url: Option<String>,
    /// With the PostgreSQL store: where this process `LISTEN`s for the server's
    /// notifications when no relay of its state dir does (`HEADLESS_RUN_LISTEN_DB`: a direct
    /// connection to the server, when `store_url` goes through a transaction pooler, which
    /// cannot carry `LISTEN`). `None`: `store_url` itself.
    pub listen_url: Option<String>,
    /// A `monitor serve` server to use as the store (`HEADLESS_RUN_SERVER`, or `monitor
    /// --server`): its runner API for a shim, its operator API for `monitor`.
    pub server: Option<String>,
}

impl StatePaths {
    /// The state dir `root`, with its database at `root/state.db`.
    pub fn at(root: impl Into<PathBuf>) -> Self {
        let root = root.into();
        let db = root.join("state.db");
        StatePaths {
            root,
            db,
            store_url: None,
            listen_url: None,
            server: None,
        }
    }

    /// Resolves from a `--state-dir` flag and the real environment.
    pub fn resolve(flag: Option<&Path>) -> Result<Self, PathError> {
        Self::resolve_with(flag, &real_env)
    }

    /// Resolves from a `--state-dir` flag and the given environment.
    pub fn resolve_with(flag: Option<&Path>, env: EnvLookup<'_>) -> Result<Self, PathError> {
        let root = match flag {
            Some(dir) => dir.to_path_buf(),
            None => match non_empty(env("HEADLESS_RUN_HOME")) {
                Some(dir) => PathBuf::from(dir),
                None => xdg_dir(env, "XDG_STATE_HOME", ".local/state")?.join("headless-run"),
            },
        };
        let root = absolute(&root)?;
        let mut store_url = None;
        let db = match non_empty(env("HEADLESS_RUN_DB")) {
            Some(url) if url.to_str().is_some_and(crate::url::is_url) => {
                store_url = url.into_string().ok();
                root.join("state.db")
            }
            Some(db) => absolute(Path::new(&db))?,
            None => {
                // The user's config may name a PostgreSQL store (never a project file).
                store_url = crate::config::user_store(env);
                root.join("state.db")
            }
        };
        // Only the PostgreSQL store listens; a value that is no URL is a mistake said at
        // once, never a connection tried somewhere else.
        let listen_url = match non_empty(env(crate::url::ENV_LISTEN_DB)) {
            Some(url) if store_url.is_some() => match url.into_string() {
                Ok(url)
                    if crate::url::is_url(&url)
                        && crate::url::login_of(&url)
                            != store_url.as_deref().and_then(crate::url::login_of) =>
                {
                    return Err(PathError::OtherListenLogin);
                }
                Ok(url) if crate::url::is_url(&url) => Some(url),
                _ => {
                    return Err(PathError::NotAUrl(
                        crate::url::ENV_LISTEN_DB,
                        "where to LISTEN for the PostgreSQL store's notifications",
                    ));
                }
            },
            _ => None,
        };
        let server = crate::url::server_url(None, env);
        if cfg!(not(feature = "postgres")) && store_url.is_some() {
            return Err(PathError::NotBuiltIn(
                "HEADLESS_RUN_DB (or the config's store)",
                "a PostgreSQL store",
                "postgres",
            ));
        }
        if cfg!(not(feature = "http")) && server.is_some() {
            return Err(PathError::NotBuiltIn(
                "HEADLESS_RUN_SERVER",
                "a monitor serve server",
                "http",
            ));
        }
        Ok(StatePaths {
            root,
            db,
            store_url,
            listen_url,
            server,
        })
    }

    /// Whether the store is the embedded one (a database file on this host), not a
    /// database server or a `monitor serve` server.
    pub fn is_embedded(&self) -> bool {
        self.store_url.is_none() && self.server.is_none()
    }

    /// The store as messages name it: a `monitor serve` server's URL, the database file, or
    /// the database server's URL without its password.
    pub fn store_label(&self) -> String {
        if let Some(server) = &self.server {
            return server.trim_end_matches('/').to_owned();
        }
        match &self.store_url {
            Some(url) => crate::url::without_password(url),
            None => self.db.display().to_string(),
        }
    }

    /// How an operator reaches this state from another shell: `monitor`, with
    /// `--state-dir` when it is not where `monitor` looks by default (and `HEADLESS_RUN_DB`
    /// when the database lives elsewhere), shell-quoted to copy and paste.
    pub fn monitor_command(&self, env: EnvLookup<'_>) -> String {
        let default_root = xdg_dir(env, "XDG_STATE_HOME", ".local/state")
            .map(|d| d.join("headless-run"))
            .ok();
        // Through a `monitor serve` server, an operator reaches it from anywhere with a
        // token of their own (HEADLESS_RUN_TOKEN or `monitor login`), never this runner's,
        // and nothing of this host's state dir (on an ephemeral runner it is gone anyway).
        if let Some(server) = &self.server {
            return format!(
                "monitor --server {}",
                crate::shell::quote(crate::url::without_password(server).trim_end_matches('/'))
            );
        }
        // On the PostgreSQL store an operator uses their own login (their HEADLESS_RUN_DB),
        // never the runner's URL, and no state dir of this host.
        if self.store_url.is_some() {
            return "monitor".into();
        }
        let mut cmd = String::new();
        if self.db != self.root.join("state.db") {
            cmd.push_str(&format!(
                "HEADLESS_RUN_DB={} ",
                crate::shell::quote(&self.db.to_string_lossy())
            ));
        }
        cmd.push_str("monitor");
        if default_root.as_deref() != Some(self.root.as_path()) {
            cmd.push_str(&format!(
                " --state-dir {}",
                crate::shell::quote(&self.root.to_string_lossy())
            ));
        }
        cmd
    }

    /// The `HEADLESS_RUN_DB` for a process this one starts to record in this store (a
    /// worker's resume, a restart): the PostgreSQL URL with what this process's own
    /// environment adds to it (its `PGPASSWORD`, `~/.pgpass`, `PG*`) written in — its own
    /// session's credentials, never a run's — or the database file.
    pub fn child_store(&self) -> std::ffi::OsString {
        match &self.store_url {
            // A URL this process could not read is one it cannot use either: passed as is.
            #[cfg(feature = "postgres")]
            Some(url) => crate::store::postgres::pinned_url(url)
                .unwrap_or_else(|_| url.clone())
                .into(),
            #[cfg(not(feature = "postgres"))]
            Some(url) => url.into(),
            None => self.db.clone().into_os_string(),
        }
    }

    /// Where this process would `LISTEN` for the PostgreSQL server's notifications:
    /// `HEADLESS_RUN_LISTEN_DB`, else the store's URL; `None` on any other store.
    pub fn listen_target(&self) -> Option<&str> {
        let store = self.store_url.as_deref()?;
        Some(self.listen_url.as_deref().unwrap_or(store))
    }

    /// The `HEADLESS_RUN_LISTEN_DB` for a process this one starts on its store (see
    /// [`StatePaths::child_store`]): this one's, with what its environment adds written in;
    /// `None` when it has none (the child then listens on its `HEADLESS_RUN_DB`).
    pub fn child_listen_store(&self) -> Option<std::ffi::OsString> {
        let url = self.listen_url.as_ref()?;
        #[cfg(feature = "postgres")]
        let url = &crate::store::postgres::pinned_url(url).unwrap_or_else(|_| url.clone());
        Some(url.into())
    }

    /// `root/logs`.
    pub fn logs_dir(&self) -> PathBuf {
        self.root.join("logs")
    }

    /// `root/logs/combined.log`: one JSON event per line.
    pub fn combined_log(&self) -> PathBuf {
        self.logs_dir().join("combined.log")
    }

    /// `root/logs/runs`: the raw output of each run.
    pub fn runs_dir(&self) -> PathBuf {
        self.logs_dir().join("runs")
    }

    /// The raw output log of one run.
    ///
    /// Ids come from the store, which another program may have written: only an id of the
    /// usual shape (`TR-` and 26 base32 characters) names a file; any other (`../x`) gets a
    /// name no run log has, so nothing outside the runs directory is ever read or deleted.
    pub fn run_log(&self, tool_run_id: &str) -> PathBuf {
        if crate::id::has_shape(tool_run_id, crate::id::RUN_PREFIX) {
            self.runs_dir().join(format!("{tool_run_id}.log"))
        } else {
            self.runs_dir().join(".not-a-run-id")
        }
    }

    /// Creates the state dir, its log dirs and the database's dir, all 0700; each must be
    /// the caller's own directory, not a link.
    pub fn ensure_dirs(&self) -> io::Result<()> {
        create_private_dir(&self.root)?;
        create_private_dir(&self.logs_dir())?;
        create_private_dir(&self.runs_dir())?;
        if let Some(parent) = self.db.parent()
            && !parent.as_os_str().is_empty()
            && !parent.exists()
        {
            create_private_dir(parent)?;
        }
        Ok(())
    }

    /// Checks that the state dir and its log dirs are the caller's own directories, not
    /// links (`NotFound` when one is missing).
    pub fn check_own_dirs(&self) -> io::Result<()> {
        for dir in [self.root.clone(), self.logs_dir(), self.runs_dir()] {
            check_own_dir(&dir)?;
        }
        Ok(())
    }

    /// Why the embedded store of these paths is not the caller's to write: its state dir,
    /// the directory holding its database, or the database file belongs to another user or
    /// is a link. `None` when it is the caller's own (or not there yet).
    pub fn foreign_store(&self) -> Option<String> {
        if let Ok(meta) = fs::symlink_metadata(&self.root)
            && let Some(why) = not_own(&self.root, &meta, true)
        {
            return Some(why);
        }
        // A database kept elsewhere (`HEADLESS_RUN_DB`): its directory must be the caller's
        // and writable by nobody else, who could put a database or its journal there.
        if let Some(dir) = self.db.parent().filter(|d| !d.as_os_str().is_empty())
            && dir != self.root
            && let Ok(meta) = fs::symlink_metadata(dir)
        {
            if let Some(why) = not_own(dir, &meta, true) {
                return Some(why);
            }
            if meta.mode() & 0o022 != 0 {
                return Some(format!(
                    "{} is writable by others (mode {:04o}): chmod go-w it, or keep the database in the state dir",
                    dir.display(),
                    meta.mode() & 0o7777
                ));
            }
        }
        // The database and the files SQLite keeps beside it.
        ["", "-wal", "-shm", "-journal"]
            .into_iter()
            .find_map(|suffix| {
                let mut path = self.db.clone().into_os_string();
                path.push(suffix);
                let path = PathBuf::from(path);
                fs::symlink_metadata(&path)
                    .ok()
                    .and_then(|meta| not_own(&path, &meta, false))
            })
    }
}

impl StatePaths {
    /// Runs `open` once the state dirs are checked to be the caller's own; when one is
    /// missing, creates them and runs it (so the usual case, dirs that exist, costs no
    /// `mkdir`).
    pub fn open_creating<T>(&self, open: impl Fn() -> io::Result<T>) -> io::Result<T> {
        match self.check_own_dirs().and_then(|()| open()) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                self.ensure_dirs()?;
                open()
            }
            other => other,
        }
    }
}

/// `$XDG_CONFIG_HOME/headless-run/config.toml`, else `~/.config/headless-run/config.toml`.
pub fn user_config_file(env: EnvLookup<'_>) -> Option<PathBuf> {
    xdg_dir(env, "XDG_CONFIG_HOME", ".config")
        .ok()
        .map(|d| d.join("headless-run").join("config.toml"))
}

/// Where `monitor install` puts shim links by default:
/// `$XDG_DATA_HOME/headless-run/bin`, else `~/.local/share/headless-run/bin`.
pub fn default_shim_dir(env: EnvLookup<'_>) -> Result<PathBuf, PathError> {
    Ok(xdg_dir(env, "XDG_DATA_HOME", ".local/share")?
        .join("headless-run")
        .join("bin"))
}

fn xdg_dir(env: EnvLookup<'_>, var: &str, fallback: &str) -> Result<PathBuf, PathError> {
    // The XDG spec says relative values are invalid and must be ignored.
    if let Some(dir) = non_empty(env(var)).map(PathBuf::from)
        && dir.is_absolute()
    {
        return Ok(dir);
    }
    Ok(home_dir(env).ok_or(PathError::NoHome)?.join(fallback))
}

fn home_dir(env: EnvLookup<'_>) -> Option<PathBuf> {
    if let Some(home) = non_empty(env("HOME")) {
        return Some(PathBuf::from(home));
    }
    crate::proc::passwd_home(crate::proc::real_uid())
}

fn non_empty(v: Option<OsString>) -> Option<OsString> {
    v.filter(|s| !s.is_empty())
}

fn absolute(p: &Path) -> Result<PathBuf, PathError> {
    std::path::absolute(p).map_err(|e| PathError::Absolute(p.to_path_buf(), e))
}

/// Why `path` is not the caller's own, from its `lstat`: a symbolic link, not a
/// directory (`want_dir`) or not a regular file, or owned by another user. The embedded
/// store is its owner's alone (DESIGN §14): what another user owns — or could have put a
/// link in — is never written, so nothing there is recorded, or later run, as the caller.
pub fn not_own(path: &Path, meta: &fs::Metadata, want_dir: bool) -> Option<String> {
    let kind = meta.file_type();
    if kind.is_symlink() {
        return Some(format!(
            "{} is a symbolic link: the state dir and what is in it are opened only as they are, never through a link",
            path.display()
        ));
    }
    if want_dir && !kind.is_dir() {
        return Some(format!("{} exists and is not a directory", path.display()));
    }
    if !want_dir && !kind.is_file() {
        return Some(format!("{} is not a regular file", path.display()));
    }
    let me = crate::proc::effective_uid();
    (meta.uid() != me).then(|| {
        format!(
            "{} is owned by {}, not by you, {}: a state store is its owner's alone; run as its owner, or give each user a state dir of their own (or the PostgreSQL store for several)",
            path.display(),
            crate::proc::describe_uid(meta.uid()),
            crate::proc::describe_uid(me),
        )
    })
}

/// The caller's own directory at `path` (see [`not_own`]), or why not, as an error of kind
/// `PermissionDenied` (`NotFound` when there is none).
pub fn check_own_dir(path: &Path) -> io::Result<fs::Metadata> {
    let meta = fs::symlink_metadata(path)?;
    match not_own(path, &meta, true) {
        Some(why) => Err(io::Error::new(io::ErrorKind::PermissionDenied, why)),
        None => Ok(meta),
    }
}

/// Creates `path` (and missing parents) with mode 0700; it must then be the caller's own
/// directory, not a link ([`not_own`]). An own directory open to others is tightened to
/// 0700.
pub fn create_private_dir(path: &Path) -> io::Result<()> {
    match DirBuilder::new().recursive(true).mode(0o700).create(path) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(e),
    }
    let meta = check_own_dir(path)?;
    if meta.mode() & 0o077 != 0 {
        fs::set_permissions(path, fs::Permissions::from_mode(0o700))?;
    }
    Ok(())
}

/// How [`write_private`] puts a file in place.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Put {
    /// Replaces what is there (a rename).
    Replace,
    /// Keeps what is there, if anything (a hard link: of two first writers, the first wins).
    KeepExisting,
}

/// Writes `bytes` to `path` whole, mode 0600: under a name of its own beside it, synced,
/// then put in place, so that a reader never sees half a file. Whether this call's bytes
/// are the ones in place (false: [`Put::KeepExisting`] found a file there).
pub fn write_private(path: &Path, bytes: &[u8], put: Put) -> io::Result<bool> {
    use std::io::Write;
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = path.with_file_name(format!(".{name}.{}.tmp", crate::id::new_id("T-")));
    let written = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_CLOEXEC | libc::O_NOFOLLOW)
        .open(&tmp)
        .and_then(|mut f| {
            f.write_all(bytes)?;
            f.sync_all()
        });
    let placed = written.and_then(|()| match put {
        Put::Replace => fs::rename(&tmp, path).map(|()| true),
        Put::KeepExisting => match fs::hard_link(&tmp, path) {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(false),
            Err(e) => Err(e),
        },
    });
    if put == Put::KeepExisting || placed.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    placed
}

/// Opens `path` for appending, creating it with mode 0600; never through a link, and only
/// a regular file of the caller's own.
pub fn open_private_append(path: &Path) -> io::Result<File> {
    let f = OpenOptions::new()
        .append(true)
        .create(true)
        .mode(0o600)
        .custom_flags(libc::O_CLOEXEC | libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)?;
    own_file(path, &f)?;
    Ok(f)
}

/// Refuses an open file that is not a regular file of the caller's own, or that has other
/// hard links (another user could have linked one of the caller's files there) — checked
/// on the descriptor, so nothing can be swapped in between.
fn own_file(path: &Path, f: &File) -> io::Result<()> {
    let meta = f.metadata()?;
    let why = not_own(path, &meta, false).or_else(|| {
        (meta.nlink() > 1).then(|| {
            format!(
                "{} has other hard links: the state dir's files are never written through one",
                path.display()
            )
        })
    });
    match why {
        Some(why) => Err(io::Error::new(io::ErrorKind::PermissionDenied, why)),
        None => Ok(()),
    }
}

/// Creates `path` empty with mode 0600 if it does not exist yet (so that SQLite, which copies
/// the database file's mode to its `-wal` and `-shm` files, never creates them wider); an
/// existing one must be a regular file of the caller's own, not a link.
pub fn touch_private(path: &Path) -> io::Result<()> {
    let f = OpenOptions::new()
        .write(true)
        .create(true)
        .mode(0o600)
        .custom_flags(libc::O_CLOEXEC | libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)?;
    own_file(path, &f)?;
    let mode = f.metadata()?.mode();
    if mode & 0o077 != 0 {
        f.set_permissions(fs::Permissions::from_mode(mode & 0o700))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env_of(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<OsString> {
        let map: HashMap<String, OsString> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), OsString::from(v)))
            .collect();
        move |k| map.get(k).cloned()
    }

    #[test]
    fn the_monitor_command_names_a_state_dir_that_is_not_the_default() {
        let env = env_of(&[("HOME", "/home/op")]);
        let default = StatePaths::resolve_with(None, &env).unwrap();
        assert_eq!(default.monitor_command(&env), "monitor");
        let other = StatePaths::at("/srv/ci state");
        assert_eq!(
            other.monitor_command(&env),
            "monitor --state-dir '/srv/ci state'"
        );
        let db_elsewhere = StatePaths {
            db: "/data/hr.db".into(),
            ..other
        };
        assert_eq!(
            db_elsewhere.monitor_command(&env),
            "HEADLESS_RUN_DB=/data/hr.db monitor --state-dir '/srv/ci state'"
        );
        // Through a server: that server, from wherever the operator is; no state dir.
        let through = StatePaths {
            server: Some("https://hr.example:8443/".into()),
            ..db_elsewhere
        };
        assert_eq!(
            through.monitor_command(&env),
            "monitor --server https://hr.example:8443"
        );
    }

    /// A store the build can reach is used; one it was built without (`--no-default-features`)
    /// is refused by name, never replaced by the embedded one.
    #[test]
    fn a_remote_store_is_used_only_by_a_build_that_has_it() {
        let env = env_of(&[
            ("HOME", "/h"),
            ("HEADLESS_RUN_DB", "postgres://runner@db.test/hr"),
        ]);
        let got = StatePaths::resolve_with(None, &env);
        assert_eq!(got.is_ok(), cfg!(feature = "postgres"), "{got:?}");
        match got {
            Ok(p) => assert_eq!(p.store_url.as_deref(), Some("postgres://runner@db.test/hr")),
            Err(e) => assert!(e.to_string().contains("a PostgreSQL store"), "{e}"),
        }
        let env = env_of(&[("HOME", "/h"), ("HEADLESS_RUN_SERVER", "https://hr.test")]);
        let got = StatePaths::resolve_with(None, &env);
        assert_eq!(got.is_ok(), cfg!(feature = "http"), "{got:?}");
        match got {
            Ok(p) => assert_eq!(p.server.as_deref(), Some("https://hr.test")),
            Err(e) => assert!(e.to_string().contains("HEADLESS_RUN_SERVER"), "{e}"),
        }
    }

    /// `HEADLESS_RUN_LISTEN_DB` names where the PostgreSQL store is listened to; it must be
    /// a URL, and means nothing to another store.
    #[cfg(feature = "postgres")]
    #[test]
    fn the_listen_url_is_a_postgres_url_for_the_postgres_store_only() {
        let env = env_of(&[
            ("HOME", "/h"),
            ("HEADLESS_RUN_DB", "postgres://runner@pooler.test:6432/hr"),
        ]);
        let p = StatePaths::resolve_with(None, &env).unwrap();
        assert_eq!(p.listen_url, None);
        assert_eq!(
            p.listen_target(),
            Some("postgres://runner@pooler.test:6432/hr")
        );
        assert_eq!(p.child_listen_store(), None);
        let env = env_of(&[
            ("HOME", "/h"),
            ("HEADLESS_RUN_DB", "postgres://runner@pooler.test:6432/hr"),
            (
                "HEADLESS_RUN_LISTEN_DB",
                "postgres://runner@db.test:5432/hr",
            ),
        ]);
        let p = StatePaths::resolve_with(None, &env).unwrap();
        assert_eq!(p.listen_target(), Some("postgres://runner@db.test:5432/hr"));
        assert!(p.child_listen_store().is_some());
        // Not a URL: said (not shown: it may hold a password), never tried as something else.
        let env = env_of(&[
            ("HOME", "/h"),
            ("HEADLESS_RUN_DB", "postgres://runner@pooler.test:6432/hr"),
            ("HEADLESS_RUN_LISTEN_DB", "db.test:5432 password=secret"),
        ]);
        let e = StatePaths::resolve_with(None, &env)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("HEADLESS_RUN_LISTEN_DB must be a postgres://"),
            "{e}"
        );
        assert!(!e.contains("secret"), "{e}");
        // Another login than the store's: refused (the tools a worker resumes inherit it).
        let env = env_of(&[
            ("HOME", "/h"),
            (
                "HEADLESS_RUN_DB",
                "postgres://runner:pw@pooler.test:6432/hr",
            ),
            (
                "HEADLESS_RUN_LISTEN_DB",
                "postgres://owner:secret@db.test/hr",
            ),
        ]);
        let e = StatePaths::resolve_with(None, &env)
            .unwrap_err()
            .to_string();
        assert!(e.contains("same login"), "{e}");
        assert!(!e.contains("secret") && !e.contains("owner"), "{e}");
        // The embedded store listens to nothing.
        let env = env_of(&[
            ("HOME", "/h"),
            ("HEADLESS_RUN_LISTEN_DB", "postgres://runner@db.test/hr"),
        ]);
        let p = StatePaths::resolve_with(None, &env).unwrap();
        assert_eq!((p.listen_url.as_deref(), p.listen_target()), (None, None));
    }

    #[test]
    fn flag_wins_over_env() {
        let env = env_of(&[("HEADLESS_RUN_HOME", "/env/home"), ("HOME", "/h")]);
        let p = StatePaths::resolve_with(Some(Path::new("/flag")), &env).unwrap();
        assert_eq!(p.root, PathBuf::from("/flag"));
        assert_eq!(p.db, PathBuf::from("/flag/state.db"));
    }

    #[test]
    fn env_then_xdg_then_home() {
        let env = env_of(&[("HEADLESS_RUN_HOME", "/env/home"), ("HOME", "/h")]);
        assert_eq!(
            StatePaths::resolve_with(None, &env).unwrap().root,
            PathBuf::from("/env/home")
        );
        let env = env_of(&[("XDG_STATE_HOME", "/xdg"), ("HOME", "/h")]);
        assert_eq!(
            StatePaths::resolve_with(None, &env).unwrap().root,
            PathBuf::from("/xdg/headless-run")
        );
        let env = env_of(&[("XDG_STATE_HOME", "relative"), ("HOME", "/h")]);
        assert_eq!(
            StatePaths::resolve_with(None, &env).unwrap().root,
            PathBuf::from("/h/.local/state/headless-run")
        );
    }

    #[test]
    fn db_override_only_moves_the_db() {
        let env = env_of(&[
            ("HEADLESS_RUN_HOME", "/s"),
            ("HEADLESS_RUN_DB", "/w/.worktrees/pipeline_state.db"),
        ]);
        let p = StatePaths::resolve_with(None, &env).unwrap();
        assert_eq!(p.root, PathBuf::from("/s"));
        assert_eq!(p.db, PathBuf::from("/w/.worktrees/pipeline_state.db"));
        assert_eq!(p.combined_log(), PathBuf::from("/s/logs/combined.log"));
    }

    #[test]
    fn run_logs_are_named_only_by_run_ids() {
        let p = StatePaths::at("/s");
        let id = "TR-01M851PH9Y00000HBT4PZ50003";
        assert_eq!(
            p.run_log(id),
            PathBuf::from(format!("/s/logs/runs/{id}.log"))
        );
        for bad in ["TR-X", "../../etc/passwd", "TR-01M851PH9Y00000HBT4PZ5/../x"] {
            assert_eq!(
                p.run_log(bad),
                PathBuf::from("/s/logs/runs/.not-a-run-id"),
                "{bad}"
            );
        }
    }

    /// What the embedded store refuses to write (DESIGN §14): a link where a state file
    /// goes (the database's journal files too), a database directory others may write, and
    /// a state file with another hard link.
    #[test]
    fn a_store_reached_through_links_or_open_to_others_is_not_the_callers() {
        let tmp = tempfile::tempdir().unwrap();
        let paths = StatePaths::at(tmp.path().join("state"));
        paths.ensure_dirs().unwrap();
        assert_eq!(
            paths.foreign_store(),
            None,
            "a fresh state dir is its owner's"
        );
        touch_private(&paths.db).unwrap();
        assert_eq!(paths.foreign_store(), None);
        let elsewhere = tmp.path().join("elsewhere");
        std::os::unix::fs::symlink(&elsewhere, tmp.path().join("state/state.db-wal")).unwrap();
        assert!(
            paths
                .foreign_store()
                .is_some_and(|w| w.contains("state.db-wal") && w.contains("symbolic link"))
        );
        fs::remove_file(tmp.path().join("state/state.db-wal")).unwrap();
        // A database kept elsewhere, in a directory others may write.
        let shared = tmp.path().join("shared");
        fs::create_dir(&shared).unwrap();
        fs::set_permissions(&shared, fs::Permissions::from_mode(0o777)).unwrap();
        let elsewhere_db = StatePaths {
            db: shared.join("x.db"),
            ..paths.clone()
        };
        assert!(
            elsewhere_db
                .foreign_store()
                .is_some_and(|w| w.contains("writable by others"))
        );
        fs::set_permissions(&shared, fs::Permissions::from_mode(0o755)).unwrap();
        assert_eq!(elsewhere_db.foreign_store(), None);
        // A log with another hard link (someone linked a file of the caller's there).
        let log = paths.combined_log();
        fs::hard_link(&paths.db, &log).unwrap();
        let err = open_private_append(&log).unwrap_err();
        assert!(err.to_string().contains("hard links"), "{err}");
        // A log that is a link is not opened through it.
        fs::remove_file(&log).unwrap();
        std::os::unix::fs::symlink(&elsewhere, &log).unwrap();
        assert!(open_private_append(&log).is_err());
        assert!(!elsewhere.exists(), "created through a link");
    }

    #[test]
    fn dirs_are_private() {
        let tmp = tempfile::tempdir().unwrap();
        let paths = StatePaths {
            root: tmp.path().join("state"),
            db: tmp.path().join("state/state.db"),
            store_url: None,
            listen_url: None,
            server: None,
        };
        paths.ensure_dirs().unwrap();
        for d in [paths.root.clone(), paths.logs_dir(), paths.runs_dir()] {
            assert_eq!(
                fs::metadata(&d).unwrap().mode() & 0o777,
                0o700,
                "{}",
                d.display()
            );
        }
        fs::set_permissions(&paths.root, fs::Permissions::from_mode(0o755)).unwrap();
        paths.ensure_dirs().unwrap();
        assert_eq!(fs::metadata(&paths.root).unwrap().mode() & 0o777, 0o700);
        let f = paths.combined_log();
        open_private_append(&f).unwrap();
        assert_eq!(fs::metadata(&f).unwrap().mode() & 0o777, 0o600);
    }
}
