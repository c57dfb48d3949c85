//! Test beds for transfers and runs: an engine with one session whose machine is either this
//! host (LocalTransport) or the real sshd test bed (SshTransport, user rrtest). The "remote"
//! directory is on this host in both cases, so tests prepare and inspect it with std::fs.
#![allow(dead_code)]

#[path = "../ssh_common/mod.rs"]
mod ssh_common;
pub mod suite;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use remote_runner_engine::engine::{Engine, EngineOptions, FixedConnector, SessionRecord};
use remote_runner_engine::machine::Machine;
use remote_runner_engine::remote::Remote;
use remote_runner_engine::ssh;
use remote_runner_engine::transport::local::LocalTransport;
use remote_runner_testkit::Sshd;
use sha2::{Digest, Sha256};

pub struct Bed {
    pub engine: Engine,
    pub session: SessionRecord,
    pub machine: Machine,
    /// The session's cwd, as a path on this host.
    pub remote: PathBuf,
    /// A scratch directory for the local side.
    pub local: tempfile::TempDir,
    pub state: tempfile::TempDir,
    pub t: Arc<Remote>,
    pub options: EngineOptions,
    /// Kept alive for SSH beds.
    pub sshd: Option<Sshd>,
    _remote_guard: Option<tempfile::TempDir>,
}

pub fn options() -> EngineOptions {
    EngineOptions {
        tmux_socket: format!("rrtest-{}", uuid::Uuid::new_v4().simple()),
        ..Default::default()
    }
}

fn require_tmux() {
    assert!(
        std::process::Command::new("tmux")
            .arg("-V")
            .output()
            .is_ok(),
        "tmux is required for these tests; install it (apt-get install tmux)"
    );
}

/// Run a test's body, failing it (rather than the whole test run) when it hangs: a transfer
/// that waits forever on a dead link is a defect these suites look for.
pub async fn bounded(body: impl std::future::Future<Output = ()>) {
    const LIMIT: std::time::Duration = std::time::Duration::from_secs(300);
    if tokio::time::timeout(LIMIT, body).await.is_err() {
        panic!(
            "the test did not finish within {} s: something hangs",
            LIMIT.as_secs()
        );
    }
}

/// An engine over LocalTransport, machine `local`, session in a fresh directory.
pub async fn local_bed() -> Bed {
    require_tmux();
    let remote_guard = tempfile::tempdir().unwrap();
    let remote = remote_guard.path().to_path_buf();
    let t = Remote::direct(Arc::new(LocalTransport::new()));
    let mut machine = Machine::local();
    machine.default_cwd = remote.to_string_lossy().into_owned();
    finish(t, machine, remote, None, Some(remote_guard)).await
}

/// An engine over SSH to the testkit sshd (user rrtest), session in a fresh remote directory.
pub async fn ssh_bed(name: &str) -> Bed {
    let sshd = ssh_common::start();
    let remote = sshd.remote_dir(name).unwrap();
    let mut machine = ssh_common::machine(&sshd, Some(&sshd.keys.ed25519));
    machine.default_cwd = remote.to_string_lossy().into_owned();
    let t = Remote::direct(ssh::connect(&machine, ssh_common::opts()).await.unwrap());
    finish(t, machine, remote, Some(sshd), None).await
}

async fn finish(
    t: Arc<Remote>,
    machine: Machine,
    remote: PathBuf,
    sshd: Option<Sshd>,
    remote_guard: Option<tempfile::TempDir>,
) -> Bed {
    let state = tempfile::tempdir().unwrap();
    let options = options();
    let engine = Engine::with_options(
        state.path(),
        Arc::new(FixedConnector(t.clone())),
        options.clone(),
    )
    .unwrap();
    let session = engine.create_session(&machine, None).await.unwrap();
    Bed {
        engine,
        session,
        machine,
        remote,
        local: tempfile::tempdir().unwrap(),
        state,
        t,
        options,
        sshd,
        _remote_guard: remote_guard,
    }
}

impl Bed {
    pub fn sid(&self) -> &str {
        &self.session.session_id
    }

    pub fn is_ssh(&self) -> bool {
        self.sshd.is_some()
    }

    /// A path in the local scratch directory.
    pub fn lp(&self, rel: &str) -> PathBuf {
        self.local.path().join(rel)
    }

    /// A path in the session's directory (on this host).
    pub fn rp(&self, rel: &str) -> PathBuf {
        self.remote.join(rel)
    }

    /// Hand a path prepared as root to the login user (SSH beds), so it can be replaced.
    pub fn give_to_user(&self, p: &Path) {
        if self.is_ssh() {
            let ok = std::process::Command::new("chown")
                .args(["-R", "rrtest:rrtest"])
                .arg(p)
                .status()
                .unwrap()
                .success();
            assert!(ok, "chown {}", p.display());
        }
    }

    /// A second engine on the same state dir (another CLI process).
    pub fn other_engine(&self) -> Engine {
        Engine::with_options(
            self.state.path(),
            Arc::new(FixedConnector(self.t.clone())),
            self.options.clone(),
        )
        .unwrap()
    }
}

pub fn sha_hex(data: &[u8]) -> String {
    hex::encode(Sha256::digest(data))
}

pub fn write(p: &Path, data: &[u8], mode: u32) {
    if let Some(d) = p.parent() {
        std::fs::create_dir_all(d).unwrap();
    }
    std::fs::write(p, data).unwrap();
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
}

pub fn mode_of(p: &Path) -> u32 {
    std::fs::symlink_metadata(p).unwrap().permissions().mode() & 0o7777
}

/// Bytes that are not all alike (so a shifted or truncated copy is caught).
pub fn pattern(len: usize, seed: u32) -> Vec<u8> {
    let mut x = seed.wrapping_mul(2_654_435_761).wrapping_add(1);
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x as u8
        })
        .collect()
}

/// A tree as (relative path, kind+content+mode) lines, sorted: equal trees give equal lists.
pub fn snapshot(root: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).unwrap() {
            let e = e.unwrap();
            let p = e.path();
            let rel = p.strip_prefix(root).unwrap().to_string_lossy().into_owned();
            let m = std::fs::symlink_metadata(&p).unwrap();
            let mode = m.permissions().mode() & 0o7777;
            if m.file_type().is_symlink() {
                out.push(format!(
                    "{rel:?} link {:?}",
                    std::fs::read_link(&p).unwrap()
                ));
            } else if m.is_dir() {
                out.push(format!("{rel:?} dir {mode:o}"));
                stack.push(p);
            } else {
                out.push(format!(
                    "{rel:?} file {mode:o} {}",
                    sha_hex(&std::fs::read(&p).unwrap())
                ));
            }
        }
    }
    out.sort();
    out
}

/// Names in a directory that look like our temporary files.
pub fn temp_leftovers(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains(".rr-part-"))
        .collect()
}
