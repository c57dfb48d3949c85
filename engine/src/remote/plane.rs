//! The control plane over a byte transport: [`Remote`], what the engine holds for a machine,
//! and [`ControlPlane`], the route one control-script call ([`Call`]) takes to it.
//!
//! A [`Remote`] is a machine's bytes (a [`Transport`]: raw exec, streams, files; reached through
//! `Deref`, so `remote.stat(..)` is the transport's) and the plane its calls take. The routes:
//!
//! - [`Direct`], on a connection this process holds (SSH or `local`): a kept control process
//!   (`ctl.sh serve`, [`ControlChannels`]) when one is free, else the call's own exec channel
//!   (installing the control script when the machine lacks it).
//! - The CLI's connection keeper (`crate::keeper::KeeperTransport`): the whole call crosses its
//!   socket and runs on the keeper's own [`Direct`] plane.
//! - A Slurm session's node (`crate::slurm::NodePlane`, over the node's bytes,
//!   `crate::slurm::NodeTransport`, whose processes run as steps of the job): the login
//!   machine's plane with the job, so a direct plane runs the call there on the connection's
//!   control processes under the job's scope, and the keeper's forwards it with the job.
//!
//! The route is fixed when the `Remote` is made (by the engine's connector), so a call is one
//! direct dispatch: no probing of the transport for what it can do.

use std::sync::Arc;

use async_trait::async_trait;

use super::{Call, ControlChannels, channels};
use crate::error::Result;
use crate::transport::{ExecOptions, ExecOutput, Transport};

/// The route a control-script call takes to the machine.
#[async_trait]
pub trait ControlPlane: Send + Sync + 'static {
    /// Run `call` and return the verb's own output. `transport` is the machine's bytes (for a
    /// Slurm node, its [`Transport`] that runs processes as steps of the job); `node` is that
    /// job, when the call is for a node.
    async fn call(
        &self,
        transport: &dyn Transport,
        node: Option<&str>,
        call: &Call<'_>,
    ) -> Result<ExecOutput>;
}

/// A machine as the engine reaches it: its byte transport and the control plane of its calls.
pub struct Remote {
    transport: Arc<dyn Transport>,
    plane: Arc<dyn ControlPlane>,
    /// The account's uid and `$HOME`, asked once (see [`Remote::account`]).
    account: tokio::sync::OnceCell<(u32, String)>,
}

impl std::fmt::Debug for Remote {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Remote")
            .field("transport", &self.transport.describe())
            .finish()
    }
}

impl std::ops::Deref for Remote {
    type Target = dyn Transport;

    fn deref(&self) -> &Self::Target {
        &*self.transport
    }
}

impl Remote {
    /// `transport`'s bytes with calls taking `plane`.
    pub fn new(transport: Arc<dyn Transport>, plane: Arc<dyn ControlPlane>) -> Remote {
        Remote {
            transport,
            plane,
            account: tokio::sync::OnceCell::new(),
        }
    }

    /// The account's uid and `$HOME` as its control calls see them: one call the first time,
    /// kept for the connection's life (neither changes under a running login).
    pub async fn account(&self) -> Result<(u32, String)> {
        self.account
            .get_or_try_init(|| async {
                let out = super::sh(
                    self,
                    "id -u; printf '%s' \"$HOME\"",
                    None,
                    Some(std::time::Duration::from_secs(30)),
                    64 << 10,
                )
                .await?;
                let text = out.stdout_lossy();
                let (uid, home) = text.split_once('\n').unwrap_or((&text, ""));
                match uid.trim().parse::<u32>() {
                    Ok(uid) if out.status.success() => Ok((uid, home.to_string())),
                    _ => Err(crate::error::Error::new(
                        crate::error::ErrorCode::RemoteError,
                        format!(
                            "could not learn the account's uid on {}: `id -u` said {:?}",
                            self.transport.describe(),
                            text.trim()
                        ),
                    )),
                }
            })
            .await
            .cloned()
    }

    /// A connection this process holds, with its own control processes ([`Direct`]). Make it
    /// once per connection and share it: the control processes live as long as it does.
    pub fn direct(transport: Arc<dyn Transport>) -> Arc<Remote> {
        Arc::new(Remote::new(transport, Arc::new(Direct::default())))
    }

    /// The byte transport, to share.
    pub fn transport(&self) -> &Arc<dyn Transport> {
        &self.transport
    }

    /// The byte transport, for code that only moves bytes (what `Deref` reaches, as the type a
    /// `&dyn Transport` parameter takes).
    pub fn bytes(&self) -> &dyn Transport {
        &*self.transport
    }

    /// The control plane its calls take.
    pub fn plane(&self) -> &Arc<dyn ControlPlane> {
        &self.plane
    }

    /// Run one control-script call (see [`Call::run`]).
    pub async fn call(&self, call: &Call<'_>) -> Result<ExecOutput> {
        self.plane
            .call(&*self.transport, None, call)
            .await
            .map(|o| call.cap(o))
    }

    /// Run the POSIX sh script `command` on the machine, whatever the account's login shell and
    /// whatever its startup files print (the control script's `sh` verb), non-interactively,
    /// no PTY.
    pub async fn exec(&self, command: &str, options: ExecOptions) -> Result<ExecOutput> {
        super::sh(
            self,
            command,
            options.stdin.as_deref(),
            options.timeout,
            options.max_output,
        )
        .await
    }
}

/// The route on a connection this process holds: a kept control process when one is free
/// (calls without input data and with a reply up to 1 MiB), else the call's own exec channel.
#[derive(Debug, Default)]
pub struct Direct {
    channels: ControlChannels,
}

#[async_trait]
impl ControlPlane for Direct {
    async fn call(
        &self,
        transport: &dyn Transport,
        node: Option<&str>,
        call: &Call<'_>,
    ) -> Result<ExecOutput> {
        if call.input().is_none()
            && call.output_cap() <= channels::MAX_REPLY
            && let Some(out) = self.channels.run(transport, node.unwrap_or(""), call).await
        {
            return out;
        }
        call.run_on_own_channel(transport).await
    }
}
