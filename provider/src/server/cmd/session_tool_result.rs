//! `session_tool_result`: the host's result for a chat call's `session_tool`, handed to the
//! call waiting for it. Never answered (the host allows no reply); a result for another turn
//! or generation, or for a capability turned off, finds no call and is dropped.

use remote_runner_protocol::SessionToolResultCommand;

use crate::chat::Settlement;
use crate::server::shared::Shared;

pub fn handle(shared: &Shared, c: SessionToolResultCommand) {
    let settled = shared.settlements.settle(
        &c.operation_id,
        &c.turn_id,
        c.generation,
        Settlement::Tool(c.result),
    );
    if let Err(why) = settled {
        tracing::warn!("dropping a result the host wrote back: {why}");
    }
}
