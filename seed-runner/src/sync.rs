//! The mount as a sync (no FUSE): local changes up before each exec, the log and the remote
//! `artifacts/` down after it. Files go through the engine's transfer API (`file_put`,
//! `file_get`); the transport is used only to list the remote `artifacts/`, create parent
//! directories and remove files deleted locally.
//!
//! Up: every regular file under the local dir except `artifacts/` and `metadata.json` at its
//! root (symlinks and special files are skipped). A file whose size and mtime match the
//! manifest is not read; one whose contents hash the same is not sent. A file uploaded before
//! and since deleted locally is removed on the remote side (only files seed-runner uploaded;
//! nothing the commands created is ever deleted).
//!
//! Down: every regular file under `<remote>/artifacts/` whose size or mtime changed since it was
//! last fetched goes to `<local>/artifacts/`. Files deleted remotely stay local. Names from the
//! machine are data (a newline, a leading `-`); `artifacts/logs/` is the command logs' own
//! place here, so a remote file there is never fetched (it would overwrite a log), and one
//! artifact that cannot be fetched is reported, not a failed sync: later execs are unharmed.

use std::collections::BTreeSet;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use remote_runner_engine::ErrorCode;
use remote_runner_engine::engine::Engine;
use remote_runner_engine::engine::transfer::TransferOptions;
use remote_runner_engine::remote::Remote;
use remote_runner_engine::transport::{ExecOptions, shell_quote};
use sha2::{Digest, Sha256};

use crate::error::{Result, SYNC, SeedError};
use crate::state::{FileSig, Manifest};

/// What one upload did.
#[derive(Debug, Default)]
pub struct UpStats {
    pub uploaded: Vec<String>,
    pub deleted: Vec<String>,
}

fn sync_err(what: String) -> SeedError {
    SeedError::new(SYNC, "sync_failed", what)
}

fn mtime_ns(meta: &std::fs::Metadata) -> i128 {
    meta.modified()
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map(|d| d.as_nanos() as i128)
        .unwrap_or(0)
}

fn hash_file(path: &Path) -> std::io::Result<String> {
    let mut f = std::fs::File::open(path)?;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = f.read(&mut buf)?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    Ok(hex::encode(h.finalize()))
}

/// Regular files under `root` (relative, `/`-separated), without the reserved names.
fn local_files(root: &Path) -> Result<Vec<(String, PathBuf)>> {
    let mut out = Vec::new();
    let mut stack = vec![(String::new(), root.to_path_buf())];
    while let Some((rel, dir)) = stack.pop() {
        let entries = std::fs::read_dir(&dir)
            .map_err(|e| sync_err(format!("cannot read {}: {e}", dir.display())))?;
        for entry in entries {
            let entry =
                entry.map_err(|e| sync_err(format!("cannot read {}: {e}", dir.display())))?;
            let Some(name) = entry.file_name().to_str().map(str::to_string) else {
                continue; // not UTF-8: cannot be named on the remote side reliably
            };
            if rel.is_empty() && (name == "artifacts" || name == "metadata.json") {
                continue;
            }
            let child_rel = if rel.is_empty() {
                name.clone()
            } else {
                format!("{rel}/{name}")
            };
            let Ok(kind) = entry.file_type() else {
                continue;
            };
            if kind.is_dir() {
                stack.push((child_rel, entry.path()));
            } else if kind.is_file() {
                out.push((child_rel, entry.path()));
            }
        }
    }
    out.sort();
    Ok(out)
}

fn parent_of(path: &str) -> Option<&str> {
    path.rsplit_once('/')
        .map(|(p, _)| p)
        .filter(|p| !p.is_empty())
}

/// Send what changed under `local_root` to `remote_root`; remove what was deleted.
pub async fn upload(
    engine: &Engine,
    engine_session: &str,
    transport: &Arc<Remote>,
    local_root: &Path,
    remote_root: &str,
    manifest: &mut Manifest,
) -> Result<UpStats> {
    let mut stats = UpStats::default();
    let files = local_files(local_root)?;
    let present: BTreeSet<&str> = files.iter().map(|(r, _)| r.as_str()).collect();
    let mut made_dirs = BTreeSet::new();
    for (rel, path) in &files {
        let meta = std::fs::metadata(path)
            .map_err(|e| sync_err(format!("cannot stat {}: {e}", path.display())))?;
        let size = meta.len();
        let mtime = mtime_ns(&meta);
        if let Some(sig) = manifest.uploaded.get(rel)
            && sig.size == size
            && sig.mtime_ns == mtime
        {
            continue;
        }
        let sha = hash_file(path)
            .map_err(|e| sync_err(format!("cannot read {}: {e}", path.display())))?;
        if let Some(sig) = manifest.uploaded.get_mut(rel)
            && sig.sha256 == sha
        {
            sig.size = size;
            sig.mtime_ns = mtime;
            continue;
        }
        let remote = format!("{remote_root}/{rel}");
        if let Some(parent) = parent_of(rel)
            && made_dirs.insert(parent.to_string())
        {
            transport
                .create_dir_all(&format!("{remote_root}/{parent}"), 0o755)
                .await
                .map_err(|e| {
                    sync_err(format!(
                        "cannot create {remote_root}/{parent} on the remote machine: {}",
                        e.message
                    ))
                })?;
        }
        engine
            .file_put(engine_session, path, &remote, TransferOptions::default())
            .await
            .map_err(|e| {
                SeedError::engine(
                    e,
                    &format!("uploading {} to {remote}", path.display()),
                    (SYNC, "sync_failed"),
                )
            })?;
        manifest.uploaded.insert(
            rel.clone(),
            FileSig {
                size,
                mtime_ns: mtime,
                sha256: sha,
            },
        );
        stats.uploaded.push(rel.clone());
    }
    let gone: Vec<String> = manifest
        .uploaded
        .keys()
        .filter(|k| !present.contains(k.as_str()))
        .cloned()
        .collect();
    for rel in gone {
        let remote = format!("{remote_root}/{rel}");
        match transport.remove_file(&remote).await {
            Ok(()) => {}
            Err(e) if e.code == ErrorCode::RemoteNotFound => {}
            Err(e) => {
                return Err(sync_err(format!(
                    "cannot remove {remote} (deleted locally) on the remote machine: {}",
                    e.message
                )));
            }
        }
        manifest.uploaded.remove(&rel);
        stats.deleted.push(rel);
    }
    Ok(stats)
}

/// Files under `<remote_root>/artifacts`: (relative path, size, mtime) of each, and the names
/// (lossily decoded) of those whose path is not UTF-8, which no transfer can name.
async fn remote_artifacts(
    transport: &Arc<Remote>,
    remote_root: &str,
) -> Result<(Vec<(String, u64, String)>, Vec<String>)> {
    let dir = format!("{remote_root}/artifacts");
    let script = format!(
        "cd {} 2>/dev/null || exit 0; find . -type f -printf '%P\\0%s\\0%T@\\0'",
        shell_quote(&dir)
    );
    let out = transport
        .exec(&script, ExecOptions::default())
        .await
        .map_err(|e| SeedError::engine(e, "listing the remote artifacts", (SYNC, "sync_failed")))?;
    if !out.status.success() {
        return Err(sync_err(format!(
            "listing {dir} failed: {}",
            out.stderr_lossy().trim()
        )));
    }
    let fields: Vec<&[u8]> = out.stdout.split(|b| *b == 0).collect();
    let mut files = Vec::new();
    let mut not_utf8 = Vec::new();
    for chunk in fields.chunks(3) {
        let [name, size, mtime] = chunk else {
            continue;
        };
        let Ok(name) = std::str::from_utf8(name) else {
            not_utf8.push(String::from_utf8_lossy(name).into_owned());
            continue;
        };
        let (Ok(size), Ok(mtime)) = (std::str::from_utf8(size), std::str::from_utf8(mtime)) else {
            continue;
        };
        let Ok(size) = size.parse::<u64>() else {
            continue;
        };
        if name.is_empty() || name.split('/').any(|c| c == ".." || c.is_empty()) {
            continue;
        }
        files.push((name.to_string(), size, mtime.to_string()));
    }
    Ok((files, not_utf8))
}

/// What one download of the artifacts did.
#[derive(Debug, Default)]
pub struct DownStats {
    pub fetched: Vec<String>,
    /// Artifacts not fetched: (path under `artifacts/`, why).
    pub skipped: Vec<(String, String)>,
}

/// The local directory under `artifacts/` that belongs to the command logs.
const LOGS: &str = "logs";

/// Errors that say the link or the machine is gone (the sync fails), as opposed to one file.
fn link_gone(code: ErrorCode) -> bool {
    matches!(
        code,
        ErrorCode::ConnectionFailed
            | ErrorCode::ConnectionLost
            | ErrorCode::AuthFailed
            | ErrorCode::HostKeyUnknown
            | ErrorCode::HostKeyChanged
            | ErrorCode::UnknownMachine
    )
}

/// Bring changed remote `artifacts/` files to `<local_root>/artifacts/`.
pub async fn download_artifacts(
    engine: &Engine,
    engine_session: &str,
    transport: &Arc<Remote>,
    local_root: &Path,
    remote_root: &str,
    manifest: &mut Manifest,
) -> Result<DownStats> {
    let mut stats = DownStats::default();
    let (files, not_utf8) = remote_artifacts(transport, remote_root).await?;
    for rel in not_utf8 {
        stats.skipped.push((
            rel,
            "its name is not valid UTF-8, which a transfer cannot name; rename it on the \
             machine to bring it back"
                .to_string(),
        ));
    }
    for (rel, size, mtime) in files {
        if rel.split('/').next() == Some(LOGS) {
            stats.skipped.push((
                rel,
                "artifacts/logs/ holds the command logs here; a remote file there is not \
                 fetched (rename it on the machine to bring it back)"
                    .to_string(),
            ));
            continue;
        }
        let local = local_root.join("artifacts").join(&rel);
        if manifest.downloaded.get(&rel) == Some(&(size, mtime.clone())) && local.exists() {
            continue;
        }
        if let Some(parent) = local.parent()
            && let Err(e) = std::fs::create_dir_all(parent)
        {
            stats
                .skipped
                .push((rel, format!("cannot create {}: {e}", parent.display())));
            continue;
        }
        let remote = format!("{remote_root}/artifacts/{rel}");
        match engine
            .file_get(engine_session, &remote, &local, TransferOptions::default())
            .await
        {
            Ok(_) => {}
            Err(e) if link_gone(e.code) => {
                return Err(SeedError::engine(
                    e,
                    &format!("fetching {remote}"),
                    (SYNC, "sync_failed"),
                ));
            }
            Err(e) => {
                stats.skipped.push((rel, e.message));
                continue;
            }
        }
        manifest.downloaded.insert(rel.clone(), (size, mtime));
        stats.fetched.push(rel);
    }
    Ok(stats)
}
