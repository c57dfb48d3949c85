//! The engine's connector for real machines: `local` runs on this host; every other id is a
//! machine record in the store, reached over SSH with its stored credentials. Also the
//! [`Connector`] trait itself, which the engine holds and the keeper implements.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use async_trait::async_trait;
use tokio::sync::Mutex;

use crate::error::{Error, ErrorCode, Result};
use crate::machine::{LOCAL_MACHINE_ID, Machine};
use crate::remote::Remote;
use crate::ssh::{self, ConnectOptions};
use crate::store::{self, Store, credentials::CredentialStore};
use crate::transport::local::LocalTransport;

/// Gives the engine a machine for a machine id: its byte transport (an SSH connection, this
/// host, the CLI's keeper) and the control plane its calls take (a `Remote`).
#[async_trait]
pub trait Connector: Send + Sync {
    async fn connect(&self, machine_id: &str) -> Result<Arc<Remote>>;
}

/// Every machine id maps to the same machine (tests, single-machine tools).
pub struct FixedConnector(pub Arc<Remote>);

#[async_trait]
impl Connector for FixedConnector {
    async fn connect(&self, _machine_id: &str) -> Result<Arc<Remote>> {
        Ok(self.0.clone())
    }
}

/// Only the built-in `local` machine.
pub struct LocalConnector;

#[async_trait]
impl Connector for LocalConnector {
    async fn connect(&self, machine_id: &str) -> Result<Arc<Remote>> {
        if machine_id == crate::machine::LOCAL_MACHINE_ID {
            Ok(Remote::direct(Arc::new(LocalTransport::new())))
        } else {
            Err(Error::new(
                ErrorCode::UnknownMachine,
                format!("machine {machine_id} cannot be reached by this connector (local only)"),
            ))
        }
    }
}

/// Connects machine ids to machines, keeping one pooled SSH transport per machine with its
/// control plane ([`Remote::direct`]: the connection's long-lived control processes).
pub struct MachineConnector {
    state_dir: PathBuf,
    base_options: ConnectOptions,
    /// Ad-hoc machines that are not in the store (the provider's host/user/key configuration).
    extra: HashMap<String, Machine>,
    cache: Mutex<HashMap<String, Arc<Remote>>>,
    /// `local`'s one machine: it holds the kept control processes (`ctl.sh serve`), so a
    /// fresh one per connect would start a new control process (a shell, `id`, `ls`, the script)
    /// on every call instead of reusing one.
    local: Arc<Remote>,
    /// The store, opened at the first lookup and kept (not opened per connect).
    store: std::sync::Mutex<Option<Store>>,
}

impl MachineConnector {
    pub fn new(state_dir: PathBuf, base_options: ConnectOptions) -> MachineConnector {
        MachineConnector {
            state_dir,
            base_options,
            extra: HashMap::new(),
            cache: Mutex::new(HashMap::new()),
            local: Remote::direct(Arc::new(LocalTransport::new())),
            store: std::sync::Mutex::new(None),
        }
    }

    /// Make `machine` reachable by its id without a store record.
    pub fn with_machine(mut self, machine: Machine) -> MachineConnector {
        self.extra.insert(machine.machine_id.clone(), machine);
        self
    }

    /// The machine record for an id: the built-in `local`, an ad-hoc one, or the store's.
    pub fn machine(&self, machine_id: &str) -> Result<Machine> {
        if machine_id == LOCAL_MACHINE_ID {
            return Ok(Machine::local());
        }
        if let Some(m) = self.extra.get(machine_id) {
            return Ok(m.clone());
        }
        crate::util::blocking(|| {
            let mut slot = self.store.lock().unwrap_or_else(|p| p.into_inner());
            let store = match slot.take() {
                Some(open) => open,
                None => Store::open(&self.state_dir)?,
            };
            store::machines::resolve(slot.insert(store), machine_id)
        })
    }

    async fn connect_ssh(&self, machine_id: &str) -> Result<Arc<Remote>> {
        let mut cache = self.cache.lock().await;
        if let Some(t) = cache.get(machine_id)
            && t.is_connected()
        {
            return Ok(t.clone());
        }
        let machine = self.machine(machine_id)?;
        let mut opts = self.base_options.clone();
        if opts.password.is_none() && machine.has_password {
            opts.password = crate::util::blocking(|| {
                CredentialStore::open(&self.state_dir)?.get_password(machine_id)
            })?;
        }
        let remote = Remote::direct(ssh::connect(&machine, opts).await?);
        cache.insert(machine_id.to_string(), remote.clone());
        Ok(remote)
    }
}

#[async_trait]
impl Connector for MachineConnector {
    async fn connect(&self, machine_id: &str) -> Result<Arc<Remote>> {
        if machine_id == LOCAL_MACHINE_ID {
            return Ok(self.local.clone());
        }
        self.connect_ssh(machine_id).await
    }
}
