//! Bytes from a machine never reach a person's terminal raw (issue 21): remote file names in
//! `file list`, paths in `file history`, the remote's `tmux -V` in `machine doctor`. Human output
//! shows every control character as text; `--json` keeps the bytes exact.

mod common;

use std::os::unix::fs::PermissionsExt;

use common::{Sandbox, run_command};

/// Names that would act on a terminal: an OSC 52 clipboard write, a title change, a screen
/// clear (RIS), a C1 CSI, a right-to-left override.
const HOSTILE: &[&str] = &[
    "clip\x1b]52;c;cm0gLXJmIH4K\x07.txt",
    "title\x1b]0;pwned\x07.txt",
    "clear\x1bc.txt",
    "c1\u{9b}2J.txt",
    "bidi\u{202e}txt.exe",
];

/// No byte of `text` can drive a terminal.
fn assert_inert(text: &str) {
    for bad in ['\x1b', '\x07', '\u{9b}', '\u{202e}'] {
        assert!(!text.contains(bad), "{bad:?} reached the output: {text:?}");
    }
}

fn local_session(sb: &Sandbox, cwd: &std::path::Path) -> String {
    let created = sb.ok_json(&[
        "session",
        "create",
        "--machine",
        "local",
        "--cwd",
        cwd.to_str().unwrap(),
    ]);
    created["session_id"].as_str().unwrap().to_string()
}

#[test]
fn file_list_and_file_history_neutralise_remote_names_and_keep_json_exact() {
    let sb = Sandbox::new();
    let work = sb.path().join("work");
    let names_dir = work.join("names");
    std::fs::create_dir_all(&names_dir).unwrap();
    for name in HOSTILE {
        std::fs::write(names_dir.join(name), "x").unwrap();
    }
    let session = local_session(&sb, &work);
    let remote = names_dir.to_str().unwrap();

    let human = sb.run(&["file", "list", "--session", &session, "--remote", remote]);
    assert_eq!(human.code, 0, "{human:?}");
    assert_inert(&human.stdout);
    assert!(
        human.stdout.contains("title^[]0;pwned^G.txt"),
        "{:?}",
        human.stdout
    );
    let json = sb.ok_json(&["file", "list", "--session", &session, "--remote", remote]);
    let mut names: Vec<&str> = json["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["name"].as_str().unwrap())
        .collect();
    names.sort();
    let mut want = HOSTILE.to_vec();
    want.sort();
    assert_eq!(names, want, "JSON carries the names byte for byte");

    let local = sb.path().join("fetched");
    std::fs::create_dir(&local).unwrap();
    let src = names_dir.join(HOSTILE[1]);
    sb.ok_json(&[
        "file",
        "get",
        "--session",
        &session,
        "--remote",
        src.to_str().unwrap(),
        "--local",
        &format!("{}/", local.display()),
    ]);
    let history = sb.run(&["file", "history", "--session", &session]);
    assert_eq!(history.code, 0, "{history:?}");
    assert_inert(&history.stdout);
    assert!(history.stdout.contains("pwned"), "{:?}", history.stdout);
    let json = sb.ok_json(&["file", "history", "--session", &session]);
    assert_eq!(json["transfers"][0]["source"], src.to_str().unwrap());
    sb.ok_json(&["session", "destroy", "--session", &session]);
}

#[test]
fn machine_doctor_neutralises_the_tmux_version_text() {
    let sb = Sandbox::new();
    let bin = sb.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    let fake = bin.join("tmux");
    std::fs::write(
        &fake,
        "#!/bin/sh\nprintf 'tmux 3.4\\033]52;c;cm0gLXJmIH4K\\007\\033]0;pwned\\007\\n'\n",
    )
    .unwrap();
    std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap());
    let mut cmd = sb.command(&["machine", "doctor", "local"]);
    cmd.env("PATH", &path);
    let human = run_command(cmd, None);
    assert!(human.stdout.contains("pwned"), "{human:?}");
    assert_inert(&human.stdout);
    assert_inert(&human.stderr);

    let mut cmd = sb.command(&["machine", "doctor", "local", "--json"]);
    cmd.env("PATH", &path);
    let json = run_command(cmd, None).json();
    assert_eq!(
        json["tmux"]["version"],
        "3.4\x1b]52;c;cm0gLXJmIH4K\x07\x1b]0;pwned\x07"
    );
}

#[test]
fn error_messages_carrying_remote_text_are_neutralised() {
    let sb = Sandbox::new();
    let work = sb.path().join("work");
    std::fs::create_dir(&work).unwrap();
    let session = local_session(&sb, &work);
    let missing = work.join("gone\x1b]0;pwned\x07");
    let r = sb.run(&[
        "file",
        "list",
        "--session",
        &session,
        "--remote",
        missing.to_str().unwrap(),
    ]);
    assert_eq!(r.code, 3, "{r:?}");
    assert!(r.stderr.contains("gone^[]0;pwned^G"), "{r:?}");
    assert_inert(&r.stderr);
    sb.ok_json(&["session", "destroy", "--session", &session]);
}
