//! `code serve`'s messages, typed both ways: [`Message`] in (one variant per message kind),
//! [`Outgoing`] out. Values (resolutions, arguments, results) stay raw JSON text: no depth
//! limit, lone surrogates and `-0` kept.

use remote_runner_engine::engine::code::{CodeBindingNamespace, raw_member};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

/// A message from the harness, its fields checked for its kind.
#[derive(Debug)]
pub(super) enum Message<'a> {
    /// `{"type":"run","runId","program","bindings"}`: start a run.
    Run {
        run_id: String,
        program: String,
        bindings: Vec<CodeBindingNamespace>,
    },
    /// `{"type":"abort","runId"}`: stop a run in flight.
    Abort { run_id: String },
    /// `{"type":"resolve","runId","callId","value"}`: settle a binding call with a value.
    Resolve {
        run_id: String,
        call_id: String,
        value: &'a RawValue,
    },
    /// `{"type":"reject","runId","callId","message"}`: settle a binding call with a failure.
    Reject {
        run_id: String,
        call_id: String,
        message: String,
    },
}

/// The members of a line, before they are checked for its type: a missing member gets an error
/// reply naming it (serde's own "missing field" would not say what the member is for).
#[derive(Deserialize)]
struct Fields<'a> {
    #[serde(rename = "type")]
    kind: Option<String>,
    #[serde(rename = "runId")]
    run_id: Option<String>,
    program: Option<String>,
    bindings: Option<Vec<CodeBindingNamespace>>,
    #[serde(rename = "callId")]
    call_id: Option<String>,
    #[serde(borrow, default)]
    value: Option<&'a RawValue>,
    message: Option<String>,
}

impl<'a> Message<'a> {
    /// The message on one line; `Err` is the message of the error reply.
    pub(super) fn parse(line: &'a str) -> Result<Message<'a>, String> {
        let f: Fields = serde_json::from_str(line)
            .map_err(|e| format!("the line is not a message of the code-runtime protocol: {e}"))?;
        let kind = f.kind.as_deref().ok_or("the message has no type")?;
        let run_id = f
            .run_id
            .ok_or_else(|| format!("the {kind} message has no runId"))?;
        let call_id = || {
            f.call_id
                .clone()
                .ok_or_else(|| format!("the {kind} message has no callId"))
        };
        match kind {
            "run" => Ok(Message::Run {
                run_id,
                program: f
                    .program
                    .ok_or("the run message has no program (the program's source text)")?,
                bindings: f
                    .bindings
                    .ok_or("the run message has no bindings (an array, [] for none)")?,
            }),
            "abort" => Ok(Message::Abort { run_id }),
            "resolve" => {
                let call_id = call_id()?;
                let value = match f.value {
                    Some(v) => v,
                    // `Option<&RawValue>` reads `null` as `None`: tell it from a missing member.
                    None if raw_member(line, "value") == Some("null") => null(),
                    None => return Err("the resolve message has no value".into()),
                };
                Ok(Message::Resolve {
                    run_id,
                    call_id,
                    value,
                })
            }
            "reject" => {
                let call_id = call_id()?;
                Ok(Message::Reject {
                    run_id,
                    call_id,
                    message: f
                        .message
                        .ok_or("the reject message has no message (a string)")?,
                })
            }
            other => Err(format!(
                "unknown message type {other:?}; use run, abort, resolve or reject"
            )),
        }
    }
}

/// JSON `null` as a raw value.
fn null() -> &'static RawValue {
    static NULL: std::sync::LazyLock<Box<RawValue>> =
        std::sync::LazyLock::new(|| RawValue::from_string("null".into()).expect("null is JSON"));
    &NULL
}

/// A line to the harness.
#[derive(Serialize)]
#[serde(tag = "type", rename_all = "lowercase")]
pub(super) enum Outgoing<'a> {
    Hello {
        language: &'a str,
        isolation: &'a str,
        /// What a run can reach: `sealed`, `pid-only` or `none` (docs/code-runtime.md).
        sandbox: &'a str,
    },
    Call {
        #[serde(rename = "runId")]
        run_id: &'a str,
        #[serde(rename = "callId")]
        call_id: &'a str,
        global: &'a str,
        function: &'a str,
        args: &'a RawValue,
    },
    Result {
        #[serde(rename = "runId")]
        run_id: &'a str,
        result: &'a RawValue,
    },
    Error {
        #[serde(rename = "runId", skip_serializing_if = "Option::is_none")]
        run_id: Option<&'a str>,
        code: &'a str,
        message: &'a str,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_kind_with_its_members() {
        let m = Message::parse(
            r#"{"type":"run","runId":"r","program":"return 1","bindings":[{"global":"t","functions":["f"]}]}"#,
        )
        .unwrap();
        assert!(
            matches!(&m, Message::Run { run_id, program, bindings }
                if run_id == "r" && program == "return 1" && bindings[0].functions == ["f"]),
            "{m:?}"
        );
        let m = Message::parse(r#"{"type":"abort","runId":"r"}"#).unwrap();
        assert!(matches!(&m, Message::Abort { run_id } if run_id == "r"));
        let m = Message::parse(
            r#"{"type":"resolve","runId":"r","callId":"1","value":[-0,1e400,"\ud800"]}"#,
        )
        .unwrap();
        assert!(
            matches!(&m, Message::Resolve { value, .. } if value.get() == r#"[-0,1e400,"\ud800"]"#),
            "{m:?}"
        );
        let m =
            Message::parse(r#"{"type":"resolve","runId":"r","callId":"1","value":null}"#).unwrap();
        assert!(matches!(&m, Message::Resolve { value, .. } if value.get() == "null"));
        let m =
            Message::parse(r#"{"type":"reject","runId":"r","callId":"1","message":"no"}"#).unwrap();
        assert!(matches!(&m, Message::Reject { message, .. } if message == "no"));
    }

    #[test]
    fn a_missing_member_is_named() {
        for (line, says) in [
            ("[]", "not a message of the code-runtime protocol"),
            (r#"{"runId":"r"}"#, "the message has no type"),
            (r#"{"type":"abort"}"#, "the abort message has no runId"),
            (r#"{"type":"nope"}"#, "the nope message has no runId"),
            (
                r#"{"type":"nope","runId":"r"}"#,
                "unknown message type \"nope\"",
            ),
            (r#"{"type":"run","runId":"r"}"#, "has no program"),
            (
                r#"{"type":"run","runId":"r","program":""}"#,
                "has no bindings",
            ),
            (
                r#"{"type":"resolve","runId":"r"}"#,
                "the resolve message has no callId",
            ),
            (
                r#"{"type":"resolve","runId":"r","callId":"1"}"#,
                "has no value",
            ),
            (
                r#"{"type":"reject","runId":"r","callId":"1"}"#,
                "has no message",
            ),
        ] {
            let e = Message::parse(line).unwrap_err();
            assert!(e.contains(says), "{line}: {e}");
        }
    }
}
