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
