//! A machine record: how to reach one remote Linux host. No credentials live here; a password is
//! kept in the credential store under the machine id.

use serde::{Deserialize, Serialize};

/// The id of the built-in machine that runs on this host without SSH.
pub const LOCAL_MACHINE_ID: &str = "local";

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum AuthType {
    /// An identity file (`key_path`, or ssh_config IdentityFile).
    #[default]
    Key,
    /// Keys held by ssh-agent (`SSH_AUTH_SOCK`).
    Agent,
    /// A password from the credential store (also used for keyboard-interactive).
    Password,
    /// No SSH at all: the built-in `local` machine.
    Local,
}

/// What to do with a server host key that is not in known_hosts. A changed key is always refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum HostKeyPolicy {
    /// Refuse unknown keys; the error shows the fingerprint and how to accept it.
    #[default]
    Strict,
    /// Record an unknown key on first use (like OpenSSH's `StrictHostKeyChecking accept-new`).
    AcceptNew,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PathMapping {
    /// Prefix as seen by commands run in the session (e.g. `/mnt/c/Users/x/proj`).
    pub command_prefix: String,
    /// The same directory as seen by SFTP (e.g. `C:/Users/x/proj`).
    pub file_prefix: String,
}

/// The stored machine record (the contract's minimum fields plus SSH options).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Machine {
    pub machine_id: String,
    pub host: String,
    pub port: u16,
    pub user: String,
    pub auth_type: AuthType,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_path: Option<String>,
    pub default_cwd: String,
    #[serde(default)]
    pub startup_commands: Vec<String>,
    #[serde(default)]
    pub path_mappings: Vec<PathMapping>,
    #[serde(default)]
    pub host_key_policy: HostKeyPolicy,
    /// known_hosts file to use instead of `~/.ssh/known_hosts` (and ssh_config's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub known_hosts_file: Option<String>,
    /// An ssh_config Host alias this machine was resolved from, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ssh_config_host: Option<String>,
    /// Whether a password is held in the credential store (the value never is here).
    #[serde(default)]
    pub has_password: bool,
    /// Give session shells the environment a login shell of the account's own shell has (PATH
    /// additions, conda, nvm, ...). Off: the session shell gets what sshd's exec gives.
    #[serde(default = "login_env_default")]
    pub login_env: bool,
    /// Who places sessions and runs: nobody (they run on this host) or Slurm (this host is a
    /// cluster's login node; sessions run in allocations, runs are batch jobs). See docs/slurm.md.
    #[serde(default, skip_serializing_if = "Scheduler::is_none")]
    pub scheduler: Scheduler,
}

/// The scheduler of a machine reached over SSH.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Scheduler {
    /// Sessions and runs run on the machine itself.
    #[default]
    None,
    /// The machine is a Slurm login node: sessions and runs are placed by Slurm.
    Slurm {
        /// The user's default `salloc`/`sbatch` arguments (partition, time, account, gres, ...),
        /// one word per element.
        #[serde(default)]
        args: Vec<String>,
    },
}

impl Scheduler {
    pub fn is_none(&self) -> bool {
        *self == Scheduler::None
    }

    /// The default Slurm arguments, when the machine is scheduled by Slurm.
    pub fn slurm_args(&self) -> Option<&[String]> {
        match self {
            Scheduler::Slurm { args } => Some(args),
            Scheduler::None => None,
        }
    }

    /// `none` or `slurm`.
    pub fn kind(&self) -> &'static str {
        match self {
            Scheduler::None => "none",
            Scheduler::Slurm { .. } => "slurm",
        }
    }
}

fn login_env_default() -> bool {
    true
}

impl Machine {
    /// The built-in `local` machine: this host, no SSH, the user's home as default cwd.
    pub fn local() -> Machine {
        let home = dirs::home_dir()
            .map(|p| p.to_string_lossy().into_owned())
            .unwrap_or_else(|| "/tmp".to_string());
        let user = std::env::var("USER").unwrap_or_else(|_| "root".to_string());
        Machine {
            machine_id: LOCAL_MACHINE_ID.to_string(),
            host: "localhost".to_string(),
            port: 0,
            user,
            auth_type: AuthType::Local,
            key_path: None,
            default_cwd: home,
            startup_commands: Vec::new(),
            path_mappings: Vec::new(),
            host_key_policy: HostKeyPolicy::Strict,
            known_hosts_file: None,
            ssh_config_host: None,
            has_password: false,
            login_env: true,
            scheduler: Scheduler::None,
        }
    }

    pub fn is_local(&self) -> bool {
        self.auth_type == AuthType::Local
    }

    /// Whether the record can be used as it is: a host name that no ssh would read as an
    /// option, a login name, an absolute (or `~/`) default cwd, no empty startup command.
    /// Every machine passes this before it is stored or used (`machine add`, the provider's
    /// ad-hoc machine).
    pub fn check(&self) -> Result<(), FieldProblem> {
        let problem = |field, problem: String| Err(FieldProblem { field, problem });
        let odd = |s: &str| s.is_empty() || s.chars().any(|c| c.is_whitespace() || c.is_control());
        if odd(&self.host) {
            return problem(
                MachineField::Host,
                format!(
                    "{:?} is not a host name or IP address; give one like 192.0.2.10 or \
                     gpu.example.com",
                    self.host
                ),
            );
        }
        if self.host.starts_with('-') {
            return problem(
                MachineField::Host,
                "must not start with '-'; give a host name or IP address".into(),
            );
        }
        if odd(&self.user) {
            return problem(
                MachineField::User,
                format!(
                    "{:?} is not a login name; give the remote account, e.g. ely",
                    self.user
                ),
            );
        }
        if let Err(why) = check_dir_path(&self.default_cwd) {
            return problem(MachineField::DefaultCwd, why);
        }
        if self.startup_commands.iter().any(|c| c.trim().is_empty()) {
            return problem(
                MachineField::StartupCommand,
                "must not be empty; drop the empty one".into(),
            );
        }
        Ok(())
    }
}

/// A field of a machine record, as [`Machine::check`] names it: each face says it its own way
/// (the CLI's flag, the provider's variable).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MachineField {
    Host,
    User,
    DefaultCwd,
    StartupCommand,
}

/// A field that cannot be used, and why (`problem` reads after the field's name).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldProblem {
    pub field: MachineField,
    pub problem: String,
}

impl FieldProblem {
    /// The `invalid_argument` error, naming the field `name` (`--host`, ...).
    pub fn into_error(self, name: &str) -> crate::error::Error {
        crate::error::Error::invalid(format!("{name} {}", self.problem))
    }
}

/// A directory on the machine as a record may name it: absolute, or `~` / `~/...`, without
/// control characters. The problem reads after the field's name.
pub fn check_dir_path(path: &str) -> Result<(), String> {
    if !(path.starts_with('/') || path == "~" || path.starts_with("~/")) {
        return Err(format!(
            "{path:?} must be an absolute path on the machine (like /home/ely) or start with ~/"
        ));
    }
    if path.chars().any(char::is_control) {
        return Err("must not contain control characters".into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn check_names_the_field_at_fault() {
        let good = Machine {
            machine_id: "lab".into(),
            host: "gpu.example.com".into(),
            user: "ely".into(),
            default_cwd: "~/work".into(),
            ..Machine::local()
        };
        assert_eq!(good.check(), Ok(()));
        let field = |m: Machine| m.check().unwrap_err().field;
        for host in ["", "a b", "-oProxyCommand=x", "a\nb"] {
            let m = Machine {
                host: host.into(),
                ..good.clone()
            };
            assert_eq!(field(m), MachineField::Host, "{host:?}");
        }
        let m = Machine {
            user: "e ly".into(),
            ..good.clone()
        };
        assert_eq!(field(m), MachineField::User);
        for cwd in ["work", "/a\u{7}b"] {
            let m = Machine {
                default_cwd: cwd.into(),
                ..good.clone()
            };
            assert_eq!(field(m), MachineField::DefaultCwd, "{cwd:?}");
        }
        let m = Machine {
            startup_commands: vec![" ".into()],
            ..good
        };
        assert_eq!(field(m), MachineField::StartupCommand);
    }

    #[test]
    fn a_record_from_before_schedulers_loads_without_one() {
        let old = r#"{"machine_id":"lab","host":"h","port":22,"user":"u","auth_type":"key",
            "default_cwd":"/home/u"}"#;
        let m: Machine = serde_json::from_str(old).unwrap();
        assert_eq!(m.scheduler, Scheduler::None);
        // ... and is written back without the field.
        assert!(!serde_json::to_string(&m).unwrap().contains("scheduler"));
    }

    #[test]
    fn a_slurm_scheduler_round_trips() {
        let mut m = Machine::local();
        m.scheduler = Scheduler::Slurm {
            args: vec!["--partition=gpu".into(), "--time=60".into()],
        };
        let text = serde_json::to_string(&m).unwrap();
        assert!(
            text.contains(r#""scheduler":{"kind":"slurm","args":["--partition=gpu","--time=60"]}"#)
        );
        let back: Machine = serde_json::from_str(&text).unwrap();
        assert_eq!(back.scheduler.slurm_args().unwrap().len(), 2);
        assert_eq!(back.scheduler.kind(), "slurm");
    }
}
