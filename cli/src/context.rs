//! What every command handler gets: the resolved global options and access to local state.

use std::path::PathBuf;
use std::time::Duration;

use remote_runner_provider::store::Store;
use remote_runner_provider::store::credentials::CredentialStore;
use remote_runner_provider::{Error, ErrorCode, Result};

use crate::cli::GlobalArgs;
use crate::output::Output;

/// Name of the state dir under the home directory when `--state-dir` is not given.
const DEFAULT_STATE_DIR_NAME: &str = ".remote-runner";

#[derive(Debug)]
pub struct Context {
    /// `--state-dir`, `REMOTE_RUNNER_STATE_DIR`, or `~/.remote-runner`.
    pub state_dir: PathBuf,
    /// `--timeout`.
    pub timeout: Option<Duration>,
    pub out: Output,
}

impl Context {
    pub fn new(global: &GlobalArgs, out: Output) -> Result<Context> {
        let state_dir = match &global.state_dir {
            Some(dir) if dir.as_os_str().is_empty() => {
                return Err(Error::invalid(
                    "--state-dir (or REMOTE_RUNNER_STATE_DIR) is empty; give a directory path",
                ));
            }
            Some(dir) => dir.clone(),
            None => dirs::home_dir()
                .map(|home| home.join(DEFAULT_STATE_DIR_NAME))
                .ok_or_else(|| {
                    Error::new(
                        ErrorCode::ConfigInvalid,
                        "cannot find your home directory for the default state dir; pass \
                         --state-dir PATH or set REMOTE_RUNNER_STATE_DIR",
                    )
                })?,
        };
        Ok(Context {
            state_dir,
            timeout: global.timeout.map(Duration::from_secs),
            out,
        })
    }

    /// Open the record store (creates the state dir with mode 0700).
    pub fn store(&self) -> Result<Store> {
        Store::open(&self.state_dir)
    }

    /// The credential file beside the store.
    pub fn credentials(&self) -> Result<CredentialStore> {
        CredentialStore::open(&self.state_dir)
    }
}
