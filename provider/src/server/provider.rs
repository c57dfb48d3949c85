//! The provider's state machine: one remote session, its protocol state, and the active turn.
//!
//! The main loop (see [`super::serve`]) hands every decoded command to [`Provider::dispatch`],
//! which never waits on the engine: `hello` and `status` are answered on the spot, refusals
//! are decided on the spot, and engine work goes to a [`Lane`] (session work in one, terminal
//! input in another). A `cancel` cuts short whatever session work is in flight or queued (it
//! gets a `cancelled` failure) and then runs. A turn's streaming runs in its own task.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use remote_runner_protocol::lifecycle::{self, ProviderLifecycle, Refusal};
use remote_runner_protocol::{
    Command, Event, FailureStatus, RequestCommand, ResumeCommand, ResumeMode, SessionStatus,
    StartCommand, State, TerminalInputCommand, TerminalResizeCommand, TurnCommand,
};
use serde_json::{Map, Value, json};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::binding;
use super::config::ProviderConfig;
use super::failure::{self, Failure};
use super::lane::Lane;
use super::screen::ScreenKick;
use super::turn::{self, StartedTurn};
use super::writer::Out;
use crate::chat::{Settlement, Settlements};
use remote_runner_engine::connect::MachineConnector;
use remote_runner_engine::engine::Connector;
use remote_runner_engine::engine::{Engine, EngineOptions};
use remote_runner_engine::error::{Error, ErrorCode, Result};
use remote_runner_engine::remote::Remote;
use remote_runner_engine::ssh::ConnectOptions;

/// How long `cancel` waits for a turn task, or a session create it cut short, before answering
/// anyway (below the host's default 20 s operation timeout).
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
    pub connector: Arc<MachineConnector>,
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
    pub chat_scripts: Arc<Mutex<std::collections::HashSet<String>>>,
}

fn lock_set(
    m: &Mutex<std::collections::HashSet<String>>,
) -> MutexGuard<'_, std::collections::HashSet<String>> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
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

    /// Whether this process already installed (or found) the chat helper at `path`.
    pub fn chat_installed(&self, path: &str) -> bool {
        lock_set(&self.chat_scripts).contains(path)
    }

    pub fn mark_chat_installed(&self, path: &str) {
        lock_set(&self.chat_scripts).insert(path.to_string());
    }

    /// The transport the engine uses for a machine.
    pub async fn engine_transport(&self, machine_id: &str) -> Result<Arc<Remote>> {
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

    /// Decide on one command without waiting for the engine: answer it now, or queue its work.
    pub fn dispatch(&self, command: Command) {
        let shared = match &self.setup {
            Ok(shared) => shared,
            Err(err) => return self.refuse(&command, err),
        };
        // Any command from the host means it has applied what we sent before it.
        shared.lock().lifecycle.command_received();
        match command {
            Command::Hello(c) => {
                self.out.send(Event::hello(
                    c.request_id,
                    shared.config.provider_name.clone(),
                    lifecycle::capabilities_with(
                        shared.config.terminal,
                        shared.config.outbound,
                        shared.config.session_tool,
                    ),
                ));
            }
            Command::Status(c) => self.out.send(status_now(shared, c.request_id)),
            Command::Start(c) => session_job(shared, c.request_id.clone(), |s, token| async move {
                start(&s, c, &token).await
            }),
            Command::Resume(c) => {
                session_job(shared, c.request_id.clone(), |s, token| async move {
                    resume(&s, c, &token).await
                })
            }
            Command::Turn(c) => turn_command(shared, c),
            Command::Cancel(c) => cancel_command(shared, c),
            Command::Detach(c) => {
                session_job(shared, c.request_id.clone(), |s, token| async move {
                    detach(&s, c, &token).await
                })
            }
            Command::Reattach(c) => session_job(shared, c.request_id.clone(), |s, _| async move {
                reattach(&s, &c).await
            }),
            Command::TerminalInput(c) => terminal_job(
                shared,
                c.request_id.clone(),
                c.generation,
                |s, session| async move { terminal_input(&s, &session, c).await },
            ),
            Command::TerminalResize(c) => terminal_job(
                shared,
                c.request_id.clone(),
                c.generation,
                |s, session| async move { terminal_resize(&s, &session, c).await },
            ),
            // Settlement notices: never answered (the host allows no reply). One for another
            // turn or generation, or for a capability turned off, finds no call and is dropped.
            Command::OutboundMessageResult(c) => {
                let to = (c.operation_id, c.turn_id, c.generation);
                settle(shared, to, Settlement::Outbound(c.result));
            }
            Command::SessionToolResult(c) => {
                let to = (c.operation_id, c.turn_id, c.generation);
                settle(shared, to, Settlement::Tool(c.result));
            }
        }
    }

    /// Stdin closed: let queued session work (a start in flight, say) finish, up to `bound`,
    /// so that a session it creates is recorded rather than abandoned half made.
    pub async fn settle(&self, bound: Duration) {
        if let Ok(shared) = &self.setup {
            let _ = tokio::time::timeout(bound, shared.session_lane.drained()).await;
        }
    }

    /// Stdin closed or a signal: leave the remote session alive, as `detach` would, and stop.
    /// Queued or in-flight session work is abandoned with the process.
    pub fn shutdown(&self) {
        if let Ok(shared) = &self.setup {
            shared.screen.stop();
            let turn = shared.lock().turn.as_ref().map(|t| t.cancel.clone());
            if let Some(token) = turn {
                // The remote command goes on; only our streaming of it stops.
                token.cancel();
            }
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

/// Hand a host result to the chat call waiting for it.
/// Hands a result the host wrote back to the operation `(operationId, turnId, generation)`.
fn settle(shared: &Shared, to: (String, String, u64), result: Settlement) {
    let (operation_id, turn_id, generation) = to;
    if let Err(why) = shared
        .settlements
        .settle(&operation_id, &turn_id, generation, result)
    {
        tracing::warn!("dropping a result the host wrote back: {why}");
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
    let config = Arc::new(config);
    let screen = ScreenKick::new();
    let shared = Shared {
        config,
        engine,
        connector,
        out,
        inner,
        screen,
        session_lane: Lane::spawn(),
        terminal_lane: Lane::spawn(),
        settlements: Arc::new(Settlements::default()),
        chat_scripts: Arc::default(),
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
    // The protocol crate fits the message to the host's limit (UTF-16 units, never blank).
    Event::failure(
        request_id.map(str::to_owned),
        turn_id.map(str::to_owned),
        err.code.as_str(),
        super::hint::message(err),
        status,
        err.retryable,
    )
}

/// The failure for a command the protocol's rules refuse.
fn refusal_failure(request_id: &str, turn_id: Option<&str>, refusal: &Refusal) -> Event {
    Event::failure(
        Some(request_id.to_string()),
        turn_id.map(str::to_owned),
        refusal.code(),
        refusal.message(),
        FailureStatus::Failed,
        refusal.retryable(),
    )
}

/// Answer `request_id` with `event` or a correlated failure.
fn reply(out: &Out, request_id: &str, result: Result<Event>) {
    match result {
        Ok(event) => out.send(event),
        Err(err) => out.send(failure_for(Some(request_id), None, &err)),
    }
}

/// The failure for work a `cancel` cut short.
fn cut_by_cancel() -> Error {
    Error::new(
        ErrorCode::Cancelled,
        "cut short by the host's cancel, which closes the session; resume with resumeMode \
         rebuild to open a new one",
    )
}

/// Queue session work: it runs after what is already queued. A `cancel` received before it
/// runs cuts it short (a `cancelled` failure for its requestId); once running, the work watches
/// the token itself, so that it can hand over anything half made to the cancel.
fn session_job<F, Fut>(shared: &Shared, request_id: String, work: F)
where
    F: FnOnce(Shared, CancellationToken) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = Result<Event>> + Send + 'static,
{
    let token = shared.lock().epoch.clone();
    let s = shared.clone();
    shared.session_lane.push(async move {
        let result = if token.is_cancelled() {
            Err(cut_by_cancel())
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
fn terminal_job<F, Fut>(shared: &Shared, request_id: String, generation: u64, work: F)
where
    F: FnOnce(Shared, SessionRef) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = Result<Event>> + Send + 'static,
{
    let session = match terminal_session(shared, generation) {
        Ok(session) => session,
        Err(refusal) => {
            return shared
                .out
                .send(refusal_failure(&request_id, None, &refusal));
        }
    };
    let s = shared.clone();
    shared.terminal_lane.push(async move {
        let result = work(s.clone(), session).await;
        reply(&s.out, &request_id, result);
    });
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

/// Create a new remote session and the state for it at `generation`, and bind it to the BotMux
/// session `owner` (see [`binding`]).
async fn new_session(
    shared: &Shared,
    owner: &str,
    host_cwd: &str,
    generation: u64,
    agent_thread_id: Option<String>,
) -> Result<(SessionRef, State)> {
    let machine = shared.connector.machine(&shared.config.machine_id)?;
    let cwd = shared.config.remote_cwd_for(host_cwd, &machine);
    let rec = shared.engine.create_session(&machine, Some(&cwd)).await?;
    let session = SessionRef {
        session_id: rec.session_id.clone(),
        machine_id: rec.machine_id.clone(),
    };
    if let Err(e) = binding::record(&shared.config.state_dir, &session, owner) {
        // Unbound, it could never be resumed: do not leave it running.
        if let Err(d) = shared.engine.destroy(&session.session_id).await {
            tracing::warn!(session = %session.session_id, "destroying an unbound session failed: {d}");
        }
        return Err(e);
    }
    let (cols, rows) = (shared.config.terminal_cols, shared.config.terminal_rows);
    if let Err(e) = shared.engine.resize(&rec.session_id, cols, rows).await {
        tracing::warn!("cannot set the terminal to {cols}x{rows}: {e}");
    }
    let mut state = State::new(shared.config.provider_name.clone(), generation)
        .with_remote_session_id(remote_session_id(&session))
        .with_provider_state(provider_state(&session, &rec.cwd));
    state.agent_thread_id = agent_thread_id;
    Ok((session, state))
}

/// Create a session in its own task, so that a `cancel` can end the `start`/`resume` at once
/// and still destroy what the create makes (see [`Inner::orphan`]).
async fn create_unless_cancelled(
    shared: &Shared,
    owner: &str,
    host_cwd: &str,
    generation: u64,
    agent_thread_id: Option<String>,
    token: &CancellationToken,
) -> Result<(SessionRef, State)> {
    let (s, owner, cwd) = (shared.clone(), owner.to_string(), host_cwd.to_string());
    let mut create =
        tokio::spawn(
            async move { new_session(&s, &owner, &cwd, generation, agent_thread_id).await },
        );
    let finished = tokio::select! {
        biased;
        _ = token.cancelled() => None,
        joined = &mut create => Some(joined),
    };
    match finished {
        None => {
            shared.lock().orphan = Some(create);
            Err(cut_by_cancel())
        }
        Some(Ok(result)) => result,
        Some(Err(e)) => Err(Error::internal(format!(
            "the session create task failed: {e}"
        ))),
    }
}

/// Puts a session in place at `state`; `raised` when its generation is new to the host (a
/// resume's new compute), whose screens wait for the host's next command.
fn install(shared: &Shared, session: SessionRef, state: State, raised: bool) {
    let mut inner = shared.lock();
    inner.session = Some(session);
    if raised {
        inner.lifecycle.ready_raised(state.generation);
    } else {
        inner.lifecycle.ready(state.generation);
    }
    inner.state = Some(state);
    inner.session_lost = false;
}

async fn start(shared: &Shared, c: StartCommand, token: &CancellationToken) -> Result<Event> {
    {
        let mut inner = shared.lock();
        if inner.session.is_some() || inner.owner.is_some() {
            return Err(Error::new(
                ErrorCode::AlreadyExists,
                "this provider already runs a session; start is sent once per provider process",
            ));
        }
        inner.owner = Some(c.session_id.clone());
    }
    let (session, state) =
        create_unless_cancelled(shared, &c.session_id, &c.cwd, 1, None, token).await?;
    install(shared, session, state.clone(), false);
    Ok(Event::ready(c.request_id, state))
}

async fn resume(shared: &Shared, c: ResumeCommand, token: &CancellationToken) -> Result<Event> {
    let old = c.state.clone();
    if old.provider != shared.config.provider_name {
        return Ok(failure::foreign_state(
            &c.request_id,
            &old.provider,
            &shared.config.provider_name,
        ));
    }
    // Only a session this provider made for this BotMux session, on this machine, may be
    // adopted or destroyed; anything else is refused before the engine is touched.
    let previous = match binding::check(&shared.config.state_dir, &shared.config.machine_id, &c) {
        Ok(previous) => previous,
        Err(refusal) => return Ok(refusal.into_event(&c.request_id)),
    };
    shared.lock().owner = Some(c.session_id.clone());
    if c.mode() == ResumeMode::Reattach
        && let Some(session) = &previous
        && session_alive(shared, session).await
    {
        if shared.config.chat() {
            sweep_chat(shared, session).await;
        }
        let mut state = old.clone();
        state.generation = state.generation.max(1);
        // A state at generation 0 never had compute; adopting it counts as new compute.
        let raised = state.generation != old.generation;
        install(shared, session.clone(), state.clone(), raised);
        return Ok(Event::ready(c.request_id, state));
    }
    let old_session = match (c.mode(), &previous) {
        (ResumeMode::Rebuild, Some(session)) => retire(shared, session).await,
        _ => OldSession::None,
    };
    let created = create_unless_cancelled(
        shared,
        &c.session_id,
        &c.cwd,
        old.generation + 1,
        old.agent_thread_id.clone(),
        token,
    )
    .await;
    let (session, state) = created.map_err(|e| old_session.explain(e))?;
    install(shared, session, state.clone(), true);
    Ok(Event::ready(c.request_id, state))
}

/// A session adopted from an earlier provider process: settle the chat calls it left waiting
/// (see [`crate::chat::sweep`]). Best effort: a call not settled here times out on its own.
async fn sweep_chat(shared: &Shared, session: &SessionRef) {
    let swept = async {
        let rec = shared.engine.session_show(&session.session_id)?;
        let transport = shared.engine_transport(&session.machine_id).await?;
        crate::chat::sweep(transport.as_ref(), &rec.remote_state_dir).await
    };
    if let Err(e) = swept.await {
        tracing::warn!(session = %session.session_id, "settling the previous process's chat calls failed: {e}");
    }
}

/// What a rebuild did to the session the state named.
enum OldSession {
    None,
    Destroyed(String),
    AlreadyGone(String),
    NotDestroyed(String, String),
}

impl OldSession {
    /// A failed rebuild says truthfully what became of the old session.
    fn explain(&self, err: Error) -> Error {
        let what = match self {
            OldSession::None => return err,
            OldSession::Destroyed(id) => format!("the old session {id} was destroyed"),
            OldSession::AlreadyGone(id) => format!("the old session {id} had already ended"),
            OldSession::NotDestroyed(id, why) => {
                format!("the old session {id} was NOT destroyed ({why}); it may still be running")
            }
        };
        Error {
            message: format!("{}; {what}", err.message),
            ..err
        }
    }
}

/// Rebuild: the old compute was cancelled; make sure nothing of it keeps running. Destroys only
/// a session it could reach: an unreachable one is reported as not destroyed, not marked so.
async fn retire(shared: &Shared, session: &SessionRef) -> OldSession {
    let id = session.session_id.clone();
    match shared.engine.check_alive(&id).await {
        Ok(false) => OldSession::AlreadyGone(id),
        Ok(true) => match shared.engine.destroy(&id).await {
            Ok(_) => OldSession::Destroyed(id),
            Err(e) => {
                tracing::warn!(session = %id, "old session not destroyed: {e}");
                OldSession::NotDestroyed(id, e.message)
            }
        },
        Err(e) if e.code.is_session_lost() || e.code == ErrorCode::UnknownSession => {
            OldSession::AlreadyGone(id)
        }
        Err(e) => {
            tracing::warn!(session = %id, "old session unreachable, not destroyed: {e}");
            OldSession::NotDestroyed(id, e.message)
        }
    }
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

/// A turn: refused at once when the rules say so, else its start-up is queued on the session
/// lane.
fn turn_command(shared: &Shared, c: TurnCommand) {
    let (admitted, token) = {
        let mut inner = shared.lock();
        (inner.lifecycle.admit_turn(&c.turn_id), inner.epoch.clone())
    };
    if let Err(refusal) = admitted {
        shared
            .out
            .send(refusal_failure(&c.request_id, Some(&c.turn_id), &refusal));
        return;
    }
    let s = shared.clone();
    shared.session_lane.push(async move {
        let begun = tokio::select! {
            biased;
            _ = token.cancelled() => Err(Failure::from(cut_by_cancel())),
            begun = begin_turn(&s, &c) => begun,
        };
        match begun {
            Ok(started) => accept_turn(&s, &c, started),
            // Pre-ACK failure: correlated, and the provider stays usable.
            Err(err) => {
                s.lock().lifecycle.turn_ended(&c.turn_id);
                s.out.send(err.event(Some(&c.request_id), Some(&c.turn_id)))
            }
        }
    });
}

/// Rebuild a lost session if needed, then start the turn's command.
async fn begin_turn(shared: &Shared, c: &TurnCommand) -> Result<StartedTurn, Failure> {
    if shared.lock().session_lost {
        rebuild_lost_session(shared).await?;
    }
    turn::begin(shared, c).await
}

/// The previous session ended: start a new one at the next generation, keeping the thread.
async fn rebuild_lost_session(shared: &Shared) -> Result<()> {
    let (old, owner) = {
        let inner = shared.lock();
        (inner.state.clone(), inner.owner.clone())
    };
    let old = old.ok_or_else(|| Error::internal("no state for a lost session"))?;
    let owner = owner.ok_or_else(|| Error::internal("no BotMux session for a lost session"))?;
    let cwd = old
        .provider_state
        .as_ref()
        .and_then(|p| p.get("cwd"))
        .and_then(Value::as_str)
        .unwrap_or("/")
        .to_string();
    let (session, state) = new_session(
        shared,
        &owner,
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

/// `cancel`: cut short everything queued or in flight on the session lane now, then queue the
/// close itself (stop the turn, destroy the session, answer `closed`).
fn cancel_command(shared: &Shared, c: RequestCommand) {
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
        shared.out.send(Event::failure(
            None,
            Some(turn_id),
            "cancelled",
            "the turn was cancelled by the host's cancel; its command was stopped",
            FailureStatus::Cancelled,
            false,
        ));
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

async fn detach(shared: &Shared, c: RequestCommand, token: &CancellationToken) -> Result<Event> {
    let done = shared.lock().turn.as_ref().map(|t| t.done.clone());
    if let Some(mut done) = done {
        // Let the current turn settle; the remote session stays. A cancel ends the wait.
        tokio::select! {
            biased;
            _ = token.cancelled() => return Err(cut_by_cancel()),
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

async fn reattach(shared: &Shared, c: &RequestCommand) -> Result<Event> {
    let (admitted, session) = {
        let inner = shared.lock();
        (inner.lifecycle.admit_reattach(), inner.session.clone())
    };
    if let Err(refusal) = admitted {
        return Ok(refusal_failure(&c.request_id, None, &refusal));
    }
    if let Some(session) = &session
        && !session_alive(shared, session).await
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

/// The session terminal input for `generation` goes to, if the rules admit it.
fn terminal_session(shared: &Shared, generation: u64) -> std::result::Result<SessionRef, Refusal> {
    let inner = shared.lock();
    inner.lifecycle.admit_terminal(generation)?;
    inner.session.clone().ok_or(Refusal::StaleGeneration {
        asked: generation,
        current: None,
    })
}

/// A `status` answering `request_id` with the status and state in force.
fn status_now(shared: &Shared, request_id: String) -> Event {
    let inner = shared.lock();
    Event::status(request_id, inner.lifecycle.status(), inner.state.clone())
}

async fn terminal_input(
    shared: &Shared,
    session: &SessionRef,
    c: TerminalInputCommand,
) -> Result<Event> {
    shared
        .engine
        .send_raw(&session.session_id, c.data.as_bytes())
        .await?;
    shared.screen.kick();
    Ok(status_now(shared, c.request_id))
}

async fn terminal_resize(
    shared: &Shared,
    session: &SessionRef,
    c: TerminalResizeCommand,
) -> Result<Event> {
    let cols = u16::try_from(c.cols).unwrap_or(1000);
    let rows = u16::try_from(c.rows).unwrap_or(1000);
    shared
        .engine
        .resize(&session.session_id, cols, rows)
        .await?;
    shared.screen.kick();
    Ok(status_now(shared, c.request_id))
}
