//! `session_send`: input for an interactive program in the session's terminal.
//!
//! The CLI's `session send` (the engine's `session_send`): type text and/or keys, then wait for
//! a pattern, quiet output, the program reading input again, or its end; the reply's output is
//! cut to the server's `--max-output-bytes` (head and tail kept).

use remote_runner_engine::Result;
use remote_runner_engine::engine::send::DEFAULT_SEND_TIMEOUT;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;

use super::Call;
use super::command::wait_bound;
use super::reply::Reply;
use crate::commands::session::{self as cli, SessionCommand};

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SendArgs {
    /// Session id (sess_...)
    pub session_id: String,
    /// Text to type; Enter is pressed after it unless keys are given
    pub input: Option<String>,
    /// tmux key names to press after the input, e.g. ["C-c"], ["Up", "Enter"], ["C-d"]
    pub keys: Option<Vec<String>>,
    /// Return when the new output matches this regular expression (e.g. ">>> $")
    pub wait_for: Option<String>,
    /// Return when no new output came for this many milliseconds
    pub quiet_ms: Option<u64>,
    /// Bound on the wait in seconds [default: 30]; the program goes on past it
    pub timeout_s: Option<f64>,
}

pub async fn send(call: &Call, args: SendArgs) -> Result<Reply> {
    call.state.check_session(&args.session_id)?;
    let bound = match args.timeout_s {
        None => DEFAULT_SEND_TIMEOUT,
        Some(_) => wait_bound(args.timeout_s)?,
    };
    let ctx = call.state.context(Some(bound));
    let keys = args.keys.unwrap_or_default();
    let send = cli::SendArgs {
        session: args.session_id,
        input: args.input,
        no_enter: false,
        key: keys,
        wait_for: args.wait_for,
        quiet: args.quiet_ms,
        command_id: None,
    };
    let mut json = cli::run(&ctx, SessionCommand::Send(send)).await?.json;
    let output = json["output"].as_str().unwrap_or("").to_string();
    let (shown, elided) = head_and_tail(&output, call.state.max_output);
    if elided > 0 {
        json["output"] = Value::String(shown.clone());
        json["output_elided_bytes"] = Value::from(elided);
    }
    let sid = json["session_id"].as_str().unwrap_or("?").to_string();
    let why = match json["ended_by"].as_str().unwrap_or("") {
        "matched" => "the output matched wait_for".to_string(),
        "quiet" => "the output went quiet".to_string(),
        "waiting_input" => "the program waits for input".to_string(),
        "ended" => format!(
            "the command ended ({}, exit code {})",
            json["status"].as_str().unwrap_or("ended"),
            json["exit_code"]
        ),
        _ => "the wait ran out (timeout_s); the program goes on".to_string(),
    };
    let mut text = format!("Sent to {sid}; {why}.");
    if elided > 0 {
        text.push_str(&format!(
            " {elided} bytes of the reply are elided in the middle; read them with session_read."
        ));
    }
    text.push('\n');
    text.push_str(&shown);
    Ok(Reply::new(json, text))
}

/// `text` cut to at most `max` bytes: the head and the tail, split on character boundaries,
/// with a note between them; and how many bytes were left out.
fn head_and_tail(text: &str, max: usize) -> (String, usize) {
    if text.len() <= max {
        return (text.to_string(), 0);
    }
    let mut head = max / 2;
    while !text.is_char_boundary(head) {
        head -= 1;
    }
    let mut tail = text.len() - (max - head);
    while !text.is_char_boundary(tail) {
        tail += 1;
    }
    let elided = tail - head;
    (
        format!(
            "{}\n[... {elided} bytes elided ...]\n{}",
            &text[..head],
            &text[tail..]
        ),
        elided,
    )
}

#[cfg(test)]
mod tests {
    use super::head_and_tail;

    #[test]
    fn head_and_tail_keeps_both_ends_on_char_boundaries() {
        assert_eq!(head_and_tail("short", 10), ("short".to_string(), 0));
        let (shown, elided) = head_and_tail("aaaa\u{e9}bbbbcccc", 8);
        // 14 bytes: the head is "aaaa", the tail "cccc"; "\u{e9}bbbb" (6 bytes) is left out.
        assert_eq!(elided, 6);
        assert_eq!(shown, "aaaa\n[... 6 bytes elided ...]\ncccc");
        // A cut inside a character moves to its boundary.
        let (shown, elided) = head_and_tail("aaa\u{e9}bbbbbbb", 8);
        assert_eq!(
            (shown.as_str(), elided),
            ("aaa\n[... 4 bytes elided ...]\nbbbbb", 4)
        );
    }
}
