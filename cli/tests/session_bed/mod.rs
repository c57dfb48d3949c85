//! One test bed for the session, file and run suites, on either machine kind: the built-in
//! `local` machine (tmux on this host), or an SSH machine added to the CLI against the real
//! OpenSSH test bed (`remote_runner_testkit::Sshd`, key auth, its own known_hosts). Every test
//! in those suites runs on both through [`both_machines!`].
#![allow(dead_code)] // each suite uses a different part of this helper

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use remote_runner_testkit::slurm::{self, SharedDir};
use remote_runner_testkit::{Sshd, SshdBuilder, TEST_USER};
use serde_json::Value;

use crate::common::{self, Run, Sandbox};

/// Generous bound for anything the tests wait for.
pub const DEADLINE: Duration = Duration::from_secs(60);

pub struct Bed {
    pub sb: Sandbox,
    /// Machine id to pass to `--machine`.
    pub machine: String,
    /// A directory on the machine, writable by its login user, readable by this test.
    pub work: PathBuf,
    sshd: Option<Sshd>,
    /// A Slurm bed's work directory, removed after the test.
    shared: Option<SharedDir>,
}

/// Run one test body on `local` and on the SSH machine: `both_machines!(name, body_fn)` makes
/// `name_local` and `name_ssh`.
#[macro_export]
macro_rules! both_machines {
    ($name:ident, $body:ident) => {
        mod $name {
            #[test]
            fn local() {
                super::$body(&$crate::session_bed::Bed::local());
            }
            #[test]
            fn ssh() {
                super::$body(&$crate::session_bed::Bed::ssh());
            }
        }
    };
}

impl Bed {
    pub fn local() -> Bed {
        let sb = Sandbox::new();
        let work = sb.path().join("work");
        std::fs::create_dir_all(&work).unwrap();
        Bed {
            sb,
            machine: "local".to_string(),
            work,
            sshd: None,
            shared: None,
        }
    }

    /// The sshd test bed as machine `bed` (key auth, strict host keys against the bed's
    /// known_hosts), with a work directory owned by the login user.
    pub fn ssh() -> Bed {
        Bed::ssh_with(SshdBuilder::new())
    }

    /// [`Bed::ssh`] on an sshd started from `builder` (extra `sshd_config` lines).
    pub fn ssh_with(builder: SshdBuilder) -> Bed {
        let sshd = builder
            .start()
            .unwrap_or_else(|e| panic!("cannot start the sshd test bed: {e:#}"));
        let work = sshd.remote_dir("work").unwrap();
        let mut bed = Bed {
            sb: Sandbox::new(),
            machine: "bed".to_string(),
            work,
            sshd: Some(sshd),
            shared: None,
        };
        let sshd = bed.sshd.as_ref().unwrap();
        let port = sshd.port.to_string();
        let key = sshd.keys.ed25519.to_str().unwrap().to_string();
        let known = sshd.known_hosts.to_str().unwrap().to_string();
        let work = bed.work_str();
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
            &key,
            "--known-hosts-file",
            &known,
            "--default-cwd",
            &work,
            "--json",
        ]);
        assert_eq!(r.code, 0, "machine add failed: {r:?}");
        bed.machine = "bed".to_string();
        bed
    }

    /// [`Bed::ssh`] as a Slurm login node (default args `--time=10`), its work directory in the
    /// account's home (which the bed's nodes share, not their /tmp), or `None` (after printing
    /// why) when there is no Slurm bed.
    pub fn slurm() -> Option<Bed> {
        if !slurm::slurm_bed_or_skip() {
            return None;
        }
        let mut bed = Bed::ssh();
        let shared = SharedDir::new(TEST_USER).expect("a directory in the test account's home");
        bed.work = shared.path().to_path_buf();
        bed.shared = Some(shared);
        bed.json(&[
            "machine",
            "configure-scheduler",
            "bed",
            "--scheduler",
            "slurm",
            "--slurm-args",
            "--time=10",
        ]);
        Some(bed)
    }

    pub fn is_ssh(&self) -> bool {
        self.sshd.is_some()
    }

    pub fn sshd(&self) -> Option<&Sshd> {
        self.sshd.as_ref()
    }

    pub fn work_str(&self) -> String {
        self.work.to_str().unwrap().to_string()
    }

    /// A path under the work directory, as a string.
    pub fn at(&self, name: &str) -> String {
        self.work.join(name).to_str().unwrap().to_string()
    }

    /// The CLI with the sandbox's state dir and HOME, and for SSH the bed's ssh_config and no
    /// agent.
    pub fn command(&self, args: &[&str]) -> Command {
        let mut cmd = self.sb.command(args);
        cmd.env_remove("SSH_AUTH_SOCK");
        if let Some(sshd) = &self.sshd {
            cmd.env("REMOTE_RUNNER_SSH_CONFIG", &sshd.ssh_config);
        }
        cmd
    }

    pub fn run(&self, args: &[&str]) -> Run {
        common::run_command(self.command(args), None)
    }

    /// Start the CLI without waiting (stdout and stderr piped).
    pub fn spawn(&self, args: &[&str]) -> Child {
        let mut cmd = self.command(args);
        cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
        cmd.spawn().expect("spawn remote-runner")
    }

    /// `args --json`, exit 0, the one JSON object.
    pub fn json(&self, args: &[&str]) -> Value {
        let mut all = args.to_vec();
        all.push("--json");
        let r = self.run(&all);
        assert_eq!(r.code, 0, "{args:?} failed: {r:?}");
        r.json()
    }

    /// A new session in the work directory; returns its id.
    pub fn session(&self) -> String {
        let work = self.work_str();
        let v = self.json(&[
            "session",
            "create",
            "--machine",
            &self.machine,
            "--cwd",
            &work,
        ]);
        v["session_id"].as_str().unwrap().to_string()
    }

    /// `session exec --json` with any extra flags; the raw run (exit code and both streams).
    pub fn exec(&self, session: &str, cmd: &str, extra: &[&str]) -> Run {
        let mut args = vec![
            "session",
            "exec",
            "--session",
            session,
            "--cmd",
            cmd,
            "--json",
        ];
        args.extend_from_slice(extra);
        self.run(&args)
    }
}

/// Tests leave sessions running; their tmux sessions would outlive the sandbox (on this host's
/// shared tmux server, or the SSH login user's), so the bed destroys every active one.
impl Drop for Bed {
    fn drop(&mut self) {
        let r = self.run(&["session", "list", "--json"]);
        let Ok(list) = serde_json::from_str::<Value>(&r.stdout) else {
            return;
        };
        let sessions = list["sessions"].as_array().cloned().unwrap_or_default();
        for s in sessions.iter().filter(|s| s["status"] == "active") {
            if let Some(id) = s["session_id"].as_str() {
                let _ = self.run(&["session", "destroy", "--session", id, "--json"]);
            }
        }
    }
}

/// Wait (bounded by [`DEADLINE`]) until `check` returns `Some`.
pub fn eventually<T>(what: &str, mut check: impl FnMut() -> Option<T>) -> T {
    let start = Instant::now();
    loop {
        if let Some(v) = check() {
            return v;
        }
        assert!(start.elapsed() < DEADLINE, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Wait for a child with a bound; panics (after killing it) when it does not end.
pub fn wait_child(child: &mut Child) -> Run {
    let start = Instant::now();
    loop {
        if child.try_wait().unwrap().is_some() {
            break;
        }
        if start.elapsed() > DEADLINE {
            let _ = child.kill();
            panic!("the CLI did not finish within {DEADLINE:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    child.wait_with_output_ref()
}

/// `wait_with_output` for a `&mut Child` that has already exited.
trait WaitRef {
    fn wait_with_output_ref(&mut self) -> Run;
}

impl WaitRef for Child {
    fn wait_with_output_ref(&mut self) -> Run {
        use std::io::Read;
        let status = self.wait().unwrap();
        let mut stdout = String::new();
        let mut stderr = String::new();
        if let Some(mut s) = self.stdout.take() {
            s.read_to_string(&mut stdout).unwrap();
        }
        if let Some(mut s) = self.stderr.take() {
            s.read_to_string(&mut stderr).unwrap();
        }
        Run {
            code: status.code().unwrap_or(-1),
            stdout,
            stderr,
        }
    }
}

/// Send a signal (`INT`, `KILL`, ...) to a CLI process this test started and has not reaped.
pub fn signal(child: &Child, sig: &str) {
    let status = Command::new("kill")
        .arg(format!("-{sig}"))
        .arg(child.id().to_string())
        .status()
        .unwrap();
    assert!(status.success(), "kill -{sig} {} failed", child.id());
}

/// Assert that `v` has every field in `names`.
pub fn assert_fields(v: &Value, names: &[&str]) {
    for name in names {
        assert!(v.get(name).is_some(), "field {name:?} missing in {v:#}");
    }
}

/// Read a file the machine wrote (the SSH bed's directories are on this host too).
pub fn read(path: &Path) -> Vec<u8> {
    std::fs::read(path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()))
}

/// Wait (bounded by [`DEADLINE`]) until nothing of the sessions `ids` is left on the bed's
/// machine: no process of its login user names one (tmux server, control client, shell) and no
/// session directory remains under the user's state root.
pub fn wait_sessions_gone(sshd: &Sshd, ids: &[String]) {
    let home = std::fs::read_to_string("/etc/passwd")
        .unwrap()
        .lines()
        .find_map(|l| {
            let f: Vec<&str> = l.split(':').collect();
            (f.len() >= 6 && f[0] == sshd.user()).then(|| PathBuf::from(f[5]))
        })
        .expect("the login user's home");
    let root = home.join(".local/state/remote-runner/sessions");
    eventually("the sessions' processes and directories to go", || {
        let ps = Command::new("ps")
            .args(["-u", sshd.user(), "-o", "args="])
            .output()
            .unwrap();
        let ps = String::from_utf8_lossy(&ps.stdout).into_owned();
        ids.iter()
            .all(|id| !ps.contains(id.as_str()) && !root.join(id).exists())
            .then_some(())
    });
}
