//! `run_once` (the CLI's `run once`) and `code_run` (the CLI's `code run`).

use remote_runner_engine::engine::CommandRecord;
use remote_runner_engine::{Error, ErrorCode, Result};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;

use super::Call;
use super::file::remote_name;
use super::local::{Guarded, Stage};
use super::reply::{Reply, command_text};
use crate::commands::code::{self, RuntimeArgs};
use crate::commands::run::{self as cli, OnceArgs as CliOnce, PathPair, RunCommand};

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Upload {
    /// Path on the server's host, beneath one of its roots (--root; relative: from the first root)
    pub local: String,
    /// Where it goes on the machine (relative: under the run's cwd)
    pub remote: String,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Download {
    /// Path on the machine (relative: under the run's cwd)
    pub remote: String,
    /// Where it goes on the server's host, beneath one of its roots (--root; relative: from the first root)
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
    let roots = &call.state.roots;
    let guarded = Guarded::collect(&call.state.state_dir);
    // Inputs are copied from beneath the roots into a private staging directory and artifacts
    // land there first (see `local`): the engine's run never names a path in a root.
    let stage = Stage::new(&call.state.state_dir)?;
    let inputs = args.inputs.unwrap_or_default();
    let artifacts = args.artifacts.unwrap_or_default();
    let mut staged_inputs = Vec::new();
    for (n, u) in inputs.iter().enumerate() {
        let target = roots.locate(&u.local)?;
        let slot = stage.slot(n)?;
        let staged = match target.stage_upload(roots, &guarded, &slot) {
            Ok(staged) => staged,
            // A missing input is the run's to report (as the CLI does), not a refusal.
            Err(e) if e.code == ErrorCode::Io => slot.join("missing"),
            Err(e) => return Err(e),
        };
        staged_inputs.push(PathPair {
            from: staged.to_string_lossy().into_owned(),
            to: u.remote.clone(),
        });
    }
    let mut targets = Vec::new();
    let mut staged_artifacts = Vec::new();
    for (n, d) in artifacts.iter().enumerate() {
        let target = roots.locate(&d.local)?;
        target.precheck_download(roots, &guarded)?;
        let staged = stage.slot(inputs.len() + n)?.join("download");
        staged_artifacts.push(PathPair {
            from: d.remote.clone(),
            to: staged.to_string_lossy().into_owned(),
        });
        targets.push((target, staged));
    }
    let state = call.state.clone();
    let once = CliOnce {
        machine: args.machine,
        cwd: args.cwd,
        inputs: staged_inputs,
        cmd: args.command,
        artifacts: staged_artifacts,
        keep_session: false,
        exit_code: false,
        verify: false,
        slurm_args: None,
    };
    let mut json = super::on_own_thread(move || async move {
        let ctx = state.context(None);
        cli::run(&ctx, RunCommand::Once(once)).await.map(|r| r.json)
    })
    .await?;
    for (n, u) in inputs.iter().enumerate() {
        json["inputs"][n]["local"] = Value::from(u.local.as_str());
    }
    let guarded = Guarded::collect(&call.state.state_dir);
    for (n, ((target, staged), d)) in targets.iter().zip(&artifacts).enumerate() {
        let entry = &mut json["artifacts"][n];
        entry["local"] = Value::from(d.local.as_str());
        if !matches!(entry["status"].as_str(), Some("succeeded" | "partial")) {
            continue;
        }
        if let Err(e) = target.place_download(roots, &guarded, staged, remote_name(&d.remote)) {
            let error = serde_json::json!({
                "code": e.code.as_str(),
                "message": e.message,
                "retryable": e.retryable,
            });
            entry["status"] = Value::from("failed");
            entry["error"] = error.clone();
            if !json["error"].is_object() {
                json["error"] = error;
            }
        }
    }
    drop(stage);
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
