//! Runs as JSON, streamed from SQLite straight to a writer: what `monitor runs --json`
//! prints, the same document `serde_json` makes of a `Vec<ToolRun>` (fields = columns, in
//! the same order), without building the rows in memory first. Over 100 000 runs this is
//! the difference between about a second and the 150 ms the design asks for.
//!
//! Strings are escaped for JSON and, beyond what JSON needs, DEL, the C1 controls and the
//! bidirectional overrides are written as `\uXXXX`: legal raw in JSON, but a terminal may
//! act on them, and the text is what tools wrote.

use crate::db::StoreError;
use std::io::{self};

/// Why an export stopped.
#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Io(#[from] io::Error),
}

/// The text, trimmed, when it is one whole JSON value.
pub(crate) fn valid_json(t: &[u8]) -> Option<&[u8]> {
    let t = t.trim_ascii();
    serde_json::from_slice::<serde::de::IgnoredAny>(t).ok()?;
    Some(t)
}

/// Whether `t` is a compact `["a","b"]` or `{"k":"v","k2":"v2"}` with only simple escapes
/// (`\"`, `\\`, `\/`, `\b`, `\f`, `\n`, `\r`, `\t`) and none of the bytes that start DEL,
/// C1 or a bidi override: when true, valid JSON that may be copied as it is.
pub(crate) fn flat_strings(t: &[u8]) -> bool {
    let (close, object) = match t.first() {
        Some(b'[') => (b']', false),
        Some(b'{') => (b'}', true),
        _ => return false,
    };
    let mut i = 1;
    if t.get(i) == Some(&close) {
        return i + 1 == t.len();
    }
    // A string starting at t[i]; returns the index after it.
    let string = |mut i: usize| -> Option<usize> {
        if t.get(i) != Some(&b'"') {
            return None;
        }
        i += 1;
        loop {
            match *t.get(i)? {
                b'"' => return Some(i + 1),
                b'\\' => {
                    if !matches!(
                        t.get(i + 1)?,
                        b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't'
                    ) {
                        return None;
                    }
                    i += 2;
                }
                b if b < 0x20 || matches!(b, 0x7f | 0xc2 | 0xe2) => return None,
                _ => i += 1,
            }
        }
    };
    loop {
        let Some(next) = string(i) else { return false };
        i = next;
        if object {
            if t.get(i) != Some(&b':') {
                return false;
            }
            let Some(next) = string(i + 1) else {
                return false;
            };
            i = next;
        }
        match t.get(i) {
            Some(b',') => i += 1,
            Some(&c) if c == close => return i + 1 == t.len(),
            _ => return false,
        }
    }
}

/// Stored (valid) JSON, re-emitted: as it is, unless it may hold raw terminal controls
/// (the bytes that start DEL, C1 and the bidi overrides), then parsed and written again.
pub(crate) fn write_raw_json(buf: &mut Vec<u8>, raw: &[u8]) {
    if !raw.iter().any(|&b| matches!(b, 0x7f | 0xc2 | 0xe2)) {
        buf.extend_from_slice(raw);
        return;
    }
    match serde_json::from_slice::<serde_json::Value>(raw) {
        Ok(v) => write_json_value(buf, &v),
        Err(_) => buf.extend_from_slice(b"null"),
    }
}

pub(crate) fn write_json_value(buf: &mut Vec<u8>, v: &serde_json::Value) {
    use serde_json::Value;
    match v {
        Value::String(s) => write_json_str(buf, s),
        Value::Array(a) => {
            buf.push(b'[');
            for (i, x) in a.iter().enumerate() {
                if i > 0 {
                    buf.push(b',');
                }
                write_json_value(buf, x);
            }
            buf.push(b']');
        }
        Value::Object(o) => {
            buf.push(b'{');
            for (i, (k, x)) in o.iter().enumerate() {
                if i > 0 {
                    buf.push(b',');
                }
                write_json_str(buf, k);
                buf.push(b':');
                write_json_value(buf, x);
            }
            buf.push(b'}');
        }
        other => buf.extend_from_slice(other.to_string().as_bytes()),
    }
}

pub(crate) fn itoa(n: i64, scratch: &mut [u8; 20]) -> &[u8] {
    let mut i = scratch.len();
    let neg = n < 0;
    let mut v = n.unsigned_abs();
    loop {
        i -= 1;
        scratch[i] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    if neg {
        // i64::MIN has 19 digits plus the sign: 20 bytes, which fit.
        i -= 1;
        scratch[i] = b'-';
    }
    &scratch[i..]
}

/// Whether a character is written as `\uXXXX` beyond JSON's own escapes.
/// JSON text (as serde writes it) with the characters a terminal may act on written as
/// `\uXXXX`; they can only occur inside its strings.
pub fn escape_risky(json: &str) -> String {
    let mut out = String::with_capacity(json.len());
    for c in json.chars() {
        if terminal_risky(c) {
            out.push_str(&format!("\\u{:04x}", c as u32));
        } else {
            out.push(c);
        }
    }
    out
}

pub(crate) fn terminal_risky(c: char) -> bool {
    matches!(c, '\u{7f}'..='\u{9f}' | '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// Bytes after which a string needs a closer look: JSON's own escapes (C0, `"`, `\`) and
/// the first bytes of DEL, C1 (`0xc2`) and the bidi overrides (`0xe2`).
const LOOK_CLOSER: [bool; 256] = {
    let mut t = [false; 256];
    let mut i = 0;
    while i < 0x20 {
        t[i] = true;
        i += 1;
    }
    t[b'"' as usize] = true;
    t[b'\\' as usize] = true;
    t[0x7f] = true;
    t[0xc2] = true;
    t[0xe2] = true;
    t
};

/// Text from the database as a JSON string literal: plain ASCII (the usual case) in one
/// pass, anything else checked as UTF-8 (invalid bytes become U+FFFD) and escaped.
pub(crate) fn write_json_bytes(buf: &mut Vec<u8>, t: &[u8]) {
    if t.iter().all(|&b| b < 0x80 && !LOOK_CLOSER[b as usize]) {
        buf.push(b'"');
        buf.extend_from_slice(t);
        buf.push(b'"');
        return;
    }
    match std::str::from_utf8(t) {
        Ok(s) => write_json_str(buf, s),
        Err(_) => write_json_str(buf, &String::from_utf8_lossy(t)),
    }
}

/// A JSON string literal, with terminal controls escaped too.
pub fn write_json_str(buf: &mut Vec<u8>, s: &str) {
    buf.push(b'"');
    if !s.bytes().any(|b| LOOK_CLOSER[b as usize]) {
        buf.extend_from_slice(s.as_bytes());
    } else {
        for c in s.chars() {
            match c {
                '"' => buf.extend_from_slice(b"\\\""),
                '\\' => buf.extend_from_slice(b"\\\\"),
                '\n' => buf.extend_from_slice(b"\\n"),
                '\r' => buf.extend_from_slice(b"\\r"),
                '\t' => buf.extend_from_slice(b"\\t"),
                '\u{8}' => buf.extend_from_slice(b"\\b"),
                '\u{c}' => buf.extend_from_slice(b"\\f"),
                c if (c as u32) < 0x20 || terminal_risky(c) => {
                    buf.extend_from_slice(format!("\\u{:04x}", c as u32).as_bytes())
                }
                c => {
                    let mut tmp = [0u8; 4];
                    buf.extend_from_slice(c.encode_utf8(&mut tmp).as_bytes());
                }
            }
        }
    }
    buf.push(b'"');
}
