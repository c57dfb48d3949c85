//! The chat helper (`provider/src/chat/chat.sh`) as a file: shellcheck-clean, and the same
//! behaviour under dash, `bash --posix` and busybox sh. This test plays the provider's side of
//! the turn directory (it writes `status`, `out`, `err` and `closed` as the provider does).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use remote_runner_provider::chat::CHAT_SCRIPT;

const AGENT_EXAMPLE: &str = include_str!("../../examples/botmux/chat-agent.sh");

use remote_runner_testkit::need_tool as need;

#[test]
fn helper_and_example_are_shellcheck_clean() {
    let shellcheck = need("shellcheck");
    let dir = tempfile::tempdir().unwrap();
    for (name, text) in [("chat.sh", CHAT_SCRIPT), ("chat-agent.sh", AGENT_EXAMPLE)] {
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        let out = Command::new(&shellcheck)
            .args(["-s", "sh"])
            .arg(&path)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "shellcheck {name}:\n{}",
            String::from_utf8_lossy(&out.stdout)
        );
    }
}

/// The shells the helper must behave the same under.
fn shells() -> Vec<Vec<String>> {
    vec![
        vec![need("dash").display().to_string()],
        vec![need("bash").display().to_string(), "--posix".into()],
        vec![need("busybox").display().to_string(), "sh".into()],
    ]
}

struct Turn {
    _dir: tempfile::TempDir,
    turn_dir: PathBuf,
    script: PathBuf,
    /// The session's state directory as the provider passes it: its `shell.pid` names this
    /// test process, which starts every call (so each is the "turn's own").
    session: PathBuf,
}

impl Turn {
    fn new() -> Turn {
        let dir = tempfile::tempdir().unwrap();
        let turn_dir = dir.path().join("turn");
        std::fs::create_dir_all(turn_dir.join("chat")).unwrap();
        let script = dir.path().join("chat.sh");
        std::fs::write(&script, CHAT_SCRIPT).unwrap();
        let session = dir.path().join("session-state");
        std::fs::create_dir_all(&session).unwrap();
        std::fs::write(
            session.join("shell.pid"),
            format!("{}\n", std::process::id()),
        )
        .unwrap();
        Turn {
            _dir: dir,
            turn_dir,
            script,
            session,
        }
    }

    fn call(&self, shell: &[String], args: &[&str], env: &[(&str, &str)]) -> Child {
        let mut cmd = Command::new(&shell[0]);
        cmd.args(&shell[1..])
            .arg(&self.script)
            .args(args)
            .env("RR_TURN_DIR", &self.turn_dir)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        for (k, v) in env {
            cmd.env(k, v);
        }
        cmd.spawn().unwrap()
    }

    /// The provider's `__close` of this turn's chat, run to its end.
    fn close(&self, shell: &[String]) -> std::process::Output {
        let chat = self.turn_dir.join("chat");
        Command::new(&shell[0])
            .args(&shell[1..])
            .arg(&self.script)
            .args([
                "__close",
                chat.to_str().unwrap(),
                self.session.to_str().unwrap(),
            ])
            .output()
            .unwrap()
    }

    fn call_dir(&self, n: u64) -> PathBuf {
        self.turn_dir.join("chat").join(n.to_string())
    }

    /// Wait until call `n` is ready, as the provider's watch does.
    fn ready(&self, n: u64) -> PathBuf {
        let dir = self.call_dir(n);
        let deadline = Instant::now() + Duration::from_secs(10);
        while !dir.join("ready").exists() {
            assert!(Instant::now() < deadline, "call {n} never became ready");
            std::thread::sleep(Duration::from_millis(20));
        }
        dir
    }
}

/// Write a reply as the provider does: out, err, then status.
fn reply(dir: &Path, out: &str, err: &str, status: i32) {
    std::fs::write(dir.join("out"), out).unwrap();
    std::fs::write(dir.join("err"), err).unwrap();
    std::fs::write(dir.join("status"), format!("{status}\n")).unwrap();
}

fn finish(child: Child) -> (i32, String, String) {
    let Output {
        status,
        stdout,
        stderr,
        ..
    } = child.wait_with_output().unwrap();
    (
        status.code().unwrap_or(-1),
        String::from_utf8_lossy(&stdout).into_owned(),
        String::from_utf8_lossy(&stderr).into_owned(),
    )
}

fn read(path: PathBuf) -> String {
    std::fs::read_to_string(path).unwrap()
}

#[test]
fn send_and_tool_write_the_request_and_replay_the_reply() {
    for shell in shells() {
        let turn = Turn::new();
        let child = turn.call(
            &shell,
            &[
                "send",
                "--auxiliary",
                "--mention-requester",
                "it's",
                "$HOME \"quoted\"",
            ],
            &[],
        );
        let dir = turn.ready(1);
        assert_eq!(read(dir.join("kind")), "send\n", "{shell:?}");
        assert_eq!(read(dir.join("opts")), "auxiliary requester\n");
        assert_eq!(read(dir.join("content")), "it's $HOME \"quoted\"");
        reply(&dir, "om_1\n", "", 0);
        assert_eq!(
            finish(child),
            (0, "om_1\n".into(), String::new()),
            "{shell:?}"
        );

        let child = turn.call(
            &shell,
            &["tool", "--id", "k-1", r#"{"tool":"history","limit":3}"#],
            &[],
        );
        let dir = turn.ready(2);
        assert_eq!(read(dir.join("request")), r#"{"tool":"history","limit":3}"#);
        assert_eq!(read(dir.join("key")), "k-1");
        reply(&dir, "{\"total\":1}\n", "tool note\n", 7);
        assert_eq!(
            finish(child),
            (7, "{\"total\":1}\n".into(), "tool note\n".into()),
            "{shell:?}"
        );

        // Short forms build the request object.
        let child = turn.call(
            &shell,
            &["history", "--limit", "2", "--scope", "thread", "--cards"],
            &[],
        );
        let dir = turn.ready(3);
        assert_eq!(
            read(dir.join("request")),
            r#"{"tool":"history","limit":2,"scope":"thread","withCardJson":true}"#
        );
        reply(&dir, "", "outbound_rate_limited: too many\n", 3);
        assert_eq!(finish(child).0, 3);
        let child = turn.call(
            &shell,
            &["skill", "read", "my-skill", "docs/a \"b\".md"],
            &[],
        );
        let dir = turn.ready(4);
        assert_eq!(
            read(dir.join("request")),
            r#"{"tool":"skill.read","name":"my-skill","path":"docs/a \"b\".md"}"#
        );
        reply(&dir, "", "", 0);
        assert_eq!(finish(child).0, 0);
    }
}

#[test]
fn a_call_that_cannot_be_answered_says_so() {
    for shell in shells() {
        // Usage errors send nothing.
        let turn = Turn::new();
        let (code, _, err) = finish(turn.call(&shell, &["send"], &[]));
        assert_eq!(code, 2, "{shell:?}: {err}");
        let (code, _, _) = finish(turn.call(&shell, &["frobnicate"], &[]));
        assert_eq!(code, 2);
        assert!(
            std::fs::read_dir(turn.turn_dir.join("chat"))
                .unwrap()
                .next()
                .is_none()
        );

        // A closed turn: a request the provider never saw was never sent.
        let child = turn.call(&shell, &["send", "late"], &[]);
        turn.ready(1);
        std::fs::write(turn.turn_dir.join("chat/closed"), "").unwrap();
        let (code, _, err) = finish(child);
        assert_eq!(code, 3, "{shell:?}");
        assert!(err.starts_with("turn_ended:"), "{err}");
        let (code, _, _) = finish(turn.call(&shell, &["send", "after"], &[]));
        assert_eq!(code, 3);

        // The session's directory removed while waiting: it may have been sent.
        let turn = Turn::new();
        let child = turn.call(&shell, &["send", "x"], &[]);
        turn.ready(1);
        std::fs::remove_dir_all(&turn.turn_dir).unwrap();
        let (code, _, err) = finish(child);
        assert_eq!(code, 4, "{shell:?}: {err}");

        // No result within RR_CHAT_TIMEOUT: unknown.
        let turn = Turn::new();
        let (code, _, err) = finish(turn.call(&shell, &["bots"], &[("RR_CHAT_TIMEOUT", "1")]));
        assert_eq!(code, 4, "{shell:?}");
        assert!(err.starts_with("chat_timeout:"), "{err}");
        assert!(turn.call_dir(1).join("abandoned").exists());

        // Outside a turn.
        let out = Command::new(&shell[0])
            .args(&shell[1..])
            .arg(&turn.script)
            .args(["send", "x"])
            .env_remove("RR_TURN_DIR")
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2));
    }
}

#[test]
fn the_providers_verbs_watch_and_sweep() {
    for shell in shells() {
        let turn = Turn::new();
        let chat = turn.turn_dir.join("chat");
        let a = turn.call(&shell, &["send", "a"], &[]);
        let b = turn.call(&shell, &["bots"], &[]);
        turn.ready(1);
        turn.ready(2);
        let exit = turn.turn_dir.join("exit");
        let watch = |known: &str, secs: &str| {
            let out = Command::new(&shell[0])
                .args(&shell[1..])
                .arg(&turn.script)
                .args([
                    "__watch",
                    chat.to_str().unwrap(),
                    known,
                    secs,
                    exit.to_str().unwrap(),
                    turn.session.to_str().unwrap(),
                ])
                .output()
                .unwrap();
            String::from_utf8(out.stdout).unwrap()
        };
        assert_eq!(watch("0", "5"), "1\n2\n", "{shell:?}");
        let started = Instant::now();
        // Bounded by SECS on a one-second clock: between SECS - 1 and SECS.
        assert_eq!(watch("2", "2"), "1\n2\n", "bounded: nothing new");
        assert!(started.elapsed() >= Duration::from_millis(900));
        std::fs::write(&exit, "code=0\n").unwrap();
        assert_eq!(
            watch("2", "5"),
            "1\n2\n@exit\n",
            "the command's end ends the wait"
        );

        // A new provider takes over: call 1 had been sent, call 2 not.
        std::fs::write(turn.call_dir(1).join("operation"), "op-1").unwrap();
        let session = turn.turn_dir.parent().unwrap().join("session");
        std::fs::create_dir_all(session.join("turns")).unwrap();
        std::fs::rename(&turn.turn_dir, session.join("turns/t1")).unwrap();
        // (The callers' RR_TURN_DIR is gone with the rename; settle what the sweep wrote.)
        let out = Command::new(&shell[0])
            .args(&shell[1..])
            .arg(&turn.script)
            .args(["__sweep", session.to_str().unwrap()])
            .output()
            .unwrap();
        assert!(out.status.success(), "{shell:?}: {out:?}");
        let moved = session.join("turns/t1/chat");
        assert!(moved.join("closed").exists());
        assert_eq!(read(moved.join("1/status")), "4\n");
        assert!(read(moved.join("1/err")).starts_with("provider_restarted:"));
        assert_eq!(read(moved.join("2/status")), "3\n");
        let _ = finish(a);
        let _ = finish(b);
    }
}

#[test]
fn closing_lists_the_calls_the_provider_answers_and_refuses_the_rest() {
    for shell in shells() {
        let turn = Turn::new();
        let chat = turn.turn_dir.join("chat");
        let seen = turn.call(&shell, &["send", "seen"], &[]);
        turn.ready(1);
        let out = turn.close(&shell);
        assert_eq!(String::from_utf8_lossy(&out.stdout), "1\n", "{shell:?}");
        assert_eq!(read(chat.join("closed")), "1\n");
        // Call 1 was listed: it still waits for its reply, which then comes.
        std::thread::sleep(Duration::from_millis(300));
        reply(&turn.call_dir(1), "om_1\n", "", 0);
        assert_eq!(finish(seen).0, 0, "{shell:?}");
        // A call after the close is never sent.
        let (code, _, err) = finish(turn.call(&shell, &["send", "late"], &[]));
        assert_eq!(code, 3, "{shell:?}");
        assert!(err.starts_with("turn_ended:"), "{err}");
    }
}

#[test]
fn closing_a_turn_that_made_no_call_refuses_a_later_one() {
    for shell in shells() {
        let turn = Turn::new();
        let chat = turn.turn_dir.join("chat");
        // No call was made: the helper has not made the chat directory.
        std::fs::remove_dir(&chat).unwrap();
        let out = turn.close(&shell);
        assert!(out.status.success(), "{shell:?} {out:?}");
        assert_eq!(String::from_utf8_lossy(&out.stdout), "", "{shell:?}");
        assert_eq!(read(chat.join("closed")), "");
        let (code, _, err) = finish(turn.call(&shell, &["send", "late"], &[]));
        assert_eq!(code, 3, "{shell:?}");
        assert!(err.starts_with("turn_ended:"), "{err}");
    }
}

/// A call is the turn's own only when the process that wrote its `pid` is alive in the call's
/// directory and belongs to the session shell (its process session, or started by it): a call
/// left in the directory from elsewhere, or naming another call's process, is listed as
/// foreign, and so is every call when the session shell is not theirs.
#[test]
fn only_calls_made_by_the_turns_own_processes_are_proven() {
    for shell in shells() {
        let turn = Turn::new();
        let chat = turn.turn_dir.join("chat");
        let a = turn.call(&shell, &["send", "a"], &[]);
        let first = turn.ready(1);
        // A call directory made by hand, naming call 1's (genuine, waiting) process.
        let forged = turn.call_dir(7);
        std::fs::create_dir_all(&forged).unwrap();
        std::fs::copy(first.join("pid"), forged.join("pid")).unwrap();
        std::fs::write(forged.join("kind"), "send\n").unwrap();
        std::fs::write(forged.join("ready"), "").unwrap();
        // And one naming a process that is gone.
        let gone = turn.call_dir(8);
        std::fs::create_dir_all(&gone).unwrap();
        std::fs::write(gone.join("pid"), "999999999\n").unwrap();
        std::fs::write(gone.join("ready"), "").unwrap();
        let list = |session: &Path| {
            let out = Command::new(&shell[0])
                .args(&shell[1..])
                .arg(&turn.script)
                .args([
                    "__watch",
                    chat.to_str().unwrap(),
                    "0",
                    "1",
                    "",
                    session.to_str().unwrap(),
                ])
                .output()
                .unwrap();
            String::from_utf8(out.stdout).unwrap()
        };
        assert_eq!(
            list(&turn.session),
            "1\n7 foreign\n8 foreign\n",
            "{shell:?}"
        );
        // Another session: its shell is in a process session of its own and did not start
        // this call.
        let mut other = Command::new("setsid")
            .args(["sleep", "30"])
            .spawn()
            .unwrap();
        let other_session = turn.turn_dir.parent().unwrap().join("other-session");
        std::fs::create_dir_all(&other_session).unwrap();
        std::fs::write(other_session.join("shell.pid"), format!("{}\n", other.id())).unwrap();
        // (setsid forks when it is a group leader; wait until the pid is the sleep's own.)
        std::thread::sleep(Duration::from_millis(200));
        assert_eq!(
            list(&other_session),
            "1 foreign\n7 foreign\n8 foreign\n",
            "{shell:?}"
        );
        let _ = other.kill();
        let _ = other.wait();
        reply(&first, "om_1\n", "", 0);
        assert_eq!(finish(a).0, 0, "{shell:?}");
    }
}
