//! The one writer of `code serve`'s stdout: every line out is queued to one task, which writes
//! it whole, so lines of concurrent runs never interleave. Nothing else in `serve` writes to
//! stdout.

use tokio::io::AsyncWriteExt;
use tokio::sync::mpsc;

use super::wire::Outgoing;

/// A cheap, cloneable handle for queueing lines.
#[derive(Clone)]
pub(super) struct Out(mpsc::UnboundedSender<String>);

impl Out {
    /// Queue a message. After the writer stopped (stdout closed), messages are dropped.
    pub(super) fn send(&self, msg: &Outgoing) {
        let line = serde_json::to_string(msg).expect("outgoing messages serialize");
        let _ = self.0.send(line);
    }

    /// Queue an `error` reply with the stable snake_case `code`.
    pub(super) fn error(&self, run_id: Option<&str>, code: &str, message: &str) {
        self.send(&Outgoing::Error {
            run_id,
            code,
            message,
        });
    }
}

/// Start the writer task. It ends once every [`Out`] is dropped, after writing everything
/// queued, or when stdout fails.
pub(super) fn spawn() -> (Out, tokio::task::JoinHandle<()>) {
    let (tx, mut rx) = mpsc::unbounded_channel::<String>();
    let task = tokio::spawn(async move {
        let mut stdout = tokio::io::BufWriter::new(tokio::io::stdout());
        while let Some(line) = rx.recv().await {
            if stdout.write_all(line.as_bytes()).await.is_err()
                || stdout.write_all(b"\n").await.is_err()
            {
                return;
            }
            // Flush once nothing else is queued: a burst goes out in one write.
            if rx.is_empty() && stdout.flush().await.is_err() {
                return;
            }
        }
        let _ = stdout.flush().await;
    });
    (Out(tx), task)
}
