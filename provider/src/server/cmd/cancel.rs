//! `cancel`: cut short everything queued or in flight on the session lane now, then queue the
//! close itself: stop the turn's command, destroy the session (and one a cut-short create was
//! making), answer `status: closed`.

use std::time::Duration;

use remote_runner_protocol::{Event, RequestCommand, SessionStatus, State};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::server::failure;
use crate::server::shared::{SessionRef, Shared};
use remote_runner_engine::error::Result;

/// How long `cancel` waits for a turn task, or a session create it cut short, before answering
/// anyway (below the host's default 20 s operation timeout).
const CANCEL_GRACE: Duration = Duration::from_secs(10);

pub fn handle(shared: &Shared, c: RequestCommand) {
    {
        let mut inner = shared.lock();
        inner.lifecycle.cancel_received();
        let old = std::mem::replace(&mut inner.epoch, CancellationToken::new());
        old.cancel();
    }
    let s = shared.clone();
    shared.session_lane.push(async move { cancel(&s, c).await });
}

async fn cancel(shared: &Shared, c: RequestCommand) {
    let (turn, orphan) = {
        let mut inner = shared.lock();
        let turn = inner.turn.as_ref().map(|t| {
            (
                t.turn_id.clone(),
                t.session_id.clone(),
                t.command_id.clone(),
                t.cancel.clone(),
                t.done.clone(),
            )
        });
        (turn, inner.orphan.take())
    };
    if let Some((turn_id, session_id, command_id, token, mut done)) = turn {
        token.cancel();
        if let Err(e) = shared.engine.command_stop(&session_id, &command_id).await {
            tracing::warn!("stopping the turn's command failed: {e}");
        }
        let _ = tokio::time::timeout(CANCEL_GRACE, done.wait_for(|d| *d)).await;
        shared.lock().turn = None;
        shared.out.send(failure::turn_cancelled(turn_id));
    }
    let mut doomed: Vec<SessionRef> = shared.lock().session.clone().into_iter().collect();
    if let Some(orphan) = orphan {
        doomed.extend(settle_orphan(orphan).await);
    }
    for session in doomed {
        if let Err(e) = shared.engine.destroy(&session.session_id).await {
            tracing::warn!(session = %session.session_id, "destroying the session failed: {e}");
        }
    }
    shared.screen.stop();
    let state = {
        let mut inner = shared.lock();
        inner.lifecycle.closed();
        inner.turn = None;
        inner.state.clone()
    };
    shared
        .out
        .send(Event::status(c.request_id, SessionStatus::Closed, state));
}

/// The session a cut-short create made, once it settles (bounded; aborted past the bound).
async fn settle_orphan(mut orphan: JoinHandle<Result<(SessionRef, State)>>) -> Option<SessionRef> {
    match tokio::time::timeout(CANCEL_GRACE, &mut orphan).await {
        Ok(Ok(Ok((session, _)))) => Some(session),
        Ok(_) => None,
        Err(_) => {
            tracing::warn!("a session create cut short by cancel did not settle; aborting it");
            orphan.abort();
            None
        }
    }
}
