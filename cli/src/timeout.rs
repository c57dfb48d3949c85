//! What `--timeout` bounds, command by command (one table, so the help, the docs and the code
//! agree). Every command that reaches a machine is bounded, connecting included:
//!
//! - [`Scope::Own`]: the command gives the limit its own meaning (the wait of `session exec` and
//!   `command wait`, the run time of `run once`, the refresh of a listing, the transfer of
//!   `file put|get`, the connect of `machine doctor` and `session attach`), and connecting is
//!   bounded by the same number of seconds.
//! - [`Scope::Whole`]: the whole call is bounded; when the limit runs out the call ends with
//!   the `timeout` error (connecting gets a little longer, so the call's own bound is the one
//!   that speaks).
//! - [`Scope::WholeInCommand`]: as `Whole`, applied by the command itself (`session create`, so
//!   that a pending Slurm allocation is cancelled when the wait for it is given up).
//! - [`Scope::Local`]: the command never reaches a machine; there is nothing to bound.

use std::future::Future;
use std::time::Duration;

use remote_runner_provider::{Error, ErrorCode, Result};

use crate::cli::Command;
use crate::commands::file::FileCommand;
use crate::commands::machine::MachineCommand;
use crate::commands::run::RunCommand;
use crate::commands::session::{CommandCommand, SessionCommand};

/// The `--timeout` line of `-h`.
pub const HELP_SHORT: &str =
    "Bound the call in seconds, connecting included (--help says what it bounds per command)";

/// The `--timeout` help: what it bounds for each command.
pub const HELP: &str = "Bound the call in seconds, connecting included, for every command that \
reaches a machine: the wait of `session exec` and `session command wait` (the command goes on; \
the result says `wait_timed_out`); the command's run time of `run once` (it is stopped); the \
transfer of `file put|get` (it is cancelled); the refresh from the machine of `session show`, \
`session logs` and `session command list` (on expiry the stored records are shown, marked \
stale); the connect of `machine doctor` and `session attach`; the wait for a Slurm allocation of `session create` on a Slurm machine (a pending job is \
cancelled); the whole call of `session \
create|send|read|destroy`, `session command show|stop`, `file list` and `machine remove \
--force` (on expiry: error `timeout`). Commands that only read local records ignore it";

/// Per command, what `--timeout` bounds: shown at the top of that command's `--help`.
const PER_COMMAND: &[(&str, &str)] = &[
    ("machine doctor", "bounds each connection the check makes"),
    (
        "machine remove",
        "bounds the whole call when --force is given (destroying the sessions included); error `timeout` when it runs out. Without --force nothing reaches the machine",
    ),
    (
        "session create",
        "bounds the whole call, connecting included; error `timeout` when it runs out. On a Slurm machine it bounds the wait for the allocation: a job still pending then is cancelled (error `slurm_allocation_timeout`, exit 6), and starting the shell in a granted one gets up to 60 s more",
    ),
    (
        "session show",
        "bounds the refresh of running commands from the machine (default 10 s); when it runs out the stored record is shown with `stale: true` and the reason",
    ),
    (
        "session exec",
        "bounds the wait, connecting included; when it runs out the record says `running` with `wait_timed_out: true` (exit 6) and the command goes on",
    ),
    (
        "session command list",
        "bounds the refresh of running commands from the machine (default 10 s); when it runs out the stored records are shown with `stale: true` and the reason",
    ),
    (
        "session command show",
        "bounds the whole call, connecting included; error `timeout` when it runs out",
    ),
    (
        "session command wait",
        "bounds the wait, connecting included; when it runs out the record says `wait_timed_out: true` (exit 6) and the command goes on",
    ),
    (
        "session command stop",
        "bounds the whole call, connecting included; error `timeout` when it runs out",
    ),
    (
        "session send",
        "bounds the wait for the reply (default 30 s); when it runs out the result says `timed_out: true` with the output so far (exit 6) and the program goes on",
    ),
    (
        "session read",
        "bounds the whole call, connecting included; error `timeout` when it runs out",
    ),
    (
        "session logs",
        "bounds the refresh of running commands from the machine (default 10 s); when it runs out the stored records are shown with `stale: true` and the reason",
    ),
    (
        "session destroy",
        "bounds the whole call, connecting included; error `timeout` when it runs out",
    ),
    (
        "session attach",
        "bounds the SSH connect (ssh -o ConnectTimeout=N); the attached session lasts as long as you keep it",
    ),
    (
        "file put",
        "bounds the transfer, connecting included; when it runs out the transfer is cancelled (nothing under the final name) and the error is `timeout`",
    ),
    (
        "file get",
        "bounds the transfer, connecting included; when it runs out the transfer is cancelled (nothing under the final name) and the error is `timeout`",
    ),
    (
        "file list",
        "bounds the whole call, connecting included; error `timeout` when it runs out",
    ),
    (
        "run once",
        "bounds the command's run time, connecting included; when it runs out the command is stopped and the run is `timed_out` (exit 6). On a Slurm machine it bounds the batch job from its submission (queue wait included); the job is then cancelled with scancel",
    ),
];

/// Put each command's [`PER_COMMAND`] line at the top of its `--help` (after `-h`'s examples).
pub fn annotate(cmd: clap::Command) -> clap::Command {
    PER_COMMAND.iter().fold(cmd, |cmd, (path, text)| {
        let names: Vec<&str> = path.split(' ').collect();
        annotate_at(cmd, &names, text)
    })
}

fn annotate_at(cmd: clap::Command, path: &[&str], text: &str) -> clap::Command {
    match path {
        [] => {
            let examples = cmd
                .get_after_help()
                .map(ToString::to_string)
                .unwrap_or_default();
            cmd.after_long_help(format!("--timeout SECONDS: {text}.\n\n{examples}"))
        }
        [name, rest @ ..] => cmd.mut_subcommand(*name, |sub| annotate_at(sub, rest, text)),
    }
}

/// How `--timeout` applies to one command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    Own,
    Whole,
    /// Like [`Scope::Whole`], but the command applies the bound itself (`session create`: on a
    /// Slurm machine a pending allocation must be cancelled, not abandoned with a dropped call).
    WholeInCommand,
    Local,
}

/// Extra time connecting gets under [`Scope::Whole`], so the call's bound fires first.
const CONNECT_SLACK: Duration = Duration::from_secs(1);

/// Without `--timeout`, how long a listing waits for the machine before showing stored records.
pub const DEFAULT_REFRESH: Duration = Duration::from_secs(10);

pub fn scope(command: &Command) -> Scope {
    match command {
        Command::Machine(m) => match m {
            MachineCommand::Doctor(_) => Scope::Own,
            MachineCommand::Remove(args) if args.force => Scope::Whole,
            _ => Scope::Local,
        },
        Command::Session(s) => match s {
            SessionCommand::List(_) => Scope::Local,
            SessionCommand::Create(_) => Scope::WholeInCommand,
            SessionCommand::Exec(_)
            | SessionCommand::Show(_)
            | SessionCommand::Logs(_)
            | SessionCommand::Send(_)
            | SessionCommand::Attach(_) => Scope::Own,
            SessionCommand::Command(CommandCommand::List(_) | CommandCommand::Wait(_)) => {
                Scope::Own
            }
            _ => Scope::Whole,
        },
        Command::File(f) => match f {
            FileCommand::Put(_) | FileCommand::Get(_) => Scope::Own,
            FileCommand::List(_) => Scope::Whole,
            FileCommand::History(_) => Scope::Local,
        },
        Command::Run(r) => match r {
            RunCommand::Once(_) => Scope::Own,
            RunCommand::List | RunCommand::Show(_) => Scope::Local,
        },
        Command::Code(_) => Scope::Own,
        Command::Completions(_) | Command::Man(_) | Command::KeeperDaemon(_) => Scope::Local,
    }
}

/// The SSH connect bound for a command under `--timeout`.
pub fn connect_bound(scope: Scope, timeout: Option<Duration>) -> Option<Duration> {
    match (scope, timeout) {
        (Scope::Whole | Scope::WholeInCommand, Some(t)) => Some(t + CONNECT_SLACK),
        (_, t) => t,
    }
}

/// Run `call`, bounded by `timeout` when the command's scope is [`Scope::Whole`] (a command of
/// [`Scope::WholeInCommand`] calls this itself with `Scope::Whole`).
pub async fn bounded<T>(
    scope: Scope,
    timeout: Option<Duration>,
    call: impl Future<Output = Result<T>>,
) -> Result<T> {
    match (scope, timeout) {
        (Scope::Whole, Some(limit)) => match tokio::time::timeout(limit, call).await {
            Ok(result) => result,
            Err(_) => Err(Error::new(
                ErrorCode::Timeout,
                format!(
                    "the call did not finish within {} s (--timeout); the machine is slow or not \
                     answering: check it with `remote-runner machine doctor MACHINE_ID`, or \
                     retry with a larger --timeout",
                    limit.as_secs()
                ),
            )),
        },
        _ => call.await,
    }
}
