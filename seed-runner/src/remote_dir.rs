//! The mount's remote work dir: made by `mount create` (`make_dir.sh`), checked by `mount
//! status`, made again when it is gone.

use remote_runner_engine::engine::host::{FileKind, Host, shell_quote};

use crate::ctx::{Ctx, Wired};
use crate::error::{Result, SYNC, SeedError};
use crate::state::Mount;

/// The remote work dir as `mount create` made it.
pub(crate) struct Prepared {
    /// Absolute path.
    pub(crate) path: String,
    /// The topmost directory this call created (removed again when the create fails).
    pub(crate) created: Option<String>,
}

/// Create the remote work dir and its `artifacts/` (`~` is the login user's home).
/// `mkdir -p` of a mount's (absolute) remote work dir, nothing in it.
pub(crate) async fn remake_bare_dir(wired: &Wired, remote_path: &str) -> Result<()> {
    let host = wired.host().await?;
    let out = host
        .run(&format!("mkdir -p -- {}", shell_quote(remote_path)), &[])
        .await
        .map_err(|e| {
            SeedError::engine(
                e,
                &format!("making the remote work dir {remote_path} again"),
                (SYNC, "remote_dir_missing"),
            )
        })?;
    if !out.status.success() {
        return Err(SeedError::new(
            SYNC,
            "remote_dir_missing",
            format!(
                "the remote work dir {remote_path} on {} is gone and cannot be made again: {}; \
                 check its parent's permissions, or destroy the mount and create another",
                wired.machine.machine_id,
                out.stderr_lossy().trim()
            ),
        ));
    }
    Ok(())
}

pub(crate) async fn prepare_remote_dir(wired: &Wired, remote_dir: &str) -> Result<Prepared> {
    let host = wired.host().await?;
    let target = if remote_dir == "~" {
        "\"$HOME\"".to_string()
    } else if let Some(rest) = remote_dir.strip_prefix("~/") {
        format!("\"$HOME\"/{}", shell_quote(rest))
    } else if remote_dir.starts_with('/') {
        shell_quote(remote_dir)
    } else {
        format!("\"$HOME\"/{}", shell_quote(remote_dir))
    };
    let out = host
        .run(&make_dir_script(&target), &[])
        .await
        .map_err(|e| {
            SeedError::engine(
                e,
                &format!("creating {remote_dir} on {}", wired.machine.machine_id),
                (SYNC, "mount_failed"),
            )
        })?;
    let text = out.stdout_lossy();
    let mut lines = text.lines();
    let path = lines.next().unwrap_or_default().to_string();
    let created = lines
        .next()
        .filter(|l| l.starts_with('/'))
        .map(str::to_string);
    if !out.status.success() || !path.starts_with('/') {
        return Err(SeedError::new(
            SYNC,
            "mount_failed",
            format!(
                "cannot create the remote work dir {remote_dir} on {}: {}; check its path and \
                 permissions, or pass another --remote-dir",
                wired.machine.machine_id,
                out.stderr_lossy().trim()
            ),
        ));
    }
    Ok(Prepared { path, created })
}

/// The remote script (`make_dir.sh`) that makes `target` (a shell word) and its `artifacts/`.
pub(crate) fn make_dir_script(target: &str) -> String {
    format!("d={target}\n{}", include_str!("make_dir.sh"))
}

/// Whether the mount's remote work dir is there (one call on the machine).
pub(crate) async fn check_remote_dir(ctx: &Ctx, m: &Mount) -> Result<()> {
    let wired = ctx.wire(&m.machine, None)?;
    let host = wired.host().await?;
    match host.stat(&m.remote_path).await {
        Ok(Some(st)) if st.kind == FileKind::Dir => Ok(()),
        Ok(_) => Err(SeedError::new(
            SYNC,
            "remote_dir_missing",
            format!(
                "the remote work dir {} is gone on {}; the next `session exec` makes it again \
                 and sends the local files",
                m.remote_path, m.machine
            ),
        )),
        Err(e) => Err(SeedError::engine(
            e,
            &format!("checking {} on {}", m.remote_path, m.machine),
            (SYNC, "mount_failed"),
        )),
    }
}

pub(crate) async fn remake_remote_dir(host: &Host, mount: &Mount) -> Result<()> {
    let out = host
        .run(&make_dir_script(&shell_quote(&mount.remote_path)), &[])
        .await
        .map_err(|e| {
            SeedError::engine(
                e,
                "making the remote work dir again",
                (SYNC, "mount_failed"),
            )
        })?;
    if !out.status.success() {
        return Err(SeedError::new(
            SYNC,
            "mount_failed",
            format!(
                "the remote work dir {} is gone and cannot be made again: {}; check its parent \
                 and permissions, or destroy the mount and create another",
                mount.remote_path,
                out.stderr_lossy().trim()
            ),
        ));
    }
    Ok(())
}
