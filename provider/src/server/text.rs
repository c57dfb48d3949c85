//! Turning raw output bytes into protocol text.

/// Splits a byte stream into valid UTF-8 text without breaking a multi-byte character across
/// two events: an incomplete trailing sequence is carried into the next chunk. Invalid bytes
/// become U+FFFD.
#[derive(Debug, Default)]
pub struct Utf8Stream {
    carry: Vec<u8>,
}

impl Utf8Stream {
    pub fn push(&mut self, bytes: &[u8]) -> String {
        self.push_owned(bytes.to_vec())
    }

    /// [`Utf8Stream::push`] taking the buffer: valid UTF-8 (the common case) becomes the text
    /// without a copy or a per-character scan; only a chunk with invalid bytes takes the lossy
    /// path. Streaming hundreds of megabytes spends its time here otherwise.
    pub fn push_owned(&mut self, mut bytes: Vec<u8>) -> String {
        if !self.carry.is_empty() {
            bytes.splice(0..0, self.carry.drain(..));
        }
        let keep = incomplete_tail_len(&bytes);
        self.carry = bytes.split_off(bytes.len() - keep);
        lossy(bytes)
    }

    /// Whatever is left at the end of the stream.
    pub fn finish(&mut self) -> String {
        lossy(std::mem::take(&mut self.carry))
    }
}

/// `bytes` as text, invalid sequences replaced by U+FFFD.
fn lossy(bytes: Vec<u8>) -> String {
    String::from_utf8(bytes).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
}

/// Length of an incomplete UTF-8 sequence at the end of `b` (0 if it ends on a boundary).
fn incomplete_tail_len(b: &[u8]) -> usize {
    for back in 1..=3.min(b.len()) {
        let byte = b[b.len() - back];
        if byte & 0b1100_0000 == 0b1000_0000 {
            continue; // continuation byte: look further back
        }
        let need = match byte {
            0xC0..=0xDF => 2,
            0xE0..=0xEF => 3,
            0xF0..=0xF7 => 4,
            _ => return 0,
        };
        return if need > back { back } else { 0 };
    }
    0
}

/// `s` in consecutive pieces of at most `max` bytes (at least one character each), cut on
/// character boundaries.
pub fn pieces(s: &str, max: usize) -> impl Iterator<Item = &str> {
    let mut rest = s;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        let mut end = max.min(rest.len());
        while !rest.is_char_boundary(end) {
            end -= 1;
        }
        if end == 0 {
            end = rest.chars().next().map_or(rest.len(), char::len_utf8);
        }
        let (piece, after) = rest.split_at(end);
        rest = after;
        Some(piece)
    })
}

/// The last `max` bytes of `s`, cut on a character boundary, and whether anything was cut.
pub fn tail(s: &str, max: usize) -> (&str, bool) {
    if s.len() <= max {
        return (s, false);
    }
    let mut start = s.len() - max;
    while !s.is_char_boundary(start) {
        start += 1;
    }
    (&s[start..], true)
}

/// A fenced block that cannot be closed early by the text itself.
pub fn fenced(text: &str) -> String {
    let mut fence = "```".to_string();
    while text.contains(&fence) {
        fence.push('`');
    }
    let body = text.trim_end_matches('\n');
    format!("{fence}\n{body}\n{fence}")
}

/// Human duration: `850 ms`, `2.4 s`, `3 min 5 s`.
pub fn duration(ms: u64) -> String {
    if ms < 1000 {
        format!("{ms} ms")
    } else if ms < 60_000 {
        format!("{:.1} s", ms as f64 / 1000.0)
    } else {
        format!("{} min {} s", ms / 60_000, (ms % 60_000) / 1000)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pieces_are_bounded_and_whole() {
        let text = "aé€😀".repeat(100);
        let parts: Vec<&str> = pieces(&text, 7).collect();
        assert_eq!(parts.concat(), text);
        assert!(parts.iter().all(|p| p.len() <= 7 && !p.is_empty()));
        assert_eq!(pieces("😀", 2).collect::<Vec<_>>(), vec!["😀"]);
        assert_eq!(pieces("", 4).count(), 0);
    }

    #[test]
    fn utf8_stream_never_splits_a_character() {
        let euro = "€".as_bytes(); // 3 bytes
        let mut s = Utf8Stream::default();
        assert_eq!(s.push(&euro[..1]), "");
        assert_eq!(s.push(&euro[1..2]), "");
        assert_eq!(s.push(&[euro[2], b'a']), "€a");
        assert_eq!(s.push(&[0xff, b'b']), "\u{fffd}b");
        assert_eq!(s.push(&euro[..2]), "");
        assert_eq!(s.finish(), "\u{fffd}");
    }

    #[test]
    fn utf8_stream_round_trips_any_chunking() {
        let text = "a€b😀c\u{7ff}d".repeat(20);
        let bytes = text.as_bytes();
        for size in 1..9 {
            let mut s = Utf8Stream::default();
            let mut out = String::new();
            for chunk in bytes.chunks(size) {
                out.push_str(&s.push(chunk));
            }
            out.push_str(&s.finish());
            assert_eq!(out, text, "chunk size {size}");
        }
    }

    #[test]
    fn tail_cuts_on_boundaries_and_fence_survives_backticks() {
        assert_eq!(tail("a€", 2), ("", true));
        assert_eq!(tail("a€", 3), ("€", true));
        assert_eq!(tail("abc", 5), ("abc", false));
        assert_eq!(fenced("x ``` y"), "````\nx ``` y\n````");
        assert_eq!(duration(999), "999 ms");
        assert_eq!(duration(2400), "2.4 s");
        assert_eq!(duration(185_000), "3 min 5 s");
    }
}
