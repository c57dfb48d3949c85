# seed-runner: which inputs a command deleted or changed (POSIX sh). Prefixed by tree.rs with
# `root=` (the work dir) and `stamp=` (relative to it); stdin: one `<kind> <path>` per line
# (kind f: a file, gone or modified at or after the stamp; F: a file sent just before the
# command, gone or modified after the stamp; d, l: a directory or symlink, gone). Prints the
# paths, one per line. Nothing when the work dir or the stamp is gone.
# `-nt` is not POSIX, but dash, bash, busybox sh and ksh all have it (tested under the first
# three by tests/remote_scripts.rs); `find -newer` would cost a process per input.
# shellcheck shell=sh disable=SC2154,SC3013
cd -- "$root" 2>/dev/null || exit 0
[ -e "$stamp" ] || exit 0
while IFS= read -r l; do
  k=${l%% *}
  p=${l#* }
  if [ ! -e "$p" ] && [ ! -L "$p" ]; then
    printf '%s\n' "$p"
  elif [ "$k" = f ] && [ ! -L "$p" ] && ! [ "$stamp" -nt "$p" ]; then
    printf '%s\n' "$p"
  elif [ "$k" = F ] && [ ! -L "$p" ] && [ "$p" -nt "$stamp" ]; then
    printf '%s\n' "$p"
  fi
done
exit 0
