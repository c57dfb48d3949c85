//! A provider resumes only what it created for the same BotMux session on its own machine.
//! Each test plays one forged or foreign `providerState` against a live session and checks
//! that the resume is refused with a typed failure and that the session is still alive.
//! (Before bindings, `resume` with `resumeMode: rebuild` destroyed whatever session the state
//! named, a human's CLI session included.)

mod support;

use remote_runner_engine::engine::Engine;
use serde_json::{Value, json};
use std::path::Path;
use support::pipes::Pipes;

const ENV: &str = r#""protocol":"botmux.remote-runner","version":1"#;

fn line(body: &str) -> String {
    format!("{{{ENV},{body}}}")
}

fn engine(state_dir: &Path) -> Engine {
    Engine::open(state_dir, Default::default()).unwrap()
}

/// A provider for BotMux session `chat` starts a session; its state is returned and the
/// provider exits (stdin closed), leaving the session running as `detach` would.
async fn started_state(state_dir: &Path, chat: &str, cwd: &str) -> Value {
    let mut p = Pipes::in_state_dir(state_dir, &[]);
    p.hello().await;
    p.send(&line(&format!(
        r#""type":"start","requestId":"start:1","sessionId":{},"cwd":{}"#,
        json!(chat),
        json!(cwd)
    )))
    .await;
    let ready = p
        .expect(&line(
            r#""type":"ready","requestId":"start:1","state":"<any>""#,
        ))
        .await;
    assert_eq!(p.close().await, 0);
    ready["state"].clone()
}

/// `resume` for BotMux session `chat` with `state` and `mode`; returns the answer.
async fn resume(state_dir: &Path, chat: &str, state: &Value, mode: &str) -> Value {
    let mut p = Pipes::in_state_dir(state_dir, &[]);
    p.hello().await;
    p.send(&line(&format!(
        r#""type":"resume","requestId":"resume:1","sessionId":{},"cwd":"/tmp","state":{},"resumeMode":{}"#,
        json!(chat),
        state,
        json!(mode)
    )))
    .await;
    let answer = p.next().await.expect("an answer to resume");
    p.close().await;
    serde_json::from_str(&answer).unwrap()
}

fn refused(answer: &Value, code: &str) {
    assert_eq!(answer["type"], "failure", "{answer}");
    assert_eq!(answer["requestId"], "resume:1", "{answer}");
    assert_eq!(answer["code"], code, "{answer}");
}

fn session_id(state: &Value) -> String {
    state["providerState"]["sessionId"]
        .as_str()
        .unwrap()
        .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_chats_state_is_refused_and_its_session_survives() {
    let dir = tempfile::tempdir().unwrap();
    let state_dir = dir.path().join("state");
    let state = started_state(&state_dir, "chat-a", "/tmp").await;

    for mode in ["rebuild", "reattach"] {
        let answer = resume(&state_dir, "chat-b", &state, mode).await;
        refused(&answer, "state_not_bound");
    }
    assert!(
        engine(&state_dir)
            .check_alive(&session_id(&state))
            .await
            .unwrap()
    );

    // Its own chat still adopts it, at the same generation.
    let answer = resume(&state_dir, "chat-a", &state, "reattach").await;
    assert_eq!(answer["type"], "ready", "{answer}");
    assert_eq!(answer["state"]["remoteSessionId"], state["remoteSessionId"]);
    engine(&state_dir)
        .destroy(&session_id(&state))
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_state_naming_a_cli_session_is_refused_and_the_cli_session_survives() {
    let dir = tempfile::tempdir().unwrap();
    let state_dir = dir.path().join("state");
    let engine = Engine::open(&state_dir, Default::default()).unwrap();
    let machine = engine.machine("local").unwrap();
    // What `remote-runner session create` does for a human.
    let human = engine.create_session(&machine, Some("/tmp")).await.unwrap();
    let forged = json!({
        "version": 1, "provider": "remote-runner", "generation": 1,
        "remoteSessionId": format!("local/{}", human.session_id),
        "providerState": {"machineId": "local", "sessionId": human.session_id, "cwd": "/tmp", "backend": "tmux"}
    });
    let answer = resume(&state_dir, "chat-a", &forged, "rebuild").await;
    refused(&answer, "state_not_bound");
    assert!(engine.check_alive(&human.session_id).await.unwrap());
    engine.destroy(&human.session_id).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_state_naming_another_or_an_unknown_machine_is_refused_and_nothing_is_destroyed() {
    let dir = tempfile::tempdir().unwrap();
    let state_dir = dir.path().join("state");
    let state = started_state(&state_dir, "chat-a", "/tmp").await;
    for machine in ["build-box", "no-such-machine-7f3a"] {
        let mut foreign = state.clone();
        foreign["providerState"]["machineId"] = json!(machine);
        let answer = resume(&state_dir, "chat-a", &foreign, "rebuild").await;
        refused(&answer, "state_foreign_machine");
    }
    assert!(
        engine(&state_dir)
            .check_alive(&session_id(&state))
            .await
            .unwrap()
    );
    engine(&state_dir)
        .destroy(&session_id(&state))
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_state_whose_session_id_is_not_an_engine_id_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let state_dir = dir.path().join("state");
    let state = started_state(&state_dir, "chat-a", "/tmp").await;
    // A path in place of the id must never reach the binding files or the engine.
    let mut forged = state.clone();
    forged["providerState"]["sessionId"] = json!(format!("../bindings/{}", session_id(&state)));
    let answer = resume(&state_dir, "chat-a", &forged, "rebuild").await;
    refused(&answer, "state_not_bound");
    // Half a reference (no machineId) is refused too, not treated as "no session".
    let mut half = state.clone();
    half["providerState"]
        .as_object_mut()
        .unwrap()
        .remove("machineId");
    let answer = resume(&state_dir, "chat-a", &half, "rebuild").await;
    refused(&answer, "state_not_bound");
    assert!(
        engine(&state_dir)
            .check_alive(&session_id(&state))
            .await
            .unwrap()
    );
    engine(&state_dir)
        .destroy(&session_id(&state))
        .await
        .unwrap();
}

/// A rebuild whose machine cannot be reached says the old session was NOT destroyed, and the
/// engine does not record it as destroyed (it may still be running there).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_rebuild_does_not_claim_an_unreachable_session_destroyed() {
    let sshd = remote_runner_testkit::Sshd::start().expect("sshd test bed");
    let dir = tempfile::tempdir().unwrap();
    let state_dir = dir.path().join("state");
    let remote_cwd = sshd.remote_dir("rebuild").unwrap();
    let env = vec![
        ("REMOTE_RUNNER_HOST", "127.0.0.1".to_string()),
        ("REMOTE_RUNNER_PORT", sshd.port.to_string()),
        ("REMOTE_RUNNER_USER", sshd.user().to_string()),
        (
            "REMOTE_RUNNER_KEY_PATH",
            sshd.keys.ed25519.display().to_string(),
        ),
        (
            "REMOTE_RUNNER_KNOWN_HOSTS",
            sshd.known_hosts.display().to_string(),
        ),
        ("REMOTE_RUNNER_REMOTE_CWD", remote_cwd.display().to_string()),
    ];
    let mut p = Pipes::in_state_dir(&state_dir, &env);
    p.hello().await;
    p.send(&line(
        r#""type":"start","requestId":"start:1","sessionId":"chat-a","cwd":"/tmp""#,
    ))
    .await;
    let ready = p
        .expect(&line(
            r#""type":"ready","requestId":"start:1","state":"<any>""#,
        ))
        .await;
    assert_eq!(p.close().await, 0);
    let state = ready["state"].clone();
    let id = session_id(&state);

    // The machine becomes unreachable: its sshd stops listening.
    assert!(sshd.signal_listener(libc::SIGTERM));
    let mut p = Pipes::in_state_dir(&state_dir, &env);
    p.hello().await;
    p.send(&line(&format!(
        r#""type":"resume","requestId":"resume:1","sessionId":"chat-a","cwd":"/tmp","state":{state},"resumeMode":"rebuild""#
    )))
    .await;
    let answer: Value = serde_json::from_str(&p.next().await.unwrap()).unwrap();
    p.close().await;
    assert_eq!(answer["type"], "failure", "{answer}");
    assert_eq!(answer["requestId"], "resume:1");
    let message = answer["message"].as_str().unwrap();
    assert!(
        message.contains(&format!("the old session {id} was NOT destroyed")),
        "{message}"
    );
    let record = engine(&state_dir).session_show(&id).unwrap();
    assert_ne!(
        record.status,
        remote_runner_engine::engine::SessionStatus::Destroyed,
        "the engine must not record an unreachable session as destroyed"
    );

    // Clean up the remote tmux session the test left on this host.
    let _ = std::process::Command::new("runuser")
        .args(["-u", sshd.user(), "--", "tmux", "-L", &record.tmux_socket])
        .args(["kill-session", "-t", &id])
        .status();
}
