//! Command records in the `commands` table, ordered by `seq` within a session.

use rusqlite::{Transaction, TransactionBehavior, params};

use crate::error::{Error, ErrorCode, Result};
use crate::records::CommandRecord;
use crate::store::{Store, query_all, query_one, to_data};

fn map(e: rusqlite::Error) -> Error {
    Error::new(ErrorCode::Store, format!("store write failed: {e}"))
}

/// Insert a new command, assigning the next `seq` of its session in the same transaction.
/// Returns the record with `seq` set.
pub fn insert_next(store: &Store, rec: &CommandRecord) -> Result<CommandRecord> {
    let tx =
        Transaction::new_unchecked(store.conn(), TransactionBehavior::Immediate).map_err(map)?;
    let seq: i64 = tx
        .query_row(
            "SELECT COALESCE(MAX(seq), 0) + 1 FROM commands WHERE session_id = ?1",
            params![rec.session_id],
            |r| r.get(0),
        )
        .map_err(map)?;
    let mut rec = rec.clone();
    rec.seq = seq as u64;
    tx.execute(
        "INSERT INTO commands (command_id, session_id, seq, status, created_at, data)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
        params![
            rec.command_id,
            rec.session_id,
            seq,
            rec.status.as_str(),
            rec.created_at,
            to_data(&rec)?
        ],
    )
    .map_err(map)?;
    tx.commit().map_err(map)?;
    Ok(rec)
}

/// Replace an existing command record.
pub fn update(store: &Store, rec: &CommandRecord) -> Result<()> {
    store
        .conn()
        .execute(
            "UPDATE commands SET status = ?2, data = ?3 WHERE command_id = ?1",
            params![rec.command_id, rec.status.as_str(), to_data(rec)?],
        )
        .map_err(map)?;
    Ok(())
}

pub fn get(store: &Store, command_id: &str) -> Result<Option<CommandRecord>> {
    query_one(
        store.conn(),
        "SELECT data FROM commands WHERE command_id = ?1",
        params![command_id],
    )
}

/// A session's commands in order.
pub fn list(store: &Store, session_id: &str) -> Result<Vec<CommandRecord>> {
    query_all(
        store.conn(),
        "SELECT data FROM commands WHERE session_id = ?1 ORDER BY seq",
        params![session_id],
    )
}

/// A session's most recent command.
pub fn last(store: &Store, session_id: &str) -> Result<Option<CommandRecord>> {
    query_one(
        store.conn(),
        "SELECT data FROM commands WHERE session_id = ?1 ORDER BY seq DESC LIMIT 1",
        params![session_id],
    )
}

pub fn count(store: &Store, session_id: &str) -> Result<u64> {
    let n: i64 = store
        .conn()
        .query_row(
            "SELECT COUNT(*) FROM commands WHERE session_id = ?1",
            params![session_id],
            |r| r.get(0),
        )
        .map_err(map)?;
    Ok(n as u64)
}

/// Remove a command that never started (its start was refused).
pub fn delete(store: &Store, command_id: &str) -> Result<()> {
    store
        .conn()
        .execute(
            "DELETE FROM commands WHERE command_id = ?1",
            params![command_id],
        )
        .map_err(map)?;
    Ok(())
}
