//! `<local-dir>/metadata.json` and a mount's JSON.

use std::path::Path;

use serde_json::{Value, json};

use crate::error::{LOG_WRITE, Result, SeedError};
use crate::state::{self, Mount};

pub(crate) fn metadata_json(m: &Mount) -> Value {
    json!({
        "mount_id": m.mount_id,
        "machine": m.machine,
        "local_path": m.local_path,
        "remote_path": m.remote_path,
        "mounted_at": m.mounted_at,
        "sessions": m.meta_sessions.iter().map(|s| json!({
            "session_id": s.session_id,
            "session_name": s.session_name,
            "created_at": s.created_at,
            "commands": s.commands.iter().map(|c| json!({
                "index": c.index,
                "cmd": c.cmd,
                "log_file": c.log_file,
                "exit_code": c.exit_code,
                "executed_at": c.executed_at,
            })).collect::<Vec<_>>(),
        })).collect::<Vec<_>>(),
    })
}

/// Rewrite `<local>/metadata.json`.
pub(crate) fn write_metadata(m: &Mount) -> Result<()> {
    let path = Path::new(&m.local_path).join("metadata.json");
    let text = serde_json::to_vec_pretty(&metadata_json(m)).unwrap_or_default();
    state::write_atomic(&path, &text).map_err(|e| {
        SeedError::new(
            LOG_WRITE,
            "log_write_failed",
            format!(
                "cannot write {}: {e}; check local disk space and permissions",
                path.display()
            ),
        )
    })
}

pub(crate) fn session_count(st: &state::State, mount_id: &str) -> usize {
    st.sessions
        .iter()
        .filter(|s| s.mount_id == mount_id)
        .count()
}

pub(crate) fn mount_json(m: &Mount, sessions: usize) -> Value {
    json!({
        "mount_id": m.mount_id,
        "machine": m.machine,
        "local_path": m.local_path,
        "remote_path": m.remote_path,
        "status": "mounted",
        "mounted_at": m.mounted_at,
        "session_count": sessions,
    })
}
