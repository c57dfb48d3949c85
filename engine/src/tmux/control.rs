//! A kept tmux control-mode client for one session: a long-lived engine (the MCP server, the
//! BotMux provider) types a command's line through it, and learns of the command's end from it,
//! without a tmux process on the machine per command.
//!
//! A `tmux` client process costs the machine 3-4 ms on every command (loading, connecting,
//! identifying itself to the server), most of a warm command's time. A control-mode client
//! (`tmux -C attach-session`, with `no-output` so pane output is never sent and `ignore-size` so
//! it never sizes the window) stays connected: a command is one line on its stdin, answered by a
//! `%begin`/`%end` (or `%error`) block. The command's end is a window rename to `rq-<command
//! id>` (the session shell prints it as an escape sequence, see `rr.sh`), which tmux reports to
//! every control client as `%window-renamed`: no process, no round trip. The name carries what
//! the command's files say of its end (the [`EndNotice`]), so that reading them, a round trip
//! or more over SSH, is only needed for what the name leaves out.
//!
//! Best effort by design: a client that dies, errs or stalls is dropped and the caller goes on
//! through the control script (a report, a bounded wait), which never depends on it.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::oneshot;

use crate::error::Result;
use crate::remote::Remote;
use crate::transport::StreamEvent;

use super::SessionPaths;

/// The window-name prefix of a command started through a control client.
pub const NOTIFY_PREFIX: &str = "rq-";

/// Longest wait for tmux to answer one command line.
const REPLY_LIMIT: Duration = Duration::from_secs(5);

/// Ends seen with no one waiting for them (kept for a waiter that registers late).
const SEEN_KEPT: usize = 64;

/// The script that becomes the control client (parameters T, S and SID as data).
const ATTACH_SH: &str = r#"exec "$T" -L "$S" -C attach-session -t "=$SID" -f no-output,ignore-size"#;

/// What the reader task and the callers share.
#[derive(Default)]
struct Shared {
    /// Replies awaited, in the order the command lines went out.
    replies: VecDeque<oneshot::Sender<std::result::Result<(), String>>>,
    /// Waiters for a window name's first word (`rq-<command id>`).
    waiters: HashMap<String, oneshot::Sender<String>>,
    /// Names seen without a waiter, oldest first: the first word and the rest.
    seen: VecDeque<(String, String)>,
    /// The client ended (its process or the link).
    ended: bool,
}

/// One session's control-mode client.
pub struct TerminalClient {
    input: tokio::sync::mpsc::Sender<Vec<u8>>,
    shared: Arc<Mutex<Shared>>,
    session_name: String,
}

impl std::fmt::Debug for TerminalClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TerminalClient")
            .field("session", &self.session_name)
            .finish()
    }
}

impl TerminalClient {
    /// Attach a control client to the session. `Ok(None)` when the transport cannot keep a
    /// process (callers go on without one).
    pub async fn attach(remote: &Remote, paths: &SessionPaths) -> Result<Option<TerminalClient>> {
        let params = [
            ("T", paths.tmux_path.clone()),
            ("S", paths.socket.clone()),
            ("SID", paths.session_name.clone()),
        ];
        let Some((stream, early)) = crate::remote::sh_stream_with(remote, ATTACH_SH, &params).await?
        else {
            return Ok(None);
        };
        let shared = Arc::new(Mutex::new(Shared::default()));
        tokio::spawn(read_events(stream.events, early, shared.clone()));
        Ok(Some(TerminalClient {
            input: stream.input,
            shared,
            session_name: paths.session_name.clone(),
        }))
    }

    /// Whether the client is still connected.
    pub fn is_alive(&self) -> bool {
        !self.lock().ended && !self.input.is_closed()
    }

    /// Register for the end of the command whose window name starts with the word `name`;
    /// resolves, with the rest of the name (the notice, `""` when there is none), at once if it
    /// was seen already. Register before typing the command.
    pub fn expect(&self, name: &str) -> oneshot::Receiver<String> {
        let (tx, rx) = oneshot::channel();
        let mut s = self.lock();
        if let Some(i) = s.seen.iter().position(|(n, _)| n == name) {
            if let Some((_, notice)) = s.seen.remove(i) {
                let _ = tx.send(notice);
            }
        } else if !s.ended {
            s.waiters.insert(name.to_string(), tx);
        }
        rx
    }

    /// Forget a registration that is no longer awaited.
    pub fn forget(&self, name: &str) {
        self.lock().waiters.remove(name);
    }

    /// Type `line` at the session shell's prompt (clearing what was typed there before) and
    /// press Enter, as one tmux command. On a failure the client is of no further use.
    pub async fn type_line(&self, line: &str) -> std::result::Result<(), TypeFailure> {
        if line.contains(['\'', '\n', '\r']) {
            return Err(TypeFailure::NotTyped(
                "a typed line with a quote or a newline".into(),
            ));
        }
        let command = format!(
            "send-keys -t '={}:' C-e C-u '{line}' Enter\n",
            self.session_name
        );
        let (tx, rx) = oneshot::channel();
        {
            let mut s = self.lock();
            if s.ended {
                return Err(TypeFailure::NotTyped("the client had ended".into()));
            }
            s.replies.push_back(tx);
        }
        if self.input.send(command.into_bytes()).await.is_err() {
            self.lock().ended = true;
            return Err(TypeFailure::NotTyped("the client had ended".into()));
        }
        let failure = match tokio::time::timeout(REPLY_LIMIT, rx).await {
            Ok(Ok(Ok(()))) => return Ok(()),
            Ok(Ok(Err(why))) => TypeFailure::NotTyped(format!("tmux: {why}")),
            Ok(Err(_)) => TypeFailure::Unknown("the client ended before tmux answered".into()),
            Err(_) => TypeFailure::Unknown(format!("no answer from tmux in {REPLY_LIMIT:?}")),
        };
        self.lock().ended = true;
        Err(failure)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Shared> {
        self.shared.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// What the session shell put in the end notice of a command typed through a control client
/// (`rr.sh`, `__rr_fin`): `CODE HOW STATE ENDED STARTED OE [PWD]`, where `OE` says whether
/// stdout and stderr hold anything (`0`/`1` each) and `PWD`, the directory the command started
/// in, is left out when it has characters outside a plain set (the `pwd` file has it then).
/// It is text on the pane's terminal: a process of the account that prints a forged one there
/// (knowing the command's id) can misreport that command's end, as it could kill the command or
/// write its exit file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EndNotice {
    /// The exit file's line: `code=.. how=.. state=.. ended=..`.
    pub exit_line: String,
    /// The started file's line: `started=..`.
    pub started_line: String,
    pub stdout_written: bool,
    pub stderr_written: bool,
    pub pwd: Option<String>,
}

impl EndNotice {
    /// The notice in the rest of a window name, or `None` when there is none or it is not one.
    pub fn parse(text: &str) -> Option<EndNotice> {
        let mut words = text.splitn(7, ' ');
        let mut next = || words.next().filter(|w| !w.is_empty());
        let (code, how, state, ended, started, oe) =
            (next()?, next()?, next()?, next()?, next()?, next()?);
        let pwd = next();
        let number = |w: &str| w.bytes().all(|b| b.is_ascii_digit() || b == b'.');
        let word = |w: &str| w.bytes().all(|b| b.is_ascii_lowercase() || b == b'_');
        let flag = |b: u8| match b {
            b'0' => Some(false),
            b'1' => Some(true),
            _ => None,
        };
        if !(code.parse::<i32>().is_ok() && word(how) && word(state)) {
            return None;
        }
        if !(number(ended) && number(started) && oe.len() == 2) {
            return None;
        }
        if pwd.is_some_and(|p| !p.starts_with('/')) {
            return None;
        }
        Some(EndNotice {
            exit_line: format!("code={code} how={how} state={state} ended={ended}"),
            started_line: format!("started={started}"),
            stdout_written: flag(oe.as_bytes()[0])?,
            stderr_written: flag(oe.as_bytes()[1])?,
            pwd: pwd.map(str::to_string),
        })
    }
}

/// Why [`TerminalClient::type_line`] failed.
#[derive(Debug)]
pub enum TypeFailure {
    /// Nothing was typed (tmux refused it, or it never reached tmux).
    NotTyped(String),
    /// It may have been typed: the client ended or stalled before tmux answered.
    Unknown(String),
}

/// Read the client's output: reply blocks to the callers in order, window renames to their
/// waiters. On its end every caller and waiter is released.
async fn read_events(
    mut events: tokio::sync::mpsc::UnboundedReceiver<StreamEvent>,
    early: Vec<u8>,
    shared: Arc<Mutex<Shared>>,
) {
    let mut parser = Parser::default();
    let mut pending = early;
    loop {
        let mut start = 0;
        while let Some(n) = pending[start..].iter().position(|&b| b == b'\n') {
            let line = String::from_utf8_lossy(&pending[start..start + n]).into_owned();
            start += n + 1;
            let mut s = shared.lock().unwrap_or_else(|p| p.into_inner());
            match parser.line(&line) {
                Some(Event::Reply(r)) => {
                    if let Some(tx) = s.replies.pop_front() {
                        let _ = tx.send(r);
                    }
                }
                Some(Event::Renamed(name, notice)) => {
                    if let Some(tx) = s.waiters.remove(&name) {
                        let _ = tx.send(notice);
                    } else {
                        if s.seen.len() >= SEEN_KEPT {
                            s.seen.pop_front();
                        }
                        s.seen.push_back((name, notice));
                    }
                }
                None => {}
            }
        }
        pending.drain(..start);
        match events.recv().await {
            Some(StreamEvent::Stdout(data)) => pending.extend_from_slice(&data),
            Some(StreamEvent::Stderr(_)) => {}
            Some(StreamEvent::End(_)) | None => break,
        }
    }
    let mut s = shared.lock().unwrap_or_else(|p| p.into_inner());
    s.ended = true;
    s.replies.clear();
    s.waiters.clear();
}

/// What one line of control-mode output means to us.
#[derive(Debug, PartialEq, Eq)]
enum Event {
    /// The end of the reply to a command line we sent: `Err` with tmux's message.
    Reply(std::result::Result<(), String>),
    /// A window was renamed to a name of ours: its first word and the rest.
    Renamed(String, String),
}

/// Control-mode output, line by line.
#[derive(Debug, Default)]
struct Parser {
    /// Inside a reply block: whether it answers a command we sent (flags 1), and its text.
    block: Option<(bool, String)>,
}

impl Parser {
    fn line(&mut self, line: &str) -> Option<Event> {
        if let Some((ours, text)) = &mut self.block {
            let end = line.starts_with("%end ");
            if end || line.starts_with("%error ") {
                let ours = *ours;
                let text = std::mem::take(text);
                self.block = None;
                return ours.then_some(Event::Reply(if end { Ok(()) } else { Err(text) }));
            }
            if text.len() < 4096 {
                text.push_str(line);
            }
            return None;
        }
        if let Some(rest) = line.strip_prefix("%begin ") {
            // `%begin TIME NUMBER FLAGS`: flags 1 marks a command this client sent (0: the
            // attach itself).
            let ours = rest.split(' ').nth(2) == Some("1");
            self.block = Some((ours, String::new()));
            return None;
        }
        let rest = line
            .strip_prefix("%window-renamed ")
            .or_else(|| line.strip_prefix("%unlinked-window-renamed "))?;
        let (_, name) = rest.split_once(' ')?;
        let (name, notice) = name.split_once(' ').unwrap_or((name, ""));
        name.starts_with(NOTIFY_PREFIX)
            .then(|| Event::Renamed(name.to_string(), notice.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::{EndNotice, Event, Parser};

    #[test]
    fn end_notices() {
        let n = EndNotice::parse("3 normal done 17.25 17.5 01 /srv/a b").unwrap();
        assert_eq!(n.exit_line, "code=3 how=normal state=done ended=17.25");
        assert_eq!(n.started_line, "started=17.5");
        assert!(!n.stdout_written && n.stderr_written);
        assert_eq!(n.pwd.as_deref(), Some("/srv/a b"));
        let n = EndNotice::parse("0 cd_failed stopped 1.0 1.0 10").unwrap();
        assert!(n.stdout_written && n.pwd.is_none());
        for bad in [
            "",
            "0 normal done 1 1",
            "x normal done 1 1 00",
            "0 Normal done 1 1 00",
            "0 normal done 1e3 1 00",
            "0 normal done 1 1 02",
            "0 normal done 1 1 000",
            "0 normal done 1 1 00 relative",
            "0  normal done 1 1 00",
        ] {
            assert_eq!(EndNotice::parse(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn replies_and_renames() {
        let mut p = Parser::default();
        // The attach's own block is not a reply to us.
        assert_eq!(p.line("%begin 1 264 0"), None);
        assert_eq!(p.line("%end 1 264 0"), None);
        assert_eq!(p.line("%session-changed $0 s"), None);
        assert_eq!(p.line("%begin 1 265 1"), None);
        assert_eq!(p.line("%end 1 265 1"), Some(Event::Reply(Ok(()))));
        assert_eq!(p.line("%begin 1 266 1"), None);
        assert_eq!(p.line("can't find session: x"), None);
        assert_eq!(
            p.line("%error 1 266 1"),
            Some(Event::Reply(Err("can't find session: x".into())))
        );
        assert_eq!(
            p.line("%window-renamed @0 rq-cmd_1"),
            Some(Event::Renamed("rq-cmd_1".into(), String::new()))
        );
        assert_eq!(
            p.line("%unlinked-window-renamed @3 rq-cmd_2"),
            Some(Event::Renamed("rq-cmd_2".into(), String::new()))
        );
        assert_eq!(
            p.line("%window-renamed @0 rq-cmd_4 0 normal done 2.5 1.5 00 /a b"),
            Some(Event::Renamed(
                "rq-cmd_4".into(),
                "0 normal done 2.5 1.5 00 /a b".into()
            ))
        );
        // Other names (a program's title, the wait-for wake of another engine) are not ours.
        assert_eq!(p.line("%window-renamed @0 rr-cmd_3"), None);
        assert_eq!(p.line("%window-renamed @0 vim"), None);
        // A line inside a block that looks like a notification is the block's text.
        assert_eq!(p.line("%begin 1 267 1"), None);
        assert_eq!(p.line("%window-renamed @0 rq-x"), None);
        assert_eq!(p.line("%end 1 267 1"), Some(Event::Reply(Ok(()))));
    }
}
