//! Every `failure` the provider sends is rendered here: its code, status, retryability and
//! message. The engine's errors become the protocol's terms (a lost link while work may run is
//! `ambiguous`, the message carries the engine's hint in the provider's words, [`hint`]); the
//! protocol's own refusals come from the protocol crate's [`Refusal`]; and the provider's own
//! failures (a resumed state that is not this chat's, a lost command, a failed agent, a line
//! that could not be read, an event it refused to write) are typed here. The engine's codes
//! know nothing of the protocol. Of the server's modules this one uses only [`hint`] and `text`.

pub mod hint;

use remote_runner_engine::engine::CommandRecord;
use remote_runner_engine::error::{Error, ErrorCode};
use remote_runner_protocol::lifecycle::Refusal;
use remote_runner_protocol::{DecodeErrorKind, Event, FailureStatus, FrameError};

/// Failure code: the state names a session this provider did not create for this chat.
pub const NOT_BOUND: &str = "state_not_bound";
/// Failure code: the state names a machine other than the one this provider is configured for.
pub const FOREIGN_MACHINE: &str = "state_foreign_machine";
/// Failure code: the state was persisted by another provider.
pub const PROVIDER_MISMATCH: &str = "state_provider_mismatch";
/// Failure code: the turn's command was lost but the session lives on (retry the turn).
pub const COMMAND_LOST: &str = "command_lost";
/// Failure code: the agent command of an agent-mode turn did not exit 0.
pub const AGENT_FAILED: &str = "agent_failed";
/// Failure code: the host's `cancel` cut the work short.
pub const CANCELLED: &str = "cancelled";

/// Why the provider could not do what a command asked.
#[derive(Debug)]
pub enum Failure {
    /// The engine failed.
    Engine(Error),
    /// The protocol's rules refuse the command in the provider's current state.
    Refused(Refusal),
    /// `resume` offered a state this provider may not adopt or destroy: nothing was touched.
    Unbound(Unbound),
    /// `resume` offered a state persisted by another provider: nothing was touched.
    ForeignProvider { provider: String, ours: String },
}

impl From<Error> for Failure {
    fn from(err: Error) -> Self {
        Failure::Engine(err)
    }
}

impl From<Refusal> for Failure {
    fn from(refusal: Refusal) -> Self {
        Failure::Refused(refusal)
    }
}

impl From<Unbound> for Failure {
    fn from(unbound: Unbound) -> Self {
        Failure::Unbound(unbound)
    }
}

impl Failure {
    /// The correlated `failure` event.
    pub fn event(&self, request_id: Option<&str>, turn_id: Option<&str>) -> Event {
        match self {
            Failure::Engine(err) => engine(request_id, turn_id, err),
            Failure::Refused(refusal) => refused(request_id, turn_id, refusal),
            Failure::Unbound(unbound) => failed(
                request_id,
                turn_id,
                unbound.code(),
                unbound.message(),
                false,
            ),
            Failure::ForeignProvider { provider, ours } => failed(
                request_id,
                turn_id,
                PROVIDER_MISMATCH,
                format!(
                    "the persisted state belongs to provider {provider:?}, not {ours:?}; start a \
                     new session or set REMOTE_RUNNER_PROVIDER_NAME to match"
                ),
                false,
            ),
        }
    }
}

/// A `failed` failure event with `code` and `message`.
fn failed(
    request_id: Option<&str>,
    turn_id: Option<&str>,
    code: &str,
    message: String,
    retryable: bool,
) -> Event {
    Event::failure(
        request_id.map(str::to_owned),
        turn_id.map(str::to_owned),
        code,
        message,
        FailureStatus::Failed,
        retryable,
    )
}

/// The failure event for an engine error. Runner errors are `failed`; a lost link while work
/// may be running is `ambiguous`; work cut short is `cancelled`. The protocol crate fits the
/// message to the host's limit (UTF-16 units, never blank).
pub fn engine(request_id: Option<&str>, turn_id: Option<&str>, err: &Error) -> Event {
    let status = match err.code {
        ErrorCode::ConnectionLost => FailureStatus::Ambiguous,
        ErrorCode::Cancelled => FailureStatus::Cancelled,
        _ => FailureStatus::Failed,
    };
    Event::failure(
        request_id.map(str::to_owned),
        turn_id.map(str::to_owned),
        err.code.as_str(),
        hint::message(err),
        status,
        err.retryable,
    )
}

/// The failure for a command the protocol's rules refuse.
pub fn refused(request_id: Option<&str>, turn_id: Option<&str>, refusal: &Refusal) -> Event {
    failed(
        request_id,
        turn_id,
        refusal.code(),
        refusal.message(),
        refusal.retryable(),
    )
}

/// Why a resumed state was refused (see `binding`): the state proves nothing by itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unbound {
    /// The state names machine `named`, but this provider is configured for `ours`.
    ForeignMachine { named: String, ours: String },
    /// The state names a session this provider has no binding for.
    NoBinding { session_id: String },
    /// The binding names another BotMux session than `chat`.
    OtherChat { session_id: String, chat: String },
    /// The binding names another machine.
    OtherMachine { session_id: String },
    /// `providerState` does not name a session this provider could have made.
    Malformed,
}

impl Unbound {
    pub fn code(&self) -> &'static str {
        match self {
            Unbound::ForeignMachine { .. } => FOREIGN_MACHINE,
            _ => NOT_BOUND,
        }
    }

    /// What happened and what to do (nothing was touched, so not retryable as is).
    pub fn message(&self) -> String {
        let not_bound = |session_id: &str, why: &str| {
            format!(
                "the persisted state names session {session_id:?}, which {why}; nothing was \
                 adopted or destroyed. Start a new session for this chat"
            )
        };
        match self {
            Unbound::ForeignMachine { named, ours } => format!(
                "the persisted state names machine {named:?}, but this provider is configured for \
                 {ours:?}; resume it with a provider configured for that machine \
                 (REMOTE_RUNNER_MACHINE), or start a new session"
            ),
            Unbound::NoBinding { session_id } => not_bound(
                session_id,
                "this provider did not create (a CLI session, another provider's state \
                 directory, or a forged state)",
            ),
            Unbound::OtherChat { session_id, chat } => not_bound(
                session_id,
                &format!("belongs to another BotMux session, not {chat:?}"),
            ),
            Unbound::OtherMachine { session_id } => {
                not_bound(session_id, "was created on another machine")
            }
            Unbound::Malformed => "the persisted state's providerState does not name a session \
                 this provider could have made (sessionId and machineId must both be present and \
                 sessionId must be an engine session id); start a new session"
                .to_string(),
        }
    }
}

/// `start` after a session exists: the host sends it once per provider process.
pub fn second_start() -> Error {
    Error::new(
        ErrorCode::AlreadyExists,
        "this provider already runs a session; start is sent once per provider process",
    )
}

/// The failure for work a `cancel` cut short.
pub fn cut_by_cancel() -> Error {
    Error::new(
        ErrorCode::Cancelled,
        "cut short by the host's cancel, which closes the session; resume with resumeMode \
         rebuild to open a new one",
    )
}

/// The running turn's failure when the host's `cancel` stopped it.
pub fn turn_cancelled(turn_id: String) -> Event {
    Event::failure(
        None,
        Some(turn_id),
        CANCELLED,
        "the turn was cancelled by the host's cancel; its command was stopped",
        FailureStatus::Cancelled,
        false,
    )
}

/// What a rebuild did to the session the resumed state named.
#[derive(Debug)]
pub enum OldSession {
    None,
    Destroyed(String),
    AlreadyGone(String),
    /// Its id and why it could not be destroyed.
    NotDestroyed(String, String),
}

impl OldSession {
    /// A failed rebuild says truthfully what became of the old session.
    pub fn explain(&self, err: Error) -> Error {
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

/// A turn's command ended with the session shell (`why`), and the session is still there.
pub fn command_lost(turn_id: &str, why: &str) -> Event {
    failed(
        None,
        Some(turn_id),
        COMMAND_LOST,
        format!("{why}; the session is still there: send the turn again"),
        true,
    )
}

/// A turn's command ended with the session itself (`why`).
pub fn session_ended(turn_id: &str, why: &str) -> Event {
    let err = Error::new(
        ErrorCode::SessionLost,
        format!("{why}; the next turn starts a new session (generation + 1)"),
    );
    engine(None, Some(turn_id), &err)
}

/// The link dropped while a turn's command ran (command `command_id` of session `session_id`,
/// its state in `remote_state_dir`) and did not come back: the command may still run. Other
/// errors are returned as they are.
pub fn lost_while_streaming(
    err: Error,
    session_id: &str,
    command_id: &str,
    remote_state_dir: &str,
) -> Error {
    if !remote_runner_engine::engine::retry::is_link_error(&err) {
        return err;
    }
    Error::new(
        ErrorCode::ConnectionLost,
        format!(
            "lost the connection while the turn's command was running and could not reconnect \
             ({}). The command may still be running on the machine: command {command_id} in \
             session {session_id}, state in {remote_state_dir}; `remote-runner session command \
             show --session {session_id} --command-id {command_id}` shows its result once the \
             machine is reachable",
            err.message,
        ),
    )
}

/// An agent-mode turn whose agent command did not exit 0: the tail of its stderr.
pub fn agent_failed(turn_id: &str, rec: &CommandRecord) -> Event {
    let (stderr, _) = super::text::tail(&rec.stderr, 1500);
    let err = Error::new(
        ErrorCode::RemoteError,
        format!(
            "the agent command {} ({}); stderr: {}",
            rec.exit_code.map_or_else(
                || rec.status.as_str().to_string(),
                |c| format!("exited with {c}")
            ),
            rec.command_id,
            if stderr.trim().is_empty() {
                "(empty)"
            } else {
                stderr.trim()
            }
        ),
    );
    let mut event = engine(None, Some(turn_id), &err);
    if let Event::Failure(f) = &mut event {
        f.code = AGENT_FAILED.into();
        f.status = FailureStatus::Failed;
    }
    event
}

/// A failure for a line that could not be decoded, correlated when its ids could be read. A
/// command type protocol v1 does not have gets `unsupported_command`, the code the host's
/// reference runner answers it with.
pub fn bad_line(err: &FrameError) -> Event {
    let (request_id, turn_id) = match err.decode_error() {
        Some(d) => (d.request_id.clone(), d.turn_id.clone()),
        None => (None, None),
    };
    let code = match err.decode_error().map(|d| &d.kind) {
        Some(DecodeErrorKind::UnknownType { type_name: Some(_) }) => "unsupported_command",
        _ => err.code(),
    };
    Event::failure(
        request_id,
        turn_id,
        code,
        err.to_string(),
        FailureStatus::Failed,
        false,
    )
}

/// A correlated internal failure to send instead of an event that failed validation (`why`),
/// when the event carried ids the host is waiting on.
pub fn invalid_event(event: &Event, why: &str) -> Option<Event> {
    let request_id = event.request_id().map(str::to_owned);
    let turn_id = event.turn_id().map(str::to_owned);
    if request_id.is_none() && turn_id.is_none() {
        return None;
    }
    // Event::failure fits the message to the host's limit (UTF-16 units, on a char boundary).
    let message = format!(
        "internal error: the provider built an invalid {} event ({why})",
        event.type_name()
    );
    Some(Event::failure(
        request_id,
        turn_id,
        "internal_error",
        message,
        FailureStatus::Failed,
        false,
    ))
}
