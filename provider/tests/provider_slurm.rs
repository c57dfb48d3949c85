//! The provider, unchanged, on a machine scheduled by Slurm (docs/slurm.md): with
//! `REMOTE_RUNNER_MACHINE` naming a Slurm login node (the real sshd test bed, the real Slurm
//! bed), each chat session's shell is an allocation; an allocation cancelled from outside fails
//! the next turn as a lost session, and a resume rebuilds at the next generation in a new
//! allocation, as for a dead tmux server.

#[path = "../../engine/tests/ssh_common/mod.rs"]
mod ssh_common;
mod support;

use std::time::Duration;

use remote_runner_engine::machine::Scheduler;
use remote_runner_engine::store::{Store, machines};
use remote_runner_testkit::Sshd;
use remote_runner_testkit::slurm::{self, wait_for_job_state};
use serde_json::json;
use support::host::{Host, state_of};

const T: Duration = Duration::from_secs(60);

#[test]
fn a_chat_session_runs_in_an_allocation_and_is_rebuilt_in_a_new_one_when_it_ends() {
    if !slurm::slurm_bed_or_skip() {
        return;
    }
    let sshd = Sshd::start().expect("sshd test bed");
    let local = tempfile::tempdir().unwrap();
    let state_dir = local.path().join("state");
    let remote = sshd.remote_dir("provider-slurm").unwrap();
    let mut machine = ssh_common::machine(&sshd, Some(&sshd.keys.ed25519));
    machine.machine_id = "hpc".into();
    machine.scheduler = Scheduler::Slurm {
        args: vec!["--time=10".into()],
    };
    machines::insert(&Store::open(&state_dir).unwrap(), &machine).unwrap();
    let env = vec![
        ("REMOTE_RUNNER_STATE_DIR", state_dir.display().to_string()),
        ("REMOTE_RUNNER_MACHINE", "hpc".to_string()),
        ("REMOTE_RUNNER_REMOTE_CWD", remote.display().to_string()),
        ("SSH_AUTH_SOCK", String::new()),
    ];
    let mut host = Host::spawn(local.path(), &env);
    host.hello();
    let ready = host.start("/host/side/cwd");
    assert_eq!(ready["type"], "ready", "{ready}");
    let state = state_of(&ready);
    assert_eq!(state["generation"], 1);

    let (_, progress, fin) = host.turn(1, "export KEEP=kept; echo $SLURM_JOB_ID; (exit 3)");
    assert!(
        fin["content"].as_str().unwrap().starts_with("exit 3"),
        "{fin}"
    );
    let job = progress.trim().to_string();
    assert!(
        !job.is_empty() && job.chars().all(|c| c.is_ascii_digit()),
        "{progress:?}"
    );
    let (_, progress, _) = host.turn(2, "echo $KEEP");
    assert_eq!(progress, "kept\n");

    // The chat helper works in the allocation: a call is checked against the processes of the
    // node the turn runs on (another host, as far as /proc goes).
    host.send(
        "turn",
        json!({"requestId": "turn:chat", "turnId": "tc",
               "content": "\"$RR_CHAT\" send from-the-node; echo \"sent=$?\""}),
    );
    let ev = host.wait_for(T, |v| v["type"] == "outbound_message");
    assert_eq!(ev["content"], "from-the-node", "{ev}");
    host.send(
        "outbound_message_result",
        json!({"requestId": "omr:1", "operationId": ev["operationId"], "turnId": "tc",
               "generation": ev["generation"],
               "result": {"outcome": "delivered", "messageId": "om_node"}}),
    );
    let fin = host.wait_for(T, |v| v["type"] == "final" || v["type"] == "failure");
    assert_eq!(fin["type"], "final", "{fin}");
    assert!(fin["content"].as_str().unwrap().contains("sent=0"), "{fin}");

    // The allocation is cancelled from outside: the next turn fails, the session is lost.
    let out = std::process::Command::new("scancel")
        .arg(&job)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    wait_for_job_state(&job, |s| s == "CANCELLED" || s.is_empty());
    std::thread::sleep(Duration::from_millis(500));
    let (_, _, fin) = host.turn(3, "echo after");
    assert_eq!(fin["type"], "failure", "{fin}");
    host.send("cancel", json!({"requestId": "c:1"}));
    assert_eq!(host.next_non_screen(T)["status"], "closed");
    drop(host);

    // A new provider resumes: the old session is lost, so it rebuilds at generation 2, in a new
    // allocation.
    let mut host = Host::spawn(local.path(), &env);
    host.hello();
    host.send(
        "resume",
        json!({"requestId": "resume:1", "sessionId": "s", "cwd": "/host/side/cwd", "state": state}),
    );
    let r = host.next_non_screen(T);
    assert_eq!(r["type"], "ready", "{r}");
    assert_eq!(state_of(&r)["generation"], 2, "{r}");
    let (_, progress, _) = host.turn(4, "echo $SLURM_JOB_ID");
    let new_job = progress.trim().to_string();
    assert!(!new_job.is_empty() && new_job != job, "{progress:?}");
    host.send("cancel", json!({"requestId": "c:2"}));
    assert_eq!(host.next_non_screen(T)["status"], "closed");
    drop(host);
    // The chat's session outlives the provider (for a later resume): release it here.
    std::process::Command::new("scancel")
        .arg(&new_job)
        .output()
        .unwrap();
}
