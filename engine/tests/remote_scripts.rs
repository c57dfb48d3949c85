//! The remote scripts as files: shellcheck-clean, and the control script and the code runtime's
//! scripts (`prepare.sh`, `run.sh`) behaving the same under dash, bash and busybox sh; the
//! bootstrap line read the same way by every login shell.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use remote_runner_engine::remote::{CTL_NAME, CTL_SCRIPT, bootstrap_line};

const SESSION_SCRIPT: &str = include_str!("../src/tmux/rr.sh");
const RUNNER_JS: &str = include_str!("../src/engine/code/runner.js");

use remote_runner_testkit::need_tool as need;
use remote_runner_testkit::scripts::{assert_shellcheck_clean, posix_shells};

#[test]
fn scripts_are_shellcheck_clean() {
    assert_shellcheck_clean(&[
        ("ctl.sh", "sh", CTL_SCRIPT),
        ("rr.sh", "bash", SESSION_SCRIPT),
        ("run.sh", "sh", remote_runner_engine::engine::code::RUN_SH),
        (
            "prepare.sh",
            "sh",
            remote_runner_engine::engine::code::PREPARE_SH,
        ),
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

// ------------------------------------------------------------------ the code runtime's scripts

/// The control script's `sh` verb running `script` with `params` (each a shell variable, as the
/// engine sends them) and `data` on stdin, as the account whose home is `home`; returns (stdout
/// and stderr after their start markers, status).
fn run_sh_in(
    shell: &[&str],
    ctl: &Path,
    home: &Path,
    script: &str,
    params: &[(&str, &str)],
    data: &[u8],
) -> (String, String, i32) {
    let mut text = format!("RR_SCRIPT={}\n", shell_single_quote(script));
    for (name, value) in params {
        text.push_str(&format!("{name}={}\n", shell_single_quote(value)));
    }
    let mut child = Command::new(shell[0])
        .args(&shell[1..])
        .arg(ctl)
        .args(["sh", "n0nce"])
        .env("HOME", home)
        .env_remove("XDG_STATE_HOME")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin
        .write_all(format!("{text}@rr:n0nce:end\n").as_bytes())
        .unwrap();
    stdin.write_all(data).unwrap();
    drop(stdin);
    let out = child.wait_with_output().unwrap();
    let after = |bytes: &[u8]| {
        let text = String::from_utf8_lossy(bytes).into_owned();
        text.split_once("@rr:n0nce:begin\n")
            .unwrap_or_else(|| panic!("no reply frame from {shell:?}: {text:?}"))
            .1
            .to_string()
    };
    (
        after(&out.stdout),
        after(&out.stderr),
        out.status.code().unwrap_or(-1),
    )
}

/// `run.sh` checks the runner with the bootstrap line's own StrictModes text, word for word
/// (the line's copy cannot live in a file; this keeps the two from drifting apart).
#[test]
fn the_runner_check_is_the_bootstrap_lines_own() {
    use remote_runner_engine::remote::{REFUSED_PREFIX, STRICT_MODES};
    let words = |s: &str| s.split_whitespace().collect::<Vec<_>>().join(" ");
    let run_sh = remote_runner_engine::engine::code::RUN_SH;
    assert!(
        words(run_sh).contains(&words(STRICT_MODES)),
        "run.sh's rr_check_runner must hold STRICT_MODES (engine/src/remote/mod.rs) word for word"
    );
    assert!(run_sh.contains(&format!("printf '{REFUSED_PREFIX}%s\\n'")));
}

/// The code runtime's scripts under dash, bash and busybox sh, through the control script as
/// the engine runs them: every value the host passes is a parameter, so quotes, `$(...)`,
/// backquotes and newlines in it are data; `prepare.sh` reports the runner directory and what
/// the machine has; `run.sh` runs the real runner under `node` in the given directory (without
/// namespaces, in a PID namespace and sealed, as the machine allows) with the
/// run's marker, a child that left with `setsid` and `env -i` ending with it (the run's
/// RLIMIT_RTTIME mark), refuses a runner others can write to (status 93, the refusal on
/// stderr), and in sweep-only mode kills what carries the run's marker or mark.
#[test]
fn code_scripts_under_dash_bash_and_busybox() {
    use remote_runner_engine::engine::code::{PREPARE_SH, RUN_SH};
    use remote_runner_engine::remote::REFUSED_PREFIX;
    need("node");
    let tricky = "a'b \"c $(touch pwned) `touch pwned2`\nd";
    for shell in posix_shells() {
        let base = tempfile::tempdir().unwrap();
        chmod(base.path(), 0o755);
        let home = base.path().join("home");
        std::fs::create_dir(&home).unwrap();
        chmod(&home, 0o700);
        let ctl = installed_root(&home);
        let prepare = |interp: &str, name: &str| {
            let (out, err, status) = run_sh_in(
                &shell,
                &ctl,
                &home,
                PREPARE_SH,
                &[
                    ("rr_interp", interp),
                    ("rr_runner_name", name),
                    ("rr_mark_max", "2199023255551"),
                ],
                b"",
            );
            assert_eq!(status, 0, "{shell:?}: {out} {err}");
            out
        };
        let dir = home.join(".local/state/remote-runner/code");
        let name = "runner-test.js";
        let out = prepare("node", name);
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(
            lines[..2],
            [dir.to_str().unwrap(), "absent"],
            "{shell:?}: {out}"
        );
        assert!(
            matches!(lines[2], "sealed" | "pid" | "none"),
            "{shell:?}: {out}"
        );
        assert_eq!(
            lines.get(3),
            Some(&"mark"),
            "{shell:?}: prlimit(1) is here: {out}"
        );
        let isolation = lines[2];
        let runner = dir.join(name);
        std::fs::write(&runner, RUNNER_JS).unwrap();
        chmod(&runner, 0o600);
        assert_eq!(prepare("node", name).lines().nth(1), Some("present"));
        // A value is data: neither the interpreter's nor the runner's name runs anything.
        let out = prepare(&format!("{tricky}; touch pwned3"), tricky);
        assert_eq!(out, "missing-interpreter\n", "{shell:?}");

        let cwd = home.join(tricky);
        std::fs::create_dir(&cwd).unwrap();
        let run_id = format!("code-scripts-{}-{}", std::process::id(), shell.join("-"));
        // The program leaves a child behind that clears its environment and leaves the run's
        // session and process group: the run's mark (its RLIMIT_RTTIME) still takes it.
        let request = "{\"program\":\"const c = require('child_process').spawn('setsid', \
                       ['env', '-i', 'sleep', '300'], {detached: true, stdio: 'ignore'}); \
                       c.unref(); return [process.cwd(), process.env.RR_CODE_RUN, c.pid]\",\
                       \"cap\":65536,\"maxDepth\":512,\"bindings\":[]}\n";
        let mark = "1100000000001";
        let mut modes = vec!["0"];
        if isolation != "none" {
            modes.push("pid");
        }
        if isolation == "sealed" {
            modes.push("sealed");
        }
        for ns in modes {
            let params = [
                ("rr_run", run_id.as_str()),
                ("rr_mark", mark),
                ("rr_budget", "30.000"),
                ("rr_interp", "node"),
                ("rr_runner", runner.to_str().unwrap()),
                ("rr_cwd", cwd.to_str().unwrap()),
                ("rr_ns", ns),
                ("rr_hide", ""),
                ("rr_fsize", "2048"),
                ("rr_mem", ""),
                ("rr_nproc", ""),
                ("rr_sweep_only", "0"),
            ];
            let (out, err, status) =
                run_sh_in(&shell, &ctl, &home, RUN_SH, &params, request.as_bytes());
            assert_eq!(status, 0, "{shell:?} ns={ns}: {out} {err}");
            let line: serde_json::Value = serde_json::from_str(out.trim())
                .unwrap_or_else(|e| panic!("{shell:?} ns={ns}: {e}: {out} {err}"));
            let pid = line["result"]["value"][2].as_u64().unwrap();
            assert_eq!(
                line,
                serde_json::json!({"t": "result", "result": {"logs": [],
                    "value": [cwd.to_str().unwrap(), run_id, pid]}}),
                "{shell:?} ns={ns}"
            );
            // In a namespace the pid is the namespace's: look for the run's mark instead.
            assert!(
                if ns == "0" {
                    process_ends(pid)
                } else {
                    marked_processes_end(mark)
                },
                "{shell:?} ns={ns}: the escaped child {pid} is gone with the run"
            );

            // A runner others can write to is refused before it runs.
            chmod(&runner, 0o620);
            let (out, err, status) =
                run_sh_in(&shell, &ctl, &home, RUN_SH, &params, request.as_bytes());
            chmod(&runner, 0o600);
            assert_eq!(status, 93, "{shell:?}: {out} {err}");
            assert!(
                err.contains(&format!("{REFUSED_PREFIX}-rw--w----"))
                    && err.contains(runner.to_str().unwrap()),
                "{shell:?}: {err}"
            );
            assert!(out.is_empty(), "{shell:?}: nothing ran: {out}");
        }
        for file in ["pwned", "pwned2", "pwned3"] {
            for at in [&home, &cwd, &dir] {
                assert!(
                    !at.join(file).exists(),
                    "{shell:?}: {file} in {}",
                    at.display()
                );
            }
        }

        // Sweep only: what carries the run's marker or its mark is killed, whatever its process
        // group; another run's is not.
        let mut marked = Command::new("setsid")
            .args(["sleep", "300"])
            .env("RR_CODE_RUN", &run_id)
            .spawn()
            .unwrap();
        let mut limited = Command::new("prlimit")
            .arg(format!("--rttime={mark}:{mark}"))
            .args(["setsid", "env", "-i", "sleep", "300"])
            .spawn()
            .unwrap();
        let mut other_mark = Command::new("prlimit")
            .args(["--rttime=1100000000002:1100000000002", "sleep", "300"])
            .spawn()
            .unwrap();
        let mut other = Command::new("sleep")
            .arg("300")
            .env("RR_CODE_RUN", format!("{run_id}-other"))
            .spawn()
            .unwrap();
        let (out, err, status) = run_sh_in(
            &shell,
            &ctl,
            &home,
            RUN_SH,
            &[
                ("rr_run", &run_id),
                ("rr_mark", mark),
                ("rr_sweep_only", "1"),
            ],
            b"",
        );
        assert_eq!(status, 0, "{shell:?}: {out} {err}");
        for swept in [&mut marked, &mut limited] {
            let status = swept.wait().unwrap();
            assert_eq!(
                std::os::unix::process::ExitStatusExt::signal(&status),
                Some(9),
                "{shell:?}"
            );
        }
        for stays in [&mut other, &mut other_mark] {
            assert!(
                stays.try_wait().unwrap().is_none(),
                "{shell:?}: another run's process stays"
            );
            stays.kill().unwrap();
            stays.wait().unwrap();
        }
    }
}

/// Whether process `pid` is dead (gone, or a zombie its new parent has not reaped yet) within
/// 10 s: a killed process's entry stays until it is reaped, which a loaded machine delays.
/// No process of this host carries `mark` as its RLIMIT_RTTIME hard limit, within ten seconds.
fn marked_processes_end(mark: &str) -> bool {
    let pattern = format!(" {mark} us");
    for _ in 0..100 {
        let marked = std::fs::read_dir("/proc").unwrap().flatten().any(|e| {
            std::fs::read_to_string(e.path().join("limits")).is_ok_and(|l| {
                l.lines()
                    .any(|l| l.starts_with("Max realtime timeout") && l.contains(&pattern))
            })
        });
        if !marked {
            return true;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    false
}

fn process_ends(pid: u64) -> bool {
    for _ in 0..100 {
        match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
            Err(_) => return true,
            // The state follows the command name in parentheses: `pid (comm) S ...`.
            Ok(stat)
                if stat
                    .rsplit_once(") ")
                    .is_some_and(|(_, rest)| rest.starts_with('Z')) =>
            {
                return true;
            }
            Ok(_) => std::thread::sleep(std::time::Duration::from_millis(100)),
        }
    }
    false
}
