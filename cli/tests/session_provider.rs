//! One engine, two front doors: a session that the protocol provider (`botmux-remote-runner`,
//! driven by a short scripted host on its stdin) created is listed, read, typed into and
//! destroyed by the CLI sharing its state dir; on `local` and on an SSH machine of the sshd
//! test bed.

mod common;
mod session_bed;

use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{Receiver, channel};

use serde_json::{Value, json};
use session_bed::{Bed, DEADLINE, eventually};

/// The provider binary beside the CLI's; built on demand when this package is tested alone.
fn provider_bin() -> PathBuf {
    let bin = PathBuf::from(common::BIN)
        .parent()
        .unwrap()
        .join("botmux-remote-runner");
    if !bin.exists() {
        let status = Command::new(env!("CARGO"))
            .args([
                "build",
                "-p",
                "remote-runner-provider",
                "--bin",
                "botmux-remote-runner",
            ])
            .status()
            .expect("run cargo to build botmux-remote-runner");
        assert!(status.success(), "cannot build botmux-remote-runner");
    }
    bin
}

struct Provider {
    child: Child,
    lines: Receiver<Value>,
}

impl Provider {
    fn spawn(bed: &Bed) -> Provider {
        let mut command = Command::new(provider_bin());
        if let Some(sshd) = bed.sshd() {
            command.env("REMOTE_RUNNER_SSH_CONFIG", &sshd.ssh_config);
        }
        let mut child = command
            .current_dir(&bed.work)
            .env("HOME", bed.sb.home())
            .env("REMOTE_RUNNER_STATE_DIR", bed.sb.state_dir())
            .env("REMOTE_RUNNER_TERMINAL", "off")
            .env("REMOTE_RUNNER_MACHINE", &bed.machine)
            .env_remove("SSH_AUTH_SOCK")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn botmux-remote-runner");
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                let Ok(v) = serde_json::from_str::<Value>(&line) else {
                    continue;
                };
                if tx.send(v).is_err() {
                    break;
                }
            }
        });
        Provider { child, lines: rx }
    }

    fn send(&mut self, kind: &str, fields: Value) {
        let mut v = json!({"protocol": "botmux.remote-runner", "version": 1, "type": kind});
        for (k, val) in fields.as_object().unwrap() {
            v[k] = val.clone();
        }
        let stdin = self.child.stdin.as_mut().unwrap();
        writeln!(stdin, "{v}").unwrap();
        stdin.flush().unwrap();
    }

    /// The next event of one of `types`.
    fn expect(&mut self, types: &[&str]) -> Value {
        loop {
            let v = self
                .lines
                .recv_timeout(DEADLINE)
                .expect("the provider went quiet");
            if types.iter().any(|t| v["type"] == *t) {
                return v;
            }
        }
    }
}

impl Drop for Provider {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn a_provider_session_is_listed_read_and_destroyed_by_the_cli(bed: &Bed) {
    let mut provider = Provider::spawn(bed);
    provider.send(
        "hello",
        json!({"requestId": "hello:1", "sessionId": "chat", "requiredCapabilities": ["start", "turn"]}),
    );
    assert_eq!(provider.expect(&["hello", "failure"])["type"], "hello");
    provider.send(
        "start",
        json!({"requestId": "start:1", "sessionId": "chat", "cwd": bed.work_str()}),
    );
    let ready = provider.expect(&["ready", "failure"]);
    assert_eq!(ready["type"], "ready", "{ready}");
    provider.send(
        "turn",
        json!({"requestId": "turn:1", "turnId": "t1", "content": "echo from-provider-$((6*7))"}),
    );
    let fin = provider.expect(&["final", "failure"]);
    assert_eq!(fin["type"], "final", "{fin}");

    let list = bed.json(&["session", "list"]);
    let sessions = list["sessions"].as_array().unwrap();
    assert_eq!(sessions.len(), 1, "{list}");
    assert_eq!(sessions[0]["machine_id"], bed.machine.as_str());
    assert_eq!(sessions[0]["cwd"], bed.work_str().as_str());
    assert_eq!(sessions[0]["status"], "active");
    let s = sessions[0]["session_id"].as_str().unwrap().to_string();

    let commands = bed.json(&["session", "command", "list", "--session", &s]);
    let outputs: Vec<&str> = commands["commands"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|c| c["stdout"].as_str())
        .collect();
    assert!(outputs.contains(&"from-provider-42\n"), "{commands:#}");

    bed.json(&[
        "session",
        "send",
        "--session",
        &s,
        "--input",
        "echo cli-$((5+5))",
    ]);
    eventually("the CLI's input in the provider's session", || {
        let v = bed.json(&["session", "read", "--session", &s]);
        v["text"].as_str().unwrap().contains("cli-10").then_some(())
    });

    let destroyed = bed.json(&["session", "destroy", "--session", &s]);
    assert_eq!(destroyed["status"], "destroyed");
    assert_eq!(
        bed.json(&["session", "show", "--session", &s])["status"],
        "destroyed"
    );
}
both_machines!(
    provider_session,
    a_provider_session_is_listed_read_and_destroyed_by_the_cli
);
