//! `remote-runner session ...`: persistent shells on a machine.
//!
//! The argument structs follow the contract in full; each handler is one engine call plus a
//! [`Report`]: `lifecycle` (create, list, show, send, read, logs, destroy), `commands` (exec and
//! `session command ...`), `attach`, with the human renderings in `render` (remote text is made
//! terminal-safe by `output::neutralize`).

mod attach;
mod commands;
mod lifecycle;
mod render;

use clap::{Args, Subcommand, ValueEnum};
use remote_runner_engine::Result;

use crate::context::Context;
use crate::output::Report;

pub const GROUP_EXAMPLES: &str = "\
Examples:
  remote-runner session create --machine local --cwd /tmp --json
  remote-runner session exec --session sess_abc123 --cmd 'pytest -q' --timeout 300 --json
  remote-runner session read --session sess_abc123 --since 1200 --json";

#[derive(Debug, Subcommand)]
pub enum SessionCommand {
    /// Start a persistent shell on a machine
    #[command(
        after_help = "Examples:\n  remote-runner session create --machine local --json\n  remote-runner session create --machine lab-gpu-01 --cwd /home/ely/project --json\n  # a Slurm machine: the shell runs in an allocation\n  remote-runner --timeout 120 session create --machine hpc --slurm-args '--time=30' --json"
    )]
    Create(CreateArgs),
    /// List every session record, oldest first: active, lost and destroyed ones (the STATUS
    /// column says which)
    #[command(
        after_help = "Examples:\n  remote-runner session list\n  remote-runner session list --machine lab-gpu-01 --json"
    )]
    List(ListArgs),
    /// Show a session: last command, exit code, log locations
    #[command(after_help = "Examples:\n  remote-runner session show --session sess_abc123 --json")]
    Show(SessionArg),
    /// Run a command in the session's shell (cd, export, aliases persist)
    #[command(
        after_help = "Examples:\n  remote-runner session exec --session sess_abc123 --cmd 'pytest -q' --timeout 300 --json\n  remote-runner session exec --session sess_abc123 --cwd /home/ely/project/sub --cmd 'make test'\n  remote-runner session exec --session sess_abc123 --cmd 'docker compose up' \\\n      --mode background --json\n  # exit with make's own status\n  remote-runner session exec --session sess_abc123 --cmd 'make' --exit-code\n  remote-runner session exec --session sess_abc123 --cmd - < script.sh        # the text from stdin\n  remote-runner session exec --session sess_abc123 --cmd-file script.sh"
    )]
    Exec(ExecArgs),
    /// Inspect, wait for and stop commands of a session
    #[command(
        subcommand,
        after_help = "Examples:\n  remote-runner session command list --session sess_abc123 --json\n  remote-runner session command wait --session sess_abc123 --command-id cmd_abc123 \\\n      --timeout 20 --json"
    )]
    Command(CommandCommand),
    /// Type into the session's terminal (a running program or the shell) and get the reply
    #[command(
        long_about = "Type text and/or keys into the session's terminal, then wait (bounded by --timeout, default 30 s) for the reply and print it: the new output of the running command (its stdout and stderr), or of the shell when nothing runs. The wait ends when the output matches --wait-for, when it is quiet for --quiet milliseconds, or by default when the program waits for input again (seen from its process state) or its command ends.",
        after_help = "Examples:\n  # a session running python3: type a line, wait for the next prompt\n  remote-runner session send --session sess_abc123 --input 'print(6*7)' --wait-for '>>> $' --json\n  remote-runner session send --session sess_abc123 --input y              # answer a [y/N] prompt\n  remote-runner session send --session sess_abc123 --key C-c              # interrupt\n  remote-runner session send --session sess_abc123 --input 'make' --quiet 2000 --timeout 120"
    )]
    Send(SendArgs),
    /// Read the session transcript from a cursor
    #[command(
        long_about = "Read the session's transcript from a byte offset: what a person at the terminal saw. Each command's text, its output as it comes (also while it runs), and the input typed into it with send, in order; the engine's own plumbing left out. Pass the returned cursor as the next --since to get only what is new. The local copy keeps at most REMOTE_RUNNER_OUTPUT_CAP bytes (64M by default; then \"capped\": true).",
        after_help = "Examples:\n  remote-runner session read --session sess_abc123 --json\n  remote-runner session read --session sess_abc123 --since 1200 --json"
    )]
    Read(ReadArgs),
    /// List the session's command logs in order
    #[command(after_help = "Examples:\n  remote-runner session logs --session sess_abc123 --json")]
    Logs(SessionArg),
    /// Stop the session's shell; records, logs and transcript are kept
    #[command(
        after_help = "Examples:\n  remote-runner session destroy --session sess_abc123 --json\n  remote-runner session destroy --session sess_abc123 --force"
    )]
    Destroy(DestroyArgs),
    /// Open the session in this terminal (detach with Ctrl-b d; it keeps running)
    #[command(after_help = "Examples:\n  remote-runner session attach --session sess_abc123")]
    Attach(SessionArg),
}

#[derive(Debug, Args)]
pub struct CreateArgs {
    /// Machine to run on (`local` is this host)
    #[arg(long, value_name = "MACHINE_ID")]
    pub machine: String,
    /// Working directory [default: the machine's default cwd]
    #[arg(long, value_name = "DIR")]
    pub cwd: Option<String>,
    /// On a Slurm machine: salloc arguments added to the machine's defaults, as one
    /// shell-quoted string, e.g. "--time=30 --gres=gpu:1"; options only: those remote-runner
    /// sets (job name, output, chdir, ...) are refused in any form Slurm accepts (docs/slurm.md)
    #[arg(long, value_name = "ARGS", allow_hyphen_values = true)]
    pub slurm_args: Option<String>,
}

#[derive(Debug, Args)]
pub struct ListArgs {
    /// Only sessions on this machine
    #[arg(long, value_name = "MACHINE_ID")]
    pub machine: Option<String>,
}

#[derive(Debug, Args)]
pub struct SessionArg {
    /// Session id (sess_...; see `remote-runner session list`)
    #[arg(long, value_name = "SESSION_ID")]
    pub session: String,
}

#[derive(Debug, Args)]
pub struct DestroyArgs {
    /// Session id (sess_...)
    #[arg(long, value_name = "SESSION_ID")]
    pub session: String,
    /// When the machine cannot be reached, mark the session destroyed here anyway (its shell
    /// may still run there; the result says so)
    #[arg(long)]
    pub force: bool,
    /// Keep the session's directory on the machine (command files, transcript); by default it
    /// is removed once the shell is gone
    #[arg(long)]
    pub keep_remote_state: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ExecMode {
    /// Return when the command finishes
    Wait,
    /// Return once the command is accepted; follow it with `session command`
    Background,
}

#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("text").required(true).args(["cmd", "cmd_file"])))]
pub struct ExecArgs {
    /// Session id (sess_...; see `remote-runner session list`)
    #[arg(long, value_name = "SESSION_ID")]
    pub session: String,
    /// The shell command line to run; `-` reads it from stdin (for texts of any size)
    #[arg(long, value_name = "COMMAND")]
    pub cmd: Option<String>,
    /// Read the command text from this file (for texts of any size, e.g. a heredoc)
    #[arg(long, value_name = "PATH")]
    pub cmd_file: Option<std::path::PathBuf>,
    /// cd here first (the session's shell stays there afterwards)
    #[arg(long, value_name = "DIR")]
    pub cwd: Option<String>,
    /// `wait`: return when the command finishes, with its exit code and output; `background`:
    /// return once it started, with its command id (follow it with `session command wait`)
    #[arg(long, value_enum, default_value_t = ExecMode::Wait, hide_possible_values = true)]
    pub mode: ExecMode,
    /// With --mode background: give the command a terminal of its own (a tmux window of the
    /// session) as its stdin, to type into with `session send --command-id` (else /dev/null)
    #[arg(long)]
    pub stdin: bool,
    /// Exit with the remote command's own exit status (signal N -> 128+N) instead of 1 on failure
    #[arg(long)]
    pub exit_code: bool,
}

#[derive(Debug, Subcommand)]
pub enum CommandCommand {
    /// List the session's commands
    #[command(
        after_help = "Examples:\n  remote-runner session command list --session sess_abc123 --json"
    )]
    List(SessionArg),
    /// Status, output excerpts and exit code of one command
    #[command(
        visible_alias = "result",
        after_help = "Examples:\n  remote-runner session command show --session sess_abc123 --command-id cmd_abc123 --json\n  remote-runner session command result --session sess_abc123 --command-id cmd_abc123 --json"
    )]
    Show(CommandRef),
    /// Wait for a command to finish, at most --timeout seconds (the command is not killed)
    #[command(
        after_help = "Examples:\n  remote-runner session command wait --session sess_abc123 --command-id cmd_abc123 \\\n      --timeout 20 --json"
    )]
    Wait(CommandRef),
    /// Stop a command (Ctrl-C, then TERM, then KILL); repeating it is safe
    #[command(
        after_help = "Examples:\n  remote-runner session command stop --session sess_abc123 --command-id cmd_abc123 --json"
    )]
    Stop(CommandRef),
}

#[derive(Debug, Args)]
pub struct CommandRef {
    /// Session id (sess_...; see `remote-runner session list`)
    #[arg(long, value_name = "SESSION_ID")]
    pub session: String,
    /// Command id (cmd_...)
    #[arg(long, value_name = "COMMAND_ID")]
    pub command_id: String,
}

#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("what").required(true).multiple(true).args(["input", "key"])))]
pub struct SendArgs {
    /// Session id (sess_...; see `remote-runner session list`)
    #[arg(long, value_name = "SESSION_ID")]
    pub session: String,
    /// Text to type into the terminal (the running program or the shell), as is
    #[arg(long, value_name = "TEXT")]
    pub input: Option<String>,
    /// A key to press after the text, by its tmux name: C-c, C-d, Escape, Enter, Tab, Up,
    /// Down, BSpace, PageDown, F1..F12, or a letter with C-, M-, S- (repeat for several)
    #[arg(long = "key", value_name = "NAME")]
    pub key: Vec<String>,
    /// Do not press Enter after the text (Enter follows --input unless --key is given)
    #[arg(long)]
    pub no_enter: bool,
    /// Wait until the new output matches this regular expression (e.g. '>>> $')
    #[arg(long, value_name = "REGEX")]
    pub wait_for: Option<String>,
    /// Wait until no new output came for this many milliseconds
    #[arg(long, value_name = "MS", value_parser = clap::value_parser!(u64).range(1..))]
    pub quiet: Option<u64>,
    /// Type into this background command's own terminal (started with --stdin)
    #[arg(long, value_name = "COMMAND_ID")]
    pub command_id: Option<String>,
}

#[derive(Debug, Args)]
pub struct ReadArgs {
    /// Session id (sess_...; see `remote-runner session list`)
    #[arg(long, value_name = "SESSION_ID")]
    pub session: String,
    /// Transcript byte offset to read from (a cursor from an earlier read)
    #[arg(long, value_name = "OFFSET")]
    pub since: Option<u64>,
}

pub async fn run(ctx: &Context, command: SessionCommand) -> Result<Report> {
    match command {
        SessionCommand::Create(args) => lifecycle::create(ctx, args).await,
        SessionCommand::List(args) => lifecycle::list(ctx, args),
        SessionCommand::Show(args) => lifecycle::show(ctx, args).await,
        SessionCommand::Exec(args) => commands::exec(ctx, args).await,
        SessionCommand::Command(c) => match c {
            CommandCommand::List(args) => commands::list(ctx, args).await,
            CommandCommand::Show(args) => commands::show(ctx, args).await,
            CommandCommand::Wait(args) => commands::wait(ctx, args).await,
            CommandCommand::Stop(args) => commands::stop(ctx, args).await,
        },
        SessionCommand::Send(args) => lifecycle::send(ctx, args).await,
        SessionCommand::Read(args) => lifecycle::read(ctx, args).await,
        SessionCommand::Logs(args) => lifecycle::logs(ctx, args).await,
        SessionCommand::Destroy(args) => lifecycle::destroy(ctx, args).await,
        SessionCommand::Attach(args) => attach::attach(ctx, args),
    }
}
