# The machine's side of a tree upload as one tar stream (POSIX sh; see tree_stream.rs).
# Run through the control plane's `sh` verb, after these assignments:
#   RR_STEP   extract: make RR_STAGE (and its parent), say "rr-tree:ready", unpack stdin into it
#             commit: move what RR_STAGE holds to RR_DEST, then run RR_MODES, remove RR_STAGE
#             abort: remove RR_STAGE
#   RR_TAR    the tar program ("rr-tree:no-tar" and exit 0 when the machine has none)
#   RR_STAGE  the staging directory: a hidden name next to RR_DEST, or inside it when it exists
#   RR_DEST   the destination directory
#   RR_MODES  commands setting the final directory modes (chmod), deepest first
# Every file reaches its final name by rename(2) (mv on the same file system): complete or not
# at all. A destination that does not exist yet is the staging directory renamed in one step.

# rr_files REL: move the non-directories of $RR_STAGE$REL into $RR_DEST$REL (one mv for all,
# or one each when the list is too long for one).
rr_files() {
  rr_to=$RR_DEST$1/
  rr_from=$RR_STAGE$1
  set --
  for rr_f in "$rr_from"/* "$rr_from"/.[!.]* "$rr_from"/..?*; do
    { [ -e "$rr_f" ] || [ -L "$rr_f" ]; } || continue
    if [ -d "$rr_f" ] && [ ! -L "$rr_f" ]; then continue; fi
    set -- "$@" "$rr_f"
  done
  [ $# -eq 0 ] && return 0
  mv -f -- "$@" "$rr_to" 2>/dev/null && return 0
  for rr_f; do
    if [ -e "$rr_f" ] || [ -L "$rr_f" ]; then mv -f -- "$rr_f" "$rr_to" || return 1; fi
  done
}

# rr_merge REL: merge the staged directory REL ("" for the root) into the destination.
rr_merge() {
  mkdir -p -- "$RR_DEST$1" || return 1
  rr_files "$1" || return 1
  for rr_d in "$RR_STAGE$1"/* "$RR_STAGE$1"/.[!.]* "$RR_STAGE$1"/..?*; do
    if [ -d "$rr_d" ] && [ ! -L "$rr_d" ]; then rr_merge "$1/${rr_d##*/}" || return 1; fi
  done
}

case $RR_STEP in
extract)
  command -v "$RR_TAR" >/dev/null 2>&1 || { echo 'rr-tree:no-tar'; exit 0; }
  mkdir -p -- "${RR_STAGE%/*}" && mkdir -- "$RR_STAGE" && cd -- "$RR_STAGE" || exit 1
  echo 'rr-tree:ready'
  # -p: the modes of the archive, not the umask; -o: files owned by this account.
  "$RR_TAR" -x -p -o -f - || { cd / && rm -rf -- "$RR_STAGE"; exit 1; }
  echo 'rr-tree:extracted'
  ;;
commit)
  if [ -e "$RR_DEST" ] || [ -L "$RR_DEST" ]; then
    rr_merge ''
  else
    mv -- "$RR_STAGE" "$RR_DEST"
  fi
  rr_s=$?
  rm -rf -- "$RR_STAGE"
  [ "$rr_s" = 0 ] || exit "$rr_s"
  eval "$RR_MODES"
  ;;
abort)
  rm -rf -- "$RR_STAGE"
  ;;
esac
