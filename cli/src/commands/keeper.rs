//! `remote-runner keeper-daemon` (hidden): the connection keeper of one machine, started by the
//! CLI itself in the background. People use `machine disconnect`, not this.

use std::time::Duration;

use clap::Args;
use remote_runner_engine::Result;
use remote_runner_engine::engine::serve_keeper;
use serde_json::json;

use crate::context::Context;
use crate::output::Report;

#[derive(Debug, Args)]
pub struct KeeperArgs {
    /// The machine to keep a connection to
    #[arg(long, value_name = "ID")]
    pub machine: String,
    /// End after this many seconds without a request
    #[arg(long, value_name = "SECONDS", default_value_t = 600, value_parser = clap::value_parser!(u64).range(1..))]
    pub idle_secs: u64,
}

pub async fn run(ctx: &Context, args: KeeperArgs) -> Result<Report> {
    serve_keeper(
        &ctx.state_dir,
        &args.machine,
        Duration::from_secs(args.idle_secs),
    )
    .await?;
    Ok(Report::new(
        json!({"machine_id": args.machine, "ended": true}),
    ))
}
