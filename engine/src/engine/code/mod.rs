//! The code runtime: run a model-written program on a machine, as a fresh
//! process of its own, against host bindings, and get back `{value?, logs, error?}` (the
//! code-runtime seam, `docs/code-runtime.md`).
//!
//! One small runner script per language (`runner.js` under `node`, `runner.py` under `python3`)
//! is uploaded once by content hash to `<state root>/code/` on the machine (`prepare.sh`). Each
//! run is one streaming exec of `run.sh` (the control plane's `sh_stream_with`; the run's values
//! are its parameters, never script text), its own channel: the runner reads the request and
//! the settlements of binding calls on fd 4 (the channel's stdin) and writes binding calls and,
//! last, its result on fd 3 (the channel's stdout), JSON lines. The program's own stdin is
//! `/dev/null` and its fds 1 and 2 go to the channel's stderr, so nothing it prints is taken
//! for a protocol message; what the runner sends is checked here anyway (calls only to declared
//! bindings, results only of the seam's shape), because the program runs in the runner's
//! process and could write anything on fd 3.
//!
//! A run is sealed ([`Isolation::Sealed`], `run.sh`): no new privileges, its own mount namespace
//! in which the account's tmux servers, the connection keepers' sockets and the engine's state
//! root are not visible, its own PID namespace and `/proc`. Where the machine cannot seal a run,
//! weaker isolation is used only when the runtime's configuration allows it
//! ([`CodeConfig::allow_weak_isolation`]); otherwise runs are refused (`isolation_unavailable`).
//!
//! The run's process tree ends with it: the runner is the first process of a PID namespace of its
//! own where the machine allows unprivileged user namespaces, and in any case every process of
//! the run carries a per-run environment marker that is swept when the run ends or is stopped.
//!
//! Values stay JSON text end to end on the host (the `wire` module), so `-0`, integers of any size and
//! lone surrogates come back exactly as the runner wrote them.

mod wire;

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;
use sha2::{Digest, Sha256};
use tokio::sync::{OnceCell, mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use crate::error::{Error, ErrorCode, Result};
use crate::remote::Remote;
use crate::transport::{ExitStatus, StreamEvent};

pub use wire::{MAX_DEPTH, depth_path, raw_member};

const RUNNER_JS: &str = include_str!("runner.js");
const RUNNER_PY: &str = include_str!("runner.py");
/// The per-run wrapper (POSIX sh, shellchecked), run as the control script's `sh` verb with
/// the run's values as parameters (`CodeRuntime::run_params`).
pub const RUN_SH: &str = include_str!("run.sh");
/// The machine's preparation (POSIX sh, shellchecked): the runner directory, the interpreter,
/// `timeout(1)`, whether the runner is uploaded, whether PID namespaces work.
pub const PREPARE_SH: &str = include_str!("prepare.sh");

/// Exit status of `timeout(1)` when the budget expired.
const TIMEOUT_STATUS: i32 = 124;
/// Grace on top of the time budget before the host stops waiting for the machine's own bound.
const EXEC_GRACE: Duration = Duration::from_secs(10);
/// How long a run that settled may take to be gone (its sweep) before the host sweeps itself.
const END_GRACE: Duration = Duration::from_secs(3);
/// The longest line the runner may write on its channel (a binding argument, a result).
const MAX_LINE: usize = 256 << 20;
/// Room for the runner's own `output-limit` message on top of logs that fill the cap.
const OWN_LIMIT_ROOM: usize = 1024;
/// Bytes of the run's stray fd 1 and 2 output kept to explain a `worker-exit`.
const STDERR_KEEP: usize = 64 << 10;

/// The language programs are written in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Language {
    Javascript,
    Python,
}

impl Language {
    pub fn parse(s: &str) -> Result<Language> {
        match s {
            "javascript" | "js" => Ok(Language::Javascript),
            "python" | "py" => Ok(Language::Python),
            "typescript" | "ts" => Err(Error::new(
                ErrorCode::LanguageUnavailable,
                "typescript is not offered yet; use --language javascript",
            )),
            other => Err(Error::invalid(format!(
                "unknown language {other:?}; use javascript or python"
            ))),
        }
    }
    pub fn as_str(self) -> &'static str {
        match self {
            Language::Javascript => "javascript",
            Language::Python => "python",
        }
    }
    fn interpreter(self) -> &'static str {
        match self {
            Language::Javascript => "node",
            Language::Python => "python3",
        }
    }
    fn runner(self) -> (&'static str, &'static str) {
        match self {
            Language::Javascript => (RUNNER_JS, "js"),
            Language::Python => (RUNNER_PY, "py"),
        }
    }
}

/// The runtime's validated configuration: budgets and caps are never per-run knobs.
#[derive(Debug, Clone)]
pub struct CodeConfig {
    pub language: Language,
    /// Wall-clock budget of one run.
    pub time_budget: Duration,
    /// Cap on the serialized logs plus the value (or failure message) of one run, in bytes.
    pub output_cap: usize,
    /// Directory the program runs in (default: the account's home).
    pub cwd: Option<String>,
    /// Largest file the run may write, in bytes (`RLIMIT_FSIZE`); `None`: the machine's.
    pub max_file_size: Option<u64>,
    /// Address space of each of the run's processes, in bytes (`RLIMIT_AS`); `None`: the
    /// machine's.
    pub max_memory: Option<u64>,
    /// Processes the account may have while the run's processes fork (`RLIMIT_NPROC`, counted
    /// per account by the kernel); `None`: the machine's.
    pub max_processes: Option<u64>,
    /// Run with weaker isolation than [`Isolation::Sealed`] where the machine cannot seal a
    /// run; otherwise such a machine's runs are refused with `isolation_unavailable`.
    pub allow_weak_isolation: bool,
}

impl CodeConfig {
    pub fn new(language: Language) -> CodeConfig {
        CodeConfig {
            language,
            time_budget: Duration::from_secs(30),
            output_cap: 1 << 20,
            cwd: None,
            max_file_size: None,
            max_memory: None,
            max_processes: None,
            allow_weak_isolation: false,
        }
    }

    pub fn validate(&self) -> Result<()> {
        if self.time_budget < Duration::from_secs(1)
            || self.time_budget > Duration::from_secs(24 * 3600)
        {
            return Err(Error::invalid(
                "the time budget must be between 1 second and 24 hours",
            ));
        }
        if self.output_cap < 16 || self.output_cap > 256 << 20 {
            return Err(Error::invalid(
                "the output cap must be between 16 bytes and 256 MiB",
            ));
        }
        if matches!(self.max_file_size, Some(n) if n < 512) {
            return Err(Error::invalid(
                "the file size cap must be at least 512 bytes",
            ));
        }
        if matches!(self.max_memory, Some(n) if n < 16 << 20) {
            return Err(Error::invalid(
                "the memory cap must be at least 16 MiB (node needs far more: give it some GiB)",
            ));
        }
        if matches!(self.max_processes, Some(n) if n < 1) {
            return Err(Error::invalid("the process cap must be at least 1"));
        }
        Ok(())
    }
}

/// One namespace of host functions, visible to the program as a global object.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct CodeBindingNamespace {
    pub global: String,
    pub functions: Vec<String>,
    #[serde(
        rename = "errorClass",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub error_class: Option<CodeBindingErrorClass>,
}

#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct CodeBindingErrorClass {
    pub name: String,
    #[serde(rename = "memberNameProperty")]
    pub member_name_property: String,
}

fn is_identifier(s: &str) -> bool {
    let mut chars = s.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_' || c == '$')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '$')
}

const PY_KEYWORDS: [&str; 35] = [
    "False", "None", "True", "and", "as", "assert", "async", "await", "break", "class", "continue",
    "def", "del", "elif", "else", "except", "finally", "for", "from", "global", "if", "import",
    "in", "is", "lambda", "nonlocal", "not", "or", "pass", "raise", "return", "try", "while",
    "with", "yield",
];

/// Check the bindings of one run for `language`: usable identifiers, no global declared twice,
/// no error class named like a global. Bad declarations are the caller's error (`invalid`).
pub fn validate_bindings(bindings: &[CodeBindingNamespace], language: Language) -> Result<()> {
    let mut names = HashSet::new();
    for b in bindings {
        b.validate()?;
        if let Some(ec) = &b.error_class {
            let p = ec.member_name_property.as_str();
            if language == Language::Python
                && (p == "args" || (p.len() > 4 && p.starts_with("__") && p.ends_with("__")))
            {
                return Err(Error::invalid(format!(
                    "errorClass memberNameProperty {p:?} is a Python exception's own attribute \
                     (args and __dunder__ names cannot hold the member name); choose another name"
                )));
            }
        }
        let mut own = vec![b.global.as_str()];
        own.extend(b.error_class.as_ref().map(|e| e.name.as_str()));
        for name in own {
            if language == Language::Python && (name.contains('$') || PY_KEYWORDS.contains(&name)) {
                return Err(Error::invalid(format!(
                    "{name:?} is not a usable Python identifier (no $, not a keyword); rename \
                     the binding global or errorClass"
                )));
            }
            if !names.insert(name) {
                return Err(Error::invalid(format!(
                    "{name:?} is declared twice (as a binding global or errorClass name); give \
                     each its own name"
                )));
            }
        }
    }
    Ok(())
}

impl CodeBindingNamespace {
    pub fn validate(&self) -> Result<()> {
        if !is_identifier(&self.global) {
            return Err(Error::invalid(format!(
                "binding global {:?} is not a usable identifier (letters, digits, _ and $)",
                self.global
            )));
        }
        if let Some(ec) = &self.error_class {
            if !is_identifier(&ec.name) {
                return Err(Error::invalid(format!(
                    "errorClass name {:?} is not a usable identifier",
                    ec.name
                )));
            }
            if ec.member_name_property.is_empty()
                || ["name", "message", "stack"].contains(&ec.member_name_property.as_str())
            {
                return Err(Error::invalid(format!(
                    "errorClass memberNameProperty {:?} must be non-empty and not name, message \
                     or stack",
                    ec.member_name_property
                )));
            }
        }
        Ok(())
    }
}

/// A binding call from a running program, to be settled by the host.
#[derive(Debug)]
pub struct CodeCall {
    pub call_id: String,
    pub global: String,
    pub function: String,
    /// The argument as lossless JSON text.
    pub args: String,
    /// Settle the call: `Ok(json text)` resolves it, `Err(message)` rejects it.
    pub reply: oneshot::Sender<std::result::Result<String, String>>,
}

/// One run's outcome: the `CodeRunResult` as lossless JSON text.
#[derive(Debug, Clone)]
pub struct CodeRunResult {
    /// `{"logs":[...],"value"?:...,"error"?:{"kind","message"}}`.
    pub json: String,
    /// `error.kind` when the run failed.
    pub error_kind: Option<String>,
}

impl CodeRunResult {
    fn failure(kind: &str, message: impl Into<String>) -> CodeRunResult {
        let message: String = message.into();
        CodeRunResult {
            json: json!({"logs": [], "error": {"kind": kind, "message": message}}).to_string(),
            error_kind: Some(kind.to_string()),
        }
    }
}

/// How a machine isolates each run, probed once per runtime (`prepare.sh`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Isolation {
    /// No new privileges, a mount namespace hiding the account's tmux servers, the keepers'
    /// sockets and the engine's state root, a PID namespace and `/proc` of its own.
    Sealed,
    /// Only a PID namespace of its own: the program can reach what the account can.
    PidOnly,
    /// No namespace: another process of the account (the process tree is swept by its marks).
    None,
}

impl Isolation {
    /// The stable name on the wire (`hello.sandbox`, `code run`'s `sandbox`).
    pub fn as_str(self) -> &'static str {
        match self {
            Isolation::Sealed => "sealed",
            Isolation::PidOnly => "pid-only",
            Isolation::None => "none",
        }
    }

    /// `run.sh`'s `rr_ns`.
    fn param(self) -> &'static str {
        match self {
            Isolation::Sealed => "sealed",
            Isolation::PidOnly => "pid",
            Isolation::None => "0",
        }
    }
}

struct Prepared {
    runner: String,
    /// How the machine isolates each run.
    isolation: Isolation,
    /// `prlimit(1)` can mark a run's processes with [`run_mark`] (`run.sh`).
    mark: bool,
}

/// The largest [`run_mark`].
const MARK_MAX: u64 = (1 << 41) - 1;

/// The run's mark: the hard limit on realtime CPU time (RLIMIT_RTTIME, microseconds) its
/// processes carry, which survives `env -i`, `setsid` and a new process group (`run.sh` sweeps
/// by it). Between 2^40 and [`MARK_MAX`] (12 to 25 days of realtime CPU time, which binds
/// nothing), distinct per run id.
fn run_mark(run_id: &str) -> u64 {
    let hash = Sha256::digest(run_id.as_bytes());
    let bits = u64::from_be_bytes(hash[..8].try_into().expect("8 bytes"));
    (1 << 40) | (bits >> 24)
}

/// A code runtime on one machine. Cheap to share; runs are independent processes.
pub struct CodeRuntime {
    transport: Arc<Remote>,
    config: CodeConfig,
    /// A directory of this host a sealed run also hides (the engine's own state dir, when the
    /// machine is this host: its keepers' sockets).
    hide: Option<String>,
    prepared: OnceCell<Prepared>,
}

/// A settled binding call on its way back to the runner.
type Settled = (u64, std::result::Result<String, String>);

impl CodeRuntime {
    /// A runtime on `transport`: for the benchmarks only (a face has no transport to give; it
    /// calls [`Engine::code_runtime`](crate::engine::Engine::code_runtime)).
    #[cfg(feature = "testing")]
    #[doc(hidden)]
    pub fn new(transport: Arc<Remote>, config: CodeConfig) -> Result<CodeRuntime> {
        Self::on(transport, config)
    }

    /// A runtime on `transport` ([`Engine::code_runtime`](crate::engine::Engine::code_runtime)).
    pub(crate) fn on(transport: Arc<Remote>, config: CodeConfig) -> Result<CodeRuntime> {
        config.validate()?;
        Ok(CodeRuntime {
            transport,
            config,
            hide: None,
            prepared: OnceCell::new(),
        })
    }

    /// Hide `dir` from sealed runs too (a directory on the machine, e.g. the engine's own state
    /// dir when the machine is this host).
    pub(crate) fn hiding(mut self, dir: String) -> CodeRuntime {
        self.hide = Some(dir);
        self
    }

    pub fn language(&self) -> Language {
        self.config.language
    }

    /// The execution substrate, the seam's diagnostic label only; [`CodeRuntime::sandbox`] says
    /// what a run can reach.
    pub fn isolation(&self) -> &'static str {
        "process"
    }

    /// How runs are isolated on this machine (prepares the machine on the first call). A
    /// machine that cannot seal a run is `isolation_unavailable` unless the configuration
    /// allows weaker isolation.
    pub async fn sandbox(&self) -> Result<Isolation> {
        let isolation = self.prepare().await?.isolation;
        if isolation != Isolation::Sealed && !self.config.allow_weak_isolation {
            return Err(Error::new(
                ErrorCode::IsolationUnavailable,
                format!(
                    "{} cannot seal a code run (isolation there: {}; a sealed run needs \
                     unprivileged user namespaces, util-linux 2.38+ unshare, setpriv and mount), \
                     so a program could reach the account's tmux servers and the engine's state. \
                     Allow unprivileged user namespaces on the machine, or pass \
                     --allow-weak-isolation to run with what it offers",
                    self.transport.describe(),
                    isolation.as_str()
                ),
            ));
        }
        Ok(isolation)
    }

    /// Find the interpreter, probe for PID namespaces and upload the runner (once per content
    /// hash per machine).
    async fn prepare(&self) -> Result<&Prepared> {
        self.prepared
            .get_or_try_init(|| async {
                let lang = self.config.language;
                let (source, ext) = lang.runner();
                let hash = hex::encode(Sha256::digest(source.as_bytes()));
                let name = format!("runner-{}.{ext}", &hash[..16]);
                let out = crate::remote::Call::new("sh")
                    .param("RR_SCRIPT", PREPARE_SH)
                    .param("rr_interp", lang.interpreter())
                    .param("rr_runner_name", name.as_str())
                    .param("rr_mark_max", MARK_MAX.to_string())
                    .limit(Duration::from_secs(60))
                    .max_output(8 << 20)
                    .run(self.transport.as_ref())
                    .await?;
                let text = out.stdout_lossy();
                let mut lines = text.lines();
                let first = lines.next().unwrap_or("");
                match first {
                    "missing-interpreter" => {
                        return Err(Error::new(
                            ErrorCode::LanguageUnavailable,
                            format!(
                                "{} is not on the machine's PATH; install it to run {} programs \
                                 there",
                                lang.interpreter(),
                                lang.as_str()
                            ),
                        ));
                    }
                    "missing-timeout" => {
                        return Err(Error::new(
                            ErrorCode::RemoteError,
                            "timeout(1) (coreutils) is not on the machine's PATH; the code \
                             runtime needs it to bound runs",
                        ));
                    }
                    _ => {}
                }
                if !out.status.success() || !first.starts_with('/') {
                    return Err(Error::new(
                        ErrorCode::RemoteError,
                        format!(
                            "cannot prepare the code runtime directory on the machine: {}",
                            out.stderr_lossy().trim()
                        ),
                    ));
                }
                let dir = first.to_string();
                let runner = format!("{dir}/{name}");
                if lines.next() != Some("present") {
                    self.transport
                        .write_file(&runner, source.as_bytes(), 0o600)
                        .await?;
                }
                let isolation = match lines.next() {
                    _ if std::env::var_os("REMOTE_RUNNER_CODE_NO_PIDNS").is_some() => {
                        Isolation::None
                    }
                    Some("sealed") => Isolation::Sealed,
                    Some("pid") => Isolation::PidOnly,
                    _ => Isolation::None,
                };
                let mark = lines.next() == Some("mark");
                Ok(Prepared {
                    runner,
                    isolation,
                    mark,
                })
            })
            .await
    }

    /// The parameters of `run.sh` for one run: shell variables on the machine, never script
    /// text. `run.sh` checks the runner's owner and mode (and those of every directory above
    /// it) right before it starts it, as the bootstrap line checks the control script.
    fn run_params(
        &self,
        prepared: &Prepared,
        run_id: &str,
        sweep_only: bool,
    ) -> Vec<(&'static str, String)> {
        let c = &self.config;
        let opt = |v: Option<u64>| v.map(|n| n.to_string()).unwrap_or_default();
        vec![
            ("rr_run", run_id.to_string()),
            (
                "rr_mark",
                if prepared.mark {
                    run_mark(run_id).to_string()
                } else {
                    String::new()
                },
            ),
            ("rr_budget", format!("{:.3}", c.time_budget.as_secs_f64())),
            ("rr_interp", c.language.interpreter().to_string()),
            ("rr_runner", prepared.runner.clone()),
            ("rr_cwd", c.cwd.clone().unwrap_or_default()),
            ("rr_ns", prepared.isolation.param().to_string()),
            ("rr_hide", self.hide.clone().unwrap_or_default()),
            ("rr_fsize", opt(c.max_file_size.map(|n| n / 512))),
            ("rr_mem", opt(c.max_memory.map(|n| n / 1024))),
            ("rr_nproc", opt(c.max_processes)),
            ("rr_sweep_only", u8::from(sweep_only).to_string()),
        ]
    }

    /// Run one program. Never fails for the program's sake: every program outcome is a
    /// [`CodeRunResult`]; `Err` means the runtime itself could not start (bad bindings, no
    /// interpreter, machine unreachable before the run).
    ///
    /// `calls`: where binding calls go (required when `bindings` is non-empty). `abort`: the
    /// host's abort; the process tree is stopped even in a tight loop.
    pub async fn run(
        &self,
        program: &str,
        bindings: &[CodeBindingNamespace],
        calls: Option<mpsc::UnboundedSender<CodeCall>>,
        abort: CancellationToken,
    ) -> Result<CodeRunResult> {
        validate_bindings(bindings, self.config.language)?;
        self.sandbox().await?;
        let prepared = self.prepare().await?;
        let run_id = crate::util::new_id("code");
        let params = self.run_params(prepared, &run_id, false);
        let Some((mut stream, early)) =
            crate::remote::sh_stream_with(self.transport.as_ref(), RUN_SH, &params).await?
        else {
            return Err(Error::new(
                ErrorCode::RemoteError,
                format!(
                    "cannot open a channel for the run on {} (the account's startup files print \
                     too much, or the transport cannot stream)",
                    self.transport.describe()
                ),
            ));
        };
        let request = json!({
            "program": program,
            "cap": self.config.output_cap,
            "maxDepth": MAX_DEPTH,
            "bindings": bindings,
        });
        // Lines to the runner go through a task of their own: a runner busy in a tight loop
        // never blocks the host's loop (abort, the deadline).
        let (to_runner, mut lines_rx) = mpsc::unbounded_channel::<Vec<u8>>();
        let input = stream.input.clone();
        tokio::spawn(async move {
            while let Some(line) = lines_rx.recv().await {
                if input.send(line).await.is_err() {
                    return;
                }
            }
        });
        let mut line = request.to_string().into_bytes();
        line.push(b'\n');
        let _ = to_runner.send(line);

        let declared: HashMap<&str, HashSet<&str>> = bindings
            .iter()
            .map(|b| {
                (
                    b.global.as_str(),
                    b.functions.iter().map(String::as_str).collect(),
                )
            })
            .collect();
        let budget = self.config.time_budget;
        let started = Instant::now();
        let deadline = tokio::time::sleep(budget + EXEC_GRACE);
        tokio::pin!(deadline);
        let (settled_tx, mut settled_rx) = mpsc::unbounded_channel::<Settled>();
        let mut in_flight: HashSet<u64> = HashSet::new();
        let mut out = early;
        let mut scanned = 0;
        let mut stderr = Vec::new();
        let mut replies: Vec<tokio::task::JoinHandle<()>> = Vec::new();
        enum Ending {
            Result(String),
            End(Result<ExitStatus>),
            Fail(&'static str, String),
        }
        let ending = 'run: loop {
            // Whole lines the runner wrote so far.
            while let Some(at) = out[scanned..].iter().position(|b| *b == b'\n') {
                let end = scanned + at;
                let line = out[..end].to_vec();
                out.drain(..=end);
                scanned = 0;
                match self.on_line(
                    &line,
                    &declared,
                    calls.as_ref(),
                    &settled_tx,
                    &mut in_flight,
                ) {
                    Line::Result(text) => break 'run Ending::Result(text),
                    Line::Reply(reply) => {
                        let _ = to_runner.send(reply);
                    }
                    Line::Call(handle) => replies.push(handle),
                    Line::Bad(why) => {
                        break 'run Ending::Fail(
                            "invalid-output",
                            format!(
                                "the run's channel carried a message outside the protocol ({why}); \
                                 the run was stopped"
                            ),
                        );
                    }
                }
            }
            scanned = out.len();
            if out.len() > MAX_LINE {
                break Ending::Fail(
                    "invalid-output",
                    format!(
                        "the run wrote a message over {MAX_LINE} bytes on its channel (a binding \
                         argument that large is not carried); the run was stopped"
                    ),
                );
            }
            tokio::select! {
                event = stream.events.recv() => match event {
                    Some(StreamEvent::Stdout(data)) => out.extend_from_slice(&data),
                    Some(StreamEvent::Stderr(data)) => {
                        let room = STDERR_KEEP.saturating_sub(stderr.len());
                        stderr.extend_from_slice(&data[..data.len().min(room)]);
                    }
                    Some(StreamEvent::End(end)) => break Ending::End(end),
                    None => break Ending::End(Err(Error::new(
                        ErrorCode::ConnectionLost,
                        "the run's channel closed without a status",
                    ))),
                },
                Some((id, reply)) = settled_rx.recv() => {
                    if in_flight.remove(&id) {
                        let _ = to_runner.send(settle_line(id, reply));
                    }
                }
                _ = abort.cancelled() => break Ending::Fail(
                    "abort",
                    "the run was aborted by the host; its processes were stopped".to_string(),
                ),
                _ = &mut deadline => break Ending::Fail(
                    "timeout",
                    format!(
                        "the run exceeded its time budget of {} s (the machine did not end it in \
                         time; its processes were stopped)",
                        budget.as_secs_f64()
                    ),
                ),
            }
        };
        for r in replies {
            r.abort();
        }
        let ended = matches!(ending, Ending::End(_));
        let settled = matches!(ending, Ending::Result(_));
        let result = match ending {
            Ending::Result(text) => self.checked(&text),
            Ending::Fail(kind, message) => CodeRunResult::failure(kind, message),
            Ending::End(end) => self.ended(end, started.elapsed(), &stderr)?,
        };
        if !ended {
            // The runner settled or is being stopped: its wrapper sweeps the tree as the runner
            // ends. Wait for that briefly; stop it from outside when it does not come.
            let mut gone = false;
            if settled {
                gone = tokio::time::timeout(END_GRACE, async {
                    while let Some(e) = stream.events.recv().await {
                        if matches!(e, StreamEvent::End(_)) {
                            return;
                        }
                    }
                })
                .await
                .is_ok();
            }
            if !gone {
                self.stop(prepared, &run_id).await;
            }
        }
        Ok(result)
    }

    /// One line from the runner.
    fn on_line(
        &self,
        line: &[u8],
        declared: &HashMap<&str, HashSet<&str>>,
        calls: Option<&mpsc::UnboundedSender<CodeCall>>,
        settled: &mpsc::UnboundedSender<Settled>,
        in_flight: &mut HashSet<u64>,
    ) -> Line {
        let Ok(text) = std::str::from_utf8(line) else {
            return Line::Bad("a line that is not UTF-8".into());
        };
        let msg: wire::RunnerLine = match serde_json::from_str(text) {
            Ok(m) => m,
            Err(e) => return Line::Bad(format!("a line that is not a runner message: {e}")),
        };
        match (msg.t, msg.result, msg.id) {
            ("result", Some(result), None) => Line::Result(result.get().to_string()),
            ("call", None, Some(id)) => {
                let (Some(global), Some(function)) = (msg.global, msg.function) else {
                    return Line::Bad("a call without its global or function".into());
                };
                let args = msg.args.map(|a| a.get()).unwrap_or("null");
                let known = declared
                    .get(global.as_str())
                    .is_some_and(|f| f.contains(function.as_str()));
                let refuse = if !known {
                    Some(format!(
                        "{global}.{function} is not a binding of this run; call only the \
                         functions declared for it"
                    ))
                } else if in_flight.contains(&id) {
                    Some(format!("call id {id} is already in flight"))
                } else if let Err(p) = depth_path(args, MAX_DEPTH) {
                    Some(format!("the argument of {global}.{function}{p}"))
                } else {
                    None
                };
                if let Some(message) = refuse {
                    return Line::Reply(settle_line(id, Err(message)));
                }
                let Some(tx) = calls else {
                    return Line::Reply(settle_line(
                        id,
                        Err("the host takes no binding calls for this run".into()),
                    ));
                };
                let (reply_tx, reply_rx) = oneshot::channel();
                let call = CodeCall {
                    call_id: id.to_string(),
                    global: global.clone(),
                    function: function.clone(),
                    args: args.to_string(),
                    reply: reply_tx,
                };
                if tx.send(call).is_err() {
                    return Line::Reply(settle_line(
                        id,
                        Err("the host is no longer taking binding calls".into()),
                    ));
                }
                in_flight.insert(id);
                let settled = settled.clone();
                let javascript = self.config.language == Language::Javascript;
                Line::Call(tokio::spawn(async move {
                    let reply = match reply_rx.await {
                        Ok(Ok(value)) => {
                            match serde_json::from_str::<&serde_json::value::RawValue>(&value) {
                                Err(e) => Err(format!(
                                    "the host resolved {global}.{function} with text that is not JSON: {e}"
                                )),
                                Ok(_) => match depth_path(&value, MAX_DEPTH) {
                                    Err(p) => Err(format!(
                                        "the resolution of {global}.{function} is refused: the value{p}"
                                    )),
                                    Ok(()) => match wire::lossy_number(&value, javascript) {
                                        None => Ok(value),
                                        Some((p, n)) => Err(format!(
                                            "the resolution of {global}.{function} is refused: the \
                                             value{p} is {n}, which the program's numbers cannot \
                                             hold exactly (send such a number as a string)"
                                        )),
                                    },
                                },
                            }
                        }
                        Ok(Err(message)) => Err(message),
                        Err(_) => Err("the host dropped this call".to_string()),
                    };
                    let _ = settled.send((id, reply));
                }))
            }
            (other, _, _) => Line::Bad(format!("a message of type {other:?} or shape")),
        }
    }

    /// The runner's result, checked against the seam's shape and the output cap.
    fn checked(&self, text: &str) -> CodeRunResult {
        let c = match wire::check_result(text) {
            Ok(c) => c,
            Err(why) => {
                return CodeRunResult::failure(
                    "invalid-output",
                    format!("the run's result is not of the seam's shape: {why}"),
                );
            }
        };
        // The runner reports what happened inside the program; a budget, an abort or the
        // substrate's death are the host's to say, so a result claiming one was written by the
        // program itself on the runner's channel.
        if let Some(kind @ ("timeout" | "abort" | "worker-exit")) = c.error_kind.as_deref() {
            return CodeRunResult::failure(
                "invalid-output",
                format!(
                    "the run's result claims the error kind {kind:?}, which only the host \
                     reports (the program wrote on the runner's channel); the run was stopped"
                ),
            );
        }
        let cap = self.config.output_cap;
        // The runner's own `output-limit` keeps logs that fit the cap and adds its short
        // message on top; anything larger claiming that kind is held to the cap like the rest.
        let room = if c.error_kind.as_deref() == Some("output-limit") {
            OWN_LIMIT_ROOM
        } else {
            0
        };
        if c.logs_bytes + c.payload_bytes > cap + room {
            let message = format!(
                "the output exceeded the cap of {cap} bytes (logs {} + value or message {} \
                 bytes); it was dropped, never truncated",
                c.logs_bytes, c.payload_bytes
            );
            let logs = if c.logs_bytes <= cap {
                c.logs
            } else {
                "[]".into()
            };
            return CodeRunResult {
                json: format!(
                    "{{\"logs\":{logs},\"error\":{}}}",
                    json!({"kind": "output-limit", "message": message})
                ),
                error_kind: Some("output-limit".into()),
            };
        }
        CodeRunResult {
            json: text.to_string(),
            error_kind: c.error_kind,
        }
    }

    /// The run's channel ended before a result.
    fn ended(
        &self,
        end: Result<ExitStatus>,
        elapsed: Duration,
        stderr: &[u8],
    ) -> Result<CodeRunResult> {
        let budget = self.config.time_budget;
        let status = match end {
            Ok(s) => s,
            Err(e) => {
                return Ok(CodeRunResult::failure(
                    "worker-exit",
                    format!(
                        "the process on the machine ended without settling: {}",
                        e.message
                    ),
                ));
            }
        };
        let timed_out = elapsed >= budget
            && matches!(
                &status,
                ExitStatus::Code(TIMEOUT_STATUS) | ExitStatus::Code(137) | ExitStatus::Signal(_)
            );
        if timed_out {
            return Ok(CodeRunResult::failure(
                "timeout",
                format!(
                    "the run exceeded its time budget of {} s (the runtime's configured time \
                     budget); its processes were stopped",
                    budget.as_secs_f64()
                ),
            ));
        }
        let said = crate::util::printable_excerpt(stderr, 2000);
        let said = said.trim();
        match &status {
            ExitStatus::Code(91) => {
                return Err(Error::invalid(format!(
                    "the working directory {:?} cannot be entered on the machine; pass a \
                     directory that exists there",
                    self.config.cwd.as_deref().unwrap_or("~")
                )));
            }
            ExitStatus::Code(92) => {
                return Err(Error::invalid(
                    "the machine does not allow the requested caps (file size, memory or \
                     processes) to be set; lower them or leave them out",
                ));
            }
            ExitStatus::Code(94) => {
                return Err(Error::new(
                    ErrorCode::IsolationUnavailable,
                    format!(
                        "the run could not be sealed on {} although the machine's probe said it \
                         could ({}); the program did not start. Check that the account can \
                         mount in a user namespace there, or pass --allow-weak-isolation",
                        self.transport.describe(),
                        if said.is_empty() {
                            "it printed nothing"
                        } else {
                            said
                        }
                    ),
                ));
            }
            ExitStatus::Code(93) => {
                let refused = String::from_utf8_lossy(stderr);
                if let Some(why) = refused
                    .lines()
                    .find_map(|l| l.strip_prefix(crate::remote::REFUSED_PREFIX))
                {
                    return Err(crate::remote::insecure_error(
                        self.transport.bytes(),
                        &format!(
                            "refusing to run the code runtime's runner {}",
                            self.prepared.get().map_or("", |p| p.runner.as_str())
                        ),
                        &crate::remote::refused_path(why),
                    ));
                }
            }
            _ => {}
        }
        let status = match &status {
            ExitStatus::Code(c) => format!("exit status {c}"),
            ExitStatus::Signal(s) => format!("signal {s}"),
        };
        Ok(CodeRunResult::failure(
            "worker-exit",
            format!(
                "the {} process ended without settling the run ({status}){}",
                self.config.language.interpreter(),
                if said.is_empty() {
                    String::new()
                } else {
                    format!("; it printed: {said}")
                }
            ),
        ))
    }

    /// Stop a run's whole process tree on the machine (every process carrying its marker;
    /// with a PID namespace the runner's end takes the rest); best effort.
    async fn stop(&self, prepared: &Prepared, run_id: &str) {
        let mut call = crate::remote::Call::new("sh")
            .param("RR_SCRIPT", RUN_SH)
            .limit(Duration::from_secs(20))
            .max_output(8 << 20);
        for (name, value) in self.run_params(prepared, run_id, true) {
            call = call.param(name, value);
        }
        let _ = call.run(self.transport.as_ref()).await;
    }
}

/// What one runner line asks of the run loop.
enum Line {
    Result(String),
    Reply(Vec<u8>),
    Call(tokio::task::JoinHandle<()>),
    Bad(String),
}

/// The line that settles call `id` in the runner.
fn settle_line(id: u64, reply: std::result::Result<String, String>) -> Vec<u8> {
    let mut line = match reply {
        Ok(value) => format!("{{\"t\":\"resolve\",\"id\":{id},\"value\":{value}}}"),
        Err(message) => json!({"t": "reject", "id": id, "message": message}).to_string(),
    };
    line.push('\n');
    line.into_bytes()
}

impl crate::engine::Engine {
    /// Where a session's code runs go: the session's machine, or for a session in a Slurm
    /// allocation its node (each run a step of the session's job), so that the run's process
    /// tree is contained there the same way.
    pub(crate) fn code_transport(
        &self,
        session: &crate::engine::SessionRecord,
        machine: Arc<Remote>,
    ) -> Arc<Remote> {
        self.session_transport(session, machine)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_marks_are_in_range_and_per_run() {
        let a = run_mark("code-a");
        let b = run_mark("code-b");
        for m in [a, b] {
            assert!((1 << 40..=MARK_MAX).contains(&m), "{m}");
        }
        assert_ne!(a, b);
        assert_eq!(a, run_mark("code-a"));
    }
}
