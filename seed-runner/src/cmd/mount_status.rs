//! `mount status`: the mount, its remote work dir checked on the machine.

use serde_json::{Value, json};

use crate::ctx::Ctx;
use crate::error::Result;
use crate::metadata::{mount_json, session_count};
use crate::remote_dir::check_remote_dir;
use crate::state;

/// `mount status`: `error` when the machine cannot be reached or the remote work dir is gone
/// (the next `session exec` makes it again).
pub async fn run(ctx: &Ctx, mount_id: &str) -> Result<Value> {
    let (m, sessions) = {
        let locked = state::lock(&ctx.state_dir)?;
        let m = locked.state.mount(mount_id)?.clone();
        (m, session_count(&locked.state, mount_id))
    };
    let mut out = mount_json(&m, sessions);
    if let Err(e) = check_remote_dir(ctx, &m).await {
        out["status"] = json!("error");
        out["status_message"] = json!(e.message);
    }
    Ok(out)
}
