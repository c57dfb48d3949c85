//! A machine as seen by a face that keeps files of its own there (seed-runner's mount sync):
//! run a shell script and read its output and exit status, look at a path, make a directory,
//! remove a file. Outside any session: these are calls on the machine, not commands in a shell.
//!
//! Such a face opens its engine with [`Engine::open`] without a keeper (it connects to each
//! machine itself), and [`machine_or_ssh_alias`] resolves a `--machine` that may be an
//! ssh_config `Host` alias rather than a registered machine.

use std::path::Path;
use std::sync::Arc;

use crate::error::{Error, ErrorCode, Result};
use crate::machine::Machine;
use crate::remote::Remote;
use crate::store::{self, Store};
use crate::transport::ExecOptions;

use super::Engine;

pub use crate::transport::{ExecOutput, ExitStatus, FileKind, FileStat, shell_quote};

/// One machine, connected. Cheap to clone; every call goes over the engine's connection to it.
#[derive(Clone)]
pub struct Host {
    machine_id: String,
    transport: Arc<Remote>,
}

impl std::fmt::Debug for Host {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Host")
            .field("machine_id", &self.machine_id)
            .finish()
    }
}

impl Engine {
    /// The machine `machine_id`, connected (the connection the engine keeps for it, or a new
    /// one). Errors: the connection's (`connection_failed`, `auth_failed`, `unknown_machine`,
    /// ...).
    pub async fn host(&self, machine_id: &str) -> Result<Host> {
        Ok(Host {
            machine_id: machine_id.to_string(),
            transport: self.connector.connect(machine_id).await?,
        })
    }
}

/// The machine a face's `--machine` names: `local`, a machine registered with `remote-runner
/// machine add`, or else an ssh_config `Host` alias (`REMOTE_RUNNER_SSH_CONFIG`, or
/// `~/.ssh/config`). Errors: `unknown_machine` when it is neither (the message lists the
/// registered ids and says to add a `Host` entry); `config_invalid` when the ssh_config cannot
/// be read; the store's errors.
pub fn machine_or_ssh_alias(state_dir: &Path, machine_id: &str) -> Result<Machine> {
    let st = Store::open(state_dir)?;
    match store::machines::resolve(&st, machine_id) {
        Err(e) if e.code == ErrorCode::UnknownMachine => {
            match super::machine_from_ssh_alias(machine_id, None)? {
                Some(m) => Ok(m),
                None => Err(Error::new(
                    ErrorCode::UnknownMachine,
                    format!(
                        "{}; or add a `Host {machine_id}` entry to your ssh_config",
                        e.message
                    ),
                )),
            }
        }
        other => other,
    }
}

impl Host {
    pub fn machine_id(&self) -> &str {
        &self.machine_id
    }

    /// Run `script` (POSIX sh) in the login user's home, `stdin` written to it then closed
    /// (empty: closed at once, and the call may run on a kept control process rather than a
    /// channel of its own). Bounded to 60 s; up to 8 MiB of each output stream is kept. A
    /// failing script is `Ok` with its status; `Err` is the link's or the machine's failure.
    pub async fn run(&self, script: &str, stdin: &[u8]) -> Result<ExecOutput> {
        let options = ExecOptions {
            stdin: (!stdin.is_empty()).then(|| stdin.to_vec()),
            ..ExecOptions::default()
        };
        self.transport.exec(script, options).await
    }

    /// What is at `path` (not following a final symlink), or `None` when nothing is.
    pub async fn stat(&self, path: &str) -> Result<Option<FileStat>> {
        self.transport.stat(path).await
    }

    /// `mkdir -p` with `mode` for the directories it makes.
    pub async fn create_dir_all(&self, path: &str, mode: u32) -> Result<()> {
        self.transport.create_dir_all(path, mode).await
    }

    /// Remove a file (`remote_not_found` when there is none).
    pub async fn remove_file(&self, path: &str) -> Result<()> {
        self.transport.remove_file(path).await
    }
}
