//! The JSON Schemas in docs/schema/ are generated from the types; drift fails this test.

use std::path::PathBuf;

fn schema_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../docs/schema")
}

#[test]
fn schemas_in_docs_match_the_types() {
    let dir = schema_dir();
    let update = std::env::var_os("UPDATE_SCHEMA").is_some_and(|v| v == "1");
    let mut stale = Vec::new();
    for (name, generated) in remote_runner_protocol::schema::files() {
        let path = dir.join(name);
        if update {
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(&path, &generated).unwrap();
            continue;
        }
        let on_disk = std::fs::read_to_string(&path).unwrap_or_default();
        if on_disk != generated {
            stale.push(path.display().to_string());
        }
    }
    assert!(
        stale.is_empty(),
        "schema files are out of date: {stale:?}. Regenerate them with \
         `UPDATE_SCHEMA=1 cargo test -p remote-runner-protocol --test schema` and commit the result"
    );
}

#[test]
fn schemas_are_objects_with_the_envelope() {
    let commands = serde_json::to_value(remote_runner_protocol::schema::commands()).unwrap();
    let envelope = &commands["allOf"][0];
    assert_eq!(
        envelope["properties"]["protocol"]["const"],
        "botmux.remote-runner"
    );
    assert_eq!(envelope["properties"]["version"]["const"], 1);
    let variants = commands["allOf"][1]["oneOf"].as_array().unwrap();
    assert_eq!(variants.len(), remote_runner_protocol::COMMAND_TYPES.len());
    let events = serde_json::to_value(remote_runner_protocol::schema::events()).unwrap();
    let variants = events["allOf"][1]["oneOf"].as_array().unwrap();
    assert_eq!(variants.len(), remote_runner_protocol::EVENT_TYPES.len());
}

#[test]
fn optional_fields_are_not_nullable_but_usage_context_is() {
    let events = serde_json::to_string(&remote_runner_protocol::schema::events()).unwrap();
    let events: serde_json::Value = serde_json::from_str(&events).unwrap();
    let snapshot = &events["$defs"]["UsageSnapshot"];
    assert_eq!(
        snapshot["required"],
        serde_json::json!(["context", "tokens"])
    );
    assert_eq!(
        snapshot["properties"]["context"]["anyOf"][1]["type"],
        "null"
    );
    assert_eq!(
        snapshot["properties"]["turnTokens"]["anyOf"][1]["type"],
        "null"
    );
    assert_eq!(snapshot["properties"]["model"]["type"], "string");
    let state = serde_json::to_value(remote_runner_protocol::schema::state()).unwrap();
    assert_eq!(state["properties"]["remoteSessionId"]["type"], "string");
    assert_eq!(state["properties"]["providerState"]["type"], "object");
}
