//! The engine behaviour suite over SSH: the real sshd test bed (login user rrtest), russh +
//! SFTP transport, real tmux on the "remote" side.

mod engine_suite;
mod ssh_common;

use remote_runner_engine::remote::Remote;
use remote_runner_engine::ssh;

macro_rules! ssh_tests {
    ($($name:ident),* $(,)?) => {$(
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $name() {
            let sshd = ssh_common::start();
            let remote = sshd.remote_dir(stringify!($name)).unwrap();
            let machine = ssh_common::machine(&sshd, Some(&sshd.keys.ed25519));
            let t = Remote::direct(ssh::connect(&machine, ssh_common::opts()).await.unwrap());
            engine_suite::$name(t, &remote.to_string_lossy()).await;
            drop(sshd);
        }
    )*};
}

ssh_tests!(
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
    destroy_removes_remote_state_unless_kept,
    session_shell_is_isolated,
    git_repo_cwd_leaves_no_trace,
    user_settings_cannot_break_mechanism,
    hostile_dir_names_are_data,
    cwd_control_characters_are_data,
    garbled_exit_file_is_not_a_lost_session,
);

/// Kill the per-connection sshd while a command runs and a waiter waits: the command finishes
/// on the machine, and the wait (reconnecting) returns its exit code and every byte.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_survives_killed_connection() {
    use remote_runner_engine::engine::{CommandStatus, ExecRequest};
    use std::time::Duration;

    let sshd = ssh_common::start();
    let remote = sshd.remote_dir("killed_connection").unwrap();
    let dir = remote.to_string_lossy().into_owned();
    let machine = ssh_common::machine(&sshd, Some(&sshd.keys.ed25519));
    let t = Remote::direct(ssh::connect(&machine, ssh_common::opts()).await.unwrap());
    let b = engine_suite::bed(t.clone(), &dir).await;
    let cmd =
        "sleep 3; head -c 3000000 /dev/urandom > big.bin; cat big.bin; echo fin >&2; (exit 9)";
    let rec = b
        .engine
        .exec(
            b.sid(),
            cmd,
            ExecRequest::wait().with_timeout(Duration::from_millis(300)),
        )
        .await
        .unwrap();
    assert!(rec.wait_timed_out);
    let waiter = b.other_engine();
    let (sid, cid) = (b.sid().to_string(), rec.command_id.clone());
    let task = tokio::spawn(async move {
        waiter
            .command_wait(&sid, &cid, Duration::from_secs(120))
            .await
    });
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert!(
        sshd.signal_connections(libc::SIGKILL) > 0,
        "no connection to kill"
    );
    let done = task.await.unwrap().unwrap();
    assert_eq!(
        (done.status, done.exit_code),
        (CommandStatus::Failed, Some(9)),
        "{done:?}"
    );
    assert_eq!(done.stdout_bytes, 3_000_000);
    assert_eq!(done.stderr, "fin\n");
    let remote_bytes = std::fs::read(remote.join("big.bin")).unwrap();
    assert_eq!(
        std::fs::read(&done.stdout_file_local).unwrap(),
        remote_bytes
    );
    b.finish().await;
    drop(sshd);
}
