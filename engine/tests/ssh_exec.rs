//! Exec over a real sshd: exit codes, signals, stdout/stderr separation, stdin, output caps,
//! timeouts.

mod ssh_common;

use std::time::Duration;

use remote_runner_engine::ErrorCode;
use remote_runner_engine::remote::Remote;
use remote_runner_engine::ssh;
use remote_runner_engine::transport::{ExecOptions, ExitStatus};
use ssh_common::{machine, opts, start};

#[tokio::test]
async fn exit_codes_signals_and_streams() {
    let sshd = start();
    let t = Remote::direct(
        ssh::connect(&machine(&sshd, Some(&sshd.keys.ed25519)), opts())
            .await
            .unwrap(),
    );

    let out = t
        .exec("echo out; echo err >&2; exit 7", ExecOptions::default())
        .await
        .unwrap();
    assert_eq!(out.status, ExitStatus::Code(7));
    assert_eq!(out.stdout_lossy(), "out\n");
    assert_eq!(out.stderr_lossy(), "err\n");

    let out = t.exec("true", ExecOptions::default()).await.unwrap();
    assert!(out.status.success());

    let out = t
        .exec("kill -TERM $$", ExecOptions::default())
        .await
        .unwrap();
    assert_eq!(out.status, ExitStatus::Signal("TERM".into()));

    let out = t
        .exec("kill -KILL $$", ExecOptions::default())
        .await
        .unwrap();
    assert_eq!(out.status, ExitStatus::Signal("KILL".into()));
}

#[tokio::test]
async fn stdin_is_delivered_then_closed() {
    let sshd = start();
    let t = Remote::direct(
        ssh::connect(&machine(&sshd, Some(&sshd.keys.ed25519)), opts())
            .await
            .unwrap(),
    );
    let data: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
    let out = t
        .exec(
            "sha256sum | cut -d' ' -f1; wc -c < /dev/null",
            ExecOptions {
                stdin: Some(data.clone()),
                ..ExecOptions::default()
            },
        )
        .await
        .unwrap();
    use sha2::Digest;
    let want = hex::encode(sha2::Sha256::digest(&data));
    assert_eq!(out.stdout_lossy().lines().next(), Some(want.as_str()));
}

#[tokio::test]
async fn output_cap_truncates_and_drains_the_rest() {
    let sshd = start();
    let t = Remote::direct(
        ssh::connect(&machine(&sshd, Some(&sshd.keys.ed25519)), opts())
            .await
            .unwrap(),
    );
    let out = t
        .exec(
            "head -c 5000000 /dev/zero; echo done >&2",
            ExecOptions {
                max_output: 1000,
                ..ExecOptions::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(out.stdout.len(), 1000);
    assert!(out.stdout_truncated);
    assert!(!out.stderr_truncated);
    assert_eq!(out.stderr_lossy(), "done\n");
    assert!(out.status.success());
    // The connection still works after a large, mostly discarded output.
    let out = t.exec("echo again", ExecOptions::default()).await.unwrap();
    assert_eq!(out.stdout_lossy(), "again\n");
}

#[tokio::test]
async fn timeout_is_its_own_error_and_the_connection_survives() {
    let sshd = start();
    let t = Remote::direct(
        ssh::connect(&machine(&sshd, Some(&sshd.keys.ed25519)), opts())
            .await
            .unwrap(),
    );
    let err = t
        .exec(
            "sleep 30",
            ExecOptions {
                timeout: Some(Duration::from_millis(300)),
                ..ExecOptions::default()
            },
        )
        .await
        .unwrap_err();
    assert_eq!(err.code, ErrorCode::Timeout);
    let out = t.exec("echo still", ExecOptions::default()).await.unwrap();
    assert_eq!(out.stdout_lossy(), "still\n");
    assert!(t.is_connected());
}

#[tokio::test]
async fn an_undrained_consumer_does_not_stall_other_channels() {
    let sshd = start();
    let t = Remote::direct(
        ssh::connect(&machine(&sshd, Some(&sshd.keys.ed25519)), opts())
            .await
            .unwrap(),
    );
    // A big producer and a small command at the same time on one connection.
    let big = t.exec(
        "head -c 50000000 /dev/zero",
        ExecOptions {
            max_output: 10,
            ..ExecOptions::default()
        },
    );
    let small = t.exec("echo small", ExecOptions::default());
    let (big, small) = tokio::join!(big, small);
    assert!(big.unwrap().stdout_truncated);
    assert_eq!(small.unwrap().stdout_lossy(), "small\n");
}

/// The link dies while a stream's stdin waits for window space (the process reads nothing, so
/// the window fills): the input side ends, so a sender sees the end, and the stream ends with
/// `connection_lost`. A sender waiting forever here once hung a tree upload whose connection
/// was killed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_link_ends_input_that_waits_for_window() {
    let sshd = start();
    let t = Remote::direct(
        ssh::connect(&machine(&sshd, Some(&sshd.keys.ed25519)), opts())
            .await
            .unwrap(),
    );
    let mut s = t
        .transport()
        .exec_stream("sleep 120")
        .await
        .unwrap()
        .expect("SSH streams");
    let chunk = vec![7u8; 64 << 10];
    let mut sent = 0usize;
    loop {
        match tokio::time::timeout(Duration::from_secs(1), s.input.send(chunk.clone())).await {
            Ok(Ok(())) => sent += chunk.len(),
            Ok(Err(_)) => panic!("the input ended before the link died"),
            Err(_) => break,
        }
        assert!(
            sent < 64 << 20,
            "64 MiB went to a process that reads nothing"
        );
    }
    assert!(sshd.signal_connections(9) > 0);
    let ended = tokio::time::timeout(Duration::from_secs(60), s.input.send(chunk.clone())).await;
    assert!(
        matches!(ended, Ok(Err(_))),
        "a send still waits after the link died"
    );
    let end = tokio::time::timeout(Duration::from_secs(60), async {
        while let Some(ev) = s.events.recv().await {
            if let remote_runner_engine::transport::StreamEvent::End(end) = ev {
                return Some(end);
            }
        }
        None
    })
    .await
    .expect("the stream's end within 60 s");
    let err = end.expect("an end event").unwrap_err();
    assert_eq!(err.code, ErrorCode::ConnectionLost, "{err}");
}
