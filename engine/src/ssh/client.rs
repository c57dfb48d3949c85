//! The russh client [`Handler`]: host key verification against known_hosts and disconnect
//! notification.
//!
//! russh only reports a refused host key as a generic `UnknownKey`; the handler keeps its own
//! verdict so the caller can say precisely what happened (unknown, changed, revoked).

use std::sync::{Arc, Mutex};

use russh::client::{DisconnectReason, Handler};
use russh::keys::{PublicKey, PublicKeyOrCertificate};
use tokio::sync::watch;

use crate::error::Error;
use crate::machine::HostKeyPolicy;
use crate::ssh::known_hosts::{self, HostKeyStatus, KnownHostsFiles};

/// What to do with the server key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum HostKeyMode {
    /// Verify with this policy.
    Enforce(HostKeyPolicy),
    /// Only record what the server presents and refuse (used to fetch a key for acceptance).
    Capture,
}

/// The outcome of the host key check.
#[derive(Debug, Clone)]
pub(crate) struct HostKeyVerdict {
    pub status: HostKeyStatus,
    pub fingerprint: String,
    pub key: PublicKey,
    /// The key was unknown and has been recorded (accept-new).
    pub recorded: bool,
    /// Recording failed.
    pub record_error: Option<Error>,
}

pub(crate) type SharedVerdict = Arc<Mutex<Option<HostKeyVerdict>>>;

pub(crate) struct ClientHandler {
    pub host: String,
    pub port: u16,
    pub files: KnownHostsFiles,
    pub mode: HostKeyMode,
    pub verdict: SharedVerdict,
    /// Set once to a description of why the session ended.
    pub gone: watch::Sender<Option<String>>,
}

impl Handler for ClientHandler {
    type Error = russh::Error;

    async fn check_server_key(
        &mut self,
        server_key: &PublicKeyOrCertificate,
    ) -> Result<bool, Self::Error> {
        let key = match server_key {
            PublicKeyOrCertificate::PublicKey { key, .. } => key.clone(),
            // We never ask for host certificates; trust only plain known keys.
            PublicKeyOrCertificate::Certificate(cert) => cert.public_key().clone().into(),
        };
        let status = known_hosts::check(&self.files, &self.host, self.port, &key);
        let mut verdict = HostKeyVerdict {
            fingerprint: known_hosts::fingerprint(&key),
            status: status.clone(),
            key: key.clone(),
            recorded: false,
            record_error: None,
        };
        let trusted = match (self.mode, &status) {
            (HostKeyMode::Capture, _) => false,
            (_, HostKeyStatus::Known { .. }) => true,
            (HostKeyMode::Enforce(HostKeyPolicy::AcceptNew), HostKeyStatus::Unknown) => {
                match self.files.primary() {
                    Some(path) => match known_hosts::append(path, &self.host, self.port, &key) {
                        Ok(()) => {
                            tracing::info!(
                                host = %self.host, port = self.port, file = %path.display(),
                                fingerprint = %verdict.fingerprint, "recorded new host key (accept-new)"
                            );
                            verdict.recorded = true;
                            true
                        }
                        Err(e) => {
                            verdict.record_error = Some(e);
                            false
                        }
                    },
                    None => false,
                }
            }
            _ => false,
        };
        if let Ok(mut slot) = self.verdict.lock() {
            *slot = Some(verdict);
        }
        Ok(trusted)
    }

    async fn disconnected(
        &mut self,
        reason: DisconnectReason<Self::Error>,
    ) -> Result<(), Self::Error> {
        let text = match &reason {
            DisconnectReason::ReceivedDisconnect(info) => {
                format!("the server closed the connection ({})", info.message)
            }
            DisconnectReason::Error(russh::Error::KeepaliveTimeout) => {
                "the server stopped answering keepalives".to_string()
            }
            DisconnectReason::Error(e) => format!("the connection failed ({e})"),
        };
        tracing::debug!(host = %self.host, port = self.port, reason = %text, "ssh disconnected");
        self.gone.send_replace(Some(text));
        match reason {
            DisconnectReason::ReceivedDisconnect(_) => Ok(()),
            DisconnectReason::Error(e) => Err(e),
        }
    }
}
