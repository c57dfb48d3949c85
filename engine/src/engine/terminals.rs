//! The tmux control clients a long-lived engine keeps, one per session it runs commands in
//! ([`EngineOptions::terminal_clients`](super::EngineOptions)): a foreground command is then
//! typed and its end seen without a tmux process on the machine ([`TerminalClient`]).
//!
//! A client is attached in the background after a session's first command (that one, and any
//! while it attaches, run as without one), so a process that runs one command never pays for it.
//! One that ended (its session or link gone) is attached again on a later command; one that could
//! not attach is not tried again for a while.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::tmux::{TerminalClient, TmuxDriver};

/// How long a session whose client could not attach goes without one.
const RETRY_AFTER: Duration = Duration::from_secs(60);

/// Most clients kept (attached or attaching) at once. Each holds an SSH channel for as long as
/// it lives, and a connection has only `MaxSessions` (10 by default) of them, shared with every
/// call: an engine driving many sessions at once keeps clients for the first ones and runs the
/// others' commands as without one.
const MAX_CLIENTS: usize = 8;

enum Slot {
    Attaching,
    Ready(Arc<TerminalClient>),
    Refused(Instant),
}

/// The clients, by session id.
#[derive(Default, Clone)]
pub(super) struct Terminals {
    slots: Arc<Mutex<HashMap<String, Slot>>>,
}

impl std::fmt::Debug for Terminals {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Terminals").finish_non_exhaustive()
    }
}

impl Terminals {
    /// The session's client when one is attached and alive; otherwise starts attaching one
    /// (in the background) and returns `None`.
    pub fn client(&self, session_id: &str, driver: &TmuxDriver) -> Option<Arc<TerminalClient>> {
        let mut slots = self.lock();
        match slots.get(session_id) {
            Some(Slot::Ready(c)) if c.is_alive() => return Some(c.clone()),
            Some(Slot::Attaching) => return None,
            Some(Slot::Refused(at)) if at.elapsed() < RETRY_AFTER => return None,
            _ => {}
        }
        let kept = slots
            .values()
            .filter(|s| match s {
                Slot::Attaching => true,
                Slot::Ready(c) => c.is_alive(),
                Slot::Refused(_) => false,
            })
            .count();
        if kept >= MAX_CLIENTS {
            return None;
        }
        slots.insert(session_id.to_string(), Slot::Attaching);
        drop(slots);
        let (this, id, driver) = (self.clone(), session_id.to_string(), driver.clone());
        tokio::spawn(async move {
            let slot = match TerminalClient::attach(driver.transport(), driver.paths()).await {
                Ok(Some(c)) => Slot::Ready(Arc::new(c)),
                Ok(None) => Slot::Refused(Instant::now()),
                Err(e) => {
                    tracing::debug!("{id}: no tmux control client: {e}");
                    Slot::Refused(Instant::now())
                }
            };
            let mut slots = this.lock();
            // A session forgotten meanwhile (destroyed) keeps no client.
            if matches!(slots.get(&id), Some(Slot::Attaching)) {
                slots.insert(id, slot);
            }
        });
        None
    }

    /// Drop the session's client (its session ends).
    pub fn forget(&self, session_id: &str) {
        self.lock().remove(session_id);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Slot>> {
        self.slots.lock().unwrap_or_else(|p| p.into_inner())
    }
}
