//! `session_create`, `session_list`, `session_read`, `session_destroy`: the CLI's `session
//! create | list | read | destroy` handlers, their JSON as the result.

use remote_runner_engine::Result;
use remote_runner_engine::engine::{SessionStatus, TranscriptChunk};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

use super::Call;
use super::reply::Reply;
use crate::commands::session::{self as cli, SessionCommand};
use crate::output::to_json;

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateArgs {
    /// Machine id (see machine_list; `local` is the server's host)
    pub machine: String,
    /// Working directory (absolute) [default: the machine's default cwd]
    pub cwd: Option<String>,
}

/// No arguments.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListArgs {}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReadArgs {
    /// Session id (sess_...)
    pub session_id: String,
    /// Transcript byte offset to read from (the cursor of an earlier read) [default: 0]
    pub since: Option<u64>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DestroyArgs {
    /// Session id (sess_...)
    pub session_id: String,
}

pub async fn create(call: &Call, args: CreateArgs) -> Result<Reply> {
    call.state.check_machine(&args.machine)?;
    let ctx = call.state.context(None);
    let create = cli::CreateArgs {
        machine: args.machine,
        cwd: args.cwd,
        slurm_args: None,
    };
    let json = cli::run(&ctx, SessionCommand::Create(create)).await?.json;
    let text = format!(
        "Session {} started on {} in {}. Run commands with session_exec {{session_id: {}, \
         command}}.",
        json["session_id"].as_str().unwrap_or("?"),
        json["machine_id"].as_str().unwrap_or("?"),
        json["cwd"].as_str().unwrap_or("?"),
        json["session_id"].as_str().unwrap_or("?"),
    );
    Ok(Reply::new(json, text))
}

pub async fn list(call: &Call, _args: ListArgs) -> Result<Reply> {
    let ctx = call.state.context(None);
    let list = cli::ListArgs { machine: None };
    let mut json = cli::run(&ctx, SessionCommand::List(list)).await?.json;
    let served: Vec<Value> = json["sessions"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|s| {
            s["machine_id"]
                .as_str()
                .is_some_and(|id| call.state.machine_allowed(id))
        })
        .cloned()
        .collect();
    let active = served
        .iter()
        .filter(|s| s["status"] == SessionStatus::Active.as_str())
        .count();
    let mut text = format!("{} session(s), {active} active:", served.len());
    for s in &served {
        let field = |k: &str| match &s[k] {
            Value::String(v) => v.clone(),
            Value::Null => "-".into(),
            v => v.to_string(),
        };
        text.push_str(&format!(
            "\n{}  {}  {}  {}  {} command(s)",
            field("session_id"),
            field("machine_id"),
            field("status"),
            field("cwd"),
            field("command_count")
        ));
    }
    json["summary"] = json!({ "session_count": served.len(), "active_count": active });
    json["sessions"] = Value::Array(served);
    Ok(Reply::new(json, text))
}

/// The engine's read with the server's output cap (the CLI reads up to 4 MiB at once); the
/// JSON is the same transcript chunk the CLI prints.
pub async fn read(call: &Call, args: ReadArgs) -> Result<Reply> {
    call.state.check_session(&args.session_id)?;
    let chunk: TranscriptChunk = call
        .state
        .engine()
        .read(&args.session_id, args.since, call.state.max_output)
        .await?;
    let more = if chunk.more {
        format!(
            " More follows: session_read {{session_id: {}, since: {}}}.",
            chunk.session_id, chunk.cursor
        )
    } else {
        String::new()
    };
    let text = format!(
        "{} bytes of the transcript from {} (next cursor {}).{more}\n{}",
        chunk.bytes, chunk.since, chunk.cursor, chunk.text
    );
    Ok(Reply::new(to_json(&chunk)?, text))
}

pub async fn destroy(call: &Call, args: DestroyArgs) -> Result<Reply> {
    call.state.check_session(&args.session_id)?;
    let ctx = call.state.context(None);
    let destroy = cli::DestroyArgs {
        session: args.session_id,
        force: false,
        keep_remote_state: false,
    };
    let json = cli::run(&ctx, SessionCommand::Destroy(destroy)).await?.json;
    let mut text = format!(
        "Session {} is {}; its logs and transcript are kept.",
        json["session_id"].as_str().unwrap_or("?"),
        json["status"].as_str().unwrap_or("?")
    );
    if let Some(stopped) = json["stopped_commands"].as_array()
        && !stopped.is_empty()
    {
        text.push_str(&format!(
            " Stopped commands: {}.",
            Value::Array(stopped.clone())
        ));
    }
    if let Some(w) = json["warning"].as_str() {
        text.push_str(&format!(" Warning: {w}"));
    }
    Ok(Reply::new(json, text))
}
