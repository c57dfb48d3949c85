//! Drives `botmux-remote-runner` the way the BotMux host does, through the conformance crate's
//! `ScriptHost` (protocol lines on its stdin, every event read and checked from its stdout),
//! with the benchmark's own steps on top: a timed turn and a bounded close.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use remote_runner_conformance::process::Spawn;
use remote_runner_conformance::script::ScriptHost;
use serde_json::json;

use crate::bed::Bed;

/// The provider binary: `$REMOTE_RUNNER_BENCH_PROVIDER` or next to this benchmark binary.
pub fn provider_binary() -> Result<PathBuf> {
    sibling_binary("REMOTE_RUNNER_BENCH_PROVIDER", "botmux-remote-runner")
}

/// `$env_override`, else `name` in the directory of the running binary (target/release).
pub fn sibling_binary(env_override: &str, name: &str) -> Result<PathBuf> {
    if let Some(p) = std::env::var_os(env_override) {
        return Ok(PathBuf::from(p));
    }
    let exe = std::env::current_exe().context("locate the benchmark binary")?;
    let dir = exe
        .parent()
        .ok_or_else(|| anyhow!("the benchmark binary has no parent directory"))?;
    // Under `cargo test` the binary sits in target/<profile>/deps.
    for candidate in [dir.join(name), dir.join("..").join(name)] {
        if candidate.is_file() {
            return Ok(candidate);
        }
    }
    bail!(
        "{name} not found next to {}; build it with `cargo build --release -p \
         remote-runner-provider --bin {name}` (scripts/bench.sh does) or set {env_override}",
        exe.display()
    )
}

/// How a turn ended, as seen by the host.
#[derive(Debug)]
pub struct TurnOutcome {
    /// From writing the turn line to reading `final`.
    pub elapsed: Duration,
    /// Bytes of `progress` content received (UTF-8).
    pub progress_bytes: u64,
}

pub struct ProviderHost {
    host: ScriptHost,
    next_turn: u64,
}

impl ProviderHost {
    /// Spawn the provider for the bed's machine with the remote shell in `remote_cwd`.
    pub fn spawn(bed: &Bed, state_dir: &Path, remote_cwd: &Path) -> Result<ProviderHost> {
        let env = [
            ("REMOTE_RUNNER_STATE_DIR", state_dir.display().to_string()),
            ("REMOTE_RUNNER_HOST", "127.0.0.1".into()),
            ("REMOTE_RUNNER_PORT", bed.sshd.port.to_string()),
            ("REMOTE_RUNNER_USER", bed.sshd.user().into()),
            ("REMOTE_RUNNER_KEY_PATH", bed.key().display().to_string()),
            (
                "REMOTE_RUNNER_KNOWN_HOSTS",
                bed.sshd.known_hosts.display().to_string(),
            ),
            ("REMOTE_RUNNER_REMOTE_CWD", remote_cwd.display().to_string()),
            ("REMOTE_RUNNER_TERMINAL", "off".into()),
        ];
        let spec = Spawn {
            env_remove: vec!["SSH_AUTH_SOCK".into()],
            ..Spawn::new(provider_binary()?, bed.scratch.path(), &env)
        };
        let mut host = ScriptHost::spawn_with(spec).context("spawn botmux-remote-runner")?;
        host.record = false;
        host.check = false; // the provider is timed, not the host's protocol checks
        Ok(ProviderHost { host, next_turn: 1 })
    }

    /// hello + start; returns once the provider is `ready`.
    pub fn start(&mut self) -> Result<()> {
        self.host.send(
            "hello",
            json!({"requestId": "hello:1", "sessionId": "bench",
                   "requiredCapabilities": ["start", "turn", "cancel"]}),
        )?;
        let hello = self.host.next(Duration::from_secs(30))?;
        if hello["type"] != "hello" {
            bail!("expected hello, got {hello}");
        }
        self.host.send(
            "start",
            json!({"requestId": "start:1", "sessionId": "bench", "cwd": "/bench"}),
        )?;
        let ready = self.host.next(Duration::from_secs(60))?;
        if ready["type"] != "ready" {
            bail!("expected ready, got {ready}");
        }
        Ok(())
    }

    /// Run one turn to its `final`, counting progress bytes.
    pub fn turn(&mut self, content: &str) -> Result<TurnOutcome> {
        let turn_id = format!("t{}", self.next_turn);
        self.next_turn += 1;
        let start = Instant::now();
        self.host.begin_turn(&turn_id, content)?;
        let mut progress_bytes = 0u64;
        let end = self
            .host
            .finish_turn_with(&turn_id, Duration::from_secs(600), |chunk| {
                progress_bytes += chunk.len() as u64;
            })?;
        if end["type"] != "final" {
            bail!("turn {turn_id} failed: {end}");
        }
        if !end["content"].as_str().unwrap_or("").starts_with("exit 0") {
            bail!("turn {turn_id} did not exit 0: {end}");
        }
        Ok(TurnOutcome {
            elapsed: start.elapsed(),
            progress_bytes,
        })
    }

    /// `VmHWM` (peak resident set) of the provider, in KiB.
    pub fn peak_rss_kib(&self) -> Result<u64> {
        self.host.peak_rss_kib()
    }

    /// Close the session (`cancel` until `closed`), end stdin and wait (bounded) for the
    /// provider to exit.
    pub fn close(mut self) {
        if self
            .host
            .send("cancel", json!({"requestId": "cancel:1"}))
            .is_ok()
        {
            let _ = self.host.wait_for(Duration::from_secs(20), |v| {
                v["type"] == "status" && v["status"] == "closed"
            });
        }
        self.host.close_stdin();
        let _ = self.host.wait_exit(Duration::from_secs(20));
    }
}
