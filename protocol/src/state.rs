//! The persisted state object (`RemoteRunnerBackendState`) and its transition rules.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::error::{Rule, ValidationError};
use crate::grammar;
use crate::limits::{
    MAX_PROVIDER_STATE_BYTES, MAX_PROVIDER_STATE_DEPTH, MAX_PROVIDER_STATE_KEY_CHARS,
    SENSITIVE_KEY_WORDS,
};

/// The state a provider hands to the host, which persists it and returns it on `resume`.
///
/// Unknown top-level keys are dropped on decode, as the host does.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct State {
    /// Always 1.
    #[schemars(range(min = 1, max = 1))]
    pub version: u64,
    /// The provider name from the hello handshake.
    #[schemars(pattern(r"^[a-z][a-z0-9._-]{0,63}$"))]
    pub provider: String,
    /// Compute generation: a fence against late events from an old compute owner.
    pub generation: u64,
    /// The current compute resource; changes only together with the generation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(pattern(r"^[A-Za-z0-9][A-Za-z0-9._:/-]{0,255}$"))]
    pub remote_session_id: Option<String>,
    /// The agent conversation lineage; may outlive compute.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(pattern(r"^[A-Za-z0-9][A-Za-z0-9._:/-]{0,255}$"))]
    pub agent_thread_id: Option<String>,
    /// Provider-private recovery data: plain JSON, no credentials, <= 64 KiB.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider_state: Option<Map<String, Value>>,
}

impl State {
    /// A version-1 state with no ids and no providerState.
    pub fn new(provider: impl Into<String>, generation: u64) -> Self {
        State {
            version: 1,
            provider: provider.into(),
            generation,
            remote_session_id: None,
            agent_thread_id: None,
            provider_state: None,
        }
    }

    /// Sets `remoteSessionId`.
    pub fn with_remote_session_id(mut self, id: impl Into<String>) -> Self {
        self.remote_session_id = Some(id.into());
        self
    }

    /// Sets `agentThreadId`.
    pub fn with_agent_thread_id(mut self, id: impl Into<String>) -> Self {
        self.agent_thread_id = Some(id.into());
        self
    }

    /// Sets `providerState`.
    pub fn with_provider_state(mut self, provider_state: Map<String, Value>) -> Self {
        self.provider_state = Some(provider_state);
        self
    }

    /// Checks every rule on the state object itself (`path` prefixes error paths).
    pub fn validate_at(&self, path: &str) -> Result<(), ValidationError> {
        if self.version != 1 {
            return Err(ValidationError::new(
                Rule::StateVersion,
                format!("{path}.version"),
                format!("is {}; only version 1 exists", self.version),
            ));
        }
        grammar::provider(&format!("{path}.provider"), &self.provider)?;
        grammar::safe_integer(&format!("{path}.generation"), self.generation)?;
        if let Some(id) = &self.remote_session_id {
            grammar::id(&format!("{path}.remoteSessionId"), id)?;
        }
        if let Some(id) = &self.agent_thread_id {
            grammar::id(&format!("{path}.agentThreadId"), id)?;
        }
        if let Some(ps) = &self.provider_state {
            validate_provider_state(&format!("{path}.providerState"), ps)?;
        }
        Ok(())
    }

    /// Checks every rule on the state object, with paths rooted at `state`.
    pub fn validate(&self) -> Result<(), ValidationError> {
        self.validate_at("state")
    }
}

/// Checks `providerState`: depth <= 16 (the object itself is depth 0), finite numbers,
/// keys <= 256 UTF-16 units and not credential-like, <= 65536 bytes serialized.
pub fn validate_provider_state(
    path: &str,
    map: &Map<String, Value>,
) -> Result<(), ValidationError> {
    check_object(path, map, 0)?;
    let bytes = serde_json::to_vec(map)
        .map(|v| v.len())
        .unwrap_or(usize::MAX);
    if bytes > MAX_PROVIDER_STATE_BYTES {
        return Err(ValidationError::new(
            Rule::ProviderStateSize,
            path,
            format!(
                "serializes to {bytes} bytes; at most {MAX_PROVIDER_STATE_BYTES} are allowed. \
                 Keep only what recovery needs"
            ),
        ));
    }
    Ok(())
}

fn check_object(path: &str, map: &Map<String, Value>, depth: usize) -> Result<(), ValidationError> {
    for (key, value) in map {
        let child = format!("{path}.{key}");
        if grammar::utf16_len(key) > MAX_PROVIDER_STATE_KEY_CHARS {
            return Err(ValidationError::new(
                Rule::ProviderStateKeyLength,
                child,
                format!("key is longer than {MAX_PROVIDER_STATE_KEY_CHARS} UTF-16 units"),
            ));
        }
        if let Some(word) = sensitive_word(key) {
            return Err(ValidationError::new(
                Rule::ProviderStateSensitiveKey,
                child,
                format!(
                    "key {key:?} contains {word:?}; the host refuses credential-like keys in \
                     providerState. Rename the key and keep credentials out of state"
                ),
            ));
        }
        check_value(&child, value, depth + 1)?;
    }
    Ok(())
}

/// Every value, scalar or container, counts at its own depth (the host's `validJson`).
fn check_value(path: &str, value: &Value, depth: usize) -> Result<(), ValidationError> {
    check_depth(path, depth)?;
    match value {
        Value::Object(map) => check_object(path, map, depth),
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                check_value(&format!("{path}[{i}]"), item, depth + 1)?;
            }
            Ok(())
        }
        Value::Number(n) => {
            if n.as_f64().is_some_and(f64::is_finite) {
                Ok(())
            } else {
                Err(ValidationError::new(
                    Rule::ProviderStateNumber,
                    path,
                    "numbers in providerState must be finite",
                ))
            }
        }
        Value::Null | Value::Bool(_) | Value::String(_) => Ok(()),
    }
}

fn check_depth(path: &str, depth: usize) -> Result<(), ValidationError> {
    if depth > MAX_PROVIDER_STATE_DEPTH {
        Err(ValidationError::new(
            Rule::ProviderStateDepth,
            path,
            format!(
                "is {depth} levels deep; at most {MAX_PROVIDER_STATE_DEPTH} are allowed \
                 (providerState itself is level 0, its values level 1)"
            ),
        ))
    } else {
        Ok(())
    }
}

/// The sensitive word a key contains, after keeping only `[a-z0-9]` of its lowercase form.
pub fn sensitive_word(key: &str) -> Option<&'static str> {
    let folded: String = key
        .chars()
        .filter(char::is_ascii_alphanumeric)
        .map(|c| c.to_ascii_lowercase())
        .collect();
    SENSITIVE_KEY_WORDS
        .into_iter()
        .find(|word| folded.contains(word))
}

/// Why the host is applying a new state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transition {
    /// An ordinary update: `lineage_changed`, `final.state`, `status.state`, or a `ready`
    /// answering `start` / a reattach `resume`.
    Update,
    /// A `ready` answering `resume` with `resumeMode: "rebuild"`: the generation must go up.
    RebuildReady,
}

/// Checks the host's rules for replacing `prev` by `next`: same provider as the hello
/// handshake, generation never down, same generation keeps `remoteSessionId`, rebuild advances.
///
/// `next` should already have passed [`State::validate`].
pub fn check_transition(
    prev: Option<&State>,
    next: &State,
    expected_provider: &str,
    transition: Transition,
) -> Result<(), ValidationError> {
    if grammar::js_trim(&next.provider) != grammar::js_trim(expected_provider) {
        return Err(ValidationError::new(
            Rule::StateProviderMismatch,
            "state.provider",
            format!(
                "is {:?} but the hello handshake named {expected_provider:?}",
                next.provider
            ),
        ));
    }
    let Some(prev) = prev else {
        return Ok(());
    };
    if next.generation < prev.generation {
        return Err(ValidationError::new(
            Rule::GenerationDecreased,
            "state.generation",
            format!(
                "went down from {} to {}; the generation never decreases",
                prev.generation, next.generation
            ),
        ));
    }
    if transition == Transition::RebuildReady && next.generation <= prev.generation {
        return Err(ValidationError::new(
            Rule::RebuildNotAdvanced,
            "state.generation",
            format!(
                "is {} after a rebuild of generation {}; a rebuild creates new compute and \
                 must raise the generation",
                next.generation, prev.generation
            ),
        ));
    }
    if next.generation == prev.generation
        && prev.remote_session_id.is_some()
        && prev.remote_session_id != next.remote_session_id
    {
        return Err(ValidationError::new(
            Rule::RemoteSessionIdChanged,
            "state.remoteSessionId",
            format!(
                "changed from {:?} to {:?} at generation {}; bump the generation when the \
                 compute resource changes",
                prev.remote_session_id, next.remote_session_id, next.generation
            ),
        ));
    }
    Ok(())
}
