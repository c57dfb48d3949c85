//! The server's stdin as rmcp reads it, one whole line at a time, each checked on its raw bytes
//! before rmcp turns it into `serde_json::Value`s.
//!
//! Bounds (issue 42, item 9): a line of at most [`MAX_LINE`] bytes, nested at most
//! [`MAX_DEPTH`] deep, with at most [`MAX_VALUES`] JSON values (containers and commas outside
//! strings). Parsing a line costs memory in proportion to its values, not its bytes: 14 MiB of
//! `[[],[],...]` became over 500 MiB of `Value`s. A line past a bound is never parsed; when its
//! top-level `"id"` can be read off its start, it is replaced by a request for
//! [`REFUSED_METHOD`], which the server answers with a JSON-RPC error saying which bound and
//! how to stay within it; without an id (a notification) it is dropped with a note on stderr.
//!
//! JSON-RPC 2.0 answers invalid JSON with a parse error (-32700, id null), but MCP requests
//! always carry an id and the protocol version this server speaks (2025-06-18) has no error
//! response without one. rmcp drops such a line without a reply, as the other official MCP SDKs
//! do, and logs it only at debug level. So the line is passed on (rmcp skips it), and this says
//! so on stderr, where MCP clients keep a server's log. Notes give a line's size, never its text:
//! a malformed message may still hold a file's content or a secret.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use tokio::io::{AsyncRead, ReadBuf};

/// Most bytes of one request line (rmcp's own bound, `DEFAULT_MAX_LINE_LENGTH`).
pub const MAX_LINE: usize = 16 << 20;
/// Deepest nesting of arrays and objects in one request.
pub const MAX_DEPTH: usize = 64;
/// Most JSON values (counted as containers plus commas outside strings) in one request.
pub const MAX_VALUES: usize = 100_000;
/// What a refused line becomes (answered with an error by the server, never a tool).
pub const REFUSED_METHOD: &str = "remote-runner/refused-request";
/// How much of an oversized line is kept to find its id.
const ID_PREFIX: usize = 4096;
/// Bytes read from stdin at once.
const CHUNK: usize = 64 * 1024;

/// Why a line was refused (the `reason` of a [`REFUSED_METHOD`] request).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    Large,
    Deep,
    ManyValues,
}

impl Refusal {
    pub fn code(self) -> &'static str {
        match self {
            Refusal::Large => "request_too_large",
            Refusal::Deep => "request_too_deep",
            Refusal::ManyValues => "request_too_many_values",
        }
    }

    pub fn from_code(code: &str) -> Option<Refusal> {
        [Refusal::Large, Refusal::Deep, Refusal::ManyValues]
            .into_iter()
            .find(|r| r.code() == code)
    }

    /// The error message: which bound, and how to stay within it.
    pub fn message(self) -> String {
        let what = match self {
            Refusal::Large => format!("is longer than {} MiB", MAX_LINE >> 20),
            Refusal::Deep => format!("nests arrays or objects deeper than {MAX_DEPTH}"),
            Refusal::ManyValues => format!("holds more than {MAX_VALUES} JSON values"),
        };
        format!(
            "{}: the request {what}, this server's bound on one request; it was not read. Send \
             smaller arguments (a large file goes with file_put, not inline)",
            self.code()
        )
    }
}

pub struct CheckedInput<R> {
    inner: R,
    /// The line being read (up to [`MAX_LINE`], then only its first [`ID_PREFIX`] bytes).
    line: Vec<u8>,
    /// The current line outgrew [`MAX_LINE`].
    oversized: bool,
    /// Checked bytes waiting for the reader, and how many of them it has taken.
    out: Vec<u8>,
    taken: usize,
    eof: bool,
}

impl<R> CheckedInput<R> {
    pub fn new(inner: R) -> Self {
        CheckedInput {
            inner,
            line: Vec::new(),
            oversized: false,
            out: Vec::new(),
            taken: 0,
            eof: false,
        }
    }

    /// Take in bytes read from stdin; whole lines, checked, go to `out`.
    fn scan(&mut self, data: &[u8]) {
        for piece in data.split_inclusive(|b| *b == b'\n') {
            if self.oversized || self.line.len() + piece.len() > MAX_LINE {
                if !self.oversized {
                    self.oversized = true;
                    self.line.truncate(ID_PREFIX);
                }
                let room = ID_PREFIX.saturating_sub(self.line.len());
                self.line.extend_from_slice(&piece[..room.min(piece.len())]);
            } else {
                self.line.extend_from_slice(piece);
            }
            if piece.ends_with(b"\n") {
                self.finish_line();
            }
        }
    }

    fn finish_line(&mut self) {
        let line = std::mem::take(&mut self.line);
        let refusal = if std::mem::take(&mut self.oversized) {
            Some(Refusal::Large)
        } else {
            check(content(&line))
        };
        match refusal {
            None => {
                note_if_not_json(&line);
                self.out.extend_from_slice(&line);
            }
            Some(why) => match top_level_id(content(&line)) {
                Some(id) => {
                    let replaced = format!(
                        "{{\"jsonrpc\":\"2.0\",\"id\":{id},\"method\":\"{REFUSED_METHOD}\",\
                         \"params\":{{\"reason\":\"{}\"}}}}\n",
                        why.code()
                    );
                    eprintln!(
                        "remote-runner mcp: refused a request of {} bytes ({}); answered with an error",
                        content(&line)
                            .len()
                            .max(if why == Refusal::Large { MAX_LINE } else { 0 }),
                        why.code()
                    );
                    self.out.extend_from_slice(replaced.as_bytes());
                }
                None => eprintln!(
                    "remote-runner mcp: dropped an input line ({}) that has no request id to \
                     answer; serving on",
                    why.code()
                ),
            },
        }
    }
}

/// `line` without its line end (`\n`, `\r\n`).
fn content(line: &[u8]) -> &[u8] {
    let line = line.strip_suffix(b"\n").unwrap_or(line);
    line.strip_suffix(b"\r").unwrap_or(line)
}

/// The bounds of depth and values, checked in one pass over the raw bytes (no allocation).
fn check(line: &[u8]) -> Option<Refusal> {
    let (mut depth, mut values) = (0usize, 0usize);
    let (mut in_string, mut escaped) = (false, false);
    for &b in line {
        if in_string {
            match b {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'[' | b'{' => {
                depth += 1;
                values += 1;
                if depth > MAX_DEPTH {
                    return Some(Refusal::Deep);
                }
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            b',' => values += 1,
            _ => {}
        }
        if values > MAX_VALUES {
            return Some(Refusal::ManyValues);
        }
    }
    None
}

/// The raw JSON of the top-level `"id"` member (a number or a short string) of a line that
/// starts as an object, read without parsing the rest.
fn top_level_id(line: &[u8]) -> Option<&str> {
    let mut depth = 0usize;
    let mut i = 0;
    while i < line.len() {
        match line[i] {
            b'"' => {
                let end = string_end(line, i)?;
                if depth == 1 && &line[i..=end] == b"\"id\"" {
                    let mut j = end + 1;
                    while line.get(j).is_some_and(u8::is_ascii_whitespace) {
                        j += 1;
                    }
                    if line.get(j) == Some(&b':') {
                        j += 1;
                        while line.get(j).is_some_and(u8::is_ascii_whitespace) {
                            j += 1;
                        }
                        return id_value(line, j);
                    }
                }
                i = end + 1;
                continue;
            }
            b'[' | b'{' => depth += 1,
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
        i += 1;
    }
    None
}

/// The index of the quote closing the string that opens at `start`.
fn string_end(line: &[u8], start: usize) -> Option<usize> {
    let mut escaped = false;
    for (k, &b) in line.iter().enumerate().skip(start + 1) {
        match b {
            _ if escaped => escaped = false,
            b'\\' => escaped = true,
            b'"' => return Some(k),
            _ => {}
        }
    }
    None
}

fn id_value(line: &[u8], at: usize) -> Option<&str> {
    let end = match line.get(at)? {
        b'"' => string_end(line, at)? + 1,
        b'-' | b'0'..=b'9' => {
            at + line[at..]
                .iter()
                .take_while(|b| b.is_ascii_digit() || b"-+.eE".contains(b))
                .count()
        }
        _ => return None,
    };
    let raw = std::str::from_utf8(&line[at..end]).ok()?;
    // Only plain ids are echoed (no escapes to get wrong, and short).
    (raw.len() <= 128 && !raw.contains('\\')).then_some(raw)
}

/// Whether `line` (with its line end) is blank or one JSON value, as rmcp's reader takes it.
fn is_json_or_blank(line: &[u8]) -> bool {
    let line = content(line);
    let line = line.strip_prefix(b"\xef\xbb\xbf").unwrap_or(line);
    line.is_empty() || serde_json::from_slice::<serde::de::IgnoredAny>(line).is_ok()
}

fn note_if_not_json(line: &[u8]) {
    if !is_json_or_blank(line) {
        eprintln!(
            "remote-runner mcp: skipped an input line of {} bytes that is not JSON (a JSON-RPC \
             parse error; it has no request id to answer); serving on",
            content(line).len()
        );
    }
}

impl<R: AsyncRead + Unpin> AsyncRead for CheckedInput<R> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        loop {
            if this.taken < this.out.len() {
                let n = buf.remaining().min(this.out.len() - this.taken);
                buf.put_slice(&this.out[this.taken..this.taken + n]);
                this.taken += n;
                if this.taken == this.out.len() {
                    this.out.clear();
                    this.taken = 0;
                }
                return Poll::Ready(Ok(()));
            }
            if this.eof {
                return Poll::Ready(Ok(()));
            }
            let mut chunk = [0u8; CHUNK];
            let mut read = ReadBuf::new(&mut chunk);
            ready!(Pin::new(&mut this.inner).poll_read(cx, &mut read))?;
            if read.filled().is_empty() {
                // A last line without its end is passed on as it is (rmcp drops it).
                this.eof = true;
                let rest = std::mem::take(&mut this.line);
                if !this.oversized {
                    this.out = rest;
                }
            } else {
                let data = read.filled().to_vec();
                this.scan(&data);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blank_lines_and_json_pass_and_garbage_does_not() {
        assert!(is_json_or_blank(b"\n"));
        assert!(is_json_or_blank(b"{\"jsonrpc\":\"2.0\"}\r\n"));
        assert!(is_json_or_blank(b"\xef\xbb\xbf[1,2]\n"));
        assert!(!is_json_or_blank(b"garbage\n"));
        assert!(!is_json_or_blank(b"{\"jsonrpc\":\"2.0\",\"id\":7,\n"));
    }

    #[test]
    fn a_line_split_across_reads_is_passed_on_whole() {
        let mut input = CheckedInput::new(tokio::io::empty());
        input.scan(b"{\"a\":");
        assert_eq!(input.line, b"{\"a\":");
        assert!(input.out.is_empty());
        input.scan(b"1}\n{\"b\"");
        assert_eq!(input.out, b"{\"a\":1}\n");
        assert_eq!(input.line, b"{\"b\"");
    }

    #[test]
    fn depth_and_values_are_counted_outside_strings() {
        assert_eq!(check(b"{\"a\":\"[[[[,,,,\"}"), None);
        let deep = format!("{}{}", "[".repeat(MAX_DEPTH + 1), "]".repeat(MAX_DEPTH + 1));
        assert_eq!(check(deep.as_bytes()), Some(Refusal::Deep));
        let wide = format!("[{}]", "[],".repeat(MAX_VALUES));
        assert_eq!(check(wide.as_bytes()), Some(Refusal::ManyValues));
    }

    #[test]
    fn the_top_level_id_is_found_and_nested_ids_are_not() {
        assert_eq!(
            top_level_id(br#"{"jsonrpc":"2.0","id":42,"method":"x"}"#),
            Some("42")
        );
        assert_eq!(
            top_level_id(br#"{"params":{"id":1},"id":"a-b"}"#),
            Some("\"a-b\"")
        );
        assert_eq!(top_level_id(br#"{"method":"x","params":{"id":1}}"#), None);
        assert_eq!(top_level_id(br#"{"note":"\"id\":3"}"#), None);
    }
}
