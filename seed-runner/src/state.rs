//! seed-runner's own records (mounts, the v3 view of sessions, id counters) in
//! `<state dir>/seed-runner/state.json`, read and written under an exclusive lock on
//! `state.lock`; and the per-mount sync manifests beside it.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::{Result, SeedError};

#[derive(Debug, Default, Serialize, Deserialize)]
pub struct State {
    /// Last number used per id prefix and day (`mnt_20260407` → 3).
    #[serde(default)]
    pub counters: BTreeMap<String, u64>,
    #[serde(default)]
    pub mounts: Vec<Mount>,
    #[serde(default)]
    pub sessions: Vec<Session>,
    /// Ids of destroyed sessions (exec on them is error 2006).
    #[serde(default)]
    pub destroyed_sessions: Vec<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Mount {
    pub mount_id: String,
    pub machine: String,
    pub local_path: String,
    pub remote_path: String,
    pub mounted_at: String,
    /// Last log number per session name (logs of a name never overwrite each other).
    #[serde(default)]
    pub log_counters: BTreeMap<String, u64>,
    /// The `sessions` of metadata.json (destroyed sessions stay, for audit).
    #[serde(default)]
    pub meta_sessions: Vec<MetaSession>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct MetaSession {
    pub session_id: String,
    pub session_name: String,
    pub created_at: String,
    pub commands: Vec<MetaCommand>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct MetaCommand {
    pub index: u64,
    pub cmd: String,
    pub log_file: String,
    pub exit_code: Option<i32>,
    pub executed_at: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Session {
    pub session_id: String,
    pub session_name: String,
    pub machine: String,
    pub mount_id: String,
    /// The engine session behind it (what `remote-runner session list` shows).
    pub engine_session_id: String,
    pub created_at: String,
    pub created_unix: i64,
    pub timeout_seconds: u64,
    pub command_count: u64,
    pub last_command: Option<String>,
    pub last_exit_code: Option<i32>,
    pub last_executed_at: Option<String>,
    /// A command that has not been seen to end.
    pub pending: Option<Pending>,
    /// Why the session is `error` although its tmux session may live: the machine could not be
    /// reached again after a drop (cleared by the next call that reaches it).
    #[serde(default)]
    pub error: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Pending {
    pub index: u64,
    pub command: String,
    pub log_filename: String,
    pub executed_at: String,
    /// The seed-runner process running the exec.
    pub pid: u32,
    /// Set once the engine has the command (after a timed-out wait).
    pub engine_command_id: Option<String>,
}

/// The state, locked until dropped; `save` writes it back.
pub struct Locked {
    _lock: File,
    path: PathBuf,
    pub state: State,
}

impl Locked {
    pub fn save(&self) -> Result<()> {
        let text = serde_json::to_vec_pretty(&self.state)
            .map_err(|e| SeedError::state(format!("cannot encode the state: {e}")))?;
        write_atomic(&self.path, &text).map_err(|e| {
            SeedError::state(format!(
                "cannot write {}: {e}; check the local state directory and its permissions",
                self.path.display()
            ))
        })
    }
}

pub fn seed_dir(state_dir: &Path) -> PathBuf {
    state_dir.join("seed-runner")
}

/// Lock and read the state (an absent file is an empty state).
pub fn lock(state_dir: &Path) -> Result<Locked> {
    let dir = seed_dir(state_dir);
    let fail = |what: &str, e: std::io::Error| {
        SeedError::state(format!(
            "cannot {what} in {}: {e}; check the local state directory and its permissions",
            dir.display()
        ))
    };
    std::fs::create_dir_all(&dir).map_err(|e| fail("create the state directory", e))?;
    let lock = File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(dir.join("state.lock"))
        .map_err(|e| fail("open state.lock", e))?;
    lock.lock().map_err(|e| fail("lock state.lock", e))?;
    let path = dir.join("state.json");
    let state = match std::fs::read(&path) {
        Ok(bytes) => serde_json::from_slice(&bytes).map_err(|e| {
            SeedError::state(format!(
                "{} is not valid seed-runner state ({e}); move it away to start afresh",
                path.display()
            ))
        })?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => State::default(),
        Err(e) => return Err(fail("read state.json", e)),
    };
    Ok(Locked {
        _lock: lock,
        path,
        state,
    })
}

/// Write through a temporary file and a rename.
pub fn write_atomic(path: &Path, data: &[u8]) -> std::io::Result<()> {
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    {
        let mut f = File::create(&tmp)?;
        f.write_all(data)?;
        f.sync_all()?;
    }
    std::fs::rename(&tmp, path)
}

impl State {
    /// The next id `<prefix>_<YYYYMMDD>_<NNN>` (numbers never reused in this state dir).
    pub fn next_id(&mut self, prefix: &str, day: &str) -> String {
        let key = format!("{prefix}_{day}");
        let n = self.counters.entry(key.clone()).or_insert(0);
        *n += 1;
        format!("{key}_{:03}", *n)
    }

    pub fn mount(&self, mount_id: &str) -> Result<&Mount> {
        self.mounts
            .iter()
            .find(|m| m.mount_id == mount_id)
            .ok_or_else(|| no_mount(mount_id))
    }

    pub fn mount_mut(&mut self, mount_id: &str) -> Result<&mut Mount> {
        self.mounts
            .iter_mut()
            .find(|m| m.mount_id == mount_id)
            .ok_or_else(|| no_mount(mount_id))
    }

    pub fn session(&self, session_id: &str) -> Result<&Session> {
        self.sessions
            .iter()
            .find(|s| s.session_id == session_id)
            .ok_or_else(|| no_session(session_id))
    }

    pub fn session_mut(&mut self, session_id: &str) -> Result<&mut Session> {
        self.sessions
            .iter_mut()
            .find(|s| s.session_id == session_id)
            .ok_or_else(|| no_session(session_id))
    }

    pub fn was_destroyed(&self, session_id: &str) -> bool {
        self.destroyed_sessions.iter().any(|s| s == session_id)
    }
}

pub fn no_mount(mount_id: &str) -> SeedError {
    SeedError::new(
        crate::error::NO_MOUNT,
        "mount_not_found",
        format!(
            "no mount {mount_id}; check the mount_id (`seed-runner status` lists the live \
             mounts) or create one with `seed-runner mount create`"
        ),
    )
}

pub fn no_session(session_id: &str) -> SeedError {
    SeedError::new(
        crate::error::NO_SESSION,
        "session_not_found",
        format!(
            "no session {session_id}; check the session_id (`seed-runner status` lists the live \
             sessions) or create one with `seed-runner session create`"
        ),
    )
}

/// What the last sync left on the remote side, per mount.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct Manifest {
    /// Local files uploaded: relative path → what was sent.
    #[serde(default)]
    pub uploaded: BTreeMap<String, FileSig>,
    /// Remote `artifacts/` files fetched: relative path → remote size and mtime.
    #[serde(default)]
    pub downloaded: BTreeMap<String, (u64, String)>,
    /// Local directories made on the remote side (empty ones too): relative paths.
    #[serde(default)]
    pub dirs: std::collections::BTreeSet<String>,
    /// Local symlinks made on the remote side: relative path → target.
    #[serde(default)]
    pub links: BTreeMap<String, String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FileSig {
    pub size: u64,
    pub mtime_ns: i128,
    pub sha256: String,
}

fn manifest_path(state_dir: &Path, mount_id: &str) -> PathBuf {
    seed_dir(state_dir).join(format!("sync-{mount_id}.json"))
}

/// Lock the mount's sync (one sync at a time per mount) and read its manifest.
pub fn lock_manifest(state_dir: &Path, mount_id: &str) -> Result<(File, Manifest)> {
    let path = manifest_path(state_dir, mount_id);
    let fail = |e: std::io::Error| {
        SeedError::state(format!(
            "cannot lock or read the sync manifest {}: {e}",
            path.display()
        ))
    };
    let lock = File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path.with_extension("lock"))
        .map_err(fail)?;
    lock.lock().map_err(fail)?;
    let manifest = match std::fs::read(&path) {
        Ok(bytes) => serde_json::from_slice(&bytes).unwrap_or_default(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Manifest::default(),
        Err(e) => return Err(fail(e)),
    };
    Ok((lock, manifest))
}

pub fn save_manifest(state_dir: &Path, mount_id: &str, m: &Manifest) -> Result<()> {
    let path = manifest_path(state_dir, mount_id);
    let text = serde_json::to_vec(m).map_err(|e| SeedError::state(e.to_string()))?;
    write_atomic(&path, &text)
        .map_err(|e| SeedError::state(format!("cannot write {}: {e}", path.display())))
}

pub fn remove_manifest(state_dir: &Path, mount_id: &str) {
    let path = manifest_path(state_dir, mount_id);
    let _ = std::fs::remove_file(path.with_extension("lock"));
    let _ = std::fs::remove_file(path);
}
