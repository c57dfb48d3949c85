//! The provider: its configuration (or why it is invalid) and, once valid, the shared state.
//!
//! The main loop (see [`super::serve`]) hands every decoded command to [`Provider::dispatch`],
//! which never waits on the engine: it passes the command to its file in `cmd/` (the table is
//! `cmd::run`), which answers at once (`hello`, `status`, refusals) or queues engine work on a
//! lane (session work in one, terminal input in another). A `cancel` cuts short whatever
//! session work is in flight or queued (it gets a `cancelled` failure) and then runs. A turn's
//! streaming runs in its own task.

use std::time::Duration;

use remote_runner_engine::error::{Error, Result};
use remote_runner_protocol::Command;

use super::cmd;
use super::config::ProviderConfig;
use super::failure;
use super::screen;
use super::shared::Shared;
use super::writer::Out;

/// The provider: its configuration (or why it is invalid) and, once valid, the shared parts.
pub struct Provider {
    setup: std::result::Result<Shared, Error>,
    out: Out,
}

impl Provider {
    pub fn new(config: Result<ProviderConfig>, out: Out) -> Provider {
        let setup = config.and_then(|config| Shared::new(config, out.clone()));
        match &setup {
            Ok(shared) => screen::spawn(shared.clone()),
            Err(e) => tracing::error!(code = %e.code, "configuration is invalid: {}", e.message),
        }
        Provider { setup, out }
    }

    /// Decide on one command without waiting for the engine: answer it now, or queue its work.
    pub fn dispatch(&self, command: Command) {
        let shared = match &self.setup {
            Ok(shared) => shared,
            Err(err) => return self.refuse(&command, err),
        };
        // Any command from the host means it has applied what we sent before it.
        shared.lock().lifecycle.command_received();
        cmd::run(shared, command);
    }

    /// Stdin closed: let queued session work (a start in flight, say) finish, up to `bound`,
    /// so that a session it creates is recorded rather than abandoned half made.
    pub async fn settle(&self, bound: Duration) {
        if let Ok(shared) = &self.setup {
            let _ = tokio::time::timeout(bound, shared.session_lane.drained()).await;
        }
    }

    /// Stdin closed or a signal: leave the remote session alive, as `detach` would, and stop.
    /// Queued or in-flight session work is abandoned with the process.
    pub fn shutdown(&self) {
        if let Ok(shared) = &self.setup {
            shared.screen.stop();
            let turn = shared.lock().turn.as_ref().map(|t| t.cancel.clone());
            if let Some(token) = turn {
                // The remote command goes on; only our streaming of it stops.
                token.cancel();
            }
        }
    }

    /// Configuration is invalid: every command that expects a reply gets a correlated failure
    /// saying what to set, and the provider keeps serving.
    fn refuse(&self, command: &Command, err: &Error) {
        if command.expects_reply() {
            self.out.send(failure::engine(
                Some(command.request_id()),
                command.turn_id(),
                err,
            ));
        }
    }
}
