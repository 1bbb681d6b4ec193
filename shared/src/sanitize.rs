//! Removing what a tool could use to drive an operator's terminal: escape sequences, C0
//! and C1 control characters and bidirectional overrides. Everything a tool wrote passes
//! through here before it is stored as context or drawn by the dashboard.

/// Text with escape sequences and control characters removed; newlines are kept and tabs
/// become spaces.
pub fn sanitize_text(s: &str) -> String {
    strip(s, false)
}

/// One line: like [`sanitize_text`], with newlines also turned into spaces.
pub fn sanitize_line(s: &str) -> String {
    strip(s, true)
}

/// Bytes as (lossy) UTF-8, sanitized as text.
pub fn sanitize_bytes(b: &[u8]) -> String {
    sanitize_text(&String::from_utf8_lossy(b))
}

#[derive(Clone, Copy, PartialEq)]
enum State {
    Text,
    /// After ESC.
    Escape,
    /// Inside CSI: parameters until a final byte 0x40..=0x7e.
    Csi,
    /// Inside OSC/DCS/SOS/PM/APC: until BEL or ST (ESC \).
    Str,
    /// ESC seen inside a string: `\` ends it.
    StrEscape,
    /// After ESC and an intermediate byte (e.g. `ESC ( B`): one more byte ends it.
    EscIntermediate,
}

fn strip(s: &str, one_line: bool) -> String {
    let mut out = String::with_capacity(s.len());
    let mut state = State::Text;
    for c in s.chars() {
        state = match state {
            State::Text => match c {
                '\u{1b}' => State::Escape,
                '\u{9b}' => State::Csi,
                '\u{90}' | '\u{98}' | '\u{9d}' | '\u{9e}' | '\u{9f}' => State::Str,
                '\n' => {
                    out.push(if one_line { ' ' } else { '\n' });
                    State::Text
                }
                '\t' => {
                    out.push(' ');
                    State::Text
                }
                c if is_unsafe(c) => State::Text,
                c => {
                    out.push(c);
                    State::Text
                }
            },
            State::Escape => match c {
                '[' => State::Csi,
                ']' | 'P' | 'X' | '^' | '_' => State::Str,
                ' '..='/' => State::EscIntermediate,
                _ => State::Text,
            },
            State::EscIntermediate => State::Text,
            State::Csi => match c {
                '\u{40}'..='\u{7e}' => State::Text,
                // A control character aborts the sequence rather than being swallowed.
                '\u{1b}' => State::Escape,
                _ => State::Csi,
            },
            State::Str => match c {
                '\u{7}' | '\u{9c}' => State::Text,
                '\u{1b}' => State::StrEscape,
                _ => State::Str,
            },
            State::StrEscape => match c {
                '\\' => State::Text,
                '\u{1b}' => State::StrEscape,
                _ => State::Str,
            },
        };
    }
    out
}

/// Control characters (C0 except newline and tab, DEL, C1) and bidirectional controls
/// that could reorder what the operator reads (Unicode's Bidi_Control set: the Arabic
/// letter mark, LRM/RLM, embeddings and overrides, isolates).
fn is_unsafe(c: char) -> bool {
    c.is_control()
        // Bidirectional controls: they reorder what the operator reads.
        || matches!(c, '\u{061c}' | '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
        // Invisible characters that hide or split text (zero-width space, joiners, word
        // joiner, byte-order mark) and the Unicode line and paragraph separators, which
        // some terminals take as line breaks.
        || matches!(c, '\u{200b}'..='\u{200d}' | '\u{2060}' | '\u{feff}' | '\u{2028}' | '\u{2029}')
}

/// Whether a question reads like it asks for a secret: a password or passphrase, a token,
/// a secret, an API or unseal key, a PIN, a one-time or 2FA/MFA code, an access code,
/// credentials, a private key.
pub fn looks_like_secret_request(text: &str) -> bool {
    let t = text.to_lowercase();
    let words: Vec<&str> = t
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .collect();
    let has = |w: &str| words.contains(&w);
    let pair = |a: &str, b: &str| words.windows(2).any(|p| p[0] == a && p[1] == b);
    [
        "password",
        "passwd",
        "passphrase",
        "token",
        "secret",
        "credentials",
        "credential",
        "pin",
        "otp",
        "2fa",
        "mfa",
        "totp",
        "apikey",
    ]
    .iter()
    .any(|w| has(w))
        || pair("api", "key")
        || pair("unseal", "key")
        || pair("private", "key")
        || pair("access", "code")
        || pair("access", "key")
        || pair("one", "time")
        || pair("verification", "code")
        || pair("security", "code")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secret_requests_are_told_by_their_words() {
        for q in [
            "Password: ",
            "Enter passphrase for key '/root/.ssh/id_ed25519': ",
            "GitHub token: ",
            "Enter Gemini API Key",
            "Unseal Key (will be hidden): ",
            "Enter your PIN:",
            "2FA code: ",
            "One-time code:",
            "Access code?",
            "AWS Secret Access Key [None]: ",
        ] {
            assert!(looks_like_secret_request(q), "{q}");
        }
        for q in [
            "Project name: ",
            "Do you want to continue? [Y/n] ",
            "Keyboard layout? ",
            "Username for 'https://github.com': ",
            "Spinning up 3 instances, proceed?",
        ] {
            assert!(!looks_like_secret_request(q), "{q}");
        }
    }

    #[test]
    fn removes_colours_and_cursor_moves() {
        assert_eq!(
            sanitize_text("\x1b[1;31mDo it?\x1b[0m [y/N] "),
            "Do it? [y/N] "
        );
        assert_eq!(sanitize_text("a\x1b[2J\x1b[H\x1b[10;5Hb"), "ab");
        assert_eq!(sanitize_text("x\x1b(By"), "xy");
        assert_eq!(sanitize_text("x\x1b7y\x1b8"), "xy");
    }

    #[test]
    fn removes_osc_and_dcs_strings() {
        assert_eq!(sanitize_text("\x1b]0;pwned title\x07ok"), "ok");
        assert_eq!(
            sanitize_text("\x1b]8;;http://evil\x1b\\link\x1b]8;;\x1b\\"),
            "link"
        );
        assert_eq!(sanitize_text("\x1bPq#0;2;0;0;0\x1b\\after"), "after");
    }

    #[test]
    fn removes_controls_and_bidi() {
        assert_eq!(sanitize_text("a\x07b\x08c\rd\x7fe\u{85}f"), "abcdef");
        assert_eq!(sanitize_text("safe\u{202e}txt.exe"), "safetxt.exe");
        assert_eq!(
            sanitize_text("rm\u{200b} -rf\u{feff} /\u{2028}x\u{2060}y"),
            "rm -rf /xy"
        );
        assert_eq!(sanitize_text("a\tb\nc"), "a b\nc");
        assert_eq!(sanitize_line("a\nb"), "a b");
    }

    /// Found by the fuzz target (shared/tests/fuzz.rs): U+061C ARABIC LETTER MARK, a
    /// bidi control like RLM, went through untouched.
    #[test]
    fn arabic_letter_mark_is_removed() {
        assert_eq!(sanitize_text("a\u{61c}b"), "ab");
        assert_eq!(sanitize_line("\u{61c}"), "");
    }

    #[test]
    fn unterminated_sequences_do_not_leak() {
        assert_eq!(sanitize_text("ok\x1b["), "ok");
        assert_eq!(sanitize_text("ok\x1b]2;title never ends"), "ok");
        assert_eq!(sanitize_text("\u{9b}31mred"), "red");
    }

    #[test]
    fn plain_and_unicode_text_is_untouched() {
        let s = "Überschreiben? (j/N) — ok ✓";
        assert_eq!(sanitize_text(s), s);
        assert_eq!(sanitize_bytes(b"caf\xc3\xa9 \xff"), "café \u{fffd}");
    }
}
