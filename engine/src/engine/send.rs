//! Interactive programs: type into a session and get the reply ([`Engine::session_send`]).
//!
//! One call types text and/or tmux keys into the session's terminal, then waits, bounded, for
//! the reply: until the new output matches a pattern (`wait_for`), until it goes quiet for a
//! while (`quiet`), or by default until the program in the terminal sleeps reading it again (it
//! wants more input; decided from its process state on the machine) or its command ends.
//!
//! Where "the new output" comes from: while a foreground command runs, its stdout and stderr
//! files in the command directory (that is where its output goes, byte for byte; the terminal
//! only shows the echo of what is typed), read by byte offset from the sizes noted in the same
//! call that typed; with nothing running, the session transcript (`transcript.raw`, the pane's
//! own output: the shell's, or a program started by typing into it), from its size then, with
//! terminal control sequences removed. Both are bounded reads by offset: nothing is re-read,
//! nothing is lost between two rounds, and a read of a command's files costs no process. The
//! machine side of each round is one `watch` call of the control script, which returns as soon
//! as a file grows (20 ms checks for the first half second, then 100 ms): stdout and stderr are
//! interleaved in the order their growth was seen, and within one check stdout comes first
//! (a program's answer, then its next prompt).

use std::time::{Duration, Instant};

use regex_automata::meta::Regex;
use serde::Serialize;

use super::{CommandStatus, Engine};
use crate::error::{Error, ErrorCode, Result};

/// Default bound of a send's wait.
pub const DEFAULT_SEND_TIMEOUT: Duration = Duration::from_secs(30);
/// At most this much new output is returned (the rest stays in the command's files).
pub const SEND_OUTPUT_MAX: usize = 1 << 20;

/// What to type and how long to wait for the reply.
#[derive(Debug, Clone)]
pub struct SendRequest {
    /// Text typed as is (pasted; never read as key names).
    pub input: Option<String>,
    /// tmux key names pressed after the text: `C-c`, `C-d`, `Escape`, `Up`, `Tab`, `Enter`,
    /// `F1`...; checked against [`key_name`].
    pub keys: Vec<String>,
    /// Press Enter after the text (with neither text nor keys: Enter alone; with keys and no
    /// text: none).
    pub enter: bool,
    /// Wait until the new output matches this regular expression (Rust `regex` syntax).
    pub wait_for: Option<String>,
    /// Wait until no new output came for this long.
    pub quiet: Option<Duration>,
    /// Bound on the whole wait; always applied.
    pub timeout: Duration,
    /// Type into this background command's own terminal (started with `stdin`) instead of
    /// the session's.
    pub command_id: Option<String>,
}

impl Default for SendRequest {
    fn default() -> Self {
        SendRequest {
            input: None,
            keys: Vec::new(),
            enter: true,
            wait_for: None,
            quiet: None,
            timeout: DEFAULT_SEND_TIMEOUT,
            command_id: None,
        }
    }
}

impl SendRequest {
    /// Type `text` and press Enter.
    pub fn line(text: &str) -> Self {
        SendRequest {
            input: Some(text.to_string()),
            ..Default::default()
        }
    }
}

/// Why a send's wait ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum SendEnd {
    /// The new output matched `wait_for`.
    Matched,
    /// No new output for `quiet`.
    Quiet,
    /// The program in the terminal sleeps reading it (it waits for more input).
    WaitingInput,
    /// The foreground command ended.
    Ended,
    /// The bound ran out first.
    TimedOut,
}

/// The reply to a [`SendRequest`].
#[derive(Debug, Clone, Serialize)]
pub struct SendOutcome {
    pub session_id: String,
    /// The foreground command that was running when the input was typed (its output is
    /// `output`); none: the input went to the shell, and `output` is the terminal's.
    pub command_id: Option<String>,
    pub bytes_sent: usize,
    pub keys: Vec<String>,
    pub enter: bool,
    /// The new output since the send (lossily decoded), at most [`SEND_OUTPUT_MAX`] bytes.
    pub output: String,
    pub output_truncated: bool,
    /// `wait_for` matched.
    pub matched: bool,
    /// The bound ran out before the wait's condition.
    pub timed_out: bool,
    pub ended_by: SendEnd,
    /// The terminal's program waits for input now.
    pub waiting_input: bool,
    /// The command's status after the wait (`running`, `waiting_input`, or how it ended).
    pub status: Option<CommandStatus>,
    pub exit_code: Option<i32>,
    pub duration_ms: u64,
}

/// The tmux names of keys without a modifier (matched case-insensitively).
const NAMED_KEYS: &[&str] = &[
    "Enter", "Escape", "Tab", "BTab", "BSpace", "Space", "Up", "Down", "Left", "Right", "Home",
    "End", "PageUp", "PageDown", "PPage", "NPage", "Insert", "Delete", "IC", "DC", "KPEnter", "F1",
    "F2", "F3", "F4", "F5", "F6", "F7", "F8", "F9", "F10", "F11", "F12",
];

/// The tmux key name for `name`, or an `invalid_argument` error naming what is accepted.
/// Accepted: a named key (`Enter`, `Escape`, `Up`, `F5`, ...) or one letter or digit, each with
/// optional `C-`, `M-`, `S-` modifiers (`C-c`, `C-d`, `M-x`, `S-Tab`). Nothing else reaches
/// tmux: it would type an unknown name as text, and read a lone `;` as a command separator.
pub fn key_name(name: &str) -> Result<String> {
    let mut rest = name;
    let mut out = String::new();
    while rest.len() > 2 {
        let (m, tail) = rest.split_at(2);
        match m {
            "C-" | "M-" | "S-" | "c-" | "m-" | "s-" => {
                out.push_str(&m.to_ascii_uppercase());
                rest = tail;
            }
            _ => break,
        }
    }
    let base = if rest.len() == 1 && rest.chars().all(|c| c.is_ascii_alphanumeric()) {
        Some(rest.to_string())
    } else {
        NAMED_KEYS
            .iter()
            .find(|k| k.eq_ignore_ascii_case(rest))
            .map(|k| k.to_string())
    };
    match base {
        Some(b) => Ok(out + &b),
        None => Err(Error::invalid(format!(
            "{name:?} is not a key name; use a tmux key name such as C-c, C-d, Escape, Enter, \
             Tab, BSpace, Up, Down, Left, Right, Home, End, PageUp, PageDown, F1..F12, or a \
             letter or digit with C-, M-, S- (type text with --input instead)"
        ))),
    }
}

/// `text` without terminal control sequences (CSI, OSC, DCS and title strings, other escapes)
/// and carriage returns: what the terminal's output reads as text.
pub fn strip_controls(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\x1b' => match chars.next() {
                Some('[') => {
                    // Parameters and intermediates, then one final byte in @..~.
                    for c in chars.by_ref() {
                        if ('@'..='~').contains(&c) {
                            break;
                        }
                    }
                }
                Some(']' | 'P' | 'k' | '_' | '^') => {
                    // A string, ended by BEL or ESC \.
                    while let Some(c) = chars.next() {
                        if c == '\x07' {
                            break;
                        }
                        if c == '\x1b' {
                            if chars.peek() == Some(&'\\') {
                                chars.next();
                            }
                            break;
                        }
                    }
                }
                Some('(' | ')' | '*' | '+' | '#' | '%') => {
                    chars.next();
                }
                _ => {}
            },
            '\r' | '\x07' | '\x0f' | '\x0e' => {}
            c => out.push(c),
        }
    }
    out
}

impl Engine {
    /// Type into session `session_id` and wait (bounded by `req.timeout`) for the reply; see
    /// the module documentation. Errors: `invalid_argument` (nothing to send, an unknown key
    /// name, a bad pattern, a zero timeout), `session_lost`.
    pub async fn session_send(&self, session_id: &str, req: SendRequest) -> Result<SendOutcome> {
        let input = req.input.clone().unwrap_or_default();
        if input.contains('\0') {
            return Err(Error::invalid("input must not contain NUL bytes"));
        }
        if input.is_empty() && req.keys.is_empty() && !req.enter {
            return Err(Error::invalid(
                "nothing to send; give the text to type, a key, or Enter",
            ));
        }
        let keys = req
            .keys
            .iter()
            .map(|k| key_name(k))
            .collect::<Result<Vec<_>>>()?;
        let pattern = match &req.wait_for {
            Some(p) => Some(Regex::new(p).map_err(|e| {
                Error::invalid(format!(
                    "--wait-for {p:?} is not a valid regular expression ({e}); escape special \
                     characters such as '.', '(' or '$' with a backslash"
                ))
            })?),
            None => None,
        };
        if req.timeout.is_zero() {
            return Err(Error::invalid("the timeout must be more than zero"));
        }
        // Enter with no text and no keys presses Enter alone.
        let enter = req.enter && (!input.is_empty() || keys.is_empty());
        let target = match &req.command_id {
            Some(id) => {
                let rec = self.load_command(session_id, id)?;
                if rec.mode != super::CommandMode::Background {
                    return Err(Error::invalid(format!(
                        "command {id} runs in the session's terminal; send to it without a \
                         command id"
                    )));
                }
                Some(id.as_str())
            }
            None => None,
        };
        self.explained(session_id, async {
            let (_, driver) = self.active_driver(session_id).await?;
            let started = Instant::now();
            let key_refs: Vec<&str> = keys.iter().map(String::as_str).collect();
            let sent = driver
                .send_keys_to(target, input.as_bytes(), enter, &key_refs)
                .await;
            let mark = match sent {
                Err(e) if e.code == ErrorCode::SessionLost => {
                    self.mark_lost(session_id, "the tmux session is gone")?;
                    return Err(self.explain_lost(session_id, e).await);
                }
                other => other?,
            };
            let paths = driver.paths();
            let (files, exit_file) = match &mark.command_id {
                Some(id) => {
                    let dir = paths.command_dir(id);
                    (
                        [
                            (format!("{dir}/stdout"), mark.stdout_size),
                            (format!("{dir}/stderr"), mark.stderr_size),
                        ],
                        Some(format!("{dir}/exit")),
                    )
                }
                None => (
                    [
                        (paths.transcript_path(), mark.transcript_size),
                        (String::new(), 0),
                    ],
                    None,
                ),
            };
            let mut offsets = [files[0].1, files[1].1];
            let deadline = started + req.timeout;
            let by_input = pattern.is_none() && req.quiet.is_none();
            let mut raw: Vec<u8> = Vec::new();
            let mut truncated = false;
            let mut last_growth = Instant::now();
            let mut waiting_input = false;
            let mut rounds = 0u32;
            let end = loop {
                let now = Instant::now();
                let Some(mut wait) = deadline
                    .checked_duration_since(now)
                    .filter(|d| !d.is_zero())
                else {
                    break SendEnd::TimedOut;
                };
                if let Some(q) = req.quiet {
                    match q.checked_sub(now - last_growth).filter(|d| !d.is_zero()) {
                        Some(left) => wait = wait.min(left),
                        None => break SendEnd::Quiet,
                    }
                }
                let bg_dir = target.map(|id| paths.command_dir(id));
                // The first round gives the typed input 100 ms to reach the program before
                // a read of the terminal counts as waiting for more.
                let calm = if rounds == 0 { 5 } else { 2 };
                rounds += 1;
                let w = driver
                    .watch_in(
                        bg_dir.as_deref(),
                        calm,
                        [
                            (files[0].0.as_str(), offsets[0]),
                            (files[1].0.as_str(), offsets[1]),
                        ],
                        exit_file.as_deref(),
                        by_input,
                        wait,
                    )
                    .await?;
                waiting_input = w.waiting_input;
                let mut grew = false;
                for (i, (path, _)) in files.iter().enumerate() {
                    while w.sizes[i] > offsets[i] {
                        let want = (w.sizes[i] - offsets[i]).min(1 << 20) as usize;
                        let data = driver
                            .transport()
                            .read_file_range(path, offsets[i], want)
                            .await?;
                        if data.is_empty() {
                            break;
                        }
                        offsets[i] += data.len() as u64;
                        grew = true;
                        let room = SEND_OUTPUT_MAX.saturating_sub(raw.len());
                        if data.len() > room {
                            truncated = true;
                        }
                        raw.extend_from_slice(&data[..data.len().min(room)]);
                    }
                }
                if grew {
                    last_growth = Instant::now();
                }
                if let Some(re) = &pattern
                    && re.is_match(&text_of(&raw, mark.command_id.is_none()))
                {
                    break SendEnd::Matched;
                }
                if w.ended {
                    break SendEnd::Ended;
                }
                if by_input && w.waiting_input && !grew {
                    break SendEnd::WaitingInput;
                }
            };
            let (status, exit_code) = match &mark.command_id {
                Some(id) => {
                    let rec = self.command_show(session_id, id).await?;
                    (Some(rec.status), rec.exit_code)
                }
                None => (None, None),
            };
            Ok(SendOutcome {
                session_id: session_id.to_string(),
                command_id: mark.command_id.clone(),
                bytes_sent: input.len(),
                keys,
                enter,
                output: text_of(&raw, mark.command_id.is_none()),
                output_truncated: truncated,
                matched: end == SendEnd::Matched,
                timed_out: end == SendEnd::TimedOut,
                ended_by: end,
                waiting_input: waiting_input && end != SendEnd::Ended,
                status,
                exit_code,
                duration_ms: started.elapsed().as_millis() as u64,
            })
        })
        .await
    }
}

/// The output's text: a command's bytes as they are; the terminal's without its controls.
fn text_of(raw: &[u8], terminal: bool) -> String {
    let text = String::from_utf8_lossy(raw);
    if terminal {
        strip_controls(&text)
    } else {
        text.into_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_names_are_checked() {
        assert_eq!(key_name("C-c").unwrap(), "C-c");
        assert_eq!(key_name("c-d").unwrap(), "C-d");
        assert_eq!(key_name("escape").unwrap(), "Escape");
        assert_eq!(key_name("S-Tab").unwrap(), "S-Tab");
        assert_eq!(key_name("q").unwrap(), "q");
        assert_eq!(key_name("F12").unwrap(), "F12");
        for bad in [
            "",
            ";",
            "C-",
            "hello",
            "C-c;",
            "-l",
            "Enter Enter",
            "#{pane_pid}",
        ] {
            let e = key_name(bad).unwrap_err();
            assert_eq!(e.code, ErrorCode::InvalidArgument, "{bad:?}");
        }
    }

    #[test]
    fn controls_are_stripped() {
        assert_eq!(
            strip_controls(
                "\x1b[?2004h$ ls\r\n\x1b]0;title\x07a\x1bkrr-x\x1b\\b\x1b[1;31mc\x1b[0m\n"
            ),
            "$ ls\nabc\n"
        );
    }
}
