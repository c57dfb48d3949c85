//! `mount destroy [--cleanup]`.

use remote_runner_engine::engine::host::shell_quote;
use serde_json::{Value, json};

use crate::clock::now;
use crate::cmd::session_destroy;
use crate::ctx::Ctx;
use crate::error::{Result, SeedError, UNMOUNT};
use crate::metadata::write_metadata;
use crate::state;

/// `mount destroy`: its sessions are destroyed too; local logs and artifacts stay.
pub async fn run(ctx: &Ctx, mount_id: &str, cleanup: bool) -> Result<Value> {
    let mount = state::lock(&ctx.state_dir)?.state.mount(mount_id)?.clone();
    let mut warnings = Vec::new();
    let session_ids: Vec<String> = state::lock(&ctx.state_dir)?
        .state
        .sessions
        .iter()
        .filter(|s| s.mount_id == mount_id)
        .map(|s| s.session_id.clone())
        .collect();
    for sid in session_ids {
        match session_destroy::run(ctx, &sid).await {
            Ok(out) => {
                if let Some(w) = out["warning"].as_str() {
                    warnings.push(format!("session {sid}: {w}"));
                }
            }
            Err(e) => warnings.push(format!("session {sid}: {}", e.message)),
        }
    }
    if cleanup {
        let removed = async {
            let wired = ctx.wire(&mount.machine, None)?;
            let host = wired.host().await?;
            let out = host
                .run(
                    &format!("rm -rf -- {}", shell_quote(&mount.remote_path)),
                    &[],
                )
                .await
                .map_err(|e| {
                    SeedError::engine(e, "removing the remote dir", (UNMOUNT, "unmount_failed"))
                })?;
            if out.status.success() {
                Ok(())
            } else {
                Err(SeedError::new(
                    UNMOUNT,
                    "unmount_failed",
                    out.stderr_lossy().trim().to_string(),
                ))
            }
        }
        .await;
        if let Err(e) = removed {
            warnings.push(format!(
                "error {}: cannot remove {} on {}: {}",
                UNMOUNT, mount.remote_path, mount.machine, e.message
            ));
        }
    }
    let mut locked = state::lock(&ctx.state_dir)?;
    if let Ok(m) = locked.state.mount(mount_id) {
        let _ = write_metadata(m);
    }
    locked.state.mounts.retain(|m| m.mount_id != mount_id);
    locked.save()?;
    state::remove_manifest(&ctx.state_dir, mount_id);
    let (at, _) = now();
    let mut out = json!({
        "mount_id": mount_id,
        "status": "unmounted",
        "unmounted_at": at,
        "artifacts_preserved": true,
        "artifacts_location": mount.local_path,
    });
    if !warnings.is_empty() {
        out["warning"] = json!(warnings.join("; "));
    }
    Ok(out)
}
