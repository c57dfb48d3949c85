# remote-runner code runtime: prepare a machine once per runtime (see
# engine/src/engine/code/mod.rs and docs/code-runtime.md). Run as the control script's `sh`
# verb; the host's values arrive as its parameters (shell variables, never script text):
#   rr_interp       the interpreter to look for (node or python3)
#   rr_runner_name  the runner's file name, runner-<hash>.js|py
#   rr_mark_max     the largest run mark (an RLIMIT_RTTIME hard limit, see run.sh)
#
# Prints, one per line: the runner directory (or missing-interpreter / missing-timeout alone),
# whether the runner is there already (present / absent), how runs can be isolated (sealed:
# run.sh's sealed run works here; pid: only a PID namespace of their own; none), and whether prlimit(1) can mark a run's processes with
# a hard limit up to rr_mark_max (mark / no-mark).
# shellcheck shell=sh
# shellcheck disable=SC2154 # rr_* are the host's parameters

umask 077
r=${XDG_STATE_HOME:-}
case $r in /*) ;; *) r=$HOME/.local/state ;; esac
d=$r/remote-runner/code
mkdir -p -- "$d" || exit 3
command -v -- "$rr_interp" >/dev/null 2>&1 || {
  echo missing-interpreter
  exit 0
}
command -v timeout >/dev/null 2>&1 || {
  echo missing-timeout
  exit 0
}
printf '%s\n' "$d"
if [ -f "$d/$rr_runner_name" ]; then echo present; else echo absent; fi
# The sealed run's steps (run.sh), on a tmpfs over the runner directory: no new privileges, a
# user, mount and PID namespace, a tmpfs mounted and remounted read-only, the second user
# namespace.
# shellcheck disable=SC2016 # expanded by that sh
if setpriv --no-new-privs \
  unshare --user --map-root-user --pid --fork --mount-proc --kill-child /bin/sh -c '
    mount -t tmpfs -o mode=700,size=64k,nosuid,nodev rr-probe "$3" &&
      mount -o remount,ro,nosuid,nodev rr-probe "$3" &&
      exec unshare --user --map-user="$1" --map-group="$2" /bin/sh -c "[ \"\$(id -u)\" = $1 ]"
  ' rr-probe "$(id -u)" "$(id -g)" "$d" </dev/null >/dev/null 2>&1; then
  echo sealed
elif unshare --user --map-current-user --pid --fork --mount-proc --kill-child true \
  </dev/null >/dev/null 2>&1; then
  echo pid
else
  echo none
fi
if prlimit "--rttime=$rr_mark_max:$rr_mark_max" true </dev/null >/dev/null 2>&1; then
  echo mark
else
  echo no-mark
fi
