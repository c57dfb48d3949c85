//! For the tests of remote shell scripts (engine/tests/remote_scripts.rs,
//! seed-runner/tests/remote_scripts.rs): shellcheck each one, and run the POSIX ones under
//! every shell a remote `/bin/sh` is likely to be.

use std::io::Write;
use std::process::{Command, Output, Stdio};

use crate::need_tool;

/// dash, bash in POSIX mode and busybox sh, as argv prefixes (checked to be installed).
pub fn posix_shells() -> Vec<Vec<&'static str>> {
    need_tool("dash");
    need_tool("busybox");
    vec![vec!["dash"], vec!["bash", "--posix"], vec!["busybox", "sh"]]
}

/// Assert that each `(file name, shell dialect, text)` passes `shellcheck -s <dialect>`.
pub fn assert_shellcheck_clean(scripts: &[(&str, &str, &str)]) {
    let shellcheck = need_tool("shellcheck");
    let dir = tempfile::tempdir().expect("temp dir");
    for (name, shell, text) in scripts {
        let path = dir.path().join(name);
        std::fs::write(&path, text).expect("write the script");
        let out = Command::new(&shellcheck)
            .args(["-s", shell])
            .arg(&path)
            .output()
            .expect("run shellcheck");
        assert!(
            out.status.success(),
            "shellcheck {name}:\n{}",
            String::from_utf8_lossy(&out.stdout)
        );
    }
}

/// Run `script` with `shell -c` (a `posix_shells` entry, or any argv prefix), `stdin` written
/// to it then closed (a script that exits without reading it closes the pipe first: no error).
pub fn run_script(shell: &[&str], script: &str, stdin: &[u8]) -> Output {
    let mut child = Command::new(shell[0])
        .args(&shell[1..])
        .arg("-c")
        .arg(script)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {shell:?}: {e}"));
    let _ = child.stdin.take().expect("stdin").write_all(stdin);
    child.wait_with_output().expect("wait for the shell")
}
