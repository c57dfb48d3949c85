//! The CLI on a real terminal (a tmux pane of a private tmux server is the pseudo-TTY):
//! `session read` never lets remote escape sequences act on the reader's terminal, and
//! `session attach` opens the session (local and over the real sshd), shows its output, takes
//! input, and detaching (Ctrl-b d) leaves it running.

mod common;
mod session_bed;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use session_bed::{Bed, DEADLINE, eventually};

/// A private tmux server (its own socket) running one shell command in a pane.
struct Pane {
    socket: PathBuf,
}

impl Pane {
    fn start(dir: &Path, tag: &str, shell_command: &str) -> Pane {
        let socket = dir.join(format!("{tag}.sock"));
        let status = Command::new("tmux")
            .arg("-S")
            .arg(&socket)
            .args([
                "-f",
                "/dev/null",
                "new-session",
                "-d",
                "-x",
                "160",
                "-y",
                "40",
            ])
            .args(["-s", "t"])
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
        self.tmux(&["capture-pane", "-p", "-t", "t", "-S", "-40"])
    }

    fn wait_for(&self, text: &str) -> String {
        let start = Instant::now();
        loop {
            let screen = self.screen();
            if screen.contains(text) {
                return screen;
            }
            assert!(
                start.elapsed() < DEADLINE,
                "no {text:?} on the screen:\n{screen}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn keys(&self, keys: &[&str]) {
        let mut args = vec!["send-keys", "-t", "t"];
        args.extend_from_slice(keys);
        self.tmux(&args);
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

/// The shell line that runs the CLI in a pane with the bed's environment, then reports its
/// exit code on the screen and keeps the pane open.
fn pane_line(bed: &Bed, args: &str) -> String {
    let ssh_config = bed
        .sshd()
        .map(|s| format!("REMOTE_RUNNER_SSH_CONFIG={}", s.ssh_config.display()))
        .unwrap_or_default();
    format!(
        "env -u SSH_AUTH_SOCK -u NO_COLOR HOME={home} {ssh_config} {bin} --state-dir {state} {args}; \
         echo cli-exit=$?; sleep 120",
        home = bed.sb.home().display(),
        bin = common::BIN,
        state = bed.sb.state_dir().display(),
    )
}

/// Type a line into the session with `session send` and wait until its transcript shows `want`.
fn type_into_session(bed: &Bed, session: &str, input: &str, want: &str) {
    bed.json(&["session", "send", "--session", session, "--input", input]);
    eventually(want, || {
        let v = bed.json(&["session", "read", "--session", session]);
        v["text"].as_str().unwrap().contains(want).then_some(())
    });
}

#[test]
fn session_read_on_a_terminal_neutralizes_escape_sequences() {
    let bed = Bed::local();
    let s = bed.session();
    // The output sets the window title (OSC 2), clears the screen and colours text.
    type_into_session(
        &bed,
        &s,
        r"printf '\033]2;pwned-title\007\033[2J\033[31mansi-done\033[0m\n'",
        "\u{1b}[31mansi-done",
    );
    let pane = Pane::start(
        bed.sb.path(),
        "read",
        &pane_line(&bed, &format!("session read --session {s}")),
    );
    let screen = pane.wait_for("cli-exit=0");
    assert!(screen.contains("^[]2;pwned-title^G"), "{screen}");
    assert!(screen.contains("^[[2J^[[31mansi-done^[[0m"), "{screen}");
    let title = pane.tmux(&["display-message", "-p", "-t", "t", "#{pane_title}"]);
    assert!(!title.contains("pwned"), "the title was changed: {title}");
}

fn attach_shows_the_session_and_detach_leaves_it_running(bed: &Bed) {
    let s = bed.session();
    type_into_session(bed, &s, "echo before-$((20+3))", "before-23");
    let pane = Pane::start(
        bed.sb.path(),
        "attach",
        &pane_line(bed, &format!("session attach --session {s}")),
    );
    pane.wait_for("before-23");

    // What a person types goes to the session's shell.
    pane.keys(&["-l", "echo typed-$((40+2))"]);
    pane.keys(&["Enter"]);
    pane.wait_for("typed-42");
    eventually("the typed line in the transcript", || {
        let v = bed.json(&["session", "read", "--session", &s]);
        v["text"]
            .as_str()
            .unwrap()
            .contains("typed-42")
            .then_some(())
    });

    // Ctrl-b d detaches: the client ends, the session goes on.
    pane.keys(&["C-b", "d"]);
    let screen = pane.wait_for("cli-exit=");
    assert!(screen.contains("cli-exit=0"), "{screen}");
    assert_eq!(
        bed.json(&["session", "show", "--session", &s])["status"],
        "active"
    );
    let v = bed.exec(&s, "echo still-alive", &[]).json();
    assert_eq!(v["stdout"], "still-alive\n");
}
both_machines!(
    attach,
    attach_shows_the_session_and_detach_leaves_it_running
);

#[test]
fn attach_refuses_without_a_terminal() {
    let bed = Bed::local();
    let s = bed.session();
    let r = bed.run(&["session", "attach", "--session", &s, "--json"]);
    assert_eq!(r.code, 2, "{r:?}");
    let err = r.error();
    assert_eq!(err["code"], "invalid_argument");
    assert!(
        err["message"].as_str().unwrap().contains("terminal"),
        "{err}"
    );
}

#[test]
fn exec_on_a_terminal_prints_the_output_then_a_status_line() {
    let bed = Bed::local();
    let s = bed.session();
    let pane = Pane::start(
        bed.sb.path(),
        "exec",
        &pane_line(
            &bed,
            &format!(
                "session exec --session {s} --cmd 'echo visible-out; echo visible-err >&2; (exit 3)'"
            ),
        ),
    );
    let screen = pane.wait_for("cli-exit=");
    assert!(screen.contains("cli-exit=1"), "{screen}");
    let out = screen.find("visible-out").expect("stdout shown");
    let err = screen.find("visible-err").expect("stderr shown");
    let status = screen
        .find("✗ failed · exit 3")
        .unwrap_or_else(|| panic!("{screen}"));
    assert!(out < status && err < status, "{screen}");
}

/// The progress bar is drawn on a terminal (bytes, rate, ETA) and cleared at the end; the
/// pane's raw output, captured with `pipe-pane`, holds what was drawn.
#[test]
fn file_put_on_a_terminal_draws_a_progress_bar() {
    let bed = Bed::local();
    let s = bed.session();
    let local = bed.sb.path().join("big.bin");
    std::fs::write(&local, vec![7u8; 8 << 20]).unwrap();
    let raw = bed.sb.path().join("pane.raw");
    let line = pane_line(
        &bed,
        &format!(
            "file put --session {s} --local {} --remote {}",
            local.display(),
            bed.at("big.bin")
        ),
    );
    // Start the pane on a shell that waits, so pipe-pane is on before the CLI writes.
    let gate = bed.sb.path().join("go");
    let pane = Pane::start(
        bed.sb.path(),
        "bar",
        &format!(
            "while [ ! -e {} ]; do sleep 0.1; done; {line}",
            gate.display()
        ),
    );
    pane.tmux(&[
        "pipe-pane",
        "-t",
        "t",
        "-o",
        &format!("cat >> {}", raw.display()),
    ]);
    std::fs::write(&gate, "").unwrap();
    let screen = pane.wait_for("cli-exit=");
    assert!(screen.contains("cli-exit=0"), "{screen}");
    assert!(screen.contains("succeeded"), "{screen}");
    assert!(
        !screen.contains("ETA"),
        "the bar is cleared at the end: {screen}"
    );
    let drawn = eventually("the pane's raw output", || {
        let text = String::from_utf8_lossy(&std::fs::read(&raw).ok()?).into_owned();
        text.contains("cli-exit=").then_some(text)
    });
    assert!(drawn.contains("8.00 MiB / 8.00 MiB"), "{drawn:?}");
    assert!(drawn.contains("100%"), "{drawn:?}");
    assert!(drawn.contains("/s"), "{drawn:?}");
}

#[test]
fn attach_opens_a_slurm_session_on_its_node() {
    let Some(bed) = Bed::slurm() else { return };
    let work = bed.work_str();
    let created = bed.json(&["session", "create", "--machine", "bed", "--cwd", &work]);
    let s = created["session_id"].as_str().unwrap().to_string();
    let job = created["slurm_job_id"].as_str().unwrap().to_string();
    type_into_session(&bed, &s, "echo node-$SLURM_JOB_ID", &format!("node-{job}"));
    let pane = Pane::start(
        bed.sb.path(),
        "slurm-attach",
        &pane_line(&bed, &format!("session attach --session {s}")),
    );
    pane.wait_for(&format!("node-{job}"));
    pane.keys(&["-l", "echo typed-$((40+2))-$SLURM_JOB_ID"]);
    pane.keys(&["Enter"]);
    pane.wait_for(&format!("typed-42-{job}"));
    pane.keys(&["C-b", "d"]);
    let screen = pane.wait_for("cli-exit=");
    assert!(screen.contains("cli-exit=0"), "{screen}");
    let v = bed.exec(&s, "echo still-alive", &[]).json();
    assert_eq!(v["stdout"], "still-alive\n");
    bed.json(&["session", "destroy", "--session", &s]);
}
