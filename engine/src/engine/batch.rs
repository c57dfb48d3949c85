//! `run once` on a Slurm machine: a batch job (docs/slurm.md). Inputs go up through the login
//! node (the file system is shared), the command is submitted with `sbatch`, followed with one
//! `squeue` per poll (sparser as it runs), its exit code is the engine's own exit file (written
//! by the job script after the command), else Slurm's (`squeue` within MinJobAge, else `sacct`),
//! its output is copied home, the artifacts are fetched, and the job id is in the manifest.
//! `--timeout` and cancellation end the job with `scancel`.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

use super::run::{RunManifest, RunRequest, RunStatus, check_cancel};
use super::transfer::{ErrorInfo, TransferPlace};
use super::{Engine, output};
use crate::error::{Error, ErrorCode, Result};
pub use crate::records::run::BatchJob;
use crate::remote;
use crate::remote::Remote;
use crate::slurm::{self, JobInfo, ops};
use crate::transport::shell_quote;
use crate::util::{now_rfc3339, printable_excerpt};

/// Polling a batch job: the first look soon (a short job is over in a second), then sparser, up
/// to this: a job costs the controller one `squeue` per 10 s at most.
const POLLS: &[u64] = &[300, 700, 1000, 2000, 3000, 5000];
const MAX_POLL: Duration = Duration::from_secs(10);

/// How following the job ended.
enum Followed {
    Ended(Option<JobInfo>),
    TimedOut,
    Cancelled,
}

impl Engine {
    /// The Slurm half of [`Engine::run_once`]: inputs, `sbatch`, follow, output, artifacts.
    pub(super) async fn run_batch(
        &self,
        req: &RunRequest,
        defaults: &[String],
        cancel: &CancellationToken,
        m: &mut RunManifest,
    ) -> Result<()> {
        slurm::check_words(&req.slurm_args)?;
        let transport = self.connector.connect(&req.machine.machine_id).await?;
        let t = transport.as_ref();
        let tools = remote::prepare(t).await?;
        let dir = format!("{}/runs/{}", tools.root, m.run_id);
        t.create_dir_all(&dir, 0o700).await?;
        m.slurm = Some(BatchJob {
            job_id: None,
            state: None,
            reason: None,
            exit_code: None,
            signal: None,
            exit_source: None,
            remote_dir: dir.clone(),
            stdout_excerpt: String::new(),
            stderr_excerpt: String::new(),
            stdout_local: None,
            stderr_local: None,
            stdout_bytes: 0,
            stderr_bytes: 0,
            stdout_capped: false,
            stderr_capped: false,
            submitted_at: None,
            queries: 0,
        });
        self.save_manifest(m)?;
        let cwd = m.cwd.clone();
        let place = TransferPlace {
            machine_id: &req.machine.machine_id,
            session_id: None,
            cwd: &cwd,
        };
        self.upload_inputs(place, req, cancel, m).await?;
        check_cancel(cancel)?;
        t.write_file(&format!("{dir}/cmd.sh"), req.command.as_bytes(), 0o600)
            .await?;
        let args = slurm::merged(defaults, &req.slurm_args);
        let name = format!("rr-{}", m.run_id);
        let job = ops::submit(t, &dir, &name, &cwd, &args, &job_script(&dir)).await?;
        if let Some(b) = m.slurm.as_mut() {
            b.job_id = Some(job.clone());
            b.submitted_at = Some(now_rfc3339());
        }
        self.save_manifest(m)?;
        let followed = self.follow(t, &job, req.timeout, cancel, m).await?;
        let info = match followed {
            Followed::Ended(info) => info,
            Followed::TimedOut | Followed::Cancelled => {
                let _ = ops::cancel(t, None, Some(&job)).await;
                let timed_out = matches!(followed, Followed::TimedOut);
                m.status = if timed_out {
                    RunStatus::TimedOut
                } else {
                    RunStatus::Cancelled
                };
                m.error = Some(ErrorInfo::from(&if timed_out {
                    Error::new(
                        ErrorCode::Timeout,
                        format!(
                            "Slurm job {job} ran (or waited in the queue) longer than the run's \
                             time limit ({} s) and was cancelled (scancel)",
                            req.timeout.map(|t| t.as_secs_f64()).unwrap_or_default()
                        ),
                    )
                } else {
                    Error::new(
                        ErrorCode::Cancelled,
                        format!("the run was cancelled; Slurm job {job} was cancelled (scancel)"),
                    )
                }));
                // Slurm's word on the cancelled job (CANCELLED, or still COMPLETING).
                ops::query(t, std::slice::from_ref(&job))
                    .await
                    .ok()
                    .and_then(|jobs| jobs.into_iter().find(|j| j.job_id == job))
            }
        };
        self.record_end(t, &dir, info, m).await?;
        self.save_manifest(m)?;
        self.download_artifacts(place, req, cancel, m).await;
        self.settle(cancel, m);
        Ok(())
    }

    /// Poll the job until it ends, the deadline passes or the run is cancelled.
    async fn follow(
        &self,
        t: &Remote,
        job: &str,
        timeout: Option<Duration>,
        cancel: &CancellationToken,
        m: &mut RunManifest,
    ) -> Result<Followed> {
        let started = Instant::now();
        let mut misses = 0;
        for round in 0usize.. {
            let pause = POLLS
                .get(round)
                .map_or(MAX_POLL, |ms| Duration::from_millis(*ms));
            let pause = match timeout.map(|t| t.saturating_sub(started.elapsed())) {
                Some(left) if left.is_zero() => return Ok(Followed::TimedOut),
                Some(left) => pause.min(left),
                None => pause,
            };
            tokio::select! {
                _ = tokio::time::sleep(pause) => {}
                _ = cancel.cancelled() => return Ok(Followed::Cancelled),
            }
            let found = ops::query(t, &[job.to_string()]).await?;
            if let Some(b) = m.slurm.as_mut() {
                b.queries += 1;
            }
            match found.into_iter().find(|j| j.job_id == job) {
                Some(info) => {
                    misses = 0;
                    if let Some(b) = m.slurm.as_mut() {
                        b.state = Some(info.state.clone());
                        b.reason = info.reason.clone();
                    }
                    if info.is_finished() {
                        return Ok(Followed::Ended(Some(info)));
                    }
                }
                // Past MinJobAge on a cluster without accounting: the exit file will tell.
                None => {
                    misses += 1;
                    if misses >= 2 {
                        return Ok(Followed::Ended(None));
                    }
                }
            }
        }
        unreachable!("the polling loop only ends by returning")
    }

    /// The exit code (exit file first, else Slurm's), the state, and the output copied home.
    async fn record_end(
        &self,
        t: &Remote,
        dir: &str,
        info: Option<JobInfo>,
        m: &mut RunManifest,
    ) -> Result<()> {
        let run_dir = PathBuf::from(&m.manifest_file)
            .parent()
            .map(PathBuf::from)
            .unwrap_or_else(|| self.state_dir.clone());
        let own = t
            .read_file_range(&format!("{dir}/exit"), 0, 64)
            .await
            .ok()
            .and_then(|b| String::from_utf8_lossy(&b).trim().parse::<i32>().ok());
        let excerpt = self.options.excerpt_bytes;
        let mut copies = Vec::new();
        for name in ["stdout", "stderr"] {
            let remote = format!("{dir}/{name}");
            let local = run_dir.join(name);
            let size = t.stat(&remote).await?.map_or(0, |s| s.size);
            let cap = self.options.output_cap;
            output::mirror(t.bytes(), &remote, &local, size, cap).await?;
            let mut head = output::read_local(&local, 0, excerpt)?;
            // Past the cap the copy is a prefix: the record says so, never a silent cut.
            if size > cap {
                head.extend_from_slice(
                    format!("\n{}\n", output::capped_note(name, size, cap, &remote)).as_bytes(),
                );
            }
            copies.push((local.to_string_lossy().into_owned(), head, size, size > cap));
        }
        if own.is_none()
            && let Some(why) = String::from_utf8_lossy(&copies[1].1)
                .lines()
                .find_map(|l| l.strip_prefix(remote::REFUSED_PREFIX))
        {
            return Err(remote::insecure_error(
                t.bytes(),
                &format!("refusing to run the command file {dir}/cmd.sh on the node"),
                &remote::refused_path(why),
            ));
        }
        let Some(b) = m.slurm.as_mut() else {
            return Ok(());
        };
        let (exit_code, signal, source) = match (&own, &info) {
            (Some(code), _) => (Some(*code), None, Some("exit_file")),
            (None, Some(i)) if i.exit_code.is_some() => (
                i.exit_code,
                i.signal,
                Some(if i.from_accounting { "sacct" } else { "squeue" }),
            ),
            _ => (None, None, None),
        };
        if let Some(i) = &info {
            b.state = Some(i.state.clone());
            b.reason = i.reason.clone();
        } else if b.state.is_none() || own.is_some() {
            b.state = Some(if own.is_some() { "ENDED" } else { "UNKNOWN" }.to_string());
        }
        b.exit_code = exit_code;
        b.signal = signal;
        b.exit_source = source.map(str::to_string);
        let (stdout, stderr) = (&copies[0], &copies[1]);
        b.stdout_local = Some(stdout.0.clone());
        b.stderr_local = Some(stderr.0.clone());
        b.stdout_excerpt = String::from_utf8_lossy(&stdout.1).into_owned();
        b.stderr_excerpt = String::from_utf8_lossy(&stderr.1).into_owned();
        (b.stdout_bytes, b.stdout_capped) = (stdout.2, stdout.3);
        (b.stderr_bytes, b.stderr_capped) = (stderr.2, stderr.3);
        if m.status == RunStatus::Running {
            m.exit_code = exit_code;
            if exit_code.is_none() {
                let job = b.job_id.clone().unwrap_or_default();
                let said = printable_excerpt(&stderr.1, 400);
                return Err(Error::new(
                    ErrorCode::SlurmJobEnded,
                    format!(
                        "Slurm job {job} ended ({}) without an exit code: the command never \
                         ran to its end (node failure, preemption, or a job script error: \
                         {said:?}); see the job's stderr {}",
                        b.state.as_deref().unwrap_or("UNKNOWN"),
                        stderr.0
                    ),
                ));
            }
        }
        Ok(())
    }
}

/// The batch script: the command (cmd.sh beside it) in bash, then its exit code written to
/// `exit` (atomically) for the engine, then the same code for Slurm.
fn job_script(dir: &str) -> String {
    let d = shell_quote(dir);
    // The command file is checked on the node, right before it runs (StrictModes).
    format!(
        "#!/bin/sh\n\
         # remote-runner run: the command is cmd.sh beside this file; its exit code goes to exit\n\
         f={d}/cmd.sh; {check}\n\
         if [ -n \"$p\" ]; then printf '{refused}%s\\n' \"$p\" >&2; exit 126; fi\n\
         bash {d}/cmd.sh\n\
         rr_status=$?\n\
         printf '%s\\n' \"$rr_status\" >{d}/exit.tmp && mv -f {d}/exit.tmp {d}/exit\n\
         exit \"$rr_status\"\n",
        check = remote::STRICT_MODES,
        refused = remote::REFUSED_PREFIX,
    )
}
