//! `seed-runner`: the legacy seed-runner v3 CLI (`status`, `mount create|status|destroy`,
//! `session create|exec|status|destroy`) as a thin face over the remote-runner engine and its
//! state dir. Its sessions are ordinary engine sessions (`remote-runner session list` shows
//! them). The one deliberate difference from v3: the mount is a sync, not sshfs (see
//! docs/seed-runner.md).
//!
//! Output: one JSON object on stdout, for results and errors alike (`{"error":{"code":2005,...}}`,
//! exit status 1).

mod bring_back;
mod clock;
mod cmd;
mod ctx;
mod error;
mod liveness;
mod logs;
mod metadata;
mod pending;
mod remote_dir;
mod state;
mod sync;
mod tmux_name;
mod tree;
mod wrapper;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(
    name = "seed-runner",
    version,
    about = "The seed-runner v3 mount/session CLI on the remote-runner engine"
)]
struct Cli {
    /// State directory shared with remote-runner (default ~/.remote-runner).
    #[arg(long, global = true, env = "REMOTE_RUNNER_STATE_DIR", hide = true)]
    state_dir: Option<PathBuf>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// All live mounts and sessions.
    Status,
    /// Mount management.
    #[command(subcommand)]
    Mount(MountCmd),
    /// Session management.
    #[command(subcommand)]
    Session(SessionCmd),
}

#[derive(Debug, Subcommand)]
enum MountCmd {
    /// Check the machine, create the remote work dir and its artifacts/, record the pair
    /// (refused when another mount uses the local or the remote dir).
    Create {
        #[arg(long)]
        machine: String,
        #[arg(long)]
        local_dir: PathBuf,
        #[arg(long, default_value = "~/seed-experiment")]
        remote_dir: String,
        #[arg(long, default_value_t = 30)]
        timeout: u64,
    },
    /// The mount, checked on the machine (`error` when its remote work dir is gone).
    Status {
        #[arg(long)]
        mount_id: String,
    },
    /// Destroy its sessions (fetching what a timed-out command logged and made), forget it.
    Destroy {
        #[arg(long)]
        mount_id: String,
        /// Also delete the remote work dir.
        #[arg(long)]
        cleanup: bool,
    },
}

#[derive(Debug, Subcommand)]
enum SessionCmd {
    Create {
        #[arg(long)]
        machine: String,
        #[arg(long)]
        mount_id: String,
        #[arg(long, value_parser = session_name)]
        name: String,
        /// Whole-session timeout in seconds.
        #[arg(long, default_value_t = 3600)]
        timeout: u64,
    },
    Exec {
        #[arg(long)]
        session: String,
        #[arg(long)]
        cmd: String,
        /// Timeout of this command in seconds.
        #[arg(long, default_value_t = 300)]
        timeout: u64,
    },
    Status {
        #[arg(long)]
        session: String,
    },
    Destroy {
        #[arg(long)]
        session: String,
    },
}

/// A session name is a directory name under `artifacts/logs/`.
fn session_name(s: &str) -> Result<String, String> {
    if s.is_empty() || s == "." || s == ".." || s.contains('/') || s.chars().any(|c| c.is_control())
    {
        return Err(format!(
            "{s:?} cannot be a log directory name: use letters, digits, '-', '_' or '.'"
        ));
    }
    Ok(s.to_string())
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let state_dir = match cli.state_dir.filter(|d| !d.as_os_str().is_empty()) {
        Some(d) => d,
        None => match dirs::home_dir() {
            Some(h) => h.join(".remote-runner"),
            None => {
                return print(Err(error::SeedError::state(
                    "cannot find the home directory for the state dir; set \
                     REMOTE_RUNNER_STATE_DIR",
                )));
            }
        },
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            return print(Err(error::SeedError::state(format!(
                "cannot start the async runtime: {e}"
            ))));
        }
    };
    let ctx = ctx::Ctx::new(state_dir);
    let result = runtime.block_on(async {
        match cli.command {
            Command::Status => cmd::status::run(&ctx).await,
            Command::Mount(MountCmd::Create {
                machine,
                local_dir,
                remote_dir,
                timeout,
            }) => cmd::mount_create::run(&ctx, &machine, &local_dir, &remote_dir, timeout).await,
            Command::Mount(MountCmd::Status { mount_id }) => {
                cmd::mount_status::run(&ctx, &mount_id).await
            }
            Command::Mount(MountCmd::Destroy { mount_id, cleanup }) => {
                cmd::mount_destroy::run(&ctx, &mount_id, cleanup).await
            }
            Command::Session(SessionCmd::Create {
                machine,
                mount_id,
                name,
                timeout,
            }) => cmd::session_create::run(&ctx, &machine, &mount_id, &name, timeout).await,
            Command::Session(SessionCmd::Exec {
                session,
                cmd,
                timeout,
            }) => cmd::session_exec::run(&ctx, &session, &cmd, timeout).await,
            Command::Session(SessionCmd::Status { session }) => {
                cmd::session_status::run(&ctx, &session).await
            }
            Command::Session(SessionCmd::Destroy { session }) => {
                cmd::session_destroy::run(&ctx, &session).await
            }
        }
    });
    print(result)
}

/// Print the one JSON object. A reader that went away (`seed-runner status | head -1`) is no
/// error: the output is dropped quietly and the exit status stays the command's.
fn print(result: error::Result<serde_json::Value>) -> ExitCode {
    use std::io::Write;
    let (value, code) = match result {
        Ok(v) => (v, ExitCode::SUCCESS),
        Err(e) => (e.to_json(), ExitCode::FAILURE),
    };
    let mut text = serde_json::to_string_pretty(&value).unwrap_or_else(|_| value.to_string());
    text.push('\n');
    let mut stdout = std::io::stdout().lock();
    let _ = stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush());
    code
}
