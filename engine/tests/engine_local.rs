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

engine_suite::every_test!(local_tests);

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
