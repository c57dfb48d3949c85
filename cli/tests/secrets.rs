//! A sentinel password given through `--password-stdin` never shows up anywhere but the
//! credential file: not in stdout, stderr (logs included, at trace level), the SQLite files,
//! or any error message, on every machine command path.

mod common;

use common::{Run, Sandbox};
use remote_runner_testkit::SENTINEL_PASSWORD;

fn assert_clean(label: &str, r: &Run) {
    assert!(
        !r.stdout.contains(SENTINEL_PASSWORD),
        "{label}: sentinel in stdout: {}",
        r.stdout
    );
    assert!(
        !r.stderr.contains(SENTINEL_PASSWORD),
        "{label}: sentinel in stderr: {}",
        r.stderr
    );
}

#[test]
fn the_sentinel_password_never_leaks_from_machine_commands() {
    let sb = Sandbox::new();
    let pw = format!("{SENTINEL_PASSWORD}\n");
    let mut runs: Vec<(String, Run)> = Vec::new();
    let mut run = |label: &str, args: &[&str], stdin: Option<&str>| {
        let mut cmd = sb.command(args);
        cmd.env("RUST_LOG", "trace");
        let r = common::run_command(cmd, stdin);
        runs.push((label.to_string(), r));
        runs.last().map(|(_, r)| r.code).unwrap()
    };

    let add = [
        "machine",
        "add",
        "pwbox",
        "--host",
        "192.0.2.10",
        "--user",
        "ely",
        "--default-cwd",
        "/home/ely",
        "--password-stdin",
    ];
    assert_eq!(
        run("add json", &[&add[..], &["--json"]].concat(), Some(&pw)),
        0
    );
    // Every failure path that had the password on stdin.
    assert_eq!(
        run("add again", &[&add[..], &["--json"]].concat(), Some(&pw)),
        4
    );
    assert_eq!(run("add again human", &add, Some(&pw)), 4);
    let bad_port = [
        "machine",
        "add",
        "p2",
        "--host",
        "h",
        "--port",
        "70000",
        "--user",
        "u",
        "--default-cwd",
        "/x",
        "--password-stdin",
        "--json",
    ];
    assert_eq!(run("bad port", &bad_port, Some(&pw)), 2);
    let bad_host = [
        "machine",
        "add",
        "p3",
        "--host",
        "bad host",
        "--user",
        "u",
        "--default-cwd",
        "/x",
        "--password-stdin",
        "--json",
    ];
    assert_eq!(run("bad host", &bad_host, Some(&pw)), 2);
    let key_with_pw = [
        "machine",
        "add",
        "p4",
        "--host",
        "h",
        "--user",
        "u",
        "--default-cwd",
        "/x",
        "--auth",
        "key",
        "--password-stdin",
        "--json",
    ];
    assert_eq!(run("key + password-stdin", &key_with_pw, Some(&pw)), 2);
    let replace = [
        "machine",
        "add",
        "pwbox",
        "--replace",
        "--confirm-replace",
        "pwbox",
        "--host",
        "192.0.2.11",
        "--user",
        "ely",
        "--default-cwd",
        "/home/ely",
        "--password-stdin",
    ];
    assert_eq!(run("replace", &replace, Some(&pw)), 0);
    let wrong_confirm = [
        "machine",
        "add",
        "pwbox",
        "--replace",
        "--confirm-replace",
        "other",
        "--host",
        "h",
        "--user",
        "u",
        "--default-cwd",
        "/x",
        "--password-stdin",
        "--json",
    ];
    assert_eq!(run("wrong confirm", &wrong_confirm, Some(&pw)), 2);

    for (label, args) in [
        ("list json", vec!["machine", "list", "--json"]),
        ("list human", vec!["machine", "list", "--color", "always"]),
        ("show json", vec!["machine", "show", "pwbox", "--json"]),
        ("show human", vec!["machine", "show", "pwbox"]),
        (
            "doctor",
            vec!["machine", "doctor", "pwbox", "--json", "--timeout", "5"],
        ),
        (
            "doctor human",
            vec!["machine", "doctor", "pwbox", "--timeout", "5"],
        ),
        (
            "configure-startup",
            vec![
                "machine",
                "configure-startup",
                "pwbox",
                "--startup-command",
                "true",
                "--json",
            ],
        ),
        (
            "configure-path-map",
            vec![
                "machine",
                "configure-path-map",
                "pwbox",
                "--command-prefix",
                "/a",
                "--file-prefix",
                "C:/a",
            ],
        ),
    ] {
        run(label, &args, None);
    }

    let shown = sb.ok_json(&["machine", "show", "pwbox"]);
    assert_eq!(shown["has_password"], true);
    assert_eq!(shown["auth_type"], "password");
    assert_eq!(shown["host"], "192.0.2.11");

    // Positive control: the password really is stored, in the credential file only.
    let creds = std::fs::read(sb.state_dir().join("credentials.json")).unwrap();
    assert!(String::from_utf8_lossy(&creds).contains(SENTINEL_PASSWORD));

    run("remove", &["machine", "remove", "pwbox", "--json"], None);
    for (label, r) in &runs {
        assert_clean(label, r);
    }

    // No other file in the state dir holds the bytes (SQLite main file, WAL, SHM, locks...).
    let needle = SENTINEL_PASSWORD.as_bytes();
    for entry in std::fs::read_dir(sb.state_dir()).unwrap() {
        let path = entry.unwrap().path();
        if !path.is_file() {
            continue;
        }
        let bytes = std::fs::read(&path).unwrap();
        let found = bytes.windows(needle.len()).any(|w| w == needle);
        assert!(!found, "sentinel found in {}", path.display());
    }
}
