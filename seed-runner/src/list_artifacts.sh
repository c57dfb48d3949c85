# seed-runner: the files under the remote `artifacts/` (POSIX sh; GNU find). Prefixed by
# sync.rs with `dir=` (the artifacts dir). Prints `<path>\0<size>\0<mtime>\0` for each regular
# file, the path relative to the dir; nothing when the dir is gone.
# shellcheck shell=sh disable=SC2154
cd -- "$dir" 2>/dev/null || exit 0
exec find . -type f -printf '%P\0%s\0%T@\0'
