//! What names a store, as the environment and the config give it: a PostgreSQL URL, a
//! `monitor serve` server. Plain text, so that a build without a remote store still knows
//! one when it is asked for (and refuses it, saying why).

use crate::paths::EnvLookup;

/// The environment variable naming a `monitor serve` server.
pub const ENV_SERVER: &str = "HEADLESS_RUN_SERVER";

/// The environment variable naming where to `LISTEN` for the PostgreSQL store's
/// notifications, when not on the store's own URL (`HEADLESS_RUN_DB`).
pub const ENV_LISTEN_DB: &str = "HEADLESS_RUN_LISTEN_DB";

/// The bearer token (never passed on to a supervised tool).
pub const ENV_TOKEN: &str = "HEADLESS_RUN_TOKEN";

/// The token [`take_token`] took out of the environment.
static TAKEN: std::sync::OnceLock<String> = std::sync::OnceLock::new();

/// Takes `HEADLESS_RUN_TOKEN` out of this process: kept for the HTTP client (`remote::Remote::resolve`), its bytes
/// in the environment block overwritten (so that `/proc/PID/environ`, readable by the
/// supervised tool, no longer holds it) and the variable removed; and the process made
/// non-dumpable, so that a tool of the same user cannot read the token from its memory
/// either. Call first thing in `main`, before any other thread exists.
pub fn take_token() {
    let Some(value) = std::env::var_os(ENV_TOKEN) else {
        return;
    };
    if let Some(t) = value.to_str() {
        let _ = TAKEN.set(t.to_owned());
    }
    // SAFETY: single-threaded (the caller's promise); getenv's string is this process's
    // environment block, writable, `strlen` bytes long; nothing else holds a reference to
    // it. remove_var then drops the entry.
    unsafe {
        let name = c"HEADLESS_RUN_TOKEN";
        let p = libc::getenv(name.as_ptr());
        if !p.is_null() {
            std::ptr::write_bytes(p, b'*', libc::strlen(p));
        }
        std::env::remove_var(ENV_TOKEN);
        libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0);
    }
}

/// The token [`take_token`] took out of the environment, if any.
pub fn taken_token() -> Option<String> {
    TAKEN.get().cloned()
}

/// The server to use: `flag` (`--server`), else `HEADLESS_RUN_SERVER`; `None` when neither
/// names one.
pub fn server_url(flag: Option<&str>, env: EnvLookup<'_>) -> Option<String> {
    flag.map(str::to_owned)
        .or_else(|| env(ENV_SERVER).and_then(|v| v.into_string().ok()))
        .filter(|v| !v.is_empty())
}

/// Whether a store URL names the PostgreSQL store.
pub fn is_url(s: &str) -> bool {
    s.starts_with("postgres://") || s.starts_with("postgresql://")
}

/// The login a URL names (`postgres://LOGIN[:password]@host/…`, as written), if it names
/// one.
pub fn login_of(url: &str) -> Option<&str> {
    let rest = &url[url.find("://")? + 3..];
    let authority = &rest[..rest.find(['/', '?']).unwrap_or(rest.len())];
    let userinfo = &authority[..authority.rfind('@')?];
    Some(userinfo.split(':').next().unwrap_or(userinfo)).filter(|l| !l.is_empty())
}

/// A URL as it may be shown: any password in it replaced by `***`.
pub fn without_password(url: &str) -> String {
    let mut out = url.to_owned();
    if let Some(scheme_end) = out.find("://") {
        let rest = scheme_end + 3;
        let authority_end = out[rest..].find(['/', '?']).map_or(out.len(), |i| rest + i);
        if let Some(at) = out[rest..authority_end].rfind('@').map(|i| rest + i)
            && let Some(colon) = out[rest..at].find(':').map(|i| rest + i)
        {
            out.replace_range(colon + 1..at, "***");
        }
    }
    if let Some(q) = out.find('?') {
        let (base, query) = out.split_at(q + 1);
        let query: Vec<String> = query
            .split('&')
            .map(|kv| match kv.split_once('=') {
                Some((k, _)) if k.eq_ignore_ascii_case("password") => format!("{k}=***"),
                _ => kv.to_owned(),
            })
            .collect();
        out = format!("{base}{}", query.join("&"));
    }
    out
}
