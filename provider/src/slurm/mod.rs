//! Slurm as the engine of a machine's sessions and runs (issue 18; docs/slurm.md).
//!
//! The machine is the cluster's login node, reached over SSH as any machine. Everything here runs
//! there through the control script (`slurm.sh`, through the `sh` verb): `salloc --no-shell` for
//! a session's allocation ([`alloc`]), `sbatch` for a run, one batched `squeue` (and `sacct`
//! where there is accounting) for states and exit codes ([`ops::query`]), `scancel` to end a job.
//! tmux stays on the login node; the session's pane enters the allocation with
//! [`pane_prefix`].

pub mod alloc;
pub mod args;
pub mod ops;

pub use alloc::{AllocRequest, Progress, allocate};
pub use args::{check_words, merged, split_args};
pub use ops::{JobInfo, Probe};

/// The words the session's pane command is prefixed with: the session shell runs on the
/// allocated node, beside any other step (`--overlap`), on a terminal (`--pty`).
pub fn pane_prefix(job_id: &str) -> Vec<String> {
    vec![
        "srun".to_string(),
        format!("--jobid={job_id}"),
        "--overlap".to_string(),
        "--pty".to_string(),
        "--quiet".to_string(),
    ]
}

/// The Slurm commands `machine doctor` checks.
pub const TOOLS: &[&str] = &[
    "sinfo", "salloc", "srun", "sbatch", "squeue", "sacct", "scancel",
];
