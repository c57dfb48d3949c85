//! `remote-runner code run|serve`: the code runtime on a machine (issue 17, docs/code-runtime.md).
//!
//! `code run` prints one `CodeRunResult` (`{value?, logs, error?}`); `code serve` speaks JSON
//! lines on stdin/stdout for harnesses ([`serve`]). Results are printed as the exact JSON text
//! the runner produced (never re-serialized through `f64`), so `-0`, large integers and lone
//! surrogates survive; the human form is neutralised like every other human output.

mod serve;

use std::io::{Read, Write};
use std::sync::Arc;
use std::time::Duration;

use clap::{Args, Subcommand};
use remote_runner_engine::engine::code::{
    CodeConfig, CodeRuntime, Isolation, Language, raw_member,
};
use remote_runner_engine::{Error, Result};
use serde_json::value::RawValue;
use tokio_util::sync::CancellationToken;

use crate::context::Context;
use crate::exit;

pub const GROUP_EXAMPLES: &str = "\
Examples:
  echo 'console.log(\"hi\"); return 1 + 1' | \\
      remote-runner code run --machine local --language javascript --json
  remote-runner code run --machine lab-gpu-01 --language python --program job.py --time-budget 60
  remote-runner code serve --machine lab-gpu-01 --language javascript";

#[derive(Debug, Subcommand)]
pub enum CodeCommand {
    /// Run one program (the body of an async function) and print its CodeRunResult
    #[command(
        after_help = "Examples:\n  echo 'return 6 * 7' | remote-runner code run --machine local --language javascript --json\n  remote-runner code run --machine lab-gpu-01 --language python --program job.py --time-budget 60"
    )]
    Run(RunArgs),
    /// Speak the code-runtime protocol as JSON lines on stdin/stdout (docs/code-runtime.md)
    #[command(
        after_help = "Examples:\n  remote-runner code serve --machine lab-gpu-01 --language javascript --time-budget 60"
    )]
    Serve(RuntimeArgs),
}

#[derive(Debug, Args)]
pub struct RuntimeArgs {
    /// Machine to run on (`local` is this host) [default: the --session's machine]
    #[arg(long, value_name = "MACHINE_ID", required_unless_present = "session")]
    pub machine: Option<String>,
    /// Run in this session's working directory, on its machine
    #[arg(long, value_name = "SESSION_ID", conflicts_with = "cwd")]
    pub session: Option<String>,
    /// Program language: javascript (node) or python (python3)
    #[arg(long, value_name = "LANGUAGE")]
    pub language: String,
    /// Wall-clock budget of each run, 1 to 86400 seconds
    #[arg(long, value_name = "SECONDS", default_value_t = 30.0)]
    pub time_budget: f64,
    /// Cap on each run's serialized logs plus value (or failure message), 16 bytes to 256 MiB
    #[arg(long, value_name = "BYTES", default_value_t = 1 << 20)]
    pub output_cap: usize,
    /// Directory programs run in [default: the account's home]
    #[arg(long, value_name = "DIR")]
    pub cwd: Option<String>,
    /// Largest file a run may write, in bytes (RLIMIT_FSIZE) [default: the machine's]
    #[arg(long, value_name = "BYTES")]
    pub max_file_size: Option<u64>,
    /// Address space of each process of a run, in bytes (RLIMIT_AS; node needs some GiB)
    /// [default: the machine's]
    #[arg(long, value_name = "BYTES")]
    pub max_memory: Option<u64>,
    /// Processes the account may have while a run forks (RLIMIT_NPROC, counted per account)
    /// [default: the machine's]
    #[arg(long, value_name = "COUNT")]
    pub max_processes: Option<u64>,
    /// Run even where the machine cannot seal a run (no user namespaces): the program can then
    /// reach what the account can (its tmux servers, the engine's state). Without it such a
    /// machine's runs are refused with isolation_unavailable
    #[arg(long)]
    pub allow_weak_isolation: bool,
}

#[derive(Debug, Args)]
pub struct RunArgs {
    #[command(flatten)]
    pub runtime: RuntimeArgs,
    /// Program file, or `-` for stdin [default: stdin]
    #[arg(long, value_name = "FILE")]
    pub program: Option<String>,
}

pub(crate) async fn runtime(ctx: &Context, args: &RuntimeArgs) -> Result<Arc<CodeRuntime>> {
    let language = Language::parse(&args.language)?;
    if !args.time_budget.is_finite() || !(1.0..=86400.0).contains(&args.time_budget) {
        return Err(Error::invalid(format!(
            "--time-budget {} is out of range: give between 1 and 86400 seconds",
            args.time_budget
        )));
    }
    let wired = ctx.engine()?;
    let session = match &args.session {
        Some(id) => Some(wired.engine.session_show(id)?),
        None => None,
    };
    let (machine, cwd) = match &session {
        Some(session) => {
            if let Some(m) = &args.machine
                && m != &session.machine_id
            {
                return Err(Error::invalid(format!(
                    "session {} is on machine {}, not {m}; drop --machine or pass --machine {}",
                    session.session_id, session.machine_id, session.machine_id
                )));
            }
            (session.machine_id.clone(), Some(session.cwd.clone()))
        }
        None => (args.machine.clone().unwrap_or_default(), args.cwd.clone()),
    };
    let config = CodeConfig {
        language,
        time_budget: Duration::from_secs_f64(args.time_budget),
        output_cap: args.output_cap,
        cwd,
        max_file_size: args.max_file_size,
        max_memory: args.max_memory,
        max_processes: args.max_processes,
        allow_weak_isolation: args.allow_weak_isolation,
    };
    config.validate()?;
    wired.machine(&machine)?;
    // A session in a Slurm allocation: its runs go to the allocation's node.
    let runtime = wired
        .engine
        .code_runtime(&machine, session.as_ref(), config)
        .await?;
    Ok(Arc::new(runtime))
}

/// Write `text` and a newline to stdout now (`code run`'s lines; `serve` writes only through its
/// writer task, `serve/writer.rs`).
fn print_line(text: &str) {
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(text.as_bytes());
    let _ = out.write_all(b"\n");
    let _ = out.flush();
}

pub async fn run(ctx: &Context, command: CodeCommand) -> Result<crate::output::Report> {
    match command {
        CodeCommand::Run(args) => run_once(ctx, args).await,
        CodeCommand::Serve(args) => serve::serve(ctx, args).await,
    }
}

async fn run_once(ctx: &Context, args: RunArgs) -> Result<crate::output::Report> {
    let program = match args.program.as_deref() {
        None | Some("-") => {
            let mut s = String::new();
            std::io::stdin()
                .read_to_string(&mut s)
                .map_err(|e| Error::io("cannot read the program from stdin", &e))?;
            s
        }
        Some(path) => std::fs::read_to_string(path)
            .map_err(|e| Error::io(format!("cannot read the program file {path}"), &e))?,
    };
    let rt = runtime(ctx, &args.runtime).await?;
    let sandbox = rt.sandbox().await?;
    let result = rt
        .run(&program, &[], None, CancellationToken::new())
        .await?;
    if ctx.out.json {
        print_line(&with_sandbox(&result.json, sandbox.as_str()));
    } else {
        print_human(ctx, &result.json);
        if sandbox != Isolation::Sealed {
            ctx.out.note(&format!(
                "the run was not sealed (isolation: {}): it could reach what the account can",
                sandbox.as_str()
            ));
        }
    }
    let code = if result.error_kind.is_some() {
        exit::WORK_FAILED
    } else {
        exit::SUCCESS
    };
    // The result is already printed, as its exact text: end here rather than print a Report.
    std::process::exit(code.into());
}

/// The result's JSON text with the isolation the run got as one more member, `"sandbox"` (the
/// rest stays the runner's exact text).
pub(crate) fn with_sandbox(json: &str, sandbox: &str) -> String {
    let body = json.trim_end().strip_suffix('}').unwrap_or(json);
    format!("{body},\"sandbox\":\"{sandbox}\"}}")
}

/// The human form of a result: each log line, `=> value`, the error; all neutralised (terminal
/// controls, C1 controls, bidirectional overrides shown as text).
fn print_human(ctx: &Context, json: &str) {
    use crate::output::neutralize;
    #[derive(serde::Deserialize)]
    struct Shape<'a> {
        #[serde(borrow, default)]
        logs: Vec<&'a RawValue>,
        #[serde(borrow, default)]
        error: Option<Failure<'a>>,
    }
    #[derive(serde::Deserialize)]
    struct Failure<'a> {
        #[serde(borrow)]
        kind: &'a RawValue,
        #[serde(borrow)]
        message: &'a RawValue,
    }
    let Ok(shape) = serde_json::from_str::<Shape>(json) else {
        print_line(&neutralize(json));
        return;
    };
    for line in &shape.logs {
        print_line(&neutralize(&string_text(line)));
    }
    if let Some(value) = raw_member(json, "value") {
        print_line(&format!("=> {}", neutralize(value)));
    }
    if let Some(err) = shape.error {
        ctx.out.status(&crate::output::Cell::new(
            format!(
                "error [{}]: {}",
                neutralize(&string_text(err.kind)),
                neutralize(&string_text(err.message))
            ),
            crate::output::Tone::Bad,
        ));
    }
}

/// The text of a JSON string; a lone surrogate (which no Rust string holds) stays its `\u`
/// escape.
fn string_text(raw: &RawValue) -> String {
    serde_json::from_str::<String>(raw.get()).unwrap_or_else(|_| {
        let t = raw.get();
        t.strip_prefix('"')
            .and_then(|t| t.strip_suffix('"'))
            .unwrap_or(t)
            .to_string()
    })
}
