//! The state the host applies: provider name from hello, generation and transition rules,
//! resume and rebuild, and the screen fence that follows the generation.

use crate::error::ValidationError;
use crate::state::{State, Transition, check_transition};

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

/// The host's state in force, the provider name it expects, and its screen fence.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct HostState {
    provider: Option<String>,
    state: Option<State>,
    fence: ScreenFence,
}

impl HostState {
    /// The hello named `provider`: every state must carry it.
    pub fn hello(&mut self, provider: &str) {
        self.provider = Some(provider.to_owned());
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

    /// Whether an operation (or usage) for `generation` matches the state in force.
    pub fn is_current(&self, generation: u64) -> bool {
        self.generation() == Some(generation)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Rule;

    fn state(provider: &str, generation: u64) -> State {
        State::new(provider, generation).with_remote_session_id(format!("c-{generation}"))
    }

    #[test]
    fn states_carry_the_hello_provider_and_never_go_back() {
        let mut host = HostState::default();
        host.hello("demo");
        assert_eq!(
            host.apply(&state("other", 1)).unwrap_err().rule,
            Rule::StateProviderMismatch
        );
        host.apply(&state("demo", 2)).unwrap();
        assert!(host.apply(&state("demo", 1)).is_err());
        assert!(host.is_current(2));
    }

    #[test]
    fn a_rebuild_raises_the_generation_keeps_the_thread_and_fences_screens() {
        let mut host = HostState::default();
        host.hello("demo");
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
