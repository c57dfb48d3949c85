//! Disk full on the local state dir: a 4 MiB tmpfs mounted by the test as the state dir. A
//! command whose output cannot be copied, and a command that cannot even be recorded, fail with
//! a clear error; the store is not corrupted (reopened and read, `PRAGMA integrity_check`), and
//! once space is freed the command's result is recovered exactly.

use std::time::Duration;

use anyhow::{anyhow, bail};
use remote_runner_engine::ErrorCode;
use remote_runner_engine::engine::{EngineOptions, ExecRequest};
use remote_runner_engine::store::Store;
use remote_runner_reliability::bed::{check_exact, connect_options, machine, open_engine, recover};
use remote_runner_reliability::report::Report;
use remote_runner_reliability::tmpfs::Tmpfs;
use remote_runner_reliability::{is_root, repeats};
use remote_runner_testkit::Sshd;

/// Fill the filesystem of `dir` with a file until writes fail, then give back `leave` bytes;
/// returns the file.
fn fill(dir: &std::path::Path, name: &str, leave: u64) -> std::path::PathBuf {
    use std::io::Write;
    let path = dir.join(name);
    let mut f = std::fs::File::create(&path).expect("filler");
    let block = vec![0u8; 4096];
    while f.write_all(&block).is_ok() {}
    let len = f.metadata().map(|m| m.len()).unwrap_or(0);
    let _ = f.set_len(len.saturating_sub(leave));
    let _ = f.sync_all();
    path
}

fn expected(n: usize) -> Vec<u8> {
    (1..=n)
        .flat_map(|i| format!("{i}\n").into_bytes())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_state_dir_disk_full() {
    let mut report = Report::new(
        "disk_full_state_dir",
        "fault",
        "the state dir is a 4 MiB tmpfs mounted by the test; a filler file takes every free \
         block, then commands run (one with 589 KB of output, 256 KiB left free, one that must be recorded)",
        &[
            "each failing call returns a clear error (code io or store, the message names the \
             full disk or ENOSPC), no panic",
            "the store reopens in a new engine: sessions and commands read back, PRAGMA \
             integrity_check = ok",
            "after the filler is removed, the big command's result is recovered: exit code \
             exact, stdout sha256 exact",
        ],
    );
    if !is_root() {
        report.skip("not root: mounting a tmpfs needs root (CI runs as root)");
        return;
    }
    let sshd = Sshd::start().expect("sshd");
    let remote = sshd.remote_dir("disk-full").unwrap();
    let m = machine("127.0.0.1", sshd.port, &sshd, &sshd.known_hosts, &remote);
    let options = EngineOptions {
        tmux_socket: format!("rrrel-disk-{}", std::process::id()),
        ..EngineOptions::default()
    };
    let mut codes = Vec::new();
    for run in 0..repeats(2) {
        let outcome = async {
            let fs = Tmpfs::mount("4m")?;
            let state = fs.path().join("state");
            let engine = open_engine(&state, &m, &connect_options(), &options)?;
            let s = engine
                .create_session(&m, None)
                .await
                .map_err(|e| anyhow!("create_session: {e}"))?;
            let ok = engine
                .exec(&s.session_id, "echo before", ExecRequest::wait())
                .await
                .map_err(|e| anyhow!("exec before the disk is full: {e}"))?;
            check_exact(
                &engine,
                &ok,
                0,
                b"echo before\n".strip_prefix(b"echo ").unwrap(),
            )
            .await?;
            // 1: room for the record, not for the output copy.
            let filler = fill(fs.path(), "filler", 256 << 10);
            let big = "seq 1 100000; (exit 3)";
            let err = match engine.exec(&s.session_id, big, ExecRequest::wait()).await {
                Ok(rec) => bail!("exec with a full disk succeeded: {}", rec.status.as_str()),
                Err(e) => e,
            };
            eprintln!("disk full, output copy: {} ({})", err, err.code.as_str());
            let clear = |e: &remote_runner_engine::Error| {
                matches!(e.code, ErrorCode::Io | ErrorCode::Store)
                    && (e.message.contains("space") || e.message.contains("full"))
            };
            if !clear(&err) {
                bail!(
                    "unclear error with a full disk: {} ({})",
                    err,
                    err.code.as_str()
                );
            }
            codes.push(err.code.as_str().to_string());
            // 2: no room at all: a command that cannot even be recorded.
            let filler2 = fill(fs.path(), "filler2", 0);
            let err2 = engine
                .exec(&s.session_id, "echo unrecorded", ExecRequest::wait())
                .await
                .err();
            if let Some(e) = &err2 {
                if !clear(e) && e.code != ErrorCode::Busy {
                    bail!(
                        "unclear error for the second command: {} ({})",
                        e,
                        e.code.as_str()
                    );
                }
                codes.push(e.code.as_str().to_string());
            }
            drop(engine);
            // The store reopens and reads back while the disk is still full.
            let reopened = open_engine(&state, &m, &connect_options(), &options)?;
            let sessions = reopened
                .session_list()
                .map_err(|e| anyhow!("session_list: {e}"))?;
            if !sessions.iter().any(|x| x.session_id == s.session_id) {
                bail!("the session record is gone after the disk-full errors");
            }
            let commands = reopened
                .command_list(&s.session_id)
                .map_err(|e| anyhow!("command_list: {e}"))?;
            if commands.first().map(|c| c.command.as_str()) != Some("echo before") {
                bail!("the first command record is missing or changed");
            }
            if commands.iter().any(|c| c.command == "echo unrecorded") {
                bail!("a command that failed to be recorded is in the store");
            }
            let store = Store::open(&state).map_err(|e| anyhow!("Store::open: {e}"))?;
            let check: String = store
                .conn()
                .query_row("PRAGMA integrity_check", [], |r| r.get(0))
                .map_err(|e| anyhow!("integrity_check: {e}"))?;
            if check != "ok" {
                bail!("integrity_check: {check}");
            }
            // Space is back: the big command's result is recovered exactly.
            std::fs::remove_file(&filler)?;
            std::fs::remove_file(&filler2)?;
            let rec = commands
                .iter()
                .find(|c| c.command == big)
                .ok_or_else(|| anyhow!("the big command was not recorded"))?;
            let r = recover(
                &reopened,
                &s.session_id,
                &rec.command_id,
                Duration::from_secs(120),
            )
            .await?;
            check_exact(&reopened, &r.record, 3, &expected(100000)).await?;
            let _ = reopened.destroy(&s.session_id).await;
            Ok(())
        }
        .await;
        report.record(run, outcome);
    }
    remote_runner_reliability::bed::kill_tmux_server(&options.tmux_socket);
    codes.sort();
    codes.dedup();
    report.figure("error_codes_seen", codes);
    report.figure("tmpfs_size", "4m");
    report.finish();
}
