//! The `botmux-remote-runner` provider: BotMux remote-runner protocol v1 on stdin/stdout,
//! backed by the engine (a persistent tmux session on a machine reached over SSH, or `local`).
//!
//! - [`config`]: environment variables (documented in `docs/provider.md`).
//! - [`writer`]: the single writer that owns stdout.
//! - [`provider`]: the configuration's outcome and the entry of every command.
//! - `cmd`: one file per protocol command, and the table that maps a command to its file.
//! - [`shared`]: the state every handler and task shares (session, protocol state, turn).
//! - [`jobs`] and [`lane`]: engine work queued in order, away from the command loop.
//! - [`session`]: the remote session behind the protocol's (create, bind, adopt, retire).
//! - [`binding`]: which sessions a resumed state may name.
//! - [`turn`]: one turn, streamed as `progress`, ended by `final` or a failure.
//! - [`screen`]: `terminal_screen` snapshots, only when something changed.
//! - [`failure`]: every `failure` event, rendered in one place (codes, messages, hints).
//! - [`signals`]: SIGTERM, SIGINT and SIGHUP as one future.

pub mod binding;
mod cmd;
pub mod config;
pub mod failure;
pub mod jobs;
pub mod lane;
pub mod provider;
pub mod screen;
pub mod session;
pub mod shared;
pub mod signals;
pub mod text;
pub mod turn;
pub mod writer;

use std::time::Duration;

use futures::StreamExt;
use remote_runner_protocol::{CommandReader, FrameError};
use tokio::io::{AsyncRead, AsyncWrite};

pub use config::ProviderConfig;
pub use provider::Provider;

/// Exit status after stdin closed (the host is gone or done).
pub const EXIT_STDIN_CLOSED: i32 = 0;
/// Exit status when reading stdin failed.
pub const EXIT_STDIN_ERROR: i32 = 1;
/// How long queued session work (a start in flight) may take to finish when stdin closed.
const SETTLE_AFTER_EOF: Duration = Duration::from_secs(5);
/// How long queued events may take to reach stdout when stdin closed.
const FLUSH_AFTER_EOF: Duration = Duration::from_secs(5);
/// How long queued events may take to reach stdout after a signal (the host waits for the
/// process, and the bound is one second in every state).
const FLUSH_AFTER_SIGNAL: Duration = Duration::from_millis(300);

/// The whole provider process: a runtime and [`run_stdio`] (logging is the binary's to set up).
/// Returns the exit code without waiting for the runtime's blocking threads (tokio reads stdin
/// on one, and that read never returns while the host keeps stdin open).
pub fn main_entry() -> i32 {
    match tokio::runtime::Runtime::new() {
        Ok(runtime) => {
            let code = runtime.block_on(run_stdio());
            // Dropping the runtime would wait for the stdin reader thread: do not.
            runtime.shutdown_background();
            code
        }
        Err(e) => {
            eprintln!("botmux-remote-runner: cannot start the async runtime: {e}");
            1
        }
    }
}

/// Run the provider on the process's stdin/stdout until stdin closes or SIGTERM, SIGINT or
/// SIGHUP arrives. Returns the process exit code (see [`serve`]).
pub async fn run_stdio() -> i32 {
    let config = ProviderConfig::from_env();
    let stop = signals::first_of_term_int_hup();
    serve(config, tokio::io::stdin(), tokio::io::stdout(), stop).await
}

/// Serve commands from `input`, writing events to `output`, until `input` ends (exit status
/// [`EXIT_STDIN_CLOSED`]) or `stop` completes with the exit status to use (for a signal,
/// 128 + its number). The loop never waits on the engine, so `stop` is noticed at once in
/// every state. Separated from [`run_stdio`] so tests can drive it over in-memory pipes.
pub async fn serve<R, W>(
    config: remote_runner_engine::Result<ProviderConfig>,
    input: R,
    output: W,
    stop: impl std::future::Future<Output = i32>,
) -> i32
where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let (out, writer) = writer::spawn(output);
    let provider = Provider::new(config, out.clone());
    let mut commands = CommandReader::new(input);
    tokio::pin!(stop);
    let (code, flush) = loop {
        let item = tokio::select! {
            biased;
            code = &mut stop => {
                tracing::info!(code, "signal: leaving the remote session as detach would, and exiting");
                break (code, FLUSH_AFTER_SIGNAL);
            }
            item = commands.next() => item,
        };
        match item {
            None => {
                tracing::info!("stdin closed: leaving the remote session running and exiting");
                break (EXIT_STDIN_CLOSED, FLUSH_AFTER_EOF);
            }
            Some(Ok(command)) => provider.dispatch(command),
            Some(Err(FrameError::Io(err))) => {
                tracing::warn!("reading stdin failed: {err}");
                break (EXIT_STDIN_ERROR, FLUSH_AFTER_EOF);
            }
            Some(Err(err)) => out.send(failure::bad_line(&err)),
        }
    };
    if code == EXIT_STDIN_CLOSED {
        provider.settle(SETTLE_AFTER_EOF).await;
    }
    provider.shutdown();
    drop(provider);
    drop(out);
    writer.finish(flush).await;
    code
}
