//! API tokens for `monitor serve`: `STATE/tokens.json` (0600), holding for each token its
//! name, role, expiry and the SHA-256 of the secret, never the secret itself (printed once
//! by `monitor token create`). Checked in constant time.

use hr_shared::paths::StatePaths;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::path::PathBuf;

/// What a token may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Decide, cancel, read everything.
    Operator,
    /// Read only.
    Viewer,
    /// A runner's: never decides (the runner API is not served yet).
    Runner,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Operator => "operator",
            Role::Viewer => "viewer",
            Role::Runner => "runner",
        }
    }
}

/// One token as stored.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Token {
    pub name: String,
    pub role: Role,
    /// `sha256:` and the hex digest of the secret.
    pub hash: String,
    pub created_at: String,
    pub expires_at: Option<String>,
    #[serde(default)]
    pub revoked_at: Option<String>,
    /// The reviewer groups its holder belongs to (`monitor token create --group`): what
    /// an approval needing reviewers of a group checks (`crate::reviews`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub groups: Vec<String>,
}

impl Token {
    /// In force at `now` (RFC 3339): not revoked, not expired.
    pub fn live(&self, now: &str) -> bool {
        self.revoked_at.is_none() && self.expires_at.as_deref().is_none_or(|e| e > now)
    }
}

/// The token file of a state dir.
pub fn file(paths: &StatePaths) -> PathBuf {
    paths.root.join("tokens.json")
}

/// The tokens stored (none when there is no file).
pub fn load(paths: &StatePaths) -> Result<Vec<Token>, String> {
    let f = file(paths);
    match std::fs::read(&f) {
        Ok(bytes) => serde_json::from_slice(&bytes)
            .map_err(|e| format!("{}: not a token file ({e})", f.display())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
        Err(e) => Err(format!("cannot read {}: {e}", f.display())),
    }
}

/// Writes the tokens (0600, replaced atomically).
pub fn save(paths: &StatePaths, tokens: &[Token]) -> Result<(), String> {
    paths.ensure_dirs().map_err(|e| e.to_string())?;
    let f = file(paths);
    let bytes = serde_json::to_vec_pretty(tokens).map_err(|e| e.to_string())?;
    hr_shared::paths::write_private(&f, &bytes, hr_shared::paths::Put::Replace)
        .map(|_| ())
        .map_err(|e| format!("cannot write {}: {e}", f.display()))
}

/// The operator token named `name` in force at `now`, if there is one: whom a decision
/// link or a Slack user decides as.
pub fn operator<'a>(tokens: &'a [Token], name: &str, now: &str) -> Option<&'a Token> {
    tokens
        .iter()
        .find(|t| t.name == name && t.role == Role::Operator && t.live(now))
}

/// The stored form of a secret.
pub fn hash(secret: &str) -> String {
    format!(
        "sha256:{}",
        hr_shared::audit::hex(&Sha256::digest(secret.as_bytes()))
    )
}

/// A new secret: `hrt_` and 256 random bits as hex.
pub fn new_secret() -> Result<String, String> {
    let mut bytes = [0u8; 32];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut bytes))
        .map_err(|e| format!("no randomness for a token: {e}"))?;
    Ok(format!("hrt_{}", hr_shared::audit::hex(&bytes)))
}

/// Equal in time that does not depend on where they differ.
fn same(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The live token `secret` is, if any (every stored hash compared, in constant time).
pub fn find<'a>(tokens: &'a [Token], secret: &str, now: &str) -> Option<&'a Token> {
    let h = hash(secret);
    let mut found = None;
    for t in tokens {
        if same(t.hash.as_bytes(), h.as_bytes()) && t.live(now) {
            found = Some(t);
        }
    }
    found
}

/// Whether the token stored with `hash` is still in force at `now`: an open stream's
/// look at the token it was opened with (revoked or expired since, it ends).
pub fn in_force(tokens: &[Token], hash: &str, now: &str) -> bool {
    tokens
        .iter()
        .any(|t| same(t.hash.as_bytes(), hash.as_bytes()) && t.live(now))
}

/// A token name: letters, digits, `.`, `_`, `-`, `@`, at most 64.
pub fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | '@'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_secret_is_found_by_its_hash_only_while_live() {
        let secret = new_secret().unwrap();
        assert!(secret.starts_with("hrt_") && secret.len() == 68);
        let mut t = Token {
            name: "ci".into(),
            role: Role::Viewer,
            hash: hash(&secret),
            created_at: "2026-01-01T00:00:00.000Z".into(),
            expires_at: Some("2026-06-01T00:00:00.000Z".into()),
            revoked_at: None,
            groups: Vec::new(),
        };
        assert!(!t.hash.contains(&secret[4..]));
        let now = "2026-03-01T00:00:00.000Z";
        assert_eq!(
            find(std::slice::from_ref(&t), &secret, now).map(|t| &t.name),
            Some(&"ci".to_owned())
        );
        assert!(find(std::slice::from_ref(&t), "hrt_wrong", now).is_none());
        assert!(
            find(
                std::slice::from_ref(&t),
                &secret,
                "2026-07-01T00:00:00.000Z"
            )
            .is_none()
        );
        assert!(in_force(std::slice::from_ref(&t), &t.hash, now));
        assert!(!in_force(
            std::slice::from_ref(&t),
            &t.hash,
            "2026-07-01T00:00:00.000Z"
        ));
        assert!(!in_force(std::slice::from_ref(&t), &hash("hrt_other"), now));
        t.revoked_at = Some(now.into());
        assert!(find(std::slice::from_ref(&t), &secret, now).is_none());
        assert!(!in_force(std::slice::from_ref(&t), &t.hash, now));
        assert!(same(b"abc", b"abc") && !same(b"abc", b"abd") && !same(b"ab", b"abc"));
        assert!(valid_name("alice@laptop") && !valid_name("a b") && !valid_name(""));
    }
}
