//! The provider as the host spawns it: the same library entry point as `botmux-remote-runner`
//! (`server::run_stdio`), built inside this package so the tests can find it through
//! `CARGO_BIN_EXE_*` (a test cannot name another package's binary).

fn main() {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_ansi(false)
        .init();
    let code = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt.block_on(remote_runner_provider::server::run_stdio()),
        Err(e) => {
            eprintln!("cannot start the async runtime: {e}");
            1
        }
    };
    std::process::exit(code);
}
