//! The clap definition of the whole contract: global options and the command groups.
//! Each group's arguments live beside its handlers in `commands/`.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

use crate::commands::{code, file, keeper, machine, meta, run, session};
use crate::output::ColorMode;

const EXAMPLES: &str = "\
Examples:
  remote-runner machine list
  remote-runner machine add lab-gpu-01 --host 192.0.2.10 --user ely --default-cwd /home/ely
  remote-runner machine doctor local --json
  remote-runner completions bash > ~/.local/share/bash-completion/completions/remote-runner";

/// Run work on remote Linux machines over SSH and tmux.
///
/// Machines are where work runs (the built-in `local` machine is this host). Sessions are
/// persistent shells on a machine; commands run in them and keep their output and exit code.
/// `--json` gives one JSON object on stdout for every command; errors go to stderr.
#[derive(Debug, Parser)]
#[command(
    name = "remote-runner",
    version,
    propagate_version = true,
    after_help = EXAMPLES,
    max_term_width = 100
)]
pub struct Cli {
    #[command(flatten)]
    pub global: GlobalArgs,
    #[command(subcommand)]
    pub command: Command,
}

/// Options every command accepts, before or after the subcommand.
#[derive(Debug, Args)]
pub struct GlobalArgs {
    /// Print one JSON object on stdout; errors become one JSON object on stderr
    #[arg(long, global = true)]
    pub json: bool,

    #[arg(long, global = true, value_name = "SECONDS", value_parser = clap::value_parser!(u64).range(1..), help = crate::timeout::HELP_SHORT, long_help = crate::timeout::HELP)]
    pub timeout: Option<u64>,

    /// Where records, logs and credentials live [default: ~/.remote-runner]
    #[arg(
        long,
        global = true,
        value_name = "PATH",
        env = "REMOTE_RUNNER_STATE_DIR"
    )]
    pub state_dir: Option<PathBuf>,

    /// When to colour human output (NO_COLOR is honoured in `auto`)
    #[arg(long, global = true, value_enum, value_name = "WHEN", default_value_t = ColorMode::Auto)]
    pub color: ColorMode,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Add, inspect, check and remove machines
    #[command(subcommand, after_help = machine::GROUP_EXAMPLES)]
    Machine(machine::MachineCommand),
    /// Persistent shells on a machine: create, exec, send, read, destroy
    #[command(subcommand, after_help = session::GROUP_EXAMPLES)]
    Session(session::SessionCommand),
    /// Move files between this host and a session's machine
    #[command(subcommand, after_help = file::GROUP_EXAMPLES)]
    File(file::FileCommand),
    /// One closed loop: session, inputs, command, artifacts, manifest
    #[command(subcommand, after_help = run::GROUP_EXAMPLES)]
    Run(run::RunCommand),
    /// Run programs (JavaScript, Python) as fresh processes on a machine, with host bindings
    #[command(subcommand, after_help = code::GROUP_EXAMPLES)]
    Code(code::CodeCommand),
    /// Serve the engine to an MCP client (Claude Code, Cursor, ...) on stdin/stdout
    #[command(after_help = crate::mcp::EXAMPLES)]
    Mcp(crate::mcp::McpArgs),
    /// Print a shell completion script
    #[command(after_help = meta::COMPLETIONS_EXAMPLES)]
    Completions(meta::CompletionsArgs),
    /// Write man pages generated from these definitions
    #[command(hide = true, after_help = meta::MAN_EXAMPLES)]
    Man(meta::ManArgs),
    /// Run a machine's connection keeper (started by the CLI itself; see `machine disconnect`)
    #[command(name = "keeper-daemon", hide = true)]
    KeeperDaemon(keeper::KeeperArgs),
}
