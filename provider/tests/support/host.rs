//! The scripted BotMux host for end-to-end tests: the conformance crate's [`ScriptHost`]
//! spawning `botmux-remote-runner` as the host does (no arguments, a cwd, environment, stderr
//! shown), with panicking steps and the turn checks these tests share.

#![allow(dead_code)]

use std::ops::{Deref, DerefMut};
use std::path::Path;
use std::time::{Duration, Instant};

use remote_runner_conformance::process::Spawn;
use remote_runner_conformance::script::{ALL_CAPABILITIES, ScriptHost};
use serde_json::{Value, json};

pub const BIN: &str = env!("CARGO_BIN_EXE_botmux-remote-runner");

pub struct Host(ScriptHost);

impl Deref for Host {
    type Target = ScriptHost;
    fn deref(&self) -> &ScriptHost {
        &self.0
    }
}

impl DerefMut for Host {
    fn deref_mut(&mut self) -> &mut ScriptHost {
        &mut self.0
    }
}

impl Host {
    pub fn spawn(cwd: &Path, env: &[(&str, String)]) -> Host {
        let spec = Spawn {
            inherit_stderr: true,
            ..Spawn::new(BIN, cwd, env)
        };
        Host(ScriptHost::spawn_with(spec).expect("spawn botmux-remote-runner"))
    }

    pub fn send_raw(&mut self, line: &str) {
        self.0.send_raw(line).unwrap();
    }

    /// Send a command: `fields` are merged into the envelope.
    pub fn send(&mut self, kind: &str, fields: Value) {
        self.0.send(kind, fields).unwrap();
    }

    /// The next event (validated by the protocol crate), or panic after `timeout`.
    pub fn next(&mut self, timeout: Duration) -> Value {
        self.try_next(timeout)
            .unwrap_or_else(|| panic!("no event within {timeout:?}; seen: {:#?}", self.seen))
    }

    pub fn try_next(&mut self, timeout: Duration) -> Option<Value> {
        self.0.try_next(timeout).unwrap_or_else(|e| panic!("{e}"))
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
        self.0
            .wait_for(timeout, pred)
            .unwrap_or_else(|e| panic!("{e}; seen: {:#?}", self.seen))
    }

    /// `hello` and the next event that is not a screen (not a wait for `hello:1`: anything
    /// else first fails the test's check).
    pub fn hello(&mut self) -> Value {
        self.send(
            "hello",
            json!({"requestId": "hello:1", "sessionId": "s", "requiredCapabilities": ALL_CAPABILITIES}),
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
}

/// The state object of a ready/status/final event.
pub fn state_of(v: &Value) -> Value {
    v["state"].clone()
}
