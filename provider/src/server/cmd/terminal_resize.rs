//! `terminal_resize`: the pane's size for a generation, on the terminal lane.

use remote_runner_protocol::{Event, TerminalResizeCommand};

use crate::server::failure::Failure;
use crate::server::jobs::terminal_job;
use crate::server::shared::{SessionRef, Shared};

pub fn handle(shared: &Shared, c: TerminalResizeCommand) {
    terminal_job(
        shared,
        c.request_id.clone(),
        c.generation,
        |s, session| async move { resize(&s, &session, c).await },
    );
}

async fn resize(
    shared: &Shared,
    session: &SessionRef,
    c: TerminalResizeCommand,
) -> Result<Event, Failure> {
    let cols = u16::try_from(c.cols).unwrap_or(1000);
    let rows = u16::try_from(c.rows).unwrap_or(1000);
    shared
        .engine
        .resize(&session.session_id, cols, rows)
        .await?;
    shared.screen.kick();
    Ok(shared.status_event(c.request_id))
}
