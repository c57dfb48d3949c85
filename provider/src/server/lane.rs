//! A lane: engine work that must happen one piece at a time, in the order the host asked for
//! it, without holding up the command loop.
//!
//! The loop pushes a job and goes back to reading stdin at once; the lane's task runs the jobs
//! in order. The provider has two: the session lane (start, resume, turn start-up, cancel,
//! detach, reattach) and the terminal lane (keystrokes and resizes, which must not reorder).

use futures::future::BoxFuture;
use tokio::sync::mpsc;

/// A serial queue of jobs, run by its own task.
#[derive(Clone, Debug)]
pub struct Lane {
    tx: mpsc::UnboundedSender<BoxFuture<'static, ()>>,
}

impl Lane {
    /// Start the lane's task. It ends when every handle is dropped.
    pub fn spawn() -> Lane {
        let (tx, mut rx) = mpsc::unbounded_channel::<BoxFuture<'static, ()>>();
        tokio::spawn(async move {
            while let Some(job) = rx.recv().await {
                job.await;
            }
        });
        Lane { tx }
    }

    /// Completes once every job queued before this call has run (or the lane stopped).
    pub async fn drained(&self) {
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        self.push(async move {
            let _ = tx.send(());
        });
        let _ = rx.await;
    }

    /// Queue `job` behind what is already queued.
    pub fn push(&self, job: impl std::future::Future<Output = ()> + Send + 'static) {
        let _ = self.tx.send(Box::pin(job));
    }
}
