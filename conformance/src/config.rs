//! How to run the provider and how patient to be. One validated value, no hidden defaults.

use std::path::PathBuf;
use std::time::Duration;

/// The host's default handshake deadline (hello, and start/resume until ready).
pub const DEFAULT_HANDSHAKE_TIMEOUT_MS: u64 = 15_000;
/// The host's default operation deadline (turn ACK, cancel, detach, reattach, terminal).
pub const DEFAULT_OPERATION_TIMEOUT_MS: u64 = 30_000;
/// How long a turn may run before the harness gives up (the host has no such limit).
pub const DEFAULT_TURN_TIMEOUT_MS: u64 = 120_000;
/// How long the provider may take to exit after its stdin closes.
pub const DEFAULT_EXIT_TIMEOUT_MS: u64 = 10_000;
/// How long the harness (playing the host) takes to write back an operation result.
pub const DEFAULT_RESULT_DELAY_MS: u64 = 200;
/// How long the harness listens after a rebuild's `ready` for early screens.
pub const DEFAULT_SETTLE_MS: u64 = 500;
/// Scenarios run at the same time by default.
pub const DEFAULT_JOBS: usize = 2;

/// Everything a run needs.
#[derive(Debug, Clone)]
pub struct Config {
    /// The provider program and its arguments, exactly as spawned.
    pub provider: Vec<String>,
    /// Working directory of the provider; `None` means a fresh temp dir per scenario.
    pub cwd: Option<PathBuf>,
    /// Extra environment (the rest is inherited).
    pub env: Vec<(String, String)>,
    /// Deadline for hello and for start/resume until ready.
    pub handshake_timeout: Duration,
    /// Deadline for the turn ACK and every other answered command.
    pub operation_timeout: Duration,
    /// Deadline for a turn to end after its ACK.
    pub turn_timeout: Duration,
    /// Deadline for the provider to exit after stdin closes.
    pub exit_timeout: Duration,
    /// Delay before the harness writes an outbound/session_tool result back.
    pub result_delay: Duration,
    /// Listening window after a generation-raising `ready`.
    pub settle: Duration,
    /// Scenarios run in parallel.
    pub jobs: usize,
    /// Only these groups (empty: all).
    pub groups: Vec<String>,
    /// Only these scenarios (empty: all).
    pub scenarios: Vec<String>,
    /// Recommended scenarios fail the run too.
    pub strict: bool,
}

impl Config {
    /// A config for `provider` with the host's defaults.
    pub fn new(provider: Vec<String>) -> Self {
        Config {
            provider,
            cwd: None,
            env: Vec::new(),
            handshake_timeout: Duration::from_millis(DEFAULT_HANDSHAKE_TIMEOUT_MS),
            operation_timeout: Duration::from_millis(DEFAULT_OPERATION_TIMEOUT_MS),
            turn_timeout: Duration::from_millis(DEFAULT_TURN_TIMEOUT_MS),
            exit_timeout: Duration::from_millis(DEFAULT_EXIT_TIMEOUT_MS),
            result_delay: Duration::from_millis(DEFAULT_RESULT_DELAY_MS),
            settle: Duration::from_millis(DEFAULT_SETTLE_MS),
            jobs: DEFAULT_JOBS,
            groups: Vec::new(),
            scenarios: Vec::new(),
            strict: false,
        }
    }

    /// Checks the values; the error says how to fix them.
    pub fn validate(&self) -> Result<(), String> {
        if self.provider.is_empty() || self.provider[0].trim().is_empty() {
            return Err("--provider needs a command, e.g. --provider ./my-provider".into());
        }
        for (name, value) in [
            ("--handshake-timeout-ms", self.handshake_timeout),
            ("--operation-timeout-ms", self.operation_timeout),
        ] {
            let ms = value.as_millis();
            if !(100..=300_000).contains(&ms) {
                return Err(format!("{name} is {ms}; the host accepts 100..=300000 ms"));
            }
        }
        if self.turn_timeout.is_zero() || self.exit_timeout.is_zero() {
            return Err("--turn-timeout-ms and --exit-timeout-ms must be above 0".into());
        }
        if self.jobs == 0 {
            return Err("--jobs must be at least 1".into());
        }
        for (key, _) in &self.env {
            if key.is_empty() || key.contains('=') {
                return Err(format!(
                    "--env key {key:?} is not valid; write --env KEY=VALUE"
                ));
            }
        }
        Ok(())
    }
}

/// Parses `KEY=VALUE`.
pub fn parse_env(text: &str) -> Result<(String, String), String> {
    match text.split_once('=') {
        Some((key, value)) if !key.is_empty() => Ok((key.to_owned(), value.to_owned())),
        _ => Err(format!("{text:?} is not KEY=VALUE")),
    }
}
