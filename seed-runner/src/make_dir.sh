# seed-runner: make the remote work dir and its artifacts/ (POSIX sh). Prefixed by ops.rs with
# `d=` (the dir; "$HOME"/... for a path in the home). Prints the absolute work dir, then the
# topmost directory this call made, if any (mount create takes it back when it fails later).
# shellcheck shell=sh disable=SC2154
t=$d
top=
while [ -n "$t" ] && [ ! -e "$t" ]; do
  top=$t
  t=${t%/*}
done
mkdir -p -- "$d/artifacts" || exit 1
cd -- "$d" || exit 1
pwd -P
if [ -n "$top" ]; then (cd -- "$top" && pwd -P); fi
