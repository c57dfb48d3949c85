//! The times seed-runner writes: UTC seconds, and the day in ids.

/// Now as `2026-04-07T10:30:00Z` and as seconds since the epoch.
pub(crate) fn now() -> (String, i64) {
    let t = time::OffsetDateTime::now_utc();
    let fmt = time::macros::format_description!("[year]-[month]-[day]T[hour]:[minute]:[second]Z");
    (t.format(&fmt).unwrap_or_default(), t.unix_timestamp())
}

pub(crate) fn today() -> String {
    let fmt = time::macros::format_description!("[year][month][day]");
    time::OffsetDateTime::now_utc()
        .format(&fmt)
        .unwrap_or_default()
}
