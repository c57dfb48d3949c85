//! A provider resumes only what it created for the same BotMux session on its own machine.
//! Each test plays one forged or foreign `providerState` against a live session and checks
//! that the resume is refused with a typed failure and that the session is still alive.
//! (Before bindings, `resume` with `resumeMode: rebuild` destroyed whatever session the state
//! named, a human's CLI session included.)

mod support;

use std::path::Path;
use std::sync::Arc;

use remote_runner_provider::connect::MachineConnector;
use remote_runner_provider::engine::Engine;
use remote_runner_provider::ssh::ConnectOptions;
use serde_json::{Value, json};
use support::pipes::Pipes;

const ENV: &str = r#""protocol":"botmux.remote-runner","version":1"#;

fn line(body: &str) -> String {
    format!("{{{ENV},{body}}}")
}

fn engine(state_dir: &Path) -> Engine {
    let connector = Arc::new(MachineConnector::new(
        state_dir.to_path_buf(),
        ConnectOptions::default(),
    ));
    Engine::new(state_dir, connector).unwrap()
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
    let engine = engine(&state_dir);
    let machine = MachineConnector::new(state_dir.clone(), ConnectOptions::default())
        .machine("local")
        .unwrap();
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
