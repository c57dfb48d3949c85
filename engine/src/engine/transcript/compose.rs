//! The transcript a reader gets (`session read`, the MCP transcript resource): the terminal's
//! bytes (`transcript.raw`, the pane's pipe) with each foreground command's output spliced in
//! as it comes, read from the command's own files.
//!
//! Why splice: a foreground command's stdout and stderr go to its files (byte for byte, no pipe
//! or copying process between a command and its output), so while it runs the terminal shows
//! only its text and the echo of what is typed into it; the session shell prints the output in
//! the terminal when the command ends. The session shell marks the terminal's stream
//! (`engine/src/tmux/rr.sh`): `rr-run` once the command's text is shown, `rr-end` when it ended
//! and the terminal's copy of its output starts, `rr-shown` when that copy is over. Each
//! `session send` into a running command appends one line to the command's `inputs` file:
//! the transcript's size and the command's output sizes as the input was typed.
//!
//! Each read composes incrementally into the local transcript file (`transcript.txt`), under a
//! lock (`transcript.lock`), and saves where it stands (`transcript.state`: the terminal bytes
//! consumed, the running command and how much of its output is in, the length of the local
//! file, which is cut back to it after an interrupted compose). The local file only grows, so
//! a `cursor` stays valid. In order:
//! 1. the terminal's size `R`; then, while a command runs, its output sizes; then its `inputs`
//!    (in that order: output counted before an input line was read came before that input);
//! 2. the terminal's bytes up to `R`, without the engine's plumbing (`transcript::clean`), a
//!    tail not yet complete held back for the next read; at each `inputs` line's transcript
//!    offset, the command's output up to that line's sizes (stdout, then stderr), so the echo of
//!    what was typed comes after the output before it and before the reply; at `rr-end`, the rest
//!    of its output, and the terminal's copy up to `rr-shown` is left out (`[exit N]` is kept);
//! 3. at the end, the running command's output up to its sizes, bounded by the next `inputs`
//!    line not yet reached.
//!
//! Bounded: the terminal is read in 1 MiB pieces; of each command at most
//! [`TRANSCRIPT_LIVE_CAP`] of each stream goes in (a note says how much more is in the
//! command's log); the whole local file keeps at most the output cap (`REMOTE_RUNNER_OUTPUT_CAP`,
//! 64 MiB by default), then a note says where the rest is, and nothing more is read.
//! Interleaving is exact at each input typed with `send`; between two reads stdout comes before
//! stderr, and the echo of keys typed in other ways (`session attach`) comes before the output
//! counted in the same read.

use std::collections::VecDeque;
use std::fs::{File, OpenOptions};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::{Mark, clean, find_mark, hold_len};
use crate::engine::SessionRecord;
use crate::error::{Error, ErrorCode, Result};
use crate::transport::Transport;

/// Of each output stream of a command, at most this much goes into the transcript.
pub const TRANSCRIPT_LIVE_CAP: u64 = 1 << 20;
/// Bytes per remote read.
const CHUNK: usize = 1 << 20;
/// Most `inputs` bytes read at once.
const INPUTS_MAX: usize = 64 << 10;

/// Where composing stands (saved as `transcript.state`).
#[derive(Debug, Default, Serialize, Deserialize)]
struct State {
    /// Bytes of the terminal's transcript consumed.
    raw_done: u64,
    /// Length of the local transcript.
    len: u64,
    /// The local transcript is empty or ends a line.
    #[serde(default)]
    ends_line: bool,
    /// The foreground command whose output is being spliced in.
    cur: Option<Live>,
    /// Inside the terminal's copy of this ended command's output (left out).
    skipping: Option<String>,
    /// The output cap was reached: nothing more is added.
    capped: bool,
    /// The command of the last `rr-run` mark taken: a run mark must name a newer one. The
    /// machine's transcript file holds past marks, secret and all; a command that prints it
    /// replays only marks of commands that are over.
    #[serde(default)]
    last_run: Option<String>,
}

/// Command ids end in a v7 UUID (`cmd_<32 hex digits>`), which orders them by creation time.
fn id_time(id: &str) -> Option<&str> {
    let tail = id.rsplit('_').next()?;
    (tail.len() == 32 && tail.bytes().all(|b| b.is_ascii_hexdigit())).then_some(tail)
}

/// `id` names a command created after `last` (ids of another shape: any other id).
fn is_newer(id: &str, last: Option<&str>) -> bool {
    match last {
        None => true,
        Some(last) => match (id_time(id), id_time(last)) {
            (Some(a), Some(b)) => a > b,
            _ => id != last,
        },
    }
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct Live {
    id: String,
    /// Bytes of stdout / stderr accounted for (spliced in, or past the live cap).
    out: u64,
    err: u64,
    /// Offset in `inputs` of the first line not yet used.
    inputs_at: u64,
    /// The command had ended and its output was in the local logs when it was first seen: its
    /// streams' full sizes, and it is read from there, with no round trip to the machine.
    #[serde(default)]
    local: Option<(u64, u64)>,
    /// Loaded per compose: the output sizes, and the `inputs` lines not yet used.
    #[serde(skip)]
    sizes: Option<(u64, u64)>,
    #[serde(skip)]
    inputs: VecDeque<InputMark>,
}

#[derive(Debug, Clone, Copy)]
struct InputMark {
    tr: u64,
    out: u64,
    err: u64,
    /// Offset in `inputs` just past its line.
    next: u64,
}

/// The full sizes of an ended command's stdout and stderr when its output is in the local logs
/// (`<id>.log` is written when the record ends, after `<id>.stdout` and `<id>.stderr` are
/// complete up to the output cap; its header gives the sizes).
fn ended_locally(log_dir: &Path, id: &str) -> Option<(u64, u64)> {
    use std::io::{BufRead, BufReader};
    let file = File::open(log_dir.join(format!("{id}.log"))).ok()?;
    let (mut out, mut err) = (None, None);
    for line in BufReader::new(file).lines().take(16) {
        let line = line.ok()?;
        if let Some(v) = line.strip_prefix("stdout_bytes: ") {
            out = v.trim().parse().ok();
        } else if let Some(v) = line.strip_prefix("stderr_bytes: ") {
            err = v.trim().parse().ok();
        } else if line.starts_with("=====") {
            break;
        }
    }
    Some((out?, err?))
}

/// Up to `want` bytes of a local file from `at` (fewer at its end; none if it is missing).
fn read_local(path: &Path, at: u64, want: usize) -> Result<Vec<u8>> {
    use std::os::unix::fs::FileExt;
    let file = match File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(Error::io(format!("cannot open {}", path.display()), &e)),
    };
    let mut buf = vec![0; want];
    let mut got = 0;
    while got < want {
        match file.read_at(&mut buf[got..], at + got as u64) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(Error::io(format!("cannot read {}", path.display()), &e)),
        }
    }
    buf.truncate(got);
    Ok(buf)
}

/// What a compose left: whether the output cap was reached.
pub struct Composed {
    pub capped: bool,
}

fn state_path(local: &Path) -> PathBuf {
    local.with_extension("state")
}

/// The local transcript is composed (a state file is there), not a raw mirror written by an
/// older version.
pub fn is_composed(local: &Path) -> bool {
    state_path(local).exists()
}

/// The local transcript reached the output cap (as its saved state says).
pub fn is_capped(local: &Path) -> bool {
    std::fs::read(state_path(local))
        .ok()
        .and_then(|b| serde_json::from_slice::<State>(&b).ok())
        .is_some_and(|st| st.capped)
}

/// Bring the local transcript of `rec` up to date with the machine (see the module doc).
pub async fn compose(t: &dyn Transport, rec: &SessionRecord, cap: u64) -> Result<Composed> {
    let local = PathBuf::from(&rec.transcript_file_local);
    let log_dir = PathBuf::from(&rec.log_dir_local);
    let _lock = lock(&local.with_extension("lock")).await?;
    let mut c = Composer::open(t, rec, &local, &log_dir, cap)?;
    if !c.st.capped {
        c.run().await?;
    }
    c.save()?;
    Ok(Composed {
        capped: c.st.capped,
    })
}

/// The compose lock, waited for (bounded) without blocking the runtime.
async fn lock(path: &Path) -> Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    let file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .mode(0o600)
        .open(path)
        .map_err(|e| Error::io(format!("cannot open {}", path.display()), &e))?;
    let start = Instant::now();
    loop {
        match file.try_lock() {
            Ok(()) => return Ok(file),
            Err(std::fs::TryLockError::WouldBlock) if start.elapsed() < Duration::from_secs(60) => {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Err(e) => {
                return Err(Error::new(
                    ErrorCode::Io,
                    format!(
                        "cannot lock {} ({e}); another process is reading the transcript: try \
                         again",
                        path.display()
                    ),
                ));
            }
        }
    }
}

struct Composer<'a> {
    t: &'a dyn Transport,
    raw: &'a str,
    commands_dir: &'a str,
    /// The session's local log dir: each ended command's output as `<id>.stdout` / `.stderr`.
    log_dir: &'a Path,
    local: &'a Path,
    file: File,
    st: State,
    cap: u64,
    /// The session's mark secret (`None`: a session started by an older version).
    mark_key: Option<String>,
}

impl<'a> Composer<'a> {
    fn open(
        t: &'a dyn Transport,
        rec: &'a SessionRecord,
        local: &'a Path,
        log_dir: &'a Path,
        cap: u64,
    ) -> Result<Self> {
        use std::os::unix::fs::OpenOptionsExt;
        let io = |what: &str, e: std::io::Error| {
            Error::io(format!("cannot {what} {}", local.display()), &e)
        };
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .mode(0o600)
            .open(local)
            .map_err(|e| io("open", e))?;
        let have = file.metadata().map_err(|e| io("read", e))?.len();
        let mut st: State = std::fs::read(state_path(local))
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .unwrap_or_else(|| State {
                ends_line: true,
                ..Default::default()
            });
        if have < st.len {
            // Not the file the state describes: start over.
            st = State {
                ends_line: true,
                ..Default::default()
            };
        }
        // Cut back what an interrupted compose wrote past its saved state.
        file.set_len(st.len).map_err(|e| io("truncate", e))?;
        Ok(Composer {
            t,
            raw: &rec.remote_transcript_file,
            commands_dir: &rec.remote_commands_dir,
            log_dir,
            local,
            file,
            st,
            cap,
            mark_key: super::load_mark_key(Path::new(&rec.log_dir_local)),
        })
    }

    fn save(&self) -> Result<()> {
        let path = state_path(self.local);
        let tmp = path.with_extension("state.tmp");
        let data = serde_json::to_vec(&self.st)
            .map_err(|e| Error::new(ErrorCode::Internal, format!("transcript state: {e}")))?;
        // Private like everything in the state dir (0600), whatever the umask.
        let write = || -> std::io::Result<()> {
            use std::io::Write;
            use std::os::unix::fs::OpenOptionsExt;
            let mut file = OpenOptions::new()
                .create(true)
                .truncate(true)
                .write(true)
                .mode(0o600)
                .open(&tmp)?;
            file.write_all(&data)?;
            drop(file);
            std::fs::rename(&tmp, &path)
        };
        write().map_err(|e| Error::io(format!("cannot write {}", path.display()), &e))
    }

    async fn run(&mut self) -> Result<()> {
        let size = match self.t.stat(self.raw).await? {
            Some(st) => st.size,
            None => 0,
        };
        if size < self.st.raw_done {
            // The machine's transcript is shorter than what was read of it: not the same file.
            return Ok(());
        }
        if let Some(mut live) = self.st.cur.take() {
            self.load(&mut live).await?;
            self.st.cur = Some(live);
        }
        while self.st.raw_done < size && !self.st.capped {
            let want = ((size - self.st.raw_done) as usize).min(CHUNK);
            let buf = self
                .t
                .read_file_range(self.raw, self.st.raw_done, want)
                .await?;
            if buf.is_empty() {
                break;
            }
            let at_end = self.st.raw_done + buf.len() as u64 >= size;
            let used = self.process(&buf).await?;
            self.st.raw_done += used as u64;
            if at_end || used == 0 {
                break;
            }
        }
        // The running command's output so far, up to the next input not yet reached.
        if let Some(mut live) = self.st.cur.take() {
            if let Some((o, e)) = live.sizes {
                let (o, e) = match live.inputs.front() {
                    Some(m) => (m.out.min(o), m.err.min(e)),
                    None => (o, e),
                };
                self.splice(&mut live, o, e).await?;
            }
            self.st.cur = Some(live);
        }
        Ok(())
    }

    fn command_file(&self, id: &str, name: &str) -> String {
        format!("{}/{id}/{name}", self.commands_dir)
    }

    async fn size_of(&self, path: &str) -> Result<u64> {
        Ok(self.t.stat(path).await?.map_or(0, |s| s.size))
    }

    /// A run mark names a command to take: newer than the last one taken, and started (its
    /// `started` file is written just before the mark). A replayed mark names a command that is
    /// over; one made up names no command.
    async fn is_new_run(&self, id: &str) -> Result<bool> {
        if !is_newer(id, self.st.last_run.as_deref()) {
            return Ok(false);
        }
        // A command the engine recorded as ended (output in the local logs) was started: no
        // round trip, and it counts even after the machine pruned its directory.
        if ended_locally(self.log_dir, id).is_some() {
            return Ok(true);
        }
        Ok(self
            .t
            .stat(&self.command_file(id, "started"))
            .await?
            .is_some())
    }

    /// The command's output sizes, then (after them) its `inputs` lines not yet used. A command
    /// that has ended with its output in the local logs is read from there: no round trip (a
    /// first read after thousands of commands stays quick), and output the machine has pruned
    /// since is still there.
    async fn load(&self, live: &mut Live) -> Result<()> {
        if live.local.is_none() && live.out == 0 && live.err == 0 && live.inputs_at == 0 {
            live.local = ended_locally(self.log_dir, &live.id);
        }
        if let Some(sizes) = live.local {
            // What was typed into it with `send` shows before its output.
            live.sizes = Some(sizes);
            live.inputs.clear();
            return Ok(());
        }
        let o = self.size_of(&self.command_file(&live.id, "stdout")).await?;
        let e = self.size_of(&self.command_file(&live.id, "stderr")).await?;
        live.sizes = Some((o, e));
        live.inputs.clear();
        let inputs = self.command_file(&live.id, "inputs");
        let data = if self.size_of(&inputs).await? > live.inputs_at {
            self.t
                .read_file_range(&inputs, live.inputs_at, INPUTS_MAX)
                .await?
        } else {
            Vec::new()
        };
        let mut at = live.inputs_at;
        for line in data.split_inclusive(|b| *b == b'\n') {
            if !line.ends_with(b"\n") {
                break;
            }
            at += line.len() as u64;
            // The command can write into its own directory: anything but three numbers is
            // skipped, and sizes never exceed what the files hold.
            let nums: Vec<u64> = String::from_utf8_lossy(line)
                .split_whitespace()
                .filter_map(|w| w.parse().ok())
                .collect();
            if let [tr, out, err] = nums[..] {
                live.inputs.push_back(InputMark {
                    tr,
                    out: out.min(o),
                    err: err.min(e),
                    next: at,
                });
            }
        }
        Ok(())
    }

    /// Consume `buf`, the terminal's bytes from `raw_done`; returns how many were used (the
    /// rest is an incomplete tail, held for the next read).
    async fn process(&mut self, buf: &[u8]) -> Result<usize> {
        let base = self.st.raw_done;
        let mut pos = 0;
        loop {
            if self.st.capped {
                return Ok(buf.len());
            }
            if let Some(skip) = &self.st.skipping {
                // Until its `rr-shown` (a next command's `rr-run` too: a shell that died while
                // showing the copy never printed it).
                let found = find_mark(buf, pos, self.mark_key.as_deref());
                let run = match &found {
                    Some((_, _, Mark::Run(id))) => self.is_new_run(id).await?,
                    _ => false,
                };
                match found {
                    Some((s, _, Mark::Run(_))) if run => {
                        pos = s;
                        self.st.skipping = None;
                    }
                    Some((_, e, Mark::Shown(id))) if id == *skip => {
                        pos = e;
                        self.st.skipping = None;
                    }
                    Some((_, e, _)) => pos = e,
                    None => return Ok(buf.len() - hold_len(&buf[pos..])),
                }
                continue;
            }
            let mark = find_mark(buf, pos, self.mark_key.as_deref());
            let run = match &mark {
                Some((_, _, Mark::Run(id))) => self.is_new_run(id).await?,
                _ => false,
            };
            // The next input typed into the running command, as an offset into `buf`.
            let input = self
                .st
                .cur
                .as_ref()
                .and_then(|l| l.inputs.front())
                .and_then(|m| {
                    let at = m.tr.saturating_sub(base).max(pos as u64);
                    (at < buf.len() as u64).then_some(at as usize)
                });
            match (input, mark) {
                (Some(at), m) if m.as_ref().is_none_or(|(s, _, _)| at <= *s) => {
                    self.emit_raw(&buf[pos..at])?;
                    pos = at;
                    let mut live = self.st.cur.take().expect("an input implies a command");
                    let m = live.inputs.pop_front().expect("an input");
                    live.inputs_at = m.next;
                    self.splice(&mut live, m.out, m.err).await?;
                    self.st.cur = Some(live);
                }
                (_, Some((s, e, mark))) => {
                    self.emit_raw(&buf[pos..s])?;
                    pos = e;
                    match mark {
                        Mark::Run(_) if !run => {}
                        Mark::Run(id) => {
                            self.st.last_run = Some(id.clone());
                            if let Some(prev) = self.st.cur.take() {
                                self.finish(prev).await?;
                            }
                            let mut live = Live {
                                id,
                                ..Default::default()
                            };
                            self.load(&mut live).await?;
                            self.st.cur = Some(live);
                        }
                        Mark::End(id) => {
                            if self.st.cur.as_ref().is_some_and(|l| l.id == id) {
                                let live = self.st.cur.take().expect("checked");
                                self.finish(live).await?;
                                self.st.skipping = Some(id);
                            }
                        }
                        Mark::Shown(_) => {}
                    }
                }
                _ => {
                    let hold = hold_len(&buf[pos..]);
                    self.emit_raw(&buf[pos..buf.len() - hold])?;
                    return Ok(buf.len() - hold);
                }
            }
        }
    }

    /// The command ended: the rest of its output, a newline if a line is left open, and a
    /// note for what the live cap left out.
    async fn finish(&mut self, mut live: Live) -> Result<()> {
        let (o, e) = match live.local {
            Some(sizes) => sizes,
            None => {
                let stdout = self.command_file(&live.id, "stdout");
                match self.t.stat(&stdout).await? {
                    Some(st) => (
                        st.size,
                        self.size_of(&self.command_file(&live.id, "stderr")).await?,
                    ),
                    // Pruned on the machine: from the local logs if it is there, else say so.
                    None => match ended_locally(self.log_dir, &live.id) {
                        Some(sizes) => {
                            live.local = Some(sizes);
                            sizes
                        }
                        None => {
                            self.splice(&mut live, 0, 0).await?;
                            if !self.st.ends_line {
                                self.emit(b"\n")?;
                            }
                            let note = format!(
                                "[the output of command {} is not here: the machine no longer has \
                                 it and it is not in the local logs]\n",
                                live.id
                            );
                            return self.emit(note.as_bytes());
                        }
                    },
                }
            }
        };
        self.splice(&mut live, o, e).await?;
        // As the session shell's own copy does: what follows starts a line.
        if !self.st.ends_line {
            self.emit(b"\n")?;
        }
        for (name, size) in [("stdout", o), ("stderr", e)] {
            if size > TRANSCRIPT_LIVE_CAP {
                let note = format!(
                    "[... {} more bytes of {name} in the command's log ({})]\n",
                    size - TRANSCRIPT_LIVE_CAP,
                    live.id
                );
                self.emit(note.as_bytes())?;
            }
        }
        Ok(())
    }

    /// Splice in the command's stdout up to `out`, then its stderr up to `err` (each at most
    /// [`TRANSCRIPT_LIVE_CAP`]).
    async fn splice(&mut self, live: &mut Live, out: u64, err: u64) -> Result<()> {
        for (name, upto) in [("stdout", out), ("stderr", err)] {
            let done = if name == "stdout" { live.out } else { live.err };
            if upto <= done {
                continue;
            }
            let path = self.command_file(&live.id, name);
            let local = live
                .local
                .is_some()
                .then(|| self.log_dir.join(format!("{}.{name}", live.id)));
            let mut at = done;
            let end = upto.min(TRANSCRIPT_LIVE_CAP);
            while at < end && !self.st.capped {
                let want = ((end - at) as usize).min(CHUNK);
                let data = match &local {
                    Some(file) => read_local(file, at, want)?,
                    None => self.t.read_file_range(&path, at, want).await?,
                };
                if data.is_empty() {
                    break;
                }
                self.emit(&data)?;
                at += data.len() as u64;
            }
            if name == "stdout" {
                live.out = upto;
            } else {
                live.err = upto;
            }
        }
        Ok(())
    }

    /// The terminal's bytes, without the engine's plumbing.
    fn emit_raw(&mut self, raw: &[u8]) -> Result<()> {
        if raw.is_empty() {
            return Ok(());
        }
        let text = clean(&String::from_utf8_lossy(raw));
        self.emit(text.as_bytes())
    }

    /// Append to the local transcript, up to the output cap; at the cap, a note and no more.
    fn emit(&mut self, data: &[u8]) -> Result<()> {
        if self.st.capped || data.is_empty() {
            return Ok(());
        }
        let room = self.cap.saturating_sub(self.st.len);
        let (keep, capped) = if data.len() as u64 > room {
            (&data[..room as usize], true)
        } else {
            (data, false)
        };
        self.write(keep)?;
        if capped {
            let note = format!(
                "\n[transcript: only its first {} bytes are kept here (output cap, \
                 REMOTE_RUNNER_OUTPUT_CAP); the rest is only on the machine: the terminal's \
                 bytes in {}, each command's output in its own files]\n",
                self.cap, self.raw
            );
            self.write(note.as_bytes())?;
            self.st.capped = true;
        }
        Ok(())
    }

    fn write(&mut self, data: &[u8]) -> Result<()> {
        use std::os::unix::fs::FileExt;
        if data.is_empty() {
            return Ok(());
        }
        self.file
            .write_all_at(data, self.st.len)
            .map_err(|e| Error::io(format!("cannot write {}", self.local.display()), &e))?;
        self.st.len += data.len() as u64;
        self.st.ends_line = data.ends_with(b"\n");
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transport::local::LocalTransport;

    /// A session whose "machine" is a temporary directory: `raw` is the terminal's bytes,
    /// `c/<id>/` a command's files.
    struct Bed {
        dir: tempfile::TempDir,
        rec: SessionRecord,
        t: LocalTransport,
    }

    impl Bed {
        fn new() -> Bed {
            let dir = tempfile::tempdir().unwrap();
            let p = |n: &str| dir.path().join(n).to_string_lossy().into_owned();
            let rec = serde_json::from_value(serde_json::json!({
                "session_id": "sess_1", "machine_id": "bed", "cwd": "/tmp", "status": "active",
                "backend": "tmux", "created_at": "2026-01-01T00:00:00Z", "log_dir_local": p(""),
                "transcript_file_local": p("transcript.txt"), "remote_state_dir": p(""),
                "remote_commands_dir": p("c"), "remote_transcript_file": p("raw"),
                "tmux_socket": "s", "tmux_session": "rr-sess_1",
                "tmux_path": "/usr/bin/tmux", "bash_path": "/bin/bash"
            }))
            .unwrap();
            std::fs::create_dir_all(dir.path().join("c/cmd_a")).unwrap();
            std::fs::write(dir.path().join("c/cmd_a/started"), "started=1\n").unwrap();
            Bed {
                dir,
                rec,
                t: LocalTransport::new(),
            }
        }

        fn append(&self, name: &str, data: &[u8]) {
            use std::io::Write;
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(self.dir.path().join(name))
                .unwrap()
                .write_all(data)
                .unwrap();
        }

        fn raw_len(&self) -> u64 {
            std::fs::metadata(self.dir.path().join("raw")).map_or(0, |m| m.len())
        }

        /// Compose with `cap`; the whole local transcript.
        async fn read(&self, cap: u64) -> (String, bool) {
            let capped = compose(&self.t, &self.rec, cap).await.unwrap().capped;
            let text = std::fs::read(&self.rec.transcript_file_local).unwrap();
            (String::from_utf8_lossy(&text).into_owned(), capped)
        }
    }

    /// A REPL session, read at each step: output as it comes, each input's echo between the
    /// output before it and its reply (placed by the `inputs` line, whatever the timing of the
    /// reads), the terminal's copy at the end left out, a mark cut in two held back.
    #[tokio::test]
    async fn output_is_spliced_in_order_and_never_twice() {
        let b = Bed::new();
        b.append(
            "raw",
            b"$  \\builtin . \"$__rr_sdir/rr.sh\" run \"$__rr_cdir/\"cmd_a\r\n\r\x1b[K$ python3 -q\n\
              \x1b]6973;rr-run;cmd_a\x07",
        );
        b.append("c/cmd_a/stderr", b">>> ");
        let (text, _) = b.read(1 << 20).await;
        assert_eq!(text, "\r\x1b[K$ python3 -q\n>>> ");
        // `send print(1)`: the sizes as it was typed; then the echo and the reply, read late.
        b.append(
            "c/cmd_a/inputs",
            format!("{} 0 4\n", b.raw_len()).as_bytes(),
        );
        b.append("raw", b"print(1)\r\n");
        b.append("c/cmd_a/stdout", b"1\n");
        b.append("c/cmd_a/stderr", b">>> ");
        b.append(
            "c/cmd_a/inputs",
            format!("{} 2 8\n", b.raw_len()).as_bytes(),
        );
        b.append("raw", b"print(2)\r\n");
        b.append("c/cmd_a/stdout", b"2\n");
        b.append("c/cmd_a/stderr", b">>> ");
        // The end mark cut in two: held back until it is whole.
        b.append("raw", b"\x1b]6973;rr-e");
        let (text, _) = b.read(1 << 20).await;
        assert_eq!(
            text,
            "\r\x1b[K$ python3 -q\n>>> print(1)\r\n1\n>>> print(2)\r\n2\n>>> "
        );
        b.append(
            "raw",
            b"nd;cmd_a\x07\x1b\\\x1bkrr-cmd_a\x1b\\1\n2\n>>> >>> >>> \n\x1b]6973;rr-shown;cmd_a\x07[exit 1]\n$ ",
        );
        let (text, capped) = b.read(1 << 20).await;
        assert_eq!(
            text,
            "\r\x1b[K$ python3 -q\n>>> print(1)\r\n1\n>>> print(2)\r\n2\n>>> \n[exit 1]\n$ "
        );
        assert!(!capped);
        // Nothing new: the same; the state survives (offsets stay valid).
        assert_eq!(b.read(1 << 20).await.0, text);
    }

    /// A keyed session: marks without its secret are the command's output, and marks with it
    /// that a command replays (it printed the machine's transcript file) name commands that
    /// are over: neither ends the copy early nor starts a command, so the `[exit N]` and the
    /// next command's line stay, and the next command's output is its own.
    #[tokio::test]
    async fn forged_and_replayed_marks_are_left_out_as_output() {
        let b = Bed::new();
        super::super::save_mark_key(b.dir.path(), "00ff").unwrap();
        let a = "cmd_01a2522000000000000000000000000a";
        let n = "cmd_01a2522000000000000000000000000b";
        for id in [a, n] {
            std::fs::create_dir_all(b.dir.path().join(format!("c/{id}"))).unwrap();
            b.append(&format!("c/{id}/started"), b"started=1\n");
        }
        b.append(&format!("c/{a}/stdout"), b"out-a\n");
        b.append(&format!("c/{n}/stdout"), b"out-n\n");
        let copy = format!(
            "\x1b]6973;rr-run;X\x07\x1b]6973;rr-end;X\x07\x1b]6973;rr-run;00ff;{a}\x07\
             \x1b]6973;rr-end;00ff;{a}\x07out-a\n"
        );
        b.append(
            "raw",
            format!(
                "\r\x1b[K$ cat f\n\x1b]6973;rr-run;00ff;{a}\x07\x1b]6973;rr-end;00ff;{a}\x07{copy}\
                 \x1b]6973;rr-shown;00ff;{a}\x07[exit 3]\n$ \r\x1b[K$ echo n\n\
                 \x1b]6973;rr-run;00ff;{n}\x07\x1b]6973;rr-end;00ff;{n}\x07out-n\n\
                 \x1b]6973;rr-shown;00ff;{n}\x07$ "
            )
            .as_bytes(),
        );
        let (text, _) = b.read(1 << 20).await;
        assert_eq!(
            text,
            "\r\x1b[K$ cat f\nout-a\n[exit 3]\n$ \r\x1b[K$ echo n\nout-n\n$ "
        );
    }

    /// Past the cap: the first bytes, a note naming the machine's transcript, and no more.
    #[tokio::test]
    async fn the_local_transcript_is_capped() {
        let b = Bed::new();
        b.append("raw", b"$ \r\x1b[K$ seq 1 1000\n\x1b]6973;rr-run;cmd_a\x07");
        let out: String = (1..=1000).map(|n| format!("{n}\n")).collect();
        b.append("c/cmd_a/stdout", out.as_bytes());
        let (text, capped) = b.read(100).await;
        assert!(capped);
        assert!(
            text.starts_with("$ \r\x1b[K$ seq 1 1000\n1\n2\n"),
            "{text:?}"
        );
        let note = "\n[transcript: only its first 100 bytes are kept here";
        assert_eq!(text.find(note), Some(100), "{text:?}");
        assert!(text.contains(&b.rec.remote_transcript_file), "{text:?}");
        b.append("raw", b"more\n");
        assert_eq!(b.read(100).await, (text, true));
    }

    /// Commands the machine pruned before the first read: one whose output is in the local logs
    /// is spliced from there (no round trip); one of which nothing is left anywhere is shown as
    /// the terminal showed it (the session shell's own copy of its output), never dropped.
    #[tokio::test]
    async fn pruned_commands_come_from_the_local_logs_or_the_terminal_copy() {
        let b = Bed::new();
        let dir = b.dir.path();
        for (id, out) in [("cmd_a", "a-out\n"), ("cmd_b", "b-out\n")] {
            b.append(
                "raw",
                format!(
                    "$ echo\n\x1b]6973;rr-run;{id}\x07\x1b]6973;rr-end;{id}\x07{out}\
                     \x1b]6973;rr-shown;{id}\x07[exit 0]\n"
                )
                .as_bytes(),
            );
            // The machine kept nothing of either; only cmd_a ended with its output recorded.
            if id == "cmd_a" {
                std::fs::write(dir.join(format!("{id}.stdout")), out).unwrap();
                std::fs::write(dir.join(format!("{id}.stderr")), "").unwrap();
                std::fs::write(
                    dir.join(format!("{id}.log")),
                    format!("command_id: {id}\nstdout_bytes: {}\nstderr_bytes: 0\n===== command =====\necho\n", out.len()),
                )
                .unwrap();
            }
        }
        let (text, _) = b.read(1 << 20).await;
        assert_eq!(text, "$ echo\na-out\n[exit 0]\n$ echo\nb-out\n[exit 0]\n");
    }
}
