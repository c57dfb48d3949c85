//! The provider's state, shared by the command handlers and the tasks they start: one remote
//! session, its protocol state, the active turn, and the parts every handler uses (the engine,
//! the writer, the lanes, the screen task's wake-up, the chat calls waiting for the host).

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use remote_runner_engine::engine::OpenOptions;
use remote_runner_engine::engine::{Engine, EngineOptions};
use remote_runner_engine::error::Result;
use remote_runner_protocol::lifecycle::ProviderLifecycle;
use remote_runner_protocol::{Event, State};
use tokio::sync::{Notify, watch};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::config::ProviderConfig;
use super::lane::Lane;
use super::writer::Out;
use crate::chat::Settlements;

/// Which remote session the provider drives.
#[derive(Debug, Clone)]
pub struct SessionRef {
    pub session_id: String,
    pub machine_id: String,
}

/// The turn in flight.
#[derive(Debug)]
pub struct TurnSlot {
    pub turn_id: String,
    pub session_id: String,
    pub command_id: String,
    pub cancel: CancellationToken,
    pub done: watch::Receiver<bool>,
}

/// Mutable provider state, behind one short-lived lock.
#[derive(Debug)]
pub struct Inner {
    /// The protocol's rules: status, generation, the accepted turn, a cancel under way.
    pub lifecycle: ProviderLifecycle,
    pub state: Option<State>,
    pub session: Option<SessionRef>,
    pub turn: Option<TurnSlot>,
    /// The session ended (a command killed the shell, or tmux died): the next turn rebuilds.
    pub session_lost: bool,
    /// Last terminal_screen sequence sent (sequences are also time-based across restarts).
    pub last_sequence: u64,
    /// BotMux `sessionId` of the `start`/`resume` that made the session (bindings name it).
    pub owner: Option<String>,
    /// Session work queued before the latest `cancel` watches this token; `cancel` fires it
    /// and puts a fresh one in its place.
    pub epoch: CancellationToken,
    /// A session create that a `cancel` cut short: the cancel destroys what it made.
    pub orphan: Option<JoinHandle<Result<(SessionRef, State)>>>,
}

/// Everything a handler or task needs, cheaply cloneable.
#[derive(Clone)]
pub struct Shared {
    pub config: Arc<ProviderConfig>,
    pub engine: Arc<Engine>,
    pub out: Out,
    pub inner: Arc<Mutex<Inner>>,
    pub screen: ScreenKick,
    /// Start, resume, turn start-up, cancel, detach, reattach: one at a time, in order.
    pub session_lane: Lane,
    /// Terminal input and resize: one at a time, in order, beside the session lane.
    pub terminal_lane: Lane,
    /// Chat calls of the running turn waiting for the host's results.
    pub settlements: Arc<Settlements>,
    /// Chat helpers known to be installed (path on the machine).
    pub chat_scripts: Arc<Mutex<HashSet<String>>>,
}

fn lock_set(m: &Mutex<HashSet<String>>) -> MutexGuard<'_, HashSet<String>> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl Shared {
    /// Open the engine for `config` and start the lanes (not the screen task: see
    /// `screen::spawn`).
    pub fn new(config: ProviderConfig, out: Out) -> Result<Shared> {
        // Machines are reached directly (no keeper: the provider is long-lived) and an encrypted
        // key's passphrase is never asked (stdin is the protocol). Long-lived: a turn's command
        // is typed through a kept tmux control client, its end read from the client's notice
        // (turn-latency 14.3 ms against 15.9 ms without, same bed and load).
        let engine = EngineOptions {
            terminal_clients: true,
            ..EngineOptions::default()
        };
        let engine = Engine::open(
            &config.state_dir,
            OpenOptions {
                adhoc: config.adhoc_machine.clone(),
                engine,
                ..OpenOptions::default()
            },
        )?;
        let inner = Arc::new(Mutex::new(Inner {
            lifecycle: ProviderLifecycle::new(),
            state: None,
            session: None,
            turn: None,
            session_lost: false,
            last_sequence: 0,
            owner: None,
            epoch: CancellationToken::new(),
            orphan: None,
        }));
        Ok(Shared {
            config: Arc::new(config),
            engine: Arc::new(engine),
            out,
            inner,
            screen: ScreenKick::new(),
            session_lane: Lane::spawn(),
            terminal_lane: Lane::spawn(),
            settlements: Arc::new(Settlements::default()),
            chat_scripts: Arc::default(),
        })
    }

    pub fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    pub fn state(&self) -> Option<State> {
        self.lock().state.clone()
    }

    /// A `status` answering `request_id` with the status and state in force.
    pub fn status_event(&self, request_id: String) -> Event {
        let inner = self.lock();
        Event::status(request_id, inner.lifecycle.status(), inner.state.clone())
    }

    /// Whether this process already installed (or found) the chat helper at `path`.
    pub fn chat_installed(&self, path: &str) -> bool {
        lock_set(&self.chat_scripts).contains(path)
    }

    pub fn mark_chat_installed(&self, path: &str) {
        lock_set(&self.chat_scripts).insert(path.to_string());
    }
}

/// Wakes the screen task (`screen`); cheap to clone.
#[derive(Clone, Debug)]
pub struct ScreenKick {
    notify: Arc<Notify>,
    stopped: Arc<AtomicBool>,
}

impl ScreenKick {
    pub fn new() -> Self {
        ScreenKick {
            notify: Arc::new(Notify::new()),
            stopped: Arc::default(),
        }
    }

    /// Something may have changed on screen.
    pub fn kick(&self) {
        self.stopped.store(false, Ordering::SeqCst);
        self.notify.notify_one();
    }

    /// No more screens (cancel, shutdown) until the next kick.
    pub fn stop(&self) {
        self.stopped.store(true, Ordering::SeqCst);
        self.notify.notify_one();
    }

    /// Completes at the next [`ScreenKick::kick`] or [`ScreenKick::stop`].
    pub async fn notified(&self) {
        self.notify.notified().await;
    }

    pub fn is_stopped(&self) -> bool {
        self.stopped.load(Ordering::SeqCst)
    }
}

impl Default for ScreenKick {
    fn default() -> Self {
        Self::new()
    }
}
