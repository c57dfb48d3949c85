//! The engine's hints in the CLI's words: each names the `remote-runner` command that takes the
//! next step.

use remote_runner_engine::Error;
use remote_runner_engine::error::Hint;
use remote_runner_engine::hint::{keyscan_command, shell_word};

/// An error's message followed by its hint, as the CLI shows it.
pub fn message(err: &Error) -> String {
    with_hint(&err.message, err.hint.as_ref())
}

/// `message`, then `hint` in the CLI's words when there is one.
pub fn with_hint(message: &str, hint: Option<&Hint>) -> String {
    match hint {
        Some(hint) => format!("{message}; {}", text(hint)),
        None => message.to_string(),
    }
}

/// The next step, naming the command that takes it.
pub fn text(hint: &Hint) -> String {
    match hint {
        Hint::ListSessions => "list sessions with `remote-runner session list`".into(),
        Hint::ListCommands { session_id } => {
            format!("list them with `remote-runner session command list --session {session_id}`")
        }
        Hint::WaitOrStopCommand {
            session_id,
            command_id,
        } => format!(
            "wait for it (`remote-runner session command wait --session {session_id} \
             --command-id {command_id}`) or stop it (`remote-runner session command stop \
             --session {session_id} --command-id {command_id}`), or use another session"
        ),
        Hint::StopCommand {
            session_id,
            command_id,
        } => format!(
            "stop it with `remote-runner session command stop --session {session_id} \
             --command-id {command_id}`"
        ),
        Hint::EndTerminalProgram { session_id } => format!(
            "end it first, e.g. `remote-runner session send --session {session_id} --input \
             exit`, or send Ctrl-C"
        ),
        Hint::ListRuns => "list runs with `remote-runner run list`".into(),
        Hint::ListTransfers => "list them with `remote-runner file history`".into(),
        Hint::ShowTransfer { transfer_id } => {
            format!("see it with `remote-runner file history` ({transfer_id})")
        }
        Hint::ListRemoteDir { path } => format!(
            "check the name with `remote-runner file list --session SESSION --remote {}`",
            quote_arg(path)
        ),
        Hint::AcceptHostKey {
            host,
            port,
            known_hosts,
            machine_id,
        } => match machine_id {
            Some(id) => format!(
                "once verified, accept it with `{}` (or record it with `{}`)",
                accept_new_command(id),
                keyscan_command(host, *port, known_hosts)
            ),
            None => format!(
                "once verified, record it with `{}`",
                keyscan_command(host, *port, known_hosts)
            ),
        },
        Hint::ChangeDefaultCwd { machine_id } => format!(
            "change it with `remote-runner machine add {machine_id} --replace --confirm-replace \
             {machine_id} ... --default-cwd DIR`"
        ),
        Hint::CheckSlurm { machine_id } => format!(
            "check it with `remote-runner machine doctor {}`",
            machine_id.as_deref().unwrap_or("MACHINE_ID")
        ),
        Hint::ShrinkOrWaitLonger => {
            "ask for fewer resources (--slurm-args), or allow a longer wait with --timeout".into()
        }
        Hint::ConfigureSlurm { machine_id } => format!(
            "--slurm-args needs a Slurm machine: mark it with `remote-runner machine \
             configure-scheduler {machine_id} --scheduler slurm`"
        ),
        Hint::ForceDestroy { session_id } => format!(
            "to mark it destroyed here only, run `remote-runner session destroy --session \
             {session_id} --force`"
        ),
        Hint::AddPasswordsAgain => "add them with `remote-runner machine add ID --replace \
             --confirm-replace ID --auth password`"
            .into(),
        Hint::AddMachine { machine_id } => format!(
            "add it with `remote-runner machine add {machine_id} --host HOST --user USER \
             --default-cwd DIR`"
        ),
        Hint::ReplaceMachine { machine_id } => format!(
            "to overwrite it run `remote-runner machine add {machine_id} --replace \
             --confirm-replace {machine_id} ...`"
        ),
        Hint::ResetConnections => "run `remote-runner machine disconnect --all` and retry".into(),
        // A hint newer than this CLI: its name still says what to do (and `--json` has it as
        // data).
        other => format!("next step: {}", other.kind().replace('_', " ")),
    }
}

/// The command that turns on accept-new for a stored machine and keeps every other field (a
/// `--replace` without them keeps the stored values, the password included).
pub fn accept_new_command(machine_id: &str) -> String {
    let id = shell_word(machine_id);
    format!("remote-runner machine add {id} --replace --confirm-replace {id} --accept-new")
}

/// A path as one shell word: bare when it is plainly safe, single-quoted otherwise.
fn quote_arg(path: &str) -> String {
    let plain = !path.is_empty()
        && path
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"/._-~+,:@".contains(&b));
    if plain {
        path.to_string()
    } else {
        format!("'{}'", path.replace('\'', r"'\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use remote_runner_engine::error::ErrorCode;

    #[test]
    fn a_hint_follows_the_message_in_the_clis_words() {
        let err =
            Error::new(ErrorCode::UnknownSession, "no session s1").with_hint(Hint::ListSessions);
        assert_eq!(
            message(&err),
            "no session s1; list sessions with `remote-runner session list`"
        );
        let plain = Error::new(ErrorCode::Timeout, "too slow");
        assert_eq!(message(&plain), "too slow");
    }

    #[test]
    fn a_remote_path_in_a_hint_is_one_shell_word() {
        assert_eq!(quote_arg("/srv/data"), "/srv/data");
        assert_eq!(quote_arg("/srv/it's here"), r"'/srv/it'\''s here'");
    }
}
