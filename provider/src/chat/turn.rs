//! One turn's chat: watch `chat/` on the machine while the command runs, send each call to the
//! host once, write its result back, and, before the turn's `final`, wait until every call is
//! settled. A failure or cancel ends waiting calls with exit 4 (unknown: the host may have acted).

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use remote_runner_protocol::{Event, OperationKind, TurnOperations};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::call::{self, Call, Operation, Reply, status};
use super::settle::{Settlement, Settlements};
use crate::server::writer::Out;
use remote_runner_engine::error::{Error, ErrorCode, Result};
use remote_runner_engine::remote::Remote;
use remote_runner_engine::transport::shell_quote;
use remote_runner_engine::util::retry::{self, LINK};

/// Longest single remote wait for new calls.
const WATCH_WAIT: Duration = Duration::from_secs(10);

/// What a turn's chat needs to know.
pub struct ChatSetup {
    pub transport: Arc<Remote>,
    /// The helper on the machine.
    pub script: String,
    /// `<turn dir>/chat`.
    pub dir: String,
    /// The session's directory on the machine (it holds `turns/`).
    pub session_dir: String,
    /// The command's exit file: the watch ends when it appears.
    pub exit_file: String,
    pub turn_id: String,
    pub generation: u64,
    /// Prefix of the operation ids of calls without `--id` (unique per turn: the command id).
    pub id_prefix: String,
    pub outbound: bool,
    pub session_tool: bool,
    pub out: Out,
    pub settlements: Arc<Settlements>,
}

/// One turn's calls.
#[derive(Clone)]
pub struct ChatTurn {
    inner: Arc<Inner>,
}

struct Inner {
    setup: ChatSetup,
    ledger: Mutex<TurnOperations>,
    seen: Mutex<BTreeSet<u64>>,
    calls: Mutex<Vec<JoinHandle<()>>>,
    /// Fired when the turn fails or is cancelled: waiting calls end with exit 4.
    abort: CancellationToken,
    /// Set before the chat is closed: from then on only the close's own list of calls is
    /// taken (a call the watch finds later was told it was never sent).
    closing: std::sync::atomic::AtomicBool,
}

impl ChatTurn {
    pub fn new(setup: ChatSetup) -> ChatTurn {
        ChatTurn {
            inner: Arc::new(Inner {
                setup,
                ledger: Mutex::new(TurnOperations::default()),
                seen: Mutex::new(BTreeSet::new()),
                calls: Mutex::new(Vec::new()),
                abort: CancellationToken::new(),
                closing: std::sync::atomic::AtomicBool::new(false),
            }),
        }
    }

    /// Watch for calls until the command's exit file appears or `stop` fires. Failures are
    /// retried under [`LINK`] (until the chat closes); the final scan in [`ChatTurn::drain`]
    /// catches whatever this missed.
    pub async fn watch(&self, stop: CancellationToken) {
        loop {
            if self.is_closing() {
                return;
            }
            let list = || self.list(lock(&self.inner.seen).len(), WATCH_WAIT);
            let found = tokio::select! {
                _ = stop.cancelled() => return,
                found = retry::run(LINK, list, |_| !self.is_closing()) => found,
            };
            match found {
                Ok((ready, exited)) => {
                    if !self.is_closing() {
                        self.take(ready);
                    }
                    if exited {
                        return;
                    }
                }
                Err(e) => {
                    tracing::debug!("watching the turn's chat calls failed: {e}");
                    return;
                }
            }
        }
    }

    /// The command ended: close the turn's chat (which lists the calls made so far; a call
    /// made after this is told nothing was sent), answer the calls the watch had not seen, and
    /// wait until every call is settled.
    pub async fn drain(&self) {
        self.close_and_take().await;
        loop {
            let pending: Vec<JoinHandle<()>> = std::mem::take(&mut *lock(&self.inner.calls));
            if pending.is_empty() {
                break;
            }
            for handle in pending {
                let _ = handle.await;
            }
        }
    }

    /// The turn failed or was cancelled: calls still waiting end with exit 4, calls not yet
    /// sent with exit 3, and the chat is closed. Does not wait for the calls' replies.
    pub fn abort(&self) {
        self.inner.abort.cancel();
        let this = self.clone();
        tokio::spawn(async move { this.close_and_take().await });
    }

    fn is_closing(&self) -> bool {
        self.inner.closing.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// One remote call: write `closed` with the list of ready calls, and take those.
    async fn close_and_take(&self) {
        self.inner
            .closing
            .store(true, std::sync::atomic::Ordering::SeqCst);
        if lock(&self.inner.seen).is_empty() && self.close_unused().await {
            return;
        }
        let s = &self.inner.setup;
        let line = format!(
            "exec /bin/sh {} __close {} {}",
            shell_quote(&s.script),
            shell_quote(&s.dir),
            shell_quote(&s.session_dir)
        );
        let close = || async {
            let out = remote_runner_engine::remote::sh(
                s.transport.as_ref(),
                &line,
                None,
                Some(Duration::from_secs(30)),
                256 * 1024,
            )
            .await?;
            if !out.status.success() {
                return Err(Error::new(
                    ErrorCode::RemoteError,
                    out.stderr_lossy().trim().to_string(),
                ));
            }
            Ok(parse_calls(&out.stdout_lossy()))
        };
        let warned = |e: &Error| {
            tracing::warn!("closing the turn's chat failed: {e}");
            true
        };
        if let Ok(calls) = retry::run(LINK, close, warned).await {
            self.take(calls);
        }
    }

    /// Close a chat no call has used, over SFTP (no process on the machine): a call makes the
    /// chat directory first, so if this makes it, no call has started, and an empty `closed`
    /// says so (a call starting now finds it and is told nothing was sent, as with the
    /// helper's own close). False when the directory was there (or the link failed): the helper
    /// closes it, listing the calls.
    async fn close_unused(&self) -> bool {
        let s = &self.inner.setup;
        let t = s.transport.as_ref();
        matches!(
            t.create_dir_fresh(&s.session_dir, &s.dir, 0o700).await,
            Ok(true)
        ) && t
            .write_new_file(&format!("{}/closed", s.dir), b"", 0o600)
            .await
            .is_ok()
    }

    /// Ready calls once more than `known` are ready, the command exited, or `wait` passed;
    /// and whether the command has exited.
    async fn list(&self, known: usize, wait: Duration) -> Result<(Vec<Ready>, bool)> {
        let s = &self.inner.setup;
        let exit_file = s.exit_file.as_str();
        let line = format!(
            "exec /bin/sh {} __watch {} {known} {} {} {}",
            shell_quote(&s.script),
            shell_quote(&s.dir),
            wait.as_secs(),
            shell_quote(exit_file),
            shell_quote(&s.session_dir),
        );
        let out = remote_runner_engine::remote::sh(
            s.transport.as_ref(),
            &line,
            None,
            Some(wait + Duration::from_secs(20)),
            256 * 1024,
        )
        .await?;
        if !out.status.success() {
            return Err(Error::new(
                ErrorCode::RemoteError,
                format!(
                    "the chat helper's watch failed: {}",
                    out.stderr_lossy().trim()
                ),
            ));
        }
        let text = out.stdout_lossy();
        let exited = text.lines().any(|l| l.trim() == "@exit");
        Ok((parse_calls(&text), exited))
    }

    /// Start a task for each call not seen before.
    fn take(&self, ready: Vec<Ready>) {
        for r in ready {
            if !lock(&self.inner.seen).insert(r.n) {
                continue;
            }
            let this = self.clone();
            let handle = tokio::spawn(async move { this.run_call(r).await });
            lock(&self.inner.calls).push(handle);
        }
    }

    /// One call, start to end: read, check, send once, wait, write the reply. A call its turn
    /// did not make is answered with a refusal and never read further.
    async fn run_call(&self, r: Ready) {
        let n = r.n;
        let s = &self.inner.setup;
        let dir = format!("{}/{n}", s.dir);
        let reply = if r.proven {
            let read = || call::read(s.transport.bytes(), n, &dir);
            let read = retry::run(LINK, read, |e| warn_any(e, "reading a chat call failed", n));
            let Ok(c) = read.await else {
                return; // the machine is unreachable: the helper times out (exit 4)
            };
            self.answer(c, &dir).await
        } else {
            tracing::warn!(call = n, "refused a chat call its turn did not make");
            not_this_turn(&s.dir)
        };
        let write = || reply.write(s.transport.bytes(), &dir);
        let _ = retry::run(LINK, write, |e| {
            warn_any(e, "writing a chat reply failed", n)
        })
        .await;
    }

    async fn answer(&self, c: Call, dir: &str) -> Reply {
        let s = &self.inner.setup;
        let op = match c.operation {
            Ok(op) => op,
            Err(why) => return Reply::error(status::INVALID, "invalid_request", &why),
        };
        let kind = op.kind();
        let enabled = match kind {
            OperationKind::Outbound => s.outbound,
            OperationKind::SessionTool => s.session_tool,
        };
        if !enabled {
            return Reply::error(
                status::REJECTED,
                "capability_off",
                &format!(
                    "{} is turned off in this provider's configuration \
                     (REMOTE_RUNNER_OUTBOUND_MESSAGE / REMOTE_RUNNER_SESSION_TOOL); nothing was sent",
                    kind.capability()
                ),
            );
        }
        // Once recorded, a call keeps its id; a caller's key is the id; else prefix.n.
        let operation_id = c
            .recorded_id
            .clone()
            .or(c.key.clone())
            .unwrap_or_else(|| format!("{}.{}", s.id_prefix, c.n));
        if let Err(e) = remote_runner_protocol::grammar::id("operationId", &operation_id) {
            return Reply::error(
                status::INVALID,
                "invalid_request",
                &format!("--id: {e}; use letters, digits and . _ : / - (at most 256)"),
            );
        }
        let event = match &op {
            Operation::Outbound {
                content,
                response_kind,
                mention,
            } => Event::outbound_message(
                &operation_id,
                &s.turn_id,
                s.generation,
                content.clone(),
                *response_kind,
                *mention,
            ),
            Operation::Tool(request) => {
                Event::session_tool(&operation_id, &s.turn_id, s.generation, request.clone())
            }
        };
        if let Err(e) = event.validate() {
            return Reply::error(status::INVALID, "invalid_request", &e.to_string());
        }
        if let Err(limited) = lock(&self.inner.ledger).admit(kind, &operation_id) {
            return Reply::error(status::REJECTED, limited.code, &limited.message);
        }
        if self.inner.abort.is_cancelled() {
            return turn_ended_unsent();
        }
        // Recorded on the machine before it is sent: a provider that restarts later knows
        // this call may have reached the host.
        if c.recorded_id.is_none() {
            let path = format!("{dir}/operation");
            let record = || {
                s.transport
                    .write_file(&path, operation_id.as_bytes(), 0o600)
            };
            let warned = |e: &Error| warn_any(e, "recording a chat operation failed", c.n);
            if retry::run(LINK, record, warned).await.is_err() {
                return turn_ended_unsent();
            }
        }
        let rx = s
            .settlements
            .expect(&operation_id, &s.turn_id, s.generation, kind);
        s.out.send(event);
        tokio::select! {
            settled = rx => match settled {
                Ok(Settlement::Outbound(r)) => Reply::from_outbound(&r),
                Ok(Settlement::Tool(r)) => Reply::from_tool(&r, dir),
                Err(_) => turn_ended_sent(),
            },
            _ = self.inner.abort.cancelled() => turn_ended_sent(),
        }
    }
}

/// A ready call as the helper listed it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Ready {
    n: u64,
    /// Made by a process of the turn's session (see `rr_proves` in chat.sh).
    proven: bool,
}

/// Ready calls, one a line: `N` (proven) or `N foreign` (other lines ignored).
fn parse_calls(text: &str) -> Vec<Ready> {
    text.lines()
        .filter_map(|l| {
            let mut words = l.split_whitespace();
            let n = words.next()?.parse::<u64>().ok()?;
            let proven = match words.next() {
                None => true,
                Some("foreign") => false,
                Some(_) => return None,
            };
            Some(Ready { n, proven })
        })
        .collect()
}

/// The refusal of a call that did not come from the turn whose directory it was left in.
fn not_this_turn(chat_dir: &str) -> Reply {
    Reply::error(
        status::REJECTED,
        "not_this_turn",
        &format!(
            "this call was left in {chat_dir} by a process that is not one of that turn's own \
             (the helper must run inside the turn's session, started by its command); \
             RR_TURN_DIR names a turn but does not grant its chat: run \"$RR_CHAT\" from your \
             own turn with the RR_TURN_DIR it was given; nothing was sent"
        ),
    )
}

fn turn_ended_sent() -> Reply {
    Reply::error(
        status::UNKNOWN,
        "turn_ended",
        "the turn ended (failed or cancelled) before the host's result arrived; the request was \
         sent and may have been carried out (never replayed automatically)",
    )
}

fn turn_ended_unsent() -> Reply {
    Reply::error(
        status::REJECTED,
        "turn_ended",
        "the turn ended (failed or cancelled) before this request was sent; nothing was sent",
    )
}

/// A chat step retries any failure (the helper on the machine bounds the wait): log it.
fn warn_any(e: &Error, what: &str, call: u64) -> bool {
    tracing::warn!(call, "{what}: {e}");
    true
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_helpers_list_says_which_calls_are_the_turns_own() {
        assert_eq!(
            parse_calls("1\n2 foreign\n@exit\n3 other\nx\n"),
            vec![
                Ready { n: 1, proven: true },
                Ready {
                    n: 2,
                    proven: false
                },
            ]
        );
    }
}
