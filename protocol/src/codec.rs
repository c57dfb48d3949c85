//! JSONL framing on tokio-util: one JSON object per `\n`-terminated line.
//!
//! Oversized lines are reported once and then discarded up to the next newline without
//! being buffered, so the reader recovers at the next line. Framing problems are items of
//! the stream, not stream errors: a `FramedRead` ends after its decoder returns `Err`, and a
//! provider must keep reading after a bad line.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::{Buf, Bytes, BytesMut};
use futures::{Sink, Stream};
use tokio_util::codec::{Decoder, Encoder, FramedRead, FramedWrite};

use crate::command::Command;
use crate::envelope::{decode_command, decode_event, encode_command, write_event};
use crate::error::DecodeError;
use crate::event::Event;
use crate::limits::MAX_LINE_BYTES;

/// A framing problem with one line. The stream continues after it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LineError {
    /// A line longer than the limit; its bytes up to the next newline are discarded.
    #[error(
        "line longer than {limit} bytes; it was discarded up to the next newline. Keep every \
         message under {limit} bytes"
    )]
    TooLong {
        /// The limit in force.
        limit: usize,
    },
    /// The input ended in the middle of a line (no terminating `\n`).
    #[error(
        "input ended inside a line of {bytes} bytes without a terminating newline; end every \
         message with \\n"
    )]
    UnterminatedAtEof {
        /// How many bytes the partial line had (capped at the limit).
        bytes: usize,
    },
}

/// An error reading one message: I/O, framing, or decoding.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FrameError {
    /// The underlying reader or writer failed. The stream ends after this.
    #[error("I/O error on the protocol stream: {0}")]
    Io(#[from] io::Error),
    /// A framing problem with one line; the next line is read normally.
    #[error(transparent)]
    Line(#[from] LineError),
    /// A complete line that is not a valid message; the next line is read normally.
    #[error(transparent)]
    Decode(#[from] DecodeError),
}

impl FrameError {
    /// A stable snake_case code: `io_error`, `line_too_long`, `unterminated_line`, or the
    /// decode error's code.
    pub fn code(&self) -> &'static str {
        match self {
            FrameError::Io(_) => "io_error",
            FrameError::Line(LineError::TooLong { .. }) => "line_too_long",
            FrameError::Line(LineError::UnterminatedAtEof { .. }) => "unterminated_line",
            FrameError::Decode(err) => err.code(),
        }
    }

    /// A `failure` event a provider can send for this error (correlated when the line's ids
    /// could be read); `None` for I/O errors, after which the stream is gone.
    pub fn failure_event(&self) -> Option<Event> {
        match self {
            FrameError::Io(_) => None,
            FrameError::Decode(err) => Some(err.failure_event()),
            FrameError::Line(err) => Some(Event::failure(
                None,
                None,
                self.code(),
                err.to_string(),
                crate::FailureStatus::Failed,
                false,
            )),
        }
    }

    /// The decode error, if the line was complete but invalid.
    pub fn decode_error(&self) -> Option<&DecodeError> {
        match self {
            FrameError::Decode(err) => Some(err),
            _ => None,
        }
    }
}

/// Splits bytes into lines and encodes messages as lines.
///
/// Decoder items are `Ok(line)` (without `\n` / `\r\n`; blank lines skipped) or
/// `Err(LineError)`; the decoder's own error type is only ever I/O.
#[derive(Debug, Clone)]
pub struct JsonlCodec {
    max_line_bytes: usize,
    /// How far into the buffer we already looked for `\n`.
    scanned: usize,
    /// Inside an oversized line: drop bytes until the next `\n`.
    discarding: bool,
}

impl Default for JsonlCodec {
    fn default() -> Self {
        Self::new()
    }
}

impl JsonlCodec {
    /// A codec with the protocol's limit ([`MAX_LINE_BYTES`]).
    pub fn new() -> Self {
        Self::with_max_line_bytes(MAX_LINE_BYTES)
    }

    /// A codec with a custom line limit (bytes before the `\n`).
    pub fn with_max_line_bytes(max_line_bytes: usize) -> Self {
        JsonlCodec {
            max_line_bytes,
            scanned: 0,
            discarding: false,
        }
    }

    /// The line limit in force.
    pub fn max_line_bytes(&self) -> usize {
        self.max_line_bytes
    }
}

fn is_blank(line: &[u8]) -> bool {
    line.iter().all(u8::is_ascii_whitespace)
}

impl Decoder for JsonlCodec {
    type Item = Result<Bytes, LineError>;
    type Error = io::Error;

    fn decode(&mut self, buf: &mut BytesMut) -> Result<Option<Self::Item>, io::Error> {
        loop {
            let newline = buf[self.scanned..]
                .iter()
                .position(|b| *b == b'\n')
                .map(|i| i + self.scanned);
            let Some(end) = newline else {
                if self.discarding {
                    buf.clear();
                    self.scanned = 0;
                    return Ok(None);
                }
                if buf.len() > self.max_line_bytes {
                    buf.clear();
                    self.scanned = 0;
                    self.discarding = true;
                    return Ok(Some(Err(LineError::TooLong {
                        limit: self.max_line_bytes,
                    })));
                }
                self.scanned = buf.len();
                return Ok(None);
            };
            self.scanned = 0;
            let line = buf.split_to(end + 1).freeze();
            if self.discarding {
                self.discarding = false;
                continue;
            }
            if end > self.max_line_bytes {
                return Ok(Some(Err(LineError::TooLong {
                    limit: self.max_line_bytes,
                })));
            }
            let mut content = line.slice(..end);
            if content.last() == Some(&b'\r') {
                content = content.slice(..content.len() - 1);
            }
            if is_blank(&content) {
                continue;
            }
            return Ok(Some(Ok(content)));
        }
    }

    fn decode_eof(&mut self, buf: &mut BytesMut) -> Result<Option<Self::Item>, io::Error> {
        if let Some(item) = self.decode(buf)? {
            return Ok(Some(item));
        }
        self.scanned = 0;
        if self.discarding {
            self.discarding = false;
            buf.clear();
            return Ok(None);
        }
        if buf.is_empty() {
            return Ok(None);
        }
        let partial = buf.len();
        let blank = is_blank(buf);
        buf.advance(partial);
        if blank {
            Ok(None)
        } else {
            Ok(Some(Err(LineError::UnterminatedAtEof { bytes: partial })))
        }
    }
}

impl Encoder<&Event> for JsonlCodec {
    type Error = io::Error;

    fn encode(&mut self, event: &Event, dst: &mut BytesMut) -> Result<(), io::Error> {
        write_event(event, bytes::BufMut::writer(dst))
    }
}

impl Encoder<Event> for JsonlCodec {
    type Error = io::Error;

    fn encode(&mut self, event: Event, dst: &mut BytesMut) -> Result<(), io::Error> {
        self.encode(&event, dst)
    }
}

impl Encoder<&Command> for JsonlCodec {
    type Error = io::Error;

    fn encode(&mut self, command: &Command, dst: &mut BytesMut) -> Result<(), io::Error> {
        dst.extend_from_slice(&encode_command(command));
        Ok(())
    }
}

impl Encoder<Command> for JsonlCodec {
    type Error = io::Error;

    fn encode(&mut self, command: Command, dst: &mut BytesMut) -> Result<(), io::Error> {
        self.encode(&command, dst)
    }
}

type LineItem = Result<Result<Bytes, LineError>, io::Error>;

fn map_line<T>(
    item: LineItem,
    decode: fn(&[u8]) -> Result<T, DecodeError>,
) -> Result<T, FrameError> {
    let line = item??;
    Ok(decode(&line)?)
}

macro_rules! reader {
    ($(#[$doc:meta])* $name:ident, $item:ty, $decode:path) => {
        $(#[$doc])*
        #[derive(Debug)]
        pub struct $name<R> {
            inner: FramedRead<R, JsonlCodec>,
        }

        impl<R> $name<R> {
            /// Reads with the protocol's 4 MiB line limit.
            pub fn new(reader: R) -> Self {
                Self::with_codec(reader, JsonlCodec::new())
            }

            /// Reads with a custom codec (e.g. another line limit).
            pub fn with_codec(reader: R, codec: JsonlCodec) -> Self {
                $name {
                    inner: FramedRead::new(reader, codec),
                }
            }

            /// The underlying reader.
            pub fn into_inner(self) -> R {
                self.inner.into_inner()
            }
        }

        impl<R> Stream for $name<R>
        where
            R: Unpin,
            FramedRead<R, JsonlCodec>: Stream<Item = LineItem> + Unpin,
        {
            type Item = Result<$item, FrameError>;

            fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
                Pin::new(&mut self.inner)
                    .poll_next(cx)
                    .map(|item| item.map(|item| map_line(item, $decode)))
            }
        }
    };
}

reader!(
    /// Reads commands (the provider's stdin). Yields one item per non-blank line: a valid
    /// [`Command`] or a [`FrameError`]; after a line or decode error it keeps going.
    CommandReader,
    Command,
    decode_command
);

reader!(
    /// Reads events (the host's view of the provider's stdout), like [`CommandReader`].
    EventReader,
    Event,
    decode_event
);

/// Writes messages as lines and flushes after each one.
#[derive(Debug)]
pub struct LineWriter<W> {
    inner: FramedWrite<W, JsonlCodec>,
}

impl<W> LineWriter<W> {
    /// Wraps a writer (for a provider: stdout).
    pub fn new(writer: W) -> Self {
        LineWriter {
            inner: FramedWrite::new(writer, JsonlCodec::new()),
        }
    }

    /// The underlying writer.
    pub fn into_inner(self) -> W {
        self.inner.into_inner()
    }

    /// Writes one event line and flushes it.
    pub async fn send_event(&mut self, event: &Event) -> io::Result<()>
    where
        for<'a> FramedWrite<W, JsonlCodec>: Sink<&'a Event, Error = io::Error> + Unpin,
    {
        futures::SinkExt::send(&mut self.inner, event).await
    }

    /// Writes one command line and flushes it.
    pub async fn send_command(&mut self, command: &Command) -> io::Result<()>
    where
        for<'a> FramedWrite<W, JsonlCodec>: Sink<&'a Command, Error = io::Error> + Unpin,
    {
        futures::SinkExt::send(&mut self.inner, command).await
    }
}
