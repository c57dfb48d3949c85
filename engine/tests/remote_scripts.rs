//! The remote scripts as files: shellcheck-clean, and the control script behaving the same under
//! dash, bash and busybox sh; the bootstrap line read the same way by every login shell.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use remote_runner_engine::remote::{CTL_NAME, CTL_SCRIPT, bootstrap_line};

const SESSION_SCRIPT: &str = include_str!("../src/tmux/rr.sh");

use remote_runner_testkit::scripts::{assert_shellcheck_clean, posix_shells};

#[test]
fn scripts_are_shellcheck_clean() {
    assert_shellcheck_clean(&[
        ("ctl.sh", "sh", CTL_SCRIPT),
        ("rr.sh", "bash", SESSION_SCRIPT),
        ("run.sh", "sh", remote_runner_engine::engine::code::RUN_SH),
    ]);
}

/// A state root with the control script installed, as the engine installs it.
fn installed_root(home: &Path) -> PathBuf {
    installed_root_at(&home.join(".local/state"))
}

fn run_verb(shell: &[&str], ctl: &Path, verb: &str, params: &str, data: &[u8]) -> (String, i32) {
    let nonce = "n0nce";
    let mut child = Command::new(shell[0])
        .args(&shell[1..])
        .arg(ctl)
        .args([verb, nonce])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin
        .write_all(format!("{params}@rr:{nonce}:end\n").as_bytes())
        .unwrap();
    stdin.write_all(data).unwrap();
    drop(stdin);
    let out = child.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let reply = text
        .split_once("@rr:n0nce:begin\n")
        .unwrap_or_else(|| panic!("no reply frame from {shell:?}: {text:?}"))
        .1
        .to_string();
    (reply, out.status.code().unwrap_or(-1))
}

#[test]
fn control_script_under_dash_bash_and_busybox() {
    for shell in posix_shells() {
        let home = tempfile::tempdir().unwrap();
        std::fs::set_permissions(
            home.path(),
            std::os::unix::fs::PermissionsExt::from_mode(0o700),
        )
        .unwrap();
        let ctl = installed_root(home.path());
        // Parameters are data: quotes, newlines, command substitutions and tmux formats arrive
        // as they were sent, and stdin after them is the verb's.
        let tricky = "a'b\"c $(touch /tmp/rr-never) `x`\n#(y) #{z}\\";
        let params = format!(
            "RR_SCRIPT='printf \"%s|\" \"$V\"; cat'\nV={}\n",
            shell_single_quote(tricky)
        );
        let (reply, status) = run_verb(&shell, &ctl, "sh", &params, b"stdin-data");
        assert_eq!(status, 0, "{shell:?}");
        assert_eq!(reply, format!("{tricky}|stdin-data"), "{shell:?}");
        // The state root is created and checked; the tools are reported.
        let (reply, _) = run_verb(&shell, &ctl, "prepare", "", b"");
        assert!(reply.starts_with("@prepared\n"), "{shell:?}: {reply}");
        let root = home.path().join(".local/state/remote-runner");
        assert!(
            reply.contains(&format!("root={}\n", root.display())),
            "{shell:?}: {reply}"
        );
        assert!(reply.contains("tmux_version=tmux "), "{shell:?}: {reply}");
        // A directory others can write to is refused, naming it.
        std::fs::set_permissions(
            root.join("sessions"),
            std::os::unix::fs::PermissionsExt::from_mode(0o777),
        )
        .unwrap();
        let (reply, _) = run_verb(&shell, &ctl, "prepare", "", b"");
        assert!(
            reply.starts_with("@insecure ") && reply.contains("sessions is writable by other"),
            "{shell:?}: {reply}"
        );
    }
}

#[test]
fn a_report_cannot_be_forged_by_a_directory_name() {
    for shell in posix_shells() {
        let home = tempfile::tempdir().unwrap();
        let ctl = installed_root(home.path());
        let d = home.path().join("cmd");
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("started"), "started=1.5\n").unwrap();
        std::fs::write(d.join("pwd"), "/x\ncode=0 how=normal state=done ended=2").unwrap();
        let params = format!(
            "D='{}'\nMODE=bg\nSD=/nonexistent\nCD=/nonexistent\n",
            d.display()
        );
        let (reply, _) = run_verb(&shell, &ctl, "report", &params, b"");
        let (report, pwd) = reply.split_once("@pwd\n").expect("pwd section last");
        assert!(!report.contains("code="), "{shell:?}: {reply}");
        assert_eq!(pwd, "/x\ncode=0 how=normal state=done ended=2\n");
    }
}

/// `serve` runs calls one after another in one process: each reply is framed by its own nonce,
/// a verb's `exit` ends the call and not the process, a verb reads /dev/null (never the next
/// call), and a parameter holding a forged end line is data.
#[test]
fn serve_runs_calls_in_one_process() {
    use std::io::{BufRead, BufReader};
    for shell in posix_shells() {
        let home = tempfile::tempdir().unwrap();
        let ctl = installed_root(home.path());
        let mut child = Command::new(shell[0])
            .args(&shell[1..])
            .arg(&ctl)
            .args(["serve", "n0"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut stdin = child.stdin.take().unwrap();
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        stdin.write_all(b"@rr:n0:end\n").unwrap();
        let mut line = String::new();
        stdout.read_line(&mut line).unwrap();
        assert_eq!(line, "@rr:n0:begin\n", "{shell:?}");
        let mut call = |nonce: &str, script: &str| -> (String, String) {
            let request = format!(
                "@rr:call {nonce} sh\nRR_SCRIPT={}\n@rr:{nonce}:end\n",
                shell_single_quote(script)
            );
            stdin.write_all(request.as_bytes()).unwrap();
            stdin.flush().unwrap();
            let end = format!("@rr:{nonce}:done ");
            let mut reply = String::new();
            loop {
                let mut line = String::new();
                assert!(
                    stdout.read_line(&mut line).unwrap() > 0,
                    "{shell:?}: {reply}"
                );
                if let Some(status) = line.strip_prefix(&end) {
                    return (reply, status.trim().to_string());
                }
                reply.push_str(&line);
            }
        };
        let (first, status) = call("c1", "echo \"pid=$$\"; cat; exit 7");
        assert_eq!(status, "7", "{shell:?}: {first}");
        let (second, status) = call("c2", "echo \"pid=$$\"; echo '@rr:c2:end'");
        assert_eq!(status, "0", "{shell:?}");
        assert_eq!(
            first.lines().next(),
            second.lines().next(),
            "{shell:?}: one process serves both calls"
        );
        assert_eq!(
            first.lines().count(),
            2,
            "{shell:?}: cat read /dev/null: {first:?}"
        );
        assert!(second.contains("@rr:c2:end\n"), "{shell:?}: {second}");
        drop(stdin);
        assert!(child.wait().unwrap().success(), "{shell:?}: ends at EOF");
    }
}

/// The one line the engine sends reaches the control script through every login shell.
#[test]
fn bootstrap_line_runs_under_every_login_shell() {
    let mut shells = vec!["bash", "dash", "sh"];
    for extra in ["zsh", "fish", "tcsh", "ksh", "mksh"] {
        if Command::new("sh")
            .arg("-c")
            .arg(format!("command -v {extra}"))
            .stdout(Stdio::null())
            .status()
            .unwrap()
            .success()
        {
            shells.push(extra);
        }
    }
    assert!(
        shells.contains(&"zsh") && shells.contains(&"fish"),
        "zsh and fish must be installed for this test (scripts/install-deps.sh)"
    );
    for shell in shells {
        let home = tempfile::tempdir().unwrap();
        // Not installed yet: the line says where to install, framed by the nonce.
        let out = Command::new(shell)
            .arg("-c")
            .arg(bootstrap_line("prepare", "abc123"))
            .env("HOME", home.path())
            .env_remove("XDG_STATE_HOME")
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert_eq!(out.status.code(), Some(97), "{shell}: {text} {:?}", out);
        assert_eq!(
            text,
            format!(
                "@rr:abc123:install {}/.local/state/remote-runner\n",
                home.path().display()
            ),
            "{shell}"
        );
        // Installed: the verb runs.
        installed_root(home.path());
        let mut child = Command::new(shell)
            .arg("-c")
            .arg(bootstrap_line("sh", "abc123"))
            .env("HOME", home.path())
            .env_remove("XDG_STATE_HOME")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(b"RR_SCRIPT='echo from-ctl'\n@rr:abc123:end\n")
            .unwrap();
        let out = child.wait_with_output().unwrap();
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            "@rr:abc123:begin\nfrom-ctl\n",
            "{shell}"
        );
    }
}

fn shell_single_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

/// The bootstrap line's own text (what `/bin/sh -c` runs) under `shell`, as the account whose
/// home is `home`, with `XDG_STATE_HOME` set or not; returns (stdout, status).
fn run_line(shell: &[&str], home: &Path, xdg: Option<&Path>) -> (String, i32) {
    let line = bootstrap_line("sh", "n0nce");
    let inner = line.split('\'').nth(1).unwrap();
    let mut cmd = Command::new(shell[0]);
    cmd.args(&shell[1..])
        .arg("-c")
        .arg(inner)
        .args(["rr", "sh", "n0nce"])
        .env("HOME", home)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    match xdg {
        Some(x) => cmd.env("XDG_STATE_HOME", x),
        None => cmd.env_remove("XDG_STATE_HOME"),
    };
    let mut child = cmd.spawn().unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"RR_SCRIPT='echo ran'\n@rr:n0nce:end\n")
        .unwrap();
    let out = child.wait_with_output().unwrap();
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        out.status.code().unwrap_or(-1),
    )
}

fn chmod(path: &Path, mode: u32) {
    std::fs::set_permissions(path, std::os::unix::fs::PermissionsExt::from_mode(mode)).unwrap();
}

/// The line checks the control script and every directory above it before it runs it
/// (StrictModes), under every POSIX sh it may meet as /bin/sh: a script or directory of another
/// uid, one others can write to, or a symlink is refused with status 98 naming the path, and
/// nothing runs; a root-owned sticky directory (like /tmp) above a state root is fine.
#[test]
fn bootstrap_line_checks_the_script_before_it_runs_it() {
    use std::os::unix::fs::chown;
    const STRANGER: u32 = 54_321;
    for shell in posix_shells() {
        let base = tempfile::tempdir().unwrap();
        chmod(base.path(), 0o755);
        let home = base.path().join("home");
        std::fs::create_dir(&home).unwrap();
        chmod(&home, 0o700);
        let ctl = installed_root(&home);
        let lib = ctl.parent().unwrap().to_path_buf();
        let state = home.join(".local/state");
        let refused = |xdg: Option<&Path>, path: &Path| {
            let (out, status) = run_line(&shell, &home, xdg);
            assert_eq!(status, 98, "{shell:?}: {out}");
            assert!(
                out.starts_with("@rr:n0nce:insecure ")
                    && out.contains(&format!(" {}", path.display())),
                "{shell:?}: names {}: {out}",
                path.display()
            );
            assert!(!out.contains("ran"), "{shell:?}: nothing ran: {out}");
        };
        let (out, status) = run_line(&shell, &home, None);
        assert_eq!(
            (out.as_str(), status),
            ("@rr:n0nce:begin\nran\n", 0),
            "{shell:?}"
        );

        // Writable by the group or by anyone: the script, its directory, one higher up.
        for (path, mode, back) in [
            (&ctl, 0o620, 0o600),
            (&ctl, 0o602, 0o600),
            (&lib, 0o770, 0o700),
            (&state, 0o777, 0o755),
            (&home, 0o775, 0o700),
        ] {
            chmod(path, mode);
            refused(None, path);
            chmod(path, back);
        }
        // Another uid's script or directory.
        for path in [&ctl, &lib] {
            chown(path, Some(STRANGER), None).unwrap();
            refused(None, path);
            chown(path, Some(0), None).unwrap();
        }
        // A symlink in place of the script (its target is fine, the link is not checked).
        let real = lib.join("real.sh");
        std::fs::rename(&ctl, &real).unwrap();
        std::os::unix::fs::symlink(&real, &ctl).unwrap();
        refused(None, &ctl);
        std::fs::remove_file(&ctl).unwrap();
        std::fs::rename(&real, &ctl).unwrap();

        // A state root outside the home: checked up to `/`; a root-owned sticky directory above
        // it is fine, a world-writable one without the sticky bit is not.
        let shared = base.path().join("shared");
        std::fs::create_dir(&shared).unwrap();
        chmod(&shared, 0o1777);
        let xdg = shared.join("state");
        let ctl2 = installed_root_at(&xdg);
        let (out, status) = run_line(&shell, &home, Some(&xdg));
        assert_eq!(
            (out.as_str(), status),
            ("@rr:n0nce:begin\nran\n", 0),
            "{shell:?}"
        );
        chmod(&shared, 0o777);
        refused(Some(&xdg), &shared);
        chmod(&shared, 0o1777);
        chown(&xdg, Some(STRANGER), None).unwrap();
        refused(Some(&xdg), &xdg);
        chown(&xdg, Some(0), None).unwrap();
        assert!(ctl2.exists());
        // The home itself is the last directory checked: what is above it is root's business.
        chmod(base.path(), 0o777);
        let (_, status) = run_line(&shell, &home, None);
        assert_eq!(status, 0, "{shell:?}");
        chmod(base.path(), 0o755);
    }
}

/// A state root `state/remote-runner` with the control script installed.
fn installed_root_at(state: &Path) -> PathBuf {
    let lib = state.join("remote-runner/lib");
    std::fs::create_dir_all(&lib).unwrap();
    let ctl = lib.join(CTL_NAME.as_str());
    std::fs::write(&ctl, CTL_SCRIPT).unwrap();
    chmod(&ctl, 0o600);
    ctl
}
