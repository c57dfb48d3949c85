//! `detach`: wait for the running turn to settle, keep the remote session, answer
//! `status: detached`.

use remote_runner_protocol::{Event, RequestCommand, SessionStatus};
use tokio_util::sync::CancellationToken;

use crate::server::failure::{self, Failure};
use crate::server::jobs::session_job;
use crate::server::shared::Shared;

pub fn handle(shared: &Shared, c: RequestCommand) {
    session_job(shared, c.request_id.clone(), |s, token| async move {
        detach(&s, c, &token).await
    });
}

async fn detach(
    shared: &Shared,
    c: RequestCommand,
    token: &CancellationToken,
) -> Result<Event, Failure> {
    let done = shared.lock().turn.as_ref().map(|t| t.done.clone());
    if let Some(mut done) = done {
        // Let the current turn settle; the remote session stays. A cancel ends the wait.
        tokio::select! {
            biased;
            _ = token.cancelled() => return Err(failure::cut_by_cancel().into()),
            _ = done.wait_for(|d| *d) => {}
        }
    }
    let state = {
        let mut inner = shared.lock();
        inner.lifecycle.detached();
        inner.state.clone()
    };
    Ok(Event::status(c.request_id, SessionStatus::Detached, state))
}
