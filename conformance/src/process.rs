//! The provider process, spawned exactly as the host spawns it: the given command and
//! arguments only, a chosen cwd and environment, JSONL on stdin/stdout, stderr drained.

use std::path::Path;
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use remote_runner_protocol::{JsonlCodec, LineError};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::process::{Child, ChildStdin, Command};
use tokio::sync::mpsc;
use tokio_util::codec::FramedRead;

use crate::config::Config;
use crate::violation::{Violation, rule};

/// One item read from the provider's stdout.
#[derive(Debug)]
pub enum Line {
    /// A complete, non-blank line (without the newline).
    Text(Bytes),
    /// A framing problem (too long, unterminated at EOF).
    Broken(LineError),
    /// Reading stdout failed.
    ReadError(String),
}

/// A running provider.
#[derive(Debug)]
pub struct ProviderProcess {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: mpsc::Receiver<Line>,
    stderr_bytes: Arc<AtomicU64>,
}

impl ProviderProcess {
    /// Spawns `config.provider` in `cwd` with the configured extra environment.
    pub fn spawn(config: &Config, cwd: &Path) -> Result<Self, Violation> {
        let (program, args) = config.provider.split_first().ok_or_else(|| {
            Violation::new(rule::SPAWN_FAILED, "no provider command", "a command")
        })?;
        // A relative path is meant from where the harness runs, not from the provider's cwd.
        let program = if program.contains('/') && Path::new(program).is_relative() {
            std::env::current_dir()
                .map(|dir| dir.join(program))
                .unwrap_or_else(|_| program.into())
        } else {
            program.into()
        };
        let mut command = Command::new(&program);
        command
            .args(args)
            .current_dir(cwd)
            .envs(config.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let mut child = command.spawn().map_err(|err| {
            Violation::new(
                rule::SPAWN_FAILED,
                format!("could not start {program:?}: {err}"),
                "an executable provider command (check the path and its permissions)",
            )
        })?;
        let stdin = child.stdin.take();
        let stdout = child.stdout.take();
        let stderr = child.stderr.take();
        let (tx, lines) = mpsc::channel(64);
        if let Some(stdout) = stdout {
            tokio::spawn(read_lines(stdout, tx));
        }
        let stderr_bytes = Arc::new(AtomicU64::new(0));
        if let Some(mut stderr) = stderr {
            let counter = Arc::clone(&stderr_bytes);
            tokio::spawn(async move {
                let mut buf = vec![0u8; 16 * 1024];
                while let Ok(n) = stderr.read(&mut buf).await {
                    if n == 0 {
                        break;
                    }
                    counter.fetch_add(n as u64, Ordering::Relaxed);
                }
            });
        }
        Ok(ProviderProcess {
            child,
            stdin,
            lines,
            stderr_bytes,
        })
    }

    /// Writes raw bytes to stdin. `false` when stdin is closed or broken.
    pub async fn write(&mut self, bytes: &[u8]) -> bool {
        let Some(stdin) = self.stdin.as_mut() else {
            return false;
        };
        stdin.write_all(bytes).await.is_ok() && stdin.flush().await.is_ok()
    }

    /// Closes stdin (EOF for the provider).
    pub fn close_stdin(&mut self) {
        self.stdin = None;
    }

    /// The next stdout item; `None` at EOF.
    pub async fn next_line(&mut self) -> Option<Line> {
        self.lines.recv().await
    }

    /// Bytes the provider wrote to stderr so far.
    pub fn stderr_bytes(&self) -> u64 {
        self.stderr_bytes.load(Ordering::Relaxed)
    }

    /// The live stderr byte counter (keeps counting while the process runs).
    pub fn stderr_counter(&self) -> Arc<AtomicU64> {
        Arc::clone(&self.stderr_bytes)
    }

    /// Waits up to `deadline` for the process to exit; `true` if it did.
    pub async fn wait_exit(&mut self, deadline: Duration) -> bool {
        matches!(
            tokio::time::timeout(deadline, self.child.wait()).await,
            Ok(Ok(_))
        )
    }

    /// Whether the process has exited (without waiting).
    pub fn has_exited(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(Some(_)))
    }

    /// Sends `signal` (a `kill -s` name: `TERM`, `INT`, `HUP`) to the process, stdin left as it
    /// is. `false` if the process is gone or `kill` failed.
    pub async fn signal(&self, signal: &str) -> bool {
        let Some(pid) = self.child.id() else {
            return false;
        };
        Command::new("kill")
            .args(["-s", signal, &pid.to_string()])
            .status()
            .await
            .is_ok_and(|status| status.success())
    }

    /// Kills the process (if still running) and reaps it.
    pub async fn kill(&mut self) {
        let _ = self.child.kill().await;
    }
}

async fn read_lines(stdout: tokio::process::ChildStdout, tx: mpsc::Sender<Line>) {
    let mut framed = FramedRead::new(stdout, JsonlCodec::new());
    while let Some(item) = framed.next().await {
        let line = match item {
            Ok(Ok(bytes)) => Line::Text(bytes),
            Ok(Err(err)) => Line::Broken(err),
            Err(err) => Line::ReadError(err.to_string()),
        };
        let stop = matches!(line, Line::ReadError(_));
        if tx.send(line).await.is_err() || stop {
            break;
        }
    }
}
