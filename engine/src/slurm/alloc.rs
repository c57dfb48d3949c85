//! Obtaining an allocation for a session: `salloc --no-shell` on the login node, waited for in
//! bounded slices (one remote call each, one `squeue` for the state and reason), reported while
//! pending, cancelled when the wait is given up.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::ops::{self, AllocReply};
use crate::error::{Error, ErrorCode, Hint, Result};
use crate::remote::Remote;

/// Told about a pending allocation: a line such as `Slurm job 12: PENDING (reason Resources)`.
pub type Progress = Arc<dyn Fn(&str) + Send + Sync>;

/// Longest single remote wait while pending: one `squeue` per slice per session, never one per
/// second.
const SLICE: Duration = Duration::from_secs(5);
/// The first wait: an idle cluster grants in milliseconds.
const FIRST: Duration = Duration::from_secs(2);

/// What to allocate.
pub struct AllocRequest<'a> {
    /// A directory of the session's on the login node (salloc's files live there).
    pub dir: &'a str,
    pub job_name: &'a str,
    pub args: &'a [String],
    /// Give up (and cancel the job) when it is still pending after this long.
    pub bound: Duration,
    pub progress: Option<Progress>,
}

/// The job id of a granted allocation, or `slurm_allocation_timeout` (the job cancelled),
/// `slurm_rejected` / `slurm_unavailable` (salloc refused).
pub async fn allocate(t: &Remote, req: &AllocRequest<'_>) -> Result<String> {
    let started = Instant::now();
    let first = FIRST.min(req.bound);
    // salloc's own bound a little past ours: if the engine dies, Slurm still gives up.
    let immediate = req.bound + Duration::from_secs(5);
    let mut reply = ops::alloc_start(t, req.dir, req.job_name, req.args, immediate, first).await?;
    let mut last_said = String::new();
    loop {
        match reply {
            AllocReply::Granted(job) => return Ok(job),
            AllocReply::Failed { status, job, said } => {
                if let Some(job) = &job {
                    let _ = ops::cancel(t, None, Some(job)).await;
                }
                let said = if said.trim().is_empty() {
                    format!("salloc exited with status {status}")
                } else {
                    said
                };
                return Err(ops::rejected("salloc", &said));
            }
            AllocReply::Pending { job, state, reason } => {
                let line = pending_line(job.as_deref(), state.as_deref(), reason.as_deref());
                if line != last_said {
                    if let Some(p) = &req.progress {
                        p(&line);
                    }
                    last_said = line.clone();
                }
                let spent = started.elapsed();
                if spent >= req.bound {
                    let _ = ops::cancel(t, Some(req.dir), job.as_deref()).await;
                    return Err(Error::new(
                        ErrorCode::SlurmAllocationTimeout,
                        format!(
                            "{line} after {} s: the wait was given up and the job cancelled; \
                             try again later",
                            req.bound.as_secs()
                        ),
                    )
                    .with_hint(Hint::ShrinkOrWaitLonger));
                }
                let wait = SLICE.min(req.bound - spent).max(Duration::from_secs(1));
                reply = match ops::alloc_wait(t, req.dir, wait).await {
                    Ok(r) => r,
                    Err(e) => {
                        let _ = ops::cancel(t, Some(req.dir), job.as_deref()).await;
                        return Err(e);
                    }
                };
            }
        }
    }
}

fn pending_line(job: Option<&str>, state: Option<&str>, reason: Option<&str>) -> String {
    let job = job.map_or_else(
        || "Slurm job (no id yet)".to_string(),
        |j| format!("Slurm job {j}"),
    );
    match (state, reason) {
        (Some(s), Some(r)) => format!("{job}: {s} (reason {r})"),
        (Some(s), None) => format!("{job}: {s}"),
        _ => format!("{job}: PENDING"),
    }
}
