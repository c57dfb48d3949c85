//! `session status`: a live look at the machine (a tmux session that died is `error` now, not
//! at the next exec).

use serde_json::{Value, json};

use crate::clock::now;
use crate::ctx::Ctx;
use crate::error::{Result, SSH, STATE};
use crate::liveness::{check_alive, local_status};
use crate::pending::refresh_pending;
use crate::state;

/// `session status`: a live look at the machine (a tmux session that died is `error` now, not
/// at the next exec).
pub async fn run(ctx: &Ctx, session_id: &str) -> Result<Value> {
    let unreachable = match refresh_pending(ctx, session_id, false, &mut Vec::new()).await {
        Ok(true) => None,
        Ok(false) => {
            let s = state::lock(&ctx.state_dir)?
                .state
                .session(session_id)?
                .clone();
            check_alive(ctx, &s, &mut Default::default()).await
        }
        Err(e) if e.code == SSH => Some(e.message),
        Err(e) if e.code == STATE || e.code == crate::error::NO_SESSION => return Err(e),
        Err(_) => None,
    };
    let locked = state::lock(&ctx.state_dir)?;
    let s = locked.state.session(session_id)?;
    let m = locked.state.mount(&s.mount_id)?;
    let (_, now) = now();
    let status = if unreachable.is_some() {
        "error"
    } else {
        local_status(ctx, s)
    };
    Ok(json!({
        "session_id": s.session_id,
        "session_name": s.session_name,
        "status": status,
        "machine": s.machine,
        "mount_id": s.mount_id,
        "local_mount_point": m.local_path,
        "remote_work_dir": m.remote_path,
        "created_at": s.created_at,
        "last_command": s.last_command,
        "last_exit_code": s.last_exit_code,
        "last_executed_at": s.last_executed_at,
        "command_count": s.command_count,
        "elapsed_seconds": now.saturating_sub(s.created_unix),
        "timeout_seconds": s.timeout_seconds,
    }))
}
