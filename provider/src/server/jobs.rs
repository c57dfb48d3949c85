//! How a command's engine work is queued on a lane and answered: [`session_job`] on the session
//! lane (cut short by a later `cancel`), [`terminal_job`] on the terminal lane (for a
//! generation the rules admit). The handlers in `cmd/` decide at once and queue the rest here.

use remote_runner_protocol::Event;
use remote_runner_protocol::lifecycle::Refusal;
use tokio_util::sync::CancellationToken;

use super::failure::{self, Failure};
use super::shared::{SessionRef, Shared};
use super::writer::Out;

/// Answer `request_id` with `event` or a correlated failure.
fn reply(out: &Out, request_id: &str, result: Result<Event, Failure>) {
    match result {
        Ok(event) => out.send(event),
        Err(failure) => out.send(failure.event(Some(request_id), None)),
    }
}

/// Queue session work: it runs after what is already queued. A `cancel` received before it
/// runs cuts it short (a `cancelled` failure for its requestId); once running, the work watches
/// the token itself, so that it can hand over anything half made to the cancel.
pub fn session_job<F, Fut>(shared: &Shared, request_id: String, work: F)
where
    F: FnOnce(Shared, CancellationToken) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = Result<Event, Failure>> + Send + 'static,
{
    let token = shared.lock().epoch.clone();
    let s = shared.clone();
    shared.session_lane.push(async move {
        let result = if token.is_cancelled() {
            Err(failure::cut_by_cancel().into())
        } else {
            work(s.clone(), token).await
        };
        // The first screen of a session goes out after its `ready` is queued, never before
        // (the host fails a screen ahead of the state it has applied).
        let ready = matches!(&result, Ok(Event::Ready(_)));
        reply(&s.out, &request_id, result);
        if ready {
            s.screen.kick();
        }
    });
}

/// Queue terminal work for a generation already checked (or answer the refusal now).
pub fn terminal_job<F, Fut>(shared: &Shared, request_id: String, generation: u64, work: F)
where
    F: FnOnce(Shared, SessionRef) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = Result<Event, Failure>> + Send + 'static,
{
    let session = match terminal_session(shared, generation) {
        Ok(session) => session,
        Err(refusal) => {
            return shared
                .out
                .send(failure::refused(Some(&request_id), None, &refusal));
        }
    };
    let s = shared.clone();
    shared.terminal_lane.push(async move {
        let result = work(s.clone(), session).await;
        reply(&s.out, &request_id, result);
    });
}

/// The session terminal input for `generation` goes to, if the rules admit it.
fn terminal_session(shared: &Shared, generation: u64) -> Result<SessionRef, Refusal> {
    let inner = shared.lock();
    inner.lifecycle.admit_terminal(generation)?;
    inner.session.clone().ok_or(Refusal::StaleGeneration {
        asked: generation,
        current: None,
    })
}
