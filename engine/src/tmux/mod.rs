//! tmux session driver and the command wrapper.
//!
//! One remote-runner session is one tmux session on a tmux server of its own
//! (`tmux -L <socket>-<session id>`, [`session_socket`], default prefix [`DEFAULT_SOCKET`]),
//! started with `-f /dev/null` so the user's tmux.conf plays no part.
//! The pane runs the session script [`script`] in `pane` mode, which runs
//! `bash --noprofile --rcfile rr.sh -i` and starts a fresh one when a command ends it. The rc file
//! gives the shell the user's login environment, non-interactive defaults, a fixed prompt,
//! history expansion off and the traps that record a command's end however it ends.
//!
//! Everything here goes through the control plane ([`crate::remote`]): each operation is one
//! verb of the control script, with every path, id and name passed as data, so the same code
//! drives this host and an SSH host whatever the login shell.
//!
//! Remote layout, under the state root (`${XDG_STATE_HOME:-~/.local/state}/remote-runner`, 0700,
//! never the session cwd):
//! - `sessions/<session_id>/`: `rr.sh`, `cwd` (the shell's directory, kept for a restart),
//!   `exports`, `login.env`, `shell.pid`, `transcript.raw` (pipe-pane), `busy` (the foreground
//!   lock, holding the owner's command id).
//! - `sessions/<session_id>/commands/<command_id>/`: `cmd.sh` (the command text), `cwd` (an
//!   override), `started`, `pwd`, `stdout`, `stderr`, `pid` (background), `stop_requested`,
//!   `waiters/`, `window.want`/`window`/`env.all` (a background command with its own
//!   terminal), and `exit` (written last).

pub mod control;
pub mod script;
pub mod state;

use std::sync::Arc;
use std::time::Duration;

use crate::error::{Error, ErrorCode, Result};
use crate::remote::Call;
use crate::remote::Remote;
use crate::transport::{ExecOutput, shell_quote};

pub use control::TerminalClient;
pub use state::{CommandState, ExitInfo};

/// The prefix of the tmux server socket names used unless configured otherwise
/// (`tmux -L remote-runner-<session id>`).
pub const DEFAULT_SOCKET: &str = "remote-runner";

/// The socket of a new session's own tmux server: `<base>-<session id>`.
///
/// One server per session, not one per account: a tmux server that crashes takes every session
/// it holds with it (tmux 3.3a segfaults when sessions with control clients attached are created
/// and killed concurrently, see docs/reliability.md), so a crash now costs at most the one
/// session, and no session of ours shares a server with another program's. A server costs the
/// machine about 1 MiB of memory of its own (4 MiB resident with the shared tmux binary) and no
/// CPU while idle. Sessions recorded by an older
/// version keep the socket in their record.
pub fn session_socket(base: &str, session_id: &str) -> String {
    format!("{base}-{session_id}")
}

/// Seconds to wait for each step of a stop (Ctrl-C, TERM) before escalating.
pub const STOP_GRACE_SECS: u64 = 3;

/// Where a session lives on its machine; everything needed to drive it again from any process.
#[derive(Debug, Clone)]
pub struct SessionPaths {
    pub tmux_path: String,
    pub socket: String,
    pub session_name: String,
    /// `<root>/sessions/<session_id>`
    pub state_dir: String,
    /// `<root>/sessions/<session_id>/commands`
    pub commands_dir: String,
}

impl SessionPaths {
    /// Paths of a session under the machine's state root ([`crate::remote::RemoteTools::root`]).
    pub fn new(tmux_path: &str, socket: &str, session_id: &str, root: &str) -> SessionPaths {
        let state_dir = format!("{}/sessions/{session_id}", root.trim_end_matches('/'));
        SessionPaths {
            tmux_path: tmux_path.to_string(),
            socket: socket.to_string(),
            session_name: session_id.to_string(),
            commands_dir: format!("{state_dir}/commands"),
            state_dir,
        }
    }

    pub fn command_dir(&self, command_id: &str) -> String {
        format!("{}/{command_id}", self.commands_dir)
    }

    pub fn script_path(&self) -> String {
        format!("{}/rr.sh", self.state_dir)
    }

    pub fn transcript_path(&self) -> String {
        format!("{}/transcript.raw", self.state_dir)
    }
}

/// Whether a command runs in the session shell or detached in its own process group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunMode {
    Foreground,
    Background,
}

/// The result of [`TmuxDriver::start_command`].
#[derive(Debug, Clone, PartialEq)]
pub enum StartOutcome {
    /// Typed into the shell; the state after the first wait.
    Started(CommandState),
    /// Another command holds the lock.
    Busy(String),
    /// Something started with `session send` runs in the terminal (its process name).
    TerminalBusy(String),
    /// The tmux session is gone.
    Lost,
}

/// Where output stood just before [`TmuxDriver::send_keys`] typed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SendMark {
    /// The foreground command running then (it holds the session's lock, no exit file yet).
    pub command_id: Option<String>,
    pub stdout_size: u64,
    pub stderr_size: u64,
    pub transcript_size: u64,
}

/// What one [`TmuxDriver::watch`] saw.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Watch {
    /// The two files' sizes at the end.
    pub sizes: [u64; 2],
    /// The exit file is there.
    pub ended: bool,
    /// The terminal's program sleeps reading the terminal.
    pub waiting_input: bool,
}

/// Drives one tmux session through a transport.
#[derive(Clone)]
pub struct TmuxDriver {
    transport: Arc<Remote>,
    paths: SessionPaths,
}

impl std::fmt::Debug for TmuxDriver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TmuxDriver")
            .field("transport", &self.transport.describe())
            .field("paths", &self.paths)
            .finish()
    }
}

/// How the session shell's login environment was resolved at start (see `rr.sh`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LoginEnv {
    /// The environment of a login shell of the user's own shell was applied.
    Applied,
    /// Resolving it ran past its bound; the session started without it.
    TimedOut,
    /// The login shell failed (status shown); the session started without it.
    Failed(String),
    /// Turned off for the machine.
    Off,
}

impl LoginEnv {
    fn parse(line: &str) -> LoginEnv {
        match line.trim() {
            "ok" => LoginEnv::Applied,
            "timeout" => LoginEnv::TimedOut,
            "off" => LoginEnv::Off,
            other => LoginEnv::Failed(other.trim_start_matches("failed").trim().to_string()),
        }
    }
}

/// What a command starts with beside its id and mode.
#[derive(Debug, Clone, Copy, Default)]
pub struct CommandStart<'a> {
    /// The command text, carried in the start call itself (the script creates the command
    /// directory and writes `cmd.sh`): saves the SFTP round trips of a small command. `None`:
    /// the caller wrote `<command dir>/cmd.sh` already.
    pub text: Option<&'a str>,
    /// A working directory for this command only.
    pub cwd: Option<&'a str>,
    /// Extra environment for this command only.
    pub env: &'a [(String, String)],
    /// Background: run in a tmux window of its own (its stdin that window's terminal).
    pub window: bool,
}

/// Largest command text carried in the start call; a larger one is written over SFTP (the
/// control script reads its parameters a line at a time).
pub const INLINE_TEXT_MAX: usize = 4096;

/// Options of [`TmuxDriver::start`].
#[derive(Debug, Clone)]
pub struct StartOptions<'a> {
    pub bash_path: &'a str,
    pub cwd: &'a str,
    /// Extra environment for the session shell (exported after the login environment).
    pub env: &'a [(String, String)],
    /// Give the shell the environment of a login shell of the user's own shell.
    pub login_env: bool,
    /// Bound on resolving the login environment.
    pub login_env_bound: Duration,
    /// Slurm: the words that run a job step on the session's node (`srun --jobid=J --overlap
    /// --quiet`); the tmux server is started as a step of its own ([`TmuxDriver::start_from`]).
    /// Empty for any other machine.
    pub node_step: &'a [String],
    /// The session's mark secret (see [`new_secret`]): the session shell puts it in every
    /// transcript mark, and the transcript composer takes only marks that hold it.
    pub mark_key: &'a str,
}

/// A fresh secret: 32 hex digits, 120 of their bits random (two v4 UUIDs' first halves, each
/// with its 4 fixed version bits). One per session for the transcript marks, one per foreground start for its end notice and
/// channel (see docs/security.md, "Marks and end notices").
pub fn new_secret() -> String {
    let a = uuid::Uuid::new_v4().simple().to_string();
    let b = uuid::Uuid::new_v4().simple().to_string();
    format!("{}{}", &a[..16], &b[..16])
}

impl TmuxDriver {
    pub fn new(transport: Arc<Remote>, paths: SessionPaths) -> TmuxDriver {
        TmuxDriver { transport, paths }
    }

    pub fn paths(&self) -> &SessionPaths {
        &self.paths
    }

    pub fn transport(&self) -> &Arc<Remote> {
        &self.transport
    }

    /// A control-script call with this session's parameters.
    fn call<'a>(&'a self, verb: &'a str) -> Call<'a> {
        let p = &self.paths;
        Call::new(verb)
            .param("T", p.tmux_path.as_str())
            .param("S", p.socket.as_str())
            .param("SID", p.session_name.as_str())
            .param("SD", p.state_dir.as_str())
            .param("CD", p.commands_dir.as_str())
    }

    /// Create the session's directories, write the session script, resolve the login
    /// environment (bounded), start the tmux session with a transcript pipe, and wait (bounded)
    /// until the shell has read its rc file.
    pub async fn start(&self, opts: &StartOptions<'_>) -> Result<LoginEnv> {
        self.start_from(self.transport.as_ref(), opts).await
    }

    /// [`TmuxDriver::start`] with the start call run on `via`: for a session on a Slurm node,
    /// the login node, which starts the node's tmux server as a job step that outlives the call
    /// (the driver's own transport reaches the node through short-lived steps).
    pub async fn start_from(&self, via: &Remote, opts: &StartOptions<'_>) -> Result<LoginEnv> {
        let p = &self.paths;
        let text = script::render(p, opts.env);
        let bound = opts.login_env_bound.as_secs().max(1);
        let out = self
            .call("start_session")
            .param("CWD", opts.cwd)
            .param("BASH", opts.bash_path)
            .param("COLS", "200")
            .param("ROWS", "50")
            .param("LOGINENV", if opts.login_env { "1" } else { "0" })
            .param("ENVBOUND", bound.to_string())
            .param("SESSION_ENV", script::posix_exports(opts.env))
            .param("NODE_STEP", opts.node_step.join("\n"))
            .param("MARK", opts.mark_key)
            .data(text.as_bytes())
            .limit(Duration::from_secs(bound + 60))
            .run(via)
            .await?;
        let stdout = out.stdout_lossy();
        if stdout.lines().any(|l| l == "@nocwd") {
            return Err(Error::new(
                ErrorCode::RemoteNotFound,
                format!(
                    "the session directory {:?} does not exist on {}; create it or pass another \
                     --cwd",
                    opts.cwd,
                    self.transport.describe()
                ),
            ));
        }
        if let Some(why) = stdout.lines().find_map(|l| l.strip_prefix("@insecure ")) {
            return Err(crate::remote::insecure_error(
                self.transport.bytes(),
                "refusing the session directory",
                why,
            ));
        }
        let env = stdout
            .lines()
            .find_map(|l| l.strip_prefix("env="))
            .map(LoginEnv::parse)
            .unwrap_or(LoginEnv::Off);
        match out.status.code() {
            Some(0) if stdout.lines().any(|l| l == "@ready") => Ok(env),
            Some(4) if stdout.lines().any(|l| l == "@server-gone") => Err(Error::new(
                ErrorCode::RemoteError,
                format!(
                    "the tmux server of the new session on {} ended before its shell was ready \
                     (it crashed or was killed; nothing else ran on it); create the session again",
                    self.transport.describe()
                ),
            )
            .retryable(true)),
            Some(4) => Err(Error::new(
                ErrorCode::RemoteError,
                format!(
                    "the session shell did not start in time on {}; check that bash runs there \
                     (tmux said: {})",
                    self.transport.describe(),
                    out.stderr_lossy().trim()
                ),
            )),
            _ => Err(Error::new(
                ErrorCode::RemoteError,
                format!(
                    "tmux could not create the session on {}: {}",
                    self.transport.describe(),
                    crate::util::printable_excerpt(&out.stderr, 400).trim(),
                ),
            )),
        }
    }

    /// Start a command whose text the caller wrote to `<command dir>/cmd.sh`, in one round
    /// trip: take the foreground lock, check that the terminal is at the shell (a program
    /// started with `session send` makes it busy; a 0.5 s grace covers the wrapper's own last
    /// helper finishing), then one tmux client types the one fixed line that sources the wrapper
    /// and waits up to `wait` for the command's end (foreground) or its launch (background);
    /// then report. A cwd override goes to the command directory as data: the typed line holds
    /// nothing but the command id. A refused start removes the command directory. The script
    /// ignores hang-ups and broken pipes, so a caller killed mid-call cannot leave the lock
    /// taken with nothing typed.
    pub async fn start_command(
        &self,
        command_id: &str,
        mode: RunMode,
        start: &CommandStart<'_>,
        wait: Duration,
    ) -> Result<StartOutcome> {
        let key = new_secret();
        let (verb, channel) = start_verb_and_channel(mode, command_id, &key);
        let call = self
            .start_call(command_id, mode, start)
            .param("LINE", typed_line(verb, command_id))
            .param("NKEY", key)
            .param("CH", channel.clone());
        let out = self.wait_bounded(call, &channel, wait).await?;
        self.start_outcome(command_id, &out)
    }

    /// [`TmuxDriver::start_command`] of a foreground command, typed through the session's
    /// control client ([`TerminalClient`]): the script takes the lock and checks the terminal
    /// (`@armed`), the client types the line, and the command's end reaches the client as a
    /// window rename. Waits for that up to [`INPUT_CHECK_AFTER`]; an end seen is taken from the
    /// rename's notice and what it leaves out from the command's files
    /// ([`TmuxDriver::ended_state`]), else (a command still running,
    /// perhaps reading its terminal) the script's bounded wait, which sees input waits, and
    /// its report say what happened.
    pub async fn start_command_typed(
        &self,
        client: &TerminalClient,
        command_id: &str,
        start: &CommandStart<'_>,
        wait: Duration,
    ) -> Result<StartOutcome> {
        let mode = RunMode::Foreground;
        // The end notice's secret: the session shell puts it in the window name that ends the
        // command, so a name printed by anything else (its own output, a stray process) is
        // not this command's end.
        let key = new_secret();
        let call = self
            .start_call(command_id, mode, start)
            .param("NKEY", key.clone())
            .param("ARMONLY", "1")
            .limit(wait_limit(0));
        let out = call.run(self.transport.as_ref()).await?;
        match out.stdout_lossy().lines().next().map(str::trim) {
            Some("@armed") => {}
            // A session started by an older version, whose shell ends no command with a notice.
            Some("@untyped") => return self.start_command(command_id, mode, start, wait).await,
            _ => return self.start_outcome(command_id, &out),
        }
        let name = format!("{}{command_id}-k{key}", control::NOTIFY_PREFIX);
        let ended = client.expect(&name);
        let line = typed_line("run", command_id);
        let first = wait.min(INPUT_CHECK_AFTER);
        let mut notice = None;
        let rest = match client.type_line(&line).await {
            Ok(()) => match tokio::time::timeout(first, ended).await {
                Ok(Ok(text)) => {
                    notice = control::EndNotice::parse(&text);
                    Duration::ZERO
                }
                _ => wait.saturating_sub(first),
            },
            Err(control::TypeFailure::NotTyped(why)) => {
                // tmux typed nothing: the script types it, as without a client.
                client.forget(&name);
                tracing::debug!("{command_id}: typing through the control client failed: {why}");
                let (_, channel) = start_verb_and_channel(mode, command_id, &key);
                let call = self
                    .call("type_command")
                    .param("ID", command_id)
                    .param("D", self.paths.command_dir(command_id))
                    .param("MODE", mode_param(mode))
                    .param("LINE", line)
                    .param("CH", channel.clone());
                let out = self.wait_bounded(call, &channel, wait).await?;
                return self.start_outcome(command_id, &out);
            }
            Err(control::TypeFailure::Unknown(why)) => {
                // Typed or not, it cannot be typed again: the script's wait says what happens.
                client.forget(&name);
                tracing::debug!("{command_id}: the control client failed while typing: {why}");
                wait
            }
        };
        if rest.is_zero()
            && let Some(state) = self.ended_state(command_id, notice).await?
        {
            return Ok(StartOutcome::Started(state));
        }
        let state = self.wait_command(command_id, mode, rest).await?;
        Ok(StartOutcome::Started(state))
    }

    /// The state of a command whose end was seen: what the script's report says of an ended
    /// command, without a script call. What the end `notice` says is taken from it; the rest
    /// (all of it without one) is read from the command's files (exit, started, pwd, the output
    /// sizes) at once over the transport's file access. `None` when the exit file does not
    /// hold an end line (the report then decides).
    async fn ended_state(
        &self,
        command_id: &str,
        notice: Option<control::EndNotice>,
    ) -> Result<Option<CommandState>> {
        let dir = self.paths.command_dir(command_id);
        let t = self.transport.bytes();
        let [exit, started, pwd, out, err] =
            ["exit", "started", "pwd", "stdout", "stderr"].map(|name| format!("{dir}/{name}"));
        let known = |text: &str| Ok(text.as_bytes().to_vec());
        let size = |s: Result<Option<crate::transport::FileStat>>| {
            s.ok().flatten().map_or(0, |s| s.size)
        };
        let n = notice.as_ref();
        let (exit, started, pwd, out, err) = tokio::join!(
            async {
                match n {
                    Some(n) => known(&n.exit_line),
                    None => t.read_file_range(&exit, 0, 4096).await,
                }
            },
            async {
                match n {
                    Some(n) => known(&n.started_line),
                    None => t.read_file_range(&started, 0, 4096).await,
                }
            },
            async {
                match n.and_then(|n| n.pwd.as_deref()) {
                    Some(pwd) => known(pwd),
                    None => t.read_file_range(&pwd, 0, 64 << 10).await,
                }
            },
            async {
                match n {
                    Some(n) if !n.stdout_written => 0,
                    _ => size(t.stat(&out).await),
                }
            },
            async {
                match n {
                    Some(n) if !n.stderr_written => 0,
                    _ => size(t.stat(&err).await),
                }
            },
        );
        let Ok(exit) = exit else {
            return Ok(None);
        };
        let exit = String::from_utf8_lossy(&exit).into_owned();
        let is_end = exit.lines().next().is_some_and(state::is_exit_line);
        if !is_end {
            return Ok(None);
        }
        let mut report = format!("@report\n{exit}");
        if !report.ends_with('\n') {
            report.push('\n');
        }
        report.push_str(&String::from_utf8_lossy(&started.unwrap_or_default()));
        report.push_str(&format!(
            "\n@sizes\n{out} {dir}/stdout\n{err} {dir}/stderr\n"
        ));
        if let Ok(pwd) = pwd
            && !pwd.is_empty()
        {
            report.push_str(&format!("@pwd\n{}\n", String::from_utf8_lossy(&pwd)));
        }
        let out = ExecOutput {
            stdout: report.into_bytes(),
            stderr: Vec::new(),
            stdout_truncated: false,
            stderr_truncated: false,
            status: crate::transport::ExitStatus::Code(0),
        };
        state::parse(&out).map(Some)
    }

    /// The `start_command` call, but for the line to type (which holds nothing but the
    /// command id) and the channel to wait on.
    fn start_call<'a>(
        &'a self,
        command_id: &'a str,
        mode: RunMode,
        start: &CommandStart<'a>,
    ) -> Call<'a> {
        let CommandStart {
            text,
            cwd,
            env,
            window,
        } = *start;
        let dir = self.paths.command_dir(command_id);
        let call = self
            .call("start_command")
            .param("ID", command_id)
            .param("D", dir)
            .param("MODE", mode_param(mode))
            .param("HASCWD", if cwd.is_some() { "1" } else { "0" })
            .param("BGWIN", if window { "1" } else { "0" })
            .param("CWD", cwd.unwrap_or(""))
            .param("CMDENV", script::posix_exports(env));
        match text {
            Some(text) => call.param("CMDTEXT", text),
            None => call,
        }
    }

    /// What a start call's reply says.
    fn start_outcome(&self, command_id: &str, out: &ExecOutput) -> Result<StartOutcome> {
        let stdout = out.stdout_lossy();
        let first = stdout.lines().next().unwrap_or("").trim();
        if first == "@started" {
            return state::parse(out).map(StartOutcome::Started);
        }
        if first == "@lost" {
            return Ok(StartOutcome::Lost);
        }
        // (Trimmed: a lock whose owner could not be read says `@busy` alone.)
        if let Some(owner) = first.strip_prefix("@busy") {
            return Ok(StartOutcome::Busy(owner.trim().to_string()));
        }
        if let Some(name) = first.strip_prefix("@term ") {
            return Ok(StartOutcome::TerminalBusy(name.to_string()));
        }
        Err(Error::new(
            ErrorCode::RemoteError,
            format!(
                "could not start the command in {} on {}: {}",
                self.paths.command_dir(command_id),
                self.transport.describe(),
                crate::util::printable_excerpt(&out.stderr, 400).trim()
            ),
        ))
    }

    /// Run a call whose tmux client waits on `channel`, for at most `wait`: past it, signal the
    /// channel from a second call so the client returns and the script reports. The bound lives
    /// here rather than in a remote `timeout` process: no extra process on every exec's hot
    /// path. (A caller that dies mid-wait leaves the client waiting until the command signals
    /// the channel as it ends, or the session is destroyed.)
    async fn wait_bounded(
        &self,
        call: Call<'_>,
        channel: &str,
        wait: Duration,
    ) -> Result<ExecOutput> {
        let call = call.limit(wait_limit(wait_secs(wait)));
        let run = call.run(self.transport.as_ref());
        tokio::pin!(run);
        tokio::select! {
            out = &mut run => return out,
            _ = tokio::time::sleep(wait) => {}
        }
        let release = self.call("signal").param("CH", channel);
        // A failed release (e.g. the link dropped) shows as the call's own error or limit.
        let _ = release.run(self.transport.as_ref()).await;
        run.await
    }

    /// Wait up to `wait` for a command's end, on a waiter channel of its own (so any number of
    /// waiters in any processes are all woken), and report its state. `wait` zero: report only.
    pub async fn wait_command(
        &self,
        command_id: &str,
        mode: RunMode,
        wait: Duration,
    ) -> Result<CommandState> {
        let dir = self.paths.command_dir(command_id);
        let secs = wait_secs(wait);
        let verb = if wait.is_zero() {
            "report"
        } else {
            "wait_command"
        };
        let out = self
            .call(verb)
            .param("ID", command_id)
            .param("D", dir.as_str())
            .param("MODE", mode_param(mode))
            .param("SECS", secs.to_string())
            .limit(wait_limit(secs))
            .run(self.transport.as_ref())
            .await?;
        state::parse(&out)
    }

    /// Report a command's state after settling it, when it has not started and its start
    /// never claimed it (the caller knows the process that recorded it is gone): it is then
    /// recorded as ended, `never_started`, and a start arriving late refuses to run it.
    pub async fn report_settling(&self, command_id: &str, mode: RunMode) -> Result<CommandState> {
        let dir = self.paths.command_dir(command_id);
        let out = self
            .call("report")
            .param("ID", command_id)
            .param("D", dir.as_str())
            .param("MODE", mode_param(mode))
            .param("SECS", "0")
            .param("SETTLE", "1")
            .limit(wait_limit(0))
            .run(self.transport.as_ref())
            .await?;
        state::parse(&out)
    }

    /// Stop a running command, escalating: foreground Ctrl-C, then TERM and KILL to the
    /// terminal's foreground process group, and as a last resort KILL of the shell (the pane
    /// starts a fresh one); background TERM then KILL to its process group. No-op once it has
    /// ended.
    pub async fn stop_command(&self, command_id: &str, mode: RunMode) -> Result<CommandState> {
        let dir = self.paths.command_dir(command_id);
        let g = STOP_GRACE_SECS;
        let out = self
            .call("stop_command")
            .param("ID", command_id)
            .param("D", dir.as_str())
            .param("MODE", mode_param(mode))
            .param("GRACE", g.to_string())
            .limit(Duration::from_secs(g * 8 + 30))
            .run(self.transport.as_ref())
            .await?;
        state::parse(&out)
    }

    /// Wait (bounded) until a command ends or its output grows past the given sizes; with
    /// `input` (a foreground command), also until it sleeps reading the session's terminal.
    pub async fn wait_output(
        &self,
        command_dir: &str,
        stdout_offset: u64,
        stderr_offset: u64,
        wait: Duration,
        input: bool,
    ) -> Result<()> {
        let secs = wait.as_secs_f64().max(0.1);
        self.call("wait_output")
            .param("INPUT", if input { "1" } else { "0" })
            .param("TICKS", watch_ticks(wait).to_string())
            .param("D", command_dir)
            .param("OUT", stdout_offset.to_string())
            .param("ERR", stderr_offset.to_string())
            .param("SECS", format!("{secs:.1}"))
            .limit(wait + Duration::from_secs(30))
            .max_output(1 << 16)
            .run(self.transport.as_ref())
            .await
            .map(|_| ())
    }

    /// Remove the session's ended command directories beyond the newest `keep` (command ids
    /// are time-ordered); a command without an exit file is never removed.
    pub async fn prune_commands(&self, keep: usize) -> Result<()> {
        self.call("prune")
            .param("KEEP", keep.to_string())
            .limit(Duration::from_secs(120))
            .run(self.transport.as_ref())
            .await
            .map(|_| ())
    }

    /// Paste `data` into the pane as typed input (through a tmux buffer fed on stdin, so the
    /// text never appears in a process's argv), optionally followed by Enter.
    pub async fn send_input(&self, data: &[u8], enter: bool) -> Result<()> {
        self.send_keys(data, enter, &[]).await.map(|_| ())
    }

    /// [`TmuxDriver::send_input`], then the tmux key names `keys` (the caller checked them
    /// against its list: tmux types a string it does not know as a key literally), in one call
    /// that first notes where output stands: the foreground command and its output sizes, and
    /// the transcript's size.
    pub async fn send_keys(&self, data: &[u8], enter: bool, keys: &[&str]) -> Result<SendMark> {
        self.send_keys_to(None, data, enter, keys).await
    }

    /// [`TmuxDriver::send_keys`] into the window of the background command `command_id`
    /// (started with its own terminal) when given, else into the session's pane.
    pub async fn send_keys_to(
        &self,
        command_id: Option<&str>,
        data: &[u8],
        enter: bool,
        keys: &[&str],
    ) -> Result<SendMark> {
        let buffer = format!("rr-send-{}", uuid::Uuid::new_v4().simple());
        let dir = command_id.map(|id| self.paths.command_dir(id));
        let out = self
            .call("send")
            .param("BGDIR", dir.as_deref().unwrap_or(""))
            .param("BUF", buffer)
            .param("HASDATA", if data.is_empty() { "0" } else { "1" })
            .param("ENTER", if enter { "1" } else { "0" })
            .param("KEYS", keys.join("\n"))
            .data(data)
            .max_output(1 << 16)
            .run(self.transport.as_ref())
            .await?;
        if out.status.code() == Some(7) {
            return Err(Error::invalid(format!(
                "command {} has no terminal of its own (it was not started with --mode \
                 background --stdin, or it has ended); type into the session with send \
                 without a command id",
                command_id.unwrap_or("")
            )));
        }
        self.check_pane_op(&out, "send input to")?;
        let mut mark = SendMark::default();
        for line in out.stdout_lossy().lines() {
            match line.split_once('=') {
                Some(("owner", v)) if !v.is_empty() => mark.command_id = Some(v.to_string()),
                Some(("out", v)) => mark.stdout_size = v.trim().parse().unwrap_or(0),
                Some(("err", v)) => mark.stderr_size = v.trim().parse().unwrap_or(0),
                Some(("tr", v)) => mark.transcript_size = v.trim().parse().unwrap_or(0),
                _ => {}
            }
        }
        Ok(mark)
    }

    /// Wait up to `wait` until `files[0]` or `files[1]` grows past its offset, `exit_file`
    /// appears, or (with `end_on_input`) the terminal's program sleeps reading the terminal; one
    /// call, checking every 20 ms for the first half second, then every 100 ms.
    pub async fn watch(
        &self,
        files: [(&str, u64); 2],
        exit_file: Option<&str>,
        end_on_input: bool,
        wait: Duration,
    ) -> Result<Watch> {
        self.watch_in(None, 2, files, exit_file, end_on_input, wait)
            .await
    }

    /// [`TmuxDriver::watch`], the input wait seen in the terminal of the background command
    /// whose directory is `bg_dir` (started with its own window) when given; `calm`: how many
    /// checks without growth come before the input wait is looked at (more right after typing,
    /// so the typed input has reached the program).
    #[allow(clippy::too_many_arguments)]
    pub async fn watch_in(
        &self,
        bg_dir: Option<&str>,
        calm: u32,
        files: [(&str, u64); 2],
        exit_file: Option<&str>,
        end_on_input: bool,
        wait: Duration,
    ) -> Result<Watch> {
        let ticks = watch_ticks(wait);
        let out = self
            .call("watch")
            .param("F1", files[0].0)
            .param("O1", files[0].1.to_string())
            .param("F2", files[1].0)
            .param("O2", files[1].1.to_string())
            .param("EXIT", exit_file.unwrap_or(""))
            .param("INPUT", if end_on_input { "1" } else { "0" })
            .param("CALM", calm.to_string())
            .param(
                "LEADPID",
                bg_dir.map(|d| format!("{d}/pid")).unwrap_or_default(),
            )
            .param("TICKS", ticks.to_string())
            .limit(wait + Duration::from_secs(30))
            .max_output(1 << 16)
            .run(self.transport.as_ref())
            .await?;
        let text = out.stdout_lossy();
        let Some((_, report)) = text.split_once("@watch\n") else {
            return Err(Error::new(
                ErrorCode::RemoteError,
                format!(
                    "could not watch the session's output on {}: {}",
                    self.transport.describe(),
                    crate::util::printable_excerpt(&out.stderr, 400).trim()
                ),
            ));
        };
        let mut w = Watch::default();
        for line in report.lines() {
            match line.split_once('=') {
                Some(("s1", v)) => w.sizes[0] = v.parse().unwrap_or(0),
                Some(("s2", v)) => w.sizes[1] = v.parse().unwrap_or(0),
                Some(("exit", v)) => w.ended = v == "1",
                Some(("input", v)) => w.waiting_input = v == "1",
                _ => {}
            }
        }
        Ok(w)
    }

    fn check_pane_op(&self, out: &ExecOutput, what: &str) -> Result<()> {
        match out.status.code() {
            Some(0) => Ok(()),
            Some(5) => Err(self.lost_error()),
            _ => Err(Error::new(
                ErrorCode::RemoteError,
                format!(
                    "tmux could not {what} the session on {}: {}",
                    self.transport.describe(),
                    crate::util::printable_excerpt(&out.stderr, 400).trim()
                ),
            )),
        }
    }

    /// The error for a tmux session that is gone.
    pub fn lost_error(&self) -> Error {
        Error::new(
            ErrorCode::SessionLost,
            format!(
                "the session {} is gone on {} (its shell exited or the tmux server stopped); \
                 its records and logs are kept; create a new session to continue",
                self.paths.session_name,
                self.transport.describe()
            ),
        )
    }

    /// Snapshot of the visible screen: (cols, rows, text with one line per row).
    pub async fn capture_screen(&self) -> Result<(u16, u16, String)> {
        let out = self.call("capture").run(self.transport.as_ref()).await?;
        self.check_pane_op(&out, "capture")?;
        let text = out.stdout_lossy();
        let (first, rest) = text.split_once('\n').unwrap_or((&text, ""));
        let mut dims = first
            .split_whitespace()
            .map(|v| v.parse::<u16>().unwrap_or(0));
        let cols = dims.next().unwrap_or(0);
        let rows = dims.next().unwrap_or(0);
        Ok((cols, rows, rest.to_string()))
    }

    /// Resize the session's window.
    pub async fn resize(&self, cols: u16, rows: u16) -> Result<()> {
        if cols == 0 || rows == 0 {
            return Err(Error::invalid("terminal size must be at least 1x1"));
        }
        let out = self
            .call("resize")
            .param("COLS", cols.to_string())
            .param("ROWS", rows.to_string())
            .run(self.transport.as_ref())
            .await?;
        self.check_pane_op(&out, "resize")
    }

    /// Whether the tmux session exists.
    pub async fn is_alive(&self) -> Result<bool> {
        let out = self.call("alive").run(self.transport.as_ref()).await?;
        Ok(out.status.success())
    }

    /// End the tmux session (the shell and its foreground job) and remove the session's state
    /// directory on the machine. Idempotent. An error when the session is still there after.
    pub async fn kill(&self) -> Result<()> {
        self.end(true).await
    }

    /// [`TmuxDriver::kill`], keeping the session's remote state directory (logs, commands).
    pub async fn kill_keeping_state(&self) -> Result<()> {
        self.end(false).await
    }

    async fn end(&self, purge: bool) -> Result<()> {
        let out = self
            .call("kill")
            .param("PURGE", if purge { "1" } else { "0" })
            .run(self.transport.as_ref())
            .await?;
        if out.stdout_lossy().lines().any(|l| l == "@gone") {
            return Ok(());
        }
        Err(Error::new(
            ErrorCode::RemoteError,
            format!(
                "the tmux session {} is still running on {} after kill-session: {}",
                self.paths.session_name,
                self.transport.describe(),
                crate::util::printable_excerpt(&out.stderr, 400).trim()
            ),
        ))
    }
}

/// How long a typed command's end is awaited on its control client before the script's wait
/// takes over (which also sees a command that sleeps reading its terminal).
const INPUT_CHECK_AFTER: Duration = Duration::from_millis(300);

/// The line typed at the session shell's prompt for command `command_id`. Short: readline
/// echoes every character of it (and the transcript pipe carries them). `\builtin .`: an alias
/// or function the user named `.` or `source` cannot take it.
fn typed_line(verb: &str, command_id: &str) -> String {
    format!(
        " \\builtin . \"$__rr_sdir/rr.sh\" {verb} \"$__rr_cdir/\"{}",
        shell_quote(command_id)
    )
}

/// The verb of a command's typed line and the wait-for channel its start waits on: the end of a
/// foreground command, the launch of a background one.
/// The verb typed and the channel waited on; a foreground command's channel holds its notice
/// secret `key` (`rr-ID-kKEY`: the session shell signals it as the command ends).
fn start_verb_and_channel(mode: RunMode, command_id: &str, key: &str) -> (&'static str, String) {
    match mode {
        RunMode::Foreground => ("run", format!("rr-{command_id}-k{key}")),
        RunMode::Background => ("bg", format!("rr-{command_id}-go")),
    }
}

fn mode_param(mode: RunMode) -> &'static str {
    match mode {
        RunMode::Foreground => "fg",
        RunMode::Background => "bg",
    }
}

/// How many checks of the `watch` loop make `wait` (20 ms apart for the first half second,
/// then 100 ms).
fn watch_ticks(wait: Duration) -> u64 {
    let ms = wait.as_millis() as u64;
    if ms <= 500 {
        ms / 20
    } else {
        25 + (ms - 500) / 100
    }
}

/// Whole seconds for `timeout(1)`, at least 1.
fn wait_secs(wait: Duration) -> u64 {
    wait.as_secs_f64().ceil().max(1.0) as u64
}

/// The bound on the transport call that contains a wait of `secs`.
fn wait_limit(secs: u64) -> Duration {
    Duration::from_secs(secs + 30)
}
