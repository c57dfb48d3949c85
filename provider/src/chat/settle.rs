//! Results from the host (`outbound_message_result`, `session_tool_result`) to the calls that
//! wait for them. A result is matched by operation id, turn and generation; one for another
//! turn or generation finds no waiter and is dropped (the host allows no reply to a result).

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

use remote_runner_protocol::{OperationKind, OutboundResult, SessionToolResult};
use tokio::sync::oneshot;

/// The host's answer to one operation.
#[derive(Debug, Clone, PartialEq)]
pub enum Settlement {
    Outbound(OutboundResult),
    Tool(SessionToolResult),
}

impl Settlement {
    fn kind(&self) -> OperationKind {
        match self {
            Settlement::Outbound(_) => OperationKind::Outbound,
            Settlement::Tool(_) => OperationKind::SessionTool,
        }
    }
}

#[derive(Debug)]
struct Waiter {
    turn_id: String,
    generation: u64,
    kind: OperationKind,
    tx: oneshot::Sender<Settlement>,
}

/// Calls waiting for the host, by operation id. The same id sent twice (a caller's `--id`
/// reused) waits twice, first come first served: the host answers both with the first result.
#[derive(Debug, Default)]
pub struct Settlements {
    waiting: Mutex<HashMap<String, VecDeque<Waiter>>>,
}

impl Settlements {
    /// Register a call before its event goes out.
    pub fn expect(
        &self,
        operation_id: &str,
        turn_id: &str,
        generation: u64,
        kind: OperationKind,
    ) -> oneshot::Receiver<Settlement> {
        let (tx, rx) = oneshot::channel();
        let mut waiting = self.lock();
        // Calls that ended without a result (their turn failed) wait no more.
        waiting.retain(|_, queue| {
            queue.retain(|w| !w.tx.is_closed());
            !queue.is_empty()
        });
        waiting
            .entry(operation_id.to_string())
            .or_default()
            .push_back(Waiter {
                turn_id: turn_id.to_string(),
                generation,
                kind,
                tx,
            });
        rx
    }

    /// Hand a result to the first call waiting for it in that turn and generation. `Err` says
    /// why none took it.
    pub fn settle(
        &self,
        operation_id: &str,
        turn_id: &str,
        generation: u64,
        settlement: Settlement,
    ) -> Result<(), String> {
        let mut waiting = self.lock();
        let Some(queue) = waiting.get_mut(operation_id) else {
            return Err(format!("no call waits for operation {operation_id:?}"));
        };
        queue.retain(|w| !w.tx.is_closed());
        let kind = settlement.kind();
        let found = queue
            .iter()
            .position(|w| w.turn_id == turn_id && w.generation == generation && w.kind == kind);
        let result = match found.and_then(|i| queue.remove(i)) {
            Some(waiter) => waiter
                .tx
                .send(settlement)
                .map_err(|_| format!("the call for operation {operation_id:?} has ended")),
            None => Err(format!(
                "no call of turn {turn_id:?} at generation {generation} waits for a {} result \
                 of operation {operation_id:?}",
                kind.capability()
            )),
        };
        if queue.is_empty() {
            waiting.remove(operation_id);
        }
        result
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, VecDeque<Waiter>>> {
        self.waiting
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn delivered(id: &str) -> Settlement {
        Settlement::Outbound(OutboundResult::Delivered {
            message_id: id.into(),
        })
    }

    #[test]
    fn results_for_another_turn_or_generation_find_no_waiter() {
        let s = Settlements::default();
        let mut rx = s.expect("op", "turn-1", 2, OperationKind::Outbound);
        assert!(s.settle("op", "turn-0", 2, delivered("om_1")).is_err());
        assert!(s.settle("op", "turn-1", 1, delivered("om_1")).is_err());
        assert!(s.settle("other", "turn-1", 2, delivered("om_1")).is_err());
        let tool = Settlement::Tool(SessionToolResult::Unknown {
            code: "x".into(),
            message: "y".into(),
        });
        assert!(s.settle("op", "turn-1", 2, tool).is_err());
        assert!(rx.try_recv().is_err(), "nothing reached the call");
        s.settle("op", "turn-1", 2, delivered("om_1")).unwrap();
        assert_eq!(rx.try_recv().unwrap(), delivered("om_1"));
    }

    #[test]
    fn the_same_id_twice_is_answered_twice_in_order() {
        let s = Settlements::default();
        let mut a = s.expect("op", "t", 1, OperationKind::Outbound);
        let mut b = s.expect("op", "t", 1, OperationKind::Outbound);
        s.settle("op", "t", 1, delivered("om_a")).unwrap();
        s.settle("op", "t", 1, delivered("om_b")).unwrap();
        assert_eq!(a.try_recv().unwrap(), delivered("om_a"));
        assert_eq!(b.try_recv().unwrap(), delivered("om_b"));
        assert!(s.settle("op", "t", 1, delivered("om_c")).is_err());
    }
}
