//! `code serve`: the code-runtime protocol as JSON lines on stdin/stdout (docs/code-runtime.md).
//!
//! Messages are typed both ways ([`wire`]); every line out goes through one writer task
//! ([`writer`]), so lines from concurrent runs never tear. Values (resolutions, arguments,
//! results) stay raw JSON text: no depth limit, lone surrogates and `-0` kept. A line that
//! cannot be used, or one over [`MAX_LINE`] ([`lines`]), gets an `error` reply and serving
//! goes on; EOF disposes: every run in flight is aborted, its result written, then the process
//! exits 0.

mod lines;
mod wire;
mod writer;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use remote_runner_engine::Result;
use remote_runner_engine::engine::code::{
    CodeBindingNamespace, CodeCall, CodeRuntime, raw_member, validate_bindings,
};
use serde_json::value::RawValue;
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use crate::context::Context;
use lines::{Lines, MAX_LINE, Next};
use wire::{Message, Outgoing};
use writer::Out;

/// Runs in flight and the settlers of their binding calls.
#[derive(Default)]
struct State {
    runs: HashMap<String, CancellationToken>,
    calls: HashMap<(String, String), oneshot::Sender<std::result::Result<String, String>>>,
    /// stdin reached its end: no run starts, and no call goes out (the harness cannot answer).
    closed: bool,
}

type Shared = Arc<Mutex<State>>;

pub(super) async fn serve(
    ctx: &Context,
    args: super::RuntimeArgs,
) -> Result<crate::output::Report> {
    let rt = super::runtime(ctx, &args).await?;
    // A machine that cannot seal runs is refused here, before any run, unless allowed.
    let sandbox = rt.sandbox().await?;
    let (out, writer) = writer::spawn();
    out.send(&Outgoing::Hello {
        language: rt.language().as_str(),
        isolation: rt.isolation(),
        sandbox: sandbox.as_str(),
    });
    let state: Shared = Arc::new(Mutex::new(State::default()));
    let mut tasks = tokio::task::JoinSet::new();
    let mut input = Lines::new(tokio::io::BufReader::new(tokio::io::stdin()), MAX_LINE);
    loop {
        let buf = match input.next().await {
            Next::Line(line) => line,
            Next::TooLong => {
                out.error(
                    None,
                    "line_too_long",
                    &format!(
                        "the line is longer than {} MiB ({MAX_LINE} bytes) before its newline; \
                         it was dropped up to its newline. Send each message as one JSON line \
                         under {} MiB (a program or value that large is not carried)",
                        MAX_LINE >> 20,
                        MAX_LINE >> 20,
                    ),
                );
                continue;
            }
            Next::End => break,
        };
        while let Some(done) = tasks.try_join_next() {
            let _ = done;
        }
        let Ok(line) = std::str::from_utf8(buf) else {
            out.error(
                None,
                "invalid_argument",
                "the line is not UTF-8; send each message as one UTF-8 JSON line",
            );
            continue;
        };
        let line = line.trim_end_matches(['\n', '\r']);
        if line.trim().is_empty() {
            continue;
        }
        if let Err(message) = handle(line, &rt, &out, &state, &mut tasks) {
            let run_id =
                raw_member(line, "runId").and_then(|r| serde_json::from_str::<String>(r).ok());
            out.error(run_id.as_deref(), "invalid_argument", &message);
        }
    }
    // stdin EOF: dispose. Every run in flight is aborted (its processes stopped), its result
    // written, then we exit. Calls in flight are left unsettled until their run ends: rejecting
    // them would let a program that catches the rejection settle before its abort is seen, and
    // its result would depend on which came first.
    {
        let mut state = state.lock().expect("state lock");
        state.closed = true;
        for token in state.runs.values() {
            token.cancel();
        }
    }
    while tasks.join_next().await.is_some() {}
    drop(out);
    let _ = writer.await;
    std::process::exit(0);
}

/// One line from the harness; `Err` is the message of the error reply.
fn handle(
    line: &str,
    rt: &Arc<CodeRuntime>,
    out: &Out,
    state: &Shared,
    tasks: &mut tokio::task::JoinSet<()>,
) -> std::result::Result<(), String> {
    match Message::parse(line)? {
        Message::Run {
            run_id,
            program,
            bindings,
        } => {
            validate_bindings(&bindings, rt.language()).map_err(|e| e.message)?;
            let token = CancellationToken::new();
            {
                let mut s = state.lock().expect("state lock");
                if s.closed {
                    return Err("the runtime is disposing".into());
                }
                if s.runs.contains_key(&run_id) {
                    return Err("a run with this runId is already in flight".into());
                }
                s.runs.insert(run_id.clone(), token.clone());
            }
            tasks.spawn(run(
                rt.clone(),
                out.clone(),
                state.clone(),
                run_id,
                program,
                bindings,
                token,
            ));
            Ok(())
        }
        Message::Abort { run_id } => {
            let s = state.lock().expect("state lock");
            let token = s
                .runs
                .get(&run_id)
                .ok_or("no run with this runId is in flight")?;
            token.cancel();
            Ok(())
        }
        Message::Resolve {
            run_id,
            call_id,
            value,
        } => settle(state, run_id, call_id, Ok(value.get().to_string())),
        Message::Reject {
            run_id,
            call_id,
            message,
        } => settle(state, run_id, call_id, Err(message)),
    }
}

/// Settle the binding call `call_id` of run `run_id`.
fn settle(
    state: &Shared,
    run_id: String,
    call_id: String,
    reply: std::result::Result<String, String>,
) -> std::result::Result<(), String> {
    let settle = state
        .lock()
        .expect("state lock")
        .calls
        .remove(&(run_id, call_id))
        .ok_or("no call with this callId is in flight")?;
    let _ = settle.send(reply);
    Ok(())
}

/// One run: forward its binding calls, then write its result. The run leaves the state before
/// its result goes out, so the harness may reuse its runId at once.
async fn run(
    rt: Arc<CodeRuntime>,
    out: Out,
    state: Shared,
    run_id: String,
    program: String,
    bindings: Vec<CodeBindingNamespace>,
    token: CancellationToken,
) {
    let (tx, mut rx) = mpsc::unbounded_channel::<CodeCall>();
    let forward = {
        let (out, state, run_id) = (out.clone(), state.clone(), run_id.clone());
        tokio::spawn(async move {
            while let Some(call) = rx.recv().await {
                let mut s = state.lock().expect("state lock");
                // Registered before the line goes out: the harness may answer at once.
                s.calls
                    .insert((run_id.clone(), call.call_id.clone()), call.reply);
                let closed = s.closed;
                drop(s);
                if closed {
                    // Disposing: the run is being aborted; its call stays unsettled (see
                    // `serve`) and nobody is left to answer it.
                    continue;
                }
                let args = RawValue::from_string(call.args)
                    .unwrap_or_else(|_| RawValue::from_string("null".into()).expect("null"));
                out.send(&Outgoing::Call {
                    run_id: &run_id,
                    call_id: &call.call_id,
                    global: &call.global,
                    function: &call.function,
                    args: &args,
                });
            }
        })
    };
    let calls = (!bindings.is_empty()).then_some(tx);
    let result = match rt.run(&program, &bindings, calls, token).await {
        Ok(r) => r.json,
        Err(e) => {
            serde_json::json!({"logs": [], "error": {"kind": "worker-exit", "message": e.message}})
                .to_string()
        }
    };
    forward.abort();
    {
        let mut s = state.lock().expect("state lock");
        s.calls.retain(|(r, _), _| r != &run_id);
        s.runs.remove(&run_id);
    }
    let result = RawValue::from_string(result).expect("results are JSON");
    out.send(&Outgoing::Result {
        run_id: &run_id,
        result: &result,
    });
}
