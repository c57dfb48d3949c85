# seed-runner's wrapper for one `session exec` (bash), sourced by the session shell in the tmux
# pane. Rendered by wrapper.rs: each @NAME@ is replaced by a shell-quoted value. See wrapper.rs.
# shellcheck shell=bash disable=SC2016
(
__seed_cmd=@CMD@
__seed_log=@LOG@
__seed_end=@END@
# The work dir, with the artifacts/ mount create made in it; else nothing runs (exit 125) and
# the engine's stdout says why.
if ! \builtin cd -- @WORK@ 2>/dev/null || [ ! -d artifacts ]; then
  \builtin printf '%s\n' @MISSING@
  exit 125
fi
if [ ! -d @DIR@ ]; then \command -p mkdir -p -- @DIR@ || exit 125; fi
# The stamp: what changed after it, the command changed.
: >|@DIR@/.seed_start
# Each line with its UTC second. The end line (nonce, exit code) closes the log; the rest of
# the pipe (what background jobs print later) goes to a detached reader.
__seed_ts() {
  export TZ=UTC0
  while IFS= read -r __seed_l || [[ -n $__seed_l ]]; do
    if [[ $__seed_l == *"$__seed_end "* ]]; then
      __seed_p=${__seed_l%%"$__seed_end "*}
      if [[ -n $__seed_p ]]; then printf '[%(%Y-%m-%dT%H:%M:%SZ)T] %s\n' -1 "$__seed_p"; fi
      printf '[%(%Y-%m-%dT%H:%M:%SZ)T] $ exit_code: %s\n' -1 "${__seed_l##*"$__seed_end "}"
      __seed_rest <&0 >/dev/null 2>&1 &
      return 0
    fi
    printf '[%(%Y-%m-%dT%H:%M:%SZ)T] %s\n' -1 "$__seed_l"
  done
}
__seed_rest() {
  trap '' HUP INT
  while IFS= read -r __seed_l || [[ -n $__seed_l ]]; do
    printf '[%(%Y-%m-%dT%H:%M:%SZ)T] %s\n' -1 "$__seed_l" >>"${__seed_log%.log}.bg.log"
  done
}
printf '$ %s\n' "$__seed_cmd" | __seed_ts >|"$__seed_log"
# stdin stays the pane's terminal.
{
  (eval "$__seed_cmd")
  __seed_rc=$?
  printf '%s %s\n' "$__seed_end" "$__seed_rc"
  exit "$__seed_rc"
} 2>&1 | __seed_ts >>"$__seed_log"
exit "${PIPESTATUS[0]}"
)
