//! Session lifecycle: create, show, list, input, transcript, terminal view, destroy.

use std::path::Path;

use serde::Serialize;

use super::{CreateOptions, Engine, SessionRecord, SessionStatus, output, transcript};
use crate::error::{Error, ErrorCode, Hint, Result};
use crate::machine::Machine;
use crate::remote;
use crate::remote::Remote;
use crate::store::{self, ensure_private_dir};
use crate::tmux::{self, LoginEnv, SessionPaths, StartOptions, TmuxDriver};
use crate::util::{new_id, now_rfc3339};

/// Result of [`Engine::send`].
#[derive(Debug, Clone, Serialize)]
pub struct SendResult {
    pub session_id: String,
    pub bytes_sent: usize,
    pub enter: bool,
}

/// A slice of the session transcript (everything the terminal showed), by byte offset.
#[derive(Debug, Clone, Serialize)]
pub struct TranscriptChunk {
    pub session_id: String,
    /// The offset the caller asked for.
    pub since: u64,
    /// Offset just past the returned bytes: pass it as the next `since`.
    pub cursor: u64,
    /// The bytes, lossily decoded (terminal output may hold escape sequences).
    pub text: String,
    /// Number of raw bytes returned.
    pub bytes: u64,
    /// More bytes are available past `cursor` now.
    pub more: bool,
    /// The local transcript reached the output cap (`REMOTE_RUNNER_OUTPUT_CAP`): it ends with
    /// a note saying so, and nothing more is added; the rest is only on the machine.
    pub capped: bool,
    pub transcript_file_local: String,
}

/// Result of [`Engine::destroy`].
#[derive(Debug, Clone, Serialize)]
pub struct DestroyResult {
    pub session_id: String,
    pub status: SessionStatus,
    pub log_dir_local: String,
    pub transcript_file_local: String,
    /// Commands that were still running and were stopped.
    pub stopped_commands: Vec<String>,
    /// On a Slurm machine: the job of the session's allocation, released (`scancel`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub slurm_job_id: Option<String>,
    /// Only after a forced destroy that could not reach the machine: the session is marked
    /// destroyed here, but its shell may still run there.
    pub remote_may_still_run: bool,
    /// What was not done, when `remote_may_still_run`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub warning: Option<String>,
}

/// How [`Engine::destroy_with`] ends a session.
#[derive(Debug, Clone, Copy, Default)]
pub struct DestroyOptions {
    /// When the machine cannot be reached, mark the session destroyed here anyway.
    pub force: bool,
    /// Keep the session's directory on the machine (command files, transcript) instead of
    /// removing it once the shell is gone.
    pub keep_remote_state: bool,
}

/// The visible terminal: size and one text line per row.
#[derive(Debug, Clone, Serialize)]
pub struct Screen {
    pub cols: u16,
    pub rows: u16,
    pub text: String,
}

/// Largest transcript slice returned by one read.
pub const MAX_READ: usize = 4 << 20;

fn validate_dir(cwd: &str) -> Result<()> {
    if !cwd.starts_with('/') || cwd.contains('\0') {
        return Err(Error::invalid(format!(
            "cwd {cwd:?} must be an absolute path"
        )));
    }
    Ok(())
}

fn describe_login_env(env: &LoginEnv) -> String {
    match env {
        LoginEnv::Applied => "applied".to_string(),
        LoginEnv::TimedOut => "timed_out".to_string(),
        LoginEnv::Failed(status) => format!("failed (status {status})"),
        LoginEnv::Off => "off".to_string(),
    }
}

impl Engine {
    /// Start a persistent shell on `machine` in `cwd` (default: the machine's `default_cwd`).
    /// The record is stored before returning; the shell is ready for commands.
    ///
    /// ```no_run
    /// # async fn demo(engine: &remote_runner_engine::engine::Engine)
    /// # -> remote_runner_engine::Result<()> {
    /// let machine = engine.machine("local")?; // or a stored machine's id
    /// let session = engine.create_session(&machine, Some("/tmp")).await?;
    /// println!("{} in {}", session.session_id, session.cwd);
    /// # Ok(())
    /// # }
    /// ```
    pub async fn create_session(
        &self,
        machine: &Machine,
        cwd: Option<&str>,
    ) -> Result<SessionRecord> {
        self.create_session_with(machine, cwd, &CreateOptions::default())
            .await
    }

    /// [`Engine::create_session`] with options: on a Slurm machine the shell runs in a new
    /// allocation (the machine's Slurm arguments plus `opts.slurm_args`), waited for within
    /// `opts.allocation_bound`; the allocation is released when the create fails.
    pub async fn create_session_with(
        &self,
        machine: &Machine,
        cwd: Option<&str>,
        opts: &CreateOptions,
    ) -> Result<SessionRecord> {
        let cwd = cwd.unwrap_or(&machine.default_cwd).trim_end_matches('/');
        let cwd = if cwd.is_empty() { "/" } else { cwd };
        validate_dir(cwd)?;
        let transport = self.connector.connect(&machine.machine_id).await?;
        let tools = remote::prepare(transport.as_ref()).await?;
        let session_id = new_id("sess");
        let paths = SessionPaths::new(
            &tools.tmux_path,
            &crate::tmux::session_socket(&self.options.tmux_socket, &session_id),
            &session_id,
            &tools.root,
        );
        let log_dir = self.log_dir(&session_id);
        ensure_private_dir(&log_dir)?;
        let transcript = log_dir.join("transcript.txt");
        let mut rec = SessionRecord {
            session_id: session_id.clone(),
            machine_id: machine.machine_id.clone(),
            cwd: cwd.to_string(),
            status: SessionStatus::Active,
            backend: "tmux".to_string(),
            created_at: now_rfc3339(),
            log_dir_local: log_dir.to_string_lossy().into_owned(),
            transcript_file_local: transcript.to_string_lossy().into_owned(),
            command_count: 0,
            last_command: None,
            last_command_id: None,
            last_exit_code: None,
            remote_state_dir: paths.state_dir.clone(),
            remote_commands_dir: paths.commands_dir.clone(),
            remote_transcript_file: paths.transcript_path(),
            tmux_socket: paths.socket.clone(),
            tmux_session: paths.session_name.clone(),
            tmux_path: tools.tmux_path.clone(),
            bash_path: tools.bash_path.clone(),
            ended_at: None,
            status_message: None,
            login_environment: None,
            login_shell: Some(tools.login_shell.clone()),
            slurm_job_id: None,
        };
        let node_step = match machine.scheduler.slurm_args() {
            Some(defaults) => {
                let job = self
                    .allocate_for_session(transport.as_ref(), &paths, &session_id, defaults, opts)
                    .await?;
                // A tmux server of the job's own on its node: another job's on the same node
                // ends with that job.
                rec.tmux_socket = format!("{}-job{job}", rec.tmux_socket);
                rec.slurm_job_id = Some(job.clone());
                crate::slurm::step_words(&job)
            }
            None if !opts.slurm_args.is_empty() => {
                return Err(Error::invalid(format!(
                    "Slurm arguments are for machines scheduled by Slurm, and machine {} has \
                     no scheduler",
                    machine.machine_id
                ))
                .with_hint(Hint::ConfigureSlurm {
                    machine_id: machine.machine_id.clone(),
                }));
            }
            None => Vec::new(),
        };
        let paths = SessionPaths {
            socket: rec.tmux_socket.clone(),
            ..paths
        };
        let driver = TmuxDriver::new(self.session_transport(&rec, transport.clone()), paths);
        match self
            .start_shell(
                &driver,
                transport.as_ref(),
                machine,
                cwd,
                &node_step,
                &mut rec,
            )
            .await
        {
            Ok(()) => {}
            Err(e) => {
                let _ = self.release_allocation(&rec).await;
                return Err(e);
            }
        }
        self.save_session(&rec)?;
        Ok(rec)
    }

    /// The session shell in its tmux session (on a Slurm node: started from `login` as a job
    /// step, `node_step`), then the startup commands.
    async fn start_shell(
        &self,
        driver: &TmuxDriver,
        login: &Remote,
        machine: &Machine,
        cwd: &str,
        node_step: &[String],
        rec: &mut SessionRecord,
    ) -> Result<()> {
        let mark_key = tmux::new_secret();
        transcript::save_mark_key(Path::new(&rec.log_dir_local), &mark_key)?;
        let login_env = driver
            .start_from(
                login,
                &StartOptions {
                    bash_path: &rec.bash_path,
                    cwd,
                    env: &self.options.session_env,
                    login_env: self.options.login_env && machine.login_env,
                    login_env_bound: self.options.login_env_bound,
                    node_step,
                    mark_key: &mark_key,
                },
            )
            .await?;
        rec.login_environment = Some(describe_login_env(&login_env));
        if let Err(e) = self.run_startup_commands(driver, machine).await {
            let _ = driver.kill().await;
            return Err(e);
        }
        Ok(())
    }

    /// The machine's startup commands, in order, in the new session's shell (so what they set
    /// stays); the first that fails fails the create with its output and exit code.
    async fn run_startup_commands(&self, driver: &TmuxDriver, machine: &Machine) -> Result<()> {
        let transport = driver.transport().clone();
        for (i, command) in machine.startup_commands.iter().enumerate() {
            let id = new_id("start");
            let dir = driver.paths().command_dir(&id);
            transport.create_dir_all(&dir, 0o700).await?;
            transport
                .write_new_file(&format!("{dir}/cmd.sh"), command.as_bytes(), 0o600)
                .await?;
            let limit = std::time::Duration::from_secs(300);
            let state = match driver
                .start_command(&id, tmux::RunMode::Foreground, &Default::default(), limit)
                .await?
            {
                tmux::StartOutcome::Started(state) => state,
                _ => return Err(driver.lost_error()),
            };
            let failed = |what: String| {
                Error::new(
                    ErrorCode::StartupCommandFailed,
                    format!(
                        "startup command {} of machine {} ({command:?}) {what}; fix the machine's startup commands and create the \
                         session again",
                        i + 1,
                        machine.machine_id,
                    ),
                )
            };
            let Some(exit) = state.exit else {
                return Err(failed("did not finish within 300 s".to_string()));
            };
            if exit.code != 0 {
                let out = transport
                    .read_file_range(&format!("{dir}/stdout"), 0, 4096)
                    .await
                    .unwrap_or_default();
                let err = transport
                    .read_file_range(&format!("{dir}/stderr"), 0, 4096)
                    .await
                    .unwrap_or_default();
                return Err(failed(format!(
                    "exited with code {}; stdout: {:?}; stderr: {:?}",
                    exit.code,
                    crate::util::printable_excerpt(&out, 4096),
                    crate::util::printable_excerpt(&err, 4096)
                )));
            }
        }
        Ok(())
    }

    /// The stored session with its command count and last command filled in.
    pub fn session_show(&self, session_id: &str) -> Result<SessionRecord> {
        let rec = self.load_session(session_id)?;
        self.with_counts(rec)
    }

    /// Every session (any status), oldest first.
    pub fn session_list(&self) -> Result<Vec<SessionRecord>> {
        let all = self.with_store(store::sessions::list)?;
        all.into_iter().map(|r| self.with_counts(r)).collect()
    }

    fn with_counts(&self, mut rec: SessionRecord) -> Result<SessionRecord> {
        let (count, last) = self.with_store(|s| {
            Ok((
                store::commands::count(s, &rec.session_id)?,
                store::commands::last(s, &rec.session_id)?,
            ))
        })?;
        rec.command_count = count;
        if let Some(last) = last {
            rec.last_command = Some(last.command);
            rec.last_command_id = Some(last.command_id);
            rec.last_exit_code = last.exit_code;
        }
        Ok(rec)
    }

    /// A driver for an active session; `session_lost` (and the record marked) when it is gone.
    pub(super) async fn active_driver(
        &self,
        session_id: &str,
    ) -> Result<(SessionRecord, TmuxDriver)> {
        let rec = self.load_session(session_id)?;
        match rec.status {
            SessionStatus::Active => {}
            SessionStatus::Lost => {
                let ended = rec
                    .status_message
                    .as_deref()
                    .is_some_and(super::slurm::is_slurm_reason);
                return Err(Error::new(
                    if ended {
                        ErrorCode::SlurmJobEnded
                    } else {
                        ErrorCode::SessionLost
                    },
                    format!(
                        "session {session_id} is lost ({}); its records and logs are kept; create \
                         a new session to continue",
                        rec.status_message.as_deref().unwrap_or("its shell is gone")
                    ),
                ));
            }
            SessionStatus::Destroyed => {
                return Err(Error::new(
                    ErrorCode::SessionLost,
                    format!(
                        "session {session_id} was destroyed; its records and logs are kept; create \
                         a new session to continue"
                    ),
                ));
            }
        }
        let driver = self.driver(&rec).await?;
        Ok((rec, driver))
    }

    /// Type `input` into the session shell, then Enter unless `enter` is false.
    pub async fn send(&self, session_id: &str, input: &str, enter: bool) -> Result<SendResult> {
        if input.contains('\0') {
            return Err(Error::invalid("input must not contain NUL bytes"));
        }
        self.send_bytes(session_id, input.as_bytes(), enter).await?;
        Ok(SendResult {
            session_id: session_id.to_string(),
            bytes_sent: input.len(),
            enter,
        })
    }

    /// Raw bytes to the terminal (control characters included, e.g. `\x03` for Ctrl-C).
    pub async fn send_raw(&self, session_id: &str, bytes: &[u8]) -> Result<()> {
        self.send_bytes(session_id, bytes, false).await
    }

    async fn send_bytes(&self, session_id: &str, bytes: &[u8], enter: bool) -> Result<()> {
        let (_, driver) = self.active_driver(session_id).await?;
        match driver.send_input(bytes, enter).await {
            Err(e) if e.code == ErrorCode::SessionLost => {
                self.mark_lost(session_id, "the tmux session is gone")?;
                Err(self.explain_lost(session_id, e).await)
            }
            other => other,
        }
    }

    /// Transcript bytes from `since` (default 0), at most `max` (capped at [`MAX_READ`]). The
    /// local transcript file is brought up to date from the machine first (the terminal's
    /// bytes, with each foreground command's output spliced in as it comes:
    /// `transcript::compose`), so reads keep working after the session is gone. Offsets are
    /// those of the local transcript file.
    pub async fn read(
        &self,
        session_id: &str,
        since: Option<u64>,
        max: usize,
    ) -> Result<TranscriptChunk> {
        let rec = self.load_session(session_id)?;
        let local = std::path::PathBuf::from(&rec.transcript_file_local);
        let capped = if rec.status == SessionStatus::Active {
            self.sync_transcript(&rec).await?
        } else {
            transcript::is_capped(&local)
        };
        let since = since.unwrap_or(0);
        let max = max.clamp(1, MAX_READ);
        let data = output::read_local(&local, since, max)?;
        let cursor = since + data.len() as u64;
        let text = String::from_utf8_lossy(&data);
        Ok(TranscriptChunk {
            session_id: session_id.to_string(),
            since,
            cursor,
            // A session that ended before transcripts were composed has the terminal's raw
            // bytes there.
            text: if transcript::is_composed(&local) {
                text.into_owned()
            } else {
                transcript::clean(&text)
            },
            bytes: data.len() as u64,
            more: output::local_len(&local) > cursor,
            capped,
            transcript_file_local: rec.transcript_file_local.clone(),
        })
    }

    /// Bring the local transcript up to date; returns whether it reached the output cap.
    async fn sync_transcript(&self, rec: &SessionRecord) -> Result<bool> {
        let transport = self.connector.connect(&rec.machine_id).await?;
        Ok(
            transcript::compose(transport.bytes(), rec, self.options.output_cap)
                .await?
                .capped,
        )
    }

    /// Stop running commands, kill the remote shell, and mark the session destroyed. Local
    /// records, logs and the transcript are kept. Idempotent. The session is marked destroyed
    /// only when its tmux session is known gone on the machine; when the machine cannot be
    /// reached (unreachable, changed host key, machine removed) the error says so and the
    /// session stays as it was, for a retry (or [`Engine::destroy_forced`]).
    pub async fn destroy(&self, session_id: &str) -> Result<DestroyResult> {
        self.destroy_with(session_id, DestroyOptions::default())
            .await
    }

    /// [`Engine::destroy`], but a machine that cannot be reached does not stop it: the session
    /// is marked destroyed here and the result says its shell may still run there.
    pub async fn destroy_forced(&self, session_id: &str) -> Result<DestroyResult> {
        let opts = DestroyOptions {
            force: true,
            ..DestroyOptions::default()
        };
        self.destroy_with(session_id, opts).await
    }

    /// [`Engine::destroy`] with its options spelled out.
    pub async fn destroy_with(
        &self,
        session_id: &str,
        opts: DestroyOptions,
    ) -> Result<DestroyResult> {
        let force = opts.force;
        let rec = self.load_session(session_id)?;
        self.terminals.forget(session_id);
        if rec.status == SessionStatus::Destroyed {
            return Ok(destroy_result(rec, Vec::new(), None));
        }
        let ended = async {
            let stopped = self.end_remote_shell(&rec, opts.keep_remote_state).await?;
            self.release_allocation(&rec).await?;
            Ok::<_, Error>(stopped)
        };
        let (stopped, warning) = match ended.await {
            Ok(stopped) => (stopped, None),
            Err(e) if force => (Vec::new(), Some(remote_may_still_run(&rec, &e))),
            Err(e) => return Err(not_destroyed(&rec, e)),
        };
        let mut rec = self.load_session(session_id)?;
        rec.status = SessionStatus::Destroyed;
        rec.ended_at = Some(now_rfc3339());
        rec.status_message = Some(match &warning {
            None => "destroyed on request".to_string(),
            Some(w) => format!("marked destroyed without ending its shell (forced): {w}"),
        });
        self.save_session(&rec)?;
        Ok(destroy_result(rec, stopped, warning))
    }

    /// Stop the session's running commands and kill its tmux session, then check that it is
    /// gone. Returns the commands stopped.
    async fn end_remote_shell(
        &self,
        rec: &SessionRecord,
        keep_remote_state: bool,
    ) -> Result<Vec<String>> {
        let driver = self.driver(rec).await?;
        let _ = self.sync_transcript(rec).await;
        let running: Vec<_> = self
            .command_list(&rec.session_id)?
            .into_iter()
            .filter(|c| !c.status.is_final())
            .collect();
        let mut stopped = Vec::new();
        for cmd in running {
            if self
                .command_stop(&rec.session_id, &cmd.command_id)
                .await
                .is_ok()
            {
                stopped.push(cmd.command_id.clone());
            }
        }
        let _ = self.sync_transcript(rec).await;
        match end_tmux(&driver, keep_remote_state).await {
            Err(e) if rec.slurm_job_id.is_some() && e.code.is_session_lost() => {
                // The allocation is gone, and the shell with it; what is left is the session's
                // directory on the shared file system, reached from the login node.
                let login = self.connector.connect(&rec.machine_id).await?;
                end_tmux(
                    &TmuxDriver::new(login, super::paths_of(rec)),
                    keep_remote_state,
                )
                .await?;
                return Ok(stopped);
            }
            ended => ended?,
        }
        if driver.is_alive().await? {
            return Err(Error::new(
                ErrorCode::RemoteError,
                format!(
                    "tmux session {} is still there after kill-session",
                    rec.tmux_session
                ),
            ));
        }
        Ok(stopped)
    }

    /// The visible screen of the session's terminal.
    pub async fn capture_screen(&self, session_id: &str) -> Result<Screen> {
        let (_, driver) = self.active_driver(session_id).await?;
        let (cols, rows, text) = driver.capture_screen().await?;
        Ok(Screen { cols, rows, text })
    }

    /// Resize the session's terminal.
    pub async fn resize(&self, session_id: &str, cols: u16, rows: u16) -> Result<()> {
        let (_, driver) = self.active_driver(session_id).await?;
        driver.resize(cols, rows).await
    }

    /// Whether the session's tmux session still exists; marks it lost when not.
    pub async fn check_alive(&self, session_id: &str) -> Result<bool> {
        let (rec, driver) = self.active_driver(session_id).await?;
        let alive = driver.is_alive().await?;
        if !alive {
            self.mark_lost(&rec.session_id, "the tmux session is gone")?;
            if rec.slurm_job_id.is_some() {
                // Keep Slurm's reason as the session's status message.
                let lost = Error::new(ErrorCode::SessionLost, "the tmux session is gone");
                let _ = self.explain_lost(&rec.session_id, lost).await;
            }
        }
        Ok(alive)
    }
}

fn destroy_result(
    rec: SessionRecord,
    stopped: Vec<String>,
    warning: Option<String>,
) -> DestroyResult {
    DestroyResult {
        slurm_job_id: rec.slurm_job_id,
        session_id: rec.session_id,
        status: rec.status,
        log_dir_local: rec.log_dir_local,
        transcript_file_local: rec.transcript_file_local,
        stopped_commands: stopped,
        remote_may_still_run: warning.is_some(),
        warning,
    }
}

/// The error of a destroy that could not end the remote shell: what failed, what was not done,
/// and the two ways on. The code stays the cause's (`connection_failed`, `host_key_changed`,
/// `unknown_machine`, ...), so the exit code says why.
fn not_destroyed(rec: &SessionRecord, cause: Error) -> Error {
    let message = format!(
        "session {id} was not destroyed: its shell on machine {machine} could not be ended \
         ({cause}). The session stays {status} and its shell may still run there; fix the cause \
         and destroy it again, or mark it destroyed here only",
        id = rec.session_id,
        machine = rec.machine_id,
        cause = cause.message,
        status = rec.status.as_str(),
    );
    Error {
        message,
        hint: Some(Hint::ForceDestroy {
            session_id: rec.session_id.clone(),
        }),
        ..cause
    }
}

fn remote_may_still_run(rec: &SessionRecord, cause: &Error) -> String {
    format!(
        "the shell on machine {} could not be ended ({}: {}); tmux session {} (socket {}) may \
         still run there",
        rec.machine_id,
        cause.code.as_str(),
        cause.message,
        rec.tmux_session,
        rec.tmux_socket
    )
}

/// Kill the session's tmux session, removing its remote state unless `keep_remote_state`.
async fn end_tmux(driver: &TmuxDriver, keep_remote_state: bool) -> Result<()> {
    if keep_remote_state {
        driver.kill_keeping_state().await
    } else {
        driver.kill().await
    }
}
