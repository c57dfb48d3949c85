//! `remote-runner-bench-cold-exec STATE_DIR SESSION_ID [COMMAND]`: one cold engine exec, the work
//! `remote-runner session exec --session S --cmd true` does, for the `exec-cold-cli` benchmark
//! while that CLI command is not wired to the engine yet.
//!
//! Like the CLI it starts a 2-worker runtime, opens the store in the state dir, connects to the
//! session's machine (a stored record) with the default connect options, runs the command in
//! wait mode, prints the command record as JSON and exits with 0 when the command succeeded.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use remote_runner_engine::connect::MachineConnector;
use remote_runner_engine::engine::{CommandStatus, Engine, ExecRequest};
use remote_runner_engine::ssh::ConnectOptions;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (Some(state_dir), Some(session)) = (args.first(), args.get(1)) else {
        eprintln!("usage: remote-runner-bench-cold-exec STATE_DIR SESSION_ID [COMMAND]");
        return ExitCode::from(2);
    };
    let command = args.get(2).map_or("true", String::as_str);
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("cannot start the async runtime: {e}");
            return ExitCode::from(1);
        }
    };
    let state_dir = PathBuf::from(state_dir);
    let result = runtime.block_on(async {
        let connector = MachineConnector::new(state_dir.clone(), ConnectOptions::default());
        let engine = Engine::new(&state_dir, Arc::new(connector))?;
        engine.exec(session, command, ExecRequest::wait()).await
    });
    match result {
        Ok(rec) => {
            println!(
                "{}",
                serde_json::to_string(&rec).unwrap_or_else(|_| "{}".to_string())
            );
            if rec.status == CommandStatus::Completed {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            }
        }
        Err(e) => {
            eprintln!("{e}");
            ExitCode::from(1)
        }
    }
}
