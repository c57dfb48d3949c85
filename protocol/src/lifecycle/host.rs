//! The host side: what the BotMux host accepts from a provider next. The host applies these
//! rules to every event; breaking one is a protocol error (the provider is killed and an active
//! turn fails as `ambiguous`), except where a verdict says the host ignores the event.
//!
//! - [`requests`]: the handshake first, then which event answers which command, once.
//! - [`turns`]: one turn at a time, turn events between ACK and end, the turn's host-executed
//!   operations (per-turn limits, repeated and conflicting ids, results owed).
//! - [`state`]: the state the host applies (and the usage and operations it admits for it),
//!   the hello's provider and capabilities, and the screen fence that follows the state.
//! - here: turn phases, turn failures, the screen fence.

pub mod requests;
pub mod state;
pub mod turns;

pub use requests::{
    CorrelationError, ReplyType, RequestClass, Requests, allowed_before_hello, missing_capability,
};
pub use state::{HostState, OperationRefusal, ReadyError, UsageError};
pub use turns::{AckError, HostOperations, HostTurns, OperationVerdict, TurnRefusal};

/// Where a turn the host sent is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TurnPhase {
    /// Sent, not yet ACKed.
    Submitted,
    /// ACKed (`status: busy`).
    Acked,
    /// Ended by `final` or a failure.
    Ended,
}

/// Why a turn event (`progress`, `final`, `outbound_message`, `session_tool`) is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TurnEventError {
    /// Before the turn's busy ACK.
    BeforeAck,
    /// After the turn ended.
    NotActive,
}

impl TurnPhase {
    /// A turn event is accepted only between the ACK and the end.
    pub fn admit_event(self) -> Result<(), TurnEventError> {
        match self {
            TurnPhase::Submitted => Err(TurnEventError::BeforeAck),
            TurnPhase::Acked => Ok(()),
            TurnPhase::Ended => Err(TurnEventError::NotActive),
        }
    }
}

/// Why a `failure` naming a turn is a protocol error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TurnFailureError {
    /// Its `turnId` is not the turn its `requestId` started.
    TurnIdMismatch,
    /// The turn already ended.
    NotActive,
    /// After the ACK, correlated by `requestId` alone.
    PostAckWithoutTurnId,
}

/// How the host reads a `failure` for a turn in `phase`: `Ok(true)` a pre-ACK refusal,
/// `Ok(false)` the end of an ACKed turn. `by_request` says the failure was matched to the turn
/// through its `requestId`; `turn_id_matches` is `None` without a `turnId`, else whether it is
/// that turn's.
pub fn judge_turn_failure(
    phase: TurnPhase,
    by_request: bool,
    turn_id_matches: Option<bool>,
) -> Result<bool, TurnFailureError> {
    if turn_id_matches == Some(false) {
        return Err(TurnFailureError::TurnIdMismatch);
    }
    match phase {
        TurnPhase::Ended => Err(TurnFailureError::NotActive),
        TurnPhase::Acked if by_request && turn_id_matches.is_none() => {
            Err(TurnFailureError::PostAckWithoutTurnId)
        }
        TurnPhase::Acked => Ok(false),
        TurnPhase::Submitted => Ok(true),
    }
}

/// What the host does with a `terminal_screen`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScreenVerdict {
    /// Shown: the current generation, a higher sequence.
    Apply,
    /// Ignored: an older generation than the state's.
    IgnoredStale {
        /// The state's generation.
        current: u64,
    },
    /// Ignored: the sequence did not increase within the generation.
    IgnoredSequence {
        /// The last sequence shown.
        last: u64,
    },
    /// Protocol error: a generation ahead of the state (or any before a state, except 0).
    AheadOfState {
        /// The state's generation, if any.
        current: Option<u64>,
    },
    /// Protocol error: a screen of a generation a `ready` just raised, before the host's next
    /// command (the host applies that state asynchronously).
    EarlyNewGeneration,
}

/// The host's screen fence: generation and sequence of what it showed, and a generation just
/// raised by a resume's `ready`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ScreenFence {
    last: Option<(u64, u64)>,
    fenced: Option<u64>,
}

impl ScreenFence {
    /// A new state raised the generation: sequences start over.
    pub fn generation_raised(&mut self) {
        self.last = None;
    }

    /// A resume's `ready` raised the generation to `generation`: no screen of it until the
    /// host's next command.
    pub fn raised_by_ready(&mut self, generation: u64) {
        self.last = None;
        self.fenced = Some(generation);
    }

    /// The host wrote a command: a newly raised generation is applied.
    pub fn command_written(&mut self) {
        self.fenced = None;
    }

    /// Judge a screen of `generation`/`sequence` while the state is at `state_generation`.
    pub fn observe(
        &mut self,
        state_generation: Option<u64>,
        generation: u64,
        sequence: u64,
    ) -> ScreenVerdict {
        match state_generation {
            Some(current) if generation > current => {
                return ScreenVerdict::AheadOfState {
                    current: Some(current),
                };
            }
            None if generation > 0 => return ScreenVerdict::AheadOfState { current: None },
            Some(current) if generation < current => {
                return ScreenVerdict::IgnoredStale { current };
            }
            _ => {}
        }
        if self.fenced == Some(generation) {
            return ScreenVerdict::EarlyNewGeneration;
        }
        if let Some((last_generation, last)) = self.last
            && last_generation == generation
            && sequence <= last
        {
            return ScreenVerdict::IgnoredSequence { last };
        }
        self.last = Some((generation, sequence));
        ScreenVerdict::Apply
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn turn_events_only_between_ack_and_end() {
        assert_eq!(
            TurnPhase::Submitted.admit_event(),
            Err(TurnEventError::BeforeAck)
        );
        assert_eq!(TurnPhase::Acked.admit_event(), Ok(()));
        assert_eq!(
            TurnPhase::Ended.admit_event(),
            Err(TurnEventError::NotActive)
        );
    }

    #[test]
    fn turn_failures_are_correlated_by_phase() {
        use TurnFailureError::*;
        assert_eq!(
            judge_turn_failure(TurnPhase::Submitted, true, None),
            Ok(true)
        );
        assert_eq!(
            judge_turn_failure(TurnPhase::Submitted, true, Some(true)),
            Ok(true)
        );
        assert_eq!(
            judge_turn_failure(TurnPhase::Acked, false, Some(true)),
            Ok(false)
        );
        assert_eq!(
            judge_turn_failure(TurnPhase::Acked, true, Some(true)),
            Ok(false)
        );
        assert_eq!(
            judge_turn_failure(TurnPhase::Acked, true, None),
            Err(PostAckWithoutTurnId)
        );
        assert_eq!(
            judge_turn_failure(TurnPhase::Ended, false, Some(true)),
            Err(NotActive)
        );
        assert_eq!(
            judge_turn_failure(TurnPhase::Acked, true, Some(false)),
            Err(TurnIdMismatch)
        );
    }

    #[test]
    fn screens_are_fenced_by_generation_and_sequence() {
        let mut fence = ScreenFence::default();
        assert_eq!(
            fence.observe(None, 1, 1),
            ScreenVerdict::AheadOfState { current: None }
        );
        assert_eq!(fence.observe(Some(2), 2, 5), ScreenVerdict::Apply);
        assert_eq!(
            fence.observe(Some(2), 2, 5),
            ScreenVerdict::IgnoredSequence { last: 5 }
        );
        assert_eq!(
            fence.observe(Some(2), 1, 9),
            ScreenVerdict::IgnoredStale { current: 2 }
        );
        assert_eq!(
            fence.observe(Some(2), 3, 1),
            ScreenVerdict::AheadOfState { current: Some(2) }
        );
        fence.raised_by_ready(3);
        assert_eq!(
            fence.observe(Some(3), 3, 1),
            ScreenVerdict::EarlyNewGeneration
        );
        fence.command_written();
        assert_eq!(fence.observe(Some(3), 3, 1), ScreenVerdict::Apply);
    }
}
