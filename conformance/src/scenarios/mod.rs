//! The scenarios: each spawns fresh provider processes, plays one host situation and
//! checks every event on the way. Turn content is plain shell (`echo conformance-<n>`) so an
//! echo provider and a shell-running provider both make sense of it.

use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::config::Config;
use crate::host::{Host, Submitted};
use crate::track::TurnEnd;
use crate::violation::{Step, Stop, Violation, Warning};

mod bad_input;
mod handshake;
mod lifecycle;
mod operations;
mod resume;
mod signals;
mod terminal;
mod unsupported;

/// A scenario's future.
pub type ScenarioFuture = Pin<Box<dyn Future<Output = Step<()>> + Send>>;

/// How much a scenario's failure matters to the orchestrator.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Level {
    /// The BotMux host would log a protocol error, kill the provider, hang, or leak it: a
    /// failure fails the run.
    Required,
    /// Robustness beyond what the host does (it never sends that input): a failure is reported
    /// as a warning and fails the run only with `--strict`.
    Recommended,
}

impl Level {
    /// `required` or `recommended`.
    pub fn as_str(self) -> &'static str {
        match self {
            Level::Required => "required",
            Level::Recommended => "recommended",
        }
    }
}

/// The host rules scenarios stand on (BotMux `RemoteRunnerBackend`, see
/// /work/shared/spec and docs/conformance.md), one line each.
pub mod host_rules {
    /// hello.
    pub const HELLO: &str = "hello is answered with the same requestId and the required \
        capabilities within handshakeTimeoutMs, else the provider is killed";
    /// start/resume.
    pub const READY: &str = "start/resume is answered by ready with the same requestId and a \
        valid state within handshakeTimeoutMs; a rebuild raises the generation";
    /// turns.
    pub const TURN: &str = "a turn gets exactly one status busy ACK (or a pre-ACK failure) \
        within operationTimeoutMs, nothing for it before the ACK, then final or a failure with \
        the turnId; anything else is a protocol error that kills the provider";
    /// cancel.
    pub const CANCEL: &str = "cancel is answered by status closed; the host waits for it \
        before it commits the close";
    /// detach/reattach.
    pub const DETACH: &str = "detach waits for the turn and answers status detached; reattach \
        answers status ready; the host keeps writes closed until then";
    /// stdin EOF.
    pub const EOF: &str = "a provider whose stdin closed must exit, or it is leaked";
    /// resume state rules.
    pub const STATE: &str = "states are applied only if the provider matches, the generation \
        never goes down and remoteSessionId changes only with a new generation";
    /// terminal.
    pub const TERMINAL: &str = "terminal input/resize only for the current generation, \
        answered by status; screens of a newer generation than the state kill the provider";
    /// outbound/session_tool.
    pub const OPERATIONS: &str = "outbound_message/session_tool only inside an ACKed turn, for \
        the state's generation; results are never answered; final waits for every result";
    /// bad input (the host never sends it).
    pub const BAD_INPUT: &str = "not a host rule: the host only sends valid commands; a \
        provider that survives bad input is more robust";
    /// a command type the protocol does not have.
    pub const UNSUPPORTED: &str = "the set of event types is closed: an event of any other \
        type is a protocol error that kills the provider, whatever it answers; the host's \
        reference runner answers a command type it does not know with failure \
        unsupported_command (status failed, not retryable)";
    /// signals.
    pub const SIGNAL: &str = "the host closes with cancel, waits for status closed, then sends \
        SIGTERM without closing stdin (commitDestroySession -> kill('SIGTERM')); a provider \
        still running is leaked";
    /// a signal while a start is in flight.
    pub const SIGNAL_MID_START: &str = "a start not answered within handshakeTimeoutMs, or \
        any protocol error, ends with SIGTERM without closing stdin (failProtocol -> \
        kill('SIGTERM')); a provider still running is leaked, and every line it wrote before \
        it exited is read and must be a whole, valid event";
    /// commands while a start is in flight.
    pub const START_IN_FLIGHT: &str = "not sent by RemoteRunnerBackend today (it waits for \
        ready): a provider whose command loop waits on the engine answers nothing, cancel \
        included, until the start ends";
}

/// One scenario.
#[derive(Debug, Clone, Copy)]
pub struct Scenario {
    /// Stable name (`--scenario`).
    pub name: &'static str,
    /// Group (`--group`).
    pub group: &'static str,
    /// What it checks, one line.
    pub checks: &'static str,
    /// Whether a failure fails the run.
    pub level: Level,
    /// The host rule it stands on.
    pub host_rule: &'static str,
    /// The body.
    pub run: fn(Ctx) -> ScenarioFuture,
}

/// The groups, in report order.
pub const GROUPS: [&str; 15] = [
    "handshake",
    "start",
    "turn",
    "pre_ack",
    "busy",
    "cancel",
    "detach",
    "resume",
    "terminal",
    "bad_input",
    "unsupported",
    "eof",
    "signals",
    "outbound",
    "session_tool",
];

/// Every scenario, in report order.
pub fn all() -> Vec<Scenario> {
    let mut list = Vec::new();
    list.extend(handshake::scenarios());
    list.extend(lifecycle::scenarios());
    list.extend(resume::scenarios());
    list.extend(terminal::scenarios());
    list.extend(bad_input::scenarios());
    list.extend(unsupported::scenarios());
    list.extend(operations::scenarios());
    list.extend(signals::scenarios());
    let order = |s: &Scenario| {
        GROUPS
            .iter()
            .position(|g| *g == s.group)
            .unwrap_or(GROUPS.len())
    };
    list.sort_by_key(order);
    list
}

/// What a scenario body gets: how to spawn providers for one host session.
#[derive(Debug, Clone)]
pub struct Ctx {
    /// The run's configuration.
    pub config: Arc<Config>,
    /// Working directory for every process of this scenario.
    pub cwd: PathBuf,
    /// The host session id (the same across resumes).
    pub session_id: String,
    /// Warnings gathered by every process of the scenario.
    pub warnings: Arc<Mutex<Vec<Warning>>>,
    /// stderr byte counters of every process spawned (stderr is drained, never parsed).
    pub stderr_counters: Arc<Mutex<Vec<Arc<AtomicU64>>>>,
}

impl Ctx {
    /// Spawns a fresh provider process.
    pub fn spawn(&self) -> Step<Host> {
        let host = Host::spawn(
            Arc::clone(&self.config),
            self.cwd.clone(),
            self.session_id.clone(),
            Arc::clone(&self.warnings),
        )?;
        if let Ok(mut counters) = self.stderr_counters.lock() {
            counters.push(host.stderr_counter());
        }
        Ok(host)
    }

    /// Total stderr bytes of every process of the scenario.
    pub fn stderr_bytes(&self) -> u64 {
        self.stderr_counters.lock().map_or(0, |counters| {
            counters.iter().map(|c| c.load(Ordering::Relaxed)).sum()
        })
    }

    /// Closes a provider politely (stdin EOF, a short grace, then kill).
    pub async fn finish(&self, host: Host) {
        host.shutdown().await;
    }
}

/// Plain turn content both an echo provider and a shell provider handle.
pub fn echo(n: u32) -> String {
    format!("echo conformance-{n}")
}

/// Content that keeps a shell provider's turn running for a few seconds.
pub const SLOW_CONTENT: &str = "sleep 5; echo conformance-slow";

/// Trigger content for an outbound_message (see docs/conformance.md).
pub const OUTBOUND_TRIGGER: &str = "request-outbound";
/// Trigger content for a session_tool.
pub const SESSION_TOOL_TRIGGER: &str = "request-session-tool";

/// n/a unless the provider advertised `capability`.
pub fn require(host: &Host, capability: &str) -> Step<()> {
    if host.track.has_capability(capability) {
        Ok(())
    } else {
        Err(Stop::NotApplicable(format!(
            "the provider does not advertise {capability:?}"
        )))
    }
}

/// Requires a final (not a failure) for a plain turn.
pub fn expect_final(end: &TurnEnd, content: &str) -> Step<()> {
    match end {
        TurnEnd::Final(_) => Ok(()),
        TurnEnd::Failure { event, .. } => Err(Violation::new(
            crate::violation::rule::TURN_FAILED,
            format!(
                "the turn {content:?} failed: {:?}: {}",
                event.code, event.message
            ),
            "a final for a plain turn",
        )
        .into()),
    }
}

/// Runs one plain turn that must end in a final.
pub async fn plain_turn(host: &mut Host, n: u32) -> Step<()> {
    let content = echo(n);
    let (_, end) = host.run_turn(&content).await?;
    expect_final(&end, &content)
}

/// Starts a turn and keeps it running: with outbound_message, by holding the result of the
/// `request-outbound` trigger; otherwise (or if the trigger is not honoured) with slow shell
/// content. n/a when no turn can be kept open.
pub async fn hold_turn(host: &mut Host) -> Step<String> {
    if host.track.has_capability("outbound_message") {
        host.hold_results = true;
        let turn_id = start_held(host, OUTBOUND_TRIGGER).await?;
        let deadline = tokio::time::Instant::now() + host.config().operation_timeout;
        while host
            .track
            .turn(&turn_id)
            .is_some_and(|t| t.stats.outbound_events == 0 && t.end.is_none())
        {
            match host.next(deadline).await? {
                crate::host::Next::Event(_) => {}
                _ => break,
            }
        }
        if !host.track.turn_ended(&turn_id) {
            return Ok(turn_id);
        }
        host.release_results();
    }
    let turn_id = start_held(host, SLOW_CONTENT).await?;
    let settle = host.config().settle;
    let deadline = tokio::time::Instant::now() + settle.min(std::time::Duration::from_secs(1));
    while !host.track.turn_ended(&turn_id) {
        match host.next(deadline).await? {
            crate::host::Next::Event(_) => {}
            _ => break,
        }
    }
    if host.track.turn_ended(&turn_id) {
        return Err(Stop::NotApplicable(format!(
            "could not keep a turn open: {SLOW_CONTENT:?} ended at once (advertise \
             outbound_message and honour {OUTBOUND_TRIGGER:?}, or run turn content in a shell)"
        )));
    }
    Ok(turn_id)
}

async fn start_held(host: &mut Host, content: &str) -> Step<String> {
    let (turn_id, submitted) = host.submit(content).await?;
    match submitted {
        Submitted::Acked => Ok(turn_id),
        Submitted::Refused(f) => Err(crate::host::refused("turn", &f)),
    }
}

/// Boxes a scenario body.
macro_rules! body {
    ($ctx:ident => $body:block) => {
        |$ctx: $crate::scenarios::Ctx| -> $crate::scenarios::ScenarioFuture {
            Box::pin(async move $body)
        }
    };
}
pub(crate) use body;
