//! The spec's `tmux_session`, `seed_<session_id>`, as a real tmux session (see
//! docs/seed-runner.md).

use remote_runner_engine::engine::SessionRecord;
use remote_runner_engine::engine::host::shell_quote;

use crate::ctx::Wired;
use crate::error::{Result, SeedError, TMUX};

/// The tmux session `seed_<session_id>`, grouped with the engine's session on its socket: the
/// same pane, so `tmux -L <socket> attach -t seed_<id>` shows the commands as they run.
pub(crate) fn tmux_name(session_id: &str) -> String {
    format!("seed_{session_id}")
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
        "{tmux} -L {sock} new-session -d -s {name} -t {target}",
        tmux = shell_quote(&rec.tmux_path),
        sock = shell_quote(&rec.tmux_socket),
        name = shell_quote(&tmux_name(session_id)),
        target = shell_quote(&format!("={}", rec.tmux_session)),
    );
    let out = host
        .run(&script, &[])
        .await
        .map_err(|e| SeedError::engine(e, "naming the tmux session", (TMUX, "tmux_failed")))?;
    if !out.status.success() {
        if out.stderr_lossy().contains("duplicate session") {
            return Ok(false);
        }
        return Err(SeedError::new(
            TMUX,
            "tmux_failed",
            format!(
                "cannot create tmux session {}: {}; check tmux on the remote machine",
                tmux_name(session_id),
                out.stderr_lossy().trim()
            ),
        ));
    }
    Ok(true)
}

/// Remove the `seed_<id>` name (before the engine ends its session: a grouped session would
/// keep the pane alive). Returns the pid of the pane's first process: the id of the terminal
/// session its commands (and their `&` jobs) run in.
pub(crate) async fn unname_tmux_session(
    wired: &Wired,
    rec: &SessionRecord,
    session_id: &str,
) -> Option<u32> {
    if rec.slurm_job_id.is_some() {
        return None;
    }
    let host = wired.host().await.ok()?;
    // Only the name in this session's group: once the session is gone, another state dir may
    // have taken the same name for its own session.
    let script = format!(
        "{tmux} -L {sock} list-panes -t {engine} -F '#{{pane_pid}}' 2>/dev/null | head -n 1; \
         if {tmux} -L {sock} list-sessions -F '#{{session_name}} #{{session_group}}' \
         2>/dev/null | grep -qxF -- {line}; then {tmux} -L {sock} kill-session -t {name}; \
         fi; true",
        tmux = shell_quote(&rec.tmux_path),
        sock = shell_quote(&rec.tmux_socket),
        engine = shell_quote(&format!("={}", rec.tmux_session)),
        line = shell_quote(&format!("{} {}", tmux_name(session_id), rec.tmux_session)),
        name = shell_quote(&format!("={}", tmux_name(session_id))),
    );
    let out = host.run(&script, &[]).await.ok()?;
    out.stdout_lossy().trim().parse().ok()
}

/// After the tmux session is gone: hang up what is left of its terminal session. Jobs that
/// commands started with `&` run in the wrapper's subshell, outside the shell's job table, so
/// the shell's own hang-up does not reach them; closing a tmux pane ends them, and so does this
/// (a job that ignores SIGHUP, such as one under `nohup`, goes on, as it would there).
pub(crate) async fn hang_up(wired: &Wired, terminal_session: u32) {
    if let Ok(host) = wired.host().await {
        let script = format!("pkill -HUP -s {terminal_session} -u \"$(id -u)\" 2>/dev/null; true");
        let _ = host.run(&script, &[]).await;
    }
}
