//! SFTP on pooled channels: one cached [`SftpSession`] per transport (files, metadata, streams)
//! and, opened on first use, a [`RawSftpSession`] for `posix-rename@openssh.com` (atomic
//! replace), which `SftpSession` does not expose.

use std::sync::Arc;

use russh_sftp::client::error::Error as SftpError;
use russh_sftp::client::{Config as SftpConfig, RawSftpSession, SftpSession};
use russh_sftp::protocol::{FileAttributes, OpenFlags, Packet, StatusCode};

use crate::error::{Error, ErrorCode, Result};
use crate::ssh::pool::{ChannelLease, Pool, PooledConn};
use crate::transport::{BoxRead, BoxWrite, DirEntry, FileKind, FileStat};

fn sftp_config(pool: &Pool) -> SftpConfig {
    SftpConfig {
        max_concurrent_reads: 64,
        max_concurrent_writes: 64,
        max_write_packet_len: 256 * 1024,
        request_timeout_secs: pool.opts.sftp_request_timeout.as_secs().max(1),
        ..SftpConfig::default()
    }
}

/// A cached SFTP session and the channel slot it occupies.
pub(crate) struct SftpChannel {
    pub session: SftpSession,
    pub conn: Arc<PooledConn>,
    _lease: ChannelLease,
}

/// The raw session used for extensions.
pub(crate) struct RawChannel {
    pub session: RawSftpSession,
    pub conn: Arc<PooledConn>,
    _lease: ChannelLease,
}

async fn open_subsystem(
    pool: &Pool,
) -> Result<(ChannelLease, russh::ChannelStream<russh::client::Msg>)> {
    let mut lease = pool.acquire().await?;
    let channel = lease
        .take_channel()
        .ok_or_else(|| Error::internal("lease without a channel"))?;
    if let Err(e) = channel.request_subsystem(true, "sftp").await {
        return Err(if lease.conn.conn.is_closed() {
            lease.conn.conn.lost_error()
        } else {
            Error::new(
                ErrorCode::RemoteError,
                format!(
                    "the server refused the sftp subsystem ({e}); enable `Subsystem sftp` in sshd_config"
                ),
            )
        });
    }
    Ok((lease, channel.into_stream()))
}

pub(crate) async fn open_session(pool: &Pool) -> Result<SftpChannel> {
    let (lease, stream) = open_subsystem(pool).await?;
    let conn = lease.conn.clone();
    let session = SftpSession::new_with_config(stream, sftp_config(pool))
        .await
        .map_err(|e| map_err(e, "start SFTP", "", &conn))?;
    Ok(SftpChannel {
        session,
        conn,
        _lease: lease,
    })
}

pub(crate) async fn open_raw(pool: &Pool) -> Result<RawChannel> {
    let (lease, stream) = open_subsystem(pool).await?;
    let conn = lease.conn.clone();
    let session = RawSftpSession::new_with_config(stream, sftp_config(pool));
    session
        .init()
        .await
        .map_err(|e| map_err(e, "start SFTP", "", &conn))?;
    Ok(RawChannel {
        session,
        conn,
        _lease: lease,
    })
}

/// Map an SFTP error to the engine's codes.
pub(crate) fn map_err(e: SftpError, op: &str, path: &str, conn: &PooledConn) -> Error {
    if conn.conn.is_closed() {
        return conn.conn.lost_error();
    }
    match &e {
        SftpError::Status(s) => match s.status_code {
            StatusCode::NoSuchFile => Error::new(
                ErrorCode::RemoteNotFound,
                format!("{op} {path}: no such file or directory on the remote host"),
            ),
            StatusCode::PermissionDenied => Error::new(
                ErrorCode::PermissionDenied,
                format!(
                    "{op} {path}: permission denied on the remote host; check ownership and modes"
                ),
            ),
            _ => Error::new(
                ErrorCode::RemoteError,
                format!("{op} {path}: {} ({})", s.status_code, s.error_message),
            ),
        },
        SftpError::Timeout => Error::new(
            ErrorCode::Timeout,
            format!("{op} {path}: the SFTP server did not answer in time"),
        ),
        other => Error::new(ErrorCode::RemoteError, format!("{op} {path}: {other}")),
    }
}

pub(crate) fn to_stat(attrs: &FileAttributes) -> FileStat {
    FileStat {
        kind: kind_of_mode(attrs.permissions.unwrap_or(0)),
        size: attrs.size.unwrap_or(0),
        mode: attrs.permissions.unwrap_or(0) & 0o7777,
        mtime: i64::from(attrs.mtime.unwrap_or(0)),
        uid: attrs.uid,
    }
}

/// The file type in a mode's `S_IFMT` bits, compared whole. (russh-sftp's `is_dir` tests single
/// bits, so a socket (`0o140000`) or a block device (`0o060000`) would pass for a directory.)
fn kind_of_mode(mode: u32) -> FileKind {
    const S_IFMT: u32 = 0o170_000;
    match mode & S_IFMT {
        0o040_000 => FileKind::Dir,
        0o100_000 => FileKind::File,
        0o120_000 => FileKind::Symlink,
        _ => FileKind::Other,
    }
}

fn mode_attrs(mode: u32) -> FileAttributes {
    FileAttributes {
        permissions: Some(mode & 0o7777),
        ..FileAttributes::empty()
    }
}

/// `mkdir` of `path` with `mode` in one round trip (the parent must exist). The server's umask
/// may clear group/other bits, so a mode with any of them is set again explicitly.
pub(crate) async fn mkdir(raw: &RawChannel, path: &str, mode: u32) -> Result<()> {
    raw.session
        .mkdir(path, mode_attrs(mode))
        .await
        .map_err(|e| map_err(e, "mkdir", path, &raw.conn))?;
    if mode & 0o7077 != 0 {
        raw.session
            .setstat(path, mode_attrs(mode))
            .await
            .map_err(|e| map_err(e, "chmod", path, &raw.conn))?;
    }
    Ok(())
}

/// `mkdir` of every directory from below `base` (which exists) down to `path`, all in one round
/// trip (a mkdir of one that exists fails, and the server carries on with the next). `true`
/// when the last one, `path` itself, was made by this call. Only a lost link is an error.
pub(crate) async fn mkdir_below(
    raw: &RawChannel,
    base: &str,
    path: &str,
    mode: u32,
) -> Result<bool> {
    let base = base.trim_end_matches('/');
    let mut dirs = Vec::new();
    match path.strip_prefix(base).filter(|rest| rest.starts_with('/')) {
        Some(rest) => {
            let mut dir = base.to_string();
            for part in rest.split('/').filter(|p| !p.is_empty()) {
                dir.push('/');
                dir.push_str(part);
                dirs.push(dir.clone());
            }
        }
        None => dirs.push(path.to_string()),
    }
    let steps: Vec<Step<'_>> = dirs
        .iter()
        .map(|dir| -> Step<'_> {
            Box::pin(async move {
                raw.session
                    .mkdir(dir.as_str(), mode_attrs(mode))
                    .await
                    .map(|_| ())
                    .map_err(|e| map_err(e, "mkdir", dir, &raw.conn))
            })
        })
        .collect();
    let results = pipelined(steps).await;
    if raw.conn.conn.is_closed() {
        return Err(raw.conn.conn.lost_error());
    }
    Ok(results.last().is_some_and(|r| r.is_ok()))
}

/// Size of each write request of a pipelined write (every SFTP server accepts 32 KiB).
const PIPELINED_WRITE: usize = 32 * 1024;

/// Most write requests of a pipelined write in flight at once (2 MiB).
const PIPELINED_BATCH: usize = 64;

/// One request of a pipelined batch.
type Step<'a, T = ()> = std::pin::Pin<Box<dyn std::future::Future<Output = Result<T>> + Send + 'a>>;

/// Put every request of `steps` on the wire now, in order (a request goes out on its future's
/// first poll), then wait for all the replies: one round trip for the batch. The server answers
/// in order and carries on after a failed request, so a batch must never hold a step that is
/// only right if an earlier one succeeded. Returns every step's result, in step order.
async fn pipelined<T: Send>(steps: Vec<Step<'_, T>>) -> Vec<Result<T>> {
    let mut sent = Vec::with_capacity(steps.len());
    for mut step in steps {
        let early = std::future::poll_fn(|cx| std::task::Poll::Ready(step.as_mut().poll(cx))).await;
        sent.push(match early {
            std::task::Poll::Ready(result) => Box::pin(std::future::ready(result)) as Step<'_, T>,
            std::task::Poll::Pending => step,
        });
    }
    futures::future::join_all(sent).await
}

/// [`pipelined`] for steps without a value: the first error, in step order.
async fn pipelined_all(steps: Vec<Step<'_>>) -> Result<()> {
    pipelined(steps).await.into_iter().collect()
}

/// Open `path` for writing with `flags` and `mode` (one round trip); returns the handle.
async fn open_for_write(
    raw: &RawChannel,
    path: &str,
    flags: OpenFlags,
    mode: u32,
) -> Result<String> {
    Ok(raw
        .session
        .open(path, flags | OpenFlags::WRITE, mode_attrs(mode))
        .await
        .map_err(|e| map_err(e, "create", path, &raw.conn))?
        .handle)
}

/// Write `data` at `handle` and close it: batches of at most [`PIPELINED_BATCH`] write requests
/// sent back to back, the last batch followed by the close and then `after` (steps that hold
/// whatever the writes succeed or not, e.g. a chmod). One round trip per batch: two in all for
/// up to 2 MiB. The handle is closed on failure too.
async fn write_and_close<'a>(
    raw: &'a RawChannel,
    handle: &'a str,
    path: &'a str,
    data: &'a [u8],
    after: Vec<Step<'a>>,
) -> Result<()> {
    let write = |(i, chunk): (usize, &'a [u8])| -> Step<'a> {
        Box::pin(async move {
            raw.session
                .write(handle, (i * PIPELINED_WRITE) as u64, chunk.to_vec())
                .await
                .map(|_| ())
                .map_err(|e| map_err(e, "write", path, &raw.conn))
        })
    };
    let chunks: Vec<(usize, &'a [u8])> = data.chunks(PIPELINED_WRITE).enumerate().collect();
    let mut batches: Vec<&[(usize, &'a [u8])]> = chunks.chunks(PIPELINED_BATCH).collect();
    if batches.is_empty() {
        batches.push(&[]); // an empty file: just the close
    }
    let last = batches.len() - 1;
    let mut after = after;
    for (n, batch) in batches.into_iter().enumerate() {
        let mut steps: Vec<Step<'a>> = batch.iter().copied().map(write).collect();
        if n == last {
            steps.push(Box::pin(async move {
                raw.session
                    .close(handle)
                    .await
                    .map(|_| ())
                    .map_err(|e| map_err(e, "close", path, &raw.conn))
            }));
            steps.append(&mut after);
            return pipelined_all(steps).await;
        }
        if let Err(e) = pipelined_all(steps).await {
            let _ = raw.session.close(handle).await;
            return Err(e);
        }
    }
    Ok(())
}

/// Create `path`, which must not exist, holding `data`: the open, then the writes and the
/// close sent back to back (two round trips up to 2 MiB).
pub(crate) async fn write_new(raw: &RawChannel, path: &str, data: &[u8], mode: u32) -> Result<()> {
    let flags = OpenFlags::CREATE | OpenFlags::EXCLUDE;
    let handle = open_for_write(raw, path, flags, mode).await?;
    write_and_close(raw, &handle, path, data, Vec::new()).await
}

/// Replace `path` atomically with `data` (three round trips up to 2 MiB): open a temporary name
/// next to it; its writes, close and mode sent back to back; then, only if all of those
/// succeeded, `posix-rename` over `path`. The temporary file is removed on failure (best effort).
pub(crate) async fn write_atomic(
    raw: &RawChannel,
    path: &str,
    data: &[u8],
    mode: u32,
) -> Result<()> {
    let tmp = temp_path(path);
    let flags = OpenFlags::CREATE | OpenFlags::TRUNCATE | OpenFlags::EXCLUDE;
    let handle = open_for_write(raw, &tmp, flags, mode).await?;
    // The server applies its umask on create; set the requested mode explicitly.
    let tmp_ref = tmp.as_str();
    let chmod: Step<'_> = Box::pin(async move {
        raw.session
            .setstat(tmp_ref, mode_attrs(mode))
            .await
            .map(|_| ())
            .map_err(|e| map_err(e, "chmod", tmp_ref, &raw.conn))
    });
    let result = match write_and_close(raw, &handle, &tmp, data, vec![chmod]).await {
        Ok(()) => posix_rename(raw, &tmp, path).await,
        Err(e) => Err(e),
    };
    if result.is_err() {
        let _ = raw.session.remove(tmp.as_str()).await;
    }
    result
}

/// A unique temporary name next to `path`.
fn temp_path(path: &str) -> String {
    let (dir, name) = match path.rsplit_once('/') {
        Some((d, n)) => (d, n),
        None => (".", path),
    };
    format!("{dir}/.{name}.rr-tmp-{}", crate::util::new_id("t"))
}

/// `posix-rename@openssh.com`: rename replacing the target atomically.
pub(crate) async fn posix_rename(raw: &RawChannel, from: &str, to: &str) -> Result<()> {
    let mut data = Vec::with_capacity(8 + from.len() + to.len());
    for s in [from, to] {
        let len = u32::try_from(s.len()).map_err(|_| Error::invalid("path too long"))?;
        data.extend_from_slice(&len.to_be_bytes());
        data.extend_from_slice(s.as_bytes());
    }
    match raw.session.extended("posix-rename@openssh.com", data).await {
        Ok(Packet::Status(s)) if s.status_code == StatusCode::Ok => Ok(()),
        Ok(Packet::Status(s)) => Err(map_err(
            SftpError::Status(s),
            "rename",
            &format!("{from} -> {to}"),
            &raw.conn,
        )),
        Ok(_) => Err(Error::new(
            ErrorCode::RemoteError,
            "posix-rename: unexpected reply; the server may not support posix-rename@openssh.com",
        )),
        Err(e) => Err(map_err(e, "rename", &format!("{from} -> {to}"), &raw.conn)),
    }
}

pub(crate) async fn lstat(s: &SftpChannel, path: &str) -> Result<Option<FileStat>> {
    match s.session.symlink_metadata(path).await {
        Ok(a) => Ok(Some(to_stat(&a))),
        Err(SftpError::Status(st)) if st.status_code == StatusCode::NoSuchFile => Ok(None),
        Err(e) => Err(map_err(e, "stat", path, &s.conn)),
    }
}

/// Size of each read request of [`read_range`]: OpenSSH serves up to 255 KiB per read (its
/// messages are at most 256 KiB), which costs its sshd less than half the CPU per streamed byte
/// of 32 KiB requests. A server that serves less answers short, and the reads go on in its size.
const RANGE_READ: usize = 255 * 1024;
/// Most read requests [`read_range`] has in flight.
const RANGE_BATCH: usize = 64;

/// At most `max` bytes of `path` from `offset`: the open, then exactly the reads the range
/// needs, sent back to back (a `File`'s read-ahead would fetch far past a small range), then the
/// close. Empty at or past the end.
pub(crate) async fn read_range(
    raw: &RawChannel,
    path: &str,
    offset: u64,
    max: usize,
) -> Result<Vec<u8>> {
    let handle = raw
        .session
        .open(path, OpenFlags::READ, FileAttributes::empty())
        .await
        .map_err(|e| map_err(e, "open", path, &raw.conn))?
        .handle;
    let read = read_span(raw, &handle, path, offset, max).await;
    let _ = raw.session.close(handle.as_str()).await;
    read
}

async fn read_span(
    raw: &RawChannel,
    handle: &str,
    path: &str,
    offset: u64,
    max: usize,
) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    let mut chunk = RANGE_READ;
    while out.len() < max {
        let at = offset + out.len() as u64;
        let want = max - out.len();
        let lens: Vec<usize> = (0..want.div_ceil(chunk).min(RANGE_BATCH))
            .map(|i| chunk.min(want - i * chunk))
            .collect();
        // Room for what this batch asks, once: no copy as the buffer grows.
        out.reserve(lens.iter().sum());
        let mut pos = at;
        let steps: Vec<Step<'_, Option<Vec<u8>>>> = lens
            .iter()
            .map(|&len| {
                let this = pos;
                pos += len as u64;
                Box::pin(async move {
                    match raw.session.read(handle, this, len as u32).await {
                        Ok(data) => Ok(Some(data.data)),
                        Err(SftpError::Status(st)) if st.status_code == StatusCode::Eof => Ok(None),
                        Err(e) => Err(map_err(e, "read", path, &raw.conn)),
                    }
                }) as Step<'_, Option<Vec<u8>>>
            })
            .collect();
        for (reply, len) in pipelined(steps).await.into_iter().zip(lens) {
            match reply? {
                Some(data) if !data.is_empty() => {
                    let short = data.len() < len;
                    out.extend_from_slice(&data);
                    if short {
                        // The end of the file, or a server that serves less per read: go on
                        // from here with its size (the next batch finds the end if that was it).
                        chunk = data.len();
                        break;
                    }
                }
                _ => return Ok(out),
            }
        }
    }
    Ok(out)
}

pub(crate) async fn create_dir_all(s: &SftpChannel, path: &str, mode: u32) -> Result<()> {
    let mut prefix = if path.starts_with('/') {
        String::new()
    } else {
        ".".to_string()
    };
    for part in path.split('/').filter(|p| !p.is_empty()) {
        prefix.push('/');
        prefix.push_str(part);
        match lstat(s, &prefix).await? {
            Some(st) if st.kind == FileKind::Dir => continue,
            Some(st) if st.kind == FileKind::Symlink => {
                // Follow the link: fine if it points at a directory.
                match s.session.metadata(prefix.as_str()).await {
                    Ok(a) if to_stat(&a).kind == FileKind::Dir => continue,
                    _ => {
                        return Err(Error::new(
                            ErrorCode::RemoteError,
                            format!("create_dir_all {path}: {prefix} is not a directory"),
                        ));
                    }
                }
            }
            Some(_) => {
                return Err(Error::new(
                    ErrorCode::RemoteError,
                    format!("create_dir_all {path}: {prefix} exists and is not a directory"),
                ));
            }
            None => {}
        }
        if let Err(e) = s.session.create_dir(prefix.as_str()).await {
            // Lost a race with another creator: fine if it is a directory now.
            if matches!(lstat(s, &prefix).await?, Some(st) if st.kind == FileKind::Dir) {
                continue;
            }
            return Err(map_err(e, "mkdir", &prefix, &s.conn));
        }
        s.session
            .set_metadata(prefix.as_str(), mode_attrs(mode))
            .await
            .map_err(|e| map_err(e, "chmod", &prefix, &s.conn))?;
    }
    Ok(())
}

pub(crate) async fn read_dir(s: &SftpChannel, path: &str) -> Result<Vec<DirEntry>> {
    let entries = s
        .session
        .read_dir(path)
        .await
        .map_err(|e| map_err(e, "read_dir", path, &s.conn))?;
    let mut out: Vec<DirEntry> = entries
        .filter(|e| e.file_name() != "." && e.file_name() != "..")
        .map(|e| DirEntry {
            name: e.file_name(),
            stat: to_stat(&e.metadata()),
        })
        .collect();
    out.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(out)
}

pub(crate) async fn open_read(s: &SftpChannel, path: &str) -> Result<BoxRead> {
    let f = s
        .session
        .open(path)
        .await
        .map_err(|e| map_err(e, "open", path, &s.conn))?;
    Ok(Box::new(f))
}

pub(crate) async fn open_write(s: &SftpChannel, path: &str, mode: u32) -> Result<BoxWrite> {
    let f = s
        .session
        .open_with_flags_and_attributes(
            path,
            OpenFlags::CREATE | OpenFlags::TRUNCATE | OpenFlags::WRITE,
            mode_attrs(mode),
        )
        .await
        .map_err(|e| map_err(e, "create", path, &s.conn))?;
    Ok(Box::new(f))
}

pub(crate) async fn set_mode(s: &SftpChannel, path: &str, mode: u32) -> Result<()> {
    s.session
        .set_metadata(path, mode_attrs(mode))
        .await
        .map_err(|e| map_err(e, "chmod", path, &s.conn))
}

pub(crate) async fn remove_file(s: &SftpChannel, path: &str) -> Result<()> {
    s.session
        .remove_file(path)
        .await
        .map_err(|e| map_err(e, "remove", path, &s.conn))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_whole_file_type_field_decides_the_kind() {
        assert_eq!(kind_of_mode(0o040_755), FileKind::Dir);
        assert_eq!(kind_of_mode(0o100_644), FileKind::File);
        assert_eq!(kind_of_mode(0o120_777), FileKind::Symlink);
        // Socket, block device, character device, FIFO: bits shared with dir or file.
        for special in [0o140_755, 0o060_660, 0o020_620, 0o010_644] {
            assert_eq!(kind_of_mode(special), FileKind::Other, "{special:o}");
        }
        assert_eq!(kind_of_mode(0o644), FileKind::Other);
    }
}
