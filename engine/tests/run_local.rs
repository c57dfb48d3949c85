//! Run once on this host: LocalTransport, real tmux sessions.

mod run_common;
mod transfer_common;

macro_rules! local_tests {
    ($($name:ident),* $(,)?) => {$(
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $name() {
            run_common::$name(transfer_common::local_bed().await).await;
        }
    )*};
}

local_tests!(
    run_succeeds,
    run_fails_but_fetches_artifacts,
    run_input_failure,
    run_times_out,
    run_cancelled,
    run_show_unknown,
    run_cancelled_early,
);
