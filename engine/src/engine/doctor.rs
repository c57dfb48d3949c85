//! A machine's doctor: is it reachable, trusted, logged into, and ready for sessions?
//!
//! The probes are the engine's (the SSH layer's probe, the control plane's `prepare`, Slurm's
//! probe on a login node); a face only renders the [`DoctorReport`]. A failed check is a finding
//! in the report, not an error of the call.

use std::path::Path;
use std::time::Duration;

use super::machines::Machines;
use super::open::KeyPassphrase;
use crate::error::{Error, ErrorCode, Result};
use crate::machine::Machine;
use crate::remote;
use crate::remote::Remote;
use crate::slurm;
use crate::ssh::{self, ConnectOptions, PassphraseSource};
use crate::transport::local::LocalTransport;
use crate::util::now_rfc3339;

/// How the doctor connects to an SSH machine.
#[derive(Debug, Clone, Default)]
pub struct DoctorOptions {
    /// How an encrypted key's passphrase is obtained (asked at most once).
    pub passphrase: KeyPassphrase,
    /// Bound on the SSH connect; ssh_config's `ConnectTimeout` when `None`.
    pub connect_timeout: Option<Duration>,
}

/// What the doctor found. `errors` says what is wrong, each with what to do about it.
#[derive(Debug, Clone)]
pub struct DoctorReport {
    pub machine_id: String,
    pub reachable: bool,
    pub auth_ok: bool,
    pub default_cwd_ok: bool,
    /// When the checks ran (RFC 3339).
    pub checked_at: String,
    /// The server's host key; `None` for the local machine (no SSH).
    pub host_key: Option<HostKeyFinding>,
    pub tmux_found: bool,
    /// `tmux -V` without the leading `tmux `.
    pub tmux_version: Option<String>,
    pub errors: Vec<Error>,
    /// `user@host:port` actually used (after ssh_config); SSH machines only.
    pub target: Option<String>,
    /// Authentication methods; SSH machines only.
    pub auth: Option<AuthFinding>,
    /// What sessions need on the machine, when it was checked or why not.
    pub session_tools: Option<SessionTools>,
    /// The Slurm commands and partitions of a Slurm login node.
    pub slurm: Option<SlurmFinding>,
    /// Checks that did not run because an earlier step failed, each with why (their `*_ok` /
    /// `tmux_found` fields are then `false` without meaning that the check failed).
    pub skipped: Vec<SkippedCheck>,
}

/// A check that did not run, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SkippedCheck {
    /// `auth`, `default_cwd` or `tmux`.
    pub check: &'static str,
    pub why: String,
}

impl DoctorReport {
    /// Every check passed.
    pub fn all_ok(&self) -> bool {
        self.errors.is_empty()
            && self.reachable
            && self.auth_ok
            && self.default_cwd_ok
            && self.tmux_found
    }

    /// Why `check` (`auth`, `default_cwd`, `tmux`) did not run, if it did not.
    pub fn skipped(&self, check: &str) -> Option<&str> {
        self.skipped
            .iter()
            .find(|s| s.check == check)
            .map(|s| s.why.as_str())
    }
}

/// The host key as known_hosts judged it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostKeyFinding {
    /// `known`, `recorded`, `unknown`, `changed`, `revoked` or `not_checked`.
    pub status: String,
    pub fingerprint: Option<String>,
}

/// The authentication methods the server offered, those tried, and the one that worked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuthFinding {
    pub offered: Vec<String>,
    pub tried: Vec<String>,
    pub used: Option<String>,
}

/// What sessions need on the machine, as `session create` checks it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SessionTools {
    /// Found at supported versions.
    Found {
        login_shell: String,
        tmux_path: String,
        bash_path: String,
        bash_version: String,
        /// The engine's state directory on the machine.
        state_root: String,
        /// Oldest tmux and bash supported (`3.0`, `4.4`).
        tmux_min: String,
        bash_min: String,
    },
    /// Not checked, and why.
    NotChecked { why: String },
}

/// A Slurm login node's commands and partitions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlurmFinding {
    /// Each Slurm command sessions and runs use, with its path (`None`: missing).
    pub tools: Vec<(String, Option<String>)>,
    pub partitions: Vec<SlurmPartition>,
    /// Whether `sacct` answers (without accounting, exit codes come from `squeue` and the
    /// engine's own exit file).
    pub accounting: bool,
    /// What `sacct` said when it did not answer.
    pub accounting_note: Option<String>,
}

/// One line of `sinfo`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlurmPartition {
    pub partition: Option<String>,
    /// The cluster's default partition.
    pub default: bool,
    pub avail: Option<String>,
    pub time_limit: Option<String>,
    pub nodes: Option<u64>,
    pub state: Option<String>,
}

impl Machines {
    /// Check a machine: reachability, host key, login, default cwd, and what sessions need
    /// (tmux, bash, the state directory; Slurm on a login node). An SSH machine is reached with
    /// its stored password, if any.
    pub async fn doctor(&self, machine_id: &str, options: &DoctorOptions) -> Result<DoctorReport> {
        let machine = self.resolve(machine_id)?;
        if machine.is_local() {
            let mut report = check_local(&machine);
            check_session_tools(
                &Remote::direct(std::sync::Arc::new(LocalTransport::new())),
                &mut report,
            )
            .await;
            return Ok(report);
        }
        let password = if machine.has_password {
            self.password(&machine.machine_id)?
        } else {
            None
        };
        Ok(check_ssh(&machine, password, options).await)
    }
}

/// An SSH machine: the SSH layer's probe, then the session tools over a second connection.
async fn check_ssh(
    machine: &Machine,
    password: Option<crate::secret::Secret>,
    options: &DoctorOptions,
) -> DoctorReport {
    let opts = ConnectOptions {
        password,
        passphrase: options.passphrase.source(),
        connect_timeout: options.connect_timeout,
        ..ConnectOptions::default()
    };
    let probe = ssh::probe(machine, opts.clone()).await;
    let host_key_status = serde_json::to_value(probe.host_key)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_else(|| "not_checked".to_string());
    let auth_ok = probe.auth_ok;
    let mut report = DoctorReport {
        machine_id: machine.machine_id.clone(),
        reachable: probe.reachable,
        auth_ok: probe.auth_ok,
        default_cwd_ok: probe.default_cwd_ok.unwrap_or(false),
        checked_at: now_rfc3339(),
        host_key: Some(HostKeyFinding {
            status: host_key_status,
            fingerprint: probe.host_key_fingerprint,
        }),
        tmux_found: probe.tmux_found.unwrap_or(false),
        tmux_version: probe.tmux_version,
        errors: probe.errors,
        target: Some(probe.target),
        auth: Some(AuthFinding {
            offered: probe.auth_methods_offered,
            tried: probe.auth_methods_tried,
            used: probe.auth_method_used,
        }),
        session_tools: None,
        slurm: None,
        skipped: Vec::new(),
    };
    report.skipped = skipped_after(&report);
    if auth_ok {
        // A second connection, never asking for a passphrase again: a key that needed one
        // on this terminal leaves the probe's own tmux check standing.
        let quiet = ConnectOptions {
            passphrase: PassphraseSource::Never,
            ..opts
        };
        match ssh::connect(machine, quiet).await {
            Ok(transport) => {
                let remote = Remote::direct(transport);
                check_session_tools(&remote, &mut report).await;
                if !machine.scheduler.is_none() {
                    check_slurm(&remote, &mut report).await;
                }
            }
            Err(e) if e.code == ErrorCode::AuthFailed => {
                report.session_tools = Some(SessionTools::NotChecked {
                    why: "the key needs a passphrase each time".into(),
                });
            }
            Err(e) => report.errors.push(e),
        }
    }
    report
}

/// What sessions need on the machine, checked the way `session create` checks it (through the
/// engine's control plane, whatever the login shell): the engine's state directory (ownership),
/// tmux and bash at supported versions. Its answer replaces the probe's plain `tmux -V`.
async fn check_session_tools(transport: &Remote, report: &mut DoctorReport) {
    report.errors.retain(|e| e.code != ErrorCode::TmuxMissing);
    match remote::prepare(transport).await {
        Ok(tools) => {
            report.tmux_found = true;
            report.tmux_version = Some(tools.tmux_version.trim_start_matches("tmux ").to_string());
            report.session_tools = Some(SessionTools::Found {
                login_shell: tools.login_shell,
                tmux_path: tools.tmux_path,
                bash_path: tools.bash_path,
                bash_version: tools.bash_version,
                state_root: tools.root,
                tmux_min: format!("{}.{}", remote::MIN_TMUX.0, remote::MIN_TMUX.1),
                bash_min: format!("{}.{}", remote::MIN_BASH.0, remote::MIN_BASH.1),
            });
        }
        Err(e) => {
            if e.code == ErrorCode::TmuxMissing {
                report.tmux_found = false;
                report.tmux_version = None;
            }
            report.errors.push(e);
        }
    }
}

/// A Slurm machine: every Slurm command sessions and runs use answers on the login node, and
/// the partitions. No accounting (`sacct` says it is disabled) is not a failure: exit codes
/// then come from `squeue` and the engine's own exit file.
async fn check_slurm(transport: &Remote, report: &mut DoctorReport) {
    let probe = match slurm::ops::probe(transport).await {
        Ok(p) => p,
        Err(e) => {
            report.errors.push(e);
            return;
        }
    };
    let missing: Vec<&str> = slurm::TOOLS
        .iter()
        .copied()
        .filter(|t| !probe.tools.iter().any(|(n, p)| n == t && p.is_some()))
        .collect();
    if !missing.is_empty() {
        report.errors.push(Error::new(
            ErrorCode::SlurmUnavailable,
            format!(
                "Slurm commands not found on the login node: {}; install Slurm's client \
                 commands there (Debian: apt-get install slurm-client) or put them on the \
                 PATH of non-interactive logins",
                missing.join(", ")
            ),
        ));
    }
    if let Some(said) = probe.sinfo_error.as_ref().or(probe.squeue_error.as_ref()) {
        report.errors.push(Error::new(
            ErrorCode::SlurmUnavailable,
            format!(
                "Slurm does not answer on the login node: {said}; check that the controller \
                 runs and that SLURM_CONF (or /etc/slurm/slurm.conf) is readable there"
            ),
        ));
    }
    let partitions = probe
        .partitions
        .iter()
        .map(|line| {
            let f: Vec<&str> = line.split('|').collect();
            let field = |i: usize| f.get(i).map(|s| s.to_string());
            SlurmPartition {
                partition: f.first().map(|p| p.trim_end_matches('*').to_string()),
                default: f.first().is_some_and(|p| p.ends_with('*')),
                avail: field(1),
                time_limit: field(2),
                nodes: f.get(3).and_then(|n| n.parse::<u64>().ok()),
                state: field(4),
            }
        })
        .collect();
    report.slurm = Some(SlurmFinding {
        tools: probe.tools,
        partitions,
        accounting: probe.sacct_error.is_none(),
        accounting_note: probe.sacct_error,
    });
}

/// The local machine: no network or login to check; the default cwd on this host (tmux is
/// the engine's check, [`check_session_tools`], as on any machine).
fn check_local(machine: &Machine) -> DoctorReport {
    let mut errors = Vec::new();
    let default_cwd_ok = Path::new(&machine.default_cwd).is_dir();
    if !default_cwd_ok {
        errors.push(Error::new(
            ErrorCode::RemoteNotFound,
            format!(
                "the default cwd {} is not a directory on this host; create it or set HOME",
                machine.default_cwd
            ),
        ));
    }
    DoctorReport {
        machine_id: machine.machine_id.clone(),
        reachable: true,
        auth_ok: true,
        default_cwd_ok,
        checked_at: now_rfc3339(),
        host_key: None,
        tmux_found: false,
        tmux_version: None,
        errors,
        target: None,
        auth: None,
        session_tools: None,
        slurm: None,
        skipped: Vec::new(),
    }
}

/// The checks an SSH probe could not reach: everything after the first step that failed.
fn skipped_after(report: &DoctorReport) -> Vec<SkippedCheck> {
    let host_key = report.host_key.as_ref().map(|h| h.status.as_str());
    let (checks, why): (&[&'static str], &str) = if !report.reachable {
        (
            &["auth", "default_cwd", "tmux"],
            "the machine was not reached",
        )
    } else if !matches!(host_key, Some("known" | "recorded")) {
        let why = if host_key == Some("not_checked") {
            "the SSH handshake did not complete"
        } else {
            "the host key is not trusted"
        };
        (&["auth", "default_cwd", "tmux"], why)
    } else if !report.auth_ok {
        (&["default_cwd", "tmux"], "login failed")
    } else {
        (&[], "")
    };
    checks
        .iter()
        .map(|&check| SkippedCheck {
            check,
            why: why.to_string(),
        })
        .collect()
}
