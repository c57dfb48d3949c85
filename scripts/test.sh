#!/usr/bin/env bash
# The project's test command: installs what is missing, then checks formatting and lints and
# runs every test (unit, real-sshd + real-tmux integration, conformance, reliability).
#
#   scripts/test.sh            # everything
#   scripts/test.sh -p remote-runner-protocol   # extra args go to `cargo test`
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH"

bash scripts/install-deps.sh

echo "== cargo fmt --check" >&2
cargo fmt --all -- --check

echo "== cargo clippy" >&2
cargo clippy --workspace --all-targets --locked -- -D warnings

echo "== cargo test" >&2
cargo test --workspace --locked "$@"

echo "== the README's first command (scripts/demo.sh) on the local machine" >&2
bash scripts/demo.sh >/dev/null
echo "demo: ok" >&2
