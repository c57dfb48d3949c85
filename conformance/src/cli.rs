//! Command-line interface: flags → [`Config`], output and exit status.

use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;

use crate::config::{self, Config, parse_env};
use crate::scenarios;

/// Exit status: every applicable scenario passed.
pub const EXIT_OK: i32 = 0;
/// Exit status: at least one scenario failed.
pub const EXIT_FAILED: i32 = 1;
/// Exit status: bad flags, unknown group or scenario, provider not found.
pub const EXIT_USAGE: i32 = 2;

/// Plays the BotMux host against a remote-runner provider and checks every protocol rule.
///
/// --provider COMMAND [ARGS...]: the provider is spawned exactly like the host does, with
/// only these arguments. Its arguments end at the next option of this tool (--env, --json,
/// ...); after a `--` every remaining word goes to the provider.
#[derive(Debug, Parser)]
#[command(
    name = "remote-runner-conformance",
    version,
    override_usage = "remote-runner-conformance [OPTIONS] --provider <COMMAND> [ARGS...] [OPTIONS]",
    after_help = PROVIDER_HELP
)]
pub struct Args {
    /// Print the scenarios (group, name, what each checks) and exit.
    #[arg(long)]
    pub list: bool,
    /// Print one JSON object instead of the readable report.
    #[arg(long)]
    pub json: bool,
    /// Recommended scenarios fail the run too (by default their failures are warnings).
    #[arg(long)]
    pub strict: bool,
    /// Only scenarios of this group (repeatable).
    #[arg(long = "group", value_name = "GROUP")]
    pub groups: Vec<String>,
    /// Only this scenario (repeatable).
    #[arg(long = "scenario", value_name = "NAME")]
    pub scenarios: Vec<String>,
    /// Working directory for the provider (default: a fresh temp dir per scenario).
    #[arg(long, value_name = "DIR")]
    pub cwd: Option<PathBuf>,
    /// Extra environment variable for the provider, KEY=VALUE (repeatable; the rest is inherited).
    #[arg(long = "env", value_name = "KEY=VALUE", value_parser = parse_env)]
    pub env: Vec<(String, String)>,
    /// Scenarios run at the same time.
    #[arg(long, default_value_t = config::DEFAULT_JOBS)]
    pub jobs: usize,
    /// Deadline for hello and for start/resume → ready (the host's handshakeTimeoutMs).
    #[arg(long, default_value_t = config::DEFAULT_HANDSHAKE_TIMEOUT_MS)]
    pub handshake_timeout_ms: u64,
    /// Deadline for the turn ACK and every other answered command (operationTimeoutMs).
    #[arg(long, default_value_t = config::DEFAULT_OPERATION_TIMEOUT_MS)]
    pub operation_timeout_ms: u64,
    /// Deadline for a turn to end after its ACK.
    #[arg(long, default_value_t = config::DEFAULT_TURN_TIMEOUT_MS)]
    pub turn_timeout_ms: u64,
    /// Deadline for the provider to exit after stdin closes.
    #[arg(long, default_value_t = config::DEFAULT_EXIT_TIMEOUT_MS)]
    pub exit_timeout_ms: u64,
    /// Delay before the harness writes an outbound/session_tool result back.
    #[arg(long, default_value_t = config::DEFAULT_RESULT_DELAY_MS)]
    pub result_delay_ms: u64,
    /// Listening window for unsolicited events (before hello, after a rebuild's ready).
    #[arg(long, default_value_t = config::DEFAULT_SETTLE_MS)]
    pub settle_ms: u64,
    /// The provider command and its arguments (see [`split_provider`]).
    #[arg(skip)]
    pub provider: Vec<String>,
}

const PROVIDER_HELP: &str = "\
Provider:
  --provider <COMMAND> [ARGS...]
          The provider program and its arguments (required unless --list). Arguments end at
          the next option of this tool; after `--` every word goes to the provider.

Example:
  remote-runner-conformance --provider target/debug/botmux-remote-runner \\
      --env REMOTE_RUNNER_MACHINE=local --json";

/// Options of this tool (long names) that end the provider's argument list.
const HARNESS_OPTIONS: [&str; 16] = [
    "--list",
    "--json",
    "--strict",
    "--group",
    "--scenario",
    "--cwd",
    "--env",
    "--jobs",
    "--handshake-timeout-ms",
    "--operation-timeout-ms",
    "--turn-timeout-ms",
    "--exit-timeout-ms",
    "--result-delay-ms",
    "--settle-ms",
    "--help",
    "--version",
];

fn is_harness_option(word: &str) -> bool {
    let name = word.split_once('=').map_or(word, |(name, _)| name);
    HARNESS_OPTIONS.contains(&name) || word == "-h" || word == "-V"
}

/// Splits the command line into this tool's arguments and the provider command.
///
/// `--provider` takes the next word as the program, then the following words as its
/// arguments until the next option of this tool; a `--` among them ends option detection:
/// every word after it belongs to the provider. Returns `None` for the provider when
/// `--provider` is absent, and an error when it has no program.
pub fn split_provider(args: Vec<String>) -> Result<(Vec<String>, Option<Vec<String>>), String> {
    let mut harness = Vec::new();
    let mut provider: Option<Vec<String>> = None;
    let mut words = args.into_iter();
    while let Some(word) = words.next() {
        let inline = word.strip_prefix("--provider=").map(str::to_owned);
        if word != "--provider" && inline.is_none() {
            harness.push(word);
            continue;
        }
        if provider.is_some() {
            return Err("--provider is given twice".into());
        }
        let mut command: Vec<String> = inline.into_iter().collect();
        let mut verbatim = false;
        for next in words.by_ref() {
            if verbatim {
                command.push(next);
            } else if command.is_empty() && is_harness_option(&next) {
                return Err(format!(
                    "--provider needs a command before {next}, e.g. --provider ./my-provider"
                ));
            } else if next == "--" && !command.is_empty() {
                verbatim = true;
            } else if is_harness_option(&next) && !command.is_empty() {
                harness.push(next);
                break;
            } else {
                command.push(next);
            }
        }
        if command.is_empty() {
            return Err("--provider needs a command, e.g. --provider ./my-provider".into());
        }
        provider = Some(command);
    }
    Ok((harness, provider))
}

impl Args {
    /// Parses the process's command line; `Err` carries the exit status (help, version, or a
    /// usage error already printed).
    pub fn from_env() -> Result<Args, i32> {
        let (harness, provider) = match split_provider(std::env::args().collect()) {
            Ok(split) => split,
            Err(message) => {
                eprintln!("error: {message}");
                return Err(EXIT_USAGE);
            }
        };
        let mut args = match Args::try_parse_from(harness) {
            Ok(args) => args,
            Err(err) => {
                let code = if err.use_stderr() {
                    EXIT_USAGE
                } else {
                    EXIT_OK
                };
                let _ = err.print();
                return Err(code);
            }
        };
        match provider {
            Some(provider) => args.provider = provider,
            None if args.list => {}
            None => {
                eprintln!(
                    "error: --provider <COMMAND> [ARGS...] is required (or --list); see --help"
                );
                return Err(EXIT_USAGE);
            }
        }
        Ok(args)
    }

    /// The run configuration these flags describe.
    pub fn config(&self) -> Config {
        let mut config = Config::new(self.provider.clone());
        config.cwd = self.cwd.clone();
        config.env = self.env.clone();
        config.jobs = self.jobs;
        config.strict = self.strict;
        config.handshake_timeout = Duration::from_millis(self.handshake_timeout_ms);
        config.operation_timeout = Duration::from_millis(self.operation_timeout_ms);
        config.turn_timeout = Duration::from_millis(self.turn_timeout_ms);
        config.exit_timeout = Duration::from_millis(self.exit_timeout_ms);
        config.result_delay = Duration::from_millis(self.result_delay_ms);
        config.settle = Duration::from_millis(self.settle_ms);
        config.groups = self.groups.clone();
        config.scenarios = self.scenarios.clone();
        config
    }
}

/// The `--list` text.
pub fn list_text() -> String {
    let mut out = String::new();
    for s in scenarios::all() {
        out.push_str(&format!(
            "{:<13} {:<44} {:<12} {}\n",
            s.group,
            s.name,
            s.level.as_str(),
            s.checks
        ));
    }
    out
}

/// Whether `program` can be found (a path that exists, or a name on PATH).
pub fn program_exists(program: &str) -> bool {
    if program.contains('/') {
        return std::path::Path::new(program).is_file();
    }
    std::env::var_os("PATH")
        .is_some_and(|paths| std::env::split_paths(&paths).any(|dir| dir.join(program).is_file()))
}

/// Runs the CLI; returns the exit status.
pub async fn main_with(args: Args) -> i32 {
    if args.list {
        print!("{}", list_text());
        return EXIT_OK;
    }
    let config = args.config();
    if let Err(message) = config.validate() {
        eprintln!("error: {message}");
        return EXIT_USAGE;
    }
    if !program_exists(&config.provider[0]) {
        eprintln!(
            "error: provider command {:?} not found; give a path (./target/debug/my-provider) \
             or a program on PATH",
            config.provider[0]
        );
        return EXIT_USAGE;
    }
    let selected = match crate::runner::select(&config) {
        Ok(selected) if selected.is_empty() => {
            eprintln!("error: no scenario matches the --group/--scenario filters");
            return EXIT_USAGE;
        }
        Ok(selected) => selected,
        Err(message) => {
            eprintln!("error: {message}");
            return EXIT_USAGE;
        }
    };
    let report = crate::runner::run(&config, selected).await;
    if args.json {
        println!("{}", report.to_json());
    } else {
        print!("{}", report.to_text());
    }
    if report.success() {
        EXIT_OK
    } else {
        EXIT_FAILED
    }
}
