//! The remote session behind the protocol's: making one (bound to the BotMux session that asked
//! for it, see [`super::binding`]), putting it in place at a generation, checking it, retiring
//! an old one, and rebuilding a lost one. Used by `start`, `resume`, `turn` and `reattach`.

use remote_runner_protocol::{Event, State};
use serde_json::{Map, Value, json};
use tokio_util::sync::CancellationToken;

use super::binding;
use super::failure::{self, OldSession};
use super::shared::{SessionRef, Shared};
use remote_runner_engine::error::{Error, ErrorCode, Result};

/// `remoteSessionId` for a session: names the machine and the tmux session.
fn remote_session_id(session: &SessionRef) -> String {
    format!("{}/{}", session.machine_id, session.session_id)
}

fn provider_state(session: &SessionRef, cwd: &str) -> Map<String, Value> {
    let Value::Object(map) = json!({
        "machineId": session.machine_id,
        "sessionId": session.session_id,
        "cwd": cwd,
        "backend": "tmux",
    }) else {
        unreachable!("json! of an object literal is an object")
    };
    map
}

/// Create a new remote session and the state for it at `generation`, and bind it to the BotMux
/// session `owner` (see [`binding`]).
pub async fn create(
    shared: &Shared,
    owner: &str,
    host_cwd: &str,
    generation: u64,
    agent_thread_id: Option<String>,
) -> Result<(SessionRef, State)> {
    let machine = shared.engine.machine(&shared.config.machine_id)?;
    let cwd = shared.config.remote_cwd_for(host_cwd, &machine);
    let rec = shared.engine.create_session(&machine, Some(&cwd)).await?;
    let session = SessionRef {
        session_id: rec.session_id.clone(),
        machine_id: rec.machine_id.clone(),
    };
    if let Err(e) = binding::record(&shared.config.state_dir, &session, owner) {
        // Unbound, it could never be resumed: do not leave it running.
        if let Err(d) = shared.engine.destroy(&session.session_id).await {
            tracing::warn!(session = %session.session_id, "destroying an unbound session failed: {d}");
        }
        return Err(e);
    }
    let (cols, rows) = (shared.config.terminal_cols, shared.config.terminal_rows);
    if let Err(e) = shared.engine.resize(&rec.session_id, cols, rows).await {
        tracing::warn!("cannot set the terminal to {cols}x{rows}: {e}");
    }
    let mut state = State::new(shared.config.provider_name.clone(), generation)
        .with_remote_session_id(remote_session_id(&session))
        .with_provider_state(provider_state(&session, &rec.cwd));
    state.agent_thread_id = agent_thread_id;
    Ok((session, state))
}

/// Create a session in its own task, so that a `cancel` can end the `start`/`resume` at once
/// and still destroy what the create makes (see [`super::shared::Inner::orphan`]).
pub async fn create_unless_cancelled(
    shared: &Shared,
    owner: &str,
    host_cwd: &str,
    generation: u64,
    agent_thread_id: Option<String>,
    token: &CancellationToken,
) -> Result<(SessionRef, State)> {
    let (s, owner, cwd) = (shared.clone(), owner.to_string(), host_cwd.to_string());
    let mut create =
        tokio::spawn(async move { create(&s, &owner, &cwd, generation, agent_thread_id).await });
    let finished = tokio::select! {
        biased;
        _ = token.cancelled() => None,
        joined = &mut create => Some(joined),
    };
    match finished {
        None => {
            shared.lock().orphan = Some(create);
            Err(failure::cut_by_cancel())
        }
        Some(Ok(result)) => result,
        Some(Err(e)) => Err(Error::internal(format!(
            "the session create task failed: {e}"
        ))),
    }
}

/// Puts a session in place at `state`; `raised` when its generation is new to the host (a
/// resume's new compute), whose screens wait for the host's next command.
pub fn install(shared: &Shared, session: SessionRef, state: State, raised: bool) {
    let mut inner = shared.lock();
    inner.session = Some(session);
    if raised {
        inner.lifecycle.ready_raised(state.generation);
    } else {
        inner.lifecycle.ready(state.generation);
    }
    inner.state = Some(state);
    inner.session_lost = false;
}

/// Whether the session is alive (an error counts as not: it cannot be adopted).
pub async fn alive(shared: &Shared, session: &SessionRef) -> bool {
    match shared.engine.check_alive(&session.session_id).await {
        Ok(alive) => alive,
        Err(e) => {
            tracing::info!(session = %session.session_id, "cannot adopt session: {e}");
            false
        }
    }
}

/// Rebuild: the old compute was cancelled; make sure nothing of it keeps running. Destroys only
/// a session it could reach: an unreachable one is reported as not destroyed, not marked so.
pub async fn retire(shared: &Shared, session: &SessionRef) -> OldSession {
    let id = session.session_id.clone();
    match shared.engine.check_alive(&id).await {
        Ok(false) => OldSession::AlreadyGone(id),
        Ok(true) => match shared.engine.destroy(&id).await {
            Ok(_) => OldSession::Destroyed(id),
            Err(e) => {
                tracing::warn!(session = %id, "old session not destroyed: {e}");
                OldSession::NotDestroyed(id, e.message)
            }
        },
        Err(e) if e.code.is_session_lost() || e.code == ErrorCode::UnknownSession => {
            OldSession::AlreadyGone(id)
        }
        Err(e) => {
            tracing::warn!(session = %id, "old session unreachable, not destroyed: {e}");
            OldSession::NotDestroyed(id, e.message)
        }
    }
}

/// A session adopted from an earlier provider process: settle the chat calls it left waiting
/// (see [`crate::chat::sweep`]). Best effort: a call not settled here times out on its own.
pub async fn sweep_chat(shared: &Shared, session: &SessionRef) {
    let swept = async {
        let rec = shared.engine.session_show(&session.session_id)?;
        let host = shared.engine.machine_host(&session.machine_id).await?;
        crate::chat::sweep(&host, &rec.remote_state_dir).await
    };
    if let Err(e) = swept.await {
        tracing::warn!(session = %session.session_id, "settling the previous process's chat calls failed: {e}");
    }
}

/// The previous session ended: start a new one at the next generation, keeping the thread.
pub async fn rebuild_lost(shared: &Shared) -> Result<()> {
    let (old, owner) = {
        let inner = shared.lock();
        (inner.state.clone(), inner.owner.clone())
    };
    let old = old.ok_or_else(|| Error::internal("no state for a lost session"))?;
    let owner = owner.ok_or_else(|| Error::internal("no BotMux session for a lost session"))?;
    let cwd = old
        .provider_state
        .as_ref()
        .and_then(|p| p.get("cwd"))
        .and_then(Value::as_str)
        .unwrap_or("/")
        .to_string();
    let (session, state) = create(
        shared,
        &owner,
        &cwd,
        old.generation + 1,
        old.agent_thread_id.clone(),
    )
    .await?;
    install(shared, session, state.clone(), true);
    shared.out.send(Event::lineage_changed(state));
    Ok(())
}
