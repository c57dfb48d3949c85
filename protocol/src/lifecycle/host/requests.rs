//! Request/reply correlation: which event may answer which command, once.

use std::collections::{HashMap, HashSet};

use crate::event::{Event, SessionStatus};

/// What a command the host wrote expects back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RequestClass {
    /// `hello`: a hello event.
    Hello,
    /// `start`: a ready event.
    Start,
    /// `resume`: a ready event.
    Resume,
    /// `turn`: status busy (the ACK) or a failure.
    Turn,
    /// `cancel`: status closed.
    Cancel,
    /// `detach`: status detached.
    Detach,
    /// `reattach`: status ready.
    Reattach,
    /// `status`, `terminal_input`, `terminal_resize`: a status of any value.
    AnyStatus,
    /// A line that is not a valid command: only a correlated failure.
    BadInput,
}

impl RequestClass {
    /// The command's name in messages.
    pub fn name(self) -> &'static str {
        match self {
            RequestClass::Hello => "hello",
            RequestClass::Start => "start",
            RequestClass::Resume => "resume",
            RequestClass::Turn => "turn",
            RequestClass::Cancel => "cancel",
            RequestClass::Detach => "detach",
            RequestClass::Reattach => "reattach",
            RequestClass::AnyStatus => "status/terminal command",
            RequestClass::BadInput => "bad input line",
        }
    }

    /// What answers it, besides a correlated failure.
    pub fn expected_reply(self) -> &'static str {
        match self {
            RequestClass::Hello => "a hello event",
            RequestClass::Start | RequestClass::Resume => "a ready event",
            RequestClass::Turn => "status busy (the ACK) or a pre-ACK failure",
            RequestClass::BadInput => "a failure with the line's requestId",
            _ => "a status event",
        }
    }

    /// The status value that answers it; `None` when any value does (or no status at all).
    pub fn wanted_status(self) -> Option<SessionStatus> {
        match self {
            RequestClass::Turn => Some(SessionStatus::Busy),
            RequestClass::Cancel => Some(SessionStatus::Closed),
            RequestClass::Detach => Some(SessionStatus::Detached),
            RequestClass::Reattach => Some(SessionStatus::Ready),
            _ => None,
        }
    }

    fn accepts(self, reply: ReplyType) -> Result<(), CorrelationError> {
        let wrong = CorrelationError::WrongReply { class: self };
        match reply {
            ReplyType::Failure => Ok(()),
            ReplyType::Hello if self == RequestClass::Hello => Ok(()),
            ReplyType::Ready if matches!(self, RequestClass::Start | RequestClass::Resume) => {
                Ok(())
            }
            ReplyType::Status(status) => match (self, self.wanted_status()) {
                (RequestClass::AnyStatus, _) => Ok(()),
                (_, Some(wanted)) if wanted == status => Ok(()),
                (_, Some(wanted)) => Err(CorrelationError::UnexpectedStatus {
                    class: self,
                    wanted,
                }),
                (_, None) => Err(wrong),
            },
            _ => Err(wrong),
        }
    }
}

/// The kind of event that carries a `requestId` as a reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReplyType {
    /// `hello`.
    Hello,
    /// `ready`.
    Ready,
    /// `status` with its value.
    Status(SessionStatus),
    /// `failure`.
    Failure,
}

impl ReplyType {
    /// The event type's name.
    pub fn name(self) -> &'static str {
        match self {
            ReplyType::Hello => "hello",
            ReplyType::Ready => "ready",
            ReplyType::Status(_) => "status",
            ReplyType::Failure => "failure",
        }
    }
}

/// Why a reply is a protocol error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CorrelationError {
    /// It answers an `outbound_message_result` / `session_tool_result`, which get no reply.
    ReplyToSettlement,
    /// The host never sent that requestId.
    UnknownRequestId,
    /// The request was already answered (e.g. a second busy ACK).
    AlreadyAnswered,
    /// The wrong event type for the request.
    WrongReply {
        /// What the request was.
        class: RequestClass,
    },
    /// A status with the wrong value for the request.
    UnexpectedStatus {
        /// What the request was.
        class: RequestClass,
        /// The value that answers it.
        wanted: SessionStatus,
    },
}

/// The first capability the host requires that a hello does not advertise.
pub fn missing_capability<'a>(required: &'a [String], advertised: &[String]) -> Option<&'a str> {
    required
        .iter()
        .find(|c| !advertised.contains(c))
        .map(String::as_str)
}

/// Whether an event may arrive before the hello reply: only the hello itself, or a `status` /
/// `failure` answering something sent before it.
pub fn allowed_before_hello(event: &Event) -> bool {
    matches!(
        event,
        Event::Hello(_) | Event::Failure(_) | Event::Status(_)
    )
}

/// The host's book of requests it wrote and whether each was answered.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Requests {
    pending: HashMap<String, (RequestClass, bool)>,
    settlements: HashSet<String>,
}

impl Requests {
    /// The host wrote a command with `request_id` that expects a reply.
    pub fn sent(&mut self, request_id: &str, class: RequestClass) {
        self.pending.insert(request_id.to_owned(), (class, false));
    }

    /// The host wrote an operation result (never answered).
    pub fn settlement_written(&mut self, request_id: &str) {
        self.settlements.insert(request_id.to_owned());
    }

    /// What `request_id` was, if the host sent it.
    pub fn class(&self, request_id: &str) -> Option<RequestClass> {
        self.pending.get(request_id).map(|(class, _)| *class)
    }

    /// Judges a reply of type `reply` to `request_id`; on success the request is answered and
    /// its class returned. A failure naming a turn's request is judged by the turn's phase
    /// instead ([`super::HostTurns::failure`]): this returns `Ok(Turn)` without marking it, and
    /// the caller marks it with [`Requests::answered`] when the failure refused the turn.
    pub fn reply(
        &mut self,
        request_id: &str,
        reply: ReplyType,
    ) -> Result<RequestClass, CorrelationError> {
        if self.settlements.contains(request_id) {
            return Err(CorrelationError::ReplyToSettlement);
        }
        let Some((class, answered)) = self.pending.get_mut(request_id) else {
            return Err(CorrelationError::UnknownRequestId);
        };
        if *class == RequestClass::Turn && reply == ReplyType::Failure {
            return Ok(RequestClass::Turn);
        }
        if *answered {
            return Err(CorrelationError::AlreadyAnswered);
        }
        class.accepts(reply)?;
        *answered = true;
        Ok(*class)
    }

    /// Marks `request_id` answered (a pre-ACK failure of a turn).
    pub fn answered(&mut self, request_id: &str) {
        if let Some((_, answered)) = self.pending.get_mut(request_id) {
            *answered = true;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_request_takes_one_reply_of_its_type() {
        let mut book = Requests::default();
        book.sent("h", RequestClass::Hello);
        book.sent("s", RequestClass::Start);
        book.sent("c", RequestClass::Cancel);
        book.sent("q", RequestClass::AnyStatus);
        book.settlement_written("r");
        assert_eq!(
            book.reply("s", ReplyType::Hello),
            Err(CorrelationError::WrongReply {
                class: RequestClass::Start
            })
        );
        assert_eq!(book.reply("h", ReplyType::Hello), Ok(RequestClass::Hello));
        assert_eq!(
            book.reply("h", ReplyType::Hello),
            Err(CorrelationError::AlreadyAnswered)
        );
        assert_eq!(
            book.reply("c", ReplyType::Status(SessionStatus::Detached)),
            Err(CorrelationError::UnexpectedStatus {
                class: RequestClass::Cancel,
                wanted: SessionStatus::Closed
            })
        );
        assert_eq!(
            book.reply("c", ReplyType::Status(SessionStatus::Closed)),
            Ok(RequestClass::Cancel)
        );
        assert_eq!(
            book.reply("q", ReplyType::Status(SessionStatus::Starting)),
            Ok(RequestClass::AnyStatus)
        );
        assert_eq!(
            book.reply("x", ReplyType::Failure),
            Err(CorrelationError::UnknownRequestId)
        );
        assert_eq!(
            book.reply("r", ReplyType::Failure),
            Err(CorrelationError::ReplyToSettlement)
        );
        assert_eq!(book.reply("s", ReplyType::Failure), Ok(RequestClass::Start));
    }

    #[test]
    fn the_handshake_comes_first_with_every_required_capability() {
        let required = vec!["turn".to_owned(), "reattach".to_owned()];
        assert_eq!(
            missing_capability(&required, &["turn".to_owned()]),
            Some("reattach")
        );
        assert_eq!(missing_capability(&required, &required), None);
        assert!(allowed_before_hello(&Event::status(
            "s",
            SessionStatus::Starting,
            None
        )));
        assert!(!allowed_before_hello(&Event::progress("t", "text")));
    }

    #[test]
    fn a_turn_failure_is_left_to_the_turn_and_marked_by_the_caller() {
        let mut book = Requests::default();
        book.sent("t", RequestClass::Turn);
        assert_eq!(book.reply("t", ReplyType::Failure), Ok(RequestClass::Turn));
        book.answered("t");
        assert_eq!(
            book.reply("t", ReplyType::Status(SessionStatus::Busy)),
            Err(CorrelationError::AlreadyAnswered)
        );
    }
}
