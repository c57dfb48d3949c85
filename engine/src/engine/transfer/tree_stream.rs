//! Tree upload as one stream: the whole tree goes as a tar archive over one exec channel into
//! a staging directory next to the destination (`tree_put.sh`), then one more call moves it in
//! place. Per-file SFTP round trips are what bound a tree of small files; here there are none.
//!
//! The promises of the file-by-file path hold: a file reaches its final name only by a rename,
//! complete (a destination that did not exist is the staging directory renamed in one step);
//! with `verify` every staged file is hashed on the machine and compared before anything is
//! moved; modes are exact (`tar -p`, directory modes set last); symlinks and special files
//! follow the same policy (the caller's plan). When the machine has no tar (or the transport
//! cannot stream), nothing was written and the caller uses the file channel instead.

use std::io::{self, Read, Write};
use std::path::PathBuf;

use sha2::{Digest, Sha256};
use tokio::sync::mpsc;

use super::paths::RemotePath;
use super::put::{name_user_path, verify_written};
use super::{Job, Outcome, stream};
use crate::error::{Error, ErrorCode, Result};
use crate::transport::{ExecOptions, ExecStream, StreamEvent, shell_quote};

/// The machine's side (POSIX sh).
const SCRIPT: &str = include_str!("tree_put.sh");

/// Archive bytes handed to the channel at once.
const PIECE: usize = 256 * 1024;

/// tar's record: the archive is padded to whole records, so tar reads its end without
/// waiting for the end of its input.
const RECORD: u64 = 10240;

/// How long the machine's tar may take to finish once the whole archive was sent.
const EOF_GRACE: std::time::Duration = std::time::Duration::from_secs(30);

/// The tar program asked for on the machine. `REMOTE_RUNNER_REMOTE_TAR` names another one:
/// for tests of the fallback (a name that does not exist there), not a user setting.
fn remote_tar() -> String {
    std::env::var("REMOTE_RUNNER_REMOTE_TAR").unwrap_or_else(|_| "tar".to_string())
}

/// What goes into the archive, relative to the tree's root.
pub enum Member {
    Dir(String),
    File {
        rel: String,
        path: PathBuf,
        size: u64,
        mode: u32,
        /// Seconds since the epoch, from the walk (no second stat per file).
        mtime: u64,
    },
    Link {
        rel: String,
        target: String,
    },
}

/// One piece of the archive, with the files it completed (for progress).
struct Piece {
    data: Vec<u8>,
    file_bytes: u64,
    files: u64,
}

/// A `Write` that hands the archive to the async side in pieces of [`PIECE`] bytes, waiting
/// when the channel is behind (bounded memory).
struct PieceWriter {
    buf: Vec<u8>,
    tx: mpsc::Sender<Piece>,
    file_bytes: u64,
    files: u64,
    /// Archive bytes so far.
    total: u64,
}

impl PieceWriter {
    fn send(&mut self) -> io::Result<()> {
        let piece = Piece {
            data: std::mem::replace(&mut self.buf, Vec::with_capacity(PIECE)),
            file_bytes: std::mem::take(&mut self.file_bytes),
            files: std::mem::take(&mut self.files),
        };
        self.tx
            .blocking_send(piece)
            .map_err(|_| io::Error::new(io::ErrorKind::BrokenPipe, "the stream ended"))
    }
}

impl Write for PieceWriter {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        self.buf.extend_from_slice(data);
        self.total += data.len() as u64;
        if self.buf.len() >= PIECE {
            self.send()?;
        }
        Ok(data.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.send()
    }
}

/// A file's bytes as read into the archive: counted and (with `verify`) hashed.
struct Reading<R> {
    inner: R,
    bytes: u64,
    hasher: Option<Sha256>,
}

impl<R: Read> Read for Reading<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        if let Some(h) = &mut self.hasher {
            h.update(&buf[..n]);
        }
        self.bytes += n as u64;
        Ok(n)
    }
}

/// A file sent: its path relative to the root, sha256 (with `verify`), size.
type Sent = (String, Option<String>, u64);

/// Write the archive of `members` to `tx` (on a blocking thread).
fn write_archive(members: Vec<Member>, tx: mpsc::Sender<Piece>, verify: bool) -> Result<Vec<Sent>> {
    let local = |what: &str, path: &std::path::Path, e: io::Error| {
        Error::io(format!("cannot {what} local {}", path.display()), &e)
    };
    let lost = |e: io::Error| Error::new(ErrorCode::RemoteError, format!("tar stream: {e}"));
    let mut tar = tar::Builder::new(PieceWriter {
        buf: Vec::with_capacity(PIECE),
        tx,
        file_bytes: 0,
        files: 0,
        total: 0,
    });
    let mut sent = Vec::new();
    for m in members {
        let mut h = tar::Header::new_gnu();
        match m {
            Member::Dir(rel) => {
                // Owner-writable while staged; the final modes are set after the move.
                h.set_entry_type(tar::EntryType::Directory);
                h.set_mode(0o700);
                h.set_size(0);
                tar.append_data(&mut h, &rel, io::empty()).map_err(lost)?;
            }
            Member::Link { rel, target } => {
                h.set_entry_type(tar::EntryType::Symlink);
                h.set_mode(0o777);
                h.set_size(0);
                tar.append_link(&mut h, &rel, &target).map_err(lost)?;
            }
            Member::File {
                rel,
                path,
                size,
                mode,
                mtime,
            } => {
                let file = std::fs::File::open(&path).map_err(|e| local("open", &path, e))?;
                h.set_entry_type(tar::EntryType::Regular);
                h.set_mode(mode & 0o777);
                h.set_size(size);
                h.set_mtime(mtime);
                // Exactly the size listed (as scp does): a file that shrank fails the transfer.
                let mut reading = Reading {
                    inner: file.take(size),
                    bytes: 0,
                    hasher: verify.then(Sha256::new),
                };
                tar.append_data(&mut h, &rel, &mut reading).map_err(lost)?;
                if reading.bytes != size {
                    return Err(Error::new(
                        ErrorCode::InvalidArgument,
                        format!(
                            "local {} shrank while it was read; retry the transfer",
                            path.display()
                        ),
                    ));
                }
                let w = tar.get_mut();
                w.file_bytes += size;
                w.files += 1;
                let sha = reading.hasher.map(|h| hex::encode(h.finalize()));
                sent.push((rel, sha, size));
            }
        }
    }
    tar.finish().map_err(lost)?;
    let w = tar.get_mut();
    let pad = (RECORD - w.total % RECORD) % RECORD;
    w.write_all(&vec![0; pad as usize]).map_err(lost)?;
    w.flush().map_err(lost)?;
    Ok(sent)
}

/// The assignments that start a `tree_put.sh` run for `step`.
fn script(step: &str, stage: &RemotePath, dest: &RemotePath, modes: &str) -> String {
    format!(
        "RR_STEP={step}\nRR_TAR={}\nRR_STAGE={}\nRR_DEST={}\nRR_MODES={}\n{SCRIPT}",
        shell_quote(&remote_tar()),
        shell_quote(&stage.cmd),
        shell_quote(&dest.cmd),
        shell_quote(modes),
    )
}

/// Upload `members` into `dest` (`dest_exists`: it is a directory already, merged into) as one
/// tar stream; `dir_modes` (relative path, mode; the root is "") are applied last, deepest
/// first. `Ok(false)`: the machine has no tar or the transport cannot stream; nothing was
/// written.
pub async fn put(
    job: &Job,
    dest: &RemotePath,
    dest_exists: bool,
    members: Vec<Member>,
    dir_modes: &[(String, u32)],
    out: &mut Outcome,
) -> Result<bool> {
    let stage = if dest_exists {
        dest.join(&format!(".rr-part-{}", job.transfer_id))
    } else {
        let Some((parent, name)) = dest.split() else {
            return Ok(false);
        };
        parent.join(&stream::temp_name_for(&name, &job.transfer_id))
    };
    let Some((mut s, early)) =
        crate::remote::sh_stream(job.t.as_ref(), &script("extract", &stage, dest, "")).await?
    else {
        return Ok(false);
    };
    let mut said = Said::new(early);
    match said.first_line(&mut s).await {
        Some(l) if l == "rr-tree:ready" => {}
        Some(l) if l == "rr-tree:no-tar" => return Ok(false),
        _ => {
            let e = said.finish(&mut s).await.err();
            return Err(said.error(job, e, dest, "could not start the tar stream"));
        }
    }
    let sent = send(job, &mut s, &mut said, members, dest).await;
    // The machine's side has ended (or is told to by closing the channel) before any cleanup.
    drop(s);
    let sent = match sent {
        Ok(sent) => sent,
        Err(e) => {
            abort(job, &stage, dest).await;
            return Err(e);
        }
    };
    let committed = async {
        let mut written: Vec<(RemotePath, String, u64)> = sent
            .iter()
            .map(|(rel, sha, size)| (stage.join(rel), sha.clone().unwrap_or_default(), *size))
            .collect();
        verify_written(job, &mut written, out).await?;
        let modes = chmod_lines(dest, dir_modes);
        // A merge of a large tree may take a while: no time bound.
        let unbounded = ExecOptions {
            timeout: None,
            ..Default::default()
        };
        let commit = script("commit", &stage, dest, &modes);
        let done = job.t.exec(&commit, unbounded).await?;
        if !done.status.success() {
            return Err(Error::new(
                ErrorCode::RemoteError,
                format!(
                    "moving the uploaded tree into {} failed: {}",
                    dest.cmd,
                    done.stderr_lossy().trim()
                ),
            ));
        }
        Ok(())
    }
    .await;
    if let Err(e) = committed {
        abort(job, &stage, dest).await;
        return Err(name_user_path(e, &dest.cmd, &dest.file));
    }
    out.files = sent.len() as u64;
    out.bytes = sent.iter().map(|s| s.2).sum();
    Ok(true)
}

/// Remove the staging directory (best effort: with the link gone it stays, hidden).
async fn abort(job: &Job, stage: &RemotePath, dest: &RemotePath) {
    let _ = job
        .t
        .exec(&script("abort", stage, dest, ""), ExecOptions::default())
        .await;
}

/// `chmod` lines for the final directory modes, deepest first (a read-only directory is filled
/// before its mode is set), consecutive equal modes in one command.
fn chmod_lines(dest: &RemotePath, dir_modes: &[(String, u32)]) -> String {
    let mut sorted: Vec<&(String, u32)> = dir_modes.iter().collect();
    let depth = |rel: &str| {
        if rel.is_empty() {
            0
        } else {
            rel.split('/').count()
        }
    };
    sorted.sort_by_key(|(rel, _)| std::cmp::Reverse(depth(rel)));
    let mut lines = String::new();
    let mut run: Option<u32> = None;
    for (rel, mode) in sorted {
        let path = if rel.is_empty() {
            dest.clone()
        } else {
            dest.join(rel)
        };
        let mode = mode & 0o777;
        if run != Some(mode) {
            lines.push_str(&format!(" &&\nchmod {mode:o}"));
            run = Some(mode);
        }
        lines.push(' ');
        lines.push_str(&shell_quote(&path.cmd));
    }
    lines.trim_start_matches(" &&\n").to_string()
}

/// Stream the archive of `members` into `s` and wait for the machine to unpack it.
async fn send(
    job: &Job,
    s: &mut ExecStream,
    said: &mut Said,
    members: Vec<Member>,
    dest: &RemotePath,
) -> Result<Vec<Sent>> {
    let (tx, mut rx) = mpsc::channel::<Piece>(2);
    let verify = job.verify;
    let producer = tokio::task::spawn_blocking(move || write_archive(members, tx, verify));
    let mut broken = false;
    let pumped = async {
        while let Some(piece) = rx.recv().await {
            if s.input.send(piece.data).await.is_err() {
                broken = true;
                break;
            }
            job.add_bytes(piece.file_bytes);
            for _ in 0..piece.files {
                job.file_done();
            }
            // Keep the output drained while the input flows (tar may end before the last
            // piece is counted: its end is kept for `finish`).
            while let Ok(ev) = s.events.try_recv() {
                said.keep(ev);
            }
        }
    };
    tokio::select! {
        () = pumped => {}
        () = job.cancel.cancelled() => {
            drop(rx);
            let _ = producer.await;
            return Err(Error::new(ErrorCode::Cancelled, "the transfer was cancelled; nothing was left under the final names"));
        }
    }
    drop(rx);
    let produced = producer
        .await
        .map_err(|e| Error::internal(format!("tar task failed: {e}")))?;
    // tar stops at the end of the archive (whole records), so stdin stays open until the
    // status is in (closing a channel early can lose it). A tar that waits for the end of
    // its input gets it after a grace time.
    let ended = match tokio::time::timeout(EOF_GRACE, said.finish(s)).await {
        Ok(ended) => ended,
        Err(_) => {
            let (closed, _) = mpsc::channel(1);
            drop(std::mem::replace(&mut s.input, closed));
            tokio::time::timeout(EOF_GRACE, said.finish(s))
                .await
                .unwrap_or_else(|_| Err(Error::new(ErrorCode::Timeout, "tar did not finish")))
        }
    };
    let sent = match produced {
        Ok(sent) => sent,
        Err(e) if !broken => return Err(e),
        Err(_) => Vec::new(),
    };
    match ended {
        Ok(()) if !broken && said.has_line("rr-tree:extracted") => Ok(sent),
        ended => Err(said.error(job, ended.err(), dest, "the tar stream failed")),
    }
}

/// What the machine's side said: stdout lines, stderr, and how it ended.
struct Said {
    stdout: Vec<u8>,
    stderr: Vec<u8>,
    /// The end, when it came while the output was drained in passing.
    ended: Option<Result<()>>,
}

impl Said {
    fn new(early: Vec<u8>) -> Said {
        Said {
            stdout: early,
            stderr: Vec::new(),
            ended: None,
        }
    }

    /// Keep an event's output, and its end for [`Said::finish`].
    fn keep(&mut self, ev: StreamEvent) {
        if let Some(end) = self.take(ev) {
            self.ended = Some(end);
        }
    }

    /// Keep an event's output; `Some` with the end.
    fn take(&mut self, ev: StreamEvent) -> Option<Result<()>> {
        match ev {
            StreamEvent::Stdout(d) => self.stdout.extend_from_slice(&d),
            StreamEvent::Stderr(d) if self.stderr.len() < 64 << 10 => {
                self.stderr.extend_from_slice(&d)
            }
            StreamEvent::Stderr(_) => {}
            StreamEvent::End(Ok(st)) if st.success() => return Some(Ok(())),
            StreamEvent::End(Ok(st)) => {
                return Some(Err(Error::new(
                    ErrorCode::RemoteError,
                    format!("ended with {st:?}"),
                )));
            }
            StreamEvent::End(Err(e)) => return Some(Err(e)),
        }
        None
    }

    /// The first stdout line (waiting for it); `None` when the stream ended first.
    async fn first_line(&mut self, s: &mut ExecStream) -> Option<String> {
        loop {
            if let Some(end) = self.stdout.iter().position(|b| *b == b'\n') {
                return Some(String::from_utf8_lossy(&self.stdout[..end]).into_owned());
            }
            let ev = s.events.recv().await?;
            if let Some(end) = self.take(ev) {
                let _ = end;
                return None;
            }
        }
    }

    /// Read to the end of the stream.
    async fn finish(&mut self, s: &mut ExecStream) -> Result<()> {
        if let Some(end) = self.ended.take() {
            return end;
        }
        while let Some(ev) = s.events.recv().await {
            if let Some(end) = self.take(ev) {
                return end;
            }
        }
        Err(Error::new(
            ErrorCode::RemoteError,
            "the stream ended without a status",
        ))
    }

    fn has_line(&self, line: &str) -> bool {
        self.stdout
            .split(|b| *b == b'\n')
            .any(|l| l == line.as_bytes())
    }

    /// The error for a failed stream: a lost link, or what the machine said.
    fn error(&self, job: &Job, ended: Option<Error>, dest: &RemotePath, what: &str) -> Error {
        if !job.t.is_connected() {
            return Error::new(
                ErrorCode::ConnectionLost,
                "the connection to the machine dropped during the tree upload; nothing was left \
                 under the final names; retry the transfer",
            );
        }
        let said = crate::util::printable_excerpt(&self.stderr, 400);
        Error::new(
            ErrorCode::RemoteError,
            format!(
                "{what} into {} ({}): {said}; nothing was left under the final names",
                dest.cmd,
                ended
                    .map(|e| e.message)
                    .unwrap_or_else(|| "no status".into())
            ),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transport::ExitStatus;

    /// tar can end while the last pieces are still being counted: the end drained then is the
    /// stream's status, not "no status".
    #[tokio::test]
    async fn an_end_drained_in_passing_is_kept_for_finish() {
        let (input, _stdin) = mpsc::channel(1);
        let (tx, events) = mpsc::unbounded_channel();
        let mut s = ExecStream { input, events };
        tx.send(StreamEvent::Stdout(b"rr-tree:extracted\n".to_vec()))
            .unwrap();
        tx.send(StreamEvent::End(Ok(ExitStatus::Code(0)))).unwrap();
        drop(tx);
        let mut said = Said::new(Vec::new());
        while let Ok(ev) = s.events.try_recv() {
            said.keep(ev);
        }
        assert!(said.finish(&mut s).await.is_ok());
        assert!(said.has_line("rr-tree:extracted"));
    }
}
