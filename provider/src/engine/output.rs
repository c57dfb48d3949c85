//! Local copies of a command's output and the session transcript, addressed by byte offset.
//!
//! Remote files only grow, so "copy from my local length up to the remote size" is idempotent:
//! an interrupted copy resumes where it stopped, across reconnects and restarts. Bytes are written
//! at their own offsets (not appended), so two processes mirroring the same file at once write
//! the same bytes to the same places. Copies stream in bounded chunks, never holding a whole
//! file in memory.

use std::io::{Read, Seek, SeekFrom, Write};
use std::path::Path;

use tokio::io::AsyncReadExt;

use crate::error::{Error, Result};
use crate::transport::Transport;

/// Bytes per remote read while copying.
const CHUNK: usize = 1 << 20;
/// From this size on a copy from offset 0 uses one streaming read instead of ranged reads.
const STREAM_FROM: u64 = 4 << 20;

fn open_for_mirror(path: &Path) -> Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .create(true)
        .write(true)
        .truncate(false)
        .mode(0o600)
        .open(path)
        .map_err(|e| Error::io(format!("cannot open {}", path.display()), &e))
}

/// Length of a local file, 0 when missing.
pub fn local_len(path: &Path) -> u64 {
    std::fs::metadata(path).map(|m| m.len()).unwrap_or(0)
}

/// Keep bytes read from the remote file at `offset` in the local copy too, when they extend it
/// without a hole: a reader that streams a running command's output then leaves little for the
/// copy made when it ends.
pub fn keep_read(local: &Path, offset: u64, data: &[u8]) -> Result<()> {
    use std::os::unix::fs::FileExt;
    if data.is_empty() || offset > local_len(local) {
        return Ok(());
    }
    open_for_mirror(local)?
        .write_all_at(data, offset)
        .map_err(|e| Error::io(format!("cannot write {}", local.display()), &e))
}

/// Append bytes `[local length, remote_size)` of `remote` to `local`.
pub async fn mirror(
    transport: &dyn Transport,
    remote: &str,
    local: &Path,
    remote_size: u64,
) -> Result<()> {
    let mut have = local_len(local);
    if have > remote_size {
        // The local copy is longer than the remote file: it cannot be a prefix; start over.
        open_for_mirror(local)?
            .set_len(0)
            .map_err(|e| Error::io(format!("cannot reset {}", local.display()), &e))?;
        have = 0;
    }
    if have == remote_size {
        if have == 0 {
            open_for_mirror(local)?;
        }
        return Ok(());
    }
    let file = open_for_mirror(local)?;
    let write = |at: u64, data: &[u8]| {
        use std::os::unix::fs::FileExt;
        file.write_all_at(data, at)
            .map_err(|e| Error::io(format!("cannot write {}", local.display()), &e))
    };
    if have == 0 && remote_size >= STREAM_FROM {
        let reader = transport.open_read(remote).await?;
        let mut reader = reader.take(remote_size);
        let mut buf = vec![0u8; CHUNK];
        loop {
            let n = reader.read(&mut buf).await.map_err(|e| {
                Error::new(
                    crate::error::ErrorCode::RemoteError,
                    format!("reading {remote} failed: {e}"),
                )
            })?;
            if n == 0 {
                break;
            }
            write(have, &buf[..n])?;
            have += n as u64;
        }
        return Ok(());
    }
    while have < remote_size {
        let want = ((remote_size - have) as usize).min(CHUNK);
        let data = transport.read_file_range(remote, have, want).await?;
        if data.is_empty() {
            break;
        }
        write(have, &data)?;
        have += data.len() as u64;
    }
    Ok(())
}

/// Read at most `max` bytes of a local file from `offset`.
pub fn read_local(path: &Path, offset: u64, max: usize) -> Result<Vec<u8>> {
    let mut f = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(Error::io(format!("cannot open {}", path.display()), &e)),
    };
    f.seek(SeekFrom::Start(offset))
        .map_err(|e| Error::io(format!("cannot seek {}", path.display()), &e))?;
    let mut out = Vec::new();
    f.take(max as u64)
        .read_to_end(&mut out)
        .map_err(|e| Error::io(format!("cannot read {}", path.display()), &e))?;
    Ok(out)
}

/// The first and last `cap / 2` bytes of a local file, lossily decoded, with a marker between
/// them when bytes were left out. Returns (text, truncated).
pub fn excerpt(path: &Path, size: u64, cap: usize, full_path: &Path) -> Result<(String, bool)> {
    if size <= cap as u64 {
        let data = read_local(path, 0, cap)?;
        return Ok((String::from_utf8_lossy(&data).into_owned(), false));
    }
    let half = cap / 2;
    let head = read_local(path, 0, half)?;
    let tail = read_local(path, size - half as u64, half)?;
    let omitted = size - (head.len() + tail.len()) as u64;
    let text = format!(
        "{}\n[... {omitted} bytes omitted; full output in {} ...]\n{}",
        String::from_utf8_lossy(&head),
        full_path.display(),
        String::from_utf8_lossy(&tail)
    );
    Ok((text, true))
}

/// Write the combined log: a header, then stdout and stderr copied in chunks.
pub fn write_combined_log(log: &Path, header: &str, stdout: &Path, stderr: &Path) -> Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut out = std::fs::OpenOptions::new()
        .create(true)
        .write(true)
        .truncate(true)
        .mode(0o600)
        .open(log)
        .map_err(|e| Error::io(format!("cannot write {}", log.display()), &e))?;
    let io = |e: std::io::Error| Error::io(format!("cannot write {}", log.display()), &e);
    out.write_all(header.as_bytes()).map_err(io)?;
    for (name, path) in [("stdout", stdout), ("stderr", stderr)] {
        writeln!(out, "===== {name} =====").map_err(io)?;
        if let Ok(mut f) = std::fs::File::open(path) {
            std::io::copy(&mut f, &mut out).map_err(io)?;
        }
        writeln!(out).map_err(io)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn excerpt_keeps_head_and_tail() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("o");
        std::fs::write(&p, b"0123456789abcdefghij").unwrap();
        let (t, trunc) = excerpt(&p, 20, 8, &p).unwrap();
        assert!(trunc);
        assert!(t.starts_with("0123\n[... 12 bytes omitted"));
        assert!(t.ends_with("ghij"));
        let (t, trunc) = excerpt(&p, 20, 64, &p).unwrap();
        assert_eq!((t.as_str(), trunc), ("0123456789abcdefghij", false));
    }
}
