//! JSONL framing: line splitting, blank lines, `\r\n`, oversized lines without buffering them
//! whole, recovery at the next line, partial lines at EOF, and arbitrary bytes and chunkings.

use bytes::BytesMut;
use futures::StreamExt;
use proptest::prelude::*;
use remote_runner_protocol::{
    Command, CommandReader, Event, EventReader, FrameError, JsonlCodec, LineError, LineWriter,
    MAX_LINE_BYTES, SessionStatus, decode_command, decode_event, encode_command, encode_event,
};
use tokio_util::codec::Decoder;

const CANCEL: &[u8] =
    br#"{"protocol":"botmux.remote-runner","version":1,"type":"cancel","requestId":"c1"}"#;

type Item = Result<Vec<u8>, LineError>;

/// Feeds `input` to a codec in the given chunk sizes and collects every item until EOF.
fn run_codec(input: &[u8], chunks: &[usize], max: usize) -> (Vec<Item>, usize) {
    let mut codec = JsonlCodec::with_max_line_bytes(max);
    let mut buf = BytesMut::new();
    let mut items = Vec::new();
    let mut peak = 0;
    let mut offset = 0;
    let mut sizes = chunks.iter().copied().filter(|n| *n > 0).cycle();
    while offset < input.len() {
        let n = sizes
            .next()
            .unwrap_or(input.len())
            .min(input.len() - offset);
        buf.extend_from_slice(&input[offset..offset + n]);
        offset += n;
        peak = peak.max(buf.len());
        while let Some(item) = codec.decode(&mut buf).unwrap() {
            items.push(item.map(|b| b.to_vec()));
        }
    }
    while let Some(item) = codec.decode_eof(&mut buf).unwrap() {
        items.push(item.map(|b| b.to_vec()));
    }
    (items, peak)
}

/// What the framing must produce, computed on the whole input at once.
fn model(input: &[u8], max: usize) -> Vec<Item> {
    let mut items = Vec::new();
    let mut parts: Vec<&[u8]> = input.split(|b| *b == b'\n').collect();
    let tail = parts.pop().unwrap_or_default();
    for line in parts {
        if line.len() > max {
            items.push(Err(LineError::TooLong { limit: max }));
            continue;
        }
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if !line.iter().all(u8::is_ascii_whitespace) {
            items.push(Ok(line.to_vec()));
        }
    }
    if tail.len() > max {
        items.push(Err(LineError::TooLong { limit: max }));
    } else if !tail.iter().all(u8::is_ascii_whitespace) {
        items.push(Err(LineError::UnterminatedAtEof { bytes: tail.len() }));
    }
    items
}

#[test]
fn splits_lines_skips_blank_ones_and_tolerates_crlf() {
    let input = b"one\n\n   \r\n\ttwo\r\nthree\n";
    let (items, _) = run_codec(input, &[1], 64);
    assert_eq!(
        items,
        vec![
            Ok(b"one".to_vec()),
            Ok(b"\ttwo".to_vec()),
            Ok(b"three".to_vec())
        ]
    );
}

#[test]
fn a_partial_line_at_eof_is_an_error_value() {
    let (items, _) = run_codec(b"one\ntw", &[3], 64);
    assert_eq!(
        items,
        vec![
            Ok(b"one".to_vec()),
            Err(LineError::UnterminatedAtEof { bytes: 2 })
        ]
    );
    // Trailing blank bytes at EOF are not an error.
    let (items, _) = run_codec(b"one\n  ", &[100], 64);
    assert_eq!(items, vec![Ok(b"one".to_vec())]);
}

#[test]
fn a_line_of_exactly_the_limit_is_accepted_and_one_more_byte_is_not() {
    let mut input = vec![b'a'; 16];
    input.push(b'\n');
    input.extend(vec![b'b'; 17]);
    input.push(b'\n');
    input.extend(b"ok\n");
    for chunk in [1, 5, 16, 17, 100] {
        let (items, _) = run_codec(&input, &[chunk], 16);
        assert_eq!(
            items,
            vec![
                Ok(vec![b'a'; 16]),
                Err(LineError::TooLong { limit: 16 }),
                Ok(b"ok".to_vec())
            ],
            "chunk {chunk}"
        );
    }
}

#[test]
fn an_oversized_line_is_discarded_without_buffering_it_whole() {
    let mut input = vec![b'x'; 5 * 1024 * 1024];
    input.push(b'\n');
    input.extend_from_slice(CANCEL);
    input.push(b'\n');
    let chunk = 64 * 1024;
    let (items, peak) = run_codec(&input, &[chunk], MAX_LINE_BYTES);
    assert_eq!(items.len(), 2);
    assert_eq!(
        items[0],
        Err(LineError::TooLong {
            limit: MAX_LINE_BYTES
        })
    );
    assert_eq!(items[1].as_deref(), Ok(CANCEL));
    assert!(
        peak <= MAX_LINE_BYTES + chunk,
        "buffered {peak} bytes; the limit is {MAX_LINE_BYTES}"
    );
}

#[tokio::test]
async fn command_reader_reports_a_5_mib_line_once_then_reads_the_next_command() {
    let mut input = vec![b'{'; 5 * 1024 * 1024];
    input.push(b'\n');
    input.extend_from_slice(CANCEL);
    input.push(b'\n');
    let mut reader = CommandReader::new(&input[..]);
    let first = reader.next().await.unwrap();
    assert!(
        matches!(first, Err(FrameError::Line(LineError::TooLong { .. }))),
        "{first:?}"
    );
    assert_eq!(first.unwrap_err().code(), "line_too_long");
    let second = reader.next().await.unwrap().unwrap();
    assert!(matches!(&second, Command::Cancel(c) if c.request_id == "c1"));
    assert!(reader.next().await.is_none());
}

#[tokio::test]
async fn command_reader_keeps_going_after_bad_lines() {
    let mut input = Vec::new();
    input.extend_from_slice(b"not json\n");
    input.extend_from_slice(
        br#"{"protocol":"botmux.remote-runner","version":1,"type":"explode","requestId":"x1"}"#,
    );
    input.push(b'\n');
    input.extend_from_slice(br#"{"protocol":"botmux.remote-runner","version":1,"type":"turn","requestId":"t1","turnId":"","content":"x"}"#);
    input.extend_from_slice(b"\r\n\n");
    input.extend_from_slice(CANCEL);
    input.extend_from_slice(b"\n{\"partial\":");
    let items: Vec<_> = CommandReader::new(&input[..]).collect().await;
    let codes: Vec<&str> = items
        .iter()
        .map(|item| match item {
            Ok(command) => command.type_name(),
            Err(err) => err.code(),
        })
        .collect();
    assert_eq!(
        codes,
        [
            "invalid_json",
            "unknown_type",
            "invalid_message",
            "cancel",
            "unterminated_line"
        ]
    );
    let Err(FrameError::Decode(err)) = &items[2] else {
        panic!()
    };
    assert_eq!(err.request_id.as_deref(), Some("t1"));
    let Err(FrameError::Decode(err)) = &items[1] else {
        panic!()
    };
    assert_eq!(err.request_id.as_deref(), Some("x1"));
}

#[tokio::test]
async fn writer_and_event_reader_round_trip_over_a_pipe() {
    let (client, server) = tokio::io::duplex(64);
    let events = vec![
        Event::status("t1", SessionStatus::Busy, None),
        Event::progress("turn-1", "line one\nline two"),
        Event::final_result("turn-1", "done", None, None),
    ];
    let to_send = events.clone();
    let writer = tokio::spawn(async move {
        let mut out = LineWriter::new(server);
        for event in &to_send {
            out.send_event(event).await.unwrap();
        }
    });
    let received: Vec<Event> = EventReader::new(client)
        .map(|item| item.unwrap())
        .collect()
        .await;
    writer.await.unwrap();
    assert_eq!(received, events);
}

#[tokio::test]
async fn writer_writes_exactly_the_encoded_lines() {
    let mut out = LineWriter::new(Vec::new());
    let command = decode_command(CANCEL).unwrap();
    out.send_command(&command).await.unwrap();
    let event = Event::progress("t", "x");
    out.send_event(&event).await.unwrap();
    let mut expected = encode_command(&command);
    expected.extend(encode_event(&event));
    assert_eq!(out.into_inner(), expected);
}

fn byte_soup() -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(
        prop_oneof![
            4 => Just(b'a'),
            2 => Just(b'\n'),
            1 => Just(b'\r'),
            1 => Just(b' '),
            1 => Just(b'{'),
            1 => any::<u8>(),
        ],
        0..200,
    )
}

proptest! {
    #[test]
    fn framing_matches_the_model_for_any_bytes_and_chunking(
        input in byte_soup(),
        chunks in prop::collection::vec(1usize..40, 1..8),
        max in 1usize..24,
    ) {
        let (items, peak) = run_codec(&input, &chunks, max);
        prop_assert_eq!(items, model(&input, max));
        let largest_chunk = chunks.iter().copied().max().unwrap_or(1);
        prop_assert!(peak <= max + largest_chunk);
    }

    #[test]
    fn decoders_never_panic_on_arbitrary_bytes(input in prop::collection::vec(any::<u8>(), 0..300)) {
        let _ = decode_command(&input);
        let _ = decode_event(&input);
    }

    #[test]
    fn decoders_never_panic_on_envelope_shaped_json(
        ty in prop_oneof![Just("turn"), Just("final"), Just("session_tool"), Just("resume"), Just("x")],
        body in "[{}\\[\\]\":,a-z0-9 -]{0,80}",
    ) {
        let line = format!(r#"{{"protocol":"botmux.remote-runner","version":1,"type":"{ty}",{body}"#);
        let _ = decode_command(line.as_bytes());
        let _ = decode_event(line.as_bytes());
    }

    #[test]
    fn reader_recovers_after_garbage(garbage in byte_soup()) {
        let mut input = garbage.clone();
        input.push(b'\n');
        input.extend_from_slice(CANCEL);
        input.push(b'\n');
        let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
        let items: Vec<_> = runtime.block_on(CommandReader::new(&input[..]).collect());
        let last = items.last().unwrap();
        prop_assert!(matches!(last, Ok(Command::Cancel(_))), "{:?}", last);
    }
}
