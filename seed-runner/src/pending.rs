//! A command whose end has not been seen (timed out, or its exec died or lost the link): found
//! again on the machine, its log and artifacts fetched, its end recorded.

use std::path::Path;

use remote_runner_engine::ErrorCode;
use remote_runner_engine::engine::host::shell_quote;

use crate::bring_back::{bring_back, bring_back_retried, note};
use crate::ctx::Ctx;
use crate::error::{Result, SeedError, TMUX};
use crate::logs::{exit_code_from_log, fetch_log, local_log_dir, remote_log_dir};
use crate::metadata::write_metadata;
use crate::state::{self, Locked, Mount, Pending, Session};

/// Record the end of a command in the state and metadata.json.
pub(crate) fn record_end(
    locked: &mut Locked,
    session_id: &str,
    pending: &Pending,
    exit_code: Option<i32>,
) -> Result<()> {
    let s = locked.state.session_mut(session_id)?;
    s.pending = None;
    s.error = None;
    s.last_exit_code = exit_code;
    let mount_id = s.mount_id.clone();
    if let Ok(m) = locked.state.mount_mut(&mount_id) {
        if let Some(ms) = m
            .meta_sessions
            .iter_mut()
            .find(|ms| ms.session_id == session_id)
            && let Some(c) = ms.commands.iter_mut().find(|c| c.index == pending.index)
        {
            c.exit_code = exit_code;
        }
        let m = m.clone();
        write_metadata(&m)?;
    }
    locked.save()
}

pub(crate) fn pid_alive(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

/// The engine command a pending exec started, found by its log path in the wrapper text, when
/// the exec ended (killed, link dropped) before it could note the command's id.
pub(crate) fn find_engine_command(
    ctx: &Ctx,
    session: &Session,
    mount: &Mount,
    p: &Pending,
) -> Option<String> {
    let engine = ctx.records().ok()?;
    let rec = engine
        .command_list(&session.engine_session_id)
        .ok()?
        .pop()?;
    let log = format!(
        "__seed_log={}",
        shell_quote(&format!(
            "{}/{}",
            remote_log_dir(mount, &session.session_name),
            p.log_filename
        ))
    );
    rec.command.contains(&log).then_some(rec.command_id)
}

/// If the session has a pending command that has ended (its exec process gone and the engine
/// says so), bring its log and the artifacts back and record its end. One still running has its
/// partial log fetched (and the artifacts too with `products`). Returns whether it is still
/// pending.
pub(crate) async fn refresh_pending(
    ctx: &Ctx,
    session_id: &str,
    products: bool,
    notes: &mut Vec<String>,
) -> Result<bool> {
    let (session, mount) = {
        let locked = state::lock(&ctx.state_dir)?;
        let s = locked.state.session(session_id)?.clone();
        let m = locked.state.mount(&s.mount_id)?.clone();
        (s, m)
    };
    let Some(pending) = session.pending.clone() else {
        return Ok(false);
    };
    if pid_alive(pending.pid) && pending.pid != std::process::id() {
        return Ok(true);
    }
    let wired = ctx.wire(&session.machine, None)?;
    let command_id = pending
        .engine_command_id
        .clone()
        .or_else(|| find_engine_command(ctx, &session, &mount, &pending));
    let engine_exit = match &command_id {
        None => None, // the exec died before the engine had the command
        Some(cid) => {
            let rec = match wired
                .engine
                .command_show(&session.engine_session_id, cid)
                .await
            {
                Ok(rec) => Some(rec),
                // The session is gone with its command: nothing more will come.
                Err(e)
                    if e.code == ErrorCode::SessionLost || e.code == ErrorCode::UnknownSession =>
                {
                    None
                }
                Err(e) => {
                    return Err(SeedError::engine(
                        e,
                        "checking the running command",
                        (TMUX, "tmux_failed"),
                    ));
                }
            };
            let Some(rec) = rec else {
                let mut locked = state::lock(&ctx.state_dir)?;
                if let Ok(s) = locked.state.session(session_id)
                    && s.pending.as_ref().is_some_and(|p| p.index == pending.index)
                {
                    record_end(&mut locked, session_id, &pending, None)?;
                }
                return Ok(false);
            };
            if !rec.status.is_final() {
                let fetched = if products {
                    bring_back(ctx, &wired, &session, &mount, &pending.log_filename, None).await
                } else {
                    fetch_log(&wired, &session, &mount, &pending.log_filename)
                        .await
                        .map(|()| None)
                };
                note(notes, &pending.log_filename, fetched);
                if pending.engine_command_id.is_none() {
                    let mut locked = state::lock(&ctx.state_dir)?;
                    if let Ok(s) = locked.state.session_mut(session_id)
                        && let Some(p) = s.pending.as_mut().filter(|p| p.index == pending.index)
                    {
                        p.engine_command_id = Some(cid.clone());
                        locked.save()?;
                    }
                }
                return Ok(true);
            }
            Some(rec.exit_code)
        }
    };
    // It ended: bring its log and the artifacts back (best effort: a failure here must not
    // leave the session busy for ever), and record its exit code.
    let exit_code = match engine_exit {
        None => None,
        Some(engine_code) => {
            let fetched =
                bring_back_retried(ctx, &wired, &session, &mount, &pending.log_filename, None)
                    .await;
            let fetched_log = fetched.is_ok();
            note(notes, &pending.log_filename, fetched);
            if fetched_log {
                exit_code_from_log(
                    &local_log_dir(&mount, &session.session_name).join(&pending.log_filename),
                )
                .or(engine_code)
            } else {
                engine_code
            }
        }
    };
    let mut locked = state::lock(&ctx.state_dir)?;
    let still = locked
        .state
        .session(session_id)?
        .pending
        .as_ref()
        .is_some_and(|p| p.index == pending.index);
    if still {
        record_end(&mut locked, session_id, &pending, exit_code)?;
    }
    Ok(false)
}

pub(crate) async fn refresh_pending_all(ctx: &Ctx) {
    let ids: Vec<String> = match state::lock(&ctx.state_dir) {
        Ok(l) => l
            .state
            .sessions
            .iter()
            .filter(|s| s.pending.is_some())
            .map(|s| s.session_id.clone())
            .collect(),
        Err(_) => return,
    };
    for id in ids {
        let _ = refresh_pending(ctx, &id, false, &mut Vec::new()).await;
    }
}
