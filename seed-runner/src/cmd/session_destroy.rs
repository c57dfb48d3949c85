//! `session destroy`: the tmux session goes; logs stay; the mount stays.

use remote_runner_engine::ErrorCode;
use serde_json::{Value, json};

use crate::clock::now;
use crate::ctx::Ctx;
use crate::error::{Result, SeedError, TMUX, destroyed};
use crate::logs::local_log_dir;
use crate::pending::refresh_pending;
use crate::state;
use crate::tmux_name::{hang_up, unname_tmux_session};

/// `session destroy`: the tmux session goes; logs stay; the mount stays.
pub async fn run(ctx: &Ctx, session_id: &str) -> Result<Value> {
    let (session, mount) = {
        let locked = state::lock(&ctx.state_dir)?;
        if locked.state.was_destroyed(session_id) {
            return Err(destroyed(session_id));
        }
        let s = locked.state.session(session_id)?.clone();
        let m = locked.state.mount(&s.mount_id).ok().cloned();
        (s, m)
    };
    // A command that timed out: its log and products (and its exit code, if it ended) come
    // back before its shell goes; what could not is named in the warning (a `mount destroy
    // --cleanup` next removes the remote copy).
    let mut notes = Vec::new();
    if session.pending.is_some()
        && let Err(e) = refresh_pending(ctx, session_id, true, &mut notes).await
    {
        notes.push(format!(
            "the pending command's log and artifacts could not be fetched: error {}: {}",
            e.code, e.message
        ));
    }
    let gone = async {
        let wired = ctx.wire(&session.machine, None)?;
        let terminal = match wired.engine.session_show(&session.engine_session_id) {
            Ok(rec) => unname_tmux_session(&wired, &rec, session_id).await,
            Err(_) => None,
        };
        let ended = match wired.engine.destroy(&session.engine_session_id).await {
            Ok(_) => Ok(()),
            Err(e) if e.code == ErrorCode::UnknownSession => Ok(()),
            Err(e) => Err(e),
        };
        if ended.is_ok()
            && let Some(sid) = terminal
        {
            hang_up(&wired, sid).await;
        }
        match ended {
            Ok(()) => Ok(()),
            Err(e) => {
                // Unreachable machine: the session is marked destroyed here all the same.
                let _ = wired
                    .engine
                    .destroy_forced(&session.engine_session_id)
                    .await;
                Err(SeedError::engine(
                    e,
                    "destroying the tmux session (its shell may still run there)",
                    (TMUX, "tmux_failed"),
                ))
            }
        }
    }
    .await;
    if let Err(e) = gone {
        notes.push(format!("error {}: {}", e.code, e.message));
    }
    let warning = (!notes.is_empty()).then(|| notes.join("; "));
    let mut locked = state::lock(&ctx.state_dir)?;
    locked.state.sessions.retain(|s| s.session_id != session_id);
    locked.state.destroyed_sessions.push(session_id.to_string());
    locked.save()?;
    let (at, _) = now();
    let logs = mount
        .map(|m| {
            local_log_dir(&m, &session.session_name)
                .to_string_lossy()
                .into_owned()
        })
        .unwrap_or_default();
    let mut out = json!({
        "session_id": session_id,
        "session_name": session.session_name,
        "status": "destroyed",
        "destroyed_at": at,
        "logs_preserved": true,
        "logs_location": logs,
    });
    if let Some(w) = warning {
        out["warning"] = json!(w);
    }
    Ok(out)
}
