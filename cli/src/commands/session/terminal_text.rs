//! Printing remote terminal output to a person's terminal without letting it take control.
//!
//! A transcript holds whatever the remote programs wrote: escape sequences that move the cursor,
//! set the window title (OSC), write to the clipboard (OSC 52), or switch character sets. Printed
//! raw on the reader's terminal they would act on it. [`neutralize`] makes every control visible
//! instead: C0 controls other than `\n` and `\t` become caret notation (`ESC` is `^[`), DEL is
//! `^?`, and C1 controls (U+0080..U+009F, which some terminals treat like `ESC [`) become
//! `\u{9b}`-style text. Terminal line endings (`\r\n`) become `\n` first, so ordinary lines stay
//! readable.

/// `text` with every control character (other than newline and tab) made visible.
pub fn neutralize(text: &str) -> String {
    let text = text.replace("\r\n", "\n");
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '\n' | '\t' => out.push(c),
            '\u{0}'..='\u{1f}' => {
                out.push('^');
                out.push(char::from(b'@' + c as u8));
            }
            '\u{7f}' => out.push_str("^?"),
            '\u{80}'..='\u{9f}' => out.push_str(&format!("\\u{{{:x}}}", c as u32)),
            _ => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escape_sequences_become_visible_text() {
        let hostile = "a\x1b]0;pwned\x07b\x1b[2J\x1b[31mred\r\nnext\tcol\x08\x7f\u{9b}31m";
        let safe = neutralize(hostile);
        assert_eq!(
            safe,
            "a^[]0;pwned^Gb^[[2J^[[31mred\nnext\tcol^H^?\\u{9b}31m"
        );
        assert!(
            !safe
                .chars()
                .any(|c| c.is_control() && c != '\n' && c != '\t')
        );
    }

    #[test]
    fn plain_text_is_unchanged() {
        let text = "héllo wörld\n\tindented ✓\n";
        assert_eq!(neutralize(text), text);
    }

    #[test]
    fn a_lone_carriage_return_is_shown() {
        assert_eq!(neutralize("50%\r100%"), "50%^M100%");
    }
}
