//! The keeper's framed protocol on its unix socket.
//!
//! A frame is `u32 length` (big-endian, of what follows), `u32 header length`, a JSON header,
//! then raw bytes (a command's stdin or output, file data). Every request carries an id chosen
//! by the client; every reply frame carries the id of the request it answers, so many calls
//! share one socket. A streamed file read answers with several `data` frames and one `eof`; a
//! streamed file write sends several `chunk` frames and one `finish` under its request's id.
//! A streamed exec (`exec_stream`) does both under one id: the client's `chunk` frames are its
//! stdin (each acknowledged with `done`), `finish` ends the stdin and `close` drops the process;
//! the keeper's `stdout` / `stderr` frames carry the output and one `exec` frame its end.

use serde::{Deserialize, Serialize};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use crate::error::{Error, ErrorCode, Hint};
use crate::transport::{DirEntry, ExecOptions, ExitStatus, FileKind, FileStat};

/// Bumped on any change to the messages below (also part of the build id).
pub const PROTOCOL_VERSION: u32 = 3;

/// Largest frame either side accepts (bigger ones end the connection).
pub const MAX_FRAME: usize = 64 << 20;

/// Bytes per `data`/`chunk` frame of a streamed file.
pub const CHUNK: usize = 256 << 10;

/// An exec's command and options; the frame's body is its stdin when `stdin` is set.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ExecCall {
    pub command: String,
    pub timeout_ms: Option<u64>,
    pub max_output: usize,
    pub stdin: bool,
}

impl ExecCall {
    pub fn new(command: &str, options: &ExecOptions) -> Self {
        ExecCall {
            command: command.to_string(),
            timeout_ms: options.timeout.map(|t| t.as_millis() as u64),
            max_output: options.max_output,
            stdin: options.stdin.is_some(),
        }
    }

    /// The transport's options, with the frame's `body` as stdin when the call has one.
    pub fn options(&self, body: Vec<u8>) -> ExecOptions {
        ExecOptions {
            stdin: self.stdin.then_some(body),
            timeout: self.timeout_ms.map(std::time::Duration::from_millis),
            max_output: self.max_output,
        }
    }
}

/// What the client asks.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Request {
    /// First frame of every connection: the client's build and the machine record it resolved.
    Hello {
        build: String,
        record: String,
    },
    /// `Transport::exec_raw`.
    ExecRaw(ExecCall),
    /// A control-script call ([`crate::remote::Call`]: the keeper's [`crate::remote::ControlPlane`]),
    /// run on the keeper's long-lived control processes, which outlive any one CLI call (on the
    /// node of Slurm job `node_job` when set); the body is the verb's input when `input` is set.
    Call {
        verb: String,
        params: Vec<(String, String)>,
        timeout_ms: Option<u64>,
        max_output: usize,
        input: bool,
        node_job: Option<String>,
    },
    /// `write_file` (`new: false`) or `write_new_file`; the body is the data.
    WriteFile {
        path: String,
        mode: u32,
        new: bool,
    },
    ReadRange {
        path: String,
        offset: u64,
        max: usize,
    },
    Stat {
        path: String,
    },
    CreateDirAll {
        path: String,
        mode: u32,
    },
    ReadDir {
        path: String,
    },
    Rename {
        from: String,
        to: String,
    },
    RemoveFile {
        path: String,
    },
    SetMode {
        path: String,
        mode: u32,
    },
    /// Stream a file: `data` frames, then `eof` (or `error`).
    OpenRead {
        path: String,
    },
    /// Start a streamed write: `done` once the file is open; then the client's `chunk` frames
    /// and one `finish`, answered by `done` when the file is complete.
    OpenWrite {
        path: String,
        mode: u32,
    },
    /// `Transport::exec_stream`: `done` once the process runs (`no_stream` when the keeper's
    /// transport cannot stream); then stdin in `chunk` frames (each answered by `done`), its end
    /// with `finish`, and the output as `stdout` / `stderr` frames until one `exec` (or `error`).
    ExecStream {
        command: String,
    },
    /// Bytes for an open write or a streamed exec's stdin (same id as its request).
    Chunk,
    /// End of an open write, or of a streamed exec's stdin.
    Finish,
    /// Drop a streamed exec (its stdin ends and its channel closes), as dropping an
    /// [`ExecStream`](crate::transport::ExecStream) does.
    Close,
    Status,
    /// End the keeper now (`machine disconnect`).
    Shutdown,
}

/// What the keeper answers.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "reply", rename_all = "snake_case")]
pub enum Reply {
    Hello {
        build: String,
        record: String,
        pid: u32,
        describe: String,
    },
    Done,
    /// An exec's end; the body is stdout then stderr (`stdout_len` bytes of stdout).
    Exec {
        stdout_len: usize,
        stdout_truncated: bool,
        stderr_truncated: bool,
        code: Option<i32>,
        signal: Option<String>,
    },
    /// File bytes in the body.
    Data,
    /// A streamed exec's output in the body.
    Stdout,
    Stderr,
    /// The keeper's transport cannot stream an exec (the caller falls back to exec).
    NoStream,
    Eof,
    Stat {
        stat: Option<WireStat>,
    },
    Entries {
        entries: Vec<(String, WireStat)>,
    },
    Status {
        pid: u32,
        machine_id: String,
        idle_secs: u64,
        requests: u64,
    },
    Error {
        code: String,
        message: String,
        retryable: bool,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        hint: Option<Hint>,
    },
}

impl Reply {
    pub fn from_error(err: &Error) -> Reply {
        Reply::Error {
            code: err.code.as_str().to_string(),
            message: err.message.clone(),
            retryable: err.retryable,
            hint: err.hint.clone(),
        }
    }

    pub fn exit_status(code: Option<i32>, signal: Option<String>) -> ExitStatus {
        match (code, signal) {
            (Some(c), _) => ExitStatus::Code(c),
            (None, Some(s)) => ExitStatus::Signal(s),
            (None, None) => ExitStatus::Signal("UNKNOWN".to_string()),
        }
    }
}

/// `FileStat` on the wire.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct WireStat {
    pub kind: String,
    pub size: u64,
    pub mode: u32,
    pub mtime: i64,
    /// Absent from an older keeper.
    #[serde(default)]
    pub uid: Option<u32>,
}

impl From<&FileStat> for WireStat {
    fn from(s: &FileStat) -> WireStat {
        let kind = match s.kind {
            FileKind::File => "file",
            FileKind::Dir => "dir",
            FileKind::Symlink => "symlink",
            FileKind::Other => "other",
        };
        WireStat {
            kind: kind.to_string(),
            size: s.size,
            mode: s.mode,
            mtime: s.mtime,
            uid: s.uid,
        }
    }
}

impl From<WireStat> for FileStat {
    fn from(s: WireStat) -> FileStat {
        let kind = match s.kind.as_str() {
            "file" => FileKind::File,
            "dir" => FileKind::Dir,
            "symlink" => FileKind::Symlink,
            _ => FileKind::Other,
        };
        FileStat {
            kind,
            size: s.size,
            mode: s.mode,
            mtime: s.mtime,
            uid: s.uid,
        }
    }
}

pub fn entries_to_wire(entries: &[DirEntry]) -> Vec<(String, WireStat)> {
    entries
        .iter()
        .map(|e| (e.name.clone(), WireStat::from(&e.stat)))
        .collect()
}

/// The error a keeper reported, with its code when this build knows it.
pub fn error_from_wire(code: &str, message: String, retryable: bool, hint: Option<Hint>) -> Error {
    let code = KNOWN_CODES
        .iter()
        .copied()
        .find(|c| c.as_str() == code)
        .unwrap_or(ErrorCode::RemoteError);
    let mut err = Error::new(code, message).retryable(retryable);
    err.hint = hint;
    err
}

/// Codes a keeper's transport can report (others arrive as `remote_error`).
const KNOWN_CODES: &[ErrorCode] = &[
    ErrorCode::InvalidArgument,
    ErrorCode::ConfigInvalid,
    ErrorCode::UnknownMachine,
    ErrorCode::Timeout,
    ErrorCode::Cancelled,
    ErrorCode::ConnectionFailed,
    ErrorCode::ConnectionLost,
    ErrorCode::AuthFailed,
    ErrorCode::HostKeyUnknown,
    ErrorCode::HostKeyChanged,
    ErrorCode::InsecureRemoteDir,
    ErrorCode::RemoteNotFound,
    ErrorCode::PermissionDenied,
    ErrorCode::RemoteError,
    // A Slurm session's node whose allocation is gone (`slurm::NodeTransport`).
    ErrorCode::SessionLost,
    ErrorCode::Io,
    ErrorCode::Store,
    ErrorCode::NotImplemented,
    ErrorCode::Internal,
];

/// One frame: a JSON header and raw bytes.
#[derive(Debug)]
pub struct Frame<H> {
    pub id: u64,
    pub header: H,
    pub body: Vec<u8>,
}

#[derive(Serialize, Deserialize)]
struct Envelope<H> {
    id: u64,
    #[serde(flatten)]
    header: H,
}

/// Encode a frame to bytes.
pub fn encode<H: Serialize>(id: u64, header: H, body: &[u8]) -> Vec<u8> {
    let head = serde_json::to_vec(&Envelope { id, header }).expect("frame headers serialize");
    let len = 4 + head.len() + body.len();
    let mut out = Vec::with_capacity(4 + len);
    out.extend_from_slice(&(len as u32).to_be_bytes());
    out.extend_from_slice(&(head.len() as u32).to_be_bytes());
    out.extend_from_slice(&head);
    out.extend_from_slice(body);
    out
}

/// Write one frame.
pub async fn write_frame<W: AsyncWrite + Unpin, H: Serialize>(
    w: &mut W,
    id: u64,
    header: H,
    body: &[u8],
) -> std::io::Result<()> {
    w.write_all(&encode(id, header, body)).await
}

/// Read one frame; `Ok(None)` at a clean end of the stream.
pub async fn read_frame<R: AsyncRead + Unpin, H: for<'de> Deserialize<'de>>(
    r: &mut R,
) -> std::io::Result<Option<Frame<H>>> {
    let mut len = [0u8; 4];
    match r.read_exact(&mut len).await {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e),
    }
    let len = u32::from_be_bytes(len) as usize;
    if !(4..=MAX_FRAME).contains(&len) {
        return Err(bad("frame length out of range"));
    }
    let mut buf = vec![0u8; len];
    r.read_exact(&mut buf).await?;
    let head_len = u32::from_be_bytes(buf[..4].try_into().unwrap()) as usize;
    if head_len > len - 4 {
        return Err(bad("frame header longer than the frame"));
    }
    let env: Envelope<H> = serde_json::from_slice(&buf[4..4 + head_len])
        .map_err(|e| bad(&format!("bad frame header: {e}")))?;
    let body = buf.split_off(4 + head_len);
    Ok(Some(Frame {
        id: env.id,
        header: env.header,
        body,
    }))
}

fn bad(what: &str) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, what.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn frames_round_trip_with_bytes() {
        let bytes = encode(
            7,
            Request::ExecRaw(ExecCall {
                command: "true".into(),
                timeout_ms: Some(5),
                max_output: 9,
                stdin: true,
            }),
            b"\x00\xffdata",
        );
        let mut r = &bytes[..];
        let f: Frame<Request> = read_frame(&mut r).await.unwrap().unwrap();
        assert_eq!(f.id, 7);
        assert_eq!(f.body, b"\x00\xffdata");
        assert!(matches!(
            f.header,
            Request::ExecRaw(ExecCall { stdin: true, .. })
        ));
        assert!(read_frame::<_, Request>(&mut r).await.unwrap().is_none());
    }

    #[test]
    fn unknown_error_codes_arrive_as_remote_error() {
        let e = error_from_wire("no_such_code", "m".into(), false, None);
        assert_eq!(e.code, ErrorCode::RemoteError);
        let e = error_from_wire("connection_lost", "m".into(), true, None);
        assert_eq!(e.code, ErrorCode::ConnectionLost);
        assert!(e.retryable);
    }

    #[tokio::test]
    async fn an_errors_hint_crosses_the_socket() {
        let err = Error::new(ErrorCode::HostKeyUnknown, "the host key is not known").with_hint(
            Hint::AcceptHostKey {
                host: "10.0.0.9".into(),
                port: 2222,
                known_hosts: "/home/u/.ssh/known_hosts".into(),
                machine_id: Some("lab".into()),
            },
        );
        let bytes = encode(3, Reply::from_error(&err), b"");
        let f: Frame<Reply> = read_frame(&mut &bytes[..]).await.unwrap().unwrap();
        let Reply::Error {
            code,
            message,
            retryable,
            hint,
        } = f.header
        else {
            panic!("not an error: {:?}", f.header);
        };
        assert_eq!(error_from_wire(&code, message, retryable, hint), err);
    }
}
