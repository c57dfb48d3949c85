//! Run once: a closed loop above sessions and files. Create a session, upload the
//! inputs, run the command (wait mode) under an optional time limit, download the artifacts,
//! write the manifest, destroy the session unless asked to keep it. Every log is kept.
//!
//! The outcome is a field of the manifest, never an error path: a non-zero exit is `failed`
//! (artifacts that exist are still downloaded), a time limit is `timed_out`, a cancellation is
//! `cancelled` (the remote command is stopped in both cases), and the manifest is written in
//! every case, first with status `running` so that even a killed caller leaves a trace.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

use super::transfer::{ErrorInfo, TransferDirection, TransferOptions, TransferPlace};
use super::{CommandRecord, CommandStatus, Engine, ExecRequest};
use crate::error::{Error, ErrorCode, Hint, Result};
use crate::machine::Machine;
pub use crate::records::run::{RunManifest, RunStatus, RunSummary, RunTransfer};
use crate::store::{self, ensure_private_dir, set_private_mode};
use crate::util::{new_id, now_rfc3339};

/// What to run.
#[derive(Debug, Clone)]
pub struct RunRequest {
    pub machine: Machine,
    /// Session directory (default: the machine's `default_cwd`).
    pub cwd: Option<String>,
    /// `(local, remote)` pairs uploaded before the command, in order.
    pub inputs: Vec<(String, String)>,
    pub command: String,
    /// `(remote, local)` pairs downloaded after the command, in order.
    pub artifacts: Vec<(String, String)>,
    /// Leave the session active afterwards.
    pub keep_session: bool,
    /// Bound on the command's run time; on expiry it is stopped and the run is `timed_out`.
    pub timeout: Option<Duration>,
    /// Verify transfers (sha256 on both ends).
    pub verify: bool,
    /// On a Slurm machine: `sbatch` arguments added to the machine's defaults.
    pub slurm_args: Vec<String>,
}

/// How long one bounded wait for the command lasts before checking cancellation and deadline
/// again (cancellation also interrupts a wait at once).
pub(super) const WAIT_SLICE: Duration = Duration::from_secs(10);

/// How the command step ended.
enum CommandEnd {
    Finished,
    TimedOut,
    Cancelled,
}

impl Engine {
    /// Run a command once on a fresh session (see the module docs). `Err` only when the request
    /// is invalid; every other outcome is the returned manifest's `status` (also stored and
    /// written to `manifest.json`).
    pub async fn run_once(
        &self,
        req: RunRequest,
        cancel: CancellationToken,
    ) -> Result<RunManifest> {
        if req.command.trim().is_empty() {
            return Err(Error::invalid(
                "the command is empty; pass the shell text to run with --cmd",
            ));
        }
        for (a, b) in req.inputs.iter().chain(req.artifacts.iter()) {
            if a.is_empty() || b.is_empty() {
                return Err(Error::invalid(
                    "an --input LOCAL=REMOTE or --artifact REMOTE=LOCAL pair has an empty side",
                ));
            }
        }
        if let Some(cwd) = &req.cwd
            && !cwd.starts_with('/')
        {
            return Err(Error::invalid(format!(
                "--cwd {cwd:?} must be an absolute path on the machine"
            )));
        }
        let run_id = new_id("run");
        let run_dir = self.state_dir.join("runs").join(&run_id);
        ensure_private_dir(&run_dir)?;
        let cwd = req
            .cwd
            .clone()
            .unwrap_or_else(|| req.machine.default_cwd.clone());
        let mut m = RunManifest {
            run_id: run_id.clone(),
            machine_id: req.machine.machine_id.clone(),
            session_id: None,
            cwd,
            command: req.command.clone(),
            status: RunStatus::Running,
            started_at: now_rfc3339(),
            ended_at: None,
            exit_code: None,
            inputs: req
                .inputs
                .iter()
                .map(|(l, r)| RunTransfer::pending(l, r))
                .collect(),
            command_result: None,
            artifacts: req
                .artifacts
                .iter()
                .map(|(r, l)| RunTransfer::pending(l, r))
                .collect(),
            destroy_session_result: None,
            keep_session: req.keep_session,
            timeout_secs: req.timeout.map(|t| t.as_secs_f64()),
            error: None,
            manifest_file: run_dir.join("manifest.json").to_string_lossy().into_owned(),
            log_dir_local: None,
            slurm: None,
        };
        self.save_manifest(&m)?;
        let outcome = self.run_steps(&req, &cancel, &mut m).await;
        if let Err(e) = outcome {
            m.error.get_or_insert_with(|| ErrorInfo::from(&e));
            if m.status == RunStatus::Running {
                m.status = if e.code == ErrorCode::Cancelled {
                    RunStatus::Cancelled
                } else {
                    RunStatus::Failed
                };
            }
        }
        for t in m.inputs.iter_mut().chain(m.artifacts.iter_mut()) {
            if t.status == "pending" {
                t.status = "skipped".to_string();
            }
        }
        if let Some(session_id) = m.session_id.clone() {
            m.destroy_session_result =
                Some(self.finish_session(&session_id, req.keep_session).await);
        }
        m.ended_at = Some(now_rfc3339());
        self.save_manifest(&m)?;
        Ok(m)
    }

    /// Session, inputs, command, artifacts. Sets `m.status` for the command's outcome; an `Err`
    /// is a step that stopped the run.
    async fn run_steps(
        &self,
        req: &RunRequest,
        cancel: &CancellationToken,
        m: &mut RunManifest,
    ) -> Result<()> {
        check_cancel(cancel)?;
        match req.machine.scheduler.slurm_args() {
            Some(defaults) => return self.run_batch(req, defaults, cancel, m).await,
            None if !req.slurm_args.is_empty() => {
                return Err(Error::invalid(format!(
                    "Slurm arguments are for machines scheduled by Slurm, and machine {} has \
                     no scheduler",
                    req.machine.machine_id
                ))
                .with_hint(Hint::ConfigureSlurm {
                    machine_id: req.machine.machine_id.clone(),
                }));
            }
            None => {}
        }
        let session = self
            .create_session(&req.machine, req.cwd.as_deref())
            .await?;
        m.session_id = Some(session.session_id.clone());
        m.cwd = session.cwd.clone();
        m.log_dir_local = Some(session.log_dir_local.clone());
        self.save_manifest(m)?;
        let place = TransferPlace {
            machine_id: &session.machine_id,
            session_id: Some(&session.session_id),
            cwd: &session.cwd,
        };
        self.upload_inputs(place, req, cancel, m).await?;
        self.save_manifest(m)?;
        let end = self
            .run_command(&session.session_id, req, cancel, m)
            .await?;
        match end {
            CommandEnd::Cancelled => {
                m.status = RunStatus::Cancelled;
                m.error.get_or_insert(ErrorInfo::from(&Error::new(
                    ErrorCode::Cancelled,
                    "the run was cancelled; the command was stopped",
                )));
                return Ok(());
            }
            CommandEnd::TimedOut => {
                m.status = RunStatus::TimedOut;
                m.error.get_or_insert(ErrorInfo::from(&Error::new(
                    ErrorCode::Timeout,
                    format!(
                        "the command ran longer than the run's time limit ({} s) and was stopped",
                        req.timeout.map(|t| t.as_secs_f64()).unwrap_or_default()
                    ),
                )));
            }
            CommandEnd::Finished => {}
        }
        self.save_manifest(m)?;
        // Artifacts are fetched whatever the exit code: the ones that exist are kept.
        self.download_artifacts(place, req, cancel, m).await;
        self.settle(cancel, m);
        Ok(())
    }

    /// The run's outcome once the command and the artifacts are done (unless already set).
    pub(super) fn settle(&self, cancel: &CancellationToken, m: &mut RunManifest) {
        if m.status == RunStatus::Running && cancel.is_cancelled() {
            m.status = RunStatus::Cancelled;
            m.error = Some(ErrorInfo::from(&Error::new(
                ErrorCode::Cancelled,
                "the run was cancelled while downloading artifacts",
            )));
        }
        if m.status == RunStatus::Running {
            let exit_ok = m.exit_code == Some(0);
            let artifacts_ok = m.artifacts.iter().all(|a| a.status == "succeeded");
            m.status = if exit_ok && artifacts_ok {
                RunStatus::Succeeded
            } else {
                RunStatus::Failed
            };
            if !exit_ok {
                m.error = Some(ErrorInfo::from(&Error::new(
                    ErrorCode::RemoteError,
                    format!(
                        "the command exited with code {}; its output is in the command logs",
                        m.exit_code
                            .map(|c| c.to_string())
                            .unwrap_or_else(|| "unknown".into())
                    ),
                )));
            } else if !artifacts_ok {
                let bad: Vec<&str> = m
                    .artifacts
                    .iter()
                    .filter(|a| a.status != "succeeded")
                    .map(|a| a.remote.as_str())
                    .collect();
                m.error = Some(ErrorInfo::from(&Error::new(
                    ErrorCode::RemoteError,
                    format!(
                        "artifact(s) not downloaded: {}; see each artifact's error",
                        bad.join(", ")
                    ),
                )));
            }
        }
    }

    /// Upload the run's inputs, in order, to `place`; the first failure stops the run.
    pub(super) async fn upload_inputs(
        &self,
        place: TransferPlace<'_>,
        req: &RunRequest,
        cancel: &CancellationToken,
        m: &mut RunManifest,
    ) -> Result<()> {
        let options = transfer_options(req, cancel);
        for (i, (local, remote)) in req.inputs.iter().enumerate() {
            let slot = &mut m.inputs[i];
            let pair = (local.as_str(), remote.as_str());
            let direction = TransferDirection::Put;
            if let Some(e) = self
                .run_transfer(place, req, &options, direction, pair, slot)
                .await?
            {
                return Err(step_error(
                    e,
                    &format!("input {local} could not be uploaded"),
                ));
            }
        }
        Ok(())
    }

    /// Download the run's artifacts from `place`, each whatever became of the others.
    pub(super) async fn download_artifacts(
        &self,
        place: TransferPlace<'_>,
        req: &RunRequest,
        cancel: &CancellationToken,
        m: &mut RunManifest,
    ) {
        let options = transfer_options(req, cancel);
        for (i, (remote, local)) in req.artifacts.iter().enumerate() {
            if cancel.is_cancelled() {
                break;
            }
            let slot = &mut m.artifacts[i];
            let pair = (local.as_str(), remote.as_str());
            let direction = TransferDirection::Get;
            // Each artifact is tried whatever became of the others: its outcome is in `slot`.
            let _ = self
                .run_transfer(place, req, &options, direction, pair, slot)
                .await;
        }
    }

    /// One transfer of the run between `local` and `remote` at `place`, its outcome recorded in
    /// `slot`: `Ok(Some(_))` when the transfer failed, `Err` when it could not start.
    async fn run_transfer(
        &self,
        place: TransferPlace<'_>,
        req: &RunRequest,
        options: &TransferOptions,
        direction: TransferDirection,
        (local, remote): (&str, &str),
        slot: &mut RunTransfer,
    ) -> Result<Option<Error>> {
        let res = self
            .transfer_at(
                place,
                &req.machine.path_mappings,
                direction,
                &PathBuf::from(local),
                remote,
                options.clone(),
            )
            .await;
        match res {
            Ok((rec, err)) => {
                slot.apply(&rec, err.as_ref());
                Ok(err)
            }
            Err(e) => {
                slot.fail(&e);
                Err(e)
            }
        }
    }

    /// Start the command in the session shell and wait for it in slices, stopping it on the
    /// deadline or on cancellation. Fills `command_result` and `exit_code`.
    async fn run_command(
        &self,
        session_id: &str,
        req: &RunRequest,
        cancel: &CancellationToken,
        m: &mut RunManifest,
    ) -> Result<CommandEnd> {
        check_cancel(cancel)?;
        let started = Instant::now();
        let left = |now: Instant| req.timeout.map(|t| t.saturating_sub(now - started));
        let first = left(Instant::now())
            .unwrap_or(WAIT_SLICE)
            .min(Duration::from_secs(1));
        let started_cmd = self
            .exec(
                session_id,
                &req.command,
                ExecRequest::wait().with_timeout(first),
            )
            .await;
        let mut rec = match started_cmd {
            Ok(rec) => rec,
            Err(e) => self.ended_with_shell(session_id, None, e)?,
        };
        let end = loop {
            m.command_result = Some(rec.clone());
            if rec.status.is_final() {
                break CommandEnd::Finished;
            }
            let remaining = left(Instant::now());
            if remaining.is_some_and(|r| r.is_zero()) {
                break CommandEnd::TimedOut;
            }
            let slice = remaining.unwrap_or(WAIT_SLICE).min(WAIT_SLICE);
            if rec.status == CommandStatus::WaitingInput {
                // A wait returns at once while the command waits for input (someone may answer
                // it in the session's terminal): look again in a second, not in a loop.
                tokio::select! {
                    _ = tokio::time::sleep(slice.min(Duration::from_secs(1))) => {}
                    _ = cancel.cancelled() => break CommandEnd::Cancelled,
                }
            }
            tokio::select! {
                r = self.command_wait(session_id, &rec.command_id, slice) => {
                    rec = match r {
                        Ok(rec) => rec,
                        Err(e) => self.ended_with_shell(session_id, Some(&rec.command_id), e)?,
                    };
                }
                _ = cancel.cancelled() => break CommandEnd::Cancelled,
            }
        };
        if !matches!(end, CommandEnd::Finished) {
            match self.command_stop(session_id, &rec.command_id).await {
                Ok(stopped) => rec = stopped,
                // The outcome stays what it is (cancelled / timed out); the error says the
                // command may still run.
                Err(e) => {
                    let step = step_error(
                        e,
                        &format!(
                            "command {} could not be stopped and may still run",
                            rec.command_id
                        ),
                    )
                    .with_hint(Hint::StopCommand {
                        session_id: session_id.to_string(),
                        command_id: rec.command_id.clone(),
                    });
                    m.error = Some(ErrorInfo::from(&step));
                }
            }
            if matches!(end, CommandEnd::TimedOut) && rec.status == CommandStatus::Stopped {
                rec.status = CommandStatus::TimedOut;
                self.save_command(&rec)?;
            }
        }
        m.exit_code = rec.exit_code;
        m.command_result = Some(rec);
        Ok(end)
    }

    /// A command that ended the session shell (`exit 3`) loses the session, but in a run the
    /// session is disposable: its recorded exit code is the command's result. Other errors stay
    /// errors.
    fn ended_with_shell(
        &self,
        session_id: &str,
        command_id: Option<&str>,
        e: Error,
    ) -> Result<CommandRecord> {
        if e.code != ErrorCode::SessionLost {
            return Err(e);
        }
        let rec = self
            .command_list(session_id)?
            .into_iter()
            .rfind(|c| command_id.is_none_or(|id| c.command_id == id));
        match rec {
            Some(rec) if rec.status == CommandStatus::Lost && rec.exit_code.is_some() => Ok(rec),
            _ => Err(e),
        }
    }

    /// Destroy the run's session (or say it was kept); never fails the run.
    async fn finish_session(&self, session_id: &str, keep: bool) -> serde_json::Value {
        if keep {
            return serde_json::json!({
                "session_id": session_id,
                "kept": true,
                "status": "active",
            });
        }
        match self.destroy(session_id).await {
            Ok(d) => serde_json::to_value(d).unwrap_or_default(),
            Err(e) => serde_json::json!({
                "session_id": session_id,
                "error": ErrorInfo::from(&e),
            }),
        }
    }

    /// Write the manifest file (0600, atomically) and its store row.
    pub(super) fn save_manifest(&self, m: &RunManifest) -> Result<()> {
        let path = PathBuf::from(&m.manifest_file);
        let dir = path
            .parent()
            .unwrap_or(self.state_dir.as_path())
            .to_path_buf();
        ensure_private_dir(&dir)?;
        let json = serde_json::to_vec_pretty(m)
            .map_err(|e| Error::internal(format!("cannot encode the run manifest: {e}")))?;
        let tmp = dir.join(format!(
            ".manifest.json.tmp-{}",
            uuid::Uuid::new_v4().simple()
        ));
        std::fs::write(&tmp, &json)
            .map_err(|e| Error::io(format!("cannot write {}", tmp.display()), &e))?;
        set_private_mode(&tmp)?;
        std::fs::rename(&tmp, &path).map_err(|e| {
            let _ = std::fs::remove_file(&tmp);
            Error::io(format!("cannot write {}", path.display()), &e)
        })?;
        self.with_store(|s| store::runs::upsert(s, m))
    }

    /// Summaries of every run, oldest first.
    pub fn run_list(&self) -> Result<Vec<RunSummary>> {
        let all = self.with_store(store::runs::list)?;
        Ok(all.iter().map(RunSummary::from).collect())
    }

    /// The full manifest of a run.
    pub fn run_show(&self, run_id: &str) -> Result<RunManifest> {
        self.with_store(|s| store::runs::get(s, run_id))?
            .ok_or_else(|| {
                Error::new(ErrorCode::UnknownRun, format!("no run {run_id}"))
                    .with_hint(Hint::ListRuns)
            })
    }
}

pub(super) fn check_cancel(cancel: &CancellationToken) -> Result<()> {
    if cancel.is_cancelled() {
        return Err(Error::new(ErrorCode::Cancelled, "the run was cancelled"));
    }
    Ok(())
}

fn transfer_options(req: &RunRequest, cancel: &CancellationToken) -> TransferOptions {
    TransferOptions {
        verify: req.verify,
        progress: None,
        cancel: cancel.clone(),
    }
}

/// Keep the code, say which step it was.
fn step_error(mut e: Error, step: &str) -> Error {
    e.message = format!("{step}: {}", e.message);
    e
}
