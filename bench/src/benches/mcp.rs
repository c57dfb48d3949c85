//! `mcp-exec-warm`: a `session_exec` of `true` on a warm session through `remote-runner mcp`, as
//! the official MCP Python SDK client sees it (cli/tests/mcp/peer_bench.py, a client nobody here
//! wrote), on the built-in `local` machine and over SSH to the bench sshd, beside a plain
//! `ssh -S ctl host true` through an OpenSSH ControlMaster and, when one is configured, a peer
//! MCP server driven by the same client.
//!
//! Each round starts the server afresh (the client creates a session and makes warm-up calls
//! first), then times a block of calls; the sides take turns round by round, so drift on a shared
//! machine hits them alike. A peer is given as the script's SPEC JSON in
//! `REMOTE_RUNNER_BENCH_MCP_PEER`, with `{port}`, `{user}`, `{key}` and `{known_hosts}` replaced
//! by the bed's (docs/benchmarks.md names the peers measured by hand; none is installed by the
//! bench).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use remote_runner_engine::store::{self, Store};
use serde_json::{Value, json};

use crate::Ctx;
use crate::bed::{Bed, MACHINE_ID};
use crate::openssh::{self, OpenSsh};
use crate::provider_host::sibling_binary;
use crate::report::{BenchResult, Measurement, Ratio, Side, Target};

/// The bound on a warm `session_exec` of `true` through the MCP face.
const TARGET_MS: f64 = 6.0;

/// The MCP client script (official Python SDK).
fn client_script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../cli/tests/mcp/peer_bench.py")
}

/// python3 with the `mcp` package (version 2), or an error saying how to get it.
fn check_python() -> Result<()> {
    let out = Command::new("python3")
        .args([
            "-c",
            "import importlib.metadata as m; \
             assert int(m.version('mcp').split('.')[0]) >= 2, 'mcp ' + m.version('mcp')",
        ])
        .output()
        .context("run python3 (needed for the MCP client)")?;
    if !out.status.success() {
        bail!(
            "the MCP benchmark drives the server with the official MCP Python SDK, version 2: \
             `python3 -m pip install 'mcp>=2.3,<3'` (scripts/install-deps.sh does); the check \
             said: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

/// One client run: `calls` timed calls after `warmup` ones; every call's time. A session the
/// run made and kept (`keep_session`) is destroyed at the end of the benchmark run.
fn client_run(ctx: &Ctx, spec: &Value, calls: usize) -> Result<Vec<Duration>> {
    let out = Command::new("python3")
        .arg(client_script())
        .arg(spec.to_string())
        .arg(calls.to_string())
        .env_remove("SSH_AUTH_SOCK")
        .output()
        .context("run the MCP client")?;
    if !out.status.success() {
        bail!(
            "the MCP client failed on {} ({}): {}",
            spec["name"],
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    let line = String::from_utf8_lossy(&out.stdout);
    let reply: Value = serde_json::from_str(line.trim().lines().last().unwrap_or(""))
        .with_context(|| format!("the MCP client's output: {line}"))?;
    if let (Some(id), Some(cmd)) = (reply["session_id"].as_str(), spec["cmd"].as_array()) {
        destroy_later(ctx, cmd, &spec["env"], id);
    }
    let times = reply["times_ms"]
        .as_array()
        .context("the MCP client gave no times_ms")?;
    Ok(times
        .iter()
        .filter_map(Value::as_f64)
        .map(|ms| Duration::from_secs_f64(ms / 1000.0))
        .collect())
}

/// Destroy session `id` at the end of the run, with the CLI of the server `cmd` (`BIN
/// --state-dir DIR mcp`).
fn destroy_later(ctx: &Ctx, cmd: &[Value], env: &Value, id: &str) {
    let argv: Vec<String> = cmd
        .iter()
        .filter_map(Value::as_str)
        .take_while(|a| *a != "mcp")
        .map(str::to_string)
        .collect();
    let env: Vec<(String, String)> = env
        .as_object()
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
                .collect()
        })
        .unwrap_or_default();
    let id = id.to_string();
    ctx.bed.later(Box::new(move |_| {
        let Some((bin, args)) = argv.split_first() else {
            return;
        };
        let _ = Command::new(bin)
            .args(args)
            .args(["session", "destroy", "--session", &id, "--json"])
            .env_clear()
            .envs(env)
            .output();
    }));
}

/// The client's SPEC for `remote-runner mcp` on `machine`, one session per run (kept until the
/// end of the benchmark run).
fn ours_spec(bin: &Path, state_dir: &Path, bed: &Bed, machine: &str, warmup: usize) -> Value {
    let mut env = json!({
        "HOME": std::env::var("HOME").unwrap_or_default(),
        "PATH": std::env::var("PATH").unwrap_or_default(),
        "REMOTE_RUNNER_KEEPER_IDLE": "120",
    });
    env["REMOTE_RUNNER_SSH_CONFIG"] = json!(bed.sshd.ssh_config.to_string_lossy());
    json!({
        "name": format!("remote-runner mcp ({machine})"),
        "cmd": [bin.to_string_lossy(), "--state-dir", state_dir.to_string_lossy(), "mcp"],
        "env": env,
        "tool": "session_exec",
        "args": {"command": "true"},
        "session": machine,
        "keep_session": true,
        "warmup": warmup,
    })
}

/// The peer's SPEC from `REMOTE_RUNNER_BENCH_MCP_PEER`, with the bed's details filled in.
fn peer_spec(bed: &Bed) -> Result<Option<Value>> {
    let Ok(raw) = std::env::var("REMOTE_RUNNER_BENCH_MCP_PEER") else {
        return Ok(None);
    };
    let text = raw
        .replace("{port}", &bed.sshd.port.to_string())
        .replace("{user}", bed.sshd.user())
        .replace("{key}", &bed.key().to_string_lossy())
        .replace("{known_hosts}", &bed.sshd.known_hosts.to_string_lossy());
    let spec: Value = serde_json::from_str(&text)
        .context("REMOTE_RUNNER_BENCH_MCP_PEER must be a peer_bench.py SPEC in JSON")?;
    Ok(Some(spec))
}

/// The time to create one empty file in a fresh directory beside the login user's session
/// directories, 200 times: on a journal-less ext4 (this machine's) a create scans past every
/// inode of its block group deleted in the last minutes (`recently_deleted` in the kernel's
/// inode allocator), so each command's files (a directory and eight files over the engine, the
/// shell and the control script) cost more after many were deleted.
/// The directory stays until the end of the run (its removal is a burst of deletes).
fn create_times(ctx: &Ctx, user: &str) -> Result<Vec<Duration>> {
    let out = Command::new("getent").args(["passwd", user]).output()?;
    let line = String::from_utf8_lossy(&out.stdout);
    let home = line
        .trim_end()
        .split(':')
        .nth(5)
        .context("the login user's home")?;
    // (Not made here when missing: it must be the login user's.)
    let sessions = Path::new(home).join(".local/state/remote-runner/sessions");
    let parent = if sessions.is_dir() {
        sessions
    } else {
        PathBuf::from(home)
    };
    let probe = tempfile::Builder::new()
        .prefix("fs-probe-")
        .tempdir_in(&parent)?;
    let mut times = Vec::with_capacity(200);
    for i in 0..200 {
        let t = std::time::Instant::now();
        std::fs::File::create(probe.path().join(format!("f{i}")))?;
        times.push(t.elapsed());
    }
    ctx.bed.later(Box::new(move |_| drop(probe)));
    Ok(times)
}

pub fn run(ctx: &Ctx) -> Result<BenchResult> {
    check_python()?;
    let rounds = ctx.cfg.pick(4, 1);
    let calls = ctx.cfg.pick(50, 10);
    let warmup = ctx.cfg.pick(20, 5);
    let bed = ctx.bed;
    let bin = sibling_binary("REMOTE_RUNNER_BENCH_CLI", "remote-runner")?;
    let remote = bed.remote_dir("mcp-exec-warm")?;
    let state_dir = bed.local_dir("mcp-exec-warm-state")?;
    let store = Store::open(&state_dir)?;
    store::machines::insert(&store, &bed.machine(&remote))?;
    drop(store);
    let ssh_spec = ours_spec(&bin, &state_dir, bed, MACHINE_ID, warmup);
    let local_spec = ours_spec(&bin, &state_dir, bed, "local", warmup);
    let mut overhead_spec = local_spec.clone();
    overhead_spec["name"] = json!("remote-runner mcp (machine_list)");
    overhead_spec["tool"] = json!("machine_list");
    overhead_spec["args"] = json!({});
    overhead_spec["session"] = Value::Null;
    let peer = peer_spec(bed)?;
    let creates_before = create_times(ctx, bed.sshd.user())?;

    let master = OpenSsh::new(bed).control_master(&bed.local_dir("mcp-exec-warm-ssh")?)?;
    for _ in 0..3 {
        openssh::time_run(&mut master.ssh("true"))?;
    }
    let (mut over_ssh, mut local, mut plain, mut overhead, mut theirs) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for _ in 0..rounds {
        over_ssh.extend(client_run(ctx, &ssh_spec, calls)?);
        local.extend(client_run(ctx, &local_spec, calls)?);
        for _ in 0..calls {
            plain.push(openssh::time_run(&mut master.ssh("true"))?);
        }
        overhead.extend(client_run(ctx, &overhead_spec, calls)?);
        if let Some(spec) = &peer {
            theirs.extend(client_run(ctx, spec, calls)?);
        }
    }

    let mut result = BenchResult::new(
        "mcp-exec-warm",
        "one MCP tool call `session_exec {session_id, command: \"true\"}` on a warm session through \
         `remote-runner mcp` (release build), timed by the official MCP Python SDK client \
         (cli/tests/mcp/peer_bench.py), over SSH to the bench sshd and on `local`, beside `ssh -S \
         ctl host true` through an OpenSSH ControlMaster",
    );
    let ours = result
        .push(Measurement::new(
            "`remote-runner mcp`: `session_exec` `true`, sshd bed",
            Side::Ours,
            &over_ssh,
        ))
        .clone();
    let ours_local = result
        .push(Measurement::new(
            "`remote-runner mcp`: `session_exec` `true`, `local`",
            Side::Ours,
            &local,
        ))
        .clone();
    let plain = result
        .push(Measurement::new(
            "ControlMaster: `ssh host true`",
            Side::OpenSsh,
            &plain,
        ))
        .clone();
    result.push(Measurement::new(
        "diagnostic: `remote-runner mcp`: `machine_list` (the MCP face alone, no machine reached)",
        Side::Ours,
        &overhead,
    ));
    let creates_after = create_times(ctx, bed.sshd.user())?;
    result.push(Measurement::new(
        "diagnostic: creating one empty file beside the sessions' directories, before the rounds",
        Side::Ours,
        &creates_before,
    ));
    result.push(Measurement::new(
        "diagnostic: the same, after the rounds",
        Side::Ours,
        &creates_after,
    ));
    let peer_m = peer.as_ref().map(|spec| {
        result
            .push(Measurement::new(
                &format!(
                    "peer MCP server `{}`: `{}` `true`",
                    spec["name"].as_str().unwrap_or("peer"),
                    spec["tool"].as_str().unwrap_or("?")
                ),
                Side::Peer,
                &theirs,
            ))
            .clone()
    });
    for (label, m) in [
        ("sshd bed: median / 6 ms (the issue's bound)", &ours),
        ("`local`: median / 6 ms (the issue's bound)", &ours_local),
    ] {
        result.ratios.push(Ratio {
            label: label.to_string(),
            value: m.summary.median.as_secs_f64() * 1000.0 / TARGET_MS,
            meaning: "our median time / 6 ms (lower is better)",
            target: Target::AtMost(1.0),
        });
    }
    result.ratios.push(Ratio::time(
        "MCP `session_exec` over SSH / ControlMaster `ssh host true`",
        &ours,
        &plain,
        Target::None,
    ));
    if let Some(p) = &peer_m {
        result.ratios.push(Ratio {
            label: "MCP `session_exec` over SSH / the peer MCP server's call".to_string(),
            value: ours.summary.median.as_secs_f64() / p.summary.median.as_secs_f64(),
            meaning: "our median time / the peer's median time (lower is better)",
            target: Target::AtMost(1.0),
        });
    }
    result.notes.push(format!(
        "{rounds} rounds, each: the server started afresh by the client, a session created, \
         {warmup} warm-up calls, then {calls} timed calls over SSH; the same on `local`; {calls} \
         `ssh host true` through the ControlMaster; {calls} `machine_list` calls"
    ));
    result.notes.push(
        "the file-create rows tell the filesystem's state: a warm command creates nine files \
         and directories (engine, control script, session shell), and on a journal-less ext4 \
         (this machine's) each create scans past the inodes of its group deleted in the last \
         minutes: measured by hand on this bed, `session_exec` over SSH took 4.9, 5.6, 6.2, \
         6.9 ms in four rounds in a row on a quiet filesystem when each round destroyed its \
         session (its command directories) before the next, and 10-15 ms after a test run had \
         deleted tens of thousands of files (creates at 0.5-1 ms each); so the rounds' sessions, \
         like every benchmark's clean-up, are destroyed after the last benchmark of the run"
            .to_string(),
    );
    result.notes.push(match &peer {
        Some(_) => "the peer is the MCP server given in REMOTE_RUNNER_BENCH_MCP_PEER, driven by \
                    the same client against the same sshd"
            .to_string(),
        None => "no peer MCP server configured (REMOTE_RUNNER_BENCH_MCP_PEER), so the baseline \
                 is OpenSSH's own warm round trip; the peers measured by hand are in the \
                 section's notes"
            .to_string(),
    });
    result.notes.push(
        "the peers an agent installs for remote machines, measured by hand with the same client \
         and sshd (2026-12-02, cli/tests/mcp/peer_bench.py, 2 x 200 calls, medians): \
         `mcp-ssh-gateway` 7.0.0 (PyPI) `run` 1.63 / 1.67 ms (it keeps a bare shell on an SSH \
         channel and reads up to a marker); `ssh-mcp` 2.11.0 (npm) `run-command` 90.7 / 88.3 ms; \
         `mcp-ssh-session` (PyPI) `execute_command` 431 ms; `mcp-ssh-tmux` (PyPI) did not run \
         on this bed (its SSH session closed at once)"
            .to_string(),
    );
    Ok(result)
}
