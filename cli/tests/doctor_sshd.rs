//! `machine doctor` and ssh_config aliases against a real OpenSSH sshd on 127.0.0.1
//! (the testkit's test bed): known / unknown / accept-new / changed host keys, key and password
//! auth, a missing default cwd, an unreachable port.

mod common;

use common::{Run, Sandbox};
use remote_runner_testkit::{HOST_ALIAS, SENTINEL_PASSWORD, Sshd, TEST_USER};

fn start_sshd() -> Sshd {
    Sshd::start().unwrap_or_else(|e| panic!("cannot start the sshd test bed: {e:#}"))
}

fn run(sb: &Sandbox, args: &[&str], stdin: Option<&str>, sshd: &Sshd) -> Run {
    let mut cmd = sb.command(args);
    cmd.env_remove("SSH_AUTH_SOCK")
        .env("REMOTE_RUNNER_SSH_CONFIG", &sshd.ssh_config);
    common::run_command(cmd, stdin)
}

/// Add `id` as a key-auth machine for the test bed, with the given known_hosts file.
fn add_key_machine(sb: &Sandbox, sshd: &Sshd, id: &str, known_hosts: &str, extra: &[&str]) {
    let port = sshd.port.to_string();
    let key = sshd.keys.ed25519.to_str().unwrap();
    let mut args = vec![
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
        known_hosts,
        "--default-cwd",
        "/tmp",
        "--json",
    ];
    args.extend_from_slice(extra);
    let r = run(sb, &args, None, sshd);
    assert_eq!(r.code, 0, "{r:?}");
}

fn doctor(sb: &Sandbox, sshd: &Sshd, id: &str) -> Run {
    run(
        sb,
        &["machine", "doctor", id, "--timeout", "30", "--json"],
        None,
        sshd,
    )
}

#[test]
fn doctor_reports_a_healthy_key_auth_machine() {
    let sshd = start_sshd();
    let sb = Sandbox::new();
    add_key_machine(&sb, &sshd, "bed", sshd.known_hosts.to_str().unwrap(), &[]);
    let r = doctor(&sb, &sshd, "bed");
    assert_eq!(r.code, 0, "{r:?}");
    let v = r.json();
    assert_eq!(v["machine_id"], "bed");
    assert_eq!(v["reachable"], true);
    assert_eq!(v["auth_ok"], true);
    assert_eq!(v["default_cwd_ok"], true);
    assert_eq!(v["errors"], serde_json::json!([]));
    assert_eq!(v["host_key"]["status"], "known");
    assert_eq!(
        v["host_key"]["fingerprint"],
        sshd.host_key_fingerprint.as_str()
    );
    assert_eq!(v["tmux"]["found"], true);
    assert!(
        v["tmux"]["version"].as_str().unwrap().starts_with('3'),
        "{v}"
    );
    assert!(
        v["auth"]["used"].as_str().unwrap().starts_with("publickey"),
        "{v}"
    );
    assert!(v["checked_at"].as_str().unwrap().ends_with('Z'));
    assert_eq!(v["target"], format!("{TEST_USER}@127.0.0.1:{}", sshd.port));

    let human = run(
        &sb,
        &["machine", "doctor", "bed", "--timeout", "30"],
        None,
        &sshd,
    );
    assert_eq!(human.code, 0, "{human:?}");
    assert!(
        human.stdout.contains("All checks passed."),
        "{}",
        human.stdout
    );
    assert!(
        human.stdout.contains(&sshd.host_key_fingerprint),
        "{}",
        human.stdout
    );
}

#[test]
fn an_unknown_host_key_is_refused_with_its_fingerprint_and_the_fix() {
    let sshd = start_sshd();
    let sb = Sandbox::new();
    let empty = sb.path().join("empty_known_hosts");
    std::fs::write(&empty, "").unwrap();
    add_key_machine(&sb, &sshd, "strict", empty.to_str().unwrap(), &[]);
    let r = doctor(&sb, &sshd, "strict");
    assert_eq!(r.code, 1, "a failed check is exit 1: {r:?}");
    let v = r.json();
    assert_eq!(v["reachable"], true);
    assert_eq!(v["auth_ok"], false);
    assert_eq!(v["host_key"]["status"], "unknown");
    assert_eq!(
        v["host_key"]["fingerprint"],
        sshd.host_key_fingerprint.as_str()
    );
    let err = &v["errors"][0];
    assert_eq!(err["code"], "host_key_unknown");
    let msg = err["message"].as_str().unwrap();
    assert!(msg.contains(&sshd.host_key_fingerprint), "{msg}");
    assert!(msg.contains("--accept-new"), "{msg}");
    assert_eq!(
        std::fs::read_to_string(&empty).unwrap(),
        "",
        "strict must not record"
    );

    // The message ends with the exact command for this machine; it works as written.
    let marker = "once the fingerprint is verified: ";
    let fix = &msg[msg.find(marker).unwrap_or_else(|| panic!("{msg}")) + marker.len()..];
    assert!(
        fix.starts_with("remote-runner machine add strict --replace"),
        "{fix}"
    );
    let script = fix.replacen("remote-runner", common::BIN, 1);
    let mut sh = std::process::Command::new("sh");
    sh.arg("-c")
        .arg(&script)
        .env("REMOTE_RUNNER_STATE_DIR", sb.state_dir())
        .env("HOME", sb.home())
        .stdin(std::process::Stdio::null());
    let fixed = common::run_command(sh, None);
    assert_eq!(fixed.code, 0, "{script}: {fixed:?}");
    let after = doctor(&sb, &sshd, "strict");
    assert_eq!(after.code, 0, "{after:?}");
    assert_eq!(after.json()["host_key"]["status"], "recorded");
}

#[test]
fn accept_new_records_the_key_once_then_it_is_known() {
    let sshd = start_sshd();
    let sb = Sandbox::new();
    let kh = sb.path().join("known_hosts");
    std::fs::write(&kh, "").unwrap();
    add_key_machine(&sb, &sshd, "tofu", kh.to_str().unwrap(), &["--accept-new"]);
    let first = doctor(&sb, &sshd, "tofu");
    assert_eq!(first.code, 0, "{first:?}");
    assert_eq!(first.json()["host_key"]["status"], "recorded");
    let recorded = std::fs::read_to_string(&kh).unwrap();
    let key_b64 = sshd.host_public_key.split_whitespace().nth(1).unwrap();
    assert!(recorded.contains(key_b64), "{recorded}");
    let second = doctor(&sb, &sshd, "tofu");
    assert_eq!(second.code, 0, "{second:?}");
    assert_eq!(second.json()["host_key"]["status"], "known");
}

#[test]
fn a_changed_host_key_is_always_refused() {
    let sshd = start_sshd();
    let sb = Sandbox::new();
    let other = remote_runner_testkit::generate_public_key(sb.path(), "other_host").unwrap();
    let kh = sb.path().join("known_hosts");
    std::fs::write(&kh, format!("[127.0.0.1]:{} {other}\n", sshd.port)).unwrap();
    add_key_machine(
        &sb,
        &sshd,
        "changed",
        kh.to_str().unwrap(),
        &["--accept-new"],
    );
    let r = doctor(&sb, &sshd, "changed");
    assert_eq!(r.code, 1, "{r:?}");
    let v = r.json();
    assert_eq!(v["host_key"]["status"], "changed");
    assert_eq!(v["auth_ok"], false);
    assert_eq!(v["errors"][0]["code"], "host_key_changed");
}

#[test]
fn password_auth_uses_the_stored_password_without_showing_it() {
    let sshd = start_sshd();
    let sb = Sandbox::new();
    let port = sshd.port.to_string();
    let add = run(
        &sb,
        &[
            "machine",
            "add",
            "pw",
            "--host",
            "127.0.0.1",
            "--port",
            &port,
            "--user",
            TEST_USER,
            "--password-stdin",
            "--known-hosts-file",
            sshd.known_hosts.to_str().unwrap(),
            "--default-cwd",
            "/tmp",
            "--json",
        ],
        Some(SENTINEL_PASSWORD),
        &sshd,
    );
    assert_eq!(add.code, 0, "{add:?}");
    let mut cmd = sb.command(&["machine", "doctor", "pw", "--timeout", "30", "--json"]);
    cmd.env_remove("SSH_AUTH_SOCK").env("RUST_LOG", "trace");
    let r = common::run_command(cmd, None);
    assert_eq!(r.code, 0, "{r:?}");
    let v = r.json();
    assert_eq!(v["auth_ok"], true);
    let used = v["auth"]["used"].as_str().unwrap();
    assert!(
        used.starts_with("password") || used.starts_with("keyboard-interactive"),
        "{used}"
    );
    assert!(!r.stdout.contains(SENTINEL_PASSWORD));
    assert!(!r.stderr.contains(SENTINEL_PASSWORD));
}

#[test]
fn a_wrong_password_is_auth_failed_naming_the_methods() {
    let sshd = start_sshd();
    let sb = Sandbox::new();
    let port = sshd.port.to_string();
    let add = run(
        &sb,
        &[
            "machine",
            "add",
            "badpw",
            "--host",
            "127.0.0.1",
            "--port",
            &port,
            "--user",
            TEST_USER,
            "--password-stdin",
            "--known-hosts-file",
            sshd.known_hosts.to_str().unwrap(),
            "--default-cwd",
            "/tmp",
        ],
        Some("not-the-password-Zq1"),
        &sshd,
    );
    assert_eq!(add.code, 0, "{add:?}");
    let r = doctor(&sb, &sshd, "badpw");
    assert_eq!(r.code, 1, "{r:?}");
    let v = r.json();
    assert_eq!(v["reachable"], true);
    assert_eq!(v["auth_ok"], false);
    assert_eq!(v["host_key"]["status"], "known");
    assert_eq!(v["errors"][0]["code"], "auth_failed");
    assert!(
        v["auth"]["offered"]
            .as_array()
            .unwrap()
            .iter()
            .any(|m| m == "password"),
        "{v}"
    );
    assert!(!r.stdout.contains("not-the-password-Zq1"));
    assert!(!r.stderr.contains("not-the-password-Zq1"));
}

#[test]
fn a_missing_default_cwd_is_reported_with_the_fix() {
    let sshd = start_sshd();
    let sb = Sandbox::new();
    add_key_machine(&sb, &sshd, "nocwd", sshd.known_hosts.to_str().unwrap(), &[]);
    let set = run(
        &sb,
        &[
            "machine",
            "configure-startup",
            "nocwd",
            "--default-cwd",
            "/no/such/dir/rr",
            "--json",
        ],
        None,
        &sshd,
    );
    assert_eq!(set.code, 0, "{set:?}");
    let r = doctor(&sb, &sshd, "nocwd");
    assert_eq!(r.code, 1, "{r:?}");
    let v = r.json();
    assert_eq!(v["auth_ok"], true);
    assert_eq!(v["default_cwd_ok"], false);
    let err = v["errors"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["code"] == "remote_not_found")
        .unwrap_or_else(|| panic!("{v}"));
    assert!(err["message"].as_str().unwrap().contains("/no/such/dir/rr"));
}

#[test]
fn an_unreachable_port_is_not_reachable() {
    let sshd = start_sshd();
    let sb = Sandbox::new();
    // A port nobody listens on: bind one, note it, release it.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
        .to_string();
    let add = run(
        &sb,
        &[
            "machine",
            "add",
            "dead",
            "--host",
            "127.0.0.1",
            "--port",
            &port,
            "--user",
            TEST_USER,
            "--default-cwd",
            "/tmp",
            "--json",
        ],
        None,
        &sshd,
    );
    assert_eq!(add.code, 0, "{add:?}");
    let r = doctor(&sb, &sshd, "dead");
    assert_eq!(r.code, 1, "{r:?}");
    let v = r.json();
    assert_eq!(v["reachable"], false);
    assert_eq!(v["auth_ok"], false);
    assert_eq!(v["host_key"]["status"], "not_checked");
    assert_eq!(v["errors"][0]["code"], "connection_failed");
}

#[test]
fn an_ssh_config_alias_becomes_a_machine() {
    let sshd = start_sshd();
    let sb = Sandbox::new();
    // Automatic: no --host, and the id is a Host alias in the ssh_config.
    let r = run(&sb, &["machine", "add", HOST_ALIAS, "--json"], None, &sshd);
    assert_eq!(r.code, 0, "{r:?}");
    let m = r.json();
    assert_eq!(m["host"], "127.0.0.1");
    assert_eq!(m["port"], sshd.port);
    assert_eq!(m["user"], TEST_USER);
    assert_eq!(m["auth_type"], "key");
    assert_eq!(m["key_path"], sshd.keys.ed25519.to_str().unwrap());
    assert_eq!(m["ssh_config_host"], HOST_ALIAS);
    assert_eq!(m["known_hosts_file"], sshd.known_hosts.to_str().unwrap());

    let r = doctor(&sb, &sshd, HOST_ALIAS);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(r.json()["auth_ok"], true);

    // Explicit, with a flag overriding what the file says.
    let r = run(
        &sb,
        &[
            "machine",
            "add",
            HOST_ALIAS,
            "--from-ssh-config",
            "--ssh-config",
            sshd.ssh_config.to_str().unwrap(),
            "--default-cwd",
            "/var/tmp",
            "--replace",
            "--confirm-replace",
            HOST_ALIAS,
            "--json",
        ],
        None,
        &sshd,
    );
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(r.json()["default_cwd"], "/var/tmp");
    assert_eq!(r.json()["replaced"], true);

    // Asking for an alias that is not there says so.
    let r = run(
        &sb,
        &[
            "machine",
            "add",
            "not-an-alias",
            "--from-ssh-config",
            "--json",
        ],
        None,
        &sshd,
    );
    assert_eq!(r.code, 2, "{r:?}");
    assert!(
        r.error()["message"]
            .as_str()
            .unwrap()
            .contains("Host not-an-alias")
    );
}
