//! The provider as the host spawns it: the same library entry point as `botmux-remote-runner`
//! (`server::run_stdio`), built inside this package so the tests can find it through
//! `CARGO_BIN_EXE_*` (a test cannot name another package's binary).

fn main() {
    std::process::exit(remote_runner_provider::server::main_entry());
}
