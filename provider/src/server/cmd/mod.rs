//! The protocol's commands, one file each (the table is [`run`]). The protocol crate parses a
//! line into a typed `Command` (its `type` names the variant) and checks it; each file's
//! `handle` decides on its command without waiting for the engine: it answers at once, refuses
//! by the protocol's rules, or queues the engine work on a lane (`super::jobs`). The work itself
//! is in the same file; what several commands share is in `super::session` and `super::turn`.

mod cancel;
mod detach;
mod hello;
mod outbound_message_result;
mod reattach;
mod resume;
mod session_tool_result;
mod start;
mod status;
mod terminal_input;
mod terminal_resize;
mod turn;

use remote_runner_protocol::Command;

use super::shared::Shared;

/// Hand `command` to its file's handler.
pub fn run(shared: &Shared, command: Command) {
    match command {
        Command::Hello(c) => hello::handle(shared, c),
        Command::Start(c) => start::handle(shared, c),
        Command::Resume(c) => resume::handle(shared, c),
        Command::Turn(c) => turn::handle(shared, c),
        Command::Cancel(c) => cancel::handle(shared, c),
        Command::Detach(c) => detach::handle(shared, c),
        Command::Reattach(c) => reattach::handle(shared, c),
        Command::Status(c) => status::handle(shared, c),
        Command::TerminalInput(c) => terminal_input::handle(shared, c),
        Command::TerminalResize(c) => terminal_resize::handle(shared, c),
        Command::OutboundMessageResult(c) => outbound_message_result::handle(shared, c),
        Command::SessionToolResult(c) => session_tool_result::handle(shared, c),
    }
}
