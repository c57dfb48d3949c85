//! `machine doctor`: check every step of reaching a machine and report each as a field.
//! The probe never fails as a whole; problems become [`Error`] values a person can act on.

use serde::Serialize;

use crate::error::{Error, ErrorCode, Hint};
use crate::machine::Machine;
use crate::ssh::auth::KeyCache;
use crate::ssh::connection::{Diagnostics, establish};
use crate::ssh::known_hosts::HostKeyStatus;
use crate::ssh::options::{ConnectOptions, Target};
use crate::transport::{ExecOptions, shell_quote};

/// What known_hosts says about the server's key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum HostKeyState {
    Known,
    /// Unknown before this probe and recorded now (accept-new).
    Recorded,
    Unknown,
    Changed,
    Revoked,
    /// The server was not reached far enough to see a key.
    NotChecked,
}

/// The result of [`probe`].
#[derive(Debug, Clone, Serialize)]
pub struct ProbeReport {
    /// `user@host:port` actually used (after ssh_config).
    pub target: String,
    pub reachable: bool,
    pub host_key: HostKeyState,
    pub host_key_fingerprint: Option<String>,
    pub auth_ok: bool,
    pub auth_methods_offered: Vec<String>,
    pub auth_methods_tried: Vec<String>,
    pub auth_method_used: Option<String>,
    pub default_cwd_ok: Option<bool>,
    pub tmux_found: Option<bool>,
    pub tmux_version: Option<String>,
    #[serde(skip)]
    pub errors: Vec<Error>,
}

impl ProbeReport {
    /// JSON form, errors included as `{code, message, retryable}`.
    pub fn to_json(&self) -> serde_json::Value {
        let mut v = serde_json::to_value(self).unwrap_or_else(|_| serde_json::json!({}));
        v["errors"] = serde_json::Value::Array(self.errors.iter().map(Error::to_json).collect());
        v
    }

    pub fn ok(&self) -> bool {
        self.errors.is_empty()
    }
}

/// Probe a machine: reachability, host key, auth, default cwd, tmux.
pub async fn probe(machine: &Machine, opts: ConnectOptions) -> ProbeReport {
    let mut report = ProbeReport {
        target: format!("{}@{}:{}", machine.user, machine.host, machine.port),
        reachable: false,
        host_key: HostKeyState::NotChecked,
        host_key_fingerprint: None,
        auth_ok: false,
        auth_methods_offered: Vec::new(),
        auth_methods_tried: Vec::new(),
        auth_method_used: None,
        default_cwd_ok: None,
        tmux_found: None,
        tmux_version: None,
        errors: Vec::new(),
    };
    let target = match Target::resolve(machine, &opts) {
        Ok(t) => t,
        Err(e) => {
            report.errors.push(e);
            return report;
        }
    };
    report.target = target.label();
    let cache = KeyCache::default();
    let mut diag = Diagnostics::default();
    let result = establish(&target, &opts, &cache, None, &mut diag).await;
    report.reachable = diag.reachable;
    if let Some(v) = &diag.verdict {
        report.host_key_fingerprint = Some(v.fingerprint.clone());
        report.host_key = match v.status {
            HostKeyStatus::Known { .. } => HostKeyState::Known,
            HostKeyStatus::Unknown if v.recorded => HostKeyState::Recorded,
            HostKeyStatus::Unknown => HostKeyState::Unknown,
            HostKeyStatus::Changed { .. } => HostKeyState::Changed,
            HostKeyStatus::Revoked { .. } => HostKeyState::Revoked,
        };
    }
    report.auth_methods_offered = diag.auth.offered.clone();
    report.auth_methods_tried = diag.auth.tried.clone();
    report.auth_method_used = diag.auth.succeeded.clone();
    let conn = match result {
        Ok(c) => c,
        Err(e) => {
            report.errors.push(e);
            return report;
        }
    };
    report.auth_ok = true;

    let run = |cmd: String| {
        let conn = &conn;
        async move {
            let ch = conn
                .open_session(target.connect_timeout)
                .await
                .map_err(|e| {
                    e.unwrap_or_else(|| {
                        Error::new(ErrorCode::RemoteError, "the server refused a channel")
                    })
                })?;
            exec_plain(ch, &cmd).await
        }
    };

    let cwd = machine.default_cwd.trim();
    if !cwd.is_empty() {
        let check = if cwd == "~" || cwd.starts_with("~/") {
            format!("cd {} && pwd", cwd.replacen('~', "\"$HOME\"", 1))
        } else {
            format!("cd {} && pwd", shell_quote(cwd))
        };
        match run(check).await {
            Ok((0, _)) => report.default_cwd_ok = Some(true),
            Ok(_) => {
                report.default_cwd_ok = Some(false);
                report.errors.push(
                    Error::new(
                        ErrorCode::RemoteNotFound,
                        format!(
                            "default_cwd {cwd} is not an accessible directory on {}; create it \
                             or change the machine's default_cwd",
                            target.label()
                        ),
                    )
                    .with_hint(Hint::ChangeDefaultCwd {
                        machine_id: machine.machine_id.clone(),
                    }),
                );
            }
            Err(e) => report.errors.push(e),
        }
    }

    match run("command -v tmux >/dev/null 2>&1 && tmux -V".to_string()).await {
        Ok((0, out)) => {
            report.tmux_found = Some(true);
            report.tmux_version = Some(out.trim().trim_start_matches("tmux ").to_string());
        }
        Ok(_) => {
            report.tmux_found = Some(false);
            report.errors.push(Error::new(
                ErrorCode::TmuxMissing,
                format!(
                    "tmux is not installed on {}; install it there: `sudo apt-get install tmux` (Debian/Ubuntu), \
                     `sudo dnf install tmux` (Fedora/RHEL), `sudo apk add tmux` (Alpine)",
                    target.host
                ),
            ));
        }
        Err(e) => report.errors.push(e),
    }
    let _ = conn
        .handle
        .disconnect(russh::Disconnect::ByApplication, "doctor done", "en")
        .await;
    report
}

/// A minimal exec for the probe: exit code and stdout, drained to the end.
async fn exec_plain(
    channel: russh::Channel<russh::client::Msg>,
    cmd: &str,
) -> crate::error::Result<(i32, String)> {
    let opts = ExecOptions::default();
    let (mut reader, writer) = channel.split();
    writer
        .exec(true, cmd.as_bytes().to_vec())
        .await
        .map_err(|e| Error::new(ErrorCode::RemoteError, format!("exec failed: {e}")))?;
    let _ = writer.eof().await;
    let mut out = Vec::new();
    let mut code = None;
    let collect = async {
        while let Some(msg) = reader.wait().await {
            match msg {
                russh::ChannelMsg::Data { data } if out.len() < 65536 => {
                    out.extend_from_slice(&data)
                }
                russh::ChannelMsg::ExitStatus { exit_status } => {
                    code = Some(i32::try_from(exit_status).unwrap_or(i32::MAX))
                }
                _ => {}
            }
        }
    };
    if tokio::time::timeout(opts.timeout.unwrap_or_default(), collect)
        .await
        .is_err()
    {
        return Err(Error::new(
            ErrorCode::Timeout,
            format!("`{cmd}` did not finish in time"),
        ));
    }
    Ok((
        code.unwrap_or(-1),
        String::from_utf8_lossy(&out).into_owned(),
    ))
}
