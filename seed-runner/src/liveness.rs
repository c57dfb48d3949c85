//! Whether a session lives: from the records, and live on its machine.

use remote_runner_engine::ErrorCode;
use remote_runner_engine::engine::SessionStatus;

use crate::clock::now;
use crate::ctx::{Ctx, Wired};
use crate::state::Session;
use crate::tmux_name::unname_tmux_session;

/// The session's status from local records: `error` when its engine session is gone or the
/// machine could not be reached again after a drop, `busy` while a command has not been seen
/// to end, `timeout` past its own timeout.
pub(crate) fn local_status(ctx: &Ctx, s: &Session) -> &'static str {
    match ctx.records().map(|e| e.session_show(&s.engine_session_id)) {
        Ok(Ok(rec)) if rec.status != SessionStatus::Active => return "error",
        Ok(Err(e)) if e.code == ErrorCode::UnknownSession => return "error",
        _ => {}
    }
    if s.error.is_some() {
        return "error";
    }
    if s.pending.is_some() {
        return "busy";
    }
    let (_, now) = now();
    if now.saturating_sub(s.created_unix) as u64 > s.timeout_seconds {
        return "timeout";
    }
    "active"
}

/// Whether the session's tmux session lives (the engine marks it lost when not); `Some(why)`
/// when the machine cannot be reached. `wired` keeps one connection per machine.
pub(crate) async fn check_alive(
    ctx: &Ctx,
    s: &Session,
    wired: &mut std::collections::BTreeMap<String, Wired>,
) -> Option<String> {
    if !wired.contains_key(&s.machine) {
        match ctx.wire(&s.machine, None) {
            Ok(w) => {
                wired.insert(s.machine.clone(), w);
            }
            Err(e) => return Some(e.message),
        }
    }
    let w = wired.get(&s.machine)?;
    match w.engine.check_alive(&s.engine_session_id).await {
        Ok(true) => None,
        Ok(false) => {
            // The engine's tmux session is gone; the `seed_` session ends with it, unless the
            // user's tmux keeps dead panes (remain-on-exit): end it too.
            if let Ok(rec) = w.engine.session_show(&s.engine_session_id) {
                let _ = unname_tmux_session(w, &rec, &s.session_id).await;
            }
            None
        }
        Err(e) if e.code == ErrorCode::SessionLost || e.code == ErrorCode::UnknownSession => None,
        Err(e) => Some(e.message),
    }
}
