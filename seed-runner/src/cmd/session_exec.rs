//! `session exec`: sync up, run the wrapper in the session shell, bring the log and artifacts
//! back.

use std::collections::BTreeSet;
use std::path::Path;
use std::time::{Duration, Instant};

use remote_runner_engine::ErrorCode;
use remote_runner_engine::engine::host::Host;
use remote_runner_engine::engine::{CommandStatus, ExecRequest};
use serde_json::{Value, json};

use crate::bring_back::bring_back_retried;
use crate::clock::now;
use crate::ctx::{Ctx, Wired};
use crate::error::{Result, SSH, SYNC, SeedError, TIMEOUT, TMUX, busy, destroyed};
use crate::liveness::local_status;
use crate::logs::{fetch_log, local_log_dir, remote_log_dir};
use crate::metadata::write_metadata;
use crate::pending::{find_engine_command, record_end, refresh_pending};
use crate::remote_dir::remake_remote_dir;
use crate::state::{self, MetaCommand, Mount, Pending, Session};
use crate::tmux_name::tmux_name;
use crate::{sync, tree, wrapper};

/// `session exec`.
pub async fn run(ctx: &Ctx, session_id: &str, command: &str, timeout: u64) -> Result<Value> {
    {
        let locked = state::lock(&ctx.state_dir)?;
        if locked.state.was_destroyed(session_id) {
            return Err(destroyed(session_id));
        }
        locked.state.session(session_id)?;
    }
    if refresh_pending(ctx, session_id, false, &mut Vec::new()).await? {
        return Err(busy(session_id));
    }
    // Claim the session and a log number.
    let mut locked = state::lock(&ctx.state_dir)?;
    let session = locked.state.session(session_id)?.clone();
    if session.pending.is_some() {
        return Err(busy(session_id));
    }
    match local_status(ctx, &session) {
        "timeout" => {
            return Err(SeedError::new(
                TIMEOUT,
                "session_timeout",
                format!(
                    "session {session_id} passed its timeout of {} s; destroy it and create a \
                     new one (with a larger --timeout if needed)",
                    session.timeout_seconds
                ),
            ));
        }
        "error" if session.error.is_none() => {
            return Err(SeedError::new(
                TMUX,
                "session_error",
                format!(
                    "the tmux session behind {session_id} is gone; destroy it and create a new \
                     one"
                ),
            ));
        }
        _ => {}
    }
    let (executed_at, _) = now();
    let mount = locked.state.mount_mut(&session.mount_id)?;
    // A number whose log is already here (a mount re-created on the same directory starts
    // counting again) is passed over: a command's log is never overwritten by a later one.
    let logs_here = local_log_dir(mount, &session.session_name);
    let counter = mount
        .log_counters
        .entry(session.session_name.clone())
        .or_insert(0);
    *counter += 1;
    while logs_here.join(format!("cmd_{:03}.log", *counter)).exists() {
        *counter += 1;
    }
    let index = *counter;
    let log_filename = format!("cmd_{index:03}.log");
    if let Some(ms) = mount
        .meta_sessions
        .iter_mut()
        .find(|ms| ms.session_id == session_id)
    {
        ms.commands.push(MetaCommand {
            index,
            cmd: command.to_string(),
            log_file: log_filename.clone(),
            exit_code: None,
            executed_at: executed_at.clone(),
        });
    }
    let mount = mount.clone();
    let pending = Pending {
        index,
        command: command.to_string(),
        log_filename: log_filename.clone(),
        executed_at: executed_at.clone(),
        pid: std::process::id(),
        engine_command_id: None,
    };
    {
        let s = locked.state.session_mut(session_id)?;
        s.pending = Some(pending.clone());
        s.command_count += 1;
        s.last_command = Some(command.to_string());
        s.last_executed_at = Some(executed_at.clone());
        s.last_exit_code = None;
    }
    locked.save()?;
    drop(locked);
    let _ = write_metadata(&mount);

    let outcome = run_exec(ctx, &session, &mount, &pending, timeout).await;
    let mut locked = state::lock(&ctx.state_dir)?;
    match outcome {
        Ok(Ran::Ended {
            exit_code,
            duration_ms,
            warning,
        }) => {
            record_end(&mut locked, session_id, &pending, Some(exit_code))?;
            let remote_log = format!(
                "{}/{log_filename}",
                remote_log_dir(&mount, &session.session_name)
            );
            let mut out = json!({
                "session_id": session_id,
                "session_name": session.session_name,
                "command": command,
                "exit_code": exit_code,
                "log_file_local": local_log_dir(&mount, &session.session_name)
                    .join(&log_filename)
                    .to_string_lossy(),
                "log_file_remote": remote_log,
                "log_filename": log_filename,
                "executed_at": executed_at,
                "duration_ms": duration_ms,
            });
            if let Some(w) = warning {
                out["warning"] = json!(w);
            }
            Ok(out)
        }
        Ok(Ran::TimedOut { engine_command_id }) => {
            if let Ok(s) = locked.state.session_mut(session_id)
                && let Some(p) = s.pending.as_mut()
            {
                p.engine_command_id = Some(engine_command_id);
            }
            locked.save()?;
            Err(SeedError::new(
                TIMEOUT,
                "command_timeout",
                format!(
                    "the command did not end within {timeout} s; it keeps running and session \
                     {session_id} stays busy until it ends. Its partial log is in \
                     {log_filename} (refreshed by `session status`; the rest comes back once \
                     it ends, on the next `session status`, `session exec` or `session \
                     destroy`). A command that waits for input waits for ever: type it in \
                     `tmux attach -t {tmux}`, or destroy the session. Pass a larger \
                     --timeout next time",
                    tmux = tmux_name(session_id),
                ),
            ))
        }
        Err((e, Failed::Unknown(command_id))) => {
            // The command may run, or have ended with its log not fetched: the session stays
            // busy with it, and the next call that reaches the machine finishes the job.
            if let Ok(s) = locked.state.session_mut(session_id) {
                if let Some(p) = s.pending.as_mut() {
                    p.engine_command_id = command_id;
                }
                if e.code == SSH {
                    s.error = Some(e.message.clone());
                }
            }
            locked.save()?;
            Err(SeedError::new(
                e.code,
                e.name,
                format!(
                    "{}; the command's log and exit code come back on the next `session \
                     status`, `session exec` or `session destroy` that reaches the machine",
                    e.message
                ),
            ))
        }
        Err((e, failed)) => {
            // Nothing runs now: free the session. A command that ended is recorded with its
            // exit code; one that never started leaves no trace (its log number is given back
            // when no other command took the next one).
            if let Failed::Ended(exit_code) = failed {
                record_end(&mut locked, session_id, &pending, exit_code)?;
                return Err(e);
            }
            if let Ok(s) = locked.state.session_mut(session_id) {
                s.pending = None;
                s.command_count = s.command_count.saturating_sub(1);
                s.last_command = session.last_command.clone();
                s.last_exit_code = session.last_exit_code;
                s.last_executed_at = session.last_executed_at.clone();
            }
            if let Ok(m) = locked.state.mount_mut(&session.mount_id) {
                if let Some(n) = m.log_counters.get_mut(&session.session_name)
                    && *n == index
                {
                    *n -= 1;
                }
                if let Some(ms) = m
                    .meta_sessions
                    .iter_mut()
                    .find(|ms| ms.session_id == session_id)
                {
                    ms.commands.retain(|c| c.index != index);
                }
                let m = m.clone();
                let _ = write_metadata(&m);
            }
            locked.save()?;
            Err(e)
        }
    }
}

enum Ran {
    Ended {
        exit_code: i32,
        duration_ms: u64,
        /// Artifacts that were not fetched.
        warning: Option<String>,
    },
    TimedOut {
        engine_command_id: String,
    },
}

/// How far a failed exec got.
enum Failed {
    /// Nothing ran.
    NotStarted,
    /// The command ended (with this exit code, when it has one); the session is free.
    Ended(Option<i32>),
    /// The command may run or have ended unseen (the link dropped): its engine command, when
    /// known.
    Unknown(Option<String>),
}

/// Send the local changes up. A remote work dir that is gone (or was remade by someone else:
/// no `artifacts/` in it) is made again and gets every file.
async fn sync_up(
    ctx: &Ctx,
    wired: &Wired,
    host: &Host,
    session: &Session,
    mount: &Mount,
    remake: bool,
) -> Result<BTreeSet<String>> {
    let (_lock, mut manifest) = state::lock_manifest(&ctx.state_dir, &mount.mount_id)?;
    if remake {
        remake_remote_dir(host, mount).await?;
        manifest = state::Manifest::default();
    }
    let local = Path::new(&mount.local_path);
    let up = async {
        tree::upload(host, local, &mount.remote_path, &mut manifest).await?;
        sync::upload(
            &wired.engine,
            &session.engine_session_id,
            host,
            local,
            &mount.remote_path,
            &mut manifest,
        )
        .await
    }
    .await;
    state::save_manifest(&ctx.state_dir, &mount.mount_id, &manifest)?;
    up.map(|stats| stats.uploaded.into_iter().collect())
}

fn is_link(code: ErrorCode) -> bool {
    matches!(
        code,
        ErrorCode::ConnectionLost | ErrorCode::ConnectionFailed | ErrorCode::Timeout
    )
}

/// Sync up, run, bring back. The error says how far it got.
async fn run_exec(
    ctx: &Ctx,
    session: &Session,
    mount: &Mount,
    pending: &Pending,
    timeout: u64,
) -> std::result::Result<Ran, (SeedError, Failed)> {
    let not_started = |e: SeedError| (e, Failed::NotStarted);
    let wired = ctx.wire(&session.machine, None).map_err(not_started)?;
    let host = wired.host().await.map_err(not_started)?;
    let mut sent = match sync_up(ctx, &wired, &host, session, mount, false).await {
        Ok(sent) => sent,
        // A sync that fails because the work dir is gone: make it again, send everything.
        Err(e) => match host.stat(&mount.remote_path).await {
            Ok(None) => sync_up(ctx, &wired, &host, session, mount, true)
                .await
                .map_err(not_started)?,
            _ => return Err(not_started(e)),
        },
    };
    let log_dir = remote_log_dir(mount, &session.session_name);
    let script = wrapper::script(
        &pending.command,
        &mount.remote_path,
        &log_dir,
        &format!("{log_dir}/{}", pending.log_filename),
    );
    let started = Instant::now();
    let mut remade = false;
    let rec = loop {
        let req = ExecRequest::wait().with_timeout(Duration::from_secs(timeout.max(1)));
        let rec = match wired
            .engine
            .exec(&session.engine_session_id, &script, req)
            .await
        {
            Ok(rec) => rec,
            Err(e) if e.code == ErrorCode::Busy => {
                return Err((busy(&session.session_id), Failed::NotStarted));
            }
            Err(e) if is_link(e.code) => {
                let cid = find_engine_command(ctx, session, mount, pending);
                return Err((
                    SeedError::engine(e, "running the command", (SSH, "ssh_connection_failed")),
                    Failed::Unknown(cid),
                ));
            }
            Err(e) => {
                return Err((
                    SeedError::engine(e, "running the command", (TMUX, "exec_failed")),
                    Failed::NotStarted,
                ));
            }
        };
        let missing = rec.status.is_final()
            && rec.exit_code == Some(wrapper::NOT_RUN)
            && rec.stdout.contains(wrapper::WORKDIR_MISSING);
        if !missing {
            break rec;
        }
        if remade {
            return Err((
                SeedError::new(
                    SYNC,
                    "remote_dir_missing",
                    format!(
                        "the remote work dir {} keeps disappearing; check what removes it",
                        mount.remote_path
                    ),
                ),
                Failed::NotStarted,
            ));
        }
        // The work dir is gone (nothing ran): make it again with every file, then run.
        remade = true;
        sent = sync_up(ctx, &wired, &host, session, mount, true)
            .await
            .map_err(not_started)?;
    };
    if !rec.status.is_final() {
        // The partial log now (the agent's first look after a timeout).
        let _ = fetch_log(&wired, session, mount, &pending.log_filename).await;
        return Ok(Ran::TimedOut {
            engine_command_id: rec.command_id,
        });
    }
    let Some(exit_code) = rec.exit_code.filter(|_| rec.status != CommandStatus::Lost) else {
        return Err((
            SeedError::new(
                TMUX,
                "session_error",
                format!(
                    "the command ended the session shell ({}); destroy the session and create a \
                     new one",
                    rec.error.unwrap_or_else(|| rec.status.as_str().to_string())
                ),
            ),
            Failed::Ended(rec.exit_code),
        ));
    };
    let duration_ms = rec
        .duration_ms
        .unwrap_or_else(|| started.elapsed().as_millis() as u64);
    let warning = match bring_back_retried(
        ctx,
        &wired,
        session,
        mount,
        &pending.log_filename,
        Some(&sent),
    )
    .await
    {
        Ok(warning) => warning,
        Err(e) => {
            let failed = if e.code == SSH {
                Failed::Unknown(Some(rec.command_id.clone()))
            } else {
                Failed::Ended(Some(exit_code))
            };
            return Err((e, failed));
        }
    };
    Ok(Ran::Ended {
        exit_code,
        duration_ms,
        warning,
    })
}
