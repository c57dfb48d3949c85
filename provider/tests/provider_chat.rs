//! The chat helper end to end, over a real OpenSSH sshd on 127.0.0.1 and real tmux: a turn's
//! command runs `"$RR_CHAT" send` and `"$RR_CHAT" tool`, the provider turns each call into one
//! `outbound_message` / `session_tool` event, this test (playing the host) writes the results
//! back, and the command sees them as exit codes and output. The `final` comes only after every
//! result; limits, a dropped link and a provider restart are covered too.

mod support;

use std::time::Duration;

use remote_runner_testkit::Sshd;
use serde_json::{Value, json};
use support::host::{Host, state_of};

const T: Duration = Duration::from_secs(60);

/// A provider on the test bed, started, with the chat on (the default).
fn started(
    sshd: &Sshd,
    local: &tempfile::TempDir,
    name: &str,
) -> (Host, Vec<(&'static str, String)>, Value) {
    let remote = sshd.remote_dir(name).unwrap();
    let env = sshd.provider_env(&local.path().join("state"), &remote);
    let mut host = Host::spawn(local.path(), &env);
    let hello = host.hello();
    let caps: Vec<&str> = hello["capabilities"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_str().unwrap())
        .collect();
    assert!(
        caps.contains(&"outbound_message") && caps.contains(&"session_tool"),
        "{hello}"
    );
    let ready = host.start("/host/cwd");
    assert_eq!(ready["type"], "ready", "{ready}");
    let state = state_of(&ready);
    (host, env, state)
}

fn send_turn(host: &mut Host, n: usize, content: &str) -> String {
    let tid = format!("t{n}");
    host.send(
        "turn",
        json!({"requestId": format!("turn:{n}"), "turnId": tid, "content": content}),
    );
    let ack = host.next_non_screen(T);
    assert_eq!(ack["status"], "busy", "{ack}");
    tid
}

fn outbound_result(host: &mut Host, event: &Value, result: Value) {
    host.send(
        "outbound_message_result",
        json!({
            "requestId": format!("outbound-message-result:{}", host.seen.len()),
            "operationId": event["operationId"], "turnId": event["turnId"],
            "generation": event["generation"], "result": result,
        }),
    );
}

fn tool_result(host: &mut Host, event: &Value, result: Value) {
    host.send(
        "session_tool_result",
        json!({
            "requestId": format!("session-tool-result:{}", host.seen.len()),
            "operationId": event["operationId"], "turnId": event["turnId"],
            "generation": event["generation"], "result": result,
        }),
    );
}

/// Read the turn to its end, answering each operation with `answer`; returns the progress text,
/// the terminal event and the operation events in order.
fn run_turn(
    host: &mut Host,
    tid: &str,
    mut answer: impl FnMut(&mut Host, &Value),
) -> (String, Value, Vec<Value>) {
    let mut progress = String::new();
    let mut ops = Vec::new();
    loop {
        let v = host.next_non_screen(T);
        match v["type"].as_str().unwrap() {
            "progress" => progress.push_str(v["content"].as_str().unwrap()),
            "outbound_message" | "session_tool" => {
                assert_eq!(v["turnId"], tid, "{v}");
                answer(host, &v);
                ops.push(v);
            }
            "final" | "failure" => {
                assert_eq!(v["turnId"], tid, "{v}");
                return (progress, v, ops);
            }
            other => panic!("unexpected {other} during a turn: {v}"),
        }
    }
}

fn cancel(host: &mut Host) {
    host.send("cancel", json!({"requestId": "cancel:1"}));
    host.wait_for(T, |v| v["status"] == "closed");
}

#[test]
fn send_and_tool_get_the_hosts_results_as_exit_codes() {
    let sshd = Sshd::start().expect("sshd test bed");
    let local = tempfile::tempdir().unwrap();
    let (mut host, _env, state) = started(&sshd, &local, "chat-basic");
    let generation = state["generation"].clone();
    let content = r#"
"$RR_CHAT" send "hello from the machine"; echo "send=$?"
"$RR_CHAT" tool '{"tool":"history","limit":3}'; echo "tool=$?"
printf 'two\nlines' | "$RR_CHAT" send --auxiliary --mention-requester -; echo "rejected=$?"
"$RR_CHAT" history --limit 2 --scope thread; echo "unknown=$?"
"$RR_CHAT" tool '{"tool":"schedule"}'; echo "bad=$?"
"$RR_CHAT" send '   '; echo "blank=$?"
"#;
    let tid = send_turn(&mut host, 1, content);
    let (progress, fin, ops) = run_turn(&mut host, &tid, |host, ev| {
        match (ev["type"].as_str().unwrap(), ev["responseKind"].as_str()) {
            ("outbound_message", Some("progress")) => {
                // Results for another turn or generation settle nothing and get no reply
                // (run_turn fails on any event that is not the turn's own).
                let mut stale = ev.clone();
                stale["turnId"] = json!("t0");
                outbound_result(
                    host,
                    &stale,
                    json!({"outcome": "delivered", "messageId": "om_stale"}),
                );
                let mut stale = ev.clone();
                stale["generation"] = json!(ev["generation"].as_u64().unwrap() + 1);
                outbound_result(
                    host,
                    &stale,
                    json!({"outcome": "delivered", "messageId": "om_stale"}),
                );
                outbound_result(
                    host,
                    ev,
                    json!({"outcome": "delivered", "messageId": "om_first"}),
                )
            }
            ("outbound_message", _) => outbound_result(
                host,
                ev,
                json!({"outcome": "rejected", "code": "outbound_delivery_unavailable", "message": "no handler"}),
            ),
            ("session_tool", _) if ev["request"]["limit"] == 3 => tool_result(
                host,
                ev,
                json!({"outcome": "completed", "exitCode": 5, "stdout": "{\"total\":1}\n", "stderr": "tool note\n"}),
            ),
            _ => tool_result(
                host,
                ev,
                json!({"outcome": "unknown", "code": "session_tool_timeout", "message": "took too long"}),
            ),
        }
    });
    assert_eq!(fin["type"], "final", "{fin}");
    // One event per call that passed the checks; bad requests were never sent.
    assert_eq!(ops.len(), 4, "{ops:#?}");
    assert_eq!(ops[0]["content"], "hello from the machine");
    assert_eq!(ops[0]["mention"], "none");
    assert_eq!(ops[0]["generation"], generation);
    assert_eq!(ops[1]["request"], json!({"tool": "history", "limit": 3}));
    assert_eq!(ops[2]["content"], "two\nlines");
    assert_eq!(ops[2]["responseKind"], "auxiliary");
    assert_eq!(ops[2]["mention"], "requester");
    assert_eq!(
        ops[3]["request"],
        json!({"tool": "history", "limit": 2, "scope": "thread"})
    );
    let ids: std::collections::HashSet<&str> = ops
        .iter()
        .map(|o| o["operationId"].as_str().unwrap())
        .collect();
    assert_eq!(ids.len(), 4, "each call gets a fresh operationId: {ops:#?}");
    assert!(!progress.contains("om_stale"), "{progress}");
    for want in [
        "om_first\nsend=0",
        "{\"total\":1}\n",
        "tool note",
        "tool=5",
        "outbound_delivery_unavailable: no handler",
        "rejected=3",
        "session_tool_timeout: took too long",
        "unknown=4",
        "invalid_request:",
        "bad=2",
        "blank=2",
    ] {
        assert!(
            progress.contains(want),
            "{want:?} missing from:\n{progress}"
        );
    }
    cancel(&mut host);
}

#[test]
fn the_final_waits_for_a_backgrounded_call_and_late_calls_are_refused() {
    let sshd = Sshd::start().expect("sshd test bed");
    let local = tempfile::tempdir().unwrap();
    let (mut host, _env, _) = started(&sshd, &local, "chat-held");
    let remote = sshd.remote_dir("chat-held").unwrap();
    let rc = remote.join("bg-rc");
    // The command ends once the backgrounded call is made (its `ready` is there) and before
    // its result: a call that starts only after the command ended may find the chat closed
    // (refused, nothing sent), which is the race this wait takes out of the test.
    let content = format!(
        "export OLD_TURN_DIR=\"$RR_TURN_DIR\"\n( \"$RR_CHAT\" send 'from the background' >/dev/null 2>&1; echo $? > '{}' ) &\n\
         while [ ! -e \"$RR_TURN_DIR/chat/1/ready\" ]; do sleep 0.05; done\necho foreground-done",
        rc.display()
    );
    let tid = send_turn(&mut host, 1, &content);
    let ev = host.wait_for(T, |v| v["type"] == "outbound_message");
    // The command has ended; the final must wait for this result.
    let deadline = std::time::Instant::now() + Duration::from_millis(1500);
    while let Some(v) = host.try_next(deadline.saturating_duration_since(std::time::Instant::now()))
    {
        assert!(
            v["type"] != "final" && v["type"] != "failure",
            "ended before the result: {v}"
        );
    }
    outbound_result(
        &mut host,
        &ev,
        json!({"outcome": "delivered", "messageId": "om_bg"}),
    );
    let fin = host.wait_for(T, |v| v["type"] == "final" || v["type"] == "failure");
    assert_eq!(fin["type"], "final", "{fin}");
    assert_eq!(fin["turnId"], tid.as_str());
    wait_file(&rc, "0\n");

    // A call into an ended turn's chat sends nothing (Host::turn fails on any outbound).
    let (_, progress, fin) = host.turn(
        2,
        "RR_TURN_DIR=$OLD_TURN_DIR \"$RR_CHAT\" send late; echo \"late=$?\"",
    );
    assert_eq!(fin["type"], "final", "{fin}");
    assert!(
        progress.contains("turn_ended:") && progress.contains("late=3"),
        "{progress}"
    );

    // A turn that made no call is closed too (by the provider alone, no helper on the machine).
    let (_, _, fin) = host.turn(3, "export QUIET_TURN_DIR=\"$RR_TURN_DIR\"; echo quiet");
    assert_eq!(fin["type"], "final", "{fin}");
    let (_, progress, fin) = host.turn(
        4,
        "RR_TURN_DIR=$QUIET_TURN_DIR \"$RR_CHAT\" send late; echo \"late=$?\"",
    );
    assert_eq!(fin["type"], "final", "{fin}");
    assert!(
        progress.contains("turn_ended:") && progress.contains("late=3"),
        "{progress}"
    );
    cancel(&mut host);
}

#[test]
fn per_turn_limits_are_enforced_before_sending() {
    let sshd = Sshd::start().expect("sshd test bed");
    let local = tempfile::tempdir().unwrap();
    let (mut host, _env, _) = started(&sshd, &local, "chat-limits");
    let content = r#"
for i in 1 2 3 4 5 6 7 8 9 10 11; do "$RR_CHAT" send "m$i" >/dev/null; echo "s$i=$?"; done
i=0; while [ $i -lt 31 ]; do i=$((i+1)); "$RR_CHAT" bots >/dev/null; echo "t$i=$?"; done
"#;
    let tid = send_turn(&mut host, 1, content);
    let (progress, fin, ops) = run_turn(&mut host, &tid, |host, ev| {
        if ev["type"] == "outbound_message" {
            outbound_result(
                host,
                ev,
                json!({"outcome": "delivered", "messageId": "om_x"}),
            );
        } else {
            tool_result(
                host,
                ev,
                json!({"outcome": "completed", "exitCode": 0, "stdout": "[]\n", "stderr": ""}),
            );
        }
    });
    assert_eq!(fin["type"], "final", "{fin}");
    let outbound = ops
        .iter()
        .filter(|o| o["type"] == "outbound_message")
        .count();
    let tools = ops.iter().filter(|o| o["type"] == "session_tool").count();
    assert_eq!(
        (outbound, tools),
        (10, 30),
        "the host never sees one over the limit"
    );
    assert!(
        progress.contains("s10=0") && progress.contains("s11=3"),
        "{progress}"
    );
    assert!(progress.contains("outbound_rate_limited:"), "{progress}");
    assert!(
        progress.contains("t30=0") && progress.contains("t31=3"),
        "{progress}"
    );
    assert!(
        progress.contains("session_tool_rate_limited:"),
        "{progress}"
    );
    cancel(&mut host);
}

#[test]
fn a_call_retried_across_a_dropped_link_keeps_its_id_and_result() {
    let sshd = Sshd::start().expect("sshd test bed");
    let local = tempfile::tempdir().unwrap();
    let (mut host, _env, _) = started(&sshd, &local, "chat-link");
    let content = r#""$RR_CHAT" send --id progress-1 'step one'; echo "a=$?"
"$RR_CHAT" send --id progress-1 'step one'; echo "b=$?""#;
    let tid = send_turn(&mut host, 1, content);
    let mut first = true;
    let (progress, fin, ops) = run_turn(&mut host, &tid, |host, ev| {
        if first {
            first = false;
            // The link to the machine drops while the host works on the call.
            assert!(
                sshd.signal_connections(9) > 0,
                "no per-connection sshd found"
            );
        }
        // The host's idempotency: same id, same payload, same result.
        outbound_result(
            host,
            ev,
            json!({"outcome": "delivered", "messageId": "om_once"}),
        );
    });
    assert_eq!(fin["type"], "final", "{fin}");
    assert_eq!(ops.len(), 2);
    assert_eq!(ops[0]["operationId"], "progress-1");
    assert_eq!(ops[1]["operationId"], "progress-1");
    assert_eq!(ops[0]["content"], ops[1]["content"]);
    assert!(progress.contains("om_once\na=0"), "{progress}");
    assert!(progress.contains("om_once\nb=0"), "{progress}");
    cancel(&mut host);
}

#[test]
fn a_restarted_provider_settles_the_call_it_left_waiting() {
    let sshd = Sshd::start().expect("sshd test bed");
    let local = tempfile::tempdir().unwrap();
    let (mut host, env, state) = started(&sshd, &local, "chat-restart");
    let remote = sshd.remote_dir("chat-restart").unwrap();
    let rc = remote.join("rc");
    let content = format!(
        "\"$RR_CHAT\" send 'during the restart' 2>'{err}'; echo $? > '{rc}'",
        err = remote.join("err").display(),
        rc = rc.display()
    );
    send_turn(&mut host, 1, &content);
    host.wait_for(T, |v| v["type"] == "outbound_message");
    host.kill();
    drop(host);

    let mut host = Host::spawn(local.path(), &env);
    host.hello();
    host.send(
        "resume",
        json!({"requestId": "resume:1", "sessionId": "s", "cwd": "/host/cwd", "state": state}),
    );
    let r = host.next_non_screen(T);
    assert_eq!(r["type"], "ready", "{r}");
    // The call was sent: it may have been delivered, so it ends as unknown (4), not replayed.
    wait_file(&rc, "4\n");
    let err = std::fs::read_to_string(remote.join("err")).unwrap();
    assert!(err.starts_with("provider_restarted:"), "{err}");
    cancel(&mut host);
}

#[test]
fn the_chat_can_be_turned_off() {
    let sshd = Sshd::start().expect("sshd test bed");
    let local = tempfile::tempdir().unwrap();
    let remote = sshd.remote_dir("chat-off").unwrap();
    let mut env = sshd.provider_env(&local.path().join("state"), &remote);
    env.push(("REMOTE_RUNNER_OUTBOUND_MESSAGE", "off".into()));
    let mut host = Host::spawn(local.path(), &env);
    let hello = host.hello();
    let caps = hello["capabilities"].as_array().unwrap();
    assert!(!caps.contains(&json!("outbound_message")), "{hello}");
    assert!(caps.contains(&json!("session_tool")), "{hello}");
    host.start("/host/cwd");
    let (_, progress, fin) = host.turn(1, "\"$RR_CHAT\" send hi; echo \"off=$?\"");
    assert_eq!(fin["type"], "final", "{fin}");
    assert!(
        progress.contains("capability_off:") && progress.contains("off=3"),
        "{progress}"
    );
    cancel(&mut host);
}

/// Wait until `path` holds `want` (written by a command on the machine).
fn wait_file(path: &std::path::Path, want: &str) {
    let deadline = std::time::Instant::now() + T;
    loop {
        let got = std::fs::read_to_string(path).unwrap_or_default();
        if got == want {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{} holds {got:?}, want {want:?}",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn agent_mode_turns_get_the_helper_too() {
    let sshd = Sshd::start().expect("sshd test bed");
    let local = tempfile::tempdir().unwrap();
    let remote = sshd.remote_dir("chat-agent").unwrap();
    // The example agent from examples/botmux, copied to the machine.
    let agent = remote.join("chat-agent.sh");
    std::fs::copy(
        concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../examples/botmux/chat-agent.sh"
        ),
        &agent,
    )
    .unwrap();
    let mut env = sshd.provider_env(&local.path().join("state"), &remote);
    env.push(("REMOTE_RUNNER_TURN_MODE", "agent".into()));
    env.push((
        "REMOTE_RUNNER_AGENT_COMMAND",
        format!("sh '{}'", agent.display()),
    ));
    let mut host = Host::spawn(local.path(), &env);
    host.hello();
    assert_eq!(host.start("/host/cwd")["type"], "ready");
    let tid = send_turn(&mut host, 1, "tidy the repo");
    let (_, fin, ops) = run_turn(&mut host, &tid, |host, ev| {
        if ev["type"] == "outbound_message" {
            outbound_result(
                host,
                ev,
                json!({"outcome": "delivered", "messageId": "om_agent"}),
            );
        } else {
            tool_result(
                host,
                ev,
                json!({"outcome": "completed", "exitCode": 0, "stdout": "[\"earlier message\"]", "stderr": ""}),
            );
        }
    });
    assert_eq!(fin["type"], "final", "{fin}");
    assert_eq!(ops.len(), 2, "{ops:#?}");
    assert_eq!(ops[0]["content"], "Working on: tidy the repo");
    assert_eq!(ops[1]["request"], json!({"tool": "history", "limit": 3}));
    assert_eq!(
        fin["content"],
        "You asked: tidy the repo\nRecent chat: [\"earlier message\"]\n"
    );
    cancel(&mut host);
}

#[test]
fn a_cancel_ends_a_waiting_call_with_unknown() {
    let sshd = Sshd::start().expect("sshd test bed");
    let local = tempfile::tempdir().unwrap();
    let (mut host, _env, _) = started(&sshd, &local, "chat-cancel");
    let remote = sshd.remote_dir("chat-cancel").unwrap();
    let rc = remote.join("rc");
    // The call outlives the session's processes (nohup), so its exit code can be read.
    let content = format!(
        "nohup sh -c '\"$RR_CHAT\" send waiting; echo $? > {}' >/dev/null 2>&1 &\nsleep 30",
        rc.display()
    );
    send_turn(&mut host, 1, &content);
    host.wait_for(T, |v| v["type"] == "outbound_message");
    host.send("cancel", json!({"requestId": "cancel:1"}));
    let failure = host.wait_for(T, |v| v["type"] == "failure");
    assert_eq!(failure["status"], "cancelled", "{failure}");
    host.wait_for(T, |v| v["status"] == "closed");
    // Sent and never settled: it may have been delivered.
    wait_file(&rc, "4\n");
}

/// Two chats on one machine account (two providers, one login user): a turn of chat A finds
/// the turn directory of chat B's running turn the way an attacker would (`RR_TURN_DIR` in
/// `/proc/*/environ`) and points `RR_TURN_DIR` there. Its `send` and `history` are refused
/// (`not_this_turn`, exit 3): nothing reaches B's host and B's limits are not spent; A's own
/// call and B's own call still work.
#[test]
fn a_turn_of_another_chat_cannot_use_this_turns_chat_over_ssh() {
    let sshd = Sshd::start().expect("sshd test bed");
    let local_a = tempfile::tempdir().unwrap();
    let local_b = tempfile::tempdir().unwrap();
    let (a, _, _) = started(&sshd, &local_a, "chat-two-a");
    let (b, _, _) = started(&sshd, &local_b, "chat-two-b");
    let remote_b = sshd.remote_dir("chat-two-b").unwrap();
    two_chats_on_one_account(a, b, &remote_b.join("a-is-done"), "ssh");
}

/// The same on the built-in `local` machine (both chats are this test's user).
#[test]
fn a_turn_of_another_chat_cannot_use_this_turns_chat_on_local() {
    let start = |dir: &tempfile::TempDir| {
        let env = vec![(
            "REMOTE_RUNNER_STATE_DIR",
            dir.path().join("state").display().to_string(),
        )];
        let mut host = Host::spawn(dir.path(), &env);
        host.hello();
        let work = dir.path().join("work");
        std::fs::create_dir_all(&work).unwrap();
        let ready = host.start(work.to_str().unwrap());
        assert_eq!(ready["type"], "ready", "{ready}");
        host
    };
    let local_a = tempfile::tempdir().unwrap();
    let local_b = tempfile::tempdir().unwrap();
    let (a, b) = (start(&local_a), start(&local_b));
    two_chats_on_one_account(a, b, &local_b.path().join("a-is-done"), "local");
}

fn two_chats_on_one_account(mut a: Host, mut b: Host, flag: &std::path::Path, kind: &str) {
    let mark = format!("rr-mark-{kind}-{}", std::process::id());

    // B's turn waits (a process carrying its RR_TURN_DIR), then makes a call of its own.
    let b_turn = send_turn(
        &mut b,
        1,
        &format!(
            "RR_MARK={mark} sh -c 'while [ ! -e \"$0\" ]; do sleep 0.1; done' '{}'\n\
             \"$RR_CHAT\" send \"B's own\"; echo \"b-own=$?\"",
            flag.display()
        ),
    );

    let attack = format!(
        r#"found=
i=0
while [ -z "$found" ] && [ "$i" -lt 100 ]; do
  for f in /proc/[0-9]*/environ; do
    e=$(tr '\0' '\n' <"$f" 2>/dev/null) || continue
    case $e in *"RR_MARK={mark}"*) found=$(printf '%s\n' "$e" | sed -n 's/^RR_TURN_DIR=//p') ;; esac
    [ -n "$found" ] && break
  done
  [ -n "$found" ] || {{ sleep 0.1; i=$((i + 1)); }}
done
[ -n "$found" ] && [ "$found" != "$RR_TURN_DIR" ] && echo "found-b=yes"
RR_TURN_DIR=$found RR_CHAT_TIMEOUT=8 "$RR_CHAT" send "from A into B"; echo "cross-send=$?"
RR_TURN_DIR=$found RR_CHAT_TIMEOUT=8 "$RR_CHAT" history --limit 5; echo "cross-history=$?"
"$RR_CHAT" send "A's own"; echo "a-own=$?"
: > '{flag}'
"#,
        flag = flag.display()
    );
    let a_turn = send_turn(&mut a, 1, &attack);
    let (progress, fin, ops) = run_turn(&mut a, &a_turn, |host, ev| {
        outbound_result(
            host,
            ev,
            json!({"outcome": "delivered", "messageId": "om_a"}),
        )
    });
    assert_eq!(fin["type"], "final", "{fin}");
    for want in [
        "found-b=yes",
        "not_this_turn:",
        "cross-send=3",
        "cross-history=3",
        "om_a\na-own=0",
    ] {
        assert!(
            progress.contains(want),
            "{want:?} missing from:\n{progress}"
        );
    }
    assert_eq!(ops.len(), 1, "{ops:#?}");
    assert_eq!(ops[0]["content"], "A's own");

    // B's host saw only B's own call.
    let (progress, fin, ops) = run_turn(&mut b, &b_turn, |host, ev| {
        outbound_result(
            host,
            ev,
            json!({"outcome": "delivered", "messageId": "om_b"}),
        )
    });
    assert_eq!(fin["type"], "final", "{fin}");
    assert_eq!(ops.len(), 1, "only B's own call reached B's host: {ops:#?}");
    assert_eq!(ops[0]["content"], "B's own");
    assert!(progress.contains("om_b\nb-own=0"), "{progress}");
    cancel(&mut a);
    cancel(&mut b);
}
