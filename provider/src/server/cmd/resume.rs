//! `resume`: adopt the session a persisted state names (reattach) or replace it (rebuild), only
//! once the state is proven to be this chat's session on this machine (`super::binding`).

use remote_runner_protocol::{Event, ResumeCommand, ResumeMode};
use tokio_util::sync::CancellationToken;

use crate::server::binding;
use crate::server::failure::{Failure, OldSession};
use crate::server::jobs::session_job;
use crate::server::session;
use crate::server::shared::Shared;

pub fn handle(shared: &Shared, c: ResumeCommand) {
    session_job(shared, c.request_id.clone(), |s, token| async move {
        resume(&s, c, &token).await
    });
}

async fn resume(
    shared: &Shared,
    c: ResumeCommand,
    token: &CancellationToken,
) -> Result<Event, Failure> {
    let old = c.state.clone();
    if old.provider != shared.config.provider_name {
        return Err(Failure::ForeignProvider {
            provider: old.provider,
            ours: shared.config.provider_name.clone(),
        });
    }
    // Only a session this provider made for this BotMux session, on this machine, may be
    // adopted or destroyed; anything else is refused before the engine is touched.
    let previous = binding::check(&shared.config.state_dir, &shared.config.machine_id, &c)?;
    shared.lock().owner = Some(c.session_id.clone());
    if c.mode() == ResumeMode::Reattach
        && let Some(previous) = &previous
        && session::alive(shared, previous).await
    {
        if shared.config.chat() {
            session::sweep_chat(shared, previous).await;
        }
        let mut state = old.clone();
        state.generation = state.generation.max(1);
        // A state at generation 0 never had compute; adopting it counts as new compute.
        let raised = state.generation != old.generation;
        session::install(shared, previous.clone(), state.clone(), raised);
        return Ok(Event::ready(c.request_id, state));
    }
    let old_session = match (c.mode(), &previous) {
        (ResumeMode::Rebuild, Some(previous)) => session::retire(shared, previous).await,
        _ => OldSession::None,
    };
    let created = session::create_unless_cancelled(
        shared,
        &c.session_id,
        &c.cwd,
        old.generation + 1,
        old.agent_thread_id.clone(),
        token,
    )
    .await;
    let (new, state) = created.map_err(|e| old_session.explain(e))?;
    session::install(shared, new, state.clone(), true);
    Ok(Event::ready(c.request_id, state))
}
