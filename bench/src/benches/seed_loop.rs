//! `seed-loop`: issue 30's timing loop. An agent's whole experiment with `seed-runner` (every
//! call a fresh process): `mount create`, `session create`, 20 × (edit a local file, `session
//! exec` a command that reads it and writes an artifact), `session destroy`, `mount destroy
//! --cleanup`; beside the minimal `ssh` + `rsync` script doing the same job (rsync up, ssh the
//! command, rsync the artifacts back, 20 times, then `ssh rm -rf`).
//!
//! Both loops are checked every round: each command's artifact must come back with the content
//! the edited file implies, each command's exit code (0, 1 or 2, by step) must be reported, and
//! the remote dir must be gone at the end. A wrong result fails the benchmark (non-zero exit),
//! so no figure is reported for a broken run.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use remote_runner_engine::store::{self, Store};
use serde_json::Value;

use crate::Ctx;
use crate::bed::{Bed, MACHINE_ID};
use crate::openssh::OpenSsh;
use crate::provider_host::sibling_binary;
use crate::report::{BenchResult, Measurement, Ratio, Side, Target};

/// Commands per loop (the 20).
const STEPS: usize = 20;

/// Files of the local project besides the edited one (sent once, then unchanged).
const PROJECT_FILES: usize = 30;

/// The command each step runs in the remote work dir: reads the edited file, writes an artifact
/// named by the step, prints a line, exits with the step's code.
fn step_command(step: usize) -> String {
    format!(
        "mkdir -p artifacts && {{ wc -l < input.txt; tail -n 1 input.txt; }} > \
         artifacts/result_{step:02}.txt && echo step {step} done; exit {}",
        expected_exit(step)
    )
}

fn expected_exit(step: usize) -> i32 {
    (step % 3) as i32
}

/// What `artifacts/result_NN.txt` must hold after step `step` (1-based).
fn expected_artifact(step: usize) -> String {
    format!("{step}\nedit {step}\n")
}

/// The local edit before step `step`: one more line in `input.txt` (so the size always changes
/// and rsync's size + mtime check cannot miss it within one second).
fn edit(local: &Path, step: usize) -> Result<()> {
    use std::io::Write as _;
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .open(local.join("input.txt"))?;
    writeln!(f, "edit {step}")?;
    Ok(())
}

fn check_artifact(local: &Path, step: usize, side: &str) -> Result<()> {
    let path = local.join(format!("artifacts/result_{step:02}.txt"));
    let got = std::fs::read_to_string(&path)
        .with_context(|| format!("{side}: step {step}: artifact {} missing", path.display()))?;
    let got: String = got.lines().map(|l| format!("{}\n", l.trim())).collect();
    ensure!(
        got == expected_artifact(step),
        "{side}: step {step}: artifact holds {got:?}, expected {:?}",
        expected_artifact(step)
    );
    Ok(())
}

/// A local project: `PROJECT_FILES` small source files and an empty `input.txt`.
fn make_project(dir: &Path) -> Result<()> {
    std::fs::create_dir_all(dir.join("src"))?;
    for i in 0..PROJECT_FILES {
        let body = format!("// file {i}\n{}", "let x = 1;\n".repeat(200));
        std::fs::write(dir.join(format!("src/mod_{i:02}.rs")), body)?;
    }
    std::fs::write(dir.join("input.txt"), "")?;
    Ok(())
}

/// Accepted SSH logins in the bed's sshd log so far (one per new connection).
fn logins(bed: &Bed) -> usize {
    std::fs::read_to_string(&bed.sshd.log)
        .unwrap_or_default()
        .lines()
        .filter(|l| l.contains("Accepted publickey"))
        .count()
}

/// Timings of one loop, per phase.
#[derive(Default)]
struct LoopTimes {
    total: Duration,
    /// mount create + session create (ours); nothing separate for OpenSSH (its first rsync).
    setup: Duration,
    /// One per step: the exec (ours) or rsync up + ssh + rsync down (OpenSSH).
    steps: Vec<Duration>,
    /// session destroy + mount destroy --cleanup (ours); `ssh rm -rf` (OpenSSH).
    teardown: Duration,
    /// New SSH connections the loop made (sshd's accepted logins).
    connections: usize,
}

/// Our side: `seed-runner` driven as an agent drives it.
struct Seed {
    bin: PathBuf,
    state_dir: PathBuf,
    home: PathBuf,
}

impl Seed {
    fn run(&self, args: &[&str]) -> Result<Value> {
        let out = Command::new(&self.bin)
            .args(args)
            .env("REMOTE_RUNNER_STATE_DIR", &self.state_dir)
            .env("HOME", &self.home)
            .env_remove("SSH_AUTH_SOCK")
            .env_remove("RUST_LOG")
            .stdin(Stdio::null())
            .output()
            .with_context(|| format!("spawn {}", self.bin.display()))?;
        let text = String::from_utf8_lossy(&out.stdout);
        let json: Value = serde_json::from_str(&text)
            .with_context(|| format!("seed-runner {args:?}: stdout is not JSON: {text:?}"))?;
        if !out.status.success() || json.get("error").is_some() {
            bail!("seed-runner {args:?} failed ({}): {text}", out.status);
        }
        Ok(json)
    }

    fn str_field(v: &Value, field: &str) -> Result<String> {
        v[field]
            .as_str()
            .map(str::to_string)
            .with_context(|| format!("no {field} in {v}"))
    }

    fn run_loop(&self, bed: &Bed, local: &Path, remote: &Path) -> Result<LoopTimes> {
        make_project(local)?;
        let mut t = LoopTimes::default();
        let logins_before = logins(bed);
        let start = Instant::now();
        let mount = self.run(&[
            "mount",
            "create",
            "--machine",
            MACHINE_ID,
            "--local-dir",
            path_str(local)?,
            "--remote-dir",
            path_str(remote)?,
        ])?;
        let mount_id = Self::str_field(&mount, "mount_id")?;
        let sess = self.run(&[
            "session",
            "create",
            "--machine",
            MACHINE_ID,
            "--mount-id",
            &mount_id,
            "--name",
            "bench",
        ])?;
        let session = Self::str_field(&sess, "session_id")?;
        t.setup = start.elapsed();
        for step in 1..=STEPS {
            let s = Instant::now();
            edit(local, step)?;
            let r = self.run(&[
                "session",
                "exec",
                "--session",
                &session,
                "--cmd",
                &step_command(step),
            ])?;
            ensure!(
                r["exit_code"].as_i64() == Some(expected_exit(step) as i64),
                "seed-runner: step {step}: exit_code {} (expected {}): {r}",
                r["exit_code"],
                expected_exit(step)
            );
            check_artifact(local, step, "seed-runner")?;
            t.steps.push(s.elapsed());
        }
        let s = Instant::now();
        self.run(&["session", "destroy", "--session", &session])?;
        self.run(&["mount", "destroy", "--mount-id", &mount_id, "--cleanup"])?;
        t.teardown = s.elapsed();
        t.total = start.elapsed();
        t.connections = logins(bed) - logins_before;
        ensure!(
            !remote.exists(),
            "seed-runner: {} still exists after mount destroy --cleanup",
            remote.display()
        );
        Ok(t)
    }
}

/// The OpenSSH side: the minimal script, every tool a fresh process and connection.
fn openssh_loop(bed: &Bed, ssh: &OpenSsh, local: &Path, remote: &Path) -> Result<LoopTimes> {
    make_project(local)?;
    std::fs::create_dir_all(local.join("artifacts"))?;
    let mut t = LoopTimes::default();
    let logins_before = logins(bed);
    let up_src = format!("{}/", local.display());
    let up_dest = format!("{}/", ssh.remote_path(remote));
    let down_src = format!("{}/artifacts/", ssh.remote_path(remote));
    let down_dest = format!("{}/artifacts/", local.display());
    let start = Instant::now();
    for step in 1..=STEPS {
        let s = Instant::now();
        edit(local, step)?;
        // rsync up (the project, not the artifacts that came back)
        let mut up = ssh.rsync(&up_src, &up_dest);
        up.arg("--exclude=/artifacts/");
        status_ok(&mut up, "rsync up")?;
        // ssh the command
        let cmd = format!("cd {} && {{ {} ; }}", remote.display(), step_command(step));
        let out = ssh
            .ssh(&cmd)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .output()
            .context("spawn ssh")?;
        ensure!(
            out.status.code() == Some(expected_exit(step)),
            "ssh: step {step}: exit {} (expected {}): {}",
            out.status,
            expected_exit(step),
            String::from_utf8_lossy(&out.stderr).trim()
        );
        // rsync the artifacts back
        status_ok(&mut ssh.rsync(&down_src, &down_dest), "rsync down")?;
        check_artifact(local, step, "ssh + rsync")?;
        t.steps.push(s.elapsed());
    }
    let s = Instant::now();
    status_ok(
        &mut ssh.ssh(&format!("rm -rf {}", remote.display())),
        "ssh rm -rf",
    )?;
    t.teardown = s.elapsed();
    t.total = start.elapsed();
    t.connections = logins(bed) - logins_before;
    ensure!(
        !remote.exists(),
        "ssh + rsync: {} still exists after ssh rm -rf",
        remote.display()
    );
    Ok(t)
}

fn status_ok(cmd: &mut Command, what: &str) -> Result<()> {
    let out = cmd
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .with_context(|| format!("spawn {what}"))?;
    ensure!(
        out.status.success(),
        "{what} failed ({}): {}",
        out.status,
        String::from_utf8_lossy(&out.stderr).trim()
    );
    Ok(())
}

fn path_str(p: &Path) -> Result<&str> {
    p.to_str()
        .with_context(|| format!("path {} is not UTF-8", p.display()))
}

fn median(v: &mut [Duration]) -> Duration {
    v.sort_unstable();
    v[v.len() / 2]
}

pub fn run(ctx: &Ctx) -> Result<BenchResult> {
    let rounds = ctx.cfg.pick(5, 3);
    let bed = ctx.bed;
    let bin = sibling_binary("REMOTE_RUNNER_BENCH_SEED_RUNNER", "seed-runner")?;
    let remote_parent = bed.remote_dir("seed-loop")?;
    let state_dir = bed.local_dir("seed-loop-state")?;
    let home = bed.local_dir("seed-loop-home")?;
    {
        // The bed registered as a machine, as `remote-runner machine add` would.
        let store = Store::open(&state_dir)?;
        store::machines::insert(&store, &bed.machine(&remote_parent))?;
    }
    let seed = Seed {
        bin,
        state_dir,
        home,
    };
    let ssh = OpenSsh::new(bed);

    let (mut ours, mut theirs) = (Vec::new(), Vec::new());
    for round in 0..rounds {
        // Interleaved, and the side that goes first alternates.
        let mut one = |ours_turn: bool| -> Result<()> {
            let name = format!("{}-{round}", if ours_turn { "seed" } else { "ssh" });
            let local = bed.local_dir(&format!("seed-loop-{name}"))?;
            let remote = remote_parent.join(&name);
            if ours_turn {
                ours.push(seed.run_loop(bed, &local, &remote)?);
            } else {
                theirs.push(openssh_loop(bed, &ssh, &local, &remote)?);
            }
            Ok(())
        };
        let ours_first = round % 2 == 0;
        one(ours_first)?;
        one(!ours_first)?;
    }

    let mut result = BenchResult::new(
        "seed-loop",
        format!(
            "issue 30's timing loop: `seed-runner` (a fresh process per call) doing `mount \
             create`, `session create`, {STEPS} × (append a line to a local file, `session exec` \
             a command that reads it and writes an artifact), `session destroy`, `mount destroy \
             --cleanup`; beside the minimal `ssh` + `rsync` script doing the same job ({STEPS} × \
             (`rsync -a` up, `ssh host 'cd dir && cmd'`, `rsync -a` artifacts back), then `ssh \
             host rm -rf dir`). Every artifact, exit code and the final removal are checked; a \
             wrong result fails the run"
        ),
    );
    let totals = |v: &[LoopTimes]| v.iter().map(|t| t.total).collect::<Vec<_>>();
    let ours_total = result
        .push(Measurement::new(
            &format!("the whole loop: seed-runner ({} processes)", STEPS + 4),
            Side::Ours,
            &totals(&ours),
        ))
        .clone();
    let theirs_total = result
        .push(Measurement::new(
            &format!(
                "the whole loop: ssh + rsync script ({} processes)",
                3 * STEPS + 1
            ),
            Side::OpenSsh,
            &totals(&theirs),
        ))
        .clone();
    let all_steps = |v: &[LoopTimes]| v.iter().flat_map(|t| t.steps.clone()).collect::<Vec<_>>();
    result.push(Measurement::new(
        "one step: edit + `seed-runner session exec` (sync up, run, log and artifacts down)",
        Side::Ours,
        &all_steps(&ours),
    ));
    result.push(Measurement::new(
        "one step: edit + rsync up + ssh cmd + rsync down",
        Side::OpenSsh,
        &all_steps(&theirs),
    ));
    result.push(Measurement::new(
        "setup: `mount create` + `session create`",
        Side::Ours,
        &ours.iter().map(|t| t.setup).collect::<Vec<_>>(),
    ));
    result.push(Measurement::new(
        "teardown: `session destroy` + `mount destroy --cleanup`",
        Side::Ours,
        &ours.iter().map(|t| t.teardown).collect::<Vec<_>>(),
    ));
    result.push(Measurement::new(
        "teardown: `ssh host rm -rf dir`",
        Side::OpenSsh,
        &theirs.iter().map(|t| t.teardown).collect::<Vec<_>>(),
    ));
    result.ratios.push(Ratio::time(
        "seed-runner loop / ssh + rsync script",
        &ours_total,
        &theirs_total,
        Target::AtMost(1.0),
    ));
    let conns = |v: &[LoopTimes]| {
        let mut c: Vec<usize> = v.iter().map(|t| t.connections).collect();
        c.sort_unstable();
        c[c.len() / 2]
    };
    result.notes.push(format!(
        "new SSH connections per loop (accepted logins in the sshd log, median): seed-runner {}, \
         ssh + rsync {}",
        conns(&ours),
        conns(&theirs)
    ));
    let mut first_steps: Vec<Duration> = ours.iter().map(|t| t.steps[0]).collect();
    let mut later: Vec<Duration> = ours.iter().flat_map(|t| t.steps[1..].to_vec()).collect();
    result.notes.push(format!(
        "seed-runner's first exec (sends the {PROJECT_FILES}-file project) median {:.1} ms; \
         later execs (one changed file) median {:.1} ms",
        median(&mut first_steps).as_secs_f64() * 1e3,
        median(&mut later).as_secs_f64() * 1e3
    ));
    result.notes.push(format!(
        "{rounds} rounds, the two loops interleaved (the side that goes first alternates), each \
         on a fresh local dir ({PROJECT_FILES} files of 2.2 KB plus `input.txt`) and a fresh \
         remote dir; seed-runner uses the bed registered as a machine (key, strict known_hosts, \
         no agent, no ssh_config), OpenSSH the same key and known_hosts (`-F /dev/null`, no \
         ControlMaster: a minimal script). The issue's earlier figure for this loop was 0.65x"
    ));
    Ok(result)
}
