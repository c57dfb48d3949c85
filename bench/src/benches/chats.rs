//! `chats`: a BotMux deployment's crowd on one machine account. N providers (100 in a full run)
//! started at once against the same sshd and login user, each doing hello, start, five turns,
//! cancel and SIGTERM with stdin open (the reliability suite's chat driver, terminal view and
//! kept control clients on, as by default). Reported: how many completed every step, start and
//! turn latencies (p50 / p90 in the table, p99 in the notes), the most SSH connections at once,
//! each provider's peak RSS, and what was left on the account afterwards.
//!
//! Not a timing test: it fails (the run reports it could not run) only when a chat did not
//! complete or something was left behind, which is what it shows.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use remote_runner_reliability::chats::{
    self, Chat, account, describe_failures, leftovers, processes_of, quantile_ms,
};
use remote_runner_reliability::probe::channel_processes;
use remote_runner_testkit::TEST_USER;

use crate::Ctx;
use crate::provider_host::provider_binary;
use crate::report::{BenchResult, Measurement, Side};

pub fn run(ctx: &Ctx) -> Result<BenchResult> {
    // RR_BENCH_CHATS=N times another crowd size (how the figures grow with it).
    let n = std::env::var("RR_BENCH_CHATS")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|n| *n > 0)
        .unwrap_or(ctx.cfg.pick(100, 20));
    let bed = ctx.bed;
    let remote = bed.remote_dir("chats")?;
    let state = bed.local_dir("chats-state")?;
    let program = provider_binary()?;
    let (uid, home) = account(TEST_USER)?;
    let env = vec![
        ("REMOTE_RUNNER_STATE_DIR", state.display().to_string()),
        ("REMOTE_RUNNER_HOST", "127.0.0.1".to_string()),
        ("REMOTE_RUNNER_PORT", bed.sshd.port.to_string()),
        ("REMOTE_RUNNER_USER", bed.sshd.user().to_string()),
        ("REMOTE_RUNNER_KEY_PATH", bed.key().display().to_string()),
        (
            "REMOTE_RUNNER_KNOWN_HOSTS",
            bed.sshd.known_hosts.display().to_string(),
        ),
        ("REMOTE_RUNNER_REMOTE_CWD", remote.display().to_string()),
        ("SSH_AUTH_SOCK", String::new()),
    ];
    let plan: Vec<Chat> = (0..n)
        .map(|index| Chat {
            program: program.clone(),
            env: env.clone(),
            cwd: bed.scratch.path().to_path_buf(),
            index,
            turns: 5,
            cancel: true,
            gate: None,
        })
        .collect();

    // The most per-connection sshd processes seen at once.
    let stop = Arc::new(AtomicBool::new(false));
    let peak_connections = Arc::new(AtomicUsize::new(0));
    let sampler = {
        let (stop, peak) = (stop.clone(), peak_connections.clone());
        let listener = bed.sshd.listener_pid();
        std::thread::spawn(move || {
            while !stop.load(Ordering::SeqCst) {
                let n = channel_processes(listener).len();
                peak.fetch_max(n, Ordering::SeqCst);
                std::thread::sleep(Duration::from_millis(100));
            }
        })
    };
    // RR_BENCH_CHATS_SPREAD_S=S starts them evenly over S seconds instead of at once.
    let spread = std::env::var("RR_BENCH_CHATS_SPREAD_S")
        .ok()
        .and_then(|v| v.parse::<f64>().ok())
        .map_or(Duration::ZERO, Duration::from_secs_f64);
    let started = Instant::now();
    let (outcomes, servers) = chats::run_chats_watching(plan, spread, |sessions| {
        // Every chat between its turns and its close: the tmux servers of their sessions.
        let all = processes_of(uid);
        sessions
            .iter()
            .filter(|s| {
                all.iter()
                    .any(|(_, c)| c.contains(" new-session ") && c.contains(&format!("-s {s} ")))
            })
            .count()
    });
    let wall = started.elapsed();
    stop.store(true, Ordering::SeqCst);
    let _ = sampler.join();

    let done = outcomes.iter().filter(|o| o.completed()).count();
    let starts: Vec<Duration> = outcomes.iter().filter_map(|o| o.start).collect();
    let turns: Vec<Duration> = outcomes.iter().flat_map(|o| o.turns.clone()).collect();
    let rss: Vec<u64> = outcomes.iter().filter_map(|o| o.peak_rss_kib).collect();
    let sessions: BTreeSet<String> = outcomes
        .iter()
        .filter_map(|o| o.session_id.clone())
        .collect();
    let root = home.join(".local/state/remote-runner");
    let left = {
        let end = Instant::now() + Duration::from_secs(15);
        loop {
            let left = leftovers(uid, &root, &sessions);
            if left.is_empty() || Instant::now() > end {
                break left;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    };

    let mut result = BenchResult::new(
        "chats",
        format!(
            "{n} BotMux chats started {} on one machine account (one provider process and SSH \
             connection each, terminal view on): hello, start, 5 turns, cancel, SIGTERM with \
             stdin open",
            if spread.is_zero() {
                "at once".to_string()
            } else {
                format!("over {:.0} s", spread.as_secs_f64())
            }
        ),
    );
    result.push(Measurement::new(
        "start -> ready, every chat",
        Side::Ours,
        &starts,
    ));
    result.push(Measurement::new(
        "turn (printf) -> final, every turn",
        Side::Ours,
        &turns,
    ));
    let p99 = |v: &[Duration]| quantile_ms(v, 0.99).map_or("-".into(), |x| format!("{x:.0} ms"));
    result.notes.push(format!(
        "completed every step: {done} of {n} chats in {:.1} s; start p99 {}, turn p99 {} \
         ({} turns); the host's handshake bound is 15 s",
        wall.as_secs_f64(),
        p99(&starts),
        p99(&turns),
        turns.len()
    ));
    result.notes.push(format!(
        "SSH connections at once: at most {}; sessions with a tmux server of their own while \
         every chat was live: {servers} of {}",
        peak_connections.load(Ordering::SeqCst),
        sessions.len()
    ));
    if !rss.is_empty() {
        let mean = rss.iter().sum::<u64>() as f64 / rss.len() as f64 / 1024.0;
        let max = *rss.iter().max().unwrap_or(&0) as f64 / 1024.0;
        result.notes.push(format!(
            "provider peak RSS per chat: mean {mean:.1} MiB, max {max:.1} MiB"
        ));
    }
    result.notes.push(format!(
        "left on the account after every chat closed: {} processes, {} session directories",
        left.processes.len(),
        left.directories.len()
    ));
    if done != n {
        bail!(
            "{done} of {n} chats completed every step: {}",
            describe_failures(&outcomes, 5)
        );
    }
    if !left.is_empty() {
        bail!("the chats left behind: {left:?}");
    }
    Ok(result)
}
