#!/usr/bin/env bash
# The main job end to end, every step checked: a persistent session whose shell state carries
# over, a failing command's exact exit code, a background command, a file put and get (sha256
# compared on both sides), a `run once` whose artifact is downloaded, one provider turn driven
# as the BotMux host drives it (hello, start, wait for ready, turn, wait for its final with the
# expected text, cancel, closed), and a clean destroy. The first step whose result is wrong
# stops the demo: it names the step on stderr and exits 1.
#
#   scripts/demo.sh              # on the built-in `local` machine (this host, no SSH)
#   scripts/demo.sh MACHINE_ID   # on a machine added with `remote-runner machine add`
#   RR_MACHINE=MACHINE_ID scripts/demo.sh
#   RR_DEMO_PROVIDER=PATH scripts/demo.sh   # step 7 against another provider program
#
# Installs only what the main job needs when it is missing (scripts/install-deps.sh --demo:
# tmux, the OpenSSH client, and gcc to build with), builds the binaries, and keeps its state in a fresh directory
# unless REMOTE_RUNNER_STATE_DIR is set (needed for your own machines).
# The remote commands are single-quoted on purpose: the session's shell expands them.
# shellcheck disable=SC2016
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH"

machine=${1:-${RR_MACHINE:-local}}
if [ -t 1 ]; then bold=$'\033[1m' red=$'\033[31m' plain=$'\033[0m'; else bold='' red='' plain=''; fi
step=0 title="setup"
say() { step=$1 title=$2; printf '\n%s== %s. %s%s\n' "$bold" "$step" "$title" "$plain"; }
ok() { printf '   ok: %s\n' "$*"; }
show() { sed 's/^/     /'; }
fail() {
  printf '\n%sdemo: step %s (%s) failed:%s %s\n' "$red" "$step" "$title" "$plain" "$*" >&2
  exit 1
}
# A command that fails where the demo did not expect it also names its step.
trap 'rc=$?; fail "\`$BASH_COMMAND\` exited with $rc"' ERR
field() { sed -n "s/^  \"$1\": *\"\\{0,1\\}\\([^\",]*\\)\"\\{0,1\\},\\{0,1\\}\$/\\1/p" | head -n 1; }
sha() { sha256sum "$1" | cut -d' ' -f1; }

bash scripts/install-deps.sh --demo
printf '%sbuilding remote-runner, botmux-remote-runner and botmux-host-turn%s\n' "$bold" "$plain"
cargo build -q -p remote-runner -p remote-runner-provider -p remote-runner-conformance
bin=$PWD/target/debug
provider=${RR_DEMO_PROVIDER:-$bin/botmux-remote-runner}
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

session=""
cleanup() {
  # A failed demo leaves no running session behind (its records stay).
  if [ -n "$session" ]; then rr session destroy --session "$session" >/dev/null 2>&1 || true; fi
}
trap cleanup EXIT

say 1 "A persistent session on '$machine'"
if [ "$machine" = local ]; then
  remote_dir=$work/remote
  mkdir -p "$remote_dir"
  created=$(rr session create --machine local --cwd "$remote_dir" --json)
else
  created=$(rr session create --machine "$machine" --json)
fi
session=$(field session_id <<<"$created")
[ "$(field status <<<"$created")" = active ] || fail "the new session is not active: $created"
if [ "$machine" != local ]; then
  remote_dir=$(field cwd <<<"$created")/remote-runner-demo-$$
  rr session exec --session "$session" --cmd "mkdir -p '$remote_dir'" --exit-code >/dev/null
fi
ok "session $session is active, working in $remote_dir"

say 2 "Commands share one shell: cd, export and functions persist"
setup="cd '$remote_dir' && export GREETING='hello from remote-runner'; shout() { echo \"\$*\" | tr a-z A-Z; }"
check='echo "$GREETING in $(pwd)"; shout it works'
echo "   \$ $setup"
rr session exec --session "$session" --cmd "$setup" --exit-code
echo "   \$ $check"
got=$(rr session exec --session "$session" --cmd "$check" --exit-code)
show <<<"$got"
want=$(printf 'hello from remote-runner in %s\nIT WORKS' "$remote_dir")
[ "$got" = "$want" ] || fail "expected the second command to see the first one's cd, variable and function: wanted $(printf %q "$want"), got $(printf %q "$got")"
ok "the second command saw the first one's cd, variable and function"

say 3 "A failing command keeps its exact exit code (and the session)"
echo "   \$ echo to-stderr >&2; (exit 7)"
rc=0
rr session exec --session "$session" --cmd 'echo to-stderr >&2; (exit 7)' --exit-code 2>&1 | show || rc=${PIPESTATUS[0]}
[ "$rc" -eq 7 ] || fail "expected exit code 7 (--exit-code), got $rc"
still=$(rr session exec --session "$session" --cmd 'echo "still in $(pwd)"' --exit-code)
[ "$still" = "still in $remote_dir" ] || fail "the session did not survive the failing command: $still"
ok "exit code 7, and the shell is still in $remote_dir"

say 4 "A background command, then wait for it"
bg=$(rr session exec --session "$session" --mode background --cmd 'sleep 1; echo background-done > bg.txt; echo finished' --json | field command_id)
[ -n "$bg" ] || fail "no command_id for the background command"
echo "   started $bg in the background"
waited=$(rr session command wait --session "$session" --command-id "$bg" --json)
{ [ "$(field status <<<"$waited")" = completed ] && [ "$(field exit_code <<<"$waited")" = 0 ] &&
  [ "$(field stdout <<<"$waited")" = 'finished\n' ]; } ||
  fail "expected completed, exit 0, stdout finished: $(grep -E '"(status|exit_code|stdout)"' <<<"$waited" | tr -s ' \n' ' ')"
ok "completed with exit code 0 and stdout 'finished'"

say 5 "Put a file, get one back: sha256 checked on both sides"
printf 'line one\nline two\nline three\n' >"$work/input.txt"
put=$(rr file put --session "$session" --local "$work/input.txt" --remote "$remote_dir/input.txt" --verify --json)
remote_sum=$(rr session exec --session "$session" --cmd 'sha256sum input.txt' --exit-code | cut -d' ' -f1)
{ [ "$(field status <<<"$put")" = succeeded ] && [ "$(field sha256 <<<"$put")" = "$(sha "$work/input.txt")" ] &&
  [ "$remote_sum" = "$(sha "$work/input.txt")" ]; } ||
  fail "put: local $(sha "$work/input.txt"), transfer $(field sha256 <<<"$put") ($(field status <<<"$put")), remote $remote_sum"
ok "put input.txt: sha256 ${remote_sum:0:16}... here and there"
get=$(rr file get --session "$session" --remote "$remote_dir/bg.txt" --local "$work/bg-copy.txt" --verify --json)
remote_sum=$(rr session exec --session "$session" --cmd 'sha256sum bg.txt' --exit-code | cut -d' ' -f1)
{ [ "$(field status <<<"$get")" = succeeded ] && [ "$remote_sum" = "$(sha "$work/bg-copy.txt")" ] &&
  [ "$(cat "$work/bg-copy.txt")" = background-done ]; } ||
  fail "get: remote $remote_sum, local $(sha "$work/bg-copy.txt"), content $(cat "$work/bg-copy.txt" 2>&1)"
ok "got bg.txt ('background-done', written by step 4): sha256 ${remote_sum:0:16}... here and there"

say 6 "run once: a fresh session, inputs up, command, artifact down, manifest kept"
run=$(rr run once --machine "$machine" --cwd "$remote_dir" \
  --input "$work/input.txt=$remote_dir/run-input.txt" \
  --cmd 'sort -r run-input.txt > sorted.txt' \
  --artifact "$remote_dir/sorted.txt=$work/sorted.txt" --exit-code --json)
run_id=$(field run_id <<<"$run")
want=$(sort -r "$work/input.txt")
{ [ "$(field status <<<"$run")" = succeeded ] && [ "$(cat "$work/sorted.txt")" = "$want" ] &&
  [ -s "$REMOTE_RUNNER_STATE_DIR/runs/$run_id/manifest.json" ]; } ||
  fail "run $run_id: status $(field status <<<"$run"), artifact $(tr '\n' '|' <"$work/sorted.txt" 2>&1)"
ok "run $run_id succeeded; artifact sorted.txt is $(tr '\n' '|' <"$work/sorted.txt"); manifest kept"

say 7 "One provider turn through the BotMux protocol, as the host drives it"
content='echo provider turn in $(pwd); ls'
echo "   -> hello, start; after ready: turn \"$content\"; after final: cancel"
rc=0
REMOTE_RUNNER_MACHINE=$machine REMOTE_RUNNER_REMOTE_CWD=$remote_dir REMOTE_RUNNER_TERMINAL=off \
  "$bin/botmux-host-turn" --cwd "$remote_dir" --content "$content" \
  --expect "provider turn in $remote_dir" -- "$provider" 2>"$work/host-turn.err" | show || rc=${PIPESTATUS[0]}
[ "$rc" -eq 0 ] || fail "$(cat "$work/host-turn.err")"
ok "ready, then the turn's final with the expected text, then a clean close"

say 8 "Destroy the session (records, logs and transcript are kept)"
destroyed=$(rr session destroy --session "$session" --json)
[ "$(field status <<<"$destroyed")" = destroyed ] || fail "destroy answered: $destroyed"
rc=0
rr session exec --session "$session" --cmd true >/dev/null 2>&1 || rc=$?
[ "$rc" -ne 0 ] || fail "the destroyed session still runs commands"
[ "$(rr session show --session "$session" --json | field status)" = destroyed ] ||
  fail "the record does not say destroyed"
session=""
ok "destroyed; a command sent to it is refused; its records stay"

printf '\n%sdemo: all 8 steps checked%s\n' "$bold" "$plain"
echo "Everything above is recorded under $REMOTE_RUNNER_STATE_DIR (see: remote-runner session list, run list)."
