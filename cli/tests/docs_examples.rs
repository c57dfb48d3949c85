//! The `machine` examples in docs/cli.md work as written: each shell example of the "Machine
//! commands" section runs, in order, in a sandbox (HOME, state dir, an ~/.ssh/config with the
//! `web1` alias the docs use, `$PASSWORD`, and `remote-runner` on PATH).

mod common;

use std::path::Path;
use std::process::{Command, Stdio};

use common::Sandbox;

/// The commands in the ```sh blocks between two headings, continuation lines joined.
fn shell_examples(doc: &str, from: &str, to: &str) -> Vec<String> {
    let start = doc
        .find(from)
        .unwrap_or_else(|| panic!("no {from:?} in docs/cli.md"));
    let end = doc[start..].find(to).map_or(doc.len(), |i| start + i);
    let mut commands = Vec::new();
    let mut in_block = false;
    let mut current = String::new();
    for line in doc[start..end].lines() {
        if line.starts_with("```") {
            in_block = line.starts_with("```sh");
            continue;
        }
        if !in_block {
            continue;
        }
        match line.strip_suffix('\\') {
            Some(head) => current.push_str(head),
            None => {
                current.push_str(line);
                commands.push(std::mem::take(&mut current));
            }
        }
    }
    commands
}

#[test]
fn machine_examples_in_the_docs_work_as_written() {
    let doc = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/cli.md"))
        .unwrap();
    let examples = shell_examples(&doc, "## Machine commands", "## Session commands");
    assert!(examples.len() >= 12, "{examples:#?}");

    let sb = Sandbox::new();
    std::fs::create_dir_all(sb.home().join(".ssh")).unwrap();
    std::fs::write(
        sb.home().join(".ssh/config"),
        "Host web1\n    HostName 192.0.2.20\n    User ely\n",
    )
    .unwrap();
    let bin_dir = Path::new(common::BIN).parent().unwrap();
    let path = format!(
        "{}:{}",
        bin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    // The configure-* examples act on a Windows machine the docs assume exists.
    sb.ok_json(&[
        "machine",
        "add",
        "lab-win-01",
        "--host",
        "192.0.2.30",
        "--user",
        "ely",
        "--default-cwd",
        "/home/ely",
    ]);

    for example in &examples {
        let mut sh = Command::new("sh");
        sh.arg("-c")
            .arg(example)
            .env("PATH", &path)
            .env("HOME", sb.home())
            .env("REMOTE_RUNNER_STATE_DIR", sb.state_dir())
            .env("PASSWORD", "docs-example-password")
            .env_remove("REMOTE_RUNNER_SSH_CONFIG")
            .env_remove("SSH_AUTH_SOCK")
            .stdin(Stdio::null());
        let r = common::run_command(sh, None);
        if example.contains("doctor lab-gpu-01") {
            // 192.0.2.0/24 is TEST-NET: the report comes back, saying it is not reachable.
            assert_eq!(r.code, 1, "{example}: {r:?}");
            assert_eq!(r.json()["reachable"], false, "{example}");
            continue;
        }
        assert_eq!(r.code, 0, "{example}: {r:?}");
        if example.contains("--json") {
            common::one_json_object(&r.stdout);
        }
    }
    let web1 = sb.ok_json(&["machine", "show", "web1"]);
    assert_eq!(web1["host"], "192.0.2.20");
    assert_eq!(web1["ssh_config_host"], "web1");
    assert_eq!(
        sb.ok_json(&["machine", "show", "lab-pw"])["has_password"],
        true
    );
}

/// The runnable (```sh) examples of the session, file and run sections: each section's blocks
/// run as one script (`set -e`, so every line must succeed) in a scratch directory, on the
/// `local` machine, with `remote-runner` on PATH. They pick ids out of the JSON with `jq`.
#[test]
fn session_file_and_run_examples_in_the_docs_work_as_written() {
    let doc = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/cli.md"))
        .unwrap();
    let jq = Command::new("jq").arg("--version").output();
    assert!(
        jq.is_ok_and(|o| o.status.success()),
        "the docs' examples use jq: apt-get install jq"
    );
    let bin_dir = Path::new(common::BIN).parent().unwrap();
    let path = format!(
        "{}:{}",
        bin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    for (from, to, min) in [
        ("## Session commands", "### `session create`", 10),
        ("### Interactive programs", "### `session attach`", 10),
        ("## File commands", "## Run commands", 6),
        ("## Run commands", "## Completions and man", 6),
    ] {
        let examples = shell_examples(&doc, from, to);
        assert!(examples.len() >= min, "{from}: {examples:#?}");
        let sb = Sandbox::new();
        let scratch = sb.path().join("scratch");
        std::fs::create_dir_all(&scratch).unwrap();
        let script = format!("set -e\n{}\n", examples.join("\n"));
        let mut sh = Command::new("sh");
        sh.arg("-c")
            .arg(&script)
            .current_dir(&scratch)
            .env("PATH", &path)
            .env("HOME", sb.home())
            .env("REMOTE_RUNNER_STATE_DIR", sb.state_dir())
            .env_remove("REMOTE_RUNNER_SSH_CONFIG")
            .env_remove("NO_COLOR")
            .stdin(Stdio::null());
        let r = common::run_command(sh, None);
        assert_eq!(r.code, 0, "{from} examples failed:\n{script}\n{r:?}");
        match from {
            "## Session commands" => {
                assert!(r.stdout.contains("hello, world"), "{}", r.stdout);
                assert!(r.stdout.contains("ls failed with 2"), "{}", r.stdout);
                assert!(r.stdout.contains("typed by hand"), "{}", r.stdout);
            }
            "### Interactive programs" => {
                for line in ["waiting_input\n>>> \n", "42\n>>> \n", "completed\n0\n"] {
                    assert!(r.stdout.contains(line), "{line:?} in {}", r.stdout);
                }
                assert!(r.stdout.contains("answered y"), "{}", r.stdout);
                assert!(r.stdout.contains("130\ntrue\n"), "{}", r.stdout);
                assert!(r.stdout.contains("tick 3"), "{}", r.stdout);
                assert!(r.stdout.contains("bg got hello"), "{}", r.stdout);
            }
            "## File commands" => assert_eq!(
                std::fs::read_to_string(scratch.join("downloaded.txt")).unwrap(),
                "some input\n"
            ),
            _ => assert_eq!(
                std::fs::read_to_string(scratch.join("out/output.txt")).unwrap(),
                "HELLO RUN\n"
            ),
        }
    }
}
