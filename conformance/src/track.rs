//! The host's view of one provider process: what the harness sent and what the provider
//! answered. The rules themselves (correlation, turn lifecycle, state transitions, terminal
//! fencing, host-executed operations) are the protocol crate's host-side lifecycle
//! (`remote_runner_protocol::lifecycle::host`); this module feeds them every command written
//! and every event read, turns their verdicts into violations, and keeps the counters and
//! replies scenarios look at.

use std::collections::HashMap;

use remote_runner_protocol::lifecycle::host::{
    AckError, CorrelationError, HostState, HostTurns, OperationRefusal, OperationVerdict,
    ReadyError, ReplyType, RequestClass, Requests, ScreenVerdict, TurnEventError, TurnFailureError,
    TurnRefusal, UsageError, allowed_before_hello, missing_capability,
};
use remote_runner_protocol::{
    Command, Event, FailureEvent, FinalEvent, HelloEvent, OperationKind,
    OutboundMessageResultCommand, OutboundResult, ReadyEvent, SessionToolResult,
    SessionToolResultCommand, State, StatusEvent, ValidationError,
};

use crate::violation::{Violation, Warning, rule};

/// Where a turn is in its life: the protocol crate's host-side rules.
pub use remote_runner_protocol::lifecycle::host::TurnPhase;

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

impl RequestKind {
    /// The protocol's class of the request.
    pub fn class(&self) -> RequestClass {
        match self {
            RequestKind::Hello(_) => RequestClass::Hello,
            RequestKind::Start => RequestClass::Start,
            RequestKind::Resume { .. } => RequestClass::Resume,
            RequestKind::Turn(_) => RequestClass::Turn,
            RequestKind::Cancel => RequestClass::Cancel,
            RequestKind::Detach => RequestClass::Detach,
            RequestKind::Reattach => RequestClass::Reattach,
            RequestKind::AnyStatus => RequestClass::AnyStatus,
            RequestKind::BadInput => RequestClass::BadInput,
        }
    }
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
    /// How it ended.
    pub end: Option<TurnEnd>,
    /// progress events read.
    pub progress: usize,
    /// Operation counters.
    pub stats: OperationStats,
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
    requests: Requests,
    kinds: HashMap<String, RequestKind>,
    replies: HashMap<String, Reply>,
    turns: Vec<TurnRecord>,
    book: HostTurns<OperationResult>,
    hello: Option<HelloEvent>,
    host_state: HostState,
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
        self.host_state.command_written();
    }

    /// Records a command the harness is about to write.
    pub fn sent(&mut self, request_id: &str, kind: RequestKind) {
        if let RequestKind::Turn(turn_id) = &kind {
            self.book.submitted(request_id, turn_id);
            self.turns.push(TurnRecord {
                request_id: request_id.to_owned(),
                turn_id: turn_id.clone(),
                end: None,
                progress: 0,
                stats: OperationStats::default(),
            });
        }
        self.requests.sent(request_id, kind.class());
        self.kinds.insert(request_id.to_owned(), kind);
    }

    /// Records a settlement command (never answered) the harness wrote.
    pub fn settlement_written(&mut self, request_id: &str, turn_id: &str) {
        self.requests.settlement_written(request_id);
        self.book.result_written(turn_id);
        if let Some(turn) = self.turn_mut(turn_id) {
            turn.stats.results_written += 1;
        }
    }

    /// Drops a scheduled result whose turn ended before it was due (the host does the same).
    pub fn settlement_dropped(&mut self, turn_id: &str) {
        self.book.result_dropped(turn_id);
    }

    /// The hello the provider sent.
    pub fn hello(&self) -> Option<&HelloEvent> {
        self.hello.as_ref()
    }

    /// Whether the provider advertised `capability`.
    pub fn has_capability(&self, capability: &str) -> bool {
        self.host_state.has_capability(capability)
    }

    /// The state in force.
    pub fn state(&self) -> Option<&State> {
        self.host_state.state()
    }

    /// The reply to `request_id`, once it arrived.
    pub fn reply(&self, request_id: &str) -> Option<&Reply> {
        self.replies.get(request_id)
    }

    /// The turn with `turn_id`.
    pub fn turn(&self, turn_id: &str) -> Option<&TurnRecord> {
        self.turns.iter().find(|t| t.turn_id == turn_id)
    }

    /// Where the turn with `turn_id` is.
    pub fn phase(&self, turn_id: &str) -> Option<TurnPhase> {
        self.book.phase(turn_id)
    }

    /// Whether the turn ended.
    pub fn turn_ended(&self, turn_id: &str) -> bool {
        self.phase(turn_id).is_none_or(|p| p == TurnPhase::Ended)
    }

    /// Results scheduled for the turn and not yet written.
    pub fn results_pending(&self, turn_id: &str) -> usize {
        self.book.results_pending(turn_id)
    }

    /// Takes the warnings gathered so far.
    pub fn take_warnings(&mut self) -> Vec<Warning> {
        std::mem::take(&mut self.warnings)
    }

    fn turn_mut(&mut self, turn_id: &str) -> Option<&mut TurnRecord> {
        self.turns.iter_mut().find(|t| t.turn_id == turn_id)
    }

    fn apply_state(&mut self, next: &State) -> Result<(), Violation> {
        self.host_state.apply(next).map_err(broken)
    }

    /// Checks one decoded event against every stateful rule. On success returns the
    /// operation results the host must write back (after its delivery delay).
    pub fn observe(&mut self, event: &Event) -> Result<Vec<(String, Command)>, Violation> {
        self.events.push(event.clone());
        if self.hello.is_none() && !allowed_before_hello(event) {
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
                self.active_turn(&e.turn_id, "progress")?;
                if let Some(turn) = self.turn_mut(&e.turn_id) {
                    turn.progress += 1;
                }
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
                    OperationKind::Outbound,
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
                    OperationKind::SessionTool,
                    &e.operation_id,
                    &e.turn_id,
                    e.generation,
                    fingerprint,
                )
            }
        }
    }

    /// Correlates a reply with the request it answers and returns that request.
    fn correlate(&mut self, request_id: &str, reply: ReplyType) -> Result<RequestKind, Violation> {
        let what = reply.name();
        match self.requests.reply(request_id, reply) {
            Ok(_) => Ok(self
                .kinds
                .get(request_id)
                .cloned()
                .unwrap_or(RequestKind::AnyStatus)),
            Err(CorrelationError::ReplyToSettlement) => Err(Violation::new(
                rule::REPLY_TO_SETTLEMENT,
                format!("{what} answers {request_id:?}, an operation result"),
                "no reply at all to outbound_message_result / session_tool_result",
            )),
            Err(CorrelationError::UnknownRequestId) => Err(Violation::new(
                rule::UNKNOWN_REQUEST_ID,
                format!("{what} carries requestId {request_id:?}, which the host never sent"),
                "requestId echoing a command the host sent",
            )),
            Err(CorrelationError::AlreadyAnswered) => Err(Violation::new(
                rule::REQUEST_ALREADY_ANSWERED,
                format!("{what} answers {request_id:?}, which was already answered"),
                "exactly one reply per request (one busy ACK per turn)",
            )),
            Err(CorrelationError::WrongReply { class }) => Err(Violation::new(
                rule::WRONG_REPLY_TYPE,
                format!("{what} event answers a {}", class.name()),
                format!("{} (or a correlated failure)", class.expected_reply()),
            )),
            Err(CorrelationError::UnexpectedStatus { class, wanted }) => {
                let got = match reply {
                    ReplyType::Status(status) => format!("{status:?}"),
                    other => other.name().to_owned(),
                };
                Err(Violation::new(
                    rule::UNEXPECTED_STATUS_VALUE,
                    format!("status {got} answers a {}", class.name()),
                    format!("status {wanted:?} (or a correlated failure)"),
                ))
            }
        }
    }

    fn on_hello(&mut self, e: &HelloEvent) -> Result<(), Violation> {
        // The protocol's correlation lets a hello answer only a hello request.
        let required = match self.correlate(&e.request_id, ReplyType::Hello)? {
            RequestKind::Hello(required) => required,
            _ => Vec::new(),
        };
        self.replies
            .insert(e.request_id.clone(), Reply::Hello(e.clone()));
        if let Some(missing) = missing_capability(&required, &e.capabilities) {
            return Err(Violation::new(
                rule::MISSING_REQUIRED_CAPABILITY,
                format!("hello does not list the required capability {missing:?}"),
                format!("capabilities including every required one: {required:?}"),
            ));
        }
        self.host_state.hello(e);
        self.hello = Some(e.clone());
        Ok(())
    }

    fn on_ready(&mut self, e: &ReadyEvent) -> Result<(), Violation> {
        let kind = self.correlate(&e.request_id, ReplyType::Ready)?;
        self.replies
            .insert(e.request_id.clone(), Reply::Ready(e.clone()));
        let RequestKind::Resume { persisted, rebuild } = kind else {
            return self.apply_state(&e.state);
        };
        match self.host_state.apply_resume(&persisted, &e.state, rebuild) {
            Ok(()) => Ok(()),
            Err(ReadyError::Transition(err)) => Err(broken(err)),
            Err(ReadyError::AgentThreadChanged { persisted, got }) => Err(Violation::new(
                rule::AGENT_THREAD_ID_NOT_KEPT,
                format!(
                    "resume ready has agentThreadId {got:?}; the persisted state had {persisted:?}"
                ),
                "agentThreadId (the conversation) kept across resume and rebuild",
            )),
        }
    }

    fn on_status(&mut self, e: &StatusEvent) -> Result<(), Violation> {
        let kind = self.correlate(&e.request_id, ReplyType::Status(e.status))?;
        self.replies
            .insert(e.request_id.clone(), Reply::Status(e.clone()));
        if let RequestKind::Turn(turn_id) = &kind
            && let Err(AckError::Overlap { running }) = self.book.acked(turn_id)
        {
            return Err(Violation::new(
                rule::TURN_OVERLAP,
                format!("turn {turn_id:?} was ACKed while turn {running:?} is still running"),
                "one turn at a time: refuse a second turn with a correlated failure",
            ));
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
            (Some(request_id), turn_id) => match self.correlate(request_id, ReplyType::Failure)? {
                RequestKind::Turn(turn) => self.turn_failure(&turn, turn_id.as_deref(), e, true),
                _ => {
                    self.replies
                        .insert(request_id.clone(), Reply::Failure(e.clone()));
                    Ok(())
                }
            },
            (None, Some(turn_id)) => self.turn_failure(turn_id, Some(turn_id), e, false),
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
        let pre_ack = match self.book.failure(turn, by_request, event_turn_id) {
            Ok(pre_ack) => pre_ack,
            Err(TurnRefusal::Unknown) => return Err(unknown_turn(turn, "failure")),
            Err(TurnRefusal::Failure(TurnFailureError::TurnIdMismatch)) => {
                return Err(Violation::new(
                    rule::TURN_ID_MISMATCH,
                    format!(
                        "failure has turnId {:?} but its requestId belongs to turn {turn:?}",
                        event_turn_id.unwrap_or_default()
                    ),
                    "the turnId of the turn the requestId started",
                ));
            }
            Err(TurnRefusal::Failure(TurnFailureError::NotActive)) | Err(TurnRefusal::Event(_)) => {
                return Err(Violation::new(
                    rule::TURN_NOT_ACTIVE,
                    format!("failure for turn {turn:?}, which already ended"),
                    "nothing more for a turn after its final or failure",
                ));
            }
            Err(TurnRefusal::Failure(TurnFailureError::PostAckWithoutTurnId)) => {
                return Err(Violation::new(
                    rule::POST_ACK_FAILURE_WITHOUT_TURN_ID,
                    format!(
                        "failure {:?} after the busy ACK carries only the requestId",
                        e.code
                    ),
                    "a failure after the ACK carries turnId (requestId optional)",
                ));
            }
        };
        let record = self.turn_mut(turn).expect("the protocol knows the turn");
        record.end = Some(TurnEnd::Failure {
            event: e.clone(),
            pre_ack,
        });
        let request_id = record.request_id.clone();
        if pre_ack {
            self.requests.answered(&request_id);
            self.replies.insert(request_id, Reply::Failure(e.clone()));
        }
        Ok(())
    }

    /// Checks that `turn_id` is ACKed and not ended.
    fn active_turn(&self, turn_id: &str, what: &str) -> Result<(), Violation> {
        self.book
            .admit_event(turn_id)
            .map_err(|refusal| turn_refused(refusal, turn_id, what))
    }

    fn on_final(&mut self, e: &FinalEvent) -> Result<(), Violation> {
        match self.book.admit_final(&e.turn_id) {
            Ok(()) => {}
            Err(Err(refusal)) => return Err(turn_refused(refusal, &e.turn_id, "final")),
            Err(Ok(owed)) => {
                return Err(Violation::new(
                    rule::FINAL_BEFORE_RESULTS,
                    format!(
                        "final for turn {:?} while {owed} host result(s) were not yet written back",
                        e.turn_id
                    ),
                    "final only after every outbound_message_result / session_tool_result arrived",
                ));
            }
        }
        if let Some(state) = &e.state {
            self.apply_state(state)?;
        }
        match e
            .usage
            .as_ref()
            .map(|usage| self.host_state.check_usage(usage))
        {
            None | Some(Ok(())) => {}
            Some(Err(UsageError::NoState)) => {
                return Err(Violation::new(
                    rule::NO_STATE_YET,
                    "final.usage before any state",
                    "usage only once a state (ready) is in force",
                ));
            }
            Some(Err(UsageError::Generation(err))) => {
                return Err(Violation::new(
                    err.rule.as_str(),
                    err.to_string(),
                    "usage for the current generation",
                ));
            }
        }
        self.book.ended(&e.turn_id);
        if let Some(turn) = self.turn_mut(&e.turn_id) {
            turn.end = Some(TurnEnd::Final(Box::new(e.clone())));
        }
        Ok(())
    }

    fn on_screen(&mut self, generation: u64, sequence: u64) -> Result<(), Violation> {
        self.screens.push((generation, sequence));
        match self.host_state.screen(generation, sequence) {
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
        kind: OperationKind,
        operation_id: &str,
        turn_id: &str,
        generation: u64,
        fingerprint: String,
    ) -> Result<Vec<(String, Command)>, Violation> {
        let what = kind.capability();
        match self.host_state.admit_operation(kind, generation) {
            Ok(()) => {}
            Err(OperationRefusal::NotAdvertised) => {
                return Err(Violation::new(
                    rule::CAPABILITY_NOT_ADVERTISED,
                    format!("{what} without the {what:?} capability in hello"),
                    format!("advertise {what:?} in hello before sending {what}"),
                ));
            }
            Err(OperationRefusal::GenerationMismatch { current }) => {
                return Err(Violation::new(
                    rule::OPERATION_GENERATION_MISMATCH,
                    format!("{what} for generation {generation}; the state is at {current:?}"),
                    "the current state generation",
                ));
            }
        }
        let policy = match kind {
            OperationKind::Outbound => self.outbound_policy,
            OperationKind::SessionTool => self.session_tool_policy,
        };
        self.result_counter += 1;
        let counter = self.result_counter;
        let (verdict, result) = self
            .book
            .operation(
                turn_id,
                kind,
                operation_id,
                fingerprint,
                |verdict| match verdict {
                    OperationVerdict::New | OperationVerdict::Duplicate => {
                        answer(kind, policy, counter)
                    }
                    OperationVerdict::Conflict { code } => refusal(
                        kind,
                        code,
                        "the operation id was reused with a different payload",
                    ),
                    OperationVerdict::RateLimited { code } => {
                        refusal(kind, code, "too many operations in one turn")
                    }
                },
            )
            .map_err(|refusal| turn_refused(refusal, turn_id, what))?;
        let distinct = self.book.distinct(turn_id, kind);
        let stats = &mut self
            .turn_mut(turn_id)
            .expect("the protocol knows the turn")
            .stats;
        match kind {
            OperationKind::Outbound => {
                stats.outbound_events += 1;
                stats.distinct_outbound = distinct;
            }
            OperationKind::SessionTool => {
                stats.session_tool_events += 1;
                stats.distinct_tools = distinct;
            }
        }
        match verdict {
            OperationVerdict::New => {}
            OperationVerdict::Duplicate => stats.duplicates += 1,
            OperationVerdict::Conflict { .. } => stats.conflicts += 1,
            OperationVerdict::RateLimited { .. } => stats.rate_limited += 1,
        }
        let request_id = match kind {
            OperationKind::Outbound => format!("outbound-message-result:{}", uuid::Uuid::new_v4()),
            OperationKind::SessionTool => format!("session-tool-result:{}", uuid::Uuid::new_v4()),
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

fn refusal(kind: OperationKind, code: &str, message: &str) -> OperationResult {
    match kind {
        OperationKind::Outbound => OperationResult::Outbound(OutboundResult::Rejected {
            code: code.into(),
            message: message.into(),
        }),
        OperationKind::SessionTool => OperationResult::Tool(SessionToolResult::Rejected {
            code: code.into(),
            message: message.into(),
        }),
    }
}

fn answer(kind: OperationKind, policy: OperationPolicy, counter: u64) -> OperationResult {
    match (kind, policy) {
        (OperationKind::Outbound, OperationPolicy::Succeed) => {
            OperationResult::Outbound(OutboundResult::Delivered {
                message_id: format!("om_conformance_{counter}"),
            })
        }
        (OperationKind::SessionTool, OperationPolicy::Succeed) => {
            OperationResult::Tool(SessionToolResult::Completed {
                exit_code: 0,
                stdout: "{\"total\":0,\"messages\":[]}\n".into(),
                stderr: String::new(),
                attachments: None,
            })
        }
        (OperationKind::Outbound, OperationPolicy::Reject) => refusal(
            kind,
            "outbound_delivery_unavailable",
            "the conformance host refused this delivery on purpose",
        ),
        (OperationKind::SessionTool, OperationPolicy::Reject) => refusal(
            kind,
            "session_tool_unavailable",
            "the conformance host refused this tool on purpose",
        ),
        (OperationKind::Outbound, OperationPolicy::Unknown) => {
            OperationResult::Outbound(OutboundResult::Unknown {
                code: "outbound_delivery_unknown".into(),
                message: "the conformance host cannot prove the delivery".into(),
            })
        }
        (OperationKind::SessionTool, OperationPolicy::Unknown) => {
            OperationResult::Tool(SessionToolResult::Unknown {
                code: "session_tool_execution_unknown".into(),
                message: "the conformance host cannot prove the tool ran".into(),
            })
        }
    }
}

fn unknown_turn(turn_id: &str, what: &str) -> Violation {
    Violation::new(
        rule::UNKNOWN_TURN_ID,
        format!("{what} names turn {turn_id:?}, which the host never sent"),
        "the turnId of the active turn",
    )
}

fn turn_refused(refusal: TurnRefusal, turn_id: &str, what: &str) -> Violation {
    match refusal {
        TurnRefusal::Unknown => unknown_turn(turn_id, what),
        TurnRefusal::Event(TurnEventError::BeforeAck) => Violation::new(
            rule::EVENT_BEFORE_ACK,
            format!("{what} for turn {turn_id:?} before its busy ACK"),
            "status busy with the turn's requestId before any progress, final or operation",
        ),
        TurnRefusal::Event(TurnEventError::NotActive) | TurnRefusal::Failure(_) => Violation::new(
            rule::TURN_NOT_ACTIVE,
            format!("{what} for turn {turn_id:?}, which already ended"),
            "events only for the active turn",
        ),
    }
}
