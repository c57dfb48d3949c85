//! Downloads that lie or stop (issue 21), on `local` and over SSH (real sshd, SFTP): special
//! files are recognised and skipped with their reason, a tree too deep for the local path limit
//! says `partial`, never `succeeded`, and sparse files stay sparse.

mod transfer_common;

use std::os::unix::fs::MetadataExt;
use std::path::Path;

use remote_runner_engine::engine::transfer::{TransferOptions, TransferStatus};
use remote_runner_engine::error::ErrorCode;
use transfer_common::{Bed, bounded, local_bed, ssh_bed, temp_leftovers, write};

macro_rules! on_both {
    ($($name:ident),* $(,)?) => {$(
        mod $name {
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn local() {
                super::bounded(async { super::$name(super::local_bed().await).await }).await;
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn ssh() {
                super::bounded(async { super::$name(super::ssh_bed(stringify!($name)).await).await }).await;
            }
        }
    )*};
}

on_both!(special_files, too_deep_for_here, sparse_stays_sparse);

fn mknod(path: &Path, kind: &str, major_minor: &[&str]) {
    let ok = std::process::Command::new("mknod")
        .arg(path)
        .arg(kind)
        .args(major_minor)
        .status()
        .unwrap()
        .success();
    assert!(ok, "mknod {} (these tests run as root)", path.display());
}

/// A socket, a FIFO, a character and a block device in a tree are skipped with the reason and
/// the download says `partial`; over SFTP they are not taken for directories. Named alone, a
/// socket is refused as "not a regular file", not as missing.
async fn special_files(bed: Bed) {
    let r = bed.rp("special");
    write(&r.join("plain.txt"), b"kept", 0o644);
    let _socket = std::os::unix::net::UnixListener::bind(r.join("sock")).unwrap();
    mknod(&r.join("fifo"), "p", &[]);
    mknod(&r.join("chardev"), "c", &["1", "3"]);
    mknod(&r.join("blockdev"), "b", &["7", "200"]);
    bed.give_to_user(&r);

    let dest = bed.lp("special-back");
    let rec = bed
        .engine
        .file_get(bed.sid(), "special", &dest, TransferOptions::default())
        .await
        .unwrap();
    assert_eq!(rec.status, TransferStatus::Partial, "{rec:?}");
    assert_eq!(rec.files, 1);
    assert_eq!(std::fs::read(dest.join("plain.txt")).unwrap(), b"kept");
    for name in ["sock", "fifo", "chardev", "blockdev"] {
        let entry = rec
            .skipped
            .iter()
            .find(|s| s.path == name)
            .unwrap_or_else(|| panic!("{name} not reported: {:?}", rec.skipped));
        assert!(entry.reason.contains("device, socket or FIFO"), "{entry:?}");
        assert!(std::fs::symlink_metadata(dest.join(name)).is_err());
    }
    let history = bed.engine.transfer_history(Some(bed.sid())).unwrap();
    assert_eq!(history.last().unwrap().status, TransferStatus::Partial);

    let err = bed
        .engine
        .file_get(
            bed.sid(),
            "special/sock",
            &bed.lp("sock"),
            TransferOptions::default(),
        )
        .await
        .unwrap_err();
    assert_eq!(err.code, ErrorCode::InvalidArgument, "{err}");
    assert!(
        err.message.contains("not a regular file"),
        "{}",
        err.message
    );
}

/// A tree deeper than the local path limit allows under its destination: what could not be
/// written is listed with the reason and the status is `partial`.
async fn too_deep_for_here(bed: Bed) {
    let level = "d".repeat(60);
    let mut deep = bed.rp("deep");
    for _ in 0..40 {
        deep = deep.join(&level);
    }
    write(&deep.join("bottom.txt"), b"far down", 0o644);
    write(&bed.rp("deep/top.txt"), b"near", 0o644);
    bed.give_to_user(&bed.rp("deep"));
    // About 2,500 bytes of remote tree under a local destination about 2,000 bytes deep.
    let mut dest = bed.local.path().to_path_buf();
    for _ in 0..20 {
        dest = dest.join("x".repeat(99));
    }
    std::fs::create_dir_all(&dest).unwrap();
    let dest = dest.join("deep");
    let rec = bed
        .engine
        .file_get(bed.sid(), "deep", &dest, TransferOptions::default())
        .await
        .unwrap();
    assert_eq!(rec.status, TransferStatus::Partial, "{rec:?}");
    assert_eq!(std::fs::read(dest.join("top.txt")).unwrap(), b"near");
    assert!(
        rec.skipped
            .iter()
            .any(|s| s.reason.contains("over this host's limit")),
        "{:?}",
        rec.skipped
    );
    assert!(
        rec.skipped.iter().any(|s| s.path.ends_with("bottom.txt")),
        "the file that was not written is listed: {:?}",
        rec.skipped
    );
}

/// A 256 MiB remote file holding 8 KiB of data is written with holes here.
async fn sparse_stays_sparse(bed: Bed) {
    let src = bed.rp("disk.img");
    let f = std::fs::File::create(&src).unwrap();
    f.set_len(256 << 20).unwrap();
    drop(f);
    {
        use std::io::{Seek, SeekFrom, Write};
        let mut f = std::fs::OpenOptions::new().write(true).open(&src).unwrap();
        f.seek(SeekFrom::Start(100 << 20)).unwrap();
        f.write_all(&[0xab; 8192]).unwrap();
    }
    bed.give_to_user(&src);
    let back = bed.lp("disk.img");
    let rec = bed
        .engine
        .file_get(bed.sid(), "disk.img", &back, TransferOptions::default())
        .await
        .unwrap();
    assert_eq!(rec.status, TransferStatus::Succeeded);
    let meta = std::fs::metadata(&back).unwrap();
    assert_eq!(meta.len(), 256 << 20);
    let allocated = meta.blocks() * 512;
    assert!(
        allocated < 4 << 20,
        "{allocated} bytes allocated for a file holding 8 KiB"
    );
    assert_eq!(
        transfer_common::sha_hex(&std::fs::read(&back).unwrap()),
        rec.sha256.unwrap()
    );
    assert!(temp_leftovers(bed.local.path()).is_empty());
}

on_both!(deeper_than_path_max);

/// A remote tree deeper than the path-length limit (built one level at a time with `cd`, as a
/// program can): the download never says `succeeded` with the bottom missing; what was not
/// fetched is listed with the code `path_too_long` and its path.
async fn deeper_than_path_max(bed: Bed) {
    let root = bed.rp("abyss");
    std::fs::create_dir(&root).unwrap();
    let level = "l".repeat(20);
    let script = format!(
        "cd \"$1\" && echo near > top.txt && i=0; while [ $i -lt 200 ]; do mkdir {level} && cd {level} || exit 1; i=$((i+1)); done; echo far > bottom.txt"
    );
    // bash: dash's `cd` gives up once its logical path passes the limit.
    let ok = std::process::Command::new("bash")
        .args(["-c", &script, "sh"])
        .arg(&root)
        .status()
        .unwrap()
        .success();
    assert!(ok, "building the deep tree");
    bed.give_to_user(&root);
    let dest = bed.lp("abyss");
    let rec = bed
        .engine
        .file_get(bed.sid(), "abyss", &dest, TransferOptions::default())
        .await
        .unwrap();
    assert_eq!(rec.status, TransferStatus::Partial, "{rec:?}");
    assert_eq!(std::fs::read(dest.join("top.txt")).unwrap(), b"near\n");
    assert!(
        rec.skipped
            .iter()
            .any(|s| s.code.as_deref() == Some("path_too_long") && s.path.starts_with("llll")),
        "the part not fetched is listed with its code: {:?}",
        rec.skipped
    );
    // `rm -r` works below the limit (openat); the temp dirs' own cleanup may not.
    for dir in [&root, &dest] {
        let _ = std::process::Command::new("rm")
            .arg("-rf")
            .arg(dir)
            .status();
    }
}
