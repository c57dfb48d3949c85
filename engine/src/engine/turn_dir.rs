//! A turn's directory on the machine: `<session dir>/turns/<time>-<turn id>`. An agent turn's
//! input is written there and the agent leaves its thread id and usage there; a turn's chat
//! calls live in its `chat/` subdirectory. The provider asks for it here and never reaches the
//! machine's files itself.

use std::sync::Arc;

use super::Engine;
use crate::error::Result;
use crate::remote::Remote;

/// Longest file the agent may leave in its turn directory that the engine reads back.
pub const MAX_TURN_FILE: usize = 64 * 1024;

/// One turn's directory on its session's machine.
#[derive(Clone)]
pub struct TurnDir {
    /// The directory's path on the machine.
    pub path: String,
    /// The session's remote state directory (where per-session helpers are installed).
    pub session_dir: String,
    transport: Arc<Remote>,
}

impl std::fmt::Debug for TurnDir {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TurnDir").field("path", &self.path).finish()
    }
}

impl Engine {
    /// The directory of a new turn of `session_id` (named after the time and `turn_id`); not
    /// made on the machine until [`TurnDir::create`] or a helper does.
    pub async fn turn_dir(&self, session_id: &str, turn_id: &str) -> Result<TurnDir> {
        let session = self.load_session(session_id)?;
        // The session's own transport (its node's, in a Slurm allocation): the chat helper
        // checks a call's process in the /proc of the host the turn runs on.
        let login = self.connector.connect(&session.machine_id).await?;
        let transport = self.session_transport(&session, login);
        let path = format!(
            "{}/turns/{}-{}",
            session.remote_state_dir,
            crate::util::now_unix_ms(),
            slug(turn_id)
        );
        Ok(TurnDir {
            path,
            session_dir: session.remote_state_dir,
            transport,
        })
    }

    /// The same turn directory again, by its path (after the turn's command ended).
    pub async fn existing_turn_dir(&self, session_id: &str, path: &str) -> Result<TurnDir> {
        let session = self.load_session(session_id)?;
        let login = self.connector.connect(&session.machine_id).await?;
        let transport = self.session_transport(&session, login);
        Ok(TurnDir {
            path: path.to_string(),
            session_dir: session.remote_state_dir,
            transport,
        })
    }
}

impl TurnDir {
    /// Make the directory (0700).
    pub async fn create(&self) -> Result<()> {
        self.transport.create_dir_all(&self.path, 0o700).await
    }

    /// Write `name` in the directory (0600, atomically) and return its path.
    pub async fn write(&self, name: &str, content: &[u8]) -> Result<String> {
        let path = self.file(name);
        self.transport.write_file(&path, content, 0o600).await?;
        Ok(path)
    }

    /// Up to [`MAX_TURN_FILE`] bytes of `name` (an error when it does not exist).
    pub async fn read(&self, name: &str) -> Result<Vec<u8>> {
        self.transport
            .read_file_range(&self.file(name), 0, MAX_TURN_FILE)
            .await
    }

    /// The path of `name` in the directory.
    pub fn file(&self, name: &str) -> String {
        format!("{}/{name}", self.path)
    }

    /// The machine's transport, for the turn's chat helper.
    pub(crate) fn transport(&self) -> Arc<Remote> {
        self.transport.clone()
    }
}

/// A turn id as one safe path component (at most 100 characters).
fn slug(turn_id: &str) -> String {
    turn_id
        .chars()
        .map(|ch| {
            if ch.is_ascii_alphanumeric() || ch == '-' || ch == '.' {
                ch
            } else {
                '_'
            }
        })
        .take(100)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::slug;

    #[test]
    fn a_turn_id_becomes_one_safe_path_component() {
        assert_eq!(slug("turn-1.a"), "turn-1.a");
        assert_eq!(slug("../x y/z"), ".._x_y_z");
        assert_eq!(slug(&"é".repeat(150)).chars().count(), 100);
    }
}
