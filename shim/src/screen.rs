//! Reading the tool's screen as a person would: the terminal emulator has already applied
//! colours, cursor moves and redraws; what is left is plain text, the cursor's line (the
//! prompt line), the last non-empty lines (the question), and whether anything is asked
//! at all.

use hr_shared::prompt;

/// What the screen shows at one instant.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ScreenText {
    /// The visible rows, trailing blanks removed.
    pub rows: Vec<String>,
    /// The cursor's row up to the cursor, trailing blanks removed.
    pub prompt_line: String,
    pub cursor_row: usize,
    /// The terminal is in application cursor-key mode (DECCKM): arrows send `ESC O A`.
    pub app_cursor: bool,
    /// A full-screen program draws: the alternate screen or mouse reporting is on. Its
    /// keys are commands (^D quits), so a read with nothing asked is never answered.
    pub full_screen: bool,
    /// The cursor is hidden (DECTCEM off): where it stands is not where the tool asks.
    pub cursor_hidden: bool,
    /// How each character of each row is drawn, as [`emphasis`] scores it (`rows[i]`'s
    /// chars, one for one; an empty row where the two cannot be lined up): which word of a
    /// toggle is the current one, which text is a placeholder.
    pub emphasis: Vec<Vec<i8>>,
}

/// How a cell stands out: reverse video or a background colour 4, underlined 3, bold 2, a
/// foreground colour 1, plain 0, dim or grey -1. A toggle's current word and a selected
/// button stand out from the other; a placeholder is dimmer than typed text.
/// On a screen whose panels are painted `ground` (opencode fills its whole screen with one
/// background), that background is no emphasis, only another one is (its selected button).
pub fn emphasis(cell: &vt100::Cell, ground: vt100::Color) -> i8 {
    use vt100::Color;
    let grey = |c: Color| match c {
        Color::Idx(n) => n == 8 || (232..=250).contains(&n),
        Color::Rgb(r, g, b) => r.max(g).max(b) - r.min(g).min(b) < 16,
        Color::Default => false,
    };
    if cell.inverse() || (cell.bgcolor() != Color::Default && cell.bgcolor() != ground) {
        4
    } else if cell.underline() {
        3
    } else if cell.bold() {
        2
    } else if cell.dim() || grey(cell.fgcolor()) {
        -1
    } else if cell.fgcolor() != Color::Default {
        1
    } else {
        0
    }
}

/// The emphasis of each character of `row` as `Screen::rows` writes it (a gap of empty
/// cells as spaces, a wide character once); empty when it does not come out as `text`.
fn row_emphasis(
    screen: &vt100::Screen,
    row: u16,
    cols: u16,
    text: &str,
    ground: vt100::Color,
) -> Vec<i8> {
    let emphasis = |cell: &vt100::Cell| emphasis(cell, ground);
    let mut out = Vec::new();
    let mut built = String::new();
    let mut prev_col = 0u16;
    let mut skip = false;
    for col in 0..cols {
        let Some(cell) = screen.cell(row, col) else {
            break;
        };
        if skip {
            skip = false;
            continue;
        }
        skip = cell.is_wide();
        if !cell.has_contents() {
            continue;
        }
        for gap in prev_col..col {
            built.push(' ');
            out.push(screen.cell(row, gap).map_or(0, emphasis));
        }
        let e = emphasis(cell);
        for ch in cell.contents().chars() {
            built.push(ch);
            out.push(e);
        }
        prev_col = col + if cell.is_wide() { 2 } else { 1 };
    }
    if built.trim_end() != text {
        return Vec::new();
    }
    out.truncate(text.chars().count());
    out
}

/// The background each row's panel is painted in (opencode fills its screen and its
/// panels with colours): the colour most of a row is painted, where that colour paints
/// most of three rows or more — a panel, not one highlighted row (a selection bar); the
/// default otherwise.
fn grounds(screen: &vt100::Screen, rows: u16, cols: u16) -> Vec<vt100::Color> {
    let dominant: Vec<Option<vt100::Color>> = (0..rows)
        .map(|row| {
            let mut counts: Vec<(vt100::Color, u16)> = Vec::new();
            for col in 0..cols {
                let Some(bg) = screen.cell(row, col).map(|c| c.bgcolor()) else {
                    continue;
                };
                match counts.iter_mut().find(|(c, _)| *c == bg) {
                    Some((_, n)) => *n += 1,
                    None => counts.push((bg, 1)),
                }
            }
            counts
                .into_iter()
                .max_by_key(|&(_, n)| n)
                .filter(|&(_, n)| n * 2 > cols)
                .map(|(c, _)| c)
        })
        .collect();
    dominant
        .iter()
        .map(|d| match d {
            Some(c) if dominant.iter().filter(|o| *o == d).count() >= 3 => *c,
            _ => vt100::Color::Default,
        })
        .collect()
}

/// Feeds tool output to the emulator as a terminal with `ONLCR` would show it: the pty has
/// output processing off (so stdout stays byte-identical), but the operator's terminal turns
/// each `\n` into `\r\n`, and the screen model must match what a person would see.
pub fn feed(parser: &mut vt100::Parser, bytes: &[u8]) {
    let mut rest = bytes;
    while let Some(nl) = rest.iter().position(|&b| b == b'\n') {
        parser.process(&rest[..nl]);
        parser.process(b"\r\n");
        rest = &rest[nl + 1..];
    }
    parser.process(rest);
}

impl ScreenText {
    /// Reads the emulator's screen, with how each character is drawn.
    pub fn read(parser: &vt100::Parser) -> ScreenText {
        let mut text = Self::read_text(parser);
        let screen = parser.screen();
        let (rows, cols) = screen.size();
        let grounds = grounds(screen, rows.get(), cols.get());
        text.emphasis = text
            .rows
            .iter()
            .enumerate()
            .map(|(i, row)| row_emphasis(screen, i as u16, cols.get(), row, grounds[i]))
            .collect();
        text
    }

    /// Reads the emulator's screen as text only (no [`Self::emphasis`]): enough for the
    /// digest taken at every tick while output comes.
    pub fn read_text(parser: &vt100::Parser) -> ScreenText {
        let screen = parser.screen();
        let (_, cols) = screen.size();
        let rows: Vec<String> = screen
            .rows(0, cols.get())
            .map(|r| r.trim_end().to_owned())
            .collect();
        let (crow, ccol) = screen.cursor_position();
        let prompt_line = rows
            .get(crow as usize)
            .map(|r| r.chars().take(ccol as usize).collect::<String>())
            .unwrap_or_default();
        let mut text = ScreenText {
            rows,
            prompt_line,
            cursor_row: crow as usize,
            app_cursor: screen.application_cursor(),
            cursor_hidden: screen.hide_cursor(),
            full_screen: screen.alternate_screen()
                || screen.mouse_protocol_mode() != vt100::MouseProtocolMode::None,
            emphasis: Vec::new(),
        };
        if text.cursor_hidden
            && !text.full_screen
            && let Some((row, col)) = text.drawn_cursor()
        {
            text.cursor_row = row;
            text.prompt_line = text.rows[row].chars().take(col).collect();
            text.cursor_hidden = false;
        }
        text
    }

    /// Where a library that hides the terminal's cursor draws its own (promptui's
    /// `? Deploy now? [y/N] █`, `✔ Project name: demo█`, a block over the first letter of
    /// a default it clears on the first key): one block on the screen's last row, after a
    /// question or a label's mark. The field is there, as if the cursor stood on it.
    fn drawn_cursor(&self) -> Option<(usize, usize)> {
        let row = self.rows.iter().rposition(|r| !r.trim().is_empty())?;
        let chars: Vec<char> = self.rows[row].chars().collect();
        let mut blocks = chars
            .iter()
            .enumerate()
            .filter(|(_, c)| prompt::DRAWN_CURSORS.contains(c));
        let (col, _) = blocks.next()?;
        if blocks.next().is_some() {
            return None;
        }
        let head: String = chars[..col].iter().collect();
        let head = head.trim_end();
        let labelled = [": ", "? ", "› "].iter().any(|m| head.contains(m));
        (labelled || looks_like_question(head)).then_some((row, col))
    }

    /// The screen of a `rows`×`cols` terminal after it has shown `bytes` (for tests that
    /// make up what a tool shows).
    #[cfg(test)]
    pub fn rendered(rows: u16, cols: u16, bytes: &[u8]) -> ScreenText {
        let size = |n: u16| std::num::NonZeroU16::new(n).expect("a screen has a size");
        let mut p = vt100::Parser::new(size(rows), size(cols), 0);
        feed(&mut p, bytes);
        ScreenText::read(&p)
    }

    /// A digest of what the screen shows with animation removed (spinner glyphs, clock
    /// times: `fingerprint::normalize_screen`) and where the cursor is: equal for two
    /// frames of an animation, different when the text changes.
    pub fn still_digest(&self) -> u64 {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        hr_shared::fingerprint::normalize_screen(&self.rows.join("\n")).hash(&mut h);
        self.cursor_row.hash(&mut h);
        h.finish()
    }

    /// The last `n` non-empty rows at or above the cursor, oldest first.
    pub fn last_lines(&self, n: usize) -> Vec<&str> {
        let end = (self.cursor_row + 1).min(self.rows.len());
        let mut out: Vec<&str> = self.rows[..end]
            .iter()
            .rev()
            .filter(|r| !r.trim().is_empty())
            .take(n)
            .map(String::as_str)
            .collect();
        out.reverse();
        out
    }

    /// Where the newest of the screen's last rows shaped like a question (`What is your
    /// project name?`) is, wherever the cursor is.
    pub fn question_row_index(&self) -> Option<usize> {
        let mut seen = 0;
        for (i, row) in self.rows.iter().enumerate().rev() {
            if row.trim().is_empty() {
                continue;
            }
            if looks_like_question(row) {
                return Some(i);
            }
            seen += 1;
            if seen >= prompt::QUESTION_LINES {
                break;
            }
        }
        None
    }

    /// A field drawn on the row under a question (@clack/prompts: `│  demo`): its text,
    /// a left frame aside, and whether it is drawn dim — a placeholder, not a value.
    pub fn field_under(&self, question: usize) -> Option<(String, bool)> {
        let row = self.rows.get(question + 1)?;
        let chars: Vec<char> = row.chars().collect();
        let start = chars
            .iter()
            .position(|c| *c != ' ' && *c != '│' && *c != '┃')?;
        if !chars[..start].iter().any(|c| *c == '│' || *c == '┃') {
            return None;
        }
        // A faked cursor (a block after the text) is not part of it.
        let text: String = chars[start..]
            .iter()
            .collect::<String>()
            .trim_end()
            .trim_end_matches(prompt::DRAWN_CURSORS)
            .trim_end()
            .to_owned();
        let n = text.chars().count();
        let dim = self
            .emphasis
            .get(question + 1)
            .and_then(|e| e.get(start..start + n))
            .is_some_and(|e| e.contains(&-1));
        (!text.is_empty()).then_some((text, dim))
    }

    /// The last `n` non-empty rows of the whole screen, the cursor's or not, oldest first.
    fn last_rows(&self, n: usize) -> Vec<&str> {
        let mut out: Vec<&str> = self
            .rows
            .iter()
            .rev()
            .filter(|r| !r.trim().is_empty())
            .take(n)
            .map(String::as_str)
            .collect();
        out.reverse();
        out
    }

    /// Whether anything is asked; a read with nothing asked gets EOF, as /dev/null would give
    /// it. Text on the cursor's line asks, unless it is only a REPL's or a shell's bare
    /// prompt (`>>> `, `sqlite> `, `$ `) with no question or menu right above it. With the
    /// cursor's line empty, in line mode a last line shaped like a question asks; in raw mode
    /// (ICANON off), where full-screen programs draw their question anywhere and park the
    /// cursor, any of the screen's last lines shaped like a question, or a numbered menu,
    /// asks.
    pub fn asks(&self, canonical: bool) -> bool {
        let line = self.prompt_line.trim();
        if !line.is_empty() {
            if !prompt::is_repl_prompt(line) {
                return true;
            }
            let end = self.cursor_row.min(self.rows.len());
            let mut above: Vec<&str> = self.rows[..end]
                .iter()
                .rev()
                .filter(|r| !r.trim().is_empty())
                .take(MENU_LINES)
                .map(String::as_str)
                .collect();
            above.reverse();
            return above.last().is_some_and(|l| looks_like_question(l))
                || prompt::shows_menu(&above);
        }
        if canonical {
            return self
                .last_lines(1)
                .first()
                .is_some_and(|l| looks_like_question(l));
        }
        let tail = self.last_rows(MENU_LINES);
        tail.iter()
            .rev()
            .take(prompt::QUESTION_LINES)
            .any(|l| looks_like_question(l))
            || prompt::shows_menu(&tail)
            || self.shows_select_menu()
            || prompt::button_row(&self.rows, &self.emphasis).is_some()
    }

    /// Whether an arrow-key menu is drawn around the cursor (its pointer line, the items
    /// aligned with it, a title above).
    fn shows_select_menu(&self) -> bool {
        let rows: Vec<String> = self
            .rows
            .iter()
            .map(|r| hr_shared::sanitize::sanitize_line(r))
            .collect();
        prompt::select_menu(&rows, (!self.cursor_hidden).then_some(self.cursor_row)).is_some()
    }
}

/// How far up a menu is looked for.
const MENU_LINES: usize = 12;

/// A line that ends the way questions and prompts end: `?`, `:`, `>`, or a closing bracket
/// around choices (`[y/N]`, `(yes/no)`, `[1-3]`) — not any closing bracket, so that
/// `Build finished (2 warnings)` or a progress bar `[=====]` is not taken for a question.
pub fn looks_like_question(line: &str) -> bool {
    let t = line.trim_end();
    if t.ends_with('?') || t.ends_with(':') || t.ends_with('>') || prompt::offers_choices(t) {
        return true;
    }
    // The question marks of prompt libraries: inquirer's, enquirer's and prompts' `? `,
    // @clack/prompts' `◆ ` on the question it asks now.
    let lead = t.trim_start();
    if (lead.starts_with("? ") || lead.starts_with("◆ "))
        && lead.chars().skip(2).any(char::is_alphanumeric)
    {
        return true;
    }
    let open = match t.chars().last() {
        Some(']') => '[',
        Some(')') => '(',
        _ => return false,
    };
    let Some(start) = t.rfind(open) else {
        return false;
    };
    let inside = t[start + 1..t.len() - 1].trim();
    let range = inside
        .split_once('-')
        .is_some_and(|(a, b)| is_number(a.trim()) && is_number(b.trim()));
    t[..start].contains('?')
        || range
        || ((inside.contains('/') || inside.contains('|'))
            && inside.len() <= 40
            && !inside.contains(char::is_whitespace))
}

fn is_number(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn screen(bytes: &[u8]) -> ScreenText {
        ScreenText::rendered(5, 40, bytes)
    }

    #[test]
    fn emphasis_follows_the_cells_drawing_character_for_character() {
        // prompts' toggle: the current word underlined in colour, the other grey.
        let s = screen("? Enable cache? › \x1b[90moff\x1b[0m / \x1b[4;36mon\x1b[0m".as_bytes());
        let row = &s.rows[0];
        let e = &s.emphasis[0];
        assert_eq!(e.len(), row.chars().count(), "one score per character");
        let at = |word: &str| {
            row.chars().count()
                - row.rsplit(word).next().unwrap().chars().count()
                - word.chars().count()
        };
        assert_eq!(e[at("off")], -1);
        assert_eq!(e[at("on")], 3);
        assert_eq!(e[0], 0, "`?` plain");
        // Reverse video and a background colour stand out most; a wide character counts once.
        let s = screen("漢字 \x1b[7m OK \x1b[0m \x1b[44mNo\x1b[0m".as_bytes());
        assert_eq!(s.emphasis[0].len(), s.rows[0].chars().count());
        assert_eq!(s.emphasis[0][0], 0);
        assert_eq!(*s.emphasis[0].last().unwrap(), 4);
        assert!(s.emphasis[0].contains(&4));
    }

    #[test]
    fn prompt_line_is_the_cursor_line() {
        let s = screen(b"working...\n\x1b[1mContinue? [y/N] \x1b[0m");
        assert_eq!(s.prompt_line, "Continue? [y/N]");
        assert_eq!(s.last_lines(2), vec!["working...", "Continue? [y/N]"]);
        assert!(s.asks(true));
    }

    #[test]
    fn a_drawn_cursor_after_a_label_stands_for_the_hidden_one() {
        // promptui hides the terminal's cursor and draws a block where its field is.
        let s = ScreenText::rendered(6, 60, b"\x1b[?25l? Deploy now? [y/N] \xe2\x96\x88\r");
        assert!(!s.cursor_hidden);
        assert_eq!(s.prompt_line, "? Deploy now? [y/N] ");
        let s = ScreenText::rendered(6, 60, "\x1b[?25l✔ Project name: demo█".as_bytes());
        assert_eq!(
            (s.cursor_row, s.prompt_line.as_str()),
            (0, "✔ Project name: demo")
        );
        // Over the first letter of a default it clears on the first key.
        let s = ScreenText::rendered(6, 60, "\x1b[?25lhello\r\n✔ Project name: █emo".as_bytes());
        assert_eq!(
            (s.cursor_row, s.prompt_line.as_str()),
            (1, "✔ Project name: ")
        );
        // A progress bar, a block with nothing question-like before it, two blocks, or a
        // full-screen program: the cursor stays hidden.
        for shown in [
            "\x1b[?25lDownloading [██    ] 40%",
            "\x1b[?25lbuilding █",
            "\x1b[?25lName: █ █",
            "\x1b[?1049h\x1b[?25lName: █",
        ] {
            let s = ScreenText::rendered(6, 60, shown.as_bytes());
            assert!(s.cursor_hidden, "{shown:?}");
        }
    }

    #[test]
    fn empty_and_plain_output_asks_nothing() {
        for canonical in [true, false] {
            assert!(!screen(b"").asks(canonical));
            assert!(!screen(b"reading input from stdin\n").asks(canonical));
            assert!(screen(b"Name:\n").asks(canonical));
            assert!(screen(b"Name: ").asks(canonical));
        }
    }

    #[test]
    fn a_bare_repl_prompt_asks_nothing_unless_a_question_or_menu_is_right_above() {
        let tall = |b: &[u8]| ScreenText::rendered(20, 60, b);
        for canonical in [true, false] {
            for shown in [
                &b"Python 3.11.7 (main)\nType \"help\" for more information.\n>>> "[..],
                b"SQLite version 3.40.1\nEnter \".help\" for usage hints.\nsqlite> ",
                b"$ ",
                b"bash-5.2# ",
            ] {
                assert!(
                    !tall(shown).asks(canonical),
                    "{}",
                    String::from_utf8_lossy(shown)
                );
            }
            for shown in [
                &b"Which environment should be deployed?\n> "[..],
                b"Current installation options:\n\n1) Proceed\n2) Customize\n3) Cancel\n>",
                b"Name for the release:\n$ ",
            ] {
                assert!(
                    tall(shown).asks(canonical),
                    "{}",
                    String::from_utf8_lossy(shown)
                );
            }
        }
    }

    #[test]
    fn raw_mode_looks_at_the_whole_screen_for_a_question() {
        let tall = |b: &[u8]| ScreenText::rendered(20, 60, b);
        // A menu or question above an empty cursor line: line mode only looks at the last
        // line, raw mode at the last few and for a menu.
        let menu = tall(b"Deploy where?\n1. staging\n2. production\n");
        assert!(menu.asks(false));
        assert!(!menu.asks(true));
        let question = tall(b"Overwrite? [y/N]\n(press a key)\n");
        assert!(question.asks(false));
        // The cursor parked at the top of a full-screen program, its menu below.
        let parked = tall(b"\x1b[5;1HPick one:\n 1. Yes\n 2. No\x1b[H");
        assert!(parked.asks(false));
        // An arrow-key menu, the cursor on the empty line below it.
        let select = tall("? Pick a color\n\u{276f} red\n  green\n".as_bytes());
        assert!(select.asks(false));
        // Output with nothing question-like.
        assert!(!tall(b"building...\ndone.\n").asks(false));
    }

    #[test]
    fn closing_brackets_are_questions_only_around_choices() {
        for q in [
            "Continue [y/N]",
            "Proceed (yes/no)",
            "Overwrite? (y)",
            "Pick one [1-3]",
            "Mode (fast|safe)",
            "Install (Y)es/(N)o/(A)ll",
        ] {
            assert!(looks_like_question(q), "{q}");
        }
        for not in [
            "Build finished (2 warnings)",
            "100% [==========]",
            "[INFO] done (took 3s)",
            "see docs (https://example.com/a b)",
            "(eof)",
        ] {
            assert!(!looks_like_question(not), "{not}");
        }
    }

    #[test]
    fn redraws_leave_only_the_final_text() {
        let s = screen(b"10%\r50%\r\x1b[2K100% done\nProceed (Y/n)? ");
        assert_eq!(s.last_lines(2), vec!["100% done", "Proceed (Y/n)?"]);
    }
}
