//! Many chats on one machine account, as a BotMux deployment runs them: each chat is a provider
//! process (its own SSH connection) doing `hello`, `start`, a few turns, `cancel` and then
//! SIGTERM with stdin left open, the way the host closes a chat (or SIGTERM alone). All chats share one local state
//! dir and one login account on the machine. Used by the load test (scaled down) and by the
//! benchmark (100 chats).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Result, anyhow, bail};
use remote_runner_conformance::process::Spawn;
use remote_runner_conformance::script::ScriptHost;
use serde_json::json;

/// The host's default `handshakeTimeoutMs`: `hello`, and `start` until `ready`, must each be
/// answered within it.
pub const HANDSHAKE_BOUND: Duration = Duration::from_secs(15);

/// The host's default `operationTimeoutMs` (the turn's ACK, the cancel's `closed`).
pub const OPERATION_BOUND: Duration = Duration::from_secs(30);

/// How long a turn may take to its `final` before the chat counts as failed.
const TURN_BOUND: Duration = Duration::from_secs(120);

/// What one chat did, step by step.
#[derive(Debug, Clone, Default)]
pub struct ChatOutcome {
    pub index: usize,
    /// The step that failed and why (`None`: every step completed).
    pub failure: Option<String>,
    /// From writing `start` to reading `ready`.
    pub start: Option<Duration>,
    /// Each turn, from writing it to reading its `final`.
    pub turns: Vec<Duration>,
    /// The engine session behind the chat (from `ready`'s state).
    pub session_id: Option<String>,
    /// `ready`'s state (what a host saves to resume the chat).
    pub state: Option<serde_json::Value>,
    /// The provider's peak resident set, read just before the close.
    pub peak_rss_kib: Option<u64>,
}

impl ChatOutcome {
    pub fn completed(&self) -> bool {
        self.failure.is_none()
    }
}

/// One chat's plan.
#[derive(Debug, Clone)]
pub struct Chat {
    /// The provider binary.
    pub program: PathBuf,
    /// The provider's environment (machine, state dir, remote cwd).
    pub env: Vec<(&'static str, String)>,
    /// The provider's working directory.
    pub cwd: PathBuf,
    pub index: usize,
    pub turns: usize,
    /// Close with `cancel` (the session destroyed) before the SIGTERM; without it the SIGTERM
    /// alone closes the chat and the session is kept for a later `resume`.
    pub cancel: bool,
    /// Where the chat waits, after its turns and before its close, until every other chat is
    /// there too (see [`run_chats_watching`]).
    pub gate: Option<Arc<Gate>>,
}

/// A meeting point of all chats between their turns and their close: the caller looks at the
/// machine while every chat's session is live.
#[derive(Debug, Default)]
pub struct Gate {
    state: Mutex<GateState>,
    changed: Condvar,
}

#[derive(Debug, Default)]
struct GateState {
    /// Sessions of the chats waiting at the gate.
    arrived: Vec<String>,
    /// Chats that ended without reaching it (a failed step).
    missed: usize,
    open: bool,
}

/// Longest a chat waits at the gate, and the caller for every chat to reach it.
const GATE_BOUND: Duration = Duration::from_secs(600);

impl Gate {
    fn arrive(&self, session: String) {
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        s.arrived.push(session);
        self.changed.notify_all();
        let _ = self
            .changed
            .wait_timeout_while(s, GATE_BOUND, |s| !s.open)
            .map(|_| ());
    }

    fn miss(&self) {
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        s.missed += 1;
        self.changed.notify_all();
    }

    /// Wait until `n` chats have arrived or missed; the sessions of those that arrived.
    fn gather(&self, n: usize) -> Vec<String> {
        let s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let (s, _) = self
            .changed
            .wait_timeout_while(s, GATE_BOUND, |s| s.arrived.len() + s.missed < n)
            .unwrap_or_else(|p| p.into_inner());
        s.arrived.clone()
    }

    fn open(&self) {
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        s.open = true;
        self.changed.notify_all();
    }
}

/// The exact output turn `k` of chat `i` prints (and what its `progress` must add up to).
pub fn turn_output(i: usize, k: usize) -> String {
    format!("chat {i} turn {k}\n")
}

/// Run one chat to its end; a failed step is recorded, and the provider is still closed.
pub fn run_chat(chat: &Chat) -> ChatOutcome {
    let mut out = ChatOutcome {
        index: chat.index,
        ..ChatOutcome::default()
    };
    let spec = Spawn::new(&chat.program, &chat.cwd, &chat.env);
    let mut host = match ScriptHost::spawn_with(spec) {
        Ok(h) => h,
        Err(e) => {
            out.failure = Some(format!("spawn: {e:#}"));
            return out;
        }
    };
    let mut arrived = false;
    if let Err(e) = chat_steps(&mut host, chat, &mut out, &mut arrived) {
        out.failure = Some(format!("{e:#}"));
    }
    if let (Some(gate), false) = (&chat.gate, arrived) {
        gate.miss();
    }
    // The host's close: SIGTERM with stdin left open, then (bounded) the exit.
    let _ = host.signal("TERM");
    if host.wait_exit(Duration::from_secs(20)).is_none() && out.failure.is_none() {
        out.failure = Some("the provider did not exit within 20 s of SIGTERM".into());
    }
    host.kill();
    out
}

fn chat_steps(
    host: &mut ScriptHost,
    chat: &Chat,
    out: &mut ChatOutcome,
    arrived: &mut bool,
) -> Result<()> {
    let sid = format!("chat-{}", chat.index);
    host.send(
        "hello",
        json!({"requestId": "hello:1", "sessionId": sid,
               "requiredCapabilities": ["start", "turn", "cancel"]}),
    )?;
    let hello = host
        .wait_for(HANDSHAKE_BOUND, |v| v["requestId"] == "hello:1")
        .map_err(|e| anyhow!("hello: {e:#}"))?;
    if hello["type"] != "hello" {
        bail!("hello: answered {hello}");
    }
    let t = Instant::now();
    host.send(
        "start",
        json!({"requestId": "start:1", "sessionId": sid, "cwd": format!("/chats/{}", chat.index)}),
    )?;
    let ready = host
        .wait_for(HANDSHAKE_BOUND, |v| v["requestId"] == "start:1")
        .map_err(|e| anyhow!("start: {e:#}"))?;
    if ready["type"] != "ready" {
        bail!("start: answered {ready}");
    }
    out.start = Some(t.elapsed());
    out.session_id = ready["state"]["providerState"]["sessionId"]
        .as_str()
        .map(str::to_owned);
    out.state = Some(ready["state"].clone());
    for k in 1..=chat.turns {
        let t = Instant::now();
        let id = format!("t{k}");
        let content = format!("printf 'chat %d turn %d\\n' {} {k}", chat.index);
        host.begin_turn(&id, &content)
            .map_err(|e| anyhow!("turn {k}: {e:#}"))?;
        let (text, end) = host
            .finish_turn(&id, TURN_BOUND)
            .map_err(|e| anyhow!("turn {k}: {e:#}"))?;
        if end["type"] != "final" || !end["content"].as_str().unwrap_or("").starts_with("exit 0") {
            bail!("turn {k}: ended {end}");
        }
        let want = turn_output(chat.index, k);
        if text.replace("\r\n", "\n") != want {
            bail!("turn {k}: output {text:?}, expected {want:?}");
        }
        out.turns.push(t.elapsed());
    }
    out.peak_rss_kib = host.peak_rss_kib().ok();
    if let (Some(gate), Some(session)) = (&chat.gate, &out.session_id) {
        *arrived = true;
        gate.arrive(session.clone());
    }
    if !chat.cancel {
        return Ok(());
    }
    host.send("cancel", json!({"requestId": "cancel:1"}))?;
    let closed = host
        .wait_for(OPERATION_BOUND, |v| v["requestId"] == "cancel:1")
        .map_err(|e| anyhow!("cancel: {e:#}"))?;
    if closed["type"] != "status" || closed["status"] != "closed" {
        bail!("cancel: answered {closed}");
    }
    Ok(())
}

/// Run `chats` at once, each on its own thread, started within `spread` of each other (zero:
/// all together); the outcomes in chat order.
pub fn run_chats(chats: Vec<Chat>, spread: Duration) -> Vec<ChatOutcome> {
    let n = chats.len().max(1) as u32;
    let handles: Vec<_> = chats
        .into_iter()
        .enumerate()
        .map(|(i, chat)| {
            let delay = spread * i as u32 / n;
            std::thread::spawn(move || {
                std::thread::sleep(delay);
                run_chat(&chat)
            })
        })
        .collect();
    handles
        .into_iter()
        .map(|h| {
            h.join().unwrap_or_else(|_| ChatOutcome {
                failure: Some("the chat's thread panicked".into()),
                ..ChatOutcome::default()
            })
        })
        .collect()
}

/// What a set of chats left on the machine account after they all closed.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Leftovers {
    /// Processes of the account whose command line names one of the chats' sessions (tmux
    /// servers, control clients, shells): `pid command line`.
    pub processes: Vec<String>,
    /// The chats' session directories still under the account's state root.
    pub directories: Vec<String>,
}

impl Leftovers {
    pub fn is_empty(&self) -> bool {
        self.processes.is_empty() && self.directories.is_empty()
    }
}

/// The processes of `uid` whose command line mentions one of `sessions`, and the sessions'
/// directories under `state_root/sessions/`.
pub fn leftovers(uid: u32, state_root: &Path, sessions: &BTreeSet<String>) -> Leftovers {
    let mut out = Leftovers::default();
    if sessions.is_empty() {
        return out;
    }
    for (pid, cmdline) in processes_of(uid) {
        if sessions.iter().any(|s| cmdline.contains(s.as_str())) {
            out.processes.push(format!("{pid} {cmdline}"));
        }
    }
    for s in sessions {
        let dir = state_root.join("sessions").join(s);
        if dir.exists() {
            out.directories.push(dir.display().to_string());
        }
    }
    out
}

/// Every process of `uid`: its pid and its command line (arguments joined by spaces).
pub fn processes_of(uid: u32) -> Vec<(u32, String)> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for entry in dir.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(status) = std::fs::read_to_string(entry.path().join("status")) else {
            continue;
        };
        let owner = status
            .lines()
            .find(|l| l.starts_with("Uid:"))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse::<u32>().ok());
        if owner != Some(uid) {
            continue;
        }
        let Ok(raw) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let cmdline = raw
            .split(|b| *b == 0)
            .filter(|a| !a.is_empty())
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect::<Vec<_>>()
            .join(" ");
        if !cmdline.is_empty() {
            out.push((pid, cmdline));
        }
    }
    out
}

/// The uid and home directory of the account `user` (from the passwd database).
pub fn account(user: &str) -> Result<(u32, PathBuf)> {
    let passwd = std::fs::read_to_string("/etc/passwd")?;
    for line in passwd.lines() {
        let f: Vec<&str> = line.split(':').collect();
        if f.len() >= 6 && f[0] == user {
            let uid = f[2].parse()?;
            return Ok((uid, PathBuf::from(f[5])));
        }
    }
    bail!("no account {user} in /etc/passwd")
}

/// The `q`-quantile (0..=1) of `values` in milliseconds, nearest rank; `None` when empty.
pub fn quantile_ms(values: &[Duration], q: f64) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    let mut ms: Vec<f64> = values.iter().map(|d| d.as_secs_f64() * 1000.0).collect();
    ms.sort_by(|a, b| a.total_cmp(b));
    let rank = ((q * ms.len() as f64).ceil() as usize).clamp(1, ms.len());
    Some(ms[rank - 1])
}

/// [`run_chats`], calling `probe` with the live sessions once every chat has done its turns
/// (or failed) and before any closes; its result beside the outcomes.
pub fn run_chats_watching<T>(
    mut chats: Vec<Chat>,
    spread: Duration,
    probe: impl FnOnce(&[String]) -> T,
) -> (Vec<ChatOutcome>, T) {
    let gate = Arc::new(Gate::default());
    for chat in &mut chats {
        chat.gate = Some(gate.clone());
    }
    let n = chats.len();
    let runner = std::thread::spawn(move || run_chats(chats, spread));
    let seen = probe(&gate.gather(n));
    gate.open();
    let outcomes = runner.join().unwrap_or_default();
    (outcomes, seen)
}

/// A one-line account of the failed chats (at most `limit` of them).
pub fn describe_failures(outcomes: &[ChatOutcome], limit: usize) -> String {
    outcomes
        .iter()
        .filter_map(|o| o.failure.as_ref().map(|f| format!("chat {}: {f}", o.index)))
        .take(limit)
        .collect::<Vec<_>>()
        .join("; ")
}
