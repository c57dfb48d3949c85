//! Slurm as the engine of a machine's sessions and runs (docs/slurm.md).
//!
//! The machine is the cluster's login node, reached over SSH as any machine. Everything here runs
//! there through the control script (`slurm.sh`, through the `sh` verb): `salloc --no-shell` for
//! a session's allocation ([`alloc`]), `sbatch` for a run, one batched `squeue` (and `sacct`
//! where there is accounting) for states and exit codes ([`ops::query`]), `scancel` to end a job.
//! A session's tmux server and shell run on the allocated node, as steps of its allocation;
//! the engine reaches them through the login node ([`node::NodeTransport`], the node's bytes;
//! [`node::NodePlane`], its control plane).

pub mod alloc;
pub mod args;
pub mod node;
pub mod ops;

pub use alloc::{AllocRequest, Progress, allocate};
pub use args::{check_words, merged, split_args};
pub use node::{NodePlane, NodeTransport, Nodes, step_words};
pub use ops::{JobInfo, Probe};

/// The Slurm commands `machine doctor` checks.
pub const TOOLS: &[&str] = &[
    "sinfo", "salloc", "srun", "sbatch", "squeue", "sacct", "scancel",
];
