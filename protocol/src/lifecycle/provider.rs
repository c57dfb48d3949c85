//! The provider side of the lifecycle as a sans-IO state machine: what a provider
//! may accept next and what it must refuse, with the refusal's code and message. It does no I/O
//! and knows nothing of the engine behind a provider; a provider calls an `admit_*` method when
//! a command arrives and a transition method when its work has happened.
//!
//! Used by `botmux-remote-runner` and by the reference provider, so that both refuse the same
//! commands with the same codes.

use crate::command::Command;
use crate::event::{Event, FailureStatus, SessionStatus};
use crate::limits::{DEFAULT_REQUIRED_CAPABILITIES, TERMINAL_CAPABILITIES};

/// The capabilities a provider advertises in `hello`: the host's default required set and,
/// when it offers a terminal, the three terminal capabilities.
pub fn capabilities(terminal: bool) -> Vec<&'static str> {
    let mut caps = DEFAULT_REQUIRED_CAPABILITIES.to_vec();
    if terminal {
        caps.extend_from_slice(&TERMINAL_CAPABILITIES);
    }
    caps
}

/// [`capabilities`] plus the optional host-executed operations a provider offers
/// (`outbound_message`, `session_tool`).
pub fn capabilities_with(terminal: bool, outbound: bool, session_tool: bool) -> Vec<&'static str> {
    let mut caps = capabilities(terminal);
    if outbound {
        caps.push(crate::limits::OUTBOUND_MESSAGE_CAPABILITY);
    }
    if session_tool {
        caps.push(crate::limits::SESSION_TOOL_CAPABILITY);
    }
    caps
}

/// Why a command is refused. Each has a stable code and a message saying what to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// A turn while another is accepted and not ended.
    Busy {
        /// The turn still running.
        turn_id: String,
    },
    /// A turn before `ready`.
    NoSession,
    /// A turn after `detach`.
    Detached,
    /// A turn after `cancel` was received (closing or closed).
    Cancelled,
    /// `reattach` without a prior `detach`.
    NotDetached,
    /// Terminal input or resize for a generation other than the current one.
    StaleGeneration {
        /// The generation the command named.
        asked: u64,
        /// The current one, if any.
        current: Option<u64>,
    },
}

impl Refusal {
    /// The failure `code`.
    pub fn code(&self) -> &'static str {
        match self {
            Refusal::Busy { .. } => "busy",
            Refusal::NoSession | Refusal::Detached | Refusal::Cancelled => "not_ready",
            Refusal::NotDetached => "not_detached",
            Refusal::StaleGeneration { .. } => "stale_terminal_generation",
        }
    }

    /// The failure `message`: what happened and what to send instead.
    pub fn message(&self) -> String {
        match self {
            Refusal::Busy { turn_id } => {
                format!("turn {turn_id} is still running; send one turn at a time")
            }
            Refusal::NoSession => {
                "no session yet: send start (or resume) and wait for ready before a turn".into()
            }
            Refusal::Detached => {
                "the provider is detached; send reattach before the next turn".into()
            }
            Refusal::Cancelled => {
                "the session was cancelled; resume with resumeMode rebuild to start a new one"
                    .into()
            }
            Refusal::NotDetached => {
                "reattach is only valid after detach; the provider is not detached".into()
            }
            Refusal::StaleGeneration { asked, current } => format!(
                "terminal input for generation {asked} refused: the current generation is {}",
                current.map_or("none (no session yet)".to_string(), |g| g.to_string())
            ),
        }
    }

    /// Whether the same command may succeed later unchanged (only `busy`).
    pub fn retryable(&self) -> bool {
        matches!(self, Refusal::Busy { .. })
    }

    /// The correlated failure answering `command` (its requestId, and its turnId if any).
    pub fn failure_for(&self, command: &Command) -> Event {
        Event::failure_for(
            command,
            self.code(),
            self.message(),
            FailureStatus::Failed,
            self.retryable(),
        )
    }
}

/// The provider's lifecycle state, as far as the protocol's rules go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProviderLifecycle {
    status: SessionStatus,
    generation: Option<u64>,
    turn: Option<String>,
    cancelling: bool,
    /// A generation reported but not yet applied by the host: no screen of it until the host's
    /// next command.
    screen_held: bool,
}

impl Default for ProviderLifecycle {
    fn default() -> Self {
        Self::new()
    }
}

impl ProviderLifecycle {
    /// Before `start`/`resume`: status `starting`, no generation, no turn.
    pub fn new() -> Self {
        ProviderLifecycle {
            status: SessionStatus::Starting,
            generation: None,
            turn: None,
            cancelling: false,
            screen_held: false,
        }
    }

    /// The status to report in `status` events.
    pub fn status(&self) -> SessionStatus {
        self.status
    }

    /// The current compute generation (set by `ready`).
    pub fn generation(&self) -> Option<u64> {
        self.generation
    }

    /// The turn accepted and not ended (its start-up may still be in flight).
    pub fn turn(&self) -> Option<&str> {
        self.turn.as_deref()
    }

    /// A `cancel` was received and the session is not closed yet.
    pub fn cancelling(&self) -> bool {
        self.cancelling
    }

    /// A `turn` arrived: accept it (it becomes the turn) or say why not. One turn at a time,
    /// only after `ready`, not while detached, cancelling or closed.
    pub fn admit_turn(&mut self, turn_id: &str) -> Result<(), Refusal> {
        if let Some(active) = &self.turn {
            return Err(Refusal::Busy {
                turn_id: active.clone(),
            });
        }
        if self.cancelling || self.status == SessionStatus::Closed {
            return Err(Refusal::Cancelled);
        }
        if self.status == SessionStatus::Detached {
            return Err(Refusal::Detached);
        }
        if self.generation.is_none() {
            return Err(Refusal::NoSession);
        }
        self.turn = Some(turn_id.to_string());
        Ok(())
    }

    /// `terminal_input` / `terminal_resize` for `generation`: only the current one.
    pub fn admit_terminal(&self, generation: u64) -> Result<(), Refusal> {
        if self.generation == Some(generation) {
            Ok(())
        } else {
            Err(Refusal::StaleGeneration {
                asked: generation,
                current: self.generation,
            })
        }
    }

    /// `reattach`: only after `detach`.
    pub fn admit_reattach(&self) -> Result<(), Refusal> {
        if self.status == SessionStatus::Detached {
            Ok(())
        } else {
            Err(Refusal::NotDetached)
        }
    }

    /// `ready` was sent (start, resume, or a rebuilt session) at `generation`.
    pub fn ready(&mut self, generation: u64) {
        self.generation = Some(generation);
        if self.status != SessionStatus::Busy {
            self.status = SessionStatus::Ready;
        }
    }

    /// `ready` (for a resume or rebuild) or `lineage_changed` reported `generation`, a new
    /// compute generation. The host applies such a state asynchronously and kills a provider
    /// that sends a `terminal_screen` of it before the host's next command, so screens are
    /// held until [`ProviderLifecycle::command_received`].
    pub fn ready_raised(&mut self, generation: u64) {
        self.ready(generation);
        self.screen_held = true;
    }

    /// A command arrived from the host: it has applied everything sent before it.
    pub fn command_received(&mut self) {
        self.screen_held = false;
    }

    /// Whether a `terminal_screen` of `generation` may be sent now: a session is ready or
    /// busy at that generation, and no newly raised generation waits for the host's next
    /// command.
    pub fn may_send_screen(&self, generation: u64) -> bool {
        matches!(self.status, SessionStatus::Ready | SessionStatus::Busy)
            && self.generation == Some(generation)
            && !self.screen_held
    }

    /// The turn's busy ACK was sent.
    pub fn acked(&mut self, turn_id: &str) {
        if self.turn.as_deref() == Some(turn_id) {
            self.status = SessionStatus::Busy;
        }
    }

    /// The turn ended (final, failure after the ACK, or a pre-ACK failure).
    pub fn turn_ended(&mut self, turn_id: &str) {
        if self.turn.as_deref() == Some(turn_id) {
            self.turn = None;
            if self.status == SessionStatus::Busy {
                self.status = SessionStatus::Ready;
            }
        }
    }

    /// `cancel` arrived: no new turn from now on.
    pub fn cancel_received(&mut self) {
        self.cancelling = true;
    }

    /// `status: closed` was sent: the session is gone, the turn with it.
    pub fn closed(&mut self) {
        self.cancelling = false;
        self.turn = None;
        self.status = SessionStatus::Closed;
    }

    /// `status: detached` was sent.
    pub fn detached(&mut self) {
        self.status = SessionStatus::Detached;
    }

    /// `status: ready` answering `reattach` was sent.
    pub fn reattached(&mut self) {
        self.status = SessionStatus::Ready;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_turn_at_a_time_only_after_ready_and_not_after_detach_or_cancel() {
        let mut m = ProviderLifecycle::new();
        assert_eq!(m.admit_turn("t0"), Err(Refusal::NoSession));
        assert_eq!(m.admit_reattach(), Err(Refusal::NotDetached));
        m.ready(1);
        assert_eq!(m.status(), SessionStatus::Ready);
        m.admit_turn("t1").unwrap();
        assert_eq!(
            m.admit_turn("t2"),
            Err(Refusal::Busy {
                turn_id: "t1".into()
            })
        );
        m.acked("t1");
        assert_eq!(m.status(), SessionStatus::Busy);
        m.turn_ended("t1");
        assert_eq!(m.status(), SessionStatus::Ready);
        m.detached();
        assert_eq!(m.admit_turn("t3"), Err(Refusal::Detached));
        m.admit_reattach().unwrap();
        m.reattached();
        m.cancel_received();
        assert_eq!(m.admit_turn("t4"), Err(Refusal::Cancelled));
        m.closed();
        assert_eq!(m.admit_turn("t5"), Err(Refusal::Cancelled));
        assert_eq!(Refusal::Cancelled.code(), "not_ready");
        assert!(
            Refusal::Busy {
                turn_id: "x".into()
            }
            .retryable()
        );
    }

    #[test]
    fn terminal_commands_only_for_the_current_generation() {
        let mut m = ProviderLifecycle::new();
        assert_eq!(
            m.admit_terminal(1).unwrap_err().message(),
            "terminal input for generation 1 refused: the current generation is none (no session yet)"
        );
        m.ready(3);
        m.admit_terminal(3).unwrap();
        assert_eq!(
            m.admit_terminal(2).unwrap_err().code(),
            "stale_terminal_generation"
        );
    }

    #[test]
    fn no_screen_of_a_raised_generation_before_the_next_command() {
        let mut m = ProviderLifecycle::new();
        assert!(!m.may_send_screen(0));
        m.ready(1);
        assert!(m.may_send_screen(1));
        assert!(!m.may_send_screen(2));
        m.ready_raised(2);
        assert!(!m.may_send_screen(2));
        m.command_received();
        assert!(m.may_send_screen(2));
        m.detached();
        assert!(!m.may_send_screen(2));
    }

    #[test]
    fn capabilities_are_the_default_set_plus_terminal() {
        assert_eq!(
            capabilities(false),
            [
                "start", "resume", "turn", "cancel", "detach", "reattach", "status"
            ]
        );
        assert_eq!(capabilities(true).len(), 10);
    }
}
