//! A minimal face on the engine's public API: the tour a new face takes.
//!
//! Opens the engine on a temporary state dir, starts a session on the built-in `local` machine,
//! runs two commands that share shell state (a `cd` and a variable) and one that exits 5, sends
//! a file up and gets it back, destroys the session, and shows that the destroyed session
//! refuses further work. Every error is printed with its stable code and its hint.
//!
//! Run it with `cargo run -p remote-runner-examples --bin engine-tour` (tmux and bash must be
//! installed; `--current-thread` runs it on a current-thread runtime). It exits 0 when every
//! step did what it should, 1 otherwise.

use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

use remote_runner_engine::engine::transfer::TransferOptions;
use remote_runner_engine::engine::{Engine, EngineOptions, ExecRequest, OpenOptions};
use remote_runner_engine::machine::Machine;
use remote_runner_engine::records::{CommandStatus, SessionStatus};
use remote_runner_engine::{CancellationToken, Error, ErrorCode};

/// Prints an engine error as a face would: the code (stable, for scripts), the message, and the
/// hint (a typed next step; a real face words it as one of its own commands).
fn report(step: &str, err: &Error) {
    println!(
        "{step}: error {} (retryable: {}): {}",
        err.code, err.retryable, err.message
    );
    if let Some(hint) = &err.hint {
        println!("{step}: next step: {}", hint.kind());
    }
}

/// A step's result: its error reported, and the tour stopped.
fn step<T>(name: &str, result: remote_runner_engine::Result<T>) -> Result<T, String> {
    result.map_err(|e| {
        report(name, &e);
        format!("{name} failed")
    })
}

/// Fails the tour with `what` unless `ok`.
fn expect(ok: bool, what: &str) -> Result<(), String> {
    if ok {
        Ok(())
    } else {
        Err(format!("expected: {what}"))
    }
}

async fn tour(engine: &Engine, work: &Path) -> Result<(), String> {
    // A session: one persistent bash in tmux, here on this host, starting in `work`.
    let mut machine = Machine::local();
    machine.default_cwd = work.display().to_string();
    let session = step(
        "create_session",
        engine.create_session(&machine, None).await,
    )?;
    let sid = session.session_id.as_str();
    println!("session {sid} on {} in {}", session.machine_id, session.cwd);

    // Two commands sharing the shell: the second sees the first's directory and variable.
    let wait = || ExecRequest::wait().with_timeout(Duration::from_secs(30));
    let first = engine.exec(sid, "mkdir -p sub && cd sub && GREETING=hello", wait());
    let first = step("exec", first.await)?;
    let second = engine.exec(sid, r#"echo "$GREETING from $(basename "$PWD")""#, wait());
    let second = step("exec", second.await)?;
    println!(
        "first: {:?}; second: {:?} printed {:?}",
        first.status, second.status, second.stdout
    );
    expect(
        second.stdout == "hello from sub\n",
        "the shell kept its state",
    )?;

    // A non-zero exit is not an error: it is the record's status and exit code. `exit` ends
    // the shell, and the session goes on in a fresh one (same directory and exports).
    let failed = step("exec", engine.exec(sid, "exit 5", wait()).await)?;
    println!(
        "exit 5: {:?}, code {:?}, end reason {:?}, shell restarted: {}",
        failed.status, failed.exit_code, failed.end_reason, failed.shell_restarted
    );
    expect(failed.status == CommandStatus::Failed, "exit 5 is `failed`")?;
    let now = step("session_show", engine.session_show(sid))?;
    expect(
        now.status == SessionStatus::Active,
        "the session outlives `exit 5`",
    )?;

    // A file up and back, sha256-verified at both ends.
    let local = work.join("up.txt");
    std::fs::write(&local, "a line\n").map_err(|e| e.to_string())?;
    let verified = || TransferOptions {
        verify: true,
        cancel: CancellationToken::new(),
        ..TransferOptions::default()
    };
    let up = step(
        "file_put",
        engine
            .file_put(sid, &local, "sub/remote.txt", verified())
            .await,
    )?;
    let back = work.join("back.txt");
    let down = engine.file_get(sid, "sub/remote.txt", &back, verified());
    let down = step("file_get", down.await)?;
    println!(
        "put {} bytes, got {} bytes back, verified: {:?}",
        up.bytes, down.bytes, down.verified
    );
    expect(
        std::fs::read(&back).ok() == Some(b"a line\n".to_vec()),
        "the file came back whole",
    )?;

    // Destroy: the records stay, the shell goes, and the session refuses work with a code.
    let destroyed = step("destroy", engine.destroy(sid).await)?;
    println!("destroyed: {:?}", destroyed.status);
    let refused = [
        (
            "exec after destroy",
            engine.exec(sid, "true", wait()).await.err(),
        ),
        (
            "file read after destroy",
            engine
                .session_file_read(sid, "sub/remote.txt", 0, 99)
                .await
                .err(),
        ),
    ];
    for (name, err) in refused {
        let err = err.ok_or(format!("{name} was not refused"))?;
        report(name, &err);
        expect(
            err.code == ErrorCode::SessionLost,
            "a destroyed session is `session_lost`",
        )?;
    }
    // An unknown session is an error with a hint: list the sessions.
    if let Err(e) = engine.session_show("sess_nope") {
        report("session_show", &e);
    }
    Ok(())
}

/// The engine runs on either tokio runtime (with I/O and time enabled): a multi-thread one,
/// where its store calls leave the worker thread (`block_in_place`), or a current-thread one,
/// where they run inline. The tour takes `--current-thread` to show the second.
fn main() -> ExitCode {
    let mut runtime = if std::env::args().any(|a| a == "--current-thread") {
        tokio::runtime::Builder::new_current_thread()
    } else {
        tokio::runtime::Builder::new_multi_thread()
    };
    let runtime = runtime.enable_all().build().expect("a tokio runtime");
    runtime.block_on(run())
}

async fn run() -> ExitCode {
    let state = tempfile::tempdir().expect("a temporary directory");
    let work = tempfile::tempdir().expect("a temporary directory");
    let options = OpenOptions {
        keeper: false,
        engine: EngineOptions {
            // A tmux server of its own, so the tour never touches other sessions.
            tmux_socket: format!("rr-engine-tour-{}", std::process::id()),
            ..EngineOptions::default()
        },
        ..OpenOptions::default()
    };
    let engine = match Engine::open(state.path(), options) {
        Ok(engine) => engine,
        Err(e) => {
            report("open", &e);
            return ExitCode::FAILURE;
        }
    };
    match tour(&engine, work.path()).await {
        Ok(()) => {
            println!("tour complete");
            ExitCode::SUCCESS
        }
        Err(what) => {
            println!("tour failed: {what}");
            ExitCode::FAILURE
        }
    }
}
