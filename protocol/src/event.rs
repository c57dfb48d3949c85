//! Events: provider -> host, on the provider's stdout. The set of types is closed.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::command::terminal_size;
use crate::error::{Rule, ValidationError};
use crate::grammar;
use crate::limits::{MAX_ACCESS_URL_CHARS, MAX_TERMINAL_DATA_BYTES};
use crate::outbound::{self, Mention, OutboundImage, ResponseKind};
use crate::session_tool::SessionToolRequest;
use crate::state::State;
use crate::usage::Usage;

/// An event from the provider.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Event {
    /// Answer to the `hello` command.
    Hello(HelloEvent),
    /// Answer to `start`/`resume`: the session is ready, with its state.
    Ready(ReadyEvent),
    /// Streamed output of the active, ACKed turn.
    Progress(ProgressEvent),
    /// The turn's result; ends the turn.
    Final(FinalEvent),
    /// A correlated failure (see the correlation rules).
    Failure(FailureEvent),
    /// New state, applied at any time.
    LineageChanged(LineageChangedEvent),
    /// A URL where the session can be viewed.
    AccessUrl(AccessUrlEvent),
    /// A full terminal viewport snapshot.
    TerminalScreen(TerminalScreenEvent),
    /// Answer to a command that expects a status (including the turn ACK `busy`).
    Status(StatusEvent),
    /// Ask the host to post a non-final message for the active turn.
    OutboundMessage(OutboundMessageEvent),
    /// Ask the host to run an allowlisted read-only helper for the active turn.
    SessionTool(SessionToolEvent),
}

/// `hello` event.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HelloEvent {
    /// The hello command's request id.
    #[schemars(pattern(r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$"))]
    pub request_id: String,
    /// Provider name (`^[a-z][a-z0-9._-]{0,63}$`).
    #[schemars(pattern(r"^[a-z][a-z0-9._-]{0,63}$"))]
    pub provider: String,
    /// Capabilities, no duplicates; unknown well-formed names are allowed.
    pub capabilities: Vec<String>,
}

/// `ready` event.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReadyEvent {
    /// The start/resume command's request id (required).
    #[schemars(pattern(r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$"))]
    pub request_id: String,
    /// The state now in force.
    pub state: State,
}

/// `progress` event.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ProgressEvent {
    /// The active turn.
    pub turn_id: String,
    /// Incremental output (may be empty).
    pub content: String,
}

/// `final` event.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FinalEvent {
    /// The active turn.
    pub turn_id: String,
    /// The result text.
    pub content: String,
    /// New state, applied before usage is checked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<State>,
    /// Measured usage for the state's generation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
}

/// `failure.status`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum FailureStatus {
    /// Definitely did not succeed.
    Failed,
    /// May or may not have had effects.
    Ambiguous,
    /// Stopped by a cancel.
    Cancelled,
}

/// `failure` event.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FailureEvent {
    /// The command this answers (pre-ACK turn failure, or a non-turn command).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_id: Option<String>,
    /// The turn this ends (required after the ACK).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub turn_id: Option<String>,
    /// Stable code (`^[a-z][a-z0-9._-]{0,127}$`).
    #[schemars(pattern(r"^[a-z][a-z0-9._-]{0,127}$"))]
    pub code: String,
    /// Human message (<= 4096).
    pub message: String,
    /// Outcome certainty.
    pub status: FailureStatus,
    /// Whether a retry can help.
    pub retryable: bool,
}

/// `lineage_changed` event.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LineageChangedEvent {
    /// The new state.
    pub state: State,
}

/// `access_url` event.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AccessUrlEvent {
    /// An http(s) URL, <= 4096.
    pub url: String,
}

/// `terminal_screen` event: replaces the viewport.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TerminalScreenEvent {
    /// Compute generation (never ahead of the host's state).
    pub generation: u64,
    /// Strictly increasing within a generation.
    pub sequence: u64,
    /// 1..=1000.
    #[schemars(range(min = 1, max = 1000))]
    pub cols: u64,
    /// 1..=1000.
    #[schemars(range(min = 1, max = 1000))]
    pub rows: u64,
    /// The screen text (<= 4 MiB).
    pub snapshot: String,
}

/// Values of `status.status`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum SessionStatus {
    /// Starting up.
    Starting,
    /// Ready for a turn (answer to reattach).
    Ready,
    /// A turn was accepted (the turn ACK).
    Busy,
    /// Closed (answer to cancel).
    Closed,
    /// Detached (answer to detach).
    Detached,
    /// Broken.
    Error,
}

/// `status` event.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct StatusEvent {
    /// The command this answers (required).
    #[schemars(pattern(r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$"))]
    pub request_id: String,
    /// The status.
    pub status: SessionStatus,
    /// Current state (applied for cancel/detach/reattach answers only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<State>,
}

/// `outbound_message` event.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct OutboundMessageEvent {
    /// Idempotency key within the turn (id grammar).
    #[schemars(pattern(r"^[A-Za-z0-9][A-Za-z0-9._:/-]{0,255}$"))]
    pub operation_id: String,
    /// The active turn (id grammar).
    pub turn_id: String,
    /// The current state generation.
    pub generation: u64,
    /// BotMux Markdown, non-blank, <= 32 KiB.
    pub content: String,
    /// Progress or auxiliary.
    pub response_kind: ResponseKind,
    /// Mention policy.
    pub mention: Mention,
    /// Up to 4 images.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub images: Option<Vec<OutboundImage>>,
}

/// `session_tool` event.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SessionToolEvent {
    /// Idempotency key within the turn (id grammar).
    #[schemars(pattern(r"^[A-Za-z0-9][A-Za-z0-9._:/-]{0,255}$"))]
    pub operation_id: String,
    /// The active turn (id grammar).
    pub turn_id: String,
    /// The current state generation.
    pub generation: u64,
    /// The allowlisted request.
    pub request: SessionToolRequest,
}

impl Event {
    /// `hello` answering `request_id`.
    pub fn hello(
        request_id: impl Into<String>,
        provider: impl Into<String>,
        capabilities: impl IntoIterator<Item = impl Into<String>>,
    ) -> Self {
        Event::Hello(HelloEvent {
            request_id: request_id.into(),
            provider: provider.into(),
            capabilities: capabilities.into_iter().map(Into::into).collect(),
        })
    }

    /// `ready` answering `request_id`.
    pub fn ready(request_id: impl Into<String>, state: State) -> Self {
        Event::Ready(ReadyEvent {
            request_id: request_id.into(),
            state,
        })
    }

    /// `progress` for `turn_id`.
    pub fn progress(turn_id: impl Into<String>, content: impl Into<String>) -> Self {
        Event::Progress(ProgressEvent {
            turn_id: turn_id.into(),
            content: content.into(),
        })
    }

    /// `final` for `turn_id`.
    pub fn final_result(
        turn_id: impl Into<String>,
        content: impl Into<String>,
        state: Option<State>,
        usage: Option<Usage>,
    ) -> Self {
        Event::Final(FinalEvent {
            turn_id: turn_id.into(),
            content: content.into(),
            state,
            usage,
        })
    }

    /// `failure` with both correlation ids optional. The message is fitted to what the host
    /// accepts ([`grammar::fit_error_message`]: at most 4096 UTF-16 units, never blank), so no
    /// caller has to cut it.
    pub fn failure(
        request_id: Option<String>,
        turn_id: Option<String>,
        code: impl Into<String>,
        message: impl Into<String>,
        status: FailureStatus,
        retryable: bool,
    ) -> Self {
        let code = code.into();
        let message = grammar::fit_error_message(&message.into(), &code);
        Event::Failure(FailureEvent {
            request_id,
            turn_id,
            code,
            message,
            status,
            retryable,
        })
    }

    /// `failure` correlated to `command`: its `requestId`, and its `turnId` when it has one.
    /// Use it to refuse a command (a pre-ACK turn failure, a stale terminal generation, …).
    ///
    /// Result commands (`outbound_message_result`, `session_tool_result`) must never be
    /// answered, so for them the failure carries only the `turnId`: it ends that turn.
    pub fn failure_for(
        command: &crate::Command,
        code: impl Into<String>,
        message: impl Into<String>,
        status: FailureStatus,
        retryable: bool,
    ) -> Self {
        let request_id = command
            .expects_reply()
            .then(|| command.request_id().to_owned());
        Event::failure(
            request_id,
            command.turn_id().map(str::to_owned),
            code,
            message,
            status,
            retryable,
        )
    }

    /// `failure` ending an ACKed turn: carries the `turnId` (required after the ACK).
    pub fn turn_failure(
        turn_id: impl Into<String>,
        code: impl Into<String>,
        message: impl Into<String>,
        status: FailureStatus,
        retryable: bool,
    ) -> Self {
        Event::failure(None, Some(turn_id.into()), code, message, status, retryable)
    }

    /// `lineage_changed`.
    pub fn lineage_changed(state: State) -> Self {
        Event::LineageChanged(LineageChangedEvent { state })
    }

    /// `access_url`.
    pub fn access_url(url: impl Into<String>) -> Self {
        Event::AccessUrl(AccessUrlEvent { url: url.into() })
    }

    /// `terminal_screen`.
    pub fn terminal_screen(
        generation: u64,
        sequence: u64,
        cols: u64,
        rows: u64,
        snapshot: impl Into<String>,
    ) -> Self {
        Event::TerminalScreen(TerminalScreenEvent {
            generation,
            sequence,
            cols,
            rows,
            snapshot: snapshot.into(),
        })
    }

    /// `status` answering `request_id`.
    pub fn status(
        request_id: impl Into<String>,
        status: SessionStatus,
        state: Option<State>,
    ) -> Self {
        Event::Status(StatusEvent {
            request_id: request_id.into(),
            status,
            state,
        })
    }

    /// `outbound_message` without images.
    pub fn outbound_message(
        operation_id: impl Into<String>,
        turn_id: impl Into<String>,
        generation: u64,
        content: impl Into<String>,
        response_kind: ResponseKind,
        mention: Mention,
    ) -> Self {
        Event::OutboundMessage(OutboundMessageEvent {
            operation_id: operation_id.into(),
            turn_id: turn_id.into(),
            generation,
            content: content.into(),
            response_kind,
            mention,
            images: None,
        })
    }

    /// `session_tool`.
    pub fn session_tool(
        operation_id: impl Into<String>,
        turn_id: impl Into<String>,
        generation: u64,
        request: SessionToolRequest,
    ) -> Self {
        Event::SessionTool(SessionToolEvent {
            operation_id: operation_id.into(),
            turn_id: turn_id.into(),
            generation,
            request,
        })
    }

    /// The wire `type`.
    pub fn type_name(&self) -> &'static str {
        match self {
            Event::Hello(_) => "hello",
            Event::Ready(_) => "ready",
            Event::Progress(_) => "progress",
            Event::Final(_) => "final",
            Event::Failure(_) => "failure",
            Event::LineageChanged(_) => "lineage_changed",
            Event::AccessUrl(_) => "access_url",
            Event::TerminalScreen(_) => "terminal_screen",
            Event::Status(_) => "status",
            Event::OutboundMessage(_) => "outbound_message",
            Event::SessionTool(_) => "session_tool",
        }
    }

    /// The event's `requestId`, if it has one.
    pub fn request_id(&self) -> Option<&str> {
        match self {
            Event::Hello(e) => Some(&e.request_id),
            Event::Ready(e) => Some(&e.request_id),
            Event::Status(e) => Some(&e.request_id),
            Event::Failure(e) => e.request_id.as_deref(),
            _ => None,
        }
    }

    /// The event's `turnId`, if it has one.
    pub fn turn_id(&self) -> Option<&str> {
        match self {
            Event::Progress(e) => Some(&e.turn_id),
            Event::Final(e) => Some(&e.turn_id),
            Event::Failure(e) => e.turn_id.as_deref(),
            Event::OutboundMessage(e) => Some(&e.turn_id),
            Event::SessionTool(e) => Some(&e.turn_id),
            _ => None,
        }
    }

    /// The state the event carries, if any.
    pub fn state(&self) -> Option<&State> {
        match self {
            Event::Ready(e) => Some(&e.state),
            Event::LineageChanged(e) => Some(&e.state),
            Event::Final(e) => e.state.as_ref(),
            Event::Status(e) => e.state.as_ref(),
            _ => None,
        }
    }

    /// Checks every single-message rule (not the rules that need session context, such as
    /// the active turn or the current generation; see [`crate::check_transition`] and
    /// [`Usage::check_generation`]).
    pub fn validate(&self) -> Result<(), ValidationError> {
        match self {
            Event::Hello(e) => {
                grammar::request_id("requestId", &e.request_id)?;
                grammar::provider("provider", &e.provider)?;
                grammar::capability_list("capabilities", &e.capabilities)
            }
            Event::Ready(e) => {
                grammar::request_id("requestId", &e.request_id)?;
                e.state.validate()
            }
            Event::Progress(e) => grammar::turn_id("turnId", &e.turn_id),
            Event::Final(e) => {
                grammar::turn_id("turnId", &e.turn_id)?;
                if let Some(state) = &e.state {
                    state.validate()?;
                }
                if let Some(usage) = &e.usage {
                    usage.validate_at("usage")?;
                    if let Some(state) = &e.state {
                        usage.check_generation(state.generation)?;
                    }
                }
                Ok(())
            }
            Event::Failure(e) => {
                if let Some(id) = &e.request_id {
                    grammar::request_id("requestId", id)?;
                }
                if let Some(id) = &e.turn_id {
                    grammar::turn_id("turnId", id)?;
                }
                grammar::error_code("code", &e.code)?;
                grammar::error_message("message", &e.message)
            }
            Event::LineageChanged(e) => e.state.validate(),
            Event::AccessUrl(e) => validate_access_url("url", &e.url),
            Event::TerminalScreen(e) => {
                grammar::safe_integer("generation", e.generation)?;
                grammar::safe_integer("sequence", e.sequence)?;
                terminal_size("cols", e.cols)?;
                terminal_size("rows", e.rows)?;
                if e.snapshot.len() > MAX_TERMINAL_DATA_BYTES {
                    return Err(ValidationError::new(
                        Rule::TerminalDataSize,
                        "snapshot",
                        format!(
                            "is {} bytes; at most {MAX_TERMINAL_DATA_BYTES} are allowed",
                            e.snapshot.len()
                        ),
                    ));
                }
                Ok(())
            }
            Event::Status(e) => {
                grammar::request_id("requestId", &e.request_id)?;
                match &e.state {
                    Some(state) => state.validate(),
                    None => Ok(()),
                }
            }
            Event::OutboundMessage(e) => {
                grammar::id("operationId", &e.operation_id)?;
                grammar::id("turnId", &e.turn_id)?;
                grammar::safe_integer("generation", e.generation)?;
                outbound::validate_content("content", &e.content)?;
                match &e.images {
                    Some(images) => outbound::validate_images("images", images),
                    None => Ok(()),
                }
            }
            Event::SessionTool(e) => {
                grammar::id("operationId", &e.operation_id)?;
                grammar::id("turnId", &e.turn_id)?;
                grammar::safe_integer("generation", e.generation)?;
                e.request.validate_at("request")
            }
        }
    }
}

/// `access_url.url`: non-blank, <= 4096 UTF-16 units, `http://` or `https://` with a host.
pub fn validate_access_url(path: &str, url: &str) -> Result<(), ValidationError> {
    let trimmed = grammar::non_empty(Rule::AccessUrl, path, url, MAX_ACCESS_URL_CHARS)?;
    let lower = trimmed.to_ascii_lowercase();
    let rest = lower
        .strip_prefix("https://")
        .or_else(|| lower.strip_prefix("http://"));
    let host_ok = rest.is_some_and(|rest| {
        let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
        let host = authority.rsplit('@').next().unwrap_or_default();
        !host.is_empty()
            && !host.starts_with(':')
            && !authority
                .chars()
                .any(|c| c.is_whitespace() || c.is_control())
    });
    if host_ok {
        Ok(())
    } else {
        Err(ValidationError::new(
            Rule::AccessUrl,
            path,
            format!("{trimmed:?} is not an http:// or https:// URL with a host"),
        ))
    }
}
