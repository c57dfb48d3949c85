//! Transfer records in the `transfers` table.

use rusqlite::params;

use crate::error::{Error, ErrorCode, Result};
use crate::records::TransferRecord;
use crate::store::{Store, query_all, query_one, to_data};

fn map(e: rusqlite::Error) -> Error {
    Error::new(ErrorCode::Store, format!("store write failed: {e}"))
}

/// Insert or replace a transfer record.
pub fn upsert(store: &Store, rec: &TransferRecord) -> Result<()> {
    store
        .conn()
        .execute(
            "INSERT INTO transfers (transfer_id, session_id, created_at, data)
             VALUES (?1, ?2, ?3, ?4)
             ON CONFLICT(transfer_id) DO UPDATE SET data = ?4",
            params![
                rec.transfer_id,
                rec.session_id,
                rec.started_at,
                to_data(rec)?
            ],
        )
        .map_err(map)?;
    Ok(())
}

pub fn get(store: &Store, transfer_id: &str) -> Result<Option<TransferRecord>> {
    query_one(
        store.conn(),
        "SELECT data FROM transfers WHERE transfer_id = ?1",
        params![transfer_id],
    )
}

/// Transfers oldest first (ids are time-ordered), of one session when given.
pub fn list(store: &Store, session_id: Option<&str>) -> Result<Vec<TransferRecord>> {
    match session_id {
        Some(id) => query_all(
            store.conn(),
            "SELECT data FROM transfers WHERE session_id = ?1 ORDER BY created_at, transfer_id",
            params![id],
        ),
        None => query_all(
            store.conn(),
            "SELECT data FROM transfers ORDER BY created_at, transfer_id",
            [],
        ),
    }
}

/// Transfers whose record says `running` (in progress, or their process died).
pub fn list_running(store: &Store) -> Result<Vec<TransferRecord>> {
    query_all(
        store.conn(),
        "SELECT data FROM transfers WHERE json_extract(data, '$.status') = 'running' \
         ORDER BY created_at, transfer_id",
        [],
    )
}
