//! Command lines to copy and paste: words a POSIX shell reads back as they were.

/// A command line as a POSIX shell would read it back: words with nothing special left
/// bare, the rest single-quoted (`'it'\''s'`), an empty word as `''`.
pub fn words<S: AsRef<str>>(argv: &[S]) -> String {
    argv.iter()
        .map(|w| quote(w.as_ref()))
        .collect::<Vec<_>>()
        .join(" ")
}

/// One word, quoted only when it needs to be.
pub fn quote(w: &str) -> String {
    let plain = !w.is_empty()
        && w.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./:=@%+,".contains(c));
    if plain {
        w.to_owned()
    } else {
        format!("'{}'", w.replace('\'', "'\\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_quote_what_a_shell_would_split() {
        let argv = ["rm", "-i", "my file", "it's", "", "a=b"];
        assert_eq!(words(&argv), "rm -i 'my file' 'it'\\''s' '' a=b");
    }
}
