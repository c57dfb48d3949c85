//! The engine behaviour suite over SSH: the real sshd test bed (login user rrtest), russh +
//! SFTP transport, real tmux on the "remote" side.

mod engine_suite;
mod ssh_common;

use remote_runner_engine::remote::Remote;
use remote_runner_engine::ssh;

macro_rules! ssh_tests {
    ($($name:ident),* $(,)?) => {$(
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $name() {
            let sshd = ssh_common::start();
            let remote = sshd.remote_dir(stringify!($name)).unwrap();
            let machine = ssh_common::machine(&sshd, Some(&sshd.keys.ed25519));
            let t = Remote::direct(ssh::connect(&machine, ssh_common::opts()).await.unwrap());
            engine_suite::$name(t, &remote.to_string_lossy()).await;
            drop(sshd);
        }
    )*};
}

engine_suite::every_test!(ssh_tests);

/// Kill the per-connection sshd while a command runs and a waiter waits: the command finishes
/// on the machine, and the wait (reconnecting) returns its exit code and every byte.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_survives_killed_connection() {
    use remote_runner_engine::engine::{CommandStatus, ExecRequest};
    use std::time::Duration;

    let sshd = ssh_common::start();
    let remote = sshd.remote_dir("killed_connection").unwrap();
    let dir = remote.to_string_lossy().into_owned();
    let machine = ssh_common::machine(&sshd, Some(&sshd.keys.ed25519));
    let t = Remote::direct(ssh::connect(&machine, ssh_common::opts()).await.unwrap());
    let b = engine_suite::bed(t.clone(), &dir).await;
    let cmd =
        "sleep 3; head -c 3000000 /dev/urandom > big.bin; cat big.bin; echo fin >&2; (exit 9)";
    let rec = b
        .engine
        .exec(
            b.sid(),
            cmd,
            ExecRequest::wait().with_timeout(Duration::from_millis(300)),
        )
        .await
        .unwrap();
    assert!(rec.wait_timed_out);
    let waiter = b.other_engine();
    let (sid, cid) = (b.sid().to_string(), rec.command_id.clone());
    let task = tokio::spawn(async move {
        waiter
            .command_wait(&sid, &cid, Duration::from_secs(120))
            .await
    });
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert!(
        sshd.signal_connections(libc::SIGKILL) > 0,
        "no connection to kill"
    );
    let done = task.await.unwrap().unwrap();
    assert_eq!(
        (done.status, done.exit_code),
        (CommandStatus::Failed, Some(9)),
        "{done:?}"
    );
    assert_eq!(done.stdout_bytes, 3_000_000);
    assert_eq!(done.stderr, "fin\n");
    let remote_bytes = std::fs::read(remote.join("big.bin")).unwrap();
    assert_eq!(
        std::fs::read(&done.stdout_file_local).unwrap(),
        remote_bytes
    );
    b.finish().await;
    drop(sshd);
}
