//! The single writer that owns stdout.
//!
//! Every event of the provider goes through one channel to one task, which validates it with
//! the protocol crate and writes it as one line, flushed. Nothing else in the process writes to
//! stdout (logs go to stderr), so the host never reads a torn or foreign line.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use remote_runner_protocol::{Event, LineWriter};
use tokio::io::AsyncWrite;
use tokio::sync::{Notify, mpsc};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// A cheap, cloneable handle for sending events.
#[derive(Clone, Debug)]
pub struct Out {
    tx: mpsc::UnboundedSender<(Event, usize)>,
    queued: Arc<Queued>,
}

/// Bytes of output text queued and not yet written, and a wake-up when some are written.
#[derive(Debug, Default)]
struct Queued {
    bytes: AtomicUsize,
    written: Notify,
}

/// The chat's calls send their events through the same writer.
impl crate::chat::EventSink for Out {
    fn send(&self, event: Event) {
        Out::send(self, event);
    }
}

impl Out {
    /// Queue an event. After the writer has stopped (stdout closed), events are dropped.
    pub fn send(&self, event: Event) {
        self.send_sized(event, 0);
    }

    /// Queue an event carrying `bytes` of output text (counted by [`Out::room`]).
    pub fn send_sized(&self, event: Event, bytes: usize) {
        self.queued.bytes.fetch_add(bytes, Ordering::SeqCst);
        if self.tx.send((event, bytes)).is_err() {
            self.queued.bytes.fetch_sub(bytes, Ordering::SeqCst);
        }
    }

    /// Wait until at most `limit` bytes of output text are queued: a host that reads slowly
    /// slows the producer down instead of growing the provider's memory. Returns at once once
    /// the writer has stopped.
    pub async fn room(&self, limit: usize) {
        loop {
            let written = self.queued.written.notified();
            tokio::pin!(written);
            written.as_mut().enable();
            if self.queued.bytes.load(Ordering::SeqCst) <= limit || self.tx.is_closed() {
                return;
            }
            written.await;
        }
    }
}

/// The running writer task.
#[derive(Debug)]
pub struct Writer {
    task: JoinHandle<()>,
    stop: CancellationToken,
}

impl Writer {
    /// Write what is already queued, then stop, even while background tasks still hold an
    /// [`Out`]. Bounded, so a host that stopped reading cannot keep the process alive.
    pub async fn finish(self, bound: std::time::Duration) {
        self.stop.cancel();
        let _ = tokio::time::timeout(bound, self.task).await;
    }
}

/// Start the writer task on `sink`. The task ends when every [`Out`] is dropped or
/// [`Writer::finish`] is called, after writing everything queued, or when the sink fails (the
/// host closed our stdout).
pub fn spawn<W>(sink: W) -> (Out, Writer)
where
    W: AsyncWrite + Unpin + Send + 'static,
{
    let (tx, mut rx) = mpsc::unbounded_channel::<(Event, usize)>();
    let queued = Arc::new(Queued::default());
    let counter = queued.clone();
    let stop = CancellationToken::new();
    let stopping = stop.clone();
    let task = tokio::spawn(async move {
        let mut writer = LineWriter::new(sink);
        loop {
            let event = tokio::select! {
                biased;
                event = rx.recv() => match event {
                    Some(event) => event,
                    None => break,
                },
                _ = stopping.cancelled() => match rx.try_recv() {
                    Ok(event) => event,
                    Err(_) => break,
                },
            };
            let (event, bytes) = event;
            let event = match event.validate() {
                Ok(()) => event,
                Err(err) => {
                    // A bug in this provider: never put an invalid line on the wire.
                    tracing::error!(event = event.type_name(), %err, "refusing to write an invalid event");
                    match super::failure::invalid_event(&event, &err.to_string()) {
                        Some(replacement) => replacement,
                        None => continue,
                    }
                }
            };
            let sent = writer.send_event(&event).await;
            counter.bytes.fetch_sub(bytes, Ordering::SeqCst);
            counter.written.notify_waiters();
            if let Err(err) = sent {
                tracing::warn!(%err, "stdout closed; stopping the writer");
                break;
            }
        }
        // Producers waiting for room go on (their events are dropped from now on).
        rx.close();
        counter.written.notify_waiters();
    });
    (Out { tx, queued }, Writer { task, stop })
}
