//! `machine_list`: the CLI's `machine list --json`, limited to the machines served here.

use remote_runner_engine::Result;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

use super::Call;
use super::reply::Reply;
use crate::commands::machine::{self, MachineCommand};

/// No arguments.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListArgs {}

pub async fn list(call: &Call, _args: ListArgs) -> Result<Reply> {
    let ctx = call.state.context(None);
    let mut json = machine::run(&ctx, MachineCommand::List).await?.json;
    let served: Vec<Value> = json["machines"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|m| {
            m["machine_id"]
                .as_str()
                .is_some_and(|id| call.state.machine_allowed(id))
        })
        .cloned()
        .collect();
    let mut text = format!("{} machine(s):", served.len());
    for m in &served {
        let field = |k: &str| m[k].as_str().unwrap_or("-").to_string();
        text.push_str(&format!(
            "\n{}  {}@{}  cwd {}",
            field("machine_id"),
            field("user"),
            field("host"),
            field("default_cwd")
        ));
    }
    json["summary"] = json!({ "machine_count": served.len() });
    json["machines"] = Value::Array(served);
    Ok(Reply::new(json, text))
}
