//! Streaming one file's bytes with bounded memory, hashing them on the way, and the atomic
//! temp-name-then-rename dance on both ends.

use std::io;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::sparse::SparseWriter;

/// Largest chunk moved at once; with [`QUEUE`] chunks queued (plus one being read and one being
/// written) this bounds the memory of one file copy to about 4 MiB whatever the file size.
pub const CHUNK: usize = 1 << 20;
const QUEUE: usize = 2;

/// What a copy moved.
#[derive(Debug, Clone)]
pub struct Copied {
    pub bytes: u64,
    pub sha256: String,
}

/// Size and sha256 of bytes seen so far.
#[derive(Default)]
struct Digesting {
    hasher: Sha256,
    bytes: u64,
}

impl Digesting {
    fn update(&mut self, data: &[u8]) {
        self.hasher.update(data);
        self.bytes += data.len() as u64;
    }

    fn finish(self) -> Copied {
        Copied {
            bytes: self.bytes,
            sha256: hex::encode(self.hasher.finalize()),
        }
    }
}

/// A queue of buffers between the async side and a blocking thread.
type BufferQueue = (mpsc::Sender<Vec<u8>>, mpsc::Receiver<Vec<u8>>);

/// The two queues of a copy: filled buffers one way, emptied ones back, with `QUEUE + 1`
/// buffers of `chunk` bytes going round (memory bounded, no allocation per chunk).
fn buffer_ring(chunk: usize) -> (BufferQueue, BufferQueue) {
    let full = mpsc::channel::<Vec<u8>>(QUEUE);
    let empty = mpsc::channel::<Vec<u8>>(QUEUE + 1);
    for _ in 0..=QUEUE {
        let _ = empty.0.try_send(Vec::with_capacity(chunk));
    }
    (full, empty)
}

/// How a copy goes: its chunk size, whom it tells about every chunk, what stops it.
#[derive(Clone, Copy)]
pub struct Pace<'a> {
    pub chunk: usize,
    pub on_bytes: &'a (dyn Fn(u64) + Send + Sync),
    pub cancel: &'a CancellationToken,
}

impl<'a> Pace<'a> {
    /// The pace for a file of `size` bytes ([`chunk_for`]).
    pub fn new(
        size: u64,
        on_bytes: &'a (dyn Fn(u64) + Send + Sync),
        cancel: &'a CancellationToken,
    ) -> Pace<'a> {
        Pace {
            chunk: chunk_for(size),
            on_bytes,
            cancel,
        }
    }
}

/// Why a copy stopped.
#[derive(Debug)]
pub enum PumpError {
    Read(io::Error),
    Write(io::Error),
    Cancelled,
}

/// Chunk size for a file of `size` bytes: whole small files in one chunk, 1 MiB for big ones.
pub fn chunk_for(size: u64) -> usize {
    usize::try_from(size).unwrap_or(CHUNK).clamp(4096, CHUNK)
}

/// Copy `reader` into the local `file` (new and empty; zero blocks become holes, see
/// [`SparseWriter`]), reading ahead while the file is written. The writing
/// and hashing happen on a blocking thread, so they run beside the reads on another core, and a
/// few buffers go round between the two sides: no allocation and no extra copy per chunk.
/// `on_bytes` is told about every chunk handed to the writer. Returns the size and sha256.
pub async fn pump_to_file<R: AsyncRead + Unpin + Send>(
    mut reader: R,
    file: std::fs::File,
    pace: Pace<'_>,
) -> Result<Copied, PumpError> {
    let Pace {
        chunk,
        on_bytes,
        cancel,
    } = pace;
    let ((full_tx, mut full_rx), (empty_tx, mut empty_rx)) = buffer_ring(chunk);
    let writer = tokio::task::spawn_blocking(move || {
        let mut file = SparseWriter::new(file);
        let mut digest = Digesting::default();
        while let Some(mut buf) = full_rx.blocking_recv() {
            file.write(&buf)?;
            digest.update(&buf);
            buf.clear();
            let _ = empty_tx.blocking_send(buf);
        }
        file.finish()?;
        Ok::<_, io::Error>(digest.finish())
    });
    // Owns the sending side: the writer sees the end once the reads are done.
    let read_side = async move {
        while let Some(mut buf) = empty_rx.recv().await {
            let mut eof = false;
            while buf.len() < chunk {
                if reader.read_buf(&mut buf).await.map_err(PumpError::Read)? == 0 {
                    eof = true;
                    break;
                }
            }
            let n = buf.len() as u64;
            if n > 0 {
                if full_tx.send(buf).await.is_err() {
                    break; // the writer stopped; its error is the one to report
                }
                on_bytes(n);
            }
            if eof {
                break;
            }
        }
        Ok::<_, PumpError>(())
    };
    let copy = async {
        let read_error = read_side.await.err();
        let written = writer
            .await
            .map_err(|e| PumpError::Write(io::Error::other(e)))?
            .map_err(PumpError::Write)?;
        read_error.map_or(Ok(written), Err)
    };
    until_cancelled(copy, cancel).await
}

/// Copy the local `file` to `writer` (then shut the writer down): the reading and hashing
/// happen on a blocking thread, beside the writes, with a few buffers going round between the
/// two sides (no allocation and no extra copy per chunk). `on_bytes` is told about every chunk
/// written. Returns the size and sha256 of the bytes read.
pub async fn pump_from_file<W: AsyncWrite + Unpin + Send>(
    file: std::fs::File,
    mut writer: W,
    pace: Pace<'_>,
) -> Result<Copied, PumpError> {
    let (chunk, on_bytes) = (pace.chunk, pace.on_bytes);
    let (full, empty) = buffer_ring(chunk);
    let (full_tx, mut full_rx) = full;
    let (empty_tx, mut empty_rx) = empty;
    let reader = tokio::task::spawn_blocking(move || {
        use std::io::Read;
        let mut file = file;
        let mut digest = Digesting::default();
        while let Some(mut buf) = empty_rx.blocking_recv() {
            buf.resize(chunk, 0);
            let mut filled = 0;
            while filled < chunk {
                match file.read(&mut buf[filled..]) {
                    Ok(0) => break,
                    Ok(n) => filled += n,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => return Err(e),
                }
            }
            buf.truncate(filled);
            digest.update(&buf);
            let eof = filled < chunk;
            if filled > 0 && full_tx.blocking_send(buf).is_err() {
                break; // the writer stopped; its error is the one to report
            }
            if eof {
                break;
            }
        }
        Ok::<_, io::Error>(digest.finish())
    });
    let write_side = async {
        while let Some(buf) = full_rx.recv().await {
            writer.write_all(&buf).await.map_err(PumpError::Write)?;
            on_bytes(buf.len() as u64);
            let _ = empty_tx.send(buf).await;
        }
        writer.shutdown().await.map_err(PumpError::Write)?;
        Ok::<_, PumpError>(())
    };
    let copy = async {
        write_side.await?;
        reader
            .await
            .map_err(|e| PumpError::Read(io::Error::other(e)))?
            .map_err(PumpError::Read)
    };
    until_cancelled(copy, pace.cancel).await
}

/// `copy`, or [`PumpError::Cancelled`] as soon as `cancel` fires.
async fn until_cancelled(
    copy: impl std::future::Future<Output = Result<Copied, PumpError>>,
    cancel: &CancellationToken,
) -> Result<Copied, PumpError> {
    tokio::select! {
        copied = copy => copied,
        _ = cancel.cancelled() => Err(PumpError::Cancelled),
    }
}

/// A unique temporary name next to `name` (hidden, recognisable as ours).
pub fn temp_name(name: &str) -> String {
    format!(".{name}.rr-part-{}", uuid::Uuid::new_v4().simple())
}

/// The marker every local temporary name of transfer `transfer_id` holds, so the files a killed
/// download left can be found and removed (see `interrupted`).
pub fn temp_marker(transfer_id: &str) -> String {
    format!(".rr-part-{transfer_id}.")
}

/// Longest part of a file name kept in a temporary name: with the marker it stays within the
/// usual 255-byte name limit even for a name that is at the limit itself.
const TEMP_NAME_KEEP: usize = 160;

/// A unique temporary name next to `name` for transfer `transfer_id`:
/// `.NAME.rr-part-<transfer_id>.<random>` (hidden, and named by the transfer's record).
pub fn temp_name_for(name: &str, transfer_id: &str) -> String {
    let mut keep = name.len().min(TEMP_NAME_KEEP);
    while !name.is_char_boundary(keep) {
        keep -= 1;
    }
    let random = uuid::Uuid::new_v4().simple().to_string();
    format!(
        ".{}{}{}",
        &name[..keep],
        temp_marker(transfer_id),
        &random[..12]
    )
}

/// Create a new local file for writing at a temporary name of transfer `transfer_id` next to
/// `final_path` (never following an existing name: `create_new`). Returns the open file and its
/// path.
pub async fn create_local_temp(
    final_path: &Path,
    transfer_id: &str,
) -> io::Result<(tokio::fs::File, PathBuf)> {
    let dir = final_path.parent().unwrap_or(Path::new("."));
    let name = final_path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = dir.join(temp_name_for(&name, transfer_id));
    let f = tokio::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)
        .await?;
    Ok((f, tmp))
}

/// Hash everything `reader` yields.
pub async fn hash_reader<R: AsyncRead + Unpin>(mut reader: R) -> io::Result<Copied> {
    let mut digest = Digesting::default();
    let mut buf = vec![0u8; CHUNK];
    loop {
        let n = reader.read(&mut buf).await?;
        if n == 0 {
            break;
        }
        digest.update(&buf[..n]);
    }
    Ok(digest.finish())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn pump_to_file_writes_hashes_and_reports_progress() {
        let data: Vec<u8> = (0..3_000_001u32).map(|i| (i % 253) as u8).collect();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out");
        let seen = std::sync::atomic::AtomicU64::new(0);
        let on_bytes = |n| {
            seen.fetch_add(n, std::sync::atomic::Ordering::SeqCst);
        };
        let cancel = CancellationToken::new();
        let pace = Pace {
            chunk: CHUNK,
            on_bytes: &on_bytes,
            cancel: &cancel,
        };
        let copied = pump_to_file(&data[..], std::fs::File::create(&path).unwrap(), pace)
            .await
            .map_err(|e| format!("{e:?}"))
            .unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), data);
        assert_eq!(copied.bytes, data.len() as u64);
        assert_eq!(seen.into_inner(), data.len() as u64);
        assert_eq!(copied.sha256, hex::encode(Sha256::digest(&data)));
    }

    #[tokio::test]
    async fn pump_from_file_copies_hashes_and_reports_progress() {
        let data: Vec<u8> = (0..3_000_001u32).map(|i| (i % 241) as u8).collect();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("in");
        std::fs::write(&path, &data).unwrap();
        for chunk in [4096, CHUNK] {
            let mut out = Vec::new();
            let seen = std::sync::atomic::AtomicU64::new(0);
            let on_bytes = |n| {
                seen.fetch_add(n, std::sync::atomic::Ordering::SeqCst);
            };
            let cancel = CancellationToken::new();
            let pace = Pace {
                chunk,
                on_bytes: &on_bytes,
                cancel: &cancel,
            };
            let copied = pump_from_file(std::fs::File::open(&path).unwrap(), &mut out, pace)
                .await
                .map_err(|e| format!("{e:?}"))
                .unwrap();
            assert_eq!(out, data);
            assert_eq!(copied.bytes, data.len() as u64);
            assert_eq!(seen.into_inner(), data.len() as u64);
            assert_eq!(copied.sha256, hex::encode(Sha256::digest(&data)));
        }
        let empty = dir.path().join("empty");
        std::fs::write(&empty, b"").unwrap();
        let cancel = CancellationToken::new();
        let pace = Pace {
            chunk: 4096,
            on_bytes: &|_| {},
            cancel: &cancel,
        };
        let copied = pump_from_file(std::fs::File::open(&empty).unwrap(), Vec::new(), pace)
            .await
            .map_err(|e| format!("{e:?}"))
            .unwrap();
        assert_eq!(copied.bytes, 0);
    }

    #[tokio::test]
    async fn pump_stops_on_cancel() {
        let cancel = CancellationToken::new();
        cancel.cancel();
        let (reader, _keep_open) = tokio::io::duplex(16);
        let dir = tempfile::tempdir().unwrap();
        let file = std::fs::File::create(dir.path().join("out")).unwrap();
        let pace = Pace {
            chunk: 4096,
            on_bytes: &|_| {},
            cancel: &cancel,
        };
        let r = pump_to_file(reader, file, pace).await;
        assert!(matches!(r, Err(PumpError::Cancelled)));
    }
}
