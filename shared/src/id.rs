//! Identifiers: `TR-…` for tool runs, `AP-…` for approvals, `EX-…` for executions.
//!
//! Each id is a prefix plus a ULID-shaped body: 48 bits of Unix milliseconds and 80 random
//! bits from the kernel, in Crockford base32. Ids sort by creation time as plain strings and
//! collide across processes and hosts only with negligible probability.

use std::time::{SystemTime, UNIX_EPOCH};

const CROCKFORD: &[u8; 32] = b"0123456789ABCDEFGHJKMNPQRSTVWXYZ";
const BODY_LEN: usize = 26;

/// Prefix of tool-run ids.
pub const RUN_PREFIX: &str = "TR-";
/// Prefix of approval ids.
pub const APPROVAL_PREFIX: &str = "AP-";
/// Prefix of execution ids (groups of runs).
pub const EXECUTION_PREFIX: &str = "EX-";

/// A new tool-run id.
pub fn new_run_id() -> String {
    new_id(RUN_PREFIX)
}

/// A new approval id.
pub fn new_approval_id() -> String {
    new_id(APPROVAL_PREFIX)
}

/// A new execution id.
pub fn new_execution_id() -> String {
    new_id(EXECUTION_PREFIX)
}

/// A new id with any prefix (`PO-` for policies).
pub fn new_id(prefix: &str) -> String {
    let millis = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0);
    let mut out = String::with_capacity(prefix.len() + BODY_LEN);
    out.push_str(prefix);
    out.push_str(&encode(millis, random_u128()));
    out
}

/// Encodes 48 bits of time and 80 bits of randomness as 26 Crockford base32 characters.
fn encode(millis: u64, random: u128) -> String {
    let value: u128 = ((u128::from(millis) & ((1 << 48) - 1)) << 80) | (random & ((1 << 80) - 1));
    let mut buf = [0u8; BODY_LEN];
    for (i, slot) in buf.iter_mut().enumerate() {
        let shift = 5 * (BODY_LEN - 1 - i);
        *slot = CROCKFORD[((value >> shift) & 0x1f) as usize];
    }
    buf.iter().map(|&b| b as char).collect()
}

fn random_u128() -> u128 {
    let mut bytes = [0u8; 16];
    if !random_bytes(&mut bytes) {
        // getrandom(2) is missing or failing: fall back to a time/pid mix, which keeps ids
        // unique within this host even though they are no longer unpredictable.
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        return nanos ^ (u128::from(std::process::id()) << 64);
    }
    u128::from_le_bytes(bytes)
}

/// Fills `buf` from the kernel's random source (getrandom(2), else `/dev/urandom`); false
/// when neither gives enough.
pub(crate) fn random_bytes(buf: &mut [u8]) -> bool {
    let mut filled = 0;
    while filled < buf.len() {
        // SAFETY: the pointer and length describe the unfilled tail of `buf`.
        let n =
            unsafe { libc::getrandom(buf[filled..].as_mut_ptr().cast(), buf.len() - filled, 0) };
        if n <= 0 {
            break;
        }
        filled += n as usize;
    }
    if filled == buf.len() {
        return true;
    }
    use std::io::Read;
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(buf))
        .is_ok()
}

/// Whether `s` looks like an id with the given prefix (prefix plus 26 base32 characters).
pub fn has_shape(s: &str, prefix: &str) -> bool {
    s.strip_prefix(prefix).is_some_and(|body| {
        body.len() == BODY_LEN
            && body
                .bytes()
                .all(|b| CROCKFORD.contains(&b.to_ascii_uppercase()))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_have_prefix_and_shape() {
        let id = new_run_id();
        assert!(has_shape(&id, RUN_PREFIX), "{id}");
        assert!(!has_shape(&id, APPROVAL_PREFIX));
        assert!(has_shape(&new_approval_id(), APPROVAL_PREFIX));
        assert!(!has_shape("TR-short", RUN_PREFIX));
    }

    #[test]
    fn ids_sort_by_time() {
        let early = encode(1_000, u128::MAX);
        let late = encode(1_001, 0);
        assert!(early < late);
    }

    #[test]
    fn ids_are_unique() {
        let mut ids: Vec<String> = (0..10_000).map(|_| new_run_id()).collect();
        ids.sort();
        ids.dedup();
        assert_eq!(ids.len(), 10_000);
    }

    #[test]
    fn encode_is_crockford() {
        assert_eq!(encode(0, 0), "0".repeat(26));
        assert_eq!(encode(0, 31), format!("{}Z", "0".repeat(25)));
    }
}
