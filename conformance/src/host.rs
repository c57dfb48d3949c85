//! Plays the host against one provider process: writes commands, reads and checks every
//! event, writes operation results back after the host's delivery delay, and waits with
//! the host's deadlines.

use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use remote_runner_protocol::{
    Command, DEFAULT_REQUIRED_CAPABILITIES, DecodeErrorKind, Event, FailureEvent, HelloCommand,
    HelloEvent, LineError, RequestCommand, ResumeCommand, ResumeMode, StartCommand, State,
    TurnCommand, decode_event, encode_command,
};
use tokio::time::Instant;

use crate::config::Config;
use crate::process::{Line, ProviderProcess};
use crate::track::{Reply, RequestKind, Tracker, TurnEnd};
use crate::violation::{Step, Stop, Violation, Warning, rule, truncate};

/// What one read produced.
#[derive(Debug)]
pub enum Next {
    /// A valid event (already checked).
    Event(Box<Event>),
    /// The deadline passed.
    Timeout,
    /// stdout ended.
    Eof,
}

/// How a submitted turn was answered.
#[derive(Debug, Clone)]
pub enum Submitted {
    /// ACKed with `status: busy`.
    Acked,
    /// Refused before the ACK with a correlated failure.
    Refused(FailureEvent),
}

/// A host session with one provider process.
#[derive(Debug)]
pub struct Host {
    config: Arc<Config>,
    process: ProviderProcess,
    /// The stateful rules and what was seen.
    pub track: Tracker,
    due: VecDeque<(Instant, String, Command)>,
    /// When set, operation results are not written back until released.
    pub hold_results: bool,
    warnings: Arc<Mutex<Vec<Warning>>>,
    /// The host's session id for this provider.
    pub session_id: String,
    /// The working directory sent in start/resume.
    pub cwd: PathBuf,
    turn_counter: u32,
    eof: bool,
}

/// A fresh correlation id in the host's `<prefix>:<uuid>` form.
pub fn new_request_id(prefix: &str) -> String {
    format!("{prefix}:{}", uuid::Uuid::new_v4())
}

impl Host {
    /// Spawns the provider in `cwd`.
    pub fn spawn(
        config: Arc<Config>,
        cwd: PathBuf,
        session_id: String,
        warnings: Arc<Mutex<Vec<Warning>>>,
    ) -> Step<Host> {
        let process = ProviderProcess::spawn(&config, &cwd)?;
        Ok(Host {
            config,
            process,
            track: Tracker::default(),
            due: VecDeque::new(),
            hold_results: false,
            warnings,
            session_id,
            cwd,
            turn_counter: 0,
            eof: false,
        })
    }

    /// The run's configuration.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// Bytes of stderr so far (never parsed).
    pub fn stderr_bytes(&self) -> u64 {
        self.process.stderr_bytes()
    }

    /// The live stderr byte counter of the process.
    pub fn stderr_counter(&self) -> Arc<std::sync::atomic::AtomicU64> {
        self.process.stderr_counter()
    }

    /// Writes a command and records what it expects.
    pub async fn send(&mut self, command: &Command, kind: Option<RequestKind>) -> Step<()> {
        if let Some(kind) = kind {
            self.track.sent(command.request_id(), kind);
        }
        let line = encode_command(command);
        self.write(&line, command.type_name()).await
    }

    /// Writes raw bytes (bad input), optionally expecting a correlated failure for `request_id`.
    pub async fn send_raw(&mut self, bytes: &[u8], request_id: Option<&str>) -> Step<()> {
        if let Some(id) = request_id {
            self.track.sent(id, RequestKind::BadInput);
        }
        self.write(bytes, "raw line").await
    }

    async fn write(&mut self, bytes: &[u8], what: &str) -> Step<()> {
        self.track.command_written();
        let timeout = self.config.operation_timeout;
        match tokio::time::timeout(timeout, self.process.write(bytes)).await {
            Ok(true) => Ok(()),
            Ok(false) => Err(Violation::new(
                rule::PROVIDER_EXITED,
                format!(
                    "could not write the {what} to the provider's stdin: it closed stdin or exited"
                ),
                "a provider that keeps reading stdin until EOF",
            )
            .into()),
            Err(_) => Err(Violation::new(
                rule::STDIN_NOT_READ,
                format!(
                    "the provider did not read the {what} ({} bytes) from stdin within {} ms",
                    bytes.len(),
                    timeout.as_millis()
                ),
                "a provider that keeps reading stdin while it works",
            )
            .into()),
        }
    }

    /// Reads the next event (writing due operation results meanwhile) until `deadline`.
    pub async fn next(&mut self, deadline: Instant) -> Step<Next> {
        loop {
            if self.eof {
                return Ok(Next::Eof);
            }
            let next_due = if self.hold_results {
                None
            } else {
                self.due.front().map(|(at, _, _)| *at)
            };
            tokio::select! {
                line = self.process.next_line() => {
                    let Some(line) = line else {
                        self.eof = true;
                        return Ok(Next::Eof);
                    };
                    if let Some(event) = self.check_line(line)? {
                        return Ok(Next::Event(Box::new(event)));
                    }
                }
                () = sleep_until_opt(next_due) => self.write_due_result().await?,
                () = tokio::time::sleep_until(deadline) => return Ok(Next::Timeout),
            }
        }
    }

    async fn write_due_result(&mut self) -> Step<()> {
        let Some((_, turn_id, command)) = self.due.pop_front() else {
            return Ok(());
        };
        if self.track.turn_ended(&turn_id) {
            self.track.settlement_dropped(&turn_id);
            return Ok(());
        }
        self.track
            .settlement_written(command.request_id(), &turn_id);
        let line = encode_command(&command);
        self.write(&line, command.type_name()).await
    }

    /// Lets held operation results flow again.
    pub fn release_results(&mut self) {
        self.hold_results = false;
    }

    /// Decodes and checks one stdout item; `None` for nothing to report.
    fn check_line(&mut self, line: Line) -> Step<Option<Event>> {
        let bytes = match line {
            Line::Text(bytes) => bytes,
            Line::Broken(LineError::TooLong { limit }) => {
                return Err(Violation::new(
                    rule::LINE_TOO_LONG,
                    format!("a stdout line longer than {limit} bytes"),
                    "every event line at most 4 MiB",
                )
                .into());
            }
            Line::Broken(err) => {
                return Err(Violation::new(
                    rule::UNTERMINATED_LINE,
                    err.to_string(),
                    "every event terminated by \\n",
                )
                .into());
            }
            Line::ReadError(err) => {
                return Err(Violation::new(
                    rule::PROVIDER_EXITED,
                    format!("reading stdout failed: {err}"),
                    "a readable stdout",
                )
                .into());
            }
        };
        let text = String::from_utf8_lossy(&bytes).into_owned();
        let event = decode_event(&bytes).map_err(|err| {
            let (rule_name, expected) = match &err.kind {
                DecodeErrorKind::InvalidJson { .. } | DecodeErrorKind::NotAnObject => (
                    rule::NON_PROTOCOL_LINE.to_owned(),
                    "only protocol events on stdout (logs go to stderr)",
                ),
                DecodeErrorKind::ProtocolMismatch { .. } => (
                    rule::PROTOCOL_MISMATCH.to_owned(),
                    "\"protocol\":\"botmux.remote-runner\",\"version\":1 on every line",
                ),
                DecodeErrorKind::UnknownType { .. } => (
                    rule::UNKNOWN_EVENT_TYPE.to_owned(),
                    "one of the event types of protocol v1",
                ),
                DecodeErrorKind::InvalidMessage(v) => (
                    v.rule.as_str().to_owned(),
                    "an event that passes the host's validation",
                ),
                _ => (rule::NON_PROTOCOL_LINE.to_owned(), "a valid event"),
            };
            Stop::from(Violation::new(&rule_name, err.to_string(), expected).with_line(&text))
        })?;
        let scheduled = self
            .track
            .observe(&event)
            .map_err(|v| Stop::from(v.with_line(&text)))?;
        let at = Instant::now() + self.config.result_delay;
        for (turn_id, command) in scheduled {
            self.due.push_back((at, turn_id, command));
        }
        let mut warnings = self.track.take_warnings();
        for w in &mut warnings {
            w.line = Some(truncate(&text));
        }
        if !warnings.is_empty()
            && let Ok(mut all) = self.warnings.lock()
        {
            all.extend(warnings);
        }
        Ok(Some(event))
    }

    /// Reads events until `request_id` is answered, within `timeout`.
    pub async fn wait_reply(
        &mut self,
        request_id: &str,
        timeout: Duration,
        what: &str,
    ) -> Step<Reply> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(reply) = self.track.reply(request_id) {
                return Ok(reply.clone());
            }
            match self.next(deadline).await? {
                Next::Event(_) => {}
                Next::Timeout => {
                    return Err(Violation::new(
                        rule::REPLY_TIMEOUT,
                        format!(
                            "no reply to the {what} (requestId {request_id:?}) within {} ms",
                            timeout.as_millis()
                        ),
                        format!("a reply with requestId {request_id:?} before the host's deadline"),
                    )
                    .into());
                }
                Next::Eof => {
                    return Err(self
                        .exited(&format!("waiting for the reply to the {what}"))
                        .into());
                }
            }
        }
    }

    /// A violation for a provider that closed stdout while the host waited.
    pub fn exited(&self, doing: &str) -> Violation {
        Violation::new(
            rule::PROVIDER_EXITED,
            format!("the provider closed stdout (exited) while the host was {doing}"),
            "a provider that stays alive until stdin closes or the host ends it",
        )
    }

    /// Reads and checks events for `window`; fails if the provider exits.
    pub async fn listen(&mut self, window: Duration) -> Step<()> {
        let deadline = Instant::now() + window;
        loop {
            match self.next(deadline).await? {
                Next::Event(_) => {}
                Next::Timeout => return Ok(()),
                Next::Eof => return Err(self.exited("listening").into()),
            }
        }
    }

    /// hello with the given required capabilities; returns the reply.
    pub async fn hello_with(&mut self, required: Vec<String>) -> Step<Reply> {
        let request_id = new_request_id("hello");
        let command = Command::Hello(HelloCommand {
            request_id: request_id.clone(),
            session_id: self.session_id.clone(),
            required_capabilities: required.clone(),
        });
        self.send(&command, Some(RequestKind::Hello(required)))
            .await?;
        let timeout = self.config.handshake_timeout;
        self.wait_reply(&request_id, timeout, "hello").await
    }

    /// The handshake with the host's default required capabilities.
    pub async fn handshake(&mut self) -> Step<HelloEvent> {
        let required = DEFAULT_REQUIRED_CAPABILITIES.map(str::to_owned).to_vec();
        match self.hello_with(required).await? {
            Reply::Hello(hello) => Ok(hello),
            Reply::Failure(f) => Err(refused("hello", &f)),
            other => Err(unexpected("hello", &other)),
        }
    }

    /// `start`; returns the ready state.
    pub async fn start(&mut self) -> Step<State> {
        let command = self.start_command();
        match self.start_with(command).await? {
            Reply::Ready(ready) => Ok(ready.state),
            Reply::Failure(f) => Err(refused("start", &f)),
            other => Err(unexpected("start", &other)),
        }
    }

    /// A plain start command for this session.
    pub fn start_command(&self) -> StartCommand {
        StartCommand {
            request_id: new_request_id("start"),
            session_id: self.session_id.clone(),
            cwd: self.cwd.display().to_string(),
            model: None,
            model_backend_variant: None,
            reasoning_effort: None,
        }
    }

    /// Sends `start` and returns its reply.
    pub async fn start_with(&mut self, command: StartCommand) -> Step<Reply> {
        let request_id = command.request_id.clone();
        self.send(&Command::Start(command), Some(RequestKind::Start))
            .await?;
        let timeout = self.config.handshake_timeout;
        self.wait_reply(&request_id, timeout, "start").await
    }

    /// hello + start.
    pub async fn open(&mut self) -> Step<State> {
        self.handshake().await?;
        self.start().await
    }

    /// Sends `resume` with `state` and returns its reply.
    pub async fn resume(&mut self, state: State, mode: Option<ResumeMode>) -> Step<Reply> {
        let request_id = new_request_id("resume");
        let rebuild = mode == Some(ResumeMode::Rebuild);
        let command = Command::Resume(ResumeCommand {
            request_id: request_id.clone(),
            session_id: self.session_id.clone(),
            cwd: self.cwd.display().to_string(),
            state: state.clone(),
            resume_mode: mode,
            model: None,
            model_backend_variant: None,
            reasoning_effort: None,
        });
        self.send(
            &command,
            Some(RequestKind::Resume {
                persisted: state,
                rebuild,
            }),
        )
        .await?;
        let timeout = self.config.handshake_timeout;
        self.wait_reply(&request_id, timeout, "resume").await
    }

    /// A fresh turnId.
    pub fn new_turn_id(&mut self) -> String {
        self.turn_counter += 1;
        format!("turn-{}-{}", self.turn_counter, uuid::Uuid::new_v4())
    }

    /// Sends a turn and waits for its ACK or pre-ACK failure. Returns the turnId too.
    pub async fn submit(&mut self, content: &str) -> Step<(String, Submitted)> {
        let turn_id = self.new_turn_id();
        let request_id = new_request_id("turn");
        let command = Command::Turn(TurnCommand {
            request_id: request_id.clone(),
            turn_id: turn_id.clone(),
            content: content.to_owned(),
            trusted_caller: None,
        });
        let submitted = self.submit_command(command).await?;
        Ok((turn_id, submitted))
    }

    /// Sends a prepared turn command and waits for its ACK or pre-ACK failure.
    pub async fn submit_command(&mut self, command: Command) -> Step<Submitted> {
        let Command::Turn(turn) = &command else {
            return Err(Stop::NotApplicable("not a turn command".into()));
        };
        let (request_id, turn_id) = (turn.request_id.clone(), turn.turn_id.clone());
        self.send(&command, Some(RequestKind::Turn(turn_id)))
            .await?;
        let timeout = self.config.operation_timeout;
        match self.wait_reply(&request_id, timeout, "turn").await? {
            Reply::Status(_) => Ok(Submitted::Acked),
            Reply::Failure(f) => Ok(Submitted::Refused(f)),
            other => Err(unexpected("turn", &other)),
        }
    }

    /// Waits for the turn to end (final or failure) within the turn deadline.
    pub async fn finish(&mut self, turn_id: &str) -> Step<TurnEnd> {
        let timeout = self.config.turn_timeout;
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(end) = self.track.turn(turn_id).and_then(|t| t.end.clone()) {
                return Ok(end);
            }
            match self.next(deadline).await? {
                Next::Event(_) => {}
                Next::Timeout => {
                    return Err(Violation::new(
                        rule::TURN_TIMEOUT,
                        format!("turn {turn_id:?} did not end within {} ms", timeout.as_millis()),
                        "a final or a failure with turnId (raise --turn-timeout-ms for slow providers)",
                    )
                    .into());
                }
                Next::Eof => return Err(self.exited("waiting for the turn to end").into()),
            }
        }
    }

    /// A whole turn that must be accepted: submit, ACK, end.
    pub async fn run_turn(&mut self, content: &str) -> Step<(String, TurnEnd)> {
        let (turn_id, submitted) = self.submit(content).await?;
        if let Submitted::Refused(f) = submitted {
            return Err(refused("turn", &f));
        }
        let end = self.finish(&turn_id).await?;
        Ok((turn_id, end))
    }

    /// Sends a request-only command (`cancel`, `detach`, `reattach`, `status`) and waits.
    pub async fn simple(&mut self, kind: RequestKind) -> Step<Reply> {
        let (prefix, make): (&str, fn(RequestCommand) -> Command) = match kind {
            RequestKind::Cancel => ("cancel", Command::Cancel),
            RequestKind::Detach => ("detach", Command::Detach),
            RequestKind::Reattach => ("reattach", Command::Reattach),
            _ => ("status", Command::Status),
        };
        let request_id = new_request_id(prefix);
        let command = make(RequestCommand {
            request_id: request_id.clone(),
        });
        self.send(&command, Some(kind)).await?;
        let timeout = self.config.operation_timeout;
        self.wait_reply(&request_id, timeout, prefix).await
    }

    /// Sends a command that expects any status, and waits for its reply.
    pub async fn request(&mut self, command: Command, what: &str) -> Step<Reply> {
        let request_id = command.request_id().to_owned();
        self.send(&command, Some(RequestKind::AnyStatus)).await?;
        let timeout = self.config.operation_timeout;
        self.wait_reply(&request_id, timeout, what).await
    }

    /// Asks `status` and requires a status reply: proof the provider is still usable.
    pub async fn probe(&mut self, after: &str) -> Step<()> {
        match self.simple(RequestKind::AnyStatus).await {
            Ok(Reply::Status(_)) => Ok(()),
            Ok(other) => Err(unexpected("status", &other)),
            Err(Stop::Fail(v))
                if v.rule == rule::REPLY_TIMEOUT || v.rule == rule::PROVIDER_EXITED =>
            {
                Err(Violation::new(
                    rule::NOT_USABLE_AFTER,
                    format!(
                        "after {after}, a status command got no reply: {}",
                        v.message
                    ),
                    "a provider that answers bad input and stays usable",
                )
                .into())
            }
            Err(other) => Err(other),
        }
    }

    /// Closes stdin and requires the provider to exit within the exit deadline. Exit counts
    /// even if a child process it left behind still holds stdout open.
    pub async fn expect_exit_on_eof(&mut self) -> Step<()> {
        self.process.close_stdin();
        let timeout = self.config.exit_timeout;
        if self.exits_within(timeout).await? {
            Ok(())
        } else {
            Err(no_exit(timeout).into())
        }
    }

    /// Sends `signal` (`TERM`, `INT`, `HUP`) with stdin still open, as BotMux does after
    /// `status: closed`, and requires the provider to exit within `bound`.
    pub async fn expect_exit_on_signal(&mut self, signal: &str, bound: Duration) -> Step<()> {
        if !self.process.signal(signal).await {
            return Err(self
                .exited(&format!("before SIG{signal} could be sent"))
                .into());
        }
        if self.exits_within(bound).await? {
            Ok(())
        } else {
            Err(Violation::new(
                rule::NO_EXIT_AFTER_SIGNAL,
                format!(
                    "the provider was still running {} ms after SIG{signal} (stdin open)",
                    bound.as_millis()
                ),
                format!(
                    "exit within {} ms of SIG{signal} in every state, whether or not stdin is \
                     open (do not wait for a blocking stdin read)",
                    bound.as_millis()
                ),
            )
            .into())
        }
    }

    /// Reads (and checks) events until the process exits or `timeout` passes.
    async fn exits_within(&mut self, timeout: Duration) -> Step<bool> {
        let deadline = Instant::now() + timeout;
        loop {
            let slice = (Instant::now() + Duration::from_millis(20)).min(deadline);
            match self.next(slice).await? {
                Next::Event(_) => {}
                Next::Eof => break,
                Next::Timeout if self.process.has_exited() => return Ok(true),
                Next::Timeout if Instant::now() >= deadline => return Ok(false),
                Next::Timeout => {}
            }
        }
        let left = deadline.saturating_duration_since(Instant::now());
        Ok(self.process.wait_exit(left).await)
    }

    /// Ends the session: stdin closed, a short grace, then kill.
    pub async fn shutdown(mut self) {
        self.process.close_stdin();
        let grace = self.config.exit_timeout.min(Duration::from_secs(3));
        if !self.process.wait_exit(grace).await {
            self.process.kill().await;
        }
    }
}

fn no_exit(timeout: Duration) -> Violation {
    Violation::new(
        rule::NO_EXIT_AFTER_EOF,
        format!(
            "the provider did not exit within {} ms after stdin closed",
            timeout.as_millis()
        ),
        "exit in bounded time once stdin reaches EOF",
    )
}

/// The provider refused something the scenario needs.
pub fn refused(what: &str, failure: &FailureEvent) -> Stop {
    Violation::new(
        rule::UNEXPECTED_REFUSAL,
        format!(
            "the {what} was refused: failure {:?}: {}",
            failure.code, failure.message
        ),
        format!("the provider accepts a well-formed {what}"),
    )
    .into()
}

/// An answer of the wrong kind.
pub fn unexpected(what: &str, reply: &Reply) -> Stop {
    let got = match reply {
        Reply::Hello(_) => "hello",
        Reply::Ready(_) => "ready",
        Reply::Status(_) => "status",
        Reply::Failure(_) => "failure",
    };
    Violation::new(
        rule::WRONG_REPLY_TYPE,
        format!("the {what} was answered by a {got} event"),
        format!("the reply the host expects for {what}"),
    )
    .into()
}

async fn sleep_until_opt(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}
