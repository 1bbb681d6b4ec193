//! Reaching a `monitor serve` server: where it is, the token to show it, and a small
//! blocking HTTP client (ureq over rustls with ring) for the runner API and
//! `monitor --server`.
//!
//! The server is named by `HEADLESS_RUN_SERVER` (or `monitor --server URL`). The token comes
//! from `HEADLESS_RUN_TOKEN`, else from the credentials file
//! (`$HEADLESS_RUN_CREDENTIALS`, else `$XDG_CONFIG_HOME/headless-run/credentials.toml`), which
//! must be the user's own and readable by nobody else (0600). An `https://` server is
//! verified against the system's roots, or against the PEM CA in `HEADLESS_RUN_SERVER_CA`
//! (or the file's `ca`).

use crate::paths::EnvLookup;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// The server's base URL.
pub use crate::url::{ENV_SERVER, server_url};
pub use crate::url::{ENV_TOKEN, take_token};
/// A PEM file of the CA (or the self-signed certificate) an `https://` server is verified
/// against, instead of the system's roots.
pub const ENV_CA: &str = "HEADLESS_RUN_SERVER_CA";
/// Where the credentials file is, when not in the default place.
pub const ENV_CREDENTIALS: &str = "HEADLESS_RUN_CREDENTIALS";

/// A server, and how to show and check it.
#[derive(Clone, PartialEq, Eq)]
pub struct Remote {
    /// `http(s)://host:port`, without a trailing slash.
    pub url: String,
    pub token: String,
    pub ca: Option<PathBuf>,
}

impl std::fmt::Debug for Remote {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Remote")
            .field("url", &self.url)
            .field("token", &"…")
            .field("ca", &self.ca)
            .finish()
    }
}

/// Whether `s` names a server (`http://` or `https://`).
pub fn is_url(s: &str) -> bool {
    s.starts_with("http://") || s.starts_with("https://")
}

/// `$HEADLESS_RUN_CREDENTIALS`, else `$XDG_CONFIG_HOME/headless-run/credentials.toml` (else
/// `~/.config/…`).
pub fn credentials_file(env: EnvLookup<'_>) -> Option<PathBuf> {
    if let Some(p) = env(ENV_CREDENTIALS).filter(|v| !v.is_empty()) {
        return Some(PathBuf::from(p));
    }
    crate::paths::user_config_file(env).map(|f| f.with_file_name("credentials.toml"))
}

/// What a credentials file holds: `token = "…"`, and optionally `server = "https://…"` and
/// `ca = "/path/ca.pem"`.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Credentials {
    server: Option<String>,
    token: Option<String>,
    ca: Option<PathBuf>,
}

/// Reads the credentials file, refusing one that others may read or that is not the
/// user's own.
fn read_credentials(file: &std::path::Path) -> Result<Option<Credentials>, String> {
    use std::io::Read;
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
    // Opened without following a link, and checked on the open file: what is checked is
    // what is read.
    let f = match std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(file)
    {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
            return Err(format!(
                "{}: a symbolic link; use the file itself",
                file.display()
            ));
        }
        Err(e) => return Err(format!("{}: {e}", file.display())),
    };
    let meta = f
        .metadata()
        .map_err(|e| format!("{}: {e}", file.display()))?;
    // SAFETY: geteuid cannot fail.
    let uid = unsafe { libc::geteuid() };
    if !meta.is_file() {
        return Err(format!("{}: not a regular file", file.display()));
    }
    if meta.uid() != uid {
        return Err(format!("{}: not owned by this user", file.display()));
    }
    if meta.mode() & 0o077 != 0 {
        return Err(format!(
            "{}: readable by others (mode {:o}); chmod 600 it",
            file.display(),
            meta.mode() & 0o777
        ));
    }
    let mut text = String::new();
    f.take(64 * 1024)
        .read_to_string(&mut text)
        .map_err(|e| format!("{}: {e}", file.display()))?;
    toml::from_str(&text)
        .map(Some)
        .map_err(|e| format!("{}: {}", file.display(), e.message().trim()))
}

impl Remote {
    /// The server at `url`, with the token and CA from the environment or the credentials
    /// file. Errors say what is missing or wrong, never the token.
    pub fn resolve(url: &str, env: EnvLookup<'_>) -> Result<Remote, String> {
        if !is_url(url) {
            return Err(format!(
                "{ENV_SERVER}/--server must be an http:// or https:// URL, not {url:?}"
            ));
        }
        let file = credentials_file(env);
        let creds = match &file {
            Some(f) => read_credentials(f)?.unwrap_or_default(),
            None => Credentials::default(),
        };
        let given = env(ENV_TOKEN)
            .and_then(|v| v.into_string().ok())
            .or_else(crate::url::taken_token)
            .filter(|v| !v.trim().is_empty());
        let from_env = given.is_some();
        let token = given
            .or(creds.token)
            .map(|t| t.trim().to_owned())
            .ok_or_else(|| {
                format!(
                    "no token for {url}: set {ENV_TOKEN}, or put token = \"…\" in {} (mode 0600)",
                    file.as_ref()
                        .map(|f| f.display().to_string())
                        .unwrap_or_else(|| "the credentials file".into())
                )
            })?;
        if creds.server.as_deref().is_some_and(|s| s != url) {
            // A token kept for another server is not sent to this one.
            if !from_env {
                return Err(format!(
                    "the credentials file's token is for {}, not {url}",
                    creds.server.unwrap_or_default()
                ));
            }
        }
        let ca = env(ENV_CA)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
            .or(creds.ca);
        Ok(Remote {
            url: url.trim_end_matches('/').to_owned(),
            token,
            ca,
        })
    }
}

/// Why a call did not get an answer the caller can use.
#[derive(Debug)]
pub enum CallError {
    /// No answer: the server is down, unreachable or too slow (or TLS failed).
    Unreachable(String),
    /// The server answered with an error status and its `{"error": …}` body.
    Status { status: u16, body: Value },
    /// The answer was not what the API says.
    Bad(String),
}

impl CallError {
    /// The server's error message, or what went wrong.
    pub fn message(&self) -> String {
        match self {
            CallError::Unreachable(m) | CallError::Bad(m) => m.clone(),
            CallError::Status { status, body } => match body.get("error").and_then(Value::as_str) {
                Some(e) => format!("{e} (HTTP {status})"),
                None => format!("HTTP {status}"),
            },
        }
    }
}

impl std::fmt::Display for CallError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message())
    }
}

/// An HTTP client whose calls are limited to `timeout` (connecting to `connect`), trusting
/// the certificates in `ca` (PEM), else — for `https` — the system's. Any status is an
/// answer, not an error.
pub fn agent(
    ca: Option<&std::path::Path>,
    https: bool,
    timeout: Duration,
    connect: Duration,
) -> Result<ureq::Agent, String> {
    let roots = match ca {
        Some(ca) => {
            let pem = std::fs::read(ca).map_err(|e| format!("{}: {e}", ca.display()))?;
            let certs: Vec<_> = ureq::tls::parse_pem(&pem)
                .filter_map(|p| match p {
                    Ok(ureq::tls::PemItem::Certificate(c)) => Some(c),
                    _ => None,
                })
                .collect();
            if certs.is_empty() {
                return Err(format!("{}: no certificate in it", ca.display()));
            }
            certs
        }
        None if https => {
            let found = rustls_native_certs::load_native_certs();
            if found.certs.is_empty() {
                // A trust store that trusts nothing fails every call later, and less clearly.
                return Err(
                    "no CA certificate found on this system to check an https server by (install ca-certificates, or set SSL_CERT_FILE)"
                        .into(),
                );
            }
            found
                .certs
                .iter()
                .map(|c| ureq::tls::Certificate::from_der(c.as_ref()).to_owned())
                .collect()
        }
        None => Vec::new(),
    };
    let tls = ureq::tls::TlsConfig::builder()
        .provider(ureq::tls::TlsProvider::Rustls)
        .root_certs(ureq::tls::RootCerts::new_with_certs(&roots))
        .unversioned_rustls_crypto_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .build();
    Ok(ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(timeout))
        .timeout_connect(Some(connect))
        // A pooled connection is dropped before `monitor serve` closes it (an idle
        // connection ends at its --header-timeout, 10 s by default): a request sent
        // just as the server closed it would fail, and ureq does not retry.
        .max_idle_age(Duration::from_secs(4))
        // A redirect is not followed: it would turn a POST into a GET without its body,
        // or take a token or an approval to another address.
        .max_redirects(0)
        .max_redirects_will_error(false)
        .tls_config(tls)
        .user_agent(concat!("headless-run/", env!("CARGO_PKG_VERSION")))
        .build()
        .into())
}

/// The largest answer read.
const ANSWER_LIMIT: u64 = 32 * 1024 * 1024;

/// A client of one server.
#[derive(Clone)]
pub struct Client {
    agent: ureq::Agent,
    base: String,
    auth: String,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client").field("base", &self.base).finish()
    }
}

impl Client {
    /// A client of `remote`, each call limited to `timeout` (connecting to `connect`).
    pub fn new(remote: &Remote, timeout: Duration, connect: Duration) -> Result<Client, String> {
        let agent = agent(
            remote.ca.as_deref(),
            remote.url.starts_with("https://"),
            timeout,
            connect,
        )?;
        Ok(Client {
            agent,
            base: remote.url.clone(),
            auth: format!("Bearer {}", remote.token),
        })
    }

    /// The server's base URL.
    pub fn base(&self) -> &str {
        &self.base
    }

    /// `GET path` (with its query), its JSON answer.
    pub fn get<T: DeserializeOwned>(&self, path: &str) -> Result<T, CallError> {
        self.get_within(path, None)
    }

    /// `GET path` allowed `timeout` instead of the client's (a long poll).
    pub fn get_within<T: DeserializeOwned>(
        &self,
        path: &str,
        timeout: Option<Duration>,
    ) -> Result<T, CallError> {
        let mut req = self
            .agent
            .get(format!("{}{path}", self.base))
            .header("Authorization", &self.auth)
            .header("Accept", "application/json");
        if let Some(t) = timeout {
            req = req.config().timeout_global(Some(t)).build();
        }
        answer(req.call())
    }

    /// `POST path` with a JSON body, its JSON answer.
    pub fn post<T: DeserializeOwned>(
        &self,
        path: &str,
        body: &impl Serialize,
    ) -> Result<T, CallError> {
        answer(
            self.agent
                .post(format!("{}{path}", self.base))
                .header("Authorization", &self.auth)
                .header("Accept", "application/json")
                .send_json(body),
        )
    }
}

fn answer<T: DeserializeOwned>(
    r: Result<ureq::http::Response<ureq::Body>, ureq::Error>,
) -> Result<T, CallError> {
    let mut resp = r.map_err(|e| CallError::Unreachable(e.to_string()))?;
    let status = resp.status().as_u16();
    let text = resp
        .body_mut()
        .with_config()
        .limit(ANSWER_LIMIT)
        .read_to_string()
        .map_err(|e| CallError::Unreachable(format!("reading the answer: {e}")))?;
    if !(200..300).contains(&status) {
        let body = serde_json::from_str(&text).unwrap_or(Value::Null);
        return Err(CallError::Status { status, body });
    }
    serde_json::from_str(&text).map_err(|e| CallError::Bad(format!("an unexpected answer: {e}")))
}

/// `s` made safe in a URL path segment or query value.
pub fn encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                out.push(b as char)
            }
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;
    use std::ffi::OsString;
    use std::os::unix::fs::PermissionsExt;

    fn env_of(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<OsString> + use<> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k| map.get(k).map(OsString::from)
    }

    #[test]
    fn the_token_comes_from_the_environment_first() {
        let env = env_of(&[(ENV_TOKEN, "abc"), (ENV_CREDENTIALS, "/nonexistent/c.toml")]);
        let r = Remote::resolve("http://127.0.0.1:1/", &env).unwrap();
        assert_eq!(r.url, "http://127.0.0.1:1");
        assert_eq!(r.token, "abc");
        assert!(!format!("{r:?}").contains("abc"), "Debug shows the token");
    }

    #[test]
    fn a_credentials_file_must_be_private_and_for_this_server() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("c.toml");
        std::fs::write(&file, "server = \"https://a:1\"\ntoken = \"t1\"\n").unwrap();
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
        let f = file.to_str().unwrap();
        let env = env_of(&[(ENV_CREDENTIALS, f)]);
        let e = Remote::resolve("https://a:1", &env).unwrap_err();
        assert!(e.contains("readable by others"), "{e}");
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert_eq!(Remote::resolve("https://a:1", &env).unwrap().token, "t1");
        let e = Remote::resolve("https://b:1", &env).unwrap_err();
        assert!(e.contains("is for https://a:1"), "{e}");
        let e = Remote::resolve("ftp://a", &env).unwrap_err();
        assert!(e.contains("http:// or https://"), "{e}");
        // A link to the file is refused (what is checked must be what is read).
        let link = dir.path().join("link.toml");
        std::os::unix::fs::symlink(&file, &link).unwrap();
        let linked = env_of(&[(ENV_CREDENTIALS, link.to_str().unwrap())]);
        let e = Remote::resolve("https://a:1", &linked).unwrap_err();
        assert!(e.contains("symbolic link"), "{e}");
        let none = env_of(&[(ENV_CREDENTIALS, "/nonexistent/c.toml")]);
        let e = Remote::resolve("https://a:1", &none).unwrap_err();
        assert!(e.contains("no token"), "{e}");
    }

    #[test]
    fn encoding_keeps_only_unreserved_bytes() {
        assert_eq!(encode("AP-1 x/y?&é"), "AP-1%20x%2Fy%3F%26%C3%A9");
    }
}
