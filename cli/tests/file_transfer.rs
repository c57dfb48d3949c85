//! `file put | get | list | history` through the CLI binary, on `local` and over the real sshd:
//! a round trip with `--verify`, listing metadata, the transfer records' contract fields, and a
//! missing remote path.

mod common;
mod session_bed;

use session_bed::{Bed, assert_fields};

const TRANSFER_FIELDS: &[&str] = &[
    "transfer_id",
    "direction",
    "source",
    "destination",
    "started_at",
    "ended_at",
    "status",
    "bytes",
    "sha256",
    "error",
];

fn files_round_trip_with_verification(bed: &Bed) {
    let s = bed.session();
    let content: Vec<u8> = (0..200_000u32).map(|i| (i * 7 % 251) as u8).collect();
    let local = bed.sb.path().join("input.bin");
    std::fs::write(&local, &content).unwrap();
    let remote = bed.at("uploaded.bin");

    let put = bed.json(&[
        "file",
        "put",
        "--session",
        &s,
        "--local",
        local.to_str().unwrap(),
        "--remote",
        &remote,
        "--verify",
    ]);
    assert_fields(&put, TRANSFER_FIELDS);
    assert_eq!(put["direction"], "put");
    assert_eq!(put["status"], "succeeded");
    assert_eq!(put["bytes"], content.len() as u64);
    assert_eq!(put["verified"], true);
    assert_eq!(put["destination"], remote.as_str());
    assert_eq!(std::fs::read(&remote).unwrap(), content);

    // The command side sees the file at the same path.
    let seen = bed.exec(&s, "wc -c < uploaded.bin", &[]).json();
    assert_eq!(seen["stdout"], format!("{}\n", content.len()));

    let listing = bed.json(&["file", "list", "--session", &s, "--remote", &bed.work_str()]);
    let entry = listing["entries"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["name"] == "uploaded.bin")
        .unwrap_or_else(|| panic!("uploaded.bin not listed: {listing}"))
        .clone();
    assert_fields(&entry, &["name", "path", "type", "size", "mode", "mtime"]);
    assert_eq!(entry["type"], "file");
    assert_eq!(entry["size"], content.len() as u64);

    let back = bed.sb.path().join("back.bin");
    let get = bed.json(&[
        "file",
        "get",
        "--session",
        &s,
        "--remote",
        &remote,
        "--local",
        back.to_str().unwrap(),
        "--verify",
    ]);
    assert_eq!(get["direction"], "get");
    assert_eq!(get["status"], "succeeded");
    assert_eq!(get["verified"], true);
    assert_eq!(get["sha256"], put["sha256"]);
    assert_eq!(std::fs::read(&back).unwrap(), content);

    let history = bed.json(&["file", "history", "--session", &s]);
    let ids: Vec<&str> = history["transfers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["transfer_id"].as_str().unwrap())
        .collect();
    assert_eq!(
        ids,
        vec![
            put["transfer_id"].as_str().unwrap(),
            get["transfer_id"].as_str().unwrap()
        ]
    );
    assert_eq!(history["summary"]["transfer_count"], 2);

    // Human mode, not a terminal: a record, no progress bar.
    let human = bed.run(&[
        "file",
        "get",
        "--session",
        &s,
        "--remote",
        &remote,
        "--local",
        back.to_str().unwrap(),
    ]);
    assert_eq!(human.code, 0, "{human:?}");
    assert!(human.stdout.contains("succeeded"), "{}", human.stdout);
    assert!(
        human.stderr.is_empty(),
        "no progress off a terminal: {human:?}"
    );
}
both_machines!(round_trip, files_round_trip_with_verification);

fn a_missing_remote_path_is_named(bed: &Bed) {
    let s = bed.session();
    let missing = bed.at("no-such-file");
    let back = bed.sb.path().join("never");
    let r = bed.run(&[
        "file",
        "get",
        "--session",
        &s,
        "--remote",
        &missing,
        "--local",
        back.to_str().unwrap(),
        "--json",
    ]);
    assert_eq!(r.code, 3, "{r:?}");
    let err = r.error();
    assert_eq!(err["code"], "remote_not_found");
    assert!(err["message"].as_str().unwrap().contains(&missing), "{err}");
    assert!(r.stdout.is_empty());
    assert!(!back.exists());
    let list = bed.run(&[
        "file",
        "list",
        "--session",
        &s,
        "--remote",
        &missing,
        "--json",
    ]);
    assert_eq!(list.code, 3, "{list:?}");
    assert_eq!(list.error()["code"], "remote_not_found");
}
both_machines!(missing_path, a_missing_remote_path_is_named);

/// The CLI under `umask` `mask` (a shell sets it, then runs the CLI in its place).
fn with_umask(bed: &Bed, mask: &str, args: &[&str]) -> serde_json::Value {
    let inner = bed.command(args);
    let mut cmd = std::process::Command::new("sh");
    cmd.arg("-c")
        .arg(format!("umask {mask}; exec \"$@\""))
        .arg("sh")
        .arg(inner.get_program())
        .args(inner.get_args());
    for (k, v) in inner.get_envs() {
        match v {
            Some(v) => cmd.env(k, v),
            None => cmd.env_remove(k),
        };
    }
    if let Some(dir) = inner.get_current_dir() {
        cmd.current_dir(dir);
    }
    let r = common::run_command(cmd, None);
    assert_eq!(r.code, 0, "{r:?}");
    r.json()
}

fn mode_of(p: &std::path::Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::symlink_metadata(p).unwrap().permissions().mode() & 0o7777
}

/// A hostile remote cannot widen local permissions (issue 28): a tree of 0777 directories and a
/// 4777 file downloaded into an existing 0755 directory leaves it 0755; what is new gets the
/// remote mode masked by the umask and by 0755 (never group/other-writable, never set-id); under
/// umask 077 nothing is readable by others; a single file likewise.
fn downloads_never_widen_local_permissions(bed: &Bed) {
    use std::os::unix::fs::PermissionsExt;
    let s = bed.session();
    let loose = bed.work.join("loose");
    std::fs::create_dir_all(loose.join("sub")).unwrap();
    std::fs::write(loose.join("run.sh"), b"#!/bin/sh\n").unwrap();
    std::fs::write(loose.join("data.txt"), b"data").unwrap();
    std::fs::write(loose.join("sub/inner.txt"), b"inner").unwrap();
    if bed.is_ssh() {
        let ok = std::process::Command::new("chown")
            .args(["-R", "rrtest:rrtest"])
            .arg(&loose)
            .status()
            .unwrap()
            .success();
        assert!(ok);
    }
    let set = |rel: &str, mode: u32| {
        std::fs::set_permissions(loose.join(rel), std::fs::Permissions::from_mode(mode)).unwrap()
    };
    set("", 0o777);
    set("sub", 0o777);
    set("run.sh", 0o4777);
    set("data.txt", 0o666);
    set("sub/inner.txt", 0o666);

    let home = bed.sb.path().join("home-like");
    std::fs::create_dir(&home).unwrap();
    std::fs::set_permissions(&home, std::fs::Permissions::from_mode(0o755)).unwrap();
    let home_s = home.to_str().unwrap();
    let remote = bed.at("loose");
    let get = with_umask(
        bed,
        "022",
        &[
            "file",
            "get",
            "--session",
            &s,
            "--remote",
            &remote,
            "--local",
            home_s,
            "--json",
        ],
    );
    assert_eq!(get["status"], "succeeded", "{get}");
    assert_eq!(
        mode_of(&home),
        0o755,
        "the existing destination keeps its mode"
    );
    assert_eq!(mode_of(&home.join("sub")), 0o755);
    assert_eq!(mode_of(&home.join("run.sh")), 0o755);
    assert_eq!(mode_of(&home.join("data.txt")), 0o644);
    assert_eq!(mode_of(&home.join("sub/inner.txt")), 0o644);

    let fresh = bed.sb.path().join("fresh");
    let get = with_umask(
        bed,
        "077",
        &[
            "file",
            "get",
            "--session",
            &s,
            "--remote",
            &remote,
            "--local",
            fresh.to_str().unwrap(),
            "--json",
        ],
    );
    assert_eq!(get["status"], "succeeded", "{get}");
    assert_eq!(mode_of(&fresh), 0o700);
    assert_eq!(mode_of(&fresh.join("sub")), 0o700);
    assert_eq!(mode_of(&fresh.join("run.sh")), 0o700);
    assert_eq!(mode_of(&fresh.join("data.txt")), 0o600);

    let one = bed.sb.path().join("one.sh");
    let run_sh = bed.at("loose/run.sh");
    with_umask(
        bed,
        "077",
        &[
            "file",
            "get",
            "--session",
            &s,
            "--remote",
            &run_sh,
            "--local",
            one.to_str().unwrap(),
            "--json",
        ],
    );
    assert_eq!(mode_of(&one), 0o700);
    // A file that exists keeps its own mode when replaced.
    std::fs::set_permissions(&one, std::fs::Permissions::from_mode(0o640)).unwrap();
    with_umask(
        bed,
        "022",
        &[
            "file",
            "get",
            "--session",
            &s,
            "--remote",
            &run_sh,
            "--local",
            one.to_str().unwrap(),
            "--json",
        ],
    );
    assert_eq!(mode_of(&one), 0o640);
    // Another user's file in the way (a shared directory): its mode is theirs and is not kept;
    // the file, now ours, gets the new-file mode.
    let planted = bed.sb.path().join("planted.txt");
    std::fs::write(&planted, b"planted").unwrap();
    std::fs::set_permissions(&planted, std::fs::Permissions::from_mode(0o666)).unwrap();
    std::os::unix::fs::chown(&planted, Some(65534), Some(65534)).unwrap();
    let data = bed.at("loose/data.txt");
    with_umask(
        bed,
        "022",
        &[
            "file",
            "get",
            "--session",
            &s,
            "--remote",
            &data,
            "--local",
            planted.to_str().unwrap(),
            "--json",
        ],
    );
    assert_eq!(std::fs::read(&planted).unwrap(), b"data");
    assert_eq!(mode_of(&planted), 0o644);
}
both_machines!(never_wider, downloads_never_widen_local_permissions);
