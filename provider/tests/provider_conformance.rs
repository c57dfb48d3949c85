//! Our provider under the conformance harness, as any other provider would be checked: on the
//! `local` machine and over SSH against the real sshd test bed. Every applicable scenario passes.
//! Over SSH the harness's trigger contents (`request-outbound`, `request-session-tool`, and
//! their `-duplicate`, `-conflict` and `-burst` variants) are small scripts on the session's
//! PATH that call the chat helper, so every outbound and session_tool scenario applies.

#[path = "../../engine/tests/ssh_common/mod.rs"]
mod ssh_common;

use remote_runner_conformance::{Config, Outcome, Report, run, select};
use remote_runner_engine::store::{self, Store};
use remote_runner_testkit::Sshd;

const BIN: &str = env!("CARGO_BIN_EXE_botmux-remote-runner");

async fn check(env: Vec<(String, String)>) -> Report {
    expect_success(conform(env).await)
}

/// Runs every scenario against our provider.
async fn conform(env: Vec<(String, String)>) -> Report {
    let mut config = Config::new(vec![BIN.to_string()]);
    config.env = env;
    // Our provider meets the recommended scenarios too.
    config.strict = true;
    let scenarios = select(&config).expect("scenarios");
    run(&config, scenarios).await
}

/// Every applicable scenario passed, and enough applied.
fn expect_success(report: Report) -> Report {
    let (passed, failed, not_applicable) = report.counts();
    eprintln!("{}", report.to_text());
    assert!(
        report.success(),
        "{failed} scenario(s) failed:\n{}",
        report.to_text()
    );
    assert!(
        passed >= 40,
        "only {passed} scenarios applied ({not_applicable} n/a)"
    );
    report
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn provider_conforms_on_the_local_machine() {
    let state = tempfile::tempdir().unwrap();
    // The scenarios leave their sessions running, as a host's would: a tmux server of this
    // test's own (its socket under TMUX_TMPDIR), stopped at the end, keeps them off the
    // machine's shared one.
    let tmux_dir = tempfile::tempdir().unwrap();
    let tmux_tmpdir = tmux_dir.path().display().to_string();
    let stop_tmux = StopTmux(tmux_tmpdir.clone());
    check(vec![
        (
            "REMOTE_RUNNER_STATE_DIR".into(),
            state.path().display().to_string(),
        ),
        ("TMUX_TMPDIR".into(), tmux_tmpdir),
    ])
    .await;
    drop(stop_tmux);
}

/// Stops the tmux server under a TMUX_TMPDIR when dropped (also when the test fails).
struct StopTmux(String);

impl Drop for StopTmux {
    fn drop(&mut self) {
        // Each session has a server of its own (`remote-runner-<session id>`).
        let _ = std::process::Command::new("sh")
            .args([
                "-c",
                r#"for s in "$TMUX_TMPDIR/tmux-$(id -u)"/remote-runner*; do [ -S "$s" ] && tmux -S "$s" kill-server; done; true"#,
            ])
            .env("TMUX_TMPDIR", &self.0)
            .stderr(std::process::Stdio::null())
            .status();
    }
}

/// The harness's trigger contents, as commands of the session shell (POSIX sh scripts).
const TRIGGERS: &[(&str, &str)] = &[
    (
        "request-outbound",
        r#""$RR_CHAT" send 'conformance progress'"#,
    ),
    (
        "request-outbound-duplicate",
        r#""$RR_CHAT" send --id conformance-dup same && "$RR_CHAT" send --id conformance-dup same"#,
    ),
    (
        "request-outbound-conflict",
        r#""$RR_CHAT" send --id conformance-conflict first; "$RR_CHAT" send --id conformance-conflict second; true"#,
    ),
    (
        "request-outbound-burst",
        r#"for i in 1 2 3 4 5 6 7 8 9 10 11; do "$RR_CHAT" send "burst $i"; done; true"#,
    ),
    (
        "request-session-tool",
        r#""$RR_CHAT" history --limit 20 --scope thread"#,
    ),
    (
        "request-session-tool-duplicate",
        r#""$RR_CHAT" tool --id conformance-dup '{"tool":"bots.list"}' && "$RR_CHAT" tool --id conformance-dup '{"tool":"bots.list"}'"#,
    ),
    (
        "request-session-tool-conflict",
        r#""$RR_CHAT" tool --id conformance-conflict '{"tool":"bots.list"}'; "$RR_CHAT" tool --id conformance-conflict '{"tool":"skill.list"}'; true"#,
    ),
    (
        "request-session-tool-burst",
        r#"i=0; while [ $i -lt 31 ]; do i=$((i + 1)); "$RR_CHAT" bots; done; true"#,
    ),
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn provider_conforms_over_ssh() {
    use std::os::unix::fs::PermissionsExt;

    let sshd = Sshd::start().expect("sshd test bed");
    let state = tempfile::tempdir().unwrap();
    let remote = sshd.remote_dir("conformance").unwrap();
    let bin = sshd.remote_dir("conformance-triggers").unwrap();
    for (name, body) in TRIGGERS {
        let path = bin.join(name);
        std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    // A stored machine whose sessions find the triggers on PATH (a startup command).
    let mut machine = ssh_common::machine_for(&sshd, sshd.user(), &sshd.keys.ed25519);
    machine.machine_id = "conformance".into();
    machine.default_cwd = remote.display().to_string();
    machine.startup_commands = vec![format!("export PATH='{}':\"$PATH\"", bin.display())];
    store::machines::insert(&Store::open(state.path()).unwrap(), &machine).unwrap();
    let report = conform(vec![
        (
            "REMOTE_RUNNER_STATE_DIR".into(),
            state.path().display().to_string(),
        ),
        ("REMOTE_RUNNER_MACHINE".into(), "conformance".into()),
        ("SSH_AUTH_SOCK".into(), String::new()),
    ])
    .await;
    // Before any assertion, so that a failing run leaves nothing behind either.
    destroy_sessions(state.path()).await;
    let report = expect_success(report);
    for scenario in &report.scenarios {
        if scenario.group == "outbound" || scenario.group == "session_tool" {
            assert_eq!(
                scenario.outcome,
                Outcome::Pass,
                "{} must apply and pass over SSH",
                scenario.name
            );
        }
    }
}

/// The scenarios leave their sessions running, as a host's would: destroy every session the
/// providers recorded in this state dir, so no tmux session outlives the test.
async fn destroy_sessions(state_dir: &std::path::Path) {
    use remote_runner_engine::connect::MachineConnector;
    use remote_runner_engine::engine::Engine;
    let connector = std::sync::Arc::new(MachineConnector::new(
        state_dir.to_path_buf(),
        ssh_common::opts(),
    ));
    let engine = Engine::new(state_dir, connector).unwrap();
    for session in engine.session_list().unwrap() {
        if let Err(e) = engine.destroy(&session.session_id).await {
            eprintln!("destroying {} failed: {e}", session.session_id);
        }
    }
}
