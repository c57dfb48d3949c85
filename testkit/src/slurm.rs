//! The Slurm test bed (`scripts/slurm-bed.sh`, docs/slurm.md) for the suites that need a real
//! Slurm: started once per test process, idempotently. A bed that was already running is reused
//! and left running; one this process started is stopped when it exits.

use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::OnceLock;

/// `None` when the Slurm bed runs; otherwise why it cannot (Slurm is not installed and the
/// project's install script could not install it: not root, no package registry). A bed that is
/// installed but does not start is a panic, not a reason to skip.
pub fn slurm_bed() -> Option<&'static str> {
    static BED: OnceLock<Option<String>> = OnceLock::new();
    BED.get_or_init(start).as_deref()
}

/// [`slurm_bed`], printing `SKIPPED: <why>` when there is none; `true` when it runs.
pub fn slurm_bed_or_skip() -> bool {
    match slurm_bed() {
        None => true,
        Some(why) => {
            eprintln!("SKIPPED: {why}");
            false
        }
    }
}

fn start() -> Option<String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let script = |name: &str| {
        Command::new("bash")
            .arg(root.join("scripts").join(name))
            .output()
    };
    if !Path::new("/usr/sbin/slurmctld").exists() {
        // Installs Slurm's packages when missing (as root, from the package registry).
        let _ = script("install-deps.sh");
    }
    if !Path::new("/usr/sbin/slurmctld").exists() {
        return Some(
            "Slurm is not installed and scripts/install-deps.sh could not install it (needs root \
             and a package registry): apt-get install -y --no-install-recommends slurmctld \
             slurmd slurm-client munge"
                .to_string(),
        );
    }
    // This process uses the bed: a pid file under users/, so that a bed another test process
    // started is not stopped under it.
    let users = Path::new("/run/rr-slurm-bed/users");
    let _ = std::fs::create_dir_all(users);
    let _ = std::fs::write(users.join(std::process::id().to_string()), b"");
    let was_running = Command::new("bash")
        .arg(BED_SCRIPT)
        .arg("status")
        .output()
        .is_ok_and(|o| o.status.success());
    let out = script("slurm-bed.sh").expect("run scripts/slurm-bed.sh");
    assert!(
        out.status.success(),
        "scripts/slurm-bed.sh failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    if !was_running {
        stop_when_done();
    }
    None
}

const BED_SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../scripts/slurm-bed.sh");

/// The bed was started by this process: a detached watcher stops it once this process has
/// exited and no other test process that uses it is alive (their pid files under users/).
fn stop_when_done() {
    let watcher = r#"
        me=$1 script=$2 users=/run/rr-slurm-bed/users
        while kill -0 "$me" 2>/dev/null; do sleep 0.2; done
        rm -f "$users/$me"
        for f in "$users"/*; do
          [ -e "$f" ] || continue
          if kill -0 "${f##*/}" 2>/dev/null; then exit 0; fi
          rm -f "$f"
        done
        exec bash "$script" stop
    "#;
    let spawned = Command::new("sh")
        .args(["-c", watcher, "rr-slurm-bed-stop"])
        .arg(std::process::id().to_string())
        .arg(BED_SCRIPT)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn();
    if let Err(e) = spawned {
        eprintln!("the Slurm bed will not be stopped after the tests: {e}");
    }
}

/// The state of job `job` as the controller sees it (`""` once it no longer knows the job).
pub fn job_state(job: &str) -> String {
    let out = Command::new("squeue")
        .args(["-h", "-t", "all", "-j", job, "-o", "%T"])
        .output()
        .expect("squeue");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// Wait (at most 30 s) until the job's state satisfies `ok`; returns the last state seen.
pub fn wait_for_job_state(job: &str, ok: impl Fn(&str) -> bool) -> String {
    let start = std::time::Instant::now();
    loop {
        let s = job_state(job);
        if ok(&s) || start.elapsed() > std::time::Duration::from_secs(30) {
            return s;
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
}

/// A fresh directory in `user`'s home, removed when dropped. On a cluster the home directories
/// are the file system the login node and the compute nodes share; the bed's nodes have a `/tmp`
/// of their own, so a job's working directory must be here.
#[derive(Debug)]
pub struct SharedDir {
    path: std::path::PathBuf,
}

impl SharedDir {
    pub fn new(user: &str) -> anyhow::Result<SharedDir> {
        let home = crate::passwd_home(user)?;
        let unique = format!(
            "{}-{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)?
                .as_nanos()
        );
        let path = home.join("rr-slurm-work").join(unique);
        std::fs::create_dir_all(&path)?;
        let status = Command::new("chown")
            .arg("-R")
            .arg(format!("{user}:{user}"))
            .arg(home.join("rr-slurm-work"))
            .status()?;
        anyhow::ensure!(status.success(), "chown of {} failed", path.display());
        Ok(SharedDir { path })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for SharedDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}
