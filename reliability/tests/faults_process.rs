//! Process faults: the provider SIGKILLed mid-turn and a new one resumed from the saved state;
//! an engine client process (standing in for a CLI process) SIGKILLed mid-exec and the result
//! recovered later; the remote tmux server killed (a lost session, never a hang; the provider
//! rebuilds at the next generation).

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use remote_runner_engine::ErrorCode;
use remote_runner_engine::engine::{CommandStatus, EngineOptions, ExecRequest, SessionStatus};
use remote_runner_reliability::bed::{
    Bed, check_exact, connect_options, kill_tmux_server, last_command, machine, open_engine,
    recover, wait_started,
};
use remote_runner_reliability::host::{Host, ssh_env};
use remote_runner_reliability::report::Report;
use remote_runner_reliability::{percentile, repeats};
use remote_runner_testkit::{Sshd, TEST_USER};
use serde_json::json;

const PROVIDER: &str = env!("CARGO_BIN_EXE_rr-reliability-provider");
const ENGINE_CLIENT: &str = env!("CARGO_BIN_EXE_rr-reliability-engine");
const RECOVERY: Duration = Duration::from_secs(120);

fn expected_seq(prefix: &str, n: usize) -> String {
    let mut s = format!("{prefix}\n");
    for i in 1..=n {
        s.push_str(&format!("{i}\n"));
    }
    s
}

/// An engine on the provider's state dir, reaching the same machine (to read what it left).
fn engine_on_provider_state(
    sshd: &Sshd,
    state: &Path,
    remote: &Path,
) -> Result<(remote_runner_engine::engine::Engine, String)> {
    let probe = open_engine(
        state,
        &machine("127.0.0.1", sshd.port, sshd, &sshd.known_hosts, remote),
        &connect_options(),
        &EngineOptions::default(),
    )?;
    let session = probe
        .session_list()
        .map_err(|e| anyhow!("session_list: {e}"))?
        .into_iter()
        .find(|s| s.status == SessionStatus::Active)
        .ok_or_else(|| anyhow!("the provider left no active session in its store"))?;
    let mut m = machine("127.0.0.1", sshd.port, sshd, &sshd.known_hosts, remote);
    m.machine_id = session.machine_id.clone();
    let engine = open_engine(state, &m, &connect_options(), &EngineOptions::default())?;
    Ok((engine, session.session_id))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn provider_sigkilled_mid_turn_then_resumed() {
    let mut report = Report::new(
        "provider_killed_mid_turn",
        "fault",
        "SIGKILL to the provider process (spawned as the host does) after the busy ACK and the \
         first progress of a turn; a new provider gets `resume` with the saved state",
        &[
            "the new provider answers ready at the same generation and remoteSessionId",
            "the killed turn's command result is recovered from the state dir: exit code exact, \
             stdout sha256 exact",
            "the next turn runs in the same shell (state kept) with exact output",
        ],
    );
    let sshd = Sshd::start().expect("sshd");
    let local = tempfile::tempdir().unwrap();
    let remote = sshd.remote_dir("provider-kill").unwrap();
    let state_dir = local.path().join("state");
    let env = ssh_env(&sshd, &state_dir, &remote);
    let first = async {
        let mut host = Host::spawn(PROVIDER, local.path(), &env)?;
        host.hello()?;
        let ready = host.start("/x")?;
        if ready["type"] != "ready" {
            bail!("start: {ready}");
        }
        let (_, fin) = {
            host.begin_turn("t0", "export KEEP=kept-value")?;
            host.finish_turn("t0", RECOVERY)?
        };
        if fin["type"] != "final" {
            bail!("first turn: {fin}");
        }
        Ok(ready["state"].clone())
    }
    .await;
    let Some(mut state) = report.record(0, first) else {
        report.finish();
        return;
    };
    let generation = state["generation"].clone();
    for run in 1..=repeats(3) {
        let code = [5, 0, 1][run % 3];
        let outcome = async {
            let mut host = Host::spawn(PROVIDER, local.path(), &env)?;
            host.hello()?;
            let r = host.resume(&format!("resume:{run}"), &state)?;
            if r["type"] != "ready" {
                bail!("resume: {r}");
            }
            if r["state"]["generation"] != generation
                || r["state"]["remoteSessionId"] != state["remoteSessionId"]
            {
                bail!("resume changed the lineage: {} vs {}", r["state"], state);
            }
            state = r["state"].clone();
            // The shell state of earlier turns is still there, then a turn to be killed.
            host.begin_turn(&format!("k{run}"), "echo \"$KEEP\"")?;
            let (text, _) = host.finish_turn(&format!("k{run}"), RECOVERY)?;
            if text != "kept-value\n" {
                bail!("shell state lost after resume: {text:?}");
            }
            let tid = format!("t{run}");
            let content = format!("echo go-{run}; sleep 1.5; seq 1 400; (exit {code})");
            host.begin_turn(&tid, &content)?;
            host.wait_for(Duration::from_secs(60), |v| v["type"] == "progress")?;
            host.kill();
            drop(host);
            let (engine, sid) = engine_on_provider_state(&sshd, &state_dir, &remote)?;
            let rec = last_command(&engine, &sid)?;
            if rec.command != content {
                bail!(
                    "the newest command is {:?}, not the killed turn's",
                    rec.command
                );
            }
            let r = recover(&engine, &sid, &rec.command_id, RECOVERY).await?;
            check_exact(
                &engine,
                &r.record,
                code,
                expected_seq(&format!("go-{run}"), 400).as_bytes(),
            )
            .await?;
            Ok(())
        }
        .await;
        report.record(run, outcome);
    }
    report.figure("generation_kept", generation);
    report.finish();
}

/// Run the engine client process with a request; returns the child.
fn spawn_engine_client(req: serde_json::Value) -> Result<std::process::Child> {
    std::process::Command::new(ENGINE_CLIENT)
        .env("RR_ENGINE_REQUEST", req.to_string())
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .context("spawn the engine client")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn engine_client_process_sigkilled_mid_exec() {
    let mut report = Report::new(
        "client_killed_mid_exec",
        "fault",
        "SIGKILL to a separate process running `exec` through the engine (the CLI's code path; \
         rr-reliability-engine) once its command produced output; another engine on the same \
         state dir recovers the result",
        &[
            "the command record was stored before the command ran, so it is found by listing",
            "command_wait from another engine returns the final record: exit code exact, stdout \
             sha256 exact",
            "the session accepts the next command (the killed caller left no stuck lock)",
        ],
    );
    let bed = Bed::start("client-kill").await.expect("bed");
    let s = bed.session().await.expect("session");
    for run in 0..repeats(3) {
        let code = [0, 13, 2][run % 3];
        let outcome = async {
            let content = format!("echo c-{run}; sleep 1.5; seq 1 600; (exit {code})");
            let mut child = spawn_engine_client(json!({
                "state_dir": bed.state.path(),
                "machine": bed.machine,
                "op": "exec",
                "session_id": s.session_id,
                "command": content,
            }))?;
            let rec = wait_started(
                &bed.engine,
                &s.session_id,
                &content,
                1,
                Duration::from_secs(60),
            )
            .await?;
            child.kill()?;
            child.wait()?;
            let other = bed.other_engine()?;
            let r = recover(&other, &s.session_id, &rec.command_id, RECOVERY).await?;
            check_exact(
                &other,
                &r.record,
                code,
                expected_seq(&format!("c-{run}"), 600).as_bytes(),
            )
            .await?;
            let next = bed
                .engine
                .exec(&s.session_id, "echo next", ExecRequest::wait())
                .await
                .map_err(|e| anyhow!("the next exec failed: {e}"))?;
            check_exact(&bed.engine, &next, 0, b"next\n").await
        }
        .await;
        report.record(run, outcome);
    }
    report.figure(
        "note",
        "`remote-runner session exec` was being wired by another change; this fault uses the \
         engine in a child process (the same engine call the CLI makes)",
    );
    report.finish();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn remote_tmux_server_killed() {
    let mut report = Report::new(
        "tmux_server_killed",
        "fault",
        "`tmux -L <socket> kill-server` as the remote user while a foreground command runs \
         (engine), and the provider's tmux session killed mid-turn (provider)",
        &[
            "engine: the exec ends within 60 s with session_lost (or a lost record), never hangs",
            "engine: the session is marked lost; a new session works",
            "provider: the turn ends with a failure within 60 s; the next turn rebuilds at \
             generation + 1 (lineage_changed) with exact output",
        ],
    );
    let bed = Bed::start("tmux-kill").await.expect("bed");
    let mut report_ms = Vec::new();
    for run in 0..repeats(3) {
        let outcome = async {
            let s = bed.session().await?;
            let content = format!("echo t-{run}; sleep 60");
            let engine = bed.engine.clone();
            let (sid, text) = (s.session_id.clone(), content.clone());
            let task =
                tokio::spawn(async move { engine.exec(&sid, &text, ExecRequest::wait()).await });
            wait_started(
                &bed.engine,
                &s.session_id,
                &content,
                1,
                Duration::from_secs(30),
            )
            .await?;
            if !kill_tmux_server(&s.tmux_socket) {
                bail!("tmux kill-server failed");
            }
            let killed = Instant::now();
            let ended = tokio::time::timeout(Duration::from_secs(60), task)
                .await
                .map_err(|_| {
                    anyhow!("the exec hung for 60 s after the tmux server was killed")
                })??;
            let took = killed.elapsed();
            match ended {
                Err(e) if e.code == ErrorCode::SessionLost => {}
                Ok(rec) if rec.status == CommandStatus::Lost => {}
                Ok(rec) => bail!(
                    "exec returned status {} after kill-server",
                    rec.status.as_str()
                ),
                Err(e) => bail!(
                    "exec failed with {} ({}), expected session_lost",
                    e,
                    e.code.as_str()
                ),
            }
            let shown = bed
                .engine
                .session_show(&s.session_id)
                .map_err(|e| anyhow!("session_show: {e}"))?;
            if shown.status != SessionStatus::Lost {
                bail!("session status {} after kill-server", shown.status.as_str());
            }
            Ok(took.as_millis() as f64)
        }
        .await;
        if let Some(ms) = report.record(run, outcome) {
            report_ms.push(ms);
        }
    }
    report.figure("engine_lost_reported_ms_p50", percentile(&report_ms, 50.0));
    report.figure("engine_lost_reported_ms_max", percentile(&report_ms, 100.0));

    // The provider: its tmux session is killed mid-turn (its own session only: the provider uses
    // the shared default socket, which other suites may be using at the same time).
    let sshd = Arc::clone(&bed.sshd);
    let local = tempfile::tempdir().unwrap();
    let remote = sshd.remote_dir("tmux-kill-provider").unwrap();
    let state_dir = local.path().join("state");
    let env = ssh_env(&sshd, &state_dir, &remote);
    let mut generations = Vec::new();
    let provider_runs = repeats(3);
    let outcome = async {
        let mut host = Host::spawn(PROVIDER, local.path(), &env)?;
        host.hello()?;
        let ready = host.start("/x")?;
        let mut generation = ready["state"]["generation"].as_u64().unwrap_or(0);
        generations.push(generation);
        for run in 0..provider_runs {
            let tid = format!("p{run}");
            host.begin_turn(&tid, &format!("echo p-{run}; sleep 60"))?;
            host.wait_for(Duration::from_secs(60), |v| v["type"] == "progress")?;
            let (engine, sid) = engine_on_provider_state(&sshd, &state_dir, &remote)?;
            let session = engine.session_show(&sid).map_err(|e| anyhow!("{e}"))?;
            let status = std::process::Command::new("runuser")
                .args(["-u", TEST_USER, "--", "tmux", "-L", &session.tmux_socket])
                .args(["kill-session", "-t", &format!("={}", session.tmux_session)])
                .status()?;
            if !status.success() {
                bail!("tmux kill-session failed");
            }
            let (_, end) = host.finish_turn(&tid, Duration::from_secs(60))?;
            if end["type"] != "failure" {
                bail!("the turn on a killed session ended with {end}");
            }
            let next = format!("n{run}");
            host.begin_turn(&next, &format!("echo rebuilt-{run}"))?;
            let (text, fin) = host.finish_turn(&next, RECOVERY)?;
            if fin["type"] != "final" || text != format!("rebuilt-{run}\n") {
                bail!("the turn after the loss: {text:?} {fin}");
            }
            let lineage = host
                .seen
                .iter()
                .rev()
                .find(|v| v["type"] == "lineage_changed")
                .ok_or_else(|| anyhow!("no lineage_changed after the lost session"))?;
            let g = lineage["state"]["generation"].as_u64().unwrap_or(0);
            if g != generation + 1 {
                bail!("rebuilt at generation {g}, expected {}", generation + 1);
            }
            generation = g;
            generations.push(g);
        }
        host.send("cancel", json!({"requestId": "cancel:1"}))?;
        host.wait_for(Duration::from_secs(60), |v| v["requestId"] == "cancel:1")?;
        Ok(())
    }
    .await;
    report.record(repeats(3), outcome);
    report.figure("provider_sessions_killed_and_rebuilt", provider_runs);
    report.figure("provider_generations", generations);
    report.finish();
}
