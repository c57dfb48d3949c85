//! `file_read`, `file_write` (bytes of one file on the session's machine, through the same
//! transport as the engine's), `file_put`, `file_get` (the CLI's `file put | get`).

use remote_runner_engine::engine::FileSlice;
use remote_runner_engine::{Error, Result};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;

use super::Call;
use super::local::{Guarded, Stage};
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
    /// Path on the server's host, beneath one of its roots (--root; relative: from the first root)
    pub local: String,
    /// Path on the session's machine (relative: under the session's cwd)
    pub remote: String,
}

/// Checks of a call's session and path before the engine reads or writes.
fn check(call: &Call, session_id: &str, path: &str) -> Result<()> {
    call.state.check_session(session_id)?;
    if path.is_empty() || path.contains('\0') {
        return Err(Error::invalid(
            "path must be a non-empty file path without NUL bytes",
        ));
    }
    Ok(())
}

pub async fn read(call: &Call, args: ReadArgs) -> Result<Reply> {
    check(call, &args.session_id, &args.path)?;
    let cap = call.state.max_output as u64;
    let length = args.length.unwrap_or(cap).min(cap) as usize;
    let offset = args.offset.unwrap_or(0);
    let FileSlice { path, size, data } = call
        .state
        .engine()
        .session_file_read(&args.session_id, &args.path, offset, length)
        .await?;
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
    check(call, &args.session_id, &args.path)?;
    let path = call
        .state
        .engine()
        .session_file_write(&args.session_id, &args.path, args.content.as_bytes())
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
    let roots = &call.state.roots;
    let target = roots.locate(&args.local)?;
    let guarded = Guarded::collect(&call.state.state_dir);
    // The engine moves bytes between the machine and a private staging directory; only the code
    // in `local` touches the root (see that module for why).
    let stage = Stage::new(&call.state.state_dir)?;
    let slot = stage.slot(0)?;
    let staged = if upload {
        target.stage_upload(roots, &guarded, &slot)?
    } else {
        target.precheck_download(roots, &guarded)?;
        slot.join("download")
    };
    let state = call.state.clone();
    let transfer = cli::TransferArgs {
        session: args.session_id,
        local: staged.to_string_lossy().into_owned(),
        remote: args.remote.clone(),
        verify: false,
    };
    let command = if upload {
        FileCommand::Put(transfer)
    } else {
        FileCommand::Get(transfer)
    };
    let mut json = super::on_own_thread(move || async move {
        let ctx = state.context(None);
        cli::run(&ctx, command).await.map(|r| r.json)
    })
    .await?;
    if upload {
        json["source"] = json!(target.given);
    } else {
        let placed = target.place_download(
            roots,
            &Guarded::collect(&call.state.state_dir),
            &staged,
            remote_name(&args.remote),
        )?;
        json["destination"] = json!(placed.display().to_string());
    }
    drop(stage);
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

/// The last name of a remote path (what a downloaded file is called inside a directory).
pub fn remote_name(remote: &str) -> &str {
    let trimmed = remote.trim_end_matches('/');
    trimmed
        .rsplit('/')
        .next()
        .filter(|n| !n.is_empty())
        .unwrap_or("download")
}
