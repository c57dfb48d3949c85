//! Bytes of one file on a session's machine, by offset, over a direct connection to it (the MCP
//! face's `file_read` and `file_write`). Whole trees and verified copies are
//! [`Engine::file_put`] and [`Engine::file_get`].

use super::{Engine, SessionStatus};
use crate::error::{Error, ErrorCode, Result};

/// Bytes read from a file on a session's machine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileSlice {
    /// The file's absolute path on the machine.
    pub path: String,
    /// The file's size when read.
    pub size: u64,
    /// The bytes from the offset asked for (fewer at the end of the file).
    pub data: Vec<u8>,
}

impl Engine {
    /// Up to `length` bytes of `path` from byte `offset`; a relative `path` is under the
    /// session's cwd. `remote_not_found` when there is no such file; `session_lost` when the
    /// session was destroyed (as for its commands and transfers: a destroyed session does no
    /// more work on its machine). A lost session's files are still read: its machine is there.
    pub async fn session_file_read(
        &self,
        session_id: &str,
        path: &str,
        offset: u64,
        length: usize,
    ) -> Result<FileSlice> {
        let (machine_id, path) = self.session_path(session_id, path)?;
        let transport = self.direct.connect(&machine_id).await?;
        let size = match transport.stat(&path).await? {
            Some(st) => st.size,
            None => {
                return Err(Error::new(
                    ErrorCode::RemoteNotFound,
                    format!("{path} does not exist on the session's machine; check the path"),
                )
                .retryable(false));
            }
        };
        let data = transport.read_file_range(&path, offset, length).await?;
        Ok(FileSlice { path, size, data })
    }

    /// Write `content` as the whole of `path` (atomically, mode 0644); a relative `path` is
    /// under the session's cwd. Returns the absolute path. `session_lost` when the session was
    /// destroyed, as for [`Engine::session_file_read`].
    pub async fn session_file_write(
        &self,
        session_id: &str,
        path: &str,
        content: &[u8],
    ) -> Result<String> {
        let (machine_id, path) = self.session_path(session_id, path)?;
        let transport = self.direct.connect(&machine_id).await?;
        transport.write_file(&path, content, 0o644).await?;
        Ok(path)
    }

    /// The session's machine, and `path` made absolute under the session's cwd; a destroyed
    /// session is refused.
    fn session_path(&self, session_id: &str, path: &str) -> Result<(String, String)> {
        let session = self.load_session(session_id)?;
        if session.status == SessionStatus::Destroyed {
            return Err(Error::new(
                ErrorCode::SessionLost,
                format!(
                    "session {session_id} was destroyed; create a new session on machine {} to \
                     read or write its files",
                    session.machine_id
                ),
            ));
        }
        let path = if path.starts_with('/') {
            path.to_string()
        } else {
            format!("{}/{path}", session.cwd.trim_end_matches('/'))
        };
        Ok((session.machine_id, path))
    }
}
