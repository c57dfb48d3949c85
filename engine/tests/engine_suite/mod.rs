//! Behaviour suite of the session engine, written against any [`Transport`]: each function takes
//! the transport and a writable directory on that machine. `engine_local.rs` runs it on this
//! host with real tmux; an SSH runner can call the same functions.

#![allow(dead_code)]

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use remote_runner_engine::ErrorCode;
use remote_runner_engine::engine::{
    CommandRecord, CommandStatus, Engine, EngineOptions, ExecRequest, FixedConnector, OutputStream,
    SendEnd, SendRequest, SessionRecord, SessionStatus,
};
use remote_runner_engine::machine::Machine;
use remote_runner_engine::remote::Remote;
use remote_runner_engine::transport::ExecOptions;

/// One engine, one session, a private tmux server socket, a private state dir.
pub struct Bed {
    pub t: Arc<Remote>,
    pub engine: Engine,
    pub session: SessionRecord,
    pub dir: String,
    pub state: tempfile::TempDir,
    pub options: EngineOptions,
    _guard: TmuxGuard,
}

/// Set by a runner to run the suite with kept tmux control clients
/// ([`EngineOptions::terminal_clients`]): commands after a session's first are then typed
/// through the session's control client (one runner process per setting).
pub static TERMINAL_CLIENTS: AtomicBool = AtomicBool::new(false);

pub fn options(env: Vec<(String, String)>) -> EngineOptions {
    EngineOptions {
        tmux_socket: format!("rrtest-{}", uuid::Uuid::new_v4().simple()),
        session_env: env,
        terminal_clients: TERMINAL_CLIENTS.load(Ordering::SeqCst),
        ..Default::default()
    }
}

/// Every test of the suite, for a runner (`engine_local.rs`, `engine_local_typed.rs`,
/// `engine_ssh.rs`): `$runner!` called with the name of each.
#[allow(unused_macros)]
macro_rules! every_test {
    ($runner:ident) => {
        $runner!(
            background_command_with_stdin,
            transcript_is_what_a_person_saw,
            transcript_shows_output_as_it_comes,
            transcript_is_capped,
            exec_returns_waiting_input,
            stop_records_interrupt,
            send_python_repl,
            send_answers_yes_no,
            send_ctrl_c_interrupts,
            send_quits_pager,
            send_wait_for_times_out,
            send_quiet_on_chatty_program,
            send_to_the_shell,
            exec_exact_exit_codes,
            stdout_stderr_separated,
            shell_state_persists,
            exec_env_is_exported_not_typed,
            heredocs,
            unbalanced_quotes,
            history_characters,
            big_command,
            command_text_at_the_inline_limit,
            binary_and_escape_output,
            huge_output,
            sparse_output_is_capped,
            fake_end_markers,
            terminal_escapes_in_output_are_data,
            set_e_ends_command_not_session,
            exit_keeps_output_code_and_session,
            dead_tmux_server_is_lost,
            trailing_ampersand,
            read_answered_by_send,
            pager_does_not_hang,
            stop_escalates_past_ignored_sigint,
            stop_foreground_and_idempotent,
            background_run_wait_stop,
            crlf_command,
            non_utf8_locale,
            hostile_bashrc_quiet,
            busy_on_concurrent_exec,
            wait_timeout_then_result,
            transcript_read_with_cursor,
            logs_in_order_and_destroy_keeps_records,
            recovery_after_killed_caller,
            screen_and_resize,
            shell_killed_restarts,
            terminal_busy_after_send,
            partial_input_is_cleared,
            parallel_waiters_all_woken,
            streaming_output_by_offset,
            destroy_stops_running_commands,
            session_read_shows_commands_and_output,
            old_command_dirs_are_pruned,
            transcript_keeps_output_the_machine_pruned,
            destroy_removes_remote_state_unless_kept,
            session_shell_is_isolated,
            git_repo_cwd_leaves_no_trace,
            user_settings_cannot_break_mechanism,
            hostile_dir_names_are_data,
            cwd_control_characters_are_data,
            garbled_exit_file_is_not_a_lost_session,
            exit_line_lookalike_is_not_a_lost_session,
            typed_commands_use_the_control_client,
            forged_marks_in_output_are_text,
            forged_end_notices_end_nothing,
        );
    };
}
#[allow(unused_imports)]
pub(crate) use every_test;

pub async fn bed(t: Arc<Remote>, dir: &str) -> Bed {
    bed_with(t, dir, options(Vec::new())).await
}

pub async fn bed_with(t: Arc<Remote>, dir: &str, options: EngineOptions) -> Bed {
    let mut machine = Machine::local();
    machine.default_cwd = dir.to_string();
    bed_on(t, machine, options).await
}

/// A bed whose session is created for `machine` (its `default_cwd` is the session's cwd), e.g.
/// the real SSH machine record of a test account.
pub async fn bed_on(t: Arc<Remote>, machine: Machine, options: EngineOptions) -> Bed {
    let state = tempfile::tempdir().unwrap();
    let engine = Engine::with_options(
        state.path(),
        Arc::new(FixedConnector(t.clone())),
        options.clone(),
    )
    .unwrap();
    let dir = machine.default_cwd.clone();
    let guard = TmuxGuard(options.tmux_socket.clone());
    let session = engine
        .create_session(&machine, None)
        .await
        .unwrap_or_else(|e| panic!("session create in {dir:?} failed: {e}"));
    Bed {
        t,
        engine,
        session,
        dir,
        state,
        options,
        _guard: guard,
    }
}

/// Kills the private tmux server of a bed when the test ends, also when it panicked (the
/// machine is this host for every runner: local, or the loopback sshd). Root may talk to any
/// user's tmux server.
pub struct TmuxGuard(pub String);

impl Drop for TmuxGuard {
    fn drop(&mut self) {
        let Ok(dirs) = std::fs::read_dir("/tmp") else {
            return;
        };
        for d in dirs.flatten() {
            if !d.file_name().to_string_lossy().starts_with("tmux-") {
                continue;
            }
            // Each session has a server of its own, `<prefix>-<session id>`.
            let Ok(socks) = std::fs::read_dir(d.path()) else {
                continue;
            };
            for sock in socks.flatten() {
                if !sock.file_name().to_string_lossy().starts_with(&self.0) {
                    continue;
                }
                let _ = std::process::Command::new("tmux")
                    .arg("-S")
                    .arg(sock.path())
                    .arg("kill-server")
                    .stdout(std::process::Stdio::null())
                    .stderr(std::process::Stdio::null())
                    .status();
            }
        }
    }
}

/// Run `cmd` with POSIX `sh` on the machine, outside any session, whatever the login shell and
/// whatever its startup files print: the script goes on stdin of `exec /bin/sh -s` (a line every
/// shell parses), and only what follows a per-call marker is returned.
pub async fn sh_on(t: &Remote, cmd: &str) -> String {
    let marker = format!("rr-sh-begin-{}", uuid::Uuid::new_v4().simple());
    let script = format!("printf '%s\\n' {marker}\n{cmd}\n");
    let out = t
        .exec(
            "exec /bin/sh -s",
            ExecOptions {
                stdin: Some(script.into_bytes()),
                ..ExecOptions::default()
            },
        )
        .await
        .unwrap_or_else(|e| panic!("sh {cmd:?} failed: {e}"));
    let text = out.stdout_lossy();
    let Some((_, after)) = text.split_once(&format!("{marker}\n")) else {
        panic!(
            "sh {cmd:?}: no marker in stdout {text:?}, stderr {:?}",
            out.stderr_lossy()
        );
    };
    after.to_string()
}

impl Bed {
    pub fn sid(&self) -> &str {
        &self.session.session_id
    }

    /// A second engine on the same state dir: another CLI process.
    pub fn other_engine(&self) -> Engine {
        Engine::with_options(
            self.state.path(),
            Arc::new(FixedConnector(self.t.clone())),
            self.options.clone(),
        )
        .unwrap()
    }

    pub async fn run(&self, cmd: &str) -> CommandRecord {
        self.engine
            .exec(
                self.sid(),
                cmd,
                ExecRequest::wait().with_timeout(Duration::from_secs(120)),
            )
            .await
            .unwrap_or_else(|e| panic!("exec {cmd:?} failed: {e}"))
    }

    pub fn stdout_bytes(&self, rec: &CommandRecord) -> Vec<u8> {
        std::fs::read(&rec.stdout_file_local).unwrap()
    }

    /// Run a plain command on the machine, outside the session.
    pub async fn sh(&self, cmd: &str) -> String {
        sh_on(self.t.as_ref(), cmd).await
    }

    /// Destroy the session and stop its tmux server.
    pub async fn finish(self) {
        let _ = self.engine.destroy(self.sid()).await;
        let _ = self
            .sh(&format!(
                "tmux -L {} kill-server 2>/dev/null; true",
                self.session.tmux_socket
            ))
            .await;
    }
}

pub async fn exec_exact_exit_codes(t: Arc<Remote>, dir: &str) {
    let b = bed(t, dir).await;
    for (cmd, code) in [
        ("true", 0),
        ("false", 1),
        ("(exit 7)", 7),
        ("no_such_command_rr", 127),
        ("(exit 300)", 44),
        ("bash -c 'kill -9 $$'", 137),
    ] {
        let rec = b.run(cmd).await;
        assert_eq!(rec.exit_code, Some(code), "{cmd}: {rec:?}");
        let want = if code == 0 {
            CommandStatus::Completed
        } else {
            CommandStatus::Failed
        };
        assert_eq!(rec.status, want, "{cmd}");
        assert!(!rec.wait_timed_out);
        assert!(rec.started_at.is_some() && rec.ended_at.is_some() && rec.duration_ms.is_some());
    }
    b.finish().await;
}

pub async fn stdout_stderr_separated(t: Arc<Remote>, dir: &str) {
    let b = bed(t, dir).await;
    let rec = b
        .run("echo out1; echo err1 >&2; printf out2; printf err2 >&2")
        .await;
    assert_eq!(rec.stdout, "out1\nout2");
    assert_eq!(rec.stderr, "err1\nerr2");
    assert_eq!(
        std::fs::read(&rec.stderr_file_local).unwrap(),
        b"err1\nerr2"
    );
    let log = std::fs::read_to_string(&rec.log_file_local).unwrap();
    assert!(
        log.contains("out1\nout2") && log.contains("err1\nerr2"),
        "{log}"
    );
    b.finish().await;
}

/// An exec's extra environment is exported in the session shell before the command (and stays,
/// as a typed `export` would), for background commands too, with any value as data; the
/// command's text, record and terminal view hold none of it.
pub async fn exec_env_is_exported_not_typed(t: Arc<Remote>, dir: &str) {
    let b = bed(t, dir).await;
    let hostile = "it's $(touch /tmp/rr-env-never) `x`\nline2";
    let env = vec![
        ("RR_ENV_A".to_string(), hostile.to_string()),
        ("not a name".to_string(), "ignored".to_string()),
    ];
    let req = ExecRequest::wait()
        .with_timeout(Duration::from_secs(60))
        .with_env(env.clone());
    let rec = b
        .engine
        .exec(b.sid(), "printf '%s|' \"$RR_ENV_A\"", req)
        .await
        .unwrap();
    assert_eq!(rec.stdout, format!("{hostile}|"), "{rec:?}");
    assert_eq!(rec.command, "printf '%s|' \"$RR_ENV_A\"");
    assert!(!std::path::Path::new("/tmp/rr-env-never").exists());
    let rec = b.run("printf '%s|' \"$RR_ENV_A\"").await;
    assert_eq!(rec.stdout, format!("{hostile}|"), "it stays set: {rec:?}");
    let screen = b.engine.capture_screen(b.sid()).await.unwrap();
    assert!(!screen.text.contains("RR_ENV_A="), "{}", screen.text);
    let req = ExecRequest::background().with_env(vec![("RR_ENV_B".into(), "bg-value".into())]);
    let rec = b
        .engine
        .exec(b.sid(), "printf '%s' \"$RR_ENV_B\"", req)
        .await
        .unwrap();
    let rec = b
        .engine
        .command_wait(b.sid(), &rec.command_id, Duration::from_secs(60))
        .await
        .unwrap();
    assert_eq!(rec.stdout, "bg-value", "{rec:?}");
    b.finish().await;
}

pub async fn shell_state_persists(t: Arc<Remote>, dir: &str) {
    let b = bed(t, dir).await;
    b.run(&format!("mkdir -p {dir}/sub && cd {dir}/sub")).await;
    b.run("export RR_FOO=bar; alias rrll='echo aliased'; rrf() { echo fn-$1; }")
        .await;
    let rec = b.run("pwd; echo $RR_FOO; rrll; rrf 3").await;
    assert_eq!(rec.stdout, format!("{dir}/sub\nbar\naliased\nfn-3\n"));
    assert_eq!(
        rec.cwd,
        format!("{dir}/sub"),
        "the record names the shell's directory"
    );
    let rec = b
        .engine
        .exec(b.sid(), "pwd", ExecRequest::wait().with_cwd(dir))
        .await
        .unwrap();
    assert_eq!(rec.stdout, format!("{dir}\n"));
    let rec = b.run("pwd").await;
    assert_eq!(rec.stdout, format!("{dir}\n"), "cwd override persists");
    let rec = b
        .engine
        .exec(
            b.sid(),
            "echo ran",
            ExecRequest::wait().with_cwd("/nonexistent-rr"),
        )
        .await
        .unwrap();
    assert_eq!((rec.exit_code, rec.stdout.as_str()), (Some(1), ""));
    assert!(rec.stderr.contains("/nonexistent-rr"), "{}", rec.stderr);
    assert_eq!(rec.end_reason.as_deref(), Some("cd_failed"));
    assert_eq!(b.run("pwd").await.stdout, format!("{dir}\n"));
    b.finish().await;
}

pub async fn heredocs(t: Arc<Remote>, dir: &str) {
    let b = bed(t, dir).await;
    let rec = b
        .run("cat <<'EOF'\n$HOME `x` \"q\"\nEOF\ncat <<-PY\n\tindented\n\tPY\necho after")
        .await;
    assert_eq!(rec.stdout, "$HOME `x` \"q\"\nindented\nafter\n");
    assert_eq!(rec.exit_code, Some(0));
    // Unterminated heredoc: bash warns and uses the rest of the file; no wedge.
    let rec = b.run("cat <<EOF\nline").await;
    assert_eq!(rec.stdout, "line\n");
    assert_eq!(b.run("echo next").await.stdout, "next\n");
    b.finish().await;
}

pub async fn unbalanced_quotes(t: Arc<Remote>, dir: &str) {
    let b = bed(t, dir).await;
    for cmd in [
        "echo \"abc",
        "echo 'abc",
        "echo `abc",
        "echo $(abc",
        "echo abc \\",
    ] {
        let rec = b.run(cmd).await;
        assert!(rec.status.is_final(), "{cmd}");
        let next = b.run("echo still-here").await;
        assert_eq!(next.stdout, "still-here\n", "after {cmd}");
    }
    b.finish().await;
}

pub async fn history_characters(t: Arc<Remote>, dir: &str) {
    let b = bed(t, dir).await;
    let rec = b.run("echo \"a!b\" !! !$ '!x'").await;
    assert_eq!(rec.stdout, "a!b !! !$ !x\n");
    b.finish().await;
}

pub async fn big_command(t: Arc<Remote>, dir: &str) {
    let b = bed(t, dir).await;
    let payload = "x".repeat(200 * 1024);
    let rec = b.run(&format!("v='{payload}'\necho ${{#v}}")).await;
    assert_eq!(rec.stdout, format!("{}\n", 200 * 1024));
    b.finish().await;
}

/// Command texts on both sides of the size carried in the start call itself (beyond it the
/// text goes over SFTP first): every byte reaches the shell either way.
pub async fn command_text_at_the_inline_limit(t: Arc<Remote>, dir: &str) {
    let b = bed(t, dir).await;
    let limit = remote_runner_engine::tmux::INLINE_TEXT_MAX;
    for len in [limit - 1, limit, limit + 1] {
        // `printf '%s' '<filler>'` plus a newline is `len` bytes, quotes and `$` included.
        let head = "printf '%s' '$q\\\"";
        let filler = "y".repeat(len - head.len() - 2);
        let cmd = format!("{head}{filler}'");
        assert_eq!(cmd.len() + 1, len);
        let rec = b.run(&cmd).await;
        assert_eq!(rec.stdout, format!("$q\\\"{filler}"), "{len} bytes");
    }
    b.finish().await;
}

pub async fn binary_and_escape_output(t: Arc<Remote>, dir: &str) {
    let b = bed(t, dir).await;
    let rec = b
        .run("printf 'a\\000b\\377\\376\\033[31mred\\033[0m\\r\\n'; printf '\\300' >&2")
        .await;
    assert_eq!(b.stdout_bytes(&rec), b"a\0b\xff\xfe\x1b[31mred\x1b[0m\r\n");
    assert_eq!(std::fs::read(&rec.stderr_file_local).unwrap(), b"\xc0");
    assert_eq!(rec.stdout_bytes, 19);
    let rec = b.run("head -c 65536 /dev/urandom > r.bin; cat r.bin").await;
    let remote =
        b.t.read_file_range(&format!("{dir}/r.bin"), 0, 1 << 20)
            .await
            .unwrap();
    assert_eq!(b.stdout_bytes(&rec), remote);
    b.finish().await;
}

/// Sparse output (issue 28) costs the machine nothing: a 1 GiB hole printed by `cat` is kept
/// here only up to the output cap, as holes (the copy and the combined log stay small on the
/// disk), and the record gives the true size, says it was capped, and so does the log.
pub async fn sparse_output_is_capped(t: Arc<Remote>, dir: &str) {
    use std::os::unix::fs::MetadataExt;
    let b = bed(t, dir).await;
    let gib: u64 = 1 << 30;
    let rec = b
        .run("truncate -s 1G hole.bin && cat hole.bin && echo done >&2 && rm hole.bin")
        .await;
    assert_eq!(rec.exit_code, Some(0), "{rec:?}");
    assert_eq!(rec.stdout_bytes, gib);
    let cap = b.engine.options().output_cap;
    assert_eq!(cap, 64 << 20, "the documented default");
    assert!(rec.stdout_capped && rec.stdout_truncated && !rec.stderr_capped);
    assert_eq!(rec.stderr, "done\n");
    assert!(
        rec.stdout.contains("1073741824 bytes in all"),
        "{}",
        &rec.stdout[rec.stdout.len() - 300..]
    );
    let copy = std::fs::metadata(&rec.stdout_file_local).unwrap();
    assert_eq!(copy.len(), cap);
    assert!(
        copy.blocks() * 512 < 1 << 20,
        "{} bytes allocated for the copy",
        copy.blocks() * 512
    );
    let log = std::fs::metadata(&rec.log_file_local).unwrap();
    assert!(log.len() > cap, "the log holds the kept part");
    assert!(
        log.blocks() * 512 < 1 << 20,
        "{} bytes allocated for the log",
        log.blocks() * 512
    );
    let text = std::fs::read(&rec.log_file_local).unwrap();
    let tail = String::from_utf8_lossy(&text[text.len() - 600..]);
    assert!(
        tail.contains("[stdout: 1073741824 bytes in all; only the first 67108864 are kept here"),
        "{tail}"
    );
    // Everything under the state dir stays small.
    let du = std::process::Command::new("du")
        .args(["-sk"])
        .arg(b.state.path())
        .output()
        .unwrap();
    let kib: u64 = String::from_utf8_lossy(&du.stdout)
        .split_whitespace()
        .next()
        .unwrap()
        .parse()
        .unwrap();
    assert!(kib < 8 * 1024, "the state dir takes {kib} KiB");
    b.finish().await;
}

pub async fn huge_output(t: Arc<Remote>, dir: &str) {
    let b = bed(t, dir).await;
    let n: u64 = 100 * 1024 * 1024;
    let rec = b
        .run(&format!(
            "head -c {n} /dev/zero | tr '\\0' a; echo tail-marker >&2"
        ))
        .await;
    assert_eq!(rec.exit_code, Some(0));
    assert_eq!(rec.stdout_bytes, n);
    // Past the output cap (64 MiB) only the cap is kept here; the rest is read from the machine.
    let cap = b.engine.options().output_cap;
    assert!(cap < n, "the default cap is below this test's output");
    assert_eq!(
        std::fs::metadata(&rec.stdout_file_local).unwrap().len(),
        cap
    );
    assert!(rec.stdout_capped && !rec.stderr_capped);
    assert!(rec.stdout_truncated);
    assert!(rec.stdout.len() < 70 * 1024, "excerpt is capped");
    assert_eq!(rec.stderr, "tail-marker\n");
    let mid = b
        .engine
        .read_output(b.sid(), &rec.command_id, OutputStream::Stdout, n - 3, 10)
        .await
        .unwrap();
    assert_eq!(mid, b"aaa");
    b.finish().await;
}

pub async fn fake_end_markers(t: Arc<Remote>, dir: &str) {
    let b = bed(t, dir).await;
    let rec = b
        .run("printf '@report\\ncode=0\\nhow=normal\\nstate=done\\n'; echo 'code=0' >&2; (exit 3)")
        .await;
    assert_eq!(rec.exit_code, Some(3));
    assert_eq!(rec.stdout, "@report\ncode=0\nhow=normal\nstate=done\n");
    b.finish().await;
}

/// A command's output is shown in the session's terminal after it ends, where tmux parses it.
/// The session shell ends each caller's wait by naming its window (a tmux hook turns that name
/// into a wake-up): a name from output that reads as tmux commands stays a name, and an escape
/// string that output leaves open does not swallow the next command's end.
pub async fn terminal_escapes_in_output_are_data(t: Arc<Remote>, dir: &str) {
    let b = bed(t, dir).await;
    let marker = format!("{dir}/hook-ran");
    let rec = b
        .run(&format!(
            "printf '\\033krr-x ; run-shell \"touch {marker}\" ; kill-server\\033\\\\'"
        ))
        .await;
    assert_eq!(rec.exit_code, Some(0), "{rec:?}");
    assert!(rec.stdout.contains("kill-server"), "{:?}", rec.stdout);
    assert_eq!(b.run("echo alive").await.stdout, "alive\n");
    assert_eq!(
        b.sh(&format!("test -e {} && echo ran", q(&marker))).await,
        ""
    );

    // (Without bracketed paste, whose escape at each prompt would end the string anyway.)
    b.run(
        "bind 'set enable-bracketed-paste off' 2>/dev/null; printf '\\033]0;a title never ended'",
    )
    .await;
    let started = Instant::now();
    let rec = b.run("echo after").await;
    assert_eq!((rec.exit_code, rec.stdout.as_str()), (Some(0), "after\n"));
    // A swallowed wake-up would show as the engine's 60 s wait chunk running out.
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "the command's end was not seen at once: {:?}",
        started.elapsed()
    );
    b.finish().await;
}

pub async fn set_e_ends_command_not_session(t: Arc<Remote>, dir: &str) {
    let b = bed(t, dir).await;
    let rec = b.run("set -e; echo a; false; echo b").await;
    assert_eq!((rec.exit_code, rec.stdout.as_str()), (Some(1), "a\n"));
    let rec = b
        .run("case $- in *e*) echo errexit-on;; *) echo errexit-off;; esac; false; echo c")
        .await;
    assert_eq!(rec.stdout, "errexit-off\nc\n");
    assert_eq!(
        b.engine.session_show(b.sid()).unwrap().status,
        SessionStatus::Active
    );
    b.finish().await;
}

pub async fn dead_tmux_server_is_lost(t: Arc<Remote>, dir: &str) {
    let b = bed(t, dir).await;
    let rec = b
        .engine
        .exec(
            b.sid(),
            "sleep 300",
            ExecRequest::wait().with_timeout(Duration::from_secs(1)),
        )
        .await
        .unwrap();
    assert!(rec.wait_timed_out);
    b.sh(&format!("tmux -L {} kill-server", b.session.tmux_socket))
        .await;
    let started = Instant::now();
    let rec = b
        .engine
        .command_wait(b.sid(), &rec.command_id, Duration::from_secs(60))
        .await
        .unwrap();
    assert_eq!(rec.status, CommandStatus::Lost, "{rec:?}");
    assert!(started.elapsed() < Duration::from_secs(50), "no hang");
    assert_eq!(
        b.engine.session_show(b.sid()).unwrap().status,
        SessionStatus::Lost
    );
    let err = b
        .engine
        .exec(b.sid(), "true", ExecRequest::wait())
        .await
        .unwrap_err();
    assert_eq!(err.code, ErrorCode::SessionLost);
    b.finish().await;
}

pub async fn trailing_ampersand(t: Arc<Remote>, dir: &str) {
    let b = bed(t, dir).await;
    let rec = b.run("sleep 30 & echo started").await;
    assert_eq!((rec.exit_code, rec.stdout.as_str()), (Some(0), "started\n"));
    assert_eq!(b.run("echo next").await.stdout, "next\n");
    b.run("kill %1 2>/dev/null; true").await;
    // bash's "[1]+  Done ..." notice of a job that ended between commands is shell chatter:
    // it never lands in the next command's output.
    b.run("sleep 0.1 &").await;
    tokio::time::sleep(Duration::from_millis(600)).await;
    let next = b.run("(echo next)").await;
    assert_eq!(
        (next.stdout.as_str(), next.stderr.as_str()),
        ("next\n", ""),
        "a job notice leaked into a later command"
    );
    b.finish().await;
}

pub async fn read_answered_by_send(t: Arc<Remote>, dir: &str) {
    let b = bed(t, dir).await;
    let rec = b
        .engine
        .exec(
            b.sid(),
            "read x; echo got=$x",
            ExecRequest::wait().with_timeout(Duration::from_secs(30)),
        )
        .await
        .unwrap();
    // The wait ends as the shell's `read` sleeps on the terminal, long before its bound.
    assert_eq!(rec.status, CommandStatus::WaitingInput);
    assert!(!rec.wait_timed_out);
    b.engine.send(b.sid(), "hello there", true).await.unwrap();
    let rec = b
        .engine
        .command_wait(b.sid(), &rec.command_id, Duration::from_secs(30))
        .await
        .unwrap();
    assert_eq!(
        (rec.status, rec.stdout.as_str()),
        (CommandStatus::Completed, "got=hello there\n")
    );
    b.finish().await;
}

pub async fn pager_does_not_hang(t: Arc<Remote>, dir: &str) {
    let b = bed(t, dir).await;
    let rec = b
        .run("echo $PAGER $GIT_PAGER $GIT_TERMINAL_PROMPT; seq 1 3000 | ${PAGER:-less} | tail -n 1")
        .await;
    assert_eq!(rec.stdout, "cat cat 0\n3000\n");
    let has_less = b.sh("command -v less || true").await;
    if !has_less.trim().is_empty() {
        let rec = b.run("seq 1 3000 | less | tail -n 1").await;
        assert_eq!(rec.stdout, "3000\n");
    }
    b.finish().await;
}

pub async fn stop_escalates_past_ignored_sigint(t: Arc<Remote>, dir: &str) {
    let b = bed(t, dir).await;
    let rec = b
        .engine
        .exec(
            b.sid(),
            "trap '' INT; sleep 300",
            ExecRequest::wait().with_timeout(Duration::from_secs(1)),
        )
        .await
        .unwrap();
    assert!(rec.wait_timed_out);
    let rec = b
        .engine
        .command_stop(b.sid(), &rec.command_id)
        .await
        .unwrap();
    assert_eq!(rec.status, CommandStatus::Stopped, "{rec:?}");
    assert_eq!(rec.exit_code, Some(143));
    assert_eq!(b.run("echo alive").await.stdout, "alive\n");
    b.finish().await;
}

pub async fn stop_foreground_and_idempotent(t: Arc<Remote>, dir: &str) {
    let b = bed(t, dir).await;
    let rec = b
        .engine
        .exec(
            b.sid(),
            "echo begun; sleep 300",
            ExecRequest::wait().with_timeout(Duration::from_secs(1)),
        )
        .await
        .unwrap();
    let stopped = b
        .engine
        .command_stop(b.sid(), &rec.command_id)
        .await
        .unwrap();
    assert_eq!(
        (stopped.status, stopped.exit_code),
        (CommandStatus::Stopped, Some(130))
    );
    assert_eq!(stopped.stdout, "begun\n");
    let again = b
        .engine
        .command_stop(b.sid(), &rec.command_id)
        .await
        .unwrap();
    assert_eq!(
        (again.status, again.exit_code),
        (CommandStatus::Stopped, Some(130))
    );
    assert_eq!(b.run("echo alive").await.stdout, "alive\n");
    b.finish().await;
}

pub async fn background_run_wait_stop(t: Arc<Remote>, dir: &str) {
    let b = bed(t, dir).await;
    let bg = b
        .engine
        .exec(
            b.sid(),
            "echo bg-out; echo bg-err >&2; exit 3",
            ExecRequest::background(),
        )
        .await
        .unwrap();
    assert_eq!(
        bg.mode,
        remote_runner_engine::engine::CommandMode::Background
    );
    let done = b
        .engine
        .command_wait(b.sid(), &bg.command_id, Duration::from_secs(30))
        .await
        .unwrap();
    assert_eq!(
        (done.status, done.exit_code),
        (CommandStatus::Failed, Some(3))
    );
    assert_eq!(
        (done.stdout.as_str(), done.stderr.as_str()),
        ("bg-out\n", "bg-err\n")
    );

    let long = b
        .engine
        .exec(b.sid(), "echo start; sleep 300", ExecRequest::background())
        .await
        .unwrap();
    assert_eq!(long.status, CommandStatus::Running);
    // The session shell is free while a background command runs.
    assert_eq!(b.run("echo free").await.stdout, "free\n");
    let waited = b
        .engine
        .command_wait(b.sid(), &long.command_id, Duration::from_secs(1))
        .await
        .unwrap();
    assert!(waited.wait_timed_out && waited.status == CommandStatus::Running);
    let pid = waited.pid.expect("background pid recorded");
    let stopped = b
        .engine
        .command_stop(b.sid(), &long.command_id)
        .await
        .unwrap();
    assert_eq!(stopped.status, CommandStatus::Stopped, "{stopped:?}");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let gone = b
            .sh(&format!(
                "kill -0 -{pid} 2>/dev/null && echo alive || echo gone"
            ))
            .await;
        if gone.trim() == "gone" {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "process group {pid} survived the stop"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let again = b
        .engine
        .command_stop(b.sid(), &long.command_id)
        .await
        .unwrap();
    assert_eq!(again.status, CommandStatus::Stopped);
    b.finish().await;
}

pub async fn crlf_command(t: Arc<Remote>, dir: &str) {
    let b = bed(t, dir).await;
    let rec = b.run("printf 'a\\n'\r\necho b\r\n").await;
    assert_eq!((rec.exit_code, rec.stdout.as_str()), (Some(0), "a\nb\n"));
    b.finish().await;
}

pub async fn non_utf8_locale(t: Arc<Remote>, dir: &str) {
    let b = bed(t, dir).await;
    b.run("export LANG=C LC_ALL=C").await;
    let rec = b
        .run("printf 'caf\\351\\n'; locale 2>/dev/null | grep -c '\"C\"' >/dev/null; echo $LC_ALL")
        .await;
    assert_eq!(b.stdout_bytes(&rec), b"caf\xe9\nC\n");
    b.finish().await;
}

pub async fn busy_on_concurrent_exec(t: Arc<Remote>, dir: &str) {
    let b = bed(t, dir).await;
    let first = b
        .engine
        .exec(
            b.sid(),
            "sleep 300",
            ExecRequest::wait().with_timeout(Duration::from_millis(500)),
        )
        .await
        .unwrap();
    assert!(first.wait_timed_out);
    let err = b
        .engine
        .exec(b.sid(), "echo no", ExecRequest::wait())
        .await
        .unwrap_err();
    assert_eq!(err.code, ErrorCode::Busy, "{err}");
    assert!(err.message.contains(&first.command_id));
    let other = b.other_engine();
    let err = other
        .exec(b.sid(), "echo no", ExecRequest::wait())
        .await
        .unwrap_err();
    assert_eq!(err.code, ErrorCode::Busy);
    b.engine
        .command_stop(b.sid(), &first.command_id)
        .await
        .unwrap();
    assert_eq!(b.run("echo free").await.stdout, "free\n");
    b.finish().await;
}

pub async fn wait_timeout_then_result(t: Arc<Remote>, dir: &str) {
    let b = bed(t, dir).await;
    let rec = b
        .engine
        .exec(
            b.sid(),
            "sleep 2; echo done; (exit 4)",
            ExecRequest::wait().with_timeout(Duration::from_secs(1)),
        )
        .await
        .unwrap();
    assert_eq!(rec.status, CommandStatus::Running);
    assert!(rec.wait_timed_out);
    let shown = b
        .engine
        .command_show(b.sid(), &rec.command_id)
        .await
        .unwrap();
    assert!(!shown.wait_timed_out);
    let rec = b
        .engine
        .command_wait(b.sid(), &rec.command_id, Duration::from_secs(30))
        .await
        .unwrap();
    assert_eq!(
        (rec.status, rec.exit_code, rec.stdout.as_str()),
        (CommandStatus::Failed, Some(4), "done\n"),
        "{rec:?}"
    );
    assert!(!rec.wait_timed_out);
    assert_eq!(b.run("echo free").await.stdout, "free\n");
    b.finish().await;
}

pub async fn transcript_read_with_cursor(t: Arc<Remote>, dir: &str) {
    let b = bed(t, dir).await;
    b.engine
        .send(b.sid(), "echo $((6*7))-mark", true)
        .await
        .unwrap();
    let chunk = read_until(&b, 0, "42-mark\r\n").await;
    let cursor = chunk.cursor;
    b.engine
        .send(b.sid(), "echo $((6*8))-mark", true)
        .await
        .unwrap();
    let next = read_until(&b, cursor, "48-mark\r\n").await;
    assert_eq!(next.since, cursor);
    assert!(!next.text.contains("42-mark"), "{}", next.text);
    let local = std::fs::read(&b.session.transcript_file_local).unwrap();
    assert!(String::from_utf8_lossy(&local).contains("48-mark"));
    b.finish().await;
}

async fn read_until(
    b: &Bed,
    since: u64,
    needle: &str,
) -> remote_runner_engine::engine::TranscriptChunk {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let chunk = b.engine.read(b.sid(), Some(since), 1 << 20).await.unwrap();
        if chunk.text.contains(needle) {
            return chunk;
        }
        assert!(
            Instant::now() < deadline,
            "transcript never showed {needle:?}: {}",
            chunk.text
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

pub async fn logs_in_order_and_destroy_keeps_records(t: Arc<Remote>, dir: &str) {
    let b = bed(t, dir).await;
    for i in 1..=3 {
        b.run(&format!("echo n{i}")).await;
    }
    let logs = b.engine.logs(b.sid()).unwrap();
    assert_eq!(
        logs.iter().map(|l| l.seq).collect::<Vec<_>>(),
        vec![1, 2, 3]
    );
    assert_eq!(logs[2].command, "echo n3");
    let shown = b.engine.session_show(b.sid()).unwrap();
    assert_eq!((shown.command_count, shown.last_exit_code), (3, Some(0)));
    let res = b.engine.destroy(b.sid()).await.unwrap();
    assert_eq!(res.status, SessionStatus::Destroyed);
    for l in &logs {
        assert!(PathBuf::from(&l.log_file_local).exists());
    }
    assert!(PathBuf::from(&res.transcript_file_local).exists());
    let err = b
        .engine
        .exec(b.sid(), "true", ExecRequest::wait())
        .await
        .unwrap_err();
    assert_eq!(err.code, ErrorCode::SessionLost);
    let chunk = b.engine.read(b.sid(), None, 1 << 20).await.unwrap();
    assert!(chunk.bytes > 0);
    assert_eq!(b.engine.session_list().unwrap().len(), 1);
    b.finish().await;
}

pub async fn recovery_after_killed_caller(t: Arc<Remote>, dir: &str) {
    let b = bed(t, dir).await;
    let sid = b.sid().to_string();
    let other = b.other_engine();
    let task = tokio::spawn(async move {
        other
            .exec(
                &sid,
                "sleep 2; echo final-out; (exit 5)",
                ExecRequest::wait(),
            )
            .await
    });
    let deadline = Instant::now() + Duration::from_secs(30);
    // Kill the caller once the command runs on the machine (its record says it started).
    let command_id = loop {
        if let Some(c) = b.engine.command_list(b.sid()).unwrap().first() {
            let now = b.engine.command_show(b.sid(), &c.command_id).await.unwrap();
            if now.started_at.is_some() {
                break c.command_id.clone();
            }
        }
        assert!(Instant::now() < deadline, "command never started");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    task.abort();
    let _ = task.await;
    let fresh = b.other_engine();
    let rec = fresh
        .command_wait(b.sid(), &command_id, Duration::from_secs(30))
        .await
        .unwrap();
    assert_eq!(
        (rec.status, rec.exit_code),
        (CommandStatus::Failed, Some(5))
    );
    assert_eq!(
        std::fs::read(&rec.stdout_file_local).unwrap(),
        b"final-out\n"
    );
    let shown = b.engine.command_show(b.sid(), &command_id).await.unwrap();
    assert_eq!(shown.exit_code, Some(5));
    b.finish().await;
}

pub async fn screen_and_resize(t: Arc<Remote>, dir: &str) {
    let b = bed(t, dir).await;
    b.engine.resize(b.sid(), 100, 30).await.unwrap();
    // The prompt is drawn just after the shell reports ready: wait for it (bounded).
    let deadline = Instant::now() + Duration::from_secs(30);
    let screen = loop {
        let screen = b.engine.capture_screen(b.sid()).await.unwrap();
        if screen.text.starts_with('$') {
            break screen;
        }
        assert!(
            Instant::now() < deadline,
            "no prompt on screen: {:?}",
            screen.text
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!((screen.cols, screen.rows), (100, 30));
    b.engine
        .send_raw(b.sid(), b"echo raw-bytes\r")
        .await
        .unwrap();
    read_until(&b, 0, "raw-bytes\r\n").await;
    b.finish().await;
}

pub async fn terminal_busy_after_send(t: Arc<Remote>, dir: &str) {
    let b = bed(t, dir).await;
    b.engine.send(b.sid(), "sleep 300", true).await.unwrap();
    // Wait until the typed `sleep` holds the terminal (its foreground process group).
    let pid_file = format!("{}/shell.pid", b.session.remote_state_dir);
    let probe = format!(
        "read -r p < {pid_file}; read -r st < /proc/$p/stat; st=${{st##*) }}; set -- $st; \
         [ \"$6\" != \"$p\" ] && echo busy || echo idle"
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    while b.sh(&probe).await.trim() != "busy" {
        assert!(Instant::now() < deadline, "sleep never took the terminal");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let err = b
        .engine
        .exec(b.sid(), "echo hi", ExecRequest::wait())
        .await
        .unwrap_err();
    assert_eq!(err.code, ErrorCode::Busy, "{err}");
    assert!(err.message.contains("sleep"), "{err}");
    b.engine.send_raw(b.sid(), b"\x03").await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let req = ExecRequest::wait().with_timeout(Duration::from_secs(30));
        match b.engine.exec(b.sid(), "echo back", req).await {
            Ok(rec) => {
                assert_eq!(rec.stdout, "back\n");
                break;
            }
            Err(e) => {
                assert_eq!(e.code, ErrorCode::Busy);
                assert!(Instant::now() < deadline, "terminal stayed busy: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
    b.finish().await;
}

pub async fn partial_input_is_cleared(t: Arc<Remote>, dir: &str) {
    let b = bed(t, dir).await;
    b.engine.send(b.sid(), "partial-junk", false).await.unwrap();
    let rec = b.run("echo ok").await;
    assert_eq!((rec.exit_code, rec.stdout.as_str()), (Some(0), "ok\n"));
    b.finish().await;
}

pub async fn parallel_waiters_all_woken(t: Arc<Remote>, dir: &str) {
    let b = bed(t, dir).await;
    let rec = b
        .engine
        .exec(
            b.sid(),
            "sleep 2; echo woke",
            ExecRequest::wait().with_timeout(Duration::from_millis(300)),
        )
        .await
        .unwrap();
    assert!(rec.wait_timed_out);
    let (e1, e2) = (b.other_engine(), b.other_engine());
    let long = Duration::from_secs(50);
    let (r1, r2) = tokio::join!(
        e1.command_wait(b.sid(), &rec.command_id, long),
        e2.command_wait(b.sid(), &rec.command_id, long),
    );
    for r in [r1.unwrap(), r2.unwrap()] {
        assert_eq!(
            (r.status, r.stdout.as_str()),
            (CommandStatus::Completed, "woke\n")
        );
    }
    b.finish().await;
}

pub async fn streaming_output_by_offset(t: Arc<Remote>, dir: &str) {
    let b = bed(t, dir).await;
    let rec = b
        .engine
        .exec(
            b.sid(),
            "for i in 1 2 3 4; do echo line$i; echo e$i >&2; sleep 0.3; done",
            ExecRequest::background(),
        )
        .await
        .unwrap();
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let now = b
            .engine
            .wait_output(
                b.sid(),
                &rec.command_id,
                out.len() as u64,
                err.len() as u64,
                Duration::from_secs(10),
            )
            .await
            .unwrap();
        let o = b
            .engine
            .read_output(
                b.sid(),
                &rec.command_id,
                OutputStream::Stdout,
                out.len() as u64,
                1 << 20,
            )
            .await
            .unwrap();
        let e = b
            .engine
            .read_output(
                b.sid(),
                &rec.command_id,
                OutputStream::Stderr,
                err.len() as u64,
                1 << 20,
            )
            .await
            .unwrap();
        out.extend(o);
        err.extend(e);
        if now.status.is_final()
            && out.len() as u64 >= now.stdout_bytes
            && err.len() as u64 >= now.stderr_bytes
        {
            assert_eq!(now.status, CommandStatus::Completed);
            break;
        }
        assert!(Instant::now() < deadline, "command never finished");
    }
    assert_eq!(out, b"line1\nline2\nline3\nline4\n");
    assert_eq!(err, b"e1\ne2\ne3\ne4\n");
    // Reading the same offset again gives the same bytes.
    let again = b
        .engine
        .read_output(b.sid(), &rec.command_id, OutputStream::Stdout, 6, 6)
        .await
        .unwrap();
    assert_eq!(again, b"line2\n");
    b.finish().await;
}

pub async fn destroy_stops_running_commands(t: Arc<Remote>, dir: &str) {
    let b = bed(t, dir).await;
    let bg = b
        .engine
        .exec(b.sid(), "sleep 300", ExecRequest::background())
        .await
        .unwrap();
    let res = b.engine.destroy(b.sid()).await.unwrap();
    assert_eq!(res.stopped_commands, vec![bg.command_id.clone()]);
    let rec = b
        .engine
        .command_show(b.sid(), &bg.command_id)
        .await
        .unwrap();
    assert_eq!(rec.status, CommandStatus::Stopped);
    let again = b.engine.destroy(b.sid()).await.unwrap();
    assert_eq!(again.status, SessionStatus::Destroyed);
    b.finish().await;
}

pub async fn session_shell_is_isolated(t: Arc<Remote>, dir: &str) {
    let b = bed(t, dir).await;
    let rec = b
        .run("echo ${TMUX:-no-tmux} $PAGER $GIT_EDITOR $DEBIAN_FRONTEND; case $- in *H*) echo 1;; *) echo 0;; esac")
        .await;
    assert_eq!(rec.stdout, "no-tmux cat true noninteractive\n0\n");
    let mut machine = Machine::local();
    machine.default_cwd = dir.to_string();
    // Startup commands run in order in the new shell; what they set stays.
    machine.startup_commands = vec!["export RR_STARTUP=one".into(), "cd /".into()];
    let s = b.engine.create_session(&machine, None).await.unwrap();
    let rec = b
        .engine
        .exec(&s.session_id, "echo $RR_STARTUP; pwd", ExecRequest::wait())
        .await
        .unwrap();
    assert_eq!(rec.stdout, "one\n/\n");
    b.engine.destroy(&s.session_id).await.unwrap();
    // A failing one fails the create with its output and exit code.
    machine.startup_commands = vec!["echo setting-up; echo broken >&2; exit 3".into()];
    let err = b.engine.create_session(&machine, None).await.unwrap_err();
    assert_eq!(err.code, ErrorCode::StartupCommandFailed, "{err}");
    assert!(
        err.message.contains("code 3") && err.message.contains("broken"),
        "{err}"
    );
    machine.startup_commands.clear();
    let err = b
        .engine
        .create_session(&machine, Some(&format!("{dir}/does-not-exist")))
        .await
        .unwrap_err();
    assert_eq!(err.code, ErrorCode::RemoteNotFound, "{err}");
    b.finish().await;
}

pub async fn session_read_shows_commands_and_output(t: Arc<Remote>, dir: &str) {
    let b = bed(t, dir).await;
    b.run("echo visible-out; echo visible-err >&2; (exit 4)")
        .await;
    let chunk = read_until(&b, 0, "[exit 4]").await;
    let text = chunk.text.replace('\r', "");
    let cmd = text.find("$ echo visible-out;").expect("the command text");
    let out = text[cmd..].find("\nvisible-out\n").expect("stdout");
    let err = text[cmd..].find("\nvisible-err\n").expect("stderr");
    assert!(out < err, "{text}");
    // The cursor stays exact: reading from it gives only what came after.
    let next = b
        .engine
        .read(b.sid(), Some(chunk.cursor), 1 << 20)
        .await
        .unwrap();
    assert!(!next.text.contains("visible-out"), "{}", next.text);
    b.finish().await;
}

pub async fn old_command_dirs_are_pruned(t: Arc<Remote>, dir: &str) {
    let b = bed(t, dir).await;
    let mut ids = Vec::new();
    for i in 0..4 {
        ids.push(b.run(&format!("echo {i}")).await.command_id);
    }
    let running = b
        .engine
        .exec(b.sid(), "sleep 300", ExecRequest::background())
        .await
        .unwrap();
    let driver_paths = &b.session.remote_commands_dir;
    let engine_driver = remote_runner_engine::tmux::TmuxDriver::new(
        b.t.clone(),
        remote_runner_engine::tmux::SessionPaths {
            tmux_path: b.session.tmux_path.clone(),
            socket: b.session.tmux_socket.clone(),
            session_name: b.session.tmux_session.clone(),
            state_dir: b.session.remote_state_dir.clone(),
            commands_dir: driver_paths.clone(),
        },
    );
    engine_driver.prune_commands(2).await.unwrap();
    let left: Vec<String> =
        b.t.read_dir(driver_paths)
            .await
            .unwrap()
            .into_iter()
            .map(|e| e.name)
            .collect();
    // The two newest stay, and the running one whatever its age; the oldest ended ones go.
    assert!(left.contains(&running.command_id), "{left:?}");
    assert!(left.contains(&ids[3]), "{left:?}");
    assert!(
        !left.contains(&ids[0]) && !left.contains(&ids[1]),
        "{left:?}"
    );
    b.engine
        .command_stop(b.sid(), &running.command_id)
        .await
        .unwrap();
    b.finish().await;
}

/// Output the machine pruned before the transcript was first read is still in it, from the
/// local logs (a read after thousands of commands once showed only the newest 500).
pub async fn transcript_keeps_output_the_machine_pruned(t: Arc<Remote>, dir: &str) {
    let b = bed(t, dir).await;
    for i in 0..6 {
        b.run(&format!("echo pruned-output-{i}")).await;
    }
    let driver = remote_runner_engine::tmux::TmuxDriver::new(
        b.t.clone(),
        remote_runner_engine::tmux::SessionPaths {
            tmux_path: b.session.tmux_path.clone(),
            socket: b.session.tmux_socket.clone(),
            session_name: b.session.tmux_session.clone(),
            state_dir: b.session.remote_state_dir.clone(),
            commands_dir: b.session.remote_commands_dir.clone(),
        },
    );
    driver.prune_commands(2).await.unwrap();
    let left = b.t.read_dir(&b.session.remote_commands_dir).await.unwrap();
    assert_eq!(left.len(), 2, "{left:?}");
    let chunk = b.engine.read(b.sid(), None, 1 << 20).await.unwrap();
    for i in 0..6 {
        assert!(
            chunk.text.contains(&format!("\npruned-output-{i}\n")),
            "output {i} missing: {:?}",
            chunk.text
        );
    }
    b.finish().await;
}

// ---------------------------------------------------------------------------------------------
// The control plane on real hosts (issue 12) and what nobody may forge or inject (issue 21).
// ---------------------------------------------------------------------------------------------

/// Bound on every wait in the cases below: a hang shows up as `wait_timed_out`, never as a test
/// that does not end.
const BOUND: Duration = Duration::from_secs(30);

/// Run `cmd` in session `sid`, waiting at most [`BOUND`]; fails the test when the command did not
/// end within it.
async fn run_in(engine: &Engine, sid: &str, cmd: &str, req: ExecRequest) -> CommandRecord {
    let rec = engine
        .exec(sid, cmd, req.with_timeout(BOUND))
        .await
        .unwrap_or_else(|e| panic!("exec {cmd:?} failed: {e}"));
    assert!(
        !rec.wait_timed_out && rec.status.is_final(),
        "{cmd:?} did not end within {BOUND:?}: {rec:?}"
    );
    rec
}

fn q(s: &str) -> String {
    remote_runner_engine::transport::shell_quote(s)
}

/// A session whose cwd is a git repository leaves nothing in it: `git status --ignored` stays
/// clean after foreground, failing, background and cwd-override commands, and neither
/// `git clean -fdx` nor `rm -rf ./* ./.??*` in the cwd breaks the session.
pub async fn git_repo_cwd_leaves_no_trace(t: Arc<Remote>, dir: &str) {
    let repo = format!("{dir}/repo");
    let setup = sh_on(
        t.as_ref(),
        &format!(
            "set -e; git init -q {r}; cd {r}; git config user.email rr@example.invalid; \
             git config user.name rr; printf 'tracked\\n' > tracked.txt; git add tracked.txt; \
             git commit -q -m init; echo ready",
            r = q(&repo)
        ),
    )
    .await;
    assert!(setup.ends_with("ready\n"), "git setup: {setup:?}");
    let b = bed_with(t, &repo, options(Vec::new())).await;
    let rec = b.run("echo hi; echo err >&2").await;
    assert_eq!(
        (rec.stdout.as_str(), rec.stderr.as_str()),
        ("hi\n", "err\n")
    );
    assert_eq!(b.run("false").await.exit_code, Some(1));
    let bg = b
        .engine
        .exec(b.sid(), "echo bg", ExecRequest::background())
        .await
        .unwrap();
    let bg = b
        .engine
        .command_wait(b.sid(), &bg.command_id, BOUND)
        .await
        .unwrap();
    assert_eq!(bg.stdout, "bg\n");
    run_in(
        &b.engine,
        b.sid(),
        "pwd",
        ExecRequest::wait().with_cwd(&repo),
    )
    .await;

    let status = b.run("git status --porcelain --ignored").await;
    assert_eq!(
        (
            status.exit_code,
            status.stdout.as_str(),
            status.stderr.as_str()
        ),
        (Some(0), "", ""),
        "the session left files in its git working tree"
    );
    let outside = b
        .sh(&format!(
            "cd {} && git status --porcelain --ignored && echo end",
            q(&repo)
        ))
        .await;
    assert_eq!(outside, "end\n", "seen from outside the session");

    let clean = b.run("git clean -fdx").await;
    assert_eq!(
        (clean.exit_code, clean.stdout.as_str()),
        (Some(0), ""),
        "git clean found files of ours"
    );
    let next = b.run("echo alive; pwd").await;
    assert_eq!(
        (next.exit_code, next.stdout.as_str()),
        (Some(0), format!("alive\n{repo}\n").as_str()),
        "after git clean -fdx: {next:?}"
    );
    b.run("rm -rf ./* ./.??*").await;
    let next = b.run("echo alive; pwd; ls -A | wc -l").await;
    assert_eq!(
        (next.exit_code, next.stdout.as_str()),
        (Some(0), format!("alive\n{repo}\n0\n").as_str()),
        "after rm -rf ./* ./.??*: {next:?}"
    );
    assert_eq!(
        b.engine.session_show(b.sid()).unwrap().status,
        SessionStatus::Active
    );
    b.finish().await;
}

/// `exit N` ends the command, not the session: the result has code N and every byte printed
/// before it; the session goes on in a fresh shell with the same cwd and exported environment.
pub async fn exit_keeps_output_code_and_session(t: Arc<Remote>, dir: &str) {
    let b = bed(t, dir).await;
    b.run(&format!(
        "mkdir -p {d}/sub && cd {d}/sub && export RR_KEEP='kept value'",
        d = q(dir)
    ))
    .await;
    let rec = b
        .run("echo bye; printf partial; printf 'to-err\\n' >&2; exit 4")
        .await;
    assert_eq!(
        (rec.status, rec.exit_code),
        (CommandStatus::Failed, Some(4)),
        "{rec:?}"
    );
    assert_eq!(
        (rec.stdout.as_str(), rec.stderr.as_str()),
        ("bye\npartial", "to-err\n")
    );
    assert!(rec.shell_restarted, "{rec:?}");
    assert_eq!(
        b.engine.session_show(b.sid()).unwrap().status,
        SessionStatus::Active
    );
    let next = b.run("pwd; printf '%s\\n' \"$RR_KEEP\"").await;
    assert_eq!(
        (next.exit_code, next.stdout.as_str()),
        (Some(0), format!("{dir}/sub\nkept value\n").as_str()),
        "the fresh shell has the cwd and exported environment"
    );

    // Every byte, also when there are many.
    let rec = b.run("seq 1 50000; exit 6").await;
    let want: String = (1..=50000).map(|i| format!("{i}\n")).collect();
    assert_eq!(rec.exit_code, Some(6));
    assert_eq!(rec.stdout_bytes, want.len() as u64);
    assert_eq!(b.stdout_bytes(&rec), want.as_bytes());

    // A bare `exit` keeps the last status; `exit 0` is a success.
    assert_eq!(b.run("false; exit").await.exit_code, Some(1));
    let rec = b.run("exit 0").await;
    assert_eq!(
        (rec.status, rec.exit_code),
        (CommandStatus::Completed, Some(0))
    );
    let next = b.run("echo again").await;
    assert_eq!((next.exit_code, next.stdout.as_str()), (Some(0), "again\n"));
    assert_eq!(b.engine.command_list(b.sid()).unwrap().len(), 7);
    b.finish().await;
}

/// A command that kills its own shell ends (code 137, its output kept); the session goes on in
/// a fresh shell with the same cwd and exported environment.
pub async fn shell_killed_restarts(t: Arc<Remote>, dir: &str) {
    let b = bed(t, dir).await;
    b.run(&format!(
        "mkdir -p {d}/sub && cd {d}/sub && export RR_KEEP=kept",
        d = q(dir)
    ))
    .await;
    let rec = b.run("echo x; kill -9 $$").await;
    assert_eq!(
        (rec.status, rec.exit_code),
        (CommandStatus::Failed, Some(137)),
        "{rec:?}"
    );
    assert_eq!(rec.stdout, "x\n");
    assert_eq!(rec.end_reason.as_deref(), Some("shell_killed"));
    assert!(rec.shell_restarted, "{rec:?}");
    assert_eq!(
        b.engine.session_show(b.sid()).unwrap().status,
        SessionStatus::Active
    );
    let next = b.run("pwd; echo $RR_KEEP").await;
    assert_eq!(
        (next.exit_code, next.stdout.as_str()),
        (Some(0), format!("{dir}/sub\nkept\n").as_str())
    );
    // The same from a subshell aiming at the session shell.
    let rec = b.run("echo y; ( kill -9 $$ )").await;
    assert_eq!((rec.exit_code, rec.stdout.as_str()), (Some(137), "y\n"));
    assert_eq!(b.run("echo alive").await.stdout, "alive\n");
    b.finish().await;
}

/// Like [`run_in`] but reports instead of panicking: an error, or a command that did not end
/// within [`BOUND`] (it is stopped).
async fn try_run(
    engine: &Engine,
    sid: &str,
    cmd: &str,
    req: ExecRequest,
) -> Result<CommandRecord, String> {
    let rec = engine
        .exec(sid, cmd, req.with_timeout(BOUND))
        .await
        .map_err(|e| format!("exec {cmd:?} failed: {e}"))?;
    if rec.wait_timed_out || !rec.status.is_final() {
        let _ = engine.command_stop(sid, &rec.command_id).await;
        return Err(format!(
            "{cmd:?} did not end within {BOUND:?} (stopped): {rec:?}"
        ));
    }
    Ok(rec)
}

/// `Err(what)` unless `got == want`.
fn check<T: PartialEq + std::fmt::Debug>(what: &str, got: T, want: T) -> Result<(), String> {
    if got == want {
        Ok(())
    } else {
        Err(format!("{what}: got {got:?}, want {want:?}"))
    }
}

/// No shell setting a user may make in one command breaks the next: each is set in a fresh
/// session, then a command returns its exact output and exit code, a cwd override still lands
/// in the right directory, and a background command runs. Never a hang (every wait is bounded).
/// Every setting is tried; the failure lists all that broke something.
pub async fn user_settings_cannot_break_mechanism(t: Arc<Remote>, dir: &str) {
    let b = bed(t, dir).await;
    let sub = format!("{dir}/sub");
    b.run(&format!("mkdir -p {}", q(&sub))).await;
    let mut machine = Machine::local();
    machine.default_cwd = dir.to_string();
    let settings = [
        "set -C",
        "set -u",
        "set -e",
        "set -o vi",
        "shopt -s failglob",
        "shopt -s nullglob",
        "trap 'echo bye' EXIT",
        "set -Cu -o vi; shopt -s failglob nullglob; trap 'echo bye' EXIT",
        "cd() { echo HIJACK-cd; return 1; }",
        "echo() { builtin echo HIJACK-echo; }",
        "printf() { builtin echo HIJACK-printf; }",
        "source() { builtin echo HIJACK-source; }",
        ".() { builtin echo HIJACK-dot; }",
        "alias cd='echo HIJACK-cd'",
        "alias echo='echo HIJACK-echo'",
        "alias printf='echo HIJACK-printf'",
        "alias source='echo HIJACK-source'",
        "alias .='echo HIJACK-dot'",
        "exec bash",
    ];
    let mut failures = Vec::new();
    for setting in settings {
        let sess = match b.engine.create_session(&machine, None).await {
            Ok(s) => s,
            Err(e) => {
                failures.push(format!("{setting:?}: session create: {e}"));
                continue;
            }
        };
        let sid = sess.session_id.as_str();
        if let Err(f) = setting_then_commands(&b.engine, sid, setting, &sub).await {
            failures.push(format!("{setting:?}: {f}"));
        }
        let _ = b.engine.destroy(sid).await;
    }
    assert!(
        failures.is_empty(),
        "user shell settings broke the mechanism:\n{}",
        failures.join("\n")
    );
    b.finish().await;
}

async fn setting_then_commands(
    engine: &Engine,
    sid: &str,
    setting: &str,
    sub: &str,
) -> Result<(), String> {
    if setting == "exec bash" {
        // The command replaced the shell with a bash that is not the session's: nothing of ours
        // runs there until the next command, which finds it, records `exec bash` as ended by
        // the replacement, and runs in it.
        let set = engine
            .exec(
                sid,
                setting,
                ExecRequest::wait().with_timeout(Duration::from_secs(2)),
            )
            .await
            .map_err(|e| format!("exec {setting:?} failed: {e}"))?;
        let next = try_run(engine, sid, "echo after-exec", ExecRequest::wait()).await?;
        check(
            "the command after exec bash",
            (next.exit_code, next.stdout.as_str()),
            (Some(0), "after-exec\n"),
        )?;
        let set = engine
            .command_show(sid, &set.command_id)
            .await
            .map_err(|e| e.to_string())?;
        check(
            "exec bash, as recorded",
            (set.status, set.exit_code, set.shell_restarted),
            (CommandStatus::Completed, Some(0), true),
        )?;
    } else {
        let set = try_run(engine, sid, setting, ExecRequest::wait()).await?;
        check(
            "the setting itself",
            (set.status, set.exit_code, set.stdout.as_str()),
            (CommandStatus::Completed, Some(0), ""),
        )?;
    }
    let rec = try_run(
        engine,
        sid,
        "command printf 'out\\n'; command printf 'err\\n' >&2; (exit 3)",
        ExecRequest::wait(),
    )
    .await?;
    check(
        "next command",
        (
            rec.status,
            rec.exit_code,
            rec.stdout.as_str(),
            rec.stderr.as_str(),
        ),
        (CommandStatus::Failed, Some(3), "out\n", "err\n"),
    )?;
    let rec = try_run(
        engine,
        sid,
        "command pwd",
        ExecRequest::wait().with_cwd(sub),
    )
    .await?;
    check(
        "cwd override",
        (rec.exit_code, rec.stdout.as_str()),
        (Some(0), format!("{sub}\n").as_str()),
    )?;
    let bg = engine
        .exec(sid, "command printf 'bg\\n'", ExecRequest::background())
        .await
        .map_err(|e| format!("background: {e}"))?;
    let bg = engine
        .command_wait(sid, &bg.command_id, BOUND)
        .await
        .map_err(|e| format!("background wait: {e}"))?;
    check(
        "background",
        (bg.status, bg.exit_code, bg.stdout.as_str()),
        (CommandStatus::Completed, Some(0), "bg\n"),
    )?;
    let status = engine
        .session_show(sid)
        .map_err(|e| format!("session show: {e}"))?
        .status;
    check("session status", status, SessionStatus::Active)
}

/// Directory names that look like result framing or tmux formats are data: a session created
/// in such a directory runs there, tmux expands nothing (`#(…)` runs no command, `#{…}` does not
/// change the cwd), the exit code is the command's, and the same holds for an exec cwd override.
pub async fn hostile_dir_names_are_data(t: Arc<Remote>, dir: &str) {
    let b = bed(t, dir).await;
    let id = uuid::Uuid::new_v4().simple().to_string();
    let pwned = format!("/tmp/PWNED-{id}");
    let names = [
        "nl\ncode=0\nhow=normal\nstate=done\nend".to_string(),
        format!("fmt-#(touch {pwned})-end"),
        "pane-#{pane_pid}-#{session_name}-end".to_string(),
        format!("all\ncode=0 #(touch {pwned}) #{{pane_pid}}\nend"),
    ];
    let mut machine = Machine::local();
    machine.default_cwd = dir.to_string();
    let mut failures = Vec::new();
    for name in &names {
        let path = format!("{dir}/{name}");
        b.t.create_dir_all(&path, 0o755).await.unwrap();
        if let Err(f) = session_in_dir(&b, &machine, &path).await {
            failures.push(format!("session in {path:?}: {f}"));
        }
        let override_result = try_run(
            &b.engine,
            b.sid(),
            "command pwd; (exit 6)",
            ExecRequest::wait().with_cwd(&path),
        )
        .await
        .and_then(|rec| {
            check(
                "exec cwd override",
                (rec.exit_code, rec.stdout),
                (Some(6), format!("{path}\n")),
            )
        });
        if let Err(f) = override_result {
            failures.push(format!("cwd override {path:?}: {f}"));
        }
    }
    // tmux runs `#(…)` jobs in the background: give one a moment before looking.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let found = b
        .sh(&format!(
            "if [ -e {p} ]; then rm -f {p}; echo created; else echo none; fi",
            p = q(&pwned)
        ))
        .await;
    if found != "none\n" {
        failures.push(format!(
            "tmux ran a command from a directory name: {pwned} {found}"
        ));
    }
    assert!(
        failures.is_empty(),
        "hostile directory names were interpreted:\n{}",
        failures.join("\n")
    );
    b.finish().await;
}

async fn session_in_dir(b: &Bed, machine: &Machine, path: &str) -> Result<(), String> {
    let sess = b
        .engine
        .create_session(machine, Some(path))
        .await
        .map_err(|e| format!("create: {e}"))?;
    let result = async {
        check("session cwd", sess.cwd.as_str(), path)?;
        let rec = try_run(
            &b.engine,
            &sess.session_id,
            "command pwd; (exit 5)",
            ExecRequest::wait(),
        )
        .await?;
        check(
            "pwd in the session",
            (rec.exit_code, rec.stdout.as_str(), rec.cwd.as_str()),
            (Some(5), format!("{path}\n").as_str(), path),
        )
    }
    .await;
    let _ = b.engine.destroy(&sess.session_id).await;
    result
}

/// An exec cwd override holding control characters (Ctrl-U, Tab, newline, every other one) is
/// data: the command runs in that directory and nothing else runs. Every name is tried until
/// one hangs; the failure lists all that went wrong.
pub async fn cwd_control_characters_are_data(t: Arc<Remote>, dir: &str) {
    let b = bed(t, dir).await;
    let base = format!("{dir}/ctl");
    let mut names = vec![
        "u\u{15}touch INJECTED-u #".to_string(),
        "t\ttouch INJECTED-t".to_string(),
        "n\ntouch INJECTED-n\n#".to_string(),
        "all\u{15}\t\ntouch INJECTED-all\n\u{3}\u{4}".to_string(),
    ];
    for c in (1u8..0x20).chain([0x7f]) {
        names.push(format!("c{c:02x}-{}-end", c as char));
    }
    let mut failures = Vec::new();
    for name in &names {
        let path = format!("{base}/{name}");
        b.t.create_dir_all(&path, 0o755).await.unwrap();
        let result = try_run(
            &b.engine,
            b.sid(),
            "command pwd; (exit 6)",
            ExecRequest::wait().with_cwd(&path),
        )
        .await;
        match result {
            Ok(rec) => {
                if let Err(f) = check(
                    "pwd",
                    (rec.exit_code, rec.stdout),
                    (Some(6), format!("{path}\n")),
                ) {
                    failures.push(format!("cwd {path:?}: {f}"));
                }
            }
            Err(f) => {
                // A hung session is not worth probing further.
                failures.push(format!("cwd {path:?}: {f}"));
                break;
            }
        }
    }
    let injected = b.sh(&format!("find {} -name 'INJECTED-*'", q(dir))).await;
    if !injected.is_empty() {
        failures.push(format!("a cwd was typed into the shell: {injected}"));
    }
    assert!(
        failures.is_empty(),
        "control characters in a cwd were interpreted:\n{}",
        failures.join("\n")
    );
    let next = b.run("echo next").await;
    assert_eq!((next.exit_code, next.stdout.as_str()), (Some(0), "next\n"));
    b.finish().await;
}

/// The user's ~/.bashrc is sourced into the session shell: its aliases, functions and exports
/// are available to commands, yet nothing it prints (stdout, stderr, PROMPT_COMMAND) reaches a
/// command's output, and its `set -e` or prompt cannot break the mechanism. The home is a test
/// directory given as `HOME` in the session environment (the runner's real home is shared), so
/// the session's login environment must be resolved with that `HOME`; the SSH login accounts
/// (engine_shells.rs) cover a real home.
pub async fn hostile_bashrc_quiet(t: Arc<Remote>, dir: &str) {
    let home = format!("{dir}/hostile-home");
    t.create_dir_all(&home, 0o700).await.unwrap();
    let rc = "echo NOISE-FROM-BASHRC\necho NOISE-ERR-FROM-BASHRC >&2\nPS1='HOSTILE> '\n\
              PROMPT_COMMAND='echo PC-NOISE; echo PC-NOISE-ERR >&2'\nset -e\n\
              alias echo='echo HIJACK'\nalias rrll='printf \"%s\\n\" aliased-from-bashrc'\n\
              rr_rc_fn() { printf '%s\\n' fn-from-bashrc; }\nexport RR_RC_VAR=rc-var\n";
    t.write_file(&format!("{home}/.bashrc"), rc.as_bytes(), 0o644)
        .await
        .unwrap();
    t.write_file(&format!("{home}/.bash_profile"), rc.as_bytes(), 0o644)
        .await
        .unwrap();
    let b = bed_with(t, dir, options(vec![("HOME".into(), home.clone())])).await;
    let rec = b
        .run("printf '%s\\n' \"$HOME\"; false; printf 'ok\\n'")
        .await;
    assert_eq!(
        (rec.exit_code, rec.stdout.as_str(), rec.stderr.as_str()),
        (Some(0), format!("{home}\nok\n").as_str(), ""),
        "{rec:?}"
    );
    let rec = b
        .run("rrll; rr_rc_fn; printf '%s\\n' \"$RR_RC_VAR\"; echo hi")
        .await;
    assert_eq!(
        (rec.exit_code, rec.stdout.as_str(), rec.stderr.as_str()),
        (
            Some(0),
            "aliased-from-bashrc\nfn-from-bashrc\nrc-var\nHIJACK hi\n",
            ""
        ),
        "~/.bashrc aliases, functions and exports are available: {rec:?}"
    );
    let bg = b
        .engine
        .exec(
            b.sid(),
            "printf '%s\\n' \"$RR_RC_VAR\"",
            ExecRequest::background(),
        )
        .await
        .unwrap();
    let bg = b
        .engine
        .command_wait(b.sid(), &bg.command_id, BOUND)
        .await
        .unwrap();
    assert_eq!(
        (bg.stdout.as_str(), bg.stderr.as_str()),
        ("rc-var\n", ""),
        "exports reach background commands"
    );
    for rec in b.engine.command_list(b.sid()).unwrap() {
        let log = std::fs::read_to_string(&rec.log_file_local).unwrap_or_default();
        assert!(
            !log.contains("NOISE")
                && !rec.stdout.contains("NOISE")
                && !rec.stderr.contains("NOISE"),
            "startup output reached command {}: {log}",
            rec.command
        );
    }
    b.finish().await;
}

pub async fn destroy_removes_remote_state_unless_kept(t: Arc<Remote>, dir: &str) {
    let b = bed(t.clone(), dir).await;
    b.run("echo kept").await;
    let kept = b
        .engine
        .destroy_with(
            b.sid(),
            remote_runner_engine::engine::DestroyOptions {
                keep_remote_state: true,
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(kept.status, SessionStatus::Destroyed);
    let state = &b.session.remote_state_dir;
    assert!(t.stat(state).await.unwrap().is_some(), "{state} kept");
    // By default the session's directory goes with it.
    let machine = b.engine.session_show(b.sid()).unwrap().machine_id;
    let mut m = Machine::local();
    m.machine_id = machine;
    m.default_cwd = dir.to_string();
    let other = b.engine.create_session(&m, None).await.unwrap();
    b.engine.destroy(&other.session_id).await.unwrap();
    assert!(
        t.stat(&other.remote_state_dir).await.unwrap().is_none(),
        "{} removed",
        other.remote_state_dir
    );
    let _ = t
        .exec(&format!("rm -rf -- '{state}'"), ExecOptions::default())
        .await;
    b.finish().await;
}

/// Liveness comes from tmux, not from a file a command can write (issue 28): a command that
/// writes garbage into its own `exit` file (its directory is `$__rr_cur` in the session shell)
/// and then kills its shell, or goes on running, is that command's business; the session stays
/// active and the next command runs.
pub async fn garbled_exit_file_is_not_a_lost_session(t: Arc<Remote>, dir: &str) {
    let b = bed(t, dir).await;
    let active = |what: &str| {
        let session = b.engine.session_show(b.sid()).unwrap();
        assert_eq!(session.status, SessionStatus::Active, "{what}: {session:?}");
    };
    // Garbage, then the shell killed: the session shell records the truth.
    let killed = try_run(
        &b.engine,
        b.sid(),
        "printf 'garbage\\n' > \"$__rr_cur/exit\"; kill -9 $$",
        ExecRequest::wait(),
    )
    .await;
    active(&format!("{killed:?}"));
    let rec = killed.unwrap();
    assert_eq!(
        (rec.status, rec.exit_code, rec.end_reason.as_deref()),
        (CommandStatus::Failed, Some(137), Some("shell_killed")),
        "{rec:?}"
    );
    assert_eq!(b.run("echo next").await.stdout, "next\n");

    // Garbage while the command goes on: it still runs, and ends as it ends.
    let rec = b
        .engine
        .exec(
            b.sid(),
            "printf 'code=x\\n' > \"$__rr_cur/exit\"; sleep 1; echo done",
            ExecRequest::wait().with_timeout(Duration::from_millis(300)),
        )
        .await
        .unwrap();
    let waited = b
        .engine
        .command_wait(b.sid(), &rec.command_id, Duration::from_secs(20))
        .await;
    active(&format!("{waited:?}"));
    let waited = waited.unwrap();
    assert_eq!(
        (waited.status, waited.stdout.as_str()),
        (CommandStatus::Completed, "done\n"),
        "{waited:?}"
    );

    // Garbage written after the command ended, before anyone read its end: an error about that
    // command; the session goes on.
    let rec = b
        .engine
        .exec(
            b.sid(),
            "d=$__rr_cur; (sleep 1; printf 'junk\\n' > \"$d/exit\") >/dev/null 2>&1 & sleep 0.3",
            ExecRequest::wait().with_timeout(Duration::from_millis(100)),
        )
        .await
        .unwrap();
    assert_eq!(rec.status, CommandStatus::Running, "{rec:?}");
    tokio::time::sleep(Duration::from_secs(2)).await;
    let read = b
        .engine
        .command_wait(b.sid(), &rec.command_id, Duration::from_secs(5))
        .await;
    active(&format!("{read:?}"));
    let read = read.unwrap();
    assert_eq!(
        (read.status, read.exit_code, read.end_reason.as_deref()),
        (CommandStatus::Failed, None, Some("exit_garbled")),
        "{read:?}"
    );
    assert!(
        read.error.as_deref().unwrap_or("").contains("exit file"),
        "{read:?}"
    );
    assert_eq!(b.run("echo after").await.stdout, "after\n");
    b.finish().await;
}

/// Issue 42, item 10: a command writes a line that starts like an exit line but is not one
/// (`code=x`) into its own exit file, then kills its shell. The session shell's pane records
/// the truth; the session, whose pane runs a fresh shell, is never recorded lost.
pub async fn exit_line_lookalike_is_not_a_lost_session(t: Arc<Remote>, dir: &str) {
    let b = bed(t, dir).await;
    for garbage in ["code=x how=y state=z", "code= how=normal state=done"] {
        let killed = try_run(
            &b.engine,
            b.sid(),
            &format!("printf '{garbage}\\n' > \"$__rr_cur/exit\"; kill -9 $$"),
            ExecRequest::wait(),
        )
        .await;
        let session = b.engine.session_show(b.sid()).unwrap();
        assert_eq!(
            session.status,
            SessionStatus::Active,
            "{killed:?} {session:?}"
        );
        let rec = killed.unwrap();
        assert_eq!(
            (rec.status, rec.exit_code, rec.end_reason.as_deref()),
            (CommandStatus::Failed, Some(137), Some("shell_killed")),
            "{garbage}: {rec:?}"
        );
        assert_eq!(b.run("echo next").await.stdout, "next\n");
    }
    b.finish().await;
}

/// Issue 42, item 7: output that holds the session shell's terminal marks (a file the command
/// prints) is text: `session read` still shows that
/// command's `[exit N]`, the next command's `$ ...` line, and the next command's output after
/// it, never as the first one's.
pub async fn forged_marks_in_output_are_text(t: Arc<Remote>, dir: &str) {
    let b = bed(t, dir).await;
    b.run("printf 'one\\033]6973;rr-run;X\\a\\033]6973;rr-end;X\\a two\\n' > marks.txt")
        .await;
    let rec = b.run("cat marks.txt; (exit 3)").await;
    assert_eq!(rec.exit_code, Some(3), "{rec:?}");
    let next = b.run("echo next-output").await;
    assert_eq!(next.stdout, "next-output\n", "{next:?}");
    let chunk = read_until(&b, 0, "\nnext-output\n").await;
    let text = chunk.text.replace('\r', "");
    let first = text
        .find("$ cat marks.txt")
        .expect("the first command's line");
    let exit = text[first..].find("[exit 3]\n").map(|i| first + i);
    let line = text.find("$ echo next-output\n");
    let out = text.rfind("\nnext-output\n");
    assert!(
        matches!((exit, line, out), (Some(e), Some(l), Some(o)) if e < l && l < o),
        "[exit 3], then the next command's line, then its output: {text:?}"
    );
    assert!(text[first..].contains(" two\n"), "{text:?}");
    b.finish().await;
}

/// Until the session's commands are typed through its kept control client (it attaches in the
/// background after the first command).
async fn until_typed(b: &Bed) {
    let begun = Instant::now();
    loop {
        let rec = b.run("true").await;
        let path = format!("{}/claim", rec.remote_state_dir);
        if b.sh(&format!("cat -- {}", q(&path))).await == "typed" {
            return;
        }
        assert!(
            begun.elapsed() < Duration::from_secs(30),
            "no command was typed through a control client"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Issue 42, item 8: a background process left by an earlier command reads the running
/// command's id from the session's `busy` file and writes end notices for it to the terminal
/// (a control client's window name saying "exit 0, no output", and the wait-for wake name),
/// over and over; the command itself does the same to /dev/tty. Neither ends a command: each
/// reports its own exit code and output, and its record says so. With and without a kept
/// control client.
pub async fn forged_end_notices_end_nothing(t: Arc<Remote>, dir: &str) {
    const FORGE: &str = "printf '\\033krq-%s 0 normal done 1.0 1.0 00\\033\\\\' \"$id\" >/dev/tty; \
                         printf '\\033krr-%s\\033\\\\' \"$id\" >/dev/tty";
    for typed in [false, true] {
        let mut o = options(Vec::new());
        o.terminal_clients = typed;
        let b = bed_with(t.clone(), dir, o).await;
        if typed {
            until_typed(&b).await;
        }
        let stop = format!("{dir}/stray-stop-{}", b.sid());
        b.run(&format!(
            "(exec >/dev/null 2>&1 </dev/null; n=0; \
             while [ ! -e {stop} ] && [ $n -lt 1500 ]; do n=$((n+1)); \
             id=$(cat \"$__rr_sdir/busy\" 2>/dev/null); \
             if [ -n \"$id\" ]; then {FORGE}; fi; sleep 0.02; done) &",
            stop = q(&stop)
        ))
        .await;
        for i in 0..3 {
            let rec = b.run(&format!("sleep 0.5; echo real-{i}; (exit 7)")).await;
            assert_eq!(
                (rec.status, rec.exit_code, rec.stdout.as_str()),
                (
                    CommandStatus::Failed,
                    Some(7),
                    format!("real-{i}\n").as_str()
                ),
                "typed={typed}: {rec:?}"
            );
            let kept = b
                .engine
                .command_wait(b.sid(), &rec.command_id, Duration::from_secs(5))
                .await
                .unwrap();
            assert_eq!(
                (kept.status, kept.exit_code, kept.stdout.as_str()),
                (
                    CommandStatus::Failed,
                    Some(7),
                    format!("real-{i}\n").as_str()
                ),
                "typed={typed}: the record: {kept:?}"
            );
        }
        b.sh(&format!("touch {}", q(&stop))).await;
        let rec = b
            .run(&format!(
                "id=$(cat \"$__rr_sdir/busy\"); {FORGE}; sleep 0.5; echo self-real; (exit 5)"
            ))
            .await;
        assert_eq!(
            (rec.status, rec.exit_code, rec.stdout.as_str()),
            (CommandStatus::Failed, Some(5), "self-real\n"),
            "typed={typed}: {rec:?}"
        );
        assert_eq!(b.run("echo after").await.stdout, "after\n");
        b.finish().await;
    }
}

// ---------------------------------------------------------------- interactive programs (send)

/// A wait-mode command left running (its wait bounded at 1 s), for `session_send` cases.
async fn started(b: &Bed, cmd: &str) -> CommandRecord {
    let rec = b
        .engine
        .exec(
            b.sid(),
            cmd,
            ExecRequest::wait().with_timeout(Duration::from_secs(1)),
        )
        .await
        .unwrap_or_else(|e| panic!("exec {cmd:?}: {e}"));
    assert!(!rec.status.is_final(), "{cmd:?} ended early: {rec:?}");
    rec
}

fn send_req(input: Option<&str>, keys: &[&str]) -> SendRequest {
    SendRequest {
        input: input.map(str::to_string),
        keys: keys.iter().map(|k| k.to_string()).collect(),
        enter: keys.is_empty(),
        timeout: Duration::from_secs(20),
        ..Default::default()
    }
}

/// A Python REPL driven one call per line: each reply comes back in the call that typed it.
pub async fn send_python_repl(t: Arc<Remote>, dir: &str) {
    let b = bed(t, dir).await;
    let rec = started(&b, "python3 -q").await;
    let mut req = send_req(Some("x = 6*7"), &[]);
    req.wait_for = Some(">>> $".into());
    let out = b.engine.session_send(b.sid(), req).await.unwrap();
    assert!(out.matched && !out.timed_out, "{out:?}");
    assert_eq!(out.command_id.as_deref(), Some(rec.command_id.as_str()));
    assert_eq!(out.output, ">>> ");
    let mut req = send_req(Some("print(x)"), &[]);
    req.wait_for = Some(">>> $".into());
    let out = b.engine.session_send(b.sid(), req).await.unwrap();
    assert_eq!((out.output.as_str(), out.matched), ("42\n>>> ", true));
    // Without a pattern the call returns once Python reads its terminal again.
    let out = b
        .engine
        .session_send(b.sid(), send_req(Some("print(x + 1)"), &[]))
        .await
        .unwrap();
    assert_eq!(out.output, "43\n>>> ");
    assert_eq!(out.ended_by, SendEnd::WaitingInput);
    let out = b
        .engine
        .session_send(b.sid(), send_req(None, &["C-d"]))
        .await
        .unwrap();
    assert_eq!(out.ended_by, SendEnd::Ended, "{out:?}");
    assert_eq!(
        (out.status, out.exit_code),
        (Some(CommandStatus::Completed), Some(0))
    );
    b.finish().await;
}

/// A `[y/N]` question answered: the answer's effect comes back and the command ends.
pub async fn send_answers_yes_no(t: Arc<Remote>, dir: &str) {
    let b = bed(t, dir).await;
    started(
        &b,
        "printf 'Continue? [y/N] ' >&2; read a; if [ \"$a\" = y ]; then echo went-on; else exit 3; fi",
    )
    .await;
    let out = b
        .engine
        .session_send(b.sid(), send_req(Some("y"), &[]))
        .await
        .unwrap();
    assert_eq!(out.ended_by, SendEnd::Ended, "{out:?}");
    assert_eq!(out.output, "went-on\n");
    assert_eq!(out.status, Some(CommandStatus::Completed));
    b.finish().await;
}

/// Ctrl-C as a key interrupts the foreground program: exit code 130, and the session goes on.
pub async fn send_ctrl_c_interrupts(t: Arc<Remote>, dir: &str) {
    let b = bed(t, dir).await;
    let rec = started(&b, "sleep 100").await;
    let out = b
        .engine
        .session_send(b.sid(), send_req(None, &["C-c"]))
        .await
        .unwrap();
    assert_eq!(out.ended_by, SendEnd::Ended, "{out:?}");
    assert_eq!(out.exit_code, Some(130));
    let rec = b
        .engine
        .command_show(b.sid(), &rec.command_id)
        .await
        .unwrap();
    assert_eq!(rec.exit_code, Some(130));
    assert!(rec.interrupted, "{rec:?}");
    let after = b.run("echo still-here").await;
    assert_eq!(after.stdout, "still-here\n");
    b.finish().await;
}

/// A pager showing on the terminal is quit with `q`.
pub async fn send_quits_pager(t: Arc<Remote>, dir: &str) {
    let b = bed(t, dir).await;
    let pager = if b.sh("command -v less || true").await.trim().is_empty() {
        "more"
    } else {
        "less"
    };
    started(
        &b,
        &format!("seq 1 500 | {pager} >/dev/tty; echo pager-done"),
    )
    .await;
    let out = b
        .engine
        .session_send(b.sid(), send_req(None, &["q"]))
        .await
        .unwrap();
    assert_eq!(out.ended_by, SendEnd::Ended, "{out:?}");
    assert_eq!(out.output, "pager-done\n");
    b.finish().await;
}

/// A pattern that never matches: the wait runs out at its bound, with every byte that came.
pub async fn send_wait_for_times_out(t: Arc<Remote>, dir: &str) {
    let b = bed(t, dir).await;
    started(&b, "cat").await;
    let mut req = send_req(Some("hello"), &[]);
    req.wait_for = Some("never-printed".into());
    req.timeout = Duration::from_secs(2);
    let begun = Instant::now();
    let out = b.engine.session_send(b.sid(), req).await.unwrap();
    assert!(out.timed_out && !out.matched, "{out:?}");
    assert_eq!(out.ended_by, SendEnd::TimedOut);
    assert_eq!(out.output, "hello\n");
    assert!(begun.elapsed() < Duration::from_secs(10));
    assert_eq!(out.status, Some(CommandStatus::WaitingInput));
    let out = b
        .engine
        .session_send(b.sid(), send_req(None, &["C-d"]))
        .await
        .unwrap();
    assert_eq!(out.status, Some(CommandStatus::Completed), "{out:?}");
    b.finish().await;
}

/// `quiet` on a chatty program: the call returns once the output stops, with all of it.
pub async fn send_quiet_on_chatty_program(t: Arc<Remote>, dir: &str) {
    let b = bed(t, dir).await;
    started(
        &b,
        "read go; for i in 1 2 3 4 5 6 7 8; do echo line$i; sleep 0.1; done; sleep 30",
    )
    .await;
    let mut req = send_req(Some("go"), &[]);
    req.quiet = Some(Duration::from_millis(1500));
    let out = b.engine.session_send(b.sid(), req).await.unwrap();
    assert_eq!(out.ended_by, SendEnd::Quiet, "{out:?}");
    let want: String = (1..=8).map(|i| format!("line{i}\n")).collect();
    assert_eq!(out.output, want);
    assert_eq!(out.status, Some(CommandStatus::Running));
    b.engine
        .session_send(b.sid(), send_req(None, &["C-c"]))
        .await
        .unwrap();
    b.finish().await;
}

/// With nothing running, the input goes to the shell and the reply is the terminal's text,
/// without its control sequences; an unknown key name is refused before anything is typed.
pub async fn send_to_the_shell(t: Arc<Remote>, dir: &str) {
    let b = bed(t, dir).await;
    let out = b
        .engine
        .session_send(b.sid(), send_req(Some("echo $((20+22))"), &[]))
        .await
        .unwrap();
    assert_eq!(out.command_id, None);
    assert_eq!(out.ended_by, SendEnd::WaitingInput, "{out:?}");
    assert!(out.output.contains("\n42\n"), "{out:?}");
    assert!(!out.output.contains('\x1b'), "{out:?}");
    for bad in ["C-c;", "Enter kill-server", "-l"] {
        let e = b
            .engine
            .session_send(b.sid(), send_req(None, &[bad]))
            .await
            .unwrap_err();
        assert_eq!(e.code, ErrorCode::InvalidArgument, "{bad:?}");
    }
    let rec = b.run("echo fine").await;
    assert_eq!(rec.stdout, "fine\n");
    b.finish().await;
}

/// Exec a command that prompts `name? ` and reads a line: it comes back waiting for input.
async fn exec_name_prompt(b: &Bed) -> CommandRecord {
    let rec = b
        .engine
        .exec(
            b.sid(),
            "read -p 'name? ' n; echo \"hi $n\"",
            ExecRequest::wait().with_timeout(Duration::from_secs(60)),
        )
        .await
        .unwrap();
    assert_eq!(rec.status, CommandStatus::WaitingInput, "{rec:?}");
    rec
}

/// A command that stops to read its terminal is noticed from its process state: `exec` and
/// `command wait` return promptly with `waiting_input` and the prompt, and the command goes on
/// waiting for `send` (a shell builtin `read -p`, and a program: Python's REPL).
pub async fn exec_returns_waiting_input(t: Arc<Remote>, dir: &str) {
    let b = bed(t, dir).await;
    let begun = Instant::now();
    let rec = exec_name_prompt(&b).await;
    assert_eq!(rec.last_line.as_deref(), Some("name? "));
    assert!(!rec.wait_timed_out);
    assert!(
        begun.elapsed() < Duration::from_secs(10),
        "{:?}",
        begun.elapsed()
    );
    let begun = Instant::now();
    let waited = b
        .engine
        .command_wait(b.sid(), &rec.command_id, Duration::from_secs(60))
        .await
        .unwrap();
    assert_eq!(waited.status, CommandStatus::WaitingInput);
    assert!(
        begun.elapsed() < Duration::from_secs(10),
        "{:?}",
        begun.elapsed()
    );
    let out = b
        .engine
        .session_send(b.sid(), send_req(Some("bob"), &[]))
        .await
        .unwrap();
    assert_eq!(
        (out.output.as_str(), out.status),
        ("hi bob\n", Some(CommandStatus::Completed))
    );
    // A program reading its terminal: the same.
    let rec = b
        .engine
        .exec(
            b.sid(),
            "python3 -q",
            ExecRequest::wait().with_timeout(Duration::from_secs(60)),
        )
        .await
        .unwrap();
    assert_eq!(rec.status, CommandStatus::WaitingInput, "{rec:?}");
    assert_eq!(rec.last_line.as_deref(), Some(">>> "));
    b.engine
        .session_send(b.sid(), send_req(None, &["C-d"]))
        .await
        .unwrap();
    // A prompt written to the terminal itself (as password prompts are): in neither output
    // file, so the line at the terminal's cursor is the one reported.
    let rec = b
        .engine
        .exec(
            b.sid(),
            "printf 'Password: ' >/dev/tty; read -r p; echo \"got $p\"",
            ExecRequest::wait().with_timeout(Duration::from_secs(60)),
        )
        .await
        .unwrap();
    assert_eq!(rec.status, CommandStatus::WaitingInput, "{rec:?}");
    assert_eq!(rec.last_line.as_deref(), Some("Password:"), "{rec:?}");
    let out = b
        .engine
        .session_send(b.sid(), send_req(Some("s3cret"), &[]))
        .await
        .unwrap();
    assert_eq!(out.output, "got s3cret\n");
    // A command that sleeps is not waiting for input.
    let rec = b
        .engine
        .exec(
            b.sid(),
            "sleep 2; echo slept",
            ExecRequest::wait().with_timeout(Duration::from_secs(60)),
        )
        .await
        .unwrap();
    assert_eq!(
        (rec.status, rec.stdout.as_str()),
        (CommandStatus::Completed, "slept\n")
    );
    b.finish().await;
}

/// `command stop` interrupts a foreground program with Ctrl-C: the record says so.
pub async fn stop_records_interrupt(t: Arc<Remote>, dir: &str) {
    let b = bed(t, dir).await;
    let rec = started(&b, "sleep 100").await;
    let rec = b
        .engine
        .command_stop(b.sid(), &rec.command_id)
        .await
        .unwrap();
    assert_eq!(
        (rec.status, rec.exit_code, rec.interrupted),
        (CommandStatus::Stopped, Some(130), true),
        "{rec:?}"
    );
    assert_eq!(b.run("echo usable").await.stdout, "usable\n");
    b.finish().await;
}

/// The transcript is what a person at the terminal saw: the command's text as it started, the
/// input typed into it, its output; never the line the engine types or its mode switches.
pub async fn transcript_is_what_a_person_saw(t: Arc<Remote>, dir: &str) {
    let b = bed(t, dir).await;
    let rec = started(&b, "python3 -q").await;
    let mut req = send_req(Some("print(6*7)"), &[]);
    req.wait_for = Some(">>> $".into());
    b.engine.session_send(b.sid(), req).await.unwrap();
    b.engine
        .session_send(b.sid(), send_req(None, &["C-d"]))
        .await
        .unwrap();
    let done = b
        .engine
        .command_wait(b.sid(), &rec.command_id, Duration::from_secs(30))
        .await
        .unwrap();
    assert_eq!(done.status, CommandStatus::Completed);
    let chunk = read_until(&b, 0, "42").await;
    let text = chunk.text.replace('\r', "");
    let cmd = text.find("$ python3 -q\n").expect("the command text");
    let typed = text.find("print(6*7)\n").expect("the input typed");
    assert!(cmd < typed, "{text:?}");
    assert!(text[typed..].contains("42\n"), "{text:?}");
    for plumbing in ["__rr_sdir", "__rr_cdir", "\x1b[?2004h", "\x1bkrr-"] {
        assert!(!text.contains(plumbing), "{plumbing:?} in {text:?}");
    }
    b.finish().await;
}

/// `session read` shows a running command's output as it comes, interleaved with the input
/// typed into it, in order; when the command ends its output is not repeated (the terminal's
/// copy of it is left out), and a later read from the cursor gets only what is new.
pub async fn transcript_shows_output_as_it_comes(t: Arc<Remote>, dir: &str) {
    let b = bed(t, dir).await;
    let rec = started(&b, "python3 -q").await;
    let mut req = send_req(Some("print(6*7)"), &[]);
    req.wait_for = Some("42\n>>> $".into());
    b.engine.session_send(b.sid(), req).await.unwrap();
    // The REPL still runs: the reply is in the transcript already.
    let chunk = read_until(&b, 0, "42").await;
    let now = b
        .engine
        .command_show(b.sid(), &rec.command_id)
        .await
        .unwrap();
    assert!(!now.status.is_final(), "{now:?}");
    let text = chunk.text.replace('\r', "");
    let at = |needle: &str, from: usize| {
        from + text[from..]
            .find(needle)
            .unwrap_or_else(|| panic!("{needle:?} after {from} in {text:?}"))
    };
    let cmd = at("$ python3 -q\n", 0);
    let prompt = at(">>> ", cmd);
    let typed = at("print(6*7)\n", prompt);
    let reply = at("42\n>>> ", typed);
    assert!(reply > typed, "{text:?}");
    for plumbing in [
        "__rr_sdir",
        "__rr_cdir",
        "\x1b[?2004h",
        "\x1bkrr-",
        "\x1b]6973",
    ] {
        assert!(!text.contains(plumbing), "{plumbing:?} in {text:?}");
    }
    b.engine
        .session_send(b.sid(), send_req(None, &["C-d"]))
        .await
        .unwrap();
    let done = b
        .engine
        .command_wait(b.sid(), &rec.command_id, Duration::from_secs(30))
        .await
        .unwrap();
    assert_eq!(done.status, CommandStatus::Completed);

    // A loop's lines show one by one, before it ends; a read from the cursor gets only new ones.
    let cursor = read_until(&b, 0, "$ ").await.cursor;
    let rec = b
        .engine
        .exec(
            b.sid(),
            "for i in 1 2 3; do echo line-$i; sleep 1; done",
            ExecRequest::wait().with_timeout(Duration::from_millis(200)),
        )
        .await
        .unwrap();
    assert_eq!(rec.status, CommandStatus::Running, "{rec:?}");
    let first = read_until(&b, cursor, "line-1\n").await;
    let now = b
        .engine
        .command_show(b.sid(), &rec.command_id)
        .await
        .unwrap();
    assert!(!now.status.is_final(), "line-1 only after the end: {now:?}");
    assert!(!first.text.contains("line-3"), "{:?}", first.text);
    b.engine
        .command_wait(b.sid(), &rec.command_id, Duration::from_secs(30))
        .await
        .unwrap();
    let rest = read_until(&b, first.cursor, "line-3\n").await;
    assert!(!rest.text.contains("line-1"), "{:?}", rest.text);
    let all = b.engine.read(b.sid(), Some(0), 1 << 20).await.unwrap().text;
    for (needle, times) in [("line-1\n", 1), ("line-3\n", 1), ("42\n", 1)] {
        assert_eq!(all.matches(needle).count(), times, "{needle:?} in {all:?}");
    }
    b.finish().await;
}

/// The local transcript keeps at most the output cap: then a note says where the rest is, the
/// read says `capped`, and nothing more is added.
pub async fn transcript_is_capped(t: Arc<Remote>, dir: &str) {
    let mut options = options(Vec::new());
    options.output_cap = 16 << 10;
    let b = bed_with(t, dir, options).await;
    let rec = b.run("seq 1 20000").await;
    assert_eq!(rec.exit_code, Some(0));
    let chunk = b.engine.read(b.sid(), Some(0), 1 << 20).await.unwrap();
    assert!(chunk.capped, "{:?}", &chunk.text[chunk.text.len() - 200..]);
    assert!(chunk.bytes < (16 << 10) + 1024, "{} bytes", chunk.bytes);
    assert!(
        chunk
            .text
            .contains("[transcript: only its first 16384 bytes are kept here")
            && chunk.text.contains(&b.session.remote_transcript_file),
        "{}",
        &chunk.text[chunk.text.len() - 400..]
    );
    b.run("echo after-the-cap").await;
    let again = b.engine.read(b.sid(), Some(0), 1 << 20).await.unwrap();
    assert!(again.capped && again.bytes == chunk.bytes, "{again:?}");
    assert!(!again.text.contains("after-the-cap"));
    let local = std::fs::metadata(&b.session.transcript_file_local).unwrap();
    assert_eq!(local.len(), chunk.bytes);
    b.finish().await;
}

/// A background command started with `stdin` has a terminal of its own (a window of the
/// session): `session_send` with its id types there and gets its reply, while the session's
/// shell stays free; it has the shell's directory and exported environment.
pub async fn background_command_with_stdin(t: Arc<Remote>, dir: &str) {
    let b = bed(t, dir).await;
    b.run("export RR_BG_VAR=from-shell").await;
    let rec = b
        .engine
        .exec(
            b.sid(),
            "python3 -q",
            ExecRequest {
                stdin: true,
                ..ExecRequest::background()
            },
        )
        .await
        .unwrap();
    // Its first prompt, before typing (else it could come within the reply's first check).
    let deadline = Instant::now() + Duration::from_secs(30);
    while b
        .engine
        .read_output(b.sid(), &rec.command_id, OutputStream::Stderr, 0, 64)
        .await
        .unwrap()
        .is_empty()
    {
        assert!(Instant::now() < deadline, "python3 never prompted");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let mut req = send_req(
        Some("import os; print(os.environ.get('RR_BG_VAR'), os.getcwd())"),
        &[],
    );
    req.command_id = Some(rec.command_id.clone());
    req.wait_for = Some(">>> $".into());
    let out = b.engine.session_send(b.sid(), req).await.unwrap();
    assert_eq!(out.output, format!("from-shell {dir}\n>>> "), "{out:?}");
    assert_eq!(b.run("echo shell-free").await.stdout, "shell-free\n");
    let mut req = send_req(Some("print(6*7)"), &[]);
    req.command_id = Some(rec.command_id.clone());
    let out = b.engine.session_send(b.sid(), req).await.unwrap();
    assert_eq!(
        (out.output.as_str(), out.ended_by),
        ("42\n>>> ", SendEnd::WaitingInput)
    );
    let mut req = send_req(None, &["C-d"]);
    req.command_id = Some(rec.command_id.clone());
    let out = b.engine.session_send(b.sid(), req).await.unwrap();
    assert_eq!(out.status, Some(CommandStatus::Completed), "{out:?}");
    // Ended (or never given a terminal): refused with what to do.
    let mut req = send_req(Some("x"), &[]);
    req.command_id = Some(rec.command_id.clone());
    let e = b.engine.session_send(b.sid(), req).await.unwrap_err();
    assert_eq!(e.code, ErrorCode::InvalidArgument, "{e}");
    let e = b
        .engine
        .exec(
            b.sid(),
            "cat",
            ExecRequest {
                stdin: true,
                ..ExecRequest::wait()
            },
        )
        .await
        .unwrap_err();
    assert_eq!(e.code, ErrorCode::InvalidArgument, "{e}");
    b.finish().await;
}

/// A long-lived engine types commands through the session's tmux control client, attached after
/// the session's first command, and they run as any other: exact exit codes and output, shell
/// state, a command reading its terminal, a stop, one that ends the shell, and commands of a
/// second engine without clients in between.
/// Run each `(command, exit code, stdout)` in the bed's session and check what it did, and that
/// its claim file holds `claim` (`typed`: typed through the engine's control client).
async fn check_runs(b: &Bed, cases: &[(&str, i32, &str)], claim: &str) {
    for &(cmd, code, out) in cases {
        let rec = b.run(cmd).await;
        assert_eq!(
            (rec.exit_code, rec.stdout.as_str()),
            (Some(code), out),
            "{cmd}: {rec:?}"
        );
        let path = format!("{}/claim", rec.remote_state_dir);
        assert_eq!(b.sh(&format!("cat -- {}", q(&path))).await, claim, "{cmd}");
    }
}

pub async fn typed_commands_use_the_control_client(t: Arc<Remote>, dir: &str) {
    let mut o = options(Vec::new());
    o.terminal_clients = true;
    let b = bed_with(t, dir, o).await;
    assert_eq!(b.run("true").await.exit_code, Some(0));
    let client = format!(
        "-L {} -C attach-session -t ={}",
        b.session.tmux_socket, b.session.tmux_session
    );
    // The client attaches in the background after the first command: a command typed through
    // it has a `typed` claim.
    let begun = Instant::now();
    loop {
        let rec = b.run("true").await;
        let path = format!("{}/claim", rec.remote_state_dir);
        if b.sh(&format!("cat -- {}", q(&path))).await == "typed" {
            break;
        }
        assert!(
            begun.elapsed() < Duration::from_secs(30),
            "no command was typed through a control client"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        b.sh("ps -eo args").await.contains(&client),
        "no control client ({client}) is attached"
    );
    let typed = [
        ("true", 0, ""),
        ("(exit 7)", 7, ""),
        ("echo hi; echo err >&2", 0, "hi\n"),
        ("cd /; x=41", 0, ""),
        ("echo $((x+1)) $PWD", 0, "42 /\n"),
        ("echo only-err >&2; (exit 3)", 3, ""),
    ];
    check_runs(&b, &typed, "typed").await;
    let rec = b.run("echo only-err >&2").await;
    assert_eq!(
        (rec.stdout.as_str(), rec.stderr.as_str(), rec.stderr_bytes),
        ("", "only-err\n", 9),
        "{rec:?}"
    );
    // The end notice leaves out a directory with characters outside its plain set: the
    // command's cwd then comes from its pwd file, exact either way.
    for name in ["plain dir", "q'uote", "tab\there", "\u{fc}ber"] {
        let cd = format!("{dir}/{name}");
        b.sh(&format!("mkdir -p {}", q(&cd))).await;
        b.run(&format!("cd {}", q(&cd))).await;
        let rec = b.run("true").await;
        assert_eq!(
            (rec.exit_code, rec.cwd.as_str()),
            (Some(0), cd.as_str()),
            "{rec:?}"
        );
    }
    b.run("cd /").await;
    // The end came with the notice, not from the files: a command that removes its own
    // started file still has a start time.
    let rec = b.run("rm -f -- \"$__rr_cur/started\"").await;
    assert!(rec.started_at.is_some(), "{rec:?}");
    let other = b.other_engine();
    let mut o = b.options.clone();
    o.terminal_clients = false;
    let plain =
        Engine::with_options(b.state.path(), Arc::new(FixedConnector(b.t.clone())), o).unwrap();
    for (i, engine) in [&b.engine, &plain, &other, &plain, &b.engine]
        .iter()
        .enumerate()
    {
        let rec = engine
            .exec(b.sid(), &format!("echo turn{i}"), ExecRequest::wait())
            .await
            .unwrap();
        assert_eq!(rec.stdout, format!("turn{i}\n"), "{rec:?}");
    }
    let rec = exec_name_prompt(&b).await;
    b.engine
        .session_send(b.sid(), send_req(Some("ann"), &[]))
        .await
        .unwrap();
    let rec = b
        .engine
        .command_wait(b.sid(), &rec.command_id, Duration::from_secs(30))
        .await
        .unwrap();
    assert_eq!(rec.stdout, "hi ann\n", "{rec:?}");
    let rec = started(&b, "sleep 100").await;
    let rec = b
        .engine
        .command_stop(b.sid(), &rec.command_id)
        .await
        .unwrap();
    assert_eq!(
        (rec.status, rec.exit_code),
        (CommandStatus::Stopped, Some(130))
    );
    let rec = b.run("exit 4").await;
    assert_eq!(rec.exit_code, Some(4), "{rec:?}");
    assert_eq!(b.run("echo usable").await.stdout, "usable\n");
    // A session started by an older version (its shell ends no command with a secret notice:
    // no `pane.pid` of a pane process holding the secrets) has its commands started by the
    // script, with the client kept.
    let mark = format!("{}/pane.pid", b.session.remote_state_dir);
    b.sh(&format!("rm -- {}", q(&mark))).await;
    let untyped = [
        ("echo old; (exit 5)", 5, "old\n"),
        ("cd /tmp", 0, ""),
        ("pwd", 0, "/tmp\n"),
        ("true", 0, ""),
    ];
    check_runs(&b, &untyped, "").await;
    b.finish().await;
}
