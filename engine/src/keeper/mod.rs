//! The connection keeper: one background process per machine that keeps its SSH
//! connection (pool, SFTP, control processes) open between CLI calls, like OpenSSH's
//! `ControlPersist`.
//!
//! * [`KeeperConnector`] is the CLI's engine connector. For an SSH machine it first tries the
//!   machine's keeper socket (`<state dir>/keepers/<hash of the id>.sock`, 0600 in a 0700
//!   directory): a handshake checks that the keeper runs this very build and serves this very
//!   machine record. Anything else (no socket, refused, no answer within
//!   [`HANDSHAKE_BOUND`], another build, another record) and it connects directly, as without
//!   a keeper, and starts a fresh keeper in the background for the next call.
//! * The keeper ([`server::serve`]) is the same binary (`remote-runner keeper-daemon`, hidden),
//!   started detached (own session, stdio to a 0600 log file beside the socket). It reads the
//!   machine record and password from the state dir itself: no secret is in its argv or on the
//!   socket. It serves only peers of its own uid (`SO_PEERCRED`), one per machine (a lock file),
//!   and ends when idle for `REMOTE_RUNNER_KEEPER_IDLE` seconds (default 600), on
//!   `machine disconnect`, when its link drops, or when its socket is removed.
//! * What travels is the byte [`Transport`](crate::transport::Transport), method by method, and
//!   whole control-script calls ([`crate::remote::ControlPlane`]) ([`wire`]): the engine runs in
//!   the CLI as before (records, output, exit codes are the engine's own), only the bytes to and
//!   from the machine and the calls pass through the keeper.

pub mod client;
pub mod paths;
pub mod server;
pub mod spawn;
pub mod wire;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::Mutex;

use crate::connect::MachineConnector;
use crate::connect::Connector;
use crate::error::Result;
use crate::machine::LOCAL_MACHINE_ID;
use crate::remote::Remote;

pub use client::KeeperTransport;
pub use paths::{DEFAULT_IDLE, ENV_IDLE, ENV_KEEPER, KeeperPaths};
pub use spawn::Launcher;

/// How long a CLI waits for a keeper to connect and answer its handshake before it goes direct.
pub const HANDSHAKE_BOUND: Duration = Duration::from_millis(1000);

/// The engine connector of the CLI: through the machine's keeper when one answers, else direct
/// (starting a keeper for next time).
pub struct KeeperConnector {
    direct: Arc<MachineConnector>,
    state_dir: PathBuf,
    launcher: Option<Launcher>,
    /// Each machine's keeper: its bytes and its route for calls (both the keeper link).
    cache: Mutex<HashMap<String, Arc<Remote>>>,
}

impl KeeperConnector {
    /// `launcher: None` never starts keepers (but still uses one that runs).
    pub fn new(
        direct: Arc<MachineConnector>,
        state_dir: &Path,
        launcher: Option<Launcher>,
    ) -> KeeperConnector {
        KeeperConnector {
            direct,
            state_dir: state_dir.to_path_buf(),
            launcher,
            cache: Mutex::new(HashMap::new()),
        }
    }

    async fn through_keeper(&self, machine_id: &str) -> Result<Option<Arc<Remote>>> {
        let mut cache = self.cache.lock().await;
        if let Some(t) = cache.get(machine_id)
            && t.is_connected()
        {
            return Ok(Some(t.clone()));
        }
        let machine = self.direct.machine(machine_id)?;
        let paths = KeeperPaths::new(&self.state_dir, machine_id);
        let build = paths::build_id();
        let record = paths::record_hash(&machine);
        match client::connect(&paths.socket, &build, &record, HANDSHAKE_BOUND).await {
            Ok(t) => {
                let t = Arc::new(t);
                let remote = Arc::new(Remote::new(t.clone(), t));
                cache.insert(machine_id.to_string(), remote.clone());
                Ok(Some(remote))
            }
            Err(why) => {
                tracing::debug!(machine_id, ?why, "keeper not used; connecting directly");
                Ok(None)
            }
        }
    }
}

#[async_trait]
impl Connector for KeeperConnector {
    async fn connect(&self, machine_id: &str) -> Result<Arc<Remote>> {
        if machine_id == LOCAL_MACHINE_ID || !paths::enabled() {
            return self.direct.connect(machine_id).await;
        }
        if let Some(t) = self.through_keeper(machine_id).await? {
            return Ok(t);
        }
        let transport = self.direct.connect(machine_id).await?;
        if let Some(launcher) = &self.launcher
            && let Err(e) = launcher.start(&self.state_dir, machine_id)
        {
            tracing::debug!(machine_id, error = %e, "cannot start a keeper");
        }
        Ok(transport)
    }
}

/// What `machine disconnect` found for one keeper.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Disconnected {
    pub machine_id: String,
    pub pid: Option<u32>,
    /// Requests it served.
    pub requests: u64,
}

/// End the keeper of `machine_id`, if one runs. A socket nobody answers on is removed when no
/// keeper holds the machine's lock.
pub async fn disconnect(state_dir: &Path, machine_id: &str) -> Option<Disconnected> {
    let paths = KeeperPaths::new(state_dir, machine_id);
    end_at(&paths.socket, &paths.lock, Some(machine_id)).await
}

/// End every keeper of this state dir.
pub async fn disconnect_all(state_dir: &Path) -> Vec<Disconnected> {
    let dir = paths::keepers_dir(state_dir);
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return Vec::new();
    };
    let mut ended = Vec::new();
    for entry in entries.flatten() {
        let path = entry.path();
        if path.extension().is_some_and(|e| e == "sock") {
            let lock = path.with_extension("lock");
            if let Some(d) = end_at(&path, &lock, None).await {
                ended.push(d);
            }
        }
    }
    ended
}

async fn end_at(socket: &Path, lock: &Path, machine_id: Option<&str>) -> Option<Disconnected> {
    if !socket.exists() {
        return None;
    }
    let status = client::control(socket, wire::Request::Status, HANDSHAKE_BOUND).await;
    let Some(wire::Reply::Status {
        pid,
        machine_id: m,
        requests,
        ..
    }) = status
    else {
        remove_if_unlocked(socket, lock);
        return None;
    };
    client::control(socket, wire::Request::Shutdown, HANDSHAKE_BOUND).await;
    // The keeper removes its socket as it ends; wait briefly so the caller sees it gone.
    for _ in 0..40 {
        if !socket.exists() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    Some(Disconnected {
        machine_id: machine_id.map_or(m, str::to_string),
        pid: Some(pid),
        requests,
    })
}

/// Remove a socket no keeper answers on, unless a keeper holds its lock (it may be starting).
fn remove_if_unlocked(socket: &Path, lock: &Path) {
    let Ok(file) = std::fs::OpenOptions::new().write(true).open(lock) else {
        let _ = std::fs::remove_file(socket);
        return;
    };
    if file.try_lock().is_ok() {
        let _ = std::fs::remove_file(socket);
    }
}
