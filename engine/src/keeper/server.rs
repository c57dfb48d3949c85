//! The keeper process: holds one machine's SSH transport and serves it on a unix socket to
//! CLI processes of the same user, until it has been idle long enough, is told to end, loses
//! its link, or finds its socket gone.

use std::collections::HashMap;
use std::fs::{File, OpenOptions, TryLockError};
use std::io::Write;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::client::WINDOW;
use super::paths::{self, KeeperPaths};
use super::wire::{self, Frame, Reply, Request};
use crate::connect::MachineConnector;
use crate::connect::Connector;
use crate::error::{Error, ErrorCode, Result};
use crate::remote::Remote;
use crate::ssh::{ConnectOptions, PassphraseSource};
use crate::store::ownership::effective_uid;
use crate::transport::{ExitStatus, StreamEvent, Transport};

/// What a keeper serves and for how long.
#[derive(Debug, Clone)]
pub struct KeeperOptions {
    pub state_dir: PathBuf,
    pub machine_id: String,
    /// End after this long without a request.
    pub idle: Duration,
}

/// How long a starting keeper waits for the machine's lock before leaving it to the holder.
const LOCK_WAIT: Duration = Duration::from_secs(2);

/// Bound on the link check of each handshake (under the client's handshake bound).
const PROBE_BOUND: Duration = Duration::from_millis(700);

/// Longest a keeper that was told to end waits for calls in flight.
const DRAIN_BOUND: Duration = Duration::from_secs(600);

/// How often the keeper checks its idle time, its socket and its link.
const TICK: Duration = Duration::from_millis(500);

struct Shared {
    /// The machine: its SSH transport and the keeper's own control processes.
    remote: Arc<Remote>,
    /// The nodes of Slurm sessions the CLI called through this keeper, by job id.
    nodes: crate::slurm::Nodes,
    machine_id: String,
    build: String,
    record: String,
    /// The record served, to check [`paths::record_hash`] again on every tick.
    machine: crate::machine::Machine,
    in_flight: AtomicUsize,
    requests: AtomicU64,
    last: Mutex<Instant>,
    stop: CancellationToken,
}

/// Counts a request as in flight while it lives.
struct Busy<'a>(&'a Shared);

impl<'a> Busy<'a> {
    fn new(shared: &'a Shared) -> Busy<'a> {
        shared.in_flight.fetch_add(1, Ordering::SeqCst);
        shared.requests.fetch_add(1, Ordering::Relaxed);
        Busy(shared)
    }
}

impl Drop for Busy<'_> {
    fn drop(&mut self) {
        *self.0.last.lock().unwrap() = Instant::now();
        self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Counts a client connection as in flight while it is open: a CLI call is several requests,
/// and one told to end between two of them must still be served to its end.
struct Attached(Arc<Shared>);

impl Attached {
    fn new(shared: &Arc<Shared>) -> Attached {
        shared.in_flight.fetch_add(1, Ordering::SeqCst);
        Attached(shared.clone())
    }
}

impl Drop for Attached {
    fn drop(&mut self) {
        *self.0.last.lock().unwrap() = Instant::now();
        self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Run a keeper for `options.machine_id` until it ends. Returns at once (Ok) when another
/// keeper of that machine holds the lock.
pub async fn serve(options: KeeperOptions) -> Result<()> {
    let paths = KeeperPaths::new(&options.state_dir, &options.machine_id);
    paths.ensure_dir()?;
    // The lock's wait sleeps the thread: off the async workers.
    let Some(_lock) = crate::util::blocking(|| take_lock(&paths.lock))? else {
        log(&format!(
            "another keeper of {} runs; this one ends",
            options.machine_id
        ));
        return Ok(());
    };
    let (machine, remote, record) = connect_under_stable_trust(&options).await?;
    let listener = bind(&paths.socket)?;
    let socket_ino = std::fs::metadata(&paths.socket)
        .map(|m| m.ino())
        .map_err(|e| Error::io("cannot stat the keeper socket", &e))?;
    log(&format!(
        "serving {} ({}) on {} for up to {}s idle",
        options.machine_id,
        remote.describe(),
        paths.socket.display(),
        options.idle.as_secs()
    ));
    let shared = Arc::new(Shared {
        remote,
        nodes: crate::slurm::Nodes::default(),
        machine_id: options.machine_id.clone(),
        build: paths::build_id(),
        record,
        machine,
        in_flight: AtomicUsize::new(0),
        requests: AtomicU64::new(0),
        last: Mutex::new(Instant::now()),
        stop: CancellationToken::new(),
    });
    let why = run(&listener, &shared, &paths.socket, socket_ino, options.idle).await;
    log(&format!("ending: {why}"));
    drop(listener);
    if std::fs::metadata(&paths.socket).is_ok_and(|m| m.ino() == socket_ino) {
        let _ = std::fs::remove_file(&paths.socket);
    }
    // New calls now go direct; calls already in flight (a long `session exec` wait) finish.
    let until = Instant::now() + DRAIN_BOUND;
    while shared.in_flight.load(Ordering::SeqCst) > 0 && Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(())
}

/// How many times the keeper connects before it gives up on host trust that keeps changing.
const CONNECT_TRIES: usize = 3;

/// Connect to the machine, and return it with the record hash it serves: the hash of the host
/// trust the connect checked. The host key is checked early in the connect and the login comes
/// after, which a hostile host can hold as long as it likes; a key revoked in that time would be
/// in a hash taken only after the connect, and the keeper would serve the revoked host. So the
/// hash is taken before and after: when they differ (a revocation, an edited ssh_config, or the
/// key an accept-new connect just recorded), the connect is thrown away and made again under
/// the trust as it is now.
async fn connect_under_stable_trust(
    options: &KeeperOptions,
) -> Result<(crate::machine::Machine, Arc<Remote>, String)> {
    for _ in 0..CONNECT_TRIES {
        // A fresh connector each time: it caches the connection it made.
        let connector = MachineConnector::new(
            options.state_dir.clone(),
            ConnectOptions {
                // No terminal: a key that needs a passphrase is not served (the CLI goes direct).
                passphrase: PassphraseSource::Never,
                ..ConnectOptions::default()
            },
        );
        let machine = connector.machine(&options.machine_id)?;
        let before = paths::record_hash(&machine);
        let transport = connector.connect(&options.machine_id).await?;
        let record = paths::record_hash(&machine);
        if record == before {
            return Ok((machine, transport, record));
        }
        log(
            "the machine's host trust (known_hosts, ssh_config) changed while connecting; connecting again",
        );
    }
    Err(Error::new(
        ErrorCode::ConnectionFailed,
        format!(
            "the host trust of {} (known_hosts, ssh_config) changed during each of {CONNECT_TRIES} \
             connects; the keeper serves only a connection checked against trust that held \
             throughout",
            options.machine_id
        ),
    ))
}

/// The accept loop; returns why it ended.
async fn run(
    listener: &UnixListener,
    shared: &Arc<Shared>,
    socket: &Path,
    socket_ino: u64,
    idle: Duration,
) -> &'static str {
    let mut tick = tokio::time::interval(TICK);
    loop {
        tokio::select! {
            _ = shared.stop.cancelled() => return "asked to end",
            accepted = listener.accept() => {
                if let Ok((stream, _)) = accepted {
                    if peer_is_owner(&stream) {
                        tokio::spawn(connection(shared.clone(), stream));
                    } else {
                        log("refused a connection from another user");
                    }
                }
            }
            _ = tick.tick() => {
                if shared.in_flight.load(Ordering::SeqCst) == 0
                    && shared.last.lock().unwrap().elapsed() >= idle
                {
                    return "idle time reached";
                }
                if !std::fs::metadata(socket).is_ok_and(|m| m.ino() == socket_ino) {
                    return "its socket was removed";
                }
                if !shared.remote.is_connected() {
                    return "the link to the machine dropped";
                }
                // A known_hosts file or ssh_config changed (a key revoked, a file added): what
                // this keeper checked at its connect no longer holds.
                if paths::record_hash(&shared.machine) != shared.record {
                    return "the machine's host trust (known_hosts, ssh_config) changed";
                }
            }
        }
    }
}

/// One round trip on the kept link (an SFTP `stat /`) before a client trusts it: a machine
/// that stopped answering must not hold a CLI call that a direct connect would have bounded.
async fn probe(shared: &Shared) -> Result<()> {
    match tokio::time::timeout(PROBE_BOUND, shared.remote.stat("/")).await {
        Err(_) => Err(Error::new(
            ErrorCode::Timeout,
            "the machine did not answer the keeper's link check in time; the command connects \
             directly",
        )),
        Ok(Err(e)) if matches!(e.code, ErrorCode::ConnectionLost | ErrorCode::Timeout) => Err(e),
        // Any answer, even a refusal, shows the link is alive.
        Ok(_) => Ok(()),
    }
}

/// Whether the process at the other end of `stream` runs as this keeper's user.
pub fn peer_is_owner(stream: &UnixStream) -> bool {
    stream.peer_cred().is_ok_and(|cred| uid_allowed(cred.uid()))
}

/// The keeper serves only its own user (root included, as itself only).
pub fn uid_allowed(peer_uid: u32) -> bool {
    peer_uid == effective_uid()
}

/// The lock that makes one keeper per machine; `None` when another process holds it.
fn take_lock(path: &Path) -> Result<Option<File>> {
    let mut file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .mode(0o600)
        .open(path)
        .map_err(|e| Error::io(format!("cannot open {}", path.display()), &e))?;
    // A stale keeper told to end may still be on its way out: wait a little for its lock.
    let until = Instant::now() + LOCK_WAIT;
    loop {
        match file.try_lock() {
            Ok(()) => break,
            Err(TryLockError::WouldBlock) if Instant::now() < until => {
                std::thread::sleep(Duration::from_millis(25));
            }
            Err(TryLockError::WouldBlock) => return Ok(None),
            Err(TryLockError::Error(e)) => {
                return Err(Error::io(format!("cannot lock {}", path.display()), &e));
            }
        }
    }
    // The pid, for people and tests (`machine disconnect` does not need it).
    let _ = file.set_len(0);
    let _ = writeln!(file, "{}", std::process::id());
    Ok(Some(file))
}

/// Bind the socket (replacing a stale one: the lock says no keeper owns it), mode 0600.
fn bind(socket: &Path) -> Result<UnixListener> {
    match std::fs::remove_file(socket) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(Error::io("cannot remove a stale keeper socket", &e)),
    }
    let listener = UnixListener::bind(socket)
        .map_err(|e| Error::io(format!("cannot bind {}", socket.display()), &e))?;
    std::fs::set_permissions(socket, std::fs::Permissions::from_mode(0o600))
        .map_err(|e| Error::io("cannot set mode 0600 on the keeper socket", &e))?;
    Ok(listener)
}

fn log(line: &str) {
    let now = time::OffsetDateTime::now_utc();
    eprintln!("{now} keeper[{}]: {line}", std::process::id());
}

type Out = mpsc::UnboundedSender<Vec<u8>>;

fn reply(out: &Out, id: u64, reply: Reply, body: &[u8]) {
    let _ = out.send(wire::encode(id, reply, body));
}

fn reply_result(out: &Out, id: u64, result: Result<()>) {
    match result {
        Ok(()) => reply(out, id, Reply::Done, &[]),
        Err(e) => reply(out, id, Reply::from_error(&e), &[]),
    }
}

/// One CLI process's connection: a handshake, then requests run concurrently.
async fn connection(shared: Arc<Shared>, stream: UnixStream) {
    let _attached = Attached::new(&shared);
    let (mut read, mut write) = stream.into_split();
    let (out, mut rx) = mpsc::unbounded_channel::<Vec<u8>>();
    tokio::spawn(async move {
        while let Some(bytes) = rx.recv().await {
            if write.write_all(&bytes).await.is_err() {
                break;
            }
        }
    });
    let mut greeted = false;
    let mut streams: HashMap<u64, mpsc::UnboundedSender<Frame<Request>>> = HashMap::new();
    while let Ok(Some(frame)) = wire::read_frame::<_, Request>(&mut read).await {
        let id = frame.id;
        match &frame.header {
            Request::Hello { build, record } => {
                if *build == shared.build && *record == shared.record {
                    if let Err(e) = probe(&shared).await {
                        reply(&out, id, Reply::from_error(&e), &[]);
                        continue;
                    }
                    greeted = true;
                    let hello = Reply::Hello {
                        build: shared.build.clone(),
                        record: shared.record.clone(),
                        pid: std::process::id(),
                        describe: shared.remote.describe(),
                    };
                    reply(&out, id, hello, &[]);
                } else {
                    // A newer build or a changed machine record: this keeper is stale.
                    let e = Error::new(
                        ErrorCode::ConnectionLost,
                        "this connection keeper is stale (another build or machine record); it \
                         ends, and the next command starts a fresh one",
                    );
                    reply(&out, id, Reply::from_error(&e), &[]);
                    log("stale: a client of another build or machine record");
                    shared.stop.cancel();
                }
            }
            Request::Status => {
                let status = Reply::Status {
                    pid: std::process::id(),
                    machine_id: shared.machine_id.clone(),
                    idle_secs: shared.last.lock().unwrap().elapsed().as_secs(),
                    requests: shared.requests.load(Ordering::Relaxed),
                };
                reply(&out, id, status, &[]);
            }
            Request::Shutdown => {
                reply(&out, id, Reply::Done, &[]);
                shared.stop.cancel();
            }
            Request::Chunk | Request::Finish | Request::Close => {
                if let Some(route) = streams.get(&id)
                    && route.send(frame).is_err()
                {
                    streams.remove(&id);
                }
            }
            _ if !greeted => {
                let e = Error::invalid("the keeper protocol starts with hello");
                reply(&out, id, Reply::from_error(&e), &[]);
            }
            Request::OpenRead { .. } | Request::OpenWrite { .. } | Request::ExecStream { .. } => {
                let (tx, rx) = mpsc::unbounded_channel();
                streams.insert(id, tx);
                tokio::spawn(stream_request(shared.clone(), frame, rx, out.clone()));
            }
            _ => {
                tokio::spawn(request(shared.clone(), frame, out.clone()));
            }
        }
    }
}

/// A one-reply request.
async fn request(shared: Arc<Shared>, frame: Frame<Request>, out: Out) {
    let _busy = Busy::new(&shared);
    let t = shared.remote.as_ref();
    let id = frame.id;
    match frame.header {
        Request::ExecRaw(call) => {
            let options = call.options(frame.body);
            send_exec(&out, id, t.exec_raw(&call.command, options).await);
        }
        Request::Call {
            verb,
            params,
            timeout_ms,
            max_output,
            input,
            node_job,
        } => {
            let mut call = crate::remote::Call::new(&verb)
                .limit_opt(timeout_ms.map(Duration::from_millis))
                .max_output(max_output);
            for (name, value) in &params {
                call = call.param(name, value.as_str());
            }
            if input {
                call = call.data(&frame.body);
            }
            let result = match node_job {
                Some(job) => call.run(&shared.nodes.get(t, &job)).await,
                None => call.run(t).await,
            };
            send_exec(&out, id, result);
        }
        Request::WriteFile { path, mode, new } => {
            let r = if new {
                t.write_new_file(&path, &frame.body, mode).await
            } else {
                t.write_file(&path, &frame.body, mode).await
            };
            reply_result(&out, id, r);
        }
        Request::ReadRange { path, offset, max } => {
            match t.read_file_range(&path, offset, max).await {
                Ok(data) => reply(&out, id, Reply::Data, &data),
                Err(e) => reply(&out, id, Reply::from_error(&e), &[]),
            }
        }
        Request::Stat { path } => match t.stat(&path).await {
            Ok(stat) => {
                let stat = stat.as_ref().map(wire::WireStat::from);
                reply(&out, id, Reply::Stat { stat }, &[]);
            }
            Err(e) => reply(&out, id, Reply::from_error(&e), &[]),
        },
        Request::CreateDirAll { path, mode } => {
            reply_result(&out, id, t.create_dir_all(&path, mode).await)
        }
        Request::ReadDir { path } => match t.read_dir(&path).await {
            Ok(entries) => {
                let entries = wire::entries_to_wire(&entries);
                reply(&out, id, Reply::Entries { entries }, &[]);
            }
            Err(e) => reply(&out, id, Reply::from_error(&e), &[]),
        },
        Request::Rename { from, to } => reply_result(&out, id, t.rename(&from, &to).await),
        Request::RemoveFile { path } => reply_result(&out, id, t.remove_file(&path).await),
        Request::SetMode { path, mode } => reply_result(&out, id, t.set_mode(&path, mode).await),
        other => {
            let e = Error::invalid(format!("unexpected keeper request {other:?}"));
            reply(&out, id, Reply::from_error(&e), &[]);
        }
    }
}

/// An exec's output: the status in the header, stdout then stderr in the body.
fn send_exec(out: &Out, id: u64, result: Result<crate::transport::ExecOutput>) {
    let o = match result {
        Ok(o) => o,
        Err(e) => return reply(out, id, Reply::from_error(&e), &[]),
    };
    let (code, signal) = match o.status {
        ExitStatus::Code(c) => (Some(c), None),
        ExitStatus::Signal(s) => (None, Some(s)),
    };
    let header = Reply::Exec {
        stdout_len: o.stdout.len(),
        stdout_truncated: o.stdout_truncated,
        stderr_truncated: o.stderr_truncated,
        code,
        signal,
    };
    let mut body = o.stdout;
    body.extend_from_slice(&o.stderr);
    reply(out, id, header, &body);
}

/// A streamed file: reads run at most [`WINDOW`] chunks ahead of the client's acknowledgements;
/// writes acknowledge every chunk and answer `finish` once the file is complete.
async fn stream_request(
    shared: Arc<Shared>,
    frame: Frame<Request>,
    mut input: mpsc::UnboundedReceiver<Frame<Request>>,
    out: Out,
) {
    let _busy = Busy::new(&shared);
    let t = shared.remote.as_ref();
    let id = frame.id;
    match frame.header {
        Request::OpenRead { path } => {
            let mut reader = match t.open_read(&path).await {
                Ok(r) => r,
                Err(e) => return reply(&out, id, Reply::from_error(&e), &[]),
            };
            reply(&out, id, Reply::Done, &[]);
            let mut buf = vec![0u8; wire::CHUNK];
            let mut ahead = 0usize;
            loop {
                while ahead >= WINDOW {
                    match input.recv().await {
                        Some(_) => ahead -= 1,
                        None => return,
                    }
                }
                match reader.read(&mut buf).await {
                    Ok(0) => return reply(&out, id, Reply::Eof, &[]),
                    Ok(n) => {
                        reply(&out, id, Reply::Data, &buf[..n]);
                        ahead += 1;
                    }
                    Err(e) => {
                        let e = Error::new(ErrorCode::RemoteError, format!("read {path}: {e}"));
                        return reply(&out, id, Reply::from_error(&e), &[]);
                    }
                }
            }
        }
        Request::OpenWrite { path, mode } => {
            let mut writer = match t.open_write(&path, mode).await {
                Ok(w) => w,
                Err(e) => return reply(&out, id, Reply::from_error(&e), &[]),
            };
            reply(&out, id, Reply::Done, &[]);
            while let Some(frame) = input.recv().await {
                let (result, last) = match frame.header {
                    Request::Chunk => (writer.write_all(&frame.body).await, false),
                    _ => (writer.shutdown().await, true),
                };
                if let Err(e) = result {
                    let e = Error::new(ErrorCode::RemoteError, format!("write {path}: {e}"));
                    return reply(&out, id, Reply::from_error(&e), &[]);
                }
                reply(&out, id, Reply::Done, &[]);
                if last {
                    return;
                }
            }
        }
        Request::ExecStream { command } => exec_stream(t.bytes(), id, &command, input, &out).await,
        _ => {}
    }
}

/// A streamed exec: the client's `chunk` frames go to the process's stdin (each acknowledged
/// once taken, so the client never runs more than [`WINDOW`] ahead), its output comes back as
/// it arrives; `close`, or the client's connection ending, drops the process's channel. Chunks
/// wait in `pending` (at most the window) while the process is behind, so a close or the end of
/// the client is seen even then.
async fn exec_stream(
    t: &dyn Transport,
    id: u64,
    command: &str,
    mut input: mpsc::UnboundedReceiver<Frame<Request>>,
    out: &Out,
) {
    let stream = match t.exec_stream(command).await {
        Ok(Some(s)) => s,
        Ok(None) => return reply(out, id, Reply::NoStream, &[]),
        Err(e) => return reply(out, id, Reply::from_error(&e), &[]),
    };
    reply(out, id, Reply::Done, &[]);
    let mut stdin = Some(stream.input);
    let mut events = stream.events;
    let mut pending: std::collections::VecDeque<Vec<u8>> = std::collections::VecDeque::new();
    let mut finished = false;
    loop {
        if finished && pending.is_empty() {
            stdin = None;
        }
        let feeding = !pending.is_empty() && stdin.is_some();
        tokio::select! {
            frame = input.recv() => match frame {
                Some(Frame { header: Request::Chunk, body, .. }) if stdin.is_some() => {
                    pending.push_back(body);
                }
                // A process that ended no longer takes input; its end is on its way.
                Some(Frame { header: Request::Chunk, .. }) => reply(out, id, Reply::Done, &[]),
                Some(Frame { header: Request::Finish, .. }) => finished = true,
                _ => return,
            },
            permit = reserve(stdin.clone()), if feeding => {
                let taken = match permit {
                    Some(permit) => {
                        drop(permit.send(pending.pop_front().unwrap_or_default()));
                        1
                    }
                    None => 0,
                };
                if taken == 0 {
                    // The process ended: what waits is acknowledged and dropped.
                    stdin = None;
                    for _ in 0..pending.len() {
                        reply(out, id, Reply::Done, &[]);
                    }
                    pending.clear();
                } else {
                    reply(out, id, Reply::Done, &[]);
                }
            }
            event = events.recv() => match event {
                Some(StreamEvent::Stdout(data)) => reply(out, id, Reply::Stdout, &data),
                Some(StreamEvent::Stderr(data)) => reply(out, id, Reply::Stderr, &data),
                Some(StreamEvent::End(Ok(status))) => {
                    let (code, signal) = match status {
                        ExitStatus::Code(c) => (Some(c), None),
                        ExitStatus::Signal(s) => (None, Some(s)),
                    };
                    let end = Reply::Exec {
                        stdout_len: 0,
                        stdout_truncated: false,
                        stderr_truncated: false,
                        code,
                        signal,
                    };
                    return reply(out, id, end, &[]);
                }
                Some(StreamEvent::End(Err(e))) => return reply(out, id, Reply::from_error(&e), &[]),
                None => {
                    let e = Error::new(
                        ErrorCode::ConnectionLost,
                        "the machine's link ended during a streamed command",
                    );
                    return reply(out, id, Reply::from_error(&e), &[]);
                }
            },
        }
    }
}

/// Room for one chunk on the process's stdin; `None` once it no longer takes any.
async fn reserve(stdin: Option<mpsc::Sender<Vec<u8>>>) -> Option<mpsc::OwnedPermit<Vec<u8>>> {
    match stdin {
        Some(s) => s.reserve_owned().await.ok(),
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_owner_uid_is_allowed() {
        assert!(uid_allowed(effective_uid()));
        assert!(!uid_allowed(effective_uid().wrapping_add(1)));
    }

    #[test]
    fn a_second_lock_loses() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.lock");
        let first = take_lock(&path).unwrap();
        assert!(first.is_some());
        let start = Instant::now();
        assert!(take_lock(&path).unwrap().is_none());
        assert!(start.elapsed() >= LOCK_WAIT);
        drop(first);
        assert!(take_lock(&path).unwrap().is_some());
    }

    #[test]
    fn the_socket_is_private() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("k.sock");
        std::fs::write(&path, b"stale").unwrap();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let _l = rt.block_on(async { bind(&path) }).unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }
}
