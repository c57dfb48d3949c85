//! A connection pool for one machine: channels multiplexed over few connections.
//!
//! Each connection has a budget of channels (OpenSSH `MaxSessions`, 10 by default, the SFTP
//! channels included). The budget starts at [`ConnectOptions::max_sessions`] and shrinks when
//! the server refuses a channel, so a server with a lower limit is learnt, not failed on. When
//! every connection is full a new one is opened, up to `max_connections`; beyond that callers
//! queue until a channel is released. Dead connections are dropped and replaced (establishing
//! them again is retried under [`retry::CONNECT`]).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use russh::Channel;
use russh::client::Msg;
use tokio::sync::{Mutex, Notify, OwnedSemaphorePermit, Semaphore};

use crate::error::{Error, ErrorCode, Result};
use crate::ssh::auth::KeyCache;
use crate::ssh::connection::{Connection, Diagnostics, establish};
use crate::ssh::options::{ConnectOptions, Target};
use crate::util::retry;

/// One pooled connection and its channel budget.
pub(crate) struct PooledConn {
    pub conn: Connection,
    slots: Arc<Semaphore>,
    capacity: AtomicUsize,
    /// Channels open now on this connection (leases alive).
    open: Arc<AtomicUsize>,
    /// Most channels the server ever had open at once for us: it allows at least that many, so
    /// the budget never shrinks below it. A refusal at or under it is the server not having
    /// finished closing a channel we released, which passes.
    proven: AtomicUsize,
    /// Refusals in a row with nothing else open on this connection.
    lone_refusals: AtomicUsize,
}

impl PooledConn {
    fn new(conn: Connection, capacity: usize) -> Self {
        PooledConn {
            conn,
            slots: Arc::new(Semaphore::new(capacity)),
            capacity: AtomicUsize::new(capacity),
            open: Arc::new(AtomicUsize::new(0)),
            proven: AtomicUsize::new(0),
            lone_refusals: AtomicUsize::new(0),
        }
    }
}

/// Refusals in a row, with no other channel open on the connection, before it counts as a
/// server that opens no channel at all (about 2 s with the retry pause).
const MAX_LONE_REFUSALS: usize = 40;
const REFUSAL_PAUSE: Duration = Duration::from_millis(50);

/// A channel and its slot in a connection's budget. The slot is released on drop.
pub(crate) struct ChannelLease {
    channel: Option<Channel<Msg>>,
    permit: Option<OwnedSemaphorePermit>,
    pub conn: Arc<PooledConn>,
    released: Arc<Notify>,
}

impl ChannelLease {
    /// Take the channel out (e.g. to turn it into a stream); the slot stays held by the lease.
    pub fn take_channel(&mut self) -> Option<Channel<Msg>> {
        self.channel.take()
    }
}

impl Drop for ChannelLease {
    fn drop(&mut self) {
        self.channel.take();
        self.permit.take();
        self.conn.open.fetch_sub(1, Ordering::SeqCst);
        self.released.notify_waiters();
    }
}

pub(crate) struct Pool {
    pub target: Target,
    pub opts: ConnectOptions,
    keys: KeyCache,
    conns: std::sync::Mutex<Vec<Arc<PooledConn>>>,
    released: Arc<Notify>,
    connecting: Mutex<()>,
    ever_connected: AtomicBool,
}

impl Pool {
    pub fn new(target: Target, opts: ConnectOptions) -> Arc<Pool> {
        Arc::new(Pool {
            target,
            opts,
            keys: KeyCache::default(),
            conns: std::sync::Mutex::new(Vec::new()),
            released: Arc::new(Notify::new()),
            connecting: Mutex::new(()),
            ever_connected: AtomicBool::new(false),
        })
    }

    fn live_conns(&self) -> Vec<Arc<PooledConn>> {
        let mut conns = self.conns.lock().unwrap_or_else(|p| p.into_inner());
        conns.retain(|c| !c.conn.is_closed());
        conns.clone()
    }

    /// Whether at least one connection is up.
    pub fn is_connected(&self) -> bool {
        !self.live_conns().is_empty()
    }

    /// Open the first connection now, so that connect errors surface at connect time.
    pub async fn warm_up(&self) -> Result<()> {
        if self.live_conns().is_empty() {
            let _guard = self.connecting.lock().await;
            if self.live_conns().is_empty() {
                self.add_connection().await?;
            }
        }
        Ok(())
    }

    fn open_bound(&self) -> Duration {
        self.target.connect_timeout
    }

    /// A session channel on some connection; queues while every budget is used.
    pub async fn acquire(&self) -> Result<ChannelLease> {
        loop {
            let notified = self.released.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();

            for c in self.live_conns() {
                let Ok(permit) = c.slots.clone().try_acquire_owned() else {
                    continue;
                };
                match c.conn.open_session(self.open_bound()).await {
                    Ok(channel) => {
                        let now_open = c.open.fetch_add(1, Ordering::SeqCst) + 1;
                        c.proven.fetch_max(now_open, Ordering::SeqCst);
                        c.lone_refusals.store(0, Ordering::SeqCst);
                        return Ok(ChannelLease {
                            channel: Some(channel),
                            permit: Some(permit),
                            conn: c.clone(),
                            released: self.released.clone(),
                        });
                    }
                    Err(None) => {
                        // The server refused: either its MaxSessions is lower than our budget
                        // (learn it), or it has not yet finished closing a channel we released.
                        let cap = c.capacity.load(Ordering::SeqCst);
                        let proven = c.proven.load(Ordering::SeqCst).max(1);
                        if cap > proven {
                            c.capacity.store(cap - 1, Ordering::SeqCst);
                            permit.forget();
                            tracing::debug!(conn = %c.conn.label, capacity = cap - 1, "server refused a channel; lowering the per-connection budget");
                        } else {
                            drop(permit);
                            let lone = c.open.load(Ordering::SeqCst) == 0;
                            let refusals = if lone {
                                c.lone_refusals.fetch_add(1, Ordering::SeqCst) + 1
                            } else {
                                0
                            };
                            if refusals >= MAX_LONE_REFUSALS {
                                return Err(Error::new(
                                    ErrorCode::RemoteError,
                                    format!(
                                        "the server at {} refuses to open any session channel; check its MaxSessions and sshd logs",
                                        c.conn.label
                                    ),
                                ));
                            }
                            tokio::time::sleep(REFUSAL_PAUSE).await;
                        }
                    }
                    Err(Some(e)) if e.code == ErrorCode::ConnectionLost => {
                        // Nothing ran on it yet: drop the dead connection and try again.
                        drop(permit);
                    }
                    Err(Some(e)) => return Err(e),
                }
            }

            let room = self.live_conns().len() < self.opts.max_connections.max(1);
            if room && let Ok(_guard) = self.connecting.try_lock() {
                if self.live_conns().len() < self.opts.max_connections.max(1) {
                    self.add_connection().await?;
                }
                continue;
            }
            // Wait for a release (or a new connection); re-check now and then regardless.
            let _ = tokio::time::timeout(Duration::from_millis(500), notified).await;
        }
    }

    /// Open one more connection. A first connect fails at once; after a drop, establishing is
    /// retried under [`retry::CONNECT`] (with `reconnect_attempts` tries).
    async fn add_connection(&self) -> Result<()> {
        let policy = if self.ever_connected.load(Ordering::SeqCst) {
            retry::CONNECT.with_attempts(self.opts.reconnect_attempts)
        } else {
            retry::CONNECT.with_attempts(1)
        };
        let conn = retry::run(policy, || self.establish(), |e| e.retryable).await?;
        self.ever_connected.store(true, Ordering::SeqCst);
        let pooled = Arc::new(PooledConn::new(conn, self.opts.max_sessions.max(1)));
        self.conns
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(pooled);
        self.released.notify_waiters();
        Ok(())
    }

    async fn establish(&self) -> Result<Connection> {
        let mut diag = Diagnostics::default();
        establish(&self.target, &self.opts, &self.keys, None, &mut diag).await
    }

    /// Close every connection.
    pub async fn shutdown(&self) {
        let conns: Vec<_> = self
            .conns
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .drain(..)
            .collect();
        for c in conns {
            let _ = c
                .conn
                .handle
                .disconnect(russh::Disconnect::ByApplication, "bye", "en")
                .await;
        }
    }
}
