//! Opening the engine on real machines: what a face chooses (connection keepers, how a key's
//! passphrase is obtained, the connect bound), never how machines are reached.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use super::code::{CodeConfig, CodeRuntime};
use super::{Connector, Engine, EngineOptions, SessionRecord};
use crate::connect::MachineConnector;
use crate::error::{Error, ErrorCode, Result};
use crate::keeper::{self, KeeperConnector};
use crate::machine::Machine;
use crate::secret::Secret;
use crate::ssh::{ConnectOptions, PassphraseSource};

/// Where the passphrase of an encrypted key file comes from.
#[derive(Debug, Clone, Default)]
pub enum KeyPassphrase {
    /// Asked on the controlling terminal (`/dev/tty`), only when there is one.
    AskOnTerminal,
    /// This passphrase.
    Given(Secret),
    /// Never asked: encrypted keys are skipped (the auth error says so).
    #[default]
    Never,
}

impl KeyPassphrase {
    pub(crate) fn source(&self) -> PassphraseSource {
        match self {
            KeyPassphrase::AskOnTerminal => PassphraseSource::Tty,
            KeyPassphrase::Given(secret) => PassphraseSource::Given(secret.clone()),
            KeyPassphrase::Never => PassphraseSource::Never,
        }
    }
}

/// What a face chooses when it opens the engine ([`Engine::open`]).
#[derive(Debug, Clone, Default)]
pub struct OpenOptions {
    /// Reach SSH machines through connection keepers: one background process per machine that
    /// keeps its connection between calls (docs/architecture.md). A missing keeper is started
    /// as `THIS_PROGRAM --state-dir DIR keeper-daemon --machine ID --idle-secs N`, which must
    /// call [`serve_keeper`]. `REMOTE_RUNNER_KEEPER=off` turns keepers off, and
    /// `REMOTE_RUNNER_KEEPER_IDLE` sets their idle time in seconds (a malformed value is
    /// `config_invalid`).
    pub keeper: bool,
    /// How an encrypted key's passphrase is obtained.
    pub passphrase: KeyPassphrase,
    /// Bound on an SSH connect (TCP, key exchange and login); ssh_config's `ConnectTimeout`
    /// when `None`.
    pub connect_timeout: Option<Duration>,
    /// A machine reachable by its id without a store record (the provider's
    /// `REMOTE_RUNNER_HOST` settings, seed-runner's ssh_config alias); [`Engine::machine`]
    /// returns it.
    pub adhoc: Option<Machine>,
    /// The engine's tunables.
    pub engine: EngineOptions,
}

/// The state dir when none is given: `~/.remote-runner`, shared by the CLI and the provider;
/// `None` when the home directory is unknown.
pub fn default_state_dir() -> Option<PathBuf> {
    crate::store::default_state_dir()
}

impl Engine {
    /// Open the engine on `state_dir` (created 0700) over real machines: `local` on this host,
    /// every stored machine over SSH with its stored password, and [`OpenOptions::adhoc`].
    pub fn open(state_dir: &Path, options: OpenOptions) -> Result<Engine> {
        let connect = ConnectOptions {
            passphrase: options.passphrase.source(),
            connect_timeout: options.connect_timeout,
            ..ConnectOptions::default()
        };
        let mut direct = MachineConnector::new(state_dir.to_path_buf(), connect);
        if let Some(machine) = &options.adhoc {
            direct = direct.with_machine(machine.clone());
        }
        let direct = Arc::new(direct);
        let connector: Arc<dyn Connector> = if options.keeper {
            let idle = keeper::paths::idle_from_env()
                .map_err(|m| Error::new(ErrorCode::ConfigInvalid, m).retryable(false))?;
            // Without our own path a running keeper is still used, but none is started.
            let launcher = keeper::Launcher::current(idle).ok();
            Arc::new(KeeperConnector::new(direct.clone(), state_dir, launcher))
        } else {
            direct.clone()
        };
        let mut engine = Engine::with_options(state_dir, connector, options.engine)?;
        engine.direct = direct;
        engine.adhoc = options.adhoc;
        Ok(engine)
    }

    /// A code runtime on `machine_id`, or, for a `session` in a Slurm allocation, on its node;
    /// reached directly, never through a keeper (its runs stream).
    pub async fn code_runtime(
        &self,
        machine_id: &str,
        session: Option<&SessionRecord>,
        config: CodeConfig,
    ) -> Result<CodeRuntime> {
        let local = self.machine(machine_id)?.is_local();
        let mut transport = self.direct.connect(machine_id).await?;
        if let Some(session) = session {
            transport = self.code_transport(session, transport);
        }
        let runtime = CodeRuntime::new(transport, config)?;
        // On this host a sealed run also hides the engine's own state dir (records, keepers'
        // sockets), wherever it is.
        Ok(if local {
            runtime.hiding(self.state_dir.display().to_string())
        } else {
            runtime
        })
    }
}

/// Serve the connection keeper of `machine_id` until it ends (idle for `idle`, told to end,
/// its link or its machine record gone): the `keeper-daemon` entry point of a face that opens
/// engines with [`OpenOptions::keeper`]. Returns at once when another keeper serves it.
pub async fn serve_keeper(state_dir: &Path, machine_id: &str, idle: Duration) -> Result<()> {
    keeper::server::serve(keeper::server::KeeperOptions {
        state_dir: state_dir.to_path_buf(),
        machine_id: machine_id.to_string(),
        idle,
    })
    .await
}
