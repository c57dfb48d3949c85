//! `reattach`: undo a detach; the session is checked (a dead one is rebuilt by the next turn),
//! answered with `status: ready`.

use remote_runner_protocol::{Event, RequestCommand, SessionStatus};

use crate::server::failure::Failure;
use crate::server::jobs::session_job;
use crate::server::session;
use crate::server::shared::Shared;

pub fn handle(shared: &Shared, c: RequestCommand) {
    session_job(shared, c.request_id.clone(), |s, _| async move {
        reattach(&s, &c).await
    });
}

async fn reattach(shared: &Shared, c: &RequestCommand) -> Result<Event, Failure> {
    let (admitted, current) = {
        let inner = shared.lock();
        (inner.lifecycle.admit_reattach(), inner.session.clone())
    };
    admitted?;
    if let Some(current) = &current
        && !session::alive(shared, current).await
    {
        shared.lock().session_lost = true;
    }
    let state = {
        let mut inner = shared.lock();
        inner.lifecycle.reattached();
        inner.state.clone()
    };
    shared.screen.kick();
    Ok(Event::status(
        c.request_id.clone(),
        SessionStatus::Ready,
        state,
    ))
}
