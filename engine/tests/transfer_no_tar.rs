//! A machine without tar: a tree upload falls back to the file channel, file by file, with the
//! same result. `REMOTE_RUNNER_REMOTE_TAR` (a test-only knob of the engine) names a tar program
//! that does not exist there; it is set once, before any engine runs, in this test binary only.
#![allow(unsafe_code)]

mod transfer_common;

use remote_runner_engine::engine::transfer::TransferStatus;
use transfer_common::{Bed, local_bed, snapshot, ssh_bed, suite, temp_leftovers, write};

fn no_tar() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    // SAFETY: the same value, set before any engine (or other thread of this binary) reads it.
    ONCE.call_once(|| unsafe { std::env::set_var("REMOTE_RUNNER_REMOTE_TAR", "/nonexistent/tar") });
}

async fn tree_without_tar(bed: Bed) {
    let root = bed.lp("tree");
    write(&root.join("a b.txt"), b"a", 0o600);
    write(&root.join("sub/c\nd.txt"), b"cd", 0o755);
    std::fs::create_dir_all(root.join("empty")).unwrap();
    std::os::unix::fs::symlink("sub", root.join("to sub")).unwrap();
    let put = bed.engine.file_put(bed.sid(), &root, "up", suite::verify());
    let rec = put.await.unwrap();
    assert_eq!(rec.status, TransferStatus::Succeeded, "{:?}", rec.error);
    assert_eq!((rec.files, rec.dirs, rec.symlinks), (2, 3, 1));
    assert_eq!(rec.verified, Some(true));
    assert_eq!(snapshot(&bed.rp("up")), snapshot(&root));
    assert!(temp_leftovers(&bed.remote).is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tree_without_tar_local() {
    no_tar();
    tree_without_tar(local_bed().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tree_without_tar_ssh() {
    no_tar();
    tree_without_tar(ssh_bed("no_tar").await).await;
}
