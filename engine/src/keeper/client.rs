//! The CLI's side: a [`Transport`] whose bytes go through the machine's keeper, over its socket,
//! and a [`ControlPlane`] that hands each control-script call to the keeper whole (it runs it on
//! its own long-lived control processes).

use std::collections::HashMap;
use std::path::Path;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, ready};
use std::time::Duration;

use async_trait::async_trait;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::UnixStream;
use tokio::sync::mpsc;

use super::wire::{self, ExecCall, Frame, Reply, Request};
use crate::error::{Error, ErrorCode, Hint, Result};
use crate::remote::{Call, ControlPlane};
use crate::transport::{
    BoxRead, BoxWrite, DirEntry, EXEC_INPUT_QUEUE, ExecOptions, ExecOutput, ExecStream, FileStat,
    StreamEvent, Transport,
};

/// Chunks a streamed file may have in flight before the sender waits for the receiver.
pub const WINDOW: usize = 8;

type Routes = Arc<Mutex<HashMap<u64, mpsc::UnboundedSender<Frame<Reply>>>>>;

/// Why a keeper was not used (the caller connects directly instead).
#[derive(Debug)]
pub enum Unusable {
    /// No socket, connection refused, or no answer in time.
    Unreachable(String),
    /// A keeper of another build, or serving another version of the machine record.
    Stale(String),
}

/// A connection to one keeper; cheap to share, calls may run concurrently.
pub struct KeeperTransport {
    tx: mpsc::UnboundedSender<Vec<u8>>,
    routes: Routes,
    next_id: AtomicU64,
    alive: Arc<AtomicBool>,
    describe: String,
    /// The keeper's process id.
    pub keeper_pid: u32,
}

impl std::fmt::Debug for KeeperTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeeperTransport")
            .field("describe", &self.describe)
            .field("keeper_pid", &self.keeper_pid)
            .finish()
    }
}

/// A link to a keeper before (or without) the machine handshake.
struct Link {
    tx: mpsc::UnboundedSender<Vec<u8>>,
    routes: Routes,
    alive: Arc<AtomicBool>,
}

async fn open_link(socket: &Path, bound: Duration) -> std::result::Result<Link, Unusable> {
    let stream = match tokio::time::timeout(bound, UnixStream::connect(socket)).await {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => return Err(Unusable::Unreachable(format!("connect: {e}"))),
        Err(_) => return Err(Unusable::Unreachable("connect timed out".into())),
    };
    let (mut read, mut write) = stream.into_split();
    let (tx, mut rx) = mpsc::unbounded_channel::<Vec<u8>>();
    let routes: Routes = Arc::default();
    let alive = Arc::new(AtomicBool::new(true));
    tokio::spawn(async move {
        use tokio::io::AsyncWriteExt;
        while let Some(bytes) = rx.recv().await {
            if write.write_all(&bytes).await.is_err() {
                break;
            }
        }
    });
    let (r, a) = (routes.clone(), alive.clone());
    tokio::spawn(async move {
        while let Ok(Some(frame)) = wire::read_frame::<_, Reply>(&mut read).await {
            let route = r.lock().unwrap().get(&frame.id).cloned();
            if let Some(route) = route {
                let _ = route.send(frame);
            }
        }
        a.store(false, Ordering::SeqCst);
        // Every waiting call sees its channel close: `connection_lost`.
        r.lock().unwrap().clear();
    });
    Ok(Link { tx, routes, alive })
}

/// Connect to the keeper at `socket` and check that it runs this build and serves this record.
pub async fn connect(
    socket: &Path,
    build: &str,
    record: &str,
    bound: Duration,
) -> std::result::Result<KeeperTransport, Unusable> {
    let link = open_link(socket, bound).await?;
    let transport = KeeperTransport {
        tx: link.tx,
        routes: link.routes,
        next_id: AtomicU64::new(1),
        alive: link.alive,
        describe: String::new(),
        keeper_pid: 0,
    };
    let hello = Request::Hello {
        build: build.to_string(),
        record: record.to_string(),
    };
    let reply = match tokio::time::timeout(bound, transport.call(hello, &[])).await {
        Ok(Ok(frame)) => frame.header,
        Ok(Err(e)) => return Err(Unusable::Stale(e.message)),
        Err(_) => return Err(Unusable::Unreachable("no answer to hello in time".into())),
    };
    match reply {
        Reply::Hello {
            build: b,
            record: r,
            pid,
            describe,
        } if b == build && r == record => Ok(KeeperTransport {
            describe,
            keeper_pid: pid,
            ..transport
        }),
        other => Err(Unusable::Stale(format!("unexpected hello reply {other:?}"))),
    }
}

/// Ask the keeper at `socket` for its status, or to end (`shutdown`), without a handshake:
/// works with a keeper of any build. `Ok(None)`: nobody answered.
pub async fn control(socket: &Path, request: Request, bound: Duration) -> Option<Reply> {
    let link = open_link(socket, bound).await.ok()?;
    let (tx, mut rx) = mpsc::unbounded_channel();
    link.routes.lock().unwrap().insert(0, tx);
    link.tx.send(wire::encode(0, request, &[])).ok()?;
    match tokio::time::timeout(bound, rx.recv()).await {
        Ok(Some(frame)) => Some(frame.header),
        _ => None,
    }
}

fn lost() -> Error {
    Error::new(
        ErrorCode::ConnectionLost,
        "the connection keeper of this machine ended during the call; run the command again (it \
         connects directly, or set REMOTE_RUNNER_KEEPER=off)",
    )
}

/// Removes a call's route when the call ends or is dropped.
struct Route<'a> {
    id: u64,
    routes: &'a Routes,
}

impl Drop for Route<'_> {
    fn drop(&mut self) {
        self.routes.lock().unwrap().remove(&self.id);
    }
}

impl KeeperTransport {
    fn open(&self) -> (u64, mpsc::UnboundedReceiver<Frame<Reply>>) {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = mpsc::unbounded_channel();
        self.routes.lock().unwrap().insert(id, tx);
        (id, rx)
    }

    fn send(&self, id: u64, request: Request, body: &[u8]) -> Result<()> {
        if !self.alive.load(Ordering::SeqCst) {
            return Err(lost());
        }
        self.tx
            .send(wire::encode(id, request, body))
            .map_err(|_| lost())
    }

    /// One request, one reply (an `error` reply becomes the error).
    async fn call(&self, request: Request, body: &[u8]) -> Result<Frame<Reply>> {
        let (id, mut rx) = self.open();
        let _route = Route {
            id,
            routes: &self.routes,
        };
        self.send(id, request, body)?;
        let frame = rx.recv().await.ok_or_else(lost)?;
        into_result(frame)
    }

    /// An `exec_raw` or control-script `call` request and its output (the reply body is stdout, then stderr).
    async fn exec_call(&self, request: Request, options: ExecOptions) -> Result<ExecOutput> {
        let frame = self
            .call(request, options.stdin.as_deref().unwrap_or_default())
            .await?;
        match frame.header {
            Reply::Exec {
                stdout_len,
                stdout_truncated,
                stderr_truncated,
                code,
                signal,
            } if stdout_len <= frame.body.len() => {
                let mut stdout = frame.body;
                let stderr = stdout.split_off(stdout_len);
                Ok(ExecOutput {
                    stdout,
                    stderr,
                    stdout_truncated,
                    stderr_truncated,
                    status: Reply::exit_status(code, signal),
                })
            }
            other => Err(unexpected(&other)),
        }
    }

    async fn call_done(&self, request: Request, body: &[u8]) -> Result<()> {
        match self.call(request, body).await?.header {
            Reply::Done => Ok(()),
            other => Err(unexpected(&other)),
        }
    }
}

fn into_result(frame: Frame<Reply>) -> Result<Frame<Reply>> {
    match frame.header {
        Reply::Error {
            code,
            message,
            retryable,
            hint,
        } => Err(wire::error_from_wire(&code, message, retryable, hint)),
        _ => Ok(frame),
    }
}

fn unexpected(reply: &Reply) -> Error {
    Error::internal(format!(
        "the connection keeper answered {reply:?} unexpectedly"
    ))
    .with_hint(Hint::ResetConnections)
}

#[async_trait]
impl Transport for KeeperTransport {
    fn describe(&self) -> String {
        self.describe.clone()
    }

    async fn exec_raw(&self, command: &str, options: ExecOptions) -> Result<ExecOutput> {
        let request = Request::ExecRaw(ExecCall::new(command, &options));
        self.exec_call(request, options).await
    }

    async fn write_file(&self, path: &str, data: &[u8], mode: u32) -> Result<()> {
        let request = Request::WriteFile {
            path: path.to_string(),
            mode,
            new: false,
        };
        self.call_done(request, data).await
    }

    async fn write_new_file(&self, path: &str, data: &[u8], mode: u32) -> Result<()> {
        let request = Request::WriteFile {
            path: path.to_string(),
            mode,
            new: true,
        };
        self.call_done(request, data).await
    }

    async fn read_file_range(&self, path: &str, offset: u64, max: usize) -> Result<Vec<u8>> {
        let request = Request::ReadRange {
            path: path.to_string(),
            offset,
            max,
        };
        let frame = self.call(request, &[]).await?;
        match frame.header {
            Reply::Data => Ok(frame.body),
            other => Err(unexpected(&other)),
        }
    }

    async fn stat(&self, path: &str) -> Result<Option<FileStat>> {
        let frame = self
            .call(
                Request::Stat {
                    path: path.to_string(),
                },
                &[],
            )
            .await?;
        match frame.header {
            Reply::Stat { stat } => Ok(stat.map(FileStat::from)),
            other => Err(unexpected(&other)),
        }
    }

    async fn create_dir_all(&self, path: &str, mode: u32) -> Result<()> {
        let request = Request::CreateDirAll {
            path: path.to_string(),
            mode,
        };
        self.call_done(request, &[]).await
    }

    async fn read_dir(&self, path: &str) -> Result<Vec<DirEntry>> {
        let request = Request::ReadDir {
            path: path.to_string(),
        };
        match self.call(request, &[]).await?.header {
            Reply::Entries { entries } => Ok(entries
                .into_iter()
                .map(|(name, stat)| DirEntry {
                    name,
                    stat: stat.into(),
                })
                .collect()),
            other => Err(unexpected(&other)),
        }
    }

    async fn rename(&self, from: &str, to: &str) -> Result<()> {
        let request = Request::Rename {
            from: from.to_string(),
            to: to.to_string(),
        };
        self.call_done(request, &[]).await
    }

    async fn remove_file(&self, path: &str) -> Result<()> {
        let request = Request::RemoveFile {
            path: path.to_string(),
        };
        self.call_done(request, &[]).await
    }

    async fn set_mode(&self, path: &str, mode: u32) -> Result<()> {
        let request = Request::SetMode {
            path: path.to_string(),
            mode,
        };
        self.call_done(request, &[]).await
    }

    async fn open_read(&self, path: &str) -> Result<BoxRead> {
        let (id, mut rx) = self.open();
        let route = OwnedRoute {
            id,
            routes: self.routes.clone(),
        };
        let request = Request::OpenRead {
            path: path.to_string(),
        };
        self.send(id, request, &[])?;
        let first = rx.recv().await.ok_or_else(lost)?;
        match into_result(first)?.header {
            Reply::Done => {}
            other => return Err(unexpected(&other)),
        }
        Ok(Box::new(StreamRead {
            id,
            rx,
            tx: self.tx.clone(),
            buf: Vec::new(),
            pos: 0,
            eof: false,
            _route: route,
        }))
    }

    async fn open_write(&self, path: &str, mode: u32) -> Result<BoxWrite> {
        let (id, mut rx) = self.open();
        let route = OwnedRoute {
            id,
            routes: self.routes.clone(),
        };
        let request = Request::OpenWrite {
            path: path.to_string(),
            mode,
        };
        self.send(id, request, &[])?;
        let first = rx.recv().await.ok_or_else(lost)?;
        match into_result(first)?.header {
            Reply::Done => {}
            other => return Err(unexpected(&other)),
        }
        Ok(Box::new(StreamWrite {
            id,
            rx,
            tx: self.tx.clone(),
            in_flight: 0,
            finished: false,
            _route: route,
        }))
    }

    fn is_connected(&self) -> bool {
        self.alive.load(Ordering::SeqCst)
    }

    /// The process runs on the keeper's link; its stdin and output cross the socket (a tree
    /// upload's tar stream, for one, instead of a call per file).
    async fn exec_stream(&self, command: &str) -> Result<Option<ExecStream>> {
        let (id, mut rx) = self.open();
        let route = OwnedRoute {
            id,
            routes: self.routes.clone(),
        };
        let request = Request::ExecStream {
            command: command.to_string(),
        };
        self.send(id, request, &[])?;
        let first = rx.recv().await.ok_or_else(lost)?;
        match into_result(first)?.header {
            Reply::Done => {}
            Reply::NoStream => return Ok(None),
            other => return Err(unexpected(&other)),
        }
        let (input, input_rx) = mpsc::channel(EXEC_INPUT_QUEUE);
        let (events_tx, events) = mpsc::unbounded_channel();
        let pump = ExecPump {
            id,
            tx: self.tx.clone(),
            replies: rx,
            input: Some(input_rx),
            events: events_tx,
            in_flight: 0,
            _route: route,
        };
        tokio::spawn(pump.run());
        Ok(Some(ExecStream { input, events }))
    }
}

/// Moves a streamed exec's stdin to the keeper (at most [`WINDOW`] chunks unacknowledged) and
/// its output back, until the process ends or the caller drops the stream.
struct ExecPump {
    id: u64,
    tx: mpsc::UnboundedSender<Vec<u8>>,
    replies: mpsc::UnboundedReceiver<Frame<Reply>>,
    /// The caller's stdin; `None` once it ended (`finish` was sent).
    input: Option<mpsc::Receiver<Vec<u8>>>,
    events: mpsc::UnboundedSender<StreamEvent>,
    in_flight: usize,
    _route: OwnedRoute,
}

impl ExecPump {
    async fn run(mut self) {
        loop {
            let open = self.input.is_some() && self.in_flight < WINDOW;
            tokio::select! {
                frame = self.replies.recv() => {
                    if let Some(end) = self.reply(frame) {
                        let _ = self.events.send(StreamEvent::End(end));
                        return;
                    }
                }
                chunk = next_input(&mut self.input), if open => {
                    let frame = match chunk {
                        Some(data) => {
                            self.in_flight += 1;
                            wire::encode(self.id, Request::Chunk, &data)
                        }
                        None => {
                            self.input = None;
                            wire::encode(self.id, Request::Finish, &[])
                        }
                    };
                    if self.tx.send(frame).is_err() {
                        let _ = self.events.send(StreamEvent::End(Err(lost())));
                        return;
                    }
                }
                () = self.events.closed() => {
                    let _ = self.tx.send(wire::encode(self.id, Request::Close, &[]));
                    return;
                }
            }
        }
    }

    /// Handle one answer; `Some` with the end of the process.
    fn reply(
        &mut self,
        frame: Option<Frame<Reply>>,
    ) -> Option<Result<crate::transport::ExitStatus>> {
        let frame = match frame.map(into_result) {
            None => return Some(Err(lost())),
            Some(Err(e)) => return Some(Err(e)),
            Some(Ok(frame)) => frame,
        };
        match frame.header {
            Reply::Done => self.in_flight = self.in_flight.saturating_sub(1),
            Reply::Stdout => {
                let _ = self.events.send(StreamEvent::Stdout(frame.body));
            }
            Reply::Stderr => {
                let _ = self.events.send(StreamEvent::Stderr(frame.body));
            }
            Reply::Exec { code, signal, .. } => return Some(Ok(Reply::exit_status(code, signal))),
            other => return Some(Err(unexpected(&other))),
        }
        None
    }
}

async fn next_input(input: &mut Option<mpsc::Receiver<Vec<u8>>>) -> Option<Vec<u8>> {
    match input {
        Some(rx) => rx.recv().await,
        None => std::future::pending().await,
    }
}

/// The keeper's route: the whole call crosses the socket (with the Slurm job when it is for a
/// node) and runs on the keeper's own control plane; the bytes passed in are not used.
#[async_trait]
impl ControlPlane for KeeperTransport {
    async fn call(
        &self,
        _transport: &dyn Transport,
        node: Option<&str>,
        call: &Call<'_>,
    ) -> Result<ExecOutput> {
        let request = Request::Call {
            verb: call.verb().to_string(),
            params: call
                .params()
                .iter()
                .map(|(name, value)| (name.to_string(), value.clone()))
                .collect(),
            timeout_ms: call.bound().map(|t| t.as_millis() as u64),
            max_output: call.output_cap(),
            input: call.input().is_some(),
            node_job: node.map(str::to_string),
        };
        let options = ExecOptions {
            stdin: call.input().map(<[u8]>::to_vec),
            timeout: call.bound(),
            max_output: call.output_cap(),
        };
        self.exec_call(request, options).await
    }
}

/// A route owned by a stream (removed when the stream is dropped).
struct OwnedRoute {
    id: u64,
    routes: Routes,
}

impl Drop for OwnedRoute {
    fn drop(&mut self) {
        self.routes.lock().unwrap().remove(&self.id);
    }
}

fn io_lost() -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::BrokenPipe, lost().message)
}

fn io_error(err: Error) -> std::io::Error {
    let kind = match err.code {
        ErrorCode::RemoteNotFound => std::io::ErrorKind::NotFound,
        ErrorCode::PermissionDenied => std::io::ErrorKind::PermissionDenied,
        _ => std::io::ErrorKind::Other,
    };
    std::io::Error::new(kind, err.message)
}

/// A file read streamed by the keeper: `data` frames, acknowledged one by one so the keeper
/// never runs more than [`WINDOW`] chunks ahead.
struct StreamRead {
    id: u64,
    rx: mpsc::UnboundedReceiver<Frame<Reply>>,
    tx: mpsc::UnboundedSender<Vec<u8>>,
    buf: Vec<u8>,
    pos: usize,
    eof: bool,
    _route: OwnedRoute,
}

impl AsyncRead for StreamRead {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        out: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = &mut *self;
        while this.pos >= this.buf.len() && !this.eof {
            match ready!(this.rx.poll_recv(cx)) {
                None => return Poll::Ready(Err(io_lost())),
                Some(frame) => match into_result(frame) {
                    Err(e) => return Poll::Ready(Err(io_error(e))),
                    Ok(Frame {
                        header: Reply::Data,
                        body,
                        ..
                    }) => {
                        this.buf = body;
                        this.pos = 0;
                        let _ = this.tx.send(wire::encode(this.id, Request::Chunk, &[]));
                    }
                    Ok(_) => this.eof = true,
                },
            }
        }
        let n = out.remaining().min(this.buf.len() - this.pos);
        out.put_slice(&this.buf[this.pos..this.pos + n]);
        this.pos += n;
        Poll::Ready(Ok(()))
    }
}

/// A file write streamed to the keeper: `chunk` frames (each acknowledged with `done`, at most
/// [`WINDOW`] unacknowledged), then `finish` on shutdown, whose answer says the file is whole.
struct StreamWrite {
    id: u64,
    rx: mpsc::UnboundedReceiver<Frame<Reply>>,
    tx: mpsc::UnboundedSender<Vec<u8>>,
    in_flight: usize,
    finished: bool,
    _route: OwnedRoute,
}

impl StreamWrite {
    /// Take one answer: an acknowledged chunk, or the error that ended the write.
    fn poll_ack(&mut self, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match ready!(self.rx.poll_recv(cx)) {
            None => Poll::Ready(Err(io_lost())),
            Some(frame) => match into_result(frame) {
                Err(e) => Poll::Ready(Err(io_error(e))),
                Ok(_) => {
                    self.in_flight = self.in_flight.saturating_sub(1);
                    Poll::Ready(Ok(()))
                }
            },
        }
    }
}

impl AsyncWrite for StreamWrite {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        while self.in_flight >= WINDOW {
            ready!(self.poll_ack(cx))?;
        }
        let n = data.len().min(wire::CHUNK);
        let frame = wire::encode(self.id, Request::Chunk, &data[..n]);
        self.tx.send(frame).map_err(|_| io_lost())?;
        self.in_flight += 1;
        Poll::Ready(Ok(n))
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        if !self.finished {
            let frame = wire::encode(self.id, Request::Finish, &[]);
            self.tx.send(frame).map_err(|_| io_lost())?;
            self.finished = true;
            // The answer to `finish` comes after every chunk's.
            self.in_flight += 1;
        }
        while self.in_flight > 0 {
            ready!(self.poll_ack(cx))?;
        }
        Poll::Ready(Ok(()))
    }
}
