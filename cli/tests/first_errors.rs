//! The errors a newcomer meets first, against a real OpenSSH sshd on 127.0.0.1: each names the
//! true cause, and the fix it prints runs as written.
//!
//! - a missing, unreadable or locked (encrypted, no passphrase) key file is named, with what is
//!   wrong with it, by `machine doctor` and by `session create`;
//! - `machine doctor` reports the checks that could not run as skipped, with why;
//! - the unknown-host-key fix `session create` prints, run literally, makes the same
//!   `session create` succeed.

mod common;

use std::path::Path;
use std::process::{Command, Stdio};

use common::{Run, Sandbox};
use remote_runner_testkit::{Sshd, TEST_USER};

fn start_sshd() -> Sshd {
    Sshd::start().unwrap_or_else(|e| panic!("cannot start the sshd test bed: {e:#}"))
}

fn run(sb: &Sandbox, args: &[&str]) -> Run {
    let mut cmd = sb.command(args);
    cmd.env_remove("SSH_AUTH_SOCK");
    common::run_command(cmd, None)
}

/// Add `id` for the test bed with `key` and `known_hosts`.
fn add_machine(sb: &Sandbox, sshd: &Sshd, id: &str, key: &str, known_hosts: &Path) {
    let port = sshd.port.to_string();
    let r = run(
        sb,
        &[
            "machine",
            "add",
            id,
            "--host",
            "127.0.0.1",
            "--port",
            &port,
            "--user",
            TEST_USER,
            "--key-path",
            key,
            "--known-hosts-file",
            known_hosts.to_str().unwrap(),
            "--default-cwd",
            "/tmp",
            "--json",
        ],
    );
    assert_eq!(r.code, 0, "{r:?}");
}

fn doctor_json(sb: &Sandbox, id: &str) -> serde_json::Value {
    let r = run(sb, &["machine", "doctor", id, "--timeout", "30", "--json"]);
    assert_eq!(r.code, 1, "a failed check is exit 1: {r:?}");
    r.json()
}

fn create_error(sb: &Sandbox, id: &str) -> serde_json::Value {
    let r = run(
        sb,
        &[
            "session",
            "create",
            "--machine",
            id,
            "--timeout",
            "30",
            "--json",
        ],
    );
    assert_eq!(r.code, 8, "{r:?}");
    r.error()
}

/// Every face names the key file and what is wrong with it: doctor and session create.
fn assert_key_named(sb: &Sandbox, id: &str, key: &Path, what: &str) {
    let key = key.display().to_string();
    let v = doctor_json(sb, id);
    let err = &v["errors"][0];
    assert_eq!(err["code"], "auth_failed", "{v}");
    let msg = err["message"].as_str().unwrap();
    assert!(msg.contains(&format!("{key} {what}")), "doctor: {msg}");
    assert!(!msg.contains("tried: nothing"), "doctor: {msg}");
    let err = create_error(sb, id);
    assert_eq!(err["code"], "auth_failed", "{err}");
    let msg = err["message"].as_str().unwrap();
    assert!(
        msg.contains(&format!("{key} {what}")),
        "session create: {msg}"
    );
}

#[test]
fn a_missing_key_file_is_named_by_doctor_and_session_create() {
    let sshd = start_sshd();
    let sb = Sandbox::new();
    let missing = sb.path().join("no_such_key");
    add_machine(
        &sb,
        &sshd,
        "typo",
        missing.to_str().unwrap(),
        &sshd.known_hosts,
    );
    assert_key_named(&sb, "typo", &missing, "does not exist");
    let v = doctor_json(&sb, "typo");
    let msg = v["errors"][0]["message"].as_str().unwrap();
    assert!(msg.contains("ssh-keygen -t ed25519 -f"), "{msg}");
}

#[test]
fn an_encrypted_key_without_its_passphrase_is_named_with_the_fix() {
    let sshd = start_sshd();
    let sb = Sandbox::new();
    let key = &sshd.keys.ed25519_encrypted;
    add_machine(
        &sb,
        &sshd,
        "locked",
        key.to_str().unwrap(),
        &sshd.known_hosts,
    );
    assert_key_named(&sb, "locked", key, "is encrypted");
    let v = doctor_json(&sb, "locked");
    let msg = v["errors"][0]["message"].as_str().unwrap();
    assert!(msg.contains(&format!("ssh-add {}", key.display())), "{msg}");
}

#[test]
fn an_unreadable_key_file_is_named() {
    let sshd = start_sshd();
    let sb = Sandbox::new();
    // A directory where the key should be: there, but not a key anyone can read.
    let not_a_key = sb.path().join("key_dir");
    std::fs::create_dir(&not_a_key).unwrap();
    add_machine(
        &sb,
        &sshd,
        "unreadable",
        not_a_key.to_str().unwrap(),
        &sshd.known_hosts,
    );
    assert_key_named(&sb, "unreadable", &not_a_key, "cannot be read");
}

#[test]
fn doctor_says_which_checks_were_skipped_and_why() {
    let sshd = start_sshd();
    let sb = Sandbox::new();
    let empty = sb.path().join("empty_known_hosts");
    std::fs::write(&empty, "").unwrap();
    let key = sshd.keys.ed25519.to_str().unwrap();
    add_machine(&sb, &sshd, "untrusted", key, &empty);
    let v = doctor_json(&sb, "untrusted");
    assert_eq!(v["host_key"]["status"], "unknown", "{v}");
    for check in ["auth", "default_cwd", "tmux"] {
        assert_eq!(v["skipped"][check], "the host key is not trusted", "{v}");
    }
    assert_eq!(v["tmux"]["found"], serde_json::Value::Null, "{v}");
    let human = run(&sb, &["machine", "doctor", "untrusted", "--timeout", "30"]);
    assert_eq!(human.code, 1, "{human:?}");
    assert!(
        human
            .stdout
            .contains("skipped (the host key is not trusted)"),
        "{}",
        human.stdout
    );
    assert!(!human.stdout.contains("not found"), "{}", human.stdout);

    // A failed login skips what needs a login, not the login itself.
    let missing = sb.path().join("no_such_key");
    add_machine(
        &sb,
        &sshd,
        "nologin",
        missing.to_str().unwrap(),
        &sshd.known_hosts,
    );
    let v = doctor_json(&sb, "nologin");
    assert_eq!(v["skipped"]["default_cwd"], "login failed", "{v}");
    assert_eq!(v["skipped"]["tmux"], "login failed", "{v}");
    assert!(v["skipped"].get("auth").is_none(), "{v}");

    // Nothing unreached on a healthy machine.
    add_machine(&sb, &sshd, "healthy", key, &sshd.known_hosts);
    let ok = run(
        &sb,
        &["machine", "doctor", "healthy", "--timeout", "30", "--json"],
    );
    assert_eq!(ok.code, 0, "{ok:?}");
    assert_eq!(ok.json()["skipped"], serde_json::json!({}));
}

#[test]
fn the_unknown_host_key_fix_of_session_create_runs_as_written() {
    let sshd = start_sshd();
    let sb = Sandbox::new();
    let empty = sb.path().join("empty_known_hosts");
    std::fs::write(&empty, "").unwrap();
    let key = sshd.keys.ed25519.to_str().unwrap();
    add_machine(&sb, &sshd, "fresh-lab", key, &empty);
    let err = create_error(&sb, "fresh-lab");
    assert_eq!(err["code"], "host_key_unknown", "{err}");
    let msg = err["message"].as_str().unwrap();
    assert!(msg.contains(&sshd.host_key_fingerprint), "{msg}");
    let fix = msg
        .split('`')
        .find(|part| part.starts_with("remote-runner machine add"))
        .unwrap_or_else(|| panic!("no machine add command in: {msg}"));
    assert!(fix.contains("fresh-lab"), "{fix}");

    // Taken literally, with remote-runner on PATH and the same state dir.
    let bin_dir = Path::new(common::BIN).parent().unwrap();
    let path = format!(
        "{}:{}",
        bin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut sh = Command::new("sh");
    sh.arg("-c")
        .arg(fix)
        .env("PATH", path)
        .env("HOME", sb.home())
        .env("REMOTE_RUNNER_STATE_DIR", sb.state_dir())
        .stdin(Stdio::null());
    let fixed = common::run_command(sh, None);
    assert_eq!(fixed.code, 0, "{fix}: {fixed:?}");

    let r = run(
        &sb,
        &[
            "session",
            "create",
            "--machine",
            "fresh-lab",
            "--timeout",
            "30",
            "--json",
        ],
    );
    assert_eq!(r.code, 0, "{r:?}");
    let session = r.json()["session_id"].as_str().unwrap().to_string();
    let d = run(
        &sb,
        &["session", "destroy", "--session", &session, "--json"],
    );
    assert_eq!(d.code, 0, "{d:?}");
    // The rest of the record is as it was: only the host key policy changed.
    let shown = run(&sb, &["machine", "show", "fresh-lab", "--json"]).json();
    assert_eq!(shown["key_path"], key);
    assert_eq!(shown["host_key_policy"], "accept-new", "{shown}");
}
