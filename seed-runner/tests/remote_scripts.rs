//! seed-runner's remote scripts as files: shellcheck-clean, and the POSIX ones behaving the same
//! under dash, bash and busybox sh (the shells a remote `/bin/sh` is likely to be).

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime};

use remote_runner_testkit::scripts::{assert_shellcheck_clean, posix_shells, run_script};

const WRAPPER: &str = include_str!("../src/wrapper.sh");
const INPUTS_CHANGED: &str = include_str!("../src/inputs_changed.sh");
const MAKE_DIR: &str = include_str!("../src/make_dir.sh");
const TMUX_NAME: &str = include_str!("../src/tmux_name.sh");
const TMUX_UNNAME: &str = include_str!("../src/tmux_unname.sh");
const TMUX_ATTACH: &str = include_str!("../src/tmux_attach.sh");
const TREE_APPLY: &str = include_str!("../src/tree_apply.sh");
const LIST_ARTIFACTS: &str = include_str!("../src/list_artifacts.sh");
const HANG_UP: &str = include_str!("../src/hang_up.sh");

#[test]
fn scripts_are_shellcheck_clean() {
    assert_shellcheck_clean(&[
        ("wrapper.sh", "bash", WRAPPER),
        ("inputs_changed.sh", "sh", INPUTS_CHANGED),
        ("make_dir.sh", "sh", MAKE_DIR),
        ("tmux_name.sh", "sh", TMUX_NAME),
        ("tmux_unname.sh", "sh", TMUX_UNNAME),
        ("tmux_attach.sh", "sh", TMUX_ATTACH),
        ("tree_apply.sh", "sh", TREE_APPLY),
        ("list_artifacts.sh", "sh", LIST_ARTIFACTS),
        ("hang_up.sh", "sh", HANG_UP),
    ]);
}

/// The script's stdout; it must succeed.
fn run(shell: &[&str], script: &str, stdin: &str) -> String {
    let out = run_script(shell, script, stdin.as_bytes());
    assert!(
        out.status.success(),
        "{shell:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn set_mtime(path: &Path, t: SystemTime) {
    std::fs::File::options()
        .write(true)
        .open(path)
        .unwrap()
        .set_modified(t)
        .unwrap();
}

/// Gone inputs are listed; a file modified at or after the stamp (`f`) or strictly after it
/// (`F`) too; untouched ones and symlinks to changed files are not.
#[test]
fn inputs_changed_under_every_shell() {
    for shell in posix_shells() {
        let shell = &shell[..];
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir_all(root.join("logs/n")).unwrap();
        std::fs::create_dir_all(root.join("sub dir")).unwrap();
        let stamp = root.join("logs/n/.seed_start");
        std::fs::write(&stamp, "").unwrap();
        let base = SystemTime::now() - Duration::from_secs(100);
        set_mtime(&stamp, base);
        for (name, offset) in [
            ("old.txt", -10i64),
            ("same.txt", 0),
            ("same-fresh.txt", 0),
            ("new.txt", 10),
            ("sub dir/new fresh.txt", 10),
        ] {
            let p = root.join(name);
            std::fs::write(&p, "x").unwrap();
            let t = if offset < 0 {
                base - Duration::from_secs(offset.unsigned_abs())
            } else {
                base + Duration::from_secs(offset as u64)
            };
            set_mtime(&p, t);
        }
        std::os::unix::fs::symlink("new.txt", root.join("link")).unwrap();
        let script = format!(
            "root='{}'\nstamp='logs/n/.seed_start'\n{INPUTS_CHANGED}",
            root.display()
        );
        let input = "f old.txt\nf same.txt\nF same-fresh.txt\nf new.txt\nF sub dir/new fresh.txt\n\
                     f gone.txt\nd sub dir\nd gone-dir\nl link\nl gone-link\n";
        let out = run(shell, &script, input);
        assert_eq!(
            out.lines().collect::<Vec<_>>(),
            [
                "same.txt",
                "new.txt",
                "sub dir/new fresh.txt",
                "gone.txt",
                "gone-dir",
                "gone-link"
            ],
            "{shell:?}"
        );
        // No stamp (or no work dir): nothing.
        std::fs::remove_file(&stamp).unwrap();
        assert_eq!(run(shell, &script, input), "", "{shell:?}");
    }
}

/// The work dir and its artifacts/ are made; the topmost directory made is named (none when
/// it existed).
#[test]
fn make_dir_under_every_shell() {
    for shell in posix_shells() {
        let shell = &shell[..];
        let dir = tempfile::tempdir().unwrap();
        let base = std::fs::canonicalize(dir.path()).unwrap();
        let target = base.join("a b/c");
        let script = format!("d='{}'\n{MAKE_DIR}", target.display());
        let out = run(shell, &script, "");
        assert_eq!(
            out,
            format!("{}\n{}\n", target.display(), base.join("a b").display()),
            "{shell:?}"
        );
        assert!(target.join("artifacts").is_dir());
        let out = run(shell, &script, "");
        assert_eq!(out, format!("{}\n", target.display()), "{shell:?}");
    }
}

/// The wrapper (bash) run directly: the log's lines, the end line after output without a final
/// newline, the exit code, and a background job's later output in the `.bg.log`.
#[test]
fn wrapper_log_and_background_output() {
    let dir = tempfile::tempdir().unwrap();
    let work = dir.path().join("w");
    std::fs::create_dir_all(work.join("artifacts")).unwrap();
    let log_dir = work.join("logs/n");
    let log = log_dir.join("cmd_001.log");
    let q = |s: &str| format!("'{s}'");
    let script = WRAPPER
        .replace(
            "@CMD@",
            &q("(sleep 3; echo later) & printf partial; exit 4"),
        )
        .replace("@LOG@", &q(log.to_str().unwrap()))
        .replace("@END@", &q("__seed_end_test"))
        .replace("@WORK@", &q(work.to_str().unwrap()))
        .replace("@DIR@", &q(log_dir.to_str().unwrap()))
        .replace("@MISSING@", &q("missing"));
    let started = std::time::Instant::now();
    let status = Command::new("bash")
        .arg("-c")
        .arg(&script)
        .stdin(Stdio::null())
        .status()
        .unwrap();
    assert!(
        started.elapsed() < Duration::from_millis(2500),
        "the job held the wrapper"
    );
    assert_eq!(status.code(), Some(4));
    let text = std::fs::read_to_string(&log).unwrap();
    let lines: Vec<&str> = text.lines().map(|l| &l[23..]).collect();
    assert_eq!(
        lines,
        [
            "$ (sleep 3; echo later) & printf partial; exit 4",
            "partial",
            "$ exit_code: 4"
        ]
    );
    let bg = log_dir.join("cmd_001.bg.log");
    let start = std::time::Instant::now();
    while !std::fs::read_to_string(&bg).is_ok_and(|t| t.ends_with("] later\n")) {
        assert!(start.elapsed() < Duration::from_secs(10), "no {bg:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
    // A work dir without artifacts/ runs nothing.
    std::fs::remove_dir(work.join("artifacts")).unwrap();
    let out = Command::new("bash")
        .arg("-c")
        .arg(&script)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(125));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "missing\n");
}

/// A private tmux world: the default server and the engine's socket (`-L eng`) under a
/// temporary TMUX_TMPDIR, with a HOME without a tmux.conf. Both servers end on drop.
struct TmuxWorld {
    dir: tempfile::TempDir,
}

impl TmuxWorld {
    fn new() -> TmuxWorld {
        TmuxWorld {
            dir: tempfile::tempdir().unwrap(),
        }
    }

    fn tmux(&self, args: &[&str]) -> std::process::Output {
        Command::new("tmux")
            .args(args)
            .env("TMUX_TMPDIR", self.dir.path())
            .env("HOME", self.dir.path())
            .env_remove("TMUX")
            .stdin(Stdio::null())
            .output()
            .unwrap()
    }

    fn ok(&self, args: &[&str]) -> bool {
        self.tmux(args).status.success()
    }

    fn text(&self, args: &[&str]) -> String {
        String::from_utf8_lossy(&self.tmux(args).stdout)
            .trim()
            .to_string()
    }

    /// A script run by `shell` in this world, after the parameters.
    fn script(&self, params: &str, body: &str) -> String {
        format!(
            "export TMUX_TMPDIR={d} HOME={d}\nunset TMUX\n{params}{body}",
            d = q(self.dir.path().to_str().unwrap())
        )
    }
}

impl Drop for TmuxWorld {
    fn drop(&mut self) {
        self.tmux(&["kill-server"]);
        self.tmux(&["-L", "eng", "kill-server"]);
    }
}

fn q(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

fn wait_for(what: &str, mut ok: impl FnMut() -> bool) {
    let start = Instant::now();
    while !ok() {
        assert!(start.elapsed() < Duration::from_secs(10), "no {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// `seed_<id>` on the default server: made (tagged with the engine's session, its pane a client
/// of the engine's session that does not resize it), refused when taken (exit 3), removed only
/// for its own engine session (naming the engine pane's first process), and gone by itself when
/// the engine's session ends. The pane's program runs under each shell too.
#[test]
fn tmux_name_scripts_under_every_shell() {
    for shell in posix_shells() {
        let w = TmuxWorld::new();
        assert!(w.ok(&[
            "-L",
            "eng",
            "-f",
            "/dev/null",
            "new-session",
            "-d",
            "-s",
            "E",
            "--",
            "sleep",
            "600"
        ]));
        let params = |e: &str| format!("T=tmux\nS=eng\nE={e}\nN=seed_x\n");
        let name = w.script(&format!("{}A={}\n", params("E"), q(TMUX_ATTACH)), TMUX_NAME);
        let clients = || w.text(&["-L", "eng", "list-clients", "-F", "#{client_flags}"]);
        run(&shell, &name, "");
        assert!(w.ok(&["has-session", "-t", "=seed_x"]), "{shell:?}");
        assert_eq!(
            w.text(&["display-message", "-p", "-t", "=seed_x:", "#{@seed_engine}"]),
            "E"
        );
        wait_for("client of the engine's session", || {
            clients().contains("ignore-size")
        });
        // Taken: exit 3.
        assert_eq!(
            run_script(&shell, &name, b"").status.code(),
            Some(3),
            "{shell:?}"
        );
        // The pane's program under this shell: one more client, gone with its session.
        let mut probe = vec!["new-session", "-d", "-s", "probe", "--"];
        probe.extend(shell.iter());
        probe.extend(["-c", TMUX_ATTACH, "seed-attach", "tmux", "eng", "E"]);
        assert!(w.ok(&probe), "{shell:?}");
        wait_for("second client", || clients().lines().count() == 2);
        assert!(w.ok(&["kill-session", "-t", "=probe"]));
        wait_for("one client", || clients().lines().count() == 1);
        // Another engine session's unname leaves it.
        let other = w.script(&params("E2"), TMUX_UNNAME);
        assert_eq!(run(&shell, &other, ""), "", "{shell:?}");
        assert!(w.ok(&["has-session", "-t", "=seed_x"]), "{shell:?}");
        // Its own removes it and names the engine pane's process.
        let pane_pid = w.text(&[
            "-L",
            "eng",
            "display-message",
            "-p",
            "-t",
            "=E:",
            "#{pane_pid}",
        ]);
        let unname = w.script(&params("E"), TMUX_UNNAME);
        assert_eq!(run(&shell, &unname, "").trim(), pane_pid, "{shell:?}");
        assert!(!w.ok(&["has-session", "-t", "=seed_x"]), "{shell:?}");
        // Named again, then the engine's session ends: the name goes with it.
        run(&shell, &name, "");
        assert!(w.ok(&["has-session", "-t", "=seed_x"]), "{shell:?}");
        assert!(w.ok(&["-L", "eng", "kill-session", "-t", "=E"]));
        wait_for("seed_x to end", || !w.ok(&["has-session", "-t", "=seed_x"]));
    }
}

/// Directories (one mkdir), symlinks (made, replaced, removed only when a symlink) and empty
/// directories removed, names with spaces, quotes and leading dashes as data.
#[test]
fn tree_apply_under_every_shell() {
    for shell in posix_shells() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir_all(root.join("empty")).unwrap();
        std::fs::create_dir_all(root.join("full")).unwrap();
        std::fs::write(root.join("full/f"), "x").unwrap();
        std::os::unix::fs::symlink("old", root.join("gone-link")).unwrap();
        std::fs::write(root.join("not-a-link"), "x").unwrap();
        std::os::unix::fs::symlink("before", root.join("-l")).unwrap();
        let changes = "d a b\nd a b/it's\nd -dash\nl a b/link\nt ../x y\nl -l\nt after\n\
                       L gone-link\nL not-a-link\nr empty\nr full\n";
        let script = format!(
            "root={}\n{{\n{TREE_APPLY}}} <<'__seed_tree_end'\n{changes}__seed_tree_end\n",
            q(root.to_str().unwrap())
        );
        assert_eq!(run(&shell, &script, ""), "", "{shell:?}");
        assert!(root.join("a b/it's").is_dir(), "{shell:?}");
        assert!(root.join("-dash").is_dir(), "{shell:?}");
        assert_eq!(
            std::fs::read_link(root.join("a b/link")).unwrap(),
            Path::new("../x y")
        );
        assert_eq!(
            std::fs::read_link(root.join("-l")).unwrap(),
            Path::new("after")
        );
        assert!(
            root.join("gone-link").symlink_metadata().is_err(),
            "{shell:?}"
        );
        assert!(root.join("not-a-link").is_file(), "{shell:?}");
        assert!(!root.join("empty").exists(), "{shell:?}");
        assert!(root.join("full/f").is_file(), "{shell:?}");
        // A failure (a directory where a file is) fails the script.
        let bad = format!(
            "root={}\n{{\n{TREE_APPLY}}} <<'__seed_tree_end'\nd full/f/sub\n__seed_tree_end\n",
            q(root.to_str().unwrap())
        );
        assert!(!run_script(&shell, &bad, b"").status.success(), "{shell:?}");
    }
}

/// Every regular file under the dir, `path NUL size NUL mtime NUL`, names as data; nothing for
/// a dir that is gone.
#[test]
fn list_artifacts_under_every_shell() {
    for shell in posix_shells() {
        let dir = tempfile::tempdir().unwrap();
        let arts = dir.path().join("artifacts");
        std::fs::create_dir_all(arts.join("sub")).unwrap();
        std::fs::write(arts.join("sub/a\nb"), "12345").unwrap();
        std::fs::write(arts.join("-x"), "").unwrap();
        let script = format!("dir={}\n{LIST_ARTIFACTS}", q(arts.to_str().unwrap()));
        let out = run_script(&shell, &script, b"");
        assert!(out.status.success(), "{shell:?}");
        let fields: Vec<&[u8]> = out.stdout.split(|b| *b == 0).collect();
        let mut files: Vec<(String, String)> = fields
            .chunks(3)
            .filter(|c| c.len() == 3)
            .map(|c| {
                (
                    String::from_utf8_lossy(c[0]).into_owned(),
                    String::from_utf8_lossy(c[1]).into_owned(),
                )
            })
            .collect();
        files.sort();
        assert_eq!(
            files,
            [
                ("-x".to_string(), "0".to_string()),
                ("sub/a\nb".to_string(), "5".to_string())
            ],
            "{shell:?}"
        );
        let gone = format!(
            "dir={}\n{LIST_ARTIFACTS}",
            q(&format!("{}/none", dir.path().display()))
        );
        assert_eq!(run(&shell, &gone, ""), "", "{shell:?}");
    }
}

/// The terminal session's processes get SIGHUP; one that ignores it goes on.
#[test]
fn hang_up_under_every_shell() {
    for shell in posix_shells() {
        // A new session: sh (its leader) with a child that ignores HUP and one that does not.
        let mut leader = Command::new("setsid")
            .args(["sh", "-c", "(trap '' HUP; exec sleep 30) & sleep 30 & wait"])
            .stdin(Stdio::null())
            .spawn()
            .unwrap();
        let sid = leader.id();
        let members = || {
            let out = Command::new("pgrep")
                .args(["-s", &sid.to_string(), "sleep"])
                .output()
                .unwrap();
            String::from_utf8_lossy(&out.stdout).lines().count()
        };
        wait_for("both sleeps", || members() == 2);
        run(&shell, &format!("sid={sid}\n{HANG_UP}"), "");
        wait_for("the one that does not ignore SIGHUP to end", || {
            members() == 1
        });
        let _ = Command::new("pkill")
            .args(["-KILL", "-s", &sid.to_string()])
            .status();
        let _ = leader.wait();
    }
}
