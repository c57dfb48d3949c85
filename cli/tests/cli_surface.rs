//! The CLI's shape: help with examples everywhere, completions, man pages, exit codes, and
//! not-found errors for unknown machines, sessions, commands and runs.

mod common;

use common::Sandbox;

/// Subcommand names listed in a help text's "Commands:" section.
fn subcommands(help: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut in_section = false;
    for line in help.lines() {
        if line.starts_with("Commands:") {
            in_section = true;
            continue;
        }
        if in_section {
            if !line.starts_with("  ") {
                break;
            }
            if let Some(name) = line.split_whitespace().next()
                && line.starts_with("  ")
                && !line.starts_with("   ")
                && name != "help"
            {
                names.push(name.to_string());
            }
        }
    }
    names
}

#[test]
fn every_command_has_help_with_a_working_example() {
    let sb = Sandbox::new();
    let mut queue: Vec<Vec<String>> = vec![vec![]];
    let mut seen = 0;
    while let Some(path) = queue.pop() {
        let mut args: Vec<&str> = path.iter().map(String::as_str).collect();
        args.push("--help");
        let r = sb.run(&args);
        assert_eq!(r.code, 0, "{args:?}: {r:?}");
        assert!(
            r.stdout.contains("Usage: remote-runner"),
            "{args:?}: {}",
            r.stdout
        );
        assert!(
            r.stdout.contains("Examples:"),
            "{args:?} has no examples:\n{}",
            r.stdout
        );
        let example = format!("remote-runner {}", path.join(" "));
        assert!(
            r.stdout.contains(example.trim_end()),
            "{args:?}: no example of `{example}`:\n{}",
            r.stdout
        );
        seen += 1;
        for sub in subcommands(&r.stdout) {
            let mut next = path.clone();
            next.push(sub);
            queue.push(next);
        }
    }
    // root, 4 groups + completions, 7 machine, 10 session + 4 command, 4 file, 3 run
    assert!(seen >= 33, "only {seen} help pages were found");
}

#[test]
fn help_examples_for_machine_commands_work_as_written() {
    let sb = Sandbox::new();
    // Taken from `machine add --help` / `machine --help`.
    let r = sb.run(&[
        "machine",
        "add",
        "lab-gpu-01",
        "--host",
        "192.0.2.10",
        "--user",
        "ely",
        "--key-path",
        "~/.ssh/id_ed25519",
        "--default-cwd",
        "/home/ely",
        "--json",
    ]);
    assert_eq!(r.code, 0, "{r:?}");
    let r = sb.run(&["machine", "list", "--json"]);
    assert_eq!(r.code, 0);
    let r = sb.run(&["machine", "show", "local"]);
    assert_eq!(r.code, 0);
    let r = sb.run(&["machine", "doctor", "local"]);
    assert_eq!(r.code, 0, "{r:?}");
    let r = sb.run(&["machine", "remove", "lab-gpu-01", "--json"]);
    assert_eq!(r.code, 0);
}

#[test]
fn completions_generate_for_bash_zsh_and_fish() {
    let sb = Sandbox::new();
    for (shell, marker) in [
        ("bash", "complete -F"),
        ("zsh", "#compdef remote-runner"),
        ("fish", "complete -c remote-runner"),
    ] {
        let r = sb.run(&["completions", shell]);
        assert_eq!(r.code, 0, "{shell}: {r:?}");
        assert!(r.stdout.contains(marker), "{shell}: {}", &r.stdout[..200]);
        assert!(r.stdout.contains("configure-startup"), "{shell}");
    }
    let r = sb.run(&["completions", "tcsh", "--json"]);
    assert_eq!(r.code, 2);
    assert_eq!(r.error()["code"], "invalid_argument");
}

#[test]
fn man_pages_are_generated_from_the_definitions() {
    let sb = Sandbox::new();
    let r = sb.run(&["man"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(
        r.stdout.starts_with(".ie") || r.stdout.contains(".TH"),
        "{}",
        &r.stdout[..100]
    );
    assert!(r.stdout.contains("remote\\-runner"));
    let out = sb.path().join("man");
    let r = sb.run(&["man", "--out-dir", out.to_str().unwrap(), "--json"]);
    assert_eq!(r.code, 0, "{r:?}");
    let files = r.json()["files"].as_array().unwrap().len();
    assert!(files >= 30, "{files} pages");
    assert!(out.join("remote-runner-machine-add.1").exists());
}

#[test]
fn unknown_ids_are_not_found_errors_with_exit_3() {
    let sb = Sandbox::new();
    let cases: Vec<(Vec<&str>, &[&str])> = vec![
        (
            vec!["session", "create", "--machine", "nope"],
            &["unknown_machine"],
        ),
        (
            vec!["session", "show", "--session", "sess_x"],
            &["unknown_session"],
        ),
        (
            vec![
                "session",
                "exec",
                "--session",
                "sess_x",
                "--cmd",
                "true",
                "--exit-code",
            ],
            &["unknown_session"],
        ),
        (
            vec!["session", "command", "list", "--session", "sess_x"],
            &["unknown_session"],
        ),
        (
            vec![
                "session",
                "command",
                "result",
                "--session",
                "s",
                "--command-id",
                "c",
            ],
            &["unknown_session", "unknown_command"],
        ),
        (
            vec![
                "session",
                "command",
                "wait",
                "--session",
                "s",
                "--command-id",
                "c",
            ],
            &["unknown_session", "unknown_command"],
        ),
        (
            vec![
                "session",
                "command",
                "stop",
                "--session",
                "s",
                "--command-id",
                "c",
            ],
            &["unknown_session", "unknown_command"],
        ),
        (
            vec!["session", "send", "--session", "s", "--input", "ls"],
            &["unknown_session"],
        ),
        (
            vec!["session", "read", "--session", "s", "--since", "10"],
            &["unknown_session"],
        ),
        (
            vec!["session", "logs", "--session", "s"],
            &["unknown_session"],
        ),
        (
            vec!["session", "destroy", "--session", "s"],
            &["unknown_session"],
        ),
        (
            vec![
                "file",
                "put",
                "--session",
                "s",
                "--local",
                "a",
                "--remote",
                "/b",
            ],
            &["unknown_session"],
        ),
        (
            vec![
                "file",
                "get",
                "--session",
                "s",
                "--remote",
                "/b",
                "--local",
                "a",
            ],
            &["unknown_session"],
        ),
        (
            vec!["file", "list", "--session", "s", "--remote", "/b"],
            &["unknown_session"],
        ),
        (
            vec!["file", "history", "--session", "s"],
            &["unknown_session"],
        ),
        (
            vec![
                "run",
                "once",
                "--machine",
                "nope",
                "--cmd",
                "true",
                "--input",
                "a=/b",
            ],
            &["unknown_machine"],
        ),
        (vec!["run", "show", "run_x"], &["unknown_run"]),
    ];
    for (mut args, codes) in cases {
        args.push("--json");
        let r = sb.run(&args);
        assert_eq!(r.code, 3, "{args:?}: {r:?}");
        assert!(
            r.stdout.is_empty(),
            "{args:?} printed a result: {}",
            r.stdout
        );
        let err = r.error();
        assert!(
            codes.contains(&err["code"].as_str().unwrap()),
            "{args:?}: {err}"
        );
    }
    // Empty state: the lists are empty, not errors.
    for args in [
        vec!["session", "list"],
        vec!["file", "history"],
        vec!["run", "list"],
    ] {
        let v = sb.ok_json(&args);
        let summary = v["summary"].as_object().unwrap();
        assert!(summary.values().all(|n| n == 0), "{args:?}: {v}");
    }
    // Human mode says it in words on stderr.
    let r = sb.run(&["run", "show", "run_x"]);
    assert_eq!(r.code, 3);
    assert!(r.stderr.starts_with("error: no run run_x"), "{}", r.stderr);
}

#[test]
fn usage_errors_exit_2_and_are_json_with_json() {
    let sb = Sandbox::new();
    let r = sb.run(&["machine", "frobnicate", "--json"]);
    assert_eq!(r.code, 2);
    assert!(r.stdout.is_empty());
    assert_eq!(r.error()["code"], "invalid_argument");
    let r = sb.run(&["machine", "--json"]);
    assert_eq!(r.code, 2, "{r:?}");
    assert!(r.stdout.is_empty());
    assert!(
        r.error()["message"]
            .as_str()
            .unwrap()
            .contains("subcommand")
    );
    let r = sb.run(&["machine", "frobnicate"]);
    assert_eq!(r.code, 2);
    assert!(r.stderr.contains("frobnicate"));
    let r = sb.run(&["--timeout", "0", "machine", "list", "--json"]);
    assert_eq!(r.code, 2, "{r:?}");
    let r = sb.run(&[
        "run",
        "once",
        "--machine",
        "m",
        "--cmd",
        "x",
        "--input",
        "noequals",
        "--json",
    ]);
    assert_eq!(r.code, 2, "{r:?}");
    assert!(
        r.error()["message"]
            .as_str()
            .unwrap()
            .contains("SOURCE=DESTINATION")
    );
}

#[test]
fn global_options_work_before_and_after_the_subcommand() {
    let sb = Sandbox::new();
    let state = sb.state_dir();
    let r = sb.run(&["--json", "--timeout", "5", "machine", "list"]);
    assert_eq!(r.code, 0, "{r:?}");
    r.json();
    let r = sb.run(&[
        "machine",
        "list",
        "--timeout",
        "5",
        "--color",
        "never",
        "--json",
    ]);
    assert_eq!(r.code, 0, "{r:?}");
    r.json();
    assert!(state.join("state.sqlite3").exists());
}

#[test]
fn version_and_bare_invocation() {
    let sb = Sandbox::new();
    let r = sb.run(&["--version"]);
    assert_eq!(r.code, 0);
    assert!(r.stdout.starts_with("remote-runner "));
    let r = sb.run(&[]);
    assert_eq!(r.code, 2, "no subcommand is a usage error: {r:?}");
    assert!(r.stderr.contains("Usage:"));
}
