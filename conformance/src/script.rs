//! The blocking face of the scripted host, for the tests and tools that drive a provider step
//! by step (provider tests, the reliability suite, the benchmarks): the same
//! [`ProviderProcess`] as the checking [`crate::host::Host`], every event decoded and validated
//! by the protocol crate and handed over as a JSON value, every wait bounded.
//!
//! The process's pipes are served by one shared runtime thread, so these calls work from any
//! thread, an async test's included (they block it, as a blocking host does).

use std::future::Future;
use std::path::{Path, PathBuf};
use std::process::ExitStatus;
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use remote_runner_protocol::decode_event;
use serde_json::{Value, json};
use tokio::runtime::Runtime;
use tokio::sync::Mutex;

use crate::process::{Line, ProviderProcess, Spawn};

/// Every capability of protocol v1 a host can require.
pub const ALL_CAPABILITIES: [&str; 7] = [
    "start", "resume", "turn", "cancel", "detach", "reattach", "status",
];

/// Written bytes are sent at the latest when this many are pending.
const FLUSH_AT: usize = 1 << 20;

/// A provider process driven by a script, one blocking call at a time.
#[derive(Debug)]
pub struct ScriptHost {
    process: Arc<Mutex<ProviderProcess>>,
    lines: Receiver<Line>,
    /// Bytes given to [`ScriptHost::send_bytes`] and not written yet.
    pending: Vec<u8>,
    pid: u32,
    /// Every event received, in order (while `record` is on).
    pub seen: Vec<Value>,
    /// Whether events are kept in `seen`; on by default (a benchmark streaming hundreds of
    /// megabytes turns it off).
    pub record: bool,
    /// Whether each event is checked against the protocol's rules before it is returned; on by
    /// default (a benchmark timing the provider's throughput turns it off, so that it does not
    /// time the host's checking; it still parses every line).
    pub check: bool,
}

impl ScriptHost {
    /// Spawns `program` in `cwd` with `env` set, stderr drained.
    pub fn spawn(
        program: impl Into<PathBuf>,
        cwd: &Path,
        env: &[(&str, String)],
    ) -> Result<ScriptHost> {
        ScriptHost::spawn_with(Spawn::new(program, cwd, env))
    }

    /// Spawns the process `spec` describes.
    pub fn spawn_with(spec: Spawn) -> Result<ScriptHost> {
        let program = spec.program.clone();
        let (process, lines) = block(async move {
            let mut process = ProviderProcess::start(&spec)?;
            let lines = forward(process.take_lines());
            Ok::<_, std::io::Error>((process, lines))
        })
        .with_context(|| format!("spawn {}", program.display()))?;
        let pid = process
            .pid()
            .ok_or_else(|| anyhow!("the provider has no pid"))?;
        Ok(ScriptHost {
            process: Arc::new(Mutex::new(process)),
            lines,
            pending: Vec::new(),
            pid,
            seen: Vec::new(),
            record: true,
            check: true,
        })
    }

    /// The provider's process id.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Queues `line` plus a newline; it is written by the next flush, send or read.
    pub fn send_bytes(&mut self, line: &[u8]) -> Result<()> {
        self.pending.extend_from_slice(line);
        self.pending.push(b'\n');
        if self.pending.len() >= FLUSH_AT {
            self.flush()?;
        }
        Ok(())
    }

    /// Writes the queued bytes to the provider's stdin.
    pub fn flush(&mut self) -> Result<()> {
        if self.pending.is_empty() {
            return Ok(());
        }
        let bytes = std::mem::take(&mut self.pending);
        let process = Arc::clone(&self.process);
        if block(async move { process.lock().await.write(&bytes).await }) {
            Ok(())
        } else {
            bail!("could not write to the provider's stdin: it is closed or the provider exited")
        }
    }

    /// Writes one raw line (a newline is added).
    pub fn send_raw(&mut self, line: &str) -> Result<()> {
        self.send_bytes(line.as_bytes())?;
        self.flush()
    }

    /// Writes a command of type `kind`; `fields` are merged into the envelope.
    pub fn send(&mut self, kind: &str, fields: Value) -> Result<()> {
        let mut v = json!({"protocol": "botmux.remote-runner", "version": 1, "type": kind});
        if let Some(map) = fields.as_object() {
            for (k, val) in map {
                v[k] = val.clone();
            }
        }
        self.send_raw(&v.to_string())
    }

    /// Closes stdin (after writing what is queued): EOF for the provider.
    pub fn close_stdin(&mut self) {
        let _ = self.flush();
        self.with_process(|p| p.close_stdin());
    }

    /// The next event; `Ok(None)` when `timeout` passes or stdout has ended.
    pub fn try_next(&mut self, timeout: Duration) -> Result<Option<Value>> {
        match self.read(timeout)? {
            Ok(v) => Ok(Some(v)),
            Err(_) => Ok(None),
        }
    }

    /// The next event; an error when `timeout` passes or stdout has ended.
    pub fn next(&mut self, timeout: Duration) -> Result<Value> {
        match self.read(timeout)? {
            Ok(v) => Ok(v),
            Err(RecvTimeoutError::Timeout) => {
                bail!("no event from the provider within {timeout:?}")
            }
            Err(RecvTimeoutError::Disconnected) => bail!("the provider closed its stdout"),
        }
    }

    /// Reads until an event matches `pred` (the others stay in `seen`).
    pub fn wait_for(&mut self, timeout: Duration, pred: impl Fn(&Value) -> bool) -> Result<Value> {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.read(left)? {
                Ok(v) if pred(&v) => return Ok(v),
                Ok(_) => {}
                Err(RecvTimeoutError::Timeout) => bail!(
                    "no matching event within {timeout:?}; last: {:?}",
                    self.seen.last()
                ),
                Err(RecvTimeoutError::Disconnected) => bail!(
                    "the provider closed its stdout before a matching event; last: {:?}",
                    self.seen.last()
                ),
            }
        }
    }

    /// One event, checked and recorded in `seen`; the inner error says why there was none.
    fn read(&mut self, timeout: Duration) -> Result<Result<Value, RecvTimeoutError>> {
        self.flush()?;
        let line = match self.lines.recv_timeout(timeout) {
            Ok(line) => line,
            Err(none) => return Ok(Err(none)),
        };
        let value = checked(line, self.check)?;
        if self.record {
            self.seen.push(value.clone());
        }
        Ok(Ok(value))
    }

    /// `hello` for session `s` requiring every capability, and its reply.
    pub fn hello(&mut self) -> Result<Value> {
        self.send(
            "hello",
            json!({"requestId": "hello:1", "sessionId": "s", "requiredCapabilities": ALL_CAPABILITIES}),
        )?;
        self.wait_for(Duration::from_secs(20), |v| v["requestId"] == "hello:1")
    }

    /// `start` in `cwd` and its reply.
    pub fn start(&mut self, cwd: &str) -> Result<Value> {
        self.send(
            "start",
            json!({"requestId": "start:1", "sessionId": "s", "cwd": cwd}),
        )?;
        self.wait_for(Duration::from_secs(60), |v| v["requestId"] == "start:1")
    }

    /// `resume` with a saved state and its reply.
    pub fn resume(&mut self, id: &str, state: &Value) -> Result<Value> {
        self.send(
            "resume",
            json!({"requestId": id, "sessionId": "s", "cwd": "/x", "state": state}),
        )?;
        self.wait_for(Duration::from_secs(60), |v| v["requestId"] == id)
    }

    /// Sends turn `id` (requestId `turn:<id>`) and waits for its busy ACK.
    pub fn begin_turn(&mut self, id: &str, content: &str) -> Result<()> {
        let rid = format!("turn:{id}");
        self.send(
            "turn",
            json!({"requestId": rid, "turnId": id, "content": content}),
        )?;
        let ack = self.wait_for(Duration::from_secs(60), |v| v["requestId"] == rid.as_str())?;
        if ack["type"] != "status" || ack["status"] != "busy" {
            bail!("turn {id} was not accepted: {ack}");
        }
        Ok(())
    }

    /// Collects turn `id`'s progress text until its final or failure, which it returns too.
    pub fn finish_turn(&mut self, id: &str, timeout: Duration) -> Result<(String, Value)> {
        let mut text = String::new();
        let end = self.finish_turn_with(id, timeout, |chunk| text.push_str(chunk))?;
        Ok((text, end))
    }

    /// Hands each of turn `id`'s progress contents to `on_progress` until its final or failure,
    /// which it returns. Events of other turns are skipped.
    pub fn finish_turn_with(
        &mut self,
        id: &str,
        timeout: Duration,
        mut on_progress: impl FnMut(&str),
    ) -> Result<Value> {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let Some(v) = self.try_next(left.max(Duration::from_millis(1)))? else {
                bail!("turn {id} did not end within {timeout:?}");
            };
            if v["turnId"] != id {
                continue;
            }
            match v["type"].as_str() {
                Some("progress") => on_progress(v["content"].as_str().unwrap_or_default()),
                Some("final") | Some("failure") => return Ok(v),
                _ => {}
            }
        }
    }

    /// Sends `signal` (a `kill -s` name or number) with stdin left as it is.
    pub fn signal(&self, signal: &str) -> Result<()> {
        let signal = signal.to_owned();
        let process = Arc::clone(&self.process);
        if block(async move { process.lock().await.signal(&signal).await }) {
            Ok(())
        } else {
            bail!("could not signal the provider (pid {})", self.pid)
        }
    }

    /// Waits up to `timeout` for the provider to exit; its status if it did.
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let process = Arc::clone(&self.process);
        block(async move { process.lock().await.wait_status(timeout).await })
    }

    /// Whether the provider is still running.
    pub fn alive(&mut self) -> bool {
        !self.with_process(|p| p.has_exited())
    }

    /// Kills the provider (if running) and reaps it.
    pub fn kill(&mut self) {
        let process = Arc::clone(&self.process);
        block(async move { process.lock().await.kill().await });
    }

    /// `VmHWM` (peak resident set) of the running provider, in KiB.
    pub fn peak_rss_kib(&self) -> Result<u64> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid))?;
        status
            .lines()
            .find(|l| l.starts_with("VmHWM:"))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| anyhow!("no VmHWM in /proc/{}/status", self.pid))
    }

    fn with_process<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut ProviderProcess) -> T + Send + 'static,
    ) -> T {
        let process = Arc::clone(&self.process);
        block(async move { f(&mut *process.lock().await) })
    }
}

impl Drop for ScriptHost {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Decodes and validates one stdout item as the host does.
fn checked(line: Line, check: bool) -> Result<Value> {
    let bytes = match line {
        Line::Text(bytes) => bytes,
        Line::Broken(err) => bail!("the provider printed a broken line: {err}"),
        Line::ReadError(err) => bail!("reading the provider's stdout failed: {err}"),
    };
    if !check {
        return serde_json::from_slice(&bytes).with_context(|| {
            format!(
                "the provider printed a line that is not JSON: {}",
                String::from_utf8_lossy(&bytes)
            )
        });
    }
    if let Err(e) = decode_event(&bytes) {
        bail!(
            "the provider printed an invalid line ({e}): {}",
            String::from_utf8_lossy(&bytes)
        );
    }
    Ok(serde_json::from_slice(&bytes)?)
}

/// The shared runtime serving every script host's pipes.
fn runtime() -> &'static Runtime {
    static RUNTIME: OnceLock<Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("script-host")
            .enable_all()
            .build()
            .expect("start the script host's runtime")
    })
}

/// Runs `future` on the shared runtime and waits for it; unlike `block_on`, this works inside
/// another runtime too.
fn block<T: Send + 'static>(future: impl Future<Output = T> + Send + 'static) -> T {
    let (tx, rx) = std::sync::mpsc::sync_channel(1);
    runtime().spawn(async move {
        let _ = tx.send(future.await);
    });
    rx.recv().expect("the script host's task ran to its end")
}

/// Moves stdout items onto a channel a plain thread can wait on with a timeout.
fn forward(mut from: tokio::sync::mpsc::Receiver<Line>) -> Receiver<Line> {
    let (tx, rx) = std::sync::mpsc::channel();
    tokio::spawn(async move {
        while let Some(line) = from.recv().await {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}
