//! Commands: host -> provider, on the provider's stdin.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::error::{Rule, ValidationError};
use crate::grammar;
use crate::limits::{MAX_TERMINAL_DATA_BYTES, MAX_TERMINAL_SIZE};
use crate::outbound::OutboundResult;
use crate::session_tool::SessionToolResult;
use crate::state::State;

/// A command from the host. Every command carries a `requestId`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Command {
    /// Handshake; answer with a `hello` event.
    Hello(HelloCommand),
    /// New session; answer with `ready`.
    Start(StartCommand),
    /// Session with persisted state; answer with `ready`.
    Resume(ResumeCommand),
    /// One turn of input; answer with `status: busy` (the ACK) or a pre-ACK `failure`.
    Turn(TurnCommand),
    /// Close the session; answer with `status: closed`.
    Cancel(RequestCommand),
    /// Daemon shutdown: keep remote state; answer with `status: detached`.
    Detach(RequestCommand),
    /// Undo a detach; answer with `status: ready`.
    Reattach(RequestCommand),
    /// Ask for the current status; answer with `status`.
    Status(RequestCommand),
    /// Raw terminal input for a generation; answer with `status`.
    TerminalInput(TerminalInputCommand),
    /// Terminal size for a generation; answer with `status`.
    TerminalResize(TerminalResizeCommand),
    /// Settles an outbound_message. Never answered.
    OutboundMessageResult(OutboundMessageResultCommand),
    /// Settles a session_tool. Never answered.
    SessionToolResult(SessionToolResultCommand),
}

/// `hello`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HelloCommand {
    /// Correlation id.
    #[schemars(pattern(r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$"))]
    pub request_id: String,
    /// The host's session id.
    pub session_id: String,
    /// Capabilities the provider must advertise.
    pub required_capabilities: Vec<String>,
}

/// Backend variant requested by the host.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ModelBackendVariant {
    /// Standard.
    Standard,
    /// Max.
    Max,
}

/// `start`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct StartCommand {
    /// Correlation id.
    #[schemars(pattern(r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$"))]
    pub request_id: String,
    /// The host's session id.
    pub session_id: String,
    /// The session's working directory on the host.
    pub cwd: String,
    /// Model hint; use only if the runtime supports it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// Backend variant hint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_backend_variant: Option<ModelBackendVariant>,
    /// Reasoning effort hint (`low|medium|high|xhigh|max|ultra`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_effort: Option<String>,
}

/// How to resume.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ResumeMode {
    /// Take over the still-living remote resource (same as absent).
    Reattach,
    /// The old resource was cancelled: create a new one and raise the generation.
    Rebuild,
}

/// `resume`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ResumeCommand {
    /// Correlation id.
    #[schemars(pattern(r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$"))]
    pub request_id: String,
    /// The host's session id.
    pub session_id: String,
    /// The session's working directory on the host.
    pub cwd: String,
    /// The persisted state.
    pub state: State,
    /// Absent means reattach.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resume_mode: Option<ResumeMode>,
    /// Model hint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// Backend variant hint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_backend_variant: Option<ModelBackendVariant>,
    /// Reasoning effort hint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_effort: Option<String>,
}

impl ResumeCommand {
    /// The effective mode (absent means reattach).
    pub fn mode(&self) -> ResumeMode {
        self.resume_mode.unwrap_or(ResumeMode::Reattach)
    }
}

/// Where a scheduled turn came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum CallerSource {
    /// A schedule created by the user.
    ScheduleCreator,
}

/// Who sent the message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum SenderType {
    /// A person.
    User,
    /// A bot.
    Bot,
}

/// Identity of the caller, as established by the host.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TrustedCaller {
    /// Requesting user's open id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_user_open_id: Option<String>,
    /// Requesting user's union id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_user_union_id: Option<String>,
    /// Requesting Lark app id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_lark_app_id: Option<String>,
    /// Origin of a scheduled turn.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<CallerSource>,
    /// Scheduled task id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_id: Option<String>,
    /// User or bot.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sender_type: Option<SenderType>,
}

/// `turn`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TurnCommand {
    /// Correlation id of the command (the ACK echoes it).
    #[schemars(pattern(r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$"))]
    pub request_id: String,
    /// The turn (progress/final/failure carry it).
    pub turn_id: String,
    /// The user's input.
    pub content: String,
    /// Caller identity.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trusted_caller: Option<TrustedCaller>,
}

/// `cancel`, `detach`, `reattach` and `status`: just a request id.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RequestCommand {
    /// Correlation id.
    #[schemars(pattern(r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$"))]
    pub request_id: String,
}

/// `terminal_input`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TerminalInputCommand {
    /// Correlation id.
    #[schemars(pattern(r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$"))]
    pub request_id: String,
    /// Generation the input is meant for; refuse any other.
    pub generation: u64,
    /// Raw terminal bytes (as a string), non-empty, <= 4 MiB.
    pub data: String,
}

/// `terminal_resize`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TerminalResizeCommand {
    /// Correlation id.
    #[schemars(pattern(r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$"))]
    pub request_id: String,
    /// Generation the resize is meant for.
    pub generation: u64,
    /// 1..=1000.
    #[schemars(range(min = 1, max = 1000))]
    pub cols: u64,
    /// 1..=1000.
    #[schemars(range(min = 1, max = 1000))]
    pub rows: u64,
}

/// `outbound_message_result`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct OutboundMessageResultCommand {
    /// Correlation id (never answered).
    #[schemars(pattern(r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$"))]
    pub request_id: String,
    /// The outbound_message's operation id.
    #[schemars(pattern(r"^[A-Za-z0-9][A-Za-z0-9._:/-]{0,255}$"))]
    pub operation_id: String,
    /// Its turn.
    pub turn_id: String,
    /// Its generation.
    pub generation: u64,
    /// What happened.
    pub result: OutboundResult,
}

/// `session_tool_result`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SessionToolResultCommand {
    /// Correlation id (never answered).
    #[schemars(pattern(r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$"))]
    pub request_id: String,
    /// The session_tool's operation id.
    #[schemars(pattern(r"^[A-Za-z0-9][A-Za-z0-9._:/-]{0,255}$"))]
    pub operation_id: String,
    /// Its turn.
    pub turn_id: String,
    /// Its generation.
    pub generation: u64,
    /// What happened.
    pub result: SessionToolResult,
}

impl Command {
    /// The wire `type`.
    pub fn type_name(&self) -> &'static str {
        match self {
            Command::Hello(_) => "hello",
            Command::Start(_) => "start",
            Command::Resume(_) => "resume",
            Command::Turn(_) => "turn",
            Command::Cancel(_) => "cancel",
            Command::Detach(_) => "detach",
            Command::Reattach(_) => "reattach",
            Command::Status(_) => "status",
            Command::TerminalInput(_) => "terminal_input",
            Command::TerminalResize(_) => "terminal_resize",
            Command::OutboundMessageResult(_) => "outbound_message_result",
            Command::SessionToolResult(_) => "session_tool_result",
        }
    }

    /// Every command's `requestId`.
    pub fn request_id(&self) -> &str {
        match self {
            Command::Hello(c) => &c.request_id,
            Command::Start(c) => &c.request_id,
            Command::Resume(c) => &c.request_id,
            Command::Turn(c) => &c.request_id,
            Command::Cancel(c) | Command::Detach(c) | Command::Reattach(c) | Command::Status(c) => {
                &c.request_id
            }
            Command::TerminalInput(c) => &c.request_id,
            Command::TerminalResize(c) => &c.request_id,
            Command::OutboundMessageResult(c) => &c.request_id,
            Command::SessionToolResult(c) => &c.request_id,
        }
    }

    /// The command's `turnId`, for turn and operation results.
    pub fn turn_id(&self) -> Option<&str> {
        match self {
            Command::Turn(c) => Some(&c.turn_id),
            Command::OutboundMessageResult(c) => Some(&c.turn_id),
            Command::SessionToolResult(c) => Some(&c.turn_id),
            _ => None,
        }
    }

    /// Whether the provider must answer this command (results are settlement notices).
    pub fn expects_reply(&self) -> bool {
        !matches!(
            self,
            Command::OutboundMessageResult(_) | Command::SessionToolResult(_)
        )
    }

    /// Checks every single-message rule.
    pub fn validate(&self) -> Result<(), ValidationError> {
        grammar::request_id("requestId", self.request_id())?;
        match self {
            Command::Hello(c) => {
                non_blank("sessionId", &c.session_id)?;
                grammar::capability_list("requiredCapabilities", &c.required_capabilities)
            }
            Command::Start(c) => {
                non_blank("sessionId", &c.session_id)?;
                non_blank("cwd", &c.cwd)?;
                optional_label("model", c.model.as_deref(), 256)?;
                optional_label("reasoningEffort", c.reasoning_effort.as_deref(), 64)
            }
            Command::Resume(c) => {
                non_blank("sessionId", &c.session_id)?;
                non_blank("cwd", &c.cwd)?;
                c.state.validate()?;
                optional_label("model", c.model.as_deref(), 256)?;
                optional_label("reasoningEffort", c.reasoning_effort.as_deref(), 64)
            }
            Command::Turn(c) => grammar::turn_id("turnId", &c.turn_id),
            Command::Cancel(_) | Command::Detach(_) | Command::Reattach(_) | Command::Status(_) => {
                Ok(())
            }
            Command::TerminalInput(c) => {
                grammar::safe_integer("generation", c.generation)?;
                if c.data.is_empty() || c.data.len() > MAX_TERMINAL_DATA_BYTES {
                    return Err(ValidationError::new(
                        Rule::TerminalDataSize,
                        "data",
                        format!(
                            "is {} bytes; terminal input must be 1..={MAX_TERMINAL_DATA_BYTES} bytes",
                            c.data.len()
                        ),
                    ));
                }
                Ok(())
            }
            Command::TerminalResize(c) => {
                grammar::safe_integer("generation", c.generation)?;
                terminal_size("cols", c.cols)?;
                terminal_size("rows", c.rows)
            }
            Command::OutboundMessageResult(c) => {
                grammar::id("operationId", &c.operation_id)?;
                grammar::id("turnId", &c.turn_id)?;
                grammar::safe_integer("generation", c.generation)?;
                c.result.validate_at("result")
            }
            Command::SessionToolResult(c) => {
                grammar::id("operationId", &c.operation_id)?;
                grammar::id("turnId", &c.turn_id)?;
                grammar::safe_integer("generation", c.generation)?;
                c.result.validate_at("result")
            }
        }
    }
}

fn non_blank(path: &str, value: &str) -> Result<(), ValidationError> {
    grammar::non_empty(Rule::NonEmptyString, path, value, usize::MAX).map(|_| ())
}

fn optional_label(path: &str, value: Option<&str>, max: usize) -> Result<(), ValidationError> {
    match value {
        Some(v) => grammar::non_empty(Rule::NonEmptyString, path, v, max).map(|_| ()),
        None => Ok(()),
    }
}

/// Terminal cols/rows: 1..=1000.
pub fn terminal_size(path: &str, value: u64) -> Result<(), ValidationError> {
    if (1..=MAX_TERMINAL_SIZE).contains(&value) {
        Ok(())
    } else {
        Err(ValidationError::new(
            Rule::TerminalSize,
            path,
            format!("is {value}; terminal sizes are 1..={MAX_TERMINAL_SIZE}"),
        ))
    }
}
