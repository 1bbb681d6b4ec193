//! Decision links: a short-lived, single-use, signed URL to one approval for one operator,
//! as e-mail and chat carry them (`URL/#/l/TOKEN`). The token names the approval, the
//! operator (an operator token's name on `monitor serve`), when it ends, a nonce (what
//! makes it single-use: the server keeps the nonces used until they end) and whether the
//! link alone lets its holder decide (`link_only`, for a channel only that operator reads)
//! or the page still asks for the operator's login. Signed with HMAC-SHA-256 under the
//! server's link key (`STATE/link.key`, 0600); nothing in it is secret but the signature.
//!
//! `v1~AP-…~OPERATOR~EXPIRES~NONCE~MODE~SIG`: fields of URL-safe characters joined by `~`
//! (which no approval id, token name or number holds); MODE `l` (link only) or `a` (login);
//! SIG the hex HMAC of everything before it.

use hmac::{KeyInit, Mac};

type HmacSha256 = hmac::Hmac<sha2::Sha256>;

/// The longest a link may last.
pub const MAX_TTL_SECS: u64 = 7 * 24 * 3600;

/// What a link says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Link {
    pub approval_id: String,
    /// The operator it is for (a token name).
    pub operator: String,
    /// UNIX seconds after which it is refused.
    pub expires: u64,
    /// 32 hex digits, random: what the server remembers once the link is used.
    pub nonce: String,
    /// Whether the link alone lets its holder decide, as `operator`.
    pub link_only: bool,
}

/// Why a link is refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refused {
    /// Not a link, or not signed by this key: said as "no such link".
    Invalid,
    /// Its time is over.
    Expired,
}

fn mac(key: &[u8], signed: &str) -> HmacSha256 {
    let mut m = <HmacSha256 as KeyInit>::new_from_slice(key).expect("HMAC takes any key");
    m.update(signed.as_bytes());
    m
}

fn field_ok(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 64
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | '@'))
}

impl Link {
    /// The token for this link under `key`; `None` when a field cannot be carried.
    pub fn sign(&self, key: &[u8]) -> Option<String> {
        if !field_ok(&self.approval_id)
            || !field_ok(&self.operator)
            || self.nonce.len() != 32
            || !self.nonce.chars().all(|c| c.is_ascii_hexdigit())
        {
            return None;
        }
        let signed = format!(
            "v1~{}~{}~{}~{}~{}",
            self.approval_id,
            self.operator,
            self.expires,
            self.nonce,
            if self.link_only { "l" } else { "a" }
        );
        let sig = mac(key, &signed).finalize().into_bytes();
        Some(format!("{signed}~{}", crate::audit::hex(&sig)))
    }

    /// The link a token carries, if `key` signed it and it has not ended at `now` (UNIX
    /// seconds). The signature is compared in constant time, before anything else is
    /// believed.
    pub fn verify(token: &str, key: &[u8], now: u64) -> Result<Link, Refused> {
        let (signed, sig) = token.rsplit_once('~').ok_or(Refused::Invalid)?;
        let sig = crate::webhook::unhex(sig).ok_or(Refused::Invalid)?;
        mac(key, signed)
            .verify_slice(&sig)
            .map_err(|_| Refused::Invalid)?;
        let f: Vec<&str> = signed.split('~').collect();
        let [version, approval_id, operator, expires, nonce, mode] = f[..] else {
            return Err(Refused::Invalid);
        };
        let expires: u64 = expires.parse().map_err(|_| Refused::Invalid)?;
        if version != "v1" || !matches!(mode, "l" | "a") {
            return Err(Refused::Invalid);
        }
        if now >= expires {
            return Err(Refused::Expired);
        }
        Ok(Link {
            approval_id: approval_id.to_owned(),
            operator: operator.to_owned(),
            expires,
            nonce: nonce.to_owned(),
            link_only: mode == "l",
        })
    }
}

/// The URL of `token` on the web page at `base`.
pub fn url(base: &str, token: &str) -> String {
    format!("{}/#/l/{token}", base.trim_end_matches('/'))
}

/// A new random nonce (32 hex digits), or why there is none.
pub fn new_nonce() -> Result<String, String> {
    let mut bytes = [0u8; 16];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut bytes))
        .map_err(|e| format!("no randomness for a link: {e}"))?;
    Ok(crate::audit::hex(&bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn link(link_only: bool) -> Link {
        Link {
            approval_id: "AP-01KQ0000000000000000000000".into(),
            operator: "alice@ops".into(),
            expires: 2_000,
            nonce: "0123456789abcdef0123456789abcdef".into(),
            link_only,
        }
    }

    #[test]
    fn a_signed_link_reads_back_until_it_ends() {
        let key = b"k".repeat(32);
        for only in [true, false] {
            let t = link(only).sign(&key).unwrap();
            assert!(t.starts_with("v1~AP-01KQ"), "{t}");
            assert!(
                t.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "~.-_@".contains(c)),
                "URL-safe: {t}"
            );
            assert_eq!(Link::verify(&t, &key, 1_999), Ok(link(only)));
            assert_eq!(Link::verify(&t, &key, 2_000), Err(Refused::Expired));
        }
    }

    #[test]
    fn a_changed_field_another_key_or_garbage_is_no_link() {
        let key = b"k".repeat(32);
        let t = link(false).sign(&key).unwrap();
        // Made link-only, for another operator, or longer-lived: the signature fails.
        for forged in [
            t.replace("~a~", "~l~"),
            t.replace("alice@ops", "mallory"),
            t.replace("~2000~", "~9999~"),
        ] {
            assert_eq!(
                Link::verify(&forged, &key, 0),
                Err(Refused::Invalid),
                "{forged}"
            );
        }
        assert_eq!(Link::verify(&t, &b"x".repeat(32), 0), Err(Refused::Invalid));
        for junk in ["", "~", "v1~a~b", "v1~~~~~~zz", &"~".repeat(9)] {
            assert_eq!(Link::verify(junk, &key, 0), Err(Refused::Invalid), "{junk}");
        }
    }

    #[test]
    fn what_a_token_cannot_carry_makes_no_link() {
        let key = b"k".repeat(32);
        let mut l = link(true);
        l.operator = "a~b".into();
        assert_eq!(l.sign(&key), None);
        let mut l = link(true);
        l.nonce = "short".into();
        assert_eq!(l.sign(&key), None);
        assert_eq!(
            url("https://hr.example:8443/", "v1~x"),
            "https://hr.example:8443/#/l/v1~x"
        );
        assert_eq!(new_nonce().unwrap().len(), 32);
    }
}
