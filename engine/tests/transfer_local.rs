//! Transfers on this host: LocalTransport, real tmux sessions.

mod transfer_common;

use transfer_common::{bounded, local_bed, suite};

macro_rules! local_tests {
    ($($name:ident),* $(,)?) => {$(
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $name() {
            bounded(async { suite::$name(local_bed().await).await }).await;
        }
    )*};
}

local_tests!(
    file_round_trip,
    tree_round_trip,
    put_symlinks,
    read_only_dirs_and_modes,
    hostile_tree_download,
    list_entries,
    history_records,
    path_mappings,
    cancel_mid_transfer,
    progress_reports,
    tree_stream_put,
    tree_stream_merge,
);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sparse_gib_round_trip() {
    suite::sparse_gib_round_trip(local_bed().await, 1 << 30).await;
}
