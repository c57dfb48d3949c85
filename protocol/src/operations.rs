//! Per-turn accounting of host-executed operations (`outbound_message`, `session_tool`), as
//! a provider keeps it: the host accepts at most [`MAX_OUTBOUND_PER_TURN`] distinct outbound
//! operations and [`MAX_SESSION_TOOLS_PER_TURN`] distinct session tools in one turn, and a
//! repeated `operationId` does not count again. A provider checks here before sending, so an
//! operation over the limit is refused with the host's own code and never sent.

use std::collections::HashSet;

use crate::limits::{
    MAX_OUTBOUND_PER_TURN, MAX_SESSION_TOOLS_PER_TURN, OUTBOUND_RATE_LIMITED,
    SESSION_TOOL_RATE_LIMITED,
};

/// Which kind of operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OperationKind {
    /// `outbound_message`.
    Outbound,
    /// `session_tool`.
    SessionTool,
}

impl OperationKind {
    /// Most distinct operations of this kind in one turn.
    pub fn limit(self) -> usize {
        match self {
            OperationKind::Outbound => MAX_OUTBOUND_PER_TURN,
            OperationKind::SessionTool => MAX_SESSION_TOOLS_PER_TURN,
        }
    }

    /// The host's code for one over the limit.
    pub fn rate_limited_code(self) -> &'static str {
        match self {
            OperationKind::Outbound => OUTBOUND_RATE_LIMITED,
            OperationKind::SessionTool => SESSION_TOOL_RATE_LIMITED,
        }
    }

    /// The capability that allows it.
    pub fn capability(self) -> &'static str {
        match self {
            OperationKind::Outbound => crate::limits::OUTBOUND_MESSAGE_CAPABILITY,
            OperationKind::SessionTool => crate::limits::SESSION_TOOL_CAPABILITY,
        }
    }
}

/// The distinct operation ids one turn has used, per kind.
#[derive(Debug, Default, Clone)]
pub struct TurnOperations {
    outbound: HashSet<String>,
    tools: HashSet<String>,
}

/// An operation the per-turn limit refuses: `code` is the host's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RateLimited {
    /// `outbound_rate_limited` or `session_tool_rate_limited`.
    pub code: &'static str,
    /// What happened and what to do.
    pub message: String,
}

impl TurnOperations {
    /// Admit `operation_id` of `kind`: a repeat of an admitted id always passes (the host
    /// answers it with the first result); a new id passes while the turn is under the limit.
    pub fn admit(&mut self, kind: OperationKind, operation_id: &str) -> Result<(), RateLimited> {
        let set = match kind {
            OperationKind::Outbound => &mut self.outbound,
            OperationKind::SessionTool => &mut self.tools,
        };
        if set.contains(operation_id) {
            return Ok(());
        }
        if set.len() >= kind.limit() {
            return Err(RateLimited {
                code: kind.rate_limited_code(),
                message: format!(
                    "this turn already used {} distinct {} operations, the host's limit per \
                     turn; nothing was sent. Combine messages, or continue in the next turn",
                    kind.limit(),
                    kind.capability()
                ),
            });
        }
        set.insert(operation_id.to_string());
        Ok(())
    }

    /// Distinct ids admitted so far for `kind`.
    pub fn count(&self, kind: OperationKind) -> usize {
        match kind {
            OperationKind::Outbound => self.outbound.len(),
            OperationKind::SessionTool => self.tools.len(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_eleventh_distinct_outbound_is_refused_with_the_host_code() {
        let mut ops = TurnOperations::default();
        for i in 0..10 {
            ops.admit(OperationKind::Outbound, &format!("op-{i}"))
                .unwrap();
        }
        let refused = ops.admit(OperationKind::Outbound, "op-10").unwrap_err();
        assert_eq!(refused.code, "outbound_rate_limited");
        // A repeat of an admitted id is not a new operation.
        ops.admit(OperationKind::Outbound, "op-3").unwrap();
        // The kinds count apart.
        ops.admit(OperationKind::SessionTool, "op-10").unwrap();
        assert_eq!(ops.count(OperationKind::Outbound), 10);
    }

    #[test]
    fn the_thirty_first_distinct_tool_is_refused_with_the_host_code() {
        let mut ops = TurnOperations::default();
        for i in 0..30 {
            ops.admit(OperationKind::SessionTool, &format!("t-{i}"))
                .unwrap();
        }
        let refused = ops.admit(OperationKind::SessionTool, "t-30").unwrap_err();
        assert_eq!(refused.code, "session_tool_rate_limited");
    }
}
