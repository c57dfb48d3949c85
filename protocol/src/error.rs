//! Typed errors: which rule a message broke, and why a line could not be decoded.

use serde::{Deserialize, Serialize};
use std::fmt;

/// One single-message or single-transition rule of the protocol.
///
/// The snake_case name ([`Rule::as_str`]) is stable: tests, logs and the conformance harness
/// match on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Rule {
    /// A field has the wrong JSON type, is missing, or is an unknown enum value.
    FieldType,
    /// A string that must be non-empty after trimming is blank, or longer than its limit.
    NonEmptyString,
    /// `requestId` does not match `^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$`.
    RequestId,
    /// `provider` does not match `^[a-z][a-z0-9._-]{0,63}$`.
    Provider,
    /// A capability name does not match `^[a-z][a-z0-9._-]{0,63}$`.
    CapabilityName,
    /// The same capability is listed twice.
    DuplicateCapability,
    /// An id does not match `^[A-Za-z0-9][A-Za-z0-9._:/-]{0,255}$`.
    Id,
    /// A `turnId` is blank or longer than 256 UTF-16 units.
    TurnId,
    /// An error `code` does not match `^[a-z][a-z0-9._-]{0,127}$`.
    ErrorCode,
    /// An error `message` is blank or longer than 4096 UTF-16 units.
    ErrorMessage,
    /// An integer is negative or above 2^53-1 (not a JavaScript safe integer).
    SafeInteger,
    /// `state.version` is not 1.
    StateVersion,
    /// `providerState` nests deeper than 16 levels.
    ProviderStateDepth,
    /// `providerState` holds a non-finite number.
    ProviderStateNumber,
    /// A `providerState` key is longer than 256 UTF-16 units.
    ProviderStateKeyLength,
    /// A `providerState` key looks like a credential (token, secret, password, ...).
    ProviderStateSensitiveKey,
    /// `providerState` serializes to more than 65536 bytes.
    ProviderStateSize,
    /// `state.provider` differs from the provider named in the hello handshake.
    StateProviderMismatch,
    /// The state generation went down.
    GenerationDecreased,
    /// `remoteSessionId` changed or was cleared without a generation bump.
    RemoteSessionIdChanged,
    /// A rebuild's `ready` did not raise the generation.
    RebuildNotAdvanced,
    /// `usage.snapshot.context.windowTokens` is 0.
    UsageWindowTokens,
    /// `usage.snapshot.context.percentUsed` is not a finite number in 0..=100.
    UsagePercent,
    /// A usage label (`model`, `reasoningEffort`, `modelBackendVariant`) is blank or too long.
    UsageLabel,
    /// `usage.generation` differs from the state generation.
    UsageGeneration,
    /// Terminal `cols`/`rows` outside 1..=1000.
    TerminalSize,
    /// A terminal snapshot or input larger than 4 MiB.
    TerminalDataSize,
    /// Outbound content is blank.
    OutboundContentBlank,
    /// Outbound content is larger than 32 KiB (UTF-8 bytes).
    OutboundContentSize,
    /// More than 4 images, or more than 2 MiB of decoded image bytes.
    ImageLimit,
    /// An image MIME type other than PNG, JPEG, GIF or WebP.
    ImageMimeType,
    /// Image or attachment bytes are not canonical standard base64.
    Base64,
    /// Image bytes do not start with the magic number of their MIME type.
    ImageMagic,
    /// An image or attachment name is blank, too long, or looks like a path.
    FileName,
    /// A session_tool request has an unknown tool or keys outside its allowlist.
    SessionToolRequest,
    /// `history.limit` outside 1..=100.
    SessionToolLimit,
    /// `quoted.messageId` does not match `^om_[A-Za-z0-9_-]+$` (<= 256).
    QuotedMessageId,
    /// `skill.read.path` is not a safe relative path.
    SkillPath,
    /// session_tool_result stdout/stderr larger than 512 KiB.
    SessionToolTextSize,
    /// More than 8 attachments, or more than 512 KiB of decoded attachment bytes.
    AttachmentLimit,
    /// An attachment placeholder is not `botmux-session-tool://attachment/<i>`.
    AttachmentPlaceholder,
    /// access_url longer than 4096 or not an http(s) URL.
    AccessUrl,
}

impl Rule {
    /// Every rule, in declaration order.
    pub const ALL: &'static [Rule] = &[
        Rule::FieldType,
        Rule::NonEmptyString,
        Rule::RequestId,
        Rule::Provider,
        Rule::CapabilityName,
        Rule::DuplicateCapability,
        Rule::Id,
        Rule::TurnId,
        Rule::ErrorCode,
        Rule::ErrorMessage,
        Rule::SafeInteger,
        Rule::StateVersion,
        Rule::ProviderStateDepth,
        Rule::ProviderStateNumber,
        Rule::ProviderStateKeyLength,
        Rule::ProviderStateSensitiveKey,
        Rule::ProviderStateSize,
        Rule::StateProviderMismatch,
        Rule::GenerationDecreased,
        Rule::RemoteSessionIdChanged,
        Rule::RebuildNotAdvanced,
        Rule::UsageWindowTokens,
        Rule::UsagePercent,
        Rule::UsageLabel,
        Rule::UsageGeneration,
        Rule::TerminalSize,
        Rule::TerminalDataSize,
        Rule::OutboundContentBlank,
        Rule::OutboundContentSize,
        Rule::ImageLimit,
        Rule::ImageMimeType,
        Rule::Base64,
        Rule::ImageMagic,
        Rule::FileName,
        Rule::SessionToolRequest,
        Rule::SessionToolLimit,
        Rule::QuotedMessageId,
        Rule::SkillPath,
        Rule::SessionToolTextSize,
        Rule::AttachmentLimit,
        Rule::AttachmentPlaceholder,
        Rule::AccessUrl,
    ];

    /// The stable snake_case name of the rule.
    pub fn as_str(self) -> &'static str {
        match self {
            Rule::FieldType => "field_type",
            Rule::NonEmptyString => "non_empty_string",
            Rule::RequestId => "request_id",
            Rule::Provider => "provider",
            Rule::CapabilityName => "capability_name",
            Rule::DuplicateCapability => "duplicate_capability",
            Rule::Id => "id",
            Rule::TurnId => "turn_id",
            Rule::ErrorCode => "error_code",
            Rule::ErrorMessage => "error_message",
            Rule::SafeInteger => "safe_integer",
            Rule::StateVersion => "state_version",
            Rule::ProviderStateDepth => "provider_state_depth",
            Rule::ProviderStateNumber => "provider_state_number",
            Rule::ProviderStateKeyLength => "provider_state_key_length",
            Rule::ProviderStateSensitiveKey => "provider_state_sensitive_key",
            Rule::ProviderStateSize => "provider_state_size",
            Rule::StateProviderMismatch => "state_provider_mismatch",
            Rule::GenerationDecreased => "generation_decreased",
            Rule::RemoteSessionIdChanged => "remote_session_id_changed",
            Rule::RebuildNotAdvanced => "rebuild_not_advanced",
            Rule::UsageWindowTokens => "usage_window_tokens",
            Rule::UsagePercent => "usage_percent",
            Rule::UsageLabel => "usage_label",
            Rule::UsageGeneration => "usage_generation",
            Rule::TerminalSize => "terminal_size",
            Rule::TerminalDataSize => "terminal_data_size",
            Rule::OutboundContentBlank => "outbound_content_blank",
            Rule::OutboundContentSize => "outbound_content_size",
            Rule::ImageLimit => "image_limit",
            Rule::ImageMimeType => "image_mime_type",
            Rule::Base64 => "base64",
            Rule::ImageMagic => "image_magic",
            Rule::FileName => "file_name",
            Rule::SessionToolRequest => "session_tool_request",
            Rule::SessionToolLimit => "session_tool_limit",
            Rule::QuotedMessageId => "quoted_message_id",
            Rule::SkillPath => "skill_path",
            Rule::SessionToolTextSize => "session_tool_text_size",
            Rule::AttachmentLimit => "attachment_limit",
            Rule::AttachmentPlaceholder => "attachment_placeholder",
            Rule::AccessUrl => "access_url",
        }
    }
}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A message or state transition broke one protocol rule.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{path}: {detail} (rule {rule})")]
pub struct ValidationError {
    /// The rule that was broken.
    pub rule: Rule,
    /// JSON path of the offending value, e.g. `state.providerState.a.b` (empty for the root).
    pub path: String,
    /// What was wrong and what is allowed.
    pub detail: String,
}

impl ValidationError {
    /// Builds an error for `rule` at `path`.
    pub fn new(rule: Rule, path: impl Into<String>, detail: impl Into<String>) -> Self {
        ValidationError {
            rule,
            path: path.into(),
            detail: detail.into(),
        }
    }
}

/// Why a line could not be decoded into a command or event.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum DecodeErrorKind {
    /// The line is not valid JSON (or not valid UTF-8).
    InvalidJson {
        /// Parser message.
        detail: String,
    },
    /// The line is valid JSON but not an object.
    NotAnObject,
    /// `protocol` is not `botmux.remote-runner` or `version` is not 1.
    ProtocolMismatch {
        /// What was found instead.
        detail: String,
    },
    /// `type` is missing, not a string, or not a known type for this direction.
    UnknownType {
        /// The type name found, if it was a string.
        type_name: Option<String>,
    },
    /// The message has a known type but a field breaks a rule.
    InvalidMessage(ValidationError),
}

/// A line that could not be decoded, plus the correlation ids that could still be read
/// from it, so that a provider can answer with a correlated `failure`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecodeError {
    /// What went wrong.
    pub kind: DecodeErrorKind,
    /// The line's `requestId`, if present and well-formed (never for result commands, which
    /// must not be answered).
    pub request_id: Option<String>,
    /// The line's `turnId`, if present and well-formed.
    pub turn_id: Option<String>,
}

impl DecodeError {
    pub(crate) fn new(kind: DecodeErrorKind) -> Self {
        DecodeError {
            kind,
            request_id: None,
            turn_id: None,
        }
    }

    /// A stable snake_case code, suitable as a `failure.code`:
    /// `invalid_json`, `not_an_object`, `protocol_mismatch`, `unknown_type` or `invalid_message`.
    pub fn code(&self) -> &'static str {
        match self.kind {
            DecodeErrorKind::InvalidJson { .. } => "invalid_json",
            DecodeErrorKind::NotAnObject => "not_an_object",
            DecodeErrorKind::ProtocolMismatch { .. } => "protocol_mismatch",
            DecodeErrorKind::UnknownType { .. } => "unknown_type",
            DecodeErrorKind::InvalidMessage(_) => "invalid_message",
        }
    }

    /// A `failure` event answering the bad line: correlated by whatever ids could be read,
    /// `status: failed`, not retryable (resending the same line cannot help).
    pub fn failure_event(&self) -> crate::Event {
        crate::Event::failure(
            self.request_id.clone(),
            self.turn_id.clone(),
            self.code(),
            self.to_string(),
            crate::FailureStatus::Failed,
            false,
        )
    }

    /// The broken rule, when the message had a known type but invalid fields.
    pub fn validation(&self) -> Option<&ValidationError> {
        match &self.kind {
            DecodeErrorKind::InvalidMessage(err) => Some(err),
            _ => None,
        }
    }
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.kind {
            DecodeErrorKind::InvalidJson { detail } => write!(
                f,
                "invalid JSON line ({detail}); send one JSON object per line, terminated by \\n"
            ),
            DecodeErrorKind::NotAnObject => {
                f.write_str("the line is JSON but not an object; every message is a JSON object")
            }
            DecodeErrorKind::ProtocolMismatch { detail } => write!(
                f,
                "{detail}; every line must carry \"protocol\":\"botmux.remote-runner\",\"version\":1"
            ),
            DecodeErrorKind::UnknownType { type_name: Some(t) } => {
                write!(f, "unknown message type {t:?} for this direction")
            }
            DecodeErrorKind::UnknownType { type_name: None } => {
                f.write_str("missing or non-string \"type\"; every message names its type")
            }
            DecodeErrorKind::InvalidMessage(err) => write!(f, "invalid message: {err}"),
        }
    }
}

impl std::error::Error for DecodeError {}
