//! JSON strings for large texts (a turn's output in `progress`): the same bytes serde_json
//! writes, found eight bytes at a time.
//!
//! serde_json looks every byte up in a table; streaming hundreds of megabytes of output spent
//! more of the provider's time there than in decrypting them. Output is mostly text that needs
//! no escape, so a word of eight bytes is tested at once (SWAR) and only a word holding a
//! quote, a backslash or a control character is looked at byte by byte.

use std::io::{self, Write};

/// Each byte of the word repeated: `0x0101…01 * b`.
const fn splat(b: u8) -> u64 {
    u64::from_ne_bytes([b; 8])
}

const ONES: u64 = splat(0x01);
const HIGHS: u64 = splat(0x80);

/// Whether any byte of `word` is below 0x20, `"` or `\`. Exact for "any" (the classic
/// has-less / has-zero tests; only the position of a hit could be wrong, never its presence).
fn word_needs_escape(word: u64) -> bool {
    let below_space = word.wrapping_sub(splat(0x20)) & !word;
    let quote = word ^ splat(b'"');
    let backslash = word ^ splat(b'\\');
    let has_quote = quote.wrapping_sub(ONES) & !quote;
    let has_backslash = backslash.wrapping_sub(ONES) & !backslash;
    (below_space | has_quote | has_backslash) & HIGHS != 0
}

/// How serde_json writes one byte of a string.
enum Escape {
    /// As is.
    None,
    /// A two-byte escape such as `\n`.
    Short(&'static [u8; 2]),
    /// `\u00XX` (lowercase hex), for the other control characters.
    Unicode,
}

fn escape_of(byte: u8) -> Escape {
    match byte {
        b'"' => Escape::Short(b"\\\""),
        b'\\' => Escape::Short(b"\\\\"),
        b'\n' => Escape::Short(b"\\n"),
        b'\r' => Escape::Short(b"\\r"),
        b'\t' => Escape::Short(b"\\t"),
        0x08 => Escape::Short(b"\\b"),
        0x0c => Escape::Short(b"\\f"),
        0x00..=0x1f => Escape::Unicode,
        _ => Escape::None,
    }
}

fn unicode_escape(byte: u8) -> [u8; 6] {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    [
        b'\\',
        b'u',
        b'0',
        b'0',
        HEX[usize::from(byte >> 4)],
        HEX[usize::from(byte & 0xf)],
    ]
}

/// Start of the next byte at or after `from` that needs an escape, or `bytes.len()`.
fn next_escape(bytes: &[u8], mut from: usize) -> usize {
    while let Some(word) = bytes.get(from..from + 8) {
        let word = u64::from_ne_bytes(word.try_into().expect("eight bytes"));
        if word_needs_escape(word) {
            break;
        }
        from += 8;
    }
    bytes[from..]
        .iter()
        .position(|&b| !matches!(escape_of(b), Escape::None))
        .map_or(bytes.len(), |at| from + at)
}

/// Write `text` as a JSON string, quotes included: byte for byte what
/// `serde_json::to_writer(out, text)` writes.
pub fn write_str<W: Write>(out: &mut W, text: &str) -> io::Result<()> {
    let bytes = text.as_bytes();
    out.write_all(b"\"")?;
    let mut start = 0;
    loop {
        let at = next_escape(bytes, start);
        out.write_all(&bytes[start..at])?;
        let Some(&byte) = bytes.get(at) else { break };
        match escape_of(byte) {
            Escape::Short(short) => out.write_all(short)?,
            Escape::Unicode => out.write_all(&unicode_escape(byte))?,
            Escape::None => out.write_all(&[byte])?,
        }
        start = at + 1;
    }
    out.write_all(b"\"")
}

/// Length of `text` written by [`write_str`] (quotes included), without writing it.
pub fn escaped_len(text: &str) -> usize {
    let bytes = text.as_bytes();
    let mut len = bytes.len() + 2;
    let mut at = next_escape(bytes, 0);
    while let Some(&byte) = bytes.get(at) {
        len += match escape_of(byte) {
            Escape::Short(_) => 1,
            Escape::Unicode => 5,
            Escape::None => 0,
        };
        at = next_escape(bytes, at + 1);
    }
    len
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ours(text: &str) -> Vec<u8> {
        let mut out = Vec::new();
        write_str(&mut out, text).unwrap();
        out
    }

    #[test]
    fn every_ascii_byte_in_every_word_position_matches_serde_json() {
        for byte in 0u8..0x80 {
            for position in 0..17 {
                let mut text = "x".repeat(17);
                text.replace_range(position..position + 1, &char::from(byte).to_string());
                let expected = serde_json::to_vec(&text).unwrap();
                assert_eq!(ours(&text), expected, "byte {byte:#x} at {position}");
                assert_eq!(escaped_len(&text), expected.len(), "byte {byte:#x}");
            }
        }
    }

    #[test]
    fn texts_match_serde_json() {
        let texts = [
            String::new(),
            "\"".to_string(),
            "plain text\n".repeat(1000),
            "quotes \" and \\ backslashes, tabs\t and \r returns".to_string(),
            "control \u{0}\u{1}\u{1b}[31m and DEL \u{7f}".to_string(),
            "unicode é 中文 😀 \u{2028}\u{2029} ÿ\u{80}\u{ff}".repeat(37),
            "\u{1f}\u{20}\u{21}\u{5b}\u{5c}\u{5d}".repeat(9),
            "a".repeat(100_003),
        ];
        for text in texts {
            let expected = serde_json::to_vec(&text).unwrap();
            assert_eq!(ours(&text), expected, "{text:?}");
            assert_eq!(escaped_len(&text), expected.len());
        }
    }
}
