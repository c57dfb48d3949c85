//! The host's stateful rules: correlation, turn lifecycle, state transitions, terminal
//! fencing, usage and host-executed operations. Pure bookkeeping, no I/O: the session feeds
//! it every command it writes and every event it reads.

use std::collections::{HashMap, HashSet};

use remote_runner_protocol::{
    Command, Event, FailureEvent, FinalEvent, HelloEvent, OutboundMessageResultCommand,
    OutboundResult, ReadyEvent, SessionStatus, SessionToolResult, SessionToolResultCommand, State,
    StatusEvent, Transition, ValidationError, check_transition,
};

use crate::violation::{Violation, Warning, rule};

/// Distinct outbound operations the host accepts per turn.
pub const OUTBOUND_LIMIT_PER_TURN: usize = 10;
/// Distinct session tools the host accepts per turn.
pub const SESSION_TOOL_LIMIT_PER_TURN: usize = 30;

/// What a command the harness sent expects back.
#[derive(Debug, Clone, PartialEq)]
pub enum RequestKind {
    /// `hello`, with the capabilities the harness required.
    Hello(Vec<String>),
    /// `start`.
    Start,
    /// `resume` with the persisted state it carried.
    Resume {
        /// The state sent.
        persisted: State,
        /// `resumeMode: "rebuild"`.
        rebuild: bool,
    },
    /// `turn` for this turnId.
    Turn(String),
    /// `cancel` (expects `closed`).
    Cancel,
    /// `detach` (expects `detached`).
    Detach,
    /// `reattach` (expects `ready`).
    Reattach,
    /// `status`, `terminal_input`, `terminal_resize`: any status value.
    AnyStatus,
    /// A deliberately bad line: only a correlated failure answers it.
    BadInput,
}

/// The event that answered a request.
#[derive(Debug, Clone, PartialEq)]
pub enum Reply {
    /// A hello event.
    Hello(HelloEvent),
    /// A ready event.
    Ready(ReadyEvent),
    /// A status event.
    Status(StatusEvent),
    /// A failure event.
    Failure(FailureEvent),
}

#[derive(Debug, Clone)]
struct Request {
    kind: RequestKind,
    reply: Option<Reply>,
}

/// How a turn ended.
#[derive(Debug, Clone, PartialEq)]
pub enum TurnEnd {
    /// A final.
    Final(Box<FinalEvent>),
    /// A failure; `pre_ack` when it refused the turn before any ACK.
    Failure {
        /// The failure.
        event: FailureEvent,
        /// Whether it came before the busy ACK.
        pre_ack: bool,
    },
}

/// Where a turn is in its life: the protocol crate's host-side rules.
pub use remote_runner_protocol::lifecycle::host::TurnPhase;
use remote_runner_protocol::lifecycle::host::{
    ScreenFence, ScreenVerdict, TurnEventError, TurnFailureError, judge_turn_failure,
};

/// Counters of one turn's host-executed operations.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OperationStats {
    /// outbound_message events read.
    pub outbound_events: usize,
    /// session_tool events read.
    pub session_tool_events: usize,
    /// Events that repeated an operation id with the same payload.
    pub duplicates: usize,
    /// Events that reused an operation id with a different payload.
    pub conflicts: usize,
    /// Events refused for the per-turn limit.
    pub rate_limited: usize,
    /// Distinct outbound operations admitted (at most the per-turn limit).
    pub distinct_outbound: usize,
    /// Distinct session tools admitted (at most the per-turn limit).
    pub distinct_tools: usize,
    /// Results written back.
    pub results_written: usize,
}

/// One turn the harness sent.
#[derive(Debug, Clone)]
pub struct TurnRecord {
    /// The turn command's requestId.
    pub request_id: String,
    /// Its turnId.
    pub turn_id: String,
    /// Where it is.
    pub phase: TurnPhase,
    /// How it ended.
    pub end: Option<TurnEnd>,
    /// progress events read.
    pub progress: usize,
    /// Operation counters.
    pub stats: OperationStats,
    /// Results scheduled but not yet written.
    pub results_pending: usize,
    operations: HashMap<String, Operation>,
    distinct_outbound: usize,
    distinct_tools: usize,
}

#[derive(Debug, Clone)]
struct Operation {
    fingerprint: String,
    result: OperationResult,
}

#[derive(Debug, Clone)]
enum OperationResult {
    Outbound(OutboundResult),
    Tool(SessionToolResult),
}

/// How the harness answers operations.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OperationPolicy {
    /// delivered / completed.
    #[default]
    Succeed,
    /// rejected.
    Reject,
    /// unknown.
    Unknown,
}

/// The host's view of one provider process.
#[derive(Debug, Default)]
pub struct Tracker {
    requests: HashMap<String, Request>,
    settlements: HashSet<String>,
    turns: Vec<TurnRecord>,
    hello: Option<HelloEvent>,
    state: Option<State>,
    /// Screen generation/sequence fencing (the protocol crate's host-side rules).
    fence: ScreenFence,
    /// Accept failures with neither requestId nor turnId (bad-input scenarios only).
    pub tolerate_uncorrelated: bool,
    /// Uncorrelated failures seen while tolerated.
    pub uncorrelated_failures: usize,
    /// How outbound_message is answered.
    pub outbound_policy: OperationPolicy,
    /// How session_tool is answered.
    pub session_tool_policy: OperationPolicy,
    /// Every terminal_screen read (generation, sequence).
    pub screens: Vec<(u64, u64)>,
    /// Every event read, in order.
    pub events: Vec<Event>,
    warnings: Vec<Warning>,
    result_counter: u64,
}

fn broken(err: ValidationError) -> Violation {
    Violation::new(
        err.rule.as_str(),
        err.to_string(),
        "a state the host can apply",
    )
}

impl Tracker {
    /// Notes that the host wrote a command: a newly raised generation is now applied.
    pub fn command_written(&mut self) {
        self.fence.command_written();
    }

    /// Records a command the harness is about to write.
    pub fn sent(&mut self, request_id: &str, kind: RequestKind) {
        if let RequestKind::Turn(turn_id) = &kind {
            self.turns.push(TurnRecord {
                request_id: request_id.to_owned(),
                turn_id: turn_id.clone(),
                phase: TurnPhase::Submitted,
                end: None,
                progress: 0,
                stats: OperationStats::default(),
                results_pending: 0,
                operations: HashMap::new(),
                distinct_outbound: 0,
                distinct_tools: 0,
            });
        }
        self.requests
            .insert(request_id.to_owned(), Request { kind, reply: None });
    }

    /// Records a settlement command (never answered) the harness wrote.
    pub fn settlement_written(&mut self, request_id: &str, turn_id: &str) {
        self.settlements.insert(request_id.to_owned());
        if let Some(turn) = self.turn_mut(turn_id) {
            turn.results_pending = turn.results_pending.saturating_sub(1);
            turn.stats.results_written += 1;
        }
    }

    /// Drops a scheduled result whose turn ended before it was due (the host does the same).
    pub fn settlement_dropped(&mut self, turn_id: &str) {
        if let Some(turn) = self.turn_mut(turn_id) {
            turn.results_pending = turn.results_pending.saturating_sub(1);
        }
    }

    /// The hello the provider sent.
    pub fn hello(&self) -> Option<&HelloEvent> {
        self.hello.as_ref()
    }

    /// Whether the provider advertised `capability`.
    pub fn has_capability(&self, capability: &str) -> bool {
        self.hello
            .as_ref()
            .is_some_and(|h| h.capabilities.iter().any(|c| c == capability))
    }

    /// The state in force.
    pub fn state(&self) -> Option<&State> {
        self.state.as_ref()
    }

    /// The reply to `request_id`, once it arrived.
    pub fn reply(&self, request_id: &str) -> Option<&Reply> {
        self.requests.get(request_id).and_then(|r| r.reply.as_ref())
    }

    /// The turn with `turn_id`.
    pub fn turn(&self, turn_id: &str) -> Option<&TurnRecord> {
        self.turns.iter().find(|t| t.turn_id == turn_id)
    }

    /// Whether the turn ended.
    pub fn turn_ended(&self, turn_id: &str) -> bool {
        self.turn(turn_id)
            .is_none_or(|t| t.phase == TurnPhase::Ended)
    }

    /// Takes the warnings gathered so far.
    pub fn take_warnings(&mut self) -> Vec<Warning> {
        std::mem::take(&mut self.warnings)
    }

    fn turn_mut(&mut self, turn_id: &str) -> Option<&mut TurnRecord> {
        self.turns.iter_mut().find(|t| t.turn_id == turn_id)
    }

    fn expected_provider(&self, state: &State) -> String {
        self.hello
            .as_ref()
            .map_or_else(|| state.provider.clone(), |h| h.provider.clone())
    }

    /// Checks and applies a state the host would apply.
    fn apply_state(&mut self, next: &State) -> Result<(), Violation> {
        let provider = self.expected_provider(next);
        check_transition(self.state.as_ref(), next, &provider, Transition::Update)
            .map_err(broken)?;
        let raised = self
            .state
            .as_ref()
            .is_none_or(|s| next.generation > s.generation);
        if raised {
            self.fence.generation_raised();
        }
        self.state = Some(next.clone());
        Ok(())
    }

    /// Checks one decoded event against every stateful rule. On success returns the
    /// operation results the host must write back (after its delivery delay).
    pub fn observe(&mut self, event: &Event) -> Result<Vec<(String, Command)>, Violation> {
        self.events.push(event.clone());
        if self.hello.is_none()
            && !matches!(
                event,
                Event::Hello(_) | Event::Failure(_) | Event::Status(_)
            )
        {
            return Err(Violation::new(
                rule::EVENT_BEFORE_HANDSHAKE,
                format!("{} event before the hello reply", event.type_name()),
                "nothing but the hello reply until the handshake is done",
            ));
        }
        match event {
            Event::Hello(e) => self.on_hello(e).map(|()| Vec::new()),
            Event::Ready(e) => self.on_ready(e).map(|()| Vec::new()),
            Event::Status(e) => self.on_status(e).map(|()| Vec::new()),
            Event::Failure(e) => self.on_failure(e).map(|()| Vec::new()),
            Event::Progress(e) => {
                self.active_turn(&e.turn_id, "progress")?.progress += 1;
                Ok(Vec::new())
            }
            Event::Final(e) => self.on_final(e).map(|()| Vec::new()),
            Event::LineageChanged(e) => self.apply_state(&e.state).map(|()| Vec::new()),
            Event::AccessUrl(_) => Ok(Vec::new()),
            Event::TerminalScreen(e) => self
                .on_screen(e.generation, e.sequence)
                .map(|()| Vec::new()),
            Event::OutboundMessage(e) => {
                let fingerprint = serde_json::json!([
                    e.turn_id,
                    e.generation,
                    e.content,
                    e.response_kind,
                    e.mention
                ])
                .to_string();
                self.on_operation(
                    Op::Outbound,
                    &e.operation_id,
                    &e.turn_id,
                    e.generation,
                    fingerprint,
                )
            }
            Event::SessionTool(e) => {
                let fingerprint =
                    serde_json::json!([e.turn_id, e.generation, e.request]).to_string();
                self.on_operation(
                    Op::Tool,
                    &e.operation_id,
                    &e.turn_id,
                    e.generation,
                    fingerprint,
                )
            }
        }
    }

    /// Finds the pending, not yet answered request for a reply event.
    fn pending(&mut self, request_id: &str, what: &str) -> Result<&mut Request, Violation> {
        if self.settlements.contains(request_id) {
            return Err(Violation::new(
                rule::REPLY_TO_SETTLEMENT,
                format!("{what} answers {request_id:?}, an operation result"),
                "no reply at all to outbound_message_result / session_tool_result",
            ));
        }
        match self.requests.get_mut(request_id) {
            None => Err(Violation::new(
                rule::UNKNOWN_REQUEST_ID,
                format!("{what} carries requestId {request_id:?}, which the host never sent"),
                "requestId echoing a command the host sent",
            )),
            Some(r) if r.reply.is_some() => Err(Violation::new(
                rule::REQUEST_ALREADY_ANSWERED,
                format!("{what} answers {request_id:?}, which was already answered"),
                "exactly one reply per request (one busy ACK per turn)",
            )),
            Some(r) => Ok(r),
        }
    }

    fn on_hello(&mut self, e: &HelloEvent) -> Result<(), Violation> {
        let request = self.pending(&e.request_id, "hello")?;
        let RequestKind::Hello(required) = request.kind.clone() else {
            return Err(wrong_reply("hello", &request.kind));
        };
        request.reply = Some(Reply::Hello(e.clone()));
        if let Some(missing) = required.iter().find(|c| !e.capabilities.contains(c)) {
            return Err(Violation::new(
                rule::MISSING_REQUIRED_CAPABILITY,
                format!("hello does not list the required capability {missing:?}"),
                format!("capabilities including every required one: {required:?}"),
            ));
        }
        self.hello = Some(e.clone());
        Ok(())
    }

    fn on_ready(&mut self, e: &ReadyEvent) -> Result<(), Violation> {
        let request = self.pending(&e.request_id, "ready")?;
        let kind = request.kind.clone();
        request.reply = Some(Reply::Ready(e.clone()));
        let provider = self.expected_provider(&e.state);
        match kind {
            RequestKind::Start => self.apply_state(&e.state),
            RequestKind::Resume { persisted, rebuild } => {
                let transition = if rebuild {
                    Transition::RebuildReady
                } else {
                    Transition::Update
                };
                check_transition(Some(&persisted), &e.state, &provider, transition)
                    .map_err(broken)?;
                if let Some(thread) = &persisted.agent_thread_id
                    && e.state.agent_thread_id.as_ref() != Some(thread)
                {
                    return Err(Violation::new(
                        rule::AGENT_THREAD_ID_NOT_KEPT,
                        format!(
                            "resume ready has agentThreadId {:?}; the persisted state had {thread:?}",
                            e.state.agent_thread_id
                        ),
                        "agentThreadId (the conversation) kept across resume and rebuild",
                    ));
                }
                if self.state.is_none() {
                    self.state = Some(persisted.clone());
                }
                self.apply_state(&e.state)?;
                if e.state.generation > persisted.generation {
                    self.fence.raised_by_ready(e.state.generation);
                }
                Ok(())
            }
            other => Err(wrong_reply("ready", &other)),
        }
    }

    fn on_status(&mut self, e: &StatusEvent) -> Result<(), Violation> {
        let request = self.pending(&e.request_id, "status")?;
        let kind = request.kind.clone();
        let wanted = match &kind {
            RequestKind::Turn(_) => Some(SessionStatus::Busy),
            RequestKind::Cancel => Some(SessionStatus::Closed),
            RequestKind::Detach => Some(SessionStatus::Detached),
            RequestKind::Reattach => Some(SessionStatus::Ready),
            RequestKind::AnyStatus => None,
            other => return Err(wrong_reply("status", other)),
        };
        if let Some(wanted) = wanted
            && wanted != e.status
        {
            return Err(Violation::new(
                rule::UNEXPECTED_STATUS_VALUE,
                format!("status {:?} answers a {}", e.status, kind_name(&kind)),
                format!("status {wanted:?} (or a correlated failure)"),
            ));
        }
        request.reply = Some(Reply::Status(e.clone()));
        if let RequestKind::Turn(turn_id) = &kind {
            if let Some(other) = self
                .turns
                .iter()
                .find(|t| t.phase == TurnPhase::Acked && &t.turn_id != turn_id)
            {
                return Err(Violation::new(
                    rule::TURN_OVERLAP,
                    format!(
                        "turn {turn_id:?} was ACKed while turn {:?} is still running",
                        other.turn_id
                    ),
                    "one turn at a time: refuse a second turn with a correlated failure",
                ));
            }
            if let Some(turn) = self.turn_mut(turn_id) {
                turn.phase = TurnPhase::Acked;
            }
        }
        if matches!(
            kind,
            RequestKind::Cancel | RequestKind::Detach | RequestKind::Reattach
        ) && let Some(state) = &e.state
        {
            self.apply_state(state)?;
        }
        Ok(())
    }

    fn on_failure(&mut self, e: &FailureEvent) -> Result<(), Violation> {
        match (&e.request_id, &e.turn_id) {
            (None, None) if self.tolerate_uncorrelated => {
                self.uncorrelated_failures += 1;
                Ok(())
            }
            (None, None) => Err(Violation::new(
                rule::UNCORRELATED_FAILURE,
                format!("failure {:?} carries neither requestId nor turnId", e.code),
                "a failure correlated by requestId (before the ACK) or turnId",
            )),
            (Some(request_id), turn_id) => {
                let turn_of_request = match self.requests.get(request_id) {
                    Some(Request {
                        kind: RequestKind::Turn(t),
                        ..
                    }) => Some(t.clone()),
                    _ => None,
                };
                match turn_of_request {
                    Some(turn) => self.turn_failure(&turn, turn_id.as_deref(), e, true),
                    None => {
                        let request = self.pending(request_id, "failure")?;
                        request.reply = Some(Reply::Failure(e.clone()));
                        Ok(())
                    }
                }
            }
            (None, Some(turn_id)) => {
                if self.turn(turn_id).is_none() {
                    return Err(unknown_turn(turn_id, "failure"));
                }
                self.turn_failure(&turn_id.clone(), Some(turn_id), e, false)
            }
        }
    }

    /// A failure for the turn `turn` (found through its requestId when `by_request`).
    fn turn_failure(
        &mut self,
        turn: &str,
        event_turn_id: Option<&str>,
        e: &FailureEvent,
        by_request: bool,
    ) -> Result<(), Violation> {
        let record = self
            .turn(turn)
            .cloned()
            .ok_or_else(|| unknown_turn(turn, "failure"))?;
        let matches = event_turn_id.map(|id| id == turn);
        match judge_turn_failure(record.phase, by_request, matches) {
            Err(TurnFailureError::TurnIdMismatch) => Err(Violation::new(
                rule::TURN_ID_MISMATCH,
                format!(
                    "failure has turnId {:?} but its requestId belongs to turn {turn:?}",
                    event_turn_id.unwrap_or_default()
                ),
                "the turnId of the turn the requestId started",
            )),
            Err(TurnFailureError::NotActive) => Err(Violation::new(
                rule::TURN_NOT_ACTIVE,
                format!("failure for turn {turn:?}, which already ended"),
                "nothing more for a turn after its final or failure",
            )),
            Err(TurnFailureError::PostAckWithoutTurnId) => Err(Violation::new(
                rule::POST_ACK_FAILURE_WITHOUT_TURN_ID,
                format!(
                    "failure {:?} after the busy ACK carries only the requestId",
                    e.code
                ),
                "a failure after the ACK carries turnId (requestId optional)",
            )),
            Ok(pre_ack) => {
                if pre_ack && let Some(request) = self.requests.get_mut(&record.request_id) {
                    request.reply = Some(Reply::Failure(e.clone()));
                }
                if let Some(t) = self.turn_mut(turn) {
                    t.phase = TurnPhase::Ended;
                    t.end = Some(TurnEnd::Failure {
                        event: e.clone(),
                        pre_ack,
                    });
                }
                Ok(())
            }
        }
    }

    fn active_turn(&mut self, turn_id: &str, what: &str) -> Result<&mut TurnRecord, Violation> {
        let Some(turn) = self.turn_mut(turn_id) else {
            return Err(unknown_turn(turn_id, what));
        };
        match turn.phase.admit_event() {
            Err(TurnEventError::BeforeAck) => Err(Violation::new(
                rule::EVENT_BEFORE_ACK,
                format!("{what} for turn {turn_id:?} before its busy ACK"),
                "status busy with the turn's requestId before any progress, final or operation",
            )),
            Err(TurnEventError::NotActive) => Err(Violation::new(
                rule::TURN_NOT_ACTIVE,
                format!("{what} for turn {turn_id:?}, which already ended"),
                "events only for the active turn",
            )),
            Ok(()) => Ok(turn),
        }
    }

    fn on_final(&mut self, e: &FinalEvent) -> Result<(), Violation> {
        let turn = self.active_turn(&e.turn_id, "final")?;
        if turn.results_pending > 0 {
            return Err(Violation::new(
                rule::FINAL_BEFORE_RESULTS,
                format!(
                    "final for turn {:?} while {} host result(s) were not yet written back",
                    e.turn_id, turn.results_pending
                ),
                "final only after every outbound_message_result / session_tool_result arrived",
            ));
        }
        if let Some(state) = &e.state {
            self.apply_state(state)?;
        }
        if let Some(usage) = &e.usage {
            let Some(generation) = self.state.as_ref().map(|s| s.generation) else {
                return Err(Violation::new(
                    rule::NO_STATE_YET,
                    "final.usage before any state",
                    "usage only once a state (ready) is in force",
                ));
            };
            usage.check_generation(generation).map_err(|err| {
                Violation::new(
                    err.rule.as_str(),
                    err.to_string(),
                    "usage for the current generation",
                )
            })?;
        }
        if let Some(turn) = self.turn_mut(&e.turn_id) {
            turn.phase = TurnPhase::Ended;
            turn.end = Some(TurnEnd::Final(Box::new(e.clone())));
        }
        Ok(())
    }

    fn on_screen(&mut self, generation: u64, sequence: u64) -> Result<(), Violation> {
        self.screens.push((generation, sequence));
        let current = self.state.as_ref().map(|s| s.generation);
        match self.fence.observe(current, generation, sequence) {
            ScreenVerdict::Apply => Ok(()),
            ScreenVerdict::AheadOfState {
                current: Some(current),
            } => Err(Violation::new(
                rule::SCREEN_GENERATION_AHEAD,
                format!("terminal_screen for generation {generation}; the state is at {current}"),
                "screens only for the state's generation (or older, which are ignored)",
            )),
            ScreenVerdict::AheadOfState { current: None } => Err(Violation::new(
                rule::SCREEN_GENERATION_AHEAD,
                format!("terminal_screen for generation {generation} before any state"),
                "screens only after ready",
            )),
            ScreenVerdict::IgnoredStale { current } => {
                self.warnings.push(Warning {
                    rule: rule::STALE_SCREEN_IGNORED.into(),
                    message: format!(
                        "screen of generation {generation} while the state is at {current}; \
                         the host ignores it"
                    ),
                    line: None,
                });
                Ok(())
            }
            ScreenVerdict::EarlyNewGeneration => Err(Violation::new(
                rule::EARLY_NEW_GENERATION_SCREEN,
                format!(
                    "terminal_screen of generation {generation} right after the ready that \
                     raised it, before the host's next command"
                ),
                "no screen of a newly raised generation until the host's next command arrives \
                 (the real host applies ready asynchronously and kills the provider)",
            )),
            ScreenVerdict::IgnoredSequence { last } => {
                self.warnings.push(Warning {
                    rule: rule::SCREEN_SEQUENCE_NOT_INCREASING.into(),
                    message: format!(
                        "screen sequence {sequence} after {last} at generation {generation}; \
                         the host ignores it"
                    ),
                    line: None,
                });
                Ok(())
            }
        }
    }

    fn on_operation(
        &mut self,
        op: Op,
        operation_id: &str,
        turn_id: &str,
        generation: u64,
        fingerprint: String,
    ) -> Result<Vec<(String, Command)>, Violation> {
        let (capability, what) = match op {
            Op::Outbound => ("outbound_message", "outbound_message"),
            Op::Tool => ("session_tool", "session_tool"),
        };
        if !self.has_capability(capability) {
            return Err(Violation::new(
                rule::CAPABILITY_NOT_ADVERTISED,
                format!("{what} without the {capability:?} capability in hello"),
                format!("advertise {capability:?} in hello before sending {what}"),
            ));
        }
        let state_generation = self.state.as_ref().map(|s| s.generation);
        if state_generation != Some(generation) {
            return Err(Violation::new(
                rule::OPERATION_GENERATION_MISMATCH,
                format!("{what} for generation {generation}; the state is at {state_generation:?}"),
                "the current state generation",
            ));
        }
        let outbound_policy = self.outbound_policy;
        let tool_policy = self.session_tool_policy;
        self.result_counter += 1;
        let counter = self.result_counter;
        let turn = self.active_turn(turn_id, what)?;
        match op {
            Op::Outbound => turn.stats.outbound_events += 1,
            Op::Tool => turn.stats.session_tool_events += 1,
        }
        let result = match turn.operations.get(operation_id) {
            Some(existing) if existing.fingerprint == fingerprint => {
                turn.stats.duplicates += 1;
                existing.result.clone()
            }
            Some(_) => {
                turn.stats.conflicts += 1;
                refusal(
                    op,
                    "operation_id_conflict",
                    "the operation id was reused with a different payload",
                )
            }
            None => {
                let (count, limit, code) = match op {
                    Op::Outbound => (
                        &mut turn.distinct_outbound,
                        OUTBOUND_LIMIT_PER_TURN,
                        "outbound_rate_limited",
                    ),
                    Op::Tool => (
                        &mut turn.distinct_tools,
                        SESSION_TOOL_LIMIT_PER_TURN,
                        "session_tool_rate_limited",
                    ),
                };
                let result = if *count >= limit {
                    turn.stats.rate_limited += 1;
                    refusal(op, code, "too many operations in one turn")
                } else {
                    *count += 1;
                    match op {
                        Op::Outbound => turn.stats.distinct_outbound = *count,
                        Op::Tool => turn.stats.distinct_tools = *count,
                    }
                    let policy = match op {
                        Op::Outbound => outbound_policy,
                        Op::Tool => tool_policy,
                    };
                    answer(op, policy, counter)
                };
                turn.operations.insert(
                    operation_id.to_owned(),
                    Operation {
                        fingerprint,
                        result: result.clone(),
                    },
                );
                result
            }
        };
        turn.results_pending += 1;
        let request_id = match op {
            Op::Outbound => format!("outbound-message-result:{}", uuid::Uuid::new_v4()),
            Op::Tool => format!("session-tool-result:{}", uuid::Uuid::new_v4()),
        };
        let command = match result {
            OperationResult::Outbound(result) => {
                Command::OutboundMessageResult(OutboundMessageResultCommand {
                    request_id,
                    operation_id: operation_id.to_owned(),
                    turn_id: turn_id.to_owned(),
                    generation,
                    result,
                })
            }
            OperationResult::Tool(result) => Command::SessionToolResult(SessionToolResultCommand {
                request_id,
                operation_id: operation_id.to_owned(),
                turn_id: turn_id.to_owned(),
                generation,
                result,
            }),
        };
        Ok(vec![(turn_id.to_owned(), command)])
    }
}

#[derive(Debug, Clone, Copy)]
enum Op {
    Outbound,
    Tool,
}

fn refusal(op: Op, code: &str, message: &str) -> OperationResult {
    match op {
        Op::Outbound => OperationResult::Outbound(OutboundResult::Rejected {
            code: code.into(),
            message: message.into(),
        }),
        Op::Tool => OperationResult::Tool(SessionToolResult::Rejected {
            code: code.into(),
            message: message.into(),
        }),
    }
}

fn answer(op: Op, policy: OperationPolicy, counter: u64) -> OperationResult {
    match (op, policy) {
        (Op::Outbound, OperationPolicy::Succeed) => {
            OperationResult::Outbound(OutboundResult::Delivered {
                message_id: format!("om_conformance_{counter}"),
            })
        }
        (Op::Tool, OperationPolicy::Succeed) => {
            OperationResult::Tool(SessionToolResult::Completed {
                exit_code: 0,
                stdout: "{\"total\":0,\"messages\":[]}\n".into(),
                stderr: String::new(),
                attachments: None,
            })
        }
        (Op::Outbound, OperationPolicy::Reject) => refusal(
            op,
            "outbound_delivery_unavailable",
            "the conformance host refused this delivery on purpose",
        ),
        (Op::Tool, OperationPolicy::Reject) => refusal(
            op,
            "session_tool_unavailable",
            "the conformance host refused this tool on purpose",
        ),
        (Op::Outbound, OperationPolicy::Unknown) => {
            OperationResult::Outbound(OutboundResult::Unknown {
                code: "outbound_delivery_unknown".into(),
                message: "the conformance host cannot prove the delivery".into(),
            })
        }
        (Op::Tool, OperationPolicy::Unknown) => OperationResult::Tool(SessionToolResult::Unknown {
            code: "session_tool_execution_unknown".into(),
            message: "the conformance host cannot prove the tool ran".into(),
        }),
    }
}

fn kind_name(kind: &RequestKind) -> &'static str {
    match kind {
        RequestKind::Hello(_) => "hello",
        RequestKind::Start => "start",
        RequestKind::Resume { .. } => "resume",
        RequestKind::Turn(_) => "turn",
        RequestKind::Cancel => "cancel",
        RequestKind::Detach => "detach",
        RequestKind::Reattach => "reattach",
        RequestKind::AnyStatus => "status/terminal command",
        RequestKind::BadInput => "bad input line",
    }
}

fn wrong_reply(event: &str, kind: &RequestKind) -> Violation {
    let expected = match kind {
        RequestKind::Hello(_) => "a hello event",
        RequestKind::Start | RequestKind::Resume { .. } => "a ready event",
        RequestKind::Turn(_) => "status busy (the ACK) or a pre-ACK failure",
        RequestKind::BadInput => "a failure with the line's requestId",
        _ => "a status event",
    };
    Violation::new(
        rule::WRONG_REPLY_TYPE,
        format!("{event} event answers a {}", kind_name(kind)),
        format!("{expected} (or a correlated failure)"),
    )
}

fn unknown_turn(turn_id: &str, what: &str) -> Violation {
    Violation::new(
        rule::UNKNOWN_TURN_ID,
        format!("{what} names turn {turn_id:?}, which the host never sent"),
        "the turnId of the active turn",
    )
}
