//! `machine doctor`: is the machine reachable, trusted, logged into, and ready for sessions?
//!
//! The report is a result, not an error: it goes to stdout, and a failed check makes the exit
//! code 1 (see `exit.rs`). Each problem comes with what to do about it.

use std::io::IsTerminal;
use std::path::Path;

use remote_runner_engine::machine::{AuthType, Machine};
use remote_runner_engine::remote;
use remote_runner_engine::remote::Remote;
use remote_runner_engine::slurm;
use remote_runner_engine::ssh::{self, ConnectOptions, PassphraseSource};
use remote_runner_engine::store::machines;
use remote_runner_engine::transport::local::LocalTransport;
use remote_runner_engine::transport::shell_quote;
use remote_runner_engine::util::now_rfc3339;
use remote_runner_engine::{Error, ErrorCode, Result};
use serde_json::{Value, json};

use crate::context::Context;
use crate::output::{Block, Cell, Report, Tone};

/// The doctor's findings, in the contract's shape plus host key and tmux details.
#[derive(Debug, Clone)]
struct Findings {
    machine_id: String,
    reachable: bool,
    auth_ok: bool,
    default_cwd_ok: bool,
    checked_at: String,
    /// `None` for the local machine (no SSH, no host key).
    host_key: Option<Value>,
    tmux_found: bool,
    tmux_version: Option<String>,
    errors: Vec<Error>,
    /// Extra details for SSH machines (`target`, `auth`).
    details: serde_json::Map<String, Value>,
}

impl Findings {
    fn all_ok(&self) -> bool {
        self.errors.is_empty()
            && self.reachable
            && self.auth_ok
            && self.default_cwd_ok
            && self.tmux_found
    }

    fn to_json(&self) -> Value {
        let mut v = json!({
            "machine_id": self.machine_id,
            "reachable": self.reachable,
            "auth_ok": self.auth_ok,
            "default_cwd_ok": self.default_cwd_ok,
            "checked_at": self.checked_at,
            "errors": self.errors.iter().map(Error::to_json).collect::<Vec<_>>(),
            "host_key": self.host_key,
            "tmux": { "found": self.tmux_found, "version": self.tmux_version },
        });
        if let Some(obj) = v.as_object_mut() {
            obj.extend(self.details.clone());
        }
        v
    }

    fn to_human(&self) -> Vec<Block> {
        let mut fields = vec![("machine", Cell::new(self.machine_id.clone(), Tone::Bold))];
        if let Some(target) = self.details.get("target").and_then(Value::as_str) {
            fields.push(("target", Cell::plain(target)));
        }
        fields.push(("reachable", Cell::check(self.reachable)));
        if let Some(hk) = &self.host_key {
            let status = hk["status"].as_str().unwrap_or("unknown").to_string();
            let tone = if status == "known" {
                Tone::Good
            } else {
                Tone::Bad
            };
            let text = match hk["fingerprint"].as_str() {
                Some(fp) => format!("{status} ({fp})"),
                None => status,
            };
            fields.push(("host key", Cell::new(text, tone)));
        }
        let auth = self.details.get("auth");
        let used = auth.and_then(|a| a["used"].as_str());
        let auth_cell = match (self.auth_ok, used) {
            (true, Some(method)) => Cell::new(format!("yes ({method})"), Tone::Good),
            (ok, _) => Cell::check(ok),
        };
        fields.push(("auth ok", auth_cell));
        fields.push(("default cwd ok", Cell::check(self.default_cwd_ok)));
        let tmux = match (&self.tmux_version, self.tmux_found) {
            (Some(v), true) => Cell::new(v.clone(), Tone::Good),
            (None, true) => Cell::new("found", Tone::Good),
            (_, false) => Cell::new("not found", Tone::Bad),
        };
        fields.push(("tmux", tmux));
        if let Some(slurm) = self.details.get("slurm") {
            let parts: Vec<String> = slurm["partitions"]
                .as_array()
                .map(|a| {
                    a.iter()
                        .map(|p| {
                            format!(
                                "{} ({} nodes {})",
                                p["partition"].as_str().unwrap_or("?"),
                                p["nodes"],
                                p["state"].as_str().unwrap_or("?")
                            )
                        })
                        .collect()
                })
                .unwrap_or_default();
            fields.push(("slurm partitions", Cell::plain(parts.join(", "))));
            let acct = if slurm["accounting"].as_bool() == Some(true) {
                "sacct answers"
            } else {
                "no accounting (exit codes from squeue and remote-runner's exit file)"
            };
            fields.push(("slurm accounting", Cell::plain(acct)));
        }
        let mut blocks = vec![Block::Fields(fields)];
        for e in &self.errors {
            blocks.push(Block::Line(Cell::new(
                format!("  - {} [{}]", crate::hint::message(e), e.code),
                Tone::Bad,
            )));
        }
        if self.all_ok() {
            blocks.push(Block::Line(Cell::new("All checks passed.", Tone::Good)));
        }
        blocks
    }
}

pub async fn run(ctx: &Context, machine_id: &str) -> Result<Report> {
    let store = ctx.store()?;
    let machine = machines::resolve(&store, machine_id)?;
    let findings = if machine.is_local() {
        let mut findings = check_local(&machine);
        check_session_tools(
            &Remote::direct(std::sync::Arc::new(LocalTransport::new())),
            &mut findings,
        )
        .await;
        findings
    } else {
        check_ssh(ctx, &machine).await?
    };
    let report = Report::new(findings.to_json()).human(findings.to_human());
    Ok(if findings.all_ok() {
        report
    } else {
        report.failed()
    })
}

/// An SSH machine: the SSH layer's probe, with the stored password (if any) and, on a terminal,
/// a passphrase prompt for encrypted keys.
async fn check_ssh(ctx: &Context, machine: &Machine) -> Result<Findings> {
    let password = if machine.has_password {
        ctx.credentials()?.get_password(&machine.machine_id)?
    } else {
        None
    };
    let opts = ConnectOptions {
        password,
        passphrase: if std::io::stdin().is_terminal() {
            PassphraseSource::Tty
        } else {
            PassphraseSource::Never
        },
        connect_timeout: ctx.timeout,
        ..ConnectOptions::default()
    };
    let report = ssh::probe(machine, opts.clone()).await;
    let auth_ok = report.auth_ok;
    let host_key_status = serde_json::to_value(report.host_key)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_else(|| "not_checked".to_string());
    let mut details = serde_json::Map::new();
    details.insert("target".into(), json!(report.target));
    details.insert(
        "auth".into(),
        json!({
            "offered": report.auth_methods_offered,
            "tried": report.auth_methods_tried,
            "used": report.auth_method_used,
        }),
    );
    let mut findings = Findings {
        machine_id: machine.machine_id.clone(),
        reachable: report.reachable,
        auth_ok: report.auth_ok,
        default_cwd_ok: report.default_cwd_ok.unwrap_or(false),
        checked_at: now_rfc3339(),
        host_key: Some(json!({
            "status": host_key_status,
            "fingerprint": report.host_key_fingerprint,
        })),
        tmux_found: report.tmux_found.unwrap_or(false),
        tmux_version: report.tmux_version,
        errors: report
            .errors
            .into_iter()
            .map(|e| with_concrete_fix(e, machine))
            .collect(),
        details,
    };
    if auth_ok {
        // A second connection, never asking for a passphrase again: a key that needed one
        // on this terminal leaves the probe's own tmux check standing.
        let quiet = ConnectOptions {
            passphrase: PassphraseSource::Never,
            ..opts
        };
        match ssh::connect(machine, quiet).await {
            Ok(transport) => {
                let transport = Remote::direct(transport);
                check_session_tools(transport.as_ref(), &mut findings).await;
                if !machine.scheduler.is_none() {
                    check_slurm(transport.as_ref(), &mut findings).await;
                }
            }
            Err(e) if e.code == ErrorCode::AuthFailed => {
                findings.details.insert(
                    "session_tools".into(),
                    json!({ "checked": false, "why": "the key needs a passphrase each time" }),
                );
            }
            Err(e) => findings.errors.push(with_concrete_fix(e, machine)),
        }
    }
    Ok(findings)
}

/// What sessions need on the machine, checked the way `session create` checks it (through the
/// engine's control plane, whatever the login shell): the engine's state directory (ownership),
/// tmux and bash at supported versions. Its answer replaces the probe's plain `tmux -V`.
async fn check_session_tools(transport: &Remote, findings: &mut Findings) {
    findings.errors.retain(|e| e.code != ErrorCode::TmuxMissing);
    match remote::prepare(transport).await {
        Ok(tools) => {
            findings.tmux_found = true;
            findings.tmux_version =
                Some(tools.tmux_version.trim_start_matches("tmux ").to_string());
            findings.details.insert(
                "session_tools".into(),
                json!({
                    "login_shell": tools.login_shell,
                    "tmux_path": tools.tmux_path,
                    "bash_path": tools.bash_path,
                    "bash_version": tools.bash_version,
                    "state_root": tools.root,
                    "tmux_min": format!("{}.{}", remote::MIN_TMUX.0, remote::MIN_TMUX.1),
                    "bash_min": format!("{}.{}", remote::MIN_BASH.0, remote::MIN_BASH.1),
                }),
            );
        }
        Err(e) => {
            if e.code == ErrorCode::TmuxMissing {
                findings.tmux_found = false;
                findings.tmux_version = None;
            }
            findings.errors.push(e);
        }
    }
}

/// A Slurm machine: every Slurm command sessions and runs use answers on the login node, and
/// the partitions (`details.slurm`). No accounting (`sacct` says it is disabled) is not a
/// failure: exit codes then come from `squeue` and the engine's own exit file.
async fn check_slurm(transport: &Remote, findings: &mut Findings) {
    let probe = match slurm::ops::probe(transport).await {
        Ok(p) => p,
        Err(e) => {
            findings.errors.push(e);
            return;
        }
    };
    let missing: Vec<&str> = slurm::TOOLS
        .iter()
        .copied()
        .filter(|t| !probe.tools.iter().any(|(n, p)| n == t && p.is_some()))
        .collect();
    if !missing.is_empty() {
        findings.errors.push(Error::new(
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
        findings.errors.push(Error::new(
            ErrorCode::SlurmUnavailable,
            format!(
                "Slurm does not answer on the login node: {said}; check that the controller \
                 runs and that SLURM_CONF (or /etc/slurm/slurm.conf) is readable there"
            ),
        ));
    }
    let partitions: Vec<Value> = probe
        .partitions
        .iter()
        .map(|line| {
            let f: Vec<&str> = line.split('|').collect();
            json!({
                "partition": f.first().map(|p| p.trim_end_matches('*')),
                "default": f.first().is_some_and(|p| p.ends_with('*')),
                "avail": f.get(1),
                "time_limit": f.get(2),
                "nodes": f.get(3).and_then(|n| n.parse::<u64>().ok()),
                "state": f.get(4),
            })
        })
        .collect();
    let tools: serde_json::Map<String, Value> = probe
        .tools
        .iter()
        .map(|(n, p)| (n.clone(), json!(p)))
        .collect();
    findings.details.insert(
        "slurm".into(),
        json!({
            "tools": tools,
            "partitions": partitions,
            "accounting": probe.sacct_error.is_none(),
            "accounting_note": probe.sacct_error,
        }),
    );
}

/// An unknown host key's message gets the exact command that trusts it for this machine.
fn with_concrete_fix(mut err: Error, machine: &Machine) -> Error {
    if err.code == ErrorCode::HostKeyUnknown {
        err.message.push_str(&format!(
            ". For this machine, once the fingerprint is verified: {}",
            accept_new_command(machine)
        ));
        err.hint = None; // the concrete command replaces the general one
    }
    err
}

/// `machine add --replace` with this machine's own fields and `--accept-new`; a stored password
/// is kept by a replacement that does not give a new one.
fn accept_new_command(m: &Machine) -> String {
    let q = |s: &str| shell_quote(s);
    let auth = match m.auth_type {
        AuthType::Key => "key",
        AuthType::Agent => "agent",
        AuthType::Password => "password",
        AuthType::Local => "local",
    };
    let mut cmd = format!(
        "remote-runner machine add {id} --replace --confirm-replace {id} --host {host} --port {port} \
         --user {user} --auth {auth} --default-cwd {cwd}",
        id = q(&m.machine_id),
        host = q(&m.host),
        port = m.port,
        user = q(&m.user),
        cwd = q(&m.default_cwd),
    );
    if let Some(key) = &m.key_path {
        cmd.push_str(&format!(" --key-path {}", q(key)));
    }
    if let Some(kh) = &m.known_hosts_file {
        cmd.push_str(&format!(" --known-hosts-file {}", q(kh)));
    }
    for startup in &m.startup_commands {
        cmd.push_str(&format!(" --startup-command {}", q(startup)));
    }
    cmd.push_str(" --accept-new");
    cmd
}

/// The local machine: no network or login to check; the default cwd on this host (tmux is
/// the engine's check, [`check_session_tools`], as on any machine).
fn check_local(machine: &Machine) -> Findings {
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
    Findings {
        machine_id: machine.machine_id.clone(),
        reachable: true,
        auth_ok: true,
        default_cwd_ok,
        checked_at: now_rfc3339(),
        host_key: None,
        tmux_found: false,
        tmux_version: None,
        errors,
        details: serde_json::Map::new(),
    }
}
