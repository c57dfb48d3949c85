//! `seed-runner status | head -1`: a reader that goes away before the answer is written is no
//! crash. No machine is needed: the state dir is empty.

use std::process::{Command, Stdio};

const BIN: &str = env!("CARGO_BIN_EXE_seed-runner");

#[test]
fn a_closed_stdout_is_no_panic() {
    let dir = tempfile::tempdir().unwrap();
    // stdout is a pipe whose reading end is already closed: every write meets EPIPE.
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let out = Command::new(BIN)
        .arg("status")
        .env("REMOTE_RUNNER_STATE_DIR", dir.path().join("state"))
        .env("HOME", dir.path())
        .stdin(Stdio::null())
        .stdout(writer)
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.is_empty(), "stderr: {stderr}");
    assert_eq!(out.status.code(), Some(0), "stderr: {stderr}");
}
