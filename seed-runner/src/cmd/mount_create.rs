//! `mount create`: nothing is created, locally or remotely, unless it succeeds.

use std::path::{Path, PathBuf};
use std::time::Duration;

use remote_runner_engine::engine::host::shell_quote;
use serde_json::{Value, json};

use crate::clock::{now, today};
use crate::ctx::Ctx;
use crate::error::{LOG_WRITE, Result, SSH, SYNC, SeedError};
use crate::metadata::write_metadata;
use crate::remote_dir::prepare_remote_dir;
use crate::state::{self, Mount};

/// `<local-dir>` as an absolute path without `.`, `..` or symlinks in the part that exists
/// (it need not exist yet), and the directories `mount create` would have to make for it.
fn resolve_local(local_dir: &Path) -> Result<(PathBuf, Vec<PathBuf>)> {
    let fail = |e: std::io::Error| {
        SeedError::new(
            LOG_WRITE,
            "log_write_failed",
            format!("cannot resolve {}: {e}", local_dir.display()),
        )
    };
    let abs = std::path::absolute(local_dir).map_err(fail)?;
    let mut existing = abs.clone();
    let mut rest = Vec::new();
    while !existing.exists() {
        let Some(name) = existing.file_name().map(|n| n.to_os_string()) else {
            break;
        };
        rest.push(name);
        existing.pop();
    }
    let mut path = std::fs::canonicalize(&existing).map_err(fail)?;
    let mut missing = Vec::new();
    for name in rest.into_iter().rev() {
        if name == ".." {
            path.pop();
        } else if name != "." {
            path.push(name);
            missing.push(path.clone());
        }
    }
    Ok((path, missing))
}

/// Whether one of two absolute paths is the other or inside it.
fn overlaps(a: &str, b: &str) -> bool {
    let (a, b) = (Path::new(a), Path::new(b));
    a.starts_with(b) || b.starts_with(a)
}

/// A live mount that shares the local dir, or the remote dir on the same machine, with a new
/// one (the same dir or one inside the other): its `--cleanup` would delete the other's work.
fn conflict(st: &state::State, machine_id: &str, local: &str, remote: Option<&str>) -> Result<()> {
    for m in &st.mounts {
        let what = if overlaps(&m.local_path, local) {
            format!("local dir {}", m.local_path)
        } else if m.machine == machine_id
            && let Some(r) = remote
            && overlaps(&m.remote_path, r)
        {
            format!("remote dir {} on {}", m.remote_path, m.machine)
        } else {
            continue;
        };
        return Err(SeedError::new(
            SYNC,
            "mount_conflict",
            format!(
                "mount {} already uses the {what}; reuse mount {} (sessions can share it), \
                 destroy it first, or pick another --local-dir / --remote-dir",
                m.mount_id, m.mount_id
            ),
        ));
    }
    Ok(())
}

/// `mount create`: nothing is created, locally or remotely, unless it succeeds.
pub async fn run(
    ctx: &Ctx,
    machine_id: &str,
    local_dir: &Path,
    remote_dir: &str,
    timeout: u64,
) -> Result<Value> {
    let (local, missing) = resolve_local(local_dir)?;
    let local = local.to_string_lossy().into_owned();
    conflict(
        &state::lock(&ctx.state_dir)?.state,
        machine_id,
        &local,
        None,
    )?;
    let bound = Duration::from_secs(timeout.max(1));
    let wired = ctx.wire(machine_id, Some(bound))?;
    let prepared = match tokio::time::timeout(bound, prepare_remote_dir(&wired, remote_dir)).await {
        Ok(r) => r?,
        Err(_) => {
            return Err(SeedError::new(
                SSH,
                "ssh_connection_failed",
                format!(
                    "mount create on {machine_id} did not finish within {timeout} s; check that \
                     the machine is online, or pass a larger --timeout"
                ),
            ));
        }
    };
    let made = async {
        let mut locked = state::lock(&ctx.state_dir)?;
        conflict(&locked.state, machine_id, &local, Some(&prepared.path))?;
        let logs = Path::new(&local).join("artifacts").join("logs");
        std::fs::create_dir_all(&logs).map_err(|e| {
            SeedError::new(
                LOG_WRITE,
                "log_write_failed",
                format!(
                    "cannot create {}: {e}; check the path and its permissions",
                    logs.display()
                ),
            )
        })?;
        let (at, _) = now();
        let mount = Mount {
            mount_id: locked.state.next_id("mnt", &today()),
            machine: machine_id.to_string(),
            local_path: local.clone(),
            remote_path: prepared.path.clone(),
            mounted_at: at,
            log_counters: Default::default(),
            meta_sessions: Vec::new(),
        };
        write_metadata(&mount)?;
        locked.state.mounts.push(mount.clone());
        locked.save()?;
        Ok(mount)
    }
    .await;
    let mount = match made {
        Ok(m) => m,
        Err(e) => {
            // Take back what this create made: the local dirs, then the remote ones.
            let root = Path::new(&local);
            let _ = std::fs::remove_dir(root.join("artifacts").join("logs"));
            let _ = std::fs::remove_dir(root.join("artifacts"));
            for dir in missing.iter().rev() {
                let _ = std::fs::remove_dir(dir);
            }
            if let Some(top) = &prepared.created
                && let Ok(host) = wired.host().await
            {
                let _ = host
                    .run(&format!("rm -rf -- {}", shell_quote(top)), &[])
                    .await;
            }
            return Err(e);
        }
    };
    Ok(json!({
        "mount_id": mount.mount_id,
        "machine": mount.machine,
        "local_path": mount.local_path,
        "remote_path": mount.remote_path,
        "status": "mounted",
        "mounted_at": mount.mounted_at,
    }))
}
