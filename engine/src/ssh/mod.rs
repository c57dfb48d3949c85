//! SSH layer: ssh_config, known_hosts, auth, connection pool, exec, SFTP.
//!
//! Entry points: [`connect`] (a pooled [`SshTransport`] for a machine), [`probe`] (for
//! `machine doctor`), [`accept_host_key`], and [`config::machine_from_alias`].

pub mod auth;
pub(crate) mod client;
pub mod config;
pub(crate) mod connection;
pub(crate) mod exec;
pub mod known_hosts;
pub mod options;
pub(crate) mod pool;
pub mod probe;
pub(crate) mod sftp;
pub mod transport;

use std::sync::Arc;

pub use config::SshConfigSource;
pub use connection::accept_host_key;
pub use options::{AgentSource, ConnectOptions, PassphraseSource};
pub use probe::{HostKeyState, ProbeReport, probe};
pub use transport::SshTransport;

use crate::error::Result;
use crate::machine::Machine;

/// Connect to a machine (ssh_config, known_hosts and the auth chain applied) and return a
/// pooled transport. The first connection is opened now, so its errors surface here.
pub async fn connect(machine: &Machine, opts: ConnectOptions) -> Result<Arc<SshTransport>> {
    SshTransport::connect(machine, opts).await
}
