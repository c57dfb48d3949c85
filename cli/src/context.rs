//! What every command handler gets: the resolved global options and access to local state.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use remote_runner_engine::connect::MachineConnector;
use remote_runner_engine::engine::{Connector, Engine, EngineOptions};
use remote_runner_engine::keeper::{self, KeeperConnector};
use remote_runner_engine::machine::Machine;
use remote_runner_engine::ssh::{ConnectOptions, PassphraseSource};

use remote_runner_engine::store::credentials::CredentialStore;
use remote_runner_engine::store::{self, Store};
use remote_runner_engine::{Error, ErrorCode, Result};

use crate::cli::GlobalArgs;
use crate::output::Output;
use crate::timeout::{self, Scope};

#[derive(Debug)]
pub struct Context {
    /// `--state-dir`, `REMOTE_RUNNER_STATE_DIR`, or `~/.remote-runner`.
    pub state_dir: PathBuf,
    /// `--timeout`.
    pub timeout: Option<Duration>,
    /// What `--timeout` bounds for this command.
    pub timeout_scope: Scope,
    pub out: Output,
    /// One engine for every call of a long-lived face (`remote-runner mcp`); `None` in the CLI,
    /// where each command opens its own.
    pub shared: Option<Arc<Wired>>,
}

impl Context {
    pub fn new(global: &GlobalArgs, out: Output, timeout_scope: Scope) -> Result<Context> {
        let state_dir = match &global.state_dir {
            Some(dir) if dir.as_os_str().is_empty() => {
                return Err(Error::invalid(
                    "--state-dir (or REMOTE_RUNNER_STATE_DIR) is empty; give a directory path",
                ));
            }
            Some(dir) => dir.clone(),
            None => store::default_state_dir().ok_or_else(|| {
                Error::new(
                    ErrorCode::ConfigInvalid,
                    "cannot find your home directory for the default state dir; pass \
                         --state-dir PATH or set REMOTE_RUNNER_STATE_DIR",
                )
            })?,
        };
        Ok(Context {
            state_dir,
            timeout: global.timeout.map(Duration::from_secs),
            timeout_scope,
            out,
            shared: None,
        })
    }

    /// Open the record store (creates the state dir with mode 0700).
    pub fn store(&self) -> Result<Store> {
        self.check_state_dir()?;
        Store::open(&self.state_dir)
    }

    /// The credential file beside the store.
    pub fn credentials(&self) -> Result<CredentialStore> {
        self.check_state_dir()?;
        CredentialStore::open(&self.state_dir)
    }

    /// A state dir path that exists but is not a directory is a configuration mistake that no
    /// retry fixes: say so, rather than a retryable `io_error` from deep inside the store.
    fn check_state_dir(&self) -> Result<()> {
        match std::fs::metadata(&self.state_dir) {
            Ok(meta) if !meta.is_dir() => Err(Error::new(
                ErrorCode::ConfigInvalid,
                format!(
                    "the state dir {} is a file, not a directory; pass --state-dir DIR (or set \
                     REMOTE_RUNNER_STATE_DIR) to a directory, or move the file away",
                    self.state_dir.display()
                ),
            )
            .retryable(false)),
            _ => Ok(()),
        }
    }

    /// How long a listing may spend refreshing records from the machine.
    pub fn refresh_bound(&self) -> Duration {
        self.timeout.unwrap_or(timeout::DEFAULT_REFRESH)
    }

    /// The engine over real machines: `local` on this host, stored machines over SSH with their
    /// stored passwords; an encrypted key's passphrase is asked only when stdin is a terminal.
    pub fn engine(&self) -> Result<Arc<Wired>> {
        if let Some(shared) = &self.shared {
            return Ok(shared.clone());
        }
        self.engine_with(EngineOptions::default()).map(Arc::new)
    }

    /// [`Context::engine`] with the engine's tunables given (the MCP face sizes excerpts).
    pub fn engine_with(&self, engine_options: EngineOptions) -> Result<Wired> {
        let options = ConnectOptions {
            passphrase: if std::io::stdin().is_terminal() {
                PassphraseSource::Tty
            } else {
                PassphraseSource::Never
            },
            connect_timeout: timeout::connect_bound(self.timeout_scope, self.timeout),
            ..ConnectOptions::default()
        };
        self.check_state_dir()?;
        let connector = Arc::new(MachineConnector::new(self.state_dir.clone(), options));
        let engine = Engine::with_options(
            &self.state_dir,
            self.keeper_connector(connector.clone())?,
            engine_options,
        )?;
        Ok(Wired { engine, connector })
    }
}

impl Context {
    /// The engine's connector: SSH machines through their connection keeper when one answers
    /// (started in the background on first use), else directly. `REMOTE_RUNNER_KEEPER=off`
    /// turns keepers off; `REMOTE_RUNNER_KEEPER_IDLE` is a keeper's idle time in seconds.
    fn keeper_connector(&self, direct: Arc<MachineConnector>) -> Result<Arc<dyn Connector>> {
        let idle = keeper::paths::idle_from_env()
            .map_err(|m| Error::new(ErrorCode::ConfigInvalid, m).retryable(false))?;
        // Without our own path the CLI still uses a running keeper but starts none.
        let launcher = keeper::Launcher::current(idle).ok();
        Ok(Arc::new(KeeperConnector::new(
            direct,
            &self.state_dir,
            launcher,
        )))
    }
}

/// An engine and the connector behind it (which also resolves machine ids to records).
pub struct Wired {
    pub engine: Engine,
    pub connector: Arc<MachineConnector>,
}

impl std::fmt::Debug for Wired {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Wired")
            .field("engine", &self.engine)
            .finish()
    }
}

impl Wired {
    /// The machine record for an id (`local`, or a stored machine; `unknown_machine` otherwise).
    pub fn machine(&self, machine_id: &str) -> Result<Machine> {
        self.connector.machine(machine_id)
    }
}
