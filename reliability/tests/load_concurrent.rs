//! Load: 50 sessions on one machine driven concurrently from one process (one engine, one
//! connector), each running commands with output.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::anyhow;
use remote_runner_engine::engine::ExecRequest;
use remote_runner_reliability::bed::{Bed, check_exact};
use remote_runner_reliability::probe::channel_processes;
use remote_runner_reliability::report::Report;
use remote_runner_reliability::{full_mode, percentile};

const SESSIONS: usize = 50;
const MAX_SESSIONS: usize = 10;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_sessions_driven_concurrently() {
    let commands = if full_mode() { 5 } else { 2 };
    let mut report = Report::new(
        "load_50_sessions",
        "load",
        "50 sessions created and driven at once from one engine and one MachineConnector, each \
         running commands with output (`seq`, distinct exit codes); sshd MaxSessions 10",
        &[
            "every command's exit code and stdout (sha256) exact",
            "SSH connections (per-connection sshd processes) never above the pool's limit (4)",
            "channels in use per connection never above MaxSessions (10)",
        ],
    );
    let bed = Arc::new(Bed::start("load-50").await.expect("bed"));
    let stop = Arc::new(AtomicBool::new(false));
    let max_conns = Arc::new(AtomicUsize::new(0));
    let max_channels = Arc::new(AtomicUsize::new(0));
    let sampler = {
        let (bed, stop, mc, mch) = (
            bed.clone(),
            stop.clone(),
            max_conns.clone(),
            max_channels.clone(),
        );
        std::thread::spawn(move || {
            while !stop.load(Ordering::SeqCst) {
                let per = channel_processes(bed.sshd.listener_pid());
                mc.fetch_max(per.len(), Ordering::SeqCst);
                mch.fetch_max(per.iter().copied().max().unwrap_or(0), Ordering::SeqCst);
                std::thread::sleep(Duration::from_millis(50));
            }
        })
    };
    let started = Instant::now();
    let mut tasks = Vec::new();
    for i in 0..SESSIONS {
        let bed = bed.clone();
        tasks.push(tokio::spawn(async move {
            let s = bed.session().await?;
            let mut latencies = Vec::new();
            for k in 0..commands {
                let n = 200 + i * 10 + k;
                let code = ((i + k) % 5) as i32;
                let t = Instant::now();
                let rec = bed
                    .engine
                    .exec(
                        &s.session_id,
                        &format!("seq 1 {n}; (exit {code})"),
                        ExecRequest::wait(),
                    )
                    .await
                    .map_err(|e| anyhow!("session {i} command {k}: {e}"))?;
                latencies.push(t.elapsed().as_secs_f64() * 1000.0);
                let want: Vec<u8> = (1..=n)
                    .flat_map(|x| format!("{x}\n").into_bytes())
                    .collect();
                check_exact(&bed.engine, &rec, code, &want)
                    .await
                    .map_err(|e| anyhow!("session {i} command {k}: {e}"))?;
            }
            Ok::<_, anyhow::Error>(latencies)
        }));
    }
    let mut latencies = Vec::new();
    for (i, t) in tasks.into_iter().enumerate() {
        let outcome = match t.await {
            Ok(r) => r,
            Err(e) => Err(anyhow!("task panicked: {e}")),
        };
        if let Some(l) = report.record(i, outcome) {
            latencies.extend(l);
        }
    }
    let wall = started.elapsed();
    stop.store(true, Ordering::SeqCst);
    let _ = sampler.join();
    let conns = max_conns.load(Ordering::SeqCst);
    let channels = max_channels.load(Ordering::SeqCst);
    if conns > 4 {
        report.fail(format!(
            "{conns} SSH connections at once, above the pool limit of 4"
        ));
    }
    if channels > MAX_SESSIONS {
        report.fail(format!(
            "{channels} channels on one connection, above MaxSessions {MAX_SESSIONS}"
        ));
    }
    report.figure("sessions", SESSIONS);
    report.figure("commands_per_session", commands);
    report.figure("turn_latency_ms_p50", percentile(&latencies, 50.0).round());
    report.figure("turn_latency_ms_p99", percentile(&latencies, 99.0).round());
    report.figure("wall_seconds", (wall.as_secs_f64() * 10.0).round() / 10.0);
    report.figure("max_ssh_connections", conns);
    report.figure("max_channel_processes_per_connection", channels);
    report.finish();
}
