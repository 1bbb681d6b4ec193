//! The append-only audit table `events`: every status change and decision, each row
//! carrying the hash of the one before, so an edited or deleted row shows.

use serde::Serialize;
use sha2::{Digest, Sha256};

/// The `prev_hash` of the first row.
pub const GENESIS: &str = "0000000000000000000000000000000000000000000000000000000000000000";

/// One audit row.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AuditRow {
    pub id: i64,
    pub at: String,
    pub event: String,
    pub tool_run_id: Option<String>,
    pub approval_id: Option<String>,
    pub actor: String,
    pub data: String,
    pub prev_hash: String,
    pub hash: String,
}

/// What is appended: the row without id and hashes.
#[derive(Debug, Clone)]
pub struct AuditEntry<'a> {
    pub event: &'a str,
    pub tool_run_id: Option<&'a str>,
    pub approval_id: Option<&'a str>,
    pub actor: &'a str,
    pub data: serde_json::Value,
}

/// The hash of one row: SHA-256 over the previous hash and every field, each
/// length-prefixed so that no two different rows can encode alike.
pub fn chain_hash(
    prev: &str,
    at: &str,
    event: &str,
    tool_run_id: Option<&str>,
    approval_id: Option<&str>,
    actor: &str,
    data: &str,
) -> String {
    let mut h = Sha256::new();
    for field in [
        Some(prev),
        Some(at),
        Some(event),
        tool_run_id,
        approval_id,
        Some(actor),
        Some(data),
    ] {
        match field {
            Some(s) => {
                h.update([1u8]);
                h.update((s.len() as u64).to_le_bytes());
                h.update(s.as_bytes());
            }
            None => h.update([0u8]),
        }
    }
    hex(&h.finalize())
}

/// Lower-case hex of bytes.
pub fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(DIGITS[(b >> 4) as usize] as char);
        s.push(DIGITS[(b & 0xf) as usize] as char);
    }
    s
}

/// The result of checking the chain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChainReport {
    /// Rows checked.
    pub rows: u64,
    /// Every problem found, with the row id it concerns.
    pub problems: Vec<(i64, String)>,
    /// Each chain's last row, id and hash, oldest first (one chain on SQLite; one per login
    /// on PostgreSQL): what a later check finds again unless a chain was replaced, emptied
    /// or cut back.
    pub heads: Vec<(i64, String)>,
}

impl ChainReport {
    /// No problem found.
    pub fn intact(&self) -> bool {
        self.problems.is_empty()
    }
}
