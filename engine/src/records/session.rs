//! The session and command records.

use serde::{Deserialize, Serialize};

/// Lifecycle of a session.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum SessionStatus {
    /// The remote shell runs.
    Active,
    /// The remote shell or tmux server is gone (not by `destroy`).
    Lost,
    /// Stopped by `destroy`; records and logs are kept.
    Destroyed,
}

impl SessionStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            SessionStatus::Active => "active",
            SessionStatus::Lost => "lost",
            SessionStatus::Destroyed => "destroyed",
        }
    }
}

/// A session: one persistent remote shell.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SessionRecord {
    pub session_id: String,
    pub machine_id: String,
    /// The directory the session started in (the shell may have moved since).
    pub cwd: String,
    pub status: SessionStatus,
    /// What runs the session's shell: `tmux` (the only backend today; a string so that a
    /// record from a later build with another backend still reads).
    pub backend: String,
    /// When the session was created: RFC 3339, UTC, to the second (see [the module
    /// docs](super)).
    pub created_at: String,
    pub log_dir_local: String,
    pub transcript_file_local: String,
    /// Filled from the command table when the record is shown.
    #[serde(default)]
    pub command_count: u64,
    /// Text of the last command started.
    #[serde(default)]
    pub last_command: Option<String>,
    #[serde(default)]
    pub last_command_id: Option<String>,
    #[serde(default)]
    pub last_exit_code: Option<i32>,
    /// `<state root>/sessions/<session_id>` on the machine (see `tmux` module docs).
    pub remote_state_dir: String,
    /// `<state root>/sessions/<session_id>/commands` on the machine.
    pub remote_commands_dir: String,
    pub remote_transcript_file: String,
    /// tmux server socket name (`tmux -L <name>`), session name, and tmux/bash paths.
    pub tmux_socket: String,
    pub tmux_session: String,
    pub tmux_path: String,
    pub bash_path: String,
    #[serde(default)]
    pub ended_at: Option<String>,
    /// Why the session is lost or destroyed.
    #[serde(default)]
    pub status_message: Option<String>,
    /// How the shell got the user's login environment at start: `applied`, `timed_out`,
    /// `failed (status N)` or `off`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub login_environment: Option<String>,
    /// The user's login shell on the machine (`$SHELL`); the session shell is bash.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub login_shell: Option<String>,
    /// On a Slurm machine: the job id of the allocation the session's shell runs in (released
    /// by destroy).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slurm_job_id: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CommandMode {
    #[default]
    Wait,
    Background,
}

impl CommandMode {
    pub fn as_str(self) -> &'static str {
        match self {
            CommandMode::Wait => "wait",
            CommandMode::Background => "background",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum CommandStatus {
    Running,
    /// Running, and sleeping on a read of the session's terminal (seen from its process state
    /// on the machine): it waits for `session send`.
    WaitingInput,
    /// Ended with exit code 0.
    Completed,
    /// Ended with a non-zero exit code.
    Failed,
    /// Ended after a stop request.
    Stopped,
    /// Reserved for callers that bound a command's run time (runs); the engine's own waits never
    /// produce it: a wait that runs out leaves the command `running` with `wait_timed_out`.
    TimedOut,
    /// The session died under it (its shell exited or was killed, or the tmux server stopped).
    Lost,
}

impl CommandStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            CommandStatus::Running => "running",
            CommandStatus::WaitingInput => "waiting_input",
            CommandStatus::Completed => "completed",
            CommandStatus::Failed => "failed",
            CommandStatus::Stopped => "stopped",
            CommandStatus::TimedOut => "timed_out",
            CommandStatus::Lost => "lost",
        }
    }

    pub fn is_final(self) -> bool {
        !matches!(self, CommandStatus::Running | CommandStatus::WaitingInput)
    }
}

/// A command run in a session.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CommandRecord {
    pub session_id: String,
    pub command_id: String,
    /// 1-based order within the session.
    pub seq: u64,
    pub machine_id: String,
    /// The shell's directory when the command started (or the requested override).
    pub cwd: String,
    pub command: String,
    pub mode: CommandMode,
    pub status: CommandStatus,
    pub exit_code: Option<i32>,
    /// An excerpt of stdout: its head and tail (at most
    /// [`EngineOptions::excerpt_bytes`](crate::engine::EngineOptions::excerpt_bytes) in all,
    /// `stdout_truncated` when cut), lossily decoded as UTF-8. Every byte, as written, is in
    /// [`Engine::read_output`](crate::engine::Engine::read_output) (by offset, also while the
    /// command runs) and, once it ended, in `stdout_file_local` (up to the output cap).
    pub stdout: String,
    /// An excerpt of stderr, as `stdout` is.
    pub stderr: String,
    pub stdout_truncated: bool,
    pub stderr_truncated: bool,
    /// Full sizes in bytes as last seen on the machine.
    pub stdout_bytes: u64,
    pub stderr_bytes: u64,
    /// The stream is longer than the output cap: only its first `output_cap` bytes are in the
    /// local copy and the log (which says so); `*_bytes` is still the true size and the rest
    /// stays on the machine.
    #[serde(default)]
    pub stdout_capped: bool,
    #[serde(default)]
    pub stderr_capped: bool,
    pub created_at: String,
    pub started_at: Option<String>,
    pub ended_at: Option<String>,
    pub duration_ms: Option<u64>,
    pub log_file_local: String,
    pub stdout_file_local: String,
    pub stderr_file_local: String,
    pub remote_state_dir: String,
    pub remote_stdout_file: String,
    pub remote_stderr_file: String,
    pub remote_exit_file: String,
    /// The call that returned this record stopped waiting before the command ended.
    pub wait_timed_out: bool,
    /// Background: the process group id.
    pub pid: Option<i64>,
    /// A stop was requested.
    #[serde(default)]
    pub stop_requested: bool,
    /// How it ended, as the exit file on the machine says (`None` while it runs). Among the
    /// values: `normal`; `shell_exit` (the command ran `exit N`: status by `N`, with
    /// `shell_restarted`); `shell_killed`, `shell_replaced` (the shell was killed or `exec`ed
    /// away); `prompt` (the shell's prompt hook saw it end before its own end step ran);
    /// `cd_failed`, `syntax_error`; `killed` (stopped); `never_started` and `not_started` (its
    /// start never reached the shell); `exit_garbled` (the command wrote over its exit file and
    /// the shell moved on: exit code unknown, status `failed`, the session not lost for it). A
    /// string, not an enum: the values are written by the scripts on the machine, and one this
    /// build does not know is kept as it is.
    #[serde(default)]
    pub end_reason: Option<String>,
    /// For `lost`: what happened and what to do.
    #[serde(default)]
    pub error: Option<String>,
    /// The command ended its shell (`exit N`, killed it, replaced it); the session continues
    /// in a fresh shell with the same directory and exported environment.
    #[serde(default)]
    pub shell_restarted: bool,
    /// For `waiting_input`: the last line the command printed (its prompt, usually).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_line: Option<String>,
    /// It ended on an interrupt (Ctrl-C: exit code 130), sent as a key or by a stop.
    #[serde(default)]
    pub interrupted: bool,
}
