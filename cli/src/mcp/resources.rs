//! Resources: each session's transcript and each command's log, listed and readable.
//!
//! `remote-runner://sessions/{id}/transcript` is the terminal transcript as `session_read`
//! returns it (from the start); `remote-runner://sessions/{id}/commands/{cid}/log` the
//! command's combined log (a header, stdout, stderr) as the CLI's `session logs` lists it. A
//! read returns at most 4 MiB: a transcript's first 4 MiB (read on with `session_read`), a
//! log's head and tail (the whole output with `file_read`).

use std::path::Path;

use remote_runner_engine::engine::output;
use remote_runner_engine::engine::session::MAX_READ;
use remote_runner_engine::{Error, ErrorCode, Result};
use rmcp::ErrorData as McpError;
use rmcp::model::{ListResourceTemplatesResult, ListResourcesResult, ReadResourceResult};
use serde_json::json;

use super::State;
use super::reply::error_text;

const SCHEME: &str = "remote-runner://sessions/";

fn from_json<T: serde::de::DeserializeOwned>(v: serde_json::Value) -> Result<T> {
    serde_json::from_value(v).map_err(|e| Error::internal(format!("an MCP resource: {e}")))
}

pub fn list(state: &State) -> Result<ListResourcesResult> {
    let mut items = Vec::new();
    for s in state.engine().session_list()? {
        if !state.machine_allowed(&s.machine_id) {
            continue;
        }
        items.push(json!({
            "uri": format!("{SCHEME}{}/transcript", s.session_id),
            "name": format!("{} transcript", s.session_id),
            "description": format!("Terminal transcript of session {} on {} ({})", s.session_id, s.machine_id, s.status.as_str()),
            "mimeType": "text/plain",
        }));
        for log in state.engine().logs(&s.session_id)? {
            items.push(json!({
                "uri": format!("{SCHEME}{}/commands/{}/log", s.session_id, log.command_id),
                "name": format!("{} log", log.command_id),
                "description": format!("Log of `{}` ({})", log.command.lines().next().unwrap_or(""), log.status.as_str()),
                "mimeType": "text/plain",
            }));
        }
    }
    Ok(ListResourcesResult::with_all_items(from_json(json!(
        items
    ))?))
}

pub fn templates() -> ListResourceTemplatesResult {
    let items = json!([
        {
            "uriTemplate": format!("{SCHEME}{{session_id}}/transcript"),
            "name": "session transcript",
            "description": "A session's terminal transcript",
            "mimeType": "text/plain",
        },
        {
            "uriTemplate": format!("{SCHEME}{{session_id}}/commands/{{command_id}}/log"),
            "name": "command log",
            "description": "A command's log: a header, its stdout, its stderr",
            "mimeType": "text/plain",
        }
    ]);
    ListResourceTemplatesResult::with_all_items(from_json(items).unwrap_or_default())
}

pub async fn read(state: &State, uri: &str) -> std::result::Result<ReadResourceResult, McpError> {
    read_text(state, uri)
        .await
        .and_then(|text| {
            from_json(json!({"contents": [{"uri": uri, "mimeType": "text/plain", "text": text}]}))
        })
        .map_err(|e| match e.code {
            ErrorCode::InvalidArgument
            | ErrorCode::UnknownSession
            | ErrorCode::UnknownCommand
            | ErrorCode::PermissionDenied => McpError::resource_not_found(error_text(&e), None),
            _ => McpError::internal_error(error_text(&e), None),
        })
}

async fn read_text(state: &State, uri: &str) -> Result<String> {
    let bad = || {
        Error::invalid(format!(
            "{uri} is not a resource of this server; resources are \
             {SCHEME}SESSION_ID/transcript and {SCHEME}SESSION_ID/commands/COMMAND_ID/log"
        ))
    };
    let rest = uri.strip_prefix(SCHEME).ok_or_else(bad)?;
    let parts: Vec<&str> = rest.split('/').collect();
    match parts.as_slice() {
        [sid, "transcript"] => {
            state.check_session(sid)?;
            let chunk = state.engine().read(sid, Some(0), MAX_READ).await?;
            Ok(chunk.text)
        }
        [sid, "commands", cid, "log"] => {
            state.check_session(sid)?;
            let log = state
                .engine()
                .logs(sid)?
                .into_iter()
                .find(|l| l.command_id == *cid)
                .ok_or_else(|| {
                    Error::new(
                        ErrorCode::UnknownCommand,
                        format!("session {sid} has no command {cid}; list the resources"),
                    )
                })?;
            let path = Path::new(&log.log_file_local);
            let size = output::local_len(path);
            if size == 0 && !log.status.is_final() {
                return Ok(format!(
                    "{cid} is still running; its log is written when it ends (command_wait)."
                ));
            }
            Ok(output::excerpt(path, size, MAX_READ, path)?.0)
        }
        _ => Err(bad()),
    }
}
