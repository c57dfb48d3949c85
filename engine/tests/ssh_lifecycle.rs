//! Dropping a transport closes its connections on the server (no leaked sessions), SFTP
//! channels included.

mod ssh_common;

use std::time::{Duration, Instant};

use remote_runner_engine::remote::Remote;
use remote_runner_engine::ssh;
use remote_runner_engine::transport::ExecOptions;
use ssh_common::{machine, opts, start};

#[tokio::test]
async fn dropping_the_transport_closes_its_connections() {
    let sshd = start();
    let t = Remote::direct(
        ssh::connect(&machine(&sshd, Some(&sshd.keys.ed25519)), opts())
            .await
            .unwrap(),
    );
    let dir = sshd.remote_dir("life").unwrap();
    let f = format!("{}/f", dir.display());
    t.write_file(&f, b"data", 0o644).await.unwrap();
    t.exec("true", ExecOptions::default()).await.unwrap();
    assert!(sshd.wait_connections(1, Duration::from_secs(10)));
    drop(t);
    let until = Instant::now() + Duration::from_secs(30);
    while !sshd.connection_pids().is_empty() {
        assert!(
            Instant::now() < until,
            "server-side connection still alive: {:?}",
            sshd.connection_pids()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
