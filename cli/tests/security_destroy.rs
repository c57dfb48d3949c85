//! `session destroy` tells the truth (issue 21): `destroyed` only when the remote shell is known
//! gone. A changed host key or a stopped sshd is an error naming what was not done, and the session stays active for a retry; `--force` marks it destroyed here and says
//! the remote may still run. Against the real OpenSSH test bed and real tmux.

mod common;

use std::process::Command;

use common::{Run, Sandbox};
use remote_runner_testkit::{Sshd, TEST_USER};
use serde_json::Value;

struct Bed {
    sb: Sandbox,
    sshd: Sshd,
    work: String,
}

impl Bed {
    fn start() -> Bed {
        let sshd =
            Sshd::start().unwrap_or_else(|e| panic!("cannot start the sshd test bed: {e:#}"));
        let work = sshd
            .remote_dir("work")
            .unwrap()
            .to_str()
            .unwrap()
            .to_string();
        let bed = Bed {
            sb: Sandbox::new(),
            sshd,
            work,
        };
        bed.add_machine();
        bed
    }

    fn run(&self, args: &[&str]) -> Run {
        let mut cmd = self.sb.command(args);
        cmd.env_remove("SSH_AUTH_SOCK")
            .env("REMOTE_RUNNER_SSH_CONFIG", &self.sshd.ssh_config);
        common::run_command(cmd, None)
    }

    fn ok(&self, args: &[&str]) -> Value {
        let mut all = args.to_vec();
        all.push("--json");
        let r = self.run(&all);
        assert_eq!(r.code, 0, "{args:?}: {r:?}");
        r.json()
    }

    fn add_machine(&self) {
        let port = self.sshd.port.to_string();
        self.ok(&[
            "machine",
            "add",
            "bed",
            "--host",
            "127.0.0.1",
            "--port",
            &port,
            "--user",
            TEST_USER,
            "--key-path",
            self.sshd.keys.ed25519.to_str().unwrap(),
            "--known-hosts-file",
            self.sshd.known_hosts.to_str().unwrap(),
            "--default-cwd",
            &self.work,
        ]);
    }

    fn create(&self) -> Value {
        self.ok(&["session", "create", "--machine", "bed"])
    }

    fn status(&self, session: &Value) -> String {
        let id = session["session_id"].as_str().unwrap();
        self.ok(&["session", "show", "--session", id])["status"]
            .as_str()
            .unwrap()
            .to_string()
    }

    /// `session destroy` must fail with `code`, keep the session active and name the way out.
    fn destroy_refused(&self, session: &Value, code: &str) {
        let id = session["session_id"].as_str().unwrap();
        let r = self.run(&["session", "destroy", "--session", id, "--json"]);
        assert_ne!(r.code, 0, "{r:?}");
        let err = r.error();
        assert_eq!(err["code"], code, "{err}");
        let message = err["message"].as_str().unwrap();
        assert!(message.contains("was not destroyed"), "{message}");
        assert!(message.contains("--force"), "{message}");
        assert_eq!(self.status(session), "active", "kept for a retry");
        assert!(tmux_alive(session), "the remote shell still runs");
    }
}

/// Whether the session's tmux session exists on the machine (this host, as the login user).
fn tmux_alive(session: &Value) -> bool {
    Command::new("runuser")
        .args(["-u", TEST_USER, "--", "tmux", "-L"])
        .arg(session["tmux_socket"].as_str().unwrap())
        .arg("has-session")
        .arg("-t")
        .arg(format!("={}", session["tmux_session"].as_str().unwrap()))
        .status()
        .unwrap()
        .success()
}

fn kill_tmux(session: &Value) {
    let _ = Command::new("runuser")
        .args(["-u", TEST_USER, "--", "tmux", "-L"])
        .arg(session["tmux_socket"].as_str().unwrap())
        .arg("kill-session")
        .arg("-t")
        .arg(format!("={}", session["tmux_session"].as_str().unwrap()))
        .status();
}

#[test]
fn a_changed_host_key_refuses_destroy_until_the_key_is_back_then_it_ends_the_shell() {
    let bed = Bed::start();

    // A changed host key: not reached, nothing destroyed; with the key back, the retry works.
    let session = bed.create();
    assert!(tmux_alive(&session));
    let good_known_hosts = std::fs::read_to_string(&bed.sshd.known_hosts).unwrap();
    let impostor =
        remote_runner_testkit::generate_public_key(bed.sb.path(), "impostor_host_key").unwrap();
    std::fs::write(
        &bed.sshd.known_hosts,
        format!("[127.0.0.1]:{} {impostor}\n", bed.sshd.port),
    )
    .unwrap();
    bed.destroy_refused(&session, "host_key_changed");
    std::fs::write(&bed.sshd.known_hosts, good_known_hosts).unwrap();
    let id = session["session_id"].as_str().unwrap();
    let done = bed.ok(&["session", "destroy", "--session", id]);
    assert_eq!(done["status"], "destroyed");
    assert_eq!(done["remote_may_still_run"], false);
    assert!(!tmux_alive(&session), "the remote shell is gone");

    // (A machine with active sessions cannot be removed: `machine remove` refuses, or with
    // --force destroys them first through this same destroy.)
}

#[test]
fn a_stopped_sshd_refuses_destroy_and_force_marks_it_destroyed_with_a_warning() {
    let bed = Bed::start();
    let session = bed.create();
    let id = session["session_id"].as_str().unwrap();
    stop_sshd(&bed);
    bed.destroy_refused(&session, "connection_failed");

    let forced = bed.ok(&["session", "destroy", "--session", id, "--force"]);
    assert_eq!(forced["status"], "destroyed");
    assert_eq!(forced["remote_may_still_run"], true);
    let warning = forced["warning"].as_str().unwrap();
    assert!(warning.contains("may still run"), "{warning}");
    assert_eq!(bed.status(&session), "destroyed");

    let human = bed.run(&["session", "destroy", "--session", id]);
    assert_eq!(human.code, 0, "destroying again is idempotent: {human:?}");
    assert!(
        tmux_alive(&session),
        "as the warning said, the shell still runs"
    );
    kill_tmux(&session);
}

#[test]
fn force_prints_the_warning_in_human_mode() {
    let bed = Bed::start();
    let session = bed.create();
    let id = session["session_id"].as_str().unwrap();
    stop_sshd(&bed);
    let human = bed.run(&["session", "destroy", "--session", id, "--force"]);
    assert_eq!(human.code, 0, "{human:?}");
    assert!(
        human.stdout.contains("warning: marked destroyed here only"),
        "{human:?}"
    );
    kill_tmux(&session);
}

const SIGKILL: i32 = 9;
const SIGSTOP: i32 = 19;

/// Stop sshd and its open connections (the CLI's connection keeper holds one): frozen first so
/// no connection starts meanwhile, then killed while the connections are still its children.
fn stop_sshd(bed: &Bed) {
    assert!(bed.sshd.signal_listener(SIGSTOP), "sshd frozen");
    bed.sshd.signal_connections(SIGKILL);
    assert!(bed.sshd.signal_listener(SIGKILL), "sshd stopped");
}
