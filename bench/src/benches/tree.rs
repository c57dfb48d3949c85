//! `tree-10k`: upload of a directory of 10,000 small files (100 directories x 100 files,
//! 0.5 to 4.5 KB each) as a user runs it: `remote-runner file put` in a fresh CLI process (its
//! machine's keeper running, as after any earlier call) beside `rsync -a -e ssh` in a fresh
//! process (a new SSH connection), interleaved. As diagnostics: `Engine::file_put` in-process on
//! a connected session, and `rsync` and `scp -r` through an OpenSSH ControlMaster. Every side
//! writes into a destination that does not exist yet (removed, untimed, before every run).

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::{Result, bail};

use remote_runner_engine::keeper::KeeperPaths;

use crate::Ctx;
use crate::benches::exec_cold::{prepare_state, wait_for_keeper};
use crate::benches::file::{TransferBed, remove};
use crate::openssh::{self, OpenSsh};
use crate::provider_host::sibling_binary;
use crate::report::{BenchResult, Measurement, Ratio, Side, Target};

/// Write `files` small files in directories of 100 under `root`; returns their total bytes.
fn make_tree(root: &Path, files: usize) -> Result<u64> {
    let mut total = 0u64;
    for i in 0..files {
        let dir = root.join(format!("d{:03}", i / 100));
        if i % 100 == 0 {
            fs::create_dir_all(&dir)?;
        }
        // Sizes spread over 0.5 .. 4.5 KB, deterministic.
        let size = 500 + (i * 7919) % 4000;
        let byte = b'a' + (i % 26) as u8;
        fs::write(dir.join(format!("f{i:05}.txt")), vec![byte; size])?;
        total += size as u64;
    }
    Ok(total)
}

/// Regular files below `root`.
fn count_files(root: &Path) -> Result<usize> {
    let mut n = 0;
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in fs::read_dir(&dir)? {
            let entry = entry?;
            let kind = entry.file_type()?;
            if kind.is_dir() {
                stack.push(entry.path());
            } else if kind.is_file() {
                n += 1;
            }
        }
    }
    Ok(n)
}

/// `remote-runner file VERB` between `local` and `remote` in a fresh process on `state_dir`.
fn cli_transfer(
    cli: &Path,
    state_dir: &Path,
    session: &str,
    verb: &str,
    local: &Path,
    remote: &Path,
) -> Command {
    let mut c = Command::new(cli);
    c.arg("--state-dir")
        .arg(state_dir)
        .args(["file", verb, "--session", session, "--local"])
        .arg(local)
        .arg("--remote")
        .arg(remote)
        .arg("--json")
        // A keeper left behind by a crashed run ends on its own soon.
        .env("REMOTE_RUNNER_KEEPER_IDLE", "120")
        .env_remove("SSH_AUTH_SOCK")
        .env_remove("REMOTE_RUNNER_STATE_DIR");
    c
}

/// `machine disconnect --all`: ends the keeper the CLI rows started.
fn disconnect(cli: &Path, state_dir: &Path) {
    let _ = Command::new(cli)
        .arg("--state-dir")
        .arg(state_dir)
        .args(["machine", "disconnect", "--all", "--json"])
        .output();
}

/// The CLI with a state dir holding the bed's machine and a session, and its keeper running:
/// each timed call is a fresh process, as a user runs it.
pub struct CliSide {
    cli: PathBuf,
    state_dir: PathBuf,
    session: String,
}

impl CliSide {
    /// The CLI on a new state dir `state_name`; `warm` is one call of the kind timed after it:
    /// the first connects directly and starts the machine's keeper, the second (and every timed
    /// one) goes through it, as a user's second and later calls do.
    pub fn open(
        ctx: &Ctx,
        remote: &Path,
        state_name: &str,
        warm: impl Fn(&CliSide) -> Result<Duration>,
    ) -> Result<CliSide> {
        let cli = sibling_binary("REMOTE_RUNNER_BENCH_CLI", "remote-runner")?;
        let (state_dir, session) = prepare_state(ctx, ctx.bed, remote, state_name)?;
        let side = CliSide {
            cli,
            state_dir,
            session,
        };
        warm(&side)?;
        let machine_id = ctx.bed.machine(remote).machine_id;
        wait_for_keeper(&KeeperPaths::new(&side.state_dir, &machine_id).socket)?;
        warm(&side)?;
        Ok(side)
    }

    /// Time one `remote-runner file put`.
    pub fn put(&self, local: &Path, remote: &Path) -> Result<Duration> {
        self.transfer("put", local, remote)
    }

    /// Time one `remote-runner file get`.
    pub fn get(&self, remote: &Path, local: &Path) -> Result<Duration> {
        self.transfer("get", local, remote)
    }

    fn transfer(&self, verb: &str, local: &Path, remote: &Path) -> Result<Duration> {
        openssh::time_run(&mut cli_transfer(
            &self.cli,
            &self.state_dir,
            &self.session,
            verb,
            local,
            remote,
        ))
    }
}

impl Drop for CliSide {
    fn drop(&mut self) {
        disconnect(&self.cli, &self.state_dir);
    }
}

pub fn run(ctx: &Ctx) -> Result<BenchResult> {
    let files = ctx.cfg.pick(10_000, 1_000);
    let runs = ctx.cfg.pick(7, 1);
    // scp -r takes seconds per run: fewer of them.
    let scp_runs = ctx.cfg.pick(3, 1);
    let bed = ctx.bed;
    let tb = TransferBed::open(ctx, "tree")?;
    let source = bed.local_dir("tree-src")?.join("tree");
    let bytes = make_tree(&source, files)?;
    let fresh = OpenSsh::new(bed);
    let master = fresh.control_master(&bed.local_dir("tree-ssh")?)?;
    let ssh = master.client();
    let dest = |name: &str| tb.remote.join(name);
    let src = source.display().to_string();
    let warm = tb.remote.join("cli-warm");
    let cli = CliSide::open(ctx, &tb.remote, "tree-cli-state", |cli| {
        let took = cli.put(&source, &warm)?;
        remove(&warm)?;
        Ok(took)
    });
    let cli_note = cli.as_ref().err().map(|e| {
        format!("the CLI rows are missing: {e:#} (scripts/bench.sh builds the CLI first)")
    });
    let cli = cli.ok();

    let (mut ours_cli, mut rsync_fresh) = (Vec::new(), Vec::new());
    let (mut ours, mut scp, mut rsync) = (Vec::new(), Vec::new(), Vec::new());
    for run in 0..runs {
        if let Some(cli) = &cli {
            remove(&dest("cli"))?;
            ours_cli.push(cli.put(&source, &dest("cli"))?);
        }
        remove(&dest("rsync-fresh"))?;
        rsync_fresh.push(openssh::time_run(&mut fresh.rsync(
            &format!("{src}/"),
            &format!("{}/", fresh.remote_path(&dest("rsync-fresh"))),
        ))?);
        remove(&dest("ours"))?;
        ours.push(tb.put(ctx, &source, &dest("ours"))?);
        remove(&dest("rsync"))?;
        rsync.push(openssh::time_run(&mut ssh.rsync(
            &format!("{src}/"),
            &format!("{}/", ssh.remote_path(&dest("rsync"))),
        ))?);
        if run < scp_runs {
            remove(&dest("scp"))?;
            scp.push(openssh::time_run(
                &mut ssh.scp_recursive(&src, &ssh.remote_path(&dest("scp"))),
            )?);
        }
    }
    let mut sides = vec!["rsync-fresh", "ours", "scp", "rsync"];
    if cli.is_some() {
        sides.push("cli");
    }
    for name in sides {
        let n = count_files(&dest(name))?;
        if n != files {
            bail!("{name} left {n} files, expected {files}");
        }
        remove(&dest(name))?;
    }
    remove(&source)?;
    drop(cli);

    let mut result = BenchResult::new(
        "tree-10k",
        format!(
            "upload of a directory of {files} small files ({bytes} bytes in {} directories) as a \
             user runs it: `remote-runner file put` in a fresh process (through the machine's \
             running keeper) beside `rsync -a -e ssh` in a fresh process (new SSH connection); \
             diagnostics: `Engine::file_put` in-process beside `scp -r` and `rsync -a -e ssh` \
             through an OpenSSH ControlMaster",
            files.div_ceil(100)
        ),
    );
    let per = |v: &[Duration], what: &str, side| Measurement::new(what, side, v).with_bytes(bytes);
    let cli_row = (!ours_cli.is_empty()).then(|| {
        result
            .push(per(
                &ours_cli,
                "`remote-runner file put` (fresh process, through a running keeper)",
                Side::Ours,
            ))
            .clone()
    });
    let rsync_fresh = result
        .push(per(
            &rsync_fresh,
            "`rsync -a -e ssh` (fresh process, new connection)",
            Side::OpenSsh,
        ))
        .clone();
    let ours = result
        .push(per(
            &ours,
            "diagnostic: engine file_put (tree) in-process, connected session",
            Side::Ours,
        ))
        .clone();
    let scp = result
        .push(per(&scp, "`scp -r` through a ControlMaster", Side::OpenSsh))
        .clone();
    let rsync = result
        .push(per(
            &rsync,
            "`rsync -a -e ssh` through a ControlMaster",
            Side::OpenSsh,
        ))
        .clone();
    if let Some(cli_row) = &cli_row {
        result.ratios.push(Ratio::speed(
            "CLI file put (fresh process) vs fresh rsync (speed-up)",
            cli_row,
            &rsync_fresh,
            Target::AtLeast(1.0),
        ));
    }
    result.ratios.push(Ratio::speed(
        "engine file_put tree vs scp -r (speed-up)",
        &ours,
        &scp,
        Target::AtLeast(2.0),
    ));
    result.ratios.push(Ratio::speed(
        "engine file_put tree vs rsync through a ControlMaster (speed-up)",
        &ours,
        &rsync,
        Target::None,
    ));
    if let Some(note) = cli_note {
        result.notes.push(note);
    }
    result.notes.push(format!(
        "{runs} rounds interleaved (CLI, fresh rsync, engine, rsync through the master; scp in \
         the first {scp_runs}), each into a fresh destination; every side's destination held \
         all {files} files afterwards. The CLI's keeper was started (and warmed by one upload) \
         before the timed rounds"
    ));
    Ok(result)
}
