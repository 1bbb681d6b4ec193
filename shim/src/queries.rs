//! The terminal's side of the questions a tool asks its terminal. The pty is the tool's
//! terminal: a tool that asks where the cursor is (prompt_toolkit before every prompt,
//! aider, Node readline) waits for the reply, and without one it stalls or warns ("your
//! terminal doesn't support cursor position requests (CPR)") and redraws. When no real
//! terminal sees the tool's output (the shim's stdout is a file or a pipe, as in CI), the
//! shim replies as an xterm-like terminal does, from its own model of the screen:
//!
//! | query | reply |
//! | --- | --- |
//! | `CSI 6 n` (cursor position) | `CSI row ; col R` |
//! | `CSI ? 6 n` (DEC cursor position) | `CSI ? row ; col R` |
//! | `CSI 5 n` (status) | `CSI 0 n` (OK) |
//! | `CSI c`, `CSI 0 c` (primary device attributes) | `CSI ? 1 ; 2 c` (VT100 with advanced video) |
//! | `CSI > c`, `CSI > 0 c` (secondary device attributes) | `CSI > 0 ; 0 ; 0 c` |
//!
//! The replies go to the tool's input, never to the output.

/// A question to the terminal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Query {
    /// Where the cursor is; `private`: the DEC form (`CSI ? 6 n`).
    CursorPosition {
        private: bool,
    },
    Status,
    PrimaryAttributes,
    SecondaryAttributes,
}

/// The longest query, `ESC [ > 0 c` or `ESC [ ? 6 n`.
const LONGEST: usize = 5;

/// Finds queries in output read in pieces: a query split across two reads is found once
/// the second arrives.
#[derive(Debug, Default)]
pub struct Scanner {
    carry: Vec<u8>,
}

impl Scanner {
    /// The queries in `data`, in order.
    pub fn scan(&mut self, data: &[u8]) -> Vec<Query> {
        // Fast path: no escape at all and nothing carried.
        if self.carry.is_empty() && !data.contains(&0x1b) {
            return Vec::new();
        }
        let mut buf = std::mem::take(&mut self.carry);
        buf.extend_from_slice(data);
        let mut found = Vec::new();
        let mut i = 0;
        while let Some(off) = buf[i..].iter().position(|&b| b == 0x1b) {
            let at = i + off;
            match parse(&buf[at..]) {
                Parsed::Query(q, len) => {
                    found.push(q);
                    i = at + len;
                }
                Parsed::Other => i = at + 1,
                Parsed::Incomplete => {
                    self.carry = buf[at..].to_vec();
                    return found;
                }
            }
        }
        found
    }
}

enum Parsed {
    Query(Query, usize),
    Other,
    /// The bytes so far could still become a query.
    Incomplete,
}

fn parse(b: &[u8]) -> Parsed {
    const QUERIES: &[(&[u8], Query)] = &[
        (b"\x1b[6n", Query::CursorPosition { private: false }),
        (b"\x1b[?6n", Query::CursorPosition { private: true }),
        (b"\x1b[5n", Query::Status),
        (b"\x1b[c", Query::PrimaryAttributes),
        (b"\x1b[0c", Query::PrimaryAttributes),
        (b"\x1b[>c", Query::SecondaryAttributes),
        (b"\x1b[>0c", Query::SecondaryAttributes),
    ];
    let mut could_be = false;
    for (seq, q) in QUERIES {
        if b.starts_with(seq) {
            return Parsed::Query(*q, seq.len());
        }
        if b.len() < seq.len() && seq.starts_with(b) {
            could_be = true;
        }
    }
    if could_be && b.len() < LONGEST {
        Parsed::Incomplete
    } else {
        Parsed::Other
    }
}

/// The terminal's reply to `q`, with the cursor at zero-based `(row, col)`.
pub fn reply(q: Query, cursor: (u16, u16)) -> Vec<u8> {
    let (row, col) = (u32::from(cursor.0) + 1, u32::from(cursor.1) + 1);
    match q {
        Query::CursorPosition { private: false } => format!("\x1b[{row};{col}R").into_bytes(),
        Query::CursorPosition { private: true } => format!("\x1b[?{row};{col}R").into_bytes(),
        Query::Status => b"\x1b[0n".to_vec(),
        Query::PrimaryAttributes => b"\x1b[?1;2c".to_vec(),
        Query::SecondaryAttributes => b"\x1b[>0;0;0c".to_vec(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queries_are_found_whole_or_split_across_reads() {
        let mut s = Scanner::default();
        assert!(s.scan(b"plain text").is_empty());
        assert_eq!(
            s.scan(b"\x1b[?2004h\x1b[6nabc\x1b[c"),
            [
                Query::CursorPosition { private: false },
                Query::PrimaryAttributes
            ]
        );
        // Split: the start is carried to the next read.
        assert!(s.scan(b"drawn\x1b[").is_empty());
        assert_eq!(s.scan(b"6n"), [Query::CursorPosition { private: false }]);
        assert!(s.scan(b"\x1b[?").is_empty());
        assert_eq!(
            s.scan(b"6n\x1b[>c"),
            [
                Query::CursorPosition { private: true },
                Query::SecondaryAttributes
            ]
        );
        // Look-alikes are not queries: colours, cursor moves, other reports.
        assert!(
            s.scan(b"\x1b[6;1H\x1b[0m\x1b[16n\x1b[6m\x1b[?25l")
                .is_empty()
        );
        // An escape that goes nowhere is not carried for ever.
        assert!(s.scan(b"\x1b").is_empty());
        assert!(s.scan(b"x").is_empty());
        assert!(s.scan(b"[6n").is_empty(), "the ESC was followed by x");
    }

    #[test]
    fn replies_are_one_based_like_a_terminals() {
        assert_eq!(
            reply(Query::CursorPosition { private: false }, (0, 0)),
            b"\x1b[1;1R"
        );
        assert_eq!(
            reply(Query::CursorPosition { private: true }, (4, 16)),
            b"\x1b[?5;17R"
        );
        assert_eq!(reply(Query::Status, (0, 0)), b"\x1b[0n");
        assert_eq!(reply(Query::PrimaryAttributes, (0, 0)), b"\x1b[?1;2c");
    }
}
