//! `remote-runner`: the CLI of the Remote Runner API contract.
//!
//! Parse (clap) -> one handler per command -> JSON or human rendering -> an exit code from the
//! policy in [`exit`].

mod cli;
mod commands;
mod context;
mod exit;
mod hint;
mod mcp;
mod output;
mod prompt;
mod timeout;

use std::process::ExitCode;

use clap::error::ErrorKind;
use clap::{CommandFactory, FromArgMatches};
use remote_runner_engine::Error;

use crate::cli::Cli;
use crate::context::Context;
use crate::output::{ColorMode, Output};

fn main() -> ExitCode {
    let parsed = timeout::annotate(Cli::command())
        .try_get_matches()
        .and_then(|matches| Cli::from_arg_matches(&matches));
    let cli = match parsed {
        Ok(cli) => cli,
        Err(err) => return ExitCode::from(usage_error(err)),
    };
    init_logging();
    let out = Output::new(cli.global.json, cli.global.color);
    let code = match run(cli, out) {
        Ok(report) => out.report(&report),
        Err(err) => out.error(&err),
    };
    ExitCode::from(code)
}

fn run(cli: Cli, out: Output) -> remote_runner_engine::Result<output::Report> {
    let scope = timeout::scope(&cli.command);
    let ctx = Context::new(&cli.global, out, scope)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| Error::io("cannot start the async runtime", &e))?;
    runtime.block_on(timeout::bounded(
        scope,
        ctx.timeout,
        commands::dispatch(&ctx, cli.command),
    ))
}

/// clap's errors: help and version go to stdout with exit 0; usage errors exit 2, as one JSON
/// object on stderr when `--json` is on the command line.
fn usage_error(err: clap::Error) -> u8 {
    if matches!(
        err.kind(),
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion
    ) {
        let _ = err.print();
        return exit::SUCCESS;
    }
    if std::env::args().any(|a| a == "--json") {
        let message = if err.kind() == ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand {
            "a subcommand is missing; add --help to see the commands".to_string()
        } else {
            one_line(&err.render().to_string())
        };
        let out = Output::new(true, ColorMode::Never);
        out.error(&Error::invalid(message));
        return exit::USAGE;
    }
    let _ = err.print();
    exit::USAGE
}

/// clap's multi-line usage error as one line: a line that ends with `:` runs on into the next
/// (`were not provided: --cmd`), other lines are joined with `; `; the usage line is dropped.
fn one_line(rendered: &str) -> String {
    let mut message = String::new();
    for line in rendered
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with("Usage:"))
    {
        if !message.is_empty() {
            message.push_str(if message.ends_with(':') { " " } else { "; " });
        }
        message.push_str(line);
    }
    message.trim_start_matches("error: ").to_string()
}

/// Diagnostics on stderr, off unless `RUST_LOG` asks for them.
fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("off"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .try_init();
}
