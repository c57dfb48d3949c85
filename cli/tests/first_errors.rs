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

fn help(args: &[&str]) -> String {
    let r = Sandbox::new().run(&[args, &["--help"]].concat());
    assert_eq!(r.code, 0, "{args:?}: {r:?}");
    r.stdout
}

#[test]
fn a_commands_help_shows_its_own_options_not_every_global_one() {
    let add = help(&["machine", "add"]);
    assert!(
        add.lines().count() <= 70,
        "{} lines:\n{add}",
        add.lines().count()
    );
    for hidden in ["--state-dir", "--color", "--timeout", "Not used"] {
        assert!(
            !add.contains(hidden),
            "machine add --help shows {hidden}:\n{add}"
        );
    }
    // mcp reaches machines, and its own calls carry their timeouts: no "does not reach".
    let mcp = help(&["mcp"]);
    assert!(
        !mcp.contains("--timeout") && !mcp.contains("Not used"),
        "{mcp}"
    );
    // Where --timeout applies it is still there, and every global option in the top help.
    assert!(help(&["session", "exec"]).contains("--timeout <SECONDS>"));
    let top = help(&[]);
    for global in ["--json", "--timeout", "--state-dir", "--color"] {
        assert!(top.contains(global), "{top}");
    }
    // Hidden is not refused: the global options still work after any subcommand.
    let sb = Sandbox::new();
    let other = sb.path().join("other-state");
    let r = sb.run(&[
        "machine",
        "list",
        "--state-dir",
        other.to_str().unwrap(),
        "--color",
        "never",
        "--timeout",
        "5",
        "--json",
    ]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(other.is_dir(), "--state-dir after the subcommand is used");

    let exec = help(&["session", "exec"]);
    let mode = exec
        .lines()
        .find(|l| l.trim_start().starts_with("--mode <MODE>"))
        .unwrap_or_else(|| panic!("{exec}"));
    assert!(
        mode.contains("`wait`: return when the command finishes"),
        "{mode}"
    );
    let list = help(&["session", "list"]);
    assert!(list.contains("active, lost and destroyed"), "{list}");
    assert!(!list.contains("recoverable"), "{list}");
}

#[test]
fn a_machine_id_that_differs_only_in_case_is_did_you_mean() {
    let sb = Sandbox::new();
    sb.add_key_machine("lab", "192.0.2.10");
    let r = sb.run(&["machine", "doctor", "Lab", "--json"]);
    assert_eq!(r.code, 3, "{r:?}");
    let err = r.error();
    let msg = err["message"].as_str().unwrap();
    assert!(msg.contains("did you mean \"lab\"?"), "{msg}");
    assert!(
        !msg.contains("machine add"),
        "adding Lab would be a duplicate: {msg}"
    );
    // A truly new id still gets the add hint.
    let r = sb.run(&["machine", "show", "gamma", "--json"]);
    let msg = r.error()["message"].as_str().unwrap().to_string();
    assert!(msg.contains("machine add gamma"), "{msg}");
}

#[test]
fn an_empty_session_id_is_a_clear_usage_error() {
    let sb = Sandbox::new();
    for args in [
        vec!["session", "show", "--session", "", "--json"],
        vec![
            "session",
            "exec",
            "--session",
            "",
            "--cmd",
            "true",
            "--json",
        ],
    ] {
        let r = sb.run(&args);
        assert_eq!(r.code, 2, "{args:?}: {r:?}");
        let err = r.error();
        assert_eq!(err["code"], "invalid_argument", "{err}");
        let msg = err["message"].as_str().unwrap();
        assert!(msg.starts_with("the session id is empty"), "{msg}");
        assert!(msg.contains("remote-runner session list"), "{msg}");
    }
}

#[test]
fn a_json_usage_error_reads_as_one_sentence() {
    let r = Sandbox::new().run(&["session", "exec", "--session", "s1", "--json"]);
    assert_eq!(r.code, 2, "{r:?}");
    let msg = r.error()["message"].as_str().unwrap().to_string();
    assert!(
        msg.starts_with(
            "the following required arguments were not provided: <--cmd <COMMAND>|--cmd-file <PATH>>"
        ),
        "{msg}"
    );
    assert!(!msg.contains(":;"), "{msg}");
}

/// The MCP server's instructions say which machines its tools reach.
#[test]
fn mcp_instructions_do_not_promise_local_when_it_is_left_out() {
    let sb = Sandbox::new();
    sb.add_key_machine("lab", "192.0.2.10");
    let handshake = concat!(
        r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#,
        "\n"
    );
    let instructions = |machines: &[&str]| {
        let mut args = vec!["mcp"];
        for m in machines {
            args.extend(["--machine", m]);
        }
        let r = sb.run_with_stdin(&args, handshake);
        let first = r.stdout.lines().next().unwrap_or_else(|| panic!("{r:?}"));
        let v: serde_json::Value = serde_json::from_str(first).unwrap();
        v["result"]["instructions"].as_str().unwrap().to_string()
    };
    let only_lab = instructions(&["lab"]);
    assert!(
        only_lab.starts_with("Runs commands on the Linux machines lab only (not `local`"),
        "{only_lab}"
    );
    let all = instructions(&[]);
    assert!(all.contains("`local` is the server's host"), "{all}");
    let both = instructions(&["lab", "local"]);
    assert!(
        both.contains("lab, local (`local` is the server's host)"),
        "{both}"
    );
}

/// docs/cli.md and docs/mcp.md say what the program does.
#[test]
fn the_docs_match_the_program_on_the_first_hours_details() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let cli_md = std::fs::read_to_string(root.join("docs/cli.md")).unwrap();
    let mcp_md = std::fs::read_to_string(root.join("docs/mcp.md")).unwrap();

    // Every field of a machine record is in the record table.
    let sb = Sandbox::new();
    let local = sb.ok_json(&["machine", "show", "local"]);
    let start = cli_md.find("| `machine_id` |").unwrap();
    let table = &cli_md[start..start + cli_md[start..].find("\n\n").unwrap()];
    for field in local.as_object().unwrap().keys() {
        assert!(
            table.contains(&format!("`{field}`")),
            "docs/cli.md's machine record lacks `{field}`"
        );
    }
    // `code run --json` is one compact line, and the docs say so.
    assert!(
        cli_md.contains("`code run --json` prints"),
        "docs/cli.md on code run"
    );
    // --from-ssh-config's default cwd.
    let r = {
        std::fs::create_dir_all(sb.home().join(".ssh")).unwrap();
        std::fs::write(
            sb.home().join(".ssh/config"),
            "Host web1\n    HostName 192.0.2.20\n    User ely\n",
        )
        .unwrap();
        sb.ok_json(&["machine", "add", "web1", "--from-ssh-config"])
    };
    assert_eq!(r["default_cwd"], "/home/ely");
    assert!(cli_md.contains("the default cwd is the user's usual home, `/home/USER`"));
    // Codex has its snippet.
    let toml = mcp_md
        .split("```toml\n")
        .nth(1)
        .and_then(|rest| rest.split("```").next())
        .expect("docs/mcp.md has a toml block for Codex");
    assert!(toml.contains("[mcp_servers.remote-runner]"), "{toml}");
    assert!(
        toml.contains("command = \"remote-runner\"\nargs = [\"mcp\"]"),
        "{toml}"
    );
}
