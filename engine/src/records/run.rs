//! The run manifest (`<state_dir>/runs/<run_id>/manifest.json` and the `runs` table), its
//! transfers and its batch job, and the line `run list` shows.

use serde::{Deserialize, Serialize};

use super::session::CommandRecord;
use super::transfer::{ErrorInfo, TransferRecord};
use crate::error::{Error, ErrorCode};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum RunStatus {
    /// Still going (or the process running it was killed).
    Running,
    /// Inputs uploaded, exit code 0, every artifact downloaded.
    Succeeded,
    /// A step failed: non-zero exit, an input or artifact transfer, the session.
    Failed,
    /// The command ran past the run's time limit and was stopped.
    TimedOut,
    /// Cancelled on request (Ctrl-C); the command was stopped.
    Cancelled,
}

impl RunStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            RunStatus::Running => "running",
            RunStatus::Succeeded => "succeeded",
            RunStatus::Failed => "failed",
            RunStatus::TimedOut => "timed_out",
            RunStatus::Cancelled => "cancelled",
        }
    }
}

/// One input or artifact of a run and what happened to it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunTransfer {
    pub local: String,
    pub remote: String,
    /// `pending`, `succeeded`, `partial` (some entries skipped: see the transfer's record),
    /// `failed`, `missing` (artifact not produced), `cancelled`, `skipped` (an earlier step
    /// failed).
    pub status: String,
    pub bytes: u64,
    pub files: u64,
    pub sha256: Option<String>,
    pub transfer_id: Option<String>,
    pub error: Option<ErrorInfo>,
}

impl RunTransfer {
    pub(crate) fn pending(local: &str, remote: &str) -> Self {
        RunTransfer {
            local: local.to_string(),
            remote: remote.to_string(),
            status: "pending".to_string(),
            bytes: 0,
            files: 0,
            sha256: None,
            transfer_id: None,
            error: None,
        }
    }

    pub(crate) fn apply(&mut self, rec: &TransferRecord, err: Option<&Error>) {
        self.transfer_id = Some(rec.transfer_id.clone());
        self.bytes = rec.bytes;
        self.files = rec.files;
        self.sha256 = rec.sha256.clone();
        self.error = rec.error.clone();
        self.status = match err {
            None => rec.status.as_str(),
            Some(e) if e.code == ErrorCode::Cancelled => "cancelled",
            Some(e) if e.code == ErrorCode::RemoteNotFound => "missing",
            Some(_) => "failed",
        }
        .to_string();
    }

    pub(crate) fn fail(&mut self, e: &Error) {
        self.status = "failed".to_string();
        self.error = Some(ErrorInfo::from(e));
    }
}

/// The run manifest: `<state_dir>/runs/<run_id>/manifest.json` and the `runs` table.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunManifest {
    pub run_id: String,
    pub machine_id: String,
    pub session_id: Option<String>,
    pub cwd: String,
    pub command: String,
    pub status: RunStatus,
    pub started_at: String,
    pub ended_at: Option<String>,
    pub exit_code: Option<i32>,
    pub inputs: Vec<RunTransfer>,
    /// The command record (output excerpts, log paths), once the command started.
    pub command_result: Option<CommandRecord>,
    pub artifacts: Vec<RunTransfer>,
    /// The session's destroy result, `{"kept": true, ...}` with `keep_session`, or the error.
    pub destroy_session_result: Option<serde_json::Value>,
    pub keep_session: bool,
    pub timeout_secs: Option<f64>,
    /// Why the run did not succeed.
    pub error: Option<ErrorInfo>,
    pub manifest_file: String,
    /// The session's local logs (command logs, transcript).
    pub log_dir_local: Option<String>,
    /// On a Slurm machine: the batch job that ran the command.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slurm: Option<BatchJob>,
}

/// One line of `run list`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunSummary {
    pub run_id: String,
    pub machine_id: String,
    pub session_id: Option<String>,
    pub cwd: String,
    pub command: String,
    pub status: RunStatus,
    pub started_at: String,
    pub ended_at: Option<String>,
    pub exit_code: Option<i32>,
    pub input_count: usize,
    pub artifact_count: usize,
    pub manifest_file: String,
}

impl From<&RunManifest> for RunSummary {
    fn from(m: &RunManifest) -> Self {
        RunSummary {
            run_id: m.run_id.clone(),
            machine_id: m.machine_id.clone(),
            session_id: m.session_id.clone(),
            cwd: m.cwd.clone(),
            command: m.command.clone(),
            status: m.status,
            started_at: m.started_at.clone(),
            ended_at: m.ended_at.clone(),
            exit_code: m.exit_code,
            input_count: m.inputs.len(),
            artifact_count: m.artifacts.len(),
            manifest_file: m.manifest_file.clone(),
        }
    }
}

/// The batch job of a run, as the manifest records it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BatchJob {
    pub job_id: Option<String>,
    /// Slurm's last word on the job (`COMPLETED`, `FAILED`, `CANCELLED`, `TIMEOUT`, ...).
    pub state: Option<String>,
    pub reason: Option<String>,
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    /// Where the exit code came from: `exit_file` (the job script's own record), `squeue` or
    /// `sacct`.
    pub exit_source: Option<String>,
    /// The run's directory on the login node: job.sh, cmd.sh, stdout, stderr, exit.
    pub remote_dir: String,
    pub stdout_excerpt: String,
    pub stderr_excerpt: String,
    /// The job's stdout and stderr copied home, up to the output cap each.
    pub stdout_local: Option<String>,
    pub stderr_local: Option<String>,
    /// True sizes of the job's stdout and stderr on the login node.
    #[serde(default)]
    pub stdout_bytes: u64,
    #[serde(default)]
    pub stderr_bytes: u64,
    /// The stream is longer than the output cap: the local copy holds only its first part, the
    /// excerpt ends with a note naming the remote file with the rest.
    #[serde(default)]
    pub stdout_capped: bool,
    #[serde(default)]
    pub stderr_capped: bool,
    pub submitted_at: Option<String>,
    /// `squeue`/`sacct` calls made to follow the job.
    pub queries: u32,
}
