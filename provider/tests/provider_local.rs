//! End-to-end: a scripted host drives `botmux-remote-runner` on the built-in `local` machine
//! (real tmux on this host). Every line the provider prints is checked by the protocol crate.

mod support;

use std::time::Duration;

use serde_json::{Value, json};
use support::host::{Host, state_of};

const T: Duration = Duration::from_secs(30);

fn provider(dir: &tempfile::TempDir, extra: &[(&str, String)]) -> Host {
    let mut env = vec![(
        "REMOTE_RUNNER_STATE_DIR",
        dir.path().join("state").display().to_string(),
    )];
    env.extend(extra.iter().cloned());
    Host::spawn(dir.path(), &env)
}

fn work_dir(dir: &tempfile::TempDir) -> String {
    let w = dir.path().join("work");
    std::fs::create_dir_all(&w).unwrap();
    w.display().to_string()
}

#[test]
fn handshake_turns_state_terminal_detach_reattach_cancel() {
    let dir = tempfile::tempdir().unwrap();
    let work = work_dir(&dir);
    let mut host = provider(&dir, &[]);

    let hello = host.hello();
    assert_eq!(hello["type"], "hello");
    assert_eq!(hello["requestId"], "hello:1");
    assert_eq!(hello["provider"], "remote-runner");
    let caps: Vec<&str> = hello["capabilities"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_str().unwrap())
        .collect();
    for c in [
        "start",
        "resume",
        "turn",
        "cancel",
        "detach",
        "reattach",
        "status",
        "terminal_screen",
        "terminal_input",
        "terminal_resize",
    ] {
        assert!(caps.contains(&c), "missing capability {c}");
    }

    let ready = host.start(&work);
    assert_eq!(ready["type"], "ready", "{ready}");
    assert_eq!(ready["requestId"], "start:1");
    let state = state_of(&ready);
    assert_eq!(state["generation"], 1);
    let rsid = state["remoteSessionId"].as_str().unwrap().to_string();
    assert!(rsid.starts_with("local/sess_"), "{rsid}");
    assert!(state["providerState"]["sessionId"].is_string());

    // Streamed output, exact exit code in the summary, stdout and stderr both streamed.
    let (_, progress, fin) = host.turn(
        1,
        "cd /tmp && export RR_TURN_VAR=forty-two; echo out-1; echo err-1 >&2",
    );
    assert_eq!(fin["type"], "final", "{fin}");
    assert!(
        progress.contains("out-1\n") && progress.contains("err-1\n"),
        "{progress}"
    );
    assert!(
        fin["content"].as_str().unwrap().starts_with("exit 0"),
        "{fin}"
    );
    assert_eq!(state_of(&fin)["remoteSessionId"], rsid.as_str());

    // Shell state persists between turns.
    let (_, progress, fin) = host.turn(2, "pwd; echo \"$RR_TURN_VAR\"; false");
    assert_eq!(progress, "/tmp\nforty-two\n");
    assert!(
        fin["content"].as_str().unwrap().starts_with("exit 1"),
        "{fin}"
    );

    // Many lines stream completely and in order.
    let (_, progress, fin) = host.turn(3, "seq 1 20000");
    let expected: String = (1..=20000).map(|i| format!("{i}\n")).collect();
    assert_eq!(progress, expected);
    assert_eq!(fin["type"], "final");

    // Terminal input and resize at the current generation are answered by status.
    host.send(
        "terminal_resize",
        json!({"requestId": "tr:1", "generation": 1, "cols": 100, "rows": 30}),
    );
    let st = host.next_non_screen(T);
    assert_eq!(
        (st["type"].as_str(), st["requestId"].as_str()),
        (Some("status"), Some("tr:1")),
        "{st}"
    );
    let since_input = host.seen.len();
    host.send(
        "terminal_input",
        json!({"requestId": "ti:1", "generation": 1, "data": "echo typed-by-host\r"}),
    );
    let st = host.next_non_screen(T);
    assert_eq!(st["requestId"], "ti:1", "{st}");
    // The screen that shows the input may come before the input's status or after it.
    let shows_input = |v: &Value| {
        v["type"] == "terminal_screen"
            && v["snapshot"]
                .as_str()
                .unwrap_or("")
                .contains("typed-by-host")
    };
    let screen = match host.seen[since_input..].iter().find(|v| shows_input(v)) {
        Some(screen) => screen.clone(),
        None => host.wait_for(T, shows_input),
    };
    assert_eq!(screen["generation"], 1);
    assert_eq!(
        (screen["cols"].as_u64(), screen["rows"].as_u64()),
        (Some(100), Some(30))
    );

    // Input for another generation is refused, correlated.
    host.send(
        "terminal_input",
        json!({"requestId": "ti:2", "generation": 2, "data": "x"}),
    );
    let f = host.next_non_screen(T);
    assert_eq!(
        (f["type"].as_str(), f["code"].as_str()),
        (Some("failure"), Some("stale_terminal_generation")),
        "{f}"
    );
    assert_eq!(f["requestId"], "ti:2");

    // reattach without detach: correlated failure; detach then reattach: ready again.
    host.send("reattach", json!({"requestId": "ra:0"}));
    let f = host.next_non_screen(T);
    assert_eq!(
        (f["code"].as_str(), f["requestId"].as_str()),
        (Some("not_detached"), Some("ra:0")),
        "{f}"
    );
    host.send("detach", json!({"requestId": "d:1"}));
    let d = host.next_non_screen(T);
    assert_eq!(
        (d["status"].as_str(), d["requestId"].as_str()),
        (Some("detached"), Some("d:1")),
        "{d}"
    );
    let (_, _, f) = host.turn(4, "echo while-detached");
    assert_eq!(
        (f["type"].as_str(), f["code"].as_str()),
        (Some("failure"), Some("not_ready")),
        "{f}"
    );
    host.send("reattach", json!({"requestId": "ra:1"}));
    let r = host.next_non_screen(T);
    assert_eq!(
        (r["status"].as_str(), r["requestId"].as_str()),
        (Some("ready"), Some("ra:1")),
        "{r}"
    );
    let (_, progress, _) = host.turn(5, "echo back");
    assert_eq!(progress, "back\n");

    host.send("status", json!({"requestId": "st:1"}));
    let s = host.next_non_screen(T);
    assert_eq!(
        (s["status"].as_str(), s["requestId"].as_str()),
        (Some("ready"), Some("st:1")),
        "{s}"
    );

    host.send("cancel", json!({"requestId": "c:1"}));
    let c = host.next_non_screen(T);
    assert_eq!(
        (c["status"].as_str(), c["requestId"].as_str()),
        (Some("closed"), Some("c:1")),
        "{c}"
    );
}

#[test]
fn bad_input_gets_failures_and_the_provider_keeps_serving() {
    let dir = tempfile::tempdir().unwrap();
    let work = work_dir(&dir);
    let mut host = provider(&dir, &[]);
    assert_eq!(host.hello()["type"], "hello");

    // A turn before start: pre-ACK failure, correlated.
    let (_, _, f) = host.turn(1, "echo early");
    assert_eq!(
        (f["code"].as_str(), f["requestId"].as_str()),
        (Some("not_ready"), Some("turn:1")),
        "{f}"
    );

    host.send_raw("this is not json");
    let f = host.next_non_screen(T);
    assert_eq!(f["type"], "failure");
    assert!(f.get("requestId").is_none());

    host.send_raw(r#"{"protocol":"other","version":1,"type":"status","requestId":"bad:1"}"#);
    let f = host.next_non_screen(T);
    assert_eq!(
        (f["type"].as_str(), f["requestId"].as_str()),
        (Some("failure"), Some("bad:1")),
        "{f}"
    );

    host.send_raw(
        r#"{"protocol":"botmux.remote-runner","version":2,"type":"status","requestId":"bad:2"}"#,
    );
    let f = host.next_non_screen(T);
    assert_eq!(f["requestId"], "bad:2", "{f}");

    host.send_raw(r#"{"protocol":"botmux.remote-runner","version":1,"type":"launch_rockets","requestId":"bad:3"}"#);
    let f = host.next_non_screen(T);
    assert_eq!(
        (f["type"].as_str(), f["requestId"].as_str()),
        (Some("failure"), Some("bad:3")),
        "{f}"
    );

    // A line over 4 MiB: one failure, then the next line is served.
    let huge = format!(
        r#"{{"protocol":"botmux.remote-runner","version":1,"type":"turn","requestId":"big","turnId":"big","content":"{}"}}"#,
        "x".repeat(5 << 20)
    );
    host.send_raw(&huge);
    let f = host.next_non_screen(T);
    assert_eq!(f["type"], "failure", "{f}");

    assert_eq!(host.start(&work)["type"], "ready");

    // A second turn while one runs: correlated failure, the first turn is unaffected.
    host.send(
        "turn",
        json!({"requestId": "turn:a", "turnId": "ta", "content": "sleep 2; echo first-done"}),
    );
    let ack = host.next_non_screen(T);
    assert_eq!(
        (ack["status"].as_str(), ack["requestId"].as_str()),
        (Some("busy"), Some("turn:a")),
        "{ack}"
    );
    host.send(
        "turn",
        json!({"requestId": "turn:b", "turnId": "tb", "content": "echo second"}),
    );
    let f = host.wait_for(T, |v| v["type"] == "failure" || v["type"] == "final");
    assert_eq!(
        (
            f["code"].as_str(),
            f["requestId"].as_str(),
            f["turnId"].as_str()
        ),
        (Some("busy"), Some("turn:b"), Some("tb")),
        "{f}"
    );
    let fin = host.wait_for(T, |v| v["type"] == "final");
    assert_eq!(fin["turnId"], "ta");
    let text: String = host
        .seen
        .iter()
        .filter(|v| v["type"] == "progress")
        .map(|v| v["content"].as_str().unwrap())
        .collect();
    assert_eq!(text, "first-done\n");

    // stdin EOF: orderly exit; the session is left alive for a later resume.
    let ready_state = host
        .seen
        .iter()
        .find(|v| v["type"] == "ready")
        .map(state_of)
        .unwrap();
    host.close_stdin();
    let st = host.wait_exit(T).expect("provider exits after stdin EOF");
    assert!(st.success(), "{st:?}");
    let mut again = provider(&dir, &[]);
    assert_eq!(again.hello()["type"], "hello");
    again.send(
        "resume",
        json!({"requestId": "resume:1", "sessionId": "s", "cwd": work, "state": ready_state}),
    );
    let r = again.next_non_screen(T);
    assert_eq!(r["type"], "ready", "{r}");
    assert_eq!(
        state_of(&r)["generation"],
        1,
        "reattach adopts the live session at the same generation"
    );
    assert_eq!(
        state_of(&r)["remoteSessionId"],
        ready_state["remoteSessionId"]
    );
    again.send("cancel", json!({"requestId": "c:1"}));
    assert_eq!(again.next_non_screen(T)["status"], "closed");
}

#[test]
fn exit_in_a_turn_ends_the_command_and_the_session_goes_on() {
    // The engine's contract (since the session-shell rework on main): `exit N` ends the
    // command with status N, not the session; the next turn runs in the same generation.
    let dir = tempfile::tempdir().unwrap();
    let work = work_dir(&dir);
    let mut host = provider(&dir, &[]);
    host.hello();
    assert_eq!(host.start(&work)["type"], "ready");
    let (ack, progress, f) = host.turn(1, "echo before-exit; exit 7");
    assert_eq!(ack["status"], "busy", "{ack}");
    assert_eq!(progress, "before-exit\n");
    assert_eq!(f["type"], "final", "{f}");
    assert!(f["content"].as_str().unwrap().starts_with("exit 7"), "{f}");

    // A turn sent while the pane's fresh shell is still starting may be lost before it runs
    // (the engine says so): that is a retryable `command_lost`, never a new generation.
    let mut outcome = None;
    for n in 2..=4 {
        let (_, progress, end) = host.turn(n, "echo still-here");
        if end["type"] == "failure" {
            assert_eq!(end["code"], "command_lost", "{end}");
            assert_eq!(end["retryable"], true, "{end}");
            continue;
        }
        outcome = Some((progress, end));
        break;
    }
    let (progress, fin) = outcome.expect("a turn ran in the same session within three tries");
    assert_eq!(progress, "still-here\n", "{fin}");
    assert_eq!(state_of(&fin)["generation"], 1, "{fin}");
    assert!(
        !host.seen.iter().any(|v| v["type"] == "lineage_changed"),
        "no new generation: {:?}",
        host.seen
    );
    host.send("cancel", json!({"requestId": "c:1"}));
    assert_eq!(host.next_non_screen(T)["status"], "closed");
}

#[test]
fn rebuild_advances_the_generation_and_keeps_the_thread() {
    let dir = tempfile::tempdir().unwrap();
    let work = work_dir(&dir);
    let mut host = provider(&dir, &[]);
    host.hello();
    let ready = host.start(&work);
    let mut state = state_of(&ready);
    state["agentThreadId"] = json!("thread-7");
    state["generation"] = json!(7);
    host.send("cancel", json!({"requestId": "c:1"}));
    assert_eq!(host.next_non_screen(T)["status"], "closed");
    drop(host);

    let mut host = provider(&dir, &[]);
    host.hello();
    host.send("resume", json!({"requestId": "resume:1", "sessionId": "s", "cwd": work, "state": state, "resumeMode": "rebuild"}));
    let r = host.next(T);
    assert_eq!(r["type"], "ready", "{r}");
    let s = state_of(&r);
    assert_eq!(s["generation"], 8);
    assert_eq!(s["agentThreadId"], "thread-7");
    assert_ne!(s["remoteSessionId"], state["remoteSessionId"]);
    // No screen of the new generation before the host's next command.
    assert!(
        host.try_next(Duration::from_secs(2)).is_none(),
        "screen sent right after a rebuild's ready: {:?}",
        host.seen.last()
    );
    let (_, progress, _) = host.turn(1, "echo after-rebuild");
    assert_eq!(progress, "after-rebuild\n");
    host.send("cancel", json!({"requestId": "c:2"}));
    assert_eq!(host.next_non_screen(T)["status"], "closed");

    // A state of another provider is refused, correlated.
    let mut host = provider(&dir, &[]);
    host.hello();
    let mut other = s.clone();
    other["provider"] = json!("someone-else");
    host.send(
        "resume",
        json!({"requestId": "resume:2", "sessionId": "s", "cwd": work, "state": other}),
    );
    let f = host.next(T);
    assert_eq!(
        (f["code"].as_str(), f["requestId"].as_str()),
        (Some("state_provider_mismatch"), Some("resume:2")),
        "{f}"
    );
}

#[test]
fn agent_mode_passes_content_on_stdin_and_reports_thread_and_usage() {
    let dir = tempfile::tempdir().unwrap();
    let work = work_dir(&dir);
    let agent = dir.path().join("agent.sh");
    std::fs::write(
        &agent,
        r#"#!/bin/sh
input=$(cat)
echo "agent got: $input (previous thread: ${RR_THREAD_ID:-none})"
echo "thread-from-agent" > "$RR_TURN_DIR/thread_id"
printf '{"context":{"usedTokens":120,"windowTokens":1000,"percentUsed":12},"tokens":{"in":100,"out":20},"model":"test-model"}' > "$RR_TURN_DIR/usage.json"
"#,
    )
    .unwrap();
    let cmd = format!("sh {}", agent.display());
    let mut host = provider(
        &dir,
        &[
            ("REMOTE_RUNNER_TURN_MODE", "agent".into()),
            ("REMOTE_RUNNER_AGENT_COMMAND", cmd),
        ],
    );
    host.hello();
    assert_eq!(host.start(&work)["type"], "ready");
    let (_, _, fin) = host.turn(1, "what's 'up' $HOME?");
    assert_eq!(fin["type"], "final", "{fin}");
    assert_eq!(
        fin["content"],
        "agent got: what's 'up' $HOME? (previous thread: none)\n"
    );
    assert_eq!(fin["usage"]["generation"], 1);
    assert_eq!(fin["usage"]["snapshot"]["tokens"]["in"], 100);
    assert_eq!(state_of(&fin)["agentThreadId"], "thread-from-agent");
    let lineage = host
        .seen
        .iter()
        .find(|v| v["type"] == "lineage_changed")
        .expect("lineage_changed");
    assert_eq!(state_of(lineage)["agentThreadId"], "thread-from-agent");
    let (_, _, fin) = host.turn(2, "again");
    assert!(
        fin["content"]
            .as_str()
            .unwrap()
            .contains("previous thread: thread-from-agent"),
        "{fin}"
    );
    host.send("cancel", json!({"requestId": "c:1"}));
    assert_eq!(host.next_non_screen(T)["status"], "closed");
}

#[test]
fn invalid_configuration_fails_the_handshake_with_what_to_set() {
    let dir = tempfile::tempdir().unwrap();
    let mut host = provider(&dir, &[("REMOTE_RUNNER_TURN_MODE", "agent".into())]);
    let f = host.hello();
    assert_eq!(
        (
            f["type"].as_str(),
            f["requestId"].as_str(),
            f["code"].as_str()
        ),
        (Some("failure"), Some("hello:1"), Some("config_invalid")),
        "{f}"
    );
    assert!(
        f["message"]
            .as_str()
            .unwrap()
            .contains("REMOTE_RUNNER_AGENT_COMMAND"),
        "{f}"
    );
    // Still serving.
    host.send("status", json!({"requestId": "st:1"}));
    assert_eq!(host.next(T)["requestId"], "st:1");
}

/// A turn whose command stops at a prompt says so in its progress (from the command's process
/// state on the machine), and the host's terminal input answers it.
#[test]
fn a_turn_waiting_for_input_says_so_and_terminal_input_answers_it() {
    let dir = tempfile::tempdir().unwrap();
    let work = work_dir(&dir);
    let mut host = provider(&dir, &[]);
    host.hello();
    assert_eq!(host.start(&work)["type"], "ready");
    let begun = std::time::Instant::now();
    host.send(
        "turn",
        json!({"requestId": "turn:1", "turnId": "t1", "content": "read -p 'name? ' n; echo \"hi $n\""}),
    );
    let waiting = host.wait_for(T, |v| {
        v["type"] == "progress"
            && v["content"]
                .as_str()
                .unwrap_or("")
                .contains("[waiting for input: name?]")
    });
    assert_eq!(waiting["turnId"], "t1");
    // Said as soon as it is seen, not at the end of an output wait (10 s).
    assert!(
        begun.elapsed() < Duration::from_secs(5),
        "{:?}",
        begun.elapsed()
    );
    host.send(
        "terminal_input",
        json!({"requestId": "ti:1", "generation": 1, "data": "bob\r"}),
    );
    let fin = host.wait_for(T, |v| v["type"] == "final" || v["type"] == "failure");
    assert_eq!(fin["type"], "final", "{fin}");
    let said: String = host
        .seen
        .iter()
        .filter(|v| v["type"] == "progress")
        .map(|v| v["content"].as_str().unwrap_or("").to_string())
        .collect();
    assert!(said.contains("hi bob\n"), "{said}");
}
