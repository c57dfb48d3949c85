//! `session_send`: input for an interactive program in the session's terminal.
//!
//! The schema is the whole of the tool (input, keys, wait_for, quiet_ms, timeout_s); today's
//! engine types text and presses Enter, so [`engine_send`] is the one place that calls it, and
//! arguments it cannot honour yet get a clear `not_implemented` rather than being ignored.

use std::time::Duration;

use remote_runner_provider::{Error, ErrorCode, Result};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;

use super::Call;
use super::command::wait_bound;
use super::reply::Reply;
use crate::commands::session::{self as cli, SessionCommand};
use crate::timeout::{self, Scope};

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SendArgs {
    /// Session id (sess_...)
    pub session_id: String,
    /// Text to type; Enter is pressed after it
    pub input: Option<String>,
    /// Named keys to press after the input, e.g. ["C-c"], ["Up", "Enter"]
    pub keys: Option<Vec<String>>,
    /// Wait until this text appears in the terminal before returning
    pub wait_for: Option<String>,
    /// Wait until the terminal has been quiet this many milliseconds before returning
    pub quiet_ms: Option<u64>,
    /// Bound on the whole call in seconds [default: 60]
    pub timeout_s: Option<f64>,
}

pub async fn send(call: &Call, args: SendArgs) -> Result<Reply> {
    call.state.check_session(&args.session_id)?;
    let bound = wait_bound(args.timeout_s)?;
    for (given, name) in [
        (args.keys.is_some(), "keys"),
        (args.wait_for.is_some(), "wait_for"),
        (args.quiet_ms.is_some(), "quiet_ms"),
    ] {
        if given {
            return Err(Error::new(
                ErrorCode::NotImplemented,
                format!(
                    "session_send cannot take {name} with this build yet (it types text and \
                     presses Enter); send the text with input, then read the reply with \
                     session_read"
                ),
            )
            .retryable(false));
        }
    }
    let Some(input) = args.input else {
        return Err(Error::invalid(
            "session_send needs input (the text to type); read the terminal with session_read",
        ));
    };
    let json = engine_send(call, args.session_id, input, bound).await?;
    let sid = json["session_id"].as_str().unwrap_or("?");
    let text = format!(
        "Sent {} bytes and Enter to {sid}. See the reply with session_read {{session_id: {sid}}}.",
        json["bytes_sent"]
    );
    Ok(Reply::new(json, text))
}

/// What the CLI's `session send` calls, with its JSON.
async fn engine_send(
    call: &Call,
    session: String,
    input: String,
    bound: Duration,
) -> Result<Value> {
    let ctx = call.state.context(Some(bound));
    let send = cli::SendArgs {
        session,
        input,
        no_enter: false,
    };
    let report = cli::run(&ctx, SessionCommand::Send(send));
    Ok(timeout::bounded(Scope::Whole, Some(bound), report)
        .await?
        .json)
}
