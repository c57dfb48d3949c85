#!/usr/bin/env bash
# The project's test command: installs the whole test bed when missing (scripts/install-deps.sh
# --tests says what), then checks formatting and lints, runs every test (unit, real-sshd +
# real-tmux integration, conformance, reliability), and runs the demo: it must pass every step,
# and fail naming the step against a broken provider (scripts/demo-test.sh).
#
#   scripts/test.sh            # everything
#   scripts/test.sh -p remote-runner-protocol   # extra args go to `cargo test`
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH"

bash scripts/install-deps.sh --tests

echo "== cargo fmt --check" >&2
cargo fmt --all -- --check

echo "== cargo clippy" >&2
cargo clippy --workspace --all-targets --locked -- -D warnings

# The engine's API docs: every intra-doc link resolves, and none points at a private item.
echo "== cargo doc of the engine" >&2
RUSTDOCFLAGS="-D rustdoc::broken_intra_doc_links -D rustdoc::private_intra_doc_links" \
  cargo doc --locked -p remote-runner-engine --no-deps

# The faces compile against the engine's public API alone: built on their own (no test target,
# so no `testing` feature), a face that imports an engine-internal module does not compile.
echo "== the faces without the engine's internals" >&2
cargo check --locked -p remote-runner -p remote-runner-provider -p seed-runner --bins

echo "== cargo test" >&2
cargo test --workspace --locked --no-fail-fast "$@"

echo "== the README's first command (scripts/demo.sh) on the local machine, and its failure check" >&2
bash scripts/demo-test.sh
