//! The engine's side of Slurm machines (docs/slurm.md): a session's allocation (obtained before
//! its shell starts, released by destroy), the explanation of a session lost to an ended
//! allocation, and `run once` as a batch job.

use std::sync::Arc;
use std::time::Duration;

use super::{Engine, SessionRecord, SessionStatus};
use crate::error::{Error, ErrorCode, Result};
use crate::remote::Remote;
use crate::slurm::{self, AllocRequest, Progress, ops};
use crate::tmux::SessionPaths;
use crate::util::now_rfc3339;

/// Without `--timeout`, how long a session create waits for a pending allocation.
pub const DEFAULT_ALLOCATION_BOUND: Duration = Duration::from_secs(600);

/// A user's Slurm arguments (one shell-quoted string, e.g. `--partition=gpu --time=60`) as
/// words; refuses what is not an option and the options the engine sets itself.
pub fn split_slurm_args(text: &str) -> Result<Vec<String>> {
    slurm::split_args(text)
}

/// How a session is created beyond machine and cwd.
#[derive(Clone, Default)]
pub struct CreateOptions {
    /// Slurm arguments added to the machine's defaults (only for a Slurm machine).
    pub slurm_args: Vec<String>,
    /// Give up a pending allocation after this long (default [`DEFAULT_ALLOCATION_BOUND`]).
    pub allocation_bound: Option<Duration>,
    /// Told while an allocation is pending (job id, state, Slurm's reason).
    pub progress: Option<Progress>,
}

impl std::fmt::Debug for CreateOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CreateOptions")
            .field("slurm_args", &self.slurm_args)
            .field("allocation_bound", &self.allocation_bound)
            .finish()
    }
}

impl Engine {
    /// The transport of a session's tmux driver: `login` (the machine's), or for a session in a
    /// Slurm allocation its node's, kept per job while its link is up, so that its long-lived
    /// control processes serve many calls.
    pub(super) fn session_transport(&self, rec: &SessionRecord, login: Arc<Remote>) -> Arc<Remote> {
        match &rec.slurm_job_id {
            Some(job) => self.nodes.get(&login, job),
            None => login,
        }
    }

    /// The allocation a new session's shell will run in: its job id.
    pub(super) async fn allocate_for_session(
        &self,
        transport: &Remote,
        paths: &SessionPaths,
        session_id: &str,
        defaults: &[String],
        opts: &CreateOptions,
    ) -> Result<String> {
        slurm::check_words(&opts.slurm_args)?;
        transport.create_dir_all(&paths.state_dir, 0o700).await?;
        let args = slurm::merged(defaults, &opts.slurm_args);
        let name = format!("rr-{session_id}");
        let req = AllocRequest {
            dir: &paths.state_dir,
            job_name: &name,
            args: &args,
            bound: opts.allocation_bound.unwrap_or(DEFAULT_ALLOCATION_BOUND),
            progress: opts.progress.clone(),
        };
        slurm::allocate(transport, &req).await
    }

    /// Release a session's allocation (`scancel`); a job already over is fine.
    pub(super) async fn release_allocation(&self, rec: &SessionRecord) -> Result<()> {
        let Some(job) = &rec.slurm_job_id else {
            return Ok(());
        };
        let transport = self.connector.connect(&rec.machine_id).await?;
        ops::cancel(transport.as_ref(), None, Some(job)).await
    }

    /// The error mapping at the engine's edge for work on a session: `work`'s `session_lost`
    /// explained by [`Self::explain_lost`], anything else as it is.
    pub(super) async fn explained<T>(
        &self,
        session_id: &str,
        work: impl std::future::Future<Output = Result<T>>,
    ) -> Result<T> {
        match work.await {
            Err(e) => Err(self.explain_lost(session_id, e).await),
            ok => ok,
        }
    }

    /// A `session_lost` error of a session in an allocation, explained: when the job ended the
    /// error is `slurm_job_ended` with the job, its state and Slurm's reason (also kept as the
    /// session's status message); when the job still runs (the shell died on its own) the
    /// allocation is released. Other errors pass unchanged.
    pub(crate) async fn explain_lost(&self, session_id: &str, e: Error) -> Error {
        if !e.code.is_session_lost() {
            return e;
        }
        let Ok(rec) = self.load_session(session_id) else {
            return e;
        };
        let Some(job) = rec.slurm_job_id.clone() else {
            return e;
        };
        if let Some(message) = rec.status_message.as_deref().filter(|m| is_slurm_reason(m)) {
            return Error::new(ErrorCode::SlurmJobEnded, lost_message(&rec, message));
        }
        let Ok(transport) = self.connector.connect(&rec.machine_id).await else {
            return e;
        };
        let info = ops::query(transport.as_ref(), std::slice::from_ref(&job))
            .await
            .ok()
            .and_then(|jobs| jobs.into_iter().find(|j| j.job_id == job));
        let why = match &info {
            Some(info) if !info.is_finished() && info.state != "COMPLETING" => {
                // The shell is gone but the allocation is not: do not leave it running.
                let _ = ops::cancel(transport.as_ref(), None, Some(&job)).await;
                return e;
            }
            Some(info) => format!("Slurm job {job} ended: {}", info.describe()),
            None => format!("Slurm job {job} ended (Slurm no longer knows it)"),
        };
        let _ = self.set_lost(session_id, &why);
        Error::new(ErrorCode::SlurmJobEnded, lost_message(&rec, &why))
    }

    /// Mark a session lost with `why`, replacing a generic reason (not a destroyed session).
    fn set_lost(&self, session_id: &str, why: &str) -> Result<()> {
        let mut rec = self.load_session(session_id)?;
        if rec.status == SessionStatus::Destroyed {
            return Ok(());
        }
        if rec.status == SessionStatus::Active {
            rec.ended_at = Some(now_rfc3339());
        }
        rec.status = SessionStatus::Lost;
        rec.status_message = Some(why.to_string());
        self.save_session(&rec)
    }
}

/// Whether a session's status message is an ended job's (written by [`Engine::explain_lost`]).
pub(super) fn is_slurm_reason(message: &str) -> bool {
    message.starts_with("Slurm job ")
}

fn lost_message(rec: &SessionRecord, why: &str) -> String {
    format!(
        "session {} is lost: its allocation ended ({why}); its records and logs are kept; create \
         a new session to continue (with a longer --time among its Slurm arguments if the time limit ended it)",
        rec.session_id
    )
}
