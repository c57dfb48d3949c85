//! The byte transport: how the engine's bytes reach a machine.
//!
//! A [`Transport`] runs a process (`exec_raw`, `exec_stream`: the exec request sshd would
//! run), moves file bytes (SFTP-like: ranges, atomic writes, streams, `stat`, `read_dir`,
//! `rename`, ...) and says whether its link is up. Nothing more: what those bytes mean (the
//! control script, its verbs and the routes a call takes) is the control plane one layer up,
//! [`crate::remote`], which runs over any transport.
//!
//! Implementations: [`crate::ssh::SshTransport`] (russh + SFTP), [`local::LocalTransport`]
//! (this host, for the built-in `local` machine), the CLI's connection keeper
//! ([`crate::keeper::KeeperTransport`], the same bytes over its socket) and a Slurm session's
//! node ([`crate::slurm::NodeTransport`], processes as steps of its job). Nothing above the
//! trait knows which one it talks to, and the behaviour test suite runs against SSH and local.

pub mod local;

use std::time::Duration;

use async_trait::async_trait;
use tokio::io::{AsyncRead, AsyncWrite};

use crate::error::Result;

/// How a remote process ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ExitStatus {
    /// Exited with this code.
    Code(i32),
    /// Killed by this signal (name without `SIG`, e.g. `KILL`).
    Signal(String),
}

impl ExitStatus {
    pub fn success(&self) -> bool {
        matches!(self, ExitStatus::Code(0))
    }
    pub fn code(&self) -> Option<i32> {
        match self {
            ExitStatus::Code(c) => Some(*c),
            ExitStatus::Signal(_) => None,
        }
    }
}

/// Options for [`Transport::exec_raw`] (and the control plane's `Remote::exec`).
#[derive(Debug, Clone)]
pub struct ExecOptions {
    /// Bytes written to the process's stdin, then EOF. `None`: stdin is closed at once.
    pub stdin: Option<Vec<u8>>,
    /// Bound on the whole call. On expiry the call returns `ErrorCode::Timeout`. For SSH the
    /// remote process may go on: callers that need it stopped wrap the command in `timeout(1)`.
    pub timeout: Option<Duration>,
    /// Keep at most this many bytes of each of stdout and stderr; the rest is drained and
    /// counted, and the `*_truncated` flag is set.
    pub max_output: usize,
}

impl Default for ExecOptions {
    fn default() -> Self {
        ExecOptions {
            stdin: None,
            timeout: Some(Duration::from_secs(60)),
            max_output: 8 << 20,
        }
    }
}

/// The result of a non-interactive exec.
#[derive(Debug, Clone)]
pub struct ExecOutput {
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
    pub stdout_truncated: bool,
    pub stderr_truncated: bool,
    pub status: ExitStatus,
}

impl ExecOutput {
    pub fn stdout_lossy(&self) -> String {
        String::from_utf8_lossy(&self.stdout).into_owned()
    }
    pub fn stderr_lossy(&self) -> String {
        String::from_utf8_lossy(&self.stderr).into_owned()
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileKind {
    File,
    Dir,
    Symlink,
    Other,
}

impl FileKind {
    /// The kind of a local file type (from `symlink_metadata`: a symlink is a symlink).
    pub fn of(ft: std::fs::FileType) -> FileKind {
        if ft.is_symlink() {
            FileKind::Symlink
        } else if ft.is_dir() {
            FileKind::Dir
        } else if ft.is_file() {
            FileKind::File
        } else {
            FileKind::Other
        }
    }
}

/// File metadata (from `lstat`: a symlink is reported as a symlink).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileStat {
    pub kind: FileKind,
    pub size: u64,
    /// Permission bits including set-id bits (`0o7777` mask).
    pub mode: u32,
    /// Seconds since the Unix epoch.
    pub mtime: i64,
    /// The owner's uid, when the transport says (an older connection keeper does not).
    pub uid: Option<u32>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirEntry {
    pub name: String,
    pub stat: FileStat,
}

/// Chunks queued for an [`ExecStream`]'s stdin before a sender waits.
pub const EXEC_INPUT_QUEUE: usize = 4;

pub type BoxRead = Box<dyn AsyncRead + Send + Unpin>;
pub type BoxWrite = Box<dyn AsyncWrite + Send + Unpin>;

/// What a process started with [`Transport::exec_stream`] sends back, in arrival order per
/// stream.
#[derive(Debug)]
pub enum StreamEvent {
    Stdout(Vec<u8>),
    Stderr(Vec<u8>),
    /// The process ended (its status), or the link under it did (the error).
    End(Result<ExitStatus>),
}

/// A long-lived process on the machine: write to its stdin as you go, read its output as it
/// comes. Dropping the stream ends its stdin and closes the channel.
#[derive(Debug)]
pub struct ExecStream {
    /// Chunks for the process's stdin, written in order. Bounded ([`EXEC_INPUT_QUEUE`] chunks):
    /// a sender waits while the process (or the link) is behind, so memory stays bounded.
    pub input: tokio::sync::mpsc::Sender<Vec<u8>>,
    /// Output and the end, as they arrive.
    pub events: tokio::sync::mpsc::UnboundedReceiver<StreamEvent>,
}

/// A reachable machine: run commands, read and write files.
///
/// Paths are absolute paths on the machine. Errors use the engine's codes:
/// `remote_not_found` for a missing path, `permission_denied`, `connection_lost` when the link
/// dropped (the caller may retry after reconnecting), `timeout` for a bounded wait.
#[async_trait]
pub trait Transport: Send + Sync + 'static {
    /// Short human description, e.g. `local` or `ssh rrtest@127.0.0.1:2222`.
    fn describe(&self) -> String;

    /// Run `command` as sshd runs an exec request: through the account's login shell (`sh -c`
    /// for `local`), non-interactively, no PTY. Only the control plane ([`crate::remote`]) sends
    /// anything here: what it sends parses the same in every login shell. (A POSIX sh script
    /// runs through the control plane: [`crate::remote::Remote::exec`].)
    async fn exec_raw(&self, command: &str, options: ExecOptions) -> Result<ExecOutput>;

    /// Write `data` to `path` atomically: a temporary name in the same directory, then rename
    /// over the target. Parent directories must exist. `mode` is applied to the new file.
    async fn write_file(&self, path: &str, data: &[u8], mode: u32) -> Result<()>;

    /// Create `path`, which must not exist yet, holding `data`. Unlike [`Transport::write_file`]
    /// it is not atomic for concurrent readers: it is for files nobody reads before the call
    /// returns (a new command's script), where it saves round trips.
    async fn write_new_file(&self, path: &str, data: &[u8], mode: u32) -> Result<()> {
        self.write_file(path, data, mode).await
    }

    /// Read at most `max` bytes starting at byte `offset`. Empty at or past the end of the file.
    async fn read_file_range(&self, path: &str, offset: u64, max: usize) -> Result<Vec<u8>>;

    /// `lstat`; `Ok(None)` when the path does not exist.
    async fn stat(&self, path: &str) -> Result<Option<FileStat>>;

    /// Create a directory and its parents (like `mkdir -p`), with `mode` for new ones.
    async fn create_dir_all(&self, path: &str, mode: u32) -> Result<()>;

    /// Create the directory `path` and those missing between `base` (which exists) and it.
    /// `Ok(true)` when this call made `path` itself; `Ok(false)` when `path` was there already
    /// or could not be made (a caller that cares finds out which). For "the first to make it
    /// owns it" checks; the SSH transport does it in one round trip.
    async fn create_dir_fresh(&self, base: &str, path: &str, mode: u32) -> Result<bool> {
        let _ = base;
        if self.stat(path).await?.is_some() {
            return Ok(false);
        }
        Ok(self.create_dir_all(path, mode).await.is_ok())
    }

    /// List a directory (without `.` and `..`), entries not followed through symlinks.
    async fn read_dir(&self, path: &str) -> Result<Vec<DirEntry>>;

    /// Rename, replacing the target if it exists (POSIX rename semantics).
    async fn rename(&self, from: &str, to: &str) -> Result<()>;

    /// Remove a file or symlink.
    async fn remove_file(&self, path: &str) -> Result<()>;

    /// Set permission bits.
    async fn set_mode(&self, path: &str, mode: u32) -> Result<()>;

    /// Open a file for streaming reads from the start.
    async fn open_read(&self, path: &str) -> Result<BoxRead>;

    /// Create or truncate a file for streaming writes. The caller shuts the writer down to
    /// finish; errors on shutdown mean the data may not be complete.
    async fn open_write(&self, path: &str, mode: u32) -> Result<BoxWrite>;

    /// Whether the underlying link is still up (always true for local).
    fn is_connected(&self) -> bool;

    /// Start `command` as [`Transport::exec_raw`] does, but keep it: input and output flow
    /// while it runs. `Ok(None)` when this transport cannot (callers fall back to exec).
    async fn exec_stream(&self, command: &str) -> Result<Option<ExecStream>> {
        let _ = command;
        Ok(None)
    }
}

pub use crate::shell::shell_quote;

#[cfg(test)]
mod tests {
    use super::shell_quote;

    #[test]
    fn quotes_only_when_needed() {
        assert_eq!(shell_quote("abc/d.e-f"), "abc/d.e-f");
        assert_eq!(shell_quote(""), "''");
        assert_eq!(shell_quote("a b"), "'a b'");
        assert_eq!(shell_quote("it's"), "'it'\\''s'");
        assert_eq!(shell_quote("$HOME!"), "'$HOME!'");
    }
}
