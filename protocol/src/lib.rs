//! BotMux remote-runner protocol v1: wire types, validation and JSONL framing.
//!
//! The host (BotMux) spawns a provider process and talks to it with one JSON object per
//! line: [`Command`]s on the provider's stdin, [`Event`]s on its stdout. Every line carries
//! the envelope `{"protocol":"botmux.remote-runner","version":1,"type":…}`.
//!
//! This crate is the one definition of "valid" shared by providers and the conformance
//! harness:
//! - typed messages ([`Command`], [`Event`], [`State`], [`Usage`], …) whose serde form is the
//!   wire form (absent optional fields are omitted, never `null`, except usage `context` /
//!   `tokens`, which are always present);
//! - [`decode_command`] / [`decode_event`], which validate every single-message rule and
//!   return a typed [`DecodeError`] (with the correlation ids it could still read);
//!   [`encode_command`] / [`encode_event`] produce one `\n`-terminated line;
//! - [`check_transition`] for the state rules that compare two states;
//! - [`lifecycle::ProviderLifecycle`], the provider side's rules as a sans-IO state machine
//!   (what to accept, what to refuse and with which code), and [`lifecycle::capabilities`];
//! - [`JsonlCodec`], [`CommandReader`], [`EventReader`] and [`LineWriter`] for framing, with
//!   typed recovery from oversized and broken lines.
//!
//! # A provider loop
//!
//! ```no_run
//! use futures::StreamExt;
//! use remote_runner_protocol::{
//!     Command, CommandReader, Event, FailureStatus, FrameError, LineWriter, SessionStatus, State,
//! };
//!
//! # async fn run(stdin: tokio::io::Stdin, stdout: tokio::io::Stdout) -> std::io::Result<()> {
//! let mut commands = CommandReader::new(stdin);
//! let mut out = LineWriter::new(stdout);
//! let mut state: Option<State> = None;
//! while let Some(item) = commands.next().await {
//!     let reply = match item {
//!         Ok(Command::Hello(c)) => Event::hello(c.request_id, "example", ["start", "resume",
//!             "turn", "cancel", "detach", "reattach", "status"]),
//!         Ok(Command::Start(c)) => {
//!             let s = State::new("example", 1).with_remote_session_id("compute-1");
//!             state = Some(s.clone());
//!             Event::ready(c.request_id, s)
//!         }
//!         Ok(Command::Turn(c)) => {
//!             out.send_event(&Event::status(&c.request_id, SessionStatus::Busy, None)).await?;
//!             out.send_event(&Event::progress(&c.turn_id, "working")).await?;
//!             Event::final_result(c.turn_id, format!("echo: {}", c.content), state.clone(), None)
//!         }
//!         Ok(Command::Cancel(c)) => Event::status(c.request_id, SessionStatus::Closed, state.clone()),
//!         Ok(other) => Event::failure(Some(other.request_id().to_owned()),
//!             other.turn_id().map(str::to_owned), "unsupported_command",
//!             "this provider does not handle that command", FailureStatus::Failed, false),
//!         // A bad line: answer with a correlated failure when the ids could be read.
//!         Err(FrameError::Decode(err)) => Event::failure(err.request_id.clone(),
//!             err.turn_id.clone(), err.code(), err.to_string(), FailureStatus::Failed, false),
//!         Err(FrameError::Io(err)) => return Err(err),
//!         Err(err) => Event::failure(None, None, err.code(), err.to_string(),
//!             FailureStatus::Failed, false),
//!     };
//!     out.send_event(&reply).await?;
//! }
//! # Ok(())
//! # }
//! ```

mod codec;
mod command;
mod envelope;
mod error;
mod event;
pub mod grammar;
pub mod json_text;
pub mod lifecycle;
mod limits;
pub mod operations;
mod outbound;
pub mod schema;
mod session_tool;
mod state;
mod usage;

pub use codec::{CommandReader, EventReader, FrameError, JsonlCodec, LineError, LineWriter};
pub use command::{
    CallerSource, Command, HelloCommand, ModelBackendVariant, OutboundMessageResultCommand,
    RequestCommand, ResumeCommand, ResumeMode, SenderType, SessionToolResultCommand, StartCommand,
    TerminalInputCommand, TerminalResizeCommand, TrustedCaller, TurnCommand, terminal_size,
};
pub use envelope::{
    COMMAND_TYPES, EVENT_TYPES, command_to_value, decode_command, decode_event, encode_command,
    encode_event, event_to_value,
};
pub use error::{DecodeError, DecodeErrorKind, Rule, ValidationError};
pub use event::{
    AccessUrlEvent, Event, FailureEvent, FailureStatus, FinalEvent, HelloEvent,
    LineageChangedEvent, OutboundMessageEvent, ProgressEvent, ReadyEvent, SessionStatus,
    SessionToolEvent, StatusEvent, TerminalScreenEvent, validate_access_url,
};
pub use limits::*;
pub use operations::{OperationKind, RateLimited, TurnOperations};
pub use outbound::{
    IMAGE_MIME_TYPES, Mention, OutboundImage, OutboundResult, ResponseKind,
    decode_canonical_base64, validate_content as validate_outbound_content, validate_file_name,
    validate_images,
};
pub use session_tool::{
    ATTACHMENT_PLACEHOLDER_PREFIX, Attachment, AttachmentKind, HistoryScope, SessionToolRequest,
    SessionToolResult, check_request_keys as check_session_tool_request_keys, validate_skill_path,
};
pub use state::{State, Transition, check_transition, sensitive_word, validate_provider_state};
pub use usage::{ContextUsage, TokenCounts, Usage, UsageSnapshot};
