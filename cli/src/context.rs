//! What every command handler gets: the resolved global options and access to local state.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use remote_runner_engine::engine::{Engine, EngineOptions, KeyPassphrase, Machines, OpenOptions};
use remote_runner_engine::machine::Machine;
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
            None => remote_runner_engine::engine::default_state_dir().ok_or_else(|| {
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

    /// The machine records (creates the state dir with mode 0700).
    pub fn machines(&self) -> Result<Machines> {
        self.check_state_dir()?;
        Machines::open(&self.state_dir)
    }

    /// How an encrypted key's passphrase is obtained: asked only when stdin is a terminal.
    pub fn passphrase(&self) -> KeyPassphrase {
        if std::io::stdin().is_terminal() {
            KeyPassphrase::AskOnTerminal
        } else {
            KeyPassphrase::Never
        }
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
    /// SSH machines are reached through their connection keeper when one answers (started in
    /// the background on first use), else directly.
    pub fn engine_with(&self, engine_options: EngineOptions) -> Result<Wired> {
        self.open_engine(engine_options, true)
    }

    /// [`Context::engine_with`] for a long-lived process (the MCP server): it holds its own SSH
    /// connections rather than going through the keepers, whose socket hop every call would
    /// cross (2-3 ms on a warm `session_exec` over SSH, measured).
    pub fn engine_holding_connections(&self, engine_options: EngineOptions) -> Result<Wired> {
        self.open_engine(engine_options, false)
    }

    /// An engine for one bulk transfer: it holds its own SSH connections (the keeper's socket
    /// would relay every byte once more) and never asks for a passphrase (a caller that cannot
    /// connect with it uses [`Context::engine`]). `None` when this context shares an engine,
    /// which holds its own connections already (the MCP server).
    pub fn engine_for_bulk(&self) -> Result<Option<Wired>> {
        if self.shared.is_some() {
            return Ok(None);
        }
        self.open_engine_asking(EngineOptions::default(), false, KeyPassphrase::Never)
            .map(Some)
    }

    fn open_engine(&self, engine_options: EngineOptions, keeper: bool) -> Result<Wired> {
        self.open_engine_asking(engine_options, keeper, self.passphrase())
    }

    fn open_engine_asking(
        &self,
        engine_options: EngineOptions,
        keeper: bool,
        passphrase: KeyPassphrase,
    ) -> Result<Wired> {
        let options = OpenOptions {
            keeper,
            passphrase,
            connect_timeout: timeout::connect_bound(self.timeout_scope, self.timeout),
            engine: engine_options,
            adhoc: None,
        };
        self.check_state_dir()?;
        let engine = Engine::open(&self.state_dir, options)?;
        Ok(Wired { engine })
    }
}

/// An engine opened on real machines.
pub struct Wired {
    pub engine: Engine,
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
        self.engine.machine(machine_id)
    }
}
