//! The per-connection sshd SIGKILLed during a running command, during streaming output and
//! during file transfers (put and get): the engine reconnects, the exit code and every output
//! byte are recovered, and no partial file ever appears under a final name.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Result, anyhow, bail};
use remote_runner_engine::engine::transfer::{TransferOptions, TransferProgress};
use remote_runner_engine::engine::{ExecRequest, OutputStream};
use remote_runner_reliability::bed::{Bed, check_exact, is_link_error, recover, wait_started};
use remote_runner_reliability::report::Report;
use remote_runner_reliability::rng::XorShift;
use remote_runner_reliability::{percentile, repeats, sha256_hex};

const RECOVERY: Duration = Duration::from_secs(120);

/// The command of run `run` and the exact stdout it prints.
fn bursty(run: usize, code: i32) -> (String, Vec<u8>) {
    let cmd =
        format!("echo begin-{run}; sleep 1.2; seq 1 3000; printf 'tail-{run}'; (exit {code})");
    let mut out = format!("begin-{run}\n");
    for i in 1..=3000 {
        out.push_str(&format!("{i}\n"));
    }
    out.push_str(&format!("tail-{run}"));
    (cmd, out.into_bytes())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sshd_killed_during_a_running_command() {
    let mut report = Report::new(
        "sshd_killed_running_command",
        "fault",
        "SIGKILL to every per-connection sshd process (the listener stays) while a foreground \
         command sleeps between two bursts of output",
        &[
            "the interrupted exec ends with a link error (connection_lost) or the final record",
            "command_wait reconnects and returns the final record",
            "exit code exact",
            "stdout sha256 equal to the expected bytes (local copy and a fresh read by offset)",
        ],
    );
    let bed = Bed::start("kill-running").await.expect("bed");
    let s = bed.session().await.expect("session");
    let mut recovery_ms = Vec::new();
    let mut interrupted = 0;
    for run in 0..repeats(3) {
        let code = [0, 1, 7, 42, 255][run % 5];
        let outcome = async {
            let (cmd, expected) = bursty(run, code);
            let engine = bed.engine.clone();
            let sid = s.session_id.clone();
            let text = cmd.clone();
            let exec =
                tokio::spawn(async move { engine.exec(&sid, &text, ExecRequest::wait()).await });
            let rec =
                wait_started(&bed.engine, &s.session_id, &cmd, 1, Duration::from_secs(30)).await?;
            if bed.sshd.signal_connections(libc::SIGKILL) == 0 {
                bail!("no per-connection sshd to kill");
            }
            let killed_at = Instant::now();
            match tokio::time::timeout(RECOVERY, exec).await?? {
                Ok(done) if done.status.is_final() => {}
                Ok(_) => {}
                Err(e) if is_link_error(&e) => interrupted += 1,
                Err(e) => bail!(
                    "exec failed with {} ({}), not a link error",
                    e,
                    e.code.as_str()
                ),
            }
            let r = recover(&bed.engine, &s.session_id, &rec.command_id, RECOVERY).await?;
            check_exact(&bed.engine, &r.record, code, &expected).await?;
            Ok(killed_at.elapsed().as_millis() as f64)
        }
        .await;
        if let Some(ms) = report.record(run, outcome) {
            recovery_ms.push(ms);
        }
    }
    report.figure("interrupted_execs", interrupted);
    report.figure("recovery_ms_p50", percentile(&recovery_ms, 50.0));
    report.figure("recovery_ms_max", percentile(&recovery_ms, 100.0));
    report.finish();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sshd_killed_during_streaming_output() {
    let mut report = Report::new(
        "sshd_killed_streaming",
        "fault",
        "SIGKILL to every per-connection sshd process while a reader streams a command's stdout \
         by byte offset (read_output + wait_output, as the provider's turns do)",
        &[
            "the streamed bytes (concatenated by offset across the reconnect) equal the expected \
             output exactly",
            "exit code exact",
            "final record's stdout sha256 equal to the expected bytes",
        ],
    );
    let bed = Bed::start("kill-stream").await.expect("bed");
    let s = bed.session().await.expect("session");
    let mut link_errors = 0;
    let mut streamed_bytes = 0;
    for run in 0..repeats(3) {
        let code = [3, 0, 9][run % 3];
        let outcome = async {
            let line = "x".repeat(100);
            let cmd = format!(
                "for i in $(seq 1 80); do echo \"s{run}-$i-{line}\"; sleep 0.02; done; (exit {code})"
            );
            let expected: Vec<u8> = (1..=80)
                .flat_map(|i| format!("s{run}-{i}-{line}\n").into_bytes())
                .collect();
            let engine = bed.engine.clone();
            let sid = s.session_id.clone();
            let text = cmd.clone();
            let exec = tokio::spawn(async move {
                engine.exec(&sid, &text, ExecRequest::wait()).await
            });
            let rec =
                wait_started(&bed.engine, &s.session_id, &cmd, 1, Duration::from_secs(30)).await?;
            let cid = rec.command_id.clone();
            let mut got: Vec<u8> = Vec::new();
            let mut killed = false;
            let mut done = false;
            let deadline = Instant::now() + RECOVERY;
            loop {
                if Instant::now() > deadline {
                    bail!("streaming did not finish within {RECOVERY:?}");
                }
                let chunk = match bed
                    .engine
                    .read_output(&s.session_id, &cid, OutputStream::Stdout, got.len() as u64, 1 << 16)
                    .await
                {
                    Ok(c) => c,
                    Err(e) if is_link_error(&e) => {
                        link_errors += 1;
                        tokio::time::sleep(Duration::from_millis(300)).await;
                        continue;
                    }
                    Err(e) => bail!("read_output: {e}"),
                };
                let had = !chunk.is_empty();
                got.extend_from_slice(&chunk);
                if !killed && got.len() >= expected.len() / 4 {
                    if bed.sshd.signal_connections(libc::SIGKILL) == 0 {
                        bail!("no per-connection sshd to kill");
                    }
                    killed = true;
                }
                if done && !had {
                    break;
                }
                if had {
                    continue;
                }
                match bed
                    .engine
                    .wait_output(&s.session_id, &cid, got.len() as u64, 0, Duration::from_secs(2))
                    .await
                {
                    Ok(r) => done = r.status.is_final(),
                    Err(e) if is_link_error(&e) => {
                        link_errors += 1;
                        tokio::time::sleep(Duration::from_millis(300)).await;
                    }
                    Err(e) => bail!("wait_output: {e}"),
                }
            }
            if !killed {
                bail!("the output ended before the fault was injected");
            }
            if sha256_hex(&got) != sha256_hex(&expected) {
                bail!("streamed {} bytes, expected {} (sha256 differs)", got.len(), expected.len());
            }
            let _ = tokio::time::timeout(RECOVERY, exec).await?;
            let r = recover(&bed.engine, &s.session_id, &cid, RECOVERY).await?;
            check_exact(&bed.engine, &r.record, code, &expected).await?;
            Ok(got.len())
        }
        .await;
        if let Some(n) = report.record(run, outcome) {
            streamed_bytes += n;
        }
    }
    report.figure("link_errors_retried", link_errors);
    report.figure("bytes_streamed_total", streamed_bytes);
    report.finish();
}

/// Entries of `dir` whose name is `name`, with their size.
fn final_name_size(dir: &std::path::Path, name: &str) -> Option<u64> {
    std::fs::read_dir(dir)
        .ok()?
        .flatten()
        .find(|e| e.file_name() == name)
        .and_then(|e| e.metadata().ok())
        .map(|m| m.len())
}

/// Names in `dir` other than `name` (temporary leftovers of an interrupted transfer).
fn other_entries(dir: &std::path::Path, name: &str) -> Vec<String> {
    std::fs::read_dir(dir)
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n != name && !n.starts_with(".remote-runner"))
                .collect()
        })
        .unwrap_or_default()
}

/// A progress callback that kills the connections once `after` bytes are done.
fn killer(bed: &Bed, after: u64) -> (Arc<AtomicBool>, TransferOptions) {
    let fired = Arc::new(AtomicBool::new(false));
    let sshd = bed.sshd.clone();
    let flag = fired.clone();
    let progress = Arc::new(move |p: &TransferProgress| {
        if p.bytes_done >= after && !flag.swap(true, Ordering::SeqCst) {
            sshd.signal_connections(libc::SIGKILL);
        }
    });
    let options = TransferOptions {
        progress: Some(progress),
        ..TransferOptions::default()
    };
    (fired, options)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sshd_killed_during_file_transfers() {
    let mut report = Report::new(
        "sshd_killed_file_transfer",
        "fault",
        "SIGKILL to every per-connection sshd process from the transfer's progress callback once \
         1 MiB of a 48 MiB file is written (file put, then file get)",
        &[
            "the interrupted transfer fails with a link error, or completes",
            "the destination directory never holds a partial file under the final name",
            "a retry (reconnecting) succeeds and the file's sha256 equals the source",
        ],
    );
    let bed = Bed::start("kill-transfer").await.expect("bed");
    let s = bed.session().await.expect("session");
    let local = tempfile::tempdir().unwrap();
    let mut interrupted = 0;
    let mut leftovers = 0;
    let size = 48 << 20;
    for run in 0..repeats(2) {
        let outcome = async {
            let data = XorShift::new(run as u64 + 11).bytes(size);
            let want = sha256_hex(&data);
            // put
            let src = local.path().join(format!("src-{run}.bin"));
            std::fs::write(&src, &data)?;
            let name = format!("put-{run}.bin");
            let (fired, opts) = killer(&bed, 1 << 20);
            let first = bed.engine.file_put(&s.session_id, &src, &name, opts).await;
            match &first {
                Ok(_) => {}
                Err(e) if is_link_error(e) => interrupted += 1,
                Err(e) => bail!("put failed with {} ({})", e, e.code.as_str()),
            }
            if !fired.load(Ordering::SeqCst) {
                bail!("the put ended before the fault fired");
            }
            if let Some(n) = final_name_size(&bed.remote, &name)
                && first.is_err()
                && sha256_hex(&std::fs::read(bed.remote.join(&name))?) != want
            {
                bail!(
                    "a partial file ({n} bytes) is under the final name {name} after a failed put"
                );
            }
            leftovers += other_entries(&bed.remote, &name).len();
            retry(|| {
                bed.engine
                    .file_put(&s.session_id, &src, &name, TransferOptions::default())
            })
            .await?;
            if sha256_hex(&std::fs::read(bed.remote.join(&name))?) != want {
                bail!("remote file differs after the retried put");
            }
            // get
            let dest_dir = local.path().join(format!("get-{run}"));
            std::fs::create_dir(&dest_dir)?;
            let dest = dest_dir.join("got.bin");
            let (fired, opts) = killer(&bed, 1 << 20);
            let first = bed.engine.file_get(&s.session_id, &name, &dest, opts).await;
            match &first {
                Ok(_) => {}
                Err(e) if is_link_error(e) => interrupted += 1,
                Err(e) => bail!("get failed with {} ({})", e, e.code.as_str()),
            }
            if !fired.load(Ordering::SeqCst) {
                bail!("the get ended before the fault fired");
            }
            if first.is_err() && final_name_size(&dest_dir, "got.bin").is_some() {
                bail!("a file is under the final name got.bin after a failed get");
            }
            leftovers += other_entries(&dest_dir, "got.bin").len();
            retry(|| {
                bed.engine
                    .file_get(&s.session_id, &name, &dest, TransferOptions::default())
            })
            .await?;
            if sha256_hex(&std::fs::read(&dest)?) != want {
                bail!("local file differs after the retried get");
            }
            std::fs::remove_file(&src)?;
            std::fs::remove_file(bed.remote.join(&name))?;
            Ok(())
        }
        .await;
        report.record(run, outcome);
    }
    report.figure("file_mib", (size >> 20) as u64);
    report.figure("transfers_interrupted", interrupted);
    report.figure("temporary_leftovers_beside_final_names", leftovers);
    report.finish();
}

/// Retry a transfer on link errors (bounded).
async fn retry<T, F, Fut>(mut f: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = remote_runner_engine::Result<T>>,
{
    let deadline = Instant::now() + RECOVERY;
    loop {
        match f().await {
            Ok(v) => return Ok(v),
            Err(e) if is_link_error(&e) && Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(300)).await;
            }
            Err(e) => {
                return Err(anyhow!(
                    "retried transfer failed: {e} ({})",
                    e.code.as_str()
                ));
            }
        }
    }
}
