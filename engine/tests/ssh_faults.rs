//! Faults on a real sshd: a killed per-connection process gives a typed connection_lost and
//! the next call reconnects; a frozen (SIGSTOP) server is detected by keepalive.

mod ssh_common;

use std::time::Duration;

use remote_runner_engine::ErrorCode;
use remote_runner_engine::remote::Remote;
use remote_runner_engine::ssh;
use remote_runner_engine::transport::ExecOptions;
use ssh_common::{machine, opts, start};

#[tokio::test]
async fn killed_connection_is_connection_lost_then_reconnects() {
    let sshd = start();
    let t = Remote::direct(
        ssh::connect(&machine(&sshd, Some(&sshd.keys.ed25519)), opts())
            .await
            .unwrap(),
    );
    let running = {
        let t = t.clone();
        tokio::spawn(async move {
            t.exec("echo started; sleep 60", ExecOptions::default())
                .await
        })
    };
    assert!(sshd.wait_connections(1, Duration::from_secs(20)));
    // Let the command start, then kill every per-connection sshd process.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(sshd.signal_connections(libc::SIGKILL) > 0);
    let err = tokio::time::timeout(Duration::from_secs(30), running)
        .await
        .expect("the exec ends promptly")
        .unwrap()
        .unwrap_err();
    assert_eq!(err.code, ErrorCode::ConnectionLost, "{err}");
    assert!(err.retryable);
    assert!(!t.is_connected());

    let out = t
        .exec("echo back", ExecOptions::default())
        .await
        .expect("reconnects");
    assert_eq!(out.stdout_lossy(), "back\n");
    assert!(t.is_connected());
}

#[tokio::test]
async fn frozen_server_is_detected_by_keepalive() {
    let sshd = start();
    let mut o = opts();
    o.keepalive_interval = Some(Duration::from_secs(1));
    o.keepalive_max = Some(2);
    o.connect_timeout = Some(Duration::from_secs(5));
    o.reconnect_attempts = 1;
    let t = Remote::direct(
        ssh::connect(&machine(&sshd, Some(&sshd.keys.ed25519)), o)
            .await
            .unwrap(),
    );
    let running = {
        let t = t.clone();
        tokio::spawn(async move {
            t.exec(
                "sleep 120",
                ExecOptions {
                    timeout: None,
                    ..ExecOptions::default()
                },
            )
            .await
        })
    };
    assert!(sshd.wait_connections(1, Duration::from_secs(20)));
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(sshd.signal_connections(libc::SIGSTOP) > 0);
    // Generous bound: keepalive 1 s x 2 detects it in a few seconds.
    let err = tokio::time::timeout(Duration::from_secs(60), running)
        .await
        .expect("keepalive ends the exec")
        .unwrap()
        .unwrap_err();
    assert_eq!(err.code, ErrorCode::ConnectionLost, "{err}");
    assert!(err.message.contains("keepalive"), "{}", err.message);
    sshd.signal_connections(libc::SIGCONT);
    sshd.signal_connections(libc::SIGKILL);
    let out = t
        .exec("echo fresh", ExecOptions::default())
        .await
        .expect("reconnects");
    assert_eq!(out.stdout_lossy(), "fresh\n");
}

#[tokio::test]
async fn reconnect_retries_with_backoff_then_recovers() {
    let sshd = start();
    let mut o = opts();
    o.connect_timeout = Some(Duration::from_secs(1));
    o.reconnect_attempts = 3;
    let t = Remote::direct(
        ssh::connect(&machine(&sshd, Some(&sshd.keys.ed25519)), o)
            .await
            .unwrap(),
    );
    t.exec("true", ExecOptions::default()).await.unwrap();
    // The server stops accepting (listener frozen) and the live connection is killed.
    assert!(sshd.signal_listener(libc::SIGSTOP));
    assert!(sshd.signal_connections(libc::SIGKILL) > 0);
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while t.is_connected() {
        assert!(std::time::Instant::now() < deadline, "drop not noticed");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let err = tokio::time::timeout(
        Duration::from_secs(60),
        t.exec("true", ExecOptions::default()),
    )
    .await
    .expect("bounded retries")
    .unwrap_err();
    assert_eq!(err.code, ErrorCode::ConnectionFailed, "{err}");
    assert!(err.retryable);
    // The server is back: the next call reconnects.
    assert!(sshd.signal_listener(libc::SIGCONT));
    let out = t
        .exec("echo recovered", ExecOptions::default())
        .await
        .expect("reconnects");
    assert_eq!(out.stdout_lossy(), "recovered\n");
}
