//! An engine that reaches machines itself, for a long-lived face (the BotMux provider): SSH
//! connections are pooled in the process (no connection keeper), `local` is this host, and one
//! machine may be given without a store record (the provider's `REMOTE_RUNNER_HOST` settings).

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use super::{Engine, EngineOptions};
use crate::connect::MachineConnector;
use crate::error::Result;
use crate::machine::Machine;
use crate::ssh::{ConnectOptions, PassphraseSource};

/// The machines an engine opened with [`Engine::open_direct`] reaches.
#[derive(Clone)]
pub struct DirectMachines {
    connector: Arc<MachineConnector>,
}

impl std::fmt::Debug for DirectMachines {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DirectMachines").finish_non_exhaustive()
    }
}

impl DirectMachines {
    /// The machine record for an id: the built-in `local`, the one given to
    /// [`Engine::open_direct`], or the store's (an `unknown_machine` error otherwise).
    pub fn machine(&self, machine_id: &str) -> Result<Machine> {
        self.connector.machine(machine_id)
    }
}

/// What a face chooses when it opens an engine that reaches machines itself.
#[derive(Debug, Clone, Default)]
pub struct DirectOptions {
    /// A machine reachable by its id without a store record (the provider's
    /// `REMOTE_RUNNER_HOST` settings, seed-runner's ssh_config alias).
    pub adhoc: Option<Machine>,
    /// Bound on each connection attempt (default: the SSH layer's).
    pub connect_timeout: Option<Duration>,
    /// Ask for an encrypted key's passphrase on the terminal when stdin is one (a CLI run by a
    /// person); never for a face whose stdin is a protocol.
    pub prompt_passphrase: bool,
}

impl Engine {
    /// Open the engine on `state_dir` with default options, reaching machines directly: SSH
    /// connections kept for this engine's life (no connection keeper), `local` on this host,
    /// registered machines with their stored credentials, and `options.adhoc` by its id.
    pub fn open_direct(
        state_dir: &Path,
        options: DirectOptions,
    ) -> Result<(Engine, DirectMachines)> {
        let mut connect = ConnectOptions {
            passphrase: if options.prompt_passphrase && std::io::stdin().is_terminal() {
                PassphraseSource::Tty
            } else {
                PassphraseSource::Never
            },
            ..ConnectOptions::default()
        };
        if let Some(t) = options.connect_timeout {
            connect.connect_timeout = Some(t);
        }
        let mut connector = MachineConnector::new(state_dir.to_path_buf(), connect);
        if let Some(machine) = options.adhoc {
            connector = connector.with_machine(machine);
        }
        let connector = Arc::new(connector);
        let engine = Engine::with_options(state_dir, connector.clone(), EngineOptions::default())?;
        Ok((engine, DirectMachines { connector }))
    }
}

/// The state directory every face shares unless told otherwise: `~/.remote-runner`.
pub fn default_state_dir() -> Option<PathBuf> {
    crate::store::default_state_dir()
}
