//! `seed-runner status`: every mount and session, the sessions checked live.

use serde_json::{Value, json};

use crate::ctx::Ctx;
use crate::error::Result;
use crate::liveness::{check_alive, local_status};
use crate::metadata::{mount_json, session_count};
use crate::pending::refresh_pending_all;
use crate::state::{self, Session};

/// `seed-runner status`.
pub async fn run(ctx: &Ctx) -> Result<Value> {
    refresh_pending_all(ctx).await;
    let live: Vec<Session> = state::lock(&ctx.state_dir)?
        .state
        .sessions
        .iter()
        .filter(|s| s.pending.is_none())
        .cloned()
        .collect();
    let mut wired = Default::default();
    let mut unreachable = std::collections::BTreeSet::new();
    for s in &live {
        if check_alive(ctx, s, &mut wired).await.is_some() {
            unreachable.insert(s.session_id.clone());
        }
    }
    let locked = state::lock(&ctx.state_dir)?;
    let st = &locked.state;
    let mounts: Vec<Value> = st
        .mounts
        .iter()
        .map(|m| mount_json(m, session_count(st, &m.mount_id)))
        .collect();
    let sessions: Vec<Value> = st
        .sessions
        .iter()
        .map(|s| {
            json!({
                "session_id": s.session_id,
                "session_name": s.session_name,
                "machine": s.machine,
                "mount_id": s.mount_id,
                "status": if unreachable.contains(&s.session_id) {
                    "error"
                } else {
                    local_status(ctx, s)
                },
                "busy": s.pending.is_some(),
                "command_count": s.command_count,
                "created_at": s.created_at,
            })
        })
        .collect();
    Ok(json!({
        "mounts": mounts,
        "sessions": sessions,
        "summary": {
            "mount_count": st.mounts.len(),
            "session_count": st.sessions.len(),
        },
    }))
}
