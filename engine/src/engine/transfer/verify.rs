//! The remote side of `verify`: sha256 of remote files with `sha256sum` (one exec for many
//! files), falling back to reading each file back over the file channel.

use std::time::Duration;

use super::paths::RemotePath;
use super::stream;
use crate::error::{Error, ErrorCode, Result};
use crate::remote::Remote;
use crate::transport::{ExecOptions, Transport, shell_quote};

/// Longest argument list handed to one `sha256sum`.
const MAX_ARGS_BYTES: usize = 64 * 1024;

/// sha256 (hex) of each remote file, in order. `total_bytes` sizes the time allowed.
pub async fn remote_sha256(
    t: &Remote,
    files: &[RemotePath],
    total_bytes: u64,
) -> Result<Vec<String>> {
    let mut out = Vec::with_capacity(files.len());
    let mut start = 0;
    while start < files.len() {
        let mut end = start;
        let mut len = 0;
        while end < files.len() && (end == start || len + files[end].cmd.len() + 3 < MAX_ARGS_BYTES)
        {
            len += files[end].cmd.len() + 3;
            end += 1;
        }
        let batch = &files[start..end];
        match sha256sum(t, batch, total_bytes).await {
            Some(hashes) => out.extend(hashes),
            None => {
                for f in batch {
                    out.push(read_back(t.bytes(), f).await?);
                }
            }
        }
        start = end;
    }
    Ok(out)
}

/// `sha256sum` on the machine; `None` when it is missing or its output cannot be trusted.
async fn sha256sum(t: &Remote, files: &[RemotePath], total_bytes: u64) -> Option<Vec<String>> {
    let args: Vec<String> = files.iter().map(|f| shell_quote(&f.cmd)).collect();
    let command = format!("LC_ALL=C sha256sum -- {}", args.join(" "));
    // Generous: 60 s plus 20 MB/s.
    let timeout = Duration::from_secs(60 + total_bytes / 20_000_000);
    let out = t
        .exec(
            &command,
            ExecOptions {
                stdin: None,
                timeout: Some(timeout),
                max_output: 1 << 24,
            },
        )
        .await
        .ok()?;
    if !out.status.success() || out.stdout_truncated {
        return None;
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let hashes: Vec<String> = text
        .lines()
        .map(|l| l.strip_prefix('\\').unwrap_or(l))
        .filter_map(|l| l.get(..64))
        .filter(|h| h.bytes().all(|b| b.is_ascii_hexdigit()))
        .map(|h| h.to_ascii_lowercase())
        .collect();
    (hashes.len() == files.len()).then_some(hashes)
}

async fn read_back(t: &dyn Transport, f: &RemotePath) -> Result<String> {
    let reader = t.open_read(&f.file).await?;
    let copied = stream::hash_reader(reader).await.map_err(|e| {
        Error::new(
            ErrorCode::RemoteError,
            format!("cannot read {} back to verify it: {e}", f.cmd),
        )
    })?;
    Ok(copied.sha256)
}

/// Hash the remote file `remote` (shown to the user as `shown`) and fail with
/// `verify_mismatch` unless it is what was `copied`.
pub async fn check_one(
    t: &Remote,
    remote: &RemotePath,
    shown: &str,
    copied: &stream::Copied,
) -> Result<()> {
    let hashes = remote_sha256(t, std::slice::from_ref(remote), copied.bytes).await?;
    check_hash(shown, &copied.sha256, hashes.first())
}

fn check_hash(path: &str, local: &str, remote: Option<&String>) -> Result<()> {
    match remote {
        Some(r) if r == local => Ok(()),
        other => Err(Error::new(
            ErrorCode::VerifyMismatch,
            format!(
                "{path}: sha256 differs between the two ends (local {local}, remote {}); the \
                 destination was not replaced; retry the transfer",
                other.map(String::as_str).unwrap_or("unknown")
            ),
        )),
    }
}
