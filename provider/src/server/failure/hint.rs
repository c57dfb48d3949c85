//! The engine's hints in the provider's words. A BotMux user acts through the chat (a new
//! turn, a cancel, the terminal) and the provider's `REMOTE_RUNNER_*` settings; for records the
//! provider shares its state dir with the `remote-runner` CLI, so a hint may name the CLI as
//! the way to look.

use remote_runner_engine::error::{Error, Hint};
use remote_runner_engine::hint::keyscan_command;

/// An error's message followed by its hint, as a `failure` event carries it.
pub fn message(err: &Error) -> String {
    match &err.hint {
        Some(hint) => format!("{}; {}", err.message, text(hint)),
        None => err.message.clone(),
    }
}

/// The next step, in terms a BotMux user can act on.
pub fn text(hint: &Hint) -> String {
    match hint {
        Hint::ListSessions => {
            "start a new chat session (its records are listed by `remote-runner session list`)"
                .into()
        }
        Hint::ListCommands { session_id } => {
            format!("`remote-runner session command list --session {session_id}` lists them")
        }
        Hint::WaitOrStopCommand { .. } => {
            "wait for the turn to end, or cancel it, before the next one".into()
        }
        Hint::StopCommand {
            session_id,
            command_id,
        } => format!(
            "cancel the turn again, or stop it with `remote-runner session command stop \
             --session {session_id} --command-id {command_id}`"
        ),
        Hint::EndTerminalProgram { .. } => {
            "end it from the terminal (type exit, or Ctrl-C) before the next turn".into()
        }
        Hint::ListRuns => "`remote-runner run list` lists the runs".into(),
        Hint::ListTransfers => "`remote-runner file history` lists the transfers".into(),
        Hint::ShowTransfer { transfer_id } => {
            format!("`remote-runner file history` shows it ({transfer_id})")
        }
        Hint::ListRemoteDir { path } => format!("list {path} to find the right name"),
        Hint::AcceptHostKey {
            host,
            port,
            known_hosts,
            ..
        } => format!(
            "once verified, record it with `{}` and restart the session",
            keyscan_command(host, *port, known_hosts)
        ),
        Hint::ChangeDefaultCwd { .. } => {
            "set REMOTE_RUNNER_REMOTE_CWD, or change the machine's default_cwd".into()
        }
        Hint::CheckSlurm { machine_id } => format!(
            "`remote-runner machine doctor {}` checks it",
            machine_id.as_deref().unwrap_or("MACHINE_ID")
        ),
        Hint::ShrinkOrWaitLonger => "ask for fewer resources in the machine's Slurm \
             arguments, or try again later"
            .into(),
        Hint::ConfigureSlurm { machine_id } => format!(
            "mark the machine as scheduled by Slurm with `remote-runner machine \
             configure-scheduler {machine_id} --scheduler slurm`"
        ),
        Hint::ForceDestroy { session_id } => format!(
            "`remote-runner session destroy --session {session_id} --force` marks it destroyed \
             locally"
        ),
        Hint::AddPasswordsAgain => "add them again with `remote-runner machine add ID \
             --replace --confirm-replace ID --auth password`"
            .into(),
        Hint::AddMachine { machine_id } => format!(
            "add it with `remote-runner machine add {machine_id} ...`, or set \
             REMOTE_RUNNER_MACHINE to a known one"
        ),
        Hint::ReplaceMachine { machine_id } => format!(
            "`remote-runner machine add {machine_id} --replace --confirm-replace {machine_id} \
             ...` overwrites it"
        ),
        Hint::ResetConnections => "restart the session".into(),
        // A hint newer than this provider: its name still says what to do.
        other => format!("next step: {}", other.kind().replace('_', " ")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use remote_runner_engine::error::ErrorCode;

    #[test]
    fn a_hint_follows_the_message_in_the_providers_words() {
        let err = Error::new(ErrorCode::Busy, "session s1 is running command c1").with_hint(
            Hint::WaitOrStopCommand {
                session_id: "s1".into(),
                command_id: "c1".into(),
            },
        );
        let text = message(&err);
        assert!(
            text.starts_with("session s1 is running command c1; "),
            "{text}"
        );
        assert!(text.contains("cancel it"), "{text}");
        assert!(
            !text.contains("command wait"),
            "no CLI flags for a chat user: {text}"
        );
    }
}
