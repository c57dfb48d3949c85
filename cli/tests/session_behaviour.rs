//! The session behaviour suite through the CLI binary, on the `local` machine and on an SSH
//! machine against the real sshd test bed (each test runs on both): exact exit codes and
//! streams, persistent shell state, background commands, wait bounds, busy, send/read cursors,
//! logs, destroy, and a CLI killed in the middle of an exec. The JSON field names are the
//! contract's.

mod common;
mod session_bed;

use std::path::Path;

use serde_json::Value;
use session_bed::{Bed, assert_fields, eventually, signal, wait_child};

/// The exec fields the contract names.
const EXEC_FIELDS: &[&str] = &[
    "session_id",
    "command_id",
    "machine_id",
    "cwd",
    "command",
    "mode",
    "status",
    "exit_code",
    "stdout",
    "stderr",
    "stdout_truncated",
    "stderr_truncated",
    "started_at",
    "ended_at",
    "duration_ms",
    "log_file_local",
];

/// `session command show` of one command, as JSON.
fn command_show(bed: &Bed, session: &str, command_id: &str) -> Value {
    bed.json(&[
        "session",
        "command",
        "show",
        "--session",
        session,
        "--command-id",
        command_id,
    ])
}

fn create_has_the_contract_shape(bed: &Bed) {
    let work = bed.work_str();
    let v = bed.json(&[
        "session",
        "create",
        "--machine",
        &bed.machine,
        "--cwd",
        &work,
    ]);
    assert_fields(
        &v,
        &[
            "session_id",
            "machine_id",
            "cwd",
            "status",
            "backend",
            "created_at",
            "log_dir_local",
            "transcript_file_local",
        ],
    );
    assert!(v["session_id"].as_str().unwrap().starts_with("sess_"));
    assert_eq!(v["machine_id"], bed.machine.as_str());
    assert_eq!(v["cwd"], work.as_str());
    assert_eq!(v["status"], "active");
    assert_eq!(v["backend"], "tmux");
    let id = v["session_id"].as_str().unwrap();

    let shown = bed.json(&["session", "show", "--session", id]);
    assert_eq!(shown["session_id"], id);
    assert_eq!(shown["command_count"], 0);

    let list = bed.json(&["session", "list", "--machine", &bed.machine]);
    let sessions = list["sessions"].as_array().unwrap();
    assert_eq!(sessions.len(), 1, "{list}");
    assert_eq!(sessions[0]["session_id"], id);
    assert_eq!(list["summary"]["session_count"], 1);
    let other = if bed.is_ssh() { "local" } else { "nowhere" };
    let filtered = bed.run(&["session", "list", "--machine", other, "--json"]);
    if bed.is_ssh() {
        assert_eq!(filtered.json()["sessions"], serde_json::json!([]));
    } else {
        assert_eq!(filtered.code, 3, "unknown machine filter: {filtered:?}");
        assert_eq!(filtered.error()["code"], "unknown_machine");
    }
    let human = bed.run(&["session", "list"]);
    assert_eq!(human.code, 0, "{human:?}");
    assert!(human.stdout.starts_with("SESSION "), "{}", human.stdout);
    assert!(human.stdout.contains(id), "{}", human.stdout);
}
both_machines!(create_list_show, create_has_the_contract_shape);

fn exec_returns_exact_streams_and_exit_codes(bed: &Bed) {
    let s = bed.session();
    let r = bed.exec(&s, "echo out; echo err >&2; (exit 3)", &[]);
    assert_eq!(r.code, 1, "a failed command is exit 1: {r:?}");
    let v = r.json();
    assert_fields(&v, EXEC_FIELDS);
    assert_eq!(v["status"], "failed");
    assert_eq!(v["exit_code"], 3);
    assert_eq!(v["stdout"], "out\n");
    assert_eq!(v["stderr"], "err\n");
    assert_eq!(v["mode"], "wait");
    assert_eq!(v["stdout_truncated"], false);
    assert!(r.stderr.is_empty(), "--json keeps stderr quiet: {r:?}");
    let log = std::fs::read_to_string(v["log_file_local"].as_str().unwrap()).unwrap();
    assert!(log.contains("out") && log.contains("err"), "{log}");

    let passthrough = bed.exec(&s, "(exit 42)", &["--exit-code"]);
    assert_eq!(passthrough.code, 42, "{passthrough:?}");
    assert_eq!(bed.exec(&s, "true", &["--exit-code"]).code, 0);

    // Human mode: the command's own bytes on the matching streams, nothing else (no TTY).
    let human = bed.run(&[
        "session",
        "exec",
        "--session",
        &s,
        "--cmd",
        "printf 'a\\x01b\\n'; printf 'to-err' >&2; false",
    ]);
    assert_eq!(human.code, 1, "{human:?}");
    assert_eq!(human.stdout, "a\u{1}b\n");
    assert_eq!(human.stderr, "to-err");
}
both_machines!(exec_streams, exec_returns_exact_streams_and_exit_codes);

fn shell_state_persists_between_commands(bed: &Bed) {
    let s = bed.session();
    let sub = bed.at("sub");
    std::fs::create_dir_all(&sub).unwrap();
    let setup = format!(
        "cd {sub}; export RR_VAR=exported-value; alias rr_alias='echo from-alias'; \
         rr_fn() {{ echo \"fn:$1\"; }}"
    );
    let r = bed.exec(&s, &setup, &[]);
    assert_eq!(r.code, 0, "{r:?}");
    let v = bed
        .exec(&s, "pwd; echo $RR_VAR; rr_alias; rr_fn x", &[])
        .json();
    assert_eq!(v["exit_code"], 0, "{v}");
    assert_eq!(
        v["stdout"],
        format!("{sub}\nexported-value\nfrom-alias\nfn:x\n")
    );
    // --cwd moves the shell, and it stays there.
    let work = bed.work_str();
    let moved = bed.exec(&s, "pwd", &["--cwd", &work]).json();
    assert_eq!(moved["stdout"], format!("{work}\n"));
    assert_eq!(
        bed.exec(&s, "pwd", &[]).json()["stdout"],
        format!("{work}\n")
    );
}
both_machines!(shell_state, shell_state_persists_between_commands);

fn background_commands_can_be_waited_for_and_stopped(bed: &Bed) {
    let s = bed.session();
    let started = bed.exec(&s, "sleep 1; echo bg-done", &["--mode", "background"]);
    assert_eq!(started.code, 0, "{started:?}");
    let v = started.json();
    assert_fields(&v, EXEC_FIELDS);
    assert_fields(
        &v,
        &["remote_state_dir", "remote_stdout_file", "remote_exit_file"],
    );
    assert_eq!(v["status"], "running");
    assert_eq!(v["mode"], "background");
    let id = v["command_id"].as_str().unwrap();

    let done = bed.json(&[
        "session",
        "command",
        "wait",
        "--session",
        &s,
        "--command-id",
        id,
        "--timeout",
        "60",
    ]);
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(done["exit_code"], 0);
    assert_eq!(done["stdout"], "bg-done\n");
    assert_eq!(done["wait_timed_out"], false);
    let result = bed.json(&[
        "session",
        "command",
        "result",
        "--session",
        &s,
        "--command-id",
        id,
    ]);
    assert_eq!(result["stdout"], "bg-done\n");

    let long = bed.exec(&s, "sleep 300", &["--mode", "background"]).json();
    let long_id = long["command_id"].as_str().unwrap();
    let short_wait = bed.run(&[
        "session",
        "command",
        "wait",
        "--session",
        &s,
        "--command-id",
        long_id,
        "--timeout",
        "1",
        "--json",
    ]);
    assert_eq!(short_wait.code, 6, "a wait that runs out: {short_wait:?}");
    let w = short_wait.json();
    assert_eq!(w["status"], "running");
    assert_eq!(w["wait_timed_out"], true);

    let stop = [
        "session",
        "command",
        "stop",
        "--session",
        &s,
        "--command-id",
        long_id,
    ];
    let stopped = bed.json(&stop);
    assert_eq!(stopped["status"], "stopped", "{stopped}");
    let again = bed.json(&stop);
    assert_eq!(again["status"], "stopped", "stop is idempotent: {again}");

    let list = bed.json(&["session", "command", "list", "--session", &s]);
    let ids: Vec<&str> = list["commands"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["command_id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, vec![id, long_id]);
    assert_eq!(list["summary"]["command_count"], 2);
}
both_machines!(
    background,
    background_commands_can_be_waited_for_and_stopped
);

fn a_wait_timeout_leaves_the_command_running_and_its_result_recoverable(bed: &Bed) {
    let s = bed.session();
    let gate = bed.at("gate");
    let cmd = format!("while [ ! -e {gate} ]; do sleep 0.1; done; echo late; (exit 5)");
    let r = bed.exec(&s, &cmd, &["--timeout", "1"]);
    assert_eq!(r.code, 6, "the wait ran out: {r:?}");
    let v = r.json();
    assert_eq!(v["status"], "running");
    assert_eq!(v["wait_timed_out"], true);
    let id = v["command_id"].as_str().unwrap().to_string();

    let busy = bed.exec(&s, "true", &[]);
    assert_eq!(busy.code, 5, "still busy: {busy:?}");
    assert_eq!(busy.error()["code"], "busy");

    std::fs::write(&gate, "").unwrap();
    let done = eventually("the gated command to end", || {
        let v = command_show(bed, &s, &id);
        (v["status"] != "running").then_some(v)
    });
    assert_eq!(done["status"], "failed");
    assert_eq!(done["exit_code"], 5);
    assert_eq!(done["stdout"], "late\n");
    assert_eq!(bed.exec(&s, "echo free", &[]).json()["stdout"], "free\n");
}
both_machines!(
    wait_timeout,
    a_wait_timeout_leaves_the_command_running_and_its_result_recoverable
);

/// Eight CLI processes race `exec` on one session: exactly one is accepted, the others get
/// `busy` at once. The winner's command waits for a gate that opens only after the seven
/// refusals are in, so the race cannot be won twice.
fn concurrent_execs_get_busy(bed: &Bed) {
    let s = bed.session();
    let gate = bed.at("race-gate");
    let cmd = format!("while [ ! -e {gate} ]; do sleep 0.1; done; echo winner");
    let mut children: Vec<_> = (0..8)
        .map(|_| bed.spawn(&["session", "exec", "--session", &s, "--cmd", &cmd, "--json"]))
        .collect();
    let mut refused = Vec::new();
    eventually("seven busy refusals", || {
        let mut i = 0;
        while i < children.len() {
            if children[i].try_wait().unwrap().is_some() {
                let mut child = children.remove(i);
                refused.push(wait_child(&mut child));
            } else {
                i += 1;
            }
        }
        (refused.len() >= 7).then_some(())
    });
    assert_eq!(refused.len(), 7, "{refused:?}");
    for r in &refused {
        assert_eq!(r.code, 5, "{r:?}");
        assert_eq!(r.error()["code"], "busy");
    }
    std::fs::write(&gate, "").unwrap();
    let winner = wait_child(&mut children[0]);
    assert_eq!(winner.code, 0, "{winner:?}");
    assert_eq!(winner.json()["stdout"], "winner\n");
}
both_machines!(busy_race, concurrent_execs_get_busy);

/// A start that finds the foreground lock just created by another start, whose owner is not
/// written yet (or never will be: its writer died in between), is refused as `busy` with a
/// message that says so, not a failed start with no reason (one of eight racing starts once got
/// that).
fn a_lock_without_an_owner_is_busy(bed: &Bed) {
    let s = bed.session();
    let dir = bed.json(&["session", "show", "--session", &s])["remote_state_dir"]
        .as_str()
        .unwrap()
        .to_string();
    let lock = Path::new(&dir).join("busy");
    std::fs::write(&lock, "").unwrap();
    let r = bed.exec(&s, "echo hi", &[]);
    assert_eq!(r.code, 5, "{r:?}");
    assert_eq!(r.error()["code"], "busy", "{r:?}");
    let message = r.error()["message"].as_str().unwrap().to_string();
    assert!(message.contains("running another command"), "{message}");
    std::fs::remove_file(&lock).unwrap();
    assert_eq!(bed.exec(&s, "echo free", &[]).json()["stdout"], "free\n");
}
both_machines!(lock_without_owner, a_lock_without_an_owner_is_busy);

fn send_and_read_with_a_cursor(bed: &Bed) {
    let s = bed.session();
    let sent = bed.json(&[
        "session",
        "send",
        "--session",
        &s,
        "--input",
        "echo mark-$((40+1))",
    ]);
    assert_eq!(sent["enter"], true);
    let first = eventually("the first marker in the transcript", || {
        let v = bed.json(&["session", "read", "--session", &s]);
        v["text"].as_str().unwrap().contains("mark-41").then_some(v)
    });
    assert_fields(&first, &["text", "cursor", "since"]);
    assert_eq!(first["since"], 0);
    let cursor = first["cursor"].as_u64().unwrap();
    assert!(cursor > 0);

    // Partial input, then the rest: one line.
    bed.json(&[
        "session",
        "send",
        "--session",
        &s,
        "--input",
        "echo ma",
        "--no-enter",
    ]);
    bed.json(&[
        "session",
        "send",
        "--session",
        &s,
        "--input",
        "rk-$((41+1))",
    ]);
    let since = cursor.to_string();
    let second = eventually("the second marker", || {
        let v = bed.json(&["session", "read", "--session", &s, "--since", &since]);
        v["text"].as_str().unwrap().contains("mark-42").then_some(v)
    });
    assert_eq!(second["since"], cursor);
    assert!(
        !second["text"].as_str().unwrap().contains("mark-41"),
        "{second}"
    );
    assert!(second["cursor"].as_u64().unwrap() > cursor);
}
both_machines!(send_read, send_and_read_with_a_cursor);

fn logs_are_ordered_and_destroy_keeps_them(bed: &Bed) {
    let s = bed.session();
    for n in 1..=3 {
        assert_eq!(bed.exec(&s, &format!("echo log-{n}"), &[]).code, 0);
    }
    let logs = bed.json(&["session", "logs", "--session", &s]);
    let entries = logs["logs"].as_array().unwrap().clone();
    assert_eq!(entries.len(), 3, "{logs}");
    for (i, e) in entries.iter().enumerate() {
        assert_eq!(e["seq"], i as u64 + 1);
        let text = std::fs::read_to_string(e["log_file_local"].as_str().unwrap()).unwrap();
        assert!(text.contains(&format!("log-{}", i + 1)), "{text}");
    }

    let destroyed = bed.json(&["session", "destroy", "--session", &s]);
    assert_eq!(destroyed["status"], "destroyed");
    assert_fields(&destroyed, &["log_dir_local", "transcript_file_local"]);
    let again = bed.json(&["session", "destroy", "--session", &s]);
    assert_eq!(again["status"], "destroyed");

    let after = bed.json(&["session", "logs", "--session", &s]);
    assert_eq!(after["logs"], Value::Array(entries.clone()));
    for e in &entries {
        assert!(std::path::Path::new(e["log_file_local"].as_str().unwrap()).exists());
    }
    assert_eq!(
        bed.json(&["session", "show", "--session", &s])["status"],
        "destroyed"
    );
    bed.json(&["session", "read", "--session", &s]);
    let refused = bed.exec(&s, "true", &[]);
    assert_eq!(refused.code, 9, "{refused:?}");
    assert_eq!(refused.error()["code"], "session_lost");
}
both_machines!(logs_destroy, logs_are_ordered_and_destroy_keeps_them);

/// SIGKILL the CLI while its command runs: a later `command show` / `wait` returns the result
/// and every byte of output.
fn a_killed_cli_leaves_a_recoverable_command(bed: &Bed) {
    let s = bed.session();
    let gate = bed.at("kill-gate");
    let cmd = format!("seq 1 20000; while [ ! -e {gate} ]; do sleep 0.1; done; echo tail-line");
    let mut child = bed.spawn(&["session", "exec", "--session", &s, "--cmd", &cmd, "--json"]);
    // Killed once the command runs on the machine (`started_at` set): a kill between the record
    // and the start is another case (killed_before_start, below).
    let id = eventually("the command to be started", || {
        let v = bed.json(&["session", "command", "list", "--session", &s]);
        let c = &v["commands"][0];
        c["started_at"].as_str()?;
        c["command_id"].as_str().map(str::to_string)
    });
    signal(&child, "KILL");
    let killed = wait_child(&mut child);
    assert_eq!(killed.code, -1, "killed by a signal: {killed:?}");
    std::fs::write(&gate, "").unwrap();

    let v = bed.json(&[
        "session",
        "command",
        "wait",
        "--session",
        &s,
        "--command-id",
        &id,
        "--timeout",
        "60",
    ]);
    assert_eq!(v["status"], "completed", "{v}");
    assert_eq!(v["exit_code"], 0);
    let mut expected: String = (1..=20000).map(|n| format!("{n}\n")).collect();
    expected.push_str("tail-line\n");
    assert_eq!(v["stdout_bytes"], expected.len() as u64);
    let full = std::fs::read_to_string(v["stdout_file_local"].as_str().unwrap()).unwrap();
    assert_eq!(full, expected);
    let shown = command_show(bed, &s, &id);
    assert_eq!(shown["exit_code"], 0);
}
both_machines!(killed_cli, a_killed_cli_leaves_a_recoverable_command);

/// SIGKILL the CLI after it stored a command's record and before the start reached the
/// machine. The test hook `REMOTE_RUNNER_TEST_STALL_BEFORE_START` (read by the engine's `exec`
/// only when set; tests alone set it) holds an exec whose text contains its value at exactly
/// that point. `command show` and `command wait` then find the command never started (no
/// `started` marker, and the process that recorded it gone) and settle it: `lost` with
/// `end_reason: never_started`, no exit code, an error saying to run it again (the CLI's exit
/// code 0: the look itself worked, as for any record), instead of `running` forever. Nothing ran, and the session goes on.
fn a_cli_killed_before_the_start_leaves_a_settled_command(bed: &Bed) {
    let s = bed.session();
    let ran = bed.at("never-started-ran");
    let cmd = format!("echo ran > {ran}");
    let mut inner = bed.command(&["session", "exec", "--session", &s, "--cmd", &cmd, "--json"]);
    inner
        .env("REMOTE_RUNNER_TEST_STALL_BEFORE_START", "never-started-ran")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let mut child = inner.spawn().unwrap();
    let id = eventually("the command to be recorded", || {
        let v = bed.json(&["session", "command", "list", "--session", &s]);
        v["commands"][0]["command_id"].as_str().map(str::to_string)
    });
    // Still held before the start: the record says running and the command has not started.
    let v = command_show(bed, &s, &id);
    assert_eq!(v["status"], "running", "{v}");
    assert!(v["started_at"].is_null(), "{v}");
    signal(&child, "KILL");
    let killed = wait_child(&mut child);
    assert_eq!(killed.code, -1, "killed by a signal: {killed:?}");

    let shown = bed.run(&[
        "session",
        "command",
        "show",
        "--session",
        &s,
        "--command-id",
        &id,
        "--json",
    ]);
    assert_eq!(shown.code, 0, "{shown:?}");
    let v = shown.json();
    assert_eq!(v["status"], "lost", "{v}");
    assert_eq!(v["end_reason"], "never_started", "{v}");
    assert!(v["exit_code"].is_null(), "{v}");
    assert!(v["started_at"].is_null(), "{v}");
    let error = v["error"].as_str().unwrap();
    assert!(
        error.contains("never started") && error.contains("run it again"),
        "{error}"
    );
    let waited = bed.run(&[
        "session",
        "command",
        "wait",
        "--session",
        &s,
        "--command-id",
        &id,
        "--timeout",
        "5",
        "--json",
    ]);
    assert_eq!(waited.code, 0, "{waited:?}");
    assert_eq!(waited.json()["end_reason"], "never_started");
    assert!(!std::path::Path::new(&ran).exists(), "the command ran");
    let next = bed.exec(&s, "echo after", &[]);
    assert_eq!(next.code, 0, "{next:?}");
    assert_eq!(next.json()["stdout"], "after\n");
}
both_machines!(
    killed_before_start,
    a_cli_killed_before_the_start_leaves_a_settled_command
);

/// Sparse output (issue 28): `session exec` of a command printing a 1 GiB hole keeps and prints
/// only the output cap (`REMOTE_RUNNER_OUTPUT_CAP`, here 8M), streamed rather than held in
/// memory, and says on stderr how much there was; the record has the true size and `capped`.
fn sparse_output_is_capped_and_streamed(bed: &Bed) {
    let s = bed.session();
    let inner = bed.command(&[
        "session",
        "exec",
        "--session",
        &s,
        "--cmd",
        "truncate -s 1G hole.bin && cat hole.bin; rm -f hole.bin",
    ]);
    let dir = tempfile::tempdir().unwrap();
    let (out, err, rss) = (
        dir.path().join("out"),
        dir.path().join("err"),
        dir.path().join("rss"),
    );
    let mut cmd = std::process::Command::new("/usr/bin/time");
    cmd.arg("-o")
        .arg(&rss)
        .args(["-f", "%M"])
        .arg(inner.get_program())
        .args(inner.get_args())
        .env("REMOTE_RUNNER_OUTPUT_CAP", "8M")
        .stdout(std::fs::File::create(&out).unwrap())
        .stderr(std::fs::File::create(&err).unwrap());
    for (k, v) in inner.get_envs() {
        match v {
            Some(v) => cmd.env(k, v),
            None => cmd.env_remove(k),
        };
    }
    let status = cmd.status().unwrap();
    let said = std::fs::read_to_string(&err).unwrap();
    assert!(status.success(), "{status:?} {said}");
    assert_eq!(std::fs::metadata(&out).unwrap().len(), 8 << 20);
    assert!(
        said.contains("[stdout: 1073741824 bytes in all; only the first 8388608 are kept here"),
        "{said}"
    );
    let max_rss_kib: u64 = std::fs::read_to_string(&rss)
        .unwrap()
        .lines()
        .last()
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(
        max_rss_kib < 200 * 1024,
        "the CLI peaked at {max_rss_kib} KiB"
    );

    let mut show = bed.command(&["session", "command", "list", "--session", &s, "--json"]);
    show.env("REMOTE_RUNNER_OUTPUT_CAP", "8M");
    let list = common::run_command(show, None).json();
    let rec = &list["commands"][0];
    assert_eq!(rec["stdout_bytes"], 1u64 << 30, "{rec}");
    assert_eq!(rec["stdout_capped"], true);
    assert_eq!(rec["stderr_capped"], false);

    let mut bad = bed.command(&["session", "list", "--json"]);
    bad.env("REMOTE_RUNNER_OUTPUT_CAP", "lots");
    let r = common::run_command(bad, None);
    assert_ne!(r.code, 0);
    assert_eq!(r.error()["code"], "invalid_argument", "{r:?}");
    assert!(r.stderr.contains("REMOTE_RUNNER_OUTPUT_CAP"), "{r:?}");
}
both_machines!(sparse_output, sparse_output_is_capped_and_streamed);

/// A prompt: `exec` and `command wait` (without --timeout: it would otherwise wait for ever)
/// return at once with `waiting_input` (exit 6: the command goes on), and `send` answers it and
/// returns the reply with the command's end.
fn a_prompt_is_reported_and_answered(bed: &Bed) {
    let s = bed.session();
    let started = std::time::Instant::now();
    let r = bed.exec(&s, "read -p 'name? ' n; echo \"hi $n\"", &[]);
    assert_eq!(r.code, 6, "{r:?}");
    let v = r.json();
    assert_eq!(
        (v["status"].as_str(), v["last_line"].as_str()),
        (Some("waiting_input"), Some("name? "))
    );
    let c = v["command_id"].as_str().unwrap().to_string();
    let w = bed.run(&[
        "session",
        "command",
        "wait",
        "--session",
        &s,
        "--command-id",
        &c,
        "--json",
    ]);
    assert_eq!(
        (w.code, w.json()["status"].as_str()),
        (6, Some("waiting_input")),
        "{w:?}"
    );
    assert!(started.elapsed() < std::time::Duration::from_secs(20));
    let sent = bed.json(&["session", "send", "--session", &s, "--input", "bob"]);
    assert_eq!(
        (
            sent["output"].as_str(),
            sent["status"].as_str(),
            sent["exit_code"].as_i64()
        ),
        (Some("hi bob\n"), Some("completed"), Some(0)),
        "{sent}"
    );
    let bad = bed.run(&[
        "session",
        "send",
        "--session",
        &s,
        "--key",
        "C-c;",
        "--json",
    ]);
    assert_eq!(
        (bad.code, bad.error()["code"].as_str()),
        (2, Some("invalid_argument")),
        "{bad:?}"
    );
}
both_machines!(prompt_answered, a_prompt_is_reported_and_answered);
