//! `~/.ssh/config` resolution (Host aliases, Include, wildcards) on top of ssh2-config.
//!
//! Only the options the SSH layer acts on are extracted ([`HostConfig`]). The file in use is
//! chosen by [`SshConfigSource`]: tests point it at their own file and never touch `~/.ssh`.

use std::fs::File;
use std::io::BufReader;
use std::path::{Path, PathBuf};
use std::time::Duration;

use ssh2_config::{DefaultAlgorithms, ParseRule, SshConfig};

use crate::error::{Error, ErrorCode, Result};
use crate::machine::{AuthType, HostKeyPolicy, Machine};

/// Environment variable naming the ssh_config file to use instead of `~/.ssh/config`.
pub const SSH_CONFIG_ENV: &str = "REMOTE_RUNNER_SSH_CONFIG";

/// Which ssh_config file to read.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum SshConfigSource {
    /// `$REMOTE_RUNNER_SSH_CONFIG` if set, else `~/.ssh/config` (a missing file is fine).
    #[default]
    Default,
    /// This file (must exist).
    File(PathBuf),
    /// No ssh_config at all.
    Disabled,
}

impl SshConfigSource {
    /// The file to read, or `None` when there is nothing to read.
    fn path(&self) -> Result<Option<PathBuf>> {
        match self {
            SshConfigSource::Disabled => Ok(None),
            SshConfigSource::File(p) => {
                if p.exists() {
                    Ok(Some(p.clone()))
                } else {
                    Err(Error::new(
                        ErrorCode::ConfigInvalid,
                        format!(
                            "ssh_config file {} does not exist; fix the path or unset {SSH_CONFIG_ENV}",
                            p.display()
                        ),
                    ))
                }
            }
            SshConfigSource::Default => {
                if let Some(p) = std::env::var_os(SSH_CONFIG_ENV).filter(|v| !v.is_empty()) {
                    return SshConfigSource::File(PathBuf::from(p)).path();
                }
                Ok(dirs::home_dir()
                    .map(|h| h.join(".ssh").join("config"))
                    .filter(|p| p.exists()))
            }
        }
    }
}

/// The options of one host after applying every matching `Host` block (first value wins).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HostConfig {
    pub host_name: Option<String>,
    pub user: Option<String>,
    pub port: Option<u16>,
    pub identity_files: Vec<PathBuf>,
    pub user_known_hosts_files: Vec<PathBuf>,
    /// `GlobalKnownHostsFile`: the system files read instead of `/etc/ssh/ssh_known_hosts`.
    pub global_known_hosts_files: Vec<PathBuf>,
    /// `StrictHostKeyChecking` as written (`yes`, `accept-new`, `no`, `ask`, ...).
    pub strict_host_key_checking: Option<String>,
    /// The first ProxyJump hop (`[user@]host[:port]` or an alias); `none` is dropped.
    pub proxy_jump: Option<String>,
    pub server_alive_interval: Option<Duration>,
    pub server_alive_count_max: Option<usize>,
    pub connect_timeout: Option<Duration>,
    /// A `Host` line names this exact name (not only wildcards): it is a real alias.
    pub is_alias: bool,
}

impl HostConfig {
    /// The host key policy the file asks for, if any. `no`/`off` map to accept-new: a changed
    /// key is refused regardless, we never accept one silently.
    pub fn host_key_policy(&self) -> Option<HostKeyPolicy> {
        match self.strict_host_key_checking.as_deref()? {
            "accept-new" | "no" | "off" => Some(HostKeyPolicy::AcceptNew),
            _ => Some(HostKeyPolicy::Strict),
        }
    }
}

/// Parse the configured file (Include and wildcards handled by ssh2-config).
fn load(source: &SshConfigSource) -> Result<Option<(PathBuf, SshConfig)>> {
    let Some(path) = source.path()? else {
        return Ok(None);
    };
    let file = File::open(&path).map_err(|e| Error::io(format!("open {}", path.display()), &e))?;
    let mut reader = BufReader::new(file);
    let config = SshConfig::default()
        .default_algorithms(DefaultAlgorithms::empty())
        .parse(
            &mut reader,
            ParseRule::ALLOW_UNKNOWN_FIELDS | ParseRule::ALLOW_UNSUPPORTED_FIELDS,
        )
        .map_err(|e| {
            Error::new(
                ErrorCode::ConfigInvalid,
                format!(
                    "cannot parse ssh_config {}: {e}; fix the file",
                    path.display()
                ),
            )
        })?;
    Ok(Some((path, config)))
}

/// Resolve the options for `name` (an alias or a host name).
pub fn query(source: &SshConfigSource, name: &str) -> Result<HostConfig> {
    let Some((_path, config)) = load(source)? else {
        return Ok(HostConfig::default());
    };
    let params = config.query(name);
    let field = |key: &str| -> Option<String> {
        params
            .unsupported_fields
            .get(key)
            .or_else(|| params.ignored_fields.get(key))
            .and_then(|v| v.first())
            .map(|s| s.trim_matches('"').to_string())
    };
    // A list of files (`none` dropped, `~/` expanded).
    let files = |key: &str| -> Vec<PathBuf> {
        params
            .unsupported_fields
            .get(key)
            .or_else(|| params.ignored_fields.get(key))
            .map(|v| {
                v.iter()
                    .filter(|s| !s.eq_ignore_ascii_case("none"))
                    .map(|s| expand_tilde(Path::new(s.trim_matches('"'))))
                    .collect()
            })
            .unwrap_or_default()
    };
    let is_alias = config.get_hosts().iter().any(|h| {
        h.pattern
            .iter()
            .any(|c| !c.negated && c.pattern == name && !c.pattern.contains(['*', '?']))
            && !h.pattern.iter().any(|c| c.negated && c.pattern == name)
    });
    let proxy_jump = params
        .proxy_jump
        .as_ref()
        .and_then(|hops| hops.first().cloned())
        .filter(|h| !h.eq_ignore_ascii_case("none") && !h.is_empty());
    Ok(HostConfig {
        host_name: params.host_name.clone(),
        user: params.user.clone(),
        port: params.port,
        identity_files: params
            .identity_file
            .clone()
            .unwrap_or_default()
            .into_iter()
            .map(|p| expand_tilde(&p))
            .collect(),
        user_known_hosts_files: files("userknownhostsfile"),
        global_known_hosts_files: files("globalknownhostsfile"),
        strict_host_key_checking: field("stricthostkeychecking").map(|s| s.to_ascii_lowercase()),
        proxy_jump,
        server_alive_interval: params.server_alive_interval.filter(|d| !d.is_zero()),
        server_alive_count_max: field("serveralivecountmax").and_then(|s| s.parse().ok()),
        connect_timeout: params.connect_timeout,
        is_alias,
    })
}

/// Expand a leading `~/` against the home directory.
pub fn expand_tilde(p: &Path) -> PathBuf {
    if let Ok(rest) = p.strip_prefix("~")
        && let Some(home) = dirs::home_dir()
    {
        return home.join(rest);
    }
    p.to_path_buf()
}

/// A machine record for an ssh_config Host alias, or `None` when no `Host` line names it.
///
/// HostName, Port, User, IdentityFile, UserKnownHostsFile and StrictHostKeyChecking come from
/// the file; the default cwd is the login user's home (`~`), resolved by the engine.
pub fn machine_from_alias(alias: &str, config: &SshConfigSource) -> Result<Option<Machine>> {
    let hc = query(config, alias)?;
    if !hc.is_alias {
        return Ok(None);
    }
    let user = hc
        .user
        .clone()
        .or_else(|| std::env::var("USER").ok())
        .unwrap_or_else(|| "root".to_string());
    let key_path = hc
        .identity_files
        .first()
        .map(|p| p.to_string_lossy().into_owned());
    Ok(Some(Machine {
        machine_id: alias.to_string(),
        host: hc.host_name.clone().unwrap_or_else(|| alias.to_string()),
        port: hc.port.unwrap_or(22),
        default_cwd: if user == "root" {
            "/root".to_string()
        } else {
            format!("/home/{user}")
        },
        user,
        auth_type: if key_path.is_some() {
            AuthType::Key
        } else {
            AuthType::Agent
        },
        key_path,
        startup_commands: Vec::new(),
        path_mappings: Vec::new(),
        host_key_policy: hc.host_key_policy().unwrap_or_default(),
        known_hosts_file: hc
            .user_known_hosts_files
            .first()
            .map(|p| p.to_string_lossy().into_owned()),
        ssh_config_host: Some(alias.to_string()),
        has_password: false,
        login_env: true,
        scheduler: Default::default(),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn source(text: &str) -> (tempfile::TempDir, SshConfigSource) {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("config");
        std::fs::write(&p, text).unwrap();
        (dir, SshConfigSource::File(p))
    }

    #[test]
    fn alias_options_are_resolved() {
        let (_d, src) = source(
            "Host web\n  HostName 10.0.0.5\n  Port 2200\n  User deploy\n  IdentityFile /k/id\n  \
             UserKnownHostsFile /k/kh\n  GlobalKnownHostsFile /g/a /g/b\n  StrictHostKeyChecking accept-new\n  ProxyJump jump@bastion:22\n  \
             ServerAliveInterval 5\n  ServerAliveCountMax 4\nHost *\n  User fallback\n  Port 22\n",
        );
        let hc = query(&src, "web").unwrap();
        assert!(hc.is_alias);
        assert_eq!(hc.host_name.as_deref(), Some("10.0.0.5"));
        assert_eq!(hc.port, Some(2200));
        assert_eq!(hc.user.as_deref(), Some("deploy"));
        assert_eq!(hc.identity_files, vec![PathBuf::from("/k/id")]);
        assert_eq!(hc.user_known_hosts_files, vec![PathBuf::from("/k/kh")]);
        assert_eq!(
            hc.global_known_hosts_files,
            vec![PathBuf::from("/g/a"), PathBuf::from("/g/b")]
        );
        assert_eq!(hc.host_key_policy(), Some(HostKeyPolicy::AcceptNew));
        assert_eq!(hc.proxy_jump.as_deref(), Some("jump@bastion:22"));
        assert_eq!(hc.server_alive_interval, Some(Duration::from_secs(5)));
        assert_eq!(hc.server_alive_count_max, Some(4));
        let m = machine_from_alias("web", &src).unwrap().unwrap();
        assert_eq!(m.host, "10.0.0.5");
        assert_eq!(m.port, 2200);
        assert_eq!(m.user, "deploy");
        assert_eq!(m.ssh_config_host.as_deref(), Some("web"));
    }

    #[test]
    fn wildcards_apply_but_do_not_make_an_alias() {
        let (_d, src) = source("Host *.corp\n  User corp\nHost *\n  Port 2022\n");
        let hc = query(&src, "a.corp").unwrap();
        assert_eq!(hc.user.as_deref(), Some("corp"));
        assert_eq!(hc.port, Some(2022));
        assert!(!hc.is_alias);
        assert!(machine_from_alias("a.corp", &src).unwrap().is_none());
    }

    #[test]
    fn include_is_followed() {
        let dir = tempfile::tempdir().unwrap();
        let inc = dir.path().join("inc.conf");
        std::fs::write(&inc, "Host inner\n  HostName 192.0.2.7\n").unwrap();
        let main = dir.path().join("config");
        std::fs::write(&main, format!("Include {}\n", inc.display())).unwrap();
        let hc = query(&SshConfigSource::File(main), "inner").unwrap();
        assert_eq!(hc.host_name.as_deref(), Some("192.0.2.7"));
    }

    #[test]
    fn missing_explicit_file_is_a_config_error() {
        let err = query(&SshConfigSource::File("/nonexistent/rr".into()), "x").unwrap_err();
        assert_eq!(err.code, ErrorCode::ConfigInvalid);
    }
}
