//! The test bed every benchmark shares: one real OpenSSH `sshd` on 127.0.0.1 (from the testkit),
//! the machine record and connect options our side uses, and the same key and known_hosts for
//! the OpenSSH client side. Nothing from `~/.ssh`, ssh_config or an ssh-agent is used by either.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, Result};
use remote_runner_engine::machine::{AuthType, HostKeyPolicy, Machine};
use remote_runner_engine::ssh::{AgentSource, ConnectOptions, SshConfigSource, SshTransport};
use remote_runner_testkit::Sshd;

/// The machine id our side registers the test sshd under.
pub const MACHINE_ID: &str = "bench";

pub struct Bed {
    pub sshd: Sshd,
    /// Local scratch space (state dirs, sockets, source files), removed on drop.
    pub scratch: tempfile::TempDir,
    /// Clean-ups left for the end of the run (see [`Bed::later`]).
    later: Mutex<Vec<Cleanup>>,
}

/// A clean-up run after the last benchmark, with the run's tokio runtime.
pub type Cleanup = Box<dyn FnOnce(&tokio::runtime::Runtime) + Send>;

impl Bed {
    pub fn start() -> Result<Bed> {
        let sshd = Sshd::start().context("start the benchmark sshd on 127.0.0.1")?;
        let scratch = tempfile::Builder::new()
            .prefix("rr-bench-")
            .tempdir()
            .context("create a scratch dir")?;
        Ok(Bed {
            sshd,
            scratch,
            later: Mutex::new(Vec::new()),
        })
    }

    /// Leave a clean-up (destroying a session, removing files) for the end of the run: on this
    /// machine's journal-less ext4 every file create scans past the inodes of its block group
    /// deleted in the last minutes, so one benchmark's clean-up (thousands of files) would slow
    /// the file creates of the next one's commands.
    pub fn later(&self, cleanup: Cleanup) {
        self.later
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(cleanup);
    }

    /// Run the clean-ups left for the end, in order.
    pub fn clean_up(&self, rt: &tokio::runtime::Runtime) {
        let cleanups = std::mem::take(&mut *self.later.lock().unwrap_or_else(|e| e.into_inner()));
        for cleanup in cleanups {
            cleanup(rt);
        }
    }

    /// A fresh local directory under the scratch space.
    pub fn local_dir(&self, name: &str) -> Result<PathBuf> {
        let p = self.scratch.path().join(name);
        std::fs::create_dir_all(&p).with_context(|| format!("mkdir {}", p.display()))?;
        Ok(p)
    }

    /// A fresh directory on the "remote" machine owned by the login user.
    pub fn remote_dir(&self, name: &str) -> Result<PathBuf> {
        self.sshd.remote_dir(name)
    }

    pub fn key(&self) -> &Path {
        &self.sshd.keys.ed25519
    }

    /// The machine record for our side.
    pub fn machine(&self, default_cwd: &Path) -> Machine {
        Machine {
            machine_id: MACHINE_ID.into(),
            host: "127.0.0.1".into(),
            port: self.sshd.port,
            user: self.sshd.user().into(),
            auth_type: AuthType::Key,
            key_path: Some(self.key().to_string_lossy().into_owned()),
            default_cwd: default_cwd.to_string_lossy().into_owned(),
            startup_commands: Vec::new(),
            path_mappings: Vec::new(),
            host_key_policy: HostKeyPolicy::Strict,
            known_hosts_file: Some(self.sshd.known_hosts.to_string_lossy().into_owned()),
            ssh_config_host: None,
            has_password: false,
            login_env: true,
            scheduler: Default::default(),
        }
    }

    /// Connect options that take nothing from the environment.
    pub fn connect_options() -> ConnectOptions {
        ConnectOptions {
            ssh_config: SshConfigSource::Disabled,
            agent: AgentSource::Disabled,
            default_identities: false,
            system_known_hosts: false,
            connect_timeout: Some(Duration::from_secs(30)),
            ..ConnectOptions::default()
        }
    }

    /// Our SSH transport to the bed (one pooled connection, opened now).
    pub async fn connect(&self, default_cwd: &Path) -> Result<Arc<SshTransport>> {
        SshTransport::connect(&self.machine(default_cwd), Self::connect_options())
            .await
            .map_err(|e| anyhow::anyhow!("connect to the benchmark sshd: {e}"))
    }
}
