//! `remote-runner machine ...` end to end through the binary, with a private state dir.

mod common;

use std::os::unix::fs::PermissionsExt;

use common::Sandbox;
use serde_json::json;

#[test]
fn add_show_list_remove_round_trip_in_json() {
    let sb = Sandbox::new();
    let added = sb.ok_json(&[
        "machine",
        "add",
        "lab-gpu-01",
        "--host",
        "192.0.2.10",
        "--port",
        "2222",
        "--user",
        "ely",
        "--key-path",
        "~/.ssh/id_ed25519",
        "--default-cwd",
        "/home/ely",
        "--startup-command",
        "source ~/.profile",
        "--startup-command",
        "conda activate base",
        "--accept-new",
    ]);
    assert_eq!(added["machine_id"], "lab-gpu-01");
    assert_eq!(added["replaced"], false);

    let shown = sb.ok_json(&["machine", "show", "lab-gpu-01"]);
    assert_eq!(shown["host"], "192.0.2.10");
    assert_eq!(shown["port"], 2222);
    assert_eq!(shown["user"], "ely");
    assert_eq!(shown["auth_type"], "key");
    assert_eq!(shown["key_path"], "~/.ssh/id_ed25519");
    assert_eq!(shown["default_cwd"], "/home/ely");
    assert_eq!(
        shown["startup_commands"],
        json!(["source ~/.profile", "conda activate base"])
    );
    assert_eq!(shown["path_mappings"], json!([]));
    assert_eq!(shown["host_key_policy"], "accept-new");
    assert_eq!(shown["has_password"], false);

    let listed = sb.ok_json(&["machine", "list"]);
    let ids: Vec<&str> = listed["machines"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["machine_id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["local", "lab-gpu-01"]);
    assert_eq!(listed["summary"]["machine_count"], 2);

    let removed = sb.ok_json(&["machine", "remove", "lab-gpu-01"]);
    assert_eq!(removed["machine_id"], "lab-gpu-01");
    assert_eq!(removed["removed"], true);
    assert_eq!(removed["sessions_retained"], true);
    assert_eq!(removed["retained_session_count"], 0);

    let listed = sb.ok_json(&["machine", "list"]);
    assert_eq!(listed["summary"]["machine_count"], 1);
    let gone = sb.run(&["machine", "show", "lab-gpu-01", "--json"]);
    assert_eq!(gone.code, 3);
    assert_eq!(gone.error()["code"], "unknown_machine");
}

#[test]
fn the_machine_id_can_be_a_flag() {
    let sb = Sandbox::new();
    let added = sb.ok_json(&[
        "machine",
        "add",
        "--machine-id",
        "m-flag",
        "--host",
        "h.example",
        "--user",
        "u",
        "--default-cwd",
        "/srv",
        "--auth",
        "agent",
    ]);
    assert_eq!(added["machine_id"], "m-flag");
    assert_eq!(added["auth_type"], "agent");
    assert_eq!(added["port"], 22);
    assert_eq!(added["host_key_policy"], "strict");
}

#[test]
fn local_is_always_listed_shown_and_protected() {
    let sb = Sandbox::new();
    let listed = sb.ok_json(&["machine", "list"]);
    assert_eq!(listed["machines"][0]["machine_id"], "local");
    assert_eq!(listed["machines"][0]["auth_type"], "local");
    assert_eq!(listed["summary"]["machine_count"], 1);
    let local = sb.ok_json(&["machine", "show", "local"]);
    assert_eq!(local["default_cwd"], sb.home().to_str().unwrap());

    for args in [
        vec!["machine", "remove", "local", "--json"],
        vec![
            "machine",
            "add",
            "local",
            "--host",
            "h",
            "--user",
            "u",
            "--default-cwd",
            "/x",
            "--json",
        ],
        vec![
            "machine",
            "add",
            "local",
            "--replace",
            "--confirm-replace",
            "local",
            "--host",
            "h",
            "--user",
            "u",
            "--default-cwd",
            "/x",
            "--json",
        ],
        vec![
            "machine",
            "configure-startup",
            "local",
            "--startup-command",
            "true",
            "--json",
        ],
    ] {
        let r = sb.run(&args);
        assert_eq!(r.code, 2, "{args:?}: {r:?}");
        let err = r.error();
        assert_eq!(err["code"], "invalid_argument");
        assert!(
            err["message"].as_str().unwrap().contains("built-in"),
            "{err}"
        );
    }
}

#[test]
fn adding_an_existing_id_needs_explicit_replacement() {
    let sb = Sandbox::new();
    sb.add_key_machine("m1", "192.0.2.10");

    let again = sb.run(&[
        "machine",
        "add",
        "m1",
        "--host",
        "192.0.2.99",
        "--user",
        "ely",
        "--default-cwd",
        "/x",
        "--json",
    ]);
    assert_eq!(again.code, 4, "{again:?}");
    let err = again.error();
    assert_eq!(err["code"], "already_exists");
    assert!(
        err["message"]
            .as_str()
            .unwrap()
            .contains("--replace --confirm-replace m1"),
        "{err}"
    );
    assert_eq!(sb.ok_json(&["machine", "show", "m1"])["host"], "192.0.2.10");

    let wrong_confirm = sb.run(&[
        "machine",
        "add",
        "m1",
        "--replace",
        "--confirm-replace",
        "m2",
        "--host",
        "192.0.2.99",
        "--user",
        "ely",
        "--default-cwd",
        "/x",
        "--json",
    ]);
    assert_eq!(wrong_confirm.code, 2);
    assert_eq!(wrong_confirm.error()["code"], "invalid_argument");

    let no_confirm = sb.run(&[
        "machine",
        "add",
        "m1",
        "--replace",
        "--host",
        "h",
        "--user",
        "u",
        "--default-cwd",
        "/x",
        "--json",
    ]);
    assert_eq!(
        no_confirm.code, 2,
        "clap requires --confirm-replace: {no_confirm:?}"
    );
    assert_eq!(no_confirm.error()["code"], "invalid_argument");

    let replaced = sb.ok_json(&[
        "machine",
        "add",
        "m1",
        "--replace",
        "--confirm-replace",
        "m1",
        "--host",
        "192.0.2.99",
        "--user",
        "ely2",
        "--default-cwd",
        "/home/ely2",
    ]);
    assert_eq!(replaced["replaced"], true);
    let shown = sb.ok_json(&["machine", "show", "m1"]);
    assert_eq!(shown["host"], "192.0.2.99");
    assert_eq!(shown["user"], "ely2");
}

#[test]
fn replacing_from_password_to_key_forgets_the_password() {
    let sb = Sandbox::new();
    let r = sb.run_with_stdin(
        &[
            "machine",
            "add",
            "pw",
            "--host",
            "h",
            "--user",
            "u",
            "--default-cwd",
            "/x",
            "--password-stdin",
            "--json",
        ],
        "first-password\n",
    );
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(r.json()["has_password"], true);
    assert_eq!(r.json()["auth_type"], "password");
    let creds = std::fs::read_to_string(sb.state_dir().join("credentials.json")).unwrap();
    assert!(creds.contains("\"pw\""));

    let replaced = sb.ok_json(&[
        "machine",
        "add",
        "pw",
        "--replace",
        "--confirm-replace",
        "pw",
        "--host",
        "h",
        "--user",
        "u",
        "--default-cwd",
        "/x",
        "--auth",
        "key",
    ]);
    assert_eq!(replaced["has_password"], false);
    let creds = std::fs::read_to_string(sb.state_dir().join("credentials.json")).unwrap();
    assert!(!creds.contains("first-password"));
}

#[test]
fn configure_startup_and_path_map_keep_the_rest_of_the_record() {
    let sb = Sandbox::new();
    let r = sb.run_with_stdin(
        &[
            "machine",
            "add",
            "win",
            "--host",
            "h",
            "--user",
            "u",
            "--default-cwd",
            "/home/u",
            "--password-stdin",
            "--json",
        ],
        "pw-kept",
    );
    assert_eq!(r.code, 0, "{r:?}");

    let updated = sb.ok_json(&[
        "machine",
        "configure-startup",
        "win",
        "--startup-command",
        "wsl",
        "--default-cwd",
        "/mnt/c/Users/example/Desktop/SSHRunner",
    ]);
    assert_eq!(updated["startup_commands"], json!(["wsl"]));
    assert_eq!(
        updated["default_cwd"],
        "/mnt/c/Users/example/Desktop/SSHRunner"
    );
    assert_eq!(updated["host"], "h");
    assert_eq!(updated["has_password"], true);

    let mapped = sb.ok_json(&[
        "machine",
        "configure-path-map",
        "win",
        "--command-prefix",
        "/mnt/c/Users/example/Desktop/SSHRunner",
        "--file-prefix",
        "C:/Users/example/Desktop/SSHRunner",
    ]);
    assert_eq!(
        mapped["path_mappings"],
        json!([{
            "command_prefix": "/mnt/c/Users/example/Desktop/SSHRunner",
            "file_prefix": "C:/Users/example/Desktop/SSHRunner"
        }])
    );
    assert_eq!(mapped["startup_commands"], json!(["wsl"]));

    // Same command prefix again: replaced, not duplicated.
    let remapped = sb.ok_json(&[
        "machine",
        "configure-path-map",
        "win",
        "--command-prefix",
        "/mnt/c/Users/example/Desktop/SSHRunner",
        "--file-prefix",
        "D:/elsewhere",
    ]);
    assert_eq!(remapped["path_mappings"].as_array().unwrap().len(), 1);
    assert_eq!(remapped["path_mappings"][0]["file_prefix"], "D:/elsewhere");

    let cleared = sb.ok_json(&["machine", "configure-path-map", "win", "--clear"]);
    assert_eq!(cleared["path_mappings"], json!([]));
    let cleared = sb.ok_json(&[
        "machine",
        "configure-startup",
        "win",
        "--clear-startup-commands",
    ]);
    assert_eq!(cleared["startup_commands"], json!([]));

    // The password survived every configure call.
    let creds = std::fs::read_to_string(sb.state_dir().join("credentials.json")).unwrap();
    assert!(creds.contains("pw-kept"));
    assert_eq!(
        sb.ok_json(&["machine", "show", "win"])["has_password"],
        true
    );

    let nothing = sb.run(&["machine", "configure-startup", "win", "--json"]);
    assert_eq!(nothing.code, 2);
    assert_eq!(nothing.error()["code"], "invalid_argument");
    let unknown = sb.run(&[
        "machine",
        "configure-path-map",
        "ghost",
        "--clear",
        "--json",
    ]);
    assert_eq!(unknown.code, 3);
    assert_eq!(unknown.error()["code"], "unknown_machine");
}

#[test]
fn malformed_input_is_refused_with_the_fix() {
    let sb = Sandbox::new();
    let base = ["machine", "add", "m", "--user", "u", "--json"];
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (
            vec!["--host", "h", "--default-cwd", "/x", "--port", "99999"],
            "--port",
        ),
        (
            vec!["--host", "h", "--default-cwd", "/x", "--port", "0"],
            "--port",
        ),
        (
            vec!["--host", "h", "--default-cwd", "/x", "--port", "ssh"],
            "--port",
        ),
        (
            vec!["--host", "h", "--default-cwd", "/x", "--auth", "kerberos"],
            "--auth",
        ),
        (vec!["--host", "has space", "--default-cwd", "/x"], "--host"),
        (
            vec!["--host", "h", "--default-cwd", "relative/dir"],
            "--default-cwd",
        ),
        (
            vec![
                "--host",
                "h",
                "--default-cwd",
                "/x",
                "--accept-new",
                "--strict",
            ],
            "--strict",
        ),
    ];
    for (extra, mention) in cases {
        let mut args = base.to_vec();
        args.extend(extra.iter());
        let r = sb.run(&args);
        assert_eq!(r.code, 2, "{extra:?}: {r:?}");
        let err = r.error();
        assert_eq!(err["code"], "invalid_argument", "{extra:?}");
        let msg = err["message"].as_str().unwrap();
        assert!(msg.contains(mention), "{extra:?}: {msg}");
        assert!(
            r.stdout.is_empty(),
            "stdout must stay empty on error: {r:?}"
        );
    }

    let bad_id = sb.run(&[
        "machine",
        "add",
        "bad/id",
        "--host",
        "h",
        "--user",
        "u",
        "--default-cwd",
        "/x",
        "--json",
    ]);
    assert_eq!(bad_id.code, 2);
    assert!(
        bad_id.error()["message"]
            .as_str()
            .unwrap()
            .contains("machine id")
    );

    // Nothing was stored by any refused call.
    assert_eq!(
        sb.ok_json(&["machine", "list"])["summary"]["machine_count"],
        1
    );
}

#[test]
fn missing_fields_without_a_terminal_list_the_flags() {
    let sb = Sandbox::new();
    let r = sb.run(&["machine", "add", "m", "--json"]);
    assert_eq!(r.code, 2, "{r:?}");
    let msg = r.error()["message"].as_str().unwrap().to_string();
    for flag in ["--host", "--user", "--default-cwd"] {
        assert!(msg.contains(flag), "{msg}");
    }
    let no_id = sb.run(&["machine", "add", "--json"]);
    assert_eq!(no_id.code, 2);
    assert!(
        no_id.error()["message"]
            .as_str()
            .unwrap()
            .contains("MACHINE_ID")
    );

    let no_password = sb.run(&[
        "machine",
        "add",
        "m",
        "--host",
        "h",
        "--user",
        "u",
        "--default-cwd",
        "/x",
        "--auth",
        "password",
        "--json",
    ]);
    assert_eq!(no_password.code, 2);
    assert!(
        no_password.error()["message"]
            .as_str()
            .unwrap()
            .contains("--password-stdin")
    );
    let empty_password = sb.run_with_stdin(
        &[
            "machine",
            "add",
            "m",
            "--host",
            "h",
            "--user",
            "u",
            "--default-cwd",
            "/x",
            "--password-stdin",
            "--json",
        ],
        "\n",
    );
    assert_eq!(empty_password.code, 2);
    assert_eq!(empty_password.error()["code"], "invalid_argument");
}

#[test]
fn unknown_machine_lists_the_known_ids() {
    let sb = Sandbox::new();
    sb.add_key_machine("alpha", "192.0.2.1");
    sb.add_key_machine("beta", "192.0.2.2");
    for args in [
        vec!["machine", "show", "gamma", "--json"],
        vec!["machine", "remove", "gamma", "--json"],
        vec!["machine", "doctor", "gamma", "--json"],
    ] {
        let r = sb.run(&args);
        assert_eq!(r.code, 3, "{args:?}: {r:?}");
        let err = r.error();
        assert_eq!(err["code"], "unknown_machine");
        assert_eq!(err["retryable"], false);
        let msg = err["message"].as_str().unwrap();
        assert!(msg.contains("local, alpha, beta"), "{msg}");
        assert!(msg.contains("machine add gamma"), "{msg}");
    }
}

#[test]
fn state_dir_is_0700_and_credentials_0600() {
    let sb = Sandbox::new();
    let r = sb.run_with_stdin(
        &[
            "machine",
            "add",
            "m",
            "--host",
            "h",
            "--user",
            "u",
            "--default-cwd",
            "/x",
            "--password-stdin",
            "--json",
        ],
        "pw",
    );
    assert_eq!(r.code, 0, "{r:?}");
    let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&sb.state_dir()), 0o700);
    assert_eq!(mode(&sb.state_dir().join("credentials.json")), 0o600);
    assert_eq!(mode(&sb.state_dir().join("state.sqlite3")), 0o600);
}

#[test]
fn the_state_dir_comes_from_the_environment_too() {
    let sb = Sandbox::new();
    let env_dir = sb.path().join("from-env");
    let mut cmd = std::process::Command::new(common::BIN);
    cmd.args([
        "machine",
        "add",
        "e1",
        "--host",
        "h",
        "--user",
        "u",
        "--default-cwd",
        "/x",
    ])
    .args(["--json"])
    .env("REMOTE_RUNNER_STATE_DIR", &env_dir)
    .env("HOME", sb.home())
    .stdin(std::process::Stdio::null());
    let r = common::run_command(cmd, None);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(env_dir.join("state.sqlite3").exists());
}

#[test]
fn concurrent_adds_from_many_processes_all_land() {
    let sb = Sandbox::new();
    // No store yet: the processes race to create and migrate it too.
    let children: Vec<_> = (0..12)
        .map(|i| {
            let id = format!("c{i}");
            let mut cmd = sb.command(&[
                "machine",
                "add",
                &id,
                "--host",
                "h",
                "--user",
                "u",
                "--default-cwd",
                "/x",
                "--json",
            ]);
            cmd.stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped());
            cmd.spawn().unwrap()
        })
        .collect();
    for child in children {
        let out = child.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    assert_eq!(
        sb.ok_json(&["machine", "list"])["summary"]["machine_count"],
        13
    );
}

#[test]
fn human_list_is_an_aligned_table_without_colour_in_a_pipe() {
    let sb = Sandbox::new();
    sb.add_key_machine("a-long-machine-name", "192.0.2.10");
    let r = sb.run(&["machine", "list"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(
        !r.stdout.contains('\x1b'),
        "no colour into a pipe: {:?}",
        r.stdout
    );
    let lines: Vec<&str> = r.stdout.lines().collect();
    assert!(lines[0].starts_with("MACHINE"), "{}", r.stdout);
    let host_col = lines[0].find("HOST").unwrap();
    for line in &lines[1..] {
        assert_eq!(line.chars().nth(host_col - 1), Some(' '), "{}", r.stdout);
        assert_ne!(line.chars().nth(host_col), Some(' '), "{}", r.stdout);
    }

    let forced = sb.run(&["machine", "list", "--color", "always"]);
    assert!(forced.stdout.contains("\x1b["), "{:?}", forced.stdout);
    let mut no_color = sb.command(&["machine", "list", "--color", "auto"]);
    no_color.env("NO_COLOR", "1");
    let r = common::run_command(no_color, None);
    assert!(!r.stdout.contains('\x1b'));
    let never = sb.run(&["machine", "list", "--color", "never"]);
    assert!(!never.stdout.contains('\x1b'));
}

#[test]
fn doctor_local_checks_tmux_and_the_default_cwd() {
    let sb = Sandbox::new();
    let r = sb.run(&["machine", "doctor", "local", "--json"]);
    assert_eq!(r.code, 0, "{r:?}");
    let v = r.json();
    assert_eq!(v["machine_id"], "local");
    assert_eq!(v["reachable"], true);
    assert_eq!(v["auth_ok"], true);
    assert_eq!(v["default_cwd_ok"], true);
    assert_eq!(v["errors"], json!([]));
    assert_eq!(v["tmux"]["found"], true);
    let tmux_v = std::process::Command::new("tmux")
        .arg("-V")
        .output()
        .unwrap();
    let expected = String::from_utf8_lossy(&tmux_v.stdout)
        .trim()
        .replace("tmux ", "");
    assert_eq!(v["tmux"]["version"], expected.as_str());
    assert!(v["checked_at"].as_str().unwrap().ends_with('Z'));

    // A HOME that does not exist makes the default cwd check fail, with exit 1 and the fix.
    let mut cmd = sb.command(&["machine", "doctor", "local", "--json"]);
    cmd.env("HOME", sb.path().join("no-such-home"));
    let r = common::run_command(cmd, None);
    assert_eq!(r.code, 1, "{r:?}");
    let v = r.json();
    assert_eq!(v["default_cwd_ok"], false);
    assert_eq!(v["errors"][0]["code"], "remote_not_found");
}
