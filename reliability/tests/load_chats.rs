//! Load: many chats at once on one machine account, as a BotMux deployment on a shared machine
//! runs them: each chat a provider (its own SSH connection, the terminal view and kept control
//! clients on, as by default) doing hello, start, five turns, cancel and SIGTERM with stdin open;
//! a quarter closed by SIGTERM alone (the session kept for a later resume). Then a tmux server
//! killed under a running chat costs that chat's session only.
//!
//! The suite runs 24 chats; `RR_RELIABILITY_FULL=1` runs 100 (the benchmark's `chats` section
//! times the same driver at 100).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Result, anyhow, bail};
use remote_runner_conformance::process::Spawn;
use remote_runner_conformance::script::ScriptHost;
use remote_runner_reliability::chats::{
    self, Chat, Leftovers, account, describe_failures, leftovers, processes_of, quantile_ms,
};
use remote_runner_reliability::full_mode;
use remote_runner_reliability::report::Report;
use remote_runner_testkit::{Sshd, TEST_USER};
use serde_json::json;

const PROVIDER: &str = env!("CARGO_BIN_EXE_rr-reliability-provider");

/// The test user's state root on the machine (`${XDG_STATE_HOME:-~/.local/state}/remote-runner`).
fn state_root(home: &Path) -> PathBuf {
    home.join(".local/state/remote-runner")
}

fn chat_plan(sshd: &Sshd, state: &Path, cwd: &Path, scratch: &Path, n: usize) -> Vec<Chat> {
    (0..n)
        .map(|index| Chat {
            program: PathBuf::from(PROVIDER),
            env: sshd.provider_env(state, cwd),
            cwd: scratch.to_path_buf(),
            index,
            turns: 5,
            // Every fourth chat is closed by SIGTERM alone: its session kept for a resume.
            cancel: index % 4 != 3,
            gate: None,
        })
        .collect()
}

/// Wait (bounded) until nothing of `sessions` is left on the account; what is left then.
fn settled_leftovers(uid: u32, root: &Path, sessions: &BTreeSet<String>) -> Leftovers {
    let end = Instant::now() + Duration::from_secs(15);
    loop {
        let left = leftovers(uid, root, sessions);
        if left.is_empty() || Instant::now() > end {
            return left;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn a_crowd_of_chats_all_complete_and_leave_nothing() {
    let n = if full_mode() { 100 } else { 24 };
    let mut report = Report::new(
        &format!("load_{n}_chats"),
        "load",
        &format!(
            "{n} providers started at once on one machine account (one sshd, one login user, one \
             local state dir), each doing hello, start, 5 turns, cancel and SIGTERM with stdin \
             open; every fourth closed by SIGTERM alone"
        ),
        &[
            "every chat completes every step: hello and ready within the host's 15 s bound, \
             every turn's final with its exact output",
            "after the close, no process of the account names a closed chat's session (tmux \
             server, control client, shell) and no session directory remains",
            "a chat closed by SIGTERM alone keeps its session but no control client",
        ],
    );
    let sshd = Sshd::start().expect("sshd test bed");
    let (uid, home) = account(TEST_USER).expect("the test user");
    let root = state_root(&home);
    let scratch = tempfile::tempdir().unwrap();
    let state = scratch.path().join("state");
    let cwd = sshd.remote_dir("chats").unwrap();
    let plan = chat_plan(&sshd, &state, &cwd, scratch.path(), n);
    let cancelled: BTreeSet<usize> = plan.iter().filter(|c| c.cancel).map(|c| c.index).collect();
    let started = Instant::now();
    let (all, servers) = chats::run_chats_watching(plan, Duration::ZERO, |sessions| {
        // While every chat is between its start and its close: the tmux server of each session.
        sessions
            .iter()
            .map(|s| (s.clone(), server_of(uid, s)))
            .collect::<Vec<_>>()
    });
    let wall = started.elapsed();
    let (closed, kept): (Vec<_>, Vec<_>) = all.iter().partition(|o| cancelled.contains(&o.index));
    let done = all.iter().filter(|o| o.completed()).count();
    report.record(
        0,
        if done == n {
            Ok(())
        } else {
            Err(anyhow!(
                "{done} of {n} chats completed every step; {}",
                describe_failures(&all, 5)
            ))
        },
    );
    let starts: Vec<Duration> = all.iter().filter_map(|o| o.start).collect();
    let turns: Vec<Duration> = all.iter().flat_map(|o| o.turns.clone()).collect();
    report.figure("chats", n);
    report.figure("completed", done);
    report.figure("wall_seconds", (wall.as_secs_f64() * 10.0).round() / 10.0);
    report.figure("start_ms_p50", quantile_ms(&starts, 0.5).map(f64::round));
    report.figure("start_ms_p99", quantile_ms(&starts, 0.99).map(f64::round));
    report.figure("turn_ms_p50", quantile_ms(&turns, 0.5).map(f64::round));
    report.figure("turn_ms_p99", quantile_ms(&turns, 0.99).map(f64::round));

    // A tmux server per session: a crash of one costs at most that session.
    report.record(3, one_server_per_session(&servers));

    // The cancelled chats: nothing of theirs is left.
    let closed_sessions: BTreeSet<String> =
        closed.iter().filter_map(|o| o.session_id.clone()).collect();
    let left = settled_leftovers(uid, &root, &closed_sessions);
    report.record(
        1,
        if left.is_empty() {
            Ok(())
        } else {
            Err(anyhow!("closed chats left behind: {left:?}"))
        },
    );

    // The chats closed by SIGTERM alone: their sessions live on (a resume finds them), with no
    // control client; then destroyed from the same state dir, nothing is left either.
    let kept_states: Vec<(String, usize, serde_json::Value)> = kept
        .iter()
        .filter_map(|o| Some((o.session_id.clone()?, o.index, o.state.clone()?)))
        .collect();
    let spawn = Spawn::new(PROVIDER, scratch.path(), &sshd.provider_env(&state, &cwd));
    report.record(2, check_kept(uid, &root, &spawn, &kept_states));
    report.finish();
}

/// The kept sessions have a live server and no control client; destroyed, they leave nothing.
fn check_kept(
    uid: u32,
    root: &Path,
    spawn: &Spawn,
    states: &[(String, usize, serde_json::Value)],
) -> Result<()> {
    let sessions: &BTreeSet<String> = &states.iter().map(|(s, _, _)| s.clone()).collect();
    let end = Instant::now() + Duration::from_secs(15);
    loop {
        let clients: Vec<String> = processes_of(uid)
            .into_iter()
            .filter(|(_, c)| c.contains(" -C ") && sessions.iter().any(|s| c.contains(s.as_str())))
            .map(|(p, c)| format!("{p} {c}"))
            .collect();
        if clients.is_empty() {
            break;
        }
        if Instant::now() > end {
            bail!("control clients of chats closed by SIGTERM are still running: {clients:?}");
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    // A new provider resumes each kept chat and closes it with cancel, as the host would.
    for (sid, index, saved) in states {
        let mut host = ScriptHost::spawn_with(spawn.clone())?;
        let chat = format!("chat-{index}");
        host.send(
            "hello",
            json!({"requestId": "hello:1", "sessionId": chat,
                   "requiredCapabilities": ["resume", "cancel"]}),
        )?;
        host.wait_for(chats::HANDSHAKE_BOUND, |v| v["requestId"] == "hello:1")?;
        host.send(
            "resume",
            json!({"requestId": "resume:1", "sessionId": chat, "cwd": format!("/chats/{index}"),
                   "state": saved}),
        )?;
        let ready = host.wait_for(chats::HANDSHAKE_BOUND, |v| v["requestId"] == "resume:1")?;
        if ready["type"] != "ready" {
            bail!("resuming the chat of session {sid}: {ready}");
        }
        host.send("cancel", json!({"requestId": "cancel:1"}))?;
        let closed = host.wait_for(chats::OPERATION_BOUND, |v| v["requestId"] == "cancel:1")?;
        if closed["status"] != "closed" {
            bail!("closing the resumed chat of session {sid}: {closed}");
        }
        let _ = host.signal("TERM");
        let _ = host.wait_exit(Duration::from_secs(20));
    }
    let left = settled_leftovers(uid, root, sessions);
    if !left.is_empty() {
        bail!("destroyed sessions left behind: {left:?}");
    }
    Ok(())
}

#[test]
fn a_killed_tmux_server_costs_one_chat_its_session() {
    let mut report = Report::new(
        "tmux_server_killed_under_a_chat",
        "fault",
        "three chats on one account; the tmux server of one is SIGKILLed while its turn runs",
        &[
            "that chat's turn fails as session_lost, saying the tmux server ended",
            "the other two chats' turns complete with their exact output",
        ],
    );
    let sshd = Sshd::start().expect("sshd test bed");
    let (uid, home) = account(TEST_USER).expect("the test user");
    let scratch = tempfile::tempdir().unwrap();
    let state = scratch.path().join("state");
    let cwd = sshd.remote_dir("killed-server").unwrap();
    let outcome = (|| -> Result<()> {
        let mut hosts = Vec::new();
        for i in 0..3 {
            let spec = Spawn::new(PROVIDER, scratch.path(), &sshd.provider_env(&state, &cwd));
            let mut host = ScriptHost::spawn_with(spec)?;
            host.send(
                "hello",
                json!({"requestId": "hello:1", "sessionId": format!("k{i}"),
                       "requiredCapabilities": ["start", "turn", "cancel"]}),
            )?;
            host.wait_for(chats::HANDSHAKE_BOUND, |v| v["requestId"] == "hello:1")?;
            host.send(
                "start",
                json!({"requestId": "start:1", "sessionId": format!("k{i}"), "cwd": "/k"}),
            )?;
            let ready = host.wait_for(Duration::from_secs(30), |v| v["requestId"] == "start:1")?;
            let sid = ready["state"]["providerState"]["sessionId"]
                .as_str()
                .ok_or_else(|| anyhow!("no session in {ready}"))?
                .to_owned();
            hosts.push((host, sid));
        }
        // Chat 1's turn runs; its server is killed under it.
        let victim = hosts[1].1.clone();
        hosts[1].0.begin_turn("t1", "sleep 30")?;
        let Some(server) = server_of(uid, &victim) else {
            bail!("no tmux server found for session {victim}");
        };
        let servers = [server];
        let killed = std::process::Command::new("kill")
            .args(["-KILL", &servers[0].to_string()])
            .status()?;
        if !killed.success() {
            bail!("kill -KILL {} failed", servers[0]);
        }
        let (_, end) = hosts[1].0.finish_turn("t1", Duration::from_secs(60))?;
        if end["type"] != "failure" || end["code"] != "session_lost" {
            bail!("the turn under the killed server ended {end}");
        }
        let message = end["message"].as_str().unwrap_or_default();
        if !message.contains("tmux server") {
            bail!("the failure does not say the tmux server ended: {message}");
        }
        for i in [0usize, 2] {
            let (host, _) = &mut hosts[i];
            host.begin_turn("t1", &format!("printf 'chat %d turn %d\\n' {i} 1"))?;
            let (text, end) = host.finish_turn("t1", Duration::from_secs(60))?;
            if end["type"] != "final" || text.replace("\r\n", "\n") != chats::turn_output(i, 1) {
                bail!("chat {i} after another chat's server was killed: {end} {text:?}");
            }
        }
        let sessions: BTreeSet<String> = hosts.iter().map(|(_, s)| s.clone()).collect();
        for (mut host, _) in hosts {
            host.send("cancel", json!({"requestId": "cancel:1"}))?;
            let _ = host.wait_for(chats::OPERATION_BOUND, |v| v["requestId"] == "cancel:1");
            let _ = host.signal("TERM");
            let _ = host.wait_exit(Duration::from_secs(20));
        }
        // The lost session's directory is reclaimed with the others'.
        let left = settled_leftovers(uid, &state_root(&home), &sessions);
        if !left.is_empty() {
            bail!("left behind after the chats closed: {left:?}");
        }
        Ok(())
    })();
    report.record(0, outcome);
    report.finish();
}

/// The parent pid of `pid` (from `/proc/<pid>/stat`).
fn parent_of(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (in parentheses) may hold spaces: the fields after its ')' are plain.
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(1)?.parse().ok()
}

/// The tmux server of session `sid`: the parent of its pane's shell.
fn server_of(uid: u32, sid: &str) -> Option<u32> {
    let pane = format!("/sessions/{sid}/rr.sh pane");
    let servers: Vec<u32> = processes_of(uid)
        .into_iter()
        .filter(|(_, c)| c.contains(pane.as_str()) && !c.contains("tmux"))
        .filter_map(|(p, _)| parent_of(p))
        .collect();
    match servers.as_slice() {
        [one] => Some(*one),
        _ => None,
    }
}

/// Every session seen had a server, and no two shared one.
fn one_server_per_session(servers: &[(String, Option<u32>)]) -> Result<()> {
    let mut by_server: std::collections::BTreeMap<u32, Vec<&str>> = Default::default();
    for (sid, server) in servers {
        let Some(pid) = server else {
            bail!("session {sid} had no tmux server while its chat ran");
        };
        by_server.entry(*pid).or_default().push(sid);
    }
    if let Some((pid, shared)) = by_server.iter().find(|(_, s)| s.len() > 1) {
        bail!(
            "{} sessions share tmux server {pid} (one crash would take them all): {shared:?}",
            shared.len()
        );
    }
    if servers.is_empty() {
        bail!("no session was seen while the chats ran");
    }
    Ok(())
}
