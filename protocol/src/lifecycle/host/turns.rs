//! Turns as the host tracks them: one at a time, events only between the ACK and the end,
//! and each turn's host-executed operations (per-turn limits, repeated and conflicting
//! operation ids, results the provider still waits for).

use std::collections::HashMap;

use crate::limits::OPERATION_ID_CONFLICT;
use crate::operations::{OperationKind, TurnOperations};

use super::{TurnEventError, TurnFailureError, TurnPhase, judge_turn_failure};

/// Why a turn's busy ACK is a protocol error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AckError {
    /// Another turn is ACKed and not ended.
    Overlap {
        /// The turn still running.
        running: String,
    },
}

/// Why an event naming a turn is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TurnRefusal {
    /// The host never sent that turnId.
    Unknown,
    /// Refused by the turn's phase.
    Event(TurnEventError),
    /// A failure refused by the turn's phase.
    Failure(TurnFailureError),
}

#[derive(Debug, Clone)]
struct HostTurn<R> {
    turn_id: String,
    request_id: String,
    phase: TurnPhase,
    operations: HostOperations<R>,
}

/// Every turn the host sent, with its phase and operations. `R` is the result the host
/// answers an operation with (repeated operation ids get the first result again).
#[derive(Debug, Clone)]
pub struct HostTurns<R> {
    turns: Vec<HostTurn<R>>,
}

impl<R> Default for HostTurns<R> {
    fn default() -> Self {
        HostTurns { turns: Vec::new() }
    }
}

impl<R: Clone> HostTurns<R> {
    /// The host wrote a turn.
    pub fn submitted(&mut self, request_id: &str, turn_id: &str) {
        self.turns.push(HostTurn {
            turn_id: turn_id.to_owned(),
            request_id: request_id.to_owned(),
            phase: TurnPhase::Submitted,
            operations: HostOperations::default(),
        });
    }

    fn get(&self, turn_id: &str) -> Option<&HostTurn<R>> {
        self.turns.iter().find(|t| t.turn_id == turn_id)
    }

    fn get_mut(&mut self, turn_id: &str) -> Option<&mut HostTurn<R>> {
        self.turns.iter_mut().find(|t| t.turn_id == turn_id)
    }

    /// Where the turn is, if the host sent it.
    pub fn phase(&self, turn_id: &str) -> Option<TurnPhase> {
        self.get(turn_id).map(|t| t.phase)
    }

    /// The turn a turn command's `request_id` started.
    pub fn turn_of_request(&self, request_id: &str) -> Option<&str> {
        self.turns
            .iter()
            .find(|t| t.request_id == request_id)
            .map(|t| t.turn_id.as_str())
    }

    /// The turn's busy ACK arrived: one turn at a time.
    pub fn acked(&mut self, turn_id: &str) -> Result<(), AckError> {
        if let Some(other) = self
            .turns
            .iter()
            .find(|t| t.phase == TurnPhase::Acked && t.turn_id != turn_id)
        {
            return Err(AckError::Overlap {
                running: other.turn_id.clone(),
            });
        }
        if let Some(turn) = self.get_mut(turn_id) {
            turn.phase = TurnPhase::Acked;
        }
        Ok(())
    }

    /// An event for the turn (`progress`, `final`, an operation): only while it is ACKed.
    pub fn admit_event(&self, turn_id: &str) -> Result<(), TurnRefusal> {
        let turn = self.get(turn_id).ok_or(TurnRefusal::Unknown)?;
        turn.phase.admit_event().map_err(TurnRefusal::Event)
    }

    /// A `final` for the turn: admitted like any turn event, and only once no operation
    /// result is still owed to the provider. `Err(Ok(n))` names the `n` results owed.
    pub fn admit_final(&self, turn_id: &str) -> Result<(), Result<usize, TurnRefusal>> {
        self.admit_event(turn_id).map_err(Err)?;
        match self
            .get(turn_id)
            .map_or(0, |t| t.operations.results_pending)
        {
            0 => Ok(()),
            owed => Err(Ok(owed)),
        }
    }

    /// The turn ended with its final.
    pub fn ended(&mut self, turn_id: &str) {
        if let Some(turn) = self.get_mut(turn_id) {
            turn.phase = TurnPhase::Ended;
        }
    }

    /// A failure for the turn (see [`judge_turn_failure`]); on success the turn ended and the
    /// answer says whether it was a pre-ACK refusal.
    pub fn failure(
        &mut self,
        turn_id: &str,
        by_request: bool,
        event_turn_id: Option<&str>,
    ) -> Result<bool, TurnRefusal> {
        let turn = self.get_mut(turn_id).ok_or(TurnRefusal::Unknown)?;
        let matches = event_turn_id.map(|id| id == turn_id);
        let pre_ack =
            judge_turn_failure(turn.phase, by_request, matches).map_err(TurnRefusal::Failure)?;
        turn.phase = TurnPhase::Ended;
        Ok(pre_ack)
    }

    /// An operation of the ACKed turn `turn_id` (see [`HostOperations::observe`]).
    pub fn operation(
        &mut self,
        turn_id: &str,
        kind: OperationKind,
        operation_id: &str,
        fingerprint: String,
        answer: impl FnOnce(&OperationVerdict) -> R,
    ) -> Result<(OperationVerdict, R), TurnRefusal> {
        self.admit_event(turn_id)?;
        let turn = self.get_mut(turn_id).ok_or(TurnRefusal::Unknown)?;
        Ok(turn
            .operations
            .observe(kind, operation_id, fingerprint, answer))
    }

    /// The host wrote one of the turn's results back.
    pub fn result_written(&mut self, turn_id: &str) {
        self.settle(turn_id);
    }

    /// The turn ended before a scheduled result was due: the host drops it (results only go
    /// to the active turn).
    pub fn result_dropped(&mut self, turn_id: &str) {
        self.settle(turn_id);
    }

    fn settle(&mut self, turn_id: &str) {
        if let Some(turn) = self.get_mut(turn_id) {
            turn.operations.results_pending = turn.operations.results_pending.saturating_sub(1);
        }
    }

    /// Results scheduled for the turn and not yet written.
    pub fn results_pending(&self, turn_id: &str) -> usize {
        self.get(turn_id)
            .map_or(0, |t| t.operations.results_pending)
    }

    /// Distinct operations of `kind` the turn was granted (at most the per-turn limit).
    pub fn distinct(&self, turn_id: &str, kind: OperationKind) -> usize {
        self.get(turn_id).map_or(0, |t| t.operations.distinct(kind))
    }
}

/// How the host treats one `outbound_message` / `session_tool`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OperationVerdict {
    /// A new operation id within the per-turn limit: executed.
    New,
    /// A repeat of an id with the same payload: answered with the first result again.
    Duplicate,
    /// An id reused with a different payload: rejected with `code`, not remembered.
    Conflict {
        /// `operation_id_conflict`.
        code: &'static str,
    },
    /// A new id over the per-turn limit ([`OperationKind::limit`]): rejected with `code`,
    /// and a repeat of it gets the same rejection.
    RateLimited {
        /// `outbound_rate_limited` or `session_tool_rate_limited`.
        code: &'static str,
    },
}

/// One turn's host-executed operations as the host sees them. The per-turn limits are the
/// same [`TurnOperations`] ledger a provider checks before sending.
#[derive(Debug, Clone)]
pub struct HostOperations<R> {
    seen: HashMap<String, (String, R)>,
    granted: TurnOperations,
    results_pending: usize,
}

impl<R> Default for HostOperations<R> {
    fn default() -> Self {
        HostOperations {
            seen: HashMap::new(),
            granted: TurnOperations::default(),
            results_pending: 0,
        }
    }
}

impl<R: Clone> HostOperations<R> {
    /// Judges operation `operation_id` of `kind` whose payload is `fingerprint`, and returns
    /// the result to write back: the first result for a duplicate, else `answer(verdict)`.
    /// Every operation is answered, so one more result is owed to the provider.
    pub fn observe(
        &mut self,
        kind: OperationKind,
        operation_id: &str,
        fingerprint: String,
        answer: impl FnOnce(&OperationVerdict) -> R,
    ) -> (OperationVerdict, R) {
        self.results_pending += 1;
        if let Some((seen, result)) = self.seen.get(operation_id) {
            if *seen == fingerprint {
                return (OperationVerdict::Duplicate, result.clone());
            }
            let verdict = OperationVerdict::Conflict {
                code: OPERATION_ID_CONFLICT,
            };
            let result = answer(&verdict);
            return (verdict, result);
        }
        let verdict = match self.granted.admit(kind, operation_id) {
            Ok(()) => OperationVerdict::New,
            Err(limited) => OperationVerdict::RateLimited { code: limited.code },
        };
        let result = answer(&verdict);
        self.seen
            .insert(operation_id.to_owned(), (fingerprint, result.clone()));
        (verdict, result)
    }

    /// Distinct operations of `kind` granted.
    pub fn distinct(&self, kind: OperationKind) -> usize {
        self.granted.count(kind)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn label(verdict: &OperationVerdict) -> String {
        format!("{verdict:?}")
    }

    #[test]
    fn one_turn_at_a_time_and_events_only_while_acked() {
        let mut turns = HostTurns::<String>::default();
        turns.submitted("r1", "t1");
        turns.submitted("r2", "t2");
        assert_eq!(turns.turn_of_request("r2"), Some("t2"));
        assert_eq!(
            turns.admit_event("t1"),
            Err(TurnRefusal::Event(TurnEventError::BeforeAck))
        );
        assert_eq!(turns.admit_event("t9"), Err(TurnRefusal::Unknown));
        turns.acked("t1").unwrap();
        assert_eq!(
            turns.acked("t2"),
            Err(AckError::Overlap {
                running: "t1".into()
            })
        );
        turns.admit_final("t1").unwrap();
        turns.ended("t1");
        assert_eq!(
            turns.admit_event("t1"),
            Err(TurnRefusal::Event(TurnEventError::NotActive))
        );
        turns.acked("t2").unwrap();
        assert_eq!(turns.failure("t2", false, Some("t2")), Ok(false));
        assert_eq!(turns.phase("t2"), Some(TurnPhase::Ended));
        assert_eq!(
            turns.failure("t2", false, Some("t2")),
            Err(TurnRefusal::Failure(TurnFailureError::NotActive))
        );
    }

    #[test]
    fn a_final_waits_for_every_result() {
        let mut turns = HostTurns::<String>::default();
        turns.submitted("r1", "t1");
        turns.acked("t1").unwrap();
        turns
            .operation("t1", OperationKind::Outbound, "op", "a".into(), label)
            .unwrap();
        assert_eq!(turns.admit_final("t1"), Err(Ok(1)));
        turns.result_written("t1");
        assert_eq!(turns.admit_final("t1"), Ok(()));
    }

    #[test]
    fn duplicates_repeat_the_first_result_conflicts_and_the_limit_are_rejected() {
        let mut ops = HostOperations::<String>::default();
        let (verdict, first) = ops.observe(OperationKind::Outbound, "a", "x".into(), label);
        assert_eq!(verdict, OperationVerdict::New);
        let (verdict, again) = ops.observe(OperationKind::Outbound, "a", "x".into(), |_| {
            "not used".into()
        });
        assert_eq!((verdict, again), (OperationVerdict::Duplicate, first));
        let (verdict, _) = ops.observe(OperationKind::Outbound, "a", "y".into(), label);
        assert_eq!(
            verdict,
            OperationVerdict::Conflict {
                code: "operation_id_conflict"
            }
        );
        for i in 1..crate::limits::MAX_OUTBOUND_PER_TURN {
            let (verdict, _) =
                ops.observe(OperationKind::Outbound, &format!("o{i}"), "x".into(), label);
            assert_eq!(verdict, OperationVerdict::New);
        }
        let (verdict, limited) = ops.observe(OperationKind::Outbound, "over", "x".into(), label);
        assert_eq!(
            verdict,
            OperationVerdict::RateLimited {
                code: "outbound_rate_limited"
            }
        );
        let (verdict, repeat) = ops.observe(OperationKind::Outbound, "over", "x".into(), label);
        assert_eq!((verdict, repeat), (OperationVerdict::Duplicate, limited));
        assert_eq!(ops.distinct(OperationKind::Outbound), 10);
        assert_eq!(ops.distinct(OperationKind::SessionTool), 0);
    }
}
