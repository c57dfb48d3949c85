//! Interactive use on a real terminal: tmux provides the pseudo-TTY, `send-keys` types the
//! answers, `capture-pane` shows what a person would see. Covers `machine add` questions, the
//! replacement confirmation, and `machine doctor` asking for an encrypted key's passphrase.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use common::Sandbox;
use remote_runner_testkit::{SENTINEL_PASSPHRASE, Sshd, TEST_USER};

const DEADLINE: Duration = Duration::from_secs(30);

/// A private tmux server (its own socket) running one command in a pane.
struct Pane {
    socket: PathBuf,
}

impl Pane {
    /// `tag` names the socket, so panes of one test never share a server.
    fn start(dir: &Path, tag: &str, shell_command: &str) -> Pane {
        let socket = dir.join(format!("{tag}.sock"));
        let status = Command::new("tmux")
            .arg("-S")
            .arg(&socket)
            .args(["new-session", "-d", "-x", "200", "-y", "50", "-s", "t"])
            .arg(shell_command)
            .status()
            .expect("tmux is needed: apt-get install tmux");
        assert!(status.success());
        Pane { socket }
    }

    fn tmux(&self, args: &[&str]) -> String {
        let out = Command::new("tmux")
            .arg("-S")
            .arg(&self.socket)
            .args(args)
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn screen(&self) -> String {
        self.tmux(&["capture-pane", "-p", "-t", "t", "-S", "-50"])
    }

    /// Wait (bounded) until the screen shows `text`, then type `answer` and Enter.
    fn answer(&self, prompt: &str, answer: &str) {
        self.wait_for(prompt);
        if !answer.is_empty() {
            self.tmux(&["send-keys", "-t", "t", "-l", answer]);
        }
        self.tmux(&["send-keys", "-t", "t", "Enter"]);
    }

    fn wait_for(&self, text: &str) {
        let start = Instant::now();
        loop {
            let screen = self.screen();
            if screen.contains(text) {
                return;
            }
            assert!(
                start.elapsed() < DEADLINE,
                "no {text:?} on the screen:\n{screen}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Pane {
    fn drop(&mut self) {
        let _ = Command::new("tmux")
            .arg("-S")
            .arg(&self.socket)
            .arg("kill-server")
            .status();
    }
}

/// The shell line for the pane: stdout to a file (stderr, the prompts, stay on the terminal),
/// then the exit code to another file.
fn pane_command(sb: &Sandbox, args: &str, tag: &str) -> (String, PathBuf, PathBuf) {
    pane_command_env(sb, "", args, tag)
}

fn pane_command_env(sb: &Sandbox, env: &str, args: &str, tag: &str) -> (String, PathBuf, PathBuf) {
    let out = sb.path().join(format!("{tag}.out"));
    let code = sb.path().join(format!("{tag}.code"));
    let line = format!(
        "env -u SSH_AUTH_SOCK HOME={home} {env} {bin} --state-dir {state} {args} > {out}; echo $? > {code}.tmp && mv {code}.tmp {code}; sleep 60",
        home = sb.home().display(),
        env = env,
        bin = common::BIN,
        state = sb.state_dir().display(),
        out = out.display(),
        code = code.display(),
    );
    (line, out, code)
}

fn wait_for_file(path: &Path) -> String {
    let start = Instant::now();
    loop {
        if let Ok(text) = std::fs::read_to_string(path) {
            return text;
        }
        assert!(
            start.elapsed() < DEADLINE,
            "{} never appeared",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_person_can_add_a_machine_by_answering_questions() {
    let sb = Sandbox::new();
    let (line, out, code) = pane_command(&sb, "machine add --json", "add");
    let pane = Pane::start(sb.path(), "add", &line);
    pane.answer("Machine id", "tty-box");
    pane.answer("Host or IP", "192.0.2.50");
    pane.answer("SSH port [22]", "");
    pane.answer("Login user", "ely");
    pane.answer("Authentication (key, agent, password) [key]", "password");
    pane.answer("Default working directory [/home/ely]", "");
    pane.answer("Startup commands", "source ~/.profile");
    pane.answer("> source ~/.profile", "");
    pane.answer("Password for ely@192.0.2.50", "typed-secret-8Hq");
    assert_eq!(
        wait_for_file(&code).trim(),
        "0",
        "screen:\n{}",
        pane.screen()
    );

    let v = common::one_json_object(&std::fs::read_to_string(&out).unwrap());
    assert_eq!(v["machine_id"], "tty-box");
    assert_eq!(v["host"], "192.0.2.50");
    assert_eq!(v["port"], 22);
    assert_eq!(v["user"], "ely");
    assert_eq!(v["auth_type"], "password");
    assert_eq!(v["default_cwd"], "/home/ely");
    assert_eq!(
        v["startup_commands"],
        serde_json::json!(["source ~/.profile"])
    );
    assert_eq!(v["has_password"], true);
    // The password was read without echo and is stored only in the credential file.
    assert!(
        !pane.screen().contains("typed-secret-8Hq"),
        "{}",
        pane.screen()
    );
    let creds = std::fs::read_to_string(sb.state_dir().join("credentials.json")).unwrap();
    assert!(creds.contains("typed-secret-8Hq"));
}

#[test]
fn interactive_replacement_needs_the_id_typed_again() {
    let sb = Sandbox::new();
    sb.add_key_machine("dup", "192.0.2.1");
    let flags = "machine add dup --host 192.0.2.2 --user ely --default-cwd /home/ely --json";

    // A wrong answer leaves the record alone.
    let (line, _out, code) = pane_command(&sb, flags, "cancel");
    let pane = Pane::start(sb.path(), "cancel", &line);
    pane.wait_for("machine dup already exists");
    pane.answer("Type dup to replace it", "nope");
    assert_eq!(
        wait_for_file(&code).trim(),
        "4",
        "screen:\n{}",
        pane.screen()
    );
    assert_eq!(sb.ok_json(&["machine", "show", "dup"])["host"], "192.0.2.1");
    drop(pane);

    let (line, out, code) = pane_command(&sb, flags, "confirm");
    let pane = Pane::start(sb.path(), "confirm", &line);
    pane.answer("Type dup to replace it", "dup");
    assert_eq!(
        wait_for_file(&code).trim(),
        "0",
        "screen:\n{}",
        pane.screen()
    );
    let v = common::one_json_object(&std::fs::read_to_string(&out).unwrap());
    assert_eq!(v["replaced"], true);
    assert_eq!(sb.ok_json(&["machine", "show", "dup"])["host"], "192.0.2.2");
}

/// The contract's replace form on a terminal: the id comes from --confirm-replace, the stored
/// record (and its stored password) is kept where no flag changes it, and nothing is asked.
#[test]
fn the_contract_replace_form_works_on_a_terminal() {
    let sb = Sandbox::new();
    let added = sb.run_with_stdin(
        &[
            "machine",
            "add",
            "kept",
            "--host",
            "192.0.2.9",
            "--port",
            "2200",
            "--user",
            "ely",
            "--default-cwd",
            "/srv",
            "--auth",
            "password",
            "--password-stdin",
            "--json",
        ],
        "kept-secret\n",
    );
    assert_eq!(added.code, 0, "{added:?}");
    let (line, out, code) = pane_command(
        &sb,
        "machine add --replace --confirm-replace kept --accept-new --json",
        "contract",
    );
    let pane = Pane::start(sb.path(), "contract", &line);
    assert_eq!(
        wait_for_file(&code).trim(),
        "0",
        "screen:\n{}",
        pane.screen()
    );
    let v = common::one_json_object(&std::fs::read_to_string(&out).unwrap());
    assert_eq!(v["replaced"], true);
    assert_eq!(v["host"], "192.0.2.9");
    assert_eq!(v["port"], 2200);
    assert_eq!(v["default_cwd"], "/srv");
    assert_eq!(v["host_key_policy"], "accept-new");
    assert_eq!(v["has_password"], true);
    let creds = std::fs::read_to_string(sb.state_dir().join("credentials.json")).unwrap();
    assert!(creds.contains("kept-secret"));
}

#[test]
fn doctor_asks_for_an_encrypted_keys_passphrase_on_a_terminal_and_never_shows_it() {
    let sshd = Sshd::start().unwrap_or_else(|e| panic!("cannot start the sshd test bed: {e:#}"));
    let sb = Sandbox::new();
    let port = sshd.port.to_string();
    let key = sshd.keys.ed25519_encrypted.to_str().unwrap();
    let known_hosts = sshd.known_hosts.to_str().unwrap();
    sb.ok_json(&[
        "machine",
        "add",
        "enc",
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
    ]);

    // Without a terminal the encrypted key is skipped, never prompted for: auth fails.
    let r = sb.run(&["machine", "doctor", "enc", "--timeout", "30", "--json"]);
    assert_eq!(r.code, 1, "{r:?}");
    assert_eq!(r.json()["auth_ok"], false);

    let (line, out, code) = pane_command_env(
        &sb,
        "RUST_LOG=trace",
        "machine doctor enc --timeout 30 --json",
        "doctor",
    );
    let pane = Pane::start(sb.path(), "doctor", &line);
    pane.answer("Enter passphrase for key", SENTINEL_PASSPHRASE);
    assert_eq!(
        wait_for_file(&code).trim(),
        "0",
        "screen:\n{}",
        pane.screen()
    );
    let stdout = std::fs::read_to_string(&out).unwrap();
    let v = common::one_json_object(&stdout);
    assert_eq!(v["auth_ok"], true, "{v}");
    assert!(!stdout.contains(SENTINEL_PASSPHRASE));
    // The terminal (stderr, trace logs included) never echoed it either.
    assert!(
        !pane.screen().contains(SENTINEL_PASSPHRASE),
        "{}",
        pane.screen()
    );
}
