//! tmux session driver and the command wrapper. (issue 4)
//!
//! One remote-runner session is one tmux session on a private server socket (`tmux -L <socket>`,
//! default [`DEFAULT_SOCKET`]), started with `-f /dev/null` so the user's tmux.conf plays no part.
//! The pane runs `bash --noprofile --rcfile rr.sh -i`: the session script [`script`] sets
//! non-interactive defaults, a fixed prompt, history expansion off and the traps that record a
//! command's end however it ends (normal, Ctrl-C, `set -e`, `exit`).
//!
//! Everything here goes through [`Transport`] only: each operation is one small `sh` script run
//! with [`Transport::exec`], so the same code drives this host and an SSH host.
//!
//! Remote layout, under the session cwd:
//! - `.remote-runner/sessions/<session_id>/`: `rr.sh`, `shell.pid`, `transcript.raw` (pipe-pane),
//!   `busy` (a symlink to the command id holding the foreground lock).
//! - `.remote-runner/commands/<command_id>/`: `cmd.sh` (the command text), `started`, `stdout`,
//!   `stderr`, `pid` (background), `stop_requested`, `waiters/`, and `exit` (written last, atomically).

pub mod script;
pub mod state;

use std::sync::Arc;
use std::time::Duration;

use crate::error::{Error, ErrorCode, Result};
use crate::transport::{ExecOptions, ExecOutput, Transport, shell_quote};

pub use state::{CommandState, ExitInfo};

/// The tmux server socket name used unless configured otherwise (`tmux -L remote-runner`).
pub const DEFAULT_SOCKET: &str = "remote-runner";

/// Seconds to wait for each step of a stop (Ctrl-C, TERM) before escalating.
pub const STOP_GRACE_SECS: u64 = 3;

/// Where a session lives on its machine; everything needed to drive it again from any process.
#[derive(Debug, Clone)]
pub struct SessionPaths {
    pub tmux_path: String,
    pub socket: String,
    pub session_name: String,
    /// `<cwd>/.remote-runner/sessions/<session_id>`
    pub state_dir: String,
    /// `<cwd>/.remote-runner/commands`
    pub commands_dir: String,
}

impl SessionPaths {
    pub fn new(tmux_path: &str, socket: &str, session_id: &str, cwd: &str) -> SessionPaths {
        let base = format!("{}/.remote-runner", cwd.trim_end_matches('/'));
        SessionPaths {
            tmux_path: tmux_path.to_string(),
            socket: socket.to_string(),
            session_name: session_id.to_string(),
            state_dir: format!("{base}/sessions/{session_id}"),
            commands_dir: format!("{base}/commands"),
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

    /// Shell variable assignments every driver script starts with.
    fn prelude(&self) -> String {
        format!(
            "unset TMUX; T={}; S={}; SID={}; SD={}; CD={}\n",
            shell_quote(&self.tmux_path),
            shell_quote(&self.socket),
            shell_quote(&self.session_name),
            shell_quote(&self.state_dir),
            shell_quote(&self.commands_dir),
        )
    }

    fn target(&self) -> String {
        // `=name:` is an exact session match, its current window's active pane.
        format!("={}:", self.session_name)
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

/// Drives one tmux session through a transport.
#[derive(Clone)]
pub struct TmuxDriver {
    transport: Arc<dyn Transport>,
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

/// Find tmux and bash on the machine; `tmux_missing` with install advice when tmux is absent.
pub async fn locate_tools(transport: &dyn Transport) -> Result<(String, String)> {
    let out = run(
        transport,
        "command -v tmux || echo @missing; command -v bash || echo @missing",
        Duration::from_secs(30),
    )
    .await?;
    let text = out.stdout_lossy();
    let mut lines = text.lines();
    let tmux = lines.next().unwrap_or("@missing").trim().to_string();
    let bash = lines.next().unwrap_or("@missing").trim().to_string();
    if tmux == "@missing" || tmux.is_empty() {
        return Err(Error::new(
            ErrorCode::TmuxMissing,
            format!(
                "tmux is not installed on {}; install it (e.g. `apt-get install tmux`) and retry",
                transport.describe()
            ),
        ));
    }
    if bash == "@missing" || bash.is_empty() {
        return Err(Error::new(
            ErrorCode::RemoteError,
            format!(
                "bash is not installed on {}; sessions need bash, install it and retry",
                transport.describe()
            ),
        ));
    }
    Ok((tmux, bash))
}

/// Run a driver script, bounded by `limit`; a spawn failure or timeout is an error.
async fn run(transport: &dyn Transport, script: &str, limit: Duration) -> Result<ExecOutput> {
    transport
        .exec(
            script,
            ExecOptions {
                stdin: None,
                timeout: Some(limit),
                max_output: 1 << 20,
            },
        )
        .await
}

impl TmuxDriver {
    pub fn new(transport: Arc<dyn Transport>, paths: SessionPaths) -> TmuxDriver {
        TmuxDriver { transport, paths }
    }

    pub fn paths(&self) -> &SessionPaths {
        &self.paths
    }

    pub fn transport(&self) -> &Arc<dyn Transport> {
        &self.transport
    }

    async fn script(&self, body: &str, limit: Duration) -> Result<ExecOutput> {
        let text = format!("{}{body}", self.paths.prelude());
        run(self.transport.as_ref(), &text, limit).await
    }

    /// Create the remote directories, write the session script, start the tmux session with a
    /// transcript pipe, and wait (bounded) until the shell has read its rc file.
    pub async fn start(&self, bash_path: &str, cwd: &str, env: &[(String, String)]) -> Result<()> {
        let p = &self.paths;
        let check = format!("[ -d {} ] || echo @nocwd\n", shell_quote(cwd));
        let out = run(self.transport.as_ref(), &check, Duration::from_secs(30)).await?;
        if out.stdout_lossy().contains("@nocwd") {
            return Err(Error::new(
                ErrorCode::RemoteNotFound,
                format!(
                    "the session directory {cwd} does not exist on {}; create it or pass another --cwd",
                    self.transport.describe()
                ),
            ));
        }
        self.transport.create_dir_all(&p.state_dir, 0o700).await?;
        self.transport
            .create_dir_all(&p.commands_dir, 0o700)
            .await?;
        let text = script::render(p);
        self.transport
            .write_file(&p.script_path(), text.as_bytes(), 0o600)
            .await?;
        let env_args: String = env
            .iter()
            .map(|(k, v)| format!("-e {} ", shell_quote(&format!("{k}={v}"))))
            .collect();
        let body = format!(
            "\"$T\" -L \"$S\" -f /dev/null new-session -d -s \"$SID\" -x 200 -y 50 {env_args}-c {cwd} -- \
             {bash} --noprofile --norc \"$SD/rr.sh\" pane \\; \
             pipe-pane -o -t {target} {pipe} || exit 3\n\
             timeout 20 \"$T\" -L \"$S\" wait-for \"rr-$SID-ready\" || exit 4\n",
            cwd = shell_quote(cwd),
            bash = shell_quote(bash_path),
            target = shell_quote(&p.target()),
            pipe = shell_quote(&format!(
                "exec cat >> {}",
                shell_quote(&p.transcript_path())
            )),
        );
        let out = self.script(&body, Duration::from_secs(40)).await?;
        match out.status.code() {
            Some(0) => Ok(()),
            Some(4) => Err(Error::new(
                ErrorCode::RemoteError,
                format!(
                    "the session shell did not start within 20 s on {}; check that bash runs there \
                     (tmux said: {})",
                    self.transport.describe(),
                    out.stderr_lossy().trim()
                ),
            )),
            _ => Err(Error::new(
                ErrorCode::RemoteError,
                format!(
                    "tmux could not create the session on {}: {}; check `tmux -L {} ls` there",
                    self.transport.describe(),
                    out.stderr_lossy().trim(),
                    p.socket
                ),
            )),
        }
    }

    /// Start a command whose text the caller wrote to `<command dir>/cmd.sh`, in one round
    /// trip: take the foreground lock ([`state::take_lock`]), check that the terminal is at the shell (a program started with `session
    /// send` makes it busy; a 0.5 s grace covers the wrapper's own last helper finishing), then
    /// one tmux client types the one fixed line that sources the wrapper and waits up to `wait`
    /// for the command's end (foreground) or its launch (background); then report. A refused
    /// start removes the command directory. The script ignores hang-ups and broken pipes, so a
    /// caller killed mid-call cannot leave the lock taken with nothing typed. Every step but
    /// the one tmux client is a shell builtin: this is the hot path of every exec.
    pub async fn start_command(
        &self,
        command_id: &str,
        mode: RunMode,
        cwd: Option<&str>,
        wait: Duration,
    ) -> Result<StartOutcome> {
        let dir = self.paths.command_dir(command_id);
        let (verb, channel) = match mode {
            RunMode::Foreground => ("run", format!("rr-{command_id}")),
            RunMode::Background => ("bg", format!("rr-{command_id}-go")),
        };
        // Short: readline echoes every character of it (and the transcript pipe carries them).
        // The session shell expands the directory (a session script of any version takes it).
        let mut line = format!(
            " . \"$__rr_sdir/rr.sh\" {verb} \"$__rr_cdir/\"{}",
            shell_quote(command_id)
        );
        if let Some(cwd) = cwd {
            line.push(' ');
            line.push_str(&shell_quote(cwd));
        }
        let body = format!(
            "ID={id}; D={dir}\n\
             trap '' HUP PIPE INT TERM\n\
             {take_lock}\
             if [ -r \"$SD/shell.pid\" ] && read -r p < \"$SD/shell.pid\" && [ -r /proc/$p/stat ]; then\n\
               i=0\n\
               while read -r st < /proc/$p/stat; st=${{st##*) }}; set -- $st; \
                 [ \"$6\" != \"$p\" ] && [ \"$6\" -gt 0 ] 2>/dev/null; do\n\
                 if [ $i -ge 25 ]; then\n\
                   rm -rf \"$SD/busy\" \"$D\"; read -r n < /proc/$6/comm; echo \"@term $n\"; exit 0\n\
                 fi\n\
                 i=$((i+1)); sleep 0.02\n\
               done\n\
             fi\n\
             \"$T\" -L \"$S\" send-keys -t {target} C-e C-u \\; \
             send-keys -t {target} -l -- {line} \\; send-keys -t {target} Enter \\; \
             wait-for {channel} 2>/dev/null\n\
             if [ $? -ne 0 ] && [ ! -e \"$D/started\" ] \
               && ! \"$T\" -L \"$S\" has-session -t \"=$SID\" 2>/dev/null; then\n\
               rm -rf \"$SD/busy\" \"$D\"; echo @lost; exit 0\n\
             fi\n\
             echo @started\n\
             {report}",
            id = shell_quote(command_id),
            dir = shell_quote(&dir),
            target = shell_quote(&self.paths.target()),
            line = shell_quote(&line),
            channel = shell_quote(&channel),
            take_lock = state::take_lock(),
            report = state::report_script(mode),
        );
        let out = self.wait_bounded(&body, &channel, wait).await?;
        let stdout = out.stdout_lossy();
        let first = stdout.lines().next().unwrap_or("").trim();
        if first == "@started" {
            return state::parse(&out).map(StartOutcome::Started);
        }
        if first == "@lost" {
            return Ok(StartOutcome::Lost);
        }
        if let Some(owner) = first.strip_prefix("@busy ") {
            return Ok(StartOutcome::Busy(owner.to_string()));
        }
        if let Some(name) = first.strip_prefix("@term ") {
            return Ok(StartOutcome::TerminalBusy(name.to_string()));
        }
        Err(Error::new(
            ErrorCode::RemoteError,
            format!(
                "could not start the command in {dir} on {}: {}",
                self.transport.describe(),
                out.stderr_lossy().trim()
            ),
        ))
    }

    /// Run a script whose tmux client waits on `channel`, for at most `wait`: past it, signal
    /// the channel from a second call so the client returns and the script reports. The bound
    /// lives here rather than in a remote `timeout` process: no extra process on every exec's
    /// hot path. (A caller that dies mid-wait leaves the client waiting until the command
    /// signals the channel as it ends, or the session is destroyed.)
    async fn wait_bounded(&self, body: &str, channel: &str, wait: Duration) -> Result<ExecOutput> {
        let call = self.script(body, wait_limit(wait_secs(wait)));
        tokio::pin!(call);
        tokio::select! {
            out = &mut call => return out,
            _ = tokio::time::sleep(wait) => {}
        }
        let release = format!(
            "\"$T\" -L \"$S\" wait-for -S {} 2>/dev/null; exit 0\n",
            shell_quote(channel)
        );
        // A failed release (e.g. the link dropped) shows as the call's own error or limit.
        let _ = self.script(&release, Duration::from_secs(30)).await;
        call.await
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
        let body = if wait.is_zero() {
            format!("D={}\n{}", shell_quote(&dir), state::report_script(mode))
        } else {
            let alive = match mode {
                RunMode::Foreground => "\"$T\" -L \"$S\" has-session -t \"=$SID\" 2>/dev/null",
                RunMode::Background => {
                    "{ [ ! -f \"$D/pid\" ] || { read -r p < \"$D/pid\" && kill -0 \"$p\" 2>/dev/null; }; }"
                }
            };
            format!(
                "D={dir}; CH=rr-{id}-w$$\n\
                 [ -d \"$D\" ] && mkdir -p \"$D/waiters\" && : > \"$D/waiters/$CH\"\n\
                 if [ -d \"$D\" ] && [ ! -s \"$D/exit\" ] && {alive}; then\n\
                   timeout {secs} \"$T\" -L \"$S\" wait-for \"$CH\" 2>/dev/null; w=$?\n\
                   if [ $w -ne 0 ] && [ $w -ne 124 ] && [ ! -s \"$D/exit\" ] && [ -f \"$D/pid\" ]; then\n\
                     read -r p < \"$D/pid\"\n\
                     timeout {secs} sh -c 'while [ ! -s \"$1/exit\" ] && kill -0 \"$2\" 2>/dev/null; do sleep 0.2; done' _ \"$D\" \"$p\"\n\
                   fi\n\
                 fi\n\
                 rm -f \"$D/waiters/$CH\"\n\
                 {report}",
                dir = shell_quote(&dir),
                id = command_id,
                report = state::report_script(mode),
            )
        };
        let out = self.script(&body, wait_limit(secs)).await?;
        state::parse(&out)
    }

    /// Stop a running command, escalating: foreground Ctrl-C, then TERM and KILL to the
    /// terminal's foreground process group, and as a last resort KILL of the shell (the session
    /// is then lost); background TERM then KILL to its process group. No-op once it has ended.
    pub async fn stop_command(&self, command_id: &str, mode: RunMode) -> Result<CommandState> {
        let dir = self.paths.command_dir(command_id);
        let g = STOP_GRACE_SECS;
        // Wait for the exit file on our own channel; poll only if the channel itself failed.
        let wait = format!(
            "{{ [ -s \"$D/exit\" ] || {{ timeout {g} \"$T\" -L \"$S\" wait-for \"$CH\" 2>/dev/null; w=$?; \
             if [ $w -ne 0 ] && [ $w -ne 124 ]; then i=0; while [ ! -s \"$D/exit\" ] && [ $i -lt {polls} ]; \
             do sleep 0.1; i=$((i+1)); done; fi; }}; }}",
            polls = g * 10
        );
        let steps = match mode {
            RunMode::Foreground => format!(
                "\"$T\" -L \"$S\" send-keys -t {target} C-c 2>/dev/null\n\
                 {wait}\n\
                 if [ ! -s \"$D/exit\" ] && read -r p < \"$SD/shell.pid\" && [ -r /proc/$p/stat ]; then\n\
                   read -r st < /proc/$p/stat; st=${{st##*) }}; set -- $st; fg=$6\n\
                   if [ \"$fg\" != \"$p\" ] && [ \"$fg\" -gt 0 ] 2>/dev/null; then\n\
                     kill -TERM \"-$fg\" 2>/dev/null; {wait}\n\
                     [ -s \"$D/exit\" ] || {{ kill -KILL \"-$fg\" 2>/dev/null; {wait}; }}\n\
                   fi\n\
                   [ -s \"$D/exit\" ] || {{ kill -KILL \"$p\" 2>/dev/null; {wait}; }}\n\
                 fi\n",
                target = shell_quote(&self.paths.target()),
            ),
            RunMode::Background => format!(
                "i=0; while [ ! -f \"$D/pid\" ] && [ ! -s \"$D/exit\" ] && [ $i -lt 50 ]; do sleep 0.1; i=$((i+1)); done\n\
                 if [ ! -s \"$D/exit\" ] && read -r p < \"$D/pid\"; then\n\
                   kill -TERM \"-$p\" 2>/dev/null; {wait}\n\
                   if [ ! -s \"$D/exit\" ]; then\n\
                     kill -KILL \"-$p\" 2>/dev/null; sleep 0.1\n\
                     if [ ! -s \"$D/exit\" ]; then\n\
                       printf 'code=137 how=killed state=stopped ended=%s\\n' \"$(date +%s.%N)\" > \"$D/exit.tmp\" && mv -f \"$D/exit.tmp\" \"$D/exit\"\n\
                     fi\n\
                   fi\n\
                   i=0; while kill -0 \"-$p\" 2>/dev/null && [ $i -lt {polls} ]; do sleep 0.1; i=$((i+1)); done\n\
                   kill -KILL \"-$p\" 2>/dev/null\n\
                 fi\n",
                polls = g * 10
            ),
        };
        let body = format!(
            "D={dir}; CH=rr-{id}-s$$\n\
             if [ ! -s \"$D/exit\" ] && [ -d \"$D\" ]; then\n\
               : > \"$D/stop_requested\"; mkdir -p \"$D/waiters\" && : > \"$D/waiters/$CH\"\n\
               {steps}\
               rm -f \"$D/waiters/$CH\"\n\
             fi\n\
             {report}",
            dir = shell_quote(&dir),
            id = command_id,
            report = state::report_script(mode),
        );
        let out = self.script(&body, Duration::from_secs(g * 8 + 30)).await?;
        state::parse(&out)
    }

    /// Paste `data` into the pane as typed input (through a tmux buffer fed on stdin, so the
    /// text never appears in a process's argv), optionally followed by Enter.
    pub async fn send_input(&self, data: &[u8], enter: bool) -> Result<()> {
        let target = shell_quote(&self.paths.target());
        let buffer = format!("rr-send-{}", uuid::Uuid::new_v4().simple());
        let mut body =
            String::from("\"$T\" -L \"$S\" has-session -t \"=$SID\" 2>/dev/null || exit 5\n");
        if !data.is_empty() {
            body.push_str(&format!(
                "\"$T\" -L \"$S\" load-buffer -b {buffer} - \\; paste-buffer -d -b {buffer} -t {target} || exit 6\n"
            ));
        }
        if enter {
            body.push_str(&format!(
                "\"$T\" -L \"$S\" send-keys -t {target} Enter || exit 6\n"
            ));
        }
        let text = format!("{}{body}", self.paths.prelude());
        let out = self
            .transport
            .exec(
                &text,
                ExecOptions {
                    stdin: Some(data.to_vec()),
                    timeout: Some(Duration::from_secs(30)),
                    max_output: 1 << 16,
                },
            )
            .await?;
        self.check_pane_op(&out, "send input to")
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
                    out.stderr_lossy().trim()
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
        let target = shell_quote(&self.paths.target());
        let body = format!(
            "\"$T\" -L \"$S\" has-session -t \"=$SID\" 2>/dev/null || exit 5\n\
             \"$T\" -L \"$S\" display-message -p -t {target} '#{{pane_width}} #{{pane_height}}' \\; \
             capture-pane -p -t {target} || exit 6\n"
        );
        let out = self.script(&body, Duration::from_secs(30)).await?;
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
        let body = format!(
            "\"$T\" -L \"$S\" has-session -t \"=$SID\" 2>/dev/null || exit 5\n\
             \"$T\" -L \"$S\" resize-window -t {target} -x {cols} -y {rows} || exit 6\n",
            target = shell_quote(&self.paths.target())
        );
        let out = self.script(&body, Duration::from_secs(30)).await?;
        self.check_pane_op(&out, "resize")
    }

    /// Whether the tmux session exists.
    pub async fn is_alive(&self) -> Result<bool> {
        let out = self
            .script(
                "\"$T\" -L \"$S\" has-session -t \"=$SID\" 2>/dev/null",
                Duration::from_secs(30),
            )
            .await?;
        Ok(out.status.success())
    }

    /// Kill the tmux session (the shell and its foreground job). Idempotent.
    pub async fn kill(&self) -> Result<()> {
        self.script(
            "\"$T\" -L \"$S\" kill-session -t \"=$SID\" 2>/dev/null; exit 0",
            Duration::from_secs(30),
        )
        .await
        .map(|_| ())
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
