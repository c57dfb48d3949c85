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

use remote_runner_engine::{Error, ErrorCode, Result};

use crate::cli::Command;
use crate::commands::file::FileCommand;
use crate::commands::machine::MachineCommand;
use crate::commands::run::RunCommand;
use crate::commands::session::{CommandCommand, SessionCommand};

/// The `--timeout` help of a command group (`remote-runner session --help`).
pub const HELP_SHORT: &str =
    "Bound the call in seconds, connecting included; each command's --help says what it bounds";

/// The `--timeout` help of `remote-runner --help`: what it bounds for each command. The one
/// place besides docs/cli.md that explains it whole; each command's own help has one line.
pub const HELP: &str = "Bound the call in seconds, connecting included, for every command that \
reaches a machine: the wait of `session exec` and `session command wait` (the command goes on; \
the result says `wait_timed_out`); the command's run time of `run once` (it is stopped); the \
transfer of `file put|get` (it is cancelled); the refresh from the machine of `session show`, \
`session logs` and `session command list` (on expiry the stored records are shown, marked \
stale); the connect of `machine doctor`, `session attach` and `code run|serve`; the wait for a \
Slurm allocation of `session create` on a Slurm machine (a pending job is cancelled); the whole \
call of `session create|send|read|destroy`, `session command show|stop`, `file list` and \
`machine remove --force` (on expiry: error `timeout`). Commands that only read local records \
ignore it. Each command's --help says it in one line; docs/cli.md has the table";

/// Bounds the whole call.
const WHOLE: &str =
    "Bounds the whole call, connecting included; on expiry: error `timeout` (exit 6)";

/// Bounds a listing's refresh from the machine.
const REFRESH: &str =
    "Bounds the refresh from the machine (default 10 s); then stored records, `stale: true`";

/// Bounds a wait for a command.
const WAIT: &str =
    "Bounds the wait; on expiry: `wait_timed_out: true` (exit 6) and the command goes on";

/// Bounds a transfer.
const TRANSFER: &str =
    "Bounds the transfer; on expiry: cancelled, nothing under the final name, error `timeout`";

/// Per command, what `--timeout` bounds, one line: the option's help in that command's `--help`
/// (commands not listed never reach a machine).
const PER_COMMAND: &[(&str, &str)] = &[
    ("machine doctor", "Bounds each connection the check makes"),
    (
        "machine remove",
        "With --force, bounds the whole call (error `timeout`); without it nothing is reached",
    ),
    (
        "session create",
        "Bounds the whole call (error `timeout`); on Slurm, the wait for the allocation",
    ),
    ("session show", REFRESH),
    ("session exec", WAIT),
    ("session command list", REFRESH),
    ("session command show", WHOLE),
    ("session command wait", WAIT),
    ("session command stop", WHOLE),
    (
        "session send",
        "Bounds the wait for the reply (default 30 s); on expiry `timed_out: true` (exit 6)",
    ),
    ("session read", WHOLE),
    ("session logs", REFRESH),
    ("session destroy", WHOLE),
    (
        "session attach",
        "Bounds the SSH connect (ssh -o ConnectTimeout=N), not the attached session",
    ),
    ("file put", TRANSFER),
    ("file get", TRANSFER),
    ("file list", WHOLE),
    (
        "run once",
        "Bounds the command's run time (a Slurm job's from submission); on expiry: stopped, exit 6",
    ),
    (
        "code run",
        "Bounds connecting to the machine; the program's run time is --time-budget",
    ),
    (
        "code serve",
        "Bounds connecting to the machine; each program's run time is --time-budget",
    ),
];

/// Gives `--timeout` its meaning in each command's help: one line per command (from
/// [`PER_COMMAND`]), [`HELP_SHORT`] for a group, and the whole explanation, [`HELP`], only in
/// `remote-runner --help`. A command it does not apply to still accepts it (a script may pass
/// it to every call) but does not show it. `--state-dir` and `--color` are shown only in
/// `remote-runner --help`: each subcommand gets its own hidden copy of those (clap propagates
/// a global option only where none of that id is defined; the value still reaches the top
/// level by id), so a command's help lists what that command is about.
pub fn annotate(cmd: clap::Command) -> clap::Command {
    let copies: Vec<clap::Arg> = cmd
        .get_arguments()
        .filter(|a| ["timeout", "state_dir", "color"].contains(&a.get_id().as_str()))
        .cloned()
        .collect();
    annotate_below(cmd, "", &copies)
}

fn annotate_below(cmd: clap::Command, path: &str, copies: &[clap::Arg]) -> clap::Command {
    let names: Vec<String> = cmd
        .get_subcommands()
        .map(|s| s.get_name().to_owned())
        .collect();
    names.iter().fold(cmd, |cmd, name| {
        let path = format!("{path} {name}").trim_start().to_owned();
        cmd.mut_subcommand(name, |sub| {
            let sub = copies.iter().fold(sub, |sub, option| {
                if option.get_id() != "timeout" {
                    return sub.arg(option.clone().hide(true));
                }
                let text = if sub.has_subcommands() {
                    Some(HELP_SHORT)
                } else {
                    PER_COMMAND
                        .iter()
                        .find(|(p, _)| *p == path)
                        .map(|(_, text)| *text)
                };
                match text {
                    Some(text) => sub.arg(option.clone().help(text).long_help(None::<&str>)),
                    None => sub.arg(option.clone().hide(true)),
                }
            });
            annotate_below(sub, &path, copies)
        })
    })
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
        Command::Mcp(_) | Command::Completions(_) | Command::Man(_) | Command::KeeperDaemon(_) => {
            Scope::Local
        }
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
