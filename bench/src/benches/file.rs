//! `file-put-1g` / `file-get-1g`: one large file through the engine's transfer API
//! (`Engine::file_put` / `file_get`: SFTP streams, temp name + rename, sha256 on the way),
//! beside OpenSSH `sftp -b` doing `put` / `get` of the same file. Runs are interleaved and the
//! destination is removed (untimed) before every run, so each side writes a new file.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use remote_runner_engine::engine::transfer::{TransferOptions, TransferStatus};
use remote_runner_engine::engine::{Engine, FixedConnector};
use remote_runner_engine::remote::Remote;
use remote_runner_engine::ssh::SshTransport;
use remote_runner_engine::transport::Transport;
use tokio::io::{AsyncWriteExt, BufReader};

use crate::Ctx;
use crate::bed::Bed;
use crate::benches::tree::CliSide;
use crate::openssh::{self, ControlMaster, OpenSsh};
use crate::report::{BenchResult, Measurement, Ratio, Side, Target};

const GIB: u64 = 1 << 30;

/// An engine with one session on the bed, its remote working directory, for transfers.
pub struct TransferBed {
    /// The engine's transport, also used directly for the raw-stream diagnostics.
    pub transport: Arc<SshTransport>,
    pub engine: Engine,
    pub session_id: String,
    pub remote: PathBuf,
}

impl TransferBed {
    pub fn open(ctx: &Ctx, name: &str) -> Result<TransferBed> {
        let bed = ctx.bed;
        let remote = bed.remote_dir(name)?;
        let transport = ctx.rt.block_on(bed.connect(&remote))?;
        let engine = Engine::new(
            &bed.local_dir(&format!("{name}-state"))?,
            Arc::new(FixedConnector(Remote::direct(transport.clone()))),
        )?;
        let session = ctx
            .rt
            .block_on(engine.create_session(&bed.machine(&remote), None))?;
        Ok(TransferBed {
            transport,
            engine,
            session_id: session.session_id,
            remote,
        })
    }

    /// Time one `file_put` of `local` to `remote`.
    pub fn put(&self, ctx: &Ctx, local: &Path, remote: &Path) -> Result<Duration> {
        let start = Instant::now();
        let rec = ctx.rt.block_on(self.engine.file_put(
            &self.session_id,
            local,
            &remote.to_string_lossy(),
            TransferOptions::default(),
        ))?;
        let took = start.elapsed();
        if rec.status != TransferStatus::Succeeded {
            bail!("file_put ended {:?}: {:?}", rec.status, rec.error);
        }
        Ok(took)
    }

    /// Time one `file_get` of `remote` to `local`.
    pub fn get(&self, ctx: &Ctx, remote: &Path, local: &Path) -> Result<Duration> {
        let start = Instant::now();
        let rec = ctx.rt.block_on(self.engine.file_get(
            &self.session_id,
            &remote.to_string_lossy(),
            local,
            TransferOptions::default(),
        ))?;
        let took = start.elapsed();
        if rec.status != TransferStatus::Succeeded {
            bail!("file_get ended {:?}: {:?}", rec.status, rec.error);
        }
        Ok(took)
    }
}

impl TransferBed {
    /// Diagnostic: time a bare `Transport::open_write` stream fed from `local` (no temp name,
    /// no hash, no record): what the SFTP layer alone sustains.
    pub fn raw_write(&self, ctx: &Ctx, local: &Path, remote: &Path) -> Result<Duration> {
        ctx.rt.block_on(async {
            let start = Instant::now();
            let file = tokio::fs::File::open(local).await?;
            let mut reader = BufReader::with_capacity(1 << 20, file);
            let mut writer = self
                .transport
                .open_write(&remote.to_string_lossy(), 0o644)
                .await?;
            tokio::io::copy_buf(&mut reader, &mut writer).await?;
            writer.shutdown().await?;
            Ok(start.elapsed())
        })
    }

    /// Diagnostic: time a bare `Transport::open_read` stream read to its end and dropped.
    pub fn raw_read(&self, ctx: &Ctx, remote: &Path) -> Result<(Duration, u64)> {
        ctx.rt.block_on(async {
            let start = Instant::now();
            let reader = self.transport.open_read(&remote.to_string_lossy()).await?;
            let mut reader = BufReader::with_capacity(1 << 20, reader);
            let n = tokio::io::copy_buf(&mut reader, &mut tokio::io::sink()).await?;
            Ok((start.elapsed(), n))
        })
    }
}

/// Write `size` bytes of incompressible-looking data (a 1 MiB pseudo-random block, repeated).
pub fn make_file(path: &Path, size: u64) -> Result<()> {
    let mut block = vec![0u8; 1 << 20];
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    for b in block.iter_mut() {
        // xorshift64
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        *b = (x >> 24) as u8;
    }
    let mut f = std::io::BufWriter::new(
        fs::File::create(path).with_context(|| format!("create {}", path.display()))?,
    );
    let mut left = size;
    while left > 0 {
        let n = left.min(block.len() as u64) as usize;
        f.write_all(&block[..n])?;
        left -= n as u64;
    }
    f.flush()?;
    Ok(())
}

/// Give a file or tree on the "remote" side to the login user (the bed is this host).
pub fn chown_to_login_user(bed: &Bed, path: &Path) -> Result<()> {
    let user = bed.sshd.user();
    openssh::run(
        Command::new("chown")
            .arg("-R")
            .arg(format!("{user}:{user}"))
            .arg(path),
    )?;
    Ok(())
}

/// Remove a file or tree if present (untimed cleanup between runs).
pub fn remove(path: &Path) -> Result<()> {
    match fs::symlink_metadata(path) {
        Ok(m) if m.is_dir() => fs::remove_dir_all(path)?,
        Ok(_) => fs::remove_file(path)?,
        Err(_) => {}
    }
    Ok(())
}

fn sizes(ctx: &Ctx) -> (u64, usize) {
    (ctx.cfg.pick(GIB, 64 << 20), ctx.cfg.pick(3, 1))
}

fn size_label(size: u64) -> String {
    if size.is_multiple_of(GIB) {
        format!("{} GiB", size / GIB)
    } else {
        format!("{} MiB", size >> 20)
    }
}

fn sftp_batch(dir: &Path, line: &str) -> Result<PathBuf> {
    let batch = dir.join(format!(
        "batch-{}.txt",
        line.split_whitespace().next().unwrap_or("x")
    ));
    fs::write(&batch, format!("{line}\n"))?;
    Ok(batch)
}

/// What bounds our throughput when the target is missed, read from this run's own rows: the
/// bare SFTP stream (no temp name, hash or record) tells the SFTP layer from the transfer layer.
fn limits_note(verb: &str, ours: &Measurement, theirs: &Measurement, raw: &Measurement) -> String {
    let mb = |m: &Measurement| m.throughput().unwrap_or(0.0);
    if mb(raw) >= mb(theirs) {
        format!(
            "target missed, and not because of SFTP: the bare Transport stream alone reaches \
             {:.1} MB/s (OpenSSH sftp {:.1} MB/s) while engine file_{verb} reaches {:.1} MB/s, so \
             the cost is in the transfer layer above it (engine/src/engine/transfer: the 1 MiB \
             chunk queue, the sha256 computed on the way, the local file I/O, temp name + rename)",
            mb(raw),
            mb(theirs),
            mb(ours)
        )
    } else {
        format!(
            "target missed in the SFTP layer itself: the bare Transport stream reaches only \
             {:.1} MB/s against OpenSSH sftp's {:.1} MB/s; what to change is in \
             engine/src/ssh/sftp.rs: more requests in flight (russh-sftp \
             max_concurrent_reads/max_concurrent_writes, now 64) and larger requests \
             (max_write_packet_len, 32 KiB by default; max_packet_len)",
            mb(raw),
            mb(theirs)
        )
    }
}

pub fn run_put(ctx: &Ctx) -> Result<BenchResult> {
    let (size, runs) = sizes(ctx);
    let bed = ctx.bed;
    let tb = TransferBed::open(ctx, "file-put")?;
    let local_dir = bed.local_dir("file-put-src")?;
    let source = local_dir.join("source.bin");
    make_file(&source, size)?;
    let ours_dest = tb.remote.join("ours.bin");
    let theirs_dest = tb.remote.join("sftp.bin");
    let batch = sftp_batch(
        &local_dir,
        &format!("put {} {}", source.display(), theirs_dest.display()),
    )?;
    let master =
        OpenSsh::new(bed).control_master(&bed.local_dir(&format!("{}-ssh", tb_name(&tb)))?)?;
    let ssh = master.client();
    let gcm_master = same_cipher_master(bed, &tb)?;

    let (mut ours, mut theirs, mut raw, mut gcm) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for _ in 0..runs {
        remove(&ours_dest)?;
        ours.push(tb.put(ctx, &source, &ours_dest)?);
        remove(&theirs_dest)?;
        theirs.push(openssh::time_run(&mut ssh.sftp_batch(&batch))?);
        remove(&theirs_dest)?;
        gcm.push(openssh::time_run(
            &mut gcm_master.client().sftp_batch(&batch),
        )?);
        remove(&ours_dest)?;
        raw.push(tb.raw_write(ctx, &source, &ours_dest)?);
    }
    check_size(&ours_dest, size)?;
    check_size(&theirs_dest, size)?;
    remove(&ours_dest)?;
    remove(&theirs_dest)?;
    remove(&source)?;

    let label = size_label(size);
    let mut result = BenchResult::new(
        "file-put-1g",
        format!(
            "upload of one {label} file: `Engine::file_put` (engine transfer API over SFTP) beside \
             `sftp -b` with `put` through an OpenSSH ControlMaster"
        ),
    );
    let raw = Measurement::new(
        &format!("diagnostic: bare Transport::open_write stream {label}"),
        Side::Ours,
        &raw,
    )
    .with_bytes(size);
    finish(
        &mut result,
        &label,
        "put",
        size,
        runs,
        &ours,
        &theirs,
        raw,
        Target::AtLeast(1.0),
    );
    same_cipher_rows(&mut result, &label, "put", size, &gcm, Target::None);
    Ok(result)
}

pub fn run_get(ctx: &Ctx) -> Result<BenchResult> {
    let (size, runs) = sizes(ctx);
    let bed = ctx.bed;
    let tb = TransferBed::open(ctx, "file-get")?;
    let source = tb.remote.join("source.bin");
    make_file(&source, size)?;
    chown_to_login_user(bed, &source)?;
    let local_dir = bed.local_dir("file-get-dest")?;
    let ours_dest = local_dir.join("ours.bin");
    let cli_dest = local_dir.join("cli.bin");
    let theirs_dest = local_dir.join("sftp.bin");
    let batch = sftp_batch(
        &local_dir,
        &format!("get {} {}", source.display(), theirs_dest.display()),
    )?;
    let master =
        OpenSsh::new(bed).control_master(&bed.local_dir(&format!("{}-ssh", tb_name(&tb)))?)?;
    let ssh = master.client();
    let gcm_master = same_cipher_master(bed, &tb)?;
    let warm_source = tb.remote.join("warm.bin");
    make_file(&warm_source, 1 << 20)?;
    chown_to_login_user(bed, &warm_source)?;
    let cli = CliSide::open(ctx, &tb.remote, "file-get-cli-state", |cli| {
        let took = cli.get(&warm_source, &cli_dest)?;
        remove(&cli_dest)?;
        Ok(took)
    });
    let cli_note = cli.as_ref().err().map(|e| {
        format!("the CLI rows are missing: {e:#} (scripts/bench.sh builds the CLI first)")
    });
    let cli = cli.ok();

    let (mut ours, mut theirs, mut raw, mut gcm) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let mut ours_cli = Vec::new();
    for _ in 0..runs {
        if let Some(cli) = &cli {
            remove(&cli_dest)?;
            ours_cli.push(cli.get(&source, &cli_dest)?);
        }
        remove(&ours_dest)?;
        ours.push(tb.get(ctx, &source, &ours_dest)?);
        remove(&theirs_dest)?;
        theirs.push(openssh::time_run(&mut ssh.sftp_batch(&batch))?);
        remove(&theirs_dest)?;
        gcm.push(openssh::time_run(
            &mut gcm_master.client().sftp_batch(&batch),
        )?);
        let (took, n) = tb.raw_read(ctx, &source)?;
        if n != size {
            bail!("the bare SFTP read stream returned {n} bytes, expected {size}");
        }
        raw.push(took);
    }
    check_size(&ours_dest, size)?;
    check_size(&theirs_dest, size)?;
    if cli.is_some() {
        check_size(&cli_dest, size)?;
    }
    drop(cli);
    for path in [&ours_dest, &cli_dest, &theirs_dest, &source, &warm_source] {
        remove(path)?;
    }

    let label = size_label(size);
    let mut result = BenchResult::new(
        "file-get-1g",
        format!(
            "download of one {label} file as a user runs it: `remote-runner file get` in a fresh \
             process (the machine's keeper running; a file of 128 MiB or more goes over a \
             connection of the CLI's own), beside `sftp -b` with `get` through \
             an OpenSSH ControlMaster; diagnostics: `Engine::file_get` in-process on a connected \
             session, and the bare SFTP read stream"
        ),
    );
    let raw = Measurement::new(
        &format!("diagnostic: bare Transport::open_read stream {label} (to a sink)"),
        Side::Ours,
        &raw,
    )
    .with_bytes(size);
    // With the CLI rows, the in-process figure is a diagnostic: the target is on what a user
    // runs.
    let engine_target = if ours_cli.is_empty() {
        Target::AtLeast(1.0)
    } else {
        Target::None
    };
    let sftp = finish(
        &mut result,
        &label,
        "get",
        size,
        runs,
        &ours,
        &theirs,
        raw,
        engine_target,
    );
    let gcm = same_cipher_rows(&mut result, &label, "get", size, &gcm, engine_target);
    if !ours_cli.is_empty() {
        let cli_row = result
            .push(
                Measurement::new(
                    &format!("`remote-runner file get` {label} (fresh process)"),
                    Side::Ours,
                    &ours_cli,
                )
                .with_bytes(size),
            )
            .clone();
        let with_cipher = format!("sftp get with {SAME_CIPHER}");
        for (what, theirs) in [("sftp get", &sftp), (with_cipher.as_str(), &gcm)] {
            result.ratios.push(Ratio::speed(
                &format!("CLI file get (fresh process) / {what}"),
                &cli_row,
                theirs,
                Target::AtLeast(1.0),
            ));
        }
    }
    if let Some(note) = cli_note {
        result.notes.push(note);
    }
    Ok(result)
}

/// The cipher remote-runner picks on this kind of CPU (AES-GCM with AES instructions).
const SAME_CIPHER: &str = "aes256-gcm@openssh.com";

/// A second ControlMaster that uses [`SAME_CIPHER`], for a like-for-like row: the target is
/// against OpenSSH as users run it (its default cipher), this row shows the cipher's share.
fn same_cipher_master(bed: &Bed, tb: &TransferBed) -> Result<ControlMaster> {
    OpenSsh::new(bed).control_master_with(
        &bed.local_dir(&format!("{}-ssh-gcm", tb_name(tb)))?,
        &["-c", SAME_CIPHER],
    )
}

/// The same-cipher `sftp` row and its ratio to our in-process row (with `target`: a put's
/// target is against OpenSSH's default cipher).
fn same_cipher_rows(
    result: &mut BenchResult,
    label: &str,
    verb: &str,
    size: u64,
    gcm: &[Duration],
    target: Target,
) -> Measurement {
    let ours = result
        .measurements
        .iter()
        .find(|m| m.side == Side::Ours)
        .cloned();
    let gcm = result
        .push(
            Measurement::new(
                &format!("`sftp -b` {verb} {label}, master with `-c {SAME_CIPHER}`"),
                Side::OpenSsh,
                gcm,
            )
            .with_bytes(size),
        )
        .clone();
    if let Some(ours) = ours {
        result.ratios.push(Ratio::speed(
            &format!("file_{verb} / sftp {verb} with {SAME_CIPHER}"),
            &ours,
            &gcm,
            target,
        ));
    }
    result.notes.push(format!(
        "our side negotiates {SAME_CIPHER} on this CPU (AES instructions; see docs/security.md), \
         OpenSSH its default (chacha20-poly1305@openssh.com); the row with `-c {SAME_CIPHER}` \
         runs OpenSSH with the same cipher, interleaved with the others"
    ));
    gcm
}

/// The remote dir's last component (unique per benchmark), for local scratch names.
fn tb_name(tb: &TransferBed) -> String {
    tb.remote
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "transfer".into())
}

fn check_size(path: &Path, size: u64) -> Result<()> {
    let got = fs::metadata(path)
        .with_context(|| format!("stat {}", path.display()))?
        .len();
    if got != size {
        bail!("{} has {got} bytes, expected {size}", path.display());
    }
    Ok(())
}

/// Our row, OpenSSH's row, the diagnostic row, the ratio and the notes.
#[allow(clippy::too_many_arguments)]
fn finish(
    result: &mut BenchResult,
    label: &str,
    verb: &str,
    size: u64,
    runs: usize,
    ours: &[Duration],
    theirs: &[Duration],
    raw: Measurement,
    target: Target,
) -> Measurement {
    let ours = result
        .push(
            Measurement::new(&format!("engine file_{verb} {label}"), Side::Ours, ours)
                .with_bytes(size),
        )
        .clone();
    let theirs = result
        .push(
            Measurement::new(&format!("`sftp -b` {verb} {label}"), Side::OpenSsh, theirs)
                .with_bytes(size),
        )
        .clone();
    let ratio = Ratio::speed(
        &format!("file_{verb} / sftp {verb}"),
        &ours,
        &theirs,
        target,
    );
    let missed = ratio.met() == Some(false);
    result.ratios.push(ratio);
    result.notes.push(format!(
        "{runs} runs interleaved; each run writes a new destination file (removed, untimed, before \
         the run); sizes checked after; both sides start warm: ours on a connected session, `sftp` \
         through an OpenSSH ControlMaster (so no key exchange in its time)"
    ));
    if missed {
        result.notes.push(limits_note(verb, &ours, &theirs, &raw));
    }
    result.push(raw);
    theirs
}
