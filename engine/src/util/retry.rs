//! Every retry policy of the engine, in one place, each with its worst case.
//!
//! Delays come from [`backon`]'s exponential backoff (no jitter: the delays below are exact).
//! A policy's *worst-case wait* is the sum of its delays; each attempt also costs its own bound
//! (an SSH connect is bounded by the connect timeout, a remote step by its own timeout).
//!
//! **Who retries.** Layers nest: a turn's stream calls the engine, whose reconnect calls the
//! connection pool, which establishes SSH connections. Each of them may retry, and nested loops
//! would multiply (before this module a turn could retry 5 x 5 x 3 times). So the outermost
//! [`run`] in a task owns the retrying: it marks the task, and every [`run`] nested inside it
//! runs its operation once and hands the error up, where the outer policy decides. A loop that
//! runs on its own (a transport used directly, the CLI's engine calls) keeps its own policy.
//!
//! **A turn's worst case.** A turn's output stream retries a dropped link under [`LINK`]: 6
//! attempts and 15.5 s of delays; the engine's reconnect and the pool's [`CONNECT`] inside it
//! try once per attempt. Each attempt is bounded by its own timeouts (with the defaults: one SSH
//! connect, 20 s; each SFTP request, 60 s; the output wait, 10 s), so an outage costs a turn at
//! most 6 such attempts plus 15.5 s. Any success resets the count: the bound is per outage, not
//! per turn. The turn's chat tasks run apart (their own tasks), each remote step under [`LINK`].
//! Processes do not share the mark: a keeper ends when its link drops, so its pool's [`CONNECT`]
//! only meets a forwarded call that races the drop (0.8 s of delays more).

use std::future::Future;
use std::time::Duration;

use backon::{BackoffBuilder, BlockingRetryable, ExponentialBuilder, Retryable};

use crate::error::{Error, ErrorCode, Result};

/// How often and how patiently to retry one kind of failure: the first delay, multiplied by
/// `factor` after each retry up to `max_delay`, for at most `retries` retries.
#[derive(Debug, Clone, Copy)]
pub struct Policy {
    name: &'static str,
    first_delay: Duration,
    factor: f32,
    max_delay: Duration,
    retries: usize,
}

/// Establishing an SSH connection again after one dropped (the pool; never a first connect,
/// which fails at once). 3 attempts, delays 0.2 s and 0.6 s: 0.8 s of waiting at worst, plus
/// one connect timeout per attempt. `ConnectOptions::reconnect_attempts` overrides the count.
pub const CONNECT: Policy = Policy {
    name: "connect",
    first_delay: Duration::from_millis(200),
    factor: 3.0,
    max_delay: Duration::from_millis(1800),
    retries: 2,
};

/// A link that dropped or stalled under a running operation (the engine's reconnect, a turn's
/// output stream, a chat call's remote steps). 6 attempts, delays 0.5, 1, 2, 4 and 8 s: 15.5 s
/// of waiting at worst, plus each attempt's own bound.
pub const LINK: Policy = Policy {
    name: "link",
    first_delay: Duration::from_millis(500),
    factor: 2.0,
    max_delay: Duration::from_secs(8),
    retries: 5,
};

/// Opening the SQLite store while other processes switch it to WAL or recover it (SQLite then
/// says "locked" at once, without its busy timeout). 41 attempts, delays 25 ms, 50 ms, then
/// 100 ms: 3.875 s of waiting at worst. Blocking sleeps: it runs only inside [`super::blocking`].
pub const STORE_OPEN: Policy = Policy {
    name: "store_open",
    first_delay: Duration::from_millis(25),
    factor: 2.0,
    max_delay: Duration::from_millis(100),
    retries: 40,
};

impl Policy {
    /// This policy with `attempts` tries in all (at least one).
    pub const fn with_attempts(mut self, attempts: u32) -> Policy {
        self.retries = attempts.saturating_sub(1) as usize;
        self
    }

    /// Tries in all, the first included.
    pub const fn attempts(&self) -> usize {
        self.retries + 1
    }

    /// The delays between tries, in order.
    pub fn delays(&self) -> impl Iterator<Item = Duration> + use<> {
        self.backoff().build()
    }

    /// The sum of the delays: the longest this policy waits, attempts' own time aside.
    pub fn worst_wait(&self) -> Duration {
        self.delays().sum()
    }

    fn backoff(&self) -> ExponentialBuilder {
        ExponentialBuilder::new()
            .with_min_delay(self.first_delay)
            .with_factor(self.factor)
            .with_max_delay(self.max_delay)
            .with_max_times(self.retries)
    }
}

/// A dropped or stalled link, after which reconnecting may help: what [`LINK`] retries.
pub fn is_link_error(e: &Error) -> bool {
    matches!(
        e.code,
        ErrorCode::ConnectionLost | ErrorCode::ConnectionFailed | ErrorCode::Timeout
    )
}

tokio::task_local! {
    /// Set while a [`run`] retries in this task: the policy that owns the retrying.
    static OWNER: &'static str;
}

/// Run `op` under `policy`, retrying the errors `retryable` accepts. Inside another [`run`] of
/// the same task, `op` runs once: the outer policy owns the retrying (see the module doc).
pub async fn run<T, Fut>(
    policy: Policy,
    op: impl FnMut() -> Fut,
    retryable: impl FnMut(&Error) -> bool,
) -> Result<T>
where
    Fut: Future<Output = Result<T>>,
{
    let mut op = op;
    if let Ok(owner) = OWNER.try_with(|owner| *owner) {
        tracing::trace!(owner, policy = policy.name, "nested retry: one attempt");
        return op().await;
    }
    let retrying = op
        .retry(policy.backoff())
        .when(retryable)
        .notify(|e, delay| {
            tracing::debug!(policy = policy.name, ?delay, error = %e, "retrying");
        });
    OWNER.scope(policy.name, retrying).await
}

/// [`run`] for blocking work (it sleeps the thread): call it only where blocking is fine,
/// e.g. inside [`super::blocking`].
pub fn run_blocking<T, E>(
    policy: Policy,
    op: impl FnMut() -> std::result::Result<T, E>,
    retryable: impl FnMut(&E) -> bool,
) -> std::result::Result<T, E> {
    op.retry(policy.backoff())
        .sleep(std::thread::sleep)
        .when(retryable)
        .notify(|_, delay| tracing::debug!(policy = policy.name, ?delay, "retrying"))
        .call()
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU32, Ordering};

    use super::*;

    fn secs(d: Duration) -> f64 {
        d.as_secs_f64()
    }

    #[test]
    fn documented_bounds_hold() {
        assert_eq!(CONNECT.attempts(), 3);
        assert!((secs(CONNECT.worst_wait()) - 0.8).abs() < 1e-3);
        assert_eq!(LINK.attempts(), 6);
        assert!((secs(LINK.worst_wait()) - 15.5).abs() < 1e-3);
        assert_eq!(STORE_OPEN.attempts(), 41);
        assert!((secs(STORE_OPEN.worst_wait()) - 3.875).abs() < 1e-3);
        assert_eq!(CONNECT.with_attempts(1).delays().count(), 0);
        assert_eq!(CONNECT.with_attempts(0).attempts(), 1);
    }

    const QUICK: Policy = Policy {
        name: "quick",
        first_delay: Duration::from_millis(1),
        factor: 1.0,
        max_delay: Duration::from_millis(1),
        retries: 3,
    };

    fn lost() -> Error {
        Error::new(ErrorCode::ConnectionLost, "gone")
    }

    /// How many times an always-failing operation is tried when `retryable` says so or not.
    async fn tries_of_a_failing_op(retryable: bool) -> u32 {
        let tries = AtomicU32::new(0);
        let r: Result<()> = run(
            QUICK,
            || async {
                tries.fetch_add(1, Ordering::SeqCst);
                Err(lost())
            },
            |_| retryable,
        )
        .await;
        assert!(r.is_err());
        tries.load(Ordering::SeqCst)
    }

    #[tokio::test]
    async fn retries_until_the_policy_is_spent() {
        assert_eq!(tries_of_a_failing_op(true).await, 4);
    }

    #[tokio::test]
    async fn only_retryable_errors_are_retried() {
        assert_eq!(tries_of_a_failing_op(false).await, 1);
    }

    #[tokio::test]
    async fn nested_runs_do_not_multiply() {
        let inner = AtomicU32::new(0);
        let r: Result<()> = run(
            QUICK,
            || async {
                run(
                    QUICK,
                    || async {
                        inner.fetch_add(1, Ordering::SeqCst);
                        Err(lost())
                    },
                    |_| true,
                )
                .await
            },
            |_| true,
        )
        .await;
        assert!(r.is_err());
        assert_eq!(inner.load(Ordering::SeqCst), 4, "outer attempts only");
    }

    #[test]
    fn blocking_retries() {
        let mut tries = 0;
        let r: std::result::Result<(), String> = run_blocking(
            QUICK,
            || {
                tries += 1;
                Err("busy".to_string())
            },
            |_| true,
        );
        assert!(r.is_err());
        assert_eq!(tries, 4);
    }
}
