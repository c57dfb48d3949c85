//! `botmux-host-turn`: one provider turn, driven the way the BotMux host drives it, every answer
//! checked: `hello` (the default capabilities advertised), `start` and its `ready`, then the
//! `turn` and its `status busy` ACK, the turn's `final` (its text must contain `--expect`), and
//! the close: `cancel`, its `status closed`, SIGTERM with stdin left open, the provider exits.
//! Each command is sent only after the answer to the one before (a host never sends a turn
//! before `ready`). One line per step on stdout; on the first step that fails, a line naming
//! it on stderr and exit status 1 (2 for usage errors). scripts/demo.sh uses it.
//!
//! ```text
//! botmux-host-turn --cwd DIR --content 'echo hi' --expect hi -- botmux-remote-runner
//! ```

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Result, bail};
use clap::Parser;
use remote_runner_conformance::process::Spawn;
use remote_runner_conformance::script::{ALL_CAPABILITIES, ScriptHost};
use serde_json::{Value, json};

/// Drive one turn through a BotMux remote-runner provider as the host does, checking each
/// answer; exit 1 naming the first step that failed.
#[derive(Debug, Parser)]
#[command(name = "botmux-host-turn", version)]
struct Args {
    /// The turn's content.
    #[arg(long, value_name = "TEXT")]
    content: String,
    /// Text the turn's final must contain.
    #[arg(long, value_name = "TEXT")]
    expect: Option<String>,
    /// The cwd sent in `start` (and the provider's working directory).
    #[arg(long, value_name = "DIR", default_value = ".")]
    cwd: PathBuf,
    /// The host session id.
    #[arg(long, value_name = "ID", default_value = "demo")]
    session_id: String,
    /// Seconds each answer may take (the turn's final included).
    #[arg(long, value_name = "SECONDS", default_value_t = 60)]
    timeout: u64,
    /// The provider program and its arguments.
    #[arg(required = true, last = true, value_name = "PROVIDER")]
    provider: Vec<String>,
}

/// A step's name and why it failed.
struct Failed(&'static str, anyhow::Error);

trait StepResult<T> {
    fn step(self, name: &'static str) -> Result<T, Failed>;
}

impl<T> StepResult<T> for Result<T> {
    fn step(self, name: &'static str) -> Result<T, Failed> {
        self.map_err(|e| Failed(name, e))
    }
}

fn main() -> ExitCode {
    let args = Args::parse();
    match drive(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(Failed(step, err)) => {
            eprintln!("botmux-host-turn: step {step} failed: {err:#}");
            ExitCode::from(1)
        }
    }
}

fn drive(args: &Args) -> Result<(), Failed> {
    let wait = Duration::from_secs(args.timeout);
    let cwd = std::path::absolute(&args.cwd)
        .map_err(anyhow::Error::from)
        .step("spawn")?;
    let mut spec = Spawn::new(&args.provider[0], &cwd, &[]);
    spec.args = args.provider[1..].to_vec();
    let mut host = ScriptHost::spawn_with(spec).step("spawn")?;

    host.send(
        "hello",
        json!({"requestId": "hello:1", "sessionId": args.session_id, "requiredCapabilities": ALL_CAPABILITIES}),
    )
    .step("hello")?;
    let hello = reply(&mut host, "hello:1", wait).step("hello")?;
    expect_type(&hello, "hello").step("hello")?;
    let capabilities = hello["capabilities"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let missing: Vec<&str> = ALL_CAPABILITIES
        .into_iter()
        .filter(|c| !capabilities.iter().any(|v| v == c))
        .collect();
    if !missing.is_empty() {
        return Err(Failed(
            "hello",
            anyhow::anyhow!("the provider lacks the capabilities {missing:?}"),
        ));
    }
    println!(
        "<- hello: provider {}, {} capabilities",
        text(&hello["provider"]),
        capabilities.len()
    );

    host.send(
        "start",
        json!({"requestId": "start:1", "sessionId": args.session_id, "cwd": cwd}),
    )
    .step("start")?;
    let ready = reply(&mut host, "start:1", wait).step("ready")?;
    expect_type(&ready, "ready").step("ready")?;
    println!(
        "<- ready: remote session {}, generation {}",
        text(&ready["state"]["remoteSessionId"]),
        ready["state"]["generation"]
    );

    let result = turn_and_close(args, &mut host, wait);
    if matches!(&result, Err(Failed(step, _)) if *step != "close") {
        // Close the remote session as the host would (best effort): the demo leaves none.
        let _ = host.send("cancel", json!({"requestId": "cancel:cleanup"}));
        let _ = reply(&mut host, "cancel:cleanup", Duration::from_secs(10));
    }
    result
}

/// The turn and its final, then the close.
fn turn_and_close(args: &Args, host: &mut ScriptHost, wait: Duration) -> Result<(), Failed> {
    host.begin_turn("turn-1", &args.content).step("turn")?;
    println!("<- status busy: the turn is accepted");
    let (progress, end) = host.finish_turn("turn-1", wait).step("final")?;
    expect_type(&end, "final").step("final")?;
    let content = text(&end["content"]);
    println!("<- final:");
    for line in content.lines() {
        println!("     {line}");
    }
    if let Some(expected) = &args.expect
        && !content.contains(expected.as_str())
    {
        return Err(Failed(
            "final",
            anyhow::anyhow!("the final does not contain {expected:?} (progress was {progress:?})"),
        ));
    }

    host.send("cancel", json!({"requestId": "cancel:1"}))
        .step("close")?;
    let closed = reply(host, "cancel:1", wait).step("close")?;
    if closed["type"] != "status" || closed["status"] != "closed" {
        return Err(Failed(
            "close",
            anyhow::anyhow!("cancel was answered by {closed}, not status closed"),
        ));
    }
    // The host's close: SIGTERM with stdin left open, then the provider must exit.
    host.signal("TERM").step("close")?;
    match host.wait_exit(Duration::from_secs(10)) {
        Some(status) => println!("<- status closed; SIGTERM: the provider exited ({status})"),
        None => {
            return Err(Failed(
                "close",
                anyhow::anyhow!("the provider still runs 10 s after SIGTERM"),
            ));
        }
    }
    Ok(())
}

/// The answer to `request_id` (other events are skipped, as the host files them elsewhere).
fn reply(host: &mut ScriptHost, request_id: &str, wait: Duration) -> Result<Value> {
    host.wait_for(wait, |v| v["requestId"] == request_id)
}

/// Fails with the event itself when it is not of type `kind` (a failure's code and message).
fn expect_type(event: &Value, kind: &str) -> Result<()> {
    if event["type"] == kind {
        return Ok(());
    }
    if event["type"] == "failure" {
        bail!(
            "failure {}: {}",
            text(&event["code"]),
            text(&event["message"])
        );
    }
    bail!("expected {kind}, got {event}")
}

fn text(v: &Value) -> String {
    v.as_str().unwrap_or_default().to_owned()
}
