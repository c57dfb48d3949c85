//! One turn: start the work in the session shell, stream its output as `progress`, end with
//! `final` (or a `failure` carrying the turn id).
//!
//! Shell mode runs the turn's content as a command line in the persistent shell, so `cd`,
//! `export` and functions carry over between turns. Agent mode hands the content on stdin to the
//! configured agent command; the command may leave `thread_id` and `usage.json` in its turn
//! directory (`$RR_TURN_DIR`), which become `lineage_changed` and `final.usage`.

use std::sync::Arc;
use std::time::Duration;

use remote_runner_protocol::lifecycle::Refusal;
use remote_runner_protocol::{Event, MAX_LINE_BYTES, TurnCommand, Usage, UsageSnapshot, json_text};
use tokio_util::sync::CancellationToken;

use super::config::TurnMode;
use super::failure::{self, Failure};
use super::shared::Shared;
use super::text::{self, Utf8Stream};
use crate::chat::ChatTurn;
use crate::chat::turn::ChatSetup;
use remote_runner_engine::engine::helper::shell_quote;
use remote_runner_engine::engine::retry;
use remote_runner_engine::engine::turn_dir::TurnDir;
use remote_runner_engine::engine::{CommandRecord, CommandStatus, ExecRequest, OutputStream};
use remote_runner_engine::error::{Error, Result};

/// How long starting a turn waits before the ACK (a quick command is already done by then).
const START_WAIT: Duration = Duration::from_millis(300);
/// Longest single wait for new output.
const OUTPUT_WAIT: Duration = Duration::from_secs(10);
/// Largest read per stream per step.
const READ_CHUNK: usize = 2 * 1024 * 1024;
/// Most output text queued for stdout before the stream waits for the host to read.
const QUEUED_OUTPUT_LIMIT: usize = 8 * 1024 * 1024;
/// Most escaped progress text in one event: the rest of the line (the envelope and a turn id
/// of at most 256 UTF-16 units, 6 bytes each escaped) fits in what is left of the host's line
/// limit.
const PROGRESS_ROOM: usize = MAX_LINE_BYTES - 8 * 1024;
/// Most output text in one progress event: the host reads events of a few megabytes as they
/// come, and a turn's read is cut in pieces of this size.
const PROGRESS_EVENT: usize = 2 * 1024 * 1024;
/// Progress piece of text too large escaped for one event: escaped as JSON (at most 6 bytes a
/// byte) it stays well under the host's line limit.
const PROGRESS_PIECE: usize = 512 * 1024;
/// How much recent output the final summary shows.
const SUMMARY_TAIL: usize = 3 * 1024;
/// Cap on an agent reply carried in `final.content`.
const MAX_REPLY: usize = 1024 * 1024;

/// A turn whose command has been accepted by the session shell.
pub struct StartedTurn {
    pub session_id: String,
    pub record: CommandRecord,
    /// Agent mode: the remote turn directory.
    pub agent_dir: Option<TurnDir>,
    /// The turn's chat calls (`RR_CHAT`), when outbound_message or session_tool is on.
    pub chat: Option<ChatTurn>,
}

impl std::fmt::Debug for StartedTurn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StartedTurn")
            .field("session_id", &self.session_id)
            .field("record", &self.record)
            .field("agent_dir", &self.agent_dir)
            .field("chat", &self.chat.is_some())
            .finish()
    }
}

/// The turn's directory on the machine and, with the chat on, the helper's path.
struct TurnPlace {
    dir: TurnDir,
    chat_script: Option<String>,
}

/// Start the turn's command (bounded); errors here become a pre-ACK failure.
pub async fn begin(shared: &Shared, c: &TurnCommand) -> Result<StartedTurn, Failure> {
    let session_id = shared
        .lock()
        .session
        .as_ref()
        .map(|s| s.session_id.clone())
        .ok_or(Failure::Refused(Refusal::NoSession))?;
    let chat_on = shared.config.chat();
    let agent = matches!(shared.config.turn_mode, TurnMode::Agent { .. });
    let place = if chat_on || agent {
        Some(turn_place(shared, &session_id, c, chat_on, agent).await?)
    } else {
        None
    };
    let chat_script = place.as_ref().and_then(|p| p.chat_script.as_deref());
    let (command, agent_dir) = match (&shared.config.turn_mode, &place) {
        (TurnMode::Agent { command }, Some(place)) => {
            let line = prepare_agent_turn(shared, place, c, command, chat_script).await?;
            (line, Some(place.dir.clone()))
        }
        _ => (c.content.clone(), None),
    };
    // Shell mode: the variables are exported in the session shell before the turn's text (so
    // every process of the turn sees them; the next turn exports its own), without being part
    // of the text the record and the terminal show.
    let env = match (&place, chat_script) {
        (Some(place), Some(script)) if agent_dir.is_none() => vec![
            ("RR_CHAT".to_string(), script.to_string()),
            ("RR_TURN_DIR".to_string(), place.dir.path.clone()),
            ("RR_TURN_ID".to_string(), c.turn_id.clone()),
        ],
        _ => Vec::new(),
    };
    let request = ExecRequest::wait().with_timeout(START_WAIT).with_env(env);
    let record = match shared.engine.exec(&session_id, &command, request).await {
        Ok(record) => record,
        // The command ran and ended the shell (`exit`): that is the turn's result (streamed,
        // then reported as a lost session), not a failed start.
        Err(err) if err.code.is_session_lost() => match lost_command(shared, &session_id) {
            // Streamed, then `finish` decides whether the session itself is gone.
            Some(record) => record,
            None => {
                if !shared
                    .engine
                    .check_alive(&session_id)
                    .await
                    .unwrap_or(false)
                {
                    shared.lock().session_lost = true;
                }
                return Err(err.into());
            }
        },
        Err(err) => return Err(err.into()),
    };
    let chat = match place {
        Some(TurnPlace {
            dir,
            chat_script: Some(script),
        }) => Some(ChatTurn::new(ChatSetup {
            host: dir.host(),
            script,
            dir: dir.file("chat"),
            session_dir: dir.session_dir.clone(),
            exit_file: format!("{}/exit", record.remote_state_dir),
            turn_id: c.turn_id.clone(),
            generation: shared.state().map_or(0, |s| s.generation),
            id_prefix: record.command_id.clone(),
            outbound: shared.config.outbound,
            session_tool: shared.config.session_tool,
            out: Arc::new(shared.out.clone()),
            settlements: shared.settlements.clone(),
        })),
        _ => None,
    };
    Ok(StartedTurn {
        session_id,
        record,
        agent_dir,
        chat,
    })
}

/// The turn's directory on the machine (made here in agent mode, which writes the input there)
/// and, with the chat on, the helper (installed once per provider process and version).
async fn turn_place(
    shared: &Shared,
    session_id: &str,
    c: &TurnCommand,
    chat_on: bool,
    agent: bool,
) -> Result<TurnPlace> {
    let dir = shared.engine.turn_dir(session_id, &c.turn_id).await?;
    // The chat directory is made by the helper on first use (and by the provider when it
    // closes the turn's chat), so a turn costs no round trip for it here.
    let chat_script = if chat_on {
        let script = crate::chat::script_path(&dir.session_dir);
        let host = dir.host();
        if !shared.chat_installed(&script) {
            crate::chat::install(&host, &script).await?;
            shared.mark_chat_installed(&script);
        }
        // The turn's program runs it by path: checked (StrictModes) before every turn.
        host.check(&script, "the chat helper").await?;
        Some(script)
    } else {
        None
    };
    if agent {
        dir.create().await?;
    }
    Ok(TurnPlace { dir, chat_script })
}

/// The command that ended the session, if the session recorded one that ran.
fn lost_command(shared: &Shared, session_id: &str) -> Option<CommandRecord> {
    let session = shared.engine.session_show(session_id).ok()?;
    let command_id = session.last_command_id?;
    let record = shared
        .engine
        .command_list(session_id)
        .ok()?
        .into_iter()
        .find(|c| c.command_id == command_id)?;
    (record.status == CommandStatus::Lost).then_some(record)
}

/// Write the turn's content to the remote turn directory and build the agent command line.
async fn prepare_agent_turn(
    shared: &Shared,
    place: &TurnPlace,
    c: &TurnCommand,
    agent_command: &str,
    chat_script: Option<&str>,
) -> Result<String> {
    let input = place.dir.write("input", c.content.as_bytes()).await?;
    let thread = shared
        .state()
        .and_then(|s| s.agent_thread_id)
        .unwrap_or_default();
    let line = format!(
        "{chat}RR_TURN_DIR={d} RR_TURN_ID={t} RR_THREAD_ID={th} {agent_command} < {input}",
        chat = chat_script
            .map(|p| format!("RR_CHAT={} ", shell_quote(p)))
            .unwrap_or_default(),
        d = shell_quote(&place.dir.path),
        t = shell_quote(&c.turn_id),
        th = shell_quote(&thread),
        input = shell_quote(&input),
    );
    Ok(line)
}

/// Stream the started turn to its end. Emits progress, then final or a failure with the turn id.
pub async fn stream(
    shared: &Shared,
    turn_id: &str,
    started: StartedTurn,
    cancel: CancellationToken,
) {
    let watch_stop = CancellationToken::new();
    // A command that ended within the start's wait needs no watch: the close at its end lists
    // every call it made, and a quick turn is spared a second control process beside it.
    if let Some(chat) = started.chat.clone()
        && !started.record.status.is_final()
    {
        let stop = watch_stop.clone();
        tokio::spawn(async move { chat.watch(stop).await });
    }
    // The watch ends by itself when the command ends (its remote wait sees the exit file);
    // it is cut short only when the turn is aborted, as a dropped call costs its control
    // process.
    let abort_chat = || {
        watch_stop.cancel();
        if let Some(chat) = &started.chat {
            chat.abort();
        }
    };
    let outcome = tokio::select! {
        outcome = pump(shared, turn_id, &started, &cancel) => outcome,
        _ = cancel.cancelled() => return abort_chat(),
    };
    if cancel.is_cancelled() {
        return abort_chat();
    }
    if outcome.is_ok()
        && let Some(chat) = &started.chat
    {
        // The final waits until every call of the turn has its result.
        tokio::select! {
            _ = chat.drain() => {}
            _ = cancel.cancelled() => return abort_chat(),
        }
    }
    let event = match outcome {
        Ok(end) => finish(shared, turn_id, &started, end).await,
        Err(err) => {
            abort_chat();
            if err.code.is_session_lost() {
                shared.lock().session_lost = true;
            }
            failure::engine(None, Some(turn_id), &err)
        }
    };
    end_turn(shared, turn_id);
    shared.out.send(event);
}

/// Mark the turn over (before its terminal event goes out, so the next turn is accepted).
fn end_turn(shared: &Shared, turn_id: &str) {
    let mut inner = shared.lock();
    if inner.turn.as_ref().is_some_and(|t| t.turn_id == turn_id) {
        inner.turn = None;
        inner.lifecycle.turn_ended(turn_id);
    }
}

/// What streaming saw: the final record and the tail of everything streamed.
struct StreamEnd {
    record: CommandRecord,
    tail: String,
}

async fn pump(
    shared: &Shared,
    turn_id: &str,
    started: &StartedTurn,
    cancel: &CancellationToken,
) -> Result<StreamEnd> {
    let sid = &started.session_id;
    let cid = &started.record.command_id;
    let mut record = started.record.clone();
    let (mut out_off, mut err_off) = (0u64, 0u64);
    let (mut out_text, mut err_text) = (Utf8Stream::default(), Utf8Stream::default());
    let mut tail = String::new();
    // A stream is read while it yields data, or when the latest record says it grew; an idle
    // stderr costs no round trip per chunk of stdout.
    let (mut more_out, mut more_err) = (true, true);
    // Said once each time the command starts waiting for input (it sleeps reading the terminal).
    let mut told_waiting = false;
    loop {
        // Memory stays bounded whatever the host's reading speed.
        shared.out.room(QUEUED_OUTPUT_LIMIT).await;
        let final_record = record.status.is_final();
        let want_out = more_out || final_record || record.stdout_bytes > out_off;
        let want_err = more_err || final_record || record.stderr_bytes > err_off;
        // A dropped link is retried under LINK; the engine's and the pool's retries inside
        // run once each (util::retry: the outermost owns the retrying).
        let step = || async {
            let mut out = Vec::new();
            let mut err = Vec::new();
            if want_out {
                out = shared
                    .engine
                    .read_output(sid, cid, OutputStream::Stdout, out_off, READ_CHUNK)
                    .await?;
            }
            if want_err {
                err = shared
                    .engine
                    .read_output(sid, cid, OutputStream::Stderr, err_off, READ_CHUNK)
                    .await?;
            }
            Ok::<_, Error>((out, err))
        };
        let (out, err) = retry::run(retry::LINK, step, retry::is_link_error)
            .await
            .map_err(|e| lost_while_streaming(e, started))?;
        (more_out, more_err) = (!out.is_empty(), !err.is_empty());
        let got_data = more_out || more_err;
        out_off += out.len() as u64;
        err_off += err.len() as u64;
        for chunk in [out_text.push_owned(out), err_text.push_owned(err)] {
            if !cancel.is_cancelled() {
                send_progress(shared, turn_id, &mut tail, chunk);
            }
        }
        // The start's record or the latest refresh says it waits for input: said once per
        // wait, after the output that came with it (its prompt).
        let waiting = record.status == CommandStatus::WaitingInput;
        if waiting && !told_waiting && !cancel.is_cancelled() {
            let prompt = record.last_line.as_deref().unwrap_or("").trim();
            send_progress(
                shared,
                turn_id,
                &mut tail,
                format!("\n[waiting for input: {prompt}]\n"),
            );
        }
        told_waiting = waiting;
        if record.status.is_final() && !got_data {
            for chunk in [out_text.finish(), err_text.finish()] {
                send_progress(shared, turn_id, &mut tail, chunk);
            }
            return Ok(StreamEnd { record, tail });
        }
        if got_data && !record.status.is_final() {
            continue; // read on before waiting: more may be ready
        }
        let wait = || {
            shared
                .engine
                .wait_output(sid, cid, out_off, err_off, OUTPUT_WAIT)
        };
        record = retry::run(retry::LINK, wait, retry::is_link_error)
            .await
            .map_err(|e| lost_while_streaming(e, started))?;
    }
}

fn lost_while_streaming(e: Error, started: &StartedTurn) -> Error {
    let rec = &started.record;
    failure::lost_while_streaming(
        e,
        &started.session_id,
        &rec.command_id,
        &rec.remote_state_dir,
    )
}

/// Progress events for `chunk` (none when empty): pieces of at most [`PROGRESS_EVENT`] bytes
/// (the chunk itself, not copied, when it is one piece) whose escaped text fits
/// [`PROGRESS_ROOM`], as output text nearly always does; a piece that does not goes in pieces
/// of [`PROGRESS_PIECE`].
fn send_progress(shared: &Shared, turn_id: &str, tail: &mut String, chunk: String) {
    let fits = |text: &str| json_text::escaped_len(text) <= PROGRESS_ROOM;
    let send = |text: String| {
        let len = text.len();
        shared.out.send_sized(Event::progress(turn_id, text), len);
    };
    if chunk.is_empty() {
        return;
    }
    push_tail(tail, &chunk);
    if chunk.len() <= PROGRESS_EVENT && fits(&chunk) {
        return send(chunk);
    }
    for piece in text::pieces(&chunk, PROGRESS_EVENT) {
        if fits(piece) {
            send(piece.to_owned());
        } else {
            text::pieces(piece, PROGRESS_PIECE).for_each(|small| send(small.to_owned()));
        }
    }
}

/// Keep the output's recent text for the summary: of a large chunk only its end is copied.
fn push_tail(tail: &mut String, chunk: &str) {
    let (recent, cut) = text::tail(chunk, 2 * SUMMARY_TAIL);
    if cut {
        tail.clear();
    }
    tail.push_str(recent);
    if tail.len() > 4 * SUMMARY_TAIL {
        let (kept, _) = text::tail(tail, SUMMARY_TAIL);
        *tail = kept.to_string();
    }
}

/// Build the turn's terminal event from the command's end.
async fn finish(shared: &Shared, turn_id: &str, started: &StartedTurn, end: StreamEnd) -> Event {
    let rec = &end.record;
    if rec.status == CommandStatus::Lost {
        let why = rec
            .error
            .clone()
            .unwrap_or_else(|| "the session shell ended".into());
        // The engine restarts a pane whose shell ended: if the session is still there, only
        // this command was lost, and the next turn runs in the same generation.
        if shared
            .engine
            .check_alive(&started.session_id)
            .await
            .unwrap_or(false)
        {
            return failure::command_lost(turn_id, &why);
        }
        shared.lock().session_lost = true;
        return failure::session_ended(turn_id, &why);
    }
    match &started.agent_dir {
        None => Event::final_result(turn_id, shell_summary(rec, &end.tail), shared.state(), None),
        Some(dir) => agent_final(shared, turn_id, rec, dir).await,
    }
}

/// What a chat reader sees at the end of a shell turn: status line and the output's tail.
fn shell_summary(rec: &CommandRecord, tail: &str) -> String {
    let duration = text::duration(rec.duration_ms.unwrap_or(0));
    let status = match (rec.status, rec.exit_code) {
        (CommandStatus::Completed, Some(code)) | (CommandStatus::Failed, Some(code)) => {
            format!("exit {code}")
        }
        (status, Some(code)) => format!("{} (exit {code})", status.as_str()),
        (status, None) => status.as_str().to_string(),
    };
    let restarted = if rec.shell_restarted {
        " · the command ended the shell; a fresh one took over"
    } else {
        ""
    };
    let mut out = format!("{status} · {duration}{restarted}");
    let (shown, cut) = text::tail(tail, SUMMARY_TAIL);
    if shown.trim().is_empty() {
        out.push_str("\n(no output)");
    } else {
        if cut {
            out.push_str(&format!(
                "\n(last {} of the output; all of it was streamed above)",
                SUMMARY_TAIL
            ));
        }
        out.push('\n');
        out.push_str(&text::fenced(shown));
    }
    out
}

async fn agent_final(shared: &Shared, turn_id: &str, rec: &CommandRecord, dir: &TurnDir) -> Event {
    let reply = match shared
        .engine
        .read_output(
            &rec.session_id,
            &rec.command_id,
            OutputStream::Stdout,
            0,
            MAX_REPLY,
        )
        .await
    {
        Ok(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
        Err(e) => return failure::engine(None, Some(turn_id), &e),
    };
    if rec.exit_code != Some(0) {
        return failure::agent_failed(turn_id, rec);
    }
    if let Some(state) = read_thread_id(shared, dir).await {
        shared.out.send(Event::lineage_changed(state));
    }
    let usage = read_usage(shared, dir).await;
    let content = if reply.trim().is_empty() {
        "(the agent printed no reply)".to_string()
    } else {
        reply
    };
    Event::final_result(turn_id, content, shared.state(), usage)
}

/// A new `agentThreadId` left by the agent command: update the state and return it.
async fn read_thread_id(shared: &Shared, dir: &TurnDir) -> Option<remote_runner_protocol::State> {
    let bytes = dir.read("thread_id").await.ok()?;
    let id = String::from_utf8(bytes).ok()?.trim().to_string();
    if id.is_empty() {
        return None;
    }
    if let Err(e) = remote_runner_protocol::grammar::id("agentThreadId", &id) {
        tracing::warn!("ignoring the agent's thread id: {e}");
        return None;
    }
    let mut inner = shared.lock();
    let state = inner.state.as_mut()?;
    if state.agent_thread_id.as_deref() == Some(id.as_str()) {
        return None;
    }
    state.agent_thread_id = Some(id);
    Some(state.clone())
}

/// The agent's usage snapshot, validated; never estimated: absent or invalid means no usage.
async fn read_usage(shared: &Shared, dir: &TurnDir) -> Option<Usage> {
    let bytes = dir.read("usage.json").await.ok()?;
    if bytes.is_empty() {
        return None;
    }
    let generation = shared.state()?.generation;
    let snapshot: UsageSnapshot = match serde_json::from_slice(&bytes) {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!("ignoring usage.json: not a usage snapshot ({e})");
            return None;
        }
    };
    let usage = Usage {
        generation,
        snapshot,
    };
    match usage.validate_at("usage") {
        Ok(()) => Some(usage),
        Err(e) => {
            tracing::warn!("ignoring usage.json: {e}");
            None
        }
    }
}
