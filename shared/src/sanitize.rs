//! Removing what a tool could use to drive an operator's terminal or hide text from them:
//! escape sequences, C0 and C1 control characters, bidirectional overrides and invisible
//! characters. Everything a tool wrote passes through here before it is stored as a
//! question, option or context, or drawn by `monitor`.

/// Text with escape sequences and control characters removed; newlines are kept and tabs
/// become spaces.
pub fn sanitize_text(s: &str) -> String {
    strip(s, false)
}

/// At most `max` characters: a longer `s` cut, ending in `…`.
pub fn clip(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        return s.to_owned();
    }
    let mut out: String = s.chars().take(max.saturating_sub(1)).collect();
    out.push('…');
    out
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

/// Control characters (C0 except newline and tab, DEL, C1), bidirectional controls that
/// could reorder what the operator reads, and characters that show nothing yet carry text.
pub fn is_unsafe(c: char) -> bool {
    c.is_control() || is_bidi_control(c) || is_invisible(c)
}

/// Unicode's Bidi_Control set: the Arabic letter mark, LRM/RLM, embeddings and overrides,
/// isolates.
fn is_bidi_control(c: char) -> bool {
    matches!(c, '\u{061c}' | '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// Characters a terminal draws as nothing (or as blank space that is not a space) while
/// they still carry text: Unicode's Default_Ignorable_Code_Point set — zero-width space and
/// joiners, the word joiner and invisible operators (U+2060–2064), the byte-order mark,
/// the soft hyphen, the combining grapheme joiner, Hangul fillers (U+115F, U+1160, U+3164,
/// U+FFA0), Khmer inherent vowels, Mongolian vowel separator and variation selectors, all
/// variation selectors (which can smuggle bytes behind an emoji), the tag characters
/// U+E0000–E0FFF (which spell a whole hidden sentence) — plus the interlinear annotation
/// marks (U+FFF9–FFFB, which hide their annotation) and the Unicode line and paragraph
/// separators, which some terminals take as line breaks.
pub fn is_invisible(c: char) -> bool {
    matches!(
        c,
        '\u{00ad}'
            | '\u{034f}'
            | '\u{115f}'
            | '\u{1160}'
            | '\u{17b4}'
            | '\u{17b5}'
            | '\u{180b}'..='\u{180f}'
            | '\u{200b}'..='\u{200d}'
            | '\u{2028}'
            | '\u{2029}'
            | '\u{2060}'..='\u{2065}'
            | '\u{206a}'..='\u{206f}'
            | '\u{3164}'
            | '\u{fe00}'..='\u{fe0f}'
            | '\u{feff}'
            | '\u{ffa0}'
            | '\u{fff0}'..='\u{fffb}'
            | '\u{1bca0}'..='\u{1bca3}'
            | '\u{1d173}'..='\u{1d17a}'
            | '\u{e0000}'..='\u{e0fff}'
    )
}

/// A name (a tool's, a path) for one line of a message on the shim's or the monitor's own
/// stderr: every [`is_unsafe`] character, newlines included, written as a `\u{…}` escape
/// and everything else as it is, so the reader sees what is there without the terminal
/// acting on it.
pub fn escape_name(s: &str) -> String {
    if !s.chars().any(is_unsafe) {
        return s.to_owned();
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        if is_unsafe(c) {
            out.extend(c.escape_unicode());
        } else {
            out.push(c);
        }
    }
    out
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

    /// Regression (issue 12.15): Unicode tag characters (which spell a whole sentence no
    /// terminal shows), invisible operators, the Mongolian vowel separator and the Hangul
    /// fillers went through untouched.
    #[test]
    fn invisible_characters_are_removed() {
        let hidden: String = "approve it"
            .chars()
            .map(|c| char::from_u32(0xE0000 + c as u32).unwrap())
            .collect();
        assert_eq!(
            sanitize_text(&format!("Deploy{hidden}?\u{e0001}\u{e007f}")),
            "Deploy?"
        );
        assert_eq!(
            sanitize_line("a\u{2061}b\u{2062}c\u{2063}d\u{2064}e"),
            "abcde"
        );
        assert_eq!(
            sanitize_line("x\u{180e}y\u{3164}z\u{115f}\u{1160}\u{ffa0}"),
            "xyz"
        );
        assert_eq!(sanitize_line("r\u{ad}m \u{34f}-\u{17b4}rf"), "rm -rf");
        assert_eq!(sanitize_line("ok\u{fe0f}\u{e0100}\u{e01ef}"), "ok");
        assert_eq!(
            sanitize_line("shown\u{fff9}hidden\u{fffa}\u{fffb}"),
            "shownhidden"
        );
        assert_eq!(sanitize_line("\u{1d173}beam\u{1d17a}\u{1bca0}"), "beam");
        // Visible neighbours stay: a non-breaking space, a Hangul letter, an emoji, CJK.
        let visible = "a\u{a0}b 한 ✓ 漢字 \u{2800}";
        assert_eq!(sanitize_text(visible), visible);
    }

    #[test]
    fn every_unsafe_character_is_escaped_in_a_name() {
        assert_eq!(escape_name("deploy.sh"), "deploy.sh");
        assert_eq!(
            escape_name("dep\x1b]0;x\x07loy\n\u{202e}\u{e0041}"),
            "dep\\u{1b}]0;x\\u{7}loy\\u{a}\\u{202e}\\u{e0041}"
        );
        assert_eq!(escape_name("überall ✓"), "überall ✓");
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
