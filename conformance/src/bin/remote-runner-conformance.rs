//! `remote-runner-conformance --provider <command> [args...]`: see docs/conformance.md.

use remote_runner_conformance::cli::{self, Args};

fn main() {
    let args = match Args::from_env() {
        Ok(args) => args,
        Err(code) => std::process::exit(code),
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("error: cannot start the async runtime: {err}");
            std::process::exit(cli::EXIT_USAGE);
        }
    };
    let code = runtime.block_on(cli::main_with(args));
    std::process::exit(code);
}
