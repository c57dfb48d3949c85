//! `code serve`'s input, split into lines with a bound: a line longer than [`MAX_LINE`] is
//! reported as soon as it passes the bound and its bytes are dropped up to its newline, so a
//! harness that never sends a newline cannot grow the process's memory without end.

use tokio::io::{AsyncBufRead, AsyncBufReadExt};

/// The longest line `serve` takes, newline not counted: the largest message (a program, a
/// resolution's value) it carries, as large as the longest line a run may write on its channel.
pub(super) const MAX_LINE: usize = 256 << 20;

/// What the next read of the input gives.
pub(super) enum Next<'a> {
    /// A line, without its newline (the last one may have none).
    Line(&'a [u8]),
    /// A line over the bound: reported once, its bytes dropped up to its newline.
    TooLong,
    /// The input ended (or failed).
    End,
}

pub(super) struct Lines<R> {
    input: R,
    max: usize,
    line: Vec<u8>,
    /// Inside a line over the bound: drop bytes until its newline.
    discarding: bool,
}

impl<R: AsyncBufRead + Unpin> Lines<R> {
    pub(super) fn new(input: R, max: usize) -> Lines<R> {
        Lines {
            input,
            max,
            line: Vec::new(),
            discarding: false,
        }
    }

    pub(super) async fn next(&mut self) -> Next<'_> {
        if self.line.capacity() > 1 << 20 {
            // A big line's buffer is not kept for the small ones after it.
            self.line = Vec::new();
        }
        self.line.clear();
        loop {
            let chunk = match self.input.fill_buf().await {
                Ok(chunk) => chunk,
                Err(_) => return Next::End,
            };
            if chunk.is_empty() {
                if self.discarding || self.line.is_empty() {
                    return Next::End;
                }
                return Next::Line(&self.line);
            }
            let (take, newline) = match chunk.iter().position(|b| *b == b'\n') {
                Some(at) => (at, true),
                None => (chunk.len(), false),
            };
            if self.discarding {
                self.input.consume(take + usize::from(newline));
                self.discarding = !newline;
                continue;
            }
            if self.line.len() + take > self.max {
                self.input.consume(take + usize::from(newline));
                self.line = Vec::new();
                self.discarding = !newline;
                return Next::TooLong;
            }
            self.line.extend_from_slice(&chunk[..take]);
            self.input.consume(take + usize::from(newline));
            if newline {
                return Next::Line(&self.line);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn all(input: &[u8], max: usize, chunk: usize) -> Vec<Option<String>> {
        let reader = tokio::io::BufReader::with_capacity(chunk, input);
        let mut lines = Lines::new(reader, max);
        let mut got = Vec::new();
        loop {
            match lines.next().await {
                Next::Line(l) => got.push(Some(String::from_utf8_lossy(l).into_owned())),
                Next::TooLong => got.push(None),
                Next::End => return got,
            }
        }
    }

    #[tokio::test]
    async fn long_lines_are_reported_once_and_dropped() {
        for chunk in [1, 3, 8, 1024] {
            let got = all(b"ab\n0123456789\ncd\n01234567890123\nlast", 8, chunk).await;
            let want = [Some("ab"), None, Some("cd"), None, Some("last")];
            assert_eq!(
                got,
                want.map(|w| w.map(String::from)).to_vec(),
                "chunk {chunk}"
            );
            // A line exactly at the bound is a line; over it at the end of input, reported.
            let got = all(b"01234567\n012345678", 8, chunk).await;
            assert_eq!(got, [Some("01234567".to_string()), None], "chunk {chunk}");
        }
    }
}
