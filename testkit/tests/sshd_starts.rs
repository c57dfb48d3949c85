//! The test bed itself: sshd starts, the OpenSSH client logs in with the generated key through
//! the generated known_hosts and ssh_config alias, and the connection helpers see the process.

use std::process::Command;

use remote_runner_testkit::{HOST_ALIAS, Sshd};

#[test]
fn openssh_client_logs_in_through_the_alias() {
    let sshd = Sshd::start().expect("start sshd");
    let out = Command::new("ssh")
        .arg("-F")
        .arg(&sshd.ssh_config)
        .args(["-o", "BatchMode=yes", HOST_ALIAS, "echo ok-$(id -un)"])
        .output()
        .expect("run ssh");
    assert!(
        out.status.success(),
        "ssh failed: {}\nsshd log:\n{}",
        String::from_utf8_lossy(&out.stderr),
        sshd.log_text()
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "ok-rrtest");
    assert!(sshd.host_key_fingerprint.starts_with("SHA256:"));
}

#[test]
fn two_test_beds_run_side_by_side() {
    let a = Sshd::start().expect("start sshd a");
    let b = Sshd::start().expect("start sshd b");
    assert_ne!(a.port, b.port);
    assert_ne!(a.host_key_fingerprint, b.host_key_fingerprint);
}
