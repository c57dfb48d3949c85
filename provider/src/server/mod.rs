//! The `botmux-remote-runner` provider: BotMux remote-runner protocol v1 on stdin/stdout,
//! backed by the engine (a persistent tmux session on a machine reached over SSH, or `local`).
//!
//! - [`config`]: environment variables (documented in `docs/provider.md`).
//! - [`writer`]: the single writer that owns stdout.
//! - [`provider`]: the state machine (handshake, start/resume, fencing, cancel/detach/reattach).
//! - [`turn`]: one turn, streamed as `progress`, ended by `final` or a failure.
//! - [`screen`]: `terminal_screen` snapshots, only when something changed.

pub mod config;
pub mod provider;
pub mod screen;
pub mod text;
pub mod turn;
pub mod writer;

use futures::StreamExt;
use remote_runner_protocol::{CommandReader, Event, FailureStatus, FrameError};
use tokio::io::{AsyncRead, AsyncWrite};

pub use config::ProviderConfig;
pub use provider::Provider;

/// The whole provider process: logs to stderr (`RUST_LOG`, default `warn`), a runtime, and
/// [`run_stdio`]. Returns the exit code; the caller exits without waiting for the blocking
/// stdin reader thread.
pub fn main_entry() -> i32 {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_ansi(false)
        .init();
    match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime.block_on(run_stdio()),
        Err(e) => {
            eprintln!("botmux-remote-runner: cannot start the async runtime: {e}");
            1
        }
    }
}

/// Run the provider on the process's stdin/stdout until stdin closes or SIGTERM arrives.
/// Returns the process exit code.
pub async fn run_stdio() -> i32 {
    let config = ProviderConfig::from_env();
    let mut sigterm = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
    {
        Ok(s) => Some(s),
        Err(e) => {
            tracing::warn!("cannot listen for SIGTERM: {e}");
            None
        }
    };
    let term = async move {
        match sigterm.as_mut() {
            Some(s) => {
                s.recv().await;
            }
            None => std::future::pending::<()>().await,
        }
    };
    serve(config, tokio::io::stdin(), tokio::io::stdout(), term).await
}

/// Serve commands from `input`, writing events to `output`, until `input` ends or `stop`
/// completes. Separated from [`run_stdio`] so tests can drive it over in-memory pipes.
pub async fn serve<R, W>(
    config: crate::Result<ProviderConfig>,
    input: R,
    output: W,
    stop: impl std::future::Future<Output = ()>,
) -> i32
where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let (out, writer) = writer::spawn(output);
    let provider = Provider::new(config, out.clone());
    let mut commands = CommandReader::new(input);
    tokio::pin!(stop);
    loop {
        let item = tokio::select! {
            item = commands.next() => item,
            _ = &mut stop => {
                tracing::info!("SIGTERM: leaving the remote session running and exiting");
                break;
            }
        };
        match item {
            None => {
                tracing::info!("stdin closed: leaving the remote session running and exiting");
                break;
            }
            Some(Ok(command)) => provider.handle(command).await,
            Some(Err(FrameError::Io(err))) => {
                tracing::warn!("reading stdin failed: {err}");
                break;
            }
            Some(Err(err)) => out.send(bad_line_failure(&err)),
        }
    }
    provider.shutdown().await;
    drop(provider);
    drop(out);
    writer.finish(std::time::Duration::from_secs(5)).await;
    0
}

/// A failure for a line that could not be decoded, correlated when its ids could be read.
fn bad_line_failure(err: &FrameError) -> Event {
    let (request_id, turn_id) = match err.decode_error() {
        Some(d) => (d.request_id.clone(), d.turn_id.clone()),
        None => (None, None),
    };
    let mut message = err.to_string();
    if message.chars().count() > 4000 {
        message = message.chars().take(4000).collect();
    }
    Event::failure(
        request_id,
        turn_id,
        err.code(),
        message,
        FailureStatus::Failed,
        false,
    )
}
