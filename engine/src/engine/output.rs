//! Local copies of a command's output and the session transcript, addressed by byte offset.
//!
//! Remote files only grow, so "copy from my local length up to the remote size" is idempotent:
//! an interrupted copy resumes where it stopped, across reconnects and restarts. Bytes are written
//! at their own offsets (not appended), so two processes mirroring the same file at once write
//! the same bytes to the same places. Copies stream in bounded chunks, never holding a whole
//! file in memory.
//!
//! Bounded and sparse-safe: a command's output costs the machine nothing when it is sparse
//! (`truncate -s 1G f; cat f`), so a local copy keeps at most the output cap of each stream
//! ([`output_cap`], 64 MiB unless `REMOTE_RUNNER_OUTPUT_CAP` says otherwise; the record counts
//! the rest and says it was not kept), and zero blocks are left as holes, never written dense.

use std::io::{Read, Seek, SeekFrom, Write};
use std::path::Path;

use tokio::io::AsyncReadExt;

use crate::error::{Error, Result};
use crate::transport::Transport;

/// Bytes per remote read while copying.
const CHUNK: usize = 1 << 20;
/// From this size on a copy from offset 0 uses one streaming read instead of ranged reads.
const STREAM_FROM: u64 = 4 << 20;

/// Bytes of each output stream of a command kept locally, unless `REMOTE_RUNNER_OUTPUT_CAP`
/// says otherwise.
pub const DEFAULT_OUTPUT_CAP: u64 = 64 << 20;

/// The environment variable that sets the output cap.
pub const OUTPUT_CAP_ENV: &str = "REMOTE_RUNNER_OUTPUT_CAP";

/// The per-stream output cap: `REMOTE_RUNNER_OUTPUT_CAP` (bytes, or with a `K`, `M` or `G`
/// suffix for KiB, MiB, GiB; at least 1), else [`DEFAULT_OUTPUT_CAP`]. A value that is not one
/// is `invalid_argument`.
pub fn output_cap() -> Result<u64> {
    match std::env::var(OUTPUT_CAP_ENV) {
        Err(_) => Ok(DEFAULT_OUTPUT_CAP),
        Ok(v) => parse_cap(&v).ok_or_else(|| {
            Error::invalid(format!(
                "{OUTPUT_CAP_ENV}={v:?} is not a size; give bytes (67108864) or a number with K, \
                 M or G (64M), at least 1, or unset it for the default of 64M"
            ))
        }),
    }
}

fn parse_cap(v: &str) -> Option<u64> {
    let v = v.trim();
    let (digits, unit) = match v.char_indices().last()? {
        (i, 'k' | 'K') => (&v[..i], 1u64 << 10),
        (i, 'm' | 'M') => (&v[..i], 1 << 20),
        (i, 'g' | 'G') => (&v[..i], 1 << 30),
        _ => (v, 1),
    };
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits
        .parse::<u64>()
        .ok()?
        .checked_mul(unit)
        .filter(|n| *n > 0)
}

/// Hole granularity: the usual file system block.
const BLOCK: usize = 4096;

/// Write `data` at `offset` of `file`, leaving all-zero blocks as holes, and make the file at
/// least `offset + data.len()` long (a hole at the end included).
fn write_sparse_at(file: &std::fs::File, offset: u64, data: &[u8]) -> std::io::Result<()> {
    use std::os::unix::fs::FileExt;
    let mut at = offset;
    for block in data.chunks(BLOCK) {
        if !block.iter().all(|b| *b == 0) {
            file.write_all_at(block, at)?;
        }
        at += block.len() as u64;
    }
    if file.metadata()?.len() < at {
        file.set_len(at)?;
    }
    Ok(())
}

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
/// Nothing past `cap` is kept.
pub fn keep_read(local: &Path, offset: u64, data: &[u8], cap: u64) -> Result<()> {
    if data.is_empty() || offset > local_len(local) || offset >= cap {
        return Ok(());
    }
    let keep = ((cap - offset) as usize).min(data.len());
    write_sparse_at(&open_for_mirror(local)?, offset, &data[..keep])
        .map_err(|e| Error::io(format!("cannot write {}", local.display()), &e))
}

/// Append bytes `[local length, min(remote_size, cap))` of `remote` to `local` (zero blocks as
/// holes).
pub(crate) async fn mirror(
    transport: &dyn Transport,
    remote: &str,
    local: &Path,
    remote_size: u64,
    cap: u64,
) -> Result<()> {
    let remote_size = remote_size.min(cap);
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
        write_sparse_at(&file, at, data)
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

/// The first and last `cap / 2` bytes of a local file holding `size` bytes, lossily decoded,
/// with a marker between them when bytes were left out. Returns (text, truncated).
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

/// The line that says a stream was capped: how much there was, how much is kept, where the rest
/// is.
pub fn capped_note(name: &str, total: u64, kept: u64, remote: &str) -> String {
    format!(
        "[{name}: {total} bytes in all; only the first {kept} are kept here (output cap, \
         {OUTPUT_CAP_ENV}); the other {} bytes are only on the machine, in {remote}]",
        total - kept
    )
}

/// One stream of the combined log: its local copy, and the cap note when it was capped.
pub struct LogPart<'a> {
    pub name: &'a str,
    pub local: &'a Path,
    pub capped_note: Option<String>,
}

/// Copy `from` to the end of `out`, leaving zero blocks as holes.
fn copy_sparse(from: &Path, out: &mut std::fs::File) -> std::io::Result<()> {
    let Ok(mut f) = std::fs::File::open(from) else {
        return Ok(());
    };
    let mut at = out.stream_position()?;
    // Sized to the file (at most 1 MiB): a zeroed 1 MiB buffer for each stream of every
    // command, most of whose outputs are empty or short, was a measurable share of an exec.
    let len = f.metadata()?.len();
    let mut buf = vec![0u8; (len as usize).clamp(4096, 1 << 20)];
    loop {
        let n = f.read(&mut buf)?;
        if n == 0 {
            break;
        }
        write_sparse_at(out, at, &buf[..n])?;
        at += n as u64;
    }
    out.seek(SeekFrom::Start(at))?;
    Ok(())
}

/// Write the combined log: a header, then stdout and stderr copied in chunks (zero blocks as
/// holes), each followed by its cap note when it was capped.
pub fn write_combined_log(log: &Path, header: &str, parts: &[LogPart<'_>]) -> Result<()> {
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
    for part in parts {
        writeln!(out, "===== {} =====", part.name).map_err(io)?;
        copy_sparse(part.local, &mut out).map_err(io)?;
        writeln!(out).map_err(io)?;
        if let Some(note) = &part.capped_note {
            writeln!(out, "{note}").map_err(io)?;
        }
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

    #[test]
    fn the_cap_is_bytes_or_k_m_g_and_at_least_one() {
        assert_eq!(parse_cap("1048576"), Some(1 << 20));
        assert_eq!(parse_cap("64M"), Some(64 << 20));
        assert_eq!(parse_cap("8k"), Some(8 << 10));
        assert_eq!(parse_cap("2G"), Some(2 << 30));
        for bad in ["", "0", "M", "-1", "1.5M", "12 MB", "99999999999999999999G"] {
            assert_eq!(parse_cap(bad), None, "{bad}");
        }
    }

    #[test]
    fn zero_blocks_become_holes() {
        use std::os::unix::fs::MetadataExt;
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("o");
        let f = open_for_mirror(&p).unwrap();
        write_sparse_at(&f, 0, &vec![0u8; 8 << 20]).unwrap();
        write_sparse_at(&f, 8 << 20, b"end").unwrap();
        let m = std::fs::metadata(&p).unwrap();
        assert_eq!(m.len(), (8 << 20) + 3);
        assert!(
            m.blocks() * 512 < 1 << 20,
            "{} bytes allocated",
            m.blocks() * 512
        );
        assert_eq!(&std::fs::read(&p).unwrap()[(8 << 20) - 2..], b"\0\0end");
    }
}
