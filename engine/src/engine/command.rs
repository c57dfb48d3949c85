//! Commands: exec (wait or background), show, wait, stop, list, logs, output by offset.
//!
//! Semantics worth knowing:
//! - A wait-mode command is sourced by the session shell: `cd`, `export`, aliases, functions
//!   and `set` options persist (`set -e` is reset after each command, and a failure under it
//!   ends the command, not the shell). `exit N` ends the shell, not the session: the command
//!   is recorded with exit code `N` (status `failed`, or `completed` for 0), `end_reason`
//!   `shell_exit` and `shell_restarted`, and the session goes on in a fresh shell with the same
//!   directory and exported environment (functions, aliases and unexported variables are
//!   gone); a shell killed by its command is the same, with `shell_killed`. A command is
//!   `lost` when the session dies under it (the tmux server or its session gone: the session
//!   is then `lost` too), or when its start never reached the shell (`never_started`).
//! - stdin is the session terminal (so `session send` can answer a prompt); stdout and stderr go
//!   only to the command's files, not to the terminal (`session read` splices them into the
//!   transcript as they come: `transcript::compose`).
//! - CRLF line endings in the command text become LF; a NUL byte is refused.
//! - Background commands run in a new process group (`setsid`) from the session shell: they
//!   inherit its exported environment and directory, not its functions or aliases.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde::Serialize;

use super::{
    CommandMode, CommandRecord, CommandStatus, Engine, SessionRecord, epoch_to_rfc3339, output,
    starter,
};
use crate::error::{Error, ErrorCode, Hint, Result};
use crate::store;
use crate::tmux::{self, CommandStart, CommandState, RunMode, StartOutcome, TmuxDriver};
use crate::util::retry::{self, is_link_error};
use crate::util::{new_id, now_rfc3339};

/// How to run a command.
#[derive(Debug, Clone, Default)]
pub struct ExecRequest {
    /// `Wait` (default): run in the session shell and wait for the end. `Background`: start
    /// detached and return once started.
    pub mode: CommandMode,
    /// Change the session shell's directory before running (background: the command's only).
    pub cwd: Option<String>,
    /// Bound on the wait (not on the command): on expiry the record says `running` with
    /// `wait_timed_out`. `None`: wait until it ends.
    pub timeout: Option<Duration>,
    /// Variables exported in the session shell just before the command (they stay set, as an
    /// `export` typed there would), without being part of its text, its record or the
    /// terminal's view of it. Names that are not shell names are ignored.
    pub env: Vec<(String, String)>,
    /// Background only: run it in a terminal of its own (a tmux window of the session) so that
    /// `session send` with its command id can type into it; otherwise its stdin is /dev/null.
    pub stdin: bool,
}

impl ExecRequest {
    pub fn wait() -> Self {
        ExecRequest::default()
    }
    pub fn background() -> Self {
        ExecRequest {
            mode: CommandMode::Background,
            ..Default::default()
        }
    }
    pub fn with_timeout(mut self, t: Duration) -> Self {
        self.timeout = Some(t);
        self
    }
    pub fn with_cwd(mut self, cwd: &str) -> Self {
        self.cwd = Some(cwd.to_string());
        self
    }
    pub fn with_env(mut self, env: Vec<(String, String)>) -> Self {
        self.env = env;
        self
    }
}

/// Which output stream of a command.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum OutputStream {
    Stdout,
    Stderr,
}

/// One entry of [`Engine::logs`].
#[derive(Debug, Clone, Serialize)]
pub struct LogEntry {
    pub seq: u64,
    pub command_id: String,
    pub command: String,
    pub mode: CommandMode,
    pub status: CommandStatus,
    pub exit_code: Option<i32>,
    pub started_at: Option<String>,
    pub ended_at: Option<String>,
    pub stdout_bytes: u64,
    pub stderr_bytes: u64,
    pub log_file_local: String,
    pub stdout_file_local: String,
    pub stderr_file_local: String,
    pub remote_state_dir: String,
}

/// Whether a listing's refresh of running commands reached the machine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Freshness {
    /// Every record is as the machine reports it (or none needed a look).
    Fresh,
    /// The machine could not be reached: the records are the last stored ones, for this reason.
    Stale(String),
}

impl Freshness {
    /// The reason the records may be out of date, if they may be.
    pub fn stale_reason(&self) -> Option<&str> {
        match self {
            Freshness::Fresh => None,
            Freshness::Stale(why) => Some(why),
        }
    }
}

/// Result of [`Engine::command_stop_outcome`].
#[derive(Debug, Clone)]
pub struct StopOutcome {
    pub record: CommandRecord,
    /// The command had ended before this stop (nothing was stopped).
    pub already_finished: bool,
}

/// How many commands one listing refresh looks at concurrently.
const REFRESH_CONCURRENCY: usize = 4;

/// How long a background launch may take to be accepted by the shell.
const LAUNCH_WAIT: Duration = Duration::from_secs(30);

/// Whether the record is younger than a start can take; its remote directory may not exist yet.
/// Every this many commands of a session, its old command directories on the machine are pruned.
const PRUNE_EVERY: u64 = 50;
/// How many of a session's newest command directories the machine keeps (running ones always).
pub const KEEP_COMMAND_DIRS: usize = 500;

fn recently_created(rec: &CommandRecord) -> bool {
    use time::format_description::well_known::Rfc3339;
    match time::OffsetDateTime::parse(&rec.created_at, &Rfc3339) {
        Ok(t) => time::OffsetDateTime::now_utc() - t < time::Duration::seconds(60),
        Err(_) => false,
    }
}

/// The machine cannot be reached (or is no longer configured): a listing shows stored records.
fn is_unreachable(e: &Error) -> bool {
    is_link_error(e)
        || matches!(
            e.code,
            ErrorCode::AuthFailed
                | ErrorCode::HostKeyUnknown
                | ErrorCode::HostKeyChanged
                | ErrorCode::UnknownMachine
        )
}

fn run_mode(rec: &CommandRecord) -> RunMode {
    match rec.mode {
        CommandMode::Wait => RunMode::Foreground,
        CommandMode::Background => RunMode::Background,
    }
}

/// The last line a command waiting for input printed: its prompt, usually. A stream whose
/// output ends without a newline holds the prompt (stderr first: `read -p`, Python's `>>> `);
/// else the last line of stderr, then of stdout.
fn last_line(rec: &CommandRecord) -> String {
    let tail = |t: &str| -> String {
        let t = t.strip_suffix('\n').unwrap_or(t);
        t.rsplit('\n').next().unwrap_or("").to_string()
    };
    let open = |t: &str| !t.is_empty() && !t.ends_with('\n');
    if open(&rec.stderr) {
        tail(&rec.stderr)
    } else if open(&rec.stdout) {
        tail(&rec.stdout)
    } else if !rec.stderr.is_empty() {
        tail(&rec.stderr)
    } else {
        tail(&rec.stdout)
    }
}

/// Neither output stream holds an unfinished line (a prompt).
fn output_ends_a_line(rec: &CommandRecord) -> bool {
    [&rec.stdout, &rec.stderr]
        .iter()
        .all(|t| t.is_empty() || t.ends_with('\n'))
}

/// Normalize and check a command's text: CRLF line endings become LF; NUL is refused.
fn prepare_command(command: &str) -> Result<String> {
    if command.contains('\0') {
        return Err(Error::invalid(
            "the command contains a NUL byte, which a shell cannot run; remove it",
        ));
    }
    if command.trim().is_empty() {
        return Err(Error::invalid(
            "the command is empty; pass the shell text to run",
        ));
    }
    let mut text = command.replace("\r\n", "\n");
    if !text.ends_with('\n') {
        text.push('\n');
    }
    Ok(text)
}

/// The environment variable of a test hook: `exec` of a command whose text contains its value
/// stops for good between storing the record and starting the command, so that a test can
/// kill the process at that point (`cli/tests/session_behaviour.rs`, never_started). Unset in
/// production, it costs one environment lookup.
const STALL_BEFORE_START_ENV: &str = "REMOTE_RUNNER_TEST_STALL_BEFORE_START";

async fn stall_before_start_for_tests(command: &str) {
    if let Some(v) = std::env::var_os(STALL_BEFORE_START_ENV)
        && let Some(v) = v.to_str()
        && !v.is_empty()
        && command.contains(v)
    {
        std::future::pending::<()>().await;
    }
}

impl Engine {
    /// Run `command` in the session. Wait mode runs it in the session shell itself (so `cd`,
    /// `export`, aliases and functions persist) and returns when it ends or the wait bound runs
    /// out; background mode starts it detached in its own process group and returns at once.
    /// Errors: `busy` when a foreground command runs (in any process), `session_lost` when the
    /// shell is gone or the command ended it (the command record then says how).
    /// On a session in a Slurm allocation that ended, the error is `slurm_job_ended`, naming
    /// the job and Slurm's reason. A non-zero exit is not an error: it is the record's
    /// `failed` status and `exit_code`.
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use remote_runner_engine::engine::ExecRequest;
    /// use remote_runner_engine::records::CommandStatus;
    ///
    /// # async fn demo(engine: &remote_runner_engine::engine::Engine, session_id: &str)
    /// # -> remote_runner_engine::Result<()> {
    /// engine.exec(session_id, "cd /tmp && export N=1", ExecRequest::wait()).await?;
    /// let wait = ExecRequest::wait().with_timeout(Duration::from_secs(30));
    /// let rec = engine.exec(session_id, "echo $N; exit 5", wait).await?;
    /// match rec.status {
    ///     CommandStatus::Completed => println!("{}", rec.stdout),
    ///     CommandStatus::Failed => println!("exit code {:?}", rec.exit_code), // Some(5)
    ///     CommandStatus::Running => println!("still running: wait for {}", rec.command_id),
    ///     other => println!("{}", other.as_str()), // the enum may grow
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn exec(
        &self,
        session_id: &str,
        command: &str,
        req: ExecRequest,
    ) -> Result<CommandRecord> {
        self.explained(session_id, async {
            let text = prepare_command(command)?;
            if req.stdin && req.mode != CommandMode::Background {
                return Err(Error::invalid(
                    "stdin is for background commands (a foreground command already reads the \
                     session's terminal); add --mode background, or drop --stdin",
                ));
            }
            if let Some(cwd) = &req.cwd
                && (!cwd.starts_with('/') || cwd.contains('\0'))
            {
                return Err(Error::invalid(format!(
                    "cwd {cwd:?} must be an absolute path without newlines"
                )));
            }
            let (session, mut driver) = self.active_driver(session_id).await?;
            let command_id = new_id("cmd");
            let dir = driver.paths().command_dir(&command_id);
            let inline = text.len() <= tmux::INLINE_TEXT_MAX;
            // Over SFTP (one round trip to a running server) rather than a `mkdir` process in
            // the start call: a process costs the remote a fork and an exec on every command.
            // The record is stored while that round trip is under way (the request goes out at
            // the first poll); stored before anything runs, so a killed caller can find the
            // command again.
            let transport = driver.transport().clone();
            // The start lock says this process is still starting the command (see `starter`).
            let starting = starter::begin(&self.log_dir(session_id), &command_id)?;
            let rec = self.new_record(&session, &command_id, command, &req);
            let (made, stored) = tokio::join!(transport.create_dir_all(&dir, 0o700), async {
                self.with_store(|s| store::commands::insert_next(s, &rec))
            });
            let mut rec = stored?;
            let written = match (made, inline) {
                (Ok(()), true) => Ok(()),
                (Ok(()), false) => {
                    transport
                        .write_new_file(&format!("{dir}/cmd.sh"), text.as_bytes(), 0o600)
                        .await
                }
                (Err(e), _) => Err(e),
            };
            if let Err(e) = written {
                self.with_store(|s| store::commands::delete(s, &command_id))?;
                return Err(e);
            }
            stall_before_start_for_tests(command).await;
            if rec.seq % PRUNE_EVERY == 0 {
                // Off the command's path: old ended command directories go (their output was
                // copied to the local log dir as they ended).
                let pruner = driver.clone();
                tokio::spawn(async move {
                    if let Err(e) = pruner.prune_commands(KEEP_COMMAND_DIRS).await {
                        tracing::debug!("pruning old command directories failed: {e}");
                    }
                });
            }
            let mode = run_mode(&rec);
            let background = req.mode == CommandMode::Background;
            let first_wait = if background {
                LAUNCH_WAIT
            } else {
                self.chunk(req.timeout)
            };
            let started = Instant::now();
            let start = CommandStart {
                text: inline.then_some(text.as_str()),
                cwd: req.cwd.as_deref(),
                env: &req.env,
                window: req.stdin,
            };
            let outcome = match self.terminal_client(&session, &driver, background) {
                Some(client) => {
                    driver
                        .start_command_typed(&client, &command_id, &start, first_wait)
                        .await
                }
                None => {
                    driver
                        .start_command(&command_id, mode, &start, first_wait)
                        .await
                }
            };
            match &outcome {
                Ok(StartOutcome::Started(_)) => starting.keep_as(Path::new(&rec.log_file_local)),
                _ => drop(starting),
            }
            let state = match outcome {
                Ok(StartOutcome::Started(st)) => st,
                Ok(refused) => {
                    self.with_store(|s| store::commands::delete(s, &command_id))?;
                    return Err(self.refusal(session_id, &driver, refused)?);
                }
                Err(e) if is_link_error(&e) => {
                    // The link dropped while starting or waiting: the command may run. Reconnect
                    // and ask the machine; the exit file and the command directory are the truth.
                    driver = self.reconnect(&session, &e).await?;
                    driver
                        .wait_command(&command_id, mode, Duration::ZERO)
                        .await?
                }
                Err(e) => {
                    self.with_store(|s| store::commands::delete(s, &command_id))?;
                    return Err(e);
                }
            };
            let state = if background {
                state
            } else {
                self.wait_more(&session, &mut driver, &rec, state, req.timeout, started)
                    .await?
            };
            self.apply_state(&session, &driver, &mut rec, &state, !background)
                .await?;
            self.lost_as_error(&rec)?;
            Ok(rec)
        })
        .await
    }

    /// The session's kept tmux control client, for a foreground command, when the engine keeps
    /// them ([`EngineOptions::terminal_clients`](super::EngineOptions)) and one is attached.
    /// Not for a session in a Slurm allocation (its processes are job steps).
    fn terminal_client(
        &self,
        session: &SessionRecord,
        driver: &TmuxDriver,
        background: bool,
    ) -> Option<std::sync::Arc<crate::tmux::TerminalClient>> {
        if !self.options.terminal_clients || background || session.slurm_job_id.is_some() {
            return None;
        }
        self.terminals.client(&session.session_id, driver)
    }

    /// The error for a start the machine refused.
    fn refusal(
        &self,
        session_id: &str,
        driver: &TmuxDriver,
        outcome: StartOutcome,
    ) -> Result<Error> {
        Ok(match outcome {
            StartOutcome::Busy(owner) if owner.is_empty() => Error::new(
                ErrorCode::Busy,
                format!(
                    "session {session_id} is running another command; wait for it (`session \
                     command list` shows it) or open another session"
                ),
            ),
            StartOutcome::Busy(owner) => Error::new(
                ErrorCode::Busy,
                format!("session {session_id} is running command {owner}"),
            )
            .with_hint(Hint::WaitOrStopCommand {
                session_id: session_id.to_string(),
                command_id: owner,
            }),
            StartOutcome::TerminalBusy(name) => Error::new(
                ErrorCode::Busy,
                format!(
                    "session {session_id}'s terminal is running `{name}`, typed into it \
                     directly; end it (exit it, or send Ctrl-C) before running commands"
                ),
            )
            .with_hint(Hint::EndTerminalProgram {
                session_id: session_id.to_string(),
            }),
            StartOutcome::Lost | StartOutcome::Started(_) => {
                self.mark_lost(session_id, "the tmux session is gone")?;
                driver.lost_error()
            }
        })
    }

    /// A fresh driver after `cause`, a dropped link: reconnected (by the connector) and checked,
    /// under [`retry::LINK`] (once when an outer layer owns the retrying).
    async fn reconnect(&self, session: &SessionRecord, cause: &Error) -> Result<TmuxDriver> {
        tracing::debug!(session = %session.session_id, "reconnecting after: {cause}");
        retry::run(retry::LINK, || self.live_driver(session), is_link_error).await
    }

    async fn live_driver(&self, session: &SessionRecord) -> Result<TmuxDriver> {
        let driver = self.driver(session).await?;
        driver.is_alive().await?;
        Ok(driver)
    }

    /// Keep waiting in bounded chunks until the command ends or `timeout` (from `started`)
    /// runs out.
    async fn wait_more(
        &self,
        session: &SessionRecord,
        driver: &mut TmuxDriver,
        rec: &CommandRecord,
        mut state: CommandState,
        timeout: Option<Duration>,
        started: Instant,
    ) -> Result<CommandState> {
        let mode = run_mode(rec);
        loop {
            let gone = state.missing && !recently_created(rec);
            if state.exit.is_some()
                || !state.alive
                || gone
                || state.never_started
                || state.waiting_input
            {
                return Ok(state);
            }
            let left = match timeout {
                Some(t) => match t.checked_sub(started.elapsed()) {
                    Some(left) if !left.is_zero() => left,
                    _ => return Ok(state),
                },
                None => self.options.wait_chunk,
            };
            let round = Instant::now();
            let chunk = left.min(self.options.wait_chunk);
            state = match driver.wait_command(&rec.command_id, mode, chunk).await {
                Ok(st) => st,
                Err(e) if is_link_error(&e) => {
                    *driver = self.reconnect(session, &e).await?;
                    continue;
                }
                Err(e) => return Err(e),
            };
            if state.exit.is_none() && round.elapsed() < Duration::from_millis(200) {
                // The wake-up channel failed at once (e.g. the tmux server is gone and the
                // command is a background one): do not spin.
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }

    /// The command has not been seen started, and no process is starting it any more (the
    /// one that recorded it died, or its start call returned): a look may settle it.
    fn starter_gone(&self, rec: &CommandRecord) -> bool {
        rec.started_at.is_none()
            && !rec.status.is_final()
            && starter::gone(&self.log_dir(&rec.session_id), &rec.command_id)
    }

    fn chunk(&self, timeout: Option<Duration>) -> Duration {
        match timeout {
            Some(t) => t.min(self.options.wait_chunk),
            None => self.options.wait_chunk,
        }
    }

    fn new_record(
        &self,
        session: &SessionRecord,
        command_id: &str,
        command: &str,
        req: &ExecRequest,
    ) -> CommandRecord {
        let dir = format!("{}/{command_id}", session.remote_commands_dir);
        let log_dir = self.log_dir(&session.session_id);
        let local = |ext: &str| {
            log_dir
                .join(format!("{command_id}.{ext}"))
                .to_string_lossy()
                .into_owned()
        };
        CommandRecord {
            session_id: session.session_id.clone(),
            command_id: command_id.to_string(),
            seq: 0,
            machine_id: session.machine_id.clone(),
            cwd: req.cwd.clone().unwrap_or_else(|| session.cwd.clone()),
            command: command.to_string(),
            mode: req.mode,
            status: CommandStatus::Running,
            exit_code: None,
            stdout: String::new(),
            stderr: String::new(),
            stdout_truncated: false,
            stderr_truncated: false,
            stdout_bytes: 0,
            stderr_bytes: 0,
            stdout_capped: false,
            stderr_capped: false,
            created_at: now_rfc3339(),
            started_at: None,
            ended_at: None,
            duration_ms: None,
            log_file_local: local("log"),
            stdout_file_local: local("stdout"),
            stderr_file_local: local("stderr"),
            remote_stdout_file: format!("{dir}/stdout"),
            remote_stderr_file: format!("{dir}/stderr"),
            remote_exit_file: format!("{dir}/exit"),
            remote_state_dir: dir,
            wait_timed_out: false,
            pid: None,
            stop_requested: false,
            end_reason: None,
            error: None,
            shell_restarted: false,
            last_line: None,
            interrupted: false,
        }
    }

    /// Fold a remote state into the record: status, times, output copies and excerpts; store it.
    /// `waited`: the caller waited for the end, so a command still running means the wait ran
    /// out (`wait_timed_out`); a report-only look or a background start never says that.
    async fn apply_state(
        &self,
        session: &SessionRecord,
        driver: &TmuxDriver,
        rec: &mut CommandRecord,
        state: &CommandState,
        waited: bool,
    ) -> Result<()> {
        if let Some(t) = state.started {
            rec.started_at = Some(epoch_to_rfc3339(t));
        }
        if let Some(pwd) = &state.pwd {
            rec.cwd = pwd.clone();
        }
        if state.pid.is_some() {
            rec.pid = state.pid;
        }
        rec.stdout_bytes = rec.stdout_bytes.max(state.stdout_size);
        rec.stderr_bytes = rec.stderr_bytes.max(state.stderr_size);
        let mut lost_session = None;
        // A foreground command killed by SIGHUP (129) usually means the tmux server went away.
        let hung_up = rec.mode == CommandMode::Wait
            && state.exit.as_ref().is_some_and(|e| e.code == 129)
            && !driver.is_alive().await.unwrap_or(true);
        if let Some(exit) = &state.exit {
            rec.exit_code = Some(exit.code);
            rec.end_reason = Some(exit.how.clone());
            rec.ended_at = exit.ended.map(epoch_to_rfc3339);
            if let (Some(a), Some(b)) = (state.started, exit.ended) {
                rec.duration_ms = Some(((b - a).max(0.0) * 1000.0).round() as u64);
            }
            rec.wait_timed_out = false;
            rec.last_line = None;
            rec.interrupted = exit.code == 130;
            // `exit N`, `kill -9 $$`, `exec bash`: the command ended its shell; the session
            // goes on in a fresh one with the same directory and exported environment.
            rec.shell_restarted = matches!(
                exit.how.as_str(),
                "shell_exit" | "shell_killed" | "shell_replaced"
            );
            rec.status = if exit.how == "never_started" {
                rec.exit_code = None;
                rec.error = Some(
                    "the command was never started: the process that ran it stopped (or lost \
                     its connection) before the start reached the machine; nothing ran; run it \
                     again"
                        .to_string(),
                );
                CommandStatus::Lost
            } else if exit.how == "not_started" {
                rec.exit_code = None;
                rec.error = Some(
                    "the session shell ended before the command started; nothing ran; the \
                     session goes on in a fresh shell: run it again"
                        .to_string(),
                );
                CommandStatus::Lost
            } else if exit.state == "stopped" {
                rec.stop_requested = true;
                CommandStatus::Stopped
            } else if hung_up {
                let why = "the tmux server stopped while the command ran (it got SIGHUP, exit \
                           code 129); the session is lost";
                rec.error = Some(format!(
                    "{why}; its output and exit code are kept; create a new session to continue"
                ));
                lost_session = Some(why.to_string());
                CommandStatus::Lost
            } else if exit.code == 0 {
                CommandStatus::Completed
            } else {
                CommandStatus::Failed
            };
        } else if state.never_started {
            rec.status = CommandStatus::Lost;
            rec.error = Some(
                "the command was never started (its caller stopped before typing it); nothing \
                 ran; run it again"
                    .to_string(),
            );
        } else if state.missing && !recently_created(rec) {
            rec.status = CommandStatus::Lost;
            rec.error = Some(format!(
                "the command directory {} is gone on the machine; the command's state cannot be \
                 recovered",
                rec.remote_state_dir
            ));
        } else if state.missing {
            // Its start is still in flight (the record is written before the directory).
            rec.status = CommandStatus::Running;
        } else if state.exit_garbled
            && state.alive
            && rec.mode == CommandMode::Wait
            && !state.holds_lock
        {
            // The session shell moved on, and the command's exit file holds what the command
            // wrote there: an error about this command; the session is fine (tmux says so).
            rec.status = CommandStatus::Failed;
            rec.end_reason = Some("exit_garbled".to_string());
            rec.error = Some(
                "the command wrote over its own exit file on the machine, so its exit code is \
                 unknown; the session goes on"
                    .to_string(),
            );
        } else if !state.alive {
            rec.status = CommandStatus::Lost;
            let why = match rec.mode {
                CommandMode::Wait => {
                    lost_session = Some("the tmux session is gone".to_string());
                    "the session's shell or tmux server stopped while the command ran; the \
                     session is lost; create a new session to continue"
                }
                CommandMode::Background => {
                    "the command's process group ended without recording an exit code (killed \
                     from outside)"
                }
            };
            rec.error = Some(why.to_string());
        } else if state.waiting_input {
            rec.status = CommandStatus::WaitingInput;
            rec.wait_timed_out = false;
        } else {
            rec.status = CommandStatus::Running;
            rec.wait_timed_out = waited;
        }
        self.copy_output(driver, rec).await?;
        rec.last_line = (rec.status == CommandStatus::WaitingInput).then(|| {
            let line = last_line(rec);
            match &state.screen_line {
                // Its output ended a line: the prompt, if any, went to the terminal itself.
                Some(screen) if line.is_empty() || output_ends_a_line(rec) => {
                    screen.trim_end().to_string()
                }
                _ => line,
            }
        });
        if rec.status.is_final() {
            self.write_log(rec)?;
        }
        self.save_command(rec)?;
        if let Some(why) = lost_session {
            self.mark_lost(&session.session_id, &why)?;
        }
        Ok(())
    }

    /// For `exec` and `command wait`: a command that lost its session is an error.
    fn lost_as_error(&self, rec: &CommandRecord) -> Result<()> {
        if rec.end_reason.as_deref() == Some("never_started") {
            // A start that arrived after another process had settled the command.
            return Err(Error::new(
                ErrorCode::Cancelled,
                format!(
                    "command {} was not started: {}",
                    rec.command_id,
                    rec.error
                        .as_deref()
                        .unwrap_or("it was settled as never started")
                ),
            ));
        }
        if rec.status == CommandStatus::Lost {
            let code = rec
                .exit_code
                .map(|c| format!(" (exit code {c})"))
                .unwrap_or_default();
            return Err(Error::new(
                ErrorCode::SessionLost,
                format!(
                    "session {} is lost while running command {}{code}: {}",
                    rec.session_id,
                    rec.command_id,
                    rec.error.as_deref().unwrap_or("its shell is gone")
                ),
            ));
        }
        Ok(())
    }

    /// Mirror the remote stdout/stderr into the local files and refresh the excerpts.
    async fn copy_output(&self, driver: &TmuxDriver, rec: &mut CommandRecord) -> Result<()> {
        crate::store::ensure_private_dir(&self.log_dir(&rec.session_id))?;
        let t = driver.transport().as_ref();
        for stream in [OutputStream::Stdout, OutputStream::Stderr] {
            let (remote, local, size) = match stream {
                OutputStream::Stdout => (
                    &rec.remote_stdout_file,
                    &rec.stdout_file_local,
                    rec.stdout_bytes,
                ),
                OutputStream::Stderr => (
                    &rec.remote_stderr_file,
                    &rec.stderr_file_local,
                    rec.stderr_bytes,
                ),
            };
            let local = PathBuf::from(local);
            let cap = self.options.output_cap;
            output::mirror(t.bytes(), remote, &local, size, cap).await?;
            let kept = size.min(cap);
            let (mut text, mut truncated) =
                output::excerpt(&local, kept, self.options.excerpt_bytes, &local)?;
            let capped = size > cap;
            if capped {
                let name = match stream {
                    OutputStream::Stdout => "stdout",
                    OutputStream::Stderr => "stderr",
                };
                text.push_str(&format!(
                    "\n{}\n",
                    output::capped_note(name, size, kept, remote)
                ));
                truncated = true;
            }
            match stream {
                OutputStream::Stdout => {
                    rec.stdout = text;
                    rec.stdout_truncated = truncated;
                    rec.stdout_capped = capped;
                }
                OutputStream::Stderr => {
                    rec.stderr = text;
                    rec.stderr_truncated = truncated;
                    rec.stderr_capped = capped;
                }
            }
        }
        Ok(())
    }

    fn write_log(&self, rec: &CommandRecord) -> Result<()> {
        let header = format!(
            "command_id: {}\nsession_id: {}\nmachine_id: {}\ncwd: {}\nmode: {}\nstatus: {}\n\
             exit_code: {}\nstarted_at: {}\nended_at: {}\nstdout_bytes: {}\nstderr_bytes: {}\n\
             ===== command =====\n{}\n",
            rec.command_id,
            rec.session_id,
            rec.machine_id,
            rec.cwd,
            rec.mode.as_str(),
            rec.status.as_str(),
            rec.exit_code.map(|c| c.to_string()).unwrap_or_default(),
            rec.started_at.as_deref().unwrap_or(""),
            rec.ended_at.as_deref().unwrap_or(""),
            rec.stdout_bytes,
            rec.stderr_bytes,
            rec.command,
        );
        let cap = self.options.output_cap;
        let note = |name, total: u64, remote: &str| {
            (total > cap).then(|| output::capped_note(name, total, cap, remote))
        };
        output::write_combined_log(
            Path::new(&rec.log_file_local),
            &header,
            &[
                output::LogPart {
                    name: "stdout",
                    local: Path::new(&rec.stdout_file_local),
                    capped_note: note("stdout", rec.stdout_bytes, &rec.remote_stdout_file),
                },
                output::LogPart {
                    name: "stderr",
                    local: Path::new(&rec.stderr_file_local),
                    capped_note: note("stderr", rec.stderr_bytes, &rec.remote_stderr_file),
                },
            ],
        )
    }

    /// The command's current state (refreshed from the machine while it runs; a stored final
    /// record is returned as is). `command result` is the same call.
    pub async fn command_show(&self, session_id: &str, command_id: &str) -> Result<CommandRecord> {
        self.refresh(session_id, command_id, Duration::ZERO).await
    }

    /// Wait up to `timeout` for the command to end; it keeps running when the wait runs out
    /// (`wait_timed_out`).
    pub async fn command_wait(
        &self,
        session_id: &str,
        command_id: &str,
        timeout: Duration,
    ) -> Result<CommandRecord> {
        self.explained(session_id, self.refresh(session_id, command_id, timeout))
            .await
    }

    async fn refresh(
        &self,
        session_id: &str,
        command_id: &str,
        wait: Duration,
    ) -> Result<CommandRecord> {
        let mut rec = self.load_command(session_id, command_id)?;
        if rec.status.is_final() {
            rec.wait_timed_out = false;
            return Ok(rec);
        }
        let session = self.load_session(session_id)?;
        let mut driver = self.driver(&session).await?;
        let started = Instant::now();
        let mode = run_mode(&rec);
        let look = if self.starter_gone(&rec) {
            driver.report_settling(command_id, mode).await
        } else {
            driver
                .wait_command(command_id, mode, wait.min(self.options.wait_chunk))
                .await
        };
        let mut state = match look {
            Ok(st) => st,
            Err(e) if is_link_error(&e) => {
                driver = self.reconnect(&session, &e).await?;
                driver
                    .wait_command(command_id, mode, Duration::ZERO)
                    .await?
            }
            Err(e) => return Err(e),
        };
        if !wait.is_zero() {
            state = self
                .wait_more(&session, &mut driver, &rec, state, Some(wait), started)
                .await?;
        }
        self.apply_state(&session, &driver, &mut rec, &state, !wait.is_zero())
            .await?;
        Ok(rec)
    }

    /// Stop a running command (foreground: Ctrl-C, then TERM, then KILL to its process group;
    /// background: TERM then KILL to its group). On a finished command: returns it unchanged.
    pub async fn command_stop(&self, session_id: &str, command_id: &str) -> Result<CommandRecord> {
        Ok(self
            .command_stop_outcome(session_id, command_id)
            .await?
            .record)
    }

    /// [`Engine::command_stop`], also saying whether the command had already ended before the
    /// stop (known from the record, or found on the machine when the record still said running).
    pub async fn command_stop_outcome(
        &self,
        session_id: &str,
        command_id: &str,
    ) -> Result<StopOutcome> {
        let mut rec = self.load_command(session_id, command_id)?;
        if rec.status.is_final() {
            rec.wait_timed_out = false;
            return Ok(StopOutcome {
                record: rec,
                already_finished: true,
            });
        }
        let session = self.load_session(session_id)?;
        let driver = self.driver(&session).await?;
        let state = driver.stop_command(command_id, run_mode(&rec)).await?;
        let already_finished = state.exit.as_ref().is_some_and(|e| e.state != "stopped");
        rec.stop_requested = !already_finished;
        self.apply_state(&session, &driver, &mut rec, &state, false)
            .await?;
        Ok(StopOutcome {
            record: rec,
            already_finished,
        })
    }

    /// Bring a session's unfinished command records up to date from the machine, so a listing
    /// shows what really happened: every non-final command is looked at once (report only, no
    /// waiting), a few at a time, the whole refresh bounded by `bound`. When the machine cannot
    /// be reached in time the stored records stay as they are and the reason is returned.
    pub async fn refresh_commands(&self, session_id: &str, bound: Duration) -> Result<Freshness> {
        let session = self.load_session(session_id)?;
        let pending: Vec<CommandRecord> = self
            .with_store(|s| store::commands::list(s, session_id))?
            .into_iter()
            .filter(|c| !c.status.is_final())
            .collect();
        if pending.is_empty() {
            return Ok(Freshness::Fresh);
        }
        match tokio::time::timeout(bound, self.refresh_each(&session, pending)).await {
            Ok(Ok(())) => Ok(Freshness::Fresh),
            Ok(Err(e)) if is_unreachable(&e) => Ok(Freshness::Stale(format!(
                "machine {} could not be reached to refresh running commands ({}); the \
                 statuses shown are the last ones recorded",
                session.machine_id, e.message
            ))),
            Ok(Err(e)) => Err(e),
            Err(_) => Ok(Freshness::Stale(format!(
                "machine {} did not answer within {} s; the statuses shown are the last ones \
                 recorded; try again, or allow a longer wait",
                session.machine_id,
                bound.as_secs_f64().ceil()
            ))),
        }
    }

    /// One report-only look per command through the session's driver, at most
    /// [`REFRESH_CONCURRENCY`] at once, each folded into its stored record.
    async fn refresh_each(
        &self,
        session: &SessionRecord,
        pending: Vec<CommandRecord>,
    ) -> Result<()> {
        use futures::stream::{self, TryStreamExt};
        let driver = self.driver(session).await?;
        let driver = &driver;
        stream::iter(pending.into_iter().map(Ok))
            .try_for_each_concurrent(REFRESH_CONCURRENCY, |mut rec| async move {
                let state = if self.starter_gone(&rec) {
                    driver
                        .report_settling(&rec.command_id, run_mode(&rec))
                        .await?
                } else {
                    driver
                        .wait_command(&rec.command_id, run_mode(&rec), Duration::ZERO)
                        .await?
                };
                self.apply_state(session, driver, &mut rec, &state, false)
                    .await
            })
            .await
    }

    /// A session's commands in order (stored records; running ones are not refreshed).
    pub fn command_list(&self, session_id: &str) -> Result<Vec<CommandRecord>> {
        self.load_session(session_id)?;
        self.with_store(|s| store::commands::list(s, session_id))
    }

    /// Ordered log metadata and paths of a session's commands.
    pub fn logs(&self, session_id: &str) -> Result<Vec<LogEntry>> {
        Ok(self
            .command_list(session_id)?
            .into_iter()
            .map(|c| LogEntry {
                seq: c.seq,
                command_id: c.command_id,
                command: c.command,
                mode: c.mode,
                status: c.status,
                exit_code: c.exit_code,
                started_at: c.started_at,
                ended_at: c.ended_at,
                stdout_bytes: c.stdout_bytes,
                stderr_bytes: c.stderr_bytes,
                log_file_local: c.log_file_local,
                stdout_file_local: c.stdout_file_local,
                stderr_file_local: c.stderr_file_local,
                remote_state_dir: c.remote_state_dir,
            })
            .collect())
    }

    /// Up to `max` bytes of a command's output from byte `offset`, read from the machine while
    /// it runs (idempotent: the same offset gives the same bytes), from the local copy after.
    pub async fn read_output(
        &self,
        session_id: &str,
        command_id: &str,
        stream: OutputStream,
        offset: u64,
        max: usize,
    ) -> Result<Vec<u8>> {
        let rec = self.load_command(session_id, command_id)?;
        let (remote, local, size) = match stream {
            OutputStream::Stdout => (
                &rec.remote_stdout_file,
                &rec.stdout_file_local,
                rec.stdout_bytes,
            ),
            OutputStream::Stderr => (
                &rec.remote_stderr_file,
                &rec.stderr_file_local,
                rec.stderr_bytes,
            ),
        };
        let local = Path::new(local);
        // The local copy is a byte-exact prefix of the remote file (copied as records refresh,
        // and kept as streamed): what it has is read here, only the rest goes over the link. An
        // ended command's copy is complete (unless the link dropped then): no round trip, not
        // even for an empty stream.
        let have = output::local_len(local);
        let cap = self.options.output_cap;
        if offset < have || (rec.status.is_final() && have >= size.min(cap) && offset < cap) {
            return output::read_local(local, offset, max);
        }
        let session = self.load_session(session_id)?;
        let transport = self.connector.connect(&session.machine_id).await?;
        match transport.read_file_range(remote, offset, max).await {
            Ok(data) => {
                if let Err(e) = output::keep_read(local, offset, &data, cap) {
                    tracing::debug!("keeping streamed output locally failed: {e}");
                }
                Ok(data)
            }
            Err(e) if e.code == ErrorCode::RemoteNotFound => Ok(Vec::new()),
            Err(e) => Err(e),
        }
    }

    /// Wait (bounded by `timeout`) until a running command's stdout or stderr grows past the
    /// given sizes or it ends, then return its refreshed record. For progress streaming: the
    /// wait happens on the machine in one call (checking every 100 ms there).
    pub async fn wait_output(
        &self,
        session_id: &str,
        command_id: &str,
        stdout_offset: u64,
        stderr_offset: u64,
        timeout: Duration,
    ) -> Result<CommandRecord> {
        let rec = self.load_command(session_id, command_id)?;
        if rec.status.is_final() {
            return Ok(rec);
        }
        let session = self.load_session(session_id)?;
        let driver = self.driver(&session).await?;
        driver
            .wait_output(
                &rec.remote_state_dir,
                stdout_offset,
                stderr_offset,
                timeout,
                // Not when it is known to wait already: the wait would end at once.
                rec.mode == CommandMode::Wait && rec.status != CommandStatus::WaitingInput,
            )
            .await?;
        self.command_show(session_id, command_id).await
    }
}
