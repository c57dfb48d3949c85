//! Drives the built `remote-runner` binary with a private state dir and HOME.
#![allow(dead_code)] // each test file uses a different part of this helper

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::Value;

pub const BIN: &str = env!("CARGO_BIN_EXE_remote-runner");

/// A sandbox: its own state dir and HOME, so no test reads or writes the user's files.
pub struct Sandbox {
    dir: tempfile::TempDir,
}

/// What one run printed and how it exited.
#[derive(Debug)]
pub struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    /// stdout as exactly one JSON object (fails the test otherwise).
    pub fn json(&self) -> Value {
        one_json_object(&self.stdout)
    }

    /// stderr as exactly one `{"error":{...}}` object; returns the inner error.
    pub fn error(&self) -> Value {
        let v = one_json_object(&self.stderr);
        let err = v
            .get("error")
            .unwrap_or_else(|| panic!("no `error` in {v}"))
            .clone();
        assert!(err["code"].is_string(), "{err}");
        assert!(err["message"].is_string(), "{err}");
        assert!(err["retryable"].is_boolean(), "{err}");
        err
    }
}

impl Sandbox {
    pub fn new() -> Sandbox {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("home")).unwrap();
        Sandbox { dir }
    }

    pub fn state_dir(&self) -> PathBuf {
        self.dir.path().join("state")
    }

    pub fn home(&self) -> PathBuf {
        self.dir.path().join("home")
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// The binary with `--state-dir`, a private HOME, and no colour or ssh_config from outside.
    pub fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(BIN);
        cmd.arg("--state-dir")
            .arg(self.state_dir())
            .args(args)
            .env("HOME", self.home())
            .env_remove("REMOTE_RUNNER_STATE_DIR")
            .env_remove("REMOTE_RUNNER_SSH_CONFIG")
            .env_remove("NO_COLOR")
            .env_remove("RUST_LOG")
            .stdin(Stdio::null());
        cmd
    }

    pub fn run(&self, args: &[&str]) -> Run {
        run_command(self.command(args), None)
    }

    pub fn run_with_stdin(&self, args: &[&str], stdin: &str) -> Run {
        run_command(self.command(args), Some(stdin))
    }

    /// Run with `--json`, expect exit 0, return the one JSON object.
    pub fn ok_json(&self, args: &[&str]) -> Value {
        let mut all = args.to_vec();
        all.push("--json");
        let r = self.run(&all);
        assert_eq!(r.code, 0, "{args:?} failed: {r:?}");
        r.json()
    }

    /// Add a key-auth machine with the usual fields.
    pub fn add_key_machine(&self, id: &str, host: &str) -> Value {
        self.ok_json(&[
            "machine",
            "add",
            id,
            "--host",
            host,
            "--user",
            "ely",
            "--default-cwd",
            "/home/ely",
        ])
    }
}

pub fn run_command(mut cmd: Command, stdin: Option<&str>) -> Run {
    if stdin.is_some() {
        cmd.stdin(Stdio::piped());
    }
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = cmd.spawn().expect("spawn remote-runner");
    if let Some(input) = stdin {
        let mut pipe = child.stdin.take().unwrap();
        // A command that fails before reading its input (e.g. a usage error) may already be
        // gone: a broken pipe here is its business, its exit code and output are checked.
        match pipe.write_all(input.as_bytes()) {
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {}
            other => other.unwrap(),
        }
    }
    let out = child.wait_with_output().unwrap();
    Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// Parse `text` as exactly one JSON value, which must be an object.
pub fn one_json_object(text: &str) -> Value {
    let mut values = serde_json::Deserializer::from_str(text).into_iter::<Value>();
    let first = values
        .next()
        .unwrap_or_else(|| panic!("expected one JSON object, got nothing: {text:?}"))
        .unwrap_or_else(|e| panic!("not JSON ({e}): {text:?}"));
    assert!(
        values.next().is_none(),
        "more than one JSON value: {text:?}"
    );
    assert!(first.is_object(), "not an object: {text:?}");
    first
}
