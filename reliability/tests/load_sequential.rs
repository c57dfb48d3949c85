//! Load: many sequential commands on one session (1,000 with --full, 100 in CI): no growth in
//! open channels, file descriptors, remote processes or provider memory. Alone in its test
//! binary so that no other test shares the process being measured.

use std::time::Duration;

use anyhow::{anyhow, bail};
use remote_runner_engine::engine::ExecRequest;
use remote_runner_reliability::bed::Bed;
use remote_runner_reliability::probe::{channel_processes, descendants, fd_count, rss_kib};
use remote_runner_reliability::report::Report;
use remote_runner_reliability::{full_mode, percentile};
use serde_json::json;

#[derive(Debug, Clone, Copy, PartialEq)]
struct Usage {
    fds: usize,
    rss_kib: u64,
    connections: usize,
    channels: usize,
    remote_processes: usize,
}

fn usage(bed: &Bed) -> Usage {
    let per = channel_processes(bed.sshd.listener_pid());
    // The remote side: everything below the bed's tmux server and below the sshd listener.
    let tmux = bed
        .tmux_server_pid()
        .map(|p| descendants(p).len() + 1)
        .unwrap_or(0);
    Usage {
        fds: fd_count(),
        rss_kib: rss_kib(),
        connections: per.len(),
        channels: per.iter().sum(),
        remote_processes: tmux + descendants(bed.sshd.listener_pid()).len(),
    }
}

fn as_json(u: &Usage) -> serde_json::Value {
    json!({"fds": u.fds, "rss_kib": u.rss_kib, "ssh_connections": u.connections,
           "channels": u.channels, "remote_processes": u.remote_processes})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sequential_commands_leak_nothing() {
    let total = if full_mode() { 1000 } else { 100 };
    let mut report = Report::new(
        "load_sequential_commands",
        "load",
        "commands run one after another on one session (`echo <i>; (exit i % 4)`), after 60 \
         warm-up commands; resources measured before and after (idle, 1 s settle)",
        &[
            "every exit code and stdout exact",
            "file descriptors (/proc/self/fd) do not grow",
            "SSH connections and open channels do not grow",
            "remote processes (tmux server tree + sshd tree) do not grow",
            "VmRSS grows by less than 16 MiB",
        ],
    );
    let bed = Bed::start("load-seq").await.expect("bed");
    let s = bed.session().await.expect("session");
    // Past the first pruning of old command directories (every 50th command), which runs
    // beside a command: the transport's control processes (at most 3) reach their working
    // number before the baseline is taken.
    for i in 0..60 {
        bed.engine
            .exec(
                &s.session_id,
                &format!("echo warm-{i}"),
                ExecRequest::wait(),
            )
            .await
            .expect("warm-up");
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let start = usage(&bed);
    let mut latencies = Vec::new();
    for i in 0..total {
        let outcome = async {
            let code = (i % 4) as i32;
            let t = std::time::Instant::now();
            let rec = bed
                .engine
                .exec(
                    &s.session_id,
                    &format!("echo {i}; (exit {code})"),
                    ExecRequest::wait(),
                )
                .await
                .map_err(|e| anyhow!("exec: {e}"))?;
            latencies.push(t.elapsed().as_secs_f64() * 1000.0);
            if rec.exit_code != Some(code) || rec.stdout != format!("{i}\n") {
                bail!("got exit {:?} stdout {:?}", rec.exit_code, rec.stdout);
            }
            Ok(())
        }
        .await;
        report.record(i, outcome);
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let end = usage(&bed);
    if end.fds > start.fds {
        report.fail(format!(
            "file descriptors grew: {} -> {}",
            start.fds, end.fds
        ));
    }
    if end.connections > start.connections || end.channels > start.channels {
        report.fail(format!(
            "connections/channels grew: {}/{} -> {}/{}",
            start.connections, start.channels, end.connections, end.channels
        ));
    }
    if end.remote_processes > start.remote_processes {
        report.fail(format!(
            "remote processes grew: {} -> {}",
            start.remote_processes, end.remote_processes
        ));
    }
    if end.rss_kib > start.rss_kib + 16 * 1024 {
        report.fail(format!(
            "VmRSS grew: {} -> {} KiB",
            start.rss_kib, end.rss_kib
        ));
    }
    report.figure("commands", total);
    report.figure("start", as_json(&start));
    report.figure("end", as_json(&end));
    report.figure("latency_ms_p50", percentile(&latencies, 50.0).round());
    report.figure("latency_ms_p99", percentile(&latencies, 99.0).round());
    report.finish();
}
