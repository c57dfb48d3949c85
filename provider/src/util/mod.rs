//! Small helpers shared by every module: ids and timestamps.

use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

/// A new time-ordered id with a readable prefix, e.g. `sess_0192c1d2e3f4...`.
pub fn new_id(prefix: &str) -> String {
    let id = uuid::Uuid::now_v7().simple().to_string();
    format!("{prefix}_{id}")
}

/// Now, as RFC 3339 UTC with second precision (`2026-05-07T10:00:00Z`).
pub fn now_rfc3339() -> String {
    rfc3339(OffsetDateTime::now_utc())
}

pub fn rfc3339(t: OffsetDateTime) -> String {
    let t = t.replace_nanosecond(0).unwrap_or(t);
    t.format(&Rfc3339)
        .unwrap_or_else(|_| t.unix_timestamp().to_string())
}

/// Milliseconds since the Unix epoch.
pub fn now_unix_ms() -> i64 {
    (OffsetDateTime::now_utc().unix_timestamp_nanos() / 1_000_000) as i64
}

/// At most `max` bytes of `bytes` as text fit for a message: lossily decoded, control characters
/// (other than newline and tab) shown as `\u{..}` escapes, so remote text cannot drive a terminal.
pub fn printable_excerpt(bytes: &[u8], max: usize) -> String {
    let cut = &bytes[..bytes.len().min(max)];
    let text = String::from_utf8_lossy(cut);
    let mut out = String::with_capacity(text.len());
    for ch in text.chars() {
        if ch.is_control() && ch != '\n' && ch != '\t' {
            out.extend(ch.escape_unicode());
        } else {
            out.push(ch);
        }
    }
    if bytes.len() > max {
        out.push_str("...");
    }
    out
}
