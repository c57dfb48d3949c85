//! Our provider under the conformance harness, as any other provider would be checked: on the
//! `local` machine and over SSH against the real sshd test bed. Every applicable scenario passes.

use remote_runner_conformance::{Config, run, select};
use remote_runner_testkit::Sshd;

const BIN: &str = env!("CARGO_BIN_EXE_botmux-remote-runner");

async fn check(env: Vec<(String, String)>) {
    let mut config = Config::new(vec![BIN.to_string()]);
    config.env = env;
    // Our provider meets the recommended scenarios too.
    config.strict = true;
    let scenarios = select(&config).expect("scenarios");
    let report = run(&config, scenarios).await;
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
        let _ = std::process::Command::new("tmux")
            .args(["-L", "remote-runner", "kill-server"])
            .env("TMUX_TMPDIR", &self.0)
            .stderr(std::process::Stdio::null())
            .status();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn provider_conforms_over_ssh() {
    let sshd = Sshd::start().expect("sshd test bed");
    let state = tempfile::tempdir().unwrap();
    let remote = sshd.remote_dir("conformance").unwrap();
    check(vec![
        (
            "REMOTE_RUNNER_STATE_DIR".into(),
            state.path().display().to_string(),
        ),
        ("REMOTE_RUNNER_HOST".into(), "127.0.0.1".into()),
        ("REMOTE_RUNNER_PORT".into(), sshd.port.to_string()),
        ("REMOTE_RUNNER_USER".into(), sshd.user().into()),
        (
            "REMOTE_RUNNER_KEY_PATH".into(),
            sshd.keys.ed25519.display().to_string(),
        ),
        (
            "REMOTE_RUNNER_KNOWN_HOSTS".into(),
            sshd.known_hosts.display().to_string(),
        ),
        (
            "REMOTE_RUNNER_REMOTE_CWD".into(),
            remote.display().to_string(),
        ),
        ("SSH_AUTH_SOCK".into(), String::new()),
    ])
    .await;
}
