//! `remote-runner file ...`: transfers through SFTP (or the local filesystem for `local`).
//!
//! Arguments follow the contract; the transfer engine (issue 7) is not built yet, so each
//! handler returns `not_implemented`.

use clap::{Args, Subcommand};
use remote_runner_provider::Result;

use crate::commands::not_built;
use crate::context::Context;
use crate::output::Report;

const PART: &str = "file transfer, issue 7";

pub const GROUP_EXAMPLES: &str = "\
Examples:
  remote-runner file put --session sess_abc123 --local ./input.txt --remote /home/ely/project/input.txt --json
  remote-runner file get --session sess_abc123 --remote /home/ely/project/output.txt --local ./output.txt --json";

#[derive(Debug, Subcommand)]
pub enum FileCommand {
    /// Upload a local file or directory
    #[command(
        after_help = "Examples:\n  remote-runner file put --session sess_abc123 --local ./input.txt --remote /home/ely/project/input.txt --json"
    )]
    Put(TransferArgs),
    /// Download a remote file or directory
    #[command(
        after_help = "Examples:\n  remote-runner file get --session sess_abc123 --remote /home/ely/project/output.txt --local ./output.txt --json"
    )]
    Get(TransferArgs),
    /// List remote file metadata
    #[command(
        after_help = "Examples:\n  remote-runner file list --session sess_abc123 --remote /home/ely/project --json"
    )]
    List(ListArgs),
    /// Show recorded transfers
    #[command(
        after_help = "Examples:\n  remote-runner file history --json\n  remote-runner file history --session sess_abc123 --json"
    )]
    History(HistoryArgs),
}

#[derive(Debug, Args)]
pub struct TransferArgs {
    #[arg(long, value_name = "SESSION_ID")]
    pub session: String,
    /// Path on this host
    #[arg(long, value_name = "PATH")]
    pub local: String,
    /// Path on the machine (as commands see it; path maps are applied)
    #[arg(long, value_name = "PATH")]
    pub remote: String,
}

#[derive(Debug, Args)]
pub struct ListArgs {
    #[arg(long, value_name = "SESSION_ID")]
    pub session: String,
    #[arg(long, value_name = "PATH")]
    pub remote: String,
}

#[derive(Debug, Args)]
pub struct HistoryArgs {
    /// Only transfers of this session
    #[arg(long, value_name = "SESSION_ID")]
    pub session: Option<String>,
}

pub async fn run(ctx: &Context, command: FileCommand) -> Result<Report> {
    match command {
        FileCommand::Put(args) => put(ctx, args).await,
        FileCommand::Get(args) => get(ctx, args).await,
        FileCommand::List(args) => list(ctx, args).await,
        FileCommand::History(args) => history(ctx, args).await,
    }
}

// One handler per command; each becomes one engine call plus a Report when issue 7 lands.

async fn put(_ctx: &Context, _args: TransferArgs) -> Result<Report> {
    Err(not_built("file put", PART))
}

async fn get(_ctx: &Context, _args: TransferArgs) -> Result<Report> {
    Err(not_built("file get", PART))
}

async fn list(_ctx: &Context, _args: ListArgs) -> Result<Report> {
    Err(not_built("file list", PART))
}

async fn history(_ctx: &Context, _args: HistoryArgs) -> Result<Report> {
    Err(not_built("file history", PART))
}
