//! Whether the process that recorded a command is still starting it.
//!
//! `exec` stores a command's record before its start call reaches the machine, so a caller
//! killed in between (or whose start call never arrived) leaves a record that says `running`
//! and a command directory with no `started` marker, and nothing on the machine will ever run
//! it. To tell that apart from a start still on its way, the recording process holds an
//! exclusive lock on `<log dir>/<command id>.starting` from before the record is stored until
//! its start call has returned; the kernel releases it when the process dies, however it dies.
//! A look at a command that has not started (`command show`, `wait`, `list`) whose lock file is
//! gone or unlocked settles it on the machine (`TmuxDriver::report_settling`): the command is
//! recorded as ended, `never_started`, and a start that still arrives refuses (both take the
//! command directory's `claim`, O_EXCL, and only the first one wins).

use std::fs::{File, OpenOptions, TryLockError};
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

/// The lock held while a command is being started; released (and its file removed) on drop.
pub struct Starting {
    path: PathBuf,
    _file: File,
    /// The name the lock's file keeps once released ([`Starting::keep_as`]).
    keep_as: Option<PathBuf>,
}

fn lock_path(log_dir: &Path, command_id: &str) -> PathBuf {
    log_dir.join(format!("{command_id}.starting"))
}

/// Take the start lock of `command_id` (before its record is stored).
pub fn begin(log_dir: &Path, command_id: &str) -> Result<Starting> {
    use std::os::unix::fs::OpenOptionsExt;
    let path = lock_path(log_dir, command_id);
    let file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .mode(0o600)
        .open(&path)
        .map_err(|e| Error::io(format!("cannot open {}", path.display()), &e))?;
    file.lock()
        .map_err(|e| Error::io(format!("cannot lock {}", path.display()), &e))?;
    Ok(Starting {
        path,
        _file: file,
        keep_as: None,
    })
}

impl Starting {
    /// Release the lock of a command that started, keeping its (empty) file as `target`, the
    /// command's local log, unless that exists: a link, then the lock's name goes. That is one
    /// file fewer to create, and none to delete, on every command: on a journal-less ext4
    /// every deleted inode slows the file creates after it for minutes.
    pub fn keep_as(mut self, target: &Path) {
        self.keep_as = Some(target.to_path_buf());
    }
}

impl Drop for Starting {
    fn drop(&mut self) {
        if let Some(target) = &self.keep_as {
            // (Fails, leaving the target alone, when it exists.)
            let _ = std::fs::hard_link(&self.path, target);
        }
        // Removed while still locked: a look in between sees it locked, then gone.
        let _ = std::fs::remove_file(&self.path);
    }
}

/// No process is starting `command_id` any more: its lock file is gone, or nobody holds it.
pub fn gone(log_dir: &Path, command_id: &str) -> bool {
    let path = lock_path(log_dir, command_id);
    let file = match File::open(&path) {
        Ok(f) => f,
        Err(e) => return e.kind() == std::io::ErrorKind::NotFound,
    };
    match file.try_lock() {
        Ok(()) => true,
        Err(TryLockError::WouldBlock) => false,
        Err(TryLockError::Error(_)) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn held_while_starting_then_gone() {
        let dir = tempfile::tempdir().unwrap();
        assert!(gone(dir.path(), "cmd_a"), "never taken");
        let held = begin(dir.path(), "cmd_a").unwrap();
        assert!(!gone(dir.path(), "cmd_a"));
        drop(held);
        assert!(gone(dir.path(), "cmd_a"));
        // Kept as another name: the lock's name is gone, the other holds the file, and an
        // existing file of that name is left as it was.
        let log = dir.path().join("cmd_a.log");
        begin(dir.path(), "cmd_a").unwrap().keep_as(&log);
        assert!(gone(dir.path(), "cmd_a"));
        assert_eq!(std::fs::read(&log).unwrap(), b"");
        std::fs::write(&log, b"written").unwrap();
        begin(dir.path(), "cmd_a").unwrap().keep_as(&log);
        assert!(gone(dir.path(), "cmd_a"));
        assert_eq!(std::fs::read(&log).unwrap(), b"written");
        // A lock file left by a process that died: nobody holds it.
        std::fs::write(lock_path(dir.path(), "cmd_b"), b"").unwrap();
        assert!(gone(dir.path(), "cmd_b"));
    }
}
