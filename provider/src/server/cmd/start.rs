//! `start`: a new remote session at generation 1, answered with `ready`.

use remote_runner_protocol::{Event, StartCommand};
use tokio_util::sync::CancellationToken;

use crate::server::failure::{self, Failure};
use crate::server::jobs::session_job;
use crate::server::session;
use crate::server::shared::Shared;

pub fn handle(shared: &Shared, c: StartCommand) {
    session_job(shared, c.request_id.clone(), |s, token| async move {
        start(&s, c, &token).await
    });
}

async fn start(
    shared: &Shared,
    c: StartCommand,
    token: &CancellationToken,
) -> Result<Event, Failure> {
    {
        let mut inner = shared.lock();
        if inner.session.is_some() || inner.owner.is_some() {
            return Err(failure::second_start().into());
        }
        inner.owner = Some(c.session_id.clone());
    }
    let (session, state) =
        session::create_unless_cancelled(shared, &c.session_id, &c.cwd, 1, None, token).await?;
    session::install(shared, session, state.clone(), false);
    Ok(Event::ready(c.request_id, state))
}
