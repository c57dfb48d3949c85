#!/usr/bin/env bash
# Proves that scripts/demo.sh checks its steps: it passes on our provider, and it fails,
# naming step 7, against a provider that refuses every turn (the reference provider's
# `refuse-turns` mutant, the `not_ready` refusal a host gets when it sends a turn before
# `ready`). Run by scripts/test.sh; needs what scripts/demo.sh needs.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH"

out=$(mktemp -d /tmp/remote-runner-demo-test.XXXXXX)
trap 'rm -rf "$out"' EXIT

if ! bash scripts/demo.sh >"$out/ok.out" 2>"$out/ok.err"; then
  cat "$out/ok.out" "$out/ok.err" >&2
  echo "demo-test: the demo failed on our provider" >&2
  exit 1
fi
grep -q '^demo: all 8 steps checked' "$out/ok.out" || {
  cat "$out/ok.out" >&2
  echo "demo-test: the demo did not report every step checked" >&2
  exit 1
}
echo "demo-test: the demo passes on botmux-remote-runner" >&2

cargo build -q -p remote-runner-examples
rc=0
RR_DEMO_PROVIDER=$PWD/target/debug/reference-provider REFERENCE_PROVIDER_MUTANT=refuse-turns \
  bash scripts/demo.sh >"$out/broken.out" 2>"$out/broken.err" || rc=$?
if [ "$rc" -eq 0 ] || ! grep -q '^demo: step 7 (.*failed:.*step turn failed:.*not_ready' "$out/broken.err"; then
  cat "$out/broken.out" "$out/broken.err" >&2
  echo "demo-test: against a provider that refuses turns the demo must exit non-zero naming step 7 (exit $rc)" >&2
  exit 1
fi
if grep -q 'all 8 steps checked' "$out/broken.out"; then
  echo "demo-test: the broken demo still claimed success" >&2
  exit 1
fi
echo "demo-test: against a provider that refuses turns the demo fails at step 7 (exit $rc)" >&2
