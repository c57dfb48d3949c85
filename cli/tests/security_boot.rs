//! Nothing runs before it is checked (issue 28): the line the engine sends checks the control
//! script and every directory above it (OpenSSH's StrictModes) before it runs it, so a script
//! another local user planted, or swapped in through a directory they can write, never runs as
//! the account. A real second user (testkit's) does the planting; each scenario runs over SSH
//! (testkit's sshd, as the login user) and on the built-in `local` machine (as this user, root).
//!
//! A planted script would create a marker file: its absence proves it never ran.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use common::{Run, Sandbox};
use remote_runner_engine::remote::CTL_NAME;
use remote_runner_testkit::{LoginShell, Sshd, TEST_USER};

/// The account the engine runs as, and another local user who attacks it.
struct Bed {
    sb: Sandbox,
    sshd: Option<Sshd>,
    /// A directory for the scenario, reachable by both users.
    base: PathBuf,
    /// The account's XDG_STATE_HOME.
    xdg: PathBuf,
    work: PathBuf,
    attacker: String,
    _tmp: Option<tempfile::TempDir>,
}

impl Bed {
    /// `local`: the account is this user; the attacker is testkit's login user.
    fn local() -> Bed {
        remote_runner_testkit::ensure_test_user().expect("these tests run as root");
        let sb = Sandbox::new();
        chmod(sb.path(), 0o755);
        let base = scenario_dir(sb.path());
        let work = sb.path().join("work");
        std::fs::create_dir(&work).unwrap();
        Bed {
            xdg: base.join("state"),
            sb,
            sshd: None,
            base,
            work,
            attacker: TEST_USER.to_string(),
            _tmp: None,
        }
    }

    /// Over SSH: the account is testkit's login user, its XDG_STATE_HOME set by sshd; the
    /// attacker is another testkit account.
    fn ssh() -> Bed {
        let tmp = tempfile::Builder::new()
            .prefix("rr-boot-")
            .tempdir()
            .unwrap();
        chmod(tmp.path(), 0o755);
        let base = scenario_dir(tmp.path());
        Bed::ssh_in(base, Some(tmp))
    }

    /// [`Bed::ssh`] with the scenario's directory `base`.
    fn ssh_in(base: PathBuf, tmp: Option<tempfile::TempDir>) -> Bed {
        let attacker = remote_runner_testkit::ensure_login_account(LoginShell::Sh)
            .expect("these tests run as root")
            .user;
        let xdg = base.join("state");
        let sshd = Sshd::builder()
            .config_line(format!("SetEnv XDG_STATE_HOME={}", xdg.display()))
            .start()
            .unwrap_or_else(|e| panic!("cannot start the sshd test bed: {e:#}"));
        let work = sshd.remote_dir("work").unwrap();
        let bed = Bed {
            sb: Sandbox::new(),
            sshd: Some(sshd),
            base,
            xdg,
            work,
            attacker,
            _tmp: tmp,
        };
        let sshd = bed.sshd.as_ref().unwrap();
        let port = sshd.port.to_string();
        let r = bed.run(&[
            "machine",
            "add",
            "bed",
            "--host",
            "127.0.0.1",
            "--port",
            &port,
            "--user",
            TEST_USER,
            "--key-path",
            sshd.keys.ed25519.to_str().unwrap(),
            "--known-hosts-file",
            sshd.known_hosts.to_str().unwrap(),
            "--default-cwd",
            bed.work.to_str().unwrap(),
            "--json",
        ]);
        assert_eq!(r.code, 0, "{r:?}");
        bed
    }

    /// The account: testkit's login user over SSH, this user (root) on `local`.
    fn victim(&self) -> &str {
        if self.sshd.is_some() {
            TEST_USER
        } else {
            "root"
        }
    }

    fn run(&self, args: &[&str]) -> Run {
        let mut cmd = self.sb.command(args);
        // Every call from a fresh process: no connection keeper holds control processes that
        // started before a swap.
        cmd.env_remove("SSH_AUTH_SOCK")
            .env("REMOTE_RUNNER_KEEPER", "off");
        match &self.sshd {
            Some(sshd) => cmd.env("REMOTE_RUNNER_SSH_CONFIG", &sshd.ssh_config),
            None => cmd.env("XDG_STATE_HOME", &self.xdg),
        };
        common::run_command(cmd, None)
    }

    fn machine(&self) -> &str {
        if self.sshd.is_some() { "bed" } else { "local" }
    }

    /// `session create` must be refused with `insecure_remote_dir` naming `path`.
    fn refused(&self, path: &Path) {
        let r = self.run(&[
            "session",
            "create",
            "--machine",
            self.machine(),
            "--cwd",
            self.work.to_str().unwrap(),
            "--json",
        ]);
        self.refusal(r, path);
    }

    /// `r` is an `insecure_remote_dir` naming `path`, and the planted script never ran.
    fn refusal(&self, r: Run, path: &Path) {
        assert!(
            !self.marker().exists(),
            "the planted script ran as the account: {r:?}"
        );
        assert_ne!(r.code, 0, "{r:?}");
        let err = r.error();
        assert_eq!(err["code"], "insecure_remote_dir", "{err}");
        let message = err["message"].as_str().unwrap();
        assert!(
            message.contains(&path.display().to_string()),
            "names {}: {message}",
            path.display()
        );
        assert!(message.contains("chmod go-w"), "says the fix: {message}");
    }

    fn marker(&self) -> PathBuf {
        self.base.with_file_name("marks").join("planted-script-ran")
    }

    /// As the attacker: a control script of the engine's name under `root` (the state root
    /// `<xdg>/remote-runner`) that would leave the marker, every path created theirs.
    fn plant(&self, root: &Path) -> PathBuf {
        let lib = root.join("lib");
        let mut made = Vec::new();
        let mut p = lib.clone();
        while !p.exists() {
            made.push(p.clone());
            p = p.parent().unwrap().to_path_buf();
        }
        std::fs::create_dir_all(&lib).unwrap();
        let ctl = lib.join(CTL_NAME.as_str());
        std::fs::write(
            &ctl,
            format!("touch '{}'\nexit 0\n", self.marker().display()),
        )
        .unwrap();
        made.push(ctl.clone());
        for path in made {
            chmod(&path, if path == ctl { 0o755 } else { 0o777 });
            self.give(&path, &self.attacker);
        }
        ctl
    }

    fn give(&self, path: &Path, user: &str) {
        let st = Command::new("chown")
            .arg(format!("{user}:"))
            .arg(path)
            .status()
            .unwrap();
        assert!(st.success(), "chown {user} {}", path.display());
    }
}

/// `dir/shared` (the scenario's directory) and `dir/marks`, where anyone may leave a marker.
fn scenario_dir(dir: &Path) -> PathBuf {
    let marks = dir.join("marks");
    std::fs::create_dir(&marks).unwrap();
    chmod(&marks, 0o1777);
    let base = dir.join("shared");
    std::fs::create_dir(&base).unwrap();
    chmod(&base, 0o755);
    base
}

fn chmod(path: &Path, mode: u32) {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// A directory anyone can create entries in, like /tmp: root's, sticky.
fn world_writable(bed: &Bed) {
    chmod(&bed.base, 0o1777);
}

/// The account's XDG_STATE_HOME sits in a world-writable directory and does not exist yet (a
/// reboot cleared it): another user creates it first, with a control script in it.
fn planted_before_the_account_came(bed: Bed) {
    world_writable(&bed);
    bed.plant(&bed.xdg.join("remote-runner"));
    // The refusal names the topmost path that is not the account's own.
    bed.refused(&bed.xdg);
}

/// Another user creates the (empty) state directory first, world-writable; the engine installs
/// its script there and refuses it; the other user then swaps in a script of their own.
fn swapped_after_install(bed: Bed) {
    world_writable(&bed);
    std::fs::create_dir(&bed.xdg).unwrap();
    chmod(&bed.xdg, 0o777);
    bed.give(&bed.xdg, &bed.attacker);
    bed.refused(&bed.xdg);
    let root = bed.xdg.join("remote-runner");
    assert!(
        root.join("lib").join(CTL_NAME.as_str()).exists(),
        "the engine installed its script"
    );
    std::fs::rename(&root, bed.xdg.join("moved-away")).unwrap();
    bed.plant(&root);
    bed.refused(&bed.xdg);
}

/// The account's own state directory is group-writable and the other user is in that group:
/// they rename the account's remote-runner directory away and put their own in its place.
fn renamed_in_a_group_writable_parent(bed: Bed) {
    std::fs::create_dir(&bed.xdg).unwrap();
    let root = bed.xdg.join("remote-runner");
    let lib = root.join("lib");
    std::fs::create_dir_all(&lib).unwrap();
    std::fs::write(
        lib.join(CTL_NAME.as_str()),
        remote_runner_engine::remote::CTL_SCRIPT,
    )
    .unwrap();
    for p in [&bed.xdg, &root, &lib] {
        chmod(p, 0o700);
    }
    chmod(&lib.join(CTL_NAME.as_str()), 0o600);
    let st = Command::new("chown")
        .arg("-R")
        .arg(format!("{}:{}", bed.victim(), bed.attacker))
        .arg(&bed.xdg)
        .status()
        .unwrap();
    assert!(st.success());
    chmod(&bed.xdg, 0o770);
    // As the attacker (a member of the directory's group).
    std::fs::rename(&root, bed.xdg.join("old")).unwrap();
    bed.plant(&root);
    bed.refused(&bed.xdg);
}

/// The code runtime's runner is checked before it runs: its directory turned group-writable,
/// another user of that group swaps the runner for their own.
fn swapped_code_runner(bed: Bed) {
    let code_run = |language: &str| {
        let mut cmd = bed.sb.command(&[
            "code",
            "run",
            "--machine",
            bed.machine(),
            "--language",
            language,
            "--cwd",
            bed.work.to_str().unwrap(),
            "--json",
        ]);
        cmd.env_remove("SSH_AUTH_SOCK");
        match &bed.sshd {
            Some(sshd) => cmd.env("REMOTE_RUNNER_SSH_CONFIG", &sshd.ssh_config),
            None => cmd.env("XDG_STATE_HOME", &bed.xdg),
        };
        common::run_command(cmd, Some("return 6 * 7"))
    };
    std::fs::create_dir(&bed.xdg).unwrap();
    chmod(&bed.xdg, 0o700);
    bed.give(&bed.xdg, bed.victim());
    for language in ["javascript", "python"] {
        let r = code_run(language);
        assert_eq!(r.code, 0, "{r:?}");
        assert_eq!(r.json()["value"], 42, "{r:?}");
    }
    let code = bed.xdg.join("remote-runner/code");
    let st = Command::new("chown")
        .arg(format!("{}:{}", bed.victim(), bed.attacker))
        .arg(&code)
        .status()
        .unwrap();
    assert!(st.success());
    chmod(&code, 0o770);
    for (language, ext) in [("javascript", "js"), ("python", "py")] {
        let runner = std::fs::read_dir(&code)
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .find(|p| {
                let name = p.file_name().unwrap().to_string_lossy();
                name.starts_with("runner-") && name.ends_with(&format!(".{ext}"))
            })
            .expect("the runner was uploaded");
        // As the attacker (a member of the directory's group).
        std::fs::rename(&runner, code.join(format!("old.{ext}"))).unwrap();
        let planted = if ext == "js" {
            format!(
                "require('fs').writeFileSync('{}', '')\n",
                bed.marker().display()
            )
        } else {
            format!("open('{}', 'w').close()\n", bed.marker().display())
        };
        std::fs::write(&runner, planted).unwrap();
        bed.give(&runner, &bed.attacker);
        let r = code_run(language);
        bed.refusal(r, &runner);
    }
}

/// On a Slurm compute node the same line runs under `srun`, and checks the same way: a session
/// whose control script is swapped after it started is refused there, naming the job.
/// The SSH bed as a Slurm login node, its scenario directory (and so XDG_STATE_HOME) in the
/// account's home, which the nodes share (not /tmp); the state dir made, and a work dir.
/// `None` when there is no Slurm bed.
fn slurm_bed() -> Option<(Bed, remote_runner_testkit::slurm::SharedDir, PathBuf)> {
    if !remote_runner_testkit::slurm::slurm_bed_or_skip() {
        return None;
    }
    let shared = remote_runner_testkit::slurm::SharedDir::new(TEST_USER).unwrap();
    let base = scenario_dir(shared.path());
    bed_give_tree(shared.path(), TEST_USER);
    let bed = Bed::ssh_in(base, None);
    let r = bed.run(&[
        "machine",
        "configure-scheduler",
        "bed",
        "--scheduler",
        "slurm",
        "--slurm-args",
        "--time=10",
        "--json",
    ]);
    assert_eq!(r.code, 0, "{r:?}");
    std::fs::create_dir(&bed.xdg).unwrap();
    chmod(&bed.xdg, 0o700);
    bed.give(&bed.xdg, TEST_USER);
    let work = shared.path().join("work");
    std::fs::create_dir(&work).unwrap();
    bed.give(&work, TEST_USER);
    Some((bed, shared, work))
}

/// On a Slurm compute node the same line runs under `srun`, and checks the same way: a session
/// whose control script is swapped after it started is refused there, naming the job.
#[test]
fn swapped_on_a_slurm_node() {
    let Some((bed, _shared, work)) = slurm_bed() else {
        return;
    };
    let r = bed.run(&[
        "session",
        "create",
        "--machine",
        "bed",
        "--cwd",
        work.to_str().unwrap(),
        "--json",
    ]);
    assert_eq!(r.code, 0, "{r:?}");
    let session = r.json()["session_id"].as_str().unwrap().to_string();

    // The account's lib/ turned group-writable; the attacker, of that group, swaps the script.
    let lib = bed.xdg.join("remote-runner/lib");
    let ctl = lib.join(CTL_NAME.as_str());
    let st = Command::new("chown")
        .arg(format!("{TEST_USER}:{}", bed.attacker))
        .arg(&lib)
        .status()
        .unwrap();
    assert!(st.success());
    chmod(&lib, 0o770);
    std::fs::rename(&ctl, lib.join("good.sh")).unwrap();
    std::fs::write(
        &ctl,
        format!("touch '{}'\nexit 0\n", bed.marker().display()),
    )
    .unwrap();
    chmod(&ctl, 0o755);
    bed.give(&ctl, &bed.attacker);
    let r = bed.run(&[
        "session",
        "exec",
        "--session",
        &session,
        "--cmd",
        "echo hi",
        "--json",
    ]);
    assert!(!bed.marker().exists(), "the planted script ran: {r:?}");
    assert_ne!(r.code, 0, "{r:?}");
    let err = r.error();
    assert_eq!(err["code"], "insecure_remote_dir", "{err}");
    let message = err["message"].as_str().unwrap();
    assert!(
        message.contains("Slurm job"),
        "refused on the node: {message}"
    );

    // Put the account's script back to end the session.
    std::fs::rename(lib.join("good.sh"), &ctl).unwrap();
    chmod(&lib, 0o700);
    let r = bed.run(&["session", "destroy", "--session", &session, "--json"]);
    assert_eq!(r.code, 0, "{r:?}");
}

/// A batch run's command file is checked on the node right before it runs: with the account's
/// `runs/` directory group-writable (anyone in the group could swap `cmd.sh` while the job
/// waits in the queue), the job refuses it and the run says `insecure_remote_dir`.
#[test]
fn batch_command_checked_on_the_node() {
    let Some((bed, _shared, work)) = slurm_bed() else {
        return;
    };
    let run_once = || {
        bed.run(&[
            "run",
            "once",
            "--machine",
            "bed",
            "--cwd",
            work.to_str().unwrap(),
            "--cmd",
            "echo ran",
            "--json",
        ])
    };
    let r = run_once();
    assert_eq!(r.code, 0, "{r:?}");
    let runs = bed.xdg.join("remote-runner/runs");
    let st = Command::new("chown")
        .arg(format!("{TEST_USER}:{}", bed.attacker))
        .arg(&runs)
        .status()
        .unwrap();
    assert!(st.success());
    chmod(&runs, 0o770);
    let r = run_once();
    assert_ne!(r.code, 0, "{r:?}");
    let text = format!("{}{}", r.stdout, r.stderr);
    assert!(text.contains("insecure_remote_dir"), "{r:?}");
    assert!(
        text.contains(&runs.display().to_string()),
        "names runs/: {r:?}"
    );
    assert!(!text.contains("\"ran"), "the command did not run: {r:?}");
}

/// `chown -R user:` of `path`.
fn bed_give_tree(path: &Path, user: &str) {
    let st = Command::new("chown")
        .arg("-R")
        .arg(format!("{user}:"))
        .arg(path)
        .status()
        .unwrap();
    assert!(st.success());
}

macro_rules! both {
    ($($name:ident),* $(,)?) => {$(
        mod $name {
            #[test]
            fn local() {
                super::$name(super::Bed::local());
            }
            #[test]
            fn ssh() {
                super::$name(super::Bed::ssh());
            }
        }
    )*};
}

both!(
    planted_before_the_account_came,
    swapped_after_install,
    renamed_in_a_group_writable_parent,
    swapped_code_runner,
);
