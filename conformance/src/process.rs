//! The provider process, spawned exactly as the host spawns it: the given command and
//! arguments only, a chosen cwd and environment, JSONL on stdin/stdout, stderr drained.
//! Both faces of the scripted host run on it: the checking [`crate::host::Host`] and the
//! blocking [`crate::script::ScriptHost`].

use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
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

/// How to start a provider: the program, its arguments, a cwd and environment changes, and
/// nothing else (the host passes no arguments of its own).
#[derive(Debug, Clone, Default)]
pub struct Spawn {
    /// The program (a relative path with a `/` is taken from this process's cwd).
    pub program: PathBuf,
    /// Its arguments.
    pub args: Vec<String>,
    /// The provider's working directory.
    pub cwd: PathBuf,
    /// Variables set on top of the inherited environment.
    pub env: Vec<(String, String)>,
    /// Inherited variables removed.
    pub env_remove: Vec<String>,
    /// Pass stderr through to this process (a test shows the provider's logs) instead of
    /// draining and counting it.
    pub inherit_stderr: bool,
}

impl Spawn {
    /// `program` in `cwd` with `env` set.
    pub fn new(program: impl Into<PathBuf>, cwd: &Path, env: &[(&str, String)]) -> Spawn {
        Spawn {
            program: program.into(),
            cwd: cwd.to_path_buf(),
            env: env
                .iter()
                .map(|(k, v)| ((*k).to_owned(), v.clone()))
                .collect(),
            ..Spawn::default()
        }
    }

    /// The program, a relative path resolved from where the harness runs, not from the
    /// provider's cwd.
    fn resolved_program(&self) -> PathBuf {
        let program = &self.program;
        if program.to_string_lossy().contains('/') && program.is_relative() {
            std::env::current_dir()
                .map(|dir| dir.join(program))
                .unwrap_or_else(|_| program.clone())
        } else {
            program.clone()
        }
    }
}

impl ProviderProcess {
    /// Spawns `config.provider` in `cwd` with the configured extra environment.
    pub fn spawn(config: &Config, cwd: &Path) -> Result<Self, Violation> {
        let (program, args) = config.provider.split_first().ok_or_else(|| {
            Violation::new(rule::SPAWN_FAILED, "no provider command", "a command")
        })?;
        let spec = Spawn {
            program: program.into(),
            args: args.to_vec(),
            cwd: cwd.to_path_buf(),
            env: config.env.clone(),
            ..Spawn::default()
        };
        ProviderProcess::start(&spec).map_err(|err| {
            Violation::new(
                rule::SPAWN_FAILED,
                format!("could not start {:?}: {err}", spec.resolved_program()),
                "an executable provider command (check the path and its permissions)",
            )
        })
    }

    /// Starts the process `spec` describes (inside a tokio runtime: its readers are tasks).
    pub fn start(spec: &Spawn) -> std::io::Result<Self> {
        let mut command = Command::new(spec.resolved_program());
        command
            .args(&spec.args)
            .current_dir(&spec.cwd)
            .envs(spec.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(if spec.inherit_stderr {
                Stdio::inherit()
            } else {
                Stdio::piped()
            })
            .kill_on_drop(true);
        for name in &spec.env_remove {
            command.env_remove(name);
        }
        let mut child = command.spawn()?;
        let stdin = child.stdin.take();
        let (tx, lines) = mpsc::channel(64);
        if let Some(stdout) = child.stdout.take() {
            tokio::spawn(read_lines(stdout, tx));
        }
        let stderr_bytes = Arc::new(AtomicU64::new(0));
        if let Some(stderr) = child.stderr.take() {
            tokio::spawn(count_bytes(stderr, Arc::clone(&stderr_bytes)));
        }
        Ok(ProviderProcess {
            child,
            stdin,
            lines,
            stderr_bytes,
        })
    }

    /// The process id, while it has not been reaped.
    pub fn pid(&self) -> Option<u32> {
        self.child.id()
    }

    /// Hands the stdout items to a reader of its own; `next_line` then sees EOF.
    pub fn take_lines(&mut self) -> mpsc::Receiver<Line> {
        std::mem::replace(&mut self.lines, mpsc::channel(1).1)
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
        self.wait_status(deadline).await.is_some()
    }

    /// Waits up to `deadline` for the process to exit; its exit status if it did.
    pub async fn wait_status(&mut self, deadline: Duration) -> Option<ExitStatus> {
        tokio::time::timeout(deadline, self.child.wait())
            .await
            .ok()?
            .ok()
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

async fn count_bytes(mut stderr: tokio::process::ChildStderr, counter: Arc<AtomicU64>) {
    let mut buf = vec![0u8; 16 * 1024];
    while let Ok(n) = stderr.read(&mut buf).await {
        if n == 0 {
            break;
        }
        counter.fetch_add(n as u64, Ordering::Relaxed);
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
