//! Transfer scenarios, written once against a [`Bed`] (local or SSH).

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use remote_runner_engine::ErrorCode;
use remote_runner_engine::engine::transfer::{
    TransferDirection, TransferKind, TransferOptions, TransferStatus,
};
use remote_runner_engine::machine::PathMapping;
use remote_runner_engine::store::{self, Store};

use super::{Bed, mode_of, pattern, sha_hex, snapshot, temp_leftovers, write};

pub fn verify() -> TransferOptions {
    TransferOptions {
        verify: true,
        ..Default::default()
    }
}

/// A file goes up and comes back byte for byte, with size, sha256, mode and the user's paths
/// in the records, verified at both ends, and no temporary file left.
pub async fn file_round_trip(bed: Bed) {
    let data = pattern(3 * 1024 * 1024 + 17, 1);
    let src = bed.lp("data.bin");
    write(&src, &data, 0o640);
    let rec = bed
        .engine
        .file_put(bed.sid(), &src, "data.bin", verify())
        .await
        .unwrap();
    assert_eq!(rec.status, TransferStatus::Succeeded);
    assert_eq!(rec.direction, TransferDirection::Put);
    assert_eq!(rec.kind, Some(TransferKind::File));
    assert_eq!((rec.bytes, rec.files), (data.len() as u64, 1));
    assert_eq!(rec.sha256.as_deref(), Some(sha_hex(&data).as_str()));
    assert_eq!(rec.verified, Some(true));
    assert_eq!(rec.source, src.to_string_lossy());
    assert_eq!(rec.destination, "data.bin");
    assert!(rec.ended_at.is_some() && rec.error.is_none());
    assert_eq!(std::fs::read(bed.rp("data.bin")).unwrap(), data);
    assert_eq!(mode_of(&bed.rp("data.bin")), 0o640);
    assert!(temp_leftovers(&bed.remote).is_empty());

    // Replacing an existing file works (rename over it); a trailing `/` means "inside".
    let data2 = pattern(1000, 2);
    write(&src, &data2, 0o600);
    let abs = format!("{}/", bed.remote.display());
    bed.engine
        .file_put(bed.sid(), &src, &abs, TransferOptions::default())
        .await
        .unwrap();
    assert_eq!(std::fs::read(bed.rp("data.bin")).unwrap(), data2);

    let back = bed.lp("back.bin");
    let rec = bed
        .engine
        .file_get(bed.sid(), "data.bin", &back, verify())
        .await
        .unwrap();
    assert_eq!(rec.direction, TransferDirection::Get);
    assert_eq!(
        (rec.source.as_str(), rec.verified),
        ("data.bin", Some(true))
    );
    assert_eq!(rec.sha256.as_deref(), Some(sha_hex(&data2).as_str()));
    assert_eq!(std::fs::read(&back).unwrap(), data2);
    assert_eq!(mode_of(&back), 0o600);
    // Into an existing local directory: keeps its name.
    let into = bed.lp("into");
    std::fs::create_dir(&into).unwrap();
    bed.engine
        .file_get(bed.sid(), "data.bin", &into, TransferOptions::default())
        .await
        .unwrap();
    assert_eq!(std::fs::read(into.join("data.bin")).unwrap(), data2);
    // A named symlink is followed: the file's bytes and mode, not the link's.
    std::os::unix::fs::symlink("data.bin", bed.rp("link.bin")).unwrap();
    let via = bed.lp("via-link.bin");
    bed.engine
        .file_get(bed.sid(), "link.bin", &via, TransferOptions::default())
        .await
        .unwrap();
    assert_eq!(std::fs::read(&via).unwrap(), data2);
    assert_eq!(mode_of(&via), 0o600);
    assert!(temp_leftovers(bed.local.path()).is_empty());
}

/// A tree with empty files, empty directories, unicode names, spaces, a newline in a name and
/// a deep chain goes up and comes back identical (content, modes), verified.
pub async fn tree_round_trip(bed: Bed) {
    let root = bed.lp("tree");
    write(&root.join("empty.txt"), b"", 0o644);
    std::fs::create_dir_all(root.join("empty dir")).unwrap();
    write(
        &root.join("ünïcødé ✓/名前 with space.txt"),
        b"unicode\n",
        0o600,
    );
    write(&root.join("odd/new\nline"), b"newline name", 0o644);
    write(&root.join("odd/back\\slash"), b"backslash name", 0o755);
    let mut deep = root.join("deep");
    for i in 0..40 {
        deep = deep.join(format!("level{i}"));
    }
    write(&deep.join("bottom.bin"), &pattern(70_000, 3), 0o640);
    for i in 0..50 {
        write(
            &root.join(format!("many/f{i:03}")),
            &pattern(i * 97, i as u32),
            0o644,
        );
    }
    std::fs::set_permissions(root.join("odd"), std::fs::Permissions::from_mode(0o750)).unwrap();
    std::os::unix::fs::symlink("empty.txt", root.join("link to empty")).unwrap();
    std::os::unix::fs::symlink("../odd/new\nline", root.join("ünïcødé ✓/up-link")).unwrap();
    let rec = bed
        .engine
        .file_put(bed.sid(), &root, "up", verify())
        .await
        .unwrap();
    assert_eq!(rec.kind, Some(TransferKind::Dir));
    assert_eq!(rec.files, 55);
    assert_eq!(rec.verified, Some(true));
    assert!(rec.sha256.is_none(), "trees have no single hash");
    assert!(rec.skipped.is_empty(), "{:?}", rec.skipped);
    assert_eq!(snapshot(&bed.rp("up")), snapshot(&root));

    let back = bed.lp("back");
    let rec = bed
        .engine
        .file_get(bed.sid(), "up", &back, verify())
        .await
        .unwrap();
    assert_eq!((rec.files, rec.verified), (55, Some(true)));
    assert_eq!(
        rec.bytes,
        (0..50).map(|i| i * 97).sum::<usize>() as u64 + 8 + 12 + 14 + 70_000
    );
    assert_eq!(snapshot(&back), snapshot(&root));
}

/// Upload: symlinks that stay inside the tree are recreated, others are reported, not sent.
pub async fn put_symlinks(bed: Bed) {
    let root = bed.lp("links");
    write(&root.join("sub/target.txt"), b"t", 0o644);
    std::os::unix::fs::symlink("sub/target.txt", root.join("inside")).unwrap();
    std::os::unix::fs::symlink("/etc/passwd", root.join("abs")).unwrap();
    std::os::unix::fs::symlink("../../x", root.join("sub/up")).unwrap();
    let rec = bed
        .engine
        .file_put(bed.sid(), &root, "links", TransferOptions::default())
        .await
        .unwrap();
    assert_eq!(rec.symlinks, 1);
    let skipped: Vec<&str> = rec.skipped.iter().map(|s| s.path.as_str()).collect();
    assert_eq!(skipped, ["abs", "sub/up"], "{:?}", rec.skipped);
    assert_eq!(
        std::fs::read_link(bed.rp("links/inside")).unwrap(),
        Path::new("sub/target.txt")
    );
    assert!(std::fs::symlink_metadata(bed.rp("links/abs")).is_err());
    assert!(std::fs::symlink_metadata(bed.rp("links/sub/up")).is_err());
    assert!(temp_leftovers(&bed.rp("links")).is_empty());
}

/// A read-only directory is filled before its mode is applied; modes survive both ways.
pub async fn read_only_dirs_and_modes(bed: Bed) {
    let root = bed.lp("ro");
    write(&root.join("locked/inside.txt"), b"x", 0o444);
    write(&root.join("run.sh"), b"#!/bin/sh\n", 0o755);
    std::fs::set_permissions(root.join("locked"), std::fs::Permissions::from_mode(0o555)).unwrap();
    bed.engine
        .file_put(bed.sid(), &root, "ro", TransferOptions::default())
        .await
        .unwrap();
    assert_eq!(mode_of(&bed.rp("ro/locked")), 0o555);
    assert_eq!(mode_of(&bed.rp("ro/locked/inside.txt")), 0o444);
    assert_eq!(mode_of(&bed.rp("ro/run.sh")), 0o755);
    let back = bed.lp("ro-back");
    bed.engine
        .file_get(bed.sid(), "ro", &back, TransferOptions::default())
        .await
        .unwrap();
    assert_eq!(snapshot(&back), snapshot(&root));
    // Let the temp dirs be cleaned up.
    for p in [
        bed.rp("ro/locked"),
        back.join("locked"),
        root.join("locked"),
    ] {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
}

/// A hostile remote tree: symlinks leaving the destination (absolute, `..`, `x/..`) are refused
/// and reported, an inside one is recreated, set-id bits are dropped, a FIFO is skipped, and an
/// existing local symlink in the way is never followed.
pub async fn hostile_tree_download(bed: Bed) {
    let r = bed.rp("hostile");
    write(&r.join("sub/file.txt"), b"inside", 0o644);
    write(&r.join("suid"), b"#!/bin/sh\n", 0o4755);
    write(&r.join("sgid-dir/x"), b"x", 0o644);
    std::fs::set_permissions(r.join("sgid-dir"), std::fs::Permissions::from_mode(0o2775)).unwrap();
    std::os::unix::fs::symlink("/etc/passwd", r.join("abs")).unwrap();
    std::os::unix::fs::symlink("../../outside", r.join("up")).unwrap();
    std::os::unix::fs::symlink("sub/..", r.join("sneaky")).unwrap();
    std::os::unix::fs::symlink("sub/file.txt", r.join("inside")).unwrap();
    std::os::unix::fs::symlink("../file.txt", r.join("sub/up-one")).unwrap();
    write(&r.join("victim-dir/payload"), b"must not escape", 0o644);
    let fifo = r.join("fifo");
    assert!(
        std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success()
    );
    bed.give_to_user(&r);
    // suid bits are cleared by chown; set it again (the owner may set it).
    std::fs::set_permissions(r.join("suid"), std::fs::Permissions::from_mode(0o4755)).unwrap();
    assert_eq!(mode_of(&r.join("suid")), 0o4755);

    // The local destination already has `victim-dir` as a symlink to a directory outside it.
    let dest = bed.lp("dest");
    let outside = bed.lp("outside");
    std::fs::create_dir_all(&dest).unwrap();
    std::fs::create_dir_all(&outside).unwrap();
    std::os::unix::fs::symlink(&outside, dest.join("victim-dir")).unwrap();

    let rec = bed
        .engine
        .file_get(bed.sid(), "hostile", &dest, TransferOptions::default())
        .await
        .unwrap();
    assert_eq!(rec.status, TransferStatus::Partial, "entries were skipped");
    let skipped: Vec<&str> = rec.skipped.iter().map(|s| s.path.as_str()).collect();
    for p in [
        "abs",
        "up",
        "sneaky",
        "fifo",
        "victim-dir",
        "victim-dir/payload",
    ] {
        assert!(skipped.contains(&p), "{p} not reported: {:?}", rec.skipped);
    }
    assert!(
        rec.skipped
            .iter()
            .any(|s| s.path == "abs" && s.reason.contains("outside")),
        "{:?}",
        rec.skipped
    );
    for p in ["abs", "up", "sneaky", "fifo"] {
        assert!(
            std::fs::symlink_metadata(dest.join(p)).is_err(),
            "{p} was created"
        );
    }
    assert!(
        std::fs::read_dir(&outside).unwrap().next().is_none(),
        "wrote outside"
    );
    assert_eq!(
        std::fs::read_link(dest.join("inside")).unwrap(),
        Path::new("sub/file.txt")
    );
    assert_eq!(
        std::fs::read_link(dest.join("sub/up-one")).unwrap(),
        Path::new("../file.txt")
    );
    assert_eq!(
        std::fs::read_to_string(dest.join("inside")).unwrap(),
        "inside"
    );
    assert_eq!(rec.symlinks, 2);
    assert_eq!(mode_of(&dest.join("suid")), 0o755);
    // Group-writable remotely, never here (issue 28).
    assert_eq!(mode_of(&dest.join("sgid-dir")), 0o755);

    // A single setuid file too.
    let one = bed.lp("one-suid");
    bed.engine
        .file_get(bed.sid(), "hostile/suid", &one, TransferOptions::default())
        .await
        .unwrap();
    assert_eq!(mode_of(&one), 0o755);
}

/// `file list`: a directory's entries with type, size, mode and mtime; a file lists itself;
/// a missing path is `remote_not_found` naming it.
pub async fn list_entries(bed: Bed) {
    write(&bed.rp("ls/a.txt"), b"hello", 0o640);
    std::fs::create_dir_all(bed.rp("ls/sub")).unwrap();
    std::os::unix::fs::symlink("a.txt", bed.rp("ls/link")).unwrap();
    bed.give_to_user(&bed.rp("ls"));
    let listing = bed.engine.file_list(bed.sid(), "ls").await.unwrap();
    assert_eq!(listing.kind, "dir");
    assert_eq!(listing.path, "ls");
    let names: Vec<&str> = listing.entries.iter().map(|e| e.name.as_str()).collect();
    assert_eq!(names, ["a.txt", "link", "sub"]);
    let a = &listing.entries[0];
    assert_eq!(
        (a.kind.as_str(), a.size, a.mode.as_str()),
        ("file", 5, "0640")
    );
    assert_eq!(a.path, format!("{}/ls/a.txt", bed.remote.display()));
    assert!(
        a.mtime.ends_with('Z') && a.mtime_unix > 1_600_000_000,
        "{a:?}"
    );
    assert_eq!(listing.entries[1].kind, "symlink");
    assert_eq!(listing.entries[2].kind, "dir");
    let json = serde_json::to_value(&listing).unwrap();
    assert_eq!(json["entries"][0]["type"], "file");

    let one = bed.engine.file_list(bed.sid(), "ls/a.txt").await.unwrap();
    assert_eq!((one.kind.as_str(), one.entries.len()), ("file", 1));

    let err = bed
        .engine
        .file_list(bed.sid(), "ls/nope")
        .await
        .unwrap_err();
    assert_eq!(err.code, ErrorCode::RemoteNotFound);
    assert!(err.message.contains("ls/nope"), "{}", err.message);
}

/// Every transfer is recorded, failures with their error; history per session and overall.
pub async fn history_records(bed: Bed) {
    let src = bed.lp("h.txt");
    write(&src, b"history", 0o644);
    let ok = bed
        .engine
        .file_put(bed.sid(), &src, "h.txt", TransferOptions::default())
        .await
        .unwrap();
    let err = bed
        .engine
        .file_get(
            bed.sid(),
            "missing.txt",
            &bed.lp("m.txt"),
            TransferOptions::default(),
        )
        .await
        .unwrap_err();
    assert_eq!(err.code, ErrorCode::RemoteNotFound);
    assert!(
        err.message.contains("missing.txt") && err.message.contains("xfer_"),
        "{}",
        err.message
    );
    let err2 = bed
        .engine
        .file_put(bed.sid(), &bed.lp("nope"), "x", TransferOptions::default())
        .await
        .unwrap_err();
    assert_eq!(err2.code, ErrorCode::InvalidArgument);
    assert!(!bed.lp("m.txt").exists());

    // Another process sees the same records.
    let other = bed.other_engine();
    let all = other.transfer_history(Some(bed.sid())).unwrap();
    assert_eq!(all.len(), 3);
    assert_eq!(all[0], ok);
    assert_eq!(all[1].status, TransferStatus::Failed);
    assert_eq!(all[1].error.as_ref().unwrap().code, "remote_not_found");
    assert_eq!(all[1].source, "missing.txt");
    assert_eq!(all[2].status, TransferStatus::Failed);
    assert_eq!(other.transfer_history(None).unwrap().len(), 3);
    assert_eq!(other.transfer_show(&ok.transfer_id).unwrap(), ok);
    assert_eq!(
        other.transfer_show("xfer_nope").unwrap_err().code,
        ErrorCode::UnknownTransfer
    );
    assert_eq!(
        other.transfer_history(Some("sess_nope")).unwrap_err().code,
        ErrorCode::UnknownSession
    );
}

/// A machine whose commands see `/virtual/proj` while SFTP sees the real directory: transfers
/// and listings use the mapping, records keep the user's paths.
pub async fn path_mappings(bed: Bed) {
    let mut machine = bed.machine.clone();
    machine.machine_id = "mapped".into();
    machine.path_mappings = vec![PathMapping {
        command_prefix: "/virtual/proj".into(),
        file_prefix: bed.remote.to_string_lossy().into_owned(),
    }];
    {
        let store = Store::open(bed.state.path()).unwrap();
        store::machines::insert(&store, &machine).unwrap();
    }
    let session = bed.engine.create_session(&machine, None).await.unwrap();
    let sid = session.session_id.as_str();
    let src = bed.lp("m.txt");
    write(&src, b"mapped", 0o644);
    // Missing parent directories are created, through the mapping.
    bed.engine
        .file_put(
            sid,
            &src,
            "/virtual/proj/new/sub/m.txt",
            TransferOptions::default(),
        )
        .await
        .unwrap();
    assert_eq!(std::fs::read(bed.rp("new/sub/m.txt")).unwrap(), b"mapped");
    let rec = bed
        .engine
        .file_put(sid, &src, "/virtual/proj/m.txt", TransferOptions::default())
        .await
        .unwrap();
    assert_eq!(rec.destination, "/virtual/proj/m.txt");
    assert_eq!(std::fs::read(bed.rp("m.txt")).unwrap(), b"mapped");
    let listing = bed.engine.file_list(sid, "/virtual/proj").await.unwrap();
    let e = listing.entries.iter().find(|e| e.name == "m.txt").unwrap();
    assert_eq!(e.path, "/virtual/proj/m.txt");
    let back = bed.lp("m-back.txt");
    let rec = bed
        .engine
        .file_get(
            sid,
            "/virtual/proj/m.txt",
            &back,
            TransferOptions::default(),
        )
        .await
        .unwrap();
    assert_eq!(rec.source, "/virtual/proj/m.txt");
    assert_eq!(std::fs::read(&back).unwrap(), b"mapped");
    let err = bed
        .engine
        .file_list(sid, "/virtual/proj/none")
        .await
        .unwrap_err();
    assert!(
        err.message.contains("/virtual/proj/none"),
        "{}",
        err.message
    );
}

/// Cancelling mid-file: status `cancelled`, nothing under the final name, no temp file.
pub async fn cancel_mid_transfer(bed: Bed) {
    let data = pattern(24 << 20, 9);
    let src = bed.lp("big.bin");
    write(&src, &data, 0o644);
    let options = TransferOptions::default();
    let cancel = options.cancel.clone();
    let options = TransferOptions {
        progress: Some(Arc::new(move |p| {
            if p.bytes_done >= 2 << 20 {
                cancel.cancel();
            }
        })),
        ..options
    };
    let err = bed
        .engine
        .file_put(bed.sid(), &src, "big.bin", options)
        .await
        .unwrap_err();
    assert_eq!(err.code, ErrorCode::Cancelled, "{err}");
    assert!(!bed.rp("big.bin").exists());
    assert!(temp_leftovers(&bed.remote).is_empty());
    let hist = bed.engine.transfer_history(Some(bed.sid())).unwrap();
    assert_eq!(hist[0].status, TransferStatus::Cancelled);
}

/// Progress reports reach the total and count files.
pub async fn progress_reports(bed: Bed) {
    let root = bed.lp("p");
    for i in 0..5 {
        write(&root.join(format!("f{i}")), &pattern(300_000, i), 0o644);
    }
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let s2 = seen.clone();
    let options = TransferOptions {
        progress: Some(Arc::new(move |p| s2.lock().unwrap().push(p.clone()))),
        ..Default::default()
    };
    bed.engine
        .file_put(bed.sid(), &root, "p", options)
        .await
        .unwrap();
    let seen = seen.lock().unwrap();
    let last = seen.last().unwrap();
    assert_eq!((last.bytes_done, last.bytes_total), (1_500_000, 1_500_000));
    assert_eq!((last.files_done, last.files_total), (5, 5));
    assert!(seen.windows(2).all(|w| w[0].bytes_done <= w[1].bytes_done));
}

/// Kill every per-connection sshd once the transfer is under way (SSH beds only): the transfer
/// fails, nothing is under the final name, and a retry completes.
pub async fn interrupted_transfers_retry(bed: Bed) {
    let data = pattern(40 << 20, 11);
    let src = bed.lp("i.bin");
    write(&src, &data, 0o644);

    let (fired, cb) = connection_killer(&bed);
    let err = bed
        .engine
        .file_put(
            bed.sid(),
            &src,
            "i.bin",
            TransferOptions {
                progress: Some(cb),
                ..Default::default()
            },
        )
        .await
        .unwrap_err();
    assert!(fired.load(Ordering::SeqCst));
    assert!(
        err.code == ErrorCode::ConnectionLost && err.message.contains("i.bin"),
        "{err}"
    );
    assert!(
        !bed.rp("i.bin").exists(),
        "a partial file under the final name"
    );
    let rec = bed
        .engine
        .file_put(bed.sid(), &src, "i.bin", verify())
        .await
        .unwrap();
    assert_eq!(rec.sha256.as_deref(), Some(sha_hex(&data).as_str()));
    assert_eq!(std::fs::read(bed.rp("i.bin")).unwrap(), data);
    // Left-overs, if any, only under temporary names.
    assert_only(&bed.remote, "i.bin");

    // The same for a download.
    let dest = bed.lp("i-back.bin");
    let (fired, cb) = connection_killer(&bed);
    let err = bed
        .engine
        .file_get(
            bed.sid(),
            "i.bin",
            &dest,
            TransferOptions {
                progress: Some(cb),
                ..Default::default()
            },
        )
        .await
        .unwrap_err();
    assert!(fired.load(Ordering::SeqCst));
    assert!(
        err.code == ErrorCode::ConnectionLost && err.message.contains("i.bin"),
        "{err}"
    );
    assert!(!dest.exists(), "a partial file under the final name");
    let rec = bed
        .engine
        .file_get(bed.sid(), "i.bin", &dest, verify())
        .await
        .unwrap();
    assert_eq!(rec.sha256.as_deref(), Some(sha_hex(&data).as_str()));
    assert_eq!(std::fs::read(&dest).unwrap(), data);
    let hist = bed.engine.transfer_history(Some(bed.sid())).unwrap();
    let statuses: Vec<TransferStatus> = hist.iter().map(|r| r.status).collect();
    assert_eq!(
        statuses,
        [
            TransferStatus::Failed,
            TransferStatus::Succeeded,
            TransferStatus::Failed,
            TransferStatus::Succeeded
        ]
    );
}

/// SIGKILL every process below the sshd listener (per-connection monitors and their children).
/// A progress callback that kills the bed's SSH connections once 4 MiB went through, and
/// whether it did.
fn connection_killer(
    bed: &Bed,
) -> (
    Arc<AtomicBool>,
    remote_runner_engine::engine::transfer::ProgressFn,
) {
    let fired = Arc::new(AtomicBool::new(false));
    let listener = bed.sshd.as_ref().unwrap().listener_pid();
    let f = fired.clone();
    let cb = Arc::new(
        move |p: &remote_runner_engine::engine::transfer::TransferProgress| {
            if p.bytes_done >= 4 << 20 && !f.swap(true, Ordering::SeqCst) {
                kill_connections(listener);
            }
        },
    );
    (fired, cb)
}

/// `dir` holds nothing but `name` (if anything), temporaries of it, and the state directory.
fn assert_only(dir: &Path, name: &str) {
    for n in std::fs::read_dir(dir).unwrap() {
        let n = n.unwrap().file_name().to_string_lossy().into_owned();
        let temp = n.starts_with(&format!(".{name}.rr-part-"));
        assert!(n == name || n == ".remote-runner" || temp, "{n}");
    }
}

fn kill_connections(listener: u32) {
    let mut frontier = vec![listener];
    let mut all = Vec::new();
    while let Some(p) = frontier.pop() {
        let out = std::process::Command::new("pgrep")
            .args(["-P", &p.to_string()])
            .output()
            .unwrap();
        for line in String::from_utf8_lossy(&out.stdout).lines() {
            if let Ok(c) = line.trim().parse::<u32>() {
                all.push(c);
                frontier.push(c);
            }
        }
    }
    for pid in all {
        // A process may already be gone (its parent went first).
        let _ = std::process::Command::new("kill")
            .args(["-9", &pid.to_string()])
            .stderr(std::process::Stdio::null())
            .status();
    }
}

/// A root-owned 0700 directory (SSH beds, as rrtest): list, get and put name the path and say
/// `permission_denied`.
pub async fn permission_denied(bed: Bed) {
    let locked = bed.rp("locked");
    write(&locked.join("secret.txt"), b"no", 0o600);
    std::fs::set_permissions(&locked, std::fs::Permissions::from_mode(0o700)).unwrap();
    let err = bed.engine.file_list(bed.sid(), "locked").await.unwrap_err();
    assert_eq!(err.code, ErrorCode::PermissionDenied, "{err}");
    assert!(err.message.contains("locked"), "{}", err.message);
    let err = bed
        .engine
        .file_get(
            bed.sid(),
            "locked/secret.txt",
            &bed.lp("s.txt"),
            TransferOptions::default(),
        )
        .await
        .unwrap_err();
    assert_eq!(err.code, ErrorCode::PermissionDenied, "{err}");
    assert!(err.message.contains("locked/secret.txt"), "{}", err.message);
    let src = bed.lp("in.txt");
    write(&src, b"in", 0o644);
    let err = bed
        .engine
        .file_put(bed.sid(), &src, "locked/in.txt", TransferOptions::default())
        .await
        .unwrap_err();
    assert_eq!(err.code, ErrorCode::PermissionDenied, "{err}");
    assert!(err.message.contains("locked/"), "{}", err.message);
    let err = bed
        .engine
        .file_get(
            bed.sid(),
            "locked",
            &bed.lp("l"),
            TransferOptions::default(),
        )
        .await
        .unwrap_err();
    assert_eq!(err.code, ErrorCode::PermissionDenied, "{err}");
    assert!(!locked.join("in.txt").exists());
}

/// A 1 GiB sparse file goes up and back with matching hashes (sizes exact).
pub async fn sparse_gib_round_trip(bed: Bed, size: u64) {
    let src = bed.lp("sparse.img");
    let f = std::fs::File::create(&src).unwrap();
    f.set_len(size).unwrap();
    drop(f);
    let up = bed
        .engine
        .file_put(bed.sid(), &src, "sparse.img", verify())
        .await
        .unwrap();
    assert_eq!(up.bytes, size);
    assert_eq!(std::fs::metadata(bed.rp("sparse.img")).unwrap().len(), size);
    let back = bed.lp("sparse-back.img");
    let down = bed
        .engine
        .file_get(bed.sid(), "sparse.img", &back, verify())
        .await
        .unwrap();
    assert_eq!(down.bytes, size);
    assert_eq!(down.sha256, up.sha256);
    assert_eq!(std::fs::metadata(&back).unwrap().len(), size);
    let _ = std::fs::remove_file(bed.rp("sparse.img"));
}

/// A modification time no freshly written file has: set on local files, it shows a tree went
/// through the tar stream (which keeps times; the file channel writes new files).
const OLD_MTIME: std::time::Duration = std::time::Duration::from_secs(1_000_000_000);

fn set_old_mtime(p: &Path) {
    let f = std::fs::File::options().write(true).open(p).unwrap();
    f.set_modified(std::time::UNIX_EPOCH + OLD_MTIME).unwrap();
}

fn has_old_mtime(p: &Path) -> bool {
    let m = std::fs::metadata(p).unwrap().modified().unwrap();
    m == std::time::UNIX_EPOCH + OLD_MTIME
}

/// A tree with nested and empty directories, exact modes (a read-only directory among them),
/// spaces, newlines, UTF-8 and long paths in names, a symlink inside and one leaving the tree,
/// and a FIFO goes up as one tar stream: every file in place and verified, the links and the
/// FIFO per the symlink/special-file policy, no staging directory left.
pub async fn tree_stream_put(bed: Bed) {
    let root = bed.lp("tree");
    write(&root.join("top.txt"), b"top\n", 0o600);
    write(&root.join("bin/run me.sh"), b"#!/bin/sh\n", 0o755);
    write(
        &root.join("名前/ünï cødé\nline.txt"),
        &pattern(5000, 7),
        0o644,
    );
    let mut deep = root.join("deep");
    for i in 0..12 {
        deep = deep.join(format!("a fairly long directory name {i}"));
    }
    write(&deep.join("bottom.bin"), &pattern(300_000, 9), 0o640);
    write(&root.join("ro/inside.txt"), b"in a read-only dir", 0o444);
    std::fs::create_dir_all(root.join("empty/also empty")).unwrap();
    std::fs::set_permissions(root.join("bin"), std::fs::Permissions::from_mode(0o750)).unwrap();
    std::os::unix::fs::symlink("../top.txt", root.join("bin/link to top")).unwrap();
    std::os::unix::fs::symlink("/etc/passwd", root.join("outside")).unwrap();
    let made = std::process::Command::new("mkfifo")
        .arg(root.join("pipe"))
        .status()
        .unwrap();
    assert!(made.success());
    set_old_mtime(&root.join("top.txt"));
    std::fs::set_permissions(root.join("ro"), std::fs::Permissions::from_mode(0o555)).unwrap();

    let rec = bed
        .engine
        .file_put(bed.sid(), &root, "up", verify())
        .await
        .unwrap();
    assert!(
        has_old_mtime(&bed.rp("up/top.txt")),
        "not sent as a tar stream"
    );
    assert_eq!(rec.status, TransferStatus::Partial, "{:?}", rec.error);
    assert_eq!(rec.kind, Some(TransferKind::Dir));
    assert_eq!((rec.files, rec.symlinks, rec.verified), (5, 1, Some(true)));
    assert_eq!(rec.bytes, 4 + 10 + 5000 + 300_000 + 18);
    let mut skipped: Vec<&str> = rec.skipped.iter().map(|s| s.path.as_str()).collect();
    skipped.sort();
    assert_eq!(skipped, ["outside", "pipe"]);
    std::fs::remove_file(root.join("outside")).unwrap();
    std::fs::remove_file(root.join("pipe")).unwrap();
    assert_eq!(snapshot(&bed.rp("up")), snapshot(&root));
    assert!(temp_leftovers(&bed.remote).is_empty());
    std::fs::set_permissions(root.join("ro"), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(bed.rp("up/ro"), std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// A tree uploaded over an existing directory is merged into it: its files replace those of
/// the same name, everything else stays, and nothing temporary is left anywhere.
pub async fn tree_stream_merge(bed: Bed) {
    let dest = bed.rp("merged");
    write(&dest.join("keep.txt"), b"kept", 0o644);
    write(&dest.join("a.txt"), b"old a", 0o644);
    write(&dest.join("sub/old.txt"), b"old sub", 0o600);
    bed.give_to_user(&dest);
    let root = bed.lp("tree");
    write(&root.join("a.txt"), b"new a", 0o640);
    write(&root.join("sub/new.txt"), b"new sub", 0o644);
    write(&root.join("sub/.hidden"), b"hidden", 0o644);
    write(&root.join("fresh/x.txt"), b"x", 0o644);
    set_old_mtime(&root.join("a.txt"));
    let rec = bed
        .engine
        .file_put(bed.sid(), &root, "merged", TransferOptions::default())
        .await
        .unwrap();
    assert_eq!((rec.status, rec.files), (TransferStatus::Succeeded, 4));
    assert!(
        has_old_mtime(&dest.join("a.txt")),
        "not sent as a tar stream"
    );
    assert_eq!(std::fs::read(dest.join("keep.txt")).unwrap(), b"kept");
    assert_eq!(std::fs::read(dest.join("a.txt")).unwrap(), b"new a");
    assert_eq!(mode_of(&dest.join("a.txt")), 0o640);
    assert_eq!(std::fs::read(dest.join("sub/old.txt")).unwrap(), b"old sub");
    assert_eq!(std::fs::read(dest.join("sub/new.txt")).unwrap(), b"new sub");
    assert_eq!(std::fs::read(dest.join("sub/.hidden")).unwrap(), b"hidden");
    assert_eq!(std::fs::read(dest.join("fresh/x.txt")).unwrap(), b"x");
    for dir in [&bed.remote, &dest, &dest.join("sub")] {
        assert!(temp_leftovers(dir).is_empty(), "{}", dir.display());
    }
}

/// The connection dies while a tree streams up: the transfer fails with `connection_lost`,
/// nothing appears under the destination's name (the staging directory is hidden), and a retry
/// puts the whole tree in place.
pub async fn tree_stream_killed(bed: Bed) {
    let root = bed.lp("big");
    for i in 0..40 {
        write(
            &root.join(format!("d{}/f{i}", i % 4)),
            &pattern(1 << 20, i),
            0o644,
        );
    }
    let (fired, cb) = connection_killer(&bed);
    let options = TransferOptions {
        progress: Some(cb),
        ..Default::default()
    };
    let err = bed
        .engine
        .file_put(bed.sid(), &root, "big", options)
        .await
        .unwrap_err();
    assert!(fired.load(Ordering::SeqCst));
    assert_eq!(err.code, ErrorCode::ConnectionLost, "{err}");
    assert!(
        !bed.rp("big").exists(),
        "a partial tree under the final name"
    );
    assert_only(&bed.remote, "big");
    let rec = bed
        .engine
        .file_put(bed.sid(), &root, "big", verify())
        .await
        .unwrap();
    assert_eq!((rec.files, rec.verified), (40, Some(true)));
    assert_eq!(snapshot(&bed.rp("big")), snapshot(&root));
}
