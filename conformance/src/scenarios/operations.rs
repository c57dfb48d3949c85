//! outbound and session_tool: host-executed operations inside a turn. The provider is asked
//! for one with trigger content (`request-outbound`, `request-session-tool`, and the
//! `-duplicate`, `-conflict` and `-burst` variants); a provider that advertises the
//! capability but does not react to a trigger gets n/a for that scenario.

use super::{
    Level, OUTBOUND_TRIGGER, SESSION_TOOL_TRIGGER, Scenario, body, expect_final, host_rules,
    require,
};
use crate::host::Submitted;
use crate::host::refused;
use crate::track::{OperationPolicy, OperationStats};
use crate::violation::{Step, Stop};

#[derive(Debug, Clone, Copy)]
enum Kind {
    Outbound,
    Tool,
}

impl Kind {
    fn capability(self) -> &'static str {
        match self {
            Kind::Outbound => "outbound_message",
            Kind::Tool => "session_tool",
        }
    }
    fn trigger(self) -> &'static str {
        match self {
            Kind::Outbound => OUTBOUND_TRIGGER,
            Kind::Tool => SESSION_TOOL_TRIGGER,
        }
    }
    /// Distinct operations the host admitted in the turn, and the host's limit.
    fn distinct(self, stats: &OperationStats) -> (usize, usize) {
        match self {
            Kind::Outbound => (
                stats.distinct_outbound,
                remote_runner_protocol::MAX_OUTBOUND_PER_TURN,
            ),
            Kind::Tool => (
                stats.distinct_tools,
                remote_runner_protocol::MAX_SESSION_TOOLS_PER_TURN,
            ),
        }
    }
    fn events(self, stats: &OperationStats) -> usize {
        match self {
            Kind::Outbound => stats.outbound_events,
            Kind::Tool => stats.session_tool_events,
        }
    }
}

/// What a scenario needs to have seen for it to apply.
#[derive(Debug, Clone, Copy)]
enum Needs {
    Any,
    Duplicate,
    Conflict,
    RateLimited,
}

/// Runs one triggered turn; the tracker checks capability, ACK, generation and that the
/// final comes only after every result was written back.
async fn triggered(
    ctx: super::Ctx,
    kind: Kind,
    suffix: &str,
    policy: OperationPolicy,
    needs: Needs,
    final_required: bool,
) -> Step<()> {
    let mut host = ctx.spawn()?;
    host.handshake().await?;
    require(&host, kind.capability())?;
    host.start().await?;
    match kind {
        Kind::Outbound => host.track.outbound_policy = policy,
        Kind::Tool => host.track.session_tool_policy = policy,
    }
    let content = format!("{}{suffix}", kind.trigger());
    let (turn_id, submitted) = host.submit(&content).await?;
    if let Submitted::Refused(f) = submitted {
        return Err(refused("turn", &f));
    }
    let end = host.finish(&turn_id).await?;
    let stats = host
        .track
        .turn(&turn_id)
        .map(|t| t.stats.clone())
        .unwrap_or_default();
    let seen = match needs {
        Needs::Any => kind.events(&stats) > 0,
        Needs::Duplicate => stats.duplicates > 0,
        Needs::Conflict => stats.conflicts > 0,
        // Either the host refused one over the limit, or the provider enforced the limit
        // itself: asked for one more, it sent exactly the limit.
        Needs::RateLimited => {
            let (distinct, limit) = kind.distinct(&stats);
            stats.rate_limited > 0 || distinct == limit
        }
    };
    if !seen {
        return Err(Stop::NotApplicable(format!(
            "the turn {content:?} did not produce the {needs:?} {} flow this scenario needs",
            kind.capability()
        )));
    }
    if final_required {
        expect_final(&end, &content)?;
    }
    super::plain_turn(&mut host, 9).await?;
    ctx.finish(host).await;
    Ok(())
}

macro_rules! op_scenario {
    ($name:literal, $group:literal, $checks:literal, $kind:expr, $suffix:literal, $policy:expr, $needs:expr, $final:literal) => {
        Scenario {
            name: $name,
            group: $group,
            checks: $checks,
            level: Level::Required,
            host_rule: host_rules::OPERATIONS,
            run: body!(ctx => {
                triggered(ctx, $kind, $suffix, $policy, $needs, $final).await
            }),
        }
    };
}

pub(super) fn scenarios() -> Vec<Scenario> {
    use Kind::{Outbound, Tool};
    use Needs::{Any, Conflict, Duplicate, RateLimited};
    use OperationPolicy::{Reject, Succeed, Unknown};
    vec![
        op_scenario!(
            "outbound_delivered_then_final",
            "outbound",
            "outbound_message only for the ACKed turn at the state's generation; the final only \
             after the delivered result was written back; no reply to the result",
            Outbound,
            "",
            Succeed,
            Any,
            true
        ),
        op_scenario!(
            "outbound_rejected_result",
            "outbound",
            "a rejected outbound result is handled: the turn ends (final or failure with turnId)",
            Outbound,
            "",
            Reject,
            Any,
            false
        ),
        op_scenario!(
            "outbound_unknown_result",
            "outbound",
            "an unknown outbound result is handled without replay: the turn ends",
            Outbound,
            "",
            Unknown,
            Any,
            false
        ),
        op_scenario!(
            "outbound_duplicate_same_payload",
            "outbound",
            "the same operationId with the same payload reuses the first result; the final waits \
             for both results",
            Outbound,
            "-duplicate",
            Succeed,
            Duplicate,
            true
        ),
        op_scenario!(
            "outbound_conflicting_payload",
            "outbound",
            "the same operationId with a different payload gets operation_id_conflict; the turn \
             still ends after every result",
            Outbound,
            "-conflict",
            Succeed,
            Conflict,
            false
        ),
        op_scenario!(
            "outbound_rate_limit",
            "outbound",
            "the 11th distinct outbound_message in a turn gets outbound_rate_limited (or the \
             provider refuses it itself and sends 10); the turn ends after every result",
            Outbound,
            "-burst",
            Succeed,
            RateLimited,
            false
        ),
        op_scenario!(
            "session_tool_completed_then_final",
            "session_tool",
            "session_tool only for the ACKed turn at the state's generation with an allowlisted \
             request; the final only after the result was written back",
            Tool,
            "",
            Succeed,
            Any,
            true
        ),
        op_scenario!(
            "session_tool_rejected_result",
            "session_tool",
            "a rejected session_tool result is handled: the turn ends",
            Tool,
            "",
            Reject,
            Any,
            false
        ),
        op_scenario!(
            "session_tool_unknown_result",
            "session_tool",
            "an unknown session_tool result is handled: the turn ends",
            Tool,
            "",
            Unknown,
            Any,
            false
        ),
        op_scenario!(
            "session_tool_duplicate_same_payload",
            "session_tool",
            "the same operationId with the same request reuses the first result",
            Tool,
            "-duplicate",
            Succeed,
            Duplicate,
            true
        ),
        op_scenario!(
            "session_tool_conflicting_payload",
            "session_tool",
            "the same operationId with a different request gets operation_id_conflict",
            Tool,
            "-conflict",
            Succeed,
            Conflict,
            false
        ),
        op_scenario!(
            "session_tool_rate_limit",
            "session_tool",
            "the 31st distinct session_tool in a turn gets session_tool_rate_limited (or the \
             provider refuses it itself and sends 30)",
            Tool,
            "-burst",
            Succeed,
            RateLimited,
            false
        ),
    ]
}
