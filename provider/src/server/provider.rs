//! The provider's state machine: one remote session, its protocol state, and the active turn.
//!
//! The main loop (see [`super::run`]) hands every decoded command to [`Provider::handle`].
//! Handlers answer with events through the single writer. Short operations run inline; a turn's
//! streaming runs in its own task so that `cancel`, `status` and terminal commands are served
//! while it runs.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use remote_runner_protocol::{
    Command, Event, FailureStatus, RequestCommand, ResumeCommand, ResumeMode, SessionStatus,
    StartCommand, State, TerminalInputCommand, TerminalResizeCommand, TurnCommand,
};
use serde_json::{Map, Value, json};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::config::ProviderConfig;
use super::screen::ScreenKick;
use super::turn::{self, StartedTurn};
use super::writer::Out;
use crate::connect::MachineConnector;
use crate::engine::Connector;
use crate::engine::{Engine, EngineOptions};
use crate::error::{Error, ErrorCode, Result};
use crate::ssh::ConnectOptions;
use crate::transport::Transport;

/// Capabilities that work with this provider (terminal ones only when enabled).
const BASE_CAPABILITIES: &[&str] = &[
    "start", "resume", "turn", "cancel", "detach", "reattach", "status",
];
const TERMINAL_CAPABILITIES: &[&str] = &["terminal_screen", "terminal_input", "terminal_resize"];

/// How long `cancel` waits for a turn task to notice before answering anyway.
const CANCEL_GRACE: Duration = Duration::from_secs(10);

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
    pub status: SessionStatus,
    pub state: Option<State>,
    pub session: Option<SessionRef>,
    pub turn: Option<TurnSlot>,
    /// After a `ready` that raised the generation, no screen until the host's next command.
    pub screen_hold: bool,
    /// The session ended (a command killed the shell, or tmux died): the next turn rebuilds.
    pub session_lost: bool,
    /// Last terminal_screen sequence sent (sequences are also time-based across restarts).
    pub last_sequence: u64,
}

/// Everything a handler or task needs, cheaply cloneable.
#[derive(Clone)]
pub struct Shared {
    pub config: Arc<ProviderConfig>,
    pub engine: Arc<Engine>,
    pub connector: Arc<MachineConnector>,
    pub out: Out,
    pub inner: Arc<Mutex<Inner>>,
    pub screen: ScreenKick,
}

impl Shared {
    pub fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    pub fn state(&self) -> Option<State> {
        self.lock().state.clone()
    }

    /// The transport the engine uses for a machine.
    pub async fn engine_transport(&self, machine_id: &str) -> Result<Arc<dyn Transport>> {
        self.connector.connect(machine_id).await
    }
}

/// The provider: its configuration (or why it is invalid) and, once valid, the shared parts.
pub struct Provider {
    setup: std::result::Result<Shared, Error>,
    out: Out,
}

impl Provider {
    pub fn new(config: Result<ProviderConfig>, out: Out) -> Provider {
        let setup = config.and_then(|config| build_shared(config, out.clone()));
        if let Err(e) = &setup {
            tracing::error!(code = %e.code, "configuration is invalid: {}", e.message);
        }
        Provider { setup, out }
    }

    /// Serve one command.
    pub async fn handle(&self, command: Command) {
        let shared = match &self.setup {
            Ok(shared) => shared,
            Err(err) => return self.refuse(&command, err),
        };
        // Any command from the host means it has applied what we sent before it.
        shared.lock().screen_hold = false;
        match command {
            Command::Hello(c) => {
                let mut caps: Vec<&str> = BASE_CAPABILITIES.to_vec();
                if shared.config.terminal {
                    caps.extend_from_slice(TERMINAL_CAPABILITIES);
                }
                self.out.send(Event::hello(
                    c.request_id,
                    shared.config.provider_name.clone(),
                    caps,
                ));
            }
            Command::Start(c) => self.reply(&c.request_id.clone(), start(shared, c).await),
            Command::Resume(c) => self.reply(&c.request_id.clone(), resume(shared, c).await),
            Command::Turn(c) => turn_command(shared, c).await,
            Command::Cancel(c) => cancel(shared, c).await,
            Command::Detach(c) => detach(shared, c).await,
            Command::Reattach(c) => self.reply(&c.request_id.clone(), reattach(shared, &c).await),
            Command::Status(c) => {
                let inner = shared.lock();
                self.out.send(Event::status(
                    c.request_id,
                    inner.status,
                    inner.state.clone(),
                ));
            }
            Command::TerminalInput(c) => {
                self.reply(&c.request_id.clone(), terminal_input(shared, c).await)
            }
            Command::TerminalResize(c) => {
                self.reply(&c.request_id.clone(), terminal_resize(shared, c).await)
            }
            Command::OutboundMessageResult(c) => {
                // Not advertised; the host allows no reply to a settlement notice.
                tracing::warn!(operation = %c.operation_id, "ignoring outbound_message_result: capability not advertised");
            }
            Command::SessionToolResult(c) => {
                tracing::warn!(operation = %c.operation_id, "ignoring session_tool_result: capability not advertised");
            }
        }
    }

    /// Stdin closed or SIGTERM: leave the remote session alive, as `detach` would, and stop.
    pub async fn shutdown(&self) {
        if let Ok(shared) = &self.setup {
            shared.screen.stop();
            let turn = shared.lock().turn.as_ref().map(|t| t.cancel.clone());
            if let Some(token) = turn {
                // The remote command goes on; only our streaming of it stops.
                token.cancel();
            }
        }
    }

    /// Answer with `event` or a correlated failure.
    fn reply(&self, request_id: &str, result: Result<Event>) {
        match result {
            Ok(event) => self.out.send(event),
            Err(err) => self.out.send(failure_for(Some(request_id), None, &err)),
        }
    }

    /// Configuration is invalid: every command that expects a reply gets a correlated failure
    /// saying what to set, and the provider keeps serving.
    fn refuse(&self, command: &Command, err: &Error) {
        if command.expects_reply() {
            self.out.send(failure_for(
                Some(command.request_id()),
                command.turn_id(),
                err,
            ));
        }
    }
}

fn build_shared(config: ProviderConfig, out: Out) -> Result<Shared> {
    let mut connector = MachineConnector::new(config.state_dir.clone(), ConnectOptions::default());
    if let Some(m) = &config.adhoc_machine {
        connector = connector.with_machine(m.clone());
    }
    let connector = Arc::new(connector);
    let engine = Arc::new(Engine::with_options(
        &config.state_dir,
        connector.clone(),
        EngineOptions::default(),
    )?);
    let inner = Arc::new(Mutex::new(Inner {
        status: SessionStatus::Starting,
        state: None,
        session: None,
        turn: None,
        screen_hold: false,
        session_lost: false,
        last_sequence: 0,
    }));
    let config = Arc::new(config);
    let screen = ScreenKick::new();
    let shared = Shared {
        config,
        engine,
        connector,
        out,
        inner,
        screen,
    };
    super::screen::spawn(shared.clone());
    Ok(shared)
}

/// A protocol failure event for an engine error. Runner errors are `failed`; a lost link while
/// work may be running is `ambiguous`.
pub fn failure_for(request_id: Option<&str>, turn_id: Option<&str>, err: &Error) -> Event {
    let status = match err.code {
        ErrorCode::ConnectionLost => FailureStatus::Ambiguous,
        ErrorCode::Cancelled => FailureStatus::Cancelled,
        _ => FailureStatus::Failed,
    };
    let mut message = err.message.clone();
    if message.trim().is_empty() {
        message = err.code.as_str().to_string();
    }
    truncate_chars(&mut message, 4000);
    Event::failure(
        request_id.map(str::to_owned),
        turn_id.map(str::to_owned),
        err.code.as_str(),
        message,
        status,
        err.retryable,
    )
}

fn truncate_chars(s: &mut String, max: usize) {
    if s.chars().count() > max {
        *s = s.chars().take(max).collect();
    }
}

/// `remoteSessionId` for a session: names the machine and the tmux session.
fn remote_session_id(session: &SessionRef) -> String {
    format!("{}/{}", session.machine_id, session.session_id)
}

fn provider_state(session: &SessionRef, cwd: &str) -> Map<String, Value> {
    let Value::Object(map) = json!({
        "machineId": session.machine_id,
        "sessionId": session.session_id,
        "cwd": cwd,
        "backend": "tmux",
    }) else {
        unreachable!("json! of an object literal is an object")
    };
    map
}

/// Create a new remote session and the state for it at `generation`.
async fn new_session(
    shared: &Shared,
    host_cwd: &str,
    generation: u64,
    agent_thread_id: Option<String>,
) -> Result<(SessionRef, State)> {
    let machine = shared.connector.machine(&shared.config.machine_id)?;
    let cwd = shared.config.remote_cwd_for(host_cwd, &machine);
    let rec = shared.engine.create_session(&machine, Some(&cwd)).await?;
    let (cols, rows) = (shared.config.terminal_cols, shared.config.terminal_rows);
    if let Err(e) = shared.engine.resize(&rec.session_id, cols, rows).await {
        tracing::warn!("cannot set the terminal to {cols}x{rows}: {e}");
    }
    let session = SessionRef {
        session_id: rec.session_id.clone(),
        machine_id: rec.machine_id.clone(),
    };
    let mut state = State::new(shared.config.provider_name.clone(), generation)
        .with_remote_session_id(remote_session_id(&session))
        .with_provider_state(provider_state(&session, &rec.cwd));
    state.agent_thread_id = agent_thread_id;
    Ok((session, state))
}

fn install(shared: &Shared, session: SessionRef, state: State, hold_screen: bool) {
    let mut inner = shared.lock();
    inner.session = Some(session);
    inner.state = Some(state);
    inner.status = SessionStatus::Ready;
    inner.session_lost = false;
    inner.screen_hold = hold_screen;
}

async fn start(shared: &Shared, c: StartCommand) -> Result<Event> {
    if shared.lock().session.is_some() {
        return Err(Error::new(
            ErrorCode::AlreadyExists,
            "this provider already runs a session; start is sent once per provider process",
        ));
    }
    let (session, state) = new_session(shared, &c.cwd, 1, None).await?;
    install(shared, session, state.clone(), false);
    shared.screen.kick();
    Ok(Event::ready(c.request_id, state))
}

/// The session named by a persisted state, if it is ours and still known locally.
fn session_from_state(state: &State) -> Option<SessionRef> {
    let ps = state.provider_state.as_ref()?;
    let session_id = ps.get("sessionId")?.as_str()?.to_string();
    let machine_id = ps.get("machineId")?.as_str()?.to_string();
    Some(SessionRef {
        session_id,
        machine_id,
    })
}

async fn resume(shared: &Shared, c: ResumeCommand) -> Result<Event> {
    let old = c.state.clone();
    if old.provider != shared.config.provider_name {
        return Err(Error::new(
            ErrorCode::StateProviderMismatch,
            format!(
                "the persisted state belongs to provider {:?}, not {:?}; start a new session or set \
                 REMOTE_RUNNER_PROVIDER_NAME to match",
                old.provider, shared.config.provider_name
            ),
        ));
    }
    let previous = session_from_state(&old);
    if c.mode() == ResumeMode::Reattach
        && let Some(session) = &previous
        && session_alive(shared, session).await
    {
        let mut state = old.clone();
        state.generation = state.generation.max(1);
        if state.generation != old.generation {
            // A state at generation 0 never had compute; adopting it counts as new compute.
            install(shared, session.clone(), state.clone(), true);
        } else {
            install(shared, session.clone(), state.clone(), false);
            shared.screen.kick();
        }
        return Ok(Event::ready(c.request_id, state));
    }
    if c.mode() == ResumeMode::Rebuild
        && let Some(session) = &previous
    {
        // The old compute was cancelled; make sure nothing of it keeps running.
        if let Err(e) = shared.engine.destroy(&session.session_id).await {
            tracing::info!(session = %session.session_id, "old session not destroyed: {e}");
        }
    }
    let (session, state) = new_session(
        shared,
        &c.cwd,
        old.generation + 1,
        old.agent_thread_id.clone(),
    )
    .await?;
    install(shared, session, state.clone(), true);
    Ok(Event::ready(c.request_id, state))
}

async fn session_alive(shared: &Shared, session: &SessionRef) -> bool {
    match shared.engine.check_alive(&session.session_id).await {
        Ok(alive) => alive,
        Err(e) => {
            tracing::info!(session = %session.session_id, "cannot adopt session: {e}");
            false
        }
    }
}

async fn turn_command(shared: &Shared, c: TurnCommand) {
    let rejected = {
        let inner = shared.lock();
        match (&inner.status, &inner.session, &inner.turn) {
            (_, _, Some(active)) => Some(Error::new(
                ErrorCode::Busy,
                format!(
                    "turn {} is still running; send one turn at a time",
                    active.turn_id
                ),
            )),
            (SessionStatus::Detached, _, _) => Some(Error::new(
                ErrorCode::NotReady,
                "the provider is detached; send reattach before the next turn",
            )),
            (SessionStatus::Closed, _, _) => Some(Error::new(
                ErrorCode::NotReady,
                "the session was cancelled; resume with resumeMode rebuild to start a new one",
            )),
            (_, None, _) => Some(Error::new(
                ErrorCode::NotReady,
                "no session yet: send start (or resume) and wait for ready before a turn",
            )),
            _ => None,
        }
    };
    if let Some(err) = rejected {
        shared
            .out
            .send(failure_for(Some(&c.request_id), Some(&c.turn_id), &err));
        return;
    }
    if shared.lock().session_lost
        && let Err(err) = rebuild_lost_session(shared).await
    {
        shared
            .out
            .send(failure_for(Some(&c.request_id), Some(&c.turn_id), &err));
        return;
    }
    match turn::begin(shared, &c).await {
        Ok(started) => accept_turn(shared, &c, started),
        // Pre-ACK failure: correlated, and the provider stays usable.
        Err(err) => shared
            .out
            .send(failure_for(Some(&c.request_id), Some(&c.turn_id), &err)),
    }
}

/// The previous session ended: start a new one at the next generation, keeping the thread.
async fn rebuild_lost_session(shared: &Shared) -> Result<()> {
    let old = shared
        .state()
        .ok_or_else(|| Error::internal("no state for a lost session"))?;
    let cwd = shared
        .lock()
        .state
        .as_ref()
        .and_then(|s| s.provider_state.as_ref())
        .and_then(|p| p.get("cwd"))
        .and_then(Value::as_str)
        .unwrap_or("/")
        .to_string();
    let (session, state) = new_session(
        shared,
        &cwd,
        old.generation + 1,
        old.agent_thread_id.clone(),
    )
    .await?;
    install(shared, session, state.clone(), true);
    shared.out.send(Event::lineage_changed(state));
    Ok(())
}

fn accept_turn(shared: &Shared, c: &TurnCommand, started: StartedTurn) {
    let (done_tx, done_rx) = watch::channel(false);
    let cancel = CancellationToken::new();
    let state = {
        let mut inner = shared.lock();
        inner.status = SessionStatus::Busy;
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

async fn cancel(shared: &Shared, c: RequestCommand) {
    let (turn, session) = {
        let inner = shared.lock();
        let turn = inner.turn.as_ref().map(|t| {
            (
                t.turn_id.clone(),
                t.session_id.clone(),
                t.command_id.clone(),
                t.cancel.clone(),
                t.done.clone(),
            )
        });
        (turn, inner.session.clone())
    };
    if let Some((turn_id, session_id, command_id, token, mut done)) = turn {
        token.cancel();
        if let Err(e) = shared.engine.command_stop(&session_id, &command_id).await {
            tracing::warn!("stopping the turn's command failed: {e}");
        }
        let _ = tokio::time::timeout(CANCEL_GRACE, done.wait_for(|d| *d)).await;
        shared.lock().turn = None;
        shared.out.send(Event::failure(
            None,
            Some(turn_id),
            "cancelled",
            "the turn was cancelled by the host's cancel; its command was stopped",
            FailureStatus::Cancelled,
            false,
        ));
    }
    if let Some(session) = session
        && let Err(e) = shared.engine.destroy(&session.session_id).await
    {
        tracing::warn!(session = %session.session_id, "destroying the session failed: {e}");
    }
    shared.screen.stop();
    let state = set_status(shared, SessionStatus::Closed);
    shared
        .out
        .send(Event::status(c.request_id, SessionStatus::Closed, state));
}

/// Move to `status` and return the state to report with it.
fn set_status(shared: &Shared, status: SessionStatus) -> Option<State> {
    let mut inner = shared.lock();
    inner.status = status;
    inner.state.clone()
}

async fn detach(shared: &Shared, c: RequestCommand) {
    let done = shared.lock().turn.as_ref().map(|t| t.done.clone());
    if let Some(mut done) = done {
        // Let the current turn settle; the remote session stays.
        let _ = done.wait_for(|d| *d).await;
    }
    let state = set_status(shared, SessionStatus::Detached);
    shared
        .out
        .send(Event::status(c.request_id, SessionStatus::Detached, state));
}

async fn reattach(shared: &Shared, c: &RequestCommand) -> Result<Event> {
    let (status, session) = {
        let inner = shared.lock();
        (inner.status, inner.session.clone())
    };
    if status != SessionStatus::Detached {
        return Err(Error::new(
            ErrorCode::NotDetached,
            "reattach is only valid after detach; the provider is not detached",
        ));
    }
    if let Some(session) = &session
        && !session_alive(shared, session).await
    {
        shared.lock().session_lost = true;
    }
    let state = set_status(shared, SessionStatus::Ready);
    shared.screen.kick();
    Ok(Event::status(
        c.request_id.clone(),
        SessionStatus::Ready,
        state,
    ))
}

fn check_generation(shared: &Shared, generation: u64) -> Result<SessionRef> {
    let inner = shared.lock();
    let current = inner.state.as_ref().map(|s| s.generation);
    if current != Some(generation) {
        return Err(Error::new(
            ErrorCode::InvalidArgument,
            format!(
                "terminal input for generation {generation} refused: the current generation is {}",
                current.map_or("none (no session yet)".to_string(), |g| g.to_string())
            ),
        ));
    }
    inner
        .session
        .clone()
        .ok_or_else(|| Error::invalid("no session yet: send start or resume first"))
}

async fn terminal_input(shared: &Shared, c: TerminalInputCommand) -> Result<Event> {
    let session = check_generation(shared, c.generation).map_err(stale)?;
    shared
        .engine
        .send_raw(&session.session_id, c.data.as_bytes())
        .await?;
    shared.screen.kick();
    let inner = shared.lock();
    Ok(Event::status(
        c.request_id,
        inner.status,
        inner.state.clone(),
    ))
}

async fn terminal_resize(shared: &Shared, c: TerminalResizeCommand) -> Result<Event> {
    let session = check_generation(shared, c.generation).map_err(stale)?;
    let cols = u16::try_from(c.cols).unwrap_or(1000);
    let rows = u16::try_from(c.rows).unwrap_or(1000);
    shared
        .engine
        .resize(&session.session_id, cols, rows)
        .await?;
    shared.screen.kick();
    let inner = shared.lock();
    Ok(Event::status(
        c.request_id,
        inner.status,
        inner.state.clone(),
    ))
}

/// A generation mismatch on terminal input, under the code the reference runner uses.
fn stale(err: Error) -> Error {
    Error {
        code: ErrorCode::StaleGeneration,
        ..err
    }
}
