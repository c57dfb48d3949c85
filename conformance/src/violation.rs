//! What a scenario reports when a provider breaks a rule, and the stable rule names.

use serde::Serialize;

/// Stable snake_case names of the host rules the harness checks beyond single-message
/// validation. Single-message rules use the protocol crate's [`remote_runner_protocol::Rule`]
/// names (`field_type`, `duplicate_capability`, `provider_state_sensitive_key`, ...).
pub mod rule {
    /// A stdout line that is not JSON, or not a JSON object.
    pub const NON_PROTOCOL_LINE: &str = "non_protocol_line";
    /// A stdout line with the wrong `protocol` or `version`.
    pub const PROTOCOL_MISMATCH: &str = "protocol_mismatch";
    /// A stdout line with an event type outside the closed set.
    pub const UNKNOWN_EVENT_TYPE: &str = "unknown_event_type";
    /// A stdout line longer than 4 MiB.
    pub const LINE_TOO_LONG: &str = "line_too_long";
    /// stdout ended inside a line.
    pub const UNTERMINATED_LINE: &str = "unterminated_line";
    /// The provider exited (or closed stdout) while the host still expected something.
    pub const PROVIDER_EXITED: &str = "provider_exited";
    /// The provider could not be started.
    pub const SPAWN_FAILED: &str = "spawn_failed";
    /// The provider did not read a command from its stdin within the operation deadline.
    pub const STDIN_NOT_READ: &str = "stdin_not_read";
    /// No reply within the handshake or operation deadline.
    pub const REPLY_TIMEOUT: &str = "reply_timeout";
    /// A turn did not end (final or failure) within the turn deadline.
    pub const TURN_TIMEOUT: &str = "turn_timeout";
    /// The provider did not exit in bounded time after stdin closed.
    pub const NO_EXIT_AFTER_EOF: &str = "no_exit_after_eof";
    /// The provider did not exit in bounded time after SIGTERM/SIGINT/SIGHUP with stdin open.
    pub const NO_EXIT_AFTER_SIGNAL: &str = "no_exit_after_signal";
    /// A command was answered only after a start in flight ended (the loop waited on it).
    pub const REPLY_WAITED_ON_START: &str = "reply_waited_on_start";
    /// A cancel did not end the start in flight promptly.
    pub const START_NOT_ENDED_BY_CANCEL: &str = "start_not_ended_by_cancel";
    /// An event answered a requestId the harness never sent.
    pub const UNKNOWN_REQUEST_ID: &str = "unknown_request_id";
    /// An event answered a request that was already answered (e.g. a second busy ACK).
    pub const REQUEST_ALREADY_ANSWERED: &str = "request_already_answered";
    /// An event carried the requestId of an outbound_message_result/session_tool_result.
    pub const REPLY_TO_SETTLEMENT: &str = "reply_to_settlement";
    /// The reply has the wrong type for the request (e.g. `status` answering `hello`).
    pub const WRONG_REPLY_TYPE: &str = "wrong_reply_type";
    /// A status with the wrong value (busy for a turn, closed for cancel, ...).
    pub const UNEXPECTED_STATUS_VALUE: &str = "unexpected_status_value";
    /// The hello event lacks a capability the host requires.
    pub const MISSING_REQUIRED_CAPABILITY: &str = "missing_required_capability";
    /// An event arrived before the hello handshake completed.
    pub const EVENT_BEFORE_HANDSHAKE: &str = "event_before_handshake";
    /// progress/final/outbound_message/session_tool before the turn's busy ACK.
    pub const EVENT_BEFORE_ACK: &str = "event_before_ack";
    /// An event names a turnId the harness never sent.
    pub const UNKNOWN_TURN_ID: &str = "unknown_turn_id";
    /// An event names a turn that already ended.
    pub const TURN_NOT_ACTIVE: &str = "turn_not_active";
    /// A failure's turnId differs from the turn of its requestId.
    pub const TURN_ID_MISMATCH: &str = "turn_id_mismatch";
    /// A failure after the ACK that carries only the requestId.
    pub const POST_ACK_FAILURE_WITHOUT_TURN_ID: &str = "post_ack_failure_without_turn_id";
    /// A failure with neither requestId nor turnId.
    pub const UNCORRELATED_FAILURE: &str = "uncorrelated_failure";
    /// A second turn was ACKed while another turn was still running.
    pub const TURN_OVERLAP: &str = "turn_overlap";
    /// A successful final before every host result of the turn was written back.
    pub const FINAL_BEFORE_RESULTS: &str = "final_before_results";
    /// outbound_message/session_tool without the capability in hello.
    pub const CAPABILITY_NOT_ADVERTISED: &str = "capability_not_advertised";
    /// outbound_message/session_tool for a generation other than the state's.
    pub const OPERATION_GENERATION_MISMATCH: &str = "operation_generation_mismatch";
    /// A terminal_screen for a generation ahead of the host's state.
    pub const SCREEN_GENERATION_AHEAD: &str = "screen_generation_ahead";
    /// A terminal_screen of a newly raised generation before the host's next command.
    pub const EARLY_NEW_GENERATION_SCREEN: &str = "early_new_generation_screen";
    /// An event or usage that needs a state before the provider reported one.
    pub const NO_STATE_YET: &str = "no_state_yet";
    /// agentThreadId was dropped or changed by resume.
    pub const AGENT_THREAD_ID_NOT_KEPT: &str = "agent_thread_id_not_kept";
    /// A command that must be refused (wrong generation, provider mismatch, ...) was accepted.
    pub const NOT_REFUSED: &str = "not_refused";
    /// A well-formed command the scenario needs accepted was refused with a failure.
    pub const UNEXPECTED_REFUSAL: &str = "unexpected_refusal";
    /// A plain turn (`echo conformance-<n>`) ended with a failure instead of a final.
    pub const TURN_FAILED: &str = "turn_failed";
    /// The provider stopped answering after a bad input line.
    pub const NOT_USABLE_AFTER: &str = "not_usable_after";

    /// Warning: a terminal_screen of an older generation (the host ignores it).
    pub const STALE_SCREEN_IGNORED: &str = "stale_screen_ignored";
    /// Warning: a terminal_screen whose sequence did not increase (the host ignores it).
    pub const SCREEN_SEQUENCE_NOT_INCREASING: &str = "screen_sequence_not_increasing";
}

/// Longest offending line kept in a report, in characters.
const MAX_LINE_CHARS: usize = 400;

/// A broken rule: the scenario fails with it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Violation {
    /// Stable snake_case rule name.
    pub rule: String,
    /// What happened.
    pub message: String,
    /// What the host expected instead.
    pub expected: String,
    /// The offending stdout line, truncated.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub line: Option<String>,
}

impl Violation {
    /// A violation of `rule`.
    pub fn new(rule: &str, message: impl Into<String>, expected: impl Into<String>) -> Self {
        Violation {
            rule: rule.to_owned(),
            message: message.into(),
            expected: expected.into(),
            line: None,
        }
    }

    /// Attaches the offending line (truncated).
    pub fn with_line(mut self, line: &str) -> Self {
        self.line = Some(truncate(line));
        self
    }
}

/// Something the host tolerates but ignores; reported, never a failure.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Warning {
    /// Stable snake_case name.
    pub rule: String,
    /// What happened.
    pub message: String,
    /// The line, truncated.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub line: Option<String>,
}

/// Why a scenario stopped early.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stop {
    /// A rule was broken.
    Fail(Box<Violation>),
    /// The scenario does not apply to this provider (reason).
    NotApplicable(String),
}

impl From<Violation> for Stop {
    fn from(v: Violation) -> Self {
        Stop::Fail(Box::new(v))
    }
}

/// Result type of scenario steps.
pub type Step<T> = Result<T, Stop>;

/// Shortens a line for a report, marking the cut.
pub fn truncate(line: &str) -> String {
    let line = line.trim_end();
    if line.chars().count() <= MAX_LINE_CHARS {
        line.to_owned()
    } else {
        let total = line.len();
        let head: String = line.chars().take(MAX_LINE_CHARS).collect();
        format!("{head}… ({total} bytes)")
    }
}
