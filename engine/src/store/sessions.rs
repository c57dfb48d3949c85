//! Session records in the `sessions` table.

use rusqlite::params;

use crate::error::{Error, ErrorCode, Result};
use crate::records::SessionRecord;
use crate::store::{Store, query_all, query_one, to_data};

fn map(e: rusqlite::Error) -> Error {
    Error::new(ErrorCode::Store, format!("store write failed: {e}"))
}

/// Insert or replace a session record.
pub fn upsert(store: &Store, rec: &SessionRecord) -> Result<()> {
    store
        .conn()
        .execute(
            "INSERT INTO sessions (session_id, machine_id, status, created_at, data)
             VALUES (?1, ?2, ?3, ?4, ?5)
             ON CONFLICT(session_id) DO UPDATE SET status = ?3, data = ?5",
            params![
                rec.session_id,
                rec.machine_id,
                rec.status.as_str(),
                rec.created_at,
                to_data(rec)?
            ],
        )
        .map_err(map)?;
    Ok(())
}

pub fn get(store: &Store, session_id: &str) -> Result<Option<SessionRecord>> {
    query_one(
        store.conn(),
        "SELECT data FROM sessions WHERE session_id = ?1",
        params![session_id],
    )
}

/// All sessions, oldest first.
pub fn list(store: &Store) -> Result<Vec<SessionRecord>> {
    query_all(
        store.conn(),
        "SELECT data FROM sessions ORDER BY created_at, session_id",
        [],
    )
}
