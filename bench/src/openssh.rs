//! The OpenSSH side: `ssh`, `scp`, `sftp` and `rsync -e ssh` pointed at the bed with the same key
//! and known_hosts our side uses, and a ControlMaster connection for the warm comparisons.
//!
//! Every client runs with `-F /dev/null` (no user ssh_config), `IdentitiesOnly`, `BatchMode` and
//! no agent, so both sides authenticate the same way.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use crate::bed::Bed;

/// How to reach the bed with the OpenSSH tools.
#[derive(Debug, Clone)]
pub struct OpenSsh {
    /// `-o` options shared by ssh, scp and sftp.
    options: Vec<String>,
    /// Connection sharing: none, or the socket of a [`ControlMaster`].
    mux: Vec<String>,
    /// `user@127.0.0.1`.
    destination: String,
}

impl OpenSsh {
    pub fn new(bed: &Bed) -> OpenSsh {
        let options = [
            format!("Port={}", bed.sshd.port),
            format!("IdentityFile={}", bed.key().display()),
            "IdentitiesOnly=yes".to_string(),
            "IdentityAgent=none".to_string(),
            format!("UserKnownHostsFile={}", bed.sshd.known_hosts.display()),
            "GlobalKnownHostsFile=/dev/null".to_string(),
            "StrictHostKeyChecking=yes".to_string(),
            "BatchMode=yes".to_string(),
            "LogLevel=ERROR".to_string(),
        ]
        .into_iter()
        .flat_map(|o| ["-o".to_string(), o])
        .collect();
        OpenSsh {
            options,
            mux: vec![
                "-o".into(),
                "ControlMaster=no".into(),
                "-o".into(),
                "ControlPath=none".into(),
            ],
            destination: format!("{}@127.0.0.1", bed.sshd.user()),
        }
    }

    /// `ssh host remote`: a fresh connection, or a channel on the master for
    /// [`ControlMaster::client`].
    pub fn ssh(&self, remote: &str) -> Command {
        let mut cmd = self.tool("ssh");
        cmd.arg(&self.destination).arg(remote);
        cmd
    }

    /// `sftp -b batch` on a fresh connection.
    pub fn sftp_batch(&self, batch: &Path) -> Command {
        let mut cmd = self.tool("sftp");
        cmd.arg("-b").arg(batch).arg(&self.destination);
        cmd
    }

    /// `scp -r` (SFTP protocol, OpenSSH's default) from `src` to `dest` (either may be remote,
    /// written `host:path` with [`OpenSsh::remote_path`]).
    pub fn scp_recursive(&self, src: &str, dest: &str) -> Command {
        let mut cmd = self.tool("scp");
        cmd.arg("-r").arg("-q").arg(src).arg(dest);
        cmd
    }

    /// `rsync -a -e 'ssh ...'` from `src` to `dest`.
    pub fn rsync(&self, src: &str, dest: &str) -> Command {
        let mut cmd = Command::new("rsync");
        let shell = std::iter::once("ssh -F /dev/null".to_string())
            .chain(self.options.iter().cloned())
            .chain(self.mux.iter().cloned())
            .collect::<Vec<_>>()
            .join(" ");
        cmd.arg("-a")
            .arg("-e")
            .arg(shell)
            .arg(src)
            .arg(dest)
            .env_remove("SSH_AUTH_SOCK");
        cmd
    }

    /// The key exchange and cipher OpenSSH negotiates with the bed (from `ssh -v`), for notes.
    pub fn negotiated(&self) -> String {
        let mut cmd = self.tool("ssh");
        cmd.arg("-v").arg(&self.destination).arg("true");
        let Ok(out) = cmd.output() else {
            return "unknown".to_string();
        };
        let log = String::from_utf8_lossy(&out.stderr);
        let find = |key: &str| {
            log.lines()
                .find_map(|l| l.split_once(key))
                .and_then(|(_, v)| v.split_whitespace().next())
                .map(str::to_string)
                .unwrap_or_else(|| "unknown".to_string())
        };
        format!(
            "kex {}, cipher {}",
            find("kex: algorithm:"),
            find("kex: server->client cipher:")
        )
    }

    /// `host:path` for scp and rsync.
    pub fn remote_path(&self, path: &Path) -> String {
        format!("{}:{}", self.destination, path.display())
    }

    /// Open a ControlMaster connection with its socket under `dir`; later
    /// [`ControlMaster::ssh`] calls (and every tool of [`ControlMaster::client`]) reuse it.
    pub fn control_master(&self, dir: &Path) -> Result<ControlMaster> {
        self.control_master_with(dir, &[])
    }

    /// [`OpenSsh::control_master`] with extra `ssh` options for the master connection (e.g.
    /// `-c CIPHER`: the tools that go through it use what the master negotiated).
    pub fn control_master_with(&self, dir: &Path, options: &[&str]) -> Result<ControlMaster> {
        let socket = dir.join("ctl.sock");
        let mut cmd = self.bare_tool("ssh");
        cmd.args(options);
        // The master forks into the background once authenticated; its stderr goes to a file
        // so no pipe stays open behind it.
        let log_path = dir.join("ctl.log");
        let log = std::fs::File::create(&log_path)?;
        cmd.args(["-o", "ControlMaster=yes", "-o", "ControlPersist=600"])
            .arg("-o")
            .arg(format!("ControlPath={}", socket.display()))
            .arg("-N")
            .arg("-f")
            .arg(&self.destination)
            .stdout(Stdio::null())
            .stderr(log);
        let status = cmd.status().context("spawn ssh for the ControlMaster")?;
        if !status.success() {
            bail!(
                "the OpenSSH ControlMaster did not start ({status}): {}",
                std::fs::read_to_string(&log_path)
                    .unwrap_or_default()
                    .trim()
            );
        }
        let mut client = self.clone();
        client.mux = vec![
            "-o".into(),
            "ControlMaster=no".into(),
            "-o".into(),
            format!("ControlPath={}", socket.display()),
        ];
        let master = ControlMaster { client, socket };
        run(&mut master.ssh("true")).context("first command through the ControlMaster")?;
        Ok(master)
    }

    fn tool(&self, name: &str) -> Command {
        let mut cmd = self.bare_tool(name);
        cmd.args(&self.mux);
        cmd
    }

    /// The tool with the shared options but no connection-sharing options.
    fn bare_tool(&self, name: &str) -> Command {
        let mut cmd = Command::new(name);
        cmd.arg("-F")
            .arg("/dev/null")
            .args(&self.options)
            .env_remove("SSH_AUTH_SOCK")
            .stdin(Stdio::null());
        cmd
    }
}

/// A running OpenSSH ControlMaster; closed (`ssh -O exit`) on drop.
#[derive(Debug)]
pub struct ControlMaster {
    /// Tools whose connections go through this master.
    client: OpenSsh,
    socket: PathBuf,
}

impl ControlMaster {
    /// `ssh -o ControlPath=socket host remote`: a new channel on the warm connection.
    pub fn ssh(&self, remote: &str) -> Command {
        self.client.ssh(remote)
    }

    /// ssh, sftp, scp and rsync going through this master.
    pub fn client(&self) -> &OpenSsh {
        &self.client
    }
}

impl Drop for ControlMaster {
    fn drop(&mut self) {
        let _ = self
            .client
            .bare_tool("ssh")
            .arg("-S")
            .arg(&self.socket)
            .args(["-O", "exit"])
            .arg(&self.client.destination)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

/// Run to completion; fail with the command's stderr when it does not exit 0.
pub fn run(cmd: &mut Command) -> Result<Output> {
    let out = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .output()
        .with_context(|| format!("spawn {:?}", cmd.get_program()))?;
    if !out.status.success() {
        bail!(
            "{:?} {:?} failed with {}: {}",
            cmd.get_program(),
            cmd.get_args().collect::<Vec<_>>(),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(out)
}

/// Wall time of one successful run (stdout discarded).
pub fn time_run(cmd: &mut Command) -> Result<Duration> {
    cmd.stdout(Stdio::null());
    let start = Instant::now();
    let out = cmd
        .stderr(Stdio::piped())
        .output()
        .with_context(|| format!("spawn {:?}", cmd.get_program()))?;
    let took = start.elapsed();
    if !out.status.success() {
        bail!(
            "{:?} {:?} failed with {}: {}",
            cmd.get_program(),
            cmd.get_args().collect::<Vec<_>>(),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(took)
}

/// Wall time of one successful run whose stdout is read (and counted) by this process, as a
/// consumer of streamed output would.
pub fn time_counting_stdout(cmd: &mut Command) -> Result<(Duration, u64)> {
    use std::io::Read;
    let start = Instant::now();
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .with_context(|| format!("spawn {:?}", cmd.get_program()))?;
    let mut stdout = child
        .stdout
        .take()
        .ok_or_else(|| anyhow::anyhow!("no stdout"))?;
    let mut buf = vec![0u8; 256 * 1024];
    let mut total = 0u64;
    loop {
        let n = stdout.read(&mut buf)?;
        if n == 0 {
            break;
        }
        total += n as u64;
    }
    let status = child.wait()?;
    let took = start.elapsed();
    if !status.success() {
        bail!("{:?} failed with {status}", cmd.get_program());
    }
    Ok((took, total))
}
