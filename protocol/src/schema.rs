//! JSON Schemas generated from the types (kept in `docs/schema/` and checked by a test).

use schemars::{Schema, schema_for};

/// Schema of every command (the body; the envelope keys are added by [`envelope`]).
pub fn commands() -> Schema {
    with_envelope(schema_for!(crate::Command))
}

/// Schema of every event.
pub fn events() -> Schema {
    with_envelope(schema_for!(crate::Event))
}

/// Schema of the persisted state object.
pub fn state() -> Schema {
    schema_for!(crate::State)
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
        let one_of = obj.remove("oneOf");
        let mut all_of = vec![envelope];
        if let Some(one_of) = one_of {
            all_of.push(serde_json::json!({ "oneOf": one_of }));
        }
        obj.insert("allOf".into(), serde_json::Value::Array(all_of));
    }
    schema
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
