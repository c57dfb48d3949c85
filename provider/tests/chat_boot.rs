//! The chat helper is checked before a turn's program can run it (issue 28): a turn's command
//! runs `"$RR_CHAT"` by path, so the engine checks the helper and every directory above it
//! (StrictModes) before each turn. Over the real sshd, with the account's own state directory
//! (XDG_STATE_HOME, set by sshd) so nothing is shared with other tests.

mod support;

use std::os::unix::fs::PermissionsExt;

use remote_runner_testkit::{Sshd, TEST_USER};
use support::host::Host;

fn chown(path: &std::path::Path, user: &str) {
    let st = std::process::Command::new("chown")
        .arg(format!("{user}:"))
        .arg(path)
        .status()
        .unwrap();
    assert!(st.success());
}

/// A helper others can write to (a careless `chmod 666`, or a copy from elsewhere) is edited by
/// another user; the next turn is refused with `insecure_remote_dir`, and the edit never runs.
#[test]
fn a_helper_others_can_write_is_refused_before_the_turn() {
    let base = tempfile::Builder::new()
        .prefix("rr-chat-boot-")
        .tempdir()
        .unwrap();
    std::fs::set_permissions(base.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let xdg = base.path().join("state");
    std::fs::create_dir(&xdg).unwrap();
    std::fs::set_permissions(&xdg, std::fs::Permissions::from_mode(0o700)).unwrap();
    chown(&xdg, TEST_USER);
    let marks = base.path().join("marks");
    std::fs::create_dir(&marks).unwrap();
    std::fs::set_permissions(&marks, std::fs::Permissions::from_mode(0o1777)).unwrap();
    let marker = marks.join("edited-helper-ran");

    let sshd = Sshd::builder()
        .config_line(format!("SetEnv XDG_STATE_HOME={}", xdg.display()))
        .start()
        .expect("sshd test bed");
    let local = tempfile::tempdir().unwrap();
    let remote = sshd.remote_dir("chat-boot").unwrap();
    let env = sshd.provider_env(&local.path().join("state"), &remote);
    let mut host = Host::spawn(local.path(), &env);
    host.hello();
    let ready = host.start("/host/cwd");
    assert_eq!(ready["type"], "ready", "{ready}");
    let (_, progress, fin) = host.turn(1, "echo one");
    assert_eq!(fin["type"], "final", "{fin} {progress}");

    let lib = xdg.join("remote-runner/lib");
    let helper = std::fs::read_dir(&lib)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| {
            p.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("chat-")
        })
        .expect("the helper was installed by the first turn");
    std::fs::set_permissions(&helper, std::fs::Permissions::from_mode(0o777)).unwrap();
    // Another user edits it in place (owner and mode stay).
    std::fs::write(
        &helper,
        format!("#!/bin/sh\ntouch '{}'\n", marker.display()),
    )
    .unwrap();

    let (_, progress, fin) = host.turn(2, "\"$RR_CHAT\" send hello; echo rc=$?");
    assert!(!marker.exists(), "the edited helper ran: {fin} {progress}");
    assert_eq!(fin["type"], "failure", "{fin} {progress}");
    let text = fin.to_string();
    assert!(
        text.contains("insecure_remote_dir") && text.contains(&helper.display().to_string()),
        "{fin}"
    );
}
