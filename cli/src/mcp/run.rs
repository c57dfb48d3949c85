//! `run_once` (the CLI's `run once`) and `code_run` (the CLI's `code run`).

use remote_runner_engine::engine::CommandRecord;
use remote_runner_engine::{Error, Result};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;

use super::Call;
use super::reply::{Reply, command_text};
use crate::commands::code::{self, RuntimeArgs};
use crate::commands::run::{self as cli, OnceArgs as CliOnce, PathPair, RunCommand};

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Upload {
    /// Path on the server's host
    pub local: String,
    /// Where it goes on the machine (relative: under the run's cwd)
    pub remote: String,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Download {
    /// Path on the machine (relative: under the run's cwd)
    pub remote: String,
    /// Where it goes on the server's host
    pub local: String,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct OnceArgs {
    /// Machine id (see machine_list)
    pub machine: String,
    /// The shell command line to run
    pub command: String,
    /// Working directory (absolute) [default: the machine's default cwd]
    pub cwd: Option<String>,
    /// Files or directories uploaded before the command
    pub inputs: Option<Vec<Upload>>,
    /// Files or directories downloaded after the command
    pub artifacts: Option<Vec<Download>>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CodeArgs {
    /// Machine id (see machine_list)
    pub machine: String,
    /// javascript (node) or python (python3)
    pub language: String,
    /// The program's text
    pub program: String,
    /// Wall-clock budget of the run in seconds [default: 30]
    pub time_budget_s: Option<f64>,
}

pub async fn once(call: &Call, args: OnceArgs) -> Result<Reply> {
    call.state.check_machine(&args.machine)?;
    for local in args.inputs.iter().flatten().map(|u| &u.local) {
        call.state.check_local(local)?;
    }
    for local in args.artifacts.iter().flatten().map(|d| &d.local) {
        call.state.check_local(local)?;
    }
    let state = call.state.clone();
    let once = CliOnce {
        machine: args.machine,
        cwd: args.cwd,
        inputs: args
            .inputs
            .unwrap_or_default()
            .into_iter()
            .map(|u| PathPair {
                from: u.local,
                to: u.remote,
            })
            .collect(),
        cmd: args.command,
        artifacts: args
            .artifacts
            .unwrap_or_default()
            .into_iter()
            .map(|d| PathPair {
                from: d.remote,
                to: d.local,
            })
            .collect(),
        keep_session: false,
        exit_code: false,
        verify: false,
        slurm_args: None,
    };
    let json = super::on_own_thread(move || async move {
        let ctx = state.context(None);
        cli::run(&ctx, RunCommand::Once(once)).await.map(|r| r.json)
    })
    .await?;
    // A command that ran and failed is a result; a run that could not do its part (reach the
    // machine, upload an input, bring an artifact back) is a tool error, with its code.
    let ran = json["exit_code"].is_i64();
    let moved = ["inputs", "artifacts"].iter().all(|k| {
        json[*k]
            .as_array()
            .is_none_or(|a| a.iter().all(|t| t["status"] == "succeeded"))
    });
    let failed = json["error"].is_object() && !(ran && moved);
    let mut text = String::new();
    if failed {
        text.push_str(&format!(
            "error [{}]: ",
            json["error"]["code"].as_str().unwrap_or("internal")
        ));
    }
    text.push_str(&format!(
        "Run {} {} on {}.",
        json["run_id"].as_str().unwrap_or("?"),
        json["status"].as_str().unwrap_or("?"),
        json["machine_id"].as_str().unwrap_or("?"),
    ));
    if let Some(err) = json["error"]["message"].as_str() {
        text.push_str(&format!(" {err}"));
    }
    if let Ok(rec) = serde_json::from_value::<CommandRecord>(json["command_result"].clone()) {
        text.push('\n');
        text.push_str(&command_text(&rec));
    }
    let mut reply = Reply::new(json, text);
    reply.is_error = failed;
    Ok(reply)
}

pub async fn code(call: &Call, args: CodeArgs) -> Result<Reply> {
    call.state.check_machine(&args.machine)?;
    let ctx = call.state.context(None);
    let runtime = RuntimeArgs {
        machine: Some(args.machine),
        session: None,
        language: args.language,
        time_budget: args.time_budget_s.unwrap_or(30.0),
        output_cap: call.state.max_output,
        cwd: None,
        max_file_size: None,
        max_memory: None,
        max_processes: None,
        // An agent's runs are sealed or refused: weaker isolation is never the agent's choice.
        allow_weak_isolation: false,
    };
    let rt = code::runtime(&ctx, &runtime).await?;
    let sandbox = rt.sandbox().await?;
    let result = rt
        .run(&args.program, &[], None, call.cancel.clone())
        .await?;
    let json: Value = serde_json::from_str(&code::with_sandbox(&result.json, sandbox.as_str()))
        .map_err(|e| Error::internal(format!("the runtime's result is not JSON: {e}")))?;
    let mut text = match &result.error_kind {
        Some(kind) => format!(
            "The program failed [{kind}]: {}",
            json["error"]["message"].as_str().unwrap_or("")
        ),
        None => "The program ran.".to_string(),
    };
    for line in json["logs"].as_array().into_iter().flatten() {
        text.push('\n');
        text.push_str(line.as_str().unwrap_or(""));
    }
    if let Some(value) = json.get("value") {
        text.push_str(&format!("\n=> {value}"));
    }
    Ok(Reply::new(json, text))
}
