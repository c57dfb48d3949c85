//! Load: 8 processes racing `exec` on one session: exactly one is accepted each time (the others
//! get `busy`), and the store stays consistent.

use std::process::{Command, Stdio};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{Context, anyhow, bail};
use remote_runner_engine::store::Store;
use remote_runner_reliability::bed::{Bed, check_exact};
use remote_runner_reliability::repeats;
use remote_runner_reliability::report::Report;
use serde_json::{Value, json};

const ENGINE_CLIENT: &str = env!("CARGO_BIN_EXE_rr-reliability-engine");
const RACERS: usize = 8;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eight_processes_race_exec_on_one_session() {
    let mut report = Report::new(
        "race_8_processes_exec",
        "load",
        "8 separate processes (rr-reliability-engine: the engine call the CLI makes) each open \
         the same state dir and call exec on the same session at the same instant",
        &[
            "exactly one exec is accepted; the 7 others fail with busy",
            "the accepted command's exit code and stdout exact",
            "the store holds exactly one new command record per race (no refused racer's record \
             left), sequence numbers increasing, PRAGMA integrity_check = ok; numbers skipped \
             by refused racers are counted",
        ],
    );
    let bed = Bed::start("race").await.expect("bed");
    let s = bed.session().await.expect("session");
    let mut skipped_numbers = 0;
    for run in 0..repeats(3) {
        let gaps = &mut skipped_numbers;
        let outcome = async {
            let before = bed
                .engine
                .command_list(&s.session_id)
                .map_err(|e| anyhow!("{e}"))?;
            let at = SystemTime::now().duration_since(UNIX_EPOCH)?.as_millis() as u64 + 3000;
            let mut children = Vec::new();
            for r in 0..RACERS {
                let req = json!({
                    "state_dir": bed.state.path(),
                    "machine": bed.machine,
                    "op": "exec",
                    "session_id": s.session_id,
                    "command": format!("sleep 2; echo racer-{run}-{r}"),
                    "start_at_ms": at,
                });
                children.push(
                    Command::new(ENGINE_CLIENT)
                        .env("RR_ENGINE_REQUEST", req.to_string())
                        .stdin(Stdio::null())
                        .stdout(Stdio::piped())
                        .stderr(Stdio::null())
                        .spawn()
                        .context("spawn a racer")?,
                );
            }
            let mut accepted = Vec::new();
            let mut busy = 0;
            for c in children {
                let out = tokio::task::spawn_blocking(move || c.wait_with_output()).await??;
                let v: Value = serde_json::from_slice(&out.stdout).with_context(|| {
                    format!("racer output {:?}", String::from_utf8_lossy(&out.stdout))
                })?;
                if v["ok"] == true {
                    accepted.push(v["record"].clone());
                } else if v["code"] == "busy" {
                    busy += 1;
                } else {
                    bail!("a racer failed with {}", v);
                }
            }
            if accepted.len() != 1 || busy != RACERS - 1 {
                bail!(
                    "{} accepted, {busy} busy (expected 1 and {})",
                    accepted.len(),
                    RACERS - 1
                );
            }
            let cid = accepted[0]["command_id"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            let text = accepted[0]["command"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            let rec = bed
                .engine
                .command_show(&s.session_id, &cid)
                .await
                .map_err(|e| anyhow!("command_show: {e}"))?;
            let who = text.rsplit("echo ").next().unwrap_or_default();
            check_exact(&bed.engine, &rec, 0, format!("{who}\n").as_bytes()).await?;
            let after = bed
                .engine
                .command_list(&s.session_id)
                .map_err(|e| anyhow!("{e}"))?;
            if after.len() != before.len() + 1 {
                bail!(
                    "{} command records added, expected 1",
                    after.len() - before.len()
                );
            }
            // Order is kept (strictly increasing); a refused racer's record is removed, so its
            // number is skipped: counted, not hidden (see the report).
            for w in after.windows(2) {
                if w[1].seq <= w[0].seq {
                    bail!(
                        "sequence numbers out of order: {} after {}",
                        w[1].seq,
                        w[0].seq
                    );
                }
            }
            let racers_left = after
                .iter()
                .filter(|c| c.command.contains(&format!("echo racer-{run}-")))
                .count();
            if racers_left != 1 {
                bail!("{racers_left} racer records remain, expected the winner's only");
            }
            let winner_seq = after.last().map(|c| c.seq).unwrap_or(0);
            let prev_seq = before.last().map(|c| c.seq).unwrap_or(0);
            *gaps += (winner_seq - prev_seq - 1) as usize;
            let store = Store::open(bed.state.path()).map_err(|e| anyhow!("{e}"))?;
            let check: String = store
                .conn()
                .query_row("PRAGMA integrity_check", [], |r| r.get(0))
                .map_err(|e| anyhow!("integrity_check: {e}"))?;
            if check != "ok" {
                bail!("integrity_check: {check}");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
            Ok(())
        }
        .await;
        report.record(run, outcome);
    }
    report.figure("racers", RACERS);
    report.figure("sequence_numbers_skipped", skipped_numbers);
    report.figure(
        "finding",
        "exec stores the command record before taking the session lock and deletes it when \
         refused: the store stays consistent (one record per race, order kept, integrity ok), \
         but a refused racer can take a sequence number, so the winner's `seq` may skip numbers, \
         and a concurrent `command list` can briefly show a refused racer as running",
    );
    report.finish();
}
