# seed-runner: make the local tree's directories and symlinks in the remote work dir (POSIX
# sh). Prefixed by tree.rs with `root=` (the work dir); stdin: one change a line, in this
# order: `d <path>` (make the directory, parents too), `l <path>` and then `t <target>` (make
# the symlink, replacing what is there), `L <path>` (remove it if it is a symlink), `r <path>`
# (remove the directory if it is empty). Every line starts with a kind and a space, so none
# can be tree.rs's here-document end word. The directories are made in one mkdir.
# shellcheck shell=sh disable=SC2154
cd -- "$root" || exit 1
set --
while IFS= read -r l; do
  k=${l%% *}
  p=${l#* }
  if [ "$k" = d ]; then
    set -- "$@" "$p"
    continue
  fi
  if [ $# -gt 0 ]; then
    mkdir -p -- "$@" || exit 1
    set --
  fi
  case $k in
    l)
      IFS= read -r t || exit 1
      t=${t#t }
      { rm -f -- "$p" && ln -s -- "$t" "$p"; } || exit 1
      ;;
    L) if [ -L "$p" ]; then rm -f -- "$p"; fi ;;
    r) rmdir -- "$p" 2>/dev/null ;;
  esac
done
if [ $# -gt 0 ]; then mkdir -p -- "$@" || exit 1; fi
exit 0
