//! A scripted BotMux host for end-to-end tests: spawns `botmux-remote-runner` as the host does
//! (no arguments, a cwd, environment) and checks every line it prints with the protocol crate.

#![allow(dead_code)]

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

pub const BIN: &str = env!("CARGO_BIN_EXE_botmux-remote-runner");

pub struct Host {
    pub child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<String>,
    /// Every event received, in order.
    pub seen: Vec<Value>,
}

impl Host {
    pub fn spawn(cwd: &Path, env: &[(&str, String)]) -> Host {
        let mut cmd = Command::new(BIN);
        cmd.current_dir(cwd)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().expect("spawn botmux-remote-runner");
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                match line {
                    Ok(l) => {
                        if tx.send(l).is_err() {
                            break;
                        }
                    }
                    Err(_) => break,
                }
            }
        });
        Host {
            stdin: child.stdin.take(),
            child,
            lines: rx,
            seen: Vec::new(),
        }
    }

    pub fn send_raw(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().expect("stdin open");
        stdin.write_all(line.as_bytes()).unwrap();
        stdin.write_all(b"\n").unwrap();
        stdin.flush().unwrap();
    }

    /// Send a command: `fields` are merged into the envelope.
    pub fn send(&mut self, kind: &str, fields: Value) {
        let mut v = json!({"protocol": "botmux.remote-runner", "version": 1, "type": kind});
        for (k, val) in fields.as_object().unwrap() {
            v[k] = val.clone();
        }
        self.send_raw(&v.to_string());
    }

    pub fn close_stdin(&mut self) {
        self.stdin = None;
    }

    /// The next event (validated by the protocol crate), or panic after `timeout`.
    pub fn next(&mut self, timeout: Duration) -> Value {
        self.try_next(timeout)
            .unwrap_or_else(|| panic!("no event within {timeout:?}; seen: {:#?}", self.seen))
    }

    pub fn try_next(&mut self, timeout: Duration) -> Option<Value> {
        match self.lines.recv_timeout(timeout) {
            Ok(line) => {
                if let Err(e) = remote_runner_protocol::decode_event(line.as_bytes()) {
                    panic!("provider printed an invalid line: {e}\n{line}");
                }
                let v: Value = serde_json::from_str(&line).unwrap();
                self.seen.push(v.clone());
                Some(v)
            }
            Err(RecvTimeoutError::Timeout) => None,
            Err(RecvTimeoutError::Disconnected) => None,
        }
    }

    /// Skip terminal screens; return the next other event.
    pub fn next_non_screen(&mut self, timeout: Duration) -> Value {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let v = self.next(left.max(Duration::from_millis(1)));
            if v["type"] != "terminal_screen" {
                return v;
            }
        }
    }

    /// Wait for an event matching `pred` (other events are kept in `seen`).
    pub fn wait_for(&mut self, timeout: Duration, pred: impl Fn(&Value) -> bool) -> Value {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                panic!(
                    "no matching event within {timeout:?}; seen: {:#?}",
                    self.seen
                );
            }
            let v = self.next(left);
            if pred(&v) {
                return v;
            }
        }
    }

    pub fn hello(&mut self) -> Value {
        self.send(
            "hello",
            json!({"requestId": "hello:1", "sessionId": "s", "requiredCapabilities": ["start","resume","turn","cancel","detach","reattach","status"]}),
        );
        self.next_non_screen(Duration::from_secs(10))
    }

    pub fn start(&mut self, cwd: &str) -> Value {
        self.send(
            "start",
            json!({"requestId": "start:1", "sessionId": "s", "cwd": cwd}),
        );
        self.next_non_screen(Duration::from_secs(30))
    }

    /// Run a turn to its end: returns (ack, progress text, terminal event).
    pub fn turn(&mut self, n: usize, content: &str) -> (Value, String, Value) {
        let rid = format!("turn:{n}");
        let tid = format!("t{n}");
        self.send(
            "turn",
            json!({"requestId": rid, "turnId": tid, "content": content}),
        );
        let mut ack = self.next_non_screen(Duration::from_secs(30));
        while ack["type"] == "lineage_changed" {
            ack = self.next_non_screen(Duration::from_secs(30));
        }
        let mut progress = String::new();
        if ack["type"] == "failure" {
            return (ack.clone(), progress, ack);
        }
        assert_eq!(ack["type"], "status", "{ack}");
        assert_eq!(ack["status"], "busy", "{ack}");
        assert_eq!(ack["requestId"], rid);
        loop {
            let v = self.next_non_screen(Duration::from_secs(120));
            match v["type"].as_str().unwrap() {
                "progress" => {
                    assert_eq!(v["turnId"], tid.as_str());
                    progress.push_str(v["content"].as_str().unwrap());
                }
                "lineage_changed" => {}
                "final" | "failure" => {
                    assert_eq!(v["turnId"], tid.as_str(), "{v}");
                    return (ack, progress, v);
                }
                other => panic!("unexpected {other} during a turn: {v}"),
            }
        }
    }

    pub fn wait_exit(&mut self, timeout: Duration) -> Option<std::process::ExitStatus> {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if let Some(st) = self.child.try_wait().unwrap() {
                return Some(st);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        None
    }
}

impl Drop for Host {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The provider's environment for a machine on the sshd test bed: `state` is the local state
/// dir, `cwd` the remote working directory.
pub fn ssh_env(
    sshd: &remote_runner_testkit::Sshd,
    state: &Path,
    cwd: &Path,
) -> Vec<(&'static str, String)> {
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
        ("SSH_AUTH_SOCK", String::new()),
    ]
}

/// The state object of a ready/status/final event.
pub fn state_of(v: &Value) -> Value {
    v["state"].clone()
}
