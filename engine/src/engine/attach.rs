//! How a terminal attaches to a session's tmux: the command line a face runs and becomes (the
//! tmux client). On `local` that is `tmux -L <socket> attach-session -t =<session>`; on an SSH
//! machine it is the system OpenSSH client with a PTY (`ssh -t`) running that same tmux
//! command, given the machine's host, port, user, key and known_hosts. The session target is an
//! exact match (`=`), as everywhere else the engine names a tmux session.

use std::time::Duration;

use crate::machine::{AuthType, HostKeyPolicy, Machine};
use crate::records::SessionRecord;
use crate::transport::shell_quote;

/// The command that attaches this terminal to a session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttachPlan {
    /// The program and its arguments.
    pub argv: Vec<String>,
    /// Variables to remove from the environment first (`TMUX`: a tmux client inside another
    /// tmux refuses to nest).
    pub env_remove: Vec<String>,
    /// The OpenSSH client will ask for the machine's password itself (the stored one is never
    /// handed to another program).
    pub asks_password: bool,
}

/// The attach plan for `session` on `machine`. `connect_timeout` bounds ssh's connect
/// (`ConnectTimeout`); the attached session itself runs as long as the person keeps it.
pub fn attach_plan(
    machine: &Machine,
    session: &SessionRecord,
    connect_timeout: Option<Duration>,
) -> AttachPlan {
    // A session in a Slurm allocation: its tmux runs on the allocated node, entered as a job
    // step with a terminal (through the login node on an SSH machine).
    let node_step: Vec<String> = match &session.slurm_job_id {
        Some(job) => crate::slurm::step_words(job)
            .into_iter()
            .chain(["--pty".to_string()])
            .collect(),
        None => Vec::new(),
    };
    let tmux = node_step
        .into_iter()
        .chain(std::iter::once(session.tmux_path.clone()))
        .chain(tmux_attach_args(session));
    if machine.is_local() {
        return AttachPlan {
            argv: tmux.collect(),
            env_remove: vec!["TMUX".to_string()],
            asks_password: false,
        };
    }
    let mut argv = vec!["ssh".to_string()];
    argv.extend(ssh_args(machine, connect_timeout));
    let quoted: Vec<String> = tmux.map(|a| shell_quote(&a)).collect();
    argv.push(format!("exec {}", quoted.join(" ")));
    AttachPlan {
        argv,
        env_remove: Vec::new(),
        asks_password: machine.auth_type == AuthType::Password,
    }
}

fn tmux_attach_args(session: &SessionRecord) -> Vec<String> {
    vec![
        "-L".to_string(),
        session.tmux_socket.clone(),
        "attach-session".to_string(),
        "-t".to_string(),
        format!("={}", session.tmux_session),
    ]
}

/// `-t ... HOST --` for the machine's settings (the remote command follows).
fn ssh_args(machine: &Machine, connect_timeout: Option<Duration>) -> Vec<String> {
    let mut args = vec!["-t".to_string()];
    if let Some(t) = connect_timeout {
        args.extend(["-o".to_string(), format!("ConnectTimeout={}", t.as_secs())]);
    }
    if let Some(config) = std::env::var_os("REMOTE_RUNNER_SSH_CONFIG") {
        args.push("-F".to_string());
        args.push(config.to_string_lossy().into_owned());
    }
    args.extend(["-p".to_string(), machine.port.to_string()]);
    args.extend(["-l".to_string(), machine.user.clone()]);
    let strict = match machine.host_key_policy {
        HostKeyPolicy::Strict => "yes",
        HostKeyPolicy::AcceptNew => "accept-new",
    };
    args.extend(["-o".to_string(), format!("StrictHostKeyChecking={strict}")]);
    if let Some(known) = &machine.known_hosts_file {
        args.extend(["-o".to_string(), format!("UserKnownHostsFile={known}")]);
    }
    if let Some(key) = &machine.key_path
        && machine.auth_type == AuthType::Key
    {
        args.extend(["-i".to_string(), key.clone()]);
    }
    args.extend(["-o".to_string(), "ServerAliveInterval=15".to_string()]);
    args.push(machine.host.clone());
    args.push("--".to_string());
    args
}

#[cfg(test)]
mod tests {
    use super::*;

    fn session() -> SessionRecord {
        serde_json::from_value(serde_json::json!({
            "session_id": "sess_1", "machine_id": "bed", "cwd": "/tmp", "status": "active",
            "backend": "tmux", "created_at": "2026-01-01T00:00:00Z", "log_dir_local": "/l",
            "transcript_file_local": "/l/t", "remote_state_dir": "/tmp/.rr",
            "remote_commands_dir": "/tmp/.rr/c", "remote_transcript_file": "/tmp/.rr/t",
            "tmux_socket": "remote-runner", "tmux_session": "rr-sess_1",
            "tmux_path": "/usr/bin/tmux", "bash_path": "/bin/bash"
        }))
        .unwrap()
    }

    #[test]
    fn ssh_attach_uses_the_machine_settings_a_pty_and_an_exact_target() {
        let machine: Machine = serde_json::from_value(serde_json::json!({
            "machine_id": "bed", "host": "127.0.0.1", "port": 2222, "user": "ely",
            "auth_type": "key", "key_path": "/k/id", "default_cwd": "/tmp",
            "known_hosts_file": "/k/known_hosts"
        }))
        .unwrap();
        let plan = attach_plan(&machine, &session(), None);
        assert_eq!(plan.argv[..2], ["ssh", "-t"]);
        assert!(!plan.asks_password);
        let joined = plan.argv.join(" ");
        for part in [
            "-p 2222",
            "-l ely",
            "-o StrictHostKeyChecking=yes",
            "-o UserKnownHostsFile=/k/known_hosts",
            "-i /k/id",
            "127.0.0.1 --",
        ] {
            assert!(joined.contains(part), "{part} missing in {joined}");
        }
        assert_eq!(
            plan.argv.last().unwrap(),
            "exec /usr/bin/tmux -L remote-runner attach-session -t =rr-sess_1"
        );
        assert!(!joined.contains("ConnectTimeout"));
        let bounded = attach_plan(&machine, &session(), Some(Duration::from_secs(7)));
        assert!(
            bounded.argv.join(" ").contains("-o ConnectTimeout=7"),
            "{bounded:?}"
        );
    }

    #[test]
    fn local_attach_runs_tmux_outside_any_other_tmux() {
        let machine = Machine::local();
        let plan = attach_plan(&machine, &session(), None);
        assert_eq!(
            plan.argv,
            [
                "/usr/bin/tmux",
                "-L",
                "remote-runner",
                "attach-session",
                "-t",
                "=rr-sess_1"
            ]
        );
        assert_eq!(plan.env_remove, ["TMUX"]);
    }

    #[test]
    fn a_slurm_session_is_attached_on_its_node() {
        let machine: Machine = serde_json::from_value(serde_json::json!({
            "machine_id": "hpc", "host": "login", "port": 22, "user": "ely",
            "auth_type": "key", "key_path": "/k/id", "default_cwd": "/home/ely"
        }))
        .unwrap();
        let mut session = session();
        session.slurm_job_id = Some("42".to_string());
        session.tmux_socket = "remote-runner-job42".to_string();
        let plan = attach_plan(&machine, &session, None);
        assert_eq!(
            plan.argv.last().unwrap(),
            "exec srun --jobid=42 --overlap --quiet --pty /usr/bin/tmux -L remote-runner-job42 \
             attach-session -t =rr-sess_1"
        );
    }
}
