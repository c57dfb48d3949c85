//! The one error type of the engine.
//!
//! Every failure carries a stable snake_case [`ErrorCode`], a message that says what failed,
//! whether retrying can help, and, when there is a next step, a typed [`Hint`] that each face
//! renders in its own words (the message never names a face's command). Failure kinds are orthogonal: a non-zero exit is not an
//! error at all (it is a field of a command result), a timeout is not a cancel, and a lost
//! connection is neither. Messages must never contain secrets.
//!
//! The codes are the engine's own: the protocol's (a stale terminal generation, a state from
//! another provider, ...) live in the provider's server (`server::failure`).

use std::fmt;

pub use crate::hint::Hint;

/// Stable, machine-readable error codes. The wire form (JSON, the protocol's failures) is
/// [`ErrorCode::as_str`], also its `Display`: the variant's name in snake_case, except
/// `Io` (`io_error`), `Store` (`store_error`) and `Internal` (`internal_error`).
///
/// Variants are added as the engine grows (never renamed once shipped), so the enum is
/// `#[non_exhaustive]`: a face's `match` needs a fallback arm, e.g. one that shows the code's
/// name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorCode {
    /// A flag, argument or configuration value is invalid.
    InvalidArgument,
    /// Configuration (environment, config file, ssh_config) is invalid or incomplete.
    ConfigInvalid,
    /// No machine with that id.
    UnknownMachine,
    /// No session with that id.
    UnknownSession,
    /// No command with that id.
    UnknownCommand,
    /// No run with that id.
    UnknownRun,
    /// A record with that id already exists.
    AlreadyExists,
    /// The session already runs a foreground command.
    Busy,
    /// A bounded wait ran out (the work itself may go on).
    Timeout,
    /// The work was cancelled on request.
    Cancelled,
    /// TCP connect or SSH handshake failed.
    ConnectionFailed,
    /// An established connection dropped.
    ConnectionLost,
    /// Every authentication method was refused.
    AuthFailed,
    /// The server's host key is not in known_hosts (strict policy).
    HostKeyUnknown,
    /// The server's host key differs from the recorded one.
    HostKeyChanged,
    /// The remote session (shell or tmux server) is gone.
    SessionLost,
    /// tmux is not installed on the remote host.
    TmuxMissing,
    /// tmux on the remote host is older than the session mechanism needs.
    TmuxTooOld,
    /// bash is not installed on the remote host (sessions run in bash whatever the login shell).
    BashMissing,
    /// bash on the remote host is older than the session mechanism needs.
    BashTooOld,
    /// A remote directory or script of the engine is not owned by the account, or others can
    /// write to it.
    InsecureRemoteDir,
    /// A machine's startup command failed when a session was created.
    StartupCommandFailed,
    /// The code runtime's language cannot run on the machine (no interpreter, or not offered).
    LanguageUnavailable,
    /// The machine cannot seal a code run (no user namespaces) and weaker isolation was not
    /// allowed.
    IsolationUnavailable,
    /// A remote path does not exist.
    RemoteNotFound,
    /// Permission denied on a local or remote path.
    PermissionDenied,
    /// A remote operation failed for another reason.
    RemoteError,
    /// A local I/O error (state dir, logs).
    Io,
    /// The local record store failed.
    Store,
    /// The feature exists in the contract but is not built yet.
    NotImplemented,
    /// A bug: an invariant did not hold.
    Internal,
    /// The target's state does not allow the request yet (a machine with active sessions
    /// cannot be removed).
    NotReady,
    /// No transfer with that id.
    UnknownTransfer,
    /// A verified transfer found different sha256 hashes at the two ends.
    VerifyMismatch,
    /// Slurm's commands do not answer on the machine (not installed, not on PATH, no
    /// controller).
    SlurmUnavailable,
    /// Slurm refused an allocation or a batch job (bad partition, account, limits, ...).
    SlurmRejected,
    /// An allocation was still pending when the wait for it was given up; the job was cancelled.
    SlurmAllocationTimeout,
    /// The allocation under a session ended (time limit, `scancel`, preemption, node failure):
    /// the session is lost.
    SlurmJobEnded,
}

impl ErrorCode {
    /// The stable snake_case name used in JSON and protocol failures.
    pub fn as_str(self) -> &'static str {
        use ErrorCode::*;
        match self {
            InvalidArgument => "invalid_argument",
            ConfigInvalid => "config_invalid",
            UnknownMachine => "unknown_machine",
            UnknownSession => "unknown_session",
            UnknownCommand => "unknown_command",
            UnknownRun => "unknown_run",
            AlreadyExists => "already_exists",
            Busy => "busy",
            Timeout => "timeout",
            Cancelled => "cancelled",
            ConnectionFailed => "connection_failed",
            ConnectionLost => "connection_lost",
            AuthFailed => "auth_failed",
            HostKeyUnknown => "host_key_unknown",
            HostKeyChanged => "host_key_changed",
            SessionLost => "session_lost",
            TmuxMissing => "tmux_missing",
            TmuxTooOld => "tmux_too_old",
            BashMissing => "bash_missing",
            BashTooOld => "bash_too_old",
            InsecureRemoteDir => "insecure_remote_dir",
            StartupCommandFailed => "startup_command_failed",
            LanguageUnavailable => "language_unavailable",
            IsolationUnavailable => "isolation_unavailable",
            RemoteNotFound => "remote_not_found",
            PermissionDenied => "permission_denied",
            RemoteError => "remote_error",
            Io => "io_error",
            Store => "store_error",
            NotImplemented => "not_implemented",
            Internal => "internal_error",
            NotReady => "not_ready",
            UnknownTransfer => "unknown_transfer",
            VerifyMismatch => "verify_mismatch",
            SlurmUnavailable => "slurm_unavailable",
            SlurmRejected => "slurm_rejected",
            SlurmAllocationTimeout => "slurm_allocation_timeout",
            SlurmJobEnded => "slurm_job_ended",
        }
    }

    /// Whether the error says the session's shell is gone for good (`session_lost`, or the
    /// Slurm allocation under it ended): callers that rebuild a session look at this, not at
    /// one code.
    pub fn is_session_lost(self) -> bool {
        matches!(self, ErrorCode::SessionLost | ErrorCode::SlurmJobEnded)
    }

    /// Whether the same call may succeed if simply repeated later.
    pub fn default_retryable(self) -> bool {
        use ErrorCode::*;
        matches!(
            self,
            Busy | Timeout
                | ConnectionFailed
                | ConnectionLost
                | Store
                | Io
                | SlurmAllocationTimeout
        )
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An engine error: code, message, retryability and the next step.
///
/// A face shows the message and words the hint itself; scripts read the code.
///
/// ```
/// use remote_runner_engine::error::{Error, ErrorCode, Hint};
///
/// fn render(err: &Error) -> String {
///     let next = match &err.hint {
///         Some(Hint::ListSessions) => " (see the session list)".to_string(),
///         Some(other) => format!(" (next step: {})", other.kind()), // hints are added over time
///         None => String::new(),
///     };
///     format!("{}: {}{next}", err.code, err.message)
/// }
///
/// let err = Error::new(ErrorCode::UnknownSession, "no session s1").with_hint(Hint::ListSessions);
/// assert_eq!(render(&err), "unknown_session: no session s1 (see the session list)");
/// assert!(!err.retryable);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    pub code: ErrorCode,
    pub message: String,
    pub retryable: bool,
    /// What the user can do; a face renders it after the message.
    pub hint: Option<Hint>,
}

impl Error {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Error {
            code,
            message: message.into(),
            retryable: code.default_retryable(),
            hint: None,
        }
    }

    /// The same error with `hint` as its next step.
    pub fn with_hint(mut self, hint: Hint) -> Self {
        self.hint = Some(hint);
        self
    }

    pub fn retryable(mut self, retryable: bool) -> Self {
        self.retryable = retryable;
        self
    }

    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::InvalidArgument, message)
    }

    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::Internal, message)
    }

    /// `what` is not built yet; `detail` says what to use meanwhile (or when it comes).
    pub fn not_implemented(what: &str, detail: &str) -> Self {
        Self::new(
            ErrorCode::NotImplemented,
            format!("{what} is not built yet ({detail}); nothing was changed"),
        )
    }

    /// A local I/O error, naming what was being done and the path.
    pub fn io(context: impl fmt::Display, err: &std::io::Error) -> Self {
        let code = match err.kind() {
            std::io::ErrorKind::PermissionDenied => ErrorCode::PermissionDenied,
            _ => ErrorCode::Io,
        };
        Self::new(code, format!("{context}: {err}"))
    }

    /// JSON form: the engine's message, and the hint as data when there is one.
    pub fn to_json(&self) -> serde_json::Value {
        self.to_json_with(&self.message)
    }

    /// JSON form with `message` as a face rendered it (hint included); the hint is also
    /// given as data when there is one.
    pub fn to_json_with(&self, message: &str) -> serde_json::Value {
        let mut v = serde_json::json!({
            "code": self.code.as_str(),
            "message": message,
            "retryable": self.retryable,
        });
        if let Some(hint) = &self.hint {
            v["hint"] = serde_json::to_value(hint).unwrap_or_default();
        }
        v
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.code, self.message)
    }
}

impl std::error::Error for Error {}

pub type Result<T, E = Error> = std::result::Result<T, E>;
