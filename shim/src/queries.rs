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
//! | `OSC 10 ; ?` / `OSC 11 ; ?` (foreground / background colour) | `OSC 10 ; rgb:ffff/ffff/ffff` / `OSC 11 ; rgb:0000/0000/0000`, ended as the query was (BEL or ST) |
//! | `CSI ? Ps $ p` (DECRQM, is private mode Ps set?) | `CSI ? Ps ; 1 $ y` set / `2` reset for the modes the screen model tracks (1 cursor keys, 25 cursor shown, 1049/1047/47 alternate screen, 2004 bracketed paste, 66 keypad), `0` (not recognised) for others |
//!
//! The kitty keyboard query (`CSI ? u`) gets no reply, as from any terminal without that
//! protocol: tools send it followed by a device-attributes query and take the answer to that
//! as "not supported". The replies go to the tool's input, never to the output.

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
    /// `OSC 10/11 ; ?`: the default foreground (10) or background (11) colour; `st`: ended
    /// with ST (`ESC \`) rather than BEL.
    Colour {
        which: u8,
        st: bool,
    },
    /// DECRQM for private mode `mode`.
    Mode(u16),
}

/// What the replies are made from: the screen model at the moment of the query.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TermState {
    /// Zero-based (row, column).
    pub cursor: (u16, u16),
    pub app_cursor: bool,
    pub hide_cursor: bool,
    pub alternate_screen: bool,
    pub bracketed_paste: bool,
    pub app_keypad: bool,
}

impl TermState {
    /// Whether private mode `mode` is set, for the modes the model tracks.
    fn mode(&self, mode: u16) -> Option<bool> {
        Some(match mode {
            1 => self.app_cursor,
            25 => !self.hide_cursor,
            47 | 1047 | 1049 => self.alternate_screen,
            66 => self.app_keypad,
            2004 => self.bracketed_paste,
            _ => return None,
        })
    }
}

/// The longest query kept while waiting for its end (`ESC [ ? 12345 $ p`, `ESC ] 11 ; ? ESC \`).
const LONGEST: usize = 12;

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

#[derive(Debug)]
enum Parsed {
    Query(Query, usize),
    Other,
    /// The bytes so far could still become a query.
    Incomplete,
}

fn parse(b: &[u8]) -> Parsed {
    const FIXED: &[(&[u8], Query)] = &[
        (b"\x1b[6n", Query::CursorPosition { private: false }),
        (b"\x1b[?6n", Query::CursorPosition { private: true }),
        (b"\x1b[5n", Query::Status),
        (b"\x1b[c", Query::PrimaryAttributes),
        (b"\x1b[0c", Query::PrimaryAttributes),
        (b"\x1b[>c", Query::SecondaryAttributes),
        (b"\x1b[>0c", Query::SecondaryAttributes),
    ];
    let mut could_be = false;
    for (seq, q) in FIXED {
        if b.starts_with(seq) {
            return Parsed::Query(*q, seq.len());
        }
        if b.len() < seq.len() && seq.starts_with(b) {
            could_be = true;
        }
    }
    let shaped = match (b.get(1), b.get(2)) {
        (Some(b']'), _) => parse_colour(b),
        (Some(b'['), Some(b'?')) => parse_decrqm(b),
        _ => Parsed::Other,
    };
    match shaped {
        Parsed::Other if could_be => Parsed::Incomplete,
        Parsed::Incomplete if b.len() >= LONGEST => Parsed::Other,
        other => other,
    }
}

/// `ESC ] 10 ; ? BEL` / `ESC ] 11 ; ? ESC \`.
fn parse_colour(b: &[u8]) -> Parsed {
    for which in [b"10", b"11"] {
        let head = [b"\x1b]".as_slice(), which.as_slice(), b";?"].concat();
        if b.len() < head.len() {
            if head.starts_with(b) {
                return Parsed::Incomplete;
            }
            continue;
        }
        if !b.starts_with(&head) {
            continue;
        }
        let which = if which == b"10" { 10 } else { 11 };
        return match &b[head.len()..] {
            [0x07, ..] => Parsed::Query(Query::Colour { which, st: false }, head.len() + 1),
            [0x1b, b'\\', ..] => Parsed::Query(Query::Colour { which, st: true }, head.len() + 2),
            [] | [0x1b] => Parsed::Incomplete,
            _ => Parsed::Other,
        };
    }
    Parsed::Other
}

/// `ESC [ ? Ps $ p`.
fn parse_decrqm(b: &[u8]) -> Parsed {
    let digits = b[3..].iter().take_while(|c| c.is_ascii_digit()).count();
    let rest = &b[3 + digits..];
    if digits == 0 {
        return if rest.is_empty() {
            Parsed::Incomplete
        } else {
            Parsed::Other
        };
    }
    let Ok(mode) = std::str::from_utf8(&b[3..3 + digits])
        .unwrap_or("")
        .parse::<u16>()
    else {
        return Parsed::Other;
    };
    match rest {
        [b'$', b'p', ..] => Parsed::Query(Query::Mode(mode), 3 + digits + 2),
        [] | [b'$'] => Parsed::Incomplete,
        _ => Parsed::Other,
    }
}

/// The terminal's reply to `q`.
pub fn reply(q: Query, t: &TermState) -> Vec<u8> {
    let (row, col) = (u32::from(t.cursor.0) + 1, u32::from(t.cursor.1) + 1);
    match q {
        Query::CursorPosition { private: false } => format!("\x1b[{row};{col}R").into_bytes(),
        Query::CursorPosition { private: true } => format!("\x1b[?{row};{col}R").into_bytes(),
        Query::Status => b"\x1b[0n".to_vec(),
        Query::PrimaryAttributes => b"\x1b[?1;2c".to_vec(),
        Query::SecondaryAttributes => b"\x1b[>0;0;0c".to_vec(),
        Query::Colour { which, st } => {
            let rgb = if which == 10 {
                "ffff/ffff/ffff"
            } else {
                "0000/0000/0000"
            };
            let end = if st { "\x1b\\" } else { "\x07" };
            format!("\x1b]{which};rgb:{rgb}{end}").into_bytes()
        }
        Query::Mode(mode) => {
            let state = match t.mode(mode) {
                Some(true) => 1,
                Some(false) => 2,
                None => 0,
            };
            format!("\x1b[?{mode};{state}$y").into_bytes()
        }
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
        // Look-alikes are not queries: colours, cursor moves, other reports, mode sets.
        assert!(
            s.scan(b"\x1b[6;1H\x1b[0m\x1b[16n\x1b[6m\x1b[?25l\x1b]0;title\x07\x1b[?1049h")
                .is_empty()
        );
        // An escape that goes nowhere is not carried for ever.
        assert!(s.scan(b"\x1b").is_empty());
        assert!(s.scan(b"x").is_empty());
        assert!(s.scan(b"[6n").is_empty(), "the ESC was followed by x");
    }

    #[test]
    fn colour_and_mode_queries_are_found_and_answered() {
        let mut s = Scanner::default();
        assert_eq!(
            s.scan(b"\x1b]11;?\x07\x1b]10;?\x1b\\\x1b[?2004$p\x1b[?u"),
            [
                Query::Colour {
                    which: 11,
                    st: false
                },
                Query::Colour {
                    which: 10,
                    st: true
                },
                Query::Mode(2004),
            ]
        );
        // Split in the middle of each.
        assert!(s.scan(b"\x1b]1").is_empty());
        assert_eq!(
            s.scan(b"1;?\x07"),
            [Query::Colour {
                which: 11,
                st: false
            }]
        );
        assert!(s.scan(b"\x1b[?10").is_empty());
        assert!(s.scan(b"49$").is_empty());
        assert_eq!(s.scan(b"p"), [Query::Mode(1049)]);
        let t = TermState {
            bracketed_paste: true,
            ..TermState::default()
        };
        assert_eq!(
            reply(
                Query::Colour {
                    which: 11,
                    st: false
                },
                &t
            ),
            b"\x1b]11;rgb:0000/0000/0000\x07"
        );
        assert_eq!(
            reply(
                Query::Colour {
                    which: 10,
                    st: true
                },
                &t
            ),
            b"\x1b]10;rgb:ffff/ffff/ffff\x1b\\"
        );
        assert_eq!(reply(Query::Mode(2004), &t), b"\x1b[?2004;1$y");
        assert_eq!(reply(Query::Mode(1049), &t), b"\x1b[?1049;2$y");
        assert_eq!(reply(Query::Mode(9999), &t), b"\x1b[?9999;0$y");
    }

    #[test]
    fn replies_are_one_based_like_a_terminals() {
        let at = |row, col| TermState {
            cursor: (row, col),
            ..TermState::default()
        };
        assert_eq!(
            reply(Query::CursorPosition { private: false }, &at(0, 0)),
            b"\x1b[1;1R"
        );
        assert_eq!(
            reply(Query::CursorPosition { private: true }, &at(4, 16)),
            b"\x1b[?5;17R"
        );
        assert_eq!(reply(Query::Status, &at(0, 0)), b"\x1b[0n");
        assert_eq!(reply(Query::PrimaryAttributes, &at(0, 0)), b"\x1b[?1;2c");
    }
}
