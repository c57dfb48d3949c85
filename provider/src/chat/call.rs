//! One call of the chat helper: the request a turn's command left in `chat/<n>/`, checked and
//! turned into the operation to send, and the reply the helper replays (`out`, `err`, `status`).

use remote_runner_protocol::{
    Mention, OperationKind, OutboundResult, ResponseKind, SessionToolRequest, SessionToolResult,
};
use serde_json::Value;

use remote_runner_engine::engine::helper::HelperHost;
use remote_runner_engine::error::Result;

/// Largest request file read (a message is at most 32 KiB; more is refused, not truncated).
const MAX_REQUEST_BYTES: usize = 1024 * 1024;

/// Exit statuses of the helper (besides a tool's own exit code).
pub mod status {
    /// Delivered.
    pub const OK: i32 = 0;
    /// A bad request: nothing was sent.
    pub const INVALID: i32 = 2;
    /// Rejected by the host or the per-turn limit: nothing was posted.
    pub const REJECTED: i32 = 3;
    /// Unknown: it may have happened.
    pub const UNKNOWN: i32 = 4;
}

/// What a call asks for, checked.
#[derive(Debug, Clone, PartialEq)]
pub enum Operation {
    Outbound {
        content: String,
        response_kind: ResponseKind,
        mention: Mention,
    },
    Tool(SessionToolRequest),
}

impl Operation {
    pub fn kind(&self) -> OperationKind {
        match self {
            Operation::Outbound { .. } => OperationKind::Outbound,
            Operation::Tool(_) => OperationKind::SessionTool,
        }
    }
}

/// A call as read from the machine.
#[derive(Debug, Clone)]
pub struct Call {
    /// Its number in the turn (the directory name).
    pub n: u64,
    /// `chat/<n>`.
    pub dir: String,
    /// The caller's idempotency key (`--id`), if any.
    pub key: Option<String>,
    /// The operation id the provider recorded for it earlier (a call seen again after a
    /// reconnect keeps its id).
    pub recorded_id: Option<String>,
    /// The checked request, or why it is refused (exit 2, nothing sent).
    pub operation: std::result::Result<Operation, String>,
}

/// Read `dir` (a call whose `ready` is there).
pub async fn read(host: &HelperHost, n: u64, dir: &str) -> Result<Call> {
    let file = |name: &str| format!("{dir}/{name}");
    let kind = read_text(host, &file("kind")).await?.unwrap_or_default();
    let key = read_text(host, &file("key")).await?;
    let recorded_id = read_text(host, &file("operation"))
        .await?
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty());
    let operation = match kind.trim() {
        "send" => {
            let opts = read_text(host, &file("opts")).await?.unwrap_or_default();
            let content = read_text(host, &file("content")).await?;
            parse_send(&opts, content)
        }
        "tool" => {
            let request = read_text(host, &file("request")).await?;
            parse_tool(request.as_deref().unwrap_or_default())
        }
        other => Err(format!(
            "unknown call kind {other:?}; use send or tool (see \"$RR_CHAT\" --help)"
        )),
    };
    Ok(Call {
        n,
        dir: dir.to_string(),
        key,
        recorded_id,
        operation,
    })
}

/// A file's text, `None` when missing; refused as too large rather than cut.
async fn read_text(host: &HelperHost, path: &str) -> Result<Option<String>> {
    let bytes = host.read(path, MAX_REQUEST_BYTES + 1).await?;
    Ok(bytes.map(|b| String::from_utf8_lossy(&b).into_owned()))
}

fn parse_send(opts: &str, content: Option<String>) -> std::result::Result<Operation, String> {
    let mut words = opts.split_whitespace();
    let response_kind = match words.next() {
        Some("auxiliary") => ResponseKind::Auxiliary,
        _ => ResponseKind::Progress,
    };
    let mention = match words.next() {
        Some("requester") => Mention::Requester,
        _ => Mention::None,
    };
    let content = content.unwrap_or_default();
    remote_runner_protocol::validate_outbound_content("content", &content)
        .map_err(|e| e.to_string())?;
    Ok(Operation::Outbound {
        content,
        response_kind,
        mention,
    })
}

/// The allow-list check: a known tool, only its keys, valid values.
pub fn parse_tool(text: &str) -> std::result::Result<Operation, String> {
    let raw: Value = serde_json::from_str(text).map_err(|e| {
        format!("the request is not JSON ({e}); pass one object, e.g. '{{\"tool\":\"history\",\"limit\":20}}'")
    })?;
    remote_runner_protocol::check_session_tool_request_keys("request", &raw)
        .map_err(|e| e.to_string())?;
    let request: SessionToolRequest =
        serde_json::from_value(raw).map_err(|e| format!("request: {e}"))?;
    request.validate_at("request").map_err(|e| e.to_string())?;
    Ok(Operation::Tool(request))
}

/// What the helper replays: stdout, stderr, exit status.
#[derive(Debug, Clone, PartialEq)]
pub struct Reply {
    pub out: Vec<u8>,
    pub err: String,
    pub status: i32,
    /// Attachments to write beside the reply: (file name, bytes).
    pub files: Vec<(String, Vec<u8>)>,
}

impl Reply {
    /// A refusal or failure: `code: message` on stderr.
    pub fn error(status: i32, code: &str, message: &str) -> Reply {
        Reply {
            out: Vec::new(),
            err: format!("{code}: {message}\n"),
            status,
            files: Vec::new(),
        }
    }

    pub fn from_outbound(result: &OutboundResult) -> Reply {
        match result {
            OutboundResult::Delivered { message_id } => Reply {
                out: format!("{message_id}\n").into_bytes(),
                err: String::new(),
                status: status::OK,
                files: Vec::new(),
            },
            OutboundResult::Rejected { code, message } => {
                Reply::error(status::REJECTED, code, message)
            }
            OutboundResult::Unknown { code, message } => {
                Reply::error(status::UNKNOWN, code, message)
            }
        }
    }

    /// A tool's result; attachments become files in the call's directory, listed on stderr.
    pub fn from_tool(result: &SessionToolResult, dir: &str) -> Reply {
        match result {
            SessionToolResult::Completed {
                exit_code,
                stdout,
                stderr,
                attachments,
            } => {
                let mut err = stderr.clone();
                let mut files = Vec::new();
                for (i, att) in attachments.iter().flatten().enumerate() {
                    let Ok(bytes) = remote_runner_protocol::decode_canonical_base64(
                        "dataBase64",
                        &att.data_base64,
                    ) else {
                        continue; // validated by the protocol crate on arrival
                    };
                    let name = format!("attachment-{i}-{}", att.name);
                    if !err.is_empty() && !err.ends_with('\n') {
                        err.push('\n');
                    }
                    err.push_str(&format!(
                        "rr-chat: attachment {} saved as {dir}/{name}\n",
                        att.placeholder
                    ));
                    files.push((name, bytes));
                }
                Reply {
                    out: stdout.clone().into_bytes(),
                    err,
                    // A shell exit status is 0..=255; anything else the host reports is 1.
                    status: i32::try_from(*exit_code)
                        .ok()
                        .filter(|c| (0..=255).contains(c))
                        .unwrap_or(1),
                    files,
                }
            }
            SessionToolResult::Rejected { code, message } => {
                Reply::error(status::REJECTED, code, message)
            }
            SessionToolResult::Unknown { code, message } => {
                Reply::error(status::UNKNOWN, code, message)
            }
        }
    }

    /// Write the reply into the call's directory: attachments, `out`, `err`, and `status`
    /// last (each atomic), so the helper replays a whole reply.
    pub async fn write(&self, host: &HelperHost, dir: &str) -> Result<()> {
        for (name, bytes) in &self.files {
            host.write(&format!("{dir}/{name}"), bytes, 0o600).await?;
        }
        host.write(&format!("{dir}/out"), &self.out, 0o600).await?;
        host.write(&format!("{dir}/err"), self.err.as_bytes(), 0o600)
            .await?;
        host.write(
            &format!("{dir}/status"),
            format!("{}\n", self.status).as_bytes(),
            0o600,
        )
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tool_requests_are_checked_against_the_allow_list() {
        assert!(parse_tool(r#"{"tool":"history","limit":3}"#).is_ok());
        assert!(parse_tool(r#"{"tool":"bots.list"}"#).is_ok());
        let bad = parse_tool(r#"{"tool":"history","limit":101}"#).unwrap_err();
        assert!(bad.contains("limit"), "{bad}");
        let bad = parse_tool(r#"{"tool":"schedule"}"#).unwrap_err();
        assert!(bad.contains("allowlisted"), "{bad}");
        let bad = parse_tool(r#"{"tool":"history","argv":["x"]}"#).unwrap_err();
        assert!(bad.contains("argv"), "{bad}");
        let bad = parse_tool(r#"{"tool":"skill.read","name":"a","path":"../x"}"#).unwrap_err();
        assert!(bad.contains("path"), "{bad}");
        assert!(parse_tool("not json").unwrap_err().contains("not JSON"));
    }

    #[test]
    fn send_checks_the_text_limits() {
        assert!(parse_send("progress none", Some("hi".into())).is_ok());
        assert!(parse_send("progress none", Some("  \n".into())).is_err());
        let big = "x".repeat(32 * 1024 + 1);
        assert!(parse_send("progress none", Some(big)).is_err());
        let Ok(Operation::Outbound {
            response_kind,
            mention,
            ..
        }) = parse_send("auxiliary requester\n", Some("hi".into()))
        else {
            panic!("a valid send")
        };
        assert_eq!(response_kind, ResponseKind::Auxiliary);
        assert_eq!(mention, Mention::Requester);
    }

    #[test]
    fn replies_map_outcomes_to_exit_statuses() {
        let r = Reply::from_outbound(&OutboundResult::Delivered {
            message_id: "om_1".into(),
        });
        assert_eq!((r.status, r.out.as_slice()), (0, &b"om_1\n"[..]));
        let r = Reply::from_outbound(&OutboundResult::Rejected {
            code: "outbound_rate_limited".into(),
            message: "too many".into(),
        });
        assert_eq!(
            (r.status, r.err.as_str()),
            (3, "outbound_rate_limited: too many\n")
        );
        let r = Reply::from_tool(
            &SessionToolResult::Unknown {
                code: "session_tool_timeout".into(),
                message: "slow".into(),
            },
            "/d",
        );
        assert_eq!(r.status, 4);
        let r = Reply::from_tool(
            &SessionToolResult::Completed {
                exit_code: 7,
                stdout: "{}\n".into(),
                stderr: "warn".into(),
                attachments: Some(vec![remote_runner_protocol::Attachment {
                    placeholder: "botmux-session-tool://attachment/0".into(),
                    name: "a.txt".into(),
                    kind: remote_runner_protocol::AttachmentKind::File,
                    mime_type: None,
                    data_base64: "aGk=".into(),
                }]),
            },
            "/d",
        );
        assert_eq!(r.status, 7);
        assert_eq!(
            r.files,
            vec![("attachment-0-a.txt".to_string(), b"hi".to_vec())]
        );
        assert!(r.err.starts_with("warn\nrr-chat: attachment botmux-session-tool://attachment/0 saved as /d/attachment-0-a.txt"), "{}", r.err);
    }
}
