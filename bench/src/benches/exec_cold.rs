//! `exec-cold-cli`: a fresh process per exec of `true` in an existing session (connect, auth,
//! run, record, exit), beside a cold `ssh host '<tmux round trip>'` and a cold `ssh host true`.
//!
//! Ours is `remote-runner session exec --session S --cmd true` when that CLI command works; while
//! it is not wired to the engine yet (it answers `not_implemented`), the same engine work is done
//! by `remote-runner-bench-cold-exec`, a small binary of this crate, and the report says so.
//!
//! The CLI keeps a machine's connection in a background keeper between calls (issue 19). What a
//! user times repeatedly is a call through a running keeper; each round also times a first
//! call (no keeper yet: it connects directly and starts one) and, as a diagnostic, a call with
//! keepers off.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use remote_runner_engine::connect::MachineConnector;
use remote_runner_engine::engine::Engine;
use remote_runner_engine::keeper::KeeperPaths;
use remote_runner_engine::store::{self, Store};

use crate::Ctx;
use crate::bed::Bed;
use crate::benches::exec_warm::{tmux_round_trip, tmux_setup, tmux_teardown};
use crate::openssh::{self, OpenSsh};
use crate::provider_host::sibling_binary;
use crate::report::{BenchResult, Measurement, Ratio, Side, Target};

/// Which process does our side's cold exec.
enum ColdExec {
    Cli(PathBuf),
    EngineBin(PathBuf),
}

impl ColdExec {
    fn command(&self, state_dir: &Path, session: &str) -> Command {
        let mut cmd = self.bare_command(state_dir, session);
        // A keeper left behind by a crashed run ends on its own soon.
        cmd.env("REMOTE_RUNNER_KEEPER_IDLE", "120");
        cmd
    }

    /// With keepers off: every call connects (the CLI before issue 19).
    fn direct_command(&self, state_dir: &Path, session: &str) -> Command {
        let mut cmd = self.bare_command(state_dir, session);
        cmd.env("REMOTE_RUNNER_KEEPER", "off");
        cmd
    }

    fn bare_command(&self, state_dir: &Path, session: &str) -> Command {
        let mut cmd = match self {
            ColdExec::Cli(bin) => {
                let mut c = Command::new(bin);
                c.arg("--state-dir").arg(state_dir).args([
                    "session",
                    "exec",
                    "--session",
                    session,
                    "--cmd",
                    "true",
                    "--json",
                ]);
                c
            }
            ColdExec::EngineBin(bin) => {
                let mut c = Command::new(bin);
                c.arg(state_dir).arg(session).arg("true");
                c
            }
        };
        cmd.env_remove("SSH_AUTH_SOCK")
            .env_remove("REMOTE_RUNNER_STATE_DIR");
        cmd
    }

    /// `machine disconnect --all` (CLI only): the next call is a first call again.
    fn disconnect(&self, state_dir: &Path) -> Result<()> {
        if let ColdExec::Cli(bin) = self {
            let mut c = Command::new(bin);
            c.arg("--state-dir")
                .arg(state_dir)
                .args(["machine", "disconnect", "--all", "--json"]);
            openssh::run(&mut c)?;
        }
        Ok(())
    }

    fn describe(&self) -> &'static str {
        match self {
            ColdExec::Cli(_) => {
                "`remote-runner session exec --cmd true` (fresh process, through a running keeper)"
            }
            ColdExec::EngineBin(_) => {
                "cold engine exec `true` (fresh process, remote-runner-bench-cold-exec)"
            }
        }
    }
}

/// The CLI when its `session exec` works on this state dir, else the engine-level stand-in.
fn pick_cold_exec(state_dir: &Path, session: &str) -> Result<(ColdExec, Option<String>)> {
    if let Ok(cli) = sibling_binary("REMOTE_RUNNER_BENCH_CLI", "remote-runner") {
        let probe = ColdExec::Cli(cli);
        let out = probe.command(state_dir, session).output()?;
        if out.status.success() {
            return Ok((probe, None));
        }
        let why = format!(
            "`remote-runner session exec` exited with {} ({}), so the cold exec is measured with \
             remote-runner-bench-cold-exec, which makes the same engine calls the CLI will make",
            out.status,
            String::from_utf8_lossy(&out.stdout)
                .trim()
                .chars()
                .take(160)
                .collect::<String>()
        );
        let bin = sibling_binary(
            "REMOTE_RUNNER_BENCH_COLD_EXEC",
            "remote-runner-bench-cold-exec",
        )?;
        return Ok((ColdExec::EngineBin(bin), Some(why)));
    }
    let bin = sibling_binary(
        "REMOTE_RUNNER_BENCH_COLD_EXEC",
        "remote-runner-bench-cold-exec",
    )?;
    Ok((
        ColdExec::EngineBin(bin),
        Some("the remote-runner CLI binary was not built; measured with remote-runner-bench-cold-exec".into()),
    ))
}

/// Wait (bounded) until the keeper started by a first call answers on its socket.
pub(crate) fn wait_for_keeper(socket: &Path) -> Result<()> {
    let until = Instant::now() + Duration::from_secs(20);
    while Instant::now() < until {
        if std::os::unix::net::UnixStream::connect(socket).is_ok() {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    anyhow::bail!("no keeper came up at {} within 20 s", socket.display())
}

/// A state dir (`name` under the scratch space) holding the bed's machine record and one
/// session on it, created in-process.
pub(crate) fn prepare_state(
    ctx: &Ctx,
    bed: &Bed,
    remote: &Path,
    name: &str,
) -> Result<(PathBuf, String)> {
    let state_dir = bed.local_dir(name)?;
    let machine = bed.machine(remote);
    let store = Store::open(&state_dir)?;
    store::machines::insert(&store, &machine)?;
    drop(store);
    let connector = MachineConnector::new(state_dir.clone(), Bed::connect_options());
    let engine = Engine::new(&state_dir, Arc::new(connector))?;
    let session = ctx
        .rt
        .block_on(engine.create_session(&machine, None))
        .context("create the session the cold execs run in")?;
    Ok((state_dir, session.session_id))
}

pub fn run(ctx: &Ctx) -> Result<BenchResult> {
    let runs = ctx.cfg.pick(20, 5);
    let warmup = 2;
    let bed = ctx.bed;
    let remote = bed.remote_dir("exec-cold")?;
    let (state_dir, session) = prepare_state(ctx, bed, &remote, "exec-cold-state")?;
    let (ours_cmd, fallback_note) = pick_cold_exec(&state_dir, &session)?;
    let ssh = OpenSsh::new(bed);
    openssh::run(&mut ssh.ssh(&tmux_setup()))?;
    let round_trip = tmux_round_trip();

    // When the CLI is measured, the engine stand-in runs too, as a diagnostic: the difference is
    // what the CLI adds around the engine call.
    let stand_in = match ours_cmd {
        ColdExec::Cli(_) => Some(ColdExec::EngineBin(sibling_binary(
            "REMOTE_RUNNER_BENCH_COLD_EXEC",
            "remote-runner-bench-cold-exec",
        )?)),
        ColdExec::EngineBin(_) => None,
    };
    let mut stand_in_runs = Vec::new();
    let keeper = matches!(ours_cmd, ColdExec::Cli(_));
    let socket = KeeperPaths::new(&state_dir, &bed.machine(&remote).machine_id).socket;
    let (mut first, mut direct) = (Vec::new(), Vec::new());

    for _ in 0..warmup {
        openssh::time_run(&mut ours_cmd.command(&state_dir, &session))?;
        if let Some(s) = &stand_in {
            openssh::time_run(&mut s.command(&state_dir, &session))?;
        }
        openssh::time_run(&mut ssh.ssh(&round_trip))?;
        openssh::time_run(&mut ssh.ssh("true"))?;
    }
    let (mut ours, mut tmux, mut plain) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..runs {
        if keeper {
            ours_cmd.disconnect(&state_dir)?;
            first.push(openssh::time_run(
                &mut ours_cmd.command(&state_dir, &session),
            )?);
            wait_for_keeper(&socket)?;
        }
        ours.push(openssh::time_run(
            &mut ours_cmd.command(&state_dir, &session),
        )?);
        if keeper {
            direct.push(openssh::time_run(
                &mut ours_cmd.direct_command(&state_dir, &session),
            )?);
        }
        tmux.push(openssh::time_run(&mut ssh.ssh(&round_trip))?);
        plain.push(openssh::time_run(&mut ssh.ssh("true"))?);
        if let Some(s) = &stand_in {
            stand_in_runs.push(openssh::time_run(&mut s.command(&state_dir, &session))?);
        }
    }
    let _ = openssh::run(&mut ssh.ssh(&tmux_teardown()));
    ours_cmd.disconnect(&state_dir)?;

    let mut result = BenchResult::new(
        "exec-cold-cli",
        "a fresh process per exec of `true` in an existing session (connect, authenticate, run in \
         the session shell, record, exit), beside a cold `ssh host '<tmux send-keys + wait-for>'` \
         and a cold `ssh host true` (no ControlMaster)",
    );
    let ours = result
        .push(Measurement::new(ours_cmd.describe(), Side::Ours, &ours))
        .clone();
    let tmux = result
        .push(Measurement::new(
            "cold `ssh host 'tmux send-keys ... \\; wait-for done'`",
            Side::OpenSsh,
            &tmux,
        ))
        .clone();
    let plain = result
        .push(Measurement::new(
            "cold `ssh host true`",
            Side::OpenSsh,
            &plain,
        ))
        .clone();
    let first = keeper.then(|| {
        result
            .push(Measurement::new(
                "first call: `remote-runner session exec --cmd true` with no keeper running \
                 (connects directly, starts the keeper)",
                Side::Ours,
                &first,
            ))
            .clone()
    });
    if keeper {
        result.push(Measurement::new(
            "diagnostic: `session exec --cmd true` with REMOTE_RUNNER_KEEPER=off (connects every time)",
            Side::Ours,
            &direct,
        ));
    }
    if let Some(s) = &stand_in {
        result.push(Measurement::new(
            &format!("diagnostic: {}", s.describe()),
            Side::Ours,
            &stand_in_runs,
        ));
    }
    result.ratios.push(Ratio::time(
        if keeper {
            "cold CLI exec through a running keeper / cold ssh tmux round trip"
        } else {
            "cold exec / cold ssh tmux round trip"
        },
        &ours,
        &tmux,
        Target::AtMost(if keeper { 0.3 } else { 1.0 }),
    ));
    if let Some(first) = &first {
        result.ratios.push(Ratio::time(
            "first call (starts the keeper) / cold ssh tmux round trip",
            first,
            &tmux,
            Target::AtMost(1.0),
        ));
    }
    result.ratios.push(Ratio::time(
        "cold exec / cold `ssh host true`",
        &ours,
        &plain,
        Target::AtMost(1.0),
    ));
    if let Some(note) = fallback_note {
        result.notes.push(note);
    }
    result.notes.push(format!(
        "OpenSSH negotiates {} with this sshd (OpenSSH's default preference)",
        ssh.negotiated()
    ));
    result.notes.push(if keeper {
        format!(
            "{warmup} warm-up runs of each first; {runs} rounds interleaved, each: `machine \
             disconnect --all`, a first call (new SSH connection; it starts the keeper), a wait \
             for the keeper's socket, a call through the keeper (every CLI run is a new process; \
             the keeper's SSH connection is reused), a call with keepers off, then OpenSSH's \
             cold runs (each a new connection: key exchange + ed25519 public key auth)"
        )
    } else {
        format!(
            "{warmup} warm-up runs of each first; {runs} runs interleaved; every run is a new \
             process and a new SSH connection (key exchange + ed25519 public key auth)"
        )
    });
    Ok(result)
}
