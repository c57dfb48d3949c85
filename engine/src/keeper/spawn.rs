//! Starting a keeper: the same binary, detached, never waited for.

use std::fs::OpenOptions;
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use super::paths::KeeperPaths;
use crate::error::{Error, Result};

/// The hidden CLI subcommand that runs a keeper.
pub const SUBCOMMAND: &str = "keeper-daemon";

/// Log files past this size are started afresh.
const LOG_LIMIT: u64 = 1 << 20;

/// How to start a keeper: `PROGRAM --state-dir DIR keeper-daemon --machine ID --idle-secs N`.
#[derive(Debug, Clone)]
pub struct Launcher {
    pub program: PathBuf,
    pub idle: Duration,
}

impl Launcher {
    /// This executable as the keeper program.
    pub fn current(idle: Duration) -> Result<Launcher> {
        let program = std::env::current_exe()
            .map_err(|e| Error::io("cannot find this program's path to start a keeper", &e))?;
        Ok(Launcher { program, idle })
    }

    /// Start the keeper of `machine_id` in the background; returns without waiting for it.
    pub fn start(&self, state_dir: &Path, machine_id: &str) -> Result<()> {
        let paths = KeeperPaths::new(state_dir, machine_id);
        paths.ensure_dir()?;
        if std::fs::metadata(&paths.log).is_ok_and(|m| m.len() > LOG_LIMIT) {
            let _ = std::fs::remove_file(&paths.log);
        }
        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o600)
            .open(&paths.log)
            .map_err(|e| Error::io(format!("cannot open {}", paths.log.display()), &e))?;
        let log2 = log
            .try_clone()
            .map_err(|e| Error::io("cannot share the keeper log", &e))?;
        // An absolute state dir: the keeper runs from `/`, holding no directory of the caller.
        let state_dir = std::path::absolute(state_dir)
            .map_err(|e| Error::io("cannot resolve the state dir for a keeper", &e))?;
        let mut cmd = Command::new(&self.program);
        cmd.current_dir("/")
            .arg("--state-dir")
            .arg(&state_dir)
            .arg(SUBCOMMAND)
            .arg("--machine")
            .arg(machine_id)
            .arg("--idle-secs")
            .arg(self.idle.as_secs().max(1).to_string())
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log2);
        new_session(&mut cmd);
        cmd.spawn()
            .map_err(|e| Error::io("cannot start the connection keeper", &e))?;
        Ok(())
    }
}

/// The keeper gets its own session: no terminal, no signal from the user's ^C or hangup.
#[allow(unsafe_code)]
fn new_session(cmd: &mut Command) {
    // SAFETY: setsid is async-signal-safe and touches no memory of the parent; it is the only
    // call made between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            if libc::setsid() == -1 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}
