//! Small helpers shared by every module: ids, timestamps, retry policies, blocking work.

pub mod retry;

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

/// Run blocking work (the SQLite store, a file lock's wait) from async code without stalling
/// the async worker threads: on a multi-threaded runtime through `block_in_place`, which hands
/// this worker's other tasks to another thread first; elsewhere (a current-thread runtime, where
/// `block_in_place` panics, or no runtime) inline. Every store access from async code goes here.
pub fn blocking<T>(f: impl FnOnce() -> T) -> T {
    use tokio::runtime::{Handle, RuntimeFlavor};
    match Handle::try_current() {
        Ok(h) if h.runtime_flavor() == RuntimeFlavor::MultiThread => tokio::task::block_in_place(f),
        _ => f(),
    }
}

#[cfg(test)]
mod tests {
    use super::blocking;

    #[test]
    fn blocking_runs_inline_without_a_runtime() {
        assert_eq!(blocking(|| 7), 7);
    }

    #[tokio::test(flavor = "current_thread")]
    async fn blocking_runs_inline_on_a_current_thread_runtime() {
        assert_eq!(blocking(|| 7), 7);
    }

    /// One worker: a task blocked in `blocking` must not stop another task from running.
    #[tokio::test(flavor = "multi_thread", worker_threads = 1)]
    async fn blocking_leaves_the_worker_to_other_tasks() {
        use std::sync::Arc;
        use std::sync::atomic::{AtomicBool, Ordering};
        use std::time::{Duration, Instant};

        let flag = Arc::new(AtomicBool::new(false));
        let seen = flag.clone();
        let waiter = tokio::spawn(async move {
            blocking(|| {
                let until = Instant::now() + Duration::from_secs(5);
                while !seen.load(Ordering::SeqCst) && Instant::now() < until {
                    std::thread::sleep(Duration::from_millis(5));
                }
                seen.load(Ordering::SeqCst)
            })
        });
        tokio::task::yield_now().await;
        tokio::spawn(async move { flag.store(true, Ordering::SeqCst) });
        assert!(waiter.await.unwrap(), "the other task ran meanwhile");
    }
}
