//! Failures in the protocol's terms: the engine's errors rendered as `failure` events, and the
//! failures only the protocol has (a refused command, a state persisted by another provider).
//! The engine's codes know nothing of the protocol; its codes live here and in the protocol
//! crate's [`Refusal`].

use remote_runner_protocol::lifecycle::Refusal;
use remote_runner_protocol::{Event, FailureStatus};

use super::provider::failure_for;
use remote_runner_engine::error::Error;

/// Why the provider could not do what a command asked.
#[derive(Debug)]
pub enum Failure {
    /// The engine failed.
    Engine(Error),
    /// The protocol's rules refuse the command in the provider's current state.
    Refused(Refusal),
}

impl From<Error> for Failure {
    fn from(err: Error) -> Self {
        Failure::Engine(err)
    }
}

impl Failure {
    /// The correlated `failure` event.
    pub fn event(&self, request_id: Option<&str>, turn_id: Option<&str>) -> Event {
        match self {
            Failure::Engine(err) => failure_for(request_id, turn_id, err),
            Failure::Refused(refusal) => Event::failure(
                request_id.map(str::to_owned),
                turn_id.map(str::to_owned),
                refusal.code(),
                refusal.message(),
                FailureStatus::Failed,
                refusal.retryable(),
            ),
        }
    }
}

/// `resume` offered a state persisted by another provider (`provider` names it): nothing was
/// touched.
pub fn foreign_state(request_id: &str, provider: &str, ours: &str) -> Event {
    Event::failure(
        Some(request_id.to_string()),
        None,
        "state_provider_mismatch",
        format!(
            "the persisted state belongs to provider {provider:?}, not {ours:?}; start a new \
             session or set REMOTE_RUNNER_PROVIDER_NAME to match"
        ),
        FailureStatus::Failed,
        false,
    )
}
