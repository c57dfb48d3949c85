//! `final.usage`: a usage snapshot the remote runtime confirmed (never estimated).

use schemars::JsonSchema;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::error::{Rule, ValidationError};
use crate::grammar;

/// `final.usage`: the snapshot and the compute generation it belongs to.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Usage {
    /// Must equal the generation of the state in force after the final is applied.
    pub generation: u64,
    /// The measured numbers.
    pub snapshot: UsageSnapshot,
}

/// What the remote runtime reported. `context` and `tokens` are always on the wire (object
/// or `null`); a metric the runtime did not report stays `null`/absent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct UsageSnapshot {
    /// Context window use; `null` when unknown. Required on the wire.
    #[serde(deserialize_with = "required_nullable")]
    #[schemars(required, schema_with = "crate::schema::nullable::<ContextUsage>")]
    pub context: Option<ContextUsage>,
    /// Cumulative tokens; `null` when unknown. Required on the wire.
    #[serde(deserialize_with = "required_nullable")]
    #[schemars(required, schema_with = "crate::schema::nullable::<TokenCounts>")]
    pub tokens: Option<TokenCounts>,
    /// This turn's tokens: absent (`None`), `null` (`Some(None)`) or counts.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "nullable_present",
        serialize_with = "serialize_nullable"
    )]
    #[schemars(schema_with = "crate::schema::nullable::<TokenCounts>")]
    pub turn_tokens: Option<Option<TokenCounts>>,
    /// The model that actually ran (<= 256).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// The reasoning effort that actually ran (<= 64).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_effort: Option<String>,
    /// The backend variant that actually ran (<= 64).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_backend_variant: Option<String>,
}

/// Context window use.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ContextUsage {
    /// Tokens in the context now.
    pub used_tokens: u64,
    /// Size of the window (> 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub window_tokens: Option<u64>,
    /// Percentage used, finite, 0..=100.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[serde(serialize_with = "serialize_js_number")]
    #[schemars(range(min = 0, max = 100))]
    pub percent_used: Option<f64>,
}

/// Input and output token counts (`{"in":…, "out":…}`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct TokenCounts {
    /// Input tokens.
    #[serde(rename = "in")]
    pub input: u64,
    /// Output tokens.
    #[serde(rename = "out")]
    pub output: u64,
}

fn required_nullable<'de, D, T>(deserializer: D) -> Result<Option<T>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    Option::<T>::deserialize(deserializer)
}

fn nullable_present<'de, D, T>(deserializer: D) -> Result<Option<Option<T>>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    Option::<T>::deserialize(deserializer).map(Some)
}

fn serialize_nullable<S, T>(value: &Option<Option<T>>, serializer: S) -> Result<S::Ok, S::Error>
where
    S: Serializer,
    T: Serialize,
{
    match value {
        Some(inner) => inner.serialize(serializer),
        None => serializer.serialize_none(),
    }
}

/// Writes a number the way JavaScript's `JSON.stringify` does: `3`, not `3.0`.
fn serialize_js_number<S: Serializer>(
    value: &Option<f64>,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    match *value {
        Some(v) if v.fract() == 0.0 && v.abs() <= crate::limits::MAX_SAFE_INTEGER as f64 => {
            serializer.serialize_i64(v as i64)
        }
        Some(v) => serializer.serialize_f64(v),
        None => serializer.serialize_none(),
    }
}

impl Usage {
    /// Checks integers, window, percentage and labels (`path` prefixes error paths).
    pub fn validate_at(&self, path: &str) -> Result<(), ValidationError> {
        grammar::safe_integer(&format!("{path}.generation"), self.generation)?;
        let snap = &self.snapshot;
        let spath = format!("{path}.snapshot");
        if let Some(ctx) = &snap.context {
            let cpath = format!("{spath}.context");
            grammar::safe_integer(&format!("{cpath}.usedTokens"), ctx.used_tokens)?;
            if let Some(window) = ctx.window_tokens {
                let wpath = format!("{cpath}.windowTokens");
                grammar::safe_integer(&wpath, window)?;
                if window == 0 {
                    return Err(ValidationError::new(
                        Rule::UsageWindowTokens,
                        wpath,
                        "must be > 0; leave it out when the window size is unknown",
                    ));
                }
            }
            if let Some(pct) = ctx.percent_used
                && !(pct.is_finite() && (0.0..=100.0).contains(&pct))
            {
                return Err(ValidationError::new(
                    Rule::UsagePercent,
                    format!("{cpath}.percentUsed"),
                    format!("is {pct}; must be a finite number in 0..=100"),
                ));
            }
        }
        if let Some(tokens) = &snap.tokens {
            check_tokens(&format!("{spath}.tokens"), tokens)?;
        }
        if let Some(Some(tokens)) = &snap.turn_tokens {
            check_tokens(&format!("{spath}.turnTokens"), tokens)?;
        }
        for (name, value, max) in [
            ("model", &snap.model, 256),
            ("reasoningEffort", &snap.reasoning_effort, 64),
            ("modelBackendVariant", &snap.model_backend_variant, 64),
        ] {
            if let Some(value) = value {
                grammar::non_empty(Rule::UsageLabel, &format!("{spath}.{name}"), value, max)?;
            }
        }
        Ok(())
    }

    /// Checks that the usage belongs to `state_generation` (the state in force after the
    /// final's own state is applied).
    pub fn check_generation(&self, state_generation: u64) -> Result<(), ValidationError> {
        if self.generation == state_generation {
            Ok(())
        } else {
            Err(ValidationError::new(
                Rule::UsageGeneration,
                "usage.generation",
                format!(
                    "is {} but the state generation is {state_generation}; report usage only \
                     for the current compute generation",
                    self.generation
                ),
            ))
        }
    }
}

fn check_tokens(path: &str, tokens: &TokenCounts) -> Result<(), ValidationError> {
    grammar::safe_integer(&format!("{path}.in"), tokens.input)?;
    grammar::safe_integer(&format!("{path}.out"), tokens.output)
}
