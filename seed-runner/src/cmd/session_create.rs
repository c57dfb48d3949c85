//! `session create`: an engine session started in the mount's remote work dir, named
//! `seed_<session_id>`.

use std::path::Path;

use remote_runner_engine::ErrorCode;
use serde_json::{Value, json};

use crate::clock::{now, today};
use crate::ctx::Ctx;
use crate::error::{LOG_WRITE, NO_MOUNT, Result, SeedError, TMUX};
use crate::metadata::write_metadata;
use crate::remote_dir::remake_bare_dir;
use crate::state::{self, MetaSession, Session};
use crate::tmux_name::{name_tmux_session, tmux_name, unname_tmux_session};

/// `session create`.
pub async fn run(
    ctx: &Ctx,
    machine_id: &str,
    mount_id: &str,
    name: &str,
    timeout: u64,
) -> Result<Value> {
    let mount = state::lock(&ctx.state_dir)?.state.mount(mount_id)?.clone();
    if mount.machine != machine_id {
        return Err(SeedError::new(
            NO_MOUNT,
            "mount_machine_mismatch",
            format!(
                "mount {mount_id} is on machine {}, not {machine_id}; pass --machine {} or \
                 create a mount on {machine_id}",
                mount.machine, mount.machine
            ),
        ));
    }
    let log_dir = Path::new(&mount.local_path)
        .join("artifacts")
        .join("logs")
        .join(name);
    std::fs::create_dir_all(&log_dir).map_err(|e| {
        SeedError::new(
            LOG_WRITE,
            "log_write_failed",
            format!(
                "cannot create {}: {e}; check local disk space and permissions",
                log_dir.display()
            ),
        )
    })?;
    let wired = ctx.wire(machine_id, None)?;
    let create = || {
        wired
            .engine
            .create_session(&wired.machine, Some(&mount.remote_path))
    };
    let rec = match create().await {
        Err(e) if e.code == ErrorCode::RemoteNotFound => {
            // The remote work dir is gone (the mount says `error`): make it again, bare, so
            // that the first exec finds it without `artifacts/` and sends every input, as
            // after any loss of the work dir.
            remake_bare_dir(&wired, &mount.remote_path).await?;
            create().await
        }
        other => other,
    };
    let rec = rec.map_err(|e| {
        SeedError::engine(
            e,
            &format!("creating the tmux session on {machine_id}"),
            (TMUX, "tmux_failed"),
        )
    })?;
    // The spec's `tmux_session` name, as a real tmux session on the user's default tmux
    // server whose pane shows the engine's (tmux_name.rs). An id whose name is taken there
    // (another state dir, or the user's own) is skipped, so names never clash.
    let mut session_id = None;
    for _ in 0..50 {
        let id = {
            let mut locked = state::lock(&ctx.state_dir)?;
            let id = locked.state.next_id("sess", &today());
            locked.save()?;
            id
        };
        match name_tmux_session(&wired, &rec, &id).await {
            Ok(true) => {
                session_id = Some(id);
                break;
            }
            Ok(false) => continue,
            Err(e) => {
                let _ = wired.engine.destroy(&rec.session_id).await;
                return Err(e);
            }
        }
    }
    let Some(session_id) = session_id else {
        let _ = wired.engine.destroy(&rec.session_id).await;
        return Err(SeedError::new(
            TMUX,
            "tmux_failed",
            "no free seed_<session_id> tmux session name on the machine; remove stale ones \
             (`tmux ls`, as the login user)",
        ));
    };
    let mut locked = state::lock(&ctx.state_dir)?;
    let (at, unix) = now();
    let session = Session {
        session_id: session_id.clone(),
        session_name: name.to_string(),
        machine: machine_id.to_string(),
        mount_id: mount_id.to_string(),
        engine_session_id: rec.session_id.clone(),
        created_at: at,
        created_unix: unix,
        timeout_seconds: timeout,
        command_count: 0,
        last_command: None,
        last_exit_code: None,
        last_executed_at: None,
        pending: None,
        error: None,
    };
    let Ok(m) = locked.state.mount_mut(mount_id) else {
        // The mount went away meanwhile: do not leave the shell behind.
        drop(locked);
        let _ = unname_tmux_session(&wired, &rec, &session_id).await;
        let _ = wired.engine.destroy(&rec.session_id).await;
        return Err(state::no_mount(mount_id));
    };
    m.meta_sessions.push(MetaSession {
        session_id: session.session_id.clone(),
        session_name: name.to_string(),
        created_at: session.created_at.clone(),
        commands: Vec::new(),
    });
    let m = m.clone();
    locked.state.sessions.push(session.clone());
    locked.save()?;
    drop(locked);
    write_metadata(&m)?;
    Ok(json!({
        "session_id": session.session_id,
        "session_name": session.session_name,
        "machine": session.machine,
        "mount_id": session.mount_id,
        "local_mount_point": mount.local_path,
        "remote_work_dir": mount.remote_path,
        "status": "ready",
        "tmux_session": tmux_name(&session.session_id),
        "created_at": session.created_at,
    }))
}
