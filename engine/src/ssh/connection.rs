//! Opening one authenticated SSH connection: TCP (or a ProxyJump channel), handshake with
//! host key verification, the auth chain; all inside one bounded timeout.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use russh::client::{self, Handle, Msg};
use russh::{Channel, ChannelOpenFailure};
use tokio::sync::watch;

use crate::error::{Error, ErrorCode, Hint, Result};
use crate::machine::HostKeyPolicy;
use crate::ssh::auth::{self, AuthReport, KeyCache};
use crate::ssh::client::{ClientHandler, HostKeyMode, HostKeyVerdict, SharedVerdict};
use crate::ssh::known_hosts::{HostKeyStatus, host_token};
use crate::ssh::options::{ConnectOptions, Target};

/// What happened while connecting, filled step by step (for `machine doctor` and errors).
#[derive(Debug, Default)]
pub(crate) struct Diagnostics {
    /// TCP (or the jump channel) connected and the server spoke SSH far enough to show a key.
    pub reachable: bool,
    pub verdict: Option<HostKeyVerdict>,
    pub auth: AuthReport,
}

/// One authenticated connection.
pub(crate) struct Connection {
    pub handle: Handle<ClientHandler>,
    gone: watch::Receiver<Option<String>>,
    pub label: String,
    /// The ProxyJump connection this one tunnels through; kept alive with it.
    jump: Option<Box<Connection>>,
}

impl Connection {
    /// Whether the link is down (session loop ended, or the handler saw a disconnect).
    pub fn is_closed(&self) -> bool {
        self.handle.is_closed()
            || self.gone.borrow().is_some()
            || self.jump.as_ref().is_some_and(|j| j.is_closed())
    }

    /// Why the link went down, if it did.
    pub fn disconnect_reason(&self) -> Option<String> {
        self.gone.borrow().clone().or_else(|| {
            self.handle
                .is_closed()
                .then(|| "the connection closed".to_string())
        })
    }

    /// Wait (bounded) for the disconnect to become visible: a channel that ended without an
    /// exit status is only classified as connection loss once the session loop has noticed.
    pub async fn wait_closed(&self, bound: Duration) -> bool {
        let mut rx = self.gone.clone();
        let deadline = tokio::time::Instant::now() + bound;
        loop {
            if self.is_closed() {
                return true;
            }
            let step = tokio::time::sleep(Duration::from_millis(50));
            tokio::select! {
                _ = rx.changed() => {}
                _ = step => {}
            }
            if tokio::time::Instant::now() >= deadline {
                return self.is_closed();
            }
        }
    }

    /// The typed error for a dropped link.
    pub fn lost_error(&self) -> Error {
        let why = self
            .disconnect_reason()
            .unwrap_or_else(|| "the connection closed".into());
        Error::new(
            ErrorCode::ConnectionLost,
            format!(
                "lost the SSH connection to {}: {why}; the next call reconnects (check the network and that sshd still runs)",
                self.label
            ),
        )
    }

    /// Open a session channel. `Err(None)` means the server refused the channel (e.g.
    /// MaxSessions reached) while the link stays up.
    pub async fn open_session(
        &self,
        bound: Duration,
    ) -> std::result::Result<Channel<Msg>, Option<Error>> {
        match tokio::time::timeout(bound, self.handle.channel_open_session()).await {
            Ok(Ok(ch)) => Ok(ch),
            Ok(Err(russh::Error::ChannelOpenFailure(
                ChannelOpenFailure::AdministrativelyProhibited
                | ChannelOpenFailure::ConnectFailed
                | ChannelOpenFailure::ResourceShortage,
            ))) if !self.is_closed() => Err(None),
            Ok(Err(e)) => {
                if self.is_closed() {
                    Err(Some(self.lost_error()))
                } else {
                    Err(Some(Error::new(
                        ErrorCode::RemoteError,
                        format!("opening an SSH channel to {} failed: {e}", self.label),
                    )))
                }
            }
            Err(_) => {
                if self.is_closed() {
                    Err(Some(self.lost_error()))
                } else {
                    Err(Some(Error::new(
                        ErrorCode::Timeout,
                        format!(
                            "the server at {} did not open a channel within {} s; it may be overloaded or hung",
                            self.label,
                            bound.as_secs()
                        ),
                    )))
                }
            }
        }
    }
}

fn russh_config(target: &Target, known: &[russh::keys::Algorithm]) -> Arc<client::Config> {
    let mut preferred = russh::Preferred::default();
    preferred.key = crate::ssh::known_hosts::reorder_preferred(&preferred.key, known).into();
    preferred.cipher = cipher_order(aes_in_hardware()).into();
    Arc::new(client::Config {
        inactivity_timeout: None,
        keepalive_interval: Some(target.keepalive_interval),
        keepalive_max: target.keepalive_max,
        nodelay: true,
        window_size: 16 << 20,
        preferred,
        ..Default::default()
    })
}

/// The ciphers we offer, best first. All are the AEAD or CTR ciphers OpenSSH offers by default.
/// With AES and carry-less multiply in hardware, AES-GCM is constant-time and costs both ends
/// (us and sshd) a fraction of the CPU per byte that ChaCha20-Poly1305 does, which is what bounds
/// bulk transfers on loopback and fast links; without them ChaCha20-Poly1305 comes first, as in
/// OpenSSH. The server picks the first of ours it also offers.
fn cipher_order(aes_hardware: bool) -> Vec<russh::cipher::Name> {
    use russh::cipher::{AES_128_CTR, AES_192_CTR, AES_256_CTR, AES_256_GCM, CHACHA20_POLY1305};
    let aead = if aes_hardware {
        [AES_256_GCM, CHACHA20_POLY1305]
    } else {
        [CHACHA20_POLY1305, AES_256_GCM]
    };
    aead.into_iter()
        .chain([AES_256_CTR, AES_192_CTR, AES_128_CTR])
        .collect()
}

/// Whether this CPU has AES and carry-less multiply instructions (AES-GCM at full speed).
fn aes_in_hardware() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("aes")
            && std::arch::is_x86_feature_detected!("pclmulqdq")
    }
    #[cfg(target_arch = "aarch64")]
    {
        std::arch::is_aarch64_feature_detected!("aes")
            && std::arch::is_aarch64_feature_detected!("pmull")
    }
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    {
        false
    }
}

/// Connect and authenticate, bounded by `target.connect_timeout`.
pub(crate) async fn establish(
    target: &Target,
    opts: &ConnectOptions,
    cache: &KeyCache,
    mode: Option<HostKeyMode>,
    diag: &mut Diagnostics,
) -> Result<Connection> {
    let bound = target.connect_timeout;
    let hops = Hops { opts, cache };
    match tokio::time::timeout(bound, establish_inner(target, hops, mode, diag)).await {
        Ok(r) => r,
        Err(_) => Err(Error::new(
            ErrorCode::ConnectionFailed,
            format!(
                "connecting to {} did not finish within {} s; check the host and port, the network, and that sshd runs there",
                target.label(),
                bound.as_secs()
            ),
        )),
    }
}

/// What every hop of one connection (the target and its ProxyJump hosts) shares.
#[derive(Clone, Copy)]
struct Hops<'a> {
    opts: &'a ConnectOptions,
    cache: &'a KeyCache,
}

async fn establish_inner(
    target: &Target,
    hops: Hops<'_>,
    mode: Option<HostKeyMode>,
    diag: &mut Diagnostics,
) -> Result<Connection> {
    let Hops { opts, cache } = hops;
    let verdict: SharedVerdict = Arc::new(Mutex::new(None));
    let (gone_tx, gone_rx) = watch::channel(None);
    let handler = ClientHandler {
        host: target.host.clone(),
        port: target.port,
        files: target.known_hosts.clone(),
        mode: mode.unwrap_or(HostKeyMode::Enforce(target.policy)),
        verdict: verdict.clone(),
        gone: gone_tx,
    };
    let known =
        crate::ssh::known_hosts::known_algorithms(&target.known_hosts, &target.host, target.port);
    let config = russh_config(target, &known);
    tracing::debug!(target = %target.label(), jump = target.jump.is_some(), "ssh connect");

    let (handle, jump) = match &target.jump {
        Some(jump_target) => {
            let mut jump_diag = Diagnostics::default();
            let jump_conn = Box::pin(establish_inner(jump_target, hops, None, &mut jump_diag))
                .await
                .map_err(|e| {
                    Error::new(
                        e.code,
                        format!("via ProxyJump {}: {}", jump_target.label(), e.message),
                    )
                })?;
            let channel = jump_conn
                .handle
                .channel_open_direct_tcpip(target.host.clone(), u32::from(target.port), "127.0.0.1", 0)
                .await
                .map_err(|e| {
                    Error::new(
                        ErrorCode::ConnectionFailed,
                        format!(
                            "the jump host {} could not reach {}:{} ({e}); check ProxyJump and that the jump host allows TCP forwarding",
                            jump_target.label(),
                            target.host,
                            target.port
                        ),
                    )
                })?;
            diag.reachable = true;
            let h = client::connect_stream(config, channel.into_stream(), handler).await;
            (h, Some(Box::new(jump_conn)))
        }
        None => {
            let stream = tokio::net::TcpStream::connect((target.host.as_str(), target.port))
                .await
                .map_err(|e| {
                    Error::new(
                        ErrorCode::ConnectionFailed,
                        format!(
                            "cannot reach {}:{} ({e}); check the host name and port, and that sshd runs there",
                            target.host, target.port
                        ),
                    )
                })?;
            let _ = stream.set_nodelay(true);
            diag.reachable = true;
            (client::connect_stream(config, stream, handler).await, None)
        }
    };
    diag.verdict = verdict.lock().ok().and_then(|v| v.clone());
    let mut handle = match handle {
        Ok(h) => h,
        Err(e) => return Err(handshake_error(target, diag.verdict.as_ref(), e)),
    };
    auth::authenticate(&mut handle, target, opts, cache, &mut diag.auth).await?;
    tracing::debug!(target = %target.label(), method = ?diag.auth.succeeded, "ssh authenticated");
    Ok(Connection {
        handle,
        gone: gone_rx,
        label: target.label(),
        jump,
    })
}

/// Turn a handshake failure into a precise error, using the host key verdict when there is one.
fn handshake_error(target: &Target, verdict: Option<&HostKeyVerdict>, e: russh::Error) -> Error {
    if let Some(err) = verdict.and_then(|v| host_key_error(target, v)) {
        return err;
    }
    Error::new(
        ErrorCode::ConnectionFailed,
        format!(
            "SSH handshake with {}:{} failed ({e}); check that the port runs an SSH server",
            target.host, target.port
        ),
    )
}

/// The error for a refused host key, or `None` when the key was accepted.
pub(crate) fn host_key_error(target: &Target, v: &HostKeyVerdict) -> Option<Error> {
    let token = host_token(&target.host, target.port);
    let file = target
        .known_hosts
        .primary()
        .map(|p| p.display().to_string())
        .unwrap_or_else(|| "~/.ssh/known_hosts".into());
    let algo = v.key.algorithm().to_string();
    match &v.status {
        HostKeyStatus::Known { .. } => None,
        HostKeyStatus::Unknown if v.recorded => None,
        HostKeyStatus::Unknown => {
            if let Some(rec) = &v.record_error {
                return Some(Error::new(
                    rec.code,
                    format!(
                        "could not record the new host key of {token} in {file}: {}",
                        rec.message
                    ),
                ));
            }
            Some(
                Error::new(
                    ErrorCode::HostKeyUnknown,
                    format!(
                        "the host key of {token} is not known ({algo} key {fp}); verify this \
                         fingerprint with the server's owner before accepting it",
                        fp = v.fingerprint,
                    ),
                )
                .with_hint(Hint::AcceptHostKey {
                    host: target.host.clone(),
                    port: target.port,
                    known_hosts: file.to_string(),
                    machine_id: Some(target.machine_id.clone()),
                }),
            )
        }
        HostKeyStatus::Changed {
            file: kfile,
            line,
            recorded_fingerprint,
        } => Some(Error::new(
            ErrorCode::HostKeyChanged,
            format!(
                "REMOTE HOST IDENTIFICATION HAS CHANGED for {token}: the server presents {algo} key {fp}, \
                 but {kfile}:{line} records {recorded_fingerprint}. Someone could be eavesdropping on you \
                 (man-in-the-middle), or the host key was just replaced. If you have verified the new key \
                 with the server's owner, remove the old entry with `ssh-keygen -R '{token}' -f {kfile}` and connect again",
                fp = v.fingerprint,
                kfile = kfile.display(),
            ),
        )),
        HostKeyStatus::Revoked { file: kfile, line } => Some(Error::new(
            ErrorCode::HostKeyChanged,
            format!(
                "the host key of {token} ({algo} {fp}) is marked @revoked in {}:{line}; refusing to connect. \
                 Ask the server's owner for its current key",
                kfile.display(),
                fp = v.fingerprint
            ),
        )),
    }
}

/// Fetch the server's host key and record it in the machine's known_hosts file when it is
/// unknown. Returns the `SHA256:` fingerprint. A changed or revoked key is refused.
pub async fn accept_host_key(
    machine: &crate::machine::Machine,
    opts: ConnectOptions,
) -> Result<String> {
    let target = Target::resolve(machine, &opts)?;
    let cache = KeyCache::default();
    let mut diag = Diagnostics::default();
    let result = establish(
        &target,
        &opts,
        &cache,
        Some(HostKeyMode::Capture),
        &mut diag,
    )
    .await;
    let Some(v) = diag.verdict else {
        return Err(result.err().unwrap_or_else(|| {
            Error::internal("host key capture connected without seeing a key")
        }));
    };
    match &v.status {
        HostKeyStatus::Known { .. } => Ok(v.fingerprint),
        HostKeyStatus::Unknown => {
            let path = target.known_hosts.primary().ok_or_else(|| {
                Error::new(
                    ErrorCode::ConfigInvalid,
                    "no known_hosts file to record the key in; set known_hosts_file",
                )
            })?;
            crate::ssh::known_hosts::append(path, &target.host, target.port, &v.key)?;
            Ok(v.fingerprint)
        }
        _ => {
            let mut t = target.clone();
            t.policy = HostKeyPolicy::Strict;
            Err(host_key_error(&t, &v)
                .unwrap_or_else(|| Error::internal("host key verdict without an error")))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use russh::cipher::{AES_256_GCM, CHACHA20_POLY1305};

    #[test]
    fn aead_ciphers_first_and_no_weak_ones() {
        assert_eq!(&cipher_order(true)[..2], &[AES_256_GCM, CHACHA20_POLY1305]);
        assert_eq!(&cipher_order(false)[..2], &[CHACHA20_POLY1305, AES_256_GCM]);
        for order in [cipher_order(true), cipher_order(false)] {
            assert!(order.iter().all(|c| !c.as_ref().contains("cbc")
                && c.as_ref() != "none"
                && c.as_ref() != "clear"));
        }
    }
}
