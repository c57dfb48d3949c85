//! Tool results: `structuredContent` is the JSON the CLI's `--json` prints for the operation,
//! the text a short summary plus the output an agent needs. A tool error (`isError: true`) is
//! what the tool could not do, with the engine's code and hint; a command that failed is a
//! result.

use remote_runner_engine::Error;
use remote_runner_engine::engine::{CommandRecord, CommandStatus};
use rmcp::model::{CallToolResult, ContentBlock};
use serde_json::{Value, json};

/// One tool's answer.
#[derive(Debug)]
pub struct Reply {
    pub json: Value,
    pub text: String,
    pub is_error: bool,
}

impl Reply {
    pub fn new(json: Value, text: impl Into<String>) -> Reply {
        Reply {
            json,
            text: text.into(),
            is_error: false,
        }
    }

    /// The CLI's `--json` error object, and its code, message and hint as text.
    pub fn error(err: &Error) -> Reply {
        let message = crate::hint::message(err);
        Reply {
            json: json!({ "error": err.to_json_with(&message) }),
            text: error_text(err),
            is_error: true,
        }
    }

    pub fn into_result(self) -> CallToolResult {
        let content = vec![ContentBlock::text(self.text)];
        let mut result = if self.is_error {
            CallToolResult::error(content)
        } else {
            CallToolResult::success(content)
        };
        result.structured_content = Some(self.json);
        result
    }
}

/// `error [code]: message; hint (retryable)`.
pub fn error_text(err: &Error) -> String {
    let retry = if err.retryable {
        " (retrying may help)"
    } else {
        ""
    };
    format!(
        "error [{}]: {}{retry}",
        err.code.as_str(),
        crate::hint::message(err)
    )
}

/// A command record as text: how it ended, then its output excerpts, each with a note when the
/// middle was elided saying how many bytes there are and how to read them all.
pub fn command_text(rec: &CommandRecord) -> String {
    let took = rec
        .duration_ms
        .map(|ms| format!(", {ms} ms"))
        .unwrap_or_default();
    let mut text = match rec.status {
        CommandStatus::Running if rec.wait_timed_out => format!(
            "{} is still running (the wait ran out; the command goes on). Wait for it with \
             command_wait {{session_id: {}, command_id: {}}} or stop it with command_stop.",
            rec.command_id, rec.session_id, rec.command_id
        ),
        CommandStatus::Running => format!(
            "{} is running in the background. Wait for it with command_wait {{session_id: {}, \
             command_id: {}}}.",
            rec.command_id, rec.session_id, rec.command_id
        ),
        status => {
            let exit = rec
                .exit_code
                .map(|c| format!(", exit code {c}"))
                .unwrap_or_default();
            format!("{} {}{exit}{took}.", rec.command_id, status.as_str())
        }
    };
    if let Some(err) = &rec.error {
        text.push_str(&format!(" {err}"));
    }
    if rec.shell_restarted {
        text.push_str(" The command ended its shell; the session goes on in a fresh one.");
    }
    for (name, excerpt, truncated, bytes, remote) in [
        (
            "stdout",
            &rec.stdout,
            rec.stdout_truncated,
            rec.stdout_bytes,
            &rec.remote_stdout_file,
        ),
        (
            "stderr",
            &rec.stderr,
            rec.stderr_truncated,
            rec.stderr_bytes,
            &rec.remote_stderr_file,
        ),
    ] {
        if excerpt.is_empty() {
            continue;
        }
        text.push_str(&format!("\n--- {name}\n{excerpt}"));
        if !excerpt.ends_with('\n') {
            text.push('\n');
        }
        if truncated {
            text.push_str(&format!(
                "[{name}: {bytes} bytes in all; only its head and tail are shown. Read all of \
                 it with file_read {{session_id: {}, path: {remote:?}, offset, length}}, or \
                 the resource remote-runner://sessions/{}/commands/{}/log]\n",
                rec.session_id, rec.session_id, rec.command_id
            ));
        }
    }
    text
}
