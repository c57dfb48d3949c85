//! JSON Schemas generated from the types, kept in `docs/schema/` and checked by a test.
//!
//! The schemas describe the wire shape (field names, types, enums, ranges and the canonical
//! spelling of ids). Rules that the JSON Schema language cannot express well (trimming, UTF-16
//! lengths, providerState contents, base64 and image magic, state transitions) are enforced by
//! this crate's validation, which is authoritative.

use schemars::{JsonSchema, Schema, schema_for};
use serde_json::{Map, Value};

/// Schema of every command line, envelope included.
pub fn commands() -> Schema {
    finish(with_envelope(schema_for!(crate::Command)))
}

/// Schema of every event line, envelope included.
pub fn events() -> Schema {
    finish(with_envelope(schema_for!(crate::Event)))
}

/// Schema of the persisted state object.
pub fn state() -> Schema {
    finish(schema_for!(crate::State))
}

/// Adds the required `protocol` and `version` envelope keys to a message schema.
fn with_envelope(mut schema: Schema) -> Schema {
    let envelope = serde_json::json!({
        "type": "object",
        "required": ["protocol", "version", "type"],
        "properties": {
            "protocol": { "const": crate::PROTOCOL },
            "version": { "const": crate::PROTOCOL_VERSION }
        }
    });
    if let Some(obj) = schema.as_object_mut() {
        let mut all_of = vec![envelope];
        if let Some(one_of) = obj.remove("oneOf") {
            all_of.push(serde_json::json!({ "oneOf": one_of }));
        }
        obj.insert("allOf".into(), Value::Array(all_of));
    }
    schema
}

/// Optional fields are omitted on the wire, never `null`: drop the `null` alternative that
/// schemars adds for `Option`, except where a field is marked `x-nullable` (usage
/// `turnTokens`). Required nullable fields (`context`, `tokens`) keep theirs.
fn finish(mut schema: Schema) -> Schema {
    if let Some(obj) = schema.as_object_mut() {
        strip_optional_nulls(obj);
    }
    schema
}

fn strip_optional_nulls(obj: &mut Map<String, Value>) {
    let required: Vec<String> = obj
        .get("required")
        .and_then(Value::as_array)
        .map(|r| {
            r.iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default();
    if let Some(Value::Object(props)) = obj.get_mut("properties") {
        for (name, prop) in props.iter_mut() {
            let Value::Object(prop) = prop else { continue };
            let keep_null = prop.remove("x-nullable").is_some() || required.contains(name);
            if !keep_null {
                drop_null(prop);
            }
        }
    }
    for value in obj.values_mut() {
        match value {
            Value::Object(child) => strip_optional_nulls(child),
            Value::Array(items) => {
                for item in items {
                    if let Value::Object(child) = item {
                        strip_optional_nulls(child);
                    }
                }
            }
            _ => {}
        }
    }
}

fn drop_null(prop: &mut Map<String, Value>) {
    if let Some(Value::Array(types)) = prop.get_mut("type") {
        types.retain(|t| t != "null");
        if types.len() == 1 {
            let only = types.remove(0);
            prop.insert("type".into(), only);
        }
    }
    if let Some(Value::Array(any_of)) = prop.get("anyOf") {
        let rest: Vec<Value> = any_of
            .iter()
            .filter(|s| s.get("type") != Some(&Value::from("null")))
            .cloned()
            .collect();
        prop.remove("anyOf");
        if rest.len() == 1 {
            if let Value::Object(only) = &rest[0] {
                for (k, v) in only {
                    prop.insert(k.clone(), v.clone());
                }
            }
        } else {
            prop.insert("anyOf".into(), Value::Array(rest));
        }
    }
}

/// `T` or `null`, for fields that are present-but-nullable.
pub(crate) fn nullable<T: JsonSchema>(generator: &mut schemars::SchemaGenerator) -> Schema {
    schemars::json_schema!({
        "anyOf": [generator.subschema_for::<T>(), { "type": "null" }],
        "x-nullable": true
    })
}

/// The schema files, as `(file name, pretty JSON with a trailing newline)`.
pub fn files() -> Vec<(&'static str, String)> {
    [
        ("commands.schema.json", commands()),
        ("events.schema.json", events()),
        ("state.schema.json", state()),
    ]
    .into_iter()
    .map(|(name, schema)| {
        let mut text = serde_json::to_string_pretty(&schema).unwrap_or_default();
        text.push('\n');
        (name, text)
    })
    .collect()
}
