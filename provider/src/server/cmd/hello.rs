//! `hello`: the handshake, answered at once with the provider's name and capabilities.

use remote_runner_protocol::lifecycle;
use remote_runner_protocol::{Event, HelloCommand};

use crate::server::shared::Shared;

pub fn handle(shared: &Shared, c: HelloCommand) {
    let config = &shared.config;
    shared.out.send(Event::hello(
        c.request_id,
        config.provider_name.clone(),
        lifecycle::capabilities_with(config.terminal, config.outbound, config.session_tool),
    ));
}
