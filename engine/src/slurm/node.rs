//! A session's allocated node, reached through the login node: the machine a Slurm session's
//! tmux driver uses.
//!
//! On a cluster the compute nodes are other hosts: their processes, `/proc` and `/tmp` (where
//! tmux keeps its socket) are not the login node's. So everything the control script does for a
//! session (tmux, the shell's process checks and signals, waits) runs on the node, as a step of
//! the session's allocation. [`NodeTransport`] is the node's byte transport: each process the
//! engine would start on the login node (a control-plane line) runs under `srun --jobid=J
//! --overlap --quiet` instead; files go straight through the login node (the session's
//! directory is on the cluster's shared file system). [`NodePlane`] is the node's control
//! plane: the login node's, with the job, so its long-lived control processes come from the
//! login connection's budget (under the job's scope), and through the CLI's keeper the whole
//! call goes to the keeper with the job.

use std::sync::Arc;

use async_trait::async_trait;

use crate::error::{Error, ErrorCode, Result};
use crate::remote::{Call, ControlPlane, Remote};
use crate::transport::{
    BoxRead, BoxWrite, DirEntry, ExecOptions, ExecOutput, ExecStream, FileStat, Transport,
    shell_quote,
};

/// The allocated node of Slurm job `job`, reached through `login`.
pub struct NodeTransport {
    login: Arc<dyn Transport>,
    job: String,
}

impl std::fmt::Debug for NodeTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeTransport")
            .field("login", &self.login.describe())
            .field("job", &self.job)
            .finish()
    }
}

/// The nodes of one process, by job id: kept while their link is up, so that a session's calls
/// reuse its node's long-lived control processes.
#[derive(Debug, Default)]
pub struct Nodes(std::sync::Mutex<std::collections::HashMap<String, Arc<Remote>>>);

impl Nodes {
    /// The node of Slurm job `job`, reached through `login`.
    pub fn get(&self, login: &Remote, job: &str) -> Arc<Remote> {
        let mut nodes = self.0.lock().unwrap_or_else(|p| p.into_inner());
        nodes.retain(|_, node| node.is_connected());
        nodes
            .entry(job.to_string())
            .or_insert_with(|| {
                let bytes = Arc::new(NodeTransport::new(login.transport().clone(), job));
                let plane = Arc::new(NodePlane {
                    login: login.plane().clone(),
                    job: job.to_string(),
                });
                Arc::new(Remote::new(bytes, plane))
            })
            .clone()
    }
}

/// The control plane of Slurm job `job`'s node: the login machine's, with the job.
pub struct NodePlane {
    login: Arc<dyn ControlPlane>,
    job: String,
}

#[async_trait]
impl ControlPlane for NodePlane {
    /// `transport` is the node's ([`NodeTransport`]): what the login's plane starts on it runs
    /// as a step of the job.
    async fn call(
        &self,
        transport: &dyn Transport,
        _node: Option<&str>,
        call: &Call<'_>,
    ) -> Result<ExecOutput> {
        self.login.call(transport, Some(&self.job), call).await
    }
}

/// The words that run a command as a step of `job` on its node, beside the others.
pub fn step_words(job: &str) -> Vec<String> {
    vec![
        "srun".to_string(),
        format!("--jobid={job}"),
        "--overlap".to_string(),
        "--quiet".to_string(),
    ]
}

impl NodeTransport {
    pub fn new(login: Arc<dyn Transport>, job: &str) -> NodeTransport {
        NodeTransport {
            login,
            job: job.to_string(),
        }
    }

    /// The login node's transport this one goes through.
    pub fn login(&self) -> &Arc<dyn Transport> {
        &self.login
    }

    /// `command` (a control-plane line, `exec /bin/sh -c '…' rr VERB NONCE`) as a step on the
    /// node. `srun` takes the same words in every login shell.
    fn on_node(&self, command: &str) -> String {
        let rest = command.strip_prefix("exec ").unwrap_or(command);
        let step: Vec<String> = step_words(&self.job)
            .iter()
            .map(|w| shell_quote(w))
            .collect();
        format!("exec {} {rest}", step.join(" "))
    }

    /// srun's own refusal, when the allocation is gone, as the session-lost error the engine
    /// explains with Slurm's reason; any other output passes unchanged.
    fn check(&self, out: ExecOutput) -> Result<ExecOutput> {
        if out.status.success() {
            return Ok(out);
        }
        let err = out.stderr_lossy();
        let gone = err.lines().any(|l| {
            l.starts_with("srun: error:")
                && [
                    "Invalid job id",
                    "has expired",
                    "completing or completed",
                    "Unable to confirm allocation",
                ]
                .iter()
                .any(|said| l.contains(said))
        });
        if gone {
            return Err(Error::new(
                ErrorCode::SessionLost,
                format!(
                    "the allocation of this session (Slurm job {}) is gone: {}",
                    self.job,
                    crate::util::printable_excerpt(err.trim().as_bytes(), 300)
                ),
            ));
        }
        Ok(out)
    }
}

#[async_trait]
impl Transport for NodeTransport {
    fn describe(&self) -> String {
        format!("{} (Slurm job {})", self.login.describe(), self.job)
    }

    async fn exec_raw(&self, command: &str, options: ExecOptions) -> Result<ExecOutput> {
        let out = self.login.exec_raw(&self.on_node(command), options).await?;
        self.check(out)
    }

    async fn write_file(&self, path: &str, data: &[u8], mode: u32) -> Result<()> {
        self.login.write_file(path, data, mode).await
    }

    async fn write_new_file(&self, path: &str, data: &[u8], mode: u32) -> Result<()> {
        self.login.write_new_file(path, data, mode).await
    }

    async fn read_file_range(&self, path: &str, offset: u64, max: usize) -> Result<Vec<u8>> {
        self.login.read_file_range(path, offset, max).await
    }

    async fn stat(&self, path: &str) -> Result<Option<FileStat>> {
        self.login.stat(path).await
    }

    async fn create_dir_all(&self, path: &str, mode: u32) -> Result<()> {
        self.login.create_dir_all(path, mode).await
    }

    async fn create_dir_fresh(&self, base: &str, path: &str, mode: u32) -> Result<bool> {
        self.login.create_dir_fresh(base, path, mode).await
    }

    async fn read_dir(&self, path: &str) -> Result<Vec<DirEntry>> {
        self.login.read_dir(path).await
    }

    async fn rename(&self, from: &str, to: &str) -> Result<()> {
        self.login.rename(from, to).await
    }

    async fn remove_file(&self, path: &str) -> Result<()> {
        self.login.remove_file(path).await
    }

    async fn set_mode(&self, path: &str, mode: u32) -> Result<()> {
        self.login.set_mode(path, mode).await
    }

    async fn open_read(&self, path: &str) -> Result<BoxRead> {
        self.login.open_read(path).await
    }

    async fn open_write(&self, path: &str, mode: u32) -> Result<BoxWrite> {
        self.login.open_write(path, mode).await
    }

    fn is_connected(&self) -> bool {
        self.login.is_connected()
    }

    async fn exec_stream(&self, command: &str) -> Result<Option<ExecStream>> {
        self.login.exec_stream(&self.on_node(command)).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transport::local::LocalTransport;

    #[test]
    fn a_control_line_becomes_a_step_of_the_job() {
        let node = NodeTransport::new(Arc::new(LocalTransport::new()), "42");
        assert_eq!(
            node.on_node("exec /bin/sh -c 'x' rr serve n"),
            "exec srun --jobid=42 --overlap --quiet /bin/sh -c 'x' rr serve n"
        );
        // A job id is data, whatever the record says.
        let odd = NodeTransport::new(Arc::new(LocalTransport::new()), "1; rm -rf x");
        assert_eq!(
            odd.on_node("exec /bin/sh"),
            "exec srun '--jobid=1; rm -rf x' --overlap --quiet /bin/sh"
        );
    }
}
