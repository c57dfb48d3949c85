//! Where a machine's keeper lives, and what identifies the build and the machine record it
//! serves.

use std::path::{Path, PathBuf};
use std::time::Duration;

use sha2::{Digest, Sha256};

use crate::error::Result;
use crate::machine::Machine;
use crate::ssh::ConnectOptions;

/// Environment variable: `off` disables the keeper (every call connects directly).
pub const ENV_KEEPER: &str = "REMOTE_RUNNER_KEEPER";
/// Environment variable: seconds a keeper stays up without requests (default 600).
pub const ENV_IDLE: &str = "REMOTE_RUNNER_KEEPER_IDLE";
/// Default idle time before a keeper ends.
pub const DEFAULT_IDLE: Duration = Duration::from_secs(600);

/// Files of one machine's keeper, all under `<state dir>/keepers/` (0700).
#[derive(Debug, Clone)]
pub struct KeeperPaths {
    pub dir: PathBuf,
    pub socket: PathBuf,
    pub lock: PathBuf,
    pub log: PathBuf,
}

impl KeeperPaths {
    pub fn new(state_dir: &Path, machine_id: &str) -> KeeperPaths {
        let dir = keepers_dir(state_dir);
        // Machine ids are validated names; the hash keeps any id a short, safe file name (a
        // unix socket path is limited to ~107 bytes).
        let name = short_hash(machine_id.as_bytes());
        KeeperPaths {
            socket: dir.join(format!("{name}.sock")),
            lock: dir.join(format!("{name}.lock")),
            log: dir.join(format!("{name}.log")),
            dir,
        }
    }

    /// Create the keepers directory (0700, checked like the state dir).
    pub fn ensure_dir(&self) -> Result<()> {
        crate::store::ensure_private_dir(&self.dir)
    }
}

pub fn keepers_dir(state_dir: &Path) -> PathBuf {
    state_dir.join("keepers")
}

/// Identifies this build: a CLI never talks to a keeper of another build (a new binary
/// installed over the old one has another size or modification time).
pub fn build_id() -> String {
    let exe = std::env::current_exe()
        .ok()
        .and_then(|p| std::fs::metadata(p).ok())
        .map(|m| {
            let mtime = m
                .modified()
                .ok()
                .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                .map_or(0, |d| d.as_nanos());
            format!("{}-{mtime}", m.len())
        })
        .unwrap_or_default();
    format!(
        "{}-p{}-{exe}",
        env!("CARGO_PKG_VERSION"),
        super::wire::PROTOCOL_VERSION
    )
}

/// Hash of a machine record and of what decides how it is reached and trusted: HOME (for
/// `~/.ssh`), the ssh_config override, the agent, the ssh_config file, and every source of host
/// trust a direct connection reads (the machine's or ssh_config's `UserKnownHostsFile`, the
/// system files: ssh_config's `GlobalKnownHostsFile`, else `/etc/ssh/ssh_known_hosts` and
/// `ssh_known_hosts2`; the jump hop's), by path and content, `@revoked` and `@cert-authority`
/// lines included. A keeper serves only what it was started with: a client whose hash differs
/// connects directly (and so checks the host key again) and the keeper ends; the keeper also
/// checks its hash on every tick and ends when it changed.
pub fn record_hash(machine: &Machine) -> String {
    let mut bytes = serde_json::to_vec(machine).unwrap_or_default();
    let home = dirs::home_dir().unwrap_or_default();
    let ssh_config = std::env::var_os("REMOTE_RUNNER_SSH_CONFIG")
        .map_or_else(|| home.join(".ssh/config"), PathBuf::from);
    // The files the CLI's direct connection trusts: its options differ from the defaults only
    // in how a passphrase is asked and the connect bound.
    let trust = crate::ssh::options::host_trust_files(machine, &ConnectOptions::default());
    let files = match trust {
        Ok(files) => files,
        Err(e) => {
            // An unreadable ssh_config: hash the error, so a fix changes the hash too.
            bytes.extend_from_slice(e.to_string().as_bytes());
            Vec::new()
        }
    };
    for file in std::iter::once(ssh_config).chain(files) {
        bytes.push(0);
        bytes.extend_from_slice(file.as_os_str().as_encoded_bytes());
        bytes.push(0);
        match std::fs::read(&file) {
            Ok(content) => bytes.extend_from_slice(&content),
            Err(e) => bytes.extend_from_slice(format!("unreadable: {:?}", e.kind()).as_bytes()),
        }
    }
    for var in ["HOME", "REMOTE_RUNNER_SSH_CONFIG", "SSH_AUTH_SOCK"] {
        bytes.push(0);
        bytes.extend_from_slice(var.as_bytes());
        if let Some(v) = std::env::var_os(var) {
            bytes.push(b'=');
            bytes.extend_from_slice(v.as_encoded_bytes());
        }
    }
    short_hash(&bytes)
}

fn short_hash(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .take(10)
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Whether the keeper is on (`REMOTE_RUNNER_KEEPER` is not `off`/`0`/`false`).
pub fn enabled() -> bool {
    !matches!(
        std::env::var(ENV_KEEPER).as_deref(),
        Ok("off" | "0" | "false" | "no")
    )
}

/// The idle time from `REMOTE_RUNNER_KEEPER_IDLE` (whole seconds, at least 1), else the
/// default. An unparsable value is reported by the caller, not silently replaced.
pub fn idle_from_env() -> std::result::Result<Duration, String> {
    match std::env::var(ENV_IDLE) {
        Err(_) => Ok(DEFAULT_IDLE),
        Ok(v) => match v.trim().parse::<u64>() {
            Ok(n) if n >= 1 => Ok(Duration::from_secs(n)),
            _ => Err(format!(
                "{ENV_IDLE}={v:?} is not a number of seconds >= 1; set it to e.g. 600, or unset it \
                 for the default (600)"
            )),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_short_and_per_machine() {
        let a = KeeperPaths::new(Path::new("/s"), "lab-gpu-01");
        let b = KeeperPaths::new(Path::new("/s"), "lab-gpu-02");
        assert_ne!(a.socket, b.socket);
        assert!(a.socket.starts_with("/s/keepers"));
        assert!(a.socket.to_str().unwrap().len() < 50);
    }

    #[test]
    fn record_hash_changes_with_the_record() {
        let mut m = Machine::local();
        let h1 = record_hash(&m);
        m.port = 2222;
        assert_ne!(h1, record_hash(&m));
    }
}
