//! The spec's `tmux_session`, `seed_<session_id>`, as a real tmux session on the login user's
//! default tmux server, where agents and people look for it (`tmux has-session -t
//! =seed_<id>`, `tmux attach -t seed_<id>`, `tmux ls`; no `-L`).
//!
//! The engine's own session stays on the engine's socket, whose server runs without the user's
//! tmux.conf (a user's options such as `destroy-unattached` or hooks would break it). The
//! `seed_` session's pane is a tmux client of it (`tmux_attach.sh`): attaching to `seed_<id>`
//! shows the pane the commands run in, and what is typed there reaches them. That client does
//! not resize the engine's pane, and when the engine's session ends the `seed_` session ends
//! with it.

use remote_runner_engine::engine::SessionRecord;
use remote_runner_engine::engine::host::shell_quote;

use crate::ctx::Wired;
use crate::error::{Result, SeedError, TMUX};

/// Makes the `seed_` session (POSIX sh).
pub const NAME_SH: &str = include_str!("tmux_name.sh");
/// Removes it and names the engine pane's terminal session (POSIX sh).
pub const UNNAME_SH: &str = include_str!("tmux_unname.sh");
/// The `seed_` session's pane: a client of the engine's session (POSIX sh).
pub const ATTACH_SH: &str = include_str!("tmux_attach.sh");
/// Hangs up a closed pane's terminal session (POSIX sh).
pub const HANG_UP_SH: &str = include_str!("hang_up.sh");

/// The tmux session `seed_<session_id>`.
pub(crate) fn tmux_name(session_id: &str) -> String {
    format!("seed_{session_id}")
}

/// The parameters both scripts start with.
fn params(rec: &SessionRecord, session_id: &str) -> String {
    format!(
        "T={}\nS={}\nE={}\nN={}\n",
        shell_quote(&rec.tmux_path),
        shell_quote(&rec.tmux_socket),
        shell_quote(&rec.tmux_session),
        shell_quote(&tmux_name(session_id)),
    )
}

/// `Ok(false)`: the name is taken. Not on a Slurm machine: the session's tmux server runs on
/// a compute node that this connection to the login node does not reach.
pub(crate) async fn name_tmux_session(
    wired: &Wired,
    rec: &SessionRecord,
    session_id: &str,
) -> Result<bool> {
    if rec.slurm_job_id.is_some() {
        return Ok(true);
    }
    let host = wired.host().await?;
    let script = format!(
        "{}A={}\n{NAME_SH}",
        params(rec, session_id),
        shell_quote(ATTACH_SH)
    );
    let out = host
        .run(&script, &[])
        .await
        .map_err(|e| SeedError::engine(e, "naming the tmux session", (TMUX, "tmux_failed")))?;
    match out.status.code() {
        Some(0) => Ok(true),
        Some(3) => Ok(false),
        _ => Err(SeedError::new(
            TMUX,
            "tmux_failed",
            format!(
                "cannot create tmux session {}: {}; check tmux on the remote machine",
                tmux_name(session_id),
                out.stderr_lossy().trim()
            ),
        )),
    }
}

/// Remove the `seed_<id>` name. Returns the pid of the engine pane's first process: the id of
/// the terminal session its commands (and their `&` jobs) run in.
pub(crate) async fn unname_tmux_session(
    wired: &Wired,
    rec: &SessionRecord,
    session_id: &str,
) -> Option<u32> {
    if rec.slurm_job_id.is_some() {
        return None;
    }
    let host = wired.host().await.ok()?;
    let script = format!("{}{UNNAME_SH}", params(rec, session_id));
    let out = host.run(&script, &[]).await.ok()?;
    out.stdout_lossy().trim().parse().ok()
}

/// After the tmux session is gone: hang up what is left of its terminal session. Jobs that
/// commands started with `&` run in the wrapper's subshell, outside the shell's job table, so
/// the shell's own hang-up does not reach them; closing a tmux pane ends them, and so does this
/// (a job that ignores SIGHUP, such as one under `nohup`, goes on, as it would there).
pub(crate) async fn hang_up(wired: &Wired, terminal_session: u32) {
    if let Ok(host) = wired.host().await {
        let script = format!("sid={terminal_session}\n{HANG_UP_SH}");
        let _ = host.run(&script, &[]).await;
    }
}
