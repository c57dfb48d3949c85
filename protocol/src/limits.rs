//! Protocol limits, all in one place. Byte limits are UTF-8 bytes unless stated.

/// Envelope `protocol` value.
pub const PROTOCOL: &str = "botmux.remote-runner";
/// Envelope `version` value.
pub const PROTOCOL_VERSION: u64 = 1;
/// Largest line in either direction, excluding the `\n` (4 MiB).
pub const MAX_LINE_BYTES: usize = 4 * 1024 * 1024;
/// Largest serialized `providerState` (64 KiB).
pub const MAX_PROVIDER_STATE_BYTES: usize = 64 * 1024;
/// Deepest `providerState` nesting; the providerState object itself is depth 0.
pub const MAX_PROVIDER_STATE_DEPTH: usize = 16;
/// Longest `providerState` key, in UTF-16 units.
pub const MAX_PROVIDER_STATE_KEY_CHARS: usize = 256;
/// Largest outbound_message content (32 KiB).
pub const MAX_OUTBOUND_MESSAGE_BYTES: usize = 32 * 1024;
/// Most images on one outbound_message.
pub const MAX_OUTBOUND_IMAGES: usize = 4;
/// Most decoded image bytes on one outbound_message (2 MiB).
pub const MAX_OUTBOUND_IMAGE_BYTES: usize = 2 * 1024 * 1024;
/// Largest session_tool_result stdout or stderr (512 KiB).
pub const MAX_SESSION_TOOL_TEXT_BYTES: usize = 512 * 1024;
/// Most decoded attachment bytes on one session_tool_result (512 KiB).
pub const MAX_SESSION_TOOL_ATTACHMENT_BYTES: usize = 512 * 1024;
/// Most attachments on one session_tool_result.
pub const MAX_SESSION_TOOL_ATTACHMENTS: usize = 8;
/// Largest terminal snapshot or terminal input (4 MiB).
pub const MAX_TERMINAL_DATA_BYTES: usize = 4 * 1024 * 1024;
/// Largest terminal cols/rows.
pub const MAX_TERMINAL_SIZE: u64 = 1000;
/// Longest access_url, in UTF-16 units.
pub const MAX_ACCESS_URL_CHARS: usize = 4096;
/// Largest integer the host (JavaScript) represents exactly: 2^53-1.
pub const MAX_SAFE_INTEGER: u64 = (1 << 53) - 1;
/// `history.limit` range upper bound.
pub const MAX_HISTORY_LIMIT: u64 = 100;
/// Longest `skill.read.path`, in UTF-16 units.
pub const MAX_SKILL_PATH_CHARS: usize = 1024;
/// Keys the host refuses in `providerState` (checked on the `[a-z0-9]`-lowercased key).
pub const SENSITIVE_KEY_WORDS: [&str; 8] = [
    "token",
    "secret",
    "password",
    "cookie",
    "credential",
    "authorization",
    "privatekey",
    "accesskey",
];
/// Longest error `message` on a `failure`, in UTF-16 units (the host's `nonEmptyString` limit).
pub const MAX_ERROR_MESSAGE_UNITS: usize = 4096;
/// Capabilities the host requires by default.
pub const DEFAULT_REQUIRED_CAPABILITIES: [&str; 7] = [
    "start", "resume", "turn", "cancel", "detach", "reattach", "status",
];
/// The optional terminal capabilities (`terminal_screen`, `terminal_input`, `terminal_resize`).
pub const TERMINAL_CAPABILITIES: [&str; 3] =
    ["terminal_screen", "terminal_input", "terminal_resize"];
/// Most distinct `outbound_message` operations the host accepts in one turn; the next one is
/// rejected with [`OUTBOUND_RATE_LIMITED`].
pub const MAX_OUTBOUND_PER_TURN: usize = 10;
/// Most distinct `session_tool` operations the host runs in one turn; the next one is rejected
/// with [`SESSION_TOOL_RATE_LIMITED`].
pub const MAX_SESSION_TOOLS_PER_TURN: usize = 30;
/// The host's code for an outbound_message over the per-turn limit.
pub const OUTBOUND_RATE_LIMITED: &str = "outbound_rate_limited";
/// The host's code for a session_tool over the per-turn limit.
pub const SESSION_TOOL_RATE_LIMITED: &str = "session_tool_rate_limited";
/// The host's code for an operationId reused with a different payload.
pub const OPERATION_ID_CONFLICT: &str = "operation_id_conflict";
/// The optional host-executed operation capabilities.
pub const OUTBOUND_MESSAGE_CAPABILITY: &str = "outbound_message";
/// See [`OUTBOUND_MESSAGE_CAPABILITY`].
pub const SESSION_TOOL_CAPABILITY: &str = "session_tool";
