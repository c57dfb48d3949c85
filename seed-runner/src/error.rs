//! The v3 error codes (2001–2010) and the one JSON object an error prints.

use remote_runner_engine::{Error as EngineError, ErrorCode};
use serde_json::json;

pub const SSH: u16 = 2001;
pub const SYNC: u16 = 2002;
pub const TMUX: u16 = 2003;
pub const NO_MOUNT: u16 = 2004;
pub const NO_SESSION: u16 = 2005;
pub const DESTROYED: u16 = 2006;
pub const TIMEOUT: u16 = 2007;
pub const LOG_WRITE: u16 = 2008;
pub const UNMOUNT: u16 = 2009;
pub const STATE: u16 = 2010;

/// An error as seed-runner reports it: numeric code, a short name, what to do.
#[derive(Debug, Clone)]
pub struct SeedError {
    pub code: u16,
    pub name: &'static str,
    pub message: String,
}

pub type Result<T> = std::result::Result<T, SeedError>;

impl SeedError {
    pub fn new(code: u16, name: &'static str, message: impl Into<String>) -> SeedError {
        SeedError {
            code,
            name,
            message: message.into(),
        }
    }

    pub fn state(message: impl Into<String>) -> SeedError {
        SeedError::new(STATE, "state_error", message)
    }

    pub fn to_json(&self) -> serde_json::Value {
        json!({
            "error": {
                "code": self.code,
                "name": self.name,
                "message": self.message,
            }
        })
    }

    /// An engine error met while doing `what`: connection problems are 2001 whatever the
    /// step; anything else gets `fallback`.
    pub fn engine(e: EngineError, what: &str, fallback: (u16, &'static str)) -> SeedError {
        let (code, name) = match e.code {
            ErrorCode::ConnectionFailed
            | ErrorCode::ConnectionLost
            | ErrorCode::AuthFailed
            | ErrorCode::HostKeyUnknown
            | ErrorCode::HostKeyChanged
            | ErrorCode::UnknownMachine => (SSH, "ssh_connection_failed"),
            ErrorCode::TmuxMissing
            | ErrorCode::TmuxTooOld
            | ErrorCode::BashMissing
            | ErrorCode::BashTooOld
            | ErrorCode::SessionLost => (TMUX, "tmux_failed"),
            ErrorCode::Store => (STATE, "state_error"),
            _ => fallback,
        };
        let hint = match code {
            SSH => {
                "; check the network, the SSH configuration (`remote-runner machine doctor`) and \
                 that the machine is online"
            }
            TMUX => "; check that tmux and bash are installed on the remote machine",
            STATE => "; check the local state directory and its permissions",
            _ => "",
        };
        SeedError::new(code, name, format!("{what}: {}{hint}", e.message))
    }
}

/// 2006: the session was destroyed.
pub fn destroyed(session_id: &str) -> SeedError {
    SeedError::new(
        DESTROYED,
        "session_destroyed",
        format!(
            "session {session_id} was destroyed; create a new session with `seed-runner \
             session create`"
        ),
    )
}

/// 2007 `session_busy`: an earlier command has not ended.
pub fn busy(session_id: &str) -> SeedError {
    SeedError::new(
        TIMEOUT,
        "session_busy",
        format!(
            "session {session_id} is busy: an earlier command has not ended yet (`seed-runner \
             session status --session {session_id}` says when it is active again); new commands \
             are refused, not queued"
        ),
    )
}
