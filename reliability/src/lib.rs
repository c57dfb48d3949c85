//! Shared parts of the reliability suite: the test beds (a real sshd + one engine), fault
//! injectors (signals, a network namespace with nftables, a small tmpfs), process and resource
//! probes, a seeded PRNG, and the machine-readable report every test writes.
//!
//! The tests live in `tests/`; `scripts/reliability.sh` runs them and turns the report files
//! under `target/reliability/` into `docs/reliability.md`.

pub mod bed;
pub mod chats;
pub mod host;
pub mod netns;
pub mod probe;
pub mod report;
pub mod rng;
pub mod tmpfs;

use std::time::Duration;

/// `RR_RELIABILITY_FULL=1` (set by `scripts/reliability.sh --full`): the full counts.
pub fn full_mode() -> bool {
    std::env::var("RR_RELIABILITY_FULL").is_ok_and(|v| v == "1")
}

/// How many times to repeat each fault: `RR_RELIABILITY_REPEATS`, else 20 in full mode, else
/// `ci_default` (small, so the suite fits the CI budget).
pub fn repeats(ci_default: usize) -> usize {
    if let Some(n) = std::env::var("RR_RELIABILITY_REPEATS")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
        .filter(|n| *n > 0)
    {
        return n;
    }
    if full_mode() { 20 } else { ci_default }
}

/// sha256 of bytes, hex.
pub fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::{Digest, Sha256};
    hex::encode(Sha256::digest(bytes))
}

/// Poll `f` every 50 ms until it is true or `deadline` passes; returns whether it became true.
pub async fn until(deadline: Duration, mut f: impl FnMut() -> bool) -> bool {
    let end = std::time::Instant::now() + deadline;
    loop {
        if f() {
            return true;
        }
        if std::time::Instant::now() > end {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The `p` percentile (0..=100) of `values` (nearest rank); 0 when empty.
pub fn percentile(values: &[f64], p: f64) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    let mut v = values.to_vec();
    v.sort_by(|a, b| a.total_cmp(b));
    let rank = ((p / 100.0) * v.len() as f64).ceil() as usize;
    v[rank.clamp(1, v.len()) - 1]
}

/// Whether this process runs as root (network namespaces and tmpfs mounts need it).
pub fn is_root() -> bool {
    std::process::Command::new("id")
        .arg("-u")
        .output()
        .map(|o| o.stdout == b"0\n")
        .unwrap_or(false)
}
