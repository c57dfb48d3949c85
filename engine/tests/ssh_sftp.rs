//! SFTP through SshTransport against a real sshd (internal-sftp), as the login user.

mod ssh_common;

use remote_runner_engine::ErrorCode;
use remote_runner_engine::remote::Remote;
use remote_runner_engine::ssh;
use remote_runner_engine::transport::FileKind;
use ssh_common::{machine, opts, start};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

#[tokio::test]
async fn file_round_trips() {
    let sshd = start();
    let t = Remote::direct(
        ssh::connect(&machine(&sshd, Some(&sshd.keys.ed25519)), opts())
            .await
            .unwrap(),
    );
    let root = sshd.remote_dir("sftp").unwrap();
    let root = root.to_str().unwrap();

    // create_dir_all, nested, idempotent.
    let nested = format!("{root}/a/b/c");
    t.create_dir_all(&nested, 0o750).await.unwrap();
    t.create_dir_all(&nested, 0o750).await.unwrap();
    let st = t.stat(&nested).await.unwrap().unwrap();
    assert_eq!(st.kind, FileKind::Dir);
    assert_eq!(st.mode, 0o750);

    // write_file atomically, with mode; replace keeps working.
    let f = format!("{nested}/hello.txt");
    t.write_file(&f, b"hello world", 0o600).await.unwrap();
    t.write_file(&f, b"hello again, world", 0o640)
        .await
        .unwrap();
    let st = t.stat(&f).await.unwrap().unwrap();
    assert_eq!(st.kind, FileKind::File);
    assert_eq!(st.size, 18);
    assert_eq!(st.mode, 0o640);
    assert!(st.mtime > 0);
    assert_eq!(t.read_file_range(&f, 6, 5).await.unwrap(), b"again");
    assert_eq!(
        t.read_file_range(&f, 0, 1 << 20).await.unwrap(),
        b"hello again, world"
    );
    assert!(t.read_file_range(&f, 100, 10).await.unwrap().is_empty());
    // No temp files left behind.
    let names: Vec<String> = t
        .read_dir(&nested)
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.name)
        .collect();
    assert_eq!(names, vec!["hello.txt".to_string()]);

    // rename replaces an existing target.
    let g = format!("{nested}/other.txt");
    t.write_file(&g, b"other", 0o644).await.unwrap();
    t.rename(&g, &f).await.unwrap();
    assert_eq!(t.read_file_range(&f, 0, 100).await.unwrap(), b"other");
    assert!(t.stat(&g).await.unwrap().is_none());

    // set_mode, symlink via exec shows as symlink in stat and read_dir.
    t.set_mode(&f, 0o604).await.unwrap();
    assert_eq!(t.stat(&f).await.unwrap().unwrap().mode, 0o604);
    let out = t
        .exec(
            &format!("ln -s hello.txt {nested}/link"),
            Default::default(),
        )
        .await
        .unwrap();
    assert!(out.status.success());
    assert_eq!(
        t.stat(&format!("{nested}/link"))
            .await
            .unwrap()
            .unwrap()
            .kind,
        FileKind::Symlink
    );
    let entries = t.read_dir(&nested).await.unwrap();
    assert_eq!(entries.len(), 2);
    assert_eq!(entries[0].name, "hello.txt");
    assert_eq!(entries[1].stat.kind, FileKind::Symlink);

    // remove_file, and missing paths map to remote_not_found.
    t.remove_file(&format!("{nested}/link")).await.unwrap();
    assert!(t.stat(&format!("{nested}/link")).await.unwrap().is_none());
    let err = t
        .read_file_range(&format!("{root}/missing"), 0, 1)
        .await
        .unwrap_err();
    assert_eq!(err.code, ErrorCode::RemoteNotFound);
    let err = t.read_dir(&format!("{root}/missing")).await.unwrap_err();
    assert_eq!(err.code, ErrorCode::RemoteNotFound);
    let err = t
        .write_file("/root/rr-denied.txt", b"x", 0o600)
        .await
        .unwrap_err();
    assert_eq!(err.code, ErrorCode::PermissionDenied, "{err}");
}

/// "The first to make it owns it": the missing directories below a base made in one go, and
/// only the call that made the last one told so.
#[tokio::test]
async fn create_dir_fresh_says_who_made_it() {
    let sshd = start();
    let t = Remote::direct(
        ssh::connect(&machine(&sshd, Some(&sshd.keys.ed25519)), opts())
            .await
            .unwrap(),
    );
    let root = sshd.remote_dir("fresh").unwrap();
    let root = root.to_str().unwrap();
    let deep = format!("{root}/turns/t1/chat");
    assert!(t.create_dir_fresh(root, &deep, 0o700).await.unwrap());
    let st = t.stat(&deep).await.unwrap().unwrap();
    assert_eq!((st.kind, st.mode), (FileKind::Dir, 0o700));
    assert!(!t.create_dir_fresh(root, &deep, 0o700).await.unwrap());
    // A sibling below existing parents; a path outside the base is one mkdir.
    assert!(
        t.create_dir_fresh(root, &format!("{root}/turns/t2/chat"), 0o700)
            .await
            .unwrap()
    );
    assert!(
        !t.create_dir_fresh("/nonexistent", &format!("{root}/x/y"), 0o700)
            .await
            .unwrap()
    );
    // Where a file stands in the way, nothing is made.
    t.write_file(&format!("{root}/file"), b"x", 0o600)
        .await
        .unwrap();
    assert!(
        !t.create_dir_fresh(root, &format!("{root}/file/chat"), 0o700)
            .await
            .unwrap()
    );
}

#[tokio::test]
async fn pipelined_writes_are_exact_and_new_files_are_never_replaced() {
    let sshd = start();
    let t = Remote::direct(
        ssh::connect(&machine(&sshd, Some(&sshd.keys.ed25519)), opts())
            .await
            .unwrap(),
    );
    let root = sshd.remote_dir("pipelined").unwrap();
    let root = root.to_str().unwrap();
    // Sizes around the request size (32 KiB) and a batch (64 requests, 2 MiB): none, one
    // request, several, one batch, and several batches.
    for size in [
        0usize,
        1,
        32 * 1024,
        32 * 1024 + 1,
        200_000,
        2 << 20,
        (2 << 20) + 1,
        (5 << 20) + 7,
    ] {
        let data: Vec<u8> = (0..size).map(|i| (i * 7 % 251) as u8).collect();
        let path = format!("{root}/f{size}");
        t.write_file(&path, &data, 0o640).await.unwrap();
        assert_eq!(t.read_file_range(&path, 0, 8 << 20).await.unwrap(), data);
        assert_eq!(t.stat(&path).await.unwrap().unwrap().mode, 0o640);
        let new = format!("{root}/n{size}");
        t.write_new_file(&new, &data, 0o600).await.unwrap();
        assert_eq!(t.read_file_range(&new, 0, 8 << 20).await.unwrap(), data);
        let err = t.write_new_file(&new, b"again", 0o600).await.unwrap_err();
        assert_eq!(err.code, ErrorCode::RemoteError, "{err}");
        assert_eq!(t.read_file_range(&new, 0, 8 << 20).await.unwrap(), data);
    }
    // A failed atomic write (missing directory) leaves nothing behind.
    let err = t
        .write_file(&format!("{root}/missing/f"), b"x", 0o600)
        .await
        .unwrap_err();
    assert_eq!(err.code, ErrorCode::RemoteNotFound, "{err}");
    let leftovers: Vec<String> = t
        .read_dir(root)
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.name)
        .filter(|n| n.contains("rr-tmp"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

#[tokio::test]
async fn streaming_read_and_write_of_a_large_file() {
    let sshd = start();
    let t = Remote::direct(
        ssh::connect(&machine(&sshd, Some(&sshd.keys.ed25519)), opts())
            .await
            .unwrap(),
    );
    let root = sshd.remote_dir("stream").unwrap();
    let path = format!("{}/big.bin", root.display());
    let data: Vec<u8> = (0..(8u32 << 20))
        .map(|i| (i.wrapping_mul(2654435761) >> 24) as u8)
        .collect();

    let mut w = t.open_write(&path, 0o644).await.unwrap();
    for chunk in data.chunks(100_000) {
        w.write_all(chunk).await.unwrap();
    }
    w.shutdown().await.unwrap();
    assert_eq!(
        t.stat(&path).await.unwrap().unwrap().size,
        data.len() as u64
    );

    let mut r = t.open_read(&path).await.unwrap();
    let mut back = Vec::new();
    r.read_to_end(&mut back).await.unwrap();
    assert!(back == data, "round trip differs");

    let out = t
        .exec(&format!("sha256sum {path}"), Default::default())
        .await
        .unwrap();
    use sha2::Digest;
    let want = hex::encode(sha2::Sha256::digest(&data));
    assert!(out.stdout_lossy().starts_with(&want));
}
