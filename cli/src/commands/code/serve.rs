//! `code serve`: the code-runtime protocol as JSON lines on stdin/stdout (docs/code-runtime.md).
//!
//! Messages are typed both ways ([`Incoming`], [`Outgoing`]); every line out goes through one
//! writer task, so lines from concurrent runs never tear. Values (resolutions, arguments,
//! results) stay raw JSON text: no depth limit, lone surrogates and `-0` kept. A line that
//! cannot be used gets an `error` reply and serving goes on; EOF disposes: every run in flight
//! is aborted, its result written, then the process exits 0.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use remote_runner_engine::Result;
use remote_runner_engine::engine::code::{
    CodeBindingNamespace, CodeCall, CodeRuntime, raw_member, validate_bindings,
};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt};
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use crate::context::Context;

/// A line from the harness, before its fields are checked for its type.
#[derive(Deserialize)]
struct Incoming<'a> {
    #[serde(rename = "type")]
    kind: Option<String>,
    #[serde(rename = "runId")]
    run_id: Option<String>,
    program: Option<String>,
    bindings: Option<Vec<CodeBindingNamespace>>,
    #[serde(rename = "callId")]
    call_id: Option<String>,
    #[serde(borrow, default)]
    value: Option<&'a RawValue>,
    message: Option<String>,
}

/// A line to the harness.
#[derive(Serialize)]
#[serde(tag = "type", rename_all = "lowercase")]
enum Outgoing<'a> {
    Hello {
        language: &'a str,
        isolation: &'a str,
    },
    Call {
        #[serde(rename = "runId")]
        run_id: &'a str,
        #[serde(rename = "callId")]
        call_id: &'a str,
        global: &'a str,
        function: &'a str,
        args: &'a RawValue,
    },
    Result {
        #[serde(rename = "runId")]
        run_id: &'a str,
        result: &'a RawValue,
    },
    Error {
        #[serde(rename = "runId", skip_serializing_if = "Option::is_none")]
        run_id: Option<&'a str>,
        code: &'a str,
        message: &'a str,
    },
}

/// The one writer of stdout: whole lines, in the order queued.
#[derive(Clone)]
struct Out(mpsc::UnboundedSender<String>);

impl Out {
    fn send(&self, msg: &Outgoing) {
        let line = serde_json::to_string(msg).expect("outgoing messages serialize");
        let _ = self.0.send(line);
    }

    fn error(&self, run_id: Option<&str>, code: &str, message: &str) {
        self.send(&Outgoing::Error {
            run_id,
            code,
            message,
        });
    }
}

fn writer() -> (Out, tokio::task::JoinHandle<()>) {
    let (tx, mut rx) = mpsc::unbounded_channel::<String>();
    let task = tokio::spawn(async move {
        let mut stdout = tokio::io::BufWriter::new(tokio::io::stdout());
        while let Some(line) = rx.recv().await {
            if stdout.write_all(line.as_bytes()).await.is_err()
                || stdout.write_all(b"\n").await.is_err()
            {
                return;
            }
            // Flush once nothing else is queued: a burst goes out in one write.
            if rx.is_empty() && stdout.flush().await.is_err() {
                return;
            }
        }
        let _ = stdout.flush().await;
    });
    (Out(tx), task)
}

/// Runs in flight and the settlers of their binding calls.
#[derive(Default)]
struct State {
    runs: HashMap<String, CancellationToken>,
    calls: HashMap<(String, String), oneshot::Sender<std::result::Result<String, String>>>,
    /// stdin reached its end: calls are refused at once.
    closed: bool,
}

type Shared = Arc<Mutex<State>>;

const DISPOSED: &str = "the host closed the runtime (stdin EOF) before settling this call";

pub(super) async fn serve(
    ctx: &Context,
    args: super::RuntimeArgs,
) -> Result<crate::output::Report> {
    let rt = super::runtime(ctx, &args).await?;
    let (out, writer) = writer();
    out.send(&Outgoing::Hello {
        language: rt.language().as_str(),
        isolation: rt.isolation(),
    });
    let state: Shared = Arc::new(Mutex::new(State::default()));
    let mut tasks = tokio::task::JoinSet::new();
    let mut input = tokio::io::BufReader::new(tokio::io::stdin());
    let mut buf = Vec::new();
    loop {
        buf.clear();
        match input.read_until(b'\n', &mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
        while let Some(done) = tasks.try_join_next() {
            let _ = done;
        }
        let Ok(line) = std::str::from_utf8(&buf) else {
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
    // stdin EOF: dispose. Every run in flight is aborted (its processes stopped); calls in
    // flight can no longer be settled. Each run's result is written, then we exit.
    {
        let mut state = state.lock().expect("state lock");
        state.closed = true;
        for (_, reply) in state.calls.drain() {
            let _ = reply.send(Err(DISPOSED.to_string()));
        }
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
    let msg: Incoming = serde_json::from_str(line)
        .map_err(|e| format!("the line is not a message of the code-runtime protocol: {e}"))?;
    let kind = msg.kind.as_deref().ok_or("the message has no type")?;
    let run_id = msg
        .run_id
        .clone()
        .ok_or_else(|| format!("the {kind} message has no runId"))?;
    match kind {
        "run" => {
            let program = msg
                .program
                .ok_or("the run message has no program (the program's source text)")?;
            let bindings = msg
                .bindings
                .ok_or("the run message has no bindings (an array, [] for none)")?;
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
        "abort" => {
            let s = state.lock().expect("state lock");
            let token = s
                .runs
                .get(&run_id)
                .ok_or("no run with this runId is in flight")?;
            token.cancel();
            Ok(())
        }
        "resolve" | "reject" => {
            let call_id = msg
                .call_id
                .ok_or_else(|| format!("the {kind} message has no callId"))?;
            let reply = if kind == "resolve" {
                match msg.value {
                    Some(v) => Ok(v.get().to_string()),
                    None if raw_member(line, "value") == Some("null") => Ok("null".to_string()),
                    None => return Err("the resolve message has no value".into()),
                }
            } else {
                Err(msg
                    .message
                    .ok_or("the reject message has no message (a string)")?)
            };
            let settle = state
                .lock()
                .expect("state lock")
                .calls
                .remove(&(run_id, call_id))
                .ok_or("no call with this callId is in flight")?;
            let _ = settle.send(reply);
            Ok(())
        }
        other => Err(format!(
            "unknown message type {other:?}; use run, abort, resolve or reject"
        )),
    }
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
                if s.closed {
                    let _ = call.reply.send(Err(DISPOSED.to_string()));
                    continue;
                }
                // Registered before the line goes out: the harness may answer at once.
                s.calls
                    .insert((run_id.clone(), call.call_id.clone()), call.reply);
                drop(s);
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
