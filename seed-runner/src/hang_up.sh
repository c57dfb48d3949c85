# seed-runner: hang up what is left of a closed pane's terminal session (POSIX sh). Prefixed by
# tmux_name.rs with `sid=` (the session id: the pid of the pane's first process). Only the login
# user's processes; a process that ignores SIGHUP (under `nohup`) goes on.
# shellcheck shell=sh disable=SC2154
pkill -HUP -s "$sid" -u "$(id -u)" 2>/dev/null
exit 0
