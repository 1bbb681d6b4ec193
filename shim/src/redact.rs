//! Masking the run's event token in the output stream before the run log and the screen
//! model get it (and through the screen, an approval's context): a tool that prints its
//! own event lines shows the token, and it must not be kept. The stream comes in chunks,
//! so a tail that could be the start of the token is held back until the next chunk shows
//! whether it is; the recorder releases a held tail when no chunk follows soon.

use hr_shared::event::EventToken;
use std::borrow::Cow;

/// The token masker of one output stream.
pub struct StreamRedactor {
    token: Option<EventToken>,
    held: Vec<u8>,
}

impl StreamRedactor {
    /// A masker for `token` (none: everything passes as it is).
    pub fn new(token: Option<EventToken>) -> StreamRedactor {
        StreamRedactor {
            token,
            held: Vec::new(),
        }
    }

    /// `chunk` with every whole token masked, less a tail that may be the start of one
    /// (held until the next chunk or [`StreamRedactor::release`]), after what was held.
    pub fn feed<'c>(&mut self, chunk: &'c [u8]) -> Cow<'c, [u8]> {
        let Some(token) = &self.token else {
            return Cow::Borrowed(chunk);
        };
        let data: Cow<'c, [u8]> = if self.held.is_empty() {
            Cow::Borrowed(chunk)
        } else {
            let mut joined = std::mem::take(&mut self.held);
            joined.extend_from_slice(chunk);
            Cow::Owned(joined)
        };
        let found = match token.redact_bytes(&data) {
            Cow::Owned(m) => Some(m),
            Cow::Borrowed(_) => None,
        };
        let masked = match found {
            Some(m) => Cow::Owned(m),
            None => data,
        };
        let keep = started_token(&masked, token.as_str().as_bytes());
        if keep == 0 {
            return masked;
        }
        let cut = masked.len() - keep;
        self.held = masked[cut..].to_vec();
        match masked {
            Cow::Borrowed(b) => Cow::Borrowed(&b[..cut]),
            Cow::Owned(mut v) => {
                v.truncate(cut);
                Cow::Owned(v)
            }
        }
    }

    /// Whether a tail is held back.
    pub fn holding(&self) -> bool {
        !self.held.is_empty()
    }

    /// The held tail, as it is: no token followed it in time.
    pub fn release(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.held)
    }
}

/// The length of the longest tail of `data` that is a proper start of `token`.
fn started_token(data: &[u8], token: &[u8]) -> usize {
    let longest = data.len().min(token.len() - 1);
    (1..=longest)
        .rev()
        .find(|&k| data[data.len() - k..] == token[..k])
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    const TOKEN: &str = "0123456789abcdef0123456789abcdef";
    const MASK: &str = "********************************";

    fn redactor() -> StreamRedactor {
        StreamRedactor::new(EventToken::from_hex(TOKEN))
    }

    /// Feeds `chunks` and releases at the end: what the run log would hold.
    fn through(chunks: &[&[u8]]) -> String {
        let mut r = redactor();
        let mut out = Vec::new();
        for c in chunks {
            out.extend_from_slice(&r.feed(c));
        }
        out.extend(r.release());
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn whole_tokens_are_masked_in_place() {
        let text = format!("a {TOKEN} b {TOKEN}\n");
        assert_eq!(through(&[text.as_bytes()]), format!("a {MASK} b {MASK}\n"));
    }

    #[test]
    fn a_token_split_across_chunks_is_masked() {
        let text = format!("token {TOKEN} end");
        let bytes = text.as_bytes();
        for cut in 1..bytes.len() {
            assert_eq!(
                through(&[&bytes[..cut], &bytes[cut..]]),
                format!("token {MASK} end"),
                "cut at {cut}"
            );
        }
        // One byte at a time.
        let singles: Vec<&[u8]> = bytes.chunks(1).collect();
        assert_eq!(through(&singles), format!("token {MASK} end"));
    }

    #[test]
    fn only_a_possible_start_is_held_and_nothing_is_lost() {
        let mut r = redactor();
        assert_eq!(&*r.feed(b"Proceed? [y/N] "), b"Proceed? [y/N] ");
        assert!(!r.holding());
        assert_eq!(&*r.feed(b"x 0123"), b"x ");
        assert!(r.holding());
        assert_eq!(&*r.feed(b"4 and more"), b"01234 and more");
        assert!(!r.holding());
        assert_eq!(&*r.feed(b"ends in 0"), b"ends in ");
        assert_eq!(r.release(), b"0");
        assert!(!r.holding());
    }

    #[test]
    fn without_a_token_everything_passes() {
        let mut r = StreamRedactor::new(None);
        let text = format!("{TOKEN} 0123");
        assert!(matches!(r.feed(text.as_bytes()), Cow::Borrowed(_)));
        assert!(!r.holding());
    }
}
