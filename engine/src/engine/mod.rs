//! Sessions, commands, transfers and runs, above the transport.
//!
//! The [`Engine`] owns the local records (SQLite store, logs, transcripts under the state dir)
//! and drives machines through remotes (a byte transport and its control plane) that
//! [`Engine::open`] sets up for each machine. It is usable from a one-shot CLI process (each
//! call blocks until done) and from the long-lived provider (streaming output by byte offset
//! with [`Engine::read_output`] and [`Engine::wait_output`]).
//!
//! Truth lives on the machine: a command's `exit` file says whether and how it ended, so any
//! process, after any crash or reconnect, can pick a command up again by id.

pub mod attach;
pub mod batch;
pub mod code;
pub mod command;
pub mod doctor;
pub mod file_bytes;
pub mod helper;
pub mod host;
pub mod machines;
pub mod open;
pub mod output;
pub mod retry;
pub mod run;
pub mod send;
pub mod session;
pub mod slurm;
mod starter;
mod terminals;
pub mod transcript;
pub mod transfer;
pub mod turn_dir;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::error::{Error, ErrorCode, Hint, Result};
use crate::store::{self, Store};
use crate::tmux::{SessionPaths, TmuxDriver};

// How machines are reached is the engine's own: public only for its tests and benchmarks.
#[cfg(not(feature = "testing"))]
use crate::connect::Connector;
#[cfg(feature = "testing")]
#[doc(hidden)]
pub use crate::connect::{Connector, FixedConnector, LocalConnector};
pub use crate::records::{CommandMode, CommandRecord, CommandStatus, SessionRecord, SessionStatus};
pub use command::{ExecRequest, Freshness, LogEntry, OutputStream, StopOutcome};
pub use doctor::{DoctorOptions, DoctorReport};
pub use file_bytes::FileSlice;
pub use machines::{
    MachineEntry, MachineRemoval, MachineRemoved, Machines, machine_from_ssh_alias,
    validate_machine_id,
};
pub use open::{KeyPassphrase, OpenOptions, default_state_dir, serve_keeper};
pub use send::{SendEnd, SendOutcome, SendRequest};
pub use session::{DestroyOptions, DestroyResult, Screen, SendResult, TranscriptChunk};
pub use slurm::{CreateOptions, split_slurm_args};

/// Tunables ([`OpenOptions::engine`]); the defaults are what the CLI and provider use.
#[derive(Debug, Clone)]
pub struct EngineOptions {
    /// Prefix of the tmux server socket names on every machine: each session has a server of
    /// its own, `tmux -L <prefix>-<session id>`. Default `remote-runner`, shared by every face,
    /// so each sees the others' sessions.
    pub tmux_socket: String,
    /// Cap on each of the stdout/stderr excerpts in a command record. Default 64 KiB.
    pub excerpt_bytes: usize,
    /// Bytes of each output stream of a command (and of a batch job) kept locally: the copy
    /// and the combined log. The rest is counted in the record and stays on the machine.
    /// Default: `REMOTE_RUNNER_OUTPUT_CAP` or 64 MiB ([`output::output_cap`]).
    pub output_cap: u64,
    /// Longest single remote wait; longer waits are made of several, checking liveness between.
    /// Default 60 s.
    pub wait_chunk: Duration,
    /// Extra environment for new session shells (`NAME`, `value`), e.g. `HOME` in tests.
    /// Default none.
    pub session_env: Vec<(String, String)>,
    /// Give session shells the environment of a login shell of the user's own login shell
    /// (PATH additions, conda, nvm, ...), resolved once per session start. Default `true`
    /// unless `REMOTE_RUNNER_LOGIN_ENV=off`; a machine record can turn it off for itself.
    pub login_env: bool,
    /// Bound on resolving that environment; past it the session starts without it. Default
    /// 10 s.
    pub login_env_bound: Duration,
    /// Keep a tmux control client per session to type foreground commands and see them end,
    /// without a tmux process on the machine per command. For long-lived engines (the MCP
    /// server, the provider); a process that runs one command gains nothing. Default `false`.
    pub terminal_clients: bool,
}

impl Default for EngineOptions {
    fn default() -> Self {
        EngineOptions {
            tmux_socket: crate::tmux::DEFAULT_SOCKET.to_string(),
            excerpt_bytes: 64 * 1024,
            // A malformed value is refused by `Engine::open`.
            output_cap: output::output_cap().unwrap_or(output::DEFAULT_OUTPUT_CAP),
            wait_chunk: Duration::from_secs(60),
            session_env: Vec::new(),
            login_env: std::env::var("REMOTE_RUNNER_LOGIN_ENV").map_or(true, |v| v != "off"),
            login_env_bound: Duration::from_secs(10),
            terminal_clients: false,
        }
    }
}

/// The session and command engine.
pub struct Engine {
    state_dir: PathBuf,
    store: Mutex<Store>,
    connector: Arc<dyn Connector>,
    /// The machines themselves, never through a keeper: a code runtime streams, which a
    /// keeper does not forward ([`Engine::open`]; else the same as `connector`).
    direct: Arc<dyn Connector>,
    /// A machine reachable by its id without a store record ([`OpenOptions::adhoc`]).
    adhoc: Option<crate::machine::Machine>,
    options: EngineOptions,
    /// The nodes of sessions in Slurm allocations, by job id ([`Engine::session_transport`]).
    nodes: crate::slurm::Nodes,
    /// Kept tmux control clients, by session ([`EngineOptions::terminal_clients`]).
    terminals: terminals::Terminals,
}

// A face shares one engine between its tasks (`Arc<Engine>`): keep it `Send + Sync`.
const _: fn() = || {
    fn shared<T: Send + Sync>() {}
    shared::<Engine>();
};

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("state_dir", &self.state_dir)
            .field("options", &self.options)
            .finish()
    }
}

impl Engine {
    /// The engine over `connector`, with default options: for the engine's tests and the
    /// benchmarks only (a face opens the engine with [`Engine::open`]).
    #[cfg(feature = "testing")]
    #[doc(hidden)]
    pub fn new(state_dir: &Path, connector: Arc<dyn Connector>) -> Result<Engine> {
        Self::with_connector(state_dir, connector, EngineOptions::default())
    }

    /// The engine over `connector`: for the engine's tests and the benchmarks only.
    #[cfg(feature = "testing")]
    #[doc(hidden)]
    pub fn with_options(
        state_dir: &Path,
        connector: Arc<dyn Connector>,
        options: EngineOptions,
    ) -> Result<Engine> {
        Self::with_connector(state_dir, connector, options)
    }

    /// The engine over `connector` ([`Engine::open`] builds the connector of real machines).
    pub(crate) fn with_connector(
        state_dir: &Path,
        connector: Arc<dyn Connector>,
        options: EngineOptions,
    ) -> Result<Engine> {
        // A malformed REMOTE_RUNNER_OUTPUT_CAP is an error, not the default in silence.
        output::output_cap()?;
        let store = crate::util::blocking(|| Store::open(state_dir))?;
        store::ensure_private_dir(&state_dir.join("logs"))?;
        Ok(Engine {
            state_dir: state_dir.to_path_buf(),
            store: Mutex::new(store),
            direct: connector.clone(),
            connector,
            adhoc: None,
            options,
            nodes: crate::slurm::Nodes::default(),
            terminals: terminals::Terminals::default(),
        })
    }

    pub fn state_dir(&self) -> &Path {
        &self.state_dir
    }

    pub fn options(&self) -> &EngineOptions {
        &self.options
    }

    /// Run `f` with the store (short, synchronous queries only), off the async worker threads
    /// ([`crate::util::blocking`]): SQLite may wait on its busy timeout, and the lock on others.
    fn with_store<T>(&self, f: impl FnOnce(&Store) -> Result<T>) -> Result<T> {
        crate::util::blocking(|| {
            let guard = self
                .store
                .lock()
                .map_err(|_| Error::internal("the store lock was poisoned by an earlier panic"))?;
            f(&guard)
        })
    }

    fn log_dir(&self, session_id: &str) -> PathBuf {
        self.state_dir.join("logs").join(session_id)
    }

    fn load_session(&self, session_id: &str) -> Result<SessionRecord> {
        if session_id.trim().is_empty() {
            return Err(
                Error::invalid("the session id is empty; give a session id (sess_...)")
                    .with_hint(Hint::ListSessions),
            );
        }
        self.with_store(|s| store::sessions::get(s, session_id))?
            .ok_or_else(|| {
                Error::new(
                    ErrorCode::UnknownSession,
                    format!("no session {session_id}"),
                )
                .with_hint(Hint::ListSessions)
            })
    }

    fn load_command(&self, session_id: &str, command_id: &str) -> Result<CommandRecord> {
        let rec = self
            .with_store(|s| store::commands::get(s, command_id))?
            .filter(|c| c.session_id == session_id);
        rec.ok_or_else(|| {
            Error::new(
                ErrorCode::UnknownCommand,
                format!("no command {command_id} in session {session_id}"),
            )
            .with_hint(Hint::ListCommands {
                session_id: session_id.to_string(),
            })
        })
    }

    fn save_session(&self, rec: &SessionRecord) -> Result<()> {
        self.with_store(|s| store::sessions::upsert(s, rec))
    }

    fn save_command(&self, rec: &CommandRecord) -> Result<()> {
        self.with_store(|s| store::commands::update(s, rec))
    }

    async fn driver(&self, session: &SessionRecord) -> Result<TmuxDriver> {
        let transport = self.connector.connect(&session.machine_id).await?;
        let transport = self.session_transport(session, transport);
        Ok(TmuxDriver::new(transport, paths_of(session)))
    }

    /// Mark a session lost (idempotent) with a reason.
    fn mark_lost(&self, session_id: &str, why: &str) -> Result<()> {
        let mut rec = self.load_session(session_id)?;
        if rec.status == SessionStatus::Active {
            rec.status = SessionStatus::Lost;
            rec.ended_at = Some(crate::util::now_rfc3339());
            rec.status_message = Some(why.to_string());
            self.save_session(&rec)?;
        }
        Ok(())
    }
}

fn paths_of(session: &SessionRecord) -> SessionPaths {
    SessionPaths {
        tmux_path: session.tmux_path.clone(),
        socket: session.tmux_socket.clone(),
        session_name: session.tmux_session.clone(),
        state_dir: session.remote_state_dir.clone(),
        commands_dir: session.remote_commands_dir.clone(),
    }
}

/// Seconds since the epoch (from the remote clock) to RFC 3339.
fn epoch_to_rfc3339(secs: f64) -> String {
    let nanos = (secs * 1e9) as i128;
    match time::OffsetDateTime::from_unix_timestamp_nanos(nanos) {
        Ok(t) => crate::util::rfc3339(t),
        Err(_) => crate::util::now_rfc3339(),
    }
}
