# shellcheck shell=sh
# seed-runner: the program in the pane of `seed_<session_id>` on the user's default tmux server
# (POSIX sh; arguments: tmux path, the engine's socket name, the engine's tmux session). It is
# a tmux client of the engine's session, which runs on its own socket: attaching to
# `seed_<session_id>` shows the pane the commands run in, and what is typed there reaches it.
# The client does not resize that pane (ignore-size; tmux older than 3.2 has no such flag and
# attaches plainly). A client detached from inside attaches again; when the engine's session
# ends, so does this, and with it `seed_<session_id>`.
unset TMUX
while "$1" -L "$2" has-session -t "=$3" 2>/dev/null; do
  "$1" -L "$2" attach-session -f ignore-size -t "=$3" 2>/dev/null ||
    "$1" -L "$2" attach-session -t "=$3" 2>/dev/null || sleep 1
done
