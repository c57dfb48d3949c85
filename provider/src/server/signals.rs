//! The signals that end the provider: SIGTERM (what BotMux sends after `status: closed`, with
//! stdin still open), SIGINT and SIGHUP. The remote session is left as `detach` leaves it.

use tokio::signal::unix::{SignalKind, signal};

/// Exit status for a signal: 128 + its number, what a shell reports for a process it ended.
pub fn exit_status(signo: i32) -> i32 {
    128 + signo
}

/// Completes with [`exit_status`] of the first of SIGTERM, SIGINT, SIGHUP. The handlers are
/// installed when this is called, not when it is first polled.
pub fn first_of_term_int_hup() -> impl std::future::Future<Output = i32> + Send + 'static {
    let kinds = [
        (SignalKind::terminate(), libc::SIGTERM),
        (SignalKind::interrupt(), libc::SIGINT),
        (SignalKind::hangup(), libc::SIGHUP),
    ];
    let mut streams = Vec::new();
    for (kind, signo) in kinds {
        match signal(kind) {
            Ok(s) => streams.push((s, signo)),
            Err(e) => tracing::warn!(signo, "cannot listen for signal: {e}"),
        }
    }
    async move {
        if streams.is_empty() {
            return std::future::pending().await;
        }
        let waits = streams.into_iter().map(|(mut s, signo)| {
            Box::pin(async move {
                s.recv().await;
                exit_status(signo)
            })
        });
        futures::future::select_all(waits).await.0
    }
}
