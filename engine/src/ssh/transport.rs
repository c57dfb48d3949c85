//! [`SshTransport`]: the [`Transport`] trait over a pooled russh connection and SFTP.

use std::sync::Arc;

use async_trait::async_trait;
use tokio::sync::Mutex;

use crate::error::Result;
use crate::machine::Machine;
use crate::ssh::exec;
use crate::ssh::options::{ConnectOptions, Target};
use crate::ssh::pool::Pool;
use crate::ssh::sftp::{self, RawChannel, SftpChannel};
use crate::transport::{
    BoxRead, BoxWrite, DirEntry, ExecOptions, ExecOutput, ExecStream, FileStat, Transport,
};

/// One machine reached over SSH.
pub struct SshTransport {
    machine_id: String,
    label: String,
    pool: Arc<Pool>,
    sftp: Mutex<Option<Arc<SftpChannel>>>,
    raw: Mutex<Option<Arc<RawChannel>>>,
}

impl std::fmt::Debug for SshTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SshTransport")
            .field("machine_id", &self.machine_id)
            .field("target", &self.label)
            .finish()
    }
}

impl SshTransport {
    /// Resolve the machine (ssh_config included) and open the first connection.
    pub async fn connect(machine: &Machine, opts: ConnectOptions) -> Result<Arc<SshTransport>> {
        let target = Target::resolve(machine, &opts)?;
        let label = target.label();
        let pool = Pool::new(target, opts);
        pool.warm_up().await?;
        Ok(Arc::new(SshTransport {
            machine_id: machine.machine_id.clone(),
            label,
            pool,
            sftp: Mutex::new(None),
            raw: Mutex::new(None),
        }))
    }

    pub fn machine_id(&self) -> &str {
        &self.machine_id
    }

    /// Close every connection of this transport.
    pub async fn close(&self) {
        self.sftp.lock().await.take();
        self.raw.lock().await.take();
        self.pool.shutdown().await;
    }

    async fn sftp(&self) -> Result<Arc<SftpChannel>> {
        let mut slot = self.sftp.lock().await;
        if let Some(s) = slot.as_ref().filter(|s| !s.conn.conn.is_closed()) {
            return Ok(s.clone());
        }
        slot.take();
        let s = Arc::new(sftp::open_session(&self.pool).await?);
        *slot = Some(s.clone());
        Ok(s)
    }

    async fn raw(&self) -> Result<Arc<RawChannel>> {
        let mut slot = self.raw.lock().await;
        if let Some(s) = slot.as_ref().filter(|s| !s.conn.conn.is_closed()) {
            return Ok(s.clone());
        }
        slot.take();
        let s = Arc::new(sftp::open_raw(&self.pool).await?);
        *slot = Some(s.clone());
        Ok(s)
    }

    /// Run an SFTP operation on the cached session (reopened when its connection dropped).
    async fn with_sftp<T, F, Fut>(&self, op: F) -> Result<T>
    where
        F: FnOnce(Arc<SftpChannel>) -> Fut,
        Fut: std::future::Future<Output = Result<T>>,
    {
        op(self.sftp().await?).await
    }
}

#[async_trait]
impl Transport for SshTransport {
    fn describe(&self) -> String {
        format!("ssh {}", self.label)
    }

    async fn exec_raw(&self, command: &str, options: ExecOptions) -> Result<ExecOutput> {
        let lease = self.pool.acquire().await?;
        exec::run(lease, command, options).await
    }

    async fn exec_stream(&self, command: &str) -> Result<Option<ExecStream>> {
        let lease = self.pool.acquire().await?;
        exec::stream(lease, command).await.map(Some)
    }

    async fn write_file(&self, path: &str, data: &[u8], mode: u32) -> Result<()> {
        let raw = self.raw().await?;
        sftp::write_atomic(&raw, path, data, mode).await
    }

    async fn read_file_range(&self, path: &str, offset: u64, max: usize) -> Result<Vec<u8>> {
        let raw = self.raw().await?;
        sftp::read_range(&raw, path, offset, max).await
    }

    async fn stat(&self, path: &str) -> Result<Option<FileStat>> {
        self.with_sftp(|s| async move { sftp::lstat(&s, path).await })
            .await
    }

    async fn create_dir_all(&self, path: &str, mode: u32) -> Result<()> {
        // The common case (the parent exists, the directory does not) in one round trip; the
        // walk from the root handles the rest (existing, symlinked or missing components).
        if let Ok(raw) = self.raw().await
            && sftp::mkdir(&raw, path, mode).await.is_ok()
        {
            return Ok(());
        }
        self.with_sftp(|s| async move { sftp::create_dir_all(&s, path, mode).await })
            .await
    }

    async fn create_dir_fresh(&self, base: &str, path: &str, mode: u32) -> Result<bool> {
        let raw = self.raw().await?;
        sftp::mkdir_below(&raw, base, path, mode).await
    }

    async fn write_new_file(&self, path: &str, data: &[u8], mode: u32) -> Result<()> {
        let raw = self.raw().await?;
        sftp::write_new(&raw, path, data, mode).await
    }

    async fn read_dir(&self, path: &str) -> Result<Vec<DirEntry>> {
        self.with_sftp(|s| async move { sftp::read_dir(&s, path).await })
            .await
    }

    async fn rename(&self, from: &str, to: &str) -> Result<()> {
        let raw = self.raw().await?;
        sftp::posix_rename(&raw, from, to).await
    }

    async fn remove_file(&self, path: &str) -> Result<()> {
        self.with_sftp(|s| async move { sftp::remove_file(&s, path).await })
            .await
    }

    async fn set_mode(&self, path: &str, mode: u32) -> Result<()> {
        self.with_sftp(|s| async move { sftp::set_mode(&s, path, mode).await })
            .await
    }

    async fn open_read(&self, path: &str) -> Result<BoxRead> {
        self.with_sftp(|s| async move { sftp::open_read(&s, path).await })
            .await
    }

    async fn open_write(&self, path: &str, mode: u32) -> Result<BoxWrite> {
        self.with_sftp(|s| async move { sftp::open_write(&s, path, mode).await })
            .await
    }

    fn is_connected(&self) -> bool {
        self.pool.is_connected()
    }
}
