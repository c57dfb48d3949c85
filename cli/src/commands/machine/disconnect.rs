//! `remote-runner machine disconnect`: end connection keepers now.

use clap::Args;
use remote_runner_engine::engine::machines::{Disconnected, disconnect_keepers};
use remote_runner_engine::{Error, Result};
use serde_json::json;

use crate::context::Context;
use crate::output::{Block, Cell, Report, Tone};

pub const EXAMPLES: &str = "\
The first command that reaches an SSH machine starts its connection keeper in the background;
later commands reuse its connection. A keeper ends after REMOTE_RUNNER_KEEPER_IDLE seconds
without requests (default 600), or now with this command. REMOTE_RUNNER_KEEPER=off: no keepers.

Examples:
  remote-runner machine disconnect --machine lab-gpu-01
  remote-runner machine disconnect --all --json";

#[derive(Debug, Args)]
pub struct DisconnectArgs {
    /// The machine whose connection keeper to end
    #[arg(
        long,
        value_name = "ID",
        required_unless_present = "all",
        conflicts_with = "all"
    )]
    pub machine: Option<String>,
    /// End the connection keepers of every machine
    #[arg(long)]
    pub all: bool,
}

pub async fn run(ctx: &Context, args: DisconnectArgs) -> Result<Report> {
    let ended: Vec<Disconnected> = match (&args.machine, args.all) {
        (_, true) => disconnect_keepers(&ctx.state_dir, None).await,
        (Some(id), false) => disconnect_keepers(&ctx.state_dir, Some(id)).await,
        (None, false) => {
            return Err(Error::invalid(
                "say which keeper to end: --machine ID, or --all",
            ));
        }
    };
    let json = json!({
        "disconnected": ended
            .iter()
            .map(|d| json!({"machine_id": d.machine_id, "pid": d.pid, "requests": d.requests}))
            .collect::<Vec<_>>(),
    });
    let line = if ended.is_empty() {
        Cell::plain("No connection keeper was running.")
    } else {
        let ids: Vec<&str> = ended.iter().map(|d| d.machine_id.as_str()).collect();
        Cell::new(
            format!("Ended the connection keeper of {}.", ids.join(", ")),
            Tone::Good,
        )
    };
    Ok(Report::new(json).human(vec![Block::Line(line)]))
}
