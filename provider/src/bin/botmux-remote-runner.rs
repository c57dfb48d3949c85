//! `botmux-remote-runner`: the BotMux remote-runner protocol v1 provider.
//!
//! Spawned by an orchestrator with no arguments; commands arrive on stdin and events leave on
//! stdout, one JSON object per line. Configuration comes from `REMOTE_RUNNER_*` environment
//! variables (see `docs/provider.md`); logs go to stderr (`RUST_LOG`).

use std::process::ExitCode;

fn main() -> ExitCode {
    if let Some(arg) = std::env::args().nth(1) {
        let code = match arg.as_str() {
            "--help" | "-h" => {
                print!("{}", HELP);
                0
            }
            "--version" | "-V" => {
                println!("botmux-remote-runner {}", env!("CARGO_PKG_VERSION"));
                0
            }
            other => {
                eprintln!(
                    "botmux-remote-runner takes no arguments (got {other:?}); configure it with REMOTE_RUNNER_* environment variables, see --help"
                );
                2
            }
        };
        return ExitCode::from(code);
    }
    limit_malloc_arenas();
    // Logs go to stderr (`RUST_LOG`, default `warn`): stdout carries only protocol lines.
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_ansi(false)
        .init();
    // Do not wait for the blocking stdin reader thread: exit once output is flushed.
    std::process::exit(remote_runner_provider::server::main_entry());
}

/// Store work leaves the async workers through `block_in_place`, so over a long turn the
/// workers' tasks run on many OS threads; glibc gives each thread a malloc arena of its own,
/// which keeps the streaming buffers it freed. Two arenas keep a 200 MB turn's peak resident
/// memory where it was without the hand-offs (docs/benchmarks.md, `turn-stream`).
#[allow(unsafe_code)]
fn limit_malloc_arenas() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only sets an allocator parameter; called before any thread starts.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 2);
    }
}

const HELP: &str = "\
botmux-remote-runner: BotMux remote-runner protocol v1 provider (SSH + tmux)

USAGE:
    botmux-remote-runner            (spawned by the orchestrator; JSON lines on stdin/stdout)

CONFIGURATION (environment):
    REMOTE_RUNNER_MACHINE           machine id from `remote-runner machine add` (default: local)
    REMOTE_RUNNER_HOST/PORT/USER/KEY_PATH/KNOWN_HOSTS
                                    or reach a host directly, without a stored machine
    REMOTE_RUNNER_REMOTE_CWD        remote working directory (default: the machine's default_cwd)
    REMOTE_RUNNER_CWD_MAP           HOST_PREFIX=REMOTE_PREFIX: map the host's cwd to the remote
    REMOTE_RUNNER_TURN_MODE         shell (default) or agent
    REMOTE_RUNNER_AGENT_COMMAND     agent mode: remote command reading the turn on stdin
    REMOTE_RUNNER_TERMINAL          on (default) or off: terminal_screen/input/resize
    REMOTE_RUNNER_TERMINAL_COLS/ROWS  initial terminal size (default 120x40)
    REMOTE_RUNNER_SCREEN_INTERVAL_MS  minimum gap between screens (default 500)
    REMOTE_RUNNER_PROVIDER_NAME     protocol provider name (default: remote-runner)
    REMOTE_RUNNER_STATE_DIR         local state (default: ~/.remote-runner, shared with the CLI)
    REMOTE_RUNNER_CONFIG            JSON file with the same keys in lowercase, without the prefix
    RUST_LOG                        log filter for stderr (default: warn)

See docs/provider.md.
";
