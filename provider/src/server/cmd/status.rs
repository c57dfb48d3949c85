//! `status`: answered at once with the status and state in force.

use remote_runner_protocol::RequestCommand;

use crate::server::shared::Shared;

pub fn handle(shared: &Shared, c: RequestCommand) {
    shared.out.send(shared.status_event(c.request_id));
}
