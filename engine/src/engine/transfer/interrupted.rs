//! Downloads whose process died (SIGKILL, a crash, power loss) before they finished.
//!
//! Such a download leaves its record `running` and, next to its destination, temporary files
//! named `.NAME.rr-part-<transfer_id>.<random>`. The record names where they are
//! (`partial_files`). While a transfer runs, its process holds an exclusive lock on
//! `<state>/transfers/<transfer_id>.lock`; a later transfer or `file history` that can take that
//! lock knows the process is gone, removes the partial files and marks the record `failed`
//! with the error code `interrupted`.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use super::get::{Source, file_destination};
use super::paths::RemotePath;
use super::record::{ErrorInfo, PartialFiles, TransferRecord, TransferStatus};
use super::stream::temp_marker;
use crate::engine::Engine;
use crate::error::{Error, Result};
use crate::store;
use crate::util::now_rfc3339;

/// Held by the process running a transfer: the lock that says it is alive.
pub struct Alive {
    _lock: File,
    path: PathBuf,
}

impl Alive {
    /// Take the lock of `transfer_id` (before its record is stored as `running`).
    pub fn take(state_dir: &Path, transfer_id: &str) -> Result<Alive> {
        let dir = state_dir.join("transfers");
        store::ensure_private_dir(&dir)?;
        let path = lock_path(state_dir, transfer_id);
        let lock = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .mode(0o600)
            .open(&path)
            .map_err(|e| Error::io(format!("cannot create {}", path.display()), &e))?;
        lock.lock()
            .map_err(|e| Error::io(format!("cannot lock {}", path.display()), &e))?;
        Ok(Alive { _lock: lock, path })
    }
}

impl Drop for Alive {
    fn drop(&mut self) {
        // Removed while still locked; the lock goes with the file handle.
        let _ = std::fs::remove_file(&self.path);
    }
}

fn lock_path(state_dir: &Path, transfer_id: &str) -> PathBuf {
    state_dir
        .join("transfers")
        .join(format!("{transfer_id}.lock"))
}

/// Where the temporary files of downloading `source` to `local` will be.
pub fn partial_files_of_get(
    transfer_id: &str,
    src: &RemotePath,
    source: &Source,
    local: &Path,
    into_dir: bool,
) -> Result<PartialFiles> {
    let absolute = |p: &Path| {
        std::path::absolute(p).map_err(|e| Error::io(format!("cannot resolve {}", p.display()), &e))
    };
    let (dir, recursive) = if source.is_dir() {
        (absolute(local)?, true)
    } else {
        let dest = absolute(&file_destination(src, local, into_dir)?)?;
        let parent = dest.parent().map(Path::to_path_buf).unwrap_or(dest);
        (parent, false)
    };
    Ok(PartialFiles {
        dir: dir.to_string_lossy().into_owned(),
        recursive,
        name_contains: temp_marker(transfer_id),
    })
}

/// Remove the temporary files `partial` describes (never following a symlink); returns how many
/// were removed.
pub fn remove_partials(partial: &PartialFiles) -> usize {
    let mut removed = 0;
    let mut pending = vec![PathBuf::from(&partial.dir)];
    while let Some(dir) = pending.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let Ok(kind) = entry.file_type() else {
                continue;
            };
            let ours = entry
                .file_name()
                .to_string_lossy()
                .contains(&partial.name_contains);
            if ours && !kind.is_dir() {
                if std::fs::remove_file(entry.path()).is_ok() {
                    removed += 1;
                }
            } else if partial.recursive && kind.is_dir() {
                pending.push(entry.path());
            }
        }
    }
    removed
}

impl Engine {
    /// Finish the records of transfers whose process is gone (see the module doc). Problems are
    /// logged, never returned: this is housekeeping on the way to something else.
    pub(crate) fn reap_interrupted(&self) {
        let running = match self.with_store(store::transfers::list_running) {
            Ok(running) => running,
            Err(e) => {
                tracing::debug!("cannot look for interrupted transfers: {e}");
                return;
            }
        };
        for rec in running {
            if let Err(e) = self.reap_one(&rec.transfer_id) {
                tracing::debug!(transfer = %rec.transfer_id, "not reaped: {e}");
            }
        }
    }

    fn reap_one(&self, transfer_id: &str) -> Result<()> {
        let path = lock_path(self.state_dir(), transfer_id);
        // No lock file: a record from before locks, or one that is just finishing.
        let Ok(lock) = OpenOptions::new().write(true).open(&path) else {
            return Ok(());
        };
        if lock.try_lock().is_err() {
            return Ok(()); // its process is alive
        }
        // Read again under the lock: the transfer may have ended just before.
        let Some(mut rec) = self.with_store(|s| store::transfers::get(s, transfer_id))? else {
            return Ok(());
        };
        if rec.status != TransferStatus::Running {
            return Ok(());
        }
        let removed = rec.partial_files.as_ref().map(remove_partials).unwrap_or(0);
        mark_interrupted(&mut rec, removed);
        self.with_store(|s| store::transfers::upsert(s, &rec))?;
        let _ = std::fs::remove_file(&path);
        Ok(())
    }
}

fn mark_interrupted(rec: &mut TransferRecord, removed: usize) {
    let files = match (&rec.partial_files, removed) {
        (Some(p), n) if n > 0 => format!(
            "; its {n} partial file(s) (named *{}* under {}) were removed",
            p.name_contains, p.dir
        ),
        _ => String::new(),
    };
    rec.status = TransferStatus::Failed;
    rec.ended_at = Some(now_rfc3339());
    rec.partial_files = None;
    rec.error = Some(ErrorInfo {
        code: "interrupted".to_string(),
        message: format!(
            "the process running this transfer ended before it finished (killed?){files}; \
             nothing was left under the final name; run the transfer again"
        ),
        retryable: true,
        hint: None,
    });
}
