//! Non-interactive exec on a pooled channel.
//!
//! The channel is drained by its own task from the first message to the end (`wait()` returning
//! `None`), whether or not the caller is still waiting: an undrained channel would stall the
//! whole connection. The end is classified as exit code, signal, or connection loss.

use std::time::Duration;

use tokio::sync::oneshot;

use crate::error::{Error, ErrorCode, Result};
use crate::ssh::pool::ChannelLease;
use crate::transport::{ExecOptions, ExecOutput, ExecStream, ExitStatus, StreamEvent};

/// Bytes kept from one stream, with a count of what was dropped beyond the cap.
#[derive(Debug, Default)]
struct Capped {
    data: Vec<u8>,
    truncated: bool,
}

impl Capped {
    fn push(&mut self, bytes: &[u8], cap: usize) {
        let room = cap.saturating_sub(self.data.len());
        if bytes.len() > room {
            self.truncated = true;
        }
        self.data.extend_from_slice(&bytes[..bytes.len().min(room)]);
    }
}

fn signal_name(sig: &russh::Sig) -> String {
    match sig {
        russh::Sig::Custom(name) => name.trim_start_matches("SIG").to_string(),
        other => format!("{other:?}"),
    }
}

/// Run `command` on the leased channel.
pub(crate) async fn run(
    mut lease: ChannelLease,
    command: &str,
    options: ExecOptions,
) -> Result<ExecOutput> {
    let Some(channel) = lease.take_channel() else {
        return Err(Error::internal("exec on a lease without a channel"));
    };
    let (cancel_tx, mut cancel_rx) = oneshot::channel::<()>();
    let command = command.to_string();
    let cap = options.max_output;
    let stdin = options.stdin.clone();

    let task = tokio::spawn(async move {
        let conn = lease.conn.clone();
        let (mut reader, writer) = channel.split();
        if let Err(e) = writer.exec(true, command.into_bytes()).await {
            return Err(if conn.conn.wait_closed(Duration::from_secs(2)).await {
                conn.conn.lost_error()
            } else {
                Error::new(ErrorCode::RemoteError, format!("exec request failed: {e}"))
            });
        }
        // stdin is written by its own task so that output keeps being drained meanwhile.
        let writer = std::sync::Arc::new(writer);
        let w = writer.clone();
        let stdin_task = tokio::spawn(async move {
            if let Some(data) = stdin {
                let _ = w.data(&data[..]).await;
            }
            let _ = w.eof().await;
        });

        let mut stdout = Capped::default();
        let mut stderr = Capped::default();
        let mut code = None;
        let mut signal = None;
        let mut cancelled = false;
        loop {
            let msg = tokio::select! {
                m = reader.wait() => m,
                _ = &mut cancel_rx, if !cancelled => {
                    cancelled = true;
                    let _ = writer.close().await;
                    continue;
                }
            };
            let Some(msg) = msg else { break };
            match msg {
                russh::ChannelMsg::Data { data } => stdout.push(&data, cap),
                russh::ChannelMsg::ExtendedData { data, ext: 1 } => stderr.push(&data, cap),
                russh::ChannelMsg::ExitStatus { exit_status } => {
                    code = Some(i32::try_from(exit_status).unwrap_or(i32::MAX))
                }
                russh::ChannelMsg::ExitSignal { signal_name: s, .. } => {
                    signal = Some(signal_name(&s))
                }
                _ => {}
            }
        }
        stdin_task.abort();
        if cancelled {
            // The caller already got its timeout error; nobody reads this result.
            return Err(Error::new(ErrorCode::Cancelled, "exec cancelled"));
        }
        let status = match (code, signal) {
            (_, Some(s)) => ExitStatus::Signal(s),
            (Some(c), None) => ExitStatus::Code(c),
            (None, None) => {
                if conn.conn.wait_closed(Duration::from_secs(3)).await {
                    return Err(conn.conn.lost_error());
                }
                return Err(Error::new(
                    ErrorCode::RemoteError,
                    "the command's channel closed without an exit status; the server may have killed the session",
                ));
            }
        };
        drop(lease);
        Ok(ExecOutput {
            stdout: stdout.data,
            stderr: stderr.data,
            stdout_truncated: stdout.truncated,
            stderr_truncated: stderr.truncated,
            status,
        })
    });

    let joined = match options.timeout {
        Some(limit) => match tokio::time::timeout(limit, task).await {
            Ok(j) => j,
            Err(_) => {
                // The drain task closes the channel and finishes on its own.
                let _ = cancel_tx.send(());
                return Err(Error::new(
                    ErrorCode::Timeout,
                    format!(
                        "the command did not finish within {} s (it may still run on the host; wrap it in `timeout` to bound it there)",
                        limit.as_secs_f64()
                    ),
                ));
            }
        },
        None => task.await,
    };
    joined.map_err(|e| Error::internal(format!("exec task failed: {e}")))?
}

/// Start `command` on the leased channel and keep it: its stdin is fed from the stream's input
/// (EOF and close once the input side is dropped), its output is forwarded as events by a task
/// that drains the channel to its end, holding the lease until then.
pub(crate) async fn stream(mut lease: ChannelLease, command: &str) -> Result<ExecStream> {
    let Some(channel) = lease.take_channel() else {
        return Err(Error::internal("exec on a lease without a channel"));
    };
    let conn = lease.conn.clone();
    let (mut reader, writer) = channel.split();
    if let Err(e) = writer.exec(true, command.as_bytes().to_vec()).await {
        return Err(if conn.conn.wait_closed(Duration::from_secs(2)).await {
            conn.conn.lost_error()
        } else {
            Error::new(ErrorCode::RemoteError, format!("exec request failed: {e}"))
        });
    }
    let (input, mut input_rx) =
        tokio::sync::mpsc::channel::<Vec<u8>>(crate::transport::EXEC_INPUT_QUEUE);
    let (events_tx, events) = tokio::sync::mpsc::unbounded_channel();
    let input_task = tokio::spawn(async move {
        while let Some(chunk) = input_rx.recv().await {
            if writer.data(&chunk[..]).await.is_err() {
                return;
            }
        }
        let _ = writer.eof().await;
        let _ = writer.close().await;
    });
    tokio::spawn(async move {
        let mut code = None;
        let mut signal = None;
        while let Some(msg) = reader.wait().await {
            let event = match msg {
                russh::ChannelMsg::Data { data } => StreamEvent::Stdout(data.to_vec()),
                russh::ChannelMsg::ExtendedData { data, ext: 1 } => {
                    StreamEvent::Stderr(data.to_vec())
                }
                russh::ChannelMsg::ExitStatus { exit_status } => {
                    code = Some(i32::try_from(exit_status).unwrap_or(i32::MAX));
                    continue;
                }
                russh::ChannelMsg::ExitSignal { signal_name: s, .. } => {
                    signal = Some(signal_name(&s));
                    continue;
                }
                _ => continue,
            };
            // Nobody listening any more: keep draining, so the connection never stalls.
            let _ = events_tx.send(event);
        }
        // The channel is gone: a write waiting for window space would wait forever (a dead
        // link grants none), so the input side ends here and its senders see the end.
        input_task.abort();
        let end = match (code, signal) {
            (_, Some(s)) => Ok(ExitStatus::Signal(s)),
            (Some(c), None) => Ok(ExitStatus::Code(c)),
            (None, None) if conn.conn.wait_closed(Duration::from_secs(3)).await => {
                Err(conn.conn.lost_error())
            }
            (None, None) => Err(Error::new(
                ErrorCode::RemoteError,
                "the channel closed without an exit status; the server may have ended it",
            )),
        };
        let _ = events_tx.send(StreamEvent::End(end));
        drop(lease);
    });
    Ok(ExecStream { input, events })
}

#[cfg(test)]
mod tests {
    use super::Capped;

    #[test]
    fn cap_keeps_prefix_and_flags_truncation() {
        let mut c = Capped::default();
        c.push(b"hello", 8);
        assert!(!c.truncated);
        c.push(b"world", 8);
        assert_eq!(c.data, b"hellowor");
        assert!(c.truncated);
    }
}
