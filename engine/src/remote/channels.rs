//! Long-lived control-script processes: one login-shell start serves many calls.
//!
//! A call on its own exec channel pays, every time, for the channel, the account's login shell
//! with its startup files (a `conda init` in `~/.bashrc` alone can take 100 ms), and two `sh`
//! starts. On the hot path (start a command, report, wait, signal) that is most of the time a
//! call takes. So a transport keeps a few `ctl.sh serve` processes, each running one call at a
//! time:
//!
//! ```text
//! request:  @rr:call NONCE VERB            reply, stdout: <verb's stdout>\n@rr:NONCE:done STATUS\n
//!           NAME='value' ... (parameters)         stderr: <verb's stderr>\n@rr:NONCE:done\n
//!           @rr:NONCE:end
//! ```
//!
//! The nonce is fresh for every call and travels only on stdin, so neither a parameter's text
//! nor anything a verb prints can end a request or a reply early. A verb runs in a subshell with
//! `/dev/null` as stdin; calls that carry input data (`send`, `start_session`, scripts with
//! input) use their own exec channel as before. A channel whose call timed out, or whose caller
//! went away, is closed, never reused. Any failure to start one is not an error: the call runs
//! on its own channel.

use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use super::{Call, NOT_INSTALLED, bootstrap_line, install, install_request};
use crate::error::{Error, ErrorCode, Result};
use crate::transport::{ExecOutput, ExecStream, ExitStatus, StreamEvent, Transport, shell_quote};

/// Most control processes kept per transport (each holds one of the connection's channels).
const MAX_CHANNELS: usize = 3;

/// Calls whose reply may be larger than this run on their own channel.
pub(super) const MAX_REPLY: usize = 1 << 20;

/// Bound on starting a control process (login shell and startup files included).
const OPEN_LIMIT: Duration = Duration::from_secs(30);

/// Startup-file output tolerated before a control process is ready.
const NOISE_LIMIT: usize = 64 << 10;

/// The control processes of one connection ([`super::Direct`]'s), and of the Slurm nodes reached through it: a node's
/// processes run there (scope: its job), and all share this one budget, so that idle processes
/// never hold the connection's channels that other calls need. A call that finds no idle
/// process of its scope and no room closes an idle one of another scope.
#[derive(Debug, Default)]
pub struct ControlChannels {
    idle: Mutex<Vec<(String, ExecStream)>>,
    /// Open now: idle ones and those running a call.
    open: AtomicUsize,
}

/// Counts one open control process; uncounted when dropped.
struct Slot<'a>(&'a AtomicUsize);

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl ControlChannels {
    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<(String, ExecStream)>> {
        self.idle.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Run `call` on a control process. `None`: none is available (all busy, or one could not
    /// be started); the caller runs the call on its own channel.
    /// `scope`: whose processes it may use (`""` the machine's own, a Slurm job's id for its
    /// node's, which `transport` starts there).
    pub(super) async fn run(
        &self,
        transport: &dyn Transport,
        scope: &str,
        call: &Call<'_>,
    ) -> Option<Result<ExecOutput>> {
        let (stream, slot) = self.take(transport, scope).await?;
        let mut channel = Served { stream, slot };
        let nonce = uuid::Uuid::new_v4().simple().to_string();
        let mut request = format!("@rr:call {nonce} {}\n", call.verb);
        for (name, value) in &call.params {
            request.push_str(&format!("{name}={}\n", shell_quote(value)));
        }
        request.push_str(&format!("@rr:{nonce}:end\n"));
        if channel
            .stream
            .input
            .send(request.into_bytes())
            .await
            .is_err()
        {
            return Some(Err(ended_error(transport)));
        }
        let reply = channel.reply(transport, &nonce, call.max_output);
        let out = match call.limit {
            Some(limit) => match tokio::time::timeout(limit, reply).await {
                Ok(out) => out,
                Err(_) => return Some(Err(timeout_error(transport, call.verb, limit))),
            },
            None => reply.await,
        };
        if out.is_ok() {
            let Served { stream, slot } = channel;
            let mut idle = self.lock();
            if idle.len() < MAX_CHANNELS {
                idle.push((scope.to_string(), stream));
                std::mem::forget(slot);
            }
        }
        Some(out)
    }

    /// An idle control process of `scope` that is still alive, or a new one when there is
    /// room (made by closing an idle one of another scope if need be).
    async fn take<'a>(
        &'a self,
        transport: &dyn Transport,
        scope: &str,
    ) -> Option<(ExecStream, Slot<'a>)> {
        loop {
            let found = {
                let mut idle = self.lock();
                let at = idle.iter().rposition(|(s, _)| s == scope);
                at.map(|i| idle.remove(i).1)
            };
            let Some(mut stream) = found else {
                break;
            };
            let slot = Slot(&self.open);
            // Anything it said while idle (it ended, or a stray writer) makes it unusable.
            if stream.events.try_recv().is_err() && !stream.input.is_closed() {
                return Some((stream, slot));
            }
        }
        if self.open.fetch_add(1, Ordering::SeqCst) >= MAX_CHANNELS {
            // The oldest idle process of another scope makes room, or the call goes on its own.
            let evicted = {
                let mut idle = self.lock();
                (!idle.is_empty()).then(|| idle.remove(0))
            };
            // Either way one count goes: the closed process's, or the one just taken.
            self.open.fetch_sub(1, Ordering::SeqCst);
            drop(evicted?);
        }
        let slot = Slot(&self.open);
        match tokio::time::timeout(OPEN_LIMIT, open(transport)).await {
            Ok(Ok(Some(stream))) => Some((stream, slot)),
            Ok(Ok(None)) => None,
            Ok(Err(e)) => {
                tracing::debug!(
                    "control process not started on {}: {e}",
                    transport.describe()
                );
                None
            }
            Err(_) => None,
        }
    }
}

/// A control process running one call.
struct Served<'a> {
    stream: ExecStream,
    slot: Slot<'a>,
}

impl Served<'_> {
    /// Read the reply to the call with `nonce`: both streams up to their end lines.
    async fn reply(
        &mut self,
        transport: &dyn Transport,
        nonce: &str,
        cap: usize,
    ) -> Result<ExecOutput> {
        let mut stdout = Framed::new(format!("\n@rr:{nonce}:done "), cap);
        let mut stderr = Framed::new(format!("\n@rr:{nonce}:done\n"), cap);
        let mut status = None;
        while status.is_none() || !stderr.done() {
            match self.stream.events.recv().await {
                Some(StreamEvent::Stdout(data)) => {
                    if let Some(line) = stdout.push(&data) {
                        status = Some(parse_status(&line)?);
                    }
                }
                Some(StreamEvent::Stderr(data)) => {
                    stderr.push(&data);
                }
                Some(StreamEvent::End(Err(e))) => return Err(e),
                Some(StreamEvent::End(Ok(_))) | None => return Err(ended_error(transport)),
            }
        }
        let (stdout, stdout_truncated) = stdout.into_output();
        let (stderr, stderr_truncated) = stderr.into_output();
        Ok(ExecOutput {
            stdout,
            stderr,
            stdout_truncated,
            stderr_truncated,
            status: ExitStatus::Code(status.unwrap_or(-1)),
        })
    }
}

/// Start `ctl.sh serve` and wait until it is ready (see [`open_verb`]); `None` when it said
/// anything past its start markers (not a clean control process).
async fn open(transport: &dyn Transport) -> Result<Option<ExecStream>> {
    Ok(open_verb(transport, "serve", "")
        .await?
        .and_then(|(stream, early)| early.is_empty().then_some(stream)))
}

/// Start the control-script verb `verb` on its own streaming channel with the parameter lines
/// `params` (installing the control script first when the machine lacks it), and wait until
/// it is past the startup-file output on both streams. Returns the stream and whatever stdout
/// the verb already printed after its start marker; `None` when the transport cannot stream or
/// the startup output never ended.
pub(super) async fn open_verb(
    transport: &dyn Transport,
    verb: &str,
    params: &str,
) -> Result<Option<(ExecStream, Vec<u8>)>> {
    for attempt in 0..2 {
        let nonce = uuid::Uuid::new_v4().simple().to_string();
        let Some(mut stream) = transport.exec_stream(&bootstrap_line(verb, &nonce)).await? else {
            return Ok(None);
        };
        let _ = stream
            .input
            .send(format!("{params}@rr:{nonce}:end\n").into_bytes())
            .await;
        let marker = format!("@rr:{nonce}:begin\n");
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let (mut out_at, mut err_at) = (None, None);
        while out_at.is_none() || err_at.is_none() {
            match stream.events.recv().await {
                Some(StreamEvent::Stdout(data)) => {
                    out.extend_from_slice(&data);
                    out_at = out_at.or_else(|| super::find(&out, marker.as_bytes()));
                }
                Some(StreamEvent::Stderr(data)) => {
                    err.extend_from_slice(&data);
                    err_at = err_at.or_else(|| super::find(&err, marker.as_bytes()));
                }
                Some(StreamEvent::End(Ok(status))) => {
                    if let Some(e) = super::refusal(transport, &status, &out, &nonce) {
                        return Err(e);
                    }
                    if attempt == 0
                        && status.code() == Some(NOT_INSTALLED)
                        && let Some(root) = install_request(&out, &nonce)
                    {
                        install(transport, &root).await?;
                        break;
                    }
                    return Err(ended_error(transport));
                }
                Some(StreamEvent::End(Err(e))) => return Err(e),
                None => return Err(ended_error(transport)),
            }
            if out.len() + err.len() > NOISE_LIMIT + 2 * marker.len() {
                return Ok(None);
            }
        }
        if let (Some(o), Some(e)) = (out_at, err_at) {
            if err.len() > e + marker.len() {
                // The verb wrote to stderr before anyone asked it anything.
                return Ok(None);
            }
            let early = out.split_off(o + marker.len());
            return Ok(Some((stream, early)));
        }
    }
    Ok(None)
}

/// One stream of a reply, up to its end line: keeps at most `cap` bytes of the verb's output
/// (and a short tail to find the end line in).
struct Framed {
    end: Vec<u8>,
    cap: usize,
    buf: Vec<u8>,
    truncated: bool,
    /// Where the end line's marker starts, once seen.
    marker_at: Option<usize>,
    /// Where the end line starts, once it is complete (with the status, on stdout).
    found: Option<usize>,
}

impl Framed {
    fn new(end: String, cap: usize) -> Framed {
        Framed {
            end: end.into_bytes(),
            cap,
            buf: Vec::new(),
            truncated: false,
            marker_at: None,
            found: None,
        }
    }

    fn done(&self) -> bool {
        self.found.is_some()
    }

    /// Add output; once the end line is complete, the text after its marker (without `\n`).
    fn push(&mut self, data: &[u8]) -> Option<String> {
        if self.found.is_some() {
            return None;
        }
        let from = self.buf.len().saturating_sub(self.end.len());
        self.buf.extend_from_slice(data);
        if self.marker_at.is_none() {
            self.marker_at = find(&self.buf[from..], &self.end).map(|i| from + i);
        }
        if let Some(at) = self.marker_at {
            // stderr's marker ends with its newline; stdout's is followed by the status line.
            if self.end.ends_with(b"\n") {
                self.found = Some(at);
                return Some(String::new());
            }
            let rest = &self.buf[at + self.end.len()..];
            let newline = rest.iter().position(|&b| b == b'\n')?;
            let line = String::from_utf8_lossy(&rest[..newline]).into_owned();
            self.found = Some(at);
            return Some(line);
        }
        // Beyond the cap only a tail long enough to hold the end line is kept.
        let keep_tail = self.end.len() + 32;
        if self.buf.len() > self.cap + keep_tail + (64 << 10) {
            let cut_to = self.buf.len() - keep_tail;
            self.buf.drain(self.cap..cut_to);
            self.truncated = true;
        }
        None
    }

    fn into_output(mut self) -> (Vec<u8>, bool) {
        let end = self.found.unwrap_or(self.buf.len());
        self.buf.truncate(end);
        if self.truncated || self.buf.len() > self.cap {
            self.buf.truncate(self.cap);
            return (self.buf, true);
        }
        (self.buf, false)
    }
}

fn parse_status(text: &str) -> Result<i32> {
    text.trim().parse().map_err(|_| {
        Error::new(
            ErrorCode::RemoteError,
            format!("the control script ended a call with a bad status {text:?}"),
        )
    })
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

fn ended_error(transport: &dyn Transport) -> Error {
    Error::new(
        ErrorCode::RemoteError,
        format!(
            "remote-runner's control process on {} ended in the middle of a call; run it again",
            transport.describe()
        ),
    )
}

fn timeout_error(transport: &dyn Transport, verb: &str, limit: Duration) -> Error {
    Error::new(
        ErrorCode::Timeout,
        format!(
            "remote-runner's control call '{verb}' on {} did not finish within {} s (the machine \
             may be overloaded, or what the call runs may still run there); run it again",
            transport.describe(),
            limit.as_secs_f64()
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::Framed;

    #[test]
    fn end_line_split_across_chunks() {
        let mut f = Framed::new("\n@rr:n:done ".into(), 100);
        assert_eq!(f.push(b"hello\n@rr:n:do"), None);
        assert_eq!(f.push(b"ne 3"), None);
        assert_eq!(f.push(b"\n").as_deref(), Some("3"));
        assert_eq!(f.into_output(), (b"hello".to_vec(), false));
    }

    #[test]
    fn output_beyond_the_cap_is_cut_and_flagged() {
        let mut f = Framed::new("\n@rr:n:done\n".into(), 4);
        let big = vec![b'x'; 200 << 10];
        assert_eq!(f.push(&big), None);
        assert_eq!(f.push(b"\n@rr:n:done\n").as_deref(), Some(""));
        assert_eq!(f.into_output(), (b"xxxx".to_vec(), true));
    }

    #[test]
    fn a_forged_end_line_needs_the_nonce() {
        let mut f = Framed::new("\n@rr:secret:done ".into(), 100);
        assert_eq!(f.push(b"\n@rr:guess:done 0\n"), None);
        assert!(!f.done());
    }
}
