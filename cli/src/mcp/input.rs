//! The server's stdin as rmcp reads it, unchanged, with a note on stderr for every line that is
//! not JSON.
//!
//! JSON-RPC 2.0 answers invalid JSON with a parse error (-32700, id null), but MCP requests
//! always carry an id and the protocol version this server speaks (2025-06-18) has no error
//! response without one. rmcp drops such a line without a reply, as the other official MCP SDKs
//! do (there is no request to answer, and answering garbage can start an error storm with a peer
//! that echoes it back), and logs it only at debug level. So the line is skipped, the server goes
//! on serving, and this says so on stderr, where MCP clients keep a server's log. The note gives
//! the line's size, never its text: a malformed message may still hold a file's content or a
//! secret.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use tokio::io::{AsyncRead, ReadBuf};

/// A line longer than this is not checked (rmcp discards it as oversized anyway).
const MAX_CHECKED_LINE: usize = 64 << 20;

pub struct CheckedInput<R> {
    inner: R,
    /// The start of the line being read, when it spans reads.
    partial: Vec<u8>,
    /// The current line outgrew [`MAX_CHECKED_LINE`]: ignore it up to its end.
    skipping: bool,
}

impl<R> CheckedInput<R> {
    pub fn new(inner: R) -> Self {
        CheckedInput {
            inner,
            partial: Vec::new(),
            skipping: false,
        }
    }

    fn scan(&mut self, data: &[u8]) {
        for piece in data.split_inclusive(|b| *b == b'\n') {
            let ends = piece.ends_with(b"\n");
            if !self.skipping {
                if self.partial.len() + piece.len() > MAX_CHECKED_LINE {
                    self.partial = Vec::new();
                    self.skipping = true;
                } else if ends && self.partial.is_empty() {
                    note_if_not_json(piece);
                } else {
                    self.partial.extend_from_slice(piece);
                    if ends {
                        note_if_not_json(&self.partial);
                        self.partial.clear();
                    }
                }
            }
            if ends {
                self.skipping = false;
            }
        }
    }
}

/// `line` without its line end (`\n`, `\r\n`).
fn content(line: &[u8]) -> &[u8] {
    let line = line.strip_suffix(b"\n").unwrap_or(line);
    line.strip_suffix(b"\r").unwrap_or(line)
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
        let before = buf.filled().len();
        ready!(Pin::new(&mut this.inner).poll_read(cx, buf))?;
        this.scan(&buf.filled()[before..]);
        Poll::Ready(Ok(()))
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
    fn a_line_split_across_reads_is_checked_whole() {
        let mut input = CheckedInput::new(tokio::io::empty());
        input.scan(b"{\"a\":");
        assert_eq!(input.partial, b"{\"a\":");
        input.scan(b"1}\n{\"b\"");
        assert_eq!(input.partial, b"{\"b\"");
        input.scan(b":2}\n");
        assert!(input.partial.is_empty());
    }
}
