//! What a user can do about an error, as data.
//!
//! An engine error's message says what failed in words every face can show; when there is a
//! next step, the error names it as a [`Hint`]. Each face renders the hint in its own words:
//! the CLI as one of its commands, the provider as a setting or as the CLI beside it. So no
//! engine message names a face's command, and a BotMux user is not told to type a CLI flag
//! the provider has no use for.
//!
//! Hints are data: they cross the keeper's socket and are kept in stored records (a run's or a
//! transfer's error), so variants are added, never renamed.

use serde::{Deserialize, Serialize};

/// The next step that fixes or explains an error.
///
/// `#[non_exhaustive]`: a face's `match` that words each hint needs a fallback arm for hints
/// added later; [`Hint::kind`] names any hint.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
#[non_exhaustive]
pub enum Hint {
    /// The sessions there are can be listed.
    ListSessions,
    /// A session's commands can be listed.
    ListCommands { session_id: String },
    /// A command holds the session: wait for it or stop it.
    WaitOrStopCommand {
        session_id: String,
        command_id: String,
    },
    /// A command could not be stopped and may still run: stop it again.
    StopCommand {
        session_id: String,
        command_id: String,
    },
    /// An interactive program holds the session's terminal: end it first.
    EndTerminalProgram { session_id: String },
    /// The runs there are can be listed.
    ListRuns,
    /// The transfers there are can be listed.
    ListTransfers,
    /// The failed transfer was recorded and can be looked at.
    ShowTransfer { transfer_id: String },
    /// A remote directory can be listed to find the right path.
    ListRemoteDir { path: String },
    /// An unknown host key can be accepted once verified, by policy or by recording it.
    AcceptHostKey {
        host: String,
        port: u16,
        known_hosts: String,
        /// The machine whose connection met the key, when known (its policy can be changed).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        machine_id: Option<String>,
    },
    /// A machine's default working directory can be changed.
    ChangeDefaultCwd { machine_id: String },
    /// Whether Slurm answers on a machine can be checked.
    CheckSlurm { machine_id: Option<String> },
    /// A Slurm allocation may succeed with fewer resources or a longer wait.
    ShrinkOrWaitLonger,
    /// A machine can be marked as scheduled by Slurm.
    ConfigureSlurm { machine_id: String },
    /// A session whose shell could not be ended can be marked destroyed locally only.
    ForceDestroy { session_id: String },
    /// The stored passwords are unreadable: add them again.
    AddPasswordsAgain,
    /// A machine id is unknown: add the machine.
    AddMachine { machine_id: String },
    /// A machine id is taken: replace the machine, explicitly.
    ReplaceMachine { machine_id: String },
    /// The background connections are in an unexpected state: end them and retry.
    ResetConnections,
}

impl Hint {
    /// The hint's stable snake_case name, its `kind` in JSON (`list_sessions`, ...): what a
    /// face that does not know a newer hint can still show.
    ///
    /// ```
    /// use remote_runner_engine::hint::Hint;
    ///
    /// assert_eq!(Hint::ListSessions.kind(), "list_sessions");
    /// let hint = Hint::ForceDestroy { session_id: "s1".into() };
    /// assert_eq!(hint.kind(), "force_destroy");
    /// ```
    pub fn kind(&self) -> String {
        serde_json::to_value(self)
            .ok()
            .and_then(|v| v.get("kind").and_then(|k| k.as_str()).map(str::to_string))
            .unwrap_or_default()
    }
}

/// `s` as one word of a POSIX shell command line, for a face that shows a command to run
/// (quoted only when needed, the engine's own quoting).
pub fn shell_word(s: &str) -> String {
    crate::shell::shell_quote(s)
}

/// The OpenSSH command that records a host's key in `known_hosts` (for a face's
/// [`Hint::AcceptHostKey`]; it is OpenSSH's, not a face's).
pub fn keyscan_command(host: &str, port: u16, known_hosts: &str) -> String {
    let port = if port == 22 {
        String::new()
    } else {
        format!("-p {port} ")
    };
    format!(
        "ssh-keyscan {port}{} >> {}",
        shell_word(host),
        shell_word(known_hosts)
    )
}
