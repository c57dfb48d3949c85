//! Every example line in docs/protocol.md is a valid message that round-trips.

use remote_runner_protocol::{decode_command, decode_event, encode_command, encode_event};
use serde_json::Value;

fn blocks(info: &str) -> Vec<String> {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/protocol.md"))
        .expect("docs/protocol.md exists");
    let mut lines = Vec::new();
    let mut inside = false;
    for line in doc.lines() {
        if inside {
            if line.trim_start().starts_with("```") {
                inside = false;
            } else if !line.trim().is_empty() {
                lines.push(line.to_owned());
            }
        } else if line.trim() == format!("```{info}") {
            inside = true;
        }
    }
    lines
}

#[test]
fn command_examples_decode_and_round_trip() {
    let lines = blocks("jsonl commands");
    assert!(lines.len() >= 5, "the doc lost its command examples");
    for line in lines {
        let command = decode_command(line.as_bytes()).unwrap_or_else(|e| panic!("{line}: {e}"));
        let again: Value = serde_json::from_slice(&encode_command(&command)).unwrap();
        assert_eq!(again, serde_json::from_str::<Value>(&line).unwrap());
    }
}

#[test]
fn event_examples_decode_and_round_trip() {
    let lines = blocks("jsonl events");
    assert!(lines.len() >= 10, "the doc lost its event examples");
    for line in lines {
        let event = decode_event(line.as_bytes()).unwrap_or_else(|e| panic!("{line}: {e}"));
        let again: Value = serde_json::from_slice(&encode_event(&event)).unwrap();
        assert_eq!(again, serde_json::from_str::<Value>(&line).unwrap());
    }
}

#[test]
fn the_state_example_is_valid() {
    let lines = blocks("json");
    let state_line = lines
        .iter()
        .find(|l| l.contains("\"providerState\""))
        .expect("the doc shows a state");
    let state: remote_runner_protocol::State = serde_json::from_str(state_line).unwrap();
    state.validate().unwrap();
}
