//! Download: one remote file or a remote tree to a local path, never writing outside it.
//!
//! Names a server sends are checked (no `..`, `/`, NUL); every directory written into is a real
//! directory (an existing symlink in the way is refused); symlinks are recreated only when their
//! target stays inside the destination; each file is written to a temporary name and renamed
//! over its final name only when complete. Modes never widen local permissions (`local_mode`):
//! the remote mode masked by the umask and 0755; an existing destination keeps its own.

use std::collections::HashSet;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use tokio::io::AsyncReadExt;

use super::local_mode;
use super::paths::{RemotePath, join, safe_name, symlink_stays_inside};
use super::put::{name_user_path, verify_written};
use super::stream::{self, PumpError};
use super::verify;
use super::{Job, Outcome, TransferKind, copy_files};
use crate::error::{Error, ErrorCode, Hint, Result};
use crate::transport::{ExecOptions, FileKind, FileStat, shell_quote};

/// One entry of a remote tree, relative to its root.
#[derive(Debug, Clone)]
struct RemoteEntry {
    rel: String,
    kind: FileKind,
    size: u64,
    mode: u32,
}

/// The remote source of a download, examined before anything is written.
pub struct Source {
    st: FileStat,
    is_dir: bool,
}

impl Source {
    pub fn is_dir(&self) -> bool {
        self.is_dir
    }
}

/// Stat the remote source: missing is `remote_not_found`; a symlink the user named is followed
/// (a directory if it can be listed).
pub async fn examine(job: &Job, src: &RemotePath) -> Result<Source> {
    let st = job
        .t
        .stat(&src.file)
        .await
        .map_err(|e| name_user_path(e, &src.cmd, &src.file))?
        .ok_or_else(|| {
            Error::new(
                ErrorCode::RemoteNotFound,
                format!("remote path {} does not exist", src.cmd),
            )
            .with_hint(Hint::ListRemoteDir {
                path: parent_dir(&src.cmd),
            })
        })?;
    let is_dir = match st.kind {
        FileKind::Dir => true,
        FileKind::Symlink => job.t.read_dir(&src.file).await.is_ok(),
        _ => false,
    };
    Ok(Source { st, is_dir })
}

/// Where a single file from `src` lands for the local path `local`.
pub fn file_destination(src: &RemotePath, local: &Path, into_dir: bool) -> Result<PathBuf> {
    if into_dir || local.is_dir() {
        let name = src
            .split()
            .map(|(_, n)| n)
            .ok_or_else(|| Error::invalid(format!("{} has no file name", src.cmd)))?;
        Ok(local.join(name))
    } else {
        Ok(local.to_path_buf())
    }
}

pub async fn get(
    job: &Job,
    src: &RemotePath,
    source: Source,
    local: &Path,
    into_dir: bool,
    out: &mut Outcome,
) -> Result<()> {
    let Source { st, is_dir } = source;
    if is_dir {
        out.kind = Some(TransferKind::Dir);
        get_tree(job, src, local, out).await
    } else {
        out.kind = Some(TransferKind::File);
        if st.kind == FileKind::Other {
            return Err(Error::invalid(format!(
                "remote {} is not a regular file or directory; only those can be downloaded",
                src.cmd
            )));
        }
        let dest = file_destination(src, local, into_dir)?;
        // Missing parent directories are created (like `mkdir -p`).
        if let Some(parent) = dest.parent().filter(|p| !p.as_os_str().is_empty())
            && !parent.exists()
        {
            std::fs::create_dir_all(parent).map_err(|e| local_io("create", parent, &e))?;
        }
        // A named symlink is followed: its own size and mode say nothing about the file.
        let (size, mode) = if st.kind == FileKind::Symlink {
            (0, followed_mode(job, src).await.unwrap_or(0o644))
        } else {
            (st.size, st.mode)
        };
        job.set_totals(size, 1);
        let (bytes, sha) = get_file(job, src, &dest, size, mode, job.verify).await?;
        out.one_file(bytes, sha, job.verify);
        Ok(())
    }
}

/// The mode of what a remote symlink points to (`stat -L` on the machine; the file channel
/// only offers `lstat`).
async fn followed_mode(job: &Job, path: &RemotePath) -> Option<u32> {
    let out = job
        .t
        .exec(
            &format!("stat -L -c %a -- {}", shell_quote(&path.cmd)),
            ExecOptions::default(),
        )
        .await
        .ok()?;
    if !out.status.success() {
        return None;
    }
    u32::from_str_radix(out.stdout_lossy().trim(), 8).ok()
}

fn local_io(what: &str, path: &Path, e: &std::io::Error) -> Error {
    Error::io(format!("cannot {what} {}", path.display()), e)
}

/// How many bytes to read from a remote file listed with `size`: exactly that many (the size at
/// listing time, as scp does). Reading on to find the end would make russh-sftp, whose read-ahead
/// adopts the first (short) reply as its chunk size, queue dozens of reads past the end of every
/// small file. A listed size of 0 (empty, or a /proc-like file) reads to the end instead.
fn read_limit(size: u64, otherwise: u64) -> u64 {
    if size > 0 { size } else { otherwise }
}

/// Files up to this size are read whole and written locally in one blocking step (trees of
/// small files are bound by per-file overhead, not bytes).
const SMALL_FILE: u64 = 64 * 1024;

/// Download one file to `dest` through a temporary name; returns (bytes, sha256 of the bytes
/// received). With `verify` the remote file is hashed on the machine before the rename.
async fn get_file(
    job: &Job,
    src: &RemotePath,
    dest: &Path,
    size: u64,
    mode: u32,
    verify: bool,
) -> Result<(u64, String)> {
    let mode = local_mode::for_file(dest, mode, job.umask);
    if !verify
        && size <= SMALL_FILE
        && let Some(done) = get_small_file(job, src, dest, size, mode).await?
    {
        job.file_done();
        return Ok(done);
    }
    let reader = job
        .t
        .open_read(&src.file)
        .await
        .map_err(|e| name_user_path(e, &src.cmd, &src.file))?;
    let reader = reader.take(read_limit(size, u64::MAX));
    let (writer, tmp) = stream::create_local_temp(dest, &job.transfer_id)
        .await
        .map_err(|e| local_io("create a file next to", dest, &e))?;
    let copied = stream::pump_to_file(
        reader,
        writer.into_std().await,
        stream::Pace::new(size, &|n| job.add_bytes(n), &job.cancel),
    )
    .await;
    let finish = async {
        let copied = copied.map_err(|e| match e {
            PumpError::Cancelled => Error::new(
                ErrorCode::Cancelled,
                format!(
                    "the transfer of {} was cancelled; nothing was left under the final name",
                    src.cmd
                ),
            ),
            PumpError::Read(e) => job.link_error(&e, "read", &src.cmd),
            PumpError::Write(e) => local_io("write", &tmp, &e),
        })?;
        std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(mode))
            .map_err(|e| local_io("set the mode of", &tmp, &e))?;
        if verify {
            verify::check_one(job.t.as_ref(), src, &src.cmd, &copied).await?;
        }
        std::fs::rename(&tmp, dest).map_err(|e| local_io("rename into place", dest, &e))?;
        Ok::<_, Error>(copied)
    }
    .await;
    if finish.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    finish.map(|copied| job.file_copied(copied))
}

/// The small-file path of [`get_file`]: `None` when the file turned out bigger than expected
/// (it grew), so the caller streams it instead.
async fn get_small_file(
    job: &Job,
    src: &RemotePath,
    dest: &Path,
    size: u64,
    mode: u32,
) -> Result<Option<(u64, String)>> {
    use sha2::{Digest, Sha256};
    let reader = job
        .t
        .open_read(&src.file)
        .await
        .map_err(|e| name_user_path(e, &src.cmd, &src.file))?;
    let mut data = Vec::new();
    let mut limited = reader.take(read_limit(size, SMALL_FILE + 1));
    let read = limited.read_to_end(&mut data);
    tokio::select! {
        r = read => { r.map_err(|e| job.link_error(&e, "read", &src.cmd))?; }
        _ = job.cancel.cancelled() => {
            return Err(Error::new(ErrorCode::Cancelled, format!("the transfer of {} was cancelled", src.cmd)));
        }
    }
    if data.len() as u64 > SMALL_FILE {
        return Ok(None);
    }
    let sha = hex::encode(Sha256::digest(&data));
    let len = data.len() as u64;
    let dest = dest.to_path_buf();
    let tag = job.transfer_id.clone();
    tokio::task::spawn_blocking(move || write_small(&dest, &data, mode, &tag))
        .await
        .map_err(|e| Error::internal(format!("file task failed: {e}")))??;
    job.add_bytes(len);
    Ok(Some((len, sha)))
}

/// Write `data` to a new temporary file (of transfer `transfer_id`) next to `dest`, apply
/// `mode`, rename over `dest`.
fn write_small(dest: &Path, data: &[u8], mode: u32, transfer_id: &str) -> Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let name = dest
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = dest.with_file_name(stream::temp_name_for(&name, transfer_id));
    let written = (|| {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&tmp)?;
        f.write_all(data)?;
        f.set_permissions(std::fs::Permissions::from_mode(mode))?;
        drop(f);
        std::fs::rename(&tmp, dest)
    })();
    written.map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        local_io("write", dest, &e)
    })
}

/// List a remote tree (entries not followed), parents before children. Unsafe names are
/// reported in `out.skipped` and never descended into.
async fn walk(job: &Job, root: &RemotePath, out: &mut Outcome) -> Result<Vec<RemoteEntry>> {
    let mut entries = Vec::new();
    let mut pending = vec![String::new()];
    while let Some(rel) = pending.pop() {
        let dir = root.join(&rel);
        let mut listed = match job.t.read_dir(&dir.file).await {
            Ok(listed) => listed,
            // A directory inside the tree that cannot be listed (too long a path there, no
            // permission) is reported and the rest goes on; the root, or a lost link, fails.
            Err(e) if !rel.is_empty() && job.t.is_connected() => {
                out.skip(
                    &rel,
                    &format!(
                        "its contents could not be listed on the machine ({}); only the \
                         directory itself was created",
                        e.message
                    ),
                );
                continue;
            }
            Err(e) => return Err(name_user_path(e, &dir.cmd, &dir.file)),
        };
        listed.sort_by(|a, b| a.name.cmp(&b.name));
        let shown_of = |name: &str| {
            if rel.is_empty() {
                name.to_string()
            } else {
                format!("{rel}/{name}")
            }
        };
        if near_path_limit(&dir.file) {
            match unlisted_names(job, &dir, &listed).await {
                Some(names) => {
                    for name in names {
                        out.skip_too_long(&shown_of(&name), &remote_too_long(&dir.file, &name));
                    }
                }
                // Not knowing is not "nothing missing": the download says partial.
                None => out.skip_too_long(
                    &rel,
                    "path_too_long: this directory is near the path-length limit and its \
                     listing could not be checked through the shell; entries past the limit \
                     may be missing; download it from a shorter remote path",
                ),
            }
        }
        let mut seen = HashSet::new();
        for e in listed {
            let shown = shown_of(&e.name);
            if remote_path_len(&dir.file, &e.name) > PATH_LIMIT {
                out.skip_too_long(&shown, &remote_too_long(&dir.file, &e.name));
                continue;
            }
            if !safe_name(&e.name) || !seen.insert(e.name.clone()) {
                out.skip(
                    &shown,
                    "unsafe or duplicate name sent by the server (refused)",
                );
                continue;
            }
            let child = if rel.is_empty() {
                e.name.clone()
            } else {
                join(&rel, &e.name)
            };
            if e.stat.kind == FileKind::Dir {
                pending.push(child.clone());
            }
            entries.push(RemoteEntry {
                rel: child,
                kind: e.stat.kind,
                size: e.stat.size,
                mode: e.stat.mode,
            });
        }
        job.check_cancel()?;
    }
    entries.sort_by(|a, b| a.rel.split('/').cmp(b.rel.split('/')));
    Ok(entries)
}

/// Longest path a Linux host accepts (`PATH_MAX` less the terminating NUL), here and on the
/// machine (whose file channel takes whole paths).
const PATH_LIMIT: usize = 4095;

/// The length of `dir`/`name` as the machine's file channel sees it. A relative path is taken
/// from the login directory, whose length is unknown: counted as a generous 1 KiB.
fn remote_path_len(dir: &str, name: &str) -> usize {
    let base = if dir.starts_with('/') { 0 } else { 1024 };
    base + dir.len() + 1 + name.len()
}

/// Whether an entry of `dir` (a name is at most 255 bytes) may be over the limit. OpenSSH's
/// sftp-server silently leaves out of a listing every entry it cannot `lstat` by its whole
/// path, so near the limit the listing is checked against the shell's view.
fn near_path_limit(dir: &str) -> bool {
    remote_path_len(dir, &"n".repeat(255)) > PATH_LIMIT
}

fn remote_too_long(dir: &str, name: &str) -> String {
    format!(
        "path_too_long: not fetched: its path on the machine is about {} bytes, over the limit of \
         {PATH_LIMIT} the file channel can reach; download this part from a directory further \
         down (a shorter remote path)",
        remote_path_len(dir, name)
    )
}

/// The names in `dir` that the shell sees but the file channel's `listed` left out, whose
/// whole path is over the limit (one exec: `cd` there, then every name NUL-terminated); `None`
/// when the shell could not say.
async fn unlisted_names(
    job: &Job,
    dir: &RemotePath,
    listed: &[crate::transport::DirEntry],
) -> Option<Vec<String>> {
    let script = format!(
        "cd -- {} || exit 1\nfor f in .* *; do case $f in .|..) continue;; esac; \
         if [ -e \"$f\" ] || [ -L \"$f\" ]; then printf '%s\\000' \"$f\"; fi; done",
        shell_quote(&dir.cmd)
    );
    let known: HashSet<&str> = listed.iter().map(|e| e.name.as_str()).collect();
    match job.run_script(&script, 1 << 24).await {
        Ok(o) if !o.stdout_truncated && o.status.success() => Some(
            o.stdout
                .split(|b| *b == 0)
                .filter(|n| !n.is_empty())
                .map(|n| String::from_utf8_lossy(n).into_owned())
                .filter(|n| {
                    !known.contains(n.as_str()) && remote_path_len(&dir.file, n) > PATH_LIMIT
                })
                .collect(),
        ),
        _ => None,
    }
}

/// Read symlink targets on the machine in one exec (`readlink` per link, NUL-separated).
async fn read_links(job: &Job, links: &[RemotePath]) -> Vec<Option<String>> {
    let mut out = Vec::with_capacity(links.len());
    for batch in links.chunks(200) {
        let args: Vec<String> = batch.iter().map(|l| shell_quote(&l.cmd)).collect();
        let script = format!(
            "for f in {}; do readlink -- \"$f\" || printf '\\001'; printf '\\000'; done",
            args.join(" ")
        );
        let res = job.run_script(&script, 1 << 24).await;
        let targets: Vec<Option<String>> = match res {
            Ok(o) if !o.stdout_truncated => o
                .stdout
                .split(|b| *b == 0)
                .take(batch.len())
                .map(|t| {
                    let t = t.strip_suffix(b"\n").unwrap_or(t);
                    if t.is_empty() || t.contains(&1) {
                        None
                    } else {
                        String::from_utf8(t.to_vec()).ok()
                    }
                })
                .collect(),
            _ => Vec::new(),
        };
        for i in 0..batch.len() {
            out.push(targets.get(i).cloned().flatten());
        }
    }
    out
}

/// Make `dir` (whose parent is known to be a real directory) a real directory: create it
/// (`Ok(true)`; owner-only until its final mode is set), or accept an existing directory
/// (`Ok(false)`; its mode is left alone). Anything else in the way (a symlink, a file) is refused.
fn ensure_real_dir(dir: &Path) -> std::result::Result<bool, String> {
    use std::os::unix::fs::DirBuilderExt;
    match std::fs::DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            match std::fs::symlink_metadata(dir) {
                Ok(m) if m.file_type().is_dir() => Ok(false),
                Ok(m) if m.file_type().is_symlink() => {
                    Err("a symlink is in the way at the destination (not followed)".to_string())
                }
                _ => Err("a non-directory is in the way at the destination".to_string()),
            }
        }
        Err(e) => Err(format!("cannot create the directory: {e}")),
    }
}

/// Why `path` cannot be written here, when it is longer than this host accepts (a deep remote
/// tree under a long local destination).
fn too_long_here(path: &Path) -> Option<String> {
    let len = path.as_os_str().len();
    (len > PATH_LIMIT).then(|| {
        format!(
            "path_too_long: not written: its local path would be {len} bytes, over this \
             host's limit of {PATH_LIMIT}; download this part to a shorter destination"
        )
    })
}

fn parent_rel(rel: &str) -> &str {
    rel.rsplit_once('/').map(|(p, _)| p).unwrap_or("")
}

async fn get_tree(job: &Job, src: &RemotePath, local: &Path, out: &mut Outcome) -> Result<()> {
    let existed = match std::fs::metadata(local) {
        Ok(m) if !m.is_dir() => {
            return Err(Error::invalid(format!(
                "local {} exists and is not a directory; choose another destination for directory {}",
                local.display(),
                src.cmd
            )));
        }
        Ok(_) => true,
        Err(_) => {
            std::fs::create_dir_all(local).map_err(|e| local_io("create", local, &e))?;
            false
        }
    };
    let root_mode = match job.t.stat(&src.file).await {
        Ok(Some(st)) if st.kind == FileKind::Dir => st.mode,
        _ => followed_mode(job, src).await.unwrap_or(0o755),
    };
    let entries = walk(job, src, out).await?;
    let files: Vec<&RemoteEntry> = entries
        .iter()
        .filter(|e| e.kind == FileKind::File)
        .collect();
    job.set_totals(files.iter().map(|e| e.size).sum(), files.len() as u64);
    out.dirs = 1;
    // Directories we made sure are real; everything is written only below one of them.
    let mut real_dirs: HashSet<String> = HashSet::from([String::new()]);
    // Final modes of the directories this download created (an existing one keeps its own).
    let mut dir_modes: Vec<(PathBuf, u32)> = Vec::new();
    if !existed {
        dir_modes.push((local.to_path_buf(), root_mode));
    }
    let mut links = Vec::new();
    let mut wanted_files = Vec::new();
    for e in &entries {
        if !real_dirs.contains(parent_rel(&e.rel)) {
            out.skip(&e.rel, "its parent directory was not created (see above)");
            continue;
        }
        let path = local.join(&e.rel);
        if let Some(why) = too_long_here(&path) {
            out.skip_too_long(&e.rel, &why);
            continue;
        }
        match e.kind {
            FileKind::Dir => match ensure_real_dir(&path) {
                Ok(created) => {
                    real_dirs.insert(e.rel.clone());
                    if created {
                        dir_modes.push((path, e.mode));
                    }
                    out.dirs += 1;
                }
                Err(why) => out.skip(&e.rel, &why),
            },
            FileKind::File => wanted_files.push((e, path)),
            FileKind::Symlink => links.push(e),
            FileKind::Other => out.skip(
                &e.rel,
                "not a regular file or directory (device, socket or FIFO)",
            ),
        }
        job.check_cancel()?;
    }
    let copies = wanted_files.iter().map(|(e, path)| async move {
        let from = src.join(&e.rel);
        get_file(job, &from, path, e.size, e.mode, false)
            .await
            .map(|(bytes, sha)| (from, bytes, sha))
    });
    let mut written = copy_files(copies, out).await?;
    recreate_links(job, src, local, &links, out).await;
    verify_written(job, &mut written, out).await?;
    for (d, mode) in dir_modes.iter().rev() {
        let mode = local_mode::for_new(*mode, job.umask);
        std::fs::set_permissions(d, std::fs::Permissions::from_mode(mode))
            .map_err(|e| local_io("set the mode of", d, &e))?;
    }
    Ok(())
}

/// Recreate symlinks whose targets stay inside the destination; report the others.
async fn recreate_links(
    job: &Job,
    src: &RemotePath,
    local: &Path,
    links: &[&RemoteEntry],
    out: &mut Outcome,
) {
    if links.is_empty() {
        return;
    }
    let paths: Vec<RemotePath> = links.iter().map(|l| src.join(&l.rel)).collect();
    let targets = read_links(job, &paths).await;
    for (link, target) in links.iter().zip(targets) {
        let Some(target) = target else {
            out.skip(
                &link.rel,
                "symlink target could not be read on the machine (skipped)",
            );
            continue;
        };
        if !symlink_stays_inside(&link.rel, &target) {
            out.skip(
                &link.rel,
                &format!("symlink to {target:?} points outside the destination (refused)"),
            );
            continue;
        }
        let path = local.join(&link.rel);
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let tmp = path.with_file_name(stream::temp_name_for(&name, &job.transfer_id));
        let made =
            std::os::unix::fs::symlink(&target, &tmp).and_then(|()| std::fs::rename(&tmp, &path));
        match made {
            Ok(()) => out.symlinks += 1,
            Err(e) => {
                let _ = std::fs::remove_file(&tmp);
                out.skip(&link.rel, &format!("symlink could not be created: {e}"));
            }
        }
    }
}

/// The directory holding `path` (a remote path as the user gave it), to list when it is missing.
fn parent_dir(path: &str) -> String {
    match path.trim_end_matches('/').rsplit_once('/') {
        Some(("", _)) => "/".to_string(),
        Some((dir, _)) => dir.to_string(),
        None => ".".to_string(),
    }
}
