#!/usr/bin/env bash
# The main job end to end, narrated: a persistent session whose shell state carries over, a
# background command, a file put and get, a `run once` with an artifact, and one provider turn
# driven through the BotMux protocol.
#
#   scripts/demo.sh              # on the built-in `local` machine (this host, no SSH)
#   scripts/demo.sh MACHINE_ID   # on a machine added with `remote-runner machine add`
#   RR_MACHINE=MACHINE_ID scripts/demo.sh
#
# Installs tmux (and the OpenSSH client) when missing, builds the binaries, and keeps its state
# in a fresh directory unless REMOTE_RUNNER_STATE_DIR is set (needed for your own machines).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH"

machine=${1:-${RR_MACHINE:-local}}
say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
field() { sed -n "s/.*\"$1\": *\"\\([^\"]*\\)\".*/\\1/p" | head -n 1; }

bash scripts/install-deps.sh
say "Building remote-runner and botmux-remote-runner"
cargo build -q -p remote-runner -p remote-runner-provider
bin=$PWD/target/debug
rr() { "$bin/remote-runner" "$@"; }

work=$(mktemp -d /tmp/remote-runner-demo.XXXXXX)
chmod 755 "$work"
if [ -z "${REMOTE_RUNNER_STATE_DIR:-}" ]; then
  if [ "$machine" != local ]; then
    echo "demo: machine '$machine' lives in your state dir: set REMOTE_RUNNER_STATE_DIR (default ~/.remote-runner)" >&2
    export REMOTE_RUNNER_STATE_DIR=$HOME/.remote-runner
  else
    export REMOTE_RUNNER_STATE_DIR=$work/state
  fi
fi
echo "machine: $machine   state: $REMOTE_RUNNER_STATE_DIR   local files: $work"

say "1. Create a persistent session on '$machine'"
if [ "$machine" = local ]; then
  remote_dir=$work/remote
  mkdir -p "$remote_dir"
  session=$(rr session create --machine local --cwd "$remote_dir" --json | field session_id)
else
  session=$(rr session create --machine "$machine" --json | field session_id)
  remote_dir=$(rr session show --session "$session" --json | field cwd)/remote-runner-demo-$$
  rr session exec --session "$session" --cmd "mkdir -p '$remote_dir'" >/dev/null
fi
echo "session $session, working in $remote_dir"

say "2. Commands share one shell: cd, export and functions persist"
rr session exec --session "$session" --cmd "cd '$remote_dir' && export GREETING='hello from remote-runner'; shout() { echo \"\$*\" | tr a-z A-Z; }"
rr session exec --session "$session" --cmd 'echo "$GREETING in $(pwd)"; shout it works'
echo "-- a failing command keeps its exact exit code (and the session):"
rr session exec --session "$session" --cmd 'echo to-stderr >&2; (exit 7)' --exit-code || echo "exit code: $?"

say "3. A background command, then wait for it"
bg=$(rr session exec --session "$session" --mode background --cmd 'sleep 1; echo background-done > bg.txt; echo finished' --json | field command_id)
rr session command wait --session "$session" --command-id "$bg" --json | grep -E '"(status|exit_code|stdout)"'

say "4. Put a file, read it remotely, get it back (sha256 verified)"
printf 'line one\nline two\nline three\n' >"$work/input.txt"
rr file put --session "$session" --local "$work/input.txt" --remote "$remote_dir/input.txt" --verify
rr session exec --session "$session" --cmd 'wc -l input.txt; cat bg.txt'
rr file get --session "$session" --remote "$remote_dir/bg.txt" --local "$work/bg-copy.txt" --verify
echo "downloaded: $(cat "$work/bg-copy.txt")"

say "5. run once: a fresh session, inputs up, command, artifact down, manifest kept"
rr run once --machine "$machine" --cwd "$remote_dir" \
  --input "$work/input.txt=$remote_dir/run-input.txt" \
  --cmd 'sort -r run-input.txt > sorted.txt' \
  --artifact "$remote_dir/sorted.txt=$work/sorted.txt"
echo "artifact: $(tr '\n' '|' <"$work/sorted.txt")"
rr run list

say "6. One provider turn through the BotMux protocol (JSON lines on stdin/stdout)"
P='"protocol":"botmux.remote-runner","version":1'
out=$work/provider.jsonl
{
  printf '%s\n' \
    "{$P,\"type\":\"hello\",\"requestId\":\"hello:1\",\"sessionId\":\"demo\",\"requiredCapabilities\":[\"start\",\"resume\",\"turn\",\"cancel\",\"detach\",\"reattach\",\"status\"]}" \
    "{$P,\"type\":\"start\",\"requestId\":\"start:1\",\"sessionId\":\"demo\",\"cwd\":\"$remote_dir\"}" \
    "{$P,\"type\":\"turn\",\"requestId\":\"turn:1\",\"turnId\":\"turn-1\",\"content\":\"echo provider turn in \$(pwd); ls\"}"
  for _ in $(seq 300); do grep -q '"type":"final"\|"type":"failure"' "$out" 2>/dev/null && break; sleep 0.1; done
  printf '%s\n' "{$P,\"type\":\"cancel\",\"requestId\":\"cancel:1\"}"
  for _ in $(seq 100); do grep -q '"status":"closed"' "$out" 2>/dev/null && break; sleep 0.1; done
} | REMOTE_RUNNER_MACHINE=$machine REMOTE_RUNNER_REMOTE_CWD=$remote_dir REMOTE_RUNNER_TERMINAL=off \
    "$bin/botmux-remote-runner" >"$out"
while IFS= read -r line; do
  kind=$(printf '%s' "$line" | field type)
  case $kind in
    hello) echo "<- hello: provider $(printf '%s' "$line" | field provider), capabilities advertised" ;;
    ready) echo "<- ready: remote session $(printf '%s' "$line" | field remoteSessionId), generation 1" ;;
    status) echo "<- status: $(printf '%s' "$line" | field status)" ;;
    progress) echo "<- progress:"; printf '%s\n' "$line" | field content | sed 's/\\n/\n/g' | sed 's/^/     /' ;;
    final) echo "<- final:"; printf '%s\n' "$line" | sed -n 's/.*"content":"\(.*\)","state".*/\1/p' | sed 's/\\n/\n/g' | sed 's/^/     /' ;;
    *) echo "<- $line" ;;
  esac
done <"$out"

say "7. Destroy the session (records, logs and transcript are kept)"
rr session destroy --session "$session"
rr session list

say "Done"
echo "Everything above is recorded under $REMOTE_RUNNER_STATE_DIR (see: remote-runner session list, run list)."
