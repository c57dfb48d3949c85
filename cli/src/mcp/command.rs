//! `session_exec`, `command_wait`, `command_stop`. The result is the command record, as the
//! CLI's `session exec | command wait | command stop --json` print it.
//!
//! A wait is made of engine waits so that it can report progress and be cancelled: the command
//! starts with a short first wait (most commands end within it: one engine call, no more); a
//! longer one is then followed with `command_wait` (or, when the client asked for progress,
//! `wait_output`, which returns as the output grows). Cancelling the call or running out of
//! `timeout_s` only stops the waiting: the command goes on, as with the CLI's `--timeout`.

use std::time::Duration;

use remote_runner_engine::Result;
use remote_runner_engine::engine::{CommandMode, CommandRecord, ExecRequest};
use schemars::JsonSchema;
use serde::Deserialize;
use tokio::time::Instant;

use super::reply::{Reply, command_text};
use super::{Call, DEFAULT_WAIT};
use crate::commands::session::{self as cli, CommandCommand, CommandRef, SessionCommand};
use crate::output::to_json;

/// The first wait of `session_exec`: a command that ends within it costs one engine call.
const FIRST_WAIT: Duration = Duration::from_secs(2);

/// The first wait when the client asked for progress: the output is reported from then on.
const FIRST_WAIT_WITH_PROGRESS: Duration = Duration::from_millis(300);

/// Longest single wait while progress is reported (a notification at least this often, output
/// or not).
const PROGRESS_ROUND: Duration = Duration::from_secs(5);

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ExecArgs {
    /// Session id (sess_...; from session_create or session_list)
    pub session_id: String,
    /// The shell command line, run in the session's shell (cd and export persist)
    pub command: String,
    /// Seconds to wait for the command to end [default: 60]; past it the result says status
    /// running with the command_id, and the command goes on
    pub timeout_s: Option<f64>,
    /// Start the command detached and return at once (follow it with command_wait)
    pub background: Option<bool>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WaitArgs {
    /// Session id (sess_...)
    pub session_id: String,
    /// Command id (cmd_...)
    pub command_id: String,
    /// Seconds to wait [default: 60]; the command is never stopped by the wait
    pub timeout_s: Option<f64>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StopArgs {
    /// Session id (sess_...)
    pub session_id: String,
    /// Command id (cmd_...)
    pub command_id: String,
}

/// `timeout_s` as a duration: positive and finite, or a clear error.
pub fn wait_bound(timeout_s: Option<f64>) -> Result<Duration> {
    match timeout_s {
        None => Ok(DEFAULT_WAIT),
        Some(s) if s.is_finite() && s > 0.0 => Ok(Duration::from_secs_f64(s.min(86_400.0))),
        Some(s) => Err(remote_runner_engine::Error::invalid(format!(
            "timeout_s must be a positive number of seconds, not {s}"
        ))),
    }
}

pub async fn exec(call: &Call, args: ExecArgs) -> Result<Reply> {
    call.state.check_session(&args.session_id)?;
    let bound = wait_bound(args.timeout_s)?;
    let background = args.background.unwrap_or(false);
    let started = Instant::now();
    let request = ExecRequest {
        mode: if background {
            CommandMode::Background
        } else {
            CommandMode::Wait
        },
        cwd: None,
        timeout: (!background).then_some(bound.min(if call.progress.is_some() {
            FIRST_WAIT_WITH_PROGRESS
        } else {
            FIRST_WAIT
        })),
        env: Vec::new(),
        ..ExecRequest::wait()
    };
    let engine = call.state.engine();
    let first = engine.exec(&args.session_id, &args.command, request);
    let rec = tokio::select! {
        rec = first => rec?,
        () = call.cancel.cancelled() => return Ok(cancelled(&args.session_id)),
    };
    let rec = if background || !rec.wait_timed_out {
        rec
    } else {
        follow(call, rec, started + bound).await?
    };
    record_reply(&rec)
}

pub async fn wait(call: &Call, args: WaitArgs) -> Result<Reply> {
    call.state.check_session(&args.session_id)?;
    let bound = wait_bound(args.timeout_s)?;
    let deadline = Instant::now() + bound;
    let engine = call.state.engine();
    // Without progress one engine wait does it all; with progress the offsets come first.
    let rec = if call.progress.is_none() {
        let waited = engine.command_wait(&args.session_id, &args.command_id, bound);
        tokio::select! {
            rec = waited => rec?,
            () = call.cancel.cancelled() => {
                engine.command_show(&args.session_id, &args.command_id).await?
            }
        }
    } else {
        engine
            .command_show(&args.session_id, &args.command_id)
            .await?
    };
    let rec = follow(call, rec, deadline).await?;
    record_reply(&rec)
}

pub async fn stop(call: &Call, args: StopArgs) -> Result<Reply> {
    call.state.check_session(&args.session_id)?;
    let ctx = call.state.context(None);
    let target = CommandRef {
        session: args.session_id,
        command_id: args.command_id,
    };
    let json = cli::run(&ctx, SessionCommand::Command(CommandCommand::Stop(target)))
        .await?
        .json;
    let rec: CommandRecord = serde_json::from_value(json.clone())
        .map_err(|e| remote_runner_engine::Error::internal(format!("a stop result: {e}")))?;
    let mut text = String::new();
    if json["already_finished"] == true {
        text.push_str("It had already finished; nothing was stopped. ");
    }
    text.push_str(&command_text(&rec));
    Ok(Reply::new(json, text))
}

/// The record as the CLI prints it, and as text.
fn record_reply(rec: &CommandRecord) -> Result<Reply> {
    Ok(Reply::new(to_json(rec)?, command_text(rec)))
}

/// Wait for a running command until it ends, `deadline` passes (the record then says
/// `wait_timed_out`) or the call is cancelled; progress notifications on the way when asked.
async fn follow(call: &Call, mut rec: CommandRecord, deadline: Instant) -> Result<CommandRecord> {
    let engine = call.state.engine();
    let (sid, cid) = (rec.session_id.clone(), rec.command_id.clone());
    let began = Instant::now();
    loop {
        if rec.status.is_final() {
            if call.progress.is_some() {
                // The record as a plain wait returns it (output copied, excerpts sized).
                return engine
                    .command_wait(&sid, &cid, Duration::from_secs(1))
                    .await;
            }
            return Ok(rec);
        }
        let now = Instant::now();
        if now >= deadline || call.cancel.is_cancelled() {
            rec.wait_timed_out = true;
            return Ok(rec);
        }
        let left = deadline - now;
        let step = async {
            if call.progress.is_some() {
                engine
                    .wait_output(
                        &sid,
                        &cid,
                        rec.stdout_bytes,
                        rec.stderr_bytes,
                        left.min(PROGRESS_ROUND),
                    )
                    .await
            } else {
                engine.command_wait(&sid, &cid, left).await
            }
        };
        rec = tokio::select! {
            next = step => next?,
            () = call.cancel.cancelled() => {
                tracing::info!("{cid}: the client cancelled the wait; the command goes on");
                rec.wait_timed_out = true;
                return Ok(rec);
            }
        };
        // Each round ends when the output grew or PROGRESS_ROUND passed: a notification
        // either way, so that a command that prints nothing for minutes still shows life (and
        // a client that resets its request timeout on progress keeps waiting). `progress` is
        // the seconds waited, which always increases, as the protocol requires.
        if call.progress.is_some() && !rec.status.is_final() {
            call.progress(began.elapsed().as_secs_f64(), progress_message(&rec))
                .await;
        }
    }
}

/// `N bytes of output so far; last line: ...`.
fn progress_message(rec: &CommandRecord) -> String {
    let last = rec
        .stdout
        .lines()
        .rev()
        .chain(rec.stderr.lines().rev())
        .find(|l| !l.trim().is_empty())
        .unwrap_or("");
    let last: String = last.chars().take(200).collect();
    format!(
        "{} running: {} bytes of stdout, {} of stderr so far; last line: {last}",
        rec.command_id, rec.stdout_bytes, rec.stderr_bytes
    )
}

/// The call was cancelled before the command id was known (the client sees no result: a
/// cancelled request gets no response).
fn cancelled(session_id: &str) -> Reply {
    Reply::new(
        serde_json::json!({"session_id": session_id, "cancelled": true}),
        format!(
            "Cancelled while starting; the command may run: see session_list or the session's \
             commands ({session_id})."
        ),
    )
}
