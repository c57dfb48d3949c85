//! remote-runner benchmarks (see docs/benchmarks.md).
fn main() {
    eprintln!("remote-runner-bench: no benchmark is built yet");
    std::process::exit(2);
}
