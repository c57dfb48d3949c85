//! The command logs: where they are on each side, and fetching one.

use std::path::{Path, PathBuf};

use remote_runner_engine::engine::transfer::TransferOptions;

use crate::ctx::Wired;
use crate::error::{LOG_WRITE, Result, SeedError};
use crate::state::{Mount, Session};

pub(crate) fn remote_log_dir(mount: &Mount, name: &str) -> String {
    format!("{}/logs/{name}", mount.remote_path)
}

pub(crate) fn local_log_dir(mount: &Mount, name: &str) -> PathBuf {
    Path::new(&mount.local_path)
        .join("artifacts")
        .join("logs")
        .join(name)
}

/// Fetch a command's log as it is now (partial while the command runs).
pub(crate) async fn fetch_log(
    wired: &Wired,
    session: &Session,
    mount: &Mount,
    log_filename: &str,
) -> Result<()> {
    let local_dir = local_log_dir(mount, &session.session_name);
    std::fs::create_dir_all(&local_dir).map_err(|e| {
        SeedError::new(
            LOG_WRITE,
            "log_write_failed",
            format!(
                "cannot create {}: {e}; check local disk space and permissions",
                local_dir.display()
            ),
        )
    })?;
    let remote_log = format!(
        "{}/{log_filename}",
        remote_log_dir(mount, &session.session_name)
    );
    wired
        .engine
        .file_get(
            &session.engine_session_id,
            &remote_log,
            &local_dir.join(log_filename),
            TransferOptions::default(),
        )
        .await
        .map_err(|e| {
            SeedError::engine(
                e,
                &format!("fetching the log {remote_log} (check local disk space and permissions)"),
                (LOG_WRITE, "log_write_failed"),
            )
        })?;
    Ok(())
}

/// The exit code on the log's last line (`$ exit_code: N`).
pub(crate) fn exit_code_from_log(path: &Path) -> Option<i32> {
    let text = std::fs::read_to_string(path).ok()?;
    let last = text.lines().rev().find(|l| !l.is_empty())?;
    last.rsplit_once("$ exit_code: ")?.1.trim().parse().ok()
}
