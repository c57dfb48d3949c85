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

/// How many sessions (of any status) are recorded for a machine: the records a machine's
/// removal keeps, so their logs stay readable.
pub fn count_for_machine(store: &Store, machine_id: &str) -> Result<u64> {
    store
        .conn()
        .query_row(
            "SELECT COUNT(*) FROM sessions WHERE machine_id = ?1",
            params![machine_id],
            |r| r.get::<_, i64>(0),
        )
        .map(|n| n.max(0) as u64)
        .map_err(|e| Error::new(ErrorCode::Store, format!("cannot count sessions: {e}")))
}

/// All sessions, oldest first.
pub fn list(store: &Store) -> Result<Vec<SessionRecord>> {
    query_all(
        store.conn(),
        "SELECT data FROM sessions ORDER BY created_at, session_id",
        [],
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(store: &Store, session_id: &str, machine_id: &str, status: &str) {
        store
            .conn()
            .execute(
                "INSERT INTO sessions (session_id, machine_id, status, created_at, data)
                 VALUES (?1, ?2, ?3, '2026-01-01T00:00:00Z', '{}')",
                params![session_id, machine_id, status],
            )
            .unwrap();
    }

    #[test]
    fn sessions_of_a_machine_are_counted_whatever_their_status() {
        let tmp = tempfile::tempdir().unwrap();
        let store = Store::open(&tmp.path().join("state")).unwrap();
        assert_eq!(count_for_machine(&store, "m1").unwrap(), 0);
        record(&store, "s1", "m1", "active");
        record(&store, "s2", "m1", "destroyed");
        record(&store, "s3", "m2", "active");
        assert_eq!(count_for_machine(&store, "m1").unwrap(), 2);
        assert_eq!(count_for_machine(&store, "m2").unwrap(), 1);
        assert_eq!(count_for_machine(&store, "nope").unwrap(), 0);
    }
}
