//! Run once over SSH against the real sshd test bed, as user rrtest.

mod run_common;
mod transfer_common;

macro_rules! ssh_tests {
    ($($name:ident),* $(,)?) => {$(
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $name() {
            run_common::$name(transfer_common::ssh_bed(stringify!($name)).await).await;
        }
    )*};
}

ssh_tests!(
    run_succeeds,
    run_fails_but_fetches_artifacts,
    run_input_failure,
    run_times_out,
    run_cancelled,
);
