//! Fuzzes the line decoders and the JSONL codec: no input may panic, every accepted message
//! must re-encode to a line that decodes to the same message, and the codec must never
//! buffer much more than its line limit.
#![no_main]

use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;
use remote_runner_protocol::{
    JsonlCodec, decode_command, decode_event, encode_command, encode_event,
};
use tokio_util::codec::Decoder;

const MAX_LINE: usize = 256;

fn check_line(line: &[u8]) {
    if let Ok(command) = decode_command(line) {
        let again = decode_command(&encode_command(&command)).expect("re-encoded command decodes");
        assert_eq!(again, command);
    }
    if let Ok(event) = decode_event(line) {
        let again = decode_event(&encode_event(&event)).expect("re-encoded event decodes");
        assert_eq!(again, event);
    }
}

fuzz_target!(|data: &[u8]| {
    check_line(data);

    // Feed the same bytes to the codec in chunks whose size comes from the first byte.
    let chunk = data.first().map_or(1, |b| usize::from(*b % 32) + 1);
    let mut codec = JsonlCodec::with_max_line_bytes(MAX_LINE);
    let mut buf = BytesMut::new();
    for piece in data.chunks(chunk) {
        buf.extend_from_slice(piece);
        assert!(
            buf.len() <= MAX_LINE + chunk,
            "codec buffered an oversized line"
        );
        while let Some(item) = codec.decode(&mut buf).expect("the codec has no I/O errors") {
            if let Ok(line) = item {
                assert!(line.len() <= MAX_LINE);
                check_line(&line);
            }
        }
    }
    while let Some(item) = codec
        .decode_eof(&mut buf)
        .expect("the codec has no I/O errors")
    {
        if let Ok(line) = item {
            check_line(&line);
        }
    }
});
