//! One module per command group; [`dispatch`] routes a parsed command to its handler.

pub mod code;
pub mod file;
pub mod keeper;
pub mod machine;
pub mod meta;
pub mod run;
pub mod session;

use remote_runner_engine::Result;

use crate::cli::Command;
use crate::context::Context;
use crate::output::Report;

pub async fn dispatch(ctx: &Context, command: Command) -> Result<Report> {
    match command {
        Command::Machine(c) => machine::run(ctx, c).await,
        Command::Session(c) => session::run(ctx, c).await,
        Command::File(c) => file::run(ctx, c).await,
        Command::Run(c) => run::run(ctx, c).await,
        Command::Code(c) => code::run(ctx, c).await,
        Command::Mcp(args) => crate::mcp::run(ctx, args).await,
        Command::Completions(args) => meta::completions(&args),
        Command::Man(args) => meta::man(&args),
        Command::KeeperDaemon(args) => keeper::run(ctx, args).await,
    }
}
