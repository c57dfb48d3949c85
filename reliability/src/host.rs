//! A scripted BotMux host: spawns the provider as the host does (no arguments, environment),
//! writes command lines, and checks every line it prints with the protocol crate.

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{Receiver, channel};
use std::time::{Duration, Instant};

use anyhow::{Result, anyhow, bail};
use remote_runner_testkit::Sshd;
use serde_json::{Value, json};

pub struct Host {
    pub child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<Vec<u8>>,
    /// Every event received, in order.
    pub seen: Vec<Value>,
}

/// Environment for a provider reaching `sshd` as the login user, sessions in `cwd`.
pub fn ssh_env(sshd: &Sshd, state: &Path, cwd: &Path) -> Vec<(&'static str, String)> {
    vec![
        ("REMOTE_RUNNER_STATE_DIR", state.display().to_string()),
        ("REMOTE_RUNNER_HOST", "127.0.0.1".into()),
        ("REMOTE_RUNNER_PORT", sshd.port.to_string()),
        ("REMOTE_RUNNER_USER", sshd.user().into()),
        (
            "REMOTE_RUNNER_KEY_PATH",
            sshd.keys.ed25519.display().to_string(),
        ),
        (
            "REMOTE_RUNNER_KNOWN_HOSTS",
            sshd.known_hosts.display().to_string(),
        ),
        ("REMOTE_RUNNER_REMOTE_CWD", cwd.display().to_string()),
        ("REMOTE_RUNNER_TERMINAL", "off".into()),
        ("SSH_AUTH_SOCK", String::new()),
    ]
}

impl Host {
    pub fn spawn(bin: &str, cwd: &Path, env: &[(&str, String)]) -> Result<Host> {
        let mut cmd = Command::new(bin);
        cmd.current_dir(cwd)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn()?;
        let stdout = child.stdout.take().ok_or_else(|| anyhow!("no stdout"))?;
        let (tx, rx) = channel();
        std::thread::spawn(move || {
            let mut reader = BufReader::new(stdout);
            loop {
                let mut line = Vec::new();
                match reader.read_until(b'\n', &mut line) {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {
                        if line.last() == Some(&b'\n') {
                            line.pop();
                        }
                        if tx.send(line).is_err() {
                            break;
                        }
                    }
                }
            }
        });
        Ok(Host {
            stdin: child.stdin.take(),
            child,
            lines: rx,
            seen: Vec::new(),
        })
    }

    /// Write raw bytes plus a newline.
    pub fn send_bytes(&mut self, line: &[u8]) -> Result<()> {
        let stdin = self.stdin.as_mut().ok_or_else(|| anyhow!("stdin closed"))?;
        stdin.write_all(line)?;
        stdin.write_all(b"\n")?;
        Ok(())
    }

    pub fn flush(&mut self) -> Result<()> {
        if let Some(s) = self.stdin.as_mut() {
            s.flush()?;
        }
        Ok(())
    }

    /// Send a command; `fields` are merged into the envelope.
    pub fn send(&mut self, kind: &str, fields: Value) -> Result<()> {
        let mut v = json!({"protocol": "botmux.remote-runner", "version": 1, "type": kind});
        if let Some(map) = fields.as_object() {
            for (k, val) in map {
                v[k] = val.clone();
            }
        }
        self.send_bytes(v.to_string().as_bytes())?;
        self.flush()
    }

    /// The next event, validated by the protocol crate; `Ok(None)` on timeout or end of output.
    pub fn try_next(&mut self, timeout: Duration) -> Result<Option<Value>> {
        match self.lines.recv_timeout(timeout) {
            Ok(line) => {
                if let Err(e) = remote_runner_protocol::decode_event(&line) {
                    bail!(
                        "the provider printed an invalid line ({e}): {}",
                        String::from_utf8_lossy(&line)
                    );
                }
                let v: Value = serde_json::from_slice(&line)?;
                self.seen.push(v.clone());
                Ok(Some(v))
            }
            Err(_) => Ok(None),
        }
    }

    /// Wait for an event matching `pred`.
    pub fn wait_for(&mut self, timeout: Duration, pred: impl Fn(&Value) -> bool) -> Result<Value> {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                bail!(
                    "no matching event within {timeout:?}; last: {:?}",
                    self.seen.last()
                );
            }
            if let Some(v) = self.try_next(left)?
                && pred(&v)
            {
                return Ok(v);
            }
        }
    }

    pub fn hello(&mut self) -> Result<Value> {
        self.send(
            "hello",
            json!({"requestId": "hello:1", "sessionId": "s", "requiredCapabilities": ["start","resume","turn","cancel","detach","reattach","status"]}),
        )?;
        self.wait_for(Duration::from_secs(20), |v| v["requestId"] == "hello:1")
    }

    /// `start` and its `ready`.
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

    /// Send a turn and wait for its busy ACK.
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

    /// Collect a turn's progress text until its final or failure.
    pub fn finish_turn(&mut self, id: &str, timeout: Duration) -> Result<(String, Value)> {
        let deadline = Instant::now() + timeout;
        let mut text = String::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let Some(v) = self.try_next(left.max(Duration::from_millis(1)))? else {
                bail!("turn {id} did not end within {timeout:?}");
            };
            if v["turnId"] != id {
                continue;
            }
            match v["type"].as_str() {
                Some("progress") => text.push_str(v["content"].as_str().unwrap_or_default()),
                Some("final") | Some("failure") => return Ok((text, v)),
                _ => {}
            }
        }
    }

    /// Whether the process is still running.
    pub fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }
}

impl Drop for Host {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
