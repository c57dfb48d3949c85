//! The local state dir cannot be taken over by another user (OpenSSH StrictModes style), every
//! file in it is private, and machine ids cannot be told apart by case alone (issue 21).
//!
//! The other user is testkit's login user (`rrtest`), created if needed: these tests run as root.

mod common;

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::process::Command;

use common::Sandbox;

/// Uid and gid of another local user (created if missing; needs root).
fn other_user() -> (u32, u32) {
    remote_runner_testkit::ensure_test_user()
        .expect("these tests run as root so they can create a second local user");
    let id = |flag: &str| -> u32 {
        let out = Command::new("id")
            .args([flag, remote_runner_testkit::TEST_USER])
            .output()
            .unwrap();
        String::from_utf8(out.stdout)
            .unwrap()
            .trim()
            .parse()
            .unwrap()
    };
    (id("-u"), id("-g"))
}

fn give_away(path: &Path) {
    let (uid, gid) = other_user();
    std::os::unix::fs::chown(path, Some(uid), Some(gid)).unwrap();
}

fn mode(path: &Path) -> u32 {
    std::fs::symlink_metadata(path).unwrap().mode() & 0o7777
}

/// `machine list` must fail with `permission_denied` (exit 10) naming `path`; returns the message.
fn refused(sb: &Sandbox, path: &Path) -> String {
    let r = sb.run(&["machine", "list", "--json"]);
    assert_eq!(r.code, 10, "{r:?}");
    let err = r.error();
    assert_eq!(err["code"], "permission_denied", "{err}");
    let message = err["message"].as_str().unwrap().to_string();
    assert!(
        message.contains(&path.display().to_string()),
        "the path is named: {message}"
    );
    message
}

#[test]
fn a_state_dir_created_by_another_user_is_refused_and_left_alone() {
    let sb = Sandbox::new();
    let state = sb.state_dir();
    std::fs::create_dir(&state).unwrap();
    std::fs::set_permissions(&state, std::fs::Permissions::from_mode(0o755)).unwrap();
    give_away(&state);
    let message = refused(&sb, &state);
    assert!(message.contains("owned by user id"), "{message}");
    assert!(
        message.contains("--state-dir"),
        "the fix is named: {message}"
    );
    // Nothing was adopted: no mode change, no database created in it.
    assert_eq!(mode(&state), 0o755);
    assert!(!state.join("state.sqlite3").exists());
}

#[test]
fn files_in_the_state_dir_owned_by_another_user_are_refused() {
    for name in ["state.sqlite3", "credentials.json"] {
        let sb = Sandbox::new();
        sb.ok_json(&["machine", "list"]);
        let file = sb.state_dir().join(name);
        if !file.exists() {
            std::fs::write(&file, "{\"version\":1,\"passwords\":{}}").unwrap();
            std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
        }
        give_away(&file);
        let message = refused(&sb, &file);
        assert!(message.contains("chown"), "{message}");
    }
}

#[test]
fn a_group_or_other_writable_state_dir_is_refused() {
    let sb = Sandbox::new();
    sb.ok_json(&["machine", "list"]);
    let state = sb.state_dir();
    std::fs::set_permissions(&state, std::fs::Permissions::from_mode(0o777)).unwrap();
    let message = refused(&sb, &state);
    assert!(message.contains("chmod go-w"), "{message}");
    assert_eq!(mode(&state), 0o777, "nothing is changed");
}

#[test]
fn every_directory_and_file_in_the_state_dir_is_private() {
    let sb = Sandbox::new();
    let work = sb.path().join("work");
    std::fs::create_dir(&work).unwrap();
    std::fs::write(work.join("in.txt"), "hello\n").unwrap();
    let input = format!(
        "{}={}/copied.txt",
        work.join("in.txt").display(),
        work.display()
    );
    let artifact = format!("{}/copied.txt={}/out.txt", work.display(), work.display());
    let run = sb.ok_json(&[
        "run",
        "once",
        "--machine",
        "local",
        "--cwd",
        work.to_str().unwrap(),
        "--input",
        &input,
        "--cmd",
        "cat copied.txt",
        "--artifact",
        &artifact,
    ]);
    assert_eq!(run["status"], "succeeded", "{run}");
    let mut checked = 0;
    let mut pending = vec![sb.state_dir()];
    while let Some(dir) = pending.pop() {
        assert_eq!(mode(&dir), 0o700, "{}", dir.display());
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            let meta = std::fs::symlink_metadata(&path).unwrap();
            if meta.is_dir() {
                pending.push(path);
            } else {
                assert_eq!(mode(&path), 0o600, "{}", path.display());
                checked += 1;
            }
        }
    }
    assert!(
        sb.state_dir().join("runs").is_dir() && sb.state_dir().join("logs").is_dir(),
        "runs and logs were written"
    );
    assert!(
        checked >= 3,
        "the database, a manifest and logs were checked"
    );
}

#[test]
fn machine_ids_are_unique_without_regard_to_case() {
    let sb = Sandbox::new();
    for builtin in ["LOCAL", "Local"] {
        let r = sb.run(&[
            "machine",
            "add",
            builtin,
            "--host",
            "192.0.2.1",
            "--user",
            "u",
            "--json",
        ]);
        assert_eq!(r.code, 2, "{builtin} beside the built-in local: {r:?}");
        assert!(
            r.error()["message"].as_str().unwrap().contains("built-in"),
            "{r:?}"
        );
    }
    sb.add_key_machine("lab", "192.0.2.10");
    let r = sb.run(&[
        "machine",
        "add",
        "LAB",
        "--host",
        "192.0.2.11",
        "--user",
        "ely",
        "--default-cwd",
        "/home/ely",
        "--json",
    ]);
    assert_eq!(r.code, 4, "{r:?}");
    let err = r.error();
    assert_eq!(err["code"], "already_exists");
    assert!(
        err["message"]
            .as_str()
            .unwrap()
            .contains("without regard to case"),
        "{err}"
    );
    let listed = sb.ok_json(&["machine", "list"]);
    let ids: Vec<&str> = listed["machines"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["machine_id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["local", "lab"]);
}
