//! `turn`: refused at once when the rules say so; else its start-up is queued on the session
//! lane (rebuilding a lost session first), ACKed with one `status: busy`, and streamed to its
//! end in its own task (`crate::server::turn`).

use remote_runner_protocol::{Event, SessionStatus, TurnCommand};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::server::failure::{self, Failure};
use crate::server::session;
use crate::server::shared::{Shared, TurnSlot};
use crate::server::turn::{self, StartedTurn};

pub fn handle(shared: &Shared, c: TurnCommand) {
    let (admitted, token) = {
        let mut inner = shared.lock();
        (inner.lifecycle.admit_turn(&c.turn_id), inner.epoch.clone())
    };
    if let Err(refusal) = admitted {
        shared.out.send(failure::refused(
            Some(&c.request_id),
            Some(&c.turn_id),
            &refusal,
        ));
        return;
    }
    let s = shared.clone();
    shared.session_lane.push(async move {
        let begun = tokio::select! {
            biased;
            _ = token.cancelled() => Err(Failure::from(failure::cut_by_cancel())),
            begun = begin(&s, &c) => begun,
        };
        match begun {
            Ok(started) => accept(&s, &c, started),
            // Pre-ACK failure: correlated, and the provider stays usable.
            Err(err) => {
                s.lock().lifecycle.turn_ended(&c.turn_id);
                s.out.send(err.event(Some(&c.request_id), Some(&c.turn_id)))
            }
        }
    });
}

/// Rebuild a lost session if needed, then start the turn's command.
async fn begin(shared: &Shared, c: &TurnCommand) -> Result<StartedTurn, Failure> {
    if shared.lock().session_lost {
        session::rebuild_lost(shared).await?;
    }
    turn::begin(shared, c).await
}

fn accept(shared: &Shared, c: &TurnCommand, started: StartedTurn) {
    let (done_tx, done_rx) = watch::channel(false);
    let cancel = CancellationToken::new();
    let state = {
        let mut inner = shared.lock();
        inner.lifecycle.acked(&c.turn_id);
        inner.turn = Some(TurnSlot {
            turn_id: c.turn_id.clone(),
            session_id: started.session_id.clone(),
            command_id: started.record.command_id.clone(),
            cancel: cancel.clone(),
            done: done_rx,
        });
        inner.state.clone()
    };
    // The ACK: exactly one per turn, before anything else for it.
    shared.out.send(Event::status(
        c.request_id.clone(),
        SessionStatus::Busy,
        state,
    ));
    shared.screen.kick();
    let shared = shared.clone();
    let turn_id = c.turn_id.clone();
    tokio::spawn(async move {
        turn::stream(&shared, &turn_id, started, cancel).await;
        let _ = done_tx.send(true);
    });
}
