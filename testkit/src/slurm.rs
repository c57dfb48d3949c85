//! The Slurm test bed (`scripts/slurm-bed.sh`, docs/slurm.md) for the suites that need a real
//! Slurm: started once per test process, idempotently (a running bed is reused and left
//! running).

use std::path::Path;
use std::process::Command;
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
    let out = script("slurm-bed.sh").expect("run scripts/slurm-bed.sh");
    assert!(
        out.status.success(),
        "scripts/slurm-bed.sh failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    None
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
