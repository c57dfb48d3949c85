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
