//! `remote-runner code run|serve`: the code runtime on a machine (issue 17, docs/code-runtime.md).
//!
//! `code run` prints one `CodeRunResult` (`{value?, logs, error?}`); `code serve` speaks JSON
//! lines on stdin/stdout for harnesses. Results are printed as the exact JSON text the runner
//! produced (never re-serialized through `f64`), so `-0` and large integers survive.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use clap::{Args, Subcommand};
use remote_runner_provider::engine::Connector;
use remote_runner_provider::engine::code::{
    CodeBindingNamespace, CodeCall, CodeConfig, CodeRuntime, Language, raw_member,
};
use remote_runner_provider::{Error, Result};
use serde_json::{Value, json};
use tokio::io::AsyncBufReadExt;
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use crate::context::Context;
use crate::exit;

pub const GROUP_EXAMPLES: &str = "\
Examples:
  echo 'console.log(\"hi\"); return 1 + 1' | remote-runner code run --machine local --language javascript --json
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
    /// Wall-clock budget of each run
    #[arg(long, value_name = "SECONDS", default_value_t = 30.0)]
    pub time_budget: f64,
    /// Cap on each run's serialized logs plus value, in bytes
    #[arg(long, value_name = "BYTES", default_value_t = 1 << 20)]
    pub output_cap: usize,
    /// Directory programs run in [default: the account's home]
    #[arg(long, value_name = "DIR")]
    pub cwd: Option<String>,
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
    if !args.time_budget.is_finite() || args.time_budget <= 0.0 {
        return Err(Error::invalid(
            "--time-budget must be a positive number of seconds",
        ));
    }
    let wired = ctx.engine()?;
    let (machine, cwd) = match &args.session {
        Some(id) => {
            let session = wired.engine.session_show(id)?;
            if let Some(m) = &args.machine
                && m != &session.machine_id
            {
                return Err(Error::invalid(format!(
                    "session {id} is on machine {}, not {m}; drop --machine or pass --machine {}",
                    session.machine_id, session.machine_id
                )));
            }
            (session.machine_id, Some(session.cwd))
        }
        None => (args.machine.clone().unwrap_or_default(), args.cwd.clone()),
    };
    let config = CodeConfig {
        language,
        time_budget: Duration::from_secs_f64(args.time_budget.min(86400.0)),
        output_cap: args.output_cap,
        cwd,
    };
    config.validate()?;
    wired.machine(&machine)?;
    let transport = wired.connector.connect(&machine).await?;
    Ok(Arc::new(CodeRuntime::new(transport, config)?))
}

/// Write `text` and a newline to stdout now (both faces print their own lines).
fn print_line(text: &str) {
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(text.as_bytes());
    let _ = out.write_all(b"\n");
    let _ = out.flush();
}

pub async fn run(ctx: &Context, command: CodeCommand) -> Result<crate::output::Report> {
    match command {
        CodeCommand::Run(args) => run_once(ctx, args).await,
        CodeCommand::Serve(args) => serve(ctx, args).await,
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
    let result = rt
        .run(&program, &[], None, CancellationToken::new())
        .await?;
    if ctx.out.json {
        print_line(&result.json);
    } else {
        let parsed: Value = serde_json::from_str(&result.json).unwrap_or(Value::Null);
        for line in parsed
            .get("logs")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            print_line(&crate::output::neutralize(line.as_str().unwrap_or("")));
        }
        if let Some(value) = raw_member(&result.json, "value") {
            print_line(&format!("=> {value}"));
        }
        if let Some(err) = parsed.get("error") {
            let kind = err.get("kind").and_then(Value::as_str).unwrap_or("?");
            let message = err.get("message").and_then(Value::as_str).unwrap_or("");
            ctx.out.status(&crate::output::Cell::new(
                format!("error [{kind}]: {message}"),
                crate::output::Tone::Bad,
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

/// Settlers of binding calls in flight, by (runId, callId).
type Pending = Arc<Mutex<Calls>>;

#[derive(Default)]
struct Calls {
    calls: HashMap<(String, String), oneshot::Sender<std::result::Result<String, String>>>,
    /// stdin reached EOF: calls are rejected at once.
    closed: bool,
}

const DISPOSED: &str = "the host closed the runtime (stdin EOF) before settling this call";

async fn serve(ctx: &Context, args: RuntimeArgs) -> Result<crate::output::Report> {
    let rt = runtime(ctx, &args).await?;
    print_line(
        &json!({"type": "hello", "language": rt.language().as_str(), "isolation": rt.isolation()})
            .to_string(),
    );
    let pending: Pending = Arc::new(Mutex::new(Calls::default()));
    let mut aborts: HashMap<String, CancellationToken> = HashMap::new();
    let mut tasks = tokio::task::JoinSet::new();
    let mut lines = tokio::io::BufReader::new(tokio::io::stdin()).lines();
    loop {
        let line = match lines.next_line().await {
            Ok(Some(line)) => line,
            Ok(None) | Err(_) => break,
        };
        if line.trim().is_empty() {
            continue;
        }
        let msg: Value = match serde_json::from_str(&line) {
            Ok(v) => v,
            Err(e) => {
                protocol_error(None, &format!("the line is not JSON: {e}"));
                continue;
            }
        };
        let run_id = msg.get("runId").and_then(Value::as_str).map(str::to_string);
        let Some(run_id) = run_id else {
            protocol_error(None, "the message has no runId");
            continue;
        };
        match msg.get("type").and_then(Value::as_str) {
            Some("run") => {
                if aborts.contains_key(&run_id) {
                    protocol_error(Some(&run_id), "a run with this runId is already in flight");
                    continue;
                }
                let program = msg
                    .get("program")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_string();
                let bindings: Vec<CodeBindingNamespace> = match msg.get("bindings") {
                    None | Some(Value::Null) => Vec::new(),
                    Some(b) => match serde_json::from_value(b.clone()) {
                        Ok(b) => b,
                        Err(e) => {
                            protocol_error(Some(&run_id), &format!("bad bindings: {e}"));
                            continue;
                        }
                    },
                };
                let token = CancellationToken::new();
                aborts.insert(run_id.clone(), token.clone());
                let rt = rt.clone();
                let pending = pending.clone();
                tasks.spawn(async move {
                    let (tx, mut rx) = mpsc::unbounded_channel::<CodeCall>();
                    let forward_pending = pending.clone();
                    let forward_run = run_id.clone();
                    let forward = tokio::spawn(async move {
                        while let Some(call) = rx.recv().await {
                            // Registered before the line goes out: the host may answer at once.
                            let line = format!(
                                "{{\"type\":\"call\",\"runId\":{},\"callId\":{},\"global\":{},\"function\":{},\"args\":{}}}",
                                json!(forward_run),
                                json!(call.call_id),
                                json!(call.global),
                                json!(call.function),
                                call.args
                            );
                            let mut pending = forward_pending.lock().expect("pending lock");
                            if pending.closed {
                                // stdin is closed: nobody can settle this call any more.
                                let _ = call.reply.send(Err(DISPOSED.to_string()));
                                continue;
                            }
                            pending
                                .calls
                                .insert((forward_run.clone(), call.call_id), call.reply);
                            drop(pending);
                            print_line(&line);
                        }
                    });
                    let calls = (!bindings.is_empty()).then_some(tx);
                    let result = match rt.run(&program, &bindings, calls, token).await {
                        Ok(r) => r.json,
                        Err(e) => json!({"logs": [], "error": {"kind": "worker-exit", "message": e.message}})
                            .to_string(),
                    };
                    forward.abort();
                    pending
                        .lock()
                        .expect("pending lock")
                        .calls
                        .retain(|(r, _), _| r != &run_id);
                    print_line(&format!(
                        "{{\"type\":\"result\",\"runId\":{},\"result\":{result}}}",
                        json!(run_id)
                    ));
                    run_id
                });
            }
            Some("abort") => match aborts.get(&run_id) {
                Some(token) => token.cancel(),
                None => protocol_error(Some(&run_id), "no run with this runId is in flight"),
            },
            Some(kind @ ("resolve" | "reject")) => {
                let call_id = msg
                    .get("callId")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_string();
                let settle = pending
                    .lock()
                    .expect("pending lock")
                    .calls
                    .remove(&(run_id.clone(), call_id));
                let Some(settle) = settle else {
                    protocol_error(Some(&run_id), "no call with this callId is in flight");
                    continue;
                };
                let reply = if kind == "resolve" {
                    Ok(raw_member(&line, "value").unwrap_or("null").to_string())
                } else {
                    Err(msg
                        .get("message")
                        .and_then(Value::as_str)
                        .unwrap_or("the host rejected the call")
                        .to_string())
                };
                let _ = settle.send(reply);
            }
            _ => protocol_error(Some(&run_id), "unknown message type"),
        }
        while let Some(done) = tasks.try_join_next() {
            if let Ok(run_id) = done {
                aborts.remove(&run_id);
            }
        }
    }
    // stdin EOF: dispose. Calls in flight can no longer be settled: they reject inside their
    // programs; then wait for every run in flight to end.
    {
        let mut pending = pending.lock().expect("pending lock");
        pending.closed = true;
        for (_, reply) in pending.calls.drain() {
            let _ = reply.send(Err(DISPOSED.to_string()));
        }
    }
    while tasks.join_next().await.is_some() {}
    std::process::exit(0);
}

fn protocol_error(run_id: Option<&str>, message: &str) {
    let mut v = json!({"type": "error", "message": message});
    if let Some(r) = run_id {
        v["runId"] = json!(r);
    }
    print_line(&v.to_string());
}
