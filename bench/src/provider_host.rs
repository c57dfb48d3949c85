//! Drives `botmux-remote-runner` the way the BotMux host does: protocol lines on its stdin, events
//! read from its stdout (on a thread, so a full pipe never stalls the provider).

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use serde_json::{Value, json};

use crate::bed::Bed;

/// The provider binary: `$REMOTE_RUNNER_BENCH_PROVIDER` or next to this benchmark binary.
pub fn provider_binary() -> Result<PathBuf> {
    sibling_binary("REMOTE_RUNNER_BENCH_PROVIDER", "botmux-remote-runner")
}

/// `$env_override`, else `name` in the directory of the running binary (target/release).
pub fn sibling_binary(env_override: &str, name: &str) -> Result<PathBuf> {
    if let Some(p) = std::env::var_os(env_override) {
        return Ok(PathBuf::from(p));
    }
    let exe = std::env::current_exe().context("locate the benchmark binary")?;
    let dir = exe
        .parent()
        .ok_or_else(|| anyhow!("the benchmark binary has no parent directory"))?;
    // Under `cargo test` the binary sits in target/<profile>/deps.
    for candidate in [dir.join(name), dir.join("..").join(name)] {
        if candidate.is_file() {
            return Ok(candidate);
        }
    }
    bail!(
        "{name} not found next to {}; build it with `cargo build --release -p \
         remote-runner-provider --bin {name}` (scripts/bench.sh does) or set {env_override}",
        exe.display()
    )
}

/// How a turn ended, as seen by the host.
#[derive(Debug)]
pub struct TurnOutcome {
    /// From writing the turn line to reading `final`.
    pub elapsed: Duration,
    /// Bytes of `progress` content received (UTF-8).
    pub progress_bytes: u64,
}

pub struct ProviderHost {
    child: Child,
    /// `None` once closed (EOF tells the provider to exit).
    stdin: Option<ChildStdin>,
    events: Receiver<Value>,
    next_turn: u64,
}

impl ProviderHost {
    /// Spawn the provider for the bed's machine with the remote shell in `remote_cwd`.
    pub fn spawn(bed: &Bed, state_dir: &Path, remote_cwd: &Path) -> Result<ProviderHost> {
        let mut child = Command::new(provider_binary()?)
            .current_dir(bed.scratch.path())
            .env_remove("SSH_AUTH_SOCK")
            .env("REMOTE_RUNNER_STATE_DIR", state_dir)
            .env("REMOTE_RUNNER_HOST", "127.0.0.1")
            .env("REMOTE_RUNNER_PORT", bed.sshd.port.to_string())
            .env("REMOTE_RUNNER_USER", bed.sshd.user())
            .env("REMOTE_RUNNER_KEY_PATH", bed.key())
            .env("REMOTE_RUNNER_KNOWN_HOSTS", &bed.sshd.known_hosts)
            .env("REMOTE_RUNNER_REMOTE_CWD", remote_cwd)
            .env("REMOTE_RUNNER_TERMINAL", "off")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .context("spawn botmux-remote-runner")?;
        let stdout = child.stdout.take().ok_or_else(|| anyhow!("no stdout"))?;
        let stdin = child.stdin.take().ok_or_else(|| anyhow!("no stdin"))?;
        let (tx, rx) = channel();
        std::thread::spawn(move || {
            for line in BufReader::with_capacity(1 << 20, stdout).lines() {
                let Ok(line) = line else { break };
                let value = serde_json::from_str::<Value>(&line)
                    .unwrap_or_else(|e| json!({"type": "unparsable", "error": e.to_string()}));
                if tx.send(value).is_err() {
                    break;
                }
            }
        });
        Ok(ProviderHost {
            child,
            stdin: Some(stdin),
            events: rx,
            next_turn: 1,
        })
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    fn send(&mut self, kind: &str, fields: Value) -> Result<()> {
        let mut v = json!({"protocol": "botmux.remote-runner", "version": 1, "type": kind});
        if let Some(obj) = fields.as_object() {
            for (k, val) in obj {
                v[k] = val.clone();
            }
        }
        let mut line = v.to_string();
        line.push('\n');
        let stdin = self
            .stdin
            .as_mut()
            .ok_or_else(|| anyhow!("the provider's stdin is already closed"))?;
        stdin
            .write_all(line.as_bytes())
            .and_then(|()| stdin.flush())
            .context("write to the provider's stdin")
    }

    fn next(&self, timeout: Duration) -> Result<Value> {
        match self.events.recv_timeout(timeout) {
            Ok(v) => Ok(v),
            Err(RecvTimeoutError::Timeout) => {
                bail!("no event from the provider within {timeout:?}")
            }
            Err(RecvTimeoutError::Disconnected) => bail!("the provider closed its stdout"),
        }
    }

    /// hello + start; returns once the provider is `ready`.
    pub fn start(&mut self) -> Result<()> {
        self.send(
            "hello",
            json!({"requestId": "hello:1", "sessionId": "bench",
                   "requiredCapabilities": ["start", "turn", "cancel"]}),
        )?;
        let hello = self.next(Duration::from_secs(30))?;
        if hello["type"] != "hello" {
            bail!("expected hello, got {hello}");
        }
        self.send(
            "start",
            json!({"requestId": "start:1", "sessionId": "bench", "cwd": "/bench"}),
        )?;
        let ready = self.next(Duration::from_secs(60))?;
        if ready["type"] != "ready" {
            bail!("expected ready, got {ready}");
        }
        Ok(())
    }

    /// Run one turn to its `final`, counting progress bytes.
    pub fn turn(&mut self, content: &str) -> Result<TurnOutcome> {
        let n = self.next_turn;
        self.next_turn += 1;
        let turn_id = format!("t{n}");
        let start = Instant::now();
        self.send(
            "turn",
            json!({"requestId": format!("turn:{n}"), "turnId": turn_id, "content": content}),
        )?;
        let mut progress_bytes = 0u64;
        loop {
            let v = self.next(Duration::from_secs(600))?;
            match v["type"].as_str().unwrap_or("") {
                "progress" => {
                    progress_bytes += v["content"].as_str().map_or(0, |s| s.len() as u64);
                }
                "final" => {
                    let content = v["content"].as_str().unwrap_or("");
                    if !content.starts_with("exit 0") {
                        bail!("turn {turn_id} did not exit 0: {v}");
                    }
                    return Ok(TurnOutcome {
                        elapsed: start.elapsed(),
                        progress_bytes,
                    });
                }
                "failure" => bail!("turn {turn_id} failed: {v}"),
                "unparsable" => bail!("the provider printed a line that is not JSON: {v}"),
                // The busy ACK, lineage and status events.
                _ => {}
            }
        }
    }

    /// `VmHWM` (peak resident set) of the provider, in KiB.
    pub fn peak_rss_kib(&self) -> Result<u64> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid()))?;
        status
            .lines()
            .find(|l| l.starts_with("VmHWM:"))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| anyhow!("no VmHWM in /proc/{}/status", self.pid()))
    }

    /// Close the session (`cancel` until `closed`), end stdin and wait (bounded) for the
    /// provider to exit.
    pub fn close(mut self) {
        if self
            .send("cancel", json!({"requestId": "cancel:1"}))
            .is_ok()
        {
            while let Ok(v) = self.next(Duration::from_secs(20)) {
                if v["type"] == "status" && v["status"] == "closed" {
                    break;
                }
            }
        }
        self.stdin = None;
        let until = Instant::now() + Duration::from_secs(20);
        while Instant::now() < until {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for ProviderHost {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
