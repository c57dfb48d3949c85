//! `tree-10k`: upload of a directory of 10,000 small files (100 directories x 100 files,
//! 100 B to 8 KiB each) with `Engine::file_put`, beside `scp -r` and `rsync -a -e ssh`, all three
//! into a destination that does not exist yet (removed, untimed, before every run). The OpenSSH
//! tools go through a ControlMaster, as ours runs on a connected session.

use std::fs;
use std::path::Path;
use std::time::Duration;

use anyhow::{Result, bail};

use crate::Ctx;
use crate::benches::file::{TransferBed, remove};
use crate::openssh::{self, OpenSsh};
use crate::report::{BenchResult, Measurement, Ratio, Side, Target};

/// Write `files` small files in directories of 100 under `root`; returns their total bytes.
fn make_tree(root: &Path, files: usize) -> Result<u64> {
    let mut total = 0u64;
    for i in 0..files {
        let dir = root.join(format!("d{:03}", i / 100));
        if i % 100 == 0 {
            fs::create_dir_all(&dir)?;
        }
        // Sizes spread over 100 B .. ~8 KiB, deterministic.
        let size = 100 + (i * 7919) % 8092;
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

pub fn run(ctx: &Ctx) -> Result<BenchResult> {
    let files = ctx.cfg.pick(10_000, 1_000);
    let runs = ctx.cfg.pick(3, 1);
    let bed = ctx.bed;
    let tb = TransferBed::open(ctx, "tree")?;
    let source = bed.local_dir("tree-src")?.join("tree");
    let bytes = make_tree(&source, files)?;
    let master = OpenSsh::new(bed).control_master(&bed.local_dir("tree-ssh")?)?;
    let ssh = master.client();
    let dest = |name: &str| tb.remote.join(name);
    let src = source.display().to_string();

    let (mut ours, mut scp, mut rsync) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..runs {
        remove(&dest("ours"))?;
        ours.push(tb.put(ctx, &source, &dest("ours"))?);
        remove(&dest("scp"))?;
        scp.push(openssh::time_run(
            &mut ssh.scp_recursive(&src, &ssh.remote_path(&dest("scp"))),
        )?);
        remove(&dest("rsync"))?;
        rsync.push(openssh::time_run(&mut ssh.rsync(
            &format!("{src}/"),
            &format!("{}/", ssh.remote_path(&dest("rsync"))),
        ))?);
    }
    for name in ["ours", "scp", "rsync"] {
        let n = count_files(&dest(name))?;
        if n != files {
            bail!("{name} left {n} files, expected {files}");
        }
        remove(&dest(name))?;
    }
    remove(&source)?;

    let mut result = BenchResult::new(
        "tree-10k",
        format!(
            "upload of a directory of {files} small files ({bytes} bytes in {} directories): \
             `Engine::file_put` beside `scp -r` and `rsync -a -e ssh` through an OpenSSH \
             ControlMaster",
            files.div_ceil(100)
        ),
    );
    let per = |v: &[Duration], what: &str, side| Measurement::new(what, side, v).with_bytes(bytes);
    let ours = result
        .push(per(&ours, "engine file_put (tree)", Side::Ours))
        .clone();
    let scp = result.push(per(&scp, "`scp -r`", Side::OpenSsh)).clone();
    let rsync = result
        .push(per(&rsync, "`rsync -a -e ssh`", Side::OpenSsh))
        .clone();
    let vs_scp = Ratio::speed(
        "file_put tree vs scp -r (speed-up)",
        &ours,
        &scp,
        Target::AtLeast(2.0),
    );
    if vs_scp.met() == Some(false) {
        result.notes.push(
            "target missed: the tree goes as one tar stream over one exec channel (extracted \
             into a staging directory, verified, then renamed into place); the time beyond \
             rsync's is the staging, verification and rename that keep the atomic-final-name \
             promise"
                .to_string(),
        );
    }
    result.ratios.push(vs_scp);
    result.ratios.push(Ratio::speed(
        "file_put tree vs rsync (speed-up)",
        &ours,
        &rsync,
        Target::AtLeast(1.0),
    ));
    result.notes.push(format!(
        "{runs} runs interleaved (ours, scp, rsync), each into a fresh destination; every side's \
         destination held all {files} files afterwards"
    ));
    Ok(result)
}
