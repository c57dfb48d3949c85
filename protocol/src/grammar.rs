//! Field grammars shared by every message: the host's `nonEmptyString`, ids, codes, integers.
//!
//! Lengths are counted the way the host counts them: in UTF-16 code units, after trimming.

use crate::error::{Rule, ValidationError};
use crate::limits::{MAX_ERROR_MESSAGE_UNITS, MAX_SAFE_INTEGER};

/// Trims like JavaScript's `String.prototype.trim`: Unicode white space and line
/// terminators plus U+FEFF, but not U+0085 (white space to Unicode, not to JavaScript).
pub fn js_trim(value: &str) -> &str {
    value.trim_matches(is_js_whitespace)
}

fn is_js_whitespace(c: char) -> bool {
    (c.is_whitespace() && c != '\u{85}') || c == '\u{FEFF}'
}

/// Length in UTF-16 code units (JavaScript's `string.length`).
pub fn utf16_len(value: &str) -> usize {
    value.encode_utf16().count()
}

/// The host's `nonEmptyString(v, max)`: non-blank after trimming, trimmed length <= `max`
/// UTF-16 units. Returns the trimmed value.
pub fn non_empty<'a>(
    rule: Rule,
    path: &str,
    value: &'a str,
    max: usize,
) -> Result<&'a str, ValidationError> {
    let trimmed = js_trim(value);
    if trimmed.is_empty() {
        return Err(ValidationError::new(
            rule,
            path,
            "must be a non-blank string",
        ));
    }
    let len = utf16_len(trimmed);
    if len > max {
        return Err(ValidationError::new(
            rule,
            path,
            format!("is {len} UTF-16 units long after trimming; at most {max} are allowed"),
        ));
    }
    Ok(trimmed)
}

/// `first` char class, then up to `max - 1` chars of `rest`, checked on the trimmed value.
fn pattern(
    rule: Rule,
    path: &str,
    value: &str,
    max: usize,
    first: fn(char) -> bool,
    rest: fn(char) -> bool,
    grammar: &str,
) -> Result<(), ValidationError> {
    let trimmed = non_empty(rule, path, value, max)?;
    let mut chars = trimmed.chars();
    let ok = chars.next().is_some_and(first) && chars.all(rest);
    if ok {
        Ok(())
    } else {
        Err(ValidationError::new(
            rule,
            path,
            format!("{trimmed:?} does not match {grammar}"),
        ))
    }
}

fn alnum(c: char) -> bool {
    c.is_ascii_alphanumeric()
}

fn lower_start(c: char) -> bool {
    c.is_ascii_lowercase()
}

fn name_rest(c: char) -> bool {
    c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '.' | '_' | '-')
}

/// `requestId`: `^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$`.
pub fn request_id(path: &str, value: &str) -> Result<(), ValidationError> {
    pattern(
        Rule::RequestId,
        path,
        value,
        128,
        alnum,
        |c| alnum(c) || matches!(c, '.' | '_' | ':' | '-'),
        "^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$",
    )
}

/// `provider`: `^[a-z][a-z0-9._-]{0,63}$`.
pub fn provider(path: &str, value: &str) -> Result<(), ValidationError> {
    pattern(
        Rule::Provider,
        path,
        value,
        64,
        lower_start,
        name_rest,
        "^[a-z][a-z0-9._-]{0,63}$",
    )
}

/// Capability name: `^[a-z][a-z0-9._-]{0,63}$`.
pub fn capability(path: &str, value: &str) -> Result<(), ValidationError> {
    pattern(
        Rule::CapabilityName,
        path,
        value,
        64,
        lower_start,
        name_rest,
        "^[a-z][a-z0-9._-]{0,63}$",
    )
}

/// A capability list: every name well-formed, no duplicates.
pub fn capability_list(path: &str, names: &[String]) -> Result<(), ValidationError> {
    let mut seen = std::collections::HashSet::new();
    for (i, name) in names.iter().enumerate() {
        let item = format!("{path}[{i}]");
        capability(&item, name)?;
        if !seen.insert(js_trim(name)) {
            return Err(ValidationError::new(
                Rule::DuplicateCapability,
                item,
                format!("capability {name:?} is listed more than once"),
            ));
        }
    }
    Ok(())
}

/// Ids (`remoteSessionId`, `agentThreadId`, `operationId`, operation `turnId`, skill `name`):
/// `^[A-Za-z0-9][A-Za-z0-9._:/-]{0,255}$`.
pub fn id(path: &str, value: &str) -> Result<(), ValidationError> {
    pattern(
        Rule::Id,
        path,
        value,
        256,
        alnum,
        |c| alnum(c) || matches!(c, '.' | '_' | ':' | '/' | '-'),
        "^[A-Za-z0-9][A-Za-z0-9._:/-]{0,255}$",
    )
}

/// `turnId` of turn, progress, final and failure: non-blank, <= 256 UTF-16 units.
pub fn turn_id(path: &str, value: &str) -> Result<(), ValidationError> {
    non_empty(Rule::TurnId, path, value, 256).map(|_| ())
}

/// Error `code`: `^[a-z][a-z0-9._-]{0,127}$`.
pub fn error_code(path: &str, value: &str) -> Result<(), ValidationError> {
    pattern(
        Rule::ErrorCode,
        path,
        value,
        128,
        lower_start,
        name_rest,
        "^[a-z][a-z0-9._-]{0,127}$",
    )
}

/// Error `message`: non-blank, <= 4096 UTF-16 units.
pub fn error_message(path: &str, value: &str) -> Result<(), ValidationError> {
    non_empty(Rule::ErrorMessage, path, value, MAX_ERROR_MESSAGE_UNITS).map(|_| ())
}

/// The longest prefix of `value` that is at most `max_units` UTF-16 units, cut on a character
/// boundary (never inside a multi-byte character or a surrogate pair).
pub fn prefix_utf16(value: &str, max_units: usize) -> &str {
    let mut units = 0;
    for (at, c) in value.char_indices() {
        units += c.len_utf16();
        if units > max_units {
            return &value[..at];
        }
    }
    value
}

/// An error `message` the host accepts, made from any text: trimmed like the host trims, cut to
/// [`MAX_ERROR_MESSAGE_UNITS`] UTF-16 units with a marker when cut, and `fallback` (the error
/// code) when blank. Never panics.
pub fn fit_error_message(message: &str, fallback: &str) -> String {
    let trimmed = js_trim(message);
    if trimmed.is_empty() {
        let fallback = js_trim(fallback);
        return if fallback.is_empty() {
            "failed".to_string()
        } else {
            prefix_utf16(fallback, MAX_ERROR_MESSAGE_UNITS).to_string()
        };
    }
    if utf16_len(trimmed) <= MAX_ERROR_MESSAGE_UNITS {
        return trimmed.to_string();
    }
    const CUT: &str = " [cut]";
    let kept = js_trim(prefix_utf16(trimmed, MAX_ERROR_MESSAGE_UNITS - CUT.len()));
    format!("{kept}{CUT}")
}

/// A JavaScript safe integer >= 0.
pub fn safe_integer(path: &str, value: u64) -> Result<(), ValidationError> {
    if value > MAX_SAFE_INTEGER {
        Err(ValidationError::new(
            Rule::SafeInteger,
            path,
            format!("{value} is above 2^53-1, the largest integer the host can represent"),
        ))
    } else {
        Ok(())
    }
}

/// A JavaScript safe integer of either sign (exit codes).
pub fn safe_signed_integer(path: &str, value: i64) -> Result<(), ValidationError> {
    if value.unsigned_abs() > MAX_SAFE_INTEGER {
        Err(ValidationError::new(
            Rule::SafeInteger,
            path,
            format!("{value} is outside +-(2^53-1)"),
        ))
    } else {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn fit_error_message_cuts_in_utf16_units_on_character_boundaries() {
        // 4095 units then an astral character (2 units): it would straddle the limit.
        let straddling = format!("{}😀tail", "a".repeat(4095));
        let fitted = super::fit_error_message(&straddling, "code");
        assert!(
            super::utf16_len(&fitted) <= 4096,
            "{}",
            super::utf16_len(&fitted)
        );
        assert!(fitted.ends_with(" [cut]"));
        // Multi-byte characters around byte 4000 (the old `String::truncate` panic).
        let euros = "€".repeat(3000);
        let fitted = super::fit_error_message(&euros, "code");
        assert!(super::error_message("m", &fitted).is_ok());
        // Exactly at the limit: kept whole.
        let exact = "😀".repeat(2048);
        assert_eq!(super::fit_error_message(&exact, "code"), exact);
        // Blank: the code stands in.
        assert_eq!(super::fit_error_message(" \n\t", "bad_thing"), "bad_thing");
        assert_eq!(super::prefix_utf16("a😀b", 2), "a");
        assert_eq!(super::prefix_utf16("a😀b", 3), "a😀");
    }

    use super::*;

    #[test]
    fn trims_like_javascript() {
        assert_eq!(js_trim("\u{FEFF} a b\n\t"), "a b");
        assert_eq!(utf16_len("😀"), 2);
        assert_eq!(js_trim("\u{85}x\u{3000}"), "\u{85}x");
        assert_eq!(js_trim("\u{b}\u{c}\u{a0}\u{2028}"), "");
    }

    #[test]
    fn request_id_grammar() {
        assert!(request_id("r", "hello:123e4567-e89b").is_ok());
        assert!(request_id("r", " h1 ").is_ok());
        assert_eq!(request_id("r", "-x").unwrap_err().rule, Rule::RequestId);
        assert_eq!(request_id("r", "a/b").unwrap_err().rule, Rule::RequestId);
        assert_eq!(request_id("r", "  ").unwrap_err().rule, Rule::RequestId);
    }

    #[test]
    fn id_allows_slash() {
        assert!(id("i", "a/b:c").is_ok());
        assert!(id("i", "/a").is_err());
    }

    #[test]
    fn codes_are_lowercase() {
        assert!(error_code("c", "not_ready").is_ok());
        assert!(error_code("c", "NotReady").is_err());
        assert!(provider("p", "Reference").is_err());
    }
}
