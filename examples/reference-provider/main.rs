//! `reference-provider`: an in-memory echo provider of the BotMux remote-runner protocol v1,
//! built on `remote-runner-protocol`. It behaves like the host's reference runner and is the
//! provider the conformance harness is proven against. Where it deliberately differs:
//! - no `terminal_screen` of a newly raised generation right after `ready` (the real host
//!   kills a provider that sends one before its next command);
//! - screen sequences come from the clock, so they keep increasing across restarts;
//! - which commands it refuses, and with which code, comes from the protocol crate's
//!   `lifecycle` rules (a second turn while one runs gets `busy`); a result that matches no
//!   pending operation is ignored (answering a result is a protocol error);
//! - extra triggers `request-outbound-{duplicate,conflict,burst}` and the session-tool ones
//!   (docs/conformance.md).
//!
//! It answers the triggers from memory. `botmux-remote-runner` sends the same events from a
//! real machine: a turn's command calls the chat helper, `"$RR_CHAT" send TEXT` or
//! `"$RR_CHAT" tool '{"tool":"history","limit":20}'`, and sees the host's result as its exit
//! code and output (docs/provider.md; `examples/botmux/chat-agent.sh` is an agent doing it,
//! and `provider/tests/provider_conformance.rs` maps each trigger to a helper call).
//!
//! `--mutant NAME` (or `REFERENCE_PROVIDER_MUTANT=NAME`) switches on one deliberate defect;
//! `--list-mutants` prints their names.

mod mutant;
mod provider;

use futures::{FutureExt, StreamExt};
use remote_runner_protocol::CommandReader;
use tokio::io::AsyncWriteExt;

use mutant::Mutant;
use provider::{Output, Reference};

fn parse_args() -> Result<Option<Mutant>, String> {
    let mut args = std::env::args().skip(1);
    let mut mutant = match std::env::var("REFERENCE_PROVIDER_MUTANT") {
        Ok(name) if !name.is_empty() => Some(Mutant::parse(&name)?),
        _ => None,
    };
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--mutant" => {
                let name = args
                    .next()
                    .ok_or("--mutant needs a name (see --list-mutants)")?;
                mutant = Some(Mutant::parse(&name)?);
            }
            "--list-mutants" => {
                for (name, _) in Mutant::ALL {
                    println!("{name}");
                }
                std::process::exit(0);
            }
            other => return Err(format!("unknown argument {other:?}; use --mutant NAME")),
        }
    }
    Ok(mutant)
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let mutant = match parse_args() {
        Ok(mutant) => mutant,
        Err(message) => {
            eprintln!("reference-provider: {message}");
            std::process::exit(2);
        }
    };
    // The mutant keeps the streams (and so the handlers) alive and never reads them.
    let _ignored_signals: Vec<_> = match mutant {
        Some(Mutant::IgnoreStopSignals) => {
            use tokio::signal::unix::{SignalKind, signal};
            [
                SignalKind::terminate(),
                SignalKind::interrupt(),
                SignalKind::hangup(),
            ]
            .into_iter()
            .filter_map(|kind| signal(kind).ok())
            .collect()
        }
        _ => Vec::new(),
    };
    // The signal mutants catch SIGTERM themselves: `torn-line-on-signal` answers it at once
    // with half a line, `signal-waits-for-start` looks for it only between commands.
    let mut sigterm = match mutant {
        Some(Mutant::SignalWaitsForStart | Mutant::TornLineOnSignal) => {
            use tokio::signal::unix::{SignalKind, signal};
            signal(SignalKind::terminate()).ok()
        }
        _ => None,
    };
    let mut commands = CommandReader::new(tokio::io::stdin());
    let mut stdout = tokio::io::stdout();
    let mut session = Reference::new(mutant);
    loop {
        let item = match sigterm.as_mut() {
            Some(term) if mutant == Some(Mutant::TornLineOnSignal) => tokio::select! {
                item = commands.next() => item,
                _ = term.recv() => torn_exit(&mut stdout).await,
            },
            _ => commands.next().await,
        };
        let Some(item) = item else { break };
        if let Err(remote_runner_protocol::FrameError::Io(err)) = &item {
            eprintln!("reference-provider: stdin failed: {err}");
            break;
        }
        let started = matches!(item, Ok(remote_runner_protocol::Command::Start(_)));
        let slow_start = matches!(
            mutant,
            Some(Mutant::SlowStartBlocksLoop | Mutant::SignalWaitsForStart)
        );
        if started && slow_start {
            tokio::time::sleep(std::time::Duration::from_secs(3)).await;
        }
        let outputs = session.handle(item);
        // Between handling a command and writing its answer: the host cannot have sent a
        // signal in reply to an answer it has not read yet.
        if mutant == Some(Mutant::SignalWaitsForStart)
            && let Some(term) = sigterm.as_mut()
            && term.recv().now_or_never().is_some()
        {
            std::process::exit(0);
        }
        for output in outputs {
            let Some(bytes) = output.bytes() else {
                if matches!(output, Output::Exit) {
                    std::process::exit(3);
                }
                continue;
            };
            if stdout.write_all(&bytes).await.is_err() || stdout.flush().await.is_err() {
                return;
            }
        }
        if started && mutant == Some(Mutant::StopReadingAfterStart) {
            std::future::pending::<()>().await;
        }
    }
    if mutant == Some(Mutant::NoExitOnEof) {
        loop {
            tokio::time::sleep(std::time::Duration::from_secs(3600)).await;
        }
    }
}

/// `torn-line-on-signal`: half a `ready` line, no newline, and exit.
async fn torn_exit(stdout: &mut tokio::io::Stdout) -> ! {
    let torn = br#"{"protocol":"botmux.remote-runner","version":1,"type":"ready","#;
    let _ = stdout.write_all(torn).await;
    let _ = stdout.flush().await;
    std::process::exit(0)
}
