//! One engine, two front doors: a session that the protocol provider (`botmux-remote-runner`,
//! driven by a short scripted host on its stdin) created is listed, read, typed into and
//! destroyed by the CLI sharing its state dir; on `local` and on an SSH machine of the sshd
//! test bed.

mod common;
mod session_bed;

use std::path::PathBuf;
use std::process::Command;

use remote_runner_conformance::process::Spawn;
use remote_runner_conformance::script::ScriptHost;
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

/// The workspace's scripted host driving the provider, with this test's two steps on top.
struct Provider(ScriptHost);

impl Provider {
    fn spawn(bed: &Bed) -> Provider {
        let mut env = vec![
            ("HOME", bed.sb.home().display().to_string()),
            (
                "REMOTE_RUNNER_STATE_DIR",
                bed.sb.state_dir().display().to_string(),
            ),
            ("REMOTE_RUNNER_TERMINAL", "off".to_string()),
            ("REMOTE_RUNNER_MACHINE", bed.machine.clone()),
        ];
        if let Some(sshd) = bed.sshd() {
            env.push((
                "REMOTE_RUNNER_SSH_CONFIG",
                sshd.ssh_config.display().to_string(),
            ));
        }
        let spec = Spawn {
            env_remove: vec!["SSH_AUTH_SOCK".into()],
            ..Spawn::new(provider_bin(), &bed.work, &env)
        };
        Provider(ScriptHost::spawn_with(spec).expect("spawn botmux-remote-runner"))
    }

    fn send(&mut self, kind: &str, fields: Value) {
        self.0.send(kind, fields).unwrap();
    }

    /// The next event of one of `types`.
    fn expect(&mut self, types: &[&str]) -> Value {
        self.0
            .wait_for(DEADLINE, |v| types.iter().any(|t| v["type"] == *t))
            .expect("the provider went quiet")
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
