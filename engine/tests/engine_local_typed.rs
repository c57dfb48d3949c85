//! The engine behaviour suite on this host as a long-lived engine runs it: with a kept tmux
//! control client per session (`EngineOptions::terminal_clients`), so that a test's commands
//! after its first are typed through it.

mod engine_suite;

use std::sync::Arc;
use std::sync::atomic::Ordering;

use remote_runner_engine::remote::Remote;
use remote_runner_engine::transport::local::LocalTransport;

macro_rules! typed_tests {
    ($($name:ident),* $(,)?) => {$(
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $name() {
            engine_suite::TERMINAL_CLIENTS.store(true, Ordering::SeqCst);
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().to_string_lossy().into_owned();
            engine_suite::$name(Remote::direct(Arc::new(LocalTransport::new())), &path).await;
        }
    )*};
}

engine_suite::every_test!(typed_tests);
