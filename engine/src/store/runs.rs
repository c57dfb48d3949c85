//! Run manifests in the `runs` table (the same JSON as each run's `manifest.json`).

use rusqlite::params;

use crate::error::{Error, ErrorCode, Result};
use crate::records::RunManifest;
use crate::store::{Store, query_all, query_one, to_data};

fn map(e: rusqlite::Error) -> Error {
    Error::new(ErrorCode::Store, format!("store write failed: {e}"))
}

/// Insert or replace a run manifest.
pub fn upsert(store: &Store, rec: &RunManifest) -> Result<()> {
    store
        .conn()
        .execute(
            "INSERT INTO runs (run_id, created_at, data) VALUES (?1, ?2, ?3)
             ON CONFLICT(run_id) DO UPDATE SET data = ?3",
            params![rec.run_id, rec.started_at, to_data(rec)?],
        )
        .map_err(map)?;
    Ok(())
}

pub fn get(store: &Store, run_id: &str) -> Result<Option<RunManifest>> {
    query_one(
        store.conn(),
        "SELECT data FROM runs WHERE run_id = ?1",
        params![run_id],
    )
}

/// Every run, oldest first.
pub fn list(store: &Store) -> Result<Vec<RunManifest>> {
    query_all(
        store.conn(),
        "SELECT data FROM runs ORDER BY created_at, run_id",
        [],
    )
}
