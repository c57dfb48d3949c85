//! End-to-end against a real OpenSSH sshd on 127.0.0.1: the provider reaches the machine over
//! SSH, survives its own SIGKILL (a new provider resumes the live session) and a killed
//! per-connection sshd mid-turn (the turn still ends with the right result and every byte).

mod support;

use std::time::Duration;

use remote_runner_testkit::Sshd;
use serde_json::json;
use support::host::{Host, state_of};

const T: Duration = Duration::from_secs(60);

#[test]
fn ssh_turns_and_a_killed_provider_is_resumed_at_the_same_generation() {
    let sshd = Sshd::start().expect("sshd test bed");
    let local = tempfile::tempdir().unwrap();
    let remote = sshd.remote_dir("provider-resume").unwrap();
    let env = sshd.provider_env(&local.path().join("state"), &remote);
    let mut host = Host::spawn(local.path(), &env);
    assert_eq!(host.hello()["type"], "hello");
    let ready = host.start("/host/side/cwd");
    assert_eq!(ready["type"], "ready", "{ready}");
    let state = state_of(&ready);
    assert_eq!(state["generation"], 1);

    let (_, progress, fin) = host.turn(1, "cd /tmp; export KEEP=kept; whoami; printf 'no newline'");
    assert_eq!(progress, format!("{}\nno newline", sshd.user()));
    assert!(
        fin["content"].as_str().unwrap().starts_with("exit 0"),
        "{fin}"
    );

    // SIGKILL the provider in the middle of a turn.
    host.send("turn", json!({"requestId": "turn:2", "turnId": "t2", "content": "sleep 2; echo finished-after-kill; (exit 3)"}));
    assert_eq!(host.next_non_screen(T)["status"], "busy");
    host.kill();
    drop(host);

    // A new provider resumes with the saved state: same generation, same session, and the
    // shell state of the old turns is still there.
    let mut host = Host::spawn(local.path(), &env);
    host.hello();
    host.send(
        "resume",
        json!({"requestId": "resume:1", "sessionId": "s", "cwd": "/host/side/cwd", "state": state}),
    );
    let r = host.next_non_screen(T);
    assert_eq!(r["type"], "ready", "{r}");
    assert_eq!(state_of(&r)["generation"], 1);
    assert_eq!(state_of(&r)["remoteSessionId"], state["remoteSessionId"]);
    // The killed turn's command finished on the machine; the session is free again after it.
    std::thread::sleep(Duration::from_secs(3));
    let (_, progress, fin) = host.turn(3, "echo \"$KEEP\" $(pwd)");
    assert_eq!(progress, "kept /tmp\n", "{fin}");

    // Rebuild: generation + 1, a new remote session.
    host.send("cancel", json!({"requestId": "c:1"}));
    assert_eq!(host.next_non_screen(T)["status"], "closed");
    drop(host);
    let mut host = Host::spawn(local.path(), &env);
    host.hello();
    host.send("resume", json!({"requestId": "resume:2", "sessionId": "s", "cwd": "/x", "state": state, "resumeMode": "rebuild"}));
    let r = host.next(T);
    assert_eq!(state_of(&r)["generation"], 2, "{r}");
    assert_ne!(state_of(&r)["remoteSessionId"], state["remoteSessionId"]);
    host.send("cancel", json!({"requestId": "c:2"}));
    assert_eq!(host.next_non_screen(T)["status"], "closed");
}

#[test]
fn a_killed_connection_mid_turn_still_delivers_every_byte_and_the_exit_code() {
    let sshd = Sshd::start().expect("sshd test bed");
    let local = tempfile::tempdir().unwrap();
    let remote = sshd.remote_dir("provider-drop").unwrap();
    let env = sshd.provider_env(&local.path().join("state"), &remote);
    let mut host = Host::spawn(local.path(), &env);
    host.hello();
    assert_eq!(host.start("/x")["type"], "ready");
    host.send(
        "turn",
        json!({"requestId": "turn:1", "turnId": "t1", "content": "for i in $(seq 1 30); do echo line-$i; sleep 0.1; done; (exit 4)"}),
    );
    assert_eq!(host.next_non_screen(T)["status"], "busy");
    // Let some output stream, then kill every per-connection sshd process.
    host.wait_for(T, |v| v["type"] == "progress");
    let killed = sshd.signal_connections(libc_sigkill());
    assert!(killed > 0, "no per-connection sshd found");
    let end = host.wait_for(Duration::from_secs(120), |v| {
        v["type"] == "final" || v["type"] == "failure"
    });
    assert_eq!(end["type"], "final", "{end}");
    assert!(
        end["content"].as_str().unwrap().starts_with("exit 4"),
        "{end}"
    );
    let text: String = host
        .seen
        .iter()
        .filter(|v| v["type"] == "progress")
        .map(|v| v["content"].as_str().unwrap())
        .collect();
    let expected: String = (1..=30).map(|i| format!("line-{i}\n")).collect();
    assert_eq!(text, expected);
    host.send("cancel", json!({"requestId": "c:1"}));
    assert_eq!(host.next_non_screen(T)["status"], "closed");
}

fn libc_sigkill() -> i32 {
    9
}

/// Output larger than one read, read over SFTP (a small local cap), arrives byte for byte:
/// 49-byte lines put the 2 MiB read borders inside a 2-byte (the 1st border), a 3-byte (the
/// 3rd) and a 4-byte character (the 6th), between characters JSON must escape.
#[test]
fn output_past_one_read_streams_exactly_with_characters_split_across_reads() {
    let sshd = Sshd::start().expect("sshd test bed");
    let local = tempfile::tempdir().unwrap();
    let remote = sshd.remote_dir("provider-stream").unwrap();
    let mut env = sshd.provider_env(&local.path().join("state"), &remote);
    env.push(("REMOTE_RUNNER_OUTPUT_CAP", "1M".into()));
    let mut host = Host::spawn(local.path(), &env);
    host.hello();
    assert_eq!(host.start("/x")["type"], "ready");

    let pad = "a".repeat(35);
    let lines = 300_000;
    let command = format!(
        "l=$(printf '\\303\\251\\342\\202\\254\\360\\237\\230\\200\"\\\\\\t\\001%s' {pad}); \
         yes \"$l\" | head -n {lines}"
    );
    let line = format!("é€😀\"\\\t\u{1}{pad}\n");
    assert_eq!(line.len(), 49);
    let (_, progress, fin) = host.turn(1, &command);
    assert!(
        fin["content"].as_str().unwrap().starts_with("exit 0"),
        "{fin}"
    );
    assert_eq!(progress.len(), line.len() * lines);
    assert!(
        progress == line.repeat(lines),
        "the streamed output differs"
    );
    host.send("cancel", json!({"requestId": "c:1"}));
    assert_eq!(host.next_non_screen(T)["status"], "closed");
}

/// The first errors of a provider set up by hand name the true cause, and their fix runs as
/// written: a missing `REMOTE_RUNNER_KEY_PATH` file is named; an unknown host key comes with the
/// `ssh-keyscan` line that records it, and after running that line literally `start` succeeds.
#[test]
fn a_missing_key_is_named_and_the_host_key_fix_runs_as_written() {
    let sshd = Sshd::start().expect("sshd test bed");
    let local = tempfile::tempdir().unwrap();
    let remote = sshd.remote_dir("provider-first-errors").unwrap();
    let base = sshd.provider_env(&local.path().join("state"), &remote);
    let with = |key: &'static str, value: String| {
        let mut env = base.clone();
        env.retain(|(k, _)| *k != key);
        env.push((key, value));
        env
    };

    let missing = local.path().join("no_such_key");
    let env = with("REMOTE_RUNNER_KEY_PATH", missing.display().to_string());
    let mut host = Host::spawn(local.path(), &env);
    host.hello();
    let failure = host.start("/x");
    assert_eq!(failure["type"], "failure", "{failure}");
    let msg = failure["message"].as_str().unwrap();
    assert!(
        msg.contains(&format!(
            "the key file {} does not exist",
            missing.display()
        )),
        "{msg}"
    );
    drop(host);

    let known_hosts = local.path().join("fresh_known_hosts");
    let env = with(
        "REMOTE_RUNNER_KNOWN_HOSTS",
        known_hosts.display().to_string(),
    );
    let mut host = Host::spawn(local.path(), &env);
    host.hello();
    let failure = host.start("/x");
    assert_eq!(failure["type"], "failure", "{failure}");
    let msg = failure["message"].as_str().unwrap();
    assert!(msg.contains(&sshd.host_key_fingerprint), "{msg}");
    let fix = msg
        .split('`')
        .find(|part| part.starts_with("ssh-keyscan "))
        .unwrap_or_else(|| panic!("no ssh-keyscan line in: {msg}"));
    assert!(!msg.contains("machine add"), "{msg}");
    drop(host);
    let status = std::process::Command::new("sh")
        .arg("-c")
        .arg(fix)
        .stdin(std::process::Stdio::null())
        .status()
        .unwrap();
    assert!(status.success(), "{fix}");

    let mut host = Host::spawn(local.path(), &env);
    host.hello();
    let ready = host.start("/x");
    assert_eq!(ready["type"], "ready", "{ready}");
    host.send("cancel", json!({"requestId": "c:1"}));
    assert_eq!(host.next_non_screen(T)["status"], "closed");
}
