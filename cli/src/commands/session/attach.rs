//! `session attach`: the session's tmux in this terminal.
//!
//! The process becomes the tmux client (`exec`), so the terminal, signals and the exit status
//! belong to tmux; detaching (Ctrl-b d) ends the client and leaves the session running. On
//! `local` that is `tmux -L <socket> attach-session -t <session>`; on an SSH machine it is the
//! system OpenSSH client with a PTY (`ssh -t`) running that same tmux command, given the
//! machine's host, port, user, key and known_hosts. The OpenSSH client authenticates with keys
//! or ssh-agent; for a password machine it asks for the password itself (remote-runner never
//! hands its stored password to another program).

use std::io::IsTerminal;
use std::os::unix::process::CommandExt;
use std::process::Command;

use remote_runner_provider::engine::{SessionRecord, SessionStatus};
use remote_runner_provider::machine::{AuthType, HostKeyPolicy, Machine};
use remote_runner_provider::transport::shell_quote;
use remote_runner_provider::{Error, ErrorCode, Result};

use super::SessionArg;
use crate::context::Context;
use crate::output::Report;

pub fn attach(ctx: &Context, args: SessionArg) -> Result<Report> {
    if !std::io::stdin().is_terminal() || !std::io::stdout().is_terminal() {
        return Err(Error::invalid(format!(
            "session attach needs a terminal (stdin and stdout must be a TTY); run it from an \
             interactive shell. To follow the session from a script use `remote-runner session \
             read --session {} --json`",
            args.session
        )));
    }
    let wired = ctx.engine()?;
    let session = wired.engine.session_show(&args.session)?;
    if session.status != SessionStatus::Active {
        return Err(Error::new(
            ErrorCode::SessionLost,
            format!(
                "session {} is {}; only an active session can be attached. Its transcript is \
                 still readable: remote-runner session read --session {}",
                session.session_id,
                session.status.as_str(),
                session.session_id
            ),
        ));
    }
    let machine = wired.machine(&session.machine_id)?;
    let mut command = if machine.is_local() {
        let mut c = Command::new(&session.tmux_path);
        c.args(tmux_attach_args(&session));
        // Inside another tmux, the client would refuse to nest without this.
        c.env_remove("TMUX");
        c
    } else {
        if machine.auth_type == AuthType::Password {
            ctx.out.note(&format!(
                "machine {} uses a password: ssh will ask for it (remote-runner never passes its \
                 stored password to another program; add a key to attach without typing it)",
                machine.machine_id
            ));
        }
        let mut c = Command::new("ssh");
        c.args(ssh_args(&machine, &session, ctx.timeout));
        c
    };
    let program = command.get_program().to_string_lossy().into_owned();
    let err = command.exec();
    let hint = if machine.is_local() {
        "is tmux still installed? (apt-get install tmux)"
    } else {
        "attaching to an SSH machine needs the OpenSSH client: apt-get install openssh-client"
    };
    Err(Error::io(format!("cannot run {program}; {hint}"), &err))
}

fn tmux_attach_args(session: &SessionRecord) -> Vec<String> {
    vec![
        "-L".to_string(),
        session.tmux_socket.clone(),
        "attach-session".to_string(),
        "-t".to_string(),
        session.tmux_session.clone(),
    ]
}

/// `ssh -t ... -- 'exec tmux -L S attach-session -t N'` for the machine's settings.
/// `timeout` (`--timeout`) bounds the connect (`ConnectTimeout`); the attached session itself
/// runs as long as the person keeps it.
fn ssh_args(
    machine: &Machine,
    session: &SessionRecord,
    timeout: Option<std::time::Duration>,
) -> Vec<String> {
    let mut args = vec!["-t".to_string()];
    if let Some(t) = timeout {
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
    // A session in a Slurm allocation: its tmux runs on the allocated node, entered through
    // the login node as a step with a terminal.
    let node_step: Vec<String> = match &session.slurm_job_id {
        Some(job) => remote_runner_provider::slurm::step_words(job)
            .into_iter()
            .chain(["--pty".to_string()])
            .collect(),
        None => Vec::new(),
    };
    let tmux: Vec<String> = node_step
        .iter()
        .map(String::as_str)
        .chain(std::iter::once(session.tmux_path.as_str()))
        .chain(tmux_attach_args(session).iter().map(String::as_str))
        .map(shell_quote)
        .collect();
    args.push(format!("exec {}", tmux.join(" ")));
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
    fn ssh_attach_uses_the_machine_settings_and_a_pty() {
        let machine: Machine = serde_json::from_value(serde_json::json!({
            "machine_id": "bed", "host": "127.0.0.1", "port": 2222, "user": "ely",
            "auth_type": "key", "key_path": "/k/id", "default_cwd": "/tmp",
            "known_hosts_file": "/k/known_hosts"
        }))
        .unwrap();
        let args = ssh_args(&machine, &session(), None);
        assert_eq!(args[0], "-t");
        let joined = args.join(" ");
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
            args.last().unwrap(),
            "exec /usr/bin/tmux -L remote-runner attach-session -t rr-sess_1"
        );
        assert!(!joined.contains("ConnectTimeout"));
        let bounded = ssh_args(
            &machine,
            &session(),
            Some(std::time::Duration::from_secs(7)),
        );
        assert!(
            bounded.join(" ").contains("-o ConnectTimeout=7"),
            "{bounded:?}"
        );
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
        let args = ssh_args(&machine, &session, None);
        assert_eq!(
            args.last().unwrap(),
            "exec srun --jobid=42 --overlap --quiet --pty /usr/bin/tmux -L remote-runner-job42 \
             attach-session -t rr-sess_1"
        );
    }
}
