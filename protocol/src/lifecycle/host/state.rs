//! The state the host applies: provider name from hello, generation and transition rules,
//! resume and rebuild, and the screen fence that follows the generation.

use crate::error::ValidationError;
use crate::event::HelloEvent;
use crate::operations::OperationKind;
use crate::state::{State, Transition, check_transition};
use crate::usage::Usage;

use super::{ScreenFence, ScreenVerdict};

/// Why a resume's `ready` is refused beyond the transition rules.
#[derive(Debug, Clone, PartialEq)]
pub enum ReadyError {
    /// The state breaks a transition rule (provider, generation, remoteSessionId, ...).
    Transition(ValidationError),
    /// `agentThreadId` (the conversation) was dropped or changed.
    AgentThreadChanged {
        /// The persisted one.
        persisted: String,
        /// What the ready carried.
        got: Option<String>,
    },
}

/// Why an `outbound_message` / `session_tool` is a protocol error before its turn is looked at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OperationRefusal {
    /// The hello did not advertise the operation's capability.
    NotAdvertised,
    /// It names another generation than the state's.
    GenerationMismatch {
        /// The state's generation, if any.
        current: Option<u64>,
    },
}

/// Why a `final.usage` is a protocol error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UsageError {
    /// No state (no `ready`) yet.
    NoState,
    /// Usage for another generation than the state's.
    Generation(ValidationError),
}

/// The host's state in force, the provider name and capabilities from hello, and its screen
/// fence.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct HostState {
    provider: Option<String>,
    capabilities: Vec<String>,
    state: Option<State>,
    fence: ScreenFence,
}

impl HostState {
    /// The hello the host accepted: every state must carry its provider, and only its
    /// capabilities may be used.
    pub fn hello(&mut self, hello: &HelloEvent) {
        self.provider = Some(hello.provider.clone());
        self.capabilities = hello.capabilities.clone();
    }

    /// Whether the hello advertised `capability`.
    pub fn has_capability(&self, capability: &str) -> bool {
        self.capabilities.iter().any(|c| c == capability)
    }

    /// An operation of `kind` for `generation`: advertised, and for the state's generation.
    pub fn admit_operation(
        &self,
        kind: OperationKind,
        generation: u64,
    ) -> Result<(), OperationRefusal> {
        if !self.has_capability(kind.capability()) {
            return Err(OperationRefusal::NotAdvertised);
        }
        if self.generation() != Some(generation) {
            return Err(OperationRefusal::GenerationMismatch {
                current: self.generation(),
            });
        }
        Ok(())
    }

    /// A final's usage: only once a state is in force, for its generation.
    pub fn check_usage(&self, usage: &Usage) -> Result<(), UsageError> {
        let generation = self.generation().ok_or(UsageError::NoState)?;
        usage
            .check_generation(generation)
            .map_err(UsageError::Generation)
    }

    /// The state in force.
    pub fn state(&self) -> Option<&State> {
        self.state.as_ref()
    }

    /// Its generation.
    pub fn generation(&self) -> Option<u64> {
        self.state.as_ref().map(|s| s.generation)
    }

    fn expected_provider<'a>(&'a self, next: &'a State) -> &'a str {
        self.provider.as_deref().unwrap_or(&next.provider)
    }

    /// An ordinary update (`ready` for `start`, `lineage_changed`, `final.state`, a state on
    /// a status): checked against the state in force, then applied.
    pub fn apply(&mut self, next: &State) -> Result<(), ValidationError> {
        let provider = self.expected_provider(next).to_owned();
        check_transition(self.state.as_ref(), next, &provider, Transition::Update)?;
        if self
            .state
            .as_ref()
            .is_none_or(|s| next.generation > s.generation)
        {
            self.fence.generation_raised();
        }
        self.state = Some(next.clone());
        Ok(())
    }

    /// A `ready` answering a `resume` that carried `persisted` (`rebuild` for
    /// `resumeMode: "rebuild"`, which must raise the generation). The conversation
    /// (`agentThreadId`) is kept. A generation the ready raised is fenced for screens until
    /// the host's next command.
    pub fn apply_resume(
        &mut self,
        persisted: &State,
        next: &State,
        rebuild: bool,
    ) -> Result<(), ReadyError> {
        let transition = if rebuild {
            Transition::RebuildReady
        } else {
            Transition::Update
        };
        let provider = self.expected_provider(next).to_owned();
        check_transition(Some(persisted), next, &provider, transition)
            .map_err(ReadyError::Transition)?;
        if let Some(thread) = &persisted.agent_thread_id
            && next.agent_thread_id.as_ref() != Some(thread)
        {
            return Err(ReadyError::AgentThreadChanged {
                persisted: thread.clone(),
                got: next.agent_thread_id.clone(),
            });
        }
        if self.state.is_none() {
            self.state = Some(persisted.clone());
        }
        self.apply(next).map_err(ReadyError::Transition)?;
        if next.generation > persisted.generation {
            self.fence.raised_by_ready(next.generation);
        }
        Ok(())
    }

    /// The host wrote a command: a generation a ready raised is now applied.
    pub fn command_written(&mut self) {
        self.fence.command_written();
    }

    /// Judges a `terminal_screen`.
    pub fn screen(&mut self, generation: u64, sequence: u64) -> ScreenVerdict {
        let current = self.generation();
        self.fence.observe(current, generation, sequence)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Rule;

    fn state(provider: &str, generation: u64) -> State {
        State::new(provider, generation).with_remote_session_id(format!("c-{generation}"))
    }

    fn hello(capabilities: &[&str]) -> HelloEvent {
        HelloEvent {
            request_id: "h".into(),
            provider: "demo".into(),
            capabilities: capabilities.iter().map(|c| (*c).to_owned()).collect(),
        }
    }

    #[test]
    fn operations_need_the_capability_and_the_current_generation() {
        let mut host = HostState::default();
        host.hello(&hello(&["outbound_message"]));
        assert_eq!(
            host.admit_operation(OperationKind::SessionTool, 1),
            Err(OperationRefusal::NotAdvertised)
        );
        assert_eq!(
            host.admit_operation(OperationKind::Outbound, 1),
            Err(OperationRefusal::GenerationMismatch { current: None })
        );
        host.apply(&state("demo", 1)).unwrap();
        host.admit_operation(OperationKind::Outbound, 1).unwrap();
    }

    #[test]
    fn states_carry_the_hello_provider_and_never_go_back() {
        let mut host = HostState::default();
        host.hello(&hello(&[]));
        assert_eq!(
            host.apply(&state("other", 1)).unwrap_err().rule,
            Rule::StateProviderMismatch
        );
        host.apply(&state("demo", 2)).unwrap();
        assert!(host.apply(&state("demo", 1)).is_err());
        assert_eq!(host.generation(), Some(2));
    }

    #[test]
    fn a_rebuild_raises_the_generation_keeps_the_thread_and_fences_screens() {
        let mut host = HostState::default();
        host.hello(&hello(&[]));
        let mut persisted = state("demo", 1);
        persisted.agent_thread_id = Some("thread".into());
        assert!(matches!(
            host.apply_resume(&persisted, &persisted, true),
            Err(ReadyError::Transition(_))
        ));
        let mut rebuilt = state("demo", 2);
        assert_eq!(
            host.apply_resume(&persisted, &rebuilt, true),
            Err(ReadyError::AgentThreadChanged {
                persisted: "thread".into(),
                got: None
            })
        );
        rebuilt.agent_thread_id = Some("thread".into());
        host.apply_resume(&persisted, &rebuilt, true).unwrap();
        assert_eq!(host.screen(2, 1), ScreenVerdict::EarlyNewGeneration);
        host.command_written();
        assert_eq!(host.screen(2, 1), ScreenVerdict::Apply);
    }
}
