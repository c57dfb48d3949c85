//! Behaviour suite of the session engine, written against any [`Transport`]: each function takes
//! the transport and a writable directory on that machine. `engine_local.rs` runs it on this
//! host with real tmux; an SSH runner can call the same functions.

#![allow(dead_code)]

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use remote_runner_provider::ErrorCode;
use remote_runner_provider::engine::{
    CommandRecord, CommandStatus, Engine, EngineOptions, ExecRequest, FixedConnector, OutputStream,
    SessionRecord, SessionStatus,
};
use remote_runner_provider::machine::Machine;
use remote_runner_provider::transport::{ExecOptions, Transport};

/// One engine, one session, a private tmux server socket, a private state dir.
pub struct Bed {
    pub t: Arc<dyn Transport>,
    pub engine: Engine,
    pub session: SessionRecord,
    pub dir: String,
    pub state: tempfile::TempDir,
    pub options: EngineOptions,
}

pub fn options(env: Vec<(String, String)>) -> EngineOptions {
    EngineOptions {
        tmux_socket: format!("rrtest-{}", uuid::Uuid::new_v4().simple()),
        session_env: env,
        ..Default::default()
    }
}

pub async fn bed(t: Arc<dyn Transport>, dir: &str) -> Bed {
    bed_with(t, dir, options(Vec::new())).await
}

pub async fn bed_with(t: Arc<dyn Transport>, dir: &str, options: EngineOptions) -> Bed {
    let state = tempfile::tempdir().unwrap();
    let engine = Engine::with_options(
        state.path(),
        Arc::new(FixedConnector(t.clone())),
        options.clone(),
    )
    .unwrap();
    let mut machine = Machine::local();
    machine.default_cwd = dir.to_string();
    let session = engine.create_session(&machine, None).await.unwrap();
    Bed {
        t,
        engine,
        session,
        dir: dir.to_string(),
        state,
        options,
    }
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
        let out = self.t.exec(cmd, ExecOptions::default()).await.unwrap();
        out.stdout_lossy()
    }

    /// Stop the private tmux server.
    pub async fn finish(self) {
        let _ = self.engine.destroy(self.sid()).await;
        let _ = self
            .sh(&format!(
                "tmux -L {} kill-server 2>/dev/null; true",
                self.options.tmux_socket
            ))
            .await;
    }
}

pub async fn exec_exact_exit_codes(t: Arc<dyn Transport>, dir: &str) {
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

pub async fn stdout_stderr_separated(t: Arc<dyn Transport>, dir: &str) {
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

pub async fn shell_state_persists(t: Arc<dyn Transport>, dir: &str) {
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

pub async fn heredocs(t: Arc<dyn Transport>, dir: &str) {
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

pub async fn unbalanced_quotes(t: Arc<dyn Transport>, dir: &str) {
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

pub async fn history_characters(t: Arc<dyn Transport>, dir: &str) {
    let b = bed(t, dir).await;
    let rec = b.run("echo \"a!b\" !! !$ '!x'").await;
    assert_eq!(rec.stdout, "a!b !! !$ !x\n");
    b.finish().await;
}

pub async fn big_command(t: Arc<dyn Transport>, dir: &str) {
    let b = bed(t, dir).await;
    let payload = "x".repeat(200 * 1024);
    let rec = b.run(&format!("v='{payload}'\necho ${{#v}}")).await;
    assert_eq!(rec.stdout, format!("{}\n", 200 * 1024));
    b.finish().await;
}

pub async fn binary_and_escape_output(t: Arc<dyn Transport>, dir: &str) {
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

pub async fn huge_output(t: Arc<dyn Transport>, dir: &str) {
    let b = bed(t, dir).await;
    let n: u64 = 100 * 1024 * 1024;
    let rec = b
        .run(&format!(
            "head -c {n} /dev/zero | tr '\\0' a; echo tail-marker >&2"
        ))
        .await;
    assert_eq!(rec.exit_code, Some(0));
    assert_eq!(rec.stdout_bytes, n);
    assert_eq!(std::fs::metadata(&rec.stdout_file_local).unwrap().len(), n);
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

pub async fn fake_end_markers(t: Arc<dyn Transport>, dir: &str) {
    let b = bed(t, dir).await;
    let rec = b
        .run("printf '@report\\ncode=0\\nhow=normal\\nstate=done\\n'; echo 'code=0' >&2; (exit 3)")
        .await;
    assert_eq!(rec.exit_code, Some(3));
    assert_eq!(rec.stdout, "@report\ncode=0\nhow=normal\nstate=done\n");
    b.finish().await;
}

pub async fn set_e_ends_command_not_session(t: Arc<dyn Transport>, dir: &str) {
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

pub async fn exit_keeps_session(t: Arc<dyn Transport>, dir: &str) {
    let b = bed(t, dir).await;
    b.run(&format!("cd {dir} && export RR_KEPT=kept-value"))
        .await;
    let rec = b.run("echo bye; echo err >&2; exit 7").await;
    assert_eq!(
        (rec.status, rec.exit_code),
        (CommandStatus::Failed, Some(7)),
        "{rec:?}"
    );
    assert_eq!(
        (rec.stdout.as_str(), rec.stderr.as_str()),
        ("bye\n", "err\n")
    );
    assert!(rec.shell_restarted, "{rec:?}");
    assert_eq!(rec.end_reason.as_deref(), Some("shell_exit"));
    assert_eq!(
        b.engine.session_show(b.sid()).unwrap().status,
        SessionStatus::Active
    );
    // A fresh shell, in the same directory, with the exported environment.
    let rec = b.run("pwd; echo $RR_KEPT").await;
    assert_eq!(rec.stdout, format!("{dir}\nkept-value\n"));
    assert!(!rec.shell_restarted);
    b.finish().await;
}

pub async fn dead_tmux_server_is_lost(t: Arc<dyn Transport>, dir: &str) {
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
    b.sh(&format!("tmux -L {} kill-server", b.options.tmux_socket))
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

pub async fn trailing_ampersand(t: Arc<dyn Transport>, dir: &str) {
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

pub async fn read_answered_by_send(t: Arc<dyn Transport>, dir: &str) {
    let b = bed(t, dir).await;
    let rec = b
        .engine
        .exec(
            b.sid(),
            "read x; echo got=$x",
            ExecRequest::wait().with_timeout(Duration::from_secs(1)),
        )
        .await
        .unwrap();
    assert_eq!(rec.status, CommandStatus::Running);
    assert!(rec.wait_timed_out);
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

pub async fn pager_does_not_hang(t: Arc<dyn Transport>, dir: &str) {
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

pub async fn stop_escalates_past_ignored_sigint(t: Arc<dyn Transport>, dir: &str) {
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

pub async fn stop_foreground_and_idempotent(t: Arc<dyn Transport>, dir: &str) {
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

pub async fn background_run_wait_stop(t: Arc<dyn Transport>, dir: &str) {
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
        remote_runner_provider::engine::CommandMode::Background
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

pub async fn crlf_command(t: Arc<dyn Transport>, dir: &str) {
    let b = bed(t, dir).await;
    let rec = b.run("printf 'a\\n'\r\necho b\r\n").await;
    assert_eq!((rec.exit_code, rec.stdout.as_str()), (Some(0), "a\nb\n"));
    b.finish().await;
}

pub async fn non_utf8_locale(t: Arc<dyn Transport>, dir: &str) {
    let b = bed(t, dir).await;
    b.run("export LANG=C LC_ALL=C").await;
    let rec = b
        .run("printf 'caf\\351\\n'; locale 2>/dev/null | grep -c '\"C\"' >/dev/null; echo $LC_ALL")
        .await;
    assert_eq!(b.stdout_bytes(&rec), b"caf\xe9\nC\n");
    b.finish().await;
}

pub async fn hostile_bashrc_ignored(t: Arc<dyn Transport>, dir: &str) {
    let home = format!("{dir}/hostile-home");
    t.create_dir_all(&home, 0o700).await.unwrap();
    let rc = "echo NOISE-FROM-BASHRC\nPS1='HOSTILE> '\nPROMPT_COMMAND='echo PC-NOISE'\nset -e\nalias echo='echo HIJACK'\n";
    t.write_file(&format!("{home}/.bashrc"), rc.as_bytes(), 0o644)
        .await
        .unwrap();
    t.write_file(&format!("{home}/.bash_profile"), rc.as_bytes(), 0o644)
        .await
        .unwrap();
    let b = bed_with(t, dir, options(vec![("HOME".into(), home.clone())])).await;
    let rec = b.run("echo $HOME; false; echo ok").await;
    assert_eq!(rec.stdout, format!("{home}\nok\n"));
    assert_eq!(rec.exit_code, Some(0));
    let screen = b.engine.capture_screen(b.sid()).await.unwrap();
    assert!(
        !screen.text.contains("NOISE") && !screen.text.contains("HOSTILE"),
        "{}",
        screen.text
    );
    b.finish().await;
}

pub async fn busy_on_concurrent_exec(t: Arc<dyn Transport>, dir: &str) {
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

pub async fn wait_timeout_then_result(t: Arc<dyn Transport>, dir: &str) {
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

pub async fn transcript_read_with_cursor(t: Arc<dyn Transport>, dir: &str) {
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
) -> remote_runner_provider::engine::TranscriptChunk {
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

pub async fn logs_in_order_and_destroy_keeps_records(t: Arc<dyn Transport>, dir: &str) {
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

pub async fn recovery_after_killed_caller(t: Arc<dyn Transport>, dir: &str) {
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

pub async fn screen_and_resize(t: Arc<dyn Transport>, dir: &str) {
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

pub async fn shell_killed_restarts(t: Arc<dyn Transport>, dir: &str) {
    let b = bed(t, dir).await;
    b.run("export RR_KEPT=after-kill").await;
    let rec = b.run("echo x; ( kill -9 $$ )").await;
    assert_eq!((rec.exit_code, rec.stdout.as_str()), (Some(137), "x\n"));
    assert_eq!(rec.end_reason.as_deref(), Some("shell_killed"));
    assert!(rec.shell_restarted);
    let rec = b.run("echo $RR_KEPT").await;
    assert_eq!(rec.stdout, "after-kill\n");
    assert_eq!(
        b.engine.session_show(b.sid()).unwrap().status,
        SessionStatus::Active
    );
    b.finish().await;
}

pub async fn terminal_busy_after_send(t: Arc<dyn Transport>, dir: &str) {
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

pub async fn partial_input_is_cleared(t: Arc<dyn Transport>, dir: &str) {
    let b = bed(t, dir).await;
    b.engine.send(b.sid(), "partial-junk", false).await.unwrap();
    let rec = b.run("echo ok").await;
    assert_eq!((rec.exit_code, rec.stdout.as_str()), (Some(0), "ok\n"));
    b.finish().await;
}

pub async fn parallel_waiters_all_woken(t: Arc<dyn Transport>, dir: &str) {
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

pub async fn streaming_output_by_offset(t: Arc<dyn Transport>, dir: &str) {
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

pub async fn destroy_stops_running_commands(t: Arc<dyn Transport>, dir: &str) {
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

pub async fn session_shell_is_isolated(t: Arc<dyn Transport>, dir: &str) {
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

pub async fn session_read_shows_commands_and_output(t: Arc<dyn Transport>, dir: &str) {
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

pub async fn old_command_dirs_are_pruned(t: Arc<dyn Transport>, dir: &str) {
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
    let engine_driver = remote_runner_provider::tmux::TmuxDriver::new(
        b.t.clone(),
        remote_runner_provider::tmux::SessionPaths {
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
