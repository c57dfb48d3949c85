//! `session_tool`: a fixed allowlist of read-only host helpers, and their results.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::{Rule, ValidationError};
use crate::grammar;
use crate::limits::{
    MAX_HISTORY_LIMIT, MAX_SESSION_TOOL_ATTACHMENT_BYTES, MAX_SESSION_TOOL_ATTACHMENTS,
    MAX_SESSION_TOOL_TEXT_BYTES, MAX_SKILL_PATH_CHARS,
};
use crate::outbound::{decode_canonical_base64, validate_file_name};

/// Which messages `history` reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum HistoryScope {
    /// This session.
    Session,
    /// This thread.
    Thread,
    /// The whole chat.
    Chat,
    /// Ambient messages.
    Ambient,
}

/// One allowlisted request. No other tool and no other key can be expressed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "tool")]
pub enum SessionToolRequest {
    /// Recent messages.
    #[schemars(extend("additionalProperties" = false))]
    #[serde(rename = "history", rename_all = "camelCase")]
    History {
        /// 1..=100.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[schemars(range(min = 1, max = 100))]
        limit: Option<u64>,
        /// Which messages.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        scope: Option<HistoryScope>,
        /// Include card JSON.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        with_card_json: Option<bool>,
    },
    /// A quoted message and its attachments.
    #[schemars(extend("additionalProperties" = false))]
    #[serde(rename = "quoted", rename_all = "camelCase")]
    Quoted {
        /// `om_…` message id.
        #[schemars(pattern(r"^om_[A-Za-z0-9_-]+$"))]
        message_id: String,
        /// Raw form.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        raw: Option<bool>,
    },
    /// Bots in the current chat.
    #[schemars(extend("additionalProperties" = false))]
    #[serde(rename = "bots.list")]
    BotsList,
    /// Skills of the session.
    #[schemars(extend("additionalProperties" = false))]
    #[serde(rename = "skill.list")]
    SkillList,
    /// One skill's manifest.
    #[schemars(extend("additionalProperties" = false))]
    #[serde(rename = "skill.show")]
    SkillShow {
        /// Skill name (id grammar).
        name: String,
    },
    /// One skill's resource list.
    #[schemars(extend("additionalProperties" = false))]
    #[serde(rename = "skill.resources")]
    SkillResources {
        /// Skill name (id grammar).
        name: String,
    },
    /// One skill resource.
    #[schemars(extend("additionalProperties" = false))]
    #[serde(rename = "skill.read")]
    SkillRead {
        /// Skill name (id grammar).
        name: String,
        /// Safe relative path (no empty, `.` or `..` segments, not absolute).
        path: String,
    },
}

/// The keys each tool allows (besides `tool`).
fn allowed_keys(tool: &str) -> Option<&'static [&'static str]> {
    Some(match tool {
        "history" => &["limit", "scope", "withCardJson"],
        "quoted" => &["messageId", "raw"],
        "bots.list" | "skill.list" => &[],
        "skill.show" | "skill.resources" => &["name"],
        "skill.read" => &["name", "path"],
        _ => return None,
    })
}

/// Checks the raw request object: a known `tool` and no key outside its allowlist.
/// Runs before typed decoding, which would silently drop unknown keys.
pub fn check_request_keys(path: &str, raw: &Value) -> Result<(), ValidationError> {
    let Some(obj) = raw.as_object() else {
        return Err(ValidationError::new(
            Rule::SessionToolRequest,
            path,
            "must be an object with a \"tool\" key",
        ));
    };
    let tool = obj.get("tool").and_then(Value::as_str).unwrap_or_default();
    let Some(allowed) = allowed_keys(tool) else {
        return Err(ValidationError::new(
            Rule::SessionToolRequest,
            format!("{path}.tool"),
            format!(
                "{tool:?} is not an allowlisted tool (history, quoted, bots.list, skill.list, \
                 skill.show, skill.resources, skill.read)"
            ),
        ));
    };
    if let Some(key) = obj
        .keys()
        .find(|k| k.as_str() != "tool" && !allowed.contains(&k.as_str()))
    {
        return Err(ValidationError::new(
            Rule::SessionToolRequest,
            format!("{path}.{key}"),
            format!("key {key:?} is not allowed for tool {tool:?}"),
        ));
    }
    Ok(())
}

impl SessionToolRequest {
    /// The wire name of the tool.
    pub fn tool(&self) -> &'static str {
        match self {
            SessionToolRequest::History { .. } => "history",
            SessionToolRequest::Quoted { .. } => "quoted",
            SessionToolRequest::BotsList => "bots.list",
            SessionToolRequest::SkillList => "skill.list",
            SessionToolRequest::SkillShow { .. } => "skill.show",
            SessionToolRequest::SkillResources { .. } => "skill.resources",
            SessionToolRequest::SkillRead { .. } => "skill.read",
        }
    }

    /// Checks the typed request's values.
    pub fn validate_at(&self, path: &str) -> Result<(), ValidationError> {
        match self {
            SessionToolRequest::History { limit, .. } => {
                if let Some(limit) = *limit
                    && !(1..=MAX_HISTORY_LIMIT).contains(&limit)
                {
                    return Err(ValidationError::new(
                        Rule::SessionToolLimit,
                        format!("{path}.limit"),
                        format!("is {limit}; must be 1..={MAX_HISTORY_LIMIT}"),
                    ));
                }
                Ok(())
            }
            SessionToolRequest::Quoted { message_id, .. } => {
                validate_message_id(&format!("{path}.messageId"), message_id)
            }
            SessionToolRequest::BotsList | SessionToolRequest::SkillList => Ok(()),
            SessionToolRequest::SkillShow { name }
            | SessionToolRequest::SkillResources { name } => {
                grammar::id(&format!("{path}.name"), name)
            }
            SessionToolRequest::SkillRead { name, path: file } => {
                grammar::id(&format!("{path}.name"), name)?;
                validate_skill_path(&format!("{path}.path"), file)
            }
        }
    }
}

fn validate_message_id(path: &str, id: &str) -> Result<(), ValidationError> {
    let trimmed = grammar::non_empty(Rule::QuotedMessageId, path, id, 256)?;
    let ok = trimmed.strip_prefix("om_").is_some_and(|rest| {
        !rest.is_empty()
            && rest
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    });
    if ok {
        Ok(())
    } else {
        Err(ValidationError::new(
            Rule::QuotedMessageId,
            path,
            format!("{trimmed:?} does not match ^om_[A-Za-z0-9_-]+$"),
        ))
    }
}

/// A safe relative path: <= 1024 UTF-16 units, `\` read as `/`, not absolute, and no empty,
/// `.` or `..` segment.
pub fn validate_skill_path(path: &str, file: &str) -> Result<(), ValidationError> {
    let trimmed = grammar::non_empty(Rule::SkillPath, path, file, MAX_SKILL_PATH_CHARS)?;
    let normalized = trimmed.replace('\\', "/");
    let bad = normalized.starts_with('/')
        || normalized
            .split('/')
            .any(|seg| seg.is_empty() || seg == "." || seg == "..");
    if bad {
        return Err(ValidationError::new(
            Rule::SkillPath,
            path,
            format!(
                "{trimmed:?} is not a safe relative path (no leading /, no empty, . or .. segments)"
            ),
        ));
    }
    Ok(())
}

/// Prefix of an attachment placeholder; the attachment's index follows.
pub const ATTACHMENT_PLACEHOLDER_PREFIX: &str = "botmux-session-tool://attachment/";

/// Kind of a session_tool attachment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum AttachmentKind {
    /// An image.
    Image,
    /// Any other file.
    File,
}

/// A file the host attached to a session_tool result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Attachment {
    /// `botmux-session-tool://attachment/<i>`, as referenced from stdout.
    pub placeholder: String,
    /// File name.
    pub name: String,
    /// Image or file.
    #[serde(rename = "type")]
    pub kind: AttachmentKind,
    /// MIME type, if known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mime_type: Option<String>,
    /// Canonical base64 of the bytes.
    pub data_base64: String,
}

/// The host's answer to a session_tool request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum SessionToolResult {
    /// The helper ran; its exit code and output are deterministic.
    Completed {
        /// Exit code of the helper.
        #[serde(rename = "exitCode")]
        exit_code: i64,
        /// Its stdout (<= 512 KiB).
        stdout: String,
        /// Its stderr (<= 512 KiB).
        stderr: String,
        /// Files referenced from stdout by placeholder.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        attachments: Option<Vec<Attachment>>,
    },
    /// Refused by a host gate.
    Rejected {
        /// Error code.
        code: String,
        /// Human message.
        message: String,
    },
    /// The host cannot prove what happened.
    Unknown {
        /// Error code.
        code: String,
        /// Human message.
        message: String,
    },
}

impl SessionToolResult {
    /// Checks sizes, attachments and codes.
    pub fn validate_at(&self, path: &str) -> Result<(), ValidationError> {
        match self {
            SessionToolResult::Completed {
                exit_code,
                stdout,
                stderr,
                attachments,
            } => {
                grammar::safe_signed_integer(&format!("{path}.exitCode"), *exit_code)?;
                for (name, text) in [("stdout", stdout), ("stderr", stderr)] {
                    if text.len() > MAX_SESSION_TOOL_TEXT_BYTES {
                        return Err(ValidationError::new(
                            Rule::SessionToolTextSize,
                            format!("{path}.{name}"),
                            format!(
                                "is {} bytes; at most {MAX_SESSION_TOOL_TEXT_BYTES} are allowed",
                                text.len()
                            ),
                        ));
                    }
                }
                if let Some(attachments) = attachments {
                    validate_attachments(&format!("{path}.attachments"), attachments)?;
                }
                Ok(())
            }
            SessionToolResult::Rejected { code, message }
            | SessionToolResult::Unknown { code, message } => {
                grammar::error_code(&format!("{path}.code"), code)?;
                grammar::error_message(&format!("{path}.message"), message)
            }
        }
    }
}

fn validate_attachments(path: &str, attachments: &[Attachment]) -> Result<(), ValidationError> {
    if attachments.len() > MAX_SESSION_TOOL_ATTACHMENTS {
        return Err(ValidationError::new(
            Rule::AttachmentLimit,
            path,
            format!(
                "has {} attachments; at most {MAX_SESSION_TOOL_ATTACHMENTS} are allowed",
                attachments.len()
            ),
        ));
    }
    let mut total = 0usize;
    for (i, att) in attachments.iter().enumerate() {
        let apath = format!("{path}[{i}]");
        let index_ok = att
            .placeholder
            .strip_prefix(ATTACHMENT_PLACEHOLDER_PREFIX)
            .is_some_and(|n| {
                !n.is_empty() && n.len() <= 3 && n.bytes().all(|b| b.is_ascii_digit())
            });
        if !index_ok {
            return Err(ValidationError::new(
                Rule::AttachmentPlaceholder,
                format!("{apath}.placeholder"),
                format!(
                    "is {:?}; expected {ATTACHMENT_PLACEHOLDER_PREFIX}<index>",
                    att.placeholder
                ),
            ));
        }
        validate_file_name(&format!("{apath}.name"), &att.name)?;
        if let Some(mime) = &att.mime_type {
            grammar::non_empty(
                Rule::NonEmptyString,
                &format!("{apath}.mimeType"),
                mime,
                256,
            )?;
        }
        let bytes = decode_canonical_base64(&format!("{apath}.dataBase64"), &att.data_base64)?;
        total = total.saturating_add(bytes.len());
        if total > MAX_SESSION_TOOL_ATTACHMENT_BYTES {
            return Err(ValidationError::new(
                Rule::AttachmentLimit,
                path,
                format!(
                    "attachments decode to more than {MAX_SESSION_TOOL_ATTACHMENT_BYTES} bytes in total"
                ),
            ));
        }
    }
    Ok(())
}
