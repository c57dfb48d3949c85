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

/// The completions and man examples of docs/cli.md run as one script (`set -e`) in a sandbox
/// whose HOME has the directories they write into.
#[test]
fn completions_and_man_examples_in_the_docs_work_as_written() {
    let doc = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/cli.md"))
        .unwrap();
    let examples = shell_examples(&doc, "## Completions and man", "## Local state");
    assert!(examples.len() >= 5, "{examples:#?}");
    let sb = Sandbox::new();
    for dir in [
        ".local/share/bash-completion/completions",
        ".zfunc",
        ".config/fish/completions",
    ] {
        std::fs::create_dir_all(sb.home().join(dir)).unwrap();
    }
    let scratch = sb.path().join("scratch");
    std::fs::create_dir_all(&scratch).unwrap();
    let bin_dir = Path::new(common::BIN).parent().unwrap();
    let path = format!(
        "{}:{}",
        bin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let script = format!("set -e\n{}\n", examples.join("\n"));
    let mut sh = Command::new("sh");
    sh.arg("-c")
        .arg(&script)
        .current_dir(&scratch)
        .env("PATH", &path)
        .env("HOME", sb.home())
        .env("REMOTE_RUNNER_STATE_DIR", sb.state_dir())
        .env("MANPAGER", "cat")
        .stdin(Stdio::null());
    let r = common::run_command(sh, None);
    assert_eq!(r.code, 0, "{script}\n{r:?}");
    let bash = std::fs::read_to_string(
        sb.home()
            .join(".local/share/bash-completion/completions/remote-runner"),
    )
    .unwrap();
    assert!(bash.contains("remote-runner"), "{bash}");
    assert!(scratch.join("man/remote-runner-machine-add.1").is_file());
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

/// Every command's `--help`, found by walking the command tree from `remote-runner --help`.
fn help_pages() -> Vec<(String, String)> {
    let mut pages = Vec::new();
    let mut queue = vec![Vec::<String>::new()];
    while let Some(path) = queue.pop() {
        let out = Command::new(common::BIN)
            .args(&path)
            .arg("--help")
            .env("COLUMNS", "100")
            .output()
            .unwrap();
        assert!(out.status.success(), "{path:?} --help: {out:?}");
        let text = String::from_utf8(out.stdout).unwrap();
        if let Some(at) = text.find("\nCommands:\n") {
            for line in text[at + 11..].lines() {
                if !line.starts_with("  ") {
                    break;
                }
                // An entry starts at column 2; deeper lines continue a description.
                if line.starts_with("   ") {
                    continue;
                }
                let name = line.split_whitespace().next().unwrap();
                if name != "help" {
                    let mut sub = path.clone();
                    sub.push(name.to_string());
                    queue.push(sub);
                }
            }
        }
        pages.push((path.join(" "), text));
    }
    pages
}

/// The examples of one help page, continuation lines joined and trailing comments dropped.
fn help_examples(page: &str) -> Vec<String> {
    let Some(at) = page.find("Examples:\n") else {
        return Vec::new();
    };
    let mut examples = Vec::new();
    let mut current = String::new();
    for line in page[at + 10..].lines() {
        if !line.starts_with("  ") {
            break;
        }
        let line = line.trim();
        if current.is_empty() && line.starts_with('#') {
            continue;
        }
        match line.strip_suffix('\\') {
            Some(head) => current.push_str(head),
            None => {
                current.push_str(line);
                let example = std::mem::take(&mut current);
                let example = match example.find("  #") {
                    Some(i) => example[..i].trim_end().to_string(),
                    None => example,
                };
                examples.push(example);
            }
        }
    }
    examples
}

/// The world the help examples assume, in a fresh sandbox: the machines they name (reaching the
/// test bed's sshd), a session and one of its commands, a run, and the files they read.
struct HelpWorld<'a> {
    sshd: &'a remote_runner_testkit::Sshd,
    remote_home: &'a Path,
    sb: Sandbox,
    scratch: std::path::PathBuf,
}

impl<'a> HelpWorld<'a> {
    fn new(sshd: &'a remote_runner_testkit::Sshd, remote_home: &'a Path) -> HelpWorld<'a> {
        let sb = Sandbox::new();
        let home = sb.home();
        for dir in [
            ".ssh",
            ".local/share/bash-completion/completions",
            ".zfunc",
            ".config/fish/completions",
            // `mcp --root ~/project --root ~/datasets`
            "project",
            "datasets",
        ] {
            std::fs::create_dir_all(home.join(dir)).unwrap();
        }
        std::fs::write(
            home.join(".ssh/config"),
            format!(
                "Host web1\n    HostName 127.0.0.1\n    Port {}\n    User {}\n    IdentityFile {}\n    UserKnownHostsFile {}\n",
                sshd.port,
                remote_runner_testkit::TEST_USER,
                sshd.keys.ed25519.display(),
                sshd.known_hosts.display()
            ),
        )
        .unwrap();
        let scratch = sb.path().join("scratch");
        std::fs::create_dir_all(&scratch).unwrap();
        std::fs::write(scratch.join("input.txt"), "some input\n").unwrap();
        std::fs::write(scratch.join("input.json"), "{\"n\": 2}\n").unwrap();
        std::fs::write(scratch.join("script.sh"), "echo from script\n").unwrap();
        std::fs::write(scratch.join("job.py"), "print('job ran')\nreturn 42\n").unwrap();
        HelpWorld {
            sshd,
            remote_home,
            sb,
            scratch,
        }
    }

    fn add_bed_machine(&self, id: &str, extra: &[&str]) {
        let port = self.sshd.port.to_string();
        let mut args = vec![
            "machine",
            "add",
            id,
            "--host",
            "127.0.0.1",
            "--port",
            &port,
            "--user",
            remote_runner_testkit::TEST_USER,
            "--key-path",
            self.sshd.keys.ed25519.to_str().unwrap(),
            "--known-hosts-file",
            self.sshd.known_hosts.to_str().unwrap(),
            "--default-cwd",
            self.remote_home.to_str().unwrap(),
        ];
        args.extend_from_slice(extra);
        self.sb.ok_json(&args);
    }

    /// `example` with the world it names set up, its ids and paths made real.
    fn prepare(&self, example: &str) -> String {
        let adds = |id: &str| {
            example.contains(&format!("machine add {id}")) && !example.contains("--replace")
        };
        for id in ["lab-gpu-01", "lab-win-01"] {
            if example.contains(id) && !adds(id) {
                self.add_bed_machine(id, &[]);
            }
        }
        if example.contains(" hpc") && !adds("hpc") {
            self.add_bed_machine("hpc", &["--scheduler", "slurm"]);
        }
        let mut text = example.replace("/home/ely", self.remote_home.to_str().unwrap());
        if example.contains("sess_abc123") || example.contains("cmd_abc123") {
            if !example.contains("lab-gpu-01") {
                self.add_bed_machine("lab-gpu-01", &[]);
            }
            let project = self.remote_home.join("project");
            let session = self.sb.ok_json(&[
                "session",
                "create",
                "--machine",
                "lab-gpu-01",
                "--cwd",
                project.to_str().unwrap(),
            ]);
            let session = session["session_id"].as_str().unwrap().to_string();
            let command =
                self.sb
                    .ok_json(&["session", "exec", "--session", &session, "--cmd", "echo hi"]);
            let command = command["command_id"].as_str().unwrap().to_string();
            if example.contains("print(6*7)") {
                // The example's session runs python3 (its help says so).
                self.sb.ok_json(&[
                    "session",
                    "send",
                    "--session",
                    &session,
                    "--input",
                    "python3",
                    "--wait-for",
                    ">>> $",
                ]);
            }
            text = text
                .replace("sess_abc123", &session)
                .replace("cmd_abc123", &command);
        }
        if example.contains("run_abc123") {
            let run = self.sb.ok_json(&[
                "run",
                "once",
                "--machine",
                "local",
                "--cwd",
                "/tmp",
                "--cmd",
                "true",
            ]);
            text = text.replace("run_abc123", run["run_id"].as_str().unwrap());
        }
        text
    }

    fn run(&self, script: &str) -> common::Run {
        let bin_dir = Path::new(common::BIN).parent().unwrap();
        let path = format!(
            "{}:{}",
            bin_dir.display(),
            std::env::var("PATH").unwrap_or_default()
        );
        let mut sh = Command::new("sh");
        sh.arg("-c")
            .arg(script)
            .current_dir(&self.scratch)
            .env("PATH", path)
            .env("HOME", self.sb.home())
            .env("REMOTE_RUNNER_STATE_DIR", self.sb.state_dir())
            .env("PASSWORD", "help-example-password")
            .env_remove("REMOTE_RUNNER_SSH_CONFIG")
            .env_remove("SSH_AUTH_SOCK")
            .stdin(Stdio::null());
        common::run_command(sh, None)
    }
}

const MCP_HANDSHAKE: &str = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"docs-test","version":"1"}}}
{"jsonrpc":"2.0","method":"notifications/initialized"}
{"jsonrpc":"2.0","id":2,"method":"tools/list"}"#;

/// Every example of every `--help`, as the help prints it (100 columns), runs in a world that
/// has what it names: its machines reach the test bed's sshd (`/home/ely` is a directory there),
/// `sess_abc123`, `cmd_abc123` and `run_abc123` are a real session, command and run. Each runs
/// in a fresh sandbox and must exit 0, but for the few listed with why; none may be a usage
/// error. Left out: the two that need a terminal (`session attach`, an interactive `machine add`).
#[test]
fn every_help_example_works_as_written() {
    let sshd = remote_runner_testkit::Sshd::start()
        .unwrap_or_else(|e| panic!("cannot start the sshd test bed: {e:#}"));
    let remote_home = sshd.remote_dir("help-examples").unwrap();
    let project = remote_home.join("project");
    std::fs::create_dir_all(project.join("sub")).unwrap();
    for dir in [project.clone(), project.join("sub")] {
        std::fs::write(
            dir.join("Makefile"),
            "all:\n\t@echo built\ntest:\n\t@echo tested\n",
        )
        .unwrap();
    }
    std::fs::write(
        project.join("train.py"),
        "import sys\nopen('output.txt', 'w').write(open('input.json').read())\n",
    )
    .unwrap();
    std::fs::write(project.join("output.txt"), "output\n").unwrap();
    let chown = Command::new("chown")
        .arg("-R")
        .arg(format!("{0}:{0}", remote_runner_testkit::TEST_USER))
        .arg(&remote_home)
        .status()
        .unwrap();
    assert!(chown.success());

    // (part of the example, the exit codes it may have, why)
    let allowed: &[(&str, &[i32], &str)] = &[
        (
            "--cmd 'pytest -q'",
            &[1],
            "pytest is not installed on the test bed",
        ),
        (
            "session create --machine hpc",
            &[0, 9],
            "the test bed's sshd reaches a Slurm controller only while the Slurm tests' bed runs",
        ),
    ];
    let mut seen = 0;
    let mut failures = Vec::new();
    for (page, text) in help_pages() {
        for example in help_examples(&text) {
            if example == "remote-runner machine add" || example.contains("session attach") {
                continue;
            }
            seen += 1;
            let world = HelpWorld::new(&sshd, &remote_home);
            let script = world.prepare(&example);
            // An MCP server serves its stdin: a client's handshake, then the client leaves.
            let r = if example.starts_with("remote-runner mcp") {
                world.run(&format!("{script} <<'EOF'\n{MCP_HANDSHAKE}\nEOF"))
            } else {
                world.run(&script)
            };
            let ok: &[i32] = allowed
                .iter()
                .find(|(part, _, _)| example.contains(part))
                .map_or(&[0], |(_, codes, _)| codes);
            if !ok.contains(&r.code) {
                failures.push(format!(
                    "`{page} --help`: {example}\n  ran: {script}\n  {r:?}"
                ));
            }
        }
    }
    assert!(seen >= 50, "only {seen} examples found");
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}
