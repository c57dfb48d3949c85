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
///
/// `OpenOptions::default()` is: no connection keepers, encrypted keys never asked for
/// ([`KeyPassphrase::Never`]), ssh_config's connect bound, no ad-hoc machine, and the default
/// [`EngineOptions`] (with the login environment on unless `REMOTE_RUNNER_LOGIN_ENV=off`).
#[derive(Debug, Clone, Default)]
pub struct OpenOptions {
    /// Reach SSH machines through connection keepers: one background process per machine that
    /// keeps its connection between calls (docs/architecture.md). Default `false`: the engine
    /// connects itself and keeps its connections while it lives, which is what a long-lived
    /// face wants; a face that makes one call per process (a CLI) saves a connect per call.
    ///
    /// **`true` requires the face's own binary to serve keepers.** A missing keeper is started
    /// as this program (`std::env::current_exe`) with the arguments
    /// `--state-dir DIR keeper-daemon --machine ID --idle-secs N` (`DIR` absolute, `--state-dir`
    /// before the subcommand, `N` whole seconds >= 1), in a new session from `/`, stdin closed,
    /// stdout and stderr appended to its log under `DIR/keepers/`. The face must accept that
    /// command line and call [`serve_keeper`]`(DIR, ID, Duration::from_secs(N))`; a binary
    /// that does not starts nothing useful, and every call then connects directly.
    /// `REMOTE_RUNNER_KEEPER=off` turns keepers off whatever this says, and
    /// `REMOTE_RUNNER_KEEPER_IDLE` sets their idle time in seconds (default 600; a malformed
    /// value makes [`Engine::open`] fail with `config_invalid`).
    pub keeper: bool,
    /// How an encrypted key's passphrase is obtained. Default [`KeyPassphrase::Never`].
    pub passphrase: KeyPassphrase,
    /// Bound on an SSH connect (TCP, key exchange and login). Default `None`: ssh_config's
    /// `ConnectTimeout` for the machine.
    pub connect_timeout: Option<Duration>,
    /// A machine reachable by its id without a store record (the provider's
    /// `REMOTE_RUNNER_HOST` settings, seed-runner's ssh_config alias); [`Engine::machine`]
    /// returns it. Default `None`.
    pub adhoc: Option<Machine>,
    /// The engine's tunables. Default [`EngineOptions::default`].
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
    /// [`default_state_dir`] is the one the CLI and the provider share.
    ///
    /// Errors: `config_invalid` for a malformed `REMOTE_RUNNER_OUTPUT_CAP` or (with
    /// [`OpenOptions::keeper`]) `REMOTE_RUNNER_KEEPER_IDLE`; `io_error`, `permission_denied`
    /// or `store_error` when the state dir cannot be made or its store opened.
    ///
    /// ```
    /// use remote_runner_engine::engine::{Engine, KeyPassphrase, OpenOptions};
    ///
    /// # fn main() -> remote_runner_engine::Result<()> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let state_dir = dir.path();
    /// let engine = Engine::open(
    ///     state_dir,
    ///     OpenOptions {
    ///         passphrase: KeyPassphrase::AskOnTerminal,
    ///         ..OpenOptions::default()
    ///     },
    /// )?;
    /// assert!(engine.session_list()?.is_empty());
    /// # Ok(())
    /// # }
    /// ```
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
        let mut engine = Engine::with_connector(state_dir, connector, options.engine)?;
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
        let runtime = CodeRuntime::on(transport, config)?;
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
