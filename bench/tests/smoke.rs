//! Smoke test: `remote-runner-bench --quick exec-warm` runs end to end against a real sshd and
//! prints its table with a ratio. No timing is asserted: benchmarks measure, they do not judge.

use std::process::Command;

#[test]
fn quick_exec_warm_completes_and_prints_a_ratio() {
    let out = Command::new(env!("CARGO_BIN_EXE_remote-runner-bench"))
        .args(["--quick", "exec-warm"])
        .env_remove("SSH_AUTH_SOCK")
        .output()
        .expect("spawn remote-runner-bench");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "remote-runner-bench failed: {}\nstdout:\n{stdout}\nstderr:\n{stderr}",
        out.status
    );
    assert!(stdout.contains("== exec-warm"), "{stdout}");
    for ratio in [
        "ratio engine exec with a kept client / ControlMaster tmux round trip: ",
        "ratio engine exec without one / ControlMaster tmux round trip: ",
    ] {
        assert!(stdout.contains(ratio), "{ratio} missing:\n{stdout}");
    }
    // Every measurement ran the quick number of times, on both sides.
    assert!(stdout.contains("remote-runner"), "{stdout}");
    assert!(stdout.contains("OpenSSH"), "{stdout}");
}
