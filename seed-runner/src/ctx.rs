//! What every command gets: the state dir, an engine for the records, and an engine wired to
//! one machine.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::Duration;

use remote_runner_engine::ErrorCode;
use remote_runner_engine::engine::Engine;
use remote_runner_engine::engine::host::{Host, machine_or_ssh_alias};
use remote_runner_engine::engine::{KeyPassphrase, OpenOptions};
use remote_runner_engine::machine::Machine;

use crate::error::{Result, SSH, STATE, SeedError};

#[derive(Debug)]
pub struct Ctx {
    pub state_dir: PathBuf,
    /// An engine for reading records (opened at first use; it connects nowhere).
    records: OnceLock<Engine>,
}

/// An engine wired to one machine.
pub(crate) struct Wired {
    pub(crate) engine: Engine,
    pub(crate) machine: Machine,
}

impl Wired {
    /// The machine, connected (the engine keeps one connection to it).
    pub(crate) async fn host(&self) -> Result<Host> {
        self.engine
            .host(&self.machine.machine_id)
            .await
            .map_err(|e| {
                SeedError::engine(
                    e,
                    &format!("connecting to {}", self.machine.machine_id),
                    (SSH, "ssh_connection_failed"),
                )
            })
    }
}

impl Ctx {
    pub fn new(state_dir: PathBuf) -> Ctx {
        Ctx {
            state_dir,
            records: OnceLock::new(),
        }
    }

    /// The machine for `--machine`: a machine registered with `remote-runner machine add`, or
    /// an ssh_config `Host` alias.
    pub(crate) fn machine(&self, machine_id: &str) -> Result<Machine> {
        machine_or_ssh_alias(&self.state_dir, machine_id).map_err(|e| match e.code {
            ErrorCode::UnknownMachine => SeedError::new(SSH, "ssh_connection_failed", e.message),
            ErrorCode::ConfigInvalid => {
                SeedError::engine(e, "reading ssh_config", (SSH, "ssh_connection_failed"))
            }
            _ => SeedError::engine(
                e,
                &format!("looking up machine {machine_id}"),
                (STATE, "state_error"),
            ),
        })
    }

    /// A fresh engine for one machine (its own connection to it).
    pub(crate) fn wire(
        &self,
        machine_id: &str,
        connect_timeout: Option<Duration>,
    ) -> Result<Wired> {
        let machine = self.machine(machine_id)?;
        let engine = Engine::open(
            &self.state_dir,
            OpenOptions {
                adhoc: Some(machine.clone()),
                connect_timeout,
                passphrase: if std::io::stdin().is_terminal() {
                    KeyPassphrase::AskOnTerminal
                } else {
                    KeyPassphrase::Never
                },
                ..OpenOptions::default()
            },
        )
        .map_err(|e| SeedError::engine(e, "opening the engine state", (STATE, "state_error")))?;
        Ok(Wired { engine, machine })
    }

    /// The engine for reading records.
    pub(crate) fn records(&self) -> Result<&Engine> {
        if let Some(e) = self.records.get() {
            return Ok(e);
        }
        let engine = Engine::open(&self.state_dir, OpenOptions::default()).map_err(|e| {
            SeedError::engine(e, "opening the engine state", (STATE, "state_error"))
        })?;
        Ok(self.records.get_or_init(|| engine))
    }
}
