//! The envelope (`protocol`, `version`, `type`) and line encoding/decoding.

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

use crate::command::Command;
use crate::error::{DecodeError, DecodeErrorKind, Rule, ValidationError};
use crate::event::Event;
use crate::grammar;
use crate::json_text;
use crate::limits::{PROTOCOL, PROTOCOL_VERSION};
use crate::session_tool;

/// Command types, in wire spelling.
pub const COMMAND_TYPES: [&str; 12] = [
    "hello",
    "start",
    "resume",
    "turn",
    "cancel",
    "detach",
    "reattach",
    "status",
    "terminal_input",
    "terminal_resize",
    "outbound_message_result",
    "session_tool_result",
];

/// Event types, in wire spelling. The set is closed.
pub const EVENT_TYPES: [&str; 11] = [
    "hello",
    "ready",
    "progress",
    "final",
    "failure",
    "lineage_changed",
    "access_url",
    "terminal_screen",
    "status",
    "outbound_message",
    "session_tool",
];

/// Decodes and validates one command line (with or without its trailing newline).
/// Never panics.
pub fn decode_command(line: &[u8]) -> Result<Command, DecodeError> {
    let (map, ids) = open_envelope(line, &COMMAND_TYPES)?;
    let command: Command = typed(map, &ids)?;
    command.validate().map_err(|err| ids.error(err))?;
    Ok(command)
}

/// Decodes and validates one event line (with or without its trailing newline).
/// Never panics.
pub fn decode_event(line: &[u8]) -> Result<Event, DecodeError> {
    let (map, ids) = open_envelope(line, &EVENT_TYPES)?;
    if map.get("type").and_then(Value::as_str) == Some("session_tool") {
        let request = map.get("request").cloned().unwrap_or(Value::Null);
        session_tool::check_request_keys("request", &request).map_err(|err| ids.error(err))?;
    }
    let event: Event = typed(map, &ids)?;
    event.validate().map_err(|err| ids.error(err))?;
    Ok(event)
}

/// Encodes a command as one line, ending in `\n`. Does not validate.
pub fn encode_command(command: &Command) -> Vec<u8> {
    encode(command)
}

/// Encodes an event as one line, ending in `\n`. Does not validate.
pub fn encode_event(event: &Event) -> Vec<u8> {
    let mut line = Vec::new();
    write_event(event, &mut line).expect("writing to a Vec never fails");
    line
}

/// Writes an event as one line, ending in `\n`, to `out`. Does not validate. A `progress`
/// event, which carries a turn's output and may be megabytes, is written straight from its
/// strings (no JSON value built first, no copy of its text, the content escaped by
/// [`json_text::write_str`]): the same bytes, field for field, as every other event's path
/// makes.
pub fn write_event<W: std::io::Write>(event: &Event, mut out: W) -> std::io::Result<()> {
    match event {
        Event::Progress(progress) => {
            out.write_all(b"{\"protocol\":")?;
            serde_json::to_writer(&mut out, PROTOCOL)?;
            out.write_all(b",\"version\":")?;
            serde_json::to_writer(&mut out, &PROTOCOL_VERSION)?;
            out.write_all(b",\"type\":\"progress\",\"turnId\":")?;
            serde_json::to_writer(&mut out, &progress.turn_id)?;
            out.write_all(b",\"content\":")?;
            json_text::write_str(&mut out, &progress.content)?;
            out.write_all(b"}\n")
        }
        _ => {
            serde_json::to_writer(&mut out, &to_envelope_value(event))?;
            out.write_all(b"\n")
        }
    }
}

/// The envelope-wrapped JSON value of a command (`protocol`, `version`, `type` first).
pub fn command_to_value(command: &Command) -> Value {
    to_envelope_value(command)
}

/// The envelope-wrapped JSON value of an event (`protocol`, `version`, `type` first).
pub fn event_to_value(event: &Event) -> Value {
    to_envelope_value(event)
}

fn encode<T: Serialize>(message: &T) -> Vec<u8> {
    let mut line = serde_json::to_vec(&to_envelope_value(message))
        .expect("a serde_json::Value always serializes");
    line.push(b'\n');
    line
}

fn to_envelope_value<T: Serialize>(message: &T) -> Value {
    // Every protocol type serializes to an object with string keys; the fallback keeps this
    // function total anyway.
    let body = match serde_json::to_value(message) {
        Ok(Value::Object(map)) => map,
        _ => Map::new(),
    };
    let mut out = Map::with_capacity(body.len() + 2);
    out.insert("protocol".into(), Value::from(PROTOCOL));
    out.insert("version".into(), Value::from(PROTOCOL_VERSION));
    out.extend(body);
    Value::Object(out)
}

/// Correlation ids read from a line before full validation.
struct Ids {
    request_id: Option<String>,
    turn_id: Option<String>,
}

impl Ids {
    /// Result commands must never be answered, so their `requestId` is not offered for a reply.
    fn read(map: &Map<String, Value>) -> Self {
        let no_reply = matches!(
            map.get("type").and_then(Value::as_str),
            Some("outbound_message_result" | "session_tool_result")
        );
        let request_id = map
            .get("requestId")
            .filter(|_| !no_reply)
            .and_then(Value::as_str)
            .filter(|id| grammar::request_id("requestId", id).is_ok())
            .map(str::to_owned);
        let turn_id = map
            .get("turnId")
            .and_then(Value::as_str)
            .filter(|id| grammar::turn_id("turnId", id).is_ok())
            .map(str::to_owned);
        Ids {
            request_id,
            turn_id,
        }
    }

    fn wrap(&self, kind: DecodeErrorKind) -> DecodeError {
        DecodeError {
            kind,
            request_id: self.request_id.clone(),
            turn_id: self.turn_id.clone(),
        }
    }

    fn error(&self, err: ValidationError) -> DecodeError {
        self.wrap(DecodeErrorKind::InvalidMessage(err))
    }
}

fn open_envelope(
    line: &[u8],
    known_types: &[&str],
) -> Result<(Map<String, Value>, Ids), DecodeError> {
    let value: Value = serde_json::from_slice(line).map_err(|err| {
        DecodeError::new(DecodeErrorKind::InvalidJson {
            detail: err.to_string(),
        })
    })?;
    let Value::Object(mut map) = value else {
        return Err(DecodeError::new(DecodeErrorKind::NotAnObject));
    };
    let ids = Ids::read(&map);
    let protocol = map.remove("protocol");
    let version = map.remove("version");
    if protocol.as_ref().and_then(Value::as_str) != Some(PROTOCOL) {
        return Err(ids.wrap(DecodeErrorKind::ProtocolMismatch {
            detail: format!("\"protocol\" is {}", describe(protocol.as_ref())),
        }));
    }
    if !version.as_ref().is_some_and(is_version_one) {
        return Err(ids.wrap(DecodeErrorKind::ProtocolMismatch {
            detail: format!("\"version\" is {}", describe(version.as_ref())),
        }));
    }
    match map.get("type") {
        Some(Value::String(t)) if known_types.contains(&t.as_str()) => Ok((map, ids)),
        Some(Value::String(t)) => Err(ids.wrap(DecodeErrorKind::UnknownType {
            type_name: Some(t.clone()),
        })),
        _ => Err(ids.wrap(DecodeErrorKind::UnknownType { type_name: None })),
    }
}

/// `1` and `1.0` are the same JSON number to the host.
fn is_version_one(value: &Value) -> bool {
    value.as_u64() == Some(PROTOCOL_VERSION) || value.as_f64() == Some(1.0)
}

fn describe(value: Option<&Value>) -> String {
    match value {
        None => "missing".into(),
        Some(v) => {
            let text = v.to_string();
            if text.chars().count() > 64 {
                format!("{}…", text.chars().take(64).collect::<String>())
            } else {
                text
            }
        }
    }
}

fn typed<T: DeserializeOwned>(map: Map<String, Value>, ids: &Ids) -> Result<T, DecodeError> {
    let type_name = map
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    let probe = locate_type_error(&type_name, &map);
    serde_json::from_value(Value::Object(map)).map_err(|err| {
        let (path, detail) = probe.unwrap_or_else(|| (missing_field(&err), err.to_string()));
        ids.error(ValidationError::new(
            Rule::FieldType,
            path,
            format!("{type_name}: {detail}"),
        ))
    })
}

/// serde_json does not report where inside a value a type error is; decode the nested
/// structures on their own first, so the error can name `state`, `usage`, `request`, ….
fn locate_type_error(type_name: &str, map: &Map<String, Value>) -> Option<(String, String)> {
    fn probe<T: DeserializeOwned>(map: &Map<String, Value>, key: &str) -> Option<(String, String)> {
        let value = map.get(key)?;
        serde_json::from_value::<T>(value.clone())
            .err()
            .map(|err| (key.to_owned(), err.to_string()))
    }
    /// The state is flat, so a missing field is one of its own.
    fn probe_state(map: &Map<String, Value>) -> Option<(String, String)> {
        probe::<State>(map, "state").map(|(path, detail)| {
            match detail
                .strip_prefix("missing field `")
                .and_then(|r| r.split('`').next())
            {
                Some(field) => (format!("{path}.{field}"), detail.clone()),
                None => (path, detail),
            }
        })
    }
    use crate::{outbound, session_tool, state::State, usage::Usage};
    match type_name {
        "ready" | "lineage_changed" | "status" | "resume" => probe_state(map),
        "final" => probe_state(map).or_else(|| probe::<Usage>(map, "usage")),
        "turn" => probe::<crate::command::TrustedCaller>(map, "trustedCaller"),
        "outbound_message" => probe::<Vec<outbound::OutboundImage>>(map, "images"),
        "outbound_message_result" => probe::<outbound::OutboundResult>(map, "result"),
        "session_tool" => probe::<session_tool::SessionToolRequest>(map, "request"),
        "session_tool_result" => probe::<session_tool::SessionToolResult>(map, "result"),
        _ => None,
    }
}

/// `missing field `x`` → `x` (a top-level field), else the root.
fn missing_field(err: &serde_json::Error) -> String {
    let text = err.to_string();
    text.strip_prefix("missing field `")
        .and_then(|rest| rest.split('`').next())
        .map(str::to_owned)
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The progress fast path writes exactly what the general path writes.
    #[test]
    fn progress_lines_match_the_general_encoding() {
        let contents = [
            String::new(),
            "plain text\n".to_string(),
            "quotes \" and \\ backslashes, tabs\t and \r returns".to_string(),
            "control \u{0}\u{1}\u{1b}[31m and DEL \u{7f}".to_string(),
            "unicode é 中文 😀 \u{2028}\u{2029}".to_string(),
            "x".repeat(100_000),
        ];
        for content in contents {
            let event = Event::progress("turn-1", content.clone());
            let general = {
                let mut line = serde_json::to_vec(&to_envelope_value(&event)).unwrap();
                line.push(b'\n');
                line
            };
            assert_eq!(encode_event(&event), general, "{content:?}");
            assert_eq!(decode_event(&general).unwrap(), event);
        }
    }
}
