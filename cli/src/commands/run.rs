//! `remote-runner run ...`: session + inputs + command + artifacts + manifest in one call.
//!
//! Arguments follow the contract; the run engine (issue 7) is not built yet, so each handler
//! returns `not_implemented`.

use clap::{Args, Subcommand};
use remote_runner_provider::{Error, Result};

use crate::commands::not_built;
use crate::context::Context;
use crate::output::Report;

const PART: &str = "run once, issue 7";

pub const GROUP_EXAMPLES: &str = "\
Examples:
  remote-runner run once --machine local --cwd /tmp --cmd 'echo hi > out.txt' --artifact /tmp/out.txt=./out.txt --json
  remote-runner run list --json";

#[derive(Debug, Subcommand)]
pub enum RunCommand {
    /// Create a session, upload inputs, run, download artifacts, save a manifest
    #[command(
        after_help = "Examples:\n  remote-runner run once --machine lab-gpu-01 --cwd /home/ely/project \\\n      --input ./input.json=/home/ely/project/input.json \\\n      --cmd 'python train.py --input input.json --output output.txt' \\\n      --artifact /home/ely/project/output.txt=./output.txt --json"
    )]
    Once(OnceArgs),
    /// List recorded runs
    #[command(after_help = "Examples:\n  remote-runner run list --json")]
    List,
    /// Show a run manifest
    #[command(after_help = "Examples:\n  remote-runner run show run_abc123 --json")]
    Show(ShowArgs),
}

/// `A=B`: the first `=` splits (so Windows paths with `:` still work).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PathPair {
    pub from: String,
    pub to: String,
}

fn parse_pair(s: &str) -> Result<PathPair, Error> {
    match s.split_once('=') {
        Some((from, to)) if !from.is_empty() && !to.is_empty() => Ok(PathPair {
            from: from.to_string(),
            to: to.to_string(),
        }),
        _ => Err(Error::invalid(format!(
            "{s:?} is not SOURCE=DESTINATION; write both paths joined by '='"
        ))),
    }
}

#[derive(Debug, Args)]
pub struct OnceArgs {
    #[arg(long, value_name = "MACHINE_ID")]
    pub machine: String,
    /// Working directory [default: the machine's default cwd]
    #[arg(long, value_name = "DIR")]
    pub cwd: Option<String>,
    /// Upload LOCAL to REMOTE before the command (repeat)
    #[arg(long = "input", value_name = "LOCAL=REMOTE", value_parser = parse_pair)]
    pub inputs: Vec<PathPair>,
    /// The command line to run
    #[arg(long, value_name = "COMMAND")]
    pub cmd: String,
    /// Download REMOTE to LOCAL after the command (repeat)
    #[arg(long = "artifact", value_name = "REMOTE=LOCAL", value_parser = parse_pair)]
    pub artifacts: Vec<PathPair>,
    /// Leave the created session running
    #[arg(long)]
    pub keep_session: bool,
    /// Exit with the command's own exit status instead of 1 when it fails
    #[arg(long)]
    pub exit_code: bool,
}

#[derive(Debug, Args)]
pub struct ShowArgs {
    #[arg(value_name = "RUN_ID")]
    pub run_id: String,
}

pub async fn run(ctx: &Context, command: RunCommand) -> Result<Report> {
    match command {
        RunCommand::Once(args) => once(ctx, args).await,
        RunCommand::List => list(ctx).await,
        RunCommand::Show(args) => show(ctx, args).await,
    }
}

// One handler per command; each becomes one engine call plus a Report when issue 7 lands
// (`run once` then sets its exit code with `exit::for_remote_status(.., args.exit_code)`).

async fn once(_ctx: &Context, _args: OnceArgs) -> Result<Report> {
    Err(not_built("run once", PART))
}

async fn list(_ctx: &Context) -> Result<Report> {
    Err(not_built("run list", PART))
}

async fn show(_ctx: &Context, _args: ShowArgs) -> Result<Report> {
    Err(not_built("run show", PART))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pairs_split_on_the_first_equals_sign() {
        let p = parse_pair("./in.json=C:/x/in.json").unwrap();
        assert_eq!(
            (p.from.as_str(), p.to.as_str()),
            ("./in.json", "C:/x/in.json")
        );
        assert!(parse_pair("no-delimiter").is_err());
        assert!(parse_pair("=x").is_err());
        assert!(parse_pair("x=").is_err());
    }
}
