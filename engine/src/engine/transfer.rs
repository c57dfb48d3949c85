//! File transfers over a session's machine: put / get / list, files and whole trees, no mount.
//!
//! Bytes move through the transport's streaming file channel (SFTP for SSH), each file through a
//! bounded queue of 1 MiB chunks; a tree upload goes as one tar stream when the machine has tar
//! (`tree_stream`), otherwise many files in flight. Every file lands under a
//! temporary name in its destination directory and is renamed over the final name only when it
//! is complete, so an interrupted transfer never leaves a half file under the final name; a
//! retry simply starts again. The machine's path mappings are applied before any file operation;
//! records keep the user's own paths. Every transfer is recorded in the store (status
//! `running` while it goes on), with size, sha256 and the error when it failed.

mod get;
mod interrupted;
mod local_mode;
pub mod paths;
mod put;
mod sparse;
mod stream;
mod tree_stream;
mod verify;

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use serde::Serialize;
use tokio_util::sync::CancellationToken;

use crate::records::transfer as record;
pub use record::{
    ErrorInfo, FileEntry, FileListing, PartialFiles, SkippedEntry, TransferDirection, TransferKind,
    TransferRecord, TransferStatus,
};

use self::paths::RemotePath;
use super::{Engine, SessionRecord, SessionStatus};
use crate::error::{Error, ErrorCode, Hint, Result};
use crate::machine::PathMapping;
use crate::remote::Remote;
use crate::store;
use crate::transport::{ExecOptions, ExecOutput, FileKind};
use crate::util::{new_id, now_rfc3339};

/// Files of a tree copied at the same time (small files are bound by round trips, not bytes).
const FILES_IN_FLIGHT: usize = 16;

/// Progress of one transfer, reported after every chunk written.
#[derive(Debug, Clone, Serialize)]
pub struct TransferProgress {
    pub transfer_id: String,
    pub bytes_done: u64,
    /// Known once the source was examined (0 before).
    pub bytes_total: u64,
    pub files_done: u64,
    pub files_total: u64,
}

/// Called with every progress update (keep it cheap; it runs on the transfer's task).
pub type ProgressFn = Arc<dyn Fn(&TransferProgress) + Send + Sync>;

/// Options of [`Engine::file_put`] and [`Engine::file_get`].
#[derive(Clone, Default)]
pub struct TransferOptions {
    /// Hash both ends after the copy (the remote end with `sha256sum`, or by reading the file
    /// back) and fail with `verify_mismatch` when they differ. A single file is checked before
    /// it replaces the destination.
    pub verify: bool,
    /// Progress callback (a progress bar on a TTY).
    pub progress: Option<ProgressFn>,
    /// Stops the transfer (status `cancelled`); nothing is left under a final name.
    pub cancel: CancellationToken,
}

impl std::fmt::Debug for TransferOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TransferOptions")
            .field("verify", &self.verify)
            .field("progress", &self.progress.is_some())
            .field("cancelled", &self.cancel.is_cancelled())
            .finish()
    }
}

/// One running transfer: its transport, options and progress counters.
pub(crate) struct Job {
    t: Arc<Remote>,
    transfer_id: String,
    verify: bool,
    progress: Option<ProgressFn>,
    cancel: CancellationToken,
    bytes_done: AtomicU64,
    files_done: AtomicU64,
    bytes_total: AtomicU64,
    files_total: AtomicU64,
    /// This process's umask, read once when the transfer starts (downloads mask modes with it).
    umask: u32,
}

impl Job {
    fn set_totals(&self, bytes: u64, files: u64) {
        self.bytes_total.store(bytes, Ordering::Relaxed);
        self.files_total.store(files, Ordering::Relaxed);
        self.report();
    }

    fn add_bytes(&self, n: u64) {
        self.bytes_done.fetch_add(n, Ordering::Relaxed);
        self.report();
    }

    fn file_done(&self) {
        self.files_done.fetch_add(1, Ordering::Relaxed);
        self.report();
    }

    /// A file is in place: count it; its size and sha256.
    fn file_copied(&self, copied: stream::Copied) -> (u64, String) {
        self.file_done();
        (copied.bytes, copied.sha256)
    }

    fn report(&self) {
        if let Some(p) = &self.progress {
            p(&TransferProgress {
                transfer_id: self.transfer_id.clone(),
                bytes_done: self.bytes_done.load(Ordering::Relaxed),
                bytes_total: self.bytes_total.load(Ordering::Relaxed),
                files_done: self.files_done.load(Ordering::Relaxed),
                files_total: self.files_total.load(Ordering::Relaxed),
            });
        }
    }

    fn check_cancel(&self) -> Result<()> {
        if self.cancel.is_cancelled() {
            return Err(Error::new(
                ErrorCode::Cancelled,
                "the transfer was cancelled",
            ));
        }
        Ok(())
    }

    /// Run the POSIX sh script `script` on the machine, keeping up to `max_output` bytes of
    /// each output stream.
    async fn run_script(&self, script: &str, max_output: usize) -> Result<ExecOutput> {
        let options = ExecOptions {
            max_output,
            ..Default::default()
        };
        self.t.exec(script, options).await
    }

    /// An I/O error on the remote side of a stream: a lost link when the transport says so.
    fn link_error(&self, e: &std::io::Error, op: &str, path: &str) -> Error {
        if !self.t.is_connected() {
            return Error::new(
                ErrorCode::ConnectionLost,
                format!(
                    "the connection to the machine dropped during {op} of {path}; nothing was left \
                     under the final name; retry the transfer"
                ),
            );
        }
        let code = match e.kind() {
            std::io::ErrorKind::NotFound => ErrorCode::RemoteNotFound,
            std::io::ErrorKind::PermissionDenied => ErrorCode::PermissionDenied,
            std::io::ErrorKind::TimedOut => ErrorCode::Timeout,
            _ => ErrorCode::RemoteError,
        };
        Error::new(code, format!("{op} {path}: {e}"))
    }
}

/// What a put or get did so far (kept when it fails half way).
#[derive(Debug, Default)]
pub(crate) struct Outcome {
    kind: Option<TransferKind>,
    bytes: u64,
    files: u64,
    dirs: u64,
    symlinks: u64,
    sha256: Option<String>,
    verified: Option<bool>,
    skipped: Vec<SkippedEntry>,
}

impl Outcome {
    /// A single file was copied (and verified, with `verified`).
    fn one_file(&mut self, bytes: u64, sha256: String, verified: bool) {
        self.bytes = bytes;
        self.files = 1;
        self.sha256 = Some(sha256);
        self.verified = verified.then_some(true);
    }

    fn skip(&mut self, path: &str, reason: &str) {
        self.skipped.push(SkippedEntry {
            path: path.to_string(),
            reason: reason.to_string(),
            code: None,
        });
    }

    /// An entry not transferred because a path is over a host's limit (code `path_too_long`).
    fn skip_too_long(&mut self, path: &str, reason: &str) {
        self.skipped.push(SkippedEntry {
            path: path.to_string(),
            reason: reason.to_string(),
            code: Some("path_too_long".to_string()),
        });
    }
}

/// Copy files with `copies` (each yields its remote path, bytes and sha256),
/// [`FILES_IN_FLIGHT`] at a time, counting them in `out`. Returns (remote path, sha256, bytes)
/// of each, for verification.
async fn copy_files<F>(
    copies: impl Iterator<Item = F>,
    out: &mut Outcome,
) -> Result<Vec<(RemotePath, String, u64)>>
where
    F: std::future::Future<Output = Result<(RemotePath, u64, String)>>,
{
    use futures::StreamExt;
    let mut copies = futures::stream::iter(copies).buffer_unordered(FILES_IN_FLIGHT);
    let mut written = Vec::new();
    while let Some(copied) = copies.next().await {
        let (path, bytes, sha) = copied?;
        out.bytes += bytes;
        out.files += 1;
        written.push((path, sha, bytes));
    }
    Ok(written)
}

/// A trailing `/` asks for "inside this directory".
fn wants_dir(path: &str) -> bool {
    path.len() > 1 && path.ends_with('/')
}

fn mode_string(mode: u32) -> String {
    format!("{:04o}", mode & 0o7777)
}

fn kind_name(kind: FileKind) -> &'static str {
    match kind {
        FileKind::File => "file",
        FileKind::Dir => "dir",
        FileKind::Symlink => "symlink",
        FileKind::Other => "other",
    }
}

fn epoch_rfc3339(secs: i64) -> String {
    time::OffsetDateTime::from_unix_timestamp(secs)
        .map(crate::util::rfc3339)
        .unwrap_or_default()
}

impl Engine {
    /// Upload a local file or directory to `remote` on the session's machine. A relative remote
    /// path is taken from the session's cwd. A file goes inside `remote` when it is an existing
    /// directory or ends with `/`; a directory is copied *as* `remote` (merged into it when it
    /// exists). Symlinks inside a tree are recreated when their target stays inside it;
    /// other symlinks and special files are skipped and listed in the record's `skipped`.
    /// On failure the record is stored as `failed` and the error names the transfer id.
    ///
    /// ```no_run
    /// use remote_runner_engine::CancellationToken;
    /// use remote_runner_engine::engine::transfer::TransferOptions;
    ///
    /// # async fn demo(engine: &remote_runner_engine::engine::Engine, session_id: &str)
    /// # -> remote_runner_engine::Result<()> {
    /// let cancel = CancellationToken::new(); // `cancel.cancel()` from elsewhere stops it
    /// let options = TransferOptions { verify: true, cancel, ..TransferOptions::default() };
    /// let rec = engine
    ///     .file_put(session_id, "data.csv".as_ref(), "inputs/", options)
    ///     .await?;
    /// println!("{} bytes, sha256 {:?}", rec.bytes, rec.sha256);
    /// # Ok(())
    /// # }
    /// ```
    pub async fn file_put(
        &self,
        session_id: &str,
        local: &Path,
        remote: &str,
        options: TransferOptions,
    ) -> Result<TransferRecord> {
        self.transfer_in_session(session_id, TransferDirection::Put, local, remote, options)
            .await
    }

    /// Download a remote file or directory to `local`. A file goes inside `local` when it is an
    /// existing directory or ends with `/`; a directory is copied *as* `local`. Never writes
    /// outside `local`: unsafe names and symlinks leaving it are refused and listed in the
    /// record's `skipped`; set-id bits are dropped.
    ///
    /// ```no_run
    /// use remote_runner_engine::engine::transfer::TransferOptions;
    ///
    /// # async fn demo(engine: &remote_runner_engine::engine::Engine, session_id: &str)
    /// # -> remote_runner_engine::Result<()> {
    /// let rec = engine
    ///     .file_get(session_id, "results/", "./results".as_ref(), TransferOptions::default())
    ///     .await?;
    /// println!("{} files, {} bytes", rec.files, rec.bytes);
    /// # Ok(())
    /// # }
    /// ```
    pub async fn file_get(
        &self,
        session_id: &str,
        remote: &str,
        local: &Path,
        options: TransferOptions,
    ) -> Result<TransferRecord> {
        self.transfer_in_session(session_id, TransferDirection::Get, local, remote, options)
            .await
    }

    /// [`Engine::file_put`] or [`Engine::file_get`] in session `session_id`.
    async fn transfer_in_session(
        &self,
        session_id: &str,
        direction: TransferDirection,
        local: &Path,
        remote: &str,
        options: TransferOptions,
    ) -> Result<TransferRecord> {
        let (session, mappings) = self.transfer_session(session_id)?;
        let rec = self
            .transfer_with(&session, &mappings, direction, local, remote, options)
            .await?;
        record_as_result(rec)
    }

    /// Metadata of a remote path: a directory's entries (sorted by name), or the path itself.
    pub async fn file_list(&self, session_id: &str, remote: &str) -> Result<FileListing> {
        let (session, mappings) = self.transfer_session(session_id)?;
        let path = RemotePath::resolve(remote, &session.cwd, &mappings)?;
        let t = self.connector.connect(&session.machine_id).await?;
        let named = |e: Error| put::name_user_path(e, &path.cmd, &path.file);
        let st = t.stat(&path.file).await.map_err(named)?.ok_or_else(|| {
            Error::new(
                ErrorCode::RemoteNotFound,
                format!(
                    "remote path {} does not exist on machine {}",
                    path.cmd, session.machine_id
                ),
            )
        })?;
        let entry = |name: String, p: String, st: &crate::transport::FileStat| FileEntry {
            name,
            path: p,
            kind: kind_name(st.kind).to_string(),
            size: st.size,
            mode: mode_string(st.mode),
            mtime: epoch_rfc3339(st.mtime),
            mtime_unix: st.mtime,
        };
        let entries = if st.kind == FileKind::Dir {
            let mut listed = t.read_dir(&path.file).await.map_err(named)?;
            listed.sort_by(|a, b| a.name.cmp(&b.name));
            listed
                .iter()
                .map(|e| entry(e.name.clone(), paths::join(&path.cmd, &e.name), &e.stat))
                .collect()
        } else {
            let name = path
                .split()
                .map(|(_, n)| n)
                .unwrap_or_else(|| "/".to_string());
            vec![entry(name, path.cmd.clone(), &st)]
        };
        Ok(FileListing {
            session_id: session_id.to_string(),
            path: remote.to_string(),
            kind: kind_name(st.kind).to_string(),
            entries,
        })
    }

    /// Stored transfers, oldest first; of one session when given.
    pub fn transfer_history(&self, session_id: Option<&str>) -> Result<Vec<TransferRecord>> {
        if let Some(id) = session_id {
            self.load_session(id)?;
        }
        self.reap_interrupted();
        self.with_store(|s| store::transfers::list(s, session_id))
    }

    /// One stored transfer.
    pub fn transfer_show(&self, transfer_id: &str) -> Result<TransferRecord> {
        self.with_store(|s| store::transfers::get(s, transfer_id))?
            .ok_or_else(|| {
                Error::new(
                    ErrorCode::UnknownTransfer,
                    format!("no transfer {transfer_id}"),
                )
                .with_hint(Hint::ListTransfers)
            })
    }

    /// The session for a transfer (any status but destroyed) and its machine's path mappings.
    fn transfer_session(&self, session_id: &str) -> Result<(SessionRecord, Vec<PathMapping>)> {
        let session = self.load_session(session_id)?;
        if session.status == SessionStatus::Destroyed {
            return Err(Error::new(
                ErrorCode::SessionLost,
                format!(
                    "session {session_id} was destroyed; create a new session on machine {} to \
                     transfer files",
                    session.machine_id
                ),
            ));
        }
        let mappings = self
            .with_store(|s| store::machines::get(s, &session.machine_id))?
            .map(|m| m.path_mappings)
            .unwrap_or_default();
        Ok((session, mappings))
    }

    /// Run one transfer and store its record. `Err` only when it could not start (bad remote
    /// path); otherwise the stored record says how it ended, with the error beside it.
    pub(crate) async fn transfer_with(
        &self,
        session: &SessionRecord,
        mappings: &[PathMapping],
        direction: TransferDirection,
        local: &Path,
        remote: &str,
        options: TransferOptions,
    ) -> Result<(TransferRecord, Option<Error>)> {
        let place = TransferPlace {
            machine_id: &session.machine_id,
            session_id: Some(&session.session_id),
            cwd: &session.cwd,
        };
        self.transfer_at(place, mappings, direction, local, remote, options)
            .await
    }

    /// [`Engine::transfer_with`] for a place that need not be a session (a Slurm run's
    /// directory on the login node).
    pub(crate) async fn transfer_at(
        &self,
        place: TransferPlace<'_>,
        mappings: &[PathMapping],
        direction: TransferDirection,
        local: &Path,
        remote: &str,
        options: TransferOptions,
    ) -> Result<(TransferRecord, Option<Error>)> {
        let remote_path = RemotePath::resolve(remote, place.cwd, mappings)?;
        let local_shown = local.to_string_lossy().into_owned();
        let (source, destination) = match direction {
            TransferDirection::Put => (local_shown.clone(), remote.to_string()),
            TransferDirection::Get => (remote.to_string(), local_shown.clone()),
        };
        let mut rec = TransferRecord {
            transfer_id: new_id("xfer"),
            session_id: place.session_id.map(str::to_string),
            machine_id: place.machine_id.to_string(),
            direction,
            source,
            destination,
            kind: None,
            started_at: now_rfc3339(),
            ended_at: None,
            status: TransferStatus::Running,
            bytes: 0,
            files: 0,
            dirs: 0,
            symlinks: 0,
            sha256: None,
            verified: None,
            skipped: Vec::new(),
            error: None,
            partial_files: None,
        };
        self.reap_interrupted();
        // Locked before the record says `running`, so a running record is never taken for one
        // whose process died (see `interrupted`).
        let alive = interrupted::Alive::take(&self.state_dir, &rec.transfer_id)?;
        self.with_store(|s| store::transfers::upsert(s, &rec))?;
        let mut out = Outcome::default();
        let result = async {
            let t = self.connector.connect(place.machine_id).await?;
            let job = Job {
                t,
                transfer_id: rec.transfer_id.clone(),
                verify: options.verify,
                progress: options.progress.clone(),
                cancel: options.cancel.clone(),
                bytes_done: AtomicU64::new(0),
                files_done: AtomicU64::new(0),
                bytes_total: AtomicU64::new(0),
                files_total: AtomicU64::new(0),
                umask: local_mode::umask(),
            };
            job.check_cancel()?;
            match direction {
                TransferDirection::Put => {
                    put::put(&job, local, remote_path, wants_dir(remote), &mut out).await
                }
                TransferDirection::Get => {
                    let into = local_shown.ends_with('/');
                    let source = get::examine(&job, &remote_path).await?;
                    rec.partial_files = Some(interrupted::partial_files_of_get(
                        &rec.transfer_id,
                        &remote_path,
                        &source,
                        local,
                        into,
                    )?);
                    self.with_store(|s| store::transfers::upsert(s, &rec))?;
                    get::get(&job, &remote_path, source, local, into, &mut out).await
                }
            }
        }
        .await;
        // Files still in flight when a download failed or was cancelled were dropped half
        // written: remove their temporaries. A finished record names none.
        let partial = rec.partial_files.take();
        if let (Some(partial), Err(_)) = (&partial, &result) {
            interrupted::remove_partials(partial);
        }
        rec.kind = out.kind;
        rec.bytes = out.bytes;
        rec.files = out.files;
        rec.dirs = out.dirs;
        rec.symlinks = out.symlinks;
        rec.sha256 = out.sha256;
        rec.verified = out.verified;
        rec.skipped = out.skipped;
        rec.ended_at = Some(now_rfc3339());
        let error = match result {
            Ok(()) if rec.skipped.is_empty() => {
                rec.status = TransferStatus::Succeeded;
                None
            }
            Ok(()) => {
                rec.status = TransferStatus::Partial;
                None
            }
            Err(e) => {
                rec.status = if e.code == ErrorCode::Cancelled {
                    TransferStatus::Cancelled
                } else {
                    TransferStatus::Failed
                };
                if e.code == ErrorCode::VerifyMismatch {
                    rec.verified = Some(false);
                }
                rec.error = Some(ErrorInfo::from(&e));
                Some(e)
            }
        };
        self.with_store(|s| store::transfers::upsert(s, &rec))?;
        drop(alive);
        Ok((rec, error))
    }
}

/// Where a transfer happens: the machine, the session it belongs to (if any), and the directory
/// relative remote paths are taken from.
#[derive(Debug, Clone, Copy)]
pub(crate) struct TransferPlace<'a> {
    pub machine_id: &'a str,
    pub session_id: Option<&'a str>,
    pub cwd: &'a str,
}

/// A finished transfer as the public calls return it: the error (naming the stored transfer)
/// unless it succeeded.
fn record_as_result((rec, err): (TransferRecord, Option<Error>)) -> Result<TransferRecord> {
    match err {
        None => Ok(rec),
        Some(mut e) => {
            e.message = format!("{} (transfer {} recorded)", e.message, rec.transfer_id);
            if e.hint.is_none() {
                e.hint = Some(Hint::ShowTransfer {
                    transfer_id: rec.transfer_id,
                });
            }
            Err(e)
        }
    }
}
