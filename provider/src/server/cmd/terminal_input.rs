//! `terminal_input`: raw keystrokes for a generation, sent to the pane on the terminal lane.

use remote_runner_protocol::{Event, TerminalInputCommand};

use crate::server::failure::Failure;
use crate::server::jobs::terminal_job;
use crate::server::shared::{SessionRef, Shared};

pub fn handle(shared: &Shared, c: TerminalInputCommand) {
    terminal_job(
        shared,
        c.request_id.clone(),
        c.generation,
        |s, session| async move { input(&s, &session, c).await },
    );
}

async fn input(
    shared: &Shared,
    session: &SessionRef,
    c: TerminalInputCommand,
) -> Result<Event, Failure> {
    shared
        .engine
        .send_raw(&session.session_id, c.data.as_bytes())
        .await?;
    shared.screen.kick();
    Ok(shared.status_event(c.request_id))
}
