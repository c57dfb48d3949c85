//! Transfers over SSH (russh + SFTP) against the real sshd test bed, as user rrtest.

mod transfer_common;

use transfer_common::{bounded, ssh_bed, suite};

macro_rules! ssh_tests {
    ($($name:ident),* $(,)?) => {$(
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $name() {
            bounded(async { suite::$name(ssh_bed(stringify!($name)).await).await }).await;
        }
    )*};
}

ssh_tests!(
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
    interrupted_transfers_retry,
    permission_denied,
    tree_stream_put,
    tree_stream_merge,
    tree_stream_killed,
);

/// 256 MiB over SSH keeps the debug-build test bounded; the 1 GiB case runs locally and in the
/// benchmarks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sparse_round_trip() {
    suite::sparse_gib_round_trip(ssh_bed("sparse").await, 256 << 20).await;
}
