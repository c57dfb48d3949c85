//! What no MCP tool reads or writes on the server's host, whatever the roots: the engine's state
//! dir, every machine's key and known_hosts files, and everything in the account's `~/.ssh`.
//! They are named by identity (device and inode), so another spelling, a symlink or a hard link
//! to one of them is the same file; the set is collected again at every call, from the machine
//! records as they are then.

use std::collections::HashSet;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use remote_runner_engine::engine::Machines;

use super::beneath::Id;

/// Most entries looked at under one guarded directory (a state dir full of logs need not be
/// walked to its end: its own identity already guards everything beneath it).
const MAX_ENTRIES: usize = 20_000;
/// How deep the walk of a guarded directory goes.
const MAX_DEPTH: usize = 4;

#[derive(Debug, Default)]
pub struct Guarded {
    /// Directories nothing beneath is touched: the state dir, each `~/.ssh`.
    pub dirs: HashSet<Id>,
    /// Files: keys, known_hosts, and what those directories hold.
    pub files: HashSet<Id>,
}

impl Guarded {
    /// The guarded set as it is now.
    pub fn collect(state_dir: &Path) -> Guarded {
        let mut g = Guarded::default();
        let mut dirs = vec![state_dir.to_path_buf()];
        for home in homes() {
            dirs.push(home.join(".ssh"));
        }
        for dir in &dirs {
            if let Ok(m) = std::fs::metadata(dir) {
                g.dirs.insert((m.dev(), m.ino()));
            }
            let mut budget = MAX_ENTRIES;
            g.walk(dir, 0, &mut budget);
        }
        if let Ok(machines) = Machines::open(state_dir).and_then(|m| m.list()) {
            for entry in machines {
                let m = entry.machine;
                for file in [
                    m.key_path.clone(),
                    m.key_path.map(|k| format!("{k}.pub")),
                    m.known_hosts_file,
                ]
                .into_iter()
                .flatten()
                {
                    for path in expand_tilde(&file) {
                        g.add_file(&path);
                    }
                }
            }
        }
        g
    }

    fn add_file(&mut self, path: &Path) {
        if let Ok(m) = std::fs::metadata(path) {
            self.files.insert((m.dev(), m.ino()));
        }
    }

    /// Every file under `dir` (a symlink's target too), to [`MAX_DEPTH`] and [`MAX_ENTRIES`].
    fn walk(&mut self, dir: &Path, depth: usize, budget: &mut usize) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for entry in entries.flatten() {
            if *budget == 0 {
                return;
            }
            *budget -= 1;
            let path = entry.path();
            self.add_file(&path);
            if depth < MAX_DEPTH && entry.file_type().is_ok_and(|t| t.is_dir()) {
                self.walk(&path, depth + 1, budget);
            }
        }
    }

    pub fn is_guarded(&self, id: Id) -> bool {
        self.files.contains(&id) || self.dirs.contains(&id)
    }

    /// The first of `path` and its ancestors that is a guarded directory.
    pub fn guarded_ancestor(&self, path: &Path) -> Option<PathBuf> {
        path.ancestors()
            .find(|a| std::fs::metadata(a).is_ok_and(|m| self.dirs.contains(&(m.dev(), m.ino()))))
            .map(Path::to_path_buf)
    }
}

/// The account's home directories: the passwd database's (never only `HOME`, which a client
/// may not set) and `HOME` when it names another.
pub fn homes() -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = passwd_home().into_iter().collect();
    if let Some(home) = std::env::var_os("HOME").filter(|h| !h.is_empty()) {
        let home = PathBuf::from(home);
        if !out.contains(&home) {
            out.push(home);
        }
    }
    out
}

/// This user's home directory from the passwd database (`getpwuid_r`).
fn passwd_home() -> Option<PathBuf> {
    nix::unistd::User::from_uid(nix::unistd::getuid())
        .ok()
        .flatten()
        .map(|u| u.dir)
        .filter(|d| !d.as_os_str().is_empty())
}

/// `~/x` under every home (the guard errs on the side of more files).
fn expand_tilde(path: &str) -> Vec<PathBuf> {
    match path.strip_prefix("~/") {
        Some(rest) => homes().iter().map(|h| h.join(rest)).collect(),
        None => vec![PathBuf::from(path)],
    }
}
