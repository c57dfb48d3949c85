//! The test bed: a real sshd (testkit) with the non-root login user, one engine over a
//! [`MachineConnector`] (the same connector the CLI and the provider use), a private tmux socket
//! and a private state dir; plus the recovery loop every fault test ends with.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use remote_runner_engine::connect::MachineConnector;
use remote_runner_engine::engine::{
    CommandRecord, Connector, Engine, EngineOptions, SessionRecord,
};
use remote_runner_engine::machine::{AuthType, HostKeyPolicy, Machine};
use remote_runner_engine::ssh::{AgentSource, ConnectOptions, SshConfigSource};
use remote_runner_engine::transport::ExecOptions;
use remote_runner_engine::{Error, ErrorCode};
use remote_runner_testkit::{Sshd, TEST_USER};

/// The machine id every bed uses.
pub const MACHINE_ID: &str = "rel";

/// Connect options that use nothing from the environment (no ssh_config, agent, default keys).
pub fn connect_options() -> ConnectOptions {
    ConnectOptions {
        ssh_config: SshConfigSource::Disabled,
        agent: AgentSource::Disabled,
        default_identities: false,
        system_known_hosts: false,
        connect_timeout: Some(Duration::from_secs(10)),
        ..ConnectOptions::default()
    }
}

/// [`connect_options`] with a short keepalive budget (`interval` x `max`).
pub fn keepalive_options(interval: Duration, max: usize) -> ConnectOptions {
    ConnectOptions {
        keepalive_interval: Some(interval),
        keepalive_max: Some(max),
        connect_timeout: Some(Duration::from_secs(3)),
        ..connect_options()
    }
}

/// A machine record for `host:port` with the test bed's key and a known_hosts file.
pub fn machine(host: &str, port: u16, sshd: &Sshd, known_hosts: &Path, cwd: &Path) -> Machine {
    Machine {
        machine_id: MACHINE_ID.into(),
        host: host.into(),
        port,
        user: TEST_USER.into(),
        auth_type: AuthType::Key,
        key_path: Some(sshd.keys.ed25519.to_string_lossy().into_owned()),
        default_cwd: cwd.to_string_lossy().into_owned(),
        startup_commands: Vec::new(),
        path_mappings: Vec::new(),
        host_key_policy: HostKeyPolicy::Strict,
        known_hosts_file: Some(known_hosts.to_string_lossy().into_owned()),
        ssh_config_host: None,
        has_password: false,
        login_env: true,
        scheduler: Default::default(),
    }
}

/// One engine on one sshd.
pub struct Bed {
    pub sshd: Arc<Sshd>,
    pub state: tempfile::TempDir,
    /// The sessions' working directory (on this host, owned by the login user).
    pub remote: PathBuf,
    pub machine: Machine,
    pub connect: ConnectOptions,
    pub options: EngineOptions,
    pub engine: Arc<Engine>,
}

impl Bed {
    /// A fresh sshd and an engine with default connect options.
    pub async fn start(name: &str) -> Result<Bed> {
        let sshd = Sshd::start().context("start the test sshd")?;
        Self::on(Arc::new(sshd), name, connect_options()).await
    }

    /// An engine on `sshd` (127.0.0.1) with `connect` options.
    pub async fn on(sshd: Arc<Sshd>, name: &str, connect: ConnectOptions) -> Result<Bed> {
        let remote = sshd.remote_dir(name)?;
        let m = machine("127.0.0.1", sshd.port, &sshd, &sshd.known_hosts, &remote);
        Self::with_machine(sshd, remote, m, connect)
    }

    /// An engine reaching `machine` (e.g. an sshd in a network namespace).
    pub fn with_machine(
        sshd: Arc<Sshd>,
        remote: PathBuf,
        machine: Machine,
        connect: ConnectOptions,
    ) -> Result<Bed> {
        let state = tempfile::Builder::new().prefix("rr-rel-state-").tempdir()?;
        let options = EngineOptions {
            tmux_socket: format!("rrrel-{}", &uuid::Uuid::new_v4().simple().to_string()[..12]),
            ..EngineOptions::default()
        };
        let engine = Arc::new(open_engine(state.path(), &machine, &connect, &options)?);
        Ok(Bed {
            sshd,
            state,
            remote,
            machine,
            connect,
            options,
            engine,
        })
    }

    /// Another engine on the same state dir, with its own connections (another process would
    /// look the same).
    pub fn other_engine(&self) -> Result<Engine> {
        open_engine(
            self.state.path(),
            &self.machine,
            &self.connect,
            &self.options,
        )
    }

    pub async fn session(&self) -> Result<SessionRecord> {
        self.engine
            .create_session(&self.machine, None)
            .await
            .map_err(|e| anyhow!("create_session: {e}"))
    }

    /// Run `cmd` on the machine outside any session (as the login user).
    pub async fn sh(&self, cmd: &str) -> Result<String> {
        let connector =
            MachineConnector::new(self.state.path().to_path_buf(), self.connect.clone())
                .with_machine(self.machine.clone());
        let t = connector
            .connect(MACHINE_ID)
            .await
            .map_err(|e| anyhow!("connect: {e}"))?;
        let out = t
            .exec(cmd, ExecOptions::default())
            .await
            .map_err(|e| anyhow!("exec {cmd:?}: {e}"))?;
        Ok(out.stdout_lossy())
    }

    /// pid of this bed's tmux server, if one runs (the first one: each session has its own).
    pub fn tmux_server_pid(&self) -> Option<u32> {
        self.tmux_server_pids().first().copied()
    }

    /// pids of this bed's tmux servers (one per live session).
    pub fn tmux_server_pids(&self) -> Vec<u32> {
        let out = on_tmux_servers(&self.options.tmux_socket, "display-message -p '#{pid}'");
        out.lines().filter_map(|l| l.trim().parse().ok()).collect()
    }
}

impl Drop for Bed {
    fn drop(&mut self) {
        kill_tmux_server(&self.options.tmux_socket);
    }
}

/// Stop the login user's tmux servers whose socket name starts with `prefix` (a bed's
/// [`EngineOptions::tmux_socket`]: each session has a server `<prefix>-<session id>`), as that
/// user so the socket dir matches; whether any was stopped.
pub fn kill_tmux_server(prefix: &str) -> bool {
    !on_tmux_servers(prefix, "kill-server && echo stopped").is_empty()
}

/// Run `tmux -S <socket> <args>` (a shell word list) as the login user for each of its server
/// sockets whose name starts with `prefix`; their output.
fn on_tmux_servers(prefix: &str, args: &str) -> String {
    let script = format!(
        "for s in \"${{TMUX_TMPDIR:-/tmp}}/tmux-$(id -u)/$1\"*; do [ -S \"$s\" ] && tmux -S \"$s\" {args}; done; true"
    );
    std::process::Command::new("runuser")
        .args(["-u", TEST_USER, "--", "sh", "-c", &script, "sh", prefix])
        .stderr(std::process::Stdio::null())
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default()
}

/// An engine on `state_dir` reaching `machine` through a [`MachineConnector`].
pub fn open_engine(
    state_dir: &Path,
    machine: &Machine,
    connect: &ConnectOptions,
    options: &EngineOptions,
) -> Result<Engine> {
    let connector = MachineConnector::new(state_dir.to_path_buf(), connect.clone())
        .with_machine(machine.clone());
    Engine::with_options(state_dir, Arc::new(connector), options.clone())
        .map_err(|e| anyhow!("open the engine: {e}"))
}

/// A link error the engine reports while the machine cannot be reached; retrying helps.
pub fn is_link_error(e: &Error) -> bool {
    matches!(
        e.code,
        ErrorCode::ConnectionLost | ErrorCode::ConnectionFailed | ErrorCode::Timeout
    )
}

/// How a command was recovered after a fault.
#[derive(Debug)]
pub struct Recovered {
    pub record: CommandRecord,
    /// Link errors seen (and retried) while recovering.
    pub retries: usize,
    /// Time from the start of recovery until the final record.
    pub elapsed: Duration,
}

/// Wait for a command's final record, retrying link errors (reconnecting) until `within`.
pub async fn recover(
    engine: &Engine,
    session_id: &str,
    command_id: &str,
    within: Duration,
) -> Result<Recovered> {
    let started = Instant::now();
    let mut retries = 0;
    let mut last_err = None;
    while started.elapsed() < within {
        match engine
            .command_wait(session_id, command_id, Duration::from_secs(20))
            .await
        {
            Ok(rec) if rec.status.is_final() => {
                return Ok(Recovered {
                    record: rec,
                    retries,
                    elapsed: started.elapsed(),
                });
            }
            Ok(_) => {}
            Err(e) if is_link_error(&e) => {
                retries += 1;
                last_err = Some(e);
                tokio::time::sleep(Duration::from_millis(300)).await;
            }
            Err(e) => bail!(
                "command_wait failed with a non-link error: {} ({})",
                e,
                e.code.as_str()
            ),
        }
    }
    bail!(
        "the command did not reach a final state within {within:?} (last error: {})",
        last_err
            .map(|e| e.to_string())
            .unwrap_or_else(|| "none".into())
    )
}

/// The newest command of a session (the one a killed caller left behind).
pub fn last_command(engine: &Engine, session_id: &str) -> Result<CommandRecord> {
    engine
        .command_list(session_id)
        .map_err(|e| anyhow!("command_list: {e}"))?
        .pop()
        .ok_or_else(|| anyhow!("no command recorded in session {session_id}"))
}

/// Wait until the session's newest command is `command` and its remote stdout holds at least
/// `min_bytes` (the command has really started producing output).
pub async fn wait_started(
    engine: &Engine,
    session_id: &str,
    command: &str,
    min_bytes: u64,
    within: Duration,
) -> Result<CommandRecord> {
    let end = Instant::now() + within;
    loop {
        if let Ok(rec) = last_command(engine, session_id)
            && rec.command == command
        {
            let size = std::fs::metadata(&rec.remote_stdout_file)
                .map(|m| m.len())
                .unwrap_or(0);
            if size >= min_bytes {
                return Ok(rec);
            }
        }
        if Instant::now() > end {
            bail!("the command did not start writing output within {within:?}");
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// Check a final record against the expected exit code and stdout bytes (sha256 of the local
/// copy and of a fresh read by offset).
pub async fn check_exact(
    engine: &Engine,
    rec: &CommandRecord,
    exit_code: i32,
    stdout: &[u8],
) -> Result<()> {
    if rec.exit_code != Some(exit_code) {
        bail!(
            "exit code {:?} (status {}), expected {exit_code}",
            rec.exit_code,
            rec.status.as_str()
        );
    }
    let local = std::fs::read(&rec.stdout_file_local)
        .with_context(|| format!("read {}", rec.stdout_file_local))?;
    let want = crate::sha256_hex(stdout);
    if crate::sha256_hex(&local) != want {
        bail!(
            "local stdout copy differs: {} bytes, expected {} (sha256 mismatch)",
            local.len(),
            stdout.len()
        );
    }
    let mut read = Vec::new();
    loop {
        let chunk = engine
            .read_output(
                &rec.session_id,
                &rec.command_id,
                remote_runner_engine::engine::OutputStream::Stdout,
                read.len() as u64,
                1 << 20,
            )
            .await
            .map_err(|e| anyhow!("read_output: {e}"))?;
        if chunk.is_empty() {
            break;
        }
        read.extend_from_slice(&chunk);
    }
    if crate::sha256_hex(&read) != want {
        bail!(
            "output read by offset differs: {} bytes, expected {}",
            read.len(),
            stdout.len()
        );
    }
    if rec.stdout_bytes != stdout.len() as u64 {
        bail!(
            "record says {} stdout bytes, expected {}",
            rec.stdout_bytes,
            stdout.len()
        );
    }
    Ok(())
}
