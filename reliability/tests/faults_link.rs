//! Link faults with a short keepalive budget (1 s x 2 through ConnectOptions): the server frozen
//! with SIGSTOP briefly and for longer than the budget, and all traffic dropped by nftables in a
//! network namespace, then restored. The running command's result is recovered exactly.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use remote_runner_engine::engine::{CommandRecord, ExecRequest};
use remote_runner_reliability::bed::{
    Bed, check_exact, is_link_error, keepalive_options, machine, recover, wait_started,
};
use remote_runner_reliability::netns::{self, NetNs};
use remote_runner_reliability::report::Report;
use remote_runner_reliability::{percentile, repeats};
use remote_runner_testkit::Sshd;

const KEEPALIVE: Duration = Duration::from_secs(1);
const KEEPALIVE_MAX: usize = 2;
/// How long the server stays frozen in the long-freeze fault (well over the keepalive budget
/// plus the command's own 3 s).
const FREEZE: Duration = Duration::from_secs(12);
const RECOVERY: Duration = Duration::from_secs(120);

fn command(run: usize, code: i32, sleep: f64) -> (String, Vec<u8>) {
    let cmd = format!("echo start-{run}; sleep {sleep}; seq 1 500; (exit {code})");
    let mut out = format!("start-{run}\n");
    for i in 1..=500 {
        out.push_str(&format!("{i}\n"));
    }
    (cmd, out.into_bytes())
}

/// Start `cmd` in a task; return the task and the stored record once its output began.
async fn launch(
    bed: &Bed,
    sid: &str,
    cmd: &str,
) -> Result<(
    tokio::task::JoinHandle<remote_runner_engine::Result<CommandRecord>>,
    CommandRecord,
)> {
    let engine = bed.engine.clone();
    let (s, text) = (sid.to_string(), cmd.to_string());
    let task = tokio::spawn(async move { engine.exec(&s, &text, ExecRequest::wait()).await });
    let rec = wait_started(&bed.engine, sid, cmd, 1, Duration::from_secs(30)).await?;
    Ok((task, rec))
}

/// How the interrupted exec ended: `Some(elapsed)` for a link error, `None` for a record.
async fn exec_outcome(
    task: tokio::task::JoinHandle<remote_runner_engine::Result<CommandRecord>>,
    since: Instant,
) -> Result<Option<Duration>> {
    match tokio::time::timeout(RECOVERY, task).await?? {
        Ok(_) => Ok(None),
        Err(e) if is_link_error(&e) => Ok(Some(since.elapsed())),
        Err(e) => bail!(
            "exec failed with {} ({}), not a link error",
            e,
            e.code.as_str()
        ),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_frozen_briefly_then_resumed() {
    let mut report = Report::new(
        "sshd_frozen_briefly",
        "fault",
        "SIGSTOP to every per-connection sshd process for 1 s (inside the 1 s x 2 keepalive \
         budget), then SIGCONT, while a foreground command runs",
        &[
            "the exec returns the final record, or a link error and command_wait recovers it",
            "exit code exact",
            "stdout sha256 equal to the expected bytes",
        ],
    );
    let sshd = Arc::new(Sshd::start().expect("sshd"));
    let bed = Bed::on(
        sshd,
        "freeze-short",
        keepalive_options(KEEPALIVE, KEEPALIVE_MAX),
    )
    .await
    .expect("bed");
    let s = bed.session().await.expect("session");
    let mut link_errors = 0;
    for run in 0..repeats(2) {
        let code = [0, 6][run % 2];
        let outcome = async {
            let (cmd, expected) = command(run, code, 2.5);
            let (task, rec) = launch(&bed, &s.session_id, &cmd).await?;
            if bed.sshd.signal_connections(libc::SIGSTOP) == 0 {
                bail!("no per-connection sshd to freeze");
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
            bed.sshd.signal_connections(libc::SIGCONT);
            if exec_outcome(task, Instant::now()).await?.is_some() {
                link_errors += 1;
            }
            let r = recover(&bed.engine, &s.session_id, &rec.command_id, RECOVERY).await?;
            check_exact(&bed.engine, &r.record, code, &expected).await
        }
        .await;
        bed.sshd.signal_connections(libc::SIGCONT);
        report.record(run, outcome);
    }
    report.figure("keepalive", "1 s x 2");
    report.figure("execs_that_saw_a_link_error", link_errors);
    report.finish();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_frozen_beyond_the_keepalive_budget() {
    let mut report = Report::new(
        "sshd_frozen_beyond_keepalive",
        "fault",
        "SIGSTOP to every per-connection sshd process for 12 s (far beyond the 1 s x 2 keepalive \
         budget), then SIGCONT, while a foreground command (3 s) runs",
        &[
            "the frozen link is detected: the exec ends while the server is still frozen, with \
             the final record (reconnected on a new connection) or connection_lost",
            "command_wait returns the final record",
            "exit code exact",
            "stdout sha256 equal to the expected bytes",
        ],
    );
    let sshd = Arc::new(Sshd::start().expect("sshd"));
    let bed = Bed::on(
        sshd,
        "freeze-long",
        keepalive_options(KEEPALIVE, KEEPALIVE_MAX),
    )
    .await
    .expect("bed");
    let s = bed.session().await.expect("session");
    let mut return_ms = Vec::new();
    let mut link_errors = 0;
    for run in 0..repeats(2) {
        let code = [2, 0][run % 2];
        let outcome = async {
            let (cmd, expected) = command(run, code, 3.0);
            let (task, rec) = launch(&bed, &s.session_id, &cmd).await?;
            if bed.sshd.signal_connections(libc::SIGSTOP) == 0 {
                bail!("no per-connection sshd to freeze");
            }
            let frozen = Instant::now();
            // Without detection the exec would hang on the frozen link until SIGCONT: it must
            // end (recovered on a new connection, or with connection_lost) while still frozen.
            let ended = tokio::time::timeout(FREEZE, task).await;
            let returned = frozen.elapsed();
            bed.sshd.signal_connections(libc::SIGCONT);
            let Ok(joined) = ended else {
                bail!("the exec did not end during a {FREEZE:?} freeze: the frozen link was not detected");
            };
            match joined? {
                Ok(_) => {}
                Err(e) if is_link_error(&e) => link_errors += 1,
                Err(e) => bail!("exec failed with {} ({}), not a link error", e, e.code.as_str()),
            }
            let r = recover(&bed.engine, &s.session_id, &rec.command_id, RECOVERY).await?;
            check_exact(&bed.engine, &r.record, code, &expected).await?;
            Ok(returned.as_millis() as f64)
        }
        .await;
        bed.sshd.signal_connections(libc::SIGCONT);
        if let Some(ms) = report.record(run, outcome) {
            return_ms.push(ms);
        }
    }
    report.figure("freeze_seconds", FREEZE.as_secs());
    report.figure("command_sleep_seconds", 3);
    report.figure("execs_ended_with_connection_lost", link_errors);
    report.figure(
        "exec_returned_after_freeze_ms_p50",
        percentile(&return_ms, 50.0),
    );
    report.figure(
        "exec_returned_after_freeze_ms_max",
        percentile(&return_ms, 100.0),
    );
    report.finish();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn traffic_dropped_in_a_network_namespace_then_restored() {
    let mut report = Report::new(
        "netns_traffic_dropped",
        "fault",
        "an sshd inside a network namespace the test creates (veth pair, 10.203.x.0/30); an \
         nftables rule in the namespace drops every packet to port 22 for 6 s, then the chain is \
         flushed; keepalive 1 s x 2",
        &[
            "the exec ends with a link error (or the final record)",
            "after the heal, command_wait reconnects and returns the final record",
            "exit code exact",
            "stdout sha256 equal to the expected bytes",
        ],
    );
    if let Err(why) = netns::available() {
        report.skip(&why);
        return;
    }
    let sshd = Arc::new(Sshd::start().expect("sshd"));
    let ns = NetNs::with_sshd(&sshd).expect("network namespace");
    let remote = sshd.remote_dir("netns").expect("remote dir");
    let m = machine(&ns.addr, 22, &sshd, &ns.known_hosts, &remote);
    let bed = Bed::with_machine(
        sshd.clone(),
        remote,
        m,
        keepalive_options(KEEPALIVE, KEEPALIVE_MAX),
    )
    .expect("bed");
    let s = bed.session().await.expect("session over the namespace");
    let mut recovery_ms = Vec::new();
    let mut link_errors = 0;
    for run in 0..repeats(2) {
        let code = [4, 0][run % 2];
        let outcome = async {
            let (cmd, expected) = command(run, code, 3.0);
            let (task, rec) = launch(&bed, &s.session_id, &cmd).await?;
            ns.drop_traffic()?;
            let dropped = Instant::now();
            tokio::time::sleep(Duration::from_secs(6)).await;
            ns.heal()?;
            let healed = Instant::now();
            if exec_outcome(task, dropped).await?.is_some() {
                link_errors += 1;
            }
            let r = recover(&bed.engine, &s.session_id, &rec.command_id, RECOVERY).await?;
            check_exact(&bed.engine, &r.record, code, &expected).await?;
            Ok(healed.elapsed().as_millis() as f64)
        }
        .await;
        let _ = ns.heal();
        if let Some(ms) = report.record(run, outcome) {
            recovery_ms.push(ms);
        }
    }
    report.figure("drop_seconds", 6);
    report.figure("execs_that_saw_a_link_error", link_errors);
    report.figure("result_after_heal_ms_p50", percentile(&recovery_ms, 50.0));
    report.figure("result_after_heal_ms_max", percentile(&recovery_ms, 100.0));
    drop(bed);
    drop(ns);
    report.finish();
}
