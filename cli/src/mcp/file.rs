//! `file_read`, `file_write` (bytes of one file on the session's machine, through the same
//! transport as the engine's), `file_put`, `file_get` (the CLI's `file put | get`).

use remote_runner_engine::engine::Connector;
use remote_runner_engine::{Error, Result};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;

use super::Call;
use super::reply::Reply;
use crate::commands::file::{self as cli, FileCommand};

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReadArgs {
    /// Session id (sess_...)
    pub session_id: String,
    /// File path on the session's machine (relative: under the session's cwd)
    pub path: String,
    /// Byte offset to start at [default: 0]
    pub offset: Option<u64>,
    /// Most bytes to return [default and cap: the server's --max-output-bytes]
    pub length: Option<u64>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WriteArgs {
    /// Session id (sess_...)
    pub session_id: String,
    /// File path on the session's machine (relative: under the session's cwd)
    pub path: String,
    /// The whole new content of the file (text)
    pub content: String,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TransferArgs {
    /// Session id (sess_...)
    pub session_id: String,
    /// Path on the server's host
    pub local: String,
    /// Path on the session's machine (relative: under the session's cwd)
    pub remote: String,
}

/// The session's machine transport and the path made absolute under the session's cwd.
async fn locate(
    call: &Call,
    session_id: &str,
    path: &str,
) -> Result<(
    std::sync::Arc<dyn remote_runner_engine::transport::Transport>,
    String,
)> {
    call.state.check_session(session_id)?;
    if path.is_empty() || path.contains('\0') {
        return Err(Error::invalid(
            "path must be a non-empty file path without NUL bytes",
        ));
    }
    let session = call.state.engine().session_show(session_id)?;
    let path = if path.starts_with('/') {
        path.to_string()
    } else {
        format!("{}/{path}", session.cwd.trim_end_matches('/'))
    };
    let transport = call
        .state
        .wired
        .connector
        .connect(&session.machine_id)
        .await?;
    Ok((transport.transport().clone(), path))
}

pub async fn read(call: &Call, args: ReadArgs) -> Result<Reply> {
    let (transport, path) = locate(call, &args.session_id, &args.path).await?;
    let cap = call.state.max_output as u64;
    let length = args.length.unwrap_or(cap).min(cap) as usize;
    let offset = args.offset.unwrap_or(0);
    let size = match transport.stat(&path).await? {
        Some(st) => st.size,
        None => {
            return Err(Error::new(
                remote_runner_engine::ErrorCode::RemoteNotFound,
                format!("{path} does not exist on the session's machine; check the path"),
            )
            .retryable(false));
        }
    };
    let data = transport.read_file_range(&path, offset, length).await?;
    let end = offset + data.len() as u64;
    let (encoding, content) = match std::str::from_utf8(&data) {
        Ok(text) => ("utf-8", text.to_string()),
        Err(_) => {
            use base64::Engine as _;
            (
                "base64",
                base64::engine::general_purpose::STANDARD.encode(&data),
            )
        }
    };
    let json = json!({
        "session_id": args.session_id,
        "path": path,
        "offset": offset,
        "bytes": data.len(),
        "size": size,
        "eof": end >= size,
        "encoding": encoding,
        "content": content,
    });
    let more = if end < size {
        format!(" More follows: file_read with offset {end}.")
    } else {
        String::new()
    };
    let text = format!(
        "{} bytes of {path} from {offset} ({size} bytes in all, {encoding}).{more}\n{content}",
        data.len()
    );
    Ok(Reply::new(json, text))
}

pub async fn write(call: &Call, args: WriteArgs) -> Result<Reply> {
    let (transport, path) = locate(call, &args.session_id, &args.path).await?;
    transport
        .write_file(&path, args.content.as_bytes(), 0o644)
        .await?;
    let json = json!({
        "session_id": args.session_id,
        "path": path,
        "bytes_written": args.content.len(),
    });
    let text = format!("Wrote {} bytes to {path}.", args.content.len());
    Ok(Reply::new(json, text))
}

pub async fn transfer(call: &Call, args: TransferArgs, upload: bool) -> Result<Reply> {
    call.state.check_session(&args.session_id)?;
    call.state.check_local(&args.local)?;
    let state = call.state.clone();
    let transfer = cli::TransferArgs {
        session: args.session_id,
        local: args.local,
        remote: args.remote,
        verify: false,
    };
    let command = if upload {
        FileCommand::Put(transfer)
    } else {
        FileCommand::Get(transfer)
    };
    let json = super::on_own_thread(move || async move {
        let ctx = state.context(None);
        cli::run(&ctx, command).await.map(|r| r.json)
    })
    .await?;
    let text = format!(
        "{} {}: {} -> {} ({} bytes, {} file(s)).",
        if upload { "Upload" } else { "Download" },
        json["status"].as_str().unwrap_or("?"),
        json["source"].as_str().unwrap_or("?"),
        json["destination"].as_str().unwrap_or("?"),
        json["bytes"],
        json["files"]
    );
    Ok(Reply::new(json, text))
}
