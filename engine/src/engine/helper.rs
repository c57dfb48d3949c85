//! A face's own helper script on a machine: installed beside the control script, checked
//! before use, run with arguments, and the files it exchanges with its face. The provider's
//! chat helper (`chat.sh`, run by a turn as `"$RR_CHAT"`) is one; the face keeps the script and
//! its protocol, and reaches the machine only through a [`HelperHost`].

use std::sync::Arc;
use std::time::Duration;

use super::Engine;
use super::turn_dir::TurnDir;
use crate::error::{ErrorCode, Result};
use crate::remote::Remote;

/// A machine as a helper's face sees it: a handful of file operations and running the helper.
#[derive(Clone)]
pub struct HelperHost {
    transport: Arc<Remote>,
}

impl std::fmt::Debug for HelperHost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HelperHost").finish_non_exhaustive()
    }
}

/// What one run of a helper printed (lossily decoded, at most the run's `max_output` bytes a
/// stream) and whether it exited 0.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HelperOutput {
    pub success: bool,
    pub stdout: String,
    pub stderr: String,
}

impl Engine {
    /// The machine `machine_id` as its login host is reached (for a Slurm machine, not a
    /// session's node: use [`TurnDir::host`] for the host a turn runs on).
    pub async fn machine_host(&self, machine_id: &str) -> Result<HelperHost> {
        let transport = self.connector.connect(machine_id).await?;
        Ok(HelperHost { transport })
    }
}

impl TurnDir {
    /// The host the turn runs on (a Slurm session's node), for the turn's helper.
    pub fn host(&self) -> HelperHost {
        HelperHost {
            transport: self.transport(),
        }
    }
}

impl HelperHost {
    /// Install `script` at `path` (mode 0700, written atomically, its directory made 0700)
    /// unless something is there already: a helper's path names its version.
    pub async fn install(&self, path: &str, script: &[u8]) -> Result<()> {
        if self.transport.stat(path).await?.is_some() {
            return Ok(());
        }
        if let Some((dir, _)) = path.rsplit_once('/') {
            self.transport.create_dir_all(dir, 0o700).await?;
        }
        self.transport.write_file(path, script, 0o700).await
    }

    /// Whether `path` exists.
    pub async fn exists(&self, path: &str) -> Result<bool> {
        Ok(self.transport.stat(path).await?.is_some())
    }

    /// Check that the helper at `path` is safe to run by path (the control script's
    /// StrictModes check: owned by the user, not writable by others, nor its directories);
    /// an `insecure_remote_dir` error naming `what` otherwise.
    pub async fn check(&self, path: &str, what: &str) -> Result<()> {
        crate::remote::check_script(self.transport.as_ref(), path, what).await
    }

    /// Run `/bin/sh SCRIPT ARGS...` on the machine (each word quoted), bounded by `limit`,
    /// keeping at most `max_output` bytes of each stream.
    pub async fn run(
        &self,
        script: &str,
        args: &[&str],
        limit: Duration,
        max_output: usize,
    ) -> Result<HelperOutput> {
        let mut line = format!("exec /bin/sh {}", shell_quote(script));
        for arg in args {
            line.push(' ');
            line.push_str(&shell_quote(arg));
        }
        let out = crate::remote::sh(
            self.transport.as_ref(),
            &line,
            None,
            Some(limit),
            max_output,
        )
        .await?;
        Ok(HelperOutput {
            success: out.status.success(),
            stdout: out.stdout_lossy(),
            stderr: out.stderr_lossy(),
        })
    }

    /// At most `max` bytes of `path`; `None` when it does not exist.
    pub async fn read(&self, path: &str, max: usize) -> Result<Option<Vec<u8>>> {
        match self.transport.read_file_range(path, 0, max).await {
            Ok(bytes) => Ok(Some(bytes)),
            Err(e) if e.code == ErrorCode::RemoteNotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Write `data` to `path` atomically with `mode` (its directory must exist).
    pub async fn write(&self, path: &str, data: &[u8], mode: u32) -> Result<()> {
        self.transport.write_file(path, data, mode).await
    }

    /// Create `path`, which must not exist yet (not atomic for concurrent readers: for a file
    /// nobody reads before this returns).
    pub async fn write_new(&self, path: &str, data: &[u8], mode: u32) -> Result<()> {
        self.transport.write_new_file(path, data, mode).await
    }

    /// Create the directory `path` and those missing between `base` (which exists) and it;
    /// `Ok(true)` only when this call made `path` itself (the first to make it owns it).
    pub async fn create_dir_fresh(&self, base: &str, path: &str, mode: u32) -> Result<bool> {
        self.transport.create_dir_fresh(base, path, mode).await
    }
}

/// Quote a word for a POSIX shell command line (single quotes; plain words stay as they are),
/// for the command lines a face builds (a provider turn's agent line).
pub fn shell_quote(word: &str) -> String {
    crate::transport::shell_quote(word)
}
