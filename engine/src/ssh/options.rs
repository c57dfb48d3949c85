//! Options for reaching a machine over SSH, and the resolved target (machine record + ssh_config).

use std::path::PathBuf;
use std::time::Duration;

use crate::error::Result;
use crate::machine::{HostKeyPolicy, Machine};
use crate::secret::Secret;
use crate::ssh::config::{self, SshConfigSource};
use crate::ssh::known_hosts::KnownHostsFiles;

/// Where the passphrase of an encrypted identity file comes from.
#[derive(Debug, Clone, Default)]
pub enum PassphraseSource {
    /// Ask on the controlling terminal (`/dev/tty`), only when there is one.
    Tty,
    /// Use this passphrase.
    Given(Secret),
    /// Never ask: encrypted keys are skipped (the auth error says so).
    #[default]
    Never,
}

/// Which ssh-agent to use.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum AgentSource {
    /// `SSH_AUTH_SOCK` when set.
    #[default]
    Env,
    /// This socket.
    Socket(PathBuf),
    /// No agent.
    Disabled,
}

/// How to connect: credentials, timeouts, keepalive, pool limits. `Debug` never shows secrets.
#[derive(Debug, Clone)]
pub struct ConnectOptions {
    /// Password from the credential store (password and keyboard-interactive auth).
    pub password: Option<Secret>,
    pub passphrase: PassphraseSource,
    pub agent: AgentSource,
    /// Bound on TCP connect + handshake + auth. ssh_config `ConnectTimeout` when unset.
    pub connect_timeout: Option<Duration>,
    /// Keepalive interval; ssh_config `ServerAliveInterval`, else 15 s.
    pub keepalive_interval: Option<Duration>,
    /// Unanswered keepalives before the link counts as lost; `ServerAliveCountMax`, else 3.
    pub keepalive_max: Option<usize>,
    pub ssh_config: SshConfigSource,
    /// Channels per connection (OpenSSH `MaxSessions`, default 10), the SFTP channels included.
    /// Learnt downwards when the server refuses a channel.
    pub max_sessions: usize,
    /// Connections per machine before new channels queue.
    pub max_connections: usize,
    /// Also try `~/.ssh/id_ed25519`, `id_ecdsa`, `id_rsa`.
    pub default_identities: bool,
    /// Also read the system known_hosts files (ssh_config's `GlobalKnownHostsFile`, else
    /// `/etc/ssh/ssh_known_hosts` and `/etc/ssh/ssh_known_hosts2`).
    pub system_known_hosts: bool,
    /// Per-request SFTP timeout.
    pub sftp_request_timeout: Duration,
    /// Connection attempts after a drop, with [`crate::util::retry::CONNECT`]'s delays.
    pub reconnect_attempts: u32,
}

impl Default for ConnectOptions {
    fn default() -> Self {
        ConnectOptions {
            password: None,
            passphrase: PassphraseSource::Never,
            agent: AgentSource::Env,
            connect_timeout: None,
            keepalive_interval: None,
            keepalive_max: None,
            ssh_config: SshConfigSource::Default,
            max_sessions: 10,
            max_connections: 4,
            default_identities: true,
            system_known_hosts: true,
            sftp_request_timeout: Duration::from_secs(60),
            reconnect_attempts: crate::util::retry::CONNECT.attempts() as u32,
        }
    }
}

/// OpenSSH's default `GlobalKnownHostsFile`.
pub(crate) const SYSTEM_KNOWN_HOSTS: &[&str] =
    &["/etc/ssh/ssh_known_hosts", "/etc/ssh/ssh_known_hosts2"];

pub(crate) const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(20);
pub(crate) const DEFAULT_KEEPALIVE: Duration = Duration::from_secs(15);
pub(crate) const DEFAULT_KEEPALIVE_MAX: usize = 3;

/// Everything needed to open one SSH connection, after merging the machine record (explicit
/// values win) with ssh_config.
#[derive(Debug, Clone)]
pub(crate) struct Target {
    /// The machine this connection is for (a jump hop's is its machine's): fixes name it.
    pub machine_id: String,
    /// Network host name or address.
    pub host: String,
    pub port: u16,
    pub user: String,
    pub identity_files: Vec<PathBuf>,
    /// How many of `identity_files`, from the front, the user named (the machine's key_path,
    /// ssh_config IdentityFile): a problem with one of those is reported, while OpenSSH's
    /// defaults (`~/.ssh/id_*`) are tried only when they exist.
    pub named_identities: usize,
    pub known_hosts: KnownHostsFiles,
    pub policy: HostKeyPolicy,
    pub jump: Option<Box<Target>>,
    pub connect_timeout: Duration,
    pub keepalive_interval: Duration,
    pub keepalive_max: usize,
}

impl Target {
    /// Every known_hosts file this connection trusts (user and system, the jump hop's too), in
    /// order: what a connection keeper must watch.
    pub fn known_hosts_files(&self) -> Vec<PathBuf> {
        let mut files: Vec<PathBuf> = self
            .known_hosts
            .user
            .iter()
            .chain(&self.known_hosts.system)
            .cloned()
            .collect();
        if let Some(jump) = &self.jump {
            files.extend(jump.known_hosts_files());
        }
        files
    }

    /// `user@host:port` for messages.
    pub fn label(&self) -> String {
        format!("{}@{}:{}", self.user, self.host, self.port)
    }

    pub fn resolve(machine: &Machine, opts: &ConnectOptions) -> Result<Target> {
        Self::resolve_hop(machine, opts, true)
    }

    fn resolve_hop(machine: &Machine, opts: &ConnectOptions, follow_jump: bool) -> Result<Target> {
        let name = machine
            .ssh_config_host
            .clone()
            .unwrap_or_else(|| machine.host.clone());
        let hc = config::query(&opts.ssh_config, &name)?;
        let host = if machine.host == name {
            hc.host_name.clone().unwrap_or_else(|| machine.host.clone())
        } else {
            machine.host.clone()
        };
        let user = if machine.user.is_empty() {
            hc.user
                .clone()
                .or_else(|| std::env::var("USER").ok())
                .unwrap_or_else(|| "root".into())
        } else {
            machine.user.clone()
        };
        let port = if machine.port == 0 {
            hc.port.unwrap_or(22)
        } else {
            machine.port
        };
        let mut identity_files: Vec<PathBuf> = Vec::new();
        if let Some(k) = &machine.key_path {
            identity_files.push(config::expand_tilde(std::path::Path::new(k)));
        }
        identity_files.extend(hc.identity_files.iter().cloned());
        let mut seen = std::collections::HashSet::new();
        identity_files.retain(|p| seen.insert(p.clone()));
        let named_identities = identity_files.len();
        if opts.default_identities
            && let Some(home) = dirs::home_dir()
        {
            for f in ["id_ed25519", "id_ecdsa", "id_rsa"] {
                let default = home.join(".ssh").join(f);
                if seen.insert(default.clone()) {
                    identity_files.push(default);
                }
            }
        }
        let user_files = if let Some(f) = &machine.known_hosts_file {
            vec![config::expand_tilde(std::path::Path::new(f))]
        } else if !hc.user_known_hosts_files.is_empty() {
            hc.user_known_hosts_files.clone()
        } else {
            dirs::home_dir()
                .map(|h| vec![h.join(".ssh").join("known_hosts")])
                .unwrap_or_default()
        };
        // OpenSSH's GlobalKnownHostsFile, else its default pair.
        let system = if !opts.system_known_hosts {
            Vec::new()
        } else if !hc.global_known_hosts_files.is_empty() {
            hc.global_known_hosts_files.clone()
        } else {
            SYSTEM_KNOWN_HOSTS.iter().map(PathBuf::from).collect()
        };
        let known_hosts = KnownHostsFiles {
            user: user_files,
            system,
        };
        let connect_timeout = opts
            .connect_timeout
            .or(hc.connect_timeout)
            .unwrap_or(DEFAULT_CONNECT_TIMEOUT);
        let keepalive_interval = opts
            .keepalive_interval
            .or(hc.server_alive_interval)
            .unwrap_or(DEFAULT_KEEPALIVE);
        let keepalive_max = opts
            .keepalive_max
            .or(hc.server_alive_count_max)
            .unwrap_or(DEFAULT_KEEPALIVE_MAX)
            .max(1);
        let jump = match hc.proxy_jump.as_ref().filter(|_| follow_jump) {
            Some(spec) => Some(Box::new(resolve_jump(
                &machine.machine_id,
                spec,
                opts,
                &known_hosts,
                machine.host_key_policy,
            )?)),
            None => None,
        };
        Ok(Target {
            machine_id: machine.machine_id.clone(),
            host,
            port,
            user,
            identity_files,
            named_identities,
            known_hosts,
            policy: machine.host_key_policy,
            jump,
            connect_timeout,
            keepalive_interval,
            keepalive_max,
        })
    }
}

/// Every known_hosts file a direct connection to `machine` with `opts` trusts (the machine's
/// or ssh_config's user files, the system files, the jump hop's).
pub fn host_trust_files(machine: &Machine, opts: &ConnectOptions) -> Result<Vec<PathBuf>> {
    Ok(Target::resolve(machine, opts)?.known_hosts_files())
}

/// A ProxyJump hop: `[user@]host[:port]`, where host may itself be an ssh_config alias.
fn resolve_jump(
    machine_id: &str,
    spec: &str,
    opts: &ConnectOptions,
    parent_known_hosts: &KnownHostsFiles,
    policy: HostKeyPolicy,
) -> Result<Target> {
    let (user, rest) = match spec.rsplit_once('@') {
        Some((u, r)) => (Some(u.to_string()), r),
        None => (None, spec),
    };
    let (name, port) = match rest.rsplit_once(':') {
        Some((h, p)) if p.parse::<u16>().is_ok() => (h.to_string(), p.parse::<u16>().ok()),
        _ => (rest.to_string(), None),
    };
    let machine = Machine {
        machine_id: format!("jump:{name}"),
        host: name.clone(),
        port: port.unwrap_or(0),
        user: user.unwrap_or_default(),
        auth_type: crate::machine::AuthType::Key,
        key_path: None,
        default_cwd: "/".into(),
        startup_commands: Vec::new(),
        path_mappings: Vec::new(),
        host_key_policy: policy,
        known_hosts_file: None,
        ssh_config_host: None,
        has_password: false,
        login_env: true,
        scheduler: Default::default(),
    };
    // A hop's own ProxyJump is not followed (one hop), which also rules out loops.
    let mut t = Target::resolve_hop(&machine, opts, false)?;
    t.machine_id = machine_id.to_string();
    let hc = config::query(&opts.ssh_config, &name)?;
    if hc.user_known_hosts_files.is_empty() {
        t.known_hosts = parent_known_hosts.clone();
    }
    Ok(t)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::machine::AuthType;

    fn machine(host: &str, alias: Option<&str>) -> Machine {
        Machine {
            machine_id: "m".into(),
            host: host.into(),
            port: 0,
            user: String::new(),
            auth_type: AuthType::Key,
            key_path: Some("/keys/explicit".into()),
            default_cwd: "/".into(),
            startup_commands: Vec::new(),
            path_mappings: Vec::new(),
            host_key_policy: HostKeyPolicy::Strict,
            known_hosts_file: None,
            ssh_config_host: alias.map(str::to_string),
            has_password: false,
            login_env: true,
            scheduler: Default::default(),
        }
    }

    #[test]
    fn ssh_config_fills_gaps_and_explicit_values_win() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = dir.path().join("config");
        std::fs::write(
            &cfg,
            "Host box\n  HostName 192.0.2.9\n  Port 2201\n  User alice\n  IdentityFile /keys/cfg\n  \
             UserKnownHostsFile /kh/box\n  ServerAliveInterval 2\n  ServerAliveCountMax 5\n  ProxyJump bob@jump:2022\n",
        )
        .unwrap();
        let opts = ConnectOptions {
            ssh_config: SshConfigSource::File(cfg),
            default_identities: false,
            system_known_hosts: false,
            ..ConnectOptions::default()
        };
        let t = Target::resolve(&machine("box", None), &opts).unwrap();
        assert_eq!(t.host, "192.0.2.9");
        assert_eq!(t.port, 2201);
        assert_eq!(t.user, "alice");
        assert_eq!(
            t.identity_files,
            vec![PathBuf::from("/keys/explicit"), PathBuf::from("/keys/cfg")]
        );
        assert_eq!(t.known_hosts.user, vec![PathBuf::from("/kh/box")]);
        assert_eq!(t.keepalive_interval, Duration::from_secs(2));
        assert_eq!(t.keepalive_max, 5);
        let jump = t.jump.as_ref().expect("jump hop");
        assert_eq!(
            (jump.host.as_str(), jump.port, jump.user.as_str()),
            ("jump", 2022, "bob")
        );
        assert!(jump.jump.is_none());

        // Options override ssh_config's keepalive.
        let opts2 = ConnectOptions {
            keepalive_interval: Some(Duration::from_secs(1)),
            keepalive_max: Some(2),
            ..opts
        };
        let t = Target::resolve(&machine("box", None), &opts2).unwrap();
        assert_eq!(
            (t.keepalive_interval, t.keepalive_max),
            (Duration::from_secs(1), 2)
        );
    }

    #[test]
    fn defaults_without_ssh_config() {
        let opts = ConnectOptions {
            ssh_config: SshConfigSource::Disabled,
            ..ConnectOptions::default()
        };
        let t = Target::resolve(&machine("10.1.1.1", None), &opts).unwrap();
        assert_eq!(t.port, 22);
        assert_eq!(t.keepalive_interval, DEFAULT_KEEPALIVE);
        assert_eq!(t.keepalive_max, DEFAULT_KEEPALIVE_MAX);
        assert_eq!(t.connect_timeout, DEFAULT_CONNECT_TIMEOUT);
        assert!(t.jump.is_none());
    }
}
