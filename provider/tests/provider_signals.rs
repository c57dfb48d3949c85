//! `botmux-remote-runner` under the host's real close: SIGTERM (or SIGINT, SIGHUP) while its
//! stdin stays open, in every state. BotMux sends `cancel`, waits for `status: closed`, then
//! SIGTERM without closing stdin; the provider must be gone within one second, with exit status
//! 128 + the signal's number, leaving the remote session as `detach` would.

mod support;

use std::net::TcpListener;
use std::time::{Duration, Instant};

use serde_json::json;
use support::host::{Host, state_of};

const T: Duration = Duration::from_secs(30);
/// The bound. Measured exits are tens of milliseconds.
const EXIT_BOUND: Duration = Duration::from_secs(1);

fn provider(dir: &tempfile::TempDir, extra: &[(&str, String)]) -> Host {
    let mut env = vec![
        (
            "REMOTE_RUNNER_STATE_DIR",
            dir.path().join("state").display().to_string(),
        ),
        ("REMOTE_RUNNER_TERMINAL", "off".to_string()),
    ];
    env.extend(extra.iter().cloned());
    Host::spawn(dir.path(), &env)
}

/// Send `signo` with stdin open; the provider must exit within [`EXIT_BOUND`] with 128+signo.
fn signal_and_expect_exit(host: &mut Host, signo: i32, state: &str) {
    let pid = host.pid().to_string();
    let sent = Instant::now();
    let killed = std::process::Command::new("kill")
        .args(["-s", &signo.to_string(), &pid])
        .status()
        .unwrap();
    assert!(killed.success(), "kill -s {signo} {pid}");
    let status = host
        .wait_exit(Duration::from_secs(10))
        .unwrap_or_else(|| panic!("{state}: still running 10 s after signal {signo}"));
    let took = sent.elapsed();
    assert!(
        took < EXIT_BOUND,
        "{state}: exited {took:?} after signal {signo}, more than {EXIT_BOUND:?}"
    );
    assert_eq!(status.code(), Some(128 + signo), "{state}: exit status");
}

fn started(dir: &tempfile::TempDir) -> (Host, serde_json::Value) {
    let mut host = provider(dir, &[]);
    host.hello();
    let ready = host.start("/tmp");
    assert_eq!(ready["type"], "ready", "{ready}");
    let state = state_of(&ready);
    (host, state)
}

#[test]
fn sigterm_with_stdin_open_before_hello_idle_after_cancel_and_after_detach() {
    let dir = tempfile::tempdir().unwrap();

    // Before hello: a `status` answer shows the handlers are installed (a signal in the first
    // milliseconds of the process, before that, gets the default action: killed by SIGTERM).
    let mut host = provider(&dir, &[]);
    host.send("status", json!({"requestId": "status:1"}));
    assert_eq!(host.next(T)["status"], "starting");
    signal_and_expect_exit(&mut host, libc::SIGTERM, "before hello");

    let (mut host, _) = started(&dir);
    signal_and_expect_exit(&mut host, libc::SIGTERM, "idle");

    // The host's close: cancel, closed, then SIGTERM with stdin open.
    let (mut host, _) = started(&dir);
    host.send("cancel", json!({"requestId": "cancel:1"}));
    assert_eq!(host.next(T)["status"], "closed");
    signal_and_expect_exit(&mut host, libc::SIGTERM, "after cancel");

    let (mut host, _) = started(&dir);
    host.send("detach", json!({"requestId": "detach:1"}));
    assert_eq!(host.next(T)["status"], "detached");
    signal_and_expect_exit(&mut host, libc::SIGTERM, "after detach");
}

#[test]
fn sigint_and_sighup_end_it_like_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    let (mut host, _) = started(&dir);
    signal_and_expect_exit(&mut host, libc::SIGINT, "idle (SIGINT)");
    let (mut host, _) = started(&dir);
    signal_and_expect_exit(&mut host, libc::SIGHUP, "idle (SIGHUP)");
}

#[test]
fn sigterm_mid_start_with_stdin_open() {
    let dir = tempfile::tempdir().unwrap();
    // A port that accepts and never speaks SSH keeps the start in flight.
    let hole = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = hole.local_addr().unwrap().port();
    let mut host = provider(
        &dir,
        &[
            ("REMOTE_RUNNER_HOST", "127.0.0.1".to_string()),
            ("REMOTE_RUNNER_PORT", port.to_string()),
            ("REMOTE_RUNNER_USER", "rr-nobody".to_string()),
        ],
    );
    host.hello();
    host.send(
        "start",
        json!({"requestId": "start:1", "sessionId": "s", "cwd": "/tmp"}),
    );
    let (_held, _) = hole.accept().unwrap();
    signal_and_expect_exit(&mut host, libc::SIGTERM, "mid-start");
}

#[test]
fn sigterm_mid_turn_leaves_the_session_as_detach_would() {
    let dir = tempfile::tempdir().unwrap();
    let (mut host, state) = started(&dir);
    host.send(
        "turn",
        json!({"requestId": "turn:1", "turnId": "t1", "content": "sleep 30"}),
    );
    assert_eq!(host.next(T)["status"], "busy");
    signal_and_expect_exit(&mut host, libc::SIGTERM, "mid-turn");
    drop(host);

    // The session is still there: a new provider adopts it at the same generation.
    let mut host = provider(&dir, &[]);
    host.hello();
    host.send(
        "resume",
        json!({"requestId": "resume:1", "sessionId": "s", "cwd": "/tmp", "state": state}),
    );
    let ready = host.next(T);
    assert_eq!(ready["type"], "ready", "{ready}");
    assert_eq!(state_of(&ready)["generation"], 1);
    assert_eq!(
        state_of(&ready)["remoteSessionId"],
        state["remoteSessionId"]
    );
    host.send("cancel", json!({"requestId": "cancel:1"}));
    assert_eq!(host.next(T)["status"], "closed");
}
