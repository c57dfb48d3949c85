//! The reference echo provider's state machine: one input line in, the events to write out.
//! It behaves like the host's own reference runner, except that it never sends a screen of
//! a newly raised generation right after `ready` (the real host kills a provider that does;
//! the protocol crate's `ProviderLifecycle::may_send_screen` says when one may go out).

use remote_runner_protocol::lifecycle::{self, ProviderLifecycle, Refusal};
use remote_runner_protocol::{
    Command, ContextUsage, DecodeErrorKind, Event, FailureStatus, FrameError, HistoryScope,
    LineError, Mention, ResponseKind, ResumeMode, SessionStatus, SessionToolRequest, State,
    TokenCounts, Usage, UsageSnapshot, encode_event,
};
use serde_json::{Map, Value, json};

use crate::mutant::Mutant;

/// The provider name.
pub const PROVIDER: &str = "reference";

/// What to write, or whether to stop.
#[derive(Debug)]
pub enum Output {
    /// One event line.
    Event(Box<Event>),
    /// A raw stdout line (only mutants write these).
    Raw(String),
    /// Exit now (only mutants do this on bad input).
    Exit,
}

impl Output {
    /// The bytes to write, if any.
    pub fn bytes(&self) -> Option<Vec<u8>> {
        match self {
            Output::Event(e) => Some(encode_event(e)),
            Output::Raw(line) => Some(format!("{line}\n").into_bytes()),
            Output::Exit => None,
        }
    }
}

#[derive(Debug)]
struct ActiveTurn {
    turn_id: String,
    request_id: String,
    awaiting: usize,
    results: Vec<Value>,
}

/// The in-memory session.
#[derive(Debug)]
pub struct Reference {
    mutant: Option<Mutant>,
    state: Option<State>,
    /// The protocol's rules (status, generation, the accepted turn), shared with every
    /// provider built on the protocol crate.
    lifecycle: ProviderLifecycle,
    screen: String,
    cols: u64,
    rows: u64,
    last_sequence: u64,
    turn: Option<ActiveTurn>,
    finals: u64,
}

fn ev(event: Event) -> Output {
    Output::Event(Box::new(event))
}

fn failure(
    request_id: Option<&str>,
    turn_id: Option<&str>,
    code: &str,
    message: &str,
    retryable: bool,
) -> Output {
    ev(Event::failure(
        request_id.map(str::to_owned),
        turn_id.map(str::to_owned),
        code,
        message,
        FailureStatus::Failed,
        retryable,
    ))
}

/// Keeps only id-grammar characters, so host-chosen ids can be embedded in ours.
fn id_part(text: &str) -> String {
    let cleaned: String = text
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "._:/-".contains(c) {
                c
            } else {
                '-'
            }
        })
        .take(160)
        .collect();
    if cleaned.is_empty() {
        "x".into()
    } else {
        cleaned
    }
}

fn now_micros() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

impl Reference {
    /// A fresh session with an optional defect.
    pub fn new(mutant: Option<Mutant>) -> Self {
        Reference {
            mutant,
            state: None,
            lifecycle: ProviderLifecycle::new(),
            screen: String::new(),
            cols: 120,
            rows: 40,
            last_sequence: 0,
            turn: None,
            finals: 0,
        }
    }

    fn is(&self, mutant: Mutant) -> bool {
        self.mutant == Some(mutant)
    }

    fn generation(&self) -> u64 {
        self.state.as_ref().map_or(0, |s| s.generation)
    }

    /// A screen of the current generation. Sequences come from the clock, so they keep
    /// increasing across provider restarts within a generation.
    fn screen_event(&mut self) -> Output {
        self.last_sequence = if self.is(Mutant::IgnoredScreens) {
            1
        } else {
            now_micros().max(self.last_sequence + 1)
        };
        let mut generation = self.generation();
        if self.is(Mutant::FutureScreen) {
            generation += 1;
        }
        ev(Event::terminal_screen(
            generation,
            self.last_sequence,
            self.cols,
            self.rows,
            self.screen.clone(),
        ))
    }

    /// Handles one item read from stdin.
    pub fn handle(&mut self, item: Result<Command, FrameError>) -> Vec<Output> {
        match item {
            Ok(command) => self.command(command),
            Err(err) => self.bad_line(&err),
        }
    }

    fn bad_line(&mut self, err: &FrameError) -> Vec<Output> {
        match err {
            FrameError::Decode(decode) => {
                let (rid, tid) = (decode.request_id.as_deref(), decode.turn_id.as_deref());
                match &decode.kind {
                    DecodeErrorKind::InvalidJson { .. } if self.is(Mutant::ExitOnInvalidJson) => {
                        vec![Output::Exit]
                    }
                    DecodeErrorKind::InvalidJson { .. } => {
                        vec![failure(
                            None,
                            None,
                            "invalid_json",
                            "invalid JSON command",
                            false,
                        )]
                    }
                    DecodeErrorKind::ProtocolMismatch { .. } => vec![failure(
                        rid,
                        tid,
                        "protocol_mismatch",
                        "expected botmux.remote-runner v1",
                        false,
                    )],
                    DecodeErrorKind::UnknownType { .. }
                        if self.is(Mutant::UnknownEventForUnknownCommand) =>
                    {
                        let line = json!({"protocol": "botmux.remote-runner", "version": 1,
                            "type": "unsupported", "requestId": rid});
                        vec![Output::Raw(line.to_string())]
                    }
                    DecodeErrorKind::UnknownType { .. } => vec![failure(
                        rid,
                        tid,
                        "unsupported_command",
                        "this provider does not know that command type",
                        false,
                    )],
                    _ => vec![failure(rid, tid, decode.code(), &decode.to_string(), false)],
                }
            }
            FrameError::Line(LineError::TooLong { .. }) => vec![failure(
                None,
                None,
                "line_too_long",
                "command line longer than 4 MiB; it was discarded",
                false,
            )],
            _ => Vec::new(),
        }
    }

    fn command(&mut self, command: Command) -> Vec<Output> {
        self.lifecycle.command_received();
        match command {
            Command::Hello(c) => {
                let mut capabilities = lifecycle::capabilities(true);
                capabilities.extend([
                    "outbound_message",
                    "session_tool",
                    "reference_future_capability",
                ]);
                if self.is(Mutant::DuplicateCapabilities) {
                    capabilities.push("turn");
                }
                if self.is(Mutant::MissingReattach) {
                    capabilities.retain(|c| *c != "reattach");
                }
                let request_id = if self.is(Mutant::HelloWrongRequestId) {
                    "reference-wrong-id".to_owned()
                } else {
                    c.request_id
                };
                let mut out = Vec::new();
                if self.is(Mutant::StdoutNoise) {
                    out.push(Output::Raw("reference provider: handshake".into()));
                }
                out.push(ev(Event::hello(request_id, PROVIDER, capabilities)));
                out
            }
            Command::Start(c) => {
                let mut state = State::new(PROVIDER, 1)
                    .with_remote_session_id(format!("reference:{}", id_part(&c.session_id)));
                if self.is(Mutant::AccessTokenInState) {
                    let mut ps = Map::new();
                    ps.insert("accessToken".into(), json!("not-a-real-token"));
                    state = state.with_provider_state(ps);
                }
                self.lifecycle.ready(state.generation);
                self.state = Some(state.clone());
                self.screen = "reference runner ready\nline two".into();
                let mut out = vec![ev(Event::lineage_changed(state.clone()))];
                if self.is(Mutant::ReadyWithoutRequestId) {
                    let mut value =
                        remote_runner_protocol::event_to_value(&Event::ready(c.request_id, state));
                    if let Some(map) = value.as_object_mut() {
                        map.remove("requestId");
                    }
                    out.push(Output::Raw(value.to_string()));
                } else {
                    out.push(ev(Event::ready(c.request_id, state)));
                }
                out.push(self.screen_event());
                if self.is(Mutant::StatusUnknownRequestId) {
                    out.push(ev(Event::status(
                        "reference-unknown-1",
                        SessionStatus::Ready,
                        None,
                    )));
                }
                out
            }
            Command::Resume(c) => {
                if c.state.provider != PROVIDER {
                    return vec![failure(
                        Some(&c.request_id),
                        None,
                        "state_provider_mismatch",
                        "the persisted state belongs to another provider; start a new session",
                        false,
                    )];
                }
                let mut state = c.state.clone();
                let rebuild = c.mode() == ResumeMode::Rebuild;
                if rebuild {
                    let next = if self.is(Mutant::RebuildSameGeneration) {
                        state.generation
                    } else {
                        state.generation + 1
                    };
                    state.generation = next;
                    state.remote_session_id = Some(format!(
                        "reference:{}:generation-{next}",
                        id_part(&c.session_id)
                    ));
                    if self.is(Mutant::ForgetThreadOnRebuild) {
                        state.agent_thread_id = None;
                    }
                }
                let generation = state.generation;
                if generation > c.state.generation {
                    self.lifecycle.ready_raised(generation);
                } else {
                    self.lifecycle.ready(generation);
                }
                self.state = Some(state.clone());
                self.screen = "reference runner resumed".into();
                let mut out = vec![ev(Event::ready(c.request_id, state))];
                // A screen of a newly raised generation must wait for the host's next command.
                if self.lifecycle.may_send_screen(generation)
                    || self.is(Mutant::ScreenAfterRebuildReady)
                {
                    out.push(self.screen_event());
                }
                out
            }
            Command::Turn(c) => self.turn(c.request_id, c.turn_id, c.content),
            Command::OutboundMessageResult(c) => {
                let result = serde_json::to_value(&c.result).unwrap_or(Value::Null);
                self.operation_result(&c.request_id, &c.turn_id, c.generation, result)
            }
            Command::SessionToolResult(c) => {
                let result = serde_json::to_value(&c.result).unwrap_or(Value::Null);
                self.operation_result(&c.request_id, &c.turn_id, c.generation, result)
            }
            Command::Cancel(c) => {
                if self.is(Mutant::IgnoreCancel) {
                    return Vec::new();
                }
                let mut out = Vec::new();
                if let Some(turn) = self.turn.take() {
                    out.push(ev(Event::failure(
                        None,
                        Some(turn.turn_id),
                        "cancelled",
                        "the session was closed while the turn ran",
                        FailureStatus::Cancelled,
                        false,
                    )));
                }
                let status = if self.is(Mutant::CancelAnsweredDetached) {
                    SessionStatus::Detached
                } else {
                    SessionStatus::Closed
                };
                self.lifecycle.closed();
                out.push(ev(Event::status(c.request_id, status, self.state.clone())));
                out
            }
            Command::Detach(c) => {
                self.lifecycle.detached();
                vec![ev(Event::status(
                    c.request_id,
                    SessionStatus::Detached,
                    self.state.clone(),
                ))]
            }
            Command::Reattach(c) => {
                if let Err(refusal) = self.lifecycle.admit_reattach() {
                    return vec![refused(&c.request_id, None, &refusal)];
                }
                self.lifecycle.reattached();
                vec![ev(Event::status(
                    c.request_id,
                    SessionStatus::Ready,
                    self.state.clone(),
                ))]
            }
            Command::Status(c) => {
                vec![ev(Event::status(
                    c.request_id,
                    self.lifecycle.status(),
                    self.state.clone(),
                ))]
            }
            Command::TerminalInput(c) => {
                if let Err(refusal) = self.lifecycle.admit_terminal(c.generation)
                    && !self.is(Mutant::AnyGenerationInput)
                {
                    return vec![refused(&c.request_id, None, &refusal)];
                }
                self.screen.push_str(&c.data);
                vec![
                    self.screen_event(),
                    ev(Event::status(
                        c.request_id,
                        self.lifecycle.status(),
                        self.state.clone(),
                    )),
                ]
            }
            Command::TerminalResize(c) => {
                if let Err(refusal) = self.lifecycle.admit_terminal(c.generation) {
                    return vec![refused(&c.request_id, None, &refusal)];
                }
                self.cols = c.cols;
                self.rows = c.rows;
                vec![
                    self.screen_event(),
                    ev(Event::status(
                        c.request_id,
                        self.lifecycle.status(),
                        self.state.clone(),
                    )),
                ]
            }
        }
    }

    fn turn(&mut self, request_id: String, turn_id: String, content: String) -> Vec<Output> {
        if self.is(Mutant::RefuseTurns) {
            return vec![failure(
                Some(&request_id),
                Some(&turn_id),
                "not_ready",
                "no session yet: send start and wait for ready",
                true,
            )];
        }
        match self.lifecycle.admit_turn(&turn_id) {
            Ok(()) => {}
            Err(Refusal::Busy { .. }) if self.is(Mutant::AcceptSecondTurn) => {}
            Err(refusal @ Refusal::Busy { .. }) => {
                return vec![refused(&request_id, Some(&turn_id), &refusal)];
            }
            Err(_) if self.is(Mutant::UncorrelatedTurnFailure) => {
                return vec![failure(
                    None,
                    None,
                    "not_ready",
                    "the session is not ready",
                    false,
                )];
            }
            Err(refusal) => return vec![refused(&request_id, Some(&turn_id), &refusal)],
        }
        let mut out = Vec::new();
        if self.is(Mutant::ProgressBeforeAck) {
            out.push(ev(Event::progress(&turn_id, "early")));
        }
        out.push(ev(Event::status(
            &request_id,
            SessionStatus::Busy,
            self.state.clone(),
        )));
        if self.is(Mutant::TwoAcks) {
            out.push(ev(Event::status(
                &request_id,
                SessionStatus::Busy,
                self.state.clone(),
            )));
        }
        self.lifecycle.acked(&turn_id);
        if let Some(state) = self.state.as_mut()
            && state.agent_thread_id.is_none()
        {
            state.agent_thread_id = Some(format!("reference-thread:{}", id_part(&turn_id)));
            out.push(ev(Event::lineage_changed(state.clone())));
        }
        out.push(ev(Event::progress(
            &turn_id,
            format!("reference: {content}"),
        )));
        self.screen = format!(
            "reference runner\n$ {}",
            content.chars().take(200).collect::<String>()
        );
        out.push(self.screen_event());
        if self.is(Mutant::IgnoredScreens) && self.generation() > 0 {
            let old = self.generation() - 1;
            out.push(ev(Event::terminal_screen(
                old, 7, self.cols, self.rows, "old",
            )));
        }
        let operations = self.operations_for(&turn_id, &content);
        if operations.is_empty() || self.is(Mutant::FinalBeforeOutboundResult) {
            out.extend(operations);
            out.push(self.final_event(&request_id, &turn_id, json!(content)));
            if self.turn.is_none() {
                self.lifecycle.turn_ended(&turn_id);
            }
            return out;
        }
        self.turn = Some(ActiveTurn {
            turn_id,
            request_id,
            awaiting: operations.len(),
            results: Vec::new(),
        });
        out.extend(operations);
        out
    }

    /// The operations a trigger content asks for (empty for plain content).
    fn operations_for(&self, turn_id: &str, content: &str) -> Vec<Output> {
        let generation = self.generation();
        let outbound = |id: usize, text: &str| {
            ev(Event::outbound_message(
                format!("reference-outbound-{id}"),
                turn_id,
                generation,
                text,
                ResponseKind::Progress,
                Mention::None,
            ))
        };
        let tool = |id: usize, limit: u64| {
            ev(Event::session_tool(
                format!("reference-session-tool-{id}"),
                turn_id,
                generation,
                SessionToolRequest::History {
                    limit: Some(limit),
                    scope: Some(HistoryScope::Thread),
                    with_card_json: None,
                },
            ))
        };
        match content.trim() {
            "request-outbound" => vec![outbound(1, "reference progress")],
            "request-outbound-duplicate" => {
                vec![
                    outbound(1, "reference progress"),
                    outbound(1, "reference progress"),
                ]
            }
            "request-outbound-conflict" => vec![
                outbound(1, "reference progress"),
                outbound(1, "reference progress (changed)"),
            ],
            "request-outbound-burst" => (1..=11)
                .map(|i| outbound(i, "reference progress"))
                .collect(),
            "request-session-tool" => vec![tool(1, 20)],
            "request-session-tool-duplicate" => vec![tool(1, 20), tool(1, 20)],
            "request-session-tool-conflict" => vec![tool(1, 20), tool(1, 21)],
            "request-session-tool-burst" => (1..=31).map(|i| tool(i, 20)).collect(),
            _ => Vec::new(),
        }
    }

    fn operation_result(
        &mut self,
        request_id: &str,
        turn_id: &str,
        generation: u64,
        result: Value,
    ) -> Vec<Output> {
        let mut out = Vec::new();
        if self.is(Mutant::ReplyToOutboundResult) {
            out.push(ev(Event::status(request_id, self.lifecycle.status(), None)));
        }
        let current = self.generation();
        let Some(turn) = self.turn.as_mut() else {
            eprintln!("reference: result for no active turn ignored");
            return out;
        };
        if turn.turn_id != turn_id || generation != current || turn.awaiting == 0 {
            eprintln!("reference: result for another turn or generation ignored");
            return out;
        }
        turn.results.push(result);
        turn.awaiting -= 1;
        if turn.awaiting > 0 {
            return out;
        }
        let Some(turn) = self.turn.take() else {
            return out;
        };
        let content = if turn.results.len() == 1 {
            turn.results[0].clone()
        } else {
            Value::Array(turn.results)
        };
        let text = Value::String(content.to_string());
        out.push(self.final_event(&turn.request_id, &turn.turn_id, text));
        self.lifecycle.turn_ended(&turn.turn_id);
        out
    }

    fn final_event(&mut self, request_id: &str, turn_id: &str, content: Value) -> Output {
        self.finals += 1;
        if self.is(Mutant::PostAckFailureWithoutTurnId) {
            return failure(
                Some(request_id),
                None,
                "reference_failed",
                "deliberate failure",
                false,
            );
        }
        let mut state = self.state.clone();
        if self.is(Mutant::ChangedRemoteSessionId)
            && let Some(s) = state.as_mut()
        {
            s.remote_session_id = Some(format!("reference:changed-{}", self.finals));
            self.state = Some(s.clone());
        }
        let mut generation = self.generation();
        if self.is(Mutant::UsageGenerationMismatch) {
            generation += 1;
        }
        let usage = Usage {
            generation,
            snapshot: UsageSnapshot {
                context: Some(ContextUsage {
                    used_tokens: 11,
                    window_tokens: Some(1000),
                    percent_used: Some(1.1),
                }),
                tokens: Some(TokenCounts {
                    input: 8,
                    output: 3,
                }),
                turn_tokens: Some(Some(TokenCounts {
                    input: 8,
                    output: 3,
                })),
                model: Some("reference-model".into()),
                reasoning_effort: Some("medium".into()),
                model_backend_variant: None,
            },
        };
        let text = match content {
            Value::String(s) => s,
            other => other.to_string(),
        };
        ev(Event::final_result(turn_id, text, state, Some(usage)))
    }
}

/// The failure for a command the protocol's rules refuse.
fn refused(request_id: &str, turn_id: Option<&str>, refusal: &Refusal) -> Output {
    failure(
        Some(request_id),
        turn_id,
        refusal.code(),
        &refusal.message(),
        refusal.retryable(),
    )
}
