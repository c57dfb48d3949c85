# seed-runner: remove the `seed_<session_id>` name (POSIX sh), before or after the engine ends
# its session. Prefixed by tmux_name.rs with T=, S=, E= and N= as for tmux_name.sh. Prints the
# pid of the engine pane's first process: the terminal session its commands (and their `&`
# jobs) run in. The name is removed only when it is this session's: once the session is gone,
# another state dir may have taken the same name for its own.
# shellcheck shell=sh disable=SC2154,SC2016
"$T" -L "$S" list-panes -t "=$E" -F '#{pane_pid}' 2>/dev/null | head -n 1
if [ "$("$T" display-message -p -t "=$N:" '#{@seed_engine}' 2>/dev/null)" = "$E" ]; then
  "$T" kill-session -t "=$N" 2>/dev/null
fi
exit 0
