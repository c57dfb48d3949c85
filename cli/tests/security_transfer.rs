//! A `file get` killed with SIGKILL leaves no partial file behind for good (issue 21): its
//! record names the partial file while it runs, and the next `file history` (or transfer)
//! removes it and marks the record failed with `interrupted`.

mod common;

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use common::Sandbox;

fn partial_files(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains(".rr-part-"))
        .collect()
}

#[test]
fn a_killed_get_leaves_no_partial_file_and_its_record_says_interrupted() {
    let sb = Sandbox::new();
    let work = sb.path().join("work");
    let dest = sb.path().join("dest");
    std::fs::create_dir_all(&work).unwrap();
    std::fs::create_dir_all(&dest).unwrap();
    // 2 GiB (sparse on both ends): long enough to be caught half way.
    let big = work.join("big.img");
    std::fs::File::create(&big)
        .unwrap()
        .set_len(2 << 30)
        .unwrap();
    let created = sb.ok_json(&[
        "session",
        "create",
        "--machine",
        "local",
        "--cwd",
        work.to_str().unwrap(),
    ]);
    let session = created["session_id"].as_str().unwrap();

    let mut get = sb.command(&[
        "file",
        "get",
        "--session",
        session,
        "--remote",
        big.to_str().unwrap(),
        "--local",
        dest.join("big.img").to_str().unwrap(),
    ]);
    let mut child = get
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while partial_files(&dest).is_empty() {
        assert!(
            child.try_wait().unwrap().is_none(),
            "the get ended before it could be killed"
        );
        assert!(Instant::now() < deadline, "no partial file appeared");
        std::thread::sleep(Duration::from_millis(5));
    }
    // While it runs, its record names where its partial files are (and is left alone).
    let running = sb.ok_json(&["file", "history", "--session", session]);
    let rec = &running["transfers"][0];
    assert_eq!(rec["status"], "running", "{rec}");
    assert_eq!(rec["partial_files"]["dir"], dest.to_str().unwrap(), "{rec}");
    let marker = rec["partial_files"]["name_contains"].as_str().unwrap();
    assert!(partial_files(&dest)[0].contains(marker), "{rec}");

    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    assert_eq!(
        partial_files(&dest).len(),
        1,
        "the kill left a partial file"
    );

    let history = sb.ok_json(&["file", "history", "--session", session]);
    let rec = &history["transfers"][0];
    assert_eq!(rec["status"], "failed", "{rec}");
    assert_eq!(rec["error"]["code"], "interrupted", "{rec}");
    assert!(
        rec["error"]["message"]
            .as_str()
            .unwrap()
            .contains("partial file(s)"),
        "{rec}"
    );
    assert!(rec.get("partial_files").is_none(), "{rec}");
    assert!(
        partial_files(&dest).is_empty(),
        "left: {:?}",
        partial_files(&dest)
    );
    assert!(!dest.join("big.img").exists());
    sb.ok_json(&["session", "destroy", "--session", session]);
}

#[test]
fn a_download_that_skipped_entries_says_partial_and_exits_1() {
    let sb = Sandbox::new();
    let work = sb.path().join("work");
    let tree = work.join("tree");
    std::fs::create_dir_all(&tree).unwrap();
    std::fs::write(tree.join("a.txt"), "a").unwrap();
    let _socket = std::os::unix::net::UnixListener::bind(tree.join("sock")).unwrap();
    let created = sb.ok_json(&[
        "session",
        "create",
        "--machine",
        "local",
        "--cwd",
        work.to_str().unwrap(),
    ]);
    let session = created["session_id"].as_str().unwrap();
    let get = |dest: &str, json: bool| {
        let dest = sb.path().join(dest);
        let mut args = vec![
            "file",
            "get",
            "--session",
            session,
            "--remote",
            "tree",
            "--local",
            dest.to_str().unwrap(),
        ];
        if json {
            args.push("--json");
        }
        sb.run(&args)
    };
    let r = get("out-json", true);
    assert_eq!(r.code, 1, "{r:?}");
    let rec = r.json();
    assert_eq!(rec["status"], "partial", "{rec}");
    assert_eq!(rec["skipped"][0]["path"], "sock", "{rec}");
    let human = get("out-human", false);
    assert_eq!(human.code, 1, "{human:?}");
    assert!(human.stdout.contains("partial"), "{human:?}");
    assert!(human.stdout.contains("SKIPPED"), "{human:?}");
    assert!(human.stdout.contains("device, socket or FIFO"), "{human:?}");
    sb.ok_json(&["session", "destroy", "--session", session]);
}
