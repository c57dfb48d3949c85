//! The engine behaviour suite on this host: LocalTransport and real tmux.

mod engine_suite;

use std::sync::Arc;

use remote_runner_engine::remote::Remote;
use remote_runner_engine::transport::local::LocalTransport;

fn local() -> (Arc<Remote>, tempfile::TempDir, String) {
    assert!(
        std::process::Command::new("tmux")
            .arg("-V")
            .output()
            .is_ok(),
        "tmux is required for these tests; install it (apt-get install tmux)"
    );
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().to_string_lossy().into_owned();
    (Remote::direct(Arc::new(LocalTransport::new())), dir, path)
}

macro_rules! local_tests {
    ($($name:ident),* $(,)?) => {$(
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $name() {
            let (t, _guard, dir) = local();
            engine_suite::$name(t, &dir).await;
        }
    )*};
}

local_tests!(
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

/// The connector hands out one `local` transport, so its kept control process serves every
/// call: a second connect (each engine call connects) must not start another. Before, every
/// connect made a fresh transport and every exec on `local` started a new `ctl.sh serve`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_connects_share_one_control_process() {
    use remote_runner_engine::connect::MachineConnector;
    use remote_runner_engine::engine::Connector;
    use remote_runner_engine::ssh::ConnectOptions;

    let state = tempfile::tempdir().unwrap();
    let connector = MachineConnector::new(state.path().to_path_buf(), ConnectOptions::default());
    // `$$` in a call is the pid of the control process serving it (calls run in its subshells).
    let mut pids = Vec::new();
    for _ in 0..3 {
        let t = connector.connect("local").await.unwrap();
        let out = remote_runner_engine::remote::sh(t.as_ref(), "echo $$", None, None, 1024)
            .await
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        pids.push(String::from_utf8_lossy(&out.stdout).trim().to_string());
    }
    assert!(!pids[0].is_empty(), "{pids:?}");
    assert!(
        pids.iter().all(|p| p == &pids[0]),
        "each connect started its own control process: {pids:?}"
    );
}
