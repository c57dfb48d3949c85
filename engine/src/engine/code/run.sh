# remote-runner code runtime: one run (see engine/src/engine/code/mod.rs and
# docs/code-runtime.md). Run as the control script's `sh` verb; the host's values arrive as its
# parameters (shell variables, never script text):
#   rr_run         the run's id (its marker, RR_CODE_RUN=<id>)
#   rr_mark        a number unique to the run: its processes' RLIMIT_RTTIME hard limit, when
#                  the machine's prlimit(1) can set it; empty: no such mark
#   rr_budget      the time budget in seconds, for timeout(1)
#   rr_interp      node or python3
#   rr_runner      the runner file's path
#   rr_cwd         the directory to run in (empty: the home)
#   rr_ns          sealed: run sealed (below); pid: in a PID namespace of its own only; 0: neither
#   rr_hide        a further directory to hide from a sealed run (the host's own state dir when
#                  the machine is this host: its keepers' sockets); empty: none
#   rr_fsize, rr_mem, rr_nproc   caps (512-byte blocks, KiB, processes); empty: the machine's
#   rr_sweep_only  1: only stop what is left of run rr_run, start nothing
#
# This process's stdin and stdout are the run's channel to the host. The runner gets them as
# fds 4 (in) and 3 (out); its own stdin is /dev/null and its fds 1 and 2 go to the channel's
# stderr, so nothing the program or its children print can be taken for a protocol message.
#
# The run's process tree: every process of the run carries RR_CODE_RUN=<run id> in its
# environment and, with rr_mark, the hard limit rr_mark on realtime CPU time (RLIMIT_RTTIME); with
# rr_ns=pid or sealed the runner runs in a PID namespace of its own (the kernel kills everything
# in it when the runner ends, setsid or not). When the runner ends, whatever is left in timeout(1)'s
# process group or still carries either mark is killed too (the fallback without namespaces).
# The limit is the mark a process cannot shed by accident: it survives env -i, setsid, a new
# process group and closed fds, and only a process that lowers its own hard limit on purpose
# loses it. It binds nothing: RLIMIT_RTTIME counts only realtime-scheduled CPU time, and the
# value is over twelve days of it.
# shellcheck shell=sh
# shellcheck disable=SC2154 # rr_* are the host's parameters

umask 077
exec 3>&1 4<&0

# rr_code_sweep ID [MARK]: kill every process whose environment holds RR_CODE_RUN=ID or whose
# RLIMIT_RTTIME hard limit is MARK (a number), until none is left (a process forking while it is
# swept is caught on the next pass).
rr_code_sweep() {
  case ${2-} in *[!0-9]*) set -- "$1" ;; esac
  rr_n=0
  while [ "$rr_n" -lt 50 ]; do
    rr_l=$(
      grep -l -s -z -x -F -e "RR_CODE_RUN=$1" /proc/[0-9]*/environ 2>/dev/null
      [ -z "${2-}" ] ||
        grep -l -s -E -e "^Max realtime timeout +[^ ]+ +$2 +us" /proc/[0-9]*/limits 2>/dev/null
    )
    [ -n "$rr_l" ] || return 0
    for rr_f in $rr_l; do
      rr_p=${rr_f#/proc/}
      kill -s KILL "${rr_p%/*}" 2>/dev/null
    done
    rr_n=$((rr_n + 1))
  done
}

# rr_check_runner FILE: FILE and every directory above it pass OpenSSH's StrictModes check, as
# the bootstrap line checks the control script; else print the refusal and fail. The check is
# the bootstrap line's own text (STRICT_MODES in engine/src/remote/mod.rs, which cannot live in
# a file), here word for word: engine/tests/remote_scripts.rs keeps the two the same. Leaves p
# empty when all is well, else `MODE UID PATH`.
# shellcheck disable=SC2012,SC2034 # ls -ldn: each path's mode and owner uid, other fields skipped
rr_check_runner() {
  f=$1
  u=$(id -u) p=$f; set -- "$f";
  while case $p in "$HOME"|/|"") false ;; */*) ;; *) false ;; esac; do
    p=${p%/*}; p=${p:-/}; set -- "$@" "$p"; done;
  p=$(LC_ALL=C ls -ldn -- "$@" 2>/dev/null | { k=0;
    while read -r m x o g s d1 d2 d3 name; do k=$((k+1));
      case $o in "$u"|0) ;; *) echo "$m $o $name"; exit ;; esac;
      case $m in [-d]????w*|[-d]???????w*) case $o/$m in 0/d????????t*) ;;
        *) echo "$m $o $name"; exit ;; esac ;; [-d]*) ;; *) echo "$m $o $name"; exit ;; esac;
    done; [ $k = $# ] || echo "- - $f"; });
  if [ -n "$p" ]; then
    printf 'remote-runner: refusing to run it: %s\n' "$p"
    return 1
  fi
}

if [ "${rr_sweep_only-}" = 1 ]; then
  rr_code_sweep "$rr_run" "${rr_mark-}"
  exit 0
fi

# The runner file and every directory above it must be the account's (or root's) and writable by
# no one else, checked right before it runs.
rr_check_runner "$rr_runner" >&2 || exit 93

if [ -n "$rr_cwd" ]; then
  cd -- "$rr_cwd" 2>/dev/null || exit 91
else
  cd 2>/dev/null || exit 91
fi
# Caps the host allows us to set: file size (512-byte blocks), address space (KiB), processes
# (`-u` in bash, `-p` in dash and busybox sh). Not all are POSIX: a refusal fails the run.
if [ -n "$rr_fsize" ]; then ulimit -f "$rr_fsize" 2>/dev/null || exit 92; fi
# shellcheck disable=SC3045
if [ -n "$rr_mem" ]; then ulimit -v "$rr_mem" 2>/dev/null || exit 92; fi
# shellcheck disable=SC3045
if [ -n "$rr_nproc" ]; then
  ulimit -u "$rr_nproc" 2>/dev/null || ulimit -p "$rr_nproc" 2>/dev/null || exit 92
fi

RR_CODE_RUN=$rr_run
export RR_CODE_RUN
case $rr_ns in
sealed)
  # The sealed run (docs/code-runtime.md): no new privileges; a user namespace in which the
  # account is root only long enough for rr_seal (below) to mount over what the run must not
  # reach; its own PID namespace and /proc. rr_seal then enters a second user namespace that
  # maps the account to its own uid and gid and keeps no capability over the first, so the
  # program can neither unmount nor remount what hides those directories.
  rr_u=$(id -u) rr_g=$(id -g)
  rr_root=${XDG_STATE_HOME:-}
  case $rr_root in /*) ;; *) rr_root=$HOME/.local/state ;; esac
  rr_root=$rr_root/remote-runner
  # The account's tmux servers: tmux's own socket directory (the default one, and the one under
  # TMUX_TMPDIR when that directory exists), made now (as tmux makes it) when it is missing,
  # so a server started during the run is hidden too.
  set -- "/tmp/tmux-$rr_u"
  case ${TMUX_TMPDIR:-} in /*) [ ! -d "$TMUX_TMPDIR" ] ||
    [ "$TMUX_TMPDIR/tmux-$rr_u" = "/tmp/tmux-$rr_u" ] || set -- "$@" "$TMUX_TMPDIR/tmux-$rr_u" ;;
  esac
  for rr_d in "$@"; do
    [ -d "$rr_d" ] || mkdir -m 700 -- "$rr_d" 2>/dev/null || exit 94
  done
  # The engine's default local state dir on this account (connection keepers' sockets) and the
  # host's own, when they exist.
  [ ! -d "$HOME/.remote-runner" ] || set -- "$@" "$HOME/.remote-runner"
  [ -z "${rr_hide-}" ] || [ ! -d "$rr_hide" ] || set -- "$@" "$rr_hide"
  # shellcheck disable=SC2016 # expanded by that sh
  rr_seal='
    u=$1 g=$2 root=$3 runner=$4 cwd=$5; shift 5
    exec 5<"$runner" || exit 94
    while [ "$1" != -- ]; do
      mount -t tmpfs -o mode=700,size=1m,nosuid,nodev rr-sealed "$1" || exit 94
      shift
    done
    shift
    # The state root: the runner is all a run needs of it, bound back read-only (from fd 5, as
    # its path is hidden by then; -c: the magic link is not resolved to that path) on a
    # read-only tmpfs.
    mkdir -p -- "$root" && mount -t tmpfs -o mode=700,size=1m,nosuid,nodev rr-sealed "$root" &&
      mkdir -p -- "${runner%/*}" && : >"$runner" &&
      mount -c --bind /proc/self/fd/5 "$runner" &&
      mount -c -o remount,bind,ro,nosuid,nodev "$runner" && exec 5<&- &&
      mount -o remount,ro,nosuid,nodev rr-sealed "$root" || exit 94
    cd -- "$cwd" 2>/dev/null || exit 91
    exec unshare --user --map-user="$u" --map-group="$g" /bin/sh -c "\"\$@\"; exit \$?" rr-code "$@"
  '
  case $rr_runner in "$rr_root"/*) ;; *) exit 94 ;; esac
  set -- setpriv --no-new-privs \
    unshare --user --map-root-user --pid --fork --mount-proc --kill-child \
    /bin/sh -c "$rr_seal" rr-seal "$rr_u" "$rr_g" "$rr_root" "$rr_runner" "$(pwd -P)" "$@" --
  ;;
pid)
  # A small sh is the namespace's first process (the runner's signals then act as anywhere:
  # the kernel drops signals an init sends itself); the namespace ends when it does.
  # shellcheck disable=SC2016 # expanded by that sh
  set -- unshare --user --map-current-user --pid --fork --mount-proc --kill-child \
    /bin/sh -c '"$@"; exit $?' rr-code
  ;;
*) set -- ;;
esac
if [ -n "${rr_mark-}" ]; then
  # prlimit execs timeout(1) with the mark set: the same pid, the same process group.
  prlimit "--rttime=$rr_mark:$rr_mark" -- \
    timeout -k 1 "$rr_budget" "$@" "$rr_interp" "$rr_runner" </dev/null 1>&2 &
else
  timeout -k 1 "$rr_budget" "$@" "$rr_interp" "$rr_runner" </dev/null 1>&2 &
fi
rr_t=$!
wait "$rr_t"
rr_s=$?
# timeout(1) leads a process group of its own: what is left in it goes too, a child that
# cleared its environment (no marker) but stayed in the run's group included.
kill -9 "-$rr_t" 2>/dev/null
rr_code_sweep "$rr_run" "${rr_mark-}"
exit "$rr_s"
