//! The pool against a server with a low MaxSessions: concurrent execs beyond the limit queue or
//! use extra connections, none fails.

mod ssh_common;

use remote_runner_engine::remote::Remote;
use remote_runner_engine::ssh;
use remote_runner_engine::transport::ExecOptions;
use remote_runner_testkit::Sshd;
use ssh_common::{machine, opts};

#[tokio::test]
async fn max_sessions_two_and_twelve_concurrent_execs_all_succeed() {
    let sshd = Sshd::builder().max_sessions(2).start().expect("sshd");
    let mut o = opts();
    o.max_connections = 2;
    let t = Remote::direct(
        ssh::connect(&machine(&sshd, Some(&sshd.keys.ed25519)), o)
            .await
            .unwrap(),
    );
    let mut tasks = Vec::new();
    for i in 0..12 {
        let t = t.clone();
        tasks.push(tokio::spawn(async move {
            t.exec(&format!("sleep 0.3; echo job-{i}"), ExecOptions::default())
                .await
        }));
    }
    for (i, task) in tasks.into_iter().enumerate() {
        let out = task.await.unwrap().expect("every exec succeeds");
        assert_eq!(out.stdout_lossy(), format!("job-{i}\n"));
    }
    // At most two connections were used (max_connections), each learnt the limit.
    assert!(
        sshd.connection_pids().len() <= 2,
        "{:?}",
        sshd.connection_pids()
    );
}

#[tokio::test]
async fn sftp_channel_counts_towards_the_budget() {
    let sshd = Sshd::builder().max_sessions(2).start().expect("sshd");
    let mut o = opts();
    o.max_connections = 3;
    let t = Remote::direct(
        ssh::connect(&machine(&sshd, Some(&sshd.keys.ed25519)), o)
            .await
            .unwrap(),
    );
    let dir = sshd.remote_dir("pool").unwrap();
    let path = dir.join("f.txt");
    let path = path.to_str().unwrap();
    // SFTP (two channels with the rename helper) plus concurrent execs.
    t.write_file(path, b"x", 0o644).await.unwrap();
    let mut tasks = Vec::new();
    for i in 0..6 {
        let t = t.clone();
        tasks.push(tokio::spawn(async move {
            t.exec(&format!("echo {i}"), ExecOptions::default()).await
        }));
    }
    for task in tasks {
        task.await.unwrap().expect("exec succeeds");
    }
    assert_eq!(t.read_file_range(path, 0, 10).await.unwrap(), b"x");
}
