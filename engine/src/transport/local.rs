//! [`LocalTransport`]: the [`Transport`] trait for this host, used by the built-in `local`
//! machine and by the engine's behaviour tests (the same suite then runs over SSH).

use std::io::ErrorKind;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::Path;
use std::process::Stdio;

use async_trait::async_trait;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncSeekExt, AsyncWriteExt};
use tokio::process::Command;

use tokio::sync::mpsc;

use super::{
    BoxRead, BoxWrite, DirEntry, ExecOptions, ExecOutput, ExecStream, ExitStatus, FileKind,
    FileStat, StreamEvent, Transport,
};
use crate::error::{Error, ErrorCode, Result};

/// Runs commands with `sh -c` and touches files directly on this host.
#[derive(Debug, Default, Clone)]
pub struct LocalTransport {}

impl LocalTransport {
    pub fn new() -> Self {
        LocalTransport::default()
    }
}

/// Forward everything `r` yields as events made by `wrap`.
fn forward(
    mut r: impl AsyncRead + Unpin + Send + 'static,
    events: mpsc::UnboundedSender<StreamEvent>,
    wrap: fn(Vec<u8>) -> StreamEvent,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut buf = vec![0u8; 64 * 1024];
        while let Ok(n) = r.read(&mut buf).await {
            if n == 0 {
                break;
            }
            let _ = events.send(wrap(buf[..n].to_vec()));
        }
    })
}

/// Map an I/O error on `path` to the engine's codes.
fn io_err(what: &str, path: &str, e: &std::io::Error) -> Error {
    let code = match e.kind() {
        ErrorKind::NotFound => ErrorCode::RemoteNotFound,
        ErrorKind::PermissionDenied => ErrorCode::PermissionDenied,
        _ => ErrorCode::RemoteError,
    };
    Error::new(code, format!("{what} {path}: {e}"))
}

fn stat_of(meta: &std::fs::Metadata) -> FileStat {
    use std::os::unix::fs::MetadataExt;
    FileStat {
        kind: FileKind::of(meta.file_type()),
        size: meta.len(),
        mode: meta.mode() & 0o7777,
        mtime: meta.mtime(),
        uid: Some(meta.uid()),
    }
}

/// Read a stream to the end, keeping at most `max` bytes; returns (kept, truncated).
async fn drain_capped(
    mut r: impl AsyncRead + Unpin,
    max: usize,
) -> std::io::Result<(Vec<u8>, bool)> {
    let mut kept = Vec::new();
    let mut truncated = false;
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = r.read(&mut buf).await?;
        if n == 0 {
            return Ok((kept, truncated));
        }
        let room = max.saturating_sub(kept.len());
        if n > room {
            truncated = true;
        }
        kept.extend_from_slice(&buf[..n.min(room)]);
    }
}

fn exit_status_of(status: std::process::ExitStatus) -> ExitStatus {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(c), _) => ExitStatus::Code(c),
        (None, Some(sig)) => ExitStatus::Signal(signal_name(sig)),
        (None, None) => ExitStatus::Code(-1),
    }
}

fn signal_name(sig: i32) -> String {
    match sig {
        libc::SIGHUP => "HUP".into(),
        libc::SIGINT => "INT".into(),
        libc::SIGQUIT => "QUIT".into(),
        libc::SIGKILL => "KILL".into(),
        libc::SIGPIPE => "PIPE".into(),
        libc::SIGTERM => "TERM".into(),
        libc::SIGSEGV => "SEGV".into(),
        libc::SIGABRT => "ABRT".into(),
        other => other.to_string(),
    }
}

#[async_trait]
impl Transport for LocalTransport {
    fn describe(&self) -> String {
        "local".to_string()
    }

    async fn exec_raw(&self, command: &str, options: ExecOptions) -> Result<ExecOutput> {
        let mut cmd = Command::new("sh");
        cmd.arg("-c")
            .arg(command)
            .stdin(if options.stdin.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let mut child = cmd.spawn().map_err(|e| {
            Error::new(
                ErrorCode::RemoteError,
                format!("cannot start sh on this host: {e}; check that /bin/sh exists"),
            )
        })?;
        let stdin_task = match (options.stdin, child.stdin.take()) {
            (Some(data), Some(mut pipe)) => Some(tokio::spawn(async move {
                // A process that exits without reading its stdin is not an error.
                let _ = pipe.write_all(&data).await;
                let _ = pipe.shutdown().await;
            })),
            _ => None,
        };
        let stdout = child.stdout.take();
        let stderr = child.stderr.take();
        let max = options.max_output;
        let run = async {
            let out = async {
                match stdout {
                    Some(s) => drain_capped(s, max).await,
                    None => Ok((Vec::new(), false)),
                }
            };
            let err = async {
                match stderr {
                    Some(s) => drain_capped(s, max).await,
                    None => Ok((Vec::new(), false)),
                }
            };
            let (out, err, status) = tokio::join!(out, err, child.wait());
            (out, err, status)
        };
        let (out, err, status) = match options.timeout {
            Some(limit) => tokio::time::timeout(limit, run).await.map_err(|_| {
                Error::new(
                    ErrorCode::Timeout,
                    format!(
                        "a local command did not finish within {} s and was killed",
                        limit.as_secs()
                    ),
                )
            })?,
            None => run.await,
        };
        if let Some(task) = stdin_task {
            let _ = task.await;
        }
        let map = |e: std::io::Error| {
            Error::new(
                ErrorCode::RemoteError,
                format!("local command I/O failed: {e}"),
            )
        };
        let (stdout, stdout_truncated) = out.map_err(map)?;
        let (stderr, stderr_truncated) = err.map_err(map)?;
        let status = status.map_err(map)?;
        Ok(ExecOutput {
            stdout,
            stderr,
            stdout_truncated,
            stderr_truncated,
            status: exit_status_of(status),
        })
    }

    async fn write_file(&self, path: &str, data: &[u8], mode: u32) -> Result<()> {
        let target = Path::new(path);
        let dir = target.parent().unwrap_or(Path::new("/"));
        let name = target
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let tmp = dir.join(format!(".{name}.tmp-{}", uuid::Uuid::new_v4().simple()));
        let tmp_s = tmp.to_string_lossy().into_owned();
        let mut f = tokio::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .open(&tmp)
            .await
            .map_err(|e| io_err("cannot create", &tmp_s, &e))?;
        let written = async {
            f.write_all(data).await?;
            f.flush().await?;
            f.set_permissions(std::fs::Permissions::from_mode(mode))
                .await?;
            drop(f);
            tokio::fs::rename(&tmp, target).await
        }
        .await;
        if let Err(e) = written {
            let _ = tokio::fs::remove_file(&tmp).await;
            return Err(io_err("cannot write", path, &e));
        }
        Ok(())
    }

    async fn read_file_range(&self, path: &str, offset: u64, max: usize) -> Result<Vec<u8>> {
        let mut f = tokio::fs::File::open(path)
            .await
            .map_err(|e| io_err("cannot open", path, &e))?;
        f.seek(std::io::SeekFrom::Start(offset))
            .await
            .map_err(|e| io_err("cannot seek in", path, &e))?;
        let mut out = Vec::new();
        f.take(max as u64)
            .read_to_end(&mut out)
            .await
            .map_err(|e| io_err("cannot read", path, &e))?;
        Ok(out)
    }

    async fn stat(&self, path: &str) -> Result<Option<FileStat>> {
        match tokio::fs::symlink_metadata(path).await {
            Ok(m) => Ok(Some(stat_of(&m))),
            Err(e) if e.kind() == ErrorKind::NotFound => Ok(None),
            Err(e) => Err(io_err("cannot stat", path, &e)),
        }
    }

    async fn create_dir_all(&self, path: &str, mode: u32) -> Result<()> {
        let p = path.to_string();
        tokio::task::spawn_blocking(move || {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(mode)
                .create(&p)
                .map_err(|e| io_err("cannot create directory", &p, &e))
        })
        .await
        .map_err(|e| Error::internal(format!("directory task failed: {e}")))?
    }

    async fn create_dir_fresh(&self, _base: &str, path: &str, mode: u32) -> Result<bool> {
        let p = std::path::PathBuf::from(path);
        tokio::task::spawn_blocking(move || {
            if let Some(parent) = p.parent() {
                let _ = std::fs::DirBuilder::new()
                    .recursive(true)
                    .mode(mode)
                    .create(parent);
            }
            std::fs::DirBuilder::new().mode(mode).create(&p).is_ok()
        })
        .await
        .map_err(|e| Error::internal(format!("directory task failed: {e}")))
    }

    async fn read_dir(&self, path: &str) -> Result<Vec<DirEntry>> {
        let mut rd = tokio::fs::read_dir(path)
            .await
            .map_err(|e| io_err("cannot list", path, &e))?;
        let mut out = Vec::new();
        while let Some(entry) = rd
            .next_entry()
            .await
            .map_err(|e| io_err("cannot list", path, &e))?
        {
            // Relative to the directory (fstatat), not by the whole path: an entry whose path
            // is over PATH_MAX is still seen (and then reported, never silently dropped).
            let meta = match entry.metadata().await {
                Ok(meta) => meta,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue, // removed meanwhile
                Err(e) => return Err(io_err("cannot list", path, &e)),
            };
            out.push(DirEntry {
                name: entry.file_name().to_string_lossy().into_owned(),
                stat: stat_of(&meta),
            });
        }
        Ok(out)
    }

    async fn rename(&self, from: &str, to: &str) -> Result<()> {
        tokio::fs::rename(from, to)
            .await
            .map_err(|e| io_err(&format!("cannot rename to {to}:"), from, &e))
    }

    async fn remove_file(&self, path: &str) -> Result<()> {
        tokio::fs::remove_file(path)
            .await
            .map_err(|e| io_err("cannot remove", path, &e))
    }

    async fn set_mode(&self, path: &str, mode: u32) -> Result<()> {
        tokio::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
            .await
            .map_err(|e| io_err("cannot set mode on", path, &e))
    }

    async fn open_read(&self, path: &str) -> Result<BoxRead> {
        let f = tokio::fs::File::open(path)
            .await
            .map_err(|e| io_err("cannot open", path, &e))?;
        Ok(Box::new(f))
    }

    async fn open_write(&self, path: &str, mode: u32) -> Result<BoxWrite> {
        let f = tokio::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(mode)
            .open(path)
            .await
            .map_err(|e| io_err("cannot create", path, &e))?;
        Ok(Box::new(f))
    }

    fn is_connected(&self) -> bool {
        true
    }

    async fn exec_stream(&self, command: &str) -> Result<Option<ExecStream>> {
        let mut child = Command::new("sh")
            .arg("-c")
            .arg(command)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| {
                Error::new(
                    ErrorCode::RemoteError,
                    format!("cannot start sh on this host: {e}; check that /bin/sh exists"),
                )
            })?;
        let (input, mut input_rx) = mpsc::channel::<Vec<u8>>(super::EXEC_INPUT_QUEUE);
        let (events_tx, events) = mpsc::unbounded_channel();
        if let Some(mut pipe) = child.stdin.take() {
            tokio::spawn(async move {
                while let Some(chunk) = input_rx.recv().await {
                    if pipe.write_all(&chunk).await.is_err() {
                        return;
                    }
                }
                // Dropping the pipe is the EOF.
            });
        }
        let out = child
            .stdout
            .take()
            .map(|r| forward(r, events_tx.clone(), StreamEvent::Stdout));
        let err = child
            .stderr
            .take()
            .map(|r| forward(r, events_tx.clone(), StreamEvent::Stderr));
        tokio::spawn(async move {
            for task in [out, err].into_iter().flatten() {
                let _ = task.await;
            }
            let end =
                child.wait().await.map(exit_status_of).map_err(|e| {
                    Error::new(ErrorCode::RemoteError, format!("waiting for sh: {e}"))
                });
            let _ = events_tx.send(StreamEvent::End(end));
        });
        Ok(Some(ExecStream { input, events }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn exec_reports_exit_and_caps_output() {
        let t = LocalTransport::new();
        let out = t
            .exec_raw(
                "printf abcdef; printf err >&2; exit 3",
                ExecOptions {
                    max_output: 4,
                    ..Default::default()
                },
            )
            .await
            .unwrap();
        assert_eq!(out.stdout, b"abcd");
        assert!(out.stdout_truncated);
        assert_eq!(out.stderr, b"err");
        assert_eq!(out.status, ExitStatus::Code(3));
    }

    #[tokio::test]
    async fn files_round_trip_by_range() {
        let dir = tempfile::tempdir().unwrap();
        let t = LocalTransport::new();
        let p = dir.path().join("f").to_string_lossy().into_owned();
        t.write_file(&p, b"0123456789", 0o600).await.unwrap();
        assert_eq!(t.read_file_range(&p, 3, 4).await.unwrap(), b"3456");
        assert!(t.read_file_range(&p, 20, 4).await.unwrap().is_empty());
        let st = t.stat(&p).await.unwrap().unwrap();
        assert_eq!((st.kind, st.size, st.mode), (FileKind::File, 10, 0o600));
        let missing = t.stat(&format!("{p}.no")).await.unwrap();
        assert!(missing.is_none());
        let err = t
            .read_file_range(&format!("{p}.no"), 0, 1)
            .await
            .unwrap_err();
        assert_eq!(err.code, ErrorCode::RemoteNotFound);
    }
}
