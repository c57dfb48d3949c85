//! The exit-code policy, in one place. docs/cli.md carries the same table.
//!
//! | code | meaning |
//! |------|---------|
//! | 0    | success |
//! | 1    | the work ran and reported a failure in its result: a remote command exited non-zero or was killed, a run failed, a doctor check failed (stdout still holds the result) |
//! | 2    | usage: a flag or argument is missing or invalid (`invalid_argument`, and clap's own errors) |
//! | 3    | not found: `unknown_machine`, `unknown_session`, `unknown_command`, `unknown_run`, `remote_not_found` |
//! | 4    | `already_exists` |
//! | 5    | `busy`: the session already runs a foreground command |
//! | 6    | `timeout`: a bounded wait ran out (the remote work may go on); `slurm_allocation_timeout` (the pending job was cancelled) |
//! | 7    | `cancelled` |
//! | 8    | cannot reach or trust the machine: `connection_failed`, `connection_lost`, `auth_failed`, `host_key_unknown`, `host_key_changed` |
//! | 9    | the remote side failed: `session_lost`, `tmux_missing`, `remote_error`, `slurm_unavailable`, `slurm_rejected`, `slurm_job_ended` |
//! | 10   | local configuration or state: `config_invalid`, `io_error`, `store_error`, `permission_denied` |
//! | 11   | `not_implemented`: the command is in the contract but not built yet |
//! | 12   | wrong state for the request: `not_ready` (a machine with active sessions) |
//! | 13   | another runner error whose code this table does not name yet |
//! | 70   | `internal_error`: a bug; please report it |
//!
//! `session exec --exit-code` (and `run once --exit-code`) replace code 1 with the remote
//! command's own exit status (0-255; a signal `N` becomes `128 + N`, as in a shell).

use remote_runner_engine::ErrorCode;

pub const SUCCESS: u8 = 0;
/// The work ran and its result says it failed.
pub const WORK_FAILED: u8 = 1;
pub const USAGE: u8 = 2;
pub const INTERNAL: u8 = 70;
/// An error code newer than this table.
pub const OTHER_RUNNER_ERROR: u8 = 13;

/// The exit code for an error.
pub fn for_error(code: ErrorCode) -> u8 {
    use ErrorCode::*;
    match code {
        InvalidArgument => USAGE,
        UnknownMachine | UnknownSession | UnknownCommand | UnknownRun | RemoteNotFound => 3,
        AlreadyExists => 4,
        Busy => 5,
        Timeout | SlurmAllocationTimeout => 6,
        Cancelled => 7,
        ConnectionFailed | ConnectionLost | AuthFailed | HostKeyUnknown | HostKeyChanged => 8,
        SessionLost | TmuxMissing | TmuxTooOld | BashMissing | BashTooOld | InsecureRemoteDir
        | StartupCommandFailed | LanguageUnavailable | IsolationUnavailable | RemoteError
        | SlurmUnavailable | SlurmRejected | SlurmJobEnded => 9,
        ConfigInvalid | Io | Store | PermissionDenied => 10,
        NotImplemented => 11,
        NotReady => 12,
        Internal => INTERNAL,
        // Engine crates add codes freely; until this table names one, it gets its own class
        // rather than breaking the CLI build or posing as a known failure.
        #[allow(unreachable_patterns)]
        _ => OTHER_RUNNER_ERROR,
    }
}

/// The exit code for a finished remote command: 0 when it exited 0; otherwise 1, or with
/// `passthrough` (`--exit-code`) its own status.
pub fn for_remote_status(exit_code: Option<i32>, signal: Option<i32>, passthrough: bool) -> u8 {
    match (exit_code, passthrough) {
        (Some(0), _) => SUCCESS,
        (_, true) => passthrough_status(exit_code, signal),
        (_, false) => WORK_FAILED,
    }
}

/// The exit code that passes a remote command's status through (`--exit-code`): its exit code,
/// or `128 + signal` when a signal ended it, clamped to 0..=255.
fn passthrough_status(exit_code: Option<i32>, signal: Option<i32>) -> u8 {
    match (exit_code, signal) {
        (Some(code), _) => u8::try_from(code.clamp(0, 255)).unwrap_or(WORK_FAILED),
        (None, Some(sig)) => u8::try_from((128 + sig).clamp(0, 255)).unwrap_or(WORK_FAILED),
        (None, None) => WORK_FAILED,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passthrough_follows_the_shell_convention() {
        assert_eq!(for_remote_status(Some(0), None, true), 0);
        assert_eq!(for_remote_status(Some(42), None, true), 42);
        assert_eq!(for_remote_status(Some(300), None, true), 255);
        assert_eq!(for_remote_status(None, Some(9), true), 137);
        assert_eq!(for_remote_status(None, None, true), WORK_FAILED);
    }

    #[test]
    fn without_passthrough_any_remote_failure_is_1() {
        assert_eq!(for_remote_status(Some(0), None, false), SUCCESS);
        assert_eq!(for_remote_status(Some(42), None, false), WORK_FAILED);
        assert_eq!(for_remote_status(None, Some(9), false), WORK_FAILED);
    }

    #[test]
    fn error_codes_map_to_distinct_classes() {
        assert_eq!(for_error(ErrorCode::InvalidArgument), USAGE);
        assert_eq!(for_error(ErrorCode::UnknownMachine), 3);
        assert_eq!(for_error(ErrorCode::Busy), 5);
        assert_eq!(for_error(ErrorCode::Timeout), 6);
        assert_eq!(for_error(ErrorCode::NotImplemented), 11);
        assert_ne!(
            for_error(ErrorCode::AuthFailed),
            for_error(ErrorCode::RemoteError)
        );
    }
}
