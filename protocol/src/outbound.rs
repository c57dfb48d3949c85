//! `outbound_message` (provider asks the host to post a non-final message) and its result.

use base64::Engine as _;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::error::{Rule, ValidationError};
use crate::grammar;
use crate::limits::{MAX_OUTBOUND_IMAGE_BYTES, MAX_OUTBOUND_IMAGES, MAX_OUTBOUND_MESSAGE_BYTES};

/// What an outbound message is, from the chat's point of view. Never "final".
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ResponseKind {
    /// Progress of the current turn.
    Progress,
    /// Side information.
    Auxiliary,
}

/// Whether the host may mention the requester.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Mention {
    /// No mention.
    None,
    /// Mention the turn's requester (the host still applies its own gates).
    Requester,
}

/// An image attached to an outbound message: PNG, JPEG, GIF or WebP, canonical base64.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct OutboundImage {
    /// A plain file name (no path).
    pub name: String,
    /// `image/png`, `image/jpeg`, `image/gif` or `image/webp`.
    pub mime_type: String,
    /// Canonical standard base64 (with padding) of the image bytes.
    pub data_base64: String,
}

impl OutboundImage {
    /// Encodes `bytes` as an image; the MIME type is not checked here (see validation).
    pub fn from_bytes(name: impl Into<String>, mime_type: impl Into<String>, bytes: &[u8]) -> Self {
        OutboundImage {
            name: name.into(),
            mime_type: mime_type.into(),
            data_base64: base64::engine::general_purpose::STANDARD.encode(bytes),
        }
    }
}

/// The MIME types an outbound image may have.
pub const IMAGE_MIME_TYPES: [&str; 4] = ["image/png", "image/jpeg", "image/gif", "image/webp"];

/// The host's answer to an outbound message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum OutboundResult {
    /// Posted.
    Delivered {
        /// The chat message id.
        #[serde(rename = "messageId")]
        message_id: String,
    },
    /// Refused; nothing was posted.
    Rejected {
        /// Error code.
        code: String,
        /// Human message.
        message: String,
    },
    /// May or may not have been posted: never replay automatically.
    Unknown {
        /// Error code.
        code: String,
        /// Human message.
        message: String,
    },
}

impl OutboundResult {
    /// Checks the result's fields.
    pub fn validate_at(&self, path: &str) -> Result<(), ValidationError> {
        match self {
            OutboundResult::Delivered { message_id } => grammar::non_empty(
                Rule::NonEmptyString,
                &format!("{path}.messageId"),
                message_id,
                256,
            )
            .map(|_| ()),
            OutboundResult::Rejected { code, message }
            | OutboundResult::Unknown { code, message } => {
                grammar::error_code(&format!("{path}.code"), code)?;
                grammar::error_message(&format!("{path}.message"), message)
            }
        }
    }
}

/// Outbound content: non-blank, <= 32 KiB of UTF-8.
pub fn validate_content(path: &str, content: &str) -> Result<(), ValidationError> {
    if grammar::js_trim(content).is_empty() {
        return Err(ValidationError::new(
            Rule::OutboundContentBlank,
            path,
            "must not be blank",
        ));
    }
    if content.len() > MAX_OUTBOUND_MESSAGE_BYTES {
        return Err(ValidationError::new(
            Rule::OutboundContentSize,
            path,
            format!(
                "is {} bytes of UTF-8; at most {MAX_OUTBOUND_MESSAGE_BYTES} are allowed. Split the \
                 message or send a summary",
                content.len()
            ),
        ));
    }
    Ok(())
}

/// Images: at most 4, decoded total <= 2 MiB, allowed MIME type matching the bytes' magic
/// number, canonical base64, plain file name.
pub fn validate_images(path: &str, images: &[OutboundImage]) -> Result<(), ValidationError> {
    if images.len() > MAX_OUTBOUND_IMAGES {
        return Err(ValidationError::new(
            Rule::ImageLimit,
            path,
            format!(
                "has {} images; at most {MAX_OUTBOUND_IMAGES} are allowed",
                images.len()
            ),
        ));
    }
    let mut total = 0usize;
    for (i, image) in images.iter().enumerate() {
        let ipath = format!("{path}[{i}]");
        validate_file_name(&format!("{ipath}.name"), &image.name)?;
        if !IMAGE_MIME_TYPES.contains(&image.mime_type.as_str()) {
            return Err(ValidationError::new(
                Rule::ImageMimeType,
                format!("{ipath}.mimeType"),
                format!(
                    "{:?} is not allowed; use one of {}",
                    image.mime_type,
                    IMAGE_MIME_TYPES.join(", ")
                ),
            ));
        }
        let bytes = decode_canonical_base64(&format!("{ipath}.dataBase64"), &image.data_base64)?;
        if !magic_matches(&image.mime_type, &bytes) {
            return Err(ValidationError::new(
                Rule::ImageMagic,
                format!("{ipath}.dataBase64"),
                format!("the bytes are not a {} image", image.mime_type),
            ));
        }
        total = total.saturating_add(bytes.len());
        if total > MAX_OUTBOUND_IMAGE_BYTES {
            return Err(ValidationError::new(
                Rule::ImageLimit,
                path,
                format!(
                    "images decode to more than {MAX_OUTBOUND_IMAGE_BYTES} bytes in total; \
                     shrink or drop some"
                ),
            ));
        }
    }
    Ok(())
}

/// Decodes standard base64 (with padding) and refuses any non-canonical spelling.
pub fn decode_canonical_base64(path: &str, data: &str) -> Result<Vec<u8>, ValidationError> {
    let engine = base64::engine::general_purpose::STANDARD;
    let decoded = engine.decode(data).map_err(|err| {
        ValidationError::new(Rule::Base64, path, format!("is not standard base64: {err}"))
    })?;
    if engine.encode(&decoded) != data {
        return Err(ValidationError::new(
            Rule::Base64,
            path,
            "is not canonical base64 (standard alphabet, padded, no line breaks)",
        ));
    }
    Ok(decoded)
}

fn magic_matches(mime_type: &str, bytes: &[u8]) -> bool {
    match mime_type {
        "image/png" => bytes.starts_with(b"\x89PNG\r\n\x1a\n"),
        "image/jpeg" => bytes.starts_with(&[0xFF, 0xD8, 0xFF]),
        "image/gif" => bytes.starts_with(b"GIF87a") || bytes.starts_with(b"GIF89a"),
        "image/webp" => bytes.len() >= 12 && &bytes[0..4] == b"RIFF" && &bytes[8..12] == b"WEBP",
        _ => false,
    }
}

/// A plain file name: non-blank, <= 255 UTF-16 units, no `/`, `\`, control characters,
/// and not `.` or `..`.
pub fn validate_file_name(path: &str, name: &str) -> Result<(), ValidationError> {
    let trimmed = grammar::non_empty(Rule::FileName, path, name, 255)?;
    let bad = trimmed != name
        || name == "."
        || name == ".."
        || name
            .chars()
            .any(|c| c == '/' || c == '\\' || c.is_control());
    if bad {
        return Err(ValidationError::new(
            Rule::FileName,
            path,
            format!(
                "{name:?} is not a plain file name (no path separators, control characters or surrounding spaces)"
            ),
        ));
    }
    Ok(())
}
