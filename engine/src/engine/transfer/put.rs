//! Upload: one local file or a local tree to the machine, each file written to a temporary
//! name and renamed over its final name only once complete (and verified, when asked).

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use super::paths::{RemotePath, join, symlink_stays_inside};
use super::stream::{self, PumpError};
use super::tree_stream::{self, Member};
use super::verify;
use super::{Job, Outcome, TransferKind, copy_files};
use crate::error::{Error, ErrorCode, Result};
use crate::transport::{FileKind, shell_quote};

/// One entry of a local tree, relative to its root.
#[derive(Debug)]
struct LocalEntry {
    rel: String,
    path: PathBuf,
    kind: FileKind,
    size: u64,
    mode: u32,
    /// Modification time, seconds since the epoch (0 when unknown).
    mtime: u64,
}

/// Upload `local` to `dest`. `into_dir`: the user asked for a directory destination (a trailing
/// `/`), so a file keeps its own name inside it.
pub async fn put(
    job: &Job,
    local: &Path,
    dest: RemotePath,
    into_dir: bool,
    out: &mut Outcome,
) -> Result<()> {
    let meta = std::fs::metadata(local).map_err(|e| local_err("read", local, &e))?;
    if meta.is_dir() {
        out.kind = Some(TransferKind::Dir);
        let existing = job.t.stat(&dest.file).await?;
        let dest = match existing {
            Some(st) if st.kind != FileKind::Dir && !remote_is_dir(job, &dest).await => {
                return Err(Error::invalid(format!(
                    "remote {} exists and is not a directory; choose another destination for \
                     directory {}",
                    dest.cmd,
                    local.display()
                )));
            }
            _ => dest,
        };
        put_tree(job, local, &dest, existing.is_some(), out).await
    } else if meta.is_file() {
        out.kind = Some(TransferKind::File);
        let dest = if into_dir || remote_is_dir(job, &dest).await {
            let name = local
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .ok_or_else(|| Error::invalid(format!("{} has no file name", local.display())))?;
            dest.join(&name)
        } else {
            dest
        };
        // Missing parent directories are created (like `mkdir -p`).
        if let Some((parent, _)) = dest.split()
            && job.t.stat(&parent.file).await?.is_none()
        {
            job.t
                .create_dir_all(&parent.file, 0o755)
                .await
                .map_err(|e| name_user_path(e, &parent.cmd, &parent.file))?;
        }
        job.set_totals(meta.len(), 1);
        let (bytes, sha) =
            put_file(job, local, &dest, meta.permissions().mode(), job.verify).await?;
        out.one_file(bytes, sha, job.verify);
        Ok(())
    } else {
        Err(Error::invalid(format!(
            "{} is neither a regular file nor a directory; only those can be uploaded",
            local.display()
        )))
    }
}

/// Whether `path` is a directory on the machine, following a symlink (a link to a directory
/// counts, as it would for `cp`).
async fn remote_is_dir(job: &Job, path: &RemotePath) -> bool {
    match job.t.stat(&path.file).await {
        Ok(Some(st)) if st.kind == FileKind::Dir => true,
        Ok(Some(st)) if st.kind == FileKind::Symlink => job.t.read_dir(&path.file).await.is_ok(),
        _ => false,
    }
}

fn local_err(what: &str, path: &Path, e: &std::io::Error) -> Error {
    match e.kind() {
        std::io::ErrorKind::NotFound => Error::new(
            ErrorCode::InvalidArgument,
            format!(
                "local path {} does not exist; check the path",
                path.display()
            ),
        ),
        _ => Error::io(format!("cannot {what} local {}", path.display()), e),
    }
}

/// Files up to this size are read whole and sent with [`crate::transport::Transport::write_file`]
/// (temporary name, pipelined writes, rename: three round trips over SSH), which is what bounds
/// trees of small files.
const SMALL_FILE: u64 = 256 * 1024;

/// Upload one file to `dest` through a temporary name; returns (bytes, sha256). With `verify`
/// the remote temporary file is hashed before the rename, so a mismatch never reaches `dest`.
async fn put_file(
    job: &Job,
    local: &Path,
    dest: &RemotePath,
    mode: u32,
    verify: bool,
) -> Result<(u64, String)> {
    if !verify && let Some(done) = put_small_file(job, local, dest, mode).await? {
        job.file_done();
        return Ok(done);
    }
    let (dir, name) = dest
        .split()
        .ok_or_else(|| Error::invalid(format!("{} is not a file path", dest.cmd)))?;
    let tmp = dir.join(&stream::temp_name(&name));
    let reader = std::fs::File::open(local).map_err(|e| local_err("open", local, &e))?;
    let size = reader.metadata().map(|m| m.len()).unwrap_or(0);
    let writer = job
        .t
        .open_write(&tmp.file, 0o600)
        .await
        .map_err(|e| name_user_path(e, &dest.cmd, &dest.file))?;
    let copied = stream::pump_from_file(
        reader,
        writer,
        stream::Pace::new(size, &|n| job.add_bytes(n), &job.cancel),
    )
    .await;
    let finish = async {
        let copied = copied.map_err(|e| pump_error(job, e, local, &dest.cmd))?;
        job.t.set_mode(&tmp.file, mode & 0o777).await?;
        if verify {
            verify::check_one(job.t.as_ref(), &tmp, &dest.cmd, &copied).await?;
        }
        job.t.rename(&tmp.file, &dest.file).await?;
        Ok::<_, Error>(copied)
    }
    .await;
    if finish.is_err() {
        // Best effort: with the link gone the temporary file stays, under its temporary name.
        let _ = job.t.remove_file(&tmp.file).await;
    }
    finish.map(|copied| job.file_copied(copied))
}

/// The small-file path of [`put_file`]: `None` when the file is bigger than [`SMALL_FILE`].
async fn put_small_file(
    job: &Job,
    local: &Path,
    dest: &RemotePath,
    mode: u32,
) -> Result<Option<(u64, String)>> {
    use sha2::{Digest, Sha256};
    let size = tokio::fs::metadata(local)
        .await
        .map_err(|e| local_err("read", local, &e))?
        .len();
    if size > SMALL_FILE {
        return Ok(None);
    }
    let data = tokio::fs::read(local)
        .await
        .map_err(|e| local_err("read", local, &e))?;
    if data.len() as u64 > SMALL_FILE {
        return Ok(None); // it grew: stream it
    }
    job.check_cancel()?;
    job.t
        .write_file(&dest.file, &data, mode & 0o777)
        .await
        .map_err(|e| name_user_path(e, &dest.cmd, &dest.file))?;
    job.add_bytes(data.len() as u64);
    Ok(Some((
        data.len() as u64,
        hex::encode(Sha256::digest(&data)),
    )))
}

/// A transport error about an SFTP path also names the user's path when a mapping changed it.
pub fn name_user_path(mut e: Error, user: &str, file: &str) -> Error {
    if user != file && !e.message.contains(user) {
        e.message = format!("{user}: {}", e.message);
    }
    e
}

pub fn pump_error(job: &Job, e: PumpError, local: &Path, remote: &str) -> Error {
    match e {
        PumpError::Cancelled => Error::new(
            ErrorCode::Cancelled,
            format!(
                "the transfer of {} was cancelled; nothing was left under the final name",
                local.display()
            ),
        ),
        PumpError::Read(e) => Error::io(format!("cannot read {}", local.display()), &e),
        PumpError::Write(e) => job.link_error(&e, "write", remote),
    }
}

/// Walk a local tree (not following symlinks below the root), directories before their
/// contents, names sorted.
fn walk(root: &Path) -> Result<Vec<LocalEntry>> {
    let mut out = Vec::new();
    let mut stack = vec![(root.to_path_buf(), String::new())];
    while let Some((dir, rel)) = stack.pop() {
        let mut names: Vec<_> = std::fs::read_dir(&dir)
            .map_err(|e| local_err("list", &dir, &e))?
            .filter_map(|e| e.ok())
            .collect();
        names.sort_by_key(|e| e.file_name());
        let mut subdirs = Vec::new();
        for e in names {
            let name = e.file_name().to_string_lossy().into_owned();
            let path = e.path();
            let meta =
                std::fs::symlink_metadata(&path).map_err(|err| local_err("read", &path, &err))?;
            let kind = FileKind::of(meta.file_type());
            let rel = if rel.is_empty() {
                name
            } else {
                join(&rel, &name)
            };
            if kind == FileKind::Dir {
                subdirs.push((path.clone(), rel.clone()));
            }
            out.push(LocalEntry {
                rel,
                path,
                kind,
                size: meta.len(),
                mode: meta.permissions().mode(),
                mtime: u64::try_from(meta.mtime()).unwrap_or(0),
            });
        }
        // Depth-first, in name order.
        for d in subdirs.into_iter().rev() {
            stack.push(d);
        }
    }
    // Parents before children: sort by path components.
    out.sort_by(|a, b| a.rel.split('/').cmp(b.rel.split('/')));
    Ok(out)
}

/// What a local tree becomes on the machine: its directories (with their modes), files, and
/// the symlinks that stay inside it; everything else is recorded as skipped.
struct TreePlan<'a> {
    dirs: Vec<&'a LocalEntry>,
    files: Vec<&'a LocalEntry>,
    links: Vec<(String, String)>,
}

fn plan_tree<'a>(entries: &'a [LocalEntry], out: &mut Outcome) -> TreePlan<'a> {
    let mut plan = TreePlan {
        dirs: Vec::new(),
        files: Vec::new(),
        links: Vec::new(),
    };
    for e in entries {
        match e.kind {
            FileKind::Dir => plan.dirs.push(e),
            FileKind::File => plan.files.push(e),
            FileKind::Symlink => {
                match std::fs::read_link(&e.path).map(|t| t.to_str().map(str::to_string)) {
                    Ok(Some(target)) if symlink_stays_inside(&e.rel, &target) => {
                        plan.links.push((e.rel.clone(), target))
                    }
                    Ok(Some(target)) => out.skip(
                        &e.rel,
                        &format!("symlink to {target:?} points outside the tree (not uploaded)"),
                    ),
                    _ => out.skip(
                        &e.rel,
                        "symlink target is unreadable or not UTF-8 (not uploaded)",
                    ),
                }
            }
            FileKind::Other => out.skip(
                &e.rel,
                "not a regular file or directory (device, socket or FIFO)",
            ),
        }
    }
    plan
}

async fn put_tree(
    job: &Job,
    local: &Path,
    dest: &RemotePath,
    dest_exists: bool,
    out: &mut Outcome,
) -> Result<()> {
    let entries = walk(local)?;
    let plan = plan_tree(&entries, out);
    job.set_totals(
        plan.files.iter().map(|e| e.size).sum(),
        plan.files.len() as u64,
    );
    job.check_cancel()?;
    let root_mode = std::fs::metadata(local)
        .map(|m| m.permissions().mode())
        .unwrap_or(0o755);
    let mut dir_modes = vec![(String::new(), root_mode)];
    dir_modes.extend(plan.dirs.iter().map(|d| (d.rel.clone(), d.mode)));
    let members = plan
        .dirs
        .iter()
        .map(|d| Member::Dir(d.rel.clone()))
        .chain(plan.files.iter().map(|f| Member::File {
            rel: f.rel.clone(),
            path: f.path.clone(),
            size: f.size,
            mode: f.mode,
            mtime: f.mtime,
        }))
        .chain(plan.links.iter().map(|(rel, target)| Member::Link {
            rel: rel.clone(),
            target: target.clone(),
        }))
        .collect();
    if tree_stream::put(job, dest, dest_exists, members, &dir_modes, out).await? {
        out.dirs = dir_modes.len() as u64;
        out.symlinks = plan.links.len() as u64;
        return Ok(());
    }
    put_tree_files(job, dest, &plan, &dir_modes, out).await
}

/// [`put_tree`] over the file channel, file by file (the machine has no tar).
async fn put_tree_files(
    job: &Job,
    dest: &RemotePath,
    plan: &TreePlan<'_>,
    dir_modes: &[(String, u32)],
    out: &mut Outcome,
) -> Result<()> {
    for (rel, _) in dir_modes {
        let d = if rel.is_empty() {
            dest.clone()
        } else {
            dest.join(rel)
        };
        job.t
            .create_dir_all(&d.file, 0o700)
            .await
            .map_err(|err| name_user_path(err, &d.cmd, &d.file))?;
        out.dirs += 1;
        job.check_cancel()?;
    }
    let copies = plan.files.iter().map(|e| async move {
        let d = dest.join(&e.rel);
        put_file(job, &e.path, &d, e.mode, false)
            .await
            .map(|(bytes, sha)| (d, bytes, sha))
    });
    let mut written = copy_files(copies, out).await?;
    create_links(job, dest, &plan.links, out).await;
    verify_written(job, &mut written, out).await?;
    // Final directory modes last (deepest first), so read-only directories could be filled.
    for (rel, mode) in dir_modes.iter().rev() {
        let d = if rel.is_empty() {
            dest.clone()
        } else {
            dest.join(rel)
        };
        job.t.set_mode(&d.file, mode & 0o777).await?;
    }
    Ok(())
}

/// With `verify`: hash every written remote file and compare with the hashes taken while
/// sending (and say so in `out`).
pub async fn verify_written(
    job: &Job,
    written: &mut [(RemotePath, String, u64)],
    out: &mut Outcome,
) -> Result<()> {
    if !job.verify {
        return Ok(());
    }
    written.sort_by(|a, b| a.0.cmd.cmp(&b.0.cmd));
    let paths: Vec<RemotePath> = written.iter().map(|w| w.0.clone()).collect();
    let total = written.iter().map(|w| w.2).sum();
    let remote = verify::remote_sha256(job.t.as_ref(), &paths, total).await?;
    let bad: Vec<&str> = written
        .iter()
        .zip(remote.iter())
        .filter(|((_, local, _), remote)| local != *remote)
        .map(|((p, _, _), _)| p.cmd.as_str())
        .collect();
    if bad.is_empty() {
        out.verified = Some(true);
        Ok(())
    } else {
        Err(Error::new(
            ErrorCode::VerifyMismatch,
            format!(
                "sha256 differs between the two ends for {} file(s): {}; retry the transfer",
                bad.len(),
                bad.iter().take(10).cloned().collect::<Vec<_>>().join(", ")
            ),
        ))
    }
}

/// Recreate symlinks (targets already checked to stay inside the tree) on the machine: `ln -s`
/// to a temporary name, then `mv -T` over the final name, in batches of one exec. Links the
/// machine could not create are reported as skipped.
async fn create_links(job: &Job, dest: &RemotePath, links: &[(String, String)], out: &mut Outcome) {
    for batch in links.chunks(200) {
        let mut script = String::new();
        for (i, (rel, target)) in batch.iter().enumerate() {
            let path = dest.join(rel);
            let Some((dir, name)) = path.split() else {
                continue;
            };
            let tmp = shell_quote(&dir.join(&stream::temp_name(&name)).cmd);
            script.push_str(&format!(
                "{{ ln -s -- {t} {tmp} && mv -f -T -- {tmp} {p}; }} 2>/dev/null || {{ rm -f -- {tmp}; echo {i}; }}\n",
                t = shell_quote(target),
                p = shell_quote(&path.cmd),
            ));
        }
        let res = job.run_script(&script, 1 << 20).await;
        let failed: Vec<usize> = match &res {
            Ok(o) => o
                .stdout_lossy()
                .lines()
                .filter_map(|l| l.trim().parse().ok())
                .collect(),
            Err(_) => (0..batch.len()).collect(),
        };
        for (i, (rel, _)) in batch.iter().enumerate() {
            if failed.contains(&i) {
                let why = match &res {
                    Err(e) => format!("symlink could not be created on the machine: {}", e.message),
                    Ok(_) => "symlink could not be created on the machine".to_string(),
                };
                out.skip(rel, &why);
            } else {
                out.symlinks += 1;
            }
        }
    }
}
