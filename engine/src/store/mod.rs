//! The local record store: one SQLite database under the state dir.
//!
//! WAL mode and a busy timeout let any number of CLI processes and providers share it. Each table
//! keeps a few indexed columns plus the full record as JSON in `data`, so records can grow fields
//! without a migration. Credentials are never stored here (see `credentials`).
//!
//! Query modules (`machines`, `sessions`, `commands`, `transfers`, `runs`) each own one table.

pub mod commands;
pub mod credentials;
pub mod machines;
pub mod ownership;
pub mod runs;
pub mod sessions;
pub mod transfers;

use std::path::{Path, PathBuf};
use std::time::Duration;

use rusqlite::{Connection, OptionalExtension};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::error::{Error, ErrorCode, Result};
use crate::util::retry::{self, STORE_OPEN};

/// Ordered schema migrations; `PRAGMA user_version` records how many ran. Append only.
const MIGRATIONS: &[&str] = &[
    // 1: initial schema.
    "CREATE TABLE machines (
         machine_id TEXT PRIMARY KEY,
         created_at TEXT NOT NULL,
         updated_at TEXT NOT NULL,
         data TEXT NOT NULL
     );
     CREATE TABLE sessions (
         session_id TEXT PRIMARY KEY,
         machine_id TEXT NOT NULL,
         status TEXT NOT NULL,
         created_at TEXT NOT NULL,
         data TEXT NOT NULL
     );
     CREATE INDEX sessions_by_machine ON sessions(machine_id);
     CREATE TABLE commands (
         command_id TEXT PRIMARY KEY,
         session_id TEXT NOT NULL,
         seq INTEGER NOT NULL,
         status TEXT NOT NULL,
         created_at TEXT NOT NULL,
         data TEXT NOT NULL,
         UNIQUE(session_id, seq)
     );
     CREATE TABLE transfers (
         transfer_id TEXT PRIMARY KEY,
         session_id TEXT,
         created_at TEXT NOT NULL,
         data TEXT NOT NULL
     );
     CREATE INDEX transfers_by_session ON transfers(session_id);
     CREATE TABLE runs (
         run_id TEXT PRIMARY KEY,
         created_at TEXT NOT NULL,
         data TEXT NOT NULL
     );",
];

/// An open store. Cheap to open; open one per process (or per task that needs it).
pub struct Store {
    conn: Connection,
    state_dir: PathBuf,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("state_dir", &self.state_dir)
            .finish()
    }
}

impl Store {
    /// Open (creating if needed) the store in `state_dir`, which is created with mode 0700 and
    /// refused when another user owns it or could write to it (see [`ownership`]).
    pub fn open(state_dir: &Path) -> Result<Store> {
        ownership::open_state_dir(state_dir)?;
        let path = state_dir.join("state.sqlite3");
        // Switching a new database to WAL (and its first recovery) can report "database is
        // locked" at once, without waiting on the busy timeout, while other processes open the
        // same store: retry the whole opening for a bounded time.
        // The sleeps between tries block the thread: callers in async code open the store
        // through `util::blocking`.
        let busy = |e: &OpenError| match e {
            OpenError::Busy(e) => {
                tracing::debug!("store busy while opening ({e}); retrying");
                true
            }
            OpenError::Other(_) => false,
        };
        match retry::run_blocking(STORE_OPEN, || Store::open_once(state_dir, &path), busy) {
            Ok(store) => Ok(store),
            Err(OpenError::Busy(e)) => Err(store_err(&path, e)),
            Err(OpenError::Other(e)) => Err(e),
        }
    }

    fn open_once(state_dir: &Path, path: &Path) -> std::result::Result<Store, OpenError> {
        let sql = |e: rusqlite::Error| {
            if is_busy(&e) {
                OpenError::Busy(e)
            } else {
                OpenError::Other(store_err(path, e))
            }
        };
        let conn = Connection::open(path).map_err(sql)?;
        conn.busy_timeout(Duration::from_secs(30)).map_err(sql)?;
        let mode: String = conn
            .query_row("PRAGMA journal_mode", [], |r| r.get(0))
            .map_err(sql)?;
        if !mode.eq_ignore_ascii_case("wal") {
            conn.pragma_update(None, "journal_mode", "WAL")
                .map_err(sql)?;
        }
        conn.pragma_update(None, "synchronous", "NORMAL")
            .map_err(sql)?;
        set_private_mode(path).map_err(OpenError::Other)?;
        let mut store = Store {
            conn,
            state_dir: state_dir.to_path_buf(),
        };
        store.migrate()?;
        Ok(store)
    }

    pub fn state_dir(&self) -> &Path {
        &self.state_dir
    }

    /// The raw connection, for the query modules.
    pub fn conn(&self) -> &Connection {
        &self.conn
    }

    fn migrate(&mut self) -> std::result::Result<(), OpenError> {
        let path = self.state_dir.join("state.sqlite3");
        let sql = |e: rusqlite::Error| {
            if is_busy(&e) {
                OpenError::Busy(e)
            } else {
                OpenError::Other(store_err(&path, e))
            }
        };
        let tx = self
            .conn
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
            .map_err(sql)?;
        let current: i64 = tx
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .map_err(sql)?;
        let current = usize::try_from(current).unwrap_or(0);
        if current > MIGRATIONS.len() {
            return Err(OpenError::Other(Error::new(
                ErrorCode::Store,
                format!(
                    "the state in {} was written by a newer remote-runner (schema {current}, this \
                     build knows {}); upgrade remote-runner or use another --state-dir",
                    self.state_dir.display(),
                    MIGRATIONS.len()
                ),
            )));
        }
        for (i, migration) in MIGRATIONS.iter().enumerate().skip(current) {
            tx.execute_batch(migration).map_err(sql)?;
            tx.pragma_update(None, "user_version", (i + 1) as i64)
                .map_err(sql)?;
        }
        tx.commit().map_err(sql)
    }
}

/// Why one attempt to open the store failed: busy (worth a retry) or anything else.
enum OpenError {
    Busy(rusqlite::Error),
    Other(Error),
}

fn is_busy(e: &rusqlite::Error) -> bool {
    matches!(
        e,
        rusqlite::Error::SqliteFailure(f, _)
            if matches!(f.code, rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked)
    )
}

/// Serialize a record for a `data` column.
/// The state dir when none is given (`--state-dir`, `REMOTE_RUNNER_STATE_DIR`):
/// `~/.remote-runner`, shared by the CLI and the provider; `None` when the home directory is
/// unknown.
pub fn default_state_dir() -> Option<PathBuf> {
    dirs::home_dir().map(|home| home.join(".remote-runner"))
}

pub fn to_data<T: Serialize>(record: &T) -> Result<String> {
    serde_json::to_string(record).map_err(|e| Error::internal(format!("cannot encode record: {e}")))
}

/// Decode a `data` column.
pub fn from_data<T: DeserializeOwned>(data: &str) -> Result<T> {
    serde_json::from_str(data).map_err(|e| {
        Error::new(
            ErrorCode::Store,
            format!(
                "a stored record could not be read ({e}); the store may be from another version"
            ),
        )
    })
}

/// Run a query that returns zero or one `data` column and decode it.
pub fn query_one<T: DeserializeOwned>(
    conn: &Connection,
    sql: &str,
    params: impl rusqlite::Params,
) -> Result<Option<T>> {
    let data: Option<String> = conn
        .query_row(sql, params, |r| r.get(0))
        .optional()
        .map_err(|e| Error::new(ErrorCode::Store, format!("store query failed: {e}")))?;
    data.map(|d| from_data(&d)).transpose()
}

/// Run a query whose first column is `data` and decode every row.
pub fn query_all<T: DeserializeOwned>(
    conn: &Connection,
    sql: &str,
    params: impl rusqlite::Params,
) -> Result<Vec<T>> {
    let map = |e: rusqlite::Error| Error::new(ErrorCode::Store, format!("store query failed: {e}"));
    let mut stmt = conn.prepare(sql).map_err(map)?;
    let rows = stmt
        .query_map(params, |r| r.get::<_, String>(0))
        .map_err(map)?;
    let mut out = Vec::new();
    for row in rows {
        out.push(from_data(&row.map_err(map)?)?);
    }
    Ok(out)
}

/// Map a rusqlite error, with the database path, to a store error. Disk-full is named as such.
pub fn store_err(path: &Path, e: rusqlite::Error) -> Error {
    let full = matches!(
        &e,
        rusqlite::Error::SqliteFailure(f, _) if f.code == rusqlite::ErrorCode::DiskFull
    );
    if full {
        return Error::new(
            ErrorCode::Store,
            format!(
                "the disk holding {} is full; free space and retry (nothing was lost)",
                path.display()
            ),
        );
    }
    Error::new(
        ErrorCode::Store,
        format!("store {} failed: {e}", path.display()),
    )
}

/// Create `dir` (and missing parents) with mode 0700; an existing one must be ours and not
/// writable by others (see [`ownership`]).
pub fn ensure_private_dir(dir: &Path) -> Result<()> {
    ownership::ensure_private_dir(dir)
}

/// Make a file 0600.
pub fn set_private_mode(path: &Path) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
        .map_err(|e| Error::io(format!("cannot set mode 0600 on {}", path.display()), &e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn open_creates_private_dir_and_migrates_once() {
        use std::os::unix::fs::PermissionsExt;
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("state");
        let s = Store::open(&dir).unwrap();
        let mode = std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o700);
        let v: i64 = s
            .conn()
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .unwrap();
        assert_eq!(v as usize, MIGRATIONS.len());
        drop(s);
        let s = Store::open(&dir).unwrap();
        let v: i64 = s
            .conn()
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .unwrap();
        assert_eq!(v as usize, MIGRATIONS.len());
        let db_mode = std::fs::metadata(dir.join("state.sqlite3"))
            .unwrap()
            .permissions()
            .mode()
            & 0o777;
        assert_eq!(db_mode, 0o600);
    }
}
