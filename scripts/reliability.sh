#!/usr/bin/env bash
# The reliability suite (reliability/): faults, load and hostile input against the real sshd and
# real tmux. Runs it, then regenerates docs/reliability.md from its results
# (target/reliability/*.jsonl).
#
#   scripts/reliability.sh          # the CI counts (2-3 runs per fault), a few minutes
#   scripts/reliability.sh --full   # 20 runs per fault, 1,000 sequential commands, 250,000 fuzz lines
#
# RR_RELIABILITY_REPEATS=N overrides the per-fault count; RR_RELIABILITY_SEED replays a fuzz seed.
# The network-namespace and disk-full faults need root (they are reported as skipped otherwise).
# Exits non-zero when any case failed; the page is regenerated either way, failures included.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH"

case "${1:-}" in
  --full) export RR_RELIABILITY_FULL=1 ;;
  "") export RR_RELIABILITY_FULL=0 ;;
  *) echo "usage: scripts/reliability.sh [--full]" >&2; exit 2 ;;
esac

bash scripts/install-deps.sh

results="${CARGO_TARGET_DIR:-target}/reliability"
rm -rf "$results"
status=0
cargo test -p remote-runner-reliability --no-fail-fast || status=$?
cargo run -q -p remote-runner-reliability --bin rr-reliability-report -- "$results" docs/reliability.md
if [ "$status" -ne 0 ]; then
  echo "reliability: some cases failed; see docs/reliability.md and the test output above" >&2
fi
exit "$status"
