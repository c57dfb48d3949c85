//! A small tmpfs mounted for a test (disk-full faults), unmounted on drop. Needs root.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Result, bail};

#[derive(Debug)]
pub struct Tmpfs {
    _parent: tempfile::TempDir,
    dir: PathBuf,
}

impl Tmpfs {
    /// Mount a tmpfs of `size` (e.g. `1m`) on a fresh directory.
    pub fn mount(size: &str) -> Result<Tmpfs> {
        let parent = tempfile::Builder::new().prefix("rr-rel-tmpfs-").tempdir()?;
        let dir = parent.path().join("mnt");
        std::fs::create_dir(&dir)?;
        let out = Command::new("mount")
            .args([
                "-t",
                "tmpfs",
                "-o",
                &format!("size={size},mode=0700"),
                "tmpfs",
            ])
            .arg(&dir)
            .output()?;
        if !out.status.success() {
            bail!(
                "mount -t tmpfs failed: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        Ok(Tmpfs {
            _parent: parent,
            dir,
        })
    }

    pub fn path(&self) -> &Path {
        &self.dir
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.dir).status();
    }
}
