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

/// The README's five-minute tour runs from a fresh state dir and a fresh HOME (no known_hosts)
/// with no step failing: its `machine add lab` line, with the test bed's host, port, user and
/// default cwd in place of the example's (its key is copied to `~/.ssh/id_ed25519`, the path
/// the tour names), then `machine doctor lab`, then every `local` step. `cargo build` and the
/// `export PATH` are this test's own build; `session attach` needs a terminal and is left out.
#[test]
fn the_readme_tour_runs_from_a_fresh_state_against_a_fresh_host_key() {
    let readme =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../README.md"))
            .unwrap();
    let tour = shell_examples(&readme, "## A five-minute tour", "## Documentation");
    let sshd = remote_runner_testkit::Sshd::start()
        .unwrap_or_else(|e| panic!("cannot start the sshd test bed: {e:#}"));
    let sb = Sandbox::new();
    let ssh_dir = sb.home().join(".ssh");
    std::fs::create_dir_all(&ssh_dir).unwrap();
    std::fs::copy(&sshd.keys.ed25519, ssh_dir.join("id_ed25519")).unwrap();
    let scratch = sb.path().join("scratch");
    std::fs::create_dir_all(&scratch).unwrap();
    std::fs::copy(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../README.md"),
        scratch.join("README.md"),
    )
    .unwrap();

    let bed = format!(
        "--host 127.0.0.1 --port {} --user {}",
        sshd.port,
        remote_runner_testkit::TEST_USER
    );
    let mut steps = Vec::new();
    for line in &tour {
        let command = line.split(" #").next().unwrap_or(line).trim();
        if command.is_empty()
            || command.starts_with('#')
            || command.starts_with("cargo build")
            || command.starts_with("export PATH")
            || command.contains("session attach")
        {
            continue;
        }
        let command = if command.contains("machine add lab ") {
            assert!(
                command.contains("--host 192.0.2.10 --user ely")
                    && command.contains("--accept-new"),
                "the tour's machine add changed: {command}"
            );
            command
                .replace("--host 192.0.2.10 --user ely", &bed)
                .replace("/home/ely", "/tmp")
        } else {
            command.to_string()
        };
        steps.push(command);
    }
    assert!(
        steps.iter().any(|s| s.contains("machine doctor lab")),
        "{steps:#?}"
    );
    assert!(steps.len() >= 10, "{steps:#?}");

    let bin_dir = Path::new(common::BIN).parent().unwrap();
    let path = format!(
        "{}:{}",
        bin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    // One script, as a reader would paste it: `set -x` names the step that failed.
    let script = format!("set -ex\n{}\n", steps.join("\n"));
    let mut sh = Command::new("sh");
    sh.arg("-c")
        .arg(&script)
        .current_dir(&scratch)
        .env("PATH", &path)
        .env("HOME", sb.home())
        .env("REMOTE_RUNNER_STATE_DIR", sb.state_dir())
        .env_remove("REMOTE_RUNNER_SSH_CONFIG")
        .env_remove("SSH_AUTH_SOCK")
        .stdin(Stdio::null());
    let r = common::run_command(sh, None);
    assert_eq!(r.code, 0, "the tour failed:\n{script}\n{r:?}");
    assert!(
        r.stdout.contains(&sshd.host_key_fingerprint),
        "the doctor shows the recorded key's fingerprint: {}",
        r.stdout
    );
    let known_hosts = std::fs::read_to_string(ssh_dir.join("known_hosts")).unwrap();
    assert!(
        known_hosts.contains(&format!("[127.0.0.1]:{}", sshd.port)),
        "{known_hosts}"
    );
    assert_eq!(
        std::fs::read_to_string(scratch.join("lines.txt"))
            .unwrap()
            .trim(),
        format!(
            "{} README.copy",
            std::fs::read_to_string(scratch.join("README.md"))
                .unwrap()
                .lines()
                .count()
        )
    );
}
