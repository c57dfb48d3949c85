//! Runs the engine tour (`engine-tour/main.rs`), the minimal face on the engine's public API,
//! on both tokio runtimes, and checks what each step printed.

use std::process::Command;

fn tour(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_engine-tour"))
        .args(args)
        .output()
        .expect("the engine tour runs");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "the tour {args:?} failed ({}):\n{stdout}\n{stderr}",
        out.status
    );
    stdout
}

fn check(stdout: &str) {
    let has = |line: &str| stdout.lines().any(|l| l.contains(line));
    for line in [
        "second: Completed printed \"hello from sub\\n\"",
        "exit 5: Failed, code Some(5), end reason Some(\"shell_exit\"), shell restarted: true",
        "put 7 bytes, got 7 bytes back, verified: Some(true)",
        "destroyed: Destroyed",
        "exec after destroy: error session_lost",
        "file read after destroy: error session_lost",
        "session_show: error unknown_session",
        "session_show: next step: list_sessions",
        "tour complete",
    ] {
        assert!(has(line), "no line with {line:?} in:\n{stdout}");
    }
}

#[test]
fn the_tour_runs_on_a_multi_thread_runtime() {
    check(&tour(&[]));
}

#[test]
fn the_tour_runs_on_a_current_thread_runtime() {
    check(&tour(&["--current-thread"]));
}
