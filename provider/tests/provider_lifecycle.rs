//! The provider's server driven in-process over in-memory pipes (`serve()` with
//! `tokio::io::duplex`), by transcripts of exact lines: what the host sends, what the provider
//! must print. The engine behind it is real: tmux on the `local` machine, or, for a start that
//! must stay in flight, a TCP port that accepts and never speaks SSH.
//!
//! In expected lines, the string `"<any>"` stands for any value (ids the engine makes up).

mod support;

use serde_json::json;
use support::pipes::{BlackHole, Pipes};

const ENV: &str = r#""protocol":"botmux.remote-runner","version":1"#;

fn line(body: &str) -> String {
    format!("{{{ENV},{body}}}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn before_start_hello_status_and_refusals_are_answered_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let mut p = Pipes::local(&dir);
    p.send(&line(r#""type":"hello","requestId":"hello:1","sessionId":"chat-1","requiredCapabilities":["start"]"#)).await;
    p.expect(&line(r#""type":"hello","requestId":"hello:1","provider":"remote-runner","capabilities":["start","resume","turn","cancel","detach","reattach","status","outbound_message","session_tool"]"#)).await;
    p.send(&line(r#""type":"status","requestId":"status:1""#))
        .await;
    p.expect(&line(
        r#""type":"status","requestId":"status:1","status":"starting""#,
    ))
    .await;
    p.send(&line(
        r#""type":"turn","requestId":"turn:1","turnId":"t1","content":"echo hi""#,
    ))
    .await;
    p.expect(&line(r#""type":"failure","requestId":"turn:1","turnId":"t1","code":"not_ready","message":"no session yet: send start (or resume) and wait for ready before a turn","status":"failed","retryable":false"#)).await;
    p.send(&line(
        r#""type":"terminal_input","requestId":"terminal-input:1","generation":1,"data":"x""#,
    ))
    .await;
    p.expect(&line(r#""type":"failure","requestId":"terminal-input:1","code":"stale_terminal_generation","message":"terminal input for generation 1 refused: the current generation is none (no session yet)","status":"failed","retryable":false"#)).await;
    p.send(&line(r#""type":"reattach","requestId":"reattach:1""#))
        .await;
    p.expect(&line(r#""type":"failure","requestId":"reattach:1","code":"not_detached","message":"reattach is only valid after detach; the provider is not detached","status":"failed","retryable":false"#)).await;
    // A command type v1 does not have: refused as the host's reference runner refuses it.
    p.send(&line(r#""type":"rewind","requestId":"rewind:1""#))
        .await;
    p.expect(&line(r#""type":"failure","requestId":"rewind:1","code":"unsupported_command","message":"unknown message type \"rewind\" for this direction","status":"failed","retryable":false"#)).await;
    assert_eq!(p.close().await, 0, "stdin closed: exit status 0");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn start_turn_detach_reattach_cancel_transcript() {
    let dir = tempfile::tempdir().unwrap();
    let work = dir.path().display().to_string();
    let mut p = Pipes::local(&dir);
    p.hello().await;
    p.send(&line(&format!(
        r#""type":"start","requestId":"start:1","sessionId":"chat-1","cwd":{}"#,
        json!(work)
    )))
    .await;
    let ready = p
        .expect(&line(
            r#""type":"ready","requestId":"start:1","state":"<any>""#,
        ))
        .await;
    assert_eq!(ready["state"]["generation"], 1);
    p.send(&line(
        r#""type":"turn","requestId":"turn:1","turnId":"t1","content":"echo lifecycle-1""#,
    ))
    .await;
    p.expect(&line(
        r#""type":"status","requestId":"turn:1","status":"busy","state":"<any>""#,
    ))
    .await;
    p.expect(&line(
        r#""type":"progress","turnId":"t1","content":"lifecycle-1\n""#,
    ))
    .await;
    p.expect(&line(
        r#""type":"final","turnId":"t1","content":"<any>","state":"<any>""#,
    ))
    .await;
    p.send(&line(r#""type":"detach","requestId":"detach:1""#))
        .await;
    p.expect(&line(
        r#""type":"status","requestId":"detach:1","status":"detached","state":"<any>""#,
    ))
    .await;
    p.send(&line(
        r#""type":"turn","requestId":"turn:2","turnId":"t2","content":"echo no""#,
    ))
    .await;
    p.expect(&line(r#""type":"failure","requestId":"turn:2","turnId":"t2","code":"not_ready","message":"the provider is detached; send reattach before the next turn","status":"failed","retryable":false"#)).await;
    p.send(&line(r#""type":"reattach","requestId":"reattach:1""#))
        .await;
    p.expect(&line(
        r#""type":"status","requestId":"reattach:1","status":"ready","state":"<any>""#,
    ))
    .await;
    p.send(&line(r#""type":"cancel","requestId":"cancel:1""#))
        .await;
    p.expect(&line(
        r#""type":"status","requestId":"cancel:1","status":"closed","state":"<any>""#,
    ))
    .await;
    p.send(&line(
        r#""type":"turn","requestId":"turn:3","turnId":"t3","content":"echo no""#,
    ))
    .await;
    p.expect(&line(r#""type":"failure","requestId":"turn:3","turnId":"t3","code":"not_ready","message":"the session was cancelled; resume with resumeMode rebuild to start a new one","status":"failed","retryable":false"#)).await;
    assert_eq!(p.close().await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_and_terminal_input_are_answered_while_a_start_is_in_flight_and_cancel_ends_it() {
    let dir = tempfile::tempdir().unwrap();
    let mut hole = BlackHole::bind().await;
    let mut p = Pipes::with_env(&dir, &hole.env());
    p.hello().await;
    p.send(&line(
        r#""type":"start","requestId":"start:1","sessionId":"chat-1","cwd":"/tmp""#,
    ))
    .await;
    hole.wait_for_connection().await;
    // The start is now in flight (the SSH banner never comes): the loop still answers, at
    // once (measured: well under a millisecond; the bound leaves room for a loaded machine).
    let asked = std::time::Instant::now();
    p.send(&line(r#""type":"status","requestId":"status:1""#))
        .await;
    p.expect(&line(
        r#""type":"status","requestId":"status:1","status":"starting""#,
    ))
    .await;
    let took = asked.elapsed();
    assert!(
        took < std::time::Duration::from_millis(250),
        "status took {took:?} with a start in flight"
    );
    p.send(&line(
        r#""type":"terminal_input","requestId":"terminal-input:1","generation":1,"data":"x""#,
    ))
    .await;
    p.expect(&line(r#""type":"failure","requestId":"terminal-input:1","code":"stale_terminal_generation","message":"terminal input for generation 1 refused: the current generation is none (no session yet)","status":"failed","retryable":false"#)).await;
    // cancel ends the start at once (a failure for its requestId), then closes.
    p.send(&line(r#""type":"cancel","requestId":"cancel:1""#))
        .await;
    p.expect(&line(r#""type":"failure","requestId":"start:1","code":"cancelled","message":"cut short by the host's cancel, which closes the session; resume with resumeMode rebuild to open a new one","status":"cancelled","retryable":false"#)).await;
    // The cut-short create settles when the connection drops; nothing was made, so closed.
    hole.hang_up();
    p.expect(&line(
        r#""type":"status","requestId":"cancel:1","status":"closed""#,
    ))
    .await;
    assert_eq!(p.close().await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_signal_ends_serve_at_once_while_a_start_is_in_flight_with_stdin_open() {
    let dir = tempfile::tempdir().unwrap();
    let hole = BlackHole::bind().await;
    let mut p = Pipes::with_env(&dir, &hole.env());
    p.hello().await;
    p.send(&line(
        r#""type":"start","requestId":"start:1","sessionId":"chat-1","cwd":"/tmp""#,
    ))
    .await;
    hole.wait_for_connection().await;
    let code = p.stop(143).await;
    assert_eq!(code, 143, "the stop future's status is the exit status");
    // Nothing else was printed: the start is abandoned with the process, as detach would.
    p.expect_end().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_is_answered_during_a_turn_start_up_and_cancel_cuts_the_start_up_short() {
    let dir = tempfile::tempdir().unwrap();
    let mut p = Pipes::local(&dir);
    p.hello().await;
    p.send(&line(
        r#""type":"start","requestId":"start:1","sessionId":"chat-1","cwd":"/tmp""#,
    ))
    .await;
    p.expect(&line(
        r#""type":"ready","requestId":"start:1","state":"<any>""#,
    ))
    .await;
    // Start-up waits up to 300 ms for a quick command to finish before the ACK; `sleep` is
    // not quick, so the status below is answered while the start-up is in flight.
    p.send(&line(
        r#""type":"turn","requestId":"turn:1","turnId":"t1","content":"sleep 5""#,
    ))
    .await;
    p.send(&line(r#""type":"status","requestId":"status:1""#))
        .await;
    p.expect(&line(
        r#""type":"status","requestId":"status:1","status":"ready","state":"<any>""#,
    ))
    .await;
    p.send(&line(
        r#""type":"turn","requestId":"turn:2","turnId":"t2","content":"echo no""#,
    ))
    .await;
    p.expect(&line(r#""type":"failure","requestId":"turn:2","turnId":"t2","code":"busy","message":"turn t1 is still running; send one turn at a time","status":"failed","retryable":true"#)).await;
    p.send(&line(r#""type":"cancel","requestId":"cancel:1""#))
        .await;
    p.expect(&line(r#""type":"failure","requestId":"turn:1","turnId":"t1","code":"cancelled","message":"cut short by the host's cancel, which closes the session; resume with resumeMode rebuild to open a new one","status":"cancelled","retryable":false"#)).await;
    p.expect(&line(
        r#""type":"status","requestId":"cancel:1","status":"closed","state":"<any>""#,
    ))
    .await;
    assert_eq!(p.close().await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resume_reattach_keeps_the_generation_and_rebuild_raises_it_transcript() {
    let dir = tempfile::tempdir().unwrap();
    let state_dir = dir.path().join("state");
    let mut p = Pipes::in_state_dir(&state_dir, &[]);
    p.hello().await;
    p.send(&line(
        r#""type":"start","requestId":"start:1","sessionId":"chat-1","cwd":"/tmp""#,
    ))
    .await;
    let ready = p
        .expect(&line(
            r#""type":"ready","requestId":"start:1","state":"<any>""#,
        ))
        .await;
    assert_eq!(p.close().await, 0);
    let state = ready["state"].clone();

    // A new process adopts the live session: same state, same generation.
    let mut p = Pipes::in_state_dir(&state_dir, &[]);
    p.hello().await;
    p.send(&line(&format!(
        r#""type":"resume","requestId":"resume:1","sessionId":"chat-1","cwd":"/tmp","state":{state}"#
    )))
    .await;
    p.expect(&line(&format!(
        r#""type":"ready","requestId":"resume:1","state":{state}"#
    )))
    .await;
    assert_eq!(p.close().await, 0);

    // Rebuild: a new session at generation + 1; the old one is destroyed.
    let mut p = Pipes::in_state_dir(&state_dir, &[]);
    p.hello().await;
    p.send(&line(&format!(
        r#""type":"resume","requestId":"resume:2","sessionId":"chat-1","cwd":"/tmp","state":{state},"resumeMode":"rebuild""#
    )))
    .await;
    let rebuilt = p
        .expect(&line(
            r#""type":"ready","requestId":"resume:2","state":"<any>""#,
        ))
        .await;
    assert_eq!(rebuilt["state"]["generation"], 2);
    assert_ne!(
        rebuilt["state"]["remoteSessionId"],
        state["remoteSessionId"]
    );
    p.send(&line(
        r#""type":"turn","requestId":"turn:1","turnId":"t1","content":"echo rebuilt""#,
    ))
    .await;
    p.expect(&line(
        r#""type":"status","requestId":"turn:1","status":"busy","state":"<any>""#,
    ))
    .await;
    p.expect(&line(
        r#""type":"progress","turnId":"t1","content":"rebuilt\n""#,
    ))
    .await;
    p.expect(&line(
        r#""type":"final","turnId":"t1","content":"<any>","state":"<any>""#,
    ))
    .await;
    p.send(&line(r#""type":"cancel","requestId":"cancel:1""#))
        .await;
    p.expect(&line(
        r#""type":"status","requestId":"cancel:1","status":"closed","state":"<any>""#,
    ))
    .await;
    assert_eq!(p.close().await, 0);
}
